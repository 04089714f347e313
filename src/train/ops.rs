//! The lab's operations with their gradients, where Candle's CPU backend has none (its
//! `softmax_last_dim` and `layer_norm` are forward-only), would chain several allocating ones, or
//! runs its own products: the matrix product on the engine's fixed-order kernels, the attention
//! with its scale and masks, layer norm and cross-entropy. f32 runs on the engine's kernels where
//! there is a product; f64 (the gradient check) runs plain loops, and tests check the two agree.
//! Threads split the work per sequence (attention) or per block of rows (products big enough to be
//! worth it): one fork/join per operation, none for small ones — and none inside [`serially`], where
//! a training step's chunk of sequences runs on one thread (the step forks once, per chunk).

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, bail};
use num_traits::Float;
use rayon::prelude::*;

use crate::model::kernels::{self, Mask, MatMut, MatRef};

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

thread_local! {
    /// Set while this thread runs [`serially`].
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the operations it applies on this thread alone: no fork/join inside (a training
/// step's chunk of sequences, one of several running side by side). The results are the same bits
/// as with threads: every operation's split is along rows whose values do not depend on it.
pub fn serially<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Whether this thread's operations run without forking ([`serially`]).
fn serial() -> bool {
    SERIAL.with(Cell::get)
}

/// `f(index, chunk)` over the `size`-long chunks of `out`: on rayon's threads, or in order on this
/// one inside [`serially`].
fn for_each_chunk<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Send + Sync) {
    if serial() {
        out.chunks_mut(size).enumerate().for_each(|(i, chunk)| f(i, chunk));
    } else {
        out.par_chunks_mut(size).enumerate().for_each(|(i, chunk)| f(i, chunk));
    }
}

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
/// ever a tensor (the backward pass computes the probabilities again from q and k, as flash
/// attention does), and no q/k/v is permuted into a tensor of its own. In f32 the products and
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

/// `Σ f(i)` over `i` in `0..n` in eight interleaved partial sums, added pairwise at the end: the
/// row sums of the norms and the gradients, which one running sum would chain through the adder's
/// latency one term at a time.
#[inline]
fn lane_sum<T: Float>(n: usize, f: impl Fn(usize) -> T) -> T {
    let mut acc = [T::zero(); 8];
    let full = n / 8 * 8;
    for i in (0..full).step_by(8) {
        for (lane, a) in acc.iter_mut().enumerate() {
            *a = *a + f(i + lane);
        }
    }
    for (a, i) in acc.iter_mut().zip(full..n) {
        *a = *a + f(i);
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
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
    fn forward_f32(&self, x: &[f32], d: usize, probs: Option<&mut Vec<f32>>) -> Vec<f32> {
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
    fn backward_f32(&self, x: &[f32], g: &[f32], d: usize, probs: Option<&[f32]>) -> Vec<f32> {
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

    fn forward<T: Float + Send + Sync>(&self, x: &[T], d: usize) -> Vec<T> {
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
    fn backward<T: Float + Send + Sync>(&self, x: &[T], g: &[T], d: usize) -> Vec<T> {
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

fn contiguous<'a, T>(v: &'a [T], layout: &Layout) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("the input must be contiguous"),
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

/// `x + b` for rows `x` `[…, k]` and a bias `b` `[k]`. Its backward pass sums the gradient's rows
/// in one sweep along memory (Candle's broadcast add reduces a column at a time).
#[derive(Debug, Clone, Copy)]
pub struct AddBias;

impl AddBias {
    /// Applies it: `x` contiguous `[…, k]`, `b` `[k]`.
    pub fn apply(self, x: &Tensor, b: &Tensor) -> Result<Tensor> {
        x.apply_op2(b, self)
    }
}

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add-bias"
    }

    fn cpu_fwd(&self, x: &CpuStorage, lx: &Layout, b: &CpuStorage, lb: &Layout) -> Result<(CpuStorage, Shape)> {
        fn run<T: Float + Send + Sync>(x: &[T], b: &[T]) -> Vec<T> {
            let mut out = x.to_vec();
            for_each_chunk(&mut out, b.len() * ROWS_PER_TASK, |_, rows| {
                for row in rows.chunks_mut(b.len()) {
                    row.iter_mut().zip(b).for_each(|(o, &v)| *o = *o + v);
                }
            });
            out
        }
        let k = *lx.dims().last().unwrap_or(&0);
        if lb.dims() != [k] {
            bail!("bias {:?} for rows of {k}", lb.dims());
        }
        let out = match (x, b) {
            (CpuStorage::F32(x), CpuStorage::F32(b)) => CpuStorage::F32(run(contiguous(x, lx)?, contiguous(b, lb)?)),
            (CpuStorage::F64(x), CpuStorage::F64(b)) => CpuStorage::F64(run(contiguous(x, lx)?, contiguous(b, lb)?)),
            _ => bail!("bias: f32 or f64 only, the same for both"),
        };
        Ok((out, lx.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, b: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let db = grad.apply_op1_no_bwd(&RowSum(b.dim(0)?))?;
        Ok((Some(grad.clone()), Some(db)))
    }
}

/// The sum of the rows of `[…, k]`, `[k]`.
struct RowSum(usize);

impl CustomOp1 for RowSum {
    fn name(&self) -> &'static str {
        "row-sum"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        fn run<T: Float + Send + Sync>(x: &[T], k: usize) -> Vec<T> {
            let mut sum = vec![T::zero(); k];
            for row in x.chunks(k) {
                sum.iter_mut().zip(row).for_each(|(s, &v)| *s = *s + v);
            }
            sum
        }
        let k = self.0;
        if layout.dims().last() != Some(&k) {
            bail!("row sum of {k} over {:?}", layout.dims());
        }
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(run(contiguous(v, layout)?, k)),
            CpuStorage::F64(v) => CpuStorage::F64(run(contiguous(v, layout)?, k)),
            _ => bail!("row sum: f32 or f64 only"),
        };
        Ok((out, Shape::from(k)))
    }
}

/// Below this many multiply–adds a product runs on the calling thread (a fork/join costs more
/// than it saves).
const PARALLEL_MULADDS: usize = 1 << 18;

/// Tasks a product of `m` rows of `k · n` multiply–adds is split into: one per thread when it is
/// large enough, else one.
fn row_tasks(m: usize, k: usize, n: usize) -> usize {
    if m * k * n < PARALLEL_MULADDS || serial() { 1 } else { rayon::current_num_threads().clamp(1, m.max(1)) }
}

/// The matrix product `op(a) · op(b)` of two contiguous 2-D tensors, `op` transposing when asked
/// (`a_t`: `a` is stored `k × m`; `b_t`: `b` is stored `n × k`), with its gradient. In f32 it runs
/// on the engine's fixed-order products ([`kernels::matmul`], the forward pass's, so a row of it is
/// the same bits however the rows are split between threads), the output's rows split into one
/// task per thread; in f64 (the gradient check) a plain triple loop.
#[derive(Debug, Clone, Copy)]
pub struct Product {
    /// Transpose `a`.
    pub a_t: bool,
    /// Transpose `b`.
    pub b_t: bool,
}

impl Product {
    /// `a · b`.
    pub const PLAIN: Self = Self { a_t: false, b_t: false };

    /// Applies it.
    pub fn apply(self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.apply_op2(b, self)
    }

    /// `(m, k, n)` of the product of these layouts.
    fn shape(self, la: &Layout, lb: &Layout) -> Result<(usize, usize, usize)> {
        let (da, db) = (la.dims(), lb.dims());
        if da.len() != 2 || db.len() != 2 {
            bail!("product of {da:?} and {db:?}: two matrices");
        }
        let (m, k) = if self.a_t { (da[1], da[0]) } else { (da[0], da[1]) };
        let (k2, n) = if self.b_t { (db[1], db[0]) } else { (db[0], db[1]) };
        if k != k2 {
            bail!("product of {da:?} and {db:?} (transposed: {}, {}): inner sizes differ", self.a_t, self.b_t);
        }
        Ok((m, k, n))
    }

    fn run_f32(self, a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        if m == 0 || n == 0 {
            return out;
        }
        // A transposed `b` (a weight in the backward pass, `k · n` values against `m · k · n`
        // multiply–adds) is copied into rows once: the product then runs on broadcast fused
        // multiply–adds over rows of `b`, not on sixteen-lane dot products with their lanes to add up.
        let packed: Vec<f32>;
        let rhs = if self.b_t {
            packed = MatRef::rows(b, n, k, k).t().packed();
            MatRef::rows(&packed, k, n, n)
        } else {
            MatRef::rows(b, k, n, n)
        };
        let tasks = row_tasks(m, k, n);
        let per = m.div_ceil(tasks);
        let run = |(t, dst): (usize, &mut [f32])| {
            let (i0, rows) = (t * per, dst.len() / n);
            let lhs =
                if self.a_t { MatRef::new(&a[i0..], rows, k, 1, m) } else { MatRef::rows(&a[i0 * k..], rows, k, k) };
            kernels::matmul(MatMut::rows(dst, rows, n, n), lhs, rhs, 1.0, false);
        };
        if tasks == 1 {
            run((0, &mut out));
        } else {
            for_each_chunk(&mut out, per * n, |t, dst| run((t, dst)));
        }
        out
    }

    fn run_f64(self, a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
        let at = |i: usize, p: usize| if self.a_t { a[p * m + i] } else { a[i * k + p] };
        let bt = |p: usize, j: usize| if self.b_t { b[j * k + p] } else { b[p * n + j] };
        (0..m * n).map(|e| (0..k).map(|p| at(e / n, p) * bt(p, e % n)).sum()).collect()
    }
}

impl CustomOp2 for Product {
    fn name(&self) -> &'static str {
        "product"
    }

    fn cpu_fwd(&self, a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, k, n) = self.shape(la, lb)?;
        let out = match (a, b) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                CpuStorage::F32(self.run_f32(contiguous(a, la)?, contiguous(b, lb)?, (m, k, n)))
            }
            (CpuStorage::F64(a), CpuStorage::F64(b)) => {
                CpuStorage::F64(self.run_f64(contiguous(a, la)?, contiguous(b, lb)?, (m, k, n)))
            }
            _ => bail!("product: f32 or f64 only, the same for both"),
        };
        Ok((out, Shape::from((m, n))))
    }

    /// With `A = op(a)`, `B = op(b)`, `G` the output's gradient: `dA = G Bᵀ`, `dB = Aᵀ G`,
    /// transposed back where `a` or `b` is stored transposed.
    fn bwd(&self, a: &Tensor, b: &Tensor, _res: &Tensor, g: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let g = g.contiguous()?;
        let da = if self.a_t {
            b.apply_op2_no_bwd(&g, &Self { a_t: self.b_t, b_t: true })?
        } else {
            g.apply_op2_no_bwd(b, &Self { a_t: false, b_t: !self.b_t })?
        };
        let db = if self.b_t {
            g.apply_op2_no_bwd(a, &Self { a_t: true, b_t: self.a_t })?
        } else {
            a.apply_op2_no_bwd(&g, &Self { a_t: !self.a_t, b_t: false })?
        };
        Ok((Some(da), Some(db)))
    }
}

