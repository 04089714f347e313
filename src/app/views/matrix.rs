//! The app's one heatmap drawer: a labelled matrix of coloured cells with exact values on hover,
//! numbers in the cells when they fit and a colour bar — used by the heatmap, statistics, rollout
//! and comparison views. The texture is rebuilt only when its key changes; labels and numbers
//! are drawn for the visible cells only (a 512-token matrix stays fluid). Cell text takes the
//! exported figures' colour rule ([`crate::render::cell_text_rgb`]).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use egui::epaint::TextShape;
use egui::{Color32, FontId, Pos2, Rect, Sense, Stroke, TextureHandle, TextureOptions, Vec2, pos2, vec2};

use super::side_panel::contrast_text;
pub use crate::render::symmetric_range;
use crate::render::{CellGrid, Colormap, cell_rgb, cells_rgba};

/// Longest row or column label in points; longer ones end in "…".
pub const MAX_LABEL_WIDTH: f32 = 160.0;
/// Room right of the cells for the colour bar and its ticks.
const COLORBAR_ROOM: f32 = 90.0;

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

/// A one-line label no wider than `max_width`, ending in "…" when it is cut (a long token must
/// not be clipped, or look like a shorter one).
pub fn fitted_label(
    painter: &egui::Painter,
    text: &str,
    font: &FontId,
    color: Color32,
    max_width: f32,
) -> Arc<egui::Galley> {
    let mut job = egui::text::LayoutJob::simple_singleline(text.to_owned(), font.clone(), color);
    job.wrap =
        egui::text::TextWrapping { max_width, max_rows: 1, break_anywhere: true, overflow_character: Some('…') };
    painter.layout_job(job)
}

