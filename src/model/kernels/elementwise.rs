//! The element-wise kernels of the encoder: softmax of a head's scores in place (recording them on
//! the way), `LayerNorm`, the activations, and bias + residual rows for a product to add to. Plain
//! loops written so the compiler vectorises them, compiled for the running CPU (AVX-512, AVX2)
//! through the room's one dispatch (`Simd::vectorised`), and split over threads with rayon.
//! Accuracy is within a few ulp of libm, far inside the 1e-5 parity budget.

#![allow(clippy::inline_always)] // the dispatch vectorises only code inlined into it
#![allow(clippy::many_single_char_names)] // the textbook names of these formulas

use rayon::prelude::*;

use super::simd::{Simd, Unpack, Vectorised};

/// Lanes of the partial reductions (independent accumulators the compiler can keep in a register).
pub const LANES: usize = 16;

/// Rows handled per rayon task (keeps task overhead low for short inputs).
const MIN_CHUNK: usize = 4096;

/// `exp(x)` for `f32`, Cephes-style: `x = n·ln2 + r`, a degree-6 polynomial for `exp(r)`, then a
/// `2^n` scale built from bits. Fused multiply-adds: inlined into the AVX2 / AVX-512 dispatch
/// each is one instruction (a third fewer than multiply then add); only the scalar fallback (a CPU
/// without FMA) calls libm's slower software `fmaf`. Branch-free so loops over it vectorise. Exactly 0 below -87.3
/// (so masked scores of -inf give exactly zero weight); saturates above 88.7.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let xc = x.clamp(-87.3, 88.7);
    let t = xc.mul_add(LOG2E, ROUND);
    let n = t - ROUND;
    let r = n.mul_add(-C2, n.mul_add(-C1, xc));
    let mut p = 1.987_569_2e-4_f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 5e-1);
    let y = (p * r).mul_add(r, r) + 1.0;
    let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let scale = f32::from_bits((ni.wrapping_add(127) << 23) as u32);
    if x < -87.3 { 0.0 } else { y * scale }
}

/// `erf(x)` for `f32` through Numerical Recipes' `erfc` (fractional error < 1.2e-7).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = 0.170_872_77_f32;
    for c in
        [-0.822_152_23, 1.488_515_9, -1.135_204, 0.278_868_07, -0.186_288_06, 0.096_784_18, 0.374_091_96, 1.000_023_7]
    {
        p = p.mul_add(t, c);
    }
    let erfc = t * exp_f32(p.mul_add(t, (-z).mul_add(z, -1.265_512_2)));
    let e = 1.0 - erfc;
    if x < 0.0 { -e } else { e }
}

/// Exact (erf) GELU in place: `0.5·x·(1 + erf(x/√2))`, Hugging Face's `GELUActivation`.
pub fn gelu_erf_in_place(values: &mut [f32]) {
    map_in_place(
        values,
        #[inline(always)]
        |x| 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
    );
}

/// Soft-capping in place: `cap · tanh(x / cap)` (Gemma 2's scores and logits), in the order
/// torch evaluates it (divide, tanh, multiply).
pub fn softcap_in_place(values: &mut [f32], cap: f32) {
    for v in values {
        *v = (*v / cap).tanh() * cap;
    }
}

/// Tanh-approximated GELU in place: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, Hugging Face's
/// `NewGELUActivation` (`gelu_new`).
pub fn gelu_tanh_in_place(values: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    map_in_place(
        values,
        #[inline(always)]
        |x| {
            let y = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
            // tanh(y) = 1 − 2 / (e^{2y} + 1): exact at both ends (e^{2y} saturates or reaches 0).
            let tanh = 1.0 - 2.0 / (exp_f32(2.0 * y) + 1.0);
            0.5 * x * (1.0 + tanh)
        },
    );
}

