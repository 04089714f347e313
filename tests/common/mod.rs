//! Test helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses some of them

use std::path::{Path, PathBuf};

/// The 2026 families' fixtures (`tests/fixtures/models/tiny-…`) and the prefix of their references.
pub const FAMILIES_2026: [(&str, &str); 7] = [
    ("tiny-gemma2", "gemma2"),
    ("tiny-gemma3", "gemma3"),
    ("tiny-phi3", "phi3"),
    ("tiny-olmo2", "olmo2"),
    ("tiny-granite", "granite"),
    ("tiny-smollm3", "smollm3"),
    ("tiny-gpt-oss", "gpt_oss"),
];

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

thread_local! {
    /// The calling test's own temporary folder (libtest runs each test on a thread of its own, so
    /// it is removed when the test ends).
    static SANDBOX: tempfile::TempDir = tempfile::Builder::new().prefix("attnviz-test-").tempdir().unwrap();
}

/// The working directory and home folder an app under test gets, inside the calling test's own
/// temporary folder (`work/` and `home/`; created, removed when the test ends): a relative path
/// typed into the app, or an export to its default folder, never lands in the source tree or in the
/// user's home.
pub fn sandbox() -> (PathBuf, PathBuf) {
    SANDBOX.with(|dir| {
        let (work, home) = (dir.path().join("work"), dir.path().join("home"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        (work, home)
    })
}

/// Runs `cmd` (the `attnviz` binary) to completion in a temporary working directory with a
/// temporary `HOME` and XDG folders, so that whatever it writes to a relative path or to the
/// user's folders lands there (and is removed).
pub fn output_sandboxed(cmd: &mut std::process::Command) -> std::process::Output {
    let dir = tempfile::Builder::new().prefix("attnviz-test-").tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    cmd.current_dir(dir.path())
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .output()
        .unwrap()
}

/// The entries of the repository's top folder (to check that a test added none).
pub fn root_entries() -> std::collections::BTreeSet<std::ffi::OsString> {
    std::fs::read_dir(root()).unwrap().map(|e| e.unwrap().file_name()).collect()
}

/// A Hugging Face cache laid out as `huggingface_hub` writes it (blobs, `refs/main`, a snapshot of
/// links to the blobs), holding the model folder `src` under the hub id `id`. Returns the cache.
pub fn fake_hf_cache(src: &Path, id: &str) -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join(format!("models--{}", id.replace('/', "--")));
    let rev = "5f1b3c2a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a";
    let snapshot = repo.join("snapshots").join(rev);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), rev).unwrap();
    for (i, f) in ["config.json", "tokenizer.json", "model.safetensors"].iter().enumerate() {
        let blob = repo.join("blobs").join(format!("{i:040}"));
        std::fs::copy(src.join(f), &blob).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&blob, snapshot.join(f)).unwrap();
        #[cfg(not(unix))]
        std::fs::copy(&blob, snapshot.join(f)).unwrap();
    }
    cache
}

/// A copy of fixture `name` (a folder of `tests/fixtures/models`) whose config allows `positions`
/// tokens (`key` names them: `max_position_embeddings`, `n_positions`).
pub fn fixture_with_positions(name: &str, key: &str, positions: usize) -> tempfile::TempDir {
    let src = root().join("tests/fixtures/models").join(name);
    let dir = tempfile::tempdir().unwrap();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config[key] = positions.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

/// A small deterministic generator (xorshift64*) for seeded walks and fuzzing: the same seed, the
/// same sequence. The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Every fixture model (each family's folder, the rope scalings, each GGUF file).
pub fn fixture_models() -> Vec<PathBuf> {
    let list = |dir: &Path| -> Vec<PathBuf> { std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect() };
    let mut dirs = Vec::new();
    for p in list(&root().join("tests/fixtures/models")) {
        if p.join("config.json").is_file() {
            dirs.push(p);
        } else if p.is_dir() {
            dirs.extend(list(&p).into_iter().filter(|f| f.extension().is_some_and(|e| e == "gguf")));
        }
    }
    dirs.sort();
    assert!(dirs.len() >= 20, "the fixture families are there");
    dirs
}

/// Every fixture model, named by its folder or file and loaded, one at a time.
pub fn loaded_fixtures() -> impl Iterator<Item = (String, attnviz::model::LoadedModel)> {
    fixture_models().into_iter().map(|dir| {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let model = attnviz::model::LoadedModel::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        (name, model)
    })
}

/// A reference file of `tests/fixtures/reference/`, parsed.
pub fn reference_json(file: &str) -> serde_json::Value {
    let path = root().join("tests/fixtures/reference").join(file);
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Every number of a JSON value, nested arrays flattened (null: NaN).
pub fn floats(v: &serde_json::Value) -> Vec<f64> {
    match v {
        serde_json::Value::Array(a) => a.iter().flat_map(floats).collect(),
        serde_json::Value::Number(n) => vec![n.as_f64().unwrap()],
        serde_json::Value::Null => vec![f64::NAN],
        _ => panic!("not a number: {v}"),
    }
}

/// Every number of a JSON value as a token id.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    floats(v).into_iter().map(|x| x as u32).collect()
}

/// The model's tokens of `ids`.
pub fn tokens_of(model: &attnviz::model::LoadedModel, ids: &[u32]) -> attnviz::analysis::Tokens {
    attnviz::analysis::Tokens::from_ids(ids, |id| model.tokenizer.token_of(id), |id| model.tokenizer.is_special(id))
}

/// The bits of each value (to compare bit for bit).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
