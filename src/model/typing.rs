//! A keystroke computes what changed: a decoder's recorded run kept with its key/value cache, so
//! that the next input sharing a prefix with it runs only the tokens from the first that differs.
//! For a causal model the tokens before an edit have exactly the same keys, values and attention
//! rows as before, and the engine's products give a row the same bits however many rows run with
//! it, so the result is bit for bit a fresh pass's (`tests/typing.rs`). Encoders (every row reads
//! every token) and encoder–decoders' encoders run whole.
//!
//! The recorded rows are kept in blocks of [`BLOCK_ROWS`] query rows shared with the runs handed
//! out ([`Attention::from_blocks`]): a token typed at the end writes its row into the last block
//! (a copy of it while a shown run holds it), so a keystroke costs its rows, not `layers × heads ×
//! n²` values.

use std::sync::Arc;

use super::engine::{Capture, EngineError, KvCache, Network};
use super::intervene::Interventions;
use crate::analysis::{Attention, HeadVectors, ShapeError};

/// Query rows per block.
pub const BLOCK_ROWS: usize = 16;

/// Most tokens one step runs.
const STEP_TOKENS: usize = 128;

/// The last input run, its cache and what it recorded.
#[derive(Debug)]
pub struct PrefixRun {
    ids: Vec<u32>,
    interventions: Interventions,
    capture: Capture,
    cache: KvCache,
    /// The attention rows (above the diagonal a causal row is zero).
    probs: RowBlocks,
    /// With [`Capture::Full`], the scores the same way (above the diagonal, -inf).
    scores: Option<RowBlocks>,
    /// With [`Capture::Full`], each token's query and key (rows of `head_dim` values).
    vectors: Option<[RowBlocks; 2]>,
    /// `n × hidden`.
    hidden: Vec<f32>,
    /// The attention sink's share of each row, `[query][layer × head]` (models with sinks; else
    /// empty).
    sinks: Vec<f32>,
    /// The model has attention sinks.
    has_sinks: bool,
    layers: usize,
    heads: usize,
    /// Most tokens one step runs ([`STEP_TOKENS`]).
    step_tokens: usize,
}

/// What an update ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reused {
    /// Tokens taken from the previous run.
    pub kept: usize,
    /// Tokens run.
    pub ran: usize,
}

impl PrefixRun {
    /// A run of `ids` from nothing (all of them run) recording attention, or None for a network
    /// that cannot run token by token (an encoder) or whose rotary frequencies depend on the
    /// input's length (dynamic NTK, long-rope: a kept prefix was rotated for another length).
    ///
    /// # Errors
    /// What the pass refuses (token ids, interventions, length).
    pub fn start(net: &Network, ids: &[u32], interventions: &Interventions) -> Result<Option<Self>, EngineError> {
        Self::start_recording(net, ids, Capture::Attention, interventions)
    }

    /// [`Self::start`] recording `capture` (with [`Capture::Full`] what the neuron view reads:
    /// scores, queries and keys; a network that can run token by token has no score terms).
    ///
    /// # Errors
    /// What the pass refuses (token ids, interventions, length).
    pub fn start_recording(
        net: &Network,
        ids: &[u32],
        capture: Capture,
        interventions: &Interventions,
    ) -> Result<Option<Self>, EngineError> {
        if net.description().rotary_depends_on_length() {
            return Ok(None);
        }
        let Ok(cache) = net.new_cache() else { return Ok(None) };
        let mut run = Self {
            ids: Vec::new(),
            interventions: interventions.clone(),
            capture,
            cache,
            probs: RowBlocks::new(0.0),
            scores: (capture == Capture::Full).then(|| RowBlocks::new(f32::NEG_INFINITY)),
            vectors: (capture == Capture::Full).then(|| [RowBlocks::new(0.0), RowBlocks::new(0.0)]),
            hidden: Vec::new(),
            sinks: Vec::new(),
            has_sinks: net.description().attn_sinks,
            layers: 0,
            heads: net.description().heads,
            step_tokens: STEP_TOKENS,
        };
        run.update(net, ids, interventions)?;
        Ok(Some(run))
    }

