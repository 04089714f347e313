//! Gemma 2 and Gemma 3 (text): Gemma's scaled embeddings, `(1 + weight)` norms and gated GELU,
//! with a norm on each sub-block's output, `query_pre_attn_scalar`, and sliding-window layers
//! (`layer_types`); Gemma 2 soft-caps its scores and logits; Gemma 3 norms q and k per head and
//! rotates its sliding layers with a local base.
//!
//! Mirrors `modeling_gemma2.py` and `modeling_gemma3.py`: `Gemma2DecoderLayer` (`input_layernorm`
//! → attention → `post_attention_layernorm` → residual, `pre_feedforward_layernorm` → MLP →
//! `post_feedforward_layernorm` → residual; here `post_attention_layernorm` normalises the
//! attention's output, where Llama's is the MLP's input norm), `Gemma2Attention` (scores ×
//! `query_pre_attn_scalar^-0.5`, then `tanh(s / cap) · cap`), `Gemma2ForCausalLM` (logits
//! soft-capped), `Gemma3Attention` (`q_norm` / `k_norm` before the rotation; no score capping),
//! `Gemma3TextModel` (one rotary table per layer type).

use serde_json::{Map, Value};

use super::decoder::{kv_heads, pre_norm_decoder, rotary, sliding_layers, softcap, window};
use super::{BERT_SIZE_KEYS, Family, Keys, Sizes, bounded, positions, rename_by_table, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Biases, Description, EmbeddingDesc, NormKind, QkNorm, Rotary};

/// `Gemma2ForCausalLM` / `Gemma3ForCausalLM`'s modules → canonical names (the `model.` prefix
/// stripped; a `gemma3` checkpoint's text tower under `language_model.`).
const LAYERS: &[(&str, &str)] = &[
    ("embed_tokens", "embed.tokens"),
    ("layers.{}.self_attn.q_proj", "layer.{}.q"),
    ("layers.{}.self_attn.k_proj", "layer.{}.k"),
    ("layers.{}.self_attn.v_proj", "layer.{}.v"),
    ("layers.{}.self_attn.o_proj", "layer.{}.o"),
    ("layers.{}.self_attn.q_norm", "layer.{}.q_norm"),
    ("layers.{}.self_attn.k_norm", "layer.{}.k_norm"),
    ("layers.{}.input_layernorm", "layer.{}.attn_norm"),
    ("layers.{}.post_attention_layernorm", "layer.{}.attn_out_norm"),
    ("layers.{}.pre_feedforward_layernorm", "layer.{}.ffn_norm"),
    ("layers.{}.post_feedforward_layernorm", "layer.{}.ffn_out_norm"),
    ("layers.{}.mlp.gate_proj", "layer.{}.gate"),
    ("layers.{}.mlp.up_proj", "layer.{}.up"),
    ("layers.{}.mlp.down_proj", "layer.{}.down"),
    ("norm", "final_norm"),
    ("lm_head", "lm_head"),
];

/// The prefixes of the text tower: a text model's `model.`, a `gemma3` checkpoint's
/// `language_model.model.` (hub) or `model.language_model.` (transformers 5), its
/// `language_model.lm_head`.
const PREFIXES: &[&str] = &["language_model.model.", "model.language_model.", "language_model.", "model."];

#[allow(clippy::unnecessary_wraps)] // the signature every family's mapping has
fn canonical(t: super::Tensors, _: &Description) -> Result<super::Tensors, String> {
    Ok(rename_by_table(t.into_iter().filter(|(n, _)| !is_other_tower(n)).collect(), PREFIXES, LAYERS))
}

