//! Direct logit attribution and a head's effect as the app holds them: computed on the worker
//! thread, keyed by what they were computed for so a result of an older input is never shown.

use crate::analysis::attribution::Attribution;

/// The readable label of every token id in `ids` (each once).
pub fn token_labels(
    model: &crate::model::LoadedModel,
    ids: impl IntoIterator<Item = u32>,
) -> std::collections::BTreeMap<u32, String> {
    let mut labels = std::collections::BTreeMap::new();
    for id in ids {
        labels.entry(id).or_insert_with(|| crate::analysis::tokens::pretty_label(&model.tokenizer.token_of(id)));
    }
    labels
}

/// Tokens listed as a head's write promotes and suppresses.
pub const EFFECT_K: usize = 8;

/// What an attribution is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DlaKey {
    /// Id of the model's token-level run.
    pub source_id: u64,
    /// The position.
    pub position: usize,
    /// The target token as typed (empty: the top prediction).
    pub target: String,
    /// The token subtracted, as typed (empty: none).
    pub versus: String,
}

/// What a head's effect is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EffectKey {
    /// Id of the model's token-level run.
    pub source_id: u64,
    /// The position.
    pub position: usize,
    /// Layer and head.
    pub head: (usize, usize),
}

/// A head's effect with its tokens' labels.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectShown {
    /// `(label, logit change)`, largest first.
    pub promoted: Vec<(String, f32)>,
    /// `(label, logit change)`, most negative first.
    pub suppressed: Vec<(String, f32)>,
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

/// The contribution graph of one token run with the labels of every token its nodes name.
#[derive(Debug, Clone)]
pub struct GraphShown {
    /// The graph with each node's logit-lens top token.
    pub run: crate::model::readout::ContributionRun,
    /// Labels of the tokens named (lens tops, mid-layer tops).
    pub labels: std::collections::BTreeMap<u32, String>,
}

impl GraphShown {
    /// The logit-lens top token of a node and its probability (None: the model has no head).
    pub fn node_top(&self, node: crate::analysis::contrib::Node) -> Option<(u32, f32)> {
        use crate::analysis::contrib::Node;
        let n = self.run.graph.tokens;
        match node {
            Node::Embedding(t) => self.run.lens.as_ref()?.cell(0, t as usize).next(),
            Node::Out(l, t) | Node::Mlp(l, t) => self.run.lens.as_ref()?.cell(usize::from(l) + 1, t as usize).next(),
            Node::Attn(l, t) => self.run.mid_top.get(usize::from(l) * n + t as usize).copied(),
        }
    }

    /// The label of token `id`.
    pub fn label(&self, id: u32) -> String {
        self.labels.get(&id).cloned().unwrap_or_else(|| format!("<{id}>"))
    }
}

/// A graph node's height in the figure: the embeddings at 0, then per layer its attention (odd),
/// its MLP (between) and its output (even).
pub fn node_level(node: crate::analysis::contrib::Node) -> f32 {
    use crate::analysis::contrib::Node;
    match node {
        Node::Embedding(_) => 0.0,
        Node::Attn(l, _) => 2.0 * f32::from(l) + 1.0,
        Node::Mlp(l, _) => 2.0 * f32::from(l) + 1.5,
        Node::Out(l, _) => 2.0 * f32::from(l) + 2.0,
    }
}

/// A node's horizontal place in token columns (an MLP sits a little right of its token).
pub fn node_column(node: crate::analysis::contrib::Node) -> f32 {
    let offset = if matches!(node, crate::analysis::contrib::Node::Mlp(..)) { 0.3 } else { 0.0 };
    node.token() as f32 + offset
}

/// An attention edge's strongest head: layer, head, and the token it writes to.
pub type EdgeHead = (usize, usize, usize);

/// The routes to the prediction at `position` above `threshold`, laid out for drawing, with the
/// strongest head of each attention edge (layer, head, the token it writes to).
pub fn graph_figure(
    graph: &GraphShown,
    labels: &[String],
    (position, threshold): (usize, f32),
    title: String,
) -> (crate::export::GraphFigure, Vec<Option<EdgeHead>>) {
    use crate::analysis::contrib::Node;
    use crate::export::{EdgeKind, GraphEdge, GraphFigure, GraphNode};
    let routes = graph.run.graph.routes(position, threshold);
    let mut index: std::collections::BTreeMap<Node, usize> = std::collections::BTreeMap::new();
    let mut nodes = Vec::new();
    let mut node_of = |node: Node, nodes: &mut Vec<GraphNode>| {
        *index.entry(node).or_insert_with(|| {
            let label = graph.node_top(node).map(|(id, _)| graph.label(id)).unwrap_or_default();
            nodes.push(GraphNode { column: node_column(node), level: node_level(node), label });
            nodes.len() - 1
        })
    };
    // The prediction itself, even when no edge reaches it.
    if let Some(last) = graph.run.graph.layers.len().checked_sub(1) {
        node_of(Node::Out(last as u16, position as u32), &mut nodes);
    }
    let token = |t: u32| labels.get(t as usize).cloned().unwrap_or_default();
    let mut edges = Vec::with_capacity(routes.len());
    let mut heads = Vec::with_capacity(routes.len());
    for e in &routes {
        let (from, to) = (node_of(e.from, &mut nodes), node_of(e.to, &mut nodes));
        let (kind, name, head) = match (e.from, e.to) {
            (_, Node::Attn(l, t)) => {
                let top = e.heads.first().map(|&(h, p)| (usize::from(h), p));
                let via =
                    top.map_or_else(|| " (residual)".to_string(), |(h, p)| format!(", strongest head {h} ({p:.2})"));
                let name = format!(
                    "L{l} attention: “{}” #{} → “{}” #{t}{via}",
                    token(e.from.token()),
                    e.from.token(),
                    token(t)
                );
                (EdgeKind::Attention, name, top.map(|(h, _)| (usize::from(l), h, t as usize)))
            }
            (Node::Attn(l, t), Node::Mlp(..)) | (Node::Mlp(l, t), _) => {
                (EdgeKind::Mlp, format!("L{l} MLP at “{}” #{t}", token(t)), None)
            }
            (from, _) => (EdgeKind::Residual, format!("residual at “{}” #{}", token(from.token()), from.token()), None),
        };
        edges.push(GraphEdge { from, to, weight: e.weight, kind, name });
        heads.push(head);
    }
    let figure = GraphFigure { title, tokens: labels.to_vec(), layers: graph.run.graph.layers.len(), nodes, edges };
    (figure, heads)
}
