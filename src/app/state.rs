//! What the app remembers between launches (`Settings`, saved by eframe) and what it does not.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::analysis::select::PairFilter;
use crate::analysis::{PeParams, Statistic};
use crate::model::{Interventions, PlaygroundConfig};
use crate::render::{Colormap, Side};

pub use super::attribution::settings::AttributionSettings;
pub use super::compare::settings::{CompareMode, CompareSettings, CompareSource};
pub use super::graph::settings::GraphSettings;
pub use super::lens::settings::{LensMode, LensSettings};
pub use super::rollout::settings::{RolloutMode, RolloutSettings};

/// The main views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum View {
    /// BertViz-style token-to-token lines of one layer.
    #[default]
    Head,
    /// Every layer × head as small heatmaps.
    Model,
    /// One head (or the mean of the selected heads) as a labelled heatmap.
    Heatmap,
    /// How one attention weight arises: q, k, q∘k, scores and softmax for one query.
    Neuron,
    /// Per-head statistics (entropy, share to [CLS]/[SEP]/punctuation/self/neighbours).
    Stats,
    /// Attention rollout and flow through the layers.
    Rollout,
    /// Two runs side by side, or their difference.
    Compare,
    /// Positional encodings: sinusoidal and learned, and their dot products.
    Positions,
    /// The logit lens: what every layer's residual stream would predict at every position.
    Lens,
    /// Direct logit attribution: each head's, MLP's and the embeddings' share of one logit.
    Attribution,
    /// The contribution graph: the routes from a prediction back to the input tokens.
    Graph,
}

impl View {
    /// Every view, in tab order.
    pub const ALL: [Self; 11] = [
        Self::Head,
        Self::Model,
        Self::Heatmap,
        Self::Neuron,
        Self::Stats,
        Self::Rollout,
        Self::Compare,
        Self::Positions,
        Self::Lens,
        Self::Attribution,
        Self::Graph,
    ];

    /// Tab label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Head => "Head view",
            Self::Model => "Model view",
            Self::Heatmap => "Heatmap",
            Self::Neuron => "Neuron view",
            Self::Stats => "Head statistics",
            Self::Rollout => "Rollout / flow",
            Self::Compare => "Compare",
            Self::Positions => "Positional encoding",
            Self::Lens => "Logit lens",
            Self::Attribution => "Logit attribution",
            Self::Graph => "Contribution graph",
        }
    }

    /// Whether the view draws a model run (the positional-encoding panel does not need one).
    pub fn needs_run(self) -> bool {
        self != Self::Positions
    }
}

/// Which model the attention views show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Source {
    /// The loaded pretrained model, faithful or with interventions.
    #[default]
    Pretrained,
    /// The from-scratch playground encoder with random weights.
    Playground,
    /// Attention saved by other code ([`crate::analysis::import`]): no model behind it.
    File,
}

/// Which positional-encoding figure the export dialog writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PeFigure {
    /// The sinusoidal encoding, positions × dimensions.
    #[default]
    Encoding,
    /// Its dot products.
    Dot,
    /// Dot products of the loaded model's learned position embeddings.
    LearnedDot,
    /// Cosine similarities of the learned position embeddings.
    LearnedCosine,
}

/// The theme the user chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ThemeChoice {
    /// Follow the operating system.
    #[default]
    System,
    /// Dark.
    Dark,
    /// Light.
    Light,
}

