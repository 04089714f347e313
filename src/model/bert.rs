//! A BERT encoder whose forward pass records every head's attention (and queries, keys, scores).
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (eager attention) block by block:
//! <https://github.com/huggingface/transformers/blob/main/src/transformers/models/bert/modeling_bert.py>

use candle_core::{DType, Device, Module, Storage, Tensor};
use candle_nn::{Embedding, VarBuilder, embedding, layer_norm};
use rayon::prelude::*;

use super::config::{Config, HiddenAct};
use super::gemm::{MatMut, MatRef, matmul};
use super::intervene::Interventions;
use super::kernels;
use crate::analysis::spare;

/// What to record besides the attention probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Attention probabilities only (what `output_attentions=True` returns).
    Attention,
    /// Also pre-softmax scores, queries and keys (for the neuron view).
    Full,
}

/// Where the layer norms sit in each block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum NormPlacement {
    /// After each residual addition (BERT, the original transformer).
    #[default]
    Post,
    /// Before each sub-block, with a final norm at the end (GPT-2 and most modern encoders).
    Pre,
}

/// How the blocks are wired beyond what `config.json` says. BERT's wiring is [`Arch::bert`]; the
/// playground encoder varies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arch {
    /// Norm placement.
    pub norm: NormPlacement,
    /// Factor on the word embeddings (1 in BERT, √`d_model` in "Attention Is All You Need").
    pub embed_scale: f32,
    /// Attention score factor; None is BERT's `head_dim^-0.5`.
    pub attention_scale: Option<f32>,
    /// Mask every key after the query.
    pub causal: bool,
}

impl Arch {
    /// BERT: post-LN, unscaled embeddings, `1/√d_k`, bidirectional.
    pub fn bert() -> Self {
        Self { norm: NormPlacement::Post, embed_scale: 1.0, attention_scale: None, causal: false }
    }
}

/// What one forward pass produced, as flat `f32` vectors.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// Last hidden state, `seq_len × hidden_size`.
    pub last_hidden: Vec<f32>,
    /// Attention probabilities, `[layer][head][query][key]`.
    pub probs: Vec<f32>,
    /// Pre-softmax scaled scores, same layout (empty unless `Capture::Full`).
    pub scores: Vec<f32>,
    /// Query vectors, `[layer][head][token][head_dim]` (empty unless `Capture::Full`).
    pub queries: Vec<f32>,
    /// Key vectors, same layout as `queries` (empty unless `Capture::Full`).
    pub keys: Vec<f32>,
}

/// Runs `f` on the values of a contiguous f32 CPU tensor without copying them.
fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(cpu), Some((start, end))) => Ok(f(&cpu.as_slice::<f32>()?[start..end])),
        _ => Err(candle_core::Error::Msg("expected a contiguous f32 CPU tensor".into())),
    }
}

/// A tensor's values as a flat row-major vector.
fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    with_values(&t.to_dtype(DType::F32)?, <[f32]>::to_vec)
}

/// Output features per weight panel of a [`Linear`].
const PANEL: usize = 64;

/// `nn.Linear`: `x · Wᵀ + b`. `Wᵀ` (`in × out`) is stored as panels of [`PANEL`] output columns,
/// each a contiguous row-major `in × PANEL` block: each panel's product streams its weights from
/// one block of memory in order (a whole `Wᵀ` is read with a stride of `out` floats per step,
/// which is much slower for short inputs), and the panels run in parallel.
#[derive(Debug, Clone)]
struct Linear {
    panels: Vec<f32>,
    bias: Vec<f32>,
    in_dim: usize,
}

impl Linear {
    /// From a checkpoint's `weight` (out × in) and `bias` (out).
    fn new(weight: &Tensor, bias: &Tensor) -> candle_core::Result<Self> {
        let (out_dim, in_dim) = weight.dims2()?;
        let weight_t = values(&weight.t()?)?;
        let mut panels = Vec::with_capacity(weight_t.len());
        for start in (0..out_dim).step_by(PANEL) {
            let end = (start + PANEL).min(out_dim);
            for row in weight_t.chunks(out_dim) {
                panels.extend_from_slice(&row[start..end]);
            }
        }
        Ok(Self { panels, bias: values(bias)?, in_dim })
    }

