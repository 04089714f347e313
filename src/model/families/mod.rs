//! One small mapping per model family: `config.json` keys → [`Description`], checkpoint tensor names
//! → the engine's canonical names. Everything a family needs is read here, in one place, and every
//! error names the key or tensor at fault.
//!
//! Canonical names (what [`super::engine::Network`] loads): `embed.{tokens,positions,types}.weight`,
//! `embed.norm.*`, `embed.project.*`, `layer.{w}.{q,k,v,o,up,down}.*`, `layer.{w}.{attn_norm,ffn_norm}.*`,
//! `layer.{w}.{pos_q,pos_k}.*`, `layer.{w}.{gate,q_norm,k_norm}.*`, `rel.bias.weight`, `rel.embeddings.weight`,
//! `rel.norm.*`, `final_norm.*`, `lm_head.weight`.

mod albert;
mod bert;
mod deberta;
mod decoder;
mod distilbert;
mod gemma;
mod gpt2;
mod gpt_neox;
mod gpt_oss;
mod llama;
mod modern;
mod moe;
mod mpnet;
mod seq2seq;

use std::collections::HashMap;

use candle_core::Tensor;
use serde_json::{Map, Value};

use super::ModelError;
use super::describe::{
    Activation, Biases, Description, EmbeddingDesc, FeedForward, LmHead, NormKind, NormPlacement, PositionBias,
    Positions, QkNorm,
};

/// Largest counts a config may claim before anything is allocated for them (far above any released
/// model; a larger value is a broken or hostile file).
const MAX_LAYERS: usize = 1024;
const MAX_WIDTH: usize = 1 << 17;
const MAX_HEADS: usize = 4096;
const MAX_VOCAB: usize = 1 << 24;
const MAX_POSITIONS: usize = 1 << 20;
/// Largest whole number any `config.json` key may hold (far above every real count, id or window;
/// keeps products of counts, such as `head_dim · heads`, from overflowing).
const MAX_COUNT: u64 = 1 << 40;
/// Largest element count of one tensor a description may imply, or a file may hold (2³⁴ f32 = 64 GiB).
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 34;

/// Tensors by name.
pub type Tensors = HashMap<String, Tensor>;

/// A family: how to read its config and rename its tensors.
#[derive(Debug)]
pub struct Family {
    /// `model_type` values it covers.
    pub model_types: &'static [&'static str],
    /// `config.json` → description.
    pub describe: fn(&Keys) -> Result<Description, ModelError>,
    /// Checkpoint tensors → canonical tensors (renamed, and split or transposed where the family
    /// stores them otherwise); tensors the engine does not use are dropped. An encoder–decoder's
    /// decoder tensors are named `decoder.…`.
    pub canonical: fn(Tensors, &Description) -> Result<Tensors, String>,
    /// For an encoder–decoder (`describe` then describes the encoder): the decoder.
    pub decoder: Option<DescribeDecoder>,
}

/// Reads an encoder–decoder's decoder from `config.json`.
pub type DescribeDecoder = fn(&Keys) -> Result<DecoderSpec, ModelError>;

/// The decoder of an encoder–decoder: its network and the token its input starts with.
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    /// The decoder stack (causal, with cross-attention).
    pub desc: Description,
    /// `decoder_start_token_id`.
    pub start: u32,
}

/// Every supported family.
const FAMILIES: &[&Family] = &[
    &bert::BERT,
    &bert::ROBERTA,
    &bert::ELECTRA,
    &bert::PRE_LN_BERT,
    &distilbert::DISTILBERT,
    &albert::ALBERT,
    &mpnet::MPNET,
    &deberta::DEBERTA_V2,
    &gpt2::GPT2,
    &llama::LLAMA,
    &llama::MISTRAL,
    &llama::QWEN2,
    &llama::QWEN3,
    &llama::GEMMA,
    &moe::MIXTRAL,
    &moe::QWEN3_MOE,
    &moe::OLMOE,
    &gpt_oss::GPT_OSS,
    &gemma::GEMMA2,
    &gemma::GEMMA3,
    &modern::PHI3,
    &modern::OLMO2,
    &modern::GRANITE,
    &modern::SMOLLM3,
    &gpt_neox::GPT_NEOX,
    &seq2seq::BART,
    &seq2seq::MBART,
    &seq2seq::MARIAN,
    &seq2seq::T5,
];

