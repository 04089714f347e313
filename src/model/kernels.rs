//! Numeric kernels the encoder fuses by hand: scale + softmax (+ capture) of attention scores in
//! one pass, and exact-erf GELU. Plain loops written so the compiler vectorises them, compiled for
//! the best instruction set of the running CPU (AVX2, AVX-512) through `pulp`'s runtime dispatch,
//! and split over threads with rayon. Accuracy is within a few ulp of libm, far inside the 1e-5
//! parity budget.

#![allow(clippy::inline_always)] // pulp's dispatch vectorises only code inlined into it
#![allow(clippy::many_single_char_names)] // the textbook names of these formulas

use rayon::prelude::*;

/// Lanes of the partial reductions (independent accumulators the compiler can keep in a register).
const LANES: usize = 16;

/// Rows handled per rayon task (keeps task overhead low for short inputs).
const MIN_CHUNK: usize = 4096;

/// `exp(x)` for `f32`, Cephes-style (plain multiply-adds: `mul_add` without a compile-time FMA
/// target would call a slow software `fmaf`): `x = n·ln2 + r`, a degree-6 polynomial for `exp(r)`, then a
/// `2^n` scale built from bits. Branch-free so loops over it vectorise. Exactly 0 below -87.3
/// (so masked scores of -inf give exactly zero weight); saturates above 88.7.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let xc = x.clamp(-87.3, 88.7);
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (xc - n * C1) - n * C2;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5e-1;
    let y = p * r * r + r + 1.0;
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
        p = p * t + c;
    }
    let erfc = t * exp_f32(p * t - z * z - 1.265_512_2);
    let e = 1.0 - erfc;
    if x < 0.0 { -e } else { e }
}

/// Exact (erf) GELU in place: `0.5·x·(1 + erf(x/√2))`, Hugging Face's `GELUActivation`.
pub fn gelu_erf_in_place(values: &mut [f32]) {
    let arch = pulp::Arch::new();
    values.par_chunks_mut(MIN_CHUNK).for_each(|chunk| {
        arch.dispatch(
            #[inline(always)]
            || {
                for v in chunk.iter_mut() {
                    let x = *v;
                    *v = 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2));
                }
            },
        );
    });
}

/// `out = y + bias (+ residual)` for a row-major `rows × bias.len()` matrix `y`: the bias of a
/// linear layer, and the residual connection when given, added in one pass.
pub fn add_bias_residual(y: &[f32], bias: &[f32], residual: Option<&[f32]>) -> Vec<f32> {
    let width = bias.len();
    let mut out = vec![0.0f32; y.len()];
    if width == 0 {
        return out;
    }
    let rows_per_task = (MIN_CHUNK / width).max(1) * width;
    out.par_chunks_mut(rows_per_task).enumerate().for_each(|(task, out)| {
        let start = task * rows_per_task;
        let y = &y[start..start + out.len()];
        match residual {
            Some(r) => {
                let r = &r[start..start + out.len()];
                for ((o, y), r) in out.chunks_mut(width).zip(y.chunks(width)).zip(r.chunks(width)) {
                    for j in 0..width {
                        o[j] = (y[j] + bias[j]) + r[j];
                    }
                }
            }
            None => {
                for (o, y) in out.chunks_mut(width).zip(y.chunks(width)) {
                    for j in 0..width {
                        o[j] = y[j] + bias[j];
                    }
                }
            }
        }
    });
    out
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
    let mut sums = [0.0f32; LANES];
    let mut chunks = p.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            sums[j] += c[j];
        }
    }
    let sum: f32 = sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    let inv = 1.0 / sum;
    for v in p.iter_mut() {
        *v *= inv;
    }
}

