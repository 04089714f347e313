//! What the residual stream says about the next token, read from one pass: the logit lens (every
//! stream through the final norm and the unembedding) and direct logit attribution (each part's
//! write through the final norm, linearised, and one token's unembedding row). Two listeners
//! on [`Network::run`]; the arithmetic on what they keep is plain data in
//! [`crate::analysis::lens`] and [`crate::analysis::attribution`].

use rayon::prelude::*;

use super::describe::NormPlacement;
use super::engine::{EngineError, Input, Listener, PassShape, Point, Wants};
use super::{Interventions, LoadedModel, ModelError, Network};
use crate::analysis::Tokens;
use crate::analysis::attribution::{Attribution, Readout};
use crate::analysis::lens::Lens;

/// Keeps the residual rows of some positions at every stream: the embeddings' (entering layer 0),
/// then the stream leaving each layer. `[stream][position][hidden]`.
#[derive(Debug, Default)]
pub struct StreamRows {
    positions: Vec<usize>,
    hidden: usize,
    layers: usize,
    rows: Vec<f32>,
}

impl StreamRows {
    /// Rows of `positions`.
    pub fn new(positions: Vec<usize>) -> Self {
        Self { positions, ..Self::default() }
    }

    fn keep(&mut self, stream: &[f32]) {
        for &p in &self.positions {
            self.rows.extend_from_slice(&stream[p * self.hidden..(p + 1) * self.hidden]);
        }
    }

    /// Streams kept (layers run + 1).
    pub fn streams(&self) -> usize {
        self.rows.len() / (self.positions.len() * self.hidden).max(1)
    }

    /// Stream `s`'s rows, `positions × hidden`.
    pub fn stream(&self, s: usize) -> &[f32] {
        let size = self.positions.len() * self.hidden;
        &self.rows[s * size..(s + 1) * size]
    }

    /// Stream `s`'s rows of the kept positions at indices `at`.
    pub fn rows_at(&self, s: usize, at: &[usize]) -> Vec<f32> {
        let (stream, h) = (self.stream(s), self.hidden);
        at.iter().flat_map(|&i| stream[i * h..(i + 1) * h].iter().copied()).collect()
    }
}

impl Listener for StreamRows {
    fn start(&mut self, shape: &PassShape) {
        self.hidden = shape.hidden;
        self.layers = shape.layers;
        self.rows = Vec::with_capacity((shape.layers + 1) * self.positions.len() * shape.hidden);
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        match point {
            Point::ResidPre { layer: 0, stream } | Point::ResidPost { stream, .. } => self.keep(stream),
            _ => {}
        }
        Ok(())
    }
}

/// Keeps what every part wrote into the residual stream at one position, and the final norm's
/// scale there: what a direct logit attribution splits.
#[derive(Debug, Default)]
pub struct PositionWrites {
    position: usize,
    hidden: usize,
    heads: usize,
    /// The embeddings' row.
    pub embeddings: Vec<f32>,
    /// `[layer][head][hidden]`.
    pub head_writes: Vec<f32>,
    /// `[layer][hidden]`: the output projections' biases.
    pub attention_biases: Vec<f32>,
    /// `[layer][hidden]`.
    pub mlps: Vec<f32>,
    /// `[layer][hidden]`: a decoder's cross-attention outputs (empty otherwise).
    pub cross: Vec<f32>,
    /// The final residual row.
    pub final_row: Vec<f32>,
    /// What the final norm divided it by.
    pub scale: f32,
}

impl PositionWrites {
    /// The writes at `position`.
    pub fn new(position: usize) -> Self {
        Self { position, scale: 1.0, ..Self::default() }
    }

    fn row<'a>(&self, v: &'a [f32]) -> &'a [f32] {
        &v[self.position * self.hidden..(self.position + 1) * self.hidden]
    }
}

impl Listener for PositionWrites {
    fn wants(&self) -> Wants {
        Wants { writes: true, head_values: false }
    }

    fn start(&mut self, shape: &PassShape) {
        self.hidden = shape.hidden;
        self.heads = shape.heads;
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        match point {
            Point::ResidPre { layer: 0, stream } => self.embeddings = self.row(stream).to_vec(),
            Point::HeadWrite { write, .. } => self.head_writes.extend_from_slice(self.row(write)),
            Point::AttnOut { bias, .. } => self.attention_biases.extend_from_slice(bias),
            Point::CrossOut { out, .. } => self.cross.extend_from_slice(self.row(out)),
            Point::MlpOut { out, .. } => self.mlps.extend_from_slice(self.row(out)),
            Point::ResidPost { stream, .. } => self.final_row = self.row(stream).to_vec(),
            Point::FinalNorm { scale, .. } => self.scale = scale[self.position],
            _ => {}
        }
        Ok(())
    }
}

