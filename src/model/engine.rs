//! The one network: a forward pass that runs any [`Description`] and records every head's attention
//! (and, on request, its scores, the terms they sum, queries and keys).
//!
//! The blocks mirror Hugging Face transformers' eager code (`modeling_bert.py` is the template; the
//! family files in [`super::families`] name where each family departs from it). The heavy steps run on
//! plain `f32` buffers: weights stored as panels (each panel's product streams its weights in order),
//! each head's scores written straight into the recorded attention and normalised there, heads in
//! parallel, working buffers allocated once per pass and reused by every layer.

use std::borrow::Cow;
use std::collections::HashMap;

use candle_core::{DType, Storage, Tensor};
use rayon::prelude::*;

use super::describe::{
    Activation, Description, Disentangled, FeedForward, LmHead, NormKind, NormPlacement, PositionBias, Positions,
    Projection,
};
use super::gemm::{MatMut, MatRef, matmul};
use super::intervene::Interventions;
use super::kernels;
use super::relpos;
use super::rope::RopeTable;
use crate::alloc as spare;

/// What to record besides the attention probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Attention probabilities only (what `output_attentions=True` returns).
    Attention,
    /// Also pre-softmax scores, the terms they sum, queries and keys (for the neuron view).
    Full,
}

/// What one forward pass produced, as flat `f32` vectors.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// Last hidden state, `seq_len × hidden`.
    pub last_hidden: Vec<f32>,
    /// Attention probabilities, `[layer][head][query][key]`.
    pub probs: Vec<f32>,
    /// Pre-softmax scores (the sum the softmax is applied to), same layout (empty unless `Capture::Full`).
    pub scores: Vec<f32>,
    /// The terms the scores sum, `[term][layer][head][query][key]`, named by
    /// [`Network::score_terms`] (empty unless `Capture::Full` and the scores have several terms).
    pub terms: Vec<f32>,
    /// Query vectors, `[layer][head][token][head_dim]` (empty unless `Capture::Full`).
    pub queries: Vec<f32>,
    /// Key vectors, same layout as `queries` (empty unless `Capture::Full`).
    pub keys: Vec<f32>,
    /// Cross-attention probabilities of a decoder run on an encoder's output,
    /// `[layer][head][query][source]` (empty otherwise).
    pub cross: Vec<f32>,
}

/// A tensor's values as a flat row-major `f32` vector.
fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    let t = t.to_dtype(DType::F32)?.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(cpu), Some((start, end))) => Ok(cpu.as_slice::<f32>()?[start..end].to_vec()),
        _ => Err(candle_core::Error::Msg("expected a contiguous CPU tensor".into())),
    }
}

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

/// Canonical tensors by name, taken out as they are loaded, and how the network keeps them.
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    storage: WeightStorage,
}

/// How a network holds its linear layers' weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightStorage {
    /// Widened to f32 once, at load.
    F32,
    /// In the checkpoint's precision when that is f16 or bf16 (half the memory of f32), each
    /// panel widened to f32 as a product needs it, into a buffer of the thread's. The widening
    /// is exact, so the products — and the attention — are bit for bit those of [`Self::F32`];
    /// and it costs nothing measurable (short inputs are faster: half the bytes to stream).
    #[default]
    Stored,
}

impl WeightStorage {
    /// The app's and command line's choice: [`Self::Stored`], or what `ATTNVIZ_WEIGHTS=f32|stored`
    /// says (to compare the two).
    pub fn from_env() -> Self {
        match std::env::var("ATTNVIZ_WEIGHTS").ok().as_deref().map(str::trim) {
            Some("f32") => Self::F32,
            _ => Self::Stored,
        }
    }
}

/// Weights as the network keeps them: f32, or the checkpoint's 16-bit floats, widened to f32 a
/// piece at a time as they are used ([`WeightStorage::Stored`]): a linear layer's panels, the
/// token embeddings, `lm_head`.
#[derive(Debug, Clone)]
enum Values {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
            Self::Bf16(v) => v.len(),
        }
    }

    /// Bytes as held.
    fn bytes(&self) -> usize {
        match self {
            Self::F32(v) => v.len() * 4,
            Self::F16(v) => v.len() * 2,
            Self::Bf16(v) => v.len() * 2,
        }
    }

    /// Values `range` as f32 into `out` (exactly: every f16 and bf16 is an f32).
    fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        match self {
            Self::F32(v) => out.copy_from_slice(&v[range]),
            Self::F16(v) => v[range].convert_to_f32_slice(out),
            Self::Bf16(v) => v[range].convert_to_f32_slice(out),
        }
    }

    /// A row-major `out × in` weight as panels of [`PANEL`] output columns (each `in × PANEL`),
    /// in the same precision.
    fn panelized(&self, in_dim: usize, out_dim: usize) -> Self {
        match self {
            Self::F32(w) => Self::F32(panelize(w, in_dim, out_dim)),
            Self::F16(w) => Self::F16(panelize(w, in_dim, out_dim)),
            Self::Bf16(w) => Self::Bf16(panelize(w, in_dim, out_dim)),
        }
    }

    /// `parts` side by side (the fused q/k/v, gate/up): in their precision when they share it.
    fn concat(parts: Vec<Self>) -> Self {
        let total = parts.iter().map(Self::len).sum();
        if parts.iter().all(|p| matches!(p, Self::F16(_))) {
            return Self::F16(
                parts.into_iter().flat_map(|p| if let Self::F16(v) = p { v } else { Vec::new() }).collect(),
            );
        }
        if parts.iter().all(|p| matches!(p, Self::Bf16(_))) {
            return Self::Bf16(
                parts.into_iter().flat_map(|p| if let Self::Bf16(v) = p { v } else { Vec::new() }).collect(),
            );
        }
        let mut out = Vec::with_capacity(total);
        for p in parts {
            match p {
                Self::F32(v) => out.extend(v),
                Self::F16(v) => out.extend(v.iter().map(|x| x.to_f32())),
                Self::Bf16(v) => out.extend(v.iter().map(|x| x.to_f32())),
            }
        }
        Self::F32(out)
    }
}

impl Weights {
    /// The canonical tensors of a model, held as `storage` says.
    pub fn new(tensors: HashMap<String, Tensor>, storage: WeightStorage) -> Self {
        Self { tensors, storage }
    }

    /// The values of `name` (which must have `shape`) as the network keeps a large weight (a
    /// linear layer's, the token embeddings, `lm_head`): in its 16-bit precision with
    /// [`WeightStorage::Stored`], else f32. Taken out.
    fn take_values(&mut self, name: &str, shape: &[usize]) -> candle_core::Result<Values> {
        let t = self.checked(name, shape)?;
        let stored = self.storage == WeightStorage::Stored;
        let values = match t.dtype() {
            DType::F16 if stored => Values::F16(t.contiguous()?.flatten_all()?.to_vec1::<half::f16>()?),
            DType::BF16 if stored => Values::Bf16(t.contiguous()?.flatten_all()?.to_vec1::<half::bf16>()?),
            _ => Values::F32(values(t)?),
        };
        self.tensors.remove(name);
        Ok(values)
    }

    /// The values of `name`, which must have `shape`, taken out of the set (each tensor is read
    /// once; dropping it as it is converted keeps one copy of the weights in memory, not two).
    fn take(&mut self, name: &str, shape: &[usize]) -> candle_core::Result<Vec<f32>> {
        let v = self.values(name, shape)?;
        self.tensors.remove(name);
        Ok(v)
    }

    /// The values of `name`, which must have `shape`, left in the set.
    fn values(&self, name: &str, shape: &[usize]) -> candle_core::Result<Vec<f32>> {
        values(self.checked(name, shape)?)
    }

    /// Tensor `name`, which must be there with `shape`.
    fn checked(&self, name: &str, shape: &[usize]) -> candle_core::Result<&Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| candle_core::Error::Msg(format!("cannot find tensor {name}")))?;
        if t.dims() != shape {
            return Err(candle_core::Error::Msg(format!(
                "tensor {name} has shape {:?}, but the config implies {shape:?}",
                t.dims()
            )));
        }
        Ok(t)
    }

    fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// Output features per weight panel of a [`Linear`].
const PANEL: usize = 64;

/// `nn.Linear`: `x · Wᵀ + b`. `Wᵀ` (`in × out`) is stored as panels of [`PANEL`] output columns,
/// each a contiguous row-major `in × PANEL` block: each panel's product streams its weights from
/// one block of memory in order (a whole `Wᵀ` is read with a stride of `out` floats per step,
/// which is much slower for short inputs), and the panels run in parallel.
#[derive(Debug, Clone)]
struct Linear {
    /// The panels, f32 or 16-bit (widened one panel at a time per product).
    panels: Values,
    bias: Vec<f32>,
    in_dim: usize,
}

