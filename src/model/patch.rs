//! Activation patching (denoising, as `TransformerLens`' `patching` module): run the corrupted
//! input with one activation of the clean run put in, and measure the logit difference
//! `logit[answer] − logit[wrong]` at the last position. Listeners on the one pass
//! ([`super::engine::Edit`]): one keeps each run's activations at the patched site, one puts a
//! clean value in.
//!
//! A patched run changes nothing before the patched layer, and in a causal model nothing before
//! the first position whose value the patch changes: it resumes at that layer after a copy of the
//! corrupted run's keys and values of the earlier positions ([`Input::resumed`],
//! [`KvCache::prefix`]), and runs only those layers and positions, a few at a time — bit for bit the full patched
//! pass, which [`Reuse::FullPasses`] runs instead (as `TransformerLens` does, one pass per cell). A
//! cell whose clean value equals the corrupted one needs no pass at all: its difference is the
//! corrupted run's.
//!
//! The logits are the model's final ones: no family attnviz runs soft-caps its final logits (Gemma
//! 2 would, after the head); the metric reads them as the head gives them.

use std::sync::atomic::{AtomicBool, Ordering};

use super::engine::{Context, Edit, EngineError, Input, KvCache, Listener, Network, PassShape, Point, Writable};
use super::{Interventions, LoadedModel, ModelError, kernels};
use crate::analysis::Tokens;
use crate::analysis::patching::{PatchGrid, PatchInputs, PatchSite, Patching};

/// How a sweep runs its patched passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    /// Only the layers and positions a patch changes (the default): what a decoder can skip
    /// because its earlier positions never read later ones.
    #[default]
    Changed,
    /// One full pass per cell (the peers' way; for checks and the benchmark).
    FullPasses,
}

/// Where a sweep is: handed to [`SweepControl::progress`] after each cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepProgress {
    /// Cells done.
    pub done: usize,
    /// Cells in all.
    pub total: usize,
    /// The cell just done: `(layer, column)`.
    pub cell: (usize, usize),
    /// Its logit difference.
    pub value: f32,
}

/// What a sweep reports to and is stopped by (the app runs it in the background).
pub struct SweepControl<'a> {
    /// Called after each cell.
    pub progress: &'a mut dyn FnMut(SweepProgress),
    /// Set to stop the sweep: it returns [`EngineError::Stopped`] before the next cell.
    pub cancel: Option<&'a AtomicBool>,
}

impl std::fmt::Debug for SweepControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SweepControl").field("cancel", &self.cancel).finish_non_exhaustive()
    }
}

/// Which values of a layer a patch puts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cells<'a> {
    /// These positions of a position site ([`PatchSite::ResidPre`], `AttnOut`, `MlpOut`).
    Positions(&'a [usize]),
    /// One head's output at every position ([`PatchSite::Head`]).
    Head(usize),
}

/// What a run keeps of every layer: the stream entering it (the corrupted run resumes from it)
/// and the values at one site.
#[derive(Debug, Default)]
struct Keep {
    site: Option<PatchSite>,
    streams: bool,
    /// `[layer][position][hidden]`.
    entering: Vec<f32>,
    /// `[layer][position][width]` (width: hidden, or heads · `head_dim` for [`PatchSite::Head`]).
    values: Vec<f32>,
}

impl Listener for Keep {
    fn start(&mut self, _shape: &PassShape) {
        self.entering.clear();
        self.values.clear();
    }

    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        if let Point::ResidPre { stream, .. } = point {
            if self.streams {
                self.entering.extend_from_slice(stream);
            }
            if self.site == Some(PatchSite::ResidPre) {
                self.values.extend_from_slice(stream);
            }
        }
        Ok(())
    }

    fn layer_slots(&mut self, _layer: usize) -> super::engine::LayerSlots<'_> {
        let edit = matches!(self.site, Some(PatchSite::AttnOut | PatchSite::MlpOut | PatchSite::Head));
        super::engine::LayerSlots {
            edit: edit.then_some(self as &mut dyn Edit),
            ..super::engine::LayerSlots::default()
        }
    }
}

impl Edit for Keep {
    fn edit(&mut self, point: Writable<'_>) -> Result<(), EngineError> {
        match (self.site, point) {
            (Some(PatchSite::AttnOut), Writable::AttnOut { out, .. })
            | (Some(PatchSite::MlpOut), Writable::MlpOut { out, .. })
            | (Some(PatchSite::Head), Writable::HeadOut { context: out, .. }) => self.values.extend_from_slice(out),
            _ => {}
        }
        Ok(())
    }
}

/// Puts the clean run's values of one layer in.
struct Patch<'a> {
    site: PatchSite,
    layer: usize,
    cells: Cells<'a>,
    /// The clean run's values of the layer, `n × width` (every position of the input).
    clean: &'a [f32],
    width: usize,
    head_dim: usize,
}

