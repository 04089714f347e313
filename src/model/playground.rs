//! The playground: the from-scratch encoder of a transformer course, with random weights from a
//! seed — token embedding (×√`d_model`) + positional encoding, then N × [multi-head self-attention,
//! feed-forward with GELU, residual connections, layer norm] — built from the same blocks as the
//! BERT encoder, with the embedded model's tokenizer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::describe::{Activation, Description, EmbeddingDesc, NormPlacement, Positions};
use super::engine::{Network, WeightStorage, Weights};
use super::families::Sizes;
use super::tokenize::TextTokenizer;
use super::{LoadedModel, ModelError};
use crate::analysis::pe::{self, PeLayout, PeParams};

/// Longest playground input, in tokens (the length of its position table).
pub const MAX_POSITIONS: usize = 512;

/// The most memory a playground model may need (weights plus recorded attention at the longest input).
pub const MEMORY_LIMIT_BYTES: usize = 2 << 30;

/// The positional encoding added to the token embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PeKind {
    /// Sinusoidal, sin/cos interleaved (the paper).
    #[default]
    Interleaved,
    /// Sinusoidal, all sines then all cosines (tensor2tensor, the Illustrated Transformer).
    Concatenated,
    /// A random "learned" table, drawn like the other weights.
    Learned,
    /// No positional information at all.
    None,
}

impl PeKind {
    /// Every kind, in menu order.
    pub const ALL: [Self; 4] = [Self::Interleaved, Self::Concatenated, Self::Learned, Self::None];

    /// Name on the command line (`pe=…`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Interleaved => "sin",
            Self::Concatenated => "sin-concat",
            Self::Learned => "learned",
            Self::None => "none",
        }
    }

    /// Name in the app.
    pub fn label(self) -> &'static str {
        match self {
            Self::Interleaved => "sinusoidal, interleaved",
            Self::Concatenated => "sinusoidal, concatenated",
            Self::Learned => "learned (random)",
            Self::None => "none",
        }
    }

    fn layout(self) -> Option<PeLayout> {
        match self {
            Self::Interleaved => Some(PeLayout::Interleaved),
            Self::Concatenated => Some(PeLayout::Concatenated),
            Self::Learned | Self::None => None,
        }
    }
}

/// The factor on the attention scores q·k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Scaling {
    /// 1/√`d_k` (the paper).
    #[default]
    InvSqrtDk,
    /// No scaling.
    None,
    /// [`PlaygroundConfig::custom_scale`].
    Custom,
}

/// The playground's hyperparameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlaygroundConfig {
    /// Number of encoder blocks.
    pub layers: usize,
    /// Attention heads per block.
    pub heads: usize,
    /// Model width.
    pub d_model: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Positional encoding.
    pub pe: PeKind,
    /// Wavelength base of the sinusoidal encodings.
    pub pe_base: f64,
    /// Layer norm after (post-LN) or before (pre-LN) each sub-block.
    pub norm: NormPlacement,
    /// Mask keys after the query.
    pub causal: bool,
    /// Score scaling.
    pub scaling: Scaling,
    /// The factor when `scaling` is `Custom`.
    pub custom_scale: f32,
    /// Standard deviation of the random weights (biases are 0, norms 1).
    pub init_std: f32,
    /// Random seed.
    pub seed: u64,
    /// Put [CLS] (and [SEP]) around the input, as the tokenizer does for BERT.
    pub cls: bool,
}

impl Default for PlaygroundConfig {
    fn default() -> Self {
        Self {
            layers: 2,
            heads: 4,
            d_model: 64,
            d_ff: 256,
            pe: PeKind::Interleaved,
            pe_base: 10_000.0,
            norm: NormPlacement::Post,
            causal: false,
            scaling: Scaling::InvSqrtDk,
            custom_scale: 0.125,
            init_std: 0.1,
            seed: 0,
            cls: true,
        }
    }
}

