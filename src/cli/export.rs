//! `attnviz export`: draw a view to a PNG file with `render/` (no window, no GPU).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::pe::PeOptions;
use crate::export::{Figure, Style, export_png};
use crate::render::{Colormap, Theme};

/// Which view to draw.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ViewArg {
    /// One head's attention matrix with token labels and a colour bar.
    Heatmap,
    /// The head view of one layer: token columns joined by one coloured line per head.
    Heads,
    /// All layers × heads as a grid of small heatmaps.
    Model,
    /// The sinusoidal positional encoding (positions × dimensions).
    Pe,
    /// Its dot products pe_i · pe_j (positions × positions).
    PeDot,
}

/// Theme on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ThemeArg {
    /// White background.
    Light,
    /// Dark background.
    Dark,
}

/// `attnviz export` arguments.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The sentence (A); needed for heatmap, heads and model.
    #[arg(long)]
    pub text: Option<String>,
    /// An optional second sentence (B).
    #[arg(long)]
    pub text_pair: Option<String>,
    /// What to draw.
    #[arg(long, value_enum)]
    pub view: ViewArg,
    /// Layer (heatmap, heads).
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    /// Head (heatmap; for heads, draw only this head instead of all).
    #[arg(long)]
    pub head: Option<usize>,
    /// Size multiplier, 1 to 4.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    /// Light or dark background.
    #[arg(long, value_enum, default_value_t = ThemeArg::Light)]
    pub theme: ThemeArg,
    /// Colour map for attention heatmaps (viridis, magma, inferno, plasma, cividis, greys, rdbu, puor).
    #[arg(long, default_value = "viridis", value_parser = parse_colormap)]
    pub colormap: Colormap,
    /// Hide head-view lines weaker than this.
    #[arg(long, default_value_t = 0.0)]
    pub threshold: f32,
    /// Positional-encoding parameters (pe, pe-dot).
    #[command(flatten)]
    pub pe: PeOptions,
    /// Output PNG file.
    #[arg(short, long, value_name = "OUT.png")]
    pub output: PathBuf,
    /// Playground model and interventions.
    #[command(flatten)]
    pub model: super::ModelOptions,
}

fn parse_colormap(s: &str) -> Result<Colormap, String> {
    Colormap::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
        format!("unknown colour map {s:?}; choose one of {}", Colormap::ALL.map(Colormap::name).join(", "))
    })
}

/// Runs `attnviz export`.
pub fn run(model_dir: Option<&Path>, args: &ExportArgs) -> anyhow::Result<()> {
    let style = Style {
        theme: match args.theme {
            ThemeArg::Light => Theme::Light,
            ThemeArg::Dark => Theme::Dark,
        },
        scale: args.scale,
        colormap: args.colormap,
    };
    let figure_needs_run = !matches!(args.view, ViewArg::Pe | ViewArg::PeDot);
    let run = if figure_needs_run {
        let text = args.text.as_deref().with_context(|| format!("--text is required for --view {:?}", args.view))?;
        Some(args.model.run(model_dir, text, args.text_pair.as_deref())?)
    } else {
        None
    };
    let heads = run.as_ref().map_or(0, |r| r.attention.heads());
    let figure = match args.view {
        ViewArg::Heatmap => Figure::Heatmap { layer_idx: args.layer, head_idxs: vec![args.head.unwrap_or(0)] },
        ViewArg::Heads => Figure::HeadView {
            layer_idx: args.layer,
            head_idxs: args.head.map_or_else(|| (0..heads).collect(), |h| vec![h]),
            selected_token: None,
            threshold: args.threshold,
        },
        ViewArg::Model => Figure::ModelGrid,
        ViewArg::Pe => Figure::PeEncoding(args.pe.params()),
        ViewArg::PeDot => Figure::PeDot(args.pe.params()),
    };
    let (w, h) = export_png(run.as_ref(), &figure, style, &args.output).map_err(anyhow::Error::from)?;
    eprintln!("wrote {} ({w}×{h})", args.output.display());
    Ok(())
}
