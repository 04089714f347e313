//! Model files from strangers (issue 18): a table of hostile inputs, one per class, built in a temp
//! dir from the fixtures, and seeded mutation fuzzing of every loader (config.json, tokenizer.json,
//! safetensors headers and the sharded index, GGUF headers, metadata and tensor infos).
//!
//! Every input must end in `Ok` or a clean error — never a panic, an abort, a hang or a huge
//! allocation. A counting allocator measures the memory each attempt holds; one allocation above
//! [`REFUSE_ABOVE`] is refused outright (an abort with the input on disk, rather than a swapped
//! machine).
//!
//! `cargo test` runs a short seeded campaign per loader. `ATTNVIZ_FUZZ_SECS=600` runs each for that
//! long (`ATTNVIZ_FUZZ_SEED` picks the seed); crashing inputs are written to
//! `target/fuzz-crashes/`, to be committed under `tests/fixtures/hostile/regressions/`, which
//! [`regressions_stay_fixed`] replays.
#![allow(clippy::unwrap_used)]
// The counting allocator: the one place in this test binary that needs `unsafe`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use attnviz::model::LoadedModel;
use attnviz::model::TextTokenizer;
use serde_json::{Value, json};

mod common;
use common::Rng;

// ---------------------------------------------------------------------------------------------
// Memory accounting.

/// One allocation above this is a bug in a loader: refused (the process aborts, the input is on
/// disk in `target/fuzz-work/`) rather than granted.
const REFUSE_ABOVE: usize = 4 << 30;
/// The most memory one hostile attempt may hold at once.
const MEMORY_LIMIT: usize = 512 << 20;
/// A hang guard, generous because wall time on a shared machine varies; attempts take milliseconds.
const TIME_LIMIT: Duration = Duration::from_secs(20);

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed to the app's allocator unchanged (or refused with null, which
// callers handle); the counters are const-initialised thread-locals without destructors, so
// touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as received.
        let p = unsafe { attnviz::alloc::Allocator.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as received.
        let p = unsafe { attnviz::alloc::Allocator.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { attnviz::alloc::Allocator.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as received.
        let p = unsafe { attnviz::alloc::Allocator.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How one attempt ended.
#[derive(Debug)]
struct Attempt {
    /// `Ok`, or the error's text; `None` when it panicked (the payload's text in `panic`).
    result: Option<Result<(), String>>,
    panic: String,
    elapsed: Duration,
    /// The most bytes the attempt's thread held above what it held at the start.
    peak_bytes: usize,
}

impl Attempt {
    /// Why this attempt is a crash (a panic, a hang, too much memory), if it is one.
    fn crash(&self) -> Option<String> {
        if self.result.is_none() {
            return Some(format!("panic: {}", self.panic));
        }
        if self.elapsed > TIME_LIMIT {
            return Some(format!("took {:?}", self.elapsed));
        }
        if self.peak_bytes > MEMORY_LIMIT {
            return Some(format!("held {} MB", self.peak_bytes >> 20));
        }
        None
    }
}

/// Runs `f` on a fresh thread, measuring its time and memory; a panic is caught and reported.
/// A hang past [`TIME_LIMIT`] × 3 is reported as a crash and the thread left behind.
fn attempt(f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Attempt {
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    std::thread::Builder::new()
        .name("hostile-attempt".into())
        .stack_size(8 << 20)
        .spawn(move || {
            let base = LIVE.with(Cell::get);
            PEAK.with(|p| p.set(base));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let peak = PEAK.with(Cell::get) - base;
            let (result, panic) = match result {
                Ok(r) => (Some(r), String::new()),
                Err(payload) => (None, panic_text(payload.as_ref())),
            };
            let _ = tx.send((result, panic, peak.max(0) as usize));
        })
        .unwrap();
    match rx.recv_timeout(TIME_LIMIT * 3) {
        Ok((result, panic, peak_bytes)) => Attempt { result, panic, elapsed: start.elapsed(), peak_bytes },
        Err(_) => {
            Attempt { result: Some(Err("hang".into())), panic: String::new(), elapsed: start.elapsed(), peak_bytes: 0 }
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Panics inside the loaders that attnviz caught (the tokenizers crate's, mostly), by place: the
/// campaign reports them (each is a bug upstream that attnviz turned into an error).
static CAUGHT: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn quiet_panics_counted() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some("hostile-attempt") {
                return default(info);
            }
            let place = info.location().map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
            let text = panic_text(info.payload());
            let key = format!("{place}: {}", text.chars().take(120).collect::<String>());
            *CAUGHT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key).or_default() += 1;
        }));
    });
}

// ---------------------------------------------------------------------------------------------
// Fixtures and the loaders' entry points.

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models")
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// A model folder in a temp dir: the fixture's files copied, then `change` applied.
fn folder_from(name: &str, change: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_files(&fixture(name), dir.path());
    change(dir.path());
    dir
}

fn copy_files(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Loads a model (folder or GGUF file) and, when it loads, runs a sentence (and a pair where the
/// model reads pairs) and decodes a few ids: everything a user does first.
fn load_and_run(path: &Path) -> Result<(), String> {
    let model = LoadedModel::load(path).map_err(|e| e.to_string())?;
    model.run("Hello world, the cat sat.", None).map_err(|e| e.to_string())?;
    if model.description().reads_pairs {
        model.run("A cat.", Some("A dog.")).map_err(|e| e.to_string())?;
    }
    let _ = model.tokenizer.decode(&[0, 1, 2, 3, u32::MAX]);
    Ok(())
}

/// A tokenizer built from text, then used as the app uses it: plain, pairs, unicode, empty, long
/// (truncated), special-token queries, decoding, an exact length.
fn tokenizer_workout(json: &str) -> Result<(), String> {
    let t = TextTokenizer::from_json(json, 8).map_err(|e| e.to_string())?;
    for (a, b) in [("Hello world", None), ("A cat.", Some("A dog.")), ("日本語 émoji 🎉\n\t", None), ("", None)] {
        if let Ok(e) = t.encode(a, b) {
            for &id in &e.tokens.ids {
                let _ = (t.token_of(id), t.is_special(id));
            }
        }
    }
    let _ = t.encode(&"long text ".repeat(50), None);
    let _ = t.decode(&[0, 1, 2, 5, 99_999, u32::MAX]);
    let _ = t.vocab_size();
    let _ = t.clone().without_special_tokens().encode_exactly("abc", 5);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Building hostile files.

/// A safetensors file's header (as JSON) and its data.
fn split_safetensors(bytes: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), bytes[8 + n..].to_vec())
}

fn join_safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    join_raw(serde_json::to_string(header).unwrap().as_bytes(), data)
}

fn join_raw(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    out
}

/// Rewrites a folder's `model.safetensors` header.
fn edit_header(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("model.safetensors");
    let (mut header, data) = split_safetensors(&std::fs::read(&path).unwrap());
    edit(header.as_object_mut().unwrap());
    std::fs::write(&path, join_safetensors(&header, &data)).unwrap();
}

/// Edits a folder's `config.json` as JSON.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(&path, config.to_string()).unwrap();
}

/// Text nested `depth` arrays deep.
fn deep_json(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// A GGUF file's fields, located: where each count, length, type id, dim, dtype and offset is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    TensorCount,
    KvCount,
    KeyLen,
    ValueType,
    StringLen,
    ArrayType,
    ArrayLen,
    Scalar,
    NDims,
    Dim,
    DType,
    Offset,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    kind: Kind,
    at: usize,
    width: usize,
}

/// Locates the fields of one metadata value at `at` (moved past it).
fn gguf_value(b: &[u8], fields: &mut Vec<Field>, ty: u32, at: &mut usize) {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let size = match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => {
            fields.push(Field { kind: Kind::StringLen, at: *at, width: 8 });
            *at += 8 + u64_at(*at) as usize;
            return;
        }
        9 => {
            fields.push(Field { kind: Kind::ArrayType, at: *at, width: 4 });
            let item = u32_at(*at);
            fields.push(Field { kind: Kind::ArrayLen, at: *at + 4, width: 8 });
            let n = u64_at(*at + 4);
            *at += 12;
            for _ in 0..n {
                gguf_value(b, fields, item, at);
            }
            return;
        }
        _ => panic!("type {ty}"),
    };
    // Arrays of numbers are long; only the first few thousand items are fields worth mutating.
    if fields.len() < 4096 {
        fields.push(Field { kind: Kind::Scalar, at: *at, width: size });
    }
    *at += size;
}

