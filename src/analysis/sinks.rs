//! Attention sinks (gpt-oss): each head's learned logit that joins every row's softmax as a
//! column that is no key. The attention over the real keys sums to 1 minus the sink's share,
//! which is kept here, `[layer][head][query]`, for the views to draw apart from the tokens.

use super::ShapeError;

/// The sink's share of every attention row, `[layer][head][query]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sinks {
    layers: usize,
    heads: usize,
    seq_len: usize,
    values: Vec<f32>,
}

impl Sinks {
    /// Wraps `values` laid out as `[layer][head][query]`.
    pub fn new(layers: usize, heads: usize, seq_len: usize, values: Vec<f32>) -> Result<Self, ShapeError> {
        let expected = layers * heads * seq_len;
        if values.len() != expected {
            return Err(ShapeError {
                what: "sink shares",
                shape: format!("{layers}×{heads}×{seq_len}"),
                expected,
                got: values.len(),
            });
        }
        Ok(Self { layers, heads, seq_len, values })
    }

    /// Layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Heads per layer.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Query rows.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The sink's share of row `query_pos` of one head.
    pub fn share(&self, layer_idx: usize, head_idx: usize, query_pos: usize) -> f32 {
        self.values[(layer_idx * self.heads + head_idx) * self.seq_len + query_pos]
    }

    /// The shares of every row of one head, one per query.
    pub fn head(&self, layer_idx: usize, head_idx: usize) -> &[f32] {
        let start = (layer_idx * self.heads + head_idx) * self.seq_len;
        &self.values[start..start + self.seq_len]
    }

    /// The mean over `heads` of one layer, one per query (what a view of averaged heads shows).
    pub fn mean_of_heads(&self, layer_idx: usize, heads: &[usize]) -> Vec<f32> {
        let mut out = vec![0.0; self.seq_len];
        for &h in heads {
            out.iter_mut().zip(self.head(layer_idx, h)).for_each(|(o, v)| *o += v);
        }
        let count = heads.len().max(1) as f32;
        for o in &mut out {
            *o /= count;
        }
        out
    }

    /// The mean share over every row of one head (the statistics view's "sink").
    pub fn mean(&self, layer_idx: usize, head_idx: usize) -> f32 {
        let row = self.head(layer_idx, head_idx);
        row.iter().sum::<f32>() / row.len().max(1) as f32
    }

    /// Every share, `[layer][head][query]`.
    pub fn as_slice(&self) -> &[f32] {
        &self.values
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    #[test]
    fn shares_are_read_per_head_and_averaged() {
        let s = Sinks::new(1, 2, 2, vec![0.5, 0.25, 0.1, 0.3]).unwrap();
        assert_eq!(s.share(0, 1, 0), 0.1);
        assert_eq!(s.head(0, 0), &[0.5, 0.25]);
        assert!((s.mean(0, 1) - 0.2).abs() < 1e-7);
        let m = s.mean_of_heads(0, &[0, 1]);
        assert!((m[0] - 0.3).abs() < 1e-7 && (m[1] - 0.275).abs() < 1e-7, "{m:?}");
        assert!(Sinks::new(1, 2, 3, vec![0.0; 5]).is_err());
    }
}
