//! Files from untrusted model folders, read within limits: bounded reads of regular files (a device,
//! pipe or folder refused by name), size limits, the memory a load may use, safetensors headers
//! checked before their data is read, and the error text helpers the readers share. A leaf: the
//! folder loader ([`super::loader`]), GGUF reader ([`super::gguf`]), hub cache ([`super::hub`]) and
//! tokenizer ([`super::tokenize`]) all read through it, and it imports none of them.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::ModelError;
use super::describe::Description;
use super::families;

/// Largest `config.json`, `generation_config.json` or `model.safetensors.index.json` read: real ones
/// are a few kilobytes (a 70B model's index is about 60 KB).
pub const MAX_JSON_BYTES: u64 = 16 << 20;
/// Largest `tokenizer.json` read: the largest real ones (multilingual vocabularies) are about 35 MB.
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest safetensors header (the `safetensors` crate's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The length of a regular file; a device (`/dev/zero`), pipe or folder is refused before it is
/// opened (reading one would never end, or opening it would wait for a writer).
pub fn regular_file(path: &Path) -> Result<u64, ModelError> {
    let meta = std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    if !meta.is_file() {
        return Err(ModelError::Refused {
            path: path.to_path_buf(),
            message: "not a regular file (a device, pipe or folder)".into(),
        });
    }
    Ok(meta.len())
}

/// Reads a regular file of at most `max` bytes; a larger one is refused before it is read.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ModelError> {
    let too_big = |len: u64| ModelError::Refused {
        path: path.to_path_buf(),
        message: format!("it is {len} bytes; the limit for this file is {max} bytes"),
    };
    let len = regular_file(path)?;
    if len > max {
        return Err(too_big(len));
    }
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(len as usize);
    // `take`: a file that grows while it is read still stops at the limit.
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A safetensors file's header checked before its data is read: the header length against the
/// file, every tensor's shape against [`families::MAX_TENSOR_ELEMENTS`] and its `data_offsets`
/// against the data that follows. Returns the file's length. (The `safetensors` crate checks the
/// rest — dtypes, sizes matching shapes, no gaps — once the file is read.)
pub(crate) fn checked_safetensors_header(path: &Path) -> Result<u64, ModelError> {
    use serde_json::Value;
    let bad = |message: String| ModelError::Weights { path: path.to_path_buf(), message };
    let io = |source| ModelError::Io { path: path.to_path_buf(), source };
    let len = regular_file(path)?;
    if len < 8 {
        return Err(bad(format!("the file is {len} bytes, too short for a safetensors header")));
    }
    let mut file = File::open(path).map_err(io)?;
    let mut prefix = [0u8; 8];
    file.read_exact(&mut prefix).map_err(io)?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER_BYTES || header_len > len - 8 {
        return Err(bad(format!(
            "the header length field says {header_len} bytes, but the file has {} bytes after it (and the limit is {MAX_HEADER_BYTES})",
            len - 8
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io)?;
    let data_len = len - 8 - header_len;
    let parsed: Value = serde_json::from_slice(&header).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
    let Value::Object(entries) = parsed else { return Err(bad("the header is not a JSON object".into())) };
    let numbers = |v: Option<&Value>| -> Option<Vec<u64>> { v?.as_array()?.iter().map(Value::as_u64).collect() };
    let mut data_end = 0;
    for (name, entry) in entries.iter().filter(|(name, _)| *name != "__metadata__") {
        let Some(shape) = numbers(entry.get("shape")) else {
            return Err(bad(format!("tensor {name} has no shape (a list of whole numbers)")));
        };
        let count = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if count.is_none_or(|c| c > families::MAX_TENSOR_ELEMENTS as u64) {
            return Err(bad(format!("tensor {name} claims an implausible shape {shape:?}")));
        }
        let offsets = numbers(entry.get("data_offsets"));
        let Some(&[begin, end]) = offsets.as_deref() else {
            return Err(bad(format!("tensor {name} has no data_offsets [begin, end]")));
        };
        if begin > end || end > data_len {
            return Err(bad(format!(
                "tensor {name}: data_offsets [{begin}, {end}] point past the end of the file's {data_len} bytes of data"
            )));
        }
        data_end = data_end.max(end);
    }
    if data_end != data_len {
        return Err(bad(format!(
            "the file has {data_len} bytes of data, but its tensors end at byte {data_end} (a safetensors file ends with its last tensor)"
        )));
    }
    Ok(len)
}

/// Refuses, before anything is read, a model whose weights as f32 (how the engine holds them, GGUF
/// dequantised) plus the weight files read alongside would not fit in the memory available.
/// Refused rather than warned about: past `MemAvailable` the load is either killed by the kernel
/// (taking the app and its state with it) or pushes the desktop into swap for minutes, and the
/// error keeps the model already open; `ATTNVIZ_MAX_MEMORY_GB` overrides the limit.
pub fn check_memory(what: &Path, desc: &Description, file_bytes: u64) -> Result<(), ModelError> {
    check_memory_of(what, (super::engine::weight_bytes(desc), "as f32"), file_bytes)
}

/// [`check_memory`] for weights held in `weight_bytes` bytes (`held` says how: a GGUF file's
/// weights kept in their blocks take about the file's size, not f32's).
pub fn check_memory_of(
    what: &Path,
    (weight_bytes, held): (u64, &'static str),
    file_bytes: u64,
) -> Result<(), ModelError> {
    let Some((available_bytes, from_env)) = crate::alloc::memory_budget() else { return Ok(()) };
    let needed_bytes = weight_bytes.saturating_add(file_bytes);
    if needed_bytes <= available_bytes {
        return Ok(());
    }
    Err(ModelError::OutOfMemory {
        what: what.display().to_string(),
        needed_bytes,
        weight_bytes,
        held,
        file_bytes,
        available_bytes,
        from_env,
    })
}

/// Whether a folder entry is there at all (a file, or a link to a device or pipe that
/// [`regular_file`] refuses by name, rather than reading as missing).
pub(crate) fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// A Candle error's message without the backtrace it carries when `RUST_BACKTRACE` is set.
pub(crate) fn first_line(e: &candle_core::Error) -> String {
    // Without the backtrace Candle captures when RUST_BACKTRACE is set: formatting it would
    // resolve every frame's symbols (tens of MB and a third of a second) for a line dropped.
    let mut e = e;
    while let candle_core::Error::WithBacktrace { inner, .. } = e {
        e = inner;
    }
    e.to_string().lines().next().unwrap_or_default().to_string()
}
