//! The training lab: the network trained is the network shown (its forward pass equals the
//! engine's on the same weights), its gradients are right, a seeded run repeats, a diverging run
//! stops with its last good checkpoint, and a saved folder loads back as the same model.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use attnviz::model::playground::PeKind;
use attnviz::model::{Capture, Interventions, LoadedModel, NormPlacement};
use attnviz::train::{Net, Pooling, Targets, TaskKind, TrainConfig, TrainError, Trainer};
use candle_core::DType;

mod common;

fn small(task: TaskKind) -> TrainConfig {
    TrainConfig {
        layers: 2,
        heads: 2,
        d_model: 16,
        batch: 8,
        steps: 20,
        eval_every: 10,
        checkpoint_every: 10,
        ..TrainConfig::for_task(task)
    }
}

/// The variants the tests cover: every task, both norms, both poolings, every positional encoding.
fn variants() -> Vec<TrainConfig> {
    let induction = TrainConfig { vocab: 12, context: 16, ..small(TaskKind::Induction) };
    vec![
        induction.clone(),
        TrainConfig { mlp: 24, pe: PeKind::Interleaved, ..induction.clone() },
        TrainConfig { pe: PeKind::Concatenated, pe_base: 100.0, ..induction },
        TrainConfig { mlp: 24, ..small(TaskKind::Sort) },
        TrainConfig { mlp: 24, pe: PeKind::None, ..small(TaskKind::Reverse) },
        TrainConfig { vocab: 7, mlp: 24, batch: 8, ..small(TaskKind::ModAdd) },
        TrainConfig { mlp: 24, ..small(TaskKind::Sentiment) },
        TrainConfig { mlp: 24, pooling: Pooling::Cls, pe: PeKind::Learned, ..small(TaskKind::Sentiment) },
        TrainConfig {
            mlp: 0,
            pooling: Pooling::Cls,
            pe: PeKind::Interleaved,
            norm: NormPlacement::Pre,
            ..small(TaskKind::Sentiment)
        },
    ]
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// After some training (weights away from their start), the lab's pass over the probe and the
/// engine's pass over the model the lab hands the views agree: tokens, every head's attention,
/// the last hidden state and the decoder's logits, to 1e-5.
#[test]
fn the_trained_network_is_the_network_the_views_show() {
    for cfg in variants() {
        let mut t = Trainer::new(&cfg).unwrap();
        for _ in 0..cfg.steps {
            t.step().unwrap();
        }
        let model = t.model().unwrap();
        let probe = t.task.probe();
        let run = model.run(&probe, None).unwrap();
        let ids = run.tokens.ids.clone();
        let words: Vec<String> = ids.iter().map(|&i| t.task.vocab[i as usize].clone()).collect();
        let spelled = probe.split(' ').map(String::from);
        let expected: Vec<String> = if cfg.pooling == Pooling::Cls && cfg.task.is_classifier() {
            std::iter::once("[CLS]".into()).chain(spelled).collect()
        } else {
            spelled.collect()
        };
        assert_eq!(words, expected, "{}: the probe tokenizes back to its words", cfg.describe());
        let n = ids.len();
        let out = t.net.forward(&ids, 1, n, Some(&[n]), true).unwrap();
        let engine = model.net.forward(&ids, &vec![0; n], Capture::Attention, &Interventions::default()).unwrap();
        let ours: Vec<f32> =
            out.attention.iter().flat_map(|a| a.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect();
        let d = max_diff(&ours, &engine.probs);
        assert!(d < 1e-5, "{}: attention differs by {d}", cfg.describe());
        let hidden: Vec<f32> = out.hidden.flatten_all().unwrap().to_vec1().unwrap();
        let d = max_diff(&hidden, &engine.last_hidden);
        assert!(d < 1e-4, "{}: last hidden state differs by {d}", cfg.describe());
        if !cfg.task.is_classifier() {
            let logits: Vec<f32> = out.logits.flatten_all().unwrap().to_vec1().unwrap();
            let v = t.net.vocab;
            for i in 0..n {
                let row = model.net.logits(&engine.last_hidden[i * cfg.d_model..(i + 1) * cfg.d_model]).unwrap();
                let d = max_diff(&logits[i * v..(i + 1) * v], &row);
                assert!(d < 1e-4, "{}: logits at {i} differ by {d}", cfg.describe());
            }
        }
    }
}

/// Every parameter's gradient against central differences of the loss, in f64, on tiny networks
/// of every kind (embeddings, learned positions, norms, fused q/k/v, output, MLP, head).
#[test]
fn gradients_match_finite_differences() {
    for cfg in variants() {
        let cfg = TrainConfig { d_model: 8, mlp: cfg.mlp.min(6), ..cfg };
        let net = Net::new(&cfg, DType::F64).unwrap();
        let mut rng = attnviz::train::Rng::new(5, 5);
        let b = attnviz::train::Task::new(&cfg).batch(&mut rng, 3);
        let lengths = match &b.targets {
            Targets::Labels { lengths, .. } => Some(lengths.clone()),
            Targets::Next { .. } => None,
        };
        let loss_of = |net: &Net| {
            let out = net.forward(&b.ids, b.rows, b.len, lengths.as_deref(), false).unwrap();
            net.loss(&out, &b.ids, b.rows, b.len, &b.targets).unwrap()
        };
        let grads = loss_of(&net).backward().unwrap();
        let mut checked = 0;
        for (name, var) in net.named() {
            let g: Vec<f64> = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            // A spread of entries of every parameter (all of the small ones).
            let stride = (base.len() / 12).max(1);
            for i in (0..base.len()).step_by(stride) {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[i] += delta;
                    var.set(
                        &candle_core::Tensor::from_vec(v, var.as_tensor().shape(), &candle_core::Device::Cpu).unwrap(),
                    )
                    .unwrap();
                    let l = loss_of(&net).to_scalar::<f64>().unwrap();
                    var.set(
                        &candle_core::Tensor::from_vec(
                            base.clone(),
                            var.as_tensor().shape(),
                            &candle_core::Device::Cpu,
                        )
                        .unwrap(),
                    )
                    .unwrap();
                    l
                };
                let numeric = (at(1e-5) - at(-1e-5)) / 2e-5;
                let tolerance = 1e-6 + 1e-4 * numeric.abs();
                assert!(
                    (numeric - g[i]).abs() < tolerance,
                    "{}: d loss / d {name}[{i}] = {} by autograd, {numeric} numerically",
                    cfg.describe(),
                    g[i]
                );
                checked += 1;
            }
        }
        assert!(checked > 50, "{checked}");

        // The step's chunked gradients (a batch of 11 in 8 uneven chunks) add up to the whole
        // batch's, loss and every parameter.
        let b = attnviz::train::Task::new(&cfg).batch(&mut rng, 11);
        let lengths = match &b.targets {
            Targets::Labels { lengths, .. } => Some(lengths.clone()),
            Targets::Next { .. } => None,
        };
        let out = net.forward(&b.ids, b.rows, b.len, lengths.as_deref(), false).unwrap();
        let whole = net.loss(&out, &b.ids, b.rows, b.len, &b.targets).unwrap();
        let chunked = net.gradients(&b).unwrap();
        let l = whole.to_scalar::<f64>().unwrap();
        assert!((chunked.loss - l).abs() < 1e-12 * l.abs(), "{}: loss {} vs {l}", cfg.describe(), chunked.loss);
        let grads = whole.backward().unwrap();
        for (name, var) in net.named() {
            let want: Vec<f64> = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let got: Vec<f64> =
                chunked.get(var.as_tensor()).unwrap().unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let scale = want.iter().fold(1e-3, |m: f64, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-12 * scale,
                    "{}: chunked d loss / d {name}[{i}] = {g}, whole {w}",
                    cfg.describe()
                );
            }
        }
    }
}

