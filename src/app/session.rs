//! What the app's features share: the model, the shown run and how it came to be, the worker, the
//! status. Each feature keeps its own results (`app::features`); this holds what more than one
//! of them reads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::derive::{Derived, Deriver};
use super::state::{Settings, Source, TokenSelection, View};
use super::tasks::Tasks;
use super::worker::{LongRequest, ModelInfo, RunSpec, Worker};
use crate::analysis::Run;
use crate::analysis::Stack;
use crate::analysis::long::LongView;
use crate::model::PlaygroundConfig;
use crate::model::hub::CachedModel;

/// Said by views that run the model when an attention file is shown (`{what}`: what they need).
pub const FILE_NEEDS_MODEL: &str = "This view needs the model: an attention file holds attention only, and {what} the model's residual stream through its unembedding. Open the model (side panel) to use it.";

/// Said above every view when an encoder–decoder has no target yet.
pub const NO_TARGET_NOTE: &str = "Encoder alone: this encoder–decoder has no target yet. Type a Target (or press Translate) to see the decoder's self-attention and its cross-attention to the source.";

/// A message shown in the status bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The text.
    pub text: String,
    /// Whether it reports an error.
    pub is_error: bool,
}

/// A model run as it came from the worker, with the id word merges are keyed on.
#[derive(Clone)]
pub struct TokenRun {
    /// Unique id of this result.
    pub source_id: u64,
    /// The run.
    pub run: Arc<Run>,
    /// For a long input (`run` is its overview): its window at token level.
    pub window: Option<Arc<Run>>,
}

/// What a run is of: sentence A, sentence B, an encoder–decoder's target, the model.
pub type RunInput = (String, Option<String>, Option<String>, RunSpec);

/// What a shown run was made from: the token run's id, the word toggle, the stack, the long view.
pub type ViewedFrom = (u64, bool, Stack, LongView);

/// The model a run of `settings` uses (`playground`: the last valid playground hyperparameters).
pub fn run_spec(settings: &Settings, playground: &PlaygroundConfig) -> RunSpec {
    match settings.source {
        Source::Pretrained => {
            let long = LongRequest { record_tokens: settings.record_tokens, window_start: settings.window_start };
            RunSpec::Pretrained(settings.interventions.clone(), Some(long))
        }
        Source::Playground => RunSpec::Playground(playground.clone()),
        Source::File => RunSpec::File(settings.attention_file.clone().unwrap_or_default()),
    }
}

/// The runs asked of the worker for the shown run: ids, inputs, what is in flight.
#[derive(Default)]
pub struct Asked {
    /// Request id of the run shown.
    pub run_id: u64,
    /// Newest run requested.
    pub requested_run_id: u64,
    /// Input and model of the newest run requested.
    pub(crate) requested_input: Option<RunInput>,
    /// Runs asked for and not answered yet, with their input.
    pub(crate) in_flight: Vec<(u64, RunInput)>,
    /// Input and model of the run shown (or of the failed run whose error is shown).
    pub(crate) shown_input: Option<RunInput>,
    /// Id of the last probe of repeated random tokens asked for.
    pub(crate) probe_id: u64,
}

impl Asked {
    /// Makes run `id` of `input` the one shown without asking the worker (a parked run given back,
    /// an attention file read): whatever is in flight is older than it.
    pub(crate) fn show_now(&mut self, id: u64, input: RunInput) {
        self.requested_run_id = id;
        self.run_id = id;
        self.in_flight.clear();
        self.requested_input = Some(input.clone());
        self.shown_input = Some(input);
    }
}

/// How quickly a keystroke's run comes back: whether the next key's frame waits for its run, and
/// the timing logged for `scripts/bench-typing.sh`.
pub struct KeyClock {
    /// When the frame that asked for the newest run began (the keystroke's frame), and when a
    /// frame first drew that run: logged once everything derived from it is drawn, if
    /// `ATTNVIZ_TYPING_LOG` is set.
    pub(crate) typed: Option<(u64, Instant, Option<Instant>)>,
    /// The newest run asked for by an edit of the text alone (the model and everything else as
    /// shown), and the worker's time for the last such run answered.
    pub(crate) edit_run: Option<u64>,
    pub(crate) edit_run_ms: Option<f64>,
    /// The run this frame waits for before it is drawn (an edit expected to be quick).
    pub(crate) hold_for: Option<u64>,
    /// Longest a keystroke's frame waits for its run (the shell's `KEY_WAIT`).
    pub(crate) key_wait: std::time::Duration,
    /// When the frame being drawn began.
    pub(crate) frame_started: Instant,
}

