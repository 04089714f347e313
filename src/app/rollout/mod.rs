//! Attention rollout and flow: the rollout is derived data of the shown run (`app::derive`);
//! attention flow, which takes seconds, is computed on a thread of its own and held in a slot
//! keyed by what it is of. The view draws either.

pub mod settings;
pub mod view;

pub use settings::{RolloutMode, RolloutSettings};

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use crate::analysis::Run;
use crate::app::slot::Slot;

/// What an attention-flow result was computed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowKey {
    /// The shown run.
    pub view_id: u64,
    /// Heads averaged per layer.
    pub heads: Vec<usize>,
    /// Last layer of the flow.
    pub layer_idx: usize,
}

/// Attention flow computed in the background.
#[derive(Debug, Clone)]
pub struct Flow {
    /// `n × n` flow values.
    pub values: Arc<Vec<f32>>,
    /// How long it took.
    pub ms: f64,
}

/// A flow computed on its thread, with what it is of.
type FlowAnswer = (FlowKey, Flow);

/// The flow shown and in flight, and the channel its thread answers on.
pub struct Feature {
    /// Attention flow, by what it is of.
    pub slot: Slot<FlowKey, Flow>,
    answers: (Sender<FlowAnswer>, Receiver<FlowAnswer>),
}

impl Default for Feature {
    fn default() -> Self {
        Self { slot: Slot::default(), answers: channel() }
    }
}

impl Feature {
    /// Starts computing the flow of `run` for `key` on a thread of its own, unless it is shown or
    /// in flight already; `wake` is called when it is done.
    pub fn request(&mut self, run: &Arc<Run>, key: FlowKey, wake: impl Fn() + Send + 'static) {
        if !run.attention.is_square() || crate::analysis::rollout::flow_refusal(run.attention.seq_len()).is_some() {
            return; // the view says why (cross-attention has no flow)
        }
        if key.heads.is_empty() || !self.slot.want(&key) {
            return;
        }
        let (tx, run) = (self.answers.0.clone(), Arc::clone(run));
        crate::app::tasks::spawn_named("attnviz-flow", move || {
            let start = Instant::now();
            let values = crate::analysis::rollout::flow(&run.attention, &key.heads, key.layer_idx);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let _ = tx.send((key, Flow { values: Arc::new(values), ms }));
            wake();
        });
    }

    /// Takes the flows that were computed (each shown: a flow is of the run it was asked for).
    pub fn poll(&mut self) {
        while let Ok((key, flow)) = self.answers.1.try_recv() {
            self.slot.put(key, flow);
        }
    }

    /// The flow of `key`, if computed.
    pub fn of(&self, key: &FlowKey) -> Option<&Flow> {
        self.slot.shown_for(key)
    }
}
