//! The app opening hostile model files (issue 18): the loader's error is shown as it is and the
//! model already open stays open and running.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use attnviz::app::{AttnvizApp, Startup};
use attnviz::model::LoadedModel;
use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-bert")
}

fn wait_until(h: &mut Harness<'static, AttnvizApp>, what: &str, cond: impl Fn(&AttnvizApp) -> bool) {
    let start = Instant::now();
    while !cond(h.state()) {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
        h.step();
    }
    h.step();
}

/// Types `path` into the model box and presses Load; waits for the load to end.
fn load(h: &mut Harness<'static, AttnvizApp>, path: &Path) {
    h.get_by_label("Model folder or hub id").focus();
    h.step();
    h.key_press_modifiers(Modifiers::COMMAND, Key::A);
    h.get_by_label("Model folder or hub id").type_text(path.to_str().unwrap());
    h.get_by_label("Load").click();
    h.step();
    wait_until(h, "the load to end", |a| a.session.loading.is_none());
}

#[test]
fn hostile_model_files_show_the_loaders_error_and_keep_the_previous_model() {
    let startup = Startup {
        model_dir: Some(tiny()),
        text: Some("keep me".into()),
        text_pair: None,
        hf_cache: Some(tiny().join("no-hf-cache-here")),
    };
    let mut h = Harness::builder()
        .with_size(egui::vec2(1280.0, 860.0))
        .with_step_dt(1.0 / 60.0)
        .build_eframe(move |cc| AttnvizApp::with_storage(&cc.egui_ctx, None, startup));
    wait_until(&mut h, "the first run", |a| a.session.run.is_some());

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
        let expected = LoadedModel::load(path).unwrap_err().to_string();
        assert!(expected.contains(needle), "{expected}");
        load(&mut h, path);
        let app = h.state();
        let shown = app.session.load_error.clone().unwrap();
        assert!(shown.starts_with("Could not load ") && shown.ends_with(&expected), "the loader's error: {shown}");
        assert_eq!(app.session.model.as_ref().unwrap().name, "tiny-bert");
        assert!(app.session.run.is_some());
    }
    // And the kept model still runs.
    h.get_by_label("Sentence A").focus();
    h.step();
    h.get_by_label("Sentence A").type_text(" still");
    wait_until(&mut h, "a run with the kept model", |a| {
        a.session.run.as_ref().is_some_and(|r| r.tokens.tokens.contains(&"still".to_string()))
    });
}