/// The `model_type`s attnviz opens, for messages.
pub fn supported_model_types() -> String {
    FAMILIES.iter().flat_map(|f| f.model_types.iter().copied()).collect::<Vec<_>>().join(", ")
}

/// Reads `config.json` text: the family it names and the network it describes (an
/// encoder–decoder's encoder).
pub fn describe(text: &str) -> Result<(&'static Family, Description), ModelError> {
    describe_full(text).map(|(family, desc, _)| (family, desc))
}

/// [`describe`], with an encoder–decoder's decoder.
pub fn describe_full(text: &str) -> Result<(&'static Family, Description, Option<DecoderSpec>), ModelError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ModelError::Config(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(ModelError::Config("config.json is not a JSON object".into()));
    };
    let keys = Keys(map);
    let model_type = match keys.0.get("model_type") {
        Some(Value::String(s)) => s.clone(),
        // Old BERT checkpoints have no model_type; their architectures say what they are.
        None if keys.architectures().iter().any(|a| a.starts_with("Bert")) => "bert".into(),
        Some(other) => return Err(ModelError::Config(format!("\"model_type\" must be a string, got {other}"))),
        None => {
            return Err(ModelError::Unsupported {
                field: "model_type".into(),
                value: "(missing)".into(),
                why: format!("config.json must name its family; supported: {}", supported_model_types()),
            });
        }
    };
    let family = FAMILIES.iter().find(|f| f.model_types.contains(&model_type.as_str())).ok_or_else(|| {
        ModelError::Unsupported {
            field: "model_type".into(),
            value: model_type.clone(),
            why: format!("supported: {}", supported_model_types()),
        }
    })?;
    let mut desc = (family.describe)(&keys)?;
    let decoder = match family.decoder {
        Some(describe_decoder) => {
            let mut spec = describe_decoder(&keys)?;
            spec.desc.family.clone_from(&model_type);
            Some(spec)
        }
        None => None,
    };
    desc.family = model_type;
    bounded_tensors(&desc)?;
    if let Some(d) = &decoder {
        bounded_tensors(&d.desc)?;
    }
    Ok((family, desc, decoder))
}

/// Checks every tensor a description implies against [`MAX_TENSOR_ELEMENTS`], whatever keys the
/// family combined to get its shape (each key is bounded on its own; their products are checked here).
fn bounded_tensors(desc: &Description) -> Result<(), ModelError> {
    for crate::model::engine::Expected { name, shape, .. } in crate::model::engine::expected_tensors(desc) {
        let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if count.is_none_or(|c| c > MAX_TENSOR_ELEMENTS) {
            return Err(ModelError::Config(format!(
                "the sizes imply tensor {name} of shape {shape:?}, implausibly large (the limit is {MAX_TENSOR_ELEMENTS} elements)"
            )));
        }
    }
    Ok(())
}

/// The keys of one `config.json`, read with errors that name the key.
pub struct Keys(pub Map<String, Value>);

impl Keys {
    fn bad(key: &str, value: &Value, want: &str) -> ModelError {
        ModelError::Config(format!("\"{key}\" must be {want}, got {value}"))
    }

    /// A required count.
    pub fn usize(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_usize(key)?.ok_or_else(|| ModelError::Config(format!("missing field `{key}`")))
    }

