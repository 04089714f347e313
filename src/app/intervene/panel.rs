//! Interventions on the pretrained model: ablate heads, attention temperature, zeroed position
//! embeddings, a causal mask, only the first k layers, the knocked-out attention entries (set from
//! the head view and the heatmap) — and the way back to the faithful model.

use egui::{Color32, RichText, Role, Sense, Stroke, WidgetInfo, vec2};

use crate::app::data::ViewData;
use crate::app::state::Settings;

/// Draws the panel for the loaded model, editing `settings` (the side panel's copy).
pub fn interventions_panel_ui(ui: &mut egui::Ui, settings: &mut Settings, data: &ViewData<'_>) {
    let Some(model) = data.model else { return };
    let (layers, heads) = (model.layers, model.heads);
    let iv = &mut settings.interventions;
    let header =
        if iv.is_faithful() { "Interventions (none: faithful model)" } else { "Interventions — MODEL MODIFIED" };
    egui::CollapsingHeader::new(RichText::new(header).strong()).id_salt("interventions").default_open(false).show(
        ui,
        |ui| {
            ui.label(
                RichText::new("Change the forward pass without retraining; every view, export and dump says so.")
                    .small()
                    .weak(),
            );
            let label = ui.label("Temperature");
            ui.add(egui::Slider::new(&mut iv.temperature, 0.05..=5.0).logarithmic(true))
                .labelled_by(label.id)
                .on_hover_text("Scores are divided by this before the softmax: below 1 sharpens, above 1 flattens");
            ui.checkbox(&mut iv.zero_positions, "Zero the position embeddings");
            ui.checkbox(&mut iv.causal, "Causal mask (no looking ahead)");
            let mut limit = iv.first_layers.is_some();
            ui.horizontal(|ui| {
                if ui.checkbox(&mut limit, "Run only the first").changed() {
                    iv.first_layers = limit.then_some(layers.saturating_sub(1).max(1));
                }
                if let Some(k) = &mut iv.first_layers {
                    ui.add(egui::DragValue::new(k).update_while_editing(false).range(1..=layers));
                    ui.label("layers");
                }
            });
            ui.add_space(4.0);
            ui.label(RichText::new("Ablate heads (zero their output)").strong());
            ui.label(RichText::new("click a cell: rows are layers, columns heads").small().weak());
            ablation_grid(ui, iv, layers, heads);
            ui.add_space(4.0);
            knockout_list_ui(ui, iv);
            if let Some(s) = &iv.steer {
                ui.add_space(4.0);
                ui.label(
                    RichText::new(format!(
                        "Steered at layer {} by {} × (“{}” − “{}”): set in the Steer panel under Continue",
                        s.layer, s.scale, s.plus, s.minus
                    ))
                    .small(),
                );
            }
        },
    );
    if !settings.interventions.is_faithful() && ui.button("Reset to the faithful model").clicked() {
        settings.interventions = crate::model::Interventions::default();
    }
}

/// One small toggle per layer × head.
fn ablation_grid(ui: &mut egui::Ui, iv: &mut crate::model::Interventions, layers: usize, heads: usize) {
    let cell = ((ui.available_width() - 30.0) / heads as f32 - 2.0).clamp(8.0, 18.0);
    egui::Grid::new("ablation-grid").spacing([2.0, 2.0]).min_col_width(cell).show(ui, |ui| {
        ui.label("");
        for h in 0..heads {
            ui.label(RichText::new(h.to_string()).small().weak());
        }
        ui.end_row();
        for l in 0..layers {
            ui.label(RichText::new(format!("L{l}")).small().weak());
            for h in 0..heads {
                let on = iv.ablated.contains(&(l, h));
                let (rect, response) = ui.allocate_exact_size(vec2(cell, cell), Sense::click());
                let name = format!("Ablate layer {l} head {h}");
                response.widget_info(|| WidgetInfo::selected(Role::CheckBox, true, on, &name));
                let visuals = ui.visuals();
                let fill = if on { visuals.error_fg_color } else { Color32::TRANSPARENT };
                let stroke = if response.hovered() { visuals.strong_text_color() } else { visuals.weak_text_color() };
                ui.painter().rect(rect, 2.0, fill, Stroke::new(1.0, stroke), egui::StrokeKind::Inside);
                let response = response.on_hover_text(if on {
                    format!("Layer {l} head {h} is ablated: click to restore it")
                } else {
                    format!("Click to ablate layer {l} head {h}")
                });
                if response.clicked() {
                    if on {
                        iv.ablated.remove(&(l, h));
                    } else {
                        iv.ablated.insert((l, h));
                    }
                }
            }
            ui.end_row();
        }
    });
}

/// The knocked-out attention entries, each with a way to restore it.
fn knockout_list_ui(ui: &mut egui::Ui, iv: &mut crate::model::Interventions) {
    ui.label(RichText::new("Knocked-out attention").strong());
    if iv.knockout.is_empty() {
        ui.label(
            RichText::new(
                "none: right-click a cell of the heatmap (or Alt+click it), or a pinned token's line in the head view",
            )
            .small()
            .weak(),
        );
        return;
    }
    let mut restored = None;
    for k in &iv.knockout {
        ui.horizontal(|ui| {
            let layer = k.layer.map_or_else(|| "every layer".to_string(), |l| format!("layer {l}"));
            ui.label(RichText::new(format!("{layer}: query {} ↛ key {}", k.query, k.key)).small());
            if ui.small_button("✕").on_hover_text("Restore this entry").clicked() {
                restored = Some(*k);
            }
        });
    }
    if let Some(k) = restored {
        iv.knockout.remove(&k);
    }
    if ui.small_button("Restore every knockout").clicked() {
        iv.knockout.clear();
    }
}

/// The next token after the text on the faithful model and on the modified one (a language
/// model with interventions): the top candidates with their probabilities, side by side.
pub fn before_after_ui(ui: &mut egui::Ui, data: &ViewData<'_>) {
    let Some(model) = data.model.filter(|m| m.can_generate && !m.seq2seq) else { return };
    let key = super::EffectKey {
        model: model.dir.clone(),
        text: data.settings.text.clone(),
        interventions: data.settings.interventions.clone(),
    };
    let effect = &data.features.intervene.effect;
    let pretty = crate::analysis::tokens::pretty_label;
    let list = |c: &[(String, f32)]| {
        c.iter().map(|(t, p)| format!("“{}” {:.1} %", pretty(t), 100.0 * p)).collect::<Vec<_>>().join(" · ")
    };
    match effect.shown_for(&key) {
        Some(Ok(ba)) => {
            let changed = ba.faithful.first().map(|c| &c.0) != ba.modified.first().map(|c| &c.0);
            ui.label(
                RichText::new(format!(
                    "Next token after “{}”{}",
                    pretty(&ba.last),
                    if changed { " — the top prediction changed" } else { "" }
                ))
                .small()
                .strong(),
            );
            egui::Grid::new("before-after").num_columns(2).spacing([8.0, 0.0]).show(ui, |ui| {
                ui.label(RichText::new("faithful").small().weak());
                ui.label(RichText::new(list(&ba.faithful)).small());
                ui.end_row();
                ui.label(RichText::new("modified").small().weak());
                ui.label(RichText::new(list(&ba.modified)).small());
                ui.end_row();
            });
        }
        Some(Err(e)) => {
            ui.label(
                RichText::new(format!("Next token before and after: {e}")).small().color(ui.visuals().error_fg_color),
            );
        }
        None if effect.is_pending() => {
            ui.label(RichText::new("Next token before and after: computing…").small().weak());
        }
        None => {}
    }
}
