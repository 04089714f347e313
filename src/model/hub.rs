//! Models users already have: hub ids such as `sentence-transformers/all-MiniLM-L6-v2` resolved
//! offline from the local Hugging Face cache, exactly where Python's `huggingface_hub` keeps them
//! (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`; `models--org--name/refs/main`
//! → `snapshots/<revision>/`). The layout is read through the `hf-hub` crate's cache API, built
//! without its network features: nothing here ever downloads.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::ModelError;
use super::files::{MAX_JSON_BYTES, read_bounded};

/// The cache folder (`…/huggingface/hub`) Python would use.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("HF_HUB_CACHE").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Cache::from_env().path().clone(),
    }
}

/// Whether `spec` reads as a hub id (`name` or `org/name`, no path syntax) rather than a path.
pub fn looks_like_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    let part_ok = |p: &&str| {
        !p.is_empty()
            && !p.starts_with('.')
            && !p.starts_with('-')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (1..=2).contains(&parts.len()) && parts.iter().all(part_ok) && !spec.contains("--")
}

/// The folder a model spec names: an existing path as it is, else a hub id's snapshot in the cache
/// at `cache` (the one with `config.json` at the revision `refs/main` points to).
pub fn resolve_in(spec: &Path, cache: &Path) -> Result<PathBuf, ModelError> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let text = spec.to_string_lossy();
    if !looks_like_id(&text) {
        return Err(ModelError::NoFolder(spec.to_path_buf()));
    }
    let repo = Cache::new(cache.to_path_buf()).repo(Repo::new(text.to_string(), RepoType::Model));
    match repo.get("config.json") {
        Some(config) => Ok(config.parent().map_or_else(|| config.clone(), Path::to_path_buf)),
        None => Err(ModelError::NotCached { id: text.to_string(), cache: cache.to_path_buf() }),
    }
}

/// [`resolve_in`] the user's cache.
pub fn resolve(spec: &Path) -> Result<PathBuf, ModelError> {
    resolve_in(spec, &cache_dir())
}

/// The hub id of a folder inside a cache (`…/models--org--name/snapshots/<rev>`), if it is one.
pub fn id_of(dir: &Path) -> Option<String> {
    let snapshots = dir.parent()?;
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    let repo = snapshots.parent()?.file_name()?.to_str()?;
    Some(repo.strip_prefix("models--")?.replace("--", "/"))
}

/// A model found in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedModel {
    /// Hub id, e.g. `sentence-transformers/all-MiniLM-L6-v2`.
    pub id: String,
    /// Its snapshot folder.
    pub dir: PathBuf,
    /// "bert · 6 layers × 12 heads × 384 wide", or why attnviz cannot open it.
    pub summary: Result<String, String>,
    /// Bytes of its files (weights mostly).
    pub bytes: u64,
}

/// Every model in the cache at `cache` with a `config.json` at its main revision, sorted by id.
/// Unreadable entries are skipped; a model attnviz cannot run is listed with the reason.
pub fn list_in(cache: &Path) -> Vec<CachedModel> {
    let Ok(entries) = std::fs::read_dir(cache) else { return Vec::new() };
    let mut found: Vec<CachedModel> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix("models--")?.replace("--", "/");
            let dir = resolve_in(Path::new(&id), cache).ok()?;
            let summary = read_bounded(&dir.join("config.json"), MAX_JSON_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|bytes| String::from_utf8(bytes).map_err(|e| e.to_string()))
                .and_then(|text| super::families::describe(&text).map_err(|e| e.to_string()))
                .map(|(_, desc)| desc.summary());
            let bytes = folder_bytes(&dir);
            Some(CachedModel { id, dir, summary, bytes })
        })
        .collect();
    found.sort_by(|a, b| a.id.cmp(&b.id));
    found
}

/// [`list_in`] the user's cache.
pub fn list() -> Vec<CachedModel> {
    list_in(&cache_dir())
}

