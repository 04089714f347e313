//! What the inference thread does for each kind of job, as plain functions of the model: runs
//! (pooled when long), writing and translating (streamed, paced), the readouts and the lens.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use super::{Caches, Done, GeneratedAnswer, Job, LensAnswer, LongRequest, Pace, RunSpec, TOP_K};
use crate::analysis::Run;
use crate::model::generate::{Generator, Stop, translate_with};
use crate::model::typing::PrefixRun;
use crate::model::{Interventions, LoadedModel};

/// Least time between two messages of a long input's pass (after the first layer's).
const PROGRESS_SECONDS: f64 = 1.0;

/// Runs `text` on the model `spec` names, building or loading (and caching) it if needed.
pub(super) fn run_spec(
    spec: &RunSpec,
    (text, pair, target): (&str, Option<&str>, Option<&str>),
    model: Option<&LoadedModel>,
    Caches { playground, other }: &mut Caches,
    prefix: &mut Option<PrefixRun>,
) -> Result<Arc<Run>, String> {
    let run = match spec {
        RunSpec::File(path) => return read_attention(path),
        RunSpec::Folder(path) if path.is_file() && crate::analysis::import::is_attention_file(path) => {
            return read_attention(path);
        }
        RunSpec::Pretrained(iv, _) => match model {
            // One sentence on a decoder: a keystroke runs only the tokens from the first changed.
            Some(m) if pair.is_none_or(str::is_empty) && m.decoder.is_none() => {
                m.run_reusing(prefix, text, iv).map(|(run, _)| run)
            }
            Some(m) => {
                *prefix = None;
                m.run_with(text, pair, iv).and_then(|run| with_decoder(m, run, target))
            }
            None => return Err("no model is loaded".to_string()),
        },
        RunSpec::Playground(cfg) => {
            if playground.as_ref().is_none_or(|(c, _)| c != cfg) {
                *playground = None;
                let built = cfg.build_default().map_err(|e| e.to_string())?;
                *playground = Some((cfg.clone(), built));
            }
            let (_, m) = playground.as_ref().expect("built above");
            m.run(text, pair)
        }
        RunSpec::Folder(dir) => {
            if other.as_ref().is_none_or(|(d, _)| d != dir) {
                *other = None;
                let loaded = LoadedModel::load(dir).map_err(|e| e.to_string())?;
                *other = Some((dir.clone(), loaded));
            }
            let (_, m) = other.as_ref().expect("loaded above");
            m.run(text, pair).and_then(|run| with_decoder(m, run, target))
        }
    };
    run.map(Arc::new).map_err(|e| e.to_string())
}

/// An attention file as a run.
pub fn read_attention(path: &std::path::Path) -> Result<Arc<Run>, String> {
    crate::analysis::import::read_attention_file(path).map(Arc::new).map_err(|e| e.to_string())
}

/// What [`run_long`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LongOutcome {
    /// The input is short enough to record: the caller runs it as usual.
    NotLong,
    /// Its runs (or its error) were sent.
    Sent,
    /// A newer job arrived and stopped the pass: the run is still owed.
    Stopped,
}

/// Runs a long input pooled ([`LoadedModel::run_long`]), sending its runs after each layer. A
/// newer job (`stale`: the worker has not taken every job sent) stops the pass.
pub(super) fn run_long(
    model: &LoadedModel,
    (text, pair): (&str, Option<&str>),
    (iv, long): (&Interventions, &LongRequest),
    id: u64,
    stale: &(dyn Fn() -> bool + Sync),
    send: &(dyn Fn(Done) + Sync),
) -> LongOutcome {
    let start = Instant::now();
    // A tokenizer error: the usual run says why.
    let Ok(encoded) = model.tokenizer.encode_within(text, pair.filter(|p| !p.is_empty()), None) else {
        return LongOutcome::NotLong;
    };
    if model.records(encoded.tokens.len(), long.record_tokens) {
        return LongOutcome::NotLong;
    }
    let done = |runs: crate::model::long::LongRuns| Done::Ran {
        id,
        result: Ok(Arc::new(runs.overview)),
        window: Some(Arc::new(runs.window)),
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    };
    // The first layer at once, then at most one message a second: each message makes the views
    // derive their pictures again, which would otherwise compete with the pass for the CPU.
    let mut last_sent: Option<Instant> = None;
    let mut progress = |runs| {
        if stale() {
            return false;
        }
        if last_sent.is_none_or(|t| t.elapsed().as_secs_f64() >= PROGRESS_SECONDS) {
            send(done(runs));
            last_sent = Some(Instant::now());
        }
        true
    };
    match model.run_long(&encoded.tokens, encoded.truncation.as_deref(), iv, long.window_start, &mut progress) {
        Ok(Some(runs)) => send(done(runs)),
        Ok(None) => return LongOutcome::Stopped,
        Err(e) => send(Done::Ran {
            id,
            result: Err(e.to_string()),
            window: None,
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        }),
    }
    LongOutcome::Sent
}

