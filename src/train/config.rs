//! What a training run is: the task, the network's shape and the optimiser's settings. Invalid
//! values are refused with the field at fault named, as the playground does.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::TrainError;
use crate::model::NormPlacement;
use crate::model::playground::{PeKind, check_widths};

/// The tasks the lab generates from a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TaskKind {
    /// T random tokens, then the same T again; loss on every next token.
    #[default]
    Induction,
    /// A list of digits, `=`, the list sorted (minGPT's demo).
    Sort,
    /// A list of digits, `=`, the list reversed.
    Reverse,
    /// Reviews of a small generated language with negation and contrast; positive or negative.
    Sentiment,
    /// `a + b =` then `(a + b) mod p`, trained on a fraction of the pairs (the grokking task).
    ModAdd,
}

impl TaskKind {
    /// Every task, in menu order.
    pub const ALL: [Self; 5] = [Self::Induction, Self::Sort, Self::Reverse, Self::Sentiment, Self::ModAdd];

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Induction => "induction",
            Self::Sort => "sort",
            Self::Reverse => "reverse",
            Self::Sentiment => "sentiment",
            Self::ModAdd => "modadd",
        }
    }

    /// Name in the app.
    pub fn label(self) -> &'static str {
        match self {
            Self::Induction => "induction (repeat a random sequence)",
            Self::Sort => "sort a list of digits",
            Self::Reverse => "reverse a list of digits",
            Self::Sentiment => "sentiment of a review (the course's classifier)",
            Self::ModAdd => "modular addition (grokking)",
        }
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Result<Self, TrainError> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| bad("task", format!("{name:?}: choose induction, sort, reverse, sentiment or modadd")))
    }

    /// Whether the task trains the encoder classifier (else a causal decoder predicting tokens).
    pub fn is_classifier(self) -> bool {
        self == Self::Sentiment
    }

    /// The metric the task reports beside the loss.
    pub fn metric_name(self) -> &'static str {
        match self {
            Self::Induction => "induction score",
            Self::Sort | Self::Reverse | Self::ModAdd | Self::Sentiment => "held-out accuracy",
        }
    }
}

/// How the classifier turns its token vectors into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Pooling {
    /// The mean of the token vectors.
    #[default]
    Mean,
    /// The vector of a learned `[CLS]` token put first.
    Cls,
}

impl Pooling {
    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
        }
    }
}

/// A training run's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    /// What to learn.
    pub task: TaskKind,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads per block.
    pub heads: usize,
    /// Model width.
    pub d_model: usize,
    /// Feed-forward width; 0 = attention-only.
    pub mlp: usize,
    /// Task tokens: random tokens for induction, `p` for modular addition (the digit tasks use 10).
    pub vocab: usize,
    /// Sequence length of the decoder tasks: induction repeats `context / 2` tokens, sort and
    /// reverse take lists of `(context − 1) / 2` digits. (Sentences set their own length.)
    pub context: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Peak learning rate (`AdamW`).
    pub lr: f64,
    /// Steps of linear warm-up to `lr`.
    pub warmup: usize,
    /// `AdamW`'s decoupled weight decay.
    pub weight_decay: f64,
    /// Steps to train.
    pub steps: usize,
    /// Seed of the weights and of every batch.
    pub seed: u64,
    /// Positional encoding added to the token embeddings.
    pub pe: PeKind,
    /// Wavelength base of the sinusoidal encodings.
    pub pe_base: f64,
    /// The classifier's pooling.
    pub pooling: Pooling,
    /// The classifier's layer-norm placement (the decoder is always pre-LN, as GPT-2).
    pub norm: NormPlacement,
    /// Evaluate (and refresh the views) every this many steps.
    pub eval_every: usize,
    /// Keep a checkpoint every this many steps (the scrubber's resolution).
    pub checkpoint_every: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self::for_task(TaskKind::Induction)
    }
}

impl TrainConfig {
    /// The settings each task starts from: the induction model of Olsson et al. (the `PyTorch`
    /// peer's: 2 layers, 4 heads, `d_model` 64, attention-only, 32 tokens twice, batch 32, `AdamW`
    /// 1e-3); the
    /// course's classifier (3 layers, mean pooling, no positions: the first of its three questions).
    pub fn for_task(task: TaskKind) -> Self {
        let base = Self {
            task,
            layers: 2,
            heads: 4,
            d_model: 64,
            mlp: 0,
            vocab: 64,
            context: 64,
            batch: 32,
            lr: 1e-3,
            warmup: 0,
            weight_decay: 0.01,
            steps: 1500,
            seed: 0,
            pe: PeKind::Learned,
            pe_base: 10_000.0,
            pooling: Pooling::Mean,
            norm: NormPlacement::Pre,
            eval_every: 50,
            checkpoint_every: 50,
        };
        match task {
            TaskKind::Induction => base,
            TaskKind::Sort | TaskKind::Reverse => {
                Self { layers: 2, mlp: 128, vocab: 10, context: 13, steps: 1500, ..base }
            }
            TaskKind::ModAdd => Self {
                layers: 1,
                d_model: 128,
                mlp: 512,
                vocab: 59,
                context: 5,
                batch: 512,
                weight_decay: 1.0,
                steps: 3000,
                eval_every: 100,
                checkpoint_every: 100,
                ..base
            },
            TaskKind::Sentiment => Self {
                layers: 3,
                mlp: 128,
                pe: PeKind::None,
                norm: NormPlacement::Post,
                // Without a warm-up the [CLS] variant of the experiment overshoots after ~150 steps
                // and ends at 0.94 held-out accuracy; with it all three settle (no PE near chance on
                // the order-dependent sentences, both PE variants at 1.0).
                warmup: 100,
                steps: 600,
                eval_every: 25,
                checkpoint_every: 25,
                ..base
            },
        }
    }

