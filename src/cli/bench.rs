//! `attnviz bench`: median and minimum time of the forward pass with attention capture (every
//! layer × head's attention produced once: recorded whole, or streamed layer by layer, head by head,
//! or computed again from the residual streams), and for a language model the tokens per second of
//! greedy generation.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use clap::{Args, ValueEnum};

use crate::model::engine::{EachHead, EachLayer, Input};
use crate::model::{Capture, Interventions, LoadedModel};

/// How `bench` produces every layer × head's attention.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum BenchMode {
    /// One pass recording every layer's attention (what the app holds): layers × heads × n².
    Record,
    /// One pass handing each layer's attention over as it is computed (checked, then overwritten by
    /// the next layer's): heads × n² at a time.
    Layers,
    /// One pass handing each head's attention over as it is computed: one n² matrix per thread.
    Heads,
    /// A pass keeping only the residual stream entering each layer, then every layer's queries and
    /// keys and every head's attention computed again from it (the lazy path views use).
    Lazy,
    /// What the app runs past "Record up to": one pass handing each head over as it is computed,
    /// pooled into the overview and the window (rows of the overview checked), with the runs of
    /// the layers done made after each layer as the app gets them.
    Pooled,
    /// The logit lens of every position: every stream through the final norm and the
    /// unembedding, the top 5 of each cell (streams × positions cells checked).
    Lens,
    /// The logit lens of the last position only (what the app computes first for the selected
    /// position): one column of streams.
    LensColumn,
    /// The contribution graph: every layer's proportions at every token, with each node's lens.
    Contributions,
    /// A training step of the lab's default induction model (the `PyTorch` peer's,
    /// `shared/peer/torch_train.py`): batch, forward, backward, `AdamW`. No model is loaded.
    Train,
    /// Activation patching: the `resid-pre` and `head` sweeps of an IOI prompt pair
    /// ([`PATCH_CLEAN`], [`PATCH_CORRUPTED`], " Mary" vs " John"), running only what each patch
    /// changes, as `shared/peer/torch_patch.py` times them (`--tokens` is not read).
    Patch,
    /// The same sweeps with one full pass per cell (the peer's way).
    PatchFull,
    /// A keystroke at the end: one token appended to the N-token input, run after the input's
    /// key/value cache with its attention rows reused (a decoder), checked bit for bit against a
    /// fresh pass of the N + 1 tokens (whose time is printed as `fresh_ms=`).
    Typing,
    /// Memory given back: the app's inference thread runs --model (default: the embedded SmolLM2)
    /// on a text of about N tokens (pooled past 1,024, as the app runs it), then the embedded
    /// MiniLM on a 16-token sentence, then stays idle; the process's RSS is printed at each step.
    Memory,
}

/// The text the peer script (`shared/peer/torch_forward.py`) truncates to N tokens.
pub const BENCH_TEXT: &str = "The animal didn't cross the street because it was too tired. ";

/// The clean prompt of `--mode patch` (14 tokens on SmolLM2).
pub const PATCH_CLEAN: &str = "When Mary and John went to the store, John gave a drink to";

/// The corrupted prompt of `--mode patch`: the second name swapped.
pub const PATCH_CORRUPTED: &str = "When Mary and John went to the store, Mary gave a drink to";

/// `--mode patch` / `patch-full`: each sweep's median seconds over `runs`, printed as the peer
/// prints them, with the grid's sum as a checksum.
fn patching(model: &LoadedModel, runs: usize, reuse: crate::model::patch::Reuse) -> anyhow::Result<()> {
    use crate::analysis::patching::PatchSite;
    use crate::model::patch::SweepControl;
    let faithful = Interventions::default();
    for site in [PatchSite::ResidPre, PatchSite::Head] {
        let request = model.patch_request((PATCH_CLEAN, PATCH_CORRUPTED), (" Mary", " John"), site, &faithful)?;
        let mut seconds = Vec::with_capacity(runs);
        let mut last = None;
        for _ in 0..runs {
            let start = Instant::now();
            let p = model.patch(&request, reuse, &mut SweepControl { progress: &mut |_| {}, cancel: None })?;
            seconds.push(start.elapsed().as_secs_f64());
            last = Some(p);
        }
        let p = last.ok_or_else(|| anyhow::anyhow!("no run"))?;
        let sum: f64 = p.grid.logit_diff.iter().map(|&v| f64::from(v)).sum();
        println!(
            "sweep={} cells={} passes={} tokens={} median_seconds={:.3} min_seconds={:.3} sum={sum:.6} clean_logit_diff={:.6} corrupted_logit_diff={:.6}",
            site.name(),
            p.grid.logit_diff.len(),
            p.grid.passes,
            p.inputs.clean_tokens.len(),
            median(&mut seconds),
            seconds[0],
            p.clean_logit_diff,
            p.corrupted_logit_diff
        );
    }
    Ok(())
}

