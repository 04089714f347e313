//! The one pass and its named points (issue 24): what a listener reads reassembles what is known —
//! each head's write plus the output bias is the attention block's output, each block's parts add
//! up to the stream leaving it, every part's write sums to the final residual, the final norm's
//! scale is the one its kind defines — and asking for writes changes no bit of the attention or
//! the output. For every fixture family (encoders, decoders, encoder–decoders' decoders, GGUF).
#![allow(clippy::unwrap_used)]

mod common;

use attnviz::model::describe::{NormKind, NormPlacement};
use attnviz::model::engine::{
    Context, Edit, EngineError, Input, LayerSlots, Listener, PassShape, Point, Record, Wants, Writable,
};
use attnviz::model::intervene::Knockout;
use attnviz::model::{Capture, Interventions, LoadedModel, Network};
use common::{Rng, bits, fixture_models as fixtures, loaded_fixtures, root};

/// `a + b` element by element.
fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(a, b)| a + b).collect()
}

/// Largest |a − b| over the largest |a| (or 1).
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

/// Records the attention (through [`Record`]) and copies every point.
struct Everything {
    record: Record,
    writes: bool,
    resid_pre: Vec<Vec<f32>>,
    resid_mid: Vec<Vec<f32>>,
    resid_post: Vec<Vec<f32>>,
    /// `[layer][head]`.
    head_writes: Vec<Vec<Vec<f32>>>,
    /// `[layer][head]`: `seq_len × hidden` values through the head's output columns.
    head_values: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    attn_out: Vec<(Vec<f32>, Vec<f32>)>,
    cross_out: Vec<Vec<f32>>,
    mlp_out: Vec<Vec<f32>>,
    final_norm: Option<(Vec<f32>, Vec<f32>)>,
    /// Stop after this many layers.
    stop_after: Option<usize>,
    /// What changes the pass (nothing when None).
    edit: Option<EditFn>,
}

