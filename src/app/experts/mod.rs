//! The experts view of a mixture of experts: for every layer and token the experts the router
//! chose and their weights, computed on the worker once per token run (a listener on the one
//! pass: [`crate::model::experts`]), held in a slot keyed by that run; its view and figure.

pub mod settings;
pub mod view;

pub use settings::ExpertsSettings;

use std::sync::Arc;

use crate::analysis::experts::Routes;
use crate::app::session::Shown;
use crate::app::slot::Slot;
use crate::app::state::{Source, View};
use crate::app::worker::{Answer, Compute, Job};
use crate::export::{Figure, GridFigure, Table};
use crate::model::LoadedModel;

/// The routes of a token run as the worker hands them back.
struct Routed {
    source_id: u64,
    result: Result<Arc<Routes>, String>,
}

/// The experts view's results.
#[derive(Default)]
pub struct Feature {
    /// The routes shown, by the id of the token run they are of.
    pub slot: Slot<u64, Result<Arc<Routes>, String>>,
    /// Why the view does not apply to what is shown (None: it does).
    pub refusal: Option<String>,
}

impl Feature {
    /// Asks the worker for the routes of the token run, once per run, when the experts view is
    /// open and the model has experts.
    pub fn request(&mut self, shown: &Shown<'_>) {
        let settings = shown.settings;
        self.refusal = if settings.source == Source::File {
            Some("This view needs the model: an attention file holds attention only. Open a mixture of experts (side panel).".into())
        } else if settings.source == Source::Playground {
            Some("The playground is a dense encoder: the experts view reads a mixture of experts.".into())
        } else if shown.model.is_some_and(|m| m.experts.is_none()) {
            Some("This model has no experts: open a mixture of experts (Mixtral, Qwen3-MoE, OLMoE, gpt-oss).".into())
        } else if shown.token_run.is_some_and(|t| t.run.long.is_some()) {
            Some(format!(
                "This input is longer than “Record up to” ({} tokens) and is shown pooled: the experts view reads \
                 inputs recorded token by token.",
                settings.record_tokens
            ))
        } else {
            None
        };
        let Some(t) = shown.readout_input(View::Experts, self.refusal.is_some()) else { return };
        let source_id = t.source_id;
        if self.slot.want(&source_id) {
            let tokens = t.run.tokens.clone();
            let interventions = settings.interventions.clone();
            let work = move |model: &LoadedModel| Routed {
                source_id,
                result: model.routes(&tokens, &interventions).map(Arc::new).map_err(|e| e.to_string()),
            };
            // One pass: on the worker's own thread, as a run is.
            shown.worker.send(Job::Compute(Compute::new("experts", false, work)));
        }
    }

    /// Takes routes the worker computed (another feature's answer is given back).
    pub fn take(&mut self, answer: Answer) -> Option<Answer> {
        match answer.take::<Routed>() {
            Ok(r) => {
                self.slot.finish(r.source_id, r.result);
                None
            }
            Err(other) => Some(other),
        }
    }
}

/// A cell's text: the chosen experts with their weights, largest first ("#2 .62  #0 .38").
pub fn cell_text(chosen: &[u32], weights: &[f32]) -> String {
    chosen
        .iter()
        .zip(weights)
        .map(|(e, w)| format!("#{e} {}", format!("{w:.2}").trim_start_matches('0')))
        .collect::<Vec<_>>()
        .join("  ")
}

/// The experts figure of `routes` over tokens `labels` (None: not computed, an empty figure).
pub fn experts_figure(routes: Option<&Routes>, labels: &[String], model: &str) -> Figure {
    let Some(routes) = routes else {
        let grid = GridFigure {
            title: format!("{model} · experts (not computed)"),
            note: String::new(),
            row_labels: Vec::new(),
            col_labels: Vec::new(),
            cells: Vec::new(),
            values: Vec::new(),
            range: (0.0, 1.0),
            selected_col: None,
            colour_values: None,
            bar: None,
        };
        return Figure::Experts { grid: Arc::new(grid), numbers: Arc::new(Table::default()) };
    };
    let n = labels.len().min(routes.tokens());
    let experts = routes.experts();
    let (mut cells, mut values, mut colours, mut row_labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut numbers = Table {
        title: format!(
            "{model} · experts chosen per layer and token (ids, and the weights their outputs are multiplied by)"
        ),
        row_labels: Vec::new(),
        col_labels: labels[..n].to_vec(),
        values: Vec::new(),
    };
    for (l, layer) in routes.layers.iter().enumerate() {
        let Some(layer) = layer else {
            row_labels.push(format!("L{l} (dense)"));
            cells.extend(std::iter::repeat_n("—".to_string(), n));
            values.extend(std::iter::repeat_n(f32::NAN, n));
            colours.extend(std::iter::repeat_n(f32::NAN, n));
            continue;
        };
        row_labels.push(format!("L{l}"));
        for t in 0..n {
            cells.push(cell_text(layer.chosen_of(t), layer.weights_of(t)));
            values.push(layer.weights_of(t)[0]);
            colours.push(layer.chosen_of(t)[0] as f32);
        }
        for j in 0..layer.top_k {
            numbers.row_labels.push(format!("L{l} expert {}", j + 1));
            numbers.values.extend((0..n).map(|t| layer.chosen_of(t)[j] as f32));
            numbers.row_labels.push(format!("L{l} weight {}", j + 1));
            numbers.values.extend((0..n).map(|t| layer.weights_of(t)[j]));
        }
    }
    let grid = GridFigure {
        title: format!("{model} · experts per layer and token"),
        note: "each cell: the chosen experts (#id) with their weights, largest first; colour: the first expert".into(),
        row_labels,
        col_labels: labels[..n].to_vec(),
        cells,
        values,
        range: (0.0, experts.saturating_sub(1).max(1) as f32),
        selected_col: None,
        colour_values: Some(colours),
        bar: None,
    };
    Figure::Experts { grid: Arc::new(grid), numbers: Arc::new(numbers) }
}
