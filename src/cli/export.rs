//! `attnviz export`: draw a view to a PNG, SVG or PDF file with `render/` (no window, no GPU), or
//! write its numbers.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::pe::PeOptions;
use crate::analysis::{Stack, Statistic};
use crate::export::{Figure, Style, export_file};
use crate::render::{Colormap, Theme};

/// Which view to draw.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ViewArg {
    /// One head's attention matrix with token labels and a colour bar.
    Heatmap,
    /// The head view of one layer: token columns joined by one coloured line per head.
    Heads,
    /// All layers × heads as a grid of small heatmaps.
    Model,
    /// The sinusoidal positional encoding (positions × dimensions).
    Pe,
    /// Its dot products pe_i · pe_j (positions × positions).
    PeDot,
    /// The neuron view: q, k_j, q∘k_j, scores and softmax of one query (--layer, --head, --query).
    Neuron,
    /// One per-head statistic as a layer × head grid (--stat).
    Stats,
    /// Attention rollout through layers 0..=--layer (all heads, or --head).
    Rollout,
    /// Attention flow through layers 0..=--layer (all heads, or --head).
    Flow,
    /// A head-role score per head (--score: previous-token, duplicate-token, induction, first-token).
    Roles,
    /// The logit lens: streams × positions, each cell its top token (or --rank: the rank of the
    /// final prediction); --query frames a position. Needs a model with a language-model head.
    Lens,
    /// Direct logit attribution of the prediction at --query (default the last token; the token
    /// --target-token, less --versus): layers × heads, attention biases, MLPs, embeddings.
    Dla,
    /// The contribution graph: the routes to the prediction at --query (default the last token)
    /// above --threshold (default 0.04 for this view).
    Graph,
    /// A mixture of experts' routes: layers × tokens, each cell the experts the router chose and
    /// their weights (Mixtral, Qwen3-MoE, OLMoE, gpt-oss).
    Experts,
}

/// Which attention of an encoder–decoder to draw.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StackArg {
    /// Encoder self-attention (source × source); every other model has only this one.
    Encoder,
    /// Decoder self-attention (target × target, causal); needs --target.
    Decoder,
    /// Cross-attention (target rows × source columns); needs --target.
    Cross,
}

impl From<StackArg> for Stack {
    fn from(s: StackArg) -> Self {
        match s {
            StackArg::Encoder => Self::Encoder,
            StackArg::Decoder => Self::Decoder,
            StackArg::Cross => Self::Cross,
        }
    }
}

/// A statistic on the command line.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StatArg {
    /// Mean entropy of the attention rows (nats).
    Entropy,
    /// Share of attention to [CLS].
    Cls,
    /// Share to [SEP].
    Sep,
    /// Share to punctuation.
    Punctuation,
    /// Share to the token itself.
    #[value(name = "self")]
    SelfToken,
    /// Share to the previous token.
    Previous,
    /// Share to the next token.
    Next,
}

impl From<StatArg> for Statistic {
    fn from(s: StatArg) -> Self {
        match s {
            StatArg::Entropy => Self::Entropy,
            StatArg::Cls => Self::Cls,
            StatArg::Sep => Self::Sep,
            StatArg::Punctuation => Self::Punctuation,
            StatArg::SelfToken => Self::SelfToken,
            StatArg::Previous => Self::Previous,
            StatArg::Next => Self::Next,
        }
    }
}

/// Theme on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ThemeArg {
    /// White background.
    Light,
    /// Dark background.
    Dark,
}