/// A step cuts its batch into a fixed number of chunks, whatever the threads: a run on one
/// thread and on three gives the same losses and the same weights, bit for bit.
#[test]
fn a_run_is_the_same_bits_on_any_number_of_threads() {
    for cfg in [variants()[1].clone(), variants()[7].clone()] {
        let cfg = TrainConfig { batch: 13, steps: 4, ..cfg };
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let mut t = Trainer::new(&cfg).unwrap();
                for _ in 0..cfg.steps {
                    t.step().unwrap();
                }
                let weights: Vec<Vec<f32>> = t
                    .net
                    .named()
                    .iter()
                    .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
                    .collect();
                (t.losses, weights)
            })
        };
        let (one, three) = (run(1), run(3));
        assert_eq!(one.0, three.0, "{}: losses", cfg.describe());
        assert!(one.1 == three.1, "{}: weights differ", cfg.describe());
    }
}

#[test]
fn a_seeded_run_repeats_and_another_seed_differs() {
    let cfg = TrainConfig { steps: 15, ..variants()[0].clone() };
    let curve = |cfg: &TrainConfig| {
        let mut t = Trainer::new(cfg).unwrap();
        (0..cfg.steps).map(|_| t.step().unwrap().to_bits()).collect::<Vec<u32>>()
    };
    let a = curve(&cfg);
    assert_eq!(a, curve(&cfg));
    assert_ne!(a, curve(&TrainConfig { seed: 1, ..cfg.clone() }));
    let s = TrainConfig { steps: 8, ..variants()[6].clone() };
    assert_eq!(curve(&s), curve(&s));
}

