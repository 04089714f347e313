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
    /// `silu` / `swish`: `x · sigmoid(x)` (Llama, Mistral, Qwen).
    Silu,
}

impl Activation {
    /// The activation a config's name stands for, or None for one this engine does not run.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(Self::GeluTanh),
            "relu" => Some(Self::Relu),
            "silu" | "swish" => Some(Self::Silu),
            _ => None,
        }
    }

    /// The names [`Self::from_name`] accepts, for error messages.
    pub const NAMES: &'static str = "gelu, gelu_new, gelu_pytorch_tanh, relu, silu";
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

/// Which normalisation the norms are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum NormKind {
    /// `nn.LayerNorm`: mean and variance, weight and bias.
    #[default]
    Layer,
    /// `RMSNorm` (Llama, Mistral, Qwen): `x / √(mean(x²) + ε) · weight`, no bias.
    Rms,
    /// Gemma's `RMSNorm`: `x / √(mean(x²) + ε) · (1 + weight)`.
    RmsPlusOne,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum FeedForward {
    /// `down(act(up(x)))` (BERT, GPT-2, GPT-NeoX).
    #[default]
    Plain,
    /// `down(act(gate(x)) · up(x))` (`SwiGLU` in Llama and its descendants, `GeGLU` in Gemma).
    Gated,
}

/// A mixture of experts in place of the feed-forward block (Mixtral's `MixtralSparseMoeBlock`,
/// Qwen3-MoE's, `OLMoE`'s): a router (`router`, `count × hidden`, no bias) scores every expert, the
/// softmax of those scores is taken in f32, the `top_k` largest are kept (renormalised to sum 1
/// when `renormalise`), and each token's output is the sum, over its chosen experts in ascending
/// id order, of `weight · expert(x)`, each expert a gated feed-forward (`gate`, `up`, `down`) of
/// `width`. Only the chosen experts run for a token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Experts {
    /// Experts per layer (`num_local_experts`, `num_experts`).
    pub count: usize,
    /// Experts each token uses (`num_experts_per_tok`).
    pub top_k: usize,
    /// Each expert's feed-forward width (`intermediate_size`, `moe_intermediate_size`).
    pub width: usize,
    /// The chosen experts' weights are divided by their sum (Mixtral always; Qwen3-MoE and `OLMoE`
    /// when `norm_topk_prob`).
    pub renormalise: bool,
    /// Per weight set: whether its feed-forward is the experts (else a dense one of
    /// `Description::intermediate`: Qwen3-MoE's `mlp_only_layers`, `decoder_sparse_step`).
    pub sparse: Vec<bool>,
    /// How the router's scores become the chosen experts' weights.
    pub gating: Gating,
    /// The router has a bias (`router.bias`: gpt-oss).
    pub router_bias: bool,
    /// What each expert computes between `gate_up` and `down`.
    pub glu: Glu,
}

/// How a router's scores become the chosen experts' weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Gating {
    /// The softmax over every expert, then the top k of it (renormalised when
    /// [`Experts::renormalise`]): Mixtral, Qwen3-MoE, `OLMoE`.
    SoftmaxThenTopK,
    /// The top k of the raw scores, then the softmax over those k (`GptOssTopKRouter`). The
    /// router's distribution a view shows is still the softmax over every expert.
    TopKThenSoftmax,
}

/// What an expert computes from its gate and up projections.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Glu {
    /// `act(gate) · up`, with the description's activation.
    Gated,
    /// gpt-oss's clamped `SwiGLU` (`GptOssExperts._apply_gate`): `gate` clamped above at `limit`,
    /// `up` to `±limit`, then `(up + 1) · gate · sigmoid(alpha · gate)`.
    Clamped {
        /// `swiglu_alpha` (1.702).
        alpha: f32,
        /// `swiglu_limit` (7.0).
        limit: f32,
    },
}

impl Experts {
    /// Whether weight set `w` runs the experts.
    pub fn in_layer(&self, w: usize) -> bool {
        self.sparse.get(w).copied().unwrap_or(false)
    }
}

/// Rotary position embeddings (`RoPE`): q and k of every head are rotated by their position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rotary {
    /// `int(head_dim · partial_rotary_factor)`, the `dim` of transformers' inverse frequencies
    /// (`arange(0, dim, 2) / dim`): the leading `2·⌈dims/2⌉` dimensions of each head rotate (GPT-NeoX
    /// rotates a fraction; the rest pass).
    pub dims: usize,
    /// The base wavelength (`rope_theta`).
    pub theta: f64,
    /// How the frequencies are rescaled for longer contexts.
    pub scaling: RopeScaling,
}