/// `weight` (row-major `out × in`) as panels of [`PANEL`] output columns, each `in × PANEL`.
fn panelize<T: Copy>(weight: &[T], in_dim: usize, out_dim: usize) -> Vec<T> {
    let mut panels = Vec::with_capacity(weight.len());
    for start in (0..out_dim).step_by(PANEL) {
        let end = (start + PANEL).min(out_dim);
        for i in 0..in_dim {
            panels.extend((start..end).map(|o| weight[o * in_dim + i]));
        }
    }
    panels
}

thread_local! {
    /// One widened 16-bit panel per thread.
    static WIDE_PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Linear {
    /// From a row-major `out × in` weight and an `out` bias.
    fn new(weight: &[f32], bias: Vec<f32>, in_dim: usize) -> Self {
        Self { panels: Values::F32(panelize(weight, in_dim, bias.len())), bias, in_dim }
    }

    /// From a row-major `out × in` weight (in the precision it is kept in) and an `out` bias.
    fn from_values(weight: &Values, bias: Vec<f32>, in_dim: usize) -> Self {
        let panels = weight.panelized(in_dim, bias.len());
        Self { panels, bias, in_dim }
    }

    /// `{name}.weight` (`out × in`) and `{name}.bias` (zeros when `bias` is false).
    fn load(w: &mut Weights, name: &str, in_dim: usize, out_dim: usize, bias: bool) -> candle_core::Result<Self> {
        let weight = w.take_values(&format!("{name}.weight"), &[out_dim, in_dim])?;
        let bias = if bias { w.take(&format!("{name}.bias"), &[out_dim])? } else { vec![0.0; out_dim] };
        Ok(Self::from_values(&weight, bias, in_dim))
    }

    /// Bytes its weights take as held.
    fn weight_bytes(&self) -> usize {
        self.panels.bytes()
    }

    /// Several linear layers on the same input as one (their outputs side by side), each
    /// `(name, out_dim)`; zero biases when `bias` is false.
    fn fused(w: &mut Weights, parts: &[(String, usize)], in_dim: usize, bias: bool) -> candle_core::Result<Self> {
        let total: usize = parts.iter().map(|(_, out)| out).sum();
        let mut weight = Vec::with_capacity(parts.len());
        let mut biases = Vec::with_capacity(total);
        for (name, out_dim) in parts {
            weight.push(w.take_values(&format!("{name}.weight"), &[*out_dim, in_dim])?);
            if bias {
                biases.extend(w.take(&format!("{name}.bias"), &[*out_dim])?);
            } else {
                biases.extend(std::iter::repeat_n(0.0, *out_dim));
            }
        }
        Ok(Self::from_values(&Values::concat(weight), biases, in_dim))
    }

    fn out_dim(&self) -> usize {
        self.bias.len()
    }

    /// `out = x · Wᵀ + b (+ residual)` for the rows of `x`. Each panel's product goes to its own
    /// block of `scratch`; one pass then adds the bias (and residual) while assembling the rows.
    fn forward_into(&self, x: &[f32], residual: Option<&[f32]>, scratch: &mut [f32], out: &mut [f32]) {
        let (in_dim, out_dim) = (self.in_dim, self.out_dim());
        let rows = x.len() / in_dim.max(1);
        if rows == 0 || in_dim == 0 {
            kernels::add_panels(&[], PANEL, &self.bias, residual, out);
            return;
        }
        let scratch = &mut scratch[..rows * out_dim];
        let product = |dst: &mut [f32], w: &[f32]| {
            let width = w.len() / in_dim;
            matmul(
                MatMut::rows(dst, rows, width, width),
                MatRef::rows(x, rows, in_dim, in_dim),
                MatRef::rows(w, in_dim, width, width),
                1.0,
                false,
            );
        };
        let chunks = scratch.par_chunks_mut(rows * PANEL).enumerate();
        if let Values::F32(p) = &self.panels {
            chunks.zip(p.par_chunks(in_dim * PANEL)).for_each(|((_, dst), w)| product(dst, w));
        } else {
            // A 16-bit panel is widened into this thread's buffer first, then multiplied like an
            // f32 one.
            chunks.for_each(|(i, dst)| {
                let start = i * in_dim * PANEL;
                let len = dst.len() / rows * in_dim;
                WIDE_PANEL.with_borrow_mut(|wide| {
                    wide.resize(len, 0.0);
                    self.panels.widen_into(start..start + len, wide);
                    product(dst, wide);
                });
            });
        }
        kernels::add_panels(scratch, PANEL, &self.bias, residual, out);
    }

    /// `x · Wᵀ + b` into a new vector.
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.in_dim.max(1);
        let mut scratch = vec![0.0; rows * self.out_dim()];
        let mut out = vec![0.0; rows * self.out_dim()];
        self.forward_into(x, None, &mut scratch, &mut out);
        out
    }
}

/// A norm over the last dimension: `nn.LayerNorm` or an `RMSNorm` (see [`NormKind`]).
#[derive(Debug, Clone)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
    kind: NormKind,
}

impl Norm {
    fn load(w: &mut Weights, name: &str, size: usize, d: &Description) -> candle_core::Result<Self> {
        Self::load_kind(w, name, size, d.norm_eps, d.norm_kind)
    }

    fn load_kind(w: &mut Weights, name: &str, size: usize, eps: f32, kind: NormKind) -> candle_core::Result<Self> {
        let weight = w.take(&format!("{name}.weight"), &[size])?;
        let bias = if kind == NormKind::Layer { w.take(&format!("{name}.bias"), &[size])? } else { Vec::new() };
        Ok(Self { weight, bias, eps, kind })
    }

    fn forward_in_place(&self, x: &mut [f32]) {
        match self.kind {
            NormKind::Layer => kernels::layer_norm_rows(x, &self.weight, &self.bias, self.eps),
            NormKind::Rms => kernels::rms_norm_rows(x, &self.weight, self.eps, false),
            NormKind::RmsPlusOne => kernels::rms_norm_rows(x, &self.weight, self.eps, true),
        }
    }
}

/// The embeddings (`BertEmbeddings` and its variants): token rows (× scale), plus token-type and
/// position rows in the family's order, then the norm and projection in the family's order.
#[derive(Debug, Clone)]
struct Embeddings {
    width: usize,
    /// `vocab × width`, f32 or 16-bit (widened a row at a time).
    tokens: Values,
    positions: Option<(Vec<f32>, usize)>,
    types: Option<Vec<f32>>,
    norm: Option<Norm>,
    projection: Option<(Linear, Projection)>,
    scale: f32,
    positions_first: bool,
}

impl Embeddings {
    fn load(w: &mut Weights, d: &Description) -> candle_core::Result<Self> {
        let e = &d.embedding;
        let positions = match e.positions {
            Positions::Table { rows, offset } => Some((w.take("embed.positions.weight", &[rows, e.width])?, offset)),
            Positions::Sinusoidal { rows } => Some((sinusoids(rows, e.width), 0)),
            Positions::None => None,
        };
        let norm_width = if e.projection == Some(Projection::BeforeNorm) { d.hidden } else { e.width };
        Ok(Self {
            width: e.width,
            tokens: w.take_values("embed.tokens.weight", &[d.vocab_size, e.width])?,
            positions,
            types: (e.token_types > 0).then(|| w.take("embed.types.weight", &[e.token_types, e.width])).transpose()?,
            norm: e.norm.then(|| Norm::load(w, "embed.norm", norm_width, d)).transpose()?,
            projection: e
                .projection
                .map(|p| Linear::load(w, "embed.project", e.width, d.hidden, e.projection_bias).map(|l| (l, p)))
                .transpose()?,
            scale: e.scale,
            positions_first: e.positions_first,
        })
    }