    /// An optional count (absent or null: None).
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > MAX_COUNT => {
                    Err(unsupported(key, n.to_string(), &format!("is implausibly large (the limit is {MAX_COUNT})")))
                }
                Some(n) => Ok(Some(n as usize)),
                None => Err(Self::bad(key, v, "a whole number ≥ 0")),
            },
        }
    }

    /// An optional signed number (DeBERTa's `-1` for "unset").
    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, ModelError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if n.unsigned_abs() > MAX_COUNT => {
                    Err(unsupported(key, n.to_string(), &format!("is implausibly large (the limit is ±{MAX_COUNT})")))
                }
                Some(n) => Ok(Some(n)),
                None => Err(Self::bad(key, v, "a whole number")),
            },
        }
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, ModelError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| Self::bad(key, v, "a number")),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Self::bad(key, v, "a string")),
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, ModelError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Self::bad(key, v, "true or false")),
        }
    }

    /// `architectures`, or empty.
    pub fn architectures(&self) -> Vec<String> {
        self.0
            .get("architectures")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }

    /// The norm epsilon under `key`, or `default`; must be a positive number.
    pub fn eps(&self, key: &str, default: f64) -> Result<f32, ModelError> {
        let eps = self.opt_f64(key)?.unwrap_or(default);
        if eps.is_finite() && eps > 0.0 {
            Ok(eps as f32)
        } else {
            Err(unsupported(key, eps.to_string(), "must be a positive number"))
        }
    }

    /// The activation under `key`, or `default`.
    pub fn activation(&self, key: &str, default: &str) -> Result<super::describe::Activation, ModelError> {
        let name = self.opt_str(key)?.unwrap_or(default);
        super::describe::Activation::from_name(name).ok_or_else(|| {
            unsupported(key, name.to_string(), &format!("supported: {}", super::describe::Activation::NAMES))
        })
    }

    /// Refuses a key whose value changes the maths in a way this engine does not run: `ok` says
    /// which values are fine (an absent key is fine).
    pub fn refuse_unless(&self, key: &str, ok: impl Fn(&Value) -> bool, why: &str) -> Result<(), ModelError> {
        match self.0.get(key) {
            Some(v) if !v.is_null() && !ok(v) => Err(unsupported(key, v.to_string(), why)),
            _ => Ok(()),
        }
    }

    /// Encoder families refuse configs that turn them into decoders.
    pub fn refuse_decoder_settings(&self) -> Result<(), ModelError> {
        let is_false = |v: &Value| v == &Value::Bool(false);
        self.refuse_unless("is_decoder", is_false, "attnviz runs this family as an encoder only")?;
        self.refuse_unless("add_cross_attention", is_false, "cross-attention is not supported for this family")
    }
}

/// An unsupported-setting error naming the key.
pub fn unsupported(field: &str, value: String, why: &str) -> ModelError {
    ModelError::Unsupported { field: field.to_string(), value, why: why.to_string() }
}

/// BERT's names for [`Sizes::read`]: vocabulary, width, layers, heads, feed-forward width (most
/// encoder families keep them).
pub const BERT_SIZE_KEYS: [&str; 5] =
    ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"];

/// The sizes every family shares, checked against sane bounds before anything is allocated.
pub struct Sizes {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Layers run.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Feed-forward width.
    pub intermediate: usize,
}

impl Sizes {
    /// Reads the sizes under the family's key names (`[vocab, hidden, layers, heads, intermediate]`),
    /// `intermediate` defaulting to `default_intermediate(hidden)` when absent.
    pub fn read(keys: &Keys, names: [&str; 5], default_intermediate: Option<usize>) -> Result<Self, ModelError> {
        Self::read_with_head_dim(keys, names, default_intermediate, None)
    }

    /// [`Sizes::read`] for a family whose config may state the head size under `head_dim_key`
    /// (T5's `d_kv`, Llama's `head_dim`): when it does, heads × head size need not equal the
    /// hidden size (mT5-small: 6 heads of 64 over 512), so `hidden` need not divide by `heads`.
    pub fn read_with_head_dim(
        keys: &Keys,
        names: [&str; 5],
        default_intermediate: Option<usize>,
        head_dim_key: Option<&str>,
    ) -> Result<Self, ModelError> {
        let [vocab, hidden, layers, heads, intermediate] = names;
        let sizes = Self {
            vocab: keys.usize(vocab)?,
            hidden: keys.usize(hidden)?,
            layers: keys.usize(layers)?,
            heads: keys.usize(heads)?,
            intermediate: match keys.opt_usize(intermediate)?.or(default_intermediate) {
                Some(i) => i,
                None => keys.usize(intermediate)?,
            },
        };
        for (key, value, max) in [
            (vocab, sizes.vocab, MAX_VOCAB),
            (hidden, sizes.hidden, MAX_WIDTH),
            (layers, sizes.layers, MAX_LAYERS),
            (heads, sizes.heads, MAX_HEADS),
            (intermediate, sizes.intermediate, 4 * MAX_WIDTH),
        ] {
            bounded(key, value, 1, max)?;
        }
        let head_dim_given = match head_dim_key {
            Some(key) => keys.opt_usize(key)?.is_some(),
            None => false,
        };
        if !head_dim_given && !sizes.hidden.is_multiple_of(sizes.heads) {
            return Err(unsupported(
                heads,
                sizes.heads.to_string(),
                &format!("{hidden} {} is not divisible by it", sizes.hidden),
            ));
        }
        Ok(sizes)
    }
}

