//! GPT-NeoX and Pythia: pre-LN with `LayerNorm`s, partial rotary positions (`rotary_pct` or
//! `rope_parameters.partial_rotary_factor` of each head, 0.25 by default), attention and feed-forward in parallel (`use_parallel_residual`), q/k/v fused per head.
//!
//! Mirrors `modeling_gpt_neox.py`: `GPTNeoXAttention` (`query_key_value` viewed as
//! `[heads][3 · head_dim]` and chunked into q, k, v; the first `rotary_ndims` of q and k rotated),
//! `GPTNeoXLayer` (`mlp(ln₂(x)) + attn(ln₁(x)) + x`, or sequential), `GPTNeoXMLP`
//! (`dense_h_to_4h` → activation → `dense_4h_to_h`).

use std::collections::HashMap;

use super::decoder::{pre_norm_decoder, rotary, rotary_max_len};
use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, Tensors, layer_part, positions};
use crate::model::ModelError;
use crate::model::describe::{Biases, Description, FeedForward, NormKind};

/// GPT-NeoX (`model_type` "`gpt_neox`").
pub static GPT_NEOX: Family = Family { decoder: None, model_types: &["gpt_neox"], describe, canonical };

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    let s = Sizes::read(keys, BERT_SIZE_KEYS, None)?;
    let hd = s.hidden / s.heads;
    let max_positions = match keys.opt_usize("max_position_embeddings")? {
        Some(_) => positions(keys, "max_position_embeddings")?,
        None => 2048,
    };
    // GPTNeoXConfig: rotary_pct defaults to 0.25.
    let rot = rotary(keys, hd, max_positions, 10_000.0, Some(("rotary_pct", 0.25)), Some("rotary_emb_base"))?;
    let max_len = rotary_max_len(&rot, max_positions);
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    let activation = keys.activation("hidden_act", "gelu")?;
    let base = pre_norm_decoder(&s, s.heads, hd, activation, keys.eps("layer_norm_eps", 1e-5)?, max_len, tied);
    let bias = keys.opt_bool("attention_bias")?.unwrap_or(true);
    Ok(Description {
        feed_forward: FeedForward::Plain,
        norm_kind: NormKind::Layer,
        biases: Biases { qkv: bias, output: bias, ffn: true },
        rotary: Some(rot),
        parallel_residual: keys.opt_bool("use_parallel_residual")?.unwrap_or(true),
        ..base
    })
}

/// GPT-NeoX tensors → canonical names; `query_key_value` (rows `[head][q | k | v]`) split into q,
/// k and v; the rotary buffers and masks of old checkpoints dropped.
fn canonical(tensors: Tensors, desc: &Description) -> Result<Tensors, String> {
    let (heads, d) = (desc.heads, desc.head_dim);
    let mut out = HashMap::new();
    for (name, t) in tensors {
        let short = name.strip_prefix("gpt_neox.").unwrap_or(&name);
        let Some(rest) = short.strip_prefix("layers.") else {
            let canon = match short {
                "embed_in.weight" => "embed.tokens.weight",
                "final_layer_norm.weight" => "final_norm.weight",
                "final_layer_norm.bias" => "final_norm.bias",
                "embed_out.weight" => "lm_head.weight",
                _ => continue,
            };
            out.insert(canon.to_string(), t);
            continue;
        };
        let Some((layer, module, leaf)) = layer_part(rest) else { continue };
        if leaf != "weight" && leaf != "bias" {
            continue;
        }
        let p = format!("layer.{layer}");
        let target = match module {
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            "attention.dense" => "o",
            "mlp.dense_h_to_4h" => "up",
            "mlp.dense_4h_to_h" => "down",
            "attention.query_key_value" => {
                if t.dims().first() != Some(&(3 * heads * d)) {
                    return Err(format!(
                        "tensor {name} has shape {:?}; expected 3 × hidden_size = {} rows",
                        t.dims(),
                        3 * heads * d
                    ));
                }
                // Rows are [head][q, k, v][head_dim]: gather each part's rows head by head.
                let bad = |e: candle_core::Error| format!("tensor {name}: {e}");
                for (i, part) in ["q", "k", "v"].iter().enumerate() {
                    let pieces = (0..heads)
                        .map(|h| t.narrow(0, (3 * h + i) * d, d))
                        .collect::<candle_core::Result<Vec<_>>>()
                        .map_err(bad)?;
                    out.insert(format!("{p}.{part}.{leaf}"), candle_core::Tensor::cat(&pieces, 0).map_err(bad)?);
                }
                continue;
            }
            _ => continue,
        };
        out.insert(format!("{p}.{target}.{leaf}"), t);
    }
    Ok(out)
}
