//! Llama-shaped decoders of 2024–2025 whose departures are each a field of the description:
//! Phi-3 / Phi-4-mini (fused `qkv_proj` and `gate_up_proj`, partial rotary, long-rope scaling),
//! OLMo-2 (norms after attention and MLP instead of before, q/k norms over the whole
//! projection), Granite (embedding, attention, residual and logit multipliers) and `SmolLM3`
//! (layers without rotation).
//!
//! Mirrors `modeling_phi3.py` (`Phi3Attention` splits `qkv_proj` into q, k, v; `Phi3MLP` chunks
//! `gate_up_proj` into gate, up), `modeling_olmo2.py` (`Olmo2DecoderLayer`: `x +
//! post_attention_layernorm(attn(x))`, then `h + post_feedforward_layernorm(mlp(h))`;
//! `q_norm(q_proj(x))` before the heads are split), `modeling_granite.py` (`inputs_embeds *
//! embedding_multiplier`, scores × `attention_multiplier`, `residual + out *
//! residual_multiplier`, `logits / logits_scaling`) and `modeling_smollm3.py` (`use_rope =
//! no_rope_layers[layer_idx]`).

use std::collections::HashMap;

use serde_json::Value;

use super::decoder::{head_dim, kv_heads, pre_norm_decoder, rotary, rotary_max_len, sliding_layers, window};
use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, Tensors, positions, rename_by_table, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Biases, Description, EmbeddingDesc, NormKind, QkNorm};

/// The Llama module names these families share → canonical names (the `model.` prefix
/// stripped); OLMo-2's norms after each sub-block, Phi-3's fused projections (split by
/// [`canonical`]).
const LAYERS: &[(&str, &str)] = &[
    ("embed_tokens", "embed.tokens"),
    ("layers.{}.self_attn.q_proj", "layer.{}.q"),
    ("layers.{}.self_attn.k_proj", "layer.{}.k"),
    ("layers.{}.self_attn.v_proj", "layer.{}.v"),
    ("layers.{}.self_attn.qkv_proj", "layer.{}.qkv"),
    ("layers.{}.self_attn.o_proj", "layer.{}.o"),
    ("layers.{}.self_attn.q_norm", "layer.{}.q_norm"),
    ("layers.{}.self_attn.k_norm", "layer.{}.k_norm"),
    ("layers.{}.input_layernorm", "layer.{}.attn_norm"),
    ("layers.{}.post_feedforward_layernorm", "layer.{}.ffn_out_norm"),
    ("layers.{}.mlp.gate_proj", "layer.{}.gate"),
    ("layers.{}.mlp.up_proj", "layer.{}.up"),
    ("layers.{}.mlp.gate_up_proj", "layer.{}.gate_up"),
    ("layers.{}.mlp.down_proj", "layer.{}.down"),
    ("norm", "final_norm"),
    ("lm_head", "lm_head"),
];

/// Llama's `post_attention_layernorm` is the MLP's input norm; OLMo-2's normalises the
/// attention's output.
const POST_ATTENTION_AS_FFN_NORM: &[(&str, &str)] = &[("layers.{}.post_attention_layernorm", "layer.{}.ffn_norm")];
const POST_ATTENTION_AS_OUT_NORM: &[(&str, &str)] = &[("layers.{}.post_attention_layernorm", "layer.{}.attn_out_norm")];

fn rename(t: Tensors, desc: &Description) -> Tensors {
    let extra = if desc.output_norms { POST_ATTENTION_AS_OUT_NORM } else { POST_ATTENTION_AS_FFN_NORM };
    let table: Vec<(&str, &str)> = LAYERS.iter().chain(extra).copied().collect();
    rename_by_table(t, &["model."], &table)
}

/// Renames, then splits Phi-3's fused `qkv` rows into q, k and v and `gate_up` into gate and up.
fn canonical(t: Tensors, desc: &Description) -> Result<Tensors, String> {
    let (attn, kv, i) = (desc.query_width(), desc.kv_width(), desc.intermediate);
    let mut out = HashMap::new();
    for (name, t) in rename(t, desc) {
        let parts: &[(&str, usize, usize)] = if name.ends_with(".qkv.weight") {
            &[("q", 0, attn), ("k", attn, kv), ("v", attn + kv, kv)]
        } else if name.ends_with(".gate_up.weight") {
            &[("gate", 0, i), ("up", i, i)]
        } else {
            out.insert(name, t);
            continue;
        };
        let (prefix, fused) = name.trim_end_matches(".weight").rsplit_once('.').ok_or("a fused name")?;
        let rows = t.dims().first().copied().unwrap_or(0);
        let want: usize = parts.iter().map(|p| p.2).sum();
        if rows != want {
            return Err(format!("{name} has {rows} rows; the config implies {want}"));
        }
        for &(part, start, len) in parts {
            let piece = t.narrow(0, start, len).map_err(|e| format!("{name}: {e}"))?;
            out.insert(format!("{prefix}.{part}.weight"), piece);
        }
        let _ = fused;
    }
    Ok(out)
}

