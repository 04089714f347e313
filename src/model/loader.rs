//! A model folder → validated config, weights and tokenizer. All checks on untrusted files live here.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::ModelError;
use super::bert::{Arch, Bert, Capture, NormPlacement};
use super::config::{Config, Family};
use super::intervene::Interventions;
use super::tokenize::TextTokenizer;
use crate::analysis::{Attention, HeadVectors, Run, Tokens};

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
    /// The encoder.
    pub bert: Bert,
    /// The tokenizer.
    pub tokenizer: TextTokenizer,
    /// Whether this is the playground encoder (random weights), not a pretrained model.
    pub playground: bool,
}

fn read(path: &Path) -> Result<Vec<u8>, ModelError> {
    std::fs::read(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })
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

/// The safetensors files of a folder: `model.safetensors`, or the shards listed in its index.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = read(&index)?;
        let parsed: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| ModelError::Weights { path: index.clone(), message: e.to_string() })?;
        let shards: BTreeSet<String> = parsed["weight_map"]
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        if shards.is_empty() || shards.iter().any(|s| s.contains('/') || s.contains('\\') || s.starts_with('.')) {
            return Err(ModelError::Weights { path: index, message: "weight_map lists no usable shard files".into() });
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

/// Maps a checkpoint's tensor name to `BertModel`'s, or `None` for tensors the encoder does not use
/// (pooler, pre-training heads, the `position_ids` buffer).
fn canonical_name(name: &str) -> Option<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if !(name.starts_with("embeddings.") || name.starts_with("encoder.")) || name.ends_with("position_ids") {
        return None;
    }
    let name = if let Some(stem) = name.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = name.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        name.to_string()
    };
    Some(name)
}

/// A GPT-2 checkpoint name without its `transformer.` prefix, or `None` for tensors the decoder
/// does not use (the language-model head, the old checkpoints' causal-mask buffers).
fn gpt2_name(name: &str) -> Option<&str> {
    let name = name.strip_prefix("transformer.").unwrap_or(name);
    let used =
        name.starts_with("wte.") || name.starts_with("wpe.") || name.starts_with("h.") || name.starts_with("ln_f.");
    (used && !name.ends_with(".attn.bias") && !name.ends_with(".attn.masked_bias")).then_some(name)
}

/// GPT-2 tensors renamed to the BERT blocks they are wired into (pre-LN: `ln_1` is the attention
/// block's norm, `ln_2` the feed-forward's, `ln_f` the final norm). `Conv1D` weights are stored
/// `in × out`: they are transposed to `nn.Linear`'s `out × in`, and `c_attn` is split into query,
/// key and value.
fn gpt2_to_bert(tensors: HashMap<String, Tensor>, cfg: &Config) -> Result<HashMap<String, Tensor>, String> {
    let h = cfg.hidden_size;
    let mut out = HashMap::new();
    for (name, t) in tensors {
        let bad = |e: candle_core::Error| format!("tensor {name}: {e}");
        let transposed = |t: &Tensor| t.t().and_then(|t| t.contiguous()).map_err(bad);
        if let Some(rest) = name.strip_prefix("h.") {
            let (layer, rest) = rest.split_once('.').ok_or_else(|| format!("unexpected tensor {name}"))?;
            let p = format!("encoder.layer.{layer}");
            match rest {
                "ln_1.weight" | "ln_1.bias" => {
                    out.insert(format!("{p}.attention.output.LayerNorm.{}", &rest[5..]), t);
                }
                "ln_2.weight" | "ln_2.bias" => {
                    out.insert(format!("{p}.output.LayerNorm.{}", &rest[5..]), t);
                }
                "attn.c_attn.weight" | "attn.c_attn.bias" => {
                    let weight = rest.ends_with("weight");
                    let dim = usize::from(weight);
                    if t.dims().get(dim) != Some(&(3 * h)) {
                        return Err(format!(
                            "tensor {name} has shape {:?}; expected 3 × n_embd = {} wide",
                            t.dims(),
                            3 * h
                        ));
                    }
                    for (i, part) in ["query", "key", "value"].iter().enumerate() {
                        let piece = t.narrow(dim, i * h, h).map_err(bad)?;
                        let (piece, kind) = if weight { (transposed(&piece)?, "weight") } else { (piece, "bias") };
                        out.insert(format!("{p}.attention.self.{part}.{kind}"), piece);
                    }
                }
                "attn.c_proj.weight" => {
                    out.insert(format!("{p}.attention.output.dense.weight"), transposed(&t)?);
                }
                "attn.c_proj.bias" => {
                    out.insert(format!("{p}.attention.output.dense.bias"), t);
                }
                "mlp.c_fc.weight" => {
                    out.insert(format!("{p}.intermediate.dense.weight"), transposed(&t)?);
                }
                "mlp.c_fc.bias" => {
                    out.insert(format!("{p}.intermediate.dense.bias"), t);
                }
                "mlp.c_proj.weight" => {
                    out.insert(format!("{p}.output.dense.weight"), transposed(&t)?);
                }
                "mlp.c_proj.bias" => {
                    out.insert(format!("{p}.output.dense.bias"), t);
                }
                _ => {}
            }
        } else {
            let canon = match name.as_str() {
                "wte.weight" => "embeddings.word_embeddings.weight",
                "wpe.weight" => "embeddings.position_embeddings.weight",
                "ln_f.weight" => "final_norm.weight",
                "ln_f.bias" => "final_norm.bias",
                _ => continue,
            };
            out.insert(canon.to_string(), t);
        }
    }
    Ok(out)
}

