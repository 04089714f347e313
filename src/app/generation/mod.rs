//! Continue the text (or translate): the model writes on the worker thread, streaming its runs
//! into every view; the panel steps through what it wrote with each step's candidates.

pub mod panel;
mod write;

use std::sync::Arc;

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
    /// The interventions it writes with (the steered model, an ablated head …).
    pub interventions: crate::model::Interventions,
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
