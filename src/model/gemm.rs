//! Matrix products on strided views of plain slices, summed in one fixed order per element (see
//! [`matmul`]). Views let the encoder read each head's queries, keys and values in place from the
//! fused q/k/v matrix and write attention scores straight into the recorded output: no tensor
//! allocations or copies between steps. The fixed order makes a row of any product the same bits
//! however many rows are computed with it, which a key/value cache and prefix reuse rely on. The
//! crate's `unsafe` (SIMD intrinsics, dispatched on the features detected) lives here.

#![allow(unsafe_code)] // SIMD intrinsics, see the SAFETY comments (alloc.rs has the other use: madvise)
#![allow(clippy::inline_always)] // the kernels are vectorised only when inlined into the dispatched functions

use crate::model::engine::BlockKind;

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
        packed = (0..m * k).map(|e| lhs.data[e / k * lhs.row_stride + e % k * lhs.col_stride]).collect();
        Rows { data: &packed, stride: k }
    };
    if rhs.row_stride == 1 {
        dot(out, a, Rows { data: rhs.data, stride: rhs.col_stride }, m, n, k);
    } else if rhs.col_stride == 1 {
        axpy(out, a, Rows { data: rhs.data, stride: rhs.row_stride }, m, n, k);
    } else {
        let b: Vec<f32> = (0..n * k).map(|e| rhs.data[e % k * rhs.row_stride + e / k * rhs.col_stride]).collect();
        dot(out, a, Rows { data: &b, stride: k }, m, n, k);
    }
}

