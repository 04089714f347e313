//! Encoder–decoders: BART, mBART, Marian and T5 (Flan-T5). Each is two descriptions — the encoder
//! and the decoder, whose layers add cross-attention to the encoder's output — run by the one
//! engine. Decoder tensors get canonical names under `decoder.`; the token embeddings are shared.
//!
//! Mirrors `modeling_bart.py` (post-LN layers; learned positions from row 2; `layernorm_embedding`;
//! embeddings × `√d_model` with `scale_embedding`; `final_logits_bias`), `modeling_mbart.py` (pre-LN,
//! a final `layer_norm` per stack), `modeling_marian.py` (post-LN, sinusoidal positions computed,
//! not stored; no embedding norm) and `modeling_t5.py` (`T5LayerNorm`: `RMSNorm` without mean or
//! bias; no biases; scores not scaled; relative-position buckets from each stack's first layer,
//! bidirectional in the encoder, causal in the decoder; `relu` or `gated-gelu` feed-forward; a
//! tied head reads the hidden state × `d_model^-0.5`).
//!
//! A checkpoint of a base class (`BartModel`, `T5Model`: transformers' classes without `lm_head`)
//! has no language-model head: its decoder runs for attention only. Where a model with a head
//! lacks `final_logits_bias`, it is zero, as transformers loads it (`_keys_to_ignore_on_load_missing`).

use serde_json::Value;

use super::{DecoderSpec, Family, Keys, Sizes, Tensors, bounded, inverse_sqrt, positions, post_ln_encoder, rename_one};
use crate::model::ModelError;
use crate::model::describe::{
    Activation, Biases, Description, EmbeddingDesc, FeedForward, LmHead, NormKind, NormPlacement, PositionBias,
    Positions,
};

/// BART (`model_type` "bart").
pub static BART: Family = Family {
    model_types: &["bart"],
    describe: |k| bart_like(k, Variant::Bart, false),
    decoder: Some(|k| bart_decoder(k, Variant::Bart)),
    canonical: bart_canonical,
};

/// mBART: BART with pre-LN layers and a final norm per stack.
pub static MBART: Family = Family {
    model_types: &["mbart"],
    describe: |k| bart_like(k, Variant::Mbart, false),
    decoder: Some(|k| bart_decoder(k, Variant::Mbart)),
    canonical: bart_canonical,
};

/// Marian (`MarianMTModel`): sinusoidal positions, scaled embeddings, no embedding norm.
pub static MARIAN: Family = Family {
    model_types: &["marian"],
    describe: |k| bart_like(k, Variant::Marian, false),
    decoder: Some(|k| bart_decoder(k, Variant::Marian)),
    canonical: bart_canonical,
};

/// T5, T5 v1.1 and Flan-T5.
pub static T5: Family = Family {
    model_types: &["t5"],
    describe: |k| t5_like(k, false),
    decoder: Some(|k| Ok(DecoderSpec { desc: t5_like(k, true)?, start: start_token(k)? })),
    canonical: t5_canonical,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Bart,
    Mbart,
    Marian,
}

/// `decoder_start_token_id` (BART: `</s>`; Marian and T5: the padding token).
fn start_token(keys: &Keys) -> Result<u32, ModelError> {
    let id = match keys.opt_usize("decoder_start_token_id")? {
        Some(id) => id,
        None => keys.usize("pad_token_id")?,
    };
    u32::try_from(id).map_err(|_| super::unsupported("decoder_start_token_id", id.to_string(), "is not a token id"))
}

fn bart_decoder(keys: &Keys, variant: Variant) -> Result<DecoderSpec, ModelError> {
    Ok(DecoderSpec { desc: bart_like(keys, variant, true)?, start: start_token(keys)? })
}

/// Whether the checkpoint has a language-model head: its `architectures` name a class with one
/// (`…ForConditionalGeneration`, `MarianMTModel`, the old `T5WithLMHeadModel`), or nothing at all.
/// A base model saved alone (`BartModel`, `MBartModel`, `MarianModel`, `T5Model`) has none.
fn has_lm_head(keys: &Keys) -> bool {
    let architectures = keys.architectures();
    architectures.is_empty()
        || architectures
            .iter()
            .any(|a| a.ends_with("ForConditionalGeneration") || a.ends_with("MTModel") || a.ends_with("LMHeadModel"))
}

