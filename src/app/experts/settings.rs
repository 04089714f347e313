//! The experts view's settings (nested in the app's `Settings`).

use serde::{Deserialize, Serialize};

/// The experts view's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExpertsSettings {
    /// The token whose route through the layers is shown (None: none picked).
    pub token: Option<usize>,
}
