//! DistilBERT: BERT's blocks under other names and config keys (`dim`, `n_layers`, `n_heads`,
//! `hidden_dim`, `activation`), no token types, `LayerNorm` eps fixed at 1e-12. With
//! `sinusoidal_pos_embds` the position table holds fixed sinusoids, stored in the checkpoint like a
//! learned one.
//!
//! Mirrors `modeling_distilbert.py`: `Embeddings` (word + position, `LayerNorm`), `TransformerBlock`
//! (attention, `sa_layer_norm`, FFN `lin1` → activation → `lin2`, `output_layer_norm`), scores
//! `(q / √head_dim)·kᵀ`.

use super::{Family, Keys, Sizes, inverse_sqrt, positions, rename_by_table};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc, NormPlacement, PositionBias, Positions};

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
    model_types: &["distilbert"],
    describe,
    canonical: |t, _| Ok(rename_by_table(t, &["distilbert."], LAYERS)),
};

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    let s = Sizes::read(keys, ["vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"], None)?;
    let rows = positions(keys, "max_position_embeddings")?;
    Ok(Description {
        family: String::new(),
        vocab_size: s.vocab,
        hidden: s.hidden,
        layers: s.layers,
        heads: s.heads,
        head_dim: s.hidden / s.heads,
        intermediate: s.intermediate,
        activation: keys.activation("activation", "gelu")?,
        embedding: EmbeddingDesc {
            width: s.hidden,
            positions: Positions::Table { rows, offset: 0 },
            token_types: 0,
            scale: 1.0,
            norm: true,
            positions_first: true,
            projection: None,
            projection_bias: true,
        },
        reads_token_types: false,
        reads_pairs: true,
        causal: false,
        score_scale: inverse_sqrt(s.hidden / s.heads),
        position_bias: PositionBias::None,
        norm: NormPlacement::Post,
        norm_eps: 1e-12,
        final_norm: false,
        layer_weights: (0..s.layers).collect(),
        max_len: rows,
        pad_token_id: Some(keys.opt_usize("pad_token_id")?.unwrap_or(0) as u32),
    })
}
