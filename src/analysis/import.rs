//! Attention saved by other code — `attnviz dump`'s JSON and NPZ, or the same keys written from
//! Hugging Face (`output_attentions=True`), a `TransformerLens` cache or a vision transformer (see
//! the README's schema) — read into a [`Run`]. Files are untrusted: every shape is checked before
//! anything is allocated for it, at most [`MAX_VALUES`] values are read, every value must be a
//! probability and every row sum to 1.
//!
//! Keys (JSON object keys, or NPZ array names):
//! - `attentions` (required): `layers × heads × queries × keys`, float; square for
//!   self-attention, rectangular (queries ≠ keys) when the rows attend to other tokens.
//! - `tokens` (required): one label per query row.
//! - `key_tokens`: one label per key column (required when the attention is rectangular).
//! - `segments`: 0 for sentence A, 1 for sentence B, per token.
//! - `target_tokens`, `decoder_attentions` (`layers × heads × targets × targets`),
//!   `cross_attentions` (`layers × heads × targets × tokens`): an encoder–decoder's decoder side,
//!   all three or none.
//! - `model`, `intervention` (strings) and `prompt_tokens` (how many tokens were the prompt of a
//!   generated text), as `attnviz dump` writes them. Other keys are ignored.

use std::cell::Cell;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use super::cross::DecoderRun;
use super::{Attention, Run, Tokens};

/// Most attention values a file may hold, over all its arrays (1 GiB of float32).
pub const MAX_VALUES: usize = 1 << 28;
/// Most tokens along one axis.
pub const MAX_TOKENS: usize = 1 << 16;
/// Largest file read (a JSON file writes each value in ~10 bytes).
pub const MAX_FILE_BYTES: u64 = 4 << 30;
/// Most bytes of strings (token labels, names) in one file.
const MAX_STRING_BYTES: usize = 64 << 20;
/// Most arrays in an NPZ archive.
const MAX_ENTRIES: usize = 256;
/// How far a row's sum may be from 1 (float16 softmax outputs are off by ~1e-3).
const ROW_SUM_TOLERANCE: f32 = 1e-2;

/// Why an attention file cannot be shown: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct ImportError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, in words.
    pub why: String,
}

/// Whether `path` names an attention file by its extension (`.json` that is not one of a model
/// folder's files, or `.npz`).
pub fn is_attention_file(path: &Path) -> bool {
    const MODEL_JSON: [&str; 6] = [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "special_tokens_map.json",
        "model.safetensors.index.json",
    ];
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_ascii_lowercase();
    let ext = Path::new(&name).extension().and_then(|e| e.to_str()).unwrap_or_default();
    ext == "npz" || (ext == "json" && !MODEL_JSON.contains(&name.as_str()))
}

/// Reads an attention file (JSON or NPZ, by its first bytes) into a run named after the file's
/// `model` key, or the file.
pub fn read_attention_file(path: &Path) -> Result<Run, ImportError> {
    let fail = |why: String| ImportError { path: path.to_path_buf(), why };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a file".into()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(format!("{} bytes: larger than the {MAX_FILE_BYTES} bytes attnviz reads", meta.len())));
    }
    let mut file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut magic = [0u8; 2];
    let got = file.read(&mut magic).map_err(|e| fail(e.to_string()))?;
    file.rewind().map_err(|e| fail(e.to_string()))?;
    let parts = if got == 2 && &magic == b"PK" {
        read_npz(std::io::BufReader::new(file))
    } else {
        read_json(std::io::BufReader::new(file))
    }
    .map_err(&fail)?;
    let fallback = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    parts.into_run(&fallback).map_err(fail)
}

