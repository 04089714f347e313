//! A BERT encoder whose forward pass records every head's attention (and queries, keys, scores).
//!
//! Mirrors Hugging Face transformers' `modeling_bert.py` (eager attention) block by block:
//! <https://github.com/huggingface/transformers/blob/main/src/transformers/models/bert/modeling_bert.py>

use candle_core::{DType, Device, Module, Storage, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder, embedding, layer_norm};

use super::config::{Config, HiddenAct};
use super::kernels;

/// What to record besides the attention probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Attention probabilities only (what `output_attentions=True` returns).
    Attention,
    /// Also pre-softmax scores, queries and keys (for the neuron view).
    Full,
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

/// `BertEmbeddings`: word + token type + absolute position embeddings, then `LayerNorm`.
#[derive(Debug, Clone)]
struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        Ok(Self {
            word: embedding(cfg.vocab_size, cfg.hidden_size, vb.pp("word_embeddings"))?,
            position: embedding(cfg.max_position_embeddings, cfg.hidden_size, vb.pp("position_embeddings"))?,
            token_type: embedding(cfg.type_vocab_size, cfg.hidden_size, vb.pp("token_type_embeddings"))?,
            norm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    /// `inputs_embeds + token_type_embeddings`, then `+= position_embeddings`, then `LayerNorm`
    /// (dropout is the identity at inference).
    fn forward(&self, ids: &Tensor, type_ids: &Tensor) -> candle_core::Result<Tensor> {
        let seq_len = ids.dim(0)?;
        let positions = Tensor::arange(0u32, seq_len as u32, ids.device())?;
        let x = (self.word.forward(ids)? + self.token_type.forward(type_ids)?)?;
        let x = (x + self.position.forward(&positions)?)?;
        self.norm.forward(&x)
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

    /// `eager_attention_forward`: softmax(q·kᵀ · head_dim^-0.5) · v, then the output dense, the
    /// residual and `LayerNorm`. Records probabilities (and scores, q, k when asked) into `out`.
    fn forward(&self, x: &Tensor, capture: Capture, out: &mut ForwardOutput) -> candle_core::Result<Tensor> {
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
        let scaling = (self.head_dim as f64).powf(-0.5) as f32;
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
            with_values(&raw, |r| kernels::scaled_softmax_rows(r, seq_len, scaling, probs_out, Some(scores_out)))?;
            append_values(&q, &mut out.queries)?;
            append_values(&k, &mut out.keys)?;
        } else {
            with_values(&raw, |r| kernels::scaled_softmax_rows(r, seq_len, scaling, probs_out, None))?;
        }
        drop(raw);
        let probs = Tensor::from_slice(&out.probs[start..], (self.heads, seq_len, seq_len), x.device())?;
        let context = probs.matmul(&v)?.transpose(0, 1)?.reshape((seq_len, hidden))?;
        self.norm.forward(&self.output.forward_plus(&context, Some(x))?)
    }
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

    fn forward(&self, x: &Tensor, capture: Capture, out: &mut ForwardOutput) -> candle_core::Result<Tensor> {
        let attended = self.attention.forward(x, capture, out)?;
        let inner = self.intermediate.forward(&attended)?;
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
        self.norm.forward(&self.output.forward_plus(&inner, Some(&attended))?)
    }
}

/// A BERT encoder (`BertModel` without the pooler) that records attention.
#[derive(Debug, Clone)]
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    config: Config,
    device: Device,
}

impl Bert {
    /// Builds the encoder from weights named as in a `BertModel` checkpoint (no `bert.` prefix).
    pub fn load(vb: &VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        let embeddings = Embeddings::load(&vb.pp("embeddings"), cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp(format!("encoder.layer.{i}")), cfg))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self { embeddings, layers, config: cfg.clone(), device: vb.device().clone() })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The learned position table, `max_position_embeddings × hidden_size`, row-major.
    pub fn position_table(&self) -> candle_core::Result<Vec<f32>> {
        self.embeddings.position.embeddings().flatten_all()?.to_vec1()
    }

    /// Runs the encoder on one sequence (no padding, so no attention mask), recording attention.
    pub fn forward(&self, ids: &[u32], type_ids: &[u32], capture: Capture) -> candle_core::Result<ForwardOutput> {
        // Run our own parallel kernels on candle's worker pool too: one pool, not two, on few cores.
        candle_core::utils::with_threadpool(|| self.forward_in_pool(ids, type_ids, capture))
    }

    fn forward_in_pool(&self, ids: &[u32], type_ids: &[u32], capture: Capture) -> candle_core::Result<ForwardOutput> {
        let seq_len = ids.len();
        let ids = Tensor::from_slice(ids, seq_len, &self.device)?;
        let type_ids = Tensor::from_slice(type_ids, seq_len, &self.device)?;
        let per_layer = self.config.num_attention_heads * seq_len * seq_len;
        let mut out =
            ForwardOutput { probs: Vec::with_capacity(per_layer * self.layers.len()), ..ForwardOutput::default() };
        if capture == Capture::Full {
            out.scores.reserve(per_layer * self.layers.len());
        }
        let mut x = self.embeddings.forward(&ids, &type_ids)?;
        for layer in &self.layers {
            x = layer.forward(&x, capture, &mut out)?;
        }
        out.last_hidden = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        Ok(out)
    }
}
