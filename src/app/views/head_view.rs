//! The head view: the tokens twice (queries left, keys right) and one line per head from each
//! query to each key, opacity from the weight. Hover a token to see only its lines with per-head
//! bars on the other column; click to pin; Esc or a second click unpins.

use egui::{Color32, FontId, Rect, RichText, Sense, Stroke, TextureHandle, TextureOptions, Vec2, pos2, vec2};

use super::head_color;
use crate::analysis::Run;
use crate::analysis::rollout::rollout;
use crate::analysis::select::{PairFilter, submatrix, visible_tokens};
use crate::app::app::Runtime;
use crate::app::state::Settings;
use crate::render::Side;

/// Height of one token row, in points.
const ROW_HEIGHT: f32 = 20.0;
/// Width of the band the lines cross.
const LINES_WIDTH: f32 = 260.0;
/// Widest token label column.
const MAX_LABEL_WIDTH: f32 = 170.0;
/// Width of a line in points, anti-aliased edges included (as the mesh lines drawn before: a
/// 1.5-point core with a half-point feather on each side).
const LINE_WIDTH: f32 = 2.5;
/// Most lines drawn at once when no token is selected; beyond it only the strongest are kept (the
/// rest are too faint to see, and the view must stay fluid at 512 tokens).
pub const LINE_BUDGET: usize = 30_000;
/// Room for per-head bars beside a column.
const BARS_WIDTH: f32 = 90.0;
/// Margin of the line picture beyond the lines' ends (their anti-aliased caps).
const BAND_PAD: f32 = 2.0;

/// What the matrices depend on.
#[derive(Debug, Clone, PartialEq)]
struct MatricesKey {
    run_id: u64,
    layer_idx: usize,
    hide_special: bool,
    /// Heads averaged by the rollout pseudo-layer (None: the layer's own heads).
    rollout: Option<Vec<usize>>,
}

/// What the picture of all lines depends on (not the scroll position: it covers every row).
#[derive(Debug, Clone, PartialEq)]
struct LinesKey {
    matrices: MatricesKey,
    heads: Vec<usize>,
    threshold: u32,
    pair_filter: PairFilter,
    /// Pixels per point, across and along (bits): the picture is drawn at screen resolution.
    pixels: (u32, u32),
}

/// What the picture of one token's lines depends on: also the token and the visible part of the band.
#[derive(Debug, Clone, PartialEq)]
struct HoverKey {
    matrices: MatricesKey,
    heads: Vec<usize>,
    threshold: u32,
    pair_filter: PairFilter,
    selection: (Side, usize),
    /// Left, top and height of the visible band, and pixels per point (bits).
    band: [u32; 4],
}

/// Cached per-head matrices of the shown layer and the picture of all their lines.
#[derive(Default)]
pub struct HeadViewCache {
    matrices_key: Option<MatricesKey>,
    /// Positions of the shown tokens.
    keep: Vec<usize>,
    /// One `m × m` matrix per head of the layer (m = shown tokens).
    matrices: Vec<Vec<f32>>,
    lines_key: Option<LinesKey>,
    /// Every line, rasterized once per selection by `render::draw_lines` (the exported figure's
    /// rasterizer): a frame draws one textured rectangle, however many lines there are.
    lines: Option<TextureHandle>,
    hover_key: Option<HoverKey>,
    /// The selected token's lines over the visible band.
    hover_lines: Option<TextureHandle>,
    /// Lines in the cached picture (for tests and the frame-time report).
    pub line_count: usize,
    /// Lines that passed the threshold in view, before the budget was applied.
    pub candidate_count: usize,
    /// The weight below which lines were dropped to stay within [`LINE_BUDGET`], if it applied.
    pub budget_threshold: Option<f32>,
}

