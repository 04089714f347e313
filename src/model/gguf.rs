//! llama.cpp GGUF files (the header read by `gguf_header.rs`): metadata → the `config.json`
//! of the family each architecture maps onto (one [`Arch`] per architecture: a table), matrices
//! kept in their blocks (or, with `ATTNVIZ_WEIGHTS=f32` and for the types attnviz does not keep,
//! dequantised to f32: by Candle's `quantized` module, MXFP4 by attnviz), undoing what llama.cpp's
//! `convert_hf_to_gguf.py` changed: q and k rows un-permuted from its interleaved rotary layout
//! (Llama-style architectures), Gemma's norms stored as `1 + weight`, experts (and gpt-oss's
//! experts' biases) stacked in one tensor per layer, Phi-3's fused q/k/v and gate/up rows. The tokenizer is rebuilt from the file's vocabulary and merges (as transformers'
//! `integrations/gguf/gguf_tokenizer_mapping.py` does) unless a `tokenizer.json` sits beside it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::Value;
use candle_core::{Device, Tensor};
use serde_json::{Map, json};

use super::ModelError;
use super::describe::Description;
use super::engine::{BlockKind, Quantized, Region, WeightStorage};
use super::families::{self, Tensors};
use super::files::{check_memory_of, first_line};
use super::gguf_header::{Header, TensorInfo, TensorType, dequantised, read_bytes};

/// A llama.cpp architecture (`general.architecture`) and how its files differ from the
/// checkpoints of the family it maps onto.
#[allow(clippy::struct_excessive_bools)] // a row of a table: independent facts of each architecture
struct Arch {
    /// `general.architecture`.
    name: &'static str,
    /// The `model_type` whose description it maps onto (`llama` with experts: Mixtral's).
    model_type: &'static str,
    /// q and k rows stored permuted for llama.cpp's interleaved rotation (the converter's
    /// `LlamaModel` and its subclasses; the others rotate halves, as transformers does).
    permuted: bool,
    /// Norm weights stored as `1 + weight` (the converter's Gemma classes add the one Gemma's
    /// `RMSNorm` adds).
    norms_plus_one: bool,
    /// `ffn_up` holds gate and up rows (Phi-3's `gate_up_proj`).
    fused_gate_up: bool,
    /// The chosen experts' weights renormalised (llama.cpp's `build_moe_ffn` `norm_w` for the
    /// architecture).
    renormalise: bool,
    /// The file's name of the MLP's input norm (`ffn_norm`; gpt-oss's converter maps
    /// `post_attention_layernorm` to `post_attention_norm`, which is Gemma's attention output norm).
    ffn_norm: &'static str,
}

/// The architectures read (llama.cpp writes Llama, Mistral, `SmolLM`, Mixtral and most fine-tunes
/// as "llama").
const ARCHITECTURES: &[Arch] = &[
    Arch {
        name: "llama",
        model_type: "llama",
        permuted: true,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: true,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "gemma2",
        model_type: "gemma2",
        permuted: false,
        norms_plus_one: true,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "gemma3",
        model_type: "gemma3_text",
        permuted: false,
        norms_plus_one: true,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "phi3",
        model_type: "phi3",
        permuted: false,
        norms_plus_one: false,
        fused_gate_up: true,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "olmo2",
        model_type: "olmo2",
        permuted: false,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "granite",
        model_type: "granite",
        permuted: true,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "smollm3",
        model_type: "smollm3",
        permuted: true,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "qwen3moe",
        model_type: "qwen3_moe",
        permuted: false,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: true,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "olmoe",
        model_type: "olmoe",
        permuted: false,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "ffn_norm",
    },
    Arch {
        name: "gpt-oss",
        model_type: "gpt_oss",
        permuted: false,
        norms_plus_one: false,
        fused_gate_up: false,
        renormalise: false,
        ffn_norm: "post_attention_norm",
    },
];

/// A GGUF file read: its description, canonical tensors, tokenizer JSON and what the weights were.
pub struct GgufModel {
    /// The network.
    pub desc: Description,
    /// Canonical tensors dequantised to f32 (with [`WeightStorage::Stored`], the vectors and the
    /// matrices of types not kept in blocks).
    pub tensors: Tensors,
    /// Canonical matrices kept in their blocks ([`WeightStorage::Stored`]).
    pub quantized: HashMap<String, Quantized>,
    /// `tokenizer.json` text built from the metadata.
    pub tokenizer_json: String,
    /// End-of-sequence ids.
    pub eos: Vec<u32>,
    /// What the weights were and how they are held: "GGUF `Q4_1` (210), `F32` (61), `Q8_0` (1),
    /// kept in their blocks" (or "…, dequantised to f32").
    pub quantization: String,
}

