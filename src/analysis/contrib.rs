//! The contribution graph (Ferrando & Voita 2024, "Information flow routes: automatically
//! interpreting language models at scale"; Meta's LLM Transparency Tool): for every layer and
//! token, how much of the residual stream after the attention block came from the stream before
//! it and from each head reading each token, and how much of the stream after the MLP came from
//! the MLP and from the stream before it — each part's *proportion* of the whole,
//! `max(‖whole‖₁ − ‖whole − part‖₁, ε)` normalised over the parts. From a prediction, the edges
//! above a threshold are followed back to the input tokens: the routes the information took.
//! One pass, no patching. Plain data: the model hands over the streams and each head's values.

use rayon::prelude::*;
use serde::Serialize;

/// ε of the proportions (`llm-transparency-tool`'s `EPS`).
pub const EPS: f32 = 1e-5;

/// Contributions below this are not kept (the threshold a view can set starts above it).
pub const KEPT_FLOOR: f32 = 1e-3;

/// `‖v‖₁`.
fn l1(v: &[f32]) -> f32 {
    v.iter().map(|x| x.abs()).sum()
}

/// The proportion of each part in `whole`: `max(‖whole‖₁ − ‖whole − part‖₁, ε)`, normalised to
/// sum to 1. `parts(k, out)` writes part `k` into `out`.
pub fn proportions(count: usize, whole: &[f32], mut part: impl FnMut(usize, &mut [f32])) -> Vec<f32> {
    let norm = l1(whole);
    let mut buf = vec![0.0; whole.len()];
    let mut out: Vec<f32> = (0..count)
        .map(|k| {
            part(k, &mut buf);
            let distance: f32 = whole.iter().zip(&buf).map(|(w, p)| (w - p).abs()).sum();
            (norm - distance).max(EPS)
        })
        .collect();
    let sum: f32 = out.iter().sum();
    for c in &mut out {
        *c /= sum;
    }
    out
}

/// One token's shares in a layer: the heads' reads kept, the residual's share after attention,
/// the MLP's and the residual's after the MLP.
type TokenShares = (Vec<(u32, u32, u16, f32)>, f32, f32, f32);

/// One layer's contributions.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct LayerContributions {
    /// `(to, from, head, proportion)` of each head reading token `from` into token `to`'s stream
    /// after attention, those of at least [`KEPT_FLOOR`].
    pub heads: Vec<(u32, u32, u16, f32)>,
    /// Per token: the residual stream's share after attention.
    pub residual_attn: Vec<f32>,
    /// Per token: the MLP's share after the MLP.
    pub mlp: Vec<f32>,
    /// Per token: the residual stream's share after the MLP.
    pub residual_mlp: Vec<f32>,
}

