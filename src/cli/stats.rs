//! `attnviz stats`: per-head statistics (Clark et al. 2019) of one input as CSV, JSON or NPZ.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::analysis::HeadStats;
use crate::analysis::npz::NpyArray;

/// Output format of `stats`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StatsFormat {
    /// layer,head,entropy,cls,sep,punctuation,self,previous,next — one line per head.
    Csv,
    /// A list of {"layer", "head", "entropy", "cls", …} objects.
    Json,
    /// A NumPy .npz archive: one float32 layers × heads array per statistic (entropy, cls, sep,
    /// punctuation, self, previous, next).
    Npz,
}

/// `attnviz stats` arguments.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The sentence (A).
    #[arg(long)]
    pub text: String,
    /// An optional second sentence (B).
    #[arg(long)]
    pub text_pair: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = StatsFormat::Csv)]
    pub format: StatsFormat,
    /// Output file; standard output when not given or `-` (CSV and JSON only).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Merge word pieces into words first.
    #[arg(long)]
    pub words: bool,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz stats`.
pub fn run(model_dir: Option<&Path>, args: &StatsArgs) -> anyhow::Result<()> {
    let run = args.model.run(model_dir, &args.text, args.text_pair.as_deref())?;
    let run = if args.words { crate::analysis::words::merge_run(&run) } else { run };
    let stats = HeadStats::compute(&run.attention, &run.tokens).with_sinks(run.sinks.as_ref());
    let text = match args.format {
        StatsFormat::Csv => stats.to_csv(),
        StatsFormat::Json => serde_json::to_string_pretty(&stats.rows())? + "\n",
        StatsFormat::Npz => {
            let (layers, heads) = (run.attention.layers(), run.attention.heads());
            let matrices: Vec<(&str, Vec<f32>)> =
                stats.statistics().into_iter().map(|s| (s.key(), stats.matrix(s))).collect();
            let arrays = matrices
                .iter()
                .map(|(name, m)| (*name, NpyArray::F32 { shape: vec![layers, heads], data: m }))
                .collect();
            return super::readout::write_output(args.output.as_deref(), super::readout::Written::Npz(arrays));
        }
    };
    match args.output.as_deref() {
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
        Some(p) if p == Path::new("-") => std::io::stdout().lock().write_all(text.as_bytes())?,
        Some(p) => {
            crate::atomic::write_bytes_atomic(p, text.as_bytes())?;
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}
