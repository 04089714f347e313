//! A training run: steps of `AdamW` on generated batches, evaluations on held-out examples,
//! checkpoints kept within a memory budget (the scrubber's), and a stop that keeps the last good
//! checkpoint when the loss diverges.

use candle_core::{DType, Tensor};
use candle_nn::ParamsAdamW;
use serde::Serialize;

use super::TrainError;
use super::config::{TaskKind, TrainConfig};
use super::net::{Net, Outputs};
use super::optim::AdamW;
use super::save;
use super::tasks::{Batch, Rng, Targets, Task};
use crate::model::LoadedModel;

/// Memory the checkpoints may hold together.
pub const CHECKPOINT_BUDGET_BYTES: usize = 256 << 20;
/// Most checkpoints kept (the scrubber's positions); past it, every other one is dropped and the
/// interval doubles.
pub const MAX_CHECKPOINTS: usize = 200;

/// Held-out examples an evaluation reads.
fn evaluation_rows(task: TaskKind) -> usize {
    match task {
        TaskKind::Induction => 64,
        TaskKind::Sort | TaskKind::Reverse => 256,
        TaskKind::Sentiment => 1000,
        TaskKind::ModAdd => 0, // every held-out pair
    }
}

/// What an evaluation measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    /// Steps trained.
    pub step: usize,
    /// Mean training loss since the previous evaluation.
    pub train_loss: f32,
    /// Loss on the held-out examples (induction: on the repeated half).
    pub held_out_loss: f32,
    /// The task's metric ([`TaskKind::metric_name`]): the best head's induction score, or the
    /// held-out accuracy (a sequence counts when every predicted token is right).
    pub metric: f32,
    /// The sentiment task: accuracy on the held-out sentences whose label depends on word order.
    pub order_accuracy: Option<f32>,
    /// Induction: every head's induction score, layer-major.
    pub head_scores: Vec<f32>,
}

/// A copy of every parameter at a step.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Steps trained.
    pub step: usize,
    values: Vec<Tensor>,
}

/// Checkpoints every `every` steps, thinned to stay within the budget.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    /// Current interval (doubles when thinned).
    pub every: usize,
    /// Kept, oldest first.
    pub list: Vec<Checkpoint>,
    limit: usize,
}

impl Checkpoints {
    fn new(every: usize, bytes_each: usize) -> Self {
        let limit = (CHECKPOINT_BUDGET_BYTES / bytes_each.max(1)).clamp(2, MAX_CHECKPOINTS);
        Self { every, list: Vec::new(), limit }
    }

    /// The most that can be kept at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn push(&mut self, c: Checkpoint) {
        self.list.push(c);
        if self.list.len() > self.limit {
            // Keep steps that are multiples of the doubled interval (and the newest).
            self.every *= 2;
            let every = self.every;
            let last = self.list.len() - 1;
            let mut i = 0;
            self.list.retain(|c| {
                let keep = c.step % every == 0 || i == last;
                i += 1;
                keep
            });
        }
    }
}

/// A training run in progress.
#[derive(Debug)]
pub struct Trainer {
    /// Its settings.
    pub cfg: TrainConfig,
    /// Its task.
    pub task: Task,
    /// The network.
    pub net: Net,
    opt: AdamW,
    rng: Rng,
    /// Steps done.
    pub step: usize,
    /// The loss of every step.
    pub losses: Vec<f32>,
    /// Every evaluation.
    pub evaluations: Vec<Evaluation>,
    /// Kept checkpoints.
    pub checkpoints: Checkpoints,
    eval_set: Batch,
}

impl Trainer {
    /// A new run: the network drawn from the seed, step 0 kept as the first checkpoint.
    pub fn new(cfg: &TrainConfig) -> Result<Self, TrainError> {
        cfg.validate()?;
        let net = Net::new(cfg, DType::F32)?;
        let params = ParamsAdamW { lr: cfg.lr_at(1), weight_decay: cfg.weight_decay, ..ParamsAdamW::default() };
        let opt = AdamW::new(net.varmap.all_vars(), params)?;
        let task = Task::new(cfg);
        let eval_set = task.evaluation_set(cfg.seed, evaluation_rows(cfg.task));
        let bytes = net.trained_values() * 4;
        let mut t = Self {
            cfg: cfg.clone(),
            task,
            net,
            opt,
            rng: Rng::new(cfg.seed, 0xBA7C),
            step: 0,
            losses: Vec::new(),
            evaluations: Vec::new(),
            checkpoints: Checkpoints::new(cfg.checkpoint_every, bytes),
            eval_set,
        };
        t.keep_checkpoint()?;
        Ok(t)
    }

