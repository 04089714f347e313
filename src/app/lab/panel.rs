//! The training lab's panel: a task and hyperparameters, Train / Pause / Resume / New seed /
//! Save, the loss and metric curves, each head's induction score over training, a checkpoint
//! scrubber, and the course's three-variant experiment. Every other view shows the network being
//! trained (the app installs it as the model at each evaluation).

use std::fmt::Write as _;

use egui::{RichText, Ui};
use egui_plot::{Legend, Line, Plot, PlotPoints, Points};

use crate::app::widgets::{round_label, round_marks};
use crate::render::thinned;

use crate::app::command::{Command, Commands, TrainCommand};
use crate::app::data::ViewData;
use crate::app::lab::{Lab, LabState, VARIANTS};
use crate::model::NormPlacement;
use crate::model::playground::PeKind;
use crate::train::{Pooling, TaskKind, TrainConfig, TrainError};

/// Width of the panel.
pub const WIDTH: f32 = 330.0;

/// The side panel's width (its default): with it and the lab's panel, the views keep half the
/// window.
const SIDE_PANEL: f32 = 270.0;

/// The panel's own state: the folder typed for Save.
#[derive(Debug, Default)]
pub struct TrainPanel {
    /// The folder to save to, as typed.
    pub save_path: String,
}

impl TrainPanel {
    /// Draws the lab's panel (on the right), with Continue folded under it when the network
    /// writes (`generation`). Resizable up to what leaves the views half the window.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        data: &ViewData<'_>,
        commands: &mut Commands,
        generation: Option<&mut crate::app::generation::panel::GenerationPanel>,
    ) {
        let window = ui.ctx().content_rect().width();
        let widest = (window / 2.0 - SIDE_PANEL).max(WIDTH);
        let panel = egui::Panel::right("training-lab").resizable(true).default_size(WIDTH);
        panel.size_range(WIDTH.min(widest)..=widest).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                panel_ui(ui, data, &mut self.save_path, commands);
                if let Some(generation) = generation {
                    ui.separator();
                    let open = data.generation.is_some();
                    egui::CollapsingHeader::new("Continue the text (the trained network writes)")
                        .default_open(open)
                        .show(ui, |ui| generation.ui(ui, data, commands));
                }
            });
        });
    }
}

fn pe_label(kind: PeKind) -> &'static str {
    if kind == PeKind::Learned { "learned" } else { kind.label() }
}

fn panel_ui(ui: &mut Ui, data: &ViewData<'_>, save_path: &mut String, commands: &mut Commands) {
    ui.horizontal(|ui| {
        ui.heading("Training lab");
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            let hint =
                "Go back to the model and text the lab replaced; the run is kept (paused) until you reopen the lab";
            if ui.button("Close").on_hover_text(hint).clicked() {
                commands.push(Command::Train(TrainCommand::Close));
            }
            if data.features.lab.lab.is_some()
                && ui.button("Discard").on_hover_text("Drop the run: its network is gone unless you saved it").clicked()
            {
                commands.push(Command::Train(TrainCommand::Discard));
            }
        });
    });
    ui.label(
        RichText::new(
            "Train a small transformer on a generated task, on this computer's CPU. Every view (head view, model \
             view, heatmap, statistics, logit lens…) shows the network being trained, on the task's example input.",
        )
        .small()
        .weak(),
    );
    let mut settings = data.settings.clone();
    let error = settings_ui(ui, &mut settings.train);
    commands.set_changed(data.settings, &settings);
    let cfg = settings.train.clone();
    ui.add_space(4.0);
    controls_ui(ui, data.features.lab.lab.as_ref(), &cfg, error.is_none(), commands);
    if data.features.lab.lab.as_ref().is_some_and(|l| !l.experiment) {
        save_ui(ui, save_path, commands);
    }
    if let Some(lab) = data.features.lab.lab.as_ref() {
        if lab.cfg != cfg && !lab.experiment {
            ui.label(RichText::new("Settings changed: Train starts over with them.").small().weak());
        }
        ui.separator();
        progress_ui(ui, lab);
        curves_ui(ui, lab, data.exporting, commands);
        if !lab.experiment {
            scrubber_ui(ui, lab, commands);
        }
        if lab.experiment {
            experiment_table_ui(ui, lab);
        }
        if let Some(saved) = &lab.saved {
            match saved {
                Ok(dir) => ui.label(RichText::new(format!("Saved to {}", dir.display())).small()),
                Err(e) => ui.colored_label(ui.visuals().error_fg_color, format!("⚠ {e}")),
            };
        }
    }
}

