//! The listeners the app and the command line use: record everything, hand over each layer, or
//! each head as it is computed.

use super::error::Result;
use super::pass::{HeadVisitor, LayerSlots, Listener, PassShape};

/// What to record besides the attention probabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Attention probabilities only (what `output_attentions=True` returns).
    Attention,
    /// Also pre-softmax scores, the terms they sum, queries and keys (for the neuron view).
    Full,
}

/// What one forward pass produced, as flat `f32` vectors.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// Last hidden state, `seq_len × hidden`.
    pub last_hidden: Vec<f32>,
    /// Attention probabilities, `[layer][head][query][key]`.
    pub probs: Vec<f32>,
    /// Pre-softmax scores (the sum the softmax is applied to), same layout (empty unless `Capture::Full`).
    pub scores: Vec<f32>,
    /// The terms the scores sum, `[term][layer][head][query][key]`, named by
    /// [`Network::score_terms`] (empty unless `Capture::Full` and the scores have several terms).
    pub terms: Vec<f32>,
    /// Query vectors, `[layer][head][token][head_dim]` (empty unless `Capture::Full`).
    pub queries: Vec<f32>,
    /// Key vectors, same layout as `queries` (empty unless `Capture::Full`).
    pub keys: Vec<f32>,
    /// Cross-attention probabilities of a decoder run on an encoder's output,
    /// `[layer][head][query][source]` (empty otherwise).
    pub cross: Vec<f32>,
    /// The attention sink's share of each row, `[layer][head][query]` (models with sinks; empty
    /// otherwise): each row of `probs` sums to 1 minus it.
    pub sinks: Vec<f32>,
}

/// Records every layer's probabilities (and with [`Capture::Full`] the scores, their terms,
/// queries and keys): what `output_attentions=True` returns, and the neuron view's data.
#[derive(Debug)]
pub struct Record {
    capture: Capture,
    shape: Option<PassShape>,
    out: ForwardOutput,
}

impl Record {
    /// A recorder of `capture`.
    pub fn new(capture: Capture) -> Self {
        Self { capture, shape: None, out: ForwardOutput::default() }
    }

    /// What the pass recorded, with its last hidden state.
    pub fn into_output(self, last_hidden: Vec<f32>) -> ForwardOutput {
        ForwardOutput { last_hidden, ..self.out }
    }
}

/// Layer `layer`'s block of `len` values of `v`, unless nothing is recorded there.
fn one(v: &mut [f32], layer: usize, len: usize) -> Option<&mut [f32]> {
    (!v.is_empty()).then(|| &mut v[layer * len..(layer + 1) * len])
}

impl Listener for Record {
    fn start(&mut self, shape: &PassShape) {
        let (per_layer, layers) = (shape.layer_len(), shape.layers);
        let full = self.capture == Capture::Full;
        let vectors =
            |rows: usize| if full { vec![0.0; shape.heads * rows * shape.head_dim * layers] } else { Vec::new() };
        // Probabilities and scores reuse the buffers of dropped runs (the layers write every
        // value); the other buffers are zeroed straight from the OS.
        self.out = ForwardOutput {
            last_hidden: Vec::new(),
            probs: crate::alloc::take(per_layer * layers),
            scores: if full { crate::alloc::take(per_layer * layers) } else { Vec::new() },
            terms: if full { vec![0.0; shape.terms * per_layer * layers] } else { Vec::new() },
            queries: vectors(shape.seq_len),
            keys: vectors(shape.seq_len),
            cross: vec![0.0; shape.heads * shape.seq_len * shape.source_len * layers],
            sinks: if shape.sinks { vec![0.0; shape.heads * shape.seq_len * layers] } else { Vec::new() },
        };
        self.shape = Some(*shape);
    }

