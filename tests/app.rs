//! The desktop app driven headless with `egui_kittest`: real clicks and typing, then assertions on
//! the app's state and on files written.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use attnviz::analysis::select::PairFilter;
use attnviz::app::state::{Settings, View};
use attnviz::app::{AttnvizApp, Startup};
use attnviz::render::Side;
use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::Rng;

/// A Hugging Face cache that does not exist: the app lists no cached models, whatever this
/// machine has downloaded (so the side panel, and its snapshots, are the same everywhere).
fn no_cache() -> PathBuf {
    tiny().join("no-hf-cache-here")
}

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bert")
}

/// The app under test, with its own temporary working directory and home (where a relative export
/// path, or an export to the default folder, lands: never in the source tree or the user's home)
/// and no Hugging Face cache unless `startup` names one.
fn new_app(ctx: &egui::Context, storage: Option<&dyn eframe::Storage>, startup: Startup) -> AttnvizApp {
    let (work_dir, home) = common::sandbox();
    let startup = Startup {
        hf_cache: startup.hf_cache.or_else(|| Some(no_cache())),
        work_dir: Some(work_dir),
        home: Some(home),
        ..startup
    };
    AttnvizApp::with_storage(ctx, storage, startup)
}

fn harness_with(startup: Startup, storage: Option<MemoryStorage>) -> Harness<'static, AttnvizApp> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 860.0))
        .with_step_dt(1.0 / 60.0)
        .build_eframe(move |cc| new_app(&cc.egui_ctx, storage.as_ref().map(|s| s as &dyn eframe::Storage), startup))
}

fn app(text: &str) -> Harness<'static, AttnvizApp> {
    let mut h = harness_with(Startup { model_dir: Some(tiny()), text: Some(text.into()), ..Startup::default() }, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    // And what the views derive from it off the UI thread (the head view's matrices and lines).
    settled(&mut h);
    h
}

/// Steps frames until `cond` holds (the worker answers asynchronously).
fn wait_until(h: &mut Harness<'static, AttnvizApp>, what: &str, cond: impl Fn(&AttnvizApp) -> bool) {
    let start = Instant::now();
    while !cond(h.state()) {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
        h.step();
    }
    h.step();
}

/// The rollout the rollout view shows for `heads`, once computed off the UI thread.
fn shown_rollout(h: &mut Harness<'static, AttnvizApp>, heads: &[usize]) -> Vec<Vec<f32>> {
    wait_until(h, "the rollout", |a| a.session.derived.rollout(a.session.view_id, heads).is_some());
    let s = &h.state().session;
    s.derived.rollout(s.view_id, heads).unwrap().to_vec()
}

/// Steps until nothing is in flight (runs, loads, data derived off the UI thread), then two more
/// frames to draw the result.
fn settled(h: &mut Harness<'static, AttnvizApp>) {
    // A click takes effect at the end of its frame and the view asks for data in the next one.
    h.run_steps(2);
    wait_until(h, "the background work", |a| !a.is_busy());
    h.run_steps(2);
}

/// Lines in the head view's picture once the picture for the current selection is drawn (it is
/// rasterized off the UI thread).
fn head_lines(h: &mut Harness<'static, AttnvizApp>) -> usize {
    h.run_steps(2);
    wait_until(h, "the head view's lines", |a| !a.views.head.lines_pending && !a.session.derived.any_pending());
    h.state().views.head.line_count
}

fn tokens(h: &Harness<'static, AttnvizApp>) -> Vec<String> {
    h.state().session.run.as_ref().map(|r| r.tokens.tokens.clone()).unwrap_or_default()
}

#[test]
fn launch_focuses_the_sentence_and_typing_reruns_the_model() {
    let mut h = app("the cat");
    assert!(h.get_by_label("Sentence A").is_focused(), "the sentence box has focus at launch");
    assert_eq!(tokens(&h), ["[CLS]", "the", "cat", "[SEP]"]);
    h.get_by_label("Sentence A").type_text(" sat");
    wait_until(&mut h, "the new run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.tokens.contains(&"sat".to_string()))
    });
    assert_eq!(h.state().settings.text, "the cat sat");
    assert_eq!(tokens(&h), ["[CLS]", "the", "cat", "sat", "[SEP]"]);
}

/// A keystroke's frame waits for the run it asked for when the last edit's run was that quick:
/// the frame that took the key draws its result (the wait is long here, for a busy test machine).
#[test]
fn a_keystroke_frame_draws_its_run_when_the_run_is_quick() {
    let startup = Startup {
        model_dir: Some(tiny_llama()),
        text: Some("the cat".into()),
        key_wait: Some(Duration::from_secs(20)),
        ..Startup::default()
    };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    for (i, key) in [" s", "a", "t"].into_iter().enumerate() {
        h.get_by_label("Sentence A").type_text(key);
        h.step();
        let s = &h.state().session;
        assert_eq!(s.asked.run_id, s.asked.requested_run_id, "key {i}: the frame that took it drew its run");
        let shown = tokens(&h).concat().replace('Ġ', " ");
        assert!(shown.ends_with(&"the cat sat"[..9 + i]), "key {i}: {shown}");
        settled(&mut h);
    }
}

/// While a keystroke's run has its lines drawn off the UI thread, the head view keeps the picture
/// of the run before when the rows and lines are where they were (rows of a fixed height): the
/// lines do not blink out at each key. A text whose rows are stretched to fill the view, and so
/// move with each token, shows an empty band meanwhile (the old picture would be misplaced).
#[test]
fn the_head_views_lines_stay_while_a_keystrokes_are_drawn() {
    let sentences = |n: usize| vec!["the cat sat on the mat."; n].join(" ");
    for (text, stays) in [(sentences(10), true), (sentences(4), false)] {
        let startup = Startup {
            model_dir: Some(tiny_llama()),
            text: Some(text),
            key_wait: Some(Duration::from_secs(20)),
            ..Startup::default()
        };
        let mut h = harness_with(startup, None);
        wait_until(&mut h, "the first run", |a| a.session.run.is_some());
        assert!(head_lines(&mut h) > 0);
        h.get_by_label("Sentence A").type_text(" x");
        h.step();
        let app = h.state();
        assert_eq!(app.session.asked.run_id, app.session.asked.requested_run_id, "the key's frame shows its run");
        assert!(app.views.head.lines_pending, "the new run's lines are drawn off the UI thread");
        assert_eq!(app.views.head.lines_stale, stays, "{} tokens", tokens(&h).len());
        head_lines(&mut h);
        assert!(!h.state().views.head.lines_stale);
    }
}

#[test]
fn layer_and_head_pickers_toggle_and_solo() {
    let mut h = app("heads and layers");
    h.get_by_label("L1").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.layer_idx, 1);
    assert_eq!(h.state().settings.heads, [true; 4]);
    h.get_by_label("H2").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [true, true, false, true]);
    // Double-click solos a head (after a pause, so it is not read as a triple click).
    h.run_steps(30);
    h.get_by_label("H3").click();
    h.step();
    h.get_by_label("H3").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [false, false, false, true]);
    h.get_by_label("All").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [true; 4]);
}

#[test]
fn pinning_a_token_keeps_its_lines_until_clicked_again_or_escape() {
    let mut h = app("pin this token");
    h.get_by_label("query 2: this").click();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, Some((Side::Query, 2)));
    // Hovering elsewhere does not change the pinned selection.
    h.get_by_label("key 1: pin").hover();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, Some((Side::Query, 2)));
    h.get_by_label("query 2: this").click();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, None);
    h.get_by_label("key 3: token").click();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, Some((Side::Key, 3)));
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, None);
}

#[test]
fn sentence_pair_and_its_filter() {
    let mut h = app("the cat sat");
    h.get_by_role_and_label(egui::accesskit::Role::CheckBox, "Sentence B").click();
    h.run_steps(2);
    assert!(h.state().settings.pair_enabled);
    // Type into sentence B (the second text box).
    let boxes = h.get_all_by_role(egui::accesskit::Role::TextInput).collect::<Vec<_>>();
    assert_eq!(boxes.len(), 3, "sentence A, sentence B, model path");
    boxes[1].focus();
    drop(boxes);
    h.step();
    h.get_all_by_role(egui::accesskit::Role::TextInput).nth(1).unwrap().type_text("it was happy");
    wait_until(&mut h, "the pair run", |a| a.session.run.as_ref().is_some_and(|r| r.tokens.is_pair()));
    let all_lines = head_lines(&mut h);
    assert!(all_lines > 0);
    h.get_by_label("A→B").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.pair_filter, PairFilter::AToB);
    let a_to_b = head_lines(&mut h);
    assert!(a_to_b > 0 && a_to_b < all_lines, "{a_to_b} of {all_lines} lines");
}

#[test]
fn views_switch_and_a_model_view_click_opens_the_heatmap() {
    let mut h = app("views switch");
    h.get_by_label("Model view").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.view, View::Model);
    settled(&mut h);
    let builds = h.state().views.model.builds;
    h.run_steps(5);
    assert_eq!(h.state().views.model.builds, builds, "textures are built once per run, not per frame");
    h.get_by_label("Layer 1 head 2").click();
    h.run_steps(3);
    let s = &h.state().settings;
    assert_eq!(s.view, View::Heatmap);
    assert_eq!(s.layer_idx, 1);
    assert_eq!(s.heads, [false, false, true, false]);
    let run = h.state().session.run.clone().unwrap();
    let cache = &h.state().views.heatmap;
    assert_eq!(cache.keep.len(), run.tokens.len());
    assert_eq!(cache.value(1, 2), run.attention.get(1, 2, 1, 2));
    h.get_by_label("Heatmap").click();
    h.get_by_label("Hide special tokens").click();
    h.run_steps(3);
    let cache = &h.state().views.heatmap;
    assert_eq!(cache.keep.len(), run.tokens.len() - 2);
    let row_sum: f32 = (0..cache.keep.len()).map(|k| cache.value(0, k)).sum();
    assert!((row_sum - 1.0).abs() < 1e-5, "rows renormalised: {row_sum}");
}

#[test]
fn export_writes_a_decodable_png_through_the_dialog() {
    let mut h = app("export me");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("head view.png");
    h.get_by_label("query 1: export").click();
    h.run_steps(2);
    h.get_by_label("Export…").click();
    h.run_steps(2);
    retype(&mut h, "Export path", path.to_str().unwrap());
    h.get_by_label("3×").click();
    h.run_steps(2);
    h.state_mut().session.status = None;
    h.get_by_label("Save").click();
    wait_until(&mut h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
    let status = h.state().session.status.clone().unwrap();
    assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
    let image = image::open(&path).unwrap();
    // The same pixels as the CLI's figure for the same settings.
    let app = h.state();
    // The app exports in its own theme (the harness runs dark).
    let dark = h.ctx.theme() == egui::Theme::Dark;
    let expected =
        attnviz::export::render_figure(app.session.run.as_deref(), &app.current_figure(), app.export_style(dark))
            .unwrap();
    assert_eq!(image.width(), expected.width());
    assert_eq!(image.height(), expected.height());
    assert!(!h.state().views.export.open, "the dialog closes after a successful export");
}

#[test]
fn the_format_picker_writes_svg_and_pdf_and_copy_puts_the_figure_on_the_clipboard() {
    let mut h = app("vector figures");
    let dir = tempfile::tempdir().unwrap();
    h.get_by_label("Export…").click();
    h.run_steps(2);
    retype(&mut h, "Export path", dir.path().join("figure.png").to_str().unwrap());
    for (format, magic) in [("SVG", &b"<?xml"[..]), ("PDF", &b"%PDF-"[..])] {
        h.get_by_label(format).click();
        h.run_steps(2);
        let typed = h.state().views.export.path_input.clone();
        assert!(typed.ends_with(&format!("figure.{}", format.to_lowercase())), "{typed}");
        h.state_mut().session.status = None;
        h.get_by_label("Save").click();
        wait_until(&mut h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
        let status = h.state().session.status.clone().unwrap();
        assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
        let bytes = std::fs::read(&typed).unwrap();
        assert!(bytes.starts_with(magic), "{format}");
        if format == "SVG" {
            let svg = String::from_utf8(bytes).unwrap();
            assert!(svg.contains(">vector</text>"), "the token is text in the SVG");
        }
        h.get_by_label("Export…").click();
        h.run_steps(2);
    }

    // Copy image: the figure the export would write, as an image command to the platform.
    let dark = h.ctx.theme() == egui::Theme::Dark;
    let app = h.state();
    let expected =
        attnviz::export::render_figure(app.session.run.as_deref(), &app.current_figure(), app.export_style(dark))
            .unwrap();
    h.state_mut().session.status = None;
    h.get_by_label("Copy image").click();
    let start = Instant::now();
    let copied = loop {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for the copy");
        std::thread::sleep(Duration::from_millis(5));
        h.step();
        let found = h.output().platform_output.commands.iter().find_map(|c| match c {
            egui::OutputCommand::CopyImage(image) => Some(image.clone()),
            _ => None,
        });
        if let Some(image) = found {
            break image;
        }
    };
    assert_eq!(copied.size, [expected.width() as usize, expected.height() as usize]);
    let [r, g, b, a] = expected.get_pixel(expected.width() / 2, 30).0;
    assert_eq!(copied[(expected.width() as usize / 2, 30)], egui::Color32::from_rgba_unmultiplied(r, g, b, a));
    assert!(h.state().session.status.as_ref().is_some_and(|s| s.text.contains("Copied")));
}

#[test]
fn the_head_view_fills_its_room_suggests_one_head_and_small_text_is_readable() {
    let mut h = app("the answer is here");
    h.run_steps(2);
    // Rows, labels and the band between the columns grow into the 1280 × 860 window (the
    // figure's own layout has 18-point rows and a 180-point band).
    let query = h.get_by_label("query 2: answer").rect();
    let key = h.get_by_label("key 2: answer").rect();
    assert!(query.height() >= 26.0, "row {query:?}");
    assert!(key.left() - query.right() >= 400.0, "band from {query:?} to {key:?}");
    // tiny-bert's four heads are all shown: the view offers the one-head habit.
    assert_eq!(h.state().settings.heads, [true; 4]);
    h.get_by_label("Show H0 alone").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [true, false, false, false]);
    assert!(h.query_by_label("Show H0 alone").is_none(), "one head: no suggestion");
    // Hints and captions (small text) are at least 11 points.
    let small = h.ctx.style_of(egui::Theme::Dark).text_styles[&egui::TextStyle::Small].size;
    assert!(small >= 11.0, "{small}");
}

#[test]
fn an_unwritable_export_path_is_reported_and_nothing_is_written() {
    let mut h = app("export fails");
    h.get_by_label("Export…").click();
    h.run_steps(2);
    h.state_mut().views.export.path_input = "/nonexistent-folder/x.png".into();
    h.run_steps(1);
    h.state_mut().session.status = None;
    h.get_by_label("Save").click();
    wait_until(&mut h, "the failed export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
    let status = h.state().session.status.clone().unwrap();
    assert!(status.is_error && status.text.contains("/nonexistent-folder/x.png"), "{status:?}");
    assert!(h.state().views.export.open, "the dialog stays open to fix the path");
}

/// Types `path` into the model box and presses Load; waits for the load to end.
/// A file name typed into the export box is taken from the app's working directory, the default
/// path is in its home folder, and after an export the default is in that export's (absolute)
/// folder. Under test both folders are temporary: the random walk once typed names into the box
/// and wrote its exports into the repository (committed at its root).
#[test]
fn a_relative_export_path_is_written_in_the_working_directory_never_in_the_source_tree() {
    let before = common::root_entries();
    let (work, home) = common::sandbox();
    let mut h = app("relative export");
    h.get_by_label("Export…").click();
    h.run_steps(2);
    let default = home.join("attnviz-head-view-layer0.png");
    assert_eq!(h.state().views.export.path_input, default.display().to_string(), "the default is in the home folder");
    let save = |h: &mut Harness<'static, AttnvizApp>| {
        h.state_mut().session.status = None;
        h.get_by_label("Save").click();
        wait_until(h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
        let status = h.state().session.status.clone().unwrap();
        assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
    };
    // A bare name without extension (a PNG), as the walk typed them (`日本語のテキスト`: no bundled
    // font draws it, and the harness refuses missing glyphs).
    let name = "attnviz relative export";
    retype(&mut h, "Export path", name);
    save(&mut h);
    let written = std::fs::read(work.join(name)).expect("the export is in the working directory");
    assert_eq!(image::guess_format(&written).unwrap(), image::ImageFormat::Png);
    assert_eq!(h.state().settings.export_dir.as_deref(), Some(work.as_path()));
    // Emptied, the box offers the default name in that folder (not a relative path: that is how the
    // walk's `attnviz-*.png` landed at the root).
    h.get_by_label("Export…").click();
    h.run_steps(2);
    h.get_by_label("Export path").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.key_press(Key::Backspace);
    h.run_steps(2);
    let default = work.join("attnviz-head-view-layer0.png");
    assert_eq!(h.state().views.export.path_input, default.display().to_string());
    save(&mut h);
    assert!(default.is_file());
    let added: Vec<_> = common::root_entries().difference(&before).cloned().collect();
    assert!(added.is_empty(), "written into the repository's root: {added:?}");
}

fn load(h: &mut Harness<'static, AttnvizApp>, path: &std::path::Path) {
    h.get_by_label("Model folder or hub id").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Model folder or hub id").type_text(path.to_str().unwrap());
    h.get_by_label("Load").click();
    h.step();
    wait_until(h, "the load to end", |a| a.session.loading.is_none());
}

/// The model still open answers a change of the text.
fn still_runs(h: &mut Harness<'static, AttnvizApp>) {
    h.get_by_label("Sentence A").focus();
    h.step();
    h.get_by_label("Sentence A").type_text(" still");
    wait_until(h, "a run with the kept model", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.tokens.contains(&"still".to_string()))
    });
}

#[test]
fn a_failed_model_load_keeps_the_previous_model() {
    let mut h = app("keep me");
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("config.json"), "{ broken").unwrap();
    load(&mut h, broken.path());
    let app = h.state();
    assert!(app.session.load_error.as_ref().unwrap().contains("config.json"));
    assert_eq!(app.session.model.as_ref().unwrap().name, "tiny-bert");
    assert!(app.session.run.is_some());
    still_runs(&mut h);
}

/// Hostile model files (issue 18): the loader's error is shown as it is and the model already
/// open stays open and running.
#[test]
fn hostile_model_files_show_the_loaders_error_and_keep_the_previous_model() {
    let mut h = app("keep me");
    // A config claiming 10⁹ layers beside the weights of two.
    let layers = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(tiny().join(f), layers.path().join(f)).unwrap();
    }
    let config = std::fs::read_to_string(tiny().join("config.json")).unwrap();
    assert!(config.contains("\"num_hidden_layers\": 2"));
    let config = config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000");
    std::fs::write(layers.path().join("config.json"), config).unwrap();
    // A GGUF file whose header claims 2⁶⁰ tensors.
    let gguf = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(tiny().join("../tiny-llama-gguf/tiny-llama.Q8_0.gguf")).unwrap();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let gguf_path = gguf.path().join("hostile.gguf");
    std::fs::write(&gguf_path, bytes).unwrap();

    for (path, needle) in [(layers.path(), "num_hidden_layers"), (gguf_path.as_path(), "tensor_count")] {
        let expected = attnviz::model::LoadedModel::load(path).unwrap_err().to_string();
        assert!(expected.contains(needle), "{expected}");
        load(&mut h, path);
        let app = h.state();
        let shown = app.session.load_error.clone().unwrap();
        assert!(shown.starts_with("Could not load ") && shown.ends_with(&expected), "the loader's error: {shown}");
        assert_eq!(app.session.model.as_ref().unwrap().name, "tiny-bert");
        assert!(app.session.run.is_some());
    }
    still_runs(&mut h);
}

/// An input past "Record up to" (1,024 tokens by default) is pooled as the pass runs: the input
/// bar says so, Overview and Window switch the shown run without running again, the window moves
/// with its start box and "Show", and what is shown is the library's pooling, bit for bit.
#[test]
fn a_long_input_is_pooled_with_a_notice_and_its_window_moves() {
    use attnviz::analysis::long::{LongView, OVERVIEW_SPANS, WINDOW_TOKENS};
    let dir = common::fixture_with_positions("tiny-llama", "max_position_embeddings", 1600);
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "slept", "."];
    let mut rng = Rng(1600);
    let text: Vec<&str> = (0..1100).map(|_| words[rng.below(words.len())]).collect();
    let text = text.join(" ");
    let model = attnviz::model::LoadedModel::load(dir.path()).unwrap();
    let encoded = model.tokenizer.encode(&text, None).unwrap();
    let n = encoded.tokens.len();
    assert!((1025..=1600).contains(&n), "{n} tokens");
    let mut h = harness_with(
        Startup { model_dir: Some(dir.path().to_path_buf()), text: Some(text), ..Startup::default() },
        None,
    );
    let done = |a: &AttnvizApp| {
        a.session
            .run
            .as_ref()
            .and_then(|r| r.long.as_ref().map(|l| (l.clone(), r.attention.layers())))
            .is_some_and(|(l, layers)| !l.is_partial(layers))
    };
    wait_until(&mut h, "the pooled run", done);
    settled(&mut h);
    h.get_by_label_contains("more than the 1024 recorded at token level");
    let run = h.state().session.run.clone().unwrap();
    let long = run.long.clone().unwrap();
    assert_eq!((long.view, long.total), (LongView::Overview, n));
    assert_eq!(run.tokens.len(), n.div_ceil(n.div_ceil(OVERVIEW_SPANS)));
    assert!(head_lines(&mut h) > 0, "the head view draws the overview");
    let said = format!("{n} tokens as {} spans of {} tokens", run.tokens.len(), n.div_ceil(OVERVIEW_SPANS));
    assert!(h.get_all_by_label_contains(&said).count() >= 2, "the title and the status bar say {said}");

    // The window: the last 256 tokens, the tokens before them as one span.
    h.get_by_label("Window").click();
    wait_until(&mut h, "the window", |a| {
        a.session.run.as_ref().is_some_and(|r| r.long.as_ref().unwrap().view == LongView::Window)
    });
    let window = h.state().session.run.clone().unwrap();
    assert_eq!(window.tokens.len(), WINDOW_TOKENS + 1);
    assert_eq!(window.long.as_ref().unwrap().window, n - WINDOW_TOKENS..n);
    assert!(
        window.tokens.tokens[0].starts_with(&format!("0–{} ", n - WINDOW_TOKENS - 1)),
        "{}",
        window.tokens.tokens[0]
    );

    // Move it to token 100: a new pass, then spans before and after it.
    retype_number(&mut h, "Window from token", "100");
    h.key_press(Key::Enter);
    h.run_steps(2);
    h.get_by_label("Show").click();
    wait_until(&mut h, "the moved window", |a| {
        a.session.run.as_ref().and_then(|r| r.long.as_ref()).is_some_and(|l| l.window.start == 100 && !l.is_partial(2))
            && a.session.run.as_ref().unwrap().attention.layers() == 2
    });
    settled(&mut h);
    let moved = h.state().session.run.clone().unwrap();
    assert_eq!(moved.tokens.len(), WINDOW_TOKENS + 2);
    let expected = model
        .run_long(&encoded.tokens, None, &attnviz::model::Interventions::default(), Some(100), &mut |_| true)
        .unwrap()
        .unwrap();
    let bits = |a: &[f32]| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(moved.attention.as_slice()), bits(expected.window.attention.as_slice()));
    assert!(h.state().session.shown_input_matches(&h.state().settings));

    // Back to the overview: no new pass.
    let requested = h.state().session.asked.requested_run_id;
    h.get_by_label("Overview").click();
    wait_until(&mut h, "the overview", |a| {
        a.session.run.as_ref().is_some_and(|r| r.long.as_ref().unwrap().view == LongView::Overview)
    });
    assert_eq!(h.state().session.asked.requested_run_id, requested);
    // The neuron view says why it has nothing to show.
    h.state_mut().settings.view = View::Neuron;
    h.run_steps(2);
    h.get_by_label_contains("which an input this long does not record");
}

