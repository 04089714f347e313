//! A transformer described as data: what differs between model families, in named fields. One
//! engine ([`super::engine::Network`]) runs any description; each family's file in
//! [`super::families`] maps its `config.json` keys and tensor names onto one.
//!
//! Learned from `TransformerLens`' `HookedTransformerConfig` and llama.cpp's architecture tables: a
//! quirk that changes the maths (a positions offset, a relative bias, disentangled terms) is a
//! field here with a test, never an `if family == …` inside the forward pass.

use serde::Serialize;

/// Activation of the feed-forward block, as Hugging Face's `ACT2FN` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Activation {
    /// `gelu`: exact GELU with erf (`GELUActivation`).
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`: the tanh approximation (`NewGELUActivation`).
    GeluTanh,
    /// `relu`.
    Relu,
}

impl Activation {
    /// The activation a config's name stands for, or None for one this engine does not run.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(Self::GeluTanh),
            "relu" => Some(Self::Relu),
            _ => None,
        }
    }

    /// The names [`Self::from_name`] accepts, for error messages.
    pub const NAMES: &'static str = "gelu, gelu_new, gelu_pytorch_tanh, relu";
}

/// Where the norms of a block sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
pub enum NormPlacement {
    /// After each residual addition (BERT and its descendants, the original transformer).
    #[default]
    Post,
    /// Before each sub-block (GPT-2 and most modern networks), usually with a final norm.
    Pre,
}

/// How absolute positions enter the embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Positions {
    /// No absolute positions (relative positions only, or none at all).
    None,
    /// A stored table (learned, or DistilBERT's stored sinusoids): token `i` adds row `offset + i`.
    /// RoBERTa-style models start after the padding index (`offset = pad_token_id + 1`).
    Table {
        /// Rows of the table.
        rows: usize,
        /// The row of the first token.
        offset: usize,
    },
}

/// The embeddings: token, position and token-type tables, norm and projection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingDesc {
    /// Width of the embedding tables (ALBERT and ELECTRA embed narrower than the hidden width).
    pub width: usize,
    /// Absolute positions.
    pub positions: Positions,
    /// Rows of the token-type table (0: none).
    pub token_types: usize,
    /// Factor on the token embeddings (1 for the families here).
    pub scale: f32,
    /// A `LayerNorm` over the summed embeddings.
    pub norm: bool,
    /// Positions are added before token types (DeBERTa) rather than after (BERT).
    pub positions_first: bool,
    /// A linear projection from `width` to the hidden width, and whether it comes before the
    /// norm (DeBERTa's `embed_proj`) or after it (ALBERT's `embedding_hidden_mapping_in`, ELECTRA's
    /// `embeddings_project`). None when the widths agree.
    pub projection: Option<Projection>,
    /// The projection has a bias (DeBERTa's `embed_proj` has none).
    pub projection_bias: bool,
}

/// Where an embedding projection sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Projection {
    /// Before the embedding norm.
    BeforeNorm,
    /// After it.
    AfterNorm,
}

/// A relative-position term added to every score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum PositionBias {
    /// Scores are content only.
    None,
    /// A learned scalar per head and relative-distance bucket (MPNet; T5 buckets the same way):
    /// `bias[bucket(key_pos − query_pos)][head]`, from `rel.bias.weight` (`rows × heads`).
    Buckets {
        /// Number of buckets the distances fall in (half per direction).
        buckets: usize,
        /// Distances from here on share the last bucket.
        max_distance: usize,
        /// Rows of the bias table (at least `buckets`).
        rows: usize,
    },
    /// DeBERTa's disentangled attention: content→position and position→content terms from a
    /// shared table of relative-position embeddings (`rel.embeddings.weight`, `2·span × hidden`).
    Disentangled(Disentangled),
}

/// The settings of DeBERTa-v2/v3 disentangled attention.
#[allow(clippy::struct_excessive_bools)] // independent switches of the config, not a state machine
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disentangled {
    /// `att_span`: relative positions are clamped to `[-span, span)` after bucketing.
    pub span: usize,
    /// Log buckets: (`position_buckets`, `max_relative_positions`), or None for plain distances.
    pub log_buckets: Option<(usize, usize)>,
    /// The content→position term (`c2p`).
    pub c2p: bool,
    /// The position→content term (`p2c`).
    pub p2c: bool,
    /// The content projections also project the position embeddings (`share_att_key`); else
    /// each layer has `pos_k` / `pos_q` of its own.
    pub shared_projections: bool,
    /// A `LayerNorm` over the relative-position embeddings (`norm_rel_ebd = "layer_norm"`).
    pub norm: bool,
}

/// One network, as data.
#[allow(clippy::struct_excessive_bools)] // independent properties of a network, not a state machine
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Description {
    /// The family, as `config.json`'s `model_type` names it ("bert", "roberta", "deberta-v2", …).
    pub family: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Layers as run, one recorded attention each (ALBERT runs shared weights several times).
    pub layers: usize,
    /// Attention heads per layer.
    pub heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward width.
    pub intermediate: usize,
    /// Feed-forward activation.
    pub activation: Activation,
    /// The embeddings.
    pub embedding: EmbeddingDesc,
    /// The model reads the token types its tokenizer assigns (BERT, ALBERT, ELECTRA, DeBERTa);
    /// else it gets zeros (RoBERTa's tokenizer passes none).
    pub reads_token_types: bool,
    /// The family reads sentence pairs (encoders); a language model reads one text.
    pub reads_pairs: bool,
    /// Keys after the query are masked (decoders).
    pub causal: bool,
    /// Factor on `q·k` (usually `head_dim^-0.5`; DeBERTa divides by `√(head_dim · terms)`).
    pub score_scale: f32,
    /// Relative-position terms added to the scores.
    pub position_bias: PositionBias,
    /// Norm placement.
    pub norm: NormPlacement,
    /// Norm epsilon.
    pub norm_eps: f32,
    /// A norm after the last layer.
    pub final_norm: bool,
    /// The weight set each layer runs (`layer.{w}.*`): `[0, 1, 2, …]` unless layers share weights.
    pub layer_weights: Vec<usize>,
    /// The longest input in tokens, special tokens included.
    pub max_len: usize,
    /// The id a padding token has (RoBERTa-style position offsets start after it).
    pub pad_token_id: Option<u32>,
}

impl Description {
    /// Number of distinct weight sets (`layer.{w}`).
    pub fn weight_sets(&self) -> usize {
        self.layer_weights.iter().max().map_or(0, |&w| w + 1)
    }

    /// Every tensor the engine needs under its canonical name, with its shape.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (h, e, i) = (self.hidden, self.embedding.width, self.intermediate);
        let mut out = vec![("embed.tokens.weight".to_string(), vec![self.vocab_size, e])];
        if let Positions::Table { rows, .. } = self.embedding.positions {
            out.push(("embed.positions.weight".into(), vec![rows, e]));
        }
        if self.embedding.token_types > 0 {
            out.push(("embed.types.weight".into(), vec![self.embedding.token_types, e]));
        }
        let norm = |out: &mut Vec<(String, Vec<usize>)>, name: &str, size: usize| {
            out.push((format!("{name}.weight"), vec![size]));
            out.push((format!("{name}.bias"), vec![size]));
        };
        if self.embedding.norm {
            let size = if self.embedding.projection == Some(Projection::BeforeNorm) { h } else { e };
            norm(&mut out, "embed.norm", size);
        }
        if self.embedding.projection.is_some() {
            out.push(("embed.project.weight".into(), vec![h, e]));
            if self.embedding.projection_bias {
                out.push(("embed.project.bias".into(), vec![h]));
            }
        }
        match &self.position_bias {
            PositionBias::None => {}
            PositionBias::Buckets { rows, .. } => out.push(("rel.bias.weight".into(), vec![*rows, self.heads])),
            PositionBias::Disentangled(d) => {
                out.push(("rel.embeddings.weight".into(), vec![2 * d.span, h]));
                if d.norm {
                    norm(&mut out, "rel.norm", h);
                }
            }
        }
        let attn = self.heads * self.head_dim;
        for w in 0..self.weight_sets() {
            let p = format!("layer.{w}");
            for (name, rows, cols) in [("q", attn, h), ("k", attn, h), ("v", attn, h), ("o", h, attn)] {
                out.push((format!("{p}.{name}.weight"), vec![rows, cols]));
                out.push((format!("{p}.{name}.bias"), vec![rows]));
            }
            if let PositionBias::Disentangled(d) = &self.position_bias {
                if !d.shared_projections {
                    if d.c2p {
                        out.push((format!("{p}.pos_k.weight"), vec![attn, h]));
                        out.push((format!("{p}.pos_k.bias"), vec![attn]));
                    }
                    if d.p2c {
                        out.push((format!("{p}.pos_q.weight"), vec![attn, h]));
                    }
                }
            }
            norm(&mut out, &format!("{p}.attn_norm"), h);
            out.push((format!("{p}.up.weight"), vec![i, h]));
            out.push((format!("{p}.up.bias"), vec![i]));
            out.push((format!("{p}.down.weight"), vec![h, i]));
            out.push((format!("{p}.down.bias"), vec![h]));
            norm(&mut out, &format!("{p}.ffn_norm"), h);
        }
        if self.final_norm {
            norm(&mut out, "final_norm", h);
        }
        out
    }

    /// Bytes of f32 weights the engine would hold: for a warning before loading a huge model.
    pub fn weight_bytes(&self) -> u64 {
        self.expected_tensors().iter().map(|(_, shape)| shape.iter().map(|&d| d as u64).product::<u64>() * 4).sum()
    }

    /// A one-line summary: "roberta · 12 layers × 12 heads × 768 wide".
    pub fn summary(&self) -> String {
        format!("{} · {} layers × {} heads × {} wide", self.family, self.layers, self.heads, self.hidden)
    }
}