    /// Runs at most `tokens` tokens in one step from now on (at least 1; the results are the
    /// same bits whatever it is — tests check that with a small number).
    pub fn set_step_tokens(&mut self, tokens: usize) {
        self.step_tokens = tokens.max(1);
    }

    /// What it records.
    pub fn capture(&self) -> Capture {
        self.capture
    }

    /// Tokens run so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The recorded attention, as a fresh pass records it (sharing this run's blocks).
    ///
    /// # Errors
    /// None in practice (the blocks are made for this shape).
    pub fn attention(&self) -> Result<Attention, ShapeError> {
        self.probs.attention((self.layers, self.heads, self.ids.len()))
    }

    /// With [`Capture::Full`], the recorded scores (sharing this run's blocks).
    ///
    /// # Errors
    /// None in practice (the blocks are made for this shape).
    pub fn scores(&self) -> Option<Result<Attention, ShapeError>> {
        self.scores.as_ref().map(|s| s.attention((self.layers, self.heads, self.ids.len())))
    }

    /// With [`Capture::Full`], the queries and the keys (sharing this run's blocks).
    ///
    /// # Errors
    /// None in practice (the blocks are made for this shape).
    pub fn vectors(&self, head_dim: usize) -> Option<Result<[HeadVectors; 2], ShapeError>> {
        let shape = (self.layers, self.heads, self.ids.len(), head_dim);
        let [q, k] = self.vectors.as_ref()?;
        Some((|| Ok([q.vectors(shape)?, k.vectors(shape)?]))())
    }

    /// For a model with attention sinks, the sink's share of each row, `[layer][head][query]`.
    ///
    /// # Errors
    /// None in practice (the shares are kept for this shape).
    pub fn sinks(&self) -> Option<Result<crate::analysis::Sinks, ShapeError>> {
        if !self.has_sinks {
            return None;
        }
        let (matrices, n) = (self.layers * self.heads, self.ids.len());
        let values =
            (0..matrices).flat_map(|lh| (0..n).map(move |q| (lh, q))).map(|(lh, q)| self.sinks[q * matrices + lh]);
        Some(crate::analysis::Sinks::new(self.layers, self.heads, n, values.collect()))
    }

    /// The recorded attention laid out `[layer][head][query][key]`, as a fresh pass's output
    /// holds it (`layers × heads × n²` values written).
    pub fn square_probs(&self) -> Vec<f32> {
        self.attention().map(|a| a.as_slice().to_vec()).unwrap_or_default()
    }

    /// The last hidden state, `n × hidden`.
    pub fn last_hidden(&self) -> &[f32] {
        &self.hidden
    }