impl LoadedModel {
    /// A probe for the head scores ([`crate::analysis::roles`]): the model's first special token
    /// when its tokenizer starts a text with one (BOS, [CLS]), then `half` random non-special ids
    /// from a seeded generator, then the same ids again.
    pub fn probe_tokens(&self, half: usize, seed: u64) -> Result<Tokens, ModelError> {
        let d = self.description();
        let vocab = d.vocab_size.min(self.tokenizer.vocab_size().max(1));
        let first =
            self.tokenizer.encode("a", None)?.tokens.ids.first().copied().filter(|&id| self.tokenizer.is_special(id));
        let special: Vec<u32> = (0..vocab as u32).filter(|&id| self.tokenizer.is_special(id)).collect();
        let most = d.max_len.saturating_sub(usize::from(first.is_some())) / 2;
        if half == 0 || half > most || vocab <= special.len() + half {
            return Err(ModelError::Input(format!("a probe of {half} repeated tokens: this model takes 1 to {most}")));
        }
        let ids = crate::analysis::roles::probe_ids(vocab, half, seed, first, &special);
        Ok(Tokens::from_ids(&ids, |id| self.tokenizer.token_of(id), |id| self.tokenizer.is_special(id)))
    }

    /// Why the lens and attribution cannot run on this model, if they cannot.
    pub fn readout_refusal(&self) -> Option<String> {
        let net = &self.net;
        if self.decoder.is_some() {
            return Some(format!(
                "{} is an encoder–decoder: its encoder has no language-model head to read the stream with",
                self.name
            ));
        }
        if !net.has_lm_head() {
            return Some(format!(
                "{} has no language-model head in its weights: there is no vocabulary to read the residual stream with",
                self.name
            ));
        }
        if net.description().norm == NormPlacement::Post {
            return Some(format!(
                "{} normalises after each block (post-LN): its parts' writes do not add up",
                self.name
            ));
        }
        None
    }

    fn refuse_readout(&self) -> Result<(), ModelError> {
        match self.readout_refusal() {
            Some(why) => Err(ModelError::Unsupported { field: "lm_head.weight".into(), value: "(none)".into(), why }),
            None => Ok(()),
        }
    }

