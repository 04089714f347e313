//! The logit lens as the app holds it: computed on the worker thread in parts (the selected
//! position's column first, then the grid in chunks of positions), gathered here by what they
//! were computed for ([`LensKey`]) so a part of an older input is never shown.

pub mod part;
pub mod settings;
pub mod view;

pub use part::{LENS_CHUNK, LENS_TOP_K, LensKey, LensPart, lens_chunks};
pub use settings::{LensMode, LensSettings};

use std::sync::Arc;
use std::time::Instant;

use crate::app::session::{FILE_NEEDS_MODEL, Shown};
use crate::app::state::{Source, View};
use crate::app::worker::Job;

use crate::export::GridFigure;
use crate::render::GridBar;

/// The lens of one token run as far as it is computed.
#[derive(Debug, Clone, Default)]
pub struct LensState {
    /// What it is of (None: nothing asked yet).
    pub key: Option<LensKey>,
    /// Positions of the input.
    pub positions: usize,
    /// Streams (layers + 1), once a part arrived.
    pub streams: usize,
    /// The parts that arrived: a column, then grid chunks.
    pub parts: Vec<Arc<LensPart>>,
    /// The watched tokens found (as typed, with their id), in the order of `tracked[1..]`.
    pub watched: Vec<(String, u32)>,
    /// Why a watched token was left out ("“Parisx” is not one token …").
    pub watch_notes: Vec<String>,
    /// Why the lens failed.
    pub error: Option<String>,
    /// The job in flight: its id, the column it computes first and the chunks it computes.
    pub in_flight: Option<(u64, Option<usize>, Vec<usize>)>,
    /// Milliseconds from the first request to the whole grid (None while computing).
    pub grid_ms: Option<f64>,
    /// Milliseconds from the request to the selected position's column.
    pub column_ms: Option<f64>,
    /// When the lens of this key was first asked for.
    pub started: Option<std::time::Instant>,
}

impl LensState {
    /// A fresh lens of `key` over `positions` tokens.
    pub fn new(key: LensKey, positions: usize) -> Self {
        Self { key: Some(key), positions, ..Self::default() }
    }

    /// The part holding position `pos`, and its index there: the newest (a grid chunk replaces
    /// the column computed alone first, which can differ from it in the last bits of a float).
    pub fn find(&self, pos: usize) -> Option<(&LensPart, usize)> {
        self.parts.iter().rev().find_map(|p| p.lens.positions.iter().position(|&q| q == pos).map(|i| (&**p, i)))
    }

    /// Whether every position has arrived.
    pub fn grid_done(&self) -> bool {
        self.positions > 0 && (0..self.positions).all(|p| self.find(p).is_some())
    }

    /// How many positions have arrived.
    pub fn positions_done(&self) -> usize {
        (0..self.positions).filter(|&p| self.find(p).is_some()).count()
    }

    /// Start positions of the grid chunks not yet computed (a column alone does not count).
    pub fn missing_chunks(&self) -> Vec<usize> {
        lens_chunks(self.positions)
            .into_iter()
            .filter(|c| !c.clone().all(|p| self.find(p).is_some()))
            .map(|c| c.start)
            .collect()
    }

    /// The label of token `id` (its id in angle brackets if no part named it).
    pub fn label(&self, id: u32) -> String {
        self.parts.iter().find_map(|p| p.labels.get(&id).cloned()).unwrap_or_else(|| format!("<{id}>"))
    }

    /// The top candidates of `stream` at `pos`, if computed.
    pub fn cell(&self, stream: usize, pos: usize) -> Option<Vec<(u32, f32)>> {
        self.find(pos).map(|(part, i)| part.lens.cell(stream, i).collect())
    }

    /// Followed token `t` (0: the final prediction) at `pos` in `stream`: its id, probability, rank.
    pub fn tracked(&self, t: usize, stream: usize, pos: usize) -> Option<(u32, f32, u32)> {
        let (part, i) = self.find(pos)?;
        let tracked = part.lens.tracked.get(t)?;
        let n = part.lens.positions.len();
        Some((tracked.ids[i], tracked.probs[stream * n + i], tracked.ranks[stream * n + i]))
    }
}

