//! `attnviz open FILE`: attention saved by other code, checked, then shown in the app.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// `attnviz open` arguments.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// The attention file: JSON or NumPy .npz with `attentions` (layers × heads × queries × keys)
    /// and `tokens`, and optionally key_tokens, segments, target_tokens, decoder_attentions,
    /// cross_attentions, model.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Read and check the file, say what it holds, and exit without opening the window.
    #[arg(long)]
    pub check: bool,
}

/// Runs `attnviz open`: a file that does not read is an error before any window opens.
pub fn run(model: Option<PathBuf>, args: &OpenArgs) -> anyhow::Result<()> {
    let run = crate::analysis::import::read_attention_file(&args.file)?;
    let a = &run.attention;
    let mut summary = format!(
        "{}: {} · {} layers × {} heads × {} tokens",
        args.file.display(),
        run.model_name,
        a.layers(),
        a.heads(),
        a.seq_len()
    );
    if !a.is_square() {
        let _ = write!(summary, " × {} keys", a.keys());
    }
    if run.causal {
        summary += " · causal (masked above the diagonal)";
    }
    if let Some(d) = &run.decoder {
        let _ = write!(summary, " · decoder side: {} target tokens", d.tokens.len());
    }
    if args.check {
        println!("{summary}");
        return Ok(());
    }
    eprintln!("{summary}");
    let startup = crate::app::Startup {
        model_dir: model,
        attention_file: Some(args.file.canonicalize().context("the attention file")?),
        ..crate::app::Startup::default()
    };
    crate::app::run_app_with(startup)
}
