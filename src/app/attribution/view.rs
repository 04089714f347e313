//! Direct logit attribution (`TransformerLens`'s `decompose_resid` + `apply_ln_to_stack`): how much
//! each head, each MLP and the embeddings wrote towards one token's logit at one position, as a
//! layers × heads grid (diverging colours, symmetric range) with the attention bias and the MLP
//! of each layer as their own columns and the embeddings as their own row. A click selects a head
//! and lists the tokens its write promotes and suppresses; the selected head opens in the heatmap.

use std::sync::Arc;

use egui::{RichText, vec2};

use crate::app::attribution::{attribution_table, target_text};
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::widgets::matrix::{
    CELL_RANGE, FitCache, MatrixSpec, MatrixTexture, fit_cell, matrix_ui, symmetric_range, zoom_row, zoom_step,
};
use crate::render::Colormap;

/// The attribution view's state: the grid's texture, the boxes being typed.
#[derive(Default)]
pub struct AttributionView {
    texture: MatrixTexture,
    /// The cell side the grid was last fitted at.
    fit: FitCache,
}

impl AttributionView {
    /// Draws the view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let what = "Direct logit attribution reads each part's write through the model's final norm and its \
                    language-model head: a decoder with its head.";
        let refusal = data.features.lens.refusal.as_deref();
        let position = data.settings.attribution.position;
        let Some((tokens, position)) = crate::app::widgets::readout_tokens(ui, data, (refusal, what), position) else {
            return;
        };
        let (settings, n) = (data.settings, tokens.len());
        controls_ui(ui, data, tokens, position, commands);
        let dla = &data.features.attribution.dla;
        let Some((key, (result, ms))) = dla.shown() else {
            crate::app::widgets::computing_ui(ui, "the attribution");
            return;
        };
        if dla.is_pending() {
            crate::app::widgets::computing_ui(ui, "the attribution");
        }
        let a = match result {
            Ok(a) => a,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, crate::app::text::capitalised(e));
                return;
            }
        };
        let label = crate::analysis::tokens::pretty_label(&tokens.tokens[key.position.min(n - 1)]);
        ui.label(
            RichText::new(format!(
                "Logit of {} at position {} “{label}”: Σ terms = {:.4} = logit {:.4}",
                target_text(a),
                a.position,
                a.total(),
                a.logit
            ))
            .strong(),
        );
        ui.label(
            RichText::new(format!(
                "Embeddings {:+.4} · attention biases {:+.4} · MLPs {:+.4} · heads {:+.4} · constant (head bias, final \
                 norm bias) {:+.4}. Each part's write through the final norm, linearised at this input, and the \
                 unembedding row (TransformerLens' decompose_resid). Click a head to see what its write promotes; \
                 computed in {ms:.0} ms.",
                a.embeddings,
                a.attention_biases.iter().sum::<f32>(),
                a.mlps.iter().sum::<f32>(),
                a.heads.iter().sum::<f32>(),
                a.lm_head_bias
            ))
            .small()
            .weak(),
        );
        let table = attribution_table(a, String::new());
        let (rows, cols, heads) = (table.row_labels.len(), table.col_labels.len(), a.heads_per_layer);
        let range = symmetric_range(&table.values);
        let hover = |r: usize, c: usize, v: f32| {
            let what = match (r, c) {
                (r, _) if r == a.layers => "The embeddings".to_string(),
                (l, c) if c < heads => format!("Layer {l} head {c}"),
                (l, c) if c == heads => format!("Layer {l} attention output bias (constant)"),
                (l, _) => format!("Layer {l} MLP"),
            };
            let share = if a.logit.abs() > 1e-9 {
                format!(" ({:.1}% of the logit)", 100.0 * v / a.logit)
            } else {
                String::new()
            };
            let click = if r < a.layers && c < heads { "\n\nClick to see what this head promotes" } else { "" };
            format!("{what}\ncontribution {v:+.6}{share}{click}")
        };
        let name = |r: usize, c: usize| format!("Attribution of {} {}", table.row_labels[r], table.col_labels[c]);
        let key_hash = crate::app::widgets::matrix::key_of(&(key, rows, cols));
        let spec = MatrixSpec {
            id: "dla",
            values: &table.values,
            rows,
            cols,
            row_labels: &table.row_labels,
            col_labels: &table.col_labels,
            axes: ("layer", "head"),
            range,
            colormap: Colormap::RdBu,
            cell: 0.0,
            hover: &hover,
            clickable: Some(&name),
            sink: None,
        };
        // The grid keeps room for a head's effect under it.
        let grid_h = (ui.available_height() - 170.0).max(120.0);
        // Fit (the default, until zoomed): the whole grid in the room, 30 layers too.
        let mut zoom = settings.zoom.attribution;
        let room = vec2(ui.available_width(), grid_h - 40.0);
        let fitted = self.fit.get(key_hash, room, || fit_cell(ui, &spec, room));
        zoom_row(ui, &mut zoom, fitted, (CELL_RANGE, "cell size"));
        let spec = MatrixSpec { cell: zoom.unwrap_or(fitted), ..spec };
        let mut clicked = None;
        egui::ScrollArea::both().id_salt("dla-grid").max_height(grid_h).auto_shrink([false, true]).show(ui, |ui| {
            let shown = matrix_ui(ui, &mut self.texture, key_hash, &spec);
            // Over the grid (its cells are widgets of their own, hovered on top of it).
            if shown.response.contains_pointer() {
                zoom = zoom_step(ui, spec.cell).or(zoom);
            }
            clicked = shown.clicked;
        });
        commands.set_zoom(settings, |z| &mut z.attribution, zoom);
        if let Some((layer_idx, head_idx)) = clicked.filter(|&(r, c)| r < a.layers && c < heads) {
            commands.push(Command::Set(Setting::Attribution(crate::app::state::AttributionSettings {
                head: Some((layer_idx, head_idx)),
                ..settings.attribution.clone()
            })));
            crate::app::widgets::select_head(settings, (layer_idx, head_idx), commands);
        }
        ui.separator();
        effect_ui(ui, data, (a.layers, heads), commands);
    }
}

