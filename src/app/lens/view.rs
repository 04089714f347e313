//! The logit lens (nostalgebraist 2020; Ecco's layer predictions and rankings): streams × positions,
//! each cell the token the stream would predict had the model stopped there, its probability as
//! colour — or, in rank mode, the rank of the model's final prediction (or of a watched token).
//! A click selects a position; the watched tokens' probability (or rank) across the streams at that
//! position is plotted below. Computed on the worker thread: the selected column first, then the
//! grid chunk by chunk.

use std::fmt::Write as _;

use egui::{Color32, FontId, Rect, RichText, Sense, Stroke, pos2, vec2};
use egui_plot::{Legend, Line, Plot, PlotPoints};

use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::lens::{LensState, stream_name};
use crate::app::state::LensMode;
use crate::app::widgets::matrix::{SCALE_RANGE, fit_scale, zoom_row, zoom_step_in};
use crate::render::{cell_rgb, cell_text_rgb};

/// Cell width and height in points.
const CELL: (f32, f32) = (66.0, 20.0);
/// The width of the streams' names.
const ROW_W: f32 = 120.0;
/// The height of the tokens' header.
const HEAD_H: f32 = 22.0;

/// The lens view's state: the token being typed into the watch list, what the pointer is over.
#[derive(Debug, Default)]
pub struct LensView {
    /// The watch box's text.
    pub watch_input: String,
    /// The cell under the pointer (stream, position), as last drawn.
    pub hovered: Option<(usize, usize)>,
}

