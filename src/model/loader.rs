//! A model folder (or GGUF file, embedded model, hub id) → a [`LoadedModel`]: validated config,
//! weights checked against it, and tokenizer. Files are read through [`super::files`], which holds
//! the limits and checks on untrusted files; running a loaded model is in `run.rs`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::ModelError;
use super::describe::Description;
use super::engine::{EngineError, Network, WeightStorage, Weights};
use super::families::{self, Family};
use super::files::{MAX_JSON_BYTES, check_memory, checked_safetensors_header, first_line, present, read_bounded};
use super::tokenize::TextTokenizer;

/// Folder name of the embedded default model under `assets/models/`.
pub const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// The variable naming a folder that holds the embedded models (`$ATTNVIZ_ASSETS/models/…`).
pub const ASSETS_ENV: &str = "ATTNVIZ_ASSETS";

/// Where the embedded default model is: `$ATTNVIZ_MODEL` if set, else `all-MiniLM-L6-v2` in the
/// folder [`embedded_models`] finds (or, when none is found, where the source tree keeps it, so the
/// error names a path; [`default_model`] says where it looked instead).
pub fn default_model_dir() -> PathBuf {
    default_model().unwrap_or_else(|_| source_tree_models().join(DEFAULT_MODEL_NAME))
}

/// [`default_model_dir`], or the error saying where the embedded models were looked for and how
/// to put them there.
pub fn default_model() -> Result<PathBuf, ModelError> {
    if let Some(dir) = std::env::var_os("ATTNVIZ_MODEL").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    Ok(embedded_models()?.join(DEFAULT_MODEL_NAME))
}

/// The `assets/models` folder of the source tree this binary was built from.
pub fn source_tree_models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets").join("models")
}

/// The data folder the embedded models can be installed into: `$XDG_DATA_HOME/attnviz/models`,
/// else `$HOME/.local/share/attnviz/models` (None without either).
pub fn data_models_dir() -> Option<PathBuf> {
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let data = nonempty("XDG_DATA_HOME").or_else(|| nonempty("HOME").map(|h| h.join(".local").join("share")))?;
    Some(data.join("attnviz").join("models"))
}

/// The folders that may hold the embedded models, in the order they are looked in:
/// `$ATTNVIZ_ASSETS/models`, `assets/models` beside the executable and two folders above it (a
/// build's `target/release/`), the data folder ([`data_models_dir`]), and the source tree the
/// binary was built from — the last only for an executable inside that tree or still in cargo's
/// build folder (`cargo run`, the tests, wherever `CARGO_TARGET_DIR` puts them), so a binary copied
/// elsewhere never depends on the tree it came from.
pub fn model_search_path() -> Vec<PathBuf> {
    let rel = Path::new("assets").join("models");
    let mut places = Vec::new();
    if let Some(assets) = std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()) {
        places.push(PathBuf::from(assets).join("models"));
    }
    let exe = std::env::current_exe().ok().map(|p| p.canonicalize().unwrap_or(p));
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        places.push(dir.join(&rel));
        if let Some(up) = dir.parent().and_then(Path::parent) {
            places.push(up.join(&rel));
        }
    }
    places.extend(data_models_dir());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    // Cargo's build folders (`target/debug`, and `deps/` below it) hold its `.fingerprint` folder.
    let cargo_build = |dir: &Path| dir.join(".fingerprint").is_dir();
    let exe_dir = exe.as_deref().and_then(Path::parent);
    let built_here = exe_dir.is_some_and(|d| cargo_build(d) || d.parent().is_some_and(cargo_build));
    if built_here || exe.as_deref().is_some_and(|e| e.starts_with(&root)) {
        places.push(root.join(&rel));
    }
    let mut seen = BTreeSet::new();
    places.retain(|p| seen.insert(p.clone()));
    places
}

/// The first folder of [`model_search_path`] that holds the embedded `MiniLM` (its
/// `config.json`), or the error listing every folder looked in. Looked up once per process.
pub fn embedded_models() -> Result<PathBuf, ModelError> {
    static FOUND: std::sync::OnceLock<Result<PathBuf, Vec<PathBuf>>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| find_models(&model_search_path()))
        .clone()
        .map_err(|looked| ModelError::NoEmbeddedModels { looked })
}