    /// Whether the run has done its steps.
    pub fn finished(&self) -> bool {
        self.step >= self.cfg.steps
    }

    /// One optimisation step; its loss. A loss or weights that are not finite stop the run: the
    /// network goes back to the last checkpoint (kept, all finite) and the error says so.
    pub fn step(&mut self) -> Result<f32, TrainError> {
        let batch = self.task.batch(&mut self.rng, self.cfg.batch);
        let grads = self.net.gradients(&batch)?;
        #[allow(clippy::cast_possible_truncation)] // the f32 losses' sum
        let value = grads.loss as f32;
        if !value.is_finite() {
            return Err(self.diverged(value));
        }
        self.opt.set_learning_rate(self.cfg.lr_at(self.step + 1));
        self.opt.step_with(|t| grads.get(t))?;
        self.step += 1;
        self.losses.push(value);
        if self.step.is_multiple_of(self.checkpoints.every) || self.finished() {
            if !self.weights_finite()? {
                return Err(self.diverged(f32::NAN));
            }
            self.keep_checkpoint()?;
        }
        Ok(value)
    }

    fn diverged(&mut self, loss: f32) -> TrainError {
        let kept = self.checkpoints.list.last().map_or(0, |c| c.step);
        let restored = self.restore(self.checkpoints.list.len().saturating_sub(1)).is_ok();
        TrainError::Diverged { step: self.step + 1, loss, kept, lr: self.cfg.lr, restored }
    }

