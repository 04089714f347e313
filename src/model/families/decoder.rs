//! What today's decoders share: the pre-norm causal base they depart from, and rotary positions
//! read from `config.json` in both shapes it comes in (transformers 5 writes `rope_parameters`;
//! hub checkpoints written before it have top-level `rope_theta` and `rope_scaling`).
//!
//! Mirrors `modeling_rope_utils.py` (`standardize_rope_params`, `ROPE_INIT_FUNCTIONS`).

use serde_json::{Map, Value};

use super::{Keys, Sizes, bounded, inverse_sqrt, post_ln_encoder, unsupported};
use crate::model::ModelError;
use crate::model::describe::{
    Activation, Biases, Description, EmbeddingDesc, FeedForward, LmHead, NormKind, NormPlacement, Positions,
    RopeScaling, Rotary,
};

/// The Llama shape the decoder families depart from: pre-norm `RMSNorm`, rotary positions over
/// whole heads, no absolute positions, no embedding norm, causal, a gated feed-forward, no biases,
/// a final norm, `kv_heads` key/value heads of `head_dim`, the head tied or not.
pub fn pre_norm_decoder(
    s: &Sizes,
    kv_heads: usize,
    head_dim: usize,
    activation: Activation,
    norm_eps: f32,
    max_len: usize,
    tied: bool,
) -> Description {
    let base = post_ln_encoder(s, activation, norm_eps, max_len);
    Description {
        kv_heads,
        head_dim,
        feed_forward: FeedForward::Gated,
        biases: Biases::NONE,
        norm_kind: NormKind::Rms,
        embedding: EmbeddingDesc { positions: Positions::None, norm: false, positions_first: true, ..base.embedding },
        reads_pairs: false,
        causal: true,
        score_scale: inverse_sqrt(head_dim),
        norm: NormPlacement::Pre,
        final_norm: true,
        lm_head: if tied { LmHead::Tied } else { LmHead::Own },
        ..base
    }
}

/// `num_key_value_heads` (default: one per query head), which must divide the query heads.
pub fn kv_heads(keys: &Keys, heads: usize) -> Result<usize, ModelError> {
    let kv = keys.opt_usize("num_key_value_heads")?.unwrap_or(heads);
    bounded("num_key_value_heads", kv, 1, heads)?;
    if !heads.is_multiple_of(kv) {
        return Err(unsupported(
            "num_key_value_heads",
            kv.to_string(),
            &format!("the {heads} query heads must share key/value heads evenly"),
        ));
    }
    Ok(kv)
}

/// `head_dim`, or `hidden / heads` when absent or null.
pub fn head_dim(keys: &Keys, s: &Sizes) -> Result<usize, ModelError> {
    let d = keys.opt_usize("head_dim")?.unwrap_or(s.hidden / s.heads);
    bounded("head_dim", d, 2, 1 << 14)
}

/// One number of the rope parameters, named `rope_parameters.{key}` in errors.
fn number(params: &Map<String, Value>, section: &str, key: &str) -> Result<Option<f64>, ModelError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| ModelError::Config(format!("\"{section}.{key}\" must be a number, got {v}"))),
    }
}