    /// `seq_len × hidden` values for tokens at positions `first..`. Sums are formed in the
    /// family's order (BERT: `(word + type) + position`; DeBERTa, GPT-2: `(word + position) +
    /// type`), as the tensors are added in Python.
    fn forward(&self, ids: &[u32], type_ids: &[u32], first: usize, positions_on: bool) -> Vec<f32> {
        let e = self.width;
        let mut x = vec![0.0; ids.len() * e];
        for (&id, row) in ids.iter().zip(x.chunks_mut(e.max(1))) {
            let start = id as usize * e;
            self.tokens.widen_into(start..start + e, row);
            if self.scale.to_bits() != 1.0f32.to_bits() {
                for v in row.iter_mut() {
                    *v *= self.scale;
                }
            }
        }
        let add_types = |x: &mut [f32]| {
            if let Some(types) = &self.types {
                for (row, &t) in x.chunks_mut(e).zip(type_ids) {
                    row.iter_mut().zip(&types[t as usize * e..][..e]).for_each(|(a, b)| *a += b);
                }
            }
        };
        let add_positions = |x: &mut [f32]| {
            if let (Some((table, offset)), true) = (&self.positions, positions_on) {
                for (i, row) in x.chunks_mut(e).enumerate() {
                    row.iter_mut().zip(&table[(offset + first + i) * e..][..e]).for_each(|(a, b)| *a += b);
                }
            }
        };
        if self.positions_first {
            add_positions(&mut x);
            add_types(&mut x);
        } else {
            add_types(&mut x);
            add_positions(&mut x);
        }
        if let Some((project, Projection::BeforeNorm)) = &self.projection {
            x = project.forward(&x);
        }
        if let Some(norm) = &self.norm {
            norm.forward_in_place(&mut x);
        }
        if let Some((project, Projection::AfterNorm)) = &self.projection {
            x = project.forward(&x);
        }
        x
    }
}

/// `MarianSinusoidalPositionalEmbedding.create_weight`: `pos / 10000^(2·(j/2)/dim)` in f64, `sin`
/// of the even columns in the first half of each row, `cos` of the odd ones in the second, to f32.
fn sinusoids(rows: usize, dim: usize) -> Vec<f32> {
    let sentinel = dim.div_ceil(2);
    let mut out = vec![0.0; rows * dim];
    for (pos, row) in out.chunks_mut(dim.max(1)).enumerate() {
        let angle = |j: usize| pos as f64 / 10_000f64.powf((2 * (j / 2)) as f64 / dim as f64);
        for (i, j) in (0..dim).step_by(2).enumerate() {
            row[i] = angle(j).sin() as f32;
        }
        for (i, j) in (1..dim).step_by(2).enumerate() {
            row[sentinel + i] = angle(j).cos() as f32;
        }
    }
    out
}

/// One weight set's relative-position projections (DeBERTa): the relative-position embeddings
/// through the key projection (`pos_key_layer`, for c2p) and the query projection
/// (`pos_query_layer`, for p2c), `2·span × heads·head_dim` each. They depend on weights only, so
/// they are computed once at load.
#[derive(Debug, Clone, Default)]
struct RelativeProjections {
    keys: Vec<f32>,
    queries: Vec<f32>,
}

/// One weight set of the blocks: attention (`BertSelfAttention` eager + `BertSelfOutput`, q/k/v
/// fused into one product: `heads·head_dim` query columns, then `kv_heads·head_dim` key and value
/// columns), then the feed-forward (`BertIntermediate` + `BertOutput`; gate and up fused when gated).
#[derive(Debug, Clone)]
struct Layer {
    qkv: Linear,
    /// Qwen3's per-head norms of q and k.
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    output: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    ffn_norm: Norm,
    relative: RelativeProjections,
    /// Attention to an encoder's output (decoders of encoder–decoders).
    cross: Option<CrossAttention>,
}

/// A decoder layer's attention to the encoder: queries from the decoder, keys and values (fused)
/// from the encoder output, the output projection, and the norm of its sub-block.
#[derive(Debug, Clone)]
struct CrossAttention {
    q: Linear,
    kv: Linear,
    output: Linear,
    norm: Norm,
}

impl Layer {
    fn load(w: &mut Weights, d: &Description, index: usize, rel: Option<&[f32]>) -> candle_core::Result<Self> {
        let p = format!("layer.{index}");
        let (h, attn, kv) = (d.hidden, d.query_width(), d.kv_width());
        // (DeBERTa's relative projections read q and k first: the fused product below takes them.)
        let mut relative = RelativeProjections::default();
        if let (PositionBias::Disentangled(dis), Some(rel)) = (&d.position_bias, rel) {
            // DisentangledSelfAttention.disentangled_attention_bias: with share_att_key the content
            // projections (with their biases), else pos_key_proj (with bias) / pos_query_proj.
            let (key_proj, query_proj) = if dis.shared_projections {
                let copy = |w: &Weights, name: &str| -> candle_core::Result<Linear> {
                    let weight = w.values(&format!("{name}.weight"), &[attn, h])?;
                    Ok(Linear::new(&weight, w.values(&format!("{name}.bias"), &[attn])?, h))
                };
                (copy(w, &format!("{p}.k"))?, copy(w, &format!("{p}.q"))?)
            } else {
                let key = if dis.c2p { Some(Linear::load(w, &format!("{p}.pos_k"), h, attn, true)?) } else { None };
                let query = if dis.p2c && w.has(&format!("{p}.pos_q.weight")) {
                    let bias = w.has(&format!("{p}.pos_q.bias"));
                    Some(Linear::load(w, &format!("{p}.pos_q"), h, attn, bias)?)
                } else {
                    None
                };
                let empty = Linear::new(&[], vec![], h);
                (key.unwrap_or_else(|| empty.clone()), query.unwrap_or(empty))
            };
            if dis.c2p {
                relative.keys = key_proj.forward(rel);
            }
            if dis.p2c {
                relative.queries = query_proj.forward(rel);
            }
        }
        let qkv = Linear::fused(
            w,
            &[(format!("{p}.q"), attn), (format!("{p}.k"), kv), (format!("{p}.v"), kv)],
            h,
            d.biases.qkv,
        )?;
        let head_norm = |w: &mut Weights, name: &str| {
            Norm::load_kind(w, &format!("{p}.{name}"), d.head_dim, d.norm_eps, NormKind::Rms)
        };
        let i = d.intermediate;
        let up = match d.feed_forward {
            FeedForward::Plain => Linear::load(w, &format!("{p}.up"), h, i, d.biases.ffn)?,
            FeedForward::Gated => {
                Linear::fused(w, &[(format!("{p}.gate"), i), (format!("{p}.up"), i)], h, d.biases.ffn)?
            }
        };
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
        Ok(Self {
            cross,
            qkv,
            q_norm: d.qk_norm.then(|| head_norm(w, "q_norm")).transpose()?,
            k_norm: d.qk_norm.then(|| head_norm(w, "k_norm")).transpose()?,
            output: Linear::load(w, &format!("{p}.o"), attn, h, d.biases.output)?,
            attn_norm: Norm::load(w, &format!("{p}.attn_norm"), h, d)?,
            up,
            down: Linear::load(w, &format!("{p}.down"), i, h, d.biases.ffn)?,
            ffn_norm: Norm::load(w, &format!("{p}.ffn_norm"), h, d)?,
            relative,
        })
    }
}

/// The relative-position terms of one forward pass: what depends on the input length only,
/// computed once and shared by every layer.
#[derive(Debug, Clone)]
enum Relative {
    None,
    /// MPNet: head `h` adds `bucket_bias[bucket[query][key] · heads + h]` (the network's table).
    Buckets {
        bucket: Vec<u32>,
    },
    /// DeBERTa: the gather indices of c2p (`[query][key]`) and p2c (`[key][query]`, before the
    /// transpose), into `2·span` relative positions.
    Disentangled {
        c2p: Vec<u32>,
        p2c: Vec<u32>,
        span2: usize,
    },
}

/// What a pass keeps of the attention it computes.
enum Keep<'a> {
    /// Every layer's probabilities (and with [`Capture::Full`] the neuron data): [`ForwardOutput`].
    All(Capture),
    /// One layer's probabilities at a time (`heads × n × total`), handed to the visitor once the
    /// layer has run; the next layer overwrites them.
    EachLayer(&'a mut (dyn FnMut(usize, &[f32]) -> candle_core::Result<()> + Send)),
    /// No probabilities: each head's are computed in a scratch buffer (handed to the visitor, if
    /// any, from the pool's threads) and dropped; without a visitor the residual stream entering
    /// each layer is kept.
    Streams(&'a mut Kept, Option<&'a HeadVisitor<'a>>, Option<&'a mut LayerDone<'a>>),
}

/// Called once a layer of a [`Network::forward_each_head_then`] pass has run (every head of it
/// visited), with the number of layers done; an error stops the pass and is returned.
pub type LayerDone<'a> = dyn FnMut(usize) -> candle_core::Result<()> + Send + 'a;

/// What a [`Keep::Streams`] pass keeps.
#[derive(Default)]
struct Kept {
    /// Whether to keep the streams (a pass that only hands heads over keeps none).
    streams: bool,
    /// The residual stream entering each layer, `[layer][token][hidden]`.
    entering: Vec<f32>,
    /// Bytes of the pass's working buffers at its end (the head scratch included).
    working_bytes: usize,
}

/// How one layer runs: what to change, and where its queries sit.
struct LayerRun<'a> {
    temperature: f32,
    /// Which keys each query sees.
    mask: kernels::Mask,
    /// Heads of this layer whose output is zeroed.
    ablated: &'a [usize],
    /// The rotation of this pass's positions (rotary models; None when positions are switched off).
    rope: Option<&'a RopeTable>,
    /// Handed each head's probabilities (`layer`, `head`, `n × total`) as soon as they are computed,
    /// when the pass does not record them.
    visit_head: Option<(usize, &'a HeadVisitor<'a>)>,
}

