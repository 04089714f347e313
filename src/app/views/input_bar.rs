//! The sentence boxes (A, and optional B) at the top, with notices about the input.

use egui::{RichText, TextEdit};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::state::{Source, View};

/// Longer texts are edited in a wrapped box of a few scrolled lines instead of one line.
const LONG_TEXT_BYTES: usize = 2000;

/// The sentence box's id, the same in both forms: typing past [`LONG_TEXT_BYTES`] keeps the focus
/// and the cursor.
const SENTENCE_A: &str = "sentence-a";

/// Most tokens one "Translate" writes.
pub const TRANSLATE_TOKENS: usize = 64;

/// The input panel's state.
pub struct InputBar {
    /// Whether sentence A still gets the keyboard focus (once, at launch).
    focus_once: bool,
    /// The long input's window start being edited (applied with "Show").
    window_edit: Option<usize>,
}

impl Default for InputBar {
    fn default() -> Self {
        Self { focus_once: true, window_edit: None }
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
                let response = if settings.text.len() > LONG_TEXT_BYTES {
                    // A pasted document: wrapped in a scrolled box of a few lines. egui draws a
                    // single line whole however little of it shows (a 50 KB text was most of each
                    // frame's software rendering); the rows of a wrapped text out of view are skipped.
                    egui::ScrollArea::vertical()
                        .id_salt("sentence-a-scroll")
                        .max_height(ui.text_style_height(&egui::TextStyle::Body) * 3.5)
                        .show(ui, |ui| {
                            let edit = TextEdit::multiline(&mut settings.text)
                                .id(egui::Id::unique(SENTENCE_A))
                                .desired_rows(3)
                                .desired_width(f32::INFINITY);
                            ui.add(edit).labelled_by(label.id)
                        })
                        .inner
                } else {
                    let edit = TextEdit::singleline(&mut settings.text)
                        .id(egui::Id::unique(SENTENCE_A))
                        .hint_text("Type a sentence — the views follow as you type")
                        .desired_width(f32::INFINITY);
                    ui.add(edit).labelled_by(label.id)
                };
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
            if settings.source == Source::File {
                ui.label(
                    RichText::new(
                        "An attention file is shown: the sentences are the model's input (Pretrained in the side panel).",
                    )
                    .small()
                    .weak(),
                );
            } else if settings.text.trim().is_empty() && settings.pair().is_none() {
                ui.label(
                    RichText::new("The sentence is empty: the model sees only its special tokens ([CLS] [SEP]).")
                        .italics(),
                );
            }
            if let Some(notice) = outside_vocabulary(data) {
                ui.colored_label(ui.visuals().warn_fg_color, notice);
            }
            if let Some(notice) = data.run.and_then(|run| run.truncation.as_ref()) {
                ui.colored_label(ui.visuals().warn_fg_color, format!("⚠ {notice}. Only the first tokens are shown."));
            }
            if let Some((run, long)) = data.run.and_then(|run| run.long.as_ref().map(|l| (run, l))) {
                long_input_ui(ui, data, run, long, &mut settings, &mut self.window_edit);
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

/// The notice and controls of an input too long to record at token level: what is shown
/// (overview or window), the window's place, and the pass's progress.
fn long_input_ui(
    ui: &mut egui::Ui,
    data: &ViewData<'_>,
    run: &crate::analysis::Run,
    long: &crate::analysis::long::LongInput,
    settings: &mut crate::app::state::Settings,
    window_edit: &mut Option<usize>,
) {
    use crate::analysis::long::{LongView, WINDOW_TOKENS};
    let layers = run.attention.layers();
    ui.colored_label(
        ui.visuals().warn_fg_color,
        format!(
            "⚠ {} tokens: more than the {} recorded at token level (side panel), so each head was computed once \
             and pooled — attention to a span is the sum over its tokens, from a span the mean over its tokens; \
             every row still sums to 1, nothing is dropped.",
            long.total, settings.record_tokens
        ),
    );
    ui.horizontal_wrapped(|ui| {
        ui.label("Show:");
        let spans = long.total.div_ceil(crate::analysis::long::OVERVIEW_SPANS).max(1);
        ui.selectable_value(&mut settings.long_view, LongView::Overview, LongView::Overview.label())
            .on_hover_text(format!("The whole input in spans of {spans} tokens"));
        ui.selectable_value(&mut settings.long_view, LongView::Window, LongView::Window.label()).on_hover_text(
            "Up to 256 consecutive tokens at token level (exact probabilities); the tokens before and after the window are one span each",
        );
        ui.separator();
        let last = long.total.saturating_sub(WINDOW_TOKENS);
        let mut start = window_edit.unwrap_or(long.window.start).min(last);
        let label = ui.label("Window from token");
        if ui.add(egui::DragValue::new(&mut start).update_while_editing(false).range(0..=last)).labelled_by(label.id).changed() {
            *window_edit = Some(start);
        }
        let end = (start + WINDOW_TOKENS).min(long.total) - 1;
        ui.label(format!("to {end}"));
        if ui.add_enabled(start != long.window.start, egui::Button::new("Show")).clicked() {
            settings.window_start = Some(start);
            settings.long_view = LongView::Window;
            *window_edit = None;
        }
        if ui.add_enabled(settings.window_start.is_some(), egui::Button::new("Last tokens")).clicked() {
            settings.window_start = None;
            settings.long_view = LongView::Window;
            *window_edit = None;
        }
    });
    if long.is_partial(layers) {
        let selected = settings.layer_idx;
        let waiting = if selected >= layers {
            format!(" Layer {selected} is not done yet: layer {} is shown until it is.", layers.saturating_sub(1))
        } else {
            String::new()
        };
        let text = format!(
            "Computing: {layers} of {} layers done ({:.0} s); the views show the layers done.{waiting}",
            long.layers_total,
            data.inference_ms / 1e3
        );
        ui.label(RichText::new(text).italics());
    }
}

/// For a network the lab trained, when words of the text became `[UNK]`: the notice naming the
/// words it reads.
pub fn outside_vocabulary(data: &ViewData<'_>) -> Option<String> {
    let hints = data.model?.hints.as_deref()?;
    if data.settings.source != Source::Pretrained {
        return None;
    }
    let unknown = hints.unknown_words(&data.settings.text);
    (unknown > 0).then(|| {
        format!(
            "⚠ {unknown} word{} outside this model's vocabulary became [UNK]: it reads only {}",
            if unknown == 1 { "" } else { "s" },
            hints.alphabet()
        )
    })
}
