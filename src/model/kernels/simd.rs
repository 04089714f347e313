//! The one SIMD mechanism of the kernels, on `std::arch`: the instruction set of the running CPU
//! ([`Simd::detect`]: x86-64-v4 with AVX-512, v3 with AVX2, FMA and F16C, or neither) and, for each,
//! functions compiled for it (`#[target_feature]`) that the kernels are inlined into, with its
//! sixteen f32 lanes ([`Lanes`]: one AVX-512 register, two AVX2 registers or an array). The tiles
//! of the matrix products ([`dot_tile_in`], [`axpy_in`]) are written once over those lanes, so they
//! sum in the same order, to the same bits, on every x86 machine. The element-wise kernels are plain
//! loops the compiler vectorises ([`Vectorised`]), whose fixed lanes give the same bits whatever
//! the registers' width. The GGUF block decoders are written once over the lanes, which also unpack
//! bits ([`Unpack`]): the widening of stored rows runs them in the running CPU's lanes, the products
//! of a few rows by blocks in AVX-512 registers ([`InRegisters`]).

#![allow(unsafe_code)] // SIMD intrinsics, see the SAFETY comments (unsafe: this room and alloc.rs)
#![allow(clippy::inline_always)] // the kernels are vectorised only when inlined into the dispatched functions

/// One block kind of llama.cpp: its size and its one decoder (the kinds are in `blocks`; the
/// widening and the products here take any of them).
pub(super) trait Block {
    /// Values per block.
    const VALUES: usize;
    /// Bytes per block.
    const BYTES: usize;

    /// Block `b`'s values into `out`, sixteen at a time, as Candle's `GgmlType::to_float` computes
    /// them, operation for operation: the widening runs it in the running CPU's lanes straight into
    /// a row of f32, the products of [`InRegisters`] into AVX-512 registers.
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O);
}

/// Where a decoder puts its groups of sixteen values: registers (an array of lanes) or f32 values.
pub(super) trait Put<L> {
    /// Group `i`: values `16·i .. 16·i + 16`.
    fn put(&mut self, i: usize, v: L);
}

impl<L> Put<L> for [L; 16] {
    #[inline(always)]
    fn put(&mut self, i: usize, v: L) {
        self[i] = v;
    }
}

impl<L: Lanes> Put<L> for [f32] {
    #[inline(always)]
    fn put(&mut self, i: usize, v: L) {
        v.store(&mut self[16 * i..]);
    }
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

/// A loop run by [`Simd::vectorised`] compiled for the running CPU: plain code for the compiler to
/// vectorise (the element-wise kernels), or written over that CPU's lanes `L` (the widening of
/// blocks).
pub(super) trait Vectorised {
    /// What the loop returns.
    type Output;
    /// The loop. `#[inline(always)]` in every implementation: only code inlined into the dispatched
    /// function is compiled for its instructions (a closure was not, and ran as SSE code).
    fn run<L: Unpack>(self) -> Self::Output;
}

/// The instructions this machine has: x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA, F16C) or neither;
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
    /// FMA and F16C) over its lanes, else as plain code over arrays.
    #[inline(always)]
    pub(super) fn vectorised<Op: Vectorised>(self, op: Op) -> Op::Output {
        match self {
            // SAFETY: the level's features were detected on this machine (`has_v3`, `has_v4`).
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => unsafe { x86::vectorised_v4(op) },
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => unsafe { x86::vectorised_v3(op) },
            Self::Scalar => op.run::<Scalar>(),
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
/// each block widened by its kind's [`Block::decode`] in AVX-512 registers.
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

/// Sixteen f32 lanes as a plain array: the lanes of a machine without x86-64-v3 (the compiler
/// vectorises what it can).
#[derive(Clone, Copy)]
pub(super) struct Scalar([f32; 16]);

impl Lanes for Scalar {
    #[inline(always)]
    fn zero() -> Self {
        Self([0.0; 16])
    }
    #[inline(always)]
    fn splat(x: f32) -> Self {
        Self([x; 16])
    }
    #[inline(always)]
    fn load(v: &[f32]) -> Self {
        Self(std::array::from_fn(|l| v[l]))
    }
    #[inline(always)]
    unsafe fn load_ptr(p: *const f32) -> Self {
        // SAFETY: the caller's promise.
        Self::load(unsafe { std::slice::from_raw_parts(p, 16) })
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l].mul_add(b.0[l], c.0[l])))
    }
    #[inline(always)]
    fn store(self, v: &mut [f32]) {
        v[..16].copy_from_slice(&self.0);
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        let l = self.0;
        let l8: [f32; 8] = std::array::from_fn(|i| l[i] + l[i + 8]);
        let l4: [f32; 4] = std::array::from_fn(|i| l8[i] + l8[i + 4]);
        let l2: [f32; 2] = std::array::from_fn(|i| l4[i] + l4[i + 2]);
        l2[0] + l2[1]
    }
}