/// The median of `times` (sorted in place).
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    if times.len() % 2 == 1 { times[mid] } else { f64::midpoint(times[mid - 1], times[mid]) }
}

/// The process's resident memory and its peak so far, in MB (`VmRSS`, `VmHWM`).
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `--mode memory`: the app's inference thread ([`crate::app::worker::Worker`]) through a long
/// input on `model_dir` (default SmolLM2), then a short sentence on MiniLM, then idle, printing
/// the RSS after each step (the run shown kept alive as the app keeps it).
fn memory(model_dir: Option<&Path>, tokens: usize) -> anyhow::Result<()> {
    use crate::app::worker::{Done, Job, LongRequest, RunSpec, Worker};
    use crate::model::loader::{DEFAULT_MODEL_NAME, SMOLLM2_NAME, embedded_models};
    let models = embedded_models()?;
    let first = model_dir.map_or_else(|| models.join(SMOLLM2_NAME), Path::to_path_buf);
    let worker = Worker::spawn(|_| {})?;
    let report = |step: &str| {
        let (rss, peak) = rss_mb();
        let blocks = crate::alloc::kept_bytes();
        println!("step={step} rss_mb={rss:.0} peak_mb={peak:.0} kept_blocks_mb={:.0}", blocks as f64 / 1_048_576.0);
    };
    let wait = |what: &str, done: &dyn Fn(&Done) -> bool| -> anyhow::Result<Done> {
        let start = Instant::now();
        loop {
            if let Some(d) = worker.try_recv() {
                if let Done::Loaded { result: Err(e), .. } | Done::Ran { result: Err(e), .. } = &d {
                    anyhow::bail!("{what}: {e}");
                }
                if done(&d) {
                    return Ok(d);
                }
            }
            anyhow::ensure!(start.elapsed().as_secs() < 3600, "{what} took over an hour");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let long = || {
        RunSpec::Pretrained(
            Interventions::default(),
            Some(LongRequest { record_tokens: crate::analysis::long::RECORD_TOKENS, window_start: None }),
        )
    };
    report("start");
    worker.send(Job::Load { id: worker.next_id(), dir: first });
    wait("loading", &|d| matches!(d, Done::Loaded { .. }))?;
    report("loaded");
    let text = BENCH_TEXT.repeat(tokens.div_ceil(12).max(1));
    worker.send(Job::Run { id: worker.next_id(), text, pair: None, target: None, spec: long() });
    // A long input's runs come layer by layer; the last holds every layer.
    let complete = |d: &Done| {
        matches!(d, Done::Ran { result: Ok(r), .. }
            if r.long.as_ref().is_none_or(|l| r.attention.layers() == l.layers_total))
    };
    let shown = wait("the long run", &complete)?;
    if let Done::Ran { result: Ok(r), .. } = &shown {
        let n = r.long.as_ref().map_or(r.tokens.len(), |l| l.total);
        println!("long_tokens={n}");
    }
    report("long_run");
    worker.send(Job::Load { id: worker.next_id(), dir: models.join(DEFAULT_MODEL_NAME) });
    wait("loading MiniLM", &|d| matches!(d, Done::Loaded { .. }))?;
    drop(shown); // the app forgets the old model's run
    let sentence = "The quick brown fox jumps over the lazy dog because it was tired.".to_string();
    worker.send(Job::Run { id: worker.next_id(), text: sentence, pair: None, target: None, spec: long() });
    let shown = wait("the short run", &complete)?;
    if let Done::Ran { result: Ok(r), .. } = &shown {
        println!("short_tokens={}", r.tokens.len());
    }
    report("short_run");
    for second in 1..=6 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        report(&format!("idle_{second}s"));
    }
    drop(shown);
    Ok(())
}

/// `attnviz bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Input length in tokens, special tokens included.
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    /// Timed runs (after 3 warm-up runs; none when only one run is timed).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// For a language model, also time writing this many tokens greedily (0: skip).
    #[arg(long, default_value_t = 32)]
    pub generate: usize,
    /// How every layer × head's attention is produced: record (all held at once), layers, heads
    /// (streamed, each row checked to sum to 1, then dropped) or lazy (computed again from the
    /// residual streams, checked the same way).
    #[arg(long, value_enum, default_value_t = BenchMode::Record)]
    pub mode: BenchMode,
    /// Timed training steps of `--mode train` (after 10 warm-up steps).
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
}

