//! The inference thread: loads models and runs them, off the UI thread. The newest request wins:
//! queued runs are coalesced, and the UI drops results older than what it shows.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::analysis::Run;
use crate::analysis::pe::table_similarity;
use crate::model::generate::{Candidate, Generator, Stop, translate_with};
use crate::model::typing::PrefixRun;
use crate::model::{Interventions, LoadedModel, PlaygroundConfig};

/// Candidates kept per generation step.
pub const TOP_K: usize = 8;

/// Idle time after a run kept for the next keystroke before the worker readies the buffers that
/// keystroke takes ([`PrefixRun::prepare_next`]): by then the app has drawn the run and let go of
/// the one before, whose blocks serve, so that only the first keystroke after a whole pass costs
/// fresh pages here, not every keystroke.
const PREPARE_AFTER: Duration = Duration::from_millis(300);

/// Least time between two messages of a long input's pass (after the first layer's).
const PROGRESS_SECONDS: f64 = 1.0;

/// Least time between two progress messages of a generation (after the first token's): each one
/// makes the views show a new run — a frame or more, which on two cores takes the CPU from the
/// writing — so tokens written meanwhile travel together, about ten updates a second.
pub const STREAM_SECONDS: f64 = 0.1;

/// When a generation's next progress message is due: its first token at once, then at most one
/// message every [`STREAM_SECONDS`].
#[derive(Debug, Default)]
struct Pace {
    last_sent: Option<Instant>,
}

impl Pace {
    /// Whether a message is due now (and, if so, counts it as sent).
    fn due(&mut self) -> bool {
        let due = self.last_sent.is_none_or(|t| t.elapsed().as_secs_f64() >= STREAM_SECONDS);
        if due {
            self.last_sent = Some(Instant::now());
        }
        due
    }
}

/// Most positions whose similarities are computed (the first ones of a longer table).
const MAX_SIMILARITY_POSITIONS: usize = 1024;

/// Dot products and cosine similarities between a model's learned position embeddings.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionSimilarity {
    /// Number of positions compared (rows and columns).
    pub positions: usize,
    /// Length of the model's whole position table.
    pub table_positions: usize,
    /// `pe_i · pe_j`, `positions × positions` (shared with export figures).
    pub dot: Arc<Vec<f32>>,
    /// cos(`pe_i`, `pe_j`), same layout.
    pub cosine: Arc<Vec<f32>>,
}

/// What the loaded model is, for the side panel.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Display name.
    pub name: String,
    /// Folder it came from.
    pub dir: PathBuf,
    /// The family (`model_type`).
    pub family: String,
    /// Number of layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Model width.
    pub hidden: usize,
    /// Longest input in tokens.
    pub max_positions: usize,
    /// Similarities of the learned position table (None when the model has none).
    pub positions: Option<Arc<PositionSimilarity>>,
    /// Key/value heads (fewer than `heads` with grouped-query attention).
    pub kv_heads: usize,
    /// Whether it can continue a text (a causal language model with its head).
    pub can_generate: bool,
    /// Whether it is an encoder–decoder (BART, Marian, T5…): it reads a target too.
    pub seq2seq: bool,
    /// Whether it can translate (an encoder–decoder with its language-model head).
    pub can_translate: bool,
    /// For GGUF weights: what they were ("GGUF `Q4_1` (210), …, dequantised to f32").
    pub quantization: Option<String>,
    /// Why the logit lens and attribution do not apply (None: they do).
    pub readout_refusal: Option<String>,
    /// Why the contribution graph does not apply (None: it does).
    pub contribution_refusal: Option<String>,
}

