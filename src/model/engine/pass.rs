//! The one forward pass, and what it hands out: a [`Listener`] says what it wants and gets it as
//! plain data, at named points, while the pass keeps nothing nobody asked for.
//!
//! What a pass runs on is an [`Input`]: token ids, their segment ids, the interventions, and a
//! [`Context`] — a fresh sequence, the tokens after a [`KvCache`] (a causal model writing), or a
//! decoder's tokens attending to an [`EncoderStates`]. The input is checked once, here.

use std::borrow::Cow;

use super::Network;
use super::block::{Buffers, LayerJob};
use super::context::PassContext;
pub use super::context::{Edit, HeadVisitor, LayerSlots, Writable};
use super::error::{EngineError, Result};
use super::positions::{self, Relative};
use crate::model::intervene::Interventions;
use crate::model::kernels;
use crate::model::rope::RopeTable;

/// What one pass's attention looks like: the sizes a listener allocates its slots by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassShape {
    /// Layers that run (all, or the first k an intervention keeps).
    pub layers: usize,
    /// Query heads per layer.
    pub heads: usize,
    /// Width of a head's q and k.
    pub head_dim: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Tokens this pass runs (query rows).
    pub seq_len: usize,
    /// Keys each query row has: cached tokens + these.
    pub keys: usize,
    /// Tokens of the encoder a decoder attends to (0 without cross-attention).
    pub source_len: usize,
    /// Terms each score sums ([`Network::score_terms`]; 0 for plain `q·k` scores).
    pub terms: usize,
    /// The heads have attention sinks ([`crate::model::describe::Description::attn_sinks`]): a
    /// share of each row goes to no key, and [`LayerSlots::sinks`] can record it.
    pub sinks: bool,
}

impl PassShape {
    /// Values of one layer's attention: `heads × seq_len × keys`.
    pub fn layer_len(&self) -> usize {
        self.heads * self.seq_len * self.keys
    }
}

/// What a listener asks the pass to compute beyond attention and the residual stream (each
/// costs time; the residual stream and the final norm's input are handed over as they are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wants {
    /// Each head's write into the residual stream, and each block's attention and MLP outputs.
    pub writes: bool,
    /// Each head's value of every token through its share of the output projection
    /// ([`Point::HeadValues`]): what the head would write from that token alone.
    pub head_values: bool,
}

