//! Activation patching: the corrupted input (sentence B) run with one activation of the clean
//! run (sentence A) put in, swept over every layer and position (or head), on the worker's side
//! thread with progress and a way to stop; its view and figure.

pub mod settings;
pub mod view;

pub use settings::PatchingSettings;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::analysis::patching::{PatchSite, Patching};
use crate::app::session::Shown;
use crate::app::slot::Slot;
use crate::app::state::{Source, View};
use crate::app::worker::{Answer, Compute, Job};
use crate::export::Table;
use crate::model::patch::{Reuse, SweepControl, SweepProgress};
use crate::model::{Interventions, LoadedModel};

/// What a sweep is of: the model, the two inputs, the two tokens as typed, the site and the
/// interventions of both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchKey {
    /// The model's folder.
    pub model: std::path::PathBuf,
    /// Sentence A.
    pub clean: String,
    /// Sentence B.
    pub corrupted: String,
    /// The answer as typed (empty: the clean run's top prediction).
    pub answer: String,
    /// The wrong token as typed (empty: the corrupted run's top prediction).
    pub wrong: String,
    /// Where.
    pub site: PatchSite,
    /// Applied to every run.
    pub interventions: Interventions,
}

/// A finished sweep with how long it took.
#[derive(Debug)]
pub struct Patched {
    /// The grid and the two runs' differences.
    pub patching: Patching,
    /// Milliseconds.
    pub elapsed_ms: f64,
}

/// A sweep as the worker hands it back.
struct Swept {
    key: PatchKey,
    result: Result<Arc<Patched>, String>,
}

/// Where a sweep in flight is: cells done and in all.
#[derive(Debug, Default)]
pub struct Progress {
    /// Cells done.
    pub done: AtomicUsize,
    /// Cells in all (0 until the two runs are made).
    pub total: AtomicUsize,
}

/// The patching view's results.
#[derive(Default)]
pub struct Feature {
    /// The sweep shown, by what it is of.
    pub slot: Slot<PatchKey, Result<Arc<Patched>, String>>,
    /// The sweep in flight's progress.
    pub progress: Arc<Progress>,
    /// Set to stop the sweep in flight (the view's Stop, or a newer sweep).
    pub cancel: Arc<AtomicBool>,
    /// Set by the view's "Sweep again" after a stopped sweep.
    pub again: AtomicBool,
    /// Why patching does not apply to what is shown (None: it does).
    pub refusal: Option<String>,
}

/// The top prediction at the last position of `text`, in the vocabulary's spelling.
fn top_token(model: &LoadedModel, text: &str, iv: &Interventions) -> Result<String, String> {
    let tokens = model.tokenizer.encode(text, None).map_err(|e| e.to_string())?.tokens;
    let last = tokens.len().checked_sub(1).ok_or("the input has no tokens")?;
    let lens = model.lens(&tokens, &[last], 1, &[], iv).map_err(|e| e.to_string())?;
    let (id, _) = lens.cell(lens.streams - 1, 0).next().ok_or("no prediction")?;
    Ok(model.tokenizer.token_of(id))
}

/// Runs the sweep `key` names, reporting to `progress`, stopped by `cancel`.
fn sweep(model: &LoadedModel, key: &PatchKey, progress: &Progress, cancel: &AtomicBool) -> Result<Patched, String> {
    let start = std::time::Instant::now();
    let iv = &key.interventions;
    let answer = if key.answer.is_empty() { top_token(model, &key.clean, iv)? } else { key.answer.clone() };
    let wrong = if key.wrong.is_empty() { top_token(model, &key.corrupted, iv)? } else { key.wrong.clone() };
    let request = model
        .patch_request((&key.clean, &key.corrupted), (&answer, &wrong), key.site, iv)
        .map_err(|e| e.to_string())?;
    let mut report = |p: SweepProgress| {
        progress.total.store(p.total, Ordering::Relaxed);
        progress.done.store(p.done, Ordering::Relaxed);
    };
    let mut control = SweepControl { progress: &mut report, cancel: Some(cancel) };
    let patching = model.patch(&request, Reuse::Changed, &mut control).map_err(|e| e.to_string())?;
    Ok(Patched { patching, elapsed_ms: start.elapsed().as_secs_f64() * 1e3 })
}

