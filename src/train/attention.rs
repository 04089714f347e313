//! The lab's fused self-attention ([`Attention`]) with its backward pass, one of the operations
//! of [`super::ops`]: per sequence and head, on the engine's kernels in f32 and plain loops in f64
//! (the gradient check).

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor, bail};
use num_traits::Float;

use super::ops::{contiguous, for_each_chunk, lane_sum};
use crate::model::kernels::{self, Mask, MatMut, MatRef};

/// Self-attention of a fused `[rows · len, 3 · d]` q|k|v matrix (GPT-2's `c_attn` output: per
/// token the queries, keys and values, each `heads × d/heads`): per sequence and head
/// `softmax(scale · q kᵀ) v`, keys after the query masked when `causal`, keys at or past a
/// sequence's length masked when `lengths` is given (one per sequence). The output is the heads'
/// values side by side, `[rows · len, d]`.
///
/// One task per sequence over its heads, each head's q, k and v read in place in the q|k|v rows
/// (in f32 its keys — and in the backward pass its values, queries and output gradient — copied
/// transposed into the task's small `head_dim × len` buffers, so that every product runs on
/// broadcast multiply–adds): none of the `[rows, heads, len, len]` scores or probabilities is
/// ever a tensor (in f32 the forward pass keeps the probabilities for the backward pass, up to
/// `KEPT_PROBABILITIES`; past it, and in f64, the backward pass computes them again from q and k,
/// as flash attention does), and no q/k/v is permuted into a tensor of its own. In f32 the products and
/// the softmax are the engine's.
#[derive(Debug, Clone)]
pub struct Attention {
    /// Heads.
    pub heads: usize,
    /// Tokens per sequence.
    pub len: usize,
    /// Factor on the scores (1/√`head_dim`).
    pub scale: f64,
    /// Mask keys after the query.
    pub causal: bool,
    /// Valid keys per sequence (padding after them).
    pub lengths: Option<Arc<Vec<usize>>>,
}

/// One head of one sequence: its queries, keys and values as `[len, dh]` rows, the keys and values
/// also transposed (`[dh, len]`, for the inner loops to run along the keys).
struct HeadBlocks<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    kt: Vec<T>,
    vt: Vec<T>,
}

impl<T: Float> HeadBlocks<T> {
    fn new(len: usize, dh: usize) -> Self {
        let z = || vec![T::zero(); len * dh];
        Self { q: z(), k: z(), v: z(), kt: z(), vt: z() }
    }

    /// Gathers head `head` of a sequence's `[len, 3d]` rows.
    fn gather(&mut self, seq: &[T], len: usize, d: usize, dh: usize, head: usize) {
        for t in 0..len {
            let row = &seq[t * 3 * d..(t + 1) * 3 * d];
            let at = head * dh;
            self.q[t * dh..(t + 1) * dh].copy_from_slice(&row[at..at + dh]);
            self.k[t * dh..(t + 1) * dh].copy_from_slice(&row[d + at..d + at + dh]);
            self.v[t * dh..(t + 1) * dh].copy_from_slice(&row[2 * d + at..2 * d + at + dh]);
            for c in 0..dh {
                self.kt[c * len + t] = row[d + at + c];
                self.vt[c * len + t] = row[2 * d + at + c];
            }
        }
    }

    /// Query `i`'s probabilities over keys `0..end` into `p` (the rest of `p` zero).
    fn probs(&self, i: usize, end: usize, len: usize, dh: usize, scale: T, p: &mut [T]) {
        p.fill(T::zero());
        let s = &mut p[..end];
        for c in 0..dh {
            let qc = self.q[i * dh + c] * scale;
            for (o, &k) in s.iter_mut().zip(&self.kt[c * len..c * len + end]) {
                *o = *o + qc * k;
            }
        }
        let max = s.iter().fold(T::neg_infinity(), |m, &v| m.max(v));
        let mut sum = T::zero();
        for o in s.iter_mut() {
            *o = (*o - max).exp();
            sum = sum + *o;
        }
        let inv = T::one() / sum;
        for o in s.iter_mut() {
            *o = *o * inv;
        }
    }
}

