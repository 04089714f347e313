//! gpt-oss (`model_type` `gpt_oss`): Llama's attention with q/k/v/o biases, a learned sink per
//! head, sliding and full layers (`layer_types`), `YaRN` rotary, and a mixture of experts in every
//! layer whose router has a bias and whose experts are clamped `SwiGLU`s with biases.
//!
//! Mirrors `modeling_gpt_oss.py`: `GptOssAttention` + `eager_attention_forward` (the sinks join
//! the softmax as a last column that is dropped: [`Description::attn_sinks`]), `GptOssTopKRouter`
//! (`linear(x, W, b)`, `topk` of the logits, softmax over those k: [`Gating::TopKThenSoftmax`]),
//! `GptOssExperts` (`x @ gate_up_proj[e] + bias`, gate and up interleaved in its columns,
//! `_apply_gate`: [`Glu::Clamped`], then `@ down_proj[e] + bias`, summed with `index_add_` in
//! ascending expert order), `GptOssRotaryEmbedding` (halves rotated as `rotate_half` does).
//!
//! The experts are stored transposed to `nn.Linear` (`experts × in × out`) and fused; they are
//! split here into each expert's `gate`, `up` and `down` with their biases.

use serde_json::Value;

use super::decoder::{kv_heads, pre_norm_decoder, rotary, rotary_max_len, sliding_layers, window};
use super::moe::experts;
use super::{
    BERT_SIZE_KEYS, Family, Keys, Sizes, Tensors, bounded, layer_part, positions, rename_by_table, unsupported,
};
use crate::model::ModelError;
use crate::model::describe::{Activation, Biases, Description, Gating, Glu};

/// `GptOssForCausalLM`'s modules → canonical names (the `model.` prefix stripped); the sinks and
/// the fused experts are renamed by [`canonical`].
const LAYERS: &[(&str, &str)] = &[
    ("embed_tokens", "embed.tokens"),
    ("layers.{}.self_attn.q_proj", "layer.{}.q"),
    ("layers.{}.self_attn.k_proj", "layer.{}.k"),
    ("layers.{}.self_attn.v_proj", "layer.{}.v"),
    ("layers.{}.self_attn.o_proj", "layer.{}.o"),
    ("layers.{}.input_layernorm", "layer.{}.attn_norm"),
    ("layers.{}.post_attention_layernorm", "layer.{}.ffn_norm"),
    ("layers.{}.mlp.router", "layer.{}.router"),
    ("norm", "final_norm"),
    ("lm_head", "lm_head"),
];

/// gpt-oss (`model_type` `gpt_oss`).
pub static GPT_OSS: Family = Family { decoder: None, model_types: &["gpt_oss"], describe, canonical };

/// `layers.{l}.self_attn.sinks` → `layer.{l}.sinks`; the fused experts split; the rest by [`LAYERS`].
fn canonical(t: Tensors, _: &Description) -> Result<Tensors, String> {
    let mut out = Tensors::new();
    let mut rest = Tensors::new();
    for (name, tensor) in t {
        let Some((layer, module, leaf)) =
            name.strip_prefix("model.").unwrap_or(&name).strip_prefix("layers.").and_then(layer_part)
        else {
            rest.insert(name, tensor);
            continue;
        };
        match (module, leaf) {
            ("self_attn", "sinks") => {
                out.insert(format!("layer.{layer}.sinks"), tensor);
            }
            ("mlp.experts", leaf) if leaf.starts_with("gate_up_proj") || leaf.starts_with("down_proj") => {
                split_experts(&name, layer, leaf, &tensor, &mut out)?;
            }
            _ => {
                rest.insert(name, tensor);
            }
        }
    }
    out.extend(rename_by_table(rest, &["model."], LAYERS));
    Ok(out)
}

/// One of `GptOssExperts`' parameters split per expert into `nn.Linear` shapes:
/// `gate_up_proj` (`experts × hidden × 2·width`, gate in the even columns, up in the odd ones),
/// `gate_up_proj_bias` (`experts × 2·width`, the same interleaving), `down_proj`
/// (`experts × width × hidden`) and `down_proj_bias` (`experts × hidden`).
fn split_experts(
    name: &str,
    layer: &str,
    leaf: &str,
    t: &candle_core::Tensor,
    out: &mut Tensors,
) -> Result<(), String> {
    let err = |e: candle_core::Error| format!("{name}: {e}");
    let dims = t.dims().to_vec();
    let (part, bias) = match leaf {
        "gate_up_proj" | "down_proj" if dims.len() == 3 => (leaf, false),
        "gate_up_proj_bias" | "down_proj_bias" if dims.len() == 2 => (leaf.trim_end_matches("_bias"), true),
        "gate_up_proj" | "down_proj" | "gate_up_proj_bias" | "down_proj_bias" => {
            return Err(format!("{name} has shape {dims:?}: experts × in × out (a bias: experts × out) expected"));
        }
        _ => return Err(format!("{name}: unknown expert tensor (MXFP4 blocks are read from GGUF files only)")),
    };
    let leaf_name = if bias { "bias" } else { "weight" };
    for e in 0..dims[0] {
        let one = t.get(e).map_err(err)?;
        // A weight `in × out` becomes `out × in`; a bias stays a row.
        let one = if bias { one } else { one.t().map_err(err)?.contiguous().map_err(err)? };
        if part == "down_proj" {
            out.insert(format!("layer.{layer}.expert.{e}.down.{leaf_name}"), one);
            continue;
        }
        let rows = one.dims()[0];
        if !rows.is_multiple_of(2) {
            return Err(format!("{name}: gate and up must be equally wide, got {rows} columns"));
        }
        let device = one.device().clone();
        let pick = |start: u32| -> Result<candle_core::Tensor, String> {
            let index: Vec<u32> = (start..rows as u32).step_by(2).collect();
            let index = candle_core::Tensor::new(index.as_slice(), &device).map_err(err)?;
            one.index_select(&index, 0).map_err(err)
        };
        out.insert(format!("layer.{layer}.expert.{e}.gate.{leaf_name}"), pick(0)?);
        out.insert(format!("layer.{layer}.expert.{e}.up.{leaf_name}"), pick(1)?);
    }
    Ok(())
}

