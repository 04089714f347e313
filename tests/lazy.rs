//! Attention computed where it is looked at (issue 16): the lazy path (the residual stream entering
//! each layer, a layer's or head's attention computed again from it) and the streaming passes
//! (one layer, or one head per thread, at a time) give exactly — bit for bit — what a recording
//! pass records, for every family of the fixtures, on random inputs, with and without
//! interventions; and a long input holds the bytes it should.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Mutex;

use attnviz::model::engine::{EachHead, EachLayer, Input};
use attnviz::model::{Capture, Interventions, LoadedModel, Network};
use common::{Rng, bits, fixture_models as fixtures, root};

/// A random input for `net`: 1 to `max_len` random vocabulary ids (and random token types where
/// the model reads them).
fn random_input(net: &Network, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    let d = net.description();
    let n = 1 + rng.below(d.max_len.min(24));
    let ids = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
    let types = d.embedding.token_types.max(1);
    let type_ids = (0..n).map(|_| if d.reads_token_types { rng.below(types) as u32 } else { 0 }).collect();
    (ids, type_ids)
}

/// The interventions a case runs with: none, or a random mix.
fn random_interventions(net: &Network, rng: &mut Rng) -> Interventions {
    let d = net.description();
    if rng.below(2) == 0 {
        return Interventions::default();
    }
    let mut iv = Interventions::default();
    if rng.below(2) == 0 {
        iv.ablated.insert((rng.below(d.layers), rng.below(d.heads)));
    }
    if rng.below(2) == 0 {
        iv.temperature = 0.5 + rng.below(4) as f32 * 0.5;
    }
    iv.causal = rng.below(3) == 0;
    iv.zero_positions = rng.below(3) == 0;
    if rng.below(3) == 0 {
        iv.first_layers = Some(1 + rng.below(d.layers));
    }
    iv
}

/// Checks every way of computing attention against the recording pass on one input.
fn check_case(name: &str, net: &Network, ids: &[u32], type_ids: &[u32], iv: &Interventions) {
    let d = net.description();
    let n = ids.len();
    let (heads, head_dim) = (d.heads, d.head_dim);
    let full = net.forward(ids, type_ids, Capture::Full, iv).unwrap();
    let layers = iv.first_layers.unwrap_or(d.layers);
    let per_layer = heads * n * n;
    let per_head = n * n;
    let terms = net.score_terms().len();
    let what = format!("{name}, {n} tokens, {iv:?}");

    // Lazy: streams, then every layer and head computed again.
    let streams = net.forward_streams(ids, type_ids, iv).unwrap();
    assert_eq!(streams.layers(), layers, "{what}");
    assert_eq!(bits(streams.last_hidden()), bits(&full.last_hidden), "{what}: last hidden state");
    for l in 0..layers {
        let layer = net.layer_attention(&streams, l).unwrap();
        let expected = &full.probs[l * per_layer..(l + 1) * per_layer];
        assert_eq!(bits(&layer.all()), bits(expected), "{what}: layer {l}, all heads");
        for h in 0..heads {
            let at = l * per_layer + h * per_head;
            let detail = layer.head_detail(h);
            assert_eq!(bits(&detail.probs), bits(&full.probs[at..at + per_head]), "{what}: {l}:{h} probs");
            assert_eq!(bits(&detail.scores), bits(&full.scores[at..at + per_head]), "{what}: {l}:{h} scores");
            assert_eq!(detail.terms.len(), terms, "{what}");
            for (t, term) in detail.terms.iter().enumerate() {
                let block = t * layers * per_layer + at;
                assert_eq!(bits(term), bits(&full.terms[block..block + per_head]), "{what}: {l}:{h} term {t}");
            }
            let v = (l * heads + h) * n * head_dim;
            assert_eq!(bits(&detail.queries), bits(&full.queries[v..v + n * head_dim]), "{what}: {l}:{h} q");
            assert_eq!(bits(&detail.keys), bits(&full.keys[v..v + n * head_dim]), "{what}: {l}:{h} k");
        }
    }
    assert!(net.layer_attention(&streams, layers).is_err(), "{what}: past the layers that ran");

    // Streaming, one layer at a time.
    let mut seen = Vec::new();
    let mut each_layer = EachLayer::new(|l, probs: &[f32]| {
        assert_eq!(probs.len(), per_layer);
        assert_eq!(l, seen.len() / per_layer.max(1));
        seen.extend_from_slice(probs);
        Ok(())
    });
    let last = net.run(Input::new(ids, type_ids, iv), &mut each_layer).unwrap();
    assert_eq!(bits(&seen), bits(&full.probs), "{what}: layer by layer");
    assert_eq!(bits(&last), bits(&full.last_hidden), "{what}");

    // Streaming, one head at a time (from the pool's threads, in any order within a layer).
    let heads_seen = Mutex::new(vec![0.0f32; full.probs.len()]);
    let count = Mutex::new(0usize);
    let visit = |l, h, probs: &[f32], _: Option<&[f32]>| {
        let at = l * per_layer + h * per_head;
        heads_seen.lock().unwrap()[at..at + per_head].copy_from_slice(probs);
        *count.lock().unwrap() += 1;
    };
    net.run(Input::new(ids, type_ids, iv), &mut EachHead::new(&visit)).unwrap();
    assert_eq!(*count.lock().unwrap(), layers * heads, "{what}: every head once");
    assert_eq!(bits(&heads_seen.into_inner().unwrap()), bits(&full.probs), "{what}: head by head");
}

