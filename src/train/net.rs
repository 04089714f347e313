//! The networks the lab trains, on Candle's autograd: their parameters are `Var`s in a `VarMap`
//! (what candle-nn's `AdamW` steps), initialised from the seed as `PyTorch` initialises its layers.
//!
//! - The decoder is GPT-2's block (pre-LN, causal, fused q/k/v, learned or fixed sinusoidal
//!   positions, a final norm, an output matrix of its own), with or without the MLP.
//! - The classifier is BERT's encoder (embeddings + positions + an embedding norm, post-LN blocks —
//!   or pre-LN with a final norm), pooled by the mean of its tokens or by a `[CLS]` token, then a
//!   linear layer to two classes.
//!
//! Linear weights are held `in × out` (GPT-2's `Conv1D` layout): `x · W + b`.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{D, DType, Device, IndexOp, Tensor, Var};
use candle_nn::VarMap;
use rayon::prelude::*;

use super::attention::Attention;
use super::config::{Pooling, TrainConfig};
use super::ops::{self, AddBias, CrossEntropy, LayerNorm, Product};
use super::tasks::{Batch, Rng, Targets, Task};
use crate::analysis::pe::{self, PeLayout, PeParams};
use crate::model::NormPlacement;
use crate::model::playground::PeKind;

/// Layer norm epsilon (GPT-2's and the playground's).
pub const NORM_EPS: f64 = 1e-5;
/// BERT's, for the classifier.
pub const BERT_NORM_EPS: f64 = 1e-12;

/// A network being trained.
pub struct Net {
    /// What it is.
    pub cfg: TrainConfig,
    /// Embedding rows (the task's vocabulary).
    pub vocab: usize,
    /// Position table rows (the task's longest input).
    pub positions: usize,
    /// Every trained parameter.
    pub varmap: VarMap,
    vars: HashMap<String, Var>,
    /// A fixed position table (sinusoidal or none: zeros), not trained.
    fixed_positions: Option<Tensor>,
    dtype: DType,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("cfg", &self.cfg).field("values", &self.trained_values()).finish_non_exhaustive()
    }
}

/// What a forward pass returns.
#[derive(Debug)]
pub struct Outputs {
    /// `[batch, len, vocab]` for the decoder, `[batch, 2]` for the classifier.
    pub logits: Tensor,
    /// Per layer `[batch, heads, len, len]`.
    pub attention: Vec<Tensor>,
    /// The last hidden state (after the final norm, before pooling), `[batch · len, d_model]`.
    pub hidden: Tensor,
}

/// Parameters of a configuration (for the size check before anything is allocated).
pub fn parameter_count(cfg: &TrainConfig) -> usize {
    let task = Task::new(cfg);
    let (v, p, d, f) = (task.vocab_size(), task.max_len(), cfg.d_model, cfg.mlp);
    let per_layer = 2 * d + 3 * d * d + 3 * d + d * d + d + if f > 0 { 2 * d + d * f + f + f * d + d } else { 0 };
    let positions = if cfg.pe == PeKind::Learned { p * d } else { 0 };
    let head = if cfg.task.is_classifier() { 2 * d + 2 + 2 * d } else { d * v + 2 * d };
    v * d + positions + cfg.layers * per_layer + head
}

/// Floating-point operations of the matrix products of one training step on a batch of `cfg.batch`
/// sequences of the task's longest input: 2 per multiply-add, the forward pass's products and the
/// backward pass's two per product (the input's and the weight's gradients; the first layer's
/// input gradient counted too). Norms, softmax, the optimiser and the embeddings are left out.
pub fn step_flops(cfg: &TrainConfig) -> usize {
    let task = Task::new(cfg);
    let (rows, n, d, f, v) = (cfg.batch * task.max_len(), task.max_len(), cfg.d_model, cfg.mlp, task.vocab_size());
    let per_layer = rows * d * 3 * d + 2 * cfg.batch * n * n * d + rows * d * d + 2 * rows * d * f;
    let head = if cfg.task.is_classifier() { cfg.batch * d * 2 } else { rows * d * v };
    3 * 2 * (cfg.layers * per_layer + head)
}

