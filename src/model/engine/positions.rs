//! Every positional scheme the scores depend on, in one place: what a family's relative
//! positions load (MPNet's bucket table, DeBERTa's relative embeddings and their projections),
//! what a pass derives from its length (bucket and gather indices), the terms they add to each
//! head's scores, their names in the neuron view, and whether tokens can then run one at a time.
//!
//! (Absolute positions are rows added by the embeddings, [`super::embed`]; rotary positions
//! rotate q and k, [`crate::model::rope`].)

use super::embed::Norm;
use super::error::Result;
use super::linear::Linear;
use super::weights::Weights;
use crate::model::describe::{Description, Disentangled, PositionBias};
use crate::model::kernels::{MatMut, MatRef, matmul};
use crate::model::relpos;

/// The weights of a network's relative positions that all layers share.
#[derive(Debug, Clone, Default)]
pub(super) struct PositionWeights {
    /// MPNet's bias table, `buckets × heads`.
    bucket_bias: Vec<f32>,
    /// DeBERTa's relative embeddings (after their norm), `2·span × hidden`: what each layer's
    /// projections ([`RelativeProjections`]) are computed from at load.
    table: Option<Vec<f32>>,
}

impl PositionWeights {
    pub(super) fn load(w: &mut Weights, desc: &Description) -> Result<Self> {
        let mut out = Self::default();
        match &desc.position_bias {
            PositionBias::None => {}
            PositionBias::Buckets { rows, .. } => {
                out.bucket_bias = w.take("rel.bias.weight", &[*rows, desc.heads])?;
            }
            PositionBias::Disentangled(dis) => {
                let mut table = w.take("rel.embeddings.weight", &[2 * dis.span, desc.hidden])?;
                if dis.norm {
                    Norm::load(w, "rel.norm", desc.hidden, desc)?.forward_in_place(&mut table);
                }
                out.table = Some(table);
            }
        }
        Ok(out)
    }
}

/// One weight set's relative-position projections (DeBERTa): the relative-position embeddings
/// through the key projection (`pos_key_layer`, for c2p) and the query projection
/// (`pos_query_layer`, for p2c), `2·span × heads·head_dim` each. They depend on weights only, so
/// they are computed once at load.
#[derive(Debug, Clone, Default)]
pub(super) struct RelativeProjections {
    keys: Vec<f32>,
    queries: Vec<f32>,
}

impl RelativeProjections {
    /// Layer `p`'s projections (read before the fused q/k/v takes `p.q` and `p.k`).
    pub(super) fn load(w: &mut Weights, d: &Description, p: &str, shared: &PositionWeights) -> Result<Self> {
        let mut relative = Self::default();
        let (PositionBias::Disentangled(dis), Some(rel)) = (&d.position_bias, &shared.table) else {
            return Ok(relative);
        };
        let (h, attn) = (d.hidden, d.query_width());
        // DisentangledSelfAttention.disentangled_attention_bias: with share_att_key the content
        // projections (with their biases), else pos_key_proj (with bias) / pos_query_proj.
        let (key_proj, query_proj) = if dis.shared_projections {
            let mut copy = |name: &str| -> Result<Linear> {
                let weight = w.values(&format!("{name}.weight"), &[attn, h])?;
                Ok(Linear::new(&weight, w.values(&format!("{name}.bias"), &[attn])?, h))
            };
            (copy(&format!("{p}.k"))?, copy(&format!("{p}.q"))?)
        } else {
            let key = if dis.c2p { Some(Linear::load(w, &format!("{p}.pos_k"), h, attn, true)?) } else { None };
            let query = if dis.p2c { Linear::load_optional(w, &format!("{p}.pos_q"), h, attn)? } else { None };
            let empty = Linear::new(&[], vec![], h);
            (key.unwrap_or_else(|| empty.clone()), query.unwrap_or(empty))
        };
        if w.planning() {
            return Ok(relative);
        }
        if dis.c2p {
            relative.keys = key_proj.forward(rel);
        }
        if dis.p2c {
            relative.queries = query_proj.forward(rel);
        }
        Ok(relative)
    }
}

/// Names of the terms each score sums under `bias`, when it is more than `q·k · scale` (the
/// neuron view shows them; [`super::ForwardOutput::terms`] holds them in this order). Empty for
/// plain scores.
pub(super) fn score_terms(bias: &PositionBias) -> Vec<&'static str> {
    match bias {
        PositionBias::None => Vec::new(),
        PositionBias::Buckets { .. } => vec!["content q·k", "relative-position bias"],
        PositionBias::Disentangled(d) => {
            let mut t = vec!["content q·k"];
            if d.c2p {
                t.push("content→position");
            }
            if d.p2c {
                t.push("position→content");
            }
            t
        }
    }
}

/// Whether tokens can run a few at a time after a key/value cache: the scores must not depend
/// on where the keys sit relative to every query of the whole input at once.
pub(super) fn allows_cache(bias: &PositionBias) -> bool {
    *bias == PositionBias::None
}