/// A float array and its shape.
#[derive(Debug, Default)]
struct Array {
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// What a file holds, before it is checked.
#[derive(Debug, Default)]
struct Parts {
    model: Option<String>,
    tokens: Option<Vec<String>>,
    key_tokens: Option<Vec<String>>,
    segments: Option<Vec<i64>>,
    attentions: Option<Array>,
    target_tokens: Option<Vec<String>>,
    decoder_attentions: Option<Array>,
    cross_attentions: Option<Array>,
    intervention: Option<String>,
    prompt_tokens: Option<i64>,
}

impl Parts {
    /// Checks everything and builds the run.
    fn into_run(self, fallback_name: &str) -> Result<Run, String> {
        let attentions = self.attentions.ok_or("no `attentions` (layers × heads × queries × keys) in the file")?;
        let tokens = self.tokens.ok_or("no `tokens` (one label per query row) in the file")?;
        let (attention, n, m) = checked_attention("attentions", attentions)?;
        if tokens.len() != n {
            return Err(format!("`tokens` has {} labels for {n} query rows of `attentions`", tokens.len()));
        }
        let key_tokens = match self.key_tokens {
            Some(keys) if keys.len() != m => {
                return Err(format!("`key_tokens` has {} labels for {m} key columns of `attentions`", keys.len()));
            }
            Some(keys) if m != n => Some(keys),
            None if m != n => {
                return Err(format!(
                    "`attentions` has {n} query rows and {m} key columns: give `key_tokens`, one label per key"
                ));
            }
            _ => None,
        };
        let segments = match self.segments {
            None => vec![0; n],
            Some(s) if s.len() != n => return Err(format!("`segments` has {} values for {n} tokens", s.len())),
            Some(s) => s
                .into_iter()
                .map(|v| u8::try_from(v).ok().filter(|&v| v <= 1).ok_or(format!("`segments` holds {v}: only 0 and 1")))
                .collect::<Result<_, _>>()?,
        };
        let prompt_len = match self.prompt_tokens {
            None => None,
            Some(p) => Some(
                usize::try_from(p)
                    .ok()
                    .filter(|&p| p >= 1 && p <= n)
                    .ok_or(format!("`prompt_tokens` is {p}: it must be between 1 and the {n} tokens"))?,
            ),
        };
        let decoder = match (self.target_tokens, self.decoder_attentions, self.cross_attentions) {
            (None, None, None) => None,
            (Some(targets), Some(dec), Some(cross)) => {
                if m != n {
                    return Err("a decoder side needs the encoder's square self-attention in `attentions`".into());
                }
                let (dec, t, t2) = checked_attention("decoder_attentions", dec)?;
                let (cross, ct, cs) = checked_attention("cross_attentions", cross)?;
                if t != t2 || targets.len() != t {
                    return Err(format!(
                        "`decoder_attentions` must be targets × targets for the {} `target_tokens`, got {t} × {t2}",
                        targets.len()
                    ));
                }
                if ct != t || cs != n || cross.layers() != dec.layers() || cross.heads() != dec.heads() {
                    return Err(format!(
                        "`cross_attentions` must be {} × {} × {t} targets × {n} source tokens, got {} × {} × {ct} × {cs}",
                        dec.layers(),
                        dec.heads(),
                        cross.layers(),
                        cross.heads()
                    ));
                }
                let special = targets.iter().enumerate().map(|(i, t)| i == 0 || looks_special(t)).collect();
                let tokens = labelled(targets, special);
                Some(DecoderRun { tokens, attention: dec, cross, last_hidden: Vec::new(), truncation: None })
            }
            _ => {
                return Err("an encoder–decoder's side needs all three of `target_tokens`, `decoder_attentions` and \
                     `cross_attentions`"
                    .into());
            }
        };
        let causal = attention.is_square() && is_lower_triangular(&attention);
        let special = tokens.iter().map(|t| looks_special(t)).collect();
        let mut tokens = labelled(tokens, special);
        tokens.segments = segments;
        let key_tokens = key_tokens.map(|k| {
            let special = k.iter().map(|t| looks_special(t)).collect();
            labelled(k, special)
        });
        Ok(Run {
            model_name: self.model.filter(|m| !m.trim().is_empty()).unwrap_or_else(|| fallback_name.to_string()),
            tokens,
            attention,
            sinks: None,
            neuron: None,
            last_hidden: Vec::new(),
            truncation: None,
            intervention: self.intervention.filter(|i| !i.is_empty()),
            playground: false,
            causal,
            window: None,
            sliding_layers: Vec::new(),
            prompt_len,
            decoder,
            key_tokens,
            stack: None,
            long: None,
        })
    }
}

/// Tokens from labels. A file has no vocabulary: each distinct label gets an id of its own (the
/// first position it appears at), so that what compares token identity — duplicate-token and
/// induction scores — works on the labels.
fn labelled(tokens: Vec<String>, special: Vec<bool>) -> Tokens {
    let n = tokens.len();
    let mut first = std::collections::HashMap::new();
    let ids = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| *first.entry(t.as_str()).or_insert(u32::try_from(i).unwrap_or(u32::MAX)))
        .collect();
    Tokens { tokens, ids, segments: vec![0; n], type_ids: vec![0; n], special }
}

