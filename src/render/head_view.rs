//! BertViz-style head view: tokens twice, one line per (query, key, head) with opacity = attention weight.

use image::RgbaImage;

use super::canvas::{MAX_SIDE, Segment, Stroke, draw_strokes, new_image};
use super::colormap::head_colors;
use super::draw::{Anchor, Drawing, Item};
use super::heatmap::thinned;
use super::text::{fit_text, line_height, text_width};
use super::{LABEL_PX, NOTE_PX, TITLE_PX, Theme, clamp_scale, label_or_index};
use crate::analysis::{Attention, Sinks};

/// Which column of the head view a selected token is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Left column: the token that attends.
    Query,
    /// Right column: the token attended to.
    Key,
}

/// What to draw as a head view.
#[derive(Debug, Clone, Copy)]
pub struct HeadViewSpec<'a> {
    /// Attention of every layer and head.
    pub attention: &'a Attention,
    /// Layer to draw.
    pub layer_idx: usize,
    /// One label per token (missing ones are shown as numbers).
    pub labels: &'a [String],
    /// Labels of the key column when the keys are other tokens (cross-attention: the source);
    /// None: the same as `labels`.
    pub key_labels: Option<&'a [String]>,
    /// Heads to draw, sorted; others are left out of lines and legend.
    pub heads: &'a [usize],
    /// When set, only lines from this query (or into this key) are drawn, and its label is highlighted.
    pub selected_token: Option<(Side, usize)>,
    /// Weights below this are not drawn.
    pub threshold: f32,
    /// Light or dark figure.
    pub theme: Theme,
    /// Size multiplier, 1..=4.
    pub scale: f32,
    /// Title above the legend.
    pub title: &'a str,
    /// The sentence (0 = A, 1 = B) of each query token and of each key token, for a sentence
    /// pair: sentence B's labels are drawn in [`Theme::second_sentence`]. None: one colour.
    pub segments: Option<(&'a [u8], &'a [u8])>,
    /// A model with attention sinks: each query's share of its head's sink, drawn as lines to a
    /// target of its own below the keys (a row apart), labelled "sink".
    pub sinks: Option<&'a Sinks>,
}

/// The key column's labels with the sink's target after them: an empty row (the gap that sets
/// it apart from the tokens), then "sink". Its row is [`sink_row`].
pub fn with_sink_target(key_labels: &mut Vec<String>) {
    key_labels.extend([String::new(), super::heatmap::SINK_LABEL.to_string()]);
}

/// The key column's row of the sink's target, for `keys` key tokens.
pub fn sink_row(keys: usize) -> usize {
    keys + 1
}

/// Positions of the head view's rows and columns in pixels, relative to the diagram body (title and legend excluded).
// `head_view` draws the title and the head legend above this body; the app can use the body alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadViewLayout {
    /// Height of one token row.
    pub row_height: f32,
    /// Top edge of row 0.
    pub top: f32,
    /// Right edge of the query labels (they are right-aligned here).
    pub left_text_right: f32,
    /// x where lines start, at the query side.
    pub line_x0: f32,
    /// x where lines end, at the key side.
    pub line_x1: f32,
    /// Left edge of the key labels.
    pub right_text_left: f32,
    /// Width of the body.
    pub width: f32,
    /// Height of the body.
    pub height: f32,
    /// Font size of the token labels.
    pub label_px: f32,
    /// Every `label_step`-th label is drawn (1 unless rows are too thin for text).
    pub label_step: usize,
    /// Widest label, after shortening long ones with "…".
    pub label_width: f32,
    /// Labels wider than this end in "…".
    pub max_label: f32,
}

impl HeadViewLayout {
    /// Vertical centre of token row `i`.
    pub fn row_y(&self, i: usize) -> f32 {
        self.top + (i as f32 + 0.5) * self.row_height
    }
}

/// Room kept above the body (title and legend) when rows are shrunk to fit the image cap, before scaling.
const HEADER_ALLOWANCE: f32 = 240.0;
/// Longest label before scaling, in pixels; longer ones end in "…".
const MAX_LABEL: f32 = 160.0;

fn caption_px(s: f32) -> f32 {
    NOTE_PX * s
}