/// The sixteen lanes the GGUF block decoders compute in: i32 lanes to unpack the stored bits
/// ([`Ints`]), f32 lanes to scale them. Each kind's [`Block::decode`] is written once over this; the
/// operations are the same in every implementation (one AVX-512 register, two AVX2 registers, an
/// array), so every implementation gives the same bits.
pub(super) trait Unpack: Lanes {
    /// Sixteen i32 lanes.
    type Ints: Ints;
    /// Each lane as f32 (exact: the decoders' integers have at most 8 bits).
    fn float(i: Self::Ints) -> Self;
    /// `self · b` per lane.
    fn mul(self, b: Self) -> Self;
    /// `self − b` per lane.
    fn sub(self, b: Self) -> Self;
    /// `self · b + c` per lane where every `self · b` is exact in f32, so the one rounding is the
    /// addition's, fused or not: the registers fuse them; the array multiplies, then adds (Candle's
    /// two operations, and no call to a software `fmaf` where the CPU has no FMA).
    #[inline(always)]
    fn mul_add_exact(self, b: Self, c: Self) -> Self {
        self.fma(b, c)
    }
    /// The little-endian f16 in `b[..2]` as the f32 of the same value, in every lane.
    fn splat_f16(b: &[u8]) -> Self;
    /// The two little-endian f16 in `b[..4]` as the f32 of the same values.
    fn f16_pair(b: &[u8]) -> [f32; 2];
}

/// Sixteen i32 lanes: the unpacking of a block's bits.
pub(super) trait Ints: Copy {
    /// `b[..16]`, each byte zero-extended.
    fn bytes(b: &[u8]) -> Self;
    /// `b[..16]`, each byte sign-extended.
    fn signed_bytes(b: &[u8]) -> Self;
    /// `x` in every lane.
    fn splat(x: i32) -> Self;
    /// `self & b` per lane.
    fn and(self, b: Self) -> Self;
    /// `self | b` per lane.
    fn or(self, b: Self) -> Self;
    /// `self − b` per lane.
    fn sub(self, b: Self) -> Self;
    /// Each lane shifted left by `N` bits.
    fn shl<const N: u32>(self) -> Self;
    /// Each lane shifted right by `N` bits, zeros shifted in.
    fn shr<const N: u32>(self) -> Self;
    /// Each lane shifted right by its lane of `by` bits, zeros shifted in (0 from 32 bits on).
    fn shr_by(self, by: Self) -> Self;
}

impl Unpack for Scalar {
    type Ints = [i32; 16];
    #[inline(always)]
    fn float(i: [i32; 16]) -> Self {
        Self(i.map(|i| i as f32))
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l] * b.0[l]))
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l] - b.0[l]))
    }
    #[inline(always)]
    fn mul_add_exact(self, b: Self, c: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l] * b.0[l] + c.0[l]))
    }
    #[inline(always)]
    fn splat_f16(b: &[u8]) -> Self {
        Self::splat(f16_to_f32(u16::from_le_bytes([b[0], b[1]])))
    }
    #[inline(always)]
    fn f16_pair(b: &[u8]) -> [f32; 2] {
        [f16_to_f32(u16::from_le_bytes([b[0], b[1]])), f16_to_f32(u16::from_le_bytes([b[2], b[3]]))]
    }
}