/// The first `rows` rows (`cols` wide, `stride` apart) of `src` transposed into `buf`
/// (`cols × rows`): a head's keys or values with their dimensions along the rows, so that
/// `q · kᵀ` sums each score over the head's dimensions in order with broadcast fused
/// multiply–adds (the engine's order for self-attention), never a sixteen-lane dot product of a
/// head's few dimensions with its lanes to add up.
fn transpose(buf: &mut [f32], src: &[f32], rows: usize, cols: usize, stride: usize) {
    for (j, row) in src.chunks(stride).take(rows).enumerate() {
        for (c, &v) in row[..cols].iter().enumerate() {
            buf[c * rows + j] = v;
        }
    }
}

/// Most probabilities (`rows × heads × len × len`) an attention keeps for its backward pass
/// (16 MiB; the default run's chunk keeps 64 Ki): past it the backward pass computes them again.
const KEPT_PROBABILITIES: usize = 1 << 22;

/// Queries per block of the causal attention's products.
const QUERY_BLOCK: usize = 16;

/// The attention's blocks of queries `r0..r1` with the keys `0..seen` their products need: with
/// the causal mask, blocks of [`QUERY_BLOCK`] queries that see the keys up to their last query;
/// without it, one block of every query seeing every key.
fn blocks(len: usize, keys: usize, causal: bool) -> Vec<(usize, usize, usize)> {
    if !causal {
        return vec![(0, len, keys)];
    }
    (0..len)
        .step_by(QUERY_BLOCK)
        .map(|r0| (r0, (r0 + QUERY_BLOCK).min(len), (r0 + QUERY_BLOCK).min(len).min(keys)))
        .collect()
}

/// The blocks of keys `c0..c1` with the first query `from` that sees them (the causal mask), or
/// one block of every key seen from the first query.
fn key_blocks(len: usize, keys: usize, causal: bool) -> Vec<(usize, usize, usize)> {
    if !causal {
        return vec![(0, keys, 0)];
    }
    (0..keys).step_by(QUERY_BLOCK).map(|c0| (c0, (c0 + QUERY_BLOCK).min(keys), c0.min(len))).collect()
}

/// `t` (`cols × rows`) transposed into the first `rows` rows (`cols` wide, `stride` apart) of `dst`.
fn scatter_transposed(t: &[f32], dst: &mut [f32], rows: usize, cols: usize, stride: usize) {
    for (j, row) in dst.chunks_mut(stride).take(rows).enumerate() {
        for (c, o) in row[..cols].iter_mut().enumerate() {
            *o = t[c * rows + j];
        }
    }
}

/// `y += a · x`.
fn axpy<T: Float>(y: &mut [T], a: T, x: &[T]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = *o + a * v;
    }
}

impl Attention {
    /// Keys query `q` of sequence `b` may see: `0..end`.
    fn visible(&self, b: usize, q: usize) -> usize {
        let mut end = self.len;
        if self.causal {
            end = end.min(q + 1);
        }
        if let Some(l) = &self.lengths {
            end = end.min(l[b].max(1));
        }
        end
    }

    /// Applies it to contiguous `[rows · len, 3d]` q|k|v.
    pub fn apply(&self, qkv: &Tensor) -> Result<Tensor> {
        qkv.apply_op1(Applied { attention: self.clone(), probs: Arc::default() })
    }

    /// The probabilities the heads attend with, `[rows, heads, len, len]` (no gradient).
    pub fn probabilities(&self, qkv: &Tensor) -> Result<Tensor> {
        fn run<T: Float + Send + Sync>(op: &Attention, x: &[T], d: usize) -> Vec<T> {
            let (len, heads) = (op.len, op.heads);
            let (dh, scale) = (d / heads, T::from(op.scale).unwrap_or_else(T::one));
            let mut out = vec![T::zero(); x.len() / (3 * d) * heads * len];
            for_each_chunk(&mut out, heads * len * len, |b, out| {
                let seq = &x[b * len * 3 * d..(b + 1) * len * 3 * d];
                let mut blocks = HeadBlocks::new(len, dh);
                for (head, out) in out.chunks_mut(len * len).enumerate() {
                    blocks.gather(seq, len, d, dh, head);
                    for (i, row) in out.chunks_mut(len).enumerate() {
                        blocks.probs(i, op.visible(b, i), len, dh, scale, row);
                    }
                }
            });
            out
        }
        let (n, d) = self.check(qkv.layout())?;
        let qkv = qkv.contiguous()?;
        let shape = (n / self.len, self.heads, self.len, self.len);
        match qkv.dtype() {
            DType::F32 => Tensor::from_vec(run(self, &qkv.flatten_all()?.to_vec1::<f32>()?, d), shape, qkv.device()),
            DType::F64 => Tensor::from_vec(run(self, &qkv.flatten_all()?.to_vec1::<f64>()?, d), shape, qkv.device()),
            t => bail!("attention: f32 or f64 only, got {t:?}"),
        }
    }