/// The rotary positions of a config: theta, the rotated fraction of each head, and the scaling type
/// with its parameters. Unknown types are refused by name. Both are read from the rope parameters
/// first; then a family with its own top-level keys (`fraction`: GPT-NeoX's `rotary_pct` and its
/// default 0.25; `theta_key`: its `rotary_emb_base`) reads those instead of the generic
/// `partial_rotary_factor` and `rope_theta`, as transformers 5's `GPTNeoXConfig` does.
pub fn rotary(
    keys: &Keys,
    head_dim: usize,
    max_positions: usize,
    default_theta: f64,
    fraction: Option<(&str, f64)>,
    theta_key: Option<&str>,
) -> Result<Rotary, ModelError> {
    let (section, params) = match (keys.0.get("rope_parameters"), keys.0.get("rope_scaling")) {
        (Some(Value::Object(p)), _) => ("rope_parameters", p.clone()),
        (_, Some(Value::Object(p))) => ("rope_scaling", p.clone()),
        (Some(v), _) if !v.is_null() => {
            return Err(ModelError::Config(format!("\"rope_parameters\" must be an object, got {v}")));
        }
        (_, Some(v)) if !v.is_null() => {
            return Err(ModelError::Config(format!("\"rope_scaling\" must be an object or null, got {v}")));
        }
        _ => ("rope_parameters", Map::new()),
    };
    let top = |key: &str| keys.opt_f64(key);
    let theta = match number(&params, section, "rope_theta")? {
        Some(t) => t,
        None => top(theta_key.unwrap_or("rope_theta"))?.unwrap_or(default_theta),
    };
    if theta.is_nan() || theta <= 1.0 {
        return Err(unsupported("rope_theta", theta.to_string(), "must be a number above 1"));
    }
    let (fraction_key, default_fraction) = fraction.unwrap_or(("partial_rotary_factor", 1.0));
    let fraction = match number(&params, section, "partial_rotary_factor")? {
        Some(f) => f,
        None => top(fraction_key)?.unwrap_or(default_fraction),
    };
    if fraction.is_nan() || fraction <= 0.0 || fraction > 1.0 {
        return Err(unsupported("partial_rotary_factor", fraction.to_string(), "must be in (0, 1]"));
    }
    // `dim = int(head_dim * partial_rotary_factor)`; the inverse frequencies are those of
    // `arange(0, dim, 2)`, ⌈dim/2⌉ of them, and cos and sin twice that wide, so the first
    // 2·⌈dim/2⌉ dimensions rotate (one more than `dim` when it is odd).
    let dims = (head_dim as f64 * fraction) as usize;
    let rotated = 2 * dims.div_ceil(2);
    if dims == 0 || rotated > head_dim {
        return Err(unsupported(
            "partial_rotary_factor",
            fraction.to_string(),
            &format!(
                "int({head_dim} × {fraction}) = {dims} gives {rotated} rotated dimensions; at least 2 and at most the head's {head_dim} rotate"
            ),
        ));
    }
    let kind = match params.get("rope_type").or_else(|| params.get("type")) {
        None | Some(Value::Null) => "default".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(ModelError::Config(format!("\"{section}.rope_type\" must be a string, got {v}"))),
    };
    let get = |key: &str| number(&params, section, key);
    let factor = || -> Result<f64, ModelError> {
        let f = get("factor")?.ok_or_else(|| ModelError::Config(format!("missing field `{section}.factor`")))?;
        if f >= 1.0 {
            Ok(f)
        } else {
            Err(unsupported(&format!("{section}.factor"), f.to_string(), "must be at least 1"))
        }
    };
    let original_max = || -> Result<usize, ModelError> {
        let v = match get("original_max_position_embeddings")? {
            Some(v) => Some(v),
            None => top("original_max_position_embeddings")?,
        };
        let v = v.map_or(max_positions, |v| v as usize);
        bounded("original_max_position_embeddings", v, 1, usize::MAX >> 8)
    };
    let scaling = match kind.as_str() {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "dynamic" => RopeScaling::Dynamic { factor: factor()?, max_positions },
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: get("low_freq_factor")?
                .ok_or_else(|| ModelError::Config(format!("missing field `{section}.low_freq_factor`")))?,
            high_freq_factor: get("high_freq_factor")?
                .ok_or_else(|| ModelError::Config(format!("missing field `{section}.high_freq_factor`")))?,
            original_max: original_max()?,
        },
        "longrope" if !dims.is_multiple_of(2) => {
            return Err(unsupported(
                "partial_rotary_factor",
                fraction.to_string(),
                &format!("longrope needs an even rotary width; int({head_dim} × {fraction}) = {dims}"),
            ));
        }
        "longrope" => {
            // _compute_longrope_parameters.
            let original = original_max()?;
            let list = |key: &str| -> Result<Vec<f64>, ModelError> {
                let name = format!("{section}.{key}");
                let values = match params.get(key) {
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|v| v.as_f64().filter(|f| f.is_finite() && *f > 0.0))
                        .collect::<Option<Vec<f64>>>()
                        .ok_or_else(|| ModelError::Config(format!("\"{name}\" must hold positive numbers")))?,
                    None | Some(Value::Null) => return Err(ModelError::Config(format!("missing field `{name}`"))),
                    Some(v) => return Err(ModelError::Config(format!("\"{name}\" must be a list, got {v}"))),
                };
                if values.len() != dims / 2 {
                    return Err(unsupported(
                        &name,
                        format!("{} values", values.len()),
                        &format!("one per rotary frequency: {}", dims / 2),
                    ));
                }
                Ok(values)
            };
            let factor = get("factor")?.unwrap_or(max_positions as f64 / original as f64);
            let attention_factor = match get("attention_factor")? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
            };
            RopeScaling::LongRope {
                short: list("short_factor")?,
                long: list("long_factor")?,
                original_max: original,
                attention_factor,
            }
        }
        "yarn" if !dims.is_multiple_of(2) => {
            // _compute_yarn_parameters blends ⌈dim/2⌉ frequencies with a ramp of dim // 2 values.
            return Err(unsupported(
                "partial_rotary_factor",
                fraction.to_string(),
                &format!("yarn needs an even rotary width; int({head_dim} × {fraction}) = {dims}"),
            ));
        }
        "yarn" => {
            let original = original_max()?;
            let factor = match get("factor")? {
                Some(_) => factor()?,
                None => max_positions as f64 / original as f64,
            };
            // get_mscale: 0.1 · mscale · ln(scale) + 1 above a scale of 1.
            let mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
            let attention_factor = match (get("attention_factor")?, get("mscale")?, get("mscale_all_dim")?) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(factor, m) / mscale(factor, all),
                _ => mscale(factor, 1.0),
            };
            let truncate = match params.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ModelError::Config(format!("\"{section}.truncate\" must be true or false, got {v}")));
                }
            };
            RopeScaling::Yarn {
                factor,
                original_max: original,
                attention_factor,
                beta_fast: get("beta_fast")?.filter(|b| *b != 0.0).unwrap_or(32.0),
                beta_slow: get("beta_slow")?.filter(|b| *b != 0.0).unwrap_or(1.0),
                truncate,
            }
        }
        other => {
            return Err(unsupported(
                &format!("{section}.rope_type"),
                other.to_string(),
                "supported: default, linear, dynamic, llama3, yarn, longrope",
            ));
        }
    };
    Ok(Rotary { dims, theta, scaling })
}

