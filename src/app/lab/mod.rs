//! The training lab's background thread and what the app keeps of it: the curves, the
//! evaluations, the checkpoints the scrubber moves through. The thread trains and sends events;
//! every `eval_every` steps it sends the network as a model, which the app installs in the worker
//! so that every view shows the network being trained. Paused, the thread blocks: the app is idle.

pub mod figure;
pub mod panel;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::app::command::TrainCommand;
use crate::app::session::Session;
use crate::app::state::{Settings, Source};
use crate::app::tasks::Background;
use crate::app::tasks::spawn_named;
use crate::app::worker::Job;
use crate::model::playground::PeKind;
use crate::model::{LoadedModel, default_model_dir};
use crate::train::{Evaluation, Pooling, TaskKind, TrainConfig, Trainer};

/// What the UI asks of the training thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// Stop stepping (the thread waits).
    Pause,
    /// Go on stepping.
    Resume,
    /// End the run where it is (the network stays shown, checkpoints and Save stay usable).
    Stop,
    /// Show checkpoint `index` (the run is not changed).
    Scrub(usize),
    /// Show the network as it is now.
    Live,
    /// Save the network now as a model folder.
    Save(PathBuf),
}

/// What the training thread reports.
#[derive(Debug)]
pub enum Event {
    /// Steps done and their losses since the last report.
    Progress {
        /// Steps done.
        step: usize,
        /// Each new step's loss.
        losses: Vec<f32>,
        /// Steps per second over the last report's interval.
        steps_per_s: f64,
    },
    /// An evaluation on held-out examples.
    Evaluated(Evaluation),
    /// The network as a model to show (at `step`; `checkpoint`: the scrubber's index).
    Model {
        /// Steps trained.
        step: usize,
        /// The checkpoint shown, or None for the live network.
        checkpoint: Option<usize>,
        /// The model.
        model: Arc<LoadedModel>,
    },
    /// The kept checkpoints' steps.
    Checkpoints {
        /// Their steps, oldest first.
        steps: Vec<usize>,
        /// The current interval.
        every: usize,
        /// The most kept at once.
        limit: usize,
    },
    /// The run did all its steps.
    Finished,
    /// The run was stopped.
    Stopped,
    /// The run stopped on an error (a diverging loss: the network is back at its last good
    /// checkpoint).
    Failed(String),
    /// A save finished.
    Saved(Result<PathBuf, String>),
    /// The course's experiment: one variant done.
    Variant {
        /// Its row in the table.
        row: usize,
        /// Its final evaluation.
        evaluation: Evaluation,
    },
}

/// The three variants of the course's experiment: (name, pooling, positional encoding).
pub const VARIANTS: [(&str, Pooling, PeKind); 3] = [
    ("mean pooling", Pooling::Mean, PeKind::None),
    ("mean + sinusoidal PE", Pooling::Mean, PeKind::Interleaved),
    ("[CLS] + sinusoidal PE", Pooling::Cls, PeKind::Interleaved),
];

/// Where the run is.
#[derive(Debug, Clone, PartialEq)]
pub enum LabState {
    /// Stepping.
    Running,
    /// Waiting for Resume.
    Paused,
    /// All steps done.
    Finished,
    /// Ended by Stop.
    Stopped,
    /// Stopped on an error.
    Failed(String),
}

/// The app's side of a training run.
pub struct Lab {
    /// The run's settings.
    pub cfg: TrainConfig,
    /// Whether this is the course's three-variant experiment.
    pub experiment: bool,
    control: Sender<Control>,
    events: Receiver<Event>,
    /// Where it is.
    pub state: LabState,
    /// Steps done.
    pub step: usize,
    /// `(step, loss)` of every step.
    pub losses: Vec<[f64; 2]>,
    /// Every evaluation.
    pub evaluations: Vec<Evaluation>,
    /// Steps per second, recently.
    pub steps_per_s: f64,
    /// The kept checkpoints' steps.
    pub checkpoints: Vec<usize>,
    /// Their interval.
    pub checkpoint_every: usize,
    /// The most kept.
    pub checkpoint_limit: usize,
    /// The checkpoint shown (None: the live network).
    pub scrubbed: Option<usize>,
    /// The step of the network shown.
    pub shown_step: usize,
    /// The last save's outcome.
    pub saved: Option<Result<PathBuf, String>>,
    /// The experiment's rows (a variant's final evaluation once trained).
    pub variants: Vec<Option<Evaluation>>,
    /// The variant in training.
    pub variant: usize,
    /// The model the thread sent last, not yet installed.
    pub new_model: Option<Arc<LoadedModel>>,
    /// The network shown last (installed again when the closed lab is reopened).
    pub shown_model: Option<Arc<LoadedModel>>,
    /// Time spent training: what the finished stretches took, and since when it is training now.
    clock: (Duration, Option<Instant>),
}

