//! GGUF weights kept in llama.cpp's blocks (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q4_K`, `Q5_K`,
//! `Q6_K`, and F16 / BF16 / F32 rows): where the stored bytes are, widened to f32 a row at a time as
//! a product needs them (for a product of a few rows, blocks are widened in registers instead:
//! [`kernels::block_product`]). The decoding is the kernel room's ([`kernels::widen`]):
//! Candle's `k_quants` `to_float` arithmetic operation for operation (the dequantise-on-load path),
//! so every value — and every product, attention weight and logit — is bit for bit what the network
//! computes from the f32 weights (`tests` compare every type with Candle's `dequantize`).

use std::sync::Arc;

use crate::model::kernels::{self, BlockKind};

/// Rows of one block kind.
#[derive(Debug, Clone)]
struct Part {
    kind: BlockKind,
    rows: usize,
    row_bytes: usize,
    bytes: Bytes,
}

/// A part's stored bytes: its own, or its place in a [`Region`] shared with the model's other
/// matrices. Immutable once made, so a cloned network shares them.
#[derive(Debug, Clone)]
struct Bytes {
    region: Arc<Vec<u8>>,
    start: usize,
    len: usize,
}

impl Bytes {
    fn own(bytes: Vec<u8>) -> Self {
        Self { len: bytes.len(), region: Arc::new(bytes), start: 0 }
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.region[self.start..self.start + self.len]
    }
}

/// The stored blocks of a model's matrices in one region, filled one matrix after another as a
/// file is read: one large block, which the binary's allocator puts in 2 MB pages
/// ([`crate::alloc::Allocator`]). A decoding step or a keystroke reads every matrix: in 4 KB pages
/// that is ~25 000 pages for SmolLM2, each a page-table walk and, after a pause on a virtual
/// machine, a refault of microseconds.
#[derive(Debug)]
pub struct Region {
    bytes: Vec<u8>,
    filled: usize,
}

/// A filled [`Region`], shared by the matrices made from it ([`Quantized::in_region`]).
#[derive(Debug, Clone)]
pub struct FilledRegion {
    bytes: Arc<Vec<u8>>,
    /// The end of what was filled.
    end: usize,
}

impl Region {
    /// Room for `len` bytes.
    pub fn new(len: usize) -> Self {
        Self { bytes: vec![0; len], filled: 0 }
    }

    /// The next `len` bytes for the caller to fill, and their offset; None past the room asked for.
    pub fn next(&mut self, len: usize) -> Option<(usize, &mut [u8])> {
        let at = self.filled;
        let slot = self.bytes.get_mut(at..at.checked_add(len)?)?;
        self.filled += len;
        Some((at, slot))
    }

    /// Filled: read-only from now on.
    pub fn finish(self) -> FilledRegion {
        FilledRegion { end: self.filled, bytes: Arc::new(self.bytes) }
    }
}

/// A row-major `rows × cols` matrix held as stored blocks: one or more parts (the fused q/k/v
/// stacks q's, k's and v's rows, each in its own kind).
#[derive(Debug, Clone)]
pub struct Quantized {
    parts: Vec<Part>,
    cols: usize,
}

impl Quantized {
    /// `rows × cols` values stored as `kind` blocks in `bytes` (rows one after another, as a GGUF
    /// file holds them).
    ///
    /// # Errors
    /// When `cols` is not a whole number of blocks or `bytes` is not `rows` rows long.
    pub fn new(kind: BlockKind, rows: usize, cols: usize, bytes: Vec<u8>) -> Result<Self, String> {
        let row_bytes = kind
            .row_bytes(cols)
            .ok_or_else(|| format!("{cols} values per row is not a whole number of {kind:?} blocks"))?;
        if rows.checked_mul(row_bytes) != Some(bytes.len()) {
            return Err(format!("{} bytes are not {rows} rows of {row_bytes} bytes ({kind:?})", bytes.len()));
        }
        Ok(Self { parts: vec![Part { kind, rows, row_bytes, bytes: Bytes::own(bytes) }], cols })
    }

