//! The eframe app: `logic` polls the worker and the background threads, `ui` lets the views draw
//! plain data ([`ViewData`]) and collect [`Command`]s, and [`AttnvizApp::run_command`] handles
//! every command of the frame in one place.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use crate::analysis::long::LongView;
use crate::analysis::{Run, Stack};
use crate::export::{Figure, Style, export_file};
use crate::model::default_model_dir;
use crate::model::hub::CachedModel;
use crate::render::Theme;

use super::command::{Command, Commands, Setting};
use super::data::{FlowKey, FlowResult, Generation, Status, ViewData};
use super::derive::{DeriveKey, Derived, DerivedValue, Deriver};
use super::readout::{DlaKey, EffectKey, EffectShown};
use super::state::{CompareMode, CompareSource, PeFigure, RolloutMode, Settings, Source, ThemeChoice, View};
use super::views::Views;
use super::worker::{Done, Job, LongRequest, ModelInfo, RunSpec, Worker};
use crate::model::PlaygroundConfig;

/// Random tokens in each half of the app's probe (as `attnviz heads`; fewer on a short model).
pub const PROBE_HALF: usize = 24;

/// Key of the settings in eframe's storage.
const SETTINGS_KEY: &str = "attnviz-settings";

/// Settings are written this long after their last change (a kill — SIGTERM, a crash — loses at
/// most this much; typing does not write at every keystroke).
pub const SAVE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// While background work goes on, the UI draws one frame this often (spinners turn), and none in
/// the first: see [`AttnvizApp::logic`].
pub const BUSY_FRAME: std::time::Duration = std::time::Duration::from_millis(250);

/// Longest a keystroke's frame waits for the run it asked for: see [`AttnvizApp::ui`].
pub const KEY_WAIT: std::time::Duration = std::time::Duration::from_millis(30);

/// How the app starts: the command line's `--model`, `--text`, `--text-pair`.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    /// Model folder to load instead of the remembered one.
    pub model_dir: Option<PathBuf>,
    /// Sentence A to start with.
    pub text: Option<String>,
    /// The Hugging Face cache to list models from (None: where Python keeps it).
    pub hf_cache: Option<PathBuf>,
    /// Sentence B to start with.
    pub text_pair: Option<String>,
    /// The folder a relative export path is taken from (None: the process's working directory).
    pub work_dir: Option<PathBuf>,
    /// The folder exports go to until one is written elsewhere (None: `$HOME`).
    pub home: Option<PathBuf>,
    /// An attention file to open ([`crate::analysis::import`]).
    pub attention_file: Option<PathBuf>,
    /// Longest a keystroke's frame waits for its run (None: [`KEY_WAIT`]; tests, on a machine
    /// busy with other tests, wait longer).
    pub key_wait: Option<std::time::Duration>,
}

/// Results of background tasks other than inference and derived data.
enum Background {
    /// Attention flow finished.
    Flow(FlowResult),
    /// A PNG export finished.
    Exported(PathBuf, Result<(u32, u32), String>),
    /// The current figure drawn for the clipboard, or why it could not be.
    Copied(Result<egui::ColorImage, String>),
    /// A native folder dialog returned (None: cancelled or unavailable).
    PickedModel(Option<PathBuf>),
    /// A native save dialog returned.
    PickedExport(Option<PathBuf>),
    /// A native file dialog for an attention file returned.
    PickedAttention(Option<PathBuf>),
    /// An attention file was read (or why not).
    OpenedAttention(PathBuf, Result<Arc<Run>, String>),
    /// The scan of the local Hugging Face cache finished.
    CachedModels(Vec<CachedModel>),
    /// A native folder dialog for saving a trained model returned.
    PickedSave(Option<PathBuf>),
}

/// A model run as it came from the worker, with the id word merges are keyed on.
#[derive(Clone)]
struct TokenRun {
    /// Unique id of this result.
    source_id: u64,
    run: Arc<Run>,
    /// For a long input (`run` is its overview): its window at token level.
    window: Option<Arc<Run>>,
}

/// What a run is of: sentence A, sentence B, an encoder–decoder's target, the model.
type RunInput = (String, Option<String>, Option<String>, RunSpec);

/// What the pretrained model showed when the playground was opened: given back on the way
/// back when its input is still the one asked for (a generation is not written again).
struct Parked {
    /// The run shown (a generation's prompt and continuation).
    token_run: TokenRun,
    /// What it was the run of.
    input: RunInput,
    /// The generation it came from, if any.
    generation: Option<Generation>,
    /// Tokenizer + model time of that run.
    inference_ms: f64,
    /// The status bar's message then.
    status: Option<Status>,
    /// The pinned token.
    pinned: Option<super::state::TokenSelection>,
}

/// Said by views that run the model when an attention file is shown (`{what}`: what they need).
pub const FILE_NEEDS_MODEL: &str = "This view needs the model: an attention file holds attention only, and {what} the model's residual stream through its unembedding. Open the model (side panel) to use it.";

/// Said above every view when an encoder–decoder has no target yet.
pub const NO_TARGET_NOTE: &str = "Encoder alone: this encoder–decoder has no target yet. Type a Target (or press Translate) to see the decoder's self-attention and its cross-attention to the source.";

/// The model a run of `settings` uses (`playground`: the last valid playground hyperparameters).
fn run_spec(settings: &Settings, playground: &PlaygroundConfig) -> RunSpec {
    match settings.source {
        Source::Pretrained => {
            let long = LongRequest { record_tokens: settings.record_tokens, window_start: settings.window_start };
            RunSpec::Pretrained(settings.interventions.clone(), Some(long))
        }
        Source::Playground => RunSpec::Playground(playground.clone()),
        Source::File => RunSpec::File(settings.attention_file.clone().unwrap_or_default()),
    }
}

/// What the next run of `settings` is of: the sentences, the target and the model (an attention
/// file is the same run whatever the sentence boxes hold).
fn run_input(settings: &Settings, session: &Session) -> RunInput {
    let spec = run_spec(settings, &session.playground_active);
    if matches!(spec, RunSpec::File(_)) {
        return (String::new(), None, None, spec);
    }
    (settings.text.clone(), settings.pair().map(str::to_string), session.run_target(settings), spec)
}

/// What the app knows besides the settings: the model, the runs, what is in flight. Views never
/// see it; they get [`ViewData`].
#[allow(clippy::struct_excessive_bools)] // independent flags of different tasks, not a state machine
pub struct Session {
    worker: Worker,
    deriver: Deriver,
    next_id: u64,
    /// The loaded model.
    pub model: Option<ModelInfo>,
    /// A model folder being loaded.
    pub loading: Option<PathBuf>,
    /// Why the last load failed.
    pub load_error: Option<String>,
    /// Whether the load in flight was asked for by the user (then its model is shown, even if the
    /// playground was); the load at launch keeps the remembered choice.
    switch_on_load: bool,
    /// The run the views show: the model's run, merged into words when that toggle is on.
    pub run: Option<Arc<Run>>,
    /// The model's run as it came (token level).
    token_run: Option<TokenRun>,
    /// Changes whenever `run` does (a new run, or the word toggle): what view caches key on.
    pub view_id: u64,
    /// What `run` was made from: the token run's id, the word toggle and the stack (None while
    /// merging).
    shown_from: Option<(u64, bool, Stack, LongView)>,
    /// The comparison's run B as the views show it (merged into words with the toggle).
    pub run_b: Option<Arc<Run>>,
    /// Run B as it came.
    token_run_b: Option<TokenRun>,
    /// What `run_b` was made from.
    shown_b_from: Option<(u64, bool, Stack, LongView)>,
    /// Id of run B shown, and of the newest asked for.
    pub compare_id: u64,
    /// Newest comparison requested.
    pub requested_compare_id: u64,
    requested_compare: Option<RunInput>,
    /// Why run B failed, or why there is none.
    pub compare_error: Option<String>,
    /// Attention flow computed in the background.
    pub flow: Option<FlowResult>,
    /// A flow computation in progress.
    pub flow_pending: Option<FlowKey>,
    /// Request id of the run shown.
    pub run_id: u64,
    /// Newest run requested.
    pub requested_run_id: u64,
    /// Input and model of the newest run requested.
    requested_input: Option<RunInput>,
    /// Runs asked for and not answered yet, with their input.
    in_flight: Vec<(u64, RunInput)>,
    /// Input and model of the run shown (or of the failed run whose error is shown).
    shown_input: Option<RunInput>,
    /// The playground hyperparameters that run (the last valid ones).
    pub playground_active: PlaygroundConfig,
    /// The playground hyperparameter at fault, and why.
    pub playground_error: Option<(&'static str, String)>,
    /// Why the last run failed.
    pub run_error: Option<String>,
    /// Tokenizer + model time of the run shown.
    pub inference_ms: f64,
    /// When the frame that asked for the newest run began (the keystroke's frame), and when a
    /// frame first drew that run: logged once everything derived from it is drawn, if
    /// `ATTNVIZ_TYPING_LOG` is set (`scripts/bench-typing.sh`).
    typed: Option<(u64, Instant, Option<Instant>)>,
    /// The newest run asked for by an edit of the text alone (the model and everything else as
    /// shown), and the worker's time for the last such run answered: whether the next edit's
    /// frame waits for its run.
    edit_run: Option<u64>,
    edit_run_ms: Option<f64>,
    /// The run this frame waits for before it is drawn (an edit expected to be quick).
    hold_for: Option<u64>,
    /// Longest a keystroke's frame waits for its run ([`KEY_WAIT`]).
    key_wait: std::time::Duration,
    /// When the frame being drawn began.
    frame_started: Instant,
    /// Since when background work (other than a generation writing) has been going on.
    busy_since: Option<Instant>,
    /// Pinned token in the head view.
    pub pinned: Option<super::state::TokenSelection>,
    /// An export being written.
    pub exporting: Option<PathBuf>,
    /// The last status message.
    pub status: Option<Status>,
    background_tx: Sender<Background>,
    background_rx: Receiver<Background>,
    /// Models found in the local Hugging Face cache (None while the scan runs).
    pub cached_models: Option<Vec<CachedModel>>,
    /// Smoothed CPU time of a whole frame (layout, tessellation, painting), in milliseconds.
    pub frame_ms: f32,
    /// Derived data of the shown run, computed on the derive thread.
    pub derived: Derived,
    applied_theme: Option<ThemeChoice>,
    /// The generation shown or in progress (the shown run is its prompt and continuation).
    pub generation: Option<Generation>,
    /// A generation's run arrived: its newest written token is pinned when the run is shown.
    follow_written: bool,
    /// The logit lens of the token run, as far as it is computed.
    pub lens: super::lens::LensState,
    /// Why the logit lens does not apply to what is shown (None: it does).
    pub lens_refusal: Option<String>,
    /// The attribution shown: what it is of, the result, milliseconds it took.
    pub dla: Option<(DlaKey, Result<Arc<crate::analysis::attribution::Attribution>, String>, f64)>,
    /// The attribution asked for and not back yet.
    pub dla_pending: Option<DlaKey>,
    /// The selected head's effect shown.
    pub effect: Option<(EffectKey, Result<Arc<EffectShown>, String>)>,
    /// The effect asked for and not back yet.
    pub effect_pending: Option<EffectKey>,
    /// The contribution graph shown: the token run it is of, the graph, milliseconds it took.
    pub graph: Option<(u64, Result<Arc<super::readout::GraphShown>, String>, f64)>,
    /// The token run whose graph is being computed.
    pub graph_pending: Option<u64>,
    /// Id of the last probe of repeated random tokens asked for.
    probe_id: u64,
    /// Whether the run shown is that probe (not the text).
    pub probe_shown: bool,
    /// Why the contribution graph does not apply (None: it does).
    pub graph_refusal: Option<String>,
    /// The training lab's run, if one was started.
    pub lab: Option<super::lab::Lab>,
    /// Whether the training lab's panel is open.
    pub lab_open: bool,
    /// What the lab replaced: the model folder and the text, restored when it closes.
    lab_return: Option<(PathBuf, String, bool)>,
    /// The pretrained model's run while the playground is shown.
    parked: Option<Parked>,
    /// An attention file being read.
    pub opening: Option<PathBuf>,
    /// An attention file picked in a dialog, opened at the next frame.
    pending_open: Option<PathBuf>,
    /// The layer and heads selected on the sources not shown (each keeps its own).
    selections: Vec<(Source, (usize, Vec<bool>))>,
    /// The settings last written to storage.
    saved: Option<Settings>,
    /// Settings changed since they were saved: as they were last seen, and since when.
    unsaved: Option<(Settings, Instant)>,
}

impl Session {
    /// Asks the worker for a head's effect unless it is shown or asked for already.
    fn request_effect(
        &mut self,
        key: EffectKey,
        tokens: Arc<crate::analysis::tokens::Tokens>,
        iv: crate::model::Interventions,
    ) {
        if self.effect.as_ref().is_none_or(|e| e.0 != key) && self.effect_pending.as_ref() != Some(&key) {
            self.next_id += 1;
            self.effect_pending = Some(key.clone());
            self.worker.send(Job::HeadEffect { id: self.next_id, key, tokens, interventions: iv });
        }
    }

