//! Per-head statistics (Clark et al. 2019) as a layer × head grid coloured by the chosen statistic
//! — or by a head-role score (previous-token, duplicate-token, induction, first-token; Olsson et
//! al. 2022, `TransformerLens`' head detector) with the top heads named and a one-click probe of
//! repeated random tokens; hover shows the values, a click opens that head in the heatmap view.

use egui::RichText;

use crate::analysis::roles::{HeadScores, SCORE_NAMES};
use crate::analysis::{HeadStats, Statistic};
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::derive::DeriveKey;
use crate::app::widgets::matrix::{MatrixSpec, MatrixTexture, data_range, matrix_ui};

/// The statistics view's state: the grid's texture (the statistics are derived off the UI thread).
#[derive(Default)]
pub struct StatsView {
    texture: MatrixTexture,
    /// The cell side that fits the room.
    fit: crate::app::widgets::matrix::FitCache,
}

impl StatsView {
    /// Where the grid's cells are in its figure (None before it is drawn).
    pub fn grid(&self) -> Option<crate::render::CellGrid> {
        self.texture.grid()
    }
}

impl StatsView {
    /// Draws the statistics grid.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let settings = data.settings;
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("Colour by").strong());
            let has_sinks = data.run.is_some_and(|r| r.sinks.is_some());
            for stat in Statistic::ALL.into_iter().filter(|&s| s != Statistic::Sink || has_sinks) {
                let on = settings.stat == stat && settings.stats_role.is_none();
                if ui.selectable_label(on, stat.label()).on_hover_text(stat.description()).clicked() {
                    commands.push(Command::Set(Setting::Stat(stat)));
                    commands.push(Command::Set(Setting::StatsRole(None)));
                }
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("Head roles").strong()).on_hover_text(ROLES_HELP);
            for (i, (label, hint)) in ROLE_LABELS.iter().enumerate() {
                if ui.selectable_label(settings.stats_role == Some(i), *label).on_hover_text(*hint).clicked() {
                    commands.push(Command::Set(Setting::StatsRole(Some(i))));
                }
            }
            ui.separator();
            if ui
                .button("Probe: repeated random tokens")
                .on_hover_text(
                    "Run the model on a seeded probe: random tokens, then the same tokens again. Every token of the \
                     second half repeats, so duplicate-token and induction heads show even when the text has no \
                     repeats. Type in the sentence box to go back to the text.",
                )
                .clicked()
            {
                commands.push(Command::Probe);
                commands.push(Command::Set(Setting::StatsRole(Some(INDUCTION))));
            }
        });
        if data.probe_shown {
            ui.colored_label(
                ui.visuals().hyperlink_color,
                "Showing the probe (random tokens, then the same tokens again; seed 0), not the text: every view \
                 shows it until the text changes.",
            );
        }
        let key = DeriveKey::Stats { view_id: data.view_id };
        let Some(stats) = crate::app::widgets::derived_or_ask(data, commands, &key, |d| d.stats(data.view_id).cloned())
        else {
            crate::app::widgets::computing_ui(ui, "the head statistics");
            return;
        };
        let roles = match settings.stats_role {
            Some(_) if settings.words => {
                ui.colored_label(ui.visuals().warn_fg_color, "Head roles compare token ids: turn Words off.");
                return;
            }
            Some(role) => {
                let key = DeriveKey::Roles { view_id: data.view_id };
                let Some(scores) =
                    crate::app::widgets::derived_or_ask(data, commands, &key, |d| d.roles(data.view_id).cloned())
                else {
                    crate::app::widgets::computing_ui(ui, "the head-role scores");
                    return;
                };
                match scores {
                    Ok(scores) => Some((role, scores)),
                    Err(why) => {
                        ui.colored_label(ui.visuals().warn_fg_color, why);
                        return;
                    }
                }
            }
            None => None,
        };
        self.grid_ui(ui, data, &stats, roles.as_ref().map(|(r, s)| (*r, &**s)), commands);
    }

    fn grid_ui(
        &mut self,
        ui: &mut egui::Ui,
        data: &ViewData<'_>,
        stats: &HeadStats,
        roles: Option<(usize, &HeadScores)>,
        commands: &mut Commands,
    ) {
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
            crate::app::widgets::pooled_note(
                ui,
                run,
                "The statistics are of these pooled rows: entropy over spans, “itself” is the row's own span, \
                 previous and next the neighbouring spans.",
            );
        }
        if let Some((role, scores)) = roles {
            role_notes_ui(ui, role, scores);
        } else {
            ui.label(
                RichText::new(format!(
                    "{}, averaged over the {} query tokens. After Clark et al. 2019, “What does BERT look at?”. \
                 Click a cell to open that head; export writes PNG, or all statistics as CSV / JSON.",
                    crate::app::text::capitalised(settings.stat.description()),
                    stats.tokens
                ))
                .small()
                .weak(),
            );
        }
        let stat = settings.stat;
        let (values, range) = if let Some((role, scores)) = roles {
            (scores.by_name(SCORE_NAMES[role]).unwrap_or_default().to_vec(), (0.0, 1.0))
        } else {
            let values = stats.matrix(stat);
            let range = if stat.is_share() { (0.0, 1.0) } else { (0.0, data_range(&values).1.max(1e-3)) };
            (values, range)
        };
        let stat_name = roles.map_or(stat.label(), |(role, _)| ROLE_LABELS[role].0);
        let row_labels: Vec<String> = (0..stats.layers()).map(|l| format!("L{l}")).collect();
        let col_labels: Vec<String> = (0..stats.heads()).map(|h| format!("H{h}")).collect();
        let hover = |l: usize, h: usize, v: f32| {
            let all = stats
                .statistics()
                .into_iter()
                .map(|s| format!("{}: {:.4}", s.label(), stats.get(l, h, s)))
                .collect::<Vec<_>>()
                .join("\n");
            let role_lines = roles.map_or_else(String::new, |(_, scores)| {
                let at = l * scores.heads + h;
                let lines: Vec<String> = ROLE_LABELS
                    .iter()
                    .zip(SCORE_NAMES)
                    .map(|((label, _), name)| {
                        let v = scores.by_name(name).and_then(|s| s.get(at)).copied().unwrap_or(f32::NAN);
                        if v.is_nan() { format!("{label}: undefined (no repeats)") } else { format!("{label}: {v:.4}") }
                    })
                    .collect();
                format!("\n\nHead roles\n{}", lines.join("\n"))
            });
            let shown = if v.is_nan() { "undefined (no token repeats)".to_string() } else { format!("{v:.6}") };
            format!("Layer {l} head {h}\n{stat_name}: {shown}{role_lines}\n\n{all}\n\nClick to open this head")
        };
        let name = |l: usize, h: usize| format!("Statistics of layer {l} head {h}");
        let key = crate::app::widgets::matrix::key_of(&(data.view_id, stat, roles.map(|(r, _)| r)));
        let mut clicked = None;
        let spec = MatrixSpec {
            id: "head-stats",
            values: &values,
            rows: stats.layers(),
            cols: stats.heads(),
            row_labels: &row_labels,
            col_labels: &col_labels,
            axes: ("layer", "head"),
            range,
            colormap: settings.colormap,
            cell: 0.0,
            hover: &hover,
            clickable: Some(&name),
            sink: None,
        };
        // Every layer and head in the room (30 layers of SmolLM2 without scrolling), cells no
        // larger than 56 points and no smaller than 12 (then the grid scrolls).
        let room = ui.available_size() - egui::vec2(2.0, 2.0);
        let fitted = cache.fit.get(key, room, || crate::app::widgets::matrix::fit_cell(ui, &spec, room));
        let spec = MatrixSpec { cell: fitted.clamp(12.0, 56.0), ..spec };
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            clicked = matrix_ui(ui, &mut cache.texture, key, &spec).clicked;
        });
        if let Some((layer_idx, head_idx)) = clicked {
            commands.push(Command::OpenHead { layer_idx, head_idx });
        }
    }
}

