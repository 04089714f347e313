//! The result of running a model on one input: tokens plus everything recorded per head.

use super::{Attention, HeadVectors, Tokens};

/// Per-head internals for the neuron view: how each attention weight arose.
#[derive(Debug, Clone)]
pub struct NeuronData {
    /// Pre-softmax scores (the sum the softmax is applied to), same layout as the attention.
    pub scores: Attention,
    /// When a score sums more than `q·k · scale` (a relative-position bias, DeBERTa's disentangled
    /// terms): each term by name, same layout; they add up to `scores`. Empty otherwise.
    pub terms: Vec<(String, Attention)>,
    /// Query vectors per layer and head.
    pub queries: HeadVectors,
    /// Key vectors per layer and head.
    pub keys: HeadVectors,
    /// The vectors are q and k after the rotary position rotation (Llama and its kin): their dot
    /// product is the score, and views say so.
    pub rotated: bool,
}

/// How one query's attention weights arise in one head, for the neuron view.
#[derive(Debug, Clone, PartialEq)]
pub struct NeuronBreakdown {
    /// Size of the query and key vectors.
    pub head_dim: usize,
    /// The query vector q.
    pub query: Vec<f32>,
    /// Key vectors `k_j`, `n × head_dim`.
    pub keys: Vec<f32>,
    /// Elementwise products `q ∘ k_j`, `n × head_dim` (each row sums to `q · k_j`).
    pub products: Vec<f32>,
    /// Scores as the model computed them, the sum the softmax is applied to (NaN where masked).
    pub scores: Vec<f32>,
    /// When the score sums several terms (content, relative-position terms): each by name, one
    /// value per key (NaN where masked); they add up to `scores`. Empty for plain `q·k · scale`.
    pub terms: Vec<(String, Vec<f32>)>,
    /// Softmax of the scores: the attention weights (NaN where masked).
    pub weights: Vec<f32>,
}

impl NeuronData {
    /// The breakdown of query `query_pos` in one head; `masked(j)` says whether key j was hidden.
    pub fn breakdown(
        &self,
        attention: &Attention,
        layer_idx: usize,
        head_idx: usize,
        query_pos: usize,
        masked: impl Fn(usize) -> bool,
    ) -> NeuronBreakdown {
        let n = attention.seq_len();
        let head_dim = self.queries.head_dim();
        let query = self.queries.vector(layer_idx, head_idx, query_pos).to_vec();
        let mut keys = Vec::with_capacity(n * head_dim);
        let mut products = Vec::with_capacity(n * head_dim);
        for j in 0..n {
            let k = self.keys.vector(layer_idx, head_idx, j);
            keys.extend_from_slice(k);
            products.extend(query.iter().zip(k).map(|(a, b)| a * b));
        }
        let hide = |j: usize, v: f32| if masked(j) { f32::NAN } else { v };
        let scores =
            self.scores.row(layer_idx, head_idx, query_pos).iter().enumerate().map(|(j, &v)| hide(j, v)).collect();
        let weights =
            attention.row(layer_idx, head_idx, query_pos).iter().enumerate().map(|(j, &v)| hide(j, v)).collect();
        let terms = self
            .terms
            .iter()
            .map(|(name, values)| {
                let row = values.row(layer_idx, head_idx, query_pos).iter().enumerate().map(|(j, &v)| hide(j, v));
                (name.clone(), row.collect())
            })
            .collect();
        NeuronBreakdown { head_dim, query, keys, products, scores, terms, weights }
    }
}

/// Everything one forward pass recorded, as plain data (no tensors).
#[derive(Debug, Clone)]
pub struct Run {
    /// Name of the model that produced it.
    pub model_name: String,
    /// The input tokens.
    pub tokens: Tokens,
    /// Attention probabilities, `[layer][head][query][key]`.
    pub attention: Attention,
    /// For a model with attention sinks (gpt-oss): the sink's share of each row (the row of
    /// `attention` sums to 1 minus it). None for the others.
    pub sinks: Option<super::Sinks>,
    /// Scores, queries and keys, when they were recorded.
    pub neuron: Option<NeuronData>,
    /// Last hidden state, `seq_len × hidden_size`, row-major.
    pub last_hidden: Vec<f32>,
    /// Set when the input was cut to fit the model, saying what was cut.
    pub truncation: Option<String>,
    /// Set when the forward pass was modified (ablated heads, temperature, …), saying how. None
    /// means the faithful model.
    pub intervention: Option<String>,
    /// Whether the run comes from the playground encoder (random weights).
    pub playground: bool,
    /// Whether keys after the query were masked (GPT-2-style models, the causal intervention):
    /// views draw that triangle as masked, not as zero weight.
    pub causal: bool,
    /// A sliding window (Mistral): keys this many positions or more before the query were hidden
    /// too, and are drawn as masked — in the layers `sliding_layers` names.
    pub window: Option<usize>,
    /// Per layer, whether `window` applies (Gemma 2 and 3, gpt-oss: sliding and full layers
    /// alternate); empty: every layer slides.
    pub sliding_layers: Vec<bool>,
    /// For a generated text: how many tokens the prompt had (the rest were written by the model).
    pub prompt_len: Option<usize>,
    /// For an encoder–decoder run with a target: the decoder's side (`tokens` and `attention`
    /// above are the encoder's).
    pub decoder: Option<super::DecoderRun>,
    /// For a cross-attention run ([`super::stack::stack_run`]): the tokens attended to (the
    /// source; the columns), when they are not `tokens` (the target; the rows).
    pub key_tokens: Option<Tokens>,
    /// Which attention of an encoder–decoder run this is (the encoder's, the decoder's, the cross
    /// attention), once [`super::stack::stack_run`] picked one; titles name it after the model.
    pub stack: Option<super::Stack>,
    /// For an input too long to record at token level: the spans of tokens the rows and columns
    /// pool ([`super::long`]); None for a run at token level.
    pub long: Option<super::long::LongInput>,
}

