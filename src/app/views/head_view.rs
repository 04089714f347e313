//! The head view: the tokens twice (queries left, keys right) and one line per head from each
//! query to each key, opacity from the weight. Hover a token to see only its lines with per-head
//! bars on the other column; click to pin; Esc or a second click unpins.

use egui::{Color32, FontId, Rect, RichText, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use crate::analysis::Run;
use crate::analysis::select::PairFilter;
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::derive::{BAND_PAD, DeriveKey, HeadLinesKey, HeadMatrices, LINE_WIDTH, head_view_room};
use crate::app::intervene::knockout;
use crate::app::state::{Settings, View};
use crate::app::widgets::head_color;
use crate::render::{
    BodyLabels, Drawing, HeadViewLayout, Side, Theme, head_view_label_box, head_view_labels, head_view_layout_fit,
};

pub use crate::app::derive::LINE_BUDGET;
/// Room for per-head bars beside a column.
const BARS_WIDTH: f32 = 90.0;
/// From this many selected heads on, the view suggests looking at one.
pub const MANY_HEADS: usize = 4;

/// What the picture of one token's lines depends on: also the token and the visible part of the band.
#[derive(Debug, Clone, PartialEq)]
struct HoverKey {
    matrices: DeriveKey,
    heads: Vec<usize>,
    threshold: u32,
    pair_filter: PairFilter,
    selection: (Side, usize),
    /// Left, top and height of the visible band, and pixels per point (bits).
    band: [u32; 4],
}

/// The head view's state: the pictures of its lines (the matrices are derived off the UI
/// thread) and the token under the pointer.
#[derive(Default)]
pub struct HeadView {
    /// Token under the pointer.
    pub hovered: Option<(Side, usize)>,
    /// What the uploaded picture of all lines shows (a [`DeriveKey::HeadLines`]).
    lines_key: Option<DeriveKey>,
    /// Whether the picture of all lines for the current selection is still being drawn.
    pub lines_pending: bool,
    /// Where the uploaded picture's rows and lines are: its layout's top, row height and line
    /// ends, and its size in points.
    lines_geometry: Option<([u32; 4], egui::Vec2)>,
    /// Whether the last frame drew the previous run's picture while the new one is drawn.
    pub lines_stale: bool,
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
    /// The figure's layout for the shown tokens, and what it was made for (the tokens and the room).
    layout: Option<(DeriveKey, (u32, u32), HeadViewLayout)>,
    /// The token labels as the exported figure lays them out (a display list, body coordinates),
    /// and what they were laid out for: the tokens, the room, the selected row, the theme.
    labels: Option<(LabelsKey, Drawing)>,
    /// The pinned token last scrolled into view (a newly pinned one is scrolled to once).
    scrolled_to: Option<(Side, usize)>,
}

/// What the labels' display list depends on.
type LabelsKey = (DeriveKey, (u32, u32), Option<(Side, usize)>, Theme);

impl HeadView {
    /// The token labels on screen as a display list (the exported figure's captions, highlight
    /// and labels, in points from the top-left of the figure's body).
    pub fn labels_drawing(&self) -> Option<&Drawing> {
        self.labels.as_ref().map(|(_, d)| d)
    }

    /// The figure's body layout on screen.
    pub fn body_layout(&self) -> Option<HeadViewLayout> {
        self.layout.as_ref().map(|(_, _, l)| *l)
    }
}

/// Geometry of the view on screen: the exported figure's [`HeadViewLayout`] (rows, label
/// columns, the band the lines cross) placed at `origin`, with room for per-head bars on each side.
#[derive(Debug, Clone, Copy)]
struct Layout {
    body: HeadViewLayout,
    /// Top-left corner of the body on screen.
    origin: egui::Pos2,
    left_text_right: f32,
    line_x0: f32,
    line_x1: f32,
    right_text_left: f32,
    top: f32,
}

impl Layout {
    /// The figure's layout with its body's top-left corner at `origin` (screen points).
    fn at(body: HeadViewLayout, origin: egui::Pos2) -> Self {
        Self {
            body,
            origin,
            left_text_right: origin.x + body.left_text_right,
            line_x0: origin.x + body.line_x0,
            line_x1: origin.x + body.line_x1,
            right_text_left: origin.x + body.right_text_left,
            top: origin.y + body.top,
        }
    }

    fn row_height(&self) -> f32 {
        self.body.row_height
    }

    fn label_width(&self) -> f32 {
        self.body.label_width
    }

    fn row_y(&self, row: usize) -> f32 {
        self.top + (row as f32 + 0.5) * self.body.row_height
    }

    /// The box of a token's label on screen (the figure's highlight box).
    fn label_box(&self, side: Side, row: usize) -> Rect {
        let [x, y, w, h] = head_view_label_box(&self.body, side, row, 1.0);
        Rect::from_min_size(self.origin + vec2(x, y), vec2(w, h))
    }
}

impl HeadView {
    /// Draws the head view of the current layer.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        self.view_ui(ui, data, &mut settings, commands);
        commands.set_changed(data.settings, &settings);
    }

    fn view_ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, settings: &mut Settings, commands: &mut Commands) {
        let Some(run) = data.run else { return };
        let (layer_idx, selected) = data.selection();
        toolbar_ui(ui, settings, self, data.pinned, run, commands);
        if selected.is_empty() {
            ui.label(
                "No head selected: pick heads in the side panel (click a chip; double-click shows only that head).",
            );
            return;
        }
        // The rollout pseudo-layer is one "head" drawn in one colour.
        let rollout = (settings.rollout.in_head_view && run.attention.is_square()).then(|| selected.clone());
        let (heads, n_heads) = if rollout.is_some() { (vec![0], 1) } else { (selected, run.attention.heads()) };
        let matrices_key =
            DeriveKey::HeadMatrices { view_id: data.view_id, layer_idx, hide_special: settings.hide_special, rollout };
        let Some(m) = crate::app::widgets::derived_or_ask(data, commands, &matrices_key, |d| {
            d.head_matrices(&matrices_key).cloned()
        }) else {
            crate::app::widgets::computing_ui(
                ui,
                if settings.rollout.in_head_view { "the rollout" } else { "the layer's lines" },
            );
            return;
        };
        let iv = self.lines_ui(ui, data, settings, commands, &m, &matrices_key, &heads, n_heads);
        if let Some(iv) = iv {
            settings.interventions = iv;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn lines_ui(
        &mut self,
        ui: &mut egui::Ui,
        data: &ViewData<'_>,
        settings: &Settings,
        commands: &mut Commands,
        m: &HeadMatrices,
        matrices_key: &DeriveKey,
        heads: &[usize],
        n_heads: usize,
    ) -> Option<crate::model::Interventions> {
        let run = data.run?;
        let heads = heads.to_vec();
        // Knockout is set on the layer's own heads (not the rollout), from the lines' context menus.
        let rollout = settings.rollout.in_head_view && run.attention.is_square();
        let knock = if rollout { Err("rollout") } else { knockout::knockable(data) };
        let layer = settings.layer_idx;
        let mut iv = settings.interventions.clone();
        let cache = self;
        // Rows are the queries (left), columns the keys (right): the same tokens, except for
        // cross-attention (target tokens left, source tokens right).
        let (rows, cols) = (m.rows(), m.cols());
        let labels: Vec<String> = m.keep.iter().map(|&p| run.label(p)).collect();
        let key_labels = m.key_labels(run);
        // The shown position and label of row `row` of a column, if that column has one.
        let token_at = |side: Side, row: usize| match side {
            Side::Query => m.keep.get(row).map(|&p| (p, &labels[row])),
            Side::Key => m.keep_keys.get(row).map(|&p| (p, &key_labels[row])),
        };
        // The exported figure's layout code, scaled to the room the view has: rows, labels and
        // the line band grow with the window (one pixel = one point).
        let room = head_view_room(ui.available_size(), BARS_WIDTH);
        if cache.layout.as_ref().is_none_or(|(k, r, _)| k != matrices_key || *r != room) {
            let body = head_view_layout_fit(&labels, &key_labels, (room.0 as f32, room.1 as f32));
            cache.layout = Some((matrices_key.clone(), room, body));
        }
        let body = cache.layout.as_ref()?.2;
        egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
            let size = vec2(BARS_WIDTH * 2.0 + body.width, body.height);
            let (rect, _) = ui.allocate_exact_size(size, Sense::hover());
            let layout = Layout::at(body, rect.left_top() + vec2(BARS_WIDTH, 0.0));
            let (row_height, label_width) = (layout.row_height(), layout.label_width());
            let clip = ui.clip_rect();
            let visible_rows = |row: usize| {
                let y = layout.row_y(row);
                y >= clip.top() - row_height && y <= clip.bottom() + row_height
            };
            // Every visible token is a clickable, labelled widget: hover shows its lines, click pins.
            let mut hovered = None;
            let mut clicked = None;
            for row in (0..rows.max(cols)).filter(|&r| visible_rows(r)) {
                for (side, what) in [(Side::Query, "query"), (Side::Key, "key")] {
                    let Some((pos, text)) = token_at(side, row) else { continue };
                    let hit = layout.label_box(side, row);
                    let response = ui.interact(hit, ui.scope_id().with(("head-view-token", what, pos)), Sense::click());
                    let label = format!("{what} {pos}: {text}");
                    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
                    if response.hovered() {
                        hovered = Some((side, pos));
                    }
                    if response.clicked() {
                        clicked = Some((side, pos));
                    }
                    if let (Ok(layers), Side::Query) = (knock, side) {
                        response.context_menu(|ui| {
                            knockout::menu_ui(ui, &mut iv, run, (layers, layer), (pos, None), (text, ""));
                        });
                    }
                }
            }
            cache.hovered = hovered;
            if let Some(sel) = clicked {
                commands.push(Command::Pin(if data.pinned == Some(sel) { None } else { Some(sel) }));
            }
            let pinned = match clicked {
                Some(sel) if data.pinned != Some(sel) => Some(sel),
                Some(_) => None,
                None => data.pinned,
            };
            let selection = pinned.or(hovered);
            let painter = ui.painter_at(rect);
            let (segments, key_segments) = (&run.tokens.segments, &run.keys().segments);
            let keep = &m.keep;
            let admits =
                |q: usize, k: usize| settings.pair_filter.admits(segments[keep[q]], key_segments[m.keep_keys[k]]);
            let min_weight = settings.threshold.max(1.0 / 255.0);
            // Lines.
            let row_of = |side: Side, pos: usize| {
                let shown = if side == Side::Query { keep } else { &m.keep_keys };
                shown.iter().position(|&p| p == pos)
            };
            if let Some((side, row)) = selection.and_then(|(side, pos)| row_of(side, pos).map(|row| (side, row))) {
                // The tokens of the other column, which the selected token's lines join.
                let others = if side == Side::Query { cols } else { rows };
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
                                let matrix = &m.matrices[h];
                                let mut lines: Vec<crate::render::Segment> = (0..others)
                                    .filter_map(|other| {
                                        let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
                                        let w = matrix[q * cols + k];
                                        (w >= min_weight && admits(q, k)).then(|| crate::render::Segment {
                                            from: to_px(layout.line_x0, layout.row_y(q)),
                                            to: to_px(layout.line_x1, layout.row_y(k)),
                                            alpha: w.min(1.0),
                                        })
                                    })
                                    .collect();
                                // A selected query's share of the sink, to its target.
                                let sink = m.sink(h, row).filter(|&w| side == Side::Query && w >= min_weight);
                                if let Some(w) = sink {
                                    lines.push(crate::render::Segment {
                                        from: to_px(layout.line_x0, layout.row_y(row)),
                                        to: to_px(layout.line_x1, layout.row_y(crate::render::sink_row(cols))),
                                        alpha: w.min(1.0),
                                    });
                                }
                                crate::render::HeadLines { color: colors[h], lines }
                            })
                            .collect();
                        let size = (visible.width() * ppp, visible.height() * ppp);
                        rasterize_lines(
                            ui.ctx(),
                            &mut cache.hover_lines,
                            "head-view-token-lines",
                            size,
                            &per_head,
                            ppp,
                        );
                        cache.hover_key = Some(key);
                    }
                    draw_texture(&painter, cache.hover_lines.as_ref(), visible);
                }
                let baseline = ui.visuals().weak_text_color().gamma_multiply(0.35);
                bars_ui(&painter, &layout, m, (&heads, n_heads), (side, row), &visible_rows, baseline);
                // Each row of bars tells its numbers on hover (pin the token first to reach them).
                for other in (0..others).filter(|&r| visible_rows(r)) {
                    let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
                    let other_side = if side == Side::Query { Side::Key } else { Side::Query };
                    let Some((other_pos, other_label)) = token_at(other_side, other) else { continue };
                    let x = if side == Side::Query {
                        layout.right_text_left + label_width + 6.0
                    } else {
                        layout.left_text_right - label_width - 6.0 - (BARS_WIDTH - 10.0)
                    };
                    let y = layout.row_y(other) - row_height / 2.0;
                    let hit = Rect::from_min_size(pos2(x, y), vec2(BARS_WIDTH - 10.0, row_height));
                    let id = ui.scope_id().with(("head-view-bars", other));
                    let what = format!(
                        "weights of {} {other_pos}: {other_label}",
                        if side == Side::Query { "key" } else { "query" },
                    );
                    let sense = if knock.is_ok() { Sense::click() } else { Sense::hover() };
                    let response = ui.interact(hit, id, sense);
                    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &what));
                    let (qp, kp) = (m.keep[q], m.keep_keys[k]);
                    let knocked = knockout::is_knocked_out(&iv, layer, qp, kp) && knock.is_ok();
                    let response = response.on_hover_ui_at_pointer(|ui| {
                        ui.label(RichText::new(format!("“{}” → “{}”", labels[q], key_labels[k])).strong());
                        for &h in &heads {
                            let name =
                                if n_heads == 1 && heads.len() == 1 { "rollout".to_string() } else { format!("H{h}") };
                            ui.label(format!("{name}: {:.4}", m.weight(h, q, k)));
                        }
                        if knocked {
                            ui.label(
                                RichText::new("knocked out: zero by intervention").color(ui.visuals().error_fg_color),
                            );
                        }
                        if knock.is_ok() {
                            ui.label(RichText::new("right-click to knock out or restore").small().weak());
                        }
                    });
                    if let Ok(layers) = knock {
                        response.context_menu(|ui| {
                            let names = (labels[q].as_str(), key_labels[k].as_str());
                            knockout::menu_ui(ui, &mut iv, run, (layers, layer), (qp, Some(kp)), names);
                        });
                    }
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
                let key = DeriveKey::HeadLines(Box::new(HeadLinesKey {
                    matrices: matrices_key.clone(),
                    heads: heads.clone(),
                    n_heads,
                    min_weight: min_weight.to_bits(),
                    pair_filter: settings.pair_filter,
                    pixels: (sx.to_bits(), sy.to_bits()),
                    room,
                }));
                cache.lines_pending = cache.lines_key.as_ref() != Some(&key);
                if cache.lines_pending {
                    // Rasterized off the UI thread; the texture is uploaded once when it arrives.
                    if let Some(picture) =
                        crate::app::widgets::derived_or_ask(data, commands, &key, |d| d.head_lines(&key).cloned())
                    {
                        let image = egui::ColorImage::from_rgba_premultiplied(picture.size, &picture.rgba);
                        match &mut cache.lines {
                            Some(texture) => texture.set(image, TextureOptions::LINEAR),
                            None => {
                                cache.lines =
                                    Some(ui.ctx().load_texture("head-view-lines", image, TextureOptions::LINEAR));
                            }
                        }
                        cache.line_count = picture.line_count;
                        cache.candidate_count = picture.candidate_count;
                        cache.budget_threshold = picture.budget_threshold;
                        cache.lines_key = Some(key.clone());
                        cache.lines_geometry = Some((geometry(&body), band.size()));
                        cache.lines_pending = false;
                    }
                }
                // While a new picture is drawn, the previous one stays if it shows the same tokens (a
                // threshold or head change); else the band is empty.
                let same_rows = cache.lines_key.as_ref().is_some_and(|k| match k {
                    DeriveKey::HeadLines(k) => k.matrices == *matrices_key,
                    _ => false,
                });
                // A new run of the same selection (a keystroke, a written token) whose rows and lines
                // are where the picture's were: the picture stays, at its own size, until the new
                // one comes — a decoder's earlier rows do not change — rather than blinking out.
                cache.lines_stale = !same_rows
                    && cache.lines_pending
                    && cache.lines_key.as_ref().is_some_and(|shown| same_but_run(shown, &key))
                    && cache.lines_geometry.is_some_and(|(at, _)| at == geometry(&body));
                if same_rows {
                    draw_texture(&painter, cache.lines.as_ref(), band);
                } else if cache.lines_stale
                    && let (Some((_, size)), Some(texture)) = (cache.lines_geometry, cache.lines.as_ref())
                {
                    // No lower than the band (the rows a backspace removed).
                    let shown = size.y.min(band.height());
                    let uv = Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, shown / size.y.max(1.0)));
                    let rect = Rect::from_min_size(band.min, vec2(size.x, shown));
                    painter.image(texture.id(), rect, uv, Color32::WHITE);
                }
                if cache.lines_pending {
                    painter.text(
                        band.center_top() + vec2(0.0, 24.0),
                        egui::Align2::CENTER_CENTER,
                        "drawing lines…",
                        FontId::proportional(12.0),
                        ui.visuals().weak_text_color(),
                    );
                }
            }
            // Token labels: the exported figure's captions, highlight and labels, painted from
            // its display list (laid out again only when the tokens, the room, the selected row
            // or the theme change).
            let selected_row = selection.and_then(|(side, pos)| row_of(side, pos).map(|row| (side, row)));
            let theme = crate::app::widgets::figure::theme_of(ui);
            let labels_key = (matrices_key.clone(), room, selected_row, theme);
            if cache.labels.as_ref().is_none_or(|(k, _)| *k != labels_key) {
                let shown_segments: [Vec<u8>; 2] = [
                    keep.iter().map(|&p| segments[p]).collect(),
                    m.keep_keys.iter().map(|&p| key_segments[p]).collect(),
                ];
                let tokens = BodyLabels {
                    queries: &labels,
                    keys: &key_labels,
                    segments: run.tokens.is_pair().then(|| (&shown_segments[0][..], &shown_segments[1][..])),
                    cross: run.key_tokens.is_some(),
                };
                let mut drawing = Drawing::new(body.width, body.height, theme.background(), "");
                head_view_labels(&mut drawing, &body, (0.0, 0.0), &tokens, selected_row, (theme, 1.0));
                cache.labels = Some((labels_key, drawing));
            }
            if let Some((_, drawing)) = &cache.labels {
                crate::app::widgets::figure::paint_visible(
                    &painter,
                    drawing,
                    layout.origin,
                    clip.intersect(rect),
                    None,
                );
            }
            // Knocked-out entries of this layer: dashed and crossed out (zero by intervention).
            if knock.is_ok() {
                let color = ui.visuals().error_fg_color;
                for e in settings.interventions.knockout.iter().filter(|e| e.at(layer)) {
                    let (Some(q), Some(k)) = (row_of(Side::Query, e.query), row_of(Side::Key, e.key)) else { continue };
                    if visible_rows(q) || visible_rows(k) {
                        let from = pos2(layout.line_x0, layout.row_y(q));
                        knockout::mark_line(&painter, from, pos2(layout.line_x1, layout.row_y(k)), color);
                    }
                }
            }
            // The pinned token is outlined as well, and scrolled into view when newly pinned (a
            // written token followed, a step chosen) and not already in view.
            if let Some((side, row)) = pinned.and_then(|(side, pos)| row_of(side, pos).map(|row| (side, row))) {
                let stroke = Stroke::new(1.5, ui.visuals().text_color());
                let label = layout.label_box(side, row);
                painter.rect_stroke(label, 0.0, stroke, egui::StrokeKind::Inside);
                if cache.scrolled_to != pinned {
                    if !clip.contains_rect(label) {
                        ui.scroll_to_rect(label, Some(egui::Align::Center));
                    }
                    cache.scrolled_to = pinned;
                }
            }
        });
        (iv != settings.interventions).then_some(iv)
    }
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