/// The colour value of a rank: 1 at rank 1, 0 at rank [`RANK_FLOOR`] and beyond (log scale).
pub fn rank_value(rank: u32) -> f32 {
    (1.0 - (rank.max(1) as f32).ln() / (RANK_FLOOR as f32).ln()).clamp(0.0, 1.0)
}

/// The rank the rank mode's colours stop at.
pub const RANK_FLOOR: u32 = 1000;

/// The name of stream `s` of `streams`: the embeddings, then the stream after each block.
pub fn stream_name(s: usize, streams: usize) -> String {
    match s {
        0 => "embeddings".to_string(),
        s if s + 1 == streams => format!("block {s} (output)"),
        s => format!("block {s}"),
    }
}

impl LensState {
    /// What cell (`stream`, `pos`) shows in `mode` (ranks of followed token `rank_of`): its text
    /// and its colour value in 0..1 (None: not computed yet).
    pub fn shown(&self, mode: LensMode, rank_of: usize, stream: usize, pos: usize) -> Option<(String, f32)> {
        match mode {
            LensMode::Probability => {
                let (id, prob) = self.cell(stream, pos)?.first().copied()?;
                Some((self.label(id), prob))
            }
            LensMode::Rank => {
                let (_, _, rank) = self.tracked(rank_of, stream, pos)?;
                Some((rank.to_string(), rank_value(rank)))
            }
        }
    }

    /// The name of followed token `t`: the final prediction, or the watched token as typed.
    pub fn followed_name(&self, t: usize) -> String {
        match t {
            0 => "the final prediction".to_string(),
            t => self.watched.get(t - 1).map_or_else(String::new, |(w, _)| format!("“{w}”")),
        }
    }

    /// The lens as an exportable figure: every cell as shown in `mode` (not computed: NaN).
    pub fn figure(
        &self,
        labels: &[String],
        model: &str,
        (mode, rank_of): (LensMode, usize),
        selected: usize,
    ) -> GridFigure {
        let (rows, cols) = (self.streams, self.positions);
        let mut cells = Vec::with_capacity(rows * cols);
        let mut values = Vec::with_capacity(rows * cols);
        for s in 0..rows {
            for p in 0..cols {
                let (text, value) = self.shown(mode, rank_of, s, p).unwrap_or_else(|| (String::new(), f32::NAN));
                cells.push(text);
                values.push(match mode {
                    LensMode::Probability => value,
                    // The numbers written are the ranks themselves.
                    LensMode::Rank => self.tracked(rank_of, s, p).map_or(f32::NAN, |(_, _, r)| r as f32),
                });
            }
        }
        let note = match mode {
            LensMode::Probability => {
                "each cell: the stream's most probable next token; colour: its probability".to_string()
            }
            LensMode::Rank => format!(
                "each cell: the rank of {} (1 = top); colour: log rank, dark past {RANK_FLOOR}",
                self.followed_name(rank_of)
            ),
        };
        let range = (0.0, 1.0);
        // The PNG colours ranks by their log value; the table keeps the ranks.
        let colour_values = match mode {
            LensMode::Probability => None,
            LensMode::Rank => Some(values.iter().map(|&r| if r.is_nan() { r } else { rank_value(r as u32) }).collect()),
        };
        GridFigure {
            title: format!("{model} · logit lens"),
            note,
            row_labels: (0..rows).map(|s| stream_name(s, rows)).collect(),
            col_labels: labels.to_vec(),
            cells,
            values,
            range,
            selected_col: Some(selected),
            colour_values,
            bar: Some(match mode {
                LensMode::Probability => GridBar { label: "probability".into(), ticks: Vec::new() },
                LensMode::Rank => GridBar {
                    label: "rank".into(),
                    ticks: [1, 10, 100, RANK_FLOOR]
                        .iter()
                        .map(|&r| {
                            let label = if r == RANK_FLOOR { format!("{r}+") } else { r.to_string() };
                            (rank_value(r), label)
                        })
                        .collect(),
                },
            }),
        }
    }
}