/// The task and the hyperparameters; returns the error of the settings, if any (shown under the
/// control at fault).
fn settings_ui(ui: &mut Ui, cfg: &mut TrainConfig) -> Option<(&'static str, String)> {
    let before = cfg.task;
    ui.horizontal(|ui| {
        let label = ui.label("Task");
        egui::ComboBox::from_id_salt("train-task")
            .width(230.0)
            .selected_text(cfg.task.label())
            .show_ui(ui, |ui| {
                for task in TaskKind::ALL {
                    ui.selectable_value(&mut cfg.task, task, task.label());
                }
            })
            .response
            .labelled_by(label.id);
    });
    if cfg.task != before {
        // Each task starts from its own defaults (the seed stays).
        *cfg = TrainConfig { seed: cfg.seed, ..TrainConfig::for_task(cfg.task) };
    }
    let error = match cfg.validate() {
        Ok(()) => None,
        Err(TrainError::Config { field, message }) => Some((field, message)),
        Err(e) => Some(("size", e.to_string())),
    };
    let show_error = |ui: &mut Ui, field: &str| {
        if let Some((f, message)) = &error
            && *f == field
        {
            ui.label("");
            // Wrapped at the panel's edge: a grid cell would otherwise widen the panel past the window.
            let width = (ui.clip_rect().right() - ui.cursor().left() - 8.0).max(80.0);
            let text = RichText::new(format!("⚠ {message}")).small().color(ui.visuals().error_fg_color);
            ui.add_sized([width, 0.0], egui::Label::new(text).wrap());
            ui.end_row();
        }
    };
    egui::Grid::new("train-grid").num_columns(2).spacing([8.0, 3.0]).show(ui, |ui| {
        let whole = |ui: &mut Ui,
                     label: &str,
                     field: &str,
                     hint: &str,
                     value: &mut usize,
                     range: std::ops::RangeInclusive<usize>| {
            ui.label(label).on_hover_text(hint);
            ui.add(egui::DragValue::new(value).update_while_editing(false).range(range).speed(0.2));
            ui.end_row();
            show_error(ui, field);
        };
        whole(ui, "layers", "layers", "Transformer blocks", &mut cfg.layers, 1..=12);
        whole(ui, "heads", "heads", "Attention heads per block", &mut cfg.heads, 1..=64);
        whole(ui, "d_model", "d_model", "Model width (divisible by heads)", &mut cfg.d_model, 1..=1024);
        whole(ui, "MLP width", "mlp", "Feed-forward width; 0 = attention-only", &mut cfg.mlp, 0..=8192);
        match cfg.task {
            TaskKind::Induction => {
                whole(ui, "tokens", "vocab", "Random tokens the sequences are drawn from", &mut cfg.vocab, 2..=4096);
                whole(
                    ui,
                    "context",
                    "context",
                    "Sequence length: context/2 random tokens, then the same again",
                    &mut cfg.context,
                    4..=512,
                );
            }
            TaskKind::Sort | TaskKind::Reverse => {
                whole(
                    ui,
                    "context",
                    "context",
                    "Sequence length: (context − 1)/2 digits, =, the answer",
                    &mut cfg.context,
                    5..=129,
                );
            }
            TaskKind::ModAdd => whole(ui, "p", "vocab", "The modulus: a + b mod p", &mut cfg.vocab, 2..=997),
            TaskKind::Sentiment => {}
        }
        let label = ui.label("positions").on_hover_text("Positional encoding added to the token embeddings");
        egui::ComboBox::from_id_salt("train-pe")
            .width(150.0)
            .selected_text(pe_label(cfg.pe))
            .show_ui(ui, |ui| {
                for kind in PeKind::ALL {
                    ui.selectable_value(&mut cfg.pe, kind, pe_label(kind));
                }
            })
            .response
            .labelled_by(label.id);
        ui.end_row();
        if matches!(cfg.pe, PeKind::Interleaved | PeKind::Concatenated) {
            ui.label("PE base").on_hover_text("Wavelength base: 10000 in the paper");
            ui.add(egui::DragValue::new(&mut cfg.pe_base).update_while_editing(false).range(2.0..=1e6).speed(10.0));
            ui.end_row();
            show_error(ui, "base");
        }
        if cfg.task.is_classifier() {
            ui.label("pooling").on_hover_text("How the classifier turns its token vectors into one");
            ui.horizontal(|ui| {
                ui.selectable_value(&mut cfg.pooling, Pooling::Mean, "mean");
                ui.selectable_value(&mut cfg.pooling, Pooling::Cls, "[CLS]");
            });
            ui.end_row();
            ui.label("layer norm");
            ui.horizontal(|ui| {
                ui.selectable_value(&mut cfg.norm, NormPlacement::Post, "post-LN");
                ui.selectable_value(&mut cfg.norm, NormPlacement::Pre, "pre-LN");
            });
            ui.end_row();
        }
        ui.label("learning rate").on_hover_text("AdamW's learning rate");
        ui.add(
            egui::DragValue::new(&mut cfg.lr)
                .update_while_editing(false)
                .range(1e-6..=10.0)
                .speed(1e-4)
                .max_decimals(6),
        );
        ui.end_row();
        show_error(ui, "lr");
        whole(ui, "warm-up", "warmup", "Steps of linear learning-rate warm-up", &mut cfg.warmup, 0..=100_000);
        ui.label("weight decay").on_hover_text("AdamW's decoupled weight decay");
        ui.add(
            egui::DragValue::new(&mut cfg.weight_decay)
                .update_while_editing(false)
                .range(0.0..=10.0)
                .speed(0.01)
                .max_decimals(4),
        );
        ui.end_row();
        show_error(ui, "weight_decay");
        whole(ui, "batch", "batch", "Sequences per step", &mut cfg.batch, 1..=4096);
        whole(ui, "steps", "steps", "Steps to train", &mut cfg.steps, 1..=1_000_000);
        ui.label("seed").on_hover_text("Seed of the weights and of every batch");
        ui.add(egui::DragValue::new(&mut cfg.seed).update_while_editing(false).speed(0.2));
        ui.end_row();
        whole(
            ui,
            "evaluate every",
            "eval_every",
            "Evaluate, keep a checkpoint and refresh the views every N steps",
            &mut cfg.eval_every,
            1..=100_000,
        );
    });
    cfg.checkpoint_every = cfg.eval_every;
    if let Some((field, message)) = &error
        && *field == "size"
    {
        ui.colored_label(ui.visuals().error_fg_color, format!("⚠ {message}"));
    }
    error
}

