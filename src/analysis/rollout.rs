//! Attention rollout and attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in
//! Transformers"): how much each input token contributes to each token at a given layer, when the
//! residual connections are counted as attention to oneself.
//!
//! Per layer the selected heads are averaged, the identity is added for the residual and the rows
//! are renormalised: `Â = (mean + I) / 2`. Rollout multiplies these through the layers,
//! `R_l = Â_l · R_{l-1}`; flow treats them as capacities of a layered graph and takes the maximum
//! flow from every input token to every token of the last layer.

use rayon::prelude::*;

use super::Attention;

/// The residual-augmented attention of one layer: the mean of `heads`, plus the identity, with
/// rows renormalised to sum to 1.
pub fn augmented_layer(attention: &Attention, layer_idx: usize, heads: &[usize]) -> Vec<f32> {
    let n = attention.seq_len();
    let mut m = attention.mean_of_heads(layer_idx, heads);
    for i in 0..n {
        m[i * n + i] += 1.0;
        let row = &mut m[i * n..(i + 1) * n];
        let sum: f32 = row.iter().sum();
        if sum > 0.0 {
            for v in row.iter_mut() {
                *v /= sum;
            }
        }
    }
    m
}

/// Rollout after every layer: element `l` is `Â_l · … · Â_0`, `n × n` (rows: tokens at layer `l`,
/// columns: input tokens). Rows sum to 1.
pub fn rollout(attention: &Attention, heads: &[usize]) -> Vec<Vec<f32>> {
    let n = attention.seq_len();
    let mut out: Vec<Vec<f32>> = Vec::with_capacity(attention.layers());
    for l in 0..attention.layers() {
        let a = augmented_layer(attention, l, heads);
        let next = match out.last() {
            None => a,
            Some(prev) => matmul(&a, prev, n),
        };
        out.push(next);
    }
    out
}

/// `a · b` for `n × n` row-major matrices (accumulated in f64).
fn matmul(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n * n];
    let mut acc = vec![0.0f64; n];
    for i in 0..n {
        acc.fill(0.0);
        for k in 0..n {
            let aik = f64::from(a[i * n + k]);
            if aik == 0.0 {
                continue;
            }
            for (v, &bkj) in acc.iter_mut().zip(&b[k * n..(k + 1) * n]) {
                *v += aik * f64::from(bkj);
            }
        }
        for (o, v) in out[i * n..(i + 1) * n].iter_mut().zip(&acc) {
            *o = *v as f32;
        }
    }
    out
}

/// Longest input attention flow is computed for: it solves n² max-flow problems on graphs of
/// layers × n² edges, so its cost grows as n⁴ (0.56 s at 64 tokens through 6 layers on two cores,
/// about 9 s at 128, hours at 512).
pub const FLOW_MAX_TOKENS: usize = 128;

/// Why attention flow is not computed for an input, if it is too long.
pub fn flow_refusal(tokens: usize) -> Option<String> {
    (tokens > FLOW_MAX_TOKENS).then(|| {
        format!(
            "attention flow is limited to {FLOW_MAX_TOKENS} tokens (its cost grows as n⁴: it would take hours at 512); \
             this input has {tokens}: use rollout, or shorten the input"
        )
    })
}

/// Attention flow through layers `0..=last_layer`: entry (i, j) is the maximum flow from input
/// token j to token i after `last_layer`, with the augmented attention weights as edge
/// capacities. Every value is at most 1; a row does not sum to 1, since each pair's flow is
/// computed on its own (as in the paper). Solves n² max-flow problems (Dinic), in parallel.
pub fn flow(attention: &Attention, heads: &[usize], last_layer: usize) -> Vec<f32> {
    let n = attention.seq_len();
    let layers = (last_layer + 1).min(attention.layers());
    let mats: Vec<Vec<f32>> = (0..layers).map(|l| augmented_layer(attention, l, heads)).collect();
    let graph = FlowGraph::layered(&mats, n);
    let top = layers * n;
    (0..n * n)
        .into_par_iter()
        .map_init(
            || graph.clone(),
            |g, idx| {
                let (i, j) = (idx / n, idx % n);
                g.reset();
                g.max_flow(j, top + i) as f32
            },
        )
        .collect()
}

/// A directed graph for Dinic's maximum flow, edges stored in pairs (edge, its reverse).
#[derive(Clone)]
struct FlowGraph {
    /// First edge of each node in `to`/`cap` (CSR).
    start: Vec<usize>,
    to: Vec<usize>,
    /// Index of the reverse edge.
    rev: Vec<usize>,
    cap: Vec<f64>,
    initial: Vec<f64>,
    level: Vec<i32>,
    next_edge: Vec<usize>,
    queue: Vec<usize>,
}

/// Capacities below this are treated as no edge (and flows below it as nothing).
const EPS: f64 = 1e-12;

