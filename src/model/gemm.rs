//! Matrix products on strided views of plain slices, through the `gemm` crate (Candle's own CPU
//! matmul). Calling it directly lets the encoder read each head's queries, keys and values in place
//! from the fused q/k/v matrix, write attention scores straight into the recorded output, and add a
//! bias and the residual in the same pass as the product: no tensor allocations or copies between
//! steps. The one `unsafe` call of the crate lives here, behind bounds checks.

#![allow(unsafe_code)] // the one place that needs it: see the SAFETY comment in `matmul`

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
    pub fn t(self) -> Self {
        Self { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
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

/// `dst = (dst if accumulate, else 0) + scale · lhs · rhs`, on the calling thread (the encoder runs
/// independent products in parallel: weight panels, heads).
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
    // Strides fit in isize: checked by the constructors.
    let stride = |s: usize| s as isize;
    // SAFETY: the constructors checked that every element of the three views lies inside its slice
    // (so every address gemm forms is in bounds), and `MatMut::rows` that distinct elements of `dst`
    // are distinct memory (so gemm's threads never write one location twice). `dst` is borrowed
    // mutably and `lhs`/`rhs` shared, so the output cannot alias the inputs, and all three borrows
    // outlive the call. gemm reads `dst` only when `read_dst` (accumulate) is set.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            stride(dst_row_stride),
            accumulate,
            lhs.data.as_ptr(),
            stride(lhs.col_stride),
            stride(lhs.row_stride),
            rhs.data.as_ptr(),
            stride(rhs.col_stride),
            stride(rhs.row_stride),
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // small integers multiply exactly
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        (0..m * n).map(|idx| (0..k).map(|p| a[idx / n * k + p] * b[p * n + idx % n]).sum()).collect()
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
