//! Mixtures of experts: Mixtral, Qwen3-MoE and `OLMoE` — the attention of the dense family each
//! derives from (Mistral, Qwen3, Llama with `OLMo`'s whole-projection q/k norms), and a router with
//! experts ([`Experts`]) in place of the feed-forward.
//!
//! Mirrors `modeling_mixtral.py` (`MixtralTopKRouter`: softmax in f32, top k, renormalised;
//! `MixtralExperts`: `w1` gate, `w3` up, `w2` down, silu) and `modeling_qwen3_moe.py`
//! (`Qwen3MoeTopKRouter`: renormalised when `norm_topk_prob`; `Qwen3MoeDecoderLayer`: a layer has
//! experts unless it is in `mlp_only_layers` or `(layer + 1) % decoder_sparse_step != 0`, else a
//! dense `Qwen3MoeMLP` of `intermediate_size`).
//!
//! Checkpoints store each expert on its own (`experts.{e}.w1.weight`, hub and `save_pretrained`);
//! transformers 5 holds them in memory as `experts.gate_up_proj` (`experts × 2·width × hidden`)
//! and `experts.down_proj` (`experts × hidden × width`), which are split here too.

use serde_json::Value;

use super::{Family, Keys, Tensors, bounded, layer_part, rename_by_table, unsupported};
use crate::model::ModelError;
use crate::model::describe::{Description, Experts, Gating, Glu, QkNorm};

/// Most experts a layer may have (far above released models: Qwen3-MoE has 128).
const MAX_EXPERTS: usize = 4096;

/// Llama's table plus the router (`{block}.gate`).
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
    ("layers.{}.mlp.gate", "layer.{}.router"),
    ("layers.{}.block_sparse_moe.gate", "layer.{}.router"),
    ("norm", "final_norm"),
    ("lm_head", "lm_head"),
];

/// An expert's parts as checkpoints name them → canonical (Mixtral's `w1`/`w3`/`w2`, the others'
/// `gate_proj`/`up_proj`/`down_proj`).
const EXPERT_PARTS: &[(&str, &str)] =
    &[("w1", "gate"), ("w3", "up"), ("w2", "down"), ("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")];

/// `layers.{l}.{mlp|block_sparse_moe}.experts.{e}.{part}.weight` → `layer.{l}.expert.{e}.{part}.weight`.
fn expert_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix("model.").unwrap_or(name).strip_prefix("layers.")?;
    let (layer, module, leaf) = layer_part(rest)?;
    let module = module.strip_prefix("mlp.").or_else(|| module.strip_prefix("block_sparse_moe."))?;
    let (expert, part) = module.strip_prefix("experts.")?.split_once('.')?;
    if expert.is_empty() || !expert.bytes().all(|b| b.is_ascii_digit()) || !matches!(leaf, "weight" | "bias") {
        return None;
    }
    let part = EXPERT_PARTS.iter().find(|(from, _)| *from == part)?.1;
    Some(format!("layer.{layer}.expert.{expert}.{part}.{leaf}"))
}

/// transformers 5's fused `layers.{l}.mlp.experts.{gate_up_proj,down_proj}` split per expert.
fn split_fused(name: &str, t: &candle_core::Tensor, out: &mut Tensors) -> Result<bool, String> {
    let Some(rest) = name.strip_prefix("model.").unwrap_or(name).strip_prefix("layers.") else { return Ok(false) };
    let Some((layer, module, leaf)) = layer_part(rest) else { return Ok(false) };
    if module != "mlp.experts" || !matches!(leaf, "gate_up_proj" | "down_proj") {
        return Ok(false);
    }
    let err = |e: candle_core::Error| format!("{name}: {e}");
    let dims = t.dims();
    if dims.len() != 3 {
        return Err(format!("{name} must have 3 dimensions (experts, out, in), has shape {dims:?}"));
    }
    for e in 0..dims[0] {
        let one = t.get(e).map_err(err)?;
        if leaf == "down_proj" {
            out.insert(format!("layer.{layer}.expert.{e}.down.weight"), one);
        } else {
            if !dims[1].is_multiple_of(2) {
                return Err(format!("{name}: gate and up must be equally wide, got {} rows", dims[1]));
            }
            let half = dims[1] / 2;
            out.insert(format!("layer.{layer}.expert.{e}.gate.weight"), one.narrow(0, 0, half).map_err(err)?);
            out.insert(format!("layer.{layer}.expert.{e}.up.weight"), one.narrow(0, half, half).map_err(err)?);
        }
    }
    Ok(true)
}

