//! Per-head statistics after Clark et al. 2019 ("What does BERT look at?"): how spread out each
//! head's attention is, and how much of it goes to [CLS], [SEP], punctuation, the token itself and
//! its neighbours.

use std::fmt::Write as _;

use serde::Serialize;

use super::words::is_punctuation;
use super::{Attention, Tokens};

/// One statistic of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum Statistic {
    /// Mean entropy of the attention rows, in nats.
    #[default]
    Entropy,
    /// Mean share of attention to the first special token ([CLS], `<s>`).
    Cls,
    /// Mean share to the other special tokens ([SEP], `</s>`).
    Sep,
    /// Mean share to punctuation tokens.
    Punctuation,
    /// Mean share to the token itself.
    SelfToken,
    /// Mean share to the previous token.
    Previous,
    /// Mean share to the next token.
    Next,
    /// Mean share of each row that goes to the head's attention sink, no token (models with
    /// sinks: gpt-oss).
    Sink,
}

impl Statistic {
    /// Every statistic, in column order ([`Self::Sink`] only for models with sinks: see
    /// [`HeadStats::statistics`]).
    pub const ALL: [Self; 8] = [
        Self::Entropy,
        Self::Cls,
        Self::Sep,
        Self::Punctuation,
        Self::SelfToken,
        Self::Previous,
        Self::Next,
        Self::Sink,
    ];

    /// Column name in CSV/JSON.
    pub fn key(self) -> &'static str {
        match self {
            Self::Entropy => "entropy",
            Self::Cls => "cls",
            Self::Sep => "sep",
            Self::Punctuation => "punctuation",
            Self::SelfToken => "self",
            Self::Previous => "previous",
            Self::Next => "next",
            Self::Sink => "sink",
        }
    }

    /// Human label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Entropy => "Entropy (nats)",
            Self::Cls => "→ [CLS]",
            Self::Sep => "→ [SEP]",
            Self::Punctuation => "→ punctuation",
            Self::SelfToken => "→ itself",
            Self::Previous => "→ previous token",
            Self::Next => "→ next token",
            Self::Sink => "→ sink",
        }
    }

    /// What it measures, for tooltips and titles.
    pub fn description(self) -> &'static str {
        match self {
            Self::Entropy => "mean entropy of the attention rows (0 = all on one token, ln n = uniform)",
            Self::Cls => "mean share of attention given to the first special token ([CLS])",
            Self::Sep => "mean share of attention given to the other special tokens ([SEP])",
            Self::Punctuation => "mean share of attention given to punctuation tokens",
            Self::SelfToken => "mean share of attention a token gives itself",
            Self::Previous => "mean share of attention given to the previous token",
            Self::Next => "mean share of attention given to the next token",
            Self::Sink => "mean share of attention given to the head's learned sink, no token",
        }
    }

    /// Whether the statistic is a share (0 to 1) rather than an entropy.
    pub fn is_share(self) -> bool {
        self != Self::Entropy
    }
}

/// The statistics of every layer × head of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadStats {
    layers: usize,
    heads: usize,
    /// Tokens the averages were taken over.
    pub tokens: usize,
    /// `[layer][head][statistic]` in [`Statistic::ALL`] order (the sink's NaN without sinks).
    values: Vec<[f32; 8]>,
    /// The run's model has attention sinks ([`Self::with_sinks`]).
    sinks: bool,
}

/// One row of the statistics table (CSV line / JSON object).
#[derive(Debug, Clone, Serialize)]
pub struct StatsRow {
    /// Layer index.
    pub layer: usize,
    /// Head index.
    pub head: usize,
    /// Mean row entropy in nats.
    pub entropy: f32,
    /// Share to [CLS].
    pub cls: f32,
    /// Share to [SEP].
    pub sep: f32,
    /// Share to punctuation.
    pub punctuation: f32,
    /// Share to the token itself.
    #[serde(rename = "self")]
    pub self_token: f32,
    /// Share to the previous token.
    pub previous: f32,
    /// Share to the next token.
    pub next: f32,
    /// Share to the head's attention sink (models with sinks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink: Option<f32>,
}