/// The checks a width of `d_model` split over `heads` must pass (the playground's and the training
/// lab's): `Err((field, why))`. `sinusoidal`: fixed sine/cosine encodings of base `base`.
pub fn check_widths(d_model: usize, heads: usize, sinusoidal: bool, base: f64) -> Result<(), (&'static str, String)> {
    if heads > 0 && !d_model.is_multiple_of(heads) {
        return Err((
            "d_model",
            format!("{d_model} is not divisible by {heads} heads (each head gets d_model / heads dimensions)"),
        ));
    }
    if sinusoidal && !d_model.is_multiple_of(2) {
        return Err(("d_model", format!("{d_model} is odd: sinusoidal encodings pair a sine with a cosine")));
    }
    if sinusoidal && !(base.is_finite() && base > 1.0) {
        return Err(("base", format!("must be a number greater than 1, got {base}")));
    }
    Ok(())
}

fn bad(field: &'static str, message: impl Into<String>) -> ModelError {
    ModelError::Playground { field, message: message.into() }
}

/// The tokenizer the playground reads: the embedded model's (`tokenizer.json` beside it).
pub fn tokenizer_path() -> std::path::PathBuf {
    super::default_model_dir().join("tokenizer.json")
}

/// The embedded `MiniLM`'s `tokenizer.json` (BERT's uncased `WordPiece`, 466 KB), carried in the
/// binary so that the playground needs no file: it runs wherever the binary is, models found or not.
const PLAYGROUND_TOKENIZER: &str = include_str!("../../assets/models/all-MiniLM-L6-v2/tokenizer.json");

