//! Data derived from a run — head statistics, rollout, word merges, model-view thumbnails, the
//! head view's per-head matrices — computed on a named thread of its own, never in a draw
//! function. Each result is cached under the key of what it was computed from ([`DeriveKey`]);
//! views read the cache through [`Derived`] and ask for what is missing with a command.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};

use crate::analysis::select::{PairFilter, square_max, submatrix, submatrix_rect, visible_tokens};
use crate::analysis::{HeadStats, Run};
use crate::render::{Colormap, cells_rgba};

/// Largest model-view thumbnail side in texels; longer inputs are max-pooled down to it.
pub const THUMB_TEXELS: usize = 128;

/// Most attention cells a result may read to be computed on the UI thread when a streaming
/// generation shows its next run (a few milliseconds); larger ones go to the derive thread.
pub const CARRY_CELLS: usize = 1 << 21;

/// What a derived result is computed from. `view_id` names the shown run (it changes with every
/// new run and with the word toggle).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeriveKey {
    /// Per-head statistics of the shown run.
    Stats {
        /// The shown run.
        view_id: u64,
    },
    /// Head-role scores (previous-token, duplicate, induction, first-token) of the shown run.
    Roles {
        /// The shown run.
        view_id: u64,
    },
    /// Rollout after every layer, the given heads averaged per layer.
    Rollout {
        /// The shown run.
        view_id: u64,
        /// Heads averaged, sorted.
        heads: Vec<usize>,
    },
    /// One small RGBA picture per layer × head for the model view.
    Thumbnails {
        /// The shown run.
        view_id: u64,
        /// Colour map of the pictures.
        colormap: Colormap,
    },
    /// The head view's matrices of one layer: the shown tokens and one matrix per head.
    HeadMatrices {
        /// The shown run.
        view_id: u64,
        /// Layer drawn.
        layer_idx: usize,
        /// Whether special tokens are dropped (rows renormalised).
        hide_special: bool,
        /// Heads averaged by the rollout pseudo-layer (None: the layer's own heads).
        rollout: Option<Vec<usize>>,
    },
    /// The picture of every line of the head view (no token selected).
    HeadLines(Box<HeadLinesKey>),
    /// A model run merged into words (`source_id` names the token-level run).
    Words {
        /// Id of the token-level run.
        source_id: u64,
    },
    /// The run the views show for one attention of an encoder–decoder run
    /// ([`crate::analysis::stack::stack_run`]; `source_id` names the token-level run).
    Stack {
        /// Id of the token-level run.
        source_id: u64,
        /// Encoder, decoder or cross-attention.
        stack: crate::analysis::Stack,
    },
}

impl DeriveKey {
    /// The shown run the result belongs to (None for word merges, which make shown runs).
    pub fn view_id(&self) -> Option<u64> {
        match self {
            Self::Stats { view_id }
            | Self::Roles { view_id }
            | Self::Rollout { view_id, .. }
            | Self::Thumbnails { view_id, .. }
            | Self::HeadMatrices { view_id, .. } => Some(*view_id),
            Self::HeadLines(key) => key.matrices.view_id(),
            Self::Words { .. } | Self::Stack { .. } => None,
        }
    }

    /// This key for another shown run, if it is of a shown run and cheap enough to compute for
    /// `run` on the UI thread ([`CARRY_CELLS`]): what a streaming generation's next run needs at
    /// once ([`Derived::carry_over`]).
    fn carried(&self, view_id: u64, run: &Run) -> Option<Self> {
        let a = &run.attention;
        let cells = |heads: usize| heads * a.seq_len() * a.keys();
        let key = match self {
            Self::Stats { .. } => Self::Stats { view_id },
            Self::Thumbnails { colormap, .. } => Self::Thumbnails { view_id, colormap: *colormap },
            Self::HeadMatrices { layer_idx, hide_special, rollout: None, .. } if *layer_idx < a.layers() => {
                Self::HeadMatrices { view_id, layer_idx: *layer_idx, hide_special: *hide_special, rollout: None }
            }
            _ => return None,
        };
        let heads = if matches!(key, Self::HeadMatrices { .. }) { a.heads() } else { a.layers() * a.heads() };
        (cells(heads) <= CARRY_CELLS).then_some(key)
    }

