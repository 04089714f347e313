//! Attention from one sequence to another: an encoder–decoder's cross-attention, every decoder
//! token (query) over every source token (key), `[layer][head][target][source]`, f32, rows sum to 1.

use serde::ser::{Serialize, SerializeSeq, Serializer};

use super::{Attention, ShapeError, Tokens};

/// Cross-attention probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossAttention {
    layers: usize,
    heads: usize,
    targets: usize,
    sources: usize,
    data: Vec<f32>,
}

impl CrossAttention {
    /// Wraps `layers × heads × targets × sources` values.
    pub fn new(
        layers: usize,
        heads: usize,
        targets: usize,
        sources: usize,
        data: Vec<f32>,
    ) -> Result<Self, ShapeError> {
        let expected = layers * heads * targets * sources;
        if data.len() != expected {
            let shape = format!("{layers}×{heads}×{targets}×{sources}");
            return Err(ShapeError { what: "cross-attention", shape, expected, got: data.len() });
        }
        Ok(Self { layers, heads, targets, sources, data })
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Heads per layer.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Decoder tokens (rows).
    pub fn targets(&self) -> usize {
        self.targets
    }

    /// Source tokens (columns).
    pub fn sources(&self) -> usize {
        self.sources
    }

    /// One head's `targets × sources` matrix.
    pub fn head(&self, layer_idx: usize, head_idx: usize) -> &[f32] {
        let size = self.targets * self.sources;
        let start = (layer_idx * self.heads + head_idx) * size;
        &self.data[start..start + size]
    }

    /// One weight.
    pub fn get(&self, layer_idx: usize, head_idx: usize, target: usize, source: usize) -> f32 {
        self.head(layer_idx, head_idx)[target * self.sources + source]
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The mean of `heads` of one layer, `targets × sources`.
    pub fn mean_of_heads(&self, layer_idx: usize, head_idxs: &[usize]) -> Vec<f32> {
        let mut out = vec![0.0; self.targets * self.sources];
        for &h in head_idxs {
            out.iter_mut().zip(self.head(layer_idx, h)).for_each(|(o, v)| *o += v);
        }
        let k = head_idxs.len().max(1) as f32;
        for o in &mut out {
            *o /= k;
        }
        out
    }

    /// Serializes as nested `[layer][head][target][source]` arrays.
    pub fn nested(&self) -> NestedCross<'_> {
        NestedCross(self)
    }
}

/// [`CrossAttention::nested`].
pub struct NestedCross<'a>(&'a CrossAttention);

impl Serialize for NestedCross<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let a = self.0;
        let mut layers = s.serialize_seq(Some(a.layers))?;
        for l in 0..a.layers {
            let heads: Vec<Vec<&[f32]>> =
                (0..a.heads).map(|h| a.head(l, h).chunks(a.sources.max(1)).collect()).collect();
            layers.serialize_element(&heads)?;
        }
        layers.end()
    }
}

/// The decoder side of an encoder–decoder run: what the decoder read, its self-attention (causal)
/// and its attention to the source.
#[derive(Debug, Clone)]
pub struct DecoderRun {
    /// The decoder input: the start token, then the target's tokens.
    pub tokens: Tokens,
    /// Decoder self-attention, `[layer][head][target][target]`.
    pub attention: Attention,
    /// Cross-attention, `[layer][head][target][source]`.
    pub cross: CrossAttention,
    /// The decoder's last hidden state, `targets × hidden`.
    pub last_hidden: Vec<f32>,
    /// Set when the target was cut to fit, saying what was cut.
    pub truncation: Option<String>,
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_and_rows_read_back() {
        assert!(CrossAttention::new(1, 1, 2, 3, vec![0.0; 5]).is_err());
        let a = CrossAttention::new(1, 2, 2, 3, (0..12).map(|v| v as f32).collect()).unwrap();
        assert_eq!(a.get(0, 1, 1, 2), 11.0);
        assert_eq!(a.mean_of_heads(0, &[0, 1])[0], 3.0);
        let json = serde_json::to_string(&a.nested()).unwrap();
        assert_eq!(json, "[[[[0.0,1.0,2.0],[3.0,4.0,5.0]],[[6.0,7.0,8.0],[9.0,10.0,11.0]]]]");
    }
}