/// `max(x, 0)` in place (`relu`).
pub fn relu_in_place(values: &mut [f32]) {
    map_in_place(
        values,
        #[inline(always)]
        |x| if x > 0.0 { x } else { 0.0 },
    );
}

/// Applies `f` to every value, in parallel chunks compiled for the running CPU.
fn map_in_place(values: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    struct Map<'a, F> {
        values: &'a mut [f32],
        f: &'a F,
    }
    impl<F: Fn(f32) -> f32> Vectorised for Map<'_, F> {
        type Output = ();
        #[inline(always)]
        fn run<L: Unpack>(self) {
            for v in self.values.iter_mut() {
                *v = (self.f)(*v);
            }
        }
    }
    let simd = Simd::detect();
    values.par_chunks_mut(MIN_CHUNK).for_each(|values| simd.vectorised(Map { values, f: &f }));
}

/// Assembles a linear layer's output: `panels` holds the product as consecutive blocks of
/// `width` columns (each block row-major over all rows; the last block may be narrower), and row
/// `t` of `out` (rows of `bias.len()` values) becomes `product + bias (+ residual)`, added in the
/// order `nn.Linear` and the residual connection add them. With no panels (no input features) the
/// product is zero.
pub fn add_panels(panels: &[f32], width: usize, bias: &[f32], residual: Option<&[f32]>, out: &mut [f32]) {
    let out_dim = bias.len();
    if out_dim == 0 || width == 0 {
        return;
    }
    let rows = out.len() / out_dim;
    assert!(panels.is_empty() || panels.len() == out.len(), "panels and output differ in size");
    if let Some(r) = residual {
        assert_eq!(r.len(), out.len(), "residual and output differ in size");
    }
    let rows_per_task = (MIN_CHUNK / out_dim).max(1);
    out.par_chunks_mut(rows_per_task * out_dim).enumerate().for_each(|(task, out)| {
        for (i, o) in out.chunks_mut(out_dim).enumerate() {
            let t = task * rows_per_task + i;
            for (p, start) in (0..out_dim).step_by(width).enumerate() {
                let w = width.min(out_dim - start);
                let o = &mut o[start..start + w];
                let b = &bias[start..start + w];
                match (panels.is_empty(), residual) {
                    (false, Some(r)) => {
                        let y = &panels[p * rows * width + t * w..][..w];
                        let r = &r[t * out_dim + start..][..w];
                        for j in 0..w {
                            o[j] = (y[j] + b[j]) + r[j];
                        }
                    }
                    (false, None) => {
                        let y = &panels[p * rows * width + t * w..][..w];
                        for j in 0..w {
                            o[j] = y[j] + b[j];
                        }
                    }
                    (true, Some(r)) => {
                        let r = &r[t * out_dim + start..][..w];
                        for j in 0..w {
                            o[j] = b[j] + r[j];
                        }
                    }
                    (true, None) => o.copy_from_slice(b),
                }
            }
        }
    });
}

/// `LayerNorm` of each row of `x` in place (rows of `weight.len()` values): subtract the mean,
/// divide by `√(variance + eps)` (variance of the centred values, the biased estimate, as
/// `torch.nn.LayerNorm`), then scale and shift.
pub fn layer_norm_rows(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let width = weight.len();
    assert_eq!(bias.len(), width);
    if width == 0 {
        return;
    }
    let simd = Simd::detect();
    let rows_per_task = (MIN_CHUNK / width).max(1) * width;
    x.par_chunks_mut(rows_per_task).for_each(|rows| simd.vectorised(LayerNormRows { rows, weight, bias, eps }));
}

/// Rows of [`layer_norm_rows`] for one task, as a vectorised loop.
struct LayerNormRows<'a> {
    rows: &'a mut [f32],
    weight: &'a [f32],
    bias: &'a [f32],
    eps: f32,
}

