//! What the app remembers between launches (`Settings`, saved by eframe) and what it does not.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::analysis::select::PairFilter;
use crate::analysis::{PeParams, Statistic};
use crate::model::{Interventions, PlaygroundConfig};
use crate::render::{Colormap, Side};

pub use super::attribution::settings::AttributionSettings;
pub use super::compare::settings::{CompareMode, CompareSettings, CompareSource};
pub use super::experts::settings::ExpertsSettings;
pub use super::graph::settings::GraphSettings;
pub use super::intervene::settings::SteerSettings;
pub use super::lens::settings::{LensMode, LensSettings};
pub use super::patching::settings::PatchingSettings;
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
    /// Activation patching: which activations carry the clean input's answer.
    Patching,
    /// A mixture of experts' routes: the experts each token uses in each layer.
    Experts,
}

impl View {
    /// Every view, in tab order.
    pub const ALL: [Self; 13] = [
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
        Self::Patching,
        Self::Experts,
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
            Self::Patching => "Patching",
            Self::Experts => "Experts",
        }
    }

    /// The file name an export of the view gets by default.
    pub fn export_name(self, settings: &Settings) -> String {
        match self {
            Self::Head => format!("attnviz-head-view-layer{}.png", settings.layer_idx),
            Self::Model => "attnviz-model-view.png".to_string(),
            Self::Heatmap => format!("attnviz-heatmap-layer{}.png", settings.layer_idx),
            Self::Neuron => format!("attnviz-neuron-layer{}-query{}.png", settings.layer_idx, settings.neuron_query),
            Self::Stats => format!("attnviz-head-stats-{}.png", settings.stat.key()),
            Self::Rollout => format!("attnviz-rollout-layer{}.png", settings.layer_idx),
            Self::Compare => format!("attnviz-compare-layer{}.png", settings.layer_idx),
            Self::Lens => "attnviz-logit-lens.png".to_string(),
            Self::Attribution => "attnviz-logit-attribution.png".to_string(),
            Self::Graph => "attnviz-contribution-graph.png".to_string(),
            Self::Patching => format!("attnviz-patching-{}.png", settings.patching.site.name()),
            Self::Experts => "attnviz-experts.png".to_string(),
            Self::Positions => match settings.pe_figure {
                PeFigure::Encoding => "attnviz-positional-encoding.png".to_string(),
                PeFigure::Dot => "attnviz-pe-dot.png".to_string(),
                PeFigure::LearnedDot => "attnviz-learned-positions-dot.png".to_string(),
                PeFigure::LearnedCosine => "attnviz-learned-positions-cosine.png".to_string(),
            },
        }
    }

    /// What an export of the view holds, in words (`pinned`: a token is pinned in the head view).
    pub fn export_what(self, settings: &Settings, pinned: bool) -> &'static str {
        match self {
            Self::Head if pinned => "the head view (with the pinned token)",
            Self::Head => "the head view",
            Self::Model => "the model view (all layers × heads)",
            Self::Heatmap => "the heatmap",
            Self::Neuron => "the neuron view",
            Self::Stats => "the head statistics grid",
            Self::Rollout => "the rollout heatmap",
            Self::Compare => "the comparison",
            Self::Lens => "the logit lens grid (the cells computed so far)",
            Self::Attribution => "the attribution grid (layers × heads, MLPs, embeddings)",
            Self::Graph => "the contribution graph (its edges' proportions as numbers)",
            Self::Patching => "the patching grid (its logit differences as numbers)",
            Self::Experts => "the experts grid (every chosen expert and weight as numbers)",
            Self::Positions => match settings.pe_figure {
                PeFigure::Encoding => "the positional encoding",
                PeFigure::Dot => "the dot products PE·PE",
                PeFigure::LearnedDot => "the learned position embeddings' dot products",
                PeFigure::LearnedCosine => "the learned position embeddings' cosine similarities",
            },
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

/// Each figure view's zoom, or None to fit the whole figure in the room: the default, and again
/// whenever a new model or text arrives. Zooming one view leaves the others. The matrix views
/// keep a cell side in points, the lens and the graph a scale of their default size, the model
/// view a thumbnail's side.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewZoom {
    /// The heatmap.
    pub heatmap: Option<f32>,
    /// The comparison (both matrices).
    pub compare: Option<f32>,
    /// Rollout and flow.
    pub rollout: Option<f32>,
    /// The logit attribution grid.
    pub attribution: Option<f32>,
    /// The activation patching grid.
    pub patching: Option<f32>,
    /// The logit lens (a scale).
    pub lens: Option<f32>,
    /// The contribution graph (a scale).
    pub graph: Option<f32>,
    /// The model view (a thumbnail's side in points).
    pub model: Option<f32>,
    /// The experts view (a scale).
    pub experts: Option<f32>,
}

