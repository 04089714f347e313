//! Greedy decoding with a key/value cache: the prompt runs once, then each new token alone, its
//! attention rows recorded as it goes (a causal model's earlier rows never change), so a view can
//! show the continuation while it is written.
//!
//! As transformers' `generate(do_sample=False)`: the next token is the first arg-max of the last
//! position's logits; decoding stops at an end-of-sequence id, after `max_new` tokens, or when the
//! model's positions are used up.

use super::engine::{Capture, KvCache};
use super::intervene::Interventions;
use super::{LoadedModel, ModelError};
use crate::analysis::{Attention, DecoderRun, Run, Tokens};

/// Why decoding stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The model wrote an end-of-sequence token (kept as the last token).
    EndOfSequence,
    /// `max_new` tokens were written.
    MaxTokens,
    /// The model's positions are used up.
    ContextFull,
    /// Recording attention over more tokens would not fit in the memory available
    /// ([`LoadedModel::token_limit`]).
    MemoryFull,
    /// The caller stopped it.
    Stopped,
}

impl Stop {
    /// A few words for notices.
    pub fn describe(self) -> &'static str {
        match self {
            Self::EndOfSequence => "the model ended the text",
            Self::MaxTokens => "reached the number of tokens asked for",
            Self::ContextFull => "the model's context is full",
            Self::MemoryFull => "recording attention over more tokens would not fit in memory",
            Self::Stopped => "stopped",
        }
    }
}

/// One candidate of a step: token id, its string, its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// The vocabulary's string for it.
    pub token: String,
    /// Softmax probability.
    pub prob: f32,
}

/// A greedy decoder in progress: prompt and continuation so far, their attention rows, the
/// candidates of each step.
pub struct Generator<'m> {
    model: &'m LoadedModel,
    cache: KvCache,
    tokens: Tokens,
    prompt_len: usize,
    truncation: Option<String>,
    /// Per layer and head, the rows so far: row `i` holds keys `0..=i`.
    rows: Vec<Vec<f32>>,
    /// Per layer and head, the attention sink's share of each row so far (models with sinks).
    sinks: Vec<Vec<f32>>,
    /// Logits of the last position.
    logits: Vec<f32>,
    /// The `top_k` candidates of each step, in order (step `i` chose token `prompt_len + i`).
    pub steps: Vec<Vec<Candidate>>,
    top_k: usize,
    stop: Option<Stop>,
    /// Most tokens (prompt + continuation) whose attention fits in memory, when fewer than the
    /// model's positions.
    memory_limit: Option<usize>,
    /// The interventions every step runs with (the default: the faithful model).
    interventions: Interventions,
}

impl std::fmt::Debug for Generator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator").field("tokens", &self.tokens.len()).field("stop", &self.stop).finish()
    }
}

/// The `k` most probable tokens of `logits` (softmax in f32), most probable first.
pub fn top_k(logits: &[f32], k: usize, token: impl Fn(u32) -> String) -> Vec<Candidate> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    order.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order.truncate(k);
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .map(|i| Candidate { id: i as u32, token: token(i as u32), prob: (logits[i] - max).exp() / z })
        .collect()
}

