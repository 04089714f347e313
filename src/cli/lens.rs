//! `attnviz lens`: the logit lens of one input — every layer's residual stream at every position
//! through the model's final norm and unembedding — as JSON or NPZ.

use std::path::{Path, PathBuf};

use clap::Args;

use super::readout::{ReadoutFormat, Written, input_tokens, write_output};
use crate::analysis::npz::NpyArray;

/// `attnviz lens` arguments.
#[derive(Debug, Args)]
pub struct LensArgs {
    /// The text.
    #[arg(long)]
    pub text: String,
    /// Candidates kept per layer and position.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// Tokens to follow across layers (their probability and rank at every position), e.g.
    /// " Paris", or the vocabulary's own spelling ("ĠParis").
    #[arg(long = "watch", value_name = "TOKEN")]
    pub watch: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReadoutFormat::Json)]
    pub format: ReadoutFormat,
    /// Output file; standard output when not given or `-` (JSON only).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Interventions (the playground has no head to read with).
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz lens`.
pub fn run(model_dir: Option<&Path>, args: &LensArgs) -> anyhow::Result<()> {
    if args.top_k == 0 {
        anyhow::bail!("--top-k must be at least 1");
    }
    let model = args.model.load(model_dir)?;
    let interventions = args.model.interventions()?;
    let tokens = input_tokens(&model, &args.text)?;
    let watch = args.watch.iter().map(|w| model.tokenizer.single_id(w)).collect::<Result<Vec<_>, _>>()?;
    model.check_tokens(&tokens, &interventions)?;
    super::note_knockouts(&model, &interventions, tokens.len());
    let lens = model.lens(&tokens, &[], args.top_k, &watch, &interventions)?;
    super::note_run(&model, None);
    let (streams, n, k) = (lens.streams, tokens.len(), lens.top_k);
    let top_tokens: Vec<String> = lens.top_ids.iter().map(|&id| model.tokenizer.token_of(id)).collect();
    let written = match args.format {
        ReadoutFormat::Json => {
            let nest = |v: &[f32]| -> Vec<Vec<Vec<f32>>> {
                v.chunks(n * k).map(|s| s.chunks(k).map(<[f32]>::to_vec).collect()).collect()
            };
            let nest_ids = |v: &[u32]| -> Vec<Vec<Vec<u32>>> {
                v.chunks(n * k).map(|s| s.chunks(k).map(<[u32]>::to_vec).collect()).collect()
            };
            let nest_str = |v: &[String]| -> Vec<Vec<Vec<String>>> {
                v.chunks(n * k).map(|s| s.chunks(k).map(<[String]>::to_vec).collect()).collect()
            };
            let tracked: Vec<serde_json::Value> = lens
                .tracked
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "token": t.token.map(|id| model.tokenizer.token_of(id)),
                        "ids": t.ids,
                        "probs": t.probs.chunks(n).collect::<Vec<_>>(),
                        "ranks": t.ranks.chunks(n).collect::<Vec<_>>(),
                    })
                })
                .collect();
            Written::Json(serde_json::json!({
                "model": model.name,
                "intervention": interventions.describe(),
                "tokens": tokens.tokens,
                "ids": tokens.ids,
                "streams": streams,
                "top_ids": nest_ids(&lens.top_ids),
                "top_tokens": nest_str(&top_tokens),
                "top_probs": nest(&lens.top_probs),
                "tracked": tracked,
            }))
        }
        ReadoutFormat::Npz => {
            let shape = vec![streams, n, k];
            let predicted = &lens.tracked[0];
            Written::Npz(vec![
                ("tokens", NpyArray::Str(&tokens.tokens)),
                (
                    "top_ids",
                    NpyArray::I64 { shape: shape.clone(), data: lens.top_ids.iter().map(|&i| i64::from(i)).collect() },
                ),
                ("top_tokens", NpyArray::Str(&top_tokens)),
                ("top_probs", NpyArray::F32 { shape, data: &lens.top_probs }),
                (
                    "predicted_ids",
                    NpyArray::I64 { shape: vec![n], data: predicted.ids.iter().map(|&i| i64::from(i)).collect() },
                ),
                (
                    "predicted_ranks",
                    NpyArray::I64 {
                        shape: vec![streams, n],
                        data: predicted.ranks.iter().map(|&r| i64::from(r)).collect(),
                    },
                ),
                ("predicted_probs", NpyArray::F32 { shape: vec![streams, n], data: &predicted.probs }),
            ])
        }
    };
    write_output(args.output.as_deref(), written)
}
