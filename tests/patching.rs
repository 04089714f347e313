//! Activation patching (issue 38) in the library: a sweep that runs only what each patch changes
//! is the sweep of one full pass per cell, bit for bit; patching clean into clean is the clean run;
//! every position of the stream entering layer 0 patched is the clean run; the logits of two
//! tokens are the full logits' bits; progress and cancelling; what the request refuses.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use attnviz::analysis::Tokens;
use attnviz::analysis::patching::PatchSite;
use attnviz::model::intervene::parse_knockout;
use attnviz::model::patch::{Cells, PatchRequest, PatchRuns, Reuse, SweepControl};
use attnviz::model::{EngineError, Interventions, LoadedModel, ModelError};
use common::{Rng, bits, root};

fn fixture(name: &str) -> LoadedModel {
    LoadedModel::load(&root().join("tests/fixtures/models").join(name)).unwrap()
}

fn tokens(model: &LoadedModel, ids: &[u32]) -> Tokens {
    Tokens::from_ids(ids, |id| model.tokenizer.token_of(id), |id| model.tokenizer.is_special(id))
}

/// A random pair of inputs of `n` tokens differing at a few positions, and two tokens.
fn pair(model: &LoadedModel, n: usize, rng: &mut Rng) -> (Tokens, Tokens, [u32; 2]) {
    let vocab = model.description().vocab_size;
    let clean: Vec<u32> = (0..n).map(|_| rng.below(vocab) as u32).collect();
    let mut corrupted = clean.clone();
    for _ in 0..2 {
        corrupted[1 + rng.below(n - 1)] = rng.below(vocab) as u32;
    }
    let answer = rng.below(vocab) as u32;
    (tokens(model, &clean), tokens(model, &corrupted), [answer, (answer + 1) % vocab as u32])
}

fn sweep(runs: &PatchRuns<'_>, reuse: Reuse) -> Vec<f32> {
    runs.sweep(reuse, &mut SweepControl { progress: &mut |_| {}, cancel: None }).unwrap().0
}

#[test]
fn running_only_what_changed_is_every_full_patched_pass_bit_for_bit() {
    let mut rng = Rng(0x38_9a7c_2026);
    let ablated = Interventions { ablated: [(0, 1)].into(), temperature: 0.8, ..Interventions::default() };
    let knocked = Interventions { knockout: parse_knockout("*:6:2,1:4:0").unwrap(), ..Interventions::default() };
    let llama = fixture("tiny-llama");
    let steer = Some(llama.steering(1, ("The cat sat on the mat.", "A dog."), 2.0).unwrap().steering);
    let steered = Interventions { steer, ..Interventions::default() };
    for (name, iv) in [
        ("tiny-llama", Interventions::default()),
        ("tiny-llama", steered),
        ("tiny-gpt-neox", Interventions::default()),
        ("tiny-gpt2", ablated),
        ("tiny-gemma", Interventions::default()),
        ("tiny-mistral", knocked),
        ("tiny-gemma2", Interventions::default()),
        ("tiny-gemma3", Interventions::default()),
        ("tiny-olmo2", Interventions::default()),
        ("tiny-granite", Interventions::default()),
        ("tiny-phi3", Interventions::default()),
        ("tiny-smollm3", Interventions::default()),
        ("tiny-mixtral", Interventions::default()),
        ("tiny-qwen3-moe", Interventions::default()),
        ("tiny-olmoe", Interventions::default()),
        ("tiny-gpt-oss", Interventions::default()),
        ("tiny-llama-gguf/tiny-llama.Q8_0.gguf", Interventions::default()),
    ] {
        let model = fixture(name);
        let (clean, corrupted, answer) = pair(&model, 7, &mut rng);
        for site in PatchSite::ALL {
            let runs = PatchRuns::new(&model.net, (&clean, &corrupted), answer, site, &iv).unwrap();
            let fast = sweep(&runs, Reuse::Changed);
            let full = sweep(&runs, Reuse::FullPasses);
            assert_eq!(bits(&fast), bits(&full), "{name} {}", site.name());
            // The corrupted run's difference where nothing changed.
            let corrupted_ld = runs.corrupted_logit_diff();
            if site != PatchSite::Head {
                assert_eq!(fast[0].to_bits(), corrupted_ld.to_bits(), "{name} {}: position 0 is the same", site.name());
            }

            // Clean into clean: every cell is the clean run's difference, bit for bit.
            let same = PatchRuns::new(&model.net, (&clean, &clean), answer, site, &iv).unwrap();
            let clean_ld = same.clean_logit_diff();
            assert_eq!(clean_ld.to_bits(), runs.clean_logit_diff().to_bits(), "{name}");
            for reuse in [Reuse::Changed, Reuse::FullPasses] {
                assert!(
                    sweep(&same, reuse).iter().all(|v| v.to_bits() == clean_ld.to_bits()),
                    "{name} {}",
                    site.name()
                );
            }
        }
        // Every position of the stream entering layer 0 patched is the clean run.
        let runs = PatchRuns::new(&model.net, (&clean, &corrupted), answer, PatchSite::ResidPre, &iv).unwrap();
        let all: Vec<usize> = (0..clean.len()).collect();
        for reuse in [Reuse::Changed, Reuse::FullPasses] {
            let (ld, _) = runs.patched(0, Cells::Positions(&all), reuse).unwrap();
            assert_eq!(ld.to_bits(), runs.clean_logit_diff().to_bits(), "{name}: all of layer 0");
        }
    }
}