/// `attnviz export` arguments.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The sentence (A); needed for heatmap, heads and model.
    #[arg(long)]
    pub text: Option<String>,
    /// An optional second sentence (B).
    #[arg(long)]
    pub text_pair: Option<String>,
    /// For an encoder–decoder: the target the decoder reads (needed for --stack decoder|cross).
    #[arg(long)]
    pub target: Option<String>,
    /// For an encoder–decoder: which attention to draw.
    #[arg(long, value_enum, default_value_t = StackArg::Encoder)]
    pub stack: StackArg,
    /// What to draw.
    #[arg(long, value_enum)]
    pub view: ViewArg,
    /// Layer (heatmap, heads).
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    /// Head (heatmap; for heads, draw only this head instead of all).
    #[arg(long)]
    pub head: Option<usize>,
    /// Size multiplier, 1 to 4.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    /// Light or dark background.
    #[arg(long, value_enum, default_value_t = ThemeArg::Light)]
    pub theme: ThemeArg,
    /// Colour map for attention heatmaps (viridis, magma, inferno, plasma, cividis, greys, rdbu, puor).
    #[arg(long, default_value = "viridis", value_parser = parse_colormap)]
    pub colormap: Colormap,
    /// Hide head-view lines weaker than this.
    #[arg(long, default_value_t = 0.0)]
    pub threshold: f32,
    /// Query token position (neuron); for lens, dla and graph the position framed or traced
    /// (0, the default there: the last token).
    #[arg(long, default_value_t = 0)]
    pub query: usize,
    /// Statistic to draw (stats).
    #[arg(long, value_enum, default_value_t = StatArg::Entropy)]
    pub stat: StatArg,
    /// Head-role score (roles): previous-token, duplicate-token, induction or first-token.
    #[arg(long, default_value = "induction")]
    pub score: String,
    /// Lens: colour and write the rank of the final prediction instead of the top token.
    #[arg(long)]
    pub rank: bool,
    /// Dla: the token whose logit is split (default: the top prediction), e.g. " Paris".
    #[arg(long)]
    pub target_token: Option<String>,
    /// Dla: a token subtracted (the attribution of target − versus).
    #[arg(long)]
    pub versus: Option<String>,
    /// Merge word pieces into words first (attention to a word summed, from a word averaged).
    #[arg(long)]
    pub words: bool,
    /// Positional-encoding parameters (pe, pe-dot).
    #[command(flatten)]
    pub pe: PeOptions,
    /// Output file: .png, .svg or .pdf draws the figure (SVG and PDF as vectors, text kept as
    /// text); .csv, .json or .npz write its numbers (heatmap, neuron, stats, rollout, flow).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

fn parse_colormap(s: &str) -> Result<Colormap, String> {
    Colormap::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
        format!("unknown colour map {s:?}; choose one of {}", Colormap::ALL.map(Colormap::name).join(", "))
    })
}

