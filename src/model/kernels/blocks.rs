//! llama.cpp's GGUF block kinds: one type per kind ([`Q4_0`] … [`Q6K`]) with its one decoder,
//! Candle's `k_quants` `to_float` arithmetic operation for operation, written twice over the same
//! operations — into f32 values ([`Block::to_float`], what the widening of stored rows runs) and
//! into AVX-512 registers ([`Block::to_registers`], what the products of a few rows run, the f32
//! never going through memory) — so every value, and every product, attention weight and logit, is
//! bit for bit what the network computes from the dequantised weights. One dispatch over the kinds
//! ([`by_block_kind`]) serves the widening and the products.

#![allow(unsafe_code)] // the register decoders' intrinsics, see the SAFETY comment of `two_f16`
#![allow(clippy::inline_always)] // the decoders are vectorised only when inlined into the dispatched functions

use half::bf16;

use super::simd::{Block, Simd, Vectorised};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{
    __m512, __m512i, _mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm_movehdup_ps,
    _mm512_add_epi32, _mm512_and_si512, _mm512_cvtepi8_epi32, _mm512_cvtepi32_ps, _mm512_cvtepu8_epi32,
    _mm512_fmadd_ps, _mm512_mul_ps, _mm512_or_si512, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setr_epi32,
    _mm512_slli_epi32, _mm512_srli_epi32, _mm512_srlv_epi32, _mm512_sub_epi32, _mm512_sub_ps,
};

/// A block format of one stored row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// f32 values.
    F32,
    /// f16 values.
    F16,
    /// bf16 values.
    Bf16,
    /// 32 values: an f16 scale, 4-bit values − 8.
    Q4_0,
    /// 32 values: f16 scale and minimum, 4-bit values.
    Q4_1,
    /// 32 values: an f16 scale, 5-bit values − 16.
    Q5_0,
    /// 32 values: f16 scale and minimum, 5-bit values.
    Q5_1,
    /// 32 values: an f16 scale, 8-bit values.
    Q8_0,
    /// 256 values: super-block scale and minimum, eight 6-bit sub-block scales and minima, 4-bit values.
    Q4K,
    /// 256 values: as `Q4_K` with a fifth bit.
    Q5K,
    /// 256 values: an f16 scale, sixteen 8-bit sub-block scales, 6-bit values − 32.
    Q6K,
}

impl BlockKind {
    /// `(values, bytes)` per block.
    pub fn block(self) -> (usize, usize) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::Bf16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q5K => (256, 176),
            Self::Q6K => (256, 210),
        }
    }

    /// Rows of floats (F32, F16, BF16) rather than blocks.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::Bf16)
    }

    /// Bytes of a row of `cols` values, None when `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        let (values, bytes) = self.block();
        cols.is_multiple_of(values).then(|| cols / values * bytes)
    }
}

/// `$m!(Kind)` for the type of `$kind`'s blocks (`$floats` for rows of floats): the one dispatch over
/// the kinds, for the widening ([`decode_row`]) and the products of blocks (`gemm`).
macro_rules! by_block_kind {
    ($kind:expr, $m:ident, $floats:expr) => {
        match $kind {
            $crate::model::kernels::BlockKind::Q4_0 => $m!($crate::model::kernels::blocks::Q4_0),
            $crate::model::kernels::BlockKind::Q4_1 => $m!($crate::model::kernels::blocks::Q4_1),
            $crate::model::kernels::BlockKind::Q5_0 => $m!($crate::model::kernels::blocks::Q5_0),
            $crate::model::kernels::BlockKind::Q5_1 => $m!($crate::model::kernels::blocks::Q5_1),
            $crate::model::kernels::BlockKind::Q8_0 => $m!($crate::model::kernels::blocks::Q8_0),
            $crate::model::kernels::BlockKind::Q4K => $m!($crate::model::kernels::blocks::Q4K),
            $crate::model::kernels::BlockKind::Q5K => $m!($crate::model::kernels::blocks::Q5K),
            $crate::model::kernels::BlockKind::Q6K => $m!($crate::model::kernels::blocks::Q6K),
            $crate::model::kernels::BlockKind::F32
            | $crate::model::kernels::BlockKind::F16
            | $crate::model::kernels::BlockKind::Bf16 => $floats,
        }
    };
}
pub(super) use by_block_kind;