    /// The logit lens of `tokens` at `positions` (all of them when empty): every stream through
    /// the final norm and the unembedding, the `top_k` candidates of each, and the final
    /// prediction and each token of `watch` followed across streams.
    pub fn lens(
        &self,
        tokens: &Tokens,
        positions: &[usize],
        top_k: usize,
        watch: &[u32],
        interventions: &Interventions,
    ) -> Result<Lens, ModelError> {
        self.refuse_readout()?;
        self.check_tokens(tokens, interventions)?;
        let n = tokens.len();
        let positions: Vec<usize> = if positions.is_empty() { (0..n).collect() } else { positions.to_vec() };
        if let Some(&p) = positions.iter().find(|&&p| p >= n) {
            return Err(ModelError::Unsupported {
                field: "position".into(),
                value: p.to_string(),
                why: format!("the input has {n} tokens (positions 0 to {})", n.saturating_sub(1)),
            });
        }
        let mut rows = StreamRows::new(positions.clone());
        self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut rows)?;
        self.lens_from(&rows, &positions, top_k, watch)
    }

    /// The residual rows of every position at every stream of one pass: what [`Self::lens_from`]
    /// reads any positions' lens from without running the model again (a view computing the
    /// lens piece by piece runs the model once).
    pub fn lens_streams(&self, tokens: &Tokens, interventions: &Interventions) -> Result<StreamRows, ModelError> {
        self.refuse_readout()?;
        self.check_tokens(tokens, interventions)?;
        let mut rows = StreamRows::new((0..tokens.len()).collect());
        self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut rows)?;
        Ok(rows)
    }

    /// The lens at `positions` (each one `streams` kept) from rows a pass kept.
    pub fn lens_from(
        &self,
        streams: &StreamRows,
        positions: &[usize],
        top_k: usize,
        watch: &[u32],
    ) -> Result<Lens, ModelError> {
        let vocab = self.net.description().vocab_size;
        if let Some(&t) = watch.iter().find(|&&t| t as usize >= vocab) {
            return Err(ModelError::Unsupported {
                field: "token".into(),
                value: t.to_string(),
                why: format!("outside the vocabulary ({vocab})"),
            });
        }
        let at: Vec<usize> = positions
            .iter()
            .map(|p| {
                streams.positions.iter().position(|q| q == p).ok_or_else(|| ModelError::Unsupported {
                    field: "position".into(),
                    value: p.to_string(),
                    why: "not among the positions the pass kept".into(),
                })
            })
            .collect::<Result<_, _>>()?;
        // The unembedding reads the whole vocabulary table once per call: take the rows of
        // several streams together (about 128 rows a call), the streams asked for last first.
        let per_call = (128 / at.len().max(1)).max(1);
        let mut ready: std::collections::HashMap<usize, Vec<f32>> = std::collections::HashMap::new();
        let net = &self.net;
        Ok(Lens::build(streams.streams(), positions.to_vec(), top_k, watch, |s| {
            if let Some(logits) = ready.remove(&s) {
                return logits;
            }
            let first = (s + 1).saturating_sub(per_call);
            let rows: Vec<f32> = (first..=s).flat_map(|t| streams.rows_at(t, &at)).collect();
            let logits = stream_logits(net, &rows);
            let per_stream = logits.len() / (s + 1 - first);
            for (t, chunk) in (first..=s).zip(logits.chunks(per_stream.max(1))) {
                ready.insert(t, chunk.to_vec());
            }
            ready.remove(&s).unwrap_or_default()
        }))
    }

    /// Direct logit attribution at `position` of `tokens`: each part's share of `target`'s logit
    /// (the model's own top token there when None), or of `target − versus` — the logit before a
    /// final soft-capping (Gemma 2's), which no sum of parts gives after it.
    pub fn attribute(
        &self,
        tokens: &Tokens,
        position: usize,
        target: Option<u32>,
        versus: Option<u32>,
        interventions: &Interventions,
    ) -> Result<Attribution, ModelError> {
        self.refuse_readout()?;
        self.check_tokens(tokens, interventions)?;
        let n = tokens.len();
        if position >= n {
            return Err(ModelError::Unsupported {
                field: "position".into(),
                value: position.to_string(),
                why: format!("the input has {n} tokens (positions 0 to {})", n.saturating_sub(1)),
            });
        }
        let mut writes = PositionWrites::new(position);
        let last = self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut writes)?;
        let d = self.net.description();
        let row = &last[position * d.hidden..(position + 1) * d.hidden];
        let logits = self.net.logits(row).unwrap_or_default();
        let raw = self.net.logits_before_cap(row).unwrap_or_default();
        let target = target.unwrap_or_else(|| crate::model::generate::argmax(&logits));
        let one = |token: u32| -> Result<Attribution, ModelError> {
            let basis = self.net.logit_basis(token).ok_or_else(|| ModelError::Unsupported {
                field: "token".into(),
                value: token.to_string(),
                why: format!("outside the vocabulary ({})", d.vocab_size),
            })?;
            // The logit before a final soft-capping (Gemma 2): the sum the parts split.
            let logit = raw.get(token as usize).copied().unwrap_or(logits[token as usize]);
            Ok(attribution(&self.net, &writes, &basis, token, logit, &self.tokenizer.token_of(token)))
        };
        let a = one(target)?;
        match versus {
            Some(v) => Ok(a.minus(&one(v)?)),
            None => Ok(a),
        }
    }
}

/// What one head's write at a position does to the prediction there: the tokens whose logits it
/// raises and lowers most.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadEffect {
    /// The layer.
    pub layer: usize,
    /// The head.
    pub head: usize,
    /// `(token, logit change)`, largest first.
    pub promoted: Vec<(u32, f32)>,
    /// `(token, logit change)`, most negative first.
    pub suppressed: Vec<(u32, f32)>,
}