/// The mean cross-entropy of rows of logits `[rows, classes]` against their targets (one per row;
/// [`CrossEntropy::SKIP`] leaves a row out of the mean), with its gradient
/// `(softmax − one-hot) / counted` on the counted rows: one pass over the logits instead of
/// log-softmax, gather and mean, none of them a tensor.
#[derive(Debug, Clone)]
pub struct CrossEntropy {
    /// Per row, its class or [`CrossEntropy::SKIP`].
    pub targets: Arc<Vec<u32>>,
    /// The mean's denominator when these rows are part of a larger batch (the batch's counted
    /// rows, so that the parts' losses and gradients add up to the batch's); `None`: these rows'.
    pub mean_over: Option<usize>,
}

impl CrossEntropy {
    /// A row not counted.
    pub const SKIP: u32 = u32::MAX;

    /// Applies it to `[rows, classes]` logits: a scalar.
    pub fn apply(&self, logits: &Tensor) -> Result<Tensor> {
        logits.apply_op1(self.clone())
    }

    fn check(&self, layout: &Layout) -> Result<(usize, usize)> {
        let dims = layout.dims();
        if dims.len() != 2 || dims[0] != self.targets.len() {
            bail!("cross-entropy of {dims:?} logits against {} targets", self.targets.len());
        }
        if let Some(&t) = self.targets.iter().find(|&&t| t != Self::SKIP && t as usize >= dims[1]) {
            bail!("target class {t} of {}", dims[1]);
        }
        let counted = self.targets.iter().filter(|&&t| t != Self::SKIP).count();
        match self.mean_over {
            None if counted == 0 => bail!("cross-entropy of no targets"),
            None => Ok((dims[1], counted)),
            Some(n) if n == 0 || n < counted => bail!("cross-entropy of {counted} targets as a part of {n}"),
            Some(n) => Ok((dims[1], n)),
        }
    }

