//! A GGUF file's header read by attnviz itself (the layout of ggml's `docs/gguf.md`, the checks of
//! llama.cpp's `gguf.cpp`): magic, version 1–3, the metadata (every value type, arrays nested up
//! to 64 deep), the tensor infos with their raw GGML type ids, the alignment and where the data
//! starts. Every count and length is checked against the bytes left in the file before anything
//! is allocated for it, every tensor's bytes against the file's end, so a hostile header is a
//! clear error, never a panic nor a huge allocation. The tensors' bytes are read by
//! [`Header::read`]; the types Candle dequantises become Candle `QTensor`s from them
//! ([`Header::qtensor`]), MXFP4 stays in its blocks.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};

use super::ModelError;
use super::engine::BlockKind;
use super::families::MAX_TENSOR_ELEMENTS;
use super::files::{first_line, regular_file};

/// The alignment of the tensors' data when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// llama.cpp's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Nesting of arrays read (Candle's and llama.cpp's bound).
const MAX_DEPTH: usize = 64;
/// Metadata values read in all (Gemma 3's 262 144 tokens with their types and scores hold about
/// 0.8 million, Llama 3's vocabulary with its 280 000 merges 0.5 million): a bound on the memory a
/// header of one-byte values can ask for (a value is 32 bytes in memory: at most 128 MB).
const MAX_VALUES: u64 = 1 << 22;

/// A tensor's GGML type: one Candle dequantises, or MXFP4 (which attnviz widens itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TensorType {
    /// A type Candle's `quantized` module reads.
    Candle(GgmlDType),
    /// `MXFP4` (GGML type 39), gpt-oss's experts.
    Mxfp4,
}

impl TensorType {
    /// The type of GGML type id `id`, or its name (when ggml has one) for an error.
    fn of(id: u32) -> Result<Self, &'static str> {
        use GgmlDType as G;
        Ok(Self::Candle(match id {
            0 => G::F32,
            1 => G::F16,
            2 => G::Q4_0,
            3 => G::Q4_1,
            6 => G::Q5_0,
            7 => G::Q5_1,
            8 => G::Q8_0,
            9 => G::Q8_1,
            10 => G::Q2K,
            11 => G::Q3K,
            12 => G::Q4K,
            13 => G::Q5K,
            14 => G::Q6K,
            15 => G::Q8K,
            30 => G::BF16,
            39 => return Ok(Self::Mxfp4),
            _ => {
                return Err(match id {
                    16 => "IQ2_XXS",
                    17 => "IQ2_XS",
                    18 => "IQ3_XXS",
                    19 => "IQ1_S",
                    20 => "IQ4_NL",
                    21 => "IQ3_S",
                    22 => "IQ2_S",
                    23 => "IQ4_XS",
                    24 => "I8",
                    25 => "I16",
                    26 => "I32",
                    27 => "I64",
                    28 => "F64",
                    29 => "IQ1_M",
                    34 => "TQ1_0",
                    35 => "TQ2_0",
                    40 => "NVFP4",
                    _ => "",
                });
            }
        }))
    }

    /// `(values, bytes)` per block.
    fn block(self) -> (usize, usize) {
        match self {
            Self::Candle(d) => (d.block_size(), d.type_size()),
            Self::Mxfp4 => BlockKind::Mxfp4.block(),
        }
    }

    /// The block kind the engine keeps it in, None for the types only Candle dequantises.
    pub(super) fn kind(self) -> Option<BlockKind> {
        Some(match self {
            Self::Mxfp4 => BlockKind::Mxfp4,
            Self::Candle(d) => match d {
                GgmlDType::F32 => BlockKind::F32,
                GgmlDType::F16 => BlockKind::F16,
                GgmlDType::BF16 => BlockKind::Bf16,
                GgmlDType::Q4_0 => BlockKind::Q4_0,
                GgmlDType::Q4_1 => BlockKind::Q4_1,
                GgmlDType::Q5_0 => BlockKind::Q5_0,
                GgmlDType::Q5_1 => BlockKind::Q5_1,
                GgmlDType::Q8_0 => BlockKind::Q8_0,
                GgmlDType::Q4K => BlockKind::Q4K,
                GgmlDType::Q5K => BlockKind::Q5K,
                GgmlDType::Q6K => BlockKind::Q6K,
                _ => return None,
            },
        })
    }

    /// Its name as attnviz reports the weights (Candle's spelling: `Q4_1`, `Q4K`, `BF16`, `MXFP4`).
    pub(super) fn name(self) -> String {
        match self {
            Self::Candle(d) => format!("{d:?}"),
            Self::Mxfp4 => "MXFP4".into(),
        }
    }
}

