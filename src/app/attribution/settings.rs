//! The logit attribution view's settings (nested in the app's `Settings`).

use serde::{Deserialize, Serialize};

/// The logit attribution view's settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AttributionSettings {
    /// The position whose prediction is attributed (None: the last token).
    pub position: Option<usize>,
    /// The token whose logit is attributed, as typed (empty: the model's top prediction).
    pub target: String,
    /// A token subtracted from the target (empty: none): the attribution of "A − B".
    pub versus: String,
    /// The head whose write's promoted and suppressed tokens are shown.
    pub head: Option<(usize, usize)>,
}