/// `[CLS]`, `</s>`, `<|endoftext|>`: the labels tokenizers give their special tokens.
fn looks_special(label: &str) -> bool {
    label.len() > 2
        && ((label.starts_with('[') && label.ends_with(']')) || (label.starts_with('<') && label.ends_with('>')))
        && !label.contains(' ')
}

/// Whether every value above the diagonal is zero (a causal model's masked triangle).
fn is_lower_triangular(a: &Attention) -> bool {
    let n = a.seq_len();
    n > 1 && a.as_slice().chunks(n * n).all(|m| (0..n).all(|q| m[q * n + q + 1..(q + 1) * n].iter().all(|&v| v == 0.0)))
}

/// A 4-D array of probabilities whose rows sum to 1, as an [`Attention`] with its rows and columns.
fn checked_attention(name: &str, array: Array) -> Result<(Attention, usize, usize), String> {
    let shape = &array.shape;
    let text = shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(" × ");
    let &[layers, heads, n, m] = shape.as_slice() else {
        return Err(format!(
            "`{name}` must have 4 dimensions (layers × heads × queries × keys), got {} ({text}); drop a batch \
             dimension with [0] or .squeeze(1)",
            shape.len()
        ));
    };
    if shape.contains(&0) {
        return Err(format!("`{name}` is empty ({text})"));
    }
    if n > MAX_TOKENS || m > MAX_TOKENS {
        return Err(format!("`{name}` is {text}: more than the {MAX_TOKENS} tokens attnviz shows"));
    }
    for (i, row) in array.data.chunks(m).enumerate() {
        let (l, h, q) = (i / (heads * n), i / n % heads, i % n);
        if let Some(v) = row.iter().find(|v| !(v.is_finite() && (-1e-6..=1.0 + 1e-3).contains(*v))) {
            return Err(format!("`{name}`[{l}][{h}][{q}] holds {v}: attention weights are probabilities (0 to 1)"));
        }
        let sum: f32 = row.iter().sum();
        if (sum - 1.0).abs() > ROW_SUM_TOLERANCE {
            return Err(format!(
                "`{name}`[{l}][{h}][{q}] sums to {sum}, not 1: attention rows are softmax outputs (queries are \
                 rows, keys columns)"
            ));
        }
    }
    let attention = Attention::rectangular(layers, heads, n, m, array.data).map_err(|e| format!("`{name}`: {e}"))?;
    Ok((attention, n, m))
}

/// The values still allowed, shared by every array of a file.
struct Budget(Cell<usize>);

