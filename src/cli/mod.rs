//! The command line: one file per subcommand, each thin (parse → call the library → write).
//!
//! Doc comments here are `--help` text read in a terminal, so they are not written as Markdown.
#![allow(clippy::doc_markdown)]

pub mod bench;
pub mod dla;
pub mod dump;
pub mod experts;
pub mod export;
pub mod generate;
pub mod heads;
pub mod lens;
pub mod models;
pub mod open;
pub mod patch;
pub mod pe;
pub mod readout;
pub mod stats;
pub mod train;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::analysis::Run;
use crate::model::intervene::{parse_ablate, parse_knockout};
use crate::model::{Interventions, LoadedModel, PlaygroundConfig, default_model};

/// See what every attention head of a transformer looks at.
///
/// With no subcommand, opens the desktop app on the model (the embedded all-MiniLM-L6-v2 unless
/// --model is given).
#[derive(Debug, Parser)]
#[command(name = "attnviz", version, about, long_about)]
pub struct Cli {
    /// Hugging Face model folder (config.json, tokenizer.json, model.safetensors), a llama.cpp
    /// .gguf file, a hub id (e.g. sentence-transformers/all-MiniLM-L6-v2) found offline in the
    /// local Hugging Face cache, or an embedded model: minilm, smollm2 (SmolLM2-135M-Instruct);
    /// default: the embedded all-MiniLM-L6-v2, or $ATTNVIZ_MODEL. Families (config.json's
    /// model_type): encoders BERT (bert), RoBERTa (roberta), XLM-RoBERTa (xlm-roberta), CamemBERT
    /// (camembert), DistilBERT (distilbert), ALBERT (albert), ELECTRA (electra), MPNet (mpnet),
    /// DeBERTa-v2/v3 (deberta-v2), the training lab's pre-LN classifier (attnviz-pre-ln-bert); decoders GPT-2 (gpt2), Llama 1/2/3 (llama), Mistral (mistral),
    /// Qwen2 (qwen2), Qwen3 (qwen3), Gemma (gemma), Gemma 2 (gemma2), Gemma 3 (gemma3_text) and
    /// the text of Gemma 3 checkpoints (gemma3), Phi-3/Phi-4-mini (phi3), OLMo-2 (olmo2), Granite
    /// (granite), SmolLM3 (smollm3), GPT-NeoX/Pythia (gpt_neox); mixtures of experts Mixtral
    /// (mixtral), Qwen3-MoE (qwen3_moe), OLMoE (olmoe), gpt-oss with attention sinks (gpt_oss);
    /// encoder–decoders, with cross-attention: BART (bart), mBART (mbart), Marian (marian),
    /// T5/Flan-T5 (t5). GGUF architectures (general.architecture): llama (Llama, Mistral, Mixtral),
    /// gemma2, gemma3, phi3, olmo2, granite, smollm3, qwen3moe, olmoe, gpt-oss (experts in MXFP4).
    #[arg(long, global = true, value_name = "DIR|ID")]
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
    /// Write every layer's and head's attention for a sentence as JSON or NPZ (and, for a model
    /// with attention sinks, each row's share of its head's sink).
    Dump(dump::DumpArgs),
    /// Draw a view (--view heatmap, heads, model, pe, pe-dot, neuron, stats, rollout, flow, roles,
    /// lens, dla, graph, experts) as PNG, SVG or PDF, or write its numbers as CSV / JSON / NPZ (the file's
    /// extension chooses).
    Export(export::ExportArgs),
    /// Write a sinusoidal positional encoding and its dot products pe_i · pe_j as JSON or NPZ.
    Pe(pe::PeArgs),
    /// Per-head statistics (entropy; share of attention to [CLS], [SEP], punctuation, itself, the
    /// previous and the next token) as CSV, JSON or NPZ.
    Stats(stats::StatsArgs),
    /// Time the forward pass with attention capture on an input of exactly N tokens.
    Bench(bench::BenchArgs),
    /// Continue a prompt with a language model (greedy, token by token), then write every layer's
    /// and head's attention over prompt and continuation as JSON or NPZ.
    Generate(generate::GenerateArgs),
    /// The logit lens: what every layer's residual stream would predict at every position (the
    /// model's final norm and unembedding applied), top candidates and their probabilities, as
    /// JSON or NPZ.
    Lens(lens::LensArgs),
    /// Direct logit attribution: each head's, MLP's and the embeddings' share of one token's
    /// logit at one position (they sum to the logit), as JSON or NPZ.
    Dla(dla::DlaArgs),
    /// Activation patching: run the corrupted input with one activation of the clean run put in,
    /// for every layer × position (or layer × head), and write the logit difference answer − wrong
    /// at the last position (and its share of the way from corrupted to clean) as JSON or NPZ.
    Patch(patch::PatchArgs),
    /// Which experts a mixture of experts (Mixtral, Qwen3-MoE, OLMoE, gpt-oss) sends each token to, layer by layer,
    /// and the weights it multiplies their outputs by, as JSON or NPZ.
    Experts(experts::ExpertsArgs),
    /// Score every head as previous-token, duplicate-token, induction and first-token head, on a
    /// text or on a probe of repeated random tokens, as JSON or NPZ.
    Heads(heads::HeadsArgs),
    /// Train a small transformer on a generated task (induction, sort, reverse, the course's
    /// sentiment classifier, modular addition) and save it as a model folder attnviz and
    /// transformers open.
    Train(train::TrainArgs),
    /// Open attention saved by other code (attnviz dump's JSON or NPZ, or the same keys written from
    /// Hugging Face, TransformerLens or a vision transformer; see the README) in the app.
    Open(open::OpenArgs),
    /// Where the embedded models (all-MiniLM-L6-v2, SmolLM2-135M-Instruct) are found, and
    /// `models install`, which copies them from a source tree into the data folder so that the
    /// binary works from any folder.
    Models(models::ModelsArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let Cli { model, text, text_pair, command } = cli;
    match command {
        None => crate::app::run_app(model, text, text_pair),
        Some(Command::Dump(args)) => dump::run(model.as_deref(), &args),
        Some(Command::Export(args)) => export::run(model.as_deref(), &args),
        Some(Command::Pe(args)) => pe::run(&args),
        Some(Command::Stats(args)) => stats::run(model.as_deref(), &args),
        Some(Command::Bench(args)) => bench::run(model.as_deref(), &args),
        Some(Command::Generate(args)) => generate::run(model.as_deref(), &args),
        Some(Command::Lens(args)) => lens::run(model.as_deref(), &args),
        Some(Command::Dla(args)) => dla::run(model.as_deref(), &args),
        Some(Command::Patch(args)) => patch::run(model.as_deref(), &args),
        Some(Command::Heads(args)) => heads::run(model.as_deref(), &args),
        Some(Command::Experts(args)) => experts::run(model.as_deref(), &args),
        Some(Command::Train(args)) => train::run(&args),
        Some(Command::Open(args)) => open::run(model, &args),
        Some(Command::Models(args)) => models::run(&args),
    }
}

/// Loads `--model`, or the embedded default model.
pub fn load_model(dir: Option<&Path>) -> anyhow::Result<LoadedModel> {
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None => default_model()?,
    };
    LoadedModel::load(&dir).with_context(|| format!("cannot load model from {}", dir.display()))
}