impl HeadStats {
    /// Computes every statistic of every head, averaging over all query rows; `tokens` are the
    /// keys (the source, for cross-attention, where the shares to the token itself and its
    /// neighbours are not defined and are NaN).
    pub fn compute(attention: &Attention, tokens: &Tokens) -> Self {
        let n = attention.seq_len();
        let keys = attention.keys().min(tokens.len());
        let square = attention.is_square();
        let cls: Vec<bool> = (0..keys).map(|i| tokens.special[i] && i == 0).collect();
        let sep: Vec<bool> = (0..keys).map(|i| tokens.special[i] && i != 0).collect();
        let punct: Vec<bool> = tokens.tokens.iter().map(|t| is_punctuation(t)).collect();
        let mut values = Vec::with_capacity(attention.layers() * attention.heads());
        for l in 0..attention.layers() {
            for h in 0..attention.heads() {
                let mut sums = [0.0f64; 8];
                sums[7] = f64::NAN;
                for q in 0..n {
                    let row = attention.row(l, h, q);
                    let entropy: f64 = row
                        .iter()
                        .filter(|&&p| p > 0.0)
                        .map(|&p| {
                            let p = f64::from(p);
                            -p * p.ln()
                        })
                        .sum();
                    let share = |mask: &[bool]| -> f64 {
                        row.iter().zip(mask).filter(|(_, m)| **m).map(|(&p, _)| f64::from(p)).sum()
                    };
                    sums[0] += entropy;
                    sums[1] += share(&cls);
                    sums[2] += share(&sep);
                    sums[3] += share(&punct);
                    if square {
                        sums[4] += f64::from(row[q]);
                        sums[5] += if q > 0 { f64::from(row[q - 1]) } else { 0.0 };
                        sums[6] += if q + 1 < n { f64::from(row[q + 1]) } else { 0.0 };
                    } else {
                        sums[4..].fill(f64::NAN);
                    }
                }
                let count = n.max(1) as f64;
                values.push(sums.map(|s| (s / count) as f32));
            }
        }
        Self { layers: attention.layers(), heads: attention.heads(), tokens: n, values, sinks: false }
    }

    /// With the mean share each head gives its attention sink ([`Statistic::Sink`]), for a run
    /// that has sinks (`sinks` None: unchanged).
    #[must_use]
    pub fn with_sinks(mut self, sinks: Option<&super::Sinks>) -> Self {
        let Some(s) = sinks.filter(|s| (s.layers(), s.heads()) == (self.layers, self.heads)) else { return self };
        for l in 0..self.layers {
            for h in 0..self.heads {
                self.values[l * self.heads + h][7] = s.mean(l, h);
            }
        }
        self.sinks = true;
        self
    }

