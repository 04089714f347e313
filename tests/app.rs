//! The desktop app driven headless with `egui_kittest`: real clicks and typing, then assertions on
//! the app's state and on files written.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use attnviz::analysis::select::PairFilter;
use attnviz::app::state::{Settings, View};
use attnviz::app::{AttnvizApp, Startup};
use attnviz::render::Side;
use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bert")
}

fn harness_with(startup: Startup, storage: Option<MemoryStorage>) -> Harness<'static, AttnvizApp> {
    Harness::builder().with_size(egui::vec2(1280.0, 860.0)).with_step_dt(1.0 / 60.0).build_eframe(move |cc| {
        AttnvizApp::with_storage(&cc.egui_ctx, storage.as_ref().map(|s| s as &dyn eframe::Storage), startup)
    })
}

fn app(text: &str) -> Harness<'static, AttnvizApp> {
    let mut h = harness_with(Startup { model_dir: Some(tiny()), text: Some(text.into()), text_pair: None }, None);
    wait_until(&mut h, "the first run", |a| a.rt.run.is_some());
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

fn tokens(h: &Harness<'static, AttnvizApp>) -> Vec<String> {
    h.state().rt.run.as_ref().map(|r| r.tokens.tokens.clone()).unwrap_or_default()
}

#[test]
fn launch_focuses_the_sentence_and_typing_reruns_the_model() {
    let mut h = app("the cat");
    assert!(h.get_by_label("Sentence A").is_focused(), "the sentence box has focus at launch");
    assert_eq!(tokens(&h), ["[CLS]", "the", "cat", "[SEP]"]);
    h.get_by_label("Sentence A").type_text(" sat");
    wait_until(&mut h, "the new run", |a| {
        a.rt.run.as_ref().is_some_and(|r| r.tokens.tokens.contains(&"sat".to_string()))
    });
    assert_eq!(h.state().settings.text, "the cat sat");
    assert_eq!(tokens(&h), ["[CLS]", "the", "cat", "sat", "[SEP]"]);
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
    assert_eq!(h.state().rt.pinned, Some((Side::Query, 2)));
    // Hovering elsewhere does not change the pinned selection.
    h.get_by_label("key 1: pin").hover();
    h.run_steps(2);
    assert_eq!(h.state().rt.pinned, Some((Side::Query, 2)));
    h.get_by_label("query 2: this").click();
    h.run_steps(2);
    assert_eq!(h.state().rt.pinned, None);
    h.get_by_label("key 3: token").click();
    h.run_steps(2);
    assert_eq!(h.state().rt.pinned, Some((Side::Key, 3)));
    h.key_press(Key::Escape);
    h.run_steps(2);
    assert_eq!(h.state().rt.pinned, None);
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
    wait_until(&mut h, "the pair run", |a| a.rt.run.as_ref().is_some_and(|r| r.tokens.is_pair()));
    let all_lines = h.state().rt.caches.head.line_count;
    assert!(all_lines > 0);
    h.get_by_label("A→B").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.pair_filter, PairFilter::AToB);
    let a_to_b = h.state().rt.caches.head.line_count;
    assert!(a_to_b > 0 && a_to_b < all_lines, "{a_to_b} of {all_lines} lines");
}

#[test]
fn views_switch_and_a_model_view_click_opens_the_heatmap() {
    let mut h = app("views switch");
    h.get_by_label("Model view").click();
    h.run_steps(3);
    assert_eq!(h.state().settings.view, View::Model);
    let builds = h.state().rt.caches.model.builds;
    h.run_steps(5);
    assert_eq!(h.state().rt.caches.model.builds, builds, "textures are built once per run, not per frame");
    h.get_by_label("Layer 1 head 2").click();
    h.run_steps(3);
    let s = &h.state().settings;
    assert_eq!(s.view, View::Heatmap);
    assert_eq!(s.layer_idx, 1);
    assert_eq!(s.heads, [false, false, true, false]);
    let run = h.state().rt.run.clone().unwrap();
    let cache = &h.state().rt.caches.heatmap;
    assert_eq!(cache.keep.len(), run.tokens.len());
    assert_eq!(cache.value(1, 2), run.attention.get(1, 2, 1, 2));
    h.get_by_label("Heatmap").click();
    h.get_by_label("Hide special tokens").click();
    h.run_steps(3);
    let cache = &h.state().rt.caches.heatmap;
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
    h.get_by_label("Export PNG…").click();
    h.run_steps(2);
    h.get_by_label("Export path").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Export path").type_text(path.to_str().unwrap());
    h.run_steps(2);
    h.get_by_label("3×").click();
    h.run_steps(2);
    h.state_mut().rt.status = None;
    h.get_by_label("Save").click();
    wait_until(&mut h, "the export", |a| a.rt.exporting.is_none() && a.rt.status.is_some());
    let status = h.state().rt.status.clone().unwrap();
    assert!(!status.is_error && status.text.contains("Exported"), "{status:?}");
    let image = image::open(&path).unwrap();
    // The same pixels as the CLI's figure for the same settings.
    let app = h.state();
    let expected =
        attnviz::export::render_figure(app.rt.run.as_deref(), &app.current_figure(), app.export_style(false)).unwrap();
    assert_eq!(image.width(), expected.width());
    assert_eq!(image.height(), expected.height());
    assert!(!h.state().rt.export_open, "the dialog closes after a successful export");
}