    /// Tokens and `d` of a q|k|v layout.
    fn check(&self, layout: &Layout) -> Result<(usize, usize)> {
        let dims = layout.dims();
        if dims.len() != 2 || !dims[1].is_multiple_of(3) || self.len == 0 || !dims[0].is_multiple_of(self.len) {
            bail!("attention takes [rows · {}, 3 · d] q|k|v, got {dims:?}", self.len);
        }
        let d = dims[1] / 3;
        if self.heads == 0 || !d.is_multiple_of(self.heads) {
            bail!("{d} wide q|k|v for {} heads", self.heads);
        }
        if let Some(l) = &self.lengths
            && l.len() != dims[0] / self.len
        {
            bail!("{} lengths for {} sequences", l.len(), dims[0] / self.len);
        }
        Ok((dims[0], d))
    }

    /// Keys sequence `b` has: all, or its length (at least one).
    fn keys(&self, b: usize) -> usize {
        self.lengths.as_ref().map_or(self.len, |l| l[b].clamp(1, self.len))
    }

    /// The forward pass in f32 on the engine's kernels, as the engine's attention computes it
    /// (`q · kᵀ · scale` in the fixed order, the masked softmax, `· v`), one task per sequence.
    /// With the causal mask, each block of queries multiplies only the keys up to its last query
    /// ([`blocks`]): the masked scores are never computed, and the probabilities past them (exact
    /// zeros) never multiplied, so the sums are the same bits as over every key.
    /// The probabilities are kept in `probs` when given (`[rows, heads, len, len]`, a sequence's
    /// first `len × keys` of each head's block), for the backward pass to read instead of
    /// computing them again.
    pub(super) fn forward_f32(&self, x: &[f32], d: usize, probs: Option<&mut Vec<f32>>) -> Vec<f32> {
        let (len, heads) = (self.len, self.heads);
        #[allow(clippy::cast_possible_truncation)] // 1/√head_dim
        let (dh, scale) = (d / heads, self.scale as f32);
        let mask = Mask { causal: self.causal, ..Mask::default() };
        let mut out = vec![0f32; x.len() / 3];
        let kept: Vec<&mut [f32]> = match probs {
            Some(probs) => {
                probs.clear();
                probs.resize(x.len() / (3 * d) * heads * len, 0.0);
                probs.chunks_mut(heads * len * len).collect()
            }
            None => Vec::new(),
        };
        let mut pairs: Vec<_> =
            out.chunks_mut(len * d).zip(kept.into_iter().map(Some).chain(std::iter::repeat_with(|| None))).collect();
        for_each_chunk(&mut pairs, 1, |b, pair| {
            let (out, kept) = &mut pair[0];
            let seq = &x[b * len * 3 * d..(b + 1) * len * 3 * d];
            let keys = self.keys(b);
            let (mut kt, mut scratch) = (vec![0f32; dh * keys], Vec::new());
            // The kept block of each head, or one scratch matrix for every head.
            let (probs, stride) = if let Some(kept) = kept {
                (&mut **kept, len * len)
            } else {
                scratch.resize(len * keys, 0.0);
                (&mut scratch[..], 0)
            };
            for (head, at) in (0..heads).map(|h| (h, h * dh)) {
                let p = &mut probs[head * stride..head * stride + len * keys];
                transpose(&mut kt, &seq[d + at..], keys, dh, 3 * d);
                for (r0, r1, seen) in blocks(len, keys, self.causal) {
                    let q = MatRef::rows(&seq[r0 * 3 * d + at..], r1 - r0, dh, 3 * d);
                    let kt = MatRef::rows(&kt, dh, seen, keys);
                    kernels::matmul(MatMut::rows(&mut p[r0 * keys..], r1 - r0, seen, keys), q, kt, scale, false);
                }
                kernels::softmax_rows(p, keys, mask, None);
                for (r0, r1, seen) in blocks(len, keys, self.causal) {
                    let probs = MatRef::rows(&p[r0 * keys..], r1 - r0, seen, keys);
                    let v = MatRef::rows(&seq[2 * d + at..], seen, dh, 3 * d);
                    kernels::matmul(MatMut::rows(&mut out[r0 * d + at..], r1 - r0, dh, d), probs, v, 1.0, false);
                }
            }
        });
        out
    }

