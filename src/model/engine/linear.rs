//! Linear products: `nn.Linear`, its weight held row-major as the checkpoint stores it.

use rayon::prelude::*;

use super::error::Result;
use super::weights::{PANEL, Values, Weights};
use crate::model::kernels::{self, MatMut, MatRef, matmul};

/// `nn.Linear`: `x · Wᵀ + b`. `W` (`out × in`) is held row-major, in the precision it is kept in;
/// the product runs over panels of [`PANEL`] output features in parallel, each panel's rows
/// widened to f32 (16-bit, quantised) into a buffer of the thread's — the same rows in the same
/// layout whatever the storage, so the products are bit for bit those of f32 weights — and
/// multiplied through a transposed view (`x · panelᵀ`: dot products that read each weight row in
/// order, the same for one row of `x` or many). For a few rows of `x`, GGUF blocks are widened in
/// registers as they are multiplied instead ([`kernels::block_product`], the same sums).
#[derive(Debug, Clone)]
pub(super) struct Linear {
    /// The weight, row-major `out × in`: f32, 16-bit, or a GGUF matrix's blocks.
    weight: Values,
    bias: Vec<f32>,
    in_dim: usize,
}

thread_local! {
    /// One widened 16-bit or quantised panel per thread.
    static WIDE_PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Rows of `x` up to which a 16-bit or quantised panel is widened [`FEW_COLUMNS`] weight rows at a
/// time rather than whole.
const FEW_ROWS: usize = 4;

/// Weight rows widened at a time for a product of up to [`FEW_ROWS`] rows.
const FEW_COLUMNS: usize = 8;

impl Linear {
    /// From a row-major `out × in` weight and an `out` bias.
    pub(super) fn new(weight: &[f32], bias: Vec<f32>, in_dim: usize) -> Self {
        Self { weight: Values::F32(weight.to_vec()), bias, in_dim }
    }

    /// From a row-major `out × in` weight (in the precision it is kept in) and an `out` bias.
    pub(super) fn from_values(weight: Values, bias: Vec<f32>, in_dim: usize) -> Self {
        Self { weight, bias, in_dim }
    }

    /// `{name}.weight` (`out × in`) and `{name}.bias` (zeros when `bias` is false).
    pub(super) fn load(w: &mut Weights, name: &str, in_dim: usize, out_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.take_values(&format!("{name}.weight"), &[out_dim, in_dim])?;
        let bias = if bias {
            w.take(&format!("{name}.bias"), &[out_dim])?
        } else if w.planning() {
            Vec::new() // (a plan allocates nothing of a weight's size)
        } else {
            vec![0.0; out_dim]
        };
        Ok(Self::from_values(weight, bias, in_dim))
    }

    /// `{name}.weight` and its bias when the checkpoint has them (a DeBERTa `pos_q`); None
    /// without the weight, zeros without the bias.
    pub(super) fn load_optional(w: &mut Weights, name: &str, in_dim: usize, out_dim: usize) -> Result<Option<Self>> {
        let Some(weight) = w.take_optional_values(&format!("{name}.weight"), &[out_dim, in_dim])? else {
            return Ok(None);
        };
        let bias = w.take_optional(&format!("{name}.bias"), &[out_dim])?.unwrap_or_else(|| vec![0.0; out_dim]);
        Ok(Some(Self::from_values(weight, bias, in_dim)))
    }

    /// Bytes its weights take as held.
    pub(super) fn weight_bytes(&self) -> usize {
        self.weight.bytes()
    }

    /// Several linear layers on the same input as one (their outputs side by side), each
    /// `(name, out_dim)`; zero biases when `bias` is false.
    pub(super) fn fused(w: &mut Weights, parts: &[(String, usize)], in_dim: usize, bias: bool) -> Result<Self> {
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
        Ok(Self::from_values(Values::concat(weight), biases, in_dim))
    }

    pub(super) fn out_dim(&self) -> usize {
        self.bias.len()
    }

    /// `out = x · Wᵀ + b (+ residual)` for the rows of `x`. Each panel's product goes to its own
    /// block of `scratch`; one pass then adds the bias (and residual) while assembling the rows.
    pub(super) fn forward_into(&self, x: &[f32], residual: Option<&[f32]>, scratch: &mut [f32], out: &mut [f32]) {
        let (in_dim, out_dim) = (self.in_dim, self.out_dim());
        let rows = x.len() / in_dim.max(1);
        if rows == 0 || in_dim == 0 {
            kernels::add_panels(&[], PANEL, &self.bias, residual, out);
            return;
        }
        let scratch = &mut scratch[..rows * out_dim];
        scratch.par_chunks_mut(rows * PANEL).enumerate().for_each(|(i, dst)| {
            self.panel_product(i, x, 0..in_dim, dst);
        });
        kernels::add_panels(scratch, PANEL, &self.bias, residual, out);
    }

    /// Panel `panel`'s product over input columns `columns` into `dst` (`rows × width`).
    fn panel_product(&self, panel: usize, x: &[f32], columns: std::ops::Range<usize>, dst: &mut [f32]) {
        let in_dim = self.in_dim;
        let rows = x.len() / in_dim;
        let width = dst.len() / rows;
        let first = panel * PANEL;
        let part = columns.len();
        let product = |w: &[f32], dst: &mut [f32]| {
            let x = MatRef::rows(&x[columns.start..], rows, part, in_dim);
            let w = MatRef::rows(&w[columns.start..], width, part, in_dim).t();
            matmul(MatMut::rows(dst, rows, width, width), x, w, 1.0, false);
        };
        if let Values::F32(w) = &self.weight {
            product(&w[first * in_dim..(first + width) * in_dim], dst);
        } else if let Values::Quant(q) = &self.weight
            && rows <= kernels::BLOCK_ROWS
            && part == in_dim
            && let Some((kind, blocks)) = q.part_rows(first..first + width)
            && kernels::block_product(
                kind,
                MatMut::rows(dst, rows, width, width),
                MatRef::rows(x, rows, in_dim, in_dim),
                blocks,
            )
        {
            // Decoding, a keystroke: the blocks widened in registers as they are multiplied.
        } else if rows <= FEW_ROWS {
            // Decoding, a keystroke: a few weight rows at a time, widened into a buffer that stays
            // in the first-level cache while they are multiplied (the sums are the same bits: an
            // element's order does not depend on its neighbours).
            WIDE_PANEL.with_borrow_mut(|wide| {
                wide.resize(FEW_COLUMNS * in_dim, 0.0);
                for c in (0..width).step_by(FEW_COLUMNS) {
                    let cols = FEW_COLUMNS.min(width - c);
                    let start = (first + c) * in_dim;
                    self.weight.widen_into(start..start + cols * in_dim, &mut wide[..cols * in_dim]);
                    let x = MatRef::rows(&x[columns.start..], rows, part, in_dim);
                    let w = MatRef::rows(&wide[columns.start..], cols, part, in_dim).t();
                    matmul(MatMut::rows(&mut dst[c..], rows, cols, width), x, w, 1.0, false);
                }
            });
        } else {
            WIDE_PANEL.with_borrow_mut(|wide| {
                wide.resize(width * in_dim, 0.0);
                self.weight.widen_into(first * in_dim..(first + width) * in_dim, wide);
                product(wide, dst);
            });
        }
    }

    /// The bias, `out` values.
    pub(super) fn bias(&self) -> &[f32] {
        &self.bias
    }

    /// `x[:, columns] · Wᵀ[columns, :]` into `out` (`rows × out`, no bias): the share of the
    /// product that input columns `columns` make (an attention head's write through its rows of
    /// `W_O`). The shares of all columns, plus the bias, sum to [`Self::forward_into`]'s output.
    pub(super) fn partial_into(&self, x: &[f32], columns: std::ops::Range<usize>, out: &mut [f32]) {
        let (in_dim, out_dim) = (self.in_dim, self.out_dim());
        let rows = x.len() / in_dim.max(1);
        if rows == 0 || columns.is_empty() {
            out.fill(0.0);
            return;
        }
        let mut scratch = vec![0.0; rows * out_dim];
        scratch.par_chunks_mut(rows * PANEL).enumerate().for_each(|(i, dst)| {
            self.panel_product(i, x, columns.clone(), dst);
        });
        let zeros = vec![0.0; out_dim];
        kernels::add_panels(&scratch, PANEL, &zeros, None, out);
    }

    /// `x · Wᵀ + b` into a new vector.
    pub(super) fn forward(&self, x: &[f32]) -> Vec<f32> {
        let rows = x.len() / self.in_dim.max(1);
        let mut scratch = vec![0.0; rows * self.out_dim()];
        let mut out = vec![0.0; rows * self.out_dim()];
        self.forward_into(x, None, &mut scratch, &mut out);
        out
    }
}
