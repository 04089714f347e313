//! Llama and the decoders that share its modules and tensor names: Mistral, Qwen2, Qwen3, Gemma.
//!
//! Mirrors `modeling_llama.py`: `LlamaDecoderLayer` (`input_layernorm` → attention → residual,
//! `post_attention_layernorm` → MLP → residual), `LlamaAttention` eager (q, k rotated by
//! `apply_rotary_pos_emb` with `rotate_half`; grouped-query heads through `repeat_kv`;
//! `q·kᵀ · head_dim^-0.5`, causal mask), `LlamaMLP` (`down(act(gate(x)) · up(x))`), `LlamaRMSNorm`.
//! Departures, each a field of the description: Mistral's `sliding_window`; Qwen2's q/k/v biases;
//! Qwen3's `q_norm`/`k_norm` before the rotation; Gemma's embeddings × √hidden, `(1 + weight)`
//! norms and `gelu_pytorch_tanh` gate.

use super::decoder::{head_dim, kv_heads, pre_norm_decoder, refuse_mixed_layer_types, rotary, rotary_max_len};
use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, bounded, positions, rename_by_table};
use crate::model::ModelError;
use crate::model::describe::{Activation, Biases, Description, EmbeddingDesc, NormKind, QkNorm};

/// `LlamaForCausalLM`'s modules → canonical names (the `model.` prefix stripped).
const LAYERS: &[(&str, &str)] = &[
    ("embed_tokens", "embed.tokens"),
    ("layers.{}.self_attn.q_proj", "layer.{}.q"),
    ("layers.{}.self_attn.k_proj", "layer.{}.k"),
    ("layers.{}.self_attn.v_proj", "layer.{}.v"),
    ("layers.{}.self_attn.o_proj", "layer.{}.o"),
    ("layers.{}.self_attn.q_norm", "layer.{}.q_norm"),
    ("layers.{}.self_attn.k_norm", "layer.{}.k_norm"),
    ("layers.{}.input_layernorm", "layer.{}.attn_norm"),
    ("layers.{}.post_attention_layernorm", "layer.{}.ffn_norm"),
    ("layers.{}.mlp.gate_proj", "layer.{}.gate"),
    ("layers.{}.mlp.up_proj", "layer.{}.up"),
    ("layers.{}.mlp.down_proj", "layer.{}.down"),
    ("norm", "final_norm"),
    ("lm_head", "lm_head"),
];

#[allow(clippy::unnecessary_wraps)] // the signature every family's mapping has
fn canonical(t: super::Tensors, _: &Description) -> Result<super::Tensors, String> {
    Ok(rename_by_table(t, &["model."], LAYERS))
}

/// Llama 1/2/3 and look-alikes (`model_type` "llama").
pub static LLAMA: Family =
    Family { decoder: None, model_types: &["llama"], describe: |k| llama_like(k, Variant::Llama), canonical };

/// Mistral: Llama with a sliding window.
pub static MISTRAL: Family =
    Family { decoder: None, model_types: &["mistral"], describe: |k| llama_like(k, Variant::Mistral), canonical };

/// Qwen2 (and Qwen2.5): Llama with q/k/v biases.
pub static QWEN2: Family =
    Family { decoder: None, model_types: &["qwen2"], describe: |k| llama_like(k, Variant::Qwen2), canonical };

/// Qwen3: Llama with per-head `RMSNorm` on q and k and an explicit `head_dim`.
pub static QWEN3: Family =
    Family { decoder: None, model_types: &["qwen3"], describe: |k| llama_like(k, Variant::Qwen3), canonical };

/// Gemma (the first): scaled embeddings, `(1 + weight)` norms, multi-query attention.
pub static GEMMA: Family =
    Family { decoder: None, model_types: &["gemma"], describe: |k| llama_like(k, Variant::Gemma), canonical };

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Gemma,
}

fn llama_like(keys: &Keys, variant: Variant) -> Result<Description, ModelError> {
    refuse_mixed_layer_types(keys)?;
    if variant == Variant::Gemma {
        keys.refuse_unless(
            "use_bidirectional_attention",
            |v| v == &serde_json::Value::Bool(false),
            "attnviz runs Gemma as a causal decoder",
        )?;
    }
    if matches!(variant, Variant::Qwen2 | Variant::Qwen3) {
        keys.refuse_unless(
            "use_sliding_window",
            |v| v == &serde_json::Value::Bool(false),
            "Qwen's per-layer sliding windows are not supported",
        )?;
    }
    let s = Sizes::read_with_head_dim(keys, BERT_SIZE_KEYS, None, Some("head_dim"))?;
    let kv = kv_heads(keys, s.heads)?;
    let hd = match variant {
        // GemmaConfig's default head width.
        Variant::Gemma => bounded("head_dim", keys.opt_usize("head_dim")?.unwrap_or(256), 2, 1 << 14)?,
        _ => head_dim(keys, &s)?,
    };
    let max_positions = match keys.opt_usize("max_position_embeddings")? {
        Some(_) => positions(keys, "max_position_embeddings")?,
        None => 2048,
    };
    let activation = match (variant, keys.opt_str("hidden_act")?) {
        // GemmaConfig: the legacy "gelu" of the official releases means the tanh approximation.
        (Variant::Gemma, None | Some("gelu")) => Activation::GeluTanh,
        (_, None) => Activation::Silu,
        (_, Some(_)) => keys.activation("hidden_act", "silu")?,
    };
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(variant == Variant::Gemma);
    let theta = if matches!(variant, Variant::Qwen2 | Variant::Qwen3) { 1_000_000.0 } else { 10_000.0 };
    let rot = rotary(keys, hd, max_positions, theta, None, None)?;
    let max_len = rotary_max_len(&rot, max_positions);
    let base = pre_norm_decoder(&s, kv, hd, activation, keys.eps("rms_norm_eps", 1e-6)?, max_len, tied);
    let attention_bias = keys.opt_bool("attention_bias")?.unwrap_or(false);
    let biases = Biases {
        qkv: attention_bias || variant == Variant::Qwen2,
        output: attention_bias,
        ffn: keys.opt_bool("mlp_bias")?.unwrap_or(false),
    };
    let sliding_window = match variant {
        // MistralConfig's default window; null turns it off.
        Variant::Mistral => match keys.0.get("sliding_window") {
            None => Some(4096),
            Some(serde_json::Value::Null) => None,
            Some(_) => Some(bounded("sliding_window", keys.usize("sliding_window")?, 1, usize::MAX >> 8)?),
        },
        _ => None,
    };
    let gemma = variant == Variant::Gemma;
    Ok(Description {
        embedding: EmbeddingDesc {
            // GemmaModel: `inputs_embeds * torch.tensor(hidden_size**0.5, dtype)`.
            scale: if gemma { (s.hidden as f64).sqrt() as f32 } else { 1.0 },
            ..base.embedding
        },
        norm_kind: if gemma { NormKind::RmsPlusOne } else { NormKind::Rms },
        biases,
        rotary: Some(rot),
        qk_norm: if variant == Variant::Qwen3 { QkNorm::PerHead } else { QkNorm::None },
        sliding_window,
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}