fn controls_ui(ui: &mut Ui, lab: Option<&Lab>, cfg: &TrainConfig, valid: bool, commands: &mut Commands) {
    ui.horizontal_wrapped(|ui| {
        let start = |experiment| Command::Train(TrainCommand::Start { cfg: cfg.clone(), experiment });
        match lab.map(|l| &l.state) {
            Some(LabState::Running) => {
                if ui.button("Pause").clicked() {
                    commands.push(Command::Train(TrainCommand::Pause));
                }
                if ui.button("Stop").on_hover_text("End the run here: the network stays, to inspect and save").clicked() {
                    commands.push(Command::Train(TrainCommand::Stop));
                }
            }
            Some(LabState::Paused) => {
                if ui.button("▶ Resume").clicked() {
                    commands.push(Command::Train(TrainCommand::Resume));
                }
                if ui.button("Stop").on_hover_text("End the run here: the network stays, to inspect and save").clicked() {
                    commands.push(Command::Train(TrainCommand::Stop));
                }
                if ui.add_enabled(valid, egui::Button::new("Train from step 0")).clicked() {
                    commands.push(start(false));
                }
            }
            _ => {
                if ui.add_enabled(valid, egui::Button::new(RichText::new("▶ Train").strong())).clicked() {
                    commands.push(start(false));
                }
            }
        }
        if ui
            .add_enabled(valid, egui::Button::new("New seed"))
            .on_hover_text("Start over with the next seed: new weights, new batches")
            .clicked()
        {
            let next = TrainConfig { seed: cfg.seed.wrapping_add(1), ..cfg.clone() };
            commands.push(Command::Train(TrainCommand::Start { cfg: next, experiment: false }));
        }
        let can_save = lab.is_some_and(|l| !l.experiment);
        if ui
            .add_enabled(can_save, egui::Button::new("Save…"))
            .on_hover_text("Save the network as a model folder (config.json, model.safetensors, tokenizer.json) that attnviz and transformers open")
            .clicked()
        {
            commands.push(Command::Train(TrainCommand::BrowseSave));
        }
    });
    if cfg.task == TaskKind::Sentiment
        && ui
            .add_enabled(valid, egui::Button::new("Course experiment: 3 variants"))
            .on_hover_text(
                "Train mean pooling (no positions), mean pooling + sinusoidal positions and [CLS] + positions with \
                 the same seed and steps, and compare their held-out accuracies",
            )
            .clicked()
    {
        commands.push(Command::Train(TrainCommand::Start { cfg: cfg.clone(), experiment: true }));
    }
}

