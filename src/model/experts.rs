//! The routes of a mixture of experts, read from the one pass by a listener ([`RecordRoutes`]):
//! what `attnviz experts` writes and the experts view draws.

use super::ModelError;
use super::engine::{EngineError, Input, Listener, PassShape, Point};
use super::intervene::Interventions;
use super::loader::LoadedModel;
use crate::analysis::Tokens;
use crate::analysis::experts::{LayerRoutes, Routes};

/// Keeps every layer's routes ([`Point::Route`]); layers without experts stay None.
#[derive(Debug, Default)]
pub struct RecordRoutes {
    routes: Routes,
}

impl RecordRoutes {
    /// What the pass routed.
    pub fn into_routes(self) -> Routes {
        self.routes
    }
}

impl Listener for RecordRoutes {
    fn start(&mut self, shape: &PassShape) {
        self.routes = Routes { layers: vec![None; shape.layers] };
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        if let Point::Route { layer, experts, probs, chosen, weights } = point
            && let Some(slot) = self.routes.layers.get_mut(layer)
        {
            let tokens = probs.len() / experts.max(1);
            *slot = Some(LayerRoutes {
                experts,
                top_k: chosen.len() / tokens.max(1),
                chosen: chosen.to_vec(),
                weights: weights.to_vec(),
                probs: probs.to_vec(),
            });
        }
        Ok(())
    }
}

impl LoadedModel {
    /// Whether the model routes tokens to experts (in some layer).
    pub fn has_experts(&self) -> bool {
        self.description().experts.is_some()
    }

    /// The routes of `tokens` through every layer, with `interventions`; an error for a model
    /// without experts.
    pub fn routes(&self, tokens: &Tokens, interventions: &Interventions) -> Result<Routes, ModelError> {
        if !self.has_experts() {
            return Err(ModelError::NoExperts { model: self.name.clone(), family: self.description().family.clone() });
        }
        self.check_tokens(tokens, interventions)?;
        let mut record = RecordRoutes::default();
        self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut record)?;
        Ok(record.into_routes())
    }

    /// Tokenizes `text` (cut to the model's positions, with a notice) and routes it.
    pub fn routes_of_text(&self, text: &str) -> Result<(Tokens, Routes, Option<String>), ModelError> {
        let (encoded, _) = self.encode_recordable(text, None)?;
        let routes = self.routes(&encoded.tokens, &Interventions::default())?;
        Ok((encoded.tokens, routes, encoded.truncation))
    }
}
