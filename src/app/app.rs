//! The eframe app: `logic` polls the worker and the export thread, `ui` draws the panels and the
//! current view, and widget commands are handled in one place per frame.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use crate::analysis::Run;
use crate::export::{Figure, Style, export_png};
use crate::model::default_model_dir;
use crate::model::hub::CachedModel;
use crate::render::Theme;

use super::state::{PeFigure, Settings, Source, ThemeChoice, TokenSelection, View};
use super::views;
use super::views::playground_panel::PlaygroundInputs;
use super::worker::{Done, Job, ModelInfo, RunSpec, Worker};
use crate::model::PlaygroundConfig;

/// Key of the settings in eframe's storage.
const SETTINGS_KEY: &str = "attnviz-settings";

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
}

/// Something a widget asks for; handled once per frame in [`AttnvizApp::handle_commands`].
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Load a model folder (keeps the current model on failure).
    LoadModel(PathBuf),
    /// Ask the OS for a model folder (native dialog, off the UI thread).
    BrowseModel,
    /// Ask the OS for a PNG path to export to.
    BrowseExport,
    /// Write the current view as PNG to this path.
    Export(PathBuf),
    /// Open one head in the heatmap view.
    OpenHead {
        /// Layer index.
        layer_idx: usize,
        /// Head index.
        head_idx: usize,
    },
}

/// A message shown in the status bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The text.
    pub text: String,
    /// Whether it reports an error.
    pub is_error: bool,
}

/// What an attention-flow result was computed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowKey {
    /// The shown run.
    pub view_id: u64,
    /// Heads averaged per layer.
    pub heads: Vec<usize>,
    /// Last layer of the flow.
    pub layer_idx: usize,
}

/// Attention flow computed in the background.
#[derive(Debug, Clone)]
pub struct FlowResult {
    /// What it was computed for.
    pub key: FlowKey,
    /// `n × n` flow values.
    pub values: Arc<Vec<f32>>,
    /// How long it took.
    pub ms: f64,
}

/// Results of background tasks other than inference.
enum Background {
    /// Attention flow finished.
    Flow(FlowResult),
    /// A PNG export finished.
    Exported(PathBuf, Result<(u32, u32), String>),
    /// A native folder dialog returned (None: cancelled or unavailable).
    PickedModel(Option<PathBuf>),
    /// A native save dialog returned.
    PickedExport(Option<PathBuf>),
    /// The scan of the local Hugging Face cache finished.
    CachedModels(Vec<CachedModel>),
}