impl Ints for [i32; 16] {
    #[inline(always)]
    fn bytes(b: &[u8]) -> Self {
        let b = &b[..16];
        std::array::from_fn(|l| i32::from(b[l]))
    }
    #[inline(always)]
    fn signed_bytes(b: &[u8]) -> Self {
        let b = &b[..16];
        std::array::from_fn(|l| i32::from(b[l].cast_signed()))
    }
    #[inline(always)]
    fn splat(x: i32) -> Self {
        [x; 16]
    }
    #[inline(always)]
    fn and(self, b: Self) -> Self {
        std::array::from_fn(|l| self[l] & b[l])
    }
    #[inline(always)]
    fn or(self, b: Self) -> Self {
        std::array::from_fn(|l| self[l] | b[l])
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        std::array::from_fn(|l| self[l] - b[l])
    }
    #[inline(always)]
    fn shl<const N: u32>(self) -> Self {
        self.map(|x| x << N)
    }
    #[inline(always)]
    fn shr<const N: u32>(self) -> Self {
        self.map(|x| (x.cast_unsigned() >> N).cast_signed())
    }
    #[inline(always)]
    fn shr_by(self, by: Self) -> Self {
        std::array::from_fn(|l| self[l].cast_unsigned().checked_shr(by[l].cast_unsigned()).unwrap_or(0).cast_signed())
    }
}