    /// Jobs of the same kind replace each other in the queue (the newest wins).
    fn kind(&self) -> u8 {
        match self {
            Self::Stats { .. } => 0,
            Self::Rollout { .. } => 1,
            Self::Thumbnails { .. } => 2,
            Self::HeadMatrices { .. } => 3,
            Self::Words { .. } => 4,
            Self::Stack { .. } => 6,
            Self::HeadLines(_) => 5,
            Self::Roles { .. } => 7,
        }
    }
}

/// What the picture of a head view's lines depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeadLinesKey {
    /// The matrices drawn (a [`DeriveKey::HeadMatrices`]).
    pub matrices: DeriveKey,
    /// Heads drawn (indices into the matrices).
    pub heads: Vec<usize>,
    /// Heads of the layer (for their colours).
    pub n_heads: usize,
    /// Lines below this weight are left out (bits of an f32).
    pub min_weight: u32,
    /// Sentence-pair block shown.
    pub pair_filter: PairFilter,
    /// Pixels per point across and along the band (bits of f32s).
    pub pixels: (u32, u32),
    /// The room the view lays its body out in, in whole points ([`head_view_room`]).
    pub room: (u32, u32),
}

/// The room a head view of this size lays its body out in (its per-head bars excluded), in
/// steps of 16 points so that a window resized by a few points keeps its picture.
pub fn head_view_room(available: egui::Vec2, bars_width: f32) -> (u32, u32) {
    let step = |v: f32| ((v.max(0.0) / 16.0).floor() * 16.0) as u32;
    (step(available.x - 2.0 * bars_width), step(available.y))
}

/// Most lines drawn at once when no token is selected (the exported figures keep the same budget).
pub use crate::render::LINE_BUDGET;
/// Width of a line in points, anti-aliased edges included (a 1.5-point core with a half-point
/// feather on each side).
pub const LINE_WIDTH: f32 = 2.5;
/// Margin of a line picture beyond the lines' ends (their anti-aliased caps), in points.
pub const BAND_PAD: f32 = 2.0;

/// Every line of a head view, rasterized by `render::draw_lines` (the exported figure's
/// rasterizer) over the band between the label columns of [`crate::render::head_view_layout_fit`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinesPicture {
    /// Size in pixels.
    pub size: [usize; 2],
    /// Premultiplied RGBA.
    pub rgba: Vec<u8>,
    /// Lines drawn.
    pub line_count: usize,
    /// Lines that passed the threshold, before the budget was applied.
    pub candidate_count: usize,
    /// The weight below which lines were dropped to stay within [`LINE_BUDGET`], if it applied.
    pub budget_threshold: Option<f32>,
}

/// Thumbnails of every layer × head.
#[derive(Debug, Clone, PartialEq)]
pub struct Thumbnails {
    /// Side of each square picture in texels.
    pub side: usize,
    /// Unmultiplied RGBA pictures, `[layer * heads + head]`.
    pub rgba: Vec<Vec<u8>>,
}

/// The head view's matrices of one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadMatrices {
    /// Positions of the shown query tokens (rows, the left column).
    pub keep: Vec<usize>,
    /// Positions of the shown key tokens (columns, the right column): `keep` again except for
    /// cross-attention, whose keys are the source tokens.
    pub keep_keys: Vec<usize>,
    /// One `rows × cols` matrix per head (the shown tokens; one pseudo-head for the rollout).
    pub matrices: Vec<Vec<f32>>,
    /// A model with attention sinks: per head, each shown query's share of its sink (drawn as
    /// lines to a target below the keys, [`crate::render::sink_row`]); empty otherwise.
    pub sinks: Vec<Vec<f32>>,
}

