//! Frame times of the head view (all heads), the model view, the statistics and the rollout view at
//! 32 / 128 / 512 tokens on the embedded model, measured by stepping an `egui_kittest` harness (UI
//! code + tessellation, no GPU). For each view: the longest frame after switching to it (where
//! derived data used to be computed) and the mean of the frames after.
//! A measurement, not a pass/fail test:
//!     cargo test --release --test `frame_times` -- --ignored --nocapture
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::time::{Duration, Instant};

use attnviz::app::state::View;
use attnviz::app::{AttnvizApp, Startup};
use attnviz::cli::bench::BENCH_TEXT;
use attnviz::model::{LoadedModel, default_model_dir};
use egui_kittest::Harness;

fn wait_for_run(h: &mut Harness<'static, AttnvizApp>, tokens: usize) {
    let start = Instant::now();
    while h.state().session.run.as_ref().is_none_or(|r| r.tokens.len() != tokens) {
        assert!(start.elapsed() < Duration::from_secs(120), "no run");
        std::thread::sleep(Duration::from_millis(10));
        h.step();
    }
}

/// Mean milliseconds per frame over `frames` steps; `scroll` scrolls every frame (forces the line
/// mesh to be rebuilt, the worst case).
fn mean_frame_ms(h: &mut Harness<'static, AttnvizApp>, frames: usize, scroll: bool) -> f64 {
    h.run_steps(3);
    let start = Instant::now();
    for i in 0..frames {
        if scroll {
            let delta = if i % 2 == 0 { -40.0 } else { 40.0 };
            h.event(egui::Event::MouseWheel {
                unit: egui::MouseWheelUnit::Point,
                delta: egui::vec2(0.0, delta),
                phase: egui::TouchPhase::Move,
                modifiers: egui::Modifiers::default(),
                source: egui::MouseWheelSource::Wheel,
            });
        }
        h.step();
    }
    start.elapsed().as_secs_f64() * 1e3 / frames as f64
}

/// The longest frame among the first ones after a switch (at most 2 s of frames, until one asks for
/// no further frame), and how many frames that took.
fn switch_frame_ms(h: &mut Harness<'static, AttnvizApp>) -> (f64, usize) {
    let start = Instant::now();
    let mut longest = 0.0f64;
    let mut frames = 0;
    while start.elapsed() < Duration::from_secs(20) {
        let t = Instant::now();
        h.step();
        longest = longest.max(t.elapsed().as_secs_f64() * 1e3);
        frames += 1;
        let idle = h.output().viewport_output[&egui::ViewportId::ROOT].repaint_delay == Duration::MAX;
        if idle && frames > 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (longest, frames)
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn frame_times() {
    let model = LoadedModel::load(&default_model_dir()).unwrap();
    for n in [32usize, 128, 512] {
        // Natural text of exactly n tokens (the benchmark's sentence, repeated and cut).
        let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, n).unwrap();
        let text = tokens.tokens[1..n - 1].join(" ").replace(" ##", "");
        let mut h =
            Harness::builder().with_size(egui::vec2(1360.0, 860.0)).with_step_dt(1.0 / 60.0).build_eframe(move |cc| {
                AttnvizApp::with_storage(&cc.egui_ctx, None, Startup { text: Some(text), ..Startup::default() })
            });
        wait_for_run(&mut h, n);
        h.hover_at(egui::pos2(1300.0, 820.0)); // away from the tokens: all lines are drawn
        // The frames from the run's arrival until the head view shows its lines.
        let (first, settled) = switch_frame_ms(&mut h);
        println!("tokens={n} view=Head (run arrived) longest_frame_ms={first:.1} frames_until_settled={settled}");
        let head = mean_frame_ms(&mut h, 30, false);
        let head_scroll = mean_frame_ms(&mut h, 30, true);
        let lines = h.state().views.head.line_count;
        let candidates = h.state().views.head.candidate_count;
        println!(
            "tokens={n} head_view_ms={head:.2} head_view_scrolling_ms={head_scroll:.2} (lines drawn {lines} of {candidates} in view)"
        );
        for view in [View::Model, View::Stats, View::Rollout, View::Head] {
            h.state_mut().settings.view = view;
            let (first, settled) = switch_frame_ms(&mut h);
            let mean = mean_frame_ms(&mut h, 30, false);
            println!(
                "tokens={n} view={view:?} longest_frame_after_switch_ms={first:.1} frames_until_settled={settled} mean_frame_ms={mean:.2}"
            );
        }
    }
}

/// The same for inputs past "Record up to" on the embedded `SmolLM2` (issue 16): 2,048 and 8,192
/// tokens, pooled as the pass runs; the time until the first layer's runs are on screen, until
/// every layer is, then each view's frames — overview and window.
#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn long_input_frame_times() {
    use attnviz::analysis::long::LongView;
    let dir = attnviz::model::loader::smollm2_dir();
    let model = LoadedModel::load(&dir).unwrap();
    for n in [2048usize, 8192] {
        let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, n).unwrap();
        let text = model.tokenizer.decode(&tokens.ids);
        let startup = Startup { model_dir: Some(dir.clone()), text: Some(text), ..Startup::default() };
        let mut h = Harness::builder()
            .with_size(egui::vec2(1360.0, 860.0))
            .with_step_dt(1.0 / 60.0)
            .build_eframe(move |cc| AttnvizApp::with_storage(&cc.egui_ctx, None, startup));
        // The model loads first; the clock starts once the run is asked for.
        let start = Instant::now();
        while h.state().session.asked.requested_run_id == 0 || h.state().session.model.is_none() {
            h.step();
            std::thread::sleep(Duration::from_millis(5));
        }
        let asked = Instant::now();
        let shown = |h: &Harness<'static, AttnvizApp>| {
            h.state().session.run.as_ref().and_then(|r| r.long.as_ref().map(|l| (r.attention.layers(), l.layers_total)))
        };
        while shown(&h).is_none() {
            assert!(start.elapsed() < Duration::from_secs(600), "no run");
            h.step();
            std::thread::sleep(Duration::from_millis(5));
        }
        let first = asked.elapsed().as_secs_f64();
        while shown(&h).is_some_and(|(done, total)| done < total) {
            h.step();
            std::thread::sleep(Duration::from_millis(20));
        }
        let all = asked.elapsed().as_secs_f64();
        let total = h.state().session.run.as_ref().unwrap().long.as_ref().unwrap().total;
        println!("tokens={total} first_layer_on_screen_s={first:.2} all_layers_s={all:.2}");
        h.hover_at(egui::pos2(1300.0, 820.0));
        for long in [LongView::Overview, LongView::Window] {
            h.state_mut().settings.long_view = long;
            for view in [View::Head, View::Model, View::Heatmap, View::Stats, View::Rollout] {
                h.state_mut().settings.view = view;
                let (first, settled) = switch_frame_ms(&mut h);
                let mean = mean_frame_ms(&mut h, 30, false);
                println!(
                    "tokens={total} {long:?} view={view:?} longest_frame_after_switch_ms={first:.1} frames_until_settled={settled} mean_frame_ms={mean:.2}"
                );
            }
        }
    }
}

