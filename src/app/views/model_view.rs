//! The model view: every layer × head as a small heatmap. The pictures are derived off the UI
//! thread; their textures are uploaded once per run and colour map.

use egui::{Color32, RichText, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::derive::DeriveKey;
use crate::app::widgets::matrix::THUMB_RANGE;
use crate::render::Colormap;

/// The model view's state: the thumbnails of every layer × head, packed into as few textures as
/// the GPU allows (one draw call each: a software renderer pays per texture drawn).
#[derive(Default)]
pub struct ModelView {
    key: Option<(u64, Colormap)>,
    /// The packed textures.
    atlases: Vec<TextureHandle>,
    /// Where thumbnail `[layer * heads + head]` is: its texture and its rectangle there (UV).
    places: Vec<(usize, egui::Rect)>,
    /// How many times the textures were built (tests check they are not rebuilt every frame).
    pub builds: usize,
}

impl ModelView {
    /// Draws the grid; a click opens that head in the heatmap view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let Some(run) = data.run else { return };
        let settings = data.settings;
        let a = &run.attention;
        let (layers, heads) = (a.layers(), a.heads());
        if let Some(stack) = data.stack {
            // The switch above the views picks which of the three stacks the grid shows.
            let hint = match stack {
                crate::analysis::Stack::Cross => " — rows of each thumbnail: target tokens, columns: source tokens",
                _ => "",
            };
            ui.label(RichText::new(format!("All layers × heads of the {}{hint}", stack.describe())).strong());
        }
        ui.label(
            RichText::new(
                "Every layer (rows) × head (columns). Hover to name a head, click to open it in the heatmap view.",
            )
            .small()
            .weak(),
        );
        let cells = a.seq_len().max(a.keys());
        if cells > crate::app::derive::THUMB_TEXELS {
            let block = cells.div_ceil(crate::app::derive::THUMB_TEXELS);
            ui.label(
                RichText::new(format!(
                    "{cells} rows and columns drawn in {} pixels: each thumbnail pixel is the maximum of a block of up to \
                     {block} × {block} cells; the heatmap (click) shows every cell.",
                    crate::app::derive::THUMB_TEXELS
                ))
                .small(),
            );
        }
        crate::app::widgets::pooled_note(ui, run, "");
        let key = (data.view_id, settings.colormap);
        if self.key != Some(key) {
            let derive = DeriveKey::Thumbnails { view_id: data.view_id, colormap: settings.colormap };
            let thumbs =
                crate::app::widgets::derived_or_ask(data, commands, &derive, |d| d.thumbnails(key.0, key.1).cloned());
            let Some(thumbs) = thumbs else {
                crate::app::widgets::computing_ui(ui, "the thumbnails");
                return;
            };
            let max_side = ui.ctx().input(|i| i.max_texture_side);
            (self.atlases, self.places) = pack(ui.ctx(), &thumbs.rgba, thumbs.side, max_side);
            self.key = Some(key);
            self.builds += 1;
        }
        let (axis_w, head_h) = (36.0, 22.0);
        // Fit (the default, until zoomed): every layer and head in the room, thumbnails of at
        // least THUMB_RANGE's smallest side.
        let room = ui.available_size() - vec2(axis_w + 20.0, head_h + 40.0);
        let fitted = (room.x / heads.max(1) as f32 - 4.0).min(room.y / layers.max(1) as f32 - 4.0);
        let fitted = if fitted.is_finite() { fitted.clamp(THUMB_RANGE.0, THUMB_RANGE.1) } else { THUMB_RANGE.1 };
        let mut zoom = settings.zoom.model;
        crate::app::widgets::matrix::zoom_row(ui, &mut zoom, fitted, (THUMB_RANGE, "thumbnail size"));
        let thumb = zoom.unwrap_or(fitted);
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            let size = vec2(axis_w + heads as f32 * (thumb + 4.0), head_h + layers as f32 * (thumb + 4.0));
            let (rect, grid) = ui.allocate_exact_size(size, Sense::hover());
            if grid.contains_pointer() {
                zoom = crate::app::widgets::matrix::zoom_step_in(ui, thumb, THUMB_RANGE).or(zoom);
            }
            let painter = ui.painter_at(rect);
            let text = ui.visuals().text_color();
            let font = egui::FontId::proportional(12.0);
            for l in 0..layers {
                let y = rect.top() + head_h + l as f32 * (thumb + 4.0);
                for h in 0..heads {
                    let cell = egui::Rect::from_min_size(
                        pos2(rect.left() + axis_w + h as f32 * (thumb + 4.0), y),
                        vec2(thumb, thumb),
                    );
                    if !ui.is_rect_visible(cell) {
                        continue;
                    }
                    let id = ui.scope_id().with(("model-cell", l, h));
                    let response = ui.interact(cell, id, Sense::click());
                    response.widget_info(|| {
                        egui::WidgetInfo::labeled(egui::Role::Button, true, format!("Layer {l} head {h}"))
                    });
                    if let Some(&(atlas, uv)) = self.places.get(l * heads + h) {
                        painter.image(self.atlases[atlas].id(), cell, uv, Color32::WHITE);
                    }
                    let selected = l == settings.layer_idx && settings.heads.get(h).copied().unwrap_or(false);
                    if response.hovered() {
                        painter.rect_stroke(
                            cell,
                            0.0,
                            Stroke::new(2.0, ui.visuals().strong_text_color()),
                            egui::StrokeKind::Outside,
                        );
                    } else if selected {
                        painter.rect_stroke(
                            cell,
                            0.0,
                            Stroke::new(1.0, ui.visuals().selection.bg_fill),
                            egui::StrokeKind::Outside,
                        );
                    }
                    let response =
                        response.on_hover_text(format!("Layer {l} · head {h} — click to open in the heatmap view"));
                    if response.clicked() {
                        commands.push(Command::OpenHead { layer_idx: l, head_idx: h });
                    }
                }
            }
            // The heads' names along the top and the layers' down the left stay in view while the
            // grid scrolls, each over a strip of the panel's colour (the thumbnails scroll under).
            let clip = ui.clip_rect();
            let bg = crate::app::widgets::panel_colour(ui.visuals());
            let top = rect.top().max(clip.top());
            let left = rect.left().max(clip.left());
            painter.rect_filled(egui::Rect::from_min_max(pos2(left, top), pos2(left + axis_w, clip.bottom())), 0.0, bg);
            for l in 0..layers {
                let y = rect.top() + head_h + l as f32 * (thumb + 4.0) + thumb / 2.0;
                let at = pos2(left + axis_w - 6.0, y);
                painter.text(at, egui::Align2::RIGHT_CENTER, format!("L{l}"), font.clone(), text);
            }
            painter.rect_filled(
                egui::Rect::from_min_max(pos2(clip.left(), top), pos2(clip.right(), top + head_h)),
                0.0,
                bg,
            );
            for h in 0..heads {
                let x = rect.left() + axis_w + h as f32 * (thumb + 4.0) + thumb / 2.0;
                if x < left + axis_w {
                    continue; // under the layers' names
                }
                let at = pos2(x, top + 9.0);
                painter.text(at, egui::Align2::CENTER_CENTER, format!("H{h}"), font.clone(), text);
            }
        });
        commands.set_zoom(settings, |z| &mut z.model, zoom);
    }
}