impl Run {
    /// The sliding window of layer `layer`: `window` where that layer slides, else None.
    pub fn window_of(&self, layer: usize) -> Option<usize> {
        self.window.filter(|_| self.sliding_layers.get(layer).copied().unwrap_or(true))
    }

    /// Whether key `key_pos` was hidden from query `query_pos` in layer `layer` by the causal
    /// mask or that layer's window.
    pub fn is_masked(&self, layer: usize, query_pos: usize, key_pos: usize) -> bool {
        let window = self.window_of(layer);
        if let Some(long) = &self.long {
            return long.is_masked(query_pos, key_pos, self.causal, window);
        }
        super::long::spans_masked(&(query_pos..query_pos + 1), &(key_pos..key_pos + 1), self.causal, window)
    }

    /// The label views draw for token `pos`: [`Tokens::label`], marked with ✎ when the model
    /// wrote it (after a generation's prompt).
    pub fn label(&self, pos: usize) -> String {
        let label = self.tokens.label(pos);
        if self.is_generated(pos) { format!("✎{label}") } else { label }
    }

    /// The label views draw for key (column) `pos`: the source token of a cross-attention run,
    /// else [`Self::label`].
    pub fn key_label(&self, pos: usize) -> String {
        match &self.key_tokens {
            Some(keys) => keys.label(pos),
            None => self.label(pos),
        }
    }

    /// The key (column) tokens: the source of a cross-attention run, else `tokens`.
    pub fn keys(&self) -> &Tokens {
        self.key_tokens.as_ref().unwrap_or(&self.tokens)
    }

    /// Whether token `pos` was written by the model (after the prompt of a generation).
    pub fn is_generated(&self, pos: usize) -> bool {
        self.prompt_len.is_some_and(|p| pos >= p)
    }

    /// Whether any cell is masked (views then draw masked cells apart from zero weights).
    pub fn has_mask(&self) -> bool {
        self.causal || self.window.is_some()
    }

    /// A copy of an `n × n` matrix of layer `layer` of this run with the masked cells as NaN.
    pub fn masked(&self, layer: usize, matrix: &[f32]) -> Vec<f32> {
        let n = self.attention.keys();
        let mut out = matrix.to_vec();
        if self.has_mask() {
            for (q, row) in out.chunks_mut(n.max(1)).enumerate() {
                for (k, v) in row.iter_mut().enumerate() {
                    if self.is_masked(layer, q, k) {
                        *v = f32::NAN;
                    }
                }
            }
        }
        out
    }

    /// The mean of `heads` of one layer as views show it: masked cells are NaN.
    pub fn shown_mean(&self, layer_idx: usize, heads: &[usize]) -> Vec<f32> {
        self.masked(layer_idx, &self.attention.mean_of_heads(layer_idx, heads))
    }
}

impl Run {
    /// The model's name, followed by "MODIFIED: …" for a modified run: the name every title uses.
    pub fn display_name(&self) -> String {
        let name = self.shown_name();
        match &self.intervention {
            Some(how) => format!("{name} · MODIFIED: {how}"),
            None => name,
        }
    }

    /// The model's name, followed by the attention shown for an encoder–decoder (`tiny-bart ·
    /// cross-attention (target → source)`).
    pub fn shown_name(&self) -> String {
        let name = match self.stack {
            Some(stack) => format!("{} · {}", self.model_name, stack.describe()),
            None => self.model_name.clone(),
        };
        match &self.long {
            Some(long) => format!("{name} · {}", long.describe()),
            None => name,
        }
    }
}
