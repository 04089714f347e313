//! What widgets ask for. Views never change the app's state themselves: they push a [`Command`]
//! and [`crate::app::AttnvizApp`] handles every command of a frame in one place.

use std::path::PathBuf;

pub use super::state::Setting;
use super::state::{Settings, TokenSelection, ViewZoom};

/// Something a widget asks for; handled once per frame by the app.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Change one persisted setting.
    Set(Setting),
    /// Load a model folder (keeps the current model on failure).
    LoadModel(PathBuf),
    /// Ask the OS for a model folder (native dialog, off the UI thread).
    BrowseModel,
    /// Ask the OS for a path to export to (the dialog starts at `file_name`).
    BrowseExport {
        /// File name the dialog proposes.
        file_name: String,
    },
    /// Write the current view to this path (PNG, SVG, PDF, or numbers, by extension).
    Export(PathBuf),
    /// Copy the current view's figure to the clipboard as an image.
    CopyImage,
    /// Open the export dialog.
    OpenExport,
    /// Close the export dialog.
    CloseExport,
    /// Open one head in the heatmap view.
    OpenHead {
        /// Layer index.
        layer_idx: usize,
        /// Head index.
        head_idx: usize,
    },
    /// Pin a token in the head view (None: unpin).
    Pin(Option<TokenSelection>),
    /// The playground's typed hyperparameters changed: the valid set to run, or the field at
    /// fault and why.
    Playground(Result<crate::model::PlaygroundConfig, (&'static str, String)>),
    /// A view needs derived data that is not computed yet (computed off the UI thread).
    Derive(super::derive::DeriveKey),
    /// Let the model continue the text by this many tokens (streamed; replaces the shown run).
    Continue(usize),
    /// Stop the generation in progress (what is written so far stays).
    StopGeneration,
    /// Show a seeded probe of repeated random tokens instead of the text (until the text changes).
    Probe,
    /// Open an attention file saved by other code (JSON or NPZ); on failure nothing changes.
    OpenAttention(PathBuf),
    /// Ask the OS for an attention file to open (native dialog, off the UI thread).
    BrowseAttention,
    /// The training lab.
    Train(TrainCommand),
}

/// What the training lab's panel asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainCommand {
    /// Open the lab's panel.
    Open,
    /// Close it: the run is kept (paused) to reopen; the model and text it replaced come back.
    Close,
    /// Drop the run (its network is gone unless saved).
    Discard,
    /// Train these settings from step 0 (the course's three variants when `experiment`); the
    /// views show the network being trained on the task's probe.
    Start {
        /// The settings.
        cfg: crate::train::TrainConfig,
        /// The course's experiment.
        experiment: bool,
    },
    /// Open the export dialog on the lab's plots (loss, held-out loss, metric, each head's score).
    ExportPlots,
    /// Pause the run.
    Pause,
    /// Resume it.
    Resume,
    /// End it where it is.
    Stop,
    /// Show the checkpoint of this index.
    Scrub(usize),
    /// Show the live network again.
    Live,
    /// Ask the OS for a folder to save to.
    BrowseSave,
    /// Save the network to this folder.
    Save(PathBuf),
}

/// The commands of one frame, in the order they were raised.
#[derive(Debug, Default)]
pub struct Commands(Vec<Command>);

impl Commands {
    /// Raises a command.
    pub fn push(&mut self, command: Command) {
        self.0.push(command);
    }

    /// Raises one [`Command::Set`] per setting that differs between `old` and `new` (a view edits
    /// a copy of the settings with ordinary egui widgets, then reports what changed).
    pub fn set_changed(&mut self, old: &Settings, new: &Settings) {
        self.0.extend(Setting::changes(old, new).into_iter().map(Command::Set));
    }

    /// Raises [`Setting::Zoom`] when `zoom`, one view's zoom (`field` of the settings' zooms),
    /// differs from the settings'.
    pub fn set_zoom(&mut self, settings: &Settings, field: fn(&mut ViewZoom) -> &mut Option<f32>, zoom: Option<f32>) {
        let mut zooms = settings.zoom;
        if *field(&mut zooms) != zoom {
            *field(&mut zooms) = zoom;
            self.push(Command::Set(Setting::Zoom(zooms)));
        }
    }

    /// Takes every command raised so far.
    pub fn take(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.0)
    }

    /// The commands raised so far.
    pub fn as_slice(&self) -> &[Command] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_exactly_the_edited_fields_and_apply_restores_them() {
        let old = Settings::default();
        let mut new = old.clone();
        new.layer_idx = 3;
        new.words = true;
        let changes = Setting::changes(&old, &new);
        assert_eq!(changes, [Setting::Layer(3), Setting::Words(true)]);
        let mut applied = old.clone();
        for c in changes {
            c.apply(&mut applied);
        }
        assert_eq!(applied, new);
        assert!(Setting::changes(&old, &old).is_empty());
    }
}
