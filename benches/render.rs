//! What the head view's lines cost the CPU. A mouse move: the hovered token's lines of every head,
//! rasterised over the visible part of the line band (the app does this on each new hover), for
//! the embedded model's attention over a 240-token paragraph. A new run (a keystroke, a written
//! token): the picture of every line of a layer of SmolLM2, for the 52-token text that
//! `scripts/bench-typing.sh` types into.

use criterion::{Criterion, criterion_group, criterion_main};

use attnviz::model::loader::smollm2_dir;
use attnviz::model::{Capture, Interventions, LoadedModel, default_model_dir};
use attnviz::render::{HeadLines, Segment, draw_lines, head_colors, transparent_image};

/// The binary's allocator, so the figures are the app's ([`attnviz::alloc::Allocator`]).
#[global_allocator]
static ALLOCATOR: attnviz::alloc::Allocator = attnviz::alloc::Allocator;

/// A varied paragraph (attention over a repeated sentence is unusually peaked).
const PARAGRAPH: &str = "The river ran past the old mill, where children fed the ducks every morning before \
school. Their teacher, a patient woman from the mountains, explained how water turns a wheel and how \
the wheel grinds grain into flour. Later the students wrote short stories about cats, dogs, rivers and \
the people who build bridges across them; some drew maps, others counted the boats that passed. When \
the rain came, everyone ran inside and listened to the thunder while the baker handed out warm bread. ";

fn hover_lines(c: &mut Criterion) {
    let model = LoadedModel::load(&default_model_dir()).expect("embedded model");
    let tokens = model.tokenizer.encode_exactly(PARAGRAPH, 240).expect("tokens");
    let run = model.run_tokens(tokens, None, Capture::Attention, &Interventions::default()).expect("forward");
    let a = &run.attention;
    let n = a.seq_len();
    // The app's band at 1360×860: 184 px wide, 670 px of it visible, 18 px per row.
    let (width, height, row_h) = (184.0f32, 670.0f32, 18.0f32);
    let colors = head_colors(a.heads());
    let mut group = c.benchmark_group("head_view_hover_240_tokens");
    group.sample_size(20);
    for (name, query) in [("token_5", 5usize), ("token_30", 30)] {
        let y = |row: usize| (row as f32 + 0.5) * row_h;
        let lines: Vec<HeadLines> = (0..a.heads())
            .map(|h| HeadLines {
                color: colors[h],
                lines: (0..n)
                    .filter(|&k| a.get(0, h, query, k) >= 1.0 / 255.0)
                    .map(|k| Segment { from: (0.0, y(query)), to: (width, y(k)), alpha: a.get(0, h, query, k) })
                    .collect(),
            })
            .collect();
        let segments: usize = lines.iter().map(|h| h.lines.len()).sum();
        eprintln!("{name}: {segments} lines over {} heads", a.heads());
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut img = transparent_image(width, height);
                draw_lines(&mut img, &lines, 2.5);
                img
            });
        });
    }
    group.finish();
}

fn layer_lines(c: &mut Criterion) {
    let model = LoadedModel::load(&smollm2_dir()).expect("embedded SmolLM2");
    let sentence = "The animal didn't cross the street because it was too tired.";
    let text = [sentence; 4].join(" ");
    let run = model.run(&text, None).expect("forward");
    let a = &run.attention;
    let n = a.seq_len();
    // The app's picture at 1360×860 (`scripts/bench-typing.sh`): 474 px wide, 18 px per row.
    let (width, row_h, pad) = (474.0f32, 18.0f32, 12.0f32);
    let y = |row: usize| (row as f32 + 0.5) * row_h;
    let colors = head_colors(a.heads());
    let lines: Vec<HeadLines> = (0..a.heads())
        .map(|h| HeadLines {
            color: colors[h],
            lines: (0..n)
                .flat_map(|q| (0..n).map(move |k| (q, k)))
                .filter(|&(q, k)| a.get(0, h, q, k) >= 1.0 / 255.0)
                .map(|(q, k)| Segment { from: (pad, y(q)), to: (width - pad, y(k)), alpha: a.get(0, h, q, k) })
                .collect(),
        })
        .collect();
    let segments: usize = lines.iter().map(|h| h.lines.len()).sum();
    eprintln!("layer 0 of {n} tokens: {segments} lines over {} heads", a.heads());
    let mut group = c.benchmark_group("head_view_layer_lines");
    group.sample_size(20);
    group.bench_function(format!("{n}_tokens"), |b| {
        b.iter(|| {
            let mut img = transparent_image(width, n as f32 * row_h);
            draw_lines(&mut img, &lines, 2.5);
            img
        });
    });
    group.finish();
}

criterion_group!(benches, hover_lines, layer_lines);
criterion_main!(benches);
