//! Per-head statistics (Clark et al. 2019) as a layer × head grid coloured by the chosen statistic;
//! hover shows the value, a click opens that head in the heatmap view.

use egui::RichText;

use super::matrix::{MatrixSpec, MatrixTexture, data_range, matrix_ui};
use crate::analysis::{HeadStats, Statistic};
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::derive::DeriveKey;

/// The statistics view's state: the grid's texture (the statistics are derived off the UI thread).
#[derive(Default)]
pub struct StatsView {
    texture: MatrixTexture,
}

impl StatsView {
    /// Draws the statistics grid.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let settings = data.settings;
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("Colour by").strong());
            for stat in Statistic::ALL {
                if ui.selectable_label(settings.stat == stat, stat.label()).on_hover_text(stat.description()).clicked()
                {
                    commands.push(Command::Set(Setting::Stat(stat)));
                }
            }
        });
        let key = DeriveKey::Stats { view_id: data.view_id };
        let Some(stats) = super::derived_or_ask(data, commands, &key, |d| d.stats(data.view_id).cloned()) else {
            super::computing_ui(ui, "the head statistics");
            return;
        };
        self.grid_ui(ui, data, &stats, commands);
    }

    fn grid_ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, stats: &HeadStats, commands: &mut Commands) {
        let settings = data.settings;
        let cache = self;
        if let Some(stack) = data.stack {
            ui.label(RichText::new(format!("Statistics of the {}", stack.describe())).strong());
            if stack == crate::analysis::Stack::Cross {
                ui.label(
                    RichText::new(
                        "Shares to [CLS]/[SEP]/punctuation are over the source tokens; the token itself, the \
                         previous and the next token are not defined across two sequences (shown as masked).",
                    )
                    .small()
                    .weak(),
                );
            }
        }
        if let Some(run) = data.run {
            super::pooled_note(
                ui,
                run,
                "The statistics are of these pooled rows: entropy over spans, “itself” is the row's own span, \
                 previous and next the neighbouring spans.",
            );
        }
        ui.label(
            RichText::new(format!(
                "{}, averaged over the {} query tokens. After Clark et al. 2019, “What does BERT look at?”. \
             Click a cell to open that head; export writes PNG, or all statistics as CSV / JSON.",
                super::capitalised(settings.stat.description()),
                stats.tokens
            ))
            .small()
            .weak(),
        );
        let stat = settings.stat;
        let values = stats.matrix(stat);
        let range = if stat.is_share() { (0.0, 1.0) } else { (0.0, data_range(&values).1.max(1e-3)) };
        let row_labels: Vec<String> = (0..stats.layers()).map(|l| format!("L{l}")).collect();
        let col_labels: Vec<String> = (0..stats.heads()).map(|h| format!("H{h}")).collect();
        let hover = |l: usize, h: usize, v: f32| {
            let all = Statistic::ALL
                .iter()
                .map(|&s| format!("{}: {:.4}", s.label(), stats.get(l, h, s)))
                .collect::<Vec<_>>()
                .join("\n");
            format!("Layer {l} head {h}\n{}: {v:.6}\n\n{all}\n\nClick to open this head", stat.label())
        };
        let name = |l: usize, h: usize| format!("Statistics of layer {l} head {h}");
        let cell = ((ui.available_width() - 150.0) / stats.heads().max(1) as f32).clamp(24.0, 56.0);
        let key = super::matrix::key_of(&(data.view_id, stat));
        let mut clicked = None;
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            clicked = matrix_ui(
                ui,
                &mut cache.texture,
                key,
                &MatrixSpec {
                    id: "head-stats",
                    values: &values,
                    rows: stats.layers(),
                    cols: stats.heads(),
                    row_labels: &row_labels,
                    col_labels: &col_labels,
                    range,
                    colormap: settings.colormap,
                    cell,
                    hover: &hover,
                    clickable: Some(&name),
                },
            )
            .clicked;
        });
        if let Some((layer_idx, head_idx)) = clicked {
            commands.push(Command::OpenHead { layer_idx, head_idx });
        }
    }
}
