//! A trained network as a model folder in transformers' layouts — the decoder as GPT-2
//! (`GPT2LMHeadModel`, the head not tied), the post-LN classifier as BERT (`BertModel`, plus a
//! `classifier` layer), the pre-LN classifier as BERT's tensors under `model_type`
//! "attnviz-pre-ln-bert" — and the same tensors handed to attnviz's engine, so every view shows
//! the network being trained through the loader any saved folder goes through.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Tensor};
use serde_json::{Value, json};

use super::TrainError;
use super::config::{Pooling, TrainConfig};
use super::net::{BERT_NORM_EPS, NORM_EPS, Net};
use super::tasks::{CLS, PAD, Task, UNK};
use crate::model::playground::PeKind;
use crate::model::{LoadedModel, NormPlacement};

/// A network in a checkpoint's form: `config.json`, tensors by name, `tokenizer.json`.
#[derive(Debug)]
pub struct Exported {
    /// `config.json`.
    pub config: Value,
    /// Tensors under the layout's names (f32, contiguous).
    pub tensors: HashMap<String, Tensor>,
    /// `tokenizer.json`.
    pub tokenizer: Value,
}

/// The network's tensors and files.
pub fn export(net: &Net) -> candle_core::Result<Exported> {
    let task = Task::new(&net.cfg);
    let get = |name: &str| -> candle_core::Result<Tensor> { net.get(name)?.to_dtype(DType::F32) };
    let t = |x: Tensor| -> candle_core::Result<Tensor> { x.t()?.contiguous() };
    let (cfg, d) = (&net.cfg, net.cfg.d_model);
    let mut out = HashMap::new();
    let positions = net.position_table()?.to_dtype(DType::F32)?;
    let zeros = |shape: &[usize]| Tensor::zeros(shape, DType::F32, &candle_core::Device::Cpu);
    let ones = |n: usize| Tensor::ones(n, DType::F32, &candle_core::Device::Cpu);
    // An attention-only network keeps GPT-2's MLP with zero weights (its output is exactly 0).
    let ff = cfg.mlp.max(1);
    let config = if cfg.task.is_classifier() {
        let p = "bert.";
        out.insert(format!("{p}embeddings.word_embeddings.weight"), get("tok")?);
        out.insert(format!("{p}embeddings.position_embeddings.weight"), positions);
        out.insert(format!("{p}embeddings.token_type_embeddings.weight"), zeros(&[1, d])?);
        out.insert(format!("{p}embeddings.LayerNorm.weight"), get("emb_ln.w")?);
        out.insert(format!("{p}embeddings.LayerNorm.bias"), get("emb_ln.b")?);
        for l in 0..cfg.layers {
            let (src, dst) = (format!("h.{l}"), format!("{p}encoder.layer.{l}"));
            let (w, b) = (get(&format!("{src}.qkv.w"))?, get(&format!("{src}.qkv.b"))?);
            for (i, part) in ["query", "key", "value"].iter().enumerate() {
                out.insert(format!("{dst}.attention.self.{part}.weight"), t(w.narrow(1, i * d, d)?)?);
                out.insert(format!("{dst}.attention.self.{part}.bias"), b.narrow(0, i * d, d)?.contiguous()?);
            }
            out.insert(format!("{dst}.attention.output.dense.weight"), t(get(&format!("{src}.o.w"))?)?);
            out.insert(format!("{dst}.attention.output.dense.bias"), get(&format!("{src}.o.b"))?);
            out.insert(format!("{dst}.attention.output.LayerNorm.weight"), get(&format!("{src}.ln1.w"))?);
            out.insert(format!("{dst}.attention.output.LayerNorm.bias"), get(&format!("{src}.ln1.b"))?);
            let (up, up_b, down, down_b, ln_w, ln_b) = if cfg.mlp > 0 {
                (
                    t(get(&format!("{src}.up.w"))?)?,
                    get(&format!("{src}.up.b"))?,
                    t(get(&format!("{src}.down.w"))?)?,
                    get(&format!("{src}.down.b"))?,
                    get(&format!("{src}.ln2.w"))?,
                    get(&format!("{src}.ln2.b"))?,
                )
            } else {
                (zeros(&[1, d])?, zeros(&[1])?, zeros(&[d, 1])?, zeros(&[d])?, ones(d)?, zeros(&[d])?)
            };
            out.insert(format!("{dst}.intermediate.dense.weight"), up);
            out.insert(format!("{dst}.intermediate.dense.bias"), up_b);
            out.insert(format!("{dst}.output.dense.weight"), down);
            out.insert(format!("{dst}.output.dense.bias"), down_b);
            out.insert(format!("{dst}.output.LayerNorm.weight"), ln_w);
            out.insert(format!("{dst}.output.LayerNorm.bias"), ln_b);
        }
        if net.final_norm() {
            out.insert(format!("{p}encoder.LayerNorm.weight"), get("ln_f.w")?);
            out.insert(format!("{p}encoder.LayerNorm.bias"), get("ln_f.b")?);
        }
        out.insert("classifier.weight".into(), t(get("head.w")?)?);
        out.insert("classifier.bias".into(), get("head.b")?);
        let pre = cfg.norm == NormPlacement::Pre;
        json!({
            "model_type": if pre { "attnviz-pre-ln-bert" } else { "bert" },
            "architectures": [if pre { "AttnvizPreLnBertClassifier" } else { "BertModel" }],
            "vocab_size": net.vocab,
            "hidden_size": d,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "intermediate_size": ff,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": net.positions,
            "type_vocab_size": 1,
            "layer_norm_eps": BERT_NORM_EPS,
            "position_embedding_type": "absolute",
            "pad_token_id": 0,
            "torch_dtype": "float32",
            "num_labels": 2,
            "id2label": {"0": "negative", "1": "positive"},
            "label2id": {"negative": 0, "positive": 1},
            "attnviz_pooling": cfg.pooling.name(),
        })
    } else {
        let p = "transformer.";
        out.insert(format!("{p}wte.weight"), get("tok")?);
        out.insert(format!("{p}wpe.weight"), positions);
        for l in 0..cfg.layers {
            let (src, dst) = (format!("h.{l}"), format!("{p}h.{l}"));
            out.insert(format!("{dst}.ln_1.weight"), get(&format!("{src}.ln1.w"))?);
            out.insert(format!("{dst}.ln_1.bias"), get(&format!("{src}.ln1.b"))?);
            out.insert(format!("{dst}.attn.c_attn.weight"), get(&format!("{src}.qkv.w"))?);
            out.insert(format!("{dst}.attn.c_attn.bias"), get(&format!("{src}.qkv.b"))?);
            out.insert(format!("{dst}.attn.c_proj.weight"), get(&format!("{src}.o.w"))?);
            out.insert(format!("{dst}.attn.c_proj.bias"), get(&format!("{src}.o.b"))?);
            let (ln_w, ln_b, up, up_b, down, down_b) = if cfg.mlp > 0 {
                (
                    get(&format!("{src}.ln2.w"))?,
                    get(&format!("{src}.ln2.b"))?,
                    get(&format!("{src}.up.w"))?,
                    get(&format!("{src}.up.b"))?,
                    get(&format!("{src}.down.w"))?,
                    get(&format!("{src}.down.b"))?,
                )
            } else {
                (ones(d)?, zeros(&[d])?, zeros(&[d, 1])?, zeros(&[1])?, zeros(&[1, d])?, zeros(&[d])?)
            };
            out.insert(format!("{dst}.ln_2.weight"), ln_w);
            out.insert(format!("{dst}.ln_2.bias"), ln_b);
            out.insert(format!("{dst}.mlp.c_fc.weight"), up);
            out.insert(format!("{dst}.mlp.c_fc.bias"), up_b);
            out.insert(format!("{dst}.mlp.c_proj.weight"), down);
            out.insert(format!("{dst}.mlp.c_proj.bias"), down_b);
        }
        out.insert(format!("{p}ln_f.weight"), get("ln_f.w")?);
        out.insert(format!("{p}ln_f.bias"), get("ln_f.b")?);
        out.insert("lm_head.weight".into(), t(get("head.w")?)?);
        json!({
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": net.vocab,
            "n_positions": net.positions,
            "n_ctx": net.positions,
            "n_embd": d,
            "n_layer": cfg.layers,
            "n_head": cfg.heads,
            "n_inner": ff,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": NORM_EPS,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "scale_attn_weights": true,
            "scale_attn_by_inverse_layer_idx": false,
            "reorder_and_upcast_attn": false,
            "tie_word_embeddings": false,
            // GPT2Config's defaults (50256, GPT-2's <|endoftext|>) are past this vocabulary.
            "bos_token_id": null,
            "eos_token_id": null,
            "use_cache": true,
            "torch_dtype": "float32",
        })
    };
    Ok(Exported { config, tensors: out, tokenizer: tokenizer_json(&task, net.cfg.pooling) })
}

