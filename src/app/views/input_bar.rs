//! The sentence boxes (A, and optional B) at the top, with notices about the input.

use egui::{RichText, TextEdit};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::state::{Source, View};

/// Most tokens one "Translate" writes.
pub const TRANSLATE_TOKENS: usize = 64;

/// The input panel's state.
pub struct InputBar {
    /// Whether sentence A still gets the keyboard focus (once, at launch).
    focus_once: bool,
}

impl Default for InputBar {
    fn default() -> Self {
        Self { focus_once: true }
    }
}

impl InputBar {
    /// Draws the input panel.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let focus = std::mem::take(&mut self.focus_once);
        let mut settings = data.settings.clone();
        egui::Panel::top("input").show(ui, |ui| {
            ui.add_space(4.0);
            egui::Grid::new("sentences").num_columns(2).spacing([8.0, 4.0]).show(ui, |ui| {
                let label = ui.label(RichText::new("Sentence A").strong());
                let edit = TextEdit::singleline(&mut settings.text)
                    .hint_text("Type a sentence — the views follow as you type")
                    .desired_width(f32::INFINITY);
                let response = ui.add(edit).labelled_by(label.id);
                if focus {
                    response.request_focus();
                }
                ui.end_row();
                ui.checkbox(&mut settings.pair_enabled, "Sentence B")
                    .on_hover_text("Add a second sentence to make a sentence pair");
                if settings.pair_enabled {
                    let edit = TextEdit::singleline(&mut settings.text_pair)
                        .hint_text("Second sentence of the pair")
                        .desired_width(f32::INFINITY)
                        .id_salt("sentence-b");
                    ui.add(edit).on_hover_text("Sentence B");
                } else {
                    ui.label(RichText::new("(single sentence)").weak());
                }
                ui.end_row();
                if data.model.is_some_and(|m| m.seq2seq) && settings.source == Source::Pretrained {
                    target_row_ui(ui, data, &mut settings.target, commands);
                    ui.end_row();
                }
            });
            if settings.text.trim().is_empty() && settings.pair().is_none() {
                ui.label(
                    RichText::new("The sentence is empty: the model sees only its special tokens ([CLS] [SEP]).")
                        .italics(),
                );
            }
            if let Some(notice) = data.run.and_then(|run| run.truncation.as_ref()) {
                ui.colored_label(ui.visuals().warn_fg_color, format!("⚠ {notice}. Only the first tokens are shown."));
            }
            // A failed run is explained in the central area in its place; the positional-encoding
            // view shows no run, so it is said here.
            if let Some(err) = data.run_error.filter(|_| data.settings.view == View::Positions) {
                ui.colored_label(ui.visuals().error_fg_color, err);
            }
            ui.add_space(2.0);
        });
        commands.set_changed(data.settings, &settings);
    }
}

/// The Target box of an encoder–decoder (what its decoder reads; Sentence A is the source), with
/// "Translate" when the model has its language-model head.
fn target_row_ui(ui: &mut egui::Ui, data: &ViewData<'_>, target: &mut String, commands: &mut Commands) {
    let label = ui
        .label(RichText::new("Target").strong())
        .on_hover_text("What the decoder reads: its start token, then this text's tokens. Sentence A is the source.");
    ui.horizontal(|ui| {
        let can_translate = data.model.is_some_and(|m| m.can_translate);
        let writing = data.generation.is_some_and(|g| g.finished.is_none() && g.error.is_none());
        if can_translate {
            if writing {
                if ui.button("■ Stop").on_hover_text("Stop translating; what is written stays").clicked() {
                    commands.push(Command::StopGeneration);
                }
            } else if ui
                .button("Translate ▶")
                .on_hover_text("The model writes the target greedily from the source, token by token")
                .clicked()
            {
                commands.push(Command::Continue(TRANSLATE_TOKENS));
            }
        }
        let edit = TextEdit::singleline(target)
            .hint_text(if can_translate {
                "The target the decoder reads — type it, or press Translate"
            } else {
                "The target the decoder reads (this model has no language-model head to translate)"
            })
            .desired_width(f32::INFINITY)
            .id_salt("target");
        ui.add(edit).labelled_by(label.id);
    });
}