/// A tensor of the file.
#[derive(Debug, Clone)]
pub(super) struct TensorInfo {
    /// Its shape, outermost first (GGUF lists the innermost first; Candle's order).
    pub dims: Vec<usize>,
    /// Its type.
    pub ty: TensorType,
    /// Where its bytes start in the file.
    pub start: u64,
    /// How many bytes it has.
    pub bytes: usize,
}

/// A GGUF header.
pub(super) struct Header {
    /// The metadata.
    pub metadata: HashMap<String, Value>,
    /// The tensors, by name.
    pub tensors: BTreeMap<String, TensorInfo>,
}

/// The header as it is read: the file, where the reader is, how many bytes it has.
struct Cursor {
    r: BufReader<File>,
    at: u64,
    size: u64,
    /// Version 1 writes lengths, counts and dimensions as u32, later versions as u64.
    v1: bool,
    /// Metadata values read so far.
    values: u64,
}

impl Cursor {
    fn left(&self) -> u64 {
        self.size.saturating_sub(self.at)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|_| format!("the file ends inside its header (at byte {})", self.at))?;
        self.at += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    /// A length, count or dimension.
    fn length(&mut self) -> Result<u64, String> {
        if self.v1 { self.u32().map(u64::from) } else { self.u64() }
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.length()?;
        if len > self.left() {
            return Err(format!("string length {len} exceeds the {} bytes left in the file", self.left()));
        }
        let mut v = vec![0u8; usize::try_from(len).map_err(|_| format!("string length {len}"))?];
        self.r.read_exact(&mut v).map_err(|e| format!("reading a string at byte {}: {e}", self.at))?;
        self.at += len;
        // Strings should not end in NULs; some writers add them (as Candle, they are dropped).
        while v.last() == Some(&0) {
            v.pop();
        }
        // (Valid UTF-8, the rule, keeps its buffer: a vocabulary's strings are not copied twice.)
        Ok(String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// The fewest bytes a value of type `ty` takes (an array's elements are checked against them).
    fn min_size(&self, ty: u32) -> Option<u64> {
        let length = if self.v1 { 4 } else { 8 };
        Some(match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => length,
            9 => 4 + length,
            _ => return None,
        })
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, String> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(format!("its metadata holds more than {MAX_VALUES} values"));
        }
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>()?[0]),
            1 => Value::I8(i8::from_le_bytes(self.bytes()?)),
            2 => Value::U16(u16::from_le_bytes(self.bytes()?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.bytes()?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match self.bytes::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("a boolean of value {b} at byte {}", self.at - 1)),
            },
            8 => Value::String(self.string()?),
            9 if depth >= MAX_DEPTH => return Err(format!("arrays nested more than {MAX_DEPTH} deep")),
            9 => {
                let item = self.u32()?;
                let min = self.min_size(item).ok_or_else(|| format!("an array of unknown value type {item}"))?;
                let len = self.length()?;
                if len > 1 << 30 {
                    return Err(format!("array length {len} exceeds the maximum of 2^30"));
                }
                let needed = len.saturating_mul(min);
                if needed > self.left() {
                    return Err(format!(
                        "array of {len} elements needs at least {needed} bytes, only {} remaining",
                        self.left()
                    ));
                }
                // Room for all of them at once, in whole 2 MB pages from a megabyte on (a vocabulary's
                // 49,152 values: 1.5 MB), which the allocator maps and, freed, hands to the next large buffers:
                // left to mimalloc they held 14 MB more peak RSS on a SmolLM2 load.
                let mut items = crate::alloc::with_room(usize::try_from(len.min(MAX_VALUES)).unwrap_or(0));
                for _ in 0..len {
                    items.push(self.value(item, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.bytes()?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes()?)),
            _ => return Err(format!("unknown value type {ty} at byte {}", self.at - 4)),
        })
    }
}

