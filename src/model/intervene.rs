//! Interventions on a model's forward pass, without retraining: ablated heads, attention
//! temperature, zeroed position embeddings, a causal mask, running only the first k layers,
//! knocked-out attention entries and a steering vector added to the residual stream.
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
    /// Attention entries knocked out: the query may not attend to the key (its score is -inf
    /// before the softmax, as a mask sets it), in every head of one layer or of all.
    pub knockout: BTreeSet<Knockout>,
    /// A vector added to the residual stream entering one layer, at every position.
    pub steer: Option<Steering>,
}

impl Default for Interventions {
    fn default() -> Self {
        Self {
            ablated: BTreeSet::new(),
            temperature: 1.0,
            zero_positions: false,
            causal: false,
            first_layers: None,
            knockout: BTreeSet::new(),
            steer: None,
        }
    }
}

/// One knocked-out attention entry: at `layer` (every layer when None) query position `query`
/// may not attend to key position `key`, in any head (Geva et al. 2023, "Dissecting recall").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Knockout {
    /// The layer, or None for every layer.
    pub layer: Option<usize>,
    /// The query's position.
    pub query: usize,
    /// The key's position.
    pub key: usize,
}

impl Knockout {
    /// Whether it applies at layer `layer`.
    pub fn at(&self, layer: usize) -> bool {
        self.layer.is_none_or(|l| l == layer)
    }
}

impl std::fmt::Display for Knockout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(l) => write!(f, "{l}:{}:{}", self.query, self.key),
            None => write!(f, "*:{}:{}", self.query, self.key),
        }
    }
}

/// Activation addition (Turner et al.; Rimsky et al.'s contrastive form): `scale · vector` added to
/// the residual stream entering `layer` at every position, where `vector` is that stream at the
/// last token of `plus` run alone minus the same for `minus` ([`crate::model::LoadedModel::steering`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steering {
    /// The layer whose entering stream is steered.
    pub layer: usize,
    /// What the vector is multiplied by (negative steers away).
    pub scale: f32,
    /// The text whose stream is added.
    pub plus: String,
    /// The text whose stream is taken away.
    pub minus: String,
    /// `plus`'s stream − `minus`'s, `hidden` values (not yet scaled).
    pub vector: Vec<f32>,
}

impl Steering {
    /// What the pass adds to each row: `scale · vector`, element by element in f32.
    pub fn added(&self) -> Vec<f32> {
        self.vector.iter().map(|v| self.scale * v).collect()
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
        let run = self.first_layers.unwrap_or(layers);
        if let Some(k) = self.knockout.iter().find(|k| k.layer.is_some_and(|l| l >= run)) {
            return Err(format!("cannot knock out {k}: the model runs layers 0 to {}", run.saturating_sub(1)));
        }
        if let Some(s) = &self.steer {
            if s.layer >= run {
                return Err(format!(
                    "cannot steer layer {}: the model runs layers 0 to {}",
                    s.layer,
                    run.saturating_sub(1)
                ));
            }
            if !s.scale.is_finite() {
                return Err(format!("the steering scale must be a finite number, got {}", s.scale));
            }
            if s.vector.is_empty() || !s.vector.iter().all(|v| v.is_finite()) {
                return Err("the steering vector must be finite numbers".into());
            }
        }
        Ok(())
    }

    /// Checks the knockouts against an input of `tokens` positions whose query `q` sees the keys
    /// `visible(q)` (a causal mask, a window): every position must be in the input, and no
    /// query may be left without a key at any layer. The pass runs this check itself.
    pub fn check_knockout(
        &self,
        tokens: usize,
        layers: usize,
        visible: impl Fn(usize, usize) -> std::ops::Range<usize>,
    ) -> Result<(), String> {
        if let Some(k) = self.knockout.iter().find(|k| k.query >= tokens || k.key >= tokens) {
            return Err(format!("cannot knock out {k}: the input has positions 0 to {}", tokens.saturating_sub(1)));
        }
        let every = self.knockout.iter().any(|k| k.layer.is_none());
        let checked: BTreeSet<usize> =
            if every { (0..layers).collect() } else { self.knockout.iter().filter_map(|k| k.layer).collect() };
        for l in checked {
            let queries: BTreeSet<usize> = self.knockout.iter().filter(|k| k.at(l)).map(|k| k.query).collect();
            for query in queries {
                let blocked = |key: usize| {
                    self.knockout.contains(&Knockout { layer: Some(l), query, key })
                        || self.knockout.contains(&Knockout { layer: None, query, key })
                };
                if visible(l, query).all(blocked) {
                    return Err(format!(
                        "the knockout leaves query {query} of layer {l} no key to attend to (it sees keys {}); keep at least one",
                        key_span(&visible(l, query))
                    ));
                }
            }
        }
        Ok(())
    }

