//! Interventions in the app: the side panel that sets them, attention knockout from the head view
//! and the heatmap, the next-token prediction before and after, and steering (the Steer panel
//! under Continue, its vector made on the worker, and the unsteered continuation beside the
//! steered one).

pub mod knockout;
pub mod panel;
pub mod settings;
pub mod steer;

pub use settings::SteerSettings;

use std::path::PathBuf;
use std::sync::Arc;

use crate::app::session::Shown;
use crate::app::slot::Slot;
use crate::app::state::Source;
use crate::app::worker::{Answer, Compute, Job};
use crate::model::generate::Generator;
use crate::model::steer::Steered;
use crate::model::{Interventions, LoadedModel};

/// Candidates shown before and after.
pub const EFFECT_TOP_K: usize = 5;

/// What a before/after prediction is of.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectKey {
    /// The model's folder.
    pub model: PathBuf,
    /// The text.
    pub text: String,
    /// The interventions of the modified run.
    pub interventions: Interventions,
}

/// The next token after the text on the faithful and on the modified model.
#[derive(Debug, Clone, PartialEq)]
pub struct BeforeAfter {
    /// The last token, whose prediction this is.
    pub last: String,
    /// The faithful model's top candidates: token (vocabulary spelling) and probability.
    pub faithful: Vec<(String, f32)>,
    /// The modified model's.
    pub modified: Vec<(String, f32)>,
}

/// What a steering vector is made of (its scale only multiplies it).
#[derive(Debug, Clone, PartialEq)]
pub struct VectorKey {
    /// The model's folder.
    pub model: PathBuf,
    /// The text steered toward.
    pub plus: String,
    /// The text steered away from.
    pub minus: String,
    /// The layer.
    pub layer: usize,
}

/// What the unsteered continuation beside a steered one is of.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsteeredKey {
    /// The model's folder.
    pub model: PathBuf,
    /// The prompt.
    pub prompt: String,
    /// Tokens asked for.
    pub max_new: usize,
    /// Longest prompt recorded.
    pub max_prompt: usize,
    /// The steered generation's interventions without the steering.
    pub interventions: Interventions,
}

/// An answer of one of this feature's computations.
enum Made {
    Effect(EffectKey, Result<Arc<BeforeAfter>, String>),
    Vector(VectorKey, Result<Arc<Steered>, String>),
    Unsteered(UnsteeredKey, Result<Arc<String>, String>),
}

/// The results the interventions' views show.
#[derive(Default)]
pub struct Feature {
    /// The prediction before and after the interventions.
    pub effect: Slot<EffectKey, Result<Arc<BeforeAfter>, String>>,
    /// The steering vector the Steer panel's texts make.
    pub vector: Slot<VectorKey, Result<Arc<Steered>, String>>,
    /// The unsteered continuation of the prompt a steered generation continued.
    pub unsteered: Slot<UnsteeredKey, Result<Arc<String>, String>>,
}

/// The top candidates after `text` with `iv`: tokens in the vocabulary's spelling.
fn top(
    model: &LoadedModel,
    tokens: &crate::analysis::Tokens,
    iv: &Interventions,
) -> Result<Vec<(String, f32)>, String> {
    let last = tokens.len().checked_sub(1).ok_or("the input has no tokens")?;
    let lens = model.lens(tokens, &[last], EFFECT_TOP_K, &[], iv).map_err(|e| e.to_string())?;
    Ok(lens.cell(lens.streams - 1, 0).map(|(id, p)| (model.tokenizer.token_of(id), p)).collect())
}

/// The next token after `key.text` on the faithful and the modified model.
fn before_after(model: &LoadedModel, key: &EffectKey) -> Result<BeforeAfter, String> {
    let tokens = model.tokenizer.encode(&key.text, None).map_err(|e| e.to_string())?.tokens;
    let last = tokens.tokens.last().cloned().ok_or("the input has no tokens")?;
    Ok(BeforeAfter {
        last,
        faithful: top(model, &tokens, &Interventions::default())?,
        modified: top(model, &tokens, &key.interventions)?,
    })
}

/// The greedy continuation `key` names, decoded.
fn continuation(model: &LoadedModel, key: &UnsteeredKey) -> Result<String, String> {
    let mut g = Generator::start_modified(model, &key.prompt, 1, Some(key.max_prompt), &key.interventions)
        .map_err(|e| e.to_string())?;
    while g.next(key.max_new).map_err(|e| e.to_string())?.is_some() {}
    Ok(model.tokenizer.decode(&g.tokens().ids[g.prompt_len()..]))
}