/// Walks a (well-formed, version 2 or 3) GGUF header, locating its fields. Also returns where the
/// header ends and the keys' positions.
struct GgufLayout {
    fields: Vec<Field>,
    keys: Vec<(usize, String)>,
    header_end: usize,
}

fn gguf_layout(b: &[u8]) -> GgufLayout {
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let mut fields = Vec::new();
    let mut keys = Vec::new();
    let mut at = 8;
    let push = |fields: &mut Vec<Field>, kind, at: usize, width| fields.push(Field { kind, at, width });
    push(&mut fields, Kind::TensorCount, at, 8);
    let tensors = u64_at(at);
    push(&mut fields, Kind::KvCount, at + 8, 8);
    let kvs = u64_at(at + 8);
    at += 16;
    for _ in 0..kvs {
        push(&mut fields, Kind::KeyLen, at, 8);
        let n = u64_at(at) as usize;
        keys.push((at, String::from_utf8_lossy(&b[at + 8..at + 8 + n]).into_owned()));
        at += 8 + n;
        push(&mut fields, Kind::ValueType, at, 4);
        let ty = u32_at(at);
        at += 4;
        gguf_value(b, &mut fields, ty, &mut at);
    }
    for _ in 0..tensors {
        push(&mut fields, Kind::StringLen, at, 8);
        let n = u64_at(at) as usize;
        at += 8 + n;
        push(&mut fields, Kind::NDims, at, 4);
        let dims = u32_at(at) as usize;
        at += 4;
        for d in 0..dims {
            push(&mut fields, Kind::Dim, at + 8 * d, 8);
        }
        at += 8 * dims;
        push(&mut fields, Kind::DType, at, 4);
        push(&mut fields, Kind::Offset, at + 4, 8);
        at += 12;
    }
    GgufLayout { fields, keys, header_end: at }
}

fn set_field(b: &mut [u8], f: Field, value: u64) {
    let bytes = value.to_le_bytes();
    b[f.at..f.at + f.width].copy_from_slice(&bytes[..f.width]);
}

fn gguf_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture("tiny-llama-gguf").join(name)).unwrap()
}

/// A GGUF file with one field of `kind` (the `nth` of them) set to `value`.
fn gguf_with(kind: Kind, nth: usize, value: u64) -> Vec<u8> {
    let mut b = gguf_fixture("tiny-llama.Q8_0.gguf");
    let layout = gguf_layout(&b);
    let f = *layout.fields.iter().filter(|f| f.kind == kind).nth(nth).unwrap();
    set_field(&mut b, f, value);
    b
}

/// A GGUF file with the 17-letter key `from` renamed `general.alignment` and its u32 value `value`.
fn gguf_alignment(value: u32) -> Vec<u8> {
    let mut b = gguf_fixture("tiny-llama.Q8_0.gguf");
    let layout = gguf_layout(&b);
    let (at, _) = layout.keys.iter().find(|(_, k)| k == "llama.block_count").unwrap().clone();
    b[at + 8..at + 8 + 17].copy_from_slice(b"general.alignment");
    let ty = at + 8 + 17;
    assert_eq!(u32::from_le_bytes(b[ty..ty + 4].try_into().unwrap()), 4, "block_count is a u32");
    b[ty + 4..ty + 8].copy_from_slice(&value.to_le_bytes());
    b
}