/// A pasted document turns the one-line sentence box into a wrapped, scrolled box of a few lines
/// (a long single line was redrawn whole every frame) without losing the focus or the cursor.
#[test]
fn a_pasted_document_wraps_the_sentence_box_and_typing_goes_on() {
    let mut h = app("start");
    h.get_by_label("Sentence A").focus();
    h.step();
    h.key_press(Key::End);
    let pasted = " word".repeat(500);
    h.get_by_label("Sentence A").type_text(&pasted);
    h.run_steps(2);
    assert!(h.get_by_label("Sentence A").is_focused(), "the box keeps the focus as it wraps");
    h.get_by_label("Sentence A").type_text(" end");
    h.run_steps(2);
    let text = &h.state().settings.text;
    assert_eq!(text.len(), "start".len() + pasted.len() + " end".len());
    assert!(text.ends_with("word end"), "the cursor stayed at the end");
}

#[test]
fn over_long_text_is_truncated_with_a_visible_notice() {
    let mut h = app(&"long ".repeat(40));
    assert_eq!(tokens(&h).len(), 24);
    h.get_by_label_contains("truncated to 24 tokens");
    h.state_mut().settings.text.clear();
    wait_until(&mut h, "the empty run", |a| a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 2));
    h.get_by_label_contains("The sentence is empty");
}

/// eframe storage in memory, to test persistence across launches.
#[derive(Default, Clone)]
struct MemoryStorage(HashMap<String, String>);

impl eframe::Storage for MemoryStorage {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

/// Settings saved by the release before the features kept their own settings (flat keys such as
/// `lens_mode`, `dla_target`, `graph_threshold`): every field is read back, the flat keys into the
/// features' nested settings, and the next save keeps them.
#[test]
fn settings_saved_before_the_features_kept_their_own_still_load() {
    use attnviz::app::state::*;
    let saved = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/settings/saved-before-features-had-their-own.ron"),
    )
    .unwrap();
    let mut expected = Settings::default();
    let s = &mut expected;
    s.text = "The keys were on the table.".into();
    s.text_pair = "They were not.".into();
    s.pair_enabled = true;
    s.model_dir = Some(PathBuf::from("/models/smollm2"));
    s.recent_models = vec![PathBuf::from("/models/smollm2"), PathBuf::from("gpt2")];
    s.view = View::Graph;
    s.layer_idx = 3;
    s.heads = vec![true, false, true];
    s.threshold = 0.25;
    s.hide_special = true;
    s.pair_filter = PairFilter::AToB;
    s.colormap = attnviz::render::Colormap::Magma;
    s.theme = ThemeChoice::Dark;
    s.export_scale = 3;
    s.export_dir = Some(PathBuf::from("/exports"));
    s.zoom.heatmap = Some(20.0);
    s.source = Source::Playground;
    s.playground.layers = 3;
    s.attention_file = Some(PathBuf::from("/att/bert.npz"));
    s.interventions.temperature = 2.0;
    s.interventions.ablated.insert((1, 2));
    s.interventions_model = Some(PathBuf::from("/models/smollm2"));
    s.pe.d_model = 64;
    s.pe_plot_dims = vec![2, 3];
    s.pe_plot_row = 5;
    s.pe_figure = PeFigure::Dot;
    s.words = true;
    s.neuron_query = 4;
    s.stat = attnviz::analysis::Statistic::Cls;
    s.rollout = RolloutSettings { mode: RolloutMode::Flow, in_head_view: true };
    s.compare = CompareSettings {
        source: CompareSource::Model,
        text_b: "Another sentence.".into(),
        model_b: Some(PathBuf::from("/models/b")),
        mode: CompareMode::Difference,
    };
    s.target = "Die Schlüssel".into();
    s.stack = attnviz::analysis::Stack::Cross;
    s.record_tokens = 300;
    s.long_view = attnviz::analysis::long::LongView::Window;
    s.window_start = Some(10);
    s.lens = LensSettings {
        mode: LensMode::Rank,
        watch: vec![" Paris".into(), "ĠLondon".into()],
        rank_of: 1,
        position: Some(6),
    };
    s.attribution =
        AttributionSettings { position: Some(5), target: " Paris".into(), versus: " Rome".into(), head: Some((2, 1)) };
    s.stats_role = Some(2);
    s.graph = GraphSettings { position: Some(4), threshold: 0.1, head: Some((1, 0, 3)) };
    s.train.steps = 700;
    let mut storage = MemoryStorage::default();
    storage.0.insert("attnviz-settings".into(), saved);
    let ctx = egui::Context::default();
    let mut app = new_app(&ctx, Some(&storage), Startup::default());
    assert_eq!(app.settings, expected);
    // Saved again, in today's shape, and read back: the same.
    let mut again = MemoryStorage::default();
    eframe::App::save(&mut app, &mut again);
    let reopened = new_app(&ctx, Some(&again), Startup::default());
    assert_eq!(reopened.settings, expected);
}

#[test]
fn settings_persist_across_launches() {
    let mut h = app("remember me");
    h.get_by_label("L1").click();
    h.get_by_label("Heatmap").click();
    h.run_steps(2);
    h.get_by_label("H1").click();
    h.run_steps(2);
    let mut storage = MemoryStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    let saved: Settings = h.state().settings.clone();
    drop(h);
    let mut h2 = harness_with(Startup::default(), Some(storage));
    wait_until(&mut h2, "the restored run", |a| a.session.run.is_some());
    let restored = &h2.state().settings;
    assert_eq!(restored.text, "remember me");
    assert_eq!(restored.view, View::Heatmap);
    assert_eq!(restored.layer_idx, 1);
    assert_eq!(restored.heads, [true, false, true, true]);
    assert_eq!(restored.model_dir.as_deref(), Some(tiny().as_path()));
    assert_eq!(*restored, saved);
    assert_eq!(h2.state().session.model.as_ref().unwrap().name, "tiny-bert");
}

/// Panels are not filled (software GL would fill the whole window once more per frame); the
/// window is cleared to the panel colour, so it looks the same.
#[test]
fn panels_are_transparent_over_a_window_cleared_to_their_colour() {
    let h = app("clear");
    for (theme, egui_visuals) in
        [(egui::Theme::Dark, egui::Visuals::dark()), (egui::Theme::Light, egui::Visuals::light())]
    {
        let visuals = h.ctx.style_of(theme).visuals.clone();
        assert_eq!(visuals.panel_fill, egui::Color32::TRANSPARENT);
        let clear = eframe::App::clear_color(h.state(), &visuals);
        assert_eq!(clear, egui_visuals.panel_fill.to_normalized_gamma_f32());
    }
}

/// Small image snapshots (wgpu on a software adapter) where the picture is the point. Timings in
/// the status bar are masked. `UPDATE_SNAPSHOTS=1 cargo test --test app` rewrites them.
fn snapshot_app(text: &str) -> Harness<'static, AttnvizApp> {
    snapshot_app_of(text, tiny())
}

/// [`snapshot_app`] on the model in `model_dir`.
fn snapshot_app_of(text: &str, model_dir: PathBuf) -> Harness<'static, AttnvizApp> {
    let mut h = Harness::builder().with_size(egui::vec2(960.0, 640.0)).with_step_dt(1.0 / 60.0).build_eframe({
        let text = text.to_string();
        move |cc| {
            let app = new_app(
                &cc.egui_ctx,
                None,
                Startup { model_dir: Some(model_dir), text: Some(text), ..Startup::default() },
            );
            cc.egui_ctx.set_theme(egui::ThemePreference::Light);
            // The app's panels are transparent over a window cleared to the panel colour; the
            // harness clears to transparent, so paint the panels as the window shows them.
            cc.egui_ctx.all_styles_mut(|s| s.visuals.panel_fill = attnviz::app::widgets::panel_colour(&s.visuals));
            app
        }
    });
    h.state_mut().settings.theme = attnviz::app::state::ThemeChoice::Light;
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    h
}

fn mask_varying(h: &mut Harness<'static, AttnvizApp>) {
    mask_varying_of(h, &tiny());
}

/// [`mask_varying`] with the model loaded from `model_dir`.
fn mask_varying_of(h: &mut Harness<'static, AttnvizApp>, model_dir: &Path) {
    // The status bar holds timings (model ms, frame ms) whose text width varies run to run.
    let size = h.ctx.content_rect().size();
    h.mask(egui::Rect::from_min_max(egui::pos2(0.0, size.y - 28.0), egui::pos2(size.x, size.y)));
    // The model folder is an absolute path: it depends on where the repository is checked out.
    let folder = model_dir.display().to_string();
    let rects = [h.get_by_label("Model folder or hub id").rect(), h.get_by_label(&folder).rect()];
    for r in rects {
        // The full width of the side panel: the path's own width differs between checkouts.
        h.mask(egui::Rect::from_min_max(egui::pos2(0.0, r.top() - 2.0), egui::pos2(280.0, r.bottom() + 2.0)));
    }
}

#[test]
fn snapshot_head_view_with_a_pinned_token() {
    let mut h = snapshot_app("the cat sat on the mat");
    h.get_by_label("query 2: cat").click();
    h.run_steps(3);
    h.remove_cursor();
    h.run_steps(2);
    mask_varying(&mut h);
    h.snapshot("head_view_pinned");
}

/// The pictures do not depend on where the repository lies: the model folder's path, however
/// long, stays on one line (its middle elided) and moves nothing below it.
#[test]
fn snapshot_head_view_with_the_model_under_a_long_path() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = tmp.path().to_path_buf();
    while dir.as_os_str().len() < 120 {
        dir.push("a-folder-with-a-long-name");
    }
    let model_dir = dir.join("tiny-bert");
    std::fs::create_dir_all(&model_dir).unwrap();
    for entry in std::fs::read_dir(tiny()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), model_dir.join(entry.file_name())).unwrap();
    }
    assert!(model_dir.as_os_str().len() > 120);
    let mut h = snapshot_app_of("the cat sat on the mat", model_dir.clone());
    h.get_by_label("query 2: cat").click();
    h.run_steps(3);
    h.remove_cursor();
    h.run_steps(2);
    mask_varying_of(&mut h, &model_dir);
    h.snapshot("head_view_pinned");
}

#[test]
fn snapshot_heatmap_with_values() {
    let mut h = snapshot_app("a small heatmap");
    h.get_by_label("H1").click();
    h.step();
    h.get_by_label("H1").click();
    h.get_by_label("Heatmap").click();
    h.run_steps(3);
    h.remove_cursor();
    h.run_steps(2);
    mask_varying(&mut h);
    h.snapshot("heatmap_values");
}

/// A text the last frame painted: its string, the rectangle of its (unturned) galley, its angle.
struct Painted {
    text: String,
    rect: egui::Rect,
    angle: f32,
}

/// Every text the last frame painted.
fn painted_texts(h: &Harness<'static, AttnvizApp>) -> Vec<Painted> {
    fn walk(shape: &egui::Shape, out: &mut Vec<Painted>) {
        match shape {
            egui::Shape::Vec(shapes) => shapes.iter().for_each(|s| walk(s, out)),
            egui::Shape::Text(t) => out.push(Painted {
                text: t.galley.text().to_string(),
                rect: egui::Rect::from_min_size(t.pos, t.galley.size()),
                angle: t.angle,
            }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for clipped in &h.output().shapes {
        walk(&clipped.shape, &mut out);
    }
    out
}

/// The point of a painted flat text that a figure's text run anchors: its galley's left, centre or
/// right, at mid-height.
fn anchor_point(p: &Painted, anchor: attnviz::render::Anchor) -> egui::Pos2 {
    match anchor {
        attnviz::render::Anchor::Start => p.rect.left_center(),
        attnviz::render::Anchor::Middle => p.rect.center(),
        attnviz::render::Anchor::End => p.rect.right_center(),
    }
}

/// The text runs of a display list.
fn text_runs(d: &attnviz::render::Drawing) -> Vec<&attnviz::render::TextRun> {
    d.items.iter().filter_map(|i| if let attnviz::render::Item::Text(t) = i { Some(t) } else { None }).collect()
}

/// Checks that the last frame painted every text run of `drawing` (figure pixels = points) where
/// the display list puts it, the figure's top-left found from the painted `reference` text (a
/// flat run that occurs once); returns that top-left corner on screen.
fn assert_painted(h: &Harness<'static, AttnvizApp>, drawing: &attnviz::render::Drawing, reference: &str) -> egui::Pos2 {
    let painted = painted_texts(h);
    let runs = text_runs(drawing);
    let run = runs.iter().find(|t| t.text == reference).unwrap();
    let shown = painted.iter().find(|p| p.text == reference).unwrap_or_else(|| panic!("{reference} is painted"));
    let at = anchor_point(shown, run.anchor);
    let origin = egui::pos2(at.x - run.x, at.y - run.y);
    for run in runs.iter().filter(|t| !t.text.trim().is_empty()) {
        let found = painted.iter().filter(|p| p.text == run.text).any(|p| {
            if run.up {
                // Turned a quarter left about its bottom-left corner: the box's left edge is the pos.
                let (left, top) = run.top_left();
                (p.angle + std::f32::consts::FRAC_PI_2).abs() < 1e-3
                    && (p.rect.left() - (origin.x + left)).abs() < 1.0
                    && (p.rect.top() - (origin.y + top + p.rect.width())).abs() < 1.0
            } else {
                let a = anchor_point(p, run.anchor);
                p.angle == 0.0 && (a.x - (origin.x + run.x)).abs() < 1.0 && (a.y - (origin.y + run.y)).abs() < 1.0
            }
        });
        assert!(found, "“{}” painted at the display list's ({}, {})", run.text, run.x, run.y);
    }
    origin
}

/// The figure theme of a display list, from its background.
fn theme_of(d: &attnviz::render::Drawing) -> attnviz::render::Theme {
    use attnviz::render::Theme;
    if d.background == Theme::Dark.background() { Theme::Dark } else { Theme::Light }
}

/// The texts of an SVG's `<text>` elements, sorted.
fn svg_texts(svg: &str) -> Vec<String> {
    let doc = usvg::roxmltree::Document::parse(svg).unwrap();
    let mut texts: Vec<String> =
        doc.descendants().filter(|n| n.has_tag_name("text")).map(|n| n.text().unwrap_or("").to_string()).collect();
    texts.sort();
    texts
}

#[test]
fn the_heatmap_on_screen_is_the_exported_figure() {
    use attnviz::export::{Figure, Style, figure_drawing};
    use attnviz::render::{Item, to_svg};
    let mut h = app("the cat sat on the mat");
    h.get_by_label("H1").click();
    h.step();
    h.get_by_label("H1").click();
    h.get_by_label("Heatmap").click();
    // Cells as large as the exported figure's at scale 1 (22 pixels, with the values printed).
    h.state_mut().settings.zoom.heatmap = Some(22.0);
    h.run_steps(3);
    let app = h.state();
    let run = app.session.run.clone().unwrap();
    let (layer_idx, head_idxs) = (app.settings.layer_idx, app.settings.selected_heads());
    assert_eq!(head_idxs, [1]);
    let (shown, grid) = app.views.heatmap.figure().expect("the heatmap is drawn from a display list");
    let shown = shown.clone();
    let style = Style { theme: theme_of(&shown), scale: 1.0, colormap: app.settings.colormap };
    let exported = figure_drawing(Some(&run), &Figure::Heatmap { layer_idx, head_idxs }, style).unwrap();
    // The same figure: every text run, frame and tick of the screen's display list is in the
    // file's, moved by the room the file's title takes (the app has its title in the toolbar).
    let matrix = |d: &attnviz::render::Drawing| {
        d.items.iter().find_map(|i| if let Item::Cells(c) = i { Some((c.x, c.y, c.cell_w)) } else { None }).unwrap()
    };
    let ((ax, ay, a_cell), (ex, ey, e_cell)) = (matrix(&shown), matrix(&exported));
    assert_eq!((a_cell, grid.cell_w, grid.left, grid.top), (e_cell, 22.0, ax, ay));
    let (dx, dy) = (ex - ax, ey - ay);
    let moved: Vec<Item> = shown
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Text(t) => Some(Item::Text(attnviz::render::TextRun { x: t.x + dx, y: t.y + dy, ..t.clone() })),
            Item::Frame { rect: [x, y, w, h], color } => {
                Some(Item::Frame { rect: [x + dx, y + dy, *w, *h], color: *color })
            }
            Item::Rect { rect: [x, y, w, h], color } => {
                Some(Item::Rect { rect: [x + dx, y + dy, *w, *h], color: *color })
            }
            _ => None,
        })
        .collect();
    let tokens = run.tokens.len();
    let values = text_runs(&shown).iter().filter(|t| grid.cell_at(t.x, t.y).is_some()).count();
    assert_eq!(values, tokens * tokens, "a number in every cell");
    for item in &moved {
        assert!(exported.items.contains(item), "{item:?} is in the exported figure");
    }
    // The SVG holds the same texts, and the title.
    let mut expected: Vec<String> = text_runs(&shown).iter().map(|t| t.text.clone()).collect();
    expected.push(text_runs(&exported)[0].text.clone());
    expected.sort();
    assert_eq!(svg_texts(&to_svg(&exported)), expected);
    // And the screen shows that display list: each text where it puts it.
    let origin = assert_painted(&h, &shown, "key (attended to)");
    // Hovering a cell of that figure names its tokens and weight, and lays nothing out again.
    let layouts = h.state().views.heatmap.figure_layouts();
    let (x, y) = grid.cell_center(1, 2);
    h.hover_at(origin + egui::vec2(x, y));
    h.run_steps(60); // past the tooltip's delay
    let labels: Vec<String> = (0..tokens).map(|i| run.label(i)).collect();
    let tip = format!("query “{}” (#1)\nkey “{}” (#2)", labels[1], labels[2]);
    let texts: Vec<String> = painted_texts(&h).into_iter().map(|p| p.text).collect();
    assert!(texts.iter().any(|t| t.starts_with(&tip)), "the tooltip of cell (1, 2): {tip:?} in {texts:?}");
    assert_eq!(h.state().views.heatmap.figure_layouts(), layouts, "hovering lays nothing out again");
}

#[test]
fn the_head_view_labels_are_the_exported_figure_labels() {
    use attnviz::export::{Figure, Style, figure_drawing};
    let mut h = app("the cat sat on the mat");
    h.get_by_label("query 2: cat").click();
    h.run_steps(3);
    let app = h.state();
    let run = app.session.run.clone().unwrap();
    let shown = app.views.head.labels_drawing().expect("the labels are drawn from a display list").clone();
    let body = app.views.head.body_layout().unwrap();
    let head_idxs = app.settings.selected_heads();
    let figure = Figure::HeadView {
        layer_idx: app.settings.layer_idx,
        head_idxs: head_idxs.clone(),
        selected_token: Some((Side::Query, 2)),
        threshold: app.settings.threshold,
    };
    let style = Style { theme: theme_of(&shown), scale: 1.0, colormap: app.settings.colormap };
    let exported = figure_drawing(Some(&run), &figure, style).unwrap();
    // The file's texts are the title, one chip per head and the screen's captions and labels, in
    // the same order and places along the rows (the screen's rows are taller).
    let file = text_runs(&exported);
    let legend = head_idxs.len();
    let body_runs = &file[1 + legend..];
    let screen = text_runs(&shown);
    let text = |runs: &[&attnviz::render::TextRun]| runs.iter().map(|t| (t.text.clone(), t.anchor)).collect::<Vec<_>>();
    assert_eq!(text(&screen), text(body_runs));
    assert_eq!(screen.len(), 2 + 2 * run.tokens.len(), "two captions, every token twice");
    for (i, t) in screen.iter().skip(2).enumerate() {
        let row = i % run.tokens.len();
        assert!((t.y - body.row_y(row)).abs() < 1e-3, "{} on row {row}", t.text);
    }
    // The pinned token's highlight, in the figure's colour, behind its row in both.
    let highlight = |d: &attnviz::render::Drawing| {
        d.items
            .iter()
            .find_map(|i| match i {
                attnviz::render::Item::Rect { rect, color } if *color != d.background => Some(*rect),
                _ => None,
            })
            .unwrap()
    };
    let [_, y, _, height] = highlight(&shown);
    assert!((y + height / 2.0 - body.row_y(2)).abs() < 1e-3);
    assert_painted(&h, &shown, "query");
}

#[test]
fn loading_a_differently_shaped_model_switches_views_to_it() {
    let mut h = app("switch models");
    let relu = tiny().with_file_name("tiny-bert-relu");
    h.get_by_label("Model folder or hub id").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Model folder or hub id").type_text(relu.to_str().unwrap());
    h.get_by_label("Load").click();
    h.step();
    wait_until(&mut h, "the new model's run", |a| a.session.run.as_ref().is_some_and(|r| r.attention.heads() == 2));
    for view in ["Model view", "Heatmap", "Head view"] {
        h.get_by_label(view).click();
        h.run_steps(2);
    }
    let app = h.state();
    assert_eq!(app.session.model.as_ref().unwrap().name, "tiny-bert-relu");
    assert_eq!(app.settings.heads, [true, true]);
    assert_eq!(app.session.run.as_ref().unwrap().attention.layers(), 3);
    h.get_by_label("L2");
}

/// Replaces the text of the box labelled `label`.
fn retype(h: &mut Harness<'static, AttnvizApp>, label: &str, text: &str) {
    h.get_by_label(label).focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label(label).type_text(text);
    h.run_steps(2);
}

/// Types a number into the field labelled `label` and commits it with Enter (numbers apply when
/// committed, not at every keystroke).
fn retype_number(h: &mut Harness<'static, AttnvizApp>, label: &str, text: &str) {
    retype(h, label, text);
    h.key_press(Key::Enter);
    h.run_steps(2);
}

#[test]
fn positional_encoding_panel_follows_the_formulas_and_exports() {
    use attnviz::analysis::PeLayout;
    use attnviz::app::state::PeFigure;
    let mut h = app("positions");
    h.get_by_label("Positional encoding").click();
    h.run_steps(2);
    retype_number(&mut h, "d_model", "16");
    retype_number(&mut h, "positions", "10");
    retype_number(&mut h, "base", "1000");
    h.get_by_label("concatenated").click();
    h.run_steps(2);
    let pe = h.state().views.pe.encoding.clone().expect("an encoding is shown");
    assert_eq!((pe.params.d_model, pe.params.positions, pe.params.base), (16, 10, 1000.0));
    assert_eq!(pe.params.layout, PeLayout::Concatenated);
    // tensor2tensor: 8 timescales from 1 to 1000, sines then cosines; dot = PE·PEᵀ.
    for p in 0..10 {
        for i in 0..8 {
            let angle = p as f64 * (-(i as f64) * 1000f64.ln() / 7.0).exp();
            assert!((f64::from(pe.encoding[p * 16 + i]) - angle.sin()).abs() < 1e-6);
            assert!((f64::from(pe.encoding[p * 16 + 8 + i]) - angle.cos()).abs() < 1e-6);
        }
        for q in 0..10 {
            let dot: f32 = (0..16).map(|k| pe.encoding[p * 16 + k] * pe.encoding[q * 16 + k]).sum();
            assert!((pe.dot[p * 10 + q] - dot).abs() < 1e-4);
        }
    }
    h.get_by_label("interleaved").click();
    h.run_steps(2);
    let pe = h.state().views.pe.encoding.clone().unwrap();
    let angle = 3.0 / 1000f64.powf(4.0 / 16.0); // position 3, pair i = 2
    assert!((f64::from(pe.encoding[3 * 16 + 4]) - angle.sin()).abs() < 1e-6);
    assert!((f64::from(pe.encoding[3 * 16 + 5]) - angle.cos()).abs() < 1e-6);
    // An odd width is explained and the last valid encoding stays.
    retype_number(&mut h, "d_model", "15");
    assert!(h.state().views.pe.error.as_deref().unwrap().contains("even"));
    assert!(h.query_by_label_contains("d_model must be a positive even number").is_some());
    assert_eq!(h.state().views.pe.encoding.as_ref().unwrap().params.d_model, 16);
    retype_number(&mut h, "d_model", "12.5");
    assert!(h.query_by_label_contains("d_model: \"12.5\" is not a whole number").is_some());
    retype_number(&mut h, "d_model", "16");
    // The tiny model's learned table (24 positions) is shown next to the fixed one.
    assert!(h.query_by_label_contains("Learned position embeddings of tiny-bert").is_some());
    // Export the dot products through that heatmap's own button.
    let buttons: Vec<_> = h.get_all_by_label("Export PNG…").collect();
    assert_eq!(buttons.len(), 4, "one per heatmap");
    buttons[1].click();
    h.run_steps(2);
    assert_eq!(h.state().settings.pe_figure, PeFigure::Dot);
    assert!(h.state().views.export.open);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dot.png");
    h.state_mut().views.export.path_input = path.display().to_string();
    h.state_mut().session.status = None;
    h.run_steps(1);
    h.get_by_label("Save").click();
    wait_until(&mut h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
    let image = image::open(&path).unwrap();
    let app = h.state();
    let expected = attnviz::export::render_figure(None, &app.current_figure(), app.export_style(false)).unwrap();
    assert_eq!((image.width(), image.height()), expected.dimensions());
    // The learned table's figures draw the first positions of the tiny model's 24.
    h.state_mut().settings.pe_figure = PeFigure::LearnedCosine;
    let figure = h.state().current_figure();
    let attnviz::export::Figure::LearnedPositions { total, positions, cosine, .. } = &figure else {
        panic!("{figure:?}")
    };
    assert_eq!((*total, *positions, *cosine), (24, 10, true));
    attnviz::export::render_figure(None, &figure, h.state().export_style(false)).unwrap();
}

fn playground_run(h: &Harness<'static, AttnvizApp>) -> Option<(usize, usize)> {
    let run = h.state().session.run.as_ref()?;
    run.model_name.starts_with("playground").then(|| (run.attention.layers(), run.attention.heads()))
}

#[test]
fn playground_hyperparameters_rerun_every_view_and_invalid_ones_are_explained() {
    let mut h = app("a playground sentence");
    h.get_by_label("Playground").click();
    wait_until(&mut h, "the playground run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.model_name.starts_with("playground"))
    });
    assert_eq!(playground_run(&h), Some((2, 4)));
    assert!(h.query_by_label_contains("PLAYGROUND — random weights").is_some(), "the screen says which model is shown");
    h.get_by_label("Model view").click();
    settled(&mut h);
    assert!(h.query_by_label("Layer 1 head 3").is_some());
    retype_number(&mut h, "heads", "2");
    retype_number(&mut h, "layers", "3");
    wait_until(&mut h, "the 3 × 2 playground", |a| {
        a.session.run.as_ref().is_some_and(|r| (r.attention.layers(), r.attention.heads()) == (3, 2))
    });
    settled(&mut h); // the thumbnails are drawn off the UI thread
    assert!(h.query_by_label("Layer 2 head 1").is_some());
    assert!(h.query_by_label("Layer 1 head 3").is_none(), "the grid has 2 columns now");
    assert_eq!(h.state().settings.heads, [true, true]);
    // d_model 30 with 4 heads: explained next to d_model; the 3 × 2 model stays on screen.
    retype_number(&mut h, "heads", "4");
    retype_number(&mut h, "d_model", "30");
    let (field, message) = h.state().session.playground.error.clone().expect("an error is shown");
    assert_eq!(field, "d_model");
    assert!(message.contains("not divisible by 4 heads"), "{message}");
    assert!(h.query_by_label_contains("not divisible by 4 heads").is_some());
    h.run_steps(5);
    assert_eq!(playground_run(&h), Some((3, 2)));
    retype_number(&mut h, "d_model", "32");
    wait_until(&mut h, "the valid model", |a| a.session.run.as_ref().is_some_and(|r| r.attention.heads() == 4));
    assert!(h.state().session.playground.error.is_none());
    // Causal mask on: the upper triangle is exactly zero in every head.
    h.get_by_label("Causal mask (each token sees only earlier ones)").click();
    wait_until(&mut h, "the causal run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.attention.get(0, 0, 0, 1) == 0.0)
    });
    let run = h.state().session.run.clone().unwrap();
    let n = run.tokens.len();
    for q in 0..n {
        assert!(run.attention.row(2, 3, q)[q + 1..].iter().all(|&v| v == 0.0));
    }
    // One click back to the pretrained model.
    h.get_by_label_contains("Pretrained:").click();
    wait_until(&mut h, "the pretrained run", |a| a.session.run.as_ref().is_some_and(|r| r.model_name == "tiny-bert"));
    assert!(h.query_by_label_contains("Faithful model: tiny-bert").is_some());
}

