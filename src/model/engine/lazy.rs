//! Attention computed where it is looked at: a pass that keeps only the residual stream
//! entering each layer ([`KeepStreams`] → [`Streams`]), from which any layer's queries and keys —
//! and so any head's attention — are computed again, bit for bit what a recording pass gives.

use rayon::prelude::*;

use super::Network;
use super::block::{HeadRecords, QkRows};
use super::context::PassContext;
use super::error::{EngineError, Result};
use super::pass::{Input, Listener, Point};
use crate::model::describe::NormPlacement;
use crate::model::intervene::Interventions;

/// The residual stream entering each layer of one pass ([`Network::forward_streams`]) and the
/// context its attention ran with: enough to compute any layer's attention again, exactly.
#[derive(Debug, Clone)]
pub struct Streams {
    n: usize,
    hidden: usize,
    layers: usize,
    /// `[layer][token][hidden]`.
    entering: Vec<f32>,
    last_hidden: Vec<f32>,
    /// Bytes of the pass's working buffers at its end (not kept).
    working_bytes: usize,
    ctx: PassContext,
}

impl Streams {
    /// Tokens of the pass.
    pub fn seq_len(&self) -> usize {
        self.n
    }

    /// Layers that ran (and whose attention can be computed).
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// The residual stream entering layer `layer_idx`, `n × hidden`.
    pub fn entering(&self, layer_idx: usize) -> &[f32] {
        let size = self.n * self.hidden;
        &self.entering[layer_idx * size..(layer_idx + 1) * size]
    }

    /// The last hidden state, `n × hidden` (after the final norm, as
    /// [`super::ForwardOutput::last_hidden`]).
    pub fn last_hidden(&self) -> &[f32] {
        &self.last_hidden
    }

    /// Bytes these streams hold: the per-layer streams, the last hidden state and the position
    /// tables the attention is computed again with.
    pub fn held_bytes(&self) -> usize {
        (self.entering.capacity() + self.last_hidden.capacity()) * size_of::<f32>() + self.ctx.bytes()
    }

    /// Bytes the pass that made these streams worked in (its buffers, one `n × n` scratch per
    /// head running at a time), freed when it ended.
    pub fn working_bytes(&self) -> usize {
        self.working_bytes
    }
}

/// Keeps the residual stream entering each layer, nothing else: each head's probabilities are
/// computed in scratch and dropped.
#[derive(Debug, Default)]
pub struct KeepStreams {
    entering: Vec<f32>,
    working_bytes: usize,
}

impl Listener for KeepStreams {
    fn point(&mut self, point: Point<'_>) -> Result<()> {
        if let Point::ResidPre { stream, .. } = point {
            self.entering.extend_from_slice(stream);
        }
        Ok(())
    }

    fn finished(&mut self, working_bytes: usize) {
        self.working_bytes = working_bytes;
    }
}

impl Network {
    /// Runs the network keeping only the residual stream entering each layer (`n × hidden` per
    /// layer) and the context its attention ran with: any layer's or head's attention can then
    /// be computed again from it with [`Self::layer_attention`], bit for bit what a recording pass
    /// gives. No attention is recorded.
    pub fn forward_streams(&self, ids: &[u32], type_ids: &[u32], interventions: &Interventions) -> Result<Streams> {
        let mut keep = KeepStreams::default();
        let last_hidden = self.run(Input::new(ids, type_ids, interventions), &mut keep)?;
        let n = ids.len();
        Ok(Streams {
            n,
            hidden: self.desc.hidden,
            layers: interventions.first_layers.unwrap_or(self.desc.layers),
            entering: keep.entering,
            last_hidden,
            working_bytes: keep.working_bytes,
            ctx: self.pass_context(interventions, 0, n),
        })
    }

    /// Layer `layer_idx`'s queries and keys, computed from the residual stream that entered it
    /// in `streams` (which this network must have produced): its heads' attention follows from
    /// them with [`LayerAttention::head_into`], by the same code a recording pass runs.
    pub fn layer_attention<'a>(&'a self, streams: &'a Streams, layer_idx: usize) -> Result<LayerAttention<'a>> {
        if layer_idx >= streams.layers || streams.hidden != self.desc.hidden {
            return Err(EngineError::NoSuchLayer { layer: layer_idx, layers: streams.layers });
        }
        let d = &self.desc;
        let n = streams.n;
        let row = d.query_width() + 2 * d.kv_width();
        let layer = &self.layers[d.layer_weights[layer_idx]];
        let entering = streams.entering(layer_idx);
        let mut qkv = vec![0.0; n * row];
        candle_core::utils::with_threadpool(|| {
            let mut panels = vec![0.0; n * row];
            // What the attention reads: the stream itself (post-LN) or its norm (pre-LN).
            let normed: Vec<f32>;
            let input = match (&layer.attn_norm, d.norm) {
                (Some(norm), NormPlacement::Pre) => {
                    let mut x = entering.to_vec();
                    norm.forward_in_place(&mut x);
                    normed = x;
                    &normed
                }
                _ => entering,
            };
            self.project_qk(layer, layer_idx, input, &streams.ctx, &mut panels, &mut qkv);
        });
        let blocked = streams.ctx.blocked(layer_idx);
        Ok(LayerAttention { net: self, streams, layer_idx, qkv, blocked })
    }
}

