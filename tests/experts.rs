//! Mixtures of experts against transformers: the routes (chosen experts equal, their weights and
//! the router's distribution to 1e-6), the last hidden state and logits to 1e-5, on the tiny
//! Mixtral, Qwen3-MoE and `OLMoE` of `tests/fixtures/make_reference.py`; the family's normalisation
//! of the weights; refusals.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::path::PathBuf;

use attnviz::analysis::Tokens;
use attnviz::model::{Interventions, LoadedModel};
use serde::Deserialize;

const ROUTE_TOLERANCE: f32 = 1e-6;
const HIDDEN_TOLERANCE: f32 = 1e-5;

#[derive(Deserialize)]
struct Reference {
    text: String,
    ids: Vec<u32>,
    last_hidden: Vec<Vec<f32>>,
    router_probs: Vec<Vec<Vec<f32>>>,
    experts: Vec<Vec<Vec<u32>>>,
    expert_weights: Vec<Vec<Vec<f32>>>,
    logits_last: Option<Vec<f32>>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(which: &str) -> LoadedModel {
    LoadedModel::load(&root().join("tests/fixtures/models").join(format!("tiny-{which}"))).unwrap()
}

fn reference(case: &str) -> Reference {
    let path = root().join("tests/fixtures/reference").join(format!("{case}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn check_routes(m: &LoadedModel, case: &str) {
    let r = reference(case);
    let tokens = if case.ends_with("generate") {
        // Prompt and continuation, as one pass.
        Tokens::from_ids(&r.ids, |id| m.tokenizer.token_of(id), |id| m.tokenizer.is_special(id))
    } else {
        m.encode_recordable(&r.text, None).unwrap().0.tokens
    };
    assert_eq!(tokens.ids, r.ids, "{case}: ids");
    let routes = m.routes(&tokens, &Interventions::default()).unwrap();
    assert_eq!(routes.layers.len(), r.experts.len(), "{case}: layers");
    let mut routed_layers = 0;
    for (l, layer) in routes.layers.iter().enumerate() {
        let Some(layer) = layer else {
            assert!(r.experts[l].is_empty() && r.expert_weights[l].is_empty(), "{case}: layer {l} has experts");
            continue;
        };
        routed_layers += 1;
        assert_eq!(layer.tokens(), r.ids.len(), "{case}: layer {l} tokens");
        for t in 0..layer.tokens() {
            assert_eq!(layer.chosen_of(t), r.experts[l][t].as_slice(), "{case}: layer {l} token {t} experts");
            for (got, want) in layer.weights_of(t).iter().zip(&r.expert_weights[l][t]) {
                assert!((got - want).abs() <= ROUTE_TOLERANCE, "{case}: layer {l} token {t} weight {got} vs {want}");
            }
            for (got, want) in layer.probs_of(t).iter().zip(&r.router_probs[l][t]) {
                assert!((got - want).abs() <= ROUTE_TOLERANCE, "{case}: layer {l} token {t} router {got} vs {want}");
            }
        }
    }
    assert!(routed_layers > 0, "{case}: no layer routed");
    // The last hidden state and the logits of the same input.
    let run =
        m.run_tokens(tokens.clone(), None, attnviz::model::Capture::Attention, &Interventions::default()).unwrap();
    let hidden = m.description().hidden;
    for (t, row) in r.last_hidden.iter().enumerate() {
        for (d, want) in row.iter().enumerate() {
            let got = run.last_hidden[t * hidden + d];
            assert!((got - want).abs() <= HIDDEN_TOLERANCE, "{case}: hidden {t}/{d}: {got} vs {want}");
        }
    }
    if let Some(want) = &r.logits_last {
        let last = &run.last_hidden[(r.ids.len() - 1) * hidden..];
        for (got, want) in m.net.logits(last).unwrap().iter().zip(want) {
            assert!((got - want).abs() <= HIDDEN_TOLERANCE, "{case}: logit {got} vs {want}");
        }
    }
}

#[test]
fn mixtral_routes_as_transformers() {
    let m = load("mixtral");
    let e = m.description().experts.clone().unwrap();
    assert_eq!((e.count, e.top_k, e.renormalise), (4, 2, true));
    for case in ["mixtral_single", "mixtral_non_ascii", "mixtral_truncated", "mixtral_generate"] {
        check_routes(&m, case);
    }
}

#[test]
fn qwen3_moe_routes_as_transformers_with_a_dense_layer() {
    let m = load("qwen3-moe");
    let e = m.description().experts.clone().unwrap();
    assert_eq!((e.count, e.top_k, e.renormalise), (4, 2, false));
    assert_eq!(e.sparse, vec![true, false, true]);
    for case in ["qwen3_moe_single", "qwen3_moe_non_ascii", "qwen3_moe_truncated", "qwen3_moe_generate"] {
        check_routes(&m, case);
    }
}

#[test]
fn olmoe_routes_as_transformers_with_whole_projection_qk_norms() {
    let m = load("olmoe");
    let d = m.description();
    assert_eq!(d.qk_norm, attnviz::model::describe::QkNorm::Whole);
    let e = d.experts.clone().unwrap();
    assert_eq!((e.count, e.top_k, e.renormalise), (4, 2, false));
    for case in ["olmoe_single", "olmoe_non_ascii", "olmoe_truncated", "olmoe_generate"] {
        check_routes(&m, case);
    }
}

/// The mixtures of experts from llama.cpp files (`tests/fixtures/make_gguf_families.py`): the same
/// routes as transformers on the dequantised weights, with the renormalisation llama.cpp uses for
/// each architecture (Mixtral as `llama` and `qwen3moe` renormalise, `olmoe` does not; `gpt-oss`'s
/// softmax over the chosen logits needs none), gpt-oss's experts in MXFP4 blocks.
#[test]
fn gguf_mixtures_route_as_transformers_on_their_dequantised_weights() {
    for (family, renormalise) in [("mixtral", true), ("qwen3-moe", true), ("olmoe", false), ("gpt-oss", false)] {
        let path = root().join(format!("tests/fixtures/models/tiny-{family}-gguf/tiny-{family}.gguf"));
        let m = LoadedModel::load(&path).unwrap();
        let e = m.description().experts.clone().unwrap();
        assert_eq!((e.count, e.top_k, e.renormalise), (4, 2, renormalise), "{family}");
        assert!(e.sparse.iter().all(|&s| s), "{family}: every layer has experts");
        let prefix = format!("gguf_{}", family.replace('-', "_"));
        for case in ["single", "generate"] {
            check_routes(&m, &format!("{prefix}_{case}"));
        }
    }
}

#[test]
fn gpt_oss_routes_as_transformers_with_a_biased_router_and_clamped_experts() {
    use attnviz::model::describe::{Gating, Glu};
    let m = load("gpt-oss");
    let e = m.description().experts.clone().unwrap();
    assert_eq!((e.count, e.top_k, e.gating, e.router_bias), (4, 2, Gating::TopKThenSoftmax, true));
    assert_eq!(e.glu, Glu::Clamped { alpha: 1.702, limit: 2.0 });
    for case in ["gpt_oss_single", "gpt_oss_non_ascii", "gpt_oss_truncated", "gpt_oss_generate"] {
        check_routes(&m, case);
    }
}

#[test]
fn olmoe_refuses_clipped_qkv_by_name() {
    let cfg = std::fs::read_to_string(root().join("tests/fixtures/models/tiny-olmoe/config.json")).unwrap();
    let cfg = cfg.replace("\"clip_qkv\": null", "\"clip_qkv\": 8.0");
    assert!(cfg.contains("8.0"), "{cfg}");
    let err = attnviz::model::families::describe(&cfg).unwrap_err().to_string();
    assert!(err.contains("clip_qkv"), "{err}");
}

#[test]
fn weights_sum_to_one_only_where_the_family_renormalises() {
    // gpt-oss's weights are the softmax of the top k logits: they sum to 1.
    for (which, renormalised) in [("mixtral", true), ("qwen3-moe", false), ("olmoe", false), ("gpt-oss", true)] {
        let m = load(which);
        let (_, routes, _) = m.routes_of_text("Experts share the work.").unwrap();
        for layer in routes.layers.iter().flatten() {
            for t in 0..layer.tokens() {
                let sum: f32 = layer.weights_of(t).iter().sum();
                let probs: f32 = layer.probs_of(t).iter().sum();
                assert!((probs - 1.0).abs() < 1e-5, "{which}: router distribution sums to {probs}");
                assert_eq!((sum - 1.0).abs() < 1e-6, renormalised, "{which}: weights sum to {sum}");
                // Largest first, and each weight is the router's probability (scaled alike).
                let w = layer.weights_of(t);
                assert!(w.windows(2).all(|p| p[0] >= p[1]), "{which}: {w:?}");
                let chosen = layer.chosen_of(t);
                let p = layer.probs_of(t);
                let scale = if renormalised { chosen.iter().map(|&c| p[c as usize]).sum::<f32>() } else { 1.0 };
                for (&c, &w) in chosen.iter().zip(w) {
                    assert!((p[c as usize] / scale - w).abs() < 1e-6);
                }
            }
        }
    }
}

#[test]
fn a_model_without_experts_says_so() {
    let m = LoadedModel::load(&root().join("tests/fixtures/models/tiny-llama")).unwrap();
    let err = m.routes_of_text("No experts here.").unwrap_err().to_string();
    assert!(err.contains("no experts"), "{err}");
}