impl ModelInfo {
    fn of(model: &LoadedModel) -> Self {
        let desc = model.description();
        let positions = model.net.position_table().map(|table| {
            let width = desc.embedding.width;
            let rows = table.len() / width.max(1);
            // The panel shows at most this many positions; a long table would cost n² memory.
            let n = rows.min(MAX_SIMILARITY_POSITIONS);
            let (dot, cosine) = table_similarity(&table, n, width);
            let (dot, cosine) = (Arc::new(dot), Arc::new(cosine));
            Arc::new(PositionSimilarity { positions: n, table_positions: rows, dot, cosine })
        });
        Self {
            positions,
            name: model.name.clone(),
            family: desc.family.clone(),
            dir: model.dir.clone(),
            layers: desc.layers,
            heads: desc.heads,
            hidden: desc.hidden,
            max_positions: desc.max_len,
            kv_heads: desc.kv_heads,
            can_generate: desc.causal && model.decoder.is_none() && model.net.has_lm_head(),
            seq2seq: model.decoder.is_some(),
            can_translate: model.decoder.as_ref().is_some_and(|d| d.net.has_lm_head()),
            quantization: model.quantization.clone(),
            readout_refusal: model.readout_refusal(),
            contribution_refusal: model.contribution_refusal(),
        }
    }
}

/// A request to the worker.
#[derive(Debug, Clone)]
pub enum Job {
    /// Load a model folder; on failure the current model stays.
    Load {
        /// Request id.
        id: u64,
        /// The folder.
        dir: PathBuf,
    },
    /// Make `model` the loaded model (the training lab's network); answered by [`Done::Installed`].
    Install {
        /// Request id.
        id: u64,
        /// The model.
        model: Arc<LoadedModel>,
    },
    /// Run the comparison's second input (B); its result comes back as [`Done::Compared`].
    Compare {
        /// Request id; larger is newer.
        id: u64,
        /// Sentence A of input B.
        text: String,
        /// Sentence B of input B.
        pair: Option<String>,
        /// The target an encoder–decoder's decoder reads.
        target: Option<String>,
        /// Which model.
        spec: RunSpec,
    },
    /// Continue `text` with the loaded model, greedily, streaming each token as
    /// [`Done::Generated`]; stops after `max_new` tokens, at the end-of-sequence token, when
    /// `stop` is set, or when another job arrives.
    Generate {
        /// Request id.
        id: u64,
        /// The prompt.
        text: String,
        /// Most tokens to write.
        max_new: usize,
        /// Longest prompt (the app's "Record up to"; longer ones are cut with a notice).
        max_prompt: usize,
        /// Set by the UI to stop.
        stop: Arc<AtomicBool>,
        /// The interventions of the model shown: the modified model writes.
        interventions: Interventions,
    },
    /// The logit lens of `tokens`: first the column of `column` (if any), then the grid chunks
    /// starting at `chunks` ([`crate::app::lens::lens_chunks`]), each sent as [`Done::Lens`]. A
    /// newer job stops it between two parts; it goes on after that job unless a newer lens
    /// replaces it.
    Lens {
        /// Request id.
        id: u64,
        /// What the lens is of.
        key: crate::app::lens::LensKey,
        /// The token-level input.
        tokens: Arc<crate::analysis::tokens::Tokens>,
        /// A position computed first, alone.
        column: Option<usize>,
        /// Start positions of the grid chunks to compute.
        chunks: Vec<usize>,
        /// The interventions the run was made with.
        interventions: Interventions,
    },
    /// Direct logit attribution at one position ([`Done::Attributed`]).
    Attribute {
        /// Request id.
        id: u64,
        /// What it is of (target and versus as typed).
        key: crate::app::readout::DlaKey,
        /// The token-level input.
        tokens: Arc<crate::analysis::tokens::Tokens>,
        /// The interventions the run was made with.
        interventions: Interventions,
    },
    /// The tokens one head's write promotes and suppresses ([`Done::Effect`]).
    HeadEffect {
        /// Request id.
        id: u64,
        /// What it is of.
        key: crate::app::readout::EffectKey,
        /// The token-level input.
        tokens: Arc<crate::analysis::tokens::Tokens>,
        /// The interventions the run was made with.
        interventions: Interventions,
    },
    /// The contribution graph of a token run ([`Done::Graph`]).
    Contributions {
        /// Request id.
        id: u64,
        /// Id of the token run.
        source_id: u64,
        /// The token-level input.
        tokens: Arc<crate::analysis::tokens::Tokens>,
        /// The interventions the run was made with.
        interventions: Interventions,
    },
    /// Run the loaded model on its seeded probe of repeated random tokens
    /// ([`LoadedModel::probe_tokens`]); the result comes back as [`Done::Ran`].
    Probe {
        /// Request id; larger is newer.
        id: u64,
        /// Random tokens in each half.
        half: usize,
        /// Seed.
        seed: u64,
        /// Interventions.
        interventions: Interventions,
    },
    /// Run a model on an input.
    Run {
        /// Request id; larger is newer.
        id: u64,
        /// Sentence A.
        text: String,
        /// Sentence B.
        pair: Option<String>,
        /// The target an encoder–decoder's decoder reads (ignored by other models).
        target: Option<String>,
        /// Which model, and how it is modified.
        spec: RunSpec,
    },
}

