//! A model folder → validated config, weights and tokenizer. All checks on untrusted files live here.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::ModelError;
use super::describe::Description;
use super::engine::{Capture, EachLayer, EngineError, Input, LayerVisitor, Network, WeightStorage, Weights};
use super::families::{self, Family};
use super::intervene::Interventions;
use super::tokenize::TextTokenizer;
use crate::analysis::{Attention, DecoderRun, HeadVectors, Run, Tokens};

/// Folder name of the embedded default model under `assets/models/`.
pub const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// Where the embedded default model is: `$ATTNVIZ_MODEL` if set, else `assets/models/all-MiniLM-L6-v2`
/// next to the executable, two folders up from it (`target/release/`), or in the source tree.
pub fn default_model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ATTNVIZ_MODEL").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let rel = Path::new("assets").join("models").join(DEFAULT_MODEL_NAME);
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel);
    let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf));
    let candidates = exe_dir
        .iter()
        .flat_map(|d| [d.join(&rel), d.join("..").join("..").join(&rel)])
        .chain(std::iter::once(source_tree.clone()));
    candidates
        .into_iter()
        .find(|p| p.join("config.json").is_file())
        .map_or(source_tree, |p| p.canonicalize().unwrap_or(p))
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
    /// For weights read from a GGUF file: what they were, e.g. "GGUF `Q4_1` (210), `F32` (61),
    /// dequantised to f32". Attention is faithful to that file, not to the original model.
    pub quantization: Option<String>,
    /// For an encoder–decoder: the decoder (`net` is the encoder).
    pub decoder: Option<Seq2SeqDecoder>,
    /// Token ids that end a generated text (`eos_token_id` of `generation_config.json`, else of
    /// `config.json`).
    pub eos: Vec<u32>,
}