/// Sub-block `j`'s 6-bit scale and minimum in a `Q4_K` / `Q5_K` block's twelve scale bytes (`q`),
/// as llama.cpp's `get_scale_min_k4` reads them.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// One row's blocks → f32, as Candle's `GgmlType::to_float` of each block type computes it.
#[inline(always)]
pub fn decode_row(kind: BlockKind, bytes: &[u8], out: &mut [f32]) {
    // One loop per kind (the kind is matched once per row, not once per block).
    macro_rules! blocks {
        ($block:ty) => {
            for (b, y) in bytes.chunks_exact(<$block>::BYTES).zip(out.chunks_exact_mut(<$block>::VALUES)) {
                <$block>::to_float(b, y);
            }
        };
    }
    match kind {
        BlockKind::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        BlockKind::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        BlockKind::Bf16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        _ => by_block_kind!(kind, blocks, {}),
    }
}

/// Values `range` of a row-major matrix of `cols` values a row, whose row `r` is stored as
/// `row(r)` (its kind and bytes), as f32 into `out`; compiled for the best instruction set of the
/// running CPU (the unpacking of 4-, 5- and 6-bit values vectorises).
pub fn widen<'a>(
    cols: usize,
    range: std::ops::Range<usize>,
    out: &mut [f32],
    row: impl Fn(usize) -> (BlockKind, &'a [u8]),
) {
    Simd::detect().vectorised(Widen { cols, range, out, row });
}

/// [`widen`] as a vectorised loop.
struct Widen<'o, F> {
    cols: usize,
    range: std::ops::Range<usize>,
    out: &'o mut [f32],
    row: F,
}

impl<'a, F: Fn(usize) -> (BlockKind, &'a [u8])> Vectorised for Widen<'_, F> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Self { cols, range, out, row } = self;
        let cols = cols.max(1);
        let mut scratch = Vec::new();
        let mut at = range.start;
        while at < range.end {
            let (r, col) = (at / cols, at % cols);
            let n = (cols - col).min(range.end - at);
            let dst = &mut out[at - range.start..at - range.start + n];
            let (kind, bytes) = row(r);
            if col == 0 && n == cols {
                decode_row(kind, bytes, dst);
            } else {
                scratch.resize(cols, 0.0);
                decode_row(kind, bytes, &mut scratch);
                dst.copy_from_slice(&scratch[col..col + n]);
            }
            at += n;
        }
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// An f16's bits as the f32 of the same value (exact, as `half` converts; inlined into the
/// dispatched widening, where `half`'s runtime check for F16C was a call per block scale).
#[inline(always)]
fn f16_to_f32(h: u16) -> f32 {
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

/// Two f16 at `p` and `p + 2` as f32 (exact).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn two_f16(p: *const u8) -> (f32, f32) {
    // SAFETY (for the unsafe blocks of this module): the intrinsics run only inside functions
    // compiled for, and dispatched after detecting, AVX-512 and F16C; every pointer read is within
    // the block of `BYTES` bytes the caller points at (asserted by the callers' slice lengths).
    unsafe {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }
}

/// Sixteen bytes at `p` as sixteen i32 lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn bytes16(p: *const u8) -> __m512i {
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
}

/// The fifth bits of a `Q5_0` / `Q5_1` block (`qh`, 32 bits at `p`) as bit 4 of lanes: bits
/// 0–15 for the low nibbles, 16–31 for the high ones.
#[cfg(target_arch = "x86_64")]
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