#[test]
fn interventions_mark_the_run_and_reset_restores_the_faithful_model() {
    let mut h = app("intervene on this model");
    let faithful = h.state().session.run.clone().unwrap();
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    h.get_by_label("Ablate layer 0 head 2").click();
    wait_until(&mut h, "the ablated run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_some()));
    let ablated = h.state().session.run.clone().unwrap();
    assert_eq!(ablated.intervention.as_deref(), Some("ablated heads 0:2"));
    assert_eq!(ablated.attention.head(0, 2), faithful.attention.head(0, 2), "layer 0 itself is unchanged");
    assert_ne!(ablated.attention.head(1, 0), faithful.attention.head(1, 0), "later layers change");
    assert!(h.query_by_label_contains("MODIFIED MODEL — ablated heads 0:2").is_some());
    // Exports say so too.
    let figure = h.state().current_figure();
    let title_image = attnviz::export::render_figure(Some(&ablated), &figure, h.state().export_style(false)).unwrap();
    let plain_image = attnviz::export::render_figure(Some(&faithful), &figure, h.state().export_style(false)).unwrap();
    assert!(title_image.width() > plain_image.width() || title_image != plain_image);
    assert!(ablated.display_name().contains("MODIFIED: ablated heads 0:2"));
    h.get_by_label("Causal mask (no looking ahead)").click();
    wait_until(&mut h, "the causal run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.intervention.as_deref() == Some("ablated heads 0:2; causal mask"))
    });
    assert_eq!(h.state().session.run.as_ref().unwrap().attention.get(1, 3, 0, 1), 0.0);
    h.get_all_by_label("Reset to the faithful model").next().unwrap().click();
    wait_until(&mut h, "the faithful run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_none()));
    assert_eq!(h.state().session.run.as_ref().unwrap().attention.as_slice(), faithful.attention.as_slice());
    assert!(h.state().settings.interventions.is_faithful());
}

#[test]
fn playground_interventions_and_pe_settings_persist_across_launches() {
    let mut h = app("remember the playground");
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    h.get_by_label("Ablate layer 1 head 3").click();
    h.run_steps(2);
    h.get_by_label("Playground").click();
    h.run_steps(2);
    retype_number(&mut h, "seed", "42");
    h.get_by_label("pre-LN").click();
    h.get_by_label("Positional encoding").click();
    h.run_steps(2);
    retype_number(&mut h, "positions", "33");
    wait_until(&mut h, "the playground run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.model_name.contains("seed 42"))
    });
    let mut storage = MemoryStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    let saved = h.state().settings.clone();
    drop(h);
    let mut h2 = harness_with(Startup::default(), Some(storage));
    wait_until(&mut h2, "the restored playground run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.model_name.contains("seed 42") && r.model_name.contains("pre-LN"))
    });
    let restored = &h2.state().settings;
    assert_eq!(*restored, saved);
    assert_eq!(restored.source, attnviz::app::state::Source::Playground);
    assert_eq!(restored.playground.seed, 42);
    assert!(restored.interventions.ablated.contains(&(1, 3)));
    assert_eq!(restored.pe.positions, 33);
    assert_eq!(restored.view, View::Positions);
}

/// Writes the current view through the export dialog to `path` and waits for it.
fn export_through_dialog(h: &mut Harness<'static, AttnvizApp>, path: &std::path::Path) {
    h.get_by_label("Export…").click();
    h.run_steps(2);
    retype(h, "Export path", path.to_str().unwrap());
    h.state_mut().session.status = None;
    h.get_by_label("Save").click();
    wait_until(h, "the export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
    let status = h.state().session.status.clone().unwrap();
    assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
}

/// The exported PNG decodes and has exactly the pixels of the figure the CLI would draw.
fn assert_png_matches_figure(h: &Harness<'static, AttnvizApp>, path: &std::path::Path) {
    let image = image::open(path).unwrap();
    let app = h.state();
    // The app exports in its own theme (the harness runs dark).
    let dark = h.ctx.theme() == egui::Theme::Dark;
    let expected =
        attnviz::export::render_figure(app.session.run.as_deref(), &app.current_figure(), app.export_style(dark))
            .unwrap();
    assert_eq!((image.width(), image.height()), (expected.width(), expected.height()));
    // The same pixels, not just the same size: the app's Export draws the figure the CLI draws.
    assert!(image.to_rgba8().as_raw() == expected.as_raw(), "{}: pixels differ from the figure", path.display());
}

fn csv_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn neuron_view_opens_from_a_pinned_query_picks_queries_and_exports() {
    let mut h = app("the cat sat");
    h.get_by_label("query 2: cat").click();
    h.run_steps(2);
    h.get_by_label("Why? Open in the neuron view").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.view, View::Neuron);
    assert_eq!(h.state().settings.neuron_query, 2);
    // Clicking a token on the left picks the query.
    h.get_by_label("sat").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.neuron_query, 3);
    h.get_by_label("head 1").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [false, true, false, false]);
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("neuron.png");
    export_through_dialog(&mut h, &png);
    assert_png_matches_figure(&h, &png);
    // The numbers: per key, k, q∘k, the scaled score and the weight the model recorded.
    let csv = dir.path().join("neuron.csv");
    export_through_dialog(&mut h, &csv);
    let rows = csv_rows(&csv);
    let run = h.state().session.run.clone().unwrap();
    let neuron = run.neuron.as_ref().unwrap();
    let layer = h.state().settings.layer_idx;
    assert_eq!(rows.len(), 1 + run.tokens.len());
    for (j, row) in rows[1..].iter().enumerate() {
        let weight: f32 = row.last().unwrap().parse().unwrap();
        let score: f32 = row[row.len() - 2].parse().unwrap();
        assert!((weight - run.attention.get(layer, 1, 3, j)).abs() < 1e-6);
        assert!((score - neuron.scores.get(layer, 1, 3, j)).abs() < 1e-5);
        // q∘k sums to q·k; scaled by 1/√d it is the score.
        let d = neuron.queries.head_dim();
        let dot: f32 = row[(1 + d)..=(2 * d)].iter().map(|v| v.parse::<f32>().unwrap()).sum();
        assert!((dot / (d as f32).sqrt() - score).abs() < 1e-4, "{dot} vs {score}");
    }
}

#[test]
fn statistics_grid_opens_a_head_on_click_and_exports_csv_and_png() {
    let mut h = app("the cat sat, and the dog ran.");
    h.get_by_label("Head statistics").click();
    h.run_steps(3);
    h.get_by_label("→ itself").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.stat, attnviz::analysis::Statistic::SelfToken);
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("stats.png");
    export_through_dialog(&mut h, &png);
    assert_png_matches_figure(&h, &png);
    let csv = dir.path().join("stats.csv");
    export_through_dialog(&mut h, &csv);
    let rows = csv_rows(&csv);
    assert_eq!(rows[0].join(","), "layer,head,entropy,cls,sep,punctuation,self,previous,next");
    let run = h.state().session.run.clone().unwrap();
    let stats = attnviz::analysis::HeadStats::compute(&run.attention, &run.tokens);
    assert_eq!(rows.len(), 1 + 2 * 4);
    let self_share: f32 = rows[1 + 6][6].parse().unwrap(); // layer 1 head 2
    assert_eq!(self_share, stats.get(1, 2, attnviz::analysis::Statistic::SelfToken));
    settled(&mut h);
    h.get_by_label("Statistics of layer 1 head 2").click();
    h.run_steps(3);
    let s = &h.state().settings;
    assert_eq!((s.view, s.layer_idx), (View::Heatmap, 1));
    assert_eq!(s.heads, [false, false, true, false]);
}

#[test]
fn rollout_flow_and_the_head_view_pseudo_layer() {
    let mut h = app("the cat sat on the mat");
    h.get_by_label("L1").click();
    h.get_by_label("Rollout / flow").click();
    h.run_steps(3);
    let run = h.state().session.run.clone().unwrap();
    let expected = attnviz::analysis::rollout::rollout(&run.attention, &[0, 1, 2, 3]);
    assert_eq!(shown_rollout(&mut h, &[0, 1, 2, 3]), expected);
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("rollout.npz");
    export_through_dialog(&mut h, &npz);
    assert!(std::fs::metadata(&npz).unwrap().len() > 4 * 64, "the NPZ holds the n × n matrix");
    h.get_by_label("Flow").click();
    wait_until(&mut h, "the flow", |a| a.features.flow.slot.shown().is_some() && !a.features.flow.slot.is_pending());
    let values = h.state().features.flow.slot.shown().unwrap().1.values.clone();
    assert_eq!(*values, attnviz::analysis::rollout::flow(&run.attention, &[0, 1, 2, 3], 1));
    let png = dir.path().join("flow.png");
    export_through_dialog(&mut h, &png);
    assert_png_matches_figure(&h, &png);
    h.get_by_label("Show in the head view").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.view, View::Head);
    assert!(h.state().settings.rollout.in_head_view);
    // The pseudo-layer's matrices and lines are derived for the rollout (not layer 0's heads).
    let s = &h.state().session;
    let pseudo = attnviz::app::derive::DeriveKey::HeadMatrices {
        view_id: s.view_id,
        layer_idx: 1,
        hide_special: false,
        rollout: Some(vec![0, 1, 2, 3]),
    };
    assert!(s.derived.is_pending(&pseudo) || s.derived.head_matrices(&pseudo).is_some());
    assert!(head_lines(&mut h) > 0, "the pseudo-layer draws its lines");
    let s = &h.state().session;
    assert_eq!(s.derived.head_matrices(&pseudo).unwrap().matrices.len(), 1, "one pseudo-head");
    h.get_by_label("Rollout pseudo-layer").click();
    h.run_steps(2);
    assert!(!h.state().settings.rollout.in_head_view);
}

#[test]
fn the_words_toggle_merges_pieces_in_every_view_and_rows_still_sum_to_one() {
    let mut h = app("embeddings are unbelievable");
    let pieces = tokens(&h);
    assert!(pieces.iter().any(|t| t.starts_with("##")), "{pieces:?}");
    h.get_by_label("Words").click();
    wait_until(&mut h, "the word-level run", |a| a.session.run.as_ref().is_some_and(|r| r.tokens.len() < pieces.len()));
    assert_eq!(tokens(&h), ["[CLS]", "embeddings", "are", "unbelievable", "[SEP]"]);
    let run = h.state().session.run.clone().unwrap();
    assert!(run.attention.max_row_sum_error() < 1e-5);
    for view in ["Model view", "Heatmap", "Head statistics", "Rollout / flow"] {
        h.get_by_label(view).click();
        h.run_steps(3);
    }
    wait_until(&mut h, "the statistics", |a| a.session.derived.stats(a.session.view_id).is_some());
    let s = &h.state().session;
    assert_eq!(s.derived.stats(s.view_id).unwrap().tokens, 5);
    assert_eq!(shown_rollout(&mut h, &[0, 1, 2, 3])[0].len(), 25);
    h.get_by_label("Neuron view").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("turn off “Words”").is_some());
    h.get_by_label("Words").click();
    h.run_steps(3);
    assert_eq!(tokens(&h), pieces);
}

#[test]
fn comparison_of_two_sentences_and_of_the_faithful_model_against_an_intervened_one() {
    let mut h = app("the cat sat");
    h.get_by_label("Compare").click();
    h.run_steps(2);
    retype(&mut h, "Sentence to compare", "the dog sat down");
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.as_ref().is_some_and(|b| b.tokens.len() == 6));
    h.get_by_label("Difference B − A").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("needs as many tokens").is_some(), "different counts: side by side");
    assert!(h.query_by_label_contains("A has 5 tokens, B has 6").is_some(), "the reason, in numbers");
    // Same count, other words: the difference is drawn, the positions that differ are named.
    retype(&mut h, "Sentence to compare", "the dog sat");
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.as_ref().is_some_and(|b| b.tokens.len() == 5));
    h.run_steps(2);
    assert!(h.query_by_label_contains("needs as many tokens").is_none());
    assert!(
        h.query_by_label_contains("The tokens differ at position 2 (“cat” / “dog”)").is_some(),
        "the tokens that differ are named"
    );
    retype(&mut h, "Sentence to compare", "the dog sat down");
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.as_ref().is_some_and(|b| b.tokens.len() == 6));
    h.run_steps(2);
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("side-by-side.png");
    h.state_mut().settings.compare.mode = attnviz::app::state::CompareMode::SideBySide;
    h.run_steps(2);
    export_through_dialog(&mut h, &png);
    assert_png_matches_figure(&h, &png);
    // The faithful model against the same model with head 0:1 ablated.
    h.get_by_label("The faithful model").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("set an intervention").is_some());
    h.state_mut().settings.interventions.ablated.insert((0, 1));
    wait_until(&mut h, "both runs", |a| {
        a.session.run.as_ref().is_some_and(|r| r.intervention.is_some())
            && a.features.compare.run_b.as_ref().is_some_and(|b| b.intervention.is_none() && b.tokens.len() == 5)
    });
    h.get_by_label("Difference B − A").click();
    h.get_by_label("L1").click();
    h.run_steps(2);
    let csv = dir.path().join("difference.csv");
    export_through_dialog(&mut h, &csv);
    let (a, b) = (h.state().session.run.clone().unwrap(), h.state().features.compare.run_b.clone().unwrap());
    let heads = [0, 1, 2, 3];
    let (am, bm) = (a.attention.mean_of_heads(1, &heads), b.attention.mean_of_heads(1, &heads));
    let rows = csv_rows(&csv);
    let mut largest = 0.0f32;
    for (q, row) in rows[1..].iter().enumerate() {
        for (k, cell) in row[1..].iter().enumerate() {
            let v: f32 = cell.parse().unwrap();
            assert!((v - (bm[q * 5 + k] - am[q * 5 + k])).abs() < 1e-6);
            largest = largest.max(v.abs());
        }
    }
    assert!(largest > 1e-4, "ablating a layer-0 head changes layer 1");
}

/// Gemma 2 alternates sliding (window 4) and full layers: the heatmap masks the window's hidden
/// keys in a sliding layer only, and a full layer's far keys are weights, not masked cells.
#[test]
fn a_sliding_layer_masks_its_window_and_a_full_layer_does_not() {
    let mut h = lens_app("tiny-gemma2", "The cat sat on the mat because it was warm.");
    h.get_by_label("Heatmap").click();
    for (layer, window) in [(0, Some(4)), (1, None)] {
        h.state_mut().settings.layer_idx = layer;
        settled(&mut h);
        let run = h.state().session.run.clone().unwrap();
        assert_eq!(run.window_of(layer), window, "layer {layer}");
        let cache = &h.state().views.heatmap;
        let m = cache.keep.len();
        assert!(m > 6, "the text is longer than the window");
        let mut far = 0;
        for q in 0..m {
            for k in 0..m {
                let (tq, tk) = (cache.keep[q], cache.keep[k]);
                let hidden = tk > tq || window.is_some_and(|w| tq - tk >= w);
                assert_eq!(cache.value(q, k).is_nan(), hidden, "layer {layer}: cell ({q}, {k})");
                far += usize::from(tq >= tk + 4);
            }
        }
        assert!(far > 0, "some keys lie outside the window");
        if window.is_none() {
            let shown: f32 = (0..m)
                .flat_map(|q| (0..m).map(move |k| (q, k)))
                .filter(|&(q, k)| cache.keep[q] >= cache.keep[k] + 4)
                .map(|(q, k)| cache.value(q, k))
                .sum();
            assert!(shown > 0.0, "a full layer gives far keys weight");
        }
    }
}

#[test]
fn a_gpt2_model_draws_its_masked_triangle_as_masked() {
    let gpt2 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-gpt2");
    let mut h =
        harness_with(Startup { model_dir: Some(gpt2), text: Some("The cat sat.".into()), ..Startup::default() }, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    assert!(h.state().session.run.as_ref().unwrap().causal);
    h.get_by_label("Heatmap").click();
    h.run_steps(3);
    let cache = &h.state().views.heatmap;
    let m = cache.keep.len();
    assert!(m > 2);
    for q in 0..m {
        for k in 0..m {
            assert_eq!(cache.value(q, k).is_nan(), k > q, "cell ({q}, {k}): masked exactly above the diagonal");
        }
    }
    h.get_by_label("Words").click();
    h.run_steps(2);
    wait_until(&mut h, "the word-level run", |a| a.session.run.is_some());
    assert!(
        h.state().session.run.as_ref().unwrap().tokens.tokens.iter().all(|t| !t.contains("Ġ") || t.starts_with('Ġ'))
    );
}

#[test]
fn comparison_with_another_model_folder_loads_it_in_the_background() {
    let mut h = app("the cat sat");
    h.get_by_label("Compare").click();
    h.run_steps(2);
    h.get_by_label("Another model").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("Choose a second model folder").is_some());
    // The same weights as B: the difference must be exactly zero everywhere.
    retype(&mut h, "Model B folder", tiny().to_str().unwrap());
    h.get_by_label("Use as B").click();
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.is_some());
    let (a, b) = (h.state().session.run.clone().unwrap(), h.state().features.compare.run_b.clone().unwrap());
    assert_eq!(b.model_name, "tiny-bert");
    assert_eq!(a.attention, b.attention);
    // A model of another shape: the view says what B has instead of failing.
    let relu = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bert-relu");
    retype(&mut h, "Model B folder", relu.to_str().unwrap());
    h.get_by_label("Use as B").click();
    wait_until(&mut h, "run B of the other model", |a| {
        a.features.compare.run_b.as_ref().is_some_and(|b| b.model_name == "tiny-bert-relu")
    });
    assert!(h.query_by_label_contains("has 3 layers × 2 heads").is_some());
}