impl PlaygroundConfig {
    /// Parses `layers=2,heads=4,d_model=64,pe=none,seed=3` on top of the defaults.
    pub fn parse(spec: &str) -> Result<Self, ModelError> {
        let mut cfg = Self::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad("spec", format!("{item:?} is not KEY=VALUE (e.g. layers=2)")))?;
            let (key, value) = (key.trim(), value.trim());
            let number = |field: &'static str| -> Result<usize, ModelError> {
                value.parse().map_err(|_| bad(field, format!("{value:?} is not a whole number")))
            };
            let real = |field: &'static str| -> Result<f64, ModelError> {
                value.parse().map_err(|_| bad(field, format!("{value:?} is not a number")))
            };
            let flag = |field: &'static str| -> Result<bool, ModelError> {
                match value {
                    "on" | "true" | "yes" | "1" => Ok(true),
                    "off" | "false" | "no" | "0" => Ok(false),
                    _ => Err(bad(field, format!("{value:?} is not on/off"))),
                }
            };
            match key {
                "layers" => cfg.layers = number("layers")?,
                "heads" => cfg.heads = number("heads")?,
                "d_model" => cfg.d_model = number("d_model")?,
                "d_ff" => cfg.d_ff = number("d_ff")?,
                "pe" => {
                    cfg.pe = match value {
                        "sin" | "sinusoidal" | "interleaved" => PeKind::Interleaved,
                        "sin-concat" | "concatenated" => PeKind::Concatenated,
                        "learned" => PeKind::Learned,
                        "none" => PeKind::None,
                        _ => return Err(bad("pe", format!("{value:?}: choose sin, sin-concat, learned or none"))),
                    };
                }
                "base" | "pe_base" => cfg.pe_base = real("base")?,
                "norm" => {
                    cfg.norm = match value {
                        "post" => NormPlacement::Post,
                        "pre" => NormPlacement::Pre,
                        _ => return Err(bad("norm", format!("{value:?}: choose pre or post"))),
                    };
                }
                "causal" => cfg.causal = flag("causal")?,
                "cls" => cfg.cls = flag("cls")?,
                "scale" => {
                    cfg.scaling = match value {
                        "sqrt" | "1/sqrt(d_k)" => Scaling::InvSqrtDk,
                        "none" => Scaling::None,
                        _ => {
                            cfg.custom_scale = real("scale")? as f32;
                            Scaling::Custom
                        }
                    };
                }
                "std" | "init_std" => cfg.init_std = real("std")? as f32,
                "seed" => {
                    cfg.seed = value.parse().map_err(|_| bad("seed", format!("{value:?} is not a whole number")))?;
                }
                _ => {
                    return Err(bad(
                        "spec",
                        format!(
                            "unknown key {key:?}; keys: layers, heads, d_model, d_ff, pe, base, norm, causal, scale, std, seed, cls"
                        ),
                    ));
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// About how many bytes the model needs: its weights, and the attention, scores, queries and
    /// keys it records for the longest input.
    pub fn memory_bytes(&self, vocab: usize) -> usize {
        let (d, f, l, h, n) = (self.d_model, self.d_ff, self.layers, self.heads, MAX_POSITIONS);
        let per_layer = 4 * d * d + 2 * d * f + f + 9 * d;
        let weights = (vocab + n + 2) * d + l.saturating_mul(per_layer);
        let recorded = l.saturating_mul(h).saturating_mul(2 * n * n) + l.saturating_mul(2 * n * d);
        weights.saturating_add(recorded).saturating_mul(4)
    }

    /// Checks the hyperparameters; the error names the one at fault and says why.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.validate_for(30_522)
    }

    fn validate_for(&self, vocab: usize) -> Result<(), ModelError> {
        if self.layers == 0 {
            return Err(bad("layers", "an encoder needs at least 1 layer"));
        }
        if self.heads == 0 {
            return Err(bad("heads", "at least 1 head"));
        }
        if self.d_model == 0 {
            return Err(bad("d_model", "must be at least 1"));
        }
        check_widths(self.d_model, self.heads, self.pe.layout().is_some(), self.pe_base)
            .map_err(|(field, message)| bad(field, message))?;
        if self.d_ff == 0 {
            return Err(bad("d_ff", "must be at least 1"));
        }
        if !(self.init_std.is_finite() && self.init_std >= 0.0) {
            return Err(bad("std", format!("must be a number ≥ 0, got {}", self.init_std)));
        }
        if self.scaling == Scaling::Custom && !self.custom_scale.is_finite() {
            return Err(bad("scale", format!("must be a finite number, got {}", self.custom_scale)));
        }
        let bytes = self.memory_bytes(vocab);
        if bytes > MEMORY_LIMIT_BYTES {
            return Err(bad(
                "size",
                format!(
                    "this model would need about {:.1} GB (limit {} GB with {MAX_POSITIONS} tokens): use fewer layers or heads, or a smaller d_model or d_ff",
                    bytes as f64 / 1e9,
                    MEMORY_LIMIT_BYTES >> 30
                ),
            ));
        }
        Ok(())
    }

    /// One line saying what this playground model is.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "playground · {} layers × {} heads · d_model {} · d_ff {} · PE {}",
            self.layers,
            self.heads,
            self.d_model,
            self.d_ff,
            self.pe.label()
        );
        if self.pe.layout().is_some() {
            let _ = write!(s, " (base {})", self.pe_base);
        }
        let _ = write!(s, " · {}", if self.norm == NormPlacement::Pre { "pre-LN" } else { "post-LN" });
        match self.scaling {
            Scaling::InvSqrtDk => s.push_str(" · 1/√d_k"),
            Scaling::None => s.push_str(" · unscaled"),
            Scaling::Custom => {
                let _ = write!(s, " · scale {}", self.custom_scale);
            }
        }
        if self.causal {
            s.push_str(" · causal");
        }
        if !self.cls {
            s.push_str(" · no [CLS]");
        }
        let _ = write!(s, " · std {} · seed {}", self.init_std, self.seed);
        s
    }

    /// Builds the encoder with random weights and the embedded model's `WordPiece` tokenizer, built
    /// in memory (no file is read).
    pub fn build_default(&self) -> Result<LoadedModel, ModelError> {
        let tokenizer = TextTokenizer::from_json(PLAYGROUND_TOKENIZER, MAX_POSITIONS)?;
        self.build_with(tokenizer, super::default_model_dir())
    }

    /// Builds the encoder with random weights, using the tokenizer in `tokenizer_path`.
    pub fn build(&self, tokenizer_path: &Path) -> Result<LoadedModel, ModelError> {
        let tokenizer = TextTokenizer::from_file(tokenizer_path, MAX_POSITIONS)?;
        let dir = tokenizer_path.parent().map(Path::to_path_buf).unwrap_or_default();
        self.build_with(tokenizer, dir)
    }

    /// Builds the encoder with random weights around `tokenizer`; `dir` is where it says it is from.
    fn build_with(&self, mut tokenizer: TextTokenizer, dir: std::path::PathBuf) -> Result<LoadedModel, ModelError> {
        if !self.cls {
            tokenizer = tokenizer.without_special_tokens();
        }
        let vocab = tokenizer.vocab_size();
        self.validate_for(vocab)?;
        let has_positions = self.pe != PeKind::None;
        // BERT's shape (post_ln_encoder: every layer biased, LayerNorm, no rotary, no head), then
        // what the hyperparameters choose.
        let sizes =
            Sizes { vocab, hidden: self.d_model, layers: self.layers, heads: self.heads, intermediate: self.d_ff };
        let base = super::families::post_ln_encoder(&sizes, Activation::Gelu, 1e-5, MAX_POSITIONS);
        let desc = Description {
            family: "playground".into(),
            embedding: EmbeddingDesc {
                positions: if has_positions {
                    Positions::Table { rows: MAX_POSITIONS, offset: 0 }
                } else {
                    Positions::None
                },
                scale: (self.d_model as f32).sqrt(),
                norm: false,
                positions_first: true,
                // No segment table (token_types 0): sentence B is allowed and changes nothing.
                ..base.embedding
            },
            causal: self.causal,
            score_scale: match self.scaling {
                Scaling::InvSqrtDk => super::families::inverse_sqrt(self.d_model / self.heads),
                Scaling::None => 1.0,
                Scaling::Custom => self.custom_scale,
            },
            norm: self.norm,
            final_norm: self.norm == NormPlacement::Pre,
            ..base
        };
        let tensors = self.weights(vocab).map_err(ModelError::Inference)?;
        let net = Network::load(&desc, Weights::new(tensors, WeightStorage::F32))?;
        Ok(LoadedModel {
            name: self.describe(),
            dir,
            net,
            tokenizer,
            playground: true,
            eos: Vec::new(),
            quantization: None,
            decoder: None,
        })
    }

    /// Random weights under BERT's names: normal(0, std) matrices and embeddings, zero biases,
    /// unit norms; the position table is the chosen encoding.
    fn weights(&self, vocab: usize) -> candle_core::Result<HashMap<String, Tensor>> {
        let (d, f) = (self.d_model, self.d_ff);
        let dev = Device::Cpu;
        let mut map = HashMap::new();
        let normal = |name: &str, rows: usize, cols: usize| -> candle_core::Result<Tensor> {
            let mut rng = Normal::new(self.seed, name);
            let values: Vec<f32> = (0..rows * cols).map(|_| rng.sample() * self.init_std).collect();
            Tensor::from_vec(values, (rows, cols), &dev)
        };
        let constant = |value: f32, len: usize| Tensor::from_vec(vec![value; len], len, &dev);
        let mut add = |name: String, t: Tensor| {
            map.insert(name, t);
        };
        add("embed.tokens.weight".into(), normal("word", vocab, d)?);
        match self.pe.layout() {
            Some(layout) => {
                let params = PeParams { d_model: d, positions: MAX_POSITIONS, base: self.pe_base, layout };
                let table = pe::encoding(params).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
                add("embed.positions.weight".into(), Tensor::from_vec(table, (MAX_POSITIONS, d), &dev)?);
            }
            None if self.pe == PeKind::Learned => {
                add("embed.positions.weight".into(), normal("position", MAX_POSITIONS, d)?);
            }
            None => {}
        }
        for l in 0..self.layers {
            let p = format!("layer.{l}");
            // Streams are named after BERT's modules, so the weights stay what they were.
            for (name, stream, rows, cols) in [
                ("q", "attention.self.query", d, d),
                ("k", "attention.self.key", d, d),
                ("v", "attention.self.value", d, d),
                ("o", "attention.output.dense", d, d),
                ("up", "intermediate.dense", f, d),
                ("down", "output.dense", d, f),
            ] {
                add(format!("{p}.{name}.weight"), normal(&format!("encoder.layer.{l}.{stream}"), rows, cols)?);
                add(format!("{p}.{name}.bias"), constant(0.0, rows)?);
            }
            for norm in ["attn_norm", "ffn_norm"] {
                add(format!("{p}.{norm}.weight"), constant(1.0, d)?);
                add(format!("{p}.{norm}.bias"), constant(0.0, d)?);
            }
        }
        if self.norm == NormPlacement::Pre {
            add("final_norm.weight".into(), constant(1.0, d)?);
            add("final_norm.bias".into(), constant(0.0, d)?);
        }
        Ok(map)
    }
}

