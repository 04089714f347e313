//! What views read: plain data, borrowed from the app for one frame. Views draw it and push
//! commands; they never change it.

use std::path::Path;
use std::sync::Arc;

use super::derive::Derived;
use super::state::{Settings, TokenSelection};
use super::worker::ModelInfo;
use crate::analysis::Run;
use crate::model::hub::CachedModel;

pub use super::session::Status;

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
    /// The folder holding the embedded models (None: not found; the load error says where the app
    /// looked).
    pub embedded: Option<&'a Path>,
    /// Models found in the local Hugging Face cache (None while the scan runs).
    pub cached_models: Option<&'a [CachedModel]>,
    /// The token pinned in the head view.
    pub pinned: Option<TokenSelection>,
    /// The playground hyperparameter at fault, and why.
    pub playground_error: Option<&'a (&'static str, String)>,
    /// Whether an export is being written.
    pub exporting: bool,
    /// The last status message.
    pub status: Option<&'a Status>,
    /// Smoothed CPU time of a whole frame, in milliseconds.
    pub frame_ms: f32,
    /// Derived data of the shown run (statistics, rollout, thumbnails, head-view matrices).
    pub derived: &'a Derived,
    /// The generation shown or in progress.
    pub generation: Option<&'a crate::app::generation::Generation>,
    /// Each feature's own results (lens, attribution, graph, flow, run B, the lab).
    pub features: &'a crate::app::features::Features,
    /// The run at token level that the readouts (lens, attribution, graph) read: the shown run
    /// may be merged into words.
    pub token_run: Option<&'a Run>,
    /// Whether the run shown is the probe of repeated random tokens (not the text).
    pub probe_shown: bool,
    /// For an encoder–decoder: the attention the views show (encoder, decoder or cross); None
    /// for every other model.
    pub stack: Option<crate::analysis::Stack>,
    /// Why the chosen stack is not shown (no target yet: the encoder is shown alone).
    pub stack_note: Option<&'a str>,
}

impl ViewData<'_> {
    /// What attention flow would be computed for now.
    pub fn flow_key(&self) -> crate::app::rollout::FlowKey {
        let (layer_idx, heads) = self.selection();
        crate::app::rollout::FlowKey { view_id: self.view_id, heads, layer_idx }
    }

    /// The layer shown and the selected heads, limited to the shown run's shape.
    pub fn selection(&self) -> (usize, Vec<usize>) {
        let (layers, heads) = self.run.map_or((1, 1), |r| (r.attention.layers(), r.attention.heads()));
        self.settings.selection_for(layers, heads)
    }
}