impl Feature {
    /// Asks the worker for the sweep the patching view shows, when it is open and the sweep
    /// differs from what is shown and from what is asked for; a sweep still running for other
    /// inputs is stopped.
    pub fn request(&mut self, shown: &Shown<'_>) {
        let settings = shown.settings;
        if settings.view != View::Patching {
            return;
        }
        let model = shown.model;
        self.refusal = if settings.source != Source::Pretrained {
            Some("Patching runs the loaded model: open a model (not the playground or an attention file).".into())
        } else if let Some(why) = model.and_then(|m| m.readout_refusal.as_ref()) {
            Some(crate::app::text::capitalised(why) + ".")
        } else if model.is_some_and(|m| m.seq2seq || !m.can_generate) {
            Some("Patching measures a language model's next-token logits: open a decoder with its head.".into())
        } else if !settings.pair_enabled || settings.text_pair.trim().is_empty() {
            Some(
                "Type the corrupted input as sentence B (tick “Sentence B”): the same number of tokens as sentence \
                 A, the clean input."
                    .into(),
            )
        } else {
            None
        };
        let Some(model) = model.filter(|_| self.refusal.is_none()) else { return };
        let key = PatchKey {
            model: model.dir.clone(),
            clean: settings.text.clone(),
            corrupted: settings.text_pair.clone(),
            answer: settings.patching.answer.trim().to_string(),
            wrong: settings.patching.wrong.trim().to_string(),
            site: settings.patching.site,
            interventions: settings.interventions.clone(),
        };
        if self.again.swap(false, Ordering::Relaxed) {
            self.slot.forget();
        }
        if self.slot.want(&key) {
            // A sweep of other inputs still running is of no use now.
            self.cancel.store(true, Ordering::Relaxed);
            self.cancel = Arc::new(AtomicBool::new(false));
            self.progress = Arc::new(Progress::default());
            let (progress, cancel) = (Arc::clone(&self.progress), Arc::clone(&self.cancel));
            let work = move |model: &LoadedModel| {
                let result = sweep(model, &key, &progress, &cancel).map(Arc::new);
                Swept { key, result }
            };
            // As long as many passes: on the side thread, stopped by `cancel`.
            shown.worker.send(Job::Compute(Compute::new("patching", true, work)));
        }
    }

    /// Takes a sweep the worker finished (another feature's answer is given back).
    pub fn take(&mut self, answer: Answer) -> Option<Answer> {
        match answer.take::<Swept>() {
            Ok(s) => {
                self.slot.finish(s.key, s.result);
                None
            }
            Err(other) => Some(other),
        }
    }
}

/// The sweep as a table: rows the layers, columns the positions (clean / corrupted tokens) or the
/// heads; values the logit differences or their normalised form.
pub fn grid_table(p: &Patching, model: &str, normalized: bool) -> Table {
    let g = &p.grid;
    let pretty = crate::analysis::tokens::pretty_label;
    let col_labels = if p.site.per_head() {
        (0..g.columns).map(|h| format!("H{h}")).collect()
    } else {
        (0..g.columns)
            .map(|i| {
                let (a, b) = (&p.inputs.clean_tokens[i], &p.inputs.corrupted_tokens[i]);
                if a == b { pretty(a) } else { format!("{}/{}", pretty(a), pretty(b)) }
            })
            .collect()
    };
    let (values, what) = match p.normalized().filter(|_| normalized) {
        Some(v) => (v, "normalised logit difference"),
        None => (g.logit_diff.clone(), "logit difference"),
    };
    Table {
        title: format!(
            "{model} · activation patching at {} · {what} “{}” − “{}” · clean {:.3}, corrupted {:.3}",
            p.site.name(),
            pretty(&p.inputs.answer),
            pretty(&p.inputs.wrong),
            p.clean_logit_diff,
            p.corrupted_logit_diff
        ),
        row_labels: (0..g.layers).map(|l| format!("L{l}")).collect(),
        col_labels,
        values,
    }
}