/// What an [`EditFn`] calls.
type EditClosure = dyn FnMut(Writable<'_>) -> Result<(), EngineError> + Send;

/// An [`Edit`] made of a closure.
struct EditFn(Box<EditClosure>);

impl Edit for EditFn {
    fn edit(&mut self, point: Writable<'_>) -> Result<(), EngineError> {
        (self.0)(point)
    }
}

impl Everything {
    fn new(writes: bool) -> Self {
        Self {
            record: Record::new(Capture::Attention),
            writes,
            resid_pre: Vec::new(),
            resid_mid: Vec::new(),
            resid_post: Vec::new(),
            head_writes: Vec::new(),
            head_values: Vec::new(),
            attn_out: Vec::new(),
            cross_out: Vec::new(),
            mlp_out: Vec::new(),
            final_norm: None,
            stop_after: None,
            edit: None,
        }
    }

    /// Records the attention and the read points, and changes the pass with `edit`.
    fn editing(edit: impl FnMut(Writable<'_>) -> Result<(), EngineError> + Send + 'static) -> Self {
        Self { edit: Some(EditFn(Box::new(edit))), ..Self::new(false) }
    }
}

impl Listener for Everything {
    fn wants(&self) -> Wants {
        Wants { writes: self.writes, head_values: self.writes }
    }

    fn start(&mut self, shape: &PassShape) {
        self.record.start(shape);
    }

    fn layer_slots(&mut self, layer: usize) -> LayerSlots<'_> {
        LayerSlots { edit: self.edit.as_mut().map(|e| e as &mut dyn Edit), ..self.record.layer_slots(layer) }
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        match point {
            Point::ResidPre { layer, stream } => {
                assert_eq!(layer, self.resid_pre.len(), "layers in order");
                self.resid_pre.push(stream.to_vec());
            }
            Point::HeadWrite { layer, head, write } => {
                if head == 0 {
                    assert_eq!(layer, self.head_writes.len());
                    self.head_writes.push(Vec::new());
                }
                self.head_writes[layer].push(write.to_vec());
            }
            Point::HeadValues { layer, head, values, row_scales } => {
                if head == 0 {
                    assert_eq!(layer, self.head_values.len());
                    self.head_values.push(Vec::new());
                }
                self.head_values[layer].push((values.to_vec(), row_scales.to_vec()));
            }
            Point::AttnOut { out, bias, .. } => self.attn_out.push((out.to_vec(), bias.to_vec())),
            Point::ResidMid { stream, .. } => self.resid_mid.push(stream.to_vec()),
            Point::CrossOut { out, .. } => self.cross_out.push(out.to_vec()),
            Point::MlpOut { out, .. } => self.mlp_out.push(out.to_vec()),
            Point::ResidPost { stream, .. } => self.resid_post.push(stream.to_vec()),
            Point::FinalNorm { input, scale } => self.final_norm = Some((input.to_vec(), scale.to_vec())),
            Point::Route { layer, experts, probs, chosen, weights } => {
                // Handed after the layer's MLP ran, before the stream leaves it.
                assert_eq!(layer + 1, self.resid_pre.len(), "a route inside its layer");
                assert_eq!(chosen.len(), weights.len());
                assert_eq!(probs.len() % experts, 0, "a distribution per token");
                assert!(chosen.iter().all(|&c| (c as usize) < experts), "expert ids in range");
            }
        }
        Ok(())
    }

    fn layer_done(&mut self, layer: usize) -> Result<(), EngineError> {
        match self.stop_after {
            Some(k) if layer + 1 == k => Err(EngineError::Stopped),
            _ => Ok(()),
        }
    }
}

/// Runs `input` on `net` twice — recording attention only, and with every point and write — and
/// checks what the points must reassemble.
fn check_points(what: &str, net: &Network, ids: &[u32], type_ids: &[u32], iv: &Interventions, encoder: Option<&[f32]>) {
    let d = net.description();
    let context = || match encoder {
        Some(e) => Context::Encoder(net.encoder_states(e).unwrap()),
        None => Context::Fresh,
    };
    let mut plain = Record::new(Capture::Attention);
    let plain_last = net.run(Input::new(ids, type_ids, iv).within(context()), &mut plain).unwrap();
    let plain = plain.into_output(plain_last);
    let mut all = Everything::new(true);
    let last = net.run(Input::new(ids, type_ids, iv).within(context()), &mut all).unwrap();

    // Asking for writes changes nothing.
    assert_eq!(bits(&last), bits(&plain.last_hidden), "{what}: last hidden");
    let Everything {
        record,
        resid_pre,
        resid_mid,
        resid_post,
        head_writes,
        head_values,
        attn_out,
        cross_out,
        mlp_out,
        final_norm,
        ..
    } = all;
    let out = record.into_output(last.clone());
    assert_eq!(bits(&out.probs), bits(&plain.probs), "{what}: attention");
    assert_eq!(bits(&out.cross), bits(&plain.cross), "{what}: cross-attention");

    let layers = iv.first_layers.unwrap_or(d.layers);
    assert_eq!(resid_pre.len(), layers, "{what}");
    assert_eq!(resid_post.len(), layers, "{what}");
    assert_eq!(head_writes.len(), layers, "{what}");
    assert_eq!(mlp_out.len(), layers, "{what}");
    assert_eq!(cross_out.len(), if encoder.is_some() { layers } else { 0 }, "{what}");
    assert_eq!(resid_mid.len(), if d.parallel_residual { 0 } else { layers }, "{what}");
    for l in 0..layers {
        // The heads' writes + the output bias = the attention block's output.
        let (out, bias) = &attn_out[l];
        assert_eq!(head_writes[l].len(), d.heads, "{what}");
        let mut sum: Vec<f32> = bias.iter().copied().cycle().take(out.len()).collect();
        for (h, write) in head_writes[l].iter().enumerate() {
            if iv.ablated.contains(&(l, h)) {
                assert!(write.iter().all(|&v| v == 0.0), "{what}: ablated head {l}:{h} writes nothing");
            }
            sum = add(&sum, write);
        }
        let diff = rel_diff(out, &sum);
        assert!(diff < 1e-5, "{what}: layer {l}: heads + bias vs attention output: {diff}");
        // A head's write is its attention over its values: Σ_j A[i, j] · values[j].
        let (n, hidden, keys) = (ids.len(), d.hidden, ids.len());
        for h in (0..d.heads).filter(|&h| !iv.ablated.contains(&(l, h))) {
            let probs = &plain.probs[(l * d.heads + h) * n * keys..][..n * keys];
            let mut mixed = vec![0.0f32; n * hidden];
            for i in 0..n {
                for j in 0..keys {
                    let a = probs[i * keys + j];
                    for (m, v) in mixed[i * hidden..(i + 1) * hidden].iter_mut().zip(&head_values[l][h].0[j * hidden..])
                    {
                        *m += a * v;
                    }
                }
            }
            // An output norm (Gemma 2 and 3, OLMo-2) divides each query row's write by its scale.
            for (row, s) in mixed.chunks_mut(hidden).zip(&head_values[l][h].1) {
                for m in row.iter_mut() {
                    *m /= s;
                }
            }
            let diff = rel_diff(&head_writes[l][h], &mixed);
            assert!(diff < 1e-5, "{what}: {l}:{h}: write vs attention over values: {diff}");
        }
        if l + 1 < layers {
            assert_eq!(bits(&resid_post[l]), bits(&resid_pre[l + 1]), "{what}: {l} post = {} pre", l + 1);
        }
        // A pre-LN block's parts add up to the stream leaving it, bit for bit.
        if d.norm == NormPlacement::Pre {
            if d.parallel_residual {
                let parts = add(&mlp_out[l], &out[..]);
                assert_eq!(bits(&resid_post[l]), bits(&add(&resid_pre[l], &parts)), "{what}: parallel block {l}");
            } else {
                let mut mid = add(out, &resid_pre[l]);
                if let Some(cross) = cross_out.get(l) {
                    mid = add(cross, &mid);
                }
                assert_eq!(bits(&resid_mid[l]), bits(&mid), "{what}: mid {l}");
                assert_eq!(bits(&resid_post[l]), bits(&add(&mlp_out[l], &resid_mid[l])), "{what}: post {l}");
            }
        }
    }
    // Every part's write sums to the final residual (pre-LN: nothing but additions between them).
    if d.norm == NormPlacement::Pre {
        let mut total = resid_pre[0].clone();
        for l in 0..layers {
            total = add(&total, &attn_out[l].0);
            if let Some(cross) = cross_out.get(l) {
                total = add(&total, cross);
            }
            total = add(&total, &mlp_out[l]);
        }
        let diff = rel_diff(&resid_post[layers - 1], &total);
        assert!(diff < 1e-5, "{what}: embeddings + every write vs the final residual: {diff}");
    }
    // The final norm's input is the last stream; its scale is the one its kind defines.
    match (d.final_norm, final_norm) {
        (true, Some((input, scale))) => {
            assert_eq!(bits(&input), bits(&resid_post[layers - 1]), "{what}: final norm input");
            let h = d.hidden;
            assert_eq!(scale.len(), input.len() / h, "{what}");
            for (row, &s) in input.chunks(h).zip(&scale) {
                let mean = if d.norm_kind == NormKind::Layer {
                    row.iter().map(|&v| f64::from(v)).sum::<f64>() / h as f64
                } else {
                    0.0
                };
                let spread = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / h as f64;
                let want = (spread + f64::from(d.norm_eps)).sqrt();
                assert!((f64::from(s) - want).abs() <= 1e-5 * want.max(1.0), "{what}: scale {s} vs {want}");
            }
        }
        (false, None) => {}
        (has, got) => panic!("{what}: final norm {has} but point {}", got.is_some()),
    }

    // A listener's error stops the pass after that layer.
    if layers > 1 {
        let mut stopping = Everything::new(false);
        stopping.stop_after = Some(1);
        let err = net.run(Input::new(ids, type_ids, iv).within(context()), &mut stopping).unwrap_err();
        assert!(matches!(err, EngineError::Stopped), "{what}: {err}");
        assert_eq!(stopping.resid_pre.len(), 1, "{what}: stopped after layer 0");
    }
}

#[test]
fn every_read_point_reassembles_what_it_must_in_every_family() {
    let mut rng = Rng(0x240e_9a55_2026);
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let model = LoadedModel::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let net = &model.net;
        let d = net.description();
        let encoded = model.tokenizer.encode("The animal didn't cross the street because it was too tired.", None);
        let tokens = encoded.unwrap().tokens;
        check_points(&name, net, &tokens.ids, &tokens.type_ids, &Interventions::default(), None);
        // Random input with random interventions.
        let n = 1 + rng.below(d.max_len.min(20));
        let ids: Vec<u32> = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
        let mut iv = Interventions::default();
        iv.ablated.insert((rng.below(d.layers), rng.below(d.heads)));
        iv.temperature = 0.7;
        check_points(&format!("{name} (random, ablated)"), net, &ids, &vec![0; n], &iv, None);
        if let Some(decoder) = &model.decoder {
            let encoder_hidden = net
                .forward(&tokens.ids, &tokens.type_ids, Capture::Attention, &Interventions::default())
                .unwrap()
                .last_hidden;
            let dd = decoder.net.description();
            let target: Vec<u32> = (0..5).map(|_| rng.below(dd.vocab_size) as u32).collect();
            check_points(
                &format!("{name} decoder"),
                &decoder.net,
                &target,
                &[0; 5],
                &Interventions::default(),
                Some(&encoder_hidden),
            );
            // Without its encoder, the decoder says what it needs.
            let err = decoder
                .net
                .run(Input::new(&target, &[0; 5], &Interventions::default()), &mut Record::new(Capture::Attention))
                .unwrap_err();
            assert!(matches!(err, EngineError::NeedsEncoder { .. }), "{name}: {err}");
        }
    }
}

