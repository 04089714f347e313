//! A keystroke computes what changed: `PrefixRun` reuses the previous input's key/value cache and
//! attention rows up to the first changed token, and its result is bit for bit a fresh pass's —
//! for every decoder family, with a sliding window (tiny-mistral: 4 tokens; Gemma 2 and 3 on alternate
//! layers), with interventions,
//! and for quantised GGUF weights.

#![allow(clippy::unwrap_used)]

mod common;

use attnviz::model::typing::{PrefixRun, Reused};
use attnviz::model::{Capture, Interventions, LoadedModel};
use common::bits;

const DECODERS: [&str; 18] = [
    "tiny-llama",
    "tiny-gpt-oss",
    "tiny-mixtral",
    "tiny-qwen3-moe",
    "tiny-olmoe",
    "tiny-gemma2",
    "tiny-gemma3",
    "tiny-olmo2",
    "tiny-granite",
    "tiny-smollm3",
    "tiny-mistral",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-gemma",
    "tiny-gpt-neox",
    "tiny-gpt2",
    "tiny-llama-gguf/tiny-llama.mixed.gguf",
    "tiny-llama-gguf/tiny-llama.K.gguf",
];

#[test]
fn a_rotary_that_depends_on_the_length_runs_whole() {
    // Phi-3's long-rope (and dynamic NTK) rotate every key by the input's length: a kept prefix
    // would not be a fresh pass's, so nothing is kept.
    for name in ["tiny-phi3", "tiny-llama-rope-dynamic"] {
        let m = LoadedModel::load(&common::root().join("tests/fixtures/models").join(name)).unwrap();
        assert!(PrefixRun::start(&m.net, &[1, 2, 3], &Interventions::default()).unwrap().is_none(), "{name}");
    }
}

fn fresh(m: &LoadedModel, ids: &[u32], iv: &Interventions) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let out = m.net.forward(ids, &vec![0; ids.len()], Capture::Attention, iv).unwrap();
    (bits(&out.probs), bits(&out.last_hidden), bits(&out.sinks))
}

#[test]
fn every_edit_gives_a_fresh_pass_bit_for_bit_running_only_what_changed() {
    for name in DECODERS {
        let m = LoadedModel::load(&common::root().join("tests/fixtures/models").join(name)).unwrap();
        let ids = m
            .tokenizer
            .encode("The animal didn't cross the street because it was too tired.", None)
            .unwrap()
            .tokens
            .ids;
        let n = ids.len();
        assert!(n >= 8, "{name}: {n} tokens");
        let faithful = Interventions::default();
        let mut ablated = Interventions::default();
        ablated.ablated.insert((0, 1));
        let mut run = PrefixRun::start(&m.net, &ids, &faithful).unwrap().unwrap();
        let check = |run: &PrefixRun, ids: &[u32], iv: &Interventions, what: &str| {
            let (probs, hidden, sinks) = fresh(&m, ids, iv);
            assert_eq!(bits(&run.square_probs()), probs, "{name}, {what}: attention");
            assert_eq!(bits(run.last_hidden()), hidden, "{name}, {what}: last hidden state");
            let kept = run.sinks().map(|s| bits(s.unwrap().as_slice())).unwrap_or_default();
            assert_eq!(kept, sinks, "{name}, {what}: the sinks' shares");
        };
        check(&run, &ids, &faithful, "the first input");
        let with = |extra: &[u32]| ids.iter().chain(extra).copied().collect::<Vec<u32>>();
        // Typing at the end: one token, then another.
        let one = with(&[7]);
        assert_eq!(run.update(&m.net, &one, &faithful).unwrap(), Reused { kept: n, ran: 1 });
        check(&run, &one, &faithful, "a token typed at the end");
        let two = with(&[7, 9]);
        assert_eq!(run.update(&m.net, &two, &faithful).unwrap(), Reused { kept: n + 1, ran: 1 });
        check(&run, &two, &faithful, "another token");
        // A backspace: a prefix of the last input, nothing to run.
        assert_eq!(run.update(&m.net, &one, &faithful).unwrap(), Reused { kept: n + 1, ran: 0 });
        check(&run, &one, &faithful, "a backspace");
        // An edit in the middle reuses up to the first changed token.
        let mut middle = one.clone();
        middle[3] = middle[3].wrapping_add(1) % 50;
        assert_eq!(run.update(&m.net, &middle, &faithful).unwrap(), Reused { kept: 3, ran: n + 1 - 3 });
        check(&run, &middle, &faithful, "an edit in the middle");
        // A long suffix runs a few tokens at a time (here 3): the same bits.
        run.set_step_tokens(3);
        let mut early = middle.clone();
        early[1] = early[1].wrapping_add(1) % 50;
        assert_eq!(run.update(&m.net, &early, &faithful).unwrap(), Reused { kept: 1, ran: n });
        check(&run, &early, &faithful, "an edit at the second token, run three tokens at a time");
        assert_eq!(run.update(&m.net, &middle, &faithful).unwrap(), Reused { kept: 1, ran: n });
        check(&run, &middle, &faithful, "and back");
        run.set_step_tokens(usize::MAX);
        // Interventions: changing them runs everything; then typing reuses under them.
        assert_eq!(run.update(&m.net, &middle, &ablated).unwrap(), Reused { kept: 0, ran: n + 1 });
        check(&run, &middle, &ablated, "a head ablated");
        let mut typed = middle.clone();
        typed.push(11);
        assert_eq!(run.update(&m.net, &typed, &ablated).unwrap(), Reused { kept: n + 1, ran: 1 });
        check(&run, &typed, &ablated, "a token typed with a head ablated");
    }
}