impl Feature {
    /// Asks the worker for what the interventions' views show: the prediction before and after
    /// (a modified language model), the steering vector (the Steer panel on), the unsteered
    /// continuation (a steered generation finished).
    pub fn request(&mut self, shown: &Shown<'_>) {
        let settings = shown.settings;
        let Some(model) = shown.model.filter(|m| {
            settings.source == Source::Pretrained && m.can_generate && !m.seq2seq && m.readout_refusal.is_none()
        }) else {
            return;
        };
        let dir = model.dir.clone();
        if !settings.interventions.is_faithful() && !settings.text.trim().is_empty() {
            let key = EffectKey {
                model: dir.clone(),
                text: settings.text.clone(),
                interventions: settings.interventions.clone(),
            };
            if self.effect.want(&key) {
                let work = move |m: &LoadedModel| {
                    let result = before_after(m, &key).map(Arc::new);
                    Made::Effect(key, result)
                };
                shown.worker.send(Job::Compute(Compute::new("intervention effect", false, work)));
            }
        }
        let steer = &settings.steer;
        if steer.on && !steer.plus.trim().is_empty() && !steer.minus.trim().is_empty() {
            let key = VectorKey {
                model: dir.clone(),
                plus: steer.plus.clone(),
                minus: steer.minus.clone(),
                layer: steer.layer,
            };
            if self.vector.want(&key) {
                let work = move |m: &LoadedModel| {
                    let result =
                        m.steering(key.layer, (&key.plus, &key.minus), 1.0).map(Arc::new).map_err(|e| e.to_string());
                    Made::Vector(key, result)
                };
                shown.worker.send(Job::Compute(Compute::new("steering vector", false, work)));
            }
        }
        if let Some(g) = shown.generation.filter(|g| g.finished.is_some() && g.error.is_none())
            && g.interventions.steer.is_some()
        {
            let key = UnsteeredKey {
                model: dir,
                prompt: g.prompt.clone(),
                max_new: g.max_new,
                max_prompt: settings.record_tokens,
                interventions: Interventions { steer: None, ..g.interventions.clone() },
            };
            if self.unsteered.want(&key) {
                let work = move |m: &LoadedModel| {
                    let result = continuation(m, &key).map(Arc::new);
                    Made::Unsteered(key, result)
                };
                // As long as a generation: on the side thread.
                shown.worker.send(Job::Compute(Compute::new("unsteered continuation", true, work)));
            }
        }
    }

    /// Takes an answer of this feature (another feature's is given back).
    pub fn take(&mut self, answer: Answer) -> Option<Answer> {
        match answer.take::<Made>() {
            Ok(Made::Effect(key, result)) => {
                self.effect.finish(key, result);
                None
            }
            Ok(Made::Vector(key, result)) => {
                self.vector.finish(key, result);
                None
            }
            Ok(Made::Unsteered(key, result)) => {
                self.unsteered.finish(key, result);
                None
            }
            Err(other) => Some(other),
        }
    }

    /// Whether an answer is awaited.
    pub fn is_pending(&self) -> bool {
        self.effect.is_pending() || self.vector.is_pending() || self.unsteered.is_pending()
    }

    /// The steering the panel's settings ask for, once its vector is made: what
    /// [`Interventions::steer`] should be (None: steering off, or its vector failed).
    /// None while the vector is being made (keep what is set).
    pub fn wanted_steering(
        &self,
        settings: &crate::app::state::Settings,
        model: &std::path::Path,
    ) -> Option<Option<crate::model::intervene::Steering>> {
        let steer = &settings.steer;
        if !steer.on || steer.plus.trim().is_empty() || steer.minus.trim().is_empty() {
            return Some(None);
        }
        let key = VectorKey {
            model: model.to_path_buf(),
            plus: steer.plus.clone(),
            minus: steer.minus.clone(),
            layer: steer.layer,
        };
        match self.vector.shown_for(&key) {
            Some(Ok(made)) => {
                Some(Some(crate::model::intervene::Steering { scale: steer.scale, ..made.steering.clone() }))
            }
            Some(Err(_)) => Some(None),
            None => None,
        }
    }
}
