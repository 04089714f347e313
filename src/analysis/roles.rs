//! What a head does, read off its attention (`TransformerLens`'s `head_detector.py`, Olsson et al.
//! 2022): per layer × head, four scores on the attention the model really computed.
//!
//! - **previous-token**: the mean over positions `i ≥ 1` of `A[i, i−1]`;
//! - **duplicate-token**: over every position `i` whose token occurred before, with `j` its most
//!   recent earlier occurrence, the mean of `A[i, j]`;
//! - **induction**: over the same positions, the mean of `A[i, j+1]` — the token that *followed*
//!   the earlier occurrence, which an induction head copies forward;
//! - **first-token** ("sink"): the mean over `i` of `A[i, 0]`. Many heads park their attention on
//!   the first token when they have nothing to do (Xiao et al. 2023, "attention sinks"): the
//!   softmax must put its weight somewhere, and the first token, seen by every query, becomes the
//!   place that changes the output least.
//!
//! A score is NaN when no position qualifies (a text without repeats has no duplicate or
//! induction score); [`probe_ids`] makes a text that has them.

use super::Attention;

/// The four scores of every head, each `layers × heads`, row-major (`[layer][head]`).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadScores {
    /// Layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads: usize,
    /// Mean `A[i, i−1]`.
    pub previous_token: Vec<f32>,
    /// Mean `A[i, j]`, `j` the last earlier occurrence of token `i`.
    pub duplicate_token: Vec<f32>,
    /// Mean `A[i, j+1]`.
    pub induction: Vec<f32>,
    /// Mean `A[i, 0]`.
    pub first_token: Vec<f32>,
}

/// The names of the scores, in the order [`HeadScores::by_name`] and exports use.
pub const SCORE_NAMES: [&str; 4] = ["previous_token", "duplicate_token", "induction", "first_token"];

/// For each position, its token's most recent earlier position, if any.
pub fn earlier_occurrences(ids: &[u32]) -> Vec<Option<usize>> {
    let mut last = std::collections::HashMap::new();
    ids.iter().enumerate().map(|(i, id)| last.insert(*id, i)).collect()
}

/// A head's induction score, the one `attnviz heads`, the head-roles view and the training lab's
/// curve share: over the tokens whose token occurred before, the mean attention to the token just
/// after its most recent earlier occurrence (`earlier`: [`earlier_occurrences`]; `a(q, k)`: the
/// head's attention). NaN when no token occurred before.
pub fn induction_score(earlier: &[Option<usize>], a: impl Fn(usize, usize) -> f64) -> f32 {
    let (mut sum, mut count) = (0.0, 0usize);
    for (i, j) in earlier.iter().enumerate().filter_map(|(i, j)| j.map(|j| (i, j))) {
        sum += a(i, j + 1); // j < i, so j + 1 ≤ i: always a key the query sees
        count += 1;
    }
    if count == 0 { f32::NAN } else { (sum / count as f64) as f32 }
}

impl HeadScores {
    /// The scores of every head of `attention` (square: queries and keys are the tokens `ids`).
    ///
    /// # Panics
    /// When `ids` is not one id per token of `attention`.
    pub fn compute(attention: &Attention, ids: &[u32]) -> Self {
        let n = attention.seq_len();
        assert!(attention.is_square() && ids.len() == n, "one id per token of a square attention");
        let earlier = earlier_occurrences(ids);
        let (layers, heads) = (attention.layers(), attention.heads());
        let mut out = Self {
            layers,
            heads,
            previous_token: Vec::with_capacity(layers * heads),
            duplicate_token: Vec::with_capacity(layers * heads),
            induction: Vec::with_capacity(layers * heads),
            first_token: Vec::with_capacity(layers * heads),
        };
        let mean = |sum: f64, count: usize| if count == 0 { f32::NAN } else { (sum / count as f64) as f32 };
        for l in 0..layers {
            for h in 0..heads {
                let a = |q: usize, k: usize| f64::from(attention.get(l, h, q, k));
                let previous: f64 = (1..n).map(|i| a(i, i - 1)).sum();
                let first: f64 = (0..n).map(|i| a(i, 0)).sum();
                let (mut dup, mut count) = (0.0, 0);
                for (i, j) in earlier.iter().enumerate().filter_map(|(i, j)| j.map(|j| (i, j))) {
                    dup += a(i, j);
                    count += 1;
                }
                out.previous_token.push(mean(previous, n.saturating_sub(1)));
                out.first_token.push(mean(first, n));
                out.duplicate_token.push(mean(dup, count));
                out.induction.push(induction_score(&earlier, a));
            }
        }
        out
    }

