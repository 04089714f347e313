//! `attnviz heads`: what each head does, scored on its attention (previous-token, duplicate-token,
//! induction, first-token) — on a text, or on a seeded probe of repeated random tokens.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use super::readout::{ReadoutFormat, Written, input_tokens, write_output};
use crate::analysis::npz::NpyArray;
use crate::analysis::roles::{HeadScores, SCORE_NAMES};
use crate::model::Capture;

/// `attnviz heads` arguments.
#[derive(Debug, Args)]
pub struct HeadsArgs {
    /// The text; without it, a probe: the beginning-of-text token (if the model has one), then
    /// --probe-len random tokens, then the same tokens again.
    #[arg(long)]
    pub text: Option<String>,
    /// Random tokens in each half of the probe.
    #[arg(long, default_value_t = 24)]
    pub probe_len: usize,
    /// Seed of the probe.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReadoutFormat::Json)]
    pub format: ReadoutFormat,
    /// Output file; standard output when not given or `-` (JSON only).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz heads`.
pub fn run(model_dir: Option<&Path>, args: &HeadsArgs) -> anyhow::Result<()> {
    let model = args.model.load(model_dir)?;
    let interventions = args.model.interventions()?;
    let tokens = match &args.text {
        Some(t) => input_tokens(&model, t)?,
        None => model.probe_tokens(args.probe_len, args.seed)?,
    };
    let run = model.run_tokens(tokens, None, Capture::Attention, &interventions).context("running the model")?;
    super::note_run(&model, run.intervention.as_deref());
    let scores = HeadScores::compute(&run.attention, &run.tokens.ids);
    let h = scores.heads.max(1);
    let written = match args.format {
        ReadoutFormat::Json => {
            let mut by_name = serde_json::Map::new();
            for name in SCORE_NAMES {
                let v = scores.by_name(name).unwrap_or_default();
                // NaN (no position qualifies) as null.
                let rows: Vec<Vec<Option<f32>>> =
                    v.chunks(h).map(|r| r.iter().map(|x| (!x.is_nan()).then_some(*x)).collect()).collect();
                by_name.insert(name.to_string(), serde_json::json!(rows));
            }
            let top: serde_json::Map<String, serde_json::Value> = SCORE_NAMES
                .iter()
                .map(|name| {
                    let best = scores.top(scores.by_name(name).unwrap_or_default(), 3);
                    let best: Vec<_> = best
                        .into_iter()
                        .filter(|(_, _, s)| !s.is_nan())
                        .map(|(l, h, s)| serde_json::json!({"layer": l, "head": h, "score": s}))
                        .collect();
                    ((*name).to_string(), serde_json::json!(best))
                })
                .collect();
            Written::Json(serde_json::json!({
                "model": model.name,
                "intervention": run.intervention,
                "probe": args.text.is_none().then_some(serde_json::json!({"half": args.probe_len, "seed": args.seed})),
                "tokens": run.tokens.tokens,
                "ids": run.tokens.ids,
                "scores": by_name,
                "top": top,
            }))
        }
        ReadoutFormat::Npz => {
            let shape = vec![scores.layers, scores.heads];
            let mut arrays = vec![("tokens", NpyArray::Str(&run.tokens.tokens))];
            for name in SCORE_NAMES {
                arrays.push((
                    name,
                    NpyArray::F32 { shape: shape.clone(), data: scores.by_name(name).unwrap_or_default() },
                ));
            }
            Written::Npz(arrays)
        }
    };
    write_output(args.output.as_deref(), written)
}
