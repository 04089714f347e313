//! The egui backend of a figure's display list ([`crate::render::Drawing`]): the same rectangles,
//! frames, lines, text runs and cells that the PNG, SVG and PDF files draw, painted on screen.

use egui::epaint::{Mesh, TextShape};
use egui::{Color32, FontId, Pos2, Rect, Stroke, pos2, vec2};

use crate::render::{Anchor, Drawing, Item, Theme};

/// The figure theme matching the app's light or dark look.
pub fn theme_of(ui: &egui::Ui) -> Theme {
    if ui.visuals().dark_mode { Theme::Dark } else { Theme::Light }
}

/// The egui font of figure text `px` pixels tall (ascent to descent, as `render` measures it):
/// the figures' `DejaVu` Sans at its em size, so that it is as wide on screen as in the files.
pub fn figure_font_id(px: f32) -> FontId {
    FontId::new(crate::render::text::em_size(px), figure_font())
}

/// A display list's colour as egui's.
pub fn color([r, g, b, a]: [u8; 4]) -> Color32 {
    Color32::from_rgba_unmultiplied(r, g, b, a)
}

/// Paints `drawing` with its top-left corner at `origin`, one figure pixel per point (the
/// background is left to the `Ui`).
pub fn paint_drawing(painter: &egui::Painter, drawing: &Drawing, origin: Pos2) {
    paint_visible(painter, drawing, origin, painter.clip_rect(), None);
}

/// Paints what of `drawing` (top-left at `origin`) can reach `visible`: a long figure costs a
/// frame only what is on screen. `matrix`, when given, is painted stretched over the drawing's
/// first cell grid (a heatmap's matrix: one textured rectangle instead of a quad per cell).
pub fn paint_visible(
    painter: &egui::Painter,
    drawing: &Drawing,
    origin: Pos2,
    visible: Rect,
    matrix: Option<egui::TextureId>,
) {
    paint_items(painter, drawing.items.iter(), origin, visible, matrix);
}

/// [`paint_visible`] for some of a drawing's items (in their order): a caller that knows where
/// its many items are (a heatmap's numbers, by cell) passes only those in view.
pub fn paint_items<'a>(
    painter: &egui::Painter,
    items: impl Iterator<Item = &'a Item>,
    origin: Pos2,
    visible: Rect,
    mut matrix: Option<egui::TextureId>,
) {
    let at = |x: f32, y: f32| pos2(origin.x + x, origin.y + y);
    let rect_at = |[x, y, w, h]: [f32; 4]| Rect::from_min_size(at(x, y), vec2(w, h));
    for item in items {
        match item {
            Item::Rect { rect, color: c } if rect_at(*rect).intersects(visible) => {
                painter.rect_filled(rect_at(*rect), 0.0, color(*c));
            }
            Item::Frame { rect, color: c } if rect_at(*rect).intersects(visible) => {
                painter.rect_stroke(rect_at(*rect), 0.0, Stroke::new(1.0, color(*c)), egui::StrokeKind::Inside);
            }
            Item::Lines { width, strokes } => {
                for stroke in strokes {
                    let ends = [at(stroke.from.0, stroke.from.1), at(stroke.to.0, stroke.to.1)];
                    if !Rect::from_two_pos(ends[0], ends[1]).expand(*width).intersects(visible) {
                        continue;
                    }
                    for &(c, alpha) in &stroke.paints {
                        let c = color(c).gamma_multiply(alpha.clamp(0.0, 1.0));
                        painter.line_segment(ends, Stroke::new(*width, c));
                    }
                }
            }
            Item::Text(run) if text_reach(run, at(run.x, run.y)).intersects(visible) => {
                let font = figure_font_id(run.px);
                if run.up {
                    let (left, top) = run.top_left();
                    let galley = painter.layout_no_wrap(run.text.clone(), font, color(run.color));
                    let bottom = top + galley.size().x;
                    let shape = TextShape::new(at(left, bottom), galley, color(run.color))
                        .with_angle(-std::f32::consts::FRAC_PI_2);
                    painter.add(shape);
                } else {
                    let align = match run.anchor {
                        Anchor::Start => egui::Align2::LEFT_CENTER,
                        Anchor::Middle => egui::Align2::CENTER_CENTER,
                        Anchor::End => egui::Align2::RIGHT_CENTER,
                    };
                    painter.text(at(run.x, run.y), align, &run.text, font, color(run.color));
                }
            }
            Item::Cells(cells) => {
                let whole = Rect::from_min_size(
                    at(cells.x, cells.y),
                    vec2(cells.cols as f32 * cells.cell_w, cells.rows as f32 * cells.cell_h),
                );
                if let Some(texture) = matrix.take() {
                    let uv = Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0));
                    painter.image(texture, whole, uv, Color32::WHITE);
                    continue;
                }
                // One quad per visible cell in one mesh: a tall colour bar is hundreds of cells.
                let span = |lo: f32, hi: f32, start: f32, pitch: f32, n: usize| {
                    let first = ((lo - start) / pitch).floor().max(0.0) as usize;
                    let last = (((hi - start) / pitch).ceil().max(0.0) as usize).min(n);
                    first..last.max(first)
                };
                let rows = span(visible.top(), visible.bottom(), whole.top(), cells.cell_h, cells.rows);
                let cols = span(visible.left(), visible.right(), whole.left(), cells.cell_w, cells.cols);
                let mut mesh = Mesh::default();
                for row in rows {
                    for col in cols.clone() {
                        let min = at(cells.x + col as f32 * cells.cell_w, cells.y + row as f32 * cells.cell_h);
                        mesh.add_colored_rect(
                            Rect::from_min_size(min, vec2(cells.cell_w, cells.cell_h)),
                            color(cells.color(row, col)),
                        );
                    }
                }
                painter.add(mesh);
            }
            _ => {}
        }
    }
}

/// A rectangle sure to hold a text run anchored at `anchor` (screen): no glyph is wider than
/// its size, so this costs no measuring (a heatmap has a number in each of thousands of cells).
fn text_reach(run: &crate::render::TextRun, anchor: Pos2) -> Rect {
    let along = (run.text.chars().count() as f32 + 1.0) * run.px;
    let across = run.px;
    if run.up {
        Rect::from_center_size(anchor, vec2(across * 2.0, along * 2.0))
    } else {
        Rect::from_center_size(anchor, vec2(along * 2.0, across * 2.0))
    }
}

/// The name of the figures' font (the embedded `DejaVu` Sans) as an egui family.
pub const FIGURE_FONT: &str = "figure";

/// The figures' font family: labels drawn in it on screen are as wide as the exported figure's
/// layout measured them.
pub fn figure_font() -> egui::FontFamily {
    egui::FontFamily::Name(FIGURE_FONT.into())
}
