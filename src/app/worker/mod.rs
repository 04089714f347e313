//! The inference thread: loads models and runs them, off the UI thread. The newest request wins:
//! queued jobs are coalesced ([`Batch`]), each kind handled by one method of [`Inference`], and
//! the UI drops results older than what it shows. What a job does is in `jobs`.

mod jobs;

pub use jobs::read_attention;

use std::cell::Cell;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::analysis::Run;
use crate::analysis::pe::table_similarity;
use crate::model::generate::{Candidate, Stop};
use crate::model::typing::PrefixRun;
use crate::model::{Interventions, LoadedModel, PlaygroundConfig};

/// Candidates kept per generation step.
pub const TOP_K: usize = 8;

/// Idle time after the last job before the worker gives memory back ([`crate::alloc::release_idle`]).
const RELEASE_AFTER: Duration = Duration::from_secs(3);

/// The bytes the next run of the same text is likely to need in large buffers: the attention of
/// `run` (and of a long input's window) twice — the run the app shows while the next is made, and
/// the blocks a keystroke copies.
fn likely_need(run: &Run, window: Option<&Run>) -> usize {
    let bytes = |r: &Run| {
        let a = &r.attention;
        a.layers().saturating_mul(a.heads()).saturating_mul(a.seq_len()).saturating_mul(a.keys()).saturating_mul(4)
    };
    bytes(run).saturating_add(window.map_or(0, bytes)).saturating_mul(2)
}

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
#[allow(clippy::struct_excessive_bools)] // independent facts about the model, not a state machine
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
    /// Whether it reads sentence pairs (an encoder); a language model reads one text, and its
    /// sentence B is the corrupted input of activation patching.
    pub reads_pairs: bool,
    /// Whether it can translate (an encoder–decoder with its language-model head).
    pub can_translate: bool,
    /// For GGUF weights: what they were ("GGUF `Q4_1` (210), …, kept in their blocks").
    pub quantization: Option<String>,
    /// Why the logit lens and attribution do not apply (None: they do).
    pub readout_refusal: Option<String>,
    /// Why the contribution graph does not apply (None: it does).
    pub contribution_refusal: Option<String>,
    /// A mixture of experts: experts per layer and how many each token uses (None: dense).
    pub experts: Option<(usize, usize)>,
    /// A folder the training lab saved: its task's probe (the text suggested on loading) and its
    /// vocabulary (named when the text falls outside it).
    pub hints: Option<Arc<crate::train::FolderHints>>,
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
            reads_pairs: desc.reads_pairs,
            can_translate: model.decoder.as_ref().is_some_and(|d| d.net.has_lm_head()),
            quantization: model.quantization.clone(),
            readout_refusal: model.readout_refusal(),
            contribution_refusal: model.contribution_refusal(),
            experts: desc.experts.as_ref().map(|e| (e.count, e.top_k)),
            hints: None,
        }
    }
}

/// A request to the worker.
#[derive(Debug)]
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
    /// starting at `chunks` ([`crate::app::lens::part::lens_chunks`]), each sent as [`Done::Lens`]. A
    /// newer job stops it between two parts; it goes on after that job unless a newer lens
    /// replaces it.
    Lens {
        /// Request id.
        id: u64,
        /// What the lens is of.
        key: crate::app::lens::part::LensKey,
        /// The token-level input.
        tokens: Arc<crate::analysis::tokens::Tokens>,
        /// A position computed first, alone.
        column: Option<usize>,
        /// Start positions of the grid chunks to compute.
        chunks: Vec<usize>,
        /// The interventions the run was made with.
        interventions: Interventions,
    },
    /// A feature's computation on the loaded model ([`Done::Computed`]).
    Compute(Compute),
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

/// A feature's computation on the loaded model: the feature folder says what it computes and
/// takes its [`Answer`] back (`Features::take`); the worker only coalesces and runs it.
pub struct Compute {
    /// What kind of computation it is: of everything queued, the newest of each kind runs.
    pub kind: &'static str,
    /// Whether it runs on a thread of its own (it takes as long as several passes and cannot
    /// stop half-way: newer runs do not wait for it) rather than between runs.
    pub side: bool,
    /// The work.
    work: Box<dyn FnOnce(&LoadedModel) -> Answer + Send>,
}

