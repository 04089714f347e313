//! The decoder side of an encoder–decoder run: its tokens, its causal self-attention and its
//! cross-attention, every decoder token (query) over every source token (key),
//! `[layer][head][target][source]`, f32, rows sum to 1.

use super::{Attention, Tokens};

/// The decoder side of an encoder–decoder run: what the decoder read, its self-attention (causal)
/// and its attention to the source.
#[derive(Debug, Clone)]
pub struct DecoderRun {
    /// The decoder input: the start token, then the target's tokens.
    pub tokens: Tokens,
    /// Decoder self-attention, `[layer][head][target][target]`.
    pub attention: Attention,
    /// Cross-attention, `[layer][head][target][source]`: a rectangular [`Attention`]
    /// ([`Attention::rectangular`]; its `seq_len` is the targets, its `keys` the sources).
    pub cross: Attention,
    /// The decoder's last hidden state, `targets × hidden`.
    pub last_hidden: Vec<f32>,
    /// Set when the target was cut to fit, saying what was cut.
    pub truncation: Option<String>,
}
