//! The logit-lens figure: streams × positions, each cell its top token (or the followed token's
//! rank) on the cell's colour — the app's lens grid, CPU-drawn for export.

use image::RgbaImage;

use super::canvas::cell_text_rgb;
use super::colorbar::{Colorbar, Tick, nice_ticks};
use super::draw::{Anchor, Drawing};
use super::text::{fit_text, line_height, text_width};
use super::{AXIS_PX, Colormap, LABEL_PX, MAX_SIDE, NOTE_PX, TITLE_PX, Theme, cell_rgb};

/// A text grid to draw: one coloured cell per row × column with a short text in it.
#[derive(Debug, Clone, PartialEq)]
pub struct TextGridSpec<'a> {
    /// Title above the grid.
    pub title: &'a str,
    /// A note under the title (what the colour means).
    pub note: &'a str,
    /// One label per row.
    pub row_labels: &'a [String],
    /// One label per column (written under the grid).
    pub col_labels: &'a [String],
    /// `rows × cols` texts, row-major.
    pub cells: &'a [String],
    /// `rows × cols` values giving the colours (NaN: not computed, drawn empty).
    pub values: &'a [f32],
    /// Values at the ends of the colour map.
    pub range: (f32, f32),
    /// Colour map.
    pub colormap: Colormap,
    /// A column drawn framed (the selected position).
    pub selected_col: Option<usize>,
    /// Light or dark.
    pub theme: Theme,
    /// Size multiplier.
    pub scale: f32,
    /// The colour bar right of the grid (None: none).
    pub bar: Option<&'a GridBar>,
    /// Cells as wide as their widest text (up to four standard cells), for texts read whole (the
    /// experts' ids and weights); otherwise texts are cut to the standard width (the lens's tokens).
    pub fit_cells: bool,
}

/// The colour bar beside a text grid: what the colour shows and where its values lie.
#[derive(Debug, Clone, PartialEq)]
pub struct GridBar {
    /// What the colour shows, written above the bar ("probability").
    pub label: String,
    /// Labelled marks at colour values within the range, e.g. ranks on a log scale (empty: round
    /// values of the range).
    pub ticks: Vec<(f32, String)>,
}

/// Draws a text grid into an RGBA image (each side at most [`MAX_SIDE`]: columns past it are cut).
pub fn text_grid(spec: &TextGridSpec<'_>) -> RgbaImage {
    text_grid_drawing(spec).to_rgba()
}