impl Compute {
    /// A computation of `kind` whose answer is `work`'s value.
    pub fn new<A: Send + 'static>(
        kind: &'static str,
        side: bool,
        work: impl FnOnce(&LoadedModel) -> A + Send + 'static,
    ) -> Self {
        Self { kind, side, work: Box::new(move |model| Answer(Box::new(work(model)))) }
    }
}

impl std::fmt::Debug for Compute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compute").field("kind", &self.kind).field("side", &self.side).finish_non_exhaustive()
    }
}

/// What a [`Compute`] gave back, taken by the feature whose type it is.
pub struct Answer(Box<dyn std::any::Any + Send>);

impl Answer {
    /// The answer as an `A`, or itself when it is another feature's.
    pub fn take<A: 'static>(self) -> Result<A, Self> {
        self.0.downcast::<A>().map(|a| *a).map_err(Self)
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Answer")
    }
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
    /// A generation made progress (or ended).
    Generated {
        /// Request id.
        id: u64,
        /// The run so far, its steps, whether it ended.
        answer: GeneratedAnswer,
    },
    /// A part of a logit lens is computed (or the lens failed).
    Lens {
        /// Request id.
        id: u64,
        /// What it is of.
        key: crate::app::lens::part::LensKey,
        /// The part.
        answer: LensAnswer,
    },
    /// A feature's computation finished: the feature takes its answer back.
    Computed(Answer),
    /// A comparison run finished.
    Compared {
        /// Request id.
        id: u64,
        /// The run, or why it failed.
        result: Result<Arc<Run>, String>,
    },
}

/// What a generation sends: the run so far (prompt and the tokens written), each step's
/// candidates; `finished` once it stopped (then `result` is one full pass over everything).
#[derive(Debug)]
pub struct GeneratedAnswer {
    /// Prompt and continuation so far, or why it failed.
    pub result: Result<Arc<Run>, String>,
    /// The candidates of each step (step `i` wrote token `prompt_len + i`).
    pub steps: Arc<Vec<Vec<Candidate>>>,
    /// Why it stopped, once it has.
    pub finished: Option<Stop>,
    /// Seconds spent writing so far.
    pub seconds: f64,
    /// What was written so far, decoded by the tokenizer: for a translation the target (it
    /// fills the Target box), for a continuation what follows the prompt.
    pub target: Option<String>,
}

/// A part of a logit lens, or why the lens failed.
#[derive(Debug)]
pub struct LensAnswer {
    /// The part, or why the lens failed.
    pub result: Result<Arc<crate::app::lens::part::LensPart>, String>,
    /// The watched tokens found, with their ids.
    pub watched: Vec<(String, u32)>,
    /// Why some watched tokens were left out.
    pub notes: Vec<String>,
    /// Whether this is the job's last part.
    pub finished: bool,
    /// Milliseconds since the job started.
    pub elapsed_ms: f64,
}

/// Of everything queued, the newest job of each kind (a load stands for an install too).
#[derive(Default)]
struct Batch {
    load: Option<Job>,
    run: Option<Job>,
    compare: Option<Job>,
    generate: Option<Job>,
    lens: Option<Job>,
    probe: Option<Job>,
    /// The newest computation of each kind, in the order their kinds first came.
    computes: Vec<Compute>,
}

impl Batch {
    /// Keeps `job` as the newest of its kind.
    fn add(&mut self, job: Job) {
        let place = match job {
            Job::Compute(compute) => return newest_of_kind(&mut self.computes, compute),
            Job::Load { .. } | Job::Install { .. } => &mut self.load,
            Job::Run { .. } => &mut self.run,
            Job::Compare { .. } => &mut self.compare,
            Job::Generate { .. } => &mut self.generate,
            Job::Lens { .. } => &mut self.lens,
            Job::Probe { .. } => &mut self.probe,
        };
        *place = Some(job);
    }
}

/// Keeps `compute` in `computes` as the newest of its kind.
fn newest_of_kind(computes: &mut Vec<Compute>, compute: Compute) {
    match computes.iter_mut().find(|c| c.kind == compute.kind) {
        Some(older) => *older = compute,
        None => computes.push(compute),
    }
}

