//! What the worker computes for the logit lens and hands back, part by part: what a lens is of,
//! a part, and the chunks the grid is computed in.

use std::collections::BTreeMap;

use crate::analysis::lens::Lens;

/// Candidates kept per lens cell (shown on hover).
pub const LENS_TOP_K: usize = 5;

/// Positions per chunk of the grid: each chunk is one pass of the model, and a newer input stops
/// the grid between two chunks.
pub const LENS_CHUNK: usize = 64;

/// What a lens is of: the token run (its id), the watched tokens as typed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LensKey {
    /// Id of the model's token-level run the lens reads.
    pub source_id: u64,
    /// Watched tokens as typed.
    pub watch: Vec<String>,
}

/// One part of the lens: some positions, every stream.
#[derive(Debug, Clone, PartialEq)]
pub struct LensPart {
    /// The lens of these positions (`lens.positions`).
    pub lens: Lens,
    /// Token labels of every id the part names (top candidates, followed tokens).
    pub labels: BTreeMap<u32, String>,
}

/// The chunks of `n` positions the grid is computed in.
pub fn lens_chunks(n: usize) -> Vec<std::ops::Range<usize>> {
    (0..n).step_by(LENS_CHUNK).map(|s| s..(s + LENS_CHUNK).min(n)).collect()
}
