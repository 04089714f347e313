//! The contribution graph view's settings (nested in the app's `Settings`).

use serde::{Deserialize, Serialize};

/// The contribution graph view's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphSettings {
    /// The position whose prediction the graph traces (None: the last token).
    pub position: Option<usize>,
    /// Edges below this proportion are left out.
    pub threshold: f32,
    /// The head selected on an attention edge: layer, head, and the token it writes to.
    pub head: Option<(usize, usize, usize)>,
}

impl Default for GraphSettings {
    fn default() -> Self {
        Self { position: None, threshold: 0.04, head: None }
    }
}
