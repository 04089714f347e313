//! The blocks: one weight set's attention (self and cross) and feed-forward, how a block joins
//! them to the residual stream, and the working memory a pass reuses for every layer.
//!
//! Each head's scores are written straight into its slot of the recorded attention (or a scratch
//! buffer) and normalised there; heads run in parallel.

use rayon::prelude::*;

use super::Network;
use super::activation::activate;
use super::context::{Edit, LayerSlots, PassContext, Writable};
use super::embed::Norm;
use super::error::{EngineError, Result};
use super::linear::Linear;
use super::moe::{Moe, Route};
use super::positions::{self, HeadRows, PositionWeights, RelativeProjections};
use super::weights::Weights;
use crate::model::describe::{Description, FeedForward, NormPlacement, QkNorm};
use crate::model::kernels::{MatMut, MatRef, matmul};

thread_local! {
    /// A head's keys transposed, per thread (see [`Network::head_probs`]).
    static KEYS_T: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}
use crate::model::kernels;

/// Rows per block when a mask lets attention skip keys.
const ROW_BLOCK: usize = 64;

/// Blocks of query rows (`n` of them, the first at position `mask.first`) and the keys any row of
/// the block sees, out of `total`: all rows and keys in one block when the mask hides nothing,
/// else blocks of [`ROW_BLOCK`] rows (a causal mask hides the keys after the block's last query, a
/// window those before its first query's window), blocks that see no key left out.
fn visible_blocks(
    mask: kernels::Mask,
    n: usize,
    total: usize,
) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> {
    let block = if mask.causal || mask.window.is_some() { ROW_BLOCK } else { n.max(1) };
    (0..n).step_by(block).filter_map(move |start| {
        let end = (start + block).min(n);
        let keys = mask.visible(start, total).start..mask.visible(end - 1, total).end;
        (!keys.is_empty()).then_some((start..end, keys))
    })
}

/// One weight set of the blocks: attention (`BertSelfAttention` eager + `BertSelfOutput`, q/k/v
/// fused into one product: `heads·head_dim` query columns, then `kv_heads·head_dim` key and value
/// columns), then the feed-forward (`BertIntermediate` + `BertOutput`; gate and up fused when gated).
#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub(super) qkv: Linear,
    /// The norms of q and k (per head: Qwen3, Gemma 3; over the whole projection: OLMo-2).
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    pub(super) output: Linear,
    /// The attention's input norm (None in a pre-LN block without input norms, OLMo-2), or the
    /// norm after the attention's addition (post-LN).
    pub(super) attn_norm: Option<Norm>,
    pub(super) up: Linear,
    pub(super) down: Linear,
    ffn_norm: Option<Norm>,
    /// The norms of the attention's and the MLP's outputs before they join the stream (Gemma 2
    /// and 3's `post_attention_layernorm` / `post_feedforward_layernorm`, OLMo-2's).
    pub(super) attn_out_norm: Option<Norm>,
    ffn_out_norm: Option<Norm>,
    relative: RelativeProjections,
    /// Attention to an encoder's output (decoders of encoder–decoders).
    pub(super) cross: Option<CrossAttention>,
    /// A mixture of experts in place of `up` and `down` (which are then empty).
    pub(super) moe: Option<Moe>,
    /// Each head's attention sink logit (gpt-oss's `self_attn.sinks`), or None.
    sinks: Option<Vec<f32>>,
}

/// A decoder layer's attention to the encoder: queries from the decoder, keys and values (fused)
/// from the encoder output, the output projection, and the norm of its sub-block.
#[derive(Debug, Clone)]
pub(super) struct CrossAttention {
    pub(super) q: Linear,
    pub(super) kv: Linear,
    pub(super) output: Linear,
    norm: Norm,
}

