//! MPNet: BERT-like post-LN layers with a learned relative-position bias added to every score,
//! bucketed as T5 does (`relative_attention_num_buckets`, distances up to 128), computed once and
//! shared by every layer; positions start after the padding index (as RoBERTa's); no token types.
//!
//! Mirrors `modeling_mpnet.py`: `MPNetEmbeddings` (word + position, `LayerNorm`),
//! `MPNetEncoder.compute_position_bias`, `MPNetSelfAttention` (`q·kᵀ / √head_dim + position_bias`).

use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, bounded, positions, post_ln_encoder, rename_by_table, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc, PositionBias, Positions};

const LAYERS: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "embed.tokens"),
    ("embeddings.position_embeddings", "embed.positions"),
    ("embeddings.LayerNorm", "embed.norm"),
    ("encoder.relative_attention_bias", "rel.bias"),
    ("encoder.layer.{}.attention.attn.q", "layer.{}.q"),
    ("encoder.layer.{}.attention.attn.k", "layer.{}.k"),
    ("encoder.layer.{}.attention.attn.v", "layer.{}.v"),
    ("encoder.layer.{}.attention.attn.o", "layer.{}.o"),
    ("encoder.layer.{}.attention.LayerNorm", "layer.{}.attn_norm"),
    ("encoder.layer.{}.intermediate.dense", "layer.{}.up"),
    ("encoder.layer.{}.output.dense", "layer.{}.down"),
    ("encoder.layer.{}.output.LayerNorm", "layer.{}.ffn_norm"),
];

/// `MPNetEncoder.compute_position_bias` buckets with its default arguments, whatever the config says:
/// 32 buckets, distances up to 128 (`relative_attention_num_buckets` only sizes the table).
const BUCKETS: usize = 32;
const MAX_DISTANCE: usize = 128;
/// `MPNetEmbeddings.padding_idx`, fixed at 1 (not `pad_token_id`): positions start at 2.
const PADDING_IDX: usize = 1;

/// MPNet (`model_type` "mpnet").
pub static MPNET: Family = Family {
    decoder: None,
    model_types: &["mpnet"],
    describe,
    canonical: |t, _| Ok(rename_by_table(t, &["mpnet."], LAYERS)),
};

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    let s = Sizes::read(keys, BERT_SIZE_KEYS, None)?;
    let rows = positions(keys, "max_position_embeddings")?;
    if PADDING_IDX + 1 >= rows {
        return Err(unsupported("max_position_embeddings", rows.to_string(), "positions start at 2, past the table"));
    }
    let rows_of_bias = keys.opt_usize("relative_attention_num_buckets")?.unwrap_or(32);
    bounded("relative_attention_num_buckets", rows_of_bias, BUCKETS, 1 << 16)?;
    let base = post_ln_encoder(&s, keys.activation("hidden_act", "gelu")?, keys.eps("layer_norm_eps", 1e-12)?, rows);
    Ok(Description {
        embedding: EmbeddingDesc {
            positions: Positions::Table { rows, offset: PADDING_IDX + 1 },
            positions_first: true,
            ..base.embedding
        },
        position_bias: PositionBias::Buckets {
            buckets: BUCKETS,
            max_distance: MAX_DISTANCE,
            rows: rows_of_bias,
            bidirectional: true,
        },
        max_len: rows - PADDING_IDX - 1,
        pad_token_id: Some(keys.opt_usize("pad_token_id")?.unwrap_or(1) as u32),
        ..base
    })
}