/// `$m!(decoder)` for the x86 decoder of `$kind`'s blocks (nothing for rows of floats): the one
/// dispatch of [`block_product`] and [`block_dots`] over the kinds kept in their blocks.
#[cfg(target_arch = "x86_64")]
macro_rules! by_block_kind {
    ($kind:expr, $m:ident) => {
        match $kind {
            BlockKind::Q4_0 => $m!(x86::Q4_0),
            BlockKind::Q4_1 => $m!(x86::Q4_1),
            BlockKind::Q5_0 => $m!(x86::Q5_0),
            BlockKind::Q5_1 => $m!(x86::Q5_1),
            BlockKind::Q8_0 => $m!(x86::Q8_0),
            BlockKind::Q4K => $m!(x86::Q4K),
            BlockKind::Q5K => $m!(x86::Q5K),
            BlockKind::Q6K => $m!(x86::Q6K),
            BlockKind::F32 | BlockKind::F16 | BlockKind::Bf16 => {}
        }
    };
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
    #[cfg(target_arch = "x86_64")]
    if usable && Simd::detect() == Simd::Avx512 && std::arch::is_x86_feature_detected!("f16c") {
        let row_bytes = k / values * bytes;
        let w = |j: usize| &blocks[j * row_bytes..(j + 1) * row_bytes];
        let dots = |a: &[f32], j: usize, out: &mut [f32]| {
            // SAFETY: AVX-512 and F16C were detected; row lengths are checked inside.
            macro_rules! tile {
                ($c:expr, $d:ty) => {
                    unsafe { x86::block_dot_avx512::<$d, $c>(a, std::array::from_fn(|c| w(j + c))) }
                };
            }
            macro_rules! each {
                ($d:ty) => {
                    if out.len() == TILE {
                        out.copy_from_slice(&tile!(TILE, $d));
                    } else {
                        for (c, o) in out.iter_mut().enumerate() {
                            *o = unsafe { x86::block_dot_avx512::<$d, 1>(a, [w(j + c)]) }[0];
                        }
                    }
                };
            }
            by_block_kind!(kind, each);
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
    let _ = (dst, row_stride, usable, blocks);
    false
}

/// `out[j] = kernels::dot(w_j, h)` for the rows `w_j` of a matrix in llama.cpp blocks of `kind`
/// (`blocks`: `out.len()` rows of `h.len() / values` blocks) — the language-model head's logits of
/// a written token — bit for bit [`crate::model::kernels::dot`] of each widened row: the same
/// sixteen lanes, products and additions in the same order, each block widened in registers.
/// False, with nothing written, for rows of floats or without AVX-512.
pub fn block_dots(kind: BlockKind, h: &[f32], blocks: &[u8], out: &mut [f32]) -> bool {
    const _: () = assert!(crate::model::kernels::LANES == 16, "block_dots fills sixteen lanes");
    let (k, (values, bytes)) = (h.len(), kind.block());
    let usable = !kind.is_float() && k.is_multiple_of(values) && blocks.len() == out.len() * k / values * bytes;
    #[cfg(target_arch = "x86_64")]
    if usable && Simd::detect() == Simd::Avx512 && std::arch::is_x86_feature_detected!("f16c") {
        let row_bytes = k / values * bytes;
        let w = |j: usize| &blocks[j * row_bytes..(j + 1) * row_bytes];
        // Past the blocks there is nothing left: the empty tail's sum, as `dot` forms it.
        let tail: f32 = std::iter::empty::<f32>().sum();
        let finish = |lanes: &[f32; 16]| crate::model::kernels::dot_finish(lanes, tail);
        macro_rules! rows {
            ($d:ty) => {{
                let whole = out.len() / TILE * TILE;
                for (t, o) in out[..whole].chunks_exact_mut(TILE).enumerate() {
                    // SAFETY: AVX-512 and F16C were detected; row lengths are checked inside.
                    let lanes =
                        unsafe { x86::block_lanes_avx512::<$d, TILE>(h, std::array::from_fn(|c| w(t * TILE + c))) };
                    for (o, l) in o.iter_mut().zip(&lanes) {
                        *o = finish(l);
                    }
                }
                for (j, o) in out.iter_mut().enumerate().skip(whole) {
                    let [lanes] = unsafe { x86::block_lanes_avx512::<$d, 1>(h, [w(j)]) };
                    *o = finish(&lanes);
                }
            }};
        }
        by_block_kind!(kind, rows);
        return true;
    }
    let _ = (usable, h, blocks, out);
    false
}

/// Sub-block `j`'s 6-bit scale and minimum in a `Q4_K` / `Q5_K` block's twelve scale bytes (`q`),
/// as llama.cpp's `get_scale_min_k4` reads them.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Rows of a matrix, `stride` apart.
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [f32],
    stride: usize,
}

impl Rows<'_> {
    /// Row `i`'s first `len` values.
    fn row(&self, i: usize, len: usize) -> &[f32] {
        &self.data[i * self.stride..i * self.stride + len]
    }
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

/// The instructions this machine has, found once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Scalar,
}

impl Simd {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
                return Self::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Self::Avx2;
            }
        }
        Self::Scalar
    }

    fn dot_tile<const R: usize, const C: usize>(self, a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
        match self {
            // SAFETY: the features were detected on this machine.
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => unsafe { x86::dot_avx512(a, b) },
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => unsafe { x86::dot_avx2(a, b) },
            Self::Scalar => dot_tile_in::<Scalar, R, C>(a, b),
        }
    }

    fn axpy_rows<const R: usize>(self, a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
        match self {
            // SAFETY: the features were detected on this machine.
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => unsafe { x86::axpy_avx512(a, b, k, n, out) },
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => unsafe { x86::axpy_avx2(a, b, k, n, out) },
            Self::Scalar => axpy_in::<Scalar, R>(a, b, k, n, out),
        }
    }
}

/// Sixteen f32 lanes, as one register, two or none.
trait Lanes: Copy {
    fn zero() -> Self;
    fn splat(x: f32) -> Self;
    /// Sixteen values (`v.len() == 16`).
    fn load(v: &[f32]) -> Self;
    /// Sixteen values from `p`.
    ///
    /// # Safety
    /// `p` points at sixteen readable values.
    unsafe fn load_ptr(p: *const f32) -> Self;
    /// `self · b + c` per lane, rounded once.
    fn fma(self, b: Self, c: Self) -> Self;
    fn store(self, v: &mut [f32]);
    /// Lanes `i + 8`, then `i + 4`, `i + 2`, `i + 1` added to lane `i`: lane 0.
    fn sum(self) -> f32;

