//! llama.cpp's GGUF block kinds: one type per kind ([`Q4_0`] … [`Q6K`]) with its one decoder
//! ([`Block::decode`]), Candle's `k_quants` `to_float` arithmetic operation for operation, written
//! once over sixteen lanes ([`Unpack`]) and run by both of its users: the widening of stored rows
//! ([`widen`], in the running CPU's lanes: one AVX-512 register, two AVX2 registers or an array)
//! and the products of a few rows (in AVX-512 registers, the f32 never going through memory) — so
//! every value, and every product, attention weight and logit, is bit for bit what the network
//! computes from the dequantised weights. One dispatch over the kinds ([`by_block_kind`]) serves the
//! widening and the products.

#![allow(clippy::inline_always)] // the decoders are vectorised only when inlined into the dispatched functions

use half::bf16;

use super::simd::{Block, Ints, Put, Simd, Unpack, Vectorised, f16_to_f32};

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
    /// 32 values: an E8M0 scale (a power of two), 4-bit E2M1 values (gpt-oss's experts).
    Mxfp4,
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
            Self::Mxfp4 => (32, 17),
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
/// the kinds, for the widening (`decode_row`) and the products of blocks (`gemm`).
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
            $crate::model::kernels::BlockKind::Mxfp4 => $m!($crate::model::kernels::blocks::Mxfp4),
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

/// One row's blocks → f32 in lanes `L`, as Candle's `GgmlType::to_float` of each block type
/// computes it.
#[inline(always)]
fn decode_row<L: Unpack>(kind: BlockKind, bytes: &[u8], out: &mut [f32]) {
    // One loop per kind (the kind is matched once per row, not once per block).
    macro_rules! blocks {
        ($block:ty) => {
            for (b, y) in bytes.chunks_exact(<$block>::BYTES).zip(out.chunks_exact_mut(<$block>::VALUES)) {
                <$block>::decode::<L, _>(b, y);
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
/// running CPU, each block decoded in its lanes.
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
    fn run<L: Unpack>(self) {
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
                decode_row::<L>(kind, bytes, dst);
            } else {
                scratch.resize(cols, 0.0);
                decode_row::<L>(kind, bytes, &mut scratch);
                dst.copy_from_slice(&scratch[col..col + n]);
            }
            at += n;
        }
    }
}

/// The fifth bits of a `Q5_0` / `Q5_1` block (`qh`: 32 bits, one a value) as bit 4 of lanes: bits
/// 0–15 for the low nibbles, 16–31 for the high ones.
#[inline(always)]
fn fifth_bits<I: Ints>(qh: &[u8]) -> [I; 2] {
    const BIT: [u8; 32] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31,
    ];
    let (qh, one) = (I::splat(i32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]])), I::splat(1));
    [qh.shr_by(I::bytes(&BIT)).and(one).shl::<4>(), qh.shr_by(I::bytes(&BIT[16..])).and(one).shl::<4>()]
}

/// A `Q4_K` / `Q5_K` block's 256 values from `qs` (128 bytes of nibbles) and, for `Q5_K`, the
/// fifth bits `qh` (32 bytes: bit `2g` for group `g`'s low nibbles, `2g + 1` for its high
/// ones). Four groups of 64: `d · sc · q − min · m` (`q` with its fifth bit: an exact integer)
/// with the group's two 6-bit scale/minimum pairs, the 32 low nibbles of its 32 bytes, then the
/// 32 high ones.
#[inline(always)]
fn k_groups<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], qs: &[u8], qh: Option<&[u8]>, out: &mut O) {
    let [d, min] = L::f16_pair(b);
    let scales = &b[4..16];
    let (low, bit_4) = (L::Ints::splat(0x0F), L::Ints::splat(0x10));
    #[allow(clippy::manual_map)] // `map`'s closure would not inherit the caller's target features
    let qh = match qh {
        Some(h) => Some([L::Ints::bytes(h).shl::<4>(), L::Ints::bytes(&h[16..]).shl::<4>()]),
        None => None,
    };
    for g in 0..4 {
        let q = &qs[32 * g..];
        let (q0, q1) = (L::Ints::bytes(q), L::Ints::bytes(&q[16..]));
        let halves = [[q0.and(low), q1.and(low)], [q0.shr::<4>(), q1.shr::<4>()]];
        for (half, nibbles) in halves.into_iter().enumerate() {
            let (sc, m) = scale_min_k4(2 * g + half, scales);
            let (d1, m1) = (L::splat(d * f32::from(sc)), L::splat(min * f32::from(m)));
            let shift = L::Ints::splat(i32::try_from(2 * g + half).unwrap_or(0));
            for (i, mut q) in nibbles.into_iter().enumerate() {
                if let Some(qh) = &qh {
                    q = q.or(qh[i].shr_by(shift).and(bit_4));
                }
                out.put(4 * g + 2 * half + i, d1.mul(L::float(q)).sub(m1));
            }
        }
    }
}