/// The usable length of a rotary model: `max_position_embeddings`, or past it by the factor of a
/// `dynamic` scaling, which exists to stretch it.
pub fn rotary_max_len(rotary: &Rotary, max_positions: usize) -> usize {
    match rotary.scaling {
        RopeScaling::Dynamic { factor, .. } => ((max_positions as f64 * factor) as usize).max(max_positions),
        _ => max_positions,
    }
}

/// Which layers attend through the sliding window, from `layer_types` (`"sliding_attention"` or
/// `"full_attention"`, one per layer), or `default(i)` for layer `i` when the key is absent.
pub fn sliding_layers(keys: &Keys, layers: usize, default: impl Fn(usize) -> bool) -> Result<Vec<bool>, ModelError> {
    match keys.0.get("layer_types") {
        None | Some(Value::Null) => Ok((0..layers).map(default).collect()),
        Some(Value::Array(types)) if types.len() == layers => types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(unsupported("layer_types", t.to_string(), "supported: sliding_attention, full_attention")),
            })
            .collect(),
        Some(v) => Err(ModelError::Config(format!("\"layer_types\" must list one type per layer ({layers}), got {v}"))),
    }
}

/// A soft-capping value (`attn_logit_softcapping`, `final_logit_softcapping`): `default` when
/// absent, none when null.
pub fn softcap(keys: &Keys, key: &str, default: Option<f64>) -> Result<Option<f32>, ModelError> {
    let cap = match keys.0.get(key) {
        None => default,
        Some(Value::Null) => None,
        Some(_) => keys.opt_f64(key)?,
    };
    match cap {
        Some(c) if !(c.is_finite() && c > 0.0) => Err(unsupported(key, c.to_string(), "must be a positive number")),
        c => Ok(c.map(|c| c as f32)),
    }
}

/// A sliding window's width: `default` when absent, none when null.
pub fn window(keys: &Keys, default: Option<usize>) -> Result<Option<usize>, ModelError> {
    match keys.0.get("sliding_window") {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(_) => Ok(Some(bounded("sliding_window", keys.usize("sliding_window")?, 1, usize::MAX >> 8)?)),
    }
}

