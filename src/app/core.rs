//! The app's state as one struct: the settings, the session, the features, the views and what the
//! shell keeps of its frames; and the plain data the views read from it. The shell (`app::app`),
//! the shown run (`app::runs`), command handling (`app::handle`) and the exported figure
//! (`app::figure`) each add their part of its behaviour.

use std::time::Instant;

use super::data::ViewData;
use super::features::Features;
use super::session::{NO_TARGET_NOTE, Session};
use super::state::{Settings, Source, ThemeChoice};
use super::ui::Views;
use crate::analysis::Stack;

/// What the shell keeps of its frames: the theme applied, the frame time, what was saved.
#[derive(Default)]
pub(crate) struct Shell {
    /// Smoothed CPU time of a whole frame (layout, tessellation, painting), in milliseconds.
    pub(crate) frame_ms: f32,
    /// Since when background work (other than a generation writing) has been going on.
    pub(crate) busy_since: Option<Instant>,
    /// The theme last applied to the context.
    pub(crate) applied_theme: Option<ThemeChoice>,
    /// The settings last written to storage.
    pub(crate) saved: Option<Settings>,
    /// Settings changed since they were saved: as they were last seen, and since when.
    pub(crate) unsaved: Option<(Settings, Instant)>,
}

/// The desktop app.
pub struct AttnvizApp {
    /// Persisted settings.
    pub settings: Settings,
    /// The model, the shown run and what is in flight.
    pub session: Session,
    /// Each feature's own results (lens, attribution, graph, flow, comparison, lab).
    pub features: Features,
    /// Each view's own state (caches, typed text).
    pub views: Views,
    /// What only the shell keeps (frame time, theme, the settings last saved).
    pub(crate) shell: Shell,
}

/// The plain data views read this frame.
pub(crate) fn view_data<'a>(
    settings: &'a Settings,
    s: &'a Session,
    features: &'a Features,
    frame_ms: f32,
) -> ViewData<'a> {
    ViewData {
        settings,
        run: s.run.as_ref(),
        view_id: s.view_id,
        run_error: s.run_error.as_deref(),
        run_pending: s.asked.requested_run_id > s.asked.run_id,
        merging: s.run.is_none() && s.token_run.is_some(),
        inference_ms: s.inference_ms,
        model: s.model.as_ref(),
        loading: s.loading.as_deref(),
        load_error: s.load_error.as_deref(),
        embedded: s.embedded.as_deref().ok(),
        cached_models: s.cached_models.as_deref(),
        pinned: s.pinned,
        playground_error: s.playground.error.as_ref(),
        exporting: s.tasks.exporting.is_some(),
        status: s.status.as_ref(),
        frame_ms,
        derived: &s.derived,
        generation: s.generation.as_ref(),
        features,
        token_run: s.token_run.as_ref().map(|t| &*t.run),
        probe_shown: s.probe_shown,
        stack: if settings.source == Source::File {
            // A file with a decoder side is an encoder–decoder's attention.
            s.token_run.as_ref().filter(|t| t.run.decoder.is_some()).map(|_| settings.stack)
        } else {
            s.model.as_ref().filter(|m| m.seq2seq && settings.source == Source::Pretrained).map(|_| {
                let has_target = s.token_run.as_ref().is_some_and(|t| t.run.decoder.is_some());
                if has_target { settings.stack } else { Stack::Encoder }
            })
        },
        stack_note: s
            .token_run
            .as_ref()
            .filter(|t| {
                t.run.decoder.is_none()
                    && settings.source == Source::Pretrained
                    && s.model.as_ref().is_some_and(|m| m.seq2seq)
            })
            .map(|_| NO_TARGET_NOTE),
    }
}

impl AttnvizApp {
    /// The plain data the views read this frame.
    pub fn view_data(&self) -> ViewData<'_> {
        view_data(&self.settings, &self.session, &self.features, self.shell.frame_ms)
    }

    /// Shows `text` in the status bar.
    pub(crate) fn set_status(&mut self, text: impl Into<String>, is_error: bool) {
        self.session.set_status(text, is_error);
    }
}