impl FlowGraph {
    /// Nodes `l * n + t` for layers `0..=mats.len()`; an edge from token j of layer l to token i
    /// of layer l + 1 with capacity `mats[l][i][j]`.
    fn layered(mats: &[Vec<f32>], n: usize) -> Self {
        let nodes = (mats.len() + 1) * n;
        let mut edges: Vec<(usize, usize, f64)> = Vec::new();
        for (l, m) in mats.iter().enumerate() {
            for i in 0..n {
                for j in 0..n {
                    let c = f64::from(m[i * n + j]);
                    if c > EPS {
                        edges.push((l * n + j, (l + 1) * n + i, c));
                    }
                }
            }
        }
        let mut degree = vec![0usize; nodes + 1];
        for &(u, v, _) in &edges {
            degree[u] += 1;
            degree[v] += 1;
        }
        let mut start = vec![0usize; nodes + 1];
        for v in 0..nodes {
            start[v + 1] = start[v] + degree[v];
        }
        let total = start[nodes];
        let (mut to, mut rev, mut cap) = (vec![0; total], vec![0; total], vec![0.0; total]);
        let mut fill = start.clone();
        for &(u, v, c) in &edges {
            let (eu, ev) = (fill[u], fill[v]);
            fill[u] += 1;
            fill[v] += 1;
            (to[eu], rev[eu], cap[eu]) = (v, ev, c);
            (to[ev], rev[ev], cap[ev]) = (u, eu, 0.0);
        }
        Self {
            start,
            to,
            rev,
            initial: cap.clone(),
            cap,
            level: vec![0; nodes],
            next_edge: vec![0; nodes],
            queue: Vec::with_capacity(nodes),
        }
    }

    fn reset(&mut self) {
        self.cap.copy_from_slice(&self.initial);
    }

    fn bfs(&mut self, s: usize, t: usize) -> bool {
        self.level.iter_mut().for_each(|l| *l = -1);
        self.level[s] = 0;
        self.queue.clear();
        self.queue.push(s);
        let mut head = 0;
        while head < self.queue.len() {
            let u = self.queue[head];
            head += 1;
            for e in self.start[u]..self.start[u + 1] {
                let v = self.to[e];
                if self.cap[e] > EPS && self.level[v] < 0 {
                    self.level[v] = self.level[u] + 1;
                    self.queue.push(v);
                }
            }
        }
        self.level[t] >= 0
    }

    fn dfs(&mut self, u: usize, t: usize, pushed: f64) -> f64 {
        if u == t {
            return pushed;
        }
        while self.next_edge[u] < self.start[u + 1] {
            let e = self.next_edge[u];
            let v = self.to[e];
            if self.cap[e] > EPS && self.level[v] == self.level[u] + 1 {
                let got = self.dfs(v, t, pushed.min(self.cap[e]));
                if got > EPS {
                    self.cap[e] -= got;
                    let r = self.rev[e];
                    self.cap[r] += got;
                    return got;
                }
            }
            self.next_edge[u] += 1;
        }
        0.0
    }

    fn max_flow(&mut self, s: usize, t: usize) -> f64 {
        let mut total = 0.0;
        while self.bfs(s, t) {
            self.next_edge.copy_from_slice(&self.start[..self.level.len()]);
            loop {
                let f = self.dfs(s, t, f64::INFINITY);
                if f <= EPS {
                    break;
                }
                total += f;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn rollout_of_hand_built_layers_matches_the_formula() {
        // Two tokens, one head, two layers. Layer 0: both attend to token 1. Layer 1: identity.
        let a = Attention::new(2, 1, 2, vec![0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]).unwrap();
        let r = rollout(&a, &[0]);
        // Â0 = ([[0,1],[0,1]] + I) / 2 = [[.5,.5],[0,1]]; Â1 = I.
        assert!(close(&r[0], &[0.5, 0.5, 0.0, 1.0]), "{:?}", r[0]);
        assert!(close(&r[1], &[0.5, 0.5, 0.0, 1.0]), "{:?}", r[1]);
        for m in &r {
            for row in m.chunks(2) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn rollout_multiplies_through_layers_and_averages_heads() {
        // One layer with two heads: head 0 = identity, head 1 = all to token 0 → mean [[1,0],[.5,.5]].
        let a = Attention::new(
            2,
            2,
            2,
            vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0],
        )
        .unwrap();
        let r = rollout(&a, &[0, 1]);
        let a0 = [1.0, 0.0, 0.25, 0.75]; // (mean + I) / 2
        assert!(close(&r[0], &a0));
        // R1 = Â1 · Â0 with Â1 = Â0.
        let expected = [1.0, 0.0, 0.25 + 0.75 * 0.25, 0.75 * 0.75];
        assert!(close(&r[1], &expected), "{:?}", r[1]);
        // Only head 0 (identity everywhere): rollout is the identity.
        assert!(close(&rollout(&a, &[0])[1], &[1.0, 0.0, 0.0, 1.0]));
    }

    #[test]
    fn flow_of_one_layer_is_the_augmented_attention_and_bottlenecks_limit_it() {
        // One layer: the flow from j to i is just the edge Â[i][j].
        let a = Attention::new(1, 1, 2, vec![0.2, 0.8, 0.6, 0.4]).unwrap();
        let f = flow(&a, &[0], 0);
        assert!(close(&f, &augmented_layer(&a, 0, &[0])), "{f:?}");
        // Two layers where all of layer 0 goes through token 0: flow into token 1 of layer 2
        // from input 1 is bounded by what input 1 sends to token 0 and keeps for itself.
        let b = Attention::new(2, 1, 2, vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]).unwrap();
        // Â0 = [[1,0],[.5,.5]], Â1 = [[.5,.5],[0,1]].
        let f = flow(&b, &[0], 1);
        // To output 1: only via layer-1 token 1 (cap 1), which gets .5 from input 0 and .5 from input 1.
        assert!(close(&f[2..4], &[0.5, 0.5]), "{f:?}");
        // To output 0: from layer-1 token 0 (cap .5, fed fully by input 0) and token 1 (cap .5, fed
        // by both): input 0 can send .5 + .5 = 1, input 1 only .5.
        assert!(close(&f[0..2], &[1.0, 0.5]), "{f:?}");
    }
}