/// Which model runs and how it is modified (dump, export).
#[derive(Debug, Args, Default)]
pub struct ModelOptions {
    /// Run the from-scratch playground encoder with random weights instead of a pretrained model,
    /// e.g. layers=2,heads=4,d_model=64,pe=none,seed=3. Keys: layers, heads, d_model, d_ff,
    /// pe (sin|sin-concat|learned|none), base, norm (pre|post), causal (on|off), scale (sqrt|none|NUMBER),
    /// std, seed, cls (on|off).
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub playground: Option<String>,
    /// Zero the output of these heads, as LAYER:HEAD pairs, e.g. 2:3,4:0 (their attention is still shown).
    #[arg(long, value_name = "L:H,...")]
    pub ablate: Option<String>,
    /// Divide the attention scores by this before the softmax (1 = unchanged).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Mask every key after the query.
    #[arg(long)]
    pub causal: bool,
    /// Leave out the position embeddings.
    #[arg(long)]
    pub zero_positions: bool,
    /// Run only the first K layers.
    #[arg(long, value_name = "K")]
    pub first_layers: Option<usize>,
    /// Knock out attention entries: at layer L (or * for every layer) query position Q may not
    /// attend to key position K, in any head (its score is -inf before the softmax), e.g.
    /// 5:13:2,*:13:0. Positions count the model's tokens from 0.
    #[arg(long, value_name = "L:Q:K,...")]
    pub knockout: Option<String>,
}

