//! The shown run: asking the worker for the run of the text and model (a keystroke's run waited
//! for when it is quick), taking its answers and the model's loads, the probe, switching between
//! the pretrained model, the playground and attention files, and the run the views show (merged
//! into words or one stack taken, on the derive thread).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::core::AttnvizApp;
use super::derive::{DeriveKey, Derived, DerivedValue, Deriver};
use super::session::{Parked, TokenRun, ViewedFrom};
use super::state::Source;
use super::worker::{Done, Job, ModelInfo, RunSpec};
use crate::analysis::long::LongView;
use crate::analysis::{Run, Stack};
use crate::model::PlaygroundConfig;

/// Random tokens in each half of the app's probe (as `attnviz heads`; fewer on a short model).
pub const PROBE_HALF: usize = 24;

impl AttnvizApp {
    /// Starts loading a model folder in the background.
    pub fn load_model(&mut self, dir: PathBuf) {
        self.session.load_model(dir);
    }

    /// Makes a checked set of playground hyperparameters the one that runs, or shows what is wrong.
    pub(crate) fn set_playground(&mut self, checked: Result<PlaygroundConfig, (&'static str, String)>) {
        let p = &mut self.session.playground;
        match checked {
            Ok(cfg) => {
                self.settings.playground = cfg.clone();
                p.active = cfg;
                p.error = None;
            }
            Err(e) => p.error = Some(e),
        }
    }

    /// Before showing `to` instead of the current source: keeps this source's layer and heads
    /// (and gives back `to`'s), and parks the pretrained model's settled run.
    pub(crate) fn leave_source(&mut self, to: Source) {
        let from = self.settings.source;
        let mine = (self.settings.layer_idx, self.settings.heads.clone());
        let s = &mut self.session;
        let sources = &mut s.sources;
        sources.selections.retain(|(source, _)| *source != from);
        sources.selections.push((from, mine));
        if let Some(i) = sources.selections.iter().position(|(source, _)| *source == to) {
            let (_, (layer_idx, heads)) = sources.selections.swap_remove(i);
            self.settings.layer_idx = layer_idx;
            self.settings.heads = heads;
        }
        if from != Source::Pretrained {
            return;
        }
        let writing = s.writing();
        s.sources.parked = None;
        if !writing
            && s.run_error.is_none()
            && let (Some(token_run), Some(input)) = (s.token_run.clone(), s.asked.shown_input.clone())
        {
            s.sources.parked = Some(Parked {
                token_run,
                input,
                generation: s.generation.clone(),
                inference_ms: s.inference_ms,
                status: s.status.clone(),
                pinned: s.pinned,
            });
        }
    }

    /// Back on the pretrained model: shows its parked run again if it is still the run of the
    /// text and model asked for (else the usual run follows).
    pub(crate) fn restore_parked(&mut self) {
        let Some(parked) = self.session.sources.parked.take() else { return };
        let wanted = self.session.run_input(&self.settings);
        if parked.input != wanted {
            return;
        }
        self.session.stop_generation(true);
        let id = self.session.worker.next_id();
        let s = &mut self.session;
        // Whatever is in flight (the playground's run) is older than this.
        s.asked.show_now(id, wanted);
        s.token_run = Some(parked.token_run);
        s.generation = parked.generation;
        s.inference_ms = parked.inference_ms;
        s.status = parked.status;
        s.pinned = parked.pinned;
        s.run_error = None;
        s.probe_shown = false;
    }

    /// Asks for a run if the input or the model differs from the last one asked for.
    pub(crate) fn request_run_if_changed(&mut self) {
        let input = self.session.run_input(&self.settings);
        if self.session.model.is_none() && matches!(input.3, RunSpec::Pretrained(..)) {
            return;
        }
        if self.session.asked.requested_input.as_ref() == Some(&input) {
            return;
        }
        let id = self.session.worker.next_id();
        self.session.stop_generation(true);
        // An edit of the shown text, nothing else changed and nothing else in flight: the worker
        // runs what changed (a decoder's prefix is reused), often quicker than a frame is drawn.
        let s = &mut self.session;
        let edit = s.asked.in_flight.is_empty()
            && s.asked.shown_input.as_ref().is_some_and(|(text, pair, target, spec)| {
                (pair, target, spec) == (&input.1, &input.2, &input.3) && *text != input.0
            });
        let keys = &mut s.keys;
        keys.edit_run = edit.then_some(id);
        keys.hold_for =
            (edit && keys.edit_run_ms.is_none_or(|ms| ms <= keys.key_wait.as_secs_f64() * 1e3)).then_some(id);
        s.asked.requested_run_id = id;
        let (text, pair, target, spec) = input.clone();
        s.worker.send(Job::Run { id, text, pair, target, spec });
        s.asked.in_flight.push((id, input.clone()));
        s.asked.requested_input = Some(input);
        s.keys.typed = Some((id, s.keys.frame_started, None));
    }

    /// Times the newest run asked for, from the frame that asked to the first frame that drew it
    /// and the first with nothing left to derive, logged if `ATTNVIZ_TYPING_LOG` is set.
    pub(crate) fn time_typing(&mut self) {
        let busy = self.is_busy();
        let s = &mut self.session;
        let Some((id, asked, mut drawn)) = s.keys.typed else { return };
        if s.asked.run_id < id {
            return;
        }
        let drawn = *drawn.get_or_insert_with(Instant::now);
        s.keys.typed = Some((id, asked, Some(drawn)));
        if busy {
            return;
        }
        s.keys.typed = None;
        if std::env::var_os("ATTNVIZ_TYPING_LOG").is_some() {
            let ms = |t: Instant| t.duration_since(asked).as_secs_f64() * 1e3;
            let tokens = s.token_run.as_ref().map_or(0, |t| t.run.tokens.len());
            eprintln!(
                "typing: tokens={tokens} run_ms={:.1} drawn_ms={:.1} settled_ms={:.1}",
                s.inference_ms,
                ms(drawn),
                ms(Instant::now())
            );
        }
    }

    /// Runs the loaded model on its seeded probe of repeated random tokens (shown until the text
    /// changes), so induction and duplicate-token heads show on any text.
    pub(crate) fn start_probe(&mut self) {
        let Some(model) = &self.session.model else { return };
        if self.settings.source != Source::Pretrained || model.seq2seq {
            self.set_status("The probe runs the pretrained decoder-only or encoder model, not the playground", true);
            return;
        }
        let half = PROBE_HALF.min(model.max_positions.saturating_sub(1) / 2).max(1);
        self.session.stop_generation(true);
        let s = &mut self.session;
        let id = s.worker.next_id();
        s.asked.probe_id = id;
        s.asked.requested_run_id = id;
        let interventions = self.settings.interventions.clone();
        s.worker.send(Job::Probe { id, half, seed: 0, interventions });
    }

    /// Keeps the shown runs in step with the model's runs, the word toggle and the stack. Word
    /// merges and an encoder–decoder's stacks are taken on the derive thread; until one is ready,
    /// no run is shown (the view says so).
    pub(crate) fn sync_view_runs(&mut self) {
        let view = (self.settings.words, self.settings.stack, self.settings.long_view);
        let s = &mut self.session;
        let compare = &mut self.features.compare;
        // The decoder's side is shown at token level (word pieces are merged on the source only).
        let wanted = s.token_run.as_ref().map(|t| viewed_from(t, view));
        if s.shown_from != wanted {
            let shown = s.token_run.as_ref().and_then(|t| shown_run(&mut s.derived, &s.deriver, t, view));
            if shown.is_some() || wanted.is_none() {
                s.run = shown;
                s.shown_from = wanted;
                s.view_id += 1;
                compare.shown_b_from = None; // B is shown at the same level as A
                if let Some(run) = s.run.as_ref() {
                    // A keystroke's or a generation's next run: what the run before had derived,
                    // when cheap (a few milliseconds), is computed for it now, so that this frame
                    // draws it whole rather than waiting on the derive thread.
                    s.derived.carry_over(s.view_id - 1, s.view_id, run);
                }
            } else if s.run.is_some() {
                // Merging: nothing stale is shown meanwhile.
                s.run = None;
                s.view_id += 1;
            }
        }
        let wanted_b = compare.token_run_b.as_ref().map(|t| viewed_from(t, view));
        if compare.shown_b_from != wanted_b {
            let shown = compare.token_run_b.as_ref().and_then(|t| shown_run(&mut s.derived, &s.deriver, t, view));
            if shown.is_some() || wanted_b.is_none() {
                compare.shown_b_from = wanted_b;
            }
            compare.run_b = shown;
        }
        // A pin past the shown tokens (another stack, a shorter target) is dropped.
        if let (Some((side, pos)), Some(run)) = (s.pinned, &s.run) {
            let count = if side == crate::render::Side::Key { run.keys().len() } else { run.tokens.len() };
            if pos >= count {
                s.pinned = None;
            }
        }
        let sources: Vec<u64> =
            [&s.token_run, &compare.token_run_b].into_iter().flatten().map(|t| t.source_id).collect();
        s.derived.retain_run(s.view_id, &sources);
    }

    /// Whether a run, a load or a background computation is still in flight.
    pub fn is_busy(&self) -> bool {
        self.is_busy_besides_writing() || self.session.writing()
    }

    /// [`Self::is_busy`] but for a generation that is writing.
    pub(crate) fn is_busy_besides_writing(&self) -> bool {
        let s = &self.session;
        s.loading.is_some()
            || s.tasks.opening.is_some()
            || s.asked.requested_run_id > s.asked.run_id
            || s.derived.any_pending()
            || self.features.is_pending()
    }

    /// Applies the worker's answers: the shown run's and the model's here, the features' in
    /// their folders.
    pub(crate) fn poll_worker(&mut self) {
        self.features.lab.poll(&self.session);
        while let Some(done) = self.session.worker.try_recv() {
            let Some(done) = self.features.take(done) else { continue };
            match done {
                Done::Installed { info, .. } => self.on_installed(info),
                Done::Loaded { dir, result, .. } => self.on_loaded(&dir, result),
                Done::Ran { id, result, window, elapsed_ms } => self.on_ran(id, result, window, elapsed_ms),
                Done::Generated { id, answer } => self.session.on_generated(&mut self.settings, id, answer),
                _ => {}
            }
        }
        while let Some((key, value)) = self.session.deriver.try_recv() {
            self.session.derived.finish(key, value, self.session.view_id);
        }
    }

    /// The training lab's network is the loaded model: the same model, further trained (its run
    /// is replaced when the new one arrives), or a new shape (the old run is dropped).
    fn on_installed(&mut self, info: ModelInfo) {
        self.features.lens.model_changed();
        self.settings.fit_model(info.layers, info.heads);
        // Interventions set on the lab's network stay with it from one evaluation to the next;
        // any others are reset (with a notice), as for a loaded model.
        let lab = std::path::Path::new("<training lab>");
        if let Some(notice) = self.settings.interventions_meet(lab, info.layers, info.heads) {
            self.set_status(notice, false);
        }
        let s = &mut self.session;
        let same = s.model.as_ref().is_some_and(|m| {
            (m.family.as_str(), m.layers, m.heads, m.hidden)
                == (info.family.as_str(), info.layers, info.heads, info.hidden)
        });
        s.model = Some(info);
        s.load_error = None;
        if !same {
            s.forget_run();
        }
        s.asked.requested_input = None;
        self.features.compare.forget_request();
    }

    /// A model load finished: the new model is shown, or the error (the previous model stays).
    fn on_loaded(&mut self, dir: &std::path::Path, result: Result<ModelInfo, String>) {
        self.session.loading = None;
        let info = match result {
            Ok(info) => info,
            Err(e) => {
                self.session.switch_on_load = false;
                let mut msg = format!("Could not load {}: {e}", dir.display());
                if self.session.model.is_none() && !self.session.is_default_model(dir) {
                    // Nothing to keep yet (e.g. a remembered folder that vanished): fall back.
                    self.settings.model_dir = None;
                    match self.session.default_model() {
                        Ok(default) => self.load_model(default),
                        Err(why) => msg = format!("{msg} · {why}"),
                    }
                }
                self.session.load_error = Some(msg.clone());
                self.set_status(msg, true);
                return;
            }
        };
        self.features.lens.model_changed();
        let reset = self.settings.interventions_meet(dir, info.layers, info.heads);
        // A model the user just loaded is the one they want to see.
        if std::mem::take(&mut self.session.switch_on_load) && self.settings.source != Source::Pretrained {
            self.settings.source = Source::Pretrained;
            // The pretrained selection kept aside was the old model's.
            self.session.sources.selections.retain(|(s, _)| *s != Source::Pretrained);
        }
        // An attention file shown (opened with the app, the model loading beside it) stays as it is.
        let file_shown = self.settings.source == Source::File;
        if !file_shown {
            self.settings.fit_model(info.layers, info.heads);
        }
        let embedded = self.session.is_default_model(dir);
        self.settings.model_dir = (!embedded).then(|| dir.to_path_buf());
        self.settings.remember_model(dir);
        let mut status = format!("Loaded {} from {}", info.name, dir.display());
        if let Some(reset) = reset {
            status = format!("{status} · {reset}");
        }
        // A network the lab trained reads only its task's words: the text becomes its task's
        // probe (what it learned to do) unless the text is already made of those words.
        if let Some(hints) = info.hints.as_deref().filter(|_| !file_shown)
            && hints.unknown_words(&self.settings.text) > 0
        {
            self.settings.text.clone_from(&hints.probe);
            status = format!("{status} · the text is its task's probe (it reads only its task's words)");
        }
        if !file_shown {
            self.views.side.model_path_input = dir.display().to_string();
            self.set_status(status, false);
        }
        self.features.compare.forget_request();
        let s = &mut self.session;
        s.model = Some(info);
        s.load_error = None;
        s.sources.parked = None;
        if !file_shown {
            // The old run belongs to the old model (its heads and layers differ).
            s.forget_run();
            s.asked.requested_input = None;
        }
    }

    /// A run finished (or a long input's pass made progress): shown unless older than the shown one.
    fn on_ran(&mut self, id: u64, result: Result<Arc<Run>, String>, window: Option<Arc<Run>>, elapsed_ms: f64) {
        let s = &mut self.session;
        if s.keys.edit_run == Some(id) {
            s.keys.edit_run_ms = Some(elapsed_ms);
        }
        // A long input's pass sends its runs layer by layer, under one id.
        let progress = id == s.asked.run_id
            && result.as_ref().is_ok_and(|r| r.long.is_some())
            && s.token_run.as_ref().is_some_and(|t| t.run.long.is_some());
        if id < s.asked.run_id || (id == s.asked.run_id && !progress) {
            return; // older than what is shown
        }
        s.probe_shown = id == s.asked.probe_id;
        if !progress {
            s.asked.shown_input = s.asked.in_flight.iter().find(|(i, _)| *i == id).map(|(_, input)| input.clone());
            s.asked.in_flight.retain(|(i, _)| *i > id);
        }
        match result {
            Ok(run) => {
                // The playground, or a run of fewer layers, has another shape (a long input's pass
                // holds the model's layers once done).
                let layers = run.long.as_ref().map_or(run.attention.layers(), |l| l.layers_total);
                self.settings.fit_model(layers, run.attention.heads());
                // A new model or text: every matrix view fits its figure in the room again.
                let renewed = self
                    .session
                    .token_run
                    .as_ref()
                    .is_none_or(|t| t.run.tokens.ids != run.tokens.ids || t.run.shown_name() != run.shown_name());
                if renewed && !progress {
                    self.settings.zoom = crate::app::state::ViewZoom::default();
                }
                let s = &mut self.session;
                let source_id = if progress { s.worker.next_id() } else { id };
                s.asked.run_id = id;
                s.inference_ms = elapsed_ms;
                if let Some((_, pos)) = s.pinned
                    && pos >= run.tokens.len()
                {
                    s.pinned = None;
                }
                s.token_run = Some(TokenRun { source_id, run, window });
                s.run_error = None;
            }
            Err(e) if matches!(&s.asked.shown_input, Some((.., RunSpec::File(_)))) => {
                // A remembered attention file that no longer reads: as a vanished model folder,
                // the pretrained model is shown and the error said.
                s.asked.run_id = id;
                self.settings.source = Source::Pretrained;
                let msg = format!("Could not open {e}");
                self.session.load_error = Some(msg.clone());
                self.set_status(msg, true);
            }
            Err(e) => {
                // No stale run of another text or model stays on screen (its banner would name
                // the wrong model): the error is shown in its place.
                s.asked.run_id = id;
                s.run_error = Some(e);
                s.token_run = None;
            }
        }
    }
}

/// What a run shown of `token` with the word toggle, the stack and the long view is made from.
fn viewed_from(token: &TokenRun, (words, stack, long): (bool, Stack, LongView)) -> ViewedFrom {
    (token.source_id, words, stack, long)
}

/// The run the views show of `token` for the word toggle and the stack: the token run itself, its
/// merge into words or one stack of an encoder–decoder run ([`crate::analysis::stack::stack_run`];
/// the decoder's side stays at token level) — if derived already; else asks the derive thread for
/// it (copying a run's matrices is no work for the UI thread). A long input shows its overview or
/// its window (pooled spans are not merged into words).
fn shown_run(
    derived: &mut Derived,
    deriver: &Deriver,
    token: &TokenRun,
    (words, stack, long): (bool, Stack, LongView),
) -> Option<Arc<Run>> {
    if token.run.long.is_some() {
        let window = token.window.as_ref().filter(|_| long == LongView::Window);
        return Some(Arc::clone(window.unwrap_or(&token.run)));
    }
    let source_id = token.source_id;
    let key = if token.run.decoder.is_some() && (stack != Stack::Encoder || !words) {
        DeriveKey::Stack { source_id, stack }
    } else if words {
        DeriveKey::Words { source_id }
    } else {
        return Some(Arc::clone(&token.run));
    };
    if let Some(DerivedValue::ShownRun(run)) = derived.get(&key) {
        return Some(Arc::clone(run));
    }
    if derived.start(&key) {
        deriver.send(key, Arc::clone(&token.run), None);
    }
    None
}