impl Vectorised for LayerNormRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Unpack>(self) {
        let Self { rows, weight, bias, eps } = self;
        let width = weight.len();
        for row in rows.chunks_mut(width) {
            let mean = lane_sum(row, |v| v) / width as f32;
            let var = lane_sum(row, |v| (v - mean) * (v - mean)) / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for j in 0..width {
                row[j] = (row[j] - mean) * inv * weight[j] + bias[j];
            }
        }
    }
}

/// What each row of `x` (rows of `width`) is divided by in a norm: `sqrt(var + eps)` for a
/// LayerNorm (`centred`, the row's mean taken out first), `sqrt(mean(x²) + eps)` for an RMSNorm —
/// `TransformerLens`'s `hook_scale`, computed with the sums [`layer_norm_rows`] and
/// [`rms_norm_rows`] use, so `x / scale` is the normalised row they form.
pub fn norm_scales(x: &[f32], width: usize, centred: bool, eps: f32) -> Vec<f32> {
    if width == 0 {
        return Vec::new();
    }
    x.chunks(width)
        .map(|row| {
            let spread = if centred {
                let mean = lane_sum(row, |v| v) / width as f32;
                lane_sum(row, |v| (v - mean) * (v - mean)) / width as f32
            } else {
                lane_sum(row, |v| v * v) / width as f32
            };
            (spread + eps).sqrt()
        })
        .collect()
}

/// `Σ f(v)` over `values` with [`LANES`] independent partial sums (so the loop vectorises).
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut sums = [0.0f32; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            sums[j] += f(c[j]);
        }
    }
    sums.iter().sum::<f32>() + chunks.remainder().iter().map(|&v| f(v)).sum::<f32>()
}

/// Softmax of one row of scaled scores already in `p`, in place: max, exp, sum, normalise, each a
/// separate pass so each vectorises (a running `sum += e` would force scalar code).
#[inline(always)]
fn softmax_in_place(p: &mut [f32]) {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = p.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
        }
    }
    let max = chunks.remainder().iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for v in p.iter_mut() {
        *v = exp_f32(*v - max);
    }
    let inv = 1.0 / lane_sum(p, |v| v);
    for v in p.iter_mut() {
        *v *= inv;
    }
}

/// [`softmax_in_place`] with one more column that is no key (an attention sink's logit): the row
/// becomes `exp(p − m) / (Σ exp(p − m) + exp(sink − m))` with `m` the largest of the row and the
/// sink, and the sink's share of the row is returned.
#[inline(always)]
fn softmax_with_sink_in_place(p: &mut [f32], sink: f32) -> f32 {
    let mut lanes = [sink; LANES];
    let mut chunks = p.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
        }
    }
    let max = chunks.remainder().iter().chain(&lanes).fold(sink, |m, &v| if v > m { v } else { m });
    for v in p.iter_mut() {
        *v = exp_f32(*v - max);
    }
    let sink = exp_f32(sink - max);
    let inv = 1.0 / (lane_sum(p, |v| v) + sink);
    for v in p.iter_mut() {
        *v *= inv;
    }
    sink * inv
}

/// Which keys each query of a block of rows may see: with `causal`, none after it; with a
/// `window` of `w`, none `w` or more positions before it (Mistral's sliding window). Row `r` is the
/// query at position `first + r` (after `first` cached tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mask {
    /// Keys after the query are hidden.
    pub causal: bool,
    /// Keys this many positions or more before the query are hidden.
    pub window: Option<usize>,
    /// Position of the first row's query.
    pub first: usize,
}

impl Mask {
    /// The keys row `row` sees, out of `keys`.
    pub fn visible(&self, row: usize, keys: usize) -> std::ops::Range<usize> {
        let pos = self.first + row;
        let end = if self.causal { (pos + 1).min(keys) } else { keys };
        let start = self.window.map_or(0, |w| (pos + 1).saturating_sub(w)).min(end);
        start..end
    }
}