/// The playground hyperparameters that run, and what is wrong with the ones typed.
#[derive(Default)]
pub struct Playground {
    /// The playground hyperparameters that run (the last valid ones).
    pub active: PlaygroundConfig,
    /// The playground hyperparameter at fault, and why.
    pub error: Option<(&'static str, String)>,
}

/// What the pretrained model showed when the playground (or a file) was opened: given back on the
/// way back when its input is still the one asked for (a generation is not written again).
pub(crate) struct Parked {
    /// The run shown (a generation's prompt and continuation).
    pub token_run: TokenRun,
    /// What it was the run of.
    pub input: RunInput,
    /// The generation it came from, if any.
    pub generation: Option<super::generation::Generation>,
    /// Tokenizer + model time of that run.
    pub inference_ms: f64,
    /// The status bar's message then.
    pub status: Option<Status>,
    /// The pinned token.
    pub pinned: Option<TokenSelection>,
}

/// What each source (pretrained, playground, file) keeps while another is shown.
#[derive(Default)]
pub(crate) struct Sources {
    /// The pretrained model's run while the playground or a file is shown.
    pub parked: Option<Parked>,
    /// The layer and heads selected on the sources not shown (each keeps its own).
    pub selections: Vec<(Source, (usize, Vec<bool>))>,
}

/// What the app knows besides the settings and the features' own results: the model, the shown
/// run, what is in flight. Views never see it: they get a borrowed view of it (`ViewData`, in `data.rs`).
pub struct Session {
    /// The inference thread.
    pub worker: Worker,
    /// The derive thread.
    pub(crate) deriver: Deriver,
    /// The loaded model.
    pub model: Option<ModelInfo>,
    /// A model folder being loaded.
    pub loading: Option<PathBuf>,
    /// Why the last load failed.
    pub load_error: Option<String>,
    /// The folder holding the embedded models, or why none was found (where they were looked for
    /// and what to do).
    pub embedded: Result<PathBuf, String>,
    /// Whether the load in flight was asked for by the user (then its model is shown, even if the
    /// playground was); the load at launch keeps the remembered choice.
    pub(crate) switch_on_load: bool,
    /// The run the views show: the model's run, merged into words when that toggle is on.
    pub run: Option<Arc<Run>>,
    /// The model's run as it came (token level).
    pub(crate) token_run: Option<TokenRun>,
    /// Changes whenever `run` does (a new run, or the word toggle): what view caches key on.
    pub view_id: u64,
    /// What `run` was made from (None while merging).
    pub(crate) shown_from: Option<ViewedFrom>,
    /// The runs asked for.
    pub asked: Asked,
    /// Whether the run shown is the probe of repeated random tokens (not the text).
    pub probe_shown: bool,
    /// The playground's hyperparameters.
    pub playground: Playground,
    /// Why the last run failed.
    pub run_error: Option<String>,
    /// Tokenizer + model time of the run shown.
    pub inference_ms: f64,
    /// Keystrokes' runs.
    pub(crate) keys: KeyClock,
    /// Pinned token in the head view.
    pub pinned: Option<TokenSelection>,
    /// The last status message.
    pub status: Option<Status>,
    /// Derived data of the shown run, computed on the derive thread.
    pub derived: Derived,
    /// The generation shown or in progress (the shown run is its prompt and continuation).
    pub generation: Option<super::generation::Generation>,
    /// What the sources not shown keep.
    pub(crate) sources: Sources,
    /// Models found in the local Hugging Face cache (None while the scan runs).
    pub cached_models: Option<Vec<CachedModel>>,
    /// Work on threads of their own: dialogs, exports, attention files being read.
    pub tasks: Tasks,
}

impl Session {
    /// Whether the run shown is the run of `settings`' text and model (or no run, or a failed
    /// one, is shown): what a settled app must always satisfy.
    pub fn shown_input_matches(&self, settings: &Settings) -> bool {
        if self.run.is_none() || self.run_error.is_some() {
            return true;
        }
        self.asked.shown_input.as_ref() == Some(&self.run_input(settings))
    }

