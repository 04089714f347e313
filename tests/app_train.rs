//! The training lab in the app, driven headless with `egui_kittest`: open it from the playground,
//! Train, watch the views follow the network, Pause, scrub back through the checkpoints, Save, and
//! Close back to the model it replaced.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // the exported numbers equal the run's, bit for bit

use std::path::PathBuf;
use std::time::{Duration, Instant};

use attnviz::app::lab::LabState;
use attnviz::app::{AttnvizApp, Startup};
use attnviz::model::LoadedModel;
use attnviz::train::{TaskKind, TrainConfig};
use egui::Key;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;

fn tiny() -> PathBuf {
    common::root().join("tests/fixtures/models/tiny-bert")
}

fn harness() -> Harness<'static, AttnvizApp> {
    let (work_dir, home) = common::sandbox();
    let startup = Startup {
        model_dir: Some(tiny()),
        text: Some("the cat sat".into()),
        hf_cache: Some(tiny().join("no-hf-cache-here")),
        work_dir: Some(work_dir),
        home: Some(home),
        ..Startup::default()
    };
    Harness::builder()
        .with_size(egui::vec2(1360.0, 1700.0)) // tall: the lab's panel shows whole, unscrolled
        .with_step_dt(1.0 / 60.0)
        .build_eframe(move |cc| AttnvizApp::with_storage(&cc.egui_ctx, None, startup))
}

fn wait_until(h: &mut Harness<'static, AttnvizApp>, what: &str, cond: impl Fn(&AttnvizApp) -> bool) {
    let start = Instant::now();
    while !cond(h.state()) {
        assert!(start.elapsed() < Duration::from_secs(120), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
        h.step();
    }
    h.step();
}

/// The settings a student would have typed for a small induction run of `steps` (quick in a debug
/// build).
fn small_run(steps: usize) -> TrainConfig {
    TrainConfig {
        layers: 1,
        heads: 2,
        d_model: 16,
        vocab: 12,
        context: 16,
        batch: 8,
        steps,
        eval_every: 10,
        checkpoint_every: 10,
        ..TrainConfig::for_task(TaskKind::Induction)
    }
}

/// The app after a small induction run of `steps` trained from the lab's panel to its end.
fn trained_to_the_end(steps: usize) -> Harness<'static, AttnvizApp> {
    let mut h = harness();
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.state_mut().settings.train = small_run(steps);
    h.get_by_label("Playground").click();
    h.run_steps(2);
    h.get_by_label("Train a transformer…").click();
    h.run_steps(2);
    h.get_by_label("▶ Train").click();
    wait_until(&mut h, "the end of the run", |a| {
        a.features.lab.lab.as_ref().is_some_and(|l| l.state == LabState::Finished)
    });
    h
}

fn lab_step(a: &AttnvizApp) -> usize {
    a.features.lab.lab.as_ref().map_or(0, |l| l.step)
}