impl LoadedModel {
    /// The `k` tokens head `head` of layer `layer` promotes and suppresses most at `position`:
    /// its write there through the final norm linearised at this input (as direct logit
    /// attribution takes it) and the unembedding, without the head's bias.
    pub fn head_effect(
        &self,
        tokens: &Tokens,
        position: usize,
        (layer, head): (usize, usize),
        k: usize,
        interventions: &Interventions,
    ) -> Result<HeadEffect, ModelError> {
        self.refuse_readout()?;
        self.check_tokens(tokens, interventions)?;
        let d = self.net.description();
        let layers = interventions.first_layers.unwrap_or(d.layers);
        if position >= tokens.len() || layer >= layers || head >= d.heads {
            return Err(ModelError::Unsupported {
                field: "head".into(),
                value: format!("{layer}:{head} at {position}"),
                why: format!("the run has {layers} layers × {} heads over {} tokens", d.heads, tokens.len()),
            });
        }
        let mut writes = PositionWrites::new(position);
        self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut writes)?;
        let h = d.hidden;
        let write = &writes.head_writes[(layer * d.heads + head) * h..][..h];
        // Through the final norm, linearised as direct logit attribution takes it.
        let basis = self.net.logit_basis(0).ok_or_else(|| ModelError::Input("no head".into()))?;
        let readout = Readout {
            centred: basis.centred,
            scale: writes.scale,
            norm_weight: &basis.norm_weight,
            norm_bias: &basis.norm_bias,
            unembedding: &basis.unembedding,
            bias: basis.bias,
        };
        let x = readout.through_norm(write);
        let logits = self.net.unembed_directions(&x).unwrap_or_default();
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
        let promoted = order.iter().take(k).map(|&t| (t, logits[t as usize])).collect();
        let suppressed = order.iter().rev().take(k).map(|&t| (t, logits[t as usize])).collect();
        Ok(HeadEffect { layer, head, promoted, suppressed })
    }
}

/// The logits of a stream's rows: the final norm, then the unembedding.
fn stream_logits(net: &Network, rows: &[f32]) -> Vec<f32> {
    let mut normed = rows.to_vec();
    net.final_norm_rows(&mut normed);
    net.unembed_rows(&normed).unwrap_or_default()
}

/// Splits one token's logit at the position `writes` kept.
fn attribution(
    net: &Network,
    writes: &PositionWrites,
    basis: &super::engine::LogitBasis,
    token: u32,
    logit: f32,
    token_str: &str,
) -> Attribution {
    let d = net.description();
    let readout = Readout {
        centred: basis.centred,
        scale: writes.scale,
        norm_weight: &basis.norm_weight,
        norm_bias: &basis.norm_bias,
        unembedding: &basis.unembedding,
        bias: basis.bias,
    };
    let h = d.hidden;
    let shares = |v: &[f32]| -> Vec<f32> { v.chunks(h.max(1)).map(|x| readout.share(x) as f32).collect() };
    let mut attention_biases = shares(&writes.attention_biases);
    // A decoder's cross-attention outputs join its attention block's term.
    for (b, c) in attention_biases.iter_mut().zip(shares(&writes.cross)) {
        *b += c;
    }
    Attribution {
        position: writes.position,
        target_id: token,
        target_token: token_str.to_string(),
        versus_id: None,
        versus_token: None,
        logit,
        embeddings: readout.share(&writes.embeddings) as f32,
        heads: shares(&writes.head_writes),
        attention_biases,
        mlps: shares(&writes.mlps),
        lm_head_bias: readout.constant() as f32,
        layers: writes.mlps.len() / h.max(1),
        heads_per_layer: writes.heads,
    }
}

/// Keeps each layer's streams, attention and head values just long enough to turn them into
/// that layer's contributions ([`crate::analysis::contrib`]); keeps the streams after attention
/// for the graph's node labels.
#[derive(Debug, Default)]
pub struct Contributions {
    n: usize,
    hidden: usize,
    heads: usize,
    probs: Vec<f32>,
    values: Vec<Vec<f32>>,
    pre: Vec<f32>,
    mid: Vec<f32>,
    attn_out: Vec<f32>,
    mlp: Vec<f32>,
    /// Each layer's contributions, as they are computed.
    pub layers: Vec<crate::analysis::contrib::LayerContributions>,
    /// `[layer][token][hidden]`: the stream after each layer's attention.
    pub mids: Vec<f32>,
}

impl Listener for Contributions {
    fn wants(&self) -> Wants {
        Wants { writes: true, head_values: true }
    }

    fn start(&mut self, shape: &PassShape) {
        self.n = shape.seq_len;
        self.hidden = shape.hidden;
        self.heads = shape.heads;
        self.probs = vec![0.0; shape.layer_len()];
        self.values = vec![Vec::new(); shape.heads];
    }