/// A `Q4_K` / `Q5_K` block's 256 values from `qs` (128 bytes of nibbles) and, for `Q5_K`, the
/// fifth bits `qh` (32 bytes: bit `2g` for group `g`'s low nibbles, `2g + 1` for its high
/// ones). Four groups of 64: `d · sc · q − min · m` (`q` with its fifth bit: an exact integer)
/// with the group's two 6-bit scale/minimum pairs, the 32 low nibbles of its 32 bytes, then the
/// 32 high ones.
#[cfg(target_arch = "x86_64")]
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
                let (sc, m) = scale_min_k4(2 * g + half, scales);
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

/// `Q4_0`: 32 values, an f16 scale, 4-bit values − 8.
pub(super) struct Q4_0;

impl Block for Q4_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 18;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        let qs = &b[2..18];
        for j in 0..16 {
            let x0 = i16::from(qs[j] & 0x0F) - 8;
            let x1 = i16::from(qs[j] >> 4) - 8;
            y[j] = f32::from(x0) * d;
            y[j + 16] = f32::from(x1) * d;
        }
    }

    /// `(q − 8) · d`: low nibbles, then high.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
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

/// `Q4_1`: 32 values, f16 scale and minimum, 4-bit values.
pub(super) struct Q4_1;

impl Block for Q4_1 {
    const VALUES: usize = 32;
    const BYTES: usize = 20;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qs = &b[4..20];
        for j in 0..16 {
            y[j] = f32::from(qs[j] & 0x0F) * d + m;
            y[j + 16] = f32::from(qs[j] >> 4) * d + m;
        }
    }

    /// `q · d + m`: low nibbles, then high. A 4-bit integer times an f16 is exact in f32, so
    /// the one rounding of a fused multiply–add is the one rounding of Candle's addition.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
        unsafe {
            let (d, m) = two_f16(p);
            let (d, m) = (_mm512_set1_ps(d), _mm512_set1_ps(m));
            let q = bytes16(p.add(4));
            out[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0x0F))), d, m);
            out[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(q)), d, m);
        }
    }
}

/// `Q5_0`: 32 values, an f16 scale, 5-bit values − 16.
pub(super) struct Q5_0;

impl Block for Q5_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 22;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        for j in 0..16 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = i32::from((qs[j] & 0x0F) | xh_0) - 16;
            let x1 = i32::from((qs[j] >> 4) | xh_1) - 16;
            y[j] = (x0 as f32) * d;
            y[j + 16] = (x1 as f32) * d;
        }
    }

    /// `(q − 16) · d`, `q` a nibble with its fifth bit from `qh`: low nibbles, then high.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
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

/// `Q5_1`: 32 values, f16 scale and minimum, 5-bit values.
pub(super) struct Q5_1;

impl Block for Q5_1 {
    const VALUES: usize = 32;
    const BYTES: usize = 24;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        for j in 0..16 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            y[j] = f32::from((qs[j] & 0x0F) | xh_0) * d + m;
            y[j + 16] = f32::from((qs[j] >> 4) | xh_1) * d + m;
        }
    }

    /// `q · d + m`, `q` a nibble with its fifth bit (exact times an f16, so one rounding as
    /// Candle's addition): low nibbles, then high.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
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

/// `Q8_0`: 32 values, an f16 scale, 8-bit values.
pub(super) struct Q8_0;

impl Block for Q8_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 34;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        // Fixed-length views: the 32 products vectorise (a zip of the slices stayed scalar).
        let (Ok(qs), Ok(y)) = (<&[u8; 32]>::try_from(&b[2..34]), <&mut [f32; 32]>::try_from(y)) else {
            unreachable!("a Q8_0 block holds 32 values");
        };
        for j in 0..32 {
            y[j] = f32::from(qs[j] as i8) * d;
        }
    }

    /// `q · d`, `q` a signed byte.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
        unsafe {
            let d = _mm512_set1_ps(two_f16(p).0);
            out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast()))), d);
            out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast()))), d);
        }
    }
}

/// `Q4_K`: 256 values, super-block scale and minimum, eight 6-bit sub-block scales and minima, 4-bit values.
pub(super) struct Q4K;

