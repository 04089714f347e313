//! Short tasks on threads of their own — native dialogs, exports, the clipboard, reading an
//! attention file — and the one channel their answers come back on.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::analysis::Run;
use crate::model::hub::CachedModel;

/// Answers of tasks run on threads of their own.
pub enum Background {
    /// An export finished.
    Exported(PathBuf, Result<(u32, u32), String>),
    /// The current figure drawn for the clipboard, or why it could not be.
    Copied(Result<egui::ColorImage, String>),
    /// A native folder dialog returned (None: cancelled or unavailable).
    PickedModel(Option<PathBuf>),
    /// A native save dialog returned.
    PickedExport(Option<PathBuf>),
    /// A native file dialog for an attention file returned.
    PickedAttention(Option<PathBuf>),
    /// An attention file was read (or why not).
    OpenedAttention(PathBuf, Result<Arc<Run>, String>),
    /// The scan of the local Hugging Face cache finished.
    CachedModels(Vec<CachedModel>),
    /// A native folder dialog for saving a trained model returned.
    PickedSave(Option<PathBuf>),
}

/// Tasks on threads of their own: the channel they answer on, and what is under way.
pub struct Tasks {
    tx: Sender<Background>,
    pub(crate) rx: Receiver<Background>,
    /// An export being written.
    pub exporting: Option<PathBuf>,
    /// An attention file being read.
    pub opening: Option<PathBuf>,
    /// An attention file picked in a dialog, opened at the next frame.
    pub(crate) pending_open: Option<PathBuf>,
}

impl Default for Tasks {
    fn default() -> Self {
        let (tx, rx) = channel();
        Self { tx, rx, exporting: None, opening: None, pending_open: None }
    }
}

impl Tasks {
    /// Where a task sends its answer.
    pub fn sender(&self) -> Sender<Background> {
        self.tx.clone()
    }

    /// Runs `dialog` on a thread of its own; its answer comes back as `answer(picked)`.
    pub(crate) fn dialog<T: Send + 'static>(
        &self,
        ctx: &egui::Context,
        dialog: impl FnOnce() -> T + Send + 'static,
        answer: fn(T) -> Background,
    ) {
        let (tx, ctx) = (self.sender(), ctx.clone());
        spawn_named("attnviz-dialog", move || {
            let _ = tx.send(answer(dialog()));
            ctx.request_repaint();
        });
    }
}

/// Runs `f` on a named thread; a failure to spawn is reported on stderr.
pub(crate) fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(f) {
        eprintln!("error: cannot start thread {name}: {e}");
    }
}