    /// [`Attention::backward`] in f32 on the engine's kernels, one task per sequence: per head
    /// `P` again, `dP = dO Vᵀ`, `dS = scale · P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = dS K`,
    /// `dK = dSᵀ Q`, `dV = Pᵀ dO`, each product written in place into q|k|v's gradient. With the
    /// causal mask the products skip the masked blocks as the forward pass does: `dS`'s rows stop
    /// at their query's key, and `dK`, `dV`'s columns start at their key's query.
    /// `probs`: the forward pass's probabilities when it kept them ([`Attention::forward_f32`]),
    /// else they are computed again.
    pub(super) fn backward_f32(&self, x: &[f32], g: &[f32], d: usize, probs: Option<&[f32]>) -> Vec<f32> {
        let (len, heads) = (self.len, self.heads);
        #[allow(clippy::cast_possible_truncation)] // 1/√head_dim
        let (dh, scale) = (d / heads, self.scale as f32);
        let mask = Mask { causal: self.causal, ..Mask::default() };
        let mut dx = vec![0f32; x.len()];
        for_each_chunk(&mut dx, len * 3 * d, |b, dx| {
            let seq = &x[b * len * 3 * d..(b + 1) * len * 3 * d];
            let go = &g[b * len * d..(b + 1) * len * d];
            let keys = self.keys(b);
            let (mut computed, mut ds) = (vec![0f32; len * keys], vec![0f32; len * keys]);
            let (mut kt, mut vt) = (vec![0f32; dh * keys], vec![0f32; dh * keys]);
            let (mut qt, mut dout_t, mut dt) = (vec![0f32; dh * len], vec![0f32; dh * len], vec![0f32; dh * keys]);
            for (head, at) in (0..heads).map(|h| (h, h * dh)) {
                if probs.is_none() {
                    transpose(&mut kt, &seq[d + at..], keys, dh, 3 * d);
                }
                transpose(&mut vt, &seq[2 * d + at..], keys, dh, 3 * d);
                for (r0, r1, seen) in blocks(len, keys, self.causal) {
                    let dout = MatRef::rows(&go[r0 * d + at..], r1 - r0, dh, d);
                    let vt = MatRef::rows(&vt, dh, seen, keys);
                    kernels::matmul(MatMut::rows(&mut ds[r0 * keys..], r1 - r0, seen, keys), dout, vt, 1.0, false);
                    if probs.is_none() {
                        let q = MatRef::rows(&seq[r0 * 3 * d + at..], r1 - r0, dh, 3 * d);
                        let kt = MatRef::rows(&kt, dh, seen, keys);
                        let p = MatMut::rows(&mut computed[r0 * keys..], r1 - r0, seen, keys);
                        kernels::matmul(p, q, kt, scale, false);
                    }
                }
                let p: &[f32] = if let Some(probs) = probs {
                    let at = (b * heads + head) * len * len;
                    &probs[at..at + len * keys]
                } else {
                    kernels::softmax_rows(&mut computed, keys, mask, None);
                    &computed
                };
                for (i, (pr, dr)) in p.chunks(keys).zip(ds.chunks_mut(keys)).enumerate() {
                    let end = mask.visible(i, keys).end;
                    let (pr, (dr, hidden)) = (&pr[..end], dr.split_at_mut(end));
                    let dot = lane_sum(end, |j| pr[j] * dr[j]);
                    for (o, &pv) in dr.iter_mut().zip(pr) {
                        *o = pv * (*o - dot) * scale;
                    }
                    hidden.fill(0.0);
                }
                for (r0, r1, seen) in blocks(len, keys, self.causal) {
                    let dsm = MatRef::rows(&ds[r0 * keys..], r1 - r0, seen, keys);
                    let k = MatRef::rows(&seq[d + at..], seen, dh, 3 * d);
                    kernels::matmul(MatMut::rows(&mut dx[r0 * 3 * d + at..], r1 - r0, dh, 3 * d), dsm, k, 1.0, false);
                }
                // dKᵀ = Qᵀ dS and dVᵀ = dOᵀ P: the head's few dimensions transposed, not the
                // `len × keys` matrices; then written into q|k|v's gradient rows. A block of
                // keys gets nothing from the queries before it.
                transpose(&mut qt, &seq[at..], len, dh, 3 * d);
                transpose(&mut dout_t, &go[at..], len, dh, d);
                for (with, by, into) in [(&qt, &ds[..], d + at), (&dout_t, p, 2 * d + at)] {
                    for (c0, c1, from) in key_blocks(len, keys, self.causal) {
                        let lhs = MatRef::rows(&with[from..], dh, len - from, len);
                        let rhs = MatRef::rows(&by[from * keys + c0..], len - from, c1 - c0, keys);
                        kernels::matmul(MatMut::rows(&mut dt[c0..], dh, c1 - c0, keys), lhs, rhs, 1.0, false);
                    }
                    scatter_transposed(&dt, &mut dx[into..], keys, dh, 3 * d);
                }
            }
        });
        dx
    }