/// `general.alignment`: a power of two, 32 when absent.
fn alignment(metadata: &HashMap<String, Value>) -> Result<u64, String> {
    let a = match metadata.get("general.alignment") {
        None => return Ok(DEFAULT_ALIGNMENT),
        Some(Value::U8(a)) => u64::from(*a),
        Some(Value::U16(a)) => u64::from(*a),
        Some(Value::U32(a)) => u64::from(*a),
        Some(Value::U64(a)) => *a,
        Some(Value::I8(a)) => u64::try_from(*a).unwrap_or(0),
        Some(Value::I16(a)) => u64::try_from(*a).unwrap_or(0),
        Some(Value::I32(a)) => u64::try_from(*a).unwrap_or(0),
        Some(Value::I64(a)) => u64::try_from(*a).unwrap_or(0),
        Some(other) => return Err(format!("general.alignment must be a whole number, not {other:?}")),
    };
    if a.is_power_of_two() {
        Ok(a)
    } else {
        Err(format!("general.alignment = {a}: a GGUF file's alignment must be a power of two"))
    }
}

/// One tensor info: name, dimensions, type, offset; checked against the file.
fn tensor_info(c: &mut Cursor) -> Result<(String, Vec<usize>, u32, u64), String> {
    let name = c.string()?;
    let n = c.u32()?;
    if n > MAX_DIMS {
        return Err(format!("tensor {name} has {n} dimensions, at most {MAX_DIMS} are allowed"));
    }
    let mut dims = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let d = c.length()?;
        dims.push(usize::try_from(d).unwrap_or(usize::MAX));
    }
    dims.reverse();
    let ty = c.u32()?;
    let offset = c.u64()?;
    Ok((name, dims, ty, offset))
}