/// Packs square thumbnails of `side` texels into textures of at most `max_side` texels a side, in
/// rows; where each went (its texture, its UV rectangle).
fn pack(
    ctx: &egui::Context,
    thumbs: &[Vec<u8>],
    side: usize,
    max_side: usize,
) -> (Vec<TextureHandle>, Vec<(usize, egui::Rect)>) {
    let side = side.max(1);
    let per_row = (max_side / side).max(1);
    let per_atlas = per_row * per_row;
    let mut atlases = Vec::new();
    let mut places = Vec::with_capacity(thumbs.len());
    for (a, chunk) in thumbs.chunks(per_atlas).enumerate() {
        // Near square: as many columns as rows.
        let cols = (chunk.len() as f64).sqrt().ceil() as usize;
        let rows = chunk.len().div_ceil(cols);
        let (w, h) = (cols * side, rows * side);
        let mut rgba = vec![0u8; w * h * 4];
        for (i, thumb) in chunk.iter().enumerate() {
            let (x0, y0) = ((i % cols) * side, (i / cols) * side);
            for y in 0..side {
                let from = &thumb[y * side * 4..(y + 1) * side * 4];
                let at = ((y0 + y) * w + x0) * 4;
                rgba[at..at + side * 4].copy_from_slice(from);
            }
            let uv = |x: usize, y: usize| pos2(x as f32 / w as f32, y as f32 / h as f32);
            places.push((a, egui::Rect::from_min_max(uv(x0, y0), uv(x0 + side, y0 + side))));
        }
        let image = egui::ColorImage::from_rgba_unmultiplied([w, h], &rgba);
        atlases.push(ctx.load_texture(format!("model-view-{a}"), image, TextureOptions::NEAREST));
    }
    (atlases, places)
}
