//! The features that compute results of their own off the UI thread: each is a folder of
//! `app/` owning its settings' use, its requests, its result slots and its view. This list is
//! the one place the app's frame asks them for what they need and hands them the worker's
//! answers.

use super::session::Shown;
use super::worker::Done;
use super::{attribution, compare, graph, lab, lens, rollout};

/// Every feature's own state.
#[derive(Default)]
pub struct Features {
    /// The logit lens.
    pub lens: lens::Feature,
    /// Direct logit attribution and a head's effect.
    pub attribution: attribution::Feature,
    /// The contribution graph.
    pub graph: graph::Feature,
    /// Attention flow (the rollout view).
    pub flow: rollout::Feature,
    /// Run B of the comparison.
    pub compare: compare::Feature,
    /// The training lab.
    pub lab: lab::Feature,
}

impl Features {
    /// Asks the worker for what the open view needs and is not shown or in flight yet.
    pub fn request(&mut self, shown: &Shown<'_>) {
        self.lens.request(shown);
        let no_head = self.lens.refusal.is_some();
        self.attribution.request(shown, no_head);
        self.graph.request(shown, &mut self.attribution, no_head);
    }

    /// Hands a feature its answer from the worker; the answers of the shown run are the app's
    /// (given back).
    pub fn take(&mut self, done: Done) -> Option<Done> {
        match done {
            Done::Lens { id, key, answer } => self.lens.on_part((id, key), answer),
            Done::Attributed { key, result, elapsed_ms } => {
                self.attribution.dla.finish(key, (result, elapsed_ms));
            }
            Done::Effect { key, result } => {
                self.attribution.effect.finish(key, result);
            }
            Done::Graph { source_id, result, elapsed_ms } => {
                self.graph.slot.finish(source_id, (result, elapsed_ms));
            }
            Done::Compared { id, result } => self.compare.on_compared(id, result),
            other => return Some(other),
        }
        None
    }

    /// Whether a feature waits for an answer.
    pub fn is_pending(&self) -> bool {
        self.lens.state.in_flight.is_some()
            || self.attribution.is_pending()
            || self.graph.slot.is_pending()
            || self.flow.slot.is_pending()
            || self.compare.is_pending()
    }
}
