//! Figures shared by `attnviz export` and the app's "Export…": one description of a figure, one
//! function that lays it out with `render/` as a display list, one atomic writer for PNG, SVG and
//! PDF — so the app, the command line and every format agree.

use std::path::Path;

use image::RgbaImage;
use thiserror::Error;

use crate::analysis::rollout;
use crate::analysis::run::NeuronBreakdown;
use crate::analysis::select::{mask_causal, submatrix};
use crate::analysis::{HeadStats, PeParams, Run, Statistic, pe};
use crate::render::{self, Colormap, Drawing, HeadViewSpec, HeatmapSpec, ModelGridSpec, Side, Theme};

/// A figure that can be exported.
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
/// [`render::graph`] alike.
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
/// whoever computed it, drawn by [`render::text_grid`].
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
#[derive(Debug, Clone, PartialEq)]
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

/// Look of an exported figure.
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

/// A figure that cannot be drawn or written.
#[derive(Debug, Error)]
pub enum ExportError {
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
    /// PNG encoding failed.
    #[error("cannot encode PNG: {0}")]
    Encode(#[from] image::ImageError),
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] crate::atomic::WriteError),
    /// The figure needs something the run does not have.
    #[error("{0}")]
    Unavailable(String),
    /// The file name's extension names no format.
    #[error("unknown export format {0:?}: use .png, .svg, .pdf, .csv, .json or .npz")]
    Format(String),
    /// The SVG or PDF could not be made.
    #[error(transparent)]
    Vector(#[from] render::VectorError),
}

fn check(what: &'static str, index: usize, count: usize) -> Result<(), ExportError> {
    if index < count { Ok(()) } else { Err(ExportError::OutOfRange { what, index, count }) }
}

