//! Attention rollout and attention flow (Abnar & Zuidema 2020) through the layers up to the chosen
//! one, averaging the selected heads, as a heatmap with exact values on hover.

use std::sync::Arc;

use egui::RichText;

use crate::app::command::Commands;
use crate::app::data::ViewData;
use crate::app::derive::DeriveKey;
use crate::app::rollout::FlowKey;
use crate::app::state::{RolloutMode, Settings, View};
use crate::app::widgets::matrix::{FitCache, MatrixSpec, MatrixTexture, data_range, fit_cell, matrix_ui, zoom_step};
use crate::export::Figure;

/// The rollout view's state: the texture (rollout is derived off the UI thread, flow on a thread
/// of its own).
#[derive(Default)]
pub struct RolloutView {
    texture: MatrixTexture,
    /// The cell side that fits the room.
    fit: FitCache,
}

impl RolloutView {
    /// Draws the rollout view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        rollout_view_ui(ui, &mut settings, data, (&mut self.texture, &mut self.fit), commands);
        commands.set_changed(data.settings, &settings);
    }
}

/// Draws the rollout view.
fn rollout_view_ui(
    ui: &mut egui::Ui,
    settings: &mut Settings,
    data: &ViewData<'_>,
    (texture, fit): (&mut MatrixTexture, &mut FitCache),
    commands: &mut Commands,
) {
    let Some(run) = data.run else { return };
    let a = &run.attention;
    if !a.is_square() {
        ui.label(RichText::new(format!("Rollout / flow of the {}", crate::analysis::Stack::Cross.describe())).strong());
        ui.colored_label(
            ui.visuals().warn_fg_color,
            crate::app::text::capitalised(crate::analysis::stack::CROSS_ROLLOUT_REFUSAL),
        );
        return;
    }
    let (layer_idx, heads) = data.selection();
    ui.horizontal_wrapped(|ui| {
        if let Some(stack) = data.stack {
            ui.label(RichText::new(format!("Of the {}:", stack.describe())).strong());
        }
        ui.selectable_value(&mut settings.rollout.mode, RolloutMode::Rollout, RichText::new("Rollout").strong())
            .on_hover_text("Products of the residual-augmented attention (A + I)/2 through the layers");
        ui.selectable_value(&mut settings.rollout.mode, RolloutMode::Flow, RichText::new("Flow").strong())
            .on_hover_text("Maximum flow through the layers, with the augmented attention as capacities");
        ui.separator();
        let heads_text = match heads.len() {
            1 => "1 head per layer".to_string(),
            n => format!("{n} heads averaged per layer"),
        };
        ui.label(RichText::new(format!("layers 0–{layer_idx} · {heads_text}")).strong());
        if let Some(run) = data.run {
            crate::app::widgets::pooled_note(
                ui,
                run,
                "This is the rollout (or flow) of the pooled matrices — the product of pooled matrices is not the \
                 pooling of the token-level rollout, so read it as an approximation; the token-level rollout (n³ \
                 per layer) is not computed for inputs this long.",
            );
        }
        ui.separator();
        if !heads.is_empty() && heads.len() < a.heads() {
            // Rollout is usually taken over every head: a partial selection is said, not silent.
            let names: Vec<String> = heads.iter().map(|h| format!("H{h}")).collect();
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!(
                    "only the heads selected in the side panel ({} of {}): {}",
                    heads.len(),
                    a.heads(),
                    names.join(", ")
                ),
            );
            if ui.button("Use all heads").on_hover_text("Select every head of the model").clicked() {
                settings.heads = vec![true; a.heads()];
            }
            ui.separator();
        }
        if ui
            .button("Show in the head view")
            .on_hover_text("Draw the rollout up to this layer as a pseudo-layer in the head view")
            .clicked()
        {
            settings.rollout.in_head_view = true;
            settings.view = View::Head;
        }
    });
    ui.label(
        RichText::new(
            "Row i: how much each input token (column) contributes to token i after this layer, counting the \
             residual connection as attention to oneself (Abnar & Zuidema 2020). Pick the layer and the heads in \
             the side panel.",
        )
        .small()
        .weak(),
    );
    if heads.is_empty() {
        ui.label("No head selected: pick heads in the side panel.");
        return;
    }
    let n = a.seq_len();
    let values: Vec<f32> = match settings.rollout.mode {
        RolloutMode::Rollout => {
            let key = DeriveKey::Rollout { view_id: data.view_id, heads: heads.clone() };
            let layers =
                crate::app::widgets::derived_or_ask(data, commands, &key, |d| d.rollout(data.view_id, &heads).cloned());
            let Some(layers) = layers else {
                crate::app::widgets::computing_ui(ui, &format!("the rollout through {} layers", a.layers()));
                return;
            };
            layers[layer_idx].clone()
        }
        RolloutMode::Flow => {
            if let Some(why) = crate::analysis::rollout::flow_refusal(n) {
                ui.colored_label(ui.visuals().warn_fg_color, crate::app::text::capitalised(&why));
                return;
            }
            let wanted = FlowKey { view_id: data.view_id, heads: heads.clone(), layer_idx };
            let Some(f) = data.features.flow.of(&wanted) else {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!(
                        "Computing attention flow: {} max-flow problems over {} layers…",
                        n * n,
                        layer_idx + 1
                    ));
                });
                return;
            };
            ui.label(
                RichText::new(format!(
                    "Flow computed in {:.0} ms ({} max-flow problems). Each value is the most attention that \
                     can flow from the input token to the token after this layer (at most 1; rows do not sum to 1).",
                    f.ms,
                    n * n
                ))
                .small(),
            );
            f.values.to_vec()
        }
    };
    let labels: Vec<String> = (0..n).map(|i| run.label(i)).collect();
    let range = (0.0, data_range(&values).1.max(1e-6));
    let what = if settings.rollout.mode == RolloutMode::Flow { "flow" } else { "rollout" };
    let hover = |r: usize, c: usize, v: f32| {
        format!("“{}” (#{r}) after layer {layer_idx}\nfrom input “{}” (#{c})\n{what} {v:.6}", labels[r], labels[c])
    };
    let key = crate::app::widgets::matrix::key_of(&(data.view_id, &heads, layer_idx, settings.rollout.mode));
    let spec = MatrixSpec {
        id: "rollout",
        values: &values,
        rows: n,
        cols: n,
        row_labels: &labels,
        col_labels: &labels,
        axes: ("token at that layer", "input token"),
        range,
        colormap: settings.colormap,
        cell: 0.0,
        hover: &hover,
        clickable: None,
        sink: None,
    };
    // Fit: the whole figure in the room (the default, until zoomed with Ctrl+scroll).
    let room = ui.available_size() - egui::vec2(2.0, 2.0);
    let fitted = fit.get(key, room, || fit_cell(ui, &spec, room));
    let spec = MatrixSpec { cell: settings.zoom.rollout.unwrap_or(fitted), ..spec };
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
        let shown = matrix_ui(ui, texture, key, &spec);
        if shown.response.hovered()
            && let Some(cell) = zoom_step(ui, spec.cell)
        {
            settings.zoom.rollout = Some(cell);
        }
    });
}

impl super::Feature {
    /// The figure the rollout view exports: the rollout of the chosen layer and heads, or the
    /// attention flow when that is shown.
    pub fn figure(&self, data: &ViewData<'_>, (layer_idx, heads): (usize, &[usize])) -> Figure {
        let flow = match self.of(&data.flow_key()) {
            Some(f) if data.settings.rollout.mode == RolloutMode::Flow => Some(Arc::clone(&f.values)),
            _ => None,
        };
        Figure::Rollout { layer_idx, head_idxs: heads.to_vec(), flow }
    }
}