    /// [`Lanes::sum`] of four registers.
    #[inline(always)]
    fn sum4(v: [Self; 4]) -> [f32; 4] {
        [v[0].sum(), v[1].sum(), v[2].sum(), v[3].sum()]
    }

    /// Up to sixteen values, the rest zeros.
    #[inline(always)]
    fn load_part(v: &[f32]) -> Self {
        let mut t = [0.0; 16];
        t[..v.len()].copy_from_slice(v);
        Self::load(&t)
    }
}

#[derive(Clone, Copy)]
struct Scalar([f32; 16]);

impl Lanes for Scalar {
    fn zero() -> Self {
        Self([0.0; 16])
    }
    fn splat(x: f32) -> Self {
        Self([x; 16])
    }
    fn load(v: &[f32]) -> Self {
        Self(std::array::from_fn(|l| v[l]))
    }
    unsafe fn load_ptr(p: *const f32) -> Self {
        // SAFETY: the caller's promise.
        Self::load(unsafe { std::slice::from_raw_parts(p, 16) })
    }
    fn fma(self, b: Self, c: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l].mul_add(b.0[l], c.0[l])))
    }
    fn store(self, v: &mut [f32]) {
        v[..16].copy_from_slice(&self.0);
    }
    fn sum(self) -> f32 {
        let l = self.0;
        let l8: [f32; 8] = std::array::from_fn(|i| l[i] + l[i + 8]);
        let l4: [f32; 4] = std::array::from_fn(|i| l8[i] + l8[i + 4]);
        let l2: [f32; 2] = std::array::from_fn(|i| l4[i] + l4[i + 2]);
        l2[0] + l2[1]
    }
}

/// `R × C` sums of products of rows of length `k` (equal lengths).
#[inline(always)]
fn dot_tile_in<L: Lanes, const R: usize, const C: usize>(a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
    let k = a[0].len();
    assert!(a.iter().all(|r| r.len() == k) && b.iter().all(|c| c.len() == k));
    let full = k / 16 * 16;
    let mut ap = [std::ptr::null(); R];
    for r in 0..R {
        ap[r] = a[r].as_ptr();
    }
    let mut bp = [std::ptr::null(); C];
    for c in 0..C {
        bp[c] = b[c].as_ptr();
    }
    // SAFETY: `p + 16 <= full <= k`, the length of every row (asserted above).
    let mut acc = unsafe { dot_chunks::<L, R, C>(ap, bp, full) };
    if full < k {
        let mut av = [L::zero(); R];
        for r in 0..R {
            av[r] = L::load_part(&a[r][full..]);
        }
        for c in 0..C {
            let bv = L::load_part(&b[c][full..]);
            for r in 0..R {
                acc[r][c] = av[r].fma(bv, acc[r][c]);
            }
        }
    }
    // (No closures here: they would not inherit the caller's target features.)
    let mut sums = [[0.0; C]; R];
    for r in 0..R {
        if C == 4 {
            let s = L::sum4([acc[r][0], acc[r][1], acc[r][2], acc[r][3]]);
            sums[r].copy_from_slice(&s);
        } else {
            for c in 0..C {
                sums[r][c] = acc[r][c].sum();
            }
        }
    }
    sums
}

/// The sixteen-lane sums of the first `full` values (a multiple of 16) of each pair of rows.
///
/// # Safety
/// Every row holds at least `full` values.
#[inline(always)]
unsafe fn dot_chunks<L: Lanes, const R: usize, const C: usize>(
    a: [*const f32; R],
    b: [*const f32; C],
    full: usize,
) -> [[L; C]; R] {
    let mut acc = [[L::zero(); C]; R];
    let mut p = 0;
    while p < full {
        // SAFETY: `p + 16 <= full` (the caller's promise).
        let mut av = [L::zero(); R];
        for r in 0..R {
            av[r] = unsafe { L::load_ptr(a[r].add(p)) };
        }
        for c in 0..C {
            let bv = unsafe { L::load_ptr(b[c].add(p)) };
            for r in 0..R {
                acc[r][c] = av[r].fma(bv, acc[r][c]);
            }
        }
        p += 16;
    }
    acc
}