/// Checks `min ≤ value ≤ max` for a count read from a file.
pub fn bounded(key: &str, value: usize, min: usize, max: usize) -> Result<usize, ModelError> {
    if value < min || value > max {
        let why = if value < min {
            format!("must be at least {min}")
        } else {
            format!("is implausibly large (the limit is {max})")
        };
        return Err(unsupported(key, value.to_string(), &why));
    }
    Ok(value)
}

/// The BERT shape every encoder family departs from (transformers' modular files write families the
/// same way): post-LN, a learned position table of `rows` read from row 0, an embedding norm, no
/// token types, `q·k / √head_dim`, no relative terms, one weight set per layer, no final norm,
/// sentence pairs read. Each family overrides what differs.
pub fn post_ln_encoder(s: &Sizes, activation: Activation, norm_eps: f32, rows: usize) -> Description {
    Description {
        family: String::new(),
        vocab_size: s.vocab,
        hidden: s.hidden,
        layers: s.layers,
        heads: s.heads,
        kv_heads: s.heads,
        head_dim: s.hidden / s.heads,
        intermediate: s.intermediate,
        activation,
        feed_forward: FeedForward::Plain,
        biases: Biases::ALL,
        experts: None,
        norm_kind: NormKind::Layer,
        rotary: None,
        qk_norm: QkNorm::None,
        local_rotary: None,
        rope_layers: Vec::new(),
        attn_softcap: None,
        attn_sinks: false,
        final_softcap: None,
        input_norms: true,
        output_norms: false,
        residual_scale: 1.0,
        sliding_window: None,
        sliding_layers: Vec::new(),
        parallel_residual: false,
        lm_head: LmHead::None,
        logit_scale: 1.0,
        logits_bias: false,
        cross_attention: false,
        embedding: EmbeddingDesc {
            width: s.hidden,
            positions: Positions::Table { rows, offset: 0 },
            token_types: 0,
            scale: 1.0,
            norm: true,
            positions_first: false,
            projection: None,
            projection_bias: true,
        },
        reads_token_types: false,
        reads_pairs: true,
        causal: false,
        score_scale: inverse_sqrt(s.hidden / s.heads),
        position_bias: PositionBias::None,
        norm: NormPlacement::Post,
        norm_eps,
        final_norm: false,
        layer_weights: (0..s.layers).collect(),
        max_len: rows,
        pad_token_id: None,
    }
}

/// `d^-0.5` as Python computes it (in double), applied as f32: the usual score factor.
pub fn inverse_sqrt(d: usize) -> f32 {
    (d as f64).powf(-0.5) as f32
}

/// The length of a position table, bounded.
pub fn positions(keys: &Keys, key: &str) -> Result<usize, ModelError> {
    bounded(key, keys.usize(key)?, 1, MAX_POSITIONS)
}

/// Renames a checkpoint's tensors through a table of module paths: the first of `prefixes` found is
/// stripped (`bert.`, `roberta.`, …), then a name whose module path matches a `from` pattern (`{}`
/// stands for a layer number) is renamed to the matching `to`, with `.gamma`/`.beta` read as
/// `.weight`/`.bias`. Tensors matching no row are dropped (heads, poolers, buffers).
pub fn rename_by_table(tensors: Tensors, prefixes: &[&str], table: &[(&str, &str)]) -> Tensors {
    tensors.into_iter().filter_map(|(name, t)| rename_one(&name, prefixes, table).map(|n| (n, t))).collect()
}

/// [`rename_by_table`] for one name.
pub fn rename_one(name: &str, prefixes: &[&str], table: &[(&str, &str)]) -> Option<String> {
    let name = prefixes.iter().find_map(|p| name.strip_prefix(p)).unwrap_or(name);
    let (module, leaf) = name.rsplit_once('.')?;
    let leaf = match leaf {
        "gamma" => "weight",
        "beta" => "bias",
        "weight" | "bias" => leaf,
        _ => return None,
    };
    table.iter().find_map(|(from, to)| {
        let number = match_pattern(module, from)?;
        Some(format!("{}.{leaf}", to.replace("{}", &number)))
    })
}