fn canonical(t: Tensors, _: &Description) -> Result<Tensors, String> {
    let mut experts = Tensors::new();
    let mut rest = Tensors::new();
    for (name, tensor) in t {
        if let Some(canonical) = expert_name(&name) {
            experts.insert(canonical, tensor);
        } else if !split_fused(&name, &tensor, &mut experts)? {
            rest.insert(name, tensor);
        }
    }
    let mut out = rename_by_table(rest, &["model."], LAYERS);
    out.extend(experts);
    Ok(out)
}

/// Mixtral (`model_type` "mixtral").
pub static MIXTRAL: Family = Family { decoder: None, model_types: &["mixtral"], describe: mixtral, canonical };

/// `OLMoE` (`model_type` `olmoe`).
pub static OLMOE: Family = Family { decoder: None, model_types: &["olmoe"], describe: olmoe, canonical };

/// Qwen3-MoE (`model_type` `qwen3_moe`).
pub static QWEN3_MOE: Family = Family { decoder: None, model_types: &["qwen3_moe"], describe: qwen3_moe, canonical };

/// The experts a config describes: `count_keys` (the first present), `num_experts_per_tok`,
/// each expert `width` wide, renormalised or not, in the weight sets `sparse` says.
pub(super) fn experts(
    keys: &Keys,
    count_keys: &[&str],
    default_count: Option<usize>,
    width: usize,
    renormalise: bool,
    sparse: Vec<bool>,
) -> Result<Experts, ModelError> {
    let mut count = None;
    for key in count_keys {
        if let Some(c) = keys.opt_usize(key)? {
            count = Some((*key, c));
            break;
        }
    }
    let (count_key, count) = match (count, default_count) {
        (Some(c), _) => c,
        (None, Some(d)) => (count_keys[0], d),
        (None, None) => return Err(ModelError::Config(format!("missing field `{}`", count_keys[0]))),
    };
    let count = bounded(count_key, count, 1, MAX_EXPERTS)?;
    let top_k = bounded("num_experts_per_tok", keys.opt_usize("num_experts_per_tok")?.unwrap_or(2), 1, count)?;
    Ok(Experts {
        count,
        top_k,
        width,
        renormalise,
        sparse,
        gating: Gating::SoftmaxThenTopK,
        router_bias: false,
        glu: Glu::Gated,
    })
}

fn mixtral(keys: &Keys) -> Result<Description, ModelError> {
    // MixtralConfig's sliding window defaults to none (Mistral's to 4096).
    let mut map = keys.0.clone();
    map.entry("sliding_window").or_insert(Value::Null);
    let base = (super::llama::MISTRAL.describe)(&Keys(map))?;
    // MixtralSparseMoeBlock always divides the chosen experts' weights by their sum (llama.cpp
    // too, for a `llama` file with experts): a file asking otherwise is refused, not renormalised.
    keys.refuse_unless(
        "norm_topk_prob",
        |v| v == &Value::Bool(true),
        "Mixtral renormalises its chosen experts' weights; unnormalised weights (a GGUF file's expert_weights_norm = false) are not supported",
    )?;
    let width = base.intermediate;
    let sparse = vec![true; base.weight_sets()];
    let experts = experts(keys, &["num_local_experts"], Some(8), width, true, sparse)?;
    Ok(Description { experts: Some(experts), ..base })
}