/// The first index of the largest logit (`torch.argmax`).
pub(crate) fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl<'m> Generator<'m> {
    /// Tokenizes and runs the prompt (truncated to the model's positions, with a notice).
    pub fn start(model: &'m LoadedModel, prompt: &str, top_k: usize) -> Result<Self, ModelError> {
        Self::start_within(model, prompt, top_k, None)
    }

    /// [`Self::start`], the prompt also cut to `max_prompt` tokens (the app's "Record up to"): a
    /// generation records every head of its prompt and continuation at token level.
    pub fn start_within(
        model: &'m LoadedModel,
        prompt: &str,
        top_k: usize,
        max_prompt: Option<usize>,
    ) -> Result<Self, ModelError> {
        Self::start_modified(model, prompt, top_k, max_prompt, &Interventions::default())
    }

    /// [`Self::start_within`] with `interventions` on every step (and on [`Self::final_run`]):
    /// the modified model writes.
    pub fn start_modified(
        model: &'m LoadedModel,
        prompt: &str,
        top_k: usize,
        max_prompt: Option<usize>,
        interventions: &Interventions,
    ) -> Result<Self, ModelError> {
        let net = &model.net;
        if !net.has_lm_head() {
            return Err(ModelError::Unsupported {
                field: "lm_head.weight".into(),
                value: "(missing)".into(),
                why: format!(
                    "{} has no language-model head in its weights, so it cannot write; attention is still shown",
                    model.name
                ),
            });
        }
        let (encoded, memory_limit) = model.encode_recordable_within(prompt, None, max_prompt)?;
        let tokens = encoded.tokens;
        if tokens.is_empty() {
            return Err(ModelError::Input("no tokens to continue: type a prompt".into()));
        }
        let desc = net.description();
        interventions.validate(desc.layers, desc.heads).map_err(ModelError::Intervention)?;
        let mut cache = net.new_cache()?;
        let out = net.step(&tokens.ids, &mut cache, interventions)?;
        let n = tokens.len();
        let heads = interventions.first_layers.unwrap_or(desc.layers) * desc.heads;
        let mut rows = vec![Vec::with_capacity(n * (n + 1) / 2); heads];
        for (lh, matrix) in out.probs.chunks(n * n).enumerate().take(heads) {
            for (q, row) in matrix.chunks(n).enumerate() {
                rows[lh].extend_from_slice(&row[..=q]);
            }
        }
        let sinks = out.sinks.chunks(n).take(heads).map(<[f32]>::to_vec).collect();
        let last = &out.last_hidden[(n - 1) * desc.hidden..n * desc.hidden];
        let logits = net.logits(last).unwrap_or_default();
        Ok(Self {
            sinks,
            model,
            cache,
            prompt_len: n,
            tokens,
            truncation: encoded.truncation,
            rows,
            logits,
            steps: Vec::new(),
            top_k,
            stop: None,
            memory_limit,
            interventions: interventions.clone(),
        })
    }

    /// Tokens of the prompt.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Prompt and continuation so far.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// Why decoding stopped, once it has.
    pub fn stopped(&self) -> Option<Stop> {
        self.stop
    }

    /// Marks the decoder stopped by its caller.
    pub fn stop(&mut self) {
        self.stop.get_or_insert(Stop::Stopped);
    }

    /// Picks the next token and runs it; returns it, or None once decoding has stopped (see
    /// [`Self::stopped`]). `limit` is the total number of new tokens asked for.
    pub fn next(&mut self, limit: usize) -> Result<Option<u32>, ModelError> {
        if self.stop.is_some() {
            return Ok(None);
        }
        let desc = self.model.net.description();
        if self.tokens.len() - self.prompt_len >= limit {
            self.stop = Some(Stop::MaxTokens);
            return Ok(None);
        }
        if self.tokens.len() >= desc.max_len {
            self.stop = Some(Stop::ContextFull);
            return Ok(None);
        }
        if self.memory_limit.is_some_and(|n| self.tokens.len() >= n) {
            self.stop = Some(Stop::MemoryFull);
            return Ok(None);
        }
        let tokenizer = &self.model.tokenizer;
        let id = argmax(&self.logits);
        self.steps.push(top_k(&self.logits, self.top_k, |i| tokenizer.token_of(i)));
        let t = &mut self.tokens;
        t.ids.push(id);
        t.tokens.push(tokenizer.token_of(id));
        t.segments.push(0);
        t.type_ids.push(0);
        t.special.push(tokenizer.is_special(id));
        let out = self.model.net.step(&[id], &mut self.cache, &self.interventions)?;
        let total = self.cache.len();
        for (rows, row) in self.rows.iter_mut().zip(out.probs.chunks(total)) {
            rows.extend_from_slice(row);
        }
        for (sinks, &share) in self.sinks.iter_mut().zip(&out.sinks) {
            sinks.push(share);
        }
        self.logits = self.model.net.logits(&out.last_hidden).unwrap_or_default();
        if self.model.eos.contains(&id) {
            self.stop = Some(Stop::EndOfSequence);
        }
        Ok(Some(id))
    }

    /// The attention recorded so far as a run (prompt and continuation, `[layer][head][n][n]`,
    /// masked cells zero), for views that follow the writing. With `dynamic` rope scaling each
    /// row used the frequencies of its own step (as transformers' generation does); the
    /// [`Self::final_run`] recomputes them for the whole length.
    pub fn partial_run(&self) -> Run {
        let desc = self.model.net.description();
        let n = self.tokens.len();
        // In whole 2 MB pages: the allocator hands the last message's freed block out again.
        let mut data = crate::alloc::take(self.rows.len() * n * n);
        for (matrix, rows) in data.chunks_mut(n * n).zip(&self.rows) {
            let mut start = 0;
            for (q, dst) in matrix.chunks_mut(n).enumerate() {
                dst[..=q].copy_from_slice(&rows[start..=start + q]);
                dst[q + 1..].fill(0.0);
                start += q + 1;
            }
        }
        let layers = self.rows.len() / desc.heads.max(1);
        let attention = Attention::new(layers, desc.heads, n, data).expect("rows assembled to shape");
        let sinks = (!self.sinks.is_empty()).then(|| {
            crate::analysis::Sinks::new(layers, desc.heads, n, self.sinks.concat()).expect("rows assembled to shape")
        });
        Run {
            sinks,
            model_name: self.model.name.clone(),
            tokens: self.tokens.clone(),
            attention,
            neuron: None,
            last_hidden: Vec::new(),
            truncation: self.truncation.clone(),
            intervention: self.interventions.describe(),
            playground: self.model.playground,
            causal: true,
            window: desc.sliding_window,
            sliding_layers: desc.sliding_layers.clone(),
            prompt_len: Some(self.prompt_len),
            decoder: None,
            key_tokens: None,
            stack: None,
            long: None,
        }
    }

    /// One full forward pass over prompt and continuation (scores, queries and keys included):
    /// what dumps and exports record.
    pub fn final_run(&self) -> Result<Run, ModelError> {
        let mut run =
            self.model.run_tokens(self.tokens.clone(), self.truncation.clone(), Capture::Full, &self.interventions)?;
        run.prompt_len = Some(self.prompt_len);
        Ok(run)
    }
}