impl HeadViewCache {
    fn update_matrices(&mut self, key: MatricesKey, run: &Run) {
        if self.matrices_key.as_ref() == Some(&key) {
            return;
        }
        let a = &run.attention;
        self.keep = visible_tokens(&run.tokens, key.hide_special);
        self.matrices = match &key.rollout {
            // One pseudo-head: the rollout through layers 0..=layer.
            Some(heads) => {
                let r = rollout(a, heads).swap_remove(key.layer_idx);
                vec![submatrix(&r, a.seq_len(), &self.keep, key.hide_special)]
            }
            None => (0..a.heads())
                .map(|h| submatrix(a.head(key.layer_idx, h), a.seq_len(), &self.keep, key.hide_special))
                .collect(),
        };
        self.matrices_key = Some(key);
        self.lines_key = None;
    }
}

/// Geometry of the view inside its rectangle.
#[derive(Debug, Clone, Copy)]
struct Layout {
    left_text_right: f32,
    line_x0: f32,
    line_x1: f32,
    right_text_left: f32,
    top: f32,
}

impl Layout {
    fn row_y(&self, row: usize) -> f32 {
        self.top + (row as f32 + 0.5) * ROW_HEIGHT
    }
}

/// Draws the head view of the current layer.
pub fn head_view_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    let Some(run) = rt.run.clone() else { return };
    let (layer_idx, selected) = settings.selection_for(run.attention.layers(), run.attention.heads());
    toolbar_ui(ui, settings, rt, &run);
    if selected.is_empty() {
        ui.label("No head selected: pick heads in the side panel (click a chip; double-click shows only that head).");
        return;
    }
    // The rollout pseudo-layer is one "head" drawn in one colour.
    let rollout = settings.head_rollout.then(|| selected.clone());
    let (heads, n_heads) = if rollout.is_some() { (vec![0], 1) } else { (selected, run.attention.heads()) };
    let cache = &mut rt.caches.head;
    let matrices_key = MatricesKey { run_id: rt.view_id, layer_idx, hide_special: settings.hide_special, rollout };
    cache.update_matrices(matrices_key.clone(), &run);
    let rows = cache.keep.len();
    let labels: Vec<String> = cache.keep.iter().map(|&p| run.tokens.label(p)).collect();
    let font = FontId::proportional(14.0);
    let label_width = labels
        .iter()
        .map(|l| ui.painter().layout_no_wrap(l.clone(), font.clone(), Color32::WHITE).size().x)
        .fold(20.0f32, f32::max)
        .min(MAX_LABEL_WIDTH);
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
        let size = vec2(BARS_WIDTH * 2.0 + label_width * 2.0 + LINES_WIDTH + 24.0, rows as f32 * ROW_HEIGHT + 8.0);
        let (rect, _) = ui.allocate_exact_size(size, Sense::hover());
        let layout = Layout {
            left_text_right: rect.left() + BARS_WIDTH + label_width,
            line_x0: rect.left() + BARS_WIDTH + label_width + 6.0,
            line_x1: rect.left() + BARS_WIDTH + label_width + 6.0 + LINES_WIDTH,
            right_text_left: rect.left() + BARS_WIDTH + label_width + 12.0 + LINES_WIDTH,
            top: rect.top() + 4.0,
        };
        let clip = ui.clip_rect();
        let visible_rows = |row: usize| {
            let y = layout.row_y(row);
            y >= clip.top() - ROW_HEIGHT && y <= clip.bottom() + ROW_HEIGHT
        };
        // Every visible token is a clickable, labelled widget: hover shows its lines, click pins.
        let mut hovered = None;
        let mut clicked = None;
        for row in (0..rows).filter(|&r| visible_rows(r)) {
            let pos = cache.keep[row];
            let y = layout.row_y(row);
            for (side, x0, what) in [
                (Side::Query, layout.left_text_right - label_width - 2.0, "query"),
                (Side::Key, layout.right_text_left - 2.0, "key"),
            ] {
                let hit = Rect::from_min_size(pos2(x0, y - ROW_HEIGHT / 2.0), vec2(label_width + 4.0, ROW_HEIGHT));
                let response = ui.interact(hit, ui.scope_id().with(("head-view-token", what, pos)), Sense::click());
                let label = format!("{what} {pos}: {}", labels[row]);
                response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
                if response.hovered() {
                    hovered = Some((side, pos));
                }
                if response.clicked() {
                    clicked = Some((side, pos));
                }
            }
        }
        rt.hovered = hovered;
        if let Some(sel) = clicked {
            rt.pinned = if rt.pinned == Some(sel) { None } else { Some(sel) };
        }
        let selection = rt.pinned.or(hovered);
        let painter = ui.painter_at(rect);
        let segments = &run.tokens.segments;
        let keep = &cache.keep;
        let admits = |q: usize, k: usize| settings.pair_filter.admits(segments[keep[q]], segments[keep[k]]);
        let min_weight = settings.threshold.max(1.0 / 255.0);
        // Lines.
        if let Some((side, row)) =
            selection.and_then(|(side, pos)| keep.iter().position(|&p| p == pos).map(|row| (side, row)))
        {
            // The selected token's lines, rasterized like all lines but over the visible part of the
            // band only, and again only when the selection or the scroll position changes.
            let visible = Rect::from_min_max(
                pos2(layout.line_x0 - BAND_PAD, clip.top().max(rect.top())),
                pos2(layout.line_x1 + BAND_PAD, clip.bottom().min(rect.bottom())),
            );
            if visible.height() >= 1.0 {
                let ppp = ui.ctx().pixels_per_point();
                let key = HoverKey {
                    matrices: matrices_key.clone(),
                    heads: heads.clone(),
                    threshold: min_weight.to_bits(),
                    pair_filter: settings.pair_filter,
                    selection: (side, row),
                    band: [visible.left(), visible.top(), visible.height(), ppp].map(f32::to_bits),
                };
                if cache.hover_key.as_ref() != Some(&key) {
                    let colors = crate::render::head_colors(n_heads);
                    let to_px = |x: f32, y: f32| ((x - visible.left()) * ppp, (y - visible.top()) * ppp);
                    let per_head: Vec<crate::render::HeadLines> = heads
                        .iter()
                        .map(|&h| {
                            let m = &cache.matrices[h];
                            let lines = (0..rows)
                                .filter_map(|other| {
                                    let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
                                    let w = m[q * rows + k];
                                    (w >= min_weight && admits(q, k)).then(|| crate::render::Segment {
                                        from: to_px(layout.line_x0, layout.row_y(q)),
                                        to: to_px(layout.line_x1, layout.row_y(k)),
                                        alpha: w.min(1.0),
                                    })
                                })
                                .collect();
                            crate::render::HeadLines { color: colors[h], lines }
                        })
                        .collect();
                    let size = (visible.width() * ppp, visible.height() * ppp);
                    rasterize_lines(ui.ctx(), &mut cache.hover_lines, "head-view-token-lines", size, &per_head, ppp);
                    cache.hover_key = Some(key);
                }
                draw_texture(&painter, cache.hover_lines.as_ref(), visible);
            }
            bars_ui(&painter, &layout, cache, &heads, n_heads, side, row, label_width, &visible_rows);
            // Each row of bars tells its numbers on hover (pin the token first to reach them).
            for other in (0..rows).filter(|&r| visible_rows(r)) {
                let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
                let x = if side == Side::Query {
                    layout.right_text_left + label_width + 6.0
                } else {
                    layout.left_text_right - label_width - 6.0 - (BARS_WIDTH - 10.0)
                };
                let y = layout.row_y(other) - ROW_HEIGHT / 2.0;
                let hit = Rect::from_min_size(pos2(x, y), vec2(BARS_WIDTH - 10.0, ROW_HEIGHT));
                let id = ui.scope_id().with(("head-view-bars", other));
                let what = format!(
                    "weights of {} {}: {}",
                    if side == Side::Query { "key" } else { "query" },
                    keep[other],
                    labels[other]
                );
                let response = ui.interact(hit, id, Sense::hover());
                response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &what));
                response.on_hover_ui_at_pointer(|ui| {
                    ui.label(RichText::new(format!("“{}” → “{}”", labels[q], labels[k])).strong());
                    for &h in &heads {
                        let name =
                            if n_heads == 1 && heads.len() == 1 { "rollout".to_string() } else { format!("H{h}") };
                        ui.label(format!("{name}: {:.4}", cache.matrices[h][q * rows + k]));
                    }
                });
            }
        } else {
            // The band the lines cross, over every row (scrolling moves it, it is not redrawn).
            let band = Rect::from_min_max(
                pos2(layout.line_x0 - BAND_PAD, rect.top()),
                pos2(layout.line_x1 + BAND_PAD, rect.bottom()),
            );
            let ppp = ui.ctx().pixels_per_point();
            let max_side = ui.ctx().input(|i| i.max_texture_side).min(crate::render::MAX_SIDE as usize) as f32;
            // Along a very long view the picture is drawn at a lower resolution to fit a texture.
            let (sx, sy) = (ppp, ppp.min(max_side / band.height().max(1.0)));
            let key = LinesKey {
                matrices: matrices_key,
                heads: heads.clone(),
                threshold: min_weight.to_bits(),
                pair_filter: settings.pair_filter,
                pixels: (sx.to_bits(), sy.to_bits()),
            };
            if cache.lines_key.as_ref() != Some(&key) {
                // Every line that passes the threshold...
                let mut lines: Vec<(f32, u32, u32, u32)> = Vec::new();
                for &h in &heads {
                    let m = &cache.matrices[h];
                    for q in 0..rows {
                        for k in 0..rows {
                            let w = m[q * rows + k];
                            if w >= min_weight && admits(q, k) {
                                lines.push((w, h as u32, q as u32, k as u32));
                            }
                        }
                    }
                }
                // ...but no more than the budget: keep the strongest.
                cache.candidate_count = lines.len();
                cache.budget_threshold = None;
                if lines.len() > LINE_BUDGET {
                    lines.select_nth_unstable_by(LINE_BUDGET, |a, b| b.0.total_cmp(&a.0));
                    lines.truncate(LINE_BUDGET);
                    cache.budget_threshold = lines.iter().map(|l| l.0).reduce(f32::min);
                }
                let colors = crate::render::head_colors(n_heads);
                let to_px = |x: f32, y: f32| ((x - band.left()) * sx, (y - band.top()) * sy);
                let mut per_head: Vec<crate::render::HeadLines> =
                    heads.iter().map(|&h| crate::render::HeadLines { color: colors[h], lines: Vec::new() }).collect();
                for &(w, h, q, k) in &lines {
                    let slot = heads.iter().position(|&x| x == h as usize).unwrap_or(0);
                    let from = to_px(layout.line_x0, layout.row_y(q as usize));
                    let to = to_px(layout.line_x1, layout.row_y(k as usize));
                    per_head[slot].lines.push(crate::render::Segment { from, to, alpha: w.min(1.0) });
                }
                let size = (band.width() * sx, band.height() * sy);
                rasterize_lines(ui.ctx(), &mut cache.lines, "head-view-lines", size, &per_head, sx);
                cache.line_count = lines.len();
                cache.lines_key = Some(key);
            }
            draw_texture(&painter, cache.lines.as_ref(), band);
        }
        // Token labels.
        let text_color = ui.visuals().text_color();
        let highlight = ui.visuals().selection.bg_fill;
        for row in (0..rows).filter(|&r| visible_rows(r)) {
            let y = layout.row_y(row);
            let pos = keep[row];
            for (side, x, align) in [
                (Side::Query, layout.left_text_right, egui::Align2::RIGHT_CENTER),
                (Side::Key, layout.right_text_left, egui::Align2::LEFT_CENTER),
            ] {
                let selected = selection == Some((side, pos));
                let pinned = rt.pinned == Some((side, pos));
                let galley = truncated(&painter, &labels[row], &font, text_color, label_width);
                let w = galley.size().x.min(label_width);
                let text_rect = align.anchor_size(pos2(x, y), vec2(w, ROW_HEIGHT - 2.0));
                if selected {
                    painter.rect_filled(text_rect.expand(2.0), 3.0, highlight);
                }
                if pinned {
                    painter.rect_stroke(
                        text_rect.expand(2.0),
                        3.0,
                        Stroke::new(1.5, text_color),
                        egui::StrokeKind::Outside,
                    );
                }
                let segment_color =
                    if run.tokens.segments[pos] == 1 { ui.visuals().hyperlink_color } else { text_color };
                painter.with_clip_rect(text_rect.expand(1.0)).galley(
                    text_rect.left_top() + vec2(0.0, (text_rect.height() - galley.size().y) / 2.0),
                    galley,
                    segment_color,
                );
            }
        }
    });
}

