//! The one list of figures ([`Figure`]): each figure knows how to lay itself out as a display list
//! ([`Figure::drawing`], which every backend draws: PNG, SVG, PDF, the app) and how to give the
//! numbers behind it ([`Figure::table`], which `export` writes as CSV, JSON or NPZ). Adding a figure
//! touches this list: one arm in each match.

use image::RgbaImage;
use thiserror::Error;

use crate::analysis::rollout;
use crate::analysis::run::NeuronBreakdown;
use crate::analysis::select::{mask_causal, submatrix};
use crate::analysis::{Attention, HeadStats, PeParams, Run, Statistic, pe};
use crate::render::{self, Colormap, Drawing, HeadViewSpec, HeatmapSpec, ModelGridSpec, Side, Theme};

/// A figure: what it shows, not how it is drawn ([`Figure::drawing`]) or what numbers it gives
/// ([`Figure::table`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Figure {
    /// One head's attention matrix, or the mean of several heads of one layer.
    Heatmap {
        /// Layer index.
        layer_idx: usize,
        /// Heads to show (their mean when more than one).
        head_idxs: Vec<usize>,
    },
    /// The BertViz-style head view of one layer.
    HeadView {
        /// Layer index.
        layer_idx: usize,
        /// Heads to draw.
        head_idxs: Vec<usize>,
        /// A pinned token: only its lines are drawn.
        selected_token: Option<(Side, usize)>,
        /// Lines below this weight are hidden.
        threshold: f32,
    },
    /// Every layer × head as a grid of small heatmaps.
    ModelGrid,
    /// The sinusoidal encoding (positions × dimensions).
    PeEncoding(PeParams),
    /// The dot products `pe_i` · `pe_j` (positions × positions).
    PeDot(PeParams),
    /// Dot products or cosine similarities of a model's learned position embeddings.
    LearnedPositions {
        /// The model's name.
        model: String,
        /// Side of `values`.
        total: usize,
        /// Positions shown (the top-left corner of `values`).
        positions: usize,
        /// `total × total`, row-major.
        values: std::sync::Arc<Vec<f32>>,
        /// Cosine similarities (else dot products).
        cosine: bool,
    },
    /// The neuron view: how one query's weights arise in one head.
    Neuron {
        /// Layer index.
        layer_idx: usize,
        /// Head index.
        head_idx: usize,
        /// Query token.
        query_pos: usize,
    },
    /// One per-head statistic as a layer × head grid.
    Stats(Statistic),
    /// Attention rollout (or flow, when its values are given) after a layer.
    Rollout {
        /// Last layer included.
        layer_idx: usize,
        /// Heads averaged per layer.
        head_idxs: Vec<usize>,
        /// Attention-flow values (`n × n`) computed for this layer and heads; None: rollout.
        flow: Option<std::sync::Arc<Vec<f32>>>,
    },
    /// Run B beside the figure's run (A), or B − A.
    Compare {
        /// Layer index.
        layer_idx: usize,
        /// Heads averaged.
        head_idxs: Vec<usize>,
        /// Run B.
        other: SharedRun,
        /// B − A as a diverging heatmap instead of side by side.
        difference: bool,
    },
    /// The logit lens as computed (streams × positions, each cell a token on its colour).
    Lens(std::sync::Arc<GridFigure>),
    /// The contribution graph's routes to one prediction.
    Graph(std::sync::Arc<GraphFigure>),
    /// One head-role score (an index into [`crate::analysis::roles::SCORE_NAMES`]) as a layer ×
    /// head grid.
    Roles(usize),
    /// Direct logit attribution as computed: layers × heads (+ attention bias, MLP), embeddings.
    Attribution(std::sync::Arc<Table>),
    /// A mixture of experts' routes: layers × tokens, each cell the chosen experts and their
    /// weights on the colour of the first; its numbers every chosen expert and weight.
    Experts {
        /// The grid drawn.
        grid: std::sync::Arc<GridFigure>,
        /// The numbers exported: per layer with experts and rank, the expert ids and the weights.
        numbers: std::sync::Arc<Table>,
    },
    /// A table of signed values as a heatmap in diverging colours centred on 0 (activation
    /// patching's grids), with the titles of its vertical and horizontal axes.
    Signed {
        /// The values with their labels and title.
        table: std::sync::Arc<Table>,
        /// The vertical and the horizontal axis.
        axes: (&'static str, &'static str),
    },
    /// Line charts one above the other (the training lab's curves); their numbers one row per x
    /// value, one column per series (empty where a series has no point there).
    Charts(std::sync::Arc<Vec<render::Chart>>),
}