fn write_gguf(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.gguf");
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// A sharded copy of a fixture: its tensors split over two files, `model.safetensors.index.json`
/// naming them, `model.safetensors` gone.
fn sharded(name: &str) -> tempfile::TempDir {
    folder_from(name, |dir| {
        let (header, data) = split_safetensors(&std::fs::read(dir.join("model.safetensors")).unwrap());
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        let entries: Vec<(&String, &Value)> =
            header.as_object().unwrap().iter().filter(|(k, _)| *k != "__metadata__").collect();
        let half = entries.len() / 2;
        let mut weight_map = serde_json::Map::new();
        for (i, part) in [&entries[..half], &entries[half..]].into_iter().enumerate() {
            let file = format!("model-0000{}-of-00002.safetensors", i + 1);
            let mut shard_header = serde_json::Map::new();
            let mut shard_data = Vec::new();
            for (name, entry) in part {
                let offsets = entry["data_offsets"].as_array().unwrap();
                let (b, e) = (offsets[0].as_u64().unwrap() as usize, offsets[1].as_u64().unwrap() as usize);
                let start = shard_data.len();
                shard_data.extend_from_slice(&data[b..e]);
                let mut entry = (*entry).clone();
                entry["data_offsets"] = json!([start, shard_data.len()]);
                shard_header.insert((*name).clone(), entry);
                weight_map.insert((*name).clone(), json!(file));
            }
            std::fs::write(dir.join(&file), join_safetensors(&Value::Object(shard_header), &shard_data)).unwrap();
        }
        let index = json!({"metadata": {"total_size": data.len()}, "weight_map": weight_map});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    })
}

fn edit_index(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("model.safetensors.index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut index);
    std::fs::write(&path, index.to_string()).unwrap();
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[cfg(unix)]
fn fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

/// A file of `len` bytes, `head` at its start, the rest a hole (sparse: no disk used).
fn sparse(path: &Path, head: &[u8], len: u64) {
    std::fs::write(path, head).unwrap();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

// ---------------------------------------------------------------------------------------------
// The table: one hostile input per class.

/// One class of hostile input: how to build it, what the error must say.
struct Case {
    class: &'static str,
    build: fn() -> (tempfile::TempDir, PathBuf),
    needles: &'static [&'static str],
}

fn in_folder(name: &'static str, change: impl FnOnce(&Path)) -> (tempfile::TempDir, PathBuf) {
    let dir = folder_from(name, change);
    let path = dir.path().to_path_buf();
    (dir, path)
}

fn gguf_case(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    write_gguf(bytes)
}

const A_70B_LLAMA: &str = r#"{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":8192,
    "intermediate_size":28672,"num_hidden_layers":80,"num_attention_heads":64,"num_key_value_heads":8,
    "vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":500000.0,
    "hidden_act":"silu","tie_word_embeddings":false}"#;

fn cases() -> Vec<Case> {
    vec![
        Case {
            class: "safetensors header length of 2^64 - 1",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    let mut b = std::fs::read(d.join("model.safetensors")).unwrap();
                    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                    std::fs::write(d.join("model.safetensors"), b).unwrap();
                })
            },
            needles: &["model.safetensors", "header length field says 18446744073709551615"],
        },
        Case {
            class: "safetensors header length past the end of the file",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    let path = d.join("model.safetensors");
                    let len = std::fs::metadata(&path).unwrap().len();
                    let mut b = std::fs::read(&path).unwrap();
                    b[..8].copy_from_slice(&len.to_le_bytes());
                    std::fs::write(path, b).unwrap();
                })
            },
            needles: &["model.safetensors", "header length field"],
        },
        Case {
            class: "safetensors header that is not JSON",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    std::fs::write(d.join("model.safetensors"), join_raw(b"{\"a\": [1, 2", &[0; 64])).unwrap();
                })
            },
            needles: &["model.safetensors", "not JSON"],
        },
        Case {
            class: "safetensors header nested 200,000 deep",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    std::fs::write(d.join("model.safetensors"), join_raw(deep_json(200_000).as_bytes(), &[])).unwrap();
                })
            },
            needles: &["model.safetensors", "recursion limit"],
        },
        Case {
            class: "tensor past the end of the file",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    edit_header(d, |h| h["transformer.wte.weight"]["data_offsets"][1] = json!(1u64 << 40));
                })
            },
            needles: &["transformer.wte.weight", "past the end"],
        },
        Case {
            class: "a 10^12-element shape",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    edit_header(d, |h| h["transformer.wte.weight"]["shape"] = json!([1_000_000, 1_000_000]));
                })
            },
            needles: &["transformer.wte.weight", "implausible shape [1000000, 1000000]"],
        },
        Case {
            class: "shape and offsets that disagree",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    edit_header(d, |h| h["transformer.wte.weight"]["shape"] = json!([3, 3]));
                })
            },
            needles: &["model.safetensors"],
        },
        Case {
            class: "wrong dtype (I32 weights)",
            build: || {
                in_folder("tiny-gpt2", |d| edit_header(d, |h| h["transformer.wte.weight"]["dtype"] = json!("I32")))
            },
            needles: &["dtype", "I32", "f32, f16 or bf16"],
        },
        Case {
            class: "unknown dtype name",
            build: || {
                in_folder("tiny-gpt2", |d| edit_header(d, |h| h["transformer.wte.weight"]["dtype"] = json!("F128")))
            },
            needles: &["model.safetensors"],
        },
        Case {
            class: "endless weights: a 1 TiB sparse model.safetensors",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    let path = d.join("model.safetensors");
                    let head = std::fs::read(&path).unwrap();
                    sparse(&path, &head, 1 << 40);
                })
            },
            needles: &["model.safetensors", "bytes of data", "ends with its last tensor"],
        },
        #[cfg(unix)]
        Case {
            class: "endless weights: model.safetensors a link to /dev/zero",
            build: || in_folder("tiny-gpt2", |d| symlink(Path::new("/dev/zero"), &d.join("model.safetensors"))),
            needles: &["model.safetensors", "not a regular file"],
        },
        #[cfg(unix)]
        Case {
            class: "model.safetensors a named pipe (reading would wait forever)",
            build: || in_folder("tiny-gpt2", |d| fifo(&d.join("model.safetensors"))),
            needles: &["model.safetensors", "not a regular file"],
        },
        #[cfg(unix)]
        Case {
            class: "config.json a link to /dev/zero",
            build: || in_folder("tiny-gpt2", |d| symlink(Path::new("/dev/zero"), &d.join("config.json"))),
            needles: &["config.json", "not a regular file"],
        },
        Case {
            class: "a 5 GB sparse config.json",
            build: || in_folder("tiny-gpt2", |d| sparse(&d.join("config.json"), b"{", 5 << 30)),
            needles: &["config.json", "5368709120 bytes", "limit"],
        },
        Case {
            class: "config.json nested 200,000 deep",
            build: || in_folder("tiny-gpt2", |d| std::fs::write(d.join("config.json"), deep_json(200_000)).unwrap()),
            needles: &["config.json", "recursion limit"],
        },
        Case {
            class: "config with 10^9 layers against 2 layers of weights",
            build: || in_folder("tiny-gpt2", |d| edit_config(d, |c| c["n_layer"] = json!(1_000_000_000))),
            needles: &["\"n_layer\" = 1000000000", "implausibly large"],
        },
        Case {
            class: "config with 1000 layers (within bounds) against 2 layers of weights",
            build: || in_folder("tiny-gpt2", |d| edit_config(d, |c| c["n_layer"] = json!(1000))),
            needles: &["fewer layers (2) than config.json says (1000)"],
        },
        Case {
            class: "negative count",
            build: || in_folder("tiny-bert", |d| edit_config(d, |c| c["num_attention_heads"] = json!(-4))),
            needles: &["num_attention_heads", "-4"],
        },
        Case {
            class: "count as a float",
            build: || in_folder("tiny-bert", |d| edit_config(d, |c| c["hidden_size"] = json!(32.5))),
            needles: &["hidden_size", "32.5", "whole number"],
        },
        Case {
            class: "count as a string",
            build: || in_folder("tiny-bert", |d| edit_config(d, |c| c["vocab_size"] = json!("30522"))),
            needles: &["vocab_size", "whole number"],
        },
        Case {
            class: "count of 2^63 (products would overflow)",
            build: || {
                in_folder("tiny-deberta-v2", |d| {
                    edit_config(d, |c| {
                        c.insert("attention_head_size".into(), json!(1u64 << 63));
                    });
                })
            },
            needles: &["attention_head_size", "9223372036854775808", "implausibly large"],
        },
        Case {
            class: "sizes each plausible, a tensor implausible (vocab 2^24 × width 2^17)",
            build: || {
                in_folder("tiny-bert", |d| {
                    edit_config(d, |c| {
                        c["vocab_size"] = json!(1 << 24);
                        c["hidden_size"] = json!(1 << 17);
                        c["num_attention_heads"] = json!(1);
                    });
                })
            },
            needles: &["embed.tokens.weight", "implausibly large"],
        },
        Case {
            class: "a plausible 70B config against tiny weights: the memory it needs, said first",
            build: || in_folder("tiny-llama", |d| std::fs::write(d.join("config.json"), A_70B_LLAMA).unwrap()),
            needles: &["needs about", "GB of weights as f32", "available"],
        },
        Case {
            class: "index.json pointing outside the folder (../)",
            build: || {
                let dir = sharded("tiny-gpt2");
                edit_index(dir.path(), |i| i["weight_map"]["transformer.wte.weight"] = json!("../model.safetensors"));
                let path = dir.path().to_path_buf();
                (dir, path)
            },
            needles: &[
                "model.safetensors.index.json",
                "\"../model.safetensors\"",
                "not a file name in the model folder",
            ],
        },
        Case {
            class: "index.json naming an absolute path",
            build: || {
                let dir = sharded("tiny-gpt2");
                edit_index(dir.path(), |i| i["weight_map"]["transformer.wte.weight"] = json!("/etc/passwd"));
                let path = dir.path().to_path_buf();
                (dir, path)
            },
            needles: &["\"/etc/passwd\"", "not a file name"],
        },
        #[cfg(unix)]
        Case {
            class: "index.json naming a shard that links to /dev/zero",
            build: || {
                let dir = sharded("tiny-gpt2");
                symlink(Path::new("/dev/zero"), &dir.path().join("model-00002-of-00002.safetensors"));
                let path = dir.path().to_path_buf();
                (dir, path)
            },
            needles: &["model-00002-of-00002.safetensors", "not a regular file"],
        },
        Case {
            class: "index.json without a weight_map",
            build: || {
                let dir = sharded("tiny-gpt2");
                edit_index(dir.path(), |i| i["weight_map"] = json!([1, 2]));
                let path = dir.path().to_path_buf();
                (dir, path)
            },
            needles: &["model.safetensors.index.json", "weight_map"],
        },
        Case {
            class: "index.json with a number for a file",
            build: || {
                let dir = sharded("tiny-gpt2");
                edit_index(dir.path(), |i| i["weight_map"]["transformer.wte.weight"] = json!(7));
                let path = dir.path().to_path_buf();
                (dir, path)
            },
            needles: &["weight_map[\"transformer.wte.weight\"] = 7"],
        },
        Case {
            class: "a tokenizer.json that is not a tokenizer",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    std::fs::copy(d.join("config.json"), d.join("tokenizer.json")).unwrap();
                })
            },
            needles: &["tokenizer", "tokenizer.json"],
        },
        Case {
            class: "tokenizer.json nested 200,000 deep",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    let text = format!("{{\"version\": \"1.0\", \"normalizer\": {}}}", deep_json(200_000));
                    std::fs::write(d.join("tokenizer.json"), text).unwrap();
                })
            },
            needles: &["tokenizer.json", "nested 200001 levels deep"],
        },
        Case {
            class: "tokenizer.json with ids past the model's vocabulary",
            build: || {
                in_folder("tiny-gpt2", |d| {
                    let path = d.join("tokenizer.json");
                    let mut t: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                    for (_, id) in t["model"]["vocab"].as_object_mut().unwrap() {
                        *id = json!(id.as_u64().unwrap() + 1_000_000);
                    }
                    std::fs::write(path, t.to_string()).unwrap();
                })
            },
            needles: &["outside the model's vocabulary"],
        },
        Case {
            class: "a 300 MB sparse tokenizer.json",
            build: || in_folder("tiny-gpt2", |d| sparse(&d.join("tokenizer.json"), b"{", 300 << 20)),
            needles: &["tokenizer.json", "limit for this file"],
        },
        Case {
            class: "GGUF header claiming 2^60 tensors",
            build: || gguf_case(&gguf_with(Kind::TensorCount, 0, 1 << 60)),
            needles: &["hostile.gguf", "tensor_count 1152921504606846976"],
        },
        Case {
            class: "GGUF header claiming 2^28 metadata entries",
            build: || gguf_case(&gguf_with(Kind::KvCount, 0, 1 << 28)),
            needles: &["hostile.gguf", "268435456 metadata entries"],
        },
        Case {
            class: "GGUF with zero alignment",
            build: || gguf_case(&gguf_alignment(0)),
            needles: &["hostile.gguf", "general.alignment = 0", "power of two"],
        },
        Case {
            class: "GGUF with an alignment that is not a power of two",
            build: || gguf_case(&gguf_alignment(24)),
            needles: &["general.alignment = 24"],
        },
        Case {
            class: "GGUF string longer than the file",
            build: || gguf_case(&gguf_with(Kind::StringLen, 0, 1 << 29)),
            needles: &["hostile.gguf", "string"],
        },
        Case {
            class: "GGUF string length of 2^63",
            build: || gguf_case(&gguf_with(Kind::KeyLen, 2, 1 << 63)),
            needles: &["hostile.gguf", "string length"],
        },
        Case {
            class: "GGUF array of 2^40 items",
            build: || gguf_case(&gguf_with(Kind::ArrayLen, 0, 1 << 40)),
            needles: &["hostile.gguf", "array length"],
        },
        Case {
            class: "GGUF array of 2^29 items in a small file",
            build: || gguf_case(&gguf_with(Kind::ArrayLen, 0, 1 << 29)),
            needles: &["hostile.gguf", "array of 536870912 elements"],
        },
        Case {
            class: "GGUF unknown value type",
            build: || gguf_case(&gguf_with(Kind::ValueType, 1, 77)),
            needles: &["hostile.gguf"],
        },
        Case {
            class: "GGUF unknown tensor dtype id",
            build: || gguf_case(&gguf_with(Kind::DType, 0, 99)),
            needles: &["hostile.gguf", "99"],
        },
        Case {
            class: "GGUF tensor with 2^40 × 2^40 elements",
            build: || {
                let mut b = gguf_with(Kind::Dim, 0, 1 << 40);
                let f = *gguf_layout(&b).fields.iter().filter(|f| f.kind == Kind::Dim).nth(1).unwrap();
                set_field(&mut b, f, 1 << 40);
                gguf_case(&b)
            },
            needles: &["hostile.gguf", "implausible shape"],
        },
        Case {
            class: "GGUF tensor with a zero dimension (Candle would view a dangling buffer)",
            build: || gguf_case(&gguf_with(Kind::Dim, 0, 0)),
            needles: &["hostile.gguf", "has no elements"],
        },
        Case {
            class: "tokenizer.json with a 280,000-character token (overflowed the stack)",
            build: || {
                in_folder("tiny-xlm-roberta", |d| {
                    let path = d.join("tokenizer.json");
                    let mut t: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                    t["model"]["vocab"][5][0] = json!("[".repeat(280_000));
                    std::fs::write(path, t.to_string()).unwrap();
                })
            },
            needles: &["tokenizer.json", "a string of 280000 bytes"],
        },
        Case {
            class: "GGUF tensor of another shape than the metadata implies",
            build: || gguf_case(&gguf_with(Kind::Dim, 3, 512)),
            needles: &["hostile.gguf", "but the metadata implies"],
        },
        Case {
            class: "GGUF tensor whose rows are not whole blocks of its type",
            build: || gguf_case(&gguf_with(Kind::Dim, 2, 16)),
            needles: &["hostile.gguf", "token_embd.weight", "not whole 32-value blocks of Q8_0"],
        },
        Case {
            class: "GGUF tensor of a type attnviz does not read (IQ2_XXS)",
            build: || gguf_case(&gguf_with(Kind::DType, 0, 16)),
            needles: &["hostile.gguf", "IQ2_XXS", "id 16"],
        },
        Case {
            class: "GGUF tensor offset not a multiple of the alignment",
            build: || gguf_case(&gguf_with(Kind::Offset, 1, 8)),
            needles: &["hostile.gguf", "not a multiple of the alignment 32"],
        },
        Case {
            class: "GGUF tensor offset past the end of the file",
            build: || gguf_case(&gguf_with(Kind::Offset, 0, 1 << 50)),
            needles: &["hostile.gguf", "remaining in file"],
        },
        Case {
            class: "GGUF with 2^31 dimensions on a tensor",
            build: || gguf_case(&gguf_with(Kind::NDims, 0, 1 << 31)),
            needles: &["hostile.gguf", "dimensions"],
        },
        Case {
            class: "GGUF truncated inside its header",
            build: || gguf_case(&gguf_fixture("tiny-llama.Q8_0.gguf")[..2000]),
            needles: &["hostile.gguf", "not a readable GGUF file"],
        },
        Case {
            class: "a 1 TiB sparse GGUF with a real header",
            build: || {
                let (dir, path) = write_gguf(&gguf_fixture("tiny-llama.Q8_0.gguf"));
                std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1 << 40).unwrap();
                // Its tensors are where they were: it loads, reading only what the header points at.
                (dir, path)
            },
            needles: &[],
        },
    ]
}