/// Draws `lines` (pixel coordinates) with `render::draw_lines` — the exported figure's rasterizer — into
/// a transparent `size` picture and puts it in `slot` (updated in place when it exists).
/// `px_per_point` scales the line width.
fn rasterize_lines(
    ctx: &egui::Context,
    slot: &mut Option<TextureHandle>,
    name: &str,
    (width, height): (f32, f32),
    lines: &[crate::render::HeadLines],
    px_per_point: f32,
) {
    let mut img = crate::render::transparent_image(width, height);
    crate::render::draw_lines(&mut img, lines, LINE_WIDTH * px_per_point);
    let size = [img.width() as usize, img.height() as usize];
    let image = egui::ColorImage::from_rgba_premultiplied(size, img.as_raw());
    match slot {
        Some(texture) => texture.set(image, TextureOptions::LINEAR),
        None => *slot = Some(ctx.load_texture(name, image, TextureOptions::LINEAR)),
    }
}

/// Paints a whole texture stretched over `rect`.
fn draw_texture(painter: &egui::Painter, texture: Option<&TextureHandle>, rect: Rect) {
    if let Some(texture) = texture {
        painter.image(texture.id(), rect, Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)), Color32::WHITE);
    }
}

/// A one-line label no wider than `max_width`, ending in "…" when it is cut (a long merged word
/// must not look like a shorter one).
fn truncated(
    painter: &egui::Painter,
    text: &str,
    font: &FontId,
    color: Color32,
    max_width: f32,
) -> std::sync::Arc<egui::Galley> {
    let mut job = egui::text::LayoutJob::simple_singleline(text.to_owned(), font.clone(), color);
    job.wrap =
        egui::text::TextWrapping { max_width, max_rows: 1, break_anywhere: true, overflow_character: Some('…') };
    painter.layout_job(job)
}