/// Rows `a` (each `k` long) times `b` (`k × n`) into `out` (`R × n`).
#[inline(always)]
fn axpy_in<L: Lanes, const R: usize>(a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
    assert!(a.iter().all(|r| r.len() >= k) && out.len() >= R * n);
    assert!(k == 0 || n == 0 || b.data.len() >= (k - 1) * b.stride + n);
    let mut ap = [std::ptr::null(); R];
    for r in 0..R {
        ap[r] = a[r].as_ptr();
    }
    let mut j = 0;
    while j + 64 <= n {
        // SAFETY: rows of `a` hold `k` values, `b` holds columns `j..j + 64` of `k` rows (asserted).
        let acc = unsafe { axpy_chunk::<L, R, 4>(ap, b.data.as_ptr().add(j), b.stride, k) };
        for r in 0..R {
            for v in 0..4 {
                acc[r][v].store(&mut out[r * n + j + 16 * v..]);
            }
        }
        j += 64;
    }
    while j + 16 <= n {
        // SAFETY: as above, columns `j..j + 16`.
        let acc = unsafe { axpy_chunk::<L, R, 1>(ap, b.data.as_ptr().add(j), b.stride, k) };
        for r in 0..R {
            acc[r][0].store(&mut out[r * n + j..]);
        }
        j += 16;
    }
    // The last columns one at a time: the same fused multiply–adds in the same order.
    for c in j..n {
        for r in 0..R {
            let mut s = 0.0f32;
            for p in 0..k {
                s = a[r][p].mul_add(b.data[p * b.stride + c], s);
            }
            out[r * n + c] = s;
        }
    }
}