    /// `rows × cols` values stored as `kind` blocks at offset `start` of `region` (filled by
    /// [`Region::next`]).
    ///
    /// # Errors
    /// When `cols` is not a whole number of blocks or the rows run past the region.
    pub fn in_region(
        kind: BlockKind,
        (rows, cols): (usize, usize),
        region: &FilledRegion,
        start: usize,
    ) -> Result<Self, String> {
        let row_bytes = kind
            .row_bytes(cols)
            .ok_or_else(|| format!("{cols} values per row is not a whole number of {kind:?} blocks"))?;
        let len =
            rows.checked_mul(row_bytes).filter(|&len| start.checked_add(len).is_some_and(|end| end <= region.end));
        let len = len.ok_or_else(|| format!("{rows} rows of {row_bytes} bytes do not fit in the blocks read"))?;
        let bytes = Bytes { region: Arc::clone(&region.bytes), start, len };
        Ok(Self { parts: vec![Part { kind, rows, row_bytes, bytes }], cols })
    }

    /// f32 values as a matrix of [`BlockKind::F32`] rows.
    pub(super) fn from_f32(values: &[f32], cols: usize) -> Self {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let rows = values.len().checked_div(cols).unwrap_or(0);
        Self { parts: vec![Part { kind: BlockKind::F32, rows, row_bytes: cols * 4, bytes: Bytes::own(bytes) }], cols }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.parts.iter().map(|p| p.rows).sum()
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes as held.
    pub fn bytes(&self) -> usize {
        self.parts.iter().map(|p| p.bytes.len()).sum()
    }

    /// The kinds of its parts.
    pub fn kinds(&self) -> Vec<BlockKind> {
        self.parts.iter().map(|p| p.kind).collect()
    }

    /// Matrices with the same number of columns stacked (their rows one after another).
    pub(super) fn stack(parts: Vec<Self>) -> Self {
        let cols = parts.first().map_or(0, |p| p.cols);
        debug_assert!(parts.iter().all(|p| p.cols == cols));
        Self { parts: parts.into_iter().flat_map(|p| p.parts).collect(), cols }
    }

    /// The kind and stored bytes of rows `rows` when they all lie in one part (what
    /// [`kernels::block_product`] and [`kernels::block_dots`] read), None
    /// otherwise.
    pub(super) fn part_rows(&self, rows: std::ops::Range<usize>) -> Option<(BlockKind, &[u8])> {
        let mut first = 0;
        for p in &self.parts {
            if rows.start < first + p.rows {
                let (start, end) = (rows.start - first, rows.end - first);
                return (end <= p.rows).then(|| (p.kind, &p.bytes[start * p.row_bytes..end * p.row_bytes]));
            }
            first += p.rows;
        }
        None
    }

    /// Row `row`'s kind and stored bytes.
    ///
    /// # Panics
    /// Past the last row.
    #[allow(clippy::inline_always)] // inlined into the dispatched widening, as its decoding is
    #[inline(always)]
    fn stored_row(&self, mut row: usize) -> (BlockKind, &[u8]) {
        for p in &self.parts {
            if row < p.rows {
                return (p.kind, &p.bytes[row * p.row_bytes..(row + 1) * p.row_bytes]);
            }
            row -= p.rows;
        }
        panic!("row {row} past the end of a quantised matrix");
    }

    /// Row `row` as f32 into `out` (`cols` values).
    #[cfg(test)]
    fn row_into(&self, row: usize, out: &mut [f32]) {
        self.widen_into(row * self.cols..(row + 1) * self.cols, out);
    }

    /// Values `range` of the row-major matrix as f32 into `out` ([`kernels::widen`]: compiled for
    /// the best instruction set of the running CPU).
    pub(super) fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        kernels::widen(self.cols, range, out, |row| self.stored_row(row));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_core::quantized::GgmlDType;
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use half::{bf16, f16};

    /// Random block bytes (a xorshift stream) with every f16 scale set to a finite value of either
    /// sign (random bytes would make some NaN, which no file holds and `==` cannot compare).
    fn random_blocks(kind: BlockKind, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let row_bytes = kind.row_bytes(cols).unwrap();
        let mut bytes: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
        let (_, size) = kind.block();
        let scale_offsets: &[usize] = match kind {
            BlockKind::Q4_0 | BlockKind::Q5_0 | BlockKind::Q8_0 => &[0],
            BlockKind::Q4_1 | BlockKind::Q5_1 | BlockKind::Q4K | BlockKind::Q5K => &[0, 2],
            BlockKind::Q6K => &[208],
            BlockKind::F16 | BlockKind::Bf16 | BlockKind::F32 | BlockKind::Mxfp4 => &[],
        };
        let finite = |r: u64| f16::from_f32(((r % 2001) as f32 - 1000.0) / 4096.0).to_le_bytes();
        if kind == BlockKind::Mxfp4 {
            // E8M0 scales 2^-18 … 2^11 (halved: 2^(e − 128)).
            for block in bytes.chunks_mut(size) {
                block[0] = 110 + (next() % 30) as u8;
            }
        }
        for block in bytes.chunks_mut(size) {
            for &at in scale_offsets {
                block[at..at + 2].copy_from_slice(&finite(next()));
            }
        }
        if matches!(kind, BlockKind::F16 | BlockKind::Bf16 | BlockKind::F32) {
            // Floats: write finite values of the kind.
            let mut floats = Vec::new();
            for i in 0..rows * cols {
                let v = ((next() % 20001) as f32 - 10000.0) / 1024.0 + i as f32 * 1e-3;
                match kind {
                    BlockKind::F32 => floats.extend(v.to_le_bytes()),
                    BlockKind::F16 => floats.extend(f16::from_f32(v).to_le_bytes()),
                    _ => floats.extend(bf16::from_f32(v).to_le_bytes()),
                }
            }
            return floats;
        }
        bytes
    }

    const ALL: [(BlockKind, GgmlDType); 11] = [
        (BlockKind::F32, GgmlDType::F32),
        (BlockKind::F16, GgmlDType::F16),
        (BlockKind::Bf16, GgmlDType::BF16),
        (BlockKind::Q4_0, GgmlDType::Q4_0),
        (BlockKind::Q4_1, GgmlDType::Q4_1),
        (BlockKind::Q5_0, GgmlDType::Q5_0),
        (BlockKind::Q5_1, GgmlDType::Q5_1),
        (BlockKind::Q8_0, GgmlDType::Q8_0),
        (BlockKind::Q4K, GgmlDType::Q4K),
        (BlockKind::Q5K, GgmlDType::Q5K),
        (BlockKind::Q6K, GgmlDType::Q6K),
    ];

    #[test]
    fn every_kind_widens_bit_for_bit_as_candle_dequantises() {
        let (rows, cols) = (5, 512);
        for (i, (kind, dtype)) in ALL.into_iter().enumerate() {
            assert_eq!(BlockKind::of(dtype), Some(kind));
            assert_eq!(kind.block(), (dtype.block_size(), dtype.type_size()), "{kind:?}");
            let bytes = random_blocks(kind, rows, cols, 0x9E37_79B9 + i as u64);
            let candle = qtensor_from_ggml(dtype, &bytes, vec![rows, cols], &Device::Cpu).unwrap();
            let want: Vec<f32> = candle.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let q = Quantized::new(kind, rows, cols, bytes).unwrap();
            assert_eq!(q.bytes(), rows * cols / dtype.block_size() * dtype.type_size());
            let mut got = vec![0.0; rows * cols];
            q.widen_into(0..rows * cols, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{kind:?}");
            assert!(want.iter().any(|v| *v != 0.0), "{kind:?}: the test values are not all zero");
            // A range that starts and ends inside rows.
            let mut part = vec![0.0; 700];
            q.widen_into(300..1000, &mut part);
            assert_eq!(bits(&part), bits(&want[300..1000]), "{kind:?}");
        }
    }

    /// `MXFP4` (not a type Candle reads): its blocks widen, bit for bit, to what gguf-py's
    /// `quants.MXFP4.dequantize_blocks` gives (`tests/fixtures/blocks/mxfp4.json`, written by
    /// `tests/fixtures/make_gguf_families.py --mxfp4`: subnormal to large scales, every value).
    #[test]
    fn mxfp4_widens_bit_for_bit_as_gguf_py_dequantises() {
        #[derive(serde::Deserialize)]
        struct Reference {
            blocks_hex: String,
            values_f32_bits: Vec<u32>,
        }
        let r: Reference = serde_json::from_str(include_str!("../../../tests/fixtures/blocks/mxfp4.json")).unwrap();
        let bytes: Vec<u8> = (0..r.blocks_hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&r.blocks_hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(BlockKind::Mxfp4.block(), (32, 17));
        let values = r.values_f32_bits.len();
        assert_eq!(bytes.len(), values / 32 * 17);
        // Four rows of four blocks, widened whole and from the middle of a row.
        let q = Quantized::new(BlockKind::Mxfp4, 4, values / 4, bytes).unwrap();
        let mut got = vec![0.0; values];
        q.widen_into(0..values, &mut got);
        let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, r.values_f32_bits);
        let mut part = vec![0.0; 100];
        q.widen_into(45..145, &mut part);
        assert_eq!(part.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), r.values_f32_bits[45..145]);
        // Block 10 has e = 128 (scale 1): its values are ggml's doubled E2M1 numbers themselves.
        let kvalues = [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0];
        assert!(got[320..352].iter().all(|v| kvalues.contains(&v.abs())), "{:?}", &got[320..352]);
        // Block 0 (e = 0) is subnormal: at most 12 · 2^-128, not all zero.
        assert!(got[..32].iter().all(|v| v.abs() <= 12.0 * 2f32.powi(-128)) && got[..32].iter().any(|v| *v != 0.0));
    }

    #[test]
    fn blocks_multiplied_in_registers_are_the_widened_rows_product() {
        use crate::model::kernels::{BLOCK_ROWS, MatMut, MatRef, block_dots, block_product, matmul};
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let values = |len: usize, seed: u64| -> Vec<f32> {
            let bytes = random_blocks(BlockKind::F32, 1, len, seed);
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) / 8.0).collect()
        };
        let avx512 = {
            #[cfg(target_arch = "x86_64")]
            {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            false
        };
        let mut fused = Vec::new();
        for kind in ALL.map(|(kind, _)| kind).into_iter().chain([BlockKind::Mxfp4]) {
            if kind.is_float() {
                continue;
            }
            fused.push(kind);
            let (block, _) = kind.block();
            // 11 weight rows: two tiles of four and three left over; one block, then several.
            for (k, n) in [(block, 11), (block * 3, 11), (768, 4)] {
                let q = Quantized::new(kind, n, k, random_blocks(kind, n, k, 17 + k as u64)).unwrap();
                let mut wide = vec![0.0; n * k];
                q.widen_into(0..n * k, &mut wide);
                let (part_kind, blocks) = q.part_rows(0..n).unwrap();
                assert_eq!(part_kind, kind);
                for m in 1..=BLOCK_ROWS {
                    let x = values(m * k, 5 + m as u64);
                    let mut want = vec![0.0; m * n];
                    let w = MatRef::rows(&wide, n, k, k).t();
                    matmul(MatMut::rows(&mut want, m, n, n), MatRef::rows(&x, m, k, k), w, 1.0, false);
                    let mut got = vec![f32::NAN; m * n];
                    let taken = block_product(kind, MatMut::rows(&mut got, m, n, n), MatRef::rows(&x, m, k, k), blocks);
                    assert_eq!(taken, avx512, "{kind:?}: taken exactly where AVX-512 is");
                    if taken {
                        assert_eq!(bits(&got), bits(&want), "{kind:?}: {m} rows of {k}");
                    }
                }
                // More rows than it takes: nothing written, the caller widens.
                let rows = BLOCK_ROWS + 1;
                let x = values(rows * k, 3);
                let mut out = vec![0.0; rows * n];
                assert!(!block_product(kind, MatMut::rows(&mut out, rows, n, n), MatRef::rows(&x, rows, k, k), blocks));
                // The language-model head's logits: `kernels::dot` of each widened row.
                let h = values(k, 9);
                let want: Vec<f32> = wide.chunks_exact(k).map(|row| crate::model::kernels::dot(row, &h)).collect();
                let mut got = vec![f32::NAN; n];
                assert_eq!(block_dots(kind, &h, blocks, &mut got), avx512);
                if avx512 {
                    assert_eq!(bits(&got), bits(&want), "{kind:?}: logits of {k}");
                }
            }
        }
        let blocks = [BlockKind::Q4_0, BlockKind::Q4_1, BlockKind::Q5_0, BlockKind::Q5_1, BlockKind::Q8_0];
        let k_quants = [BlockKind::Q4K, BlockKind::Q5K, BlockKind::Q6K, BlockKind::Mxfp4];
        assert_eq!(fused, [&blocks[..], &k_quants].concat());
        // Rows of a stacked matrix are handed out only within one part, with its kind.
        let a = Quantized::new(BlockKind::Q4_1, 2, 32, random_blocks(BlockKind::Q4_1, 2, 32, 1)).unwrap();
        let b = Quantized::new(BlockKind::Q8_0, 2, 32, random_blocks(BlockKind::Q8_0, 2, 32, 2)).unwrap();
        let stacked = Quantized::stack(vec![a.clone(), b, a]);
        assert_eq!(stacked.part_rows(0..2).map(|(k, b)| (k, b.len())), Some((BlockKind::Q4_1, 40)));
        assert_eq!(stacked.part_rows(2..4).map(|(k, b)| (k, b.len())), Some((BlockKind::Q8_0, 68)));
        assert!(stacked.part_rows(1..3).is_none() && stacked.part_rows(5..7).is_none());
    }