/// The logit lens view's results: the lens of the token run as far as it is computed, and why
/// it does not apply.
#[derive(Default)]
pub struct Feature {
    /// The lens of the token run.
    pub state: LensState,
    /// Why the logit lens (and logit attribution) does not apply to what is shown (None: it does).
    pub refusal: Option<String>,
}

impl Feature {
    /// Why the logit lens does not apply to what is shown now (None: it does).
    fn refusal(shown: &Shown<'_>) -> Option<String> {
        let settings = shown.settings;
        if settings.source == Source::File {
            return Some(FILE_NEEDS_MODEL.replace("{what}", "the logit lens and logit attribution read"));
        }
        if settings.source == Source::Playground {
            return Some(
                "The playground is a random encoder with no language-model head: the logit lens reads the \
                 pretrained model's residual stream through its own unembedding."
                    .into(),
            );
        }
        if let Some(why) = shown.model.and_then(|m| m.readout_refusal.clone()) {
            return Some(crate::app::text::capitalised(&why) + ".");
        }
        if shown.token_run.is_some_and(|t| t.run.long.is_some()) {
            return Some(format!(
                "This input is longer than “Record up to” ({} tokens) and is shown pooled: the logit lens \
                 reads inputs recorded token by token.",
                settings.record_tokens
            ));
        }
        None
    }

    /// Asks the worker for the logit lens when its view is open: the selected position's column
    /// first, then the grid chunk by chunk; a newer input or position replaces what is in flight.
    pub fn request(&mut self, shown: &Shown<'_>) {
        self.refusal = Self::refusal(shown);
        let Some(t) = shown.readout_input(View::Lens, self.refusal.is_some()) else { return };
        let n = t.run.tokens.len();
        let key = LensKey { source_id: t.source_id, watch: shown.settings.lens.watch.clone() };
        let lens = &mut self.state;
        if lens.key.as_ref() != Some(&key) {
            *lens = LensState::new(key.clone(), n);
            lens.started = Some(Instant::now());
        }
        if lens.error.is_some() {
            return;
        }
        let selected = shown.settings.lens.position.unwrap_or(n - 1).min(n - 1);
        let need_column = lens.find(selected).is_none();
        match &lens.in_flight {
            Some((_, column, _)) if !need_column || *column == Some(selected) => return,
            None if !need_column && lens.grid_done() => return,
            _ => {}
        }
        let chunks = lens.missing_chunks();
        let id = shown.worker.next_id();
        let column = need_column.then_some(selected);
        lens.in_flight = Some((id, column, chunks.clone()));
        let tokens = Arc::new(t.run.tokens.clone());
        let interventions = shown.settings.interventions.clone();
        shown.worker.send(Job::Lens { id, key, tokens, column, chunks, interventions });
    }

    /// A new model is loaded: the worker forgets a lens it had not finished (it is not resumed on
    /// another model), so none is waited for; the lens view asks again.
    pub fn model_changed(&mut self) {
        self.state.in_flight = None;
    }

    /// Takes a part of a lens from the worker (dropped when it is of an older input).
    pub fn on_part(&mut self, (id, key): (u64, LensKey), answer: crate::app::worker::LensAnswer) {
        let lens = &mut self.state;
        if lens.key.as_ref() != Some(&key) {
            return; // of an older input
        }
        let crate::app::worker::LensAnswer { result, watched, notes, finished, elapsed_ms } = answer;
        lens.watched = watched;
        lens.watch_notes = notes;
        match result {
            Ok(part) => {
                lens.streams = part.lens.streams;
                let column = part.lens.positions.len() == 1;
                lens.parts.push(part);
                if column && lens.column_ms.is_none() {
                    lens.column_ms = Some(elapsed_ms);
                }
                if lens.grid_ms.is_none() && lens.grid_done() {
                    lens.grid_ms = lens.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
                }
            }
            Err(e) => lens.error = Some(e),
        }
        if finished && lens.in_flight.as_ref().is_some_and(|f| f.0 == id) {
            lens.in_flight = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_position_once() {
        assert_eq!(lens_chunks(0), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(lens_chunks(10).len(), 1);
        assert_eq!(lens_chunks(10)[0], 0..10);
        assert_eq!(lens_chunks(130), [0..64, 64..128, 128..130]);
    }
}