    /// The statistics this run has: [`Statistic::ALL`], the sink's only with sinks.
    pub fn statistics(&self) -> Vec<Statistic> {
        Statistic::ALL.into_iter().filter(|&s| s != Statistic::Sink || self.sinks).collect()
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Heads per layer.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// One statistic of one head.
    pub fn get(&self, layer_idx: usize, head_idx: usize, stat: Statistic) -> f32 {
        let i = Statistic::ALL.iter().position(|&s| s == stat).expect("every statistic is listed");
        self.values[layer_idx * self.heads + head_idx][i]
    }

    /// One statistic as a `layers × heads` matrix, row-major.
    pub fn matrix(&self, stat: Statistic) -> Vec<f32> {
        (0..self.layers).flat_map(|l| (0..self.heads).map(move |h| (l, h))).map(|(l, h)| self.get(l, h, stat)).collect()
    }

    /// One row per layer × head.
    pub fn rows(&self) -> Vec<StatsRow> {
        let mut out = Vec::with_capacity(self.values.len());
        for l in 0..self.layers {
            for h in 0..self.heads {
                let [entropy, cls, sep, punctuation, self_token, previous, next, sink] =
                    self.values[l * self.heads + h];
                let sink = self.sinks.then_some(sink);
                out.push(StatsRow {
                    layer: l,
                    head: h,
                    entropy,
                    cls,
                    sep,
                    punctuation,
                    self_token,
                    previous,
                    next,
                    sink,
                });
            }
        }
        out
    }

    /// The table as CSV: a header line, then one line per head.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("layer,head");
        let columns = if self.sinks { 8 } else { 7 };
        for s in self.statistics() {
            out.push(',');
            out.push_str(s.key());
        }
        out.push('\n');
        for l in 0..self.layers {
            for h in 0..self.heads {
                let _ = write!(out, "{l},{h}");
                for v in &self.values[l * self.heads + h][..columns] {
                    let _ = write!(out, ",{v}");
                }
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens {
            tokens: ["[CLS]", "hi", ",", "[SEP]"].iter().map(ToString::to_string).collect(),
            ids: vec![0, 1, 2, 3],
            segments: vec![0; 4],
            type_ids: vec![0; 4],
            special: vec![true, false, false, true],
        }
    }

    #[test]
    fn hand_built_heads_give_known_statistics() {
        // Head 0: every token attends to itself. Head 1: uniform. Head 2: to the previous token
        // (the first to itself). Head 3: all to [SEP].
        let n = 4;
        let mut data = Vec::new();
        let eye: Vec<f32> = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
        data.extend(&eye);
        data.extend(vec![0.25f32; n * n]);
        data.extend((0..n * n).map(|i| {
            let (q, k) = (i / n, i % n);
            if k + 1 == q || (q == 0 && k == 0) { 1.0 } else { 0.0 }
        }));
        data.extend((0..n * n).map(|i| if i % n == 3 { 1.0 } else { 0.0 }));
        let a = Attention::new(1, 4, n, data).unwrap();
        let s = HeadStats::compute(&a, &tokens());
        assert_eq!(s.get(0, 0, Statistic::Entropy), 0.0);
        assert_eq!(s.get(0, 0, Statistic::SelfToken), 1.0);
        assert_eq!(s.get(0, 0, Statistic::Cls), 0.25);
        assert_eq!(s.get(0, 0, Statistic::Sep), 0.25);
        assert_eq!(s.get(0, 0, Statistic::Punctuation), 0.25);
        assert!((s.get(0, 1, Statistic::Entropy) - 4f32.ln()).abs() < 1e-6);
        assert_eq!(s.get(0, 1, Statistic::Next), 0.25 * 3.0 / 4.0);
        assert_eq!(s.get(0, 2, Statistic::Previous), 0.75);
        assert_eq!(s.get(0, 2, Statistic::SelfToken), 0.25);
        assert_eq!(s.get(0, 3, Statistic::Sep), 1.0);
        assert_eq!(s.get(0, 3, Statistic::Next), 0.25);
        assert_eq!(s.matrix(Statistic::SelfToken), vec![1.0, 0.25, 0.25, 0.25]);
        let csv = s.to_csv();
        assert_eq!(csv.lines().next(), Some("layer,head,entropy,cls,sep,punctuation,self,previous,next"));
        assert_eq!(csv.lines().nth(1), Some("0,0,0,0.25,0.25,0.25,1,0,0"));
        let json = serde_json::to_value(s.rows()).unwrap();
        assert_eq!(json[3]["sep"], 1.0);
        assert_eq!(json[0]["self"], 1.0);
        assert!(json[0].get("sink").is_none() && !s.statistics().contains(&Statistic::Sink));
        // With sinks: the mean share of each head, in the table and its CSV.
        let sinks = crate::analysis::Sinks::new(1, 4, n, vec![0.5; 4 * n]).unwrap();
        let s = s.with_sinks(Some(&sinks));
        assert_eq!(s.get(0, 2, Statistic::Sink), 0.5);
        assert_eq!(s.statistics().last(), Some(&Statistic::Sink));
        assert!(s.to_csv().lines().next().unwrap().ends_with(",next,sink"));
        assert_eq!(serde_json::to_value(s.rows()).unwrap()[1]["sink"], 0.5);
    }
}