/// A typed folder and Save (beside the Save… dialog, for desktops without one).
fn save_ui(ui: &mut Ui, save_path: &mut String, commands: &mut Commands) {
    ui.horizontal(|ui| {
        let label = ui.label("Save to");
        ui.add(egui::TextEdit::singleline(save_path).desired_width(200.0).hint_text("folder"))
            .labelled_by(label.id)
            .on_hover_text(
                "A folder to create (or replace): config.json, model.safetensors, tokenizer.json, training.json",
            );
        let path = save_path.trim();
        if ui.add_enabled(!path.is_empty(), egui::Button::new("Save")).clicked() {
            commands.push(Command::Train(TrainCommand::Save(path.into())));
        }
    });
}

fn progress_ui(ui: &mut Ui, lab: &Lab) {
    let (done, total) = if lab.experiment {
        (lab.variant.min(VARIANTS.len()) * lab.cfg.steps + lab.step.min(lab.cfg.steps), VARIANTS.len() * lab.cfg.steps)
    } else {
        (lab.step, lab.cfg.steps)
    };
    let finished = matches!(lab.state, LabState::Finished);
    let done = if finished { total } else { done };
    let mut text = if lab.experiment {
        format!("variant {} of 3 · step {} / {}", (lab.variant + 1).min(3), lab.step, lab.cfg.steps)
    } else {
        format!("step {done} / {total}")
    };
    if lab.running() && lab.steps_per_s > 0.0 {
        let _ = write!(text, " · {:.0} steps/s", lab.steps_per_s);
        if let Some(eta) = lab.eta_seconds() {
            let _ = write!(text, " · ETA {eta:.0} s");
        }
    }
    ui.add(egui::ProgressBar::new(done as f32 / total.max(1) as f32).text(text));
    match &lab.state {
        LabState::Paused => {
            ui.label("Paused.");
        }
        LabState::Finished => {
            ui.label(format!("Done: {total} steps in {:.0} s.", lab.elapsed().as_secs_f64()));
        }
        LabState::Stopped => {
            ui.label(format!("Stopped at step {}.", lab.step));
        }
        LabState::Failed(message) => {
            ui.colored_label(ui.visuals().error_fg_color, format!("⚠ {message}"));
        }
        LabState::Running => {}
    }
    if let Some(e) = lab.evaluations.last() {
        let metric = match lab.cfg.task {
            TaskKind::Induction => format!("best head's induction score {:.2}", e.metric),
            _ => format!("held-out accuracy {:.1} %", 100.0 * e.metric),
        };
        let order = e.order_accuracy.map(|a| format!(" · order-dependent {:.1} %", 100.0 * a)).unwrap_or_default();
        ui.label(RichText::new(format!("step {}: {metric}{order}", e.step)).small());
    }
}

