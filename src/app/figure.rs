//! The figure the current view exports (Export…, Copy image): what the view shows, as the
//! figure `render/` draws and `export` writes.

use std::sync::Arc;

use super::core::AttnvizApp;
use super::rollout::FlowKey;
use super::state::{CompareMode, PeFigure, RolloutMode, View};
use super::worker::ModelInfo;
use crate::export::{Figure, Style};
use crate::render::Theme;

impl AttnvizApp {
    /// The figure the current view would export.
    pub fn current_figure(&self) -> Figure {
        // What the views show: the layer and heads limited to the shown run (an encoder–decoder's
        // decoder may have fewer layers than its encoder).
        let (layer_idx, heads) = if self.session.run.is_some() {
            self.view_data().selection()
        } else {
            (self.settings.layer_idx, self.settings.selected_heads())
        };
        match self.settings.view {
            View::Head => Figure::HeadView {
                layer_idx,
                head_idxs: heads,
                selected_token: self.session.pinned,
                threshold: self.settings.threshold,
            },
            View::Model => Figure::ModelGrid,
            View::Heatmap => Figure::Heatmap { layer_idx, head_idxs: heads },
            View::Neuron => Figure::Neuron {
                layer_idx,
                head_idx: heads.first().copied().unwrap_or(0),
                query_pos: self.settings.neuron_query,
            },
            View::Stats => match self.settings.stats_role {
                Some(role) => Figure::Roles(role),
                None => Figure::Stats(self.settings.stat),
            },
            View::Rollout => {
                let flow = match self.features.flow.of(&self.flow_key()) {
                    Some(f) if self.settings.rollout.mode == RolloutMode::Flow => Some(Arc::clone(&f.values)),
                    _ => None,
                };
                Figure::Rollout { layer_idx, head_idxs: heads, flow }
            }
            View::Compare => match &self.features.compare.run_b {
                Some(b) => Figure::Compare {
                    layer_idx,
                    head_idxs: heads,
                    other: crate::export::SharedRun(Arc::clone(b)),
                    // As in the view: different token counts fall back to side by side.
                    difference: self.settings.compare.mode == CompareMode::Difference
                        && self.session.run.as_ref().is_some_and(|a| a.tokens.len() == b.tokens.len()),
                },
                None => Figure::Heatmap { layer_idx, head_idxs: heads },
            },
            View::Attribution => match self.features.attribution.dla.shown() {
                Some((_, (Ok(a), _))) => {
                    let name = self.session.model.as_ref().map_or("model", |m| m.name.as_str());
                    let label = self.session.token_run.as_ref().map(|t| t.run.label(a.position)).unwrap_or_default();
                    let title = format!(
                        "{name} · direct logit attribution of {} at position {} “{label}” · Σ terms = {:.3}, logit {:.3}",
                        super::attribution::target_text(a),
                        a.position,
                        a.total(),
                        a.logit
                    );
                    Figure::Attribution(Arc::new(super::attribution::attribution_table(a, title)))
                }
                _ => Figure::Attribution(Arc::new(crate::export::Table {
                    title: String::new(),
                    row_labels: Vec::new(),
                    col_labels: Vec::new(),
                    values: Vec::new(),
                })),
            },
            View::Graph => {
                let s = &self.session;
                let labels: Vec<String> = s
                    .token_run
                    .as_ref()
                    .map(|t| t.run.tokens.tokens.iter().map(|x| crate::analysis::tokens::pretty_label(x)).collect())
                    .unwrap_or_default();
                let n = labels.len();
                let position = self.settings.graph.position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
                let name = s.model.as_ref().map_or("model", |m| m.name.as_str());
                let figure = match self.features.graph.slot.shown() {
                    Some((_, (Ok(graph), _))) => {
                        let title = format!(
                            "{name} · contribution graph to the prediction at position {position} “{}” · threshold {:.2}",
                            labels.get(position).map_or("", String::as_str),
                            self.settings.graph.threshold
                        );
                        super::graph::graph_figure(graph, &labels, (position, self.settings.graph.threshold), title).0
                    }
                    _ => crate::export::GraphFigure {
                        title: format!("{name} · contribution graph (not computed)"),
                        tokens: labels,
                        layers: 0,
                        nodes: Vec::new(),
                        edges: Vec::new(),
                    },
                };
                Figure::Graph(Arc::new(figure))
            }
            View::Lens => {
                let s = &self.session;
                let labels: Vec<String> = s
                    .token_run
                    .as_ref()
                    .map(|t| (0..t.run.tokens.len()).map(|i| t.run.label(i)).collect())
                    .unwrap_or_default();
                let n = labels.len();
                let selected = self.settings.lens.position.unwrap_or(n.saturating_sub(1)).min(n.saturating_sub(1));
                let name = s.model.as_ref().map_or("model", |m| m.name.as_str());
                let mode = (self.settings.lens.mode, self.settings.lens.rank_of);
                Figure::Lens(Arc::new(self.features.lens.state.figure(&labels, name, mode, selected)))
            }
            View::Positions => {
                let learned = |cosine: bool| match &self.session.model {
                    Some(ModelInfo { name, positions: Some(sim), .. }) => Figure::LearnedPositions {
                        model: name.clone(),
                        total: sim.positions,
                        positions: self.settings.pe.positions.min(sim.positions),
                        values: Arc::clone(if cosine { &sim.cosine } else { &sim.dot }),
                        cosine,
                    },
                    _ => Figure::PeDot(self.settings.pe),
                };
                match self.settings.pe_figure {
                    PeFigure::Encoding => Figure::PeEncoding(self.settings.pe),
                    PeFigure::Dot => Figure::PeDot(self.settings.pe),
                    PeFigure::LearnedDot => learned(false),
                    PeFigure::LearnedCosine => learned(true),
                }
            }
        }
    }

    /// What attention flow would be computed for now.
    pub fn flow_key(&self) -> FlowKey {
        let (layer_idx, heads) = self.view_data().selection();
        FlowKey { view_id: self.session.view_id, heads, layer_idx }
    }

    /// The look exports get: the app's theme and colour map, the chosen scale.
    pub fn export_style(&self, dark: bool) -> Style {
        Style {
            theme: if dark { Theme::Dark } else { Theme::Light },
            scale: f32::from(self.settings.export_scale.clamp(1, 4)),
            colormap: self.settings.colormap,
        }
    }
}
