//! Test helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses some of them

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
