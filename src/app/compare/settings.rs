//! The comparison view's settings (nested in the app's `Settings`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What the comparison puts beside the current run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CompareSource {
    /// Another sentence on the same model.
    #[default]
    Sentence,
    /// The faithful model (when the current run is modified) or the modified one (when not).
    Interventions,
    /// Another model folder with the same tokenizer.
    Model,
}

/// Side by side or the difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CompareMode {
    /// Two heatmaps next to each other.
    #[default]
    SideBySide,
    /// B − A as a diverging heatmap (needs the same tokens).
    Difference,
}

/// Settings of the comparison view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompareSettings {
    /// What B is.
    pub source: CompareSource,
    /// Sentence B of a sentence comparison.
    pub text_b: String,
    /// Model folder of a model comparison.
    pub model_b: Option<PathBuf>,
    /// Side by side or difference.
    pub mode: CompareMode,
}

impl Default for CompareSettings {
    fn default() -> Self {
        Self {
            source: CompareSource::Sentence,
            text_b: "The animal didn't cross the street because it was too wide.".into(),
            model_b: None,
            mode: CompareMode::SideBySide,
        }
    }
}
