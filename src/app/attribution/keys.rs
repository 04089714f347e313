//! What the worker computes for the attribution view and hands back: the keys an attribution and
//! a head's effect are of, the effect with its labels, and token labels.

/// The readable label of every token id in `ids` (each once).
pub fn token_labels(
    model: &crate::model::LoadedModel,
    ids: impl IntoIterator<Item = u32>,
) -> std::collections::BTreeMap<u32, String> {
    let mut labels = std::collections::BTreeMap::new();
    for id in ids {
        labels.entry(id).or_insert_with(|| crate::analysis::tokens::pretty_label(&model.tokenizer.token_of(id)));
    }
    labels
}

/// Tokens listed as a head's write promotes and suppresses.
pub const EFFECT_K: usize = 8;

/// What an attribution is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DlaKey {
    /// Id of the model's token-level run.
    pub source_id: u64,
    /// The position.
    pub position: usize,
    /// The target token as typed (empty: the top prediction).
    pub target: String,
    /// The token subtracted, as typed (empty: none).
    pub versus: String,
}

/// What a head's effect is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EffectKey {
    /// Id of the model's token-level run.
    pub source_id: u64,
    /// The position.
    pub position: usize,
    /// Layer and head.
    pub head: (usize, usize),
}

/// A head's effect with its tokens' labels.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectShown {
    /// `(label, logit change)`, largest first.
    pub promoted: Vec<(String, f32)>,
    /// `(label, logit change)`, most negative first.
    pub suppressed: Vec<(String, f32)>,
}