    fn load(in_dim: usize, out_dim: usize, vb: &VarBuilder) -> candle_core::Result<Self> {
        Self::new(&vb.get((out_dim, in_dim), "weight")?, &vb.get(out_dim, "bias")?)
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
        scratch.par_chunks_mut(rows * PANEL).zip(self.panels.par_chunks(in_dim * PANEL)).for_each(|(dst, w)| {
            let width = w.len() / in_dim;
            matmul(
                MatMut::rows(dst, rows, width, width),
                MatRef::rows(x, rows, in_dim, in_dim),
                MatRef::rows(w, in_dim, width, width),
                1.0,
                false,
            );
        });
        kernels::add_panels(scratch, PANEL, &self.bias, residual, out);
    }
}

/// `nn.LayerNorm` over the last dimension.
#[derive(Debug, Clone)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn load(size: usize, eps: f64, vb: &VarBuilder) -> candle_core::Result<Self> {
        let norm = layer_norm(size, eps, vb.clone())?;
        let bias = norm.bias().map_or_else(|| Ok(vec![0.0; size]), values)?;
        Ok(Self { weight: values(norm.weight())?, bias, eps: eps as f32 })
    }

    fn forward_in_place(&self, x: &mut [f32]) {
        kernels::layer_norm_rows(x, &self.weight, &self.bias, self.eps);
    }
}

/// `BertEmbeddings`: word + token type + absolute position embeddings, then `LayerNorm`. The
/// playground has no token types and no embedding norm, and may have no position table.
#[derive(Debug, Clone)]
struct Embeddings {
    word: Embedding,
    position: Option<Embedding>,
    token_type: Option<Embedding>,
    norm: Option<Norm>,
    scale: f32,
}

impl Embeddings {
    fn load(vb: &VarBuilder, cfg: &Config, arch: &Arch) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let has = |name: &str| vb.contains_tensor(&format!("{name}.weight"));
        Ok(Self {
            word: embedding(cfg.vocab_size, h, vb.pp("word_embeddings"))?,
            position: has("position_embeddings")
                .then(|| embedding(cfg.max_position_embeddings, h, vb.pp("position_embeddings")))
                .transpose()?,
            token_type: has("token_type_embeddings")
                .then(|| embedding(cfg.type_vocab_size, h, vb.pp("token_type_embeddings")))
                .transpose()?,
            norm: has("LayerNorm").then(|| Norm::load(h, cfg.layer_norm_eps, &vb.pp("LayerNorm"))).transpose()?,
            scale: arch.embed_scale,
        })
    }

    /// `inputs_embeds + token_type_embeddings`, then `+= position_embeddings`, then `LayerNorm`
    /// (dropout is the identity at inference). Returns `seq_len × hidden_size` values.
    fn forward(&self, ids: &Tensor, type_ids: &Tensor, positions_on: bool) -> candle_core::Result<Vec<f32>> {
        let seq_len = ids.dim(0)?;
        let mut x = self.word.forward(ids)?;
        if self.scale.to_bits() != 1.0f32.to_bits() {
            x = x.affine(f64::from(self.scale), 0.0)?;
        }
        if let Some(token_type) = &self.token_type {
            x = (x + token_type.forward(type_ids)?)?;
        }
        if let (Some(position), true) = (&self.position, positions_on) {
            let positions = Tensor::arange(0u32, seq_len as u32, ids.device())?;
            x = (x + position.forward(&positions)?)?;
        }
        let mut x = values(&x)?;
        if let Some(norm) = &self.norm {
            norm.forward_in_place(&mut x);
        }
        Ok(x)
    }
}

/// `BertSelfAttention` (eager) + `BertSelfOutput`, with query, key and value fused into one matmul.
#[derive(Debug, Clone)]
struct Attention {
    qkv: Linear,
    output: Linear,
    norm: Norm,
    heads: usize,
    head_dim: usize,
}