/// Where a picture of all lines puts its rows and lines (see [`HeadView::lines_geometry`]): the
/// same layout gives the same bits.
fn geometry(body: &HeadViewLayout) -> [u32; 4] {
    [body.top, body.row_height, body.line_x0, body.line_x1].map(f32::to_bits)
}

/// Whether two pictures of all lines draw the same selection (layer, heads, threshold…) of
/// different runs: their keys are equal but for the run and the room (where the rows are is
/// compared apart, see [`geometry`]).
fn same_but_run(shown: &DeriveKey, wanted: &DeriveKey) -> bool {
    let (DeriveKey::HeadLines(shown), DeriveKey::HeadLines(wanted)) = (shown, wanted) else { return false };
    let DeriveKey::HeadMatrices { view_id, .. } = shown.matrices else { return false };
    let mut wanted = wanted.as_ref().clone();
    let DeriveKey::HeadMatrices { view_id: run, .. } = &mut wanted.matrices else { return false };
    *run = view_id;
    wanted.room = shown.room;
    **shown == wanted
}

/// Paints a whole texture stretched over `rect`.
fn draw_texture(painter: &egui::Painter, texture: Option<&TextureHandle>, rect: Rect) {
    if let Some(texture) = texture {
        painter.image(texture.id(), rect, Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)), Color32::WHITE);
    }
}

