//! Two fused operations with their gradients, where Candle's CPU backend has none (its
//! `softmax_last_dim` and `layer_norm` are forward-only) or would chain five allocating ones:
//! the attention softmax with its scale and masks, and layer norm. f32 and f64 (the gradient check
//! runs in f64).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor, bail};
use num_traits::Float;
use rayon::prelude::*;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// `softmax(scale · s)` over the last dimension of scores `[batch, heads, queries, keys]`, keys
/// after the query masked when `causal`, keys at or past a sequence's length masked when
/// `lengths` is given (one per batch row).
#[derive(Debug, Clone)]
pub struct AttentionSoftmax {
    /// Factor on the scores.
    pub scale: f64,
    /// Mask keys after the query.
    pub causal: bool,
    /// Valid keys per sequence (padding after them).
    pub lengths: Option<Arc<Vec<usize>>>,
}

impl AttentionSoftmax {
    /// Keys query `q` of sequence `b` may see: `0..end`.
    fn visible(&self, b: usize, q: usize, keys: usize) -> usize {
        let mut end = keys;
        if self.causal {
            end = end.min(q + 1);
        }
        if let Some(l) = &self.lengths {
            end = end.min(l[b].max(1));
        }
        end
    }

    /// Applies it to contiguous scores.
    pub fn apply(&self, scores: &Tensor) -> Result<Tensor> {
        scores.apply_op1(self.clone())
    }

    fn forward<T: Float + Send + Sync>(&self, src: &[T], dims: &[usize]) -> Vec<T> {
        let (heads, queries, keys) = (dims[1], dims[2], dims[3]);
        let mut out = vec![T::zero(); src.len()];
        let scale = T::from(self.scale).unwrap_or_else(T::one);
        out.par_chunks_mut(keys * ROWS_PER_TASK).enumerate().for_each(|(task, chunk)| {
            for (i, row) in chunk.chunks_mut(keys).enumerate() {
                let r = task * ROWS_PER_TASK + i;
                let (b, q) = (r / (heads * queries), r % queries);
                let end = self.visible(b, q, keys);
                let s = &src[r * keys..r * keys + end];
                let max = s.iter().fold(T::neg_infinity(), |m, &v| m.max(v * scale));
                let mut sum = T::zero();
                for (o, &v) in row[..end].iter_mut().zip(s) {
                    *o = (v * scale - max).exp();
                    sum = sum + *o;
                }
                let inv = T::one() / sum;
                row[..end].iter_mut().for_each(|o| *o = *o * inv);
            }
        });
        out
    }
}

fn contiguous<'a, T>(v: &'a [T], layout: &Layout) -> Result<&'a [T]> {
    match layout.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("the input must be contiguous"),
    }
}

