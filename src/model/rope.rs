//! Rotary position embeddings as transformers computes them (`modeling_rope_utils.py` and each
//! family's `apply_rotary_pos_emb`): the inverse frequencies of each `rope_type`, the cos/sin tables
//! of a run's positions, and the rotation of a head's q or k (the `rotate_half` layout over the first
//! `2·⌈dims/2⌉` dimensions: dimension `i` pairs with `i + ⌈dims/2⌉`). Everything in f32, in the order
//! torch evaluates it.

use super::describe::{RopeScaling, Rotary};

/// `θ^(-2i/dims)` for `i < ⌈dims/2⌉`: `1 / base ** (arange(0, dims, 2).float() / dims)` in f32 (an
/// odd `dims` has one frequency more than `dims/2`, and so rotates `dims + 1` dimensions).
fn default_inv_freq(base: f32, dims: usize) -> Vec<f32> {
    (0..dims.div_ceil(2)).map(|i| 1.0 / base.powf((2 * i) as f32 / dims as f32)).collect()
}

/// The inverse frequencies for an input of `seq_len` tokens and the factor on cos and sin
/// (`attention_scaling`).
pub fn inv_freq(r: &Rotary, seq_len: usize) -> (Vec<f32>, f32) {
    let dims = r.dims;
    let base = r.theta as f32;
    match r.scaling {
        RopeScaling::None => (default_inv_freq(base, dims), 1.0),
        RopeScaling::Linear { factor } => {
            let factor = factor as f32;
            (default_inv_freq(base, dims).into_iter().map(|f| f / factor).collect(), 1.0)
        }
        RopeScaling::Dynamic { factor, max_positions } => {
            // dynamic_frequency_update: the frequencies change only once the input is longer
            // than max_position_embeddings; then _compute_dynamic_ntk_parameters runs with a
            // tensor seq_len, so the new base is computed in f32.
            if seq_len <= max_positions {
                return (default_inv_freq(base, dims), 1.0);
            }
            let factor = factor as f32;
            let grown = factor * seq_len as f32 / max_positions as f32 - (factor - 1.0);
            let exponent = dims as f32 / (dims as f32 - 2.0);
            (default_inv_freq(base * grown.powf(exponent), dims), 1.0)
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max } => {
            let (factor, low, high) = (factor as f32, low_freq_factor as f32, high_freq_factor as f32);
            let old = original_max as f32;
            let (low_wavelen, high_wavelen) = (old / low, old / high);
            let freqs = default_inv_freq(base, dims)
                .into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    let scaled = if wavelen > low_wavelen { f / factor } else { f };
                    if wavelen < high_wavelen || wavelen > low_wavelen {
                        return scaled;
                    }
                    let smooth = (old / wavelen - low) / (high - low);
                    (1.0 - smooth) * scaled / factor + smooth * scaled
                })
                .collect();
            (freqs, 1.0)
        }
        RopeScaling::LongRope { ref short, ref long, original_max, attention_factor } => {
            // _compute_longrope_parameters: `1 / (ext_factors · base ** (arange(0, dim, 2) / dim))`,
            // the long factors once the input is longer than `original_max` (longrope_frequency_update).
            let factors = if seq_len > original_max { long } else { short };
            let freqs = (0..dims.div_ceil(2))
                .map(|i| 1.0 / (factors[i] as f32 * base.powf((2 * i) as f32 / dims as f32)))
                .collect();
            (freqs, attention_factor as f32)
        }
        RopeScaling::Yarn { factor, original_max, attention_factor, beta_fast, beta_slow, truncate } => {
            // _compute_yarn_parameters: the correction range in f64 (Python floats), the ramp and
            // the blend in f32.
            let correction_dim = |rotations: f64| {
                dims as f64 * (original_max as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                    / (2.0 * r.theta.ln())
            };
            let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
            if truncate {
                low = low.floor();
                high = high.ceil();
            }
            let (low, mut high) = (low.max(0.0), high.min(dims as f64 - 1.0));
            if (high - low).abs() < f64::EPSILON {
                high += 0.001;
            }
            // linear_ramp_factor: `(arange(dim).float() - min) / (max - min)`, the width in f64.
            let (width, low) = ((high - low) as f32, low as f32);
            let factor = factor as f32;
            // An even `dims` (an odd one is refused: transformers' ramp has `dim // 2` values).
            let freqs = (0..dims / 2)
                .map(|i| {
                    let pos_freq = base.powf((2 * i) as f32 / dims as f32);
                    let extrapolation = 1.0 / pos_freq;
                    let interpolation = 1.0 / (factor * pos_freq);
                    let ramp = ((i as f32 - low) / width).clamp(0.0, 1.0);
                    let extrapolation_factor = 1.0 - ramp;
                    interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor
                })
                .collect();
            (freqs, attention_factor as f32)
        }
    }
}

/// The cos and sin of positions `first..first + count`, one value per frequency (`⌈dims/2⌉`) and
/// position (the second half of torch's `cat(freqs, freqs)` repeats the first).
#[derive(Debug, Clone)]
pub struct RopeTable {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// Bytes the table holds.
    pub fn bytes(&self) -> usize {
        (self.cos.capacity() + self.sin.capacity()) * size_of::<f32>()
    }

