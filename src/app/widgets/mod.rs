//! What the views share: refusals, positions, a head's effect, spinners, derived data asked for,
//! head colours, the pooled-input note. Imports no view, so every view (and every feature's view)
//! can use it.

pub mod figure;
pub mod matrix;

use egui::{Color32, RichText};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::text::capitalised;

/// The background of panels in this theme (egui's own panel colour; the app's panels are
/// transparent over a window cleared to it).
pub fn panel_colour(visuals: &egui::Visuals) -> egui::Color32 {
    if visuals.dark_mode { egui::Visuals::dark().panel_fill } else { egui::Visuals::light().panel_fill }
}

/// Says why a readout view does not apply to the model shown (`what` the view needs, weakly).
pub fn refusal_ui(ui: &mut egui::Ui, why: &str, what: &str) {
    ui.add_space(20.0);
    ui.colored_label(ui.visuals().warn_fg_color, RichText::new(why).strong());
    ui.label(RichText::new(what).weak());
}

/// A position picker: a strong `title`, a number box, the token's label; ← / → step when no text
/// box has the keyboard. Returns the new position when it changed.
pub fn position_ui(ui: &mut egui::Ui, title: &str, hint: &str, labels: &[String], position: usize) -> Option<usize> {
    let n = labels.len();
    ui.label(RichText::new(title).strong());
    let mut pos = position;
    ui.add(egui::DragValue::new(&mut pos).update_while_editing(false).range(0..=n.saturating_sub(1)))
        .on_hover_text(hint);
    ui.label(format!("“{}”", labels.get(position).map_or("", String::as_str)));
    if ui.memory(|m| m.focused().is_none()) {
        let (left, right) = ui.input(|i| (i.key_pressed(egui::Key::ArrowLeft), i.key_pressed(egui::Key::ArrowRight)));
        if left {
            pos = pos.saturating_sub(1);
        } else if right {
            pos = (pos + 1).min(n.saturating_sub(1));
        }
    }
    (pos != position).then_some(pos)
}

/// What the head `(layer_idx, head_idx)`'s write at `position` promotes and suppresses, once the
/// worker has it (`data.features.attribution.effect`); a button opens the head in the heatmap.
pub fn head_effect_ui(
    ui: &mut egui::Ui,
    data: &ViewData<'_>,
    (layer_idx, head_idx, position): (usize, usize, usize),
    title: &str,
    commands: &mut Commands,
) {
    ui.horizontal(|ui| {
        ui.label(RichText::new(title).strong());
        if ui.button("Open in the heatmap").clicked() {
            commands.push(Command::OpenHead { layer_idx, head_idx });
        }
    });
    if data.features.lens.refusal.is_some() {
        return; // no language-model head to read what it promotes with
    }
    let slot = &data.features.attribution.effect;
    match slot.shown().filter(|e| e.0.head == (layer_idx, head_idx) && e.0.position == position) {
        Some((_, Ok(effect))) if !slot.is_pending() => {
            let list = |items: &[(String, f32)]| {
                items.iter().map(|(t, v)| format!("“{t}” {v:+.3}")).collect::<Vec<_>>().join("  ")
            };
            ui.label(format!("Promotes (top {}): {}", crate::app::attribution::EFFECT_K, list(&effect.promoted)));
            ui.label(format!("Suppresses: {}", list(&effect.suppressed)));
        }
        Some((_, Err(e))) if !slot.is_pending() => {
            ui.colored_label(ui.visuals().error_fg_color, capitalised(e));
        }
        _ => computing_ui(ui, "what this head promotes"),
    }
}

/// The token-level input a readout view reads and its selected position (`position`; None: the
/// last token), or None when there are no tokens or the view does not apply (then it says why:
/// `refusal`, and what it needs).
pub fn readout_tokens<'a>(
    ui: &mut egui::Ui,
    data: &ViewData<'a>,
    (refusal, what): (Option<&str>, &str),
    position: Option<usize>,
) -> Option<(&'a crate::analysis::tokens::Tokens, usize)> {
    if let Some(why) = refusal {
        refusal_ui(ui, why, what);
        return None;
    }
    let tokens = data.token_run.map(|r| &r.tokens).filter(|t| !t.is_empty())?;
    let n = tokens.len();
    Some((tokens, position.unwrap_or(n - 1).min(n - 1)))
}

/// Makes head `head_idx` of layer `layer_idx` the one the attention views show (the others
/// deselected), without leaving the current view.
pub fn select_head(
    settings: &crate::app::state::Settings,
    (layer_idx, head_idx): (usize, usize),
    commands: &mut Commands,
) {
    use crate::app::command::Setting;
    let heads = (0..settings.heads.len().max(head_idx + 1)).map(|h| h == head_idx).collect();
    commands.push(Command::Set(Setting::Layer(layer_idx)));
    commands.push(Command::Set(Setting::Heads(heads)));
}

/// egui's spinner, drawn only on the frames that happen anyway: egui's own asks for the next frame
/// at once, and without a GPU a frame costs tens of milliseconds of CPU, taken from the model pass
/// or the derive thread it waits on. While the app is busy it is woken when the work ends, and
/// the shell's `BUSY_FRAME` apart meanwhile, so a short job shows its result with no frame
/// in between and a long one turns the spinner a few times a second.
pub fn quiet_spinner(ui: &mut egui::Ui) {
    let size = ui.style().spacing.interact_size.y;
    let (rect, _) = ui.allocate_exact_size(egui::vec2(size, size), egui::Sense::hover());
    if !ui.is_rect_visible(rect) {
        return;
    }
    let radius = rect.height() / 2.0 - 2.0;
    let time = ui.input(|i| i.time);
    let start = time * std::f64::consts::TAU;
    let end = start + 240f64.to_radians() * time.sin();
    let points: Vec<egui::Pos2> = (0..20)
        .map(|i| {
            let (sin, cos) = (start + (end - start) * f64::from(i) / 20.0).sin_cos();
            rect.center() + radius * egui::vec2(cos as f32, sin as f32)
        })
        .collect();
    ui.painter().add(egui::Shape::line(points, egui::Stroke::new(3.0, ui.visuals().strong_text_color())));
}