/// The decoder's head: none without one ([`has_lm_head`]), else tied or its own.
fn lm_head(keys: &Keys, decoder: bool, tied: bool) -> LmHead {
    match (decoder && has_lm_head(keys), tied) {
        (false, _) => LmHead::None,
        (true, true) => LmHead::Tied,
        (true, false) => LmHead::Own,
    }
}

fn bart_like(keys: &Keys, variant: Variant, decoder: bool) -> Result<Description, ModelError> {
    let side = if decoder { "decoder" } else { "encoder" };
    let names = [
        "vocab_size",
        "d_model",
        &format!("{side}_layers"),
        &format!("{side}_attention_heads"),
        &format!("{side}_ffn_dim"),
    ];
    let s = Sizes::read(keys, [names[0], names[1], names[2], names[3], names[4]], None)?;
    let rows = positions(keys, "max_position_embeddings")?;
    let pre = match variant {
        Variant::Mbart => true,
        _ => keys.opt_bool("normalize_before")?.unwrap_or(false),
    };
    if variant == Variant::Marian {
        keys.refuse_unless(
            "static_position_embeddings",
            |v| v == &Value::Bool(true),
            "only Marian's sinusoidal positions are supported",
        )?;
    }
    let scale = if keys.opt_bool("scale_embedding")?.unwrap_or(false) { (s.hidden as f64).sqrt() as f32 } else { 1.0 };
    let positions = match variant {
        // BartLearnedPositionalEmbedding: rows max_position_embeddings + 2, position i reads row i + 2.
        Variant::Bart | Variant::Mbart => Positions::Table { rows: rows + 2, offset: 2 },
        Variant::Marian => Positions::Sinusoidal { rows },
    };
    let norm_embedding = match variant {
        Variant::Marian => keys.opt_bool("normalize_embedding")?.unwrap_or(false),
        _ => true,
    };
    let final_norm = match variant {
        Variant::Mbart => true,
        _ => keys.opt_bool("add_final_layer_norm")?.unwrap_or(false),
    };
    let base = post_ln_encoder(&s, keys.activation("activation_function", "gelu")?, 1e-5, rows);
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    Ok(Description {
        embedding: EmbeddingDesc { positions, norm: norm_embedding, scale, positions_first: true, ..base.embedding },
        reads_pairs: false,
        causal: decoder,
        norm: if pre { NormPlacement::Pre } else { NormPlacement::Post },
        final_norm,
        cross_attention: decoder,
        lm_head: lm_head(keys, decoder, tied),
        // `final_logits_bias`, part of the head (zeros where the checkpoint lacks it: bart_canonical).
        logits_bias: decoder && has_lm_head(keys),
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}

fn t5_like(keys: &Keys, decoder: bool) -> Result<Description, ModelError> {
    let layers_key =
        if decoder && keys.opt_usize("num_decoder_layers")?.is_some() { "num_decoder_layers" } else { "num_layers" };
    let s = Sizes::read_with_head_dim(
        keys,
        ["vocab_size", "d_model", layers_key, "num_heads", "d_ff"],
        None,
        Some("d_kv"),
    )?;
    let head_dim = bounded("d_kv", keys.opt_usize("d_kv")?.unwrap_or(s.hidden / s.heads), 1, 1 << 14)?;
    let proj = keys.opt_str("feed_forward_proj")?.unwrap_or("relu");
    let (gated, act) = match proj.strip_prefix("gated-") {
        // T5Config: "gated-gelu" means gelu_new.
        Some("gelu") => (true, "gelu_new"),
        Some(a) => (true, a),
        None => (false, proj),
    };
    let activation = Activation::from_name(act).ok_or_else(|| {
        super::unsupported(
            "feed_forward_proj",
            proj.to_string(),
            "supported: relu, gelu, gated-gelu, gated-relu, gated-silu",
        )
    })?;
    let buckets = bounded(
        "relative_attention_num_buckets",
        keys.opt_usize("relative_attention_num_buckets")?.unwrap_or(32),
        2,
        1 << 16,
    )?;
    let max_distance = bounded(
        "relative_attention_max_distance",
        keys.opt_usize("relative_attention_max_distance")?.unwrap_or(128),
        2,
        1 << 20,
    )?;
    // No position limit in the model; inputs are cut where its tokenizer cuts them (n_positions).
    let max_len = bounded("n_positions", keys.opt_usize("n_positions")?.unwrap_or(512), 1, 1 << 20)?;
    let base = post_ln_encoder(&s, activation, keys.eps("layer_norm_epsilon", 1e-6)?, max_len);
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    Ok(Description {
        head_dim,
        kv_heads: s.heads,
        feed_forward: if gated { FeedForward::Gated } else { FeedForward::Plain },
        biases: Biases::NONE,
        norm_kind: NormKind::Rms,
        embedding: EmbeddingDesc { positions: Positions::None, norm: false, ..base.embedding },
        reads_pairs: false,
        causal: decoder,
        score_scale: 1.0,
        position_bias: PositionBias::Buckets { buckets, max_distance, rows: buckets, bidirectional: !decoder },
        norm: NormPlacement::Pre,
        final_norm: true,
        cross_attention: decoder,
        lm_head: lm_head(keys, decoder, tied),
        // T5ForConditionalGeneration: `sequence_output * model_dim**-0.5` before a tied head.
        logit_scale: if decoder && tied { inverse_sqrt(s.hidden) } else { 1.0 },
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}

/// BART-family modules (after `model.`) → canonical names; the decoder's under `decoder.`.
const BART_TABLE: &[(&str, &str)] = &[
    ("shared", "embed.tokens"),
    ("encoder.embed_tokens", "embed.tokens"),
    ("encoder.embed_positions", "embed.positions"),
    ("encoder.layernorm_embedding", "embed.norm"),
    ("encoder.layer_norm", "final_norm"),
    ("encoder.layers.{}.self_attn.q_proj", "layer.{}.q"),
    ("encoder.layers.{}.self_attn.k_proj", "layer.{}.k"),
    ("encoder.layers.{}.self_attn.v_proj", "layer.{}.v"),
    ("encoder.layers.{}.self_attn.out_proj", "layer.{}.o"),
    ("encoder.layers.{}.self_attn_layer_norm", "layer.{}.attn_norm"),
    ("encoder.layers.{}.fc1", "layer.{}.up"),
    ("encoder.layers.{}.fc2", "layer.{}.down"),
    ("encoder.layers.{}.final_layer_norm", "layer.{}.ffn_norm"),
    ("decoder.embed_positions", "decoder.embed.positions"),
    ("decoder.layernorm_embedding", "decoder.embed.norm"),
    ("decoder.layer_norm", "decoder.final_norm"),
    ("decoder.layers.{}.self_attn.q_proj", "decoder.layer.{}.q"),
    ("decoder.layers.{}.self_attn.k_proj", "decoder.layer.{}.k"),
    ("decoder.layers.{}.self_attn.v_proj", "decoder.layer.{}.v"),
    ("decoder.layers.{}.self_attn.out_proj", "decoder.layer.{}.o"),
    ("decoder.layers.{}.self_attn_layer_norm", "decoder.layer.{}.attn_norm"),
    ("decoder.layers.{}.encoder_attn.q_proj", "decoder.layer.{}.cq"),
    ("decoder.layers.{}.encoder_attn.k_proj", "decoder.layer.{}.ck"),
    ("decoder.layers.{}.encoder_attn.v_proj", "decoder.layer.{}.cv"),
    ("decoder.layers.{}.encoder_attn.out_proj", "decoder.layer.{}.co"),
    ("decoder.layers.{}.encoder_attn_layer_norm", "decoder.layer.{}.cross_norm"),
    ("decoder.layers.{}.fc1", "decoder.layer.{}.up"),
    ("decoder.layers.{}.fc2", "decoder.layer.{}.down"),
    ("decoder.layers.{}.final_layer_norm", "decoder.layer.{}.ffn_norm"),
    ("lm_head", "decoder.lm_head"),
];

/// T5 modules → canonical names.
const T5_TABLE: &[(&str, &str)] = &[
    ("shared", "embed.tokens"),
    ("encoder.embed_tokens", "embed.tokens"),
    ("encoder.final_layer_norm", "final_norm"),
    ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias", "rel.bias"),
    ("encoder.block.{}.layer.0.SelfAttention.q", "layer.{}.q"),
    ("encoder.block.{}.layer.0.SelfAttention.k", "layer.{}.k"),
    ("encoder.block.{}.layer.0.SelfAttention.v", "layer.{}.v"),
    ("encoder.block.{}.layer.0.SelfAttention.o", "layer.{}.o"),
    ("encoder.block.{}.layer.0.layer_norm", "layer.{}.attn_norm"),
    ("encoder.block.{}.layer.1.DenseReluDense.wi", "layer.{}.up"),
    ("encoder.block.{}.layer.1.DenseReluDense.wi_0", "layer.{}.gate"),
    ("encoder.block.{}.layer.1.DenseReluDense.wi_1", "layer.{}.up"),
    ("encoder.block.{}.layer.1.DenseReluDense.wo", "layer.{}.down"),
    ("encoder.block.{}.layer.1.layer_norm", "layer.{}.ffn_norm"),
    ("decoder.final_layer_norm", "decoder.final_norm"),
    ("decoder.block.0.layer.0.SelfAttention.relative_attention_bias", "decoder.rel.bias"),
    ("decoder.block.{}.layer.0.SelfAttention.q", "decoder.layer.{}.q"),
    ("decoder.block.{}.layer.0.SelfAttention.k", "decoder.layer.{}.k"),
    ("decoder.block.{}.layer.0.SelfAttention.v", "decoder.layer.{}.v"),
    ("decoder.block.{}.layer.0.SelfAttention.o", "decoder.layer.{}.o"),
    ("decoder.block.{}.layer.0.layer_norm", "decoder.layer.{}.attn_norm"),
    ("decoder.block.{}.layer.1.EncDecAttention.q", "decoder.layer.{}.cq"),
    ("decoder.block.{}.layer.1.EncDecAttention.k", "decoder.layer.{}.ck"),
    ("decoder.block.{}.layer.1.EncDecAttention.v", "decoder.layer.{}.cv"),
    ("decoder.block.{}.layer.1.EncDecAttention.o", "decoder.layer.{}.co"),
    ("decoder.block.{}.layer.1.layer_norm", "decoder.layer.{}.cross_norm"),
    ("decoder.block.{}.layer.2.DenseReluDense.wi", "decoder.layer.{}.up"),
    ("decoder.block.{}.layer.2.DenseReluDense.wi_0", "decoder.layer.{}.gate"),
    ("decoder.block.{}.layer.2.DenseReluDense.wi_1", "decoder.layer.{}.up"),
    ("decoder.block.{}.layer.2.DenseReluDense.wo", "decoder.layer.{}.down"),
    ("decoder.block.{}.layer.2.layer_norm", "decoder.layer.{}.ffn_norm"),
    ("lm_head", "decoder.lm_head"),
];

/// Renames through `table`, with `final_logits_bias` (`[1, vocab]`) as the decoder's
/// `logits_bias`; the shared token embeddings also become the decoder's.
fn seq2seq_canonical(tensors: Tensors, table: &[(&str, &str)]) -> Result<Tensors, String> {
    let mut out = Tensors::new();
    for (name, t) in tensors {
        if name == "final_logits_bias" {
            let flat = t.flatten_all().map_err(|e| format!("tensor {name}: {e}"))?;
            out.insert("decoder.logits_bias".into(), flat);
            continue;
        }
        if let Some(canon) = rename_one(&name, &["model."], table) {
            // `shared` and a tied `encoder.embed_tokens` are the same table: keep the first.
            out.entry(canon).or_insert(t);
        }
    }
    if let Some(tokens) = out.get("embed.tokens.weight").cloned() {
        out.entry("decoder.embed.tokens.weight".into()).or_insert(tokens);
    }
    Ok(out)
}

/// BART-family tensors; a `final_logits_bias` the checkpoint lacks is zeros over the vocabulary, as
/// transformers initialises it (it is in `_keys_to_ignore_on_load_missing`). A decoder without a
/// head does not read it.
fn bart_canonical(tensors: Tensors, desc: &Description) -> Result<Tensors, String> {
    let mut out = seq2seq_canonical(tensors, BART_TABLE)?;
    if !out.contains_key("decoder.logits_bias") {
        let zeros = candle_core::Tensor::zeros(desc.vocab_size, candle_core::DType::F32, &candle_core::Device::Cpu)
            .map_err(|e| format!("final_logits_bias: {e}"))?;
        out.insert("decoder.logits_bias".into(), zeros);
    }
    Ok(out)
}

fn t5_canonical(tensors: Tensors, _: &Description) -> Result<Tensors, String> {
    seq2seq_canonical(tensors, T5_TABLE)
}
