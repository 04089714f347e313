//! The transformer: a network described as data ([`describe`]), one mapping per family
//! ([`families`]), one engine that runs them all on plain `f32` slices and lets listeners read and
//! write the named points of its pass ([`engine`]), the kernels it calls ([`kernels`]: products,
//! softmax, norms, GGUF blocks, in a fixed order), loading a model folder ([`loader`], [`gguf`]),
//! tokenizing, generating. Candle computes no step of the forward pass: it reads the weight files
//! (safetensors, GGUF) into tensors the engine copies out, lends the engine its thread pool, and
//! runs the training lab's autograd ([`crate::train`]). No egui here; no tensors leave this folder.

pub mod describe;
pub mod engine;
pub mod experts;
pub mod families;
pub mod files;
pub mod generate;
pub mod gguf;
mod gguf_header;
pub mod hub;
pub mod intervene;
pub mod kernels;
pub mod loader;
pub mod long;
pub mod patch;
pub mod playground;
pub mod readout;
pub mod relpos;
pub mod rope;
mod run;
pub mod steer;
pub mod tokenize;
pub mod typing;

use std::path::PathBuf;

use thiserror::Error;

pub use describe::{Activation, Description, NormPlacement};
pub use engine::{Capture, EngineError, HeadDetail, LayerAttention, Network, Streams, WeightStorage};
pub use intervene::Interventions;
pub use loader::{LoadedModel, default_model, default_model_dir};
pub use playground::PlaygroundConfig;
pub use tokenize::TextTokenizer;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The model folder does not exist or is not a folder.
    #[error("model folder {} does not exist or is not a folder", .0.display())]
    NoFolder(PathBuf),
    /// The embedded models are in none of the folders they are looked for in.
    #[error(
        "the embedded models (all-MiniLM-L6-v2, SmolLM2-135M-Instruct) were not found; looked in {}. \
         Put them in the data folder with `attnviz models install --from <attnviz source>/assets/models`, \
         set ATTNVIZ_ASSETS to a folder holding models/, or give a model with --model",
        looked_in(.looked)
    )]
    NoEmbeddedModels {
        /// Every folder looked in, in order.
        looked: Vec<PathBuf>,
    },
    /// A hub id that is not in the local Hugging Face cache.
    #[error(
        "{id} is neither a folder nor in the Hugging Face cache at {}: download it once with Python (huggingface_hub / transformers) or give a folder",
        cache.display()
    )]
    NotCached {
        /// The id.
        id: String,
        /// The cache searched.
        cache: PathBuf,
    },
    /// A file the folder needs is missing.
    #[error("model folder {} has no {file}: {hint}", dir.display())]
    MissingFile {
        /// The model folder.
        dir: PathBuf,
        /// The missing file's name.
        file: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// Only pickle weights were found; they are never loaded.
    #[error(
        "{} holds PyTorch pickle weights ({file}); attnviz loads only safetensors and never runs code from a model folder. \
         Convert once with: python -c \"from transformers import AutoModel; AutoModel.from_pretrained('DIR').save_pretrained('DIR', safe_serialization=True)\"",
        dir.display()
    )]
    Pickle {
        /// The model folder.
        dir: PathBuf,
        /// The pickle file found.
        file: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file refused before it was read: not a regular file, or larger than such a file can be.
    #[error("refused {}: {message}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why, with the size or kind found.
        message: String,
    },
    /// Loading would need more memory than this machine has available.
    #[error(
        "{what} needs about {} of memory ({} of weights {held}{}); this machine has {} available{}",
        gb(.needed_bytes),
        gb(.weight_bytes),
        files_read(.file_bytes),
        gb(.available_bytes),
        limit_note(.from_env)
    )]
    OutOfMemory {
        /// The model, as the user named it.
        what: String,
        /// Bytes the load would need at its peak (about).
        needed_bytes: u64,
        /// Bytes of the weights as the engine holds them.
        weight_bytes: u64,
        /// How it holds them: "as f32", "as stored (GGUF blocks, 16-bit floats)".
        held: &'static str,
        /// Bytes of weight files read alongside.
        file_bytes: u64,
        /// Bytes available.
        available_bytes: u64,
        /// Whether the limit came from `ATTNVIZ_MAX_MEMORY_GB` rather than the system.
        from_env: bool,
    },
    /// `config.json` is not valid JSON or lacks a required field.
    #[error("bad config.json: {0}")]
    Config(String),
    /// `config.json` asks for something this encoder does not support.
    #[error("config.json field \"{field}\" = {value} is not supported: {why}")]
    Unsupported {
        /// The field at fault.
        field: String,
        /// Its value.
        value: String,
        /// Why, or what is supported.
        why: String,
    },
    /// The weights file is corrupt or does not match the config.
    #[error("bad weights in {}: {message}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong, naming the tensor.
        message: String,
    },
    /// `tokenizer.json` could not be loaded or used, or its token ids do not fit the weights.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The input does not fit the model: no tokens, more than its positions, a second sentence
    /// for a model that reads one text.
    #[error("bad input: {0}")]
    Input(String),
    /// A target side (a decoder) asked of a model that has none.
    #[error("{model} is not an encoder–decoder: it has no target side")]
    NoDecoder {
        /// The model's name.
        model: String,
    },
    /// Routes asked of a model without experts.
    #[error(
        "{model} ({family}) has no experts: only a mixture of experts (Mixtral, Qwen3-MoE, OLMoE, gpt-oss) routes its tokens"
    )]
    NoExperts {
        /// The model's name.
        model: String,
        /// Its family.
        family: String,
    },
    /// An intervention does not fit the model.
    #[error("intervention: {0}")]
    Intervention(String),
    /// A playground hyperparameter is out of range.
    #[error("playground: {field}: {message}")]
    Playground {
        /// The hyperparameter at fault.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The forward pass failed.
    #[error("inference failed: {0}")]
    Inference(#[from] candle_core::Error),
    /// A pass handed out data of another shape than the run it builds.
    #[error("inference failed: {0}")]
    Shape(#[from] crate::analysis::ShapeError),
    /// The engine refused the input or its context, or a listener stopped the pass.
    #[error("{0}")]
    Engine(#[from] engine::EngineError),
}

/// Bytes as gigabytes with one decimal ("2.5 GB"), or megabytes below 1 GB.
fn gb(bytes: impl std::borrow::Borrow<u64>) -> String {
    let bytes = *bytes.borrow() as f64;
    if bytes >= f64::from(1u32 << 30) {
        format!("{:.1} GB", bytes / f64::from(1u32 << 30))
    } else {
        format!("{:.1} MB", bytes / f64::from(1u32 << 20))
    }
}

/// " + 2.0 GB of files read", or nothing when no file is read alongside.
fn files_read(bytes: impl std::borrow::Borrow<u64>) -> String {
    let bytes = *bytes.borrow();
    if bytes > 0 { format!(" + {} of files read", gb(bytes)) } else { String::new() }
}

/// Where the memory limit came from, and how to change it.
fn limit_note(from_env: impl std::borrow::Borrow<bool>) -> &'static str {
    if *from_env.borrow() {
        " (the limit ATTNVIZ_MAX_MEMORY_GB sets)"
    } else {
        " (set ATTNVIZ_MAX_MEMORY_GB to change the limit)"
    }
}

/// Folders as a list for an error message.
fn looked_in(places: &[PathBuf]) -> String {
    if places.is_empty() {
        return "no folder (no executable path, $HOME or $ATTNVIZ_ASSETS)".into();
    }
    places.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
