//! A keystroke computes what changed: `PrefixRun` reuses the previous input's key/value cache and
//! attention rows up to the first changed token, and its result is bit for bit a fresh pass's —
//! for every decoder family, with a sliding window (tiny-mistral: 4 tokens), with interventions,
//! and for quantised GGUF weights.

#![allow(clippy::unwrap_used)]

mod common;

use attnviz::model::typing::{PrefixRun, Reused};
use attnviz::model::{Capture, Interventions, LoadedModel};
use common::bits;

const DECODERS: [&str; 9] = [
    "tiny-llama",
    "tiny-mistral",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-gemma",
    "tiny-gpt-neox",
    "tiny-gpt2",
    "tiny-llama-gguf/tiny-llama.mixed.gguf",
    "tiny-llama-gguf/tiny-llama.K.gguf",
];

fn fresh(m: &LoadedModel, ids: &[u32], iv: &Interventions) -> (Vec<u32>, Vec<u32>) {
    let out = m.net.forward(ids, &vec![0; ids.len()], Capture::Attention, iv).unwrap();
    (bits(&out.probs), bits(&out.last_hidden))
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
            let (probs, hidden) = fresh(&m, ids, iv);
            assert_eq!(bits(&run.square_probs()), probs, "{name}, {what}: attention");
            assert_eq!(bits(run.last_hidden()), hidden, "{name}, {what}: last hidden state");
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
        // Interventions: changing them runs everything; then typing reuses under them.
        assert_eq!(run.update(&m.net, &middle, &ablated).unwrap(), Reused { kept: 0, ran: n + 1 });
        check(&run, &middle, &ablated, "a head ablated");
        let mut typed = middle.clone();
        typed.push(11);
        assert_eq!(run.update(&m.net, &typed, &ablated).unwrap(), Reused { kept: n + 1, ran: 1 });
        check(&run, &typed, &ablated, "a token typed with a head ablated");
    }
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
    let out = bench("tiny-bert");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a decoder"));
}
