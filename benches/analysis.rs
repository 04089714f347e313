//! What the analysis views compute from one run of the embedded model at 64 tokens: per-head
//! statistics, attention rollout, attention flow (n² max-flow problems) and the word merge.

use criterion::{Criterion, criterion_group, criterion_main};

use attnviz::analysis::{HeadStats, rollout, words};
use attnviz::cli::bench::BENCH_TEXT;
use attnviz::model::Capture;
use attnviz::model::{Interventions, LoadedModel, default_model_dir};

/// The binary's allocator, so the figures are the app's ([`attnviz::alloc::Allocator`]).
#[global_allocator]
static ALLOCATOR: attnviz::alloc::Allocator = attnviz::alloc::Allocator;

fn analysis(c: &mut Criterion) {
    let model = LoadedModel::load(&default_model_dir()).expect("embedded model");
    let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, 64).expect("tokens");
    let run = model.run_tokens(tokens, None, Capture::Attention, &Interventions::default()).expect("forward");
    let a = &run.attention;
    let heads: Vec<usize> = (0..a.heads()).collect();
    let last = a.layers() - 1;
    let mut group = c.benchmark_group("analysis_64_tokens");
    group.sample_size(10);
    group.bench_function("head_stats", |b| b.iter(|| HeadStats::compute(a, &run.tokens)));
    group.bench_function("rollout", |b| b.iter(|| rollout::rollout(a, &heads)));
    group.bench_function("flow_all_layers", |b| b.iter(|| rollout::flow(a, &heads, last)));
    group.bench_function("merge_words", |b| b.iter(|| words::merge_run(&run)));
    group.finish();
}

criterion_group!(benches, analysis);
criterion_main!(benches);