/// For an encoder–decoder with a target: `run` with its decoder side (what the decoder reads
/// when it writes the target); other models and an empty target leave the run as it is.
pub(super) fn with_decoder(
    model: &LoadedModel,
    mut run: Run,
    target: Option<&str>,
) -> Result<Run, crate::model::ModelError> {
    if let (Some(target), Some(_)) = (target.filter(|t| !t.trim().is_empty()), &model.decoder) {
        let (tokens, truncation) = model.decoder_input(target)?;
        run.decoder = Some(model.run_decoder(tokens, truncation, &run.last_hidden)?);
    }
    Ok(run)
}

/// What a generation that failed (`error`) after starting at `start` reports.
pub(super) fn failed_generation(id: u64, start: Instant, error: String) -> Done {
    let answer = GeneratedAnswer {
        result: Err(error),
        steps: Arc::new(Vec::new()),
        finished: Some(Stop::Stopped),
        seconds: start.elapsed().as_secs_f64(),
        target: None,
    };
    Done::Generated { id, answer }
}

/// An encoder–decoder translates `text` greedily ([`crate::model::generate::translate`]),
/// sending the run over source and target so far as it goes; paced and stopped like
/// [`generate_streaming`].
pub(super) fn translate_streaming(
    model: &LoadedModel,
    id: u64,
    (text, interventions): (&str, &Interventions),
    (max_new, _): (usize, usize),
    stop: &AtomicBool,
    jobs: &Receiver<Job>,
    send: &dyn Fn(Done) -> bool,
) -> Result<Option<Job>, ()> {
    let start = Instant::now();
    let failed = |e: String| failed_generation(id, start, e);
    let mut carried = None;
    let mut gone = false;
    let mut pace = Pace::default();
    let result = translate_with(model, text, (max_new, TOP_K), interventions, |ids, steps, encoder, decoder| {
        match jobs.try_recv() {
            Ok(job) => {
                carried = Some(job);
                return false;
            }
            Err(TryRecvError::Disconnected) => {
                gone = true;
                return false;
            }
            Err(TryRecvError::Empty) => {}
        }
        if !pace.due() {
            return !stop.load(Ordering::Relaxed);
        }
        let mut run = encoder.clone();
        run.prompt_len = Some(run.tokens.len());
        run.decoder = Some(decoder.clone());
        let answer = GeneratedAnswer {
            result: Ok(Arc::new(run)),
            steps: Arc::new(steps.to_vec()),
            finished: None,
            seconds: start.elapsed().as_secs_f64(),
            target: Some(model.tokenizer.decode(&ids[1..])),
        };
        let progress = Done::Generated { id, answer };
        if !send(progress) {
            gone = true;
            return false;
        }
        !stop.load(Ordering::Relaxed)
    });
    if gone {
        return Err(());
    }
    let done = match result {
        Ok(t) => {
            let mut run = t.run;
            run.prompt_len = Some(run.tokens.len());
            let target = run.decoder.as_ref().map(|d| model.tokenizer.decode(d.tokens.ids.get(1..).unwrap_or(&[])));
            let answer = GeneratedAnswer {
                result: Ok(Arc::new(run)),
                steps: Arc::new(t.steps),
                finished: Some(t.stop),
                seconds: start.elapsed().as_secs_f64(),
                target,
            };
            Done::Generated { id, answer }
        }
        Err(e) => failed(e.to_string()),
    };
    if send(done) { Ok(carried) } else { Err(()) }
}