/// The first of `places` that holds the embedded `MiniLM`, or all of them.
pub fn find_models(places: &[PathBuf]) -> Result<PathBuf, Vec<PathBuf>> {
    places
        .iter()
        .find(|p| p.join(DEFAULT_MODEL_NAME).join("config.json").is_file())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| places.to_vec())
}

/// A loaded model: encoder, tokenizer and where they came from.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    /// Display name (the folder's name).
    pub name: String,
    /// The folder it was loaded from.
    pub dir: PathBuf,
    /// The network.
    pub net: Network,
    /// The tokenizer.
    pub tokenizer: TextTokenizer,
    /// Whether this is the playground encoder (random weights), not a pretrained model.
    pub playground: bool,
    /// For weights read from a GGUF file: what they were, e.g. "GGUF `Q4_1` (210), `F32` (61), kept
    /// in their blocks". Attention is faithful to that file, not to the original model.
    pub quantization: Option<String>,
    /// For an encoder–decoder: the decoder (`net` is the encoder).
    pub decoder: Option<Seq2SeqDecoder>,
    /// Token ids that end a generated text (`eos_token_id` of `generation_config.json`, else of
    /// `config.json`).
    pub eos: Vec<u32>,
}

/// Names of pickle weight files that are never loaded.
fn pickle_file(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut found: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| [".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"].iter().any(|ext| n.ends_with(ext)))
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The error for a folder without `tokenizer.json`, saying how to write one.
fn missing_tokenizer(dir: &Path) -> ModelError {
    let sentencepiece = ["tokenizer.model", "sentencepiece.bpe.model", "spm.model", "source.spm"]
        .into_iter()
        .find(|f| dir.join(f).is_file());
    let hint: &'static str = if sentencepiece.is_some() {
        "this folder has only a SentencePiece model; write tokenizer.json once with: python -c \"from transformers import AutoTokenizer; AutoTokenizer.from_pretrained('DIR').save_pretrained('DIR')\" (needs sentencepiece and protobuf)"
    } else {
        "save the fast tokenizer with: python -c \"from transformers import AutoTokenizer; AutoTokenizer.from_pretrained('DIR').save_pretrained('DIR')\""
    };
    ModelError::MissingFile { dir: dir.to_path_buf(), file: "tokenizer.json", hint }
}

/// The safetensors files of a folder: `model.safetensors`, or the shards listed in its index.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if present(&single) {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if present(&index) {
        let text = read_bounded(&index, MAX_JSON_BYTES)?;
        let parsed: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| ModelError::Weights { path: index.clone(), message: e.to_string() })?;
        let bad = |message: String| ModelError::Weights { path: index.clone(), message };
        let Some(map) = parsed.get("weight_map").and_then(serde_json::Value::as_object) else {
            return Err(bad("it has no \"weight_map\" object of tensor name → shard file".into()));
        };
        let mut shards = BTreeSet::new();
        for (tensor, shard) in map {
            let Some(shard) = shard.as_str() else {
                return Err(bad(format!("weight_map[\"{tensor}\"] = {shard} is not a file name")));
            };
            // A plain file name beside the index: no folders, no "..", nothing hidden.
            if shard.is_empty() || shard.contains(['/', '\\', ':', '\0']) || shard.starts_with('.') {
                return Err(bad(format!(
                    "weight_map[\"{tensor}\"] = \"{shard}\" is not a file name in the model folder"
                )));
            }
            shards.insert(shard.to_string());
        }
        if shards.is_empty() {
            return Err(bad("weight_map lists no shard files".into()));
        }
        return Ok(shards.into_iter().map(|s| dir.join(s)).collect());
    }
    if let Some(file) = pickle_file(dir) {
        return Err(ModelError::Pickle { dir: dir.to_path_buf(), file });
    }
    Err(ModelError::MissingFile {
        dir: dir.to_path_buf(),
        file: "model.safetensors",
        hint: "weights must be in safetensors format",
    })
}