fn bad(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Weights { path: path.to_path_buf(), message: message.into() }
}

/// Typed access to the metadata, errors naming the key.
struct Meta<'a>(&'a HashMap<String, Value>);

impl Meta<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    fn string(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ModelError::Config(format!("GGUF metadata \"{key}\" must be a string"))),
        }
    }

    fn count(&self, key: &str) -> Result<Option<u64>, ModelError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = match v {
            Value::U8(n) => Some(u64::from(*n)),
            Value::U16(n) => Some(u64::from(*n)),
            Value::U32(n) => Some(u64::from(*n)),
            Value::U64(n) => Some(*n),
            Value::I8(n) => u64::try_from(*n).ok(),
            Value::I16(n) => u64::try_from(*n).ok(),
            Value::I32(n) => u64::try_from(*n).ok(),
            Value::I64(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| ModelError::Config(format!("GGUF metadata \"{key}\" must be a whole number ≥ 0")))
    }

    fn number(&self, key: &str) -> Result<Option<f64>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(f)) => Ok(Some(f64::from(*f))),
            Some(Value::F64(f)) => Ok(Some(*f)),
            Some(_) => self.count(key).map(|n| n.map(|n| n as f64)),
        }
    }

    fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key) {
            Some(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<&str>>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.as_str()),
                    _ => Err(ModelError::Config(format!("GGUF metadata \"{key}\" must be a list of strings"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(ModelError::Config(format!("GGUF metadata \"{key}\" must be a list"))),
        }
    }

    fn ints(&self, key: &str) -> Vec<i64> {
        match self.get(key) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::I32(n) => i64::from(*n),
                    Value::U32(n) => i64::from(*n),
                    Value::I8(n) => i64::from(*n),
                    Value::U8(n) => i64::from(*n),
                    Value::I64(n) => *n,
                    _ => -1,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// What the metadata alone does not say: Phi-3's long-rope factors (tensors
/// `rope_factors_short` / `rope_factors_long`) and the layers without a router.
struct FromTensors {
    short_factor: Option<Vec<f32>>,
    long_factor: Option<Vec<f32>>,
    dense_layers: Vec<usize>,
}

/// The `config.json` a GGUF file stands for (transformers' `gguf_config_mapping.py` for the keys
/// they share, llama.cpp's `llama-model.cpp` for what its loader assumes of each architecture).
fn config_of(
    meta: &Meta<'_>,
    arch: &Arch,
    vocab: usize,
    tied: bool,
    from_tensors: &FromTensors,
) -> Result<String, ModelError> {
    let name = arch.name;
    let key = |k: &str| format!("{name}.{k}");
    let need = |k: &str| -> Result<u64, ModelError> {
        meta.count(&key(k))?.ok_or_else(|| ModelError::Config(format!("GGUF metadata lacks \"{}\"", key(k))))
    };
    let mut cfg = Map::new();
    let experts = meta.count(&key("expert_count"))?.unwrap_or(0);
    let model_type = if arch.name == "llama" && experts > 0 { "mixtral" } else { arch.model_type };
    cfg.insert("model_type".into(), json!(model_type));
    cfg.insert("vocab_size".into(), json!(meta.count(&key("vocab_size"))?.unwrap_or(vocab as u64)));
    let hidden = need("embedding_length")?;
    cfg.insert("hidden_size".into(), json!(hidden));
    let layers = need("block_count")?;
    cfg.insert("num_hidden_layers".into(), json!(layers));
    let heads = need("attention.head_count")?;
    cfg.insert("num_attention_heads".into(), json!(heads));
    cfg.insert("num_key_value_heads".into(), json!(meta.count(&key("attention.head_count_kv"))?.unwrap_or(heads)));
    cfg.insert("intermediate_size".into(), json!(need("feed_forward_length")?));
    cfg.insert("max_position_embeddings".into(), json!(meta.count(&key("context_length"))?.unwrap_or(2048)));
    let head_dim = meta.count(&key("attention.key_length"))?;
    if let Some(d) = head_dim {
        cfg.insert("head_dim".into(), json!(d));
    }
    let head_dim = head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0));
    if let Some(eps) = meta.number(&key("attention.layer_norm_rms_epsilon"))? {
        cfg.insert("rms_norm_eps".into(), json!(eps));
    }
    let theta = meta.number(&key("rope.freq_base"))?.unwrap_or(10_000.0);
    cfg.insert("rope_theta".into(), json!(theta));
    let scaling = meta.string(&key("rope.scaling.type"))?.filter(|k| *k != "none");
    let mut rope_scaling = Map::new();
    if let Some(kind) = scaling {
        rope_scaling.insert("rope_type".into(), json!(kind));
        if let Some(f) = meta.number(&key("rope.scaling.factor"))? {
            rope_scaling.insert("factor".into(), json!(f));
        }
        if let Some(o) = meta.count(&key("rope.scaling.original_context_length"))? {
            rope_scaling.insert("original_max_position_embeddings".into(), json!(o));
        }
        for (gguf_key, config_key) in [("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")] {
            if let Some(beta) = meta.number(&key(&format!("rope.scaling.{gguf_key}")))? {
                rope_scaling.insert(config_key.into(), json!(beta));
            }
        }
    }
    // llama.cpp's YaRN knobs beyond the betas: their defaults are what transformers computes.
    let yarn: &[(&str, &[f64])] = if scaling == Some("yarn") {
        &[
            ("rope.scaling.yarn_ext_factor", &[-1.0, 1.0]),
            ("rope.scaling.yarn_attn_factor", &[1.0]),
            ("rope.scaling.attn_factor", &[1.0]),
            ("rope.scaling.yarn_log_multiplier", &[0.0]),
        ]
    } else {
        &[]
    };
    for &(gguf_key, defaults) in yarn {
        if let Some(v) = meta.number(&key(gguf_key))?.filter(|v| !defaults.contains(v)) {
            return Err(ModelError::Unsupported {
                field: key(gguf_key),
                value: v.to_string(),
                why: "rotary scaling other than YaRN's own attention factor and ramp is not supported".into(),
            });
        }
    }
    if let Some(window) = meta.count(&key("attention.sliding_window"))?.filter(|&w| w > 0) {
        cfg.insert("sliding_window".into(), json!(window));
    } else {
        cfg.insert("sliding_window".into(), serde_json::Value::Null);
    }
    if let Some(cap) = meta.number(&key("final_logit_softcapping"))? {
        cfg.insert("final_logit_softcapping".into(), json!(cap));
    }
    if let Some(scale) = meta.number(&key("expert_weights_scale"))?.filter(|s| ![0.0, 1.0].contains(s)) {
        return Err(ModelError::Unsupported {
            field: key("expert_weights_scale"),
            value: scale.to_string(),
            why: "experts' weights scaled after the router are not supported".into(),
        });
    }
    // The families' rotary width is the whole head unless the family reads a partial one.
    if let Some(dims) = meta.count(&key("rope.dimension_count"))?.filter(|&d| d != head_dim) {
        if arch.name != "phi3" {
            return Err(ModelError::Unsupported {
                field: key("rope.dimension_count"),
                value: dims.to_string(),
                why: format!("only rotation over whole heads ({head_dim}) is supported for {name}"),
            });
        }
        cfg.insert("partial_rotary_factor".into(), json!(dims as f64 / head_dim as f64));
    }
    match arch.name {
        "gemma2" | "gemma3" => {
            if let Some(cap) = meta.number(&key("attn_logit_softcapping"))? {
                cfg.insert("attn_logit_softcapping".into(), json!(cap));
            } else {
                cfg.insert("attn_logit_softcapping".into(), serde_json::Value::Null);
            }
            if !cfg.contains_key("final_logit_softcapping") {
                cfg.insert("final_logit_softcapping".into(), serde_json::Value::Null);
            }
            // llama.cpp: scores × 1/√head_dim, except the 27B models (46 blocks of Gemma 2, 62 of
            // Gemma 3), which scale by 1/√(hidden / heads) as their query_pre_attn_scalar says.
            let big = (arch.name == "gemma2" && layers == 46) || (arch.name == "gemma3" && layers == 62);
            let scalar = if big { hidden.checked_div(heads).unwrap_or(head_dim) } else { head_dim };
            cfg.insert("query_pre_attn_scalar".into(), json!(scalar));
            if arch.name == "gemma3" {
                // llama.cpp: every sixth layer full, the others sliding and rotated with base
                // 10 000 (or `rope.freq_base_swa`), unscaled.
                let local = meta.number(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
                let mut full = rope_scaling.clone();
                full.entry("rope_type").or_insert(json!("default"));
                full.insert("rope_theta".into(), json!(theta));
                cfg.insert(
                    "rope_parameters".into(),
                    json!({"full_attention": full,
                           "sliding_attention": {"rope_type": "default", "rope_theta": local}}),
                );
                let pattern = meta.count(&key("attention.sliding_window_pattern"))?.unwrap_or(6);
                cfg.insert("sliding_window_pattern".into(), json!(pattern));
                if cfg.get("sliding_window") == Some(&serde_json::Value::Null) {
                    cfg.insert("sliding_window_pattern".into(), json!(1));
                }
                rope_scaling.clear();
            }
        }
        "phi3" => {
            if let (Some(short), Some(long)) = (&from_tensors.short_factor, &from_tensors.long_factor) {
                let original = meta.count(&key("rope.scaling.original_context_length"))?.ok_or_else(|| {
                    ModelError::Config(format!(
                        "GGUF metadata lacks \"{}\"",
                        key("rope.scaling.original_context_length")
                    ))
                })?;
                rope_scaling = Map::new();
                rope_scaling.insert("rope_type".into(), json!("longrope"));
                rope_scaling.insert("short_factor".into(), json!(short));
                rope_scaling.insert("long_factor".into(), json!(long));
                rope_scaling.insert("original_max_position_embeddings".into(), json!(original));
                cfg.insert("original_max_position_embeddings".into(), json!(original));
            }
        }
        "gpt-oss" => {
            // llama.cpp: sliding on even layers (`set_swa_pattern(2)`), the clamped SwiGLU of
            // `build_moe_ffn` (`LLM_FFN_SWIGLU_OAI_MOE`: alpha 1.702, limit 7), biases everywhere,
            // YaRN's correction range rounded out (`ggml_rope_yarn_corr_dims`: floor and ceil).
            let types: Vec<&str> =
                (0..layers).map(|l| if l % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
            cfg.insert("layer_types".into(), json!(types));
            cfg.insert("swiglu_alpha".into(), json!(1.702));
            cfg.insert("swiglu_limit".into(), json!(7.0));
            cfg.insert("attention_bias".into(), json!(true));
            if rope_scaling.is_empty() {
                rope_scaling.insert("rope_type".into(), json!("default"));
            } else {
                rope_scaling.insert("truncate".into(), json!(true));
            }
            if let Some(width) = meta.count(&key("expert_feed_forward_length"))? {
                cfg.insert("intermediate_size".into(), json!(width));
            }
        }
        "granite" => {
            for (gguf_key, config_key) in [
                ("attention.scale", "attention_multiplier"),
                ("embedding_scale", "embedding_multiplier"),
                ("residual_scale", "residual_multiplier"),
                ("logit_scale", "logits_scaling"),
            ] {
                if let Some(v) = meta.number(&key(gguf_key))? {
                    cfg.insert(config_key.into(), json!(v));
                }
            }
        }
        _ => {}
    }
    if experts > 0 {
        let used = meta.count(&key("expert_used_count"))?.unwrap_or(2);
        let count_key = if matches!(model_type, "mixtral" | "gpt_oss") { "num_local_experts" } else { "num_experts" };
        cfg.insert(count_key.into(), json!(experts));
        cfg.insert("num_experts_per_tok".into(), json!(used));
        let renormalise = meta.flag(&key("expert_weights_norm")).unwrap_or(arch.renormalise);
        // gpt-oss's softmax over the chosen experts' logits sums to one by itself.
        if model_type != "gpt_oss" {
            cfg.insert("norm_topk_prob".into(), json!(renormalise));
        }
        if model_type == "qwen3_moe" {
            let width = meta.count(&key("expert_feed_forward_length"))?;
            cfg.insert("moe_intermediate_size".into(), json!(width.unwrap_or(need("feed_forward_length")?)));
            cfg.insert("mlp_only_layers".into(), json!(from_tensors.dense_layers));
        }
    }
    if !rope_scaling.is_empty() {
        cfg.insert("rope_scaling".into(), serde_json::Value::Object(rope_scaling));
    }
    cfg.insert("tie_word_embeddings".into(), json!(tied));
    Ok(serde_json::Value::Object(cfg).to_string())
}

/// GPT-2's byte → printable character table (`bytes_to_unicode`).
fn byte_alphabet() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + extra).unwrap_or('\u{FFFD}');
            extra += 1;
            c
        };
    }
    table
}

