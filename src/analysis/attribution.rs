//! Direct logit attribution (`TransformerLens`'s `decompose_resid` + `apply_ln_to_stack`): the final
//! residual stream at a position is the sum of what every part wrote into it (the embeddings,
//! each head, each attention block's output bias, each MLP); the final norm, linearised at this
//! input (centred for a `LayerNorm`, divided by the scale it divided this position's row by),
//! and the unembedding row of a token turn each part's write into its share of that token's
//! logit. The shares, plus what does not depend on the input (the norm's bias through the row,
//! the head's bias), sum to the logit.

use serde::Serialize;

/// How a residual row becomes one token's logit, linearised at one position: plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct Readout<'a> {
    /// Centre each part first (`LayerNorm`).
    pub centred: bool,
    /// What the norm divided this position's row by.
    pub scale: f32,
    /// The norm's weight as it multiplies (empty: none).
    pub norm_weight: &'a [f32],
    /// The norm's bias (empty: none).
    pub norm_bias: &'a [f32],
    /// The token's unembedding row.
    pub unembedding: &'a [f32],
    /// The head's bias for the token.
    pub bias: f32,
}

impl Readout<'_> {
    /// `x` through the final norm as linearised at this position: `centre(x)_d / scale · w_d`,
    /// in f64.
    fn normed<'x>(&'x self, x: &'x [f32]) -> impl Iterator<Item = f64> + 'x {
        let mean =
            if self.centred { x.iter().map(|&v| f64::from(v)).sum::<f64>() / x.len().max(1) as f64 } else { 0.0 };
        let scale = f64::from(self.scale);
        x.iter().enumerate().map(move |(d, &v)| {
            let w = self.norm_weight.get(d).map_or(1.0, |&w| f64::from(w));
            (f64::from(v) - mean) / scale * w
        })
    }

    /// One part's share of the logit: `Σ_d (centre(x)_d / scale) · w_d · u_d`, summed in f64.
    pub fn share(&self, x: &[f32]) -> f64 {
        self.normed(x).zip(self.unembedding).map(|(n, &u)| n * f64::from(u)).sum()
    }

    /// A part's write through the final norm as linearised here (what the unembedding then turns
    /// into its change of every logit).
    pub fn through_norm(&self, x: &[f32]) -> Vec<f32> {
        self.normed(x).map(|n| n as f32).collect()
    }

    /// What does not depend on the input: the norm's bias through the row, plus the head's bias.
    pub fn constant(&self) -> f64 {
        let through: f64 =
            self.norm_bias.iter().zip(self.unembedding).map(|(&b, &u)| f64::from(b) * f64::from(u)).sum();
        through + f64::from(self.bias)
    }
}

/// Every part's direct contribution to one token's logit at one position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// The position.
    pub position: usize,
    /// The token whose logit is split (for a difference "A − B": A).
    pub target_id: u32,
    /// Its string.
    pub target_token: String,
    /// For a difference, the token subtracted.
    pub versus_id: Option<u32>,
    /// Its string.
    pub versus_token: Option<String>,
    /// The model's logit (or logit difference) there.
    pub logit: f32,
    /// The embeddings (and learned positions).
    pub embeddings: f32,
    /// Each head's write, `[layer][head]` row-major (`layers × heads`).
    pub heads: Vec<f32>,
    /// Each attention block's output bias.
    pub attention_biases: Vec<f32>,
    /// Each MLP's write.
    pub mlps: Vec<f32>,
    /// Everything that does not depend on the input: the head's bias, and for a `LayerNorm`
    /// the final norm's bias through the unembedding row.
    pub lm_head_bias: f32,
    /// Layers.
    pub layers: usize,
    /// Heads per layer.
    pub heads_per_layer: usize,
}

impl Attribution {
    /// The sum of every term (equal to `logit` up to rounding).
    pub fn total(&self) -> f64 {
        let sum = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>();
        f64::from(self.embeddings)
            + sum(&self.heads)
            + sum(&self.attention_biases)
            + sum(&self.mlps)
            + f64::from(self.lm_head_bias)
    }

    /// `self − other` term by term (the attribution of a logit difference), keeping `self`'s
    /// target and naming `other`'s as the one subtracted.
    #[must_use]
    pub fn minus(mut self, other: &Self) -> Self {
        let sub = |a: &mut [f32], b: &[f32]| a.iter_mut().zip(b).for_each(|(a, b)| *a -= b);
        self.logit -= other.logit;
        self.embeddings -= other.embeddings;
        sub(&mut self.heads, &other.heads);
        sub(&mut self.attention_biases, &other.attention_biases);
        sub(&mut self.mlps, &other.mlps);
        self.lm_head_bias -= other.lm_head_bias;
        self.versus_id = Some(other.target_id);
        self.versus_token = Some(other.target_token.clone());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_a_layer_norm_readout_sum_to_the_logit_of_the_whole_row() {
        let parts = [vec![1.0f32, -2.0, 0.5], vec![0.25, 0.75, -1.0], vec![3.0, 0.0, 1.0]];
        let whole: Vec<f32> = (0..3).map(|d| parts.iter().map(|p| p[d]).sum()).collect();
        let (w, b, u) = ([1.5f32, 0.5, -1.0], [0.1f32, -0.2, 0.3], [0.7f32, -0.4, 2.0]);
        let mean = whole.iter().sum::<f32>() / 3.0;
        let var = whole.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 3.0;
        let scale = (var + 1e-5).sqrt();
        let logit: f32 = (0..3).map(|d| ((whole[d] - mean) / scale * w[d] + b[d]) * u[d]).sum::<f32>() + 0.25;
        let r = Readout { centred: true, scale, norm_weight: &w, norm_bias: &b, unembedding: &u, bias: 0.25 };
        let total: f64 = parts.iter().map(|p| r.share(p)).sum::<f64>() + r.constant();
        assert!((total - f64::from(logit)).abs() < 1e-5, "{total} vs {logit}");
    }
}