impl HeadMatrices {
    /// Shown query tokens (rows).
    pub fn rows(&self) -> usize {
        self.keep.len()
    }

    /// Shown key tokens (columns).
    pub fn cols(&self) -> usize {
        self.keep_keys.len()
    }

    /// The weight shown query row `q` gives shown key column `k` in matrix `head`.
    pub fn weight(&self, head: usize, q: usize, k: usize) -> f32 {
        self.matrices[head][q * self.cols() + k]
    }

    /// The labels of the key column: the shown keys, then the sink's target when there are sinks.
    pub fn key_labels(&self, run: &Run) -> Vec<String> {
        let mut labels: Vec<String> = self.keep_keys.iter().map(|&p| run.key_label(p)).collect();
        if !self.sinks.is_empty() {
            crate::render::with_sink_target(&mut labels);
        }
        labels
    }

    /// The share shown query row `q` gives the sink of matrix `head` (None without sinks).
    pub fn sink(&self, head: usize, q: usize) -> Option<f32> {
        self.sinks.get(head).and_then(|s| s.get(q)).copied()
    }
}

/// A derived result.
#[derive(Debug, Clone)]
pub enum DerivedValue {
    /// Head statistics.
    Stats(Arc<HeadStats>),
    /// Head-role scores, or why there are none (cross-attention, pooled spans, merged words).
    Roles(Result<Arc<crate::analysis::roles::HeadScores>, String>),
    /// Rollout after every layer.
    Rollout(Arc<Vec<Vec<f32>>>),
    /// Model-view thumbnails.
    Thumbnails(Arc<Thumbnails>),
    /// Head-view matrices.
    HeadMatrices(Arc<HeadMatrices>),
    /// A run merged into words, or one stack of an encoder–decoder run: a run to show.
    ShownRun(Arc<Run>),
    /// The picture of a head view's lines.
    HeadLines(Arc<LinesPicture>),
}

/// The picture of every line of the head view `key` asks for (`m`: its matrices).
pub fn head_lines_picture(key: &HeadLinesKey, run: &Run, m: &HeadMatrices) -> LinesPicture {
    let (rows, cols) = (m.rows(), m.cols());
    let labels: Vec<String> = m.keep.iter().map(|&p| run.label(p)).collect();
    let key_labels = m.key_labels(run);
    let body = crate::render::head_view_layout_fit(&labels, &key_labels, (key.room.0 as f32, key.room.1 as f32));
    let min_weight = f32::from_bits(key.min_weight);
    let (segments, key_segments) = (&run.tokens.segments, &run.keys().segments);
    let admits = |q: usize, k: usize| key.pair_filter.admits(segments[m.keep[q]], key_segments[m.keep_keys[k]]);
    // Every line that passes the threshold...
    let mut lines: Vec<(f32, u32, u32, u32)> = Vec::new();
    for &h in &key.heads {
        let Some(matrix) = m.matrices.get(h) else { continue };
        for q in 0..rows {
            for k in 0..cols {
                let w = matrix[q * cols + k];
                if w >= min_weight && admits(q, k) {
                    lines.push((w, h as u32, q as u32, k as u32));
                }
            }
            // The head's sink, to its target below the keys.
            if let Some(w) = m.sink(h, q).filter(|&w| w >= min_weight) {
                lines.push((w, h as u32, q as u32, crate::render::sink_row(cols) as u32));
            }
        }
    }
    // ...but no more than the budget: keep the strongest.
    let candidate_count = lines.len();
    let budget_threshold = crate::render::keep_strongest(&mut lines, |l| l.0);
    let (sx, sy) = (f32::from_bits(key.pixels.0), f32::from_bits(key.pixels.1));
    let (left, width) = (body.line_x0 - BAND_PAD, body.line_x1 - body.line_x0 + 2.0 * BAND_PAD);
    let to_px = |x: f32, y: f32| ((x - left) * sx, y * sy);
    let colors = crate::render::head_colors(key.n_heads);
    let mut per_head: Vec<crate::render::HeadLines> = key
        .heads
        .iter()
        .map(|&h| crate::render::HeadLines { color: colors.get(h).copied().unwrap_or([128; 3]), lines: Vec::new() })
        .collect();
    for &(w, h, q, k) in &lines {
        let slot = key.heads.iter().position(|&x| x == h as usize).unwrap_or(0);
        let from = to_px(body.line_x0, body.row_y(q as usize));
        let to = to_px(body.line_x1, body.row_y(k as usize));
        per_head[slot].lines.push(crate::render::Segment { from, to, alpha: w.min(1.0) });
    }
    let mut img = crate::render::transparent_image(width * sx, body.height * sy);
    crate::render::draw_lines(&mut img, &per_head, LINE_WIDTH * sx);
    LinesPicture {
        size: [img.width() as usize, img.height() as usize],
        rgba: img.into_raw(),
        line_count: lines.len(),
        candidate_count,
        budget_threshold,
    }
}

