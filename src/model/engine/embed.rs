//! Norms and embeddings: `LayerNorm` / `RMSNorm`, and the token, type and position rows a pass
//! starts from.

use super::error::Result;
use super::linear::Linear;
use super::weights::{Values, Weights};
use crate::model::describe::{Description, NormKind, Positions, Projection};
use crate::model::kernels;

/// A norm over the last dimension: `nn.LayerNorm` or an `RMSNorm` (see [`NormKind`]).
#[derive(Debug, Clone)]
pub(super) struct Norm {
    pub(super) weight: Vec<f32>,
    pub(super) bias: Vec<f32>,
    eps: f32,
    pub(super) kind: NormKind,
}

impl Norm {
    pub(super) fn load(w: &mut Weights, name: &str, size: usize, d: &Description) -> Result<Self> {
        Self::load_kind(w, name, size, d.norm_eps, d.norm_kind)
    }

    pub(super) fn load_kind(w: &mut Weights, name: &str, size: usize, eps: f32, kind: NormKind) -> Result<Self> {
        let weight = w.take(&format!("{name}.weight"), &[size])?;
        let bias = if kind == NormKind::Layer { w.take(&format!("{name}.bias"), &[size])? } else { Vec::new() };
        Ok(Self { weight, bias, eps, kind })
    }

    pub(super) fn forward_in_place(&self, x: &mut [f32]) {
        match self.kind {
            NormKind::Layer => kernels::layer_norm_rows(x, &self.weight, &self.bias, self.eps),
            NormKind::Rms => kernels::rms_norm_rows(x, &self.weight, self.eps, false),
            NormKind::RmsPlusOne => kernels::rms_norm_rows(x, &self.weight, self.eps, true),
        }
    }

    /// The weight as it multiplies a normalised row (`1 + w` for Gemma's norm).
    pub(super) fn multiplier(&self) -> Vec<f32> {
        match self.kind {
            NormKind::RmsPlusOne => self.weight.iter().map(|w| 1.0 + w).collect(),
            NormKind::Layer | NormKind::Rms => self.weight.clone(),
        }
    }

    /// What each row of `x` is divided by ([`kernels::norm_scales`]).
    pub(super) fn scales(&self, x: &[f32]) -> Vec<f32> {
        kernels::norm_scales(x, self.weight.len(), self.kind == NormKind::Layer, self.eps)
    }
}

/// The embeddings (`BertEmbeddings` and its variants): token rows (× scale), plus token-type and
/// position rows in the family's order, then the norm and projection in the family's order.
#[derive(Debug, Clone)]
pub(super) struct Embeddings {
    pub(super) width: usize,
    /// `vocab × width`, f32 or 16-bit (widened a row at a time).
    pub(super) tokens: Values,
    pub(super) positions: Option<(Vec<f32>, usize)>,
    pub(super) types: Option<Vec<f32>>,
    pub(super) norm: Option<Norm>,
    pub(super) projection: Option<(Linear, Projection)>,
    pub(super) scale: f32,
    pub(super) positions_first: bool,
}

impl Embeddings {
    pub(super) fn load(w: &mut Weights, d: &Description) -> Result<Self> {
        let e = &d.embedding;
        let positions = match e.positions {
            Positions::Table { rows, offset } => Some((w.take("embed.positions.weight", &[rows, e.width])?, offset)),
            // (A plan reads no table; it computes none either.)
            Positions::Sinusoidal { .. } if w.planning() => None,
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
    pub(super) fn forward(&self, ids: &[u32], type_ids: &[u32], first: usize, positions_on: bool) -> Vec<f32> {
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