    /// Per row, its maximum and `ln Σ exp(x − max)`.
    fn row_stats<T: Float>(row: &[T]) -> (T, T) {
        let max = row.iter().fold(T::neg_infinity(), |m, &v| m.max(v));
        let sum = row.iter().fold(T::zero(), |s, &v| s + (v - max).exp());
        (max, sum.ln())
    }

    fn forward<T: Float + Send + Sync>(&self, x: &[T], classes: usize, counted: usize) -> T {
        let mut per_row = vec![T::zero(); self.targets.len()];
        for_each_chunk(&mut per_row, ROWS_PER_TASK, |c, out| {
            for (r, o) in out.iter_mut().enumerate() {
                let r = c * ROWS_PER_TASK + r;
                let t = self.targets[r];
                if t != Self::SKIP {
                    let row = &x[r * classes..(r + 1) * classes];
                    let (max, log_sum) = Self::row_stats(row);
                    *o = row[t as usize] - max - log_sum;
                }
            }
        });
        -per_row.iter().fold(T::zero(), |s, &v| s + v) / T::from(counted).unwrap_or_else(T::one)
    }

    fn backward<T: Float + Send + Sync>(&self, x: &[T], g: T, classes: usize, counted: usize) -> Vec<T> {
        let scale = g / T::from(counted).unwrap_or_else(T::one);
        let mut dx = vec![T::zero(); x.len()];
        for_each_chunk(&mut dx, ROWS_PER_TASK * classes, |c, out| {
            for (r, o) in out.chunks_mut(classes).enumerate() {
                let r = c * ROWS_PER_TASK + r;
                let t = self.targets[r];
                if t != Self::SKIP {
                    let row = &x[r * classes..(r + 1) * classes];
                    let (max, log_sum) = Self::row_stats(row);
                    for (o, &v) in o.iter_mut().zip(row) {
                        *o = (v - max - log_sum).exp() * scale;
                    }
                    o[t as usize] = o[t as usize] - scale;
                }
            }
        });
        dx
    }
}