/// Index of the induction score in [`SCORE_NAMES`].
const INDUCTION: usize = 2;

/// The head-role scores' labels and hover texts, in [`SCORE_NAMES`] order.
const ROLE_LABELS: [(&str, &str); 4] = [
    ("Previous token", "Mean attention from each token to the token just before it"),
    (
        "Duplicate token",
        "Mean attention from a repeated token to its last earlier occurrence (undefined without repeats)",
    ),
    (
        "Induction",
        "Mean attention from a repeated token to the token that followed its earlier occurrence: an induction head \
         copies what came next last time (Olsson et al. 2022; undefined without repeats — try the probe)",
    ),
    ("First token (sink)", SINK_HELP),
];

/// What a first-token score means.
const SINK_HELP: &str = "Mean attention to the first token. Attention sinks: a head that has nothing to do must still \
    put its softmax weight somewhere, and many park it on the first token, which every query sees and which changes \
    the output least (Xiao et al. 2023). A high score often means an idle head, not an important token.";

/// The roles row's hover text.
const ROLES_HELP: &str = "What a head does, read off the attention the model computed (TransformerLens' head detector): \
    four scores per head, each a mean attention weight in 0..1.";

/// The top heads of the chosen role, and what an undefined score or a sink means.
fn role_notes_ui(ui: &mut egui::Ui, role: usize, scores: &HeadScores) {
    let values = scores.by_name(SCORE_NAMES[role]).unwrap_or_default();
    if values.iter().all(|v| v.is_nan()) {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            "No token of this text occurs twice: duplicate-token and induction scores are undefined (grey). Press \
             “Probe: repeated random tokens” to see them.",
        );
        return;
    }
    let top: Vec<String> = scores
        .top(values, 3)
        .into_iter()
        .filter(|t| !t.2.is_nan())
        .map(|(l, h, v)| format!("L{l} H{h} ({v:.2})"))
        .collect();
    ui.label(RichText::new(format!("Top {} heads: {}", ROLE_LABELS[role].0.to_lowercase(), top.join(", "))).strong());
    let note = if role == 3 { SINK_HELP } else { ROLE_LABELS[role].1 };
    ui.label(RichText::new(note).small().weak());
}
