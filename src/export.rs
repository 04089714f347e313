//! Writing figures to files, for `attnviz export` and the app's "Export…": a figure's picture as
//! PNG, SVG or PDF, its numbers as CSV, JSON or NPZ, each written atomically. The figures
//! themselves — what they show, how they are laid out, the numbers behind them — are
//! [`render::Figure`]'s (re-exported here), so the app, the command line and every format agree.

use std::path::Path;

use image::RgbaImage;
use thiserror::Error;

use crate::analysis::{HeadStats, Run};
use crate::render::{self, Drawing};

pub use crate::render::{
    EdgeKind, Figure, FigureError, GraphEdge, GraphFigure, GraphNode, GridFigure, SharedRun, Style, Table,
    heatmap_axes, png_bytes,
};

/// A figure that cannot be drawn or written.
#[derive(Debug, Error)]
pub enum ExportError {
    /// The figure cannot be drawn or has no numbers (no run, an index out of range…).
    #[error(transparent)]
    Figure(#[from] FigureError),
    /// PNG encoding failed.
    #[error("cannot encode PNG: {0}")]
    Encode(#[from] image::ImageError),
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] crate::atomic::WriteError),
    /// The numbers could not be encoded as JSON or NPZ.
    #[error("{0}")]
    Numbers(String),
    /// The file name's extension names no format.
    #[error("unknown export format {0:?}: use .png, .svg, .pdf, .csv, .json or .npz")]
    Format(String),
    /// The SVG or PDF could not be made.
    #[error(transparent)]
    Vector(#[from] render::VectorError),
}

/// Draws a figure into an RGBA image ([`Figure::image`]).
pub fn render_figure(run: Option<&Run>, figure: &Figure, style: Style) -> Result<RgbaImage, ExportError> {
    Ok(figure.image(run, style)?)
}

/// Lays a figure out as a display list ([`Figure::drawing`]).
pub fn figure_drawing(run: Option<&Run>, figure: &Figure, style: Style) -> Result<Drawing, ExportError> {
    Ok(figure.drawing(run, style)?)
}

/// The numbers behind a figure ([`Figure::table`]).
pub fn figure_table(run: Option<&Run>, figure: &Figure) -> Result<Table, ExportError> {
    Ok(figure.table(run)?)
}

/// Writes a figure's numbers as CSV, JSON or NPZ (by the file's extension), atomically. Statistics
/// write one line per head with every statistic, like `attnviz stats`.
pub fn export_table(run: Option<&Run>, figure: &Figure, path: &Path) -> Result<(), ExportError> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    if let (Figure::Stats(_), Some(run)) = (figure, run) {
        let stats = HeadStats::compute(&run.attention, run.keys()).with_sinks(run.sinks.as_ref());
        let bytes = match ext.as_str() {
            "csv" => Some(stats.to_csv().into_bytes()),
            "json" => Some(serde_json::to_vec_pretty(&stats.rows()).map_err(|e| ExportError::Numbers(e.to_string()))?),
            _ => None,
        };
        if let Some(bytes) = bytes {
            crate::atomic::write_bytes_atomic(path, &bytes)?;
            return Ok(());
        }
    }
    let table = figure.table(run)?;
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
            serde_json::to_vec(&doc).map_err(|e| ExportError::Numbers(e.to_string()))?
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
                .map_err(|e| ExportError::Numbers(e.to_string()))?
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

/// A figure drawn at `scale`, as a file in `format`: PNG bytes (the drawing's pixels), or an SVG or
/// PDF whose page is the figure's size at 1× (points), whatever the scale.
pub fn figure_bytes(drawing: &Drawing, format: ImageFormat, scale: f32) -> Result<Vec<u8>, ExportError> {
    Ok(match format {
        ImageFormat::Png => png_bytes(&drawing.to_rgba())?,
        ImageFormat::Svg => render::to_svg_page(drawing, scale).into_bytes(),
        ImageFormat::Pdf => render::to_pdf_page(drawing, scale)?,
    })
}

/// Draws a figure and writes it atomically as PNG, SVG or PDF, by the path's extension (none:
/// PNG); returns its size: pixels for a PNG, the page in points for SVG and PDF.
pub fn export_image(run: Option<&Run>, figure: &Figure, style: Style, path: &Path) -> Result<(u32, u32), ExportError> {
    let format = match path.extension() {
        None => ImageFormat::Png,
        Some(ext) => ImageFormat::of_path(path).ok_or_else(|| ExportError::Format(ext.to_string_lossy().into()))?,
    };
    let drawing = figure.drawing(run, style)?;
    crate::atomic::write_bytes_atomic(path, &figure_bytes(&drawing, format, style.scale)?)?;
    Ok(match format {
        ImageFormat::Png => drawing.size_px(),
        ImageFormat::Svg | ImageFormat::Pdf => {
            let (w, h) = render::page_size(&drawing, style.scale);
            (w.ceil() as u32, h.ceil() as u32)
        }
    })
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
