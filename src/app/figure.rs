//! The figure the current view exports (Export…, Copy image): what the view shows, as the
//! figure `render/` draws and `export` writes.

use std::sync::Arc;

use super::core::AttnvizApp;
use super::rollout::FlowKey;
use super::state::{PeFigure, View};
use super::worker::ModelInfo;
use crate::export::{Figure, Style};
use crate::render::Theme;

impl AttnvizApp {
    /// The figure the current view would export.
    pub fn current_figure(&self) -> Figure {
        // The training lab's plots, when the dialog was opened on them.
        if self.views.export.lab_plots
            && let Some(lab) = &self.features.lab.lab
        {
            return super::lab::figure::figure(&lab.cfg, &lab.losses, &lab.evaluations);
        }
        // What the views show: the layer and heads limited to the shown run (an encoder–decoder's
        // decoder may have fewer layers than its encoder).
        let (layer_idx, heads) = if self.session.run.is_some() {
            self.view_data().selection()
        } else {
            (self.settings.layer_idx, self.settings.selected_heads())
        };
        let data = self.view_data();
        if let Some(figure) = super::ui::figure(self.settings.view, &data, (layer_idx, &heads)) {
            return figure;
        }
        match self.settings.view {
            View::Head => Figure::HeadView {
                layer_idx,
                head_idxs: heads,
                selected_token: self.session.pinned,
                threshold: self.settings.threshold,
            },
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
            // The model view (a feature's view has its figure above).
            _ => Figure::ModelGrid,
        }
    }

    /// What attention flow would be computed for now.
    pub fn flow_key(&self) -> FlowKey {
        self.view_data().flow_key()
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
