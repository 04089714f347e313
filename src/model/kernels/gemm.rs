//! Matrix products on strided views of plain slices, summed in one fixed order per element (see
//! [`matmul`]). Views let the encoder read each head's queries, keys and values in place from the
//! fused q/k/v matrix and write attention scores straight into the recorded output: no tensor
//! allocations or copies between steps. The fixed order makes a row of any product the same bits
//! however many rows are computed with it, which a key/value cache and prefix reuse rely on. And
//! the products of a few rows by a matrix kept in GGUF blocks, each block widened in registers
//! ([`block_product`], [`block_dots`]).

#![allow(clippy::inline_always)] // the kernels are vectorised only when inlined into the dispatched functions

use super::blocks::{BlockKind, by_block_kind};
use super::elementwise::{LANES, dot_finish};
use super::simd::{Rows, Simd};

/// A read-only matrix view: element `(i, j)` is `data[i * row_stride + j * col_stride]`.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A `rows × cols` view of `data` with the given strides.
    ///
    /// # Panics
    /// If an element of the view would lie outside `data`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> Self {
        assert_in_bounds(data.len(), rows, cols, row_stride, col_stride);
        Self { data, rows, cols, row_stride, col_stride }
    }

    /// A row-major `rows × cols` view with rows `row_stride` apart.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self::new(data, rows, cols, row_stride, 1)
    }

    /// The transpose (no copy).
    #[must_use]
    pub fn t(self) -> Self {
        Self { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    /// The view copied into rows (`rows × cols`, row-major), in 16 × 16 blocks so that a
    /// transposed view is read and written a cache line at a time.
    pub fn packed(&self) -> Vec<f32> {
        const BLOCK: usize = 16;
        let (rows, cols) = (self.rows, self.cols);
        let mut out = vec![0.0f32; rows * cols];
        for i0 in (0..rows).step_by(BLOCK) {
            for j0 in (0..cols).step_by(BLOCK) {
                let (i1, j1) = ((i0 + BLOCK).min(rows), (j0 + BLOCK).min(cols));
                if self.row_stride == 1 {
                    // Down the columns: each source column is contiguous.
                    for j in j0..j1 {
                        let column = &self.data[j * self.col_stride + i0..j * self.col_stride + i1];
                        for (i, &v) in (i0..i1).zip(column) {
                            out[i * cols + j] = v;
                        }
                    }
                } else {
                    for i in i0..i1 {
                        for j in j0..j1 {
                            out[i * cols + j] = self.data[i * self.row_stride + j * self.col_stride];
                        }
                    }
                }
            }
        }
        out
    }
}

/// A writable row-major matrix view: element `(i, j)` is `data[i * row_stride + j]`.
#[derive(Debug)]
pub struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a> MatMut<'a> {
    /// A row-major `rows × cols` view of `data` with rows `row_stride` apart.
    ///
    /// # Panics
    /// If an element would lie outside `data`, or rows would overlap (`row_stride < cols`).
    pub fn rows(data: &'a mut [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        assert!(rows <= 1 || row_stride >= cols, "rows of a writable view overlap");
        assert_in_bounds(data.len(), rows, cols, row_stride, 1);
        Self { data, rows, cols, row_stride }
    }
}

/// Panics unless every element of a `rows × cols` view with these strides lies in `0..len`.
fn assert_in_bounds(len: usize, rows: usize, cols: usize, row_stride: usize, col_stride: usize) {
    if rows == 0 || cols == 0 {
        return;
    }
    let last = (rows - 1).checked_mul(row_stride).and_then(|r| (cols - 1).checked_mul(col_stride)?.checked_add(r));
    assert!(
        last.is_some_and(|last| last < len)
            && isize::try_from(row_stride).is_ok()
            && isize::try_from(col_stride).is_ok(),
        "a {rows}×{cols} view with strides ({row_stride}, {col_stride}) does not fit in {len} values"
    );
}

/// Columns of the register tiles (and rows of `probs · v`'s).
const TILE: usize = 4;

/// Rows of `x · Wᵀ`'s register tiles (six rows × four columns: 24 of the 32 vector registers).
const DOT_ROWS: usize = 6;