/// A `gemma3` checkpoint's vision tower and projector, which the text model does not read.
fn is_other_tower(name: &str) -> bool {
    ["vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Gemma 2 (`model_type` "gemma2").
pub static GEMMA2: Family =
    Family { decoder: None, model_types: &["gemma2"], describe: |k| gemma(k, Version::Two), canonical };

/// Gemma 3's text model (`gemma3_text`), and the text tower of a `gemma3` checkpoint
/// (`text_config`).
pub static GEMMA3: Family = Family {
    decoder: None,
    model_types: &["gemma3_text", "gemma3"],
    describe: |k| match k.0.get("model_type").and_then(Value::as_str) {
        Some("gemma3") => gemma3_tower(k),
        _ => gemma(k, Version::Three),
    },
    canonical,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    Two,
    Three,
}

/// A `gemma3` checkpoint: its `text_config` as a Gemma 3 text model.
fn gemma3_tower(keys: &Keys) -> Result<Description, ModelError> {
    let Some(Value::Object(text)) = keys.0.get("text_config") else {
        return Err(ModelError::Config("a gemma3 config.json needs its \"text_config\"".into()));
    };
    let mut text = text.clone();
    // Gemma3Config ties the head to the embeddings unless it says otherwise.
    if let (None, Some(tied)) = (text.get("tie_word_embeddings"), keys.0.get("tie_word_embeddings")) {
        text.insert("tie_word_embeddings".into(), tied.clone());
    }
    gemma(&Keys(text), Version::Three)
}

fn gemma(keys: &Keys, version: Version) -> Result<Description, ModelError> {
    keys.refuse_unless(
        "use_bidirectional_attention",
        |v| v == &Value::Bool(false),
        "attnviz runs Gemma as a causal decoder",
    )?;
    keys.refuse_unless(
        "attention_bias",
        |v| v == &Value::Bool(false),
        "biases with Gemma's output norms are not supported",
    )?;
    let s = Sizes::read_with_head_dim(keys, BERT_SIZE_KEYS, None, Some("head_dim"))?;
    let kv = kv_heads(keys, s.heads)?;
    let hd = bounded("head_dim", keys.opt_usize("head_dim")?.unwrap_or(256), 2, 1 << 14)?;
    let default_positions = if version == Version::Two { 8192 } else { 131_072 };
    let max_positions = match keys.opt_usize("max_position_embeddings")? {
        Some(_) => positions(keys, "max_position_embeddings")?,
        None => default_positions,
    };
    let activation = keys.activation("hidden_activation", "gelu_pytorch_tanh")?;
    let tied = keys.opt_bool("tie_word_embeddings")?.unwrap_or(true);
    let base = pre_norm_decoder(&s, kv, hd, activation, keys.eps("rms_norm_eps", 1e-6)?, max_positions, tied);
    // Gemma2Config: sliding on even layers; Gemma3TextConfig: all but every
    // `sliding_window_pattern`-th (6).
    let pattern = match version {
        Version::Two => 2,
        Version::Three => bounded(
            "sliding_window_pattern",
            keys.opt_usize("sliding_window_pattern")?.unwrap_or(6),
            1,
            usize::MAX >> 8,
        )?,
    };
    let sliding = sliding_layers(keys, s.layers, |i| !(i + 1).is_multiple_of(pattern))?;
    let query_scalar = keys.opt_f64("query_pre_attn_scalar")?.unwrap_or(256.0);
    if !(query_scalar.is_finite() && query_scalar > 0.0) {
        return Err(unsupported("query_pre_attn_scalar", query_scalar.to_string(), "must be a positive number"));
    }
    let (full, local) = match version {
        Version::Two => (rotary(keys, hd, max_positions, 10_000.0, None, None)?, None),
        Version::Three => {
            let (full, local) = gemma3_rotary(keys, hd, max_positions)?;
            (full, Some(local))
        }
    };
    let two = version == Version::Two;
    Ok(Description {
        embedding: EmbeddingDesc {
            // Gemma2TextScaledWordEmbedding: `embed_tokens(ids) * hidden_size**0.5` (in the
            // weights' dtype).
            scale: (s.hidden as f64).sqrt() as f32,
            ..base.embedding
        },
        norm_kind: NormKind::RmsPlusOne,
        biases: Biases::NONE,
        rotary: Some(full),
        local_rotary: local,
        qk_norm: if two { QkNorm::None } else { QkNorm::PerHead },
        sliding_window: window(keys, Some(4096))?,
        sliding_layers: sliding,
        // `query_pre_attn_scalar**-0.5`, a Python float.
        score_scale: query_scalar.powf(-0.5) as f32,
        // Gemma 3's attention does not pass its `attn_logit_softcapping` on (transformers runs
        // it uncapped), so neither does this.
        attn_softcap: if two { softcap(keys, "attn_logit_softcapping", Some(50.0))? } else { None },
        final_softcap: softcap(keys, "final_logit_softcapping", if two { Some(30.0) } else { None })?,
        output_norms: true,
        pad_token_id: keys.opt_usize("pad_token_id")?.and_then(|p| u32::try_from(p).ok()),
        ..base
    })
}

/// Gemma 3's two rotary tables, in both shapes: transformers 5's `rope_parameters` per layer type
/// (`full_attention`, `sliding_attention`), or the hub's top-level `rope_theta` (full layers,
/// default 1 000 000), `rope_local_base_freq` (sliding layers, default 10 000) and `rope_scaling`
/// (full layers only) — `Gemma3TextConfig.convert_rope_params_to_dict`.
fn gemma3_rotary(keys: &Keys, hd: usize, max_positions: usize) -> Result<(Rotary, Rotary), ModelError> {
    let nested = match keys.0.get("rope_parameters") {
        Some(Value::Object(p)) if p.contains_key("full_attention") || p.contains_key("sliding_attention") => {
            Some(p.clone())
        }
        _ => None,
    };
    let with = |params: Option<Value>, theta: Option<f64>| -> Keys {
        let mut map: Map<String, Value> = keys.0.clone();
        map.remove("rope_parameters");
        map.remove("rope_scaling");
        map.remove("rope_theta");
        if let Some(p) = params {
            map.insert("rope_parameters".into(), p);
        }
        if let Some(t) = theta {
            map.insert("rope_theta".into(), Value::from(t));
        }
        Keys(map)
    };
    if let Some(p) = nested {
        let full = with(p.get("full_attention").cloned(), None);
        let local = with(p.get("sliding_attention").cloned(), None);
        return Ok((
            rotary(&full, hd, max_positions, 1_000_000.0, None, None)?,
            rotary(&local, hd, max_positions, 10_000.0, None, None)?,
        ));
    }
    let mut full = keys.0.clone();
    full.remove("rope_parameters");
    if let Some(Value::Object(flat)) = keys.0.get("rope_parameters") {
        // A flat `rope_parameters` (not per layer type) stands for the full layers'.
        full.insert("rope_parameters".into(), Value::Object(flat.clone()));
    }
    let full = Keys(full);
    let local_theta = keys.opt_f64("rope_local_base_freq")?.unwrap_or(10_000.0);
    let local = with(None, Some(local_theta));
    Ok((
        rotary(&full, hd, max_positions, 1_000_000.0, None, None)?,
        rotary(&local, hd, max_positions, 10_000.0, None, None)?,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::describe;
    use crate::model::describe::{RopeScaling, Rotary};

    const TINY: &str = include_str!("../../../tests/fixtures/models/tiny-gemma3/config.json");

    fn edited(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(TINY).unwrap();
        edit(v.as_object_mut().unwrap());
        v.to_string()
    }

    #[test]
    fn gemma3_reads_its_rotary_tables_in_both_shapes() {
        let (_, new) = describe(TINY).unwrap();
        assert_eq!(
            new.rotary,
            Some(Rotary { dims: 16, theta: 10_000.0, scaling: RopeScaling::Linear { factor: 2.0 } })
        );
        assert_eq!(new.local_rotary, Some(Rotary { dims: 16, theta: 100.0, scaling: RopeScaling::None }));
        assert_eq!(new.sliding_layers, [true, false]);
        assert_eq!((new.window(0), new.window(1)), (Some(4), None));
        // The hub's spelling: rope_theta and rope_scaling for the full layers, rope_local_base_freq.
        let hub = edited(|m| {
            m.remove("rope_parameters");
            m.insert("rope_theta".into(), json!(10000.0));
            m.insert("rope_local_base_freq".into(), json!(100.0));
            m.insert("rope_scaling".into(), json!({"rope_type": "linear", "factor": 2.0}));
        });
        assert_eq!(describe(&hub).unwrap().1, new);
        // GemmaTextConfig's defaults: 1 000 000 (full) and 10 000 (sliding).
        let bare = describe(&edited(|m| drop(m.remove("rope_parameters")))).unwrap().1;
        assert_eq!((bare.rotary.unwrap().theta, bare.local_rotary.unwrap().theta), (1_000_000.0, 10_000.0));
    }

    #[test]
    fn a_gemma3_checkpoint_is_read_through_its_text_tower() {
        let (_, text) = describe(TINY).unwrap();
        let text_config: Value = serde_json::from_str(TINY).unwrap();
        let full = json!({"model_type": "gemma3", "text_config": text_config, "vision_config": {"hidden_size": 8}});
        let (family, desc) = describe(&full.to_string()).unwrap();
        assert!(family.model_types.contains(&"gemma3"));
        assert_eq!(desc.family, "gemma3");
        assert_eq!(crate::model::describe::Description { family: text.family.clone(), ..desc.clone() }, text);
        let err = describe(r#"{"model_type": "gemma3"}"#).unwrap_err().to_string();
        assert!(err.contains("text_config"), "{err}");
        // The tower's weights under either prefix, the vision tower's dropped.
        let t = || candle_core::Tensor::zeros(2, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let names = [
            "language_model.model.layers.0.self_attn.q_norm.weight",
            "model.language_model.layers.1.post_feedforward_layernorm.weight",
            "language_model.lm_head.weight",
            "vision_tower.vision_model.embeddings.patch_embedding.weight",
            "model.multi_modal_projector.mm_input_projection_weight",
        ];
        let renamed = super::canonical(names.iter().map(|n| ((*n).to_string(), t())).collect(), &desc).unwrap();
        let mut got: Vec<&str> = renamed.keys().map(String::as_str).collect();
        got.sort_unstable();
        assert_eq!(got, ["layer.0.q_norm.weight", "layer.1.ffn_out_norm.weight", "lm_head.weight"]);
    }

    #[test]
    fn what_gemma_cannot_run_is_named() {
        for (key, value) in [
            ("use_bidirectional_attention", json!(true)),
            ("attention_bias", json!(true)),
            ("layer_types", json!(["chunked_attention", "full_attention"])),
            ("query_pre_attn_scalar", json!(-1.0)),
        ] {
            let err = describe(&edited(|m| drop(m.insert(key.into(), value)))).unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
        let err = describe(&edited(|m| drop(m.insert("layer_types".into(), json!(["full_attention"])))))
            .unwrap_err()
            .to_string();
        assert!(err.contains("one type per layer"), "{err}");
    }
}
