//! What one layer of a pass reads and writes besides its weights: the per-pass context (mask,
//! rotation, relative positions, temperature, ablated heads) and the slots a listener gives
//! for its attention. Below both the pass and the blocks.

use super::positions::Relative;
use crate::model::kernels;
use crate::model::rope::RopeTable;

/// What a head's probabilities are handed to as soon as they are computed, from the pool's
/// threads, heads of a layer in any order: `(layer, head, seq_len × keys)`.
pub type HeadVisitor<'a> = dyn Fn(usize, usize, &[f32]) + Sync + 'a;

/// Where one layer's attention (and what else of it a listener records) goes: slices of
/// `heads` blocks each. A slot left `None` is not recorded; the probabilities of heads without a
/// `probs` slot are computed in a scratch buffer per thread, handed to `visit_head` if given, and
/// dropped.
#[derive(Default)]
pub struct LayerSlots<'a> {
    /// Probabilities, `heads × seq_len × keys`.
    pub probs: Option<&'a mut [f32]>,
    /// The scores the softmax was applied to, same layout.
    pub scores: Option<&'a mut [f32]>,
    /// One slice per score term ([`PassShape::terms`]), same layout.
    pub terms: Vec<&'a mut [f32]>,
    /// Query vectors, `heads × seq_len × head_dim`.
    pub queries: Option<&'a mut [f32]>,
    /// Key vectors, `heads × keys × head_dim`.
    pub keys: Option<&'a mut [f32]>,
    /// Cross-attention probabilities, `heads × seq_len × source_len` (decoders of
    /// encoder–decoders; computed in scratch when `None`).
    pub cross: Option<&'a mut [f32]>,
    /// Handed each head's probabilities as they are computed.
    pub visit_head: Option<&'a HeadVisitor<'a>>,
}

/// What a pass computes with, besides the weights: what depends on its input and interventions
/// (the mask, the rotation, the relative positions, the temperature, the ablated heads), made
/// once and shared by every layer — and kept by [`super::Streams`] to compute attention again.
#[derive(Debug, Clone)]
pub(super) struct PassContext {
    pub(super) temperature: f32,
    /// Which keys each query sees.
    pub(super) mask: kernels::Mask,
    /// The rotation of this pass's positions (rotary models; None when positions are switched off).
    pub(super) rope: Option<RopeTable>,
    pub(super) relative: Relative,
    /// `(layer, head)` pairs whose output is zeroed.
    pub(super) ablated: Vec<(usize, usize)>,
}

impl PassContext {
    /// Whether head `head` of layer `layer` is ablated.
    pub(super) fn ablated(&self, layer: usize, head: usize) -> bool {
        self.ablated.contains(&(layer, head))
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.rope.as_ref().map_or(0, RopeTable::bytes) + self.relative.bytes()
    }
}
