//! Choosing what a view shows of one head's matrix: dropping special tokens (rows renormalised),
//! sentence-pair blocks, and downsampled thumbnails for long inputs.

use super::Tokens;

/// Which sentence-pair block of the attention to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum PairFilter {
    /// Every query and key.
    #[default]
    All,
    /// Sentence A attending to A.
    AToA,
    /// A attending to B.
    AToB,
    /// B attending to A.
    BToA,
    /// B attending to B.
    BToB,
}

impl PairFilter {
    /// Every filter, in display order.
    pub const ALL: [Self; 5] = [Self::All, Self::AToA, Self::AToB, Self::BToA, Self::BToB];

    /// Short label, e.g. "A→B".
    pub fn label(self) -> &'static str {
        match self {
            Self::All => "All",
            Self::AToA => "A→A",
            Self::AToB => "A→B",
            Self::BToA => "B→A",
            Self::BToB => "B→B",
        }
    }

    /// Whether a line from a query in `query_segment` to a key in `key_segment` passes.
    pub fn admits(self, query_segment: u8, key_segment: u8) -> bool {
        match self {
            Self::All => true,
            Self::AToA => query_segment == 0 && key_segment == 0,
            Self::AToB => query_segment == 0 && key_segment == 1,
            Self::BToA => query_segment == 1 && key_segment == 0,
            Self::BToB => query_segment == 1 && key_segment == 1,
        }
    }
}

/// Positions of the tokens a view shows: all, or all but the special tokens.
pub fn visible_tokens(tokens: &Tokens, hide_special: bool) -> Vec<usize> {
    (0..tokens.len()).filter(|&i| !(hide_special && tokens.special[i])).collect()
}

/// The rows and columns `keep` of an `n × n` matrix; when `renormalise`, each row is divided by its
/// sum so it sums to 1 again (a row that kept nothing stays zero).
pub fn submatrix(matrix: &[f32], n: usize, keep: &[usize], renormalise: bool) -> Vec<f32> {
    submatrix_rect(matrix, n, keep, keep, renormalise)
}

/// The rows `keep_rows` and columns `keep_cols` of a matrix with `cols` columns (cross-attention:
/// target rows, source columns), rows renormalised as in [`submatrix`].
pub fn submatrix_rect(
    matrix: &[f32],
    cols: usize,
    keep_rows: &[usize],
    keep_cols: &[usize],
    renormalise: bool,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(keep_rows.len() * keep_cols.len());
    for &q in keep_rows {
        let row = &matrix[q * cols..(q + 1) * cols];
        let start = out.len();
        out.extend(keep_cols.iter().map(|&k| row[k]));
        if renormalise {
            let sum: f32 = out[start..].iter().sum();
            if sum > 0.0 {
                out[start..].iter_mut().for_each(|v| *v /= sum);
            }
        }
    }
    out
}

/// Marks the cells of a square matrix over token positions `keep` that a causal mask hid (key
/// after query) as NaN, which every view draws as masked rather than as a zero weight.
pub fn mask_causal(values: &mut [f32], keep: &[usize]) {
    let m = keep.len();
    for (r, &q) in keep.iter().enumerate() {
        for (c, &k) in keep.iter().enumerate() {
            if k > q {
                values[r * m + c] = f32::NAN;
            }
        }
    }
}

/// Marks the cells of a square matrix over token positions `keep` that the causal mask (`causal`:
/// key after query) or a sliding window (`window`: key `window` or more positions before the query)
/// hid as NaN: drawn as masked, never as a zero weight.
pub fn mask_hidden(values: &mut [f32], keep: &[usize], causal: bool, window: Option<usize>) {
    let m = keep.len();
    for (r, &q) in keep.iter().enumerate() {
        for (c, &k) in keep.iter().enumerate() {
            if (causal && k > q) || window.is_some_and(|w| k + w <= q) {
                values[r * m + c] = f32::NAN;
            }
        }
    }
}

/// A copy of an `n × n` matrix over all positions with the causally hidden cells as NaN.
pub fn causal_masked(matrix: &[f32], n: usize) -> Vec<f32> {
    let mut out = matrix.to_vec();
    mask_causal(&mut out, &(0..n).collect::<Vec<_>>());
    out
}

/// Shrinks an `n × n` matrix to at most `size × size` cells, each the maximum of the block it
/// covers (so a single strong weight stays visible; NaN, masked, only where the whole block is).
/// Returns the matrix and its side.
pub fn downsample_max(matrix: &[f32], n: usize, size: usize) -> (Vec<f32>, usize) {
    if n <= size || size == 0 {
        return (matrix.to_vec(), n);
    }
    let mut out = vec![f32::NAN; size * size];
    for q in 0..n {
        let oq = q * size / n;
        for k in 0..n {
            let ok = k * size / n;
            let cell = &mut out[oq * size + ok];
            *cell = cell.max(matrix[q * n + k]);
        }
    }
    (out, size)
}