/// `Q4_0`: 32 values, an f16 scale, 4-bit values − 8.
pub(super) struct Q4_0;

impl Block for Q4_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 18;

    /// `(q − 8) · d`: low nibbles, then high.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let d = L::splat_f16(b);
        let q = L::Ints::bytes(&b[2..18]);
        let eight = L::Ints::splat(8);
        out.put(0, L::float(q.and(L::Ints::splat(0x0F)).sub(eight)).mul(d));
        out.put(1, L::float(q.shr::<4>().sub(eight)).mul(d));
    }
}

/// `Q4_1`: 32 values, f16 scale and minimum, 4-bit values.
pub(super) struct Q4_1;

impl Block for Q4_1 {
    const VALUES: usize = 32;
    const BYTES: usize = 20;

    /// `q · d + m`: low nibbles, then high (a 4-bit integer times an f16 is exact in f32).
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let [d, m] = L::f16_pair(b);
        let (d, m) = (L::splat(d), L::splat(m));
        let q = L::Ints::bytes(&b[4..20]);
        out.put(0, L::float(q.and(L::Ints::splat(0x0F))).mul_add_exact(d, m));
        out.put(1, L::float(q.shr::<4>()).mul_add_exact(d, m));
    }
}

/// `Q5_0`: 32 values, an f16 scale, 5-bit values − 16.
pub(super) struct Q5_0;

impl Block for Q5_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 22;

    /// `(q − 16) · d`, `q` a nibble with its fifth bit from `qh`: low nibbles, then high.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let d = L::splat_f16(b);
        let [h0, h1] = fifth_bits::<L::Ints>(&b[2..6]);
        let q = L::Ints::bytes(&b[6..22]);
        let sixteen = L::Ints::splat(16);
        out.put(0, L::float(q.and(L::Ints::splat(0x0F)).or(h0).sub(sixteen)).mul(d));
        out.put(1, L::float(q.shr::<4>().or(h1).sub(sixteen)).mul(d));
    }
}

/// `Q5_1`: 32 values, f16 scale and minimum, 5-bit values.
pub(super) struct Q5_1;

impl Block for Q5_1 {
    const VALUES: usize = 32;
    const BYTES: usize = 24;

    /// `q · d + m`, `q` a nibble with its fifth bit (exact times an f16): low nibbles, then high.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let [d, m] = L::f16_pair(b);
        let (d, m) = (L::splat(d), L::splat(m));
        let [h0, h1] = fifth_bits::<L::Ints>(&b[4..8]);
        let q = L::Ints::bytes(&b[8..24]);
        out.put(0, L::float(q.and(L::Ints::splat(0x0F)).or(h0)).mul_add_exact(d, m));
        out.put(1, L::float(q.shr::<4>().or(h1)).mul_add_exact(d, m));
    }
}

/// `Q8_0`: 32 values, an f16 scale, 8-bit values.
pub(super) struct Q8_0;

impl Block for Q8_0 {
    const VALUES: usize = 32;
    const BYTES: usize = 34;

