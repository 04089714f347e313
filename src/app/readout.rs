//! Direct logit attribution and a head's effect as the app holds them: computed on the worker
//! thread, keyed by what they were computed for so a result of an older input is never shown.

use crate::analysis::attribution::Attribution;

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

/// The attribution as a table: rows the layers then the embeddings, columns the heads then the
/// attention bias and the MLP (cells that do not exist are NaN).
pub fn attribution_table(a: &Attribution, title: String) -> crate::export::Table {
    let (layers, heads) = (a.layers, a.heads_per_layer);
    let cols = heads + 2;
    let mut values = vec![f32::NAN; (layers + 1) * cols];
    for l in 0..layers {
        values[l * cols..l * cols + heads].copy_from_slice(&a.heads[l * heads..(l + 1) * heads]);
        values[l * cols + heads] = a.attention_biases.get(l).copied().unwrap_or(f32::NAN);
        values[l * cols + heads + 1] = a.mlps.get(l).copied().unwrap_or(f32::NAN);
    }
    values[layers * cols] = a.embeddings;
    let mut col_labels: Vec<String> = (0..heads).map(|h| format!("H{h}")).collect();
    col_labels.extend(["attn bias".to_string(), "MLP".to_string()]);
    let mut row_labels: Vec<String> = (0..layers).map(|l| format!("L{l}")).collect();
    row_labels.push("embeddings".to_string());
    crate::export::Table { title, row_labels, col_labels, values }
}

/// What the attribution's target is, in words: "“ Paris”" or "“ Paris” − “ London”".
pub fn target_text(a: &Attribution) -> String {
    let pretty = crate::analysis::tokens::pretty_label;
    match &a.versus_token {
        Some(v) => format!("“{}” − “{}”", pretty(&a.target_token), pretty(v)),
        None => format!("“{}”", pretty(&a.target_token)),
    }
}