impl LayerContributions {
    /// The contributions of one layer over `n` tokens of `hidden` values: `pre`, `mid`, `post`
    /// the streams before, after attention and after the MLP, `mlp` the MLP's output;
    /// `probs[h]` head `h`'s attention (`n × n`) and `values[h]` its values through its output
    /// columns (`n × hidden`, [`crate::model::engine::Point::HeadValues`]).
    pub fn compute(
        n: usize,
        hidden: usize,
        (pre, mid, post, mlp): (&[f32], &[f32], &[f32], &[f32]),
        probs: &[&[f32]],
        values: &[&[f32]],
    ) -> Self {
        fn row(v: &[f32], i: usize, hidden: usize) -> &[f32] {
            &v[i * hidden..(i + 1) * hidden]
        }
        let heads = probs.len();
        // Each token's parts, in parallel over tokens; a part no attention reaches (a masked
        // key: A = 0) is ε without computing its distance, which equals ‖whole‖₁ exactly there.
        let rows: Vec<TokenShares> = (0..n)
            .into_par_iter()
            .map(|to| {
                let whole = row(mid, to, hidden);
                let norm = l1(whole);
                let mut raw = Vec::with_capacity(n * heads + 1);
                for from in 0..n {
                    for (h, values) in values.iter().enumerate() {
                        let a = probs[h][to * n + from];
                        let distance: f32 = if a == 0.0 {
                            norm
                        } else {
                            whole.iter().zip(row(values, from, hidden)).map(|(w, v)| (w - a * v).abs()).sum()
                        };
                        raw.push((norm - distance).max(EPS));
                    }
                }
                let residual: f32 = whole.iter().zip(row(pre, to, hidden)).map(|(w, p)| (w - p).abs()).sum();
                raw.push((norm - residual).max(EPS));
                let sum: f32 = raw.iter().sum();
                let kept = raw[..n * heads]
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| (k, c / sum))
                    .filter(|&(_, p)| p >= KEPT_FLOOR)
                    .map(|(k, p)| (to as u32, (k / heads) as u32, (k % heads) as u16, p))
                    .collect();
                let c = proportions(2, row(post, to, hidden), |k, buf| {
                    buf.copy_from_slice(row(if k == 0 { mlp } else { mid }, to, hidden));
                });
                (kept, raw[n * heads] / sum, c[0], c[1])
            })
            .collect();
        let mut out = Self::default();
        for (kept, residual_attn, mlp, residual_mlp) in rows {
            out.heads.extend(kept);
            out.residual_attn.push(residual_attn);
            out.mlp.push(mlp);
            out.residual_mlp.push(residual_mlp);
        }
        out
    }
}

/// A node of the graph: a token's residual stream at a point of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Node {
    /// The token's embedding (before layer 0).
    Embedding(u32),
    /// Its stream after layer `l`'s attention.
    Attn(u16, u32),
    /// Layer `l`'s MLP at the token.
    Mlp(u16, u32),
    /// Its stream after layer `l`.
    Out(u16, u32),
}

impl Node {
    /// The token.
    pub fn token(self) -> u32 {
        match self {
            Node::Embedding(t) | Node::Attn(_, t) | Node::Mlp(_, t) | Node::Out(_, t) => t,
        }
    }

    /// The stream entering layer `l` at `token`: the embedding or the previous layer's output.
    fn entering(l: usize, token: u32) -> Self {
        if l == 0 { Node::Embedding(token) } else { Node::Out((l - 1) as u16, token) }
    }
}

/// An edge of the graph: how much of `to` came from `from`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edge {
    /// Where the information came from.
    pub from: Node,
    /// Where it went.
    pub to: Node,
    /// The proportion (attention edges: summed over heads).
    pub weight: f32,
    /// For an attention edge, each head's share `(head, proportion)`, largest first.
    pub heads: Vec<(u16, f32)>,
}

/// Every layer's contributions for one input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContributionGraph {
    /// Tokens.
    pub tokens: usize,
    /// Each layer's contributions.
    pub layers: Vec<LayerContributions>,
}

