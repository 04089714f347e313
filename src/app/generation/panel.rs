//! Watch the model write: "Continue" lets a language model extend the text token by token (on the
//! worker thread, streamed into every view, stoppable); then step through what it wrote — each
//! written token pinned in the head view (its attention over everything before it), its step's
//! candidates as bars with their probabilities, and the tokens it attends to most.

use egui::{Color32, RichText};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::render::Side;

/// Most tokens one "Continue" may ask for.
const MAX_NEW: usize = 512;

/// The panel's own state: how many tokens to ask for, and the written token looked at.
pub struct GenerationPanel {
    /// Tokens the next "Continue" asks for.
    pub max_new: usize,
    /// The written token looked at, counted from 1 (0: none yet).
    pub step: usize,
    /// The generation the step belongs to (a new one starts at its last token).
    followed: u64,
    /// The generation whose end has been shown (until then the newest token is followed).
    settled: u64,
}

impl Default for GenerationPanel {
    fn default() -> Self {
        Self { max_new: 20, step: 0, followed: 0, settled: 0 }
    }
}

impl GenerationPanel {
    /// Whether the panel shows: the loaded model can write and the pretrained model is shown.
    pub fn shown(data: &ViewData<'_>) -> bool {
        data.model.is_some_and(|m| m.can_generate || m.can_translate)
            && data.settings.source == crate::app::state::Source::Pretrained
    }

    /// Draws the panel.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let translates = data.model.is_some_and(|m| m.can_translate);
        ui.label(RichText::new(if translates { "Translate the source" } else { "Continue the text" }).strong());
        if translates {
            ui.label(RichText::new("Pick Decoder or Cross above to step through what it wrote.").small().weak());
        }
        if let Some(q) = data.model.and_then(|m| m.quantization.as_deref()) {
            ui.label(RichText::new(format!("Weights: {q} — the attention shown is this file's.")).small().weak());
        }
        let writing = data.generation.is_some_and(|g| g.finished.is_none() && g.error.is_none());
        ui.horizontal(|ui| {
            if writing {
                if ui.button("■ Stop").on_hover_text("Stop writing; what is written stays").clicked() {
                    commands.push(Command::StopGeneration);
                }
            } else if ui
                .button(if translates { "Translate ▶" } else { "Continue ▶" })
                .on_hover_text("The model writes the next tokens greedily (the most probable each time)")
                .clicked()
            {
                commands.push(Command::Continue(self.max_new));
            }
            ui.add(
                egui::DragValue::new(&mut self.max_new)
                    .update_while_editing(false)
                    .range(1..=MAX_NEW)
                    .suffix(" tokens"),
            );
        });
        if !translates {
            crate::app::intervene::steer::steer_ui(ui, data, commands);
        }
        let Some(g) = data.generation else {
            ui.label(RichText::new("Written tokens are marked ✎ in every view.").small().weak());
            return;
        };
        let status = match (&g.error, g.finished) {
            (Some(e), _) => format!("failed: {e}"),
            (None, None) => format!("writing… {} of {} tokens", g.written, g.max_new),
            (None, Some(stop)) => {
                let rate = g.written as f64 / g.seconds.max(1e-9);
                format!("{} tokens written ({rate:.1}/s): {}", g.written, stop.describe())
            }
        };
        ui.label(RichText::new(status).small());
        if let Some(text) = g.text.as_deref().filter(|t| !t.is_empty()) {
            written_text_ui(ui, &g.prompt, text, translates);
            crate::app::intervene::steer::unsteered_ui(ui, data, g);
        }
        let Some(run) = data.run.filter(|r| r.prompt_len.is_some()) else { return };
        let prompt = run.prompt_len.unwrap_or(0);
        let written = run.tokens.len().saturating_sub(prompt).min(g.steps.len());
        if written == 0 {
            return;
        }
        // Follow the writing: a new generation, or one still writing (and the frame that shows its
        // end), shows its newest token; then the steps are the user's.
        let live = writing || self.settled != g.id;
        if self.followed != g.id || live || self.step == 0 || self.step > written {
            self.followed = g.id;
            self.step = written;
        }
        if !writing {
            self.settled = g.id;
        }
        ui.add_space(6.0);
        ui.label(RichText::new("Step through what it wrote").strong());
        let before = self.step;
        ui.horizontal(|ui| {
            if ui.small_button("◀").on_hover_text("Previous written token").clicked() && self.step > 1 {
                self.step -= 1;
            }
            ui.add(egui::Slider::new(&mut self.step, 1..=written).text(format!("of {written}")));
            if ui.small_button("▶").on_hover_text("Next written token").clicked() && self.step < written {
                self.step += 1;
            }
        });
        let pos = prompt + self.step - 1;
        // A step chosen, or the newest token while writing, is pinned: the head view shows its lines.
        let follow = live && data.pinned != Some((Side::Query, pos));
        if self.step != before || follow {
            commands.push(Command::Pin(Some((Side::Query, pos))));
        }
        if ui.small_button("Show its attention in the head view").clicked() {
            commands.push(Command::Pin(Some((Side::Query, pos))));
            commands.push(Command::Set(crate::app::command::Setting::View(crate::app::state::View::Head)));
        }
        ui.label(format!("Token {}: “{}”", pos, run.tokens.label(pos)));
        ui.label(RichText::new("The model's candidates at this step").small().weak());
        if let Some(candidates) = g.steps.get(self.step - 1) {
            candidate_bars(ui, candidates, run.tokens.ids[pos]);
        }
        let (layer, heads) = data.selection();
        if layer < run.attention.layers() && !heads.is_empty() {
            // The row of the heads' mean at this token (summed as `Attention::mean_of_heads` sums
            // the whole layer, which a frame need not build).
            let row: Vec<f32> = {
                let n = run.attention.keys();
                let mut row = vec![0.0f32; n];
                for &h in &heads {
                    for (o, v) in row.iter_mut().zip(&run.attention.head(layer, h)[pos * n..(pos + 1) * n]) {
                        *o += v;
                    }
                }
                let k = heads.len() as f32;
                for o in &mut row {
                    *o /= k;
                }
                row
            };
            // Causal self-attention: the tokens up to this one; cross-attention: every source token.
            let keys = if run.attention.is_square() { pos + 1 } else { run.attention.keys() };
            let mut order: Vec<usize> = (0..keys).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            ui.label(
                RichText::new(format!(
                    "It attends most to (layer {layer}, {})",
                    if heads.len() == 1 { "1 head".to_string() } else { format!("{} heads", heads.len()) }
                ))
                .small()
                .weak(),
            );
            for &k in order.iter().take(5) {
                ui.label(RichText::new(format!("{:>6.1}%  {}", row[k] * 100.0, run.key_label(k))).monospace().small());
            }
        }
    }
}