    /// Whether the run shown is the run of `settings`' text and model (or no run, or a failed
    /// one, is shown): what a settled app must always satisfy.
    pub fn shown_input_matches(&self, settings: &Settings) -> bool {
        if self.run.is_none() || self.run_error.is_some() {
            return true;
        }
        self.shown_input.as_ref() == Some(&run_input(settings, self))
    }

    /// The target the next run's decoder reads: the Target box, for a loaded encoder–decoder.
    fn run_target(&self, settings: &Settings) -> Option<String> {
        let seq2seq = self.model.as_ref().is_some_and(|m| m.seq2seq) && settings.source == Source::Pretrained;
        (seq2seq && !settings.target.trim().is_empty()).then(|| settings.target.clone())
    }
}

/// The desktop app.
pub struct AttnvizApp {
    /// Persisted settings.
    pub settings: Settings,
    /// The model, the runs and what is in flight.
    pub session: Session,
    /// Each view's own state (caches, typed text).
    pub views: Views,
}

/// The plain data views read this frame.
fn view_data<'a>(settings: &'a Settings, s: &'a Session) -> ViewData<'a> {
    ViewData {
        settings,
        run: s.run.as_ref(),
        view_id: s.view_id,
        run_b: s.run_b.as_ref(),
        compare_id: s.compare_id,
        compare_error: s.compare_error.as_deref(),
        run_error: s.run_error.as_deref(),
        run_pending: s.requested_run_id > s.run_id,
        merging: s.run.is_none() && s.token_run.is_some(),
        inference_ms: s.inference_ms,
        model: s.model.as_ref(),
        loading: s.loading.as_deref(),
        load_error: s.load_error.as_deref(),
        cached_models: s.cached_models.as_deref(),
        pinned: s.pinned,
        playground_error: s.playground_error.as_ref(),
        flow: s.flow.as_ref(),
        exporting: s.exporting.is_some(),
        status: s.status.as_ref(),
        frame_ms: s.frame_ms,
        derived: &s.derived,
        generation: s.generation.as_ref(),
        lens: &s.lens,
        lens_refusal: s.lens_refusal.as_deref(),
        lens_tokens: s.token_run.as_ref().map(|t| &t.run.tokens),
        dla: s.dla.as_ref(),
        dla_pending: s.dla_pending.is_some(),
        effect: s.effect.as_ref(),
        effect_pending: s.effect_pending.is_some(),
        probe_shown: s.probe_shown,
        graph: s.graph.as_ref(),
        graph_pending: s.graph_pending.is_some(),
        graph_refusal: s.graph_refusal.as_deref(),
        lab: s.lab.as_ref(),
        lab_open: s.lab_open,
        stack: if settings.source == Source::File {
            // A file with a decoder side is an encoder–decoder's attention.
            s.token_run.as_ref().filter(|t| t.run.decoder.is_some()).map(|_| settings.stack)
        } else {
            s.model.as_ref().filter(|m| m.seq2seq && settings.source == Source::Pretrained).map(|_| {
                let has_target = s.token_run.as_ref().is_some_and(|t| t.run.decoder.is_some());
                if has_target { settings.stack } else { Stack::Encoder }
            })
        },
        stack_note: s
            .token_run
            .as_ref()
            .filter(|t| {
                t.run.decoder.is_none()
                    && settings.source == Source::Pretrained
                    && s.model.as_ref().is_some_and(|m| m.seq2seq)
            })
            .map(|_| NO_TARGET_NOTE),
    }
}

impl AttnvizApp {
    /// Creates the app, restoring settings from eframe's storage and starting the worker.
    pub fn new(cc: &eframe::CreationContext<'_>, startup: Startup) -> Self {
        Self::with_storage(&cc.egui_ctx, cc.storage, startup)
    }

