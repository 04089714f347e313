//! The contribution graph (Ferrando & Voita 2024, the LLM transparency tool): the routes that carry
//! information from the input tokens to one prediction — token columns, the embeddings at the
//! bottom and each layer's attention, MLP and output above, edges as wide and as opaque as their
//! share; every node shows its logit-lens top token. A click on an attention edge selects its
//! strongest head: it opens in the heatmap and its write's promoted tokens are listed.

use std::sync::Arc;

use egui::{Color32, FontId, Rect, RichText, Sense, Stroke, pos2, vec2};

use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::graph::{EdgeHead, GraphShown, graph_figure};
use crate::app::widgets::matrix::{SCALE_RANGE, fit_scale, zoom_row, zoom_step_in};
use crate::export::GraphFigure;
use crate::render::{GRAPH_CELL, edge_alpha, edge_rgb, edge_width};

/// What a laid-out graph was made from: token run, position, threshold bits.
type LayoutKey = (u64, usize, u32);

/// The graph view's state: the laid-out routes, rebuilt when the run, position or threshold change.
#[derive(Default)]
pub struct GraphView {
    layout: Option<(LayoutKey, Arc<GraphFigure>, Vec<Option<EdgeHead>>)>,
    /// How many times the routes were laid out.
    pub layouts: usize,
    /// The routes last scrolled into view (a new graph opens centred on its prediction).
    centred: Option<LayoutKey>,
    /// The scale the graph was last drawn at (of its default size).
    pub scale: f32,
}

impl GraphView {
    /// Draws the view.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let what = "The graph splits each block's write into its parts: a decoder whose blocks add to the stream.";
        let refusal = data.features.graph.refusal.as_deref();
        let (settings, position) = (data.settings, data.settings.graph.position);
        let Some((tokens, position)) = crate::app::widgets::readout_tokens(ui, data, (refusal, what), position) else {
            return;
        };
        let n = tokens.len();
        let labels: Vec<String> = tokens.tokens.iter().map(|t| crate::analysis::tokens::pretty_label(t)).collect();
        controls_ui(ui, settings, &labels, position, commands);
        let slot = &data.features.graph.slot;
        let graph = match slot.shown() {
            Some((source_id, (Ok(graph), ms))) if !slot.is_pending() => (source_id, graph, ms),
            Some((_, (Err(e), _))) if !slot.is_pending() => {
                ui.colored_label(ui.visuals().error_fg_color, crate::app::text::capitalised(e));
                return;
            }
            _ => {
                crate::app::widgets::computing_ui(ui, &format!("the contribution graph of {n} tokens"));
                return;
            }
        };
        let (source_id, graph, ms) = graph;
        let key = (*source_id, position, settings.graph.threshold.to_bits());
        if self.layout.as_ref().is_none_or(|l| l.0 != key) {
            let (figure, heads) = graph_figure(graph, &labels, (position, settings.graph.threshold), String::new());
            self.layout = Some((key, Arc::new(figure), heads));
            self.layouts += 1;
        }
        let Some((_, figure, heads)) = &self.layout else { return };
        let (figure, heads) = (Arc::clone(figure), heads.clone());
        ui.label(
            RichText::new(format!(
                "The routes to the prediction at position {position} “{}”: {} edges above {:.2} of the information at \
                 their node (Ferrando & Voita 2024). Blue: attention, orange: MLP, grey: residual. Each node shows its \
                 logit-lens top token. Click an attention edge's dot to open its strongest head. Computed in {ms:.0} ms.",
                labels[position],
                figure.edges.len(),
                settings.graph.threshold
            ))
            .small()
            .weak(),
        );
        let graph_h = (ui.available_height() - 90.0).max(160.0);
        // Fit (the default, until zoomed): the whole graph in its room.
        let fitted = fit_scale(graph_size(&figure, 1.0), vec2(ui.available_width() - 8.0, graph_h - 30.0));
        let mut zoom = settings.zoom.graph;
        zoom_row(ui, &mut zoom, fitted, (SCALE_RANGE, "scale"));
        let scale = zoom.unwrap_or(fitted);
        self.scale = scale;
        let centre = self.centred != Some(key);
        self.centred = Some(key);
        egui::ScrollArea::both().id_salt("graph").max_height(graph_h).auto_shrink([false, true]).show(ui, |ui| {
            let (prediction, over) = graph_ui(ui, settings, (&figure, &heads, scale), commands);
            // A new graph opens on the prediction's routes, not on the first tokens' empty space.
            if centre && let Some(at) = prediction {
                ui.scroll_to_rect(at, Some(egui::Align::Center));
            }
            if over {
                zoom = zoom_step_in(ui, scale, SCALE_RANGE).or(zoom);
            }
        });
        commands.set_zoom(settings, |z| &mut z.graph, zoom);
        ui.separator();
        head_ui(ui, data, graph, &labels, commands);
    }
}