/// For one head's matrix of scaled scores in `probs` (`rows × keys`, rows are queries): keys
/// `mask` hides get a score of -inf; the scores are copied to `scores` if given; then each row
/// becomes its softmax, in place (hidden keys get exactly 0). Single-threaded: the caller runs
/// heads in parallel.
pub fn softmax_rows(probs: &mut [f32], keys: usize, mask: Mask, scores: Option<&mut [f32]>) {
    softmax_rows_with(probs, keys, mask, scores, None);
}

/// [`softmax_rows`] where each row's softmax also spans an attention sink: a logit `sink` that
/// is no key (gpt-oss's `sinks`, `eager_attention_forward`'s extra column). The rows keep the
/// keys' probabilities (summing to 1 − the sink's share); `shares` (one per row) gets the sink's.
pub fn softmax_rows_with_sink(
    probs: &mut [f32],
    keys: usize,
    mask: Mask,
    scores: Option<&mut [f32]>,
    sink: f32,
    shares: &mut [f32],
) {
    softmax_rows_with(probs, keys, mask, scores, Some((sink, shares)));
}

fn softmax_rows_with(
    probs: &mut [f32],
    keys: usize,
    mask: Mask,
    scores: Option<&mut [f32]>,
    sink: Option<(f32, &mut [f32])>,
) {
    if let Some(s) = scores.as_deref() {
        assert_eq!(s.len(), probs.len());
    }
    if keys == 0 || probs.is_empty() {
        return;
    }
    assert_eq!(probs.len() % keys, 0);
    if let Some((_, shares)) = &sink {
        assert_eq!(shares.len(), probs.len() / keys);
    }
    Simd::detect().vectorised(SoftmaxRows { probs, scores, keys, mask, sink });
}

/// The rows of [`softmax_rows`], as a vectorised loop: `run` is compiled for the instruction set
/// found at run time (a closure passed to the dispatch was not inlined into it and ran as SSE code).
struct SoftmaxRows<'a> {
    probs: &'a mut [f32],
    scores: Option<&'a mut [f32]>,
    keys: usize,
    mask: Mask,
    /// An attention sink's logit and where each row's share of it goes.
    sink: Option<(f32, &'a mut [f32])>,
}

impl Vectorised for SoftmaxRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Unpack>(self) {
        let Self { probs, mut scores, keys, mask, mut sink } = self;
        for (query, p) in probs.chunks_mut(keys).enumerate() {
            let seen = mask.visible(query, keys);
            p[..seen.start].fill(f32::NEG_INFINITY);
            p[seen.end..].fill(f32::NEG_INFINITY);
            if let Some(s) = scores.as_deref_mut() {
                s[query * keys..(query + 1) * keys].copy_from_slice(p);
            }
            match &mut sink {
                Some((logit, shares)) => shares[query] = softmax_with_sink_in_place(p, *logit),
                None => softmax_in_place(p),
            }
        }
    }
}

/// `RMSNorm` over rows of `weight.len()` values, in place: `x / √(mean(x²) + ε) · w`, or with
/// `plus_one` (Gemma) `· (1 + w)`. As transformers computes it in f32: the mean of squares, then
/// `x · rsqrt(…)`, then the weight.
pub fn rms_norm_rows(x: &mut [f32], weight: &[f32], eps: f32, plus_one: bool) {
    let width = weight.len();
    if width == 0 {
        return;
    }
    let simd = Simd::detect();
    let rows_per_task = (MIN_CHUNK / width).max(1) * width;
    x.par_chunks_mut(rows_per_task).for_each(|rows| simd.vectorised(RmsNormRows { rows, weight, eps, plus_one }));
}

/// Rows of [`rms_norm_rows`] for one task, as a vectorised loop.
struct RmsNormRows<'a> {
    rows: &'a mut [f32],
    weight: &'a [f32],
    eps: f32,
    plus_one: bool,
}