/// What a folder the lab saved tells the app beyond its model: the text to suggest and the words
/// the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderHints {
    /// The task's probe (`training.json`'s `probe`, else the task's own): text made of the
    /// vocabulary that shows what the network learned.
    pub probe: String,
    /// The vocabulary's words, special tokens left out, in id order.
    pub words: Vec<String>,
    /// Whether the tokenizer lower-cases and splits at punctuation (the sentence task's), else it
    /// splits at white space only.
    pub sentences: bool,
}

impl FolderHints {
    /// The vocabulary named for a notice: every word up to 24, else the first twelve, "…", the
    /// last two and the count.
    pub fn alphabet(&self) -> String {
        let w = &self.words;
        if w.len() <= 24 {
            w.join(" ")
        } else {
            format!("{} … {} ({} words)", w[..12].join(" "), w[w.len() - 2..].join(" "), w.len())
        }
    }

    /// How many of `text`'s words the tokenizer turns into `[UNK]`, split as it splits them
    /// ([`tokenizer_json`]: at white space, or lower-cased into runs of word characters and of
    /// punctuation).
    pub fn unknown_words(&self, text: &str) -> usize {
        let known = |w: &str| self.words.iter().any(|v| v == w);
        if !self.sentences {
            return text.split_whitespace().filter(|w| !known(w)).count();
        }
        let lower = text.to_lowercase();
        let mut unknown = 0;
        for word in lower.split_whitespace() {
            let mut start = 0;
            let chars: Vec<(usize, char)> = word.char_indices().collect();
            for (i, &(at, c)) in chars.iter().enumerate() {
                let next = chars.get(i + 1).map(|&(_, n)| n);
                let wordy = |c: char| c.is_alphanumeric() || c == '_';
                if next.is_none_or(|n| wordy(n) != wordy(c)) {
                    let end = at + c.len_utf8();
                    unknown += usize::from(!known(&word[start..end]));
                    start = end;
                }
            }
        }
        unknown
    }
}

