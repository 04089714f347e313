//! ALBERT: factorised embeddings (`embedding_size` wide, projected to the hidden width by
//! `embedding_hidden_mapping_in`), and layers that share weights: `num_hidden_layers` layers run
//! `num_hidden_groups` groups of `inner_group_num` weight sets each.
//!
//! Mirrors `modeling_albert.py`: `AlbertTransformer.forward` runs, for layer `i`, group
//! `int(i / (num_hidden_layers / num_hidden_groups))`, whose `AlbertLayer`s each return one
//! attention; `AlbertLayer` is BERT's post-LN block (`attention.LayerNorm` after the attention,
//! `ffn` → activation → `ffn_output`, `full_layer_layer_norm`).

use std::collections::HashMap;

use super::{
    BERT_SIZE_KEYS, Family, Keys, Sizes, Tensors, bounded, positions, post_ln_encoder, rename_one, unsupported,
};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc, Projection};

const LAYERS: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "embed.tokens"),
    ("embeddings.position_embeddings", "embed.positions"),
    ("embeddings.token_type_embeddings", "embed.types"),
    ("embeddings.LayerNorm", "embed.norm"),
    ("encoder.embedding_hidden_mapping_in", "embed.project"),
    ("encoder.layer.{}.attention.query", "layer.{}.q"),
    ("encoder.layer.{}.attention.key", "layer.{}.k"),
    ("encoder.layer.{}.attention.value", "layer.{}.v"),
    ("encoder.layer.{}.attention.dense", "layer.{}.o"),
    ("encoder.layer.{}.attention.LayerNorm", "layer.{}.attn_norm"),
    ("encoder.layer.{}.ffn", "layer.{}.up"),
    ("encoder.layer.{}.ffn_output", "layer.{}.down"),
    ("encoder.layer.{}.full_layer_layer_norm", "layer.{}.ffn_norm"),
];

/// ALBERT (`model_type` "albert").
pub static ALBERT: Family =
    Family { decoder: None, model_types: &["albert"], describe, canonical: |t, _| Ok(canonical(t)) };

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    keys.refuse_unless("position_embedding_type", |v| v == "absolute", "only absolute positions are supported")?;
    let s = Sizes::read(keys, BERT_SIZE_KEYS, None)?;
    let groups = bounded("num_hidden_groups", keys.opt_usize("num_hidden_groups")?.unwrap_or(1), 1, s.layers)?;
    let inner = bounded("inner_group_num", keys.opt_usize("inner_group_num")?.unwrap_or(1), 1, 64)?;
    let layer_weights = layer_weights(s.layers, groups, inner);
    let width = bounded("embedding_size", keys.opt_usize("embedding_size")?.unwrap_or(128), 1, super::MAX_WIDTH)?;
    let rows = positions(keys, "max_position_embeddings")?;
    let token_types = bounded("type_vocab_size", keys.opt_usize("type_vocab_size")?.unwrap_or(2), 0, 1 << 16)?;
    if layer_weights.len() > 4 * super::MAX_LAYERS {
        return Err(unsupported("inner_group_num", inner.to_string(), "too many layers in all"));
    }
    let base =
        post_ln_encoder(&s, keys.activation("hidden_act", "gelu_new")?, keys.eps("layer_norm_eps", 1e-12)?, rows);
    Ok(Description {
        layers: layer_weights.len(),
        embedding: EmbeddingDesc { width, token_types, projection: Some(Projection::AfterNorm), ..base.embedding },
        // transformers 5's AlbertTokenizer returns no token_type_ids (model_input_names =
        // [input_ids, attention_mask]): pairs reach the model with type 0 throughout.
        reads_token_types: false,
        layer_weights,
        pad_token_id: Some(keys.opt_usize("pad_token_id")?.unwrap_or(0) as u32),
        ..base
    })
}

/// The weight set of every layer run: layer `i` runs group `⌊i / (layers / groups)⌋` (in floating
/// point, as Python's `int(i / (n / g))`), each group its `inner` sets in order.
fn layer_weights(layers: usize, groups: usize, inner: usize) -> Vec<usize> {
    let per_group = layers as f64 / groups as f64;
    (0..layers)
        .flat_map(|i| {
            let group = ((i as f64 / per_group) as usize).min(groups - 1);
            (0..inner).map(move |j| group * inner + j)
        })
        .collect()
}

/// Renames `albert_layer_groups.{g}.albert_layers.{j}` to weight set `g · inner_group_num + j`, with
/// `inner_group_num` read off the checkpoint (one more than its largest `j`); a checkpoint that does
/// not match the config then misses tensors the config implies, and says which.
fn canonical(tensors: Tensors) -> Tensors {
    let place = |name: &str| -> Option<(usize, usize, String)> {
        let rest = name.strip_prefix("albert.").unwrap_or(name).strip_prefix("encoder.albert_layer_groups.")?;
        let (g, rest) = rest.split_once('.')?;
        let (j, rest) = rest.strip_prefix("albert_layers.")?.split_once('.')?;
        Some((g.parse().ok()?, j.parse().ok()?, rest.to_string()))
    };
    let inner = tensors.keys().filter_map(|n| place(n)).map(|(_, j, _)| j + 1).max().unwrap_or(1);
    let mut out = HashMap::new();
    for (name, t) in tensors {
        let name = match place(&name) {
            Some((g, j, rest)) => format!("encoder.layer.{}.{rest}", g.saturating_mul(inner).saturating_add(j)),
            None => name.strip_prefix("albert.").unwrap_or(&name).to_string(),
        };
        if let Some(canon) = rename_one(&name, &[], LAYERS) {
            out.insert(canon, t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_run_their_group_as_python_computes_it() {
        assert_eq!(layer_weights(4, 1, 1), [0, 0, 0, 0]);
        assert_eq!(layer_weights(4, 2, 1), [0, 0, 1, 1]);
        assert_eq!(layer_weights(3, 2, 1), [0, 0, 1]); // int(i / 1.5)
        assert_eq!(layer_weights(2, 1, 2), [0, 1, 0, 1]);
        assert_eq!(layer_weights(2, 2, 2), [0, 1, 2, 3]);
    }
}