#[test]
fn bad_input_and_contexts_are_typed_errors_of_the_engine() {
    let model = LoadedModel::load(&root().join("tests/fixtures/models/tiny-llama")).unwrap();
    let net = &model.net;
    let d = net.description();
    let faithful = Interventions::default();
    let mut record = Record::new(Capture::Attention);
    let mut run = |ids: &[u32], types: &[u32]| net.run(Input::new(ids, types, &faithful), &mut record).unwrap_err();
    assert!(matches!(run(&[], &[]), EngineError::Segments { tokens: 0, .. }));
    assert!(matches!(run(&[1, 2], &[0]), EngineError::Segments { tokens: 2, segments: 1 }));
    let too_long = vec![1; d.max_len + 1];
    assert!(matches!(run(&too_long, &vec![0; d.max_len + 1]), EngineError::TooLong { .. }));
    assert!(matches!(run(&[d.vocab_size as u32], &[0]), EngineError::TokenId { .. }));
    let mut iv = Interventions::default();
    iv.ablated.insert((d.layers, 0));
    let err = net.run(Input::new(&[1], &[0], &iv), &mut Record::new(Capture::Attention)).unwrap_err();
    assert!(matches!(err, EngineError::Intervention(_)), "{err}");
    // An encoder's output for a model without cross-attention; a cache of an encoder.
    assert!(matches!(net.encoder_states(&[0.0; 4]), Err(EngineError::NoCrossAttention { .. })));
    let bert = LoadedModel::load(&root().join("tests/fixtures/models/tiny-bert")).unwrap();
    assert!(matches!(bert.net.new_cache(), Err(EngineError::NotCausal { .. })));
    // A cache continues the pass: the rows of the last token equal a fresh pass's.
    let mut cache = net.new_cache().unwrap();
    let first = net.step(&[5, 6, 7], &mut cache, &faithful).unwrap();
    let next = net.step(&[8], &mut cache, &faithful).unwrap();
    let whole = net.forward(&[5, 6, 7, 8], &[0; 4], Capture::Attention, &faithful).unwrap();
    assert_eq!(first.probs.len(), d.layers * d.heads * 3 * 3);
    for lh in 0..d.layers * d.heads {
        let row = &whole.probs[lh * 16 + 12..lh * 16 + 16];
        assert_eq!(bits(row), bits(&next.probs[lh * 4..lh * 4 + 4]), "row of the cached step");
    }
}