impl Attention {
    fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        let hidden = cfg.hidden_size;
        let self_vb = vb.pp("self");
        let mut weights = Vec::with_capacity(3);
        let mut biases = Vec::with_capacity(3);
        for name in ["query", "key", "value"] {
            weights.push(self_vb.pp(name).get((hidden, hidden), "weight")?);
            biases.push(self_vb.pp(name).get(hidden, "bias")?);
        }
        let qkv = Linear::new(&Tensor::cat(&weights, 0)?, &Tensor::cat(&biases, 0)?)?;
        Ok(Self {
            qkv,
            output: Linear::load(hidden, hidden, &vb.pp("output").pp("dense"))?,
            norm: Norm::load(hidden, cfg.layer_norm_eps, &vb.pp("output").pp("LayerNorm"))?,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `eager_attention_forward`: softmax(q·kᵀ · scale) · v, then the output dense plus `residual`
    /// into `out` (the caller places the `LayerNorm`). Each head's scores are computed straight
    /// into its slice of the recorded probabilities and normalised there; heads run in parallel.
    /// Heads in `how.ablated` have their output zeroed.
    fn forward(
        &self,
        x: &[f32],
        residual: &[f32],
        how: &LayerRun<'_>,
        rec: Recorded<'_>,
        bufs: &mut Buffers,
        out: &mut [f32],
    ) {
        let (heads, d) = (self.heads, self.head_dim);
        let hidden = heads * d;
        let n = x.len() / hidden.max(1);
        // (n, 3·hidden): every query, then every key, then every value, head after head.
        self.qkv.forward_into(x, None, &mut bufs.panels, &mut bufs.qkv);
        let qkv = &bufs.qkv[..];
        let scaling = how.scale.unwrap_or((d as f64).powf(-0.5) as f32) / how.temperature;
        let mut scores = rec.scores.map(|s| s.chunks_mut(n * n));
        let mut queries = rec.queries.map(|q| q.chunks_mut(n * d));
        let mut keys = rec.keys.map(|k| k.chunks_mut(n * d));
        let tasks: Vec<HeadOut<'_>> = rec
            .probs
            .chunks_mut(n * n)
            .zip(bufs.context_by_head.chunks_mut(n * d))
            .map(|(probs, context)| HeadOut {
                probs,
                context,
                scores: scores.as_mut().and_then(Iterator::next),
                queries: queries.as_mut().and_then(Iterator::next),
                keys: keys.as_mut().and_then(Iterator::next),
            })
            .collect();
        let row = 3 * hidden;
        tasks.into_par_iter().enumerate().for_each(|(h, t)| {
            let q = MatRef::rows(&qkv[h * d..], n, d, row);
            let k = MatRef::rows(&qkv[hidden + h * d..], n, d, row);
            let v = MatRef::rows(&qkv[2 * hidden + h * d..], n, d, row);
            matmul(MatMut::rows(t.probs, n, n, n), q, k.t(), scaling, false);
            kernels::softmax_rows(t.probs, n, how.causal, t.scores);
            for (recorded, offset) in [(t.queries, h * d), (t.keys, hidden + h * d)] {
                if let Some(recorded) = recorded {
                    for (dst, src) in recorded.chunks_mut(d).zip(qkv.chunks(row)) {
                        dst.copy_from_slice(&src[offset..offset + d]);
                    }
                }
            }
            if how.ablated.contains(&h) {
                t.context.fill(0.0);
            } else {
                matmul(MatMut::rows(t.context, n, d, d), MatRef::rows(t.probs, n, n, n), v, 1.0, false);
            }
        });
        // (heads, n, d) → (n, heads·d), then the output dense.
        for (h, context) in bufs.context_by_head.chunks(n * d).enumerate() {
            for (dst, src) in bufs.context.chunks_mut(hidden).zip(context.chunks(d)) {
                dst[h * d..(h + 1) * d].copy_from_slice(src);
            }
        }
        self.output.forward_into(&bufs.context, Some(residual), &mut bufs.panels, out);
    }
}

/// One head's share of a layer's outputs.
struct HeadOut<'a> {
    probs: &'a mut [f32],
    context: &'a mut [f32],
    scores: Option<&'a mut [f32]>,
    queries: Option<&'a mut [f32]>,
    keys: Option<&'a mut [f32]>,
}

/// One layer's slices of the recorded outputs (`heads` matrices or vector sets each).
struct Recorded<'a> {
    probs: &'a mut [f32],
    scores: Option<&'a mut [f32]>,
    queries: Option<&'a mut [f32]>,
    keys: Option<&'a mut [f32]>,
}

/// Working memory of a forward pass, allocated once and reused by every layer.
struct Buffers {
    /// Input of a sub-block after its norm (pre-LN), `n × hidden`.
    normed: Vec<f32>,
    /// Fused q/k/v, `n × 3·hidden`.
    qkv: Vec<f32>,
    /// Attention output per head, `heads × n × head_dim`.
    context_by_head: Vec<f32>,
    /// The same as rows, `n × hidden`.
    context: Vec<f32>,
    /// Residual stream after attention, `n × hidden`.
    attended: Vec<f32>,
    /// Feed-forward inner activations, `n × intermediate`.
    inner: Vec<f32>,
    /// A linear layer's product, panel by panel, before its bias: `n × out` for the widest layer.
    panels: Vec<f32>,
}