/// Rows and columns of the head view for these labels: text is measured for the column widths.
pub fn head_view_layout(labels: &[String], scale: f32) -> HeadViewLayout {
    head_view_layout_sides(labels, labels, scale)
}

/// [`head_view_layout`] with other tokens on the key side (cross-attention: target queries on the
/// left, source keys on the right); both columns start at row 0, rows fit the longer one.
pub fn head_view_layout_sides(labels: &[String], key_labels: &[String], scale: f32) -> HeadViewLayout {
    let s = clamp_scale(scale);
    let n = labels.len().max(key_labels.len());
    let room = (MAX_SIDE as f32 - HEADER_ALLOWANCE * s - top_room(s) - 10.0 * s).max(1.0);
    let row_height = if n == 0 { 18.0 * s } else { (18.0 * s).min(room / n as f32) };
    let label_px = (row_height * 0.75).min(13.5 * s).max(7.0);
    body_layout(labels, key_labels, s, row_height, label_px, 180.0 * s)
}

/// Tallest row on screen, in points: taller rows only spread the lines without showing more.
const MAX_FIT_ROW: f32 = 32.0;
/// Largest token label on screen, in points.
const MAX_FIT_LABEL_PX: f32 = 19.0;
/// Widest line band on screen, in points.
const MAX_FIT_BAND: f32 = 720.0;

/// The head view's body scaled to the room it has on screen (`room`: width and height in points,
/// per-head bars excluded): rows as tall as the height allows (up to 32 points, never below the
/// figure's 18), token labels sized with the rows, their column as wide as the longest label, and
/// the band the lines cross as wide as what is left (180 to 720 points).
pub fn head_view_layout_fit(labels: &[String], key_labels: &[String], room: (f32, f32)) -> HeadViewLayout {
    let base = head_view_layout_sides(labels, key_labels, 1.0);
    let n = labels.len().max(key_labels.len());
    let (width, height) =
        (if room.0.is_finite() { room.0 } else { 0.0 }, if room.1.is_finite() { room.1 } else { 0.0 });
    if n == 0 || base.row_height < 18.0 {
        return base;
    }
    let row_height = ((height - top_room(1.0) - 10.0) / n as f32).clamp(base.row_height, MAX_FIT_ROW).floor();
    let label_px = (row_height * 0.6).clamp(base.label_px, MAX_FIT_LABEL_PX);
    let probe = body_layout(labels, key_labels, 1.0, row_height, label_px, 0.0);
    let band = (width - probe.width - 16.0).clamp(180.0, MAX_FIT_BAND).floor();
    body_layout(labels, key_labels, 1.0, row_height, label_px, band)
}

/// Room above row 0 for the "query" and "key" captions.
fn top_room(s: f32) -> f32 {
    (6.0 * s + line_height(caption_px(s)) + 8.0 * s).round()
}

/// The body for rows `row_height` tall, labels `label_px`, lines crossing a band `band` wide.
fn body_layout(
    labels: &[String],
    key_labels: &[String],
    s: f32,
    row_height: f32,
    label_px: f32,
    band: f32,
) -> HeadViewLayout {
    let n = labels.len().max(key_labels.len());
    let pad = 12.0 * s;
    let top = top_room(s);
    let bottom = 10.0 * s;
    let label_step = thinned(n, row_height, line_height(label_px));
    // Long labels end in "…" at the same length relative to their size.
    let max_label = MAX_LABEL * s * (label_px / (13.5 * s)).max(1.0);
    let label_width = [labels, key_labels]
        .into_iter()
        .flat_map(|side| side.iter().step_by(label_step))
        .map(|label| text_width(&fit_text(label, label_px, max_label), label_px))
        .fold(24.0 * s, f32::max)
        .ceil();
    let left_text_right = pad + label_width;
    let line_x0 = left_text_right + 8.0 * s;
    let line_x1 = line_x0 + band;
    let right_text_left = line_x1 + 8.0 * s;
    HeadViewLayout {
        row_height,
        top,
        left_text_right,
        line_x0,
        line_x1,
        right_text_left,
        width: right_text_left + label_width + pad,
        height: top + n as f32 * row_height + bottom,
        label_px,
        label_step,
        label_width,
        max_label,
    }
}

