//! Inputs too long to record every head at token level: what the app shows of them. The model
//! streams each head's `n × n` probabilities once (never holding them all) and keeps two pooled
//! runs over *spans* of tokens, with the word merge's rule (attention *to* a span is the sum over
//! its tokens, *from* a span the mean over its tokens, so every row still sums to 1):
//!
//! - the **overview**: the whole input as at most [`OVERVIEW_SPANS`] spans of equal length;
//! - the **window**: up to [`WINDOW_TOKENS`] consecutive tokens at token level — single-token
//!   spans, exact probabilities — with everything before (and after) the window as one span
//!   each, so no attention is dropped: a query's weight on earlier tokens shows as its weight on
//!   the "tokens 0–k" span.

use std::ops::Range;

use super::Tokens;

/// Most spans of the overview (the views draw it like a run of this many tokens).
pub const OVERVIEW_SPANS: usize = 256;

/// Tokens of the window shown at token level.
pub const WINDOW_TOKENS: usize = 256;

/// Longest input the app records at token level (every layer × head's probabilities, scores, q
/// and k) by default; longer ones are shown pooled ([`LongView`]). Views past it would also draw
/// too much to stay fluid.
pub const RECORD_TOKENS: usize = 1024;

/// Which pooled run of a long input a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum LongView {
    /// The whole input in spans of equal length.
    #[default]
    Overview,
    /// The window at token level.
    Window,
}

impl LongView {
    /// The switch's label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Overview => "Overview",
            Self::Window => "Window",
        }
    }
}

/// What a run of a long input stands for: the spans its rows and columns are.
#[derive(Debug, Clone, PartialEq)]
pub struct LongInput {
    /// Tokens of the whole input.
    pub total: usize,
    /// The token range each row (and column) of the run pools.
    pub spans: Vec<Range<usize>>,
    /// Overview or window.
    pub view: LongView,
    /// For the window: its tokens.
    pub window: Range<usize>,
    /// Layers of the model (the run holds fewer while the pass is still going).
    pub layers_total: usize,
}

impl LongInput {
    /// Whether every token of span `key` is hidden from every token of span `query` by a causal
    /// mask and/or a sliding `window` (masked cells of a pooled run are the ones all of whose
    /// token cells were masked).
    pub fn is_masked(&self, query: usize, key: usize, causal: bool, window: Option<usize>) -> bool {
        spans_masked(&self.spans[query], &self.spans[key], causal, window)
    }

    /// What the run shows, for titles and notices ("8192 tokens as 256 spans of 32 tokens",
    /// "tokens 7936–8191 of 8192").
    pub fn describe(&self) -> String {
        match self.view {
            LongView::Overview => {
                let len = self.spans.first().map_or(1, ExactSizeIterator::len);
                format!("{} tokens as {} spans of {len} tokens", self.total, self.spans.len())
            }
            LongView::Window => {
                format!("tokens {}–{} of {}", self.window.start, self.window.end.saturating_sub(1), self.total)
            }
        }
    }

    /// Whether the run holds fewer layers than the model has (the pass is still going).
    pub fn is_partial(&self, layers_held: usize) -> bool {
        layers_held < self.layers_total
    }
}

/// Whether every token of `key` is hidden from every token of `query` by a causal mask (a key after
/// the query) and/or a sliding `window` (a key `window` or more positions before it): for single
/// tokens, whether that one cell is masked.
pub fn spans_masked(query: &Range<usize>, key: &Range<usize>, causal: bool, window: Option<usize>) -> bool {
    (causal && key.start >= query.end) || window.is_some_and(|w| key.end - 1 + w <= query.start)
}

/// The overview's spans: `n` tokens cut into at most `max_spans` spans of equal length (the last
/// one shorter).
pub fn overview_spans(n: usize, max_spans: usize) -> Vec<Range<usize>> {
    let len = n.div_ceil(max_spans.max(1)).max(1);
    (0..n).step_by(len).map(|s| s..(s + len).min(n)).collect()
}

/// The window's spans: tokens before `window` as one span, each token of `window` alone, tokens
/// after it as one span (the outer spans only when not empty).
pub fn window_spans(n: usize, window: Range<usize>) -> Vec<Range<usize>> {
    let window = window.start.min(n)..window.end.min(n);
    let before = (window.start > 0).then_some(0..window.start);
    let after = (window.end < n).then_some(window.end..n);
    before.into_iter().chain(window.map(|t| t..t + 1)).chain(after).collect()
}

/// The window of `len` tokens starting at `start` (clamped so it fits the `n` tokens); `None`
/// puts it at the end, where a decoder has read everything.
pub fn window_at(n: usize, start: Option<usize>, len: usize) -> Range<usize> {
    let len = len.min(n);
    let start = start.unwrap_or(n).min(n - len);
    start..start + len
}

/// The tokens of `spans`: a single token stays as it is; a longer span is labelled with its range
/// and the start of its text ("32–63 the cat sat…"); id, segment and type of its first token.
pub fn span_tokens(tokens: &Tokens, spans: &[Range<usize>]) -> Tokens {
    let label = |s: &Range<usize>| {
        if s.len() == 1 {
            return tokens.tokens[s.start].clone();
        }
        let text: String =
            tokens.tokens[s.clone()].iter().take(8).map(|t| t.replace(['Ġ', '▁'], " ").replace('Ċ', "↵")).collect();
        let text = text.trim();
        let mut snippet: String = text.chars().take(12).collect();
        if text.chars().count() > 12 {
            snippet.push('…');
        }
        format!("{}–{} {snippet}", s.start, s.end - 1)
    };
    Tokens {
        tokens: spans.iter().map(label).collect(),
        ids: spans.iter().map(|s| tokens.ids[s.start]).collect(),
        segments: spans.iter().map(|s| tokens.segments[s.start]).collect(),
        type_ids: spans.iter().map(|s| tokens.type_ids.get(s.start).copied().unwrap_or(0)).collect(),
        special: spans.iter().map(|s| s.len() == 1 && tokens.special[s.start]).collect(),
    }
}

