//! The playground's hyperparameter panel: numbers are typed, choices clicked; any change re-runs
//! the model. An invalid combination is explained next to its control and the last valid model
//! stays on screen.

use egui::{RichText, TextEdit};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::state::Settings;
use crate::model::NormPlacement;
use crate::model::playground::{PeKind, Scaling};
use crate::model::{ModelError, PlaygroundConfig};

/// The typed numbers, kept as text so a half-typed value is not lost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlaygroundInputs {
    layers: String,
    heads: String,
    d_model: String,
    d_ff: String,
    base: String,
    scale: String,
    std: String,
    seed: String,
}

impl PlaygroundInputs {
    /// The text of each number of `cfg`.
    pub fn of(cfg: &PlaygroundConfig) -> Self {
        Self {
            layers: cfg.layers.to_string(),
            heads: cfg.heads.to_string(),
            d_model: cfg.d_model.to_string(),
            d_ff: cfg.d_ff.to_string(),
            base: cfg.pe_base.to_string(),
            scale: cfg.custom_scale.to_string(),
            std: cfg.init_std.to_string(),
            seed: cfg.seed.to_string(),
        }
    }

    /// `base` with the typed numbers put in, or the field that is not a number.
    fn parse(&self, base: &PlaygroundConfig) -> Result<PlaygroundConfig, (&'static str, String)> {
        fn num<T: std::str::FromStr>(field: &'static str, text: &str, what: &str) -> Result<T, (&'static str, String)> {
            text.trim().parse().map_err(|_| (field, format!("{:?} is not {what}", text.trim())))
        }
        let whole = "a whole number";
        Ok(PlaygroundConfig {
            layers: num("layers", &self.layers, whole)?,
            heads: num("heads", &self.heads, whole)?,
            d_model: num("d_model", &self.d_model, whole)?,
            d_ff: num("d_ff", &self.d_ff, whole)?,
            pe_base: num("base", &self.base, "a number")?,
            custom_scale: num("scale", &self.scale, "a number")?,
            init_std: num("std", &self.std, "a number")?,
            seed: num("seed", &self.seed, whole)?,
            ..base.clone()
        })
    }
}

/// Checks the edited hyperparameters: Ok(valid config) or the field at fault and why.
fn check(inputs: &PlaygroundInputs, edited: &PlaygroundConfig) -> Result<PlaygroundConfig, (&'static str, String)> {
    let cfg = inputs.parse(edited)?;
    match cfg.validate() {
        Ok(()) => Ok(cfg),
        Err(ModelError::Playground { field, message }) => Err((field, message)),
        Err(other) => Err(("size", other.to_string())),
    }
}

/// Grid rows of the panel, each number followed by its error when it is the one at fault.
struct Rows<'a> {
    error: Option<&'a (&'static str, String)>,
    /// Whether the error has been shown under a control.
    shown: bool,
}

impl Rows<'_> {
    /// A labelled text box for the number `field`; returns whether it was committed (Enter or
    /// focus lost, not every keystroke).
    fn number(&mut self, ui: &mut egui::Ui, label: &str, field: &str, hint: &str, text: &mut String) -> bool {
        let label = ui.label(label).on_hover_text(hint);
        let changed = ui.add(TextEdit::singleline(text).desired_width(70.0)).labelled_by(label.id).lost_focus();
        ui.end_row();
        self.error_under(ui, field);
        changed
    }

    /// The error of `field`, if that is the one at fault, under its control.
    fn error_under(&mut self, ui: &mut egui::Ui, field: &str) {
        if let Some((f, message)) = self.error
            && *f == field
        {
            ui.label("");
            ui.scope(|ui| {
                ui.set_max_width(170.0);
                let text = RichText::new(format!("⚠ {message}")).small().color(ui.visuals().error_fg_color);
                ui.add(egui::Label::new(text).wrap());
            });
            ui.end_row();
            self.shown = true;
        }
    }
}

/// The playground panel's state: the numbers as typed.
pub struct PlaygroundPanel {
    /// The typed numbers.
    pub inputs: PlaygroundInputs,
}

impl PlaygroundPanel {
    /// A panel showing the numbers of `cfg`.
    pub fn new(cfg: &PlaygroundConfig) -> Self {
        Self { inputs: PlaygroundInputs::of(cfg) }
    }

    /// Checks the typed numbers with the choices of `cfg`: the valid set to run, or the field at
    /// fault and why.
    pub fn check(&self, cfg: &PlaygroundConfig) -> Result<PlaygroundConfig, (&'static str, String)> {
        check(&self.inputs, cfg)
    }

    /// Draws the panel, editing `settings` (the side panel's copy); a change is checked and sent
    /// as [`Command::Playground`].
    pub fn ui(&mut self, ui: &mut egui::Ui, settings: &mut Settings, data: &ViewData<'_>, commands: &mut Commands) {
        playground_panel_ui(ui, settings, &mut self.inputs, data.playground_error, commands);
    }
}

