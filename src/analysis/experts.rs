//! The routes of a mixture of experts as plain data: for every layer with experts and every
//! token, the experts the router chose, the weights their outputs were multiplied by, and the
//! router's whole distribution; and what the experts view derives from them (each expert's load).

use serde::Serialize;

/// One layer's routes over its tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerRoutes {
    /// Experts in the layer.
    pub experts: usize,
    /// Experts each token uses.
    pub top_k: usize,
    /// `tokens × top_k` expert ids, each token's largest weight first.
    pub chosen: Vec<u32>,
    /// `tokens × top_k` weights (after the family's normalisation), in the order of `chosen`.
    pub weights: Vec<f32>,
    /// `tokens × experts`: the router's distribution (after the softmax).
    pub probs: Vec<f32>,
}

impl LayerRoutes {
    /// Tokens routed.
    pub fn tokens(&self) -> usize {
        self.chosen.len() / self.top_k.max(1)
    }

    /// Token `t`'s chosen experts, largest weight first.
    pub fn chosen_of(&self, t: usize) -> &[u32] {
        &self.chosen[t * self.top_k..(t + 1) * self.top_k]
    }

    /// Token `t`'s weights, in the order of [`Self::chosen_of`].
    pub fn weights_of(&self, t: usize) -> &[f32] {
        &self.weights[t * self.top_k..(t + 1) * self.top_k]
    }

    /// Token `t`'s router distribution over every expert.
    pub fn probs_of(&self, t: usize) -> &[f32] {
        &self.probs[t * self.experts..(t + 1) * self.experts]
    }

    /// Each expert's load over the text: how many tokens chose it.
    pub fn load(&self) -> Vec<usize> {
        let mut load = vec![0; self.experts];
        for &e in &self.chosen {
            if let Some(l) = load.get_mut(e as usize) {
                *l += 1;
            }
        }
        load
    }
}

/// Every layer's routes (None for a layer without experts: a dense feed-forward).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Routes {
    /// Per layer.
    pub layers: Vec<Option<LayerRoutes>>,
}

impl Routes {
    /// The most experts any layer has.
    pub fn experts(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.experts).max().unwrap_or(0)
    }

    /// Tokens routed.
    pub fn tokens(&self) -> usize {
        self.layers.iter().flatten().map(LayerRoutes::tokens).max().unwrap_or(0)
    }

    /// Token `t`'s route through the layers: per layer, its chosen experts and their weights
    /// (empty for a layer without experts).
    pub fn route_of(&self, t: usize) -> Vec<(Vec<u32>, Vec<f32>)> {
        self.layers
            .iter()
            .map(|l| match l {
                Some(l) if t < l.tokens() => (l.chosen_of(t).to_vec(), l.weights_of(t).to_vec()),
                _ => (Vec::new(), Vec::new()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_counts_each_choice_and_routes_read_per_token() {
        let l = LayerRoutes {
            experts: 3,
            top_k: 2,
            chosen: vec![2, 0, 0, 1, 2, 1],
            weights: vec![0.6, 0.4, 0.7, 0.3, 0.5, 0.5],
            probs: vec![0.3, 0.1, 0.6, 0.5, 0.3, 0.2, 0.1, 0.4, 0.5],
        };
        assert_eq!(l.tokens(), 3);
        assert_eq!(l.load(), vec![2, 2, 2]);
        assert_eq!(l.chosen_of(1), &[0, 1]);
        assert_eq!(l.probs_of(2), &[0.1, 0.4, 0.5]);
        let routes = Routes { layers: vec![Some(l), None] };
        assert_eq!(routes.route_of(0), vec![(vec![2, 0], vec![0.6, 0.4]), (vec![], vec![])]);
        assert_eq!((routes.experts(), routes.tokens()), (3, 3));
    }
}