/// A `rows × cols` matrix as a square picture of at most `size × size` cells (a model-view
/// thumbnail of cross-attention): each cell the maximum of the block it covers, rows or columns
/// repeated where there are fewer than cells. Returns the cells and the side.
pub fn square_max(matrix: &[f32], rows: usize, cols: usize, size: usize) -> (Vec<f32>, usize) {
    if rows == cols {
        return downsample_max(matrix, rows, size);
    }
    let side = rows.max(cols).min(size.max(1));
    if rows == 0 || cols == 0 {
        return (Vec::new(), 0);
    }
    // The source range of output index `o` along an axis of `n` items.
    let span = |o: usize, n: usize| {
        let lo = o * n / side;
        lo..((o + 1) * n / side).max(lo + 1).min(n)
    };
    let mut out = vec![f32::NAN; side * side];
    for oq in 0..side {
        for ok in 0..side {
            let cell = &mut out[oq * side + ok];
            for q in span(oq, rows) {
                for k in span(ok, cols) {
                    *cell = cell.max(matrix[q * cols + k]);
                }
            }
        }
    }
    (out, side)
}

#[cfg(test)]
mod tests {

    #[test]
    fn rectangular_pictures_and_submatrices_keep_rows_and_columns_apart() {
        let m = [0.1, 0.2, 0.7, 0.5, 0.5, 0.0];
        assert_eq!(super::submatrix_rect(&m, 3, &[1], &[0, 2], false), vec![0.5, 0.0]);
        let (cells, side) = super::square_max(&m, 2, 3, 128);
        assert_eq!(side, 3);
        // Row 0 of 2 covers output rows 0 (and row 1 covers 1–2); columns map one to one.
        assert_eq!(&cells[..3], &[0.1, 0.2, 0.7]);
        assert_eq!(&cells[6..], &[0.5, 0.5, 0.0]);
    }

    #[test]
    fn a_sliding_window_masks_keys_too_far_back_as_well_as_later_ones() {
        let mut v = vec![1.0f32; 16];
        mask_hidden(&mut v, &[0, 1, 2, 3], true, Some(2));
        // Query 3 sees keys 2 and 3 only; query 0 sees key 0 only.
        let hidden: Vec<bool> = v.iter().map(|x| x.is_nan()).collect();
        assert_eq!(&hidden[12..], &[true, true, false, false]);
        assert_eq!(&hidden[..4], &[false, true, true, true]);
        let mut kept = vec![1.0f32; 4];
        mask_hidden(&mut kept, &[1, 3], true, Some(2));
        assert!(kept[2].is_nan() && !kept[3].is_nan(), "positions, not indices: {kept:?}");
    }
    use super::*;

    #[test]
    fn dropping_special_tokens_renormalises_rows() {
        // [CLS] a [SEP]: row "a" gives 0.5 to [CLS], 0.25 to a, 0.25 to [SEP].
        let m = [1.0, 0.0, 0.0, 0.5, 0.25, 0.25, 0.0, 0.0, 1.0];
        let tokens = Tokens {
            tokens: vec!["[CLS]".into(), "a".into(), "[SEP]".into()],
            ids: vec![101, 1, 102],
            segments: vec![0; 3],
            type_ids: vec![0; 3],
            special: vec![true, false, true],
        };
        let keep = visible_tokens(&tokens, true);
        assert_eq!(keep, vec![1]);
        assert_eq!(submatrix(&m, 3, &keep, true), vec![1.0]);
        assert_eq!(submatrix(&m, 3, &[0, 1], false), vec![1.0, 0.0, 0.5, 0.25]);
        let two = submatrix(&m, 3, &[1, 2], true);
        assert!((two[0] - 0.5).abs() < 1e-6 && (two[1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn pair_blocks_reassemble_the_whole_matrix() {
        let segments = [0u8, 0, 1, 1];
        for q in 0..4 {
            for k in 0..4 {
                let blocks = PairFilter::ALL[1..].iter().filter(|f| f.admits(segments[q], segments[k])).count();
                assert_eq!(blocks, 1, "each cell lies in exactly one block");
                assert!(PairFilter::All.admits(segments[q], segments[k]));
            }
        }
    }

    #[test]
    fn downsampling_keeps_block_maxima() {
        let mut m = vec![0.0f32; 16];
        m[3 * 4 + 2] = 0.9;
        let (small, side) = downsample_max(&m, 4, 2);
        assert_eq!(side, 2);
        assert_eq!(small, vec![0.0, 0.0, 0.0, 0.9]);
        assert_eq!(downsample_max(&m, 4, 8).1, 4);
    }

    #[test]
    fn causal_masking_marks_keys_after_the_query() {
        let mut m = vec![1.0f32; 9];
        mask_causal(&mut m, &[0, 2, 5]);
        let masked: Vec<bool> = m.iter().map(|v| v.is_nan()).collect();
        assert_eq!(masked, vec![false, true, true, false, false, true, false, false, false]);
        let (small, _) = downsample_max(&m, 3, 2);
        assert!(small[1].is_nan() && !small[0].is_nan() && !small[2].is_nan());
    }
}