/// One layer's queries and keys, computed again from the stream that entered it: each head's
/// attention follows by the code a recording pass runs ([`Network::layer_attention`]).
pub struct LayerAttention<'a> {
    net: &'a Network,
    streams: &'a Streams,
    layer_idx: usize,
    /// The layer's fused q/k/v rows, as its pass had them.
    qkv: Vec<f32>,
    /// The entries its pass knocked out.
    blocked: Vec<(usize, usize)>,
}

/// One head's attention and how it arose (the neuron view's data), computed again.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadDetail {
    /// Probabilities, `n × n`.
    pub probs: Vec<f32>,
    /// The scores the softmax was applied to, `n × n`.
    pub scores: Vec<f32>,
    /// The terms the scores sum, named by [`Network::score_terms`] (empty for plain scores).
    pub terms: Vec<Vec<f32>>,
    /// Query vectors, `n × head_dim`.
    pub queries: Vec<f32>,
    /// Key vectors, `n × head_dim`.
    pub keys: Vec<f32>,
}

impl LayerAttention<'_> {
    /// The layer it belongs to.
    pub fn layer_idx(&self) -> usize {
        self.layer_idx
    }

    fn rows(&self) -> QkRows<'_> {
        let d = &self.net.desc;
        let (attn, row, n) = (d.query_width(), d.query_width() + 2 * d.kv_width(), self.streams.n);
        QkRows {
            qkv: &self.qkv,
            row,
            n,
            k_all: &self.qkv[attn..],
            kv_stride: row,
            total: n,
            blocked: &self.blocked,
            mask: self.streams.ctx.mask(self.layer_idx),
        }
    }

    fn compute(&self, head_idx: usize, probs: &mut [f32], records: HeadRecords<'_>) {
        let layer = &self.net.layers[self.net.desc.layer_weights[self.layer_idx]];
        let rows = self.rows();
        self.net.head_probs(layer, head_idx, &rows, &self.streams.ctx, probs, records);
    }

    /// Head `head_idx`'s probabilities into `probs` (`n × n`, rows are queries).
    ///
    /// # Panics
    /// When `probs` does not hold `n × n` values or the head does not exist.
    pub fn head_into(&self, head_idx: usize, probs: &mut [f32]) {
        let n = self.streams.n;
        assert!(head_idx < self.net.desc.heads && probs.len() == n * n, "one head's n × n matrix");
        self.compute(head_idx, probs, HeadRecords::default());
    }

    /// Head `head_idx`'s probabilities, `n × n`.
    pub fn head(&self, head_idx: usize) -> Vec<f32> {
        let n = self.streams.n;
        let mut probs = vec![0.0; n * n];
        self.head_into(head_idx, &mut probs);
        probs
    }

    /// Every head's probabilities, `heads × n × n` (heads in parallel, as in a pass).
    pub fn all(&self) -> Vec<f32> {
        let n = self.streams.n;
        let mut probs = vec![0.0; self.net.desc.heads * n * n];
        candle_core::utils::with_threadpool(|| {
            probs.par_chunks_mut((n * n).max(1)).enumerate().for_each(|(h, p)| self.head_into(h, p));
        });
        probs
    }

    /// Head `head_idx`'s probabilities with its scores, score terms, queries and keys.
    pub fn head_detail(&self, head_idx: usize) -> HeadDetail {
        let (n, d) = (self.streams.n, self.net.desc.head_dim);
        let mut detail = HeadDetail {
            probs: vec![0.0; n * n],
            scores: vec![0.0; n * n],
            terms: vec![vec![0.0; n * n]; self.net.score_terms().len()],
            queries: vec![0.0; n * d],
            keys: vec![0.0; n * d],
        };
        let records = HeadRecords {
            scores: Some(&mut detail.scores),
            terms: detail.terms.iter_mut().map(Vec::as_mut_slice).collect(),
            queries: Some(&mut detail.queries),
            keys: Some(&mut detail.keys),
            sink: None,
        };
        self.compute(head_idx, &mut detail.probs, records);
        detail
    }
}