#[test]
fn lazy_and_streamed_attention_equal_the_recorded_attention_bit_for_bit_in_every_family() {
    let mut rng = Rng(0x16_1e55_0d00_2026);
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let model = LoadedModel::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A real sentence (the longest the model reads), then random inputs and interventions.
        let encoded = model.tokenizer.encode("The animal didn't cross the street because it was too tired.", None);
        let tokens = encoded.unwrap().tokens;
        check_case(&name, &model.net, &tokens.ids, &tokens.type_ids, &Interventions::default());
        for _ in 0..3 {
            let (ids, type_ids) = random_input(&model.net, &mut rng);
            let iv = random_interventions(&model.net, &mut rng);
            check_case(&name, &model.net, &ids, &type_ids, &iv);
        }
        if let Some(decoder) = &model.decoder {
            let err = decoder.net.forward_streams(&[0, 1], &[0, 0], &Interventions::default()).unwrap_err();
            assert!(err.to_string().contains("encoder"), "{name}: {err}");
        }
    }
}

/// A copy of the tiny Llama whose config allows `positions` tokens.
fn tiny_llama_with_positions(positions: usize) -> tempfile::TempDir {
    common::fixture_with_positions("tiny-llama", "max_position_embeddings", positions)
}

/// A long input's pooled runs (what the app shows past "Record up to") are the word merge's
/// pooling of the recorded attention, bit for bit — overview and window, causal (Llama), with a
/// sliding window (Mistral) and bidirectional (T5's encoder, the window in the middle so spans
/// before and after it exist) — layer by layer as the pass goes, and a stop ends the pass.
#[test]
fn a_long_input_pooled_as_it_runs_equals_the_recorded_attention_pooled() {
    use attnviz::analysis::long::{LongView, OVERVIEW_SPANS, WINDOW_TOKENS, mean_rows, overview_spans, window_spans};
    use attnviz::analysis::words::{merge_attention, merge_sinks};
    let cases = [
        ("tiny-llama", "max_position_embeddings", 700, None),
        ("tiny-mistral", "max_position_embeddings", 600, Some(100)),
        // Attention sinks: each span of rows keeps its mean share of the sink.
        ("tiny-gpt-oss", "max_position_embeddings", 600, Some(50)),
        ("tiny-t5", "n_positions", 650, Some(300)),
    ];
    for (name, key, n, window_start) in cases {
        let dir = common::fixture_with_positions(name, key, n);
        let model = LoadedModel::load(Path::new(dir.path())).unwrap();
        let d = model.net.description().clone();
        let mut rng = Rng(n as u64);
        let ids: Vec<u32> = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
        let tokens = attnviz::analysis::Tokens {
            tokens: ids.iter().map(|i| format!("Ġt{i}")).collect(),
            ids: ids.clone(),
            segments: vec![0; n],
            type_ids: vec![0; n],
            special: vec![false; n],
        };
        let iv = Interventions::default();
        assert!(!model.records(n, 512) || model.decoder.is_some(), "{name}: {n} tokens are past 512");
        let recorded = model.run_tokens(tokens.clone(), None, Capture::Attention, &iv).unwrap();
        let mut partial_layers = Vec::new();
        let mut partials = Vec::new();
        let runs = model
            .run_long(&tokens, None, &iv, window_start, &mut |runs| {
                partial_layers.push(runs.overview.attention.layers());
                partials.push(runs.window.attention.as_slice().to_vec());
                true
            })
            .unwrap()
            .unwrap();
        assert_eq!(partial_layers, (1..d.layers).collect::<Vec<_>>(), "{name}: one message per layer before the last");
        let start = window_start.unwrap_or(n - WINDOW_TOKENS);
        let window = start..start + WINDOW_TOKENS;
        for (run, spans, view) in [
            (&runs.overview, overview_spans(n, OVERVIEW_SPANS), LongView::Overview),
            (&runs.window, window_spans(n, window.clone()), LongView::Window),
        ] {
            let long = run.long.as_ref().unwrap();
            assert_eq!((long.total, long.view, &long.spans, long.window.clone()), (n, view, &spans, window.clone()));
            assert_eq!(run.tokens.len(), spans.len());
            let expected = merge_attention(&recorded.attention, &spans);
            assert_eq!(bits(run.attention.as_slice()), bits(expected.as_slice()), "{name} {view:?}");
            assert_eq!(bits(&run.last_hidden), bits(&mean_rows(&recorded.last_hidden, d.hidden, &spans)), "{name}");
            let sinks = recorded.sinks.as_ref().map(|s| merge_sinks(s, &spans));
            assert_eq!(
                run.sinks.as_ref().map(|s| bits(s.as_slice())),
                sinks.as_ref().map(|s| bits(s.as_slice())),
                "{name} {view:?}"
            );
            let shares = sinks
                .as_ref()
                .map_or_else(|| vec![0.0; run.attention.as_slice().len() / spans.len()], |s| s.as_slice().to_vec());
            for (row, sink) in run.attention.as_slice().chunks(spans.len()).zip(shares) {
                assert!(
                    (row.iter().sum::<f32>() + sink - 1.0).abs() < 1e-4,
                    "{name} {view:?}: rows and the sink sum to 1"
                );
            }
        }
        // In the window, single tokens keep their exact probability.
        let (q, k) = (window.end - 1, window.end - 2);
        let before = usize::from(window.start > 0);
        let (wq, wk) = (q - window.start + before, k - window.start + before);
        assert_eq!(runs.window.attention.get(1, 2, wq, wk).to_bits(), recorded.attention.get(1, 2, q, k).to_bits());
        // Each message held the layers done so far, as they end up.
        for (l, partial) in partials.iter().enumerate() {
            assert_eq!(bits(partial), bits(&runs.window.attention.as_slice()[..partial.len()]), "{name}: layer {l}");
        }
        // Masked spans: Mistral's window of 4 hides everything before the window from its last token.
        if runs.window.window_of(0).is_some() {
            let last = runs.window.tokens.len() - 1;
            assert!(runs.window.is_masked(0, last, 0) && runs.window.attention.get(0, 0, last, 0) == 0.0);
            assert!(!runs.window.is_masked(0, 1, 0), "the window's first token still sees the tokens before it");
        }
        // A stop after the first layer ends the pass without a result.
        let stopped = model.run_long(&tokens, None, &iv, window_start, &mut |_| false).unwrap();
        assert!(stopped.is_none(), "{name}");
    }
}

