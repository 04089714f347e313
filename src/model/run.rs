//! Running a loaded model: tokenizing an input within the model's positions and the memory a
//! recorded run fits in, checking tokens against the model, the forward pass recorded per head (or
//! streamed layer by layer), and an encoder–decoder's decoder on its target.

use super::ModelError;
use super::engine::{Capture, EachLayer, EngineError, Input, LayerVisitor};
use super::intervene::Interventions;
use super::loader::{LoadedModel, Seq2SeqDecoder};
use super::tokenize::Encoded;
use super::typing::{PrefixRun, Reused};
use crate::alloc::memory_budget;
use crate::analysis::{Attention, DecoderRun, HeadVectors, Run, Tokens};

/// What a pass recorded, for [`LoadedModel::recorded_run`].
struct Recorded {
    attention: Attention,
    sinks: Option<crate::analysis::Sinks>,
    neuron: Option<crate::analysis::run::NeuronData>,
    last_hidden: Vec<f32>,
}

impl LoadedModel {
    /// Tokenizes and runs one input (sentence B optional), recording everything per head.
    pub fn run(&self, text: &str, pair: Option<&str>) -> Result<Run, ModelError> {
        self.run_with(text, pair, &Interventions::default())
    }

    /// Like [`Self::run`], with interventions on the forward pass.
    pub fn run_with(&self, text: &str, pair: Option<&str>, interventions: &Interventions) -> Result<Run, ModelError> {
        let (encoded, _) = self.encode_recordable(text, pair.filter(|p| !p.is_empty()))?;
        self.run_tokens(encoded.tokens, encoded.truncation, Capture::Full, interventions)
    }

    /// Tokenizes an input cut to the model's positions and to what a recorded run of it fits in
    /// the memory available ([`Self::token_limit`]), with a notice when cut; also that memory
    /// limit, when there is one (a generation stops there).
    pub fn encode_recordable(&self, text: &str, pair: Option<&str>) -> Result<(Encoded, Option<usize>), ModelError> {
        self.encode_recordable_within(text, pair, None)
    }

    /// [`Self::encode_recordable`], also cut to `max_tokens` when that is fewer (the app's
    /// "Record up to", for a generation's prompt); the memory limit returned is the memory's.
    pub fn encode_recordable_within(
        &self,
        text: &str,
        pair: Option<&str>,
        max_tokens: Option<usize>,
    ) -> Result<(Encoded, Option<usize>), ModelError> {
        let memory = self.token_limit(memory_budget().map(|(bytes, _)| bytes));
        let mut limit = memory.clone();
        if let Some(max) = max_tokens.filter(|&m| m < memory.as_ref().map_or(self.description().max_len, |l| l.0)) {
            let why = format!(
                "a generation records every head of prompt and continuation at token level, up to “Record up to”, {max} tokens"
            );
            limit = Some((max.max(1), why));
        }
        let encoded = self.tokenizer.encode_within(text, pair, limit.as_ref().map(|(n, why)| (*n, why.as_str())))?;
        Ok((encoded, memory.map(|(n, _)| n)))
    }

