//! The window's layout: every view's state (`Views`), the panels around the central area, the
//! view tabs, and which view draws there — the app's own views (`views/`) and the features'
//! (`FeatureViews`, the list of feature views and the figures they export). Views read
//! [`ViewData`] and push [`Command`]s; none of them imports this file.

use egui::RichText;

use super::command::{Command, Commands};
use super::data::ViewData;
use super::state::{Settings, Source, View};
use super::views::{
    export_dialog, head_view, heatmap_view, input_bar, model_view, neuron_view, pe_view, side_panel, stats_view,
};
use super::{attribution, compare, experts, graph, lens, patching, rollout};
use crate::export::Figure;

/// Each view's own state: caches of what it draws, text being typed.
pub struct Views {
    /// The sentence boxes.
    pub input: input_bar::InputBar,
    /// Model, interventions or playground, layer and head pickers, appearance.
    pub side: side_panel::SidePanel,
    /// The export window.
    pub export: export_dialog::ExportDialog,
    /// Head view: line pictures.
    pub head: head_view::HeadView,
    /// Model view: one texture per layer × head.
    pub model: model_view::ModelView,
    /// Heatmap view: the texture of the shown matrix.
    pub heatmap: heatmap_view::HeatmapView,
    /// Positional-encoding view: encodings and their textures.
    pub pe: pe_view::PeView,
    /// Statistics view: the grid texture.
    pub stats: stats_view::StatsView,
    /// Continue the text and step through what the model wrote.
    pub generation: crate::app::generation::panel::GenerationPanel,
    /// The features' views (rollout, compare, lens, attribution, graph).
    pub features: FeatureViews,
    /// The training lab's panel: the typed save folder.
    pub train: crate::app::lab::panel::TrainPanel,
}

impl Views {
    /// The views of a fresh window; `model_dir` fills the model box.
    pub fn new(settings: &Settings, model_dir: &std::path::Path) -> Self {
        Self {
            input: input_bar::InputBar::default(),
            side: side_panel::SidePanel::new(model_dir, &settings.playground),
            export: export_dialog::ExportDialog::default(),
            head: head_view::HeadView::default(),
            model: model_view::ModelView::default(),
            heatmap: heatmap_view::HeatmapView::default(),
            pe: pe_view::PeView::default(),
            stats: stats_view::StatsView::default(),
            generation: crate::app::generation::panel::GenerationPanel::default(),
            features: FeatureViews::default(),
            train: crate::app::lab::panel::TrainPanel::default(),
        }
    }