    fn layer_slots(&mut self, _layer: usize) -> super::engine::LayerSlots<'_> {
        super::engine::LayerSlots { probs: Some(&mut self.probs), ..Default::default() }
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        match point {
            Point::ResidPre { stream, .. } => {
                self.pre = stream.to_vec();
                self.mid.clear();
            }
            Point::HeadValues { head, values, row_scales, .. } => {
                self.values[head] = values.to_vec();
                if !row_scales.is_empty() {
                    // An output norm divides the write at each query row: fold it into that
                    // row's attention, which the contributions multiply the values by.
                    let n = self.n;
                    for (row, s) in self.probs[head * n * n..(head + 1) * n * n].chunks_mut(n).zip(row_scales) {
                        for a in row.iter_mut() {
                            *a /= s;
                        }
                    }
                }
            }
            Point::AttnOut { out, .. } => self.attn_out = out.to_vec(),
            Point::ResidMid { stream, .. } => self.mid = stream.to_vec(),
            Point::MlpOut { out, .. } => self.mlp = out.to_vec(),
            Point::ResidPost { stream, .. } => {
                if self.mid.is_empty() {
                    // A parallel block (GPT-NeoX) has no stream between its parts: the stream
                    // with the attention's write added stands for it.
                    self.mid = self.pre.iter().zip(&self.attn_out).map(|(p, a)| p + a).collect();
                }
                let (n, h) = (self.n, self.hidden);
                let probs: Vec<&[f32]> = self.probs.chunks(n * n).collect();
                let values: Vec<&[f32]> = self.values.iter().map(Vec::as_slice).collect();
                self.layers.push(crate::analysis::contrib::LayerContributions::compute(
                    n,
                    h,
                    (&self.pre, &self.mid, stream, &self.mlp),
                    &probs,
                    &values,
                ));
                self.mids.extend_from_slice(&self.mid);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The contribution graph of one input, with what each node's stream would predict.
#[derive(Debug, Clone)]
pub struct ContributionRun {
    /// The graph.
    pub graph: crate::analysis::contrib::ContributionGraph,
    /// Each stream's top token at every token (embeddings, then after each layer), when the
    /// model has a head: `lens.cell(stream, token)`.
    pub lens: Option<Lens>,
    /// `[layer][token]`: the top token and its probability of the stream after each layer's
    /// attention, when the model has a head.
    pub mid_top: Vec<(u32, f32)>,
}

impl LoadedModel {
    /// Why the contribution graph cannot be built for this model, if it cannot: it needs blocks
    /// whose parts add to the stream (pre-LN) and a decoder without an encoder.
    pub fn contribution_refusal(&self) -> Option<String> {
        if self.decoder.is_some() {
            return Some(format!("{} is an encoder–decoder: the graph follows a decoder-only model", self.name));
        }
        if self.net.description().norm == NormPlacement::Post {
            return Some(format!(
                "{} normalises after each block (post-LN): its parts do not add up to the stream",
                self.name
            ));
        }
        None
    }

    /// The contribution graph of `tokens` (every layer, every token), and each node's lens.
    pub fn contributions(&self, tokens: &Tokens, interventions: &Interventions) -> Result<ContributionRun, ModelError> {
        if let Some(why) = self.contribution_refusal() {
            return Err(ModelError::Unsupported { field: "model".into(), value: self.name.clone(), why });
        }
        self.check_tokens(tokens, interventions)?;
        let mut c = Contributions::default();
        self.net.run(Input::new(&tokens.ids, &tokens.type_ids, interventions), &mut c)?;
        let n = tokens.len();
        let graph = crate::analysis::contrib::ContributionGraph { tokens: n, layers: std::mem::take(&mut c.layers) };
        let (lens, mid_top) = if self.readout_refusal().is_none() {
            let lens = self.lens(tokens, &[], 1, &[], interventions)?;
            let h = self.net.description().hidden;
            let mut top = Vec::with_capacity(graph.layers.len() * n);
            for layer in c.mids.chunks(n * h) {
                let logits = stream_logits(&self.net, layer);
                let vocab = logits.len() / n.max(1);
                let rows: Vec<(u32, f32)> = logits
                    .par_chunks(vocab.max(1))
                    .map(|row| crate::analysis::lens::read_row(row, 1, &[]).0[0])
                    .collect();
                top.extend(rows);
            }
            (Some(lens), top)
        } else {
            (None, Vec::new())
        };
        Ok(ContributionRun { graph, lens, mid_top })
    }
}