impl Net {
    /// A network for `cfg`, its weights drawn from `cfg.seed`.
    pub fn new(cfg: &TrainConfig, dtype: DType) -> candle_core::Result<Self> {
        let task = Task::new(cfg);
        let (vocab, positions, d) = (task.vocab_size(), task.max_len(), cfg.d_model);
        let mut net = Self {
            cfg: cfg.clone(),
            vocab,
            positions,
            varmap: VarMap::new(),
            vars: HashMap::new(),
            fixed_positions: None,
            dtype,
        };
        let mut rng = Rng::new(cfg.seed, 0x1417);
        let dev = Device::Cpu;
        // As PyTorch: embeddings N(0, 1); linear weights and biases U(±1/√fan_in); norms 1 and 0.
        let normal = |rng: &mut Rng, shape: (usize, usize)| -> candle_core::Result<Tensor> {
            let v: Vec<f32> = (0..shape.0 * shape.1).map(|_| rng.normal()).collect();
            Tensor::from_vec(v, shape, &dev)
        };
        let uniform = |rng: &mut Rng, shape: &[usize], fan_in: usize| -> candle_core::Result<Tensor> {
            let bound = 1.0 / (fan_in as f64).sqrt();
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32).collect();
            Tensor::from_vec(v, shape, &Device::Cpu)
        };
        let ones = |n: usize| Tensor::ones(n, DType::F32, &Device::Cpu);
        let zeros = |n: usize| Tensor::zeros(n, DType::F32, &Device::Cpu);
        net.add("tok", normal(&mut rng, (vocab, d))?)?;
        match cfg.pe {
            PeKind::Learned => net.add("pos", normal(&mut rng, (positions, d))?)?,
            PeKind::Interleaved | PeKind::Concatenated => {
                let layout = if cfg.pe == PeKind::Interleaved { PeLayout::Interleaved } else { PeLayout::Concatenated };
                let table = pe::encoding(PeParams { d_model: d, positions, base: cfg.pe_base, layout })
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                net.fixed_positions = Some(Tensor::from_vec(table, (positions, d), &Device::Cpu)?.to_dtype(dtype)?);
            }
            PeKind::None => net.fixed_positions = Some(Tensor::zeros((positions, d), dtype, &Device::Cpu)?),
        }
        let classifier = cfg.task.is_classifier();
        if classifier {
            net.add("emb_ln.w", ones(d)?)?;
            net.add("emb_ln.b", zeros(d)?)?;
        }
        for l in 0..cfg.layers {
            net.add(&format!("h.{l}.ln1.w"), ones(d)?)?;
            net.add(&format!("h.{l}.ln1.b"), zeros(d)?)?;
            net.add(&format!("h.{l}.qkv.w"), uniform(&mut rng, &[d, 3 * d], d)?)?;
            net.add(&format!("h.{l}.qkv.b"), uniform(&mut rng, &[3 * d], d)?)?;
            net.add(&format!("h.{l}.o.w"), uniform(&mut rng, &[d, d], d)?)?;
            net.add(&format!("h.{l}.o.b"), uniform(&mut rng, &[d], d)?)?;
            if cfg.mlp > 0 {
                net.add(&format!("h.{l}.ln2.w"), ones(d)?)?;
                net.add(&format!("h.{l}.ln2.b"), zeros(d)?)?;
                net.add(&format!("h.{l}.up.w"), uniform(&mut rng, &[d, cfg.mlp], d)?)?;
                net.add(&format!("h.{l}.up.b"), uniform(&mut rng, &[cfg.mlp], d)?)?;
                net.add(&format!("h.{l}.down.w"), uniform(&mut rng, &[cfg.mlp, d], cfg.mlp)?)?;
                net.add(&format!("h.{l}.down.b"), uniform(&mut rng, &[d], cfg.mlp)?)?;
            }
        }
        if net.final_norm() {
            net.add("ln_f.w", ones(d)?)?;
            net.add("ln_f.b", zeros(d)?)?;
        }
        if classifier {
            net.add("head.w", uniform(&mut rng, &[d, 2], d)?)?;
            net.add("head.b", uniform(&mut rng, &[2], d)?)?;
        } else {
            net.add("head.w", uniform(&mut rng, &[d, vocab], d)?)?;
        }
        Ok(net)
    }

    #[allow(clippy::needless_pass_by_value)] // takes the freshly made tensor
    fn add(&mut self, name: &str, t: Tensor) -> candle_core::Result<()> {
        let var = Var::from_tensor(&t.to_dtype(self.dtype)?)?;
        self.varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("poisoned".into()))?
            .insert(name.into(), var.clone());
        self.vars.insert(name.into(), var);
        Ok(())
    }

    /// Whether the stack ends in a norm: the decoder and pre-LN classifiers.
    pub fn final_norm(&self) -> bool {
        !self.cfg.task.is_classifier() || self.cfg.norm == NormPlacement::Pre
    }

    /// Whether blocks normalise before their sub-layers.
    pub fn pre_ln(&self) -> bool {
        !self.cfg.task.is_classifier() || self.cfg.norm == NormPlacement::Pre
    }

    /// A parameter by name.
    pub fn get(&self, name: &str) -> candle_core::Result<&Tensor> {
        self.vars.get(name).map(Var::as_tensor).ok_or_else(|| candle_core::Error::Msg(format!("no parameter {name}")))
    }

    /// A parameter's variable by name (to set it).
    pub fn var(&self, name: &str) -> candle_core::Result<&Var> {
        self.vars.get(name).ok_or_else(|| candle_core::Error::Msg(format!("no parameter {name}")))
    }

    /// Every parameter, by name (sorted).
    pub fn named(&self) -> Vec<(String, Var)> {
        let mut v: Vec<(String, Var)> = self.vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The position table as used (learned, sinusoidal or zeros).
    pub fn position_table(&self) -> candle_core::Result<Tensor> {
        match &self.fixed_positions {
            Some(t) => Ok(t.clone()),
            None => Ok(self.get("pos")?.clone()),
        }
    }

    /// Number of trained values.
    pub fn trained_values(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    fn linear(&self, x: &Tensor, name: &str) -> candle_core::Result<Tensor> {
        let y = Product::PLAIN.apply(&x.contiguous()?, self.get(&format!("{name}.w"))?)?;
        match self.vars.get(&format!("{name}.b")) {
            Some(b) => AddBias.apply(&y, b.as_tensor()),
            None => Ok(y),
        }
    }

    fn norm(&self, x: &Tensor, name: &str) -> candle_core::Result<Tensor> {
        let eps = if self.cfg.task.is_classifier() { BERT_NORM_EPS } else { NORM_EPS };
        LayerNorm { eps }.apply(x, self.get(&format!("{name}.w"))?, self.get(&format!("{name}.b"))?)
    }

    /// The pass over `ids` (`rows × len`, row-major); `lengths` are the sequences' lengths before
    /// padding (the classifier's batches), `keep_attention` returns every layer's attention.
    pub fn forward(
        &self,
        ids: &[u32],
        rows: usize,
        len: usize,
        lengths: Option<&[usize]>,
        keep_attention: bool,
    ) -> candle_core::Result<Outputs> {
        let cfg = &self.cfg;
        let (d, h) = (cfg.d_model, cfg.heads);
        let dh = d / h;
        if len > self.positions {
            candle_core::bail!("{len} tokens: the model has positions for {}", self.positions);
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            candle_core::bail!("token id {bad} is past the vocabulary ({})", self.vocab);
        }
        let ids_t = Tensor::from_slice(ids, rows * len, &Device::Cpu)?;
        let tok = self.get("tok")?.index_select(&ids_t, 0)?.reshape((rows, len, d))?;
        let pos = self.position_table()?.narrow(0, 0, len)?;
        let mut x = tok.broadcast_add(&pos)?.reshape((rows * len, d))?;
        let classifier = cfg.task.is_classifier();
        if classifier {
            x = self.norm(&x, "emb_ln")?;
        }
        let attend = Attention {
            heads: h,
            len,
            scale: 1.0 / (dh as f64).sqrt(),
            causal: !classifier,
            lengths: lengths.map(|l| Arc::new(l.to_vec())),
        };
        let pre = self.pre_ln();
        let mut attention = Vec::new();
        for l in 0..cfg.layers {
            let p = format!("h.{l}");
            let a_in = if pre { self.norm(&x, &format!("{p}.ln1"))? } else { x.clone() };
            let qkv = self.linear(&a_in, &format!("{p}.qkv"))?;
            if keep_attention {
                attention.push(attend.probabilities(&qkv)?);
            }
            let ctx = attend.apply(&qkv)?;
            let attn_out = self.linear(&ctx, &format!("{p}.o"))?;
            x = if pre { (x + attn_out)? } else { self.norm(&(x + attn_out)?, &format!("{p}.ln1"))? };
            if cfg.mlp > 0 {
                let m_in = if pre { self.norm(&x, &format!("{p}.ln2"))? } else { x.clone() };
                let up = self.linear(&m_in, &format!("{p}.up"))?;
                let act = if classifier { up.gelu_erf()? } else { up.gelu()? };
                let down = self.linear(&act, &format!("{p}.down"))?;
                x = if pre { (x + down)? } else { self.norm(&(x + down)?, &format!("{p}.ln2"))? };
            }
        }
        if self.final_norm() {
            x = self.norm(&x, "ln_f")?;
        }
        let hidden = x.clone();
        let logits = if classifier {
            let x = x.reshape((rows, len, d))?;
            let pooled = match cfg.pooling {
                Pooling::Cls => x.i((.., 0, ..))?,
                Pooling::Mean => {
                    // The mean over each sequence's own tokens (padding excluded).
                    let lengths: Vec<usize> = lengths.map_or_else(|| vec![len; rows], <[usize]>::to_vec);
                    let mut weights = vec![0f32; rows * len];
                    for (r, &n) in lengths.iter().enumerate() {
                        let n = n.clamp(1, len);
                        weights[r * len..r * len + n].fill(1.0 / n as f32);
                    }
                    let w = Tensor::from_vec(weights, (rows, len, 1), &Device::Cpu)?.to_dtype(self.dtype)?;
                    x.broadcast_mul(&w)?.sum(1)?
                }
            };
            self.linear(&pooled, "head")?
        } else {
            self.linear(&x, "head")?.reshape((rows, len, self.vocab))?
        };
        Ok(Outputs { logits, attention, hidden })
    }

    /// The mean cross-entropy of a batch's targets (next tokens from `from`, or labels).
    pub fn loss(
        &self,
        out: &Outputs,
        ids: &[u32],
        rows: usize,
        len: usize,
        targets: &Targets,
    ) -> candle_core::Result<Tensor> {
        Self::loss_over(out, ids, rows, len, targets, None)
    }

    /// The loss and the gradients of `batch` (its mean cross-entropy), the batch cut into
    /// [`STEP_CHUNKS`] chunks of sequences whose forward and backward passes run side by side on
    /// rayon's threads, each chunk on one thread without forking again ([`ops::serially`]): one
    /// fork and one join per step. Each chunk's loss is its share of the batch's mean, so the
    /// chunks' losses and gradients add up to the batch's; they are added in chunk order, so the
    /// result is the same bits on any number of threads.
    pub fn gradients(&self, batch: &Batch) -> candle_core::Result<Gradients> {
        let total = batch.counted();
        let parts: Vec<(f64, GradStore)> = batch
            .split(STEP_CHUNKS)
            .par_iter()
            .map(|part| {
                ops::serially(|| {
                    let lengths = match &part.targets {
                        Targets::Labels { lengths, .. } => Some(lengths.as_slice()),
                        Targets::Next { .. } => None,
                    };
                    let out = self.forward(&part.ids, part.rows, part.len, lengths, false)?;
                    let loss = Self::loss_over(&out, &part.ids, part.rows, part.len, &part.targets, Some(total))?;
                    let value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                    Ok((value, loss.backward()?))
                })
            })
            .collect::<candle_core::Result<_>>()?;
        let loss = parts.iter().map(|(l, _)| l).sum();
        Ok(Gradients { loss, parts: parts.into_iter().map(|(_, g)| g).collect() })
    }

    /// [`Net::loss`] with the mean taken over `mean_over` targets when given (a part of a batch
    /// of that many).
    fn loss_over(
        out: &Outputs,
        ids: &[u32],
        rows: usize,
        len: usize,
        targets: &Targets,
        mean_over: Option<usize>,
    ) -> candle_core::Result<Tensor> {
        let classes = out.logits.dim(D::Minus1)?;
        let (logits, targets) = match targets {
            Targets::Next { from } => {
                // Every position from `from` on but the last predicts the next token.
                let mut t = vec![CrossEntropy::SKIP; rows * len];
                for r in 0..rows {
                    for i in *from..len - 1 {
                        t[r * len + i] = ids[r * len + i + 1];
                    }
                }
                (out.logits.reshape((rows * len, classes))?, t)
            }
            Targets::Labels { labels, .. } => (out.logits.clone(), labels.clone()),
        };
        CrossEntropy { targets: Arc::new(targets), mean_over }.apply(&logits)
    }
}

/// Chunks a training step's batch is cut into ([`Net::gradients`]): fixed, whatever the number of
/// threads, so that a run's numbers do not depend on the machine.
pub const STEP_CHUNKS: usize = 8;

/// A step's loss and gradients: one store per chunk of the batch.
#[derive(Debug)]
pub struct Gradients {
    /// The batch's mean loss (the chunks' shares added in order).
    pub loss: f64,
    parts: Vec<GradStore>,
}

impl Gradients {
    /// The gradient of parameter `t`: the chunks' added in chunk order (`None` when none has one).
    pub fn get(&self, t: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let mut sum: Option<Tensor> = None;
        for g in self.parts.iter().filter_map(|p| p.get(t)) {
            sum = Some(match sum {
                None => g.clone(),
                Some(s) => (s + g)?,
            });
        }
        Ok(sum)
    }
}