impl Layer {
    pub(super) fn load(w: &mut Weights, d: &Description, index: usize, positions: &PositionWeights) -> Result<Self> {
        let p = format!("layer.{index}");
        let (h, attn, kv) = (d.hidden, d.query_width(), d.kv_width());
        // (DeBERTa's relative projections read q and k first: the fused product below takes them.)
        let relative = RelativeProjections::load(w, d, &p, positions)?;
        let qkv = Linear::fused(
            w,
            &[(format!("{p}.q"), attn), (format!("{p}.k"), kv), (format!("{p}.v"), kv)],
            h,
            d.biases.qkv,
        )?;
        let qk_norm = |w: &mut Weights, name: &str, width: usize| match d.qk_norm {
            QkNorm::None => Ok(None),
            QkNorm::PerHead => Norm::load(w, &format!("{p}.{name}"), d.head_dim, d).map(Some),
            QkNorm::Whole => Norm::load(w, &format!("{p}.{name}"), width, d).map(Some),
        };
        let input_norms = d.input_norms || d.norm == NormPlacement::Post;
        let norm = |w: &mut Weights, name: &str, on: bool| {
            if on { Norm::load(w, &format!("{p}.{name}"), h, d).map(Some) } else { Ok(None) }
        };
        let i = d.intermediate;
        let moe = match &d.experts {
            Some(e) if e.in_layer(index) => Some(Moe::load(w, d, &p, e)?),
            _ => None,
        };
        let empty = || Linear::new(&[], Vec::new(), h);
        let up = match d.feed_forward {
            _ if moe.is_some() => empty(),
            FeedForward::Plain => Linear::load(w, &format!("{p}.up"), h, i, d.biases.ffn)?,
            FeedForward::Gated => {
                Linear::fused(w, &[(format!("{p}.gate"), i), (format!("{p}.up"), i)], h, d.biases.ffn)?
            }
        };
        let down = if moe.is_some() { empty() } else { Linear::load(w, &format!("{p}.down"), i, h, d.biases.ffn)? };
        let cross = if d.cross_attention {
            Some(CrossAttention {
                q: Linear::load(w, &format!("{p}.cq"), h, attn, d.biases.qkv)?,
                kv: Linear::fused(w, &[(format!("{p}.ck"), attn), (format!("{p}.cv"), attn)], h, d.biases.qkv)?,
                output: Linear::load(w, &format!("{p}.co"), attn, h, d.biases.output)?,
                norm: Norm::load(w, &format!("{p}.cross_norm"), h, d)?,
            })
        } else {
            None
        };
        let sinks = if d.attn_sinks { Some(w.take(&format!("{p}.sinks"), &[d.heads])?) } else { None };
        Ok(Self {
            sinks,
            cross,
            qkv,
            q_norm: qk_norm(w, "q_norm", attn)?,
            k_norm: qk_norm(w, "k_norm", kv)?,
            output: Linear::load(w, &format!("{p}.o"), attn, h, d.biases.output)?,
            attn_norm: norm(w, "attn_norm", input_norms)?,
            attn_out_norm: norm(w, "attn_out_norm", d.output_norms)?,
            up,
            down,
            moe,
            ffn_norm: norm(w, "ffn_norm", input_norms)?,
            ffn_out_norm: norm(w, "ffn_out_norm", d.output_norms)?,
            relative,
        })
    }

    /// Bytes of its linear layers' weights as held.
    pub(super) fn weight_bytes(&self) -> usize {
        let cross =
            self.cross.as_ref().map_or(0, |c| c.q.weight_bytes() + c.kv.weight_bytes() + c.output.weight_bytes());
        let moe = self.moe.as_ref().map_or(0, Moe::weight_bytes);
        self.qkv.weight_bytes()
            + self.output.weight_bytes()
            + self.up.weight_bytes()
            + self.down.weight_bytes()
            + cross
            + moe
    }
}

/// One layer's cached keys and values (rows appended by the pass), in a cached pass.
pub(super) type CacheRows<'a> = Option<(&'a mut Vec<f32>, &'a mut Vec<f32>)>;

/// What one layer of a pass reads and writes besides the residual stream.
pub(super) struct LayerJob<'a> {
    pub(super) layer_idx: usize,
    /// Where its attention goes.
    pub(super) slots: LayerSlots<'a>,
    /// This layer's keys and values of the tokens before (appended to), in a cached pass.
    pub(super) cache: CacheRows<'a>,
    /// The encoder's output a decoder attends to, `source × hidden`.
    pub(super) encoder: Option<&'a [f32]>,
}

/// What a layer's attention reads and writes besides its input and the pass's context.
struct AttentionJob<'a, 'b> {
    layer_idx: usize,
    /// Where its attention goes.
    slots: LayerSlots<'a>,
    /// This layer's cached keys and values (appended to), in a cached pass.
    cache: CacheRows<'a>,
    /// Entries masked before the softmax.
    blocked: &'b [(usize, usize)],
    /// The layer's edit, handed the heads' outputs.
    edit: &'b mut Option<&'a mut dyn Edit>,
}

/// What one head records besides its probabilities (each when asked).
#[derive(Default)]
pub(super) struct HeadRecords<'a> {
    pub(super) scores: Option<&'a mut [f32]>,
    pub(super) terms: Vec<&'a mut [f32]>,
    pub(super) queries: Option<&'a mut [f32]>,
    pub(super) keys: Option<&'a mut [f32]>,
    /// The sink's share of each row (`n` values), for a layer with sinks.
    pub(super) sink: Option<&'a mut [f32]>,
}

/// One head's share of a layer's outputs: its probabilities go to its slice of the recorded
/// attention, or (None) to a scratch buffer of the pass that is reused once the head is done.
struct HeadOut<'a> {
    probs: Option<&'a mut [f32]>,
    context: &'a mut [f32],
    records: HeadRecords<'a>,
}

/// A layer's fused q/k/v rows and where each head finds its keys: what [`Network::head_probs`]
/// reads.
pub(super) struct QkRows<'a> {
    /// `n` rows of `row` values: queries, then keys, then values (after the norms and rotation).
    pub(super) qkv: &'a [f32],
    pub(super) row: usize,
    pub(super) n: usize,
    /// The keys (this pass's rows, or a cache's), `total` rows `kv_stride` apart.
    pub(super) k_all: &'a [f32],
    pub(super) kv_stride: usize,
    pub(super) total: usize,
    /// Entries masked before the softmax, `(query, key)` positions (knocked out).
    pub(super) blocked: &'a [(usize, usize)],
    /// Which keys each query sees in this layer (the causal mask, the layer's window).
    pub(super) mask: kernels::Mask,
}

