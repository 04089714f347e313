//! Attention equals Hugging Face transformers (eager, `output_attentions=True`) to 1e-5 on every
//! layer and head. References come from `tests/fixtures/make_reference.py`.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use attnviz::analysis::Run;
use attnviz::model::LoadedModel;
use serde::Deserialize;

const ATTENTION_TOLERANCE: f32 = 1e-5;
const HIDDEN_TOLERANCE: f32 = 1e-4;

#[derive(Deserialize)]
struct Reference {
    text: String,
    text_pair: Option<String>,
    ids: Vec<u32>,
    tokens: Vec<String>,
    /// The token type ids the model received (zeros when it reads none).
    type_ids: Vec<u32>,
    /// Which sentence each token belongs to (BERT's references: the type ids).
    segments: Option<Vec<u8>>,
    truncated: bool,
    attentions: Option<Vec<Vec<Vec<Vec<f32>>>>>,
    attention_last_rows: Option<Vec<Vec<Vec<f32>>>>,
    last_hidden: Option<Vec<Vec<f32>>>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The model of a short name: the embedded `MiniLM`, or a folder under `tests/fixtures/models/`
/// (`tiny` → tiny-bert, `relu` → tiny-bert-relu, `gpt2` → tiny-gpt2, `roberta` → tiny-roberta, …).
/// Each is loaded once and shared by the tests.
fn model(which: &str) -> &'static LoadedModel {
    static MODELS: OnceLock<Mutex<HashMap<String, &'static LoadedModel>>> = OnceLock::new();
    let dir = match which {
        "minilm" => root().join("assets/models/all-MiniLM-L6-v2"),
        "tiny" => root().join("tests/fixtures/models/tiny-bert"),
        "relu" => root().join("tests/fixtures/models/tiny-bert-relu"),
        other => root().join("tests/fixtures/models").join(format!("tiny-{other}")),
    };
    let mut models = MODELS.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    models.entry(which.to_string()).or_insert_with(|| {
        let m = LoadedModel::load(&dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()));
        Box::leak(Box::new(m))
    })
}

