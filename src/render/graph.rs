//! The contribution graph (Ferrando & Voita 2024, the LLM transparency tool): token columns, the
//! embeddings at the bottom and each layer's attention, MLP and output above, edges as wide and
//! as opaque as the share of information they carry.

use image::RgbaImage;

use super::canvas::Stroke;
use super::draw::{Anchor, Drawing, Item};
use super::figure::{EdgeKind, GraphFigure};
use super::text::{fit_text, line_height};
use super::{LABEL_PX, MAX_SIDE, NOTE_PX, TITLE_PX, Theme};

/// Colour of an edge of `kind`.
pub fn edge_rgb(kind: EdgeKind) -> [u8; 3] {
    match kind {
        EdgeKind::Attention => [31, 119, 180],
        EdgeKind::Mlp => [230, 120, 20],
        EdgeKind::Residual => [140, 140, 150],
    }
}

/// Width of an edge of `weight` at scale 1, in pixels.
pub fn edge_width(weight: f32) -> f32 {
    1.0 + 5.0 * weight.clamp(0.0, 1.0)
}

/// Opacity of an edge of `weight`.
pub fn edge_alpha(weight: f32) -> f32 {
    (0.25 + 0.75 * weight).clamp(0.25, 1.0)
}

/// Column width and level height at scale 1.
pub const GRAPH_CELL: (f32, f32) = (84.0, 30.0);

/// Draws a laid-out contribution graph into an RGBA image.
pub fn graph(figure: &GraphFigure, theme: Theme, scale: f32) -> RgbaImage {
    graph_drawing(figure, theme, scale).to_rgba()
}

/// A laid-out contribution graph as a display list.
pub fn graph_drawing(figure: &GraphFigure, theme: Theme, scale: f32) -> Drawing {
    let s = super::clamp_scale(scale);
    let (col_w, row_h) = (GRAPH_CELL.0 * s, GRAPH_CELL.1 * s);
    let margin = 12.0 * s;
    let left_w = 70.0 * s;
    let label_px = LABEL_PX * s;
    let small_px = (NOTE_PX - 2.0) * s;
    let title_h = line_height(TITLE_PX * s) + 10.0 * s;
    let levels = 2 * figure.layers;
    let n = figure.tokens.len();
    let width = (2.0 * margin + left_w + n as f32 * col_w).min(MAX_SIDE as f32);
    let height =
        (2.0 * margin + title_h + (levels as f32 + 1.0) * row_h + line_height(label_px) + 8.0 * s).min(MAX_SIDE as f32);
    let mut d = Drawing::new(width, height, theme.background(), &figure.title);
    let (fg, muted) = (theme.foreground(), theme.muted());
    d.text_at(&fit_text(&figure.title, TITLE_PX * s, width - 2.0 * margin), margin, margin, TITLE_PX * s, fg);
    let bottom = margin + title_h + levels as f32 * row_h + row_h / 2.0;
    let at = |column: f32, level: f32| (margin + left_w + (column + 0.5) * col_w, bottom - level * row_h);
    for l in 0..figure.layers {
        let (_, y) = at(0.0, 2.0 * l as f32 + 2.0);
        d.text_at(&format!("L{l}"), margin, y - line_height(label_px) / 2.0, label_px, muted);
    }
    let (_, y) = at(0.0, 0.0);
    d.text_at("emb", margin, y - line_height(label_px) / 2.0, label_px, muted);
    for edge in &figure.edges {
        let (Some(a), Some(b)) = (figure.nodes.get(edge.from), figure.nodes.get(edge.to)) else { continue };
        let [r, g, bl] = edge_rgb(edge.kind);
        let stroke = Stroke {
            from: at(a.column, a.level),
            to: at(b.column, b.level),
            paints: vec![([r, g, bl, 255], edge_alpha(edge.weight))],
        };
        d.items.push(Item::Lines { width: edge_width(edge.weight) * s, strokes: vec![stroke] });
    }
    for node in &figure.nodes {
        let (x, y) = at(node.column, node.level);
        d.rect(x - 3.0 * s, y - 3.0 * s, 6.0 * s, 6.0 * s, fg);
        let text = fit_text(&node.label, small_px, col_w * 0.6);
        d.text_at(&text, x + 5.0 * s, y - line_height(small_px) - 1.0 * s, small_px, fg);
    }
    for (i, token) in figure.tokens.iter().enumerate() {
        let (x, _) = at(i as f32, 0.0);
        let text = fit_text(token, label_px, col_w - 4.0 * s);
        d.text(&text, x, bottom + row_h / 2.0 + line_height(label_px) / 2.0, label_px, Anchor::Middle, fg);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{GraphEdge, GraphNode};

    #[test]
    fn a_graph_draws_its_edges_in_their_colours() {
        let node = |column: f32, level: f32| GraphNode { column, level, label: "x".into() };
        let figure = GraphFigure {
            title: "graph".into(),
            tokens: vec!["a".into(), "b".into()],
            layers: 1,
            nodes: vec![node(0.0, 0.0), node(1.0, 1.0), node(1.0, 2.0)],
            edges: vec![
                GraphEdge { from: 0, to: 1, weight: 1.0, kind: EdgeKind::Attention, name: "a".into() },
                GraphEdge { from: 1, to: 2, weight: 1.0, kind: EdgeKind::Residual, name: "r".into() },
            ],
        };
        let img = graph(&figure, Theme::Light, 1.0);
        let [r, g, b] = edge_rgb(EdgeKind::Attention);
        assert!(img.pixels().any(|p| p.0 == [r, g, b, 255]), "an opaque attention edge is drawn");
        assert!(img.width() > 2 * GRAPH_CELL.0 as u32);
    }
}
