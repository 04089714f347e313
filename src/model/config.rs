//! A serde mirror of a Hugging Face BERT `config.json`, checked for what this encoder supports.

use serde::Deserialize;

use super::ModelError;

/// Activation of the feed-forward block (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HiddenAct {
    /// Exact GELU with erf (`gelu`), Hugging Face's `GELUActivation`.
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`), Hugging Face's `NewGELUActivation`.
    GeluNew,
    /// `relu`.
    Relu,
}

/// The fields of `config.json` that shape a BERT encoder; unknown keys are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct RawConfig {
    /// `model_type`, "bert" for the models this encoder loads.
    #[serde(default)]
    pub model_type: Option<String>,
    /// `architectures`, e.g. `["BertModel"]`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Feed-forward activation name.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Length of the learned position table.
    pub max_position_embeddings: usize,
    /// Number of segment (token type) embeddings.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// `LayerNorm` epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Kind of position embedding; only "absolute" is supported.
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_pos_type() -> String {
    "absolute".into()
}

/// A validated BERT configuration.
/// Which family of checkpoints a config describes: how tensors are named and blocks are wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// BERT-style encoders: post-LN, bidirectional, token types.
    #[default]
    Bert,
    /// GPT-2-style decoders: pre-LN, causal, learned positions, a final norm, no token types.
    Gpt2,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Checkpoint family.
    pub family: Family,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    pub hidden_act: HiddenAct,
    /// Length of the learned position table (the longest input).
    pub max_position_embeddings: usize,
    /// Number of segment embeddings.
    pub type_vocab_size: usize,
    /// `LayerNorm` epsilon.
    pub layer_norm_eps: f64,
}

impl Config {
    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Parses and validates `config.json` text; errors name the field at fault.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ModelError::Config(e.to_string()))?;
        if value.get("model_type").and_then(serde_json::Value::as_str) == Some("gpt2") {
            let raw: RawGpt2Config = serde_json::from_value(value).map_err(|e| ModelError::Config(e.to_string()))?;
            return raw.validate();
        }
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| ModelError::Config(e.to_string()))?;
        raw.validate()
    }
}

impl RawConfig {
    /// Checks that this is a BERT encoder this crate can run faithfully.
    pub fn validate(self) -> Result<Config, ModelError> {
        let unsupported = |field: &str, value: String, why: &str| ModelError::Unsupported {
            field: field.to_string(),
            value,
            why: why.to_string(),
        };
        match self.model_type.as_deref() {
            Some("bert") => {}
            None if self.architectures.iter().any(|a| a.starts_with("Bert")) => {}
            other => {
                return Err(unsupported(
                    "model_type",
                    other.unwrap_or("(missing)").to_string(),
                    "supported: BERT-family encoders (model_type \"bert\") and GPT-2 decoders (\"gpt2\")",
                ));
            }
        }
        if self.position_embedding_type != "absolute" {
            return Err(unsupported(
                "position_embedding_type",
                self.position_embedding_type,
                "only learned absolute position embeddings are supported",
            ));
        }
        let hidden_act = match self.hidden_act.as_str() {
            "gelu" => HiddenAct::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => HiddenAct::GeluNew,
            "relu" => HiddenAct::Relu,
            other => return Err(unsupported("hidden_act", other.to_string(), "supported: gelu, gelu_new, relu")),
        };
        for (field, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if value == 0 {
                return Err(unsupported(field, "0".into(), "must be at least 1"));
            }
        }
        if self.hidden_size % self.num_attention_heads != 0 {
            return Err(unsupported(
                "num_attention_heads",
                self.num_attention_heads.to_string(),
                &format!("hidden_size {} is not divisible by it", self.hidden_size),
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(unsupported("layer_norm_eps", self.layer_norm_eps.to_string(), "must be a positive number"));
        }
        Ok(Config {
            family: Family::Bert,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: self.type_vocab_size,
            layer_norm_eps: self.layer_norm_eps,
        })
    }
}

/// The keys of a GPT-2 `config.json` this decoder reads.
#[derive(Debug, Clone, Deserialize)]
pub struct RawGpt2Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Heads per block.
    pub n_head: usize,
    /// Longest input (size of the position table).
    pub n_positions: usize,
    /// Feed-forward width; null means 4 × `n_embd`.
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// Activation of the feed-forward block.
    #[serde(default = "default_gpt2_act")]
    pub activation_function: String,
    /// Layer-norm epsilon.
    #[serde(default = "default_gpt2_eps")]
    pub layer_norm_epsilon: f64,
    /// Scores divided by √`head_dim` (true in every released GPT-2).
    #[serde(default = "default_true")]
    pub scale_attn_weights: bool,
    /// Scores further divided by the layer number (not supported).
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
}

fn default_gpt2_act() -> String {
    "gelu_new".into()
}
fn default_gpt2_eps() -> f64 {
    1e-5
}
fn default_true() -> bool {
    true
}

impl RawGpt2Config {
    /// Checks what this decoder supports and gives the common [`Config`].
    pub fn validate(self) -> Result<Config, ModelError> {
        if !self.scale_attn_weights || self.scale_attn_by_inverse_layer_idx {
            return Err(ModelError::Unsupported {
                field: "scale_attn_weights / scale_attn_by_inverse_layer_idx".into(),
                value: format!("{} / {}", self.scale_attn_weights, self.scale_attn_by_inverse_layer_idx),
                why: "only GPT-2's standard 1/√head_dim score scaling is supported".into(),
            });
        }
        let bert_like = RawConfig {
            model_type: Some("bert".into()),
            architectures: Vec::new(),
            vocab_size: self.vocab_size,
            hidden_size: self.n_embd,
            num_hidden_layers: self.n_layer,
            num_attention_heads: self.n_head,
            intermediate_size: self.n_inner.unwrap_or(4 * self.n_embd),
            hidden_act: self.activation_function,
            max_position_embeddings: self.n_positions,
            type_vocab_size: 1,
            layer_norm_eps: self.layer_norm_epsilon,
            position_embedding_type: "absolute".into(),
        };
        let rename = |e: ModelError| match e {
            ModelError::Unsupported { field, value, why } => {
                let field = match field.as_str() {
                    "hidden_size" => "n_embd",
                    "num_hidden_layers" => "n_layer",
                    "num_attention_heads" => "n_head",
                    "max_position_embeddings" => "n_positions",
                    "hidden_act" => "activation_function",
                    "layer_norm_eps" => "layer_norm_epsilon",
                    "intermediate_size" => "n_inner",
                    other => other,
                }
                .to_string();
                ModelError::Unsupported { field, value, why: why.replace("hidden_size", "n_embd") }
            }
            other => other,
        };
        Ok(Config { family: Family::Gpt2, ..bert_like.validate().map_err(rename)? })
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    const MINI: &str = r#"{"model_type":"bert","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,
        "num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":4}"#;

    #[test]
    fn defaults_fill_optional_keys() {
        let c = Config::from_json(MINI).unwrap();
        assert_eq!(c.hidden_act, HiddenAct::Gelu);
        assert_eq!(c.type_vocab_size, 2);
        assert_eq!(c.layer_norm_eps, 1e-12);
        assert_eq!(c.head_dim(), 4);
    }

    fn error_for(patch: &str) -> String {
        let text = MINI.replacen('{', &format!("{{{patch},"), 1);
        Config::from_json(&text).unwrap_err().to_string()
    }

    #[test]
    fn unsupported_settings_name_the_field() {
        assert!(error_for(r#""hidden_act":"swish""#).contains("hidden_act"));
        assert!(error_for(r#""position_embedding_type":"relative_key""#).contains("position_embedding_type"));
        let t5 = MINI.replace("\"bert\"", "\"t5\"");
        assert!(Config::from_json(&t5).unwrap_err().to_string().contains("model_type"));
        // A GPT-2 config names GPT-2's own keys in its errors.
        let gpt = r#"{"model_type":"gpt2","vocab_size":10,"n_embd":8,"n_layer":1,"n_head":3,"n_positions":4}"#;
        assert!(
            Config::from_json(gpt).unwrap_err().to_string().contains("n_head"),
            "{}",
            Config::from_json(gpt).unwrap_err()
        );
        let gpt = r#"{"model_type":"gpt2","vocab_size":10,"n_embd":8,"n_layer":1,"n_head":2,"n_positions":4}"#;
        let cfg = Config::from_json(gpt).unwrap();
        assert_eq!((cfg.family, cfg.intermediate_size, cfg.type_vocab_size), (Family::Gpt2, 32, 1));
        let heads = MINI.replace("\"num_attention_heads\":2", "\"num_attention_heads\":3");
        assert!(Config::from_json(&heads).unwrap_err().to_string().contains("num_attention_heads"));
        assert!(Config::from_json("{").unwrap_err().to_string().contains("config"));
        let missing = MINI.replace("\"hidden_size\":8,", "");
        assert!(Config::from_json(&missing).unwrap_err().to_string().contains("hidden_size"));
    }
}
