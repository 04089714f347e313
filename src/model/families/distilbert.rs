//! DistilBERT: BERT's blocks under other names and config keys (`dim`, `n_layers`, `n_heads`,
//! `hidden_dim`, `activation`), no token types, `LayerNorm` eps fixed at 1e-12. With
//! `sinusoidal_pos_embds` the position table holds fixed sinusoids, stored in the checkpoint like a
//! learned one.
//!
//! Mirrors `modeling_distilbert.py`: `Embeddings` (word + position, `LayerNorm`), `TransformerBlock`
//! (attention, `sa_layer_norm`, FFN `lin1` → activation → `lin2`, `output_layer_norm`), scores
//! `(q / √head_dim)·kᵀ`.

use super::{Family, Keys, Sizes, positions, post_ln_encoder, rename_by_table};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc};

const LAYERS: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "embed.tokens"),
    ("embeddings.position_embeddings", "embed.positions"),
    ("embeddings.LayerNorm", "embed.norm"),
    ("transformer.layer.{}.attention.q_lin", "layer.{}.q"),
    ("transformer.layer.{}.attention.k_lin", "layer.{}.k"),
    ("transformer.layer.{}.attention.v_lin", "layer.{}.v"),
    ("transformer.layer.{}.attention.out_lin", "layer.{}.o"),
    ("transformer.layer.{}.sa_layer_norm", "layer.{}.attn_norm"),
    ("transformer.layer.{}.ffn.lin1", "layer.{}.up"),
    ("transformer.layer.{}.ffn.lin2", "layer.{}.down"),
    ("transformer.layer.{}.output_layer_norm", "layer.{}.ffn_norm"),
];

/// DistilBERT (`model_type` "distilbert").
pub static DISTILBERT: Family = Family {
    decoder: None,
    model_types: &["distilbert"],
    describe,
    canonical: |t, _| Ok(rename_by_table(t, &["distilbert."], LAYERS)),
};

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    let s = Sizes::read(keys, ["vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"], None)?;
    let rows = positions(keys, "max_position_embeddings")?;
    // DistilBERT's LayerNorms are built with eps=1e-12 whatever the config says.
    let base = post_ln_encoder(&s, keys.activation("activation", "gelu")?, 1e-12, rows);
    Ok(Description {
        embedding: EmbeddingDesc { positions_first: true, ..base.embedding },
        pad_token_id: Some(keys.opt_usize("pad_token_id")?.unwrap_or(0) as u32),
        ..base
    })
}
