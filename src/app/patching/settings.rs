//! The patching view's settings (nested in the app's `Settings`). The clean input is sentence A,
//! the corrupted one sentence B.

use serde::{Deserialize, Serialize};

use crate::analysis::patching::PatchSite;

/// The patching view's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PatchingSettings {
    /// Where the sweep shown puts the clean activation.
    pub site: PatchSite,
    /// The token whose logit counts for, as typed (empty: the clean run's top prediction).
    pub answer: String,
    /// The token whose logit counts against (empty: the corrupted run's top prediction).
    pub wrong: String,
    /// Show each cell as a share of the way from corrupted (0) to clean (1).
    pub normalized: bool,
}

impl Default for PatchingSettings {
    fn default() -> Self {
        Self { site: PatchSite::ResidPre, answer: String::new(), wrong: String::new(), normalized: false }
    }
}