/// How the app runs an input too long to record at token level ([`crate::analysis::long`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongRequest {
    /// Longest input recorded at token level (longer ones are pooled).
    pub record_tokens: usize,
    /// First token of the window shown at token level (None: the last tokens).
    pub window_start: Option<usize>,
}

/// Which model a run uses.
#[derive(Debug, Clone, PartialEq)]
pub enum RunSpec {
    /// The loaded model, with these interventions (the default: faithful); with a
    /// [`LongRequest`], an input too long to record is pooled instead of cut.
    Pretrained(Interventions, Option<LongRequest>),
    /// The playground encoder with these (valid) hyperparameters.
    Playground(PlaygroundConfig),
    /// Another model folder, faithful (comparison runs only; the model is cached), or an
    /// attention file.
    Folder(PathBuf),
    /// An attention file saved by other code ([`crate::analysis::import`]).
    File(PathBuf),
}

/// A finished job.
#[derive(Debug)]
pub enum Done {
    /// A model handed over by [`Job::Install`] is the loaded one.
    Installed {
        /// Request id.
        id: u64,
        /// What it is.
        info: ModelInfo,
    },
    /// A model load finished.
    Loaded {
        /// Request id.
        id: u64,
        /// The folder asked for.
        dir: PathBuf,
        /// The new model, or why it failed.
        result: Result<ModelInfo, String>,
    },
    /// A run finished — or, for a long input, made progress: then it comes once per layer (the
    /// run holding the layers done so far), the last one complete.
    Ran {
        /// Request id.
        id: u64,
        /// The run, or why it failed (for a long input: its overview).
        result: Result<Arc<Run>, String>,
        /// For a long input: the window at token level.
        window: Option<Arc<Run>>,
        /// Time spent in tokenizer + model (so far).
        elapsed_ms: f64,
    },
    /// A generation made progress: the run so far (prompt and the tokens written), each step's
    /// candidates; `finished` once it stopped (then `run` is one full pass over everything).
    Generated {
        /// Request id.
        id: u64,
        /// Prompt and continuation so far, or why it failed.
        result: Result<Arc<Run>, String>,
        /// The candidates of each step (step `i` wrote token `prompt_len + i`).
        steps: Arc<Vec<Vec<Candidate>>>,
        /// Why it stopped, once it has.
        finished: Option<Stop>,
        /// Seconds spent writing so far.
        seconds: f64,
        /// What was written so far, decoded by the tokenizer: for a translation the target (it
        /// fills the Target box), for a continuation what follows the prompt.
        target: Option<String>,
    },
    /// A part of a logit lens is computed (or the lens failed).
    Lens {
        /// Request id.
        id: u64,
        /// What it is of.
        key: crate::app::lens::LensKey,
        /// The part, or why the lens failed.
        result: Result<Arc<crate::app::lens::LensPart>, String>,
        /// The watched tokens found, with their ids.
        watched: Vec<(String, u32)>,
        /// Why some watched tokens were left out.
        notes: Vec<String>,
        /// Whether this is the job's last part.
        finished: bool,
        /// Milliseconds since the job started.
        elapsed_ms: f64,
    },
    /// An attribution finished.
    Attributed {
        /// What it is of.
        key: crate::app::readout::DlaKey,
        /// The attribution, or why there is none.
        result: Result<Arc<crate::analysis::attribution::Attribution>, String>,
        /// Milliseconds it took.
        elapsed_ms: f64,
    },
    /// A contribution graph finished.
    Graph {
        /// Id of the token run it is of.
        source_id: u64,
        /// The graph, or why there is none.
        result: Result<Arc<crate::app::readout::GraphShown>, String>,
        /// Milliseconds it took.
        elapsed_ms: f64,
    },
    /// A head's effect finished.
    Effect {
        /// What it is of.
        key: crate::app::readout::EffectKey,
        /// The effect, or why there is none.
        result: Result<Arc<crate::app::readout::EffectShown>, String>,
    },
    /// A comparison run finished.
    Compared {
        /// Request id.
        id: u64,
        /// The run, or why it failed.
        result: Result<Arc<Run>, String>,
    },
}