#[test]
fn models_in_the_hugging_face_cache_open_in_one_click_and_are_remembered() {
    let cache = common::fake_hf_cache(&common::root().join("tests/fixtures/models/tiny-roberta"), "org/tiny-roberta");
    let startup = Startup {
        model_dir: Some(tiny()),
        text: Some("The cat sat.".into()),
        hf_cache: Some(cache.path().to_path_buf()),
        ..Startup::default()
    };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the first run and the cache scan", |a| {
        a.session.run.is_some() && a.session.cached_models.is_some()
    });
    let listed = h.state().session.cached_models.clone().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].summary.as_deref(), Ok("roberta · 2 layers × 4 heads × 32 wide"));
    h.get_by_label("org/tiny-roberta").click();
    wait_until(&mut h, "the cached model", |a| a.session.model.as_ref().is_some_and(|m| m.name == "org/tiny-roberta"));
    wait_until(&mut h, "its run", |a| a.session.run.as_ref().is_some_and(|r| r.model_name == "org/tiny-roberta"));
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.tokens.tokens.first().map(String::as_str), Some("<s>"));
    let recent = &h.state().settings.recent_models;
    assert_eq!(recent.len(), 2, "{recent:?}");
    assert_eq!(recent[0], listed[0].dir);
    assert!(recent[1].ends_with("tiny-bert"), "{recent:?}");
    // The previous model is offered again in one click.
    h.run_steps(2);
    h.get_by_label("tiny-bert").click();
    wait_until(&mut h, "tiny-bert again", |a| a.session.model.as_ref().is_some_and(|m| m.name == "tiny-bert"));
}

#[test]
fn after_typing_an_idle_app_asks_for_no_frames() {
    let mut h = app("The cat sat.");
    // A window with keyboard focus, as on a desktop (egui blinks a cursor only then).
    h.input_mut().focused = true;
    h.get_by_label("Sentence A").type_text(" It purred.");
    // [CLS] the cat sat . [SEP] had 6 tokens.
    wait_until(&mut h, "the run of the new text", |a| a.session.run.as_ref().is_some_and(|r| r.tokens.len() > 6));
    // The head view's lines are rasterized off the UI thread, and the scan of the Hugging Face
    // cache runs on a thread of its own: idle starts when the lines are drawn and the scan is in.
    wait_until(&mut h, "the cache scan", |a| a.session.cached_models.is_some());
    settled(&mut h);
    head_lines(&mut h);
    h.run();
    // A result of background work that was still on its way (on a loaded machine: the test
    // binary runs its tests in parallel) asks for one frame to show it; wait, in real time, until
    // a frame asks for no other. A blinking cursor never stops asking, and is caught below.
    let root = egui::ViewportId::ROOT;
    for _ in 0..100 {
        h.step();
        if h.output().viewport_output[&root].repaint_delay == Duration::MAX {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Two simulated seconds without input, the sentence box still focused: no frame is asked for
    // (a blinking cursor would ask twice a second, and every frame of the head view costs a software
    // renderer dearly).
    let asked: usize = (0..120)
        .map(|_| {
            h.step();
            usize::from(h.output().viewport_output[&root].repaint_delay != Duration::MAX)
        })
        .sum();
    assert_eq!(asked, 0, "frames asked for while idle");
    // A desktop window would also be asked to repaint twice a second by a blinking cursor.
    for theme in [egui::Theme::Dark, egui::Theme::Light] {
        assert!(!h.ctx.style_of(theme).visuals.text_cursor.blink, "the text cursor must not blink");
    }
}

#[test]
fn the_neuron_tab_opens_on_the_query_pinned_in_the_head_view() {
    let mut h = app("pin this token");
    h.get_by_label("query 2: this").click();
    h.run_steps(2);
    h.get_by_label("Neuron view").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.view, View::Neuron);
    assert_eq!(h.state().settings.neuron_query, 2);
}

#[test]
fn rollout_says_when_it_averages_only_some_heads() {
    let mut h = app("the cat sat on the mat");
    h.get_by_label("None").click();
    h.run_steps(2);
    h.get_by_label("H1").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.heads, [false, true, false, false]);
    h.get_by_label("Rollout / flow").click();
    h.run_steps(3);
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(shown_rollout(&mut h, &[1]), attnviz::analysis::rollout::rollout(&run.attention, &[1]));
    assert!(h.query_by_label_contains("only the heads selected in the side panel (1 of 4): H1").is_some());
    h.get_by_label("Use all heads").click();
    h.run_steps(3);
    let all = shown_rollout(&mut h, &[0, 1, 2, 3]);
    assert_eq!(all, attnviz::analysis::rollout::rollout(&run.attention, &[0, 1, 2, 3]));
    assert!(h.query_by_label_contains("only the heads selected").is_none());
}

#[test]
fn per_head_bars_tell_their_numbers_on_hover() {
    let mut h = app("pin this token");
    h.get_by_label("query 2: this").click();
    h.run_steps(2);
    h.get_by_label("weights of key 1: pin").hover();
    h.run_steps(120);
    let run = h.state().session.run.clone().unwrap();
    let w = run.attention.get(0, 3, 2, 1);
    assert!(h.query_by_label_contains("“this” → “pin”").is_some(), "the tooltip names the pair");
    assert!(h.query_by_label(&format!("H3: {w:.4}")).is_some(), "head 3's weight, exactly as recorded");
}

#[test]
fn the_apps_export_and_the_cli_draw_the_same_pixels() {
    let mut h = app("the cat sat");
    h.get_by_label("L1").click();
    h.run_steps(2);
    h.get_by_label("None").click();
    h.run_steps(2);
    h.get_by_label("H2").click();
    h.run_steps(2);
    h.get_by_label("Heatmap").click();
    h.run_steps(3);
    let dir = tempfile::tempdir().unwrap();
    let from_app = dir.path().join("app.png");
    export_through_dialog(&mut h, &from_app);
    let theme = if h.ctx.theme() == egui::Theme::Dark { "dark" } else { "light" };
    let scale = h.state().settings.export_scale.to_string();
    let from_cli = dir.path().join("cli.png");
    let out = common::output_sandboxed(
        std::process::Command::new(env!("CARGO_BIN_EXE_attnviz"))
            .args(["--model", tiny().to_str().unwrap(), "export", "--text", "the cat sat", "--view", "heatmap"])
            .args([
                "--layer",
                "1",
                "--head",
                "2",
                "--theme",
                theme,
                "--scale",
                &scale,
                "-o",
                from_cli.to_str().unwrap(),
            ])
            .env_remove("ATTNVIZ_MODEL"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (a, c) = (image::open(&from_app).unwrap().to_rgba8(), image::open(&from_cli).unwrap().to_rgba8());
    assert_eq!(a.dimensions(), c.dimensions());
    let differing = a.pixels().zip(c.pixels()).filter(|(x, y)| x != y).count();
    assert_eq!(differing, 0, "pixels that differ between the app's Export and `attnviz export`");
}

#[test]
fn relaunching_with_a_long_remembered_text_draws_at_once_and_derives_in_the_background() {
    let mut storage = MemoryStorage::default();
    let long = "the cat sat on the mat and looked at the dog. ".repeat(60);
    let settings = Settings { text: long, ..Settings::default() };
    eframe::set_value(&mut storage, "attnviz-settings", &settings);
    let embedded = attnviz::model::default_model_dir();
    let mut h = harness_with(Startup { model_dir: Some(embedded), text: None, ..Startup::default() }, Some(storage));
    // The first frame is drawn without waiting for the model: no run yet, a spinner instead.
    h.step();
    assert!(h.state().session.run.is_none(), "the first frame does not wait on the model");
    h.get_by_label_contains("the model…");
    wait_until(&mut h, "the long run", |a| a.session.run.is_some());
    assert_eq!(h.state().session.run.as_ref().unwrap().tokens.len(), 512);
    // The frame that first shows the run does not draw 512 tokens' lines itself: they are
    // rasterized on the derive thread and arrive later.
    assert!(h.state().views.head.lines_pending || h.state().session.derived.any_pending());
    wait_until(&mut h, "the lines", |a| !a.views.head.lines_pending && a.views.head.line_count > 0);
}

/// The labels' rectangles of A's and B's titles in the comparison's side-by-side mode.
fn compare_titles(h: &Harness<'static, AttnvizApp>) -> (egui::Rect, egui::Rect) {
    (h.get_by_label_contains("A: ").rect(), h.get_by_label_contains("B: ").rect())
}

#[test]
fn side_by_side_comparison_fits_side_by_side_and_stacks_when_zoomed_past_the_width() {
    // Fit (the default) puts A and B side by side in any width; zoomed in (36-point cells) they
    // stack in a narrow window and stay side by side in a wide one.
    for (width, zoom, stacked) in [(900.0, None, false), (900.0, Some(36.0), true), (2400.0, Some(36.0), false)] {
        let mut h =
            Harness::builder().with_size(egui::vec2(width, 600.0)).with_step_dt(1.0 / 60.0).build_eframe(|cc| {
                let startup = Startup {
                    model_dir: Some(tiny()),
                    text: Some("the animal did not cross the street".into()),
                    ..Startup::default()
                };
                new_app(&cc.egui_ctx, None, startup)
            });
        wait_until(&mut h, "the first run", |a| a.session.run.is_some());
        h.get_by_label("Compare").click();
        wait_until(&mut h, "run B", |a| a.features.compare.run_b.is_some());
        h.state_mut().settings.zoom.compare = zoom;
        h.run_steps(3);
        let (a, b) = compare_titles(&h);
        let line = h.get_by_label("Compare").rect().height() + 8.0;
        assert!(a.height() < line && b.height() < line, "titles on one line each at {width} px: {a:?} {b:?}");
        if stacked {
            assert!(b.top() > a.bottom(), "B below A at {width} px: {a:?} {b:?}");
        } else {
            assert!((b.top() - a.top()).abs() < 1.0 && b.left() > a.right(), "B beside A at {width} px: {a:?} {b:?}");
        }
    }
}

/// A point inside a window of `size`, for the monkey.
fn point(rng: &mut Rng, size: egui::Vec2) -> egui::Pos2 {
    egui::pos2(rng.below(size.x as usize) as f32, rng.below(size.y as usize) as f32)
}

/// Text a user might type: right-to-left scripts, combining marks, emoji, control characters.
const MONKEY_TEXTS: &[&str] = &[
    "",
    " ",
    "the cat sat",
    "שלום עולם",
    "مرحبا بالعالم",
    "e\u{301}\u{301}\u{301}\u{301} a\u{308}\u{323}",
    "👩‍👩‍👧‍👦 🐈‍⬛ 🇫🇷 ✨",
    "\u{202e}reversed\u{202c} text",
    "Z\u{351}\u{36b}\u{343}\u{36a}\u{302}A\u{334}\u{335}L\u{320}G\u{334}O",
    "日本語のテキスト",
    "tab\tand\u{feff}zero width\u{200b}joined",
    "0",
    "-3",
    "abc",
    "99999999",
    "3.5",
    "1e9",
    "/nonexistent-folder/x.png",
    "/proc/attnviz.png",
];

/// What every frame must show: a pinned token inside the run, and a banner that names the model
/// of the run shown.
fn check_always(h: &Harness<'static, AttnvizApp>, seed: u64, step: usize) {
    let app = h.state();
    let Some(run) = app.session.run.as_ref() else { return };
    if let Some((_, pos)) = app.session.pinned {
        assert!(pos < run.tokens.len(), "seed {seed} step {step}: pinned {pos} of {} tokens", run.tokens.len());
    }
    if app.settings.view != View::Positions {
        let banner = match (&run.intervention, run.playground) {
            (Some(how), _) => format!("MODIFIED MODEL — {how} — not the faithful {}", run.shown_name()),
            (None, true) => format!("PLAYGROUND — random weights: {}", run.shown_name()),
            (None, false) => format!("Faithful model: {}", run.shown_name()),
        };
        if h.query_by_label(&banner).is_none() {
            use egui_kittest::kittest::NodeT;
            let shown: Vec<String> = h
                .query_all_by(|n| n.label().is_some_and(|l| l.contains("model") || l.contains("PLAYGROUND")))
                .filter_map(|n| n.accesskit_node().label())
                .collect();
            panic!("seed {seed} step {step}: no banner “{banner}” in view {:?}; labels: {shown:?}", app.settings.view);
        }
    }
}

/// What must hold once nothing is in flight: the run shown is the run of the text and model shown,
/// and the selections fit it.
fn check_settled(h: &Harness<'static, AttnvizApp>, seed: u64, step: usize) {
    let app = h.state();
    let s = &app.session;
    let at = format!(
        "seed {seed} step {step} (source {:?}, words {}, model {:?}, run {:?}, run error {:?}, load error {:?})",
        app.settings.source,
        app.settings.words,
        s.model.as_ref().map(|m| &m.name),
        s.run.as_ref().map(|r| &r.model_name),
        s.run_error,
        s.load_error,
    );
    assert!(app.session.shown_input_matches(&app.settings), "{at}: the run shown is not of the text and model shown");
    let Some(run) = app.session.run.as_ref() else {
        assert!(app.session.run_error.is_some() || app.session.model.is_none(), "{at}: no run and no reason");
        return;
    };
    let s = &app.settings;
    assert_eq!(run.playground, s.source == attnviz::app::state::Source::Playground, "{at}: run of the wrong source");
    if !run.playground {
        let model = app.session.model.as_ref().unwrap();
        assert_eq!(run.model_name, model.name, "{at}: run of another model");
        assert_eq!(run.intervention.is_some(), !s.interventions.is_faithful(), "{at}: interventions not shown");
    }
    assert!(s.layer_idx < run.attention.layers(), "{at}: layer {} of {}", s.layer_idx, run.attention.layers());
    assert_eq!(s.heads.len(), run.attention.heads(), "{at}: head flags for another shape");
    if let Some((_, pos)) = app.session.pinned {
        assert!(pos < run.tokens.len(), "{at}: pinned {pos}");
    }
}

fn settle(h: &mut Harness<'static, AttnvizApp>, seed: u64, step: usize) {
    let start = Instant::now();
    while h.state().is_busy() || h.state().session.tasks.exporting.is_some() {
        assert!(start.elapsed() < Duration::from_secs(120), "seed {seed} step {step}: never settles");
        std::thread::sleep(Duration::from_millis(5));
        h.step();
    }
    h.run_steps(2);
}

/// Clicks at `pos` with the primary button (`count` times in a row: 2 is a double-click).
fn click_at(h: &mut Harness<'static, AttnvizApp>, pos: egui::Pos2, count: usize) {
    h.event(egui::Event::PointerMoved(pos));
    for _ in 0..count {
        for pressed in [true, false] {
            h.event(egui::Event::PointerButton {
                pos,
                button: egui::PointerButton::Primary,
                pressed,
                modifiers: Modifiers::default(),
            });
        }
    }
}

/// A seeded random walk over the widgets the accessibility tree exposes. `ATTNVIZ_MONKEY_SEED`
/// replays a walk.
fn monkey(steps: usize, default_seed: u64) {
    use egui::accesskit::Role;
    use egui_kittest::kittest::NodeT;
    let seed = std::env::var("ATTNVIZ_MONKEY_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default_seed);
    let root_before = common::root_entries();
    println!("monkey: seed {seed}, {steps} steps (replay with ATTNVIZ_MONKEY_SEED={seed})");
    let mut rng = Rng(seed | 1);
    // The harness panics on a missing glyph unless told otherwise (it overrides the app's own
    // policy, which draws a box): the monkey types scripts no bundled font has.
    let mut h = Harness::builder()
        .with_size(egui::vec2(1280.0, 860.0))
        .with_step_dt(1.0 / 60.0)
        .allow_missing_glyphs()
        .build_eframe(|cc| {
            let startup = Startup {
                model_dir: Some(tiny()),
                text: Some("the monkey sat on the keyboard".into()),
                ..Startup::default()
            };
            new_app(&cc.egui_ctx, None, startup)
        });
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    let size = h.ctx.content_rect().size();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models");
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("config.json"), "{ broken").unwrap();
    let models = [
        fixtures.join("tiny-bert"),
        fixtures.join("tiny-bert-relu"),
        fixtures.join("tiny-gpt2"),
        // A decoder with a head (Continue, step-through) and an encoder–decoder (Target box,
        // Translate, the Encoder / Decoder / Cross switch).
        fixtures.join("tiny-llama"),
        fixtures.join("tiny-bart"),
        broken.path().to_path_buf(),
        PathBuf::from("/nonexistent-model"),
    ];
    let long = "word ".repeat(600);
    for step in 0..steps {
        match rng.below(12) {
            // Click or double-click any widget (not the native file dialogs: headless, they have
            // no desktop to open on).
            0..=3 => {
                let double = rng.below(4) == 0;
                let targets: Vec<egui::Rect> = h
                    .query_all_by(|n| {
                        !n.is_disabled()
                            && n.bounding_box().is_some()
                            && !matches!(n.role(), Role::Window | Role::GenericContainer | Role::Unknown)
                            && !n.label().is_some_and(|l| l == "Open model folder…" || l == "Browse…")
                    })
                    .map(|n| n.rect())
                    .collect();
                if let Some(r) = (!targets.is_empty()).then(|| targets[rng.below(targets.len())]) {
                    click_at(&mut h, r.center(), if double { 2 } else { 1 });
                }
            }
            // Type arbitrary text into any text box.
            4 | 5 => {
                let boxes: Vec<egui::Rect> = h
                    .query_all_by(|n| n.role() == Role::TextInput && n.bounding_box().is_some())
                    .map(|n| n.rect())
                    .collect();
                if !boxes.is_empty() {
                    click_at(&mut h, boxes[rng.below(boxes.len())].center(), 1);
                    h.step();
                    if rng.below(2) == 0 {
                        h.key_press_modifiers(Modifiers::COMMAND, Key::A);
                    }
                    let text =
                        if rng.below(15) == 0 { long.as_str() } else { MONKEY_TEXTS[rng.below(MONKEY_TEXTS.len())] };
                    h.event(egui::Event::Text(text.to_string()));
                }
            }
            // Drag, scroll, hover.
            6 => {
                let (from, to) = (point(&mut rng, size), point(&mut rng, size));
                h.event(egui::Event::PointerMoved(from));
                let button = |pos, pressed| egui::Event::PointerButton {
                    pos,
                    button: egui::PointerButton::Primary,
                    pressed,
                    modifiers: Modifiers::default(),
                };
                h.event(button(from, true));
                h.step();
                h.event(egui::Event::PointerMoved(to));
                h.step();
                h.event(button(to, false));
            }
            7 => {
                h.event(egui::Event::PointerMoved(point(&mut rng, size)));
                h.event(egui::Event::MouseWheel {
                    unit: egui::MouseWheelUnit::Point,
                    delta: egui::vec2(0.0, rng.below(400) as f32 - 200.0),
                    phase: egui::TouchPhase::Move,
                    modifiers: if rng.below(3) == 0 { Modifiers::COMMAND } else { Modifiers::default() },
                    source: egui::MouseWheelSource::Wheel,
                });
            }
            8 => h.key_press(Key::Escape),
            // Switch views, and between the pretrained model and the playground.
            9 => {
                let label = View::ALL[rng.below(View::ALL.len())].label();
                if let Some(r) = h.query_by_label(label).map(|n| n.rect()) {
                    click_at(&mut h, r.center(), 1);
                }
                if rng.below(4) == 0 {
                    let source = h.query_by_label("Playground").or_else(|| h.query_by_label_contains("Pretrained: "));
                    if let Some(r) = source.map(|n| n.rect()) {
                        click_at(&mut h, r.center(), 1);
                    }
                }
            }
            // Load another model (some of them broken).
            10 => {
                if h.query_by_label("Model folder or hub id").is_some() && h.state().session.loading.is_none() {
                    let model = &models[rng.below(models.len())];
                    h.state_mut().views.side.model_path_input = model.display().to_string();
                    if let Some(r) = h.query_by_label("Load").map(|n| n.rect()) {
                        click_at(&mut h, r.center(), 1);
                    }
                }
            }
            // Export, often to a path that cannot be written.
            _ => {
                if h.query_by_label("Export path").is_none() {
                    if let Some(r) =
                        h.query_by_label("Export…").filter(|n| !n.accesskit_node().is_disabled()).map(|n| n.rect())
                    {
                        click_at(&mut h, r.center(), 1);
                    }
                } else {
                    // A relative path is taken from the app's (temporary) working directory.
                    let paths = ["/nonexistent-folder/x.png", "/proc/x.csv", "", "relative/none/x.npz", "monkey.png"];
                    h.state_mut().views.export.path_input = paths[rng.below(paths.len())].to_string();
                    if let Some(r) = h.query_by_label("Save").map(|n| n.rect()) {
                        click_at(&mut h, r.center(), 1);
                    }
                }
            }
        }
        h.run_steps(1 + rng.below(2));
        // Commands raised in a frame change the settings at its end: one more frame without input
        // draws what the settings now say, and that is what is checked.
        h.step();
        check_always(&h, seed, step);
        if step % 25 == 24 || step + 1 == steps {
            settle(&mut h, seed, step);
            check_settled(&h, seed, step);
        }
    }
    // What it typed into the export box and saved went to the app's temporary folders.
    let added: Vec<_> = common::root_entries().difference(&root_before).cloned().collect();
    assert!(added.is_empty(), "seed {seed}: written into the repository's root: {added:?}");
}

#[test]
fn a_monkey_walk_of_150_steps_breaks_nothing() {
    monkey(150, 17);
}

/// The long walk: `cargo test --test app long_monkey -- --ignored --nocapture` (seed from the
/// clock unless `ATTNVIZ_MONKEY_SEED` is set; `ATTNVIZ_MONKEY_STEPS` changes the length).
#[test]
#[ignore = "a long random walk; run with --ignored"]
fn long_monkey_walk_breaks_nothing() {
    let steps = std::env::var("ATTNVIZ_MONKEY_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1200);
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    monkey(steps, clock);
}

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-llama")
}

#[test]
fn continue_streams_the_written_tokens_into_the_views_and_steps_through_them() {
    let mut h = harness_with(
        Startup { model_dir: Some(tiny_llama()), text: Some("The cat sat on".into()), ..Startup::default() },
        None,
    );
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.run_steps(2);
    let prompt = tokens(&h).len();
    h.get_by_label("Continue ▶").click();
    wait_until(&mut h, "the generation", |a| a.session.generation.as_ref().is_some_and(|g| g.finished.is_some()));
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    let g = h.state().session.generation.clone().unwrap();
    // 20 asked for; tiny-llama has 32 positions, so it writes until its context is full or eos.
    assert!(g.written >= 1 && g.written <= 20, "{}", g.written);
    assert_eq!(run.prompt_len, Some(prompt));
    assert_eq!(run.tokens.len(), prompt + g.written);
    assert!(run.is_generated(prompt) && !run.is_generated(prompt - 1));
    assert!(run.label(prompt).starts_with('✎'), "written tokens are marked: {}", run.label(prompt));
    assert_eq!(g.steps.len(), g.written);
    assert!(g.steps.iter().all(|s| s.len() == attnviz::app::worker::TOP_K));
    // The greedy pick is each step's most probable candidate.
    for (i, step) in g.steps.iter().enumerate() {
        assert_eq!(step[0].id, run.tokens.ids[prompt + i]);
    }
    // The newest written token is pinned (its lines in the head view); stepping back pins another.
    assert_eq!(h.state().session.pinned, Some((Side::Query, prompt + g.written - 1)));
    h.get_by_label("◀").click();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, Some((Side::Query, prompt + g.written - 2)));
    assert!(h.query_by_label_contains("The model's candidates at this step").is_some());
    // Typing replaces the generation with a run of the new text.
    h.get_by_label("Sentence A").click();
    h.run_steps(1);
    h.get_by_label("Sentence A").type_text(" the");
    settled(&mut h);
    assert_eq!(h.state().settings.text, "The cat sat on the");
    assert!(h.state().session.generation.is_none());
    assert_eq!(h.state().session.run.as_ref().unwrap().prompt_len, None);
}

/// Every frame that shows a new run of the writing draws it whole: the head view's matrices of
/// that run are there (carried over, not a "computing" placeholder until the derive thread
/// answers) and the newest written token is pinned; each run shown is a prefix of the final one
/// with the same attention rows, and the final one is a fresh pass of the library over the text
/// the library writes.
#[test]
fn each_frame_of_the_writing_shows_its_run_whole_and_the_end_is_the_librarys_pass() {
    use attnviz::app::derive::DeriveKey;
    // The embedded SmolLM2 writes slowly enough here for its tokens to arrive over several frames.
    let smollm2 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/models/SmolLM2-135M-Instruct");
    let mut h = harness_with(
        Startup { model_dir: Some(smollm2.clone()), text: Some("The cat sat on".into()), ..Startup::default() },
        None,
    );
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    h.state_mut().views.generation.max_new = 6;
    h.get_by_label("Continue ▶").click();
    let start = Instant::now();
    // Each run shown while writing (its tokens, its attention), checked at its first frame.
    let mut shown: Vec<Arc<attnviz::analysis::Run>> = Vec::new();
    loop {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for the generation");
        h.step();
        let a = h.state();
        let s = &a.session;
        let Some(run) = s.run.clone() else { continue };
        if run.prompt_len.is_some() && shown.last().is_none_or(|r| !Arc::ptr_eq(r, &run)) {
            let key = DeriveKey::HeadMatrices {
                view_id: s.view_id,
                layer_idx: a.settings.layer_idx,
                hide_special: a.settings.hide_special,
                rollout: None,
            };
            assert!(
                s.derived.head_matrices(&key).is_some(),
                "the frame that shows {} tokens draws the head view's lines, not a placeholder",
                run.tokens.len()
            );
            assert_eq!(s.pinned, Some((Side::Query, run.tokens.len() - 1)), "the newest written token is pinned");
            shown.push(run);
        }
        if s.generation.as_ref().is_some_and(|g| g.finished.is_some()) && !a.is_busy() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    settled(&mut h);
    let last = h.state().session.run.clone().unwrap();
    let g = h.state().session.generation.clone().unwrap();
    assert!(g.written >= 1, "{}", g.written);
    // The library writes the same tokens; the final run is its full pass over them.
    let model = attnviz::model::LoadedModel::load(&smollm2).unwrap();
    let mut lib = attnviz::model::generate::Generator::start(&model, "The cat sat on", 8).unwrap();
    while lib.next(6).unwrap().is_some() {}
    assert_eq!(last.tokens.ids, lib.tokens().ids);
    assert_eq!(last.tokens.len(), last.prompt_len.unwrap() + g.written);
    let full = model
        .run_tokens(
            lib.tokens().clone(),
            None,
            attnviz::model::Capture::Full,
            &attnviz::model::Interventions::default(),
        )
        .unwrap();
    assert_eq!(last.attention.as_slice(), full.attention.as_slice(), "the final run is a fresh pass");
    // Every run shown on the way is a prefix of it: the same tokens, the same attention rows.
    assert!(shown.len() >= 2, "the writing and its end are shown: {}", shown.len());
    let a = &full.attention;
    for run in &shown {
        let n = run.tokens.len();
        assert_eq!(run.tokens.ids[..], last.tokens.ids[..n]);
        for l in 0..a.layers() {
            for hd in 0..a.heads() {
                let (mine, theirs) = (run.attention.head(l, hd), a.head(l, hd));
                for q in 0..n {
                    for k in 0..=q {
                        let (x, y) = (mine[q * n + k], theirs[q * a.keys() + k]);
                        assert!((x - y).abs() < 1e-5, "{n} tokens, layer {l} head {hd} [{q}, {k}]: {x} vs {y}");
                    }
                }
            }
        }
    }
}

#[test]
fn stop_keeps_what_was_written() {
    // The embedded SmolLM2 writes slowly enough (tenths of a second per token here) to be stopped.
    let smollm2 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/models/SmolLM2-135M-Instruct");
    let mut h = harness_with(
        Startup { model_dir: Some(smollm2), text: Some("Once upon a time".into()), ..Startup::default() },
        None,
    );
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.run_steps(2);
    h.state_mut().views.generation.max_new = 40;
    h.get_by_label("Continue ▶").click();
    wait_until(&mut h, "a first written token", |a| a.session.generation.as_ref().is_some_and(|g| g.written >= 1));
    h.get_by_label("■ Stop").click();
    wait_until(&mut h, "the generation to stop", |a| {
        a.session.generation.as_ref().is_some_and(|g| g.finished.is_some())
    });
    settled(&mut h);
    let g = h.state().session.generation.clone().unwrap();
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(g.finished, Some(attnviz::model::generate::Stop::Stopped));
    assert!(g.written >= 1 && g.written < 40, "{}", g.written);
    assert_eq!(run.tokens.len(), run.prompt_len.unwrap() + g.written, "what was written stays");
    assert!(h.state().session.status.as_ref().is_some_and(|s| s.text.contains("stopped")));
}

fn tiny_bart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bart")
}

/// Opens tiny-bart on `source`, with no target yet.
fn seq2seq_app(source: &str) -> Harness<'static, AttnvizApp> {
    let mut h =
        harness_with(Startup { model_dir: Some(tiny_bart()), text: Some(source.into()), ..Startup::default() }, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    h
}

/// Clicks the stack switch's button `label` and waits for what it shows.
fn pick_stack(h: &mut Harness<'static, AttnvizApp>, label: &str) {
    h.get_by_label(label).click();
    settled(h);
}

#[test]
fn encoder_decoder_target_box_switches_encoder_decoder_cross_and_exports_the_cross_head_view() {
    use attnviz::analysis::Stack;
    let mut h = seq2seq_app("The cat sat on the mat.");
    let source = tokens(&h);
    // Without a target: the encoder alone, and the view says so (also when Cross is picked).
    assert!(h.query_by_label_contains("Encoder alone").is_some());
    pick_stack(&mut h, "Cross");
    assert_eq!(h.state().settings.stack, Stack::Cross);
    assert_eq!(tokens(&h), source);
    assert!(h.state().session.run.as_ref().unwrap().key_tokens.is_none());
    pick_stack(&mut h, "Encoder");
    // Typing a target re-runs with the decoder side.
    h.get_by_label("Target").click();
    h.run_steps(1);
    h.get_by_label("Target").type_text("Le chat.");
    wait_until(&mut h, "the run with a target", |a| a.view_data().stack_note.is_none() && !a.is_busy());
    settled(&mut h);
    assert_eq!(h.state().settings.target, "Le chat.");
    assert!(h.query_by_label_contains("Encoder alone").is_none());
    assert_eq!(tokens(&h), source, "the encoder's tokens are the source");
    assert!(h.query_by_label(&format!("key 1: {}", attnviz::analysis::tokens::pretty_label(&source[1]))).is_some());

    // Decoder: the target's tokens (the start token first), causal.
    pick_stack(&mut h, "Decoder");
    let run = h.state().session.run.clone().unwrap();
    let target = run.tokens.tokens.clone();
    assert_ne!(target, source);
    assert!(run.causal && run.key_tokens.is_none() && run.shown_name().contains("decoder self-attention"));
    assert_eq!(h.state().view_data().stack, Some(Stack::Decoder));
    assert!(h.query_by_label(&format!("query 1: {}", run.label(1))).is_some());

    // Cross: target tokens on the left (queries), source tokens on the right (keys).
    pick_stack(&mut h, "Cross");
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.tokens.tokens, target);
    assert_eq!(run.keys().tokens, source);
    assert_eq!((run.attention.seq_len(), run.attention.keys()), (target.len(), source.len()));
    let last_key = source.len() - 1;
    assert!(h.query_by_label(&format!("key {last_key}: {}", run.key_label(last_key))).is_some());
    assert!(h.query_by_label(&format!("query {last_key}: {}", run.key_label(last_key))).is_none());
    assert!(h.query_by_label(&format!("query 1: {}", run.label(1))).is_some());
    // A source token pinned on the key side: only its lines.
    h.get_by_label(&format!("key {last_key}: {}", run.key_label(last_key))).click();
    h.run_steps(2);
    assert_eq!(h.state().session.pinned, Some((Side::Key, last_key)));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cross head view.png");
    export_through_dialog(&mut h, &path);
    assert_png_matches_figure(&h, &path);
    // The heatmap labels target rows and source columns.
    h.get_by_label("Heatmap").click();
    settled(&mut h);
    let cache = &h.state().views.heatmap;
    assert_eq!((cache.keep.len(), cache.keep_keys.len()), (target.len(), source.len()));
    assert!(h.query_by_label_contains("rows: target tokens · columns: source tokens").is_some());
    // Rollout (and flow) are not defined for cross-attention: the view says so instead of drawing,
    // nothing is computed, and an export is refused with the reason.
    h.state_mut().settings.rollout.mode = attnviz::app::state::RolloutMode::Flow;
    h.get_by_label("Rollout / flow").click();
    settled(&mut h);
    assert!(h.query_by_label_contains("not defined for cross-attention").is_some());
    assert!(h.state().features.flow.slot.shown().is_none() && !h.state().features.flow.slot.is_pending());
    h.get_by_label("Export…").click();
    h.run_steps(2);
    retype(&mut h, "Export path", dir.path().join("rollout.png").to_str().unwrap());
    h.state_mut().session.status = None;
    h.get_by_label("Save").click();
    wait_until(&mut h, "the refused export", |a| a.session.tasks.exporting.is_none() && a.session.status.is_some());
    let status = h.state().session.status.clone().unwrap();
    assert!(status.is_error && status.text.contains("not defined for cross-attention"), "{status:?}");
    assert!(!dir.path().join("rollout.png").exists());
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert!(!h.state().views.export.open);
    // Statistics and the model view say which stack they are about.
    h.get_by_label("Head statistics").click();
    settled(&mut h);
    assert!(h.query_by_label_contains("Statistics of the cross-attention").is_some());
    h.get_by_label("Model view").click();
    settled(&mut h);
    assert!(h.query_by_label_contains("All layers × heads of the cross-attention").is_some());
    // Back to the encoder: the source again, remembered as a setting.
    pick_stack(&mut h, "Encoder");
    assert_eq!(tokens(&h), source);
    assert_eq!(h.state().settings.stack, Stack::Encoder);
}