/// Models built or loaded for runs other than the loaded model's, kept while they are asked for.
#[derive(Default)]
struct Caches {
    /// The playground model last built, reused while its hyperparameters stay the same.
    playground: Option<(PlaygroundConfig, LoadedModel)>,
    /// The comparison's other model folder, kept while it stays the same.
    other: Option<(PathBuf, LoadedModel)>,
}

/// The UI went away: the thread ends.
struct Gone;

/// The inference thread's state between jobs, with one handler per kind of job.
struct Inference {
    jobs: Receiver<Job>,
    done: Sender<Done>,
    wake: Arc<dyn Fn(bool) + Send + Sync>,
    /// The side thread's queue ([`Compute::side`]).
    side: Sender<(Arc<LoadedModel>, Compute)>,
    /// Jobs sent so far (counted by [`Worker::send`]) and taken off the queue: a long pass or a
    /// lens stops when the worker has not taken them all.
    sent: Arc<AtomicU64>,
    taken: u64,
    model: Option<Arc<LoadedModel>>,
    /// Models other than the loaded one, kept while they stay the same.
    caches: Caches,
    /// The last run of the loaded model, kept so that a keystroke runs only what changed.
    prefix: Option<PrefixRun>,
    /// A job that arrived while a generation was writing (it stopped the generation).
    carried: Option<Job>,
    /// A long input's run stopped by another job: run again after a comparison, unless a newer
    /// run replaces it (a generation or a model load replaces what is shown anyway).
    owed: Option<Job>,
    /// A lens stopped by another job: its remaining parts, unless a newer lens replaces it.
    owed_lens: Option<Job>,
    /// What the next run of the text shown is likely to need ([`likely_need`]), once a run was
    /// made: what is kept for later runs is bounded by it between jobs.
    need: Option<usize>,
    /// Whether memory is to be given back once idle for [`RELEASE_AFTER`].
    release: bool,
}

impl Inference {
    /// Sends an answer and wakes the UI.
    fn answer(&self, done: Done) -> Result<(), Gone> {
        self.done.send(done).map_err(|_| Gone)?;
        (self.wake)(false);
        Ok(())
    }

    /// Whether a newer job was sent than the worker has taken.
    fn stale(&self) -> bool {
        self.sent.load(Ordering::SeqCst) > self.taken
    }

