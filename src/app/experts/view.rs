//! The experts view: layers × tokens, each cell the experts the router chose for that token in
//! that layer with their weights, on the colour of the first (a colour per expert); hover a cell
//! for the router's whole distribution; beside each layer a histogram of its experts' load over
//! the text; a click on a token shows its route through the layers.

use egui::{Color32, RichText, Sense, Stroke, pos2, vec2};

use crate::analysis::experts::{LayerRoutes, Routes};
use crate::analysis::tokens::pretty_label;
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::experts::{ExpertsSettings, cell_text, experts_figure};
use crate::app::widgets::matrix::{SCALE_RANGE, fit_scale, zoom_row, zoom_step_in};
use crate::export::Figure;

/// The experts view (it keeps nothing between frames: the routes are the feature's).
#[derive(Default)]
pub struct ExpertsView;

/// Expert `e`'s colour (hues spread by the golden ratio, so neighbouring ids differ).
pub fn expert_colour(e: u32) -> Color32 {
    let hue = (f32::from(u16::try_from(e).unwrap_or(u16::MAX)) * 0.618_034).fract();
    egui::ecolor::Hsva::new(hue, 0.5, 0.9, 1.0).into()
}

/// The route of token `t` through the layers, in words.
pub fn route_text(routes: &Routes, t: usize) -> String {
    routes
        .route_of(t)
        .iter()
        .enumerate()
        .map(
            |(l, (chosen, weights))| {
                if chosen.is_empty() { format!("L{l} dense") } else { format!("L{l} {}", cell_text(chosen, weights)) }
            },
        )
        .collect::<Vec<_>>()
        .join("  →  ")
}

/// The router's distribution of one cell, for its hover text: every expert, the chosen marked.
fn distribution_text(layer: &LayerRoutes, l: usize, t: usize, token: &str) -> String {
    let probs = layer.probs_of(t);
    let chosen = layer.chosen_of(t);
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    let lines: Vec<String> = order
        .iter()
        .map(|&e| {
            let mark = match chosen.iter().position(|&c| c as usize == e) {
                Some(j) => format!("  ← chosen, weight {:.4}", layer.weights_of(t)[j]),
                None => String::new(),
            };
            format!("expert {e}: {:.4}{mark}", probs[e])
        })
        .collect();
    format!("Layer {l}, token {t} “{token}”: the router's distribution\n{}", lines.join("\n"))
}

impl ExpertsView {
    /// Draws the view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let feature = &data.features.experts;
        ui.label(
            RichText::new(
                "A mixture of experts sends each token to a few of its experts in every layer. Each cell: the \
                 experts the router chose, with the weights their outputs are multiplied by (largest first), on \
                 the colour of the first. Hover a cell for the router's whole distribution; beside each layer, how \
                 many tokens chose each expert; click a token for its route through the layers.",
            )
            .small()
            .weak(),
        );
        if let Some(why) = &feature.refusal {
            ui.label(why);
            return;
        }
        if feature.slot.is_pending() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("routing…");
            });
            return;
        }
        let Some((_, result)) = feature.slot.shown() else { return };
        let routes = match result {
            Ok(r) => r,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, crate::app::text::capitalised(e));
                return;
            }
        };
        let Some(run) = data.token_run else { return };
        let labels: Vec<String> = run.tokens.tokens.iter().map(|t| pretty_label(t)).collect();
        let n = labels.len().min(routes.tokens());
        let settings = &data.settings.experts;
        let selected = settings.token.filter(|&t| t < n);
        // The tokens: a click picks one (again: none).
        ui.horizontal_wrapped(|ui| {
            ui.label("Token:");
            for (t, label) in labels.iter().enumerate().take(n) {
                let on = selected == Some(t);
                if ui.selectable_label(on, format!("{t}: {label}")).on_hover_text("Show this token's route").clicked() {
                    let token = if on { None } else { Some(t) };
                    commands.push(Command::Set(Setting::Experts(ExpertsSettings { token })));
                }
            }
        });
        if let Some(t) = selected {
            ui.label(
                RichText::new(format!("Route of “{}” (token {t}):  {}", labels[t], route_text(routes, t))).strong(),
            );
        }
        ui.add_space(4.0);
        // Fit (the default, until zoomed): every layer and token in the room, at half size at least.
        let fitted = fit_scale(grid_size(routes, n, 1.0), ui.available_size() - vec2(8.0, 40.0));
        let mut zoom = data.settings.zoom.experts;
        zoom_row(ui, &mut zoom, fitted, (SCALE_RANGE, "scale"));
        let scale = zoom.unwrap_or(fitted);
        egui::ScrollArea::both().id_salt("experts-grid").auto_shrink([false, true]).show(ui, |ui| {
            if grid_ui(ui, routes, (&labels[..n], selected), scale) {
                zoom = zoom_step_in(ui, scale, SCALE_RANGE).or(zoom);
            }
        });
        commands.set_zoom(data.settings, |z| &mut z.experts, zoom);
    }
}

/// The grid's parts at `scale` of their default size: row height, header height, a cell's
/// width, the load histogram's width, the row labels' width (histogram included).
fn grid_parts(routes: &Routes, scale: f32) -> (f32, f32, f32, f32, f32) {
    let experts = routes.experts().max(1);
    let top_k = routes.layers.iter().flatten().map(|l| l.top_k).max().unwrap_or(1);
    let (row_h, head_h) = (22.0 * scale, 18.0 * scale);
    let cell_w = (40.0 * top_k as f32).clamp(70.0, 180.0) * scale;
    let hist_w = (experts as f32 * 6.0).clamp(48.0, 240.0) * scale;
    (row_h, head_h, cell_w, hist_w, 64.0 * scale + hist_w + 12.0 * scale)
}