/// An encoder–decoder saved without its head (transformers' `BartModel`) opens with the Target box
/// and all three attentions, but offers no Translate (there is no head to write with).
#[test]
fn an_encoder_decoder_without_a_head_shows_its_attention_and_offers_no_translate() {
    use attnviz::analysis::Stack;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bart-headless");
    let mut h = harness_with(
        Startup { model_dir: Some(dir), text: Some("The cat sat.".into()), text_pair: None, ..Startup::default() },
        None,
    );
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    assert!(h.state().session.model.as_ref().is_some_and(|m| !m.can_translate && !m.can_generate));
    assert!(h.query_by_label("Translate ▶").is_none());
    h.get_by_label("Target").click();
    h.run_steps(1);
    h.get_by_label("Target").type_text("Le chat.");
    wait_until(&mut h, "the run with a target", |a| a.view_data().stack_note.is_none() && !a.is_busy());
    pick_stack(&mut h, "Cross");
    assert_eq!(h.state().settings.stack, Stack::Cross);
    let run = h.state().session.run.clone().unwrap();
    assert!(run.attention.keys() > 1 && run.attention.seq_len() > 1);
}

#[test]
fn translate_fills_the_target_greedily_and_streams_it_into_the_views() {
    let source = "The cat sat on the mat.";
    let mut h = seq2seq_app(source);
    // Both buttons (beside the Target box and in the panel) ask for as many tokens.
    h.state_mut().views.generation.max_new = attnviz::app::views::input_bar::TRANSLATE_TOKENS;
    h.get_all_by_label("Translate ▶").next().unwrap().click();
    wait_until(&mut h, "the translation", |a| a.session.generation.as_ref().is_some_and(|g| g.finished.is_some()));
    settled(&mut h);
    let g = h.state().session.generation.clone().expect("the translation stays: no re-run of the filled target");
    assert!(g.error.is_none(), "{:?}", g.error);
    // What transformers' greedy generate writes (the library's translate, checked by the parity tests).
    let model = attnviz::model::LoadedModel::load(&tiny_bart()).unwrap();
    let want = attnviz::model::generate::translate(&model, source, 64, 8, |_, _, _, _| true).unwrap();
    let want_ids = &want.run.decoder.as_ref().unwrap().tokens.ids;
    assert_eq!(g.written, want_ids.len() - 1);
    assert_eq!(g.steps.len(), g.written);
    assert_eq!(*g.steps, want.steps, "each step's candidates, as the library's translate gives them");
    assert!(g.steps.iter().all(|s| !s.is_empty()));
    assert_eq!(h.state().settings.target, model.tokenizer.decode(&want_ids[1..]));
    // The decoder side shows the written tokens, marked ✎ after the start token.
    h.get_by_label("Decoder").click();
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(&run.tokens.ids, want_ids);
    assert!(run.label(1).starts_with('✎') && !run.label(0).starts_with('✎'));
    assert!(h.state().session.generation.is_some());
}

/// When the line budget applies, the line saying so stays in place while a token is hovered (it
/// says what is drawn then): a line that came and went with the hover moved every token under the
/// pointer, which then lost the hover, and the view jumped up and down.
#[test]
fn the_line_budget_notice_keeps_its_place_while_a_token_is_hovered() {
    // About 75 tokens: 12 heads × 75² lines, more than the budget.
    let text = "the river ran past the old mill where children fed the ducks every morning before school and \
                their teacher explained how water turns a wheel and how the wheel grinds grain into flour"
        .repeat(2);
    let startup =
        Startup { model_dir: Some(attnviz::model::default_model_dir()), text: Some(text), ..Startup::default() };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    let notice = h.get_by_label_contains("strongest of").rect();
    let token = h.get_by_label("query 3: ran").rect();
    h.get_by_label("query 3: ran").hover();
    h.run_steps(2);
    assert!(h.state().views.head.hovered.is_some(), "the token is hovered");
    let during = h.get_by_label_contains("Every line of the selected token is drawn").rect();
    assert_eq!(notice.top(), during.top(), "the notice keeps its line");
    assert_eq!(h.get_by_label("query 3: ran").rect(), token, "the hovered token stays under the pointer");
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models").join(name)
}

/// The app on a fixture with a language-model head, settled, with the logit-lens tab open.
fn lens_app(model: &str, text: &str) -> Harness<'static, AttnvizApp> {
    let startup = Startup { model_dir: Some(fixture(model)), text: Some(text.into()), ..Startup::default() };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    settled(&mut h);
    h.get_by_label("Logit lens").click();
    settled(&mut h);
    h
}

#[test]
fn logit_lens_shows_the_library_lens_selects_positions_and_follows_watched_tokens() {
    use attnviz::app::state::LensMode;
    use attnviz::model::{Interventions, LoadedModel};
    let text = "the cat sat on the mat";
    let mut h = lens_app("tiny-gpt2", text);
    let model = LoadedModel::load(&fixture("tiny-gpt2")).unwrap();
    let tokens = model.run(text, None).unwrap().tokens;
    let n = tokens.len();
    let expected = model.lens(&tokens, &[], 5, &[], &Interventions::default()).unwrap();
    {
        let lens = &h.state().features.lens.state;
        assert!(lens.grid_done() && lens.in_flight.is_none(), "the whole grid arrived");
        // The selected (last) position's column came first, alone, then the grid.
        assert_eq!(lens.parts[0].lens.positions, [n - 1]);
        assert_eq!(lens.parts[1].lens.positions, (0..n).collect::<Vec<_>>());
        assert_eq!(lens.streams, expected.streams);
        for s in 0..expected.streams {
            for p in 0..n {
                let shown = lens.cell(s, p).unwrap();
                let library: Vec<(u32, f32)> = expected.cell(s, p).collect();
                assert_eq!(shown, library, "cell ({s}, {p})");
                // The cell's text is the top token's label, its colour value its probability.
                let (label, value) = lens.shown(LensMode::Probability, 0, s, p).unwrap();
                assert_eq!(label, attnviz::analysis::tokens::pretty_label(&model.tokenizer.token_of(library[0].0)));
                assert_eq!(value, library[0].1);
            }
        }
    }
    // Hover a cell: the view knows which; a click on it selects its position.
    h.get_by_label("Lens block 1 at position 2").hover();
    h.run_steps(2);
    assert_eq!(h.state().views.features.lens.hovered, Some((1, 2)));
    h.get_by_label("Lens block 1 at position 2").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.lens.position, Some(2));
    // ← moves the selection.
    h.key_press(Key::ArrowLeft);
    h.run_steps(2);
    assert_eq!(h.state().settings.lens.position, Some(1));
    // Watch a token: its probability and rank at every stream equal the library's.
    retype(&mut h, "Watch token", " mat");
    h.get_by_label("Add").click();
    settled(&mut h);
    let id = model.tokenizer.single_id(" mat").unwrap();
    assert_eq!(h.state().settings.lens.watch, [" mat"]);
    assert_eq!(h.state().features.lens.state.watched, [(" mat".to_string(), id)]);
    let watched = model.lens(&tokens, &[], 5, &[id], &Interventions::default()).unwrap();
    let lens = &h.state().features.lens.state;
    for s in 0..watched.streams {
        for p in 0..n {
            let (got_id, prob, rank) = lens.tracked(1, s, p).unwrap();
            assert_eq!(
                (got_id, prob, rank),
                (id, watched.tracked[1].probs[s * n + p], watched.tracked[1].ranks[s * n + p])
            );
            let (pred, _, pred_rank) = lens.tracked(0, s, p).unwrap();
            assert_eq!((pred, pred_rank), (watched.tracked[0].ids[p], watched.tracked[0].ranks[s * n + p]));
        }
    }
    // Rank mode: each cell the rank of the final prediction.
    h.get_by_label("Rank").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.lens.mode, LensMode::Rank);
    let (label, _) = h.state().features.lens.state.shown(LensMode::Rank, 0, 0, 3).unwrap();
    assert_eq!(label, watched.tracked[0].ranks[3].to_string());
    assert!(!h.state().is_busy(), "nothing computes once the lens is there");
    assert_idle(&mut h);
    // A new text: the lens is of it (nothing of the old text stays).
    h.get_by_label("Sentence A").focus();
    h.step();
    h.get_by_label("Sentence A").type_text(" again");
    wait_until(&mut h, "the new text's lens", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.len() > n) && a.features.lens.state.grid_done() && !a.is_busy()
    });
    let tokens = model.run(&h.state().settings.text, None).unwrap().tokens;
    let again = model.lens(&tokens, &[], 5, &[id], &Interventions::default()).unwrap();
    let lens = &h.state().features.lens.state;
    assert_eq!(lens.positions, tokens.len());
    for p in 0..tokens.len() {
        assert_eq!(lens.cell(again.streams - 1, p).unwrap(), again.cell(again.streams - 1, p).collect::<Vec<_>>());
    }
}

/// A second of frames without input asks for no further frame (nothing repaints continuously).
fn assert_idle(h: &mut Harness<'static, AttnvizApp>) {
    h.hover_at(egui::pos2(5.0, 850.0));
    h.run_steps(3);
    let root = egui::ViewportId::ROOT;
    let asked: usize = (0..60)
        .map(|_| {
            h.step();
            usize::from(h.output().viewport_output[&root].repaint_delay != Duration::MAX)
        })
        .sum();
    assert_eq!(asked, 0, "frames asked for while idle");
}

#[test]
fn logit_lens_exports_png_and_numbers() {
    let mut h = lens_app("tiny-llama", "one two three");
    let dir = tempfile::tempdir().unwrap();
    for name in ["lens.png", "lens.csv", "lens.npz"] {
        let path = dir.path().join(name);
        export_through_dialog(&mut h, &path);
        let status = h.state().session.status.clone().unwrap();
        assert!(!status.is_error, "{status:?}");
        let bytes = std::fs::read(&path).unwrap();
        match name {
            "lens.png" => {
                let image = image::load_from_memory(&bytes).unwrap();
                assert!(image.width() > 100 && image.height() > 100);
            }
            "lens.csv" => {
                let csv = String::from_utf8(bytes).unwrap();
                let lens = &h.state().features.lens.state;
                assert_eq!(csv.lines().count(), lens.streams + 1, "a header and one line per stream");
                let top = lens.cell(0, 0).unwrap()[0].1;
                let first: f32 = csv.lines().nth(1).unwrap().split(',').nth(1).unwrap().parse().unwrap();
                assert_eq!(first, top);
            }
            _ => assert_eq!(&bytes[..2], b"PK", "an npz is a zip"),
        }
    }
}

#[test]
fn logit_lens_says_why_a_model_without_a_head_has_none() {
    let h = lens_app("tiny-bert", "no head here");
    let why = h.state().features.lens.refusal.clone().expect("tiny-bert has no head");
    assert!(why.contains("no language-model head"), "{why}");
    h.get_by_label(&why);
    assert!(h.state().features.lens.state.key.is_none(), "nothing is computed");
    assert!(!h.state().is_busy());
}