/// Runs `text` on the model `spec` names, building or loading (and caching) it if needed.
fn run_spec(
    spec: &RunSpec,
    (text, pair, target): (&str, Option<&str>, Option<&str>),
    model: Option<&LoadedModel>,
    playground: &mut Option<(PlaygroundConfig, LoadedModel)>,
    other: &mut Option<(PathBuf, LoadedModel)>,
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
enum LongOutcome {
    /// The input is short enough to record: the caller runs it as usual.
    NotLong,
    /// Its runs (or its error) were sent.
    Sent,
    /// A newer job arrived and stopped the pass: the run is still owed.
    Stopped,
}

/// Runs a long input pooled ([`LoadedModel::run_long`]), sending its runs after each layer. A
/// newer job (`stale`: the worker has not taken every job sent) stops the pass.
fn run_long(
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
fn with_decoder(model: &LoadedModel, mut run: Run, target: Option<&str>) -> Result<Run, crate::model::ModelError> {
    if let (Some(target), Some(_)) = (target.filter(|t| !t.trim().is_empty()), &model.decoder) {
        let (tokens, truncation) = model.decoder_input(target)?;
        run.decoder = Some(model.run_decoder(tokens, truncation, &run.last_hidden)?);
    }
    Ok(run)
}

/// What a generation that failed (`error`) after starting at `start` reports.
fn failed_generation(id: u64, start: Instant, error: String) -> Done {
    Done::Generated {
        id,
        result: Err(error),
        steps: Arc::new(Vec::new()),
        finished: Some(Stop::Stopped),
        seconds: start.elapsed().as_secs_f64(),
        target: None,
    }
}

/// An encoder–decoder translates `text` greedily ([`crate::model::generate::translate`]),
/// sending the run over source and target so far as it goes; paced and stopped like
/// [`generate_streaming`].
fn translate_streaming(
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
        let progress = Done::Generated {
            id,
            result: Ok(Arc::new(run)),
            steps: Arc::new(steps.to_vec()),
            finished: None,
            seconds: start.elapsed().as_secs_f64(),
            target: Some(model.tokenizer.decode(&ids[1..])),
        };
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
            Done::Generated {
                id,
                result: Ok(Arc::new(run)),
                steps: Arc::new(t.steps),
                finished: Some(t.stop),
                seconds: start.elapsed().as_secs_f64(),
                target,
            }
        }
        Err(e) => failed(e.to_string()),
    };
    if send(done) { Ok(carried) } else { Err(()) }
}

/// Writes up to `max_new` tokens after `text`, sending the run so far as it goes (paced by
/// [`Pace`]: the run is assembled only for the messages sent) and one full pass at the end;
/// stops early when `stop` is set or another job arrives (returned, to be handled next). `Err`
/// when the UI is gone.
fn generate_streaming(
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
            let progress = Done::Generated {
                id,
                result: Ok(Arc::new(g.partial_run())),
                steps: Arc::new(g.steps.clone()),
                finished: None,
                seconds: start.elapsed().as_secs_f64(),
                target: Some(model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..])),
            };
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
    let done = Done::Generated {
        id,
        result,
        steps: Arc::new(g.steps.clone()),
        finished: g.stopped(),
        seconds: start.elapsed().as_secs_f64(),
        target: Some(model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..])),
    };
    if send(done) { Ok(carried) } else { Err(()) }
}