    pub(super) fn forward<T: Float + Send + Sync>(&self, x: &[T], d: usize) -> Vec<T> {
        let (len, heads) = (self.len, self.heads);
        let (dh, scale) = (d / heads, T::from(self.scale).unwrap_or_else(T::one));
        let mut out = vec![T::zero(); x.len() / 3];
        for_each_chunk(&mut out, len * d, |b, out| {
            let seq = &x[b * len * 3 * d..(b + 1) * len * 3 * d];
            let mut blocks = HeadBlocks::new(len, dh);
            let mut p = vec![T::zero(); len];
            for head in 0..heads {
                blocks.gather(seq, len, d, dh, head);
                for i in 0..len {
                    let end = self.visible(b, i);
                    blocks.probs(i, end, len, dh, scale, &mut p);
                    let o = &mut out[i * d + head * dh..i * d + (head + 1) * dh];
                    for (j, &pj) in p[..end].iter().enumerate() {
                        axpy(o, pj, &blocks.v[j * dh..(j + 1) * dh]);
                    }
                }
            }
        });
        out
    }

    /// The gradient of q|k|v from the output's: per head, with `P` computed again,
    /// `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = scale · dS K`,
    /// `dK = scale · dSᵀ Q`.
    pub(super) fn backward<T: Float + Send + Sync>(&self, x: &[T], g: &[T], d: usize) -> Vec<T> {
        let (len, heads) = (self.len, self.heads);
        let (dh, scale) = (d / heads, T::from(self.scale).unwrap_or_else(T::one));
        let mut dx = vec![T::zero(); x.len()];
        for_each_chunk(&mut dx, len * 3 * d, |b, dx| {
            let seq = &x[b * len * 3 * d..(b + 1) * len * 3 * d];
            let go = &g[b * len * d..(b + 1) * len * d];
            let mut blocks = HeadBlocks::new(len, dh);
            let (mut p, mut dp) = (vec![T::zero(); len], vec![T::zero(); len]);
            let (mut dk, mut dv) = (vec![T::zero(); len * dh], vec![T::zero(); len * dh]);
            for head in 0..heads {
                blocks.gather(seq, len, d, dh, head);
                dk.fill(T::zero());
                dv.fill(T::zero());
                let at = head * dh;
                for i in 0..len {
                    let end = self.visible(b, i);
                    blocks.probs(i, end, len, dh, scale, &mut p);
                    let gi = &go[i * d + at..i * d + at + dh];
                    let dpi = &mut dp[..end];
                    dpi.fill(T::zero());
                    for (c, &gc) in gi.iter().enumerate() {
                        axpy(dpi, gc, &blocks.vt[c * len..c * len + end]);
                    }
                    let dot = lane_sum(end, |j| p[j] * dpi[j]);
                    let dq = &mut dx[i * 3 * d + at..i * 3 * d + at + dh];
                    for j in 0..end {
                        axpy(&mut dv[j * dh..(j + 1) * dh], p[j], gi);
                        let ds = p[j] * (dpi[j] - dot) * scale;
                        axpy(dq, ds, &blocks.k[j * dh..(j + 1) * dh]);
                        axpy(&mut dk[j * dh..(j + 1) * dh], ds, &blocks.q[i * dh..(i + 1) * dh]);
                    }
                }
                for t in 0..len {
                    let row = &mut dx[t * 3 * d..(t + 1) * 3 * d];
                    row[d + at..d + at + dh].copy_from_slice(&dk[t * dh..(t + 1) * dh]);
                    row[2 * d + at..2 * d + at + dh].copy_from_slice(&dv[t * dh..(t + 1) * dh]);
                }
            }
        });
        dx
    }
}