#[test]
fn logit_attribution_shows_the_library_terms_and_a_clicked_heads_effect() {
    use attnviz::model::{Interventions, LoadedModel};
    let text = "the cat sat on the mat";
    let mut h = lens_app("tiny-llama", text);
    h.get_by_label("Logit attribution").click();
    settled(&mut h);
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    let tokens = model.run(text, None).unwrap().tokens;
    let n = tokens.len();
    let faithful = Interventions::default();
    let expected = model.attribute(&tokens, n - 1, None, None, &faithful).unwrap();
    let shown =
        |h: &Harness<'static, AttnvizApp>| h.state().features.attribution.dla.shown().unwrap().1.0.clone().unwrap();
    assert_eq!(*shown(&h), expected, "the last position, the top prediction");
    // The view says that the terms sum to the logit, with the numbers shown.
    h.get_by_label_contains(&format!("Σ terms = {:.4} = logit {:.4}", expected.total(), expected.logit));
    // A head's cell: hovering shows its number; a click selects it and lists what it promotes.
    h.get_by_label("Attribution of L1 H2").click();
    settled(&mut h);
    assert_eq!(h.state().settings.attribution.head, Some((1, 2)));
    // The attention views now show that head; the view stays.
    assert_eq!((h.state().settings.layer_idx, h.state().settings.selected_heads()), (1, vec![2]));
    assert_eq!(h.state().settings.view, View::Attribution);
    let effect = model.head_effect(&tokens, n - 1, (1, 2), 8, &faithful).unwrap();
    let shown_effect = h.state().features.attribution.effect.shown().unwrap().1.clone().unwrap();
    let ids: Vec<f32> = shown_effect.promoted.iter().map(|(_, v)| *v).collect();
    assert_eq!(ids, effect.promoted.iter().map(|(_, v)| *v).collect::<Vec<_>>());
    let first = &shown_effect.promoted[0];
    h.get_by_label_contains(&format!("“{}” {:+.3}", first.0, first.1));
    // A difference "A − B" at another position, typed.
    h.key_press(Key::ArrowLeft);
    retype(&mut h, "Target token", " the");
    retype(&mut h, "− versus", " mat");
    settled(&mut h);
    assert_eq!(h.state().settings.attribution.position, Some(n - 2));
    let (a, b) = (model.tokenizer.single_id(" the").unwrap(), model.tokenizer.single_id(" mat").unwrap());
    let difference = model.attribute(&tokens, n - 2, Some(a), Some(b), &faithful).unwrap();
    assert_eq!(*shown(&h), difference);
    assert!((difference.total() - f64::from(difference.logit)).abs() < 1e-3);
    // Export the grid as PNG and CSV.
    let dir = tempfile::tempdir().unwrap();
    for name in ["dla.png", "dla.csv"] {
        let path = dir.path().join(name);
        export_through_dialog(&mut h, &path);
        assert!(!h.state().session.status.as_ref().unwrap().is_error);
        let bytes = std::fs::read(&path).unwrap();
        if name.ends_with("png") {
            assert!(image::load_from_memory(&bytes).unwrap().width() > 100);
        } else {
            let csv = String::from_utf8(bytes).unwrap();
            let l1: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
            assert_eq!(l1[0], "L1");
            assert_eq!(l1[3].parse::<f32>().unwrap(), difference.heads[difference.heads_per_layer + 2]);
        }
    }
    // The selected head opens in the heatmap.
    h.get_by_label("Open in the heatmap").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.view, View::Heatmap);
    assert_eq!(h.state().settings.layer_idx, 1);
    assert_eq!(h.state().settings.selected_heads(), [2]);
}

#[test]
fn head_roles_colour_the_statistics_grid_and_the_probe_shows_induction_heads() {
    use attnviz::analysis::roles::HeadScores;
    use attnviz::model::{Capture, Interventions, LoadedModel};
    let text = "a cat and a cat and a cat";
    let mut h = lens_app("tiny-llama", text);
    h.get_by_label("Head statistics").click();
    settled(&mut h);
    h.get_by_label("Induction").click();
    settled(&mut h);
    assert_eq!(h.state().settings.stats_role, Some(2));
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    let run = model.run(text, None).unwrap();
    let expected = HeadScores::compute(&run.attention, &run.tokens.ids);
    let shown = |h: &Harness<'static, AttnvizApp>| {
        let s = &h.state().session;
        s.derived.roles(s.view_id).unwrap().clone().unwrap()
    };
    assert_eq!(format!("{:?}", shown(&h)), format!("{expected:?}"), "NaN where undefined");
    // The top head is named with its score.
    let (l, hd, v) = expected.top(&expected.induction, 1)[0];
    h.get_by_label_contains(&format!("Top induction heads: L{l} H{hd} ({v:.2})"));
    // The first-token score explains attention sinks.
    h.get_by_label("First token (sink)").click();
    settled(&mut h);
    assert_eq!(h.state().settings.stats_role, Some(3));
    h.get_by_label_contains("Attention sinks");
    // The probe: repeated random tokens, the scores of its run.
    h.get_by_label("Probe: repeated random tokens").click();
    settled(&mut h);
    assert!(h.state().session.probe_shown);
    assert_eq!(h.state().settings.stats_role, Some(2), "the probe shows induction");
    let probe = model.probe_tokens(15, 0).unwrap();
    let probe_run = model.run_tokens(probe.clone(), None, Capture::Full, &Interventions::default()).unwrap();
    assert_eq!(h.state().session.run.as_ref().unwrap().tokens.ids, probe.ids);
    let probed = HeadScores::compute(&probe_run.attention, &probe_run.tokens.ids);
    assert_eq!(format!("{:?}", shown(&h)), format!("{probed:?}"));
    assert!(probed.induction.iter().all(|v| !v.is_nan()), "every score is defined on the probe");
    // Export the scores; a click on a head opens it in the heatmap.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("induction.csv");
    h.get_by_label("Export…").click();
    h.run_steps(2);
    retype(&mut h, "Export path", path.to_str().unwrap());
    h.get_by_label("Save").click();
    wait_until(&mut h, "the export", |a| a.session.tasks.exporting.is_none() && path.is_file());
    let csv = std::fs::read_to_string(&path).unwrap();
    let cell: f32 = csv.lines().nth(1).unwrap().split(',').nth(1).unwrap().parse().unwrap();
    assert_eq!(cell, probed.induction[0]);
    h.get_by_label("Statistics of layer 1 head 0").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.view, View::Heatmap);
    // Typing goes back to the text.
    h.get_by_label("Sentence A").focus();
    h.step();
    h.get_by_label("Sentence A").type_text(" again");
    wait_until(&mut h, "the text's run", |a| !a.session.probe_shown && a.session.run.is_some());
}

#[test]
fn contribution_graph_draws_the_library_routes_and_a_clicked_edge_selects_its_head() {
    use attnviz::analysis::contrib::Node;
    use attnviz::model::{Interventions, LoadedModel};
    let text = "the cat sat on the mat";
    let mut h = lens_app("tiny-llama", text);
    h.get_by_label("Contribution graph").click();
    settled(&mut h);
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    let tokens = model.run(text, None).unwrap().tokens;
    let n = tokens.len();
    let faithful = Interventions::default();
    let expected = model.contributions(&tokens, &faithful).unwrap();
    let figure = |h: &Harness<'static, AttnvizApp>| match h.state().current_figure() {
        attnviz::export::Figure::Graph(g) => g,
        other => panic!("{other:?}"),
    };
    let routes = expected.graph.routes(n - 1, 0.04);
    let shown = figure(&h);
    assert!(!routes.is_empty());
    assert_eq!(
        shown.edges.iter().map(|e| e.weight).collect::<Vec<_>>(),
        routes.iter().map(|e| e.weight).collect::<Vec<_>>()
    );
    // Every node names its logit-lens top token: the prediction's node the model's own top token.
    let top = expected.lens.as_ref().unwrap().cell(expected.graph.layers.len(), n - 1).next().unwrap().0;
    assert_eq!(shown.nodes[0].label, attnviz::analysis::tokens::pretty_label(&model.tokenizer.token_of(top)));
    // The threshold slider (keyboard: one step up) changes the routes.
    h.get_by_role_and_label(egui::accesskit::Role::Slider, "Threshold").focus();
    h.step();
    h.key_press(Key::ArrowRight);
    h.run_steps(2);
    let threshold = h.state().settings.graph.threshold;
    assert!((threshold - 0.045).abs() < 1e-6, "{threshold}");
    let fewer = expected.graph.routes(n - 1, threshold);
    assert_eq!(figure(&h).edges.len(), fewer.len());
    // A click on an attention edge selects its strongest head; what it promotes is listed.
    let (i, edge) =
        fewer.iter().enumerate().find(|(_, e)| matches!(e.to, Node::Attn(..)) && !e.heads.is_empty()).unwrap();
    let Node::Attn(layer, to) = edge.to else { unreachable!() };
    let head = usize::from(edge.heads[0].0);
    let name = format!("Edge {}", figure(&h).edges[i].name);
    h.get_by_label(&name).click();
    settled(&mut h);
    assert_eq!(h.state().settings.graph.head, Some((usize::from(layer), head, to as usize)));
    assert_eq!((h.state().settings.layer_idx, h.state().settings.selected_heads()), (usize::from(layer), vec![head]));
    let effect = model.head_effect(&tokens, to as usize, (usize::from(layer), head), 8, &faithful).unwrap();
    let shown_effect = h.state().features.attribution.effect.shown().unwrap().1.clone().unwrap();
    assert_eq!(
        shown_effect.promoted.iter().map(|p| p.1).collect::<Vec<_>>(),
        effect.promoted.iter().map(|p| p.1).collect::<Vec<_>>()
    );
    // Export: the PNG decodes, the CSV lists the edges.
    let dir = tempfile::tempdir().unwrap();
    for name in ["graph.png", "graph.csv"] {
        let path = dir.path().join(name);
        export_through_dialog(&mut h, &path);
        assert!(!h.state().session.status.as_ref().unwrap().is_error);
        let bytes = std::fs::read(&path).unwrap();
        if name.ends_with("png") {
            assert!(image::load_from_memory(&bytes).unwrap().height() > 100);
        } else {
            assert_eq!(String::from_utf8(bytes).unwrap().lines().count(), fewer.len() + 1);
        }
    }
    h.get_by_label("Open in the heatmap").click();
    h.run_steps(2);
    assert_eq!(h.state().settings.view, View::Heatmap);
    assert_eq!(h.state().settings.layer_idx, usize::from(layer));
}

#[test]
fn contribution_graph_says_why_a_post_ln_model_has_none() {
    let h = lens_app("tiny-bert", "post norm");
    let mut h = h;
    h.get_by_label("Contribution graph").click();
    settled(&mut h);
    let why = h.state().features.graph.refusal.clone().expect("BERT normalises after each block");
    h.get_by_label(&why);
    assert!(h.state().features.graph.slot.shown().is_none());
}

/// Opens tiny-llama on `text` and waits for its first run.
fn llama_app(text: &str) -> Harness<'static, AttnvizApp> {
    let mut h =
        harness_with(Startup { model_dir: Some(tiny_llama()), text: Some(text.into()), ..Startup::default() }, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h.run_steps(2);
    h
}

/// Presses Continue ▶ and waits for the generation to end.
fn continue_text(h: &mut Harness<'static, AttnvizApp>) {
    h.get_by_label("Continue ▶").click();
    wait_until(h, "the generation", |a| a.session.generation.as_ref().is_some_and(|g| g.finished.is_some()));
    settled(h);
}

#[test]
fn continue_writes_with_the_interventions_shown_and_says_so() {
    let mut h = llama_app("The cat sat on");
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    h.get_by_label("Ablate layer 0 head 1").click();
    h.get_by_label("Ablate layer 1 head 3").click();
    wait_until(&mut h, "the ablated run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_some()));
    h.state_mut().views.generation.max_new = 6;
    continue_text(&mut h);
    let iv = h.state().settings.interventions.clone();
    assert_eq!(iv.ablated.len(), 2);
    let run = h.state().session.run.clone().unwrap();
    let g = h.state().session.generation.clone().unwrap();
    assert_eq!(run.intervention.as_deref(), Some("ablated heads 0:1,1:3"), "the written run is the modified model's");
    assert!(h.query_by_label_contains("MODIFIED MODEL — ablated heads 0:1,1:3").is_some(), "and the banner says so");
    assert!(h.query_by_label_contains("Faithful model").is_none());
    // The library writes the same with the same interventions, and differently without them.
    let model = attnviz::model::LoadedModel::load(&tiny_llama()).unwrap();
    let write = |iv: &attnviz::model::Interventions| {
        let mut lib =
            attnviz::model::generate::Generator::start_modified(&model, "The cat sat on", 8, None, iv).unwrap();
        while lib.next(6).unwrap().is_some() {}
        (lib.tokens().ids.clone(), lib.steps.clone())
    };
    let (ids, steps) = write(&iv);
    assert_eq!(run.tokens.ids, ids);
    assert_eq!(g.steps.len(), steps.len());
    for (app_step, lib_step) in g.steps.iter().zip(&steps) {
        for (a, b) in app_step.iter().zip(lib_step) {
            assert_eq!(a.id, b.id);
            assert!((a.prob - b.prob).abs() < 1e-6, "{} vs {}", a.prob, b.prob);
        }
    }
    let (_, faithful) = write(&attnviz::model::Interventions::default());
    assert!(
        (faithful[0][0].prob - steps[0][0].prob).abs() > 1e-4,
        "ablating heads changes the candidates: {} vs {}",
        faithful[0][0].prob,
        steps[0][0].prob
    );
    // The recorded attention is the modified model's full pass over prompt and continuation.
    let full = model.run_tokens(run.tokens.clone(), None, attnviz::model::Capture::Full, &iv).unwrap();
    for (x, y) in run.attention.as_slice().iter().zip(full.attention.as_slice()) {
        assert!((x - y).abs() < 1e-5);
    }
}

#[test]
fn interventions_belong_to_the_model_they_were_set_on() {
    let mut h = llama_app("The cat sat on");
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    for head in 0..4 {
        h.get_by_label(&format!("Ablate layer 0 head {head}")).click();
    }
    h.get_by_label("Ablate layer 1 head 2").click();
    wait_until(&mut h, "the ablated run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_some()));
    assert_eq!(h.state().settings.interventions.ablated.len(), 5);
    // Another model of the same shape (2 layers × 4 heads): nothing is carried over.
    load(&mut h, &tiny());
    settled(&mut h);
    assert!(h.state().settings.interventions.is_faithful(), "{:?}", h.state().settings.interventions);
    assert!(h.state().session.run.as_ref().unwrap().intervention.is_none());
    let status = h.state().session.status.clone().unwrap().text;
    assert!(status.contains("interventions reset") && status.contains("ablated heads 0:0,0:1,0:2,0:3,1:2"), "{status}");
    assert!(h.query_by_label_contains("interventions reset to the faithful model").is_some(), "the notice is shown");
    // And back: they are not revived either.
    load(&mut h, &tiny_llama());
    settled(&mut h);
    assert!(h.state().settings.interventions.is_faithful());
    // Set on this model, they stay with it across a launch.
    h.get_by_label("Ablate layer 1 head 0").click();
    settled(&mut h);
    let mut storage = MemoryStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    drop(h);
    let mut h2 = harness_with(Startup::default(), Some(storage));
    wait_until(&mut h2, "the restored run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_some()));
    assert_eq!(h2.state().session.run.as_ref().unwrap().intervention.as_deref(), Some("ablated heads 1:0"));
}

#[test]
fn the_playground_shows_no_grouped_query_attention_of_the_pretrained_model() {
    // tiny-llama: 4 query heads share 2 key/value heads; the playground's 4 heads share nothing.
    let mut h = llama_app("The cat sat on");
    assert!(h.query_by_label_contains("4 query heads share 2 key/value heads").is_some());
    h.get_by_label("Playground").click();
    wait_until(&mut h, "the playground run", |a| a.session.run.as_ref().is_some_and(|r| r.playground));
    h.run_steps(2);
    assert_eq!(h.state().session.run.as_ref().unwrap().attention.heads(), 4);
    assert!(h.query_by_label_contains("key/value head").is_none(), "no grouping text or chip tooltips");
    assert!(h.query_by_label_contains("query heads share").is_none());
    h.get_by_label_contains("Pretrained:").click();
    wait_until(&mut h, "the pretrained run", |a| a.session.run.as_ref().is_some_and(|r| !r.playground));
    h.run_steps(2);
    assert!(h.query_by_label_contains("4 query heads share 2 key/value heads").is_some());
}

#[test]
fn visiting_the_playground_keeps_the_written_text_and_the_selection() {
    let mut h = llama_app("The cat sat on");
    h.state_mut().views.generation.max_new = 5;
    continue_text(&mut h);
    let written = h.state().session.run.clone().unwrap();
    let g = h.state().session.generation.clone().unwrap();
    assert!(g.written >= 1);
    h.get_by_label("L1").click();
    h.get_by_label("None").click();
    h.get_by_label("H2").click();
    h.run_steps(2);
    assert_eq!((h.state().settings.layer_idx, h.state().settings.heads.clone()), (1, vec![false, false, true, false]));
    // The playground with one layer of two heads.
    h.get_by_label("Playground").click();
    h.run_steps(2);
    retype_number(&mut h, "layers", "1");
    retype_number(&mut h, "heads", "2");
    wait_until(&mut h, "the playground run", |a| {
        a.session.run.as_ref().is_some_and(|r| r.playground && r.attention.layers() == 1 && r.attention.heads() == 2)
    });
    settled(&mut h);
    assert_eq!(h.state().settings.layer_idx, 0);
    assert!(
        h.state().session.status.as_ref().is_none_or(|s| !s.text.starts_with("Wrote")),
        "no status about tokens not shown"
    );
    h.get_by_label_contains("Pretrained:").click();
    wait_until(&mut h, "the pretrained run", |a| a.session.run.as_ref().is_some_and(|r| !r.playground));
    settled(&mut h);
    let back = h.state().session.run.clone().unwrap();
    assert_eq!(back.tokens.ids, written.tokens.ids, "the written tokens are back");
    assert_eq!(back.prompt_len, written.prompt_len);
    assert_eq!(h.state().session.generation.as_ref().map(|g| g.written), Some(g.written));
    assert_eq!((h.state().settings.layer_idx, h.state().settings.heads.clone()), (1, vec![false, false, true, false]));
    let status = h.state().session.status.clone().unwrap();
    assert!(status.text.starts_with(&format!("Wrote {} tokens", g.written)), "{status:?}");
    // The playground kept its own selection too.
    h.get_by_label("Playground").click();
    wait_until(&mut h, "the playground run", |a| a.session.run.as_ref().is_some_and(|r| r.playground));
    assert_eq!(h.state().settings.heads.len(), 2);
}

#[test]
fn difference_of_the_apps_own_example_pair_is_drawn_with_the_differing_token_marked() {
    // The embedded all-MiniLM-L6-v2 on the example sentence and the comparison's example
    // ("…too tired." / "…too wide."): 16 tokens each.
    let mut h = harness_with(Startup::default(), None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    assert_eq!(h.state().settings.text, attnviz::app::state::EXAMPLE_SENTENCE);
    h.get_by_label("Compare").click();
    h.run_steps(2);
    h.get_by_label("Difference B − A").click();
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.is_some());
    settled(&mut h);
    let (a, b) = (h.state().session.run.clone().unwrap(), h.state().features.compare.run_b.clone().unwrap());
    assert_eq!((a.tokens.len(), b.tokens.len()), (16, 16));
    assert!(h.query_by_label_contains("needs as many tokens").is_none(), "not refused");
    assert!(h.query_by_label_contains("The tokens differ at position 13 (“tired” / “wide”)").is_some());
    assert!(matches!(h.state().current_figure(), attnviz::export::Figure::Compare { difference: true, .. }));
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("difference.csv");
    export_through_dialog(&mut h, &csv);
    let rows = csv_rows(&csv);
    assert_eq!(rows[14][0], "tired ≠ wide", "the differing row is marked");
    assert_eq!(rows[0][14], "tired ≠ wide", "and its column");
    assert_eq!(rows[3][0], "animal");
    let heads: Vec<usize> = (0..12).collect();
    let (am, bm) = (a.attention.mean_of_heads(0, &heads), b.attention.mean_of_heads(0, &heads));
    let v: f32 = rows[14][14].parse().unwrap();
    assert!((v - (bm[13 * 16 + 13] - am[13 * 16 + 13])).abs() < 1e-6);
}

#[test]
fn the_written_continuation_is_shown_as_readable_text_and_copied() {
    let mut h = llama_app("The cat sat on");
    h.state_mut().views.generation.max_new = 4;
    continue_text(&mut h);
    let run = h.state().session.run.clone().unwrap();
    let prompt = run.prompt_len.unwrap();
    let model = attnviz::model::LoadedModel::load(&tiny_llama()).unwrap();
    let written = model.tokenizer.decode(&run.tokens.ids[prompt..]);
    assert!(!written.trim().is_empty());
    let g = h.state().session.generation.clone().unwrap();
    assert_eq!(g.text.as_deref(), Some(written.as_str()), "the tokenizer's decoding of what it wrote");
    let full = format!("The cat sat on{written}");
    assert!(h.query_by_label(&full).is_some(), "prompt and continuation shown as one text: {full:?}");
    h.get_by_label("Copy").click();
    h.step();
    let copied = h.output().platform_output.commands.iter().any(|c| *c == egui::OutputCommand::CopyText(full.clone()));
    assert!(copied, "{:?}", h.output().platform_output.commands);
}

/// Whether the button labelled `label` is shown selected.
fn button_selected(h: &Harness<'static, AttnvizApp>, label: &str) -> bool {
    use egui_kittest::kittest::NodeT;
    let node = h.get_all_by_label(label).find(|n| n.accesskit_node().role() == egui::accesskit::Role::Button).unwrap();
    node.accesskit_node().toggled() == Some(egui::accesskit::Toggled::True)
}

#[test]
fn the_embedded_model_loaded_looks_selected() {
    let mut h = harness_with(Startup::default(), None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    assert!(button_selected(&h, "all-MiniLM-L6-v2"));
    assert!(!button_selected(&h, "SmolLM2-135M-Instruct"));
    h.get_by_label("SmolLM2-135M-Instruct").click();
    h.step();
    wait_until(&mut h, "SmolLM2", |a| a.session.model.as_ref().is_some_and(|m| m.name.contains("SmolLM2")));
    assert!(button_selected(&h, "SmolLM2-135M-Instruct"));
    assert!(!button_selected(&h, "all-MiniLM-L6-v2"));
    // Another folder: neither.
    load(&mut h, &tiny());
    h.run_steps(2);
    assert!(!button_selected(&h, "SmolLM2-135M-Instruct") && !button_selected(&h, "all-MiniLM-L6-v2"));
}

#[test]
fn changed_settings_are_saved_a_moment_later_without_waiting_for_a_clean_exit() {
    let mut h = app("remember this");
    let mut storage = MemoryStorage::default();
    let t0 = Instant::now();
    // Launch settings are written once, a moment later.
    assert!(h.state_mut().autosave(&mut storage, t0).is_some());
    assert!(h.state_mut().autosave(&mut storage, t0 + attnviz::app::SAVE_AFTER).is_none());
    assert!(storage.0.contains_key("attnviz-settings"));
    storage.0.clear();
    assert!(h.state_mut().autosave(&mut storage, t0 + Duration::from_secs(5)).is_none(), "nothing changed");
    assert!(storage.0.is_empty(), "nothing written when nothing changed");
    h.get_by_label("L1").click();
    h.run_steps(2);
    let t1 = t0 + Duration::from_secs(10);
    let wait = h.state_mut().autosave(&mut storage, t1).unwrap();
    assert_eq!(wait, attnviz::app::SAVE_AFTER, "debounced");
    // Another change restarts the wait.
    h.get_by_label("Heatmap").click();
    h.run_steps(2);
    let t2 = t1 + Duration::from_millis(600);
    assert_eq!(h.state_mut().autosave(&mut storage, t2), Some(attnviz::app::SAVE_AFTER));
    assert!(h.state_mut().autosave(&mut storage, t2 + Duration::from_millis(500)).is_some());
    assert!(storage.0.is_empty());
    assert!(h.state_mut().autosave(&mut storage, t2 + attnviz::app::SAVE_AFTER).is_none());
    // What was written is what a relaunch restores, with no clean exit in between.
    let saved = h.state().settings.clone();
    drop(h); // as a kill: the harness never calls save() at exit
    let h2 = harness_with(Startup::default(), Some(storage));
    assert_eq!(h2.state().settings.layer_idx, 1);
    assert_eq!(h2.state().settings.view, View::Heatmap);
    assert_eq!(h2.state().settings.text, saved.text);
}

fn attention_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attention").join(name)
}

#[test]
fn an_attention_file_opens_in_every_view_that_needs_only_attention() {
    let mut h = app("The cat sat.");
    let model_run = h.state().session.run.clone().unwrap();
    // A bad file first: the reason is shown, the model's run stays.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.npz");
    std::fs::write(&bad, b"PK\x03\x04 not really").unwrap();
    load(&mut h, &bad);
    wait_until(&mut h, "the file's error", |a| a.session.load_error.is_some());
    assert!(h.state().session.load_error.as_deref().unwrap().contains("broken.npz: not a NumPy .npz archive"));
    assert!(h.query_all_by_label_contains("broken.npz: not a NumPy .npz archive").next().is_some(), "shown");
    assert_eq!(h.state().settings.source, attnviz::app::state::Source::Pretrained);
    assert!(Arc::ptr_eq(h.state().session.run.as_ref().unwrap(), &model_run), "nothing lost");
    // The vision transformer's patches.
    let vit = attention_fixture("vit.npz");
    load(&mut h, &vit);
    wait_until(&mut h, "the file", |a| a.settings.source == attnviz::app::state::Source::File);
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    assert_eq!((run.attention.layers(), run.attention.heads(), run.tokens.len()), (2, 4, 17));
    assert!(h.query_by_label_contains("ATTENTION FILE — vit.npz").is_some());
    assert!(head_lines(&mut h) > 0, "the head view draws its lines");
    // Typing changes nothing: the file is the run.
    h.get_by_label("Sentence A").click();
    h.get_by_label("Sentence A").type_text(" more");
    settled(&mut h);
    assert!(Arc::ptr_eq(h.state().session.run.as_ref().unwrap(), &run));
    // Model view, heatmap, statistics (with head roles on the labels), rollout: drawn.
    for view in ["Model view", "Heatmap", "Head statistics", "Rollout / flow"] {
        h.get_by_label(view).click();
        settled(&mut h);
    }
    assert!(h.state().session.derived.rollout(h.state().session.view_id, &[0, 1, 2, 3]).is_some());
    // The views that run the model say so.
    for view in ["Neuron view", "Logit lens", "Logit attribution", "Contribution graph"] {
        h.get_by_label(view).click();
        settled(&mut h);
        assert!(h.query_by_label_contains("needs the model").is_some(), "{view} says it needs the model");
    }
    assert!(h.query_by_label("Continue ▶").is_none(), "no writing without a model");
    // Compare: another file, as B − A.
    h.get_by_label("Compare").click();
    h.run_steps(2);
    h.get_by_label("Another sentence").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("An attention file has no model to run another input").is_some());
    h.get_by_label("Another model").click();
    h.run_steps(2);
    retype(&mut h, "Model B folder", vit.to_str().unwrap());
    h.get_by_label("Use as B").click();
    wait_until(&mut h, "run B", |a| a.features.compare.run_b.is_some());
    h.get_by_label("Difference B − A").click();
    settled(&mut h);
    assert!(h.query_by_label_contains("largest change 0.0000").is_some(), "the same file: no difference");
    // Export the heatmap's numbers.
    h.get_by_label("Heatmap").click();
    settled(&mut h);
    let csv = dir.path().join("vit.csv");
    export_through_dialog(&mut h, &csv);
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 18);
    assert!(text.lines().next().unwrap().ends_with(",\"patch 3,3\""), "labels with commas are quoted");
    // Back on the model: the text typed meanwhile is its input.
    h.get_by_label_contains("Pretrained:").click();
    settled(&mut h);
    assert_eq!(h.state().settings.text, "The cat sat. more");
    assert!(h.state().session.run.as_ref().unwrap().tokens.tokens.contains(&"more".to_string()));
    assert!(h.state().session.run.as_ref().unwrap().neuron.is_some(), "the model's run");
    // The file is remembered across launches.
    let mut storage = MemoryStorage::default();
    h.get_by_label("File: vit.npz").click();
    settled(&mut h);
    eframe::App::save(h.state_mut(), &mut storage);
    drop(h);
    let mut h2 = harness_with(Startup::default(), Some(storage));
    wait_until(&mut h2, "the remembered file", |a| a.session.run.as_ref().is_some_and(|r| r.tokens.len() == 17));
}

#[test]
fn an_encoder_decoder_file_shows_its_three_attentions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bart.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_attnviz"))
        .args(["dump", "--model", tiny_bart().to_str().unwrap(), "--text", "The cat sat.", "--target", "Le chat"])
        .args(["-o", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut h =
        harness_with(Startup { model_dir: Some(tiny()), attention_file: Some(path), ..Startup::default() }, None);
    wait_until(&mut h, "the file", |a| {
        a.settings.source == attnviz::app::state::Source::File && a.session.run.is_some()
    });
    wait_until(&mut h, "the model beside it", |a| a.session.model.is_some());
    settled(&mut h);
    // The model loading beside it (in either order) leaves the file shown, and says so.
    let status = h.state().session.status.clone().unwrap().text;
    assert!(status.starts_with("Opened") && status.contains("bart.json"), "{status}");
    assert_eq!(h.state().session.run.as_ref().unwrap().tokens.len(), 6);
    pick_stack(&mut h, "Cross");
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    assert!(!run.attention.is_square(), "cross-attention: target rows, source columns");
    assert_eq!(run.attention.keys(), 6);
}

#[test]
fn translate_writes_with_the_interventions_shown() {
    let source = "The cat sat on the mat.";
    let mut h = seq2seq_app(source);
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    h.get_by_label("Ablate layer 0 head 1").click();
    h.get_by_label("Ablate layer 1 head 2").click();
    wait_until(&mut h, "the ablated run", |a| a.session.run.as_ref().is_some_and(|r| r.intervention.is_some()));
    h.get_all_by_label("Translate ▶").next().unwrap().click();
    wait_until(&mut h, "the translation", |a| a.session.generation.as_ref().is_some_and(|g| g.finished.is_some()));
    settled(&mut h);
    let iv = h.state().settings.interventions.clone();
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.intervention.as_deref(), Some("ablated heads 0:1,1:2"), "the written run is the modified model's");
    assert!(h.query_by_label_contains("MODIFIED MODEL — ablated heads 0:1,1:2").is_some());
    // The library translates the same with the same interventions, differently without them.
    let model = attnviz::model::LoadedModel::load(&tiny_bart()).unwrap();
    let with = attnviz::model::generate::translate_with(&model, source, (6, 8), &iv, |_, _, _, _| true).unwrap();
    let faithful = attnviz::model::generate::translate(&model, source, 6, 8, |_, _, _, _| true).unwrap();
    let g = h.state().session.generation.clone().unwrap();
    // (The button beside the Target box asks for its own count: compare the steps both wrote.)
    assert!(g.steps.len() >= with.steps.len());
    assert_eq!(g.steps[..with.steps.len()], with.steps, "each step's candidates, as the library's with them");
    assert_ne!(with.steps, faithful.steps, "the ablations change what the decoder is given");
}

#[test]
fn a_rectangular_attention_file_draws_rows_over_other_tokens() {
    // Two query tokens attending over three others (as cross-attention would), one layer, two heads.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rect.json");
    let head = "[[0.2, 0.3, 0.5], [1, 0, 0]]";
    std::fs::write(
        &path,
        format!(
            r#"{{"tokens": ["le", "chat"], "key_tokens": ["the", "cat", "sat"], "attentions": [[{head}, {head}]]}}"#
        ),
    )
    .unwrap();
    let mut h =
        harness_with(Startup { model_dir: Some(tiny()), attention_file: Some(path), ..Startup::default() }, None);
    wait_until(&mut h, "the file", |a| a.session.run.as_ref().is_some_and(|r| !r.attention.is_square()));
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    assert_eq!((run.tokens.len(), run.attention.keys()), (2, 3));
    assert_eq!(run.key_label(2), "sat");
    assert!(head_lines(&mut h) > 0);
    for view in ["Model view", "Heatmap", "Head statistics", "Rollout / flow", "Compare"] {
        h.get_by_label(view).click();
        settled(&mut h);
    }
    h.get_by_label("Heatmap").click();
    settled(&mut h);
    let dir2 = tempfile::tempdir().unwrap();
    let csv = dir2.path().join("rect.csv");
    export_through_dialog(&mut h, &csv);
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().next().unwrap().ends_with("the,cat,sat"), "{text}");
}