/// Runs an attribution or head-effect job.
fn readout_job(model: &LoadedModel, job: Job) -> Done {
    let start = Instant::now();
    let id_of = |text: &str| -> Result<Option<u32>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        model.tokenizer.single_id(text).map(Some).map_err(|e| format!("“{text}”: {e}"))
    };
    match job {
        Job::HeadEffect { key, tokens, interventions, .. } => {
            let k = crate::app::readout::EFFECT_K;
            let result = model
                .head_effect(&tokens, key.position, key.head, k, &interventions)
                .map(|e| {
                    let label = |list: Vec<(u32, f32)>| {
                        list.into_iter()
                            .map(|(t, v)| (crate::analysis::tokens::pretty_label(&model.tokenizer.token_of(t)), v))
                            .collect()
                    };
                    Arc::new(crate::app::readout::EffectShown {
                        promoted: label(e.promoted),
                        suppressed: label(e.suppressed),
                    })
                })
                .map_err(|e| e.to_string());
            Done::Effect { key, result }
        }
        Job::Attribute { key, tokens, interventions, .. } => {
            let result = id_of(&key.target).and_then(|target| {
                let versus = id_of(&key.versus)?;
                model
                    .attribute(&tokens, key.position, target, versus, &interventions)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            });
            Done::Attributed { key, result, elapsed_ms: start.elapsed().as_secs_f64() * 1e3 }
        }
        Job::Contributions { source_id, tokens, interventions, .. } => {
            let result = model
                .contributions(&tokens, &interventions)
                .map(|run| {
                    let named =
                        run.lens.iter().flat_map(|l| l.top_ids.iter().copied()).chain(run.mid_top.iter().map(|t| t.0));
                    let labels = crate::app::readout::token_labels(model, named.collect::<Vec<_>>());
                    Arc::new(crate::app::readout::GraphShown { run, labels })
                })
                .map_err(|e| e.to_string());
            Done::Graph { source_id, result, elapsed_ms: start.elapsed().as_secs_f64() * 1e3 }
        }
        _ => unreachable!("only readout jobs"),
    }
}

/// Computes a lens job's parts, sending each; a newer job (`stale`) stops it between parts and
/// the rest is returned (to go on later). `Err` when the UI is gone.
fn lens_parts(
    model: &LoadedModel,
    job: Job,
    stale: &dyn Fn() -> bool,
    send: &dyn Fn(Done) -> bool,
) -> Result<Option<Job>, ()> {
    use crate::app::lens::{LENS_CHUNK, LENS_TOP_K, LensPart};
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
                    let labels = crate::app::readout::token_labels(model, named);
                    Arc::new(LensPart { lens, labels })
                })
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let failed = result.is_err();
        let done = Done::Lens {
            id,
            key: key.clone(),
            result,
            watched: watched.clone(),
            notes: notes.clone(),
            finished: failed || i + 1 == parts.len(),
            elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
        };
        if !send(done) {
            return Err(());
        }
        if failed {
            break;
        }
    }
    Ok(None)
}

/// Handle to the named inference thread.
pub struct Worker {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    /// Messages taken off `done` while waiting for a run ([`Self::wait_for_run`]), handed out
    /// first by [`Self::try_recv`].
    held: RefCell<VecDeque<Done>>,
    /// Jobs sent so far (counted before each is sent): a long pass stops when the worker has
    /// not taken them all.
    sent: Arc<AtomicU64>,
}