/// Runs `attnviz export`.
pub fn run(model_dir: Option<&Path>, args: &ExportArgs) -> anyhow::Result<()> {
    let style = Style {
        theme: match args.theme {
            ThemeArg::Light => Theme::Light,
            ThemeArg::Dark => Theme::Dark,
        },
        scale: args.scale,
        colormap: args.colormap,
    };
    if matches!(args.view, ViewArg::Lens | ViewArg::Dla | ViewArg::Graph | ViewArg::Experts) {
        return readout_figure(model_dir, args, style);
    }
    let figure_needs_run = !matches!(args.view, ViewArg::Pe | ViewArg::PeDot);
    let stack = Stack::from(args.stack);
    if stack != Stack::Encoder {
        if args.target.is_none() {
            anyhow::bail!("--stack {} needs --target (the text the decoder reads)", stack.name());
        }
        if args.words {
            anyhow::bail!("--words merges the source's word pieces only: leave it out with --stack {}", stack.name());
        }
        if stack == Stack::Cross && matches!(args.view, ViewArg::Rollout | ViewArg::Flow) {
            anyhow::bail!(crate::analysis::stack::CROSS_ROLLOUT_REFUSAL);
        }
    }
    let run = if figure_needs_run {
        let text = args.text.as_deref().with_context(|| format!("--text is required for --view {:?}", args.view))?;
        let (run, _) = args.model.run_noting(model_dir, text, args.text_pair.as_deref(), args.target.as_deref())?;
        let run = if args.words { crate::analysis::words::merge_run(&run) } else { run };
        Some(crate::analysis::stack::into_stack(run, stack).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let all_heads = |heads: usize| args.head.map_or_else(|| (0..heads).collect(), |h| vec![h]);
    let heads = run.as_ref().map_or(0, |r| r.attention.heads());
    let figure = match args.view {
        ViewArg::Heatmap => Figure::Heatmap { layer_idx: args.layer, head_idxs: vec![args.head.unwrap_or(0)] },
        ViewArg::Heads => Figure::HeadView {
            layer_idx: args.layer,
            head_idxs: args.head.map_or_else(|| (0..heads).collect(), |h| vec![h]),
            selected_token: None,
            threshold: args.threshold,
        },
        ViewArg::Model => Figure::ModelGrid,
        ViewArg::Pe => Figure::PeEncoding(args.pe.params()),
        ViewArg::PeDot => Figure::PeDot(args.pe.params()),
        ViewArg::Neuron => {
            Figure::Neuron { layer_idx: args.layer, head_idx: args.head.unwrap_or(0), query_pos: args.query }
        }
        ViewArg::Stats => Figure::Stats(args.stat.into()),
        ViewArg::Roles => {
            let name = args.score.replace('-', "_");
            let Some(role) = crate::analysis::roles::SCORE_NAMES.iter().position(|n| *n == name) else {
                anyhow::bail!(
                    "unknown --score {:?}: previous-token, duplicate-token, induction or first-token",
                    args.score
                );
            };
            Figure::Roles(role)
        }
        ViewArg::Lens | ViewArg::Dla | ViewArg::Graph | ViewArg::Experts => unreachable!("drawn by readout_figure"),
        ViewArg::Rollout => Figure::Rollout { layer_idx: args.layer, head_idxs: all_heads(heads), flow: None },
        ViewArg::Flow => {
            let run = run.as_ref().context("--text is required")?;
            let layers = run.attention.layers();
            if args.layer >= layers {
                anyhow::bail!(
                    "layer {} is out of range: the model has {layers} (layers 0 to {})",
                    args.layer,
                    layers - 1
                );
            }
            if let Some(why) = crate::analysis::rollout::flow_refusal(run.attention.seq_len()) {
                anyhow::bail!(why);
            }
            let values = crate::analysis::rollout::flow(&run.attention, &all_heads(heads), args.layer);
            Figure::Rollout {
                layer_idx: args.layer,
                head_idxs: all_heads(heads),
                flow: Some(std::sync::Arc::new(values)),
            }
        }
    };
    report_written(&args.output, export_file(run.as_ref(), &figure, style, &args.output)?);
    Ok(())
}

/// `--view lens|dla|graph|experts`: figures the model computes from its residual stream (not from
/// a recorded run), laid out by the same code as the app's views.
fn readout_figure(model_dir: Option<&Path>, args: &ExportArgs, style: Style) -> anyhow::Result<()> {
    use std::sync::Arc;
    let text = args.text.as_deref().with_context(|| format!("--text is required for --view {:?}", args.view))?;
    let model = args.model.load(model_dir)?;
    let interventions = args.model.interventions()?;
    let tokens = super::readout::input_tokens(&model, text)?;
    super::note_run(&model, interventions.describe().as_deref());
    let n = tokens.len();
    let position = if args.query == 0 && n > 0 { n - 1 } else { args.query };
    if position >= n {
        anyhow::bail!("--query {position} is out of range: the input has {n} tokens");
    }
    let labels: Vec<String> = tokens.tokens.iter().map(|t| crate::analysis::tokens::pretty_label(t)).collect();
    let figure = match args.view {
        ViewArg::Lens => {
            let lens = model.lens(&tokens, &[], crate::app::lens::LENS_TOP_K, &[], &interventions)?;
            let named = lens.top_ids.iter().chain(lens.tracked.iter().flat_map(|t| t.ids.iter())).copied();
            let names = crate::app::attribution::token_labels(&model, named.collect::<Vec<_>>());
            let state = crate::app::lens::LensState {
                positions: n,
                streams: lens.streams,
                parts: vec![Arc::new(crate::app::lens::LensPart { lens, labels: names })],
                ..crate::app::lens::LensState::default()
            };
            let mode =
                if args.rank { crate::app::state::LensMode::Rank } else { crate::app::state::LensMode::Probability };
            Figure::Lens(Arc::new(state.figure(&labels, &model.name, (mode, 0), position)))
        }
        ViewArg::Dla => {
            let id = |t: &Option<String>| t.as_deref().map(|t| model.tokenizer.single_id(t)).transpose();
            let a = model.attribute(&tokens, position, id(&args.target_token)?, id(&args.versus)?, &interventions)?;
            let title = format!(
                "{} · direct logit attribution of {} at position {position} “{}” · Σ terms = {:.3}, logit {:.3}",
                model.name,
                crate::app::attribution::target_text(&a),
                labels[position],
                a.total(),
                a.logit
            );
            Figure::Attribution(Arc::new(crate::app::attribution::attribution_table(&a, title)))
        }
        ViewArg::Experts => {
            let routes = model.routes(&tokens, &interventions)?;
            crate::app::experts::experts_figure(Some(&routes), &labels, &model.name)
        }
        _ => {
            let run = model.contributions(&tokens, &interventions)?;
            let named = run.lens.iter().flat_map(|l| l.top_ids.iter().copied()).chain(run.mid_top.iter().map(|t| t.0));
            let names = crate::app::attribution::token_labels(&model, named.collect::<Vec<_>>());
            let graph = crate::app::graph::GraphShown { run, labels: names };
            let threshold = if args.threshold > 0.0 { args.threshold } else { 0.04 };
            let title = format!(
                "{} · contribution graph to the prediction at position {position} “{}” · threshold {threshold:.2}",
                model.name, labels[position]
            );
            Figure::Graph(Arc::new(crate::app::graph::graph_figure(&graph, &labels, (position, threshold), title).0))
        }
    };
    report_written(&args.output, export_file(None, &figure, style, &args.output)?);
    Ok(())
}

/// Says on stderr what was written: a picture with its size, or numbers.
pub(crate) fn report_written(path: &Path, size: Option<(u32, u32)>) {
    match size {
        Some((w, h)) => eprintln!("wrote {} ({w}×{h})", path.display()),
        None => eprintln!("wrote {}", path.display()),
    }
}
