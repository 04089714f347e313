//! `attnviz generate`: greedy continuation of a prompt by a language model (or translation of a
//! source by an encoder–decoder), then every layer's and head's attention over it, as JSON or NPZ.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use super::dump::{DumpFormat, DumpJson, write_json, write_run_npz};
use crate::analysis::Run;
use crate::model::generate::{Candidate, Generator};
use crate::model::intervene::Steering;
use crate::model::{Interventions, LoadedModel};

/// `attnviz generate` arguments.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The prompt.
    #[arg(long)]
    pub text: String,
    /// Most tokens to write (it stops earlier at the model's end-of-sequence token or when its
    /// context is full).
    #[arg(long, default_value_t = 20)]
    pub max_new_tokens: usize,
    /// Candidates recorded per step (token, probability), most probable first.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DumpFormat::Json)]
    pub format: DumpFormat,
    /// Output file (`-` writes JSON to standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Interventions, on the prompt and on every token written.
    #[command(flatten)]
    pub model: super::ModelOptions,
    /// Steering by activation addition.
    #[command(flatten)]
    pub steer: SteerOptions,
}

/// Steering: `--steer-scale` × (the stream entering `--steer-layer` at the last token of
/// `--steer-plus`, run alone − the same for `--steer-minus`) added to the stream entering that
/// layer at every position, the prompt's and every written token's.
#[derive(Debug, Args, Default)]
pub struct SteerOptions {
    /// The layer whose entering residual stream is steered.
    #[arg(long = "steer-layer", value_name = "L")]
    pub layer: Option<usize>,
    /// The text steered toward (a few tokens, e.g. "Dogs are wonderful").
    #[arg(long = "steer-plus", value_name = "TEXT")]
    pub plus: Option<String>,
    /// The text steered away from (e.g. "Dogs are terrible").
    #[arg(long = "steer-minus", value_name = "TEXT")]
    pub minus: Option<String>,
    /// What the difference is multiplied by (negative steers the other way).
    #[arg(long = "steer-scale", value_name = "C", allow_negative_numbers = true)]
    pub scale: Option<f32>,
}

impl SteerOptions {
    /// The steering asked for (None without the options), with its notices printed.
    pub fn steering(&self, model: &LoadedModel) -> anyhow::Result<Option<Steering>> {
        let Self { layer, plus, minus, scale } = self;
        match (layer, plus, minus, scale) {
            (None, None, None, None) => Ok(None),
            (Some(layer), Some(plus), Some(minus), Some(scale)) => {
                let steered = model.steering(*layer, (plus, minus), *scale)?;
                for notice in &steered.notices {
                    eprintln!("note: {notice}");
                }
                Ok(Some(steered.steering))
            }
            _ => {
                anyhow::bail!("--steer-layer, --steer-plus, --steer-minus and --steer-scale go together: give all four")
            }
        }
    }
}

/// One step's candidates in the JSON.
#[derive(Serialize)]
struct StepJson<'a> {
    /// Position of the token this step wrote.
    position: usize,
    /// `[token, probability]`, most probable first; the first was written (greedy).
    candidates: Vec<(&'a str, f32)>,
}

/// The JSON document `generate` writes: `dump`'s over prompt and continuation (for an
/// encoder–decoder: over the source, with the generated target as the decoder side), plus the
/// prompt's length, the continuation's text, why it stopped and each step's candidates.
#[derive(Serialize)]
struct GenerateJson<'a> {
    #[serde(flatten)]
    dump: DumpJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens: Option<usize>,
    continuation: String,
    stopped: &'static str,
    steps: Vec<StepJson<'a>>,
}

fn steps_json(steps: &[Vec<Candidate>], first: usize) -> Vec<StepJson<'_>> {
    steps
        .iter()
        .enumerate()
        .map(|(i, c)| StepJson {
            position: first + i,
            candidates: c.iter().map(|Candidate { token, prob, .. }| (token.as_str(), *prob)).collect(),
        })
        .collect()
}

/// Prints what `text` (the whole continuation, decoded again each step: a character can span several
/// byte tokens) adds to what `shown` already printed, and keeps it as `shown`.
fn echo(err: &mut impl Write, shown: &mut String, text: String) {
    if let Some(new) = text.strip_prefix(shown.as_str()) {
        let _ = write!(err, "{new}");
        let _ = err.flush();
    }
    *shown = text;
}

/// Writes the run as JSON or NPZ.
fn write(args: &GenerateArgs, run: &Run, json: &GenerateJson<'_>) -> anyhow::Result<()> {
    match args.format {
        DumpFormat::Json => write_json(&args.output, json),
        DumpFormat::Npz => write_run_npz(&args.output, run),
    }
}

/// An encoder–decoder translates (or summarises) the source, the interventions on its encoder.
fn translate(model: &LoadedModel, args: &GenerateArgs, interventions: &Interventions) -> anyhow::Result<()> {
    let mut err = std::io::stderr().lock();
    let mut shown = String::new();
    let sizes = (args.max_new_tokens, args.top_k);
    let t = crate::model::generate::translate_with(model, &args.text, sizes, interventions, |ids, _, _, _| {
        echo(&mut err, &mut shown, model.tokenizer.decode(ids));
        true
    })
    .context("translating")?;
    let decoder = t.run.decoder.as_ref().context("no decoder run")?;
    let continuation = model.tokenizer.decode(&decoder.tokens.ids);
    let _ = writeln!(err, "\n[{} tokens written; {}]", decoder.tokens.len() - 1, t.stop.describe());
    drop(err);
    let json = GenerateJson {
        dump: DumpJson::of(&t.run, model.quantization.as_deref()),
        prompt_tokens: None,
        continuation,
        stopped: t.stop.describe(),
        steps: steps_json(&t.steps, 1),
    };
    write(args, &t.run, &json)
}

/// Runs `attnviz generate`.
pub fn run(model_dir: Option<&Path>, args: &GenerateArgs) -> anyhow::Result<()> {
    if args.format == DumpFormat::Npz && args.output == Path::new("-") {
        anyhow::bail!("-o -: NPZ cannot be written to standard output; give a file path");
    }
    let mut interventions = args.model.interventions()?;
    let model = args.model.load(model_dir)?;
    interventions.steer = args.steer.steering(&model)?;
    if model.decoder.is_some() {
        return translate(&model, args, &interventions);
    }
    let mut g = Generator::start_modified(&model, &args.text, args.top_k, None, &interventions)
        .context("starting the generation")?;
    super::note_knockouts(&model, &interventions, g.prompt_len());
    if !interventions.is_faithful() {
        super::note_run(&model, interventions.describe().as_deref());
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", args.text);
    let mut shown = String::new();
    while let Some(_id) = g.next(args.max_new_tokens).context("writing the next token")? {
        echo(&mut err, &mut shown, model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..]));
    }
    let stop = g.stopped().map_or("", |s| s.describe());
    let _ = writeln!(err, "\n[{} tokens written; {stop}]", g.tokens().len() - g.prompt_len());
    drop(err);
    let run = g.final_run().context("running the model over prompt and continuation")?;
    super::warn_truncation(run.truncation.as_ref());
    let json = GenerateJson {
        dump: DumpJson::of(&run, model.quantization.as_deref()),
        prompt_tokens: Some(g.prompt_len()),
        continuation: shown,
        stopped: stop,
        steps: steps_json(&g.steps, g.prompt_len()),
    };
    write(args, &run, &json)
}