/// Position, target and "versus" boxes.
fn controls_ui(
    ui: &mut egui::Ui,
    data: &ViewData<'_>,
    tokens: &crate::analysis::tokens::Tokens,
    position: usize,
    commands: &mut Commands,
) {
    let settings = data.settings;
    ui.horizontal_wrapped(|ui| {
        let labels: Vec<String> = tokens.tokens.iter().map(|t| crate::analysis::tokens::pretty_label(t)).collect();
        let hint = "The position whose next-token prediction is attributed (← / → step)";
        if let Some(pos) = crate::app::widgets::position_ui(ui, "Position", hint, &labels, position) {
            commands.push(Command::Set(Setting::Attribution(crate::app::state::AttributionSettings {
                position: Some(pos),
                ..settings.attribution.clone()
            })));
        }
        ui.separator();
        let mut target = settings.attribution.target.clone();
        let label = ui.label("Target token");
        ui.add(egui::TextEdit::singleline(&mut target).desired_width(110.0).hint_text("top prediction"))
            .labelled_by(label.id)
            .on_hover_text("The token whose logit is split (empty: the model's top prediction), e.g. \" Paris\"");
        if target != settings.attribution.target {
            commands.push(Command::Set(Setting::Attribution(crate::app::state::AttributionSettings {
                target,
                ..settings.attribution.clone()
            })));
        }
        let mut versus = settings.attribution.versus.clone();
        let label = ui.label("− versus");
        ui.add(egui::TextEdit::singleline(&mut versus).desired_width(110.0).hint_text("none"))
            .labelled_by(label.id)
            .on_hover_text("A token subtracted: the attribution of the logit difference target − versus");
        if versus != settings.attribution.versus {
            commands.push(Command::Set(Setting::Attribution(crate::app::state::AttributionSettings {
                versus,
                ..settings.attribution.clone()
            })));
        }
    });
}

/// The selected head: open it in the heatmap, the tokens its write promotes and suppresses.
fn effect_ui(ui: &mut egui::Ui, data: &ViewData<'_>, (layers, heads): (usize, usize), commands: &mut Commands) {
    let Some((layer_idx, head_idx)) = data.settings.attribution.head.filter(|&(l, h)| l < layers && h < heads) else {
        ui.label(RichText::new("Click a head to see the tokens its write promotes and suppresses.").weak());
        return;
    };
    let position = data.features.attribution.dla.shown().map_or(0, |d| d.0.position);
    let title = format!("Layer {layer_idx} head {head_idx}");
    crate::app::widgets::head_effect_ui(ui, data, (layer_idx, head_idx, position), &title, commands);
}

impl super::Feature {
    /// The figure the attribution view exports: the grid of terms with what it is of.
    pub fn figure(&self, data: &ViewData<'_>) -> crate::export::Figure {
        let table = match self.dla.shown() {
            Some((_, (Ok(a), _))) => {
                let name = data.model.map_or("model", |m| m.name.as_str());
                let label = data
                    .token_run
                    .filter(|r| a.position < r.tokens.len())
                    .map(|r| r.label(a.position))
                    .unwrap_or_default();
                let title = format!(
                    "{name} · direct logit attribution of {} at position {} “{label}” · Σ terms = {:.3}, logit {:.3}",
                    target_text(a),
                    a.position,
                    a.total(),
                    a.logit
                );
                attribution_table(a, title)
            }
            _ => crate::export::Table {
                title: String::new(),
                row_labels: Vec::new(),
                col_labels: Vec::new(),
                values: Vec::new(),
            },
        };
        crate::export::Figure::Attribution(Arc::new(table))
    }
}