/// Reads the safetensors files (their headers and the memory they need checked first), renames
/// their tensors through the family's mapping and checks them against the description (and an
/// encoder–decoder's decoder); every error names the file and the tensor.
fn load_weights(
    dir: &Path,
    files: &[PathBuf],
    (family, storage): (&Family, WeightStorage),
    desc: &Description,
    decoder: Option<&Description>,
) -> Result<(Weights, Option<Weights>), ModelError> {
    let mut lengths = Vec::with_capacity(files.len());
    for file in files {
        lengths.push(checked_safetensors_header(file)?);
    }
    check_memory(dir, desc, lengths.iter().sum())?;
    let mut tensors = HashMap::new();
    for (file, &len) in files.iter().zip(&lengths) {
        let bytes = read_bounded(file, len)?;
        let bad = |message: String| ModelError::Weights { path: file.clone(), message };
        let loaded = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| bad(first_line(&e)))?;
        for (name, tensor) in loaded {
            tensors.insert(name, tensor);
        }
    }
    let where_ = files.first().cloned().unwrap_or_default();
    let tensors =
        (family.canonical)(tensors, desc).map_err(|message| ModelError::Weights { path: where_.clone(), message })?;
    let Some(decoder) = decoder else { return Ok((checked_weights(tensors, desc, &where_, storage)?, None)) };
    // An encoder–decoder: the decoder's tensors are named `decoder.…`.
    let (mut encoder_side, mut decoder_side) = (HashMap::new(), HashMap::new());
    for (name, t) in tensors {
        match name.strip_prefix("decoder.") {
            Some(rest) => decoder_side.insert(rest.to_string(), t),
            None => encoder_side.insert(name, t),
        };
    }
    Ok((
        checked_weights(encoder_side, desc, &where_, storage)?,
        Some(checked_weights(decoder_side, decoder, &where_, storage)?),
    ))
}

/// Canonical tensors checked against the description: dtypes, layer count (first: a config
/// claiming far more layers than the file holds is refused at once), then every name and shape.
fn checked_weights(
    tensors: families::Tensors,
    desc: &Description,
    file: &Path,
    storage: WeightStorage,
) -> Result<Weights, ModelError> {
    let bad = |message: String| ModelError::Weights { path: file.to_path_buf(), message };
    if let Some((name, t)) = tensors.iter().find(|(_, t)| !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16)) {
        return Err(bad(format!("tensor {name} has dtype {:?}; expected f32, f16 or bf16", t.dtype())));
    }
    // Compare layer counts first: a config claiming far more layers than the file holds is
    // refused at once, before every missing name is listed.
    let present = weight_sets_present(tensors.keys());
    let needed = desc.weight_sets();
    if present != needed {
        let more = if present > needed { "more" } else { "fewer" };
        return Err(bad(format!("the weights have {more} layers ({present}) than config.json says ({needed})")));
    }
    for super::engine::Expected { name, shape, required } in super::engine::expected_tensors(desc) {
        match tensors.get(&name) {
            None if !required => {}
            None => return Err(bad(format!("missing tensor {name} (shape {shape:?} from config.json)"))),
            Some(t) if t.dims() != shape.as_slice() => {
                return Err(bad(format!("tensor {name} has shape {:?}, but config.json implies {shape:?}", t.dims())));
            }
            Some(_) => {}
        }
    }
    Ok(Weights::new(tensors, storage))
}

/// The decoder of an encoder–decoder model.
#[derive(Debug, Clone)]
pub struct Seq2SeqDecoder {
    /// The decoder stack (causal self-attention, cross-attention to the encoder).
    pub net: Network,
    /// The token the decoder's input starts with (`decoder_start_token_id`).
    pub start: u32,
}

/// Folder name of the embedded language model under `assets/models/`.
pub const SMOLLM2_NAME: &str = "SmolLM2-135M-Instruct";

/// Where the embedded `SmolLM2` folder is (beside the embedded `MiniLM`).
pub fn smollm2_dir() -> PathBuf {
    embedded_models().unwrap_or_else(|_| source_tree_models()).join(SMOLLM2_NAME)
}