impl Lab {
    /// Starts training `cfg` (the course's three variants when `experiment`), waking `wake` on
    /// every event.
    pub fn start(cfg: TrainConfig, experiment: bool, wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let (control, control_rx) = channel();
        let (events_tx, events) = channel();
        let thread_cfg = cfg.clone();
        std::thread::Builder::new().name("attnviz-train".into()).spawn(move || {
            let send = |e: Event| {
                let ok = events_tx.send(e).is_ok();
                wake();
                ok
            };
            if experiment {
                experiment_thread(&thread_cfg, &control_rx, &send);
            } else {
                train_thread(&thread_cfg, &control_rx, &send);
            }
        })?;
        Ok(Self {
            variants: if experiment { vec![None; VARIANTS.len()] } else { Vec::new() },
            cfg,
            experiment,
            control,
            events,
            state: LabState::Running,
            step: 0,
            losses: Vec::new(),
            evaluations: Vec::new(),
            steps_per_s: 0.0,
            checkpoints: Vec::new(),
            checkpoint_every: 0,
            checkpoint_limit: 0,
            scrubbed: None,
            shown_step: 0,
            saved: None,
            variant: 0,
            new_model: None,
            shown_model: None,
            clock: (Duration::ZERO, Some(Instant::now())),
        })
    }

    /// Sends `c` to the thread (and notes pause / resume at once).
    pub fn send(&mut self, c: Control) {
        match &c {
            Control::Pause if self.state == LabState::Running => {
                self.state = LabState::Paused;
                self.stop_clock();
            }
            Control::Resume if self.state == LabState::Paused => {
                self.state = LabState::Running;
                self.clock.1 = Some(Instant::now());
            }
            Control::Scrub(i) => self.scrubbed = Some(*i),
            Control::Live => self.scrubbed = None,
            _ => {}
        }
        let _ = self.control.send(c);
    }

    /// Takes every event that arrived; returns whether anything changed.
    pub fn poll(&mut self) -> bool {
        let mut changed = false;
        loop {
            let event = match self.events.try_recv() {
                Ok(e) => e,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return changed,
            };
            changed = true;
            match event {
                Event::Progress { step, losses, steps_per_s } => {
                    let first = step + 1 - losses.len();
                    if self.experiment && step < self.step {
                        // The next variant started.
                        self.losses.clear();
                        self.evaluations.clear();
                    }
                    self.losses.extend(losses.iter().enumerate().map(|(i, &l)| [(first + i) as f64, f64::from(l)]));
                    self.step = step;
                    self.steps_per_s = steps_per_s;
                }
                Event::Evaluated(e) => self.evaluations.push(e),
                Event::Model { step, checkpoint, model } => {
                    // A live model arriving while a checkpoint is shown stays off screen.
                    if checkpoint.is_some() || self.scrubbed.is_none() {
                        self.shown_step = step;
                        self.new_model = Some(model);
                    }
                }
                Event::Checkpoints { steps, every, limit } => {
                    self.checkpoints = steps;
                    self.checkpoint_every = every;
                    self.checkpoint_limit = limit;
                }
                Event::Finished => self.end(LabState::Finished),
                Event::Stopped => self.end(LabState::Stopped),
                Event::Failed(message) => self.end(LabState::Failed(message)),
                Event::Saved(result) => self.saved = Some(result),
                Event::Variant { row, evaluation } => {
                    if let Some(slot) = self.variants.get_mut(row) {
                        *slot = Some(evaluation);
                    }
                    self.variant = row + 1;
                }
            }
        }
    }

    /// Whether the thread is stepping.
    pub fn running(&self) -> bool {
        self.state == LabState::Running
    }