impl Budget {
    fn take(&self, count: usize, name: &str) -> Result<(), String> {
        let left = self.0.get();
        if count > left {
            return Err(format!("`{name}`: more than the {MAX_VALUES} attention values attnviz reads from one file"));
        }
        self.0.set(left - count);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// JSON

/// Reads a JSON attention file: one object; the arrays are flattened as they are parsed (a ragged
/// or over-long array is refused without holding more than the budget).
fn read_json(reader: impl Read) -> Result<Parts, String> {
    let budget = Budget(Cell::new(MAX_VALUES));
    let strings = Cell::new(MAX_STRING_BYTES);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parts = serde::de::Deserializer::deserialize_map(&mut de, PartsVisitor { budget: &budget, strings: &strings })
        .map_err(|e| format!("not an attention file in attnviz's JSON: {e}"))?;
    de.end().map_err(|e| format!("not an attention file in attnviz's JSON: {e}"))?;
    Ok(parts)
}

struct PartsVisitor<'a> {
    budget: &'a Budget,
    strings: &'a Cell<usize>,
}

impl<'de> serde::de::Visitor<'de> for PartsVisitor<'_> {
    type Value = Parts;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object with `attentions` and `tokens`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Parts, A::Error> {
        use serde::de::Error;
        let mut parts = Parts::default();
        let strings = StringsSeed(self.strings);
        while let Some(key) = map.next_key::<String>()? {
            let array = |name: &str| FlatSeed { name: name.to_string(), budget: self.budget };
            match key.as_str() {
                "model" => parts.model = map.next_value_seed(OptionalString(self.strings))?,
                "intervention" => parts.intervention = map.next_value_seed(OptionalString(self.strings))?,
                "tokens" => parts.tokens = Some(map.next_value_seed(strings)?),
                "key_tokens" => parts.key_tokens = Some(map.next_value_seed(strings)?),
                "target_tokens" => parts.target_tokens = Some(map.next_value_seed(strings)?),
                "segments" => {
                    let values: Vec<i64> = map.next_value()?;
                    if values.len() > MAX_TOKENS {
                        return Err(A::Error::custom("`segments`: more values than tokens attnviz shows"));
                    }
                    parts.segments = Some(values);
                }
                "prompt_tokens" => parts.prompt_tokens = Some(map.next_value()?),
                "attentions" => parts.attentions = Some(map.next_value_seed(array("attentions"))?),
                "decoder_attentions" => {
                    parts.decoder_attentions = Some(map.next_value_seed(array("decoder_attentions"))?);
                }
                "cross_attentions" => parts.cross_attentions = Some(map.next_value_seed(array("cross_attentions"))?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(parts)
    }
}

/// A list of strings whose total length counts against the file's string budget.
#[derive(Clone, Copy)]
struct StringsSeed<'a>(&'a Cell<usize>);

impl<'de> serde::de::DeserializeSeed<'de> for StringsSeed<'_> {
    type Value = Vec<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        struct V<'a>(&'a Cell<usize>);
        impl<'de> serde::de::Visitor<'de> for V<'_> {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of token labels (strings)")
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Vec<String>, S::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element_seed(OptionalString(self.0))? {
                    let s = s.ok_or_else(|| serde::de::Error::custom("a token label is null"))?;
                    if out.len() >= MAX_TOKENS {
                        return Err(serde::de::Error::custom(format!("more than {MAX_TOKENS} token labels")));
                    }
                    out.push(s);
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V(self.0))
    }
}

/// A string (or null) counted against the string budget.
struct OptionalString<'a>(&'a Cell<usize>);

impl<'de> serde::de::DeserializeSeed<'de> for OptionalString<'_> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        let s: Option<String> = serde::Deserialize::deserialize(d)?;
        let len = s.as_ref().map_or(0, String::len);
        let left = self.0.get();
        if len > left {
            return Err(serde::de::Error::custom(format!("more than {MAX_STRING_BYTES} bytes of text")));
        }
        self.0.set(left - len);
        Ok(s)
    }
}

/// A nested array of numbers of any depth, flattened as it is parsed; every level must have the
/// same length everywhere (no ragged arrays).
struct FlatSeed<'a> {
    name: String,
    budget: &'a Budget,
}

/// Where [`Level`] writes: the values, the length of each level (as first seen), the leaf depth.
struct Flat<'a> {
    name: &'a str,
    budget: &'a Budget,
    data: Vec<f32>,
    shape: Vec<Option<usize>>,
    leaf_depth: Option<usize>,
}

/// Deepest nesting read.
const MAX_DEPTH: usize = 6;