/// Where one token's per-head bars go: within `room` (x from, width) beside a row centred on
/// `y_mid` and `row_height` tall, one bar per weight, long bars growing away from the labels
/// (`grow_left` on the query side). Up to three heads are stacked bars as long as the weight;
/// more become side-by-side columns as tall as the weight (a small bar chart), so that 12 heads
/// stay several pixels thick instead of one.
pub fn bar_rects(weights: &[f32], (x, width): (f32, f32), y_mid: f32, row_height: f32, grow_left: bool) -> Vec<Rect> {
    let n = weights.len().max(1) as f32;
    let inner = (row_height - 4.0).max(2.0);
    let stacked = weights.len() <= 3;
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let w = if w.is_finite() { w.clamp(0.0, 1.0) } else { 0.0 };
            if stacked {
                let bar_h = (inner / n).min(8.0);
                let y = y_mid - bar_h * n / 2.0 + i as f32 * bar_h;
                let len = w * width;
                let left = if grow_left { x + width - len } else { x };
                Rect::from_min_size(pos2(left, y), vec2(len, bar_h.max(1.0)))
            } else {
                let pitch = (width / n).min(10.0);
                let col_w = (pitch - 1.0).max(1.0);
                let h = (w * inner).max(if w > 0.0 { 1.0 } else { 0.0 });
                let bottom = y_mid + inner / 2.0;
                let left = if grow_left { x + width - (i as f32 + 1.0) * pitch } else { x + i as f32 * pitch };
                Rect::from_min_size(pos2(left, bottom - h), vec2(col_w, h))
            }
        })
        .collect()
}

