//! `attnviz bench`: median and minimum time of the forward pass with attention capture, and for
//! a language model the tokens per second of greedy generation.

use std::path::Path;
use std::time::Instant;

use clap::Args;

use crate::model::Capture;

/// The text the peer script (`shared/peer/torch_forward.py`) truncates to N tokens.
pub const BENCH_TEXT: &str = "The animal didn't cross the street because it was too tired. ";

/// `attnviz bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Input length in tokens, special tokens included.
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    /// Timed runs (after 3 warm-up runs).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// For a language model, also time writing this many tokens greedily (0: skip).
    #[arg(long, default_value_t = 32)]
    pub generate: usize,
}

/// Runs `attnviz bench`.
pub fn run(model_dir: Option<&Path>, args: &BenchArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let model = super::load_model(model_dir)?;
    let max = model.tokenizer.max_len();
    if args.tokens < 2 || args.tokens > max {
        anyhow::bail!("--tokens must be between 2 and {max} (the model's longest input), got {}", args.tokens);
    }
    let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, args.tokens)?;
    anyhow::ensure!(tokens.len() == args.tokens, "could only make {} tokens", tokens.len());
    let faithful = crate::model::Interventions::default();
    for _ in 0..3 {
        model.run_tokens(tokens.clone(), None, Capture::Attention, &faithful)?;
    }
    let mut times_ms = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let input = tokens.clone();
        let start = Instant::now();
        let run = model.run_tokens(input, None, Capture::Attention, &faithful)?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
        drop(run);
    }
    times_ms.sort_by(f64::total_cmp);
    let mid = times_ms.len() / 2;
    let median_ms =
        if times_ms.len() % 2 == 1 { times_ms[mid] } else { f64::midpoint(times_ms[mid - 1], times_ms[mid]) };
    println!("tokens={} runs={} median_ms={median_ms:.3} min_ms={:.3}", args.tokens, args.runs, times_ms[0]);
    if model.net.has_lm_head() && args.generate > 0 {
        // Greedy decoding with the key/value cache after the one-sentence prompt: tokens written
        // per second, the prompt's own pass not counted.
        let mut g = crate::model::generate::Generator::start(&model, BENCH_TEXT.trim(), 0)?;
        let start = Instant::now();
        let mut written = 0;
        while g.next(args.generate)?.is_some() {
            written += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        println!("generated={written} seconds={secs:.3} tokens_per_s={:.2}", written as f64 / secs.max(1e-9));
    }
    Ok(())
}
