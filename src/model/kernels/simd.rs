//! The one SIMD mechanism of the kernels, on `std::arch`: the instruction set of the running CPU
//! ([`Simd::detect`]: x86-64-v4 with AVX-512, v3 with AVX2 and FMA, or neither) and, for each,
//! functions compiled for it (`#[target_feature]`) that the kernels are inlined into. Two kinds of
//! kernel run through it. The tiles of the matrix products ([`dot_tile_in`], [`axpy_in`]) are written once
//! over sixteen f32 lanes ([`Lanes`]: one AVX-512 register, two AVX2 registers or an array), so
//! they sum in the same order, to the same bits, on every x86 machine. The element-wise kernels
//! and the widening of blocks are plain loops the compiler vectorises ([`Vectorised`]), whose
//! fixed lanes give the same bits whatever the registers' width. And the products of a few rows by
//! GGUF blocks, each block widened in registers by its kind's decoder ([`InRegisters`]).

#![allow(unsafe_code)] // SIMD intrinsics, see the SAFETY comments (unsafe: this room and alloc.rs)
#![allow(clippy::inline_always)] // the kernels are vectorised only when inlined into the dispatched functions

/// One block kind of llama.cpp: its size and its decoder (the kinds are in `blocks`; the products
/// here take any of them).
pub(super) trait Block {
    /// Values per block.
    const VALUES: usize;
    /// Bytes per block.
    const BYTES: usize;

    /// Block `b`'s values into `y` (`VALUES` of them), as Candle's `GgmlType::to_float` computes them.
    fn to_float(b: &[u8], y: &mut [f32]);

    /// Block `p`'s values into `out[..VALUES / 16]`: the operations of [`Block::to_float`] in the
    /// same order, sixteen values a register.
    ///
    /// # Safety
    /// `p` points at `BYTES` readable bytes; called only where AVX-512 and F16C are enabled.
    #[cfg(target_arch = "x86_64")]
    unsafe fn to_registers(p: *const u8, out: &mut [std::arch::x86_64::__m512; 16]);
}

/// Rows of a matrix, `stride` apart.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    pub(super) data: &'a [f32],
    pub(super) stride: usize,
}

impl Rows<'_> {
    /// Row `i`'s first `len` values.
    pub(super) fn row(&self, i: usize, len: usize) -> &[f32] {
        &self.data[i * self.stride..i * self.stride + len]
    }
}

/// A loop written as plain code for the compiler to vectorise (the element-wise kernels, the
/// widening of blocks), run by [`Simd::vectorised`] compiled for the running CPU.
pub(super) trait Vectorised {
    /// What the loop returns.
    type Output;
    /// The loop. `#[inline(always)]` in every implementation: only code inlined into the dispatched
    /// function is compiled for its instructions (a closure was not, and ran as SSE code).
    fn run(self) -> Self::Output;
}

/// The instructions this machine has: x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) or neither;
/// found on each call from the standard library's cached detection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Simd {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Scalar,
}