    /// Notices for knockouts that change nothing because the mask already hides the key (a key
    /// after the query in a causal model, or outside a window): `visible(layer, q)` the keys
    /// query `q` sees in `layer` (None: in some layer).
    pub fn knockout_notices(&self, visible: impl Fn(Option<usize>, usize) -> std::ops::Range<usize>) -> Vec<String> {
        self.knockout
            .iter()
            .filter(|k| !visible(k.layer, k.query).contains(&k.key))
            .map(|k| {
                let why = if k.key > k.query {
                    "a key after its query, which this causal model never attends to"
                } else {
                    "a key the attention window already hides"
                };
                format!("knockout {k} changes nothing: {why}")
            })
            .collect()
    }

    /// Drops what [`Self::validate`] would refuse for a model of `layers` × `heads` (ablations of
    /// heads it does not have, a layer count beyond its depth, a temperature that is not positive),
    /// keeping the rest: remembered interventions meeting a newly loaded model.
    pub fn fit_to(&mut self, layers: usize, heads: usize) {
        self.ablated.retain(|&(l, h)| l < layers && h < heads);
        if self.first_layers.is_some_and(|k| k == 0 || k > layers) {
            self.first_layers = None;
        }
        let run = self.first_layers.unwrap_or(layers);
        self.knockout.retain(|k| k.layer.is_none_or(|l| l < run));
        if self.steer.as_ref().is_some_and(|s| s.layer >= run || !s.scale.is_finite()) {
            self.steer = None;
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
        if !self.knockout.is_empty() {
            let list: Vec<String> = self.knockout.iter().map(ToString::to_string).collect();
            parts.push(format!("knocked out {}", list.join(",")));
        }
        if let Some(s) = &self.steer {
            parts.push(format!("steered at layer {} by {} × (“{}” − “{}”)", s.layer, s.scale, s.plus, s.minus));
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

/// Keys `keys` in words: "0 to 4", "3", or "none".
pub fn key_span(keys: &std::ops::Range<usize>) -> String {
    match keys.len() {
        0 => "none".into(),
        1 => keys.start.to_string(),
        _ => format!("{} to {}", keys.start, keys.end - 1),
    }
}

/// Parses `--knockout 2:5:3,*:4:0` (layer:query:key triples; `*` for every layer).
pub fn parse_knockout(s: &str) -> Result<BTreeSet<Knockout>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|triple| {
            let bad = || format!("{triple:?} is not LAYER:QUERY:KEY (e.g. 2:5:3, or *:5:3 for every layer)");
            let parts: Vec<&str> = triple.split(':').map(str::trim).collect();
            let [l, q, k] = parts[..] else { return Err(bad()) };
            let num = |v: &str| v.parse::<usize>().map_err(|_| bad());
            let layer = if l == "*" { None } else { Some(num(l)?) };
            Ok(Knockout { layer, query: num(q)?, key: num(k)? })
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
    fn knockout_lists_parse_and_are_checked_and_described() {
        let set = parse_knockout("2:5:3, *:4:0").unwrap();
        let list: Vec<String> = set.iter().map(ToString::to_string).collect();
        assert_eq!(list, ["*:4:0", "2:5:3"], "every-layer entries first");
        assert!(parse_knockout("2:5").unwrap_err().contains("LAYER:QUERY:KEY"));
        assert!(parse_knockout("a:1:2").unwrap_err().contains("LAYER:QUERY:KEY"));
        let iv = Interventions { knockout: set, ..Interventions::default() };
        assert_eq!(iv.describe().as_deref(), Some("knocked out *:4:0,2:5:3"));
        assert!(iv.validate(3, 4).is_ok());
        assert!(iv.validate(2, 4).unwrap_err().contains("2:5:3"), "layer 2 of a 2-layer model");
        let causal = |_: usize, q: usize| 0..q + 1;
        assert!(iv.check_knockout(6, 3, causal).is_ok());
        assert!(iv.check_knockout(5, 3, causal).unwrap_err().contains("positions 0 to 4"));
        // Query 0 of a causal model sees only itself: knocking that out leaves it nothing.
        let lone = Interventions { knockout: parse_knockout("*:0:0").unwrap(), ..Interventions::default() };
        assert!(lone.check_knockout(3, 2, causal).unwrap_err().contains("query 0 of layer 0 no key"));
        // Every key of a row, in two entries of one layer and of all layers.
        let row = Interventions { knockout: parse_knockout("1:1:0,*:1:1").unwrap(), ..Interventions::default() };
        assert!(row.check_knockout(3, 2, causal).unwrap_err().contains("query 1 of layer 1"));
        assert!(row.check_knockout(3, 2, |_, _| 0..3).is_ok(), "an encoder's row keeps key 2");
        // A key after its query in a causal model changes nothing, and says so.
        let after = Interventions { knockout: parse_knockout("0:1:3,0:3:1").unwrap(), ..Interventions::default() };
        let notices = after.knockout_notices(|_, q| 0..q + 1);
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("0:1:3") && notices[0].contains("after its query"), "{notices:?}");
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
        iv.knockout = parse_knockout("1:2:0,4:2:0,*:1:1").unwrap();
        iv.fit_to(2, 4);
        assert!(iv.validate(2, 4).is_ok());
        assert_eq!(iv.ablated.iter().copied().collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(iv.knockout, parse_knockout("1:2:0,*:1:1").unwrap());
        assert_eq!((iv.temperature, iv.first_layers, iv.causal), (1.0, None, true));
    }
}