#[test]
fn train_pause_scrub_save_and_close_from_the_panel() {
    let mut h = harness();
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.state_mut().settings.train = small_run(400);
    h.get_by_label("Playground").click();
    h.run_steps(2);
    h.get_by_label("Train a transformer…").click();
    h.run_steps(2);
    assert!(h.state().features.lab.open);
    h.get_by_label("▶ Train").click();
    wait_until(&mut h, "an evaluated, installed network", |a| {
        lab_step(a) >= 20 && a.session.model.as_ref().is_some_and(|m| m.name.starts_with("trained induction"))
    });
    // Every view shows the network being trained, on the task's probe.
    let probe = attnviz::train::Task::new(&h.state().settings.train).probe();
    assert_eq!(h.state().settings.text, probe);
    wait_until(&mut h, "the trained network's run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 16 && r.attention.heads() == 2)
    });
    let model = h.state().session.model.as_ref().unwrap();
    assert_eq!((model.family.as_str(), model.layers, model.heads), ("gpt2", 1, 2));
    // The network writes: Continue is folded under the lab, and the views keep half the window.
    h.run_steps(2);
    h.get_by_label("Continue the text (the trained network writes)");
    let views = h.get_by_label("Head view").rect().left() - 8.0;
    let lab = h.get_by_label("Training lab").rect().left() - 8.0;
    assert!(lab - views >= 1360.0 / 2.0, "the views keep half the window: {views} to {lab}");

    // Pause: the steps stop.
    h.get_by_label("Pause").click();
    h.run_steps(2);
    assert_eq!(h.state().features.lab.lab.as_ref().unwrap().state, LabState::Paused);
    std::thread::sleep(Duration::from_millis(300));
    h.run_steps(3);
    let paused_at = lab_step(h.state());
    std::thread::sleep(Duration::from_millis(400));
    h.run_steps(3);
    assert_eq!(lab_step(h.state()), paused_at, "no steps while paused");
    assert!(paused_at < 400);

    // Scrub back one checkpoint with the keyboard: the views show the network at that step.
    let lab = h.state().features.lab.lab.as_ref().unwrap();
    let kept = lab.checkpoints.clone();
    assert!(kept.len() >= 3, "{kept:?}");
    let last = *kept.last().unwrap();
    h.get_by_label(&format!("step {last}")).focus();
    h.run_steps(1);
    h.key_press(Key::ArrowLeft);
    let earlier = kept[kept.len() - 2];
    wait_until(&mut h, "the checkpoint's network", |a| {
        a.features.lab.lab.as_ref().is_some_and(|l| l.scrubbed == Some(kept.len() - 2) && l.shown_step == earlier)
            && a.session.model.as_ref().is_some_and(|m| m.name.ends_with(&format!("step {earlier}")))
    });
    h.get_by_label("Live").click();
    wait_until(&mut h, "the live network again", |a| {
        a.features.lab.lab.as_ref().is_some_and(|l| l.scrubbed.is_none())
            && a.session.model.as_ref().is_some_and(|m| m.name.ends_with(&format!("step {paused_at}")))
    });

    // Save to a typed folder: it opens as a model folder with the network's attention.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("induction-model");
    h.get_by_label("Save to").focus();
    h.run_steps(1);
    h.get_by_label("Save to").type_text(target.to_str().unwrap());
    h.run_steps(1);
    h.get_by_label("Save").click();
    wait_until(&mut h, "the save", |a| a.features.lab.lab.as_ref().is_some_and(|l| l.saved.is_some()));
    let saved = h.state().features.lab.lab.as_ref().unwrap().saved.clone().unwrap();
    assert_eq!(saved.unwrap(), target);
    let loaded = LoadedModel::load(&target).unwrap();
    let run = loaded.run(&probe, None).unwrap();
    wait_until(&mut h, "the live run", |a| !a.is_busy());
    let shown = h.state().session.run.as_ref().unwrap();
    assert_eq!(run.attention, shown.attention, "the saved folder is the network the views show");

    // Resume, then Stop: the run ends where it is; its network stays shown.
    h.get_by_label("▶ Resume").click();
    wait_until(&mut h, "more steps", |a| lab_step(a) >= paused_at + 30);
    h.get_by_label("Stop").click();
    wait_until(&mut h, "the stop", |a| a.features.lab.lab.as_ref().is_some_and(|l| l.state == LabState::Stopped));
    let lab = h.state().features.lab.lab.as_ref().unwrap();
    let stopped_at = lab.step;
    assert!(stopped_at < 400);
    assert_eq!(lab.losses.len(), stopped_at, "one loss per step");
    assert_eq!(lab.evaluations.last().unwrap().step, stopped_at);
    wait_until(&mut h, "the stopped network", |a| {
        a.session.model.as_ref().is_some_and(|m| m.name.ends_with(&format!("step {stopped_at}")))
    });
    let clock = h.state().features.lab.lab.as_ref().unwrap().elapsed();
    std::thread::sleep(Duration::from_millis(200));
    h.run_steps(3);
    assert_eq!(lab_step(h.state()), stopped_at);
    assert_eq!(h.state().features.lab.lab.as_ref().unwrap().elapsed(), clock, "the clock stopped with the run");

    // Close: back to the model and the text the lab replaced; the run is kept.
    h.get_by_label("Close").click();
    let back = |a: &attnviz::app::AttnvizApp| {
        a.session.model.as_ref().is_some_and(|m| m.name == "tiny-bert") && a.session.run.is_some() && !a.is_busy()
    };
    wait_until(&mut h, "the previous model", back);
    assert_eq!(h.state().settings.text, "the cat sat");
    assert!(h.state().features.lab.lab.is_some() && !h.state().features.lab.open, "the run is kept to reopen");

    // Reopened: the kept network and its probe are shown again, and it can still be saved.
    h.get_by_label("Playground").click();
    h.run_steps(2);
    h.get_by_label("Train a transformer…").click();
    wait_until(&mut h, "the kept network", |a| {
        a.session.model.as_ref().is_some_and(|m| m.name.ends_with(&format!("step {stopped_at}")))
            && a.session.run.is_some()
            && !a.is_busy()
    });
    assert_eq!(h.state().settings.text, probe);
    assert!(h.state().features.lab.open);
    assert!(
        h.query_by(|n| n.label().as_deref() == Some("Save") && !n.is_disabled()).is_some(),
        "Save is offered for the kept run"
    );

    // Discard: the run is gone, back to the model the lab replaced.
    h.get_by_label("Discard").click();
    wait_until(&mut h, "the previous model", back);
    assert!(h.state().features.lab.lab.is_none() && !h.state().features.lab.open);
}

