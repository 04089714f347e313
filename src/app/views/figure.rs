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
    FontId::new(crate::render::text::em_size(px), super::figure_font())
}

fn color([r, g, b, a]: [u8; 4]) -> Color32 {
    Color32::from_rgba_unmultiplied(r, g, b, a)
}

/// Paints `drawing` with its top-left corner at `origin`, one figure pixel per point (the
/// background is left to the `Ui`).
pub fn paint_drawing(painter: &egui::Painter, drawing: &Drawing, origin: Pos2) {
    let at = |x: f32, y: f32| pos2(origin.x + x, origin.y + y);
    for item in &drawing.items {
        match item {
            Item::Rect { rect: [x, y, w, h], color: c } => {
                painter.rect_filled(Rect::from_min_size(at(*x, *y), vec2(*w, *h)), 0.0, color(*c));
            }
            Item::Frame { rect: [x, y, w, h], color: c } => {
                let rect = Rect::from_min_size(at(*x, *y), vec2(*w, *h));
                painter.rect_stroke(rect, 0.0, Stroke::new(1.0, color(*c)), egui::StrokeKind::Inside);
            }
            Item::Lines { width, strokes } => {
                for stroke in strokes {
                    for &(c, alpha) in &stroke.paints {
                        let c = color(c).gamma_multiply(alpha.clamp(0.0, 1.0));
                        let ends = [at(stroke.from.0, stroke.from.1), at(stroke.to.0, stroke.to.1)];
                        painter.line_segment(ends, Stroke::new(*width, c));
                    }
                }
            }
            Item::Text(run) => {
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
                // One quad per cell in one mesh: a tall colour bar is hundreds of cells.
                let mut mesh = Mesh::default();
                for row in 0..cells.rows {
                    for col in 0..cells.cols {
                        let min = at(cells.x + col as f32 * cells.cell_w, cells.y + row as f32 * cells.cell_h);
                        mesh.add_colored_rect(
                            Rect::from_min_size(min, vec2(cells.cell_w, cells.cell_h)),
                            color(cells.color(row, col)),
                        );
                    }
                }
                painter.add(mesh);
            }
        }
    }
}
