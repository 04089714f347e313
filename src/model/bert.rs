//! A BERT encoder whose forward pass records every head's attention (and queries, keys, scores).
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (eager attention) block by block:
//! <https://github.com/huggingface/transformers/blob/main/src/transformers/models/bert/modeling_bert.py>

use candle_core::{DType, Device, Module, Storage, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder, embedding, layer_norm};

use super::config::{Config, HiddenAct};
use super::intervene::Interventions;
use super::kernels;

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

/// Appends a tensor's values (row-major) to `out`.
fn append_values(t: &Tensor, out: &mut Vec<f32>) -> candle_core::Result<()> {
    with_values(t, |v| out.extend_from_slice(v))
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

/// `nn.Linear`: `x · Wᵀ + b`, with `Wᵀ` stored transposed and contiguous once at load time (the
/// matmul then packs less per call, which matters for short inputs).
#[derive(Debug, Clone)]
struct Linear {
    weight_t: Tensor,
    bias: Tensor,
}

impl Linear {
    /// From a checkpoint's `weight` (out × in) and `bias` (out).
    fn new(weight: &Tensor, bias: Tensor) -> candle_core::Result<Self> {
        Ok(Self { weight_t: weight.t()?.contiguous()?, bias })
    }

    fn load(in_dim: usize, out_dim: usize, vb: &VarBuilder) -> candle_core::Result<Self> {
        Self::new(&vb.get((out_dim, in_dim), "weight")?, vb.get(out_dim, "bias")?)
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_plus(x, None)
    }

    /// `x · Wᵀ + b (+ residual)`, the additions in one pass of our own (Candle's element-wise ops
    /// on large tensors run on a second, spinning thread pool that competes with the matmuls).
    fn forward_plus(&self, x: &Tensor, residual: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let y = x.matmul(&self.weight_t)?;
        let shape = y.shape().clone();
        let summed = with_values(&y, |y| {
            with_values(&self.bias, |b| match residual {
                Some(r) => with_values(r, |r| kernels::add_bias_residual(y, b, Some(r))),
                None => Ok(kernels::add_bias_residual(y, b, None)),
            })
        })???;
        Tensor::from_vec(summed, shape, x.device())
    }
}

/// `BertEmbeddings`: word + token type + absolute position embeddings, then `LayerNorm`. The
/// playground has no token types and no embedding norm, and may have no position table.
#[derive(Debug, Clone)]
struct Embeddings {
    word: Embedding,
    position: Option<Embedding>,
    token_type: Option<Embedding>,
    norm: Option<LayerNorm>,
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
            norm: has("LayerNorm").then(|| layer_norm(h, cfg.layer_norm_eps, vb.pp("LayerNorm"))).transpose()?,
            scale: arch.embed_scale,
        })
    }

    /// `inputs_embeds + token_type_embeddings`, then `+= position_embeddings`, then `LayerNorm`
    /// (dropout is the identity at inference).
    fn forward(&self, ids: &Tensor, type_ids: &Tensor, positions_on: bool) -> candle_core::Result<Tensor> {
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
        match &self.norm {
            Some(norm) => norm.forward(&x),
            None => Ok(x),
        }
    }
}