    fn layer_slots(&mut self, layer: usize) -> LayerSlots<'_> {
        let Some(shape) = self.shape else { return LayerSlots::default() };
        let per_layer = shape.layer_len();
        let vectors = shape.heads * shape.head_dim;
        let term_block = per_layer * shape.layers;
        let ForwardOutput { probs, scores, terms, queries, keys, cross, sinks, .. } = &mut self.out;
        LayerSlots {
            probs: one(probs, layer, per_layer),
            scores: one(scores, layer, per_layer),
            terms: terms
                .chunks_mut(term_block.max(1))
                .map(|t| &mut t[layer * per_layer..(layer + 1) * per_layer])
                .collect(),
            queries: one(queries, layer, vectors * shape.seq_len),
            keys: one(keys, layer, vectors * shape.seq_len),
            cross: one(cross, layer, shape.heads * shape.seq_len * shape.source_len),
            sinks: one(sinks, layer, shape.heads * shape.seq_len),
            visit_head: None,
            edit: None,
        }
    }
}

/// What [`EachLayer`] hands each layer to: `(layer, heads × seq_len × keys)`.
pub type LayerVisitor<'a> = dyn FnMut(usize, &[f32]) -> Result<()> + Send + 'a;

/// Hands one layer's probabilities (`heads × seq_len × keys`, `[head][query][key]`) to `visit`
/// once the layer has run; the next layer overwrites them. Memory holds one layer's attention,
/// not all of them. An error from `visit` stops the pass.
pub struct EachLayer<F: FnMut(usize, &[f32]) -> Result<()>> {
    visit: F,
    probs: Vec<f32>,
}

impl<F: FnMut(usize, &[f32]) -> Result<()>> EachLayer<F> {
    /// A listener handing each layer to `visit(layer, probs)`.
    pub fn new(visit: F) -> Self {
        Self { visit, probs: Vec::new() }
    }
}

impl<F: FnMut(usize, &[f32]) -> Result<()> + Send> Listener for EachLayer<F> {
    fn start(&mut self, shape: &PassShape) {
        self.probs = vec![0.0; shape.layer_len()];
    }

    fn layer_slots(&mut self, _layer: usize) -> LayerSlots<'_> {
        LayerSlots { probs: Some(&mut self.probs), ..LayerSlots::default() }
    }

    fn layer_done(&mut self, layer: usize) -> Result<()> {
        (self.visit)(layer, &self.probs)
    }
}

/// Called once a layer of an [`EachHead`] pass has run (every head of it visited), with the
/// number of layers done; an error stops the pass and is returned.
pub type LayerDone<'a> = dyn FnMut(usize) -> Result<()> + Send + 'a;

/// Records no attention: each head's probabilities (`seq_len × keys`) are handed to
/// `visit(layer, head, probs)` as they are computed — from the pool's threads, heads of a layer
/// in any order — in a scratch buffer reused once the head is done, so memory holds one `n × n`
/// matrix per thread. After each layer, `layer_done(layers done)` if given: what a caller
/// showing a long pass as it goes needs (an error from it stops the pass, e.g. newer input).
pub struct EachHead<'a> {
    visit: &'a HeadVisitor<'a>,
    layer_done: Option<&'a mut LayerDone<'a>>,
}

impl<'a> EachHead<'a> {
    /// Heads to `visit`.
    pub fn new(visit: &'a HeadVisitor<'a>) -> Self {
        Self { visit, layer_done: None }
    }

    /// Also `layer_done(layers done)` after each layer.
    #[must_use]
    pub fn then(self, layer_done: &'a mut LayerDone<'a>) -> Self {
        Self { layer_done: Some(layer_done), ..self }
    }
}

impl Listener for EachHead<'_> {
    fn layer_slots(&mut self, _layer: usize) -> LayerSlots<'_> {
        LayerSlots { visit_head: Some(self.visit), ..LayerSlots::default() }
    }

    fn layer_done(&mut self, layer: usize) -> Result<()> {
        match &mut self.layer_done {
            Some(done) => done(layer + 1),
            None => Ok(()),
        }
    }
}