    /// Seconds left at the recent pace.
    pub fn eta_seconds(&self) -> Option<f64> {
        let total = if self.experiment { self.cfg.steps * VARIANTS.len() } else { self.cfg.steps };
        let done = if self.experiment { self.variant * self.cfg.steps + self.step } else { self.step };
        (self.steps_per_s > 0.0).then(|| total.saturating_sub(done) as f64 / self.steps_per_s)
    }

    /// Time spent training: the clock stops while paused and once training ends.
    pub fn elapsed(&self) -> Duration {
        self.clock.0 + self.clock.1.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Stops the clock (paused, or training ended).
    fn stop_clock(&mut self) {
        if let Some(since) = self.clock.1.take() {
            self.clock.0 += since.elapsed();
        }
    }

    /// Training ended (finished, stopped or failed): the clock stops.
    fn end(&mut self, state: LabState) {
        self.state = state;
        self.stop_clock();
    }
}

/// Reports progress at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One run: steps while running, waits (blocking) while paused or finished.
fn train_thread(cfg: &TrainConfig, control: &Receiver<Control>, send: &dyn Fn(Event) -> bool) {
    let mut t = match Trainer::new(cfg) {
        Ok(t) => t,
        Err(e) => {
            send(Event::Failed(e.to_string()));
            return;
        }
    };
    let checkpoints = |t: &Trainer| Event::Checkpoints {
        steps: t.checkpoints.list.iter().map(|c| c.step).collect(),
        every: t.checkpoints.every,
        limit: t.checkpoints.limit(),
    };
    let live = |t: &Trainer| match t.model() {
        Ok(m) => Event::Model { step: t.step, checkpoint: None, model: Arc::new(m) },
        Err(e) => Event::Failed(e.to_string()),
    };
    match t.evaluate() {
        Ok(e) => send(Event::Evaluated(e)),
        Err(e) => send(Event::Failed(e.to_string())),
    };
    if !send(live(&t)) || !send(checkpoints(&t)) {
        return;
    }
    let (mut running, mut stopped) = (true, false);
    let mut losses = Vec::new();
    let (mut last, mut last_step) = (Instant::now(), 0);
    loop {
        let stepping = running && !stopped && !t.finished();
        let message = if stepping {
            match control.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            }
        } else {
            match control.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            }
        };
        match message {
            Some(Control::Pause) => {
                running = false;
                // The steps since the last report, so the panel says where it stopped.
                if !losses.is_empty() {
                    let rate = (t.step - last_step) as f64 / last.elapsed().as_secs_f64().max(1e-9);
                    send(Event::Progress { step: t.step, losses: std::mem::take(&mut losses), steps_per_s: rate });
                }
            }
            Some(Control::Resume) => {
                running = true;
                last = Instant::now();
                last_step = t.step;
            }
            Some(Control::Stop) => {
                if !losses.is_empty() {
                    send(Event::Progress { step: t.step, losses: std::mem::take(&mut losses), steps_per_s: 0.0 });
                }
                if !stopped && !t.finished() {
                    stopped = true;
                    if let Ok(e) = t.evaluate() {
                        send(Event::Evaluated(e));
                    }
                    send(live(&t));
                    send(checkpoints(&t));
                    send(Event::Stopped);
                }
            }
            Some(Control::Scrub(i)) => {
                let event = match t.checkpoint_model(i) {
                    Ok(m) => Event::Model {
                        step: t.checkpoints.list.get(i).map_or(0, |c| c.step),
                        checkpoint: Some(i),
                        model: Arc::new(m),
                    },
                    Err(e) => Event::Failed(e.to_string()),
                };
                send(event);
            }
            Some(Control::Live) => {
                send(live(&t));
            }
            Some(Control::Save(dir)) => {
                send(Event::Saved(t.save(&dir).map_err(|e| e.to_string())));
            }
            None => {}
        }
        if !(running && !stopped && !t.finished()) {
            continue;
        }
        match t.step() {
            Ok(loss) => losses.push(loss),
            Err(e) => {
                stopped = true;
                send(Event::Failed(e.to_string()));
                send(live(&t));
                send(checkpoints(&t));
                continue;
            }
        }
        let evaluate = t.step % cfg.eval_every == 0 || t.finished();
        if evaluate || last.elapsed() >= PROGRESS_EVERY {
            let rate = (t.step - last_step) as f64 / last.elapsed().as_secs_f64().max(1e-9);
            if !send(Event::Progress { step: t.step, losses: std::mem::take(&mut losses), steps_per_s: rate }) {
                return;
            }
            (last, last_step) = (Instant::now(), t.step);
        }
        if evaluate {
            match t.evaluate() {
                Ok(e) => send(Event::Evaluated(e)),
                Err(e) => send(Event::Failed(e.to_string())),
            };
            send(live(&t));
            send(checkpoints(&t));
        }
        if t.finished() {
            send(Event::Finished);
        }
    }
}