/// A named point of the pass, handed to [`Listener::point`] as plain data (`seq_len × hidden`
/// rows unless said otherwise). With `l` a layer:
///
/// `ResidPre(l)` → attention → (`HeadWrite(l, h)` for each head, summing with the output bias to
/// `AttnOut(l)`) → a decoder's cross-attention (`CrossOut(l)`) → `ResidMid(l)` → MLP (`MlpOut(l)`)
/// → `ResidPost(l)` = `ResidPre(l + 1)` → … → `FinalNorm` → the last hidden state.
///
/// In a pre-LN block each part adds its write to the stream: `ResidMid = ResidPre + AttnOut
/// (+ CrossOut)`, `ResidPost = ResidMid + MlpOut`, or in parallel (GPT-NeoX)
/// `ResidPost = ResidPre + AttnOut + MlpOut` (no `ResidMid`). In a post-LN block (BERT) a norm
/// follows each addition: `ResidMid = norm(ResidPre + AttnOut)`, `ResidPost = norm(ResidMid + MlpOut)`.
#[derive(Debug, Clone, Copy)]
pub enum Point<'a> {
    /// The residual stream entering layer `layer` (layer 0: the embeddings' output).
    ResidPre {
        /// The layer.
        layer: usize,
        /// The stream.
        stream: &'a [f32],
    },
    /// One head's write into the residual stream: its share of the output projection (its
    /// `head_dim` columns of the context through theirs of `W_O`), before the bias. Zero for an
    /// ablated head. Only with [`Wants::writes`].
    HeadWrite {
        /// The layer.
        layer: usize,
        /// The head.
        head: usize,
        /// The write.
        write: &'a [f32],
    },
    /// What head `head` writes from each token it attends to, per unit of attention: every
    /// token's value through the head's columns of the output projection (`v_j · W_Oʰ`), so that
    /// its write at query `i` is `Σ_j A[i, j] · values[j]`. Only with [`Wants::head_values`],
    /// and for this pass's own tokens (not a cache's).
    HeadValues {
        /// The layer.
        layer: usize,
        /// The head.
        head: usize,
        /// `seq_len × hidden`.
        values: &'a [f32],
        /// With an output norm (Gemma 2 and 3, OLMo-2), what the write at each query row is
        /// divided by (`seq_len` values: the write at query `i` is
        /// `Σ_j A[i, j] · values[j] / row_scales[i]`); empty without one.
        row_scales: &'a [f32],
    },
    /// The attention block's output (every head's write + `bias`), before it joins the stream.
    /// Only with [`Wants::writes`].
    AttnOut {
        /// The layer.
        layer: usize,
        /// The output.
        out: &'a [f32],
        /// The output projection's bias (`hidden`).
        bias: &'a [f32],
    },
    /// The stream after the attention sub-blocks (self-attention, then a decoder's
    /// cross-attention) and before the MLP (sequential blocks only).
    ResidMid {
        /// The layer.
        layer: usize,
        /// The stream.
        stream: &'a [f32],
    },
    /// A decoder block's cross-attention output, before it joins the stream. Only with
    /// [`Wants::writes`].
    CrossOut {
        /// The layer.
        layer: usize,
        /// The output.
        out: &'a [f32],
    },
    /// The MLP's write into the stream. Only with [`Wants::writes`].
    MlpOut {
        /// The layer.
        layer: usize,
        /// The write.
        out: &'a [f32],
    },
    /// A mixture-of-experts layer's routing (only layers with experts): for each of the
    /// `seq_len` tokens the router's distribution over the `experts` (after the softmax), the
    /// `top_k` experts chosen (largest weight first) and the weights their outputs are multiplied
    /// by (after the family's normalisation). The layer's `MlpOut` is their weighted sum.
    Route {
        /// The layer.
        layer: usize,
        /// Experts in the layer.
        experts: usize,
        /// `seq_len × experts`.
        probs: &'a [f32],
        /// `seq_len × top_k` expert ids.
        chosen: &'a [u32],
        /// `seq_len × top_k`.
        weights: &'a [f32],
    },
    /// The stream leaving layer `layer`.
    ResidPost {
        /// The layer.
        layer: usize,
        /// The stream.
        stream: &'a [f32],
    },
    /// The final norm's input (the last residual stream) and what it divides each position's
    /// row by (`seq_len` values: `sqrt(var + eps)` for a LayerNorm, after centring;
    /// `sqrt(mean(x²) + eps)` for an RMSNorm). Networks without a final norm (post-LN encoders)
    /// have no such point: their last `ResidPost` is the output.
    FinalNorm {
        /// The last residual stream.
        input: &'a [f32],
        /// The scale per position.
        scale: &'a [f32],
    },
}

/// What listens to a pass. Every method has a default that asks for nothing, so a listener
/// names only what it wants.
pub trait Listener: Send {
    /// What to compute beyond attention and the residual stream.
    fn wants(&self) -> Wants {
        Wants::default()
    }

    /// Called once, before the first layer.
    fn start(&mut self, _shape: &PassShape) {}

    /// Where layer `layer`'s attention goes; called just before the layer runs.
    fn layer_slots(&mut self, _layer: usize) -> LayerSlots<'_> {
        LayerSlots::default()
    }

    /// A named point of the pass. An error stops the pass and is returned.
    fn point(&mut self, _point: Point<'_>) -> Result<()> {
        Ok(())
    }

    /// After layer `layer` ran: its slots are written, every head was visited. An error
    /// stops the pass and is returned ([`EngineError::Stopped`] when newer input made it moot).
    fn layer_done(&mut self, _layer: usize) -> Result<()> {
        Ok(())
    }

    /// After the last layer: the bytes the pass worked in (its buffers, one scratch matrix per
    /// head running at a time), freed as it returns.
    fn finished(&mut self, _working_bytes: usize) {}
}

