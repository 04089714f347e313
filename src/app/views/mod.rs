//! The app's views, one per file. Each gets ready-made plain data and draws it; expensive derived
//! things (textures, line meshes) live in [`Caches`], keyed by what they depend on.

pub mod compare_view;
pub mod export_dialog;
pub mod head_view;
pub mod heatmap_view;
pub mod input_bar;
pub mod interventions_panel;
pub mod matrix;
pub mod model_view;
pub mod neuron_view;
pub mod pe_view;
pub mod playground_panel;
pub mod rollout_view;
pub mod side_panel;
pub mod stats_view;

use egui::{Color32, RichText};

use super::app::Runtime;
use super::state::{Settings, Source, View};

/// Per-view caches.
#[derive(Default)]
pub struct Caches {
    /// Head view: filtered matrices and line meshes.
    pub head: head_view::HeadViewCache,
    /// Model view: one texture per layer × head.
    pub model: model_view::ModelViewCache,
    /// Heatmap view: the texture of the shown matrix.
    pub heatmap: heatmap_view::HeatmapCache,
    /// Positional-encoding view: encodings and their textures.
    pub pe: pe_view::PeCache,
    /// Statistics view: the statistics and the grid texture.
    pub stats: stats_view::StatsCache,
    /// Rollout view: rollout matrices and the texture.
    pub rollout: rollout_view::RolloutCache,
    /// Comparison view: textures.
    pub compare: compare_view::CompareCache,
}

/// `s` with its first letter upper-case (library messages start lower-case, view text does not).
pub fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// Colour of a head (distinct per head, colour-blind aware), as egui colour.
pub fn head_color(head_idx: usize, heads: usize) -> Color32 {
    let [r, g, b] = crate::render::head_colors(heads).get(head_idx).copied().unwrap_or([128, 128, 128]);
    Color32::from_rgb(r, g, b)
}

/// The central area: view tabs, then the chosen view (or why there is nothing to show).
pub fn central_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    // Wrapped: the tabs, Export… and Words stay reachable in a narrow window.
    ui.horizontal_wrapped(|ui| {
        for view in View::ALL {
            let tab = ui.selectable_value(&mut settings.view, view, RichText::new(view.label()).strong());
            // The neuron view opens on the query pinned in the head view, if any.
            if tab.clicked() && view == View::Neuron {
                if let Some((crate::render::Side::Query, pos)) = rt.pinned {
                    settings.neuron_query = pos;
                }
            }
        }
        ui.separator();
        let enabled = (rt.run.is_some() || !settings.view.needs_run()) && rt.exporting.is_none();
        if ui
            .add_enabled(enabled, egui::Button::new("Export…"))
            .on_hover_text("Save the current view as a PNG image (or its numbers as CSV / JSON / NPZ)")
            .clicked()
        {
            rt.export_open = true;
        }
        if settings.view.needs_run() {
            ui.checkbox(&mut settings.words, "Words").on_hover_text(
                "Merge word pieces (##, Ġ, ▁) into words: attention to a word is the sum over its pieces, \
                 from a word the mean (Clark et al. 2019); rows still sum to 1",
            );
        }
    });
    ui.separator();
    if settings.view == View::Positions {
        pe_view::pe_view_ui(ui, settings, rt);
        return;
    }
    shown_model_banner(ui, settings, rt);
    if rt.run.is_none() {
        ui.vertical_centered(|ui| {
            ui.add_space(40.0);
            if let Some(err) = &rt.run_error {
                ui.colored_label(ui.visuals().error_fg_color, err);
            } else {
                ui.spinner();
                ui.label(if rt.loading.is_some() { "Loading the model…" } else { "Running the model…" });
            }
        });
        return;
    }
    match settings.view {
        View::Head => head_view::head_view_ui(ui, settings, rt),
        View::Model => model_view::model_view_ui(ui, settings, rt),
        View::Heatmap => heatmap_view::heatmap_view_ui(ui, settings, rt),
        View::Neuron => neuron_view::neuron_view_ui(ui, settings, rt),
        View::Stats => stats_view::stats_view_ui(ui, settings, rt),
        View::Rollout => rollout_view::rollout_view_ui(ui, settings, rt),
        View::Compare => compare_view::compare_view_ui(ui, settings, rt),
        View::Positions => {}
    }
}

/// Says which model the views show: the faithful pretrained model, a modified one (loudly, with
/// the way back), or the playground.
fn shown_model_banner(ui: &mut egui::Ui, settings: &mut Settings, rt: &Runtime) {
    let Some(run) = &rt.run else { return };
    let visuals = ui.visuals().clone();
    let (text, color, reset) = match (&run.intervention, run.playground) {
        (Some(how), _) => {
            (format!("MODIFIED MODEL — {how} — not the faithful {}", run.model_name), visuals.warn_fg_color, true)
        }
        (None, true) => (format!("PLAYGROUND — random weights: {}", run.model_name), visuals.hyperlink_color, false),
        (None, false) => (format!("Faithful model: {}", run.model_name), visuals.weak_text_color(), false),
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(text).color(color).strong());
        if reset && ui.button("Reset to the faithful model").clicked() {
            settings.interventions = crate::model::Interventions::default();
        }
        let pending = match settings.source {
            Source::Pretrained => run.playground,
            Source::Playground => !run.playground,
        };
        if pending {
            ui.spinner();
        }
    });
}

/// The bottom line: last message, timings.
pub fn status_bar_ui(ui: &mut egui::Ui, settings: &Settings, rt: &Runtime) {
    egui::Panel::bottom("status").show(ui, |ui| {
        ui.horizontal(|ui| {
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(RichText::new(format!("frame {:.1} ms", rt.frame_ms)).weak())
                    .on_hover_text("CPU time spent building this frame (smoothed)");
                if let Some(run) = &rt.run {
                    let source = if run.intervention.is_some() {
                        "modified model"
                    } else if run.playground {
                        "playground"
                    } else {
                        "faithful model"
                    };
                    ui.label(
                        RichText::new(format!(
                            "{} tokens · {source} · model {:.0} ms · {}",
                            run.tokens.len(),
                            rt.inference_ms,
                            settings.view.label()
                        ))
                        .weak(),
                    );
                }
                if rt.requested_run_id > rt.run_id {
                    ui.spinner();
                }
                // The message takes what room is left (right to left: it ends next to the timings).
                if let Some(status) = &rt.status {
                    let color =
                        if status.is_error { ui.visuals().error_fg_color } else { ui.visuals().weak_text_color() };
                    ui.with_layout(egui::Layout::left_to_right(egui::Align::Center), |ui| {
                        ui.add(egui::Label::new(RichText::new(&status.text).color(color)).truncate())
                            .on_hover_text(&status.text);
                    });
                }
            });
        });
    });
}