    /// Creates the app with settings from `storage` (if any); the worker wakes `ctx`.
    pub fn with_storage(ctx: &egui::Context, storage: Option<&dyn eframe::Storage>, startup: Startup) -> Self {
        let mut settings: Settings = storage.and_then(|s| eframe::get_value(s, SETTINGS_KEY)).unwrap_or_default();
        if let Some(text) = startup.text {
            settings.text = text;
        }
        if let Some(pair) = startup.text_pair {
            settings.pair_enabled = !pair.is_empty();
            settings.text_pair = pair;
        }
        if startup.model_dir.is_some() {
            settings.model_dir = startup.model_dir;
        }
        install_fonts(ctx);
        // A blinking cursor repaints the window twice a second for as long as a sentence box has
        // focus, which is most of the time: a steady cursor lets an idle app draw nothing.
        ctx.all_styles_mut(|style| {
            style.visuals.text_cursor.blink = false;
            // Without a GPU every frame is drawn in software: hover and tooltip changes appear in
            // one frame instead of fading in over several.
            style.animation_time = 0.0;
            // Software GL fills every panel's pixels once more per frame (a full window: two thirds
            // of a frame's CPU under Xvfb); the window is cleared to the panel colour instead
            // (`clear_color`), which looks the same.
            style.visuals.panel_fill = egui::Color32::TRANSPARENT;
        });
        let wake = ctx.clone();
        let worker = Worker::spawn(move |progress| {
            if progress {
                // A generation's next run: one frame (egui draws two for a plain request, "to let
                // things settle"; the message after it, or the last one, comes soon).
                wake.request_repaint_after(std::time::Duration::from_millis(1));
            } else {
                wake.request_repaint();
            }
        })
        .expect("cannot start the inference thread");
        let wake = ctx.clone();
        let deriver = Deriver::spawn(move || wake.request_repaint()).expect("cannot start the derive thread");
        let (background_tx, background_rx) = channel();
        let model_dir = settings.model_dir.clone().unwrap_or_else(default_model_dir);
        let mut views = Views::new(&settings, &model_dir);
        views.export.work_dir = startup.work_dir.or_else(|| std::env::current_dir().ok()).unwrap_or_default();
        views.export.home =
            startup.home.or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from));
        let mut app = Self {
            session: Session {
                worker,
                deriver,
                next_id: 1,
                model: None,
                loading: None,
                load_error: None,
                switch_on_load: false,
                run: None,
                token_run: None,
                view_id: 0,
                shown_from: None,
                run_b: None,
                token_run_b: None,
                shown_b_from: None,
                compare_id: 0,
                requested_compare_id: 0,
                requested_compare: None,
                compare_error: None,
                flow: None,
                flow_pending: None,
                run_id: 0,
                requested_run_id: 0,
                requested_input: None,
                in_flight: Vec::new(),
                shown_input: None,
                playground_active: PlaygroundConfig::default(),
                playground_error: None,
                run_error: None,
                inference_ms: 0.0,
                typed: None,
                edit_run: None,
                edit_run_ms: None,
                hold_for: None,
                key_wait: startup.key_wait.unwrap_or(KEY_WAIT),
                frame_started: Instant::now(),
                busy_since: None,
                pinned: None,
                exporting: None,
                status: None,
                background_tx: background_tx.clone(),
                background_rx,
                cached_models: None,
                frame_ms: 0.0,
                derived: Derived::default(),
                applied_theme: None,
                generation: None,
                follow_written: false,
                lens: super::lens::LensState::default(),
                lens_refusal: None,
                dla: None,
                dla_pending: None,
                effect: None,
                effect_pending: None,
                probe_id: 0,
                probe_shown: false,
                graph: None,
                graph_pending: None,
                graph_refusal: None,
                lab: None,
                lab_open: false,
                lab_return: None,
                parked: None,
                selections: Vec::new(),
                opening: None,
                pending_open: None,
                saved: None,
                unsaved: None,
            },
            views,
            settings,
        };
        // The remembered hyperparameters, checked as if just typed.
        let checked = app.views.side.playground.check(&app.settings.playground);
        app.set_playground(checked);
        app.load_model(model_dir);
        if let Some(path) = startup.attention_file {
            app.open_attention(ctx, path);
        }
        // Listing the cache reads every model's config.json: off the UI thread.
        let cache = startup.hf_cache.unwrap_or_else(crate::model::hub::cache_dir);
        let scan = std::thread::Builder::new().name("hf-cache-scan".into()).spawn(move || {
            let _ = background_tx.send(Background::CachedModels(crate::model::hub::list_in(&cache)));
        });
        if let Err(e) = scan {
            app.session.cached_models = Some(Vec::new());
            app.set_status(format!("cannot list the Hugging Face cache: {e}"), true);
        }
        app
    }

    fn next_id(&mut self) -> u64 {
        self.session.next_id += 1;
        self.session.next_id
    }

    /// Starts loading a model folder in the background.
    pub fn load_model(&mut self, dir: PathBuf) {
        let id = self.next_id();
        self.session.loading = Some(dir.clone());
        self.session.worker.send(Job::Load { id, dir });
    }

    /// The plain data the views read this frame.
    pub fn view_data(&self) -> ViewData<'_> {
        view_data(&self.settings, &self.session)
    }

    /// Which model the next run uses.
    fn run_spec(&self) -> RunSpec {
        run_spec(&self.settings, &self.session.playground_active)
    }

    /// Makes a checked set of playground hyperparameters the one that runs, or shows what is wrong.
    fn set_playground(&mut self, checked: Result<PlaygroundConfig, (&'static str, String)>) {
        match checked {
            Ok(cfg) => {
                self.settings.playground = cfg.clone();
                self.session.playground_active = cfg;
                self.session.playground_error = None;
            }
            Err(e) => self.session.playground_error = Some(e),
        }
    }

    /// Before showing `to` instead of the current source: keeps this source's layer and heads
    /// (and gives back `to`'s), and parks the pretrained model's settled run.
    fn leave_source(&mut self, to: Source) {
        let from = self.settings.source;
        let mine = (self.settings.layer_idx, self.settings.heads.clone());
        let s = &mut self.session;
        s.selections.retain(|(source, _)| *source != from);
        s.selections.push((from, mine));
        if let Some(i) = s.selections.iter().position(|(source, _)| *source == to) {
            let (_, (layer_idx, heads)) = s.selections.swap_remove(i);
            self.settings.layer_idx = layer_idx;
            self.settings.heads = heads;
        }
        let writing = s.generation.as_ref().is_some_and(|g| g.finished.is_none());
        if from != Source::Pretrained {
            return;
        }
        s.parked = None;
        if !writing
            && s.run_error.is_none()
            && let (Some(token_run), Some(input)) = (s.token_run.clone(), s.shown_input.clone())
        {
            s.parked = Some(Parked {
                token_run,
                input,
                generation: s.generation.clone(),
                inference_ms: s.inference_ms,
                status: s.status.clone(),
                pinned: s.pinned,
            });
        }
    }

    /// Back on the pretrained model: shows its parked run again if it is still the run of the
    /// text and model asked for (else the usual run follows).
    fn restore_parked(&mut self) {
        let Some(parked) = self.session.parked.take() else { return };
        let wanted = run_input(&self.settings, &self.session);
        if parked.input != wanted {
            return;
        }
        self.stop_generation(true);
        let id = self.next_id();
        let s = &mut self.session;
        // Whatever is in flight (the playground's run) is older than this.
        s.requested_run_id = id;
        s.run_id = id;
        s.in_flight.clear();
        s.requested_input = Some(wanted.clone());
        s.shown_input = Some(wanted);
        s.token_run = Some(parked.token_run);
        s.generation = parked.generation;
        s.inference_ms = parked.inference_ms;
        s.status = parked.status;
        s.pinned = parked.pinned;
        s.run_error = None;
        s.probe_shown = false;
    }

    /// Asks for a run if the input or the model differs from the last one asked for.
    fn request_run_if_changed(&mut self) {
        let spec = self.run_spec();
        if self.session.model.is_none() && matches!(spec, RunSpec::Pretrained(..)) {
            return;
        }
        let input = run_input(&self.settings, &self.session);
        if self.session.requested_input.as_ref() == Some(&input) {
            return;
        }
        let id = self.next_id();
        self.stop_generation(true);
        // An edit of the shown text, nothing else changed and nothing else in flight: the worker
        // runs what changed (a decoder's prefix is reused), often quicker than a frame is drawn.
        let s = &mut self.session;
        let edit = s.in_flight.is_empty()
            && s.shown_input.as_ref().is_some_and(|(text, pair, target, spec)| {
                (pair, target, spec) == (&input.1, &input.2, &input.3) && *text != input.0
            });
        s.edit_run = edit.then_some(id);
        s.hold_for = (edit && s.edit_run_ms.is_none_or(|ms| ms <= s.key_wait.as_secs_f64() * 1e3)).then_some(id);
        self.session.requested_run_id = id;
        self.session.worker.send(Job::Run {
            id,
            text: input.0.clone(),
            pair: input.1.clone(),
            target: input.2.clone(),
            spec: input.3.clone(),
        });
        self.session.in_flight.push((id, input.clone()));
        self.session.requested_input = Some(input);
        self.session.typed = Some((id, self.session.frame_started, None));
    }

    /// Times the newest run asked for, from the frame that asked to the first frame that drew it
    /// and the first with nothing left to derive, logged if `ATTNVIZ_TYPING_LOG` is set.
    fn time_typing(&mut self) {
        let busy = self.is_busy();
        let s = &mut self.session;
        let Some((id, asked, mut drawn)) = s.typed else { return };
        if s.run_id < id {
            return;
        }
        let drawn = *drawn.get_or_insert_with(Instant::now);
        s.typed = Some((id, asked, Some(drawn)));
        if busy {
            return;
        }
        s.typed = None;
        if std::env::var_os("ATTNVIZ_TYPING_LOG").is_some() {
            let ms = |t: Instant| t.duration_since(asked).as_secs_f64() * 1e3;
            let tokens = s.token_run.as_ref().map_or(0, |t| t.run.tokens.len());
            eprintln!(
                "typing: tokens={tokens} run_ms={:.1} drawn_ms={:.1} settled_ms={:.1}",
                s.inference_ms,
                ms(drawn),
                ms(Instant::now())
            );
        }
    }

    /// Why the logit lens does not apply to what is shown now (None: it does).
    fn lens_refusal(&self) -> Option<String> {
        if self.settings.source == Source::File {
            return Some(FILE_NEEDS_MODEL.replace("{what}", "the logit lens and logit attribution read"));
        }
        if self.settings.source == Source::Playground {
            return Some(
                "The playground is a random encoder with no language-model head: the logit lens reads the \
                 pretrained model's residual stream through its own unembedding."
                    .into(),
            );
        }
        if let Some(why) = self.session.model.as_ref().and_then(|m| m.readout_refusal.clone()) {
            return Some(super::views::capitalised(&why) + ".");
        }
        if self.session.token_run.as_ref().is_some_and(|t| t.run.long.is_some()) {
            return Some(format!(
                "This input is longer than “Record up to” ({} tokens) and is shown pooled: the logit lens \
                 reads inputs recorded token by token.",
                self.settings.record_tokens
            ));
        }
        None
    }

    /// The token run a readout view computes from: when `view` is open and applies (`refused`
    /// says it does not), no generation is writing (it replaces the run at every token: the
    /// view waits for its end) and there are tokens.
    fn readout_input(&self, view: View, refused: bool) -> Option<&TokenRun> {
        let writing = self.session.generation.as_ref().is_some_and(|g| g.finished.is_none());
        if self.settings.view != view || refused || writing {
            return None;
        }
        self.session.token_run.as_ref().filter(|t| !t.run.tokens.is_empty())
    }

    /// Asks the worker for the logit lens when its view is open: the selected position's column
    /// first, then the grid chunk by chunk; a newer input or position replaces what is in flight.
    fn request_lens_if_needed(&mut self) {
        self.session.lens_refusal = self.lens_refusal();
        let Some(t) = self.readout_input(View::Lens, self.session.lens_refusal.is_some()) else { return };
        let n = t.run.tokens.len();
        let key = super::lens::LensKey { source_id: t.source_id, watch: self.settings.lens_watch.clone() };
        let tokens = Arc::new(t.run.tokens.clone());
        let lens = &mut self.session.lens;
        if lens.key.as_ref() != Some(&key) {
            *lens = super::lens::LensState::new(key.clone(), n);
            lens.started = Some(Instant::now());
        }
        if lens.error.is_some() {
            return;
        }
        let selected = self.settings.lens_position.unwrap_or(n - 1).min(n - 1);
        let need_column = lens.find(selected).is_none();
        match &lens.in_flight {
            Some((_, column, _)) if !need_column || *column == Some(selected) => return,
            None if !need_column && lens.grid_done() => return,
            _ => {}
        }
        let chunks = lens.missing_chunks();
        self.session.next_id += 1;
        let id = self.session.next_id;
        let column = need_column.then_some(selected);
        self.session.lens.in_flight = Some((id, column, chunks.clone()));
        let interventions = self.settings.interventions.clone();
        self.session.worker.send(Job::Lens { id, key, tokens, column, chunks, interventions });
    }

    /// Asks the worker for the attribution (and the selected head's effect) the attribution view
    /// shows, when they differ from what is shown and from what is asked for.
    fn request_attribution_if_needed(&mut self) {
        let Some(t) = self.readout_input(View::Attribution, self.session.lens_refusal.is_some()) else { return };
        let n = t.run.tokens.len();
        let position = self.settings.dla_position.unwrap_or(n - 1).min(n - 1);
        let source_id = t.source_id;
        let tokens = Arc::new(t.run.tokens.clone());
        let (layers, heads) = (t.run.attention.layers(), t.run.attention.heads());
        let interventions = self.settings.interventions.clone();
        let key = DlaKey {
            source_id,
            position,
            target: self.settings.dla_target.clone(),
            versus: self.settings.dla_versus.clone(),
        };
        let s = &mut self.session;
        if s.dla.as_ref().is_none_or(|d| d.0 != key) && s.dla_pending.as_ref() != Some(&key) {
            s.next_id += 1;
            s.dla_pending = Some(key.clone());
            let job = Job::Attribute {
                id: s.next_id,
                key,
                tokens: Arc::clone(&tokens),
                interventions: interventions.clone(),
            };
            s.worker.send(job);
        }
        let Some(head) = self.settings.dla_head.filter(|&(l, h)| l < layers && h < heads) else { return };
        s.request_effect(EffectKey { source_id, position, head }, tokens, interventions);
    }

    /// Asks the worker for the contribution graph of the token run (once per run) and for the
    /// effect of the head selected on one of its edges, when the graph view is open.
    fn request_graph_if_needed(&mut self) {
        let s = &self.session;
        self.session.graph_refusal = if self.settings.source == Source::File {
            Some(FILE_NEEDS_MODEL.replace("{what}", "the contribution graph follows"))
        } else if self.settings.source == Source::Playground {
            Some("The playground is a random encoder: the contribution graph follows the pretrained model.".into())
        } else if let Some(why) = s.model.as_ref().and_then(|m| m.contribution_refusal.clone()) {
            Some(super::views::capitalised(&why) + ".")
        } else if s.token_run.as_ref().is_some_and(|t| t.run.long.is_some()) {
            Some(format!(
                "This input is longer than “Record up to” ({} tokens) and is shown pooled: the graph reads inputs \
                 recorded token by token.",
                self.settings.record_tokens
            ))
        } else {
            None
        };
        let Some(t) = self.readout_input(View::Graph, self.session.graph_refusal.is_some()) else { return };
        let source_id = t.source_id;
        let tokens = Arc::new(t.run.tokens.clone());
        let (layers, heads, n) = (t.run.attention.layers(), t.run.attention.heads(), t.run.tokens.len());
        let interventions = self.settings.interventions.clone();
        let s = &mut self.session;
        if s.graph.as_ref().is_none_or(|g| g.0 != source_id) && s.graph_pending != Some(source_id) {
            s.next_id += 1;
            s.graph_pending = Some(source_id);
            let job = Job::Contributions {
                id: s.next_id,
                source_id,
                tokens: Arc::clone(&tokens),
                interventions: interventions.clone(),
            };
            s.worker.send(job);
        }
        // The head effect needs a head: a model without one has none to show.
        if s.lens_refusal.is_some() {
            return;
        }
        let Some((layer, head, position)) =
            self.settings.graph_head.filter(|&(l, h, p)| l < layers && h < heads && p < n)
        else {
            return;
        };
        s.request_effect(EffectKey { source_id, position, head: (layer, head) }, tokens, interventions);
    }

    /// Runs the loaded model on its seeded probe of repeated random tokens (shown until the text
    /// changes), so induction and duplicate-token heads show on any text.
    fn start_probe(&mut self) {
        let Some(model) = &self.session.model else { return };
        if self.settings.source != Source::Pretrained || model.seq2seq {
            self.set_status("The probe runs the pretrained decoder-only or encoder model, not the playground", true);
            return;
        }
        let half = PROBE_HALF.min(model.max_positions.saturating_sub(1) / 2).max(1);
        self.stop_generation(true);
        let id = self.next_id();
        self.session.probe_id = id;
        self.session.requested_run_id = id;
        let interventions = self.settings.interventions.clone();
        self.session.worker.send(Job::Probe { id, half, seed: 0, interventions });
    }

    /// Stops the generation in progress; with `forget`, its later progress is dropped too (a new
    /// input replaces it).
    fn stop_generation(&mut self, forget: bool) {
        if let Some(g) = &self.session.generation {
            g.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if forget && self.session.generation.take().is_some() {
            // "Wrote 20 tokens" no longer describes what is shown.
            if self.session.status.as_ref().is_some_and(|st| !st.is_error && st.text.starts_with("Wrote ")) {
                self.session.status = None;
            }
        }
    }

    /// Pins the newest written token of a generation's run that has just been shown, in the same
    /// frame (the generation panel follows the writing by pinning it; pinned from the panel, it
    /// would take another frame for each update).
    fn pin_newest_written(&mut self) {
        let s = &mut self.session;
        // Until the run is shown (a merge into words may be under way).
        if !s.follow_written || s.run.is_none() {
            return;
        }
        s.follow_written = false;
        let (Some(run), Some(g)) = (&s.run, &s.generation) else { return };
        let Some(prompt) = run.prompt_len else { return };
        let written = run.tokens.len().saturating_sub(prompt).min(g.steps.len());
        if written > 0 {
            s.pinned = Some((crate::render::Side::Query, prompt + written - 1));
        }
    }

    /// Counts a drawn frame in the generation's timing; once it has ended and everything derived
    /// from its last run is drawn, logs the timing if `ATTNVIZ_GENERATION_LOG` is set.
    fn time_generation(&mut self) {
        let busy = self.is_busy();
        let s = &mut self.session;
        let Some(g) = s.generation.as_mut().filter(|g| g.timing.settled.is_none()) else { return };
        let written = s.run.as_ref().and_then(|r| r.prompt_len.map(|p| r.tokens.len().saturating_sub(p)));
        g.timing.frame(written.unwrap_or(0));
        if g.finished.is_some() && !busy {
            g.timing.settled = Some(Instant::now());
            if std::env::var_os("ATTNVIZ_GENERATION_LOG").is_some() {
                eprintln!("{}", g.timing.line(g.written));
            }
        }
    }

    /// Lets the loaded model continue the text by `max_new` tokens, streamed into the views.
    fn start_generation(&mut self, max_new: usize) {
        let can = self.session.model.as_ref().is_some_and(|m| m.can_generate || m.can_translate);
        if !can || self.settings.source != Source::Pretrained || max_new == 0 {
            return;
        }
        self.stop_generation(true);
        let id = self.next_id();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.session.generation = Some(Generation {
            id,
            max_new,
            written: 0,
            steps: Arc::new(Vec::new()),
            finished: None,
            error: None,
            seconds: 0.0,
            stop: stop.clone(),
            prompt: self.settings.text.clone(),
            text: None,
            timing: super::data::GenerationTiming::start(),
        });
        let (text, max_prompt) = (self.settings.text.clone(), self.settings.record_tokens);
        let interventions = self.settings.interventions.clone();
        self.session.worker.send(Job::Generate { id, text, max_new, max_prompt, stop, interventions });
    }

    /// Puts what a translation wrote in the Target box without running the model again: the shown
    /// run (the translation's) is already the run of that target.
    fn adopt_target(&mut self, target: String) {
        self.settings.target = target;
        let wanted = self.session.run_target(&self.settings);
        for input in [&mut self.session.requested_input, &mut self.session.shown_input].into_iter().flatten() {
            input.2.clone_from(&wanted);
        }
    }

    /// What run B of the comparison is (None: nothing to compare, with the reason).
    fn compare_input(&self) -> Result<RunInput, String> {
        let pair = self.settings.pair().map(str::to_string);
        // B is read with the same target: its decoder and cross-attention compare too.
        let target = self.session.run_target(&self.settings);
        match self.settings.compare.source {
            CompareSource::Sentence | CompareSource::Interventions if self.settings.source == Source::File => Err(
                "An attention file has no model to run another input or the faithful model: compare it with another \
                 attention file or a model folder (Another model)."
                    .into(),
            ),
            CompareSource::Sentence => {
                if self.settings.compare.text_b.trim().is_empty() {
                    return Err("Type sentence B above to compare.".into());
                }
                Ok((self.settings.compare.text_b.clone(), None, target, self.run_spec()))
            }
            CompareSource::Interventions => {
                if self.settings.source == Source::Playground {
                    return Err("The playground has no faithful counterpart: switch to the pretrained model.".into());
                }
                if self.settings.interventions.is_faithful() {
                    return Err("The current run is the faithful model: set an intervention in the side panel \
                                (ablate a head, temperature, …) to compare it with the faithful model."
                        .into());
                }
                Ok((
                    self.settings.text.clone(),
                    pair,
                    target,
                    RunSpec::Pretrained(crate::model::Interventions::default(), None),
                ))
            }
            CompareSource::Model => match &self.settings.compare.model_b {
                Some(dir) => Ok((self.settings.text.clone(), pair, target, RunSpec::Folder(dir.clone()))),
                None => Err("Choose a second model folder above (it must use the same tokenizer).".into()),
            },
        }
    }

    /// Asks for run B when the comparison view is open and its input changed.
    fn request_compare_if_changed(&mut self) {
        if self.settings.view != View::Compare {
            return;
        }
        match self.compare_input() {
            Err(why) => {
                let s = &mut self.session;
                // A run B still in flight is no longer wanted.
                s.compare_id = s.requested_compare_id;
                s.requested_compare = None;
                s.token_run_b = None;
                s.run_b = None;
                s.shown_b_from = None;
                s.compare_error = Some(why);
            }
            Ok(input) => {
                if self.session.requested_compare.as_ref() == Some(&input) {
                    return;
                }
                if self.session.model.is_none() && !matches!(input.3, RunSpec::Playground(_)) {
                    return;
                }
                let id = self.next_id();
                self.session.requested_compare_id = id;
                self.session.compare_error = None;
                self.session.worker.send(Job::Compare {
                    id,
                    text: input.0.clone(),
                    pair: input.1.clone(),
                    target: input.2.clone(),
                    spec: input.3.clone(),
                });
                self.session.requested_compare = Some(input);
            }
        }
    }

    /// Keeps the shown runs in step with the model's runs, the word toggle and the stack. Word
    /// merges and an encoder–decoder's stacks are taken on the derive thread; until one is ready,
    /// no run is shown (the view says so).
    fn sync_view_runs(&mut self) {
        let words = self.settings.words;
        let stack = self.settings.stack;
        let long = self.settings.long_view;
        let s = &mut self.session;
        // The decoder's side is shown at token level (word pieces are merged on the source only).
        let wanted = s.token_run.as_ref().map(|t| (t.source_id, words, stack, long));
        if s.shown_from != wanted {
            let shown =
                s.token_run.as_ref().and_then(|t| shown_run(&mut s.derived, &s.deriver, t, (words, stack, long)));
            if shown.is_some() || wanted.is_none() {
                s.run = shown;
                s.shown_from = wanted;
                s.view_id += 1;
                s.shown_b_from = None; // B is shown at the same level as A
                if let Some(run) = s.run.as_ref() {
                    // A keystroke's or a generation's next run: what the run before had derived,
                    // when cheap (a few milliseconds), is computed for it now, so that this frame
                    // draws it whole rather than waiting on the derive thread.
                    s.derived.carry_over(s.view_id - 1, s.view_id, run);
                }
            } else if s.run.is_some() {
                // Merging: nothing stale is shown meanwhile.
                s.run = None;
                s.view_id += 1;
            }
        }
        let wanted_b = s.token_run_b.as_ref().map(|t| (t.source_id, words, stack, long));
        if s.shown_b_from != wanted_b {
            let shown =
                s.token_run_b.as_ref().and_then(|t| shown_run(&mut s.derived, &s.deriver, t, (words, stack, long)));
            if shown.is_some() || wanted_b.is_none() {
                s.shown_b_from = wanted_b;
            }
            s.run_b = shown;
        }
        // A pin past the shown tokens (another stack, a shorter target) is dropped.
        if let (Some((side, pos)), Some(run)) = (s.pinned, &s.run) {
            let count = if side == crate::render::Side::Key { run.keys().len() } else { run.tokens.len() };
            if pos >= count {
                s.pinned = None;
            }
        }
        let sources: Vec<u64> = [&s.token_run, &s.token_run_b].into_iter().flatten().map(|t| t.source_id).collect();
        s.derived.retain_run(s.view_id, &sources);
    }

    /// Whether a run, a load or a background computation is still in flight.
    pub fn is_busy(&self) -> bool {
        self.is_busy_besides_writing() || self.session.generation.as_ref().is_some_and(|g| g.finished.is_none())
    }

    /// [`Self::is_busy`] but for a generation that is writing.
    fn is_busy_besides_writing(&self) -> bool {
        let s = &self.session;
        s.loading.is_some()
            || s.opening.is_some()
            || s.requested_run_id > s.run_id
            || s.requested_compare_id > s.compare_id
            || s.flow_pending.is_some()
            || s.derived.any_pending()
            || s.lens.in_flight.is_some()
            || s.dla_pending.is_some()
            || s.effect_pending.is_some()
            || s.graph_pending.is_some()
    }

    fn set_status(&mut self, text: impl Into<String>, is_error: bool) {
        self.session.status = Some(Status { text: text.into(), is_error });
    }

    /// Handles the training lab's commands.
    fn train_command(&mut self, ctx: &egui::Context, c: super::command::TrainCommand) {
        use super::command::TrainCommand as T;
        use super::lab::{Control, Lab};
        match c {
            T::Open => self.session.lab_open = true,
            T::Close => {
                self.session.lab_open = false;
                self.session.lab = None;
                // Back to the model and text the lab replaced.
                if let Some((dir, text, pair)) = self.session.lab_return.take() {
                    self.settings.text = text;
                    self.settings.pair_enabled = pair;
                    self.load_model(dir);
                }
            }
            T::Start { cfg, experiment } => {
                if let Err(e) = cfg.validate() {
                    self.set_status(e.to_string(), true);
                    return;
                }
                if self.session.lab_return.is_none() {
                    let dir = self.settings.model_dir.clone().unwrap_or_else(default_model_dir);
                    self.session.lab_return = Some((dir, self.settings.text.clone(), self.settings.pair_enabled));
                }
                // The views show the network being trained, on the task's probe.
                self.session.lab = None;
                self.settings.train = cfg.clone();
                self.settings.source = Source::Pretrained;
                self.settings.pair_enabled = false;
                self.settings.text = crate::train::Task::new(&cfg).probe();
                let wake = ctx.clone();
                let what = if experiment { "the course's three variants".to_string() } else { cfg.describe() };
                match Lab::start(cfg, experiment, move || wake.request_repaint()) {
                    Ok(lab) => {
                        self.set_status(format!("Training lab: training {what}"), false);
                        self.session.lab = Some(lab);
                        self.session.lab_open = true;
                    }
                    Err(e) => self.set_status(format!("cannot start the training thread: {e}"), true),
                }
            }
            T::Pause | T::Resume | T::Stop | T::Scrub(_) | T::Live | T::Save(_) => {
                let Some(lab) = &mut self.session.lab else { return };
                lab.send(match c {
                    T::Pause => Control::Pause,
                    T::Resume => Control::Resume,
                    T::Stop => Control::Stop,
                    T::Scrub(i) => Control::Scrub(i),
                    T::Save(dir) => Control::Save(dir),
                    _ => Control::Live,
                });
            }
            T::BrowseSave => {
                let tx = self.session.background_tx.clone();
                let ctx = ctx.clone();
                spawn_named("attnviz-dialog", move || {
                    let picked = rfd::FileDialog::new().set_title("Save the trained model as a folder").pick_folder();
                    let _ = tx.send(Background::PickedSave(picked));
                    ctx.request_repaint();
                });
            }
        }
    }

    /// Applies finished background work.
    fn poll(&mut self) {
        let installed = self.session.lab.as_mut().and_then(|lab| {
            lab.poll();
            lab.new_model.take()
        });
        if let Some(model) = installed {
            let id = self.next_id();
            self.session.worker.send(Job::Install { id, model });
        }
        while let Some(done) = self.session.worker.try_recv() {
            match done {
                Done::Installed { info, .. } => {
                    // The training lab's network: the same model, further trained (its run is
                    // replaced when the new one arrives), or a new shape (the old run is dropped).
                    self.settings.fit_model(info.layers, info.heads);
                    // Interventions set on the lab's network stay with it from one evaluation to
                    // the next; any others are reset (with a notice), as for a loaded model.
                    let lab = std::path::Path::new("<training lab>");
                    if let Some(notice) = self.settings.interventions_meet(lab, info.layers, info.heads) {
                        self.set_status(notice, false);
                    }
                    let s = &mut self.session;
                    let same = s.model.as_ref().is_some_and(|m| {
                        (m.family.as_str(), m.layers, m.heads, m.hidden)
                            == (info.family.as_str(), info.layers, info.heads, info.hidden)
                    });
                    s.model = Some(info);
                    s.load_error = None;
                    if !same {
                        s.pinned = None;
                        s.token_run = None;
                        s.shown_input = None;
                        s.in_flight.clear();
                        s.requested_compare = None;
                        s.run_id = s.requested_run_id;
                    }
                    s.requested_input = None;
                    s.requested_compare = None;
                }
                Done::Loaded { dir, result, .. } => {
                    self.session.loading = None;
                    match result {
                        Ok(info) => {
                            let reset = self.settings.interventions_meet(&dir, info.layers, info.heads);
                            // A model the user just loaded is the one they want to see.
                            if std::mem::take(&mut self.session.switch_on_load)
                                && self.settings.source != Source::Pretrained
                            {
                                self.settings.source = Source::Pretrained;
                                // The pretrained selection kept aside was the old model's.
                                self.session.selections.retain(|(s, _)| *s != Source::Pretrained);
                            }
                            // An attention file shown (opened with the app, the model loading
                            // beside it) stays as it is.
                            let file_shown = self.settings.source == Source::File;
                            if !file_shown {
                                self.settings.fit_model(info.layers, info.heads);
                            }
                            let embedded = dir == default_model_dir();
                            self.settings.model_dir = (!embedded).then(|| dir.clone());
                            self.settings.remember_model(&dir);
                            let mut status = format!("Loaded {} from {}", info.name, dir.display());
                            if let Some(reset) = reset {
                                status = format!("{status} · {reset}");
                            }
                            if !file_shown {
                                self.views.side.model_path_input = dir.display().to_string();
                                self.set_status(status, false);
                            }
                            let s = &mut self.session;
                            s.model = Some(info);
                            s.load_error = None;
                            s.requested_compare = None;
                            s.parked = None;
                            if !file_shown {
                                s.pinned = None;
                                // The old run belongs to the old model (its heads and layers differ).
                                s.token_run = None;
                                s.shown_input = None;
                                s.in_flight.clear();
                                s.run_id = s.requested_run_id;
                                s.requested_input = None;
                            }
                        }
                        Err(e) => {
                            self.session.switch_on_load = false;
                            let msg = format!("Could not load {}: {e}", dir.display());
                            if self.session.model.is_none() && dir != default_model_dir() {
                                // Nothing to keep yet (e.g. a remembered folder that vanished): fall back.
                                self.settings.model_dir = None;
                                self.load_model(default_model_dir());
                            }
                            self.session.load_error = Some(msg.clone());
                            self.set_status(msg, true);
                        }
                    }
                }
                Done::Ran { id, result, window, elapsed_ms } => {
                    if self.session.edit_run == Some(id) {
                        self.session.edit_run_ms = Some(elapsed_ms);
                    }
                    // A long input's pass sends its runs layer by layer, under one id.
                    let progress = id == self.session.run_id
                        && result.as_ref().is_ok_and(|r| r.long.is_some())
                        && self.session.token_run.as_ref().is_some_and(|t| t.run.long.is_some());
                    if id < self.session.run_id || (id == self.session.run_id && !progress) {
                        continue; // older than what is shown
                    }
                    let s = &mut self.session;
                    s.probe_shown = id == s.probe_id;
                    if !progress {
                        s.shown_input = s.in_flight.iter().find(|(i, _)| *i == id).map(|(_, input)| input.clone());
                        s.in_flight.retain(|(i, _)| *i > id);
                    }
                    match result {
                        Ok(run) => {
                            // The playground, or a run of fewer layers, has another shape (a long
                            // input's pass holds the model's layers once done).
                            let layers = run.long.as_ref().map_or(run.attention.layers(), |l| l.layers_total);
                            self.settings.fit_model(layers, run.attention.heads());
                            let source_id = if progress { self.next_id() } else { id };
                            let s = &mut self.session;
                            s.run_id = id;
                            s.inference_ms = elapsed_ms;
                            if let Some((_, pos)) = s.pinned
                                && pos >= run.tokens.len()
                            {
                                s.pinned = None;
                            }
                            s.token_run = Some(TokenRun { source_id, run, window });
                            s.run_error = None;
                        }
                        Err(e) if matches!(&self.session.shown_input, Some((.., RunSpec::File(_)))) => {
                            // A remembered attention file that no longer reads: as a vanished
                            // model folder, the pretrained model is shown and the error said.
                            self.session.run_id = id;
                            self.settings.source = Source::Pretrained;
                            let msg = format!("Could not open {e}");
                            self.session.load_error = Some(msg.clone());
                            self.set_status(msg, true);
                        }
                        Err(e) => {
                            // No stale run of another text or model stays on screen (its banner
                            // would name the wrong model): the error is shown in its place.
                            self.session.run_id = id;
                            self.session.run_error = Some(e);
                            self.session.token_run = None;
                        }
                    }
                }
                Done::Generated { id, result, steps, finished, seconds, target } => {
                    if self.session.generation.as_ref().is_none_or(|g| g.id != id) {
                        continue;
                    }
                    let translated = self.session.model.as_ref().is_some_and(|m| m.seq2seq);
                    if let Some(target) = target.clone().filter(|_| result.is_ok() && translated) {
                        self.adopt_target(target);
                    }
                    let Some(g) = self.session.generation.as_mut().filter(|g| g.id == id) else { continue };
                    if target.is_some() {
                        g.text = target;
                    }
                    g.steps = steps;
                    g.finished = finished;
                    g.seconds = seconds;
                    g.written = g.steps.len();
                    match result {
                        Ok(run) => {
                            if let Some(stop) = finished {
                                let rate = g.written as f64 / seconds.max(1e-9);
                                let text = format!(
                                    "Wrote {} tokens in {seconds:.1} s ({rate:.1} tokens/s): {}",
                                    g.written,
                                    stop.describe()
                                );
                                self.set_status(text, false);
                            }
                            self.settings.fit_model(run.attention.layers(), run.attention.heads());
                            let source_id = self.next_id();
                            let s = &mut self.session;
                            s.token_run = Some(TokenRun { source_id, run, window: None });
                            s.run_error = None;
                            s.follow_written = true;
                        }
                        Err(e) => {
                            g.error = Some(e.clone());
                            self.set_status(format!("Could not continue the text: {e}"), true);
                        }
                    }
                }
                Done::Lens { id, key, result, watched, notes, finished, elapsed_ms } => {
                    let lens = &mut self.session.lens;
                    if lens.key.as_ref() != Some(&key) {
                        continue; // of an older input
                    }
                    lens.watched = watched;
                    lens.watch_notes = notes;
                    match result {
                        Ok(part) => {
                            lens.streams = part.lens.streams;
                            let column = part.lens.positions.len() == 1;
                            lens.parts.push(part);
                            if column && lens.column_ms.is_none() {
                                lens.column_ms = Some(elapsed_ms);
                            }
                            if lens.grid_ms.is_none() && lens.grid_done() {
                                lens.grid_ms = lens.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
                            }
                        }
                        Err(e) => lens.error = Some(e),
                    }
                    if finished && lens.in_flight.as_ref().is_some_and(|f| f.0 == id) {
                        lens.in_flight = None;
                    }
                }
                Done::Attributed { key, result, elapsed_ms } => {
                    let s = &mut self.session;
                    if s.dla_pending.as_ref() == Some(&key) {
                        s.dla_pending = None;
                        s.dla = Some((key, result, elapsed_ms));
                    }
                }
                Done::Graph { source_id, result, elapsed_ms } => {
                    let s = &mut self.session;
                    if s.graph_pending == Some(source_id) {
                        s.graph_pending = None;
                        s.graph = Some((source_id, result, elapsed_ms));
                    }
                }
                Done::Effect { key, result } => {
                    let s = &mut self.session;
                    if s.effect_pending.as_ref() == Some(&key) {
                        s.effect_pending = None;
                        s.effect = Some((key, result));
                    }
                }
                Done::Compared { id, result } => {
                    let s = &mut self.session;
                    if id <= s.compare_id || id != s.requested_compare_id {
                        continue; // older than what is shown, or no longer asked for
                    }
                    s.compare_id = id;
                    match result {
                        Ok(run) => {
                            s.token_run_b = Some(TokenRun { source_id: id, run, window: None });
                            s.compare_error = None;
                        }
                        Err(e) => {
                            s.token_run_b = None;
                            s.compare_error = Some(e);
                        }
                    }
                }
            }
        }
        while let Some((key, value)) = self.session.deriver.try_recv() {
            self.session.derived.finish(key, value, self.session.view_id);
        }
        while let Ok(msg) = self.session.background_rx.try_recv() {
            match msg {
                Background::Flow(result) => {
                    if self.session.flow_pending.as_ref() == Some(&result.key) {
                        self.session.flow_pending = None;
                    }
                    self.session.flow = Some(result);
                }
                Background::Exported(path, result) => {
                    self.session.exporting = None;
                    match result {
                        Ok((w, h)) => {
                            let size = if w == 0 { "numbers".to_string() } else { format!("{w}×{h} px") };
                            self.set_status(format!("Exported {} ({size})", path.display()), false);
                            self.settings.export_dir = path.parent().map(std::path::Path::to_path_buf);
                            self.views.export.open = false;
                        }
                        Err(e) => self.set_status(format!("Export failed: {e}"), true),
                    }
                }
                Background::Copied(Ok(image)) => {
                    let [w, h] = image.size;
                    self.views.export.clipboard = Some(image);
                    self.set_status(format!("Copied the figure to the clipboard ({w}×{h} px)"), false);
                }
                Background::Copied(Err(e)) => self.set_status(format!("Copy failed: {e}"), true),
                Background::PickedModel(Some(dir)) => {
                    self.views.side.model_path_input = dir.display().to_string();
                    self.session.switch_on_load = true;
                    self.load_model(dir);
                }
                Background::PickedExport(Some(path)) => self.views.export.path_input = path.display().to_string(),
                Background::CachedModels(models) => self.session.cached_models = Some(models),
                Background::PickedSave(Some(dir)) => {
                    if let Some(lab) = &mut self.session.lab {
                        // A picked folder of other files gets the model in a new folder inside it.
                        let dir = if dir.is_dir() && !crate::train::replaceable(&dir) {
                            dir.join(format!("trained-{}-step-{}", lab.cfg.task.name(), lab.shown_step))
                        } else {
                            dir
                        };
                        lab.send(super::lab::Control::Save(dir));
                    }
                }
                Background::PickedSave(None) => {
                    self.set_status("Nothing chosen: type the folder in the lab's Save box", false);
                }
                Background::PickedAttention(Some(path)) => {
                    self.views.side.model_path_input = path.display().to_string();
                    self.session.pending_open = Some(path);
                }
                Background::OpenedAttention(path, result) => {
                    self.session.opening = None;
                    match result {
                        Ok(run) => self.show_attention(&path, run),
                        Err(e) => {
                            let msg = format!("Could not open {e}");
                            self.session.load_error = Some(msg.clone());
                            self.set_status(msg, true);
                        }
                    }
                }
                Background::PickedModel(None) | Background::PickedExport(None) | Background::PickedAttention(None) => {
                    self.set_status(
                        "Nothing chosen (if no file dialog appeared, this desktop has none: type the path in the box)",
                        false,
                    );
                }
            }
        }
    }

    /// Writes the settings to `storage` once they have not changed for [`SAVE_AFTER`] (`now`),
    /// and flushes it. Returns how long to wait before asking again, while changes are unsaved.
    pub fn autosave(&mut self, storage: &mut dyn eframe::Storage, now: Instant) -> Option<std::time::Duration> {
        let s = &mut self.session;
        if s.saved.as_ref() == Some(&self.settings) {
            s.unsaved = None;
            return None;
        }
        let since = match &s.unsaved {
            Some((seen, since)) if *seen == self.settings => *since,
            _ => {
                s.unsaved = Some((self.settings.clone(), now));
                now
            }
        };
        let quiet = now.saturating_duration_since(since);
        if quiet < SAVE_AFTER {
            return Some(SAVE_AFTER.saturating_sub(quiet));
        }
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
        storage.flush();
        s.saved = Some(self.settings.clone());
        s.unsaved = None;
        None
    }

    /// The figure the current view would export.
    pub fn current_figure(&self) -> Figure {
        // What the views show: the layer and heads limited to the shown run (an encoder–decoder's
        // decoder may have fewer layers than its encoder).
        let (layer_idx, heads) = if self.session.run.is_some() {
            self.view_data().selection()
        } else {
            (self.settings.layer_idx, self.settings.selected_heads())
        };
        match self.settings.view {
            View::Head => Figure::HeadView {
                layer_idx,
                head_idxs: heads,
                selected_token: self.session.pinned,
                threshold: self.settings.threshold,
            },
            View::Model => Figure::ModelGrid,
            View::Heatmap => Figure::Heatmap { layer_idx, head_idxs: heads },
            View::Neuron => Figure::Neuron {
                layer_idx,
                head_idx: heads.first().copied().unwrap_or(0),
                query_pos: self.settings.neuron_query,
            },
            View::Stats => match self.settings.stats_role {
                Some(role) => Figure::Roles(role),
                None => Figure::Stats(self.settings.stat),
            },
            View::Rollout => {
                let flow = match &self.session.flow {
                    Some(f) if self.settings.rollout_mode == RolloutMode::Flow && f.key == self.flow_key() => {
                        Some(Arc::clone(&f.values))
                    }
                    _ => None,
                };
                Figure::Rollout { layer_idx, head_idxs: heads, flow }
            }
            View::Compare => match &self.session.run_b {
                Some(b) => Figure::Compare {
                    layer_idx,
                    head_idxs: heads,
                    other: crate::export::SharedRun(Arc::clone(b)),
                    // As in the view: different token counts fall back to side by side.
                    difference: self.settings.compare.mode == CompareMode::Difference
                        && self.session.run.as_ref().is_some_and(|a| a.tokens.len() == b.tokens.len()),
                },
                None => Figure::Heatmap { layer_idx, head_idxs: heads },
            },
            View::Attribution => match &self.session.dla {
                Some((_, Ok(a), _)) => {
                    let name = self.session.model.as_ref().map_or("model", |m| m.name.as_str());
                    let label = self.session.token_run.as_ref().map(|t| t.run.label(a.position)).unwrap_or_default();
                    let title = format!(
                        "{name} · direct logit attribution of {} at position {} “{label}” · Σ terms = {:.3}, logit {:.3}",
                        super::readout::target_text(a),
                        a.position,
                        a.total(),
                        a.logit
                    );
                    Figure::Attribution(Arc::new(super::readout::attribution_table(a, title)))
                }
                _ => Figure::Attribution(Arc::new(crate::export::Table {
                    title: String::new(),
                    row_labels: Vec::new(),
                    col_labels: Vec::new(),
                    values: Vec::new(),
                })),
            },
            View::Graph => {
                let s = &self.session;
                let labels: Vec<String> = s
                    .token_run
                    .as_ref()
                    .map(|t| t.run.tokens.tokens.iter().map(|x| crate::analysis::tokens::pretty_label(x)).collect())
                    .unwrap_or_default();
                let n = labels.len();
                let position = self.settings.graph_position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
                let name = s.model.as_ref().map_or("model", |m| m.name.as_str());
                let figure = match &s.graph {
                    Some((_, Ok(graph), _)) => {
                        let title = format!(
                            "{name} · contribution graph to the prediction at position {position} “{}” · threshold {:.2}",
                            labels.get(position).map_or("", String::as_str),
                            self.settings.graph_threshold
                        );
                        super::readout::graph_figure(graph, &labels, (position, self.settings.graph_threshold), title).0
                    }
                    _ => crate::export::GraphFigure {
                        title: format!("{name} · contribution graph (not computed)"),
                        tokens: labels,
                        layers: 0,
                        nodes: Vec::new(),
                        edges: Vec::new(),
                    },
                };
                Figure::Graph(Arc::new(figure))
            }
            View::Lens => {
                let s = &self.session;
                let labels: Vec<String> = s
                    .token_run
                    .as_ref()
                    .map(|t| (0..t.run.tokens.len()).map(|i| t.run.label(i)).collect())
                    .unwrap_or_default();
                let n = labels.len();
                let selected = self.settings.lens_position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
                let name = s.model.as_ref().map_or("model", |m| m.name.as_str());
                let mode = (self.settings.lens_mode, self.settings.lens_rank_of);
                Figure::Lens(Arc::new(s.lens.figure(&labels, name, mode, selected)))
            }
            View::Positions => {
                let learned = |cosine: bool| match &self.session.model {
                    Some(ModelInfo { name, positions: Some(sim), .. }) => Figure::LearnedPositions {
                        model: name.clone(),
                        total: sim.positions,
                        positions: self.settings.pe.positions.min(sim.positions),
                        values: Arc::clone(if cosine { &sim.cosine } else { &sim.dot }),
                        cosine,
                    },
                    _ => Figure::PeDot(self.settings.pe),
                };
                match self.settings.pe_figure {
                    PeFigure::Encoding => Figure::PeEncoding(self.settings.pe),
                    PeFigure::Dot => Figure::PeDot(self.settings.pe),
                    PeFigure::LearnedDot => learned(false),
                    PeFigure::LearnedCosine => learned(true),
                }
            }
        }
    }

    /// What attention flow would be computed for now.
    pub fn flow_key(&self) -> FlowKey {
        let (layer_idx, heads) = self.view_data().selection();
        FlowKey { view_id: self.session.view_id, heads, layer_idx }
    }

    /// Starts computing attention flow in the background if the rollout view wants it and it is
    /// not computed or running already.
    fn request_flow_if_needed(&mut self, ctx: &egui::Context) {
        if self.settings.view != View::Rollout || self.settings.rollout_mode != RolloutMode::Flow {
            return;
        }
        let Some(run) = self.session.run.clone() else { return };
        if !run.attention.is_square() || crate::analysis::rollout::flow_refusal(run.attention.seq_len()).is_some() {
            return; // the view says why (cross-attention has no flow)
        }
        let key = self.flow_key();
        if key.heads.is_empty()
            || self.session.flow.as_ref().is_some_and(|f| f.key == key)
            || self.session.flow_pending.as_ref() == Some(&key)
        {
            return;
        }
        self.session.flow_pending = Some(key.clone());
        let tx = self.session.background_tx.clone();
        let ctx = ctx.clone();
        spawn_named("attnviz-flow", move || {
            let start = Instant::now();
            let values = crate::analysis::rollout::flow(&run.attention, &key.heads, key.layer_idx);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let _ = tx.send(Background::Flow(FlowResult { key, values: Arc::new(values), ms }));
            ctx.request_repaint();
        });
    }

    /// The look exports get: the app's theme and colour map, the chosen scale.
    pub fn export_style(&self, dark: bool) -> Style {
        Style {
            theme: if dark { Theme::Dark } else { Theme::Light },
            scale: f32::from(self.settings.export_scale.clamp(1, 4)),
            colormap: self.settings.colormap,
        }
    }

    /// Handles one command raised by a view: the one place where widgets change the app.
    pub fn run_command(&mut self, ctx: &egui::Context, command: Command) {
        match command {
            Command::Set(setting) => {
                if matches!(setting, Setting::Words(w) if w != self.settings.words)
                    || matches!(setting, Setting::Stack(st) if st != self.settings.stack)
                {
                    // Positions change meaning between tokens and words, and between stacks.
                    self.session.pinned = None;
                }
                let switch = match setting {
                    Setting::Source(to) if to != self.settings.source => Some(to),
                    _ => None,
                };
                if let Some(to) = switch {
                    self.leave_source(to);
                }
                setting.apply(&mut self.settings);
                if switch == Some(Source::Pretrained) {
                    self.restore_parked();
                }
            }
            Command::LoadModel(dir) if dir.is_file() && crate::analysis::import::is_attention_file(&dir) => {
                self.open_attention(ctx, dir);
            }
            Command::OpenAttention(path) => self.open_attention(ctx, path),
            Command::BrowseAttention => {
                let tx = self.session.background_tx.clone();
                let ctx = ctx.clone();
                spawn_named("attnviz-dialog", move || {
                    let picked = rfd::FileDialog::new()
                        .set_title("Open attention saved by other code")
                        .add_filter("Attention (JSON, NumPy)", &["json", "npz"])
                        .pick_file();
                    let _ = tx.send(Background::PickedAttention(picked));
                    ctx.request_repaint();
                });
            }
            Command::LoadModel(dir) => {
                // A model the user asks for ends the training lab's run (its network would
                // replace the model at its next evaluation).
                if self.session.lab.take().is_some() {
                    self.session.lab_return = None;
                    self.set_status("The training lab's run ended: another model was opened", false);
                }
                self.session.switch_on_load = true;
                self.views.side.model_path_input = dir.display().to_string();
                self.load_model(dir);
            }
            Command::BrowseModel => {
                let tx = self.session.background_tx.clone();
                let ctx = ctx.clone();
                spawn_named("attnviz-dialog", move || {
                    let picked = rfd::FileDialog::new().set_title("Open a Hugging Face model folder").pick_folder();
                    let _ = tx.send(Background::PickedModel(picked));
                    ctx.request_repaint();
                });
            }
            Command::BrowseExport { file_name } => {
                let tx = self.session.background_tx.clone();
                let ctx = ctx.clone();
                spawn_named("attnviz-dialog", move || {
                    let picked = rfd::FileDialog::new()
                        .set_file_name(file_name)
                        .add_filter("PNG image", &["png"])
                        .add_filter("SVG vector figure", &["svg"])
                        .add_filter("PDF document", &["pdf"])
                        .add_filter("Numbers (CSV, JSON, NumPy)", &["csv", "json", "npz"])
                        .save_file();
                    let _ = tx.send(Background::PickedExport(picked));
                    ctx.request_repaint();
                });
            }
            Command::Export(path) => self.export(ctx, path),
            Command::Train(c) => self.train_command(ctx, c),
            Command::CopyImage => self.copy_image(ctx),
            Command::OpenExport => self.views.export.open = true,
            Command::CloseExport => self.views.export.open = false,
            Command::OpenHead { layer_idx, head_idx } => {
                self.settings.layer_idx = layer_idx;
                for (i, on) in self.settings.heads.iter_mut().enumerate() {
                    *on = i == head_idx;
                }
                self.settings.view = View::Heatmap;
            }
            Command::Pin(selection) => self.session.pinned = selection,
            Command::Continue(max_new) => self.start_generation(max_new),
            Command::StopGeneration => self.stop_generation(false),
            Command::Probe => self.start_probe(),
            Command::Playground(checked) => self.set_playground(checked),
            Command::Derive(key) => {
                // Only for the run shown now (a view may have asked during a change of run).
                let Some(run) = self.session.run.clone() else { return };
                if key.view_id() != Some(self.session.view_id) {
                    return;
                }
                // A lines picture reuses the matrices derived already, if any.
                let matrices = match &key {
                    DeriveKey::HeadLines(lines) => self.session.derived.head_matrices(&lines.matrices).cloned(),
                    _ => None,
                };
                if self.session.derived.start(&key) {
                    self.session.deriver.send(key, run, matrices);
                }
            }
        }
    }

    /// Reads an attention file off the UI thread; it is shown once read (a bad file changes
    /// nothing but the error shown).
    fn open_attention(&mut self, ctx: &egui::Context, path: PathBuf) {
        self.views.side.model_path_input = path.display().to_string();
        self.session.opening = Some(path.clone());
        let tx = self.session.background_tx.clone();
        let ctx = ctx.clone();
        spawn_named("attnviz-open", move || {
            let result = super::worker::read_attention(&path);
            let _ = tx.send(Background::OpenedAttention(path, result));
            ctx.request_repaint();
        });
    }

    /// Shows an attention file that was read: its run replaces what is shown (the pretrained
    /// model's run is parked, as for the playground).
    fn show_attention(&mut self, path: &std::path::Path, run: Arc<Run>) {
        if self.settings.source != Source::File {
            self.leave_source(Source::File);
        }
        self.settings.source = Source::File;
        self.settings.attention_file = Some(path.to_path_buf());
        self.settings.fit_model(run.attention.layers(), run.attention.heads());
        self.stop_generation(true);
        let id = self.next_id();
        let input = run_input(&self.settings, &self.session);
        let s = &mut self.session;
        s.requested_run_id = id;
        s.run_id = id;
        s.in_flight.clear();
        s.requested_input = Some(input.clone());
        s.shown_input = Some(input);
        s.load_error = None;
        s.run_error = None;
        s.pinned = None;
        s.probe_shown = false;
        s.inference_ms = 0.0;
        let a = &run.attention;
        let text = format!(
            "Opened {}: {} layers × {} heads × {} tokens (attention only: views that need the model say so)",
            path.display(),
            a.layers(),
            a.heads(),
            a.seq_len()
        );
        s.token_run = Some(TokenRun { source_id: id, run, window: None });
        self.set_status(text, false);
    }

    /// Handles the commands raised so far, in order.
    fn run_commands(&mut self, ctx: &egui::Context, commands: &mut Commands) {
        for command in commands.take() {
            if !matches!(command, Command::Derive(_)) {
                // What the command changed shows now, not at the next input event.
                ctx.request_repaint();
            }
            self.run_command(ctx, command);
        }
    }

    /// Writes the current view to `path` off the UI thread.
    fn export(&mut self, ctx: &egui::Context, path: PathBuf) {
        if path.as_os_str().is_empty() {
            self.set_status("Export failed: enter a file path", true);
            return;
        }
        let figure = self.current_figure();
        let style = self.export_style(ctx.theme() == egui::Theme::Dark);
        let run = self.session.run.clone();
        let tx = self.session.background_tx.clone();
        let ctx = ctx.clone();
        self.session.exporting = Some(path.clone());
        spawn_named("attnviz-export", move || {
            let result = export_file(run.as_deref(), &figure, style, &path)
                .map(|size| size.unwrap_or((0, 0)))
                .map_err(|e| e.to_string());
            let _ = tx.send(Background::Exported(path, result));
            ctx.request_repaint();
        });
    }

    /// Draws the current view's figure off the UI thread and puts it on the clipboard.
    fn copy_image(&mut self, ctx: &egui::Context) {
        let figure = self.current_figure();
        let style = self.export_style(ctx.theme() == egui::Theme::Dark);
        let run = self.session.run.clone();
        let tx = self.session.background_tx.clone();
        let ctx = ctx.clone();
        spawn_named("attnviz-copy", move || {
            let image = crate::export::render_figure(run.as_deref(), &figure, style).map_err(|e| e.to_string());
            let image = image.map(|img| {
                let size = [img.width() as usize, img.height() as usize];
                egui::ColorImage::from_rgba_unmultiplied(size, img.as_raw())
            });
            let _ = tx.send(Background::Copied(image));
            ctx.request_repaint();
        });
    }

    fn apply_theme(&mut self, ctx: &egui::Context) {
        if self.session.applied_theme != Some(self.settings.theme) {
            ctx.set_theme(match self.settings.theme {
                ThemeChoice::System => egui::ThemePreference::System,
                ThemeChoice::Dark => egui::ThemePreference::Dark,
                ThemeChoice::Light => egui::ThemePreference::Light,
            });
            self.session.applied_theme = Some(self.settings.theme);
            ctx.request_repaint(); // the new visuals show from the next frame on
        }
    }
}

/// The run the views show of `token` for the word toggle and the stack: the token run itself, its
/// merge into words or one stack of an encoder–decoder run ([`crate::analysis::stack::stack_run`];
/// the decoder's side stays at token level) — if derived already; else asks the derive thread for
/// it (copying a run's matrices is no work for the UI thread). A long input shows its overview or
/// its window (pooled spans are not merged into words).
fn shown_run(
    derived: &mut Derived,
    deriver: &Deriver,
    token: &TokenRun,
    (words, stack, long): (bool, Stack, LongView),
) -> Option<Arc<Run>> {
    if token.run.long.is_some() {
        let window = token.window.as_ref().filter(|_| long == LongView::Window);
        return Some(Arc::clone(window.unwrap_or(&token.run)));
    }
    let source_id = token.source_id;
    let key = if token.run.decoder.is_some() && (stack != Stack::Encoder || !words) {
        DeriveKey::Stack { source_id, stack }
    } else if words {
        DeriveKey::Words { source_id }
    } else {
        return Some(Arc::clone(&token.run));
    };
    if let Some(DerivedValue::ShownRun(run)) = derived.get(&key) {
        return Some(Arc::clone(run));
    }
    if derived.start(&key) {
        deriver.send(key, Arc::clone(&token.run), None);
    }
    None
}

/// Adds `DejaVu` Sans as a fallback after egui's fonts (arrows, symbols, most alphabets), and draws a
/// box for any glyph still missing: token text is arbitrary user input and must never panic.
/// Size of egui's small text (hints, captions, candidate labels) in points.
pub const SMALL_TEXT_PX: f32 = 11.0;

fn install_fonts(ctx: &egui::Context) {
    use egui::epaint::text::{FontInsert, FontPriority, InsertFontFamily};
    let mut families: Vec<InsertFontFamily> = [egui::FontFamily::Proportional, egui::FontFamily::Monospace]
        .into_iter()
        .map(|family| InsertFontFamily { family, priority: FontPriority::Lowest })
        .collect();
    // The figures' own family: the head view's labels in the font its layout measured.
    families.push(InsertFontFamily { family: super::views::figure_font(), priority: FontPriority::Highest });
    ctx.add_font(FontInsert::new("DejaVuSans", egui::FontData::from_static(crate::render::text::FONT_BYTES), families));
    ctx.set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
    // Hints, captions and the candidates' labels are small text: egui's 9 points are hard to
    // read at 1× scale.
    ctx.all_styles_mut(|style| {
        let small = style.text_styles.entry(egui::TextStyle::Small).or_insert_with(|| egui::FontId::proportional(9.0));
        small.size = small.size.max(SMALL_TEXT_PX);
    });
}

/// The background of panels in this theme (egui's own panel colour; the app's panels are
/// transparent over a window cleared to it).
pub fn panel_colour(visuals: &egui::Visuals) -> egui::Color32 {
    if visuals.dark_mode { egui::Visuals::dark().panel_fill } else { egui::Visuals::light().panel_fill }
}

/// Runs `f` on a named thread; a failure to spawn is reported on stderr.
fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(f) {
        eprintln!("error: cannot start thread {name}: {e}");
    }
}