    /// Layers recorded (fewer than the model's when the interventions stop early).
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Runs `ids` with `interventions`, reusing everything up to the first token that differs
    /// from the last input (nothing when the interventions changed).
    ///
    /// # Errors
    /// What the pass refuses; the run is then empty (the next update runs everything).
    pub fn update(&mut self, net: &Network, ids: &[u32], interventions: &Interventions) -> Result<Reused, EngineError> {
        let same_setting = self.interventions == *interventions;
        let mut kept = if same_setting { self.ids.iter().zip(ids).take_while(|(a, b)| a == b).count() } else { 0 };
        if kept == ids.len() && kept > 0 && kept == self.ids.len() {
            return Ok(Reused { kept, ran: 0 });
        }
        if !same_setting {
            self.interventions = interventions.clone();
        }
        // A shorter input that is a prefix of the last: keep its rows, run nothing.
        kept = kept.min(ids.len());
        let d = net.description();
        let (heads, hidden, head_dim, n) = (d.heads, d.hidden, d.head_dim, ids.len());
        self.cache.truncate(kept);
        for blocks in self.all_blocks() {
            blocks.truncate(kept);
        }
        self.hidden.truncate(kept * hidden);
        self.sinks.truncate(kept * self.layers * heads);
        // A long suffix (a first input) runs [`STEP_TOKENS`] at a time: each step's recorded rows
        // are copied into the blocks and its buffers reused, so the memory is the blocks'.
        for first in (kept..n).step_by(self.step_tokens) {
            let end = first.saturating_add(self.step_tokens).min(n);
            let m = end - first;
            let out = match net.step_recording(&ids[first..end], &mut self.cache, self.capture, interventions) {
                Ok(out) => out,
                Err(e) => {
                    self.clear();
                    return Err(e);
                }
            };
            self.layers = out.probs.len() / (heads * m * end).max(1);
            let matrices = self.layers * heads;
            self.probs.push_rows((first, end, n), matrices, &out.probs);
            if let Some(s) = &mut self.scores {
                s.push_rows((first, end, n), matrices, &out.scores);
            }
            if let Some([queries, keys]) = &mut self.vectors {
                let at = (first, end, matrices, head_dim);
                queries.push_vectors(at, &out.queries, |lh, q| (lh * m + q - first) * head_dim);
                keys.push_vectors(at, &out.keys, |lh, q| (lh * m + q - first) * head_dim);
            }
            self.hidden.extend_from_slice(&out.last_hidden);
            if self.has_sinks {
                self.sinks.extend(
                    (0..m).flat_map(|q| (0..matrices).map(move |lh| (lh, q))).map(|(lh, q)| out.sinks[lh * m + q]),
                );
            }
        }
        self.ids = ids.to_vec();
        Ok(Reused { kept, ran: n - kept })
    }

    /// Every kept set of rows.
    fn all_blocks(&mut self) -> impl Iterator<Item = &mut RowBlocks> {
        std::iter::once(&mut self.probs).chain(&mut self.scores).chain(self.vectors.iter_mut().flatten())
    }

    /// Forgets everything (the next update runs the whole input).
    fn clear(&mut self) {
        self.ids.clear();
        for blocks in self.all_blocks() {
            blocks.clear();
        }
        self.hidden.clear();
        self.sinks.clear();
        self.cache.truncate(0);
    }
}

/// Query rows of every layer × head in blocks of [`BLOCK_ROWS`] rows, `[matrix][row][stride]`
/// each; row `q` holds its keys `0..=q`, then `above` (a causal row's value after the diagonal)
/// to the stride, so that it reads right in a matrix of any length up to the stride.
#[derive(Debug)]
struct RowBlocks {
    above: f32,
    /// Values between two rows (room for the tokens still to come).
    stride: usize,
    /// Layer × head matrices the blocks hold.
    matrices: usize,
    /// Rows written.
    rows: usize,
    blocks: Vec<Arc<Vec<f32>>>,
}

impl RowBlocks {
    fn new(above: f32) -> Self {
        Self { above, stride: 0, matrices: 0, rows: 0, blocks: Vec::new() }
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.rows = 0;
    }

    /// Keeps the first `rows` rows (the rest are written again before they are read).
    fn truncate(&mut self, rows: usize) {
        self.rows = self.rows.min(rows);
        self.blocks.truncate(self.rows.div_ceil(BLOCK_ROWS));
    }

    /// Appends rows `first..n` from a step's `[matrix][new row][n]` values, with room for
    /// `total` tokens.
    fn push_rows(&mut self, (first, n, total): (usize, usize, usize), matrices: usize, recorded: &[f32]) {
        if total > self.stride || matrices != self.matrices {
            // Room for a quarter more tokens: the blocks are laid out again when it runs out.
            self.relayout(matrices, (total + total / 4 + 64).next_multiple_of(64));
        }
        let (m, above) = (n - first, self.above);
        self.push(first, n, |lh, q, dst| {
            dst[..=q].copy_from_slice(&recorded[(lh * m + q - first) * n..][..=q]);
            dst[q + 1..].fill(above);
        });
    }

    /// Appends vectors `first..n` of `width` values, `at(matrix, token)` giving where each starts
    /// in `recorded`.
    fn push_vectors(
        &mut self,
        (first, n, matrices, width): (usize, usize, usize, usize),
        recorded: &[f32],
        at: impl Fn(usize, usize) -> usize,
    ) {
        if width != self.stride || matrices != self.matrices {
            self.clear();
            (self.stride, self.matrices) = (width, matrices);
        }
        self.push(first, n, |lh, q, dst| dst.copy_from_slice(&recorded[at(lh, q)..][..width]));
    }

