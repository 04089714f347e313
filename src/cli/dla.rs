//! `attnviz dla`: direct logit attribution at one position — each head's, each MLP's and the
//! embeddings' share of one token's logit (or of a difference of two) — as JSON.

use std::path::{Path, PathBuf};

use clap::Args;

use super::readout::{Written, input_tokens, write_output};

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
    /// Output file; standard output when not given or `-`.
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
    write_output(
        args.output.as_deref(),
        Written::Json(serde_json::json!({
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
    )
}