impl Block for Q4K {
    const VALUES: usize = 256;
    const BYTES: usize = 144;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let (d, min) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        let q = &b[16..144];
        let (mut is, mut at) = (0, 0);
        for j in (0..256).step_by(64) {
            let q = &q[j / 2..j / 2 + 32];
            let (sc, m) = scale_min_k4(is, scales);
            let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
            let (sc, m) = scale_min_k4(is + 1, scales);
            let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
            for &q in q {
                y[at] = d1 * f32::from(q & 0xF) - m1;
                at += 1;
            }
            for &q in q {
                y[at] = d2 * f32::from(q >> 4) - m2;
                at += 1;
            }
            is += 2;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
        unsafe { k_groups(p, p.add(16), None, out) }
    }
}

/// `Q5_K`: 256 values, as `Q4_K` with a fifth bit.
pub(super) struct Q5K;

impl Block for Q5K {
    const VALUES: usize = 256;
    const BYTES: usize = 176;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let (d, min) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        let qh = &b[16..48];
        let ql = &b[48..176];
        let (mut is, mut at, mut u1, mut u2) = (0, 0, 1u8, 2u8);
        for j in (0..256).step_by(64) {
            let ql = &ql[j / 2..j / 2 + 32];
            let (sc, m) = scale_min_k4(is, scales);
            let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
            let (sc, m) = scale_min_k4(is + 1, scales);
            let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
            for (&l, &h) in ql.iter().zip(qh) {
                let add = if h & u1 != 0 { 16f32 } else { 0f32 };
                y[at] = d1 * (f32::from(l & 0xF) + add) - m1;
                at += 1;
            }
            for (&l, &h) in ql.iter().zip(qh) {
                let add = if h & u2 != 0 { 16f32 } else { 0f32 };
                y[at] = d2 * (f32::from(l >> 4) + add) - m2;
                at += 1;
            }
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
        unsafe { k_groups(p, p.add(48), Some(p.add(16)), out) }
    }
}

/// `Q6_K`: 256 values, an f16 scale, sixteen 8-bit sub-block scales, 6-bit values − 32.
pub(super) struct Q6K;

impl Block for Q6K {
    const VALUES: usize = 256;
    const BYTES: usize = 210;

    #[inline(always)]
    fn to_float(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 208);
        for n in (0..256).step_by(128) {
            let idx = n / 128;
            let ys = &mut y[n..];
            let sc = &b[192 + 8 * idx..208];
            let ql = &b[64 * idx..128];
            let qh = &b[128 + 32 * idx..192];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                ys[l] = d * f32::from(sc[is] as i8) * f32::from(q1);
                ys[l + 32] = d * f32::from(sc[is + 2] as i8) * f32::from(q2);
                ys[l + 64] = d * f32::from(sc[is + 4] as i8) * f32::from(q3);
                ys[l + 96] = d * f32::from(sc[is + 6] as i8) * f32::from(q4);
            }
        }
    }

    /// Two halves of 128: `d · sc · (q − 32)`, each 6-bit `q` from four bits of `ql` and two of
    /// `qh`, in llama.cpp's interleaved order.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn to_registers(p: *const u8, out: &mut [__m512; 16]) {
        unsafe {
            let d = two_f16(p.add(208)).0;
            let (low, three, thirty_two) = (_mm512_set1_epi32(0x0F), _mm512_set1_epi32(3), _mm512_set1_epi32(32));
            for idx in 0..2 {
                let (ql, qh, sc) = (p.add(64 * idx), p.add(128 + 32 * idx), p.add(192 + 8 * idx));
                for lc in 0..2 {
                    let (a, b, h) = (bytes16(ql.add(16 * lc)), bytes16(ql.add(32 + 16 * lc)), bytes16(qh.add(16 * lc)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn every_f16_widens_as_half_does() {
        for bits in 0..=u16::MAX {
            let (want, got) = (f16::from_bits(bits).to_f32(), f16_to_f32(bits));
            assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()), "{bits:#06x}");
        }
    }
}