fn reference(case: &str) -> Reference {
    let path = root().join("tests/fixtures/reference").join(format!("{case}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Runs the model on the reference's input and checks tokens, attention and hidden state.
fn check(which: &str, case: &str) -> Run {
    let r = reference(case);
    let run = model(which).run(&r.text, r.text_pair.as_deref()).unwrap();
    assert_eq!(run.tokens.ids, r.ids, "{case}: token ids");
    assert_eq!(run.tokens.tokens, r.tokens, "{case}: tokens");
    let desc = model(which).description();
    let fed: Vec<u32> = if desc.reads_token_types { run.tokens.type_ids.clone() } else { vec![0; run.tokens.len()] };
    assert_eq!(fed, r.type_ids, "{case}: token type ids the model reads");
    let segments = r.segments.clone().unwrap_or_else(|| r.type_ids.iter().map(|&t| t as u8).collect());
    assert_eq!(run.tokens.segments, segments, "{case}: segments");
    assert_eq!(run.truncation.is_some(), r.truncated, "{case}: truncation notice");
    if let Some(notice) = &run.truncation {
        assert!(notice.contains("truncated"), "{notice}");
    }
    let a = &run.attention;
    let mut worst = 0.0f32;
    if let Some(expected) = &r.attentions {
        assert_eq!((a.layers(), a.heads(), a.seq_len()), (expected.len(), expected[0].len(), r.ids.len()));
        for (l, layer) in expected.iter().enumerate() {
            for (h, head) in layer.iter().enumerate() {
                for (q, row) in head.iter().enumerate() {
                    for (k, &want) in row.iter().enumerate() {
                        let diff = (a.get(l, h, q, k) - want).abs();
                        assert!(
                            diff <= ATTENTION_TOLERANCE,
                            "{case}: layer {l} head {h} query {q} key {k}: {} vs {want}",
                            a.get(l, h, q, k)
                        );
                        worst = worst.max(diff);
                    }
                }
            }
        }
    }
    if let Some(expected) = &r.attention_last_rows {
        let last = a.seq_len() - 1;
        for (l, layer) in expected.iter().enumerate() {
            for (h, row) in layer.iter().enumerate() {
                for (k, &want) in row.iter().enumerate() {
                    let diff = (a.get(l, h, last, k) - want).abs();
                    assert!(diff <= ATTENTION_TOLERANCE, "{case}: layer {l} head {h} last query, key {k}");
                    worst = worst.max(diff);
                }
            }
        }
    }
    if let Some(expected) = &r.last_hidden {
        let width = expected[0].len();
        for (i, row) in expected.iter().enumerate() {
            for (d, &want) in row.iter().enumerate() {
                let got = run.last_hidden[i * width + d];
                assert!((got - want).abs() <= HIDDEN_TOLERANCE, "{case}: hidden [{i}][{d}] {got} vs {want}");
            }
        }
    }
    assert!(a.max_row_sum_error() < 1e-5, "{case}: rows must sum to 1");
    eprintln!("{case}: {} tokens, max |Δ| = {worst:.2e}", a.seq_len());
    run
}

#[test]
fn minilm_single_sentence() {
    check("minilm", "minilm_single");
}

#[test]
fn minilm_sentence_pair() {
    let run = check("minilm", "minilm_pair");
    assert!(run.tokens.is_pair());
}

#[test]
fn minilm_non_ascii() {
    check("minilm", "minilm_non_ascii");
}

#[test]
fn minilm_empty_text_gives_only_special_tokens() {
    let run = check("minilm", "minilm_empty");
    assert_eq!(run.tokens.tokens, ["[CLS]", "[SEP]"]);
    assert!(run.tokens.special.iter().all(|&s| s));
}

#[test]
fn minilm_truncated_to_512_keeps_final_sep() {
    let run = check("minilm", "minilm_truncated");
    assert_eq!(run.tokens.len(), 512);
    assert_eq!(run.tokens.tokens.last().map(String::as_str), Some("[SEP]"));
}

#[test]
fn tiny_bf16_checkpoint_names() {
    check("tiny", "tiny_single");
}

#[test]
fn tiny_pair_truncated_longest_first() {
    let run = check("tiny", "tiny_pair_truncated");
    assert_eq!(run.tokens.len(), 24);
}

#[test]
fn tiny_non_ascii_truncated() {
    check("tiny", "tiny_non_ascii");
}

#[test]
fn relu_f32_pair() {
    check("relu", "relu_pair");
}

#[test]
fn relu_truncated() {
    check("relu", "relu_truncated");
}

#[test]
fn neuron_data_reproduces_the_attention() {
    // scores = q·k/√d per head, and softmax(scores) = attention.
    let run = model("tiny").run("Queries meet keys.", None).unwrap();
    let neuron = run.neuron.as_ref().unwrap();
    let d = neuron.queries.head_dim();
    let n = run.attention.seq_len();
    for (l, h, q) in [(0, 0, 1), (1, 3, 2)] {
        let qv = neuron.queries.vector(l, h, q);
        let scores: Vec<f32> = (0..n)
            .map(|k| qv.iter().zip(neuron.keys.vector(l, h, k)).map(|(a, b)| a * b).sum::<f32>() / (d as f32).sqrt())
            .collect();
        let max = scores.iter().copied().fold(f32::MIN, f32::max);
        let z: f32 = scores.iter().map(|s| (s - max).exp()).sum();
        for k in 0..n {
            assert!((scores[k] - neuron.scores.get(l, h, q, k)).abs() < 1e-4);
            assert!(((scores[k] - max).exp() / z - run.attention.get(l, h, q, k)).abs() < 1e-5);
        }
    }
}

#[test]
fn loading_is_independent_of_the_folder_path_spelling() {
    let dir = root().join("tests/fixtures/models/tiny-bert/.");
    let m = LoadedModel::load(Path::new(&dir)).unwrap();
    assert_eq!(m.name, "tiny-bert");
}

/// A tiny random GPT-2 (pre-LN, causal, learned positions, byte-level BPE, `Conv1D` weights under
/// `transformer.` names): same tokens, same attention to 1e-5, the masked triangle exactly zero
/// and marked as masked in the run.
fn check_gpt2(case: &str) -> Run {
    let run = check("gpt2", case);
    assert!(run.causal, "{case}: a GPT-2 run is causal");
    let a = &run.attention;
    for l in 0..a.layers() {
        for h in 0..a.heads() {
            for q in 0..a.seq_len() {
                for k in q + 1..a.seq_len() {
                    assert_eq!(a.get(l, h, q, k), 0.0);
                    assert!(run.is_masked(q, k));
                }
            }
        }
    }
    assert!(run.tokens.special.iter().all(|&s| !s), "GPT-2 adds no special tokens");
    run
}

#[test]
fn gpt2_single_sentence() {
    let run = check_gpt2("gpt2_single");
    assert!(run.tokens.tokens.iter().any(|t| t.starts_with('Ġ')), "byte-level BPE marks word starts with Ġ");
}

#[test]
fn gpt2_non_ascii() {
    check_gpt2("gpt2_non_ascii");
}

#[test]
fn gpt2_truncated_to_its_positions() {
    let run = check_gpt2("gpt2_truncated");
    assert_eq!(run.tokens.len(), 32);
}

#[test]
fn gpt2_sentence_pairs_are_refused_with_a_reason() {
    let err = model("gpt2").run("The cat sat.", Some("It was happy.")).unwrap_err().to_string();
    assert!(err.contains("Sentence B") && err.contains("one text"), "{err}");
}

/// One family's parity cases: a single sentence, a sentence pair, non-ASCII text and truncation,
/// each against transformers 5's eager attention on every layer and head.
macro_rules! family_parity {
    ($($test:ident: $model:literal, $case:literal;)*) => {
        $(
            #[test]
            fn $test() {
                check($model, $case);
            }
        )*
    };
}

family_parity! {
    roberta_single: "roberta", "roberta_single";
    roberta_pair: "roberta", "roberta_pair";
    roberta_non_ascii: "roberta", "roberta_non_ascii";
    xlm_roberta_single: "xlm-roberta", "xlm_roberta_single";
    xlm_roberta_pair: "xlm-roberta", "xlm_roberta_pair";
    xlm_roberta_non_ascii: "xlm-roberta", "xlm_roberta_non_ascii";
    xlm_roberta_truncated: "xlm-roberta", "xlm_roberta_truncated";
    distilbert_single: "distilbert", "distilbert_single";
    distilbert_pair: "distilbert", "distilbert_pair";
    distilbert_non_ascii: "distilbert", "distilbert_non_ascii";
    distilbert_truncated: "distilbert", "distilbert_truncated";
    albert_single: "albert", "albert_single";
    albert_pair: "albert", "albert_pair";
    albert_non_ascii: "albert", "albert_non_ascii";
    albert_truncated: "albert", "albert_truncated";
    electra_single: "electra", "electra_single";
    electra_pair: "electra", "electra_pair";
    electra_non_ascii: "electra", "electra_non_ascii";
    electra_truncated: "electra", "electra_truncated";
    mpnet_single: "mpnet", "mpnet_single";
    mpnet_pair: "mpnet", "mpnet_pair";
    mpnet_non_ascii: "mpnet", "mpnet_non_ascii";
    mpnet_truncated: "mpnet", "mpnet_truncated";
    deberta_v2_single: "deberta-v2", "deberta_v2_single";
    deberta_v2_pair: "deberta-v2", "deberta_v2_pair";
    deberta_v2_non_ascii: "deberta-v2", "deberta_v2_non_ascii";
    deberta_v2_truncated: "deberta-v2", "deberta_v2_truncated";
    deberta_v3_single: "deberta-v3", "deberta_v3_single";
    deberta_v3_pair: "deberta-v3", "deberta_v3_pair";
    deberta_v3_non_ascii: "deberta-v3", "deberta_v3_non_ascii";
}

#[test]
fn roberta_truncated_to_the_usable_positions() {
    // 34 rows, positions from pad_token_id + 1 = 2: 32 usable, the final </s> kept.
    let run = check("roberta", "roberta_truncated");
    assert_eq!(run.tokens.len(), 32);
    assert_eq!(run.tokens.tokens.last().map(String::as_str), Some("</s>"));
    assert!(run.tokens.tokens.iter().any(|t| t.starts_with('Ġ')), "byte-level BPE marks word starts with Ġ");
}

#[test]
fn deberta_v3_without_a_position_table_reads_512_tokens() {
    // Relative positions only (position_biased_input = false): not cut short of 512; the log
    // buckets (16 buckets, 64 positions) are exercised at every distance up to 511.
    let run = check("deberta-v3", "deberta_v3_truncated");
    assert_eq!(run.tokens.len(), 512);
}

/// Where the score is a sum of terms, the recorded terms add up to the recorded score, and the
/// softmax of the score is the recorded attention.
fn check_score_terms(which: &str, names: &[&str]) {
    let run = model(which).run("The cat sat on the mat.", Some("It was happy to be home.")).unwrap();
    let neuron = run.neuron.as_ref().unwrap();
    let got: Vec<&str> = neuron.terms.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(got, names);
    let a = &run.attention;
    let n = a.seq_len();
    for l in 0..a.layers() {
        for h in 0..a.heads() {
            for q in 0..n {
                let row = neuron.scores.row(l, h, q);
                let max = row.iter().copied().fold(f32::MIN, f32::max);
                let z: f32 = row.iter().map(|s| (s - max).exp()).sum();
                for k in 0..n {
                    let sum: f32 = neuron.terms.iter().map(|(_, t)| t.get(l, h, q, k)).sum();
                    assert!((sum - row[k]).abs() <= 1e-5 * row[k].abs().max(1.0), "{which} {l}/{h}/{q}/{k}");
                    assert!(((row[k] - max).exp() / z - a.get(l, h, q, k)).abs() < 1e-5);
                }
            }
        }
    }
}

#[test]
fn mpnet_scores_are_content_plus_the_relative_bias() {
    check_score_terms("mpnet", &["content q·k", "relative-position bias"]);
}

#[test]
fn deberta_scores_are_the_sum_of_the_disentangled_terms() {
    check_score_terms("deberta-v3", &["content q·k", "content→position", "position→content"]);
    check_score_terms("deberta-v2", &["content q·k", "content→position", "position→content"]);
}

#[test]
fn the_family_and_shape_come_from_config_json() {
    for (which, family, layers) in [
        ("roberta", "roberta", 2),
        ("xlm-roberta", "xlm-roberta", 3),
        ("albert", "albert", 4),
        ("deberta-v3", "deberta-v2", 2),
    ] {
        let d = model(which).description();
        assert_eq!(d.family, family);
        assert_eq!(d.layers, layers, "{which}");
    }
}