/// A spinner and "computing …" while derived data is produced off the UI thread.
pub fn computing_ui(ui: &mut egui::Ui, what: &str) {
    ui.horizontal(|ui| {
        quiet_spinner(ui);
        ui.label(format!("Computing {what}…"));
    });
}

/// The derived data `key`, or None after asking for it (once: not while it is being computed).
pub fn derived_or_ask<'a, T>(
    data: &ViewData<'a>,
    commands: &mut Commands,
    key: &crate::app::derive::DeriveKey,
    get: impl FnOnce(&'a crate::app::derive::Derived) -> Option<T>,
) -> Option<T> {
    let found = get(data.derived);
    if found.is_none() && !data.derived.is_pending(key) {
        commands.push(Command::Derive(key.clone()));
    }
    found
}

/// Colour of a head (distinct per head, colour-blind aware), as egui colour.
pub fn head_color(head_idx: usize, heads: usize) -> Color32 {
    let [r, g, b] = crate::render::head_colors(heads).get(head_idx).copied().unwrap_or([128, 128, 128]);
    Color32::from_rgb(r, g, b)
}

/// Says above a view of a long input's pooled run (overview or window) what its cells are and
/// what `pooled` means for this view.
pub fn pooled_note(ui: &mut egui::Ui, run: &crate::analysis::Run, pooled: &str) {
    let Some(long) = &run.long else { return };
    let cells = match long.view {
        crate::analysis::long::LongView::Overview => {
            format!("each row and column is a span of {} tokens", long.spans.first().map_or(1, ExactSizeIterator::len))
        }
        crate::analysis::long::LongView::Window => {
            "rows and columns are single tokens of the window, with the tokens before (and after) it as one span each"
                .to_string()
        }
    };
    ui.colored_label(
        ui.visuals().warn_fg_color,
        RichText::new(format!("Pooled ({}): {cells}. {pooled}", long.describe())).small(),
    );
}

/// An `egui_plot` grid spacer that puts marks at round values (1, 2 or 5 × 10ⁿ) at least
/// `spacing` points apart, so each mark's label has room to show. (`egui_plot`'s own spacer steps
/// by powers of ten and hides the labels closer than its minimum: a short loss axis showed only 0.)
/// Assumes the plot's default grid spacing (its `base_step_size` is the value of 8 points).
pub fn round_marks(spacing: f64) -> impl Fn(egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    move |input: egui_plot::GridInput| {
        let (lo, hi) = input.bounds;
        let step = crate::render::round_step(input.base_step_size / 8.0 * spacing);
        crate::render::marks_between(lo, hi, step)
            .into_iter()
            .map(|value| egui_plot::GridMark { value, step_size: step })
            .collect()
    }
}

/// The label of a mark [`round_marks`] placed: as many decimals as its step needs (0.5 reads
/// "0.5", not `egui_plot`'s "0").
pub fn round_label(mark: egui_plot::GridMark, _range: &std::ops::RangeInclusive<f64>) -> String {
    let decimals = (-mark.step_size.log10().floor()).clamp(0.0, 6.0) as usize;
    format!("{:.*}", decimals, mark.value)
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // round marks are exact
mod tests {
    use super::*;

    /// Marks fall on round values inside the bounds, at least the asked spacing apart.
    #[test]
    fn round_labels_show_the_decimals_their_step_needs() {
        let label = |value: f64, step_size: f64| round_label(egui_plot::GridMark { value, step_size }, &(0.0..=1.0));
        assert_eq!(label(0.5, 0.5), "0.5");
        assert_eq!(label(1.0, 0.5), "1.0");
        assert_eq!(label(0.25, 0.05), "0.25");
        assert_eq!(label(1000.0, 500.0), "1000");
        assert_eq!(label(2.0, 1.0), "2");
    }

    #[test]
    fn round_marks_are_round_and_spaced() {
        // A loss axis of 0 to 4.4 over 90 points: 8 points are 0.39; 28 points 1.37, so steps of 2.
        let marks = round_marks(28.0)(egui_plot::GridInput { bounds: (-0.2, 4.4), base_step_size: 4.6 / 90.0 * 8.0 });
        let values: Vec<f64> = marks.iter().map(|m| m.value).collect();
        assert_eq!(values, vec![0.0, 2.0, 4.0]);
        // 1,500 steps over 300 points with marks 64 points apart: every 500.
        let marks = round_marks(64.0)(egui_plot::GridInput { bounds: (0.0, 1500.0), base_step_size: 40.0 });
        let values: Vec<f64> = marks.iter().map(|m| m.value).collect();
        assert_eq!(values, vec![0.0, 500.0, 1000.0, 1500.0]);
        assert!(marks.iter().all(|m| m.step_size == 500.0));
        assert!(round_marks(28.0)(egui_plot::GridInput { bounds: (0.0, f64::NAN), base_step_size: 1.0 }).is_empty());
    }
}