    /// Draws the panels and the current view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        self.input.ui(ui, data, commands);
        self.side.ui(ui, data, commands);
        status_bar_ui(ui, data);
        let writes = crate::app::generation::panel::GenerationPanel::shown(data);
        if data.features.lab.open {
            // One column on the right: the lab, and Continue folded under it (the views keep half
            // the window).
            self.train.ui(ui, data, commands, writes.then_some(&mut self.generation));
        } else if writes {
            // Narrow until something is written or steered; wider for the unsteered and the steered
            // text side by side.
            let steered = data.generation.is_some_and(|g| g.interventions.steer.is_some());
            let width = if steered {
                380.0
            } else if data.generation.is_some() || data.settings.steer.on {
                270.0
            } else {
                180.0
            };
            egui::Panel::right("generation").resizable(false).exact_size(width).show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.generation.ui(ui, data, commands));
            });
        }
        egui::CentralPanel::default_margins().show(ui, |ui| self.central_ui(ui, data, commands));
    }

    /// Draws the windows over the panels (the export window): after the panels' commands are
    /// handled, so a window opened by a click shows in the same frame.
    pub fn windows_ui(&mut self, ctx: &egui::Context, data: &ViewData<'_>, commands: &mut Commands) {
        if self.export.open {
            self.export.ui(ctx, data, commands);
        }
    }

    /// The central area: view tabs, then the chosen view (or why there is nothing to show).
    fn central_ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let settings = data.settings;
        // Wrapped: the tabs, Export… and Words stay reachable in a narrow window.
        ui.horizontal_wrapped(|ui| {
            // The experts tab only for a mixture of experts.
            let moe = data.model.is_some_and(|m| m.experts.is_some());
            for view in View::ALL.into_iter().filter(|v| *v != View::Experts || moe || settings.view == View::Experts) {
                let tab = ui.selectable_label(settings.view == view, RichText::new(view.label()).strong());
                if tab.clicked() && settings.view != view {
                    commands.push(Command::Set(super::command::Setting::View(view)));
                    // The neuron view opens on the query pinned in the head view, if any.
                    if let (View::Neuron, Some((crate::render::Side::Query, pos))) = (view, data.pinned) {
                        commands.push(Command::Set(super::command::Setting::NeuronQuery(pos)));
                    }
                }
            }
            ui.separator();
            let enabled = (data.run.is_some() || !settings.view.needs_run()) && !data.exporting;
            if ui
                .add_enabled(enabled, egui::Button::new("Export…"))
                .on_hover_text("Save the current view as PNG, SVG or PDF (or its numbers as CSV / JSON / NPZ), or copy it as an image")
                .clicked()
            {
                commands.push(Command::OpenExport);
            }
            if settings.view.needs_run() {
                let mut words = settings.words;
                let pooled = data.run.is_some_and(|r| r.long.is_some());
                ui.add_enabled(!pooled, egui::Checkbox::new(&mut words, "Words"))
                    .on_hover_text(
                        "Merge word pieces (##, Ġ, ▁) into words: attention to a word is the sum over its pieces, \
                         from a word the mean (Clark et al. 2019); rows still sum to 1",
                    )
                    .on_disabled_hover_text("A long input is shown pooled into spans of tokens: words do not apply");
                if words != settings.words {
                    commands.push(Command::Set(super::command::Setting::Words(words)));
                }
                if data.stack.is_some() {
                    stack_switch_ui(ui, settings, commands);
                }
            }
        });
        ui.separator();
        if settings.view == View::Positions {
            self.pe.ui(ui, data, commands);
            return;
        }
        shown_model_banner(ui, data, commands);
        if let Some(note) = data.stack_note {
            ui.colored_label(ui.visuals().warn_fg_color, note);
        }
        if data.run.is_none() {
            ui.vertical_centered(|ui| {
                ui.add_space(40.0);
                if let Some(err) = data.run_error {
                    ui.colored_label(ui.visuals().error_fg_color, err);
                } else if let (None, None, Some(err), Source::Pretrained) =
                    (data.model, data.loading, data.load_error, settings.source)
                {
                    // No model to run (e.g. the embedded ones not found): why, and no spinner.
                    ui.colored_label(ui.visuals().error_fg_color, err);
                    ui.label("Load a model folder in the side panel, or choose Playground, which needs no files.");
                } else {
                    ui.spinner();
                    ui.label(if data.loading.is_some() {
                        "Loading the model…"
                    } else if data.merging && settings.words {
                        "Merging word pieces into words…"
                    } else if data.merging {
                        "Taking the chosen attention…"
                    } else {
                        "Running the model…"
                    });
                }
            });
            return;
        }
        match settings.view {
            View::Head => self.head.ui(ui, data, commands),
            View::Model => self.model.ui(ui, data, commands),
            View::Heatmap => self.heatmap.ui(ui, data, commands),
            View::Neuron => neuron_view::neuron_view_ui(ui, data, commands),
            View::Stats => self.stats.ui(ui, data, commands),
            view => {
                self.features.ui(view, ui, data, commands);
            }
        }
    }
}

/// The Encoder / Decoder / Cross switch of an encoder–decoder: which attention every view and
/// export shows.
fn stack_switch_ui(ui: &mut egui::Ui, settings: &Settings, commands: &mut Commands) {
    use crate::analysis::Stack;
    ui.separator();
    ui.label("Attention:");
    for stack in Stack::ALL {
        let hint = match stack {
            Stack::Encoder => "Encoder self-attention: source tokens attending to source tokens",
            Stack::Decoder => "Decoder self-attention: target tokens attending to earlier target tokens (causal)",
            Stack::Cross => "Cross-attention: target tokens (left, rows) attending to source tokens (right, columns)",
        };
        if ui.selectable_label(settings.stack == stack, stack.label()).on_hover_text(hint).clicked()
            && settings.stack != stack
        {
            commands.push(Command::Set(super::command::Setting::Stack(stack)));
        }
    }
    if settings.words && settings.stack != Stack::Encoder {
        ui.label(RichText::new("(words: source only)").small().weak())
            .on_hover_text("Word pieces are merged on the encoder side; the target stays in tokens");
    }
}

