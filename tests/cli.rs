//! The command line end to end: outputs written and decodable, errors on one line, no panics,
//! no partial files.
#![allow(clippy::unwrap_used, clippy::float_cmp)] // tests unwrap and compare exact values on purpose

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tiny() -> PathBuf {
    root().join("tests/fixtures/models/tiny-bert")
}

fn attnviz(args: &[&str]) -> Output {
    common::output_sandboxed(Command::new(env!("CARGO_BIN_EXE_attnviz")).args(args).env_remove("ATTNVIZ_MODEL"))
}

fn stderr(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    // A process that says nothing (killed by a signal, say) is named by its status.
    if text.is_empty() && !out.status.success() { format!("(no output; {})", out.status) } else { text }
}

/// Asserts a clean failure: non-zero exit, one `error:` line mentioning `needle`, no panic.
fn assert_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "should fail: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(err.contains(needle), "error should mention {needle:?}: {err}");
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn dump_json_has_exactly_the_documented_keys_and_matches_the_reference() {
    let dir = tmp();
    let out_path = dir.path().join("pair.json");
    let out = attnviz(&[
        "dump",
        "--text",
        "The cat sat on the mat.",
        "--text-pair",
        "It was happy to be home.",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["attentions", "model", "segments", "tokens"]);
    assert_eq!(v["model"], "all-MiniLM-L6-v2");
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/minilm_pair.json")).unwrap())
            .unwrap();
    assert_eq!(v["tokens"], reference["tokens"]);
    assert_eq!(v["segments"], reference["type_ids"]);
    let got = v["attentions"][5][11][3].as_array().unwrap();
    let want = reference["attentions"][5][11][3].as_array().unwrap();
    for (g, w) in got.iter().zip(want) {
        assert!((g.as_f64().unwrap() - w.as_f64().unwrap()).abs() < 1e-5);
    }
}

#[test]
fn dump_json_to_stdout() {
    let out = attnviz(&["dump", "--model", tiny().to_str().unwrap(), "--text", "", "-o", "-"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tokens"], serde_json::json!(["[CLS]", "[SEP]"]));
    assert_eq!(v["attentions"].as_array().unwrap().len(), 2);
}

/// Reads one `.npy` member of an uncompressed `.npz` and returns (header, data bytes).
fn npy_member(npz: &Path, name: &str) -> (String, Vec<u8>) {
    use std::io::Read;
    let mut archive = zip::ZipArchive::new(std::fs::File::open(npz).unwrap()).unwrap();
    let mut bytes = Vec::new();
    archive.by_name(name).unwrap().read_to_end(&mut bytes).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    (String::from_utf8(bytes[10..10 + len].to_vec()).unwrap(), bytes[10 + len..].to_vec())
}

#[test]
fn dump_npz_holds_float32_attentions_and_tokens() {
    let dir = tmp();
    let path = dir.path().join("a.npz");
    let out = attnviz(&[
        "dump",
        "--model",
        tiny().to_str().unwrap(),
        "--text",
        "Zürich 🙂",
        "--format",
        "npz",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (header, data) = npy_member(&path, "attentions.npy");
    assert!(header.contains("'<f4'"), "{header}");
    let n = 6; // [CLS] zurich [UNK]? … checked through the tokens member below
    let (tok_header, tok_data) = npy_member(&path, "tokens.npy");
    let count: usize = tok_header.split("'shape': (").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(count >= 3 && count <= n);
    assert!(header.contains(&format!("'shape': (2, 4, {count}, {count})")), "{header}");
    assert_eq!(data.len(), 2 * 4 * count * count * 4);
    let first_row: Vec<f32> = data[..count * 4].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert!((first_row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    let width: usize = tok_header.split("'<U").nth(1).unwrap().split('\'').next().unwrap().parse().unwrap();
    let first: String = tok_data[..width * 4]
        .chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .filter(|&c| c != 0)
        .map(|c| char::from_u32(c).unwrap())
        .collect();
    assert_eq!(first, "[CLS]");
    npy_member(&path, "segments.npy");
}

#[test]
fn pe_json_follows_the_formula() {
    let dir = tmp();
    let path = dir.path().join("pe.json");
    let out = attnviz(&["pe", "--d-model", "8", "--positions", "5", "--base", "1000", "-o", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let enc = &v["encoding"];
    assert_eq!(enc.as_array().unwrap().len(), 5);
    let want = (3.0f64 / 1000f64.powf(2.0 / 8.0)).cos(); // PE[3, 3] = cos(3 / base^(2·1/8))
    assert!((enc[3][3].as_f64().unwrap() - want).abs() < 1e-6);
    assert!((v["dot"][2][2].as_f64().unwrap() - 4.0).abs() < 1e-5);
    let out = attnviz(&["pe", "--d-model", "8", "--positions", "5", "--layout", "concatenated", "-o", "-"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["encoding"][0], serde_json::json!([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]));
}

#[test]
fn export_writes_decodable_pngs_for_every_view() {
    let dir = tmp();
    let model = tiny();
    for view in ["heatmap", "heads", "model", "pe", "pe-dot"] {
        let path = dir.path().join(format!("{view}.png"));
        let out = attnviz(&[
            "export",
            "--model",
            model.to_str().unwrap(),
            "--text",
            "The cat sat.",
            "--view",
            view,
            "--layer",
            "1",
            "--head",
            "2",
            "--theme",
            "dark",
            "--scale",
            "2",
            "--d-model",
            "16",
            "--positions",
            "10",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{view}: {}", stderr(&out));
        let img = image::open(&path).unwrap_or_else(|e| panic!("{view}: {e}"));
        assert!(img.width() > 50 && img.height() > 50, "{view}: {}×{}", img.width(), img.height());
    }
}

#[test]
fn export_writes_svg_and_pdf_for_every_view_from_the_same_layout() {
    let dir = tmp();
    let model = tiny();
    for view in ["heatmap", "heads", "model", "neuron", "stats", "rollout", "pe"] {
        let mut sizes = Vec::new();
        for ext in ["png", "svg", "pdf"] {
            let path = dir.path().join(format!("{view}.{ext}"));
            let out = attnviz(&[
                "export",
                "--model",
                model.to_str().unwrap(),
                "--text",
                "The cat sat.",
                "--view",
                view,
                "--d-model",
                "16",
                "--positions",
                "10",
                "-o",
                path.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{view}.{ext}: {}", stderr(&out));
            // "wrote F (W×H)": the same size in every format.
            let err = stderr(&out);
            sizes.push(err.rsplit('(').next().unwrap().trim().to_string());
            let bytes = std::fs::read(&path).unwrap();
            match ext {
                "svg" => {
                    let svg = String::from_utf8(bytes).unwrap();
                    let doc = usvg::roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{view}: {e}"));
                    let texts: Vec<&str> =
                        doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
                    if view != "pe" && view != "stats" && view != "model" {
                        assert!(texts.contains(&"cat"), "{view}: the token labels are text: {texts:?}");
                    }
                    assert!(!texts.is_empty());
                }
                "pdf" => {
                    assert!(bytes.starts_with(b"%PDF-"), "{view}");
                    assert!(String::from_utf8_lossy(&bytes[bytes.len() - 8..]).contains("%%EOF"));
                }
                _ => {
                    image::open(&path).unwrap();
                }
            }
        }
        assert!(sizes.iter().all(|s| *s == sizes[0]), "{view}: {sizes:?}");
    }
}

#[test]
fn unusual_text_is_not_an_error() {
    for text in ["", "tab\there\u{0007}bell", "zero\u{200B}width", "שלום עולם مرحبا", "\u{202E}override"] {
        let out = attnviz(&["dump", "--model", tiny().to_str().unwrap(), "--text", text, "-o", "-"]);
        assert!(out.status.success(), "{text:?}: {}", stderr(&out));
    }
}

#[test]
fn over_long_text_is_truncated_with_a_warning() {
    let long = "word ".repeat(100);
    let out = attnviz(&["dump", "--model", tiny().to_str().unwrap(), "--text", &long, "-o", "-"]);
    assert!(out.status.success());
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 24);
}

#[test]
fn bench_prints_the_documented_line() {
    let out = attnviz(&["bench", "--model", tiny().to_str().unwrap(), "--tokens", "20", "--runs", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.starts_with("tokens=20 runs=3 median_ms="), "{line}");
    assert!(line.contains(" min_ms="));
    assert_error(&attnviz(&["bench", "--model", tiny().to_str().unwrap(), "--tokens", "25"]), "--tokens");
}

#[test]
fn bad_arguments_are_one_line_errors_and_write_nothing() {
    let dir = tmp();
    let out_path = dir.path().join("x.png");
    let o = out_path.to_str().unwrap();
    let m = tiny();
    let m = m.to_str().unwrap();
    assert_error(
        &attnviz(&["export", "--model", m, "--text", "a", "--view", "heatmap", "--layer", "2", "-o", o]),
        "layer 2",
    );
    assert_error(
        &attnviz(&["export", "--model", m, "--text", "a", "--view", "heatmap", "--head", "4", "-o", o]),
        "head 4",
    );
    assert_error(&attnviz(&["export", "--view", "pe", "--d-model", "0", "-o", o]), "d_model");
    assert_error(&attnviz(&["export", "--view", "pe-dot", "--base", "-3", "-o", o]), "base");
    assert_error(&attnviz(&["pe", "--positions", "0", "-o", o]), "positions");
    assert_error(&attnviz(&["export", "--view", "pe", "--scale", "9", "-o", o]), "scale");
    assert_error(&attnviz(&["export", "--model", m, "--view", "model", "-o", o]), "--text");
    assert!(!out_path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no temporary files left");
}

#[test]
fn unwritable_output_is_an_error_naming_the_path() {
    let dir = tmp();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    let target = file.join("out.png");
    assert_error(&attnviz(&["export", "--view", "pe", "-o", target.to_str().unwrap()]), "not-a-folder");
    assert_error(&attnviz(&["export", "--view", "pe", "-o", dir.path().to_str().unwrap()]), "folder");
}

/// A copy of the tiny model folder with one file replaced or removed.
fn broken_model(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tmp();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(tiny().join(f), dir.path().join(f)).unwrap();
    }
    edit(dir.path());
    dir
}

#[test]
fn broken_model_folders_are_clear_errors() {
    let run = |dir: &Path| attnviz(&["dump", "--model", dir.to_str().unwrap(), "--text", "hi", "-o", "-"]);
    assert_error(&run(Path::new("/no/such/model")), "/no/such/model");
    let d = broken_model(|p| std::fs::remove_file(p.join("config.json")).unwrap());
    assert_error(&run(d.path()), "config.json");
    let d = broken_model(|p| std::fs::write(p.join("config.json"), "{ not json").unwrap());
    assert_error(&run(d.path()), "config.json");
    let d = broken_model(|p| {
        let text = std::fs::read_to_string(p.join("config.json")).unwrap().replace("gelu_new", "mish");
        std::fs::write(p.join("config.json"), text).unwrap();
    });
    assert_error(&run(d.path()), "hidden_act");
    let d = broken_model(|p| {
        let text = std::fs::read_to_string(p.join("config.json"))
            .unwrap()
            .replace("\"hidden_size\": 32", "\"hidden_size\": 64");
        std::fs::write(p.join("config.json"), text).unwrap();
    });
    assert_error(&run(d.path()), "shape");
    let d = broken_model(|p| std::fs::write(p.join("model.safetensors"), b"garbage, not safetensors").unwrap());
    assert_error(&run(d.path()), "model.safetensors");
    let d = broken_model(|p| {
        let bytes = std::fs::read(p.join("model.safetensors")).unwrap();
        std::fs::write(p.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    });
    assert_error(&run(d.path()), "model.safetensors");
    let d = broken_model(|p| {
        std::fs::remove_file(p.join("model.safetensors")).unwrap();
        std::fs::write(p.join("pytorch_model.bin"), b"pickle").unwrap();
    });
    assert_error(&run(d.path()), "only safetensors");
    let d = broken_model(|p| std::fs::write(p.join("tokenizer.json"), "{}").unwrap());
    assert_error(&run(d.path()), "tokenizer");
}

fn dump_json(args: &[&str]) -> serde_json::Value {
    let dir = tmp();
    let path = dir.path().join("d.json");
    let mut all = vec!["dump", "--text", "Where is the cat?", "-o", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = attnviz(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

#[test]
fn modified_runs_are_marked_in_dumps_and_faithful_ones_are_not() {
    let faithful = dump_json(&["--model", tiny().to_str().unwrap(), "--temperature", "1"]);
    assert_eq!(faithful.as_object().unwrap().len(), 4, "a faithful dump keeps exactly the documented keys");
    let ablated = dump_json(&["--model", tiny().to_str().unwrap(), "--ablate", "0:1", "--temperature", "0.5"]);
    assert_eq!(ablated["intervention"], "ablated heads 0:1; temperature 0.5");
    // Layer 0's attention is not touched by ablating a layer-0 head, but the temperature sharpens it.
    assert_ne!(ablated["attentions"][0], faithful["attentions"][0]);
    let first = dump_json(&["--model", tiny().to_str().unwrap(), "--first-layers", "1", "--causal"]);
    assert_eq!(first["attentions"].as_array().unwrap().len(), 1);
    assert_eq!(first["attentions"][0][0][0][1], 0.0, "causal: the first query sees only itself");
    assert!(first["intervention"].as_str().unwrap().contains("causal mask"));

    let dir = tmp();
    let npz = dir.path().join("a.npz");
    let out = attnviz(&[
        "dump",
        "--model",
        tiny().to_str().unwrap(),
        "--text",
        "hi",
        "--zero-positions",
        "--format",
        "npz",
        "-o",
        npz.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("not the faithful model"));
    let (header, _) = npy_member(&npz, "intervention.npy");
    assert!(header.contains("'shape': (1,)"), "{header}");
}

#[test]
fn playground_runs_from_the_command_line() {
    let d = dump_json(&["--playground", "layers=2,heads=4,d_model=64,pe=none,seed=3"]);
    assert!(d["model"].as_str().unwrap().starts_with("playground · 2 layers × 4 heads · d_model 64"), "{}", d["model"]);
    assert_eq!(d["attentions"].as_array().unwrap().len(), 2);
    assert_eq!(d["attentions"][0].as_array().unwrap().len(), 4);
    assert_eq!(d["tokens"][0], "[CLS]");
    let dir = tmp();
    let png = dir.path().join("grid.png");
    let out = attnviz(&[
        "export",
        "--view",
        "model",
        "--text",
        "hi there",
        "--playground",
        "layers=3,heads=2,d_model=16",
        "-o",
        png.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    image::open(&png).unwrap();

    let target = dir.path().join("never.json");
    let t = target.to_str().unwrap();
    for (args, needle) in [
        (vec!["--playground", "heads=3"], "divisible"),
        (vec!["--playground", "layers=0"], "layers"),
        (vec!["--playground", "depth=3"], "unknown key"),
        (vec!["--playground", "layers=2", "--model", tiny().to_str().unwrap()], "--model"),
        (vec!["--ablate", "7:0"], "7:0"),
        (vec!["--ablate", "x"], "LAYER:HEAD"),
        (vec!["--temperature", "0"], "temperature"),
    ] {
        let mut all = vec!["dump", "--text", "hi", "-o", t];
        all.extend(args);
        assert_error(&attnviz(&all), needle);
        assert!(!target.exists());
    }
}

#[test]
fn stats_writes_one_csv_line_per_head_and_json_objects() {
    let text = "The cat sat, and the dog ran.";
    let out = attnviz(&["stats", "--model", tiny().to_str().unwrap(), "--text", text]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "layer,head,entropy,cls,sep,punctuation,self,previous,next");
    assert_eq!(lines.len(), 1 + 2 * 4, "tiny-bert: 2 layers × 4 heads");
    let dir = tmp();
    let path = dir.path().join("stats.json");
    let out = attnviz(&[
        "stats",
        "--model",
        tiny().to_str().unwrap(),
        "--text",
        text,
        "--format",
        "json",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 8);
    // The JSON and the CSV carry the same numbers.
    let first: Vec<f64> = lines[1].split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!(rows[0]["entropy"].as_f64().unwrap() as f32, first[2] as f32);
    assert_eq!(rows[0]["self"].as_f64().unwrap() as f32, first[6] as f32);
    // A GPT-2 model: no [CLS]/[SEP], so those shares are zero.
    let gpt2 = root().join("tests/fixtures/models/tiny-gpt2");
    let out = attnviz(&["stats", "--model", gpt2.to_str().unwrap(), "--text", text]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = String::from_utf8(out.stdout).unwrap();
    for line in csv.lines().skip(1) {
        let cols: Vec<f32> = line.split(',').map(|x| x.parse().unwrap()).collect();
        assert_eq!((cols[3], cols[4]), (0.0, 0.0), "{line}");
        assert_eq!(cols[8], 0.0, "causal: nothing goes to the next token");
    }
}

#[test]
fn export_draws_the_new_views_and_writes_their_numbers() {
    let dir = tmp();
    let model = tiny();
    let text = "embeddings are unbelievable";
    for (view, extra) in [
        ("neuron", &["--query", "2", "--head", "1"][..]),
        ("stats", &["--stat", "cls"][..]),
        ("rollout", &["--layer", "1"][..]),
        ("flow", &["--layer", "1"][..]),
    ] {
        for ext in ["png", "csv", "json", "npz"] {
            let path = dir.path().join(format!("{view}.{ext}"));
            let mut args = vec!["export", "--model", model.to_str().unwrap(), "--view", view, "--text", text];
            args.extend_from_slice(extra);
            args.extend(["-o", path.to_str().unwrap()]);
            let out = attnviz(&args);
            assert!(out.status.success(), "{view}.{ext}: {}", stderr(&out));
            let bytes = std::fs::read(&path).unwrap();
            match ext {
                "png" => assert!(image::load_from_memory(&bytes).unwrap().width() > 100),
                "json" => {
                    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    assert!(v.is_array() || v["values"].is_array(), "{view}: {v}");
                }
                "npz" => assert_eq!(&bytes[..2], b"PK", "{view}: a zip archive"),
                _ => assert!(String::from_utf8(bytes).unwrap().lines().count() > 2),
            }
        }
    }
    // Rollout rows sum to 1; with --words the matrix is over words.
    let path = dir.path().join("words.csv");
    let args = [
        "export",
        "--model",
        model.to_str().unwrap(),
        "--view",
        "rollout",
        "--words",
        "--layer",
        "1",
        "--text",
        text,
        "-o",
        path.to_str().unwrap(),
    ];
    let out = attnviz(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(&path).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header[1..], ["[CLS]", "embeddings", "are", "unbelievable", "[SEP]"]);
    for line in csv.lines().skip(1) {
        let sum: f32 = line.split(',').skip(1).map(|x| x.parse::<f32>().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-4, "{line}");
    }
    let bad = dir.path().join("x.txt");
    let out = attnviz(&[
        "export",
        "--model",
        model.to_str().unwrap(),
        "--view",
        "stats",
        "--text",
        text,
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_error(&out, "unknown export format");
    assert!(!bad.exists());
}

#[test]
fn flow_refuses_inputs_too_long_for_it_with_a_reason() {
    let long = "the cat sat on the mat and looked around ".repeat(20);
    let dir = tmp();
    let path = dir.path().join("flow.png");
    let out = attnviz(&["export", "--view", "flow", "--text", &long, "-o", path.to_str().unwrap()]);
    assert_error(&out, "limited to 128 tokens");
    assert!(!path.exists());
}

/// The text of the `*_single` references.
const SENTENCE: &str = "The animal didn't cross the street because it was too tired.";

#[test]
fn hub_ids_resolve_offline_from_the_hugging_face_cache() {
    let cache = common::fake_hf_cache(&root().join("tests/fixtures/models/tiny-roberta"), "org/tiny-roberta");
    let dir = tmp();
    let out_path = dir.path().join("hub.json");
    let run = |id: &str| {
        common::output_sandboxed(
            Command::new(env!("CARGO_BIN_EXE_attnviz"))
                .args(["dump", "--model", id, "--text", SENTENCE, "-o", out_path.to_str().unwrap()])
                .env_remove("ATTNVIZ_MODEL")
                .env("HF_HUB_CACHE", cache.path())
                .env("HF_HUB_OFFLINE", "1"),
        )
    };
    let out = run("org/tiny-roberta");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    assert_eq!(v["model"], "org/tiny-roberta");
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/roberta_single.json")).unwrap())
            .unwrap();
    assert_eq!(v["tokens"], reference["tokens"]);
    let got = v["attentions"][1][2][3][4].as_f64().unwrap();
    let want = reference["attentions"][1][2][3][4].as_f64().unwrap();
    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    // An id that is not in the cache says where it looked.
    let out = run("org/not-downloaded");
    assert_error(&out, "org/not-downloaded");
    assert!(stderr(&out).contains(&cache.path().display().to_string()), "{}", stderr(&out));
}

#[test]
fn unsupported_families_and_keys_are_named() {
    let out_dir = tmp();
    let out_path = out_dir.path().join("never.json");
    let dump_with = |model: &Path| {
        attnviz(&["dump", "--model", model.to_str().unwrap(), "--text", "hi", "-o", out_path.to_str().unwrap()])
    };
    let d = broken_model(|p| {
        let text = std::fs::read_to_string(p.join("config.json")).unwrap().replace("\"bert\"", "\"whisper\"");
        std::fs::write(p.join("config.json"), text).unwrap();
    });
    let out = dump_with(d.path());
    assert_error(&out, "model_type");
    assert!(stderr(&out).contains("whisper") && stderr(&out).contains("deberta-v2"), "{}", stderr(&out));
    let d = broken_model(|p| {
        let text = std::fs::read_to_string(p.join("config.json"))
            .unwrap()
            .replace("\"model_type\"", "\"position_embedding_type\": \"relative_key\", \"model_type\"");
        std::fs::write(p.join("config.json"), text).unwrap();
    });
    let out = dump_with(d.path());
    assert_error(&out, "position_embedding_type");
    // A SentencePiece-only folder says how to write tokenizer.json.
    let d = broken_model(|p| {
        std::fs::remove_file(p.join("tokenizer.json")).unwrap();
        std::fs::write(p.join("spm.model"), b"sentencepiece").unwrap();
    });
    let out = dump_with(d.path());
    assert_error(&out, "SentencePiece");
    assert!(!out_path.exists(), "nothing is written on failure");
}

#[test]
fn an_error_names_its_reason_once() {
    let dir = tmp();
    let out_path = dir.path().join("pe.png");
    let out = attnviz(&["export", "--view", "pe", "--d-model", "65", "-o", out_path.to_str().unwrap()]);
    assert_error(&out, "d_model must be a positive even number");
    assert_eq!(stderr(&out).matches("d_model must be").count(), 1, "{}", stderr(&out));
    assert!(!out_path.exists());
    // A mistyped size is refused before 100 GB are asked for (found by the app's monkey).
    let out = attnviz(&["export", "--view", "pe", "--positions", "99999999", "-o", out_path.to_str().unwrap()]);
    assert_error(&out, "positions must be at most 4096, got 99999999");
    assert!(!out_path.exists());
}

#[test]
fn a_config_claiming_absurd_sizes_is_refused_at_once() {
    // Reported: num_hidden_layers = 10⁹ with the weights of a 2-layer model ran for over 20 s.
    let out_dir = tmp();
    let out_path = out_dir.path().join("never.json");
    for (key, value, needle) in [
        (
            "\"num_hidden_layers\": 2",
            "\"num_hidden_layers\": 1000000000",
            "\"num_hidden_layers\" = 1000000000 is not supported: is implausibly large",
        ),
        ("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", "fewer layers (2) than config.json says (3)"),
        ("\"vocab_size\": 30522", "\"vocab_size\": 1000000000000", "vocab_size"),
        ("\"num_attention_heads\": 4", "\"num_attention_heads\": -4", "num_attention_heads"),
    ] {
        let d = broken_model(|p| {
            let text = std::fs::read_to_string(p.join("config.json")).unwrap();
            assert!(text.contains(key), "{key}");
            std::fs::write(p.join("config.json"), text.replace(key, value)).unwrap();
        });
        // Refused from config.json alone (the old loader listed 10⁹ layers of missing tensors first).
        let out =
            attnviz(&["dump", "--model", d.path().to_str().unwrap(), "--text", "hi", "-o", out_path.to_str().unwrap()]);
        assert_error(&out, needle);
        assert!(!out_path.exists());
    }
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/models").join(name)
}

#[test]
fn generate_writes_the_dump_over_prompt_and_continuation_as_transformers_generates() {
    // tests/fixtures/reference/llama_generate.json: transformers' greedy generate on tiny-llama.
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/llama_generate.json")).unwrap())
            .unwrap();
    let dir = tmp();
    let path = dir.path().join("g.json");
    let model = fixture("tiny-llama");
    let out = attnviz(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--text",
        reference["text"].as_str().unwrap(),
        "--max-new-tokens",
        "8",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("8 tokens written"), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["attentions", "continuation", "model", "prompt_tokens", "segments", "steps", "stopped", "tokens"]
    );
    assert_eq!(v["tokens"], reference["tokens"]);
    assert_eq!(v["prompt_tokens"], reference["prompt_tokens"]);
    let (got, want) = (v["attentions"].as_array().unwrap(), reference["attentions"].as_array().unwrap());
    let flat = |a: &serde_json::Value| -> Vec<f64> {
        a.as_array()
            .unwrap()
            .iter()
            .flat_map(|h| {
                h.as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
            })
            .collect()
    };
    for (g, w) in got.iter().zip(want) {
        for (a, b) in flat(g).iter().zip(flat(w)) {
            assert!((a - b).abs() <= 1e-5);
        }
    }
    assert_eq!(v["steps"].as_array().unwrap().len(), 8);
    assert_eq!(v["steps"][0]["position"], reference["prompt_tokens"]);
    // NPZ carries the prompt length too.
    let npz = dir.path().join("g.npz");
    let model = fixture("tiny-qwen2");
    let out = attnviz(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--text",
        "Hello there",
        "--max-new-tokens",
        "3",
        "--format",
        "npz",
        "-o",
        npz.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (header, data) = npy_member(&npz, "prompt_tokens.npy");
    assert!(header.contains("'<i8'") && header.contains("'shape': ()"), "{header}");
    assert!(i64::from_le_bytes(data[..8].try_into().unwrap()) >= 2);
}

#[test]
fn generate_needs_a_language_model_head() {
    let dir = tmp();
    let path = dir.path().join("never.json");
    let out = attnviz(&["generate", "--model", tiny().to_str().unwrap(), "--text", "hi", "-o", path.to_str().unwrap()]);
    assert_error(&out, "lm_head");
    assert!(!path.exists());
    // An encoder–decoder saved without its head (transformers' BartModel) opens but cannot translate.
    let headless = fixture("tiny-bart-headless");
    let out =
        attnviz(&["generate", "--model", headless.to_str().unwrap(), "--text", "hi", "-o", path.to_str().unwrap()]);
    assert_error(&out, "no language-model head");
    assert!(!path.exists());
    let v = dump_json(&["--model", headless.to_str().unwrap(), "--target", "A cat."]);
    assert!(v["cross_attentions"].as_array().is_some_and(|a| a.len() == 2), "{v}");
}

#[test]
fn gguf_files_and_the_embedded_smollm2_open_by_path_and_by_name_and_say_they_are_quantised() {
    let gguf = fixture("tiny-llama-gguf/tiny-llama.Q4.gguf");
    let v = dump_json(&["--model", gguf.to_str().unwrap()]);
    let q = v["quantization"].as_str().unwrap();
    assert!(q.contains("Q4_1") && q.contains("kept in their blocks"), "{q}");
    assert_eq!(v["model"], "tiny-llama.Q4.gguf");
    let v = dump_json(&["--model", "smollm2"]);
    assert_eq!(v["attentions"].as_array().unwrap().len(), 30);
    assert_eq!(v["attentions"][0].as_array().unwrap().len(), 9);
    assert!(v["quantization"].as_str().unwrap().starts_with("GGUF Q4_1"));
    // A safetensors model's dump has no such key.
    assert!(dump_json(&["--model", fixture("tiny-llama").to_str().unwrap()]).get("quantization").is_none());
}

#[test]
fn encoder_decoders_dump_three_attentions_with_a_target_and_the_encoder_alone_without() {
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/marian_single.json")).unwrap())
            .unwrap();
    let model = fixture("tiny-marian");
    let source = reference["text"].as_str().unwrap();
    let dir = tmp();
    let three = dir.path().join("three.json");
    let target = reference["target"].as_str().unwrap();
    let out = attnviz(&[
        "dump",
        "--model",
        model.to_str().unwrap(),
        "--text",
        source,
        "--target",
        target,
        "-o",
        three.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&three).unwrap()).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["attentions", "cross_attentions", "decoder_attentions", "model", "segments", "target_tokens", "tokens"]
    );
    assert_eq!(v["target_tokens"], reference["target_tokens"]);
    for key in ["attentions", "decoder_attentions", "cross_attentions"] {
        let flat = |x: &serde_json::Value| -> Vec<f64> {
            let mut out = Vec::new();
            let mut stack = vec![x];
            while let Some(v) = stack.pop() {
                match v {
                    serde_json::Value::Array(a) => stack.extend(a.iter().rev()),
                    n => out.push(n.as_f64().unwrap()),
                }
            }
            out
        };
        let (got, want) = (flat(&v[key]), flat(&reference[key]));
        assert_eq!(got.len(), want.len(), "{key}");
        assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-5), "{key}");
    }
    // Without --target: the encoder alone, and stderr says so.
    let path = dir.path().join("e.json");
    let out = attnviz(&["dump", "--model", model.to_str().unwrap(), "--text", source, "-o", path.to_str().unwrap()]);
    assert!(out.status.success() && stderr(&out).contains("only its encoder ran"), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(v.get("cross_attentions").is_none() && v["attentions"].is_array());
    // A decoder-only model refuses a target.
    let out = attnviz(&[
        "dump",
        "--model",
        fixture("tiny-llama").to_str().unwrap(),
        "--text",
        "x",
        "--target",
        "y",
        "-o",
        "-",
    ]);
    assert_error(&out, "not an encoder–decoder");
    // generate translates greedily, as transformers does.
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/t5_generate.json")).unwrap())
            .unwrap();
    let path = dir.path().join("t.npz");
    let out = attnviz(&[
        "generate",
        "--model",
        fixture("tiny-t5").to_str().unwrap(),
        "--text",
        reference["text"].as_str().unwrap(),
        "--max-new-tokens",
        "8",
        "--format",
        "npz",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (header, _) = npy_member(&path, "cross_attentions.npy");
    let n = reference["generated_ids"].as_array().unwrap().len();
    let sources = reference["ids"].as_array().unwrap().len();
    assert!(header.contains(&format!("'shape': (2, 4, {n}, {sources})")), "{header}");
    npy_member(&path, "decoder_attentions.npy");
    npy_member(&path, "target_tokens.npy");
}

#[test]
fn the_neuron_figure_of_a_rotary_model_says_q_and_k_are_rotated() {
    let dir = tmp();
    let model = fixture("tiny-llama");
    let export = |path: &Path| {
        let out = attnviz(&[
            "export",
            "--model",
            model.to_str().unwrap(),
            "--text",
            "Rotate me.",
            "--view",
            "neuron",
            "--layer",
            "1",
            "--head",
            "2",
            "--query",
            "3",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let path = dir.path().join("n.json");
    export(&path);
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("after the rotary rotation"), "{}", &json[..300.min(json.len())]);
    let png = dir.path().join("n.png");
    export(&png);
    assert!(image::open(&png).is_ok());
}

#[test]
fn a_second_sentence_is_refused_by_models_that_read_one_text_saying_where_it_goes() {
    let dir = tmp();
    let out_path = dir.path().join("never.json");
    for (model, needle) in [
        ("tiny-bart", "an encoder–decoder reads one source text (its target goes in the Target box)"),
        ("tiny-llama", "a language model reads one text: untick Sentence B"),
    ] {
        let model = fixture(model);
        let args = ["dump", "--model", model.to_str().unwrap(), "--text", "One.", "--text-pair", "Two."];
        let out = attnviz(&[&args[..], &["-o", out_path.to_str().unwrap()]].concat());
        assert_error(&out, needle);
        assert!(!out_path.exists());
    }
}

#[test]
fn export_stack_cross_labels_target_rows_and_source_columns_and_refuses_rollout() {
    let model = fixture("tiny-bart");
    let model = model.to_str().unwrap();
    let dir = tmp();
    let (source, target) = ("The cat sat on the mat.", "Le chat.");
    let dump = dir.path().join("three.json");
    let out = attnviz(&["dump", "--model", model, "--text", source, "--target", target, "-o", dump.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let d: serde_json::Value = serde_json::from_slice(&std::fs::read(&dump).unwrap()).unwrap();
    // The heatmap's numbers: target tokens as rows, source tokens as columns, the cross head's values.
    let json = dir.path().join("cross.json");
    let export = |stack: &str, view: &str, path: &Path, with_target: bool| {
        let mut args = vec!["export", "--model", model, "--text", source, "--stack", stack, "--view", view];
        if with_target {
            args.extend(["--target", target]);
        }
        args.extend(["--layer", "1", "--head", "2", "-o", path.to_str().unwrap()]);
        attnviz(&args)
    };
    let out = export("cross", "heatmap", &json, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let (rows, cols) = (t["row_labels"].as_array().unwrap(), t["col_labels"].as_array().unwrap());
    assert_eq!(rows.len(), d["target_tokens"].as_array().unwrap().len());
    assert_eq!(cols.len(), d["tokens"].as_array().unwrap().len());
    assert_ne!(rows.len(), cols.len(), "the fixture's source and target differ in length");
    // The cross head, target × source (the export writes f32 values widened to f64).
    let as_f32 = |v: &serde_json::Value| -> Vec<Vec<f32>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
            .collect()
    };
    assert_eq!(as_f32(&t["values"]), as_f32(&d["cross_attentions"][1][2]));
    assert!(t["title"].as_str().unwrap().contains("cross-attention"), "{}", t["title"]);
    // The head view as PNG decodes.
    let png = dir.path().join("cross.png");
    let out = export("cross", "heads", &png, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let image = image::open(&png).unwrap();
    assert!(image.width() > 100 && image.height() > 100);
    // Decoder self-attention is causal: the masked cells are null.
    let out = export("decoder", "heatmap", &json, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(t["values"][0][1].is_null() && t["values"][1][0].is_number());
    // Cross-attention rollout is not defined: refused with the reason, nothing written.
    let refused = dir.path().join("rollout.png");
    assert_error(&export("cross", "rollout", &refused, true), "not defined for cross-attention");
    assert_error(&export("cross", "flow", &refused, true), "not defined for cross-attention");
    assert!(!refused.exists());
    // The decoder and cross-attention need a target.
    assert_error(&export("cross", "heads", &refused, false), "--stack cross needs --target");
    assert!(!refused.exists());
}

#[test]
fn export_draws_the_readout_views_and_writes_their_numbers() {
    let dir = tmp();
    let model = fixture("tiny-llama");
    for (view, ext) in
        [("lens", "png"), ("lens", "csv"), ("dla", "png"), ("dla", "csv"), ("graph", "png"), ("roles", "png")]
    {
        let path = dir.path().join(format!("{view}.{ext}"));
        let m = model.to_str().unwrap();
        let out = attnviz(&[
            "export",
            "--model",
            m,
            "--text",
            "a cat and a cat",
            "--view",
            view,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{view}: {}", stderr(&out));
        if ext == "png" {
            let img = image::open(&path).unwrap_or_else(|e| panic!("{view}: {e}"));
            assert!(img.width() > 100, "{view}");
        } else {
            let csv = std::fs::read_to_string(&path).unwrap();
            assert!(csv.lines().count() > 2, "{view}: {csv}");
        }
    }
    // A model without a language-model head says why.
    let o = dir.path().join("bert-lens.png");
    assert_error(
        &attnviz(&[
            "export",
            "--model",
            tiny().to_str().unwrap(),
            "--text",
            "a",
            "--view",
            "lens",
            "-o",
            o.to_str().unwrap(),
        ]),
        "language-model head",
    );
}

/// `$ATTNVIZ_MODEL` naming an embedded model by its short name opens it (it overflowed the stack:
/// the embedded models were looked for beside the folder the variable named).
#[test]
fn attnviz_model_may_name_an_embedded_model() {
    let dir = tmp();
    for name in ["smollm2", "minilm"] {
        let path = dir.path().join(format!("{name}.json"));
        let out = common::output_sandboxed(
            Command::new(env!("CARGO_BIN_EXE_attnviz"))
                .args(["dump", "--text", "The cat sat.", "-o", path.to_str().unwrap()])
                .env("ATTNVIZ_MODEL", name),
        );
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let dump: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let want = if name == "smollm2" { "SmolLM2-135M-Instruct.Q4_1.gguf" } else { "all-MiniLM-L6-v2" };
        assert_eq!(dump["model"], want, "{name}");
    }
}

#[test]
fn help_lists_every_family_attnviz_opens_encoder_decoders_included() {
    let out = attnviz(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    // --help wraps to the terminal: compare with the words joined by single spaces.
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for model_type in attnviz::model::families::supported_model_types().split(", ") {
        assert!(flat.contains(&format!("({model_type})")), "--help names no {model_type}: {flat}");
    }
    assert!(flat.contains("encoder–decoders, with cross-attention: BART (bart), mBART (mbart), Marian (marian)"));
}

fn attention_fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/attention").join(name)
}

#[test]
fn open_check_reads_the_readme_examples_files() {
    let cases = [
        ("bert.npz", "../models/tiny-bert · 2 layers × 4 heads × 16 tokens"),
        ("gpt2-tl.npz", "gpt2 (TransformerLens) · 2 layers × 4 heads × 32 tokens · causal"),
        ("vit.npz", "vit.npz · 2 layers × 4 heads × 17 tokens"),
    ];
    for (name, summary) in cases {
        let path = attention_fixture(name);
        let out = attnviz(&["open", "--check", path.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let said = String::from_utf8(out.stdout).unwrap();
        assert!(said.contains(summary), "{name}: {said}");
    }
    // The Hugging Face example's attention is the model's: attnviz's own run of tiny-bert on the
    // same sentence matches it, token for token (to bfloat16 precision: tiny-bert's weights are
    // bfloat16, and transformers 5 computes in the checkpoint's dtype unless told otherwise).
    let file = attnviz::analysis::import::read_attention_file(&attention_fixture("bert.npz")).unwrap();
    let model = attnviz::model::LoadedModel::load(&tiny()).unwrap();
    let run = model.run("The animal didn't cross the street because it was too tired.", None).unwrap();
    assert_eq!(file.tokens.tokens, run.tokens.tokens);
    let worst =
        file.attention.as_slice().iter().zip(run.attention.as_slice()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(worst < 2e-2, "{worst}");
    // The vision transformer's labels are its patches.
    let vit = attnviz::analysis::import::read_attention_file(&attention_fixture("vit.npz")).unwrap();
    assert_eq!(vit.tokens.tokens[0], "[CLS]");
    assert_eq!(vit.tokens.tokens[16], "patch 3,3");
    assert!(vit.tokens.special[0] && !vit.tokens.special[1]);
}

#[test]
fn the_readme_examples_are_the_blocks_the_fixture_script_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let script = std::fs::read_to_string(root().join("tests/fixtures/make_attention_examples.py")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```python\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .filter(|b| b.starts_with("# attnviz open "))
        .collect();
    assert_eq!(blocks.len(), 3, "the README shows three examples");
    for block in blocks {
        let name = block.split_whitespace().nth(3).unwrap();
        assert!(attention_fixture(name).is_file(), "{name}: written by the script and committed");
        // The script replaces one line of each block (the checkpoint it loads), quoted in it.
        let replaced = block.lines().filter(|l| script.contains(&format!("'{l}'"))).count();
        assert_eq!(replaced, 1, "{name}: one line the script replaces");
        assert!(block.lines().count() <= 10, "{name}: ten lines at most");
        assert!(block.contains(&format!("np.savez_compressed(\"{name}\"")), "{name}");
    }
}

#[test]
fn dumps_open_again_as_the_same_attention() {
    let dir = tmp();
    let cases: [(&str, Vec<&str>); 3] = [
        ("tiny-bert", vec!["--text", "The cat sat.", "--text-pair", "It purred."]),
        ("tiny-gpt2", vec!["--text", "The cat sat on the mat."]),
        ("tiny-bart", vec!["--text", "The cat sat.", "--target", "Le chat"]),
    ];
    for (model, args) in cases {
        let dir_of = root().join("tests/fixtures/models").join(model);
        let m = attnviz::model::LoadedModel::load(&dir_of).unwrap();
        for format in ["json", "npz"] {
            let out = dir.path().join(format!("{model}.{format}"));
            let mut all =
                vec!["dump", "--model", dir_of.to_str().unwrap(), "--format", format, "-o", out.to_str().unwrap()];
            all.extend(&args);
            let done = attnviz(&all);
            assert!(done.status.success(), "{}", stderr(&done));
            let file = attnviz::analysis::import::read_attention_file(&out).unwrap();
            let text = args[1];
            let pair = args.iter().position(|a| *a == "--text-pair").map(|i| args[i + 1]);
            let run = m.run(text, pair).unwrap();
            assert_eq!(file.tokens.tokens, run.tokens.tokens, "{model} {format}");
            assert_eq!(file.tokens.segments, run.tokens.segments, "{model} {format}");
            assert_eq!(file.attention.as_slice(), run.attention.as_slice(), "{model} {format}: bit for bit");
            assert_eq!(file.causal, model == "tiny-gpt2", "{model} {format}");
            assert_eq!(file.decoder.is_some(), model == "tiny-bart", "{model} {format}");
            assert_eq!(file.model_name, model, "{model} {format}: named after the model, in JSON and NPZ");
            if let Some(d) = &file.decoder {
                assert_eq!(d.cross.keys(), run.tokens.len());
            }
        }
    }
}

#[test]
fn open_refuses_a_bad_file_with_one_line_before_any_window() {
    let dir = tmp();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"tokens": ["a", "b"], "attentions": [[[[0.9, 0.9], [0.5, 0.5]]]]}"#).unwrap();
    assert_error(&attnviz(&["open", bad.to_str().unwrap()]), "bad.json: `attentions`[0][0][0] sums to 1.8, not 1");
    assert_error(&attnviz(&["open", "--check", "/no/such/file.npz"]), "/no/such/file.npz");
}

#[test]
fn knockout_is_an_intervention_of_dump_lens_dla_and_generate() {
    let dir = tmp();
    let llama = fixture("tiny-llama");
    let model = llama.to_str().unwrap();
    let text = "The cat sat on the mat.";
    // Query 3 may not attend to key 1 at layer 0; a key after its query changes nothing, and is said.
    let path = dir.path().join("k.json");
    let out =
        attnviz(&["dump", "--model", model, "--text", text, "--knockout", "0:3:1,0:1:3", "-o", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("note: knockout 0:1:3 changes nothing: a key after its query"), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(v["intervention"], "knocked out 0:1:3,0:3:1");
    for head in v["attentions"][0].as_array().unwrap() {
        let row: Vec<f64> = head[3].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(row[1], 0.0, "knocked out");
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5, "the row renormalises");
    }
    for command in ["lens", "dla", "generate"] {
        let path = dir.path().join(format!("{command}.json"));
        let out =
            attnviz(&[command, "--model", model, "--text", text, "--knockout", "*:3:1", "-o", path.to_str().unwrap()]);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["intervention"], "knocked out *:3:1", "{command}");
    }
}

#[test]
fn bad_knockouts_are_one_line_errors_and_write_nothing() {
    let dir = tmp();
    let llama = fixture("tiny-llama");
    let model = llama.to_str().unwrap();
    let path = dir.path().join("k.json");
    let cases = [
        ("9:3:1", "cannot knock out 9:3:1: the model runs layers 0 to 1"),
        ("0:30:1", "cannot knock out 0:30:1: the input has positions 0 to 7"),
        ("*:1:0,*:1:1", "leaves query 1 of layer 0 no key to attend to (it sees keys 0 to 1)"),
        ("0:0:0", "leaves query 0 of layer 0 no key"),
        ("3-1", "--knockout: \"3-1\" is not LAYER:QUERY:KEY"),
    ];
    for command in ["dump", "lens", "dla", "generate"] {
        for (knockout, needle) in cases {
            let args = [command, "--model", model, "--text", "The cat sat on the mat.", "--knockout", knockout];
            let out = attnviz(&[&args[..], &["-o", path.to_str().unwrap()]].concat());
            assert_error(&out, needle);
            assert!(!path.exists(), "{command} {knockout}: nothing written");
        }
    }
}

#[test]
fn patch_writes_the_grid_as_json_and_npz() {
    let dir = tmp();
    let json = dir.path().join("p.json");
    let llama = fixture("tiny-llama");
    let (clean, corrupted) = ("The cat sat on the mat.", "The cat sat on the cat.");
    let base = ["--model", llama.to_str().unwrap(), "patch", "--clean", clean, "--corrupted", corrupted];
    let out = attnviz(
        &[&base[..], &["--answer", " mat", "--wrong", "Ġcat", "--at", "mlp-out", "-o", json.to_str().unwrap()]]
            .concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for key in
        ["clean_tokens", "corrupted_tokens", "clean_logit_diff", "corrupted_logit_diff", "logit_diff", "normalized"]
    {
        assert!(v.get(key).is_some(), "{key}");
    }
    assert_eq!(v["clean_tokens"].as_array().unwrap().len(), 8);
    assert_eq!(
        (v["answer"].as_str(), v["wrong"].as_str(), v["at"].as_str()),
        (Some("Ġmat"), Some("Ġcat"), Some("mlp-out"))
    );
    let grid = v["logit_diff"].as_array().unwrap();
    assert_eq!((grid.len(), grid[0].as_array().unwrap().len()), (2, 8), "layers × positions");
    // Before the first changed token nothing changes: the corrupted difference, normalised 0.
    assert_eq!(grid[1][3].as_f64().unwrap(), v["corrupted_logit_diff"].as_f64().unwrap());
    assert_eq!(v["normalized"][1][3].as_f64().unwrap(), 0.0);

    // The same sweep as NPZ, with the same names; clean into clean has no span to normalise.
    let npz = dir.path().join("p.npz");
    let same = ["--corrupted", clean, "--answer", " mat", "--wrong", " cat", "--at", "head", "--format", "npz"];
    let args = ["--model", llama.to_str().unwrap(), "patch", "--clean", clean];
    let out = attnviz(&[&args[..], &same[..], &["-o", npz.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    for name in
        ["clean_tokens", "corrupted_tokens", "clean_logit_diff", "corrupted_logit_diff", "logit_diff", "normalized"]
    {
        let (header, data) = npy_member(&npz, &format!("{name}.npy"));
        if name == "logit_diff" || name == "normalized" {
            assert!(header.contains("'<f4'") && header.contains("(2, 4)"), "{name}: {header}");
        }
        if name == "normalized" {
            assert!(data.chunks(4).all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_nan()), "null as NaN");
        }
    }
}

#[test]
fn bad_patches_are_one_line_errors_and_write_nothing() {
    let dir = tmp();
    let path = dir.path().join("p.json");
    let o = path.to_str().unwrap();
    let llama = fixture("tiny-llama");
    let m = llama.to_str().unwrap();
    let patch = |clean: &str, corrupted: &str, answer: &str, more: &[&str]| {
        let args = ["--model", m, "patch", "--clean", clean, "--corrupted", corrupted, "--answer", answer];
        attnviz(&[&args[..], &["--wrong", " mat", "--at", "resid-pre", "-o", o], more].concat())
    };
    let cases = [
        (
            patch("The cat sat.", "The cat sat on.", " cat", &[]),
            "clean has 5 (<|begin_of_text|> The Ġcat Ġsat .), corrupted 6",
        ),
        (patch("The cat sat.", "The mat sat.", " catapult", &[]), "--answer: \" catapult\" is"),
        (patch("The cat sat.", "The mat sat.", " cat", &["--knockout", "0:9:0"]), "cannot knock out 0:9:0"),
        (patch("The cat sat.", "The mat sat.", " cat", &["--knockout", "7:1:0"]), "the model runs layers 0 to 1"),
        (patch("The cat sat.", "The mat sat.", " cat", &["--ablate", "0:99"]), "cannot ablate head 0:99"),
    ];
    for (out, needle) in cases {
        assert_error(&out, needle);
        assert!(!path.exists(), "{needle}: nothing written");
    }
    let out = attnviz(&[
        "--model",
        tiny().to_str().unwrap(),
        "patch",
        "--clean",
        "a",
        "--corrupted",
        "b",
        "--answer",
        "a",
        "--wrong",
        "b",
        "--at",
        "head",
        "-o",
        o,
    ]);
    assert_error(&out, "no language-model head");
    assert!(!path.exists());
}

/// The strings of `v`, borrowed.
fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn generate_steers_every_written_token_and_refuses_bad_steering() {
    let dir = tmp();
    let path = dir.path().join("g.json");
    let llama = fixture("tiny-llama");
    let m = llama.to_str().unwrap();
    let generate = |steer: &[&str]| {
        let args =
            ["--model", m, "generate", "--text", "The cat", "--max-new-tokens", "4", "-o", path.to_str().unwrap()];
        attnviz(&[&args[..], steer].concat())
    };
    let steer = |layer: &str, plus: &str, scale: &str| {
        vec!["--steer-layer", layer, "--steer-plus", plus, "--steer-minus", "The dog ran.", "--steer-scale", scale]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let out = generate(&refs(&steer("1", "The cat sat on the mat.", "-3")));
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let how = v["intervention"].as_str().unwrap();
    assert!(how.contains("steered at layer 1 by -3 × (“The cat sat on the mat.” − “The dog ran.”)"), "{how}");
    std::fs::remove_file(&path).unwrap();
    // A one-token text is said; bad steering is refused with nothing written.
    let out = generate(&refs(&steer("0", "The", "1")));
    assert!(stderr(&out).contains("note: the steering text \"The\" is one token"), "{}", stderr(&out));
    std::fs::remove_file(&path).unwrap();
    for (args, needle) in [
        (steer("0", "The cat", "NaN"), "the steering scale must be a finite number, got NaN"),
        (steer("2", "The cat", "1"), "cannot steer layer 2: the model has layers 0 to 1"),
        (vec!["--steer-layer".into(), "1".into()], "go together: give all four"),
    ] {
        assert_error(&generate(&refs(&args)), needle);
        assert!(!path.exists(), "{needle}: nothing written");
    }
    let t5 = fixture("tiny-t5");
    let args = ["--model", t5.to_str().unwrap(), "generate", "--text", "a b", "-o", path.to_str().unwrap()];
    assert_error(&attnviz(&[&args[..], &refs(&steer("0", "a b", "1"))].concat()), "is an encoder–decoder");
    assert!(!path.exists());
}

/// A copy of the built binary in a temporary folder, with the source tree it was built from out of
/// reach (it is looked in only by an executable inside it) and a fresh home: without its models it
/// says where it looked and what to do, the playground runs (its tokenizer is built in memory),
/// and once `models install` has filled the data folder, the embedded model is found there.
#[test]
fn a_copied_binary_says_where_it_looked_runs_the_playground_and_finds_installed_models() {
    let dir = tmp();
    let bin_dir = dir.path().join("opt").join("tools").join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let bin = bin_dir.join("attnviz");
    std::fs::copy(env!("CARGO_BIN_EXE_attnviz"), &bin).unwrap();
    let (home, data) = (dir.path().join("home"), dir.path().join("data"));
    std::fs::create_dir_all(&home).unwrap();
    let run = |args: &[&str]| {
        Command::new(&bin)
            .args(args)
            .current_dir(dir.path())
            .env("HOME", &home)
            .env("XDG_DATA_HOME", &data)
            .env_remove("ATTNVIZ_MODEL")
            .env_remove("ATTNVIZ_ASSETS")
            .output()
            .unwrap()
    };
    let out_json = dir.path().join("out.json");
    let out = run(&["dump", "--text", "The cat sat.", "-o", out_json.to_str().unwrap()]);
    assert_error(&out, "were not found");
    let err = stderr(&out);
    for place in [bin_dir.join("assets/models"), dir.path().join("opt/assets/models"), data.join("attnviz/models")] {
        assert!(err.contains(place.to_str().unwrap()), "should name {}: {err}", place.display());
    }
    assert!(err.contains("attnviz models install") && err.contains("ATTNVIZ_ASSETS"), "what to do: {err}");
    assert!(!err.contains(root().to_str().unwrap()), "the source tree is out of reach: {err}");
    assert!(!out_json.exists());
    assert_error(&run(&["dump", "--model", "smollm2", "--text", "Hi", "-o", "s.json"]), "were not found");

    let out = run(&["dump", "--playground", "layers=1,heads=2,d_model=16", "--text", "The cat sat.", "-o", "p.json"]);
    assert!(out.status.success(), "the playground needs no file: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("p.json")).unwrap()).unwrap();
    assert_eq!(v["tokens"], serde_json::json!(["[CLS]", "the", "cat", "sat", ".", "[SEP]"]));

    // A source tree's assets/models (the tiny BERT standing for MiniLM), installed.
    let source = dir.path().join("src/assets/models");
    let fake = source.join("all-MiniLM-L6-v2");
    std::fs::create_dir_all(&fake).unwrap();
    for entry in std::fs::read_dir(tiny()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, fake.join(path.file_name().unwrap())).unwrap();
    }
    let out = run(&["models", "install", "--from", source.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let installed = data.join("attnviz/models/all-MiniLM-L6-v2");
    assert!(installed.join("config.json").is_file() && installed.join("model.safetensors").is_file());
    let out = run(&["dump", "--text", "The cat sat.", "-o", out_json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    assert_eq!(v["model"], "all-MiniLM-L6-v2");
    assert_eq!(v["attentions"].as_array().unwrap().len(), 2, "the tiny BERT's two layers");
    // Installing again replaces the copy whole; `models` says where they are.
    assert!(run(&["models", "install", "--from", source.to_str().unwrap()]).status.success());
    let out = run(&["models"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("found {}", data.join("attnviz/models").display())));
    let leftovers: Vec<_> = std::fs::read_dir(data.join("attnviz/models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary folders left: {leftovers:?}");
}

/// The `--format` values a subcommand's `--help` lists.
fn format_values(sub: &str) -> Vec<String> {
    let out = attnviz(&[sub, "--help"]);
    assert!(out.status.success(), "{sub}: {}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(help.contains("-o, --output"), "{sub} writes with -o: {help}");
    let Some(format) = help.split("--format <FORMAT>").nth(1) else { return Vec::new() };
    let values = format.split("[default:").next().unwrap();
    values.lines().filter_map(|l| l.trim().strip_prefix("- ")?.split(':').next().map(str::to_string)).collect()
}

/// Every subcommand that writes data takes `--format` with json and npz, and `-o`.
#[test]
fn every_subcommand_that_writes_data_takes_format_json_and_npz_and_o() {
    for sub in ["dump", "generate", "lens", "dla", "patch", "heads", "stats", "pe"] {
        let values = format_values(sub);
        assert!(values.contains(&"json".to_string()) && values.contains(&"npz".to_string()), "{sub}: {values:?}");
    }
}

/// `dla`, `pe` and `stats` write NPZ as their `--help` says: arrays of the right shapes, the same
/// numbers as their JSON.
#[test]
fn dla_pe_and_stats_write_npz_with_the_numbers_of_their_json() {
    let dir = tmp();
    let f32s = |bytes: &[u8]| -> Vec<f32> {
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    };
    let llama = fixture("tiny-llama");
    let (json, npz) = (dir.path().join("dla.json"), dir.path().join("dla.npz"));
    let base = ["dla", "--model", llama.to_str().unwrap(), "--text", "The cat sat on the mat."];
    for (format, path) in [("json", &json), ("npz", &npz)] {
        let out = attnviz(&[&base[..], &["--format", format, "-o", path.to_str().unwrap()]].concat());
        assert!(out.status.success(), "dla --format {format}: {}", stderr(&out));
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let heads: Vec<f32> = v["heads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
        .collect();
    let layers = v["heads"].as_array().unwrap().len();
    let (header, data) = npy_member(&npz, "heads.npy");
    assert!(header.contains(&format!("'shape': ({layers}, {})", heads.len() / layers)), "{header}");
    assert_eq!(f32s(&data), heads);
    let (header, data) = npy_member(&npz, "logit.npy");
    assert!(header.contains("'shape': ()"), "{header}");
    assert_eq!(f32s(&data), [v["logit"].as_f64().unwrap() as f32]);
    let (_, data) = npy_member(&npz, "target_id.npy");
    assert_eq!(i64::from_le_bytes(data[..8].try_into().unwrap()), v["target_id"].as_i64().unwrap());
    let n = v["tokens"].as_array().unwrap().len();
    assert!(npy_member(&npz, "tokens.npy").0.contains(&format!("'shape': ({n},)")));
    let out = attnviz(&[&base[..], &["--format", "npz"]].concat());
    assert_error(&out, "NPZ needs a file");

    let (json, npz) = (dir.path().join("pe.json"), dir.path().join("pe.npz"));
    for (format, path) in [("json", &json), ("npz", &npz)] {
        let args = ["pe", "--d-model", "8", "--positions", "5", "--format", format, "-o", path.to_str().unwrap()];
        let out = attnviz(&args);
        assert!(out.status.success(), "pe --format {format}: {}", stderr(&out));
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for (name, shape) in [("encoding", "(5, 8)"), ("dot", "(5, 5)")] {
        let (header, data) = npy_member(&npz, &format!("{name}.npy"));
        assert!(header.contains(&format!("'shape': {shape}")), "{header}");
        let expected: Vec<f32> = v[name]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
            .collect();
        assert_eq!(f32s(&data), expected, "{name}");
    }

    let (json, npz) = (dir.path().join("stats.json"), dir.path().join("stats.npz"));
    let bert = tiny();
    for (format, path) in [("json", &json), ("npz", &npz)] {
        let args = ["stats", "--model", bert.to_str().unwrap(), "--text", "The cat sat.", "--format", format];
        let out = attnviz(&[&args[..], &["-o", path.to_str().unwrap()]].concat());
        assert!(out.status.success(), "stats --format {format}: {}", stderr(&out));
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for key in ["entropy", "cls", "sep", "punctuation", "self", "previous", "next"] {
        let (header, data) = npy_member(&npz, &format!("{key}.npy"));
        assert!(header.contains("'shape': (2, 4)"), "{key}: {header}");
        let expected: Vec<f32> = rows.iter().map(|r| r[key].as_f64().unwrap() as f32).collect();
        assert_eq!(f32s(&data), expected, "{key}");
    }
}

/// `attnviz --help` says export draws PNG, SVG or PDF, and names every view `export --help` lists.
#[test]
fn the_top_help_describes_export_with_every_view() {
    let out = attnviz(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = help.lines().find(|l| l.trim_start().starts_with("export ")).unwrap();
    assert!(line.contains("PNG, SVG or PDF"), "{line}");
    let out = attnviz(&["export", "--help"]);
    let export = String::from_utf8_lossy(&out.stdout).into_owned();
    let views = export.split("\n      --view <VIEW>").nth(1).unwrap().split("\n      --").next().unwrap();
    let names: Vec<&str> =
        views.lines().filter_map(|l| l.trim().strip_prefix("- ")?.split(':').next()).map(str::trim).collect();
    assert!(names.len() >= 13, "{names:?}");
    let listed: Vec<&str> = line.split(|c: char| !(c.is_alphanumeric() || c == '-')).collect();
    for name in names {
        assert!(listed.contains(&name), "attnviz --help's export line lacks {name}: {line}");
    }
}

/// The page of a PDF: its `/MediaBox` width and height in points.
fn pdf_page(bytes: &[u8]) -> (f32, f32) {
    let text = String::from_utf8_lossy(bytes);
    let rest = text.split("/MediaBox").nth(1).expect("a /MediaBox");
    let inside = rest.split('[').nth(1).unwrap().split(']').next().unwrap();
    let v: Vec<f32> = inside.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[2] - v[0], v[3] - v[1])
}

/// SVG and PDF exports have a page of their own: the figure's size at 1× in points, whatever the
/// scale (which sets only a PNG's resolution); the drawing fills it.
#[test]
fn vector_exports_keep_the_page_of_1x_at_any_scale() {
    let dir = tmp();
    let model = tiny();
    let export = |scale: &str, ext: &str| {
        let path = dir.path().join(format!("h{scale}.{ext}"));
        let out = attnviz(&[
            "export",
            "--model",
            model.to_str().unwrap(),
            "--text",
            "The cat sat.",
            "--view",
            "heatmap",
            "--scale",
            scale,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{scale} {ext}: {}", stderr(&out));
        std::fs::read(&path).unwrap()
    };
    let png1 = image::load_from_memory(&export("1", "png")).unwrap();
    let png2 = image::load_from_memory(&export("2", "png")).unwrap();
    assert!(png2.width().abs_diff(2 * png1.width()) <= 2, "{} vs {}", png2.width(), png1.width());
    let (w, h) = (png1.width() as f32, png1.height() as f32);
    for scale in ["1", "2", "3"] {
        let svg = String::from_utf8(export(scale, "svg")).unwrap();
        let tree = usvg::Tree::from_str(&svg, &usvg::Options::default()).unwrap();
        let size = tree.size();
        assert!((size.width() - w).abs() <= 1.0 && (size.height() - h).abs() <= 1.0, "×{scale}: {size:?} vs {w}×{h}");
        // The drawing fills the page: its content is as wide as the page.
        let bbox = tree.root().abs_bounding_box();
        assert!(bbox.width() > 0.9 * w, "×{scale}: drawn {} of {w}", bbox.width());
        let (pw, ph) = pdf_page(&export(scale, "pdf"));
        assert!((pw - w).abs() <= 1.0 && (ph - h).abs() <= 1.0, "PDF ×{scale}: {pw}×{ph} vs {w}×{h}");
    }
}

/// The logit lens figure has a colour bar for what it colours by: the probability (round values of
/// 0 to 1), or the rank on its log scale (1 to 1000+).
#[test]
fn the_lens_figure_has_a_colour_bar_for_what_it_colours_by() {
    let dir = tmp();
    let llama = fixture("tiny-llama");
    for (extra, label, ticks) in [(None, "probability", ["0", "1"]), (Some("--rank"), "rank", ["1", "1000+"])] {
        let path = dir.path().join(format!("{label}.svg"));
        let mut args = vec!["export", "--model", llama.to_str().unwrap(), "--text", "The cat sat on the mat."];
        args.extend(["--view", "lens", "-o", path.to_str().unwrap()]);
        args.extend(extra);
        let out = attnviz(&args);
        assert!(out.status.success(), "{label}: {}", stderr(&out));
        let svg = std::fs::read_to_string(&path).unwrap();
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
        assert!(texts.contains(&label), "{label}: the bar's caption: {texts:?}");
        for tick in ticks {
            assert!(texts.contains(&tick), "{label}: tick {tick}: {texts:?}");
        }
    }
}

#[test]
fn experts_json_and_npz_hold_the_routes_of_the_reference() {
    #[derive(serde::Deserialize)]
    struct Reference {
        text: String,
        tokens: Vec<String>,
        experts: Vec<Vec<Vec<u32>>>,
        expert_weights: Vec<Vec<Vec<f32>>>,
    }
    let model = root().join("tests/fixtures/models/tiny-qwen3-moe");
    let r: Reference =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/qwen3_moe_single.json")).unwrap())
            .unwrap();
    let dir = tmp();
    let json = dir.path().join("experts.json");
    let out =
        attnviz(&["--model", model.to_str().unwrap(), "experts", "--text", &r.text, "-o", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["experts", "ids", "model", "tokens", "weights"]);
    assert_eq!(v["tokens"], serde_json::json!(r.tokens));
    let experts: Vec<Vec<Vec<u32>>> = serde_json::from_value(v["experts"].clone()).unwrap();
    let weights: Vec<Vec<Vec<f32>>> = serde_json::from_value(v["weights"].clone()).unwrap();
    assert_eq!(experts, r.experts, "chosen experts, largest weight first; the dense layer 1 empty");
    assert!(experts[1].is_empty() && weights[1].is_empty());
    for (got, want) in weights.iter().flatten().flatten().zip(r.expert_weights.iter().flatten().flatten()) {
        assert!((got - want).abs() <= 1e-6, "{got} vs {want}");
    }
    // NPZ: layers × positions × k, -1 / NaN in the dense layer.
    let npz = dir.path().join("experts.npz");
    let out = attnviz(&[
        "--model",
        model.to_str().unwrap(),
        "experts",
        "--text",
        &r.text,
        "--format",
        "npz",
        "-o",
        npz.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = r.tokens.len();
    let (header, data) = npy_member(&npz, "experts.npy");
    assert!(header.contains("'descr': '<i8'") && header.contains(&format!("'shape': (3, {n}, 2)")), "{header}");
    let ids: Vec<i64> = data.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(ids[..2 * n], r.experts[0].iter().flatten().map(|&e| i64::from(e)).collect::<Vec<_>>()[..]);
    assert!(ids[2 * n..4 * n].iter().all(|&e| e == -1));
    let (header, _) = npy_member(&npz, "weights.npy");
    assert!(header.contains("'descr': '<f4'"), "{header}");
    // A model without experts: one clear line.
    let llama = root().join("tests/fixtures/models/tiny-llama");
    let out = attnviz(&["--model", llama.to_str().unwrap(), "experts", "--text", "x"]);
    assert_error(&out, "has no experts");

    // The experts figure, as the app exports it: a picture whose cells name the chosen experts and
    // their weights, and its numbers (a row per layer and rank: ids, then weights).
    let export = |file: &str| {
        let path = dir.path().join(file);
        let args = ["export", "--model", model.to_str().unwrap(), "--text", &r.text, "--view", "experts", "-o"];
        let out = attnviz(&[&args[..], &[path.to_str().unwrap()]].concat());
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        path
    };
    let svg = std::fs::read_to_string(export("experts.svg")).unwrap();
    let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
    let first = attnviz::app::experts::cell_text(&r.experts[0][0], &r.expert_weights[0][0]);
    assert!(texts.iter().any(|t| t.contains(first.as_str())), "token 0's cell {first:?} in {texts:?}");
    assert!(texts.contains(&"L1 (dense)"), "{texts:?}");
    let png = image::load_from_memory(&std::fs::read(export("experts.png")).unwrap()).unwrap();
    assert!(png.width() > 100 && png.height() > 50);
    let csv = std::fs::read_to_string(export("experts.csv")).unwrap();
    let row = |label: &str| -> Vec<f32> {
        let line =
            csv.lines().find(|l| l.starts_with(&format!("{label},"))).unwrap_or_else(|| panic!("{label}: {csv}"));
        line.split(',').skip(1).map(|v| v.parse().unwrap()).collect()
    };
    for (rank, name) in [(0, "1"), (1, "2")] {
        let ids: Vec<f32> = r.experts[0].iter().map(|chosen| chosen[rank] as f32).collect();
        assert_eq!(row(&format!("L0 expert {name}")), ids);
        for (got, want) in row(&format!("L0 weight {name}")).iter().zip(r.expert_weights[0].iter().map(|w| w[rank])) {
            assert!((got - want).abs() <= 1e-6, "{got} vs {want}");
        }
    }
    let out =
        attnviz(&["export", "--model", llama.to_str().unwrap(), "--text", "x", "--view", "experts", "-o", "x.png"]);
    assert_error(&out, "has no experts");
}

#[test]
fn a_gpt_oss_dump_holds_the_sinks_shares_of_the_reference() {
    #[derive(serde::Deserialize)]
    struct Reference {
        text: String,
        tokens: Vec<String>,
        attentions: Vec<Vec<Vec<Vec<f32>>>>,
        sinks: Vec<Vec<Vec<f32>>>,
    }
    let model = root().join("tests/fixtures/models/tiny-gpt-oss");
    let r: Reference =
        serde_json::from_slice(&std::fs::read(root().join("tests/fixtures/reference/gpt_oss_single.json")).unwrap())
            .unwrap();
    let dir = tmp();
    let json = dir.path().join("dump.json");
    let out = attnviz(&["dump", "--model", model.to_str().unwrap(), "--text", &r.text, "-o", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["attentions", "model", "segments", "sink", "tokens"]);
    assert_eq!(v["tokens"], serde_json::json!(r.tokens));
    let sink: Vec<Vec<Vec<f32>>> = serde_json::from_value(v["sink"].clone()).unwrap();
    let attentions: Vec<Vec<Vec<Vec<f32>>>> = serde_json::from_value(v["attentions"].clone()).unwrap();
    for (l, layer) in r.sinks.iter().enumerate() {
        for (h, head) in layer.iter().enumerate() {
            for (q, want) in head.iter().enumerate() {
                assert!((sink[l][h][q] - want).abs() <= 1e-5, "sink {l}/{h}/{q}: {} vs {want}", sink[l][h][q]);
                let row: f32 = attentions[l][h][q].iter().sum();
                assert!((row + sink[l][h][q] - 1.0).abs() < 1e-5, "row {l}/{h}/{q} with its sink");
                let k = q / 2;
                assert!((attentions[l][h][q][k] - r.attentions[l][h][q][k]).abs() <= 1e-5);
            }
        }
    }
    // NPZ: layers × heads × queries, the same values.
    let npz = dir.path().join("dump.npz");
    let args = ["dump", "--model", model.to_str().unwrap(), "--text", &r.text, "--format", "npz", "-o"];
    let out = attnviz(&[&args[..], &[npz.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let n = r.tokens.len();
    let (header, data) = npy_member(&npz, "sink.npy");
    assert!(header.contains("'descr': '<f4'") && header.contains(&format!("'shape': (2, 4, {n})")), "{header}");
    let values: Vec<f32> = data.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values, sink.iter().flatten().flatten().copied().collect::<Vec<_>>());
}

/// A subcommand whose reader stops early (`attnviz models | head -1`, `dump -o - | head`) ends
/// quietly: no panic in `println!` on the closed pipe.
#[test]
fn a_closed_pipe_ends_a_subcommand_without_a_panic() {
    use std::process::Stdio;
    let home = tmp();
    let tiny = root().join("tests/fixtures/models/tiny-llama");
    for args in [vec!["models"], vec!["dump", "--model", tiny.to_str().unwrap(), "--text", SENTENCE, "-o", "-"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_attnviz"))
            .args(&args)
            .env_remove("ATTNVIZ_MODEL")
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path().join("data"))
            .current_dir(home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
    }
}