/// Per-head probability buffers of a pass that records none: one per head running at a time.
#[derive(Default)]
struct HeadScratch(std::sync::Mutex<Vec<Vec<f32>>>);

impl HeadScratch {
    fn take(&self, len: usize) -> Vec<f32> {
        let kept = self.0.lock().ok().and_then(|mut v| v.pop());
        match kept {
            Some(mut b) => {
                b.resize(len, 0.0);
                b
            }
            None => vec![0.0; len],
        }
    }

    fn give(&self, buffer: Vec<f32>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(buffer);
        }
    }

    /// Bytes of the buffers kept.
    fn bytes(&self) -> usize {
        self.0.lock().map_or(0, |v| v.iter().map(|b| b.capacity() * size_of::<f32>()).sum())
    }
}

/// Working memory of a forward pass, allocated once and reused by every layer.
pub(super) struct Buffers {
    /// Input of a sub-block after its norm (pre-LN), `n × hidden`.
    normed: Vec<f32>,
    /// Fused q/k/v, `n × (attn + 2·kv)`.
    pub(super) qkv: Vec<f32>,
    /// Attention output per head, `heads × n × head_dim`.
    context_by_head: Vec<f32>,
    /// The same as rows, `n × attn`.
    pub(super) context: Vec<f32>,
    /// The attention block's output, before the residual, `n × hidden`.
    pub(super) attn_out: Vec<f32>,
    /// What the attention output's norm divided each row by (with output norms; else empty).
    pub(super) attn_scales: Vec<f32>,
    /// Residual stream after attention, `n × hidden`.
    pub(super) attended: Vec<f32>,
    /// Cross-attention's output, before the residual, `n × hidden` (decoders only).
    pub(super) cross_out: Vec<f32>,
    /// Cross-attention probabilities of a layer when no slot records them, `heads × n × source`.
    cross_probs: Vec<f32>,
    /// Feed-forward inner activations, `n × intermediate` (`n × 2·intermediate` when gated: gate
    /// and up side by side).
    inner: Vec<f32>,
    /// Gated feed-forward: `act(gate) · up`, `n × intermediate`.
    gated: Vec<f32>,
    /// The MLP's output, before the residual, `n × hidden`.
    pub(super) mlp_out: Vec<f32>,
    /// A linear layer's product, panel by panel, before its bias: `n × out` for the widest layer.
    panels: Vec<f32>,
    /// Probabilities of heads a pass does not record.
    scratch: HeadScratch,
    /// The last mixture-of-experts layer's routing.
    pub(super) route: Route,
}

impl Buffers {
    /// Bytes held, the head scratch included.
    pub(super) fn bytes(&self) -> usize {
        let vecs = [
            &self.normed,
            &self.qkv,
            &self.context_by_head,
            &self.context,
            &self.attn_out,
            &self.attn_scales,
            &self.attended,
            &self.cross_out,
            &self.cross_probs,
            &self.inner,
            &self.gated,
            &self.mlp_out,
            &self.panels,
        ];
        vecs.iter().map(|v| v.capacity() * size_of::<f32>()).sum::<usize>() + self.scratch.bytes() + self.route.bytes()
    }

    pub(super) fn new(n: usize, source: usize, d: &Description) -> Self {
        let (hidden, attn, qkv) = (d.hidden, d.query_width(), d.query_width() + 2 * d.kv_width());
        let gated = d.feed_forward == FeedForward::Gated;
        let inner = if gated { 2 * d.intermediate } else { d.intermediate };
        let cross = d.cross_attention;
        let _ = source; // cross-attention's probabilities go to scratch only when no slot takes them
        Self {
            normed: vec![0.0; n * hidden],
            qkv: vec![0.0; n * qkv],
            context_by_head: vec![0.0; n * attn],
            context: vec![0.0; n * attn],
            attn_out: vec![0.0; n * hidden],
            attn_scales: Vec::new(),
            attended: vec![0.0; n * hidden],
            cross_out: if cross { vec![0.0; n * hidden] } else { Vec::new() },
            cross_probs: Vec::new(),
            inner: vec![0.0; n * inner],
            gated: if gated { vec![0.0; n * d.intermediate] } else { Vec::new() },
            mlp_out: vec![0.0; n * hidden],
            panels: vec![0.0; n * qkv.max(inner).max(hidden)],
            scratch: HeadScratch::default(),
            route: Route::default(),
        }
    }
}

/// `out = a + b`, element by element (a part's write joining the stream: `(x·W + bias) + residual`
/// exactly as a fused product-and-add would round it).
fn sum_into(out: &mut [f32], a: &[f32], b: &[f32]) {
    out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (a, b))| *o = a + b);
}

