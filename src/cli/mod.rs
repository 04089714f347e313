//! The command line: one file per subcommand, each thin (parse → call the library → write).
//!
//! Doc comments here are `--help` text read in a terminal, so they are not written as Markdown.
#![allow(clippy::doc_markdown)]

pub mod bench;
pub mod dump;
pub mod export;
pub mod pe;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::model::{LoadedModel, default_model_dir};

/// See what every attention head of a transformer looks at.
///
/// With no subcommand, opens the desktop app on the model (the embedded all-MiniLM-L6-v2 unless
/// --model is given).
#[derive(Debug, Parser)]
#[command(name = "attnviz", version, about, long_about)]
pub struct Cli {
    /// Hugging Face model folder (config.json, tokenizer.json, model.safetensors); default: the
    /// embedded all-MiniLM-L6-v2, or $ATTNVIZ_MODEL.
    #[arg(long, global = true, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Sentence to start the app with.
    #[arg(long)]
    pub text: Option<String>,
    /// Second sentence (B) to start the app with.
    #[arg(long)]
    pub text_pair: Option<String>,
    /// What to do; none opens the app.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write every layer's and head's attention for a sentence as JSON or NPZ.
    Dump(dump::DumpArgs),
    /// Draw a view (heatmap, head view, model grid, positional encodings) to a PNG file.
    Export(export::ExportArgs),
    /// Write a sinusoidal positional encoding and its dot products pe_i · pe_j as JSON.
    Pe(pe::PeArgs),
    /// Time the forward pass with attention capture on an input of exactly N tokens.
    Bench(bench::BenchArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let Cli { model, text, text_pair, command } = cli;
    match command {
        None => crate::app::run_app(model, text, text_pair),
        Some(Command::Dump(args)) => dump::run(model.as_deref(), &args),
        Some(Command::Export(args)) => export::run(model.as_deref(), &args),
        Some(Command::Pe(args)) => pe::run(&args),
        Some(Command::Bench(args)) => bench::run(model.as_deref(), &args),
    }
}

/// Loads `--model`, or the embedded default model.
pub fn load_model(dir: Option<&Path>) -> anyhow::Result<LoadedModel> {
    let dir = dir.map_or_else(default_model_dir, Path::to_path_buf);
    LoadedModel::load(&dir).with_context(|| format!("cannot load model from {}", dir.display()))
}

/// Prints a truncation notice (if any) to stderr as a warning.
pub fn warn_truncation(truncation: Option<&String>) {
    if let Some(notice) = truncation {
        eprintln!("warning: {notice}");
    }
}