impl CustomOp1 for CrossEntropy {
    fn name(&self) -> &'static str {
        "cross-entropy"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (classes, counted) = self.check(layout)?;
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(vec![self.forward(contiguous(v, layout)?, classes, counted)]),
            CpuStorage::F64(v) => CpuStorage::F64(vec![self.forward(contiguous(v, layout)?, classes, counted)]),
            _ => bail!("cross-entropy: f32 or f64 only"),
        };
        Ok((out, Shape::from(())))
    }

    fn bwd(&self, logits: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad.broadcast_as(()).map(|g| g.contiguous())??;
        Ok(Some(logits.apply_op2_no_bwd(&grad, &CrossEntropyBackward(self.clone()))?))
    }
}

/// [`CrossEntropy`]'s gradient, reading the logits where they are.
struct CrossEntropyBackward(CrossEntropy);

impl CustomOp2 for CrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cross-entropy-backward"
    }

    fn cpu_fwd(&self, x: &CpuStorage, lx: &Layout, g: &CpuStorage, lg: &Layout) -> Result<(CpuStorage, Shape)> {
        let (classes, counted) = self.0.check(lx)?;
        let out = match (x, g) {
            (CpuStorage::F32(x), CpuStorage::F32(g)) => {
                CpuStorage::F32(self.0.backward(contiguous(x, lx)?, contiguous(g, lg)?[0], classes, counted))
            }
            (CpuStorage::F64(x), CpuStorage::F64(g)) => {
                CpuStorage::F64(self.0.backward(contiguous(x, lx)?, contiguous(g, lg)?[0], classes, counted))
            }
            _ => bail!("cross-entropy backward: f32 or f64 only"),
        };
        Ok((out, lx.shape().clone()))
    }
}

/// Layer norm over the last dimension: `(x − μ) / √(σ² + eps) · w + b`.
#[derive(Debug, Clone, Copy)]
pub struct LayerNorm {
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// Applies it: `x` contiguous `[…, d]`, `w` and `b` `[d]`.
    pub fn apply(self, x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
        x.apply_op3(w, b, self)
    }

