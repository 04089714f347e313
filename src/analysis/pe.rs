//! Sinusoidal positional encodings and their dot products `pe_i` · `pe_j`.

use thiserror::Error;

/// How the sine and cosine channels are arranged along the model dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeLayout {
    /// The paper's: PE[p, 2i] = sin(p / base^(2i/D)), PE[p, 2i+1] = cos(p / base^(2i/D)).
    #[default]
    Interleaved,
    /// tensor2tensor's `get_timing_signal_1d`: D/2 timescales spread geometrically from 1 to
    /// `base`, all sines first, then all cosines.
    Concatenated,
}

impl PeLayout {
    /// Name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Interleaved => "interleaved",
            Self::Concatenated => "concatenated",
        }
    }
}

/// Parameters that are out of range for a positional encoding.
#[derive(Debug, Error, PartialEq)]
pub enum PeError {
    /// `d_model` is zero or odd.
    #[error("d_model must be a positive even number (sine and cosine pairs), got {0}")]
    DModel(usize),
    /// No positions asked for.
    #[error("positions must be at least 1, got {0}")]
    Positions(usize),
    /// More positions or dimensions than an encoding and its dot products fit in memory for.
    #[error("{what} must be at most {max}, got {got}")]
    TooLarge {
        /// `d_model` or `positions`.
        what: &'static str,
        /// The largest allowed.
        max: usize,
        /// What was asked for.
        got: usize,
    },
    /// The base is not a finite number above 1.
    #[error("base must be a finite number greater than 1, got {0}")]
    Base(f64),
}

/// Largest `d_model` of a computed encoding.
pub const MAX_D_MODEL: usize = 4096;
/// Most positions of a computed encoding.
pub const MAX_POSITIONS: usize = 4096;

/// Parameters of a sinusoidal positional encoding.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeParams {
    /// Model width D (columns of the encoding).
    pub d_model: usize,
    /// Number of positions N (rows of the encoding).
    pub positions: usize,
    /// The wavelength base, 10000 in the paper.
    pub base: f64,
    /// Channel arrangement.
    pub layout: PeLayout,
}

impl Default for PeParams {
    fn default() -> Self {
        Self { d_model: 128, positions: 64, base: 10_000.0, layout: PeLayout::Interleaved }
    }
}

impl PeParams {
    /// Checks the parameters, naming the first one out of range.
    pub fn validate(&self) -> Result<(), PeError> {
        if self.d_model == 0 || !self.d_model.is_multiple_of(2) {
            return Err(PeError::DModel(self.d_model));
        }
        if self.positions == 0 {
            return Err(PeError::Positions(self.positions));
        }
        // The encoding (positions × d_model) and its dot products (positions²) are computed in f64:
        // at these limits 134 MB each, not the terabytes a mistyped number would ask for.
        for (what, max, got) in [("d_model", MAX_D_MODEL, self.d_model), ("positions", MAX_POSITIONS, self.positions)] {
            if got > max {
                return Err(PeError::TooLarge { what, max, got });
            }
        }
        if !self.base.is_finite() || self.base <= 1.0 {
            return Err(PeError::Base(self.base));
        }
        Ok(())
    }
}

/// A positional encoding (positions × `d_model`, row-major) and its dot-product matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionalEncoding {
    /// The parameters it was made from.
    pub params: PeParams,
    /// PE, `positions × d_model`, row-major.
    pub encoding: Vec<f32>,
    /// PE · `PEᵀ`, `positions × positions`, row-major.
    pub dot: Vec<f32>,
}

/// Computes the encoding and its dot products (in f64, stored as f32).
pub fn sinusoidal(params: PeParams) -> Result<PositionalEncoding, PeError> {
    let enc = encoding_f64(params)?;
    let dot = gram(&enc, params.positions, params.d_model);
    Ok(PositionalEncoding {
        params,
        encoding: enc.iter().map(|&v| v as f32).collect(),
        dot: dot.iter().map(|&v| v as f32).collect(),
    })
}

