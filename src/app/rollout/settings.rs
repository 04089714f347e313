//! The rollout view's settings (nested in the app's `Settings`).

use serde::{Deserialize, Serialize};

/// Rollout or flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum RolloutMode {
    /// Attention rollout (matrix products).
    #[default]
    Rollout,
    /// Attention flow (maximum flow through the layers).
    Flow,
}

/// The rollout view's settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RolloutSettings {
    /// Rollout or flow.
    pub mode: RolloutMode,
    /// The head view shows the rollout up to the chosen layer as a pseudo-layer.
    pub in_head_view: bool,
}
