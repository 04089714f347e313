//! `attnviz dla`: direct logit attribution at one position — each head's, each MLP's and the
//! embeddings' share of one token's logit (or of a difference of two) — as JSON or NPZ.

use std::path::{Path, PathBuf};

use clap::Args;

use super::readout::{ReadoutFormat, Written, input_tokens, write_output};
use crate::analysis::npz::NpyArray;

/// `attnviz dla` arguments.
#[derive(Debug, Args)]
pub struct DlaArgs {
    /// The text.
    #[arg(long)]
    pub text: String,
    /// The position whose prediction is split (default: the last).
    #[arg(long)]
    pub position: Option<usize>,
    /// The token whose logit is split, as text (" Paris") or the vocabulary's spelling
    /// ("ĠParis"); default: the model's top token at the position.
    #[arg(long, conflicts_with = "token_id")]
    pub token: Option<String>,
    /// The same by id.
    #[arg(long)]
    pub token_id: Option<u32>,
    /// Split the difference of logits TOKEN − VERSUS instead (" London").
    #[arg(long)]
    pub versus: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReadoutFormat::Json)]
    pub format: ReadoutFormat,
    /// Output file; standard output when not given or `-` (JSON only).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz dla`.
pub fn run(model_dir: Option<&Path>, args: &DlaArgs) -> anyhow::Result<()> {
    let model = args.model.load(model_dir)?;
    let interventions = args.model.interventions()?;
    let tokens = input_tokens(&model, &args.text)?;
    model.check_tokens(&tokens, &interventions)?;
    super::note_knockouts(&model, &interventions, tokens.len());
    let position = args.position.unwrap_or(tokens.len().saturating_sub(1));
    let target = match (&args.token, args.token_id) {
        (Some(t), _) => Some(model.tokenizer.single_id(t)?),
        (None, id) => id,
    };
    let versus = args.versus.as_deref().map(|v| model.tokenizer.single_id(v)).transpose()?;
    let a = model.attribute(&tokens, position, target, versus, &interventions)?;
    super::note_run(&model, interventions.describe().as_deref());
    let h = a.heads_per_layer.max(1);
    let total = a.total();
    let written = match args.format {
        ReadoutFormat::Json => Written::Json(serde_json::json!({
            "model": model.name,
            "intervention": interventions.describe(),
            "tokens": tokens.tokens,
            "position": a.position,
            "target_id": a.target_id,
            "target_token": a.target_token,
            "versus_id": a.versus_id,
            "versus_token": a.versus_token,
            "logit": a.logit,
            "embeddings": a.embeddings,
            "heads": a.heads.chunks(h).collect::<Vec<_>>(),
            "attention_biases": a.attention_biases,
            "mlps": a.mlps,
            "lm_head_bias": a.lm_head_bias,
            "sum_of_terms": total,
        })),
        ReadoutFormat::Npz => {
            let id = |v: i64| NpyArray::I64 { shape: vec![], data: vec![v] };
            let mut arrays = vec![
                ("tokens", NpyArray::Str(&tokens.tokens)),
                ("position", id(a.position as i64)),
                ("target_id", id(i64::from(a.target_id))),
                ("logit", scalar(&a.logit)),
                ("embeddings", scalar(&a.embeddings)),
                ("heads", NpyArray::F32 { shape: vec![a.heads.len() / h, h], data: &a.heads }),
                (
                    "attention_biases",
                    NpyArray::F32 { shape: vec![a.attention_biases.len()], data: &a.attention_biases },
                ),
                ("mlps", NpyArray::F32 { shape: vec![a.mlps.len()], data: &a.mlps }),
                ("lm_head_bias", scalar(&a.lm_head_bias)),
            ];
            if let Some(versus) = a.versus_id {
                arrays.push(("versus_id", id(i64::from(versus))));
            }
            Written::Npz(arrays)
        }
    };
    write_output(args.output.as_deref(), written)
}

/// A float32 array of one value (shape `()`).
fn scalar(v: &f32) -> NpyArray<'_> {
    NpyArray::F32 { shape: vec![], data: std::slice::from_ref(v) }
}