    /// The score named `name` (one of [`SCORE_NAMES`]).
    pub fn by_name(&self, name: &str) -> Option<&[f32]> {
        match name {
            "previous_token" => Some(&self.previous_token),
            "duplicate_token" => Some(&self.duplicate_token),
            "induction" => Some(&self.induction),
            "first_token" => Some(&self.first_token),
            _ => None,
        }
    }

    /// The `k` heads with the highest score `scores` (NaN last), as `(layer, head, score)`.
    pub fn top(&self, scores: &[f32], k: usize) -> Vec<(usize, usize, f32)> {
        let mut all: Vec<(usize, usize, f32)> =
            scores.iter().enumerate().map(|(i, &s)| (i / self.heads.max(1), i % self.heads.max(1), s)).collect();
        all.sort_by(|a, b| b.2.partial_cmp(&a.2).unwrap_or_else(|| a.2.is_nan().cmp(&b.2.is_nan())));
        all.truncate(k);
        all
    }
}

/// A probe for the scores: `first` (e.g. the beginning-of-text token, or none), then `half`
/// random ids drawn from `0..vocab` (skipping `avoid`, e.g. special tokens) with a seeded
/// generator, then the same `half` ids again — every token of the second half repeats, so the
/// duplicate and induction scores are defined on it.
pub fn probe_ids(vocab: usize, half: usize, seed: u64, first: Option<u32>, avoid: &[u32]) -> Vec<u32> {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut random = Vec::with_capacity(half);
    while random.len() < half && vocab > avoid.len() {
        let id = (next() % vocab as u64) as u32;
        // Distinct within the half, so each repeat has one earlier occurrence.
        if !avoid.contains(&id) && (!random.contains(&id) || vocab <= half + avoid.len()) {
            random.push(id);
        }
    }
    first.into_iter().chain(random.iter().copied()).chain(random.iter().copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_follow_their_definitions() {
        // Two heads over tokens a b c a b: head 0 looks at the previous token, head 1 at the
        // token after the last earlier occurrence (an induction head), or else at itself.
        let ids = [7, 8, 9, 7, 8];
        let n = ids.len();
        let mut data = vec![0.0f32; 2 * n * n];
        for i in 0..n {
            data[i * n + i.saturating_sub(1)] = 1.0;
        }
        // … except token 3 (a repeat of token 0), which looks at its earlier occurrence.
        data[3 * n + 2] = 0.0;
        data[3 * n] = 1.0;
        let earlier = earlier_occurrences(&ids);
        assert_eq!(earlier, vec![None, None, None, Some(0), Some(1)]);
        for i in 0..n {
            let k = earlier[i].map_or(i, |j| j + 1);
            data[n * n + i * n + k] = 1.0;
        }
        let a = Attention::new(1, 2, n, data).unwrap();
        let s = HeadScores::compute(&a, &ids);
        assert_eq!(s.previous_token, vec![0.75, 0.0]);
        assert_eq!(s.induction, vec![0.0, 1.0]);
        assert_eq!(s.duplicate_token, vec![0.5, 0.0]);
        assert_eq!(s.first_token, vec![0.6, 0.2]);
        assert_eq!(s.top(&s.induction, 1), vec![(0, 1, 1.0)]);
        // No repeats: undefined, not zero.
        let b = Attention::new(1, 2, 3, vec![1.0 / 3.0; 18]).unwrap();
        let s = HeadScores::compute(&b, &[1, 2, 3]);
        assert!(s.induction.iter().all(|v| v.is_nan()) && s.duplicate_token.iter().all(|v| v.is_nan()));
    }

    #[test]
    fn a_probe_repeats_its_random_half() {
        let p = probe_ids(100, 20, 3, Some(0), &[0, 1]);
        assert_eq!(p.len(), 41);
        assert_eq!(p[0], 0);
        assert_eq!(&p[1..21], &p[21..41]);
        assert!(p[1..21].iter().all(|&id| id > 1 && id < 100));
        assert_eq!(probe_ids(100, 20, 3, Some(0), &[0, 1]), p, "seeded");
        assert_ne!(probe_ids(100, 20, 4, Some(0), &[0, 1]), p);
    }
}