#[test]
fn the_logits_of_two_tokens_are_the_full_logits_bits() {
    for model in [
        fixture("tiny-gpt2"),
        fixture("tiny-llama-gguf/tiny-llama.Q8_0.gguf"),
        LoadedModel::load(std::path::Path::new("smollm2")).unwrap(),
    ] {
        let d = model.description();
        let row: Vec<f32> = (0..d.hidden).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.1).collect();
        let all = model.net.logits(&row).unwrap();
        let ids = [0, 7, d.vocab_size as u32 - 1];
        let some = model.net.token_logits(&row, &ids).unwrap();
        assert_eq!(bits(&some), bits(&ids.map(|i| all[i as usize])), "{}", model.name);
        assert!(model.net.token_logits(&row, &[d.vocab_size as u32]).is_none());
    }
}

#[test]
fn a_sweep_reports_each_cell_and_stops_when_cancelled() {
    let model = fixture("tiny-llama");
    let (clean, corrupted, answer) = pair(&model, 6, &mut Rng(7));
    let runs =
        PatchRuns::new(&model.net, (&clean, &corrupted), answer, PatchSite::Head, &Interventions::default()).unwrap();
    let (layers, heads) = runs.shape();
    let mut seen = Vec::new();
    let (grid, passes) =
        runs.sweep(Reuse::Changed, &mut SweepControl { progress: &mut |p| seen.push(p), cancel: None }).unwrap();
    assert_eq!(grid.len(), layers * heads);
    assert!(passes <= grid.len());
    assert_eq!(seen.len(), grid.len());
    assert!(
        seen.iter()
            .enumerate()
            .all(|(i, p)| p.done == i + 1 && p.total == grid.len() && p.value.to_bits() == grid[i].to_bits())
    );
    assert_eq!(seen[heads + 1].cell, (1, 1));
    // Cancelled after the third cell.
    let cancel = AtomicBool::new(false);
    let mut done = 0;
    let mut progress = |_| {
        done += 1;
        if done == 3 {
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let err =
        runs.sweep(Reuse::Changed, &mut SweepControl { progress: &mut progress, cancel: Some(&cancel) }).unwrap_err();
    assert!(matches!(err, ModelError::Engine(EngineError::Stopped)), "{err}");
    assert_eq!(done, 3);
}

#[test]
fn a_request_refuses_unequal_inputs_tokens_that_are_not_one_and_bad_cells() {
    let model = fixture("tiny-llama");
    let iv = Interventions::default();
    let request = |clean: &str, answer: &str| {
        model.patch_request((clean, "The cat sat."), (answer, " mat"), PatchSite::ResidPre, &iv)
    };
    let err = request("The cat sat down.", " cat").unwrap_err().to_string();
    assert!(err.contains("clean has 8") && err.contains("corrupted 5"), "{err}");
    assert!(err.contains("The Ġcat Ġsat Ġd o wn .") && err.contains("Ġsat ."), "both tokenisations: {err}");
    let err = request("The mat sat.", " catapult").unwrap_err().to_string();
    assert!(err.contains("--answer") && err.contains("not one"), "{err}");
    let PatchRequest { clean, corrupted, answer, wrong, .. } = request("The mat sat.", " cat").unwrap();
    let runs = PatchRuns::new(&model.net, (&clean, &corrupted), [answer, wrong], PatchSite::ResidPre, &iv).unwrap();
    let (layers, n) = runs.shape();
    assert!(runs.patched(layers, Cells::Positions(&[0]), Reuse::Changed).is_err());
    assert!(runs.patched(0, Cells::Positions(&[n]), Reuse::Changed).is_err());
    assert!(runs.patched(0, Cells::Head(0), Reuse::Changed).is_err(), "a head of a position sweep");
    // A model without a language-model head, an encoder–decoder.
    let bert = fixture("tiny-bert");
    let ids = bert.tokenizer.encode("a b", None).unwrap().tokens;
    let err = PatchRuns::new(&bert.net, (&ids, &ids), [1, 2], PatchSite::ResidPre, &iv).unwrap_err();
    assert!(err.to_string().contains("no language-model head"), "{err}");
    let t5 = fixture("tiny-t5");
    let err = t5.patch_request(("a", "b"), ("a", "b"), PatchSite::Head, &iv).unwrap_err();
    assert!(err.to_string().contains("encoder–decoder"), "{err}");
}
