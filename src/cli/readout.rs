//! What `lens`, `dla` and `heads` share: the input tokens, the output formats and writing them.

use std::io::Write;
use std::path::Path;

use clap::ValueEnum;

use crate::analysis::Tokens;
use crate::analysis::npz::{NpyArray, write_npz};
use crate::model::LoadedModel;

/// Output format of `lens`, `heads` (and `dla`: JSON).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ReadoutFormat {
    /// One JSON object.
    Json,
    /// A NumPy .npz archive.
    Npz,
}

/// What a subcommand writes.
pub enum Written<'a> {
    /// A JSON value.
    Json(serde_json::Value),
    /// Named arrays.
    Npz(Vec<(&'a str, NpyArray<'a>)>),
}

/// The tokens of `text` as the model reads it (cut to its positions with a warning).
pub fn input_tokens(model: &LoadedModel, text: &str) -> anyhow::Result<Tokens> {
    let encoded = model.tokenizer.encode(text, None)?;
    super::warn_truncation(encoded.truncation.as_ref());
    Ok(encoded.tokens)
}

/// Writes `written` to `output` (atomically), or JSON to standard output.
pub fn write_output(output: Option<&Path>, written: Written<'_>) -> anyhow::Result<()> {
    let bytes = match written {
        Written::Json(v) => serde_json::to_string_pretty(&v)?.into_bytes(),
        Written::Npz(arrays) => {
            let Some(path) = output.filter(|p| *p != Path::new("-")) else {
                anyhow::bail!("NPZ needs a file: give -o FILE.npz");
            };
            let bytes = write_npz(std::io::Cursor::new(Vec::new()), &arrays)?.into_inner();
            crate::atomic::write_bytes_atomic(path, &bytes)?;
            eprintln!("wrote {}", path.display());
            return Ok(());
        }
    };
    match output {
        Some(p) if p != Path::new("-") => {
            let mut bytes = bytes;
            bytes.push(b'\n');
            crate::atomic::write_bytes_atomic(p, &bytes)?;
            eprintln!("wrote {}", p.display());
        }
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}