/// A learning rate that blows the weights up: the run stops with a message naming the step and the
/// learning rate, and the network is back at its last good (finite) checkpoint.
#[test]
fn a_diverging_run_stops_and_keeps_its_last_good_checkpoint() {
    let cfg = TrainConfig { lr: 1e30, steps: 40, checkpoint_every: 1, ..variants()[0].clone() };
    let mut t = Trainer::new(&cfg).unwrap();
    let before: Vec<Vec<f32>> =
        t.net.named().iter().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()).collect();
    let err = loop {
        match t.step() {
            Ok(_) => assert!(t.step < cfg.steps, "no divergence with lr 1e30"),
            Err(e) => break e,
        }
    };
    let TrainError::Diverged { kept, restored, .. } = &err else { panic!("{err}") };
    assert!(restored);
    let message = err.to_string();
    assert!(message.contains("diverged") && message.contains("1000000000000000000000000000000"), "{message}");
    let after: Vec<Vec<f32>> =
        t.net.named().iter().map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()).collect();
    assert!(after.iter().flatten().all(|v| v.is_finite()));
    if *kept == 0 {
        assert_eq!(before, after);
    }
    let kept_step = t.checkpoints.list.last().unwrap().step;
    assert_eq!(kept_step, *kept);
    // The views still get a model: the good one.
    t.model().unwrap();
}

#[test]
fn bad_settings_name_their_field() {
    let err = |cfg: TrainConfig| Trainer::new(&cfg).unwrap_err().to_string();
    let base = TrainConfig::default();
    assert!(err(TrainConfig { heads: 3, ..base.clone() }).starts_with("d_model"));
    assert!(err(TrainConfig { lr: f64::NAN, ..base.clone() }).starts_with("lr"));
    assert!(err(TrainConfig { layers: 0, ..base.clone() }).starts_with("layers"));
    assert!(err(TrainConfig { batch: 0, ..base.clone() }).starts_with("batch"));
    assert!(err(TrainConfig { vocab: 11, ..TrainConfig::for_task(TaskKind::Sort) }).starts_with("vocab"));
    assert!(err(TrainConfig { mlp: 0, ..TrainConfig::for_task(TaskKind::Sentiment) }).starts_with("mlp"));
    assert!(err(TrainConfig { d_model: 1024, layers: 12, mlp: 8192, ..base }).starts_with("size"));
}

/// Saved and loaded back through the folder loader: the same model, bit for bit; saving over a
/// folder replaces it whole; an unwritable place is an error that leaves nothing behind.
/// A trainer of `cfg` after `steps` steps, saved to `dir`.
fn trained_and_saved(cfg: &TrainConfig, steps: usize, dir: &std::path::Path) -> Trainer {
    let mut t = Trainer::new(cfg).unwrap();
    for _ in 0..steps {
        t.step().unwrap();
    }
    t.save(dir).unwrap();
    t
}