/// Keystrokes `--mode typing` times after a [`PAUSE`].
const PAUSED_RUNS: usize = 5;

/// The pause before each of those keystrokes.
const PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// `--mode typing`: the median time of appending one token to `tokens` with the prefix reused —
/// the attention alone (`median_ms`), and the whole run the app shows (`run_median_ms`: also the
/// neuron view's scores, queries and keys, as a [`crate::analysis::Run`]); also the app's first
/// run of the input (`first_run_ms`, keeping what a keystroke reuses) beside a fresh recorded run
/// (`fresh_run_ms`), and the app's run after a pause of a second, as keys come when typed
/// (`paused_run_median_ms`, [`PAUSED_RUNS`] of them).
fn typing(model: &LoadedModel, tokens: &crate::analysis::Tokens, runs: usize) -> anyhow::Result<()> {
    use crate::model::typing::{PrefixRun, Reused};
    let (net, ids) = (&model.net, &tokens.ids[..]);
    anyhow::ensure!(ids.len() < model.tokenizer.max_len(), "--tokens must leave room for the token typed");
    let faithful = Interventions::default();
    let Some(mut run) = PrefixRun::start(net, ids, &faithful)? else {
        anyhow::bail!("{} is not a decoder: every token of an encoder's input changes with an edit", model.name);
    };
    let typed: Vec<u32> = ids.iter().chain(&ids[1..2]).copied().collect();
    let tokenizer = &model.tokenizer;
    let typed_tokens =
        crate::analysis::Tokens::from_ids(&typed, |id| tokenizer.token_of(id), |id| tokenizer.is_special(id));
    let typed = &typed[..];
    let mut times_ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let reused = run.update(net, typed, &faithful)?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(reused == Reused { kept: ids.len(), ran: 1 }, "ran {reused:?}");
        run.update(net, ids, &faithful)?; // the backspace: nothing runs
    }
    run.update(net, typed, &faithful)?;
    let start = Instant::now();
    let fresh = net.forward(typed, &vec![0; typed.len()], Capture::Attention, &faithful)?;
    let fresh_ms = start.elapsed().as_secs_f64() * 1e3;
    let same = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    anyhow::ensure!(
        same(&run.square_probs(), &fresh.probs) && same(run.last_hidden(), &fresh.last_hidden),
        "the reused run differs from a fresh pass"
    );
    let rows = check_rows(&run.square_probs(), typed.len())?;
    drop((run, fresh));
    // The app's keystroke: the run it shows, every view's data recorded.
    // As in the app, the run shown stays alive while the next is computed (it shares the rows
    // both hold) and is dropped once the next one replaces it.
    let mut prefix = None;
    let start = Instant::now();
    let mut shown = model.run_tokens_reusing(&mut prefix, tokens.clone(), None, &faithful)?.0;
    let first_run_ms = start.elapsed().as_secs_f64() * 1e3;
    // One key typed at the end (timed, checked to run one token), then the backspace.
    let key = |prefix: &mut Option<PrefixRun>, shown: &mut crate::analysis::Run| -> anyhow::Result<f64> {
        let start = Instant::now();
        let (next, reused) = model.run_tokens_reusing(prefix, typed_tokens.clone(), None, &faithful)?;
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(reused == Some(Reused { kept: ids.len(), ran: 1 }), "ran {reused:?}");
        drop(std::mem::replace(shown, next));
        *shown = model.run_tokens_reusing(prefix, tokens.clone(), None, &faithful)?.0;
        Ok(elapsed_ms)
    };
    let mut run_ms = (0..runs).map(|_| key(&mut prefix, &mut shown)).collect::<anyhow::Result<Vec<_>>>()?;
    // As a user types: each key after a pause. The other core has gone idle and the weights have
    // left the caches in between, so a key costs more than back to back (on the 2-core VM, ~1.5×).
    let mut paused_ms = (0..PAUSED_RUNS)
        .map(|_| {
            std::thread::sleep(PAUSE);
            key(&mut prefix, &mut shown)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    drop(shown);
    let (shown, _) = model.run_tokens_reusing(&mut prefix, typed_tokens.clone(), None, &faithful)?;
    drop(prefix);
    let start = Instant::now();
    let whole = model.run_tokens(typed_tokens, None, Capture::Full, &faithful)?;
    let fresh_run_ms = start.elapsed().as_secs_f64() * 1e3;
    let scores = |r: &crate::analysis::Run| r.neuron.as_ref().map(|n| n.scores.as_slice().to_vec()).unwrap_or_default();
    anyhow::ensure!(
        same(shown.attention.as_slice(), whole.attention.as_slice()) && same(&scores(&shown), &scores(&whole)),
        "the app's reused run differs from a fresh one"
    );
    let median_ms = median(&mut times_ms);
    let run_median_ms = median(&mut run_ms);
    let paused_run_median_ms = median(&mut paused_ms);
    println!(
        "tokens={} runs={runs} median_ms={median_ms:.3} min_ms={:.3} run_median_ms={run_median_ms:.3} paused_run_median_ms={paused_run_median_ms:.3} mode=typing rows_checked={rows} fresh_ms={fresh_ms:.3} first_run_ms={first_run_ms:.3} fresh_run_ms={fresh_run_ms:.3} equal_to_fresh=bits",
        ids.len(),
        times_ms[0]
    );
    Ok(())
}

/// Checks that every row of `probs` (rows of `n`) sums to 1 — consuming the attention so that no
/// step can be skipped — and returns how many rows it checked.
fn check_rows(probs: &[f32], n: usize) -> candle_core::Result<usize> {
    for (i, row) in probs.chunks(n.max(1)).enumerate() {
        let sum: f32 = row.iter().sum();
        if (sum - 1.0).abs() > 1e-3 {
            return Err(candle_core::Error::Msg(format!("row {i} sums to {sum}, not 1")));
        }
    }
    Ok(probs.len() / n.max(1))
}

/// Where the time of a lazy run went, in milliseconds.
#[derive(Debug, Default, Clone, Copy)]
#[allow(clippy::struct_field_names)] // units in names
struct LazyTimes {
    /// The pass that keeps the streams.
    streams_ms: f64,
    /// Every layer's queries and keys, from its stream.
    layers_ms: f64,
    /// Every head's attention, from its layer's queries and keys.
    heads_ms: f64,
    /// Pooled: until the runs of the first layer were made (what the app shows first).
    first_layer_ms: f64,
}

/// Produces every layer × head's attention of `tokens` once, as `mode` says; returns the rows
/// checked (layers × heads × n, whatever the mode), and in the lazy mode where the time went.
fn produce(
    model: &LoadedModel,
    tokens: &crate::analysis::Tokens,
    mode: BenchMode,
) -> anyhow::Result<(usize, LazyTimes)> {
    let mut times = LazyTimes::default();
    let start = Instant::now();
    let faithful = Interventions::default();
    let n = tokens.len();
    let (ids, types) = (&tokens.ids, &tokens.type_ids);
    let net = &model.net;
    let rows = match mode {
        BenchMode::Train | BenchMode::Memory => {
            anyhow::bail!("--mode train and --mode memory are not passes of a model on one input")
        }
        BenchMode::Record => {
            // Held whole, so nothing can be skipped: not checked, so that its figures stay those of
            // the benchmark before the streaming modes.
            let run = model.run_tokens(tokens.clone(), None, Capture::Attention, &faithful)?;
            run.attention.as_slice().len() / n.max(1)
        }
        BenchMode::Layers => {
            let mut rows = 0;
            let each_layer = EachLayer::new(|_, probs: &[f32]| {
                rows += check_rows(probs, n)?;
                Ok(())
            });
            net.run(Input::new(ids, types, &faithful), &mut { each_layer })?;
            rows
        }
        BenchMode::Heads => {
            let checked: Mutex<candle_core::Result<usize>> = Mutex::new(Ok(0));
            let visit = |_, _, probs: &[f32], _: Option<&[f32]>| {
                let rows = check_rows(probs, n);
                if let Ok(mut c) = checked.lock() {
                    *c = match (std::mem::replace(&mut *c, Ok(0)), rows) {
                        (Ok(a), Ok(b)) => Ok(a + b),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    };
                }
            };
            net.run(Input::new(ids, types, &faithful), &mut EachHead::new(&visit))?;
            checked.into_inner().map_err(|_| anyhow::anyhow!("a head's check panicked"))??
        }
        BenchMode::Pooled => {
            let mut first = None;
            let runs = model
                .run_long(tokens, None, &faithful, None, &mut |_| {
                    first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1e3);
                    true
                })?
                .ok_or_else(|| anyhow::anyhow!("the pooled pass stopped"))?;
            times.first_layer_ms = first.unwrap_or_else(|| start.elapsed().as_secs_f64() * 1e3);
            let long = runs.overview.long.as_ref().ok_or_else(|| anyhow::anyhow!("no spans"))?;
            let w = long.spans.len();
            let mut rows = 0;
            for (i, row) in runs.overview.attention.as_slice().chunks(w.max(1)).enumerate() {
                check_rows(row, w)?;
                rows += long.spans[i % w].len(); // a pooled row stands for its span's queries
            }
            rows
        }
        BenchMode::Lens | BenchMode::LensColumn => {
            let positions = if mode == BenchMode::Lens { Vec::new() } else { vec![n - 1] };
            let lens = model.lens(tokens, &positions, 5, &[], &faithful)?;
            let cells = lens.streams * lens.positions.len();
            for c in 0..cells {
                let top = lens.top_probs[c * 5];
                anyhow::ensure!(top > 0.0 && top <= 1.0 + 1e-6, "cell {c}: top probability {top}");
            }
            cells
        }
        BenchMode::Typing | BenchMode::Patch | BenchMode::PatchFull => {
            anyhow::bail!("the typing and patching modes are timed on their own")
        }
        BenchMode::Contributions => {
            let run = model.contributions(tokens, &faithful)?;
            run.graph.layers.iter().map(|l| l.mlp.len()).sum()
        }
        BenchMode::Lazy => {
            let start = Instant::now();
            let streams = net.forward_streams(ids, types, &faithful)?;
            times.streams_ms = start.elapsed().as_secs_f64() * 1e3;
            let mut probs = vec![0.0; n * n];
            let mut rows = 0;
            for l in 0..streams.layers() {
                let start = Instant::now();
                let layer = net.layer_attention(&streams, l)?;
                times.layers_ms += start.elapsed().as_secs_f64() * 1e3;
                for h in 0..net.description().heads {
                    let start = Instant::now();
                    layer.head_into(h, &mut probs);
                    times.heads_ms += start.elapsed().as_secs_f64() * 1e3;
                    rows += check_rows(&probs, n)?;
                }
            }
            rows
        }
    };
    Ok((rows, times))
}