/// The head-role scores of a run: over its tokens (the scores compare token ids), so not of
/// cross-attention, pooled spans or words.
fn role_scores(run: &Run) -> Result<Arc<crate::analysis::roles::HeadScores>, String> {
    let a = &run.attention;
    if !a.is_square() {
        return Err("Head roles are scores of self-attention: choose the encoder or decoder stack.".into());
    }
    if run.long.is_some() {
        return Err("Head roles compare tokens: a long input shown pooled into spans has none.".into());
    }
    if run.tokens.ids.len() != a.seq_len() {
        return Err("Head roles compare token ids: this run has none per row.".into());
    }
    Ok(Arc::new(crate::analysis::roles::HeadScores::compute(a, &run.tokens.ids)))
}

/// Computes `key` from `run` (on the derive thread); `matrices` are the head view's matrices a
/// [`DeriveKey::HeadLines`] draws.
pub fn compute(key: &DeriveKey, run: &Run, matrices: Option<&HeadMatrices>) -> DerivedValue {
    let a = &run.attention;
    match key {
        DeriveKey::Stats { .. } => {
            DerivedValue::Stats(Arc::new(HeadStats::compute(a, run.keys()).with_sinks(run.sinks.as_ref())))
        }
        DeriveKey::Roles { .. } => DerivedValue::Roles(role_scores(run)),
        // Not defined for cross-attention (the rollout view says so and never asks): one empty
        // matrix per layer rather than a product of rectangles.
        DeriveKey::Rollout { .. } if !a.is_square() => DerivedValue::Rollout(Arc::new(vec![Vec::new(); a.layers()])),
        DeriveKey::Rollout { heads, .. } => {
            DerivedValue::Rollout(Arc::new(crate::analysis::rollout::rollout(a, heads)))
        }
        DeriveKey::Thumbnails { colormap, .. } => {
            let mut side = 1;
            let rgba = (0..a.layers())
                .flat_map(|l| (0..a.heads()).map(move |h| (l, h)))
                .map(|(l, h)| {
                    // Cross-attention (targets × sources) is stretched into a square picture.
                    let (cells, s) = if run.has_mask() {
                        square_max(&run.masked(l, a.head(l, h)), a.seq_len(), a.keys(), THUMB_TEXELS)
                    } else {
                        square_max(a.head(l, h), a.seq_len(), a.keys(), THUMB_TEXELS)
                    };
                    side = s.max(1);
                    if cells.is_empty() { vec![0; 4] } else { cells_rgba(&cells, 0.0, 1.0, *colormap) }
                })
                .collect();
            DerivedValue::Thumbnails(Arc::new(Thumbnails { side, rgba }))
        }
        DeriveKey::HeadMatrices { layer_idx, hide_special, rollout, .. } => {
            let keep = visible_tokens(&run.tokens, *hide_special);
            let keep_keys = visible_tokens(run.keys(), *hide_special);
            let matrices = match rollout {
                // One pseudo-head: the rollout through layers 0..=layer (the view offers it only
                // for self-attention).
                Some(heads) if a.is_square() => {
                    let r = crate::analysis::rollout::rollout(a, heads).swap_remove(*layer_idx);
                    vec![submatrix(&r, a.seq_len(), &keep, *hide_special)]
                }
                _ => (0..a.heads())
                    .map(|h| submatrix_rect(a.head(*layer_idx, h), a.keys(), &keep, &keep_keys, *hide_special))
                    .collect(),
            };
            // The sinks' shares of the shown queries (not of the rollout's pseudo-head).
            let sinks = match (&run.sinks, rollout) {
                (Some(s), None) if *layer_idx < s.layers() => {
                    (0..s.heads()).map(|h| keep.iter().map(|&q| s.share(*layer_idx, h, q)).collect()).collect()
                }
                _ => Vec::new(),
            };
            DerivedValue::HeadMatrices(Arc::new(HeadMatrices { keep, keep_keys, matrices, sinks }))
        }
        DeriveKey::Words { .. } => DerivedValue::ShownRun(Arc::new(crate::analysis::words::merge_run(run))),
        // Without a decoder side only the encoder is shown (the view says why).
        DeriveKey::Stack { stack, .. } => DerivedValue::ShownRun(Arc::new(
            crate::analysis::stack::stack_run(run, *stack).unwrap_or_else(|_| run.clone()),
        )),
        DeriveKey::HeadLines(lines) => {
            let computed;
            let m = if let Some(m) = matrices {
                m
            } else {
                let DerivedValue::HeadMatrices(m) = compute(&lines.matrices, run, None) else {
                    unreachable!("head-view matrices are computed as such")
                };
                computed = m;
                &computed
            };
            DerivedValue::HeadLines(Arc::new(head_lines_picture(lines, run, m)))
        }
    }
}