/// The hints of a folder [`save`] wrote (None for any other folder, or one whose `training.json`
/// does not read).
pub fn hints(dir: &Path) -> Option<FolderHints> {
    let training: Value = serde_json::from_slice(&std::fs::read(dir.join("training.json")).ok()?).ok()?;
    let cfg: TrainConfig = serde_json::from_value(training.get("config")?.clone()).ok()?;
    cfg.validate().ok()?;
    let task = Task::new(&cfg);
    let probe = training.get("probe").and_then(Value::as_str).map_or_else(|| task.probe(), String::from);
    let words = task.vocab.iter().filter(|w| ![PAD, UNK, CLS].contains(&w.as_str())).cloned().collect();
    Some(FolderHints { probe, words, sentences: cfg.task.is_classifier() })
}

/// A folder [`save`] wrote, back as the network it was: `training.json`'s settings, the weights
/// from `model.safetensors` through the inverse of [`export`]'s names and layouts.
pub fn load(dir: &Path) -> Result<Net, TrainError> {
    let fail = |message: String| TrainError::Load { path: dir.to_path_buf(), message };
    let training = std::fs::read(dir.join("training.json")).map_err(|e| fail(format!("training.json: {e}")))?;
    let training: Value = serde_json::from_slice(&training).map_err(|e| fail(format!("training.json: {e}")))?;
    let cfg: TrainConfig = serde_json::from_value(training["config"].clone())
        .map_err(|e| fail(format!("training.json has no valid \"config\": {e}")))?;
    cfg.validate()?;
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu)
        .map_err(|e| fail(format!("model.safetensors: {e}")))?;
    let net = Net::new(&cfg, DType::F32)?;
    let get = |name: &str| -> Result<Tensor, TrainError> {
        Ok(tensors.get(name).ok_or_else(|| fail(format!("model.safetensors has no {name}")))?.to_dtype(DType::F32)?)
    };
    let t = |x: Tensor| -> Result<Tensor, TrainError> { Ok(x.t()?.contiguous()?) };
    let set = |param: &str, value: Tensor| -> Result<(), TrainError> {
        let var = net.var(param)?;
        if var.dims() != value.dims() {
            return Err(fail(format!(
                "{param}: the file's tensor is {:?}, the settings make it {:?}",
                value.dims(),
                var.dims()
            )));
        }
        Ok(var.set(&value)?)
    };
    let learned = cfg.pe == PeKind::Learned;
    if cfg.task.is_classifier() {
        let p = "bert.";
        set("tok", get(&format!("{p}embeddings.word_embeddings.weight"))?)?;
        if learned {
            set("pos", get(&format!("{p}embeddings.position_embeddings.weight"))?)?;
        }
        set("emb_ln.w", get(&format!("{p}embeddings.LayerNorm.weight"))?)?;
        set("emb_ln.b", get(&format!("{p}embeddings.LayerNorm.bias"))?)?;
        for l in 0..cfg.layers {
            let (dst, src) = (format!("h.{l}"), format!("{p}encoder.layer.{l}"));
            let part = |name: &str, what: &str| get(&format!("{src}.attention.self.{name}.{what}"));
            let parts = ["query", "key", "value"];
            let w = parts.iter().map(|n| t(part(n, "weight")?)).collect::<Result<Vec<_>, _>>()?;
            let b = parts.iter().map(|n| part(n, "bias")).collect::<Result<Vec<_>, _>>()?;
            set(&format!("{dst}.qkv.w"), Tensor::cat(&w, 1)?)?;
            set(&format!("{dst}.qkv.b"), Tensor::cat(&b, 0)?)?;
            set(&format!("{dst}.o.w"), t(get(&format!("{src}.attention.output.dense.weight"))?)?)?;
            set(&format!("{dst}.o.b"), get(&format!("{src}.attention.output.dense.bias"))?)?;
            set(&format!("{dst}.ln1.w"), get(&format!("{src}.attention.output.LayerNorm.weight"))?)?;
            set(&format!("{dst}.ln1.b"), get(&format!("{src}.attention.output.LayerNorm.bias"))?)?;
            if cfg.mlp > 0 {
                set(&format!("{dst}.up.w"), t(get(&format!("{src}.intermediate.dense.weight"))?)?)?;
                set(&format!("{dst}.up.b"), get(&format!("{src}.intermediate.dense.bias"))?)?;
                set(&format!("{dst}.down.w"), t(get(&format!("{src}.output.dense.weight"))?)?)?;
                set(&format!("{dst}.down.b"), get(&format!("{src}.output.dense.bias"))?)?;
                set(&format!("{dst}.ln2.w"), get(&format!("{src}.output.LayerNorm.weight"))?)?;
                set(&format!("{dst}.ln2.b"), get(&format!("{src}.output.LayerNorm.bias"))?)?;
            }
        }
        if net.final_norm() {
            set("ln_f.w", get(&format!("{p}encoder.LayerNorm.weight"))?)?;
            set("ln_f.b", get(&format!("{p}encoder.LayerNorm.bias"))?)?;
        }
        set("head.w", t(get("classifier.weight")?)?)?;
        set("head.b", get("classifier.bias")?)?;
    } else {
        let p = "transformer.";
        set("tok", get(&format!("{p}wte.weight"))?)?;
        if learned {
            set("pos", get(&format!("{p}wpe.weight"))?)?;
        }
        for l in 0..cfg.layers {
            let (dst, src) = (format!("h.{l}"), format!("{p}h.{l}"));
            let mut pairs = vec![("ln1", "ln_1"), ("qkv", "attn.c_attn"), ("o", "attn.c_proj")];
            if cfg.mlp > 0 {
                pairs.extend([("ln2", "ln_2"), ("up", "mlp.c_fc"), ("down", "mlp.c_proj")]);
            }
            for (ours, theirs) in pairs {
                set(&format!("{dst}.{ours}.w"), get(&format!("{src}.{theirs}.weight"))?)?;
                set(&format!("{dst}.{ours}.b"), get(&format!("{src}.{theirs}.bias"))?)?;
            }
        }
        set("ln_f.w", get(&format!("{p}ln_f.weight"))?)?;
        set("ln_f.b", get(&format!("{p}ln_f.bias"))?)?;
        set("head.w", t(get("lm_head.weight")?)?)?;
    }
    Ok(net)
}

