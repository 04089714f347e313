//! Two runs compared with the same layer and heads: side by side, or B − A as a diverging heatmap.
//! B is another sentence, the faithful model against the intervened one, or another model folder.

use std::sync::Arc;

use egui::RichText;

use crate::app::command::Commands;
use crate::app::data::ViewData;
use crate::app::state::{CompareMode, CompareSource, Settings};
use crate::app::widgets::matrix::{
    FitCache, MatrixSpec, MatrixTexture, fit_cell, matrix_ui, prepare_matrix, symmetric_range, zoom_step, zoom_ui,
};
use crate::export::Figure;
use crate::render::Colormap;

/// The comparison view's state: textures and the typed model folder.
#[derive(Default)]
pub struct CompareView {
    a: MatrixTexture,
    b: MatrixTexture,
    diff: MatrixTexture,
    /// The cell side that fits the room.
    fit: FitCache,
    /// The comparison's model-folder box as typed.
    pub model_input: String,
}

impl CompareView {
    /// Draws the comparison view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        compare_view_ui(ui, &mut settings, data, self);
        commands.set_changed(data.settings, &settings);
    }
}

/// Draws the comparison view.
fn compare_view_ui(ui: &mut egui::Ui, settings: &mut Settings, data: &ViewData<'_>, cache: &mut CompareView) {
    let Some(run) = data.run else { return };
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new("Compare with").strong());
        let c = &mut settings.compare.source;
        ui.selectable_value(c, CompareSource::Sentence, "Another sentence");
        ui.selectable_value(c, CompareSource::Interventions, "The faithful model")
            .on_hover_text("A is the run with your interventions, B the same input on the faithful model");
        ui.selectable_value(c, CompareSource::Model, "Another model");
        ui.separator();
        ui.selectable_value(&mut settings.compare.mode, CompareMode::SideBySide, "Side by side");
        ui.selectable_value(&mut settings.compare.mode, CompareMode::Difference, "Difference B − A");
    });
    match settings.compare.source {
        CompareSource::Sentence => {
            ui.horizontal(|ui| {
                let label = ui.label("Sentence to compare");
                ui.add(egui::TextEdit::singleline(&mut settings.compare.text_b).desired_width(f32::INFINITY))
                    .labelled_by(label.id);
            });
        }
        CompareSource::Model => {
            if cache.model_input.is_empty()
                && let Some(dir) = &settings.compare.model_b
            {
                cache.model_input = dir.display().to_string();
            }
            ui.horizontal(|ui| {
                let label = ui.label("Model B folder");
                ui.add(egui::TextEdit::singleline(&mut cache.model_input).desired_width(360.0)).labelled_by(label.id);
                if ui.button("Use as B").clicked() && !cache.model_input.trim().is_empty() {
                    settings.compare.model_b = Some(cache.model_input.trim().into());
                }
            });
            ui.label(
                RichText::new("Model B runs faithfully on the same input; the difference needs the same tokenizer.")
                    .small()
                    .weak(),
            );
        }
        CompareSource::Interventions => {}
    }
    if let Some(why) = data.features.compare.error.as_deref() {
        ui.colored_label(ui.visuals().warn_fg_color, why);
        return;
    }
    let Some(b) = data.features.compare.run_b.as_ref() else {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("Running B…");
        });
        return;
    };
    let a = &run.attention;
    let (layer_idx, heads) = settings.selection_for(a.layers(), a.heads());
    if heads.is_empty() {
        ui.label("No head selected: pick heads in the side panel.");
        return;
    }
    if b.attention.layers() <= layer_idx || heads.iter().any(|&h| h >= b.attention.heads()) {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "B ({}) has {} layers × {} heads: it has no layer {layer_idx} with the selected heads.",
                b.display_name(),
                b.attention.layers(),
                b.attention.heads()
            ),
        );
        return;
    }
    let difference = if run.attention.is_square() && b.attention.is_square() {
        crate::analysis::tokens::token_difference(&run.tokens, &b.tokens)
    } else {
        Err("the difference of cross-attention is not offered".to_string())
    };
    let heads_text = heads.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(format!("Layer {layer_idx} · heads {heads_text} (synced for A and B)")).strong());
        ui.separator();
        zoom_ui(ui, &mut settings.zoom.compare, cache.fit.cell);
    });
    let mode = if let (CompareMode::Difference, Err(why)) = (settings.compare.mode, &difference) {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!("The difference needs as many tokens in A as in B ({why}): showing them side by side."),
        );
        CompareMode::SideBySide
    } else {
        settings.compare.mode
    };
    let base_key = (data.view_id, data.features.compare.compare_id, layer_idx, heads.clone());
    let zoom = settings.zoom.compare;
    let room = ui.available_size() - egui::vec2(2.0, 2.0);
    let differ = difference.unwrap_or_default();
    let mut zoomed = None;
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| match mode {
        CompareMode::Difference => {
            let (am, bm) = (run.shown_mean(layer_idx, &heads), b.shown_mean(layer_idx, &heads));
            let diff: Vec<f32> = bm.iter().zip(&am).map(|(bv, av)| bv - av).collect();
            let labels: Vec<String> = (0..run.tokens.len())
                .map(|i| crate::analysis::tokens::difference_label(&run.label(i), &b.label(i)))
                .collect();
            if let Some(note) = crate::analysis::tokens::differing_note(&differ, |i| run.label(i), |i| b.label(i)) {
                ui.colored_label(ui.visuals().warn_fg_color, note);
            }
            let max_abs = diff.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()));
            ui.label(format!(
                "B − A: red = B attends more, blue = A attends more; largest change {max_abs:.4}. A: {} · B: {}",
                run.display_name(),
                b.display_name()
            ));
            let hover = |r: usize, c: usize, v: f32| {
                if v.is_nan() {
                    return "masked (causal)".to_string();
                }
                let i = r * labels.len() + c;
                let (av, bv) = (am[i], bm[i]);
                format!("query “{}” → key “{}”\nA {av:.6}\nB {bv:.6}\nB − A {v:+.6}", labels[r], labels[c])
            };
            let key = crate::app::widgets::matrix::key_of(&("diff", &base_key));
            let spec = MatrixSpec {
                id: "compare-diff",
                values: &diff,
                rows: labels.len(),
                cols: labels.len(),
                row_labels: &labels,
                col_labels: &labels,
                axes: ("query", "key"),
                range: symmetric_range(&diff),
                colormap: Colormap::RdBu,
                cell: 0.0,
                hover: &hover,
                clickable: None,
                sink: None,
            };
            let room = room - egui::vec2(0.0, 40.0); // the lines above the matrix
            let fitted = cache.fit.get(key, room, || fit_cell(ui, &spec, room));
            let spec = MatrixSpec { cell: zoom.unwrap_or(fitted), ..spec };
            let shown = matrix_ui(ui, &mut cache.diff, key, &spec);
            if shown.response.hovered() {
                zoomed = zoom_step(ui, spec.cell);
            }
        }
        CompareMode::SideBySide => {
            zoomed = side_by_side_ui(
                ui,
                [("A", run), ("B", b)],
                ([&mut cache.a, &mut cache.b], &mut cache.fit),
                &heads,
                layer_idx,
                settings.colormap,
                (zoom, room),
                &base_key,
            );
        }
    });
    if zoomed.is_some() {
        settings.zoom.compare = zoomed;
    }
}