/// A short "layer 2 · heads 0, 3" description used in titles.
fn heads_text(head_idxs: &[usize]) -> String {
    match head_idxs {
        [one] => format!("head {one}"),
        many => format!("mean of heads {}", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// Draws a figure into an RGBA image.
pub fn render_figure(run: Option<&Run>, figure: &Figure, style: Style) -> Result<RgbaImage, ExportError> {
    figure_drawing(run, figure, style).map(|d| d.to_rgba())
}

/// Lays a figure out as a display list, which every backend (PNG, SVG, PDF, the app) draws.
pub fn figure_drawing(run: Option<&Run>, figure: &Figure, style: Style) -> Result<Drawing, ExportError> {
    if !(1.0..=4.0).contains(&style.scale) {
        return Err(ExportError::Scale(style.scale));
    }
    let Style { theme, scale, colormap } = style;
    match figure {
        Figure::PeEncoding(params) => return Ok(render::pe_encoding(&pe::sinusoidal(*params)?, theme, scale)),
        Figure::PeDot(params) => return Ok(render::pe_dot(&pe::sinusoidal(*params)?, theme, scale)),
        Figure::LearnedPositions { model, total, positions, values, cosine } => {
            let n = (*positions).min(*total);
            if n == 0 {
                return Err(ExportError::Pe(pe::PeError::Positions(0)));
            }
            let first: Vec<usize> = (0..n).collect();
            let crop = submatrix(values, *total, &first, false);
            let what = if *cosine { "Cosine similarity" } else { "Dot products" };
            // As in the app: dot-product colours stop at the 99th percentile.
            let range = if *cosine { Some((-1.0, 1.0)) } else { pe::learned_dot_range(&crop) };
            let title = format!("{what} of the learned position embeddings of {model} (first {n})");
            return Ok(render::heatmap_drawing(&HeatmapSpec {
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
            }));
        }
        Figure::Graph(graph) => return Ok(render::graph_drawing(graph, theme, scale)),
        Figure::Attribution(table) => {
            if table.values.is_empty() {
                return Err(ExportError::Unavailable("the attribution is not computed yet".into()));
            }
            let range = render::symmetric_range(&table.values);
            return Ok(table_heatmap(table, &table.title, Some(range), Colormap::RdBu, theme, scale, "layer", "head"));
        }
        Figure::Lens(grid) => {
            return Ok(render::text_grid_drawing(&render::TextGridSpec {
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
            }));
        }
        _ => {}
    }
    let run = run.ok_or(ExportError::NoRun)?;
    let attention = &run.attention;
    let labels: Vec<String> = (0..run.tokens.len()).map(|i| run.label(i)).collect();
    let key_labels: Option<Vec<String>> =
        run.key_tokens.as_ref().map(|keys| (0..keys.len()).map(|i| run.key_label(i)).collect());
    match figure {
        Figure::Heatmap { .. } => {
            let table = figure_table(Some(run), figure)?;
            let mut title = table.title.clone();
            match (run.causal, run.window) {
                (_, Some(w)) => title = format!("{title} · grey: masked (causal, sliding window {w})"),
                (true, None) => title.push_str(" · grey: masked (causal)"),
                (false, None) => {}
            }
            let (rows, cols) = heatmap_axes(run);
            Ok(table_heatmap(&table, &title, Some((0.0, 1.0)), colormap, theme, scale, rows, cols))
        }
        Figure::HeadView { layer_idx, head_idxs, selected_token, threshold } => {
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
            }))
        }
        Figure::ModelGrid => {
            let title = format!("{} · all layers × heads", run.display_name());
            let (causal, window) = (run.causal, run.window);
            Ok(render::model_grid_drawing(&ModelGridSpec {
                attention,
                colormap,
                theme,
                scale,
                title: &title,
                causal,
                window,
            }))
        }
        Figure::Neuron { layer_idx, head_idx, query_pos } => {
            render_neuron(run, *layer_idx, *head_idx, *query_pos, &labels, theme, scale)
        }
        Figure::Roles(_) => {
            let table = figure_table(Some(run), figure)?;
            Ok(table_heatmap(&table, &table.title, Some((0.0, 1.0)), colormap, theme, scale, "layer", "head"))
        }
        Figure::Stats(_) | Figure::Rollout { .. } | Figure::Compare { .. } => {
            if let Figure::Compare { layer_idx, head_idxs, other, difference: false } = figure {
                let tables = [
                    figure_table(Some(run), &Figure::Heatmap { layer_idx: *layer_idx, head_idxs: head_idxs.clone() })?,
                    figure_table(
                        Some(&other.0),
                        &Figure::Heatmap { layer_idx: *layer_idx, head_idxs: head_idxs.clone() },
                    )?,
                ];
                let titles = [format!("A: {}", tables[0].title), format!("B: {}", tables[1].title)];
                let images: Vec<Drawing> = tables
                    .iter()
                    .zip(&titles)
                    .map(|(t, title)| table_heatmap(t, title, Some((0.0, 1.0)), colormap, theme, scale, "query", "key"))
                    .collect();
                return Ok(Drawing::stack(images, true, (24.0 * scale).floor(), theme.background()));
            }
            let table = figure_table(Some(run), figure)?;
            let (range, cmap, rows_axis, cols_axis) = match figure {
                Figure::Stats(stat) => (stat.is_share().then_some((0.0, 1.0)), colormap, "layer", "head"),
                Figure::Rollout { .. } => (None, colormap, "token at that layer", "input token"),
                _ => (None, Colormap::RdBu, "query", "key"),
            };
            Ok(table_heatmap(&table, &table.title, range, cmap, theme, scale, rows_axis, cols_axis))
        }
        Figure::PeEncoding(_)
        | Figure::PeDot(_)
        | Figure::LearnedPositions { .. }
        | Figure::Lens(_)
        | Figure::Graph(_)
        | Figure::Attribution(_) => {
            unreachable!("handled above")
        }
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
    render::heatmap_drawing(&HeatmapSpec {
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
    })
}

/// The neuron view's numbers for one query, after checking the indices.
fn neuron_breakdown(
    run: &Run,
    layer_idx: usize,
    head_idx: usize,
    query_pos: usize,
) -> Result<NeuronBreakdown, ExportError> {
    let a = &run.attention;
    check("layer", layer_idx, a.layers())?;
    check("head", head_idx, a.heads())?;
    check("token", query_pos, a.seq_len())?;
    let neuron = run.neuron.as_ref().ok_or_else(|| {
        ExportError::Unavailable(
            "the neuron view needs query and key vectors, which word-level runs and the decoder side of an encoder–decoder do not have".into(),
        )
    })?;
    Ok(neuron.breakdown(a, layer_idx, head_idx, query_pos, |j| run.is_masked(query_pos, j)))
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
) -> Result<Drawing, ExportError> {
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

/// The numbers behind a figure: matrices with their token labels, statistics per head.
pub fn figure_table(run: Option<&Run>, figure: &Figure) -> Result<Table, ExportError> {
    if let Figure::Graph(graph) = figure {
        return Ok(Table {
            title: graph.title.clone(),
            row_labels: graph.edges.iter().map(|e| e.name.clone()).collect(),
            col_labels: vec!["proportion".to_string()],
            values: graph.edges.iter().map(|e| e.weight).collect(),
        });
    }
    if let Figure::Attribution(table) = figure {
        if table.values.is_empty() {
            return Err(ExportError::Unavailable("the attribution is not computed yet".into()));
        }
        return Ok((**table).clone());
    }
    if let Figure::Lens(grid) = figure {
        return Ok(Table {
            title: format!("{} ({})", grid.title, grid.note),
            row_labels: grid.row_labels.clone(),
            col_labels: grid.col_labels.clone(),
            values: grid.values.clone(),
        });
    }
    let run = run.ok_or(ExportError::NoRun)?;
    let a = &run.attention;
    let labels: Vec<String> = (0..run.tokens.len()).map(|i| run.label(i)).collect();
    let key_labels: Vec<String> = (0..a.keys()).map(|i| run.key_label(i)).collect();
    let cross = !a.is_square();
    let check_heads = |layer_idx: usize, head_idxs: &[usize]| -> Result<(), ExportError> {
        check("layer", layer_idx, a.layers())?;
        if head_idxs.is_empty() {
            return Err(ExportError::NoHeads);
        }
        head_idxs.iter().try_for_each(|&h| check("head", h, a.heads()))
    };
    let n = a.seq_len();
    let all: Vec<usize> = (0..n).collect();
    match figure {
        Figure::Heatmap { layer_idx, head_idxs } => {
            check_heads(*layer_idx, head_idxs)?;
            let values = run.shown_mean(*layer_idx, head_idxs);
            let title = format!("{} · layer {layer_idx} · {}", run.display_name(), heads_text(head_idxs));
            Ok(Table { title, row_labels: labels, col_labels: key_labels, values })
        }
        Figure::Stats(stat) => {
            let stats = HeadStats::compute(a, run.keys());
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
            let name =
                SCORE_NAMES.get(*role).ok_or(ExportError::OutOfRange { what: "score", index: *role, count: 4 })?;
            if cross || run.long.is_some() || run.tokens.ids.len() != n {
                return Err(ExportError::Unavailable("head roles are scores of self-attention over tokens".into()));
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
            if cross {
                return Err(ExportError::Unavailable(crate::analysis::stack::CROSS_ROLLOUT_REFUSAL.into()));
            }
            check_heads(*layer_idx, head_idxs)?;
            let (what, values) = match flow {
                Some(values) if values.len() == n * n => ("Attention flow", values.to_vec()),
                Some(_) => return Err(ExportError::Unavailable("the flow was computed for another input".into())),
                None => ("Attention rollout", rollout::rollout(a, head_idxs).swap_remove(*layer_idx)),
            };
            let title =
                format!("{} · {what} through layers 0–{layer_idx} · {}", run.display_name(), heads_text(head_idxs));
            Ok(Table { title, row_labels: labels.clone(), col_labels: labels, values })
        }
        Figure::Compare { layer_idx, head_idxs, other, .. } => {
            let b = &other.0;
            check_heads(*layer_idx, head_idxs)?;
            if cross || !b.attention.is_square() {
                return Err(ExportError::Unavailable(
                    "the difference of cross-attention is not offered: show A and B side by side".into(),
                ));
            }
            let bt = &b.attention;
            if bt.layers() <= *layer_idx || head_idxs.iter().any(|&h| h >= bt.heads()) {
                return Err(ExportError::Unavailable(format!(
                    "run B has {} layers × {} heads: it has no layer {layer_idx} with these heads",
                    bt.layers(),
                    bt.heads()
                )));
            }
            let differ = crate::analysis::tokens::token_difference(&run.tokens, &b.tokens).map_err(|why| {
                ExportError::Unavailable(format!(
                    "the difference needs as many tokens in A as in B ({why}): show them side by side"
                ))
            })?;
            // Positions whose tokens differ are labelled “a ≠ b”.
            let labels: Vec<String> = labels
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
        _ => Err(ExportError::Unavailable("this view has no table of numbers; export it as PNG".into())),
    }
}

/// Writes a figure's numbers as CSV, JSON or NPZ (by the file's extension), atomically. Statistics
/// write one line per head with every statistic, like `attnviz stats`.
pub fn export_table(run: Option<&Run>, figure: &Figure, path: &Path) -> Result<(), ExportError> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    if let (Figure::Stats(_), Some(run)) = (figure, run) {
        let stats = HeadStats::compute(&run.attention, run.keys());
        let bytes = match ext.as_str() {
            "csv" => Some(stats.to_csv().into_bytes()),
            "json" => {
                Some(serde_json::to_vec_pretty(&stats.rows()).map_err(|e| ExportError::Unavailable(e.to_string()))?)
            }
            _ => None,
        };
        if let Some(bytes) = bytes {
            crate::atomic::write_bytes_atomic(path, &bytes)?;
            return Ok(());
        }
    }
    let table = figure_table(run, figure)?;
    let cols = table.col_labels.len().max(1);
    let bytes = match ext.as_str() {
        "csv" => table_csv(&table).into_bytes(),
        "json" => {
            let rows: Vec<Vec<Option<f32>>> =
                table.values.chunks(cols).map(|r| r.iter().map(|v| v.is_finite().then_some(*v)).collect()).collect();
            let doc = serde_json::json!({
                "title": table.title,
                "row_labels": table.row_labels,
                "col_labels": table.col_labels,
                "values": rows,
            });
            serde_json::to_vec(&doc).map_err(|e| ExportError::Unavailable(e.to_string()))?
        }
        "npz" => {
            use crate::analysis::npz::{NpyArray, write_npz};
            let title = [table.title.clone()];
            let arrays = [
                ("values", NpyArray::F32 { shape: vec![table.row_labels.len(), cols], data: &table.values }),
                ("row_labels", NpyArray::Str(&table.row_labels)),
                ("col_labels", NpyArray::Str(&table.col_labels)),
                ("title", NpyArray::Str(&title)),
            ];
            write_npz(std::io::Cursor::new(Vec::new()), &arrays)
                .map_err(|e| ExportError::Unavailable(e.to_string()))?
                .into_inner()
        }
        other => return Err(ExportError::Format(other.to_string())),
    };
    crate::atomic::write_bytes_atomic(path, &bytes)?;
    Ok(())
}

/// A table as CSV: a header of column labels, then one labelled line per row (masked cells empty).
pub fn table_csv(table: &Table) -> String {
    let quote = |s: &str| {
        if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
    };
    let cols = table.col_labels.len().max(1);
    let mut out = String::from("\"\"");
    for c in &table.col_labels {
        out.push(',');
        out.push_str(&quote(c));
    }
    out.push('\n');
    for (label, row) in table.row_labels.iter().zip(table.values.chunks(cols)) {
        out.push_str(&quote(label));
        for v in row {
            out.push(',');
            if v.is_finite() {
                out.push_str(&v.to_string());
            }
        }
        out.push('\n');
    }
    out
}

/// Encodes an image as PNG bytes.
pub fn png_bytes(image: &RgbaImage) -> Result<Vec<u8>, ExportError> {
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)?;
    Ok(bytes)
}

/// A picture format a figure is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// Pixels (the scale sets the resolution).
    #[default]
    Png,
    /// Vector: shapes and text, cells as rectangles (an embedded image past 256 × 256 cells).
    Svg,
    /// Vector, one page, text embedded as text.
    Pdf,
}

impl ImageFormat {
    /// Every format, in menu order.
    pub const ALL: [ImageFormat; 3] = [ImageFormat::Png, ImageFormat::Svg, ImageFormat::Pdf];

    /// The file extension, lower case.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Svg => "svg",
            Self::Pdf => "pdf",
        }
    }

    /// The picture format a path's extension names, if any (case-insensitive).
    pub fn of_path(path: &Path) -> Option<ImageFormat> {
        let ext = path.extension()?.to_string_lossy().to_ascii_lowercase();
        Self::ALL.into_iter().find(|f| f.extension() == ext)
    }
}

