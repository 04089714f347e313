//! Interventions on the pretrained model and the playground encoder: what each change must and
//! must not touch.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::path::PathBuf;
use std::sync::OnceLock;

use attnviz::analysis::{Run, Tokens};
use attnviz::model::Capture;
use attnviz::model::playground::PeKind;
use attnviz::model::{Interventions, LoadedModel, PlaygroundConfig, default_model_dir};

const TEXT: &str = "The animal didn't cross the street because it was too tired.";

fn minilm() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| {
        LoadedModel::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/models/all-MiniLM-L6-v2")).unwrap()
    })
}

fn tokenizer_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/models/all-MiniLM-L6-v2/tokenizer.json")
}

fn playground(spec: &str) -> LoadedModel {
    PlaygroundConfig::parse(spec).unwrap().build(&tokenizer_path()).unwrap()
}

fn faithful() -> Run {
    minilm().run(TEXT, None).unwrap()
}

fn with(iv: &Interventions) -> Run {
    minilm().run_with(TEXT, None, iv).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn temperature_one_is_the_faithful_model_bit_for_bit() {
    let base = faithful();
    let same = with(&Interventions { temperature: 1.0, ..Interventions::default() });
    assert_eq!(same.attention.as_slice(), base.attention.as_slice());
    assert_eq!(same.last_hidden, base.last_hidden);
    assert_eq!(same.intervention, None, "temperature 1 is not a modification");
    assert_eq!(same.display_name(), base.model_name);
}

#[test]
fn temperature_divides_the_scores_before_the_softmax() {
    let base = faithful();
    let hot = with(&Interventions { temperature: 0.5, ..Interventions::default() });
    assert!(hot.intervention.as_deref().unwrap().contains("temperature 0.5"));
    assert!(hot.display_name().contains("MODIFIED"));
    // Layer 0 sees the same input, so its weights are softmax(faithful scores / 0.5).
    let scores = &base.neuron.as_ref().unwrap().scores;
    let n = base.tokens.len();
    for h in 0..base.attention.heads() {
        for q in 0..n {
            let s: Vec<f64> = (0..n).map(|k| f64::from(scores.get(0, h, q, k)) / 0.5).collect();
            let max = s.iter().copied().fold(f64::MIN, f64::max);
            let z: f64 = s.iter().map(|v| (v - max).exp()).sum();
            for k in 0..n {
                let want = (s[k] - max).exp() / z;
                assert!((f64::from(hot.attention.get(0, h, q, k)) - want).abs() < 1e-5);
            }
        }
    }
    // Sharper: the largest weight of every row grows (or stays).
    let row_max = |r: &Run| (0..n).map(|q| r.attention.row(0, 0, q).iter().copied().fold(0.0, f32::max)).sum::<f32>();
    assert!(row_max(&hot) > row_max(&base));
}

#[test]
fn ablating_a_head_changes_only_later_layers() {
    let base = faithful();
    let ablated = with(&Interventions { ablated: [(2, 3)].into(), ..Interventions::default() });
    let a = &ablated.attention;
    for l in 0..=2 {
        for h in 0..a.heads() {
            assert_eq!(a.head(l, h), base.attention.head(l, h), "layer {l} head {h} must be unchanged");
        }
    }
    for l in 3..a.layers() {
        let d = (0..a.heads()).map(|h| max_diff(a.head(l, h), base.attention.head(l, h))).fold(0.0, f32::max);
        assert!(d > 1e-4, "layer {l} should change, max |Δ| = {d}");
    }
    assert_eq!(ablated.intervention.as_deref(), Some("ablated heads 2:3"));
}

#[test]
fn zeroed_positions_causal_mask_and_first_layers() {
    let base = faithful();
    let n = base.tokens.len();
    let no_pos = with(&Interventions { zero_positions: true, ..Interventions::default() });
    assert!(max_diff(no_pos.attention.head(0, 0), base.attention.head(0, 0)) > 1e-3);

    let causal = with(&Interventions { causal: true, ..Interventions::default() });
    for l in 0..causal.attention.layers() {
        for h in 0..causal.attention.heads() {
            for q in 0..n {
                let row = causal.attention.row(l, h, q);
                assert!(row[q + 1..].iter().all(|&v| v == 0.0));
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            }
        }
    }
    assert_eq!(causal.attention.row(0, 0, 0)[0], 1.0, "the first token can only attend to itself");

    let first = with(&Interventions { first_layers: Some(2), ..Interventions::default() });
    assert_eq!(first.attention.layers(), 2);
    for l in 0..2 {
        assert_eq!(first.attention.head(l, 5), base.attention.head(l, 5));
    }
    let err = minilm()
        .run_with(TEXT, None, &Interventions { ablated: [(9, 0)].into(), ..Interventions::default() })
        .unwrap_err()
        .to_string();
    assert!(err.contains("9:0"), "{err}");
}

#[test]
fn playground_causal_mask_zeroes_the_upper_triangle_exactly() {
    for norm in ["pre", "post"] {
        let run = playground(&format!("layers=3,heads=4,d_model=32,causal=on,norm={norm},seed=5"))
            .run("Positional encodings tell the model where each token is.", None)
            .unwrap();
        let a = &run.attention;
        assert_eq!((a.layers(), a.heads()), (3, 4));
        let n = a.seq_len();
        for l in 0..3 {
            for h in 0..4 {
                for q in 0..n {
                    assert!(a.row(l, h, q)[q + 1..].iter().all(|&v| v == 0.0), "{norm} L{l} H{h} row {q}");
                    assert!((a.row(l, h, q).iter().sum::<f32>() - 1.0).abs() < 1e-5);
                }
            }
        }
        assert!(run.model_name.contains("playground"));
    }
}

/// Runs `model` on `tokens` reordered by `order` (new position i holds old token `order[i]`).
fn run_permuted(model: &LoadedModel, tokens: &Tokens, order: &[usize]) -> Run {
    let pick = |i: &usize| *i;
    let permuted = Tokens {
        tokens: order.iter().map(pick).map(|i| tokens.tokens[i].clone()).collect(),
        ids: order.iter().map(pick).map(|i| tokens.ids[i]).collect(),
        segments: order.iter().map(pick).map(|i| tokens.segments[i]).collect(),
        type_ids: order.iter().map(pick).map(|i| tokens.type_ids[i]).collect(),
        special: order.iter().map(pick).map(|i| tokens.special[i]).collect(),
    };
    model.run_tokens(permuted, None, Capture::Attention, &Interventions::default()).unwrap()
}

/// Largest |A'[i][j] − A[order[i]][order[j]]| over all layers and heads.
fn permutation_error(a: &Run, b: &Run, order: &[usize]) -> f32 {
    let (x, y) = (&a.attention, &b.attention);
    let mut worst = 0.0f32;
    for l in 0..x.layers() {
        for h in 0..x.heads() {
            for (i, &oi) in order.iter().enumerate() {
                for (j, &oj) in order.iter().enumerate() {
                    worst = worst.max((y.get(l, h, i, j) - x.get(l, h, oi, oj)).abs());
                }
            }
        }
    }
    worst
}

#[test]
fn playground_without_positions_is_permutation_equivariant() {
    let text = "every token sees the same bag of words here";
    let none = playground("layers=2,heads=4,d_model=64,pe=none,seed=3,cls=off");
    let sin = playground("layers=2,heads=4,d_model=64,pe=sin,seed=3,cls=off");
    let base_none = none.run(text, None).unwrap();
    let n = base_none.tokens.len();
    assert!(n >= 8 && !base_none.tokens.tokens.contains(&"[CLS]".to_string()));
    let order: Vec<usize> = (0..n).rev().collect();
    let shuffled: Vec<usize> = (0..n).step_by(2).chain((1..n).step_by(2)).collect();
    for perm in [&order, &shuffled] {
        let err = permutation_error(&base_none, &run_permuted(&none, &base_none.tokens, perm), perm);
        assert!(err < 1e-5, "no PE: permuting the tokens must permute the attention (max |Δ| {err})");
    }
    // With a positional encoding the same permutation does change the picture.
    let base_sin = sin.run(text, None).unwrap();
    let err = permutation_error(&base_sin, &run_permuted(&sin, &base_sin.tokens, &order), &order);
    assert!(err > 1e-3, "sinusoidal PE should break equivariance (max |Δ| {err})");
}

#[test]
fn playground_is_reproducible_from_its_seed_and_every_pe_kind_runs() {
    let a = playground("seed=11").run(TEXT, None).unwrap();
    let b = playground("seed=11").run(TEXT, None).unwrap();
    let c = playground("seed=12").run(TEXT, None).unwrap();
    assert_eq!(a.attention.as_slice(), b.attention.as_slice());
    assert!(max_diff(a.attention.as_slice(), c.attention.as_slice()) > 1e-4);
    for pe in PeKind::ALL {
        for scale in ["sqrt", "none", "0.3"] {
            let run = playground(&format!("pe={},scale={scale},norm=pre,d_ff=32", pe.name()))
                .run(TEXT, Some("a second sentence"))
                .unwrap();
            assert!(run.attention.max_row_sum_error() < 1e-5, "{pe:?} {scale}");
        }
    }
    // The playground uses the embedded model's tokenizer.
    assert_eq!(a.tokens.tokens, faithful().tokens.tokens);
    assert!(default_model_dir().join("tokenizer.json").is_file());
}

#[test]
fn a_causal_playground_still_reads_sentence_pairs() {
    // The causal mask is a playground setting, not a language model: pairs stay allowed.
    let model = playground("layers=1,heads=2,d_model=16,causal=true");
    let run = model.run("The cat sat.", Some("It purred.")).unwrap();
    assert!(run.tokens.is_pair() && run.causal);
    // So is a causal mask put on a pretrained encoder.
    let causal = Interventions { causal: true, ..Interventions::default() };
    let run = minilm().run_with("The cat sat.", Some("It purred."), &causal).unwrap();
    assert!(run.tokens.is_pair() && run.causal);
}

fn tiny_llama() -> LoadedModel {
    LoadedModel::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-llama")).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn steering_adds_its_scaled_vector_to_the_stream_entering_its_layer_at_every_position() {
    let model = tiny_llama();
    let net = &model.net;
    let faithful = Interventions::default();
    let steered = model.steering(1, ("The cat sat on the mat.", "The dog ran."), 2.5).unwrap();
    assert!(steered.notices.is_empty());
    // The vector: the stream entering layer 1 at the last token of each text, run alone.
    let last_row = |text: &str| {
        let t = model.tokenizer.encode(text, None).unwrap().tokens;
        let streams = net.forward_streams(&t.ids, &t.type_ids, &faithful).unwrap();
        let h = model.description().hidden;
        streams.entering(1)[(t.len() - 1) * h..].to_vec()
    };
    let (plus, minus) = (last_row("The cat sat on the mat."), last_row("The dog ran."));
    let want: Vec<f32> = plus.iter().zip(&minus).map(|(p, m)| p - m).collect();
    assert_eq!(bits(&steered.steering.vector), bits(&want));

    // The steered pass: the faithful stream entering layer 1, plus 2.5 · v in every row, run on.
    let iv = Interventions { steer: Some(steered.steering.clone()), ..Interventions::default() };
    let tokens = model.tokenizer.encode("A bird sang today.", None).unwrap().tokens;
    let (ids, types) = (&tokens.ids, &tokens.type_ids);
    let streams = net.forward_streams(ids, types, &faithful).unwrap();
    let added = steered.steering.added();
    let mut entering = streams.entering(1).to_vec();
    for row in entering.chunks_mut(added.len()) {
        row.iter_mut().zip(&added).for_each(|(x, a)| *x += a);
    }
    let mut record = attnviz::model::engine::Record::new(Capture::Attention);
    let input = attnviz::model::engine::Input::new(ids, types, &iv).resumed(1, &entering);
    let resumed = net.run(input, &mut record).unwrap();
    let whole = net.forward(ids, types, Capture::Attention, &iv).unwrap();
    assert_eq!(bits(&resumed), bits(&whole.last_hidden), "steered = the stream plus C·v, run on");
    let plain = net.forward(ids, types, Capture::Attention, &faithful).unwrap();
    assert_ne!(bits(&plain.last_hidden), bits(&whole.last_hidden), "steering changes the output");
    let run = model.run_with("A bird sang today.", None, &iv).unwrap();
    assert!(
        run.intervention
            .as_deref()
            .unwrap()
            .contains("steered at layer 1 by 2.5 × (“The cat sat on the mat.” − “The dog ran.”)")
    );

    // Written with the key/value cache, every step steered: the rows written are the final pass's.
    let mut g = attnviz::model::generate::Generator::start_modified(&model, "A bird", 3, None, &iv).unwrap();
    while g.next(6).unwrap().is_some() {}
    let (partial, last) = (g.partial_run(), g.final_run().unwrap());
    assert_eq!(bits(partial.attention.as_slice()), bits(last.attention.as_slice()), "cached steps = one pass");
    assert_eq!(last.intervention, run.intervention);
}

#[test]
fn steering_refuses_what_it_cannot_do_and_notes_a_lone_token() {
    let model = tiny_llama();
    let err = |layer, scale| model.steering(layer, ("cat", "dog"), scale).unwrap_err().to_string();
    assert!(err(0, f32::NAN).contains("finite number, got NaN"));
    assert!(err(2, 1.0).contains("cannot steer layer 2: the model has layers 0 to 1"));
    let steered = model.steering(0, ("The", "The cat sat."), 1.0).unwrap();
    assert_eq!(steered.notices.len(), 1, "{:?}", steered.notices);
    assert!(steered.notices[0].contains("\"The\" is one token"));
    let t5 =
        LoadedModel::load(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-t5")).unwrap();
    assert!(t5.steering(0, ("a b", "c d"), 1.0).unwrap_err().to_string().contains("encoder–decoder"));
    // A vector of another width is refused by the pass.
    let mut steer = steered.steering;
    steer.vector.pop();
    let iv = Interventions { steer: Some(steer), ..Interventions::default() };
    let e = model.run_with("The cat", None, &iv).unwrap_err().to_string();
    assert!(e.contains("the steering vector has"), "{e}");
}