/// Rope scaling, as `rope_type` names it in `modeling_rope_utils.py`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum RopeScaling {
    /// `default`: `θ^(-2i/dims)`.
    None,
    /// `linear`: frequencies divided by `factor`.
    Linear {
        /// The factor.
        factor: f64,
    },
    /// `dynamic` (NTK): past `max_positions` tokens the base grows with the input length.
    Dynamic {
        /// The factor.
        factor: f64,
        /// `max_position_embeddings`: the length from which the base grows.
        max_positions: usize,
    },
    /// `llama3`: low frequencies divided by `factor`, high ones kept, a smooth blend between.
    Llama3 {
        /// The factor.
        factor: f64,
        /// `low_freq_factor`.
        low_freq_factor: f64,
        /// `high_freq_factor`.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`.
        original_max: usize,
    },
    /// `longrope` (Phi-3): each frequency divided by its own factor — `short_factor` up to
    /// `original_max` tokens, `long_factor` past them — and cos/sin scaled by `attention_factor`.
    LongRope {
        /// `short_factor`, one per frequency.
        short: Vec<f64>,
        /// `long_factor`, one per frequency.
        long: Vec<f64>,
        /// `original_max_position_embeddings`.
        original_max: usize,
        /// Factor on cos and sin.
        attention_factor: f64,
    },
    /// `yarn`: interpolation blended with extrapolation by a ramp over the dimensions, and cos/sin
    /// scaled by `attention_factor`.
    Yarn {
        /// The factor.
        factor: f64,
        /// `original_max_position_embeddings`.
        original_max: usize,
        /// Factor on cos and sin.
        attention_factor: f64,
        /// `beta_fast`.
        beta_fast: f64,
        /// `beta_slow`.
        beta_slow: f64,
        /// Round the correction range outward (`truncate`).
        truncate: bool,
    },
}

/// Norms of q and k before the rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum QkNorm {
    /// None.
    None,
    /// One norm of `head_dim` over each head's query and key (Qwen3, Gemma 3: `q_norm` / `k_norm`
    /// of the head's width).
    PerHead,
    /// One norm over the whole query projection and one over the whole key projection (OLMo-2:
    /// `q_norm` of `heads · head_dim`, `k_norm` of `kv_heads · head_dim`).
    Whole,
}

/// Which biases the linear layers have.
#[allow(clippy::struct_excessive_bools)] // one switch per layer kind, as configs state them
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Biases {
    /// q, k and v projections (Qwen2 has them, Llama not unless `attention_bias`).
    pub qkv: bool,
    /// The attention output projection.
    pub output: bool,
    /// The feed-forward layers.
    pub ffn: bool,
}

impl Biases {
    /// Every layer with a bias (BERT, GPT-2).
    pub const ALL: Self = Self { qkv: true, output: true, ffn: true };
    /// No bias anywhere (Llama).
    pub const NONE: Self = Self { qkv: false, output: false, ffn: false };
}

/// Where the language-model head's weights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LmHead {
    /// No next-token head (encoders).
    None,
    /// The token embeddings (`tie_word_embeddings`).
    Tied,
    /// Its own `lm_head.weight` (when the checkpoint has it).
    Own,
}