impl Buffers {
    fn new(n: usize, cfg: &Config) -> Self {
        let hidden = cfg.hidden_size;
        Self {
            normed: vec![0.0; n * hidden],
            qkv: vec![0.0; n * 3 * hidden],
            context_by_head: vec![0.0; n * hidden],
            context: vec![0.0; n * hidden],
            attended: vec![0.0; n * hidden],
            inner: vec![0.0; n * cfg.intermediate_size],
            panels: vec![0.0; n * (3 * hidden).max(cfg.intermediate_size)],
        }
    }
}

/// How one layer runs: what to record and what to change.
struct LayerRun<'a> {
    norm: NormPlacement,
    /// Score factor (None: `head_dim^-0.5`).
    scale: Option<f32>,
    temperature: f32,
    causal: bool,
    /// Heads of this layer whose output is zeroed.
    ablated: &'a [usize],
}

/// `BertLayer`: attention, then `BertIntermediate` (dense + activation) and `BertOutput`
/// (dense, residual, `LayerNorm`).
#[derive(Debug, Clone)]
struct Layer {
    attention: Attention,
    intermediate: Linear,
    act: HiddenAct,
    output: Linear,
    norm: Norm,
}

impl Layer {
    fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        Ok(Self {
            attention: Attention::load(&vb.pp("attention"), cfg)?,
            intermediate: Linear::load(cfg.hidden_size, cfg.intermediate_size, &vb.pp("intermediate").pp("dense"))?,
            act: cfg.hidden_act,
            output: Linear::load(cfg.intermediate_size, cfg.hidden_size, &vb.pp("output").pp("dense"))?,
            norm: Norm::load(cfg.hidden_size, cfg.layer_norm_eps, &vb.pp("output").pp("LayerNorm"))?,
        })
    }

    /// The block on the residual stream `x` (`n × hidden`), in place.
    fn forward(&self, x: &mut [f32], how: &LayerRun<'_>, rec: Recorded<'_>, bufs: &mut Buffers) {
        let mut attended = std::mem::take(&mut bufs.attended);
        match how.norm {
            NormPlacement::Post => {
                self.attention.forward(x, x, how, rec, bufs, &mut attended);
                self.attention.norm.forward_in_place(&mut attended);
                self.feed_forward(&attended, &attended, bufs, x);
                self.norm.forward_in_place(x);
            }
            NormPlacement::Pre => {
                let mut normed = std::mem::take(&mut bufs.normed);
                normed.copy_from_slice(x);
                self.attention.norm.forward_in_place(&mut normed);
                self.attention.forward(&normed, x, how, rec, bufs, &mut attended);
                normed.copy_from_slice(&attended);
                self.norm.forward_in_place(&mut normed);
                self.feed_forward(&normed, &attended, bufs, x);
                bufs.normed = normed;
            }
        }
        bufs.attended = attended;
    }

    /// The feed-forward block on `x`, plus `residual` (no norm), into `out`.
    fn feed_forward(&self, x: &[f32], residual: &[f32], bufs: &mut Buffers, out: &mut [f32]) {
        self.intermediate.forward_into(x, None, &mut bufs.panels, &mut bufs.inner);
        match self.act {
            // GELUActivation: nn.functional.gelu, the exact erf form.
            HiddenAct::Gelu => kernels::gelu_erf_in_place(&mut bufs.inner),
            // NewGELUActivation: the tanh approximation.
            HiddenAct::GeluNew => kernels::gelu_tanh_in_place(&mut bufs.inner),
            HiddenAct::Relu => kernels::relu_in_place(&mut bufs.inner),
        }
        self.output.forward_into(&bufs.inner, Some(residual), &mut bufs.panels, out);
    }
}

/// A BERT encoder (`BertModel` without the pooler) that records attention.
#[derive(Debug, Clone)]
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    final_norm: Option<Norm>,
    config: Config,
    arch: Arch,
    device: Device,
}