/// `GptOssConfig`: every default as it has them (`__post_init__`: sliding on even layers, `YaRN`
/// factor 32 over 4096 positions with `truncate` false when no rope parameters are given).
fn describe(keys: &Keys) -> Result<Description, ModelError> {
    keys.refuse_unless(
        "quantization_config",
        |_| false,
        "quantized safetensors (MXFP4 expert blocks) are not read; open the model's GGUF file or a dequantised checkpoint",
    )?;
    let s = Sizes::read_with_head_dim(keys, BERT_SIZE_KEYS, None, Some("head_dim"))?;
    let kv = kv_heads(keys, s.heads)?;
    let hd = bounded("head_dim", keys.opt_usize("head_dim")?.unwrap_or(64), 2, 1 << 14)?;
    let max_positions = match keys.opt_usize("max_position_embeddings")? {
        Some(_) => positions(keys, "max_position_embeddings")?,
        None => 131_072,
    };
    let mut rope_keys = keys.0.clone();
    if matches!(rope_keys.get("rope_parameters"), None | Some(Value::Null))
        && matches!(rope_keys.get("rope_scaling"), None | Some(Value::Null))
    {
        rope_keys.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": false, "original_max_position_embeddings": 4096}),
        );
    }
    let rot = rotary(&Keys(rope_keys), hd, max_positions, 150_000.0, None, None)?;
    let max_len = rotary_max_len(&rot, max_positions);
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    // The experts' activation is the clamped SwiGLU below; `hidden_act` is not read by gpt-oss.
    let base = pre_norm_decoder(&s, kv, hd, Activation::Silu, keys.eps("rms_norm_eps", 1e-5)?, max_len, tied);
    let attention_bias = keys.opt_bool("attention_bias")?.unwrap_or(true);
    let number = |key: &str, default: f64| -> Result<f32, ModelError> {
        let v = keys.opt_f64(key)?.unwrap_or(default);
        if v.is_finite() && v > 0.0 {
            Ok(v as f32)
        } else {
            Err(unsupported(key, v.to_string(), "must be a positive number"))
        }
    };
    let glu = Glu::Clamped { alpha: number("swiglu_alpha", 1.702)?, limit: number("swiglu_limit", 7.0)? };
    let sparse = vec![true; base.weight_sets()];
    let e = experts(keys, &["num_local_experts", "num_experts"], Some(128), base.intermediate, false, sparse)?;
    Ok(Description {
        biases: Biases { qkv: attention_bias, output: attention_bias, ffn: true },
        rotary: Some(rot),
        attn_sinks: true,
        sliding_window: window(keys, Some(128))?,
        sliding_layers: sliding_layers(keys, s.layers, |i| (i + 1) % 2 == 1)?,
        experts: Some(crate::model::describe::Experts { gating: Gating::TopKThenSoftmax, router_bias: true, glu, ..e }),
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use crate::model::describe::{Gating, Glu, RopeScaling};

    const CONFIG: &str = r#"{"model_type":"gpt_oss","vocab_size":64,"hidden_size":32,"num_hidden_layers":3,
        "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":8,
        "num_local_experts":4,"num_experts_per_tok":2}"#;

    #[test]
    fn defaults_are_gpt_oss_config_s() {
        let (_, d) = super::super::describe(CONFIG).unwrap();
        assert!(d.attn_sinks);
        assert_eq!(d.sliding_layers, vec![true, false, true], "layer_types' default: even layers slide");
        assert_eq!(d.sliding_window, Some(128));
        let rot = d.rotary.unwrap();
        assert_eq!(rot.theta, 150_000.0);
        assert!(matches!(rot.scaling, RopeScaling::Yarn { factor: 32.0, original_max: 4096, truncate: false, .. }));
        let e = d.experts.unwrap();
        assert_eq!((e.count, e.top_k, e.width, e.gating, e.router_bias), (4, 2, 8, Gating::TopKThenSoftmax, true));
        assert_eq!(e.glu, Glu::Clamped { alpha: 1.702, limit: 7.0 });
        assert!(d.biases.qkv && d.biases.output && d.biases.ffn);
    }

    #[test]
    fn quantized_checkpoints_and_broken_clamps_are_refused_by_name() {
        let q = CONFIG.replace(
            r#""model_type":"gpt_oss","#,
            r#""model_type":"gpt_oss","quantization_config":{"quant_method":"mxfp4"},"#,
        );
        let err = super::super::describe(&q).unwrap_err().to_string();
        assert!(err.contains("quantization_config") && err.contains("MXFP4"), "{err}");
        let bad = CONFIG.replace(r#""model_type":"gpt_oss","#, r#""model_type":"gpt_oss","swiglu_limit":-1,"#);
        let err = super::super::describe(&bad).unwrap_err().to_string();
        assert!(err.contains("swiglu_limit"), "{err}");
    }
}