    /// The table for `count` positions from `first`, in a run of `seq_len` tokens in all.
    pub fn new(r: &Rotary, first: usize, count: usize, seq_len: usize) -> Self {
        let (freqs, scaling) = inv_freq(r, seq_len);
        let half = freqs.len();
        let mut cos = Vec::with_capacity(count * half);
        let mut sin = Vec::with_capacity(count * half);
        for p in first..first + count {
            for &f in &freqs {
                let angle = p as f32 * f;
                // `emb.cos() * attention_scaling`: an exact no-op when the factor is 1.
                cos.push(angle.cos() * scaling);
                sin.push(angle.sin() * scaling);
            }
        }
        Self { half, cos, sin }
    }

    /// Rotates one head vector of position `index` (counted from the table's first) in place:
    /// `x·cos + rotate_half(x)·sin` over its first `2·⌈dims/2⌉` values (`cos.shape[-1]` in
    /// `apply_rotary_pos_emb`); the rest pass unchanged.
    pub fn rotate(&self, index: usize, x: &mut [f32]) {
        let half = self.half;
        let (cos, sin) = (&self.cos[index * half..][..half], &self.sin[index * half..][..half]);
        for i in 0..half {
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * cos[i] + (-b) * sin[i];
            x[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;

    fn rotary(scaling: RopeScaling) -> Rotary {
        Rotary { dims: 8, theta: 10_000.0, scaling }
    }

    #[test]
    fn default_frequencies_and_a_rotation_by_position() {
        let (f, s) = inv_freq(&rotary(RopeScaling::None), 4);
        assert_eq!(s, 1.0);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 0.1).abs() < 1e-7 && (f[3] - 0.001).abs() < 1e-9, "{f:?}");
        let table = RopeTable::new(&rotary(RopeScaling::None), 0, 3, 3);
        // Position 0 leaves the vector alone; position 1 turns the first pair by 1 radian.
        let mut x = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0];
        table.rotate(0, &mut x);
        assert_eq!(x, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]);
        table.rotate(1, &mut x);
        assert!((x[0] - 1f32.cos()).abs() < 1e-7 && (x[4] - 1f32.sin()).abs() < 1e-7);
        assert_eq!(x[8], 7.0, "dimensions past `dims` pass");
    }

    #[test]
    fn an_odd_width_has_one_frequency_more_and_rotates_one_dimension_more() {
        // dims 3: arange(0, 3, 2) / 3 = [0, 2/3], so two frequencies; dimension i pairs with i + 2.
        let r = Rotary { dims: 3, theta: 10_000.0, scaling: RopeScaling::None };
        let (f, _) = inv_freq(&r, 4);
        assert_eq!(f, vec![1.0, 1.0 / 10_000f32.powf(2.0 / 3.0)]);
        let table = RopeTable::new(&r, 0, 2, 2);
        let mut x = [0.0, 1.0, 0.0, 0.0, 5.0];
        table.rotate(1, &mut x);
        assert!((x[1] - f[1].cos()).abs() < 1e-7 && (x[3] - f[1].sin()).abs() < 1e-7, "{x:?}");
        assert_eq!(x[4], 5.0, "the fifth dimension passes");
        // The Llama 3 and linear scalings rescale the same ⌈dims/2⌉ frequencies.
        assert_eq!(inv_freq(&Rotary { scaling: RopeScaling::Linear { factor: 2.0 }, ..r }, 4).0.len(), 2);
    }

    #[test]
    fn scaled_frequencies_follow_their_formulas() {
        let plain = inv_freq(&rotary(RopeScaling::None), 40).0;
        let linear = inv_freq(&rotary(RopeScaling::Linear { factor: 2.0 }), 40).0;
        assert!(plain.iter().zip(&linear).all(|(p, l)| *l == p / 2.0));
        let dynamic = RopeScaling::Dynamic { factor: 2.0, max_positions: 32 };
        assert_eq!(inv_freq(&rotary(dynamic.clone()), 32).0, plain, "unchanged up to max positions");
        let grown = inv_freq(&rotary(dynamic), 40).0;
        assert!(grown[0] == 1.0 && grown[1] < plain[1], "{grown:?}");
        // llama3 with an original length of 16: wavelengths above 16 are divided by the factor,
        // those below 16/4 kept, the one between (2π) blended.
        let llama3 = RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max: 16 };
        let l3 = inv_freq(&rotary(llama3.clone()), 4).0;
        assert!(l3[0] < plain[0] && l3[0] > plain[0] / 8.0, "{l3:?}");
        assert_eq!(l3[1..], plain[1..].iter().map(|f| f / 8.0).collect::<Vec<_>>()[..]);
        let long = RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max: 32 };
        assert_eq!(inv_freq(&rotary(long), 4).0[0], plain[0], "a wavelength of 2π < 32/4 is kept");
        let yarn = RopeScaling::Yarn {
            factor: 4.0,
            original_max: 16,
            attention_factor: 1.1386,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: true,
        };
        let (y, s) = inv_freq(&rotary(yarn), 4);
        assert!((s - 1.1386).abs() < 1e-6);
        assert!(y.iter().zip(&plain).all(|(y, p)| *y <= *p && *y >= p / 4.0 - 1e-9), "{y:?}");
    }
}