/// `dst = (dst if accumulate, else 0) + scale · lhs · rhs`, on the calling thread (the encoder runs
/// independent products in parallel: weight panels, heads).
///
/// Every element is summed in one fixed order, whatever the shapes around it — so a row of a
/// product is the same bits however many rows run with it (a token written after a key/value
/// cache, a keystroke's suffix, a whole fresh pass), and on every x86 machine (AVX-512, AVX2 or
/// none):
/// - when a column of `rhs` lies contiguous in memory (`x · Wᵀ`; cross-attention's `q · kᵀ`),
///   sixteen lanes each sum every sixteenth product in order with fused multiply–adds, then the
///   lanes are added pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1);
/// - when rows of `rhs` are contiguous (`probs · v`; `q · kᵀ` against a head's keys transposed),
///   the products are added one after another, in order, with fused multiply–adds;
/// - other views of `rhs` are copied into the first layout; the layout of `rhs` alone picks the
///   order (`lhs` is copied into rows when its rows are not contiguous).
///
/// The sum is then scaled by `scale` (exactly when it is 1) and added to `dst` when `accumulate`.
///
/// # Panics
/// If the shapes do not chain (`lhs` is `m × k`, `rhs` is `k × n`, `dst` is `m × n`).
pub fn matmul(dst: MatMut<'_>, lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f32, accumulate: bool) {
    let MatMut { data: dst, rows: dst_rows, cols: dst_cols, row_stride: dst_row_stride } = dst;
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert!(
        rhs.rows == k && dst_rows == m && dst_cols == n,
        "matmul of {m}×{k} by {}×{n} into {dst_rows}×{dst_cols}",
        rhs.rows
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(dst_row_stride.max(1)).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let out = Out { data: dst, row_stride: dst_row_stride, scale, accumulate };
    // The order depends on how `rhs` lies only (never on `m`): `lhs` is copied to rows if need be.
    let packed: Vec<f32>;
    let a = if lhs.col_stride == 1 {
        Rows { data: lhs.data, stride: lhs.row_stride }
    } else {
        packed = lhs.packed();
        Rows { data: &packed, stride: k }
    };
    if rhs.row_stride == 1 {
        dot(out, a, Rows { data: rhs.data, stride: rhs.col_stride }, m, n, k);
    } else if rhs.col_stride == 1 {
        axpy(out, a, Rows { data: rhs.data, stride: rhs.row_stride }, m, n, k);
    } else {
        let b = rhs.t().packed();
        dot(out, a, Rows { data: &b, stride: k }, m, n, k);
    }
}

/// Rows of `x` up to which [`block_product`] runs (decoding, a keystroke's suffix).
pub const BLOCK_ROWS: usize = 4;

/// `dst = x · Wᵀ` for `W` in llama.cpp blocks of `kind` (`blocks`: `dst`'s columns as rows of
/// `k / values` blocks), for up to [`BLOCK_ROWS`] rows of `x` — bit for bit [`matmul`] of `x` by
/// the widened rows (each value as Candle's `to_float` computes it), summed in the same order, but
/// each block is widened in registers as its products need it (the f32 never goes through memory).
/// (Scales are widened by F16C: the same f32 for every f16 but a signalling NaN, which no file
/// holds and which gives a NaN either way.)
/// False, with nothing written, for rows of floats, on a machine without AVX-512 or for shapes it
/// does not take: the caller widens and multiplies instead.
pub fn block_product(kind: BlockKind, dst: MatMut<'_>, x: MatRef<'_>, blocks: &[u8]) -> bool {
    let MatMut { data: dst, rows: m, cols: n, row_stride } = dst;
    let (k, (values, bytes)) = (x.cols, kind.block());
    let usable = !kind.is_float()
        && x.rows == m
        && m <= BLOCK_ROWS
        && x.col_stride == 1
        && k.is_multiple_of(values)
        && blocks.len() == n * k / values * bytes;
    if usable && let Some(regs) = Simd::detect().in_registers() {
        let row_bytes = k / values * bytes;
        let w = |j: usize| &blocks[j * row_bytes..(j + 1) * row_bytes];
        let dots = |a: &[f32], j: usize, out: &mut [f32]| {
            macro_rules! each {
                ($d:ty) => {
                    if out.len() == TILE {
                        out.copy_from_slice(&regs.dots::<$d, TILE>(a, std::array::from_fn(|c| w(j + c))));
                    } else {
                        for (c, o) in out.iter_mut().enumerate() {
                            *o = regs.dots::<$d, 1>(a, [w(j + c)])[0];
                        }
                    }
                };
            }
            by_block_kind!(kind, each, {});
        };
        let mut j = 0;
        while j < n {
            let cols = TILE.min(n - j);
            for i in 0..m {
                let a = &x.data[i * x.row_stride..i * x.row_stride + k];
                dots(a, j, &mut dst[i * row_stride + j..i * row_stride + j + cols]);
            }
            j += cols;
        }
        return true;
    }
    false
}

/// `out[j] = kernels::dot(w_j, h)` for the rows `w_j` of a matrix in llama.cpp blocks of `kind`
/// (`blocks`: `out.len()` rows of `h.len() / values` blocks) — the language-model head's logits of
/// a written token — bit for bit [`super::dot`] of each widened row: the same
/// sixteen lanes, products and additions in the same order, each block widened in registers.
/// False, with nothing written, for rows of floats or without AVX-512.
pub fn block_dots(kind: BlockKind, h: &[f32], blocks: &[u8], out: &mut [f32]) -> bool {
    const _: () = assert!(LANES == 16, "block_dots fills sixteen lanes");
    let (k, (values, bytes)) = (h.len(), kind.block());
    let usable = !kind.is_float() && k.is_multiple_of(values) && blocks.len() == out.len() * k / values * bytes;
    if usable && let Some(regs) = Simd::detect().in_registers() {
        let row_bytes = k / values * bytes;
        let w = |j: usize| &blocks[j * row_bytes..(j + 1) * row_bytes];
        // Past the blocks there is nothing left: the empty tail's sum, as `dot` forms it.
        let tail: f32 = std::iter::empty::<f32>().sum();
        let finish = |lanes: &[f32; 16]| dot_finish(lanes, tail);
        macro_rules! rows {
            ($d:ty) => {{
                let whole = out.len() / TILE * TILE;
                for (t, o) in out[..whole].chunks_exact_mut(TILE).enumerate() {
                    let lanes = regs.lanes::<$d, TILE>(h, std::array::from_fn(|c| w(t * TILE + c)));
                    for (o, l) in o.iter_mut().zip(&lanes) {
                        *o = finish(l);
                    }
                }
                for (j, o) in out.iter_mut().enumerate().skip(whole) {
                    let [lanes] = regs.lanes::<$d, 1>(h, [w(j)]);
                    *o = finish(&lanes);
                }
            }};
        }
        by_block_kind!(kind, rows, {});
        return true;
    }
    false
}

/// Where a product goes: `dst[i·row_stride + j] = (dst if accumulate) + scale · sum`.
struct Out<'a> {
    data: &'a mut [f32],
    row_stride: usize,
    scale: f32,
    accumulate: bool,
}