/// The course's experiment: the three variants one after the other, same seed and budget.
fn experiment_thread(cfg: &TrainConfig, control: &Receiver<Control>, send: &dyn Fn(Event) -> bool) {
    for (row, (_, pooling, pe)) in VARIANTS.iter().enumerate() {
        let variant = TrainConfig { task: TaskKind::Sentiment, pooling: *pooling, pe: *pe, ..cfg.clone() };
        let mut t = match Trainer::new(&variant) {
            Ok(t) => t,
            Err(e) => {
                send(Event::Failed(e.to_string()));
                return;
            }
        };
        let mut losses = Vec::new();
        let mut last = Instant::now();
        let mut last_step = 0;
        while !t.finished() {
            match control.try_recv() {
                Ok(Control::Pause) => {
                    // Wait for Resume (other requests do not apply to the experiment).
                    loop {
                        match control.recv() {
                            Ok(Control::Resume) => break,
                            Ok(Control::Stop) => {
                                send(Event::Stopped);
                                return;
                            }
                            Ok(_) => {}
                            Err(_) => return,
                        }
                    }
                    last = Instant::now();
                    last_step = t.step;
                }
                Ok(Control::Stop) => {
                    send(Event::Stopped);
                    return;
                }
                Ok(_) | Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return,
            }
            match t.step() {
                Ok(loss) => losses.push(loss),
                Err(e) => {
                    send(Event::Failed(format!("{}: {e}", VARIANTS[row].0)));
                    return;
                }
            }
            if last.elapsed() >= PROGRESS_EVERY || t.finished() {
                let rate = (t.step - last_step) as f64 / last.elapsed().as_secs_f64().max(1e-9);
                if !send(Event::Progress { step: t.step, losses: std::mem::take(&mut losses), steps_per_s: rate }) {
                    return;
                }
                (last, last_step) = (Instant::now(), t.step);
            }
            if t.step % cfg.eval_every == 0
                && !t.finished()
                && let Ok(e) = t.evaluate()
            {
                send(Event::Evaluated(e));
            }
        }
        match t.evaluate() {
            Ok(evaluation) => {
                send(Event::Evaluated(evaluation.clone()));
                send(Event::Variant { row, evaluation });
            }
            Err(e) => {
                send(Event::Failed(e.to_string()));
                return;
            }
        }
        if let Ok(m) = t.model() {
            send(Event::Model { step: t.step, checkpoint: None, model: Arc::new(m) });
        }
    }
    send(Event::Finished);
}
/// The training lab as the app holds it: the run, whether its panel is open, and what it replaced.
#[derive(Default)]
pub struct Feature {
    /// The training lab's run, if one was started.
    pub lab: Option<Lab>,
    /// Whether the training lab's panel is open.
    pub open: bool,
    /// What the lab replaced: the model folder and the text, restored when it closes.
    return_to: Option<(PathBuf, String, bool)>,
}

impl Feature {
    /// Remembers the model and text the lab replaces (unless it replaces them already).
    fn remember_return(&mut self, settings: &Settings) {
        if self.return_to.is_none() {
            let dir = settings.model_dir.clone().unwrap_or_else(default_model_dir);
            self.return_to = Some((dir, settings.text.clone(), settings.pair_enabled));
        }
    }

    /// Shows the lab's network on the probe of `cfg`'s task in every view, remembering what it
    /// replaces.
    fn show_network(&mut self, settings: &mut Settings, cfg: &crate::train::TrainConfig) {
        self.remember_return(settings);
        settings.source = Source::Pretrained;
        settings.pair_enabled = false;
        settings.text = crate::train::Task::new(cfg).probe();
    }

