//! The logit lens view's settings (nested in the app's `Settings`).

use serde::{Deserialize, Serialize};

/// What a logit-lens cell shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LensMode {
    /// The top token of the stream and its probability.
    #[default]
    Probability,
    /// The rank of one followed token (the model's final prediction, or a watched token), as
    /// in Ecco's rank mode.
    Rank,
}

/// The logit lens view's settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LensSettings {
    /// Probability or rank in each cell.
    pub mode: LensMode,
    /// Tokens followed across layers (" Paris", or as the vocabulary spells it, `ĠLondon`).
    pub watch: Vec<String>,
    /// Which followed token the rank mode shows: 0 the final prediction, `i` the `i`-th watched.
    pub rank_of: usize,
    /// The position selected (None: the last token).
    pub position: Option<usize>,
}