/// A node of a drawn graph: its place (token column, level from the bottom) and its label.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphNode {
    /// Token column (fractional: an MLP sits right of its token).
    pub column: f32,
    /// Level from the bottom (the embeddings at 0).
    pub level: f32,
    /// The label written beside it (its logit-lens top token).
    pub label: String,
}

/// What an edge of a drawn graph carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// Attention: from a token's stream into another's (or its own).
    Attention,
    /// Into or out of an MLP.
    Mlp,
    /// The residual connection past the MLP.
    Residual,
}

/// An edge of a drawn graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphEdge {
    /// Index of the node it leaves.
    pub from: usize,
    /// Index of the node it enters.
    pub to: usize,
    /// Its proportion, 0..1 (width and opacity).
    pub weight: f32,
    /// What it carries.
    pub kind: EdgeKind,
    /// Its name ("L3 attention: “cat” → “sat”, head 5 (0.31)").
    pub name: String,
}

/// A contribution graph laid out for drawing: token columns, levels (embeddings at the bottom,
/// per layer its attention, MLP and output), nodes and edges — drawn by the app and by
/// [`render::graph`](super::graph) alike.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphFigure {
    /// Title.
    pub title: String,
    /// Token labels (columns, at the bottom).
    pub tokens: Vec<String>,
    /// Layers (levels go to `2 × layers`).
    pub layers: usize,
    /// The nodes.
    pub nodes: Vec<GraphNode>,
    /// The edges.
    pub edges: Vec<GraphEdge>,
}

/// A grid of texts on coloured cells with the numbers behind the colours (the logit lens): made by
/// whoever computed it, drawn by [`render::text_grid`](super::text_grid).
#[derive(Debug, Clone, PartialEq)]
pub struct GridFigure {
    /// Title.
    pub title: String,
    /// What the colours and texts mean.
    pub note: String,
    /// Row labels.
    pub row_labels: Vec<String>,
    /// Column labels.
    pub col_labels: Vec<String>,
    /// `rows × cols` cell texts.
    pub cells: Vec<String>,
    /// `rows × cols` values (NaN: not computed).
    pub values: Vec<f32>,
    /// Values at the ends of the colour map.
    pub range: (f32, f32),
    /// A column drawn framed.
    pub selected_col: Option<usize>,
    /// The colours' values when they differ from `values` (ranks coloured by log rank).
    pub colour_values: Option<Vec<f32>>,
    /// The colour bar: what the colour shows and its marks.
    pub bar: Option<super::GridBar>,
}

/// A run shared by a figure; equal when it is the same run.
#[derive(Debug, Clone)]
pub struct SharedRun(pub std::sync::Arc<Run>);

impl PartialEq for SharedRun {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A figure's numbers as a labelled table, for CSV / JSON / NPZ.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    /// What the numbers are.
    pub title: String,
    /// Row labels (tokens, "L0 H3", …).
    pub row_labels: Vec<String>,
    /// Column labels.
    pub col_labels: Vec<String>,
    /// `rows × cols`, row-major (NaN: masked, written as an empty CSV field / JSON null).
    pub values: Vec<f32>,
}

/// Look of a drawn figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    /// Light or dark.
    pub theme: Theme,
    /// Size multiplier, 1 to 4.
    pub scale: f32,
    /// Colour map for attention heatmaps.
    pub colormap: Colormap,
}

impl Default for Style {
    fn default() -> Self {
        Self { theme: Theme::Light, scale: 1.0, colormap: Colormap::Viridis }
    }
}

