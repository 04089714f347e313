//! What can go wrong running the network: input that does not fit it, a context that does not
//! fit the pass, weights that do not fit the description.

use thiserror::Error;

/// An error of the engine: every input is checked once, before the pass starts, against this.
#[derive(Debug, Error)]
pub enum EngineError {
    /// No tokens, or not one segment id per token.
    #[error(
        "cannot run {tokens} tokens with {segments} segment ids: the network needs at least one token and one segment id per token"
    )]
    Segments {
        /// Tokens given.
        tokens: usize,
        /// Segment ids given.
        segments: usize,
    },
    /// More tokens (with those already cached) than the model has positions.
    #[error("{tokens} tokens exceed the model's {max} positions")]
    TooLong {
        /// Tokens in all.
        tokens: usize,
        /// The model's positions.
        max: usize,
    },
    /// A token id past the vocabulary.
    #[error("token id {id} is outside the vocabulary ({vocab})")]
    TokenId {
        /// The id.
        id: u32,
        /// The vocabulary's size.
        vocab: usize,
    },
    /// A token type past the model's table.
    #[error("token type {token_type} is outside the model's {types} token types")]
    TokenType {
        /// The type.
        token_type: u32,
        /// The model's token types.
        types: usize,
    },
    /// A key/value cache asked of a model whose tokens cannot run one at a time.
    #[error("{family} is not a causal language model without relative positions: it cannot run token by token")]
    NotCausal {
        /// The family.
        family: String,
    },
    /// A key/value cache made for another network.
    #[error("the key/value cache holds {cache} layers; this network has {layers}")]
    ForeignCache {
        /// Layers of the cache.
        cache: usize,
        /// Layers of the network.
        layers: usize,
    },
    /// A decoder with cross-attention run without its encoder's output.
    #[error("{family}'s decoder attends to its encoder: it cannot run without the encoder's output")]
    NeedsEncoder {
        /// The family.
        family: String,
    },
    /// An encoder's output given to a network without cross-attention.
    #[error("{family} has no cross-attention")]
    NoCrossAttention {
        /// The family.
        family: String,
    },
    /// An encoder output whose width is not the decoder's.
    #[error("the encoder output ({values} values) does not match the decoder's width ({hidden})")]
    EncoderWidth {
        /// Values given.
        values: usize,
        /// The decoder's hidden size.
        hidden: usize,
    },
    /// A key/value cache whose layers below `first_layer` are incomplete (a resumed pass made
    /// it), given to a pass that starts below it.
    #[error("the key/value cache holds layers from {first_layer} on; a pass starting at layer {start} cannot use it")]
    PartialCache {
        /// Its first complete layer.
        first_layer: usize,
        /// Where the pass starts.
        start: usize,
    },
    /// A pass resumed at a layer it does not run, or with a stream of another size.
    #[error(
        "cannot resume the pass at layer {layer} with {values} values: it runs {layers} layers and the stream entering one holds {expected}"
    )]
    Resume {
        /// The layer asked for.
        layer: usize,
        /// Layers the pass runs.
        layers: usize,
        /// Values given.
        values: usize,
        /// Values of the stream.
        expected: usize,
    },
    /// Interventions that do not fit the model.
    #[error("intervention: {0}")]
    Intervention(String),
    /// A layer the kept streams do not hold.
    #[error("layer {layer} is not among the {layers} layers these streams hold for this network")]
    NoSuchLayer {
        /// The layer asked for.
        layer: usize,
        /// Layers held.
        layers: usize,
    },
    /// A tensor the description implies is missing.
    #[error("cannot find tensor {0}")]
    MissingTensor(String),
    /// A tensor whose shape is not the one the description implies.
    #[error("tensor {name} has shape {found:?}, but the config implies {expected:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// Its shape.
        found: Vec<usize>,
        /// The shape implied.
        expected: Vec<usize>,
    },
    /// A listener stopped the pass (e.g. newer input arrived).
    #[error("the pass was stopped")]
    Stopped,
    /// Candle failed reading a tensor.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The engine's results.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
