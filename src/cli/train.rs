//! `attnviz train`: train a small transformer on a generated task, print a line per evaluation,
//! save it as a model folder.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use crate::app::lab::figure;
use crate::model::NormPlacement;
use crate::model::playground::PeKind;
use crate::train::{Evaluation, Pooling, TaskKind, TrainConfig, Trainer};

/// Arguments of `attnviz train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The task: induction (T random tokens, then the same T again), sort, reverse (lists of
    /// digits), sentiment (the course's review classifier), modadd (a + b mod p, grokking).
    #[arg(long, default_value = "induction")]
    pub task: String,
    /// Transformer blocks (default: the task's).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Attention heads per block.
    #[arg(long)]
    pub heads: Option<usize>,
    /// Model width.
    #[arg(long)]
    pub d_model: Option<usize>,
    /// Feed-forward width; 0 = attention-only.
    #[arg(long)]
    pub mlp: Option<usize>,
    /// Random tokens of the induction task; p of modadd.
    #[arg(long)]
    pub vocab: Option<usize>,
    /// Sequence length of the decoder tasks (induction repeats context/2 tokens).
    #[arg(long)]
    pub context: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Learning rate (AdamW).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Steps of linear learning-rate warm-up.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// AdamW weight decay.
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Steps to train.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Seed of the weights and batches.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Evaluate every N steps.
    #[arg(long, value_name = "N")]
    pub eval: Option<usize>,
    /// Positional encoding: none, sin, sin-concat, learned.
    #[arg(long)]
    pub pe: Option<String>,
    /// Wavelength base of the sinusoidal encodings.
    #[arg(long)]
    pub pe_base: Option<f64>,
    /// The classifier's pooling: mean or cls.
    #[arg(long)]
    pub pooling: Option<String>,
    /// The classifier's layer norms: post or pre.
    #[arg(long)]
    pub norm: Option<String>,
    /// The course's experiment (sentiment): train mean pooling, mean + sinusoidal positions and
    /// [CLS] + positions with the same seed and budget, and print their held-out accuracies.
    #[arg(long)]
    pub experiment: bool,
    /// Save the trained model folder here (config.json, model.safetensors, tokenizer.json,
    /// training.json).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Write the run's plots (loss, held-out loss, the task's metric, each head's induction
    /// score) here: PNG, SVG or PDF by the extension, or their numbers as CSV, JSON or NPZ (one
    /// row per step). Repeat for several files.
    #[arg(long, value_name = "FILE")]
    pub plots: Vec<PathBuf>,
}

impl TrainArgs {
    /// The settings: the task's defaults, then what is given.
    pub fn config(&self) -> anyhow::Result<TrainConfig> {
        let task = TaskKind::parse(&self.task)?;
        let mut c = TrainConfig::for_task(task);
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = v; } )* };
        }
        set!(layers, heads, d_model, mlp, vocab, context, batch, lr, warmup, weight_decay, steps, seed, pe_base);
        if let Some(e) = self.eval {
            c.eval_every = e;
            c.checkpoint_every = e;
        }
        if let Some(pe) = &self.pe {
            c.pe = match pe.as_str() {
                "none" => PeKind::None,
                "sin" | "sinusoidal" => PeKind::Interleaved,
                "sin-concat" => PeKind::Concatenated,
                "learned" => PeKind::Learned,
                _ => anyhow::bail!("--pe {pe:?}: choose none, sin, sin-concat or learned"),
            };
        }
        if let Some(p) = &self.pooling {
            c.pooling = match p.as_str() {
                "mean" => Pooling::Mean,
                "cls" => Pooling::Cls,
                _ => anyhow::bail!("--pooling {p:?}: choose mean or cls"),
            };
        }
        if let Some(n) = &self.norm {
            c.norm = match n.as_str() {
                "post" => NormPlacement::Post,
                "pre" => NormPlacement::Pre,
                _ => anyhow::bail!("--norm {n:?}: choose post or pre"),
            };
        }
        c.validate()?;
        Ok(c)
    }
}

fn line(task: TaskKind, layers: usize, e: &Evaluation, ms_per_step: f64) -> String {
    let metric = match task {
        TaskKind::Induction => {
            // The best head, as L{layer}H{head}.
            let heads = e.head_scores.len() / layers.max(1);
            let best =
                (0..e.head_scores.len()).max_by(|&a, &b| e.head_scores[a].total_cmp(&e.head_scores[b])).unwrap_or(0);
            format!(
                "repeated_half_loss {:.3} induction_score {:.3} best_head L{}H{}",
                e.held_out_loss,
                e.metric,
                best / heads.max(1),
                best % heads.max(1)
            )
        }
        _ => format!("held_out_loss {:.3} accuracy {:.3}", e.held_out_loss, e.metric),
    };
    let order = e.order_accuracy.map(|a| format!(" order_dependent_accuracy {a:.3}")).unwrap_or_default();
    format!("step {} loss {:.3} {metric}{order} ms_per_step {ms_per_step:.2}", e.step, e.train_loss)
}