/// The lab's charts ([`super::figure::charts`], which Export writes too), drawn with `egui_plot`,
/// and *Export plots…*.
fn curves_ui(ui: &mut Ui, lab: &Lab, exporting: bool, commands: &mut Commands) {
    let charts = super::figure::charts(&lab.cfg, &lab.losses, &lab.evaluations);
    for (i, chart) in charts.iter().enumerate() {
        ui.label(RichText::new(&chart.title).small());
        let mut legend = Legend::default();
        if chart.series.len() > 2 {
            legend = legend.text_style(egui::TextStyle::Small).position(egui_plot::Corner::LeftTop);
        }
        let mut plot = Plot::new(format!("train-chart-{i}"))
            .height(if chart.series.len() > 2 { 170.0 } else { 130.0 })
            .legend(legend)
            .x_axis_label(chart.x_axis.clone())
            .y_axis_label(chart.y_axis.clone())
            .x_grid_spacer(round_marks(64.0))
            .y_grid_spacer(round_marks(28.0))
            .x_axis_formatter(round_label)
            .y_axis_formatter(round_label)
            .allow_drag(false)
            .allow_zoom(false)
            .allow_scroll(false)
            .allow_boxed_zoom(false);
        for &x in &chart.x_include {
            plot = plot.include_x(x);
        }
        for &y in &chart.y_include {
            plot = plot.include_y(y);
        }
        plot.show(ui, |p| {
            for series in &chart.series {
                let points = PlotPoints::from(thinned(&series.points));
                if series.dots {
                    p.points(Points::new(series.name.clone(), points).radius(2.5));
                } else {
                    p.line(Line::new(series.name.clone(), points));
                }
            }
        });
    }
    let can = !lab.losses.is_empty() && !exporting;
    if ui
        .add_enabled(can, egui::Button::new("Export plots…"))
        .on_hover_text("Save these plots as PNG, SVG or PDF, or their numbers (one row per step) as CSV / JSON / NPZ")
        .clicked()
    {
        commands.push(Command::Train(TrainCommand::ExportPlots));
    }
}

fn scrubber_ui(ui: &mut Ui, lab: &Lab, commands: &mut Commands) {
    if lab.checkpoints.len() < 2 {
        return;
    }
    ui.separator();
    ui.label(RichText::new("Checkpoints").strong());
    let last = lab.checkpoints.len() - 1;
    let mut index = lab.scrubbed.unwrap_or(last).min(last);
    ui.horizontal(|ui| {
        let step = lab.checkpoints[index];
        let slider = egui::Slider::new(&mut index, 0..=last).show_value(false).text(format!("step {step}"));
        let moved = ui
            .add(slider)
            .on_hover_text("Slide back and forth through training: every view shows the network at that checkpoint")
            .changed();
        if moved {
            commands.push(Command::Train(TrainCommand::Scrub(index)));
        }
        if ui.add_enabled(lab.scrubbed.is_some(), egui::Button::new("Live")).clicked() {
            commands.push(Command::Train(TrainCommand::Live));
        }
    });
    ui.label(
        RichText::new(format!(
            "{} kept, every {} steps (at most {}: older ones are thinned){}",
            lab.checkpoints.len(),
            lab.checkpoint_every,
            lab.checkpoint_limit,
            if lab.scrubbed.is_some() { format!(" · showing step {}", lab.shown_step) } else { String::new() }
        ))
        .small()
        .weak(),
    );
}

fn experiment_table_ui(ui: &mut Ui, lab: &Lab) {
    ui.separator();
    ui.label(RichText::new("The course's experiment (held-out sentences)").strong());
    egui::Grid::new("experiment").num_columns(3).striped(true).show(ui, |ui| {
        ui.label("variant");
        ui.label("accuracy");
        ui.label("order-dependent");
        ui.end_row();
        for (i, (name, _, _)) in VARIANTS.iter().enumerate() {
            ui.label(*name);
            match lab.variants.get(i).and_then(Option::as_ref) {
                Some(e) => {
                    ui.label(format!("{:.1} %", 100.0 * e.metric));
                    ui.label(e.order_accuracy.map_or_else(String::new, |a| format!("{:.1} %", 100.0 * a)));
                }
                None if i == lab.variant && lab.running() => {
                    ui.label("training…");
                    ui.label("");
                }
                None => {
                    ui.label("—");
                    ui.label("");
                }
            }
            ui.end_row();
        }
    });
    ui.label(
        RichText::new(
            "Order-dependent: “A , but B” reviews, whose words in the other order mean the opposite. Without positions \
             the model cannot tell them apart.",
        )
        .small()
        .weak(),
    );
}