#[test]
fn a_long_input_in_the_lazy_mode_holds_its_streams_not_its_attention() {
    let dir = tiny_llama_with_positions(4096);
    let model = LoadedModel::load(Path::new(dir.path())).unwrap();
    let d = model.net.description().clone();
    let n = 2048;
    let mut rng = Rng(2048);
    let ids: Vec<u32> = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
    let streams = model.net.forward_streams(&ids, &vec![0; n], &Interventions::default()).unwrap();
    let f = size_of::<f32>();
    // What it keeps: the stream entering each layer and the last hidden state, plus the rotary
    // table (n positions × head_dim/2 cos and sin) — nothing of size n².
    let streams_bytes = (d.layers + 1) * n * d.hidden * f;
    let rope_bytes = n * d.head_dim * f;
    assert_eq!(streams.held_bytes(), streams_bytes + rope_bytes);
    let recorded_bytes = d.layers * d.heads * n * n * f;
    assert!(streams.held_bytes() * 100 < recorded_bytes, "{} vs {recorded_bytes}", streams.held_bytes());
    // While it ran: its buffers plus one n × n scratch matrix per head running at a time (at most
    // one per thread of the pool), never a layer's heads × n × n.
    let threads = candle_core::utils::get_num_threads().max(1);
    let scratch_bound = threads.min(d.heads) * n * n * f;
    let buffers_bound = 16 * n * d.hidden.max(d.intermediate) * f;
    assert!(streams.working_bytes() <= scratch_bound + buffers_bound, "{}", streams.working_bytes());
    assert!(streams.working_bytes() < d.heads * n * n * f || threads >= d.heads);
    // And what it gives back is the attention, computed on demand: rows sum to 1, the causal
    // triangle is exactly zero.
    let layer = model.net.layer_attention(&streams, d.layers - 1).unwrap();
    let probs = layer.head(d.heads - 1);
    for (q, row) in probs.chunks(n).enumerate() {
        let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
        assert!((sum - 1.0).abs() < 1e-4, "row {q} sums to {sum}");
        assert!(row[q + 1..].iter().all(|&v| v == 0.0), "row {q}: keys after the query are masked");
    }
}