/// Persisted settings: the last input, model, view and selections.
#[allow(clippy::struct_excessive_bools)] // independent toggles of different panels, not a state machine
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Sentence A.
    pub text: String,
    /// Sentence B.
    pub text_pair: String,
    /// Whether sentence B is used.
    pub pair_enabled: bool,
    /// The model folder last loaded (None: the embedded model).
    pub model_dir: Option<PathBuf>,
    /// Models opened recently (folders or hub ids), newest first.
    pub recent_models: Vec<PathBuf>,
    /// The view shown.
    pub view: View,
    /// The layer shown.
    pub layer_idx: usize,
    /// Which heads are selected (one flag per head).
    pub heads: Vec<bool>,
    /// Head-view lines below this weight are hidden.
    pub threshold: f32,
    /// Drop [CLS]/[SEP]-style tokens and renormalise rows.
    pub hide_special: bool,
    /// Sentence-pair block shown in the head view.
    pub pair_filter: PairFilter,
    /// Colour map of heatmaps.
    pub colormap: Colormap,
    /// Dark, light or system.
    pub theme: ThemeChoice,
    /// PNG export scale, 1 to 4.
    pub export_scale: u8,
    /// Folder of the last export.
    pub export_dir: Option<PathBuf>,
    /// Heatmap cell size in points (zoom).
    pub cell_size: f32,
    /// Pretrained model or playground.
    pub source: Source,
    /// The playground's hyperparameters as last edited (may be invalid; the last valid one runs).
    pub playground: PlaygroundConfig,
    /// The attention file last opened (shown when `source` is [`Source::File`]).
    pub attention_file: Option<PathBuf>,
    /// Interventions on the pretrained model.
    pub interventions: Interventions,
    /// The model the interventions were set on (its folder or hub id): they are reset when
    /// another model loads, never carried over or trimmed to its shape.
    pub interventions_model: Option<PathBuf>,
    /// Positional-encoding panel parameters.
    pub pe: PeParams,
    /// Dimensions drawn in the encoding line plot.
    pub pe_plot_dims: Vec<usize>,
    /// Position whose row of dot products is plotted.
    pub pe_plot_row: usize,
    /// Figure the export dialog writes in the positional-encoding view.
    pub pe_figure: PeFigure,
    /// Merge word pieces into words in every view.
    pub words: bool,
    /// Query token of the neuron view.
    pub neuron_query: usize,
    /// Statistic colouring the statistics grid.
    pub stat: Statistic,
    /// The rollout view's settings.
    pub rollout: RolloutSettings,
    /// Comparison view settings.
    pub compare: CompareSettings,
    /// The target an encoder–decoder's decoder reads (its source is sentence A).
    pub target: String,
    /// Which attention of an encoder–decoder every view and export shows.
    pub stack: crate::analysis::Stack,
    /// Longest input recorded at token level; longer ones are shown pooled
    /// ([`crate::analysis::long`]).
    pub record_tokens: usize,
    /// Overview or window of a long input.
    pub long_view: crate::analysis::long::LongView,
    /// First token of a long input's window (None: its last tokens).
    pub window_start: Option<usize>,
    /// The logit lens's settings.
    pub lens: LensSettings,
    /// The logit attribution's settings.
    pub attribution: AttributionSettings,
    /// A head-role score colouring the statistics grid instead of the statistic (an index into
    /// [`crate::analysis::roles::SCORE_NAMES`]).
    pub stats_role: Option<usize>,
    /// The contribution graph's settings.
    pub graph: GraphSettings,
    /// The training lab's settings.
    pub train: crate::train::TrainConfig,
}

/// Most tokens the record-at-token-level setting accepts.
pub const MAX_RECORD_TOKENS: usize = 4096;

/// How many recently opened models the side panel remembers.
pub const RECENT_MODELS: usize = 6;

/// The example sentence filled in at first launch.
pub const EXAMPLE_SENTENCE: &str = "The animal didn't cross the street because it was too tired.";