impl<'de> serde::de::DeserializeSeed<'de> for FlatSeed<'_> {
    type Value = Array;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Array, D::Error> {
        use serde::de::Error;
        let mut flat =
            Flat { name: &self.name, budget: self.budget, data: Vec::new(), shape: Vec::new(), leaf_depth: None };
        serde::de::DeserializeSeed::deserialize(Level { flat: &mut flat, depth: 0 }, d)?;
        let Some(depth) = flat.leaf_depth else {
            return Err(D::Error::custom(format!("`{}` holds no numbers", self.name)));
        };
        let shape: Vec<usize> = flat.shape[..depth].iter().map(|s| s.unwrap_or(0)).collect();
        Ok(Array { shape, data: flat.data })
    }
}

/// One level of a nested array.
struct Level<'a, 'b> {
    flat: &'a mut Flat<'b>,
    depth: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for Level<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Level<'_, '_> {
    fn leaf<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        let f = self.flat;
        match f.leaf_depth {
            None => f.leaf_depth = Some(self.depth),
            Some(d) if d != self.depth => {
                return Err(E::custom(format!("`{}` is ragged: numbers at different depths", f.name)));
            }
            Some(_) => {}
        }
        f.budget.take(1, f.name).map_err(E::custom)?;
        #[allow(clippy::cast_possible_truncation)] // attention is float32
        f.data.push(v as f32);
        Ok(())
    }
}

impl<'de> serde::de::Visitor<'de> for Level<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("nested lists of numbers")
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.leaf(v)
    }

    #[allow(clippy::cast_precision_loss)] // 0 and 1 written as integers
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.leaf(v as f64)
    }

    #[allow(clippy::cast_precision_loss)]
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.leaf(v as f64)
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        use serde::de::Error;
        let Level { flat, depth } = self;
        if depth >= MAX_DEPTH {
            return Err(S::Error::custom(format!("`{}` is nested deeper than {MAX_DEPTH} levels", flat.name)));
        }
        if flat.leaf_depth.is_some_and(|d| d <= depth) {
            return Err(S::Error::custom(format!("`{}` is ragged: numbers at different depths", flat.name)));
        }
        let mut count = 0;
        while seq.next_element_seed(Level { flat: &mut *flat, depth: depth + 1 })?.is_some() {
            count += 1;
        }
        if flat.shape.len() <= depth {
            flat.shape.resize(depth + 1, None);
        }
        match flat.shape[depth] {
            None => flat.shape[depth] = Some(count),
            Some(c) if c != count => {
                return Err(S::Error::custom(format!(
                    "`{}` is ragged: lists of {c} and of {count} items at depth {depth}",
                    flat.name
                )));
            }
            Some(_) => {}
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// NPZ

/// Reads an NPZ archive's known arrays (stored or deflated), each checked before it is read.
fn read_npz<R: Read + Seek>(reader: R) -> Result<Parts, String> {
    let mut zip = zip::ZipArchive::new(reader).map_err(|e| format!("not a NumPy .npz archive: {e}"))?;
    if zip.len() > MAX_ENTRIES {
        return Err(format!("{} arrays in the archive: more than the {MAX_ENTRIES} attnviz reads", zip.len()));
    }
    let budget = Budget(Cell::new(MAX_VALUES));
    let mut strings = MAX_STRING_BYTES;
    let mut parts = Parts::default();
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i).map_err(|e| format!("archive entry {i}: {e}"))?;
        let name = entry.name().strip_suffix(".npy").unwrap_or(entry.name()).to_string();
        let known = [
            "attentions",
            "tokens",
            "key_tokens",
            "segments",
            "target_tokens",
            "decoder_attentions",
            "cross_attentions",
            "model",
            "intervention",
            "prompt_tokens",
        ];
        if !known.contains(&name.as_str()) {
            continue;
        }
        let mut data: Box<dyn Read> = match entry.compression() {
            zip::CompressionMethod::Stored => Box::new(entry),
            zip::CompressionMethod::DEFLATE => Box::new(flate2::read::DeflateDecoder::new(entry)),
            other => return Err(format!("`{name}`: compressed with {other}, which attnviz does not read")),
        };
        let npy = read_npy_header(&mut data).map_err(|e| format!("`{name}`: {e}"))?;
        match name.as_str() {
            "attentions" | "decoder_attentions" | "cross_attentions" => {
                let array = read_floats(&mut data, &npy, &name, &budget)?;
                match name.as_str() {
                    "attentions" => parts.attentions = Some(array),
                    "decoder_attentions" => parts.decoder_attentions = Some(array),
                    _ => parts.cross_attentions = Some(array),
                }
            }
            "tokens" | "key_tokens" | "target_tokens" | "model" | "intervention" => {
                let list = read_strings(&mut data, &npy, &name, &mut strings)?;
                match name.as_str() {
                    "tokens" => parts.tokens = Some(list),
                    "key_tokens" => parts.key_tokens = Some(list),
                    "target_tokens" => parts.target_tokens = Some(list),
                    "model" => parts.model = list.into_iter().next(),
                    _ => parts.intervention = list.into_iter().next(),
                }
            }
            _ => {
                let ints = read_ints(&mut data, &npy, &name)?;
                if name == "segments" {
                    parts.segments = Some(ints);
                } else {
                    parts.prompt_tokens =
                        Some(*ints.first().ok_or("`prompt_tokens` is empty: write one number".to_string())?);
                }
            }
        }
    }
    Ok(parts)
}

