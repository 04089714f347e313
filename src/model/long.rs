//! Inputs too long to record at token level ([`crate::analysis::long`]): one pass hands each
//! head's probabilities over as it computes them, and they are pooled into the overview and the
//! window at once; memory holds one `n × n` matrix per thread and the two pooled runs, never every
//! head.

use std::ops::Range;
use std::sync::Mutex;

use super::engine::{EachHead, EngineError, Input};
use super::{Interventions, LoadedModel, ModelError};
use crate::analysis::long::{
    LongInput, LongView, OVERVIEW_SPANS, WINDOW_TOKENS, mean_rows, overview_spans, pool_matrix_into, span_tokens,
    window_at, window_spans,
};
use crate::analysis::{Attention, Run, Sinks, Tokens};

/// The two pooled runs of a long input ([`LoadedModel::run_long`]).
#[derive(Debug, Clone)]
pub struct LongRuns {
    /// The whole input in spans.
    pub overview: Run,
    /// The window at token level, the rest as the spans before and after it.
    pub window: Run,
}

/// One pooled run being filled: a buffer per head (written from the pool's threads), and for a
/// model with attention sinks the sink's share of each span of rows (their mean, as the word
/// merge takes it).
struct Pooled {
    spans: Vec<Range<usize>>,
    heads: Vec<Mutex<Vec<f32>>>,
    sinks: Vec<Mutex<Vec<f32>>>,
}

impl Pooled {
    fn new(spans: Vec<Range<usize>>, layers: usize, heads: usize, sinks: bool) -> Self {
        let w = spans.len();
        let buffers = |len: usize| (0..layers * heads).map(|_| Mutex::new(vec![0.0; len])).collect();
        Self { heads: buffers(w * w), sinks: if sinks { buffers(w) } else { Vec::new() }, spans }
    }

    /// The first `layers` layers of `buffers`, `[layer][head][…]`.
    fn data(buffers: &[Mutex<Vec<f32>>], layers: usize, heads: usize) -> Vec<f32> {
        let mut out = Vec::new();
        for cell in &buffers[..layers * heads] {
            out.extend_from_slice(&cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        }
        out
    }
}

impl LoadedModel {
    /// Whether the app records an input of `n` tokens at token level: at most `record_tokens`,
    /// and what a recorded run fits in memory ([`Self::token_limit`]); longer ones go to
    /// [`Self::run_long`]. An encoder–decoder is always recorded (its input is cut instead).
    pub fn records(&self, n: usize, record_tokens: usize) -> bool {
        self.decoder.is_some()
            || (n <= record_tokens
                && self.token_limit(crate::alloc::memory_budget().map(|(b, _)| b)).is_none_or(|(limit, _)| n <= limit))
    }

    /// Runs a long input recording no head at token level: every head's probabilities, as the
    /// pass computes them, are pooled into the overview ([`OVERVIEW_SPANS`] spans) and the window
    /// ([`WINDOW_TOKENS`] tokens from `window_start`, at the end when None). After each layer,
    /// `progress` gets the runs of the layers done so far; returning false stops the pass
    /// (`Ok(None)`). The values are the word merge of the recorded attention, bit for bit.
    pub fn run_long(
        &self,
        tokens: &Tokens,
        truncation: Option<&str>,
        interventions: &Interventions,
        window_start: Option<usize>,
        progress: &mut (dyn FnMut(LongRuns) -> bool + Send),
    ) -> Result<Option<LongRuns>, ModelError> {
        self.check_tokens(tokens, interventions)?;
        let desc = self.description();
        let (n, heads) = (tokens.len(), desc.heads);
        let layers = interventions.first_layers.unwrap_or(desc.layers);
        let causal = self.net.is_causal() || interventions.causal;
        let window = window_at(n, window_start, WINDOW_TOKENS);
        let overview = Pooled::new(overview_spans(n, OVERVIEW_SPANS), layers, heads, desc.attn_sinks);
        let zoomed = Pooled::new(window_spans(n, window.clone()), layers, heads, desc.attn_sinks);
        let visit = |l: usize, h: usize, probs: &[f32], sink: Option<&[f32]>| {
            for pooled in [&overview, &zoomed] {
                let mut cell = pooled.heads[l * heads + h].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                pool_matrix_into(probs, n, &pooled.spans, &pooled.spans, causal, &mut cell);
                if let (Some(sink), Some(shares)) = (sink, pooled.sinks.get(l * heads + h)) {
                    *shares.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        mean_rows(sink, 1, &pooled.spans);
                }
            }
        };
        let runs = |done: usize, last_hidden: &[f32]| -> Result<LongRuns, ModelError> {
            let run = |pooled: &Pooled, view: LongView| -> Result<Run, ModelError> {
                let w = pooled.spans.len();
                let attention = Attention::new(done, heads, w, Pooled::data(&pooled.heads, done, heads))?;
                let sinks = if pooled.sinks.is_empty() {
                    None
                } else {
                    Some(Sinks::new(done, heads, w, Pooled::data(&pooled.sinks, done, heads))?)
                };
                Ok(Run {
                    model_name: self.name.clone(),
                    tokens: span_tokens(tokens, &pooled.spans),
                    attention,
                    sinks,
                    neuron: None,
                    last_hidden: mean_rows(last_hidden, desc.hidden, &pooled.spans),
                    truncation: truncation.map(str::to_string),
                    intervention: interventions.describe(),
                    playground: self.playground,
                    causal,
                    window: desc.sliding_window,
                    sliding_layers: desc.sliding_layers.clone(),
                    prompt_len: None,
                    decoder: None,
                    key_tokens: None,
                    stack: None,
                    long: Some(LongInput {
                        total: n,
                        spans: pooled.spans.clone(),
                        view,
                        window: window.clone(),
                        layers_total: layers,
                    }),
                })
            };
            Ok(LongRuns { overview: run(&overview, LongView::Overview)?, window: run(&zoomed, LongView::Window)? })
        };
        let mut stopped = false;
        let mut failed = None;
        let mut layer_done = |done: usize| {
            if done == layers {
                return Ok(()); // the finished runs follow, with the last hidden state
            }
            match runs(done, &[]).map(&mut *progress) {
                Ok(true) => return Ok(()),
                Ok(false) => stopped = true,
                Err(e) => failed = Some(e),
            }
            Err(EngineError::Stopped)
        };
        let input = Input::new(&tokens.ids, &tokens.type_ids, interventions);
        let result = self.net.run(input, &mut EachHead::new(&visit).then(&mut layer_done));
        if let Some(e) = failed {
            return Err(e);
        }
        if stopped {
            return Ok(None);
        }
        let last_hidden = result?;
        runs(layers, &last_hidden).map(Some)
    }
}
