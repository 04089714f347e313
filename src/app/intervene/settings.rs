//! The Steer panel's settings (nested in the app's `Settings`): what the steering vector is made
//! of and how strongly it is added. The vector itself, once made, is part of the interventions.

use serde::{Deserialize, Serialize};

/// Activation addition as the Steer panel edits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SteerSettings {
    /// Whether Continue (and every view) uses the steered model.
    pub on: bool,
    /// The text steered toward.
    pub plus: String,
    /// The text steered away from.
    pub minus: String,
    /// The layer whose entering stream is steered.
    pub layer: usize,
    /// What the vector is multiplied by (negative steers the other way).
    pub scale: f32,
}

impl Default for SteerSettings {
    fn default() -> Self {
        Self { on: false, plus: "Dogs are wonderful".into(), minus: "Dogs are terrible".into(), layer: 10, scale: 1.0 }
    }
}