/// Per-head bars next to the tokens of the other column, for the selected token.
fn bars_ui(
    painter: &egui::Painter,
    layout: &Layout,
    m: &HeadMatrices,
    (heads, n_heads): (&[usize], usize),
    (side, row): (Side, usize),
    visible: &dyn Fn(usize) -> bool,
    baseline: Color32,
) {
    let others = if side == Side::Query { m.cols() } else { m.rows() };
    let label_width = layout.label_width();
    let width = BARS_WIDTH - 10.0;
    let x = if side == Side::Query {
        // Bars to the right of the key labels.
        layout.right_text_left + label_width + 6.0
    } else {
        layout.left_text_right - label_width - 6.0 - width
    };
    for other in (0..others).filter(|&r| visible(r)) {
        let (q, k) = if side == Side::Query { (row, other) } else { (other, row) };
        let weights: Vec<f32> = heads.iter().map(|&h| m.weight(h, q, k)).collect();
        let y_mid = layout.row_y(other);
        let rects = bar_rects(&weights, (x, width), y_mid, layout.row_height(), side == Side::Key);
        if heads.len() > 3 {
            // The columns' common baseline, so that a weight of zero reads as zero.
            let y = y_mid + (layout.row_height() - 4.0).max(2.0) / 2.0;
            painter.hline(x..=x + width, y, Stroke::new(1.0, baseline));
        }
        for (rect, &h) in rects.into_iter().zip(heads) {
            painter.rect_filled(rect, 0.0, head_color(h, n_heads));
        }
    }
}