impl Simd {
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if x86::has_v3() {
            return if x86::has_v4() { Self::Avx512 } else { Self::Avx2 };
        }
        Self::Scalar
    }

    /// Runs `op` compiled for this machine's instructions (x86-64-v4 or v3: AVX-512 or AVX2 with
    /// FMA), else as plain code.
    #[inline(always)]
    pub(super) fn vectorised<Op: Vectorised>(self, op: Op) -> Op::Output {
        match self {
            // SAFETY: the level's features were detected on this machine (`has_v3`, `has_v4`).
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => unsafe { x86::vectorised_v4(op) },
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => unsafe { x86::vectorised_v3(op) },
            Self::Scalar => op.run(),
        }
    }

    pub(super) fn dot_tile<const R: usize, const C: usize>(self, a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
        match self {
            // SAFETY: the features were detected on this machine.
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => unsafe { x86::dot_avx512(a, b) },
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => unsafe { x86::dot_avx2(a, b) },
            Self::Scalar => dot_tile_in::<Scalar, R, C>(a, b),
        }
    }

    pub(super) fn axpy_rows<const R: usize>(self, a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
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

/// Proof that this machine can multiply GGUF blocks in registers (AVX-512 and F16C were detected:
/// [`Simd::in_registers`] alone makes one): the products of a few rows by blocks run through it,
/// each block widened by its kind's [`Block::to_registers`].
#[derive(Clone, Copy, Debug)]
pub(super) struct InRegisters(());

impl Simd {
    /// [`InRegisters`] when this machine has AVX-512 and F16C.
    pub(super) fn in_registers(self) -> Option<InRegisters> {
        #[cfg(target_arch = "x86_64")]
        if self == Self::Avx512 && std::arch::is_x86_feature_detected!("f16c") {
            return Some(InRegisters(()));
        }
        None
    }
}

impl InRegisters {
    /// Sums of `a` times `C` rows of `D` blocks (`w`), each block widened in registers: lanes and
    /// order as [`dot_tile_in`] over the widened rows.
    #[inline]
    pub(super) fn dots<D: Block, const C: usize>(self, a: &[f32], w: [&[u8]; C]) -> [f32; C] {
        let Self(()) = self;
        // SAFETY: AVX-512 and F16C were detected (`Simd::in_registers`); lengths are checked inside.
        #[cfg(target_arch = "x86_64")]
        let sums = unsafe { x86::block_dot_avx512::<D, C>(a, w) };
        #[cfg(not(target_arch = "x86_64"))]
        let sums = unreachable!("no proof without AVX-512: {self:?} {a:?} {w:?}");
        sums
    }

    /// The sixteen lanes of `kernels::dot(w_c, h)` for `C` rows of `D` blocks (`w`), each block
    /// widened in registers.
    #[inline]
    pub(super) fn lanes<D: Block, const C: usize>(self, h: &[f32], w: [&[u8]; C]) -> [[f32; 16]; C] {
        let Self(()) = self;
        // SAFETY: as in `dots`.
        #[cfg(target_arch = "x86_64")]
        let lanes = unsafe { x86::block_lanes_avx512::<D, C>(h, w) };
        #[cfg(not(target_arch = "x86_64"))]
        let lanes = unreachable!("no proof without AVX-512: {self:?} {h:?} {w:?}");
        lanes
    }
}

/// Sixteen f32 lanes, as one register, two or none.
pub(super) trait Lanes: Copy {
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
pub(super) struct Scalar([f32; 16]);

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
pub(super) fn dot_tile_in<L: Lanes, const R: usize, const C: usize>(a: [&[f32]; R], b: [&[f32]; C]) -> [[f32; C]; R] {
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
pub(super) fn axpy_in<L: Lanes, const R: usize>(a: [&[f32]; R], b: Rows<'_>, k: usize, n: usize, out: &mut [f32]) {
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
#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::{
        __m256, __m512, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps,
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps, _mm512_add_ps, _mm512_castps512_ps256, _mm512_extractf32x8_ps,
        _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_permute_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_shuffle_f32x4, _mm512_storeu_ps,
    };

    use super::Block;
    use super::{Lanes, Rows, Vectorised, axpy_in, dot_tile_in};

    /// Whether this machine has x86-64-v3 (AVX2, FMA, BMI1/2, LZCNT, POPCNT and the SSE levels
    /// below): [`super::Simd::Avx2`], and with [`has_v4`] [`super::Simd::Avx512`].
    pub(super) fn has_v3() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("sse3")
            && has!("ssse3")
            && has!("sse4.1")
            && has!("sse4.2")
            && has!("popcnt")
            && has!("fxsr")
            && has!("avx")
            && has!("avx2")
            && has!("bmi1")
            && has!("bmi2")
            && has!("fma")
            && has!("lzcnt")
    }

    /// Whether this machine has x86-64-v4 beyond v3: AVX-512 F, BW, CD, DQ and VL.
    pub(super) fn has_v4() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f") && has!("avx512bw") && has!("avx512cd") && has!("avx512dq") && has!("avx512vl")
    }

    /// `op` compiled for x86-64-v3.
    #[target_feature(enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,fxsr,avx,avx2,bmi1,bmi2,fma,lzcnt")]
    #[inline]
    pub(super) fn vectorised_v3<Op: Vectorised>(op: Op) -> Op::Output {
        op.run()
    }

    /// `op` compiled for x86-64-v4.
    #[target_feature(
        enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,fxsr,avx,avx2,bmi1,bmi2,fma,lzcnt,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
    )]
    #[inline]
    pub(super) fn vectorised_v4<Op: Vectorised>(op: Op) -> Op::Output {
        op.run()
    }

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
    pub(crate) struct Avx512(pub(crate) __m512);

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
    pub(crate) struct Avx2(__m256, __m256);

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

    /// Sums of `a` times `C` rows of `D` blocks, each block widened in registers: lanes and order
    /// as [`dot_tile_in`](super::dot_tile_in) over the widened rows (sixteen lanes, chunk by chunk, then pairwise).
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub(super) fn block_dot_avx512<D: Block, const C: usize>(a: &[f32], w: [&[u8]; C]) -> [f32; C] {
        let blocks = a.len() / D::VALUES;
        assert!(a.len().is_multiple_of(D::VALUES) && w.iter().all(|r| r.len() == blocks * D::BYTES));
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut wide = [_mm512_setzero_ps(); 16];
            for b in 0..blocks {
                let x = a.as_ptr().add(D::VALUES * b);
                for c in 0..C {
                    D::to_registers(w[c].as_ptr().add(D::BYTES * b), &mut wide);
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
    pub(super) fn block_lanes_avx512<D: Block, const C: usize>(h: &[f32], w: [&[u8]; C]) -> [[f32; 16]; C] {
        let blocks = h.len() / D::VALUES;
        assert!(h.len().is_multiple_of(D::VALUES) && w.iter().all(|r| r.len() == blocks * D::BYTES));
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut wide = [_mm512_setzero_ps(); 16];
            for b in 0..blocks {
                let x = h.as_ptr().add(D::VALUES * b);
                for c in 0..C {
                    D::to_registers(w[c].as_ptr().add(D::BYTES * b), &mut wide);
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
}