/// A text grid as a display list.
pub fn text_grid_drawing(spec: &TextGridSpec<'_>) -> Drawing {
    let s = super::clamp_scale(spec.scale);
    let (rows, cols) = (spec.row_labels.len(), spec.col_labels.len());
    let label_px = LABEL_PX * s;
    let cell_px = (NOTE_PX - 1.0) * s;
    let widest =
        if spec.fit_cells { spec.cells.iter().map(|t| text_width(t, cell_px)).fold(0.0, f32::max) } else { 0.0 };
    let (cell_w, cell_h) = ((widest + 8.0 * s).clamp(66.0 * s, 4.0 * 66.0 * s), 20.0 * s);
    let margin = 12.0 * s;
    let row_w = spec.row_labels.iter().map(|l| text_width(l, label_px)).fold(0.0, f32::max).min(160.0 * s) + 8.0 * s;
    let title_h = line_height(TITLE_PX * s) + line_height(NOTE_PX * s) + 10.0 * s;
    let col_h = line_height(label_px) + line_height(AXIS_PX * s) + 10.0 * s;
    let grid_h = rows as f32 * cell_h;
    let (lo, hi) = spec.range;
    let bar = spec.bar.map(|b| {
        let ticks = if b.ticks.is_empty() {
            nice_ticks(lo, hi, Colorbar::max_ticks(grid_h, s))
        } else {
            let span = if hi > lo { hi - lo } else { 1.0 };
            b.ticks.iter().map(|(v, label)| Tick { t: (v - lo) / span, label: label.clone() }).collect()
        };
        let bar = Colorbar::new(ticks, s);
        let room = 16.0 * s + bar.width().max(text_width(&b.label, label_px));
        (b, bar, room)
    });
    let bar_room = bar.as_ref().map_or(0.0, |(_, _, room)| *room);
    let width = (margin * 2.0 + row_w + cols as f32 * cell_w + bar_room).min(MAX_SIDE as f32);
    let height = margin * 2.0 + title_h + grid_h + col_h;
    let mut d = Drawing::new(width, height, spec.theme.background(), spec.title);
    let fg = spec.theme.foreground();
    let muted = spec.theme.muted();
    d.text_at(&fit_text(spec.title, TITLE_PX * s, width - 2.0 * margin), margin, margin, TITLE_PX * s, fg);
    let note_y = margin + line_height(TITLE_PX * s) + 4.0 * s;
    let note_w = width - 2.0 * margin - bar_room;
    d.text_at(&fit_text(spec.note, NOTE_PX * s, note_w), margin, note_y, NOTE_PX * s, muted);
    let (left, top) = (margin + row_w, margin + title_h);
    let lut = spec.colormap.lut();
    for (r, label) in spec.row_labels.iter().enumerate() {
        let y = top + (r as f32 + 0.5) * cell_h;
        let text = fit_text(label, label_px, row_w - 8.0 * s);
        d.text(&text, left - 6.0 * s, y, label_px, Anchor::End, fg);
    }
    let visible = ((width - left - margin - bar_room) / cell_w).floor().max(0.0) as usize;
    if let Some((b, bar, _)) = &bar {
        let bar_left = left + cols.min(visible) as f32 * cell_w + 16.0 * s;
        // Above the top tick's label, which stands half a line above the bar.
        let label_y = top - 1.5 * line_height(label_px) - 2.0 * s;
        d.text_at(&b.label, bar_left, label_y, label_px, fg);
        bar.draw(&mut d, bar_left, top, grid_h, spec.colormap, spec.theme);
    }
    for c in 0..cols.min(visible) {
        let x = left + c as f32 * cell_w;
        let text = fit_text(&spec.col_labels[c], label_px, cell_w - 4.0 * s);
        let y = top + rows as f32 * cell_h + 4.0 * s + line_height(label_px) / 2.0;
        d.text(&text, x + cell_w / 2.0, y, label_px, Anchor::Middle, fg);
        for r in 0..rows {
            let y = top + r as f32 * cell_h;
            let v = spec.values.get(r * cols + c).copied().unwrap_or(f32::NAN);
            if v.is_nan() {
                d.frame(x, y, cell_w, cell_h, muted);
                continue;
            }
            let [red, green, blue] = cell_rgb(&lut, v, spec.range.0, spec.range.1);
            d.rect(x, y, cell_w, cell_h, [red, green, blue, 255]);
            let [tr, tg, tb] = cell_text_rgb([red, green, blue]);
            let text = fit_text(spec.cells.get(r * cols + c).map_or("", String::as_str), cell_px, cell_w - 4.0 * s);
            d.text(&text, x + cell_w / 2.0, y + cell_h / 2.0, cell_px, Anchor::Middle, [tr, tg, tb, 255]);
        }
    }
    if let Some(c) = spec.selected_col.filter(|&c| c < cols.min(visible)) {
        let x = left + c as f32 * cell_w;
        d.frame(x, top, cell_w, rows as f32 * cell_h, fg);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_grid_grows_with_its_columns_and_colours_its_cells() {
        let rows = vec!["embeddings".to_string(), "block 1".to_string()];
        let cols = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
        let grid = |n: usize| {
            let cells = vec!["Paris".to_string(); 2 * n];
            let values = vec![0.9; 2 * n];
            text_grid(&TextGridSpec {
                title: "Logit lens",
                note: "colour: probability",
                row_labels: &rows,
                col_labels: &cols(n),
                cells: &cells,
                values: &values,
                range: (0.0, 1.0),
                colormap: Colormap::Viridis,
                selected_col: Some(0),
                theme: Theme::Light,
                scale: 1.0,
                bar: None,
                fit_cells: false,
            })
        };
        let (small, large) = (grid(2), grid(6));
        assert!(large.width() > small.width());
        assert_eq!(large.height(), small.height());
        // Some pixel carries the colour map's colour for 0.9.
        let [r, g, b] = cell_rgb(&Colormap::Viridis.lut(), 0.9, 0.0, 1.0);
        assert!(large.pixels().any(|p| p.0 == [r, g, b, 255]));
    }
}