/// Every tensor the model needs (BERT names), with its shape.
fn expected_tensors(cfg: &Config) -> Vec<(String, Vec<usize>)> {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let mut out = vec![
        ("embeddings.word_embeddings.weight".to_string(), vec![cfg.vocab_size, h]),
        ("embeddings.position_embeddings.weight".to_string(), vec![cfg.max_position_embeddings, h]),
    ];
    match cfg.family {
        Family::Bert => out.extend([
            ("embeddings.token_type_embeddings.weight".to_string(), vec![cfg.type_vocab_size, h]),
            ("embeddings.LayerNorm.weight".to_string(), vec![h]),
            ("embeddings.LayerNorm.bias".to_string(), vec![h]),
        ]),
        Family::Gpt2 => {
            out.extend([("final_norm.weight".to_string(), vec![h]), ("final_norm.bias".to_string(), vec![h])]);
        }
    }
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        for name in ["query", "key", "value"] {
            out.push((format!("{p}.attention.self.{name}.weight"), vec![h, h]));
            out.push((format!("{p}.attention.self.{name}.bias"), vec![h]));
        }
        out.push((format!("{p}.attention.output.dense.weight"), vec![h, h]));
        out.push((format!("{p}.attention.output.dense.bias"), vec![h]));
        out.push((format!("{p}.attention.output.LayerNorm.weight"), vec![h]));
        out.push((format!("{p}.attention.output.LayerNorm.bias"), vec![h]));
        out.push((format!("{p}.intermediate.dense.weight"), vec![i, h]));
        out.push((format!("{p}.intermediate.dense.bias"), vec![i]));
        out.push((format!("{p}.output.dense.weight"), vec![h, i]));
        out.push((format!("{p}.output.dense.bias"), vec![h]));
        out.push((format!("{p}.output.LayerNorm.weight"), vec![h]));
        out.push((format!("{p}.output.LayerNorm.bias"), vec![h]));
    }
    out
}

/// Reads and checks the weights against the config; every error names the file and tensor.
fn load_weights(files: &[PathBuf], cfg: &Config) -> Result<HashMap<String, Tensor>, ModelError> {
    let mut tensors = HashMap::new();
    for file in files {
        let bytes = read(file)?;
        let bad = |message: String| ModelError::Weights { path: file.clone(), message };
        let loaded = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| bad(e.to_string()))?;
        for (name, tensor) in loaded {
            let canon = match cfg.family {
                Family::Bert => canonical_name(&name),
                Family::Gpt2 => gpt2_name(&name).map(str::to_string),
            };
            if let Some(canon) = canon {
                if !matches!(tensor.dtype(), DType::F32 | DType::F16 | DType::BF16) {
                    return Err(bad(format!(
                        "tensor {name} has dtype {:?}; expected f32, f16 or bf16",
                        tensor.dtype()
                    )));
                }
                tensors.insert(canon, tensor);
            }
        }
    }
    let where_ = files.first().cloned().unwrap_or_default();
    let bad = |message: String| ModelError::Weights { path: where_.clone(), message };
    if cfg.family == Family::Gpt2 {
        tensors = gpt2_to_bert(tensors, cfg).map_err(bad)?;
    }
    for (name, shape) in expected_tensors(cfg) {
        match tensors.get(&name) {
            None => return Err(bad(format!("missing tensor {name} (shape {shape:?} from config.json)"))),
            Some(t) if t.dims() != shape.as_slice() => {
                return Err(bad(format!("tensor {name} has shape {:?}, but config.json implies {shape:?}", t.dims())));
            }
            Some(_) => {}
        }
    }
    let extra_layer = format!("encoder.layer.{}.", cfg.num_hidden_layers);
    if tensors.keys().any(|k| k.starts_with(&extra_layer)) {
        return Err(bad(format!(
            "the weights have more layers than num_hidden_layers = {} in config.json",
            cfg.num_hidden_layers
        )));
    }
    Ok(tensors)
}