#[test]
fn invalid_settings_are_explained_and_train_is_disabled() {
    let mut h = harness();
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.state_mut().settings.train = TrainConfig { heads: 3, ..TrainConfig::default() };
    h.get_by_label("Playground").click();
    h.run_steps(2);
    h.get_by_label("Train a transformer…").click();
    h.run_steps(2);
    let message = "⚠ 64 is not divisible by 3 heads (each head gets d_model / heads dimensions)";
    let shown = h.get_by_label(message).rect();
    assert!(shown.right() <= 1360.0, "the message wraps inside the window: {shown:?}");
    let panel_left = 1360.0 - attnviz::app::lab::panel::WIDTH - 20.0;
    assert!(shown.left() >= panel_left, "inside the lab's panel: {shown:?}");
    h.get_by_label("▶ Train").click();
    h.run_steps(3);
    assert!(h.state().features.lab.lab.is_none(), "nothing trains with invalid settings");
}

/// A network saved by the lab and opened as a model folder shows its task's probe (not the text
/// turned into `[UNK]`), and text outside its vocabulary gets a notice naming the words it reads.
#[test]
fn a_saved_network_opens_on_its_probe_and_names_its_vocabulary() {
    let mut h = trained_to_the_end(20);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("saved");
    h.get_by_label("Save to").focus();
    h.run_steps(1);
    h.get_by_label("Save to").type_text(target.to_str().unwrap());
    h.run_steps(1);
    h.get_by_label("Save").click();
    wait_until(&mut h, "the save", |a| a.features.lab.lab.as_ref().is_some_and(|l| l.saved.is_some()));
    h.get_by_label("Close").click();
    wait_until(&mut h, "the previous model", |a| {
        a.session.model.as_ref().is_some_and(|m| m.name == "tiny-bert") && !a.is_busy()
    });
    assert_eq!(h.state().settings.text, "the cat sat");

    // Opened as a folder: the text becomes the task's probe, every word of it known.
    h.state_mut().views.side.model_path_input = target.display().to_string();
    h.run_steps(1);
    h.get_by_label("Load").click();
    let probe = attnviz::train::Task::new(&h.state().settings.train).probe();
    wait_until(&mut h, "the saved network's run", |a| {
        a.session.model.as_ref().is_some_and(|m| m.dir == target)
            && a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 16)
            && !a.is_busy()
    });
    assert_eq!(h.state().settings.text, probe);
    let run = h.state().session.run.clone().unwrap();
    assert!(run.tokens.tokens.iter().all(|t| t != "[UNK]"), "{:?}", run.tokens.tokens);
    h.run_steps(2);
    let notice = |h: &Harness<'static, AttnvizApp>, text: &str| h.query_by_label_contains(text).is_some();
    assert!(!notice(&h, "outside this model's vocabulary"), "no notice while the text is the vocabulary's");

    // Text outside the vocabulary: the notice names the words the network reads.
    h.state_mut().settings.text = "the cat sat".into();
    wait_until(&mut h, "the run of the new text", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 3) && !a.is_busy()
    });
    h.run_steps(2);
    let words = attnviz::train::Task::new(&h.state().settings.train).vocab;
    let alphabet = words[..12].join(" ");
    assert_eq!(words.len(), 13, "12 syllables and [UNK]");
    let expected = format!("⚠ 3 words outside this model's vocabulary became [UNK]: it reads only {alphabet}");
    assert!(notice(&h, &expected), "the notice names the words it reads: {expected}");
}