    #[test]
    fn stacked_rows_and_rows_read_into_a_region_keep_their_kinds() {
        let a = Quantized::new(BlockKind::Q4_0, 2, 32, random_blocks(BlockKind::Q4_0, 2, 32, 7)).unwrap();
        let b = Quantized::new(BlockKind::Q6K, 3, 256, random_blocks(BlockKind::Q6K, 3, 256, 8));
        assert!(b.unwrap().cols() == 256);
        assert!(Quantized::new(BlockKind::Q6K, 1, 32, vec![0; 210]).is_err(), "32 is not a Q6_K row");
        assert!(Quantized::new(BlockKind::Q4_0, 3, 32, vec![0; 18]).is_err(), "too few bytes");
        let c = Quantized::new(BlockKind::Q8_0, 1, 32, random_blocks(BlockKind::Q8_0, 1, 32, 9)).unwrap();
        let stacked = Quantized::stack(vec![a.clone(), c.clone()]);
        assert_eq!((stacked.rows(), stacked.kinds()), (3, vec![BlockKind::Q4_0, BlockKind::Q8_0]));
        let (mut x, mut y) = (vec![0.0; 32], vec![0.0; 32]);
        stacked.row_into(2, &mut x);
        c.row_into(0, &mut y);
        assert_eq!(x, y);
        // Matrices read into one region are the same matrices, and stack as their own bytes do.
        let (a_bytes, c_bytes) = (random_blocks(BlockKind::Q4_0, 2, 32, 7), random_blocks(BlockKind::Q8_0, 1, 32, 9));
        let mut region = Region::new(a_bytes.len() + c_bytes.len());
        let (at_a, slot) = region.next(a_bytes.len()).unwrap();
        slot.copy_from_slice(&a_bytes);
        let (at_c, slot) = region.next(c_bytes.len()).unwrap();
        slot.copy_from_slice(&c_bytes);
        assert!(region.next(1).is_none(), "no room past what was asked for");
        let region = region.finish();
        let a_in = Quantized::in_region(BlockKind::Q4_0, (2, 32), &region, at_a).unwrap();
        let c_in = Quantized::in_region(BlockKind::Q8_0, (1, 32), &region, at_c).unwrap();
        assert_eq!(a_in.bytes(), a.bytes());
        let stacked_in = Quantized::stack(vec![a_in, c_in]);
        for row in 0..3 {
            stacked.row_into(row, &mut x);
            stacked_in.row_into(row, &mut y);
            assert_eq!(x, y, "row {row}");
        }
        assert!(Quantized::in_region(BlockKind::Q8_0, (2, 32), &region, at_c).is_err(), "rows past the region");
        assert!(Quantized::in_region(BlockKind::Q8_0, (1, 31), &region, at_a).is_err(), "not whole blocks");
    }
}