impl LoadedModel {
    /// Loads a Hugging Face model folder: `config.json`, `tokenizer.json`, `model.safetensors`.
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        if !dir.is_dir() {
            return Err(ModelError::NoFolder(dir.to_path_buf()));
        }
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(ModelError::MissingFile {
                dir: dir.to_path_buf(),
                file: "config.json",
                hint: "is this a Hugging Face model folder?",
            });
        }
        let text = String::from_utf8(read(&config_path)?).map_err(|e| ModelError::Config(e.to_string()))?;
        let cfg = Config::from_json(&text)?;
        let tokenizer_path = dir.join("tokenizer.json");
        if !tokenizer_path.is_file() {
            return Err(ModelError::MissingFile {
                dir: dir.to_path_buf(),
                file: "tokenizer.json",
                hint: "save the fast tokenizer with tokenizer.save_pretrained(DIR)",
            });
        }
        let files = weight_files(dir)?;
        let tensors = load_weights(&files, &cfg)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let bert = match cfg.family {
            Family::Bert => Bert::load(&vb, &cfg),
            Family::Gpt2 => Bert::load_arch(&vb, &cfg, Arch { norm: NormPlacement::Pre, causal: true, ..Arch::bert() }),
        }
        .map_err(|e| ModelError::Weights { path: files[0].clone(), message: e.to_string() })?;
        let tokenizer = TextTokenizer::from_file(&tokenizer_path, cfg.max_position_embeddings)?;
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self { name, dir: dir.to_path_buf(), bert, tokenizer, playground: false })
    }

    /// The model's configuration.
    pub fn config(&self) -> &Config {
        self.bert.config()
    }

    /// Tokenizes and runs one input (sentence B optional), recording everything per head.
    pub fn run(&self, text: &str, pair: Option<&str>) -> Result<Run, ModelError> {
        self.run_with(text, pair, &Interventions::default())
    }

    /// Like [`Self::run`], with interventions on the forward pass.
    pub fn run_with(&self, text: &str, pair: Option<&str>, interventions: &Interventions) -> Result<Run, ModelError> {
        let encoded = self.tokenizer.encode(text, pair.filter(|p| !p.is_empty()))?;
        self.run_tokens(encoded.tokens, encoded.truncation, Capture::Full, interventions)
    }

    /// Runs already tokenized input.
    pub fn run_tokens(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<Run, ModelError> {
        let cfg = self.config();
        let seq_len = tokens.len();
        interventions.validate(cfg.num_hidden_layers, cfg.num_attention_heads).map_err(ModelError::Intervention)?;
        if seq_len == 0 {
            return Err(ModelError::Tokenizer("no tokens to run: type a sentence".into()));
        }
        if seq_len > cfg.max_position_embeddings {
            return Err(ModelError::Tokenizer(format!(
                "{seq_len} tokens exceed max_position_embeddings = {}",
                cfg.max_position_embeddings
            )));
        }
        if let Some(&id) = tokens.ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(ModelError::Tokenizer(format!(
                "token id {id} is outside the model's vocabulary (vocab_size = {}); tokenizer.json does not match the weights",
                cfg.vocab_size
            )));
        }
        if cfg.family == Family::Gpt2 && tokens.is_pair() {
            return Err(ModelError::Tokenizer(
                "a GPT-2-style model reads one text: untick Sentence B (or put both sentences in one)".into(),
            ));
        }
        if tokens.segments.iter().any(|&s| usize::from(s) >= cfg.type_vocab_size) {
            return Err(ModelError::Unsupported {
                field: "type_vocab_size".into(),
                value: cfg.type_vocab_size.to_string(),
                why: "this model has no segment embedding for sentence B; enter one sentence".into(),
            });
        }
        let type_ids: Vec<u32> = tokens.segments.iter().map(|&s| u32::from(s)).collect();
        let out = self.bert.forward(&tokens.ids, &type_ids, capture, interventions)?;
        let layers = interventions.first_layers.unwrap_or(cfg.num_hidden_layers);
        let (heads, head_dim) = (cfg.num_attention_heads, cfg.head_dim());
        let shape = |e: crate::analysis::ShapeError| ModelError::Inference(candle_core::Error::Msg(e.to_string()));
        let attention = Attention::new(layers, heads, seq_len, out.probs).map_err(shape)?;
        let neuron = if capture == Capture::Full {
            Some(crate::analysis::run::NeuronData {
                scores: Attention::new(layers, heads, seq_len, out.scores).map_err(shape)?,
                queries: HeadVectors::new(layers, heads, seq_len, head_dim, out.queries).map_err(shape)?,
                keys: HeadVectors::new(layers, heads, seq_len, head_dim, out.keys).map_err(shape)?,
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
            causal: self.bert.is_causal() || interventions.causal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_names_are_normalised() {
        assert_eq!(canonical_name("bert.embeddings.LayerNorm.gamma").as_deref(), Some("embeddings.LayerNorm.weight"));
        assert_eq!(
            canonical_name("encoder.layer.0.output.LayerNorm.beta").as_deref(),
            Some("encoder.layer.0.output.LayerNorm.bias")
        );
        assert_eq!(canonical_name("embeddings.position_ids"), None);
        assert_eq!(canonical_name("bert.pooler.dense.weight"), None);
        assert_eq!(canonical_name("cls.predictions.bias"), None);
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