impl ModelOptions {
    /// The interventions asked for.
    pub fn interventions(&self) -> anyhow::Result<Interventions> {
        let ablated = match &self.ablate {
            Some(s) => parse_ablate(s).map_err(|e| anyhow::anyhow!("--ablate: {e}"))?,
            None => std::collections::BTreeSet::new(),
        };
        let knockout = match &self.knockout {
            Some(s) => parse_knockout(s).map_err(|e| anyhow::anyhow!("--knockout: {e}"))?,
            None => std::collections::BTreeSet::new(),
        };
        Ok(Interventions {
            ablated,
            temperature: self.temperature,
            zero_positions: self.zero_positions,
            causal: self.causal,
            first_layers: self.first_layers,
            knockout,
            steer: None,
        })
    }

    /// Loads the model (`--model`, the embedded one, or the playground) and runs it on the input.
    pub fn run(&self, model_dir: Option<&Path>, text: &str, pair: Option<&str>) -> anyhow::Result<Run> {
        self.run_noting(model_dir, text, pair, None).map(|(run, _)| run)
    }

    /// [`Self::run`], also returning what the weights were when they were quantised (GGUF).
    pub fn run_noting(
        &self,
        model_dir: Option<&Path>,
        text: &str,
        pair: Option<&str>,
        target: Option<&str>,
    ) -> anyhow::Result<(Run, Option<String>)> {
        let interventions = self.interventions()?;
        let model = self.load(model_dir)?;
        let mut run = model.run_with(text, pair, &interventions).context("running the model")?;
        warn_truncation(run.truncation.as_ref());
        note_knockouts(&model, &interventions, run.tokens.len());
        match (target, &model.decoder) {
            (Some(target), Some(_)) => {
                let (tokens, truncation) = model.decoder_input(target)?;
                warn_truncation(truncation.as_ref());
                let decoder = model.run_decoder(tokens, truncation, &run.last_hidden).context("running the decoder")?;
                run.decoder = Some(decoder);
            }
            (Some(_), None) => anyhow::bail!("--target: {} is not an encoder–decoder; leave --target out", model.name),
            (None, Some(_)) => note_encoder_only(&model),
            (None, None) => {}
        }
        note_run(&model, run.intervention.as_deref());
        Ok((run, model.quantization))
    }

    /// Loads the model: `--playground`'s random one, `--model`, or the embedded one.
    pub fn load(&self, model_dir: Option<&Path>) -> anyhow::Result<LoadedModel> {
        match &self.playground {
            Some(spec) => {
                if model_dir.is_some() {
                    anyhow::bail!("--playground builds its own random model; leave out --model");
                }
                let cfg = PlaygroundConfig::parse(spec).context("--playground")?;
                cfg.build_default().context("building the playground model")
            }
            None => load_model(model_dir),
        }
    }
}

/// Says on stderr that only the encoder of an encoder–decoder ran.
pub fn note_encoder_only(model: &LoadedModel) {
    eprintln!(
        "note: {} is an encoder–decoder; without --target only its encoder ran (give --target for the decoder and cross-attention)",
        model.name
    );
}

/// Says on stderr what a run's numbers are not: the faithful model (a modified run), the
/// unquantised weights (GGUF).
pub fn note_run(model: &LoadedModel, intervention: Option<&str>) {
    if let Some(how) = intervention {
        eprintln!("note: modified run ({how}), not the faithful model");
    }
    if let Some(q) = &model.quantization {
        eprintln!("note: weights are {q}: the attention is that file's, not the unquantised model's");
    }
}

/// Says on stderr which knockouts change nothing: a key the mask already hides from its query
/// (after it in a causal model, outside a window), in an input of `tokens` positions.
pub fn note_knockouts(model: &LoadedModel, interventions: &Interventions, tokens: usize) {
    for notice in interventions.knockout_notices(|l, q| model.net.visible_keys(interventions, l, q, tokens)) {
        eprintln!("note: {notice}");
    }
}

/// Prints a truncation notice (if any) to stderr as a warning.
pub fn warn_truncation(truncation: Option<&String>) {
    if let Some(notice) = truncation {
        eprintln!("warning: {notice}");
    }
}