impl Vectorised for RmsNormRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Unpack>(self) {
        let Self { rows, weight, eps, plus_one } = self;
        let width = weight.len();
        for row in rows.chunks_mut(width) {
            let inv = 1.0 / (lane_sum(row, |v| v * v) / width as f32 + eps).sqrt();
            if plus_one {
                row.iter_mut().zip(weight).for_each(|(v, w)| *v = (*v * inv) * (1.0 + w));
            } else {
                row.iter_mut().zip(weight).for_each(|(v, w)| *v = w * (*v * inv));
            }
        }
    }
}

/// `a · b` summed in lanes (for the language-model head's one row at a time).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..LANES {
            lanes[j] += x[j] * y[j];
        }
    }
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    dot_finish(&lanes, tail)
}

/// The end of [`dot`]: its sixteen lanes added in order, then the sum of the values past the last
/// whole sixteen (what [`block_dots`](super::block_dots) ends with too).
pub fn dot_finish(lanes: &[f32; LANES], tail: f32) -> f32 {
    lanes.iter().sum::<f32>() + tail
}

/// `SiLU` in place: `x / (1 + e^(−x))`, as `PyTorch`'s CPU kernel computes it. Through the room's
/// dispatch like the other activations: outside it `exp_f32`'s fused multiply-adds were calls to
/// libm's software `fmaf` (13 % of a SmolLM2 pass at 512 tokens; the same values, as FMA rounds once
/// either way).
pub fn silu_in_place(values: &mut [f32]) {
    map_in_place(
        values,
        #[inline(always)]
        |x| x / (1.0 + exp_f32(-x)),
    );
}