/// Derived results of the shown run, and what is being computed.
#[derive(Debug, Default)]
pub struct Derived {
    values: HashMap<DeriveKey, DerivedValue>,
    pending: HashSet<DeriveKey>,
}

impl Derived {
    /// The result for `key`, if computed.
    pub fn get(&self, key: &DeriveKey) -> Option<&DerivedValue> {
        self.values.get(key)
    }

    /// Whether `key` is being computed.
    pub fn is_pending(&self, key: &DeriveKey) -> bool {
        self.pending.contains(key)
    }

    /// Whether anything is being computed.
    pub fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Head statistics of the shown run `view_id`.
    pub fn stats(&self, view_id: u64) -> Option<&Arc<HeadStats>> {
        match self.get(&DeriveKey::Stats { view_id }) {
            Some(DerivedValue::Stats(s)) => Some(s),
            _ => None,
        }
    }

    /// Head-role scores of the shown run `view_id` (or why there are none).
    pub fn roles(&self, view_id: u64) -> Option<&Result<Arc<crate::analysis::roles::HeadScores>, String>> {
        match self.get(&DeriveKey::Roles { view_id }) {
            Some(DerivedValue::Roles(r)) => Some(r),
            _ => None,
        }
    }

    /// Rollout after every layer of the shown run `view_id`, `heads` averaged.
    pub fn rollout(&self, view_id: u64, heads: &[usize]) -> Option<&Arc<Vec<Vec<f32>>>> {
        match self.get(&DeriveKey::Rollout { view_id, heads: heads.to_vec() }) {
            Some(DerivedValue::Rollout(r)) => Some(r),
            _ => None,
        }
    }

    /// Model-view thumbnails.
    pub fn thumbnails(&self, view_id: u64, colormap: Colormap) -> Option<&Arc<Thumbnails>> {
        match self.get(&DeriveKey::Thumbnails { view_id, colormap }) {
            Some(DerivedValue::Thumbnails(t)) => Some(t),
            _ => None,
        }
    }

    /// Head-view matrices for `key` (a [`DeriveKey::HeadMatrices`]).
    pub fn head_matrices(&self, key: &DeriveKey) -> Option<&Arc<HeadMatrices>> {
        match self.get(key) {
            Some(DerivedValue::HeadMatrices(m)) => Some(m),
            _ => None,
        }
    }