    /// Writes rows `first..n` of every matrix with `write(matrix, row, its stride of values)`.
    fn push(&mut self, first: usize, n: usize, mut write: impl FnMut(usize, usize, &mut [f32])) {
        debug_assert_eq!(first, self.rows);
        let (matrices, stride) = (self.matrices, self.stride);
        for q in first..n {
            let (b, r) = (q / BLOCK_ROWS, q % BLOCK_ROWS);
            if b == self.blocks.len() {
                self.blocks.push(Arc::new(crate::alloc::take(matrices * BLOCK_ROWS * stride)));
            }
            let block = unshared(&mut self.blocks[b], stride, r);
            for lh in 0..matrices {
                write(lh, q, &mut block[(lh * BLOCK_ROWS + r) * stride..][..stride]);
            }
        }
        self.rows = n;
    }

    /// Lays the rows of `matrices` matrices out `stride` apart (new blocks; runs handed out keep
    /// the old ones; other matrices: none kept).
    fn relayout(&mut self, matrices: usize, stride: usize) {
        if matrices != self.matrices {
            self.clear();
            self.matrices = matrices;
        }
        let old = std::mem::take(&mut self.blocks);
        for (b, block) in old.iter().enumerate() {
            let mut values = crate::alloc::take(self.matrices * BLOCK_ROWS * stride);
            for (lh, rows) in block.chunks(BLOCK_ROWS * self.stride).enumerate() {
                for (r, row) in rows.chunks(self.stride).enumerate() {
                    let dst = &mut values[(lh * BLOCK_ROWS + r) * stride..][..stride];
                    let q = b * BLOCK_ROWS + r;
                    if q < self.rows {
                        dst[..=q].copy_from_slice(&row[..=q]);
                        dst[q + 1..].fill(self.above);
                    }
                }
            }
            self.blocks.push(Arc::new(values));
        }
        self.stride = stride;
    }

    /// The blocks holding the first `n` rows, shared; None when there are none.
    fn first_blocks(&self, n: usize) -> Option<Vec<Arc<Vec<f32>>>> {
        (n > 0 && !self.blocks.is_empty()).then(|| self.blocks[..n.div_ceil(BLOCK_ROWS)].to_vec())
    }

    /// The first `n` rows as vectors of `layers × heads` matrices.
    fn vectors(&self, (layers, heads, n, width): (usize, usize, usize, usize)) -> Result<HeadVectors, ShapeError> {
        match self.first_blocks(n) {
            Some(blocks) => HeadVectors::from_blocks((layers, heads, n, width), BLOCK_ROWS, blocks),
            None => HeadVectors::new(layers, heads, n, width, Vec::new()),
        }
    }

    /// The first `n` rows as attention of `layers × heads` matrices.
    fn attention(&self, (layers, heads, n): (usize, usize, usize)) -> Result<Attention, ShapeError> {
        match self.first_blocks(n) {
            Some(blocks) => Attention::from_blocks((layers, heads, n), BLOCK_ROWS, self.stride, blocks),
            None => Attention::new(layers, heads, n, Vec::new()),
        }
    }
}

