//! Attention probabilities of every layer and head, as plain data.

use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// A shape that does not match the data it describes.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{what}: expected {expected} values for shape {shape}, got {got}")]
pub struct ShapeError {
    /// Which array was malformed.
    pub what: &'static str,
    /// The shape it claimed, written as `a×b×…`.
    pub shape: String,
    /// How many values that shape needs.
    pub expected: usize,
    /// How many values were given.
    pub got: usize,
}

/// Layers × heads × queries × keys matrices (row-major, rows are queries), all `f32`.
///
/// Used for attention probabilities (every row sums to 1) and, with the same layout, for the
/// pre-softmax scaled scores. Queries and keys are the same tokens except for an encoder–decoder's
/// cross-attention ([`Self::rectangular`]: target queries over source keys).
///
/// The values are held in blocks of query rows, `[layer][head][row of the block][stride]` each
/// (a pass's output is one block, `[layer][head][query][key]`). Blocks are shared, never changed:
/// a decoder's next run after a keystroke ([`Self::from_blocks`], made by
/// `crate::model::typing`) holds the same blocks for the rows that did not change, so it costs
/// the rows that did, not `layers × heads × n²` values. [`Self::head`] and [`Self::as_slice`]
/// lay blocked values out as one matrix the first time they are asked for (and keep it).
#[derive(Debug, Clone)]
pub struct Attention {
    layers: usize,
    heads: usize,
    seq_len: usize,
    keys: usize,
    /// Query rows per block (the last block may hold fewer of this matrix's rows).
    block_rows: usize,
    /// Values between the starts of two rows of a block (at least `keys`).
    stride: usize,
    blocks: Vec<Arc<Vec<f32>>>,
    /// Blocked values laid out as one `[query][key]` matrix per layer × head, when asked for.
    matrices: Vec<OnceLock<Vec<f32>>>,
    /// Blocked values laid out as `[layer][head][query][key]`, when asked for.
    all: OnceLock<Vec<f32>>,
}

impl PartialEq for Attention {
    /// The same shape and values (however they are held).
    fn eq(&self, other: &Self) -> bool {
        (self.layers, self.heads, self.seq_len, self.keys) == (other.layers, other.heads, other.seq_len, other.keys)
            && (0..self.layers)
                .all(|l| (0..self.heads).all(|h| (0..self.seq_len).all(|q| self.row(l, h, q) == other.row(l, h, q))))
    }
}

impl Attention {
    /// Wraps `data` laid out as `[layer][head][query][key]`.
    pub fn new(layers: usize, heads: usize, seq_len: usize, data: Vec<f32>) -> Result<Self, ShapeError> {
        Self::rectangular(layers, heads, seq_len, seq_len, data)
    }

    /// Wraps `data` laid out as `[layer][head][query][key]` with `queries` rows and `keys`
    /// columns (cross-attention: target tokens over source tokens).
    pub fn rectangular(
        layers: usize,
        heads: usize,
        queries: usize,
        keys: usize,
        data: Vec<f32>,
    ) -> Result<Self, ShapeError> {
        let expected = layers * heads * queries * keys;
        if data.len() != expected {
            return Err(ShapeError {
                what: "attention",
                shape: format!("{layers}×{heads}×{queries}×{keys}"),
                expected,
                got: data.len(),
            });
        }
        Ok(Self {
            layers,
            heads,
            seq_len: queries,
            keys,
            block_rows: queries,
            stride: keys,
            blocks: vec![Arc::new(data)],
            matrices: Vec::new(),
            all: OnceLock::new(),
        })
    }

    /// Square matrices of `seq_len` tokens held in `blocks` of `block_rows` query rows, each laid
    /// out as `[layer][head][row][stride]` (row `r` of block `b` is query `b · block_rows + r`;
    /// its first `seq_len` values are the row's, the rest unread).
    pub fn from_blocks(
        (layers, heads, seq_len): (usize, usize, usize),
        block_rows: usize,
        stride: usize,
        blocks: Vec<Arc<Vec<f32>>>,
    ) -> Result<Self, ShapeError> {
        check_blocks(
            "attention blocks",
            || {
                format!(
                    "{layers}×{heads}×{seq_len}×{seq_len} in {} blocks of {block_rows} rows {stride} apart",
                    blocks.len()
                )
            },
            (
                layers * heads * block_rows * stride,
                stride >= seq_len && block_rows > 0 && blocks.len() == seq_len.div_ceil(block_rows),
            ),
            &blocks,
        )?;
        let matrices = (0..layers * heads).map(|_| OnceLock::new()).collect();
        Ok(Self { layers, heads, seq_len, keys: seq_len, block_rows, stride, blocks, matrices, all: OnceLock::new() })
    }

