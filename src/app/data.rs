//! What views read: plain data, borrowed from the app for one frame. Views draw it and push
//! commands; they never change it.

use std::path::Path;
use std::sync::Arc;

use super::derive::Derived;
use super::state::{Settings, TokenSelection};
use super::worker::ModelInfo;
use crate::analysis::Run;
use crate::model::hub::CachedModel;

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

/// A generation: the model continuing the text, streamed into the views.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Request id.
    pub id: u64,
    /// Tokens asked for.
    pub max_new: usize,
    /// Tokens written so far.
    pub written: usize,
    /// Each step's candidates (step `i` wrote token `prompt_len + i`).
    pub steps: Arc<Vec<Vec<crate::model::generate::Candidate>>>,
    /// Why it stopped, once it has.
    pub finished: Option<crate::model::generate::Stop>,
    /// Why it failed.
    pub error: Option<String>,
    /// Seconds spent writing.
    pub seconds: f64,
    /// The prompt (or a translation's source) as typed.
    pub prompt: String,
    /// What was written so far, decoded by the tokenizer (a continuation: what follows the prompt;
    /// a translation: the target).
    pub text: Option<String>,
    /// Set to stop the worker.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    /// When the views drew what it wrote (the Continue rate as the user sees it).
    pub timing: GenerationTiming,
}

/// When the frames drew a generation's tokens: the app's writing rate as seen on screen, logged
/// to stderr when it ends if `ATTNVIZ_GENERATION_LOG` is set (`scripts/bench-continue.sh`).
#[derive(Debug, Clone, Copy)]
pub struct GenerationTiming {
    /// When Continue was pressed.
    pub started: std::time::Instant,
    /// The first frame that drew a written token.
    pub first_drawn: Option<std::time::Instant>,
    /// The last frame that drew more written tokens than the frame before.
    pub last_drawn: Option<std::time::Instant>,
    /// Written tokens the last such frame drew.
    pub drawn: usize,
    /// Frames drawn while it wrote.
    pub frames: usize,
    /// Frames that drew more written tokens than the frame before.
    pub advances: usize,
    /// The first frame after the end with nothing left to derive (the final run drawn).
    pub settled: Option<std::time::Instant>,
}

impl GenerationTiming {
    /// Timing of a generation that starts now.
    pub fn start() -> Self {
        Self {
            started: std::time::Instant::now(),
            first_drawn: None,
            last_drawn: None,
            drawn: 0,
            frames: 0,
            advances: 0,
            settled: None,
        }
    }

    /// Counts a frame that drew `written` written tokens.
    pub fn frame(&mut self, written: usize) {
        self.frames += 1;
        if written > self.drawn {
            let now = std::time::Instant::now();
            self.first_drawn.get_or_insert(now);
            self.last_drawn = Some(now);
            self.drawn = written;
            self.advances += 1;
        }
    }

    /// One line: tokens written, seconds from Continue until the final run was drawn settled, tokens
    /// per second end to end (prompt pass and final pass included) and while streaming (first to
    /// last token drawn, as `attnviz bench --generate` counts), frames drawn and frames that showed
    /// a new token.
    pub fn line(&self, written: usize) -> String {
        let secs = |t: Option<std::time::Instant>, from: std::time::Instant| {
            t.map_or(0.0, |t| t.duration_since(from).as_secs_f64())
        };
        let total = secs(self.settled, self.started);
        let first = secs(self.first_drawn, self.started);
        let stream = self.first_drawn.map_or(0.0, |f| secs(self.last_drawn, f));
        let rate = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
        format!(
            "continue: written={written} drawn={} seconds={total:.3} first_token_s={first:.3} \
             end_to_end_tokens_per_s={:.2} streaming_tokens_per_s={:.2} frames={} frames_with_new_tokens={}",
            self.drawn,
            rate(written as f64, total),
            rate(self.drawn.saturating_sub(1) as f64, stream),
            self.frames,
            self.advances
        )
    }
}