/// The size of the grid of `n` tokens at `scale`.
fn grid_size(routes: &Routes, n: usize, scale: f32) -> egui::Vec2 {
    let (row_h, head_h, cell_w, _, label_w) = grid_parts(routes, scale);
    vec2(label_w + cell_w * n as f32, head_h + row_h * routes.layers.len() as f32)
}

/// The grid of cells at `scale` of its default size, and the load histogram beside each row;
/// whether the pointer is over it.
fn grid_ui(ui: &mut egui::Ui, routes: &Routes, (labels, selected): (&[String], Option<usize>), scale: f32) -> bool {
    let n = labels.len();
    // Row labels, then each layer's load histogram, then the cells.
    let (row_h, head_h, cell_w, hist_w, label_w) = grid_parts(routes, scale);
    let hist_x = 64.0 * scale;
    let (rect, response) = ui.allocate_exact_size(grid_size(routes, n, scale), Sense::hover());
    let painter = ui.painter_at(rect);
    let text = ui.visuals().text_color();
    let font = egui::FontId::proportional((11.0 * scale).clamp(5.0, 11.0));
    let origin = rect.min;
    let load_title = egui::Align2::CENTER_CENTER;
    painter.text(
        pos2(origin.x + hist_x + hist_w / 2.0, origin.y + head_h / 2.0),
        load_title,
        "load",
        font.clone(),
        text,
    );
    for (t, label) in labels.iter().enumerate() {
        let x = origin.x + label_w + cell_w * (t as f32 + 0.5);
        let colour = if selected == Some(t) { ui.visuals().strong_text_color() } else { text };
        painter.text(pos2(x, origin.y + head_h / 2.0), egui::Align2::CENTER_CENTER, label, font.clone(), colour);
    }
    let mut hovered = None;
    for (l, layer) in routes.layers.iter().enumerate() {
        let y = origin.y + head_h + row_h * l as f32;
        let dense = layer.is_none();
        let row_label = if dense { format!("L{l} dense") } else { format!("L{l}") };
        painter.text(pos2(origin.x + 4.0, y + row_h / 2.0), egui::Align2::LEFT_CENTER, row_label, font.clone(), text);
        let Some(layer) = layer else { continue };
        for t in 0..n {
            let cell = egui::Rect::from_min_size(pos2(origin.x + label_w + cell_w * t as f32, y), vec2(cell_w, row_h))
                .shrink(1.0);
            let chosen = layer.chosen_of(t);
            painter.rect_filled(cell, 2.0, expert_colour(chosen[0]));
            if selected == Some(t) {
                painter.rect_stroke(cell, 2.0, Stroke::new(2.0, text), egui::StrokeKind::Inside);
            }
            let words = cell_text(chosen, layer.weights_of(t));
            painter.text(cell.center(), egui::Align2::CENTER_CENTER, words, font.clone(), Color32::BLACK);
            if response.hover_pos().is_some_and(|p| cell.contains(p)) {
                hovered = Some((l, t));
            }
        }
        // The load histogram: one bar per expert, its height the share of tokens that chose it.
        let load = layer.load();
        let most = load.iter().copied().max().unwrap_or(1).max(1) as f32;
        let x0 = origin.x + hist_x;
        let bar_w = hist_w / layer.experts.max(1) as f32;
        for (e, &count) in load.iter().enumerate() {
            let h = (row_h - 4.0) * count as f32 / most;
            let bar = egui::Rect::from_min_max(
                pos2(x0 + bar_w * e as f32, y + row_h - 2.0 - h),
                pos2(x0 + bar_w * (e as f32 + 1.0) - 1.0, y + row_h - 2.0),
            );
            painter.rect_filled(bar, 0.0, expert_colour(u32::try_from(e).unwrap_or(u32::MAX)));
        }
    }
    if let Some((l, t)) = hovered
        && let Some(layer) = &routes.layers[l]
    {
        let words = distribution_text(layer, l, t, &labels[t]);
        response.clone().on_hover_ui_at_pointer(|ui| {
            ui.label(words);
        });
    } else if response.hovered()
        && let Some(pos) = response.hover_pos()
        && (origin.x + hist_x..origin.x + hist_x + hist_w).contains(&pos.x)
    {
        let l = ((pos.y - origin.y - head_h) / row_h).floor();
        if l >= 0.0
            && let Some(Some(layer)) = routes.layers.get(l as usize)
        {
            let load: Vec<String> = layer.load().iter().enumerate().map(|(e, c)| format!("expert {e}: {c}")).collect();
            let words = format!("Layer {l}: tokens choosing each expert\n{}", load.join("\n"));
            response.clone().on_hover_ui_at_pointer(|ui| {
                ui.label(words);
            });
        }
    }
    response.contains_pointer()
}

impl super::Feature {
    /// The figure the experts view exports: layers × tokens, each cell the chosen experts and
    /// their weights, coloured by the first; its numbers every chosen expert and weight.
    pub fn figure(&self, data: &ViewData<'_>) -> Figure {
        let labels: Vec<String> = data
            .token_run
            .map(|r| r.tokens.tokens.iter().map(|x| crate::analysis::tokens::pretty_label(x)).collect())
            .unwrap_or_default();
        let name = data.model.map_or("model", |m| m.name.as_str());
        let routes = match self.slot.shown() {
            Some((_, Ok(r))) => Some(r.as_ref()),
            _ => None,
        };
        experts_figure(routes, &labels, name)
    }
}