/// A `.npy` header: element type and shape.
#[derive(Debug)]
struct NpyHeader {
    descr: String,
    shape: Vec<usize>,
}

impl NpyHeader {
    /// The number of elements, if it does not overflow.
    fn count(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
}

/// Reads the magic, version and header dictionary of an `.npy` array.
fn read_npy_header(r: &mut impl Read) -> Result<NpyHeader, String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(|e| format!("not a .npy array: {e}"))?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err("not a .npy array (no \\x93NUMPY magic)".into());
    }
    let len = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).map_err(|e| e.to_string())?;
            usize::from(u16::from_le_bytes(b))
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).map_err(|e| e.to_string())?;
            u32::from_le_bytes(b) as usize
        }
        v => return Err(format!(".npy format version {v}, which attnviz does not read")),
    };
    if len > 1 << 16 {
        return Err(format!("a .npy header of {len} bytes"));
    }
    let mut header = vec![0u8; len];
    r.read_exact(&mut header).map_err(|e| format!("the .npy header: {e}"))?;
    let header = String::from_utf8_lossy(&header);
    let field = |key: &str| -> Option<&str> {
        let start = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or("the .npy header has no 'descr'")?
        .to_string();
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err("saved in Fortran order: save np.ascontiguousarray(a) instead".into());
    }
    let shape_text = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or("the .npy header has no 'shape'")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>().map_err(|_| format!("shape ({shape_text}) is not a shape")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NpyHeader { descr, shape })
}

/// Reads exactly `count × size` bytes (the count checked by the caller).
fn read_bytes(r: &mut impl Read, count: usize, size: usize, name: &str) -> Result<Vec<u8>, String> {
    let bytes = count.checked_mul(size).ok_or(format!("`{name}` is too large"))?;
    let mut buf = Vec::new();
    r.take(bytes as u64).read_to_end(&mut buf).map_err(|e| format!("`{name}`: {e}"))?;
    if buf.len() != bytes {
        return Err(format!("`{name}` is cut short: {} of {bytes} bytes", buf.len()));
    }
    Ok(buf)
}

/// A float array (float16, float32 or float64, little-endian) as float32.
fn read_floats(r: &mut impl Read, npy: &NpyHeader, name: &str, budget: &Budget) -> Result<Array, String> {
    let count = npy.count().ok_or(format!("`{name}`: shape {:?} is too large", npy.shape))?;
    budget.take(count, name)?;
    let size = match npy.descr.as_str() {
        "<f2" => 2,
        "<f4" => 4,
        "<f8" => 8,
        other => {
            return Err(format!(
                "`{name}` holds {other}: attnviz reads little-endian floats (float16, float32, float64)"
            ));
        }
    };
    let bytes = read_bytes(r, count, size, name)?;
    #[allow(clippy::cast_possible_truncation)] // attention is float32
    let data = match size {
        2 => bytes.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
        4 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        _ => bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32).collect(),
    };
    Ok(Array { shape: npy.shape.clone(), data })
}