/// A word-level `tokenizer.json` spelling the task's vocabulary: words split at spaces (the review
/// language also at punctuation, lower-cased), unknown words `[UNK]`; the `[CLS]` classifier's
/// input starts with `[CLS]`.
pub fn tokenizer_json(task: &Task, pooling: Pooling) -> Value {
    let vocab: serde_json::Map<String, Value> =
        task.vocab.iter().enumerate().map(|(i, w)| (w.clone(), json!(i))).collect();
    let special = |w: &str| task.vocab.iter().position(|v| v == w);
    let added: Vec<Value> = [PAD, UNK, CLS]
        .iter()
        .filter_map(|w| {
            special(w).map(|id| {
                json!({"id": id, "content": w, "single_word": false, "lstrip": false, "rstrip": false,
                       "normalized": false, "special": true})
            })
        })
        .collect();
    let sentences = task.kind.is_classifier();
    let post = match (sentences && pooling == Pooling::Cls, special(CLS)) {
        (true, Some(id)) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": CLS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": CLS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}],
            "special_tokens": {CLS: {"id": CLS, "ids": [id], "tokens": [CLS]}}
        }),
        _ => Value::Null,
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": if sentences { json!({"type": "Lowercase"}) } else { Value::Null },
        "pre_tokenizer": if sentences { json!({"type": "Whitespace"}) } else { json!({"type": "WhitespaceSplit"}) },
        "post_processor": post,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNK}
    })
}