/// `stream += part` (addition commutes exactly: `(x·W + bias) + residual`).
fn join(stream: &mut [f32], part: &[f32]) {
    stream.iter_mut().zip(part).for_each(|(s, p)| *s += p);
}

/// Hands `point` to the layer's edit, if it has one.
fn write(edit: &mut Option<&mut dyn Edit>, point: Writable<'_>) -> Result<()> {
    match edit {
        Some(e) => e.edit(point),
        None => Ok(()),
    }
}

/// The entries of layer `layer` masked before the softmax: the interventions' knockouts and what
/// the layer's edit adds, checked against this pass's `n` rows and `total` keys. Empty (no
/// allocation) when there are none.
fn blocked_entries(
    ctx: &PassContext,
    layer: usize,
    edit: &mut Option<&mut dyn Edit>,
    (n, total): (usize, usize),
) -> Result<Vec<(usize, usize)>> {
    let mut blocked = if ctx.knockout.is_empty() { Vec::new() } else { ctx.blocked(layer) };
    let first = ctx.mask.first;
    write(edit, Writable::Mask { layer, first, blocked: &mut blocked })?;
    if blocked.is_empty() {
        return Ok(blocked);
    }
    blocked.sort_unstable();
    blocked.dedup();
    if let Some(&(q, k)) = blocked.iter().find(|&&(q, k)| q >= total || k >= total) {
        return Err(EngineError::Intervention(format!(
            "cannot knock out {layer}:{q}:{k}: the input has positions 0 to {}",
            total.saturating_sub(1)
        )));
    }
    // Each row of this pass keeps a key.
    for row in blocked.chunk_by(|a, b| a.0 == b.0) {
        let q = row[0].0;
        if !(first..first + n).contains(&q) {
            continue;
        }
        let seen = ctx.mask(layer).visible(q - first, total);
        if seen.clone().all(|k| row.binary_search(&(q, k)).is_ok()) {
            return Err(EngineError::Intervention(format!(
                "the knockout leaves query {q} of layer {layer} no key to attend to (it sees keys {}); keep at least one",
                crate::model::intervene::key_span(&seen)
            )));
        }
    }
    Ok(blocked)
}

impl Network {
    /// One block on the residual stream `x` (`n × hidden`), in place: post-LN
    /// (`norm(x + attn(x))`, then `norm(y + ffn(y))`), pre-LN (`x + attn(norm(x))`, then
    /// `y + ffn(norm(y))`), or pre-LN in parallel (`x + attn(norm₁(x)) + ffn(norm₂(x))`). Each
    /// part's output stays in `bufs` (`attn_out`, `cross_out`, `mlp_out`; the stream after
    /// attention in `attended`) for the pass to hand out.
    pub(super) fn layer_forward(
        &self,
        layer: &Layer,
        x: &mut [f32],
        ctx: &PassContext,
        job: LayerJob<'_>,
        bufs: &mut Buffers,
    ) -> Result<()> {
        let LayerJob { layer_idx, mut slots, cache, encoder } = job;
        let mut cross_slot = slots.cross.take();
        let mut edit = slots.edit.take();
        let first = ctx.mask.first;
        let n = x.len() / self.desc.hidden.max(1);
        write(&mut edit, Writable::ResidPre { layer: layer_idx, first, stream: x })?;
        let total = first + n;
        let blocked = blocked_entries(ctx, layer_idx, &mut edit, (n, total))?;
        let attention = AttentionJob { layer_idx, slots, cache, blocked: &blocked, edit: &mut edit };
        let mut normed = std::mem::take(&mut bufs.normed);
        let mut attended = std::mem::take(&mut bufs.attended);
        let cross = |this: &Self, bufs: &mut Buffers, input: &[f32], slot: Option<&mut [f32]>| {
            if let (Some(c), Some(encoder)) = (&layer.cross, encoder) {
                this.cross_attention(c, input, encoder, ctx.temperature, slot, bufs);
            }
        };
        let attn_out = |edit: &mut Option<&mut dyn Edit>, bufs: &mut Buffers| {
            write(edit, Writable::AttnOut { layer: layer_idx, first, out: &mut bufs.attn_out[..n * self.desc.hidden] })
        };
        let mlp_out = |edit: &mut Option<&mut dyn Edit>, bufs: &mut Buffers| {
            write(edit, Writable::MlpOut { layer: layer_idx, first, out: &mut bufs.mlp_out[..n * self.desc.hidden] })
        };
        let norm_into = |normed: &mut [f32], x: &[f32], norm: &Option<Norm>| {
            normed.copy_from_slice(x);
            if let Some(norm) = norm {
                norm.forward_in_place(normed);
            }
        };
        match (self.desc.norm, self.desc.parallel_residual) {
            (NormPlacement::Post, _) => {
                self.attention(layer, x, ctx, attention, bufs)?;
                attn_out(&mut edit, bufs)?;
                sum_into(&mut attended, &bufs.attn_out, x);
                if let Some(norm) = &layer.attn_norm {
                    norm.forward_in_place(&mut attended);
                }
                if let Some(c) = &layer.cross {
                    // BartDecoderLayer: `encoder_attn_layer_norm(x + encoder_attn(x))`.
                    cross(self, bufs, &attended, cross_slot.take());
                    join(&mut attended, &bufs.cross_out);
                    c.norm.forward_in_place(&mut attended);
                }
                self.feed_forward(layer, &attended, bufs);
                mlp_out(&mut edit, bufs)?;
                sum_into(x, &bufs.mlp_out, &attended);
                if let Some(norm) = &layer.ffn_norm {
                    norm.forward_in_place(x);
                }
            }
            (NormPlacement::Pre, false) => {
                norm_into(&mut normed, x, &layer.attn_norm);
                self.attention(layer, &normed, ctx, attention, bufs)?;
                // Gemma 2's `post_attention_layernorm`, Granite's `residual_multiplier`.
                self.join_form(layer.attn_out_norm.as_ref(), &mut bufs.attn_out, &mut bufs.attn_scales);
                attn_out(&mut edit, bufs)?;
                sum_into(&mut attended, &bufs.attn_out, x);
                if let Some(c) = &layer.cross {
                    // T5LayerCrossAttention / pre-LN BART: `x + encoder_attn(norm(x))`.
                    normed.copy_from_slice(&attended);
                    c.norm.forward_in_place(&mut normed);
                    cross(self, bufs, &normed, cross_slot.take());
                    join(&mut attended, &bufs.cross_out);
                }
                norm_into(&mut normed, &attended, &layer.ffn_norm);
                self.feed_forward(layer, &normed, bufs);
                self.join_form(layer.ffn_out_norm.as_ref(), &mut bufs.mlp_out, &mut Vec::new());
                mlp_out(&mut edit, bufs)?;
                sum_into(x, &bufs.mlp_out, &attended);
            }
            (NormPlacement::Pre, true) => {
                // GPTNeoXLayer: `mlp_output + attn_output + hidden_states`.
                norm_into(&mut normed, x, &layer.attn_norm);
                self.attention(layer, &normed, ctx, attention, bufs)?;
                self.join_form(layer.attn_out_norm.as_ref(), &mut bufs.attn_out, &mut bufs.attn_scales);
                attn_out(&mut edit, bufs)?;
                norm_into(&mut normed, x, &layer.ffn_norm);
                self.feed_forward(layer, &normed, bufs);
                self.join_form(layer.ffn_out_norm.as_ref(), &mut bufs.mlp_out, &mut Vec::new());
                mlp_out(&mut edit, bufs)?;
                // (mlp + attn) + hidden: addition commutes exactly.
                sum_into(&mut attended, &bufs.mlp_out, &bufs.attn_out);
                x.iter_mut().zip(&attended).for_each(|(x, s)| *x += s);
            }
        }
        bufs.normed = normed;
        bufs.attended = attended;
        Ok(())
    }

