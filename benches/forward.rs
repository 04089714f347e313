//! Forward pass with attention capture on the embedded model at 8 / 32 / 128 / 512 tokens, and on
//! any other model folder named by `ATTNVIZ_BENCH_MODEL` (e.g. a DeBERTa-v3 or RoBERTa folder: the
//! same sizes, up to the model's longest input).
//! Compare with the `PyTorch` peer: `../shared/peer/torch_forward.py` (commands and current figures in docs/performance.md).

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use attnviz::cli::bench::BENCH_TEXT;
use attnviz::model::Capture;
use attnviz::model::{LoadedModel, default_model_dir};

/// The binary's allocator, so the figures are the app's ([`attnviz::alloc::Allocator`]).
#[global_allocator]
static ALLOCATOR: attnviz::alloc::Allocator = attnviz::alloc::Allocator;

fn bench_model(c: &mut Criterion, group_name: &str, model: &LoadedModel) {
    let mut group = c.benchmark_group(group_name);
    group.sample_size(20);
    for n in [8usize, 32, 128, 512].into_iter().filter(|&n| n <= model.tokenizer.max_len()) {
        let tokens = model.tokenizer.encode_exactly(BENCH_TEXT, n).expect("tokens");
        assert_eq!(tokens.len(), n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &tokens, |b, tokens| {
            b.iter(|| {
                model
                    .run_tokens(tokens.clone(), None, Capture::Attention, &attnviz::model::Interventions::default())
                    .expect("forward")
            });
        });
    }
    group.finish();
}

fn forward(c: &mut Criterion) {
    let model = LoadedModel::load(&default_model_dir()).expect("embedded model");
    bench_model(c, "forward_with_attention", &model);
    if let Some(dir) = std::env::var_os("ATTNVIZ_BENCH_MODEL").map(PathBuf::from) {
        let other = LoadedModel::load(&dir).unwrap_or_else(|e| panic!("ATTNVIZ_BENCH_MODEL {}: {e}", dir.display()));
        let name = format!("forward_with_attention_{}", other.description().family);
        bench_model(c, &name, &other);
    }
}

criterion_group!(benches, forward);
criterion_main!(benches);