/// What [`Network::forward_each_head`] hands every head's probabilities to: `(layer, head, n × n)`.
pub type HeadVisitor<'a> = dyn Fn(usize, usize, &[f32]) + Sync + 'a;

/// What one head records besides its probabilities (each when asked).
#[derive(Default)]
struct HeadRecords<'a> {
    scores: Option<&'a mut [f32]>,
    terms: Vec<&'a mut [f32]>,
    queries: Option<&'a mut [f32]>,
    keys: Option<&'a mut [f32]>,
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
struct QkRows<'a> {
    /// `n` rows of `row` values: queries, then keys, then values (after the norms and rotation).
    qkv: &'a [f32],
    row: usize,
    n: usize,
    /// The keys (this pass's rows, or a cache's), `total` rows `kv_stride` apart.
    k_all: &'a [f32],
    kv_stride: usize,
    total: usize,
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

/// One layer's slices of the recorded outputs (`heads` matrices or vector sets each).
struct Recorded<'a> {
    /// None: the probabilities are not recorded (each head's go to scratch, see [`HeadOut`]).
    probs: Option<&'a mut [f32]>,
    scores: Option<&'a mut [f32]>,
    /// One slice per score term.
    terms: Vec<&'a mut [f32]>,
    queries: Option<&'a mut [f32]>,
    keys: Option<&'a mut [f32]>,
}

/// Working memory of a forward pass, allocated once and reused by every layer.
struct Buffers {
    /// Input of a sub-block after its norm (pre-LN), `n × hidden`.
    normed: Vec<f32>,
    /// Fused q/k/v, `n × (attn + 2·kv)`.
    qkv: Vec<f32>,
    /// Attention output per head, `heads × n × head_dim`.
    context_by_head: Vec<f32>,
    /// The same as rows, `n × attn`.
    context: Vec<f32>,
    /// Residual stream after attention, `n × hidden`.
    attended: Vec<f32>,
    /// Feed-forward inner activations, `n × intermediate` (`n × 2·intermediate` when gated: gate
    /// and up side by side).
    inner: Vec<f32>,
    /// Gated feed-forward: `act(gate) · up`, `n × intermediate`.
    gated: Vec<f32>,
    /// Parallel residual: feed-forward plus attention output, `n × hidden`.
    summed: Vec<f32>,
    /// A linear layer's product, panel by panel, before its bias: `n × out` for the widest layer.
    panels: Vec<f32>,
    /// Probabilities of heads a pass does not record.
    scratch: HeadScratch,
}

impl Buffers {
    /// Bytes held, the head scratch included.
    fn bytes(&self) -> usize {
        let vecs = [
            &self.normed,
            &self.qkv,
            &self.context_by_head,
            &self.context,
            &self.attended,
            &self.inner,
            &self.gated,
            &self.summed,
            &self.panels,
        ];
        vecs.iter().map(|v| v.capacity() * size_of::<f32>()).sum::<usize>() + self.scratch.bytes()
    }

    fn new(n: usize, d: &Description) -> Self {
        let (hidden, attn, qkv) = (d.hidden, d.query_width(), d.query_width() + 2 * d.kv_width());
        let gated = d.feed_forward == FeedForward::Gated;
        let inner = if gated { 2 * d.intermediate } else { d.intermediate };
        Self {
            normed: vec![0.0; n * hidden],
            qkv: vec![0.0; n * qkv],
            context_by_head: vec![0.0; n * attn],
            context: vec![0.0; n * attn],
            attended: vec![0.0; n * hidden],
            inner: vec![0.0; n * inner],
            gated: if gated { vec![0.0; n * d.intermediate] } else { Vec::new() },
            summed: if d.parallel_residual { vec![0.0; n * hidden] } else { Vec::new() },
            panels: vec![0.0; n * qkv.max(inner).max(hidden)],
            scratch: HeadScratch::default(),
        }
    }
}

/// The keys and values of the tokens run so far, per layer (after the rotation), so that the
/// next tokens of a generation run alone: rows of `kv_heads · head_dim`.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    len: usize,
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
}

/// The residual stream entering each layer of one pass ([`Network::forward_streams`]) and the
/// settings its attention ran with: enough to compute any layer's attention again, exactly.
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
    temperature: f32,
    mask: kernels::Mask,
    rope: Option<RopeTable>,
    relative: Relative,
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

    /// The last hidden state, `n × hidden` (after the final norm, as [`ForwardOutput::last_hidden`]).
    pub fn last_hidden(&self) -> &[f32] {
        &self.last_hidden
    }

    /// Bytes these streams hold: the per-layer streams, the last hidden state and the position
    /// tables the attention is computed again with.
    pub fn held_bytes(&self) -> usize {
        let f = size_of::<f32>();
        let relative = match &self.relative {
            Relative::None => 0,
            Relative::Buckets { bucket } => bucket.capacity() * size_of::<u32>(),
            Relative::Disentangled { c2p, p2c, .. } => (c2p.capacity() + p2c.capacity()) * size_of::<u32>(),
        };
        (self.entering.capacity() + self.last_hidden.capacity()) * f
            + self.rope.as_ref().map_or(0, RopeTable::bytes)
            + relative
    }

    /// Bytes the pass that made these streams worked in (its buffers, one `n × n` scratch per
    /// head running at a time), freed when it ended.
    pub fn working_bytes(&self) -> usize {
        self.working_bytes
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
        QkRows { qkv: &self.qkv, row, n, k_all: &self.qkv[attn..], kv_stride: row, total: n }
    }

    fn run(&self) -> LayerRun<'_> {
        let s = self.streams;
        LayerRun { temperature: s.temperature, mask: s.mask, ablated: &[], rope: s.rope.as_ref(), visit_head: None }
    }

    fn compute(&self, head_idx: usize, probs: &mut [f32], records: HeadRecords<'_>) {
        let layer = &self.net.layers[self.net.desc.layer_weights[self.layer_idx]];
        let rows = self.rows();
        self.net.head_probs(layer, head_idx, &rows, &self.streams.relative, &self.run(), probs, records);
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
        };
        self.compute(head_idx, &mut detail.probs, records);
        detail
    }
}

/// A transformer that records attention: any [`Description`] with its weights.
#[derive(Debug, Clone)]
pub struct Network {
    desc: Description,
    embeddings: Embeddings,
    /// Weight sets; layer `l` runs `layers[desc.layer_weights[l]]`.
    layers: Vec<Layer>,
    /// MPNet's bias table, `buckets × heads`.
    bucket_bias: Vec<f32>,
    final_norm: Option<Norm>,
    /// `lm_head.weight` (`vocab × hidden`, row-major) when the head is not tied and the checkpoint
    /// has one.
    lm_head: Option<Values>,
    /// `final_logits_bias` / `lm_head.bias`, when the description has one.
    logits_bias: Vec<f32>,
}

impl Network {
    /// Builds the network from canonical weights (see [`super::families`]); every tensor the
    /// description implies must be there with its shape.
    pub fn load(desc: &Description, mut w: Weights) -> candle_core::Result<Self> {
        let embeddings = Embeddings::load(&mut w, desc)?;
        let mut bucket_bias = Vec::new();
        let mut rel = None;
        match &desc.position_bias {
            PositionBias::None => {}
            PositionBias::Buckets { rows, .. } => {
                bucket_bias = w.take("rel.bias.weight", &[*rows, desc.heads])?;
            }
            PositionBias::Disentangled(dis) => {
                let mut table = w.take("rel.embeddings.weight", &[2 * dis.span, desc.hidden])?;
                if dis.norm {
                    Norm::load(&mut w, "rel.norm", desc.hidden, desc)?.forward_in_place(&mut table);
                }
                rel = Some(table);
            }
        }
        let layers = (0..desc.weight_sets())
            .map(|i| Layer::load(&mut w, desc, i, rel.as_deref()))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let final_norm = desc.final_norm.then(|| Norm::load(&mut w, "final_norm", desc.hidden, desc)).transpose()?;
        let lm_head = if desc.lm_head == LmHead::Own && w.has("lm_head.weight") {
            Some(w.take_values("lm_head.weight", &[desc.vocab_size, desc.hidden])?)
        } else {
            None
        };
        let logits_bias = if desc.logits_bias { w.take("logits_bias", &[desc.vocab_size])? } else { Vec::new() };
        Ok(Self { desc: desc.clone(), embeddings, layers, bucket_bias, final_norm, lm_head, logits_bias })
    }