#[test]
fn every_class_of_hostile_input_is_a_clear_error_in_bounded_time_and_memory() {
    check_cases(cases(), load_and_run);
}

/// Builds and opens each case with `open`: a clear error with the case's words (or `Ok` when it
/// has none), in bounded time and memory.
fn check_cases(cases: Vec<Case>, open: fn(&Path) -> Result<(), String>) {
    let mut failures = Vec::new();
    for case in cases {
        let (dir, path) = (case.build)();
        let shown = path.clone();
        let a = attempt(move || open(&shown));
        drop(dir);
        let line = format!("{} → {:?} in {:?}, {} KB", case.class, a.result, a.elapsed, a.peak_bytes >> 10);
        println!("{line}");
        if let Some(crash) = a.crash() {
            failures.push(format!("{}: {crash}", case.class));
            continue;
        }
        match (&a.result, case.needles.is_empty()) {
            (Some(Ok(())), true) => {}
            (Some(Err(e)), false) if case.needles.iter().all(|n| e.contains(n)) => {}
            _ => failures.push(format!("{} — wanted an error with {:?}: {line}", case.class, case.needles)),
        }
        if a.peak_bytes > 64 << 20 {
            failures.push(format!("{}: held {} MB", case.class, a.peak_bytes >> 20));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_generation_config_that_never_ends_is_ignored() {
    #[cfg(unix)]
    {
        let dir = folder_from("tiny-llama", |d| symlink(Path::new("/dev/zero"), &d.join("generation_config.json")));
        let path = dir.path().to_path_buf();
        let a = attempt(move || load_and_run(&path));
        assert!(a.crash().is_none() && matches!(a.result, Some(Ok(()))), "{a:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded mutation fuzzing.

/// Numbers that break parsers: bounds, signs, overflow edges, floats.
fn interesting_number(rng: &mut Rng) -> Value {
    let n: &[Value] = &[
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(-1),
        json!(-2_147_483_648i64),
        json!(255),
        json!(65_536),
        json!(1u64 << 31),
        json!(1u64 << 32),
        json!(1u64 << 34),
        json!(1u64 << 40),
        json!((1u64 << 40) + 1),
        json!(1u64 << 53),
        json!(1u64 << 63),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1_000_000_000),
        json!(1e12),
        json!(0.5),
        json!(-0.0),
        json!(1e308),
        json!(-1e308),
        json!(f64::MIN_POSITIVE),
    ];
    rng.pick(n).clone()
}

const WORDS: &[&str] = &[
    "",
    "x",
    "bert",
    "roberta",
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "deberta-v2",
    "albert",
    "mpnet",
    "gpt_neox",
    "distilbert",
    "electra",
    "gelu",
    "silu",
    "relu",
    "mish",
    "F32",
    "F16",
    "BF16",
    "I64",
    "I32",
    "U8",
    "BOOL",
    "F8_E4M3",
    "F64",
    "BPE",
    "WordPiece",
    "Unigram",
    "WordLevel",
    "ByteLevel",
    "Sequence",
    "Split",
    "Metaspace",
    "TemplateProcessing",
    "BertProcessing",
    "RobertaProcessing",
    "NFKC",
    "Replace",
    "Strip",
    "Prepend",
    "[UNK]",
    "<unk>",
    "<s>",
    "</s>",
    "[CLS]",
    "[SEP]",
    "##",
    "Ġ",
    "▁",
    "(?",
    "[",
    "\\p{L}+",
    "(a|b)*c",
    "\u{0}",
    "日本語",
    "../x",
    "/dev/zero",
    "default",
    "linear",
    "dynamic",
    "llama3",
    "yarn",
    "c2p|p2c",
    "layer_norm",
];

/// Mutates one node of a JSON value, reached by a random walk from the root.
fn mutate_json(v: &mut Value, rng: &mut Rng, depth: usize) {
    let descend = depth < 12 && rng.chance(70);
    match v {
        Value::Object(map) if descend && !map.is_empty() => {
            let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
            mutate_json(map.get_mut(&key).unwrap(), rng, depth + 1);
            return;
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = rng.below(items.len());
            mutate_json(&mut items[i], rng, depth + 1);
            return;
        }
        _ => {}
    }
    match (v, rng.below(10)) {
        (Value::Object(map), 0..=2) if !map.is_empty() => {
            let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
            map.remove(&key);
        }
        (Value::Object(map), 3 | 4) if !map.is_empty() => {
            let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
            let other = map.keys().nth(rng.below(map.len())).unwrap().clone();
            let value = map[&other].clone();
            map.insert(key, value);
        }
        (Value::Array(items), 0..=2) if !items.is_empty() => {
            let i = rng.below(items.len());
            items.remove(i);
        }
        (Value::Array(items), 3) if !items.is_empty() => {
            let i = rng.below(items.len());
            let item = items[i].clone();
            items.insert(rng.below(items.len()), item);
        }
        (Value::Array(items), 4) => items.clear(),
        (Value::Number(n), 0..=4) => {
            let x = n.as_i64().unwrap_or(1);
            *n = match rng.below(6) {
                0 => x.saturating_mul(2).into(),
                1 => x.saturating_add(1).into(),
                2 => x.saturating_sub(1).into(),
                3 => x.saturating_neg().into(),
                4 => (x ^ (1 << rng.below(63))).into(),
                _ => (x.saturating_mul(1000)).into(),
            };
        }
        (Value::String(s), 0..=3) => {
            *s = match rng.below(4) {
                0 => (*rng.pick(WORDS)).to_string(),
                1 => s.repeat(1 + rng.below(3)),
                2 => s.chars().take(rng.below(s.chars().count() + 1)).collect(),
                _ => format!("{s}{}", rng.pick(WORDS)),
            };
        }
        (v, _) => {
            *v = match rng.below(9) {
                0..=3 => interesting_number(rng),
                4 => Value::String((*rng.pick(WORDS)).to_string()),
                5 => Value::Null,
                6 => Value::Bool(rng.chance(50)),
                7 => json!([]),
                _ => {
                    let mut nested = json!({});
                    for _ in 0..rng.below(100) {
                        nested = json!([nested]);
                    }
                    nested
                }
            };
        }
    }
}

/// A mutated JSON document: 1–4 structured mutations, sometimes bytes changed in the text too.
fn mutated_json_text(base: &Value, rng: &mut Rng) -> Vec<u8> {
    let mut v = base.clone();
    for _ in 0..=rng.below(4) {
        mutate_json(&mut v, rng, 0);
    }
    let mut text = serde_json::to_vec(&v).unwrap();
    if rng.chance(15) {
        mutate_bytes(&mut text, rng, 0..usize::MAX);
    }
    text
}

/// Byte-level mutations within `range` of `b`: flips, interesting bytes, runs, cuts, deep nests.
fn mutate_bytes(b: &mut Vec<u8>, rng: &mut Rng, range: std::ops::Range<usize>) {
    let end = range.end.min(b.len());
    let start = range.start.min(end);
    if end == start {
        return;
    }
    for _ in 0..=rng.below(4) {
        let at = start + rng.below(end - start);
        match rng.below(8) {
            0 | 1 => b[at] ^= 1 << rng.below(8),
            2 => b[at] = *rng.pick(&[0u8, 1, 0x7f, 0x80, 0xff, b'"', b'[', b'{', b'-', b'9']),
            3 => {
                let n = rng.below(8).min(end - at);
                for x in &mut b[at..at + n] {
                    *x = 0xff;
                }
            }
            4 if at < b.len() => {
                b.truncate(at);
                return;
            }
            5 => {
                let tail = b.split_off(at);
                b.extend(std::iter::repeat_n(b'[', 1 + rng.below(300_000)));
                b.extend(tail);
                return;
            }
            6 => {
                let tail = b.split_off(at);
                b.extend_from_slice(rng.pick(WORDS).as_bytes());
                b.extend(tail);
                return;
            }
            _ => {
                let n = rng.below(16).min(end - at);
                let tail = b.split_off(at);
                b.extend_from_slice(&tail[n..]);
                return;
            }
        }
    }
}

/// The JSON of a fixture file.
fn json_of(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A loader under fuzzing: writes one mutated input into `dir`, returns what to load.
trait Target {
    fn name(&self) -> &'static str;
    /// Writes the input; returns the files written (saved when it crashes).
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf>;
    /// The attempt to make on what was written.
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send>;
}

/// Safetensors folders the config, safetensors and index targets start from.
const FOLDERS: &[&str] = &[
    "tiny-bert",
    "tiny-gpt2",
    "tiny-llama",
    "tiny-albert",
    "tiny-deberta-v2",
    "tiny-deberta-v3",
    "tiny-distilbert",
    "tiny-electra",
    "tiny-gemma",
    "tiny-gpt-neox",
    "tiny-mistral",
    "tiny-mpnet",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-roberta",
    "tiny-xlm-roberta",
    "tiny-llama-rope-yarn",
    "tiny-llama-rope-llama3",
];

/// Replaces `dir`'s files with the fixture's (linked, not copied: they are not mutated).
fn reset_folder(dir: &Path, fixture_name: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let _ = std::fs::remove_file(&path);
    }
    for entry in std::fs::read_dir(fixture(fixture_name)).unwrap() {
        let entry = entry.unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    std::fs::write(dir.join("fixture.txt"), fixture_name).unwrap();
}

fn write_file(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes).unwrap();
}

fn load_dir(dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
    let dir = dir.to_path_buf();
    Box::new(move || load_and_run(&dir))
}

struct ConfigTarget(Vec<(&'static str, Value)>);

impl Target for ConfigTarget {
    fn name(&self) -> &'static str {
        "config"
    }
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf> {
        let (name, base) = rng.pick(&self.0);
        reset_folder(dir, name);
        let mut text = mutated_json_text(base, rng);
        if rng.chance(10) {
            // Keys of another family's config: the shapes disagree with the weights.
            let (_, other) = rng.pick(&self.0);
            let mut merged = base.clone();
            for (k, v) in other.as_object().unwrap() {
                if rng.chance(30) {
                    merged[k] = v.clone();
                }
            }
            text = serde_json::to_vec(&merged).unwrap();
        }
        write_file(&dir.join("config.json"), &text);
        vec![dir.join("config.json"), dir.join("fixture.txt")]
    }
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
        load_dir(dir)
    }
}

struct TokenizerTarget(Vec<Value>);

impl Target for TokenizerTarget {
    fn name(&self) -> &'static str {
        "tokenizer"
    }
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf> {
        let base = rng.pick(&self.0);
        // Mutations aimed where tokenizers break: the model, its vocabulary and merges, the
        // added tokens, normalizer, pre-tokenizer, post-processor and decoder.
        let mut v = base.clone();
        let sections = ["model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"];
        for _ in 0..=rng.below(4) {
            let section = *rng.pick(&sections);
            match v.get_mut(section) {
                Some(part) if rng.chance(85) => mutate_json(part, rng, 0),
                _ => mutate_json(&mut v, rng, 0),
            }
        }
        let mut text = serde_json::to_vec(&v).unwrap();
        if rng.chance(10) {
            mutate_bytes(&mut text, rng, 0..usize::MAX);
        }
        let path = dir.join("tokenizer.json");
        write_file(&path, &text);
        vec![path]
    }
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
        let path = dir.join("tokenizer.json");
        Box::new(move || {
            let text = String::from_utf8(std::fs::read(&path).unwrap()).map_err(|e| e.to_string())?;
            tokenizer_workout(&text)
        })
    }
}

struct SafetensorsTarget;

impl Target for SafetensorsTarget {
    fn name(&self) -> &'static str {
        "safetensors"
    }
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf> {
        let name = *rng.pick(FOLDERS);
        reset_folder(dir, name);
        let bytes = std::fs::read(fixture(name).join("model.safetensors")).unwrap();
        let (header, data) = split_safetensors(&bytes);
        let header_len = bytes.len() - data.len();
        let mut out = match rng.below(4) {
            // The header as JSON: shapes, offsets, dtypes, names.
            0 | 1 => {
                let mut h = header.clone();
                for _ in 0..=rng.below(3) {
                    if let Some(entries) = h.as_object_mut() {
                        let key = entries.keys().nth(rng.below(entries.len())).unwrap().clone();
                        let entry = entries.get_mut(&key).unwrap();
                        let field = *rng.pick(&["shape", "data_offsets", "dtype"]);
                        match entry.get_mut(field) {
                            Some(f) if rng.chance(80) => mutate_json(f, rng, 0),
                            _ => mutate_json(entry, rng, 0),
                        }
                    }
                }
                join_safetensors(&h, &data)
            }
            // Bytes of the length field and the header.
            2 => {
                let mut b = bytes.clone();
                if rng.chance(30) {
                    let n = interesting_number(rng).as_u64().unwrap_or(u64::MAX);
                    b[..8].copy_from_slice(&n.to_le_bytes());
                } else {
                    mutate_bytes(&mut b, rng, 0..header_len);
                }
                b
            }
            // The data: cut short or grown.
            _ => {
                let mut b = bytes.clone();
                let cut = header_len + rng.below(data.len() + 1);
                if rng.chance(50) {
                    b.truncate(cut);
                } else {
                    b.extend(std::iter::repeat_n(0u8, rng.below(4096)));
                }
                b
            }
        };
        if rng.chance(5) {
            mutate_bytes(&mut out, rng, 0..usize::MAX);
        }
        let path = dir.join("model.safetensors");
        write_file(&path, &out);
        vec![path, dir.join("fixture.txt")]
    }
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
        load_dir(dir)
    }
}

/// The sharded index: a fixture split in two shards, then the index mutated (and sometimes the
/// folder given a link to /dev/zero or a pipe to name).
struct IndexTarget(Vec<(&'static str, tempfile::TempDir)>);

impl Target for IndexTarget {
    fn name(&self) -> &'static str {
        "index"
    }
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf> {
        let (name, shards) = rng.pick(&self.0);
        reset_folder(dir, name);
        let _ = std::fs::remove_file(dir.join("model.safetensors"));
        for entry in std::fs::read_dir(shards.path()).unwrap() {
            let entry = entry.unwrap();
            let n = entry.file_name();
            if n.to_string_lossy().starts_with("model-") || n == "model.safetensors.index.json" {
                std::fs::copy(entry.path(), dir.join(&n)).unwrap();
            }
        }
        #[cfg(unix)]
        {
            symlink(Path::new("/dev/zero"), &dir.join("zero.safetensors"));
            if !dir.join("pipe.safetensors").exists() {
                fifo(&dir.join("pipe.safetensors"));
            }
        }
        let base = json_of(&shards.path().join("model.safetensors.index.json"));
        let mut v = base.clone();
        for _ in 0..=rng.below(3) {
            let map = v.get_mut("weight_map").filter(|_| rng.chance(80));
            match map.and_then(Value::as_object_mut) {
                Some(m) if !m.is_empty() => {
                    let key = m.keys().nth(rng.below(m.len())).unwrap().clone();
                    let names = [
                        "../model.safetensors",
                        "/dev/zero",
                        "zero.safetensors",
                        "pipe.safetensors",
                        "missing.safetensors",
                        ".",
                        "..",
                        "",
                        "sub/x.safetensors",
                        "C:\\x",
                        "model-00001-of-00002.safetensors",
                        "config.json",
                        "tokenizer.json",
                    ];
                    m[&key] = if rng.chance(70) { json!(rng.pick(&names)) } else { interesting_number(rng) };
                }
                _ => mutate_json(&mut v, rng, 0),
            }
        }
        let path = dir.join("model.safetensors.index.json");
        let mut text = serde_json::to_vec(&v).unwrap();
        if rng.chance(10) {
            mutate_bytes(&mut text, rng, 0..usize::MAX);
        }
        write_file(&path, &text);
        let mut written = vec![path, dir.join("fixture.txt")];
        written.extend(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"].map(|n| dir.join(n)));
        written
    }
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
        load_dir(dir)
    }
}

struct GgufTarget(Vec<(Vec<u8>, GgufLayout)>);

impl Target for GgufTarget {
    fn name(&self) -> &'static str {
        "gguf"
    }
    fn write(&mut self, rng: &mut Rng, dir: &Path) -> Vec<PathBuf> {
        let (base, layout) = rng.pick(&self.0);
        let mut b = base.clone();
        for _ in 0..=rng.below(3) {
            match rng.below(10) {
                // A located field set to an interesting value, or nudged.
                0..=5 => {
                    // Half the time a structural field (counts, types, dims, dtypes, offsets)
                    // rather than one of the vocabulary's many string lengths.
                    let structural: Vec<Field> = layout
                        .fields
                        .iter()
                        .filter(|f| !matches!(f.kind, Kind::StringLen | Kind::Scalar))
                        .copied()
                        .collect();
                    let f = if rng.chance(50) { *rng.pick(&structural) } else { *rng.pick(&layout.fields) };
                    if f.at + f.width > b.len() {
                        continue; // cut off by an earlier mutation
                    }
                    let max = if f.width == 8 { u64::MAX } else { (1u64 << (8 * f.width)) - 1 };
                    let old = {
                        let mut bytes = [0u8; 8];
                        bytes[..f.width].copy_from_slice(&b[f.at..f.at + f.width]);
                        u64::from_le_bytes(bytes)
                    };
                    let value = match rng.below(8) {
                        0 => 0,
                        1 => max,
                        2 => 1u64 << rng.below(8 * f.width),
                        3 => old.wrapping_add(1 + rng.below(4) as u64),
                        4 => old.wrapping_sub(1 + rng.below(4) as u64),
                        5 => base.len() as u64,
                        6 => u64::from(*rng.pick(&[0u32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 30, 31, 99])),
                        _ => rng.next(),
                    } & max;
                    set_field(&mut b, f, value);
                }
                // A 17-letter key renamed general.alignment.
                6 => {
                    let keys = layout.keys.iter().filter(|(_, k)| k.len() == 17);
                    if let Some((at, _)) = keys.clone().nth(rng.below(keys.count()))
                        && at + 8 + 17 <= b.len()
                    {
                        b[at + 8..at + 8 + 17].copy_from_slice(b"general.alignment");
                    }
                }
                // Bytes of the header.
                7 | 8 => mutate_bytes(&mut b, rng, 0..layout.header_end),
                // Cut short.
                _ => b.truncate(rng.below(b.len() + 1)),
            }
        }
        let path = dir.join("hostile.gguf");
        write_file(&path, &b);
        vec![path]
    }
    fn exercise(&self, dir: &Path) -> Box<dyn FnOnce() -> Result<(), String> + Send> {
        let path = dir.join("hostile.gguf");
        Box::new(move || load_and_run(&path))
    }
}

fn config_target() -> ConfigTarget {
    ConfigTarget(FOLDERS.iter().map(|n| (*n, json_of(&fixture(n).join("config.json")))).collect())
}

fn tokenizer_target() -> TokenizerTarget {
    // The small tokenizers (every kind: WordPiece, byte-level BPE, Unigram, SentencePiece BPE).
    let names = [
        "tiny-gpt2",
        "tiny-llama",
        "tiny-albert",
        "tiny-deberta-v3",
        "tiny-mpnet",
        "tiny-xlm-roberta",
        "tiny-electra",
        "tiny-roberta",
        "tiny-gemma",
        "tiny-qwen2",
        "tiny-distilbert",
        "tiny-deberta-v2",
    ];
    TokenizerTarget(names.iter().map(|n| json_of(&fixture(n).join("tokenizer.json"))).collect())
}

fn index_target() -> IndexTarget {
    IndexTarget(["tiny-gpt2", "tiny-bert", "tiny-llama"].iter().map(|n| (*n, sharded(n))).collect())
}

fn gguf_target() -> GgufTarget {
    let files = ["tiny-llama.Q8_0.gguf", "tiny-llama.Q4.gguf", "tiny-llama.F32.gguf"];
    // gpt-oss: MXFP4 experts (a type attnviz reads itself), stacked biases, sinks.
    let gpt_oss = std::fs::read(fixture("tiny-gpt-oss-gguf").join("tiny-gpt-oss.gguf")).unwrap();
    GgufTarget(
        files
            .iter()
            .map(|f| gguf_fixture(f))
            .chain([gpt_oss])
            .map(|b| {
                let layout = gguf_layout(&b);
                (b, layout)
            })
            .collect(),
    )
}

/// What a campaign did.
#[derive(Debug, Default)]
struct Report {
    executions: u64,
    ok: u64,
    errors: u64,
    crashes: Vec<String>,
    slowest: Duration,
    most_bytes: usize,
    distinct_errors: BTreeMap<String, u64>,
}

/// Runs a campaign: seeded inputs for `ATTNVIZ_FUZZ_SECS` seconds, or `short` inputs when unset.
fn campaign(target: &mut dyn Target, short: u64) -> Report {
    quiet_panics_counted();
    let secs = std::env::var("ATTNVIZ_FUZZ_SECS").ok().and_then(|s| s.parse::<f64>().ok());
    let seed = std::env::var("ATTNVIZ_FUZZ_SEED").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or_else(|| {
        if secs.is_some() {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        } else {
            18
        }
    });
    // A fixed work folder: if an input aborts the process, it is still on disk.
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-work").join(format!(
        "{}-{}",
        target.name(),
        std::process::id()
    ));
    println!("fuzz {}: seed {seed}, inputs written to {}", target.name(), work.display());
    std::fs::create_dir_all(&work).unwrap();
    let crashes_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
    let start = Instant::now();
    let mut report = Report::default();
    let mut i = 0u64;
    loop {
        let done = match secs {
            Some(s) => start.elapsed().as_secs_f64() >= s,
            None => i >= short,
        };
        if done {
            break;
        }
        let mut rng = Rng(seed.wrapping_add(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let written = target.write(&mut rng, &work);
        let a = attempt(target.exercise(&work));
        report.executions += 1;
        report.slowest = report.slowest.max(a.elapsed);
        report.most_bytes = report.most_bytes.max(a.peak_bytes);
        match (&a.result, a.crash()) {
            (_, Some(crash)) => {
                let saved = crashes_dir.join(format!("{}-{seed}-{i}", target.name()));
                std::fs::create_dir_all(&saved).unwrap();
                for f in &written {
                    if let Ok(bytes) = std::fs::read(f) {
                        std::fs::write(saved.join(f.file_name().unwrap()), bytes).unwrap();
                    }
                }
                std::fs::write(saved.join("crash.txt"), &crash).unwrap();
                report.crashes.push(format!("{crash} (saved in {})", saved.display()));
            }
            (Some(Ok(())), None) => report.ok += 1,
            (Some(Err(e)), None) => {
                report.errors += 1;
                let kind: String = e.chars().filter(|c| !c.is_ascii_digit()).take(90).collect();
                *report.distinct_errors.entry(kind).or_default() += 1;
            }
            (None, None) => unreachable!(),
        }
        i += 1;
    }
    let caught = CAUGHT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    println!(
        "fuzz {}: seed {seed}, {} executions in {:.0?} ({} Ok, {} clean errors, {} crashes), slowest {:?}, most memory {} KB, {} distinct errors",
        target.name(),
        report.executions,
        start.elapsed(),
        report.ok,
        report.errors,
        report.crashes.len(),
        report.slowest,
        report.most_bytes >> 10,
        report.distinct_errors.len()
    );
    if secs.is_some() {
        for (e, n) in &report.distinct_errors {
            println!("  {n:>6} × {e}");
        }
        for (place, n) in &caught {
            println!("  caught panic {n} × {place}");
        }
    }
    report
}

fn assert_clean(report: &Report) {
    assert!(report.crashes.is_empty(), "crashes:\n{}", report.crashes.join("\n"));
    assert!(report.executions > 0);
}

#[test]
fn fuzz_config_json() {
    assert_clean(&campaign(&mut config_target(), 60));
}

#[test]
fn fuzz_tokenizer_json() {
    assert_clean(&campaign(&mut tokenizer_target(), 60));
}

#[test]
fn fuzz_safetensors() {
    assert_clean(&campaign(&mut SafetensorsTarget, 60));
}

#[test]
fn fuzz_safetensors_index() {
    assert_clean(&campaign(&mut index_target(), 40));
}

#[test]
fn fuzz_gguf() {
    assert_clean(&campaign(&mut gguf_target(), 60));
}

/// Replays every committed crashing input (`tests/fixtures/hostile/regressions/<target>-…/`, with
/// `fixture.txt` naming the fixture folder the rest of the files come from).
#[test]
fn regressions_stay_fixed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile/regressions");
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    let mut replayed = 0;
    for entry in entries {
        let saved = entry.unwrap().path();
        let dir = tempfile::tempdir().unwrap();
        if let Ok(name) = std::fs::read_to_string(saved.join("fixture.txt")) {
            copy_files(&fixture(name.trim()), dir.path());
        }
        copy_files(&saved, dir.path());
        let target = saved.file_name().unwrap().to_string_lossy().split('-').next().unwrap().to_string();
        let path = dir.path().to_path_buf();
        let a = match target.as_str() {
            "tokenizer" => attempt(move || {
                tokenizer_workout(&String::from_utf8_lossy(&std::fs::read(path.join("tokenizer.json")).unwrap()))
            }),
            "gguf" => attempt(move || load_and_run(&path.join("hostile.gguf"))),
            _ => attempt(move || load_and_run(&path)),
        };
        assert!(a.crash().is_none(), "{}: {a:?}", saved.display());
        replayed += 1;
    }
    println!("{replayed} regressions replayed");
}