impl ContributionGraph {
    /// Every edge of the full graph (attention edges summed over heads, as the tool draws them).
    pub fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (l, c) in self.layers.iter().enumerate() {
            let lu = l as u16;
            // Attention edges, summed over heads per (to, from); the residual edge joins the
            // self edge when the token reads itself (as the tool sums multi-edges).
            let mut by_pair: std::collections::BTreeMap<(u32, u32), Vec<(u16, f32)>> =
                std::collections::BTreeMap::new();
            for &(to, from, h, p) in &c.heads {
                by_pair.entry((to, from)).or_default().push((h, p));
            }
            for to in 0..self.tokens as u32 {
                by_pair.entry((to, to)).or_default();
            }
            for ((to, from), mut heads) in by_pair {
                heads.sort_by(|a, b| b.1.total_cmp(&a.1));
                let mut weight: f32 = heads.iter().map(|h| h.1).sum();
                if to == from {
                    weight += c.residual_attn[to as usize];
                }
                edges.push(Edge { from: Node::entering(l, from), to: Node::Attn(lu, to), weight, heads });
            }
            for t in 0..self.tokens as u32 {
                let (m, r) = (c.mlp[t as usize], c.residual_mlp[t as usize]);
                edges.push(Edge { from: Node::Attn(lu, t), to: Node::Mlp(lu, t), weight: m, heads: Vec::new() });
                edges.push(Edge { from: Node::Mlp(lu, t), to: Node::Out(lu, t), weight: m, heads: Vec::new() });
                edges.push(Edge { from: Node::Attn(lu, t), to: Node::Out(lu, t), weight: r, heads: Vec::new() });
            }
        }
        edges
    }

    /// The routes to the prediction at `token`: every edge above `threshold` reachable backwards
    /// from the last layer's output at that token (`build_paths_to_predictions`), in the order
    /// they were found, each once.
    pub fn routes(&self, token: usize, threshold: f32) -> Vec<Edge> {
        let Some(last) = self.layers.len().checked_sub(1) else { return Vec::new() };
        let edges = self.edges();
        let mut into: std::collections::HashMap<Node, Vec<usize>> = std::collections::HashMap::new();
        for (i, e) in edges.iter().enumerate().filter(|(_, e)| e.weight > threshold) {
            into.entry(e.to).or_default().push(i);
        }
        let mut seen_nodes = std::collections::HashSet::new();
        let mut kept = Vec::new();
        let mut stack = vec![Node::Out(last as u16, token as u32)];
        while let Some(node) = stack.pop() {
            if !seen_nodes.insert(node) {
                continue;
            }
            for &i in into.get(&node).map_or(&[][..], Vec::as_slice) {
                kept.push(edges[i].clone());
                stack.push(edges[i].from);
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_follow_the_rule_and_sum_to_one() {
        // whole = a + b: a is most of it, b a little, c points away.
        let (a, b, c) = ([3.0f32, 0.0], [0.5f32, 0.5], [-1.0f32, -1.0]);
        let whole = [3.5f32, 0.5];
        let parts = [a, b, c];
        let p = proportions(3, &whole, |k, buf| buf.copy_from_slice(&parts[k]));
        // ‖whole‖₁ = 4; ‖whole − a‖₁ = 1 → 3; ‖whole − b‖₁ = 3 → 1; ‖whole − c‖₁ = 6 → ε.
        let raw = [3.0f32, 1.0, EPS];
        let sum: f32 = raw.iter().sum();
        for (got, want) in p.iter().zip(raw) {
            assert!((got - want / sum).abs() < 1e-7);
        }
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn routes_lead_from_the_prediction_back_to_the_tokens() {
        // Two tokens, one layer, one head: token 1 reads token 0 strongly.
        let layer = LayerContributions {
            heads: vec![(1, 0, 0, 0.6), (1, 1, 0, 0.01), (0, 0, 0, 0.5)],
            residual_attn: vec![0.5, 0.39],
            mlp: vec![0.3, 0.2],
            residual_mlp: vec![0.7, 0.8],
        };
        let g = ContributionGraph { tokens: 2, layers: vec![layer] };
        let routes = g.routes(1, 0.04);
        let has = |from: Node, to: Node| routes.iter().any(|e| e.from == from && e.to == to);
        assert!(has(Node::Attn(0, 1), Node::Out(0, 1)), "residual after the MLP");
        assert!(has(Node::Mlp(0, 1), Node::Out(0, 1)) && has(Node::Attn(0, 1), Node::Mlp(0, 1)));
        assert!(has(Node::Embedding(0), Node::Attn(0, 1)), "the head reading token 0");
        // The self edge is the residual (0.39) plus the head reading itself (0.01).
        let own = routes.iter().find(|e| e.from == Node::Embedding(1) && e.to == Node::Attn(0, 1)).unwrap();
        assert!((own.weight - 0.40).abs() < 1e-6);
        assert!(routes.iter().all(|e| e.to.token() == 1 || e.from.token() == 0));
        assert!(g.routes(1, 0.9).is_empty());
    }
}