impl Listener for Patch<'_> {
    fn layer_slots(&mut self, layer: usize) -> super::engine::LayerSlots<'_> {
        super::engine::LayerSlots {
            edit: (layer == self.layer).then_some(self as &mut dyn Edit),
            ..super::engine::LayerSlots::default()
        }
    }
}

impl Edit for Patch<'_> {
    fn edit(&mut self, point: Writable<'_>) -> Result<(), EngineError> {
        let ((PatchSite::ResidPre, Writable::ResidPre { first, stream: rows, .. })
        | (PatchSite::AttnOut, Writable::AttnOut { first, out: rows, .. })
        | (PatchSite::MlpOut, Writable::MlpOut { first, out: rows, .. })
        | (PatchSite::Head, Writable::HeadOut { first, context: rows, .. })) = (self.site, point)
        else {
            return Ok(());
        };
        let w = self.width;
        match self.cells {
            Cells::Positions(positions) => {
                let here = first..first + rows.len() / w;
                for &p in positions.iter().filter(|p| here.contains(p)) {
                    rows[(p - first) * w..(p - first + 1) * w].copy_from_slice(&self.clean[p * w..(p + 1) * w]);
                }
            }
            Cells::Head(h) => {
                let columns = h * self.head_dim..(h + 1) * self.head_dim;
                for (i, row) in rows.chunks_mut(w).enumerate() {
                    let clean = &self.clean[(first + i) * w..(first + i + 1) * w];
                    row[columns.clone()].copy_from_slice(&clean[columns.clone()]);
                }
            }
        }
        Ok(())
    }
}

/// The clean and the corrupted run of one sweep, kept: each run's values at the site, the
/// corrupted run's streams and (a decoder's) keys and values, and both logit differences.
#[derive(Debug)]
pub struct PatchRuns<'n> {
    net: &'n Network,
    site: PatchSite,
    interventions: Interventions,
    corrupted_ids: Vec<u32>,
    corrupted_types: Vec<u32>,
    tokens: [u32; 2],
    layers: usize,
    /// Values per position at the site: hidden, or heads · `head_dim`.
    width: usize,
    clean: Keep,
    corrupted: Keep,
    /// The corrupted run's keys and values (None for a network that cannot run token by token).
    cache: Option<KvCache>,
    clean_logit_diff: f32,
    corrupted_logit_diff: f32,
}

impl<'n> PatchRuns<'n> {
    /// Runs `clean` and `corrupted` (the same number of tokens) with `interventions`, keeping what
    /// a sweep at `site` reads; `tokens` are `[answer, wrong]`.
    pub fn new(
        net: &'n Network,
        (clean, corrupted): (&Tokens, &Tokens),
        tokens: [u32; 2],
        site: PatchSite,
        interventions: &Interventions,
    ) -> Result<Self, ModelError> {
        let d = net.description();
        check_pair(clean, corrupted)?;
        if !net.has_lm_head() {
            return Err(ModelError::Input(
                "patching measures a logit difference: this model has no language-model head".into(),
            ));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= d.vocab_size) {
            return Err(ModelError::Input(format!("token id {t} is outside the vocabulary ({})", d.vocab_size)));
        }
        let layers = interventions.first_layers.unwrap_or(d.layers);
        let width = if site == PatchSite::Head { d.heads * d.head_dim } else { d.hidden };
        let mut runs = Self {
            net,
            site,
            interventions: interventions.clone(),
            corrupted_ids: corrupted.ids.clone(),
            corrupted_types: corrupted.type_ids.clone(),
            tokens,
            layers,
            width,
            clean: Keep { site: Some(site), ..Keep::default() },
            corrupted: Keep { site: Some(site), streams: true, ..Keep::default() },
            cache: net.new_cache().ok(),
            clean_logit_diff: 0.0,
            corrupted_logit_diff: 0.0,
        };
        let last = net.run(Input::new(&clean.ids, &clean.type_ids, interventions), &mut runs.clean)?;
        runs.clean_logit_diff = runs.logit_diff(&last)?;
        let input = Input::new(&corrupted.ids, &corrupted.type_ids, interventions);
        let input = match &mut runs.cache {
            Some(cache) => input.within(Context::Cached(cache)),
            None => input,
        };
        let last = net.run(input, &mut runs.corrupted)?;
        runs.corrupted_logit_diff = runs.logit_diff(&last)?;
        Ok(runs)
    }

    /// The metric on the clean run.
    pub fn clean_logit_diff(&self) -> f32 {
        self.clean_logit_diff
    }

    /// The metric on the corrupted run.
    pub fn corrupted_logit_diff(&self) -> f32 {
        self.corrupted_logit_diff
    }