#[test]
fn the_expected_tensors_are_what_the_network_loads() {
    // Derived from the loader itself: every fixture's canonical tensors that the list calls
    // required are there, and the list names nothing the network does not read.
    for dir in fixtures().into_iter().filter(|d| d.join("config.json").is_file()) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let model = LoadedModel::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = attnviz::model::engine::expected_tensors(model.net.description());
        assert!(expected.iter().any(|e| e.name == "embed.tokens.weight" && e.required), "{name}");
        let mut names: Vec<_> = expected.iter().map(|e| &e.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), expected.len(), "{name}: each tensor once");
        let f32_bytes: u64 = attnviz::model::engine::weight_bytes(model.net.description());
        assert!(f32_bytes as usize >= model.net.large_weight_bytes(), "{name}");
    }
}

/// Runs `ids` with `listener` (fresh, faithful) and returns its attention and last hidden state.
fn run_with(net: &Network, ids: &[u32], mut listener: Everything) -> (Everything, Vec<f32>, Vec<f32>) {
    let faithful = Interventions::default();
    let last = net.run(Input::new(ids, &vec![0; ids.len()], &faithful), &mut listener).unwrap();
    let record = std::mem::replace(&mut listener.record, Record::new(Capture::Attention));
    let probs = record.into_output(Vec::new()).probs;
    (listener, probs, last)
}

