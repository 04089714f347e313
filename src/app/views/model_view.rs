//! The model view: every layer × head as a small heatmap, textures built once per run.

use egui::{Color32, RichText, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use crate::analysis::select::{causal_masked, downsample_max};
use crate::app::Command;
use crate::app::app::Runtime;
use crate::app::state::Settings;
use crate::render::{Colormap, cells_rgba};

/// Largest thumbnail texture side; longer inputs are max-pooled down to it.
const THUMB_TEXELS: usize = 128;

/// One texture per layer × head, rebuilt only when the run or the colour map changes.
#[derive(Default)]
pub struct ModelViewCache {
    key: Option<(u64, Colormap)>,
    /// Textures, `[layer * heads + head]`.
    textures: Vec<TextureHandle>,
    /// How many times the textures were built (tests check they are not rebuilt every frame).
    pub builds: usize,
}

impl ModelViewCache {
    fn update(&mut self, ctx: &egui::Context, run_id: u64, run: &crate::analysis::Run, colormap: Colormap) {
        if self.key == Some((run_id, colormap)) {
            return;
        }
        let a = &run.attention;
        self.textures = (0..a.layers())
            .flat_map(|l| (0..a.heads()).map(move |h| (l, h)))
            .map(|(l, h)| {
                let (cells, side) = if run.causal {
                    downsample_max(&causal_masked(a.head(l, h), a.seq_len()), a.seq_len(), THUMB_TEXELS)
                } else {
                    downsample_max(a.head(l, h), a.seq_len(), THUMB_TEXELS)
                };
                let rgba = cells_rgba(&cells, 0.0, 1.0, colormap);
                let image = egui::ColorImage::from_rgba_unmultiplied([side.max(1), side.max(1)], &rgba);
                ctx.load_texture(format!("model-view-{l}-{h}"), image, TextureOptions::NEAREST)
            })
            .collect();
        self.key = Some((run_id, colormap));
        self.builds += 1;
    }
}

/// Draws the grid; a click opens that head in the heatmap view.
pub fn model_view_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    let Some(run) = rt.run.clone() else { return };
    let a = &run.attention;
    let (layers, heads) = (a.layers(), a.heads());
    rt.caches.model.update(ui.ctx(), rt.view_id, &run, settings.colormap);
    ui.label(
        RichText::new(
            "Every layer (rows) × head (columns). Hover to name a head, click to open it in the heatmap view.",
        )
        .small()
        .weak(),
    );
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
            painter.text(pos2(x, rect.top() + 9.0), egui::Align2::CENTER_CENTER, format!("H{h}"), font.clone(), text);
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
                response
                    .widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, format!("Layer {l} head {h}")));
                let texture = &rt.caches.model.textures[l * heads + h];
                painter.image(
                    texture.id(),
                    cell,
                    egui::Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
                    Color32::WHITE,
                );
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
                    rt.commands.push(Command::OpenHead { layer_idx: l, head_idx: h });
                }
            }
        }
    });
}
