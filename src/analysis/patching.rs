//! Activation patching as plain data: where a sweep puts the clean run's activation, and the grid
//! of logit differences it measured (`TransformerLens`' `patching` module, denoising). The sweep
//! itself runs in [`crate::model::patch`].

use serde::{Deserialize, Serialize};

/// Where a sweep puts the clean run's activation into the corrupted run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PatchSite {
    /// The residual stream entering each layer, at each position (layers × positions).
    ResidPre,
    /// The attention block's output (every head's write + the output bias, before it joins the
    /// stream; before the norm of a post-LN block), at each position (layers × positions).
    AttnOut,
    /// The MLP's write, at each position (layers × positions).
    MlpOut,
    /// Each head's output (its context vector before the output projection), at every position
    /// at once (layers × heads).
    Head,
}

impl PatchSite {
    /// Every site, in the order the command line lists them.
    pub const ALL: [Self; 4] = [Self::ResidPre, Self::AttnOut, Self::MlpOut, Self::Head];

    /// The command line's name: `resid-pre`, `attn-out`, `mlp-out`, `head`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ResidPre => "resid-pre",
            Self::AttnOut => "attn-out",
            Self::MlpOut => "mlp-out",
            Self::Head => "head",
        }
    }

    /// Whether the grid's columns are heads (else positions).
    pub fn per_head(self) -> bool {
        self == Self::Head
    }
}

/// What one sweep measured: the logit difference `logit[answer] − logit[wrong]` at the last
/// position of the corrupted input with one clean activation put in, per cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Patching {
    /// Where it patched.
    pub site: PatchSite,
    /// The two inputs and the two tokens.
    pub inputs: PatchInputs,
    /// The metric on the clean run.
    pub clean_logit_diff: f32,
    /// The metric on the corrupted run.
    pub corrupted_logit_diff: f32,
    /// The metric per cell.
    pub grid: PatchGrid,
}

/// The inputs of a sweep, as tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchInputs {
    /// The clean input's tokens.
    pub clean_tokens: Vec<String>,
    /// The corrupted input's tokens (as many).
    pub corrupted_tokens: Vec<String>,
    /// The answer token (the vocabulary's spelling).
    pub answer: String,
    /// The wrong token.
    pub wrong: String,
}

/// A sweep's cells: layers × positions, or layers × heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchGrid {
    /// Rows: the layers that ran.
    pub layers: usize,
    /// Columns: positions, or heads ([`PatchSite::per_head`]).
    pub columns: usize,
    /// `layers × columns`, row-major.
    pub logit_diff: Vec<f32>,
    /// Cells that needed a pass of their own (the others put in a value equal to the corrupted
    /// run's, so their difference is the corrupted one, bit for bit).
    pub passes: usize,
}

impl Patching {
    /// Each cell as a share of the way from corrupted to clean: `(cell − corrupted) / (clean −
    /// corrupted)` (0 = corrupted, 1 = clean), or None when the two runs' differences are equal.
    pub fn normalized(&self) -> Option<Vec<f32>> {
        let span = f64::from(self.clean_logit_diff) - f64::from(self.corrupted_logit_diff);
        let corrupted = f64::from(self.corrupted_logit_diff);
        (span != 0.0)
            .then(|| self.grid.logit_diff.iter().map(|&v| ((f64::from(v) - corrupted) / span) as f32).collect())
    }
}

impl PatchGrid {
    /// Cell `(layer, column)`.
    pub fn get(&self, layer: usize, column: usize) -> f32 {
        self.logit_diff[layer * self.columns + column]
    }

    /// The grid as rows (one per layer).
    pub fn rows(&self) -> Vec<&[f32]> {
        self.logit_diff.chunks(self.columns.max(1)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(clean: f32, corrupted: f32, cells: Vec<f32>) -> Patching {
        let inputs = PatchInputs {
            clean_tokens: vec!["a".into(), "b".into()],
            corrupted_tokens: vec!["a".into(), "c".into()],
            answer: "x".into(),
            wrong: "y".into(),
        };
        let grid = PatchGrid { layers: cells.len() / 2, columns: 2, logit_diff: cells, passes: 0 };
        Patching { site: PatchSite::ResidPre, inputs, clean_logit_diff: clean, corrupted_logit_diff: corrupted, grid }
    }

    #[test]
    fn normalized_is_zero_at_corrupted_one_at_clean_and_none_without_a_span() {
        let p = grid(3.0, -1.0, vec![-1.0, 3.0, 1.0, 5.0]);
        assert_eq!(p.normalized().unwrap(), [0.0, 1.0, 0.5, 1.5]);
        assert_eq!(p.grid.get(1, 0).to_bits(), 1.0f32.to_bits());
        assert_eq!(p.grid.rows(), [[-1.0, 3.0], [1.0, 5.0]]);
        assert!(grid(2.0, 2.0, vec![2.0, 2.0]).normalized().is_none());
        let names: Vec<&str> = PatchSite::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["resid-pre", "attn-out", "mlp-out", "head"]);
    }
}