// ---------------------------------------------------------------------------------------------
// Attention files from strangers (`attnviz open`, the app's Open): the same promise.

/// Reads an attention file as `attnviz open` does.
fn open_attention(path: &Path) -> Result<(), String> {
    attnviz::analysis::import::read_attention_file(path).map(|_| ()).map_err(|e| e.to_string())
}

/// A `.npy` array's bytes: header for `descr` and `shape`, then `body`.
fn npy(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    header.push_str(&" ".repeat((64 - (10 + header.len() + 1) % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(body);
    out
}

/// An `.npz` of raw entries (name, bytes), stored.
fn npz_of(entries: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, PathBuf) {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in entries {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    (dir, path)
}

/// Good tokens for a 2-token file.
fn two_tokens() -> (&'static str, Vec<u8>) {
    ("tokens.npy", npy("<U1", "(2,)", &[b'a', 0, 0, 0, b'b', 0, 0, 0]))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn json_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.json");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn attention_cases() -> Vec<Case> {
    vec![
        Case {
            class: "attention: a declared shape whose element count overflows",
            build: || {
                npz_of(&[("attentions.npy", npy("<f4", "(4294967296, 4294967296, 4294967296, 2)", &[])), two_tokens()])
            },
            needles: &["hostile.npz", "`attentions`", "too large"],
        },
        Case {
            class: "attention: a declared 2⁴² values with no data",
            build: || npz_of(&[("attentions.npy", npy("<f4", "(4096, 64, 4096, 4096)", &[])), two_tokens()]),
            needles: &["more than the 268435456 attention values"],
        },
        Case {
            class: "attention: data cut short",
            build: || npz_of(&[("attentions.npy", npy("<f4", "(1, 1, 2, 2)", &f32_bytes(&[1.0]))), two_tokens()]),
            needles: &["`attentions` is cut short: 4 of 16 bytes"],
        },
        Case {
            class: "attention: a truncated archive",
            build: || {
                let (dir, path) = npz_of(&[
                    ("attentions.npy", npy("<f4", "(1, 1, 2, 2)", &f32_bytes(&[1.0, 0.0, 0.5, 0.5]))),
                    two_tokens(),
                ]);
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() - 30]).unwrap();
                (dir, path)
            },
            needles: &["not a NumPy .npz archive"],
        },
        Case {
            class: "attention: pickled token labels",
            build: || {
                npz_of(&[
                    ("attentions.npy", npy("<f4", "(1, 1, 2, 2)", &f32_bytes(&[1.0, 0.0, 0.5, 0.5]))),
                    ("tokens.npy", npy("|O", "(2,)", b"\x80\x04junk")),
                ])
            },
            needles: &["object array (pickled)", "dtype=str"],
        },
        Case {
            class: "attention: Fortran order",
            build: || {
                let mut a = npy("<f4", "(1, 1, 2, 2)", &f32_bytes(&[1.0, 0.0, 0.5, 0.5]));
                let at = a.windows(5).position(|w| w == b"False").unwrap();
                a[at..at + 5].copy_from_slice(b"True ");
                npz_of(&[("attentions.npy", a), two_tokens()])
            },
            needles: &["Fortran order"],
        },
        Case {
            class: "attention: big-endian floats",
            build: || npz_of(&[("attentions.npy", npy(">f4", "(1, 1, 2, 2)", &[0; 16])), two_tokens()]),
            needles: &["little-endian floats"],
        },
        Case {
            class: "attention: NaN weights",
            build: || {
                npz_of(&[
                    ("attentions.npy", npy("<f4", "(1, 1, 2, 2)", &f32_bytes(&[f32::NAN, 0.0, 0.5, 0.5]))),
                    two_tokens(),
                ])
            },
            needles: &["holds NaN", "probabilities"],
        },
        Case {
            class: "attention: a 10 000-entry archive",
            build: || {
                let entries: Vec<(String, Vec<u8>)> = (0..10_000).map(|i| (format!("x{i}.npy"), Vec::new())).collect();
                let refs: Vec<(&str, Vec<u8>)> = entries.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
                npz_of(&refs)
            },
            needles: &["10000 arrays in the archive"],
        },
        Case {
            class: "attention: a .npy header claiming 4 GB",
            build: || {
                let mut a = b"\x93NUMPY\x02\x00".to_vec();
                a.extend_from_slice(&u32::MAX.to_le_bytes());
                npz_of(&[("attentions.npy", a), two_tokens()])
            },
            needles: &["a .npy header of 4294967295 bytes"],
        },
        Case {
            class: "attention: JSON nested 100 000 deep",
            build: || json_file(&format!("{{\"tokens\": [\"a\"], \"attentions\": {}}}", deep_json(100_000))),
            needles: &["hostile.json", "not an attention file"],
        },
        Case {
            class: "attention: a ragged JSON list",
            build: || json_file(r#"{"tokens": ["a", "b"], "attentions": [[[[1, 0], [0.5, 0.25, 0.25]]]]}"#),
            needles: &["ragged"],
        },
        Case {
            class: "attention: a row that does not sum to 1",
            build: || json_file(r#"{"tokens": ["a", "b"], "attentions": [[[[1, 0], [0.5, 0.25]]]]}"#),
            needles: &["`attentions`[0][0][1] sums to 0.75, not 1"],
        },
        Case {
            class: "attention: labels that do not match the rows",
            build: || json_file(r#"{"tokens": ["a"], "attentions": [[[[1, 0], [0.5, 0.5]]]]}"#),
            needles: &["`tokens` has 1 labels for 2 query rows"],
        },
        Case {
            class: "attention: a 5 GiB sparse file",
            build: || {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("huge.json");
                sparse(&path, b"{\"tokens\": [", 5 << 30);
                (dir, path)
            },
            needles: &["huge.json", "larger than"],
        },
        Case {
            class: "attention: a folder named like a file",
            build: || {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("folder.npz");
                std::fs::create_dir(&path).unwrap();
                (dir, path)
            },
            needles: &["folder.npz: not a file"],
        },
        #[cfg(unix)]
        Case {
            class: "attention: a FIFO that never ends",
            build: || {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("pipe.json");
                fifo(&path);
                (dir, path)
            },
            needles: &["pipe.json: not a file"],
        },
    ]
}

#[test]
fn hostile_attention_files_are_clear_errors_in_bounded_time_and_memory() {
    check_cases(attention_cases(), open_attention);
}

/// Seeded mutations of the README examples' files and of a dump's JSON: each ends in `Ok` or a
/// clean error, in bounded time and memory.
#[test]
fn fuzz_attention_files() {
    quiet_panics_counted();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attention");
    let json = br#"{"model": "m", "tokens": ["[CLS]", "a", "b"], "segments": [0, 0, 1], "attentions": [[[[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]], [[[0.1, 0.1, 0.8], [0.3, 0.3, 0.4], [1, 0, 0]]]]}"#.to_vec();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("vit.npz", std::fs::read(root.join("vit.npz")).unwrap()),
        ("bert.npz", std::fs::read(root.join("bert.npz")).unwrap()),
        ("dump.json", json),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (mut ok, mut errors) = (0, 0);
    let mut crashes = Vec::new();
    for i in 0..90u64 {
        let (name, base) = &seeds[(i % 3) as usize];
        let mut rng = Rng((18 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut bytes = base.clone();
        let len = bytes.len();
        mutate_bytes(&mut bytes, &mut rng, 0..len);
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let shown = path.clone();
        let a = attempt(move || open_attention(&shown));
        match (&a.result, a.crash()) {
            (_, Some(crash)) => {
                let saved = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("attention-crash-{i}-{name}"));
                std::fs::write(&saved, &bytes).unwrap();
                crashes.push(format!("{name} #{i}: {crash} (saved in {})", saved.display()));
            }
            (Some(Ok(())), None) => ok += 1,
            _ => errors += 1,
        }
    }
    println!("fuzz attention files: {ok} Ok, {errors} clean errors");
    assert!(crashes.is_empty(), "{}", crashes.join("\n"));
    assert!(errors > 0, "the mutations reach the checks");
}
