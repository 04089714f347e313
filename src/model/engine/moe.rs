//! A mixture of experts in place of a block's feed-forward ([`Experts`] in the description):
//! a router, the softmax of its scores, the top k kept (renormalised where the family does), and
//! only the chosen experts run, each on the rows of the tokens that chose it.
//!
//! Mirrors `MixtralTopKRouter` + `MixtralExperts` (Qwen3-MoE's and `OLMoE`'s are the same code with
//! `norm_topk_prob`): `softmax(x · Wᵣᵀ)` in f32, `topk`, the weights divided by their sum when
//! renormalised, and `final.index_add_(tokens, weight · down(act(gate(x)) · up(x)))` expert by
//! expert in ascending id order — so each token's output is summed in that order, from zero.

use super::activation::activate;
use super::error::Result;
use super::linear::Linear;
use super::weights::Weights;
use crate::model::describe::{Description, Experts, Gating, Glu};
use crate::model::kernels;

/// One expert: a gated feed-forward (gate and up fused, then down).
#[derive(Debug, Clone)]
struct Expert {
    gate_up: Linear,
    down: Linear,
}

/// A layer's router and experts.
#[derive(Debug, Clone)]
pub(super) struct Moe {
    /// `count × hidden`.
    router: Linear,
    experts: Vec<Expert>,
}

/// One layer's routing as the pass computed it, for `n` tokens: the router's full distribution
/// (`n × count`, after the softmax), the chosen experts (`n × top_k`, largest weight first) and
/// the weights their outputs are multiplied by (`n × top_k`, after the family's normalisation).
#[derive(Debug, Clone, Default)]
pub(super) struct Route {
    pub(super) probs: Vec<f32>,
    pub(super) chosen: Vec<u32>,
    pub(super) weights: Vec<f32>,
}

impl Route {
    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        (self.probs.capacity() + self.chosen.capacity() + self.weights.capacity()) * 4
    }
}

impl Moe {
    /// `{p}.router.weight` and `{p}.expert.{e}.{gate,up,down}.*` of weight set `p`.
    pub(super) fn load(w: &mut Weights, d: &Description, p: &str, e: &Experts) -> Result<Self> {
        let (h, i) = (d.hidden, e.width);
        let router = Linear::load(w, &format!("{p}.router"), h, e.count, e.router_bias)?;
        let experts = (0..e.count)
            .map(|x| {
                let q = format!("{p}.expert.{x}");
                Ok(Expert {
                    gate_up: Linear::fused(w, &[(format!("{q}.gate"), i), (format!("{q}.up"), i)], h, d.biases.ffn)?,
                    down: Linear::load(w, &format!("{q}.down"), i, h, d.biases.ffn)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { router, experts })
    }

    /// Bytes of its weights as held.
    pub(super) fn weight_bytes(&self) -> usize {
        self.router.weight_bytes()
            + self.experts.iter().map(|x| x.gate_up.weight_bytes() + x.down.weight_bytes()).sum::<usize>()
    }

    /// The block on `x` (`n × hidden`, after the norm) into `out` (`n × hidden`), the routing
    /// into `route`. Only the chosen experts run, each on its tokens' rows gathered together.
    pub(super) fn forward(&self, x: &[f32], d: &Description, e: &Experts, route: &mut Route, out: &mut [f32]) {
        let h = d.hidden;
        let n = x.len() / h.max(1);
        self.route(x, n, e, route);
        out.fill(0.0);
        let k = e.top_k;
        let mut rows: Vec<usize> = Vec::with_capacity(n);
        let mut weights: Vec<f32> = Vec::with_capacity(n);
        for (id, expert) in self.experts.iter().enumerate() {
            rows.clear();
            weights.clear();
            for t in 0..n {
                let chosen = &route.chosen[t * k..(t + 1) * k];
                if let Some(slot) = chosen.iter().position(|&c| c as usize == id) {
                    rows.push(t);
                    weights.push(route.weights[t * k + slot]);
                }
            }
            if rows.is_empty() {
                continue;
            }
            let y = expert.forward(x, &rows, (h, e.width), e.glu, d);
            for ((&t, &wt), y) in rows.iter().zip(&weights).zip(y.chunks(h)) {
                out[t * h..(t + 1) * h].iter_mut().zip(y).for_each(|(o, v)| *o += v * wt);
            }
        }
    }

    /// The router's distribution, the top k and their weights: the top k of the softmax
    /// (renormalised where the family does), or the softmax of the top k logits (gpt-oss).
    fn route(&self, x: &[f32], n: usize, e: &Experts, route: &mut Route) {
        let (count, k) = (e.count, e.top_k);
        let logits = self.router.forward(x);
        route.probs.clone_from(&logits);
        kernels::softmax_rows(&mut route.probs, count, kernels::Mask::default(), None);
        route.chosen.clear();
        route.weights.clear();
        let mut order: Vec<u32> = Vec::with_capacity(count);
        let ranked = match e.gating {
            Gating::SoftmaxThenTopK => &route.probs,
            Gating::TopKThenSoftmax => &logits,
        };
        for row in ranked.chunks(count).take(n) {
            order.clear();
            order.extend(0..count as u32);
            // Largest first; equal values keep the lower id first.
            order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            let top = &order[..k];
            let mut w: Vec<f32> = top.iter().map(|&c| row[c as usize]).collect();
            match e.gating {
                Gating::SoftmaxThenTopK if e.renormalise => {
                    let sum: f32 = w.iter().sum();
                    for v in &mut w {
                        *v /= sum;
                    }
                }
                Gating::SoftmaxThenTopK => {}
                Gating::TopKThenSoftmax => kernels::softmax_rows(&mut w, k, kernels::Mask::default(), None),
            }
            route.chosen.extend_from_slice(top);
            route.weights.extend(w);
        }
    }
}

impl Expert {
    /// `down(glu(gate(x), up(x)))` on rows `rows` of `x`, `rows.len() × hidden`.
    fn forward(&self, x: &[f32], rows: &[usize], (h, width): (usize, usize), glu: Glu, d: &Description) -> Vec<f32> {
        let m = rows.len();
        let mut gathered = Vec::with_capacity(m * h);
        for &t in rows {
            gathered.extend_from_slice(&x[t * h..(t + 1) * h]);
        }
        let mut scratch = vec![0.0; m * (2 * width).max(h)];
        let mut inner = vec![0.0; m * 2 * width];
        self.gate_up.forward_into(&gathered, None, &mut scratch, &mut inner);
        let mut gated: Vec<f32> = inner.chunks(2 * width).flat_map(|r| r[..width].iter().copied()).collect();
        match glu {
            Glu::Gated => {
                activate(d.activation, &mut gated);
                for (g, r) in gated.chunks_mut(width).zip(inner.chunks(2 * width)) {
                    g.iter_mut().zip(&r[width..]).for_each(|(g, u)| *g *= u);
                }
            }
            Glu::Clamped { alpha, limit } => {
                for (g, r) in gated.chunks_mut(width).zip(inner.chunks(2 * width)) {
                    kernels::clamped_swiglu(g, &r[width..], alpha, limit);
                }
            }
        }
        let mut out = vec![0.0; m * h];
        self.down.forward_into(&gated, None, &mut scratch, &mut out);
        out
    }
}