#[test]
fn a_saved_folder_loads_back_as_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, cfg) in variants().into_iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        let mut t = trained_and_saved(&cfg, 5, &dir);
        for file in ["config.json", "model.safetensors", "tokenizer.json", "training.json"] {
            assert!(dir.join(file).is_file(), "{file}");
        }
        let loaded = LoadedModel::load(&dir).unwrap();
        let shown = t.model().unwrap();
        let probe = t.task.probe();
        let (a, b) = (loaded.run(&probe, None).unwrap(), shown.run(&probe, None).unwrap());
        assert_eq!(a.tokens.ids, b.tokens.ids);
        assert_eq!(a.attention, b.attention, "{}", cfg.describe());
        assert_eq!(a.last_hidden, b.last_hidden);
        // Saving again replaces the folder.
        t.step().unwrap();
        t.save(&dir).unwrap();
        let training: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("training.json")).unwrap()).unwrap();
        assert_eq!(training["step"], 6);
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), variants().len(), "no staging folders left: {left:?}");
    // A folder of other files is never replaced (only an empty one or an earlier save).
    let foreign = tmp.path().join("documents");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.tex"), b"mine").unwrap();
    let t = Trainer::new(&variants()[0]).unwrap();
    let err = t.save(&foreign).unwrap_err().to_string();
    assert!(err.contains("documents") && err.contains("other files"), "{err}");
    assert_eq!(std::fs::read(foreign.join("thesis.tex")).unwrap(), b"mine");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    t.save(&empty).unwrap();
    assert!(empty.join("model.safetensors").is_file());
    std::fs::remove_dir_all(&foreign).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
    // A file where the folder should be.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"keep me").unwrap();
    let t = Trainer::new(&variants()[0]).unwrap();
    let err = t.save(&file).unwrap_err().to_string();
    assert!(err.contains("a-file") && err.contains("not a folder"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

/// The default induction run (the `PyTorch` peer's settings) forms an induction head: the best
/// head's score on the probe of repeated random tokens passes 0.5 (it starts near 1/64).
#[test]
fn the_default_induction_run_forms_an_induction_head() {
    let cfg = TrainConfig::default();
    let mut t = Trainer::new(&cfg).unwrap();
    let start = t.evaluate().unwrap();
    assert!(start.metric < 0.1, "{}", start.metric);
    let formed = loop {
        t.step().unwrap();
        if t.step.is_multiple_of(50) {
            let e = t.evaluate().unwrap();
            if e.metric >= 0.5 {
                break Some(e);
            }
        }
        if t.finished() {
            break None;
        }
    };
    let e = formed.expect("no induction head within the default 1,500 steps");
    eprintln!("induction head formed by step {} (score {:.3})", e.step, e.metric);
    assert!(e.held_out_loss < start.held_out_loss - 1.0, "the repeated half became predictable");

    // One induction score: the curve's value of every head is the head-roles view's (and `attnviz
    // heads`') score of that head on the probe the views show.
    let probe = attnviz::train::Task::new(&cfg).probe();
    let run = t.model().unwrap().run(&probe, None).unwrap();
    let ids: Vec<u32> = run.tokens.ids.clone();
    assert_eq!(ids.len(), cfg.context, "the probe is one sequence of the context's length");
    let half = cfg.context / 2;
    assert_eq!(ids[..half], ids[half..], "random tokens repeated once");
    let first: std::collections::BTreeSet<u32> = ids[..half].iter().copied().collect();
    assert_eq!(first.len(), half, "no token repeats inside the first half");
    let roles = attnviz::analysis::roles::HeadScores::compute(&run.attention, &ids);
    assert_eq!(e.head_scores.len(), roles.induction.len());
    for (i, (curve, view)) in e.head_scores.iter().zip(&roles.induction).enumerate() {
        assert!((curve - view).abs() < 1e-5, "head {i}: the curve says {curve}, the head-roles view {view}");
    }
}

/// `attnviz train`: a line per evaluation (step, loss, the task's metric), the folder saved and
/// loadable; bad settings and an unwritable folder are errors that name what is wrong.
#[test]
fn the_command_line_trains_reports_and_saves() {
    let bin = env!("CARGO_BIN_EXE_attnviz");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sorter");
    let args = [
        "train",
        "--task",
        "sort",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-model",
        "16",
        "--mlp",
        "16",
        "--context",
        "7",
        "--batch",
        "8",
        "--steps",
        "30",
        "--eval",
        "10",
        "--seed",
        "3",
        "--plots",
    ];
    let (csv, pdf) = (tmp.path().join("plots.csv"), tmp.path().join("plots.pdf"));
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).arg(&csv).arg("--plots").arg(&pdf).arg("-o").arg(&out);
    let run = common::output_sandboxed(&mut cmd);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (line, step) in lines.iter().zip([10, 20, 30]) {
        assert!(
            line.starts_with(&format!("step {step} loss "))
                && line.contains(" accuracy ")
                && line.contains("ms_per_step"),
            "{line}"
        );
    }
    assert!(stdout.contains(&format!("saved {}", out.display())), "{stdout}");
    let m = LoadedModel::load(&out).unwrap();
    let run = m.run("3 1 4 = 1 3 4", None).unwrap();
    assert_eq!(run.tokens.ids, [3, 1, 4, 10, 1, 3, 4]);
    let training: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("training.json")).unwrap()).unwrap();
    assert_eq!(training["config"]["task"], "Sort");
    assert_eq!(training["evaluations"].as_array().unwrap().len(), 3);
    // The plots: a PDF, and the numbers, whose evaluations are the saved folder's.
    assert!(std::fs::read(&pdf).unwrap().starts_with(b"%PDF-1."));
    let (header, rows) = read_csv(&std::fs::read_to_string(&csv).unwrap());
    assert_eq!(header, ["training loss", "held-out loss", "held-out accuracy"]);
    assert_eq!(rows.len(), 30, "one row per step");
    for e in training["evaluations"].as_array().unwrap() {
        let step = e["step"].as_u64().unwrap().to_string();
        let (_, cells) = rows.iter().find(|(label, _)| *label == step).unwrap();
        for (cell, key) in cells[1..].iter().zip(["held_out_loss", "metric"]) {
            assert_eq!(cell.parse::<f32>().unwrap(), e[key].as_f64().unwrap() as f32, "{key} at {step}");
        }
    }
    let refused = common::output_sandboxed(std::process::Command::new(bin).args(["train", "--plots", "plots.txt"]));
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--plots plots.txt: end the file in .png"), "{err}");

    let bad = common::output_sandboxed(std::process::Command::new(bin).args(["train", "--heads", "3"]));
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("d_model") && err.contains("divisible"), "{err}");

    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let target = blocker.join("model");
    let unwritable = common::output_sandboxed(
        std::process::Command::new(bin).args(["train", "--steps", "2", "--eval", "1", "-o"]).arg(&target),
    );
    assert!(!unwritable.status.success());
    let err = String::from_utf8_lossy(&unwritable.stderr);
    assert!(err.contains("cannot save"), "{err}");
    assert_eq!(std::fs::read(&blocker).unwrap(), b"x");
}