impl LensView {
    /// Draws the view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        if let Some(why) = data.features.lens.refusal.as_deref() {
            let what = "The logit lens reads each layer's residual stream through the model's final norm and its \
                        language-model head (its unembedding): a decoder with its head.";
            crate::app::widgets::refusal_ui(ui, why, what);
            return;
        }
        let Some(tokens) = data.token_run.map(|r| &r.tokens) else { return };
        let settings = data.settings;
        let lens = &data.features.lens.state;
        let n = tokens.len();
        let selected = settings.lens.position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
        self.controls_ui(ui, data, commands);
        if let Some(err) = &lens.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("The lens failed: {err}"));
            return;
        }
        status_ui(ui, data, n);
        if lens.streams == 0 {
            return;
        }
        let labels: Vec<String> = (0..n).map(|i| crate::analysis::tokens::pretty_label(&tokens.tokens[i])).collect();
        let grid_h = (ui.available_height() - 230.0).max(120.0);
        // Fit (the default, until zoomed): every stream and position in the grid's room.
        let full = vec2(n as f32 * CELL.0, lens.streams as f32 * CELL.1);
        let fitted = fit_scale(full, vec2(ui.available_width() - ROW_W - 8.0, grid_h - 30.0 - HEAD_H));
        let mut zoom = settings.zoom.lens;
        zoom_row(ui, &mut zoom, fitted, (SCALE_RANGE, "scale"));
        let scale = zoom.unwrap_or(fitted);
        egui::ScrollArea::both().id_salt("lens-grid").max_height(grid_h).auto_shrink([false, true]).show(ui, |ui| {
            if self.grid_ui(ui, data, &labels, (selected, scale), commands) {
                zoom = zoom_step_in(ui, scale, SCALE_RANGE).or(zoom);
            }
        });
        commands.set_zoom(settings, |z| &mut z.lens, zoom);
        ui.separator();
        watch_plot_ui(ui, lens, settings.lens.mode, &labels, selected);
        // ← / → move the selected position (when no text box has the keyboard).
        if ui.memory(|m| m.focused().is_none()) {
            let (left, right) =
                ui.input(|i| (i.key_pressed(egui::Key::ArrowLeft), i.key_pressed(egui::Key::ArrowRight)));
            if left && selected > 0 {
                commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                    position: Some(selected - 1),
                    ..settings.lens.clone()
                })));
            } else if right && selected + 1 < n {
                commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                    position: Some(selected + 1),
                    ..settings.lens.clone()
                })));
            }
        }
    }

    /// Mode toggle, rank target, the watch list.
    fn controls_ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let settings = data.settings;
        let lens = &data.features.lens.state;
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("Show").strong());
            for (mode, label, hint) in [
                (
                    LensMode::Probability,
                    "Probability",
                    "Each cell: the stream's most probable next token, its probability as colour",
                ),
                (
                    LensMode::Rank,
                    "Rank",
                    "Each cell: the rank of the followed token in that stream (Ecco's rank mode): 1 = the top token",
                ),
            ] {
                if ui.selectable_label(settings.lens.mode == mode, label).on_hover_text(hint).clicked() {
                    commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                        mode,
                        ..settings.lens.clone()
                    })));
                }
            }
            if settings.lens.mode == LensMode::Rank {
                ui.separator();
                ui.label("Rank of");
                for t in 0..=lens.watched.len() {
                    let name = if t == 0 { "final prediction".to_string() } else { lens.followed_name(t) };
                    if ui.selectable_label(settings.lens.rank_of == t, name).clicked() {
                        commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                            rank_of: t,
                            ..settings.lens.clone()
                        })));
                    }
                }
            }
        });
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("Watch token");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.watch_input).desired_width(120.0).hint_text("e.g. \" Paris\""),
            );
            let edit = edit.labelled_by(label.id).on_hover_text(
                "A token to follow across the layers: type it with its leading space (\" Paris\") or as the \
                 vocabulary spells it (\"ĠParis\"); Enter adds it",
            );
            let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if (ui.button("Add").clicked() || enter) && !self.watch_input.is_empty() {
                let mut watch = settings.lens.watch.clone();
                if !watch.contains(&self.watch_input) {
                    watch.push(std::mem::take(&mut self.watch_input));
                    commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                        watch,
                        ..settings.lens.clone()
                    })));
                }
                self.watch_input.clear();
            }
            for (i, w) in settings.lens.watch.iter().enumerate() {
                if ui.button(format!("{w:?} ✕")).on_hover_text("Stop watching this token").clicked() {
                    let mut watch = settings.lens.watch.clone();
                    watch.remove(i);
                    commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                        watch,
                        rank_of: 0,
                        ..settings.lens.clone()
                    })));
                }
            }
        });
        for note in &lens.watch_notes {
            ui.colored_label(ui.visuals().warn_fg_color, RichText::new(format!("Not watched: {note}")).small());
        }
    }

    /// The grid at `scale` of its default size: stream rows, position columns; a click selects a
    /// column. Whether the pointer is over it.
    fn grid_ui(
        &mut self,
        ui: &mut egui::Ui,
        data: &ViewData<'_>,
        labels: &[String],
        (selected, scale): (usize, f32),
        commands: &mut Commands,
    ) -> bool {
        let settings = data.settings;
        let lens = &data.features.lens.state;
        let (rows, cols) = (lens.streams, labels.len());
        let (cw, ch) = (CELL.0 * scale, CELL.1 * scale);
        let (row_w, head_h) = (ROW_W, HEAD_H);
        let size = vec2(row_w + cols as f32 * cw + 4.0, head_h + rows as f32 * ch + 4.0);
        let (rect, grid) = ui.allocate_exact_size(size, Sense::hover());
        let painter = ui.painter_at(rect);
        let text = ui.visuals().text_color();
        let font = FontId::proportional(12.0);
        // The cells' text shrinks with them (the headers keep their size).
        let cell_font = FontId::proportional((12.0 * scale).clamp(5.0, 12.0));
        let cells = Rect::from_min_size(rect.min + vec2(row_w, head_h), vec2(cols as f32 * cw, rows as f32 * ch));
        let clip = ui.clip_rect();
        let first_col = (((clip.left() - cells.left()) / cw).floor().max(0.0) as usize).min(cols);
        let last_col = ((((clip.right() - cells.left()) / cw).ceil()).max(0.0) as usize).min(cols);
        let first_row = (((clip.top() - cells.top()) / ch).floor().max(0.0) as usize).min(rows);
        let last_row = ((((clip.bottom() - cells.top()) / ch).ceil()).max(0.0) as usize).min(rows);
        let lut = settings.colormap.lut();
        let muted = ui.visuals().weak_text_color();
        let mut hovered = None;
        for c in first_col..last_col {
            let x = cells.left() + c as f32 * cw;
            for r in first_row..last_row {
                let cell = Rect::from_min_size(pos2(x, cells.top() + r as f32 * ch), vec2(cw, ch));
                let resp = ui.interact(cell, ui.scope_id().with(("lens-cell", r, c)), Sense::click());
                let shown = lens.shown(settings.lens.mode, settings.lens.rank_of, r, c);
                let name = format!("Lens {} at position {c}", stream_name(r, rows));
                resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &name));
                match &shown {
                    Some((label, value)) => {
                        let [red, green, blue] = cell_rgb(&lut, *value, 0.0, 1.0);
                        let fill = Color32::from_rgb(red, green, blue);
                        painter.rect_filled(cell.shrink(0.5), 0.0, fill);
                        let [tr, tg, tb] = cell_text_rgb([red, green, blue]);
                        let color = Color32::from_rgb(tr, tg, tb);
                        let galley =
                            crate::app::widgets::matrix::fitted_label(&painter, label, &cell_font, color, cw - 4.0);
                        let at = pos2(cell.center().x - galley.size().x / 2.0, cell.center().y - galley.size().y / 2.0);
                        painter.galley(at, galley, color);
                    }
                    None => {
                        painter.rect_stroke(cell.shrink(1.0), 0.0, Stroke::new(1.0, muted), egui::StrokeKind::Inside);
                    }
                }
                if resp.clicked() {
                    commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                        position: Some(c),
                        ..settings.lens.clone()
                    })));
                }
                if resp.hovered() {
                    hovered = Some((r, c));
                    painter.rect_stroke(
                        cell,
                        0.0,
                        Stroke::new(2.0, ui.visuals().strong_text_color()),
                        egui::StrokeKind::Inside,
                    );
                    resp.on_hover_text_at_pointer(cell_hover(lens, r, c, &labels[c]));
                }
            }
        }
        if (first_col..last_col).contains(&selected) {
            let x = cells.left() + selected as f32 * cw;
            let col = Rect::from_min_size(pos2(x, cells.top()), vec2(cw, rows as f32 * ch));
            painter.rect_stroke(col, 0.0, Stroke::new(2.0, text), egui::StrokeKind::Outside);
        }
        // The headers stay in view while the grid scrolls: the tokens along the top, the streams'
        // names down the left, each over a strip of the background (drawn after the cells, so the
        // cells scroll under them).
        let bg = crate::app::widgets::panel_colour(ui.visuals());
        let head_top = rect.top().max(clip.top());
        let names_left = rect.left().max(clip.left());
        let names =
            Rect::from_min_max(pos2(names_left, clip.top().max(rect.top())), pos2(names_left + row_w, clip.bottom()));
        painter.rect_filled(names, 0.0, bg);
        for r in first_row..last_row {
            let y = cells.top() + (r as f32 + 0.5) * ch;
            painter.text(
                pos2(names_left + row_w - 6.0, y),
                egui::Align2::RIGHT_CENTER,
                stream_name(r, rows),
                font.clone(),
                text,
            );
        }
        painter.rect_filled(Rect::from_min_size(pos2(clip.left(), head_top), vec2(clip.width(), head_h)), 0.0, bg);
        for c in first_col..last_col {
            let x = cells.left() + c as f32 * cw;
            if x + cw <= names.right() {
                continue; // under the streams' names
            }
            let head = Rect::from_min_size(pos2(x, head_top), vec2(cw, head_h));
            let resp = ui.interact(head, ui.scope_id().with(("lens-col", c)), Sense::click());
            let name = format!("Position {c}: {}", labels[c]);
            resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &name));
            let strong = c == selected || resp.hovered();
            let label = crate::app::widgets::matrix::fitted_label(&painter, &labels[c], &font, text, cw - 4.0);
            let at = pos2(head.center().x - label.size().x / 2.0, head.center().y - label.size().y / 2.0);
            painter.galley(at, label, text);
            if strong {
                painter.line_segment([head.left_bottom(), head.right_bottom()], Stroke::new(2.0, text));
            }
            if resp.clicked() {
                commands.push(Command::Set(Setting::Lens(crate::app::lens::LensSettings {
                    position: Some(c),
                    ..settings.lens.clone()
                })));
            }
            resp.on_hover_text_at_pointer(format!("Position {c}: “{}” — click to select", labels[c]));
        }
        self.hovered = hovered;
        grid.contains_pointer()
    }
}

