//! Figures as data: the one list of figures ([`Figure`]: heatmap, head view, model grid, text
//! grid, graph…), each laid out once into a [`Drawing`] — a display list of rectangles, lines,
//! text runs and cell grids — which the backends draw: RGBA pixels (PNG), SVG and PDF here, egui
//! shapes in the app. No window, no GPU. Imports nothing of the crate but `analysis`.
//! Every size is multiplied by a `scale` (clamped to 1..=4) and no image side exceeds [`MAX_SIDE`].

mod canvas;
mod chart;
mod colorbar;
mod colormap;
mod draw;
mod figure;
mod graph;
mod head_view;
mod heatmap;
mod lens;
mod model_grid;
mod pe;
mod svg;
pub mod text;

pub use canvas::{MAX_SIDE, Segment, Stroke, cell_text_rgb, png_bytes};
pub use chart::{CHART_POINTS, Chart, Series, chart_drawing, marks_between, round_step, thinned};
pub use colorbar::{colorbar_drawing, format_cell_value};
pub use colormap::{Colormap, MASKED_RGB, cell_rgb, cells_rgba, head_colors};
pub use draw::{Anchor, Cells, Drawing, Item, TextRun};
pub use figure::{
    EdgeKind, Figure, FigureError, GraphEdge, GraphFigure, GraphNode, GridFigure, SharedRun, Style, Table, heatmap_axes,
};
pub use graph::{GRAPH_CELL, edge_alpha, edge_rgb, edge_width, graph, graph_drawing};
pub use head_view::{
    BodyLabels, HeadLines, HeadViewLayout, HeadViewSpec, LINE_BUDGET, Side, draw_lines, head_view, head_view_drawing,
    head_view_label_box, head_view_labels, head_view_layout, head_view_layout_fit, head_view_layout_sides,
    keep_strongest, line_budget_notice, sink_row, transparent_image, with_sink_target,
};
pub use heatmap::{
    CellGrid, HeatmapSpec, SINK_LABEL, heatmap, heatmap_drawing, heatmap_drawing_with_cells, heatmap_fit_cell,
    symmetric_range,
};
pub use lens::{GridBar, TextGridSpec, text_grid, text_grid_drawing};
pub use model_grid::{ModelGridSpec, model_grid, model_grid_drawing};
pub use pe::{pe_dot, pe_encoding};
pub use svg::{
    MAX_VECTOR_CELLS, VectorError, cells_as_images, page_size, parse_svg, to_pdf, to_pdf_page, to_svg, to_svg_page,
    vector_title,
};
pub use text::{draw_text, fit_text, text_width};

/// Background and text colours of a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Theme {
    /// Dark text on white, for papers.
    #[default]
    Light,
    /// Light text on dark grey, for slides and dark desktops.
    Dark,
}

impl Theme {
    /// Colour of the image background.
    pub fn background(self) -> [u8; 4] {
        match self {
            Self::Light => [255, 255, 255, 255],
            Self::Dark => [32, 33, 36, 255],
        }
    }

    /// Colour of titles and labels.
    pub fn foreground(self) -> [u8; 4] {
        match self {
            Self::Light => [28, 28, 30, 255],
            Self::Dark => [232, 232, 234, 255],
        }
    }

    /// Colour of secondary marks: tick marks, frames, axis titles.
    pub(crate) fn muted(self) -> [u8; 4] {
        match self {
            Self::Light => [105, 105, 112, 255],
            Self::Dark => [165, 165, 172, 255],
        }
    }

    /// Colour of the labels of a pair's second sentence (the app's link colour).
    pub fn second_sentence(self) -> [u8; 4] {
        match self {
            Self::Light => [0, 155, 255, 255],
            Self::Dark => [90, 170, 255, 255],
        }
    }

    /// Background behind a selected label.
    pub(crate) fn highlight(self) -> [u8; 4] {
        match self {
            Self::Light => [255, 231, 153, 255],
            Self::Dark => [92, 78, 30, 255],
        }
    }
}

/// Text size of figure titles at scale 1, in pixels (ascent to descent).
pub(crate) const TITLE_PX: f32 = 17.0;
/// Text size of axis titles at scale 1.
pub(crate) const AXIS_PX: f32 = 14.0;
/// Text size of tick labels, token labels and legends at scale 1.
pub(crate) const LABEL_PX: f32 = 12.5;
/// Text size of secondary notes and captions at scale 1.
pub(crate) const NOTE_PX: f32 = 12.0;

/// Clamps a user scale to 1..=4 (NaN gives 1).
pub(crate) fn clamp_scale(scale: f32) -> f32 {
    if scale.is_nan() { 1.0 } else { scale.clamp(1.0, 4.0) }
}

/// The label of position `i`: the given string when there is one, else the number.
pub(crate) fn label_or_index(labels: &[String], i: usize) -> String {
    labels.get(i).cloned().unwrap_or_else(|| i.to_string())
}