/// A saved folder read back into the lab ([`attnviz::train::load`], the inverse of the export's
/// names and layouts) is the same network: every parameter bit for bit, for every variant.
#[test]
fn a_saved_folder_loads_back_into_the_lab() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, cfg) in variants().into_iter().enumerate() {
        let dir = tmp.path().join(format!("m{i}"));
        let t = trained_and_saved(&cfg, 3, &dir);
        let net = attnviz::train::load(&dir).unwrap();
        assert_eq!(net.cfg, cfg);
        let (ours, back) = (t.net.named(), net.named());
        assert_eq!(ours.len(), back.len());
        for ((name, a), (_, b)) in ours.iter().zip(&back) {
            let (a, b): (Vec<f32>, Vec<f32>) = (
                a.as_tensor().flatten_all().unwrap().to_vec1().unwrap(),
                b.as_tensor().flatten_all().unwrap().to_vec1().unwrap(),
            );
            assert_eq!(a, b, "{}: {name}", cfg.describe());
        }
    }
    let err = attnviz::train::load(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("training.json"), "{err}");
}

/// transformers' outputs on the committed trained folders (`tests/fixtures/make_train_reference.py`).
#[derive(serde::Deserialize)]
struct TransformersReference {
    ids: Vec<u32>,
    logits: Option<Vec<Vec<f32>>>,
    pooled_logits: Option<Vec<f32>>,
}

/// The committed folders, read back into the lab, give transformers' outputs: the classifier's
/// pooled logits (`BertModel`'s `[CLS]` vector through the `classifier` layer, computed in Python) and
/// the decoders' logits at every position (`GPT2LMHeadModel`), to 1e-5.
#[test]
fn the_lab_reads_its_committed_folders_as_transformers_does() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for name in ["sentiment", "induction", "sort"] {
        let net = attnviz::train::load(&root.join(format!("models/tiny-trained-{name}"))).unwrap();
        let r: TransformersReference =
            serde_json::from_slice(&std::fs::read(root.join(format!("reference/trained_{name}.json"))).unwrap())
                .unwrap();
        let n = r.ids.len();
        let out = net.forward(&r.ids, 1, n, Some(&[n]), false).unwrap();
        let ours: Vec<f32> = out.logits.flatten_all().unwrap().to_vec1().unwrap();
        let want: Vec<f32> = match (r.pooled_logits, r.logits) {
            (Some(pooled), None) => pooled,
            (None, Some(rows)) => rows.concat(),
            _ => panic!("{name}: a classifier's reference has pooled logits, a decoder's logits"),
        };
        let d = max_diff(&ours, &want);
        assert!(d < 1e-5, "{name}: logits differ from transformers' by {d}");
        if name == "sentiment" {
            assert_eq!(net.cfg.pooling, Pooling::Cls);
            assert!((want[1] - want[0]).abs() > 0.5, "the trained classifier takes a side: {want:?}");
        }
    }
}

