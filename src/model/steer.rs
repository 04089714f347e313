//! Steering by activation addition (Turner et al., "Activation addition"; Rimsky et al.'s
//! contrastive form): the vector is the residual stream entering a layer at the last token of one
//! text minus the same for another, each run alone; the pass adds `scale ·` it to the stream
//! entering that layer at every position ([`Interventions::steer`]), the prompt's and every
//! written token's.

use super::engine::{EngineError, Input, Listener, Point};
use super::intervene::{Interventions, Steering};
use super::{LoadedModel, ModelError};

/// A steering vector made, and what to tell the user about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Steered {
    /// What [`Interventions::steer`] takes.
    pub steering: Steering,
    /// Notices (a text of one token: its stream is mostly the massive activations of a lone
    /// token).
    pub notices: Vec<String>,
}

/// Keeps the last row of the stream entering one layer, then stops the pass.
struct LastRow {
    layer: usize,
    row: Vec<f32>,
}

impl Listener for LastRow {
    fn point(&mut self, point: Point<'_>) -> Result<(), EngineError> {
        match point {
            Point::ResidPre { layer, stream } if layer == self.layer => {
                self.row = stream[stream.len() - self.row.len()..].to_vec();
                Err(EngineError::Stopped)
            }
            _ => Ok(()),
        }
    }
}

impl LoadedModel {
    /// The steering of the stream entering `layer` by `scale · (plus − minus)`, each text run
    /// alone on the faithful model (tokenized as any input) and read at its last token. Refused
    /// for an encoder–decoder (two stacks), a layer the model does not have, a scale that is not
    /// a finite number and an empty text.
    pub fn steering(&self, layer: usize, (plus, minus): (&str, &str), scale: f32) -> Result<Steered, ModelError> {
        if self.decoder.is_some() {
            return Err(ModelError::Input(format!(
                "{} is an encoder–decoder: its encoder and decoder are two residual streams, and steering adds to the one stream of a decoder-only model",
                self.name
            )));
        }
        let d = self.description();
        if layer >= d.layers {
            return Err(ModelError::Input(format!(
                "cannot steer layer {layer}: the model has layers 0 to {}",
                d.layers.saturating_sub(1)
            )));
        }
        if !scale.is_finite() {
            return Err(ModelError::Input(format!("the steering scale must be a finite number, got {scale}")));
        }
        let mut notices = Vec::new();
        let mut stream = |text: &str| -> Result<Vec<f32>, ModelError> {
            let tokens = self.tokenizer.encode(text, None)?.tokens;
            let words = tokens.special.iter().filter(|&&s| !s).count();
            if words == 0 {
                return Err(ModelError::Input(format!("the steering text {text:?} has no tokens")));
            }
            if words == 1 {
                notices.push(format!(
                    "the steering text {text:?} is one token: at a lone token the residual stream is dominated by a few massive activations (in SmolLM2 orders of magnitude larger than elsewhere), so its vector is mostly that; texts of a few tokens steer by what they say"
                ));
            }
            let faithful = Interventions::default();
            let mut last = LastRow { layer, row: vec![0.0; d.hidden] };
            match self.net.run(Input::new(&tokens.ids, &tokens.type_ids, &faithful), &mut last) {
                Err(EngineError::Stopped) => Ok(last.row),
                Err(e) => Err(e.into()),
                Ok(_) => Err(ModelError::Input(format!("layer {layer} did not run"))),
            }
        };
        let (p, m) = (stream(plus)?, stream(minus)?);
        let vector = p.iter().zip(&m).map(|(p, m)| p - m).collect();
        let steering = Steering { layer, scale, plus: plus.to_string(), minus: minus.to_string(), vector };
        Ok(Steered { steering, notices })
    }
}
