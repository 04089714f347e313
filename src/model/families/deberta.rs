//! DeBERTa-v2 and v3 (`model_type` "deberta-v2"): BERT's post-LN layers with disentangled attention —
//! the content score `q·kᵀ` plus content→position (`c2p`) and position→content (`p2c`) terms read
//! from a table of relative-position embeddings, all divided by `√(head_dim · (1 + terms))`; relative
//! positions log-bucketed when `position_buckets > 0`; absolute positions only when
//! `position_biased_input`.
//!
//! Mirrors `modeling_deberta_v2.py`: `DebertaV2Embeddings` (word, + position, + token type, `embed_proj`,
//! `LayerNorm`), `DebertaV2Encoder.get_rel_embedding` (`LayerNorm` of `rel_embeddings` when
//! `norm_rel_ebd` has "`layer_norm`"), `DisentangledSelfAttention.disentangled_attention_bias`.

use serde_json::Value;

use super::{
    BERT_SIZE_KEYS, Family, Keys, Sizes, bounded, inverse_sqrt, positions, post_ln_encoder, rename_by_table,
    unsupported,
};
use crate::model::ModelError;
use crate::model::describe::{Description, Disentangled, EmbeddingDesc, PositionBias, Positions, Projection};

const LAYERS: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "embed.tokens"),
    ("embeddings.position_embeddings", "embed.positions"),
    ("embeddings.token_type_embeddings", "embed.types"),
    ("embeddings.LayerNorm", "embed.norm"),
    ("embeddings.embed_proj", "embed.project"),
    ("encoder.rel_embeddings", "rel.embeddings"),
    ("encoder.LayerNorm", "rel.norm"),
    ("encoder.layer.{}.attention.self.query_proj", "layer.{}.q"),
    ("encoder.layer.{}.attention.self.key_proj", "layer.{}.k"),
    ("encoder.layer.{}.attention.self.value_proj", "layer.{}.v"),
    ("encoder.layer.{}.attention.self.pos_key_proj", "layer.{}.pos_k"),
    ("encoder.layer.{}.attention.self.pos_query_proj", "layer.{}.pos_q"),
    ("encoder.layer.{}.attention.output.dense", "layer.{}.o"),
    ("encoder.layer.{}.attention.output.LayerNorm", "layer.{}.attn_norm"),
    ("encoder.layer.{}.intermediate.dense", "layer.{}.up"),
    ("encoder.layer.{}.output.dense", "layer.{}.down"),
    ("encoder.layer.{}.output.LayerNorm", "layer.{}.ffn_norm"),
];

/// DeBERTa-v2/v3.
pub static DEBERTA_V2: Family = Family {
    decoder: None,
    model_types: &["deberta-v2"],
    describe,
    canonical: |t, _| Ok(rename_by_table(t, &["deberta."], LAYERS)),
};

/// `pos_att_type` as a list (`["p2c", "c2p"]`) or the older string form (`"p2c|c2p"`).
fn attention_terms(keys: &Keys) -> Result<Vec<String>, ModelError> {
    let terms: Vec<String> = match keys.0.get("pos_att_type") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.split('|').map(|t| t.trim().to_lowercase()).filter(|t| !t.is_empty()).collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_lowercase).collect(),
        Some(other) => return Err(ModelError::Config(format!("\"pos_att_type\" must be a list, got {other}"))),
    };
    if let Some(t) = terms.iter().find(|t| !matches!(t.as_str(), "c2p" | "p2c")) {
        return Err(unsupported("pos_att_type", t.clone(), "supported terms: c2p, p2c"));
    }
    Ok(terms)
}

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    keys.refuse_unless(
        "conv_kernel_size",
        |v| v.as_u64() == Some(0),
        "the convolution layer (conv_kernel_size > 0) is not supported",
    )?;
    let s = Sizes::read(keys, BERT_SIZE_KEYS, None)?;
    let head_dim = keys.opt_usize("attention_head_size")?.unwrap_or(s.hidden / s.heads);
    if head_dim * s.heads != s.hidden {
        return Err(unsupported(
            "attention_head_size",
            head_dim.to_string(),
            "only hidden_size / num_attention_heads is supported",
        ));
    }
    let rows = positions(keys, "max_position_embeddings")?;
    let width = bounded("embedding_size", keys.opt_usize("embedding_size")?.unwrap_or(s.hidden), 1, super::MAX_WIDTH)?;
    let absolute = keys.opt_bool("position_biased_input")?.unwrap_or(true);
    let relative = keys.opt_bool("relative_attention")?.unwrap_or(false);
    // The scale counts pos_att_type's terms even when relative_attention is off (as transformers does).
    let terms = attention_terms(keys)?;
    let (c2p, p2c) = (terms.iter().any(|t| t == "c2p"), terms.iter().any(|t| t == "p2c"));
    let position_bias = if relative {
        let max_relative = match keys.opt_i64("max_relative_positions")?.unwrap_or(-1) {
            m if m < 1 => rows,
            m => m as usize,
        };
        let buckets = keys.opt_i64("position_buckets")?.unwrap_or(-1);
        let span = if buckets > 0 { buckets as usize } else { max_relative };
        bounded("position_buckets / max_relative_positions", span, 1, super::MAX_POSITIONS)?;
        let norm = keys.opt_str("norm_rel_ebd")?.unwrap_or("none");
        let norm = norm.split('|').any(|x| x.trim() == "layer_norm");
        PositionBias::Disentangled(Disentangled {
            span,
            log_buckets: (buckets > 0).then_some((buckets as usize, max_relative)),
            c2p,
            p2c,
            shared_projections: keys.opt_bool("share_att_key")?.unwrap_or(false),
            norm,
        })
    } else {
        PositionBias::None
    };
    // DisentangledSelfAttention: scale_factor = 1 + len(pos_att_type); scale = √(head_dim · factor).
    let factor = 1 + usize::from(c2p) + usize::from(p2c);
    let token_types = bounded("type_vocab_size", keys.opt_usize("type_vocab_size")?.unwrap_or(0), 0, 1 << 16)?;
    let base = post_ln_encoder(&s, keys.activation("hidden_act", "gelu")?, keys.eps("layer_norm_eps", 1e-7)?, rows);
    Ok(Description {
        head_dim,
        embedding: EmbeddingDesc {
            width,
            positions: if absolute { Positions::Table { rows, offset: 0 } } else { Positions::None },
            token_types,
            positions_first: true,
            projection: (width != s.hidden).then_some(Projection::BeforeNorm),
            projection_bias: false,
            ..base.embedding
        },
        reads_token_types: true,
        score_scale: inverse_sqrt(head_dim * factor),
        position_bias,
        // Without an absolute table nothing bounds the input but the tokenizer: at least 512.
        max_len: if absolute { rows } else { rows.max(512) },
        pad_token_id: Some(keys.opt_usize("pad_token_id")?.unwrap_or(0) as u32),
        ..base
    })
}
