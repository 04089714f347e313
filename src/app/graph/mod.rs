//! The contribution graph: the routes from a prediction back to the input tokens, computed on the
//! worker's side thread once per token run, held in a slot keyed by that run, its view and figure.

pub mod settings;
pub mod shown;
pub mod view;

pub use settings::GraphSettings;
pub use shown::GraphShown;

use std::sync::Arc;

use crate::app::attribution::EffectKey;
use crate::app::session::{FILE_NEEDS_MODEL, Shown};
use crate::app::slot::Slot;
use crate::app::state::{Source, View};
use crate::app::worker::{Answer, Compute, Job};
use crate::model::{Interventions, LoadedModel};

/// The graph of a token run as the worker hands it back.
struct Computed {
    source_id: u64,
    result: Result<Arc<GraphShown>, String>,
    elapsed_ms: f64,
}

/// Computes the contribution graph of `tokens`, with the labels of the tokens its nodes name.
fn compute(
    model: &LoadedModel,
    source_id: u64,
    tokens: &crate::analysis::tokens::Tokens,
    iv: &Interventions,
) -> Computed {
    let start = std::time::Instant::now();
    let result = model
        .contributions(tokens, iv)
        .map(|run| {
            let named = run.lens.iter().flat_map(|l| l.top_ids.iter().copied()).chain(run.mid_top.iter().map(|t| t.0));
            let labels = crate::app::attribution::keys::token_labels(model, named.collect::<Vec<_>>());
            Arc::new(GraphShown { run, labels })
        })
        .map_err(|e| e.to_string());
    Computed { source_id, result, elapsed_ms: start.elapsed().as_secs_f64() * 1e3 }
}

/// The contribution graph view's results.
#[derive(Default)]
pub struct Feature {
    /// The graph shown (and the milliseconds it took), by the id of the token run it is of.
    pub slot: Slot<u64, (Result<Arc<GraphShown>, String>, f64)>,
    /// Why the contribution graph does not apply (None: it does).
    pub refusal: Option<String>,
}

impl Feature {
    /// Takes the graph the worker computed (another feature's answer is given back).
    pub fn take(&mut self, answer: Answer) -> Option<Answer> {
        match answer.take::<Computed>() {
            Ok(c) => {
                self.slot.finish(c.source_id, (c.result, c.elapsed_ms));
                None
            }
            Err(other) => Some(other),
        }
    }

    /// Asks the worker for the contribution graph of the token run (once per run) and, through
    /// `attribution`, for the effect of the head selected on one of its edges, when the graph
    /// view is open. `no_head`: the model has no language-model head (no effect to show).
    pub fn request(&mut self, shown: &Shown<'_>, attribution: &mut crate::app::attribution::Feature, no_head: bool) {
        let settings = shown.settings;
        self.refusal = if settings.source == Source::File {
            Some(FILE_NEEDS_MODEL.replace("{what}", "the contribution graph follows"))
        } else if settings.source == Source::Playground {
            Some("The playground is a random encoder: the contribution graph follows the pretrained model.".into())
        } else if let Some(why) = shown.model.and_then(|m| m.contribution_refusal.clone()) {
            Some(crate::app::text::capitalised(&why) + ".")
        } else if shown.token_run.is_some_and(|t| t.run.long.is_some()) {
            Some(format!(
                "This input is longer than “Record up to” ({} tokens) and is shown pooled: the graph reads inputs \
                 recorded token by token.",
                settings.record_tokens
            ))
        } else {
            None
        };
        let Some(t) = shown.readout_input(View::Graph, self.refusal.is_some()) else { return };
        let source_id = t.source_id;
        let tokens = Arc::new(t.run.tokens.clone());
        let (layers, heads, n) = (t.run.attention.layers(), t.run.attention.heads(), t.run.tokens.len());
        let interventions = settings.interventions.clone();
        if self.slot.want(&source_id) {
            let (tokens, interventions) = (Arc::clone(&tokens), interventions.clone());
            // As long as several passes and it cannot stop half-way: on the side thread.
            let work = move |model: &LoadedModel| compute(model, source_id, &tokens, &interventions);
            shown.worker.send(Job::Compute(Compute::new("contribution graph", true, work)));
        }
        // The head effect needs a head: a model without one has none to show.
        if no_head {
            return;
        }
        let Some((layer, head, position)) = settings.graph.head.filter(|&(l, h, p)| l < layers && h < heads && p < n)
        else {
            return;
        };
        let key = EffectKey { source_id, position, head: (layer, head) };
        attribution.request_effect(shown.worker, key, tokens, interventions);
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
    // The position within the graph's own tokens (a text that changed since it was computed may
    // be longer).
    let position = position.min(graph.run.graph.tokens.saturating_sub(1));
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