/// An encoder–decoder's greedy output: the run over source and generated target, each step's
/// candidates, and why it stopped.
#[derive(Debug)]
pub struct Translation {
    /// The encoder run with its decoder side over the generated target (start token first).
    pub run: Run,
    /// Candidates of each step.
    pub steps: Vec<Vec<Candidate>>,
    /// Why decoding stopped.
    pub stop: Stop,
}

/// Greedy decoding of an encoder–decoder (`generate(do_sample=False, num_beams=1)`): the encoder
/// runs once, the decoder once per step over everything written so far. `on_token` sees the
/// decoder's ids, each step's candidates, the encoder's run and the decoder's run over those ids
/// (attention and cross-attention recorded) after each step, and returns false to stop.
pub fn translate(
    model: &LoadedModel,
    source: &str,
    max_new: usize,
    candidates: usize,
    on_token: impl FnMut(&[u32], &[Vec<Candidate>], &Run, &DecoderRun) -> bool,
) -> Result<Translation, ModelError> {
    translate_with(model, source, (max_new, candidates), &Interventions::default(), on_token)
}

/// [`translate`] with `interventions` on the encoder's pass (as the app's runs of an
/// encoder–decoder apply them).
pub fn translate_with(
    model: &LoadedModel,
    source: &str,
    (max_new, candidates): (usize, usize),
    interventions: &Interventions,
    mut on_token: impl FnMut(&[u32], &[Vec<Candidate>], &Run, &DecoderRun) -> bool,
) -> Result<Translation, ModelError> {
    let decoder = model.seq2seq()?;
    let net = &decoder.net;
    if !net.has_lm_head() {
        return Err(ModelError::Unsupported {
            field: "lm_head.weight".into(),
            value: "(missing)".into(),
            why: format!("{} has no language-model head in its weights, so it cannot write", model.name),
        });
    }
    let mut run = model.run_with(source, None, interventions)?;
    let max_len = net.description().max_len;
    let hidden = net.description().hidden;
    let mut ids = vec![decoder.start];
    let mut steps = Vec::new();
    // The decoder over everything written so far: its last row picks the next token, and it is
    // what the caller is shown and what the translation keeps.
    let mut written = model.run_decoder(decoder_tokens(model, ids.clone()), None, &run.last_hidden)?;
    let stop = loop {
        if ids.len() > max_new {
            break Stop::MaxTokens;
        }
        if ids.len() >= max_len {
            break Stop::ContextFull;
        }
        let last = &written.last_hidden[(ids.len() - 1) * hidden..];
        let logits = net.logits(last).unwrap_or_default();
        steps.push(top_k(&logits, candidates, |i| model.tokenizer.token_of(i)));
        let id = argmax(&logits);
        ids.push(id);
        written = model.run_decoder(decoder_tokens(model, ids.clone()), None, &run.last_hidden)?;
        if model.eos.contains(&id) {
            break Stop::EndOfSequence;
        }
        if !on_token(&ids, &steps, &run, &written) {
            break Stop::Stopped;
        }
    };
    run.decoder = Some(written);
    Ok(Translation { run, steps, stop })
}

/// The decoder's tokens for ids it wrote (the start token first, marked special).
pub fn decoder_tokens(model: &LoadedModel, ids: Vec<u32>) -> Tokens {
    Tokens {
        tokens: ids.iter().map(|&i| model.tokenizer.token_of(i)).collect(),
        segments: vec![0; ids.len()],
        type_ids: vec![0; ids.len()],
        special: ids.iter().enumerate().map(|(i, &id)| i == 0 || model.tokenizer.is_special(id)).collect(),
        ids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_probability_and_breaks_ties_by_id() {
        let logits = [0.0, 2.0, 1.0, 2.0];
        let top = top_k(&logits, 3, |i| format!("t{i}"));
        assert_eq!(top.iter().map(|c| c.id).collect::<Vec<_>>(), [1, 3, 2]);
        let z: f32 = logits.iter().map(|l: &f32| (l - 2.0).exp()).sum();
        assert!((top[0].prob - 1.0 / z).abs() < 1e-7);
        assert_eq!(top[2].token, "t2");
        assert_eq!(argmax(&logits), 1, "the first of equal maxima, as torch.argmax");
        assert!(top_k(&logits, 0, |_| String::new()).is_empty());
    }
}