/// The embedded models by their short names: `minilm` and `smollm2` (any case); the error when
/// one is asked for and they are not found.
fn embedded_model(spec: &Path) -> Result<Option<PathBuf>, ModelError> {
    let Some(name) = spec.to_str().map(str::to_ascii_lowercase) else { return Ok(None) };
    let folder = match name.as_str() {
        "minilm" | "all-minilm-l6-v2" if !spec.exists() => DEFAULT_MODEL_NAME,
        "smollm2" | "smollm2-135m-instruct" if !spec.exists() => SMOLLM2_NAME,
        _ => return Ok(None),
    };
    Ok(Some(embedded_models()?.join(folder)))
}

/// The one `.gguf` file of a folder, if it has exactly one.
fn single_gguf(dir: &Path) -> Option<PathBuf> {
    let mut found = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// `eos_token_id` (a number or a list) of `generation_config.json` when it has one (what
/// `generate` uses), else of `config.json`.
fn eos_ids(dir: &Path, config: &str) -> Vec<u32> {
    let ids = |text: &str| -> Option<Vec<u32>> {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        match value.get("eos_token_id")? {
            serde_json::Value::Number(n) => Some(n.as_u64().and_then(|n| u32::try_from(n).ok()).into_iter().collect()),
            serde_json::Value::Array(a) => {
                Some(a.iter().filter_map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())).collect())
            }
            _ => None,
        }
    };
    let generation = read_bounded(&dir.join("generation_config.json"), MAX_JSON_BYTES)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    generation.as_deref().and_then(ids).or_else(|| ids(config)).unwrap_or_default()
}

/// The number of `layer.{w}` weight sets among canonical names (one more than the largest `w`).
fn weight_sets_present<'a>(names: impl Iterator<Item = &'a String>) -> usize {
    names
        .filter_map(|n| n.strip_prefix("layer.")?.split_once('.')?.0.parse::<usize>().ok())
        .map(|w| w.saturating_add(1))
        .max()
        .unwrap_or(0)
}

impl LoadedModel {
    /// Loads a Hugging Face model folder (`config.json`, `tokenizer.json`, `model.safetensors` or
    /// its shards), a llama.cpp `.gguf` file (or a folder holding one and no `config.json`), an
    /// embedded model by name (`minilm`, `smollm2`), or a hub id found in the local Hugging Face
    /// cache.
    pub fn load(spec: &Path) -> Result<Self, ModelError> {
        Self::load_with(spec, None)
    }

