//! GPT-2: pre-LN, causal, learned positions, a final norm (`ln_f`), no token types. Its `Conv1D`
//! weights are stored `in × out` (transposed here to `nn.Linear`'s `out × in`) and `c_attn` holds
//! query, key and value side by side (split here).
//!
//! Mirrors `modeling_gpt2.py`: `GPT2Block` (`ln_1` → attention → residual, `ln_2` → MLP → residual),
//! `GPT2Attention` eager (`q·kᵀ / √head_dim`, causal mask), `GPT2MLP` (`c_fc` → activation → `c_proj`).

use std::collections::HashMap;

use candle_core::Tensor;

use super::{Family, Keys, Sizes, Tensors, layer_part, positions, post_ln_encoder, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Description, EmbeddingDesc, LmHead, NormPlacement};

/// GPT-2 (`model_type` "gpt2").
pub static GPT2: Family = Family { decoder: None, model_types: &["gpt2"], describe, canonical };

fn describe(keys: &Keys) -> Result<Description, ModelError> {
    keys.refuse_unless(
        "scale_attn_weights",
        |v| v == &serde_json::Value::Bool(true),
        "only GPT-2's 1/√head_dim score scaling is supported",
    )?;
    keys.refuse_unless(
        "scale_attn_by_inverse_layer_idx",
        |v| v == &serde_json::Value::Bool(false),
        "scores divided by the layer number are not supported",
    )?;
    keys.refuse_unless(
        "add_cross_attention",
        |v| v == &serde_json::Value::Bool(false),
        "cross-attention is not supported",
    )?;
    let hidden = keys.usize("n_embd")?;
    let s =
        Sizes::read(keys, ["vocab_size", "n_embd", "n_layer", "n_head", "n_inner"], Some(hidden.saturating_mul(4)))?;
    let rows = positions(keys, "n_positions")?;
    // GPT2LMHeadModel ties its head to the token embeddings unless the config says otherwise (the
    // training lab's models have an output matrix of their own).
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    if s.intermediate == 0 {
        return Err(unsupported("n_inner", "0".into(), "must be at least 1"));
    }
    // GPT2Block: pre-LN, causal, a final norm (ln_f); GPT2Model adds no embedding norm.
    let base = post_ln_encoder(
        &s,
        keys.activation("activation_function", "gelu_new")?,
        keys.eps("layer_norm_epsilon", 1e-5)?,
        rows,
    );
    Ok(Description {
        embedding: EmbeddingDesc { norm: false, positions_first: true, ..base.embedding },
        reads_pairs: false,
        causal: true,
        norm: NormPlacement::Pre,
        final_norm: true,
        lm_head: if tied { LmHead::Tied } else { LmHead::Own },
        ..base
    })
}

/// GPT-2 tensors (with or without the `transformer.` prefix) → canonical names; `Conv1D` weights
/// transposed, `c_attn` split into q, k and v; the old checkpoints'
/// mask buffers (`attn.bias`, `attn.masked_bias`) dropped; the head kept when it is not tied.
fn canonical(tensors: Tensors, desc: &Description) -> Result<Tensors, String> {
    let h = desc.hidden;
    let mut out = HashMap::new();
    for (name, t) in tensors {
        let bad = |e: candle_core::Error| format!("tensor {name}: {e}");
        let transposed = |t: &Tensor| t.t().and_then(|t| t.contiguous()).map_err(bad);
        let short = name.strip_prefix("transformer.").unwrap_or(&name);
        let Some(rest) = short.strip_prefix("h.") else {
            let canon = match short {
                "wte.weight" => "embed.tokens.weight",
                "wpe.weight" => "embed.positions.weight",
                "ln_f.weight" => "final_norm.weight",
                "ln_f.bias" => "final_norm.bias",
                "lm_head.weight" if desc.lm_head == LmHead::Own => "lm_head.weight",
                _ => continue,
            };
            out.insert(canon.to_string(), t);
            continue;
        };
        let Some((layer, module, leaf)) = layer_part(rest) else { continue };
        let p = format!("layer.{layer}");
        let target = match module {
            "ln_1" => "attn_norm",
            "ln_2" => "ffn_norm",
            "attn.c_proj" => "o",
            "mlp.c_fc" => "up",
            "mlp.c_proj" => "down",
            "attn.c_attn" => {
                let weight = leaf == "weight";
                let dim = usize::from(weight);
                if t.dims().get(dim) != Some(&(3 * h)) {
                    return Err(format!(
                        "tensor {name} has shape {:?}; expected 3 × n_embd = {} wide",
                        t.dims(),
                        3 * h
                    ));
                }
                for (i, part) in ["q", "k", "v"].iter().enumerate() {
                    let piece = t.narrow(dim, i * h, h).map_err(bad)?;
                    let piece = if weight { transposed(&piece)? } else { piece };
                    out.insert(format!("{p}.{part}.{leaf}"), piece);
                }
                continue;
            }
            _ => continue,
        };
        let is_conv_weight = leaf == "weight" && !module.starts_with("ln_");
        let t = if is_conv_weight { transposed(&t)? } else { t };
        out.insert(format!("{p}.{target}.{leaf}"), t);
    }
    Ok(out)
}