/// Trains `cfg` to the end, printing a line per evaluation (and a progress bar on a terminal).
fn train(cfg: &TrainConfig, quiet_bar: bool) -> anyhow::Result<Trainer> {
    let mut t = Trainer::new(cfg)?;
    eprintln!("training {} ({} parameters)", cfg.describe(), t.net.trained_values());
    let bar = if quiet_bar { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(cfg.steps as u64) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps · {per_sec} · ETA {eta} · {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut times = Vec::with_capacity(cfg.steps);
    while !t.finished() {
        let start = Instant::now();
        let loss = t.step()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        bar.inc(1);
        bar.set_message(format!("loss {loss:.3}"));
        if t.step % cfg.eval_every == 0 || t.finished() {
            let e = t.evaluate()?;
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            bar.suspend(|| println!("{}", line(cfg.task, cfg.layers, &e, sorted[sorted.len() / 2])));
        }
    }
    bar.finish_and_clear();
    Ok(t)
}

/// Warm-up steps before `bench --mode train` times.
const BENCH_WARM_UP: usize = 10;

/// `attnviz bench --mode train`: the median and minimum time of `steps` training steps of the
/// default induction run (after a warm-up), and the matrix products' floating-point rate.
pub fn bench(steps: usize) -> anyhow::Result<()> {
    anyhow::ensure!(steps >= 1, "--steps must be at least 1");
    let cfg = TrainConfig { steps: BENCH_WARM_UP + steps, ..TrainConfig::default() };
    let mut t = Trainer::new(&cfg)?;
    for _ in 0..BENCH_WARM_UP {
        t.step()?;
    }
    let mut times_ms = Vec::with_capacity(steps);
    for _ in 0..steps {
        let start = Instant::now();
        t.step()?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times_ms.sort_by(f64::total_cmp);
    let mid = times_ms.len() / 2;
    let median_ms =
        if times_ms.len() % 2 == 1 { times_ms[mid] } else { f64::midpoint(times_ms[mid - 1], times_ms[mid]) };
    let flops = crate::train::step_flops(&cfg) as f64;
    println!(
        "steps={steps} median_ms={median_ms:.3} min_ms={:.3} mode=train matmul_gflop_per_step={:.3} gflop_per_s={:.1} loss={:.3}",
        times_ms[0],
        flops / 1e9,
        flops / 1e6 / median_ms,
        t.losses.last().copied().unwrap_or(f32::NAN)
    );
    println!("config: {}", cfg.describe());
    Ok(())
}

/// Runs `attnviz train`.
pub fn run(args: &TrainArgs) -> anyhow::Result<()> {
    let cfg = args.config()?;
    if args.experiment {
        anyhow::ensure!(
            cfg.task == TaskKind::Sentiment,
            "--experiment is the course's sentiment experiment: add --task sentiment"
        );
        anyhow::ensure!(args.plots.is_empty(), "--plots writes one run's plots: it does not apply to --experiment");
        let variants = [
            ("mean pooling, no positions", Pooling::Mean, PeKind::None),
            ("mean pooling + sinusoidal PE", Pooling::Mean, PeKind::Interleaved),
            ("[CLS] + sinusoidal PE", Pooling::Cls, PeKind::Interleaved),
        ];
        let mut rows = Vec::new();
        for (name, pooling, pe) in variants {
            let t = train(&TrainConfig { pe, pooling, ..cfg.clone() }, true)?;
            let e = t.evaluations.last().cloned().context("no evaluation")?;
            rows.push((name, e));
        }
        println!("variant | held-out accuracy | order-dependent sentences");
        for (name, e) in rows {
            println!("{name} | {:.3} | {:.3}", e.metric, e.order_accuracy.unwrap_or(f32::NAN));
        }
        return Ok(());
    }
    // Checked before training, not after minutes of it.
    let known = |p: &PathBuf| {
        let ext = p.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        matches!(ext.as_str(), "png" | "svg" | "pdf" | "csv" | "json" | "npz")
    };
    if let Some(p) = args.plots.iter().find(|p| !known(p)) {
        anyhow::bail!("--plots {}: end the file in .png, .svg, .pdf, .csv, .json or .npz", p.display());
    }
    let t = train(&cfg, false)?;
    if !args.plots.is_empty() {
        let figure = crate::app::lab::figure::figure(&cfg, &figure::steps_and_losses(&t.losses), &t.evaluations);
        for path in &args.plots {
            let written = crate::export::export_file(None, &figure, crate::export::Style::default(), path)
                .with_context(|| format!("writing the plots to {}", path.display()))?;
            super::export::report_written(path, written);
        }
    }
    if let Some(dir) = &args.output {
        let saved = t.save(dir)?;
        println!("saved {}", saved.display());
    }
    Ok(())
}