impl Out<'_> {
    fn put(&mut self, i: usize, j: usize, sum: f32) {
        let value = if self.scale.to_bits() == 1.0f32.to_bits() { sum } else { self.scale * sum };
        let cell = &mut self.data[i * self.row_stride + j];
        *cell = if self.accumulate { *cell + value } else { value };
    }
}

/// `out[i, j] = Σ_p a[i, p] · b[j, p]` (rows of `a` and `b` contiguous): sixteen lanes, then pairwise.
fn dot(mut out: Out<'_>, a: Rows<'_>, b: Rows<'_>, m: usize, n: usize, k: usize) {
    let simd = Simd::detect();
    let mut i = 0;
    while i < m {
        let rows = DOT_ROWS.min(m - i);
        let mut j = 0;
        while j < n {
            let cols = TILE.min(n - j);
            let mut sums = [[0.0f32; TILE]; DOT_ROWS];
            let ar = |r: usize| a.row(i + r, k);
            let bc = |c: usize| b.row(j + c, k);
            match (rows == DOT_ROWS, cols == TILE) {
                (true, true) => sums = simd.dot_tile(std::array::from_fn(ar), std::array::from_fn(bc)),
                (false, true) => {
                    for r in 0..rows {
                        sums[r] = simd.dot_tile::<1, TILE>([ar(r)], std::array::from_fn(bc))[0];
                    }
                }
                (true, false) => {
                    for c in 0..cols {
                        let column = simd.dot_tile::<DOT_ROWS, 1>(std::array::from_fn(ar), [bc(c)]);
                        for r in 0..DOT_ROWS {
                            sums[r][c] = column[r][0];
                        }
                    }
                }
                (false, false) => {
                    for r in 0..rows {
                        for c in 0..cols {
                            sums[r][c] = simd.dot_tile::<1, 1>([ar(r)], [bc(c)])[0][0];
                        }
                    }
                }
            }
            for r in 0..rows {
                for c in 0..cols {
                    out.put(i + r, j + c, sums[r][c]);
                }
            }
            j += cols;
        }
        i += rows;
    }
}