fn qwen3_moe(keys: &Keys) -> Result<Description, ModelError> {
    let base = (super::llama::QWEN3.describe)(keys)?;
    let width = bounded("moe_intermediate_size", keys.opt_usize("moe_intermediate_size")?.unwrap_or(768), 1, 1 << 20)?;
    let step = bounded("decoder_sparse_step", keys.opt_usize("decoder_sparse_step")?.unwrap_or(1), 1, usize::MAX)?;
    let dense: Vec<usize> = match keys.0.get("mlp_only_layers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            a.iter().map(|v| v.as_u64().map(|l| l as usize)).collect::<Option<_>>().ok_or_else(|| {
                ModelError::Config(format!("\"mlp_only_layers\" must be a list of layer numbers, got {a:?}"))
            })?
        }
        Some(v) => return Err(ModelError::Config(format!("\"mlp_only_layers\" must be a list, got {v}"))),
    };
    let e = experts(keys, &["num_experts", "num_local_experts"], Some(128), width, false, Vec::new())?;
    let sparse = (0..base.weight_sets()).map(|l| !dense.contains(&l) && (l + 1) % step == 0).collect();
    let renormalise = keys.opt_bool("norm_topk_prob")?.unwrap_or(false);
    if keys.opt_usize("shared_expert_intermediate_size")?.is_some_and(|s| s > 0) {
        return Err(unsupported(
            "shared_expert_intermediate_size",
            keys.usize("shared_expert_intermediate_size")?.to_string(),
            "Qwen3-MoE has no shared expert; this looks like another family",
        ));
    }
    Ok(Description { experts: Some(Experts { renormalise, sparse, ..e }), ..base })
}

/// `OlmoeConfig`: Llama's attention with `q_norm` / `k_norm` over the whole q and k projections
/// (`OlmoeAttention`), and experts in every layer (`norm_topk_prob`, default false).
fn olmoe(keys: &Keys) -> Result<Description, ModelError> {
    keys.refuse_unless("clip_qkv", |_| false, "clipping q, k and v (clip_qkv) is not supported")?;
    let base = (super::llama::LLAMA.describe)(keys)?;
    let renormalise = keys.opt_bool("norm_topk_prob")?.unwrap_or(false);
    let sparse = vec![true; base.weight_sets()];
    let experts = experts(keys, &["num_experts"], Some(64), base.intermediate, renormalise, sparse)?;
    Ok(Description {
        // OlmoeConfig's default epsilon (Llama's is 1e-6).
        norm_eps: keys.eps("rms_norm_eps", 1e-5)?,
        qk_norm: QkNorm::Whole,
        experts: Some(experts),
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expert_names_of_both_spellings_are_canonical() {
        assert_eq!(
            expert_name("model.layers.3.block_sparse_moe.experts.7.w3.weight").as_deref(),
            Some("layer.3.expert.7.up.weight")
        );
        assert_eq!(
            expert_name("model.layers.0.mlp.experts.12.down_proj.weight").as_deref(),
            Some("layer.0.expert.12.down.weight")
        );
        assert_eq!(expert_name("model.layers.0.mlp.experts.x.down_proj.weight"), None);
        assert_eq!(expert_name("model.layers.0.mlp.gate.weight"), None);
        assert_eq!(expert_name("model.layers.0.mlp.experts.1.w9.weight"), None);
    }

    #[test]
    fn sparse_layers_follow_the_step_and_the_dense_list() {
        let cfg = r#"{"model_type":"qwen3_moe","vocab_size":64,"hidden_size":32,"num_hidden_layers":4,
            "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"intermediate_size":24,
            "moe_intermediate_size":8,"num_experts":6,"num_experts_per_tok":3,"decoder_sparse_step":2,
            "mlp_only_layers":[3],"norm_topk_prob":true}"#;
        let (_, d) = super::super::describe(cfg).unwrap();
        let e = d.experts.unwrap();
        assert_eq!((e.count, e.top_k, e.width, e.renormalise), (6, 3, 8, true));
        assert_eq!(e.sparse, vec![false, true, false, false]);
        let err = super::super::describe(&cfg.replace(r#""num_experts_per_tok":3"#, r#""num_experts_per_tok":7"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("num_experts_per_tok"), "{err}");
    }

    #[test]
    fn mixtral_refuses_weights_left_unnormalised() {
        let cfg = r#"{"model_type":"mixtral","vocab_size":64,"hidden_size":32,"num_hidden_layers":2,
            "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":24,"num_local_experts":4,
            "num_experts_per_tok":2}"#;
        assert!(super::super::describe(cfg).unwrap().1.experts.unwrap().renormalise);
        let kept = cfg.replace(r#""num_experts_per_tok":2"#, r#""num_experts_per_tok":2,"norm_topk_prob":true"#);
        assert!(super::super::describe(&kept).is_ok());
        let off = cfg.replace(r#""num_experts_per_tok":2"#, r#""num_experts_per_tok":2,"norm_topk_prob":false"#);
        let err = super::super::describe(&off).unwrap_err().to_string();
        assert!(err.contains("norm_topk_prob") && err.contains("renormalises"), "{err}");
    }
}