/// Where a matrix's parts go: label columns, the cells, the whole widget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatrixGeometry {
    /// Cell side in points.
    pub cell: f32,
    /// Font of the labels.
    pub label_px: f32,
    /// Width of the row labels' column (labels included, gap to the cells included).
    pub row_w: f32,
    /// Height of the column labels' band above the cells.
    pub col_h: f32,
    /// Rows and columns.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl MatrixGeometry {
    /// The geometry of `spec` (labels measured with `ui`'s fonts, each at most [`MAX_LABEL_WIDTH`]).
    pub fn of(ui: &egui::Ui, spec: &MatrixSpec<'_>) -> Self {
        let cell = spec.cell;
        let label_px = (cell * 0.6).clamp(9.0, 14.0);
        let font = FontId::proportional(label_px);
        let width_of = |labels: &[String]| {
            if cell < 9.0 {
                return 10.0;
            }
            // The widest of a sample is enough to size the column (every label is cut to fit).
            labels
                .iter()
                .take(2048)
                .map(|l| ui.painter().layout_no_wrap(l.clone(), font.clone(), Color32::WHITE).size().x)
                .fold(10.0f32, f32::max)
                .min(MAX_LABEL_WIDTH)
                + 10.0
        };
        Self {
            cell,
            label_px,
            row_w: width_of(spec.row_labels),
            col_h: width_of(spec.col_labels),
            rows: spec.rows,
            cols: spec.cols,
        }
    }

    /// Size of the whole widget.
    pub fn size(&self) -> Vec2 {
        vec2(
            self.row_w + self.cols as f32 * self.cell + COLORBAR_ROOM,
            self.col_h + self.rows as f32 * self.cell + 10.0,
        )
    }

    /// The cells' rectangle when the widget's top-left corner is at `origin`.
    pub fn cells(&self, origin: Pos2) -> Rect {
        Rect::from_min_size(
            origin + vec2(self.row_w, self.col_h),
            vec2(self.cols as f32 * self.cell, self.rows as f32 * self.cell),
        )
    }

    /// The cells as a grid (the exported heatmap's cell geometry), given the cells' rectangle.
    pub fn grid(&self, cells: Rect) -> CellGrid {
        CellGrid {
            left: cells.left(),
            top: cells.top(),
            cell_w: self.cell,
            cell_h: self.cell,
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// Screen rectangle of cell (`row`, `col`) given the cells' rectangle.
    pub fn screen_from_cell(&self, cells: Rect, row: usize, col: usize) -> Rect {
        let (x, y) = self.grid(cells).cell_min(row, col);
        Rect::from_min_size(pos2(x, y), vec2(self.cell, self.cell))
    }

    /// The cell under `pos`, if any.
    pub fn cell_from_screen(&self, cells: Rect, pos: Pos2) -> Option<(usize, usize)> {
        self.grid(cells).cell_at(pos.x, pos.y)
    }
}

/// What a drawn matrix reports.
pub struct MatrixResponse {
    /// The cell clicked (clickable matrices only).
    pub clicked: Option<(usize, usize)>,
    /// The whole widget's response (hover, drag).
    pub response: egui::Response,
}

/// Draws the matrix (labels left and on top, colour bar right).
pub fn matrix_ui(ui: &mut egui::Ui, tex: &mut MatrixTexture, key: u64, spec: &MatrixSpec<'_>) -> MatrixResponse {
    let (rows, cols) = (spec.rows, spec.cols);
    if rows == 0 || cols == 0 {
        let response = ui.label("Nothing to show.");
        return MatrixResponse { clicked: None, response };
    }
    let full_key = key_of(&(key, rows, cols, spec.range.0.to_bits(), spec.range.1.to_bits(), spec.colormap));
    if tex.key != Some(full_key) {
        let rgba = cells_rgba(spec.values, spec.range.0, spec.range.1, spec.colormap);
        let image = egui::ColorImage::from_rgba_unmultiplied([cols, rows], &rgba);
        tex.texture = Some(ui.ctx().load_texture(spec.id, image, TextureOptions::NEAREST));
        tex.key = Some(full_key);
        tex.builds += 1;
    }
    let geo = MatrixGeometry::of(ui, spec);
    let cell = geo.cell;
    let font = FontId::proportional(geo.label_px);
    let text = ui.visuals().text_color();
    let (rect, response) = ui.allocate_exact_size(geo.size(), Sense::click_and_drag());
    let cells = geo.cells(rect.min);
    let painter = ui.painter_at(rect);
    if let Some(texture) = &tex.texture {
        painter.image(texture.id(), cells, Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)), Color32::WHITE);
    }
    // Only what is on screen: rows and columns whose centre is within a cell of the clip rect.
    let clip = ui.clip_rect();
    let first = |lo: f32, start: f32| (((lo - start) / cell).floor() - 1.0).max(0.0) as usize;
    let last = |hi: f32, start: f32, n: usize| ((((hi - start) / cell).ceil() + 1.0).max(0.0) as usize).min(n);
    let row_span = first(clip.top(), cells.top())..last(clip.bottom(), cells.top(), rows);
    let col_span = first(clip.left(), cells.left())..last(clip.right(), cells.left(), cols);
    if cell >= 9.0 {
        let room = geo.row_w - 10.0;
        for r in row_span.clone() {
            let y = cells.top() + (r as f32 + 0.5) * cell;
            let galley = fitted_label(&painter, &spec.row_labels[r], &font, text, room);
            let pos = pos2(cells.left() - 4.0 - galley.size().x, y - galley.size().y / 2.0);
            painter.galley(pos, galley, text);
        }
        for c in col_span.clone() {
            let label = fitted_label(&painter, &spec.col_labels[c], &font, text, geo.col_h - 10.0);
            column_label(&painter, cells.left() + (c as f32 + 0.5) * cell, cells.top(), label, text);
        }
    }
    if cell >= 30.0 {
        let lut = spec.colormap.lut();
        let num_font = FontId::monospace((cell * 0.3).clamp(8.0, 12.0));
        for r in row_span {
            for c in col_span.clone() {
                let v = spec.values[r * cols + c];
                if v.is_nan() {
                    continue; // masked
                }
                let center = geo.screen_from_cell(cells, r, c).center();
                cell_number(&painter, center, v, cell_rgb(&lut, v, spec.range.0, spec.range.1), &num_font);
            }
        }
    }
    let bar_h = (rows as f32 * cell).max(80.0);
    colorbar(ui, &painter, spec.colormap, pos2(cells.right() + 16.0, cells.top()), bar_h, spec.range);
    let mut clicked = None;
    if let Some(name) = spec.clickable {
        // Each cell is a widget of its own, so it can be found and clicked by name.
        for r in 0..rows {
            for c in 0..cols {
                let hit = geo.screen_from_cell(cells, r, c);
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
    } else if let Some((r, c)) = response.hover_pos().and_then(|p| geo.cell_from_screen(cells, p)) {
        let hit = geo.screen_from_cell(cells, r, c);
        painter.rect_stroke(hit, 0.0, Stroke::new(2.0, ui.visuals().strong_text_color()), egui::StrokeKind::Outside);
        response.clone().on_hover_text_at_pointer((spec.hover)(r, c, spec.values[r * cols + c]));
    }
    MatrixResponse { clicked, response }
}

/// A column's label written upwards, centred on `x`, ending just above `top` (the cells' top edge).
pub fn column_label(painter: &egui::Painter, x: f32, top: f32, galley: Arc<egui::Galley>, color: Color32) {
    let h = galley.size().y;
    painter.add(TextShape::new(pos2(x - h / 2.0, top - 4.0), galley, color).with_angle(-std::f32::consts::FRAC_PI_2));
}

/// A cell's value (two decimals) centred on `center`, in the exported figures' colour for a cell
/// of colour `rgb`.
pub fn cell_number(painter: &egui::Painter, center: Pos2, value: f32, [r, g, b]: [u8; 3], font: &FontId) {
    painter.text(
        center,
        egui::Align2::CENTER_CENTER,
        crate::render::format_cell_value(value),
        font.clone(),
        contrast_text(Color32::from_rgb(r, g, b)),
    );
}

/// A vertical colour bar from `lo` (bottom) to `hi` (top) with round ticks, its bar at `top_left`
/// and `height` points tall: the exported figures' bar ([`crate::render::colorbar_drawing`]),
/// painted from the same display list.
pub fn colorbar(
    ui: &egui::Ui,
    painter: &egui::Painter,
    cmap: Colormap,
    top_left: Pos2,
    height: f32,
    range: (f32, f32),
) {
    let drawing = crate::render::colorbar_drawing(range, cmap, height, 1.0, super::figure::theme_of(ui));
    let overhang = (drawing.height - height) / 2.0;
    super::figure::paint_drawing(painter, &drawing, pos2(top_left.x, top_left.y - overhang));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_end_in_an_ellipsis_within_their_room_and_short_ones_stay_whole() {
        let ctx = egui::Context::default();
        let font = FontId::proportional(14.0);
        let mut output = ctx.run_ui(egui::RawInput::default(), |ui| {
            let long = fitted_label(ui.painter(), "internationalisation", &font, Color32::WHITE, 60.0);
            let last = long.rows.last().and_then(|r| r.row.glyphs.last()).map(|g| g.chr);
            assert!(long.elided && last == Some('…'), "cut with an ellipsis: {last:?}");
            assert!(long.size().x <= 61.0, "{}", long.size().x);
            assert!(!fitted_label(ui.painter(), "cat", &font, Color32::WHITE, 60.0).elided);
        });
        output.textures_delta.clear(); // no renderer here to take the font atlas
    }

    #[test]
    fn cells_and_screen_positions_map_both_ways() {
        let geo = MatrixGeometry { cell: 10.0, label_px: 9.0, row_w: 30.0, col_h: 40.0, rows: 3, cols: 4 };
        let cells = geo.cells(pos2(100.0, 200.0));
        assert_eq!(cells, Rect::from_min_size(pos2(130.0, 240.0), vec2(40.0, 30.0)));
        let r = geo.screen_from_cell(cells, 2, 3);
        assert_eq!(geo.cell_from_screen(cells, r.center()), Some((2, 3)));
        assert_eq!(geo.cell_from_screen(cells, pos2(0.0, 0.0)), None);
    }
}
