//! `attnviz pe`: a sinusoidal positional encoding and its dot-product matrix as JSON.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::analysis::npz::NpyArray;
use crate::analysis::pe::{PeLayout, PeParams, sinusoidal};

/// Output format of `pe`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum PeFormat {
    /// `{"encoding": N×D, "dot": N×N}`.
    Json,
    /// A NumPy .npz archive: `encoding` (N × D) and `dot` (N × N), float32.
    Npz,
}

/// Channel layout on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LayoutArg {
    /// sin/cos interleaved, as in the paper.
    Interleaved,
    /// all sines then all cosines, as in tensor2tensor.
    Concatenated,
}

impl From<LayoutArg> for PeLayout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Interleaved => PeLayout::Interleaved,
            LayoutArg::Concatenated => PeLayout::Concatenated,
        }
    }
}

/// Arguments shared by `pe` and `export --view pe|pe-dot`.
#[derive(Debug, Clone, Args)]
pub struct PeOptions {
    /// Model width D (even).
    #[arg(long, default_value_t = 128)]
    pub d_model: usize,
    /// Number of positions N.
    #[arg(long, default_value_t = 64)]
    pub positions: usize,
    /// Wavelength base (10000 in the paper).
    #[arg(long, default_value_t = 10_000.0, allow_negative_numbers = true)]
    pub base: f64,
    /// Channel layout.
    #[arg(long, value_enum, default_value_t = LayoutArg::Interleaved)]
    pub layout: LayoutArg,
}

impl PeOptions {
    /// The analysis parameters these options describe.
    pub fn params(&self) -> PeParams {
        PeParams { d_model: self.d_model, positions: self.positions, base: self.base, layout: self.layout.into() }
    }
}

/// `attnviz pe` arguments.
#[derive(Debug, Args)]
pub struct PeArgs {
    /// Encoding parameters.
    #[command(flatten)]
    pub pe: PeOptions,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PeFormat::Json)]
    pub format: PeFormat,
    /// Output file (`-` for standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
}

#[derive(Serialize)]
struct PeJson {
    encoding: Vec<Vec<f32>>,
    dot: Vec<Vec<f32>>,
}

/// Runs `attnviz pe`.
pub fn run(args: &PeArgs) -> anyhow::Result<()> {
    let pe = sinusoidal(args.pe.params()).map_err(|e| anyhow::anyhow!("invalid positional encoding: {e}"))?;
    let d = pe.params.d_model;
    let n = pe.params.positions;
    if let PeFormat::Npz = args.format {
        return super::readout::write_output(
            Some(&args.output),
            super::readout::Written::Npz(vec![
                ("encoding", NpyArray::F32 { shape: vec![n, d], data: &pe.encoding }),
                ("dot", NpyArray::F32 { shape: vec![n, n], data: &pe.dot }),
            ]),
        );
    }
    let json = PeJson {
        encoding: pe.encoding.chunks(d).map(<[f32]>::to_vec).collect(),
        dot: pe.dot.chunks(n).map(<[f32]>::to_vec).collect(),
    };
    super::dump::write_json(&args.output, &json)
}