/// A recorded run (what the app and `export` make) is cut to the tokens whose attention fits in a
/// third of the memory available, with a notice saying why, instead of failing to allocate
/// (SmolLM2's 8,192 positions would record 145 GB); with room for everything nothing is cut.
#[test]
fn a_recorded_run_is_cut_to_what_fits_in_memory_with_a_notice() {
    let model = LoadedModel::load(&root().join("tests/fixtures/models/tiny-gpt2")).unwrap();
    let d = model.description();
    assert_eq!((d.layers, d.heads, d.head_dim, d.max_len), (2, 4, 8, 32));
    // Probabilities and scores (2 · n²) and q, k (2 · n · head_dim) per head, f32:
    // 16 tokens take 2 · 4 · (2 · 256 + 2 · 16 · 8) · 4 = 24,576 bytes.
    let (n, why) = model.token_limit(Some(3 * 24_576)).unwrap();
    assert_eq!(n, 16);
    assert!(why.contains("2 layers × 4 heads") && why.contains("attnviz dump"), "{why}");
    assert_eq!(model.token_limit(Some(3 * 24_576 - 1)).unwrap().0, 15);
    assert!(model.token_limit(Some(1 << 30)).is_none(), "everything fits: the model's own maximum applies");
    assert!(model.token_limit(None).is_none());
    let text =
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen";
    let cut = model.tokenizer.encode_within(text, None, Some((n, why.as_str()))).unwrap();
    assert_eq!(cut.tokens.len(), 16);
    let notice = cut.truncation.unwrap();
    assert!(notice.starts_with("input truncated to 16 tokens (recording all 2 layers"), "{notice}");
    let full = model.tokenizer.encode(text, None).unwrap();
    assert!(full.tokens.len() > 16);
    assert_eq!(full.tokens.ids[..16], cut.tokens.ids[..], "the first tokens, unchanged");
    // A short input is not touched.
    assert!(model.tokenizer.encode_within("one two", None, Some((n, why.as_str()))).unwrap().truncation.is_none());

    // A generation's prompt in the app is also cut at "Record up to" (it records every head).
    let (cut, _) = model.encode_recordable_within(text, None, Some(5)).unwrap();
    assert_eq!(cut.tokens.ids[..], full.tokens.ids[..5]);
    assert!(cut.truncation.unwrap().contains("“Record up to”, 5 tokens"));
    let g = attnviz::model::generate::Generator::start_within(&model, text, 3, Some(5)).unwrap();
    assert_eq!(g.prompt_len(), 5);
    let (uncut, _) = model.encode_recordable_within("one two", None, Some(5)).unwrap();
    assert!(uncut.truncation.is_none());
}