/// Sizes of a folder's files, following the cache's links to its blobs.
fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries.filter_map(Result::ok).filter_map(|e| std::fs::metadata(e.path()).ok()).map(|m| m.len()).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache as `huggingface_hub` writes it: blobs, a snapshot of links to them, refs/main.
    fn fake_cache(root: &Path, id: &str, files: &[(&str, &str)]) -> PathBuf {
        let repo = root.join(format!("models--{}", id.replace('/', "--")));
        let rev = "0123456789abcdef0123456789abcdef01234567";
        let snapshot = repo.join("snapshots").join(rev);
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), rev).unwrap();
        for (i, (name, text)) in files.iter().enumerate() {
            let blob = repo.join("blobs").join(format!("blob{i}"));
            std::fs::write(&blob, text).unwrap();
            #[cfg(unix)]
            std::os::unix::fs::symlink(&blob, snapshot.join(name)).unwrap();
            #[cfg(not(unix))]
            std::fs::copy(&blob, snapshot.join(name)).unwrap();
        }
        snapshot
    }

    #[test]
    fn ids_resolve_through_refs_main_and_list_with_their_shape() {
        let cache = tempfile::tempdir().unwrap();
        let config = r#"{"model_type":"bert","vocab_size":10,"hidden_size":8,"num_hidden_layers":3,
            "num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":4}"#;
        let snapshot = fake_cache(cache.path(), "org/tiny-model", &[("config.json", config)]);
        fake_cache(cache.path(), "other/whisper-thing", &[("config.json", r#"{"model_type":"whisper"}"#)]);
        let got = resolve_in(Path::new("org/tiny-model"), cache.path()).unwrap();
        assert_eq!(got, snapshot);
        assert_eq!(id_of(&got).as_deref(), Some("org/tiny-model"));
        let listed = list_in(cache.path());
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].id, "org/tiny-model");
        assert_eq!(listed[0].summary.as_deref(), Ok("bert · 3 layers × 2 heads × 8 wide"));
        assert!(listed[0].bytes > 0);
        assert!(listed[1].summary.as_ref().unwrap_err().contains("whisper"));
        let err = resolve_in(Path::new("org/absent"), cache.path()).unwrap_err().to_string();
        assert!(err.contains("org/absent") && err.contains("cache"), "{err}");
        // A path that does not exist and is not an id stays a missing folder.
        assert!(matches!(resolve_in(Path::new("./no/such/dir"), cache.path()), Err(ModelError::NoFolder(_))));
    }

    #[test]
    fn the_2026_families_are_listed_with_their_shape() {
        // The app's "Models on this computer" lists what this reads: every new family opens.
        let cache = tempfile::tempdir().unwrap();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/models");
        for family in ["gemma2", "gemma3", "phi3", "olmo2", "granite", "smollm3"] {
            let config = std::fs::read_to_string(format!("{root}/tiny-{family}/config.json")).unwrap();
            fake_cache(cache.path(), &format!("org/tiny-{family}"), &[("config.json", &config)]);
        }
        let listed = list_in(cache.path());
        let summaries: Vec<&str> = listed.iter().map(|m| m.summary.as_deref().unwrap()).collect();
        assert_eq!(
            summaries,
            [
                "gemma2 · 2 layers × 4 heads (2 key/value) × 32 wide",
                "gemma3_text · 2 layers × 4 heads (2 key/value) × 32 wide",
                "granite · 2 layers × 4 heads (2 key/value) × 32 wide",
                "olmo2 · 2 layers × 4 heads (2 key/value) × 32 wide",
                "phi3 · 2 layers × 4 heads (2 key/value) × 32 wide",
                "smollm3 · 2 layers × 4 heads (2 key/value) × 32 wide",
            ]
        );
    }

    #[test]
    fn ids_are_told_from_paths() {
        assert!(looks_like_id("sentence-transformers/all-MiniLM-L6-v2"));
        assert!(looks_like_id("gpt2"));
        for path in ["/abs/path", "./rel", "a/b/c", "../x", "", "a//b", "models--a--b"] {
            assert!(!looks_like_id(path), "{path}");
        }
    }
}