/// Largest `config.json`, `generation_config.json` or `model.safetensors.index.json` read: real ones
/// are a few kilobytes (a 70B model's index is about 60 KB).
pub const MAX_JSON_BYTES: u64 = 16 << 20;
/// Largest `tokenizer.json` read: the largest real ones (multilingual vocabularies) are about 35 MB.
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest safetensors header (the `safetensors` crate's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The length of a regular file; a device (`/dev/zero`), pipe or folder is refused before it is
/// opened (reading one would never end, or opening it would wait for a writer).
pub fn regular_file(path: &Path) -> Result<u64, ModelError> {
    let meta = std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    if !meta.is_file() {
        return Err(ModelError::Refused {
            path: path.to_path_buf(),
            message: "not a regular file (a device, pipe or folder)".into(),
        });
    }
    Ok(meta.len())
}

/// Reads a regular file of at most `max` bytes; a larger one is refused before it is read.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ModelError> {
    let too_big = |len: u64| ModelError::Refused {
        path: path.to_path_buf(),
        message: format!("it is {len} bytes; the limit for this file is {max} bytes"),
    };
    let len = regular_file(path)?;
    if len > max {
        return Err(too_big(len));
    }
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(len as usize);
    // `take`: a file that grows while it is read still stops at the limit.
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A safetensors file's header checked before its data is read: the header length against the
/// file, every tensor's shape against [`families::MAX_TENSOR_ELEMENTS`] and its `data_offsets`
/// against the data that follows. Returns the file's length. (The `safetensors` crate checks the
/// rest — dtypes, sizes matching shapes, no gaps — once the file is read.)
fn checked_safetensors_header(path: &Path) -> Result<u64, ModelError> {
    use serde_json::Value;
    let bad = |message: String| ModelError::Weights { path: path.to_path_buf(), message };
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let len = regular_file(path)?;
    if len < 8 {
        return Err(bad(format!("the file is {len} bytes, too short for a safetensors header")));
    }
    let mut file = File::open(path).map_err(io)?;
    let mut prefix = [0u8; 8];
    file.read_exact(&mut prefix).map_err(io)?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER_BYTES || header_len > len - 8 {
        return Err(bad(format!(
            "the header length field says {header_len} bytes, but the file has {} bytes after it (and the limit is {MAX_HEADER_BYTES})",
            len - 8
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io)?;
    let data_len = len - 8 - header_len;
    let parsed: Value = serde_json::from_slice(&header).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
    let Value::Object(entries) = parsed else { return Err(bad("the header is not a JSON object".into())) };
    let numbers = |v: Option<&Value>| -> Option<Vec<u64>> { v?.as_array()?.iter().map(Value::as_u64).collect() };
    let mut data_end = 0;
    for (name, entry) in entries.iter().filter(|(name, _)| *name != "__metadata__") {
        let Some(shape) = numbers(entry.get("shape")) else {
            return Err(bad(format!("tensor {name} has no shape (a list of whole numbers)")));
        };
        let count = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if count.is_none_or(|c| c > families::MAX_TENSOR_ELEMENTS as u64) {
            return Err(bad(format!("tensor {name} claims an implausible shape {shape:?}")));
        }
        let offsets = numbers(entry.get("data_offsets"));
        let Some(&[begin, end]) = offsets.as_deref() else {
            return Err(bad(format!("tensor {name} has no data_offsets [begin, end]")));
        };
        if begin > end || end > data_len {
            return Err(bad(format!(
                "tensor {name}: data_offsets [{begin}, {end}] point past the end of the file's {data_len} bytes of data"
            )));
        }
        data_end = data_end.max(end);
    }
    if data_end != data_len {
        return Err(bad(format!(
            "the file has {data_len} bytes of data, but its tensors end at byte {data_end} (a safetensors file ends with its last tensor)"
        )));
    }
    Ok(len)
}

/// The memory a load may use: `ATTNVIZ_MAX_MEMORY_GB` when set (`true`), else what the system
/// says can be allocated without swapping (`MemAvailable` of `/proc/meminfo`), else no limit.
pub(crate) fn memory_budget() -> Option<(u64, bool)> {
    let set = std::env::var("ATTNVIZ_MAX_MEMORY_GB").ok().and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(gb) = set.filter(|gb| gb.is_finite() && *gb >= 0.0) {
        return Some(((gb * f64::from(1u32 << 30)) as u64, true));
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.trim().strip_suffix("kB")?.trim();
    Some((kb.parse::<u64>().ok()?.saturating_mul(1024), false))
}

/// Refuses, before anything is read, a model whose weights as f32 (how the engine holds them, GGUF
/// dequantised) plus the weight files read alongside would not fit in the memory available.
/// Refused rather than warned about: past `MemAvailable` the load is either killed by the kernel
/// (taking the app and its state with it) or pushes the desktop into swap for minutes, and the
/// error keeps the model already open; `ATTNVIZ_MAX_MEMORY_GB` overrides the limit.
pub fn check_memory(what: &Path, desc: &Description, file_bytes: u64) -> Result<(), ModelError> {
    let Some((available_bytes, from_env)) = memory_budget() else { return Ok(()) };
    let weight_bytes = super::engine::weight_bytes(desc);
    let needed_bytes = weight_bytes.saturating_add(file_bytes);
    if needed_bytes <= available_bytes {
        return Ok(());
    }
    Err(ModelError::OutOfMemory {
        what: what.display().to_string(),
        needed_bytes,
        weight_bytes,
        file_bytes,
        available_bytes,
        from_env,
    })
}

/// Whether a folder entry is there at all (a file, or a link to a device or pipe that
/// [`regular_file`] refuses by name, rather than reading as missing).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
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
        let loaded = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
            .map_err(|e| bad(super::gguf::first_line(&e)))?;
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
    let default = default_model_dir();
    default.parent().map_or_else(|| PathBuf::from(SMOLLM2_NAME), |a| a.join(SMOLLM2_NAME))
}

/// The embedded models by their short names: `minilm` and `smollm2` (any case).
fn embedded_model(spec: &Path) -> Option<PathBuf> {
    let name = spec.to_str()?.to_ascii_lowercase();
    let default = default_model_dir();
    let assets = default.parent()?;
    match name.as_str() {
        "minilm" | "all-minilm-l6-v2" if !spec.exists() => Some(assets.join(DEFAULT_MODEL_NAME)),
        "smollm2" | "smollm2-135m-instruct" if !spec.exists() => Some(assets.join(SMOLLM2_NAME)),
        _ => None,
    }
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

    /// [`Self::load`], the weights held as `storage` says (None: [`WeightStorage::from_env`]).
    /// GGUF weights are dequantised to f32.
    pub fn load_with(spec: &Path, storage: Option<WeightStorage>) -> Result<Self, ModelError> {
        if let Some(embedded) = embedded_model(spec) {
            return Self::load_with(&embedded, storage);
        }
        if spec.is_file() && spec.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            return Self::load_gguf(spec);
        }
        let resolved = super::hub::resolve(spec)?;
        let dir = resolved.as_path();
        if !dir.is_dir() {
            return Err(ModelError::NoFolder(dir.to_path_buf()));
        }
        if !present(&dir.join("config.json")) {
            if let Some(file) = single_gguf(dir) {
                return Self::load_gguf(&file);
            }
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
        let storage = storage.unwrap_or_else(WeightStorage::from_env);
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

    /// Loads a GGUF file: weights dequantised to f32, the tokenizer from `tokenizer.json` beside
    /// it or from the file's own vocabulary.
    pub fn load_gguf(path: &Path) -> Result<Self, ModelError> {
        let g = super::gguf::read(path)?;
        let weights = checked_weights(g.tensors, &g.desc, path, WeightStorage::F32)?;
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

    /// The network's description.
    pub fn description(&self) -> &Description {
        self.net.description()
    }

    /// Tokenizes and runs one input (sentence B optional), recording everything per head.
    pub fn run(&self, text: &str, pair: Option<&str>) -> Result<Run, ModelError> {
        self.run_with(text, pair, &Interventions::default())
    }

    /// Like [`Self::run`], with interventions on the forward pass.
    pub fn run_with(&self, text: &str, pair: Option<&str>, interventions: &Interventions) -> Result<Run, ModelError> {
        let (encoded, _) = self.encode_recordable(text, pair.filter(|p| !p.is_empty()))?;
        self.run_tokens(encoded.tokens, encoded.truncation, Capture::Full, interventions)
    }

    /// Tokenizes an input cut to the model's positions and to what a recorded run of it fits in
    /// the memory available ([`Self::token_limit`]), with a notice when cut; also that memory
    /// limit, when there is one (a generation stops there).
    pub fn encode_recordable(
        &self,
        text: &str,
        pair: Option<&str>,
    ) -> Result<(super::tokenize::Encoded, Option<usize>), ModelError> {
        self.encode_recordable_within(text, pair, None)
    }

    /// [`Self::encode_recordable`], also cut to `max_tokens` when that is fewer (the app's
    /// "Record up to", for a generation's prompt); the memory limit returned is the memory's.
    pub fn encode_recordable_within(
        &self,
        text: &str,
        pair: Option<&str>,
        max_tokens: Option<usize>,
    ) -> Result<(super::tokenize::Encoded, Option<usize>), ModelError> {
        let memory = self.token_limit(memory_budget().map(|(bytes, _)| bytes));
        let mut limit = memory.clone();
        if let Some(max) = max_tokens.filter(|&m| m < memory.as_ref().map_or(self.description().max_len, |l| l.0)) {
            let why = format!(
                "a generation records every head of prompt and continuation at token level, up to “Record up to”, {max} tokens"
            );
            limit = Some((max.max(1), why));
        }
        let encoded = self.tokenizer.encode_within(text, pair, limit.as_ref().map(|(n, why)| (*n, why.as_str())))?;
        Ok((encoded, memory.map(|(n, _)| n)))
    }

    /// The most tokens a recorded run (every layer × head's probabilities and scores, q and k) fits
    /// in a third of `available` bytes — the app holds the run shown, the one being computed and
    /// what its views derive — when that is fewer than the model's positions: `(tokens, why)`.
    /// Longer inputs are cut there with that notice instead of failing to allocate (SmolLM2's 8,192
    /// positions would record 145 GB); `attnviz dump` streams and is not limited.
    pub fn token_limit(&self, available: Option<u64>) -> Option<(usize, String)> {
        let budget = available? / 3;
        let d = self.description();
        let terms = self.net.score_terms().len() as u64;
        let (layers, heads, hd) = (d.layers as u64, d.heads as u64, d.head_dim as u64);
        let bytes = |n: u64| {
            let per_head = (2 + terms).saturating_mul(n).saturating_mul(n).saturating_add(2 * n * hd);
            layers.saturating_mul(heads).saturating_mul(per_head).saturating_mul(4)
        };
        // The largest n ≤ max_len whose recording fits: bytes(n) grows with n.
        let (mut lo, mut hi) = (0u64, d.max_len as u64);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if bytes(mid) <= budget { lo = mid } else { hi = mid - 1 }
        }
        let n = lo as usize;
        (n < d.max_len).then(|| {
            let gb = |b: u64| b as f64 / f64::from(1u32 << 30);
            (
                n.max(1),
                format!(
                    "recording all {} layers × {} heads of attention for more would take over {:.1} GB, a third of the {:.1} GB of memory available; `attnviz dump` streams longer inputs",
                    d.layers,
                    d.heads,
                    gb(budget),
                    gb(available.unwrap_or(0))
                ),
            )
        })
    }

    /// Runs an encoder–decoder: the encoder on `source`, and with a `target` the decoder on what
    /// it reads when it writes that target (`decoder_start_token_id`, then the target's tokens
    /// with their special tokens), recording its self- and cross-attention in `run.decoder`.
    pub fn run_seq2seq(&self, source: &str, target: Option<&str>) -> Result<Run, ModelError> {
        let mut run = self.run(source, None)?;
        if let Some(target) = target {
            let (tokens, truncation) = self.decoder_input(target)?;
            run.decoder = Some(self.run_decoder(tokens, truncation, &run.last_hidden)?);
        }
        Ok(run)
    }

    /// The decoder's input for a target text: the start token, then the target's tokens, cut to
    /// the decoder's positions with a notice.
    pub fn decoder_input(&self, target: &str) -> Result<(Tokens, Option<String>), ModelError> {
        let decoder = self.seq2seq()?;
        let encoded = self.tokenizer.encode(target, None)?;
        let mut t = encoded.tokens;
        let room = decoder.net.description().max_len.saturating_sub(1);
        let truncation = (t.len() > room).then(|| {
            format!(
                "target truncated to {room} tokens (the decoder's maximum with its start token); it had {}",
                t.len()
            )
        });
        t.ids.truncate(room);
        t.tokens.truncate(room);
        t.segments.truncate(room);
        t.type_ids.truncate(room);
        t.special.truncate(room);
        t.ids.insert(0, decoder.start);
        t.tokens.insert(0, self.tokenizer.token_of(decoder.start));
        t.segments.insert(0, 0);
        t.type_ids.insert(0, 0);
        t.special.insert(0, true);
        Ok((t, truncation))
    }

    /// The decoder of an encoder–decoder, or an error saying this model has none.
    pub fn seq2seq(&self) -> Result<&Seq2SeqDecoder, ModelError> {
        self.decoder.as_ref().ok_or_else(|| {
            ModelError::Tokenizer(format!("{} is not an encoder–decoder: it has no target side", self.name))
        })
    }

    /// Runs the decoder on `tokens` attending to the encoder's output.
    pub fn run_decoder(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        encoder_hidden: &[f32],
    ) -> Result<DecoderRun, ModelError> {
        let decoder = self.seq2seq()?;
        let desc = decoder.net.description();
        if let Some(&id) = tokens.ids.iter().find(|&&id| id as usize >= desc.vocab_size) {
            return Err(ModelError::Tokenizer(format!("token id {id} is outside the decoder's vocabulary")));
        }
        let out = decoder.net.forward_decoder(&tokens.ids, encoder_hidden)?;
        let n = tokens.len();
        let sources = encoder_hidden.len() / desc.hidden.max(1);
        let shape = |e: crate::analysis::ShapeError| ModelError::Inference(candle_core::Error::Msg(e.to_string()));
        Ok(DecoderRun {
            attention: Attention::new(desc.layers, desc.heads, n, out.probs).map_err(shape)?,
            cross: Attention::rectangular(desc.layers, desc.heads, n, sources, out.cross).map_err(shape)?,
            last_hidden: out.last_hidden,
            tokens,
            truncation,
        })
    }

    /// Checks tokenized input (and interventions) against the model: what a run refuses.
    pub fn check_tokens(&self, tokens: &Tokens, interventions: &Interventions) -> Result<(), ModelError> {
        let desc = self.description();
        let seq_len = tokens.len();
        interventions.validate(desc.layers, desc.heads).map_err(ModelError::Intervention)?;
        if seq_len == 0 {
            return Err(ModelError::Tokenizer("no tokens to run: type a sentence".into()));
        }
        if seq_len > desc.max_len {
            return Err(ModelError::Tokenizer(format!(
                "{seq_len} tokens exceed the model's {} positions",
                desc.max_len
            )));
        }
        if let Some(&id) = tokens.ids.iter().find(|&&id| id as usize >= desc.vocab_size) {
            return Err(ModelError::Tokenizer(format!(
                "token id {id} is outside the model's vocabulary (vocab_size = {}); tokenizer.json does not match the weights",
                desc.vocab_size
            )));
        }
        if !desc.reads_pairs && tokens.is_pair() {
            let what = if self.decoder.is_some() {
                "an encoder–decoder reads one source text (its target goes in the Target box)"
            } else {
                "a language model reads one text"
            };
            return Err(ModelError::Tokenizer(format!("{what}: untick Sentence B (or put both sentences in one)")));
        }
        let types = desc.embedding.token_types;
        if desc.reads_token_types && types > 0 && tokens.type_ids.iter().any(|&t| t as usize >= types) {
            return Err(ModelError::Unsupported {
                field: "type_vocab_size".into(),
                value: types.to_string(),
                why: "this model has no segment embedding for sentence B; enter one sentence".into(),
            });
        }
        Ok(())
    }

    /// Runs already tokenized input like [`Self::run_tokens`] without holding every layer's
    /// attention: each layer's (`heads × n × n`) is handed to `visit(layer, probs)` as soon as it
    /// is computed, then overwritten by the next. Returns the last hidden state.
    pub fn stream_layers(
        &self,
        tokens: &Tokens,
        interventions: &Interventions,
        visit: &mut LayerVisitor<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(tokens, interventions)?;
        let input = Input::new(&tokens.ids, &tokens.type_ids, interventions);
        Ok(self.net.run(input, &mut EachLayer::new(visit))?)
    }

    /// Runs already tokenized input keeping only the residual stream entering each layer: any
    /// layer's or head's attention is then computed on demand with
    /// [`Network::layer_attention`], exactly as [`Self::run_tokens`] records it.
    pub fn run_streams(&self, tokens: &Tokens, interventions: &Interventions) -> Result<super::Streams, ModelError> {
        self.check_tokens(tokens, interventions)?;
        Ok(self.net.forward_streams(&tokens.ids, &tokens.type_ids, interventions)?)
    }

    /// Runs already tokenized input.
    pub fn run_tokens(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<Run, ModelError> {
        self.check_tokens(&tokens, interventions)?;
        let desc = self.description();
        let seq_len = tokens.len();
        let out = self.net.forward(&tokens.ids, &tokens.type_ids, capture, interventions)?;
        let layers = interventions.first_layers.unwrap_or(desc.layers);
        let (heads, head_dim) = (desc.heads, desc.head_dim);
        let shape = |e: crate::analysis::ShapeError| ModelError::Inference(candle_core::Error::Msg(e.to_string()));
        let attention = Attention::new(layers, heads, seq_len, out.probs).map_err(shape)?;
        let neuron = if capture == Capture::Full {
            let per_term = layers * heads * seq_len * seq_len;
            let terms = self
                .net
                .score_terms()
                .into_iter()
                .zip(out.terms.chunks(per_term.max(1)))
                .map(|(name, values)| Ok((name.to_string(), Attention::new(layers, heads, seq_len, values.to_vec())?)))
                .collect::<Result<Vec<_>, crate::analysis::ShapeError>>()
                .map_err(shape)?;
            Some(crate::analysis::run::NeuronData {
                scores: Attention::new(layers, heads, seq_len, out.scores).map_err(shape)?,
                terms,
                queries: HeadVectors::new(layers, heads, seq_len, head_dim, out.queries).map_err(shape)?,
                keys: HeadVectors::new(layers, heads, seq_len, head_dim, out.keys).map_err(shape)?,
                rotated: desc.rotary.is_some(),
            })
        } else {
            None
        };
        Ok(Run {
            model_name: self.name.clone(),
            tokens,
            attention,
            neuron,
            last_hidden: out.last_hidden,
            truncation,
            intervention: interventions.describe(),
            playground: self.playground,
            causal: self.net.is_causal() || interventions.causal,
            window: desc.sliding_window,
            prompt_len: None,
            decoder: None,
            key_tokens: None,
            stack: None,
            long: None,
        })
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