/// One application of [`Attention`] in a graph: in f32 its forward pass keeps the probabilities
/// for its backward pass (`[rows, heads, len, len]`: 256 KiB for a chunk of the default run's
/// step, at most [`KEPT_PROBABILITIES`]; dropped with the graph).
struct Applied {
    attention: Attention,
    probs: Arc<Mutex<Vec<f32>>>,
}

impl CustomOp1 for Applied {
    fn name(&self) -> &'static str {
        "fused-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let op = &self.attention;
        let (n, d) = op.check(layout)?;
        let out = match storage {
            CpuStorage::F32(v) => {
                let mut probs = self.probs.lock().map_err(|_| candle_core::Error::Msg("poisoned".into()))?;
                let keep = n * op.heads * op.len <= KEPT_PROBABILITIES;
                CpuStorage::F32(op.forward_f32(contiguous(v, layout)?, d, keep.then_some(&mut *probs)))
            }
            CpuStorage::F64(v) => CpuStorage::F64(op.forward(contiguous(v, layout)?, d)),
            _ => bail!("attention: f32 or f64 only"),
        };
        Ok((out, Shape::from((n, d))))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let backward = AttentionBackward(self.attention.clone(), Arc::clone(&self.probs));
        Ok(Some(arg.apply_op2_no_bwd(grad_res, &backward)?))
    }
}

/// [`Attention`]'s backward pass as an operation of its own, so that it reads q|k|v and the output
/// gradient where they are (no copies out of the tensors), with the forward pass's probabilities.
struct AttentionBackward(Attention, Arc<Mutex<Vec<f32>>>);

impl CustomOp2 for AttentionBackward {
    fn name(&self) -> &'static str {
        "fused-attention-backward"
    }

    fn cpu_fwd(&self, x: &CpuStorage, lx: &Layout, g: &CpuStorage, lg: &Layout) -> Result<(CpuStorage, Shape)> {
        let (n, d) = self.0.check(lx)?;
        if lg.dims() != [n, d] {
            bail!("attention gradient {:?} for {n} tokens × {d}", lg.dims());
        }
        let out = match (x, g) {
            (CpuStorage::F32(x), CpuStorage::F32(g)) => {
                let probs = self.1.lock().map_err(|_| candle_core::Error::Msg("poisoned".into()))?;
                let kept = (probs.len() == n * self.0.heads * self.0.len).then_some(&probs[..]);
                CpuStorage::F32(self.0.backward_f32(contiguous(x, lx)?, contiguous(g, lg)?, d, kept))
            }
            (CpuStorage::F64(x), CpuStorage::F64(g)) => {
                CpuStorage::F64(self.0.backward(contiguous(x, lx)?, contiguous(g, lg)?, d))
            }
            _ => bail!("attention backward: f32 or f64 only"),
        };
        Ok((out, lx.shape().clone()))
    }
}