/// An f16's bits as the f32 of the same value (exact, as `half` converts; inlined into the
/// dispatched widening, where `half`'s runtime check for F16C was a call per value).
#[inline(always)]
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = (u32::from(h) & 0x8000) << 16;
    let exponent = u32::from((h >> 10) & 0x1f);
    let mantissa = u32::from(h & 0x3ff);
    let magnitude = match exponent {
        // Zero and subnormals: mantissa · 2^-24 (exact: at most 10 bits).
        0 => (mantissa as f32 * (1.0 / 16_777_216.0)).to_bits(),
        0x1f => 0x7f80_0000 | (mantissa << 13),
        _ => ((exponent + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(sign | magnitude)
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
        __m128i, __m256, __m256i, __m512, __m512i, _mm_add_ps, _mm_add_ss, _mm_cvtph_ps, _mm_cvtsi32_si128,
        _mm_cvtss_f32, _mm_loadu_si128, _mm_movehdup_ps, _mm_movehl_ps, _mm_set1_epi16, _mm_shuffle_ps, _mm_srli_si128,
        _mm256_add_ps, _mm256_and_si256, _mm256_castps256_ps128, _mm256_cvtepi8_epi32, _mm256_cvtepi32_ps,
        _mm256_cvtepu8_epi32, _mm256_cvtph_ps, _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps,
        _mm256_or_si256, _mm256_set1_epi16, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setzero_ps, _mm256_sll_epi32,
        _mm256_srl_epi32, _mm256_srlv_epi32, _mm256_storeu_ps, _mm256_sub_epi32, _mm256_sub_ps, _mm512_add_ps,
        _mm512_and_si512, _mm512_castps512_ps256, _mm512_cvtepi8_epi32, _mm512_cvtepi32_ps, _mm512_cvtepu8_epi32,
        _mm512_cvtph_ps, _mm512_extractf32x8_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_or_si512,
        _mm512_permute_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps, _mm512_shuffle_f32x4,
        _mm512_slli_epi32, _mm512_srli_epi32, _mm512_srlv_epi32, _mm512_storeu_ps, _mm512_sub_epi32, _mm512_sub_ps,
    };

    use super::{Block, Ints, Lanes, Rows, Unpack, Vectorised, axpy_in, dot_tile_in};

    /// Whether this machine has x86-64-v3 (AVX2, FMA, F16C, BMI1/2, LZCNT, POPCNT and the SSE
    /// levels below): [`super::Simd::Avx2`], and with [`has_v4`] [`super::Simd::Avx512`].
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
            && has!("f16c")
            && has!("lzcnt")
    }

    /// Whether this machine has x86-64-v4 beyond v3: AVX-512 F, BW, CD, DQ and VL.
    pub(super) fn has_v4() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f") && has!("avx512bw") && has!("avx512cd") && has!("avx512dq") && has!("avx512vl")
    }

    /// `op` compiled for x86-64-v3, over two AVX2 registers.
    #[target_feature(enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,fxsr,avx,avx2,bmi1,bmi2,fma,f16c,lzcnt")]
    #[inline]
    pub(super) fn vectorised_v3<Op: Vectorised>(op: Op) -> Op::Output {
        op.run::<Avx2>()
    }

    /// `op` compiled for x86-64-v4, over one AVX-512 register.
    #[target_feature(
        enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,fxsr,avx,avx2,bmi1,bmi2,fma,f16c,lzcnt,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
    )]
    #[inline]
    pub(super) fn vectorised_v4<Op: Vectorised>(op: Op) -> Op::Output {
        op.run::<Avx512>()
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

    /// The block decoders in a register: called only from functions compiled for AVX-512 and F16C.
    /// An f16 alone is converted in all sixteen lanes at once: converted in one lane, it was read
    /// into whatever register was free, a false dependency from one block to the next.
    impl Unpack for Avx512 {
        type Ints = __m512i;
        #[inline(always)]
        fn float(i: __m512i) -> Self {
            unsafe { Self(_mm512_cvtepi32_ps(i)) }
        }
        #[inline(always)]
        fn mul(self, b: Self) -> Self {
            unsafe { Self(_mm512_mul_ps(self.0, b.0)) }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { Self(_mm512_sub_ps(self.0, b.0)) }
        }
        #[inline(always)]
        fn splat_f16(b: &[u8]) -> Self {
            let h = i16::from_le_bytes([b[0], b[1]]);
            unsafe { Self(_mm512_cvtph_ps(_mm256_set1_epi16(h))) }
        }
        #[inline(always)]
        fn f16_pair(b: &[u8]) -> [f32; 2] {
            f16c_pair(b)
        }
    }

    impl Ints for __m512i {
        #[inline(always)]
        fn bytes(b: &[u8]) -> Self {
            unsafe { _mm512_cvtepu8_epi32(bytes16(b)) }
        }
        #[inline(always)]
        fn signed_bytes(b: &[u8]) -> Self {
            unsafe { _mm512_cvtepi8_epi32(bytes16(b)) }
        }
        #[inline(always)]
        fn splat(x: i32) -> Self {
            unsafe { _mm512_set1_epi32(x) }
        }
        #[inline(always)]
        fn and(self, b: Self) -> Self {
            unsafe { _mm512_and_si512(self, b) }
        }
        #[inline(always)]
        fn or(self, b: Self) -> Self {
            unsafe { _mm512_or_si512(self, b) }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { _mm512_sub_epi32(self, b) }
        }
        #[inline(always)]
        fn shl<const N: u32>(self) -> Self {
            unsafe { _mm512_slli_epi32::<N>(self) }
        }
        #[inline(always)]
        fn shr<const N: u32>(self) -> Self {
            unsafe { _mm512_srli_epi32::<N>(self) }
        }
        #[inline(always)]
        fn shr_by(self, by: Self) -> Self {
            unsafe { _mm512_srlv_epi32(self, by) }
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

    /// The block decoders in two registers: called only from functions compiled for x86-64-v3 (an
    /// f16 alone converted in all lanes, as for [`Avx512`]).
    impl Unpack for Avx2 {
        type Ints = [__m256i; 2];
        #[inline(always)]
        fn float(i: [__m256i; 2]) -> Self {
            unsafe { Self(_mm256_cvtepi32_ps(i[0]), _mm256_cvtepi32_ps(i[1])) }
        }
        #[inline(always)]
        fn mul(self, b: Self) -> Self {
            unsafe { Self(_mm256_mul_ps(self.0, b.0), _mm256_mul_ps(self.1, b.1)) }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { Self(_mm256_sub_ps(self.0, b.0), _mm256_sub_ps(self.1, b.1)) }
        }
        #[inline(always)]
        fn splat_f16(b: &[u8]) -> Self {
            let h = i16::from_le_bytes([b[0], b[1]]);
            unsafe {
                let v = _mm256_cvtph_ps(_mm_set1_epi16(h));
                Self(v, v)
            }
        }
        #[inline(always)]
        fn f16_pair(b: &[u8]) -> [f32; 2] {
            f16c_pair(b)
        }
    }

    /// `b[..16]` in a register.
    #[inline(always)]
    fn bytes16(b: &[u8]) -> __m128i {
        let b = &b[..16];
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    /// The two little-endian f16 in `b[..4]` by F16C (the same f32 as [`super::f16_to_f32`] for
    /// every f16 but a signalling NaN, which no file holds and which gives a NaN either way).
    #[inline(always)]
    fn f16c_pair(b: &[u8]) -> [f32; 2] {
        let pair = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        unsafe {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(pair));
            [_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v))]
        }
    }

    impl Ints for [__m256i; 2] {
        #[inline(always)]
        fn bytes(b: &[u8]) -> Self {
            let v = bytes16(b);
            unsafe { [_mm256_cvtepu8_epi32(v), _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(v))] }
        }
        #[inline(always)]
        fn signed_bytes(b: &[u8]) -> Self {
            let v = bytes16(b);
            unsafe { [_mm256_cvtepi8_epi32(v), _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(v))] }
        }
        #[inline(always)]
        fn splat(x: i32) -> Self {
            unsafe { [_mm256_set1_epi32(x); 2] }
        }
        #[inline(always)]
        fn and(self, b: Self) -> Self {
            unsafe { [_mm256_and_si256(self[0], b[0]), _mm256_and_si256(self[1], b[1])] }
        }
        #[inline(always)]
        fn or(self, b: Self) -> Self {
            unsafe { [_mm256_or_si256(self[0], b[0]), _mm256_or_si256(self[1], b[1])] }
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            unsafe { [_mm256_sub_epi32(self[0], b[0]), _mm256_sub_epi32(self[1], b[1])] }
        }
        /// (By a count in a register: the immediate forms take an `i32` constant.)
        #[inline(always)]
        fn shl<const N: u32>(self) -> Self {
            unsafe {
                let n = _mm_cvtsi32_si128(N.cast_signed());
                [_mm256_sll_epi32(self[0], n), _mm256_sll_epi32(self[1], n)]
            }
        }
        #[inline(always)]
        fn shr<const N: u32>(self) -> Self {
            unsafe {
                let n = _mm_cvtsi32_si128(N.cast_signed());
                [_mm256_srl_epi32(self[0], n), _mm256_srl_epi32(self[1], n)]
            }
        }
        #[inline(always)]
        fn shr_by(self, by: Self) -> Self {
            unsafe { [_mm256_srlv_epi32(self[0], by[0]), _mm256_srlv_epi32(self[1], by[1])] }
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
        let acc = block_lanes::<D, C, true>(a, w);
        std::array::from_fn(|c| acc[c].sum())
    }

    /// The sixteen lanes of `kernels::dot(w_c, h)` for `C` rows of `D` blocks: each widened value
    /// multiplied by `h` and added to its lane, chunk by chunk, as `dot`'s loop does.
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub(super) fn block_lanes_avx512<D: Block, const C: usize>(h: &[f32], w: [&[u8]; C]) -> [[f32; 16]; C] {
        let acc = block_lanes::<D, C, false>(h, w);
        std::array::from_fn(|c| {
            let mut lanes = [0.0f32; 16];
            acc[c].store(&mut lanes);
            lanes
        })
    }

    /// `x` times each of `C` rows of `D` blocks into sixteen lanes, chunk by chunk, each block
    /// widened in registers: with fused multiply–adds (`FUSED`), or each product added.
    #[inline(always)]
    fn block_lanes<D: Block, const C: usize, const FUSED: bool>(x: &[f32], w: [&[u8]; C]) -> [Avx512; C] {
        let blocks = x.len() / D::VALUES;
        assert!(x.len().is_multiple_of(D::VALUES) && w.iter().all(|r| r.len() == blocks * D::BYTES));
        let mut acc = [Avx512::zero(); C];
        let mut wide = [Avx512::zero(); 16];
        for b in 0..blocks {
            let x = &x[D::VALUES * b..D::VALUES * (b + 1)];
            for c in 0..C {
                D::decode(&w[c][D::BYTES * b..D::BYTES * (b + 1)], &mut wide);
                for (i, w) in wide.iter().enumerate().take(D::VALUES / 16) {
                    let x = Avx512::load(&x[16 * i..]);
                    acc[c] =
                        if FUSED { x.fma(*w, acc[c]) } else { Avx512(unsafe { _mm512_add_ps(acc[c].0, w.mul(x).0) }) };
                }
            }
        }
        acc
    }
}