/// Phi-3 and Phi-4-mini (`model_type` "phi3").
pub static PHI3: Family = Family { decoder: None, model_types: &["phi3"], describe: phi3, canonical };
/// OLMo-2 (`olmo2`).
pub static OLMO2: Family = Family { decoder: None, model_types: &["olmo2"], describe: olmo2, canonical };
/// Granite 3 (`granite`).
pub static GRANITE: Family = Family { decoder: None, model_types: &["granite"], describe: granite, canonical };
/// `SmolLM3` (`smollm3`).
pub static SMOLLM3: Family = Family { decoder: None, model_types: &["smollm3"], describe: smollm3, canonical };

/// What the four read alike: sizes, grouped-query heads, head width, positions, activation,
/// norm epsilon, tied head, biases, rotary positions (with `theta` by default) — Llama's shape.
fn llama_shape(keys: &Keys, default_tied: bool, theta: f64, rotary_keys: &Keys) -> Result<Description, ModelError> {
    let s = Sizes::read_with_head_dim(keys, BERT_SIZE_KEYS, None, Some("head_dim"))?;
    let kv = kv_heads(keys, s.heads)?;
    let hd = head_dim(keys, &s)?;
    let max_positions = match keys.opt_usize("max_position_embeddings")? {
        Some(_) => positions(keys, "max_position_embeddings")?,
        None => 2048,
    };
    let activation = keys.activation("hidden_act", "silu")?;
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(default_tied);
    let rot = rotary(rotary_keys, hd, max_positions, theta, None, None)?;
    let max_len = rotary_max_len(&rot, max_positions);
    let base = pre_norm_decoder(&s, kv, hd, activation, keys.eps("rms_norm_eps", 1e-6)?, max_len, tied);
    let attention_bias = keys.opt_bool("attention_bias")?.unwrap_or(false);
    Ok(Description {
        biases: Biases {
            qkv: attention_bias,
            output: attention_bias,
            ffn: keys.opt_bool("mlp_bias")?.unwrap_or(false),
        },
        norm_kind: NormKind::Rms,
        rotary: Some(rot),
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}

/// `Phi3Config`: rope parameters in `rope_parameters` (transformers 5) or top-level
/// `rope_theta` / `rope_scaling` / `partial_rotary_factor` (hub); the old names of long-rope
/// (`su`, and Phi-3's `yarn`) are read as `longrope`, as `convert_rope_params_to_dict` does.
fn phi3(keys: &Keys) -> Result<Description, ModelError> {
    let mut map = keys.0.clone();
    for section in ["rope_parameters", "rope_scaling"] {
        if let Some(Value::Object(p)) = map.get_mut(section) {
            for key in ["rope_type", "type"] {
                if matches!(p.get(key).and_then(Value::as_str), Some("su" | "yarn")) {
                    p.insert(key.into(), Value::from("longrope"));
                }
            }
        }
    }
    let rotary_keys = Keys(map);
    let desc = llama_shape(keys, false, 10_000.0, &rotary_keys)?;
    let s = window(keys, None)?;
    Ok(Description { sliding_window: s, ..desc })
}

/// `Olmo2Config`.
fn olmo2(keys: &Keys) -> Result<Description, ModelError> {
    let desc = llama_shape(keys, false, 10_000.0, keys)?;
    if desc.biases.qkv {
        return Err(unsupported(
            "attention_bias",
            "true".into(),
            "biases with OLMo-2's output norms are not supported",
        ));
    }
    Ok(Description { input_norms: false, output_norms: true, qk_norm: QkNorm::Whole, ..desc })
}

/// `GraniteConfig`: the four multipliers (defaults 1), `logits_scaling` as the head's factor
/// `1 / logits_scaling`.
fn granite(keys: &Keys) -> Result<Description, ModelError> {
    let desc = llama_shape(keys, true, 10_000.0, keys)?;
    let factor = |key: &str| -> Result<f64, ModelError> {
        let v = keys.opt_f64(key)?.unwrap_or(1.0);
        if v.is_finite() && v > 0.0 { Ok(v) } else { Err(unsupported(key, v.to_string(), "must be a positive number")) }
    };
    Ok(Description {
        embedding: EmbeddingDesc { scale: factor("embedding_multiplier")? as f32, ..desc.embedding },
        // GraniteAttention: `self.scaling = config.attention_multiplier` in place of head_dim^-0.5.
        score_scale: factor("attention_multiplier")? as f32,
        residual_scale: factor("residual_multiplier")? as f32,
        logit_scale: (1.0 / factor("logits_scaling")?) as f32,
        ..desc
    })
}

/// `SmolLM3Config`: `no_rope_layers[i] = 1` when layer `i` rotates (default: all but every
/// `no_rope_layer_interval`-th, 4); a sliding window only with `use_sliding_window`, on the
/// layers `layer_types` names.
fn smollm3(keys: &Keys) -> Result<Description, ModelError> {
    let desc = llama_shape(keys, true, 2_000_000.0, keys)?;
    let interval = keys.opt_usize("no_rope_layer_interval")?.unwrap_or(4).max(1);
    let rope_layers = match keys.0.get("no_rope_layers") {
        None | Some(Value::Null) => (0..desc.layers).map(|i| !(i + 1).is_multiple_of(interval)).collect(),
        Some(Value::Array(a)) if a.len() == desc.layers => a
            .iter()
            .map(|v| match v.as_u64() {
                Some(0) => Ok(false),
                Some(1) => Ok(true),
                _ => Err(unsupported("no_rope_layers", v.to_string(), "each entry must be 0 or 1")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => {
            return Err(ModelError::Config(format!(
                "\"no_rope_layers\" must list 0 or 1 per layer ({}), got {v}",
                desc.layers
            )));
        }
    };
    let sliding = keys.opt_bool("use_sliding_window")?.unwrap_or(false);
    let (window, layers) = if sliding {
        // SmolLM3Config's default layer_types: sliding where the layer does not rotate.
        (window(keys, None)?, sliding_layers(keys, desc.layers, |i| !rope_layers[i])?)
    } else {
        (None, Vec::new())
    };
    Ok(Description { rope_layers, sliding_window: window, sliding_layers: layers, ..desc })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::describe;
    use crate::model::describe::{QkNorm, RopeScaling};

    fn edited(text: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(text).unwrap();
        edit(v.as_object_mut().unwrap());
        v.to_string()
    }

    const PHI3: &str = include_str!("../../../tests/fixtures/models/tiny-phi3/config.json");

    #[test]
    fn phi3_reads_partial_rotary_and_long_rope_in_both_shapes() {
        let (_, new) = describe(PHI3).unwrap();
        let rot = new.rotary.clone().unwrap();
        assert_eq!(rot.dims, 4);
        let RopeScaling::LongRope { short, long, original_max, attention_factor } = &rot.scaling else {
            panic!("{:?}", rot.scaling)
        };
        assert_eq!((short.as_slice(), long.as_slice(), *original_max), (&[1.0, 1.5][..], &[2.0, 4.0][..], 16));
        assert!((attention_factor - (1.0 + 2f64.ln() / 16f64.ln()).sqrt()).abs() < 1e-12);
        // The hub's spelling: top-level partial_rotary_factor and rope_theta, rope_scaling of type "su".
        let hub = edited(PHI3, |m| {
            let mut p = m.remove("rope_parameters").unwrap();
            let p = p.as_object_mut().unwrap();
            m.insert("partial_rotary_factor".into(), p.remove("partial_rotary_factor").unwrap());
            m.insert("rope_theta".into(), p.remove("rope_theta").unwrap());
            p.remove("rope_type");
            p.insert("type".into(), json!("su"));
            m.insert("rope_scaling".into(), Value::Object(p.clone()));
        });
        assert_eq!(describe(&hub).unwrap().1, new);
        let short = edited(PHI3, |m| {
            drop(m["rope_parameters"].as_object_mut().unwrap().insert("short_factor".into(), json!([1.0])));
        });
        let err = describe(&short).unwrap_err().to_string();
        assert!(err.contains("short_factor") && err.contains('2'), "{err}");
    }

    #[test]
    fn each_family_reads_its_quirk() {
        let olmo2 = describe(include_str!("../../../tests/fixtures/models/tiny-olmo2/config.json")).unwrap().1;
        assert!(!olmo2.input_norms && olmo2.output_norms && olmo2.qk_norm == QkNorm::Whole);
        let granite = describe(include_str!("../../../tests/fixtures/models/tiny-granite/config.json")).unwrap().1;
        assert_eq!(
            (granite.embedding.scale, granite.score_scale, granite.residual_scale, granite.logit_scale),
            (3.0, 0.2, 0.5, 0.25)
        );
        let text = include_str!("../../../tests/fixtures/models/tiny-smollm3/config.json");
        let smollm3 = describe(text).unwrap().1;
        // no_rope_layers[i] = 1: layer i rotates.
        assert_eq!((smollm3.rotates(0), smollm3.rotates(1)), (true, false));
        assert!(smollm3.rotary_of(1).is_none() && smollm3.rotary_of(0).is_some());
        let err = describe(&edited(text, |m| drop(m.insert("no_rope_layers".into(), json!([1, 2]))))).unwrap_err();
        assert!(err.to_string().contains("no_rope_layers"), "{err}");
    }
}