    fn weights_finite(&self) -> Result<bool, TrainError> {
        for (_, v) in self.net.named() {
            let t = v.as_tensor();
            // A NaN or an infinity makes the sum NaN or infinite (so do weights near f32's
            // largest values: blown up all the same).
            let s = t.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            if !s.is_finite() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn keep_checkpoint(&mut self) -> Result<(), TrainError> {
        if self.checkpoints.list.last().is_some_and(|c| c.step == self.step) {
            return Ok(());
        }
        let values = self.net.named().into_iter().map(|(_, v)| v.as_tensor().copy()).collect::<Result<_, _>>()?;
        self.checkpoints.push(Checkpoint { step: self.step, values });
        Ok(())
    }

    /// Puts the network back to checkpoint `index` (the optimiser's moments stay).
    pub fn restore(&mut self, index: usize) -> Result<(), TrainError> {
        let c = self.checkpoints.list.get(index).ok_or(TrainError::NoCheckpoint(index))?.clone();
        for ((_, var), value) in self.net.named().into_iter().zip(&c.values) {
            var.set(value)?;
        }
        Ok(())
    }

    /// The network of checkpoint `index` as a model attnviz shows, without touching the run.
    pub fn checkpoint_model(&self, index: usize) -> Result<LoadedModel, TrainError> {
        let c = self.checkpoints.list.get(index).ok_or(TrainError::NoCheckpoint(index))?;
        let net = Net::new(&self.cfg, DType::F32)?;
        for ((_, var), value) in net.named().into_iter().zip(&c.values) {
            var.set(value)?;
        }
        save::to_model(&net, &self.model_name(c.step), std::path::Path::new(""))
    }

    /// The network now, as a model attnviz shows.
    pub fn model(&self) -> Result<LoadedModel, TrainError> {
        save::to_model(&self.net, &self.model_name(self.step), std::path::Path::new(""))
    }

    fn model_name(&self, step: usize) -> String {
        format!("trained {} · step {step}", self.cfg.task.name())
    }

    /// Saves the network now as a model folder (atomically), with the run's settings, history and
    /// probe text in `training.json`.
    pub fn save(&self, dir: &std::path::Path) -> Result<std::path::PathBuf, TrainError> {
        let training = serde_json::json!({
            "config": self.cfg,
            "step": self.step,
            "evaluations": self.evaluations,
            "probe": self.task.probe(),
            "written_by": format!("attnviz {}", env!("CARGO_PKG_VERSION")),
        });
        save::save(&self.net, &training, dir)
    }

    /// Measures the network on the held-out examples and records it.
    pub fn evaluate(&mut self) -> Result<Evaluation, TrainError> {
        let since = self.evaluations.last().map_or(0, |e| e.step);
        let recent = &self.losses[since.min(self.losses.len())..];
        let train_loss = if recent.is_empty() { f32::NAN } else { recent.iter().sum::<f32>() / recent.len() as f32 };
        let e = evaluate(&self.net, &self.eval_set, self.task.probe_batch().as_ref(), self.step, train_loss)?;
        self.evaluations.push(e.clone());
        Ok(e)
    }
}

/// [`Trainer::evaluate`] on a network and a held-out batch.
/// `probe`: the task's probe as a batch of one ([`crate::train::Task::probe_batch`]), what the
/// induction scores are measured on.
pub fn evaluate(
    net: &Net,
    b: &Batch,
    probe: Option<&Batch>,
    step: usize,
    train_loss: f32,
) -> Result<Evaluation, TrainError> {
    let task = net.cfg.task;
    let lengths = match &b.targets {
        Targets::Labels { lengths, .. } => Some(lengths.as_slice()),
        Targets::Next { .. } => None,
    };
    let out = net.forward(&b.ids, b.rows, b.len, lengths, task == TaskKind::Induction)?;
    let mut e =
        Evaluation { step, train_loss, held_out_loss: 0.0, metric: 0.0, order_accuracy: None, head_scores: Vec::new() };
    match &b.targets {
        Targets::Next { from } => {
            let from = if task == TaskKind::Induction { b.len / 2 } else { *from };
            let targets = Targets::Next { from };
            e.held_out_loss = net.loss(&out, &b.ids, b.rows, b.len, &targets)?.to_scalar::<f32>()?;
            if task == TaskKind::Induction {
                if let Some(probe) = probe {
                    e.head_scores = induction_scores(net, probe)?;
                }
                e.metric = e.head_scores.iter().copied().fold(0.0, f32::max);
            } else {
                e.metric = exact_match(&out, b, from)?;
            }
        }
        Targets::Labels { labels, order_dependent, .. } => {
            e.held_out_loss = net.loss(&out, &b.ids, b.rows, b.len, &b.targets)?.to_scalar::<f32>()?;
            let logits: Vec<Vec<f32>> = out.logits.to_dtype(DType::F32)?.to_vec2()?;
            let right: Vec<bool> = logits.iter().zip(labels).map(|(l, &y)| u32::from(l[1] > l[0]) == y).collect();
            let share = |pick: &dyn Fn(usize) -> bool| {
                let (n, ok) = (0..right.len())
                    .filter(|&i| pick(i))
                    .fold((0, 0), |(n, ok), i| (n + 1, ok + usize::from(right[i])));
                if n == 0 { f32::NAN } else { ok as f32 / n as f32 }
            };
            e.metric = share(&|_| true);
            e.order_accuracy = Some(share(&|i| order_dependent[i]));
        }
    }
    Ok(e)
}

/// Per head (layer-major), its induction score on the one sequence of `probe`, as `attnviz heads`
/// and the head-roles view compute it ([`crate::analysis::roles::induction_score`]): the lab's
/// probe is what the views show, so the curve's last value is the score they show. Its first half
/// repeats no token, so "the most recent earlier occurrence" is the one in the first half, as in
/// Olsson et al. and the `PyTorch` peer.
fn induction_scores(net: &Net, probe: &Batch) -> Result<Vec<f32>, TrainError> {
    let out = net.forward(&probe.ids, 1, probe.len, None, true)?;
    let n = probe.len;
    let earlier = crate::analysis::roles::earlier_occurrences(&probe.ids[..n]);
    let mut scores = Vec::new();
    for att in &out.attention {
        let heads = att.dim(1)?;
        let v: Vec<f32> = att.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        for h in 0..heads {
            let a = |q: usize, k: usize| f64::from(v[(h * n + q) * n + k]);
            scores.push(crate::analysis::roles::induction_score(&earlier, a));
        }
    }
    Ok(scores)
}

/// The share of sequences whose every target from `from` on is the arg-max prediction.
fn exact_match(out: &Outputs, b: &Batch, from: usize) -> Result<f32, TrainError> {
    let pred = out.logits.narrow(1, from, b.len - 1 - from)?.argmax(2)?;
    let pred: Vec<Vec<u32>> = pred.to_vec2()?;
    let ok = pred
        .iter()
        .enumerate()
        .filter(|(r, p)| p.iter().enumerate().all(|(i, &t)| t == b.ids[r * b.len + from + 1 + i]))
        .count();
    Ok(ok as f32 / b.rows as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_thin_to_their_limit_and_keep_the_newest() {
        let mut c = Checkpoints::new(10, CHECKPOINT_BUDGET_BYTES / 4);
        assert_eq!(c.limit(), 4);
        for step in (0..=100).step_by(10) {
            if step % c.every == 0 {
                c.push(Checkpoint { step, values: Vec::new() });
            }
        }
        let steps: Vec<usize> = c.list.iter().map(|c| c.step).collect();
        assert!(steps.len() <= 4, "{steps:?}");
        assert_eq!(steps.first(), Some(&0));
        assert!(steps.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(c.every, 40);
    }
}