    /// Attention from `x` (`n × hidden`, the decoder) to `encoder` (`source × hidden`): per head
    /// `softmax(q·kᵀ · scale)` over every source token (no mask, no position terms), recorded in
    /// `slot` (`heads × n × source`, or scratch), then `· v` and the output projection into
    /// `bufs.cross_out`.
    fn cross_attention(
        &self,
        c: &CrossAttention,
        x: &[f32],
        encoder: &[f32],
        temperature: f32,
        slot: Option<&mut [f32]>,
        bufs: &mut Buffers,
    ) {
        let (d, attn) = (self.desc.head_dim, self.desc.query_width());
        let n = x.len() / self.desc.hidden.max(1);
        let source = encoder.len() / self.desc.hidden.max(1);
        let q = c.q.forward(x);
        let kv = c.kv.forward(encoder);
        let mut context_by_head = vec![0.0; n * attn];
        let scale = self.desc.score_scale;
        let probs = if let Some(p) = slot {
            p
        } else {
            bufs.cross_probs.resize(self.desc.heads * n * source, 0.0);
            &mut bufs.cross_probs[..]
        };
        probs
            .par_chunks_mut((n * source).max(1))
            .zip(context_by_head.par_chunks_mut((n * d).max(1)))
            .enumerate()
            .for_each(|(h, (p, context))| {
                let qm = MatRef::rows(&q[h * d..], n, d, attn);
                let k = MatRef::rows(&kv[h * d..], source, d, 2 * attn);
                let v = MatRef::rows(&kv[attn + h * d..], source, d, 2 * attn);
                matmul(MatMut::rows(p, n, source, source), qm, k.t(), scale, false);
                if temperature.to_bits() != 1.0f32.to_bits() {
                    for s in p.iter_mut() {
                        *s /= temperature;
                    }
                }
                kernels::softmax_rows(p, source, kernels::Mask::default(), None);
                matmul(MatMut::rows(context, n, d, d), MatRef::rows(p, n, source, source), v, 1.0, false);
            });
        let mut context = vec![0.0; n * attn];
        for (h, ctx) in context_by_head.chunks(n * d).enumerate() {
            for (dst, src) in context.chunks_mut(attn).zip(ctx.chunks(d)) {
                dst[h * d..(h + 1) * d].copy_from_slice(src);
            }
        }
        let mut scratch = vec![0.0; n * self.desc.hidden];
        c.output.forward_into(&context, None, &mut scratch, &mut bufs.cross_out);
    }