/// The relative-position terms of one forward pass: what depends on the input length only,
/// computed once and shared by every layer.
#[derive(Debug, Clone)]
pub(super) enum Relative {
    None,
    /// MPNet: head `h` adds `bucket_bias[bucket[query][key] · heads + h]` (the network's table).
    Buckets {
        bucket: Vec<u32>,
    },
    /// DeBERTa: the gather indices of c2p (`[query][key]`) and p2c (`[key][query]`, before the
    /// transpose), into `2·span` relative positions.
    Disentangled {
        c2p: Vec<u32>,
        p2c: Vec<u32>,
        span2: usize,
    },
}

impl Relative {
    /// The indices of `n` tokens under `bias`.
    pub(super) fn new(bias: &PositionBias, n: usize) -> Self {
        match bias {
            PositionBias::None => Relative::None,
            PositionBias::Buckets { buckets, max_distance, bidirectional, .. } => {
                // MPNetEncoder.compute_position_bias / T5Attention.compute_bias:
                // relative_position = memory_position − context_position.
                let mut bucket = Vec::with_capacity(n * n);
                for q in 0..n {
                    for k in 0..n {
                        let r = k as i64 - q as i64;
                        let b = if *bidirectional {
                            relpos::bidirectional_bucket(r, *buckets, *max_distance)
                        } else {
                            relpos::causal_bucket(r, *buckets, *max_distance)
                        };
                        bucket.push(b as u32);
                    }
                }
                Relative::Buckets { bucket }
            }
            PositionBias::Disentangled(Disentangled { span, log_buckets, .. }) => {
                // build_relative_position: rel[q][k] = bucket(q − k); c2p index clamp(rel + span),
                // p2c index clamp(−rel + span), both into [0, 2·span).
                let span = *span as i64;
                let rel = |a: usize, b: usize| {
                    let r = a as i64 - b as i64;
                    match log_buckets {
                        Some((size, max)) => relpos::log_bucket(r, *size, *max),
                        None => r,
                    }
                };
                let clamp = |v: i64| v.clamp(0, 2 * span - 1) as u32;
                let mut c2p = Vec::with_capacity(n * n);
                let mut p2c = Vec::with_capacity(n * n);
                for a in 0..n {
                    for b in 0..n {
                        let r = rel(a, b);
                        c2p.push(clamp(r + span));
                        p2c.push(clamp(-r + span));
                    }
                }
                Relative::Disentangled { c2p, p2c, span2: 2 * span as usize }
            }
        }
    }

    /// Whether the scores have no relative terms.
    pub(super) fn is_none(&self) -> bool {
        matches!(self, Relative::None)
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Relative::None => 0,
            Relative::Buckets { bucket } => bucket.capacity() * size_of::<u32>(),
            Relative::Disentangled { c2p, p2c, .. } => (c2p.capacity() + p2c.capacity()) * size_of::<u32>(),
        }
    }
}

/// One head's query and key rows, `n` of each (what its relative terms multiply).
pub(super) struct HeadRows<'a> {
    pub(super) head: usize,
    pub(super) n: usize,
    pub(super) q: MatRef<'a>,
    pub(super) k: MatRef<'a>,
}

/// Adds a head's relative-position terms to its content scores in `probs` (recording the
/// content and each term in `terms` when asked).
///
/// MPNet (`MPNetSelfAttention`): `+ position_bias[h][q][k]`. DeBERTa
/// (`DisentangledSelfAttention.disentangled_attention_bias`): c2p `q_q · pos_key[c2p[q][k]]`,
/// p2c `k_k · pos_query[p2c[k][q]]` (gathered per key, then transposed), each scaled like the
/// content score.
pub(super) fn add_terms(
    (desc, weights, projections): (&Description, &PositionWeights, &RelativeProjections),
    rows: &HeadRows<'_>,
    relative: &Relative,
    probs: &mut [f32],
    terms: &mut [&mut [f32]],
) {
    let HeadRows { head: h, n, q, k } = *rows;
    let mut terms = terms.iter_mut();
    if let Some(content) = terms.next() {
        content.copy_from_slice(probs);
    }
    match relative {
        Relative::None => {}
        Relative::Buckets { bucket } => {
            let (bias, heads) = (&weights.bucket_bias, desc.heads);
            let mut record = terms.next();
            for (i, (s, &b)) in probs.iter_mut().zip(bucket).enumerate() {
                let v = bias[b as usize * heads + h];
                *s += v;
                if let Some(r) = record.as_deref_mut() {
                    r[i] = v;
                }
            }
        }
        Relative::Disentangled { c2p, p2c, span2 } => {
            let (d, attn, scale) = (desc.head_dim, desc.heads * desc.head_dim, desc.score_scale);
            let mut product = vec![0.0; n * span2];
            for (table, index, transposed, vectors) in
                [(&projections.keys, c2p, false, q), (&projections.queries, p2c, true, k)]
            {
                if table.is_empty() {
                    continue;
                }
                // (n × d) · (d × 2·span): every token against every relative position.
                let positions = MatRef::rows(&table[h * d..], *span2, d, attn);
                matmul(MatMut::rows(&mut product, n, *span2, *span2), vectors, positions.t(), scale, false);
                let mut record = terms.next();
                for a in 0..n {
                    for b in 0..n {
                        let (i, j) = if transposed { (b, a) } else { (a, b) };
                        let v = product[a * span2 + index[a * n + b] as usize];
                        probs[i * n + j] += v;
                        if let Some(r) = record.as_deref_mut() {
                            r[i * n + j] = v;
                        }
                    }
                }
            }
        }
    }
}