/// The hover text of a cell (row, column, value).
type HoverText<'a> = Box<dyn Fn(usize, usize, f32) -> String + 'a>;

/// A and B next to each other when both fit the width, else one above the other (the view
/// scrolls); each title stays on one line. `zoom`: the cell side, None to fit both side by side
/// in `room`. Returns the cell side a Ctrl+scroll over either asked for.
#[allow(clippy::too_many_arguments)]
fn side_by_side_ui(
    ui: &mut egui::Ui,
    runs: [(&str, &std::sync::Arc<crate::analysis::Run>); 2],
    (textures, fit): ([&mut MatrixTexture; 2], &mut FitCache),
    heads: &[usize],
    layer_idx: usize,
    colormap: Colormap,
    (zoom, room): (Option<f32>, egui::Vec2),
    base_key: &impl std::hash::Hash,
) -> Option<f32> {
    // Rows are the queries, columns the keys (the source tokens of cross-attention).
    let prepared: Vec<(String, [Vec<String>; 2], Vec<f32>)> = runs
        .iter()
        .map(|(which, r)| {
            let labels: Vec<String> = (0..r.tokens.len()).map(|i| r.label(i)).collect();
            let key_labels: Vec<String> = (0..r.attention.keys()).map(|i| r.key_label(i)).collect();
            (format!("{which}: {}", r.display_name()), [labels, key_labels], r.shown_mean(layer_idx, heads))
        })
        .collect();
    let hovers: Vec<HoverText<'_>> = runs
        .iter()
        .zip(&prepared)
        .map(|((which, _), (_, [labels, key_labels], _))| {
            Box::new(move |q: usize, k: usize, v: f32| {
                let w = if v.is_nan() { "masked (causal)".to_string() } else { format!("weight {v:.6}") };
                format!("{which}: query “{}” → key “{}”\n{w}", labels[q], key_labels[k])
            }) as HoverText<'_>
        })
        .collect();
    let specs: Vec<MatrixSpec<'_>> = prepared
        .iter()
        .zip(&hovers)
        .enumerate()
        .map(|(i, ((_, [labels, key_labels], values), hover))| MatrixSpec {
            id: if i == 0 { "compare-a" } else { "compare-b" },
            values,
            rows: labels.len(),
            cols: key_labels.len(),
            row_labels: labels,
            col_labels: key_labels,
            axes: ("query", "key"),
            range: (0.0, 1.0),
            colormap,
            cell: 0.0,
            hover: hover.as_ref(),
            clickable: None,
            sink: None,
        })
        .collect();
    // Fit: both matrices next to each other, each under its title line.
    let spacing = ui.spacing().item_spacing.x;
    let half = egui::vec2((room.x - spacing) / 2.0, room.y - 24.0);
    let key = crate::app::widgets::matrix::key_of(&("side by side", base_key));
    let fitted = fit.get(key, room, || specs.iter().map(|s| fit_cell(ui, s, half)).fold(f32::INFINITY, f32::min));
    let cell = zoom.unwrap_or(fitted);
    let specs: Vec<MatrixSpec<'_>> = specs.into_iter().map(|s| MatrixSpec { cell, ..s }).collect();
    let mut textures = textures;
    let widths: Vec<f32> = specs
        .iter()
        .zip(textures.iter_mut())
        .enumerate()
        .map(|(i, (spec, tex))| {
            prepare_matrix(ui, tex, crate::app::widgets::matrix::key_of(&(runs[i].0, base_key)), spec).x
        })
        .collect();
    let fits = widths.iter().sum::<f32>() + spacing <= ui.available_width();
    let mut zoomed = None;
    let draw = |ui: &mut egui::Ui| {
        for (i, (spec, tex)) in specs.iter().zip(textures).enumerate() {
            ui.vertical(|ui| {
                ui.add(egui::Label::new(RichText::new(&prepared[i].0).strong()).extend());
                let shown = matrix_ui(ui, tex, crate::app::widgets::matrix::key_of(&(runs[i].0, base_key)), spec);
                if shown.response.hovered() {
                    zoomed = zoom_step(ui, cell);
                }
            });
        }
    };
    if fits {
        ui.horizontal_top(draw);
    } else {
        ui.vertical(draw);
    }
    zoomed
}

impl super::Feature {
    /// The figure the comparison exports: A beside (or minus) B, or A alone before B arrives.
    pub fn figure(&self, data: &ViewData<'_>, (layer_idx, heads): (usize, &[usize])) -> Figure {
        let head_idxs = heads.to_vec();
        match &self.run_b {
            Some(b) => Figure::Compare {
                layer_idx,
                head_idxs,
                other: crate::export::SharedRun(Arc::clone(b)),
                // As in the view: different token counts fall back to side by side.
                difference: data.settings.compare.mode == CompareMode::Difference
                    && data.run.is_some_and(|a| a.tokens.len() == b.tokens.len()),
            },
            None => Figure::Heatmap { layer_idx, head_idxs },
        }
    }
}