/// The encoding alone, `positions × d_model` (computed in f64, stored as f32).
pub fn encoding(params: PeParams) -> Result<Vec<f32>, PeError> {
    Ok(encoding_f64(params)?.iter().map(|&v| v as f32).collect())
}

fn encoding_f64(params: PeParams) -> Result<Vec<f64>, PeError> {
    params.validate()?;
    let PeParams { d_model, positions, base, layout } = params;
    let half = d_model / 2;
    let mut enc = vec![0.0f64; positions * d_model];
    for p in 0..positions {
        let row = &mut enc[p * d_model..(p + 1) * d_model];
        for i in 0..half {
            let inv_timescale = match layout {
                PeLayout::Interleaved => base.powf(-(2.0 * i as f64) / d_model as f64),
                // t2t: log_timescale_increment = ln(max/min) / max(num_timescales - 1, 1).
                PeLayout::Concatenated => (-(i as f64) * base.ln() / (half.saturating_sub(1).max(1)) as f64).exp(),
            };
            let angle = p as f64 * inv_timescale;
            let (sin_col, cos_col) = match layout {
                PeLayout::Interleaved => (2 * i, 2 * i + 1),
                PeLayout::Concatenated => (i, half + i),
            };
            row[sin_col] = angle.sin();
            row[cos_col] = angle.cos();
        }
    }
    Ok(enc)
}

/// Dot products and cosine similarities between the rows of a position table (`n × d`, e.g. a
/// model's learned position embeddings), both `n × n`.
pub fn table_similarity(table: &[f32], n: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let rows: Vec<f64> = table[..n * d].iter().map(|&v| f64::from(v)).collect();
    let dot = gram(&rows, n, d);
    let norms: Vec<f64> = (0..n).map(|i| dot[i * n + i].sqrt()).collect();
    let cosine = dot
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let denom = norms[k / n] * norms[k % n];
            if denom > 0.0 { (v / denom) as f32 } else { 0.0 }
        })
        .collect();
    (dot.iter().map(|&v| v as f32).collect(), cosine)
}

/// Colour range for the dot products of a learned position table: from the minimum to the 99th
/// percentile, because a few positions (often position 0) have much larger norms than the rest and
/// would wash out the picture. None when that range is empty.
pub fn learned_dot_range(dot: &[f32]) -> Option<(f32, f32)> {
    let mut sorted = dot.to_vec();
    sorted.sort_by(f32::total_cmp);
    let (lo, hi) = (*sorted.first()?, sorted[((sorted.len() - 1) as f32 * 0.99) as usize]);
    (hi > lo).then_some((lo, hi))
}