#[test]
fn every_writable_point_changes_what_it_must_in_every_family() {
    let mut rng = Rng(0x38_2026_0001);
    for (name, model) in loaded_fixtures() {
        let net = &model.net;
        let d = net.description().clone();
        let n = 2 + rng.below(d.max_len.min(12) - 1);
        let ids: Vec<u32> = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
        let other: Vec<u32> = (0..n).map(|_| rng.below(d.vocab_size) as u32).collect();
        let (l, h) = (rng.below(d.layers), rng.below(d.heads));
        let (plain, probs, last) = run_with(net, &ids, Everything::new(false));

        // Reading every writable point (and writing back what is there) changes no bit.
        let (_, p, x) = run_with(net, &ids, Everything::editing(|_| Ok(())));
        assert_eq!((bits(&p), bits(&x)), (bits(&probs), bits(&last)), "{name}: an edit that reads");

        // Zeroing a head's output is ablating it.
        let hd = d.head_dim;
        let zero_head = move |w: Writable<'_>| {
            if let Writable::HeadOut { layer, context, .. } = w
                && layer == l
            {
                for row in context.chunks_mut(hd * d.heads) {
                    row[h * hd..(h + 1) * hd].fill(0.0);
                }
            }
            Ok(())
        };
        let (_, p, x) = run_with(net, &ids, Everything::editing(zero_head));
        let ablated = Interventions { ablated: [(l, h)].into(), ..Interventions::default() };
        let want = net.forward(&ids, &vec![0; n], Capture::Attention, &ablated).unwrap();
        assert_eq!((bits(&p), bits(&x)), (bits(&want.probs), bits(&want.last_hidden)), "{name}: head {l}:{h}");

        // The attention block's and the MLP's writes, zeroed, leave the stream as it was.
        if d.norm == NormPlacement::Pre && !d.parallel_residual {
            let zero = move |w: Writable<'_>| {
                match w {
                    Writable::AttnOut { layer, out, .. } | Writable::MlpOut { layer, out, .. } if layer == l => {
                        out.fill(0.0);
                    }
                    _ => {}
                }
                Ok(())
            };
            let (e, _, _) = run_with(net, &ids, Everything::editing(zero));
            assert_eq!(e.resid_mid[l], e.resid_pre[l], "{name}: no attention write at {l}");
            assert_eq!(e.resid_post[l], e.resid_mid[l], "{name}: no MLP write at {l}");
        }

        // A masked entry is a knockout: zero weight, the row renormalised over the keys left.
        let q = n - 1;
        let k = rng.below(n - 1);
        let mask = move |w: Writable<'_>| {
            if let Writable::Mask { layer, blocked, .. } = w
                && layer == l
            {
                blocked.push((q, k));
            }
            Ok(())
        };
        let (_, p, x) = run_with(net, &ids, Everything::editing(mask));
        let knocked = Interventions {
            knockout: [Knockout { layer: Some(l), query: q, key: k }].into(),
            ..Interventions::default()
        };
        let want = net.forward(&ids, &vec![0; n], Capture::Attention, &knocked).unwrap();
        assert_eq!((bits(&p), bits(&x)), (bits(&want.probs), bits(&want.last_hidden)), "{name}: mask {l}:{q}:{k}");
        for head in 0..d.heads {
            let row = &p[((l * d.heads + head) * n + q) * n..][..n];
            assert_eq!(row[k].to_bits(), 0, "{name}: knocked out");
            // (With attention sinks, the row and its sink's share: gpt-oss.)
            let sink = want.sinks.get((l * d.heads + head) * n + q).copied().unwrap_or(0.0);
            assert!((row.iter().sum::<f32>() + sink - 1.0).abs() < 1e-5, "{name}: the row renormalises");
        }

        // The stream entering layer 0 replaced by another input's is that input's run.
        let (o, _, other_last) = run_with(net, &other, Everything::new(false));
        let embeddings = o.resid_pre[0].clone();
        let replace = move |w: Writable<'_>| {
            if let Writable::ResidPre { layer: 0, stream, .. } = w {
                stream.copy_from_slice(&embeddings);
            }
            Ok(())
        };
        let (_, _, x) = run_with(net, &ids, Everything::editing(replace));
        assert_eq!(bits(&x), bits(&other_last), "{name}: another input's embeddings");

        // A pass resumed at layer l from the stream entering it is the whole pass, bit for bit; for a
        // decoder also after a cache of the first tokens' keys and values from layer l on.
        let faithful = Interventions::default();
        let types = vec![0; n];
        let stream = &plain.resid_pre[l];
        let mut record = Record::new(Capture::Attention);
        let resumed = net.run(Input::new(&ids, &types, &faithful).resumed(l, stream), &mut record).unwrap();
        assert_eq!(bits(&resumed), bits(&last), "{name}: resumed at {l}");
        if let Ok(mut cache) = net.new_cache() {
            net.step(&ids, &mut cache, &faithful).unwrap();
            let p = 1 + rng.below(n - 1);
            let mut prefix = cache.prefix(p, l);
            let rows = &stream[p * d.hidden..];
            let input = Input::new(&ids[p..], &types[p..], &faithful).within(Context::Cached(&mut prefix));
            let after = net.run(input.resumed(l, rows), &mut Record::new(Capture::Attention)).unwrap();
            assert_eq!(bits(&after), bits(&last[p * d.hidden..]), "{name}: resumed at {l} after {p} cached tokens");
            // That cache lacks the layers below l: a pass from layer 0 cannot continue it.
            if l > 0 {
                let err = net.step(&ids[..1], &mut prefix, &faithful).unwrap_err();
                assert!(matches!(err, EngineError::PartialCache { .. }), "{name}: {err}");
            }
        }
        let err = net.run(Input::new(&ids, &types, &faithful).resumed(d.layers, stream), &mut record).unwrap_err();
        assert!(matches!(err, EngineError::Resume { .. }), "{name}: {err}");
    }
}