/// The "computing" line, the generation note and the timings.
fn status_ui(ui: &mut egui::Ui, data: &ViewData<'_>, n: usize) {
    let lens = &data.features.lens.state;
    if data.run.is_some_and(|r| r.prompt_len.is_some()) && data.generation.is_some() {
        ui.label(
            RichText::new(
                "A generated text: each written token's column is the lens at the step it was written (a causal \
                 model's rows do not depend on later tokens).",
            )
            .small()
            .weak(),
        );
    }
    if lens.in_flight.is_some() || lens.streams == 0 {
        ui.horizontal(|ui| {
            ui.spinner();
            let done = lens.positions_done();
            let what = if done == 0 {
                format!("Computing the lens of {n} positions… (the selected position first)")
            } else {
                format!("Computing the lens of {n} positions… ({done} of {n} done)")
            };
            ui.label(what);
        });
    } else {
        let timing = match (lens.column_ms, lens.grid_ms) {
            (Some(c), Some(g)) => format!(" Selected column in {c:.0} ms, the whole grid in {g:.0} ms."),
            (None, Some(g)) => format!(" Computed in {g:.0} ms."),
            _ => String::new(),
        };
        ui.label(
            RichText::new(format!(
                "Each layer's residual stream through the model's final norm and unembedding (nostalgebraist 2020). \
                 Click a column to select its position; hover a cell for its top {}.{timing}",
                crate::app::lens::LENS_TOP_K
            ))
            .small()
            .weak(),
        );
    }
}