/// Refuses `layer_types` that mix full and sliding-window layers (Gemma 2 and 3, Qwen with
/// `max_window_layers`): attnviz draws one mask per model.
pub fn refuse_mixed_layer_types(keys: &Keys) -> Result<(), ModelError> {
    if let Some(Value::Array(types)) = keys.0.get("layer_types")
        && let Some(other) = types.iter().find(|t| t.as_str() != Some("full_attention"))
    {
        return Err(unsupported(
            "layer_types",
            other.to_string(),
            "only full-attention layers are supported (per-layer sliding windows are not)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(json: &str) -> Keys {
        match serde_json::from_str(json).unwrap() {
            Value::Object(m) => Keys(m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn both_config_shapes_give_the_same_rotary() {
        let new = keys(r#"{"rope_parameters":{"rope_type":"linear","factor":2.0,"rope_theta":500000.0}}"#);
        let old = keys(r#"{"rope_theta":500000.0,"rope_scaling":{"type":"linear","factor":2.0}}"#);
        let a = rotary(&new, 64, 2048, 10_000.0, None, None).unwrap();
        let b = rotary(&old, 64, 2048, 10_000.0, None, None).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, Rotary { dims: 64, theta: 500_000.0, scaling: RopeScaling::Linear { factor: 2.0 } });
        let plain = rotary(&keys("{}"), 64, 2048, 10_000.0, None, None).unwrap();
        assert_eq!((plain.theta, plain.scaling), (10_000.0, RopeScaling::None));
        let neox = keys(r#"{"rotary_pct":0.25,"rotary_emb_base":10000}"#);
        let neox_keys = (Some(("rotary_pct", 0.25)), Some("rotary_emb_base"));
        assert_eq!(rotary(&neox, 64, 2048, 1.5, neox_keys.0, neox_keys.1).unwrap().dims, 16);
    }

    #[test]
    fn gpt_neox_reads_its_own_keys_as_transformers_5_does() {
        // GPTNeoXConfig: rope_parameters first, then rotary_pct (default 0.25) and rotary_emb_base
        // (default 10000); the generic top-level partial_rotary_factor and rope_theta are not read.
        let neox =
            |json: &str| rotary(&keys(json), 64, 2048, 10_000.0, Some(("rotary_pct", 0.25)), Some("rotary_emb_base"));
        assert_eq!(neox("{}").unwrap(), Rotary { dims: 16, theta: 10_000.0, scaling: RopeScaling::None });
        let top = neox(r#"{"partial_rotary_factor":0.5,"rope_theta":500}"#).unwrap();
        assert_eq!((top.dims, top.theta), (16, 10_000.0));
        let own = neox(r#"{"rotary_pct":0.5,"rotary_emb_base":500}"#).unwrap();
        assert_eq!((own.dims, own.theta), (32, 500.0));
        let new =
            neox(r#"{"rotary_pct":0.5,"rope_parameters":{"partial_rotary_factor":1.0,"rope_theta":20000}}"#).unwrap();
        assert_eq!((new.dims, new.theta), (64, 20_000.0));
        // Other families: the top-level partial_rotary_factor, else whole heads.
        assert_eq!(rotary(&keys(r#"{"partial_rotary_factor":0.5}"#), 64, 2048, 1e4, None, None).unwrap().dims, 32);
    }

    #[test]
    fn an_odd_rotary_width_rotates_the_next_even_number_of_dimensions() {
        // head_dim 12 × 0.25 = 3: transformers takes the frequencies of arange(0, 3, 2) and rotates 4.
        let r = rotary(&keys(r#"{"partial_rotary_factor":0.25}"#), 12, 32, 1e4, None, None).unwrap();
        assert_eq!(r.dims, 3);
        assert_eq!(rotary(&keys(r#"{"partial_rotary_factor":0.1}"#), 12, 32, 1e4, None, None).unwrap().dims, 1);
        // Nothing to rotate, or more than the head: refused, saying why.
        let err = rotary(&keys(r#"{"partial_rotary_factor":0.05}"#), 12, 32, 1e4, None, None).unwrap_err().to_string();
        assert!(err.contains("partial_rotary_factor") && err.contains("= 0"), "{err}");
        let err = rotary(&keys("{}"), 5, 32, 1e4, None, None).unwrap_err().to_string();
        assert!(err.contains("6 rotated dimensions") && err.contains("head's 5"), "{err}");
        // YaRN's ramp has dim // 2 values: an odd width does not fit it.
        let yarn = r#"{"partial_rotary_factor":0.25,"rope_parameters":{"rope_type":"yarn","factor":4.0}}"#;
        let err = rotary(&keys(yarn), 12, 32, 1e4, None, None).unwrap_err().to_string();
        assert!(err.contains("yarn") && err.contains("even"), "{err}");
    }

    #[test]
    fn unknown_or_broken_rope_settings_are_named() {
        let err = rotary(&keys(r#"{"rope_scaling":{"rope_type":"su2"}}"#), 64, 2048, 1e4, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rope_type") && err.contains("su2"), "{err}");
        let err = rotary(
            &keys(r#"{"rope_scaling":{"rope_type":"longrope","short_factor":[1.0],"long_factor":[1.0]}}"#),
            8,
            64,
            1e4,
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("rope_scaling.short_factor") && err.contains('4'), "{err}");
        let err = rotary(&keys(r#"{"rope_parameters":{"rope_type":"linear"}}"#), 64, 2048, 1e4, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rope_parameters.factor"), "{err}");
        let err = rotary(&keys(r#"{"rope_theta":"big"}"#), 64, 2048, 1e4, None, None).unwrap_err().to_string();
        assert!(err.contains("rope_theta"), "{err}");
        let err = refuse_mixed_layer_types(&keys(r#"{"layer_types":["full_attention","sliding_attention"]}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("layer_types") && err.contains("sliding_attention"), "{err}");
    }
}
