//! GGUF weights kept in their blocks (`WeightStorage::Stored`): every block type gives, bit for bit,
//! what the dequantise-on-load path (`WeightStorage::F32`) gives — attention, hidden states, logits,
//! generated tokens — while holding about the file's bytes; the memory check counts those bytes.

mod common;

use std::path::PathBuf;

use attnviz::model::generate::Generator;
use attnviz::model::{LoadedModel, WeightStorage};
use common::bits;

fn gguf(name: &str) -> PathBuf {
    common::root().join("tests/fixtures/models/tiny-llama-gguf").join(name)
}

const SENTENCE: &str = "The animal didn't cross the street because it was too tired.";

/// Every fixture GGUF: F32, `Q8_0` (+ F16), `Q4_0` / `Q4_1` (+ `Q8_0`, F16), every 32-value type
/// with F16 and BF16 mixed inside fused matrices, and `Q4_K` / `Q5_K` / `Q6_K`.
const FILES: [&str; 5] =
    ["tiny-llama.F32.gguf", "tiny-llama.Q8_0.gguf", "tiny-llama.Q4.gguf", "tiny-llama.mixed.gguf", "tiny-llama.K.gguf"];

#[test]
fn every_block_type_runs_bit_for_bit_as_its_dequantisation_in_the_files_bytes() {
    let mut kinds_seen = String::new();
    for name in FILES {
        let path = gguf(name);
        let kept = LoadedModel::load_with(&path, Some(WeightStorage::Stored)).unwrap();
        let wide = LoadedModel::load_with(&path, Some(WeightStorage::F32)).unwrap();
        let (q_kept, q_wide) = (kept.quantization.clone().unwrap(), wide.quantization.clone().unwrap());
        assert!(q_kept.ends_with("kept in their blocks"), "{name}: {q_kept}");
        assert!(q_wide.ends_with("dequantised to f32"), "{name}: {q_wide}");
        kinds_seen.push_str(&q_kept);

        // Memory: the kept weights take at most the file's bytes; f32 takes 4 per weight.
        let file = std::fs::metadata(&path).unwrap().len() as usize;
        let (held, f32_bytes) = (kept.net.large_weight_bytes(), wide.net.large_weight_bytes());
        assert!(held <= file, "{name}: {held} bytes held, file {file}");
        if name != "tiny-llama.F32.gguf" {
            assert!(held * 2 < f32_bytes, "{name}: {held} bytes held vs {f32_bytes} as f32");
        }

        // A recorded run: every attention weight and hidden value, and the logits.
        let (a, b) = (kept.run(SENTENCE, None).unwrap(), wide.run(SENTENCE, None).unwrap());
        assert_eq!(a.tokens.ids, b.tokens.ids);
        assert_eq!(bits(a.attention.as_slice()), bits(b.attention.as_slice()), "{name}: attention");
        assert_eq!(bits(&a.last_hidden), bits(&b.last_hidden), "{name}: last hidden state");
        let h = kept.description().hidden;
        let last = &a.last_hidden[a.last_hidden.len() - h..];
        assert_eq!(bits(&kept.net.logits(last).unwrap()), bits(&wide.net.logits(last).unwrap()), "{name}: logits");
        let (la, lb) = (kept.net.unembed_rows(&a.last_hidden).unwrap(), wide.net.unembed_rows(&b.last_hidden).unwrap());
        assert_eq!(bits(&la), bits(&lb), "{name}: the logit lens' unembedding");

        // Generation through the KV cache (products of one row): the same tokens and rows.
        let (mut ga, mut gb) =
            (Generator::start(&kept, "The animal", 3).unwrap(), Generator::start(&wide, "The animal", 3).unwrap());
        for _ in 0..4 {
            assert_eq!(ga.next(16).unwrap(), gb.next(16).unwrap(), "{name}: a written token");
        }
        let (ra, rb) = (ga.partial_run(), gb.partial_run());
        assert_eq!(bits(ra.attention.as_slice()), bits(rb.attention.as_slice()), "{name}: generated attention");
    }
    for kind in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4K", "Q5K", "Q6K", "F16", "BF16", "F32"] {
        assert!(kinds_seen.contains(kind), "{kind} is among the fixtures' types: {kinds_seen}");
    }
}

/// The 2024–2026 families' GGUF fixtures (`Q8_0`, `Q4_1`, F16 and F32 tensors; experts stacked,
/// Phi-3's q/k/v and gate/up fused): kept in blocks, each expert and fused part a byte range of its
/// tensor, they run bit for bit as the same file dequantised and split as tensors.
#[test]
fn stacked_experts_and_fused_rows_kept_in_blocks_run_as_their_dequantisation() {
    for family in ["gemma2", "gemma3", "phi3", "olmo2", "granite", "smollm3", "qwen3-moe", "olmoe", "mixtral"] {
        let path = common::root().join(format!("tests/fixtures/models/tiny-{family}-gguf/tiny-{family}.gguf"));
        let kept = LoadedModel::load_with(&path, Some(WeightStorage::Stored)).unwrap();
        let wide = LoadedModel::load_with(&path, Some(WeightStorage::F32)).unwrap();
        assert!(kept.quantization.as_deref().unwrap().contains("Q4_1"), "{family}");
        let (a, b) = (kept.run(SENTENCE, None).unwrap(), wide.run(SENTENCE, None).unwrap());
        assert_eq!(bits(a.attention.as_slice()), bits(b.attention.as_slice()), "{family}: attention");
        assert_eq!(bits(&a.last_hidden), bits(&b.last_hidden), "{family}: last hidden state");
    }
}