impl CustomOp1 for AttentionSoftmax {
    fn name(&self) -> &'static str {
        "attention-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let dims = layout.dims();
        if dims.len() != 4 {
            bail!("attention scores must be [batch, heads, queries, keys], got {dims:?}");
        }
        if let Some(l) = &self.lengths
            && l.len() != dims[0]
        {
            bail!("{} lengths for {} sequences", l.len(), dims[0]);
        }
        let out = match storage {
            CpuStorage::F32(v) => CpuStorage::F32(self.forward(contiguous(v, layout)?, dims)),
            CpuStorage::F64(v) => CpuStorage::F64(self.forward(contiguous(v, layout)?, dims)),
            _ => bail!("attention softmax: f32 or f64 only"),
        };
        Ok((out, layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        fn run<T: Float + Send + Sync>(y: &[T], g: &[T], keys: usize, scale: T) -> Vec<T> {
            let mut out = vec![T::zero(); y.len()];
            out.par_chunks_mut(keys * ROWS_PER_TASK).enumerate().for_each(|(task, chunk)| {
                let base = task * ROWS_PER_TASK * keys;
                for (i, row) in chunk.chunks_mut(keys).enumerate() {
                    let at = base + i * keys;
                    let (yr, gr) = (&y[at..at + keys], &g[at..at + keys]);
                    let dot = yr.iter().zip(gr).fold(T::zero(), |s, (&a, &b)| s + a * b);
                    for ((o, &yv), &gv) in row.iter_mut().zip(yr).zip(gr) {
                        *o = scale * yv * (gv - dot);
                    }
                }
            });
            out
        }
        // d s = scale · y ⊙ (g − Σ g ⊙ y), row by row (masked entries have y = 0).
        let y = res.contiguous()?;
        let g = grad_res.contiguous()?;
        let keys = y.dim(3)?;
        let grad = match y.dtype() {
            DType::F32 => {
                let v = run(
                    &y.flatten_all()?.to_vec1::<f32>()?,
                    &g.flatten_all()?.to_vec1::<f32>()?,
                    keys,
                    self.scale as f32,
                );
                Tensor::from_vec(v, y.shape(), y.device())?
            }
            DType::F64 => {
                let v = run(&y.flatten_all()?.to_vec1::<f64>()?, &g.flatten_all()?.to_vec1::<f64>()?, keys, self.scale);
                Tensor::from_vec(v, y.shape(), y.device())?
            }
            d => bail!("attention softmax: unsupported dtype {d:?}"),
        };
        Ok(Some(grad))
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
        let mut inv = vec![T::zero(); rows];
        let n = T::from(d).unwrap_or_else(T::one);
        let eps = T::from(self.eps).unwrap_or_else(T::zero);
        xhat.par_chunks_mut(d).zip(inv.par_iter_mut()).enumerate().for_each(|(r, (out, inv))| {
            let row = &x[r * d..(r + 1) * d];
            let mean = row.iter().fold(T::zero(), |s, &v| s + v) / n;
            let var = row.iter().fold(T::zero(), |s, &v| s + (v - mean) * (v - mean)) / n;
            *inv = T::one() / (var + eps).sqrt();
            for (o, &v) in out.iter_mut().zip(row) {
                *o = (v - mean) * *inv;
            }
        });
        (xhat, inv)
    }

    fn forward<T: Float + Send + Sync>(self, x: &[T], w: &[T], b: &[T]) -> Vec<T> {
        let d = w.len();
        let (mut y, _) = self.normalise(x, d);
        y.par_chunks_mut(d).for_each(|row| {
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
        dx.par_chunks_mut(d).enumerate().for_each(|(r, out)| {
            let (xh, gr) = (&xhat[r * d..(r + 1) * d], &g[r * d..(r + 1) * d]);
            let (mut m1, mut m2) = (T::zero(), T::zero());
            for i in 0..d {
                let dxh = gr[i] * w[i];
                m1 = m1 + dxh;
                m2 = m2 + dxh * xh[i];
            }
            let (m1, m2) = (m1 / n, m2 / n);
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
#[allow(clippy::float_cmp)] // masked probabilities are exactly 0
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Both operations' gradients against central differences, in f64.
    #[test]
    fn gradients_match_finite_differences() {
        let dev = Device::Cpu;
        let s = Var::from_tensor(&Tensor::randn(0f64, 1.0, (2, 2, 3, 3), &dev).unwrap()).unwrap();
        let w = Tensor::randn(0f64, 1.0, (2, 2, 3, 3), &dev).unwrap();
        let op = AttentionSoftmax { scale: 0.7, causal: true, lengths: Some(Arc::new(vec![3, 2])) };
        let loss = |s: &Tensor| op.apply(s).unwrap().mul(&w).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
        let grads = op.apply(s.as_tensor()).unwrap().mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
        let g = grads.get(s.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let base = s.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        for i in 0..base.len() {
            let at = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                loss(&Tensor::from_vec(v, (2, 2, 3, 3), &dev).unwrap())
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            assert!((numeric - g[i]).abs() < 1e-6, "softmax grad {i}: {numeric} vs {}", g[i]);
        }
        // Masked keys get exactly zero probability.
        let p = op.apply(s.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        assert_eq!(p[1], 0.0); // sequence 0, query 0, key 1: after the query
        assert_eq!(p[4 * 9 - 1], 0.0); // sequence 1, key 2: padding

        let x = Var::from_tensor(&Tensor::randn(0f64, 1.0, (3, 5), &dev).unwrap()).unwrap();
        let gamma = Var::from_tensor(&Tensor::randn(1f64, 0.3, 5, &dev).unwrap()).unwrap();
        let beta = Var::from_tensor(&Tensor::randn(0f64, 0.3, 5, &dev).unwrap()).unwrap();
        let wt = Tensor::randn(0f64, 1.0, (3, 5), &dev).unwrap();
        let ln = LayerNorm { eps: 1e-5 };
        let f = |x: &Tensor, g: &Tensor, b: &Tensor| {
            ln.apply(x, g, b).unwrap().mul(&wt).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap()
        };
        let grads = ln.apply(&x, &gamma, &beta).unwrap().mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
        for (k, var) in [&x, &gamma, &beta].into_iter().enumerate() {
            let g = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let base = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
            for i in 0..base.len() {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[i] += delta;
                    let t = Tensor::from_vec(v, var.as_tensor().shape(), &dev).unwrap();
                    match k {
                        0 => f(&t, &gamma, &beta),
                        1 => f(&x, &t, &beta),
                        _ => f(&x, &gamma, &t),
                    }
                };
                let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
                assert!((numeric - g[i]).abs() < 1e-6, "layer norm grad {k}/{i}: {numeric} vs {}", g[i]);
            }
        }
    }
}
