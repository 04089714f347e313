//! The logit lens (nostalgebraist 2020; Ecco's "layer predictions" and "rankings"): what token the
//! residual stream would predict at every layer, had the model stopped there — each stream through
//! the model's own final norm and unembedding, softmax over the vocabulary. Plain data: the model
//! hands over the logits of each stream at each position, this keeps what the views show.

use rayon::prelude::*;
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

/// What [`read_row`] finds in a row: the top `(id, probability)`s and each followed token's
/// `(probability, rank)`.
pub type RowReadout = (Vec<(u32, f32)>, Vec<(f32, u32)>);

/// One row of logits read without holding its probabilities: the `k` most probable tokens
/// with their probabilities (most probable first; ties: lower id first), and each of `followed`'s
/// probability and rank (0 and 0 for an id outside the row). The softmax is the max-shifted one,
/// its sum taken in f64.
pub fn read_row(logits: &[f32], k: usize, followed: &[u32]) -> RowReadout {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let prob = |l: f32| (f64::from((l - max).exp()) / sum) as f32;
    // The k largest logits, kept sorted in a small buffer.
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &l) in logits.iter().enumerate() {
        if top.len() < k || top.last().is_some_and(|&(_, m)| l > m) {
            let at = top.partition_point(|&(_, m)| m >= l);
            top.insert(at, (i as u32, l));
            top.truncate(k);
        }
    }
    let top = top.into_iter().map(|(i, l)| (i, prob(l))).collect();
    let followed = followed
        .iter()
        .map(|&id| match logits.get(id as usize) {
            Some(&l) => (prob(l), 1 + logits.iter().filter(|&&o| o > l).count() as u32),
            None => (0.0, 0),
        })
        .collect();
    (top, followed)
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
            if s + 1 == streams {
                // The final predictions decide what the first tracked token is.
                let best: Vec<u32> =
                    all.par_chunks(vocab.max(1)).take(p).map(|row| read_row(row, 1, &[]).0[0].0).collect();
                tracked[0].ids.clone_from(&best);
            }
            let rows: Vec<RowReadout> = all
                .par_chunks(vocab.max(1))
                .take(p)
                .enumerate()
                .map(|(i, row)| {
                    let ids: Vec<u32> = tracked.iter().map(|t| t.ids[i]).collect();
                    read_row(row, top_k_count, &ids)
                })
                .collect();
            for (i, (top, followed)) in rows.into_iter().enumerate() {
                for (k, (id, prob)) in top.into_iter().enumerate() {
                    let at = (s * p + i) * top_k_count + k;
                    top_ids[at] = id;
                    top_probs[at] = prob;
                }
                for (t, (prob, rank)) in tracked.iter_mut().zip(followed) {
                    t.probs[s * p + i] = prob;
                    t.ranks[s * p + i] = rank;
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
        let e: Vec<f64> = logits[1][..4].iter().map(|&l| f64::from(l).exp()).collect();
        let p2 = e[2] / e.iter().sum::<f64>();
        assert!((f64::from(lens.tracked[0].probs[2]) - p2).abs() < 1e-7);
        assert_eq!(lens.tracked[1].token, Some(0));
        // Ties keep the lower id first; ranks count the strictly larger; an unknown id has none.
        let (top, followed) = read_row(&[0.0, 2.0, 1.0, 2.0], 3, &[2, 9]);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        assert!(
            (top.iter().map(|t| t.1).sum::<f32>() - (1.0 - 1.0 / (1.0 + 1f32.exp() + 2.0 * 2f32.exp()))).abs() < 1e-6
        );
        assert_eq!(followed[0].1, 3);
        assert_eq!(followed[1], (0.0, 0));
    }
}