/// Position and threshold.
fn controls_ui(
    ui: &mut egui::Ui,
    settings: &crate::app::state::Settings,
    labels: &[String],
    position: usize,
    commands: &mut Commands,
) {
    ui.horizontal_wrapped(|ui| {
        if let Some(pos) = crate::app::widgets::position_ui(
            ui,
            "Prediction at",
            "The output position traced (← / →)",
            labels,
            position,
        ) {
            commands.push(Command::Set(Setting::Graph(crate::app::graph::GraphSettings {
                position: Some(pos),
                ..settings.graph.clone()
            })));
        }
        ui.separator();
        let mut threshold = settings.graph.threshold;
        let label = ui.label("Threshold");
        ui.add(egui::Slider::new(&mut threshold, 0.0..=0.5).step_by(0.005))
            .labelled_by(label.id)
            .on_hover_text("Edges carrying less than this share of their node's information are left out");
        if threshold.to_bits() != settings.graph.threshold.to_bits() {
            commands.push(Command::Set(Setting::Graph(crate::app::graph::GraphSettings {
                threshold,
                ..settings.graph.clone()
            })));
        }
    });
}

/// The width of the layers' names left of the graph.
const LEFT_W: f32 = 60.0;

/// The size of the graph drawn at `scale` of its default size.
fn graph_size(figure: &GraphFigure, scale: f32) -> egui::Vec2 {
    let (col_w, row_h) = (GRAPH_CELL.0 * scale, GRAPH_CELL.1 * scale);
    vec2(LEFT_W + figure.tokens.len() as f32 * col_w, (2.0 * figure.layers as f32 + 1.0) * row_h + 24.0)
}