    /// The most tokens a recorded run (every layer × head's probabilities and scores, q and k) fits
    /// in a third of `available` bytes — the app holds the run shown, the one being computed and
    /// what its views derive — when that is fewer than the model's positions: `(tokens, why)`.
    /// Longer inputs are cut there with that notice instead of failing to allocate (SmolLM2's 8,192
    /// positions would record 145 GB); `attnviz dump` streams and is not limited.
    pub fn token_limit(&self, available: Option<u64>) -> Option<(usize, String)> {
        let budget = available? / 3;
        let d = self.description();
        let terms = self.net.score_terms().len() as u64;
        let (layers, heads, hd) = (d.layers as u64, d.heads as u64, d.head_dim as u64);
        let bytes = |n: u64| {
            let per_head = (2 + terms).saturating_mul(n).saturating_mul(n).saturating_add(2 * n * hd);
            layers.saturating_mul(heads).saturating_mul(per_head).saturating_mul(4)
        };
        // The largest n ≤ max_len whose recording fits: bytes(n) grows with n.
        let (mut lo, mut hi) = (0u64, d.max_len as u64);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if bytes(mid) <= budget { lo = mid } else { hi = mid - 1 }
        }
        let n = lo as usize;
        (n < d.max_len).then(|| {
            let gb = |b: u64| b as f64 / f64::from(1u32 << 30);
            (
                n.max(1),
                format!(
                    "recording all {} layers × {} heads of attention for more would take over {:.1} GB, a third of the {:.1} GB of memory available; `attnviz dump` streams longer inputs",
                    d.layers,
                    d.heads,
                    gb(budget),
                    gb(available.unwrap_or(0))
                ),
            )
        })
    }

    /// Runs an encoder–decoder: the encoder on `source`, and with a `target` the decoder on what
    /// it reads when it writes that target (`decoder_start_token_id`, then the target's tokens
    /// with their special tokens), recording its self- and cross-attention in `run.decoder`.
    pub fn run_seq2seq(&self, source: &str, target: Option<&str>) -> Result<Run, ModelError> {
        let mut run = self.run(source, None)?;
        if let Some(target) = target {
            let (tokens, truncation) = self.decoder_input(target)?;
            run.decoder = Some(self.run_decoder(tokens, truncation, &run.last_hidden)?);
        }
        Ok(run)
    }

    /// The decoder's input for a target text: the start token, then the target's tokens, cut to
    /// the decoder's positions with a notice.
    pub fn decoder_input(&self, target: &str) -> Result<(Tokens, Option<String>), ModelError> {
        let decoder = self.seq2seq()?;
        let encoded = self.tokenizer.encode(target, None)?;
        let mut t = encoded.tokens;
        let room = decoder.net.description().max_len.saturating_sub(1);
        let truncation = (t.len() > room).then(|| {
            format!(
                "target truncated to {room} tokens (the decoder's maximum with its start token); it had {}",
                t.len()
            )
        });
        t.ids.truncate(room);
        t.tokens.truncate(room);
        t.segments.truncate(room);
        t.type_ids.truncate(room);
        t.special.truncate(room);
        t.ids.insert(0, decoder.start);
        t.tokens.insert(0, self.tokenizer.token_of(decoder.start));
        t.segments.insert(0, 0);
        t.type_ids.insert(0, 0);
        t.special.insert(0, true);
        Ok((t, truncation))
    }

    /// The decoder of an encoder–decoder, or an error saying this model has none.
    pub fn seq2seq(&self) -> Result<&Seq2SeqDecoder, ModelError> {
        self.decoder.as_ref().ok_or_else(|| ModelError::NoDecoder { model: self.name.clone() })
    }

    /// Runs the decoder on `tokens` attending to the encoder's output.
    pub fn run_decoder(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        encoder_hidden: &[f32],
    ) -> Result<DecoderRun, ModelError> {
        let decoder = self.seq2seq()?;
        let desc = decoder.net.description();
        let out = decoder.net.forward_decoder(&tokens.ids, encoder_hidden).map_err(|e| match e {
            EngineError::TokenId { id, .. } => {
                ModelError::Tokenizer(format!("token id {id} is outside the decoder's vocabulary"))
            }
            e => e.into(),
        })?;
        let n = tokens.len();
        let sources = encoder_hidden.len() / desc.hidden.max(1);
        Ok(DecoderRun {
            attention: Attention::new(desc.layers, desc.heads, n, out.probs)?,
            cross: Attention::rectangular(desc.layers, desc.heads, n, sources, out.cross)?,
            last_hidden: out.last_hidden,
            tokens,
            truncation,
        })
    }

    /// Checks tokenized input (and interventions) against the model: what a run refuses.
    pub fn check_tokens(&self, tokens: &Tokens, interventions: &Interventions) -> Result<(), ModelError> {
        let desc = self.description();
        if !desc.reads_pairs && tokens.is_pair() {
            let what = if self.decoder.is_some() {
                "an encoder–decoder reads one source text (its target goes in the Target box)"
            } else {
                "a language model reads one text"
            };
            return Err(ModelError::Input(format!("{what}: untick Sentence B (or put both sentences in one)")));
        }
        interventions.validate(desc.layers, desc.heads).map_err(ModelError::Intervention)?;
        match self.net.check_interventions(interventions, tokens.len()) {
            Err(EngineError::Intervention(why)) => return Err(ModelError::Intervention(why)),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
        // The engine's own check (the one the pass runs), said in the words of a model folder.
        match self.net.check_input(&tokens.ids, &tokens.type_ids, 0) {
            Ok(_) => Ok(()),
            Err(EngineError::Segments { tokens: 0, .. }) => {
                Err(ModelError::Input("no tokens to run: type a sentence".into()))
            }
            Err(EngineError::TooLong { tokens, max }) => {
                Err(ModelError::Input(format!("{tokens} tokens exceed the model's {max} positions")))
            }
            Err(EngineError::TokenId { id, vocab }) => Err(ModelError::Tokenizer(format!(
                "token id {id} is outside the model's vocabulary (vocab_size = {vocab}); tokenizer.json does not match the weights"
            ))),
            Err(EngineError::TokenType { types, .. }) => Err(ModelError::Unsupported {
                field: "type_vocab_size".into(),
                value: types.to_string(),
                why: "this model has no segment embedding for sentence B; enter one sentence".into(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs already tokenized input like [`Self::run_tokens`] without holding every layer's
    /// attention: each layer's (`heads × n × n`) is handed to `visit(layer, probs)` as soon as it
    /// is computed, then overwritten by the next. Returns the last hidden state.
    pub fn stream_layers(
        &self,
        tokens: &Tokens,
        interventions: &Interventions,
        visit: &mut LayerVisitor<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(tokens, interventions)?;
        let input = Input::new(&tokens.ids, &tokens.type_ids, interventions);
        Ok(self.net.run(input, &mut EachLayer::new(visit))?)
    }

    /// Runs already tokenized input keeping only the residual stream entering each layer: any
    /// layer's or head's attention is then computed on demand with
    /// [`super::Network::layer_attention`], exactly as [`Self::run_tokens`] records it.
    pub fn run_streams(&self, tokens: &Tokens, interventions: &Interventions) -> Result<super::Streams, ModelError> {
        self.check_tokens(tokens, interventions)?;
        Ok(self.net.forward_streams(&tokens.ids, &tokens.type_ids, interventions)?)
    }

    /// Runs already tokenized input.
    pub fn run_tokens(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<Run, ModelError> {
        self.check_tokens(&tokens, interventions)?;
        let desc = self.description();
        let seq_len = tokens.len();
        let out = self.net.forward(&tokens.ids, &tokens.type_ids, capture, interventions)?;
        let layers = interventions.first_layers.unwrap_or(desc.layers);
        let (heads, head_dim) = (desc.heads, desc.head_dim);
        let attention = Attention::new(layers, heads, seq_len, out.probs)?;
        let neuron = if capture == Capture::Full {
            let per_term = layers * heads * seq_len * seq_len;
            let terms = self
                .net
                .score_terms()
                .into_iter()
                .zip(out.terms.chunks(per_term.max(1)))
                .map(|(name, values)| Ok((name.to_string(), Attention::new(layers, heads, seq_len, values.to_vec())?)))
                .collect::<Result<Vec<_>, crate::analysis::ShapeError>>()?;
            Some(crate::analysis::run::NeuronData {
                scores: Attention::new(layers, heads, seq_len, out.scores)?,
                terms,
                queries: HeadVectors::new(layers, heads, seq_len, head_dim, out.queries)?,
                keys: HeadVectors::new(layers, heads, seq_len, head_dim, out.keys)?,
                rotated: desc.rotary.is_some(),
            })
        } else {
            None
        };
        let sinks = (!out.sinks.is_empty())
            .then(|| crate::analysis::Sinks::new(layers, heads, seq_len, out.sinks))
            .transpose()?;
        let recorded = Recorded { attention, sinks, neuron, last_hidden: out.last_hidden };
        Ok(self.recorded_run(tokens, truncation, interventions, recorded))
    }

    /// Like [`Self::run_with`] for one sentence, reusing `prefix` — the previous input's run, kept
    /// here — up to the first token that differs (a keystroke at the end runs one token): for a
    /// decoder the run is bit for bit [`Self::run_with`]'s. Encoders and encoder–decoders run
    /// whole (`prefix` stays None).
    pub fn run_reusing(
        &self,
        prefix: &mut Option<PrefixRun>,
        text: &str,
        interventions: &Interventions,
    ) -> Result<(Run, Option<Reused>), ModelError> {
        let (encoded, _) = self.encode_recordable(text, None)?;
        self.run_tokens_reusing(prefix, encoded.tokens, encoded.truncation, interventions)
    }

    /// [`Self::run_reusing`] on tokens: what was reused, when anything could be.
    pub fn run_tokens_reusing(
        &self,
        prefix: &mut Option<PrefixRun>,
        tokens: Tokens,
        truncation: Option<String>,
        interventions: &Interventions,
    ) -> Result<(Run, Option<Reused>), ModelError> {
        // The kept run holds half a recorded run more (its lower triangles): it is kept only when
        // a recorded run fits in 2/7 of the memory available rather than a third.
        let fits = memory_budget()
            .is_none_or(|(bytes, _)| self.token_limit(Some(bytes / 7 * 6)).is_none_or(|(n, _)| tokens.len() <= n));
        if self.decoder.is_some() || !fits {
            *prefix = None;
            return Ok((self.run_tokens(tokens, truncation, Capture::Full, interventions)?, None));
        }
        self.check_tokens(&tokens, interventions)?;
        let reused = match prefix {
            Some(p) if p.capture() == Capture::Full => Some(p.update(&self.net, &tokens.ids, interventions)?),
            _ => {
                *prefix = PrefixRun::start_recording(&self.net, &tokens.ids, Capture::Full, interventions)?;
                prefix.as_ref().map(|p| Reused { kept: 0, ran: p.ids().len() })
            }
        };
        let d = self.description();
        let Some((p, scores, vectors)) = prefix.as_ref().and_then(|p| Some((p, p.scores()?, p.vectors(d.head_dim)?)))
        else {
            return Ok((self.run_tokens(tokens, truncation, Capture::Full, interventions)?, None));
        };
        let [queries, keys] = vectors?;
        let neuron = crate::analysis::run::NeuronData {
            scores: scores?,
            terms: Vec::new(),
            queries,
            keys,
            rotated: d.rotary.is_some(),
        };
        let last_hidden = p.last_hidden().to_vec();
        let recorded =
            Recorded { attention: p.attention()?, sinks: p.sinks().transpose()?, neuron: Some(neuron), last_hidden };
        Ok((self.recorded_run(tokens, truncation, interventions, recorded), reused))
    }

    /// A run of `tokens` from what was recorded.
    fn recorded_run(
        &self,
        tokens: Tokens,
        truncation: Option<String>,
        interventions: &Interventions,
        recorded: Recorded,
    ) -> Run {
        let desc = self.description();
        let Recorded { attention, sinks, neuron, last_hidden } = recorded;
        Run {
            model_name: self.name.clone(),
            tokens,
            attention,
            sinks,
            neuron,
            last_hidden,
            truncation,
            intervention: interventions.describe(),
            playground: self.playground,
            causal: self.net.is_causal() || interventions.causal,
            window: desc.sliding_window,
            sliding_layers: desc.sliding_layers.clone(),
            prompt_len: None,
            decoder: None,
            key_tokens: None,
            stack: None,
            long: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PlaygroundConfig;

    #[test]
    fn input_that_does_not_fit_is_bad_input_not_a_tokenizer_error() {
        let cfg = PlaygroundConfig::parse("layers=1,heads=2,d_model=16,pe=none,seed=1").unwrap();
        let model = cfg.build_default().unwrap();
        let faithful = Interventions::default();
        let empty = model.check_tokens(&Tokens::default(), &faithful).unwrap_err();
        assert!(matches!(empty, ModelError::Input(_)), "{empty:?}");
        assert_eq!(empty.to_string(), "bad input: no tokens to run: type a sentence");
        let n = model.description().max_len + 1;
        let long = Tokens {
            tokens: vec!["x".into(); n],
            ids: vec![0; n],
            segments: vec![0; n],
            type_ids: vec![0; n],
            special: vec![false; n],
        };
        let too_long = model.check_tokens(&long, &faithful).unwrap_err();
        assert!(matches!(too_long, ModelError::Input(_)) && too_long.to_string().contains("positions"), "{too_long}");
        let no_target = model.seq2seq().unwrap_err();
        assert!(matches!(no_target, ModelError::NoDecoder { .. }), "{no_target:?}");
        assert!(no_target.to_string().ends_with("is not an encoder–decoder: it has no target side"), "{no_target}");
    }
}