/// Runs `attnviz bench`.
pub fn run(model_dir: Option<&Path>, args: &BenchArgs) -> anyhow::Result<()> {
    if args.mode == BenchMode::Train {
        return super::train::bench(args.steps);
    }
    if args.mode == BenchMode::Memory {
        return memory(model_dir, args.tokens);
    }
    if args.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let model = super::load_model(model_dir)?;
    if let BenchMode::Patch | BenchMode::PatchFull = args.mode {
        let reuse = if args.mode == BenchMode::Patch {
            crate::model::patch::Reuse::Changed
        } else {
            crate::model::patch::Reuse::FullPasses
        };
        return patching(&model, args.runs, reuse);
    }
    let max = model.tokenizer.max_len();
    if args.tokens < 2 || args.tokens > max {
        anyhow::bail!("--tokens must be between 2 and {max} (the model's longest input), got {}", args.tokens);
    }
    let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, args.tokens)?;
    anyhow::ensure!(tokens.len() == args.tokens, "could only make {} tokens", tokens.len());
    if args.mode == BenchMode::Typing {
        return typing(&model, &tokens, args.runs);
    }
    let warm_up = if args.runs == 1 { 0 } else { 3 };
    for _ in 0..warm_up {
        produce(&model, &tokens, args.mode)?;
    }
    let mut times_ms = Vec::with_capacity(args.runs);
    let (mut rows, mut lazy) = (0, LazyTimes::default());
    for _ in 0..args.runs {
        let start = Instant::now();
        (rows, lazy) = produce(&model, &tokens, args.mode)?;
        times_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let d = model.description();
    let expected = match args.mode {
        BenchMode::Lens => (d.layers + 1) * args.tokens,
        BenchMode::LensColumn => d.layers + 1,
        BenchMode::Contributions => d.layers * args.tokens,
        _ => d.layers * d.heads * args.tokens,
    };
    anyhow::ensure!(
        rows == expected,
        "checked {rows} rows, not {expected} (every layer × head × query, or every cell)"
    );
    let median_ms = median(&mut times_ms);
    let mode = args.mode.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
    println!(
        "tokens={} runs={} median_ms={median_ms:.3} min_ms={:.3} mode={mode} rows_checked={rows}",
        args.tokens, args.runs, times_ms[0]
    );
    if args.mode == BenchMode::Pooled {
        println!("first_layer_ms={:.3}", lazy.first_layer_ms);
    }
    if args.mode == BenchMode::Lazy {
        // The last run: the pass that kept the streams, then per layer and per head on demand.
        let (layers, heads) = (d.layers as f64, (d.layers * d.heads) as f64);
        println!(
            "streams_pass_ms={:.3} layer_qk_ms={:.3} head_ms={:.3}",
            lazy.streams_ms,
            lazy.layers_ms / layers,
            lazy.heads_ms / heads
        );
    }
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