/// The token labels of a head view's body, for [`head_view_labels`].
#[derive(Debug, Clone, Copy)]
pub struct BodyLabels<'a> {
    /// Labels of the query column (left).
    pub queries: &'a [String],
    /// Labels of the key column (right).
    pub keys: &'a [String],
    /// Sentence (0 = A, 1 = B) of each query and each key, when the input is a pair.
    pub segments: Option<(&'a [u8], &'a [u8])>,
    /// Cross-attention: the captions say target and source.
    pub cross: bool,
}

/// The box behind the label of `row` in a column, relative to the body (left, top, width,
/// height): where the selected token is highlighted, and where the app takes clicks.
pub fn head_view_label_box(lay: &HeadViewLayout, side: Side, row: usize, scale: f32) -> [f32; 4] {
    let s = clamp_scale(scale);
    let x = match side {
        Side::Query => lay.left_text_right - lay.label_width - 4.0 * s,
        Side::Key => lay.right_text_left - 4.0 * s,
    };
    [x, lay.top + row as f32 * lay.row_height, lay.label_width + 8.0 * s, lay.row_height]
}

/// Adds the body's captions ("query", "key"), the selected token's highlight and the token
/// labels (every `label_step`-th and the selected one, long ones ending in "…") with the body's
/// top-left at `origin`: the one layout of the exported figure's labels and the app's.
/// `selected` is a (column, row); `square`: both columns show the same tokens.
pub fn head_view_labels(
    d: &mut Drawing,
    lay: &HeadViewLayout,
    origin: (f32, f32),
    tokens: &BodyLabels<'_>,
    selected: Option<(Side, usize)>,
    (theme, scale): (Theme, f32),
) {
    let s = clamp_scale(scale);
    let (bx, by) = origin;
    let (fg, muted) = (theme.foreground(), theme.muted());
    let cap_y = by + 6.0 * s + line_height(caption_px(s)) / 2.0;
    // Cross-attention: the target's tokens attend to the source's.
    let (query_caption, key_caption) = if tokens.cross { ("target (query)", "source (key)") } else { ("query", "key") };
    d.text(query_caption, bx + lay.left_text_right, cap_y, caption_px(s), Anchor::End, muted);
    d.text(key_caption, bx + lay.right_text_left, cap_y, caption_px(s), Anchor::Start, muted);
    if let Some((side, row)) = selected {
        let [x, y, w, h] = head_view_label_box(lay, side, row, s);
        d.rect(bx + x, by + y, w, h, theme.highlight());
    }
    for (side, labels, x, align) in [
        (Side::Query, tokens.queries, bx + lay.left_text_right, Anchor::End),
        (Side::Key, tokens.keys, bx + lay.right_text_left, Anchor::Start),
    ] {
        for (i, label) in labels.iter().enumerate() {
            let is_selected = selected.is_some_and(|(sel_side, sel)| sel == i && (sel_side == side || !tokens.cross));
            if i % lay.label_step.max(1) != 0 && !is_selected {
                continue;
            }
            let segment = tokens.segments.and_then(|(q, k)| if side == Side::Query { q } else { k }.get(i).copied());
            let color = if segment == Some(1) { theme.second_sentence() } else { fg };
            d.text(&fit_text(label, lay.label_px, lay.max_label), x, by + lay.row_y(i), lay.label_px, align, color);
        }
    }
}

/// One chip of the head legend: its head and top-left corner relative to the legend.
struct Chip {
    head_idx: usize,
    x: f32,
    y: f32,
}

/// Sizes of the legend chips for scale `s`: square side, text size, row height.
fn chip_sizes(s: f32) -> (f32, f32, f32) {
    (10.0 * s, LABEL_PX * s, 18.0 * s)
}