    /// Half of an induction sequence.
    pub fn half(&self) -> usize {
        self.context / 2
    }

    /// The learning rate at `step` (from 1): linear warm-up, then constant.
    pub fn lr_at(&self, step: usize) -> f64 {
        if self.warmup == 0 || step >= self.warmup { self.lr } else { self.lr * step as f64 / self.warmup as f64 }
    }

    /// Checks each setting's range; the error names the one at fault. ([`TrainConfig::validate`]
    /// then checks the size of the network they make.)
    pub(super) fn check_fields(&self) -> Result<(), TrainError> {
        let at_least = |field: &'static str, value: usize, min: usize| {
            if value < min { Err(bad(field, format!("must be at least {min}, got {value}"))) } else { Ok(()) }
        };
        let at_most = |field: &'static str, value: usize, max: usize| {
            if value > max { Err(bad(field, format!("must be at most {max}, got {value}"))) } else { Ok(()) }
        };
        at_least("layers", self.layers, 1)?;
        at_most("layers", self.layers, 12)?;
        at_least("heads", self.heads, 1)?;
        at_least("d_model", self.d_model, 1)?;
        at_most("d_model", self.d_model, 1024)?;
        at_most("mlp", self.mlp, 8192)?;
        let sinusoidal = matches!(self.pe, PeKind::Interleaved | PeKind::Concatenated);
        check_widths(self.d_model, self.heads, sinusoidal, self.pe_base)
            .map_err(|(field, message)| bad(field, message))?;
        at_least("batch", self.batch, 1)?;
        at_most("batch", self.batch, 4096)?;
        at_least("steps", self.steps, 1)?;
        at_most("steps", self.steps, 1_000_000)?;
        at_least("eval_every", self.eval_every, 1)?;
        at_least("checkpoint_every", self.checkpoint_every, 1)?;
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(bad("lr", format!("must be a positive number, got {}", self.lr)));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(bad("weight_decay", format!("must be a number ≥ 0, got {}", self.weight_decay)));
        }
        match self.task {
            TaskKind::Induction => {
                at_least("vocab", self.vocab, 2)?;
                at_most("vocab", self.vocab, 4096)?;
                at_least("context", self.context, 4)?;
                at_most("context", self.context, 512)?;
            }
            TaskKind::Sort | TaskKind::Reverse => {
                if self.vocab != 10 {
                    return Err(bad("vocab", format!("the digit tasks use the 10 digits, got {}", self.vocab)));
                }
                at_least("context", self.context, 5)?;
                at_most("context", self.context, 129)?;
            }
            TaskKind::ModAdd => {
                at_least("vocab", self.vocab, 2)?;
                at_most("vocab", self.vocab, 997)?;
                if self.context != 5 {
                    return Err(bad(
                        "context",
                        format!("modular addition reads `a + b =` and writes the sum: 5 tokens, got {}", self.context),
                    ));
                }
            }
            TaskKind::Sentiment => {
                if self.mlp == 0 && self.norm == NormPlacement::Post {
                    return Err(bad(
                        "mlp",
                        "a post-LN block (BERT's) always has its feed-forward layer: give it a width, or choose pre-LN",
                    ));
                }
            }
        }
        Ok(())
    }

    /// One line saying what is trained.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} · {} layers × {} heads · d_model {} · {}",
            self.task.name(),
            self.layers,
            self.heads,
            self.d_model,
            if self.mlp == 0 { "attention-only".to_string() } else { format!("MLP {}", self.mlp) }
        );
        s.push_str(" · PE ");
        s.push_str(self.pe.name());
        if self.task.is_classifier() {
            let _ = write!(
                s,
                " · {} pooling · {}",
                self.pooling.name(),
                if self.norm == NormPlacement::Pre { "pre-LN" } else { "post-LN" }
            );
        }
        let _ = write!(s, " · batch {} · lr {} · seed {}", self.batch, self.lr, self.seed);
        s
    }
}

pub(super) fn bad(field: &'static str, message: impl Into<String>) -> TrainError {
    TrainError::Config { field, message: message.into() }
}
