//! The language-model head: the final norm and the unembedding, applied to the last hidden state
//! (next-token logits) or to any residual stream (the logit lens), and what a direct logit
//! attribution multiplies each part's write by.

use rayon::prelude::*;

use super::Network;
use super::weights::Values;
use crate::model::describe::NormKind;
use crate::model::kernels::{self, MatMut, MatRef, matmul};

/// Vocabulary rows per task of a batched unembedding.
const VOCAB_BLOCK: usize = 512;

/// What the head does to one residual row before a token's logit: the final norm's parameters
/// and that token's unembedding row — enough to split the logit into each part's share
/// (`TransformerLens`' `apply_ln_to_stack` then `· W_U[:, token]`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogitBasis {
    /// Whether the final norm centres each row first (a `LayerNorm`); an `RMSNorm` does not.
    pub centred: bool,
    /// The norm's weight as it multiplies (`1 + w` for Gemma's norm), `hidden` values; empty
    /// without a final norm.
    pub norm_weight: Vec<f32>,
    /// The norm's bias (`LayerNorm`), `hidden` values; empty otherwise.
    pub norm_bias: Vec<f32>,
    /// The token's unembedding row, `hidden` values, times the head's logit scale.
    pub unembedding: Vec<f32>,
    /// The head's bias for the token (`final_logits_bias` / `lm_head.bias`; 0 without one).
    pub bias: f32,
}

/// Vocabulary rows widened at a time for [`Network::logits`].
const LOGIT_ROWS: usize = 64;