/// gpt-oss's clamped `SwiGLU` (`GptOssExperts._apply_gate`) in place on `gate`: `gate` clamped
/// above at `limit`, `up` to `±limit`, then `(up + 1) · gate · sigmoid(alpha · gate)`.
pub fn clamped_swiglu(gate: &mut [f32], up: &[f32], alpha: f32, limit: f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(limit);
        let u = u.clamp(-limit, limit);
        let sigmoid = 1.0 / (1.0 + exp_f32(-(x * alpha)));
        *g = (u + 1.0) * (x * sigmoid);
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    fn rel(a: f32, b: f64) -> f64 {
        ((f64::from(a) - b) / b.abs().max(1e-30)).abs()
    }

    #[test]
    fn a_sink_takes_its_share_of_the_row() {
        // Row 0 sees key 0 (score 0) and the sink (ln 3): [1, 3] / 4. Row 1 sees scores 0 and
        // ln 2 and the sink: [1, 2, 3] / 6.
        let mut p = vec![0.0, 5.0, 0.0, 2f32.ln()];
        let mut shares = [0.0; 2];
        let mask = Mask { causal: true, window: None, first: 0 };
        softmax_rows_with_sink(&mut p, 2, mask, None, 3f32.ln(), &mut shares);
        assert!((p[0] - 0.25).abs() < 1e-6 && p[1] == 0.0 && (shares[0] - 0.75).abs() < 1e-6, "{p:?} {shares:?}");
        assert!((p[2] - 1.0 / 6.0).abs() < 1e-6 && (p[3] - 2.0 / 6.0).abs() < 1e-6, "{p:?}");
        assert!((shares[1] - 0.5).abs() < 1e-6);
        // The clamp clips gate above and up on both sides.
        let mut gate = [10.0f32, -1.0];
        clamped_swiglu(&mut gate, &[-9.0, 0.5], 1.0, 2.0);
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        // (up + 1) · gate · sigmoid(gate): up clipped to -2, gate to 2; then up 0.5, gate -1.
        assert!((gate[0] + 2.0 * sig(2.0)).abs() < 1e-6, "{gate:?}");
        assert!((gate[1] + 1.5 * sig(-1.0)).abs() < 1e-6, "{gate:?}");
    }

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            worst = worst.max(rel(exp_f32(x), f64::from(x).exp()));
            x += 0.0137;
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
    }

    #[test]
    fn erf_matches_the_series_to_4e7() {
        // Reference erf in f64 by its Taylor series (converges fast for |x| <= 3).
        fn erf64(x: f64) -> f64 {
            let (mut term, mut sum, mut k) = (x, x, 0.0);
            while term.abs() > 1e-17 * sum.abs().max(1e-300) && k < 200.0 {
                k += 1.0;
                term *= -x * x / k;
                sum += term / (2.0 * k + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        }
        let mut x = -3.0f32;
        while x <= 3.0 {
            let d = (f64::from(erf_f32(x)) - erf64(f64::from(x))).abs();
            // Numerical Recipes bounds erfc to 1.2e-7 (fractional); f32 rounding adds about as much.
            assert!(d < 4e-7, "erf({x}) off by {d}");
            x += 0.01;
        }
        assert_eq!(erf_f32(10.0), 1.0);
        assert_eq!(erf_f32(-10.0), -1.0);
    }

    #[test]
    fn panels_are_assembled_into_rows_with_bias_and_residual() {
        // 2 rows × 5 columns in panels of 2: [c0 c1] [c2 c3] [c4].
        let product = [[1.0f32, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]];
        let mut panels = Vec::new();
        for (start, end) in [(0, 2), (2, 4), (4, 5)] {
            for row in &product {
                panels.extend_from_slice(&row[start..end]);
            }
        }
        let bias = [10.0, 20.0, 30.0, 40.0, 50.0];
        let mut out = [0.0f32; 10];
        add_panels(&panels, 2, &bias, None, &mut out);
        assert_eq!(out, [11.0, 22.0, 33.0, 44.0, 55.0, 16.0, 27.0, 38.0, 49.0, 60.0]);
        let residual = [0.5; 10];
        add_panels(&panels, 2, &bias, Some(&residual), &mut out);
        assert_eq!(out, [11.5, 22.5, 33.5, 44.5, 55.5, 16.5, 27.5, 38.5, 49.5, 60.5]);
        add_panels(&[], 2, &bias, Some(&residual), &mut out);
        assert_eq!(out[..5], [10.5, 20.5, 30.5, 40.5, 50.5]);
    }

    #[test]
    fn layer_norm_matches_the_formula_in_f64() {
        let width = 37; // not a multiple of the lanes
        let mut x: Vec<f32> = (0..3 * width).map(|i| ((i * 7) % 13) as f32 * 0.7 - 3.0).collect();
        let original = x.clone();
        let weight: Vec<f32> = (0..width).map(|j| 0.5 + j as f32 * 0.01).collect();
        let bias: Vec<f32> = (0..width).map(|j| j as f32 * -0.02).collect();
        layer_norm_rows(&mut x, &weight, &bias, 1e-12);
        for (row, normed) in original.chunks(width).zip(x.chunks(width)) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / width as f64;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / width as f64;
            for j in 0..width {
                let want =
                    (f64::from(row[j]) - mean) / (var + 1e-12).sqrt() * f64::from(weight[j]) + f64::from(bias[j]);
                assert!((f64::from(normed[j]) - want).abs() < 2e-6, "{} vs {want}", normed[j]);
            }
        }
    }

    #[test]
    fn activations_match_their_formulas() {
        let xs: Vec<f32> = (0..400).map(|i| i as f32 * 0.05 - 10.0).collect();
        let (mut erf, mut tanh, mut relu) = (xs.clone(), xs.clone(), xs.clone());
        gelu_erf_in_place(&mut erf);
        gelu_tanh_in_place(&mut tanh);
        relu_in_place(&mut relu);
        for (i, &x) in xs.iter().enumerate() {
            let x64 = f64::from(x);
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044_715 * x64.powi(3));
            let want_tanh = 0.5 * x64 * (1.0 + inner.tanh());
            assert!((f64::from(tanh[i]) - want_tanh).abs() < 1e-6 * x64.abs().max(1.0), "gelu_new({x})");
            assert!((f64::from(erf[i]) - want_tanh).abs() < 2e-3 * x64.abs().max(1.0), "gelu({x}) near gelu_new");
            assert_eq!(relu[i], x.max(0.0));
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_the_naive_formula() {
        let n = 5;
        let raw: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.0).collect();
        let mut probs = raw.clone();
        let mut scores = vec![0.0; raw.len()];
        softmax_rows(&mut probs, n, Mask::default(), Some(&mut scores));
        assert_eq!(scores, raw, "the scores are recorded as given");
        for (r, row) in raw.chunks(n).enumerate() {
            let s: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
            let max = s.iter().copied().fold(f64::MIN, f64::max);
            let z: f64 = s.iter().map(|v| (v - max).exp()).sum();
            for k in 0..n {
                assert!((f64::from(probs[r * n + k]) - (s[k] - max).exp() / z).abs() < 5e-7); // exp_f32: 4e-7 relative
            }
        }
        let mut p = [0.0f32, f32::NEG_INFINITY, 0.0, 0.0];
        softmax_rows(&mut p, 2, Mask::default(), None);
        assert_eq!(p, [1.0, 0.0, 0.5, 0.5]);
    }

    #[test]
    fn causal_rows_have_exact_zeros_after_the_query_and_record_minus_infinity() {
        let n = 37;
        let raw: Vec<f32> = (0..n * n).map(|i| ((i * 13) % 17) as f32 * 0.3).collect();
        let mut probs = raw.clone();
        let mut scores = vec![0.0; raw.len()];
        softmax_rows(&mut probs, n, Mask { causal: true, ..Mask::default() }, Some(&mut scores));
        for (q, (row, s)) in probs.chunks(n).zip(scores.chunks(n)).enumerate() {
            assert!(row[q + 1..].iter().all(|&v| v == 0.0), "row {q}");
            assert!(s[q + 1..].iter().all(|&v| v == f32::NEG_INFINITY), "scores of row {q}");
            assert_eq!(s[..=q], raw[q * n..=q * n + q]);
            assert!((row[..=q].iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn a_sliding_window_after_cached_tokens_hides_keys_too_far_back() {
        // Three new queries at positions 5, 6, 7 over 8 keys, window 3: query 5 sees 3..=5.
        let mask = Mask { causal: true, window: Some(3), first: 5 };
        assert_eq!(mask.visible(0, 8), 3..6);
        assert_eq!(mask.visible(2, 8), 5..8);
        let mut probs = vec![1.0; 3 * 8];
        softmax_rows(&mut probs, 8, mask, None);
        assert_eq!(&probs[..8], &[0.0, 0.0, 0.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0, 0.0, 0.0]);
        let open = Mask { causal: false, window: None, first: 0 };
        assert_eq!(open.visible(0, 4), 0..4);
    }

    #[test]
    fn rms_norm_matches_the_formula_in_both_forms() {
        let mut x = vec![1.0f32, -2.0, 3.0, 0.5];
        let w = [0.5f32, 1.0, -1.0, 2.0];
        let mut y = x.clone();
        rms_norm_rows(&mut x, &w, 1e-6, false);
        rms_norm_rows(&mut y, &w, 1e-6, true);
        let ms = (1.0 + 4.0 + 9.0 + 0.25) / 4.0f64;
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            let v = [1.0, -2.0, 3.0, 0.5][i] / (ms + 1e-6).sqrt();
            assert!((f64::from(*a) - v * f64::from(w[i])).abs() < 1e-6);
            assert!((f64::from(*b) - v * (1.0 + f64::from(w[i]))).abs() < 1e-6);
        }
        let mut s = vec![-1.0f32, 0.0, 2.0];
        silu_in_place(&mut s);
        for (v, x) in s.iter().zip([-1.0f64, 0.0, 2.0]) {
            assert!((f64::from(*v) - x / (1.0 + (-x).exp())).abs() < 1e-6);
        }
    }
}