impl eframe::App for AttnvizApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.poll();
        if let Some(image) = self.views.export.clipboard.take() {
            ctx.copy_image(image);
        }
        self.sync_view_runs();
        self.pin_newest_written();
        self.request_run_if_changed();
        self.request_compare_if_changed();
        self.request_lens_if_needed();
        self.request_attribution_if_needed();
        self.request_graph_if_needed();
        // Drag & drop of a model folder.
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect()
        });
        if let Some(dir) = dropped.into_iter().next() {
            if dir.is_file() && crate::analysis::import::is_attention_file(&dir) {
                self.run_command(ctx, Command::OpenAttention(dir));
            } else {
                let dir =
                    if dir.is_file() { dir.parent().map(std::path::Path::to_path_buf).unwrap_or(dir) } else { dir };
                self.run_command(ctx, Command::LoadModel(dir));
            }
        }
        if let Some(path) = self.session.pending_open.take() {
            self.run_command(ctx, Command::OpenAttention(path));
        }
        // Background work wakes the UI when it ends (a generation that is writing, with each of
        // its messages: no frames between). Meanwhile frames would only turn spinners, and each
        // takes the CPU from that work: none in the first BUSY_FRAME (a keystroke's run shows its
        // result with no frame between), then one every BUSY_FRAME.
        if self.is_busy_besides_writing() || self.session.exporting.is_some() {
            let elapsed = self.session.busy_since.get_or_insert_with(Instant::now).elapsed();
            ctx.request_repaint_after(BUSY_FRAME.checked_sub(elapsed).filter(|d| !d.is_zero()).unwrap_or(BUSY_FRAME));
        } else {
            self.session.busy_since = None;
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        let start = Instant::now();
        self.session.frame_started = start;
        let ctx = ui.ctx().clone();
        let before = self.settings.clone();
        self.apply_theme(&ctx);
        let mut commands = Commands::default();
        self.views.ui(ui, &view_data(&self.settings, &self.session), &mut commands);
        if ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
            commands.push(Command::Pin(None));
        }
        self.run_commands(&ctx, &mut commands);
        self.views.windows_ui(&ctx, &view_data(&self.settings, &self.session), &mut commands);
        self.run_commands(&ctx, &mut commands);
        // The shown runs change only in `logic`, before drawing: what a frame drew is what
        // `session.run` holds after it.
        self.request_flow_if_needed(&ctx);
        self.request_run_if_changed();
        self.request_compare_if_changed();
        self.request_lens_if_needed();
        self.request_attribution_if_needed();
        self.request_graph_if_needed();
        // A keystroke's frame waits, up to KEY_WAIT, for the run it asked for when the last edit's
        // run took no longer: the run has the cores to itself (a frame drawn in software would
        // take one from the model's threads), and this frame is laid out again to draw the key
        // and its result together. A run that takes longer is drawn when it comes, as any other.
        if let Some(id) = self.session.hold_for.take()
            && self.session.worker.wait_for_run(id, self.session.key_wait)
        {
            ctx.request_discard("the run a keystroke asked for has come: draw it with the key");
        }
        if self.settings != before {
            // A widget changed a setting after it was drawn (e.g. a selectable label): draw the
            // new state now, not at the next input event.
            ctx.request_repaint();
        }
        // The whole previous frame as eframe timed it (layout, tessellation, painting), not just
        // this function; headless (tests) it is not reported, and this function's time stands in.
        let ms = frame.info().cpu_usage.map_or_else(|| start.elapsed().as_secs_f32() * 1e3, |s| s * 1e3);
        // Changed settings are written soon after, not only at a clean exit (a SIGTERM loses
        // nothing older than SAVE_AFTER).
        if let Some(storage) = frame.storage_mut()
            && let Some(wait) = self.autosave(storage, Instant::now())
        {
            ctx.request_repaint_after(wait);
        }
        let s = &mut self.session;
        s.frame_ms = if s.frame_ms == 0.0 { ms } else { 0.9 * s.frame_ms + 0.1 * ms };
        self.time_generation();
        self.time_typing();
    }

    /// The panels' colour: panels are transparent (see [`AttnvizApp::new`]), the cleared window
    /// is their background.
    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        panel_colour(visuals).to_normalized_gamma_f32()
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
        self.session.saved = Some(self.settings.clone());
    }
}
