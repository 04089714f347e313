//! BERT and the families that share its blocks: RoBERTa (XLM-RoBERTa, CamemBERT) and ELECTRA.
//!
//! Mirrors `modeling_bert.py`, `modeling_roberta.py`, `modeling_xlm_roberta.py`, `modeling_camembert.py` and
//! `modeling_electra.py`: post-LN layers; embeddings `(word + token_type) + position`, then `LayerNorm`
//! (eps `layer_norm_eps`); scores `q·kᵀ / √head_dim`.

use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, positions, post_ln_encoder, rename_by_table, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc, Positions, Projection};

/// `BertModel`'s modules → canonical names (shared by every family in this file).
const LAYERS: &[(&str, &str)] = &[
    ("embeddings.word_embeddings", "embed.tokens"),
    ("embeddings.position_embeddings", "embed.positions"),
    ("embeddings.token_type_embeddings", "embed.types"),
    ("embeddings.LayerNorm", "embed.norm"),
    ("embeddings_project", "embed.project"),
    ("encoder.layer.{}.attention.self.query", "layer.{}.q"),
    ("encoder.layer.{}.attention.self.key", "layer.{}.k"),
    ("encoder.layer.{}.attention.self.value", "layer.{}.v"),
    ("encoder.layer.{}.attention.output.dense", "layer.{}.o"),
    ("encoder.layer.{}.attention.output.LayerNorm", "layer.{}.attn_norm"),
    ("encoder.layer.{}.intermediate.dense", "layer.{}.up"),
    ("encoder.layer.{}.output.dense", "layer.{}.down"),
    ("encoder.layer.{}.output.LayerNorm", "layer.{}.ffn_norm"),
];

/// BERT (`model_type` "bert"): learned positions from 0, token types read from the tokenizer.
pub static BERT: Family = Family {
    decoder: None,
    model_types: &["bert"],
    describe: |keys| bert_like(keys, Variant::Bert),
    canonical: |t, _| Ok(rename_by_table(t, &["bert."], LAYERS)),
};

/// RoBERTa and checkpoints of its architecture: positions start after the padding index, and the
/// tokenizer passes no token types (the model adds type row 0).
pub static ROBERTA: Family = Family {
    decoder: None,
    model_types: &["roberta", "xlm-roberta", "camembert"],
    describe: |keys| bert_like(keys, Variant::Roberta),
    canonical: |t, _| Ok(rename_by_table(t, &["roberta."], LAYERS)),
};

/// ELECTRA discriminators and generators: embeddings `embedding_size` wide, projected to the hidden
/// width (`embeddings_project`) after the embedding norm when the widths differ.
pub static ELECTRA: Family = Family {
    decoder: None,
    model_types: &["electra"],
    describe: |keys| bert_like(keys, Variant::Electra),
    canonical: |t, _| Ok(rename_by_table(t, &["electra."], LAYERS)),
};

/// The training lab's pre-LN encoder classifier (`model_type` "attnviz-pre-ln-bert"): BERT's
/// tensors and keys, each block normalising before its sub-layers (`attention.output.LayerNorm`
/// before attention, `output.LayerNorm` before the MLP), a final norm (`encoder.LayerNorm`).
/// transformers has no such class: it refuses the `model_type`.
pub static PRE_LN_BERT: Family = Family {
    decoder: None,
    model_types: &["attnviz-pre-ln-bert"],
    describe: |keys| {
        let desc = bert_like(keys, Variant::Bert)?;
        Ok(Description { norm: crate::model::NormPlacement::Pre, final_norm: true, ..desc })
    },
    canonical: |mut t, _| {
        let mut finals = Vec::new();
        for leaf in ["weight", "bias"] {
            for prefix in ["bert.", ""] {
                if let Some(norm) = t.remove(&format!("{prefix}encoder.LayerNorm.{leaf}")) {
                    finals.push((format!("final_norm.{leaf}"), norm));
                }
            }
        }
        let mut out = rename_by_table(t, &["bert."], LAYERS);
        out.extend(finals);
        Ok(out)
    },
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Bert,
    Roberta,
    Electra,
}

fn bert_like(keys: &Keys, variant: Variant) -> Result<Description, ModelError> {
    keys.refuse_decoder_settings()?;
    keys.refuse_unless(
        "position_embedding_type",
        |v| v == "absolute",
        "only learned absolute position embeddings are supported (relative_key variants are not)",
    )?;
    let s = Sizes::read(keys, BERT_SIZE_KEYS, None)?;
    let rows = positions(keys, "max_position_embeddings")?;
    let pad = keys.opt_usize("pad_token_id")?.unwrap_or(usize::from(variant == Variant::Roberta));
    // RobertaEmbeddings.create_position_ids_from_input_ids: padding_idx + 1 + i for unpadded input.
    let offset = if variant == Variant::Roberta { pad + 1 } else { 0 };
    if offset >= rows {
        return Err(unsupported(
            "max_position_embeddings",
            rows.to_string(),
            &format!("positions start at pad_token_id + 1 = {offset}, past the table"),
        ));
    }
    let width = match variant {
        Variant::Electra => keys.opt_usize("embedding_size")?.unwrap_or(128),
        _ => s.hidden,
    };
    super::bounded("embedding_size", width, 1, super::MAX_WIDTH)?;
    let token_types = keys.opt_usize("type_vocab_size")?.unwrap_or(2);
    super::bounded("type_vocab_size", token_types, 0, super::MAX_VOCAB)?;
    let base = post_ln_encoder(&s, keys.activation("hidden_act", "gelu")?, keys.eps("layer_norm_eps", 1e-12)?, rows);
    Ok(Description {
        embedding: EmbeddingDesc {
            width,
            positions: Positions::Table { rows, offset },
            token_types,
            projection: (width != s.hidden).then_some(Projection::AfterNorm),
            ..base.embedding
        },
        reads_token_types: variant != Variant::Roberta,
        max_len: rows - offset,
        pad_token_id: Some(pad as u32),
        ..base
    })
}
