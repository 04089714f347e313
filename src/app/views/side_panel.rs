//! The side panel: model, layer and head pickers, theme and colours.

use std::path::PathBuf;

use egui::{Color32, RichText, Sense, Stroke, TextEdit};

use super::head_color;
use crate::app::Command;
use crate::app::app::Runtime;
use crate::app::state::{Settings, Source, ThemeChoice};
use crate::model::default_model_dir;
use crate::render::Colormap;

/// Draws the side panel.
pub fn side_panel_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    egui::Panel::left("side").resizable(true).default_size(270.0).show(ui, |ui| {
        egui::ScrollArea::vertical().show(ui, |ui| {
            source_ui(ui, settings, rt);
            ui.separator();
            match settings.source {
                Source::Pretrained => {
                    model_ui(ui, &settings.recent_models, rt);
                    ui.add_space(4.0);
                    super::interventions_panel::interventions_panel_ui(ui, settings, rt);
                }
                Source::Playground => super::playground_panel::playground_panel_ui(ui, settings, rt),
            }
            ui.separator();
            // The shape of what is shown: the run's (playground, fewer layers), else the model's.
            let shape = rt
                .run
                .as_ref()
                .map(|r| (r.attention.layers(), r.attention.heads()))
                .or_else(|| rt.model.as_ref().map(|m| (m.layers, m.heads)));
            if let Some((layers, heads)) = shape {
                layer_picker_ui(ui, settings, layers);
                ui.add_space(6.0);
                head_chips_ui(ui, settings, heads);
                ui.separator();
            }
            appearance_ui(ui, settings);
        });
    });
}

/// The one-click switch between the pretrained model and the playground.
fn source_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &Runtime) {
    ui.heading("Model");
    let name = rt.model.as_ref().map_or("Pretrained", |m| m.name.as_str());
    ui.horizontal_wrapped(|ui| {
        ui.selectable_value(&mut settings.source, Source::Pretrained, RichText::new(format!("Pretrained: {name}")))
            .on_hover_text("The loaded model with its trained weights");
        ui.selectable_value(&mut settings.source, Source::Playground, "Playground")
            .on_hover_text("A from-scratch encoder with random weights and hyperparameters you choose");
    });
}

fn model_ui(ui: &mut egui::Ui, recent: &[PathBuf], rt: &mut Runtime) {
    if let Some(m) = &rt.model {
        ui.label(RichText::new(&m.name).strong());
        ui.label(format!("{} · {} layers × {} heads × {} wide", m.family, m.layers, m.heads, m.hidden));
        ui.label(format!("up to {} tokens", m.max_positions));
        ui.label(RichText::new(m.dir.display().to_string()).small().weak()).on_hover_text("Loaded from this folder");
    }
    if let Some(dir) = &rt.loading {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!(
                "Loading {}…",
                dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
            ));
        });
    }
    if let Some(err) = &rt.load_error {
        ui.colored_label(ui.visuals().error_fg_color, err);
        if rt.model.is_some() {
            ui.label(RichText::new("The previous model is still loaded.").small());
        }
    }
    ui.add_space(4.0);
    let busy = rt.loading.is_some();
    if ui.add_enabled(!busy, egui::Button::new("Open model folder…")).on_hover_text("A Hugging Face model folder: config.json, tokenizer.json, model.safetensors. You can also drop a folder on the window, or type a hub id from the local cache.").clicked() {
        rt.commands.push(Command::BrowseModel);
    }
    let label = ui.label("Model folder or hub id");
    ui.horizontal(|ui| {
        let response =
            ui.add(TextEdit::singleline(&mut rt.model_path_input).desired_width(170.0)).labelled_by(label.id);
        let enter = response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if ui.add_enabled(!busy, egui::Button::new("Load")).clicked() || (enter && !busy) {
            rt.commands.push(Command::LoadModel(rt.model_path_input.trim().into()));
        }
    });
    if ui.add_enabled(!busy, egui::Button::new("Use embedded model").small()).clicked() {
        rt.commands.push(Command::LoadModel(default_model_dir()));
    }
    known_models_ui(ui, recent, rt, busy);
}