impl Default for Settings {
    fn default() -> Self {
        Self {
            text: EXAMPLE_SENTENCE.to_string(),
            text_pair: String::new(),
            pair_enabled: false,
            model_dir: None,
            recent_models: Vec::new(),
            view: View::Head,
            layer_idx: 0,
            heads: Vec::new(),
            threshold: 0.0,
            hide_special: false,
            pair_filter: PairFilter::All,
            colormap: Colormap::Viridis,
            theme: ThemeChoice::System,
            export_scale: 2,
            export_dir: None,
            cell_size: 36.0,
            source: Source::Pretrained,
            playground: PlaygroundConfig::default(),
            attention_file: None,
            interventions: Interventions::default(),
            interventions_model: None,
            pe: PeParams {
                d_model: 128,
                positions: 64,
                base: 10_000.0,
                layout: crate::analysis::PeLayout::Interleaved,
            },
            pe_plot_dims: vec![0, 1, 32, 64],
            pe_plot_row: 16,
            pe_figure: PeFigure::Encoding,
            words: false,
            neuron_query: 0,
            stat: Statistic::Entropy,
            rollout: RolloutSettings::default(),
            compare: CompareSettings::default(),
            target: String::new(),
            stack: crate::analysis::Stack::Encoder,
            record_tokens: crate::analysis::long::RECORD_TOKENS,
            long_view: crate::analysis::long::LongView::Overview,
            window_start: None,
            lens: LensSettings::default(),
            attribution: AttributionSettings::default(),
            stats_role: None,
            graph: GraphSettings::default(),
            train: crate::train::TrainConfig::default(),
        }
    }
}

impl Settings {
    /// Sentence B if it is in use and not empty.
    pub fn pair(&self) -> Option<&str> {
        (self.pair_enabled && !self.text_pair.is_empty()).then_some(self.text_pair.as_str())
    }

    /// Indices of the selected heads, sorted.
    pub fn selected_heads(&self) -> Vec<usize> {
        self.heads.iter().enumerate().filter_map(|(i, &on)| on.then_some(i)).collect()
    }

    /// The selected heads and the layer, limited to a run of `layers` × `heads` (a run of another
    /// model can briefly be on screen while a new one loads).
    pub fn selection_for(&self, layers: usize, heads: usize) -> (usize, Vec<usize>) {
        let mut selected = self.selected_heads();
        selected.retain(|&h| h < heads);
        (self.layer_idx.min(layers.saturating_sub(1)), selected)
    }

    /// Puts a model that loaded at the top of the recent models (at most [`RECENT_MODELS`]).
    pub fn remember_model(&mut self, spec: &std::path::Path) {
        self.recent_models.retain(|m| m != spec);
        self.recent_models.insert(0, spec.to_path_buf());
        self.recent_models.truncate(RECENT_MODELS);
    }

    /// Interventions meeting a model that loaded from `dir` (`layers` × `heads`): kept when they
    /// were set on that model (and still fit it), else reset to the faithful model. Returns the
    /// notice to show when some were dropped.
    pub fn interventions_meet(&mut self, dir: &std::path::Path, layers: usize, heads: usize) -> Option<String> {
        let set_on = self.interventions_model.replace(dir.to_path_buf());
        if self.interventions.is_faithful() {
            return None;
        }
        let same = set_on.as_deref() == Some(dir) && self.interventions.validate(layers, heads).is_ok();
        if same {
            return None;
        }
        let what = self.interventions.describe().unwrap_or_default();
        self.interventions = Interventions::default();
        let whose = set_on.map_or_else(|| "another model".to_string(), |d| d.display().to_string());
        Some(format!("interventions reset to the faithful model ({what} were set on {whose})"))
    }

    /// Makes layer and head selections fit a model of `layers` × `heads` (all heads on when the
    /// count changed).
    pub fn fit_model(&mut self, layers: usize, heads: usize) {
        if self.heads.len() != heads {
            self.heads = vec![true; heads];
        }
        self.layer_idx = self.layer_idx.min(layers.saturating_sub(1));
        self.export_scale = self.export_scale.clamp(1, 4);
        self.cell_size = self.cell_size.clamp(2.0, 80.0);
        self.threshold = self.threshold.clamp(0.0, 1.0);
        self.record_tokens = self.record_tokens.clamp(1, MAX_RECORD_TOKENS);
    }
}

/// A token the user hovers or pinned in the head view.
pub type TokenSelection = (Side, usize);