/// The network as a model attnviz shows (through the same family mapping and checks as a saved
/// folder), named `name`.
pub fn to_model(net: &Net, name: &str, dir: &Path) -> Result<LoadedModel, TrainError> {
    let e = export(net)?;
    Ok(LoadedModel::from_memory(name, dir, &e.config.to_string(), e.tensors, &e.tokenizer.to_string())?)
}

/// Writes the model folder `dir` (`config.json`, `model.safetensors`, `tokenizer.json`,
/// `training.json`): all in a new folder beside it, renamed into place when complete, so `dir` is
/// either the old folder or the new one.
pub fn save(net: &Net, training: &Value, dir: &Path) -> Result<PathBuf, TrainError> {
    let e = export(net)?;
    let io = |what: &str, err: std::io::Error| TrainError::Save {
        path: dir.to_path_buf(),
        message: format!("{what}: {err}"),
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(TrainError::Save { path: dir.to_path_buf(), message: "it is a file, not a folder".into() });
    }
    // Saving replaces the folder whole: only an empty one or an earlier save (its training.json),
    // never a folder of other files.
    if dir.is_dir() && !replaceable(dir) {
        return Err(TrainError::Save {
            path: dir.to_path_buf(),
            message: "it holds other files: choose a new or empty folder (an earlier save is replaced)".into(),
        });
    }
    std::fs::create_dir_all(&parent).map_err(|err| io("cannot create the parent folder", err))?;
    let staging = tempfile::Builder::new()
        .prefix(".attnviz-save-")
        .tempdir_in(&parent)
        .map_err(|err| io("cannot write beside it", err))?;
    let write =
        |file: &str, bytes: &[u8]| std::fs::write(staging.path().join(file), bytes).map_err(|err| io(file, err));
    write("config.json", serde_json::to_string_pretty(&e.config).unwrap_or_default().as_bytes())?;
    write("tokenizer.json", e.tokenizer.to_string().as_bytes())?;
    write("training.json", serde_json::to_string_pretty(training).unwrap_or_default().as_bytes())?;
    let bytes = safetensors_bytes(&e.tensors)?;
    write("model.safetensors", &bytes)?;
    let staged = staging.keep();
    // Swap: the old folder aside, the new one in, the old one removed.
    let old = dir.exists().then(|| parent.join(format!(".attnviz-old-{}", std::process::id())));
    if let Some(old) = &old {
        std::fs::rename(dir, old).map_err(|err| {
            let _ = std::fs::remove_dir_all(&staged);
            io("cannot move the previous folder aside", err)
        })?;
    }
    if let Err(err) = std::fs::rename(&staged, dir) {
        if let Some(old) = &old {
            let _ = std::fs::rename(old, dir);
        }
        let _ = std::fs::remove_dir_all(&staged);
        return Err(io("cannot move the new folder into place", err));
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(old);
    }
    Ok(dir.to_path_buf())
}