/// Writes up to `max_new` tokens after `text`, sending the run so far as it goes (paced by
/// [`Pace`]: the run is assembled only for the messages sent) and one full pass at the end;
/// stops early when `stop` is set or another job arrives (returned, to be handled next). `Err`
/// when the UI is gone.
pub(super) fn generate_streaming(
    model: &LoadedModel,
    id: u64,
    (text, interventions): (&str, &Interventions),
    (max_new, max_prompt): (usize, usize),
    stop: &AtomicBool,
    jobs: &Receiver<Job>,
    send: &dyn Fn(Done) -> bool,
) -> Result<Option<Job>, ()> {
    let start = Instant::now();
    let failed = |e: crate::model::ModelError| failed_generation(id, start, e.to_string());
    let mut g = match Generator::start_modified(model, text, TOP_K, Some(max_prompt), interventions) {
        Ok(g) => g,
        Err(e) => return if send(failed(e)) { Ok(None) } else { Err(()) },
    };
    let mut carried = None;
    let mut pace = Pace::default();
    // Tokens (prompt included) of the last run sent.
    let mut shown = g.prompt_len();
    loop {
        if stop.load(Ordering::Relaxed) {
            g.stop();
        }
        match jobs.try_recv() {
            Ok(job) => {
                carried = Some(job);
                g.stop();
            }
            Err(TryRecvError::Disconnected) => return Err(()),
            Err(TryRecvError::Empty) => {}
        }
        let next = g.next(max_new);
        // The tokens written since the last message are sent when due, and before the final pass
        // (they show while it runs).
        let unsent = g.tokens().len() > shown;
        if (matches!(next, Ok(Some(_))) && pace.due()) || (matches!(next, Ok(None)) && unsent) {
            shown = g.tokens().len();
            let answer = GeneratedAnswer {
                result: Ok(Arc::new(g.partial_run())),
                steps: Arc::new(g.steps.clone()),
                finished: None,
                seconds: start.elapsed().as_secs_f64(),
                target: Some(model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..])),
            };
            let progress = Done::Generated { id, answer };
            if !send(progress) {
                return Err(());
            }
        }
        match next {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => return if send(failed(e)) { Ok(carried) } else { Err(()) },
        }
    }
    // One full pass over prompt and continuation: what the views and exports keep.
    let result = g.final_run().map(Arc::new).map_err(|e| e.to_string());
    let answer = GeneratedAnswer {
        result,
        steps: Arc::new(g.steps.clone()),
        finished: g.stopped(),
        seconds: start.elapsed().as_secs_f64(),
        target: Some(model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..])),
    };
    let done = Done::Generated { id, answer };
    if send(done) { Ok(carried) } else { Err(()) }
}

/// Computes a lens job's parts, sending each; a newer job (`stale`) stops it between parts and
/// the rest is returned (to go on later). `Err` when the UI is gone.
pub(super) fn lens_parts(
    model: &LoadedModel,
    job: Job,
    stale: &dyn Fn() -> bool,
    send: &dyn Fn(Done) -> bool,
) -> Result<Option<Job>, ()> {
    use crate::app::lens::part::{LENS_CHUNK, LENS_TOP_K, LensPart};
    let Job::Lens { id, key, tokens, column, chunks, interventions } = job else { return Ok(None) };
    let start = Instant::now();
    let (mut watched, mut notes) = (Vec::new(), Vec::new());
    for w in &key.watch {
        match model.tokenizer.single_id(w) {
            Ok(id) => watched.push((w.clone(), id)),
            Err(e) => notes.push(format!("“{w}”: {e}")),
        }
    }
    let ids: Vec<u32> = watched.iter().map(|(_, id)| *id).collect();
    let n = tokens.len();
    let mut parts: Vec<Vec<usize>> = column.into_iter().map(|p| vec![p]).collect();
    parts.extend(chunks.iter().map(|&s| (s..(s + LENS_CHUNK).min(n)).collect()));
    // One pass keeps every stream's rows; each part only reads them through the head.
    let streams = model.lens_streams(&tokens, &interventions);
    for (i, positions) in parts.iter().enumerate() {
        if i > 0 && stale() {
            let rest = Job::Lens {
                id,
                key,
                tokens,
                column: None,
                chunks: parts[i..].iter().filter_map(|p| p.first().copied()).collect(),
                interventions,
            };
            // Only grid chunks remain (a column, if asked, is always the first part).
            return Ok(Some(rest));
        }
        let result = match &streams {
            Ok(rows) => model
                .lens_from(rows, positions, LENS_TOP_K, &ids)
                .map(|lens| {
                    let named = lens.top_ids.iter().chain(lens.tracked.iter().flat_map(|t| t.ids.iter())).copied();
                    let labels = crate::app::attribution::keys::token_labels(model, named);
                    Arc::new(LensPart { lens, labels })
                })
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let failed = result.is_err();
        let answer = LensAnswer {
            result,
            watched: watched.clone(),
            notes: notes.clone(),
            finished: failed || i + 1 == parts.len(),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        };
        let done = Done::Lens { id, key: key.clone(), answer };
        if !send(done) {
            return Err(());
        }
        if failed {
            break;
        }
    }
    Ok(None)
}