impl Worker {
    /// Starts the thread; `wake` is called after each message (to repaint the UI), with `true`
    /// for a generation's progress (one frame shows it; the next message comes soon) and `false`
    /// for everything else.
    pub fn spawn(wake: impl Fn(bool) + Send + Sync + 'static) -> std::io::Result<Self> {
        let wake: Arc<dyn Fn(bool) + Send + Sync> = Arc::new(wake);
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let (graph_tx, graph_rx) = channel::<(Arc<LoadedModel>, Job)>();
        let (graph_done, graph_wake) = (done_tx.clone(), Arc::clone(&wake));
        std::thread::Builder::new().name("attnviz-graph".into()).spawn(move || {
            while let Ok(mut next) = graph_rx.recv() {
                // Only the newest graph asked for is computed.
                while let Ok(newer) = graph_rx.try_recv() {
                    next = newer;
                }
                let (model, job) = next;
                if graph_done.send(readout_job(&model, job)).is_err() {
                    return;
                }
                graph_wake(false);
            }
        })?;
        let sent = Arc::new(AtomicU64::new(0));
        let sent_seen = Arc::clone(&sent);
        std::thread::Builder::new().name("attnviz-inference".into()).spawn(move || {
            // Jobs taken off the queue so far.
            let mut taken = 0u64;
            let mut model: Option<Arc<LoadedModel>> = None;
            // The playground model last built, reused while its hyperparameters stay the same.
            let mut playground: Option<(PlaygroundConfig, LoadedModel)> = None;
            // The comparison's other model folder, kept while it stays the same.
            let mut other: Option<(PathBuf, LoadedModel)> = None;
            // The last run of the loaded model, kept so that a keystroke runs only what changed.
            let mut prefix: Option<PrefixRun> = None;
            // A job that arrived while a generation was writing (it stopped the generation).
            let mut carried: Option<Job> = None;
            // Whether to ready what the next keystroke takes once idle ([`PrefixRun::prepare_next`]).
            let mut prepare = false;
            // A long input's run stopped by another job: run again after a comparison, unless a
            // newer run replaces it (a generation or a model load replaces what is shown anyway).
            let mut owed: Option<Job> = None;
            // A lens stopped by another job: its remaining parts, unless a newer lens replaces it.
            let mut owed_lens: Option<Job> = None;
            loop {
                let first = match carried.take() {
                    Some(job) => job,
                    None => match job_rx.recv_timeout(if prepare { PREPARE_AFTER } else { Duration::MAX }) {
                        Ok(job) => {
                            taken += 1;
                            job
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            // Idle since a run kept for the next keystroke, and the app has let
                            // go of the run before (its blocks are back in the pool).
                            prepare = false;
                            if let Some(p) = &prefix {
                                p.prepare_next();
                            }
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    },
                };
                // Coalesce: of everything queued, keep the newest load, run, comparison and generation.
                let (mut load, mut run, mut compare, mut generate, mut lens) = (None, None, None, None, None);
                let (mut attribute, mut effect, mut probe, mut graph) = (None, None, None, None);
                let mut next = Some(first);
                while let Some(job) = next {
                    match job {
                        j @ (Job::Load { .. } | Job::Install { .. }) => load = Some(j),
                        j @ Job::Run { .. } => run = Some(j),
                        j @ Job::Compare { .. } => compare = Some(j),
                        j @ Job::Generate { .. } => generate = Some(j),
                        j @ Job::Lens { .. } => lens = Some(j),
                        j @ Job::Attribute { .. } => attribute = Some(j),
                        j @ Job::HeadEffect { .. } => effect = Some(j),
                        j @ Job::Probe { .. } => probe = Some(j),
                        j @ Job::Contributions { .. } => graph = Some(j),
                    }
                    next = match job_rx.try_recv() {
                        Ok(j) => {
                            taken += 1;
                            Some(j)
                        }
                        Err(TryRecvError::Empty) => None,
                        Err(TryRecvError::Disconnected) => return,
                    };
                }
                run = run.or(owed.take().filter(|_| generate.is_none() && load.is_none()));
                lens = lens.or(owed_lens.take().filter(|_| load.is_none()));
                if let Some(Job::Install { id, model: installed }) = &load {
                    let info = ModelInfo::of(installed);
                    model = Some(Arc::clone(installed));
                    prefix = None;
                    if done_tx.send(Done::Installed { id: *id, info }).is_err() {
                        return;
                    }
                    wake(false);
                }
                if let Some(Job::Load { id, dir }) = load {
                    let result = match LoadedModel::load(&dir) {
                        Ok(m) => {
                            let info = ModelInfo::of(&m);
                            model = Some(Arc::new(m));
                            prefix = None;
                            Ok(info)
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    if done_tx.send(Done::Loaded { id, dir, result }).is_err() {
                        return;
                    }
                    wake(false);
                }
                if let Some(Job::Run { id, text, pair, target, spec }) = run {
                    let start = Instant::now();
                    let long = match (&spec, model.as_deref()) {
                        (RunSpec::Pretrained(iv, Some(long)), Some(m)) => {
                            let stale = || sent_seen.load(Ordering::SeqCst) > taken;
                            let send = |done: Done| {
                                let _ = done_tx.send(done);
                                wake(false);
                            };
                            run_long(m, (&text, pair.as_deref()), (iv, long), id, &stale, &send)
                        }
                        _ => LongOutcome::NotLong,
                    };
                    if long != LongOutcome::NotLong {
                        prefix = None;
                    }
                    if long == LongOutcome::Stopped {
                        owed = Some(Job::Run { id, text, pair, target, spec });
                    } else if long == LongOutcome::NotLong {
                        let input = (text.as_str(), pair.as_deref(), target.as_deref());
                        let result = run_spec(&spec, input, model.as_deref(), &mut playground, &mut other, &mut prefix);
                        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
                        if done_tx.send(Done::Ran { id, result, window: None, elapsed_ms }).is_err() {
                            return;
                        }
                        wake(false);
                        prepare = prefix.is_some();
                    }
                }
                if let (Some(Job::Probe { id, half, seed, interventions }), Some(m)) = (probe, model.as_deref()) {
                    let start = Instant::now();
                    let result = m
                        .probe_tokens(half, seed)
                        .and_then(|t| m.run_tokens(t, None, crate::model::Capture::Full, &interventions))
                        .map(Arc::new)
                        .map_err(|e| e.to_string());
                    let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
                    if done_tx.send(Done::Ran { id, result, window: None, elapsed_ms }).is_err() {
                        return;
                    }
                    wake(false);
                }
                if let Some(Job::Compare { id, text, pair, target, spec }) = compare {
                    let input = (text.as_str(), pair.as_deref(), target.as_deref());
                    let result = run_spec(&spec, input, model.as_deref(), &mut playground, &mut other, &mut None);
                    if done_tx.send(Done::Compared { id, result }).is_err() {
                        return;
                    }
                    wake(false);
                }
                // The graph takes as long as several passes and cannot stop half-way: it runs on a
                // thread of its own (one graph at a time, the newest asked for next), so newer runs
                // do not wait for it; a stale result is dropped by the UI.
                if let (Some(job), Some(m)) = (graph, model.as_ref())
                    && graph_tx.send((Arc::clone(m), job)).is_err()
                {
                    return;
                }
                for job in [attribute, effect].into_iter().flatten() {
                    let Some(m) = model.as_deref() else { break };
                    if done_tx.send(readout_job(m, job)).is_err() {
                        return;
                    }
                    wake(false);
                }
                if let (Some(job), Some(m)) = (lens, model.as_deref()) {
                    let stale = || sent_seen.load(Ordering::SeqCst) > taken;
                    let send = |done: Done| {
                        let ok = done_tx.send(done).is_ok();
                        wake(false);
                        ok
                    };
                    match lens_parts(m, job, &stale, &send) {
                        Ok(rest) => owed_lens = rest,
                        Err(()) => return,
                    }
                }
                if let Some(Job::Generate { id, text, max_new, max_prompt, stop, interventions }) = generate {
                    let Some(m) = model.as_deref() else { continue };
                    let send = |done: Done| {
                        let progress = matches!(&done, Done::Generated { finished: None, result: Ok(_), .. });
                        let ok = done_tx.send(done).is_ok();
                        wake(progress);
                        ok
                    };
                    let streaming = if m.decoder.is_some() { translate_streaming } else { generate_streaming };
                    let limits = (max_new, max_prompt);
                    match streaming(m, id, (&text, &interventions), limits, &stop, &job_rx, &send) {
                        Ok(next) => carried = next,
                        Err(()) => return,
                    }
                }
            }
        })?;
        Ok(Self { jobs, done, held: RefCell::default(), sent })
    }

    /// Queues a job (ignored if the thread has stopped, which only happens at exit).
    pub fn send(&self, job: Job) {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let _ = self.jobs.send(job);
    }

    /// A finished job, if any (in the order they finished).
    pub fn try_recv(&self) -> Option<Done> {
        let held = self.held.borrow_mut().pop_front();
        held.or_else(|| self.done.try_recv().ok())
    }

    /// Waits up to `timeout` for run `id` to be answered, keeping every message that arrives
    /// meanwhile for [`Self::try_recv`]; whether it was.
    pub fn wait_for_run(&self, id: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut held = self.held.borrow_mut();
        if held.iter().any(|d| matches!(d, Done::Ran { id: i, .. } if *i == id)) {
            return true;
        }
        while let Ok(done) = self.done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            let answered = matches!(&done, Done::Ran { id: i, .. } if *i == id);
            held.push_back(done);
            if answered {
                return true;
            }
        }
        false
    }
}