    /// `q · d`, `q` a signed byte.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let d = L::splat_f16(b);
        out.put(0, L::float(L::Ints::signed_bytes(&b[2..18])).mul(d));
        out.put(1, L::float(L::Ints::signed_bytes(&b[18..34])).mul(d));
    }
}

/// `Q4_K`: 256 values, super-block scale and minimum, eight 6-bit sub-block scales and minima, 4-bit values.
pub(super) struct Q4K;

impl Block for Q4K {
    const VALUES: usize = 256;
    const BYTES: usize = 144;

    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        k_groups(b, &b[16..144], None, out);
    }
}

/// `Q5_K`: 256 values, as `Q4_K` with a fifth bit.
pub(super) struct Q5K;

impl Block for Q5K {
    const VALUES: usize = 256;
    const BYTES: usize = 176;

    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        k_groups(b, &b[48..176], Some(&b[16..48]), out);
    }
}

/// `Q6_K`: 256 values, an f16 scale, sixteen 8-bit sub-block scales, 6-bit values − 32.
pub(super) struct Q6K;

impl Block for Q6K {
    const VALUES: usize = 256;
    const BYTES: usize = 210;

    /// Two halves of 128: `d · sc · (q − 32)`, each 6-bit `q` from four bits of `ql` and two of
    /// `qh`, in llama.cpp's interleaved order.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let d = f16_to_f32(u16::from_le_bytes([b[208], b[209]]));
        let (low, bits_4_5, thirty_two) = (L::Ints::splat(0x0F), L::Ints::splat(0x30), L::Ints::splat(32));
        for idx in 0..2 {
            let (ql, qh, sc) = (&b[64 * idx..], &b[128 + 32 * idx..], &b[192 + 8 * idx..]);
            for lc in 0..2 {
                let (a, b, h) = (
                    L::Ints::bytes(&ql[16 * lc..]),
                    L::Ints::bytes(&ql[32 + 16 * lc..]),
                    L::Ints::bytes(&qh[16 * lc..]),
                );
                // Bits 4–5 of each value: two bits of `qh`, from bit 0, 2, 4 or 6.
                // (No closures: they would not inherit the caller's target features.)
                let hi = [
                    h.shl::<4>().and(bits_4_5),
                    h.shl::<2>().and(bits_4_5),
                    h.and(bits_4_5),
                    h.shr::<2>().and(bits_4_5),
                ];
                let q = [a.and(low).or(hi[0]), b.and(low).or(hi[1]), a.shr::<4>().or(hi[2]), b.shr::<4>().or(hi[3])];
                for (part, q) in q.into_iter().enumerate() {
                    let ds = L::splat(d * f32::from(sc[lc + 2 * part].cast_signed()));
                    out.put(8 * idx + 2 * part + lc, ds.mul(L::float(q.sub(thirty_two))));
                }
            }
        }
    }
}

/// `MXFP4` (llama.cpp's `block_mxfp4`): 32 values, an E8M0 scale byte `e`, then 16 bytes whose
/// low nibbles are values 0–15 and high nibbles 16–31, each an E2M1 number: a sign bit over
/// 0, 0.5, 1, 1.5, 2, 3, 4, 6. As ggml stores them doubled (`kvalues_mxfp4`: 0, 1, 2, 3, 4, 6, 8,
/// 12), the scale is halved: `ggml_e8m0_to_fp32_half(e)` = 2^(e − 128), the bits `(e − 1) << 23`
/// (`0x0020_0000 << e` for the subnormal `e` < 2).
pub(super) struct Mxfp4;

impl Mxfp4 {
    /// `ggml_e8m0_to_fp32_half`.
    #[inline(always)]
    fn half_scale(e: u8) -> f32 {
        let bits = if e < 2 { 0x0020_0000u32 << e } else { (u32::from(e) - 1) << 23 };
        f32::from_bits(bits)
    }