fn safetensors_bytes(tensors: &HashMap<String, Tensor>) -> Result<Vec<u8>, TrainError> {
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut data = Vec::with_capacity(names.len());
    for name in &names {
        let t = &tensors[*name];
        let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        data.push(((*name).clone(), t.dims().to_vec(), bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes).map(|v| (n.clone(), v))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| TrainError::Save { path: PathBuf::new(), message: e.to_string() })?;
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::tensor::serialize(views, Some(meta))
        .map_err(|e| TrainError::Save { path: PathBuf::new(), message: e.to_string() })
}

/// Whether saving may replace the folder `dir`: it is empty, or an earlier save of the lab.
pub fn replaceable(dir: &Path) -> bool {
    dir.join("training.json").is_file() || std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::TaskKind;

    /// Words are split as the saved tokenizer splits them before they are looked up.
    #[test]
    fn unknown_words_are_counted_as_the_tokenizer_splits() {
        let words = |w: &[&str]| w.iter().map(|s| (*s).to_string()).collect();
        let digits = FolderHints { probe: String::new(), words: words(&["1", "2", "+", "="]), sentences: false };
        assert_eq!(digits.unknown_words("1 + 2 = 2"), 0);
        assert_eq!(digits.unknown_words("12 + 2 =2"), 2, "white space only: 12 and =2 are words of their own");
        let review = FolderHints { probe: String::new(), words: words(&["i", "loved", "it", ","]), sentences: true };
        assert_eq!(review.unknown_words("I loved it, i"), 0, "lower-cased, the comma split off");
        assert_eq!(review.unknown_words("I hated it!"), 2);
        let cfg = TrainConfig { vocab: 30, ..TrainConfig::for_task(TaskKind::Induction) };
        let hints = FolderHints { probe: String::new(), words: Task::new(&cfg).vocab[..30].to_vec(), sentences: false };
        assert_eq!(hints.alphabet(), "ba be bi bo bu da de di do du fa fe … lo lu (30 words)");
    }
}