#[test]
fn patching_shows_the_library_sweeps_and_a_clicked_head_opens_in_the_attention_views() {
    use attnviz::analysis::patching::PatchSite;
    use attnviz::model::patch::{Reuse, SweepControl};
    use attnviz::model::{Interventions, LoadedModel};
    let (clean, corrupted) = ("the cat sat on the mat", "the mat sat on the cat");
    let mut h = lens_app("tiny-llama", clean);
    // Without sentence B the view says what it needs.
    h.get_by_label("Patching").click();
    settled(&mut h);
    h.get_by_label_contains("Type the corrupted input as sentence B");
    h.state_mut().settings.pair_enabled = true;
    h.state_mut().settings.text_pair = corrupted.into();
    settled(&mut h);
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    let faithful = Interventions::default();
    // Answer and wrong default to each run's top prediction.
    let top = |text: &str| {
        let tokens = model.tokenizer.encode(text, None).unwrap().tokens;
        let lens = model.lens(&tokens, &[tokens.len() - 1], 1, &[], &faithful).unwrap();
        model.tokenizer.token_of(lens.cell(lens.streams - 1, 0).next().unwrap().0)
    };
    let (answer, wrong) = (top(clean), top(corrupted));
    let library = |site: PatchSite| {
        let request = model.patch_request((clean, corrupted), (&answer, &wrong), site, &faithful).unwrap();
        let mut progress = |_| {};
        let mut control = SweepControl { progress: &mut progress, cancel: None };
        model.patch(&request, Reuse::Changed, &mut control).unwrap()
    };
    let shown = |h: &Harness<'static, AttnvizApp>| h.state().features.patching.slot.shown().unwrap().1.clone().unwrap();
    for site in [PatchSite::ResidPre, PatchSite::Head] {
        h.get_by_label(site.name()).click();
        settled(&mut h);
        let expected = library(site);
        let p = shown(&h);
        assert_eq!(p.patching, expected, "{} sweep", site.name());
        // The numbers shown are the library's.
        h.get_by_label_contains(&format!(
            "clean {:.4} · corrupted {:.4}",
            expected.clean_logit_diff, expected.corrupted_logit_diff
        ));
    }
    // The head sweep: every head has a cell; a click opens it in the heatmap.
    let expected = library(PatchSite::Head);
    assert_eq!((expected.grid.layers, expected.grid.columns), (2, 4));
    h.get_by_label("Patch L1 H2").click();
    settled(&mut h);
    // It opens on both inputs: the comparison of the clean and the corrupted input.
    assert_eq!(h.state().settings.view, View::Compare);
    assert_eq!(h.state().settings.compare.text_b, corrupted);
    assert_eq!((h.state().settings.layer_idx, h.state().settings.selected_heads()), (1, vec![2]));
    let run_b = h.state().features.compare.run_b.clone().expect("run B, the corrupted input");
    assert_eq!(run_b.attention.as_slice(), model.run(corrupted, None).unwrap().attention.as_slice());
    // Back to the grid: exported as numbers, the library's.
    h.get_by_label("Patching").click();
    settled(&mut h);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("patching.csv");
    export_through_dialog(&mut h, &path);
    let csv = std::fs::read_to_string(&path).unwrap();
    let row: Vec<f32> = csv.lines().nth(2).unwrap().split(',').skip(1).map(|v| v.parse().unwrap()).collect();
    assert_eq!(row, expected.grid.rows()[1], "layer 1's heads");
}

/// Right-clicks at `pos` (a context menu opens there).
fn right_click_at(h: &mut Harness<'static, AttnvizApp>, pos: egui::Pos2) {
    h.hover_at(pos);
    h.run_steps(1);
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Secondary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run_steps(2);
}

#[test]
fn knockout_from_the_heatmap_and_the_head_view_is_the_librarys_with_the_prediction_before_and_after() {
    use attnviz::model::intervene::Knockout;
    use attnviz::model::{Interventions, LoadedModel};
    let text = "the cat sat on the mat";
    let mut h = lens_app("tiny-llama", text);
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    h.get_by_label("Heatmap").click();
    h.state_mut().settings.layer_idx = 1;
    settled(&mut h);
    // Right-click the cell query 7 (the last) → key 1 and knock it out in layer 1 from its menu.
    let (shown, grid) = h.state().views.heatmap.figure().map(|(d, g)| (d.clone(), g)).unwrap();
    let origin = assert_painted(&h, &shown, "key (attended to)");
    let (x, y) = grid.cell_center(7, 1);
    right_click_at(&mut h, origin + egui::vec2(x, y));
    h.get_by_label("Knock out in layer 1").click();
    settled(&mut h);
    let entry = Knockout { layer: Some(1), query: 7, key: 1 };
    let iv = Interventions { knockout: [entry].into(), ..Interventions::default() };
    assert_eq!(h.state().settings.interventions, iv);
    // The run shown is the library's knocked-out run: the entry is zero, its row renormalised.
    let expected = model.run_with(text, None, &iv).unwrap();
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.attention.as_slice(), expected.attention.as_slice());
    for head in 0..run.attention.heads() {
        assert_eq!(run.attention.get(1, head, 7, 1), 0.0);
        let row: f32 = (0..=7).map(|k| run.attention.get(1, head, 7, k)).sum();
        assert!((row - 1.0).abs() < 1e-5, "row 7 of head {head} sums to {row}");
    }
    // The banner names it, and the next token before and after is the library's.
    h.get_by_label_contains("MODIFIED MODEL — knocked out 1:7:1");
    let tokens = model.run(text, None).unwrap().tokens;
    let top = |iv: &Interventions| -> Vec<(String, f32)> {
        let lens = model.lens(&tokens, &[tokens.len() - 1], 5, &[], iv).unwrap();
        lens.cell(lens.streams - 1, 0).map(|(id, p)| (model.tokenizer.token_of(id), p)).collect()
    };
    let (before, after) = (top(&Interventions::default()), top(&iv));
    assert_ne!(before, after, "the last token's knockout changes its prediction");
    let (_, shown) = h.state().features.intervene.effect.shown().unwrap();
    let shown = shown.as_ref().unwrap();
    assert_eq!((&shown.faithful, &shown.modified), (&before, &after));
    let line = |c: &[(String, f32)]| {
        let pretty = attnviz::analysis::tokens::pretty_label;
        c.iter().map(|(t, p)| format!("“{}” {:.1} %", pretty(t), 100.0 * p)).collect::<Vec<_>>().join(" · ")
    };
    let painted = h.query_all_by_label(&line(&before)).count() + h.query_all_by_label(&line(&after)).count();
    assert_eq!(painted, 2, "the faithful and the modified candidates are shown");
    // Alt+click knocks out another cell (the banner's lines moved the heatmap down).
    let (shown, grid) = h.state().views.heatmap.figure().map(|(d, g)| (d.clone(), g)).unwrap();
    let origin = assert_painted(&h, &shown, "key (attended to)");
    let (x, y) = grid.cell_center(4, 2);
    let alt = egui::Modifiers { alt: true, ..egui::Modifiers::NONE };
    for pressed in [true, false] {
        let pos = origin + egui::vec2(x, y);
        h.hover_at(pos);
        h.event(egui::Event::PointerButton { pos, button: egui::PointerButton::Primary, pressed, modifiers: alt });
    }
    settled(&mut h);
    let both: std::collections::BTreeSet<Knockout> = [entry, Knockout { layer: Some(1), query: 4, key: 2 }].into();
    assert_eq!(h.state().settings.interventions.knockout, both);
    // The head view: pin query 7, right-click its line to key 0, knock query 7 out from every
    // earlier key in layers 1 on (it keeps itself).
    h.get_by_label("Head view").click();
    settled(&mut h);
    let label = |p: usize| h.state().session.run.as_ref().unwrap().label(p);
    let (last, first) = (label(7), label(0));
    h.get_by_label(&format!("query 7: {last}")).click();
    h.run_steps(2);
    h.get_by_label(&format!("weights of key 0: {first}")).click_secondary();
    h.run_steps(2);
    h.get_by_label(&format!("Knock out “{last}” from every earlier key in layer 1")).click();
    settled(&mut h);
    let mut all = both.clone();
    all.extend((0..7).map(|key| Knockout { layer: Some(1), query: 7, key }));
    assert_eq!(all.len(), 8);
    assert_eq!(h.state().settings.interventions.knockout, all);
    let iv = Interventions { knockout: all, ..Interventions::default() };
    let expected = model.run_with(text, None, &iv).unwrap();
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.attention.as_slice(), expected.attention.as_slice());
    assert_eq!(run.attention.get(1, 0, 7, 7), 1.0, "query 7 attends to itself alone");
    // Knocking every key of a row out is refused in the menu, with the reason.
    h.get_by_label(&format!("weights of key 7: {last}")).click_secondary();
    h.run_steps(2);
    assert!(
        h.query_by(|n| n.label().as_deref() == Some("Knock out in layer 1") && n.is_disabled()).is_some(),
        "it would leave query 7 no key"
    );
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    // Restore from the side panel's list.
    h.get_by_label_contains("Interventions").click();
    h.run_steps(2);
    h.get_by_label("Restore every knockout").scroll_to_me();
    h.run_steps(30); // the scroll's animation
    h.get_by_label("Restore every knockout").click();
    settled(&mut h);
    assert!(h.state().settings.interventions.is_faithful());
    assert!(h.state().session.run.as_ref().unwrap().intervention.is_none());
}

#[test]
fn the_steer_panel_steers_every_view_and_continue_beside_the_unsteered_text_as_the_library_does() {
    use attnviz::model::Interventions;
    use attnviz::model::LoadedModel;
    use attnviz::model::generate::Generator;
    let text = "the cat sat";
    let mut h = lens_app("tiny-llama", text);
    let model = LoadedModel::load(&fixture("tiny-llama")).unwrap();
    h.get_by_label("Heatmap").click();
    settled(&mut h);
    h.get_by_label("Steer").click();
    h.run_steps(2);
    h.state_mut().settings.steer.layer = 1;
    h.state_mut().settings.steer.scale = 4.0;
    h.get_by_label("Steer the model").click();
    settled(&mut h);
    settled(&mut h); // the vector arrives, then the steered run
    let steer = &h.state().settings.steer;
    let made = model.steering(1, (&steer.plus, &steer.minus), 4.0).unwrap();
    let iv = Interventions { steer: Some(made.steering.clone()), ..Interventions::default() };
    assert_eq!(h.state().settings.interventions, iv, "the library's steering vector, scaled");
    // Every view shows the steered model.
    let run = h.state().session.run.clone().unwrap();
    assert_eq!(run.attention.as_slice(), model.run_with(text, None, &iv).unwrap().attention.as_slice());
    h.get_by_label_contains("MODIFIED MODEL — steered at layer 1 by 4");
    h.get_by_label("Steer — ON");
    // Continue writes steered, and the unsteered text of the same prompt comes beside it.
    h.get_by_label("Continue ▶").click();
    wait_until(&mut h, "the generation", |a| a.session.generation.as_ref().is_some_and(|g| g.finished.is_some()));
    settled(&mut h);
    let write = |iv: &Interventions| {
        let mut g = Generator::start_modified(&model, text, 1, None, iv).unwrap();
        while g.next(20).unwrap().is_some() {}
        model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..])
    };
    let (steered, unsteered) = (write(&iv), write(&Interventions::default()));
    assert_ne!(steered, unsteered, "steering at scale 4 changes what the model writes");
    let g = h.state().session.generation.clone().unwrap();
    assert_eq!(g.text.as_deref(), Some(steered.as_str()));
    let (_, shown) = h.state().features.intervene.unsteered.shown().unwrap();
    assert_eq!(shown.as_deref().unwrap(), &unsteered);
    for written in [&unsteered, &steered] {
        assert!(h.query_all_by_label(&format!("{text}{written}")).count() > 0, "{written:?} is shown");
    }
    h.get_by_label("Unsteered and steered, side by side");
    // A one-token text is said to be mostly massive activations.
    h.state_mut().settings.steer.plus = " cat".into();
    settled(&mut h);
    let notice = model.steering(1, (" cat", &h.state().settings.steer.minus), 4.0).unwrap().notices;
    assert_eq!(notice.len(), 1);
    h.get_by_label(&notice[0]);
    // Off: the faithful model again.
    h.get_by_label("Steer the model").click();
    settled(&mut h);
    assert!(h.state().settings.interventions.is_faithful());
}

/// The app on fourteen words, the heatmap view open.
fn heatmap_of_fourteen_words() -> Harness<'static, AttnvizApp> {
    let mut h = app("one two three four five six seven eight nine ten eleven twelve thirteen fourteen");
    h.get_by_label("Heatmap").click();
    settled(&mut h);
    h.run_steps(2);
    h
}

#[test]
fn each_matrix_view_fits_its_room_zooms_in_ten_percent_steps_and_keeps_its_own_zoom() {
    let mut h = heatmap_of_fourteen_words();
    // Fit: the whole figure in the room, at the largest cell that fits.
    assert_eq!(h.state().settings.zoom.heatmap, None);
    let fitted = h.state().views.heatmap.fitted_cell();
    let (drawing, grid) = h.state().views.heatmap.figure().map(|(d, g)| (d.clone(), g)).unwrap();
    assert_eq!(grid.cell_w, fitted.floor());
    assert!((10.0..80.0).contains(&fitted), "{fitted}");
    let origin = assert_painted(&h, &drawing, "key (attended to)");
    let screen = h.ctx.content_rect();
    assert!(origin.x + drawing.width <= screen.right() && origin.y + drawing.height <= screen.bottom() - 20.0);
    // Ctrl+scroll over it: one step of 10 %, whatever the wheel's amount.
    let (x, y) = grid.cell_center(2, 2);
    h.hover_at(origin + egui::vec2(x, y));
    h.run_steps(1);
    h.event(egui::Event::Zoom(1.5));
    h.run_steps(2);
    let zoomed = h.state().settings.zoom.heatmap.expect("zoomed");
    assert!((zoomed / fitted - 1.1).abs() < 1e-4, "{zoomed} after {fitted}");
    h.event(egui::Event::Zoom(0.5));
    h.run_steps(2);
    let back = h.state().settings.zoom.heatmap.unwrap();
    assert!((back - fitted).abs() < 1e-3, "{back}");
    // One notch of the wheel with Ctrl held: one step, however many frames egui smooths it over.
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Line,
        delta: egui::vec2(0.0, -1.0),
        modifiers: egui::Modifiers::COMMAND,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
    });
    h.run_steps(30);
    let notch = h.state().settings.zoom.heatmap.unwrap();
    assert!((back / notch - 1.1).abs() < 1e-4, "{notch} after {back}");
    h.event(egui::Event::Zoom(1.5));
    h.run_steps(2);
    let back = h.state().settings.zoom.heatmap.unwrap();
    // Another view keeps its own zoom: Compare still fits.
    h.state_mut().settings.compare.text_b = "one two three".into();
    h.get_by_label("Compare").click();
    settled(&mut h);
    assert_eq!(h.state().settings.zoom.compare, None);
    assert_eq!(h.state().settings.zoom.heatmap, Some(back));
    // A new text: every view fits again.
    retype(&mut h, "Sentence A", "a new text");
    settled(&mut h);
    assert_eq!(h.state().settings.zoom, attnviz::app::state::ViewZoom::default());
}