/// Draws the laid-out graph at `scale` of its default size; a click on an attention edge's dot
/// selects its strongest head. Where the prediction's routes are, and whether the pointer is
/// over the graph.
fn graph_ui(
    ui: &mut egui::Ui,
    settings: &crate::app::state::Settings,
    (figure, heads, scale): (&GraphFigure, &[Option<EdgeHead>], f32),
    commands: &mut Commands,
) -> (Option<Rect>, bool) {
    let selected = settings.graph.head;
    let (col_w, row_h) = (GRAPH_CELL.0 * scale, GRAPH_CELL.1 * scale);
    let left_w = LEFT_W;
    let levels = 2 * figure.layers;
    let (rect, graph) = ui.allocate_exact_size(graph_size(figure, scale), Sense::hover());
    let painter = ui.painter_at(rect);
    let text = ui.visuals().text_color();
    let muted = ui.visuals().weak_text_color();
    let bottom = rect.top() + levels as f32 * row_h + row_h / 2.0;
    let at = |column: f32, level: f32| pos2(rect.left() + left_w + (column + 0.5) * col_w, bottom - level * row_h);
    let font = FontId::proportional((10.0 * scale).clamp(5.0, 10.0));
    for l in 0..figure.layers {
        let p = at(0.0, 2.0 * l as f32 + 2.0);
        painter.text(pos2(rect.left() + 4.0, p.y), egui::Align2::LEFT_CENTER, format!("L{l}"), font.clone(), muted);
    }
    painter.text(pos2(rect.left() + 4.0, bottom), egui::Align2::LEFT_CENTER, "emb", font.clone(), muted);
    for edge in &figure.edges {
        let (Some(a), Some(b)) = (figure.nodes.get(edge.from), figure.nodes.get(edge.to)) else { continue };
        let [r, g, bl] = edge_rgb(edge.kind);
        let color = Color32::from_rgba_unmultiplied(r, g, bl, (edge_alpha(edge.weight) * 255.0) as u8);
        painter
            .line_segment([at(a.column, a.level), at(b.column, b.level)], Stroke::new(edge_width(edge.weight), color));
    }
    for node in &figure.nodes {
        let p = at(node.column, node.level);
        painter.circle_filled(p, 3.0, text);
        let galley = crate::app::widgets::matrix::fitted_label(&painter, &node.label, &font, text, col_w * 0.6);
        painter.galley(pos2(p.x + 5.0, p.y - galley.size().y - 1.0), galley, text);
    }
    let token_font = FontId::proportional((12.0 * scale).clamp(5.0, 12.0));
    for (i, token) in figure.tokens.iter().enumerate() {
        let p = at(i as f32, 0.0);
        let galley = crate::app::widgets::matrix::fitted_label(&painter, token, &token_font, text, col_w - 4.0);
        painter.galley(pos2(p.x - galley.size().x / 2.0, bottom + row_h / 2.0), galley, text);
    }
    // A dot in the middle of each attention edge: hover names it, a click selects its head.
    for (i, (edge, head)) in figure.edges.iter().zip(heads).enumerate() {
        let (Some(a), Some(b), Some(head)) = (figure.nodes.get(edge.from), figure.nodes.get(edge.to), head) else {
            continue;
        };
        let mid = at(f32::midpoint(a.column, b.column), f32::midpoint(a.level, b.level));
        if !ui.clip_rect().contains(mid) {
            continue;
        }
        let hit = Rect::from_center_size(mid, vec2(10.0, 10.0));
        let resp = ui.interact(hit, ui.scope_id().with(("graph-edge", i)), Sense::click());
        let name = format!("Edge {}", edge.name);
        resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &name));
        let on = selected == Some(*head);
        let [r, g, bl] = edge_rgb(edge.kind);
        painter.circle_filled(mid, if on || resp.hovered() { 5.0 } else { 3.0 }, Color32::from_rgb(r, g, bl));
        if on {
            painter.circle_stroke(mid, 6.0, Stroke::new(2.0, text));
        }
        if resp.clicked() {
            commands.push(Command::Set(Setting::Graph(crate::app::graph::GraphSettings {
                head: Some(*head),
                ..settings.graph.clone()
            })));
            crate::app::widgets::select_head(settings, (head.0, head.1), commands);
        }
        resp.on_hover_text_at_pointer(format!(
            "{}\nproportion {:.4}\nClick to select this head",
            edge.name, edge.weight
        ));
    }
    // Where the prediction is: the routes' topmost node (the last block's output at its position),
    // with the room of a few columns and levels around it.
    let prediction = figure
        .nodes
        .iter()
        .max_by(|a, b| a.level.total_cmp(&b.level))
        .map(|top| Rect::from_center_size(at(top.column, top.level), vec2(col_w * 3.0, row_h * 3.0)));
    (prediction, graph.contains_pointer())
}

/// The head selected on an edge: open it in the heatmap, what its write promotes.
fn head_ui(ui: &mut egui::Ui, data: &ViewData<'_>, graph: &GraphShown, labels: &[String], commands: &mut Commands) {
    let layers = graph.run.graph.layers.len();
    let Some((layer_idx, head_idx, position)) =
        data.settings.graph.head.filter(|&(l, _, p)| l < layers && p < labels.len())
    else {
        ui.label(RichText::new("Click the dot of an attention edge to select its strongest head.").weak());
        return;
    };
    let title = format!("Layer {layer_idx} head {head_idx}, writing into “{}”", labels[position]);
    crate::app::widgets::head_effect_ui(ui, data, (layer_idx, head_idx, position), &title, commands);
}

impl super::Feature {
    /// The figure the graph view exports: the routes to the traced prediction.
    pub fn figure(&self, data: &ViewData<'_>) -> crate::export::Figure {
        let settings = &data.settings.graph;
        let labels: Vec<String> = data
            .token_run
            .map(|r| r.tokens.tokens.iter().map(|x| crate::analysis::tokens::pretty_label(x)).collect())
            .unwrap_or_default();
        let n = labels.len();
        let position = settings.position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
        let name = data.model.map_or("model", |m| m.name.as_str());
        let figure = match self.slot.shown() {
            // Of the tokens shown (not of a text since changed, until its own graph comes).
            Some((_, (Ok(graph), _))) if graph.run.graph.tokens == n => {
                let title = format!(
                    "{name} · contribution graph to the prediction at position {position} “{}” · threshold {:.2}",
                    labels.get(position).map_or("", String::as_str),
                    settings.threshold
                );
                graph_figure(graph, &labels, (position, settings.threshold), title).0
            }
            _ => crate::export::GraphFigure {
                title: format!("{name} · contribution graph (not computed)"),
                tokens: labels,
                layers: 0,
                nodes: Vec::new(),
                edges: Vec::new(),
            },
        };
        crate::export::Figure::Graph(Arc::new(figure))
    }
}
