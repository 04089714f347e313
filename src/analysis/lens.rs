//! The logit lens (nostalgebraist 2020; Ecco's "layer predictions" and "rankings"): what token the
//! residual stream would predict at every layer, had the model stopped there — each stream through
//! the model's own final norm and unembedding, softmax over the vocabulary. Plain data: the model
//! hands over the logits of each stream at each position, this keeps what the views show.

use serde::Serialize;

/// What the lens found at the positions asked for, every stream: entry 0 is the embeddings'
/// stream, entry `l` the stream after block `l`, the last the model's own output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lens {
    /// Streams: layers + 1.
    pub streams: usize,
    /// The token positions looked at, in order.
    pub positions: Vec<usize>,
    /// Candidates kept per cell.
    pub top_k: usize,
    /// `[stream][position][k]`: the `top_k` token ids, most probable first.
    pub top_ids: Vec<u32>,
    /// `[stream][position][k]`: their probabilities.
    pub top_probs: Vec<f32>,
    /// The tokens followed across streams: by default the model's own prediction at each
    /// position (`[position]`), then any watched tokens.
    pub tracked: Vec<Tracked>,
}

/// One token followed across every stream and position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tracked {
    /// The token, or None for "the model's final prediction at each position".
    pub token: Option<u32>,
    /// `[position]`: the id followed there (the token, or the final prediction at that position).
    pub ids: Vec<u32>,
    /// `[stream][position]`: its probability.
    pub probs: Vec<f32>,
    /// `[stream][position]`: its rank (1 = the most probable).
    pub ranks: Vec<u32>,
}

/// Softmax of `logits` (in f64 sums, as stable as transformers' f32 softmax to ~1e-7).
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| (e / sum) as f32).collect()
}

/// The `k` largest entries of `probs` as `(id, prob)`, largest first (ties: lower id first).
pub fn top_k(probs: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..probs.len() as u32).collect();
    let k = k.min(probs.len());
    if k == 0 {
        return Vec::new();
    }
    let order = |a: &u32, b: &u32| probs[*b as usize].total_cmp(&probs[*a as usize]).then(a.cmp(b));
    idx.select_nth_unstable_by(k - 1, order);
    idx.truncate(k);
    idx.sort_by(order);
    idx.into_iter().map(|i| (i, probs[i as usize])).collect()
}

/// The rank of `id` in `probs` (1 = the most probable; ties counted in its favour).
pub fn rank_of(probs: &[f32], id: u32) -> u32 {
    let p = probs[id as usize];
    1 + probs.iter().filter(|&&q| q > p).count() as u32
}

impl Lens {
    /// Builds the lens from each stream's logits at `positions` (`logits(stream)` returns
    /// `positions.len() × vocab` values), keeping `top_k` candidates per cell and following
    /// the final prediction at each position and each token of `watch`. Streams are asked for
    /// one at a time, so memory holds one stream's logits.
    pub fn build(
        streams: usize,
        positions: Vec<usize>,
        top_k_count: usize,
        watch: &[u32],
        mut logits: impl FnMut(usize) -> Vec<f32>,
    ) -> Self {
        let p = positions.len();
        // The last stream first: the final prediction decides what is followed.
        let mut top_ids = vec![0; streams * p * top_k_count];
        let mut top_probs = vec![0.0; streams * p * top_k_count];
        let mut tracked: Vec<Tracked> = std::iter::once(None)
            .chain(watch.iter().map(|&t| Some(t)))
            .map(|token| Tracked {
                token,
                ids: vec![token.unwrap_or(0); p],
                probs: vec![0.0; streams * p],
                ranks: vec![0; streams * p],
            })
            .collect();
        for s in (0..streams).rev() {
            let all = logits(s);
            let vocab = all.len() / p.max(1);
            for (i, row) in all.chunks(vocab.max(1)).enumerate().take(p) {
                let probs = softmax(row);
                for (k, (id, prob)) in top_k(&probs, top_k_count).into_iter().enumerate() {
                    let at = (s * p + i) * top_k_count + k;
                    top_ids[at] = id;
                    top_probs[at] = prob;
                }
                if s + 1 == streams {
                    tracked[0].ids[i] = top_ids[(s * p + i) * top_k_count];
                }
                for t in &mut tracked {
                    let id = t.ids[i];
                    if (id as usize) < probs.len() {
                        t.probs[s * p + i] = probs[id as usize];
                        t.ranks[s * p + i] = rank_of(&probs, id);
                    }
                }
            }
        }
        Self { streams, positions, top_k: top_k_count, top_ids, top_probs, tracked }
    }

    /// The top candidates of stream `stream` at the `i`-th position looked at.
    pub fn cell(&self, stream: usize, i: usize) -> impl Iterator<Item = (u32, f32)> + '_ {
        let at = (stream * self.positions.len() + i) * self.top_k;
        self.top_ids[at..at + self.top_k].iter().copied().zip(self.top_probs[at..at + self.top_k].iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lens_keeps_the_top_candidates_and_follows_the_final_prediction() {
        // Two streams, two positions, a vocabulary of four.
        let logits = [
            vec![0.0, 3.0, 1.0, 0.0, 2.0, 0.0, 0.0, 1.0], // stream 0
            vec![0.0, 1.0, 4.0, 0.0, 0.0, 0.0, 0.0, 5.0], // stream 1 (the output)
        ];
        let lens = Lens::build(2, vec![3, 7], 2, &[0], |s| logits[s].clone());
        let first: Vec<_> = lens.cell(0, 0).map(|(id, _)| id).collect();
        assert_eq!(first, vec![1, 2]);
        let out: Vec<_> = lens.cell(1, 1).map(|(id, _)| id).collect();
        assert_eq!(out, vec![3, 0]);
        // The final predictions: token 2 at the first position, 3 at the second.
        assert_eq!(lens.tracked[0].ids, vec![2, 3]);
        assert_eq!(lens.tracked[0].ranks, vec![2, 2, 1, 1]);
        let p = softmax(&logits[1][..4]);
        assert!((lens.tracked[0].probs[2] - p[2]).abs() < 1e-7);
        assert_eq!(lens.tracked[1].token, Some(0));
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(rank_of(&[0.1, 0.5, 0.4], 2), 2);
        assert_eq!(top_k(&[0.1, 0.5, 0.4], 5), vec![(1, 0.5), (2, 0.4), (0, 0.1)]);
    }
}