/// The readout views on the embedded `SmolLM2` at 64 and 512 tokens: the time until the selected
/// position's lens column and the whole lens grid are on screen (computed on the worker thread),
/// the frames while it computes and after, and whether the view is idle once done.
#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn readout_frame_times() {
    let dir = attnviz::model::loader::smollm2_dir();
    let model = LoadedModel::load(&dir).unwrap();
    for n in [64usize, 512] {
        let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, n).unwrap();
        let text = model.tokenizer.decode(&tokens.ids);
        let startup = Startup { model_dir: Some(dir.clone()), text: Some(text), ..Startup::default() };
        let mut h = Harness::builder()
            .with_size(egui::vec2(1360.0, 860.0))
            .with_step_dt(1.0 / 60.0)
            .build_eframe(move |cc| AttnvizApp::with_storage(&cc.egui_ctx, None, startup));
        let start = Instant::now();
        while h.state().session.run.is_none() || h.state().is_busy() {
            assert!(start.elapsed() < Duration::from_secs(300), "no run");
            h.step();
            std::thread::sleep(Duration::from_millis(5));
        }
        let shown = h.state().session.run.as_ref().unwrap().tokens.len();
        h.hover_at(egui::pos2(1300.0, 850.0));
        h.state_mut().settings.view = View::Lens;
        let asked = Instant::now();
        let (mut column_s, mut busy_frames, mut busy_ms) = (None, 0usize, 0.0f64);
        while !h.state().features.lens.state.grid_done() {
            assert!(asked.elapsed() < Duration::from_secs(900), "no lens");
            let t = Instant::now();
            h.step();
            busy_ms += t.elapsed().as_secs_f64() * 1e3;
            busy_frames += 1;
            if column_s.is_none() && h.state().features.lens.state.streams > 0 {
                column_s = Some(asked.elapsed().as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let grid_s = asked.elapsed().as_secs_f64();
        let (first, settled) = switch_frame_ms(&mut h);
        let mean = mean_frame_ms(&mut h, 30, false);
        let scrolling = mean_frame_ms(&mut h, 30, true);
        let idle = h.output().viewport_output[&egui::ViewportId::ROOT].repaint_delay == Duration::MAX;
        println!(
            "tokens={shown} view=Lens column_on_screen_s={:.2} grid_on_screen_s={grid_s:.2} mean_frame_while_computing_ms={:.2} \
             longest_frame_after_ms={first:.1} frames_until_settled={settled} mean_frame_ms={mean:.2} scrolling_ms={scrolling:.2} idle={idle}",
            column_s.unwrap_or(f64::NAN),
            busy_ms / busy_frames.max(1) as f64
        );
        // The other readout views: the time until their data is on screen, then their frames.
        for (view, role) in [(View::Attribution, None), (View::Stats, Some(2)), (View::Graph, None)] {
            h.state_mut().settings.view = view;
            h.state_mut().settings.stats_role = role;
            let asked = Instant::now();
            let (mut frames, mut busy_ms) = (0usize, 0.0f64);
            h.run_steps(2);
            while h.state().is_busy() {
                assert!(asked.elapsed() < Duration::from_secs(900), "no {view:?}");
                let t = Instant::now();
                h.step();
                busy_ms += t.elapsed().as_secs_f64() * 1e3;
                frames += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            let ready_s = asked.elapsed().as_secs_f64();
            let (first, settled) = switch_frame_ms(&mut h);
            let mean = mean_frame_ms(&mut h, 30, false);
            let idle = h.output().viewport_output[&egui::ViewportId::ROOT].repaint_delay == Duration::MAX;
            println!(
                "tokens={shown} view={view:?} on_screen_s={ready_s:.2} mean_frame_while_computing_ms={:.2} \
                 longest_frame_after_ms={first:.1} frames_until_settled={settled} mean_frame_ms={mean:.2} idle={idle}",
                busy_ms / frames.max(1) as f64
            );
        }
    }
}