/// A figure that cannot be drawn, or has no numbers to give.
#[derive(Debug, Error)]
pub enum FigureError {
    /// The figure needs a model run and there is none.
    #[error("this view needs a model run (give --text)")]
    NoRun,
    /// A layer or head index outside the model.
    #[error("{what} {index} is out of range: the model has {count} ({what}s 0 to {last})", last = count.saturating_sub(1))]
    OutOfRange {
        /// "layer" or "head".
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// No heads were selected.
    #[error("no heads selected")]
    NoHeads,
    /// A positional-encoding parameter out of range.
    #[error("invalid positional encoding: {0}")]
    Pe(#[from] pe::PeError),
    /// The scale is not between 1 and 4.
    #[error("scale must be between 1 and 4, got {0}")]
    Scale(f32),
    /// The figure needs something the run does not have.
    #[error("{0}")]
    Unavailable(String),
}

fn check(what: &'static str, index: usize, count: usize) -> Result<(), FigureError> {
    if index < count { Ok(()) } else { Err(FigureError::OutOfRange { what, index, count }) }
}

/// Checks a layer and a non-empty list of its heads.
fn check_heads(a: &Attention, layer_idx: usize, head_idxs: &[usize]) -> Result<(), FigureError> {
    check("layer", layer_idx, a.layers())?;
    if head_idxs.is_empty() {
        return Err(FigureError::NoHeads);
    }
    head_idxs.iter().try_for_each(|&h| check("head", h, a.heads()))
}

/// A short "layer 2 · heads 0, 3" description used in titles.
fn heads_text(head_idxs: &[usize]) -> String {
    match head_idxs {
        [one] => format!("head {one}"),
        many => format!("mean of heads {}", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// The run a figure needs.
fn need(run: Option<&Run>) -> Result<&Run, FigureError> {
    run.ok_or(FigureError::NoRun)
}

/// The labels of a run's tokens (its queries).
fn token_labels(run: &Run) -> Vec<String> {
    (0..run.tokens.len()).map(|i| run.label(i)).collect()
}

impl Figure {
    /// Lays the figure out as a display list, which every backend (PNG, SVG, PDF, the app) draws.
    pub fn drawing(&self, run: Option<&Run>, style: Style) -> Result<Drawing, FigureError> {
        if !(1.0..=4.0).contains(&style.scale) {
            return Err(FigureError::Scale(style.scale));
        }
        let Style { theme, scale, colormap } = style;
        match self {
            Figure::PeEncoding(params) => Ok(render::pe_encoding(&pe::sinusoidal(*params)?, theme, scale)),
            Figure::PeDot(params) => Ok(render::pe_dot(&pe::sinusoidal(*params)?, theme, scale)),
            Figure::LearnedPositions { model, total, positions, values, cosine } => {
                let n = (*positions).min(*total);
                if n == 0 {
                    return Err(FigureError::Pe(pe::PeError::Positions(0)));
                }
                let first: Vec<usize> = (0..n).collect();
                let crop = submatrix(values, *total, &first, false);
                let what = if *cosine { "Cosine similarity" } else { "Dot products" };
                // As in the app: dot-product colours stop at the 99th percentile.
                let range = if *cosine { Some((-1.0, 1.0)) } else { pe::learned_dot_range(&crop) };
                let title = format!("{what} of the learned position embeddings of {model} (first {n})");
                Ok(render::heatmap_drawing(&HeatmapSpec {
                    values: &crop,
                    rows: n,
                    cols: n,
                    row_labels: &[],
                    col_labels: &[],
                    row_axis: "position i",
                    col_axis: "position j",
                    title: &title,
                    range,
                    colormap: if *cosine { Colormap::RdBu } else { colormap },
                    theme,
                    scale,
                    show_values: false,
                    sink: None,
                }))
            }
            Figure::Graph(graph) => Ok(render::graph_drawing(graph, theme, scale)),
            Figure::Charts(charts) => {
                if charts.iter().all(|c| c.series.iter().all(|s| s.points.is_empty())) {
                    return Err(FigureError::Unavailable("there is nothing to plot yet".into()));
                }
                let parts = charts.iter().map(|c| render::chart_drawing(c, theme, scale)).collect();
                Ok(Drawing::stack(parts, false, (8.0 * scale).floor(), theme.background()))
            }
            Figure::Signed { table, axes } => {
                if table.values.is_empty() {
                    return Err(FigureError::Unavailable("it is not computed yet".into()));
                }
                let range = render::symmetric_range(&table.values);
                Ok(table_heatmap(table, &table.title, Some(range), Colormap::RdBu, theme, scale, axes.0, axes.1))
            }
            Figure::Attribution(table) => {
                if table.values.is_empty() {
                    return Err(FigureError::Unavailable("the attribution is not computed yet".into()));
                }
                let range = render::symmetric_range(&table.values);
                Ok(table_heatmap(table, &table.title, Some(range), Colormap::RdBu, theme, scale, "layer", "head"))
            }
            Figure::Experts { grid, .. } if grid.cells.is_empty() => {
                Err(FigureError::Unavailable("the routes are not computed yet".into()))
            }
            Figure::Lens(grid) | Figure::Experts { grid, .. } => Ok(render::text_grid_drawing(&render::TextGridSpec {
                title: &grid.title,
                note: &grid.note,
                row_labels: &grid.row_labels,
                col_labels: &grid.col_labels,
                cells: &grid.cells,
                values: grid.colour_values.as_ref().unwrap_or(&grid.values),
                range: grid.range,
                colormap,
                selected_col: grid.selected_col,
                theme,
                scale,
                bar: grid.bar.as_ref(),
                fit_cells: matches!(self, Figure::Experts { .. }),
            })),
            Figure::Heatmap { layer_idx, head_idxs } => {
                let run = need(run)?;
                let table = self.table(Some(run))?;
                let mut title = table.title.clone();
                match (run.causal, run.window_of(*layer_idx)) {
                    (_, Some(w)) => title = format!("{title} · grey: masked (causal, sliding window {w})"),
                    (true, None) => title.push_str(" · grey: masked (causal)"),
                    (false, None) => {}
                }
                // A model with attention sinks: each row's share of its sink, as a column apart.
                let sink = run.sinks.as_ref().map(|s| s.mean_of_heads(*layer_idx, head_idxs));
                if sink.is_some() {
                    title.push_str(" · sink: the share no key gets");
                }
                let (rows, cols) = heatmap_axes(run);
                let spec = table_spec(&table, &title, Some((0.0, 1.0)), colormap, (theme, scale), (rows, cols));
                Ok(render::heatmap_drawing(&HeatmapSpec { sink: sink.as_deref(), ..spec }))
            }
            Figure::HeadView { layer_idx, head_idxs, selected_token, threshold } => {
                let run = need(run)?;
                let attention = &run.attention;
                let labels = token_labels(run);
                let key_labels: Option<Vec<String>> =
                    run.key_tokens.as_ref().map(|keys| (0..keys.len()).map(|i| run.key_label(i)).collect());
                check("layer", *layer_idx, attention.layers())?;
                for &h in head_idxs {
                    check("head", h, attention.heads())?;
                }
                if let Some((side, pos)) = selected_token {
                    check("token", *pos, if *side == Side::Key { attention.keys() } else { attention.seq_len() })?;
                }
                let title = format!("{} · layer {layer_idx}", run.display_name());
                Ok(render::head_view_drawing(&HeadViewSpec {
                    attention,
                    layer_idx: *layer_idx,
                    labels: &labels,
                    key_labels: key_labels.as_deref(),
                    heads: head_idxs,
                    selected_token: *selected_token,
                    threshold: *threshold,
                    theme,
                    scale,
                    title: &title,
                    segments: run.tokens.is_pair().then(|| (&run.tokens.segments[..], &run.keys().segments[..])),
                    sinks: run.sinks.as_ref(),
                }))
            }
            Figure::ModelGrid => {
                let run = need(run)?;
                let title = format!("{} · all layers × heads", run.display_name());
                let windows: Vec<Option<usize>> = (0..run.attention.layers()).map(|l| run.window_of(l)).collect();
                Ok(render::model_grid_drawing(&ModelGridSpec {
                    attention: &run.attention,
                    colormap,
                    theme,
                    scale,
                    title: &title,
                    causal: run.causal,
                    windows: &windows,
                }))
            }
            Figure::Neuron { layer_idx, head_idx, query_pos } => {
                let run = need(run)?;
                render_neuron(run, *layer_idx, *head_idx, *query_pos, &token_labels(run), theme, scale)
            }
            Figure::Roles(_) => {
                let table = self.table(Some(need(run)?))?;
                Ok(table_heatmap(&table, &table.title, Some((0.0, 1.0)), colormap, theme, scale, "layer", "head"))
            }
            Figure::Compare { layer_idx, head_idxs, other, difference: false } => {
                let run = need(run)?;
                let heatmap = Figure::Heatmap { layer_idx: *layer_idx, head_idxs: head_idxs.clone() };
                let tables = [heatmap.table(Some(run))?, heatmap.table(Some(&other.0))?];
                let titles = [format!("A: {}", tables[0].title), format!("B: {}", tables[1].title)];
                let images: Vec<Drawing> = tables
                    .iter()
                    .zip(&titles)
                    .map(|(t, title)| table_heatmap(t, title, Some((0.0, 1.0)), colormap, theme, scale, "query", "key"))
                    .collect();
                Ok(Drawing::stack(images, true, (24.0 * scale).floor(), theme.background()))
            }
            Figure::Stats(_) | Figure::Rollout { .. } | Figure::Compare { difference: true, .. } => {
                let table = self.table(Some(need(run)?))?;
                let (range, cmap, rows_axis, cols_axis) = match self {
                    Figure::Stats(stat) => (stat.is_share().then_some((0.0, 1.0)), colormap, "layer", "head"),
                    Figure::Rollout { .. } => (None, colormap, "token at that layer", "input token"),
                    _ => (None, Colormap::RdBu, "query", "key"),
                };
                Ok(table_heatmap(&table, &table.title, range, cmap, theme, scale, rows_axis, cols_axis))
            }
        }
    }

    /// The numbers behind the figure: matrices with their token labels, statistics per head.
    pub fn table(&self, run: Option<&Run>) -> Result<Table, FigureError> {
        match self {
            Figure::Charts(charts) => charts_table(charts),
            Figure::Graph(graph) => Ok(Table {
                title: graph.title.clone(),
                row_labels: graph.edges.iter().map(|e| e.name.clone()).collect(),
                col_labels: vec!["proportion".to_string()],
                values: graph.edges.iter().map(|e| e.weight).collect(),
            }),
            Figure::Attribution(table) => {
                if table.values.is_empty() {
                    return Err(FigureError::Unavailable("the attribution is not computed yet".into()));
                }
                Ok((**table).clone())
            }
            Figure::Signed { table, .. } => {
                if table.values.is_empty() {
                    return Err(FigureError::Unavailable("it is not computed yet".into()));
                }
                Ok((**table).clone())
            }
            Figure::Experts { numbers, .. } => {
                if numbers.values.is_empty() {
                    return Err(FigureError::Unavailable("the routes are not computed yet".into()));
                }
                Ok((**numbers).clone())
            }
            Figure::Lens(grid) => Ok(Table {
                title: format!("{} ({})", grid.title, grid.note),
                row_labels: grid.row_labels.clone(),
                col_labels: grid.col_labels.clone(),
                values: grid.values.clone(),
            }),
            Figure::Heatmap { layer_idx, head_idxs } => {
                let run = need(run)?;
                let a = &run.attention;
                check_heads(a, *layer_idx, head_idxs)?;
                let values = run.shown_mean(*layer_idx, head_idxs);
                let title = format!("{} · layer {layer_idx} · {}", run.display_name(), heads_text(head_idxs));
                let key_labels: Vec<String> = (0..a.keys()).map(|i| run.key_label(i)).collect();
                Ok(Table { title, row_labels: token_labels(run), col_labels: key_labels, values })
            }
            Figure::Stats(stat) => {
                let run = need(run)?;
                let a = &run.attention;
                let stats = HeadStats::compute(a, run.keys()).with_sinks(run.sinks.as_ref());
                let title = format!("{} · {} per head: {}", run.display_name(), stat.label(), stat.description());
                Ok(Table {
                    title,
                    row_labels: (0..a.layers()).map(|l| format!("L{l}")).collect(),
                    col_labels: (0..a.heads()).map(|h| format!("H{h}")).collect(),
                    values: stats.matrix(*stat),
                })
            }
            Figure::Roles(role) => {
                use crate::analysis::roles::{HeadScores, SCORE_NAMES};
                let run = need(run)?;
                let a = &run.attention;
                let name =
                    SCORE_NAMES.get(*role).ok_or(FigureError::OutOfRange { what: "score", index: *role, count: 4 })?;
                if !a.is_square() || run.long.is_some() || run.tokens.ids.len() != a.seq_len() {
                    return Err(FigureError::Unavailable("head roles are scores of self-attention over tokens".into()));
                }
                let scores = HeadScores::compute(a, &run.tokens.ids);
                let title = format!(
                    "{} · {} score per head (NaN: undefined, no repeats)",
                    run.display_name(),
                    name.replace('_', "-")
                );
                Ok(Table {
                    title,
                    row_labels: (0..a.layers()).map(|l| format!("L{l}")).collect(),
                    col_labels: (0..a.heads()).map(|h| format!("H{h}")).collect(),
                    values: scores.by_name(name).unwrap_or_default().to_vec(),
                })
            }
            Figure::Rollout { layer_idx, head_idxs, flow } => {
                let run = need(run)?;
                let a = &run.attention;
                if !a.is_square() {
                    return Err(FigureError::Unavailable(crate::analysis::stack::CROSS_ROLLOUT_REFUSAL.into()));
                }
                check_heads(a, *layer_idx, head_idxs)?;
                let n = a.seq_len();
                let (what, values) = match flow {
                    Some(values) if values.len() == n * n => ("Attention flow", values.to_vec()),
                    Some(_) => return Err(FigureError::Unavailable("the flow was computed for another input".into())),
                    None => ("Attention rollout", rollout::rollout(a, head_idxs).swap_remove(*layer_idx)),
                };
                let title =
                    format!("{} · {what} through layers 0–{layer_idx} · {}", run.display_name(), heads_text(head_idxs));
                let labels = token_labels(run);
                Ok(Table { title, row_labels: labels.clone(), col_labels: labels, values })
            }
            Figure::Compare { layer_idx, head_idxs, other, .. } => {
                let run = need(run)?;
                let a = &run.attention;
                let b = &other.0;
                check_heads(a, *layer_idx, head_idxs)?;
                if !a.is_square() || !b.attention.is_square() {
                    return Err(FigureError::Unavailable(
                        "the difference of cross-attention is not offered: show A and B side by side".into(),
                    ));
                }
                let bt = &b.attention;
                if bt.layers() <= *layer_idx || head_idxs.iter().any(|&h| h >= bt.heads()) {
                    return Err(FigureError::Unavailable(format!(
                        "run B has {} layers × {} heads: it has no layer {layer_idx} with these heads",
                        bt.layers(),
                        bt.heads()
                    )));
                }
                let differ = crate::analysis::tokens::token_difference(&run.tokens, &b.tokens).map_err(|why| {
                    FigureError::Unavailable(format!(
                        "the difference needs as many tokens in A as in B ({why}): show them side by side"
                    ))
                })?;
                // Positions whose tokens differ are labelled “a ≠ b”.
                let labels: Vec<String> = token_labels(run)
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        if differ.contains(&i) {
                            crate::analysis::tokens::difference_label(l, &b.label(i))
                        } else {
                            l.clone()
                        }
                    })
                    .collect();
                let mut values = bt.mean_of_heads(*layer_idx, head_idxs);
                for (v, av) in values.iter_mut().zip(a.mean_of_heads(*layer_idx, head_idxs)) {
                    *v -= av;
                }
                if run.causal && b.causal {
                    let all: Vec<usize> = (0..a.seq_len()).collect();
                    mask_causal(&mut values, &all);
                }
                let title = format!(
                    "B − A · layer {layer_idx} · {} · A: {} · B: {}",
                    heads_text(head_idxs),
                    run.display_name(),
                    b.display_name()
                );
                Ok(Table { title, row_labels: labels.clone(), col_labels: labels, values })
            }
            Figure::Neuron { layer_idx, head_idx, query_pos } => {
                let run = need(run)?;
                let n = run.attention.seq_len();
                let labels = token_labels(run);
                let b = neuron_breakdown(run, *layer_idx, *head_idx, *query_pos)?;
                let d = b.head_dim;
                let mut col_labels: Vec<String> = (0..d).map(|i| format!("k[{i}]")).collect();
                col_labels.extend((0..d).map(|i| format!("q∘k[{i}]")));
                // Where the score sums several terms, each term is a column before the score.
                col_labels.extend(b.terms.iter().map(|(name, _)| name.clone()));
                col_labels.extend(["score".to_string(), "weight".to_string()]);
                let mut values = Vec::with_capacity(n * (2 * d + 2 + b.terms.len()));
                for j in 0..n {
                    values.extend_from_slice(&b.keys[j * d..(j + 1) * d]);
                    values.extend_from_slice(&b.products[j * d..(j + 1) * d]);
                    values.extend(b.terms.iter().map(|(_, t)| t[j]));
                    values.extend([b.scores[j], b.weights[j]]);
                }
                let rotated = run.neuron.as_ref().is_some_and(|n| n.rotated);
                let title = format!(
                    "{} · layer {layer_idx} · head {head_idx} · query “{}” (#{query_pos}){} · q = {:?}",
                    run.display_name(),
                    labels[*query_pos],
                    if rotated { " · q and k after the rotary rotation" } else { "" },
                    b.query
                );
                Ok(Table { title, row_labels: labels, col_labels, values })
            }
            Figure::ModelGrid
            | Figure::HeadView { .. }
            | Figure::PeEncoding(_)
            | Figure::PeDot(_)
            | Figure::LearnedPositions { .. } => {
                need(run)?;
                Err(FigureError::Unavailable("this view has no table of numbers; export it as PNG".into()))
            }
        }
    }

    /// The figure drawn into an RGBA image.
    pub fn image(&self, run: Option<&Run>, style: Style) -> Result<RgbaImage, FigureError> {
        self.drawing(run, style).map(|d| d.to_rgba())
    }
}

/// Titles of the attention heatmap's axes (rows, columns): queries and keys, or for
/// cross-attention target and source tokens (the app's heatmap shows the same).
pub fn heatmap_axes(run: &Run) -> (&'static str, &'static str) {
    if run.key_tokens.is_some() {
        ("target token (attending)", "source token (attended to)")
    } else {
        ("query (attending)", "key (attended to)")
    }
}

/// Charts' numbers: one row per x value of any series (in increasing order), one column per
/// series (named "chart: series" where two charts have a series of one name), NaN where a series
/// has no point at that x.
fn charts_table(charts: &[render::Chart]) -> Result<Table, FigureError> {
    let all = || charts.iter().flat_map(|c| c.series.iter().map(move |s| (c, s)));
    let mut xs: Vec<f64> = all().flat_map(|(_, s)| s.points.iter().map(|p| p[0])).collect();
    if xs.is_empty() {
        return Err(FigureError::Unavailable("there is nothing to plot yet".into()));
    }
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let names: Vec<&str> = all().map(|(_, s)| s.name.as_str()).collect();
    let col_labels: Vec<String> = all()
        .map(|(c, s)| {
            let twice = names.iter().filter(|n| **n == s.name).count() > 1;
            if twice { format!("{}: {}", c.title, s.name) } else { s.name.clone() }
        })
        .collect();
    let cols = col_labels.len();
    let mut values = vec![f32::NAN; xs.len() * cols];
    for (col, (_, s)) in all().enumerate() {
        for p in &s.points {
            if let Ok(row) = xs.binary_search_by(|x| x.total_cmp(&p[0])) {
                #[allow(clippy::cast_possible_truncation)] // the numbers are f32 (losses, scores)
                let v = p[1] as f32;
                values[row * cols + col] = v;
            }
        }
    }
    let title = charts.iter().map(|c| c.title.as_str()).collect::<Vec<_>>().join(" · ");
    let row_labels = xs.iter().map(ToString::to_string).collect();
    let x_axis = charts.first().map_or("x", |c| c.x_axis.as_str());
    Ok(Table { title: format!("{title} (rows: {x_axis})"), row_labels, col_labels, values })
}

/// A table drawn as a labelled heatmap.
#[allow(clippy::too_many_arguments)]
fn table_heatmap(
    table: &Table,
    title: &str,
    range: Option<(f32, f32)>,
    colormap: Colormap,
    theme: Theme,
    scale: f32,
    row_axis: &str,
    col_axis: &str,
) -> Drawing {
    render::heatmap_drawing(&table_spec(table, title, range, colormap, (theme, scale), (row_axis, col_axis)))
}

/// A table as a labelled heatmap's spec, its values printed.
fn table_spec<'a>(
    table: &'a Table,
    title: &'a str,
    range: Option<(f32, f32)>,
    colormap: Colormap,
    (theme, scale): (Theme, f32),
    (row_axis, col_axis): (&'a str, &'a str),
) -> HeatmapSpec<'a> {
    HeatmapSpec {
        values: &table.values,
        rows: table.row_labels.len(),
        cols: table.col_labels.len(),
        row_labels: &table.row_labels,
        col_labels: &table.col_labels,
        row_axis,
        col_axis,
        title,
        range,
        colormap,
        theme,
        scale,
        show_values: true,
        sink: None,
    }
}

/// The neuron view's numbers for one query, after checking the indices.
fn neuron_breakdown(
    run: &Run,
    layer_idx: usize,
    head_idx: usize,
    query_pos: usize,
) -> Result<NeuronBreakdown, FigureError> {
    let a = &run.attention;
    check("layer", layer_idx, a.layers())?;
    check("head", head_idx, a.heads())?;
    check("token", query_pos, a.seq_len())?;
    let neuron = run.neuron.as_ref().ok_or_else(|| {
        FigureError::Unavailable(
            "the neuron view needs query and key vectors, which word-level runs and the decoder side of an encoder–decoder do not have".into(),
        )
    })?;
    Ok(neuron.breakdown(a, layer_idx, head_idx, query_pos, |j| run.is_masked(layer_idx, query_pos, j)))
}

/// The neuron view as a figure: q on top; keys, q∘k, the score's terms (if several), the score and
/// the weights side by side.
fn render_neuron(
    run: &Run,
    layer_idx: usize,
    head_idx: usize,
    query_pos: usize,
    labels: &[String],
    theme: Theme,
    scale: f32,
) -> Result<Drawing, FigureError> {
    let b = neuron_breakdown(run, layer_idx, head_idx, query_pos)?;
    let (n, d) = (run.attention.seq_len(), b.head_dim);
    let dims: Vec<String> = Vec::new();
    let part =
        |values: &[f32], rows: usize, cols: usize, row_labels: &[String], title: &str, range, cmap, col_axis: &str| {
            render::heatmap_drawing(&HeatmapSpec {
                values,
                rows,
                cols,
                row_labels,
                col_labels: &dims,
                row_axis: "key",
                col_axis,
                title,
                range,
                colormap: cmap,
                theme,
                scale,
                show_values: cols <= 4,
                sink: None,
            })
        };
    let query_label = [labels[query_pos].clone()];
    let q = render::heatmap_drawing(&HeatmapSpec {
        values: &b.query,
        rows: 1,
        cols: d,
        row_labels: &query_label,
        col_labels: &dims,
        row_axis: "query",
        col_axis: "dimension",
        title: &format!(
            "{} · layer {layer_idx} · head {head_idx} · query “{}” (#{query_pos}): q{}",
            run.display_name(),
            labels[query_pos],
            if run.neuron.as_ref().is_some_and(|n| n.rotated) { " (q and k after the rotary rotation)" } else { "" }
        ),
        range: None,
        colormap: Colormap::RdBu,
        theme,
        scale,
        show_values: false,
        sink: None,
    });
    let keys = part(&b.keys, n, d, labels, "key vectors k_j", None, Colormap::RdBu, "dimension");
    let products = part(&b.products, n, d, labels, "q ∘ k_j (row sum = q·k_j)", None, Colormap::RdBu, "dimension");
    let no_labels: Vec<String> = vec![String::new(); n];
    // Where the score sums several terms (relative-position bias, disentangled attention), each term
    // is a column of its own before the score, on the score's colour scale.
    let score_title = if b.terms.is_empty() { "q·k_j / √d" } else { "score = sum of terms" };
    let score_range = b.terms.iter().fold(render::symmetric_range(&b.scores), |(lo, hi), (_, t)| {
        let (tl, th) = render::symmetric_range(t);
        (lo.min(tl), hi.max(th))
    });
    let mut columns = vec![keys, products];
    for (name, values) in &b.terms {
        columns.push(part(values, n, 1, &no_labels, name, Some(score_range), Colormap::RdBu, "term"));
    }
    columns.push(part(&b.scores, n, 1, &no_labels, score_title, Some(score_range), Colormap::RdBu, "score"));
    columns.push(part(&b.weights, n, 1, &no_labels, "softmax", Some((0.0, 1.0)), Colormap::Viridis, "weight"));
    let gap = (16.0 * scale).floor();
    let row = Drawing::stack(columns, true, gap, theme.background());
    Ok(Drawing::stack(vec![q, row], false, gap, theme.background()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stack::{CROSS_ROLLOUT_REFUSAL, Stack, fixture::seq2seq_run, stack_run};

    #[test]
    fn cross_attention_tables_have_target_rows_and_source_columns_and_rollout_is_refused() {
        let run = stack_run(&seq2seq_run(), Stack::Cross).unwrap();
        let table = Figure::Heatmap { layer_idx: 1, head_idxs: vec![0] }.table(Some(&run)).unwrap();
        assert_eq!(table.row_labels, ["</s>", "Hallo"]);
        assert_eq!(table.col_labels, ["<s>", "Hello", "</s>"]);
        assert_eq!(table.values, seq2seq_run().decoder.unwrap().cross.head(1, 0));
        let rollout = Figure::Rollout { layer_idx: 0, head_idxs: vec![0], flow: None };
        let err = rollout.table(Some(&run)).unwrap_err().to_string();
        assert_eq!(err, CROSS_ROLLOUT_REFUSAL);
        assert!(rollout.image(Some(&run), Style::default()).is_err());
        // Every other figure draws, with the key side's own labels.
        for figure in [
            Figure::HeadView {
                layer_idx: 0,
                head_idxs: vec![0, 1],
                selected_token: Some((Side::Key, 2)),
                threshold: 0.0,
            },
            Figure::Heatmap { layer_idx: 0, head_idxs: vec![0, 1] },
            Figure::ModelGrid,
            Figure::Stats(Statistic::Entropy),
        ] {
            figure.image(Some(&run), Style::default()).unwrap();
        }
        let stats = Figure::Stats(Statistic::SelfToken).table(Some(&run)).unwrap();
        assert!(stats.values.iter().all(|v| v.is_nan()), "self is not defined across two sequences");
    }
}
