//! The training lab: small transformers trained on Candle's autograd (`Var`s in a candle-nn
//! `VarMap`, `AdamW` as candle-nn computes it) on tasks generated from a seed — induction, sort, reverse, modular addition
//! and the course's sentiment classifier. The lab hands the engine the network as a model folder's
//! description and weights ([`Trainer::model`]), so every view shows the network being trained,
//! and saves it as a folder transformers loads.

mod attention;
mod config;
mod net;
mod ops;
mod optim;
mod run;
mod save;
mod tasks;

use std::path::PathBuf;

use thiserror::Error;

pub use attention::Attention;
pub use config::{Pooling, TaskKind, TrainConfig};
pub use net::{Gradients, Net, Outputs, STEP_CHUNKS, parameter_count, step_flops};
pub use ops::{AddBias, CrossEntropy, LayerNorm, Product, serially};
pub use run::{CHECKPOINT_BUDGET_BYTES, Checkpoint, Checkpoints, Evaluation, MAX_CHECKPOINTS, Trainer, evaluate};
pub use save::{Exported, FolderHints, export, hints, load, replaceable, tokenizer_json};
pub use tasks::{Batch, Rng, Targets, Task};

impl TrainConfig {
    /// Checks the settings; the error names the one at fault: each setting's range, then the size
    /// of the network they make (here, where the settings meet the network).
    pub fn validate(&self) -> Result<(), TrainError> {
        self.check_fields()?;
        let params = parameter_count(self);
        if params > 50_000_000 {
            return Err(config::bad(
                "size",
                format!("{params} parameters: the lab trains small models on the CPU (at most 50 million)"),
            ));
        }
        Ok(())
    }
}

/// What can go wrong training.
#[derive(Debug, Error)]
pub enum TrainError {
    /// A setting out of range; `field` names it.
    #[error("{field}: {message}")]
    Config {
        /// The setting at fault.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// The loss (or a weight) stopped being a number.
    #[error(
        "the loss diverged at step {step} (loss {loss}) with learning rate {lr}: training stopped{}; try a smaller learning rate or a warm-up",
        if *restored { format!(", the network is back at its last good checkpoint (step {kept})") } else { String::new() }
    )]
    Diverged {
        /// The step whose loss was not finite.
        step: usize,
        /// That loss.
        loss: f32,
        /// The step of the checkpoint kept.
        kept: usize,
        /// The learning rate.
        lr: f64,
        /// Whether the network was put back to that checkpoint.
        restored: bool,
    },
    /// No such checkpoint.
    #[error("there is no checkpoint {0}")]
    NoCheckpoint(usize),
    /// Saving failed; whatever was at `path` is as it was.
    #[error("cannot save the model to {}: {message}", path.display())]
    Save {
        /// The folder.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A saved folder could not be read back.
    #[error("cannot load the trained model {}: {message}", path.display())]
    Load {
        /// The folder.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A tensor operation failed.
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
    /// The engine refused the network.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
}