/// Says which model the views show: the faithful pretrained model, a modified one (loudly, with
/// the way back), or the playground.
fn shown_model_banner(ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
    let Some(run) = data.run else { return };
    let visuals = ui.visuals().clone();
    let (text, color, reset) = match (&run.intervention, run.playground) {
        _ if data.settings.source == Source::File => (
            format!("ATTENTION FILE — {}: attention only, no model behind it", run.shown_name()),
            visuals.hyperlink_color,
            false,
        ),
        (Some(how), _) => {
            (format!("MODIFIED MODEL — {how} — not the faithful {}", run.shown_name()), visuals.warn_fg_color, true)
        }
        (None, true) => (format!("PLAYGROUND — random weights: {}", run.shown_name()), visuals.hyperlink_color, false),
        (None, false) => (format!("Faithful model: {}", run.shown_name()), visuals.weak_text_color(), false),
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(text).color(color).strong());
        if reset && ui.button("Reset to the faithful model").clicked() {
            let faithful = crate::model::Interventions::default();
            commands.push(Command::Set(super::command::Setting::Interventions(faithful)));
        }
        let pending = match data.settings.source {
            Source::Pretrained => run.playground,
            Source::Playground => !run.playground,
            Source::File => false,
        };
        if pending {
            ui.spinner();
        }
    });
    if run.intervention.is_some() && data.settings.source == Source::Pretrained {
        crate::app::intervene::panel::before_after_ui(ui, data);
    }
}

/// The bottom line: last message, timings.
pub fn status_bar_ui(ui: &mut egui::Ui, data: &ViewData<'_>) {
    egui::Panel::bottom("status").show(ui, |ui| {
        ui.horizontal(|ui| {
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(RichText::new(format!("frame {:.1} ms", data.frame_ms)).weak())
                    .on_hover_text("CPU time spent building this frame (smoothed)");
                if let Some(run) = data.run {
                    let from_file = data.settings.source == Source::File;
                    let source = if from_file {
                        "attention file"
                    } else if run.intervention.is_some() {
                        "modified model"
                    } else if run.playground {
                        "playground"
                    } else {
                        "faithful model"
                    };
                    let tokens = match &run.long {
                        Some(long) => long.describe(),
                        None => format!("{} tokens", run.tokens.len()),
                    };
                    let timing =
                        if from_file { String::new() } else { format!(" · model {:.0} ms", data.inference_ms) };
                    ui.label(
                        RichText::new(format!("{tokens} · {source}{timing} · {}", data.settings.view.label())).weak(),
                    );
                }
                if data.run_pending {
                    super::widgets::quiet_spinner(ui);
                }
                // The message takes what room is left (right to left: it ends next to the timings).
                if let Some(status) = data.status {
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

/// The features' views: what each draws is its feature's results (read through [`ViewData`]).
#[derive(Default)]
pub struct FeatureViews {
    /// Rollout and attention flow.
    pub rollout: rollout::view::RolloutView,
    /// The comparison: textures and the typed model folder.
    pub compare: compare::view::CompareView,
    /// The logit lens: the watch box.
    pub lens: lens::view::LensView,
    /// Logit attribution: the grid's texture.
    pub attribution: attribution::view::AttributionView,
    /// The contribution graph: the laid-out routes.
    pub graph: graph::view::GraphView,
    /// Activation patching: the grid's texture, the token boxes.
    pub patching: patching::view::PatchingView,
    /// The experts of a mixture of experts.
    pub experts: experts::view::ExpertsView,
}

impl FeatureViews {
    /// Draws `view` when it is a feature's; whether it is.
    pub fn ui(&mut self, view: View, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) -> bool {
        match view {
            View::Rollout => self.rollout.ui(ui, data, commands),
            View::Compare => self.compare.ui(ui, data, commands),
            View::Lens => self.lens.ui(ui, data, commands),
            View::Attribution => self.attribution.ui(ui, data, commands),
            View::Graph => self.graph.ui(ui, data, commands),
            View::Patching => self.patching.ui(ui, data, commands),
            View::Experts => self.experts.ui(ui, data, commands),
            _ => return false,
        }
        true
    }
}

/// The figure a feature's view exports, made of what it shows (None: `view` is not a feature's
/// own figure).
/// `selection`: the layer and heads shown.
pub fn figure(view: View, data: &ViewData<'_>, selection: (usize, &[usize])) -> Option<Figure> {
    let features = data.features;
    Some(match view {
        View::Rollout => features.flow.figure(data, selection),
        View::Compare => features.compare.figure(data, selection),
        View::Lens => features.lens.figure(data),
        View::Attribution => features.attribution.figure(data),
        View::Graph => features.graph.figure(data),
        View::Patching => features.patching.figure(data),
        View::Experts => features.experts.figure(data),
        _ => return None,
    })
}
