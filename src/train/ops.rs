//! The lab's operations with their gradients, where Candle's CPU backend has none (its
//! `softmax_last_dim` and `layer_norm` are forward-only), would chain several allocating ones, or
//! runs its own products: the matrix product on the engine's fixed-order kernels, the attention
//! with its scale and masks, layer norm and cross-entropy. f32 runs on the engine's kernels where
//! there is a product; f64 (the gradient check) runs plain loops, and tests check the two agree.
//! Threads split the work per sequence (attention) or per block of rows (products big enough to be
//! worth it): one fork/join per operation, none for small ones — and none inside [`serially`], where
//! a training step's chunk of sequences runs on one thread (the step forks once, per chunk).

use std::cell::Cell;
use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, bail};
use num_traits::Float;
use rayon::prelude::*;

use crate::model::kernels::{self, MatMut, MatRef};

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
pub(super) fn for_each_chunk<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Send + Sync) {
    if serial() {
        out.chunks_mut(size).enumerate().for_each(|(i, chunk)| f(i, chunk));
    } else {
        out.par_chunks_mut(size).enumerate().for_each(|(i, chunk)| f(i, chunk));
    }
}

/// `Σ f(i)` over `i` in `0..n` in eight interleaved partial sums, added pairwise at the end: the
/// row sums of the norms and the gradients, which one running sum would chain through the adder's
/// latency one term at a time.
#[inline]
pub(super) fn lane_sum<T: Float>(n: usize, f: impl Fn(usize) -> T) -> T {
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

pub(super) fn contiguous<'a, T>(v: &'a [T], layout: &Layout) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("the input must be contiguous"),
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