    /// [`Self::load`], the weights held as `storage` says (None: [`WeightStorage::from_env`]):
    /// with [`WeightStorage::Stored`] GGUF matrices stay in their blocks, with
    /// [`WeightStorage::F32`] they are dequantised on load.
    pub fn load_with(spec: &Path, storage: Option<WeightStorage>) -> Result<Self, ModelError> {
        if let Some(embedded) = embedded_model(spec)? {
            return Self::load_with(&embedded, storage);
        }
        let storage = storage.unwrap_or_else(WeightStorage::from_env);
        if spec.is_file() && spec.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            return Self::load_gguf(spec, storage);
        }
        let resolved = super::hub::resolve(spec)?;
        let dir = resolved.as_path();
        if !dir.is_dir() {
            return Err(ModelError::NoFolder(dir.to_path_buf()));
        }
        if !present(&dir.join("config.json"))
            && let Some(file) = single_gguf(dir)
        {
            return Self::load_gguf(&file, storage);
        }
        let config_path = dir.join("config.json");
        if !present(&config_path) {
            return Err(ModelError::MissingFile {
                dir: dir.to_path_buf(),
                file: "config.json",
                hint: "is this a Hugging Face model folder?",
            });
        }
        let text = String::from_utf8(read_bounded(&config_path, MAX_JSON_BYTES)?)
            .map_err(|e| ModelError::Config(format!("config.json is not UTF-8 text: {e}")))?;
        let (family, desc, decoder) = families::describe_full(&text)?;
        let tokenizer_path = dir.join("tokenizer.json");
        if !present(&tokenizer_path) {
            return Err(missing_tokenizer(dir));
        }
        let files = weight_files(dir)?;
        let (weights, decoder_weights) =
            load_weights(dir, &files, (family, storage), &desc, decoder.as_ref().map(|d| &d.desc))?;
        let bad = |e: EngineError| ModelError::Weights { path: files[0].clone(), message: e.to_string() };
        let net = Network::load(&desc, weights).map_err(bad)?;
        let decoder = match (decoder, decoder_weights) {
            (Some(spec), Some(w)) => {
                Some(Seq2SeqDecoder { net: Network::load(&spec.desc, w).map_err(bad)?, start: spec.start })
            }
            _ => None,
        };
        let tokenizer = TextTokenizer::from_file(&tokenizer_path, desc.max_len)?;
        let name = super::hub::id_of(dir).unwrap_or_else(|| {
            dir.canonicalize()
                .ok()
                .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| dir.display().to_string())
        });
        let eos = eos_ids(dir, &text);
        Ok(Self { name, dir: dir.to_path_buf(), net, tokenizer, playground: false, eos, quantization: None, decoder })
    }

    /// Loads a GGUF file: matrices kept in their blocks ([`WeightStorage::Stored`]) or
    /// dequantised to f32, the tokenizer from `tokenizer.json` beside it or from the file's own
    /// vocabulary.
    pub fn load_gguf(path: &Path, storage: WeightStorage) -> Result<Self, ModelError> {
        let g = super::gguf::read(path, storage)?;
        let weights = if g.quantized.is_empty() {
            checked_weights(g.tensors, &g.desc, path, WeightStorage::F32)?
        } else {
            // (gguf::read checked every name and shape against the description.)
            Weights::with_quantized(g.tensors, g.quantized)
        };
        let net = Network::load(&g.desc, weights)
            .map_err(|e| ModelError::Weights { path: path.to_path_buf(), message: e.to_string() })?;
        let beside = path.with_file_name("tokenizer.json");
        let tokenizer = if g.tokenizer_json.is_empty() {
            TextTokenizer::from_file(&beside, g.desc.max_len)?
        } else {
            TextTokenizer::from_json(&g.tokenizer_json, g.desc.max_len)?
        };
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let quantization = Some(g.quantization);
        Ok(Self { name, dir, net, tokenizer, playground: false, eos: g.eos, quantization, decoder: None })
    }

    /// A model made in memory (the training lab's): `config.json`'s text, tensors under the
    /// checkpoint's names and `tokenizer.json`'s text, read through the same family mapping and
    /// checks as a folder. `dir` is where it would be saved (nothing is read from it).
    pub fn from_memory(
        name: &str,
        dir: &Path,
        config: &str,
        tensors: families::Tensors,
        tokenizer_json: &str,
    ) -> Result<Self, ModelError> {
        let (family, desc, _) = families::describe_full(config)?;
        let tensors = (family.canonical)(tensors, &desc)
            .map_err(|message| ModelError::Weights { path: dir.to_path_buf(), message })?;
        let weights = checked_weights(tensors, &desc, dir, WeightStorage::F32)?;
        let net = Network::load(&desc, weights)
            .map_err(|e| ModelError::Weights { path: dir.to_path_buf(), message: e.to_string() })?;
        let tokenizer = TextTokenizer::from_json(tokenizer_json, desc.max_len)?;
        Ok(Self {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            net,
            tokenizer,
            playground: false,
            eos: Vec::new(),
            quantization: None,
            decoder: None,
        })
    }

    /// The network's description.
    pub fn description(&self) -> &Description {
        self.net.description()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_counts_come_from_canonical_names() {
        let names: Vec<String> =
            ["embed.tokens.weight", "layer.0.q.weight", "layer.11.o.bias", "layer.x.q.weight"].map(String::from).into();
        assert_eq!(weight_sets_present(names.iter()), 12);
        assert_eq!(weight_sets_present(std::iter::empty()), 0);
    }

    #[test]
    fn folders_without_safetensors_are_refused_and_pickles_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(weight_files(dir.path()), Err(ModelError::MissingFile { .. })));
        std::fs::write(dir.path().join("pytorch_model.bin"), b"not loaded").unwrap();
        let err = weight_files(dir.path()).unwrap_err().to_string();
        assert!(err.contains("pytorch_model.bin") && err.contains("only safetensors"), "{err}");
    }
}
