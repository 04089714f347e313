//! `attnviz dump`: every layer's and head's attention for one input, as JSON or NPZ.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::analysis::npz::{NpyArray, write_npz};
use crate::analysis::{Attention, Run};
use crate::atomic::write_atomic;

/// Output format of `dump`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DumpFormat {
    /// `{"model", "tokens", "segments", "attentions": [layer][head][query][key]}`.
    Json,
    /// `NumPy` archive: `attentions` (float32, L×H×n×n), `tokens`, `segments`.
    Npz,
}

/// `attnviz dump` arguments.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The sentence (A).
    #[arg(long)]
    pub text: String,
    /// An optional second sentence (B), making a sentence pair.
    #[arg(long)]
    pub text_pair: Option<String>,
    /// For an encoder–decoder: the target the decoder reads (after its start token), adding
    /// target_tokens, decoder_attentions and cross_attentions to the dump.
    #[arg(long)]
    pub target: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DumpFormat::Json)]
    pub format: DumpFormat,
    /// Output file (`-` writes JSON to standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// The JSON document `dump` writes.
#[derive(Serialize)]
pub struct DumpJson<'a> {
    model: &'a str,
    /// For GGUF weights: what they were ("GGUF Q4_1 (210), …, dequantised to f32").
    #[serde(skip_serializing_if = "Option::is_none")]
    quantization: Option<&'a str>,
    tokens: &'a [String],
    segments: &'a [u8],
    attentions: crate::analysis::attention::Nested<'a>,
    /// Only for a modified run: how it was modified.
    #[serde(skip_serializing_if = "Option::is_none")]
    intervention: Option<&'a str>,
    /// An encoder–decoder's decoder input (start token first).
    #[serde(skip_serializing_if = "Option::is_none")]
    target_tokens: Option<&'a [String]>,
    /// Decoder self-attention, `[layer][head][target][target]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    decoder_attentions: Option<crate::analysis::attention::Nested<'a>>,
    /// Cross-attention, `[layer][head][target][source]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    cross_attentions: Option<crate::analysis::cross::NestedCross<'a>>,
}

impl<'a> DumpJson<'a> {
    /// The dump of a run (with its decoder side when it has one).
    pub fn of(run: &'a Run, quantization: Option<&'a str>) -> Self {
        let decoder = run.decoder.as_ref();
        Self {
            model: &run.model_name,
            quantization,
            tokens: &run.tokens.tokens,
            segments: &run.tokens.segments,
            attentions: run.attention.nested(),
            intervention: run.intervention.as_deref(),
            target_tokens: decoder.map(|d| d.tokens.tokens.as_slice()),
            decoder_attentions: decoder.map(|d| d.attention.nested()),
            cross_attentions: decoder.map(|d| d.cross.nested()),
        }
    }
}

/// Writes `value` as JSON to `path` atomically, or to stdout for `-`.
pub fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, value)?;
        writeln!(out)?;
        return Ok(());
    }
    write_atomic(path, |w| serde_json::to_writer(w, value).map_err(std::io::Error::other))?;
    Ok(())
}

/// Writes a run as an NPZ archive.
pub fn write_run_npz(path: &Path, run: &Run) -> anyhow::Result<()> {
    let a: &Attention = &run.attention;
    let n = a.seq_len();
    let intervention: Vec<String> = run.intervention.iter().cloned().collect();
    write_atomic(path, |w| {
        let mut cursor = std::io::Cursor::new(Vec::new());
        let mut arrays = vec![
            ("attentions", NpyArray::F32 { shape: vec![a.layers(), a.heads(), n, n], data: a.as_slice() }),
            ("tokens", NpyArray::Str(&run.tokens.tokens)),
            (
                "segments",
                NpyArray::I64 { shape: vec![n], data: run.tokens.segments.iter().map(|&s| i64::from(s)).collect() },
            ),
        ];
        if !intervention.is_empty() {
            arrays.push(("intervention", NpyArray::Str(&intervention)));
        }
        if let Some(p) = run.prompt_len {
            arrays.push(("prompt_tokens", NpyArray::I64 { shape: vec![], data: vec![p as i64] }));
        }
        if let Some(d) = &run.decoder {
            let (t, s) = (d.tokens.len(), d.cross.sources());
            let (layers, heads) = (d.attention.layers(), d.attention.heads());
            arrays.push(("target_tokens", NpyArray::Str(&d.tokens.tokens)));
            arrays.push((
                "decoder_attentions",
                NpyArray::F32 { shape: vec![layers, heads, t, t], data: d.attention.as_slice() },
            ));
            arrays.push((
                "cross_attentions",
                NpyArray::F32 { shape: vec![layers, heads, t, s], data: d.cross.as_slice() },
            ));
        }
        write_npz(&mut cursor, &arrays)?;
        w.write_all(cursor.get_ref())
    })?;
    Ok(())
}

/// Runs `attnviz dump`.
pub fn run(model_dir: Option<&Path>, args: &DumpArgs) -> anyhow::Result<()> {
    if args.format == DumpFormat::Npz && args.output == Path::new("-") {
        anyhow::bail!("-o -: NPZ cannot be written to standard output; give a file path");
    }
    let (run, quantization) =
        args.model.run_noting(model_dir, &args.text, args.text_pair.as_deref(), args.target.as_deref())?;
    match args.format {
        DumpFormat::Json => write_json(&args.output, &DumpJson::of(&run, quantization.as_deref())),
        DumpFormat::Npz => write_run_npz(&args.output, &run),
    }
}
