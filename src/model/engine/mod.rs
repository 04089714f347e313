//! The one network: any [`Description`] with its weights, and **one forward pass**
//! ([`Network::run`]) whose [`Listener`] decides what it hands out.
//!
//! The blocks mirror Hugging Face transformers' eager code (`modeling_bert.py` is the template; the
//! family files in [`super::families`] name where each family departs from it). The heavy steps
//! run on plain `f32` buffers through the kernel room ([`crate::model::kernels`]): weights held
//! row-major in their stored precision (f16, bf16, GGUF blocks or f32) and widened as they are
//! multiplied, each head's scores written straight into the listener's slot and normalised there,
//! heads in parallel, working buffers allocated once per pass and reused by every layer.
//!
//! # The pass and its listeners
//!
//! | listener | what it gets | who uses it |
//! |---|---|---|
//! | [`Record`] | every layer's probabilities (with [`Capture::Full`] the scores, their terms, q and k) as a [`ForwardOutput`] | a run, a generation step ([`Network::forward`] wraps it) |
//! | [`EachLayer`] | one layer's probabilities at a time, overwritten by the next | `dump` and `bench --mode layers` (bounded memory) |
//! | [`EachHead`] | each head's probabilities from the pool's threads, a call after each layer (which may stop the pass) | long inputs pooled as they run, `bench --mode heads` |
//! | [`KeepStreams`] | the residual stream entering each layer → [`Streams`], from which [`Network::layer_attention`] computes any head again | `bench --mode lazy` |
//! | your own | any [`Point`]: `ResidPre`, `HeadWrite`, `AttnOut`, `ResidMid`, `CrossOut`, `MlpOut`, `ResidPost`, `FinalNorm` (writes only with [`Wants::writes`]) | logit lens, attribution |
//!
//! The [`Input`] says where the tokens sit ([`Context`]): a fresh sequence, after a [`KvCache`]
//! (made only for networks that can run token by token), or a decoder attending to
//! [`EncoderStates`] (checked against the decoder). Input is checked once
//! ([`Network::check_input`]); what fails is an [`EngineError`].
//!
//! Files: [`weights`] (storage), [`linear`] (products), [`embed`] (norms and embeddings), [`head`]
//! (the final norm and unembedding: logits, the logit lens, a logit's basis),
//! [`positions`] (every relative-position scheme), [`block`] (attention, MLP, a block), [`pass`]
//! (the pass and the listener API), [`listeners`] (the listeners above), [`lazy`] (attention
//! computed again from kept streams).

mod activation;
mod block;
mod context;
mod embed;
mod error;
mod head;
mod lazy;
mod linear;
mod listeners;
mod moe;
mod pass;
mod positions;
mod quant;
mod weights;

pub use crate::model::kernels::BlockKind;
pub use error::EngineError;
pub use head::LogitBasis;
pub use lazy::{HeadDetail, KeepStreams, LayerAttention, Streams};
pub use listeners::{Capture, EachHead, EachLayer, ForwardOutput, LayerDone, LayerVisitor, Record};
pub use pass::{
    Context, Edit, EncoderStates, HeadVisitor, Input, KvCache, LayerSlots, Listener, PassShape, Point, Wants, Writable,
};
pub use quant::{FilledRegion, Quantized, Region};
pub use weights::{Expected, WeightStorage, Weights};

use self::block::Layer;
use self::embed::{Embeddings, Norm};
use self::positions::PositionWeights;
use self::weights::Values;
use super::describe::{Description, LmHead};
use super::intervene::Interventions;

/// A transformer that records attention: any [`Description`] with its weights.
#[derive(Debug, Clone)]
pub struct Network {
    desc: Description,
    embeddings: Embeddings,
    /// Weight sets; layer `l` runs `layers[desc.layer_weights[l]]`.
    layers: Vec<Layer>,
    /// The relative positions' shared weights (MPNet's bucket table, DeBERTa's embeddings).
    positions: PositionWeights,
    final_norm: Option<Norm>,
    /// `lm_head.weight` (`vocab × hidden`, row-major) when the head is not tied and the checkpoint
    /// has one.
    lm_head: Option<Values>,
    /// `final_logits_bias` / `lm_head.bias`, when the description has one.
    logits_bias: Vec<f32>,
}

/// Every tensor `desc` implies, with its shape, and whether the network needs it: written down
/// by running the network's own loader over no tensors ([`Weights::plan`]), so this list and
/// what [`Network::load`] reads cannot disagree.
pub fn expected_tensors(desc: &Description) -> Vec<Expected> {
    let mut plan = Weights::plan();
    // A plan reads nothing, so the load cannot fail for want of a tensor; whatever it asked for
    // before an error (none is expected) is what it needs.
    let _ = Network::load_from(desc, &mut plan);
    plan.into_plan()
}

/// Bytes `desc`'s weights take as f32 (every tensor it implies).
pub fn weight_bytes(desc: &Description) -> u64 {
    expected_tensors(desc).iter().map(|e| e.shape.iter().map(|&d| d as u64).product::<u64>() * 4).sum()
}