    /// Whether the values are one `[layer][head][query][key]` array.
    fn is_flat(&self) -> bool {
        self.matrices.is_empty()
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Number of heads per layer.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Number of query tokens (rows); also the number of keys unless [`Self::is_square`] is false.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Number of key tokens (columns).
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// Whether queries and keys are the same tokens (self-attention).
    pub fn is_square(&self) -> bool {
        self.seq_len == self.keys
    }

    /// All values, `[layer][head][query][key]`.
    pub fn as_slice(&self) -> &[f32] {
        if self.is_flat() {
            return &self.blocks[0];
        }
        self.all.get_or_init(|| {
            let mut all = Vec::with_capacity(self.layers * self.heads * self.seq_len * self.keys);
            for l in 0..self.layers {
                for h in 0..self.heads {
                    all.extend_from_slice(self.head(l, h));
                }
            }
            all
        })
    }

    /// One head's `seq_len × keys` matrix, row-major with queries as rows.
    pub fn head(&self, layer_idx: usize, head_idx: usize) -> &[f32] {
        let n2 = self.seq_len * self.keys;
        if self.is_flat() {
            let start = (layer_idx * self.heads + head_idx) * n2;
            return &self.blocks[0][start..start + n2];
        }
        self.matrices[layer_idx * self.heads + head_idx].get_or_init(|| {
            let mut m = Vec::with_capacity(n2);
            for q in 0..self.seq_len {
                m.extend_from_slice(self.row(layer_idx, head_idx, q));
            }
            m
        })
    }

    /// The weights one query gives to every key.
    pub fn row(&self, layer_idx: usize, head_idx: usize, query_pos: usize) -> &[f32] {
        assert!(layer_idx < self.layers && head_idx < self.heads && query_pos < self.seq_len, "no such row");
        let (block, r) = (query_pos / self.block_rows, query_pos % self.block_rows);
        let start = ((layer_idx * self.heads + head_idx) * self.block_rows + r) * self.stride;
        &self.blocks[block][start..start + self.keys]
    }

    /// The weight query `query_pos` gives key `key_pos`.
    pub fn get(&self, layer_idx: usize, head_idx: usize, query_pos: usize, key_pos: usize) -> f32 {
        self.row(layer_idx, head_idx, query_pos)[key_pos]
    }

    /// Mean over `head_idxs` of one layer's matrices (zeros when the list is empty).
    pub fn mean_of_heads(&self, layer_idx: usize, head_idxs: &[usize]) -> Vec<f32> {
        let mut out = vec![0.0f32; self.seq_len * self.keys];
        if head_idxs.is_empty() {
            return out;
        }
        for &h in head_idxs {
            for (q, o) in out.chunks_mut(self.keys.max(1)).enumerate() {
                for (o, v) in o.iter_mut().zip(self.row(layer_idx, h, q)) {
                    *o += v;
                }
            }
        }
        let k = head_idxs.len() as f32;
        for o in &mut out {
            *o /= k;
        }
        out
    }

    /// Nested `[layer][head][query][key]` vectors, for JSON.
    pub fn to_nested(&self) -> Vec<Vec<Vec<Vec<f32>>>> {
        (0..self.layers)
            .map(|l| (0..self.heads).map(|h| (0..self.seq_len).map(|q| self.row(l, h, q).to_vec()).collect()).collect())
            .collect()
    }

    /// A serializable `[layer][head][query][key]` view, written without building nested vectors.
    pub fn nested(&self) -> Nested<'_> {
        Nested(self)
    }