impl Header {
    /// Reads and checks the header of the GGUF file at `path`.
    pub(super) fn read(path: &Path) -> Result<Self, ModelError> {
        let size = regular_file(path)?;
        let file = File::open(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let mut c = Cursor { r: BufReader::new(file), at: 0, size, v1: false, values: 0 };
        Self::read_from(&mut c).map_err(|message| ModelError::Weights {
            path: path.to_path_buf(),
            message: format!("not a readable GGUF file: {message}"),
        })
    }

    fn read_from(c: &mut Cursor) -> Result<Self, String> {
        if &c.bytes::<4>()? != b"GGUF" {
            return Err("it does not start with \"GGUF\"".into());
        }
        let version = c.u32()?;
        if !(1..=3).contains(&version) {
            return Err(format!("version {version} (versions 1 to 3 are read)"));
        }
        c.v1 = version == 1;
        let (tensor_count, kv_count) = (c.length()?, c.length()?);
        if tensor_count > 1 << 30 {
            return Err(format!("tensor_count {tensor_count} exceeds the maximum of 2^30"));
        }
        // A metadata entry takes at least a key length, a type and a byte; a tensor info a name
        // length, a dimension count, a type and an offset.
        let length = if c.v1 { 4 } else { 8 };
        let needed = kv_count.saturating_mul(length + 5).saturating_add(tensor_count.saturating_mul(length + 16));
        if needed > c.left() {
            return Err(format!(
                "header declares {tensor_count} tensors and {kv_count} metadata entries, needs at least {needed} bytes, only {} remaining",
                c.left()
            ));
        }
        let mut metadata = HashMap::new();
        for _ in 0..kv_count {
            let key = c.string()?;
            let ty = c.u32()?;
            let value = c.value(ty, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(format!("metadata key \"{key}\" appears twice"));
            }
        }
        let mut infos = Vec::new();
        for _ in 0..tensor_count {
            infos.push(tensor_info(c)?);
        }
        let align = alignment(&metadata)?;
        let data = c.at.div_ceil(align).checked_mul(align).ok_or("the data offset overflows")?;
        let mut tensors = BTreeMap::new();
        for (name, dims, id, offset) in infos {
            let info = Self::checked(&name, dims, id, offset, data, align, c.size)?;
            if tensors.insert(name.clone(), info).is_some() {
                return Err(format!("tensor {name} appears twice"));
            }
        }
        Ok(Self { metadata, tensors })
    }

    /// A tensor info checked: a known type, a plausible shape of whole blocks, its bytes inside
    /// the file and aligned.
    fn checked(
        name: &str,
        dims: Vec<usize>,
        id: u32,
        offset: u64,
        data: u64,
        align: u64,
        size: u64,
    ) -> Result<TensorInfo, String> {
        let ty = TensorType::of(id).map_err(|known| {
            let named = if known.is_empty() { String::new() } else { format!("{known}, ") };
            format!("tensor {name} is of GGML type {named}id {id}, which attnviz does not read")
        })?;
        let count = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if count.is_none_or(|c| c > MAX_TENSOR_ELEMENTS) {
            return Err(format!("tensor {name} claims an implausible shape {dims:?}"));
        }
        let count = count.unwrap_or(0);
        // Candle views an empty tensor's (dangling, unaligned) buffer as blocks: undefined
        // behaviour, an abort in debug builds (found by fuzzing).
        if count == 0 {
            return Err(format!("tensor {name} has no elements (shape {dims:?})"));
        }
        let (values, block_bytes) = ty.block();
        let cols = dims.last().copied().unwrap_or(1);
        if !cols.is_multiple_of(values) {
            return Err(format!(
                "tensor {name} has rows of {cols} values, not whole {}-value blocks of {}",
                values,
                ty.name()
            ));
        }
        let bytes = count / values * block_bytes;
        if !offset.is_multiple_of(align) {
            return Err(format!("tensor {name}'s offset {offset} is not a multiple of the alignment {align}"));
        }
        let start = data.saturating_add(offset);
        let left = size.saturating_sub(start);
        if bytes as u64 > left {
            return Err(format!("tensor {name} needs {bytes} bytes at offset {start}, only {left} remaining in file"));
        }
        Ok(TensorInfo { dims, ty, start, bytes })
    }
}

/// Reads `out.len()` bytes of a tensor from `skip` bytes into it.
pub(super) fn read_bytes(
    reader: &mut BufReader<File>,
    info: &TensorInfo,
    skip: usize,
    out: &mut [u8],
) -> std::io::Result<()> {
    if skip.checked_add(out.len()).is_none_or(|end| end > info.bytes) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "a read past the tensor's bytes"));
    }
    reader.seek(SeekFrom::Start(info.start + skip as u64))?;
    reader.read_exact(out)
}

/// The tensor as f32 values (row-major, outermost dimension first): Candle dequantises its types,
/// attnviz widens MXFP4.
pub(super) fn dequantised(reader: &mut BufReader<File>, name: &str, info: &TensorInfo) -> Result<Vec<f32>, String> {
    let mut raw = vec![0u8; info.bytes];
    read_bytes(reader, info, 0, &mut raw).map_err(|e| format!("tensor {name}: {e}"))?;
    match info.ty {
        TensorType::Candle(dtype) => qtensor(dtype, &raw, &info.dims)
            .and_then(|q| q.dequantize(&Device::Cpu))
            .and_then(|t| t.flatten_all()?.to_vec1())
            .map_err(|e| format!("tensor {name}: {}", first_line(&e))),
        TensorType::Mxfp4 => {
            let cols = info.dims.last().copied().unwrap_or(1);
            let row = BlockKind::Mxfp4.row_bytes(cols).unwrap_or(0);
            let n = raw.len() / BlockKind::Mxfp4.block().1 * BlockKind::Mxfp4.block().0;
            let mut out = vec![0.0f32; n];
            super::kernels::widen(cols, 0..n, &mut out, |r| (BlockKind::Mxfp4, &raw[r * row..(r + 1) * row]));
            Ok(out)
        }
    }
}

