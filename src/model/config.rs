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
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
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
                    "only BERT-family encoders (model_type \"bert\") are supported",
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
        let gpt = MINI.replace("\"bert\"", "\"gpt2\"");
        assert!(Config::from_json(&gpt).unwrap_err().to_string().contains("model_type"));
        let heads = MINI.replace("\"num_attention_heads\":2", "\"num_attention_heads\":3");
        assert!(Config::from_json(&heads).unwrap_err().to_string().contains("num_attention_heads"));
        assert!(Config::from_json("{").unwrap_err().to_string().contains("config"));
        let missing = MINI.replace("\"hidden_size\":8,", "");
        assert!(Config::from_json(&missing).unwrap_err().to_string().contains("hidden_size"));
    }
}