/// The split regex of a llama.cpp pre-tokenizer name, as transformers maps them.
fn split_regex(pre: &str) -> Option<&'static str> {
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "dbrx"
        | "smaug-bpe" => Some(LLAMA3),
        "qwen2" | "deepseek-r1-qwen" => Some(QWEN2),
        _ => None,
    }
}

/// `tokenizer.json` for a byte-level BPE GGUF vocabulary (`tokenizer.ggml.model` = "gpt2"):
/// `GPT2Tokenizer(vocab, merges)`, control tokens added as special, user-defined ones as added
/// tokens, the split regex of `tokenizer.ggml.pre` where transformers knows it, BOS/EOS added as
/// `add_bos_token` / `add_eos_token` say.
fn tokenizer_json(meta: &Meta<'_>) -> Result<String, ModelError> {
    let model = meta.string("tokenizer.ggml.model")?.unwrap_or("(missing)");
    if model != "gpt2" {
        return Err(ModelError::Unsupported {
            field: "tokenizer.ggml.model".into(),
            value: model.into(),
            why: "attnviz builds byte-level BPE (\"gpt2\") tokenizers from GGUF files; put the model's tokenizer.json next to the file for others".into(),
        });
    }
    let tokens = meta
        .strings("tokenizer.ggml.tokens")?
        .ok_or_else(|| ModelError::Config("GGUF metadata lacks \"tokenizer.ggml.tokens\"".into()))?;
    let merges = meta.strings("tokenizer.ggml.merges")?.unwrap_or_default();
    let types = meta.ints("tokenizer.ggml.token_type");
    let alphabet = byte_alphabet();
    let spelled = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    let mut vocab = Map::new();
    for (i, t) in tokens.iter().enumerate() {
        let key = if spelled(t) { (*t).to_string() } else { t.bytes().map(|b| alphabet[b as usize]).collect() };
        vocab.insert(key, json!(i));
    }
    let merges: Vec<serde_json::Value> =
        merges.iter().filter_map(|m| m.split_once(' ')).map(|(a, b)| json!([a, b])).collect();
    let mut added = Vec::new();
    for (i, (t, ty)) in tokens.iter().zip(types.iter().chain(std::iter::repeat(&1))).enumerate() {
        // 3: CONTROL (special, when spelled in the byte alphabet), 4: USER_DEFINED (added, not special).
        if (*ty == 3 && spelled(t)) || *ty == 4 {
            added.push(json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                              "normalized": false, "special": *ty == 3}));
        }
    }
    let pre = meta.string("tokenizer.ggml.pre")?.and_then(split_regex);
    let pre_tokenizer = match pre {
        Some(regex) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}),
        None => json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
    };
    let special = |key: &str| -> Result<Option<(String, u32)>, ModelError> {
        let Some(id) = meta.count(key)? else { return Ok(None) };
        let token = tokens
            .get(id as usize)
            .ok_or_else(|| ModelError::Config(format!("GGUF metadata \"{key}\" = {id} is outside the vocabulary")))?;
        Ok(Some(((*token).to_string(), id as u32)))
    };
    let bos =
        special("tokenizer.ggml.bos_token_id")?.filter(|_| meta.flag("tokenizer.ggml.add_bos_token") == Some(true));
    let eos =
        special("tokenizer.ggml.eos_token_id")?.filter(|_| meta.flag("tokenizer.ggml.add_eos_token") == Some(true));
    let piece = |t: &(String, u32), type_id: u32| json!({"SpecialToken": {"id": t.0, "type_id": type_id}});
    let sequence = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    // update_post_processor: "bos:0 $A:0 eos:0", the pair "… bos:1 $B:1 eos:1".
    let part = |seq: &str, type_id: u32| {
        let mut list: Vec<serde_json::Value> = bos.iter().map(|b| piece(b, type_id)).collect();
        list.push(sequence(seq, type_id));
        list.extend(eos.iter().map(|e| piece(e, type_id)));
        list
    };
    let single = part("A", 0);
    let pair: Vec<serde_json::Value> = single.iter().cloned().chain(part("B", 1)).collect();
    let specials: BTreeMap<&str, serde_json::Value> = bos
        .iter()
        .chain(eos.iter())
        .map(|(t, id)| (t.as_str(), json!({"id": t, "ids": [id], "tokens": [t]})))
        .collect();
    let post = json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials});
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": pre_tokenizer, "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    });
    Ok(doc.to_string())
}

