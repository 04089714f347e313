//! The features that compute results of their own off the UI thread: each is a folder of
//! `app/` owning its settings' use, its requests, the computation it asks the worker for
//! ([`super::worker::Compute`]), its result slots, its view and the figure it exports. This list
//! is the one place the app's frame asks them for what they need, hands them the worker's
//! answers, draws their views and asks them for their figures. Adding a feature: its folder, a
//! line in each list here, and its view and settings beside the others' in `state.rs`.

use super::command::Commands;
use super::data::ViewData;
use super::session::Shown;
use super::state::View;
use super::worker::Done;
use super::{attribution, compare, experts, graph, intervene, lab, lens, patching, rollout};
use crate::export::Figure;

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

/// The features' views: what each draws is its feature's results (read through [`ViewData`]).
#[derive(Default)]
pub struct FeatureViews {
    /// Rollout and attention flow.
    pub rollout: rollout::view::RolloutView,
    /// The comparison: textures and the typed model folder.
    pub compare: compare::view::CompareView,
    /// The logit lens: the watch box.
    pub lens: lens::view::LensView,
    /// Logit attribution: the grid's texture.
    pub attribution: attribution::view::AttributionView,
    /// The contribution graph: the laid-out routes.
    pub graph: graph::view::GraphView,
    /// Activation patching: the grid's texture, the token boxes.
    pub patching: patching::view::PatchingView,
    /// The experts of a mixture of experts.
    pub experts: experts::view::ExpertsView,
}

impl FeatureViews {
    /// Draws `view` when it is a feature's; whether it is.
    pub fn ui(&mut self, view: View, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) -> bool {
        match view {
            View::Rollout => self.rollout.ui(ui, data, commands),
            View::Compare => self.compare.ui(ui, data, commands),
            View::Lens => self.lens.ui(ui, data, commands),
            View::Attribution => self.attribution.ui(ui, data, commands),
            View::Graph => self.graph.ui(ui, data, commands),
            View::Patching => self.patching.ui(ui, data, commands),
            View::Experts => self.experts.ui(ui, data, commands),
            _ => return false,
        }
        true
    }
}

/// The figure a feature's view exports, made of what it shows (None: `view` is not a feature's
/// own figure).
/// `selection`: the layer and heads shown.
pub fn figure(view: View, data: &ViewData<'_>, selection: (usize, &[usize])) -> Option<Figure> {
    let features = data.features;
    Some(match view {
        View::Rollout => features.flow.figure(data, selection),
        View::Compare => features.compare.figure(data, selection),
        View::Lens => features.lens.figure(data),
        View::Attribution => features.attribution.figure(data),
        View::Graph => features.graph.figure(data),
        View::Patching => features.patching.figure(data),
        View::Experts => features.experts.figure(data),
        _ => return None,
    })
}
