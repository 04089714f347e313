//! The Steer panel under Continue: activation addition (the stream entering a layer at the last
//! token of one text minus the same for another, times a scale, added at every position), and
//! the unsteered continuation of the same prompt beside a steered one.

use egui::RichText;

use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::generation::Generation;

/// Most a scale slider goes either way (the drag value beside it goes further).
const SCALE_SPAN: f32 = 8.0;

/// Draws the Steer panel for a decoder-only language model.
pub fn steer_ui(ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
    let Some(model) = data.model.filter(|m| m.can_generate && !m.seq2seq) else { return };
    let mut steer = data.settings.steer.clone();
    let layers = model.layers.max(1);
    let header = if data.settings.interventions.steer.is_some() { "Steer — ON" } else { "Steer" };
    egui::CollapsingHeader::new(RichText::new(header).strong()).id_salt("steer").default_open(steer.on).show(
        ui,
        |ui| {
            ui.label(
                RichText::new(
                    "Adds scale × (the stream entering the layer at the last token of “toward” − the same for \
                     “away from”) at every position: Continue writes with the steered model, and every view shows it.",
                )
                .small()
                .weak(),
            );
            ui.checkbox(&mut steer.on, "Steer the model");
            egui::Grid::new("steer-grid").num_columns(2).show(ui, |ui| {
                let label = ui.label("Toward");
                ui.add(egui::TextEdit::singleline(&mut steer.plus).desired_width(f32::INFINITY)).labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Away from");
                ui.add(egui::TextEdit::singleline(&mut steer.minus).desired_width(f32::INFINITY)).labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Layer");
                steer.layer = steer.layer.min(layers - 1);
                ui.add(egui::DragValue::new(&mut steer.layer).update_while_editing(false).range(0..=layers - 1))
                    .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Scale");
                ui.horizontal(|ui| {
                    // The slider and its number fit the panel.
                    ui.spacing_mut().slider_width = (ui.available_width() - 60.0).max(40.0);
                    ui.add(
                        egui::Slider::new(&mut steer.scale, -SCALE_SPAN..=SCALE_SPAN)
                            .clamping(egui::SliderClamping::Never),
                    )
                    .labelled_by(label.id)
                    .on_hover_text("Negative steers away from “toward”");
                });
                ui.end_row();
            });
            if !steer.scale.is_finite() {
                steer.scale = 1.0;
            }
            if steer.on {
                vector_status_ui(ui, data, &model.dir);
            }
        },
    );
    if steer != data.settings.steer {
        commands.push(Command::Set(Setting::Steer(steer)));
    }
}

/// Where the steering vector is: being made, made (its size, and what to know about it), failed.
fn vector_status_ui(ui: &mut egui::Ui, data: &ViewData<'_>, model: &std::path::Path) {
    let steer = &data.settings.steer;
    if steer.plus.trim().is_empty() || steer.minus.trim().is_empty() {
        ui.label(RichText::new("Type both texts to make the steering vector.").small());
        return;
    }
    let key = super::VectorKey {
        model: model.to_path_buf(),
        plus: steer.plus.clone(),
        minus: steer.minus.clone(),
        layer: steer.layer,
    };
    match data.features.intervene.vector.shown_for(&key) {
        None => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(RichText::new("making the steering vector…").small());
            });
        }
        Some(Err(e)) => {
            ui.label(RichText::new(format!("No steering: {e}")).small().color(ui.visuals().error_fg_color));
        }
        Some(Ok(made)) => {
            let norm = made.steering.vector.iter().map(|v| v * v).sum::<f32>().sqrt();
            ui.label(RichText::new(format!("Vector made at layer {}: length {norm:.2}", steer.layer)).small());
            for notice in &made.notices {
                ui.label(RichText::new(notice).small().color(ui.visuals().warn_fg_color));
            }
        }
    }
}

/// Beside a steered continuation: the same prompt continued by the model without the steering.
pub fn unsteered_ui(ui: &mut egui::Ui, data: &ViewData<'_>, g: &Generation) {
    if g.interventions.steer.is_none() || g.finished.is_none() || g.error.is_some() {
        return;
    }
    let Some(steered) = g.text.as_deref() else { return };
    let unsteered =
        data.features.intervene.unsteered.shown().filter(|(k, _)| k.prompt == g.prompt && k.max_new == g.max_new);
    ui.add_space(4.0);
    ui.label(RichText::new("Unsteered and steered, side by side").strong());
    ui.columns(2, |columns| {
        columns[0].label(RichText::new("unsteered").small().weak());
        match unsteered.map(|(_, v)| v) {
            Some(Ok(text)) => {
                columns[0].add(egui::Label::new(format!("{}{text}", g.prompt)).selectable(true));
            }
            Some(Err(e)) => {
                columns[0].label(RichText::new(e).small().color(columns[0].visuals().error_fg_color));
            }
            None => {
                columns[0].horizontal(|ui| {
                    ui.spinner();
                    ui.label(RichText::new("writing without the steering…").small());
                });
            }
        }
        columns[1].label(RichText::new("steered").small().weak());
        columns[1].add(egui::Label::new(format!("{}{steered}", g.prompt)).selectable(true));
    });
}
