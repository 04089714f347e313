//! The result of running a model on one input: tokens plus everything recorded per head.

use super::{Attention, HeadVectors, Tokens};

/// Per-head internals for the neuron view: how each attention weight arose.
#[derive(Debug, Clone)]
pub struct NeuronData {
    /// Pre-softmax scaled scores q·k/√d, same layout as the attention.
    pub scores: Attention,
    /// Query vectors per layer and head.
    pub queries: HeadVectors,
    /// Key vectors per layer and head.
    pub keys: HeadVectors,
}

/// Everything one forward pass recorded, as plain data (no tensors).
#[derive(Debug, Clone)]
pub struct Run {
    /// Name of the model that produced it.
    pub model_name: String,
    /// The input tokens.
    pub tokens: Tokens,
    /// Attention probabilities, `[layer][head][query][key]`.
    pub attention: Attention,
    /// Scores, queries and keys, when they were recorded.
    pub neuron: Option<NeuronData>,
    /// Last hidden state, `seq_len × hidden_size`, row-major.
    pub last_hidden: Vec<f32>,
    /// Set when the input was cut to fit the model, saying what was cut.
    pub truncation: Option<String>,
    /// Set when the forward pass was modified (ablated heads, temperature, …), saying how. None
    /// means the faithful model.
    pub intervention: Option<String>,
    /// Whether the run comes from the playground encoder (random weights).
    pub playground: bool,
}

impl Run {
    /// The model's name, followed by "MODIFIED: …" for a modified run: the name every title uses.
    pub fn display_name(&self) -> String {
        match &self.intervention {
            Some(how) => format!("{} · MODIFIED: {how}", self.model_name),
            None => self.model_name.clone(),
        }
    }
}