#[test]
fn numbers_apply_when_committed_not_at_every_keystroke() {
    let mut h = app("the cat");
    h.get_by_label("Positional encoding").click();
    settled(&mut h);
    let before = h.state().settings.pe.d_model;
    let field = h.get_by_label("d_model");
    field.focus();
    h.run_steps(1);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    h.get_by_label("d_model").type_text("12");
    h.run_steps(2);
    assert_eq!(h.state().settings.pe.d_model, before, "12 is not applied while 127 is typed");
    h.get_by_label("d_model").type_text("8");
    h.run_steps(1);
    h.key_press(egui::Key::Enter);
    settled(&mut h);
    assert_eq!(h.state().settings.pe.d_model, 128);
}

/// The app in a 960 × 640 window on the tiny Llama with a text of `words` words (longer than the
/// views' room), its first run shown.
fn long_text_in_a_small_window(words: usize) -> Harness<'static, AttnvizApp> {
    let text = (0..words).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let mut h = Harness::builder().with_size(egui::vec2(960.0, 640.0)).with_step_dt(1.0 / 60.0).build_eframe(|cc| {
        let startup = Startup { model_dir: Some(fixture("tiny-llama")), text: Some(text), ..Startup::default() };
        new_app(&cc.egui_ctx, None, startup)
    });
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h
}

#[test]
fn a_newly_pinned_query_scrolls_into_view() {
    use attnviz::render::Side;
    let mut h = long_text_in_a_small_window(80);
    settled(&mut h);
    let run = h.state().session.run.clone().unwrap();
    let last = run.tokens.len() - 1;
    let name = format!("query {last}: {}", run.label(last));
    assert!(h.query_by_label(&name).is_none(), "the last query is below the fold");
    // Pinned (as Continue pins the newest written token): it comes into view.
    h.state_mut().session.pinned = Some((Side::Query, last));
    h.run_steps(10);
    let shown = h.get_by_label(&name).rect();
    assert!(h.ctx.content_rect().contains_rect(shown), "{shown:?} in view");
}

/// The app on the embedded SmolLM2 (30 layers) with `text`, its first run shown.
fn smollm2_app(text: &str) -> Harness<'static, AttnvizApp> {
    let smollm2 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/models/SmolLM2-135M-Instruct");
    let startup = Startup { model_dir: Some(smollm2), text: Some(text.into()), ..Startup::default() };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());
    h
}

#[test]
fn smollm2s_thirty_layers_of_head_statistics_fit_the_window() {
    let mut h = smollm2_app("The capital of France is");
    h.get_by_label("Head statistics").click();
    settled(&mut h);
    h.run_steps(2);
    let grid = h.state().views.stats.grid().expect("the grid is drawn");
    assert_eq!((grid.rows, grid.cols), (30, 9));
    // Every layer's row is a widget in view: no scrolling to reach layer 29.
    let last = h.get_by_label("Statistics of layer 29 head 8").rect();
    assert!(h.ctx.content_rect().contains_rect(last), "layer 29 in view: {last:?}");
    assert!(grid.cell_h >= 12.0, "{}", grid.cell_h);
}

/// Far from its models (the embedded ones in none of the folders looked in, as for a binary copied
/// elsewhere) the app says where it looked and what to do in the main view, names no model, spins
/// nothing (an idle frame asks for no other), and the playground, which needs no file, runs.
#[test]
fn without_its_models_the_app_says_where_it_looked_and_the_playground_runs() {
    let empty = tempfile::tempdir().unwrap();
    let startup =
        Startup { models: Some(empty.path().to_path_buf()), text: Some("the cat".into()), ..Startup::default() };
    let mut h = harness_with(startup, None);
    wait_until(&mut h, "the cache scan", |a| a.session.cached_models.is_some());
    settled(&mut h);
    let s = &h.state().session;
    assert!(s.model.is_none() && s.loading.is_none() && s.run.is_none());
    let err = s.load_error.clone().unwrap();
    for needle in ["were not found", empty.path().to_str().unwrap(), "attnviz models install", "ATTNVIZ_ASSETS"] {
        assert!(err.contains(needle), "the message should say {needle:?}: {err}");
    }
    assert!(h.query_by_label("Pretrained: no model loaded").is_some(), "the model label names no model");
    assert!(
        h.query_by_label_contains("choose Playground, which needs no files").is_some(),
        "what to do, in the main view"
    );
    assert!(h.query_by_label("Running the model…").is_none(), "no spinner");
    // Idle: no frame asks for another (a spinner asks every frame, for as long as it is shown).
    h.run();
    let root = egui::ViewportId::ROOT;
    let asked: usize = (0..120)
        .map(|_| {
            h.step();
            usize::from(h.output().viewport_output[&root].repaint_delay != Duration::MAX)
        })
        .sum();
    assert_eq!(asked, 0, "frames asked for while idle");
    h.get_by_label("Playground").click();
    wait_until(&mut h, "the playground's run", |a| a.session.run.is_some());
    assert_eq!(tokens(&h), ["[CLS]", "the", "cat", "[SEP]"]);
    assert!(h.state().session.run_error.is_none());
}

#[test]
fn experts_view_shows_the_library_routes_a_token_route_and_exports_their_numbers() {
    use attnviz::model::{Interventions, LoadedModel};
    let text = "the cat sat on the mat";
    // A dense model has no Experts tab.
    let h = lens_app("tiny-llama", text);
    assert!(h.query_by_label("Experts").is_none(), "a dense model shows no Experts tab");
    drop(h);
    let mut h = lens_app("tiny-qwen3-moe", text);
    h.get_by_label("Experts").click();
    settled(&mut h);
    let model = LoadedModel::load(&fixture("tiny-qwen3-moe")).unwrap();
    let tokens = model.tokenizer.encode(text, None).unwrap().tokens;
    let expected = model.routes(&tokens, &Interventions::default()).unwrap();
    let shown = h.state().features.experts.slot.shown().unwrap().1.clone().unwrap();
    assert_eq!(*shown, expected, "the routes shown are the library's");
    assert!(shown.layers[1].is_none(), "layer 1 is dense");
    // A click on a token shows its route through the layers, the dense layer included.
    let label = format!("2: {}", attnviz::analysis::tokens::pretty_label(&tokens.tokens[2]));
    h.get_by_label(&label).click();
    h.run_steps(2);
    assert_eq!(h.state().settings.experts.token, Some(2));
    let route = attnviz::app::experts::view::route_text(&expected, 2);
    assert!(route.contains("L1 dense"), "{route}");
    h.get_by_label_contains(&route);
    // Exported as numbers: per layer with experts and rank, the ids and the weights.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experts.csv");
    export_through_dialog(&mut h, &path);
    let csv = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let layer0 = expected.layers[0].as_ref().unwrap();
    assert_eq!((rows[0][0], rows[1][0]), ("L0 expert 1", "L0 weight 1"));
    let ids: Vec<f32> = rows[0][1..].iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(ids, (0..tokens.len()).map(|t| layer0.chosen_of(t)[0] as f32).collect::<Vec<_>>(), "{csv}");
    let weights: Vec<f32> = rows[1][1..].iter().map(|v| v.parse().unwrap()).collect();
    assert_eq!(weights, (0..tokens.len()).map(|t| layer0.weights_of(t)[0]).collect::<Vec<_>>());
    // And as a picture.
    let png = dir.path().join("experts.png");
    export_through_dialog(&mut h, &png);
    assert_png_matches_figure(&h, &png);
}

/// Opens the contribution graph view; the graph it shows.
fn open_the_graph(h: &mut Harness<'static, AttnvizApp>) -> std::sync::Arc<attnviz::export::GraphFigure> {
    h.get_by_label("Contribution graph").click();
    settled(h);
    h.run_steps(10);
    match h.state().current_figure() {
        attnviz::export::Figure::Graph(g) => g,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_contribution_graph_of_a_long_text_opens_on_its_prediction() {
    let mut h = long_text_in_a_small_window(60);
    // The edges' dots are widgets only where they are in view: the routes into the last token's
    // prediction, at the far right of a 60-token graph, are on screen.
    let figure = open_the_graph(&mut h);
    let last = figure.tokens.len() - 1;
    let into_prediction: Vec<String> = figure
        .edges
        .iter()
        .filter(|e| figure.nodes.get(e.to).is_some_and(|n| n.column as usize == last))
        .map(|e| format!("Edge {}", e.name))
        .collect();
    assert!(!into_prediction.is_empty());
    let shown = into_prediction.iter().filter(|name| h.query_by_label(name).is_some()).count();
    assert!(shown > 0, "an edge into the prediction is in view: {into_prediction:?}");
}

#[test]
fn the_lens_token_header_stays_in_view_while_its_blocks_scroll() {
    let mut h = smollm2_app("The capital of France is");
    h.get_by_label("Logit lens").click();
    settled(&mut h);
    // At its full size (Fit would show every stream at once).
    h.state_mut().settings.zoom.lens = Some(1.0);
    h.run_steps(2);
    // Scrolled to the last blocks (31 streams are taller than the grid's room).
    for _ in 0..20 {
        let cells =
            h.query_all_by(|n| n.label().is_some_and(|l| l.starts_with("Lens ") && l.ends_with(" at position 2")));
        if let Some(cell) = cells.last() {
            cell.scroll_down();
        }
        h.run_steps(2);
    }
    h.run_steps(20);
    assert!(h.query_by_label("Lens block 30 (output) at position 0").is_some(), "scrolled to the output");
    let header = h.get_by_label_contains("Position 0: ").rect();
    let visible_top = h
        .query_all_by(|n| n.label().is_some_and(|l| l.starts_with("Lens ") && l.ends_with(" at position 0")))
        .map(|n| n.rect().top())
        .fold(f32::INFINITY, f32::min);
    assert!(h.query_by_label("Lens embeddings at position 0").is_none(), "scrolled: the first rows are out of view");
    // The header sits at the top of the grid's room, over the first row still partly in view.
    assert!(
        header.top() >= visible_top && header.top() - visible_top < 30.0,
        "{header:?} at the top of the rows in view ({visible_top})"
    );
}

#[test]
fn a_zoomed_matrix_keeps_its_row_and_column_labels_in_view_while_it_scrolls() {
    let mut h = heatmap_of_fourteen_words();
    h.state_mut().settings.zoom.heatmap = Some(70.0);
    h.run_steps(3);
    let (drawing, grid) = h.state().views.heatmap.figure().map(|(d, g)| (d.clone(), g)).unwrap();
    let screen = h.ctx.content_rect();
    assert!(drawing.height > screen.height() && drawing.width > screen.width(), "the figure is larger than the room");
    let in_view = |h: &Harness<'static, AttnvizApp>, text: &str| {
        painted_texts(h).iter().any(|p| p.text == text && screen.contains_rect(p.rect))
    };
    // Scrolled to the top: the column labels and their axis title (under the cells, far below the
    // fold) are kept at the bottom of the view.
    assert!(in_view(&h, "key (attended to)"), "the column axis is in view");
    let runs = text_runs(&drawing);
    let bottom = grid.top + grid.rows as f32 * grid.cell_h;
    let first_col = runs.iter().find(|t| t.y > bottom && t.x < grid.left + grid.cell_w).unwrap();
    assert!(in_view(&h, &first_col.text), "the first column's label “{}” is in view", first_col.text);
    // Scrolled sideways past the row labels: they are kept at the left edge.
    let first_row = runs.iter().find(|t| t.x < grid.left && !t.up && t.y > grid.top).unwrap().text.clone();
    h.hover_at(screen.center());
    for _ in 0..10 {
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(-200.0, 0.0),
            modifiers: egui::Modifiers::NONE,
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run_steps(2);
    }
    h.run_steps(20);
    assert!(in_view(&h, &first_row), "the first row's label “{first_row}” is in view");
    let shown = painted_texts(&h).into_iter().find(|p| p.text == first_row).unwrap();
    assert!(shown.rect.left() < screen.center().x, "at the left edge: {:?}", shown.rect);
}

#[test]
fn the_lens_the_attribution_and_the_graph_fit_thirty_layers_and_zoom_on_their_own() {
    let mut h = smollm2_app("The capital of France is");
    let screen = h.ctx.content_rect();
    let in_view = |h: &Harness<'static, AttnvizApp>, label: &str| {
        h.query_by_label(label).is_some_and(|n| screen.contains_rect(n.rect()))
    };
    // The lens: every stream of every position in view, without scrolling.
    h.get_by_label("Logit lens").click();
    settled(&mut h);
    h.run_steps(4);
    let last = h.state().session.run.as_ref().unwrap().tokens.len() - 1;
    assert_eq!(h.state().settings.zoom.lens, None, "Fit is the default");
    for label in ["Lens embeddings at position 0".to_string(), format!("Lens block 30 (output) at position {last}")] {
        assert!(in_view(&h, &label), "{label} in view");
    }
    // Ctrl+scroll over the grid: one step of 10 % in, for the lens alone.
    let cell = h.get_by_label("Lens block 15 at position 2").rect();
    h.hover_at(cell.center());
    h.run_steps(1);
    h.event(egui::Event::Zoom(1.5));
    h.run_steps(2);
    let zoom = h.state().settings.zoom;
    let lens = zoom.lens.expect("zoomed");
    assert!((0.2..=1.1).contains(&lens), "{lens}");
    assert_eq!((zoom.attribution, zoom.graph), (None, None));
    // The attribution grid: the embeddings row and layer 29's MLP in view.
    h.get_by_label("Logit attribution").click();
    settled(&mut h);
    h.run_steps(4);
    for label in ["Attribution of L0 H0", "Attribution of L29 MLP", "Attribution of embeddings H0"] {
        let node = h.query_by_label(label).map(|n| n.rect());
        assert!(node.is_some_and(|r| screen.contains_rect(r)), "{label} in view: {node:?}");
    }
    // The graph: 61 levels do not fit at half size, the smallest Fit draws words at; it opens there,
    // on its prediction.
    let figure = open_the_graph(&mut h);
    assert_eq!(h.state().views.features.graph.scale, attnviz::app::widgets::matrix::FIT_SCALE_FLOOR);
    let last = figure.tokens.len() - 1;
    let into_prediction =
        figure.edges.iter().filter(|e| figure.nodes.get(e.to).is_some_and(|n| n.column as usize == last));
    assert!(into_prediction.map(|e| format!("Edge {}", e.name)).any(|name| in_view(&h, &name)));
    assert_eq!(h.state().settings.zoom.graph, None);
    assert_eq!(h.state().settings.zoom.lens, Some(lens), "each view keeps its own zoom");
}

#[test]
fn the_model_view_fits_thirty_layers_and_keeps_its_head_names_in_view_when_zoomed() {
    let mut h = smollm2_app("The capital of France is");
    h.get_by_label("Model view").click();
    settled(&mut h);
    h.run_steps(4);
    let screen = h.ctx.content_rect();
    let in_view = |h: &Harness<'static, AttnvizApp>, label: &str| {
        h.query_by_label(label).is_some_and(|n| screen.contains_rect(n.rect()))
    };
    // Fit: every layer and head in view at once.
    assert!(in_view(&h, "Layer 0 head 0") && in_view(&h, "Layer 29 head 8"));
    // Zoomed in (Ctrl+scroll over the grid) and scrolled to the last layers: the heads' names stay
    // at the top of the view.
    let cell = h.get_by_label("Layer 10 head 4").rect();
    h.hover_at(cell.center());
    for _ in 0..30 {
        h.event(egui::Event::Zoom(1.5));
        h.run_steps(1);
    }
    let zoomed = h.state().settings.zoom.model.expect("zoomed");
    assert!(zoomed > 100.0, "{zoomed}");
    for _ in 0..10 {
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -300.0),
            modifiers: egui::Modifiers::NONE,
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
        });
        h.run_steps(2);
    }
    h.run_steps(30);
    assert!(!in_view(&h, "Layer 0 head 0"), "scrolled past the first layer");
    let top = h.query_all_by(|n| n.label().is_some_and(|l| l.starts_with("Layer "))).map(|n| n.rect().top());
    let first_in_view = top.fold(f32::INFINITY, f32::min);
    // (The side panel's head chips are named H0 … too: the grid's is right of them.)
    let grid_left = h
        .query_all_by(|n| n.label().is_some_and(|l| l.starts_with("Layer ")))
        .map(|n| n.rect().left())
        .fold(f32::INFINITY, f32::min);
    let h0 = painted_texts(&h).into_iter().find(|p| p.text == "H0" && p.rect.left() > grid_left - 10.0).expect("H0");
    assert!(screen.contains_rect(h0.rect), "H0 in view: {:?}", h0.rect);
    // At the top of the grid's room, over the first thumbnails still in view.
    assert!(h0.rect.top() < first_in_view + 30.0, "{:?} above {first_in_view}", h0.rect);
}

#[test]
fn gpt_oss_shows_its_sinks_in_the_heatmap_head_view_and_statistics_and_routes_and_patches() {
    use attnviz::analysis::patching::PatchSite;
    let text = "the cat sat on the mat";
    let mut h = lens_app("tiny-gpt-oss", text);
    let run = h.state().session.run.clone().unwrap();
    let sinks = run.sinks.clone().expect("a gpt-oss run holds its sinks' shares");
    // Layer 1, head 1: its sink takes most of each row.
    h.state_mut().settings.layer_idx = 1;
    h.get_by_label("H1").click();
    h.step();
    h.get_by_label("H1").click(); // a double click: that head only
    h.get_by_label("Heatmap").click();
    h.state_mut().settings.zoom.heatmap = Some(22.0);
    settled(&mut h);
    let painted: Vec<String> = painted_texts(&h).into_iter().map(|p| p.text).collect();
    assert!(painted.iter().any(|t| t == "sink"), "the heatmap's sink column is labelled: {painted:?}");
    h.get_by_label_contains("the share of each row that goes to the head's attention sink");
    // The column holds the library's shares: the figure's cells right of the matrix.
    let (shown, grid) = h.state().views.heatmap.figure().expect("the heatmap is drawn");
    let column = shown
        .items
        .iter()
        .filter_map(|i| if let attnviz::render::Item::Cells(c) = i { Some(c) } else { None })
        .nth(1)
        .expect("a second block of cells: the sink's column");
    assert!(column.x > grid.left + grid.cell_w * grid.cols as f32 && column.cols == 1);
    assert_eq!(column.rows, run.tokens.len());
    let heads = h.state().settings.selected_heads();
    assert_eq!(heads, [1]);
    let mean = sinks.mean_of_heads(1, &heads);
    assert!(mean.iter().sum::<f32>() / mean.len() as f32 > 0.5, "{mean:?}");
    // The head view: a target of its own, below the keys, labelled "sink".
    h.get_by_label("Head view").click();
    settled(&mut h);
    head_lines(&mut h);
    let painted: Vec<String> = painted_texts(&h).into_iter().map(|p| p.text).collect();
    assert!(painted.iter().any(|t| t == "sink"), "the head view's sink target: {painted:?}");
    // The statistics: "→ sink", the mean share per head.
    h.get_by_label("Head statistics").click();
    settled(&mut h);
    h.get_by_label("→ sink").click();
    settled(&mut h);
    let figure = h.state().current_figure();
    let table = figure.table(Some(&run)).unwrap();
    assert!((table.values[4 + 1] - sinks.mean(1, 1)).abs() < 1e-6, "{:?}", table.values);
    // The experts view opens on the library's routes.
    h.get_by_label("Experts").click();
    settled(&mut h);
    let model = attnviz::model::LoadedModel::load(&fixture("tiny-gpt-oss")).unwrap();
    let faithful = attnviz::model::Interventions::default();
    let expected = model.routes(&run.tokens, &faithful).unwrap();
    let routes = h.state().features.experts.slot.shown().unwrap().1.clone().unwrap();
    assert_eq!(*routes, expected);
    // Patching runs: the head sweep is the library's.
    h.state_mut().settings.pair_enabled = true;
    h.state_mut().settings.text_pair = "the mat sat on the cat".into();
    h.get_by_label("Patching").click();
    settled(&mut h);
    h.get_by_label(PatchSite::Head.name()).click();
    settled(&mut h);
    let p = h.state().features.patching.slot.shown().unwrap().1.clone().unwrap();
    assert_eq!((p.patching.grid.layers, p.patching.grid.columns), (2, 4));
    assert!(p.patching.grid.logit_diff.iter().all(|v| v.is_finite()));
}

#[test]
fn a_graph_of_an_older_shorter_text_is_laid_out_within_its_own_tokens() {
    let mut h = long_text_in_a_small_window(6);
    let figure = open_the_graph(&mut h);
    let graph = h.state().features.graph.slot.shown().unwrap().1.0.clone().unwrap();
    // Laid out for a longer text's last position (the text changed, its own graph not come yet):
    // the graph's own last position, not a position past its tokens.
    let longer: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let (shown, _) = attnviz::app::graph::graph_figure(&graph, &longer, (39, 0.04), String::new());
    assert_eq!(shown.nodes.len(), figure.nodes.len());
    assert_eq!(shown.edges.len(), figure.edges.len());
}

#[test]
fn the_experts_view_fits_its_grid_and_zooms_on_its_own() {
    let text = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let mut h = lens_app("tiny-qwen3-moe", &text);
    h.get_by_label("Experts").click();
    settled(&mut h);
    h.run_steps(4);
    assert_eq!(h.state().settings.zoom.experts, None, "Fit is the default");
    // Ctrl+wheel over the grid: one 10 % step in, for this view alone.
    // The grid lies under the tokens' buttons ("0: w0" …) and the zoom row.
    let tokens_bottom = h
        .query_all_by(|n| n.label().is_some_and(|l| l.starts_with("0: ") || l.starts_with("39: ")))
        .map(|n| n.rect().bottom())
        .fold(0.0, f32::max);
    let fit = h.get_by_label("Fit").rect();
    let grid_top = tokens_bottom.max(fit.bottom()) + 8.0;
    h.hover_at(egui::pos2(fit.left() + 40.0, grid_top + 8.0));
    h.run_steps(1);
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Line,
        delta: egui::vec2(0.0, 1.0),
        modifiers: egui::Modifiers::COMMAND,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
    });
    h.run_steps(30);
    let zoom = h.state().settings.zoom;
    let experts = zoom.experts.expect("zoomed");
    assert!((0.5..=1.1).contains(&experts), "{experts}");
    assert_eq!((zoom.heatmap, zoom.lens, zoom.patching), (None, None, None));
}
