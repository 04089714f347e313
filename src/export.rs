//! Figures shared by `attnviz export` and the app's "Export PNG…": one description of a figure,
//! one function that draws it with `render/`, one atomic PNG writer — so both give the same pixels.

use std::path::Path;

use image::RgbaImage;
use thiserror::Error;

use crate::analysis::select::submatrix;
use crate::analysis::{PeParams, Run, pe};
use crate::render::{self, Colormap, HeadViewSpec, HeatmapSpec, ModelGridSpec, Side, Theme};

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
            return Ok(render::heatmap(&HeatmapSpec {
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
        _ => {}
    }
    let run = run.ok_or(ExportError::NoRun)?;
    let attention = &run.attention;
    let labels: Vec<String> = (0..run.tokens.len()).map(|i| run.tokens.label(i)).collect();
    match figure {
        Figure::Heatmap { layer_idx, head_idxs } => {
            check("layer", *layer_idx, attention.layers())?;
            if head_idxs.is_empty() {
                return Err(ExportError::NoHeads);
            }
            for &h in head_idxs {
                check("head", h, attention.heads())?;
            }
            let values = attention.mean_of_heads(*layer_idx, head_idxs);
            let title = format!("{} · layer {layer_idx} · {}", run.display_name(), heads_text(head_idxs));
            let n = attention.seq_len();
            Ok(render::heatmap(&HeatmapSpec {
                values: &values,
                rows: n,
                cols: n,
                row_labels: &labels,
                col_labels: &labels,
                row_axis: "query (attending)",
                col_axis: "key (attended to)",
                title: &title,
                range: Some((0.0, 1.0)),
                colormap,
                theme,
                scale,
                show_values: true,
            }))
        }
        Figure::HeadView { layer_idx, head_idxs, selected_token, threshold } => {
            check("layer", *layer_idx, attention.layers())?;
            for &h in head_idxs {
                check("head", h, attention.heads())?;
            }
            if let Some((_, pos)) = selected_token {
                check("token", *pos, attention.seq_len())?;
            }
            let title = format!("{} · layer {layer_idx}", run.display_name());
            Ok(render::head_view(&HeadViewSpec {
                attention,
                layer_idx: *layer_idx,
                labels: &labels,
                heads: head_idxs,
                selected_token: *selected_token,
                threshold: *threshold,
                theme,
                scale,
                title: &title,
            }))
        }
        Figure::ModelGrid => {
            let title = format!("{} · all layers × heads", run.display_name());
            Ok(render::model_grid(&ModelGridSpec { attention, colormap, theme, scale, title: &title }))
        }
        Figure::PeEncoding(_) | Figure::PeDot(_) | Figure::LearnedPositions { .. } => unreachable!("handled above"),
    }
}

/// Encodes an image as PNG bytes.
pub fn png_bytes(image: &RgbaImage) -> Result<Vec<u8>, ExportError> {
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)?;
    Ok(bytes)
}

/// Draws a figure and writes it as a PNG file, atomically.
pub fn export_png(run: Option<&Run>, figure: &Figure, style: Style, path: &Path) -> Result<(u32, u32), ExportError> {
    let image = render_figure(run, figure, style)?;
    let bytes = png_bytes(&image)?;
    crate::atomic::write_bytes_atomic(path, &bytes)?;
    Ok(image.dimensions())
}
