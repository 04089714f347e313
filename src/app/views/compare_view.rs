//! Two runs compared with the same layer and heads: side by side, or B − A as a diverging heatmap.
//! B is another sentence, the faithful model against the intervened one, or another model folder.

use egui::RichText;

use super::matrix::{MatrixSpec, MatrixTexture, matrix_ui, symmetric_range};
use crate::app::app::Runtime;
use crate::app::state::{CompareMode, CompareSource, Settings};
use crate::render::Colormap;

/// Textures of the comparison.
#[derive(Default)]
pub struct CompareCache {
    a: MatrixTexture,
    b: MatrixTexture,
    diff: MatrixTexture,
}

/// Draws the comparison view.
pub fn compare_view_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    let Some(run) = rt.run.clone() else { return };
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
            if rt.compare_model_input.is_empty() {
                if let Some(dir) = &settings.compare.model_b {
                    rt.compare_model_input = dir.display().to_string();
                }
            }
            ui.horizontal(|ui| {
                let label = ui.label("Model B folder");
                ui.add(egui::TextEdit::singleline(&mut rt.compare_model_input).desired_width(360.0))
                    .labelled_by(label.id);
                if ui.button("Use as B").clicked() && !rt.compare_model_input.trim().is_empty() {
                    settings.compare.model_b = Some(rt.compare_model_input.trim().into());
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
    if let Some(why) = &rt.compare_error {
        ui.colored_label(ui.visuals().warn_fg_color, why);
        return;
    }
    let Some(b) = rt.run_b.clone() else {
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
    let difference = crate::analysis::tokens::token_difference(&run.tokens, &b.tokens);
    let same_tokens = difference.is_none();
    let heads_text = heads.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    ui.label(RichText::new(format!("Layer {layer_idx} · heads {heads_text} (synced for A and B)")).strong());
    let mode = if settings.compare.mode == CompareMode::Difference && !same_tokens {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "The difference needs the same tokens in A and B ({}): showing them side by side.",
                difference.as_deref().unwrap_or_default()
            ),
        );
        CompareMode::SideBySide
    } else {
        settings.compare.mode
    };
    let cache = &mut rt.caches.compare;
    let base_key = (rt.view_id, rt.compare_id, layer_idx, heads.clone());
    let cell = settings.cell_size.min(36.0);
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| match mode {
        CompareMode::Difference => {
            let (am, bm) = (run.shown_mean(layer_idx, &heads), b.shown_mean(layer_idx, &heads));
            let diff: Vec<f32> = bm.iter().zip(&am).map(|(bv, av)| bv - av).collect();
            let labels: Vec<String> = (0..run.tokens.len()).map(|i| run.tokens.label(i)).collect();
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
            matrix_ui(
                ui,
                &mut cache.diff,
                super::matrix::key_of(&("diff", &base_key)),
                &MatrixSpec {
                    id: "compare-diff",
                    values: &diff,
                    rows: labels.len(),
                    cols: labels.len(),
                    row_labels: &labels,
                    col_labels: &labels,
                    range: symmetric_range(&diff),
                    colormap: Colormap::RdBu,
                    cell,
                    hover: &hover,
                    clickable: None,
                },
            );
        }
        CompareMode::SideBySide => {
            ui.horizontal_top(|ui| {
                for (which, r, tex) in [("A", &run, &mut cache.a), ("B", &b, &mut cache.b)] {
                    ui.vertical(|ui| {
                        ui.label(RichText::new(format!("{which}: {}", r.display_name())).strong());
                        let labels: Vec<String> = (0..r.tokens.len()).map(|i| r.tokens.label(i)).collect();
                        let values = r.shown_mean(layer_idx, &heads);
                        let hover = |q: usize, k: usize, v: f32| {
                            let w = if v.is_nan() { "masked (causal)".to_string() } else { format!("weight {v:.6}") };
                            format!("{which}: query “{}” → key “{}”\n{w}", labels[q], labels[k])
                        };
                        matrix_ui(
                            ui,
                            tex,
                            super::matrix::key_of(&(which, &base_key)),
                            &MatrixSpec {
                                id: if which == "A" { "compare-a" } else { "compare-b" },
                                values: &values,
                                rows: labels.len(),
                                cols: labels.len(),
                                row_labels: &labels,
                                col_labels: &labels,
                                range: (0.0, 1.0),
                                colormap: settings.colormap,
                                cell,
                                hover: &hover,
                                clickable: None,
                            },
                        );
                    });
                }
            });
        }
    });
}