/// An IEEE half-precision value as f32.
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: renormalise.
            let shift = f.leading_zeros() - 21;
            sign | ((127 - 15 + 1 - shift) << 23) | ((f << shift) & 0x3ff) << 13
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 127 - 15) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// An integer array (int8 to int64, unsigned bytes, booleans) as i64.
fn read_ints(r: &mut impl Read, npy: &NpyHeader, name: &str) -> Result<Vec<i64>, String> {
    let count = npy.count().filter(|&c| c <= MAX_TOKENS).ok_or(format!("`{name}`: more values than tokens"))?;
    let size = match npy.descr.as_str() {
        "|i1" | "|u1" | "|b1" => 1,
        "<i2" => 2,
        "<i4" => 4,
        "<i8" => 8,
        other => return Err(format!("`{name}` holds {other}: attnviz reads little-endian integers")),
    };
    let bytes = read_bytes(r, count, size, name)?;
    Ok(bytes
        .chunks_exact(size)
        .map(|b| match (size, npy.descr.as_str()) {
            (1, "|i1") => i64::from(i8::from_le_bytes([b[0]])),
            (1, _) => i64::from(b[0]),
            (2, _) => i64::from(i16::from_le_bytes([b[0], b[1]])),
            (4, _) => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => i64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
        })
        .collect())
}

