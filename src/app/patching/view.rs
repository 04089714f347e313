//! The patching view: which layers and positions (or heads) carry what makes the clean input's
//! answer win over the corrupted input's — each cell the logit difference answer − wrong of the
//! corrupted run with that one activation of the clean run put in (diverging colours centred on
//! 0; the value on hover). A click on a head of the head sweep opens it in the attention views.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use egui::RichText;

use crate::analysis::patching::PatchSite;
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::patching::{PatchingSettings, grid_table};
use crate::app::widgets::matrix::{
    CELL_RANGE, FitCache, MatrixSpec, MatrixTexture, fit_cell, key_of, matrix_ui, symmetric_range, zoom_row, zoom_step,
};
use crate::export::{Figure, Table};
use crate::render::Colormap;

/// The patching view's state: the grid's texture and the token boxes being typed.
#[derive(Default)]
pub struct PatchingView {
    texture: MatrixTexture,
    /// The answer and wrong boxes as typed (applied when committed: Enter or focus lost).
    typed: Option<(String, String)>,
    /// The cell side the grid was last fitted at.
    fit: FitCache,
}

impl PatchingView {
    /// Draws the view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let feature = &data.features.patching;
        let settings = &data.settings.patching;
        ui.label(
            RichText::new(
                "Activation patching (denoising): the corrupted input (sentence B) is run with one activation of the \
                 clean input (sentence A) put in; each cell is the logit difference answer − wrong at the last \
                 position. Where it moves toward the clean run's, that activation carries the difference.",
            )
            .small()
            .weak(),
        );
        if let Some(why) = &feature.refusal {
            ui.label(why);
            return;
        }
        self.controls_ui(ui, settings, commands);
        let slot = &feature.slot;
        if slot.is_pending() {
            let (done, total) =
                (feature.progress.done.load(Ordering::Relaxed), feature.progress.total.load(Ordering::Relaxed));
            ui.horizontal(|ui| {
                let text = if total == 0 {
                    "running the clean and corrupted inputs…".to_string()
                } else {
                    format!("{done} of {total} patched runs")
                };
                ui.add(egui::ProgressBar::new(done as f32 / total.max(1) as f32).text(text).desired_width(260.0));
                if ui.button("Stop").on_hover_text("Stop the sweep").clicked() {
                    feature.cancel.store(true, Ordering::Relaxed);
                }
            });
            return;
        }
        let Some((_, result)) = slot.shown() else { return };
        let p = match result {
            Ok(p) => p,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, crate::app::text::capitalised(e));
                if ui.button("Sweep again").clicked() {
                    feature.again.store(true, Ordering::Relaxed);
                    ui.ctx().request_repaint();
                }
                return;
            }
        };
        let patching = &p.patching;
        let pretty = crate::analysis::tokens::pretty_label;
        // Once per frame, not per hovered cell.
        let shares = patching.normalized();
        let normalized = settings.normalized && shares.is_some();
        ui.label(
            RichText::new(format!(
                "“{}” − “{}”: clean {:.4} · corrupted {:.4} · {} cells, {} patched runs, {:.0} ms",
                pretty(&patching.inputs.answer),
                pretty(&patching.inputs.wrong),
                patching.clean_logit_diff,
                patching.corrupted_logit_diff,
                patching.grid.logit_diff.len(),
                patching.grid.passes,
                p.elapsed_ms
            ))
            .strong(),
        );
        let table = grid_table(patching, "", normalized);
        let (rows, cols) = (table.row_labels.len(), table.col_labels.len());
        let per_head = patching.site.per_head();
        // The raw difference and its normalised form, whichever the colours show.
        let hover = |r: usize, c: usize, _shown: f32| {
            let at = if per_head {
                format!("Layer {r} head {c}: its output at every position patched")
            } else {
                let (a, b) = (&patching.inputs.clean_tokens[c], &patching.inputs.corrupted_tokens[c]);
                format!("Layer {r}, position {c} (clean “{}”, corrupted “{}”)", pretty(a), pretty(b))
            };
            let raw = patching.grid.get(r, c);
            let share = shares.as_ref().map(|n| format!(" · normalised {:.4}", n[r * cols + c])).unwrap_or_default();
            let click = if per_head { "\n\nClick to open this head on both inputs (Compare)" } else { "" };
            format!("{at}\nlogit difference {raw:+.6}{share}{click}")
        };
        let name = |r: usize, c: usize| format!("Patch L{r} {}", table.col_labels[c]);
        // The sweep shown is one `Arc` until another arrives: its address keys the texture.
        let key = key_of(&(std::sync::Arc::as_ptr(p) as usize, normalized));
        let spec = MatrixSpec {
            id: "patching",
            values: &table.values,
            rows,
            cols,
            row_labels: &table.row_labels,
            col_labels: &table.col_labels,
            axes: ("layer", if per_head { "head" } else { "position" }),
            range: symmetric_range(&table.values),
            colormap: Colormap::RdBu,
            cell: 0.0,
            hover: &hover,
            clickable: per_head.then_some(&name as &dyn Fn(usize, usize) -> String),
            sink: None,
        };
        // Fit (the default, until zoomed): the whole grid in the room.
        let mut zoom = data.settings.zoom.patching;
        let room = ui.available_size() - egui::vec2(4.0, 40.0);
        let fitted = self.fit.get(key, room, || fit_cell(ui, &spec, room));
        zoom_row(ui, &mut zoom, fitted, (CELL_RANGE, "cell size"));
        let spec = MatrixSpec { cell: zoom.unwrap_or(fitted), ..spec };
        let mut clicked = None;
        egui::ScrollArea::both().id_salt("patch-grid").auto_shrink([false, true]).show(ui, |ui| {
            let shown = matrix_ui(ui, &mut self.texture, key, &spec);
            // Over the grid (a per-head grid's cells are widgets of their own, on top of it).
            if shown.response.contains_pointer() {
                zoom = zoom_step(ui, spec.cell).or(zoom);
            }
            clicked = shown.clicked;
        });
        commands.set_zoom(data.settings, |z| &mut z.patching, zoom);
        if let Some(head) = clicked.filter(|_| per_head) {
            // The head on both inputs: the comparison of the clean sentence A with the corrupted B.
            crate::app::widgets::select_head(data.settings, head, commands);
            let compare = crate::app::compare::CompareSettings {
                source: crate::app::compare::CompareSource::Sentence,
                text_b: data.settings.text_pair.clone(),
                ..data.settings.compare.clone()
            };
            commands.push(Command::Set(Setting::Compare(compare)));
            commands.push(Command::Set(Setting::View(crate::app::state::View::Compare)));
        }
    }

    /// The sweep picker, the answer and wrong boxes and the normalised toggle.
    fn controls_ui(&mut self, ui: &mut egui::Ui, settings: &PatchingSettings, commands: &mut Commands) {
        let mut next = settings.clone();
        ui.horizontal_wrapped(|ui| {
            ui.label("Patch:");
            for site in PatchSite::ALL {
                let hint = match site {
                    PatchSite::ResidPre => "The residual stream entering each layer, at each position",
                    PatchSite::AttnOut => "The attention block's output (every head's write + bias), at each position",
                    PatchSite::MlpOut => "The MLP's write, at each position",
                    PatchSite::Head => "Each head's output, at every position at once (layers × heads)",
                };
                ui.selectable_value(&mut next.site, site, site.name()).on_hover_text(hint);
            }
            ui.separator();
            let (answer, wrong) = self.typed.get_or_insert_with(|| (settings.answer.clone(), settings.wrong.clone()));
            let mut commit = false;
            ui.label("Answer");
            let a = ui.add(egui::TextEdit::singleline(answer).desired_width(90.0).hint_text("clean's top"));
            ui.label("wrong");
            let w = ui.add(egui::TextEdit::singleline(wrong).desired_width(90.0).hint_text("corrupted's top"));
            commit |= a.lost_focus() || w.lost_focus();
            if commit {
                next.answer.clone_from(answer);
                next.wrong.clone_from(wrong);
            }
            ui.checkbox(&mut next.normalized, "Normalised")
                .on_hover_text("Each cell as a share of the way from the corrupted run (0) to the clean run (1)");
        });
        if next != *settings {
            commands.push(Command::Set(Setting::Patching(next)));
        }
        if !ui.memory(|m| m.focused().is_some()) {
            // Not typing: the boxes follow the settings (changed elsewhere, or by another model).
            self.typed = None;
        }
    }
}

impl super::Feature {
    /// The figure the patching view exports: the grid shown, as signed values centred on 0.
    pub fn figure(&self, data: &ViewData<'_>) -> Figure {
        let Some((_, Ok(p))) = self.slot.shown() else {
            return Figure::Signed { table: Arc::new(Table::default()), axes: ("layer", "position") };
        };
        let name = data.model.map_or("model", |m| m.name.as_str());
        Figure::Signed {
            table: Arc::new(grid_table(&p.patching, name, data.settings.patching.normalized)),
            axes: ("layer", if p.patching.site.per_head() { "head" } else { "position" }),
        }
    }
}