#[test]
fn an_unwritable_export_path_is_reported_and_nothing_is_written() {
    let mut h = app("export fails");
    h.get_by_label("Export PNG…").click();
    h.run_steps(2);
    h.state_mut().rt.export_path_input = "/nonexistent-folder/x.png".into();
    h.run_steps(1);
    h.state_mut().rt.status = None;
    h.get_by_label("Save").click();
    wait_until(&mut h, "the failed export", |a| a.rt.exporting.is_none() && a.rt.status.is_some());
    let status = h.state().rt.status.clone().unwrap();
    assert!(status.is_error && status.text.contains("/nonexistent-folder/x.png"), "{status:?}");
    assert!(h.state().rt.export_open, "the dialog stays open to fix the path");
}

#[test]
fn a_failed_model_load_keeps_the_previous_model() {
    let mut h = app("keep me");
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("config.json"), "{ broken").unwrap();
    h.get_by_label("Model folder path").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Model folder path").type_text(broken.path().to_str().unwrap());
    h.get_by_label("Load").click();
    h.step();
    wait_until(&mut h, "the load to fail", |a| a.rt.loading.is_none() && a.rt.load_error.is_some());
    let app = h.state();
    assert!(app.rt.load_error.as_ref().unwrap().contains("config.json"));
    assert_eq!(app.rt.model.as_ref().unwrap().name, "tiny-bert");
    assert!(app.rt.run.is_some());
    // And the kept model still runs.
    h.get_by_label("Sentence A").focus();
    h.step();
    h.get_by_label("Sentence A").type_text(" still");
    wait_until(&mut h, "a run with the kept model", |a| {
        a.rt.run.as_ref().is_some_and(|r| r.tokens.tokens.contains(&"still".to_string()))
    });
}

#[test]
fn over_long_text_is_truncated_with_a_visible_notice() {
    let mut h = app(&"long ".repeat(40));
    assert_eq!(tokens(&h).len(), 24);
    h.get_by_label_contains("truncated to 24 tokens");
    h.state_mut().settings.text.clear();
    wait_until(&mut h, "the empty run", |a| a.rt.run.as_ref().is_some_and(|r| r.tokens.len() == 2));
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
    wait_until(&mut h2, "the restored run", |a| a.rt.run.is_some());
    let restored = &h2.state().settings;
    assert_eq!(restored.text, "remember me");
    assert_eq!(restored.view, View::Heatmap);
    assert_eq!(restored.layer_idx, 1);
    assert_eq!(restored.heads, [true, false, true, true]);
    assert_eq!(restored.model_dir.as_deref(), Some(tiny().as_path()));
    assert_eq!(*restored, saved);
    assert_eq!(h2.state().rt.model.as_ref().unwrap().name, "tiny-bert");
}

/// Small image snapshots (wgpu on a software adapter) where the picture is the point. Timings in
/// the status bar are masked. `UPDATE_SNAPSHOTS=1 cargo test --test app` rewrites them.
fn snapshot_app(text: &str) -> Harness<'static, AttnvizApp> {
    let mut h = Harness::builder().with_size(egui::vec2(960.0, 640.0)).with_step_dt(1.0 / 60.0).build_eframe({
        let text = text.to_string();
        move |cc| {
            let app = AttnvizApp::with_storage(
                &cc.egui_ctx,
                None,
                Startup { model_dir: Some(tiny()), text: Some(text), text_pair: None },
            );
            cc.egui_ctx.set_theme(egui::ThemePreference::Light);
            app
        }
    });
    h.state_mut().settings.theme = attnviz::app::state::ThemeChoice::Light;
    wait_until(&mut h, "the first run", |a| a.rt.run.is_some());
    h
}

fn mask_varying(h: &mut Harness<'static, AttnvizApp>) {
    // The status bar holds timings (model ms, frame ms) whose text width varies run to run.
    let size = h.ctx.content_rect().size();
    h.mask(egui::Rect::from_min_max(egui::pos2(0.0, size.y - 28.0), egui::pos2(size.x, size.y)));
    // The model folder is an absolute path: it depends on where the repository is checked out.
    let folder = tiny().display().to_string();
    let rects = [h.get_by_label("Model folder path").rect(), h.get_by_label(&folder).rect()];
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

#[test]
fn loading_a_differently_shaped_model_switches_views_to_it() {
    let mut h = app("switch models");
    let relu = tiny().with_file_name("tiny-bert-relu");
    h.get_by_label("Model folder path").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Model folder path").type_text(relu.to_str().unwrap());
    h.get_by_label("Load").click();
    h.step();
    wait_until(&mut h, "the new model's run", |a| a.rt.run.as_ref().is_some_and(|r| r.attention.heads() == 2));
    for view in ["Model view", "Heatmap", "Head view"] {
        h.get_by_label(view).click();
        h.run_steps(2);
    }
    let app = h.state();
    assert_eq!(app.rt.model.as_ref().unwrap().name, "tiny-bert-relu");
    assert_eq!(app.settings.heads, [true, true]);
    assert_eq!(app.rt.run.as_ref().unwrap().attention.layers(), 3);
    h.get_by_label("L2");
}