/// A figure's file in `format`: PNG, SVG or PDF bytes, and the size in pixels (points for PDF).
pub fn figure_bytes(drawing: &Drawing, format: ImageFormat) -> Result<Vec<u8>, ExportError> {
    Ok(match format {
        ImageFormat::Png => png_bytes(&drawing.to_rgba())?,
        ImageFormat::Svg => render::to_svg(drawing).into_bytes(),
        ImageFormat::Pdf => render::to_pdf(drawing)?,
    })
}

/// Draws a figure and writes it atomically as PNG, SVG or PDF, by the path's extension (none:
/// PNG); returns its size in pixels.
pub fn export_image(run: Option<&Run>, figure: &Figure, style: Style, path: &Path) -> Result<(u32, u32), ExportError> {
    let format = match path.extension() {
        None => ImageFormat::Png,
        Some(ext) => ImageFormat::of_path(path).ok_or_else(|| ExportError::Format(ext.to_string_lossy().into()))?,
    };
    let drawing = figure_drawing(run, figure, style)?;
    crate::atomic::write_bytes_atomic(path, &figure_bytes(&drawing, format)?)?;
    Ok(drawing.size_px())
}

/// Writes a figure to `path`: as a picture for .png, .svg, .pdf (or no extension), else its
/// numbers (.csv, .json, .npz). Returns the picture's size, or None for numbers.
pub fn export_file(
    run: Option<&Run>,
    figure: &Figure,
    style: Style,
    path: &Path,
) -> Result<Option<(u32, u32)>, ExportError> {
    if path.extension().is_none() || ImageFormat::of_path(path).is_some() {
        export_image(run, figure, style, path).map(Some)
    } else {
        export_table(run, figure, path).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stack::{CROSS_ROLLOUT_REFUSAL, Stack, fixture::seq2seq_run, stack_run};

    #[test]
    fn cross_attention_tables_have_target_rows_and_source_columns_and_rollout_is_refused() {
        let run = stack_run(&seq2seq_run(), Stack::Cross).unwrap();
        let table = figure_table(Some(&run), &Figure::Heatmap { layer_idx: 1, head_idxs: vec![0] }).unwrap();
        assert_eq!(table.row_labels, ["</s>", "Hallo"]);
        assert_eq!(table.col_labels, ["<s>", "Hello", "</s>"]);
        assert_eq!(table.values, seq2seq_run().decoder.unwrap().cross.head(1, 0));
        let rollout = Figure::Rollout { layer_idx: 0, head_idxs: vec![0], flow: None };
        let err = figure_table(Some(&run), &rollout).unwrap_err().to_string();
        assert_eq!(err, CROSS_ROLLOUT_REFUSAL);
        assert!(render_figure(Some(&run), &rollout, Style::default()).is_err());
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
            render_figure(Some(&run), &figure, Style::default()).unwrap();
        }
        let stats = figure_table(Some(&run), &Figure::Stats(Statistic::SelfToken)).unwrap();
        assert!(stats.values.iter().all(|v| v.is_nan()), "self is not defined across two sequences");
    }
}