/// Places one chip per head in rows no wider than `max_width`; returns chips, width and height.
fn legend(heads: &[usize], s: f32, max_width: f32) -> (Vec<Chip>, f32, f32) {
    let (square, text_px, row_h) = chip_sizes(s);
    let spacing = 12.0 * s;
    let mut chips = Vec::with_capacity(heads.len());
    let (mut x, mut y, mut width) = (0.0f32, 0.0f32, 0.0f32);
    // Equal widths line the chips up in columns.
    let widest = heads.iter().map(|h| text_width(&format!("H{h}"), text_px)).fold(0.0, f32::max);
    let item = (square + 4.0 * s + widest).ceil();
    for &head_idx in heads {
        if x > 0.0 && x + item > max_width {
            x = 0.0;
            y += row_h;
        }
        chips.push(Chip { head_idx, x, y });
        width = width.max(x + item);
        x += item + spacing;
    }
    let height = if heads.is_empty() { 0.0 } else { y + row_h };
    (chips, width, height)
}

/// Where the body sits inside the exported image, and the image size.
pub(crate) struct HeadViewFrame {
    pub layout: HeadViewLayout,
    pub labels: Vec<String>,
    pub key_labels: Vec<String>,
    pub heads: Vec<usize>,
    pub body_x: f32,
    pub body_y: f32,
    pub width: f32,
    pub height: f32,
    pub title_y: f32,
    pub legend_x: f32,
    pub legend_y: f32,
}

pub(crate) fn head_view_frame(spec: &HeadViewSpec) -> HeadViewFrame {
    let s = clamp_scale(spec.scale);
    let att = spec.attention;
    let n = att.seq_len();
    let labels: Vec<String> = (0..n).map(|i| label_or_index(spec.labels, i)).collect();
    let mut key_labels: Vec<String> = match spec.key_labels {
        Some(keys) => (0..att.keys()).map(|i| label_or_index(keys, i)).collect(),
        None => labels.clone(),
    };
    if spec.sinks.is_some() {
        with_sink_target(&mut key_labels);
    }
    let layout = head_view_layout_sides(&labels, &key_labels, s);
    let mut heads: Vec<usize> = spec.heads.iter().copied().filter(|&h| h < att.heads()).collect();
    heads.sort_unstable();
    heads.dedup();

    let margin = 16.0 * s;
    let title_px = TITLE_PX * s;
    let title_h = if spec.title.is_empty() { 0.0 } else { line_height(title_px) + 8.0 * s };
    let wrap = (layout.width - 2.0 * margin).max(360.0 * s);
    let (_, legend_w, legend_h) = legend(&heads, s, wrap);
    let width = layout.width.max(legend_w + 2.0 * margin).max(text_width(spec.title, title_px) + 2.0 * margin).ceil();
    let title_y = margin;
    let legend_y = (margin + title_h).round();
    let body_y = (legend_y + legend_h + if legend_h > 0.0 { 4.0 * s } else { 0.0 }).round();
    HeadViewFrame {
        body_x: ((width - layout.width) / 2.0).round(),
        body_y,
        width,
        height: body_y + layout.height + 6.0 * s,
        title_y,
        legend_x: ((width - legend_w) / 2.0).round(),
        legend_y,
        layout,
        labels,
        key_labels,
        heads,
    }
}

/// One head's lines for [`draw_lines`]: its colour and its lines (query side to key side, in
/// pixels, opacity = weight).
pub struct HeadLines {
    /// The head's colour.
    pub color: [u8; 3],
    /// Every line.
    pub lines: Vec<Segment>,
}

/// Draws the lines of a head view (each head's lines in its colour, opacity = weight) onto `img`:
/// the same rasterizer for the exported figure and the app's head view, which draws them into a
/// transparent texture (the result is then premultiplied RGBA).
///
/// Heads join the same token pairs, so their lines overlap exactly: each pair is one stroke with
/// one paint per head (in head order), its coverage computed once instead of once per head. Pairs
/// are drawn in the order they first appear.
pub fn draw_lines(img: &mut RgbaImage, heads: &[HeadLines], width: f32) {
    draw_strokes(img, &strokes_of(heads), width);
}