/// Everything a view may read in one frame.
#[allow(clippy::struct_excessive_bools)] // independent facts of different tasks, not a state machine
#[derive(Clone, Copy)]
pub struct ViewData<'a> {
    /// The persisted settings (views change them through [`super::command::Command::Set`]).
    pub settings: &'a Settings,
    /// The run the views show (merged into words when that toggle is on).
    pub run: Option<&'a Arc<Run>>,
    /// Changes whenever `run` does: what view caches key on.
    pub view_id: u64,
    /// The comparison's run B as shown.
    pub run_b: Option<&'a Arc<Run>>,
    /// Id of run B shown.
    pub compare_id: u64,
    /// Why there is no run B.
    pub compare_error: Option<&'a str>,
    /// Why the last run failed.
    pub run_error: Option<&'a str>,
    /// Whether a newer run than the shown one is on its way.
    pub run_pending: bool,
    /// Whether the run to show is being derived from the model's (merged into words, or one
    /// stack of an encoder–decoder taken).
    pub merging: bool,
    /// Tokenizer + model time of the run shown.
    pub inference_ms: f64,
    /// The loaded model.
    pub model: Option<&'a ModelInfo>,
    /// A model folder being loaded.
    pub loading: Option<&'a Path>,
    /// Why the last load failed.
    pub load_error: Option<&'a str>,
    /// Models found in the local Hugging Face cache (None while the scan runs).
    pub cached_models: Option<&'a [CachedModel]>,
    /// The token pinned in the head view.
    pub pinned: Option<TokenSelection>,
    /// The playground hyperparameter at fault, and why.
    pub playground_error: Option<&'a (&'static str, String)>,
    /// Attention flow computed in the background, and what is being computed.
    pub flow: Option<&'a FlowResult>,
    /// Whether an export is being written.
    pub exporting: bool,
    /// The last status message.
    pub status: Option<&'a Status>,
    /// Smoothed CPU time of a whole frame, in milliseconds.
    pub frame_ms: f32,
    /// Derived data of the shown run (statistics, rollout, thumbnails, head-view matrices).
    pub derived: &'a Derived,
    /// The generation shown or in progress.
    pub generation: Option<&'a Generation>,
    /// The logit lens of the token run, as far as it is computed.
    pub lens: &'a crate::app::lens::LensState,
    /// Why the logit lens does not apply (None: it does).
    pub lens_refusal: Option<&'a str>,
    /// The token-level input the lens reads (the shown run may be merged into words).
    pub lens_tokens: Option<&'a crate::analysis::tokens::Tokens>,
    /// The attribution shown: what it is of, the result, milliseconds it took.
    #[allow(clippy::type_complexity)]
    pub dla:
        Option<&'a (crate::app::readout::DlaKey, Result<Arc<crate::analysis::attribution::Attribution>, String>, f64)>,
    /// Whether a newer attribution is being computed.
    pub dla_pending: bool,
    /// The selected head's effect shown.
    #[allow(clippy::type_complexity)]
    pub effect: Option<&'a (crate::app::readout::EffectKey, Result<Arc<crate::app::readout::EffectShown>, String>)>,
    /// Whether a newer effect is being computed.
    pub effect_pending: bool,
    /// The contribution graph shown: the token run it is of, the graph, milliseconds it took.
    #[allow(clippy::type_complexity)]
    pub graph: Option<&'a (u64, Result<Arc<crate::app::readout::GraphShown>, String>, f64)>,
    /// Whether a graph is being computed.
    pub graph_pending: bool,
    /// Why the contribution graph does not apply (None: it does).
    pub graph_refusal: Option<&'a str>,
    /// The training lab's run.
    pub lab: Option<&'a super::lab::Lab>,
    /// Whether the lab's panel is open.
    pub lab_open: bool,
    /// Whether the run shown is the probe of repeated random tokens (not the text).
    pub probe_shown: bool,
    /// For an encoder–decoder: the attention the views show (encoder, decoder or cross); None
    /// for every other model.
    pub stack: Option<crate::analysis::Stack>,
    /// Why the chosen stack is not shown (no target yet: the encoder is shown alone).
    pub stack_note: Option<&'a str>,
}

impl ViewData<'_> {
    /// The layer shown and the selected heads, limited to the shown run's shape.
    pub fn selection(&self) -> (usize, Vec<usize>) {
        let (layers, heads) = self.run.map_or((1, 1), |r| (r.attention.layers(), r.attention.heads()));
        self.settings.selection_for(layers, heads)
    }
}