/// `BertSelfAttention` (eager) + `BertSelfOutput`, with query, key and value fused into one matmul.
#[derive(Debug, Clone)]
struct Attention {
    qkv: Linear,
    output: Linear,
    norm: LayerNorm,
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
        let qkv = Linear::new(&Tensor::cat(&weights, 0)?, Tensor::cat(&biases, 0)?)?;
        Ok(Self {
            qkv,
            output: Linear::load(hidden, hidden, &vb.pp("output").pp("dense"))?,
            norm: layer_norm(hidden, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `eager_attention_forward`: softmax(q·kᵀ · scale) · v, then the output dense plus `residual`
    /// (the caller places the `LayerNorm`). Records probabilities (and scores, q, k when asked)
    /// into `out`. Heads in `ablated` have their output zeroed.
    fn forward(
        &self,
        x: &Tensor,
        residual: &Tensor,
        how: &LayerRun<'_>,
        out: &mut ForwardOutput,
    ) -> candle_core::Result<Tensor> {
        let capture = how.capture;
        let seq_len = x.dim(0)?;
        let hidden = self.heads * self.head_dim;
        // (n, 3·hidden) → (3, heads, n, head_dim)
        let qkv = self
            .qkv
            .forward(x)?
            .reshape((seq_len, 3, self.heads, self.head_dim))?
            .permute((1, 2, 0, 3))?
            .contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let scaling = how.scale.unwrap_or((self.head_dim as f64).powf(-0.5) as f32) / how.temperature;
        // q·kᵀ, then scale + softmax in one pass written straight into the recorded output.
        let raw = q.matmul(&k.t()?)?;
        let len = self.heads * seq_len * seq_len;
        let start = out.probs.len();
        out.probs.resize(start + len, 0.0);
        let probs_out = &mut out.probs[start..];
        if capture == Capture::Full {
            let s_start = out.scores.len();
            out.scores.resize(s_start + len, 0.0);
            let scores_out = &mut out.scores[s_start..];
            with_values(&raw, |r| {
                kernels::scaled_softmax_rows(r, seq_len, scaling, how.causal, probs_out, Some(scores_out));
            })?;
            append_values(&q, &mut out.queries)?;
            append_values(&k, &mut out.keys)?;
        } else {
            with_values(&raw, |r| kernels::scaled_softmax_rows(r, seq_len, scaling, how.causal, probs_out, None))?;
        }
        drop(raw);
        let probs = Tensor::from_slice(&out.probs[start..], (self.heads, seq_len, seq_len), x.device())?;
        let mut context = probs.matmul(&v)?;
        if !how.ablated.is_empty() {
            let mut values = with_values(&context, <[f32]>::to_vec)?;
            let per_head = seq_len * self.head_dim;
            for &h in how.ablated {
                values[h * per_head..(h + 1) * per_head].fill(0.0);
            }
            context = Tensor::from_vec(values, context.shape(), x.device())?;
        }
        let context = context.transpose(0, 1)?.reshape((seq_len, hidden))?;
        self.output.forward_plus(&context, Some(residual))
    }
}

/// How one layer runs: what to record and what to change.
struct LayerRun<'a> {
    capture: Capture,
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
    norm: LayerNorm,
}

impl Layer {
    fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        Ok(Self {
            attention: Attention::load(&vb.pp("attention"), cfg)?,
            intermediate: Linear::load(cfg.hidden_size, cfg.intermediate_size, &vb.pp("intermediate").pp("dense"))?,
            act: cfg.hidden_act,
            output: Linear::load(cfg.intermediate_size, cfg.hidden_size, &vb.pp("output").pp("dense"))?,
            norm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
        })
    }

    fn forward(&self, x: &Tensor, how: &LayerRun<'_>, out: &mut ForwardOutput) -> candle_core::Result<Tensor> {
        match how.norm {
            NormPlacement::Post => {
                let attended = self.attention.norm.forward(&self.attention.forward(x, x, how, out)?)?;
                self.norm.forward(&self.feed_forward(&attended, &attended)?)
            }
            NormPlacement::Pre => {
                let attended = self.attention.forward(&self.attention.norm.forward(x)?, x, how, out)?;
                self.feed_forward(&self.norm.forward(&attended)?, &attended)
            }
        }
    }

    /// The feed-forward block on `x`, plus `residual` (no norm).
    fn feed_forward(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        let inner = self.intermediate.forward(x)?;
        let inner = match self.act {
            // GELUActivation: nn.functional.gelu, the exact erf form.
            HiddenAct::Gelu => {
                let mut values = with_values(&inner, <[f32]>::to_vec)?;
                kernels::gelu_erf_in_place(&mut values);
                Tensor::from_vec(values, inner.shape(), inner.device())?
            }
            // NewGELUActivation: the tanh approximation.
            HiddenAct::GeluNew => inner.gelu()?,
            HiddenAct::Relu => inner.relu()?,
        };
        self.output.forward_plus(&inner, Some(residual))
    }
}

/// A BERT encoder (`BertModel` without the pooler) that records attention.
#[derive(Debug, Clone)]
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    final_norm: Option<LayerNorm>,
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
            .then(|| layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("final_norm")))
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
        let ids = Tensor::from_slice(ids, seq_len, &self.device)?;
        let type_ids = Tensor::from_slice(type_ids, seq_len, &self.device)?;
        let per_layer = self.config.num_attention_heads * seq_len * seq_len;
        iv.validate(self.layers.len(), self.config.num_attention_heads).map_err(candle_core::Error::Msg)?;
        let mut out =
            ForwardOutput { probs: Vec::with_capacity(per_layer * self.layers.len()), ..ForwardOutput::default() };
        if capture == Capture::Full {
            out.scores.reserve(per_layer * self.layers.len());
        }
        let mut x = self.embeddings.forward(&ids, &type_ids, !iv.zero_positions)?;
        let run_layers = iv.first_layers.unwrap_or(self.layers.len()); // validated above
        for (l, layer) in self.layers[..run_layers].iter().enumerate() {
            let ablated: Vec<usize> = iv.ablated.iter().filter(|&&(al, _)| al == l).map(|&(_, h)| h).collect();
            let how = LayerRun {
                capture,
                norm: self.arch.norm,
                scale: self.arch.attention_scale,
                temperature: iv.temperature,
                causal: self.arch.causal || iv.causal,
                ablated: &ablated,
            };
            x = layer.forward(&x, &how, &mut out)?;
        }
        if let Some(norm) = &self.final_norm {
            x = norm.forward(&x)?;
        }
        out.last_hidden = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        Ok(out)
    }
}
