//! `attnviz dump`: every layer's and head's attention for one input, as JSON or NPZ.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::analysis::attention::NestedLayer;
use crate::analysis::npz::{NpyArray, NpzWriter};
use crate::analysis::{Attention, Run, Tokens};
use crate::atomic::write_atomic;
use crate::model::{Interventions, LoadedModel};

/// Output format of `dump`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DumpFormat {
    /// `{"model", "tokens", "segments", "attentions": [layer][head][query][key]}`.
    Json,
    /// `NumPy` archive: `attentions` (float32, L×H×n×n), `tokens`, `segments`, `model`.
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
    /// For a model with attention sinks (gpt-oss): the sink's share of each row,
    /// `[layer][head][query]` (each row of `attentions` sums to 1 minus it).
    #[serde(skip_serializing_if = "Option::is_none")]
    sink: Option<Vec<Vec<&'a [f32]>>>,
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
    cross_attentions: Option<crate::analysis::attention::Nested<'a>>,
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
            sink: run
                .sinks
                .as_ref()
                .map(|s| (0..s.layers()).map(|l| (0..s.heads()).map(|h| s.head(l, h)).collect()).collect()),
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
    let model = [run.model_name.clone()];
    write_atomic(path, |w| {
        let mut arrays = vec![
            ("attentions", NpyArray::F32 { shape: vec![a.layers(), a.heads(), n, n], data: a.as_slice() }),
            ("tokens", NpyArray::Str(&run.tokens.tokens)),
            (
                "segments",
                NpyArray::I64 { shape: vec![n], data: run.tokens.segments.iter().map(|&s| i64::from(s)).collect() },
            ),
            // What `attnviz open` names the file's attention after.
            ("model", NpyArray::Str(&model)),
        ];
        if let Some(s) = &run.sinks {
            arrays.push(("sink", NpyArray::F32 { shape: vec![s.layers(), s.heads(), n], data: s.as_slice() }));
        }
        if !intervention.is_empty() {
            arrays.push(("intervention", NpyArray::Str(&intervention)));
        }
        if let Some(p) = run.prompt_len {
            arrays.push(("prompt_tokens", NpyArray::I64 { shape: vec![], data: vec![p as i64] }));
        }
        if let Some(d) = &run.decoder {
            let (t, s) = (d.tokens.len(), d.cross.keys());
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
        crate::analysis::npz::write_npz(w, &arrays)?;
        Ok(())
    })?;
    Ok(())
}

