//! What one layer of a pass reads and writes besides its weights: the per-pass context (mask,
//! rotation, relative positions, temperature, ablated heads, knocked-out entries), the slots a
//! listener gives for its attention, and the points a listener may change ([`Writable`], through
//! its [`Edit`]). Below both the pass and the blocks.

use super::error::Result;
use super::positions::Relative;
use crate::model::intervene::Knockout;
use crate::model::kernels;
use crate::model::rope::RopeTable;

/// A point of the pass a listener may change in place (`TransformerLens` hooks that return a
/// tensor, nnsight's assignments), handed to the [`Edit`] it gives a layer in
/// [`LayerSlots::edit`]; the rest of the pass follows from the changed values. Rows are this
/// pass's tokens: row `i` is position `first + i` (`first`: the tokens cached before, or where a
/// resumed pass starts). Per layer, in this order:
///
/// `ResidPre` → `Mask` → the heads → `HeadOut` → the output projection → `AttnOut` → (the MLP)
/// `MlpOut`.
///
/// [`super::Point::ResidPre`] is handed to the listener before the layer's `ResidPre` edit (the
/// stream as it arrived); the later read points ([`super::Point::HeadWrite`], `AttnOut`, `MlpOut`,
/// `ResidPost`) follow the edits.
#[derive(Debug)]
pub enum Writable<'a> {
    /// The residual stream entering `layer`, `seq_len × hidden`: replace a position's row (patching)
    /// or add to every row (steering).
    ResidPre {
        /// The layer.
        layer: usize,
        /// Position of the first row.
        first: usize,
        /// The stream.
        stream: &'a mut [f32],
    },
    /// The attention entries of `layer` masked before the softmax in every head, as
    /// `(query position, key position)`: push more to knock them out (their score becomes -inf,
    /// as a mask sets it, and the row renormalises over the keys left). It holds the
    /// interventions' knockouts of the layer. A row left with no key is refused.
    Mask {
        /// The layer.
        layer: usize,
        /// Position of the first row.
        first: usize,
        /// The entries.
        blocked: &'a mut Vec<(usize, usize)>,
    },
    /// Every head's output before the output projection — its context vector, `softmax(q·kᵀ)·v`
    /// (`TransformerLens` `z`, what an `o_proj` pre-hook sees) — `seq_len × (heads · head_dim)`,
    /// head `h` in columns `h·head_dim..(h+1)·head_dim`. An ablated head's columns are zero.
    HeadOut {
        /// The layer.
        layer: usize,
        /// Position of the first row.
        first: usize,
        /// The context rows.
        context: &'a mut [f32],
    },
    /// The attention block's output (every head's write + the output bias), before it joins the
    /// stream — in a post-LN block, before the norm that follows the addition. `seq_len × hidden`.
    AttnOut {
        /// The layer.
        layer: usize,
        /// Position of the first row.
        first: usize,
        /// The output.
        out: &'a mut [f32],
    },
    /// The MLP's write, before it joins the stream, `seq_len × hidden`.
    MlpOut {
        /// The layer.
        layer: usize,
        /// Position of the first row.
        first: usize,
        /// The write.
        out: &'a mut [f32],
    },
}

/// What changes a pass: handed each [`Writable`] point of the layers whose [`LayerSlots::edit`]
/// gives it. An error stops the pass and is returned.
pub trait Edit {
    /// Reads or changes `point` in place.
    fn edit(&mut self, point: Writable<'_>) -> Result<()>;
}

/// What a head's probabilities are handed to as soon as they are computed, from the pool's
/// threads, heads of a layer in any order: `(layer, head, seq_len × keys, sink)`, the last the
/// sink's share of each row for a model with attention sinks (None for the others, and when the
/// listener records the shares in its `sinks` slot).
pub type HeadVisitor<'a> = dyn Fn(usize, usize, &[f32], Option<&[f32]>) + Sync + 'a;

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
    /// The attention sink's share of each row, `heads × seq_len` (models with sinks).
    pub sinks: Option<&'a mut [f32]>,
    /// Cross-attention probabilities, `heads × seq_len × source_len` (decoders of
    /// encoder–decoders; computed in scratch when `None`).
    pub cross: Option<&'a mut [f32]>,
    /// Handed each head's probabilities as they are computed.
    pub visit_head: Option<&'a HeadVisitor<'a>>,
    /// Handed the layer's writable points ([`Writable`]) to read or change. None (the default)
    /// changes nothing and costs nothing.
    pub edit: Option<&'a mut dyn Edit>,
}

/// What a pass computes with, besides the weights: what depends on its input and interventions
/// (the mask, the rotation, the relative positions, the temperature, the ablated heads), made
/// once and shared by every layer — and kept by [`super::Streams`] to compute attention again.
#[derive(Debug, Clone)]
pub(super) struct PassContext {
    pub(super) temperature: f32,
    /// Which keys each query sees, before a layer's window (`window` None): the causal mask and
    /// the position of the first row.
    pub(super) mask: kernels::Mask,
    /// Each layer's window (the description's sliding window in the layers that use it).
    pub(super) windows: Vec<Option<usize>>,
    /// The rotation of this pass's positions (rotary models; None when positions are switched off).
    pub(super) rope: Option<RopeTable>,
    /// The sliding layers' rotation when it differs (Gemma 3's local base).
    pub(super) local_rope: Option<RopeTable>,
    /// Per layer: none, `rope` or `local_rope` (0, 1, 2).
    pub(super) rope_of: Vec<u8>,
    pub(super) relative: Relative,
    /// `(layer, head)` pairs whose output is zeroed.
    pub(super) ablated: Vec<(usize, usize)>,
    /// Entries masked before the softmax.
    pub(super) knockout: Vec<Knockout>,
}

impl PassContext {
    /// Which keys each query of layer `layer` sees: the causal mask and the layer's window.
    pub(super) fn mask(&self, layer: usize) -> kernels::Mask {
        kernels::Mask { window: self.windows.get(layer).copied().flatten(), ..self.mask }
    }

    /// The rotation of layer `layer`'s q and k, if it rotates them.
    pub(super) fn rope(&self, layer: usize) -> Option<&RopeTable> {
        match self.rope_of.get(layer).copied().unwrap_or(1) {
            0 => None,
            1 => self.rope.as_ref(),
            _ => self.local_rope.as_ref(),
        }
    }

    /// Whether head `head` of layer `layer` is ablated.
    pub(super) fn ablated(&self, layer: usize, head: usize) -> bool {
        self.ablated.contains(&(layer, head))
    }

    /// The interventions' knocked-out entries of layer `layer`, as `(query, key)` positions.
    pub(super) fn blocked(&self, layer: usize) -> Vec<(usize, usize)> {
        self.knockout.iter().filter(|k| k.at(layer)).map(|k| (k.query, k.key)).collect()
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.rope.as_ref().map_or(0, RopeTable::bytes)
            + self.local_rope.as_ref().map_or(0, RopeTable::bytes)
            + self.relative.bytes()
    }
}