    /// A pre-LN sub-block's output (`n × hidden`, in place) as it joins the stream: through its
    /// output norm (Gemma 2 and 3, OLMo-2), then times the residual scale (Granite). With a
    /// norm, `scales` gets what it divided each row by (what a head's share of the output is
    /// divided by too, [`Network::head_share`]); else it is left empty.
    fn join_form(&self, norm: Option<&Norm>, out: &mut [f32], scales: &mut Vec<f32>) {
        scales.clear();
        if let Some(norm) = norm {
            *scales = norm.scales(out);
            norm.forward_in_place(out);
        }
        let r = self.desc.residual_scale;
        if r.to_bits() != 1.0f32.to_bits() {
            for v in out.iter_mut() {
                *v *= r;
            }
        }
    }

    /// A head's share of the attention output (`n × hidden`, its columns of the output
    /// projection, in place) as it joins the stream: through the output norm with the layer's
    /// scales held (`scales`, what the norm divided each row of the whole output by), then
    /// times the residual scale. The heads' shares and the bias's then add up to the output
    /// that joins the stream.
    pub(super) fn head_share(&self, layer: &Layer, scales: &[f32], share: &mut [f32]) {
        let h = self.desc.hidden;
        if let Some(norm) = &layer.attn_out_norm {
            let weight = norm.multiplier();
            for (row, s) in share.chunks_mut(h).zip(scales) {
                row.iter_mut().zip(&weight).for_each(|(v, g)| *v = *v / s * g);
            }
        }
        let r = self.desc.residual_scale;
        if r.to_bits() != 1.0f32.to_bits() {
            for v in share.iter_mut() {
                *v *= r;
            }
        }
    }