/// Runs `attnviz dump`. Without a decoder side the file is written while the model runs, one
/// layer at a time, so a long input never holds every layer's attention in memory; the bytes are
/// those of [`write_run_npz`] / [`DumpJson`] on the recorded run.
pub fn run(model_dir: Option<&Path>, args: &DumpArgs) -> anyhow::Result<()> {
    if args.format == DumpFormat::Npz && args.output == Path::new("-") {
        anyhow::bail!("-o -: NPZ cannot be written to standard output; give a file path");
    }
    if args.target.is_some() {
        let (run, quantization) =
            args.model.run_noting(model_dir, &args.text, args.text_pair.as_deref(), args.target.as_deref())?;
        return match args.format {
            DumpFormat::Json => write_json(&args.output, &DumpJson::of(&run, quantization.as_deref())),
            DumpFormat::Npz => write_run_npz(&args.output, &run),
        };
    }
    let interventions = args.model.interventions()?;
    let model = args.model.load(model_dir)?;
    let encoded = model.tokenizer.encode(&args.text, args.text_pair.as_deref().filter(|p| !p.is_empty()))?;
    super::warn_truncation(encoded.truncation.as_ref());
    model.check_tokens(&encoded.tokens, &interventions)?;
    super::note_knockouts(&model, &interventions, encoded.tokens.len());
    if model.decoder.is_some() {
        super::note_encoder_only(&model);
    }
    if model.description().attn_sinks {
        // Dumped from its recorded run: the sinks' shares come with it.
        let run = model
            .run_tokens(encoded.tokens, encoded.truncation, crate::model::Capture::Attention, &interventions)
            .context("running the model")?;
        super::note_run(&model, run.intervention.as_deref());
        return match args.format {
            DumpFormat::Json => write_json(&args.output, &DumpJson::of(&run, model.quantization.as_deref())),
            DumpFormat::Npz => write_run_npz(&args.output, &run),
        };
    }
    let dump = Streamed { model: &model, tokens: &encoded.tokens, interventions: &interventions };
    match args.format {
        DumpFormat::Json if args.output == Path::new("-") => {
            let mut out = std::io::BufWriter::new(std::io::stdout());
            dump.write_json(&mut out)?;
            writeln!(out)?;
            out.flush()?;
        }
        format => {
            let mut failed = None;
            let written = write_atomic(&args.output, |w| {
                dump.write(w, format).map_err(|e| match e.downcast::<std::io::Error>() {
                    Ok(io) => io,
                    Err(other) => {
                        failed = Some(other);
                        std::io::Error::other("the model failed")
                    }
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
            written?;
        }
    }
    super::note_run(&model, interventions.describe().as_deref());
    Ok(())
}

/// A dump written as the model runs (no decoder side).
struct Streamed<'a> {
    model: &'a LoadedModel,
    tokens: &'a Tokens,
    interventions: &'a Interventions,
}

impl Streamed<'_> {
    /// Runs the model and writes the dump to `w`, each layer as it is computed. An I/O error comes
    /// back as a `std::io::Error`, a failure of the model as its own error.
    fn write<W: Write + std::io::Seek + Send>(&self, w: &mut W, format: DumpFormat) -> anyhow::Result<()> {
        match format {
            DumpFormat::Json => self.write_json(w),
            DumpFormat::Npz => self.write_npz(w),
        }
    }

    /// Runs the model, handing each layer's attention to `write`; the first I/O error stops it.
    fn each_layer(&self, mut write: impl FnMut(&[f32]) -> std::io::Result<()> + Send) -> anyhow::Result<()> {
        let mut io_error = None;
        let ran = self.model.stream_layers(self.tokens, self.interventions, &mut |_, probs| {
            write(probs).map_err(|e| {
                io_error = Some(e);
                crate::model::EngineError::Stopped
            })
        });
        match (ran, io_error) {
            (_, Some(io)) => Err(io.into()),
            (Err(e), None) => Err(anyhow::Error::new(e).context("running the model")),
            (Ok(_), None) => Ok(()),
        }
    }

    fn layers(&self) -> usize {
        self.interventions.first_layers.unwrap_or(self.model.description().layers)
    }

    fn write_npz<W: Write + std::io::Seek + Send>(&self, w: &mut W) -> anyhow::Result<()> {
        let (n, heads) = (self.tokens.len(), self.model.description().heads);
        let mut npz = NpzWriter::new(w);
        let mut result = Ok(());
        let streamed = npz.f32_streamed("attentions", &[self.layers(), heads, n, n], |sink| {
            result = self.each_layer(|probs| sink.write(probs));
            // An unfinished array stops the archive; `result` says why.
            if result.is_ok() { Ok(()) } else { Err(std::io::Error::other("stopped")) }
        });
        result?;
        streamed?;
        npz.array("tokens", &NpyArray::Str(&self.tokens.tokens))?;
        let segments = self.tokens.segments.iter().map(|&s| i64::from(s)).collect();
        npz.array("segments", &NpyArray::I64 { shape: vec![n], data: segments })?;
        npz.array("model", &NpyArray::Str(std::slice::from_ref(&self.model.name)))?;
        if let Some(how) = self.interventions.describe() {
            npz.array("intervention", &NpyArray::Str(&[how]))?;
        }
        npz.finish()?;
        Ok(())
    }

    /// The JSON of [`DumpJson`], key by key, the attentions layer by layer.
    fn write_json(&self, w: &mut (impl Write + Send)) -> anyhow::Result<()> {
        let (n, heads) = (self.tokens.len(), self.model.description().heads);
        w.write_all(b"{\"model\":")?;
        json(w, &self.model.name)?;
        if let Some(q) = &self.model.quantization {
            w.write_all(b",\"quantization\":")?;
            json(w, q)?;
        }
        w.write_all(b",\"tokens\":")?;
        json(w, &self.tokens.tokens)?;
        w.write_all(b",\"segments\":")?;
        json(w, &self.tokens.segments)?;
        w.write_all(b",\"attentions\":[")?;
        let mut first = true;
        self.each_layer(|probs| {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            serde_json::to_writer(&mut *w, &NestedLayer::new(probs, heads, n)).map_err(std::io::Error::other)
        })?;
        w.write_all(b"]")?;
        if let Some(how) = self.interventions.describe() {
            w.write_all(b",\"intervention\":")?;
            json(w, &how)?;
        }
        w.write_all(b"}")?;
        Ok(())
    }
}

/// Writes `value` as JSON to `w`.
fn json(w: &mut impl Write, value: &(impl Serialize + ?Sized)) -> std::io::Result<()> {
    serde_json::to_writer(w, value).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed dump and the dump of the recorded run, byte for byte: JSON and NPZ, a
    /// sentence pair on an encoder, a decoder with a window, a GGUF (its quantization key), a
    /// modified run.
    #[test]
    fn streamed_dumps_are_the_bytes_of_the_recorded_ones() {
        let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models");
        let modified = Interventions { temperature: 0.5, first_layers: Some(1), ..Interventions::default() };
        let cases = [
            ("tiny-bert", Some("It purred."), Interventions::default()),
            ("tiny-mistral", None, Interventions::default()),
            ("tiny-llama-gguf/tiny-llama.Q8_0.gguf", None, Interventions::default()),
            ("tiny-gpt2", None, modified),
        ];
        let dir = tempfile::tempdir().unwrap();
        for (name, pair, iv) in cases {
            let model = LoadedModel::load(&models.join(name)).unwrap();
            let run = model.run_with("The cat sat on the mat.", pair, &iv).unwrap();
            let encoded = model.tokenizer.encode("The cat sat on the mat.", pair).unwrap();
            let dump = Streamed { model: &model, tokens: &encoded.tokens, interventions: &iv };

            let mut json = Vec::new();
            dump.write_json(&mut json).unwrap();
            let recorded = serde_json::to_vec(&DumpJson::of(&run, model.quantization.as_deref())).unwrap();
            assert_eq!(String::from_utf8(json).unwrap(), String::from_utf8(recorded).unwrap(), "{name}: JSON");

            let path = dir.path().join("recorded.npz");
            write_run_npz(&path, &run).unwrap();
            let mut npz = std::io::Cursor::new(Vec::new());
            dump.write(&mut npz, DumpFormat::Npz).unwrap();
            assert!(npz.get_ref() == &std::fs::read(&path).unwrap(), "{name}: NPZ");
        }
    }
}