/// The block to write into: itself when no run handed out holds it, else a copy (in a fresh
/// buffer) that it then is — of its first `filled` rows of each matrix (`stride` values
/// each): the rows after them are written before anything reads them.
fn unshared(block: &mut Arc<Vec<f32>>, stride: usize, filled: usize) -> &mut Vec<f32> {
    if Arc::get_mut(block).is_none() {
        let mut copy = crate::alloc::take(block.len());
        let (matrix, rows) = (BLOCK_ROWS * stride, filled * stride);
        for (dst, src) in copy.chunks_mut(matrix).zip(block.chunks(matrix)) {
            dst[..rows].copy_from_slice(&src[..rows]);
        }
        *block = Arc::new(copy);
    }
    // Held by no one else now: no copy is made here.
    Arc::make_mut(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's recorded rows `first..n` of `matrices` matrices, `[matrix][row][n]`: the value of
    /// key `k` in row `q` of matrix `lh` is `version + lh·10⁴ + q·100 + k` (k ≤ q), else junk.
    fn step_rows(first: usize, n: usize, matrices: usize, version: f32) -> Vec<f32> {
        let mut out = Vec::new();
        for lh in 0..matrices {
            for q in first..n {
                out.extend(
                    (0..n).map(|k| if k <= q { version + (lh * 10_000 + q * 100 + k) as f32 } else { f32::NAN }),
                );
            }
        }
        out
    }

    /// The matrices a fresh pass records: rows of `versions[q]`, `above` after the diagonal.
    fn square(n: usize, matrices: usize, versions: &[f32], above: f32) -> Vec<f32> {
        let mut out = Vec::new();
        for lh in 0..matrices {
            for q in 0..n {
                out.extend(
                    (0..n).map(|k| if k <= q { versions[q] + (lh * 10_000 + q * 100 + k) as f32 } else { above }),
                );
            }
        }
        out
    }

    #[test]
    fn rows_shared_with_runs_handed_out_never_change_across_blocks_edits_and_relayouts() {
        let (layers, heads) = (1, 3);
        let matrices = layers * heads;
        let mut blocks = RowBlocks::new(f32::NEG_INFINITY);
        let mut versions = vec![0.0f32; 400];
        let mut held: Vec<(Attention, Vec<f32>)> = Vec::new();
        let mut n = 0;
        let push = |blocks: &mut RowBlocks, n: &mut usize, to: usize, version: f32, versions: &mut Vec<f32>| {
            blocks.push_rows((*n, to, to), matrices, &step_rows(*n, to, matrices, version));
            versions[*n..to].fill(version);
            *n = to;
        };
        // A first input, then tokens typed one at a time: across blocks of 16 rows and past the
        // stride the first input left room for (5 + 1 + 64 → 128), which lays the rows out again.
        push(&mut blocks, &mut n, 5, 0.0, &mut versions);
        let initial_stride = blocks.stride;
        for to in 6..=200 {
            push(&mut blocks, &mut n, to, 0.0, &mut versions);
            if [6, 16, 17, 33, 128, 129, 200].contains(&to) {
                let a = blocks.attention((layers, heads, n)).unwrap();
                held.push((a, square(n, matrices, &versions, f32::NEG_INFINITY)));
            }
        }
        assert!(blocks.stride > initial_stride, "the rows were laid out again");
        // An edit at token 50 (inside a block, shared with the runs held), then typing on; a
        // deletion to 40 (a prefix: nothing runs), then an edit at 37.
        blocks.truncate(50);
        n = 50;
        push(&mut blocks, &mut n, 60, 0.5, &mut versions);
        held.push((blocks.attention((layers, heads, n)).unwrap(), square(n, matrices, &versions, f32::NEG_INFINITY)));
        blocks.truncate(40);
        held.push((blocks.attention((layers, heads, 40)).unwrap(), square(40, matrices, &versions, f32::NEG_INFINITY)));
        n = 37;
        blocks.truncate(37);
        push(&mut blocks, &mut n, 45, 0.25, &mut versions);
        held.push((blocks.attention((layers, heads, n)).unwrap(), square(n, matrices, &versions, f32::NEG_INFINITY)));
        for (i, (a, expected)) in held.iter().enumerate() {
            let got = a.as_slice();
            assert_eq!(got.len(), expected.len(), "run {i}");
            assert!(
                got.iter().zip(expected).all(|(x, y)| x.to_bits() == y.to_bits()),
                "run {i} ({} tokens) changed or is wrong",
                a.seq_len()
            );
            // Rows read straight from the blocks agree with the laid-out matrix.
            let n = a.seq_len();
            assert_eq!(a.row(0, 2, n - 1), &expected[(2 * n + n - 1) * n..(2 * n + n) * n], "run {i}");
        }
    }
}