    /// The description it runs.
    pub fn description(&self) -> &Description {
        &self.desc
    }

    /// Bytes of the large weights as held — linear layers, token embeddings, `lm_head` — 4 per
    /// weight as f32, 2 in a 16-bit stored precision ([`WeightStorage`]); the small ones (norms,
    /// biases, position and type embeddings) are f32 either way.
    pub fn large_weight_bytes(&self) -> usize {
        let layers = self.layers.iter().map(|l| {
            let cross =
                l.cross.as_ref().map_or(0, |c| c.q.weight_bytes() + c.kv.weight_bytes() + c.output.weight_bytes());
            l.qkv.weight_bytes() + l.output.weight_bytes() + l.up.weight_bytes() + l.down.weight_bytes() + cross
        });
        layers.sum::<usize>()
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
        match &self.desc.position_bias {
            PositionBias::None => Vec::new(),
            PositionBias::Buckets { .. } => vec!["content q·k", "relative-position bias"],
            PositionBias::Disentangled(d) => {
                let mut t = vec!["content q·k"];
                if d.c2p {
                    t.push("content→position");
                }
                if d.p2c {
                    t.push("position→content");
                }
                t
            }
        }
    }

    /// The absolute position table as the model reads it (from its first used row),
    /// `max_len × embedding width`, row-major; None without one.
    pub fn position_table(&self) -> Option<Vec<f32>> {
        let (table, offset) = self.embeddings.positions.as_ref()?;
        let e = self.embeddings.width;
        let rows = (table.len() / e.max(1)).saturating_sub(*offset).min(self.desc.max_len);
        Some(table[offset * e..(offset + rows) * e].to_vec())
    }

    /// Runs the network on one sequence (no padding, so no attention mask), recording attention,
    /// with `interventions` applied (the default changes nothing). `type_ids` are the tokenizer's;
    /// models that do not read them get zeros.
    pub fn forward(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        capture: Capture,
        interventions: &Interventions,
    ) -> candle_core::Result<ForwardOutput> {
        // Run our own parallel kernels on candle's worker pool too: one pool, not two, on few cores.
        candle_core::utils::with_threadpool(|| {
            self.forward_in_pool(ids, type_ids, Keep::All(capture), interventions, None, None)
        })
    }

    /// Runs a decoder (a network with cross-attention) on `ids` attending to an encoder's output
    /// (`encoder_hidden`, `source × hidden`): self-attention in `probs`, cross-attention in `cross`.
    pub fn forward_decoder(
        &self,
        ids: &[u32],
        encoder_hidden: &[f32],
        capture: Capture,
    ) -> candle_core::Result<ForwardOutput> {
        if !self.desc.cross_attention {
            return Err(candle_core::Error::Msg(format!("{} has no cross-attention", self.desc.family)));
        }
        if encoder_hidden.is_empty() || encoder_hidden.len() % self.desc.hidden != 0 {
            return Err(candle_core::Error::Msg("the encoder output does not match the decoder's width".into()));
        }
        let zeros = vec![0; ids.len()];
        candle_core::utils::with_threadpool(|| {
            self.forward_in_pool(ids, &zeros, Keep::All(capture), &Interventions::default(), None, Some(encoder_hidden))
        })
    }

    /// An empty key/value cache for [`Self::step`].
    pub fn new_cache(&self) -> KvCache {
        KvCache { keys: vec![Vec::new(); self.desc.layers], values: vec![Vec::new(); self.desc.layers], len: 0 }
    }

    /// Runs `ids` after the tokens already in `cache` (a causal model's generation step) and adds
    /// them to it. The recorded attention holds the new rows only: `[layer][head][new][all]`, each
    /// equal to that row of a full pass over everything (the rows of a causal model do not depend
    /// on later tokens).
    pub fn step(&self, ids: &[u32], cache: &mut KvCache) -> candle_core::Result<ForwardOutput> {
        if !self.desc.causal || self.desc.position_bias != PositionBias::None {
            return Err(candle_core::Error::Msg(format!(
                "{} is not a causal language model: it cannot run token by token",
                self.desc.family
            )));
        }
        let zeros = vec![0; ids.len()];
        candle_core::utils::with_threadpool(|| {
            self.forward_in_pool(
                ids,
                &zeros,
                Keep::All(Capture::Attention),
                &Interventions::default(),
                Some(cache),
                None,
            )
        })
    }

    /// Runs the network like [`Self::forward`] without recording the attention of every layer:
    /// one layer's probabilities (`heads × n × n`, `[head][query][key]`) are handed to `visit` as
    /// soon as that layer has run, and overwritten by the next layer's. Memory holds one layer's
    /// attention, not all of them. Returns the last hidden state. An error from `visit` stops the
    /// pass and is returned.
    pub fn forward_each_layer(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        interventions: &Interventions,
        visit: &mut (dyn FnMut(usize, &[f32]) -> candle_core::Result<()> + Send),
    ) -> candle_core::Result<Vec<f32>> {
        self.refuse_cross("be streamed")?;
        let keep = Keep::EachLayer(visit);
        candle_core::utils::with_threadpool(|| self.forward_in_pool(ids, type_ids, keep, interventions, None, None))
            .map(|out| out.last_hidden)
    }

    /// Runs the network recording no attention: each head's probabilities (`n × n`) are handed
    /// to `visit(layer, head, probs)` as they are computed — from the pool's threads, heads of a
    /// layer in any order — in a scratch buffer reused once the head is done, so memory holds
    /// one `n × n` matrix per thread. Returns the last hidden state.
    pub fn forward_each_head(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        interventions: &Interventions,
        visit: &HeadVisitor<'_>,
    ) -> candle_core::Result<Vec<f32>> {
        self.forward_kept(ids, type_ids, interventions, Some(visit), None).map(|(out, _)| out.last_hidden)
    }

    /// [`Self::forward_each_head`], calling `layer_done(layers done)` between layers, after
    /// each layer (all of its heads visited): what a caller showing a long pass as it goes needs
    /// (and an error from it stops the pass, e.g. when newer input arrived).
    pub fn forward_each_head_then(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        interventions: &Interventions,
        visit: &HeadVisitor<'_>,
        layer_done: &mut LayerDone<'_>,
    ) -> candle_core::Result<Vec<f32>> {
        self.forward_kept(ids, type_ids, interventions, Some(visit), Some(layer_done)).map(|(out, _)| out.last_hidden)
    }

    /// Runs the network keeping only the residual stream entering each layer (`n × hidden` per
    /// layer) and the settings its attention ran with: any layer's or head's attention can then
    /// be computed again from it with [`Self::layer_attention`], bit for bit what a recording pass
    /// gives. No attention is recorded.
    pub fn forward_streams(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        interventions: &Interventions,
    ) -> candle_core::Result<Streams> {
        let (out, kept) = self.forward_kept(ids, type_ids, interventions, None, None)?;
        let d = &self.desc;
        let n = ids.len();
        let positions_on = !interventions.zero_positions;
        Ok(Streams {
            n,
            hidden: d.hidden,
            layers: interventions.first_layers.unwrap_or(d.layers),
            entering: kept.entering,
            last_hidden: out.last_hidden,
            working_bytes: kept.working_bytes,
            temperature: interventions.temperature,
            mask: kernels::Mask { causal: d.causal || interventions.causal, window: d.sliding_window, first: 0 },
            rope: d.rotary.as_ref().filter(|_| positions_on).map(|r| RopeTable::new(r, 0, n, n)),
            relative: self.relative(n),
        })
    }

    /// A pass recording no attention: each head to `visit`, or (without one) the streams kept.
    fn forward_kept(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        interventions: &Interventions,
        visit: Option<&HeadVisitor<'_>>,
        layer_done: Option<&mut LayerDone<'_>>,
    ) -> candle_core::Result<(ForwardOutput, Kept)> {
        self.refuse_cross("be streamed")?;
        let mut kept = Kept { streams: visit.is_none(), ..Kept::default() };
        // The callback's own lifetime shortened to the pass's (it is invariant behind `&mut`).
        let layer_done = layer_done.map(|d| {
            let d: &mut LayerDone<'_> = d;
            d
        });
        let keep = Keep::Streams(&mut kept, visit, layer_done);
        let out = candle_core::utils::with_threadpool(|| {
            self.forward_in_pool(ids, type_ids, keep, interventions, None, None)
        })?;
        Ok((out, kept))
    }