/// A Candle `QTensor` of `dims` from its raw bytes (exactly its size: checked by [`Header::read`]).
fn qtensor(dtype: GgmlDType, raw: &[u8], dims: &[usize]) -> candle_core::Result<QTensor> {
    candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, raw, dims.to_vec(), &Device::Cpu)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    /// A GGUF file written by hand: version `version`, one metadata entry of every value type
    /// (arrays of numbers, of strings and of arrays), an F32 vector and an MXFP4 matrix.
    fn file(version: u32, alignment: Option<u32>) -> Vec<u8> {
        let v1 = version == 1;
        let mut b = Vec::new();
        let len = |b: &mut Vec<u8>, n: usize| {
            if v1 { b.extend((n as u32).to_le_bytes()) } else { b.extend((n as u64).to_le_bytes()) }
        };
        let string = |b: &mut Vec<u8>, s: &str| {
            len(b, s.len());
            b.extend(s.as_bytes());
        };
        b.extend(b"GGUF");
        b.extend(version.to_le_bytes());
        len(&mut b, 2);
        len(&mut b, 15 + usize::from(alignment.is_some()));
        let scalars: [(&str, u32, &[u8]); 12] = [
            ("u8", 0, &[200]),
            ("i8", 1, &[0xFE]),
            ("u16", 2, &[1, 2]),
            ("i16", 3, &[0xFF, 0xFF]),
            ("u32", 4, &[1, 0, 0, 1]),
            ("i32", 5, &[0xFD, 0xFF, 0xFF, 0xFF]),
            ("f32", 6, &[0, 0, 0xC0, 0x3F]),
            ("bool", 7, &[1]),
            ("u64", 10, &[1, 0, 0, 0, 0, 0, 0, 1]),
            ("i64", 11, &[0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
            ("f64", 12, &[0, 0, 0, 0, 0, 0, 0xF8, 0x3F]),
            ("bool.false", 7, &[0]),
        ];
        for (key, ty, bytes) in scalars {
            string(&mut b, key);
            b.extend(ty.to_le_bytes());
            b.extend(bytes);
        }
        string(&mut b, "string");
        b.extend(8u32.to_le_bytes());
        string(&mut b, "héllo\0");
        string(&mut b, "numbers");
        b.extend(9u32.to_le_bytes());
        b.extend(5u32.to_le_bytes());
        len(&mut b, 3);
        for n in [7i32, -8, 9] {
            b.extend(n.to_le_bytes());
        }
        // [["a", "bc"], []]
        string(&mut b, "nested");
        b.extend(9u32.to_le_bytes());
        b.extend(9u32.to_le_bytes());
        len(&mut b, 2);
        b.extend(8u32.to_le_bytes());
        len(&mut b, 2);
        string(&mut b, "a");
        string(&mut b, "bc");
        b.extend(4u32.to_le_bytes());
        len(&mut b, 0);
        if let Some(a) = alignment {
            string(&mut b, "general.alignment");
            b.extend(4u32.to_le_bytes());
            b.extend(a.to_le_bytes());
        }
        let align = u64::from(alignment.filter(|a| a.is_power_of_two()).unwrap_or(32));
        // Tensors: "v" F32 [3]; "m" MXFP4 [2 rows × 32], 64 bytes into the data.
        for (name, dims, ty, offset) in [("v", &[3u64][..], 0u32, 0u64), ("m", &[32, 2], 39, 64)] {
            string(&mut b, name);
            b.extend((dims.len() as u32).to_le_bytes());
            for &d in dims {
                len(&mut b, d as usize);
            }
            b.extend(ty.to_le_bytes());
            b.extend(offset.to_le_bytes());
        }
        b.resize((b.len() as u64).div_ceil(align) as usize * align as usize, 0);
        let data = b.len();
        for v in [1.5f32, -2.0, 0.25] {
            b.extend(v.to_le_bytes());
        }
        b.resize(data + 64, 0);
        // Two MXFP4 blocks of codes 0..15 twice: e = 127 halves ggml's doubled values (E2M1 as it
        // is), e = 128 keeps them doubled.
        for e in [127u8, 128] {
            b.push(e);
            b.extend((0..16u8).map(|i| i | (i << 4)));
        }
        b
    }

    fn read(bytes: &[u8]) -> Result<Header, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, bytes).unwrap();
        Header::read(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn every_value_type_and_both_length_widths_read_back() {
        for (version, alignment) in [(3, None), (2, Some(64)), (1, Some(16))] {
            let bytes = file(version, alignment);
            let h = read(&bytes).unwrap();
            let m = &h.metadata;
            let num = |k: &str| format!("{:?}", m[k]);
            assert_eq!(
                ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "u64", "i64", "f64", "bool.false"].map(num),
                [
                    "U8(200)",
                    "I8(-2)",
                    "U16(513)",
                    "I16(-1)",
                    "U32(16777217)",
                    "I32(-3)",
                    "F32(1.5)",
                    "Bool(true)",
                    "U64(72057594037927937)",
                    "I64(-4)",
                    "F64(1.5)",
                    "Bool(false)"
                ]
            );
            assert_eq!(num("string"), "String(\"héllo\")", "trailing NULs dropped");
            assert_eq!(num("numbers"), "Array([I32(7), I32(-8), I32(9)])");
            assert_eq!(num("nested"), "Array([Array([String(\"a\"), String(\"bc\")]), Array([])])");
            let (v, mx) = (&h.tensors["v"], &h.tensors["m"]);
            assert_eq!((v.dims.as_slice(), v.ty, v.bytes), (&[3][..], TensorType::Candle(GgmlDType::F32), 12));
            assert_eq!((mx.dims.as_slice(), mx.ty, mx.bytes), (&[2, 32][..], TensorType::Mxfp4, 34));
            assert_eq!(mx.start - v.start, 64);
            assert_eq!(v.start % u64::from(alignment.unwrap_or(32)), 0, "version {version}");
            let mut r = BufReader::new(tempfile::tempfile().unwrap());
            std::io::Write::write_all(r.get_mut(), &bytes).unwrap();
            assert_eq!(dequantised(&mut r, "v", v).unwrap(), [1.5, -2.0, 0.25]);
            let m = dequantised(&mut r, "m", mx).unwrap();
            let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
            let want: Vec<f32> = (0..2)
                .flat_map(|row| (0..32).map(move |i| (row, i % 16)))
                .map(|(row, q)| (if q < 8 { 1.0 } else { -1.0 }) * e2m1[q % 8] * if row == 0 { 1.0 } else { 2.0 })
                .collect();
            assert_eq!(m, want);
        }
    }

    #[test]
    fn bad_headers_are_named() {
        let good = file(3, None);
        let cut = |n: usize| read(&good[..n]).err().unwrap();
        assert!(cut(3).contains("ends inside its header"), "{}", cut(3));
        assert!(cut(200).contains("not a readable GGUF file"), "{}", cut(200));
        let mut b = good.clone();
        b[4] = 4;
        assert!(read(&b).err().unwrap().contains("version 4"));
        for (alignment, needle) in [(0, "general.alignment = 0"), (48, "power of two")] {
            let err = read(&file(3, Some(alignment))).err().unwrap();
            assert!(err.contains(needle), "{err}");
        }
        // An array of 2^22 + 1 bytes: more values than a header is allowed (32 bytes each in memory).
        let n = (1usize << 22) + 1;
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend([0u64, 1, 1].iter().flat_map(|v| v.to_le_bytes())); // no tensors, one entry, key length 1
        b.push(b'k');
        b.extend([9u32, 0].iter().flat_map(|v| v.to_le_bytes())); // an array of u8
        b.extend((n as u64).to_le_bytes());
        b.resize(b.len() + n, 1);
        let err = read(&b).err().unwrap();
        assert!(err.contains("more than 4194304 values"), "{err}");
        // The MXFP4 tensor's type id made 20 (IQ4_NL) and 77 (nothing).
        let at = good.windows(2).rposition(|w| w == [39, 0]).unwrap();
        for (id, needle) in [(20u8, "IQ4_NL, id 20"), (77, "of GGML type id 77")] {
            let mut b = good.clone();
            b[at] = id;
            let err = read(&b).err().unwrap();
            assert!(err.contains(needle) && err.contains("tensor m"), "{err}");
        }
    }
}