/// Everything a run holds for the views, as bits: attention, the neuron view's scores, queries and
/// keys, the last hidden state, and what the run says of itself.
fn run_bits(run: &attnviz::analysis::Run) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, String) {
    let neuron = run.neuron.as_ref().unwrap();
    let a = &run.attention;
    let mut vectors = Vec::new();
    for l in 0..a.layers() {
        for h in 0..a.heads() {
            for t in 0..a.seq_len() {
                vectors.extend(bits(neuron.queries.vector(l, h, t)));
                vectors.extend(bits(neuron.keys.vector(l, h, t)));
            }
        }
    }
    let about = format!(
        "{:?} {:?} {:?} {:?} {} {:?} {}",
        run.tokens.tokens,
        run.tokens.ids,
        run.truncation,
        run.intervention,
        run.causal,
        (run.window, &run.sliding_layers),
        neuron.terms.len()
    );
    (bits(a.as_slice()), bits(neuron.scores.as_slice()), vectors, bits(&run.last_hidden), about)
}

#[test]
fn the_apps_runs_reuse_the_prefix_and_equal_a_fresh_recorded_run() {
    // What the app does on each keystroke of one sentence: the run it shows (attention, the neuron
    // view's scores, queries and keys) equals `run_with`'s bit for bit, typing, deleting, editing
    // in the middle and with a head ablated.
    for name in ["tiny-llama", "tiny-mistral", "tiny-gpt2", "tiny-llama-gguf/tiny-llama.K.gguf"] {
        let m = LoadedModel::load(&common::root().join("tests/fixtures/models").join(name)).unwrap();
        let faithful = Interventions::default();
        let mut ablated = Interventions::default();
        ablated.ablated.insert((0, 1));
        let mut prefix: Option<PrefixRun> = None;
        let mut last = 0;
        let steps: [(&str, &Interventions); 7] = [
            ("The animal didn't cross the street", &faithful),
            ("The animal didn't cross the street because", &faithful),
            ("The animal didn't cross the street because it", &faithful),
            ("The animal didn't cross the street because", &faithful),
            ("The cat didn't cross the street because", &faithful),
            ("The cat didn't cross the street because", &ablated),
            ("The cat didn't cross the street because it was", &ablated),
        ];
        for (i, (text, iv)) in steps.into_iter().enumerate() {
            if i == 4 {
                // The edit's suffix runs three tokens at a time: the same bits.
                prefix.as_mut().unwrap().set_step_tokens(3);
            }
            let (run, reused) = m.run_reusing(&mut prefix, text, iv).unwrap();
            let fresh = m.run_with(text, None, iv).unwrap();
            assert!(
                run_bits(&run) == run_bits(&fresh),
                "{name}, step {i} ({text:?}): the run differs from a fresh one"
            );
            let reused = reused.unwrap();
            let n = run.tokens.len();
            assert_eq!(reused.kept + reused.ran, if reused.ran == 0 { reused.kept } else { n }, "{name}, step {i}");
            match i {
                0 => assert_eq!(reused.kept, 0, "{name}: the first run runs everything"),
                1 | 2 | 6 => {
                    assert!(reused.kept >= last - 1 && reused.ran <= n - last + 1, "{name}, step {i}: {reused:?}");
                }
                3 => assert_eq!(reused, Reused { kept: n, ran: 0 }, "{name}: a deletion runs nothing"),
                4 => assert!(reused.kept < 4 && reused.ran > 0, "{name}: an edit after the first word: {reused:?}"),
                5 => assert_eq!(reused.kept, 0, "{name}: new interventions run everything"),
                _ => {}
            }
            last = n;
        }
    }
    // An encoder runs whole and keeps nothing.
    let bert = LoadedModel::load(&common::root().join("tests/fixtures/models/tiny-bert")).unwrap();
    let mut prefix = None;
    let (run, reused) = bert.run_reusing(&mut prefix, "hello world", &Interventions::default()).unwrap();
    assert!(reused.is_none() && prefix.is_none());
    assert!(run_bits(&run) == run_bits(&bert.run_with("hello world", None, &Interventions::default()).unwrap()));
}

#[test]
fn an_encoder_has_no_prefix_to_reuse() {
    let m = LoadedModel::load(&common::root().join("tests/fixtures/models/tiny-bert")).unwrap();
    assert!(PrefixRun::start(&m.net, &[101, 7592, 102], &Interventions::default()).unwrap().is_none());
}

#[test]
fn bench_times_a_keystroke_and_checks_it_against_a_fresh_pass() {
    let bench = |model: &str| {
        let dir = common::root().join("tests/fixtures/models").join(model);
        common::output_sandboxed(std::process::Command::new(env!("CARGO_BIN_EXE_attnviz")).args([
            "bench",
            "--model",
            dir.to_str().unwrap(),
            "--mode",
            "typing",
            "--tokens",
            "12",
            "--runs",
            "3",
        ]))
    };
    let out = bench("tiny-mistral");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("tokens=12 runs=3 median_ms=") && text.contains("mode=typing"), "{text}");
    assert!(text.contains("equal_to_fresh=bits") && text.contains("fresh_ms="), "{text}");
    assert!(text.contains("paused_run_median_ms="), "{text}");
    let out = bench("tiny-bert");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a decoder"));
}