/// The lab's plots export as every figure does: *Export plots…* opens the export dialog on them
/// (its own default name), a CSV holds the run's numbers (every step's loss, each evaluation's
/// held-out loss and scores), an SVG draws them with labelled axes, and *Copy image* copies them;
/// *Export…* on the views goes back to the view's figure.
#[test]
fn the_lab_plots_export_as_pictures_and_numbers() {
    let mut h = trained_to_the_end(40);
    assert_eq!(h.state().features.lab.lab.as_ref().unwrap().evaluations.len(), 5, "steps 0, 10, 20, 30, 40");
    h.get_by_label("Export plots…").click();
    h.run_steps(2);
    assert!(h.state().views.export.open && h.state().views.export.lab_plots);
    let home_default = h.state().views.export.path_input.clone();
    assert!(home_default.ends_with("attnviz-training-induction.png"), "{home_default}");
    h.get_by_label_contains("the training lab's plots");

    let dir = tempfile::tempdir().unwrap();
    let save = |h: &mut Harness<'static, AttnvizApp>, path: &std::path::Path| {
        if !h.state().views.export.open {
            // The dialog closes after each export.
            h.get_by_label("Export plots…").click();
            h.run_steps(2);
        }
        h.get_by_label("Export path").focus();
        h.step();
        h.key_press_modifiers(egui::Modifiers::COMMAND, Key::A);
        h.get_by_label("Export path").type_text(path.to_str().unwrap());
        h.run_steps(2);
        h.state_mut().session.status = None;
        // The export dialog's Save (the lab's own Save is disabled: no folder typed).
        h.query_by(|n| n.label().as_deref() == Some("Save") && !n.is_disabled()).unwrap().click();
        wait_until(h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
        let status = h.state().session.status.clone().unwrap();
        assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
    };
    let csv = dir.path().join("lab.csv");
    save(&mut h, &csv);
    let text = std::fs::read_to_string(&csv).unwrap();
    let lab = h.state().features.lab.lab.as_ref().unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "\"\",training loss,held-out loss (repeated half),induction score (best head),L0 H0,L0 H1"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 41, "step 0 (evaluated) and steps 1 to 40");
    let value = |s: &str| if s.is_empty() { None } else { Some(f64::from(s.parse::<f32>().unwrap())) };
    for row in &rows {
        let step: usize = row[0].parse().unwrap();
        assert_eq!(value(row[1]), lab.losses.iter().find(|p| p[0] == step as f64).map(|p| p[1]), "loss at {step}");
        let e = lab.evaluations.iter().find(|e| e.step == step);
        assert_eq!(value(row[2]), e.map(|e| f64::from(e.held_out_loss)));
        assert_eq!(value(row[3]), e.map(|e| f64::from(e.metric)));
        assert_eq!(value(row[5]), e.map(|e| f64::from(e.head_scores[1])));
    }

    let svg = dir.path().join("lab.svg");
    save(&mut h, &svg);
    let svg = std::fs::read_to_string(&svg).unwrap();
    attnviz::render::parse_svg(&svg).unwrap();
    for label in ["step", "loss (cross-entropy)", "induction score", "L0 H1", ">40<"] {
        assert!(svg.contains(label), "{label} is drawn");
    }
    h.get_by_label("Export plots…").click();
    h.run_steps(2);
    h.get_by_label("Copy image").click();
    wait_until(&mut h, "the copy", |a| a.session.status.as_ref().is_some_and(|s| s.text.starts_with("Copied")));

    // Export… on the views: the view's figure and name again.
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(!h.state().views.export.open, "Escape closes the dialog");
    // Export… wants a run shown (the trained network's, installed after the last evaluation).
    wait_until(&mut h, "the trained network's run", |a| a.session.run.is_some() && !a.is_busy());
    h.get_by_label("Export…").click();
    h.run_steps(2);
    assert!(h.state().views.export.open, "{:?}", h.state().session.status);
    assert!(!h.state().views.export.lab_plots);
    assert!(h.state().views.export.path_input.ends_with("attnviz-head-view-layer0.png"));
}

/// One induction score on one screen: after a run, the head-roles view of the trained network on
/// the lab's probe shows, for every head, the score the lab's curve ended on.
#[test]
fn the_labs_induction_curve_and_the_head_roles_view_show_one_score() {
    let mut h = trained_to_the_end(20);
    let probe = attnviz::train::Task::new(&h.state().settings.train).probe();
    assert_eq!(h.state().settings.text, probe);
    wait_until(&mut h, "the trained network's run on its probe", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 16)
    });
    h.get_by_label("Head statistics").click();
    h.run_steps(2);
    h.get_by_label("Induction").click();
    wait_until(&mut h, "the head roles", |a| a.session.derived.roles(a.session.view_id).is_some_and(Result::is_ok));
    let s = &h.state().session;
    let shown = s.derived.roles(s.view_id).unwrap().clone().unwrap();
    let lab = h.state().features.lab.lab.as_ref().unwrap();
    let last = lab.evaluations.last().unwrap();
    assert_eq!(last.step, 20, "the curve's last point is the network shown");
    assert_eq!(shown.induction.len(), last.head_scores.len());
    for (i, (view, curve)) in shown.induction.iter().zip(&last.head_scores).enumerate() {
        assert!((view - curve).abs() < 1e-5, "head {i}: the view says {view}, the lab's curve {curve}");
    }
    let (l, hd, v) = shown.top(&shown.induction, 1)[0];
    assert!((v - last.metric).abs() < 1e-5, "the curve's best head is the view's top one");
    h.get_by_label_contains(&format!("Top induction heads: L{l} H{hd} ({v:.2})"));
}