/// How absolute positions enter the embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Positions {
    /// No absolute positions (relative positions only, or none at all).
    None,
    /// Sinusoids computed, not stored (Marian): `sin` in the first half of the row, `cos` in the
    /// second, `rows` positions.
    Sinusoidal {
        /// Positions.
        rows: usize,
    },
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
        /// Both directions get buckets (encoders); else only keys before the query (T5's
        /// decoder: later keys are masked anyway).
        bidirectional: bool,
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
    /// Attention (query) heads per layer.
    pub heads: usize,
    /// Key/value heads per layer: `heads` for multi-head attention, fewer for grouped-query
    /// attention (query head `h` reads key/value head `h / (heads / kv_heads)`), 1 for multi-query.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward width.
    pub intermediate: usize,
    /// Feed-forward activation.
    pub activation: Activation,
    /// Feed-forward shape.
    pub feed_forward: FeedForward,
    /// Which layers have biases.
    pub biases: Biases,
    /// A mixture of experts in place of the feed-forward block, or None.
    pub experts: Option<Experts>,
    /// The norms' kind.
    pub norm_kind: NormKind,
    /// Rotary positions on q and k (decoders), or None.
    pub rotary: Option<Rotary>,
    /// Norms of q and k before the rotation (of the description's norm kind).
    pub qk_norm: QkNorm,
    /// The rotary positions of the sliding layers when they differ from `rotary` (Gemma 3's
    /// `rope_local_base_freq`, its `rope_parameters["sliding_attention"]`).
    pub local_rotary: Option<Rotary>,
    /// Per layer as run, whether it rotates q and k (`SmolLM3`'s `no_rope_layers`, where 1 means
    /// the layer rotates); empty: every layer does.
    pub rope_layers: Vec<bool>,
    /// Scores become `cap · tanh(score / cap)` after the scale, before the mask (Gemma 2's
    /// `attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Each head has a learned sink logit (`layer.{w}.sinks`, one per head: gpt-oss's
    /// `self_attn.sinks`) that joins every row's softmax as a column that is no key: the
    /// attention over the real keys sums to 1 − the sink's share, and nothing is read from it.
    pub attn_sinks: bool,
    /// Logits become `cap · tanh(logit / cap)` (Gemma 2's `final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// A pre-LN block normalises each sub-block's input (`attn_norm`, `ffn_norm`); OLMo-2's
    /// blocks do not.
    pub input_norms: bool,
    /// A pre-LN block normalises each sub-block's output before it joins the stream
    /// (`attn_out_norm`, `ffn_out_norm`: Gemma 2 and 3's `post_attention_layernorm` and
    /// `post_feedforward_layernorm`, OLMo-2's).
    pub output_norms: bool,
    /// Factor on each sub-block's output as it joins the stream (Granite's
    /// `residual_multiplier`; 1 elsewhere).
    pub residual_scale: f32,
    /// Keys at least this far before the query get zero weight (Mistral's `sliding_window`), in
    /// the layers [`Self::sliding_layers`] names.
    pub sliding_window: Option<usize>,
    /// Per layer as run, whether it attends through `sliding_window` (`layer_types` of Gemma 2
    /// and 3: `"sliding_attention"` or `"full_attention"`); empty: every layer does.
    pub sliding_layers: Vec<bool>,
    /// Attention and feed-forward read the same input and both add to the residual stream
    /// (GPT-NeoX's `use_parallel_residual`).
    pub parallel_residual: bool,
    /// The next-token head.
    pub lm_head: LmHead,
    /// Factor on the final hidden state before a tied head (T5: `d_model^-0.5`; else 1).
    pub logit_scale: f32,
    /// A bias added to the logits (BART's and Marian's `final_logits_bias`, `lm_head.bias`).
    pub logits_bias: bool,
    /// Each layer also attends to an encoder's output (the decoder of an encoder–decoder):
    /// after self-attention, `cross_norm` and `cq`/`ck`/`cv`/`co`, queries from this stack, keys
    /// and values from the encoder.
    pub cross_attention: bool,
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
    /// Whether layer `layer` (as run) routes its tokens to experts.
    pub fn has_experts(&self, layer: usize) -> bool {
        let w = self.layer_weights.get(layer).copied().unwrap_or(layer);
        self.experts.as_ref().is_some_and(|e| e.in_layer(w))
    }

    /// Number of distinct weight sets (`layer.{w}`).
    pub fn weight_sets(&self) -> usize {
        self.layer_weights.iter().max().map_or(0, |&w| w + 1)
    }

    /// Width of the query projections (`heads · head_dim`).
    pub fn query_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of the key and of the value projections (`kv_heads · head_dim`).
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The key/value head query head `h` reads.
    pub fn kv_head_of(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads.max(1)).max(1)
    }

    /// The window layer `layer` attends through, if any.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.sliding_window.filter(|_| self.sliding_layers.get(layer).copied().unwrap_or(true))
    }

    /// Whether layer `layer` rotates q and k (when the description has rotary positions).
    pub fn rotates(&self, layer: usize) -> bool {
        self.rope_layers.get(layer).copied().unwrap_or(true)
    }

    /// The rotary positions layer `layer` runs: none, the description's, or the sliding layers'.
    pub fn rotary_of(&self, layer: usize) -> Option<&Rotary> {
        if !self.rotates(layer) {
            return None;
        }
        match &self.local_rotary {
            Some(local) if self.sliding_layers.get(layer).copied().unwrap_or(false) => Some(local),
            _ => self.rotary.as_ref(),
        }
    }

    /// Whether the rotary frequencies change with the input's length (`dynamic`, `longrope`):
    /// keys kept from a shorter input were rotated otherwise than a fresh pass rotates them.
    pub fn rotary_depends_on_length(&self) -> bool {
        [&self.rotary, &self.local_rotary]
            .into_iter()
            .flatten()
            .any(|r| matches!(r.scaling, RopeScaling::Dynamic { .. } | RopeScaling::LongRope { .. }))
    }

    /// A one-line summary: "roberta · 12 layers × 12 heads × 768 wide" (with "(3 key/value)"
    /// for grouped-query attention, " · 8 experts (top 2)" for a mixture of experts).
    pub fn summary(&self) -> String {
        let kv = if self.kv_heads == self.heads { String::new() } else { format!(" ({} key/value)", self.kv_heads) };
        let experts =
            self.experts.as_ref().map_or(String::new(), |e| format!(" · {} experts (top {})", e.count, e.top_k));
        format!("{} · {} layers × {} heads{kv} × {} wide{experts}", self.family, self.layers, self.heads, self.hidden)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::families::{Sizes, post_ln_encoder};

    #[test]
    fn a_window_applies_to_the_layers_that_slide() {
        let s = Sizes { vocab: 10, hidden: 8, layers: 3, heads: 2, intermediate: 16 };
        let mut d = post_ln_encoder(&s, super::Activation::Gelu, 1e-5, 32);
        assert_eq!(d.window(0), None);
        d.sliding_window = Some(4);
        assert_eq!(d.window(2), Some(4), "no list: every layer slides");
        d.sliding_layers = vec![true, false, true];
        assert_eq!([d.window(0), d.window(1), d.window(2)], [Some(4), None, Some(4)]);
    }
}