/// Recently opened models and the models in the local Hugging Face cache, each opened in a click.
fn known_models_ui(ui: &mut egui::Ui, recent: &[PathBuf], rt: &mut Runtime, busy: bool) {
    let current = rt.model.as_ref().map(|m| m.dir.clone());
    let mut open = None;
    egui::CollapsingHeader::new("Models on this computer").default_open(true).show(ui, |ui| {
        let others: Vec<&PathBuf> = recent.iter().filter(|m| Some(*m) != current.as_ref()).collect();
        if !others.is_empty() {
            ui.label(RichText::new("Recent").small().strong());
            for spec in others {
                let name =
                    spec.file_name().map_or_else(|| spec.display().to_string(), |n| n.to_string_lossy().into_owned());
                let shown = crate::model::hub::id_of(spec).unwrap_or(name);
                if ui
                    .add_enabled(!busy, egui::Button::new(shown).small())
                    .on_hover_text(spec.display().to_string())
                    .clicked()
                {
                    open = Some(spec.clone());
                }
            }
        }
        ui.label(RichText::new("Hugging Face cache").small().strong())
            .on_hover_text(crate::model::hub::cache_dir().display().to_string());
        match &rt.cached_models {
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(RichText::new("looking…").small());
                });
            }
            Some(models) if models.is_empty() => {
                ui.label(RichText::new("none found (models downloaded with Python appear here)").small().weak());
            }
            Some(models) => {
                for m in models {
                    let size = format!("{:.0} MB", m.bytes as f64 / 1e6);
                    let (detail, ok) = match &m.summary {
                        Ok(s) => (format!("{s} · {size}"), true),
                        Err(e) => (format!("cannot open: {e}"), false),
                    };
                    let button = egui::Button::new(&m.id).small();
                    let response = ui.add_enabled(!busy && ok, button).on_hover_text(&detail);
                    ui.label(RichText::new(detail).small().weak());
                    if response.clicked() {
                        open = Some(m.dir.clone());
                    }
                }
            }
        }
    });
    if let Some(spec) = open {
        rt.model_path_input = spec.display().to_string();
        rt.commands.push(Command::LoadModel(spec));
    }
}

fn layer_picker_ui(ui: &mut egui::Ui, settings: &mut Settings, layers: usize) {
    ui.label(RichText::new("Layer").strong());
    ui.horizontal_wrapped(|ui| {
        for l in 0..layers {
            ui.selectable_value(&mut settings.layer_idx, l, format!("L{l}")).on_hover_text(format!("Layer {l}"));
        }
    });
}

/// Head chips in each head's colour: click toggles, double-click solos.
pub fn head_chips_ui(ui: &mut egui::Ui, settings: &mut Settings, heads: usize) {
    ui.horizontal(|ui| {
        ui.label(RichText::new("Heads").strong());
        if ui.small_button("All").clicked() {
            settings.heads.iter_mut().for_each(|h| *h = true);
        }
        if ui.small_button("None").clicked() {
            settings.heads.iter_mut().for_each(|h| *h = false);
        }
    });
    ui.label(RichText::new("click toggles · double-click solos").small().weak());
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing = egui::vec2(3.0, 3.0);
        for h in 0..heads.min(settings.heads.len()) {
            let on = settings.heads[h];
            let color = head_color(h, heads);
            let text_color = if on { contrast_text(color) } else { ui.visuals().weak_text_color() };
            let button = egui::Button::new(RichText::new(format!("H{h}")).color(text_color).monospace())
                .fill(if on { color } else { Color32::TRANSPARENT })
                .stroke(Stroke::new(1.5, color))
                .sense(Sense::click());
            let response =
                ui.add(button).on_hover_text(format!("Head {h}: click to toggle, double-click to show only this head"));
            if response.double_clicked() || response.triple_clicked() {
                for (i, flag) in settings.heads.iter_mut().enumerate() {
                    *flag = i == h;
                }
            } else if response.clicked() {
                settings.heads[h] = !on;
            }
        }
    });
}

/// Black or white, whichever reads better on `bg`.
pub fn contrast_text(bg: Color32) -> Color32 {
    let luma = 0.299 * f32::from(bg.r()) + 0.587 * f32::from(bg.g()) + 0.114 * f32::from(bg.b());
    if luma > 140.0 { Color32::BLACK } else { Color32::WHITE }
}

fn appearance_ui(ui: &mut egui::Ui, settings: &mut Settings) {
    ui.label(RichText::new("Theme").strong());
    ui.horizontal(|ui| {
        ui.selectable_value(&mut settings.theme, ThemeChoice::System, "System");
        ui.selectable_value(&mut settings.theme, ThemeChoice::Dark, "Dark");
        ui.selectable_value(&mut settings.theme, ThemeChoice::Light, "Light");
    });
    ui.add_space(4.0);
    ui.horizontal(|ui| {
        let label = ui.label(RichText::new("Colour map").strong());
        egui::ComboBox::from_id_salt("colormap")
            .selected_text(settings.colormap.name())
            .show_ui(ui, |ui| {
                for cmap in Colormap::ALL {
                    ui.selectable_value(&mut settings.colormap, cmap, cmap.name());
                }
            })
            .response
            .labelled_by(label.id);
    });
}
