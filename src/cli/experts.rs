//! `attnviz experts`: which experts a mixture of experts (Mixtral, Qwen3-MoE, OLMoE, gpt-oss) sends each token to,
//! layer by layer, and the weights it multiplies their outputs by.

use std::path::{Path, PathBuf};

use clap::Args;

use super::readout::{ReadoutFormat, Written, input_tokens, write_output};
use crate::analysis::npz::NpyArray;

/// `attnviz experts` arguments.
#[derive(Debug, Args)]
pub struct ExpertsArgs {
    /// The text.
    #[arg(long)]
    pub text: String,
    /// Output format: JSON (tokens, experts [layer][position][k], weights [layer][position][k],
    /// a layer without experts as an empty list) or NPZ (the same as layers × positions × k
    /// arrays, -1 and NaN in a layer without experts, and has_experts per layer).
    #[arg(long, value_enum, default_value_t = ReadoutFormat::Json)]
    pub format: ReadoutFormat,
    /// Output file; standard output when not given or `-` (JSON only).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz experts`.
pub fn run(model_dir: Option<&Path>, args: &ExpertsArgs) -> anyhow::Result<()> {
    let model = args.model.load(model_dir)?;
    let interventions = args.model.interventions()?;
    let tokens = input_tokens(&model, &args.text)?;
    let routes = model.routes(&tokens, &interventions)?;
    let n = tokens.len();
    let written = match args.format {
        ReadoutFormat::Json => {
            let per_layer = |f: &dyn Fn(&crate::analysis::experts::LayerRoutes, usize) -> serde_json::Value| {
                routes
                    .layers
                    .iter()
                    .map(|l| match l {
                        Some(l) => serde_json::Value::Array((0..n).map(|t| f(l, t)).collect()),
                        None => serde_json::json!([]),
                    })
                    .collect::<Vec<_>>()
            };
            let experts = per_layer(&|l, t| serde_json::json!(l.chosen_of(t)));
            let weights = per_layer(&|l, t| serde_json::json!(l.weights_of(t)));
            Written::Json(serde_json::json!({
                "model": model.name,
                "tokens": tokens.tokens,
                "ids": tokens.ids,
                "experts": experts,
                "weights": weights,
            }))
        }
        ReadoutFormat::Npz => {
            let k = routes.layers.iter().flatten().map(|l| l.top_k).max().unwrap_or(0);
            let layers = routes.layers.len();
            let mut experts = vec![-1i64; layers * n * k];
            let mut weights = vec![f32::NAN; layers * n * k];
            for (li, l) in routes.layers.iter().enumerate() {
                let Some(l) = l else { continue };
                for t in 0..n {
                    for (j, (&e, &w)) in l.chosen_of(t).iter().zip(l.weights_of(t)).enumerate() {
                        experts[(li * n + t) * k + j] = i64::from(e);
                        weights[(li * n + t) * k + j] = w;
                    }
                }
            }
            let has: Vec<i64> = routes.layers.iter().map(|l| i64::from(l.is_some())).collect();
            let arrays = vec![
                ("tokens", NpyArray::Str(&tokens.tokens)),
                ("experts", NpyArray::I64 { shape: vec![layers, n, k], data: experts }),
                ("weights", NpyArray::F32 { shape: vec![layers, n, k], data: &weights }),
                ("has_experts", NpyArray::I64 { shape: vec![layers], data: has }),
            ];
            return write_output(args.output.as_deref(), Written::Npz(arrays));
        }
    };
    write_output(args.output.as_deref(), written)
}