/// llama.cpp's `permute` of q/k rows (`reshape(heads, 2, d/2, in).swapaxes(1, 2)`), undone.
fn unpermute(t: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = t.dims2()?;
    let half = rows / heads / 2;
    t.reshape((heads, half, 2, cols))?.transpose(1, 2)?.reshape((rows, cols))?.contiguous()
}

/// llama.cpp's `permute`, undone on whole rows: row `i` of the result is row `from[i]` of a
/// stored q or k matrix ([`unpermute`] on a tensor).
fn unpermuted_rows(rows: usize, heads: usize) -> Vec<usize> {
    let half = rows / heads / 2;
    let mut from = Vec::with_capacity(rows);
    for h in 0..heads {
        for a in 0..2 {
            for b in 0..half {
                from.push(h * 2 * half + 2 * b + a);
            }
        }
    }
    from
}

/// The block kinds as GGUF files name them (here, beside the reader: the kernel room knows no file
/// format).
impl BlockKind {
    /// The kind of a GGUF tensor type Candle reads, None for the types kept dequantised (`Q2_K`,
    /// `Q3_K`, `Q8_1`, `Q8_K`).
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        TensorType::Candle(dtype).kind()
    }
}

/// The kind a tensor is kept in with [`WeightStorage::Stored`]: a matrix (or a stack of experts'
/// matrices) of a type widened by the engine (F32 ones too are read as rows, not converted); None
/// for vectors, stacks of biases and other types, which are dequantised to f32 on load.
fn kept_kind(name: &str, info: &TensorInfo, storage: WeightStorage) -> Option<BlockKind> {
    let kind = info.ty.kind()?;
    let cols = info.dims.last().copied().unwrap_or(0);
    (storage == WeightStorage::Stored
        && name.ends_with(".weight")
        && matches!(info.dims.len(), 2 | 3)
        && kind.row_bytes(cols).is_some())
    .then_some(kind)
}