/// Draws the panel and sends edits.
fn playground_panel_ui(
    ui: &mut egui::Ui,
    settings: &mut Settings,
    inputs: &mut PlaygroundInputs,
    error: Option<&(&'static str, String)>,
    commands: &mut Commands,
) {
    ui.label(RichText::new("Playground encoder").strong());
    ui.label(
        RichText::new(
            "A from-scratch transformer encoder with random weights: token embedding ×√d_model + positional \
             encoding, then layers of multi-head self-attention and a GELU feed-forward block, each with a \
             residual connection and layer norm.",
        )
        .small()
        .weak(),
    );
    let mut changed = false;
    let mut rows = Rows { error, shown: false };
    let cfg = &mut settings.playground;
    egui::Grid::new("playground-grid").num_columns(2).spacing([8.0, 4.0]).show(ui, |ui| {
        changed |= rows.number(ui, "layers", "layers", "Number of encoder blocks", &mut inputs.layers);
        changed |= rows.number(ui, "heads", "heads", "Attention heads per block", &mut inputs.heads);
        changed |= rows.number(ui, "d_model", "d_model", "Model width (divisible by heads)", &mut inputs.d_model);
        changed |= rows.number(ui, "d_ff", "d_ff", "Feed-forward width", &mut inputs.d_ff);

        let label = ui.label("encoding").on_hover_text("Positional encoding added to the token embeddings");
        egui::ComboBox::from_id_salt("playground-pe")
            .width(140.0)
            .selected_text(cfg.pe.label())
            .show_ui(ui, |ui| {
                for kind in PeKind::ALL {
                    changed |= ui.selectable_value(&mut cfg.pe, kind, kind.label()).changed();
                }
            })
            .response
            .labelled_by(label.id);
        ui.end_row();
        if matches!(cfg.pe, PeKind::Interleaved | PeKind::Concatenated) {
            let hint = "Wavelength base: 10000 in the paper, some courses use 1000";
            changed |= rows.number(ui, "PE base", "base", hint, &mut inputs.base);
        }

        ui.label("layer norm");
        ui.horizontal(|ui| {
            changed |= ui.selectable_value(&mut cfg.norm, NormPlacement::Post, "post-LN").changed();
            changed |= ui.selectable_value(&mut cfg.norm, NormPlacement::Pre, "pre-LN").changed();
        });
        ui.end_row();

        ui.label("scaling").on_hover_text("Factor on the attention scores q·k");
        ui.horizontal(|ui| {
            changed |= ui.selectable_value(&mut cfg.scaling, Scaling::InvSqrtDk, "1/√d_k").changed();
            changed |= ui.selectable_value(&mut cfg.scaling, Scaling::None, "none").changed();
            changed |= ui.selectable_value(&mut cfg.scaling, Scaling::Custom, "custom").changed();
        });
        ui.end_row();
        if cfg.scaling == Scaling::Custom {
            changed |= rows.number(ui, "scale factor", "scale", "Scores q·k are multiplied by this", &mut inputs.scale);
        }

        changed |= rows.number(ui, "init std", "std", "Standard deviation of the random weights", &mut inputs.std);
        let label = ui.label("seed");
        ui.horizontal(|ui| {
            changed |=
                ui.add(TextEdit::singleline(&mut inputs.seed).desired_width(70.0)).labelled_by(label.id).lost_focus();
            if ui.small_button("New seed").on_hover_text("Draw new random weights").clicked() {
                let seed: u64 = inputs.seed.trim().parse().unwrap_or(0);
                inputs.seed = seed.wrapping_add(1).to_string();
                changed = true;
            }
        });
        ui.end_row();
        rows.error_under(ui, "seed");
    });
    changed |= ui.checkbox(&mut cfg.causal, "Causal mask (each token sees only earlier ones)").changed();
    changed |= ui.checkbox(&mut cfg.cls, "Add [CLS] … [SEP] around the input").changed();
    if let Some((_, message)) = error {
        if !rows.shown {
            // Not about one control (the size estimate): under the panel.
            ui.colored_label(ui.visuals().error_fg_color, format!("⚠ {message}"));
        }
        ui.label(RichText::new("The last valid model stays on screen.").small().weak());
    }
    ui.separator();
    if ui
        .button("Train a transformer…")
        .on_hover_text(
            "The training lab: train a small transformer on a task (induction heads, sorting, the course's sentiment \
             classifier) and watch its attention learn in every view",
        )
        .clicked()
    {
        commands.push(Command::Train(crate::app::command::TrainCommand::Open));
    }
    if ui.small_button("Reset hyperparameters").clicked() {
        *cfg = PlaygroundConfig::default();
        *inputs = PlaygroundInputs::of(cfg);
        changed = true;
    }
    if changed {
        let checked = check(inputs, cfg);
        if let Ok(valid) = &checked {
            cfg.clone_from(valid);
        }
        commands.push(Command::Playground(checked));
    }
}
