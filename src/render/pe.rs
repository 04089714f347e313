//! Positional-encoding figures: thin wrappers over the heatmap.

use super::draw::Drawing;
use super::heatmap::{HeatmapSpec, heatmap_drawing};
use super::{Colormap, Theme};
use crate::analysis::PositionalEncoding;

/// The encoding itself, positions × dimensions, blue–red around zero.
pub fn pe_encoding(pe: &PositionalEncoding, theme: Theme, scale: f32) -> Drawing {
    let title = format!(
        "Positional encoding ({}, D = {}, base {})",
        pe.params.layout.name(),
        pe.params.d_model,
        pe.params.base
    );
    heatmap_drawing(&HeatmapSpec {
        values: &pe.encoding,
        rows: pe.params.positions,
        cols: pe.params.d_model,
        row_labels: &[],
        col_labels: &[],
        row_axis: "position",
        col_axis: "dimension",
        title: &title,
        range: None,
        colormap: Colormap::RdBu,
        theme,
        scale,
        show_values: false,
        sink: None,
    })
}

/// Dot products between the encodings of every pair of positions, viridis.
pub fn pe_dot(pe: &PositionalEncoding, theme: Theme, scale: f32) -> Drawing {
    let title =
        format!("Dot products PE\u{1D62} \u{B7} PE\u{2C7C} ({}, D = {})", pe.params.layout.name(), pe.params.d_model);
    heatmap_drawing(&HeatmapSpec {
        values: &pe.dot,
        rows: pe.params.positions,
        cols: pe.params.positions,
        row_labels: &[],
        col_labels: &[],
        row_axis: "position",
        col_axis: "position",
        title: &title,
        range: None,
        colormap: Colormap::Viridis,
        theme,
        scale,
        show_values: false,
        sink: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::pe::{PeParams, sinusoidal};

    #[test]
    fn pe_figures_grow_with_positions() {
        let small = sinusoidal(PeParams { d_model: 16, positions: 8, ..PeParams::default() }).unwrap();
        let large = sinusoidal(PeParams { d_model: 16, positions: 40, ..PeParams::default() }).unwrap();
        assert!(pe_encoding(&large, Theme::Light, 1.0).height > pe_encoding(&small, Theme::Light, 1.0).height);
        assert!(pe_dot(&large, Theme::Dark, 1.0).width > pe_dot(&small, Theme::Dark, 1.0).width);
    }
}