/// The keys and values of the tokens run so far, per layer (after the rotation), so that the
/// next tokens of a generation run alone: rows of `kv_heads · head_dim`. Made by
/// [`Network::new_cache`], which refuses networks whose tokens cannot run one at a time.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    pub(super) keys: Vec<Vec<f32>>,
    pub(super) values: Vec<Vec<f32>>,
    pub(super) len: usize,
    /// The first layer whose rows are all there: a pass resumed at a layer appends nothing to
    /// the layers below it, so only passes resumed there or later can follow.
    pub(super) first_layer: usize,
}

impl KvCache {
    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `len` tokens (a causal model's keys and values of a prefix do not depend
    /// on what follows it): the next pass continues after them.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        for rows in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let width = rows.len() / self.len;
            rows.truncate(len * width);
        }
        self.len = len;
    }

    /// A copy of the first `len` tokens' keys and values of the layers from `first_layer` on
    /// (the layers below are left empty): what a pass resumed at `first_layer` after those
    /// tokens reads — a patched run reusing the unpatched run's prefix.
    #[must_use]
    pub fn prefix(&self, len: usize, first_layer: usize) -> KvCache {
        let len = len.min(self.len);
        let first_layer = first_layer.max(self.first_layer);
        let part = |rows: &Vec<Vec<f32>>| -> Vec<Vec<f32>> {
            rows.iter()
                .enumerate()
                .map(|(l, r)| {
                    if l < first_layer || self.len == 0 { Vec::new() } else { r[..len * (r.len() / self.len)].to_vec() }
                })
                .collect()
        };
        KvCache { keys: part(&self.keys), values: part(&self.values), len, first_layer }
    }
}

/// An encoder's output as a decoder with cross-attention reads it, checked against that decoder
/// ([`Network::encoder_states`]).
#[derive(Debug, Clone, Copy)]
pub struct EncoderStates<'a> {
    pub(super) hidden: &'a [f32],
}