    /// The next batch of jobs: waits for one (giving memory back when idle for a while), then
    /// coalesces what else is queued.
    fn next_batch(&mut self) -> Result<Batch, Gone> {
        let first = loop {
            if let Some(job) = self.carried.take() {
                break job;
            }
            let wait = if self.release { RELEASE_AFTER } else { Duration::MAX };
            match self.jobs.recv_timeout(wait) {
                Ok(job) => {
                    self.taken += 1;
                    break job;
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Idle for a while: what is kept beyond the bound, and mimalloc's free pages,
                    // go back to the system.
                    self.release = false;
                    crate::alloc::release_idle();
                }
                Err(RecvTimeoutError::Disconnected) => return Err(Gone),
            }
        };
        let mut batch = Batch::default();
        batch.add(first);
        loop {
            match self.jobs.try_recv() {
                Ok(job) => {
                    self.taken += 1;
                    batch.add(job);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err(Gone),
            }
        }
        // What a newer job interrupted is owed: taken up again once no load comes first (a load
        // that succeeds forgets it, one that fails leaves it owed: its asker still waits); a
        // generation replaces an interrupted run.
        if batch.load.is_none() {
            batch.run = batch.run.or(self.owed.take().filter(|_| batch.generate.is_none()));
            batch.lens = batch.lens.or(self.owed_lens.take());
        }
        Ok(batch)
    }

    /// Handles one batch, in the order the UI wants its answers; meanwhile what is kept for later
    /// runs is not bounded (what a run frees may be what it takes next), afterwards it is bounded
    /// by what the next run of the text shown is likely to need.
    fn handle(&mut self, batch: Batch) -> Result<(), Gone> {
        crate::alloc::unbound();
        let handled = self.handle_jobs(batch);
        if let Some(need) = self.need {
            crate::alloc::keep_for(need);
        }
        self.release = true;
        handled
    }

    /// [`Self::handle`]'s jobs.
    fn handle_jobs(&mut self, batch: Batch) -> Result<(), Gone> {
        let Batch { load, run, compare, generate, lens, probe, computes } = batch;
        if let Some(job) = load {
            self.load(job)?;
        }
        if let Some(job) = run {
            self.run(job)?;
        }
        if let Some(job) = probe {
            self.probe(job)?;
        }
        if let Some(job) = compare {
            self.compare(job)?;
        }
        for compute in computes {
            self.compute(compute)?;
        }
        if let Some(job) = lens {
            self.lens(job)?;
        }
        if let Some(job) = generate {
            self.generate(job)?;
        }
        Ok(())
    }

    /// Loads a model folder, or installs the training lab's network.
    fn load(&mut self, job: Job) -> Result<(), Gone> {
        match job {
            Job::Install { id, model } => {
                let info = ModelInfo::of(&model);
                self.model = Some(model);
                self.prefix = None;
                (self.owed, self.owed_lens) = (None, None);
                self.answer(Done::Installed { id, info })
            }
            Job::Load { id, dir } => {
                let result = match LoadedModel::load(&dir) {
                    Ok(m) => {
                        let mut info = ModelInfo::of(&m);
                        info.hints = crate::train::hints(&dir).map(Arc::new);
                        self.model = Some(Arc::new(m));
                        self.prefix = None;
                        // The app asks again of the new model (its lens included).
                        (self.owed, self.owed_lens) = (None, None);
                        Ok(info)
                    }
                    Err(e) => Err(e.to_string()),
                };
                self.answer(Done::Loaded { id, dir, result })
            }
            _ => Ok(()),
        }
    }

    /// Runs an input: pooled layer by layer when it is too long to record, else at token level
    /// (a keystroke runs only what changed).
    fn run(&mut self, job: Job) -> Result<(), Gone> {
        let Job::Run { id, text, pair, target, spec } = job else { return Ok(()) };
        let start = Instant::now();
        let long = match (&spec, self.model.as_deref()) {
            (RunSpec::Pretrained(iv, Some(long)), Some(m)) => {
                let (sent, taken, done, wake) = (&self.sent, self.taken, &self.done, &self.wake);
                let stale = || sent.load(Ordering::SeqCst) > taken;
                let send = |answer: Done| {
                    let _ = done.send(answer);
                    wake(false);
                };
                jobs::run_long(m, (&text, pair.as_deref()), (iv, long), id, &stale, &send)
            }
            _ => jobs::LongOutcome::NotLong,
        };
        match long {
            jobs::LongOutcome::Sent => {
                self.prefix = None;
                // What the window at token level takes (the overview's spans are few).
                if let Some(m) = self.model.as_deref() {
                    let desc = m.description();
                    let window = crate::analysis::long::WINDOW_TOKENS;
                    self.need = Some(desc.layers * desc.heads * window * window * 4 * 2);
                }
            }
            jobs::LongOutcome::Stopped => {
                self.prefix = None;
                self.owed = Some(Job::Run { id, text, pair, target, spec });
            }
            jobs::LongOutcome::NotLong => {
                let input = (text.as_str(), pair.as_deref(), target.as_deref());
                let result = jobs::run_spec(&spec, input, self.model.as_deref(), &mut self.caches, &mut self.prefix);
                if let Ok(run) = &result {
                    self.need = Some(likely_need(run, None));
                }
                let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
                self.answer(Done::Ran { id, result, window: None, elapsed_ms })?;
            }
        }
        Ok(())
    }

    /// Runs the loaded model on its probe of repeated random tokens.
    fn probe(&mut self, job: Job) -> Result<(), Gone> {
        let (Job::Probe { id, half, seed, interventions }, Some(m)) = (job, self.model.as_deref()) else {
            return Ok(());
        };
        let start = Instant::now();
        let result = m
            .probe_tokens(half, seed)
            .and_then(|t| m.run_tokens(t, None, crate::model::Capture::Full, &interventions))
            .map(Arc::new)
            .map_err(|e| e.to_string());
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        self.answer(Done::Ran { id, result, window: None, elapsed_ms })
    }

    /// Runs the comparison's input B.
    fn compare(&mut self, job: Job) -> Result<(), Gone> {
        let Job::Compare { id, text, pair, target, spec } = job else { return Ok(()) };
        let input = (text.as_str(), pair.as_deref(), target.as_deref());
        let result = jobs::run_spec(&spec, input, self.model.as_deref(), &mut self.caches, &mut None);
        self.answer(Done::Compared { id, result })
    }

    /// A feature's computation: here, between runs, or on the side thread (one at a time, the
    /// newest of each kind next) when it takes as long as several passes and cannot stop
    /// half-way, so that newer runs do not wait for it; a stale answer is dropped by the feature.
    fn compute(&mut self, compute: Compute) -> Result<(), Gone> {
        let Some(m) = &self.model else { return Ok(()) };
        if compute.side {
            return self.side.send((Arc::clone(m), compute)).map_err(|_| Gone);
        }
        let answer = (compute.work)(m);
        self.answer(Done::Computed(answer))
    }

    /// The logit lens, part by part; what a newer job interrupts is owed.
    fn lens(&mut self, job: Job) -> Result<(), Gone> {
        let Some(m) = self.model.as_deref() else { return Ok(()) };
        let stale = || self.stale();
        let send = |done: Done| {
            let ok = self.done.send(done).is_ok();
            (self.wake)(false);
            ok
        };
        self.owed_lens = jobs::lens_parts(m, job, &stale, &send).map_err(|()| Gone)?;
        Ok(())
    }

    /// Continues the text (or translates), streaming; a job that arrives meanwhile stops it and
    /// is handled next.
    fn generate(&mut self, job: Job) -> Result<(), Gone> {
        let Job::Generate { id, text, max_new, max_prompt, stop, interventions } = job else { return Ok(()) };
        let Some(m) = self.model.as_deref() else { return Ok(()) };
        let send = |done: Done| {
            let progress =
                matches!(&done, Done::Generated { answer, .. } if answer.finished.is_none() && answer.result.is_ok());
            let ok = self.done.send(done).is_ok();
            (self.wake)(progress);
            ok
        };
        let streaming = if m.decoder.is_some() { jobs::translate_streaming } else { jobs::generate_streaming };
        let limits = (max_new, max_prompt);
        self.carried =
            streaming(m, id, (&text, &interventions), limits, &stop, &self.jobs, &send).map_err(|()| Gone)?;
        Ok(())
    }
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
    /// The last request id given out ([`Self::next_id`]).
    last_id: Cell<u64>,
}

impl Worker {
    /// Starts the thread; `wake` is called after each message (to repaint the UI), with `true`
    /// for a generation's progress (one frame shows it; the next message comes soon) and `false`
    /// for everything else.
    pub fn spawn(wake: impl Fn(bool) + Send + Sync + 'static) -> std::io::Result<Self> {
        let wake: Arc<dyn Fn(bool) + Send + Sync> = Arc::new(wake);
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let (side_tx, side_rx) = channel::<(Arc<LoadedModel>, Compute)>();
        let (side_done, side_wake) = (done_tx.clone(), Arc::clone(&wake));
        std::thread::Builder::new().name("attnviz-side".into()).spawn(move || {
            while let Ok(first) = side_rx.recv() {
                // Only the newest computation of each kind asked for is computed.
                let mut queue: Vec<(Arc<LoadedModel>, Compute)> = Vec::new();
                for (model, compute) in std::iter::once(first).chain(side_rx.try_iter()) {
                    queue.retain(|(_, c)| c.kind != compute.kind);
                    queue.push((model, compute));
                }
                for (model, compute) in queue {
                    if side_done.send(Done::Computed((compute.work)(&model))).is_err() {
                        return;
                    }
                    side_wake(false);
                }
            }
        })?;
        let sent = Arc::new(AtomicU64::new(0));
        let mut inference = Inference {
            jobs: job_rx,
            done: done_tx,
            wake,
            side: side_tx,
            sent: Arc::clone(&sent),
            taken: 0,
            model: None,
            caches: Caches::default(),
            prefix: None,
            carried: None,
            owed: None,
            owed_lens: None,
            need: None,
            release: false,
        };
        std::thread::Builder::new().name("attnviz-inference".into()).spawn(move || {
            while let Ok(batch) = inference.next_batch() {
                if inference.handle(batch).is_err() {
                    return;
                }
            }
        })?;
        Ok(Self { jobs, done, held: RefCell::default(), sent, last_id: Cell::new(0) })
    }

    /// A new request id, larger than every one given before.
    pub fn next_id(&self) -> u64 {
        self.last_id.set(self.last_id.get() + 1);
        self.last_id.get()
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