/// A checkpoint name inside a list of layers, `{N}.{module}.{leaf}` (after the list's prefix): the
/// layer number, the module path and the leaf; None for anything else.
pub fn layer_part(rest: &str) -> Option<(&str, &str, &str)> {
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (module, leaf) = rest.rsplit_once('.')?;
    Some((layer, module, leaf))
}

/// Whether `module` matches `pattern` (with at most one `{}` standing for digits); returns the digits.
fn match_pattern(module: &str, pattern: &str) -> Option<String> {
    match pattern.split_once("{}") {
        None => (module == pattern).then(String::new),
        Some((head, tail)) => {
            let digits = module.strip_prefix(head)?.strip_suffix(tail)?;
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_renames_layers_and_drops_the_rest() {
        let table = [("encoder.layer.{}.attention.self.query", "layer.{}.q"), ("embeddings.LayerNorm", "embed.norm")];
        let r = |n: &str| rename_one(n, &["bert."], &table);
        assert_eq!(r("bert.encoder.layer.11.attention.self.query.weight").as_deref(), Some("layer.11.q.weight"));
        assert_eq!(r("embeddings.LayerNorm.gamma").as_deref(), Some("embed.norm.weight"));
        assert_eq!(r("embeddings.LayerNorm.beta").as_deref(), Some("embed.norm.bias"));
        assert_eq!(r("encoder.layer.x.attention.self.query.weight"), None);
        assert_eq!(r("encoder.layer..attention.self.query.weight"), None);
        assert_eq!(r("pooler.dense.weight"), None);
        assert_eq!(r("embeddings.position_ids"), None);
    }

    #[test]
    fn a_stated_head_size_need_not_divide_the_hidden_size() {
        // mT5-small's shape: 6 heads of 64 over a 512-wide stream.
        let t5 = r#"{"model_type":"t5","vocab_size":100,"d_model":512,"num_layers":1,"num_heads":6,"d_kv":64,
            "d_ff":64,"decoder_start_token_id":0}"#;
        let (_, enc, dec) = describe_full(t5).unwrap();
        assert_eq!((enc.heads, enc.head_dim, enc.hidden), (6, 64, 512));
        assert_eq!(dec.unwrap().desc.head_dim, 64);
        // Without d_kv the head size is hidden / heads, which must then divide.
        let err = describe(&t5.replace(r#""d_kv":64,"#, "")).unwrap_err().to_string();
        assert!(err.contains("num_heads") && err.contains("divisible"), "{err}");
        let llama = r#"{"model_type":"llama","vocab_size":100,"hidden_size":60,"num_hidden_layers":1,
            "num_attention_heads":7,"head_dim":8,"intermediate_size":64}"#;
        assert_eq!(describe(llama).unwrap().1.head_dim, 8);
        assert!(describe(&llama.replace(r#""head_dim":8,"#, "")).is_err());
    }

    #[test]
    fn unknown_families_and_bad_keys_are_named() {
        let err = describe(r#"{"model_type":"whisper"}"#).unwrap_err().to_string();
        assert!(err.contains("model_type") && err.contains("whisper") && err.contains("roberta"), "{err}");
        let err = describe(r#"{"model_type":7}"#).unwrap_err().to_string();
        assert!(err.contains("model_type"), "{err}");
        assert!(describe("[1]").unwrap_err().to_string().contains("object"));
        assert!(describe("{").unwrap_err().to_string().contains("config"));
    }

    #[test]
    fn absurd_sizes_are_refused_before_anything_is_allocated() {
        let cfg = r#"{"model_type":"bert","vocab_size":10,"hidden_size":8,"num_hidden_layers":1000000000,
            "num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":4}"#;
        let err = describe(cfg).unwrap_err().to_string();
        assert!(err.contains("num_hidden_layers") && err.contains("1000000000"), "{err}");
        let cfg = cfg.replace("1000000000", "-3");
        assert!(describe(&cfg).unwrap_err().to_string().contains("num_hidden_layers"));
    }
}