/// Where a pass's tokens sit.
#[derive(Debug, Default)]
pub enum Context<'a> {
    /// A fresh sequence.
    #[default]
    Fresh,
    /// After the tokens in the cache (a causal model writing); the pass appends its own.
    Cached(&'a mut KvCache),
    /// A decoder's tokens attending to its encoder's output.
    Encoder(EncoderStates<'a>),
}

/// What one pass runs on.
#[derive(Debug)]
pub struct Input<'a> {
    /// Token ids.
    pub ids: &'a [u32],
    /// Segment ids, one per token (the tokenizer's; models that do not read them get zeros).
    pub type_ids: &'a [u32],
    /// Changes to the pass ([`Interventions::default`] changes nothing).
    pub interventions: &'a Interventions,
    /// Where the tokens sit.
    pub context: Context<'a>,
    /// Where the pass starts: None at the embeddings; `(layer, stream)` at `layer`, with the
    /// stream entering it (`seq_len × hidden`, as [`Point::ResidPre`] hands it: after the
    /// interventions' steering), layers before it not run.
    pub resume: Option<(usize, &'a [f32])>,
}

impl<'a> Input<'a> {
    /// A fresh sequence, faithful unless `interventions` say otherwise.
    pub fn new(ids: &'a [u32], type_ids: &'a [u32], interventions: &'a Interventions) -> Self {
        Self { ids, type_ids, interventions, context: Context::Fresh, resume: None }
    }

    /// The same input in `context`.
    #[must_use]
    pub fn within(self, context: Context<'a>) -> Self {
        Self { context, ..self }
    }

    /// The same input run from layer `layer` on, entering it as `stream` (`seq_len × hidden`): the
    /// layers before it changed nothing (a patched run's unchanged start). With a
    /// [`Context::Cached`] the cache's layers from `layer` on are read and appended to.
    #[must_use]
    pub fn resumed(self, layer: usize, stream: &'a [f32]) -> Self {
        Self { resume: Some((layer, stream)), ..self }
    }
}

impl Network {
    /// An empty key/value cache for a [`Context::Cached`] pass, or why this network's tokens
    /// cannot run a few at a time.
    pub fn new_cache(&self) -> Result<KvCache> {
        let d = &self.desc;
        if !d.causal || !positions::allows_cache(&d.position_bias) {
            return Err(EngineError::NotCausal { family: d.family.clone() });
        }
        Ok(KvCache { keys: vec![Vec::new(); d.layers], values: vec![Vec::new(); d.layers], len: 0, first_layer: 0 })
    }

    /// `hidden` (`source × hidden`, an encoder's output) as this decoder's cross-attention reads
    /// it, or why it cannot.
    pub fn encoder_states<'a>(&self, hidden: &'a [f32]) -> Result<EncoderStates<'a>> {
        let d = &self.desc;
        if !d.cross_attention {
            return Err(EngineError::NoCrossAttention { family: d.family.clone() });
        }
        if hidden.is_empty() || !hidden.len().is_multiple_of(d.hidden.max(1)) {
            return Err(EngineError::EncoderWidth { values: hidden.len(), hidden: d.hidden });
        }
        Ok(EncoderStates { hidden })
    }

    /// Checks one input against the network: length (after `past` cached tokens), vocabulary,
    /// token types. Returns the type ids the embeddings read. The one place input is checked.
    pub fn check_input<'a>(&self, ids: &[u32], type_ids: &'a [u32], past: usize) -> Result<Cow<'a, [u32]>> {
        let d = &self.desc;
        let seq_len = ids.len();
        if seq_len == 0 || type_ids.len() != seq_len {
            return Err(EngineError::Segments { tokens: seq_len, segments: type_ids.len() });
        }
        if past + seq_len > d.max_len {
            return Err(EngineError::TooLong { tokens: past + seq_len, max: d.max_len });
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= d.vocab_size) {
            return Err(EngineError::TokenId { id, vocab: d.vocab_size });
        }
        if d.reads_token_types && d.embedding.token_types > 0 {
            if let Some(&t) = type_ids.iter().find(|&&t| t as usize >= d.embedding.token_types) {
                return Err(EngineError::TokenType { token_type: t, types: d.embedding.token_types });
            }
            Ok(Cow::Borrowed(type_ids))
        } else {
            Ok(Cow::Owned(vec![0; seq_len]))
        }
    }

    /// The context a pass over `n` tokens after `past` cached ones computes with.
    pub(super) fn pass_context(&self, iv: &Interventions, past: usize, n: usize) -> PassContext {
        let d = &self.desc;
        let positions_on = !iv.zero_positions;
        PassContext {
            temperature: iv.temperature,
            mask: kernels::Mask { causal: d.causal || iv.causal, window: None, first: past },
            windows: (0..d.layers).map(|l| d.window(l)).collect(),
            rope: d.rotary.as_ref().filter(|_| positions_on).map(|r| RopeTable::new(r, past, n, past + n)),
            local_rope: d.local_rotary.as_ref().filter(|_| positions_on).map(|r| RopeTable::new(r, past, n, past + n)),
            rope_of: (0..d.layers)
                .map(|l| match d.rotary_of(l) {
                    None => 0,
                    Some(r) if d.local_rotary.as_ref() == Some(r) && d.rotary.as_ref() != Some(r) => 2,
                    Some(_) => 1,
                })
                .collect(),
            relative: Relative::new(&d.position_bias, n),
            ablated: iv.ablated.iter().copied().collect(),
            knockout: iv.knockout.iter().copied().collect(),
        }
    }

    /// Checks the interventions against this network and an input of `total` positions (the pass
    /// runs this check): what [`Interventions::validate`] checks, knocked-out entries (in the
    /// input, no query left without a key) and the steering vector's width.
    pub fn check_interventions(&self, iv: &Interventions, total: usize) -> Result<()> {
        let d = &self.desc;
        iv.validate(d.layers, d.heads).map_err(EngineError::Intervention)?;
        let layers = iv.first_layers.unwrap_or(d.layers);
        if !iv.knockout.is_empty() {
            let mask = |l: usize| kernels::Mask { causal: d.causal || iv.causal, window: d.window(l), first: 0 };
            iv.check_knockout(total, layers, |l, q| mask(l).visible(q, total)).map_err(EngineError::Intervention)?;
        }
        if let Some(s) = &iv.steer
            && s.vector.len() != d.hidden
        {
            return Err(EngineError::Intervention(format!(
                "the steering vector has {} values; this model's residual stream has {}",
                s.vector.len(),
                d.hidden
            )));
        }
        Ok(())
    }

    /// The keys query position `query` sees among `total` (a causal mask, a window) in layer
    /// `layer`, or in some layer (None: the widest of the layers' windows): what a knockout of a
    /// key outside it changes (nothing).
    pub fn visible_keys(
        &self,
        iv: &Interventions,
        layer: Option<usize>,
        query: usize,
        total: usize,
    ) -> std::ops::Range<usize> {
        let d = &self.desc;
        let seen = |l: usize| {
            kernels::Mask { causal: d.causal || iv.causal, window: d.window(l), first: 0 }.visible(query, total)
        };
        match layer {
            Some(l) => seen(l),
            None => {
                (0..d.layers.max(1)).map(seen).reduce(|a, b| a.start.min(b.start)..a.end.max(b.end)).unwrap_or(0..0)
            }
        }
    }

    /// **The forward pass.** Runs `input` through the network, handing `listener` what it asks
    /// for as it goes (see [`Listener`], [`Point`]), and returns the last hidden state
    /// (`seq_len × hidden`, after the final norm). Our kernels run on candle's worker pool: one
    /// pool, not two, on few cores.
    pub fn run(&self, input: Input<'_>, listener: &mut dyn Listener) -> Result<Vec<f32>> {
        candle_core::utils::with_threadpool(|| self.run_in_pool(input, listener))
    }

    fn run_in_pool(&self, input: Input<'_>, listener: &mut dyn Listener) -> Result<Vec<f32>> {
        let d = &self.desc;
        let Input { ids, type_ids, interventions: iv, context, resume } = input;
        let (mut cache, encoder) = match context {
            Context::Fresh => (None, None),
            Context::Cached(cache) => (Some(cache), None),
            Context::Encoder(states) => (None, Some(states.hidden)),
        };
        if d.cross_attention && encoder.is_none() {
            return Err(EngineError::NeedsEncoder { family: d.family.clone() });
        }
        if let Some(c) = &cache
            && c.keys.len() != d.layers
        {
            return Err(EngineError::ForeignCache { cache: c.keys.len(), layers: d.layers });
        }
        let past = cache.as_ref().map_or(0, |c| c.len);
        let type_ids = self.check_input(ids, type_ids, past)?;
        let n = ids.len();
        self.check_interventions(iv, past + n)?;
        let layers = iv.first_layers.unwrap_or(d.layers); // validated above
        let start = resume.map_or(0, |(layer, _)| layer);
        if let Some((layer, stream)) = resume
            && (layer >= layers || stream.len() != n * d.hidden)
        {
            return Err(EngineError::Resume { layer, layers, values: stream.len(), expected: n * d.hidden });
        }
        if let Some(c) = &cache
            && c.first_layer > start
        {
            return Err(EngineError::PartialCache { first_layer: c.first_layer, start });
        }
        let shape = PassShape {
            layers,
            heads: d.heads,
            head_dim: d.head_dim,
            hidden: d.hidden,
            seq_len: n,
            keys: past + n,
            source_len: encoder.map_or(0, |e| e.len() / d.hidden.max(1)),
            terms: self.score_terms().len(),
            sinks: d.attn_sinks,
        };
        listener.start(&shape);
        let wants = listener.wants();
        let ctx = self.pass_context(iv, past, n);
        let mut x = match resume {
            Some((_, stream)) => stream.to_vec(),
            None => self.embeddings.forward(ids, &type_ids, past, !iv.zero_positions),
        };
        // The steering vector joins the stream entering its layer (a resumed pass's stream has it).
        let steer = iv.steer.as_ref().filter(|s| s.layer > start || resume.is_none()).map(|s| (s.layer, s.added()));
        let mut bufs = Buffers::new(n, shape.source_len, d);
        for l in start..layers {
            if let Some((_, added)) = steer.as_ref().filter(|(at, _)| *at == l) {
                for row in x.chunks_mut(d.hidden) {
                    row.iter_mut().zip(added).for_each(|(x, a)| *x += a);
                }
            }
            listener.point(Point::ResidPre { layer: l, stream: &x })?;
            let layer = &self.layers[d.layer_weights[l]];
            let job = LayerJob {
                layer_idx: l,
                slots: listener.layer_slots(l),
                cache: cache.as_deref_mut().map(|c| (&mut c.keys[l], &mut c.values[l])),
                encoder,
            };
            self.layer_forward(layer, &mut x, &ctx, job, &mut bufs)?;
            if let (true, Some(e)) = (layer.moe.is_some(), &d.experts) {
                let r = &bufs.route;
                let (probs, chosen, weights) = (&r.probs[..], &r.chosen[..], &r.weights[..]);
                listener.point(Point::Route { layer: l, experts: e.count, probs, chosen, weights })?;
            }
            if wants.writes {
                self.hand_writes(layer, l, &bufs, listener)?;
            }
            if wants.head_values {
                self.hand_head_values(layer, l, &bufs, listener)?;
            }
            if !d.parallel_residual {
                listener.point(Point::ResidMid { layer: l, stream: &bufs.attended })?;
            }
            listener.point(Point::ResidPost { layer: l, stream: &x })?;
            listener.layer_done(l)?;
        }
        if let Some(c) = cache {
            c.len = past + n;
            c.first_layer = start;
        }
        if let Some(norm) = &self.final_norm {
            let scale = norm.scales(&x);
            listener.point(Point::FinalNorm { input: &x, scale: &scale })?;
            norm.forward_in_place(&mut x);
        }
        listener.finished(bufs.bytes());
        Ok(x)
    }

    /// The writes of layer `l`'s parts, from what its run left in `bufs`: each head's share of
    /// the output projection, the attention output, cross-attention's, the MLP's.
    fn hand_writes(
        &self,
        layer: &super::block::Layer,
        l: usize,
        bufs: &Buffers,
        listener: &mut dyn Listener,
    ) -> Result<()> {
        let d = &self.desc;
        let n = bufs.attn_out.len() / d.hidden.max(1);
        let mut write = vec![0.0; n * d.hidden];
        for head in 0..d.heads {
            let columns = head * d.head_dim..(head + 1) * d.head_dim;
            layer.output.partial_into(&bufs.context[..n * d.query_width()], columns, &mut write);
            self.head_share(layer, &bufs.attn_scales, &mut write);
            listener.point(Point::HeadWrite { layer: l, head, write: &write })?;
        }
        // (No family has an output bias with output norms; a residual scale scales it.)
        let mut bias = layer.output.bias().to_vec();
        self.head_share(layer, &[], &mut bias);
        listener.point(Point::AttnOut { layer: l, out: &bufs.attn_out, bias: &bias })?;
        if layer.cross.is_some() {
            listener.point(Point::CrossOut { layer: l, out: &bufs.cross_out })?;
        }
        listener.point(Point::MlpOut { layer: l, out: &bufs.mlp_out })
    }

    /// Each head's values of this pass's tokens through its columns of the output projection.
    fn hand_head_values(
        &self,
        layer: &super::block::Layer,
        l: usize,
        bufs: &Buffers,
        listener: &mut dyn Listener,
    ) -> Result<()> {
        let d = &self.desc;
        let (hd, attn, kv) = (d.head_dim, d.query_width(), d.kv_width());
        let row = attn + 2 * kv;
        let n = bufs.attn_out.len() / d.hidden.max(1);
        // Rows laid out as the output projection reads them (`n × attn`): head h's columns hold
        // the values of the key/value head it reads.
        let mut values = vec![0.0; n * attn];
        for (dst, src) in values.chunks_mut(attn).zip(bufs.qkv.chunks(row)) {
            for h in 0..d.heads {
                let g = d.kv_head_of(h);
                dst[h * hd..(h + 1) * hd].copy_from_slice(&src[attn + kv + g * hd..attn + kv + (g + 1) * hd]);
            }
        }
        let mut out = vec![0.0; n * d.hidden];
        // Through the output norm's weight and the residual scale; the norm's division by each
        // query row's scale is handed apart (`row_scales`): it belongs to the row written to.
        let ones = vec![1.0; n];
        let row_scales: &[f32] = if layer.attn_out_norm.is_some() { &bufs.attn_scales } else { &[] };
        for head in 0..d.heads {
            layer.output.partial_into(&values, head * hd..(head + 1) * hd, &mut out);
            self.head_share(layer, &ones, &mut out);
            listener.point(Point::HeadValues { layer: l, head, values: &out, row_scales })?;
        }
        Ok(())
    }
}