    /// The norms of q and k (per head, or over the whole projection), then the rotation of
    /// layer `layer_idx`, on every q and k head of the fused rows.
    fn prepare_qk(&self, layer: &Layer, layer_idx: usize, qkv: &mut [f32], ctx: &PassContext) {
        let (d, attn, kv) = (self.desc.head_dim, self.desc.query_width(), self.desc.kv_width());
        let rope = ctx.rope(layer_idx);
        if layer.q_norm.is_none() && rope.is_none() {
            return;
        }
        let row = attn + 2 * kv;
        qkv.par_chunks_mut(row).enumerate().for_each(|(i, r)| {
            let qk = &mut r[..attn + kv];
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                // A norm of head width runs over each head's chunk of its part, a whole one once.
                qn.forward_in_place(&mut qk[..attn]);
                kn.forward_in_place(&mut qk[attn..]);
            }
            if let Some(rope) = rope {
                for head in qk.chunks_mut(d) {
                    rope.rotate(i, head);
                }
            }
        });
    }

    /// `eager_attention_forward`: softmax(q·kᵀ · scale + position terms) · v, then the output
    /// dense into `bufs.attn_out` (the caller adds the residual and places the norm). Each head's
    /// scores are computed straight into its slot of the recorded probabilities and normalised
    /// there (or into a scratch buffer when the listener records none); heads run in parallel;
    /// query head `h` reads key/value head `kv_head_of(h)`. With a cache, this pass's keys and
    /// values are appended to it and the queries attend to all of it. Ablated heads have their
    /// output zeroed.
    fn attention(
        &self,
        layer: &Layer,
        x: &[f32],
        ctx: &PassContext,
        job: AttentionJob<'_, '_>,
        bufs: &mut Buffers,
    ) -> Result<()> {
        let AttentionJob { layer_idx, slots, cache, blocked, edit } = job;
        let desc = &self.desc;
        let (d, attn, kv) = (desc.head_dim, desc.query_width(), desc.kv_width());
        let n = x.len() / desc.hidden.max(1);
        self.project_qk(layer, layer_idx, x, ctx, &mut bufs.panels, &mut bufs.qkv);
        let row = attn + 2 * kv;
        let qkv = &bufs.qkv[..];
        // Keys and values: this pass's rows, or the cache they are appended to.
        let (k_all, v_all, kv_stride, total) = match cache {
            Some((keys, values)) => {
                for r in qkv.chunks(row) {
                    keys.extend_from_slice(&r[attn..attn + kv]);
                    values.extend_from_slice(&r[attn + kv..]);
                }
                let (keys, values): (&Vec<f32>, &Vec<f32>) = (keys, values);
                (keys.as_slice(), values.as_slice(), kv, keys.len() / kv.max(1))
            }
            None => (&qkv[attn..], &qkv[attn + kv..], row, n),
        };
        let mask = ctx.mask(layer_idx);
        let rows = QkRows { qkv, row, n, k_all, kv_stride, total, blocked, mask };
        let LayerSlots { probs, scores, terms, queries, keys, sinks, visit_head, .. } = slots;
        let mut sinks = sinks.map(|s| s.chunks_mut(n));
        let mut probs = probs.map(|p| p.chunks_mut(n * total));
        let mut scores = scores.map(|s| s.chunks_mut(n * total));
        let mut queries = queries.map(|q| q.chunks_mut(n * d));
        let mut keys = keys.map(|k| k.chunks_mut(n * d));
        let mut terms: Vec<_> = terms.into_iter().map(|t| t.chunks_mut(n * total)).collect();
        let tasks: Vec<HeadOut<'_>> = bufs
            .context_by_head
            .chunks_mut(n * d)
            .take(desc.heads)
            .map(|context| HeadOut {
                probs: probs.as_mut().and_then(Iterator::next),
                context,
                records: HeadRecords {
                    scores: scores.as_mut().and_then(Iterator::next),
                    terms: terms.iter_mut().filter_map(Iterator::next).collect(),
                    queries: queries.as_mut().and_then(Iterator::next),
                    keys: keys.as_mut().and_then(Iterator::next),
                    sink: sinks.as_mut().and_then(Iterator::next),
                },
            })
            .collect();
        let scratch = &bufs.scratch;
        tasks.into_par_iter().enumerate().for_each(|(h, t)| {
            let HeadOut { probs, context, mut records } = t;
            let mut own = Vec::new();
            let probs = if let Some(p) = probs {
                p
            } else {
                own = scratch.take(n * total);
                &mut own[..]
            };
            // A visitor of a layer with sinks gets each row's share too (a listener recording them
            // in a slot reads them there).
            let mut shares = Vec::new();
            if visit_head.is_some() && layer.sinks.is_some() && records.sink.is_none() {
                shares.resize(n, 0.0);
                records.sink = Some(&mut shares[..]);
            }
            self.head_probs(layer, h, &rows, ctx, probs, records);
            if let Some(visit) = visit_head {
                visit(layer_idx, h, probs, (!shares.is_empty()).then_some(&shares[..]));
            }
            if ctx.ablated(layer_idx, h) {
                context.fill(0.0);
            } else {
                // probs · v over the keys each block of rows sees (the others weigh exactly 0).
                let g = desc.kv_head_of(h);
                for (r, ks) in visible_blocks(mask, n, total) {
                    let p = MatRef::rows(&probs[r.start * total + ks.start..], r.len(), ks.len(), total);
                    let v = MatRef::rows(&v_all[ks.start * kv_stride + g * d..], ks.len(), d, kv_stride);
                    matmul(MatMut::rows(&mut context[r.start * d..], r.len(), d, d), p, v, 1.0, false);
                }
            }
            if own.capacity() > 0 {
                scratch.give(own);
            }
        });
        // (heads, n, d) → (n, heads·d), then the output dense.
        for (h, context) in bufs.context_by_head.chunks(n * d).enumerate() {
            for (dst, src) in bufs.context.chunks_mut(attn).zip(context.chunks(d)) {
                dst[h * d..(h + 1) * d].copy_from_slice(src);
            }
        }
        let context = &mut bufs.context[..n * attn];
        write(edit, Writable::HeadOut { layer: layer_idx, first: ctx.mask.first, context })?;
        layer.output.forward_into(&bufs.context[..n * attn], None, &mut bufs.panels, &mut bufs.attn_out);
        Ok(())
    }

    /// The fused q/k/v rows of `x` (`n × (attn + 2·kv)`: every query, then every key, then every
    /// value, head after head) into `qkv`, with Qwen3's head norms and the rotation applied.
    pub(super) fn project_qk(
        &self,
        layer: &Layer,
        layer_idx: usize,
        x: &[f32],
        ctx: &PassContext,
        panels: &mut [f32],
        qkv: &mut [f32],
    ) {
        layer.qkv.forward_into(x, None, panels, qkv);
        self.prepare_qk(layer, layer_idx, qkv, ctx);
    }

    /// One head's attention probabilities into `probs` (`n × total`): q·kᵀ · scale, the
    /// relative-position terms, the temperature, the mask and the softmax (recording the scores,
    /// the terms, q and k where `records` asks). The one place a head's attention is computed: a
    /// pass and the lazy path ([`super::LayerAttention`]) both call it, so they agree bit for bit.
    pub(super) fn head_probs(
        &self,
        layer: &Layer,
        h: usize,
        rows: &QkRows<'_>,
        ctx: &PassContext,
        probs: &mut [f32],
        records: HeadRecords<'_>,
    ) {
        let d = self.desc.head_dim;
        let QkRows { qkv, row, n, k_all, kv_stride, total, blocked, mask } = *rows;
        let g = self.desc.kv_head_of(h);
        let q = MatRef::rows(&qkv[h * d..], n, d, row);
        let k = MatRef::rows(&k_all[g * d..], total, d, kv_stride);
        let HeadRecords { scores, mut terms, queries, keys, sink } = records;
        if ctx.relative.is_none() {
            // Only the keys some query of each block of rows sees: a causal mask or a window
            // hides the rest, and the softmax below overwrites those cells with -inf before it
            // reads them (with position terms every cell is computed, as they are recorded).
            // The keys transposed (`d × total`, rows 16-aligned): each score is then summed over
            // the head's dimensions in order, 64 keys at a time, with no lanes to add up at the end
            // (heads are 32–128 wide: a sixteen-lane dot product would spend as long adding its
            // lanes as multiplying). The order is the same for one query row or many.
            KEYS_T.with_borrow_mut(|kt| {
                let stride = total.next_multiple_of(16).max(16);
                kt.resize(d * stride, 0.0);
                for j in 0..total {
                    let key = &k_all[j * kv_stride + g * d..j * kv_stride + g * d + d];
                    for (c, &v) in key.iter().enumerate() {
                        kt[c * stride + j] = v;
                    }
                }
                for (r, ks) in visible_blocks(mask, n, total) {
                    let q = MatRef::rows(&qkv[r.start * row + h * d..], r.len(), d, row);
                    let k = MatRef::rows(&kt[ks.start..], d, ks.len(), stride);
                    let dst = MatMut::rows(&mut probs[r.start * total + ks.start..], r.len(), ks.len(), total);
                    matmul(dst, q, k, self.desc.score_scale, false);
                }
            });
        } else {
            matmul(MatMut::rows(probs, n, total, total), q, k.t(), self.desc.score_scale, false);
        }
        let weights = (&self.desc, &self.positions, &layer.relative);
        positions::add_terms(weights, &HeadRows { head: h, n, q, k }, &ctx.relative, probs, &mut terms);
        if let Some(cap) = self.desc.attn_softcap {
            // Gemma 2's eager_attention_forward: `tanh(scores / softcap) * softcap`.
            kernels::softcap_in_place(probs, cap);
        }
        if ctx.temperature.to_bits() != 1.0f32.to_bits() {
            let inv = 1.0 / ctx.temperature;
            for s in probs.iter_mut() {
                *s *= inv;
            }
        }
        // Knocked-out entries: -inf, as a mask sets them (this pass's rows only).
        let first = ctx.mask.first;
        for &(q, k) in blocked {
            if (first..first + n).contains(&q) {
                probs[(q - first) * total + k] = f32::NEG_INFINITY;
            }
        }
        if let Some(logits) = &layer.sinks {
            // gpt-oss's eager_attention_forward: the sink joins each row's softmax as a last
            // column (under the same temperature), which is then dropped.
            let logit = logits[h] / ctx.temperature;
            // (A head no slot records the shares of: computed, then dropped.)
            let mut own = Vec::new();
            let shares = if let Some(s) = sink {
                s
            } else {
                own.resize(n, 0.0);
                &mut own[..]
            };
            kernels::softmax_rows_with_sink(probs, total, mask, scores, logit, shares);
        } else {
            kernels::softmax_rows(probs, total, mask, scores);
        }
        if let Some(recorded) = queries {
            for (dst, src) in recorded.chunks_mut(d).zip(qkv.chunks(row)) {
                dst.copy_from_slice(&src[h * d..(h + 1) * d]);
            }
        }
        if let Some(recorded) = keys {
            // The pass's own tokens' keys (a cached step's earlier keys were recorded before).
            for (dst, src) in recorded.chunks_mut(d).zip(k_all.chunks(kv_stride).skip(total - n)) {
                dst.copy_from_slice(&src[g * d..(g + 1) * d]);
            }
        }
    }

    /// The feed-forward block on `x` (no norm, no residual) into `bufs.mlp_out`:
    /// `down(act(up(x)))`, or gated `down(act(gate(x)) · up(x))` (`LlamaMLP`, `GemmaMLP`).
    fn feed_forward(&self, layer: &Layer, x: &[f32], bufs: &mut Buffers) {
        if let (Some(moe), Some(e)) = (&layer.moe, &self.desc.experts) {
            let out = &mut bufs.mlp_out[..x.len()];
            moe.forward(x, &self.desc, e, &mut bufs.route, out);
            return;
        }
        layer.up.forward_into(x, None, &mut bufs.panels, &mut bufs.inner);
        let i = self.desc.intermediate;
        let gated = self.desc.feed_forward == FeedForward::Gated;
        if gated {
            // Rows of [gate | up]: the gate half goes to `gated`, activated there, then × up.
            for (dst, src) in bufs.gated.chunks_mut(i).zip(bufs.inner.chunks(2 * i)) {
                dst.copy_from_slice(&src[..i]);
            }
        }
        let activated = if gated { &mut bufs.gated } else { &mut bufs.inner };
        activate(self.desc.activation, activated);
        if gated {
            for (dst, src) in bufs.gated.chunks_mut(i).zip(bufs.inner.chunks(2 * i)) {
                dst.iter_mut().zip(&src[i..]).for_each(|(g, u)| *g *= u);
            }
        }
        let input = if gated { &bufs.gated } else { &bufs.inner };
        layer.down.forward_into(input, None, &mut bufs.panels, &mut bufs.mlp_out);
    }
}