    /// The grid's size: `(layers, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        let d = self.net.description();
        (self.layers, if self.site.per_head() { d.heads } else { self.corrupted_ids.len() })
    }

    /// `logit[answer] − logit[wrong]` at the last row of a pass's last hidden state.
    fn logit_diff(&self, last_hidden: &[f32]) -> Result<f32, ModelError> {
        let h = self.net.description().hidden;
        let row = &last_hidden[last_hidden.len() - h..];
        let logits = self
            .net
            .token_logits(row, &self.tokens)
            .ok_or_else(|| ModelError::Input("this model has no language-model head".into()))?;
        Ok(logits[0] - logits[1])
    }

    /// A run's values of layer `layer`, `n × width`.
    fn layer_values<'a>(&self, keep: &'a Keep, layer: usize) -> &'a [f32] {
        let size = self.corrupted_ids.len() * self.width;
        &keep.values[layer * size..(layer + 1) * size]
    }

    /// The first position whose value the patch changes, or None when it changes none.
    fn first_changed(&self, layer: usize, cells: Cells<'_>) -> Option<usize> {
        let (clean, corrupted) = (self.layer_values(&self.clean, layer), self.layer_values(&self.corrupted, layer));
        let w = self.width;
        let differs = |p: usize, columns: std::ops::Range<usize>| {
            let (a, b) = (&clean[p * w..(p + 1) * w], &corrupted[p * w..(p + 1) * w]);
            a[columns.clone()].iter().zip(&b[columns]).any(|(x, y)| x.to_bits() != y.to_bits())
        };
        match cells {
            Cells::Positions(positions) => positions.iter().copied().filter(|&p| differs(p, 0..w)).min(),
            Cells::Head(h) => {
                let hd = self.net.description().head_dim;
                (0..self.corrupted_ids.len()).find(|&p| differs(p, h * hd..(h + 1) * hd))
            }
        }
    }

    /// The logit difference of the corrupted input with the clean values of `cells` at `layer`
    /// put in, and whether it needed a pass (a patch that changes no value is the corrupted run).
    pub fn patched(&self, layer: usize, cells: Cells<'_>, reuse: Reuse) -> Result<(f32, bool), ModelError> {
        let (layers, columns) = self.shape();
        let valid = match cells {
            Cells::Positions(p) => p.iter().all(|&p| p < columns),
            Cells::Head(h) => h < columns && self.site.per_head(),
        };
        if layer >= layers || !valid || matches!(cells, Cells::Positions(_)) == self.site.per_head() {
            return Err(ModelError::Input(format!(
                "no such cell of a {} sweep: layer {layer} of {layers}, {cells:?} of {columns}",
                self.site.name()
            )));
        }
        let d = self.net.description();
        let patch = Patch {
            site: self.site,
            layer,
            cells,
            clean: self.layer_values(&self.clean, layer),
            width: self.width,
            head_dim: d.head_dim,
        };
        let (ids, types, iv) = (&self.corrupted_ids, &self.corrupted_types, &self.interventions);
        if reuse == Reuse::FullPasses {
            let last = self.net.run(Input::new(ids, types, iv), &mut { patch })?;
            return Ok((self.logit_diff(&last)?, true));
        }
        let Some(first) = self.first_changed(layer, cells) else {
            return Ok((self.corrupted_logit_diff, false));
        };
        // Without a cache every position runs again (an encoder's earlier rows read later ones).
        let first = if self.cache.is_some() { first } else { 0 };
        let n = ids.len();
        let stream_len = n * d.hidden;
        let entering = &self.corrupted.entering[layer * stream_len..(layer + 1) * stream_len];
        let Some(mut prefix) = self.cache.as_ref().map(|c| c.prefix(first, layer)) else {
            let last = self.net.run(Input::new(ids, types, iv).resumed(layer, entering), &mut { patch })?;
            return Ok((self.logit_diff(&last)?, true));
        };
        // A few rows at a time after the cache: the products of up to `BLOCK_ROWS` rows read a
        // GGUF matrix's blocks in registers instead of widening it (the same bits either way).
        let mut patch = patch;
        let mut last = Vec::new();
        for start in (first..n).step_by(kernels::BLOCK_ROWS) {
            let end = (start + kernels::BLOCK_ROWS).min(n);
            let rows = &entering[start * d.hidden..end * d.hidden];
            let input = Input::new(&ids[start..end], &types[start..end], iv).resumed(layer, rows);
            last = self.net.run(input.within(Context::Cached(&mut prefix)), &mut patch)?;
        }
        Ok((self.logit_diff(&last)?, true))
    }

    /// Every cell of the sweep, layer by layer: the grid (`layers × columns`) and how many cells
    /// needed a pass. `control` hears of each cell and may stop the sweep
    /// ([`EngineError::Stopped`]).
    pub fn sweep(&self, reuse: Reuse, control: &mut SweepControl<'_>) -> Result<(Vec<f32>, usize), ModelError> {
        let (layers, columns) = self.shape();
        let total = layers * columns;
        let mut grid = Vec::with_capacity(total);
        let mut passes = 0;
        for layer in 0..layers {
            for column in 0..columns {
                if control.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    return Err(EngineError::Stopped.into());
                }
                let position = [column];
                let cells = if self.site.per_head() { Cells::Head(column) } else { Cells::Positions(&position) };
                let (value, ran) = self.patched(layer, cells, reuse)?;
                passes += usize::from(ran);
                grid.push(value);
                (control.progress)(SweepProgress { done: grid.len(), total, cell: (layer, column), value });
            }
        }
        Ok((grid, passes))
    }
}