/// Everything that is not persisted.
#[allow(clippy::struct_excessive_bools)] // independent flags of different tasks, not a state machine
pub struct Runtime {
    worker: Worker,
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
    pub token_run: Option<Arc<Run>>,
    /// Changes whenever `run` does (a new run, or the word toggle): what view caches key on.
    pub view_id: u64,
    /// Whether `run` is the word-level one.
    view_words: bool,
    /// The token-level run `run` was made from.
    run_merged_from: Option<Arc<Run>>,
    /// The comparison's run B as the views show it (merged into words with the toggle).
    pub run_b: Option<Arc<Run>>,
    /// Run B as it came.
    token_run_b: Option<Arc<Run>>,
    /// Id of run B shown, and of the newest asked for.
    pub compare_id: u64,
    /// Newest comparison requested.
    pub requested_compare_id: u64,
    requested_compare: Option<(String, Option<String>, RunSpec)>,
    /// Why run B failed, or why there is none.
    pub compare_error: Option<String>,
    /// The comparison's model-folder box as typed.
    pub compare_model_input: String,
    /// Attention flow computed in the background.
    pub flow: Option<FlowResult>,
    /// A flow computation in progress.
    pub flow_pending: Option<FlowKey>,
    /// Request id of the run shown.
    pub run_id: u64,
    /// Newest run requested.
    pub requested_run_id: u64,
    /// Input and model of the newest run requested.
    requested_input: Option<(String, Option<String>, RunSpec)>,
    /// The playground hyperparameters that run (the last valid ones).
    pub playground_active: PlaygroundConfig,
    /// The playground numbers as typed.
    pub playground_inputs: PlaygroundInputs,
    /// The playground hyperparameter at fault, and why.
    pub playground_error: Option<(&'static str, String)>,
    /// Why the last run failed.
    pub run_error: Option<String>,
    /// Tokenizer + model time of the run shown.
    pub inference_ms: f64,
    /// Token under the pointer in the head view.
    pub hovered: Option<TokenSelection>,
    /// Pinned token in the head view.
    pub pinned: Option<TokenSelection>,
    /// The typed model path (fallback when no native dialog exists).
    pub model_path_input: String,
    /// The export path being edited.
    pub export_path_input: String,
    /// Whether the export dialog is open.
    pub export_open: bool,
    /// An export being written.
    pub exporting: Option<PathBuf>,
    /// The last status message.
    pub status: Option<Status>,
    /// Commands raised this frame.
    pub commands: Vec<Command>,
    background_tx: Sender<Background>,
    background_rx: Receiver<Background>,
    /// Models found in the local Hugging Face cache (None while the scan runs).
    pub cached_models: Option<Vec<CachedModel>>,
    /// Smoothed CPU time of a whole frame (layout, tessellation, painting), in milliseconds.
    pub frame_ms: f32,
    /// Caches of the views (textures, line meshes).
    pub caches: views::Caches,
    focus_text_once: bool,
    applied_theme: Option<ThemeChoice>,
}

/// The desktop app.
pub struct AttnvizApp {
    /// Persisted settings.
    pub settings: Settings,
    /// Runtime state.
    pub rt: Runtime,
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
        });
        let ctx = ctx.clone();
        let worker = Worker::spawn(move || ctx.request_repaint()).expect("cannot start the inference thread");
        let (background_tx, background_rx) = channel();
        let model_dir = settings.model_dir.clone().unwrap_or_else(default_model_dir);
        let playground_inputs = PlaygroundInputs::of(&settings.playground);
        let mut app = Self {
            rt: Runtime {
                worker,
                next_id: 1,
                model: None,
                loading: None,
                load_error: None,
                switch_on_load: false,
                run: None,
                token_run: None,
                view_id: 0,
                view_words: false,
                run_merged_from: None,
                run_b: None,
                token_run_b: None,
                compare_id: 0,
                requested_compare_id: 0,
                requested_compare: None,
                compare_error: None,
                compare_model_input: String::new(),
                flow: None,
                flow_pending: None,
                run_id: 0,
                requested_run_id: 0,
                requested_input: None,
                playground_active: PlaygroundConfig::default(),
                playground_inputs,
                playground_error: None,
                run_error: None,
                inference_ms: 0.0,
                hovered: None,
                pinned: None,
                model_path_input: model_dir.display().to_string(),
                export_path_input: String::new(),
                export_open: false,
                exporting: None,
                status: None,
                commands: Vec::new(),
                background_tx: background_tx.clone(),
                background_rx,
                cached_models: None,
                frame_ms: 0.0,
                caches: views::Caches::default(),
                focus_text_once: true,
                applied_theme: None,
            },
            settings,
        };
        views::playground_panel::apply(&mut app.settings, &mut app.rt);
        app.load_model(model_dir);
        // Listing the cache reads every model's config.json: off the UI thread.
        let cache = startup.hf_cache.unwrap_or_else(crate::model::hub::cache_dir);
        let scan = std::thread::Builder::new().name("hf-cache-scan".into()).spawn(move || {
            let _ = background_tx.send(Background::CachedModels(crate::model::hub::list_in(&cache)));
        });
        if let Err(e) = scan {
            app.rt.cached_models = Some(Vec::new());
            app.set_status(format!("cannot list the Hugging Face cache: {e}"), true);
        }
        app
    }

    fn next_id(&mut self) -> u64 {
        self.rt.next_id += 1;
        self.rt.next_id
    }

    /// Starts loading a model folder in the background.
    pub fn load_model(&mut self, dir: PathBuf) {
        let id = self.next_id();
        self.rt.loading = Some(dir.clone());
        self.rt.worker.send(Job::Load { id, dir });
    }

    /// Which model the next run uses.
    fn run_spec(&self) -> RunSpec {
        match self.settings.source {
            Source::Pretrained => RunSpec::Pretrained(self.settings.interventions.clone()),
            Source::Playground => RunSpec::Playground(self.rt.playground_active.clone()),
        }
    }

    /// Asks for a run if the input or the model differs from the last one asked for.
    fn request_run_if_changed(&mut self) {
        let spec = self.run_spec();
        if self.rt.model.is_none() && matches!(spec, RunSpec::Pretrained(_)) {
            return;
        }
        let input = (self.settings.text.clone(), self.settings.pair().map(str::to_string), spec);
        if self.rt.requested_input.as_ref() == Some(&input) {
            return;
        }
        let id = self.next_id();
        self.rt.requested_run_id = id;
        self.rt.worker.send(Job::Run { id, text: input.0.clone(), pair: input.1.clone(), spec: input.2.clone() });
        self.rt.requested_input = Some(input);
    }

    /// What run B of the comparison is (None: nothing to compare, with the reason).
    fn compare_input(&self) -> Result<(String, Option<String>, RunSpec), String> {
        use super::state::CompareSource;
        let pair = self.settings.pair().map(str::to_string);
        match self.settings.compare.source {
            CompareSource::Sentence => {
                if self.settings.compare.text_b.trim().is_empty() {
                    return Err("Type sentence B above to compare.".into());
                }
                Ok((self.settings.compare.text_b.clone(), None, self.run_spec()))
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
                Ok((self.settings.text.clone(), pair, RunSpec::Pretrained(crate::model::Interventions::default())))
            }
            CompareSource::Model => match &self.settings.compare.model_b {
                Some(dir) => Ok((self.settings.text.clone(), pair, RunSpec::Folder(dir.clone()))),
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
                self.rt.requested_compare = None;
                self.rt.token_run_b = None;
                self.rt.run_b = None;
                self.rt.compare_error = Some(why);
            }
            Ok(input) => {
                if self.rt.requested_compare.as_ref() == Some(&input) {
                    return;
                }
                if self.rt.model.is_none() && !matches!(input.2, RunSpec::Playground(_)) {
                    return;
                }
                let id = self.next_id();
                self.rt.requested_compare_id = id;
                self.rt.compare_error = None;
                self.rt.worker.send(Job::Compare {
                    id,
                    text: input.0.clone(),
                    pair: input.1.clone(),
                    spec: input.2.clone(),
                });
                self.rt.requested_compare = Some(input);
            }
        }
    }

    /// Keeps the shown runs in step with the model's runs and the word toggle.
    fn sync_view_runs(&mut self) {
        let words = self.settings.words;
        let shown = |token: &Option<Arc<Run>>| {
            token.as_ref().map(|r| if words { Arc::new(crate::analysis::words::merge_run(r)) } else { Arc::clone(r) })
        };
        let same_source = match (&self.rt.run_merged_from, &self.rt.token_run) {
            (None, None) => true,
            (Some(from), Some(token)) => Arc::ptr_eq(from, token),
            _ => false,
        };
        let stale = !same_source || self.rt.view_words != words;
        if stale {
            if self.rt.view_words != words {
                // Positions change meaning between tokens and words.
                self.rt.pinned = None;
                self.rt.hovered = None;
            }
            self.rt.run = shown(&self.rt.token_run);
            self.rt.run_merged_from = self.rt.token_run.clone();
            self.rt.view_words = words;
            self.rt.view_id += 1;
            self.rt.run_b = None;
        }
        if self.rt.run_b.is_none() && self.rt.token_run_b.is_some() {
            self.rt.run_b = shown(&self.rt.token_run_b);
        }
    }

    /// Whether a run or a load is still in flight.
    pub fn is_busy(&self) -> bool {
        self.rt.loading.is_some()
            || self.rt.requested_run_id > self.rt.run_id
            || self.rt.requested_compare_id > self.rt.compare_id
            || self.rt.flow_pending.is_some()
    }

    fn set_status(&mut self, text: impl Into<String>, is_error: bool) {
        self.rt.status = Some(Status { text: text.into(), is_error });
    }

    /// Applies finished background work.
    fn poll(&mut self) {
        while let Some(done) = self.rt.worker.try_recv() {
            match done {
                Done::Loaded { dir, result, .. } => {
                    self.rt.loading = None;
                    match result {
                        Ok(info) => {
                            self.settings.fit_model(info.layers, info.heads);
                            self.settings.interventions.fit_to(info.layers, info.heads);
                            // A model the user just loaded is the one they want to see.
                            if std::mem::take(&mut self.rt.switch_on_load) {
                                self.settings.source = Source::Pretrained;
                            }
                            let embedded = dir == default_model_dir();
                            self.settings.model_dir = (!embedded).then(|| dir.clone());
                            self.settings.remember_model(&dir);
                            self.rt.model_path_input = dir.display().to_string();
                            self.set_status(format!("Loaded {} from {}", info.name, dir.display()), false);
                            self.rt.model = Some(info);
                            self.rt.load_error = None;
                            self.rt.pinned = None;
                            // The old run belongs to the old model (its heads and layers differ).
                            self.rt.token_run = None;
                            self.rt.requested_compare = None;
                            self.rt.run_id = self.rt.requested_run_id;
                            self.rt.requested_input = None;
                        }
                        Err(e) => {
                            self.rt.switch_on_load = false;
                            let msg = format!("Could not load {}: {e}", dir.display());
                            if self.rt.model.is_none() && dir != default_model_dir() {
                                // Nothing to keep yet (e.g. a remembered folder that vanished): fall back.
                                self.settings.model_dir = None;
                                self.load_model(default_model_dir());
                            }
                            self.rt.load_error = Some(msg.clone());
                            self.set_status(msg, true);
                        }
                    }
                }
                Done::Ran { id, result, elapsed_ms } => {
                    if id <= self.rt.run_id {
                        continue; // older than what is shown
                    }
                    match result {
                        Ok(run) => {
                            self.rt.run_id = id;
                            // The playground, or a run of fewer layers, has another shape.
                            self.settings.fit_model(run.attention.layers(), run.attention.heads());
                            self.rt.inference_ms = elapsed_ms;
                            if let Some((_, pos)) = self.rt.pinned {
                                if pos >= run.tokens.len() {
                                    self.rt.pinned = None;
                                }
                            }
                            self.rt.token_run = Some(run);
                            self.rt.run_error = None;
                        }
                        Err(e) => {
                            self.rt.run_id = id;
                            self.rt.run_error = Some(e);
                        }
                    }
                }
                Done::Compared { id, result } => {
                    if id <= self.rt.compare_id {
                        continue;
                    }
                    self.rt.compare_id = id;
                    match result {
                        Ok(run) => {
                            self.rt.token_run_b = Some(run);
                            self.rt.compare_error = None;
                        }
                        Err(e) => {
                            self.rt.token_run_b = None;
                            self.rt.compare_error = Some(e);
                        }
                    }
                    self.rt.run_b = None; // rebuilt by sync_view_runs
                }
            }
        }
        while let Ok(msg) = self.rt.background_rx.try_recv() {
            match msg {
                Background::Flow(result) => {
                    if self.rt.flow_pending.as_ref() == Some(&result.key) {
                        self.rt.flow_pending = None;
                    }
                    self.rt.flow = Some(result);
                }
                Background::Exported(path, result) => {
                    self.rt.exporting = None;
                    match result {
                        Ok((w, h)) => {
                            let size = if w == 0 { "numbers".to_string() } else { format!("{w}×{h} px") };
                            self.set_status(format!("Exported {} ({size})", path.display()), false);
                            self.settings.export_dir = path.parent().map(std::path::Path::to_path_buf);
                            self.rt.export_open = false;
                        }
                        Err(e) => self.set_status(format!("Export failed: {e}"), true),
                    }
                }
                Background::PickedModel(Some(dir)) => {
                    self.rt.model_path_input = dir.display().to_string();
                    self.rt.commands.push(Command::LoadModel(dir));
                }
                Background::PickedExport(Some(path)) => self.rt.export_path_input = path.display().to_string(),
                Background::CachedModels(models) => self.rt.cached_models = Some(models),
                Background::PickedModel(None) | Background::PickedExport(None) => {
                    self.set_status(
                        "Nothing chosen (if no file dialog appeared, this desktop has none: type the path in the box)",
                        false,
                    );
                }
            }
        }
    }

    /// The figure the current view would export.
    pub fn current_figure(&self) -> Figure {
        let heads = self.settings.selected_heads();
        match self.settings.view {
            View::Head => Figure::HeadView {
                layer_idx: self.settings.layer_idx,
                head_idxs: heads,
                selected_token: self.rt.pinned,
                threshold: self.settings.threshold,
            },
            View::Model => Figure::ModelGrid,
            View::Heatmap => Figure::Heatmap { layer_idx: self.settings.layer_idx, head_idxs: heads },
            View::Neuron => Figure::Neuron {
                layer_idx: self.settings.layer_idx,
                head_idx: heads.first().copied().unwrap_or(0),
                query_pos: self.settings.neuron_query,
            },
            View::Stats => Figure::Stats(self.settings.stat),
            View::Rollout => {
                let flow = match &self.rt.flow {
                    Some(f)
                        if self.settings.rollout_mode == super::state::RolloutMode::Flow
                            && f.key == self.flow_key() =>
                    {
                        Some(Arc::clone(&f.values))
                    }
                    _ => None,
                };
                Figure::Rollout { layer_idx: self.settings.layer_idx, head_idxs: heads, flow }
            }
            View::Compare => match &self.rt.run_b {
                Some(b) => Figure::Compare {
                    layer_idx: self.settings.layer_idx,
                    head_idxs: heads,
                    other: crate::export::SharedRun(Arc::clone(b)),
                    // As in the view: different tokens fall back to side by side.
                    difference: self.settings.compare.mode == super::state::CompareMode::Difference
                        && self.rt.run.as_ref().is_some_and(|a| a.tokens.tokens == b.tokens.tokens),
                },
                None => Figure::Heatmap { layer_idx: self.settings.layer_idx, head_idxs: heads },
            },
            View::Positions => {
                let learned = |cosine: bool| match &self.rt.model {
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
        let (layers, heads) = self.rt.run.as_ref().map_or((1, 1), |r| (r.attention.layers(), r.attention.heads()));
        let (layer_idx, heads) = self.settings.selection_for(layers, heads);
        FlowKey { view_id: self.rt.view_id, heads, layer_idx }
    }

    /// Starts computing attention flow in the background if the rollout view wants it and it is
    /// not computed or running already.
    fn request_flow_if_needed(&mut self, ctx: &egui::Context) {
        use super::state::RolloutMode;
        if self.settings.view != View::Rollout || self.settings.rollout_mode != RolloutMode::Flow {
            return;
        }
        let Some(run) = self.rt.run.clone() else { return };
        if crate::analysis::rollout::flow_refusal(run.attention.seq_len()).is_some() {
            return; // the view says why
        }
        let key = self.flow_key();
        if key.heads.is_empty()
            || self.rt.flow.as_ref().is_some_and(|f| f.key == key)
            || self.rt.flow_pending.as_ref() == Some(&key)
        {
            return;
        }
        self.rt.flow_pending = Some(key.clone());
        let tx = self.rt.background_tx.clone();
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

    /// Handles this frame's commands.
    fn handle_commands(&mut self, ctx: &egui::Context) {
        for command in std::mem::take(&mut self.rt.commands) {
            match command {
                Command::LoadModel(dir) => {
                    self.rt.switch_on_load = true;
                    self.load_model(dir);
                }
                Command::BrowseModel => {
                    let tx = self.rt.background_tx.clone();
                    let ctx = ctx.clone();
                    spawn_named("attnviz-dialog", move || {
                        let picked = rfd::FileDialog::new().set_title("Open a Hugging Face model folder").pick_folder();
                        let _ = tx.send(Background::PickedModel(picked));
                        ctx.request_repaint();
                    });
                }
                Command::BrowseExport => {
                    let tx = self.rt.background_tx.clone();
                    let ctx = ctx.clone();
                    let name = PathBuf::from(&self.rt.export_path_input)
                        .file_name()
                        .map_or_else(|| "attnviz.png".to_string(), |n| n.to_string_lossy().into_owned());
                    spawn_named("attnviz-dialog", move || {
                        let picked = rfd::FileDialog::new()
                            .set_file_name(name)
                            .add_filter("PNG image", &["png"])
                            .add_filter("Numbers (CSV, JSON, NumPy)", &["csv", "json", "npz"])
                            .save_file();
                        let _ = tx.send(Background::PickedExport(picked));
                        ctx.request_repaint();
                    });
                }
                Command::Export(path) => {
                    if path.as_os_str().is_empty() {
                        self.set_status("Export failed: enter a file path", true);
                        continue;
                    }
                    let figure = self.current_figure();
                    let style = self.export_style(ctx.theme() == egui::Theme::Dark);
                    let run = self.rt.run.clone();
                    let tx = self.rt.background_tx.clone();
                    let ctx = ctx.clone();
                    self.rt.exporting = Some(path.clone());
                    spawn_named("attnviz-export", move || {
                        let is_png = path.extension().is_none_or(|e| e.eq_ignore_ascii_case("png"));
                        let result = if is_png {
                            export_png(run.as_deref(), &figure, style, &path).map_err(|e| e.to_string())
                        } else {
                            crate::export::export_table(run.as_deref(), &figure, &path)
                                .map(|()| (0, 0))
                                .map_err(|e| e.to_string())
                        };
                        let _ = tx.send(Background::Exported(path, result));
                        ctx.request_repaint();
                    });
                }
                Command::OpenHead { layer_idx, head_idx } => {
                    self.settings.layer_idx = layer_idx;
                    for (i, on) in self.settings.heads.iter_mut().enumerate() {
                        *on = i == head_idx;
                    }
                    self.settings.view = View::Heatmap;
                }
            }
        }
    }

    fn apply_theme(&mut self, ctx: &egui::Context) {
        if self.rt.applied_theme != Some(self.settings.theme) {
            ctx.set_theme(match self.settings.theme {
                ThemeChoice::System => egui::ThemePreference::System,
                ThemeChoice::Dark => egui::ThemePreference::Dark,
                ThemeChoice::Light => egui::ThemePreference::Light,
            });
            self.rt.applied_theme = Some(self.settings.theme);
            ctx.request_repaint(); // the new visuals show from the next frame on
        }
    }
}

/// Adds `DejaVu` Sans as a fallback after egui's fonts (arrows, symbols, most alphabets), and draws a
/// box for any glyph still missing: token text is arbitrary user input and must never panic.
fn install_fonts(ctx: &egui::Context) {
    use egui::epaint::text::{FontInsert, FontPriority, InsertFontFamily};
    let families = [egui::FontFamily::Proportional, egui::FontFamily::Monospace]
        .into_iter()
        .map(|family| InsertFontFamily { family, priority: FontPriority::Lowest })
        .collect();
    ctx.add_font(FontInsert::new("DejaVuSans", egui::FontData::from_static(crate::render::text::FONT_BYTES), families));
    ctx.set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
}

/// Runs `f` on a named thread; a failure to spawn is reported through the status bar instead.
fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(f) {
        eprintln!("error: cannot start thread {name}: {e}");
    }
}

impl eframe::App for AttnvizApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.poll();
        self.sync_view_runs();
        self.request_run_if_changed();
        self.request_compare_if_changed();
        // Drag & drop of a model folder.
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect()
        });
        if let Some(dir) = dropped.into_iter().next() {
            let dir = if dir.is_file() { dir.parent().map(std::path::Path::to_path_buf).unwrap_or(dir) } else { dir };
            self.rt.model_path_input = dir.display().to_string();
            self.rt.switch_on_load = true;
            self.load_model(dir);
        }
        if self.is_busy() || self.rt.exporting.is_some() {
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        let start = Instant::now();
        let ctx = ui.ctx().clone();
        let before = self.settings.clone();
        self.apply_theme(&ctx);
        let focus_text = std::mem::take(&mut self.rt.focus_text_once);
        views::input_bar::input_bar_ui(ui, &mut self.settings, &mut self.rt, focus_text);
        views::side_panel::side_panel_ui(ui, &mut self.settings, &mut self.rt);
        views::status_bar_ui(ui, &self.settings, &self.rt);
        egui::CentralPanel::default_margins().show(ui, |ui| views::central_ui(ui, &mut self.settings, &mut self.rt));
        if self.rt.export_open {
            views::export_dialog::export_dialog_ui(&ctx, &mut self.settings, &mut self.rt);
        }
        if ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
            self.rt.pinned = None;
        }
        self.handle_commands(&ctx);
        self.sync_view_runs();
        self.request_flow_if_needed(&ctx);
        self.request_run_if_changed();
        self.request_compare_if_changed();
        if self.settings != before {
            // A widget changed a setting after it was drawn (e.g. a selectable label): draw the
            // new state now, not at the next input event.
            ctx.request_repaint();
        }
        // The whole previous frame as eframe timed it (layout, tessellation, painting), not just
        // this function; headless (tests) it is not reported, and this function's time stands in.
        let ms = frame.info().cpu_usage.map_or_else(|| start.elapsed().as_secs_f32() * 1e3, |s| s * 1e3);
        self.rt.frame_ms = if self.rt.frame_ms == 0.0 { ms } else { 0.9 * self.rt.frame_ms + 0.1 * ms };
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
    }
}
