//! Continue the text (or translate): the model writes on the worker thread, streaming its runs
//! into every view; the panel steps through what it wrote with each step's candidates.

pub mod panel;

use std::sync::Arc;
use std::time::Instant;

use crate::app::app::AttnvizApp;
use crate::app::session::TokenRun;
use crate::app::state::Source;
use crate::app::worker::{GeneratedAnswer, Job};

/// A generation: the model continuing the text, streamed into the views.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Request id.
    pub id: u64,
    /// Tokens asked for.
    pub max_new: usize,
    /// Tokens written so far.
    pub written: usize,
    /// Each step's candidates (step `i` wrote token `prompt_len + i`).
    pub steps: Arc<Vec<Vec<crate::model::generate::Candidate>>>,
    /// Why it stopped, once it has.
    pub finished: Option<crate::model::generate::Stop>,
    /// Why it failed.
    pub error: Option<String>,
    /// Seconds spent writing.
    pub seconds: f64,
    /// The prompt (or a translation's source) as typed.
    pub prompt: String,
    /// What was written so far, decoded by the tokenizer (a continuation: what follows the prompt;
    /// a translation: the target).
    pub text: Option<String>,
    /// Set to stop the worker.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    /// When the views drew what it wrote (the Continue rate as the user sees it).
    pub timing: GenerationTiming,
    /// A run of it arrived: its newest written token is pinned when the run is shown.
    pub follow: bool,
}

/// When the frames drew a generation's tokens: the app's writing rate as seen on screen, logged
/// to stderr when it ends if `ATTNVIZ_GENERATION_LOG` is set (`scripts/bench-continue.sh`).
#[derive(Debug, Clone, Copy)]
pub struct GenerationTiming {
    /// When Continue was pressed.
    pub started: std::time::Instant,
    /// The first frame that drew a written token.
    pub first_drawn: Option<std::time::Instant>,
    /// The last frame that drew more written tokens than the frame before.
    pub last_drawn: Option<std::time::Instant>,
    /// Written tokens the last such frame drew.
    pub drawn: usize,
    /// Frames drawn while it wrote.
    pub frames: usize,
    /// Frames that drew more written tokens than the frame before.
    pub advances: usize,
    /// The first frame after the end with nothing left to derive (the final run drawn).
    pub settled: Option<std::time::Instant>,
}

impl GenerationTiming {
    /// Timing of a generation that starts now.
    pub fn start() -> Self {
        Self {
            started: std::time::Instant::now(),
            first_drawn: None,
            last_drawn: None,
            drawn: 0,
            frames: 0,
            advances: 0,
            settled: None,
        }
    }

    /// Counts a frame that drew `written` written tokens.
    pub fn frame(&mut self, written: usize) {
        self.frames += 1;
        if written > self.drawn {
            let now = std::time::Instant::now();
            self.first_drawn.get_or_insert(now);
            self.last_drawn = Some(now);
            self.drawn = written;
            self.advances += 1;
        }
    }

    /// One line: tokens written, seconds from Continue until the final run was drawn settled, tokens
    /// per second end to end (prompt pass and final pass included) and while streaming (first to
    /// last token drawn, as `attnviz bench --generate` counts), frames drawn and frames that showed
    /// a new token.
    pub fn line(&self, written: usize) -> String {
        let secs = |t: Option<std::time::Instant>, from: std::time::Instant| {
            t.map_or(0.0, |t| t.duration_since(from).as_secs_f64())
        };
        let total = secs(self.settled, self.started);
        let first = secs(self.first_drawn, self.started);
        let stream = self.first_drawn.map_or(0.0, |f| secs(self.last_drawn, f));
        let rate = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
        format!(
            "continue: written={written} drawn={} seconds={total:.3} first_token_s={first:.3} \
             end_to_end_tokens_per_s={:.2} streaming_tokens_per_s={:.2} frames={} frames_with_new_tokens={}",
            self.drawn,
            rate(written as f64, total),
            rate(self.drawn.saturating_sub(1) as f64, stream),
            self.frames,
            self.advances
        )
    }
}

impl AttnvizApp {
    /// Stops the generation in progress; with `forget`, its later progress is dropped too (a new
    /// input replaces it).
    pub(crate) fn stop_generation(&mut self, forget: bool) {
        let s = &mut self.session;
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
        let s = &mut self.session;
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
    /// from its last run is drawn, logs the timing if `ATTNVIZ_GENERATION_LOG` is set.
    pub(crate) fn time_generation(&mut self) {
        let busy = self.is_busy();
        let s = &mut self.session;
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
    pub(crate) fn start_generation(&mut self, max_new: usize) {
        let can = self.session.model.as_ref().is_some_and(|m| m.can_generate || m.can_translate);
        if !can || self.settings.source != Source::Pretrained || max_new == 0 {
            return;
        }
        self.stop_generation(true);
        let id = self.session.worker.next_id();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.session.generation = Some(Generation {
            id,
            max_new,
            written: 0,
            steps: Arc::new(Vec::new()),
            finished: None,
            error: None,
            seconds: 0.0,
            stop: stop.clone(),
            prompt: self.settings.text.clone(),
            text: None,
            timing: GenerationTiming::start(),
            follow: false,
        });
        let (text, max_prompt) = (self.settings.text.clone(), self.settings.record_tokens);
        let interventions = self.settings.interventions.clone();
        self.session.worker.send(Job::Generate { id, text, max_new, max_prompt, stop, interventions });
    }

    /// Takes a generation's progress (or its end) from the worker: its run replaces the shown one.
    pub(crate) fn on_generated(&mut self, id: u64, answer: GeneratedAnswer) {
        if self.session.generation.as_ref().is_none_or(|g| g.id != id) {
            return;
        }
        let GeneratedAnswer { result, steps, finished, seconds, target } = answer;
        let translated = self.session.model.as_ref().is_some_and(|m| m.seq2seq);
        if let Some(target) = target.clone().filter(|_| result.is_ok() && translated) {
            self.adopt_target(target);
        }
        let Some(g) = self.session.generation.as_mut().filter(|g| g.id == id) else { return };
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
                self.settings.fit_model(run.attention.layers(), run.attention.heads());
                let source_id = self.session.worker.next_id();
                let s = &mut self.session;
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