/// Refuses a clean and a corrupted input of different lengths, naming both and showing how each
/// was tokenized.
fn check_pair(clean: &Tokens, corrupted: &Tokens) -> Result<(), ModelError> {
    if clean.len() == corrupted.len() && !clean.is_empty() {
        return Ok(());
    }
    Err(ModelError::Input(format!(
        "the clean and corrupted inputs must have as many tokens: clean has {} ({}), corrupted {} ({})",
        clean.len(),
        clean.tokens.join(" "),
        corrupted.len(),
        corrupted.tokens.join(" ")
    )))
}

/// A patching sweep asked for: the two inputs, the two tokens, where, with what interventions.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchRequest {
    /// The clean input.
    pub clean: Tokens,
    /// The corrupted input (as many tokens).
    pub corrupted: Tokens,
    /// The token whose logit counts for.
    pub answer: u32,
    /// The token whose logit counts against.
    pub wrong: u32,
    /// Where to patch.
    pub site: PatchSite,
    /// Applied to both runs (and every patched one).
    pub interventions: Interventions,
}

impl LoadedModel {
    /// The request of a sweep from texts: each input tokenized as any input (cut to the model's
    /// positions with a notice in the error), `answer` and `wrong` one token each, given as text
    /// (`" Mary"`) or the vocabulary's spelling (`"ĠMary"`).
    pub fn patch_request(
        &self,
        (clean, corrupted): (&str, &str),
        (answer, wrong): (&str, &str),
        site: PatchSite,
        interventions: &Interventions,
    ) -> Result<PatchRequest, ModelError> {
        if self.decoder.is_some() {
            return Err(ModelError::Input(format!(
                "{} is an encoder–decoder: patching runs on a language model with one stack",
                self.name
            )));
        }
        let token = |what: &str, text: &str| {
            self.tokenizer.single_id(text).map_err(|e| match e {
                ModelError::Tokenizer(why) => ModelError::Input(format!("--{what}: {why}")),
                e => e,
            })
        };
        let (answer, wrong) = (token("answer", answer)?, token("wrong", wrong)?);
        let encode = |text: &str| -> Result<Tokens, ModelError> {
            let encoded = self.tokenizer.encode(text, None)?;
            if let Some(cut) = encoded.truncation {
                return Err(ModelError::Input(cut));
            }
            Ok(encoded.tokens)
        };
        let (clean, corrupted) = (encode(clean)?, encode(corrupted)?);
        check_pair(&clean, &corrupted)?;
        let request = PatchRequest { clean, corrupted, answer, wrong, site, interventions: interventions.clone() };
        self.check_tokens(&request.clean, interventions)?;
        self.check_tokens(&request.corrupted, interventions)?;
        Ok(request)
    }

    /// Runs a sweep (see [`PatchRuns`]): the clean and corrupted runs, then every cell,
    /// reporting each to `control`.
    pub fn patch(
        &self,
        request: &PatchRequest,
        reuse: Reuse,
        control: &mut SweepControl<'_>,
    ) -> Result<Patching, ModelError> {
        let PatchRequest { clean, corrupted, answer, wrong, site, interventions } = request;
        let runs = PatchRuns::new(&self.net, (clean, corrupted), [*answer, *wrong], *site, interventions)?;
        let (logit_diff, passes) = runs.sweep(reuse, control)?;
        let (layers, columns) = runs.shape();
        let inputs = PatchInputs {
            clean_tokens: clean.tokens.clone(),
            corrupted_tokens: corrupted.tokens.clone(),
            answer: self.tokenizer.token_of(*answer),
            wrong: self.tokenizer.token_of(*wrong),
        };
        Ok(Patching {
            site: *site,
            inputs,
            clean_logit_diff: runs.clean_logit_diff(),
            corrupted_logit_diff: runs.corrupted_logit_diff(),
            grid: PatchGrid { layers, columns, logit_diff, passes },
        })
    }
}