/// `attnviz bench --mode train` prints the documented line (the step's median and minimum, the
/// matrix products' rate, the last loss — a number near ln 64 after a dozen steps) and refuses zero
/// steps with one line.
#[test]
fn bench_train_prints_the_documented_line() {
    let run = |steps: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_attnviz"))
            .args(["bench", "--mode", "train", "--steps", steps])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = run("3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().next().unwrap();
    assert!(
        line.starts_with("steps=3 median_ms=") && line.contains(" min_ms=") && line.contains(" mode=train "),
        "{line}"
    );
    let field = |name: &str| -> f64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            .parse()
            .unwrap()
    };
    assert!(field("gflop_per_s=") > 0.0);
    assert!((field("loss=") - 64f64.ln()).abs() < 0.2, "{line}");
    let out = run("0");
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--steps") && !err.contains("panicked"), "{err}");
}

/// Reads a CSV written by the export: its header and its rows as (label, cells).
fn read_csv(text: &str) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let mut lines = text.lines();
    let header = lines.next().unwrap().split(',').skip(1).map(String::from).collect();
    let rows = lines
        .map(|l| {
            let mut cells = l.split(',').map(String::from);
            (cells.next().unwrap(), cells.collect())
        })
        .collect();
    (header, rows)
}

/// The lab's plots are written as PNG, SVG and PDF (each decodes) and as CSV, whose numbers are
/// the run's history: every step's loss, and at each evaluation the held-out loss, the best
/// head's score and every head's score, bit for bit.
#[test]
fn the_lab_plots_are_exported_as_pictures_and_as_the_runs_numbers() {
    let cfg = TrainConfig { vocab: 12, context: 16, steps: 30, ..small(TaskKind::Induction) };
    let mut t = Trainer::new(&cfg).unwrap();
    t.evaluate().unwrap();
    while !t.finished() {
        t.step().unwrap();
        if t.step.is_multiple_of(cfg.eval_every) {
            t.evaluate().unwrap();
        }
    }
    let losses = attnviz::app::lab::figure::steps_and_losses(&t.losses);
    let figure = attnviz::app::lab::figure::figure(&cfg, &losses, &t.evaluations);
    let dir = tempfile::tempdir().unwrap();
    let style = attnviz::export::Style::default();
    for ext in ["png", "svg", "pdf", "csv"] {
        let path = dir.path().join(format!("plots.{ext}"));
        attnviz::export::export_file(None, &figure, style, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        match ext {
            "png" => {
                let img = image::load_from_memory(&bytes).unwrap();
                assert!(img.width() > 500 && img.height() > 3 * 220, "three charts: {}×{}", img.width(), img.height());
            }
            "svg" => {
                let svg = String::from_utf8(bytes).unwrap();
                attnviz::render::parse_svg(&svg).unwrap();
                for label in ["step", "loss (cross-entropy)", "induction score", "training loss", "L1 H1", ">30<"] {
                    assert!(svg.contains(label), "{label} is drawn");
                }
            }
            "pdf" => assert!(bytes.starts_with(b"%PDF-1.") && bytes.len() > 1000),
            _ => {
                let (header, rows) = read_csv(&String::from_utf8(bytes).unwrap());
                let heads = ["L0 H0", "L0 H1", "L1 H0", "L1 H1"];
                let mut want = vec!["training loss", "held-out loss (repeated half)", "induction score (best head)"];
                want.extend(heads);
                assert_eq!(header, want);
                // Step 0 (the first evaluation) and steps 1 to 30.
                assert_eq!(rows.len(), 31);
                let value = |s: &str| if s.is_empty() { None } else { Some(s.parse::<f32>().unwrap()) };
                for (label, cells) in &rows {
                    let step: usize = label.parse().unwrap();
                    assert_eq!(value(&cells[0]), step.checked_sub(1).map(|i| t.losses[i]), "loss at {step}");
                    let e = t.evaluations.iter().find(|e| e.step == step);
                    assert_eq!(value(&cells[1]), e.map(|e| e.held_out_loss), "held-out loss at {step}");
                    assert_eq!(value(&cells[2]), e.map(|e| e.metric), "score at {step}");
                    for h in 0..4 {
                        assert_eq!(value(&cells[3 + h]), e.map(|e| e.head_scores[h]), "head {h} at {step}");
                    }
                }
            }
        }
    }
}