/// Normal samples from `SplitMix64` + Box–Muller, one stream per (seed, tensor name), so a tensor's
/// values do not change when unrelated hyperparameters do (e.g. layer 0 stays when a layer is added).
struct Normal {
    state: u64,
    spare: Option<f32>,
}

impl Normal {
    fn new(seed: u64, name: &str) -> Self {
        // FNV-1a of the name, mixed with the seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Self { state: seed ^ h, spare: None }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn sample(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let (u1, u2) = (self.uniform(), self.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f64::consts::TAU * u2;
        self.spare = Some((r * theta.sin()) as f32);
        (r * theta.cos()) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_values_name_the_field() {
        let cfg = PlaygroundConfig::parse("layers=3, heads=2,d_model=32,pe=none,seed=7,norm=pre,causal=on").unwrap();
        assert_eq!((cfg.layers, cfg.heads, cfg.d_model, cfg.seed), (3, 2, 32, 7));
        assert_eq!((cfg.pe, cfg.norm, cfg.causal), (PeKind::None, NormPlacement::Pre, true));
        let err = |s: &str| PlaygroundConfig::parse(s).unwrap_err().to_string();
        assert!(err("heads=3").contains("d_model") && err("heads=3").contains("divisible"));
        assert!(err("layers=0").contains("layers"));
        assert!(err("d_model=63,heads=3,pe=sin").contains("odd"));
        assert!(err("color=red").contains("unknown key"));
        assert!(err("layers=48,heads=64,d_model=4096,d_ff=16384").contains("GB"));
        assert!(PlaygroundConfig::parse("d_model=63,heads=3,pe=none").is_ok());
        assert_eq!(PlaygroundConfig::parse("scale=0.5").unwrap().scaling, Scaling::Custom);
    }

    #[test]
    fn weights_are_reproducible_per_tensor() {
        let mut a = Normal::new(3, "word");
        let mut b = Normal::new(3, "word");
        let mut c = Normal::new(4, "word");
        let (xa, xb, xc): (Vec<f32>, Vec<f32>, Vec<f32>) = (
            (0..8).map(|_| a.sample()).collect(),
            (0..8).map(|_| b.sample()).collect(),
            (0..8).map(|_| c.sample()).collect(),
        );
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
        // Roughly standard normal.
        let mut r = Normal::new(1, "x");
        let v: Vec<f64> = (0..20_000).map(|_| f64::from(r.sample())).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean} var {var}");
    }

    #[test]
    fn odd_widths_run_and_an_empty_input_is_an_error_not_a_panic() {
        use crate::model::{Capture, Interventions};
        // d_model 63 and head_dim 21: linear layers end in a narrow weight panel (63 and 189
        // outputs are not multiples of 64), heads start at odd offsets of the fused q/k/v rows.
        let cfg = PlaygroundConfig::parse("layers=2,heads=3,d_model=63,pe=none,seed=5").unwrap();
        let model = cfg.build_default().unwrap();
        let faithful = Interventions::default();
        let out = model.net.forward(&[101, 7592, 2088, 102], &[0; 4], Capture::Full, &faithful).unwrap();
        assert_eq!(out.probs.len(), 2 * 3 * 4 * 4);
        assert_eq!(out.queries.len(), 2 * 3 * 4 * 21);
        assert_eq!(out.last_hidden.len(), 4 * 63);
        for row in out.probs.chunks(4) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        assert!(out.last_hidden.iter().all(|v| v.is_finite()));
        let err = model.net.forward(&[], &[], Capture::Attention, &faithful).unwrap_err().to_string();
        assert!(err.contains("at least one token"), "{err}");
    }
}