/// One stroke per token pair with one paint per head (in head order), pairs in the order they
/// first appear.
fn strokes_of(heads: &[HeadLines]) -> Vec<Stroke> {
    let mut index: std::collections::HashMap<[u32; 4], usize> = std::collections::HashMap::new();
    let mut strokes: Vec<Stroke> = Vec::new();
    for head in heads {
        let [red, green, blue] = head.color;
        for line in &head.lines {
            let key = [line.from.0, line.from.1, line.to.0, line.to.1].map(f32::to_bits);
            let i = *index.entry(key).or_insert_with(|| {
                strokes.push(Stroke { from: line.from, to: line.to, paints: Vec::with_capacity(heads.len()) });
                strokes.len() - 1
            });
            strokes[i].paints.push(([red, green, blue, 255], line.alpha));
        }
    }
    strokes
}

/// A transparent image of `width × height` pixels (each side clamped to 1..=[`MAX_SIDE`]) for
/// [`draw_lines`].
pub fn transparent_image(width: f32, height: f32) -> RgbaImage {
    new_image(width, height, [0, 0, 0, 0])
}

/// Most lines a head view draws at once (on screen without a selection, and in the files); past
/// it only the strongest are kept: the rest are too faint to see, and the view must stay fluid and
/// the files small at 512 tokens.
pub const LINE_BUDGET: usize = 30_000;

/// Keeps the [`LINE_BUDGET`] strongest `lines` by `weight`; returns the weakest weight kept when
/// some were dropped.
pub fn keep_strongest<L>(lines: &mut Vec<L>, weight: impl Fn(&L) -> f32) -> Option<f32> {
    if lines.len() <= LINE_BUDGET {
        return None;
    }
    lines.select_nth_unstable_by(LINE_BUDGET, |a, b| weight(b).total_cmp(&weight(a)));
    lines.truncate(LINE_BUDGET);
    lines.iter().map(weight).reduce(f32::min)
}

/// What a head view says when the budget applied: "the 30000 strongest of N lines (weights ≥ w)".
pub fn line_budget_notice(candidates: usize, threshold: f32) -> String {
    format!("the {LINE_BUDGET} strongest of {candidates} lines (weights ≥ {threshold:.3})")
}

/// The lines of a head view as (weight, head slot, query, key), in head, query, key order, within
/// the budget; with the number of candidates and the weakest weight kept when it applied.
type ViewLines = (Vec<(f32, usize, usize, usize)>, Option<(usize, f32)>);

fn head_view_lines(spec: &HeadViewSpec, selected: Option<(Side, usize)>) -> ViewLines {
    let att = spec.attention;
    if spec.layer_idx >= att.layers() {
        return (Vec::new(), None);
    }
    let mut heads: Vec<usize> = spec.heads.iter().copied().filter(|&h| h < att.heads()).collect();
    heads.sort_unstable();
    heads.dedup();
    let threshold = if spec.threshold.is_nan() { 0.0 } else { spec.threshold };
    let min_weight = threshold.max(1.0 / 255.0);
    let queries = match selected {
        Some((Side::Query, i)) => i..i + 1,
        _ => 0..att.seq_len(),
    };
    let mut lines = Vec::new();
    for (slot, &head_idx) in heads.iter().enumerate() {
        for query_pos in queries.clone() {
            for (key_pos, &weight) in att.row(spec.layer_idx, head_idx, query_pos).iter().enumerate() {
                let unselected_key = selected.is_some_and(|(side, i)| side == Side::Key && i != key_pos);
                if !weight.is_nan() && weight >= min_weight && !unselected_key {
                    lines.push((weight, slot, query_pos, key_pos));
                }
            }
            // The share of the head's sink, to its target below the keys.
            let sink =
                spec.sinks.filter(|s| spec.layer_idx < s.layers() && head_idx < s.heads() && query_pos < s.seq_len());
            if let Some(s) = sink.filter(|_| !selected.is_some_and(|(side, _)| side == Side::Key)) {
                let weight = s.share(spec.layer_idx, head_idx, query_pos);
                if weight >= min_weight {
                    lines.push((weight, slot, query_pos, sink_row(att.keys())));
                }
            }
        }
    }
    let candidates = lines.len();
    let budget = keep_strongest(&mut lines, |l| l.0).map(|w| (candidates, w));
    if budget.is_some() {
        // Drawn in the same order as without the budget.
        lines.sort_unstable_by_key(|&(_, slot, q, k)| (slot, q, k));
    }
    (lines, budget)
}