/// A 1-D (or 0-D) array of unicode strings (`<U{width}`, UTF-32) or bytes (`|S{width}`).
fn read_strings(r: &mut impl Read, npy: &NpyHeader, name: &str, left: &mut usize) -> Result<Vec<String>, String> {
    if npy.shape.len() > 1 {
        return Err(format!("`{name}` must be a list of strings, got shape {:?}", npy.shape));
    }
    let count = npy.count().filter(|&c| c <= MAX_TOKENS).ok_or(format!("`{name}`: more than {MAX_TOKENS} labels"))?;
    let descr = npy.descr.as_str();
    let (unit, width) = if let Some(w) = descr.strip_prefix("<U") {
        (4, w.parse::<usize>().ok())
    } else if let Some(w) = descr.strip_prefix("|S") {
        (1, w.parse::<usize>().ok())
    } else if descr == "|O" {
        return Err(format!(
            "`{name}` is a NumPy object array (pickled), which attnviz does not read: save np.array(labels, dtype=str)"
        ));
    } else {
        return Err(format!("`{name}` holds {descr}: attnviz reads strings (dtype=str)"));
    };
    let width = width.ok_or(format!("`{name}`: {descr} is not a string type"))?;
    let bytes_each = width.checked_mul(unit).ok_or(format!("`{name}` is too large"))?;
    let total = count.checked_mul(bytes_each).filter(|&t| t <= *left).ok_or(format!("`{name}`: too much text"))?;
    *left -= total;
    let bytes = read_bytes(r, count, bytes_each, name)?;
    let strings = bytes
        .chunks_exact(bytes_each.max(1))
        .take(count)
        .map(|b| {
            if unit == 4 {
                b.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .take_while(|&c| c != 0)
                    .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
                    .collect()
            } else {
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                String::from_utf8_lossy(&b[..end]).into_owned()
            }
        })
        .collect::<Vec<String>>();
    // A width of 0 (all empty strings) has no bytes to chunk.
    Ok(if bytes_each == 0 { vec![String::new(); count] } else { strings })
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values on purpose
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_json_file_becomes_a_run_and_causal_files_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "a.json",
            r#"{"tokens": ["[CLS]", "hi", "[SEP]"], "attentions": [[[[1,0,0],[0.5,0.5,0],[0.2,0.3,0.5]]]], "x": {"y": 1}}"#,
        );
        let run = read_attention_file(&path).unwrap();
        assert_eq!(run.model_name, "a.json");
        assert_eq!((run.attention.layers(), run.attention.heads(), run.attention.seq_len()), (1, 1, 3));
        assert_eq!(run.attention.get(0, 0, 2, 1), 0.3);
        assert!(run.causal, "an all-zero upper triangle is a causal mask");
        assert_eq!(run.tokens.special, [true, false, true]);
        assert_eq!(run.tokens.ids, [0, 1, 2]);
        let path =
            write(dir.path(), "b.json", r#"{"tokens": ["a", "b", "a"], "attentions": [[[[1,0,0],[0,1,0],[0,0,1]]]]}"#);
        assert_eq!(read_attention_file(&path).unwrap().tokens.ids, [0, 1, 0], "a label's id is its first position");
    }

    #[test]
    fn bad_json_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (r#"{"tokens": ["a"]}"#, "no `attentions`"),
            (r#"{"tokens": ["a", "b"], "attentions": [[[[1]]]]}"#, "2 labels for 1 query rows"),
            (r#"{"tokens": ["a", "b"], "attentions": [[[[1, 0], [1]]]]}"#, "ragged"),
            (r#"{"tokens": ["a", "b"], "attentions": [[[0.5, 0.5], [0.5, 0.5]]]}"#, "4 dimensions"),
            (r#"{"tokens": ["a", "b"], "attentions": [[[[0.9, 0.9], [0.5, 0.5]]]]}"#, "sums to 1.8"),
            (r#"{"tokens": ["a"], "attentions": [[[[2]]]]}"#, "probabilities"),
            (r#"{"tokens": ["a"], "attentions": [[[["x"]]]]}"#, "nested lists of numbers"),
            (r#"{"tokens": ["a", "b"], "attentions": [[[[1, 0, 0], [0, 1, 0]]]]}"#, "key_tokens"),
            ("[1, 2]", "not an attention file"),
            (r#"{"tokens": ["a"], "attentions": [[[[1]]]]"#, "not an attention file"),
        ];
        for (text, needle) in cases {
            let path = write(dir.path(), "bad.json", text);
            let err = read_attention_file(&path).unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("bad.json"), "{text}: {err}");
        }
    }

    #[test]
    fn npz_arrays_and_half_floats_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let tokens = vec!["patch 0,0".to_string(), "patch 0,1".to_string()];
        let values = [0.25f32, 0.75, 1.0, 0.0];
        let stored = dir.path().join("s.npz");
        let file = std::fs::File::create(&stored).unwrap();
        super::super::npz::write_npz(
            file,
            &[
                ("attentions", super::super::npz::NpyArray::F32 { shape: vec![1, 1, 2, 2], data: &values }),
                ("tokens", super::super::npz::NpyArray::Str(&tokens)),
            ],
        )
        .unwrap();
        let run = read_attention_file(&stored).unwrap();
        assert_eq!(run.attention.as_slice(), values);
        assert_eq!(run.tokens.tokens, tokens);
        // float16 values and byte-string labels (deflated archives are read in tests/import.rs,
        // written by NumPy's savez_compressed).
        let halves_path = dir.path().join("h.npz");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&halves_path).unwrap());
        let npy = |descr: &str, shape: &str, body: &[u8]| {
            let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
            header.push_str(&" ".repeat((64 - (10 + header.len() + 1) % 64) % 64));
            header.push('\n');
            let mut out = b"\x93NUMPY\x01\x00".to_vec();
            out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(body);
            out
        };
        let halves: Vec<u8> = [0x3400u16, 0x3a00, 0x3c00, 0x0000].iter().flat_map(|h| h.to_le_bytes()).collect();
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("attentions.npy", options).unwrap();
        zip.write_all(&npy("<f2", "(1, 1, 2, 2)", &halves)).unwrap();
        zip.start_file("tokens.npy", options).unwrap();
        zip.write_all(&npy("|S2", "(2,)", b"aab\0")).unwrap();
        zip.finish().unwrap();
        let run = read_attention_file(&halves_path).unwrap();
        assert_eq!(run.attention.as_slice(), [0.25, 0.75, 1.0, 0.0]);
        assert_eq!(run.tokens.tokens, ["aa", "b"]);
    }

    #[test]
    fn half_floats_convert_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x3800), 0.5);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert!(f16_to_f32(0x7c00).is_infinite());
    }
}
