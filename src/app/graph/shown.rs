//! The contribution graph as the worker hands it back: the graph with the labels of the tokens
//! its nodes name.

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
        if node.token() as usize >= n {
            return None;
        }
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