    /// Ends the run because another model was opened (its network would replace that model at its
    /// next evaluation); whether there was one.
    pub fn end_for_another_model(&mut self) -> bool {
        self.return_to = None;
        self.lab.take().is_some()
    }
}

impl Feature {
    /// Takes the training thread's events; the network it sent last, if any, is installed in the
    /// worker (every view then shows it).
    pub fn poll(&mut self, session: &Session) {
        let installed = self.lab.as_mut().and_then(|lab| {
            lab.poll();
            lab.new_model.take()
        });
        if let Some(model) = installed {
            if let Some(lab) = &mut self.lab {
                lab.shown_model = Some(Arc::clone(&model));
            }
            session.worker.send(Job::Install { id: session.worker.next_id(), model });
        }
    }

    /// Saves the trained network in `dir`, picked in a dialog: a picked folder of other files gets
    /// the model in a new folder inside it.
    pub fn save_in(&mut self, dir: PathBuf) {
        if let Some(lab) = &mut self.lab {
            let dir = if dir.is_dir() && !crate::train::replaceable(&dir) {
                dir.join(format!("trained-{}-step-{}", lab.cfg.task.name(), lab.shown_step))
            } else {
                dir
            };
            lab.send(Control::Save(dir));
        }
    }

    /// Handles the training lab's commands.
    pub fn command(&mut self, ctx: &egui::Context, c: TrainCommand, settings: &mut Settings, session: &mut Session) {
        use TrainCommand as T;
        match c {
            T::Open => {
                self.open = true;
                // A run kept when the lab closed: its network and probe are shown again.
                let Some((model, cfg)) = self.lab.as_ref().and_then(|l| Some((l.shown_model.clone()?, l.cfg.clone())))
                else {
                    return;
                };
                self.show_network(settings, &cfg);
                session.worker.send(Job::Install { id: session.worker.next_id(), model });
            }
            T::Close | T::Discard => {
                self.open = false;
                match &mut self.lab {
                    Some(lab) if c == T::Close => {
                        // Kept to reopen; it does not train while nobody sees it.
                        if lab.running() {
                            lab.send(Control::Pause);
                        }
                    }
                    _ => self.lab = None,
                }
                // Back to the model and text the lab replaced.
                if let Some((dir, text, pair)) = self.return_to.take() {
                    settings.text = text;
                    settings.pair_enabled = pair;
                    session.load_model(dir);
                }
            }
            T::Start { cfg, experiment } => {
                if let Err(e) = cfg.validate() {
                    session.set_status(e.to_string(), true);
                    return;
                }
                // The views show the network being trained, on the task's probe.
                self.show_network(settings, &cfg);
                self.lab = None;
                settings.train = cfg.clone();
                let wake = ctx.clone();
                let what = if experiment { "the course's three variants".to_string() } else { cfg.describe() };
                match Lab::start(cfg, experiment, move || wake.request_repaint()) {
                    Ok(lab) => {
                        session.set_status(format!("Training lab: training {what}"), false);
                        self.lab = Some(lab);
                        self.open = true;
                    }
                    Err(e) => session.set_status(format!("cannot start the training thread: {e}"), true),
                }
            }
            // The app opens the export dialog on the plots.
            T::ExportPlots => {}
            T::Pause | T::Resume | T::Stop | T::Scrub(_) | T::Live | T::Save(_) => {
                let Some(lab) = &mut self.lab else { return };
                lab.send(match c {
                    T::Pause => Control::Pause,
                    T::Resume => Control::Resume,
                    T::Stop => Control::Stop,
                    T::Scrub(i) => Control::Scrub(i),
                    T::Save(dir) => Control::Save(dir),
                    _ => Control::Live,
                });
            }
            T::BrowseSave => {
                let tx = session.tasks.sender();
                let ctx = ctx.clone();
                spawn_named("attnviz-dialog", move || {
                    let picked = rfd::FileDialog::new().set_title("Save the trained model as a folder").pick_folder();
                    let _ = tx.send(Background::PickedSave(picked));
                    ctx.request_repaint();
                });
            }
        }
    }
}