/// `rows · rowsᵀ` of a row-major `n × d` matrix.
pub fn gram(rows: &[f64], n: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in i..n {
            let v: f64 = rows[i * d..(i + 1) * d].iter().zip(&rows[j * d..(j + 1) * d]).map(|(a, b)| a * b).sum();
            out[i * n + j] = v;
            out[j * n + i] = v;
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() < 1e-6
    }

    #[test]
    fn interleaved_matches_the_paper_formula() {
        let pe =
            sinusoidal(PeParams { d_model: 8, positions: 5, base: 10_000.0, layout: PeLayout::Interleaved }).unwrap();
        for p in 0..5 {
            for i in 0..4 {
                let angle = p as f64 / 10_000f64.powf(2.0 * i as f64 / 8.0);
                assert!(close(pe.encoding[p * 8 + 2 * i], angle.sin()));
                assert!(close(pe.encoding[p * 8 + 2 * i + 1], angle.cos()));
            }
        }
    }

    #[test]
    fn sizes_beyond_memory_are_refused_before_allocating() {
        let p = |d_model, positions| PeParams { d_model, positions, base: 10_000.0, layout: PeLayout::Interleaved };
        // 99,999,999 positions × 128 would be 102 GB of f64 (a number the app's monkey typed).
        let err = sinusoidal(p(128, 99_999_999)).unwrap_err();
        assert_eq!(err, PeError::TooLarge { what: "positions", max: MAX_POSITIONS, got: 99_999_999 });
        assert!(err.to_string().contains("positions must be at most 4096"), "{err}");
        assert!(matches!(encoding(p(1 << 20, 4)), Err(PeError::TooLarge { what: "d_model", .. })));
        assert!(sinusoidal(p(MAX_D_MODEL, 4)).is_ok() && encoding(p(4, MAX_POSITIONS)).is_ok());
    }

    #[test]
    fn concatenated_matches_tensor2tensor() {
        // get_timing_signal_1d(length=3, channels=6, min=1, max=1000).
        let pe =
            sinusoidal(PeParams { d_model: 6, positions: 3, base: 1000.0, layout: PeLayout::Concatenated }).unwrap();
        let inv = [1.0, (-(1000f64.ln()) / 2.0).exp(), (-2.0 * 1000f64.ln() / 2.0).exp()];
        for p in 0..3 {
            for i in 0..3 {
                assert!(close(pe.encoding[p * 6 + i], (p as f64 * inv[i]).sin()));
                assert!(close(pe.encoding[p * 6 + 3 + i], (p as f64 * inv[i]).cos()));
            }
        }
        // Position 0 is all zeros then all ones.
        assert_eq!(&pe.encoding[..6], &[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn dot_diagonal_is_half_d_and_symmetric() {
        for layout in [PeLayout::Interleaved, PeLayout::Concatenated] {
            let pe = sinusoidal(PeParams { d_model: 16, positions: 10, base: 10_000.0, layout }).unwrap();
            for i in 0..10 {
                // sin² + cos² = 1 for each of the D/2 pairs.
                assert!(close(pe.dot[i * 10 + i], 8.0));
                for j in 0..10 {
                    assert_eq!(pe.dot[i * 10 + j], pe.dot[j * 10 + i]);
                }
            }
            // Similarity to position 0 falls from the diagonal outwards at first.
            assert!(pe.dot[1] < pe.dot[0]);
        }
    }

    #[test]
    fn table_similarity_gives_dots_and_cosines() {
        // Rows (1, 0), (0, 2), (3, 4).
        let (dot, cos) = table_similarity(&[1.0, 0.0, 0.0, 2.0, 3.0, 4.0], 3, 2);
        assert_eq!(dot, vec![1.0, 0.0, 3.0, 0.0, 4.0, 8.0, 3.0, 8.0, 25.0]);
        assert!((cos[2] - 0.6).abs() < 1e-7 && (cos[5] - 0.8).abs() < 1e-7);
        assert!((0..3).all(|i| (cos[i * 3 + i] - 1.0).abs() < 1e-7));
        // A zero row has cosine 0, not NaN.
        let (_, cos) = table_similarity(&[0.0, 0.0, 1.0, 0.0], 2, 2);
        assert_eq!(cos, vec![0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn learned_dot_colours_stop_at_the_99th_percentile() {
        // 200 values 0..199 and one outlier: the range ends at the 99th percentile, not at 1e6.
        let mut dot: Vec<f32> = (0..200).map(|v| v as f32).collect();
        dot.push(1e6);
        assert_eq!(learned_dot_range(&dot), Some((0.0, 198.0)));
        assert_eq!(learned_dot_range(&[2.0, 2.0]), None);
        assert_eq!(learned_dot_range(&[]), None);
    }

    #[test]
    fn bad_parameters_are_named() {
        let ok = PeParams::default();
        assert_eq!(sinusoidal(PeParams { d_model: 0, ..ok }).unwrap_err(), PeError::DModel(0));
        assert_eq!(sinusoidal(PeParams { d_model: 7, ..ok }).unwrap_err(), PeError::DModel(7));
        assert_eq!(sinusoidal(PeParams { positions: 0, ..ok }).unwrap_err(), PeError::Positions(0));
        assert_eq!(sinusoidal(PeParams { base: 0.0, ..ok }).unwrap_err(), PeError::Base(0.0));
        assert_eq!(sinusoidal(PeParams { base: -5.0, ..ok }).unwrap_err(), PeError::Base(-5.0));
    }
}