/// An `n × keys` matrix pooled to `rows.len() × cols.len()` into `out`: columns summed, rows
/// averaged (the word merge's rule). With `causal`, keys after a query are known to weigh exactly
/// 0 and are not read (the sums are the same, bit for bit).
pub fn pool_matrix_into(
    matrix: &[f32],
    keys: usize,
    rows: &[Range<usize>],
    cols: &[Range<usize>],
    causal: bool,
    out: &mut [f32],
) {
    let w = cols.len();
    for (wi, span) in rows.iter().enumerate() {
        let acc = &mut out[wi * w..(wi + 1) * w];
        acc.fill(0.0);
        for q in span.clone() {
            let row = &matrix[q * keys..(q + 1) * keys];
            for (a, c) in acc.iter_mut().zip(cols) {
                let end = if causal { c.end.min(q + 1) } else { c.end };
                if c.start < end {
                    *a += row[c.start..end].iter().sum::<f32>();
                }
            }
        }
        let count = span.len() as f32;
        for a in acc.iter_mut() {
            *a /= count;
        }
    }
}

/// Rows of `width` values (`tokens × width`) averaged per span; empty when `values` is.
pub fn mean_rows(values: &[f32], width: usize, spans: &[Range<usize>]) -> Vec<f32> {
    if values.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(spans.len() * width);
    for s in spans {
        for d in 0..width {
            out.push(s.clone().map(|t| values[t * width + d]).sum::<f32>() / s.len() as f32);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    #[test]
    fn overview_and_window_spans_cover_every_token_once() {
        assert_eq!(overview_spans(10, 4), vec![0..3, 3..6, 6..9, 9..10]);
        assert_eq!(overview_spans(3, 256), vec![0..1, 1..2, 2..3]);
        assert_eq!(window_spans(10, 4..7), vec![0..4, 4..5, 5..6, 6..7, 7..10]);
        assert_eq!(window_spans(5, 0..5), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
        assert_eq!(window_at(8192, None, 256), 7936..8192);
        assert_eq!(window_at(8192, Some(9000), 256), 7936..8192);
        assert_eq!(window_at(100, Some(3), 256), 0..100);
        assert_eq!(window_at(1000, Some(3), 256), 3..259);
    }

    #[test]
    fn pooling_equals_the_word_merge_and_skipping_the_causal_zeros_changes_no_bit() {
        // A causal 7 × 7 matrix whose rows sum to 1.
        let n = 7;
        let mut m = vec![0.0f32; n * n];
        for q in 0..n {
            let total: f32 = (0..=q).map(|k| 1.0 + (q * 7 + k) as f32 * 0.37).sum();
            for k in 0..=q {
                m[q * n + k] = (1.0 + (q * 7 + k) as f32 * 0.37) / total;
            }
        }
        for spans in [overview_spans(n, 3), window_spans(n, 2..5)] {
            let merged = crate::analysis::words::merge_matrix(&m, n, &spans);
            for causal in [false, true] {
                let mut pooled = vec![f32::NAN; spans.len() * spans.len()];
                pool_matrix_into(&m, n, &spans, &spans, causal, &mut pooled);
                assert_eq!(
                    pooled.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    merged.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn a_pooled_cell_is_masked_only_when_all_its_token_cells_are() {
        let long = LongInput {
            total: 10,
            spans: window_spans(10, 4..7),
            view: LongView::Window,
            window: 4..7,
            layers_total: 1,
        };
        // Spans: 0..4 | 4 | 5 | 6 | 7..10.
        assert!(!long.is_masked(1, 0, true, None), "token 4 sees tokens 0–3");
        assert!(long.is_masked(1, 2, true, None), "token 4 does not see token 5");
        assert!(!long.is_masked(0, 0, true, None), "the diagonal span sees itself");
        assert!(long.is_masked(0, 4, true, None));
        assert!(!long.is_masked(4, 0, true, Some(5)), "with a window of 5 token 7 still sees token 3");
        assert!(long.is_masked(4, 0, true, Some(4)), "a window of 4 hides tokens 0–3 from tokens 7–9");
        assert_eq!(long.describe(), "tokens 4–6 of 10");
    }

    #[test]
    fn span_labels_name_their_range_and_text() {
        let t = Tokens {
            tokens: ["The", "Ġcat", "Ġsat", "Ġon", "Ġthe", "Ġmat", "."].map(String::from).to_vec(),
            ids: (0..7).collect(),
            segments: vec![0; 7],
            type_ids: vec![0; 7],
            special: vec![false; 7],
        };
        let spans = span_tokens(&t, &[0..3, 3..4, 4..7]);
        assert_eq!(spans.tokens, vec!["0–2 The cat sat", "Ġon", "4–6 the mat."]);
        assert_eq!(spans.ids, vec![0, 3, 4]);
    }
}
