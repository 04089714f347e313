//! A labelled matrix of coloured cells with exact values on hover and a colour bar: the widget the
//! statistics, rollout and comparison views share. The texture is rebuilt only when its key changes.

use std::hash::{Hash, Hasher};

use egui::{Color32, FontId, Rect, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use super::heatmap_view::{cell_number, colorbar, column_label};
pub use crate::render::symmetric_range;
use crate::render::{Colormap, cell_rgb, cells_rgba};

/// A matrix texture and what it was built from.
#[derive(Default)]
pub struct MatrixTexture {
    key: Option<u64>,
    texture: Option<TextureHandle>,
    /// How many times the texture was built.
    pub builds: usize,
}

/// What to draw.
pub struct MatrixSpec<'a> {
    /// Texture name (unique per widget).
    pub id: &'a str,
    /// `rows × cols`, row-major; NaN draws as masked.
    pub values: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// One label per row.
    pub row_labels: &'a [String],
    /// One label per column.
    pub col_labels: &'a [String],
    /// Values at the ends of the colour map.
    pub range: (f32, f32),
    /// Colour map.
    pub colormap: Colormap,
    /// Cell side in points.
    pub cell: f32,
    /// The hover text of cell (row, col) with value v.
    pub hover: &'a dyn Fn(usize, usize, f32) -> String,
    /// Accessible name of each cell, when cells are clickable (None: not clickable).
    pub clickable: Option<&'a dyn Fn(usize, usize) -> String>,
}

/// Hashes anything into a texture key.
pub fn key_of(value: &impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// The range of the finite values (0..1 when there are none).
pub fn data_range(values: &[f32]) -> (f32, f32) {
    let (lo, hi) = values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (0.0, 1.0)
    } else if hi - lo < 1e-9 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

/// Draws the matrix (labels left and on top, colour bar right); returns the clicked cell.
pub fn matrix_ui(
    ui: &mut egui::Ui,
    tex: &mut MatrixTexture,
    key: u64,
    spec: &MatrixSpec<'_>,
) -> Option<(usize, usize)> {
    let (rows, cols) = (spec.rows, spec.cols);
    if rows == 0 || cols == 0 {
        ui.label("Nothing to show.");
        return None;
    }
    let full_key = key_of(&(key, rows, cols, spec.range.0.to_bits(), spec.range.1.to_bits(), spec.colormap));
    if tex.key != Some(full_key) {
        let rgba = cells_rgba(spec.values, spec.range.0, spec.range.1, spec.colormap);
        let image = egui::ColorImage::from_rgba_unmultiplied([cols, rows], &rgba);
        tex.texture = Some(ui.ctx().load_texture(spec.id, image, TextureOptions::NEAREST));
        tex.key = Some(full_key);
        tex.builds += 1;
    }
    let cell = spec.cell;
    let font = FontId::proportional((cell * 0.6).clamp(9.0, 14.0));
    let text = ui.visuals().text_color();
    let width_of = |labels: &[String]| {
        labels
            .iter()
            .map(|l| ui.painter().layout_no_wrap(l.clone(), font.clone(), Color32::WHITE).size().x)
            .fold(10.0f32, f32::max)
            .min(160.0)
            + 10.0
    };
    let (row_w, col_h) = (width_of(spec.row_labels), width_of(spec.col_labels));
    let size = vec2(row_w + cols as f32 * cell + 90.0, col_h + rows as f32 * cell + 10.0);
    let (rect, response) = ui.allocate_exact_size(size, Sense::click());
    let cells = Rect::from_min_size(rect.min + vec2(row_w, col_h), vec2(cols as f32 * cell, rows as f32 * cell));
    let painter = ui.painter_at(rect);
    if let Some(texture) = &tex.texture {
        painter.image(texture.id(), cells, Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)), Color32::WHITE);
    }
    if cell >= 9.0 {
        for (i, label) in spec.row_labels.iter().enumerate().take(rows) {
            let y = cells.top() + (i as f32 + 0.5) * cell;
            painter.text(pos2(cells.left() - 4.0, y), egui::Align2::RIGHT_CENTER, label, font.clone(), text);
        }
        for (i, label) in spec.col_labels.iter().enumerate().take(cols) {
            column_label(&painter, cells.left() + (i as f32 + 0.5) * cell, cells.top(), label, &font, text);
        }
    }
    if cell >= 30.0 {
        let lut = spec.colormap.lut();
        let num_font = FontId::monospace((cell * 0.3).clamp(8.0, 12.0));
        for r in 0..rows {
            for c in 0..cols {
                let v = spec.values[r * cols + c];
                if v.is_nan() {
                    continue;
                }
                let center = pos2(cells.left() + (c as f32 + 0.5) * cell, cells.top() + (r as f32 + 0.5) * cell);
                cell_number(&painter, center, v, cell_rgb(&lut, v, spec.range.0, spec.range.1), &num_font);
            }
        }
    }
    let bar = Rect::from_min_size(pos2(cells.right() + 16.0, cells.top()), vec2(14.0, (rows as f32 * cell).max(80.0)));
    colorbar(&painter, spec.colormap, bar, text, spec.range);
    let mut clicked = None;
    if let Some(name) = spec.clickable {
        // Each cell is a widget of its own, so it can be found and clicked by name.
        for r in 0..rows {
            for c in 0..cols {
                let hit = Rect::from_min_size(
                    pos2(cells.left() + c as f32 * cell, cells.top() + r as f32 * cell),
                    vec2(cell, cell),
                );
                let id = ui.scope_id().with((spec.id, r, c));
                let resp = ui.interact(hit, id, Sense::click());
                let label = name(r, c);
                resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
                if resp.clicked() {
                    clicked = Some((r, c));
                }
                if resp.hovered() {
                    painter.rect_stroke(
                        hit,
                        0.0,
                        Stroke::new(2.0, ui.visuals().strong_text_color()),
                        egui::StrokeKind::Inside,
                    );
                    resp.on_hover_text_at_pointer((spec.hover)(r, c, spec.values[r * cols + c]));
                }
            }
        }
    } else if let Some(p) = response.hover_pos().filter(|p| cells.contains(*p)) {
        let r = (((p.y - cells.top()) / cell) as usize).min(rows - 1);
        let c = (((p.x - cells.left()) / cell) as usize).min(cols - 1);
        let hit =
            Rect::from_min_size(pos2(cells.left() + c as f32 * cell, cells.top() + r as f32 * cell), vec2(cell, cell));
        painter.rect_stroke(hit, 0.0, Stroke::new(2.0, ui.visuals().strong_text_color()), egui::StrokeKind::Outside);
        response.on_hover_text_at_pointer((spec.hover)(r, c, spec.values[r * cols + c]));
    }
    clicked
}
