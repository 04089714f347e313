//! `attnviz patch`: activation patching (denoising) — the corrupted input run with one activation
//! of the clean run put in, for every layer × position (or layer × head), and the logit difference
//! answer − wrong at the last position — as JSON or NPZ.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::readout::{ReadoutFormat, Written, write_output};
use crate::analysis::npz::NpyArray;
use crate::analysis::patching::PatchSite;
use crate::model::patch::{Reuse, SweepControl};

/// Where `patch` puts the clean activation.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SiteArg {
    /// The residual stream entering each layer, at each position (layers × positions).
    ResidPre,
    /// The attention block's output (every head's write + the output bias, before it joins the
    /// stream), at each position (layers × positions).
    AttnOut,
    /// The MLP's write, at each position (layers × positions).
    MlpOut,
    /// Each head's output (its context vector before the output projection) at every position
    /// (layers × heads).
    Head,
}

impl From<SiteArg> for PatchSite {
    fn from(s: SiteArg) -> Self {
        match s {
            SiteArg::ResidPre => Self::ResidPre,
            SiteArg::AttnOut => Self::AttnOut,
            SiteArg::MlpOut => Self::MlpOut,
            SiteArg::Head => Self::Head,
        }
    }
}

/// `attnviz patch` arguments.
#[derive(Debug, Args)]
pub struct PatchArgs {
    /// The clean input (its activations are put in).
    #[arg(long)]
    pub clean: String,
    /// The corrupted input (what runs; as many tokens as the clean one).
    #[arg(long)]
    pub corrupted: String,
    /// The token whose logit counts for, as text (" Mary") or the vocabulary's spelling ("ĠMary").
    #[arg(long)]
    pub answer: String,
    /// The token whose logit counts against (" John").
    #[arg(long)]
    pub wrong: String,
    /// Where to patch.
    #[arg(long, value_enum)]
    pub at: SiteArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReadoutFormat::Json)]
    pub format: ReadoutFormat,
    /// Output file (`-` writes JSON to standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Interventions, on both runs and every patched one.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

/// Runs `attnviz patch`.
pub fn run(model_dir: Option<&Path>, args: &PatchArgs) -> anyhow::Result<()> {
    let interventions = args.model.interventions()?;
    let model = args.model.load(model_dir)?;
    let texts = (args.clean.as_str(), args.corrupted.as_str());
    let request = model.patch_request(texts, (&args.answer, &args.wrong), args.at.into(), &interventions)?;
    super::note_knockouts(&model, &interventions, request.clean.len());
    let mut control = SweepControl { progress: &mut |_| {}, cancel: None };
    let p = model.patch(&request, Reuse::Changed, &mut control)?;
    super::note_run(&model, interventions.describe().as_deref());
    eprintln!(
        "{} sweep: clean {:.4}, corrupted {:.4}; {} of {} cells needed a pass (the others equal the corrupted run)",
        p.site.name(),
        p.clean_logit_diff,
        p.corrupted_logit_diff,
        p.grid.passes,
        p.grid.logit_diff.len()
    );
    let normalized = p.normalized();
    // NPZ has no null: a normalisation without a span is NaN.
    let (inputs, grid) = (&p.inputs, &p.grid);
    let nan = vec![f32::NAN; grid.logit_diff.len()];
    let written = match args.format {
        ReadoutFormat::Json => Written::Json(serde_json::json!({
            "model": model.name,
            "intervention": interventions.describe(),
            "at": p.site.name(),
            "answer": inputs.answer,
            "wrong": inputs.wrong,
            "clean_tokens": inputs.clean_tokens,
            "corrupted_tokens": inputs.corrupted_tokens,
            "clean_logit_diff": p.clean_logit_diff,
            "corrupted_logit_diff": p.corrupted_logit_diff,
            "logit_diff": grid.rows(),
            "normalized": normalized.as_ref().map(|v| v.chunks(grid.columns.max(1)).collect::<Vec<_>>()),
        })),
        ReadoutFormat::Npz => {
            let shape = vec![grid.layers, grid.columns];
            Written::Npz(vec![
                ("clean_tokens", NpyArray::Str(&inputs.clean_tokens)),
                ("corrupted_tokens", NpyArray::Str(&inputs.corrupted_tokens)),
                ("clean_logit_diff", NpyArray::F32 { shape: vec![], data: std::slice::from_ref(&p.clean_logit_diff) }),
                (
                    "corrupted_logit_diff",
                    NpyArray::F32 { shape: vec![], data: std::slice::from_ref(&p.corrupted_logit_diff) },
                ),
                ("logit_diff", NpyArray::F32 { shape: shape.clone(), data: &grid.logit_diff }),
                ("normalized", NpyArray::F32 { shape, data: normalized.as_deref().unwrap_or(&nan) }),
            ])
        }
    };
    write_output(Some(&args.output), written)
}
