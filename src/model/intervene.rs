//! Interventions on a model's forward pass, without retraining: ablated heads, attention
//! temperature, zeroed position embeddings, a causal mask, running only the first k layers.
//!
//! A run with any of these is *modified*; [`Interventions::describe`] is the label that marks it
//! everywhere (window, exports, dumps), so a faithful run is never confused with a modified one.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Changes to the forward pass. The default changes nothing (the faithful model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interventions {
    /// Heads whose output is zeroed, as `(layer, head)`; their attention is still recorded.
    pub ablated: BTreeSet<(usize, usize)>,
    /// Softmax temperature: scores are divided by it (1 = unchanged).
    pub temperature: f32,
    /// Leave the position embeddings out.
    pub zero_positions: bool,
    /// Mask every key after the query (as a decoder does).
    pub causal: bool,
    /// Run only this many layers.
    pub first_layers: Option<usize>,
}

impl Default for Interventions {
    fn default() -> Self {
        Self { ablated: BTreeSet::new(), temperature: 1.0, zero_positions: false, causal: false, first_layers: None }
    }
}

impl Interventions {
    /// Whether nothing is changed.
    pub fn is_faithful(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the interventions against a model of `layers` × `heads`.
    pub fn validate(&self, layers: usize, heads: usize) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return Err(format!("temperature must be a positive number, got {}", self.temperature));
        }
        if let Some(&(l, h)) = self.ablated.iter().find(|&&(l, h)| l >= layers || h >= heads) {
            return Err(format!(
                "cannot ablate head {l}:{h}: the model has layers 0 to {} and heads 0 to {}",
                layers.saturating_sub(1),
                heads.saturating_sub(1)
            ));
        }
        if let Some(k) = self.first_layers
            && (k == 0 || k > layers)
        {
            return Err(format!("the number of layers to run must be between 1 and {layers}, got {k}"));
        }
        Ok(())
    }

    /// Drops what [`Self::validate`] would refuse for a model of `layers` × `heads` (ablations of
    /// heads it does not have, a layer count beyond its depth, a temperature that is not positive),
    /// keeping the rest: remembered interventions meeting a newly loaded model.
    pub fn fit_to(&mut self, layers: usize, heads: usize) {
        self.ablated.retain(|&(l, h)| l < layers && h < heads);
        if self.first_layers.is_some_and(|k| k == 0 || k > layers) {
            self.first_layers = None;
        }
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            self.temperature = 1.0;
        }
    }

    /// A one-line description, or None for the faithful model.
    pub fn describe(&self) -> Option<String> {
        if self.is_faithful() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.ablated.is_empty() {
            let mut s = String::from("ablated heads ");
            for (i, (l, h)) in self.ablated.iter().enumerate() {
                let _ = write!(s, "{}{l}:{h}", if i > 0 { "," } else { "" });
            }
            parts.push(s);
        }
        if self.temperature.to_bits() != 1.0f32.to_bits() {
            parts.push(format!("temperature {}", self.temperature));
        }
        if self.zero_positions {
            parts.push("position embeddings zeroed".into());
        }
        if self.causal {
            parts.push("causal mask".into());
        }
        if let Some(k) = self.first_layers {
            parts.push(format!("first {k} layers only"));
        }
        Some(parts.join("; "))
    }
}

/// Parses `--ablate 2:3,4:0` (layer:head pairs).
pub fn parse_ablate(s: &str) -> Result<BTreeSet<(usize, usize)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (l, h) = pair.split_once(':').ok_or_else(|| format!("{pair:?} is not LAYER:HEAD (e.g. 2:3)"))?;
            let num = |v: &str| v.trim().parse::<usize>().map_err(|_| format!("{pair:?} is not LAYER:HEAD (e.g. 2:3)"));
            Ok((num(l)?, num(h)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_faithful_and_described_as_nothing() {
        assert!(Interventions::default().is_faithful());
        assert_eq!(Interventions::default().describe(), None);
        let iv = Interventions { temperature: 0.5, causal: true, ..Interventions::default() };
        assert_eq!(iv.describe().as_deref(), Some("temperature 0.5; causal mask"));
    }

    #[test]
    fn ablate_lists_parse_and_are_checked() {
        let set = parse_ablate("2:3, 4:0").unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![(2, 3), (4, 0)]);
        assert!(parse_ablate("2-3").unwrap_err().contains("LAYER:HEAD"));
        let iv = Interventions { ablated: parse_ablate("6:0").unwrap(), ..Interventions::default() };
        assert!(iv.validate(6, 12).unwrap_err().contains("6:0"));
        assert!(Interventions { temperature: 0.0, ..Interventions::default() }.validate(6, 12).is_err());
        assert!(Interventions { first_layers: Some(7), ..Interventions::default() }.validate(6, 12).is_err());
        assert!(Interventions { first_layers: Some(6), ..Interventions::default() }.validate(6, 12).is_ok());
    }

    #[test]
    fn fitting_to_a_smaller_model_keeps_what_still_applies() {
        let mut iv = Interventions {
            ablated: parse_ablate("0:1,5:0,1:11").unwrap(),
            temperature: f32::NAN,
            first_layers: Some(5),
            causal: true,
            ..Interventions::default()
        };
        iv.fit_to(2, 4);
        assert!(iv.validate(2, 4).is_ok());
        assert_eq!(iv.ablated.into_iter().collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!((iv.temperature, iv.first_layers, iv.causal), (1.0, None, true));
    }
}