/// Draws the head view of one layer into an RGBA image.
pub fn head_view(spec: &HeadViewSpec) -> RgbaImage {
    head_view_drawing(spec).to_rgba()
}

/// The head view of one layer as a display list: title, head legend, tokens on both sides and
/// coloured lines between them.
pub fn head_view_drawing(spec: &HeadViewSpec) -> Drawing {
    let s = clamp_scale(spec.scale);
    let att = spec.attention;
    let seq_len = att.seq_len();
    let keys = att.keys();
    let selected = spec.selected_token.filter(|&(side, i)| i < if side == Side::Key { keys } else { seq_len });
    // The lines to draw, as on screen: within the budget, the strongest kept, and the title says so.
    let (lines, budget) = head_view_lines(spec, selected);
    let title = match budget {
        Some((candidates, w)) if spec.title.is_empty() => format!("showing {}", line_budget_notice(candidates, w)),
        Some((candidates, w)) => format!("{} · showing {}", spec.title, line_budget_notice(candidates, w)),
        None => spec.title.to_string(),
    };
    let spec = &HeadViewSpec { title: &title, ..*spec };
    let frame = head_view_frame(spec);
    let theme = spec.theme;
    let (fg, muted) = (theme.foreground(), theme.muted());
    let lay = frame.layout;
    let mut d = Drawing::new(frame.width, frame.height, theme.background(), spec.title);
    let colors = head_colors(att.heads());

    if !spec.title.is_empty() {
        let title_y = frame.title_y + line_height(TITLE_PX * s) / 2.0;
        d.text(spec.title, frame.width / 2.0, title_y, TITLE_PX * s, Anchor::Middle, fg);
    }
    let (square, chip_px, chip_row) = chip_sizes(s);
    let wrap = (lay.width - 32.0 * s).max(360.0 * s);
    for chip in legend(&frame.heads, s, wrap).0 {
        let [red, green, blue] = colors[chip.head_idx];
        let left = frame.legend_x + chip.x;
        let y_mid = frame.legend_y + chip.y + chip_row / 2.0;
        d.rect(left, (y_mid - square / 2.0).round(), square, square, [red, green, blue, 255]);
        d.text(&format!("H{}", chip.head_idx), left + square + 4.0 * s, y_mid, chip_px, Anchor::Start, fg);
    }

    let (bx, by) = (frame.body_x, frame.body_y);
    if seq_len == 0 {
        let cap_y = by + 6.0 * s + line_height(caption_px(s)) / 2.0;
        d.text("no tokens", bx + lay.width / 2.0, cap_y, caption_px(s), Anchor::Middle, muted);
    }
    let tokens = BodyLabels {
        queries: &frame.labels,
        keys: &frame.key_labels,
        segments: spec.segments,
        cross: spec.key_labels.is_some(),
    };
    head_view_labels(&mut d, &lay, (bx, by), &tokens, selected, (theme, s));
    if seq_len == 0 {
        return d;
    }

    if spec.layer_idx >= att.layers() {
        return d;
    }
    let width = (2.0 * s).min(lay.row_height * 0.25).max(1.0);
    let (x0, x1) = (bx + lay.line_x0, bx + lay.line_x1);
    let mut heads: Vec<HeadLines> =
        frame.heads.iter().map(|&head_idx| HeadLines { color: colors[head_idx], lines: Vec::new() }).collect();
    for (weight, slot, query_pos, key_pos) in lines {
        let (from, to) = ((x0, by + lay.row_y(query_pos)), (x1, by + lay.row_y(key_pos)));
        heads[slot].lines.push(Segment { from, to, alpha: weight.min(1.0) });
    }
    d.items.push(Item::Lines { width, strokes: strokes_of(&heads) });
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("token{i}")).collect()
    }

    /// One layer, `heads` heads, every query attending fully to key `(q + shift_h) % n` in head h.
    fn shifted(n: usize, heads: usize) -> Attention {
        let mut data = vec![0.0f32; heads * n * n];
        for h in 0..heads {
            for q in 0..n {
                data[(h * n + q) * n + (q + h) % n] = 1.0;
            }
        }
        Attention::new(1, heads, n, data).unwrap()
    }

    fn spec<'a>(att: &'a Attention, labels: &'a [String], heads: &'a [usize]) -> HeadViewSpec<'a> {
        HeadViewSpec {
            attention: att,
            layer_idx: 0,
            labels,
            key_labels: None,
            heads,
            selected_token: None,
            threshold: 0.0,
            theme: Theme::Light,
            scale: 1.0,
            title: "Layer 0",
            segments: None,
            sinks: None,
        }
    }

    #[test]
    fn a_sink_is_a_target_of_its_own_below_the_keys() {
        let n = 4;
        let att = shifted(n, 2);
        let names = labels(n);
        let sinks = Sinks::new(1, 2, n, vec![0.0, 0.0, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0]).unwrap();
        let with = HeadViewSpec { sinks: Some(&sinks), ..spec(&att, &names, &[1]) };
        let frame = head_view_frame(&with);
        assert_eq!(frame.key_labels.len(), n + 2, "a row apart, then the sink");
        assert_eq!(frame.key_labels[sink_row(n)], "sink");
        let d = head_view_drawing(&with);
        assert!(d.items.iter().any(|i| matches!(i, Item::Text(t) if t.text == "sink")));
        // Query 0 of head 1 gives 0.9 to the sink: a line to its row.
        let (lines, _) = head_view_lines(&with, None);
        assert!(lines.contains(&(0.9, 0, 0, sink_row(n))), "{lines:?}");
        let (plain, _) = head_view_lines(&spec(&att, &names, &[1]), None);
        assert_eq!(lines.len(), plain.len() + 1, "one sink line above the threshold");
    }

    #[test]
    fn full_weight_draws_the_head_colour_and_zero_weight_draws_nothing() {
        let n = 6;
        let att = shifted(n, 2);
        let names = labels(n);
        let spec = spec(&att, &names, &[1]);
        let img = head_view(&spec);
        let frame = head_view_frame(&spec);
        let lay = frame.layout;
        let at = |q: usize, k: usize| {
            let x = frame.body_x + f32::midpoint(lay.line_x0, lay.line_x1);
            let y = frame.body_y + f32::midpoint(lay.row_y(q), lay.row_y(k));
            img.get_pixel(x as u32, y as u32).0
        };
        let color = head_colors(2)[1];
        // Head 1 sends query 0 to key 1 with weight 1; the midpoint of that line is exactly its colour.
        assert_eq!(at(0, 1)[..3], color);
        // Query 0 → key 4 has weight 0 in head 1: a quarter of the way along, nothing is drawn.
        let mid_empty = {
            let x = frame.body_x + lay.line_x0 + (lay.line_x1 - lay.line_x0) * 0.25;
            let y = frame.body_y + lay.row_y(0) + (lay.row_y(4) - lay.row_y(0)) * 0.25;
            img.get_pixel(x as u32, y as u32).0
        };
        assert_eq!(mid_empty, Theme::Light.background());
    }

    #[test]
    fn threshold_and_selection_remove_lines() {
        let n = 4;
        let att = shifted(n, 1);
        let names = labels(n);
        let base = spec(&att, &names, &[0]);
        let count = |img: &RgbaImage| img.pixels().filter(|p| p.0[..3] == head_colors(1)[0]).count();
        // The legend chip has the head colour too: count only what lines add to it.
        let chip = count(&head_view(&HeadViewSpec { threshold: 1.5, ..base }));
        let all = count(&head_view(&base)) - chip;
        assert!(all > 0);
        let one = count(&head_view(&HeadViewSpec { selected_token: Some((Side::Query, 1)), ..base })) - chip;
        assert!(one > 0 && one < all);
        let key = count(&head_view(&HeadViewSpec { selected_token: Some((Side::Key, 1)), ..base })) - chip;
        assert!(key > 0 && key < all);
    }

    #[test]
    fn size_grows_with_tokens_and_scale() {
        let (a, b) = (shifted(4, 2), shifted(40, 2));
        let (la, lb) = (labels(4), labels(40));
        let small = head_view(&spec(&a, &la, &[0, 1]));
        let large = head_view(&spec(&b, &lb, &[0, 1]));
        assert!(large.height() > small.height());
        let scaled = head_view(&HeadViewSpec { scale: 2.0, ..spec(&a, &la, &[0, 1]) });
        assert!(scaled.height() > small.height() * 3 / 2 && scaled.width() > small.width() * 3 / 2);
        let lay = head_view_layout(&la, 1.0);
        assert!(
            lay.line_x0 > lay.left_text_right && lay.right_text_left > lay.line_x1 && lay.width > lay.right_text_left
        );
    }

    #[test]
    fn on_screen_the_body_grows_into_its_room_and_keeps_long_labels_whole() {
        let words: Vec<String> =
            ["[CLS]", "the", "answer", "is", "forty", "two", "[SEP]"].iter().map(ToString::to_string).collect();
        let small = head_view_layout_sides(&words, &words, 1.0);
        let fit = head_view_layout_fit(&words, &words, (1000.0, 640.0));
        // Rows and labels grow with the height, the band with the width; the body fits its room.
        assert!(fit.row_height >= 1.5 * small.row_height, "{} vs {}", fit.row_height, small.row_height);
        assert!(fit.label_px > small.label_px);
        assert!(fit.line_x1 - fit.line_x0 >= 2.5 * (small.line_x1 - small.line_x0));
        assert!(fit.width <= 1000.0 && fit.height <= 640.0, "{fit:?}");
        // The label column holds the longest label whole at the larger size.
        assert!(fit.label_width >= text_width("answer", fit.label_px));
        assert_eq!(fit_text("answer", fit.label_px, fit.label_width), "answer");
        // No room: the figure's own size (never smaller), as in the export.
        assert_eq!(head_view_layout_fit(&words, &words, (10.0, 10.0)), small);
        let many = labels(400);
        assert!((head_view_layout_fit(&many, &many, (1000.0, 640.0)).row_height - 18.0).abs() < 1e-6);
    }

    #[test]
    fn long_inputs_stay_within_the_cap() {
        let n = 1200;
        let att = Attention::new(1, 1, n, vec![1.0 / n as f32; n * n]).unwrap();
        let img = head_view(&spec(&att, &[], &[0]));
        assert!(img.height() <= MAX_SIDE);
        assert!(head_view_layout(&labels(n), 4.0).label_step > 1);
    }

    #[test]
    fn cross_attention_puts_other_tokens_on_the_key_side() {
        // 2 target queries over 5 source keys: query 1 attends fully to key 4.
        let mut data = vec![0.0f32; 2 * 5];
        data[0] = 1.0;
        data[5 + 4] = 1.0;
        let att = Attention::rectangular(1, 1, 2, 5, data).unwrap();
        let (targets, sources) = (labels(2), labels(5));
        let spec = HeadViewSpec { key_labels: Some(&sources), ..spec(&att, &targets, &[0]) };
        let img = head_view(&spec);
        let frame = head_view_frame(&spec);
        assert_eq!((frame.labels.len(), frame.key_labels.len()), (2, 5));
        let lay = frame.layout;
        let x = frame.body_x + f32::midpoint(lay.line_x0, lay.line_x1);
        let y = frame.body_y + f32::midpoint(lay.row_y(1), lay.row_y(4));
        assert_eq!(img.get_pixel(x as u32, y as u32).0[..3], head_colors(1)[0]);
        // Selecting a key past the queries' count is allowed, and draws.
        head_view(&HeadViewSpec { selected_token: Some((Side::Key, 4)), ..spec });
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let empty = Attention::new(1, 2, 0, vec![]).unwrap();
        head_view(&spec(&empty, &[], &[0, 1]));
        let one = Attention::new(1, 1, 1, vec![f32::NAN]).unwrap();
        let weird: Vec<String> = ["", "\u{202E}", "\u{0}"].map(String::from).to_vec();
        head_view(&spec(&one, &weird, &[0, 5, 0]));
        head_view(&HeadViewSpec {
            layer_idx: 9,
            selected_token: Some((Side::Key, 40)),
            threshold: f32::NAN,
            ..spec(&one, &[], &[0])
        });
        let att = shifted(3, 64);
        head_view(&HeadViewSpec { scale: -3.0, ..spec(&att, &[], &(0..64).collect::<Vec<_>>()) });
    }
}