/// A copy of the model folder `src` with its weights in bf16 (as most of today's checkpoints ship).
fn bf16_copy(src: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let tensors: std::collections::HashMap<String, candle_core::Tensor> =
        tensors.into_iter().map(|(k, t)| (k, t.to_dtype(candle_core::DType::BF16).unwrap())).collect();
    candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

/// Weights kept in their stored 16-bit precision (`WeightStorage::Stored`, the default: linear
/// layers, token embeddings, `lm_head`) take half the memory and give the same attention, hidden
/// states and logits, bit for bit: the embedded `MiniLM` (f16) and a bf16 copy of every safetensors
/// fixture (each family's layout: `GPT-2`'s transposed `Conv1D`, fused and split q/k/v, relative
/// positions, an encoder–decoder's encoder), each loaded both ways.
#[test]
fn weights_in_their_stored_precision_give_the_same_attention_bit_for_bit() {
    use attnviz::model::WeightStorage;
    let copies: Vec<tempfile::TempDir> =
        fixtures().into_iter().filter(|d| d.join("model.safetensors").is_file()).map(|d| bf16_copy(&d)).collect();
    assert!(copies.len() >= 20, "every safetensors family");
    let minilm = attnviz::model::default_model_dir();
    for dir in std::iter::once(minilm.clone()).chain(copies.iter().map(|c| c.path().to_path_buf())) {
        let f32 = LoadedModel::load_with(&dir, Some(WeightStorage::F32)).unwrap();
        let stored = LoadedModel::load_with(&dir, Some(WeightStorage::Stored)).unwrap();
        assert_eq!(stored.net.large_weight_bytes() * 2, f32.net.large_weight_bytes(), "{}", dir.display());
        for text in ["The animal didn't cross the street because it was too tired.", "Ünïcödé, 東京 — ok?"] {
            let (a, b) = (f32.run(text, None).unwrap(), stored.run(text, None).unwrap());
            assert_eq!(bits(a.attention.as_slice()), bits(b.attention.as_slice()), "{}: {text}", dir.display());
            assert_eq!(bits(&a.last_hidden), bits(&b.last_hidden), "{}: {text}", dir.display());
            // The language-model head reads the 16-bit embeddings (tied) or lm_head row by row.
            let last = &a.last_hidden[a.last_hidden.len() - f32.description().hidden..];
            let (la, lb) = (f32.net.logits(last).map(|l| bits(&l)), stored.net.logits(last).map(|l| bits(&l)));
            assert_eq!(la, lb, "{}: logits", dir.display());
            assert!(dir != minilm || la.is_none(), "MiniLM has no language-model head");
        }
    }
}