impl Bert {
    /// Builds the encoder from weights named as in a `BertModel` checkpoint (no `bert.` prefix).
    pub fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        for name in ["embeddings.position_embeddings.weight", "embeddings.LayerNorm.weight"] {
            if !vb.contains_tensor(name) {
                return Err(candle_core::Error::Msg(format!("cannot find tensor {name}")));
            }
        }
        Self::load_arch(vb, cfg, Arch::bert())
    }

    /// Builds an encoder wired as `arch`, from BERT-named weights. Without
    /// `embeddings.position_embeddings` it has no position table, without
    /// `embeddings.token_type_embeddings` no segments, without `embeddings.LayerNorm` no embedding
    /// norm; `final_norm` (pre-LN) is the norm after the last block.
    pub fn load_arch(vb: &VarBuilder, cfg: &Config, arch: Arch) -> candle_core::Result<Self> {
        let embeddings = Embeddings::load(&vb.pp("embeddings"), cfg, &arch)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp(format!("encoder.layer.{i}")), cfg))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let final_norm = vb
            .contains_tensor("final_norm.weight")
            .then(|| Norm::load(cfg.hidden_size, cfg.layer_norm_eps, &vb.pp("final_norm")))
            .transpose()?;
        Ok(Self { embeddings, layers, final_norm, config: cfg.clone(), arch, device: vb.device().clone() })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether every query sees only itself and earlier tokens.
    pub fn is_causal(&self) -> bool {
        self.arch.causal
    }

    /// The position table (learned, or the fixed encoding it was built with),
    /// `max_position_embeddings × hidden_size`, row-major; None without one.
    pub fn position_table(&self) -> candle_core::Result<Option<Vec<f32>>> {
        self.embeddings.position.as_ref().map(|p| p.embeddings().flatten_all()?.to_vec1()).transpose()
    }

    /// Runs the encoder on one sequence (no padding, so no attention mask), recording attention,
    /// with `interventions` applied (the default changes nothing).
    pub fn forward(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        capture: Capture,
        interventions: &Interventions,
    ) -> candle_core::Result<ForwardOutput> {
        // Run our own parallel kernels on candle's worker pool too: one pool, not two, on few cores.
        candle_core::utils::with_threadpool(|| self.forward_in_pool(ids, type_ids, capture, interventions))
    }

    fn forward_in_pool(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        capture: Capture,
        iv: &Interventions,
    ) -> candle_core::Result<ForwardOutput> {
        let seq_len = ids.len();
        if seq_len == 0 || type_ids.len() != seq_len {
            return Err(candle_core::Error::Msg(format!(
                "cannot run {seq_len} tokens with {} segment ids: the encoder needs at least one token and one segment id per token",
                type_ids.len()
            )));
        }
        let ids = Tensor::from_slice(ids, seq_len, &self.device)?;
        let type_ids = Tensor::from_slice(type_ids, seq_len, &self.device)?;
        iv.validate(self.layers.len(), self.config.num_attention_heads).map_err(candle_core::Error::Msg)?;
        let run_layers = iv.first_layers.unwrap_or(self.layers.len()); // validated above
        let heads = self.config.num_attention_heads;
        let per_layer = heads * seq_len * seq_len;
        let vectors_per_layer = heads * seq_len * self.config.head_dim();
        // The layers write every recorded value: probabilities and scores reuse the buffers of
        // dropped runs (whatever they hold), other buffers are zeroed straight from the OS.
        let full = capture == Capture::Full;
        let mut out = ForwardOutput {
            last_hidden: Vec::new(),
            probs: spare::take(per_layer * run_layers),
            scores: if full { spare::take(per_layer * run_layers) } else { Vec::new() },
            queries: if full { vec![0.0; vectors_per_layer * run_layers] } else { Vec::new() },
            keys: if full { vec![0.0; vectors_per_layer * run_layers] } else { Vec::new() },
        };
        let mut x = self.embeddings.forward(&ids, &type_ids, !iv.zero_positions)?;
        let mut bufs = Buffers::new(seq_len, &self.config);
        let mut scores = full.then(|| out.scores.chunks_mut(per_layer));
        let mut queries = full.then(|| out.queries.chunks_mut(vectors_per_layer));
        let mut keys = full.then(|| out.keys.chunks_mut(vectors_per_layer));
        for ((l, layer), probs) in self.layers[..run_layers].iter().enumerate().zip(out.probs.chunks_mut(per_layer)) {
            let ablated: Vec<usize> = iv.ablated.iter().filter(|&&(al, _)| al == l).map(|&(_, h)| h).collect();
            let how = LayerRun {
                norm: self.arch.norm,
                scale: self.arch.attention_scale,
                temperature: iv.temperature,
                causal: self.arch.causal || iv.causal,
                ablated: &ablated,
            };
            let rec = Recorded {
                probs,
                scores: scores.as_mut().and_then(Iterator::next),
                queries: queries.as_mut().and_then(Iterator::next),
                keys: keys.as_mut().and_then(Iterator::next),
            };
            layer.forward(&mut x, &how, rec, &mut bufs);
        }
        if let Some(norm) = &self.final_norm {
            norm.forward_in_place(&mut x);
        }
        out.last_hidden = x;
        Ok(out)
    }
}
