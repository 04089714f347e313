//! Which attention of an encoder–decoder is shown — encoder self-attention, decoder
//! self-attention or cross-attention — and the one function that makes it a plain [`Run`] for the
//! views and exports: rows are the queries' tokens, columns the keys' (for cross-attention the
//! target over the source).

use serde::{Deserialize, Serialize};

use super::Run;

/// One of the three attentions of an encoder–decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Stack {
    /// Encoder self-attention (source × source); the only one of an encoder or a decoder-only model.
    #[default]
    Encoder,
    /// Decoder self-attention (target × target, causal).
    Decoder,
    /// Cross-attention (target × source).
    Cross,
}

impl Stack {
    /// Every stack, in the order the switch shows them.
    pub const ALL: [Self; 3] = [Self::Encoder, Self::Decoder, Self::Cross];

    /// The switch's label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Encoder => "Encoder",
            Self::Decoder => "Decoder",
            Self::Cross => "Cross",
        }
    }

    /// What the stack is, for titles ("decoder self-attention").
    pub fn describe(self) -> &'static str {
        match self {
            Self::Encoder => "encoder self-attention",
            Self::Decoder => "decoder self-attention",
            Self::Cross => "cross-attention (target → source)",
        }
    }

    /// The command line's name (`--stack`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Encoder => "encoder",
            Self::Decoder => "decoder",
            Self::Cross => "cross",
        }
    }

    /// The stack of a command-line name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Why rollout and flow are refused for cross-attention (views and the command line say it).
pub const CROSS_ROLLOUT_REFUSAL: &str = "attention rollout and flow are not defined for cross-attention: it maps \
     target tokens to source tokens, so its matrices cannot be multiplied through the layers (and the \
     residual identity has no meaning between two sequences); pick Encoder or Decoder";

/// Why a run has no decoder side to show.
pub fn no_target_reason(run: &Run, stack: Stack) -> String {
    format!(
        "{} has no {}: {}",
        run.model_name,
        stack.describe(),
        "this run has no target (an encoder–decoder needs a target text; other models have an encoder stack only)"
    )
}

/// [`stack_run`] of a run the caller gives up: the encoder's stack is the run itself, moved, not
/// copied (a long run's matrices are gigabytes).
pub fn into_stack(mut run: Run, stack: Stack) -> Result<Run, String> {
    if stack != Stack::Encoder {
        return stack_run(&run, stack);
    }
    if run.decoder.is_some() {
        run.stack = Some(stack);
    }
    Ok(run)
}

/// The run views and exports draw for `stack`: the run itself for the encoder; for the decoder its
/// tokens and causal self-attention; for cross-attention the target tokens as rows, the source as
/// `key_tokens` (columns) and the `target × source` matrices. `Err` says why there is none (no
/// target).
pub fn stack_run(run: &Run, stack: Stack) -> Result<Run, String> {
    if stack == Stack::Encoder {
        return into_stack(run.clone(), stack);
    }
    let Some(dec) = &run.decoder else { return Err(no_target_reason(run, stack)) };
    let (attention, key_tokens, causal) = if stack == Stack::Decoder {
        (dec.attention.clone(), None, true)
    } else {
        (dec.cross.clone(), Some(run.tokens.clone()), false)
    };
    Ok(Run {
        model_name: run.model_name.clone(),
        stack: Some(stack),
        tokens: dec.tokens.clone(),
        attention,
        sinks: None,
        neuron: None,
        last_hidden: dec.last_hidden.clone(),
        truncation: dec.truncation.clone().or_else(|| run.truncation.clone()),
        intervention: run.intervention.clone(),
        playground: run.playground,
        causal,
        window: None,
        sliding_layers: Vec::new(),
        // A generated target: everything after the start token was written by the model.
        prompt_len: run.prompt_len.map(|_| 1),
        decoder: None,
        key_tokens,
        long: None,
    })
}

/// Test data: a 2-layer, 2-head encoder–decoder run with 3 source and 2 target tokens.
#[cfg(test)]
pub(crate) mod fixture {
    use crate::analysis::{Attention, DecoderRun, Run, Tokens};