    /// `kvalues_mxfp4[q]` for 4-bit `q` in lanes, without a table: the magnitude `m = q & 7` is
    /// `m` for `m` < 4, else `(2 + (m & 1)) << ((m >> 1) − 1)`, here `(8 + 4 (m & 1)) >> (3 − (m >>
    /// 1))` cleared for `m` = 0; the sign bit 3 negates it. Every value is an exact
    /// small integer, and times the power-of-two scale an exact f32, as ggml's table lookup gives.
    #[inline(always)]
    fn values<L: Unpack>(q: L::Ints, d: L) -> L {
        let (one, three) = (L::Ints::splat(1), L::Ints::splat(3));
        let m = q.and(L::Ints::splat(7));
        let big = L::Ints::splat(8).or(m.and(one).shl::<2>()).shr_by(three.sub(m.shr::<1>()));
        // (m + 7) >> 3 is 1 for m ≥ 1, 0 for m = 0; 0 − it, all ones or none, keeps `big` or clears it.
        let nonzero = m.sub(L::Ints::splat(-7)).shr::<3>();
        let magnitude = big.and(L::Ints::splat(0).sub(nonzero));
        // The sign as an integer (−m, never −0: code 8 is +0 in ggml's table): m where s = 0, 0 − m
        // where s = 1, chosen by the masks s − 1 and 0 − s.
        let (zero, s) = (L::Ints::splat(0), q.shr::<3>().and(one));
        let signed = magnitude.and(s.sub(one)).or(zero.sub(magnitude).and(zero.sub(s)));
        L::float(signed).mul(d)
    }
}

impl Block for Mxfp4 {
    const VALUES: usize = 32;
    const BYTES: usize = 17;

    /// `kvalues_mxfp4[q] · 2^(e − 128)`: low nibbles, then high.
    #[inline(always)]
    fn decode<L: Unpack, O: Put<L> + ?Sized>(b: &[u8], out: &mut O) {
        let d = L::splat(Self::half_scale(b[0]));
        let q = L::Ints::bytes(&b[1..17]);
        out.put(0, Self::values::<L>(q.and(L::Ints::splat(0x0F)), d));
        out.put(1, Self::values::<L>(q.shr::<4>(), d));
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

    /// The decoders run in every lanes this machine has (AVX-512, AVX2, an array) give the same bits
    /// (the products' registers are checked against the widening in `engine::quant`).
    #[test]
    fn every_instruction_set_widens_to_the_same_bits() {
        let levels = match Simd::detect() {
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => vec![Simd::Avx512, Simd::Avx2, Simd::Scalar],
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => vec![Simd::Avx2, Simd::Scalar],
            Simd::Scalar => vec![Simd::Scalar],
        };
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let kinds = [
            BlockKind::Q4_0,
            BlockKind::Q4_1,
            BlockKind::Q5_0,
            BlockKind::Q5_1,
            BlockKind::Q8_0,
            BlockKind::Q4K,
            BlockKind::Q5K,
            BlockKind::Q6K,
            BlockKind::Mxfp4,
        ];
        for kind in kinds {
            let (values, size) = kind.block();
            let (rows, cols) = (3, 2 * values);
            let mut bytes: Vec<u8> = (0..rows * cols / values * size)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            // Finite scales of either sign (some random bits would be NaN, which `==` cannot compare).
            let scales: &[usize] = match kind {
                BlockKind::Q6K => &[208],
                BlockKind::Q4_1 | BlockKind::Q5_1 | BlockKind::Q4K | BlockKind::Q5K => &[0, 2],
                _ => &[0],
            };
            for block in bytes.chunks_exact_mut(size) {
                for &at in scales {
                    block[at + 1] &= 0xBB;
                }
            }
            let row_bytes = cols / values * size;
            let widened = |simd: Simd| {
                let mut out = vec![0.0f32; rows * cols];
                let row = |r: usize| (kind, &bytes[r * row_bytes..(r + 1) * row_bytes]);
                simd.vectorised(Widen { cols, range: 0..rows * cols, out: &mut out, row });
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let want = widened(Simd::Scalar);
            for &simd in &levels {
                assert_eq!(widened(simd), want, "{kind:?}");
            }
        }
    }
}
