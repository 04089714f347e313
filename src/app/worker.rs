//! The inference thread: loads models and runs them, off the UI thread. The newest request wins:
//! queued runs are coalesced, and the UI drops results older than what it shows.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::Instant;

use crate::analysis::Run;
use crate::model::LoadedModel;

/// What the loaded model is, for the side panel.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Display name.
    pub name: String,
    /// Folder it came from.
    pub dir: PathBuf,
    /// Number of layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Model width.
    pub hidden: usize,
    /// Longest input in tokens.
    pub max_positions: usize,
}

impl ModelInfo {
    fn of(model: &LoadedModel) -> Self {
        let cfg = model.config();
        Self {
            name: model.name.clone(),
            dir: model.dir.clone(),
            layers: cfg.num_hidden_layers,
            heads: cfg.num_attention_heads,
            hidden: cfg.hidden_size,
            max_positions: cfg.max_position_embeddings,
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
    /// Run the current model on an input.
    Run {
        /// Request id; larger is newer.
        id: u64,
        /// Sentence A.
        text: String,
        /// Sentence B.
        pair: Option<String>,
    },
}

/// A finished job.
#[derive(Debug)]
pub enum Done {
    /// A model load finished.
    Loaded {
        /// Request id.
        id: u64,
        /// The folder asked for.
        dir: PathBuf,
        /// The new model, or why it failed.
        result: Result<ModelInfo, String>,
    },
    /// A run finished.
    Ran {
        /// Request id.
        id: u64,
        /// The run, or why it failed.
        result: Result<Arc<Run>, String>,
        /// Time spent in tokenizer + model.
        elapsed_ms: f64,
    },
}

/// Handle to the named inference thread.
pub struct Worker {
    jobs: Sender<Job>,
    done: Receiver<Done>,
}

impl Worker {
    /// Starts the thread; `wake` is called after each finished job (to repaint the UI).
    pub fn spawn(wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        std::thread::Builder::new().name("attnviz-inference".into()).spawn(move || {
            let mut model: Option<LoadedModel> = None;
            while let Ok(first) = job_rx.recv() {
                // Coalesce: of everything queued, keep the newest load and the newest run.
                let (mut load, mut run) = (None, None);
                let mut next = Some(first);
                while let Some(job) = next {
                    match job {
                        j @ Job::Load { .. } => load = Some(j),
                        j @ Job::Run { .. } => run = Some(j),
                    }
                    next = match job_rx.try_recv() {
                        Ok(j) => Some(j),
                        Err(TryRecvError::Empty) => None,
                        Err(TryRecvError::Disconnected) => return,
                    };
                }
                if let Some(Job::Load { id, dir }) = load {
                    let result = match LoadedModel::load(&dir) {
                        Ok(m) => {
                            let info = ModelInfo::of(&m);
                            model = Some(m);
                            Ok(info)
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    if done_tx.send(Done::Loaded { id, dir, result }).is_err() {
                        return;
                    }
                    wake();
                }
                if let Some(Job::Run { id, text, pair }) = run {
                    let start = Instant::now();
                    let result = match &model {
                        Some(m) => m.run(&text, pair.as_deref()).map(Arc::new).map_err(|e| e.to_string()),
                        None => Err("no model is loaded".to_string()),
                    };
                    let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
                    if done_tx.send(Done::Ran { id, result, elapsed_ms }).is_err() {
                        return;
                    }
                    wake();
                }
            }
        })?;
        Ok(Self { jobs, done })
    }

    /// Queues a job (ignored if the thread has stopped, which only happens at exit).
    pub fn send(&self, job: Job) {
        let _ = self.jobs.send(job);
    }

    /// A finished job, if any.
    pub fn try_recv(&self) -> Option<Done> {
        self.done.try_recv().ok()
    }
}
