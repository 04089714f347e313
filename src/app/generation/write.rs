//! Writing: the session starts and stops a generation, takes its progress from the worker (its run
//! replaces the shown one) and times how the frames drew it.

use std::sync::Arc;
use std::time::Instant;

use super::{Generation, GenerationTiming};
use crate::app::session::{Session, TokenRun};
use crate::app::state::{Settings, Source};
use crate::app::worker::{GeneratedAnswer, Job};

impl Session {
    /// Stops the generation in progress; with `forget`, its later progress is dropped too (a new
    /// input replaces it).
    pub(crate) fn stop_generation(&mut self, forget: bool) {
        let s = self;
        if let Some(g) = &s.generation {
            g.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if forget && s.generation.take().is_some() {
            // "Wrote 20 tokens" no longer describes what is shown.
            if s.status.as_ref().is_some_and(|st| !st.is_error && st.text.starts_with("Wrote ")) {
                s.status = None;
            }
        }
    }

    /// Pins the newest written token of a generation's run that has just been shown, in the same
    /// frame (the generation panel follows the writing by pinning it; pinned from the panel, it
    /// would take another frame for each update).
    pub(crate) fn pin_newest_written(&mut self) {
        let s = self;
        // Until the run is shown (a merge into words may be under way).
        let (Some(run), Some(g)) = (&s.run, &mut s.generation) else { return };
        if !g.follow {
            return;
        }
        g.follow = false;
        let Some(prompt) = run.prompt_len else { return };
        let written = run.tokens.len().saturating_sub(prompt).min(g.steps.len());
        if written > 0 {
            s.pinned = Some((crate::render::Side::Query, prompt + written - 1));
        }
    }

    /// Counts a drawn frame in the generation's timing; once it has ended and everything derived
    /// from its last run is drawn (`busy`: not yet), logs the timing if `ATTNVIZ_GENERATION_LOG` is
    /// set.
    pub(crate) fn time_generation(&mut self, busy: bool) {
        let s = self;
        let Some(g) = s.generation.as_mut().filter(|g| g.timing.settled.is_none()) else { return };
        let written = s.run.as_ref().and_then(|r| r.prompt_len.map(|p| r.tokens.len().saturating_sub(p)));
        g.timing.frame(written.unwrap_or(0));
        if g.finished.is_some() && !busy {
            g.timing.settled = Some(Instant::now());
            if std::env::var_os("ATTNVIZ_GENERATION_LOG").is_some() {
                eprintln!("{}", g.timing.line(g.written));
            }
        }
    }

    /// Lets the loaded model continue the text by `max_new` tokens, streamed into the views.
    pub(crate) fn start_generation(&mut self, settings: &Settings, max_new: usize) {
        let can = self.model.as_ref().is_some_and(|m| m.can_generate || m.can_translate);
        if !can || settings.source != Source::Pretrained || max_new == 0 {
            return;
        }
        self.stop_generation(true);
        let id = self.worker.next_id();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.generation = Some(Generation {
            id,
            max_new,
            written: 0,
            steps: Arc::new(Vec::new()),
            finished: None,
            error: None,
            seconds: 0.0,
            stop: stop.clone(),
            prompt: settings.text.clone(),
            interventions: settings.interventions.clone(),
            text: None,
            timing: GenerationTiming::start(),
            follow: false,
        });
        let (text, max_prompt) = (settings.text.clone(), settings.record_tokens);
        let interventions = settings.interventions.clone();
        self.worker.send(Job::Generate { id, text, max_new, max_prompt, stop, interventions });
    }

    /// Takes a generation's progress (or its end) from the worker: its run replaces the shown one.
    pub(crate) fn on_generated(&mut self, settings: &mut Settings, id: u64, answer: GeneratedAnswer) {
        if self.generation.as_ref().is_none_or(|g| g.id != id) {
            return;
        }
        let GeneratedAnswer { result, steps, finished, seconds, target } = answer;
        let translated = self.model.as_ref().is_some_and(|m| m.seq2seq);
        if let Some(target) = target.clone().filter(|_| result.is_ok() && translated) {
            self.adopt_target(settings, target);
        }
        let Some(g) = self.generation.as_mut().filter(|g| g.id == id) else { return };
        if target.is_some() {
            g.text = target;
        }
        g.steps = steps;
        g.finished = finished;
        g.seconds = seconds;
        g.written = g.steps.len();
        match result {
            Ok(run) => {
                if let Some(stop) = finished {
                    let rate = g.written as f64 / seconds.max(1e-9);
                    let text = format!(
                        "Wrote {} tokens in {seconds:.1} s ({rate:.1} tokens/s): {}",
                        g.written,
                        stop.describe()
                    );
                    self.set_status(text, false);
                }
                settings.fit_model(run.attention.layers(), run.attention.heads());
                let source_id = self.worker.next_id();
                let s = self;
                s.token_run = Some(TokenRun { source_id, run, window: None });
                s.run_error = None;
                if let Some(g) = &mut s.generation {
                    g.follow = true;
                }
            }
            Err(e) => {
                g.error = Some(e.clone());
                self.set_status(format!("Could not continue the text: {e}"), true);
            }
        }
    }
}