thread_local! {
    /// Rows of a table held in blocks or 16 bits, widened for [`Network::logits`], per thread.
    static WIDE_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Network {
    /// Next-token logits from one row of the final hidden state (after the final norm), or None
    /// without a language-model head: `hidden · Eᵀ` with the tied embeddings or `lm_head`.
    pub fn logits(&self, hidden_row: &[f32]) -> Option<Vec<f32>> {
        let mut logits = self.logits_before_cap(hidden_row)?;
        self.cap_logits(&mut logits);
        Some(logits)
    }

    /// [`Self::logits`] before Gemma 2's final soft-capping (the same without one): what the
    /// parts of the residual stream add up to, which direct logit attribution splits.
    pub fn logits_before_cap(&self, hidden_row: &[f32]) -> Option<Vec<f32>> {
        let hidden_row = self.head_input(hidden_row)?;
        let mut logits = vec![0.0; self.desc.vocab_size];
        logits.par_chunks_mut(LOGIT_ROWS).enumerate().for_each(|(c, out)| {
            self.logit_rows(&hidden_row, c * LOGIT_ROWS, out);
        });
        if !self.logits_bias.is_empty() {
            logits.iter_mut().zip(&self.logits_bias).for_each(|(l, b)| *l += b);
        }
        Some(logits)
    }

    /// Gemma 2's `final_logit_softcapping`, on logits (not on directions).
    fn cap_logits(&self, logits: &mut [f32]) {
        if let Some(cap) = self.desc.final_softcap {
            kernels::softcap_in_place(logits, cap);
        }
    }

    /// The logits of `tokens` alone from one row of the final hidden state: what [`Self::logits`]
    /// gives for them, bit for bit, without the rest of the vocabulary. None without a head or for
    /// a token outside the vocabulary.
    pub fn token_logits(&self, hidden_row: &[f32], tokens: &[u32]) -> Option<Vec<f32>> {
        if tokens.iter().any(|&t| t as usize >= self.desc.vocab_size) {
            return None;
        }
        let hidden_row = self.head_input(hidden_row)?;
        let mut out = vec![0.0; tokens.len()];
        for (o, &t) in out.iter_mut().zip(tokens) {
            self.logit_rows(&hidden_row, t as usize, std::slice::from_mut(o));
            if let Some(b) = self.logits_bias.get(t as usize) {
                *o += b;
            }
        }
        self.cap_logits(&mut out);
        Some(out)
    }

    /// The row the head multiplies (times its logit scale), or None without a head or for a row
    /// of another width.
    fn head_input<'a>(&self, hidden_row: &'a [f32]) -> Option<std::borrow::Cow<'a, [f32]>> {
        if !self.has_lm_head() || hidden_row.len() != self.desc.hidden {
            return None;
        }
        Some(if self.desc.logit_scale.to_bits() == 1.0f32.to_bits() {
            std::borrow::Cow::Borrowed(hidden_row)
        } else {
            std::borrow::Cow::Owned(hidden_row.iter().map(|v| v * self.desc.logit_scale).collect())
        })
    }

    /// The logits (before the head's bias) of vocabulary rows `first..first + out.len()` into
    /// `out`: each the same dot product however many rows are asked for.
    fn logit_rows(&self, hidden_row: &[f32], first: usize, out: &mut [f32]) {
        let table = self.lm_head.as_ref().unwrap_or(&self.embeddings.tokens);
        let h = self.desc.hidden;
        let start = first * h;
        let end = start + out.len() * h;
        let dots = |rows: &[f32], out: &mut [f32]| {
            for (o, row) in out.iter_mut().zip(rows.chunks_exact(h.max(1))) {
                *o = kernels::dot(row, hidden_row);
            }
        };
        // Held in blocks or 16 bits, LOGIT_ROWS rows are widened at a time (one dispatched call,
        // not one per row); each logit is the same dot product either way.
        if let Values::F32(t) = table {
            dots(&t[start..end], out);
        } else if let Values::Quant(q) = table
            && h > 0
            && let Some((kind, blocks)) = q.part_rows(start / h..end / h)
            && kernels::block_dots(kind, hidden_row, blocks, out)
        {
            // Blocks (SmolLM2's tied `Q8_0` embeddings) multiplied in registers, the same sums.
        } else {
            WIDE_ROWS.with_borrow_mut(|wide| {
                wide.resize(end - start, 0.0);
                table.widen_into(start..end, wide);
                dots(wide, out);
            });
        }
    }

    /// The final norm applied to rows of `x` (`m × hidden`) in place, as the pass applies it to
    /// the last residual stream; nothing without one.
    pub fn final_norm_rows(&self, x: &mut [f32]) {
        if let Some(norm) = &self.final_norm {
            norm.forward_in_place(x);
        }
    }

    /// Logits of every token for rows of final hidden states (`m × hidden`, after the final
    /// norm): `m × vocab`, or None without a language-model head. One matrix product over the
    /// vocabulary in blocks (16-bit tables widened a block at a time), for many rows at once —
    /// the logit lens. (Not bit for bit [`Self::logits`], whose sums run in another order.)
    pub fn unembed_rows(&self, rows: &[f32]) -> Option<Vec<f32>> {
        self.unembed(rows, true)
    }

    /// [`Self::unembed_rows`] without the head's bias (nor its soft-capping): what a direction of the residual stream
    /// (a part's write, already through the final norm) does to every logit.
    pub fn unembed_directions(&self, rows: &[f32]) -> Option<Vec<f32>> {
        self.unembed(rows, false)
    }

    fn unembed(&self, rows: &[f32], with_bias: bool) -> Option<Vec<f32>> {
        let h = self.desc.hidden;
        if !self.has_lm_head() || h == 0 || !rows.len().is_multiple_of(h) {
            return None;
        }
        let m = rows.len() / h;
        let vocab = self.desc.vocab_size;
        let table = self.lm_head.as_ref().unwrap_or(&self.embeddings.tokens);
        let scale = self.desc.logit_scale;
        let mut out = vec![0.0; m * vocab];
        // Blocks of vocabulary rows: each task writes its block's columns of every output row.
        let blocks: Vec<(usize, Vec<f32>)> = (0..vocab)
            .step_by(VOCAB_BLOCK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| {
                let len = VOCAB_BLOCK.min(vocab - start);
                let mut wide = Vec::new();
                let t: &[f32] = if let Values::F32(t) = table {
                    &t[start * h..(start + len) * h]
                } else {
                    wide.resize(len * h, 0.0);
                    table.widen_into(start * h..(start + len) * h, &mut wide);
                    &wide
                };
                let mut block = vec![0.0; m * len];
                let x = MatRef::rows(rows, m, h, h);
                matmul(MatMut::rows(&mut block, m, len, len), x, MatRef::rows(t, len, h, h).t(), scale, false);
                (start, block)
            })
            .collect();
        for (start, block) in blocks {
            let len = block.len() / m.max(1);
            for (dst, src) in out.chunks_mut(vocab).zip(block.chunks(len.max(1))) {
                dst[start..start + len].copy_from_slice(src);
            }
        }
        if with_bias && !self.logits_bias.is_empty() {
            for row in out.chunks_mut(vocab) {
                row.iter_mut().zip(&self.logits_bias).for_each(|(l, b)| *l += b);
            }
        }
        if with_bias {
            self.cap_logits(&mut out);
        }
        Some(out)
    }

    /// What the head does to a residual row before `token`'s logit ([`LogitBasis`]), or None
    /// without a language-model head or for a token outside the vocabulary.
    pub fn logit_basis(&self, token: u32) -> Option<LogitBasis> {
        let (h, t) = (self.desc.hidden, token as usize);
        if !self.has_lm_head() || t >= self.desc.vocab_size {
            return None;
        }
        let table = self.lm_head.as_ref().unwrap_or(&self.embeddings.tokens);
        let mut unembedding = vec![0.0; h];
        table.widen_into(t * h..(t + 1) * h, &mut unembedding);
        if self.desc.logit_scale.to_bits() != 1.0f32.to_bits() {
            for v in &mut unembedding {
                *v *= self.desc.logit_scale;
            }
        }
        let (centred, norm_weight, norm_bias) = match &self.final_norm {
            None => (false, Vec::new(), Vec::new()),
            Some(n) => match n.kind {
                NormKind::Layer => (true, n.weight.clone(), n.bias.clone()),
                NormKind::Rms => (false, n.weight.clone(), Vec::new()),
                NormKind::RmsPlusOne => (false, n.weight.iter().map(|w| 1.0 + w).collect(), Vec::new()),
            },
        };
        let bias = self.logits_bias.get(t).copied().unwrap_or(0.0);
        Some(LogitBasis { centred, norm_weight, norm_bias, unembedding, bias })
    }
}