/// What was written as readable text: the prompt plain, the written part marked, selectable and
/// copied in one click (a translation: its source, then the target).
fn written_text_ui(ui: &mut egui::Ui, prompt: &str, written: &str, translates: bool) {
    use egui::text::{LayoutJob, TextFormat};
    ui.add_space(4.0);
    let full = if translates { written.to_string() } else { format!("{prompt}{written}") };
    ui.horizontal(|ui| {
        ui.label(RichText::new(if translates { "The translation" } else { "The text" }).strong());
        let copy = if translates { "Copy the translation" } else { "Copy the prompt and what it wrote" };
        if ui.small_button("Copy").on_hover_text(copy).clicked() {
            ui.ctx().copy_text(full.clone());
        }
    });
    let visuals = ui.visuals();
    let font_id = egui::TextStyle::Body.resolve(ui.style());
    let plain = TextFormat { font_id: font_id.clone(), color: visuals.text_color(), ..TextFormat::default() };
    let accent = Color32::from_rgb(230, 120, 40);
    let marked = TextFormat {
        font_id,
        color: visuals.strong_text_color(),
        background: accent.gamma_multiply(0.25),
        underline: egui::Stroke::new(1.0, accent),
        ..TextFormat::default()
    };
    let mut job =
        LayoutJob { wrap: egui::text::TextWrapping::wrap_at_width(ui.available_width()), ..LayoutJob::default() };
    if translates {
        job.append(&format!("{prompt}\n→ "), 0.0, plain);
    } else {
        job.append(prompt, 0.0, plain);
    }
    job.append(written, 0.0, marked);
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.add(egui::Label::new(job).selectable(true));
    });
    ui.label(RichText::new("The prompt plain, what the model wrote marked.").small().weak());
}

/// One bar per candidate, its probability written beside it; the chosen one highlighted.
fn candidate_bars(ui: &mut egui::Ui, candidates: &[crate::model::generate::Candidate], chosen: u32) {
    let width = 110.0;
    for c in candidates {
        ui.horizontal(|ui| {
            let label = crate::analysis::tokens::pretty_label(&c.token);
            let text = if c.id == chosen { RichText::new(label).strong() } else { RichText::new(label) };
            ui.add_sized([70.0, 14.0], egui::Label::new(text.monospace().small()).truncate());
            let (rect, _) = ui.allocate_exact_size(egui::vec2(width, 10.0), egui::Sense::hover());
            let fill = if c.id == chosen { Color32::from_rgb(230, 120, 40) } else { Color32::from_rgb(90, 140, 200) };
            ui.painter().rect_filled(rect, 1.0, ui.visuals().faint_bg_color);
            let bar = egui::Rect::from_min_size(rect.min, egui::vec2(width * c.prob.clamp(0.0, 1.0), rect.height()));
            ui.painter().rect_filled(bar, 1.0, fill);
            ui.label(RichText::new(format!("{:.1}%", c.prob * 100.0)).small());
        });
    }
}