/// Small per-head bars next to the tokens of the other column, for the selected token.
#[allow(clippy::too_many_arguments)]
fn bars_ui(
    painter: &egui::Painter,
    layout: &Layout,
    cache: &HeadViewCache,
    heads: &[usize],
    n_heads: usize,
    side: Side,
    row: usize,
    label_width: f32,
    visible: &dyn Fn(usize) -> bool,
) {
    let rows = cache.keep.len();
    let bar_h = ((ROW_HEIGHT - 4.0) / heads.len() as f32).clamp(1.0, 6.0);
    for other in (0..rows).filter(|&r| visible(r)) {
        let y0 = layout.row_y(other) - bar_h * heads.len() as f32 / 2.0;
        for (i, &h) in heads.iter().enumerate() {
            let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
            let w = cache.matrices[h][q * rows + k];
            let len = w.clamp(0.0, 1.0) * (BARS_WIDTH - 10.0);
            let y = y0 + i as f32 * bar_h;
            let rect = if side == Side::Query {
                // Bars to the right of the key labels.
                let x = layout.right_text_left + label_width + 6.0;
                Rect::from_min_size(pos2(x, y), Vec2::new(len, bar_h.max(1.0)))
            } else {
                let x = layout.left_text_right - label_width - 6.0;
                Rect::from_min_size(pos2(x - len, y), Vec2::new(len, bar_h.max(1.0)))
            };
            painter.rect_filled(rect, 0.0, head_color(h, n_heads));
        }
    }
}

