//! A keystroke computes what changed: a decoder's recorded run kept with its key/value cache, so
//! that the next input sharing a prefix with it runs only the tokens from the first that differs.
//! For a causal model the tokens before an edit have exactly the same keys, values and attention
//! rows as before, and the engine's products give a row the same bits however many rows run with
//! it, so the result is bit for bit a fresh pass's (`tests/typing.rs`). Encoders (every row reads
//! every token) and encoder–decoders' encoders run whole.

use super::engine::{EngineError, ForwardOutput, KvCache, Network};
use super::intervene::Interventions;

/// The last input run, its cache and its recorded attention and hidden states.
#[derive(Debug)]
pub struct PrefixRun {
    ids: Vec<u32>,
    interventions: Interventions,
    cache: KvCache,
    /// Per layer × head, the rows of the lower triangle one after another (row `q`: keys `0..=q`;
    /// above the diagonal a causal row is zero): appending a token appends a row, an edit truncates.
    rows: Vec<Vec<f32>>,
    /// `n × hidden`.
    hidden: Vec<f32>,
    layers: usize,
}

/// What an update ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reused {
    /// Tokens taken from the previous run.
    pub kept: usize,
    /// Tokens run.
    pub ran: usize,
}

impl PrefixRun {
    /// A run of `ids` from nothing (all of them run), or None for a network that cannot run
    /// token by token (an encoder).
    ///
    /// # Errors
    /// What the pass refuses (token ids, interventions, length).
    pub fn start(net: &Network, ids: &[u32], interventions: &Interventions) -> Result<Option<Self>, EngineError> {
        let Ok(cache) = net.new_cache() else { return Ok(None) };
        let mut run = Self {
            ids: Vec::new(),
            interventions: interventions.clone(),
            cache,
            rows: Vec::new(),
            hidden: Vec::new(),
            layers: 0,
        };
        run.update(net, ids, interventions)?;
        Ok(Some(run))
    }

    /// Tokens run so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The recorded attention as a fresh pass records it, `[layer][head][query][key]` (built
    /// from the kept rows: `layers × heads × n²` values written).
    pub fn square_probs(&self) -> Vec<f32> {
        let n = self.ids.len();
        let mut probs = vec![0.0; self.rows.len() * n * n];
        for (rows, square) in self.rows.iter().zip(probs.chunks_mut((n * n).max(1))) {
            for q in 0..n {
                square[q * n..=q * n + q].copy_from_slice(&rows[q * (q + 1) / 2..=q * (q + 1) / 2 + q]);
            }
        }
        probs
    }

    /// The last hidden state, `n × hidden`.
    pub fn last_hidden(&self) -> &[f32] {
        &self.hidden
    }

    /// Layers recorded (fewer than the model's when the interventions stop early).
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// The run as a fresh pass's output (attention and last hidden state).
    pub fn output(&self) -> ForwardOutput {
        ForwardOutput { last_hidden: self.hidden.clone(), probs: self.square_probs(), ..ForwardOutput::default() }
    }

    /// Runs `ids` with `interventions`, reusing everything up to the first token that differs
    /// from the last input (nothing when the interventions changed).
    ///
    /// # Errors
    /// What the pass refuses; the run is then empty (the next update runs everything).
    pub fn update(&mut self, net: &Network, ids: &[u32], interventions: &Interventions) -> Result<Reused, EngineError> {
        let same_setting = self.interventions == *interventions;
        let mut kept = if same_setting { self.ids.iter().zip(ids).take_while(|(a, b)| a == b).count() } else { 0 };
        if kept == ids.len() && kept > 0 && kept == self.ids.len() {
            return Ok(Reused { kept, ran: 0 });
        }
        if !same_setting {
            self.interventions = interventions.clone();
        }
        // A shorter input that is a prefix of the last: keep its rows, run nothing.
        kept = kept.min(ids.len());
        let d = net.description();
        let (heads, hidden) = (d.heads, d.hidden);
        self.cache.truncate(kept);
        let suffix = &ids[kept..];
        let n = ids.len();
        let step = if suffix.is_empty() {
            None
        } else {
            match net.step(suffix, &mut self.cache, interventions) {
                Ok(out) => Some(out),
                Err(e) => {
                    self.clear();
                    return Err(e);
                }
            }
        };
        let layers = match &step {
            Some(out) => out.probs.len() / (heads * suffix.len() * n).max(1),
            None => self.layers,
        };
        if layers != self.layers || kept == 0 {
            self.rows = vec![Vec::new(); layers * heads];
        }
        for (lh, rows) in self.rows.iter_mut().enumerate() {
            rows.truncate(kept * (kept + 1) / 2);
            if let Some(out) = &step {
                let new = &out.probs[lh * suffix.len() * n..(lh + 1) * suffix.len() * n];
                for (i, row) in new.chunks(n).enumerate() {
                    rows.extend_from_slice(&row[..=kept + i]);
                }
            }
        }
        let mut hidden_rows = std::mem::take(&mut self.hidden);
        hidden_rows.truncate(kept * hidden);
        if let Some(out) = &step {
            hidden_rows.extend_from_slice(&out.last_hidden);
        }
        self.ids = ids.to_vec();
        self.hidden = hidden_rows;
        self.layers = layers;
        Ok(Reused { kept, ran: suffix.len() })
    }

    /// Forgets everything (the next update runs the whole input).
    fn clear(&mut self) {
        self.ids.clear();
        self.rows.clear();
        self.hidden.clear();
        self.cache.truncate(0);
    }
}