    /// An error for a decoder with cross-attention (it needs its encoder's output).
    fn refuse_cross(&self, what: &str) -> candle_core::Result<()> {
        if self.desc.cross_attention {
            return Err(candle_core::Error::Msg(format!(
                "{}'s decoder attends to its encoder: it cannot {what} alone",
                self.desc.family
            )));
        }
        Ok(())
    }

    /// Layer `layer_idx`'s queries and keys, computed from the residual stream that entered it
    /// in `streams` (which this network must have produced): its heads' attention follows from
    /// them with [`LayerAttention::head_into`], by the same code a recording pass runs.
    pub fn layer_attention<'a>(
        &'a self,
        streams: &'a Streams,
        layer_idx: usize,
    ) -> candle_core::Result<LayerAttention<'a>> {
        if layer_idx >= streams.layers || streams.hidden != self.desc.hidden {
            return Err(candle_core::Error::Msg(format!(
                "layer {layer_idx} is not among the {} layers these streams hold for this network",
                streams.layers
            )));
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
            let input = if d.norm == NormPlacement::Post {
                entering
            } else {
                let mut x = entering.to_vec();
                layer.attn_norm.forward_in_place(&mut x);
                normed = x;
                &normed
            };
            self.project_qk(layer, input, streams.rope.as_ref(), &mut panels, &mut qkv);
        });
        Ok(LayerAttention { net: self, streams, layer_idx, qkv })
    }

    /// Next-token logits from one row of the final hidden state (after the final norm), or None
    /// without a language-model head: `hidden · Eᵀ` with the tied embeddings or `lm_head`.
    pub fn logits(&self, hidden_row: &[f32]) -> Option<Vec<f32>> {
        if !self.has_lm_head() || hidden_row.len() != self.desc.hidden {
            return None;
        }
        let table = self.lm_head.as_ref().unwrap_or(&self.embeddings.tokens);
        let h = self.desc.hidden;
        let scaled: Vec<f32>;
        let hidden_row = if self.desc.logit_scale.to_bits() == 1.0f32.to_bits() {
            hidden_row
        } else {
            scaled = hidden_row.iter().map(|v| v * self.desc.logit_scale).collect();
            &scaled
        };
        let mut logits = vec![0.0; self.desc.vocab_size];
        logits.par_chunks_mut(1024).enumerate().for_each(|(c, out)| {
            let mut wide = vec![0.0; h];
            for (i, o) in out.iter_mut().enumerate() {
                let start = (c * 1024 + i) * h;
                let row = if let Values::F32(t) = table {
                    &t[start..start + h]
                } else {
                    table.widen_into(start..start + h, &mut wide);
                    &wide[..]
                };
                *o = kernels::dot(row, hidden_row);
            }
        });
        if !self.logits_bias.is_empty() {
            logits.iter_mut().zip(&self.logits_bias).for_each(|(l, b)| *l += b);
        }
        Some(logits)
    }

    fn relative(&self, n: usize) -> Relative {
        match &self.desc.position_bias {
            PositionBias::None => Relative::None,
            PositionBias::Buckets { buckets, max_distance, bidirectional, .. } => {
                // MPNetEncoder.compute_position_bias / T5Attention.compute_bias:
                // relative_position = memory_position − context_position.
                let mut bucket = Vec::with_capacity(n * n);
                for q in 0..n {
                    for k in 0..n {
                        let r = k as i64 - q as i64;
                        let b = if *bidirectional {
                            relpos::bidirectional_bucket(r, *buckets, *max_distance)
                        } else {
                            relpos::causal_bucket(r, *buckets, *max_distance)
                        };
                        bucket.push(b as u32);
                    }
                }
                Relative::Buckets { bucket }
            }
            PositionBias::Disentangled(Disentangled { span, log_buckets, .. }) => {
                // build_relative_position: rel[q][k] = bucket(q − k); c2p index clamp(rel + span),
                // p2c index clamp(−rel + span), both into [0, 2·span).
                let span = *span as i64;
                let rel = |a: usize, b: usize| {
                    let r = a as i64 - b as i64;
                    match log_buckets {
                        Some((size, max)) => relpos::log_bucket(r, *size, *max),
                        None => r,
                    }
                };
                let clamp = |v: i64| v.clamp(0, 2 * span - 1) as u32;
                let mut c2p = Vec::with_capacity(n * n);
                let mut p2c = Vec::with_capacity(n * n);
                for a in 0..n {
                    for b in 0..n {
                        let r = rel(a, b);
                        c2p.push(clamp(r + span));
                        p2c.push(clamp(-r + span));
                    }
                }
                Relative::Disentangled { c2p, p2c, span2: 2 * span as usize }
            }
        }
    }

    /// Checks one input against the network: length, vocabulary, token types. Returns the type ids
    /// the embeddings read.
    fn checked_types<'a>(&self, ids: &[u32], type_ids: &'a [u32], past: usize) -> candle_core::Result<Cow<'a, [u32]>> {
        let d = &self.desc;
        let seq_len = ids.len();
        if seq_len == 0 || type_ids.len() != seq_len {
            return Err(candle_core::Error::Msg(format!(
                "cannot run {seq_len} tokens with {} segment ids: the network needs at least one token and one segment id per token",
                type_ids.len()
            )));
        }
        if past + seq_len > d.max_len {
            return Err(candle_core::Error::Msg(format!(
                "{} tokens exceed the model's {} positions",
                past + seq_len,
                d.max_len
            )));
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= d.vocab_size) {
            return Err(candle_core::Error::Msg(format!("token id {id} is outside the vocabulary ({})", d.vocab_size)));
        }
        if d.reads_token_types && d.embedding.token_types > 0 {
            if let Some(&t) = type_ids.iter().find(|&&t| t as usize >= d.embedding.token_types) {
                return Err(candle_core::Error::Msg(format!(
                    "token type {t} is outside the model's {} token types",
                    d.embedding.token_types
                )));
            }
            Ok(Cow::Borrowed(type_ids))
        } else {
            Ok(Cow::Owned(vec![0; seq_len]))
        }
    }

    fn forward_in_pool(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        mut keep: Keep<'_>,
        iv: &Interventions,
        mut cache: Option<&mut KvCache>,
        encoder: Option<&[f32]>,
    ) -> candle_core::Result<ForwardOutput> {
        let d = &self.desc;
        let past = cache.as_ref().map_or(0, |c| c.len);
        let type_ids = self.checked_types(ids, type_ids, past)?;
        iv.validate(d.layers, d.heads).map_err(candle_core::Error::Msg)?;
        let n = ids.len();
        let total = past + n;
        let run_layers = iv.first_layers.unwrap_or(d.layers); // validated above
        let heads = d.heads;
        let per_layer = heads * n * total;
        let vectors_per_layer = heads * n * d.head_dim;
        let term_count = self.score_terms().len();
        let (record_all, capture) = match keep {
            Keep::All(capture) => (true, capture),
            _ => (false, Capture::Attention),
        };
        // The layers write every recorded value: probabilities and scores reuse the buffers of
        // dropped runs (whatever they hold), other buffers are zeroed straight from the OS. A
        // cached step records attention only.
        let full = capture == Capture::Full && cache.is_none();
        let mut out = ForwardOutput {
            last_hidden: Vec::new(),
            probs: if record_all { spare::take(per_layer * run_layers) } else { Vec::new() },
            scores: if full { spare::take(per_layer * run_layers) } else { Vec::new() },
            terms: if full { vec![0.0; term_count * per_layer * run_layers] } else { Vec::new() },
            queries: if full { vec![0.0; vectors_per_layer * run_layers] } else { Vec::new() },
            keys: if full { vec![0.0; vectors_per_layer * run_layers] } else { Vec::new() },
            cross: Vec::new(),
        };
        // One layer's probabilities at a time, when they are handed over layer by layer.
        let mut layer_probs = if matches!(keep, Keep::EachLayer(..)) { vec![0.0; per_layer] } else { Vec::new() };
        let source = encoder.map_or(0, |e| e.len() / d.hidden.max(1));
        let per_layer_cross = heads * n * source;
        out.cross = vec![0.0; per_layer_cross * run_layers];
        let mut cross = out.cross.chunks_mut(per_layer_cross.max(1));
        let positions_on = !iv.zero_positions;
        let mut x = self.embeddings.forward(ids, &type_ids, past, positions_on);
        let relative = self.relative(n);
        let rope = d.rotary.as_ref().filter(|_| positions_on).map(|r| RopeTable::new(r, past, n, total));
        let mut bufs = Buffers::new(n, d);
        let mut all_probs = out.probs.chunks_mut(per_layer.max(1));
        let mut scores = full.then(|| out.scores.chunks_mut(per_layer));
        let mut queries = full.then(|| out.queries.chunks_mut(vectors_per_layer));
        let mut keys = full.then(|| out.keys.chunks_mut(vectors_per_layer));
        // Terms are [term][layer][…]: one iterator over layers per term.
        let term_block = per_layer * run_layers;
        let mut terms: Vec<_> = out.terms.chunks_mut(term_block.max(1)).map(|t| t.chunks_mut(per_layer)).collect();
        let mask = kernels::Mask { causal: d.causal || iv.causal, window: d.sliding_window, first: past };
        for l in 0..run_layers {
            if let Keep::Streams(kept, ..) = &mut keep
                && kept.streams
            {
                kept.entering.extend_from_slice(&x);
            }
            let ablated: Vec<usize> = iv.ablated.iter().filter(|&&(al, _)| al == l).map(|&(_, h)| h).collect();
            let (probs, visit_head) = match &keep {
                Keep::All(_) => (all_probs.next(), None),
                Keep::EachLayer(_) => (Some(&mut layer_probs[..]), None),
                Keep::Streams(_, visit, _) => (None, visit.map(|v| (l, v))),
            };
            let how =
                LayerRun { temperature: iv.temperature, mask, ablated: &ablated, rope: rope.as_ref(), visit_head };
            let rec = Recorded {
                probs,
                scores: scores.as_mut().and_then(Iterator::next),
                terms: terms.iter_mut().filter_map(Iterator::next).collect(),
                queries: queries.as_mut().and_then(Iterator::next),
                keys: keys.as_mut().and_then(Iterator::next),
            };
            let kv = cache.as_deref_mut().map(|c| (&mut c.keys[l], &mut c.values[l]));
            let layer = &self.layers[d.layer_weights[l]];
            let cross_rec = encoder.zip(cross.next());
            self.layer_forward(layer, &mut x, &how, rec, &relative, &mut bufs, kv, cross_rec);
            match &mut keep {
                Keep::EachLayer(visit) => visit(l, &layer_probs)?,
                Keep::Streams(_, _, Some(done)) => done(l + 1)?,
                _ => {}
            }
        }
        if let Some(c) = cache {
            c.len = total;
        }
        if let Some(norm) = &self.final_norm {
            norm.forward_in_place(&mut x);
        }
        out.last_hidden = x;
        if let Keep::Streams(kept, ..) = keep {
            kept.working_bytes = bufs.bytes();
        }
        Ok(out)
    }

    /// One block on the residual stream `x` (`n × hidden`), in place: post-LN
    /// (`norm(x + attn(x))`, then `norm(y + ffn(y))`), pre-LN (`x + attn(norm(x))`, then
    /// `y + ffn(norm(y))`), or pre-LN in parallel (`x + attn(norm₁(x)) + ffn(norm₂(x))`).
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        layer: &Layer,
        x: &mut [f32],
        how: &LayerRun<'_>,
        rec: Recorded<'_>,
        relative: &Relative,
        bufs: &mut Buffers,
        cache: Option<(&mut Vec<f32>, &mut Vec<f32>)>,
        cross: Option<(&[f32], &mut [f32])>,
    ) {
        let mut attended = std::mem::take(&mut bufs.attended);
        match (self.desc.norm, self.desc.parallel_residual) {
            (NormPlacement::Post, _) => {
                self.attention(layer, x, Some(x), how, rec, relative, bufs, cache, &mut attended);
                layer.attn_norm.forward_in_place(&mut attended);
                if let (Some(c), Some((encoder, probs))) = (&layer.cross, cross) {
                    // BartDecoderLayer: `encoder_attn_layer_norm(x + encoder_attn(x))`.
                    x.copy_from_slice(&attended);
                    self.cross_attention(c, x, encoder, x, probs, how.temperature, &mut attended);
                    c.norm.forward_in_place(&mut attended);
                }
                self.feed_forward(layer, &attended, &attended, bufs, x);
                layer.ffn_norm.forward_in_place(x);
            }
            (NormPlacement::Pre, false) => {
                let mut normed = std::mem::take(&mut bufs.normed);
                normed.copy_from_slice(x);
                layer.attn_norm.forward_in_place(&mut normed);
                self.attention(layer, &normed, Some(x), how, rec, relative, bufs, cache, &mut attended);
                if let (Some(c), Some((encoder, probs))) = (&layer.cross, cross) {
                    // T5LayerCrossAttention / pre-LN BART: `x + encoder_attn(norm(x))`.
                    normed.copy_from_slice(&attended);
                    c.norm.forward_in_place(&mut normed);
                    x.copy_from_slice(&attended);
                    self.cross_attention(c, &normed, encoder, x, probs, how.temperature, &mut attended);
                }
                normed.copy_from_slice(&attended);
                layer.ffn_norm.forward_in_place(&mut normed);
                self.feed_forward(layer, &normed, &attended, bufs, x);
                bufs.normed = normed;
            }
            (NormPlacement::Pre, true) => {
                // GPTNeoXLayer: `mlp_output + attn_output + hidden_states`.
                let mut normed = std::mem::take(&mut bufs.normed);
                normed.copy_from_slice(x);
                layer.attn_norm.forward_in_place(&mut normed);
                self.attention(layer, &normed, None, how, rec, relative, bufs, cache, &mut attended);
                normed.copy_from_slice(x);
                layer.ffn_norm.forward_in_place(&mut normed);
                let mut summed = std::mem::take(&mut bufs.summed);
                self.feed_forward(layer, &normed, &attended, bufs, &mut summed);
                x.iter_mut().zip(&summed).for_each(|(x, s)| *x += s); // (mlp + attn) + hidden: addition commutes exactly
                bufs.normed = normed;
                bufs.summed = summed;
            }
        }
        bufs.attended = attended;
    }

    /// Attention from `x` (`n × hidden`, the decoder) to `encoder` (`source × hidden`): per head
    /// `softmax(q·kᵀ · scale)` over every source token (no mask, no position terms), recorded in
    /// `probs` (`heads × n × source`), then `· v`, the output projection and `residual` into `out`.
    #[allow(clippy::too_many_arguments)]
    fn cross_attention(
        &self,
        c: &CrossAttention,
        x: &[f32],
        encoder: &[f32],
        residual: &[f32],
        probs: &mut [f32],
        temperature: f32,
        out: &mut [f32],
    ) {
        let (d, attn) = (self.desc.head_dim, self.desc.query_width());
        let n = x.len() / self.desc.hidden.max(1);
        let source = encoder.len() / self.desc.hidden.max(1);
        let q = c.q.forward(x);
        let kv = c.kv.forward(encoder);
        let mut context_by_head = vec![0.0; n * attn];
        let scale = self.desc.score_scale;
        probs.par_chunks_mut(n * source).zip(context_by_head.par_chunks_mut(n * d)).enumerate().for_each(
            |(h, (p, context))| {
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
            },
        );
        let mut context = vec![0.0; n * attn];
        for (h, ctx) in context_by_head.chunks(n * d).enumerate() {
            for (dst, src) in context.chunks_mut(attn).zip(ctx.chunks(d)) {
                dst[h * d..(h + 1) * d].copy_from_slice(src);
            }
        }
        let mut scratch = vec![0.0; n * self.desc.hidden];
        c.output.forward_into(&context, Some(residual), &mut scratch, out);
    }

    /// Qwen3's per-head norms, then the rotation, on every q and k head of the fused rows.
    fn prepare_qk(&self, layer: &Layer, qkv: &mut [f32], rope: Option<&RopeTable>) {
        let (d, attn, kv) = (self.desc.head_dim, self.desc.query_width(), self.desc.kv_width());
        if layer.q_norm.is_none() && rope.is_none() {
            return;
        }
        let row = attn + 2 * kv;
        qkv.par_chunks_mut(row).enumerate().for_each(|(i, r)| {
            let qk = &mut r[..attn + kv];
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
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
    /// dense (plus `residual` when given) into `out` (the caller places the norm). Each head's
    /// scores are computed straight into its slice of the recorded probabilities and normalised
    /// there (or into a scratch buffer when the pass records none); heads run in parallel; query
    /// head `h` reads key/value head `kv_head_of(h)`. With a `cache`, this pass's keys and values
    /// are appended to it and the queries attend to all of it. Heads in `how.ablated` have their
    /// output zeroed.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        layer: &Layer,
        x: &[f32],
        residual: Option<&[f32]>,
        how: &LayerRun<'_>,
        rec: Recorded<'_>,
        relative: &Relative,
        bufs: &mut Buffers,
        cache: Option<(&mut Vec<f32>, &mut Vec<f32>)>,
        out: &mut [f32],
    ) {
        let desc = &self.desc;
        let (d, attn, kv) = (desc.head_dim, desc.query_width(), desc.kv_width());
        let n = x.len() / desc.hidden.max(1);
        self.project_qk(layer, x, how.rope, &mut bufs.panels, &mut bufs.qkv);
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
        let rows = QkRows { qkv, row, n, k_all, kv_stride, total };
        let Recorded { probs, scores, terms, queries, keys } = rec;
        let mut probs = probs.map(|p| p.chunks_mut(n * total));
        let mut scores = scores.map(|s| s.chunks_mut(n * total));
        let mut queries = queries.map(|q| q.chunks_mut(n * d));
        let mut keys = keys.map(|k| k.chunks_mut(total * d));
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
                },
            })
            .collect();
        let scratch = &bufs.scratch;
        tasks.into_par_iter().enumerate().for_each(|(h, t)| {
            let HeadOut { probs, context, records } = t;
            let mut own = Vec::new();
            let probs = if let Some(p) = probs {
                p
            } else {
                own = scratch.take(n * total);
                &mut own[..]
            };
            self.head_probs(layer, h, &rows, relative, how, probs, records);
            if let Some((l, visit)) = how.visit_head {
                visit(l, h, probs);
            }
            if how.ablated.contains(&h) {
                context.fill(0.0);
            } else {
                // probs · v over the keys each block of rows sees (the others weigh exactly 0).
                let g = desc.kv_head_of(h);
                for (r, ks) in visible_blocks(how.mask, n, total) {
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
        layer.output.forward_into(&bufs.context[..n * attn], residual, &mut bufs.panels, out);
    }

    /// The fused q/k/v rows of `x` (`n × (attn + 2·kv)`: every query, then every key, then every
    /// value, head after head) into `qkv`, with Qwen3's head norms and the rotation applied.
    fn project_qk(&self, layer: &Layer, x: &[f32], rope: Option<&RopeTable>, panels: &mut [f32], qkv: &mut [f32]) {
        layer.qkv.forward_into(x, None, panels, qkv);
        self.prepare_qk(layer, qkv, rope);
    }

    /// One head's attention probabilities into `probs` (`n × total`): q·kᵀ · scale, the
    /// relative-position terms, the temperature, the mask and the softmax (recording the scores,
    /// the terms, q and k where `records` asks). The one place a head's attention is computed: a
    /// recording pass and the lazy path ([`LayerAttention`]) both call it, so they agree bit for bit.
    #[allow(clippy::too_many_arguments)]
    fn head_probs(
        &self,
        layer: &Layer,
        h: usize,
        rows: &QkRows<'_>,
        relative: &Relative,
        how: &LayerRun<'_>,
        probs: &mut [f32],
        records: HeadRecords<'_>,
    ) {
        let d = self.desc.head_dim;
        let QkRows { qkv, row, n, k_all, kv_stride, total } = *rows;
        let g = self.desc.kv_head_of(h);
        let q = MatRef::rows(&qkv[h * d..], n, d, row);
        let k = MatRef::rows(&k_all[g * d..], total, d, kv_stride);
        let HeadRecords { scores, mut terms, queries, keys } = records;
        if matches!(relative, Relative::None) {
            // Only the keys some query of each block of rows sees: a causal mask or a window
            // hides the rest, and the softmax below overwrites those cells with -inf before it
            // reads them (with position terms every cell is computed, as they are recorded).
            for (r, ks) in visible_blocks(how.mask, n, total) {
                let q = MatRef::rows(&qkv[r.start * row + h * d..], r.len(), d, row);
                let k = MatRef::rows(&k_all[ks.start * kv_stride + g * d..], ks.len(), d, kv_stride);
                let dst = MatMut::rows(&mut probs[r.start * total + ks.start..], r.len(), ks.len(), total);
                matmul(dst, q, k.t(), self.desc.score_scale, false);
            }
        } else {
            matmul(MatMut::rows(probs, n, total, total), q, k.t(), self.desc.score_scale, false);
        }
        self.add_position_terms(layer, h, n, (q, k), relative, probs, &mut terms);
        if how.temperature.to_bits() != 1.0f32.to_bits() {
            let inv = 1.0 / how.temperature;
            for s in probs.iter_mut() {
                *s *= inv;
            }
        }
        kernels::softmax_rows(probs, total, how.mask, scores);
        if let Some(recorded) = queries {
            for (dst, src) in recorded.chunks_mut(d).zip(qkv.chunks(row)) {
                dst.copy_from_slice(&src[h * d..(h + 1) * d]);
            }
        }
        if let Some(recorded) = keys {
            for (dst, src) in recorded.chunks_mut(d).zip(k_all.chunks(kv_stride)) {
                dst.copy_from_slice(&src[g * d..(g + 1) * d]);
            }
        }
    }

    /// Adds head `h`'s relative-position terms to its content scores in `probs` (recording the
    /// content and each term in `terms` when asked).
    ///
    /// MPNet (`MPNetSelfAttention`): `+ position_bias[h][q][k]`. DeBERTa
    /// (`DisentangledSelfAttention.disentangled_attention_bias`): c2p `q_q · pos_key[c2p[q][k]]`,
    /// p2c `k_k · pos_query[p2c[k][q]]` (gathered per key, then transposed), each scaled like the
    /// content score.
    #[allow(clippy::too_many_arguments)]
    fn add_position_terms(
        &self,
        layer: &Layer,
        h: usize,
        n: usize,
        (q, k): (MatRef<'_>, MatRef<'_>),
        relative: &Relative,
        probs: &mut [f32],
        terms: &mut [&mut [f32]],
    ) {
        let mut terms = terms.iter_mut();
        if let Some(content) = terms.next() {
            content.copy_from_slice(probs);
        }
        match relative {
            Relative::None => {}
            Relative::Buckets { bucket } => {
                let (bias, heads) = (&self.bucket_bias, self.desc.heads);
                let mut record = terms.next();
                for (i, (s, &b)) in probs.iter_mut().zip(bucket).enumerate() {
                    let v = bias[b as usize * heads + h];
                    *s += v;
                    if let Some(r) = record.as_deref_mut() {
                        r[i] = v;
                    }
                }
            }
            Relative::Disentangled { c2p, p2c, span2 } => {
                let (d, attn, scale) =
                    (self.desc.head_dim, self.desc.heads * self.desc.head_dim, self.desc.score_scale);
                let mut product = vec![0.0; n * span2];
                for (table, index, transposed, vectors) in
                    [(&layer.relative.keys, c2p, false, q), (&layer.relative.queries, p2c, true, k)]
                {
                    if table.is_empty() {
                        continue;
                    }
                    // (n × d) · (d × 2·span): every token against every relative position.
                    let positions = MatRef::rows(&table[h * d..], *span2, d, attn);
                    matmul(MatMut::rows(&mut product, n, *span2, *span2), vectors, positions.t(), scale, false);
                    let mut record = terms.next();
                    for a in 0..n {
                        for b in 0..n {
                            let (i, j) = if transposed { (b, a) } else { (a, b) };
                            let v = product[a * span2 + index[a * n + b] as usize];
                            probs[i * n + j] += v;
                            if let Some(r) = record.as_deref_mut() {
                                r[i * n + j] = v;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The feed-forward block on `x`, plus `residual` (no norm), into `out`: `down(act(up(x)))`,
    /// or gated `down(act(gate(x)) · up(x))` (`LlamaMLP`, `GemmaMLP`).
    fn feed_forward(&self, layer: &Layer, x: &[f32], residual: &[f32], bufs: &mut Buffers, out: &mut [f32]) {
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
        match self.desc.activation {
            // GELUActivation: nn.functional.gelu, the exact erf form.
            Activation::Gelu => kernels::gelu_erf_in_place(activated),
            // NewGELUActivation / gelu_pytorch_tanh: the tanh approximation.
            Activation::GeluTanh => kernels::gelu_tanh_in_place(activated),
            Activation::Relu => kernels::relu_in_place(activated),
            Activation::Silu => kernels::silu_in_place(activated),
        }
        if gated {
            for (dst, src) in bufs.gated.chunks_mut(i).zip(bufs.inner.chunks(2 * i)) {
                dst.iter_mut().zip(&src[i..]).for_each(|(g, u)| *g *= u);
            }
        }
        let input = if gated { &bufs.gated } else { &bufs.inner };
        layer.down.forward_into(input, Some(residual), &mut bufs.panels, out);
    }
}