/// For each row of `raw` (length `n`): scores = raw·`scale`, written to `scores` if given, and
/// softmax(scores) written to `probs` — each row scaled, recorded and normalised while it is in
/// cache, instead of separate passes over the whole `n × n` buffers. With `causal`, keys after the
/// query get a score of -inf and a weight of exactly 0 (`raw` holds whole `n × n` matrices).
pub fn scaled_softmax_rows(
    raw: &[f32],
    n: usize,
    scale: f32,
    causal: bool,
    probs: &mut [f32],
    scores: Option<&mut [f32]>,
) {
    assert_eq!(raw.len(), probs.len());
    if let Some(s) = scores.as_deref() {
        assert_eq!(s.len(), raw.len());
    }
    if n == 0 {
        return;
    }
    let arch = pulp::Arch::new();
    let rows_per_task = (MIN_CHUNK / n).max(1) * n;
    let tasks = raw.par_chunks(rows_per_task).zip(probs.par_chunks_mut(rows_per_task)).enumerate();
    let rows = |c: usize, src, probs, scores| {
        arch.dispatch(SoftmaxRows { src, probs, scores, n, scale, causal, first_row: c * rows_per_task / n });
    };
    match scores {
        Some(s) => tasks.zip(s.par_chunks_mut(rows_per_task)).for_each(|((c, (src, p)), s)| rows(c, src, p, Some(s))),
        None => tasks.for_each(|(c, (src, p))| rows(c, src, p, None)),
    }
}

/// Rows of [`scaled_softmax_rows`] for one task, as a `pulp` operation: `with_simd` is compiled
/// for the instruction set pulp picks at run time (a closure passed to `dispatch` was not inlined
/// into it and ran as SSE code).
struct SoftmaxRows<'a> {
    src: &'a [f32],
    probs: &'a mut [f32],
    scores: Option<&'a mut [f32]>,
    n: usize,
    scale: f32,
    causal: bool,
    /// Index of the first row among all rows (for the causal mask).
    first_row: usize,
}

impl pulp::WithSimd for SoftmaxRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let Self { src, probs, mut scores, n, scale, causal, first_row } = self;
        for (i, (src, p)) in src.chunks(n).zip(probs.chunks_mut(n)).enumerate() {
            for (pv, &r) in p.iter_mut().zip(src) {
                *pv = r * scale;
            }
            if causal {
                let query = (first_row + i) % n;
                p[query + 1..].fill(f32::NEG_INFINITY);
            }
            if let Some(s) = scores.as_deref_mut() {
                s[i * n..(i + 1) * n].copy_from_slice(p);
            }
            softmax_in_place(p);
        }
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
    fn bias_and_residual_are_added_per_column() {
        let y = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(add_bias_residual(&y, &[10.0, 20.0, 30.0], None), [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        let r = [0.5; 6];
        assert_eq!(add_bias_residual(&y, &[10.0, 20.0, 30.0], Some(&r)), [11.5, 22.5, 33.5, 14.5, 25.5, 36.5]);
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_the_naive_formula() {
        let n = 5;
        let raw: Vec<f32> = (0..3 * n).map(|i| ((i * 7) % 11) as f32 - 4.0).collect();
        let mut probs = vec![0.0; raw.len()];
        let mut scores = vec![0.0; raw.len()];
        scaled_softmax_rows(&raw, n, 0.5, false, &mut probs, Some(&mut scores));
        for (r, row) in raw.chunks(n).enumerate() {
            let s: Vec<f64> = row.iter().map(|&v| f64::from(v) * 0.5).collect();
            let max = s.iter().copied().fold(f64::MIN, f64::max);
            let z: f64 = s.iter().map(|v| (v - max).exp()).sum();
            for k in 0..n {
                assert!((f64::from(probs[r * n + k]) - (s[k] - max).exp() / z).abs() < 1e-7);
                assert_eq!(f64::from(scores[r * n + k]), s[k]);
            }
        }
        let masked = [0.0f32, f32::NEG_INFINITY];
        let mut p = [0.0f32; 2];
        scaled_softmax_rows(&masked, 2, 1.0, false, &mut p, None);
        assert_eq!(p, [1.0, 0.0]);
    }

    #[test]
    fn causal_rows_have_exact_zeros_after_the_query_across_task_boundaries() {
        // 3 heads of 37 tokens: chunks of MIN_CHUNK / 37 rows do not start at whole matrices.
        let n = 37;
        let raw: Vec<f32> = (0..3 * n * n).map(|i| ((i * 13) % 17) as f32 * 0.3).collect();
        let mut probs = vec![0.0; raw.len()];
        scaled_softmax_rows(&raw, n, 1.0, true, &mut probs, None);
        for (r, row) in probs.chunks(n).enumerate() {
            let q = r % n;
            assert!(row[q + 1..].iter().all(|&v| v == 0.0), "row {r}");
            assert!((row[..=q].iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
    }
}