/// GGUF tensor names → canonical ones (`blk.N.attn_q.weight` → `layer.N.q.weight`, …; a layer's
/// stacked experts → `layer.N.experts.gate.weight`, split by [`pieces`]; the MLP's input norm by
/// the name `arch` gives it).
fn canonical_name(name: &str, arch: &Arch) -> Option<String> {
    let fixed = match name {
        "token_embd.weight" => Some("embed.tokens.weight"),
        "output_norm.weight" => Some("final_norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (module, leaf) = rest.rsplit_once('.')?;
    if module == "attn_sinks" && leaf == "weight" {
        return Some(format!("layer.{layer}.sinks"));
    }
    let target = match module {
        m if m == arch.ffn_norm => "ffn_norm",
        "attn_q" => "q",
        "attn_k" => "k",
        "attn_v" => "v",
        "attn_qkv" => "qkv",
        "attn_output" => "o",
        "attn_norm" => "attn_norm",
        "post_attention_norm" => "attn_out_norm",
        "post_ffw_norm" => "ffn_out_norm",
        "attn_q_norm" => "q_norm",
        "attn_k_norm" => "k_norm",
        "ffn_gate" => "gate",
        "ffn_up" => "up",
        "ffn_down" => "down",
        "ffn_gate_inp" => "router",
        "ffn_gate_exps" => "experts.gate",
        "ffn_up_exps" => "experts.up",
        "ffn_down_exps" => "experts.down",
        _ => return None,
    };
    Some(format!("layer.{layer}.{target}.{leaf}"))
}

/// A canonical tensor inside a GGUF one: rows `start..start + rows` of the tensor seen as rows of
/// its last dimension (an expert of a stacked tensor, q, k or v of a fused one, or all of it).
struct Piece {
    canon: String,
    start: usize,
    rows: usize,
    /// One row read as a vector (an expert's bias in a stack of them).
    vector: bool,
}

impl Piece {
    /// Its shape, given its tensor's `dims`.
    fn shape(&self, dims: &[usize]) -> Vec<usize> {
        let cols = dims[dims.len() - 1];
        if self.vector {
            vec![cols]
        } else if dims.len() == 1 {
            vec![self.rows]
        } else {
            vec![self.rows, cols]
        }
    }
}

/// The canonical tensors a GGUF tensor of shape `dims` holds (None: one the network does not read).
fn pieces(name: &str, dims: &[usize], arch: &Arch, desc: &Description) -> Option<Vec<Piece>> {
    let canon = canonical_name(name, arch)?;
    let whole = dims[..dims.len().saturating_sub(1)].iter().product::<usize>().max(usize::from(dims.len() == 1));
    let rows = if dims.len() == 1 { dims[0] } else { whole };
    let split = |stem: &str, leaf: &str, parts: &[(&str, usize)], vector: bool| {
        let mut start = 0;
        parts
            .iter()
            .map(|&(part, rows)| {
                let piece = Piece { canon: format!("{stem}.{part}.{leaf}"), start, rows, vector };
                start += rows;
                piece
            })
            .collect()
    };
    if let Some(stem) = canon.strip_suffix(".qkv.weight") {
        let (q, kv) = (desc.query_width(), desc.kv_width());
        return Some(split(stem, "weight", &[("q", q), ("k", kv), ("v", kv)], false));
    }
    if let Some(stem) = canon.strip_suffix(".up.weight").filter(|_| arch.fused_gate_up) {
        let i = desc.intermediate;
        return Some(split(stem, "weight", &[("gate", i), ("up", i)], false));
    }
    if let Some((stem, rest)) = canon.split_once(".experts.") {
        let (part, leaf) = rest.split_once('.')?;
        // A stack of matrices (experts × rows × cols) or of biases (experts × cols).
        let (experts, per, vector) = match (leaf, dims) {
            ("weight", [e, r, _]) => (*e, *r, false),
            ("bias", [e, _]) => (*e, 1, true),
            _ => return Some(Vec::new()),
        };
        let parts: Vec<(String, usize)> = (0..experts).map(|e| (format!("expert.{e}.{part}"), per)).collect();
        let parts: Vec<(&str, usize)> = parts.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        return Some(split(stem, leaf, &parts, vector));
    }
    Some(vec![Piece { canon, start: 0, rows, vector: false }])
}

/// A vector tensor of the file dequantised to f32 (Phi-3's rope factors), None when absent.
fn vector_of(
    reader: &mut BufReader<File>,
    header: &Header,
    path: &Path,
    name: &str,
) -> Result<Option<Vec<f32>>, ModelError> {
    let Some(info) = header.tensors.get(name) else { return Ok(None) };
    dequantised(reader, name, info).map(Some).map_err(|e| bad(path, e))
}

/// Reads a GGUF file: description, tensors (kept in their blocks with [`WeightStorage::Stored`],
/// else dequantised to f32), tokenizer.
pub fn read(path: &Path, storage: WeightStorage) -> Result<GgufModel, ModelError> {
    let header = Header::read(path)?;
    let meta = Meta(&header.metadata);
    let arch_name = meta.string("general.architecture")?.unwrap_or("(missing)");
    let Some(arch) = ARCHITECTURES.iter().find(|a| a.name == arch_name) else {
        let names: Vec<&str> = ARCHITECTURES.iter().map(|a| a.name).collect();
        return Err(ModelError::Unsupported {
            field: "general.architecture".into(),
            value: arch_name.into(),
            why: format!("attnviz reads GGUF files of: {}", names.join(", ")),
        });
    };
    let vocab = meta.strings("tokenizer.ggml.tokens")?.map_or(0, |t| t.len());
    let tied = !header.tensors.contains_key("output.weight");
    let file = File::open(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let mut reader = BufReader::new(file);
    let blocks = meta.count(&format!("{arch_name}.block_count"))?.unwrap_or(0);
    let from_tensors = FromTensors {
        short_factor: vector_of(&mut reader, &header, path, "rope_factors_short.weight")?,
        long_factor: vector_of(&mut reader, &header, path, "rope_factors_long.weight")?,
        dense_layers: (0..usize::try_from(blocks).unwrap_or(usize::MAX).min(1 << 16))
            .filter(|l| !header.tensors.contains_key(&format!("blk.{l}.ffn_gate_inp.weight")))
            .collect(),
    };
    let (_, desc) = families::describe(&config_of(&meta, arch, vocab, tied, &from_tensors)?)?;
    // Check the shape of every tensor the network reads before reading any (the header checked
    // every tensor's size against the file).
    let expected: HashMap<String, Vec<usize>> =
        super::engine::expected_tensors(&desc).into_iter().map(|e| (e.name, e.shape)).collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut held_bytes = 0u64;
    let mut placed: Vec<(&String, Vec<Piece>)> = Vec::new();
    for (name, info) in &header.tensors {
        let dims = info.dims.as_slice();
        let Some(parts) = pieces(name, dims, arch, &desc) else { continue };
        let count: usize = dims.iter().product();
        let cols = dims[dims.len() - 1];
        let view_rows = if dims.len() == 1 { dims[0] } else { count / cols };
        let covered: usize = parts.iter().map(|p| p.rows).sum();
        if parts.is_empty() || covered != view_rows {
            return Err(bad(
                path,
                format!("tensor {name} has shape {dims:?}, which the metadata does not divide into its parts"),
            ));
        }
        for piece in &parts {
            let shape = piece.shape(dims);
            if let Some(want) = expected.get(&piece.canon).filter(|want| **want != shape) {
                return Err(bad(
                    path,
                    format!(
                        "tensor {name} holds {} of shape {shape:?}, but the metadata implies {want:?}",
                        piece.canon
                    ),
                ));
            }
        }
        *kinds.entry(info.ty.name()).or_default() += 1;
        held_bytes += match kept_kind(name, info, storage) {
            Some(_) => info.bytes as u64,
            None => count as u64 * 4,
        };
        placed.push((name, parts));
    }
    // The memory check counts the weights as they will be held: their blocks, or f32.
    let held = if storage == WeightStorage::Stored { "as stored (GGUF blocks)" } else { "as f32" };
    check_memory_of(path, (held_bytes, held), 0)?;
    let needed = desc.weight_sets();
    let present = header
        .tensors
        .keys()
        .filter_map(|n| n.strip_prefix("blk.")?.split_once('.')?.0.parse::<usize>().ok())
        .map(|l| l.saturating_add(1))
        .max()
        .unwrap_or(0);
    if present != needed {
        let more = if present > needed { "more" } else { "fewer" };
        return Err(bad(path, format!("the file has {more} blocks ({present}) than its metadata says ({needed})")));
    }
    // The heads a q or k matrix's rows are permuted over, for the architectures that permute.
    let permuted_heads = |canon: &str| {
        if !arch.permuted {
            None
        } else if canon.ends_with(".q.weight") {
            Some(desc.heads)
        } else if canon.ends_with(".k.weight") {
            Some(desc.kv_heads)
        } else {
            None
        }
    };
    let mut tensors = HashMap::new();
    // Matrices kept in their blocks are read straight into one region in 2 MB pages, in the order
    // of their names (a layer's matrices side by side), rows of q and k put in rotary order.
    let mut kept: Vec<(&String, &Piece, BlockKind, usize)> = Vec::new();
    for (name, parts) in &placed {
        let info = &header.tensors[*name];
        if let Some(kind) = kept_kind(name, info, storage) {
            let cols = info.dims[info.dims.len() - 1];
            kept.extend(parts.iter().map(|p| (*name, p, kind, cols)));
        }
    }
    kept.sort_by(|a, b| a.1.canon.cmp(&b.1.canon));
    let row_bytes = |kind: BlockKind, cols: usize| kind.row_bytes(cols).unwrap_or(0);
    let mut region = Region::new(kept.iter().map(|&(_, piece, kind, cols)| row_bytes(kind, cols) * piece.rows).sum());
    let mut places = Vec::with_capacity(kept.len());
    for &(name, piece, kind, cols) in &kept {
        let (row, rows) = (row_bytes(kind, cols), piece.rows);
        let unpermuted = permuted_heads(&piece.canon).map(|heads| unpermuted_rows(rows, heads));
        let mut read = |out: &mut [u8]| -> Result<(), ModelError> {
            read_bytes(&mut reader, &header.tensors[name], piece.start * row, out)
                .map_err(|e| bad(path, format!("tensor {name}: {e}")))
        };
        if unpermuted.as_ref().is_some_and(|from| from.len() != rows) {
            return Err(bad(path, format!("tensor {name}: {rows} rows are not heads of an even size")));
        }
        let (at, slot) = region.next(row * rows).ok_or_else(|| bad(path, format!("tensor {name}: no room")))?;
        match unpermuted {
            Some(from) => {
                let mut raw = vec![0u8; row * rows];
                read(&mut raw)?;
                for (dst, &r) in slot.chunks_exact_mut(row).zip(&from) {
                    dst.copy_from_slice(&raw[r * row..(r + 1) * row]);
                }
            }
            None => read(slot)?,
        }
        places.push(at);
    }
    let region = region.finish();
    let mut quantized = HashMap::new();
    for (&(name, piece, kind, cols), at) in kept.iter().zip(places) {
        let q = Quantized::in_region(kind, (piece.rows, cols), &region, at)
            .map_err(|e| bad(path, format!("tensor {name}: {e}")))?;
        quantized.insert(piece.canon.clone(), q);
    }
    for (name, parts) in &placed {
        let info = &header.tensors[*name];
        if kept_kind(name, info, storage).is_some() {
            continue;
        }
        let failed = |e: candle_core::Error| bad(path, format!("tensor {name}: {}", first_line(&e)));
        let values = dequantised(&mut reader, name, info).map_err(|e| bad(path, e))?;
        // Seen as rows of its last dimension (a vector as itself).
        let dims = info.dims.as_slice();
        let cols = dims[dims.len() - 1];
        let shape = if dims.len() == 1 { vec![cols] } else { vec![values.len() / cols, cols] };
        let whole = Tensor::from_vec(values, shape, &Device::Cpu).map_err(failed)?;
        for piece in parts {
            let mut t =
                whole.narrow(0, piece.start, piece.rows).map_err(failed)?.reshape(piece.shape(dims)).map_err(failed)?;
            if let Some(heads) = permuted_heads(&piece.canon) {
                t = unpermute(&t, heads).map_err(failed)?;
            }
            // Gemma's converter stores `1 + weight`; the family's norms add the one themselves.
            if arch.norms_plus_one && piece.canon.ends_with("norm.weight") {
                t = t.affine(1.0, -1.0).map_err(failed)?;
            }
            tensors.insert(piece.canon.clone(), t);
        }
    }
    let eos = meta.count("tokenizer.ggml.eos_token_id")?.and_then(|e| u32::try_from(e).ok()).into_iter().collect();
    let listed: Vec<String> = {
        let mut v: Vec<(&String, &usize)> = kinds.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.into_iter().map(|(k, n)| format!("{k} ({n})")).collect()
    };
    let how = if quantized.is_empty() { "dequantised to f32" } else { "kept in their blocks" };
    let quantization = format!("GGUF {}, {how}", listed.join(", "));
    let tokenizer_json =
        if path.with_file_name("tokenizer.json").is_file() { String::new() } else { tokenizer_json(&meta)? };
    Ok(GgufModel { desc, tensors, quantized, tokenizer_json, eos, quantization })
}

#[cfg(test)]
#[path = "gguf_tests.rs"]
mod tests;