/// gpt-oss from llama.cpp's converter with its experts in MXFP4 (a type Candle does not read):
/// the blocks kept run bit for bit as attnviz's own widening of them to f32, held in fewer bytes
/// than the file, and the description is llama.cpp's gpt-oss (sinks, sliding on even layers, the
/// clamp at 7, `YaRN` rounded out as `ggml_rope_yarn_corr_dims` rounds it).
#[test]
fn gpt_oss_mxfp4_experts_kept_in_blocks_run_as_their_widening() {
    use attnviz::model::describe::{Gating, Glu, RopeScaling};
    let path = common::root().join("tests/fixtures/models/tiny-gpt-oss-gguf/tiny-gpt-oss.gguf");
    let kept = LoadedModel::load_with(&path, Some(WeightStorage::Stored)).unwrap();
    let wide = LoadedModel::load_with(&path, Some(WeightStorage::F32)).unwrap();
    let q = kept.quantization.as_deref().unwrap();
    for kind in ["MXFP4 (6)", "Q8_0", "BF16", "F32", "kept in their blocks"] {
        assert!(q.contains(kind), "{kind}: {q}");
    }
    assert!(wide.quantization.as_deref().unwrap().ends_with("dequantised to f32"));
    let file = std::fs::metadata(&path).unwrap().len() as usize;
    let (held, f32_bytes) = (kept.net.large_weight_bytes(), wide.net.large_weight_bytes());
    assert!(held <= file && held * 3 < f32_bytes, "{held} bytes held, file {file}, f32 {f32_bytes}");

    let d = kept.description();
    assert!(d.attn_sinks && d.biases.qkv && d.biases.output && d.biases.ffn);
    assert_eq!((d.sliding_window, d.sliding_layers.clone()), (Some(4), vec![true, false]));
    let e = d.experts.clone().unwrap();
    assert_eq!(
        (e.gating, e.router_bias, e.glu),
        (Gating::TopKThenSoftmax, true, Glu::Clamped { alpha: 1.702, limit: 7.0 })
    );
    let rot = d.rotary.clone().unwrap();
    assert!(matches!(rot.scaling, RopeScaling::Yarn { original_max: 4096, truncate: true, .. }), "{:?}", rot.scaling);

    let (a, b) = (kept.run(SENTENCE, None).unwrap(), wide.run(SENTENCE, None).unwrap());
    assert_eq!(bits(a.attention.as_slice()), bits(b.attention.as_slice()), "attention");
    assert_eq!(bits(&a.last_hidden), bits(&b.last_hidden), "last hidden state");
    let (mut ga, mut gb) =
        (Generator::start(&kept, "The animal", 3).unwrap(), Generator::start(&wide, "The animal", 3).unwrap());
    for _ in 0..4 {
        assert_eq!(ga.next(16).unwrap(), gb.next(16).unwrap(), "a written token");
    }
}

/// Gemma 3 from a llama.cpp file: every sixth layer full (llama.cpp's `set_swa_pattern(6)`), the
/// others sliding with a window shorter than the test text (parity in tests/parity.rs).
#[test]
fn gemma3_gguf_makes_every_sixth_layer_full() {
    let path = common::root().join("tests/fixtures/models/tiny-gemma3-gguf/tiny-gemma3.gguf");
    let m = LoadedModel::load(&path).unwrap();
    let d = m.description();
    assert_eq!(d.sliding_layers, [true, true, true, true, true, false]);
    let n = m.run(SENTENCE, None).unwrap().tokens.ids.len();
    assert!(d.sliding_window.is_some_and(|w| w + 1 < n), "{:?} vs {n} tokens", d.sliding_window);
}

#[test]
fn the_memory_check_counts_the_bytes_held_and_names_them() {
    // The K-quant fixture: ~0.4 MB of blocks, 2.4 MB as f32. A 1 MB limit lets the blocks in and
    // refuses the f32 weights before they are allocated, with the sizes named.
    let path = gguf("tiny-llama.K.gguf");
    let limit_gb = (1u64 << 20) as f64 / f64::from(1u32 << 30);
    let run = |weights: &str| {
        common::output_sandboxed(
            std::process::Command::new(env!("CARGO_BIN_EXE_attnviz"))
                .env("ATTNVIZ_MAX_MEMORY_GB", limit_gb.to_string())
                .env("ATTNVIZ_WEIGHTS", weights)
                .args(["--model", path.to_str().unwrap(), "dump", "--text", "Hello", "-o", "out.json"]),
        )
    };
    let kept = run("stored");
    assert!(kept.status.success(), "{}", String::from_utf8_lossy(&kept.stderr));
    let wide = run("f32");
    assert!(!wide.status.success());
    let err = String::from_utf8_lossy(&wide.stderr);
    assert!(err.contains("of weights as f32") && err.contains("available"), "{err}");
}