    /// Normalised rows `x̂` and `1/σ` per row.
    fn normalise<T: Float + Send + Sync>(self, x: &[T], d: usize) -> (Vec<T>, Vec<T>) {
        let rows = x.len() / d;
        let mut xhat = vec![T::zero(); x.len()];
        let n = T::from(d).unwrap_or_else(T::one);
        let eps = T::from(self.eps).unwrap_or_else(T::zero);
        // Each row's mean and 1/σ, then the rows normalised with them.
        let mut stats = vec![(T::zero(), T::zero()); rows];
        for_each_chunk(&mut stats, ROWS_PER_TASK, |c, out| {
            for (r, (mean, inv)) in out.iter_mut().enumerate() {
                let r = c * ROWS_PER_TASK + r;
                let row = &x[r * d..(r + 1) * d];
                *mean = lane_sum(d, |i| row[i]) / n;
                let mean = *mean;
                let var = lane_sum(d, |i| (row[i] - mean) * (row[i] - mean)) / n;
                *inv = T::one() / (var + eps).sqrt();
            }
        });
        for_each_chunk(&mut xhat, d, |r, out| {
            let (mean, inv) = stats[r];
            for (o, &v) in out.iter_mut().zip(&x[r * d..(r + 1) * d]) {
                *o = (v - mean) * inv;
            }
        });
        let inv = stats.into_iter().map(|(_, inv)| inv).collect();
        (xhat, inv)
    }

    fn forward<T: Float + Send + Sync>(self, x: &[T], w: &[T], b: &[T]) -> Vec<T> {
        let d = w.len();
        let (mut y, _) = self.normalise(x, d);
        for_each_chunk(&mut y, d, |_, row| {
            for ((o, &wv), &bv) in row.iter_mut().zip(w).zip(b) {
                *o = *o * wv + bv;
            }
        });
        y
    }

    fn backward<T: Float + Send + Sync>(self, x: &[T], w: &[T], g: &[T]) -> (Vec<T>, Vec<T>, Vec<T>) {
        let d = w.len();
        let (xhat, inv) = self.normalise(x, d);
        let n = T::from(d).unwrap_or_else(T::one);
        let mut dx = vec![T::zero(); x.len()];
        for_each_chunk(&mut dx, d, |r, out| {
            let (xh, gr) = (&xhat[r * d..(r + 1) * d], &g[r * d..(r + 1) * d]);
            let m1 = lane_sum(d, |i| gr[i] * w[i]) / n;
            let m2 = lane_sum(d, |i| gr[i] * w[i] * xh[i]) / n;
            for i in 0..d {
                out[i] = inv[r] * (gr[i] * w[i] - m1 - xh[i] * m2);
            }
        });
        let mut dw = vec![T::zero(); d];
        let mut db = vec![T::zero(); d];
        for (xh, gr) in xhat.chunks(d).zip(g.chunks(d)) {
            for i in 0..d {
                dw[i] = dw[i] + gr[i] * xh[i];
                db[i] = db[i] + gr[i];
            }
        }
        (dx, dw, db)
    }
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm-with-gradient"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        lx: &Layout,
        w: &CpuStorage,
        lw: &Layout,
        b: &CpuStorage,
        lb: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let d = *lx.dims().last().unwrap_or(&0);
        if lw.dims() != [d] || lb.dims() != [d] {
            bail!("layer norm of width {d} with weight {:?} and bias {:?}", lw.dims(), lb.dims());
        }
        let out = match (x, w, b) {
            (CpuStorage::F32(x), CpuStorage::F32(w), CpuStorage::F32(b)) => {
                CpuStorage::F32(self.forward(contiguous(x, lx)?, contiguous(w, lw)?, contiguous(b, lb)?))
            }
            (CpuStorage::F64(x), CpuStorage::F64(w), CpuStorage::F64(b)) => {
                CpuStorage::F64(self.forward(contiguous(x, lx)?, contiguous(w, lw)?, contiguous(b, lb)?))
            }
            _ => bail!("layer norm: unsupported or mixed dtypes"),
        };
        Ok((out, lx.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = w.dim(0)?;
        let (dev, shape) = (x.device(), x.shape());
        macro_rules! run {
            ($t:ty) => {{
                let (dx, dw, db) = self.backward(
                    &x.flatten_all()?.to_vec1::<$t>()?,
                    &w.to_vec1::<$t>()?,
                    &grad.flatten_all()?.to_vec1::<$t>()?,
                );
                (Tensor::from_vec(dx, shape, dev)?, Tensor::from_vec(dw, d, dev)?, Tensor::from_vec(db, d, dev)?)
            }};
        }
        let (dx, dw, db) = match x.dtype() {
            DType::F32 => run!(f32),
            DType::F64 => run!(f64),
            t => bail!("layer norm: unsupported dtype {t:?}"),
        };
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
