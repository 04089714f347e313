//! Forward pass with attention capture on the embedded model at 8 / 32 / 128 / 512 tokens.
//! Compare with the `PyTorch` peer: `../shared/peer/torch_forward.py` (see README, "Speed").

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use attnviz::cli::bench::BENCH_TEXT;
use attnviz::model::Capture;
use attnviz::model::{LoadedModel, default_model_dir};

fn forward(c: &mut Criterion) {
    let model = LoadedModel::load(&default_model_dir()).expect("embedded model");
    let mut group = c.benchmark_group("forward_with_attention");
    group.sample_size(20);
    for n in [8usize, 32, 128, 512] {
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

criterion_group!(benches, forward);
criterion_main!(benches);
