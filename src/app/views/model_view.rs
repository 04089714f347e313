//! The model view: every layer × head as a small heatmap. The pictures are derived off the UI
//! thread; their textures are uploaded once per run and colour map.

use egui::{Color32, RichText, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::derive::DeriveKey;
use crate::render::Colormap;

/// The model view's state: one texture per layer × head.
#[derive(Default)]
pub struct ModelView {
    key: Option<(u64, Colormap)>,
    /// Textures, `[layer * heads + head]`.
    textures: Vec<TextureHandle>,
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
            let side = thumbs.side;
            self.textures = thumbs
                .rgba
                .iter()
                .enumerate()
                .map(|(i, rgba)| {
                    let image = egui::ColorImage::from_rgba_unmultiplied([side, side], rgba);
                    let name = format!("model-view-{}-{}", i / heads.max(1), i % heads.max(1));
                    ui.ctx().load_texture(name, image, TextureOptions::NEAREST)
                })
                .collect();
            self.key = Some(key);
            self.builds += 1;
        }
        let axis_w = 36.0;
        let thumb = ((ui.available_width() - axis_w - 20.0) / heads as f32 - 4.0).clamp(36.0, 160.0);
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            let size = vec2(axis_w + heads as f32 * (thumb + 4.0), 22.0 + layers as f32 * (thumb + 4.0));
            let (rect, _) = ui.allocate_exact_size(size, Sense::hover());
            let painter = ui.painter_at(rect);
            let text = ui.visuals().text_color();
            let font = egui::FontId::proportional(12.0);
            for h in 0..heads {
                let x = rect.left() + axis_w + h as f32 * (thumb + 4.0) + thumb / 2.0;
                painter.text(
                    pos2(x, rect.top() + 9.0),
                    egui::Align2::CENTER_CENTER,
                    format!("H{h}"),
                    font.clone(),
                    text,
                );
            }
            for l in 0..layers {
                let y = rect.top() + 22.0 + l as f32 * (thumb + 4.0);
                painter.text(
                    pos2(rect.left() + axis_w - 6.0, y + thumb / 2.0),
                    egui::Align2::RIGHT_CENTER,
                    format!("L{l}"),
                    font.clone(),
                    text,
                );
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
                    if let Some(texture) = self.textures.get(l * heads + h) {
                        painter.image(
                            texture.id(),
                            cell,
                            egui::Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
                            Color32::WHITE,
                        );
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
        });
    }
}