    /// The picture of a head view's lines for `key` (a [`DeriveKey::HeadLines`]).
    pub fn head_lines(&self, key: &DeriveKey) -> Option<&Arc<LinesPicture>> {
        match self.get(key) {
            Some(DerivedValue::HeadLines(p)) => Some(p),
            _ => None,
        }
    }

    /// Marks `key` as being computed; false when it is computed or running already.
    pub fn start(&mut self, key: &DeriveKey) -> bool {
        if self.values.contains_key(key) || self.pending.contains(key) {
            return false;
        }
        self.pending.insert(key.clone());
        true
    }

    /// Stores a finished result (dropped when it belongs to a run no longer shown; None: the job
    /// was dropped and may be asked for again).
    pub fn finish(&mut self, key: DeriveKey, value: Option<DerivedValue>, view_id: u64) {
        self.pending.remove(&key);
        if let Some(value) = value.filter(|_| key.view_id().is_none_or(|id| id == view_id)) {
            self.values.insert(key, value);
        }
    }

    /// The views show run `to` (`run`: a generation's next, or a keystroke's) after `from`: what
    /// was derived for `from` and is cheap ([`CARRY_CELLS`]) is computed for `to` at once, so the
    /// frame that shows the new run draws it whole — not a "computing" placeholder, then another
    /// frame when the derive thread answers. Returns how many results were carried.
    pub fn carry_over(&mut self, from: u64, to: u64, run: &Run) -> usize {
        let keys: Vec<DeriveKey> =
            self.values.keys().filter(|k| k.view_id() == Some(from)).filter_map(|k| k.carried(to, run)).collect();
        for key in &keys {
            let value = compute(key, run, None);
            self.values.insert(key.clone(), value);
        }
        keys.len()
    }

    /// Forgets results of runs other than `view_id` (and word merges other than `source_ids`).
    pub fn retain_run(&mut self, view_id: u64, source_ids: &[u64]) {
        let keep = |key: &DeriveKey| match key {
            DeriveKey::Words { source_id } | DeriveKey::Stack { source_id, .. } => source_ids.contains(source_id),
            other => other.view_id() == Some(view_id),
        };
        self.values.retain(|k, _| keep(k));
        self.pending.retain(|k| keep(k));
    }
}

/// A job for the derive thread: what to compute, from which run (and, for a lines picture, the
/// matrices already derived).
type DeriveJob = (DeriveKey, Arc<Run>, Option<Arc<HeadMatrices>>);

/// Handle to the named derive thread.
pub struct Deriver {
    jobs: Sender<DeriveJob>,
    done: Receiver<(DeriveKey, Option<DerivedValue>)>,
}