impl ViewZoom {
    /// Keeps each cell side in the matrix views' range, each scale in the scaled views'.
    pub fn clamp(&mut self) {
        use crate::app::widgets::matrix::{CELL_RANGE, SCALE_RANGE, THUMB_RANGE};
        let keep = |z: &mut Option<f32>, (lo, hi): (f32, f32)| {
            if let Some(z) = z {
                *z = if z.is_finite() { z.clamp(lo, hi) } else { hi };
            }
        };
        for z in [&mut self.heatmap, &mut self.compare, &mut self.rollout, &mut self.attribution, &mut self.patching] {
            keep(z, CELL_RANGE);
        }
        for z in [&mut self.lens, &mut self.graph, &mut self.experts] {
            keep(z, SCALE_RANGE);
        }
        keep(&mut self.model, THUMB_RANGE);
    }
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
    /// Each matrix view's zoom (None: fit the whole figure in the room).
    pub zoom: ViewZoom,
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
    /// The patching view's settings.
    pub patching: PatchingSettings,
    /// The Steer panel's settings.
    pub steer: SteerSettings,
    /// The experts view's settings.
    pub experts: ExpertsSettings,
    /// The training lab's settings.
    pub train: crate::train::TrainConfig,
}

/// Declares [`Setting`] with one variant per field of [`Settings`], and its `apply` and `changes`
/// (listed beside `Settings` below).
macro_rules! settings_fields {
    ($($field:ident => $variant:ident: $ty:ty),* $(,)?) => {
        /// A new value for one field of [`Settings`].
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum Setting {
            $($variant($ty)),*
        }

        impl Setting {
            /// Writes the value into `settings`.
            pub fn apply(self, settings: &mut Settings) {
                match self {
                    $(Self::$variant(v) => settings.$field = v),*
                }
            }

            /// One setting per field that differs between `old` and `new`, in field order.
            // Any other value is a change, also for floats (a slider moved by a hair).
            #[allow(clippy::float_cmp)]
            pub fn changes(old: &Settings, new: &Settings) -> Vec<Self> {
                // Every field is listed: a field added to Settings and not here does not compile.
                let Settings { $($field: _),* } = new;
                let mut out = Vec::new();
                $(if old.$field != new.$field {
                    out.push(Self::$variant(new.$field.clone()));
                })*
                out
            }
        }
    };
}

// One `Setting` per field: a field added to `Settings` and not here does not compile.
settings_fields! {
    text => Text: String,
    text_pair => TextPair: String,
    pair_enabled => PairEnabled: bool,
    model_dir => ModelDir: Option<PathBuf>,
    recent_models => RecentModels: Vec<PathBuf>,
    view => View: View,
    layer_idx => Layer: usize,
    heads => Heads: Vec<bool>,
    threshold => Threshold: f32,
    hide_special => HideSpecial: bool,
    pair_filter => PairFilter: crate::analysis::select::PairFilter,
    colormap => Colormap: crate::render::Colormap,
    theme => Theme: ThemeChoice,
    export_scale => ExportScale: u8,
    export_dir => ExportDir: Option<PathBuf>,
    zoom => Zoom: ViewZoom,
    source => Source: Source,
    playground => Playground: crate::model::PlaygroundConfig,
    attention_file => AttentionFile: Option<PathBuf>,
    interventions => Interventions: crate::model::Interventions,
    interventions_model => InterventionsModel: Option<PathBuf>,
    pe => Pe: crate::analysis::PeParams,
    pe_plot_dims => PePlotDims: Vec<usize>,
    pe_plot_row => PePlotRow: usize,
    pe_figure => PeFigure: PeFigure,
    words => Words: bool,
    neuron_query => NeuronQuery: usize,
    stat => Stat: crate::analysis::Statistic,
    rollout => Rollout: RolloutSettings,
    compare => Compare: CompareSettings,
    target => Target: String,
    stack => Stack: crate::analysis::Stack,
    record_tokens => RecordTokens: usize,
    long_view => LongView: crate::analysis::long::LongView,
    window_start => WindowStart: Option<usize>,
    lens => Lens: LensSettings,
    attribution => Attribution: AttributionSettings,
    stats_role => StatsRole: Option<usize>,
    graph => Graph: GraphSettings,
    patching => Patching: PatchingSettings,
    steer => Steer: SteerSettings,
    experts => Experts: ExpertsSettings,
    train => Train: crate::train::TrainConfig,
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
            zoom: ViewZoom::default(),
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
            patching: PatchingSettings::default(),
            steer: SteerSettings::default(),
            experts: ExpertsSettings::default(),
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
        self.zoom.clamp();
        self.threshold = self.threshold.clamp(0.0, 1.0);
        self.record_tokens = self.record_tokens.clamp(1, MAX_RECORD_TOKENS);
    }
}

/// A token the user hovers or pinned in the head view.
pub type TokenSelection = (Side, usize);