fn toolbar_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime, run: &Run) {
    ui.horizontal_wrapped(|ui| {
        let title = if settings.head_rollout {
            format!("Rollout through layers 0–{} (pseudo-layer)", settings.layer_idx)
        } else {
            format!("Layer {}", settings.layer_idx)
        };
        ui.label(RichText::new(title).strong());
        ui.checkbox(&mut settings.head_rollout, "Rollout pseudo-layer").on_hover_text(
            "Show attention rollout up to this layer (selected heads averaged, residual added) as one pseudo-layer",
        );
        ui.separator();
        ui.add(egui::Slider::new(&mut settings.threshold, 0.0..=0.5).text("hide lines below"));
        ui.separator();
        ui.checkbox(&mut settings.hide_special, "Hide special tokens");
        if run.tokens.is_pair() {
            ui.separator();
            for f in PairFilter::ALL {
                ui.selectable_value(&mut settings.pair_filter, f, f.label())
                    .on_hover_text("Which sentence attends to which");
            }
        }
    });
    if settings.hide_special {
        ui.label(
            RichText::new("[CLS]/[SEP] hidden: each row is renormalised to sum to 1 over the remaining tokens.")
                .small()
                .italics(),
        );
    }
    if let Some(w) = rt.caches.head.budget_threshold.filter(|_| rt.pinned.is_none() && rt.hovered.is_none()) {
        let shown = format!(
            "Showing the {LINE_BUDGET} strongest of {} lines in view (weights ≥ {w:.3}); raise the threshold or pick fewer heads to see the rest.",
            rt.caches.head.candidate_count
        );
        ui.label(RichText::new(shown).small().italics());
    }
    match rt.pinned {
        Some((side, pos)) if pos < run.tokens.len() => {
            let what = if side == Side::Query { "query" } else { "key" };
            ui.horizontal_wrapped(|ui| {
                ui.label(
                    RichText::new(format!(
                        "Pinned {what} “{}” — click it again or press Esc to unpin",
                        run.tokens.label(pos)
                    ))
                    .small(),
                );
                if side == Side::Query
                    && run.neuron.is_some()
                    && ui
                        .button("Why? Open in the neuron view")
                        .on_hover_text("See how q and the keys produce these weights")
                        .clicked()
                {
                    settings.neuron_query = pos;
                    settings.view = crate::app::state::View::Neuron;
                }
            });
        }
        _ => {
            ui.label(RichText::new("Hover a token to see its lines; click to pin it.").small().weak());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_end_in_an_ellipsis_and_short_ones_stay_whole() {
        let ctx = egui::Context::default();
        let font = FontId::proportional(14.0);
        let mut output = ctx.run_ui(egui::RawInput::default(), |ui| {
            let long = truncated(ui.painter(), "internationalisation", &font, Color32::WHITE, 60.0);
            let last = long.rows.last().and_then(|r| r.row.glyphs.last()).map(|g| g.chr);
            assert!(long.elided && last == Some('…'), "cut with an ellipsis: {last:?}");
            assert!(long.size().x <= 61.0, "{}", long.size().x);
            assert!(!truncated(ui.painter(), "cat", &font, Color32::WHITE, 60.0).elided);
        });
        output.textures_delta.clear(); // no renderer here to take the font atlas
    }
}