    /// Largest `|1 - row sum|` over all rows (0 for perfect probabilities).
    pub fn max_row_sum_error(&self) -> f32 {
        if self.keys == 0 {
            return 0.0;
        }
        let mut worst = 0.0f32;
        for l in 0..self.layers {
            for h in 0..self.heads {
                for q in 0..self.seq_len {
                    let sum = self.row(l, h, q).iter().map(|&v| f64::from(v)).sum::<f64>();
                    worst = worst.max((sum - 1.0).abs() as f32);
                }
            }
        }
        worst
    }
}

impl PartialEq for HeadVectors {
    /// The same shape and values (however they are held).
    fn eq(&self, other: &Self) -> bool {
        (self.layers, self.heads, self.seq_len, self.head_dim)
            == (other.layers, other.heads, other.seq_len, other.head_dim)
            && (0..self.layers).all(|l| {
                (0..self.heads).all(|h| (0..self.seq_len).all(|t| self.vector(l, h, t) == other.vector(l, h, t)))
            })
    }
}

/// That `blocks` are each `per_block` values long and `shape_ok` holds (their count, sizes), or
/// which of them is not (`shape` says what they should hold).
fn check_blocks(
    what: &'static str,
    shape: impl FnOnce() -> String,
    (per_block, shape_ok): (usize, bool),
    blocks: &[Arc<Vec<f32>>],
) -> Result<(), ShapeError> {
    match blocks.iter().find(|b| b.len() != per_block).map(|b| b.len()).or((!shape_ok).then_some(0)) {
        Some(got) => Err(ShapeError { what, shape: shape(), expected: per_block, got }),
        None => Ok(()),
    }
}

/// Serializes an [`Attention`] as nested arrays `[layer][head][query][key]`.
pub struct Nested<'a>(&'a Attention);

impl serde::Serialize for Nested<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let a = self.0;
        let per_layer = a.heads * a.seq_len * a.keys;
        let data = a.as_slice();
        serializer.collect_seq((0..a.layers).map(|l| NestedLayer {
            data: &data[l * per_layer..][..per_layer],
            heads: a.heads,
            queries: a.seq_len,
            keys: a.keys,
        }))
    }
}

/// Serializes one layer's matrices (`heads × n × n` values, `[head][query][key]`) as nested
/// arrays `[head][query][key]`: an element of [`Nested`], written as a layer arrives.
pub struct NestedLayer<'a> {
    data: &'a [f32],
    heads: usize,
    queries: usize,
    keys: usize,
}

impl<'a> NestedLayer<'a> {
    /// One layer's values, `heads × seq_len × seq_len`.
    pub fn new(data: &'a [f32], heads: usize, seq_len: usize) -> Self {
        Self { data, heads, queries: seq_len, keys: seq_len }
    }
}

impl serde::Serialize for NestedLayer<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Rows<'a>(&'a [f32], usize);
        impl serde::Serialize for Rows<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.chunks(self.1.max(1)))
            }
        }
        let n2 = self.queries * self.keys;
        serializer.collect_seq((0..self.heads).map(|h| Rows(&self.data[h * n2..(h + 1) * n2], self.keys)))
    }
}

/// Per-head vectors (queries or keys): layers × heads × tokens × `head_dim`.
#[derive(Debug, Clone)]
pub struct HeadVectors {
    layers: usize,
    heads: usize,
    seq_len: usize,
    head_dim: usize,
    /// Tokens per block: blocks are `[layer][head][token of the block][dim]`, shared like
    /// [`Attention`]'s (a pass's output is one block).
    block_tokens: usize,
    blocks: Vec<Arc<Vec<f32>>>,
}

impl HeadVectors {
    /// Wraps `data` laid out as `[layer][head][token][dim]`.
    pub fn new(
        layers: usize,
        heads: usize,
        seq_len: usize,
        head_dim: usize,
        data: Vec<f32>,
    ) -> Result<Self, ShapeError> {
        let expected = layers * heads * seq_len * head_dim;
        if data.len() != expected {
            return Err(ShapeError {
                what: "head vectors",
                shape: format!("{layers}×{heads}×{seq_len}×{head_dim}"),
                expected,
                got: data.len(),
            });
        }
        Ok(Self { layers, heads, seq_len, head_dim, block_tokens: seq_len, blocks: vec![Arc::new(data)] })
    }