/// `out[i, j] = Σ_p a[i, p] · b[p, j]` (rows of `a` and `b` contiguous), `p` in order.
fn axpy(mut out: Out<'_>, a: Rows<'_>, b: Rows<'_>, m: usize, n: usize, k: usize) {
    let simd = Simd::detect();
    let mut sums = vec![0.0f32; TILE * n];
    let mut i = 0;
    while i < m {
        let rows = if m - i >= TILE { TILE } else { 1 };
        if rows == TILE {
            simd.axpy_rows::<TILE>(std::array::from_fn(|r| a.row(i + r, k)), b, k, n, &mut sums);
        } else {
            simd.axpy_rows::<1>([a.row(i, k)], b, k, n, &mut sums);
        }
        for r in 0..rows {
            for j in 0..n {
                out.put(i + r, j, sums[r * n + j]);
            }
        }
        i += rows;
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // small integers multiply exactly
mod tests {
    use super::*;
    use crate::model::kernels::simd::{Scalar, axpy_in, dot_tile_in};

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        (0..m * n).map(|idx| (0..k).map(|p| a[idx / n * k + p] * b[p * n + idx % n]).sum()).collect()
    }

    /// A view copied into rows holds its elements, for row-major, transposed and other strides
    /// (sizes that are no multiple of the copy's blocks).
    #[test]
    fn packed_views_hold_their_elements() {
        let data: Vec<f32> = (0..40 * 37).map(|i| i as f32).collect();
        for view in [
            MatRef::rows(&data, 19, 35, 37),
            MatRef::rows(&data, 37, 40, 40).t(),
            MatRef::new(&data, 18, 17, 2, 80),
            MatRef::rows(&data, 1, 5, 5).t(),
        ] {
            let packed = view.packed();
            assert_eq!(packed.len(), view.rows * view.cols);
            for i in 0..view.rows {
                for j in 0..view.cols {
                    assert_eq!(packed[i * view.cols + j], data[i * view.row_stride + j * view.col_stride]);
                }
            }
        }
    }

    #[test]
    fn products_of_strided_views_match_the_naive_formula() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let want = naive(&a, &b, m, k, n);
        let mut out = vec![0.0; m * n];
        matmul(MatMut::rows(&mut out, m, n, n), MatRef::rows(&a, m, k, k), MatRef::rows(&b, k, n, n), 1.0, false);
        assert_eq!(out, want);
        // Bᵀ stored row-major, read through a transposed view; the result lands in every other
        // column of a wider buffer, scaled, on top of what was there.
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let mut wide = vec![1.0; m * 2 * n];
        matmul(
            MatMut::rows(&mut wide, m, n, 2 * n),
            MatRef::rows(&a, m, k, k),
            MatRef::rows(&bt, n, k, k).t(),
            0.5,
            true,
        );
        for i in 0..m {
            for j in 0..n {
                assert_eq!(wide[i * 2 * n + j], 1.0 + 0.5 * want[i * n + j]);
                assert_eq!(wide[i * 2 * n + n + j], 1.0, "untouched");
            }
        }
    }

    /// Pseudo-random values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Every layout's product, whole and a row at a time.
    fn products(a: &[f32], b: &[f32], k: usize, n: usize, rows: std::ops::Range<usize>) -> [Vec<f32>; 3] {
        let r = rows.len();
        let a = &a[rows.start * k..rows.end * k];
        let bt: Vec<f32> = (0..n * k).map(|e| b[e % k * n + e / k]).collect();
        let mut out = [vec![0.0; r * n], vec![0.0; r * n], vec![0.0; r * n]];
        // b row-major (rows of b contiguous), bᵀ row-major read through a view, and a strided
        // view of a (copied into the first layout).
        matmul(MatMut::rows(&mut out[0], r, n, n), MatRef::rows(a, r, k, k), MatRef::rows(b, k, n, n), 0.5, false);
        matmul(
            MatMut::rows(&mut out[1], r, n, n),
            MatRef::rows(a, r, k, k),
            MatRef::rows(&bt, n, k, k).t(),
            0.5,
            false,
        );
        let at: Vec<f32> = (0..r * k).map(|e| a[e % r * k + e / r]).collect();
        matmul(
            MatMut::rows(&mut out[2], r, n, n),
            MatRef::rows(&at, k, r, r).t(),
            MatRef::rows(b, k, n, n),
            0.5,
            false,
        );
        out
    }

    #[test]
    fn a_row_is_the_same_bits_however_many_rows_run_with_it() {
        for (m, k, n) in [(9, 1, 3), (7, 16, 5), (13, 33, 70), (6, 100, 17), (5, 576, 64)] {
            let a = values(m * k, 1 + k as u64);
            let b = values(k * n, 2 + n as u64);
            let whole = products(&a, &b, k, n, 0..m);
            for i in 0..m {
                let row = products(&a, &b, k, n, i..i + 1);
                for (layout, (w, r)) in whole.iter().zip(&row).enumerate() {
                    assert_eq!(
                        w[i * n..(i + 1) * n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        r.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "layout {layout}, row {i} of {m}×{k}·{k}×{n}"
                    );
                }
            }
            // Near the exact products (in f64).
            for (layout, got) in whole.iter().enumerate() {
                for i in 0..m {
                    for j in 0..n {
                        let exact: f64 =
                            (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j])).sum::<f64>() * 0.5;
                        assert!(
                            (f64::from(got[i * n + j]) - exact).abs() < 1e-5 * (k as f64).sqrt(),
                            "layout {layout}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_instruction_set_sums_to_the_same_bits() {
        let k = 37;
        let a = values(4 * k, 3);
        let b = values(4 * k, 4);
        let ar: [&[f32]; TILE] = std::array::from_fn(|r| &a[r * k..(r + 1) * k]);
        let br: [&[f32]; TILE] = std::array::from_fn(|c| &b[c * k..(c + 1) * k]);
        let want = dot_tile_in::<Scalar, TILE, TILE>(ar, br);
        assert_eq!(Simd::detect().dot_tile(ar, br), want);
        let n = 85;
        let bm = values(k * n, 5);
        let mut want = vec![0.0; TILE * n];
        axpy_in::<Scalar, TILE>(ar, Rows { data: &bm, stride: n }, k, n, &mut want);
        let mut got = vec![0.0; TILE * n];
        Simd::detect().axpy_rows(ar, Rows { data: &bm, stride: n }, k, n, &mut got);
        assert_eq!(got, want);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            assert_eq!(Simd::Avx2.dot_tile(ar, br), dot_tile_in::<Scalar, TILE, TILE>(ar, br));
            Simd::Avx2.axpy_rows(ar, Rows { data: &bm, stride: n }, k, n, &mut got);
            assert_eq!(got, want);
        }
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_view_past_the_end_is_refused() {
        let data = [0.0f32; 11];
        let _ = MatRef::rows(&data, 3, 4, 4);
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_rows_are_refused_for_writing() {
        let mut data = [0.0f32; 16];
        let _ = MatMut::rows(&mut data, 3, 4, 2);
    }
}
