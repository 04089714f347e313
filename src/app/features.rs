//! The features that compute results of their own off the UI thread: each is a folder of
//! `app/` owning its settings' use, its requests, the computation it asks the worker for
//! ([`super::worker::Compute`]), its result slots, its view and the figure it exports. This list
//! is the one place the app's frame asks them for what they need and hands them the worker's
//! answers; `views/features.rs` draws their views and asks them for their figures. Adding a
//! feature: its folder, a line in each list here and there, and its view and settings beside the
//! others' in `state.rs`.

use super::session::Shown;
use super::worker::Done;
use super::{attribution, compare, experts, graph, intervene, lab, lens, patching, rollout};

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
    /// Activation patching.
    pub patching: patching::Feature,
    /// Interventions: the prediction before and after, the steering vector, the unsteered text.
    pub intervene: intervene::Feature,
    /// A mixture of experts' routes.
    pub experts: experts::Feature,
}

impl Features {
    /// Asks the worker for what the open view needs and is not shown or in flight yet.
    pub fn request(&mut self, shown: &Shown<'_>) {
        self.lens.request(shown);
        let no_head = self.lens.refusal.is_some();
        self.attribution.request(shown, no_head);
        self.graph.request(shown, &mut self.attribution, no_head);
        self.patching.request(shown);
        self.intervene.request(shown);
        self.experts.request(shown);
    }

    /// Hands a feature its answer from the worker; the answers of the shown run are the app's
    /// (given back).
    pub fn take(&mut self, done: Done) -> Option<Done> {
        match done {
            Done::Lens { id, key, answer } => self.lens.on_part((id, key), answer),
            // Each feature takes the answers of its own type and gives the others back.
            Done::Computed(answer) => {
                let answer = self.attribution.take(answer)?;
                let answer = self.graph.take(answer)?;
                let answer = self.patching.take(answer)?;
                let answer = self.intervene.take(answer)?;
                let answer = self.experts.take(answer)?;
                return Some(Done::Computed(answer));
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
            || self.patching.slot.is_pending()
            || self.intervene.is_pending()
            || self.experts.slot.is_pending()
    }
}