/// `R` rows of sums over `k` of `a[r][p] · b[p, 16·v + lane]`, `p` in order.
///
/// # Safety
/// Each `a[r]` holds `k` values; `b + p·stride` holds `16·V` values for every `p < k`.
#[inline(always)]
unsafe fn axpy_chunk<L: Lanes, const R: usize, const V: usize>(
    a: [*const f32; R],
    b: *const f32,
    stride: usize,
    k: usize,
) -> [[L; V]; R] {
    let mut acc = [[L::zero(); V]; R];
    for p in 0..k {
        // SAFETY: the caller's promise.
        let mut bv = [L::zero(); V];
        for v in 0..V {
            bv[v] = unsafe { L::load_ptr(b.add(p * stride + 16 * v)) };
        }
        for r in 0..R {
            let x = L::splat(unsafe { *a[r].add(p) });
            for v in 0..V {
                acc[r][v] = x.fma(bv[v], acc[r][v]);
            }
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256, __m512, __m512i, _mm_add_ps, _mm_add_ss, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32,
        _mm_loadu_si128, _mm_movehdup_ps, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps, _mm256_castps256_ps128,
        _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
        _mm512_add_epi32, _mm512_add_ps, _mm512_and_si512, _mm512_castps512_ps256, _mm512_cvtepi8_epi32,
        _mm512_cvtepi32_ps, _mm512_cvtepu8_epi32, _mm512_extractf32x8_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_mul_ps, _mm512_or_si512, _mm512_permute_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setr_epi32,
        _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_slli_epi32, _mm512_srli_epi32, _mm512_srlv_epi32,
        _mm512_storeu_ps, _mm512_sub_epi32, _mm512_sub_ps,
    };

    use super::{Lanes, Rows, axpy_in, dot_tile_in};

    /// `(lo + hi)` of eight lanes, then 4 + 4, 2 + 2, 1 + 1.
    #[inline(always)]
    fn sum8(s8: __m256) -> f32 {
        // SAFETY (for the unsafe blocks of this module): the intrinsics are called only from
        // functions compiled for, and dispatched after detecting, the features they need; loads
        // and stores go through slices of the lengths they read and write (asserted).
        unsafe {
            let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
            let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2)))
        }
    }

    #[derive(Clone, Copy)]
    pub(super) struct Avx512(__m512);

    impl Lanes for Avx512 {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Self(_mm512_setzero_ps()) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self {
            unsafe { Self(_mm512_set1_ps(x)) }
        }
        #[inline(always)]
        fn load(v: &[f32]) -> Self {
            assert!(v.len() >= 16);
            unsafe { Self(_mm512_loadu_ps(v.as_ptr())) }
        }
        #[inline(always)]
        unsafe fn load_ptr(p: *const f32) -> Self {
            unsafe { Self(_mm512_loadu_ps(p)) }
        }
        #[inline(always)]
        fn fma(self, b: Self, c: Self) -> Self {
            unsafe { Self(_mm512_fmadd_ps(self.0, b.0, c.0)) }
        }
        #[inline(always)]
        fn store(self, v: &mut [f32]) {
            assert!(v.len() >= 16);
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), self.0) }
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            unsafe { sum8(_mm256_add_ps(_mm512_castps512_ps256(self.0), _mm512_extractf32x8_ps::<1>(self.0))) }
        }
        /// The same additions as [`Lanes::sum`], four registers at a time.
        #[inline(always)]
        fn sum4(v: [Self; 4]) -> [f32; 4] {
            unsafe {
                let [a, b, c, d] = [v[0].0, v[1].0, v[2].0, v[3].0];
                // Lanes i + 8: a's and b's eight in one register, c's and d's in another.
                let x = _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b));
                let y = _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(c, d), _mm512_shuffle_f32x4::<0xEE>(c, d));
                // Lanes i + 4: a quarter each.
                let z = _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(x, y), _mm512_shuffle_f32x4::<0xDD>(x, y));
                // Lanes i + 2, then i + 1, within each quarter.
                let z = _mm512_add_ps(z, _mm512_permute_ps::<0x4E>(z));
                let z = _mm512_add_ps(z, _mm512_permute_ps::<0x01>(z));
                let mut t = [0.0f32; 16];
                _mm512_storeu_ps(t.as_mut_ptr(), z);
                [t[0], t[4], t[8], t[12]]
            }
        }
    }

    /// Lanes 0–7 and 8–15.
    #[derive(Clone, Copy)]
    pub(super) struct Avx2(__m256, __m256);

    impl Lanes for Avx2 {
        #[inline(always)]
        fn zero() -> Self {
            unsafe { Self(_mm256_setzero_ps(), _mm256_setzero_ps()) }
        }
        #[inline(always)]
        fn splat(x: f32) -> Self {
            unsafe { Self(_mm256_set1_ps(x), _mm256_set1_ps(x)) }
        }
        #[inline(always)]
        fn load(v: &[f32]) -> Self {
            assert!(v.len() >= 16);
            unsafe { Self(_mm256_loadu_ps(v.as_ptr()), _mm256_loadu_ps(v.as_ptr().add(8))) }
        }
        #[inline(always)]
        unsafe fn load_ptr(p: *const f32) -> Self {
            unsafe { Self(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
        }
        #[inline(always)]
        fn fma(self, b: Self, c: Self) -> Self {
            unsafe { Self(_mm256_fmadd_ps(self.0, b.0, c.0), _mm256_fmadd_ps(self.1, b.1, c.1)) }
        }
        #[inline(always)]
        fn store(self, v: &mut [f32]) {
            assert!(v.len() >= 16);
            unsafe {
                _mm256_storeu_ps(v.as_mut_ptr(), self.0);
                _mm256_storeu_ps(v.as_mut_ptr().add(8), self.1);
            }
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            unsafe { sum8(_mm256_add_ps(self.0, self.1)) }
        }
    }

    /// A block format widened into registers: `VALUES / 16` registers of sixteen values, each
    /// value computed as Candle's `to_float` computes it (the same operations in the same order).
    pub(super) trait Decode {
        const VALUES: usize;
        const BYTES: usize;
        /// Block `p`'s values into `out[..VALUES / 16]`.
        ///
        /// # Safety
        /// `p` points at `BYTES` readable bytes; called only where AVX-512 and F16C are enabled.
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]);
    }

    /// Two f16 at `p` and `p + 2` as f32 (exact).
    #[inline(always)]
    unsafe fn two_f16(p: *const u8) -> (f32, f32) {
        unsafe {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()));
            (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
        }
    }

    /// Sixteen bytes at `p` as sixteen i32 lanes.
    #[inline(always)]
    unsafe fn bytes16(p: *const u8) -> __m512i {
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
    }

    pub(super) struct Q4_0;
    impl Decode for Q4_0 {
        const VALUES: usize = 32;
        const BYTES: usize = 18;
        /// `(q − 8) · d`: low nibbles, then high.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let d = _mm512_set1_ps(two_f16(p).0);
                let q = bytes16(p.add(2));
                let eight = _mm512_set1_epi32(8);
                let low = _mm512_sub_epi32(_mm512_and_si512(q, _mm512_set1_epi32(0x0F)), eight);
                let high = _mm512_sub_epi32(_mm512_srli_epi32::<4>(q), eight);
                out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(low), d);
                out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(high), d);
            }
        }
    }

    pub(super) struct Q4_1;
    impl Decode for Q4_1 {
        const VALUES: usize = 32;
        const BYTES: usize = 20;
        /// `q · d + m`: low nibbles, then high. A 4-bit integer times an f16 is exact in f32, so
        /// the one rounding of a fused multiply–add is the one rounding of Candle's addition.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let (d, m) = two_f16(p);
                let (d, m) = (_mm512_set1_ps(d), _mm512_set1_ps(m));
                let q = bytes16(p.add(4));
                out[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0x0F))), d, m);
                out[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(q)), d, m);
            }
        }
    }

    /// The fifth bits of a `Q5_0` / `Q5_1` block (`qh`, 32 bits at `p`) as bit 4 of lanes: bits
    /// 0–15 for the low nibbles, 16–31 for the high ones.
    #[inline(always)]
    unsafe fn fifth_bits(p: *const u8) -> [__m512i; 2] {
        unsafe {
            let qh = _mm512_set1_epi32(p.cast::<i32>().read_unaligned());
            let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let one = _mm512_set1_epi32(1);
            let high_lanes = _mm512_add_epi32(lanes, _mm512_set1_epi32(16));
            [
                _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srlv_epi32(qh, lanes), one)),
                _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srlv_epi32(qh, high_lanes), one)),
            ]
        }
    }

    pub(super) struct Q5_0;
    impl Decode for Q5_0 {
        const VALUES: usize = 32;
        const BYTES: usize = 22;
        /// `(q − 16) · d`, `q` a nibble with its fifth bit from `qh`: low nibbles, then high.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let d = _mm512_set1_ps(two_f16(p).0);
                let [h0, h1] = fifth_bits(p.add(2));
                let q = bytes16(p.add(6));
                let sixteen = _mm512_set1_epi32(16);
                let low = _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi32(0x0F)), h0);
                let high = _mm512_or_si512(_mm512_srli_epi32::<4>(q), h1);
                out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(low, sixteen)), d);
                out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(high, sixteen)), d);
            }
        }
    }

    pub(super) struct Q5_1;
    impl Decode for Q5_1 {
        const VALUES: usize = 32;
        const BYTES: usize = 24;
        /// `q · d + m`, `q` a nibble with its fifth bit (exact times an f16, so one rounding as
        /// Candle's addition): low nibbles, then high.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let (d, m) = two_f16(p);
                let (d, m) = (_mm512_set1_ps(d), _mm512_set1_ps(m));
                let [h0, h1] = fifth_bits(p.add(4));
                let q = bytes16(p.add(8));
                let low = _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi32(0x0F)), h0);
                let high = _mm512_or_si512(_mm512_srli_epi32::<4>(q), h1);
                out[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(low), d, m);
                out[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), d, m);
            }
        }
    }

    pub(super) struct Q8_0;
    impl Decode for Q8_0 {
        const VALUES: usize = 32;
        const BYTES: usize = 34;
        /// `q · d`, `q` a signed byte.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let d = _mm512_set1_ps(two_f16(p).0);
                out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast()))), d);
                out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast()))), d);
            }
        }
    }

    /// A `Q4_K` / `Q5_K` block's 256 values from `qs` (128 bytes of nibbles) and, for `Q5_K`, the
    /// fifth bits `qh` (32 bytes: bit `2g` for group `g`'s low nibbles, `2g + 1` for its high
    /// ones). Four groups of 64: `d · sc · q − min · m` (`q` with its fifth bit: an exact integer)
    /// with the group's two 6-bit scale/minimum pairs, the 32 low nibbles of its 32 bytes, then the
    /// 32 high ones.
    #[inline(always)]
    unsafe fn k_groups(p: *const u8, qs: *const u8, qh: Option<*const u8>, out: &mut [__m512; 16]) {
        unsafe {
            let (d, min) = two_f16(p);
            let scales = std::slice::from_raw_parts(p.add(4), 12);
            let (low, one) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(1));
            #[allow(clippy::manual_map)] // `map`'s closure would not inherit the caller's target features
            let qh = match qh {
                Some(h) => Some([bytes16(h), bytes16(h.add(16))]),
                None => None,
            };
            for g in 0..4 {
                let q = qs.add(32 * g);
                let (q0, q1) = (bytes16(q), bytes16(q.add(16)));
                let halves = [
                    [_mm512_and_si512(q0, low), _mm512_and_si512(q1, low)],
                    [_mm512_srli_epi32::<4>(q0), _mm512_srli_epi32::<4>(q1)],
                ];
                for (half, nibbles) in halves.into_iter().enumerate() {
                    let (sc, m) = super::scale_min_k4(2 * g + half, scales);
                    let (d1, m1) = (_mm512_set1_ps(d * f32::from(sc)), _mm512_set1_ps(min * f32::from(m)));
                    let shift = _mm512_set1_epi32(i32::try_from(2 * g + half).unwrap_or(0));
                    for (i, mut q) in nibbles.into_iter().enumerate() {
                        if let Some(qh) = &qh {
                            let bit = _mm512_and_si512(_mm512_srlv_epi32(qh[i], shift), one);
                            q = _mm512_or_si512(q, _mm512_slli_epi32::<4>(bit));
                        }
                        out[4 * g + 2 * half + i] = _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(q)), m1);
                    }
                }
            }
        }
    }

    pub(super) struct Q4K;
    impl Decode for Q4K {
        const VALUES: usize = 256;
        const BYTES: usize = 144;
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe { k_groups(p, p.add(16), None, out) }
        }
    }

    pub(super) struct Q5K;
    impl Decode for Q5K {
        const VALUES: usize = 256;
        const BYTES: usize = 176;
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe { k_groups(p, p.add(48), Some(p.add(16)), out) }
        }
    }

    pub(super) struct Q6K;
    impl Decode for Q6K {
        const VALUES: usize = 256;
        const BYTES: usize = 210;
        /// Two halves of 128: `d · sc · (q − 32)`, each 6-bit `q` from four bits of `ql` and two of
        /// `qh`, in llama.cpp's interleaved order.
        #[inline(always)]
        unsafe fn decode(p: *const u8, out: &mut [__m512; 16]) {
            unsafe {
                let d = two_f16(p.add(208)).0;
                let (low, three, thirty_two) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(3), _mm512_set1_epi32(32));
                for idx in 0..2 {
                    let (ql, qh, sc) = (p.add(64 * idx), p.add(128 + 32 * idx), p.add(192 + 8 * idx));
                    for lc in 0..2 {
                        let (a, b, h) =
                            (bytes16(ql.add(16 * lc)), bytes16(ql.add(32 + 16 * lc)), bytes16(qh.add(16 * lc)));
                        // Bits 4–5 of each value: two bits of `qh`, from bit 0, 2, 4 or 6.
                        // (No closures: they would not inherit the caller's target features.)
                        let hi = [
                            _mm512_slli_epi32::<4>(_mm512_and_si512(h, three)),
                            _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<2>(h), three)),
                            _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<4>(h), three)),
                            _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(h), three)),
                        ];
                        let q = [
                            _mm512_or_si512(_mm512_and_si512(a, low), hi[0]),
                            _mm512_or_si512(_mm512_and_si512(b, low), hi[1]),
                            _mm512_or_si512(_mm512_srli_epi32::<4>(a), hi[2]),
                            _mm512_or_si512(_mm512_srli_epi32::<4>(b), hi[3]),
                        ];
                        for (part, q) in q.into_iter().enumerate() {
                            let scale = f32::from(sc.add(lc + 2 * part).read().cast_signed());
                            let ds = _mm512_set1_ps(d * scale);
                            let q = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, thirty_two));
                            out[8 * idx + 2 * part + lc] = _mm512_mul_ps(ds, q);
                        }
                    }
                }
            }
        }
    }

    /// Sums of `a` times `C` rows of `D` blocks, each block widened in registers: lanes and order
    /// as [`dot_tile_in`] over the widened rows (sixteen lanes, chunk by chunk, then pairwise).
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub(super) fn block_dot_avx512<D: Decode, const C: usize>(a: &[f32], w: [&[u8]; C]) -> [f32; C] {
        let blocks = a.len() / D::VALUES;
        assert!(a.len().is_multiple_of(D::VALUES) && w.iter().all(|r| r.len() == blocks * D::BYTES));
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut wide = [_mm512_setzero_ps(); 16];
            for b in 0..blocks {
                let x = a.as_ptr().add(D::VALUES * b);
                for c in 0..C {
                    D::decode(w[c].as_ptr().add(D::BYTES * b), &mut wide);
                    for (i, w) in wide.iter().enumerate().take(D::VALUES / 16) {
                        acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(x.add(16 * i)), *w, acc[c]);
                    }
                }
            }
            std::array::from_fn(|c| Avx512(acc[c]).sum())
        }
    }

    /// The sixteen lanes of `kernels::dot(w_c, h)` for `C` rows of `D` blocks: each widened value
    /// multiplied by `h` and added to its lane, chunk by chunk, as `dot`'s loop does.
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub(super) fn block_lanes_avx512<D: Decode, const C: usize>(h: &[f32], w: [&[u8]; C]) -> [[f32; 16]; C] {
        let blocks = h.len() / D::VALUES;
        assert!(h.len().is_multiple_of(D::VALUES) && w.iter().all(|r| r.len() == blocks * D::BYTES));
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut wide = [_mm512_setzero_ps(); 16];
            for b in 0..blocks {
                let x = h.as_ptr().add(D::VALUES * b);
                for c in 0..C {
                    D::decode(w[c].as_ptr().add(D::BYTES * b), &mut wide);
                    for (i, w) in wide.iter().enumerate().take(D::VALUES / 16) {
                        acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(*w, _mm512_loadu_ps(x.add(16 * i))));
                    }
                }
            }
            std::array::from_fn(|c| {
                let mut lanes = [0.0f32; 16];
                _mm512_storeu_ps(lanes.as_mut_ptr(), acc[c]);
                lanes
            })
        }
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) fn dot_avx512<const R: usize, const C: usize>(a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
        dot_tile_in::<Avx512, R, C>(a, b)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot_avx2<const R: usize, const C: usize>(a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
        dot_tile_in::<Avx2, R, C>(a, b)
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) fn axpy_avx512<const R: usize>(a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
        axpy_in::<Avx512, R>(a, b, k, n, out);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn axpy_avx2<const R: usize>(a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
        axpy_in::<Avx2, R>(a, b, k, n, out);
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