impl Network {
    /// Builds the network from canonical weights (see [`super::families`]); every tensor the
    /// description implies must be there with its shape ([`expected_tensors`]).
    pub fn load(desc: &Description, mut w: Weights) -> Result<Self, EngineError> {
        Self::load_from(desc, &mut w)
    }

    fn load_from(desc: &Description, w: &mut Weights) -> Result<Self, EngineError> {
        let embeddings = Embeddings::load(w, desc)?;
        let positions = PositionWeights::load(w, desc)?;
        let layers =
            (0..desc.weight_sets()).map(|i| Layer::load(w, desc, i, &positions)).collect::<Result<Vec<_>, _>>()?;
        let final_norm = desc.final_norm.then(|| Norm::load(w, "final_norm", desc.hidden, desc)).transpose()?;
        let lm_head = if desc.lm_head == LmHead::Own {
            w.take_optional_values("lm_head.weight", &[desc.vocab_size, desc.hidden])?
        } else {
            None
        };
        let logits_bias = if desc.logits_bias { w.take("logits_bias", &[desc.vocab_size])? } else { Vec::new() };
        Ok(Self { desc: desc.clone(), embeddings, layers, positions, final_norm, lm_head, logits_bias })
    }

    /// The description it runs.
    pub fn description(&self) -> &Description {
        &self.desc
    }

    /// Bytes of the large weights as held — linear layers, token embeddings, `lm_head` — 4 per
    /// weight as f32, 2 in a 16-bit stored precision ([`WeightStorage`]); the small ones (norms,
    /// biases, position and type embeddings) are f32 either way.
    pub fn large_weight_bytes(&self) -> usize {
        self.layers.iter().map(Layer::weight_bytes).sum::<usize>()
            + self.embeddings.projection.as_ref().map_or(0, |(p, _)| p.weight_bytes())
            + self.embeddings.tokens.bytes()
            + self.lm_head.as_ref().map_or(0, Values::bytes)
    }

    /// Whether every query sees only itself and earlier tokens.
    pub fn is_causal(&self) -> bool {
        self.desc.causal
    }

    /// Whether the network can predict the next token (it has a language-model head).
    pub fn has_lm_head(&self) -> bool {
        match self.desc.lm_head {
            LmHead::None => false,
            LmHead::Tied => self.embeddings.width == self.desc.hidden,
            LmHead::Own => self.lm_head.is_some(),
        }
    }

    /// Names of the terms each score sums, when it is more than `q·k · scale` (the neuron view
    /// shows them; [`ForwardOutput::terms`] holds them in this order). Empty for plain scores.
    pub fn score_terms(&self) -> Vec<&'static str> {
        positions::score_terms(&self.desc.position_bias)
    }

    /// The absolute position table as the model reads it (from its first used row),
    /// `max_len × embedding width`, row-major; None without one.
    pub fn position_table(&self) -> Option<Vec<f32>> {
        let (table, offset) = self.embeddings.positions.as_ref()?;
        let e = self.embeddings.width;
        let rows = (table.len() / e.max(1)).saturating_sub(*offset).min(self.desc.max_len);
        Some(table[offset * e..(offset + rows) * e].to_vec())
    }

    /// Runs the network on one sequence (no padding, so no attention mask), recording every
    /// layer's attention ([`Record`]), with `interventions` applied (the default changes
    /// nothing). `type_ids` are the tokenizer's; models that do not read them get zeros.
    pub fn forward(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<ForwardOutput, EngineError> {
        let mut record = Record::new(capture);
        let last_hidden = self.run(Input::new(ids, type_ids, interventions), &mut record)?;
        Ok(record.into_output(last_hidden))
    }

    /// Runs a decoder (a network with cross-attention) on `ids` attending to an encoder's output
    /// (`encoder_hidden`, `source × hidden`), recording its self-attention in `probs` and its
    /// cross-attention in `cross`.
    pub fn forward_decoder(&self, ids: &[u32], encoder_hidden: &[f32]) -> Result<ForwardOutput, EngineError> {
        let zeros = vec![0; ids.len()];
        let faithful = Interventions::default();
        let input = Input::new(ids, &zeros, &faithful).within(Context::Encoder(self.encoder_states(encoder_hidden)?));
        let mut record = Record::new(Capture::Attention);
        let last_hidden = self.run(input, &mut record)?;
        Ok(record.into_output(last_hidden))
    }

    /// Runs `ids` after the tokens already in `cache` (a causal model's generation step), with
    /// `interventions`, and adds them to it. The recorded attention holds the new rows only:
    /// `[layer][head][new][all]`, each equal to that row of a full pass over everything (the rows
    /// of a causal model do not depend on later tokens).
    pub fn step(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        interventions: &Interventions,
    ) -> Result<ForwardOutput, EngineError> {
        self.step_recording(ids, cache, Capture::Attention, interventions)
    }

    /// [`Self::step`] recording `capture`: with [`Capture::Full`] also the new rows' scores,
    /// queries and keys.
    pub fn step_recording(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<ForwardOutput, EngineError> {
        let zeros = vec![0; ids.len()];
        let input = Input::new(ids, &zeros, interventions).within(Context::Cached(cache));
        let mut record = Record::new(capture);
        let last_hidden = self.run(input, &mut record)?;
        Ok(record.into_output(last_hidden))
    }
}
