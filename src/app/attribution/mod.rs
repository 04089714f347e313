//! Direct logit attribution and a head's effect: what the attribution view asks the worker for,
//! held in slots keyed by what they are of (an answer for an older input is never shown), and
//! the view.

pub mod keys;
pub mod settings;
pub mod view;

pub use keys::{DlaKey, EFFECT_K, EffectKey, EffectShown, token_labels};
pub use settings::AttributionSettings;

use std::sync::Arc;

use crate::analysis::attribution::Attribution;
use crate::analysis::tokens::Tokens;
use crate::app::session::Shown;
use crate::app::slot::Slot;
use crate::app::state::View;
use crate::app::worker::{Answer, Compute, Job, Worker};
use crate::model::{Interventions, LoadedModel};

/// An attribution as the worker hands it back.
struct Attributed {
    key: DlaKey,
    result: Result<Arc<Attribution>, String>,
    elapsed_ms: f64,
}

/// A head's effect as the worker hands it back.
struct Effect {
    key: EffectKey,
    result: Result<Arc<EffectShown>, String>,
}

/// The direct logit attribution `key` names (its target and versus as typed).
fn attribute(model: &LoadedModel, key: DlaKey, tokens: &Tokens, iv: &Interventions) -> Attributed {
    let start = std::time::Instant::now();
    let id_of = |text: &str| -> Result<Option<u32>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        model.tokenizer.single_id(text).map(Some).map_err(|e| format!("“{text}”: {e}"))
    };
    let result = id_of(&key.target).and_then(|target| {
        let versus = id_of(&key.versus)?;
        model.attribute(tokens, key.position, target, versus, iv).map(Arc::new).map_err(|e| e.to_string())
    });
    Attributed { key, result, elapsed_ms: start.elapsed().as_secs_f64() * 1e3 }
}

/// The tokens the head `key` names promotes and suppresses, labelled.
fn effect(model: &LoadedModel, key: EffectKey, tokens: &Tokens, iv: &Interventions) -> Effect {
    let result = model
        .head_effect(tokens, key.position, key.head, EFFECT_K, iv)
        .map(|e| {
            let label = |list: Vec<(u32, f32)>| {
                let pretty = |t| crate::analysis::tokens::pretty_label(&model.tokenizer.token_of(t));
                list.into_iter().map(|(t, v)| (pretty(t), v)).collect()
            };
            Arc::new(EffectShown { promoted: label(e.promoted), suppressed: label(e.suppressed) })
        })
        .map_err(|e| e.to_string());
    Effect { key, result }
}

/// The attribution as a table: rows the layers then the embeddings, columns the heads then the
/// attention bias and the MLP (cells that do not exist are NaN).
pub fn attribution_table(a: &Attribution, title: String) -> crate::export::Table {
    let (layers, heads) = (a.layers, a.heads_per_layer);
    let cols = heads + 2;
    let mut values = vec![f32::NAN; (layers + 1) * cols];
    for l in 0..layers {
        values[l * cols..l * cols + heads].copy_from_slice(&a.heads[l * heads..(l + 1) * heads]);
        values[l * cols + heads] = a.attention_biases.get(l).copied().unwrap_or(f32::NAN);
        values[l * cols + heads + 1] = a.mlps.get(l).copied().unwrap_or(f32::NAN);
    }
    values[layers * cols] = a.embeddings;
    let mut col_labels: Vec<String> = (0..heads).map(|h| format!("H{h}")).collect();
    col_labels.extend(["attn bias".to_string(), "MLP".to_string()]);
    let mut row_labels: Vec<String> = (0..layers).map(|l| format!("L{l}")).collect();
    row_labels.push("embeddings".to_string());
    crate::export::Table { title, row_labels, col_labels, values }
}

/// What the attribution's target is, in words: "“ Paris”" or "“ Paris” − “ London”".
pub fn target_text(a: &Attribution) -> String {
    let pretty = crate::analysis::tokens::pretty_label;
    match &a.versus_token {
        Some(v) => format!("“{}” − “{}”", pretty(&a.target_token), pretty(v)),
        None => format!("“{}”", pretty(&a.target_token)),
    }
}

/// The attribution view's results: the attribution at one position and the selected head's
/// effect (the graph view asks for effects too).
#[derive(Default)]
pub struct Feature {
    /// The attribution shown (and the milliseconds it took), by what it is of.
    #[allow(clippy::type_complexity)]
    pub dla: Slot<DlaKey, (Result<Arc<Attribution>, String>, f64)>,
    /// The selected head's effect, by what it is of.
    pub effect: Slot<EffectKey, Result<Arc<EffectShown>, String>>,
}

impl Feature {
    /// Asks the worker for a head's effect unless it is shown or asked for already.
    pub fn request_effect(&mut self, worker: &Worker, key: EffectKey, tokens: Arc<Tokens>, iv: Interventions) {
        if self.effect.want(&key) {
            let work = move |model: &LoadedModel| effect(model, key, &tokens, &iv);
            worker.send(Job::Compute(Compute::new("head effect", false, work)));
        }
    }

    /// Asks the worker for the attribution (and the selected head's effect) the attribution view
    /// shows, when they differ from what is shown and from what is asked for.
    pub fn request(&mut self, shown: &Shown<'_>, refused: bool) {
        let Some(t) = shown.readout_input(View::Attribution, refused) else { return };
        let settings = shown.settings;
        let n = t.run.tokens.len();
        let position = settings.attribution.position.unwrap_or(n - 1).min(n - 1);
        let source_id = t.source_id;
        let tokens = Arc::new(t.run.tokens.clone());
        let (layers, heads) = (t.run.attention.layers(), t.run.attention.heads());
        let interventions = settings.interventions.clone();
        let key = DlaKey {
            source_id,
            position,
            target: settings.attribution.target.clone(),
            versus: settings.attribution.versus.clone(),
        };
        if self.dla.want(&key) {
            let (tokens, interventions) = (Arc::clone(&tokens), interventions.clone());
            let work = move |model: &LoadedModel| attribute(model, key, &tokens, &interventions);
            shown.worker.send(Job::Compute(Compute::new("attribution", false, work)));
        }
        let Some(head) = settings.attribution.head.filter(|&(l, h)| l < layers && h < heads) else { return };
        self.request_effect(shown.worker, EffectKey { source_id, position, head }, tokens, interventions);
    }

    /// Whether an answer is awaited.
    pub fn is_pending(&self) -> bool {
        self.dla.is_pending() || self.effect.is_pending()
    }

    /// Takes an attribution or an effect the worker computed (another feature's answer is given
    /// back).
    pub fn take(&mut self, answer: Answer) -> Option<Answer> {
        let answer = match answer.take::<Attributed>() {
            Ok(a) => {
                self.dla.finish(a.key, (a.result, a.elapsed_ms));
                return None;
            }
            Err(other) => other,
        };
        match answer.take::<Effect>() {
            Ok(e) => {
                self.effect.finish(e.key, e.result);
                None
            }
            Err(other) => Some(other),
        }
    }
}