    /// Vectors of `seq_len` tokens held in `blocks` of `block_tokens` tokens, each laid out as
    /// `[layer][head][token][dim]`.
    pub fn from_blocks(
        (layers, heads, seq_len, head_dim): (usize, usize, usize, usize),
        block_tokens: usize,
        blocks: Vec<Arc<Vec<f32>>>,
    ) -> Result<Self, ShapeError> {
        check_blocks(
            "head vector blocks",
            || format!("{layers}×{heads}×{seq_len}×{head_dim} in {} blocks of {block_tokens} tokens", blocks.len()),
            (
                layers * heads * block_tokens * head_dim,
                block_tokens > 0 && blocks.len() == seq_len.div_ceil(block_tokens),
            ),
            &blocks,
        )?;
        Ok(Self { layers, heads, seq_len, head_dim, block_tokens, blocks })
    }

    /// Size of one head's vectors.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// The vector of token `pos` in one head.
    pub fn vector(&self, layer_idx: usize, head_idx: usize, pos: usize) -> &[f32] {
        assert!(layer_idx < self.layers && head_idx < self.heads && pos < self.seq_len, "no such vector");
        let (block, t) = (pos / self.block_tokens, pos % self.block_tokens);
        let start = ((layer_idx * self.heads + head_idx) * self.block_tokens + t) * self.head_dim;
        &self.blocks[block][start..start + self.head_dim]
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    fn two_heads() -> Attention {
        // 1 layer, 2 heads, 2 tokens.
        Attention::new(1, 2, 2, vec![0.25, 0.75, 1.0, 0.0, 0.5, 0.5, 0.0, 1.0]).unwrap()
    }

    #[test]
    fn indexing_follows_layer_head_query_key() {
        let a = two_heads();
        assert_eq!(a.get(0, 0, 0, 1), 0.75);
        assert_eq!(a.get(0, 1, 1, 1), 1.0);
        assert_eq!(a.row(0, 1, 0), &[0.5, 0.5]);
        assert_eq!(a.to_nested()[0][1][1], vec![0.0, 1.0]);
        let json = serde_json::to_string(&a.nested()).unwrap();
        assert_eq!(json, "[[[[0.25,0.75],[1.0,0.0]],[[0.5,0.5],[0.0,1.0]]]]");
    }

    #[test]
    fn rectangular_matrices_serialize_rows_of_keys() {
        let a = Attention::rectangular(1, 1, 2, 3, (0..6).map(|v| v as f32).collect()).unwrap();
        let json = serde_json::to_string(&a.nested()).unwrap();
        assert_eq!(json, "[[[[0.0,1.0,2.0],[3.0,4.0,5.0]]]]");
    }

    #[test]
    fn mean_of_heads_averages_and_keeps_rows_normalised() {
        let a = two_heads();
        assert_eq!(a.mean_of_heads(0, &[0, 1]), vec![0.375, 0.625, 0.5, 0.5]);
        assert_eq!(a.max_row_sum_error(), 0.0);
    }

    #[test]
    fn rectangular_rows_are_queries_and_columns_keys() {
        let a = Attention::rectangular(1, 1, 2, 3, vec![0.5, 0.25, 0.25, 0.0, 0.0, 1.0]).unwrap();
        assert!(!a.is_square() && a.seq_len() == 2 && a.keys() == 3);
        assert_eq!(a.row(0, 0, 1), &[0.0, 0.0, 1.0]);
        assert_eq!(a.max_row_sum_error(), 0.0);
        assert_eq!(serde_json::to_string(&a.nested()).unwrap(), "[[[[0.5,0.25,0.25],[0.0,0.0,1.0]]]]");
        assert!(Attention::rectangular(1, 1, 2, 3, vec![0.0; 5]).is_err());
    }

    #[test]
    fn wrong_length_is_a_shape_error() {
        let err = Attention::new(1, 1, 3, vec![0.0; 8]).unwrap_err();
        assert_eq!(err.expected, 9);
        assert_eq!(err.got, 8);
    }
}