    /// The target the next run's decoder reads: the Target box, for a loaded encoder–decoder.
    pub(crate) fn run_target(&self, settings: &Settings) -> Option<String> {
        let seq2seq = self.model.as_ref().is_some_and(|m| m.seq2seq) && settings.source == Source::Pretrained;
        (seq2seq && !settings.target.trim().is_empty()).then(|| settings.target.clone())
    }

    /// What the next run of `settings` is of: the sentences, the target and the model (an
    /// attention file is the same run whatever the sentence boxes hold).
    pub(crate) fn run_input(&self, settings: &Settings) -> RunInput {
        let spec = run_spec(settings, &self.playground.active);
        if matches!(spec, RunSpec::File(_)) {
            return (String::new(), None, None, spec);
        }
        // A language model reads one text: its sentence B is the corrupted input of patching.
        let one_text = matches!(spec, RunSpec::Pretrained(..))
            && self.model.as_ref().is_some_and(|m| !m.reads_pairs && !m.seq2seq);
        let pair = settings.pair().filter(|_| !one_text).map(str::to_string);
        (settings.text.clone(), pair, self.run_target(settings), spec)
    }

    /// Drops the shown run and every run in flight (they belong to another model): the next
    /// frame asks for the run of the new one.
    pub(crate) fn forget_run(&mut self) {
        self.pinned = None;
        self.token_run = None;
        self.asked.shown_input = None;
        self.asked.in_flight.clear();
        self.asked.run_id = self.asked.requested_run_id;
    }

    /// The model the app opens on: `$ATTNVIZ_MODEL`, else the embedded `MiniLM` (or why it was not
    /// found).
    pub fn default_model(&self) -> Result<PathBuf, String> {
        if let Some(dir) = std::env::var_os("ATTNVIZ_MODEL").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(dir));
        }
        self.embedded.as_ref().map(|d| d.join(crate::model::loader::DEFAULT_MODEL_NAME)).map_err(Clone::clone)
    }

    /// Whether `dir` is the model the app opens on.
    pub fn is_default_model(&self, dir: &std::path::Path) -> bool {
        self.default_model().is_ok_and(|d| d == dir)
    }

    /// Starts loading a model folder in the background.
    pub fn load_model(&mut self, dir: PathBuf) {
        let id = self.worker.next_id();
        self.loading = Some(dir.clone());
        self.worker.send(super::worker::Job::Load { id, dir });
    }

    /// Shows `text` in the status bar.
    pub fn set_status(&mut self, text: impl Into<String>, is_error: bool) {
        self.status = Some(Status { text: text.into(), is_error });
    }

    /// Puts what a translation wrote in the Target box without running the model again: the shown
    /// run (the translation's) is already the run of that target.
    pub(crate) fn adopt_target(&mut self, settings: &mut Settings, target: String) {
        settings.target = target;
        let wanted = self.run_target(settings);
        for input in [&mut self.asked.requested_input, &mut self.asked.shown_input].into_iter().flatten() {
            input.2.clone_from(&wanted);
        }
    }

    /// Whether a generation is writing.
    pub fn writing(&self) -> bool {
        self.generation.as_ref().is_some_and(|g| g.finished.is_none())
    }

    /// What the features read this frame to decide what to ask for.
    pub fn shown<'a>(&'a self, settings: &'a Settings) -> Shown<'a> {
        Shown {
            settings,
            model: self.model.as_ref(),
            token_run: self.token_run.as_ref(),
            writing: self.writing(),
            worker: &self.worker,
            generation: self.generation.as_ref(),
        }
    }
}

/// What a feature reads of the session to decide what to ask the worker for.
pub struct Shown<'a> {
    /// The settings.
    pub settings: &'a Settings,
    /// The loaded model.
    pub model: Option<&'a ModelInfo>,
    /// The model's run as it came (token level).
    pub token_run: Option<&'a TokenRun>,
    /// Whether a generation is writing (it replaces the run at every token).
    pub writing: bool,
    /// The inference thread.
    pub worker: &'a Worker,
    /// The generation shown or in progress.
    pub generation: Option<&'a crate::app::generation::Generation>,
}

impl Shown<'_> {
    /// The token run a readout view computes from: when `view` is open and applies (`refused`
    /// says it does not), no generation is writing (it replaces the run at every token: the
    /// view waits for its end) and there are tokens.
    pub fn readout_input(&self, view: View, refused: bool) -> Option<&TokenRun> {
        if self.settings.view != view || refused || self.writing {
            return None;
        }
        self.token_run.filter(|t| !t.run.tokens.is_empty())
    }
}