    fn test_tokens(words: &[&str]) -> Tokens {
        let n = words.len();
        Tokens {
            tokens: words.iter().map(|w| (*w).to_string()).collect(),
            ids: (0..n as u32).collect(),
            segments: vec![0; n],
            type_ids: vec![0; n],
            special: vec![false; n],
        }
    }

    /// A 2-layer, 2-head encoder–decoder run: 3 source tokens, 2 target tokens.
    pub(crate) fn seq2seq_run() -> Run {
        let (layers, heads, s, t) = (2, 2, 3, 2);
        let enc = Attention::new(layers, heads, s, vec![1.0 / 3.0; layers * heads * s * s]).unwrap();
        let mut dec_data = Vec::new();
        for _ in 0..layers * heads {
            dec_data.extend([1.0, 0.0, 0.5, 0.5]);
        }
        let cross_data: Vec<f32> = (0..layers * heads * t * s).map(|i| i as f32 / 100.0).collect();
        Run {
            model_name: "tiny".into(),
            tokens: test_tokens(&["<s>", "Hello", "</s>"]),
            attention: enc,
            sinks: None,
            neuron: None,
            last_hidden: Vec::new(),
            truncation: None,
            intervention: None,
            playground: false,
            causal: false,
            window: None,
            sliding_layers: Vec::new(),
            prompt_len: None,
            decoder: Some(DecoderRun {
                tokens: test_tokens(&["</s>", "Hallo"]),
                attention: Attention::new(layers, heads, t, dec_data).unwrap(),
                cross: Attention::rectangular(layers, heads, t, s, cross_data).unwrap(),
                last_hidden: Vec::new(),
                truncation: None,
            }),
            key_tokens: None,
            stack: None,
            long: None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the projection copies values exactly
mod tests {
    use super::*;
    use fixture::seq2seq_run;

    #[test]
    fn cross_rows_are_target_tokens_columns_source_tokens_values_the_cross_heads() {
        let run = seq2seq_run();
        let cross = stack_run(&run, Stack::Cross).unwrap();
        let dec = run.decoder.as_ref().unwrap();
        assert_eq!(cross.tokens, dec.tokens);
        assert_eq!(cross.keys(), &run.tokens);
        assert_eq!((cross.attention.seq_len(), cross.attention.keys()), (2, 3));
        for l in 0..2 {
            for h in 0..2 {
                assert_eq!(cross.attention.head(l, h), dec.cross.head(l, h));
            }
        }
        assert_eq!(cross.key_label(1), "Hello");
        assert_eq!(cross.label(1), "Hallo");
        assert!(!cross.has_mask());
        assert!(cross.shown_name().contains("cross-attention") && cross.model_name == "tiny");
    }

    #[test]
    fn decoder_is_causal_and_encoder_is_the_run() {
        let run = seq2seq_run();
        let dec = stack_run(&run, Stack::Decoder).unwrap();
        assert!(dec.causal && dec.is_masked(0, 0, 1) && !dec.is_masked(0, 1, 0));
        assert!(dec.masked(0, dec.attention.head(0, 0))[1].is_nan());
        assert_eq!(dec.keys(), &dec.tokens);
        let enc = stack_run(&run, Stack::Encoder).unwrap();
        assert_eq!(enc.tokens, run.tokens);
        assert!(enc.shown_name().ends_with("encoder self-attention") && enc.model_name == run.model_name);
        assert_eq!(enc.attention, run.attention);
    }

    #[test]
    fn without_a_target_only_the_encoder_is_shown_and_the_reason_given() {
        let mut run = seq2seq_run();
        run.decoder = None;
        assert!(stack_run(&run, Stack::Encoder).is_ok());
        let why = stack_run(&run, Stack::Cross).unwrap_err();
        assert!(why.contains("no target"), "{why}");
        assert_eq!(Stack::from_name("cross"), Some(Stack::Cross));
        assert_eq!(Stack::from_name("x"), None);
    }
}