fn toolbar_ui(
    ui: &mut egui::Ui,
    settings: &mut Settings,
    view: &HeadView,
    pinned: Option<(Side, usize)>,
    run: &Run,
    commands: &mut Commands,
) {
    ui.horizontal_wrapped(|ui| {
        let title = if settings.rollout.in_head_view && run.key_tokens.is_none() {
            format!("Rollout through layers 0–{} (pseudo-layer)", settings.layer_idx)
        } else {
            format!("Layer {}", settings.layer_idx)
        };
        ui.label(RichText::new(title).strong());
        if run.key_tokens.is_none() {
            ui.checkbox(&mut settings.rollout.in_head_view, "Rollout pseudo-layer").on_hover_text(
                "Show attention rollout up to this layer (selected heads averaged, residual added) as one pseudo-layer",
            );
        } else {
            ui.label(RichText::new("target tokens (queries) left · source tokens (keys) right").small().weak());
        }
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
    // The line stays while a token is hovered or pinned (it says what the view then draws): a line
    // that came and went with the hover moved every token under the pointer up and down.
    if let Some(w) = view.budget_threshold {
        let shown = if pinned.is_none() && view.hovered.is_none() {
            format!(
                "Showing {} in view; raise the threshold or pick fewer heads to see the rest.",
                crate::render::line_budget_notice(view.candidate_count, w)
            )
        } else {
            format!(
                "Every line of the selected token is drawn; without a selection the view shows the {LINE_BUDGET} strongest of {} lines.",
                view.candidate_count
            )
        };
        ui.label(RichText::new(shown).small().italics());
    }
    // BertViz's habit: one head at a time; a dozen heads' lines blend into one colour.
    let selected: Vec<usize> = settings.heads.iter().enumerate().filter(|(_, on)| **on).map(|(h, _)| h).collect();
    if selected.len() >= MANY_HEADS && !settings.rollout.in_head_view {
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!(
                    "{} heads' lines overlap: one head at a time is easier to read (double-click a head chip).",
                    selected.len()
                ))
                .small(),
            );
            if ui.small_button(format!("Show H{} alone", selected[0])).clicked() {
                let only: Vec<bool> = (0..settings.heads.len()).map(|h| h == selected[0]).collect();
                commands.push(Command::Set(Setting::Heads(only)));
            }
        });
    }
    match pinned {
        Some((side, pos)) if pos < if side == Side::Key { run.keys().len() } else { run.tokens.len() } => {
            let what = if side == Side::Query { "query" } else { "key" };
            let label = if side == Side::Query { run.label(pos) } else { run.key_label(pos) };
            ui.horizontal_wrapped(|ui| {
                ui.label(
                    RichText::new(format!("Pinned {what} “{label}” — click it again or press Esc to unpin")).small(),
                );
                if side == Side::Query
                    && run.neuron.is_some()
                    && ui
                        .button("Why? Open in the neuron view")
                        .on_hover_text("See how q and the keys produce these weights")
                        .clicked()
                {
                    commands.push(Command::Set(Setting::NeuronQuery(pos)));
                    commands.push(Command::Set(Setting::View(View::Neuron)));
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
    fn twelve_heads_get_bars_several_pixels_thick_and_as_tall_as_their_weight() {
        let weights: Vec<f32> = (0..12).map(|h| h as f32 / 11.0).collect();
        let rects = bar_rects(&weights, (100.0, 80.0), 50.0, 18.0, false);
        assert_eq!(rects.len(), 12);
        // Each bar at least 5 points wide, the full weight 14 points tall, within the room.
        assert!(rects.iter().all(|r| r.width() >= 5.0 && r.left() >= 100.0 && r.right() <= 180.0), "{rects:?}");
        assert!((rects[11].height() - 14.0).abs() < 1e-3 && rects[0].height() == 0.0);
        assert!((rects[6].height() - 14.0 * 6.0 / 11.0).abs() < 1e-3);
        // Side by side, never overlapping.
        assert!(rects.windows(2).all(|p| p[0].right() <= p[1].left()));
        // Growing away from the labels on the query side.
        let left = bar_rects(&weights, (100.0, 80.0), 50.0, 18.0, true);
        assert!(left[0].left() > left[11].left() && left.iter().all(|r| r.right() <= 180.0));
        // Two heads stay horizontal bars as long as the weight.
        let two = bar_rects(&[1.0, 0.5], (0.0, 80.0), 50.0, 18.0, false);
        assert!((two[0].width() - 80.0).abs() < 1e-3 && (two[1].width() - 40.0).abs() < 1e-3);
        assert!(two.iter().all(|r| r.height() >= 6.0));
    }
}