/// The hover text of a cell: stream and position, the top candidates, the followed tokens.
fn cell_hover(lens: &LensState, stream: usize, pos: usize, label: &str) -> String {
    let mut out = format!("Position {pos} “{label}” · {}\n", stream_name(stream, lens.streams));
    match lens.cell(stream, pos) {
        None => out.push_str("not computed yet"),
        Some(top) => {
            for (k, (id, p)) in top.iter().enumerate() {
                let _ = write!(out, "\n{}. {}  {:.4} ({:.2}%)", k + 1, lens.label(*id), p, p * 100.0);
            }
            out.push('\n');
            for t in 0..=lens.watched.len() {
                if let Some((id, p, rank)) = lens.tracked(t, stream, pos) {
                    let what = if t == 0 {
                        format!("final prediction “{}”", lens.label(id))
                    } else {
                        lens.followed_name(t)
                    };
                    let _ = write!(out, "\n{what}: p = {p:.4}, rank {rank}");
                }
            }
        }
    }
    out
}

/// The followed tokens' probability (or log rank) across the streams at the selected position.
fn watch_plot_ui(ui: &mut egui::Ui, lens: &LensState, mode: LensMode, labels: &[String], selected: usize) {
    let rank = mode == LensMode::Rank;
    ui.label(
        RichText::new(format!(
            "{} across the layers at position {selected} “{}”",
            if rank { "Rank (log₁₀)" } else { "Probability" },
            labels.get(selected).map_or("", String::as_str)
        ))
        .strong(),
    );
    if lens.find(selected).is_none() {
        crate::app::widgets::computing_ui(ui, "the selected position");
        return;
    }
    Plot::new("lens-watch")
        .height(ui.available_height().clamp(120.0, 220.0))
        .legend(Legend::default())
        .x_axis_label("stream (0 = embeddings, then after each block)")
        .y_axis_label(if rank { "log₁₀ rank" } else { "probability" })
        .allow_scroll(false)
        .show(ui, |plot| {
            for t in 0..=lens.watched.len() {
                let points: Vec<[f64; 2]> = (0..lens.streams)
                    .filter_map(|s| {
                        let (_, p, r) = lens.tracked(t, s, selected)?;
                        Some([s as f64, if rank { f64::from(r).log10() } else { f64::from(p) }])
                    })
                    .collect();
                let name = match t {
                    0 => format!(
                        "final prediction “{}”",
                        lens.tracked(0, 0, selected).map_or_else(String::new, |(id, _, _)| lens.label(id))
                    ),
                    t => lens.followed_name(t),
                };
                plot.line(Line::new(name, PlotPoints::from(points)));
            }
        });
}

impl super::Feature {
    /// The figure the lens view exports: the grid computed so far.
    pub fn figure(&self, data: &ViewData<'_>) -> crate::export::Figure {
        let labels: Vec<String> =
            data.token_run.map(|r| (0..r.tokens.len()).map(|i| r.label(i)).collect()).unwrap_or_default();
        let n = labels.len();
        let settings = &data.settings.lens;
        let selected = settings.position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
        let name = data.model.map_or("model", |m| m.name.as_str());
        let figure = self.state.figure(&labels, name, (settings.mode, settings.rank_of), selected);
        crate::export::Figure::Lens(std::sync::Arc::new(figure))
    }
}