impl Deriver {
    /// Starts the thread; `wake` is called after each result (to repaint the UI).
    pub fn spawn(wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let (jobs, job_rx) = channel::<DeriveJob>();
        let (done_tx, done) = channel();
        std::thread::Builder::new().name("attnviz-derive".into()).spawn(move || {
            while let Ok(first) = job_rx.recv() {
                // Of everything queued, the newest job of each kind (older ones are stale).
                let mut queued = vec![first];
                loop {
                    match job_rx.try_recv() {
                        Ok(job) => {
                            let replaced = queued.iter().position(|(k, _, _)| {
                                // Runs A and B are both merged (or projected): never one for the other.
                                k.kind() == job.0.kind() && k.view_id().is_some()
                            });
                            if let Some(i) = replaced {
                                // Said, so the cache does not wait for it.
                                let (stale, _, _) = queued.remove(i);
                                if done_tx.send((stale, None)).is_err() {
                                    return;
                                }
                            }
                            queued.push(job);
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => return,
                    }
                }
                for (key, run, matrices) in queued {
                    let value = compute(&key, &run, matrices.as_deref());
                    if done_tx.send((key, Some(value))).is_err() {
                        return;
                    }
                    wake();
                }
            }
        })?;
        Ok(Self { jobs, done })
    }

    /// Queues a job (ignored if the thread has stopped, which only happens at exit).
    pub fn send(&self, key: DeriveKey, run: Arc<Run>, matrices: Option<Arc<HeadMatrices>>) {
        let _ = self.jobs.send((key, run, matrices));
    }

    /// A finished result, if any (None: the job was dropped for a newer one of its kind).
    pub fn try_recv(&self) -> Option<(DeriveKey, Option<DerivedValue>)> {
        self.done.try_recv().ok()
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the derived matrices copy values exactly
mod tests {
    use super::*;
    use crate::analysis::stack::{Stack, fixture::seq2seq_run, stack_run};

    #[test]
    fn cross_attention_derives_target_rows_source_columns_and_square_thumbnails() {
        let run = stack_run(&seq2seq_run(), Stack::Cross).unwrap();
        let key = DeriveKey::HeadMatrices { view_id: 1, layer_idx: 1, hide_special: false, rollout: Some(vec![0]) };
        let DerivedValue::HeadMatrices(m) = compute(&key, &run, None) else { panic!("head matrices") };
        // No rollout pseudo-layer for cross-attention: the layer's own heads.
        assert_eq!((m.rows(), m.cols(), m.matrices.len()), (2, 3, 2));
        assert_eq!(m.matrices[1], run.attention.head(1, 1));
        assert_eq!(m.weight(1, 1, 2), run.attention.get(1, 1, 1, 2));
        let lines = HeadLinesKey {
            matrices: key,
            heads: vec![0, 1],
            n_heads: 2,
            min_weight: 0.0f32.to_bits(),
            pair_filter: PairFilter::All,
            pixels: (1.0f32.to_bits(), 1.0f32.to_bits()),
            room: (0, 0),
        };
        let picture = head_lines_picture(&lines, &run, &m);
        assert_eq!(picture.line_count, 2 * 2 * 3, "a line per head, target and source token");
        let DerivedValue::Thumbnails(t) =
            compute(&DeriveKey::Thumbnails { view_id: 1, colormap: Colormap::Viridis }, &run, None)
        else {
            panic!("thumbnails")
        };
        assert_eq!((t.side, t.rgba.len(), t.rgba[0].len()), (3, 4, 3 * 3 * 4));
        let DerivedValue::Stats(s) = compute(&DeriveKey::Stats { view_id: 1 }, &run, None) else { panic!("stats") };
        assert_eq!(s.tokens, 2);
    }

    #[test]
    fn a_streamed_run_gets_the_cheap_results_of_the_run_before_computed_for_it() {
        let (before, next) = (seq2seq_run(), stack_run(&seq2seq_run(), Stack::Cross).unwrap());
        let matrices = DeriveKey::HeadMatrices { view_id: 1, layer_idx: 1, hide_special: false, rollout: None };
        let rollout = DeriveKey::Rollout { view_id: 1, heads: vec![0] };
        let mut derived = Derived::default();
        for key in [matrices, rollout.clone(), DeriveKey::Stats { view_id: 1 }, DeriveKey::Stats { view_id: 7 }] {
            assert!(derived.start(&key));
            let value = compute(&key, &before, None);
            derived.finish(key, Some(value), 1);
        }
        assert_eq!(derived.carry_over(1, 2, &next), 2, "the matrices and the statistics, not the rollout");
        let carried = DeriveKey::HeadMatrices { view_id: 2, layer_idx: 1, hide_special: false, rollout: None };
        let DerivedValue::HeadMatrices(want) = compute(&carried, &next, None) else { panic!("head matrices") };
        assert_eq!(derived.head_matrices(&carried).unwrap().matrices, want.matrices, "computed from the new run");
        assert!(derived.stats(2).is_some() && derived.rollout(2, &[0]).is_none());
        assert!(!derived.any_pending(), "nothing left for the derive thread");
    }
}
