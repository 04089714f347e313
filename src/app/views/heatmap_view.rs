//! The heatmap view: one head (or the mean of the selected heads) with labelled axes, a colour
//! bar, exact values on hover, numbers in the cells when they fit, zoom (Ctrl+scroll) and pan.

use egui::epaint::TextShape;
use egui::{Color32, FontId, Pos2, Rect, RichText, Sense, Stroke, TextureHandle, TextureOptions, pos2, vec2};

use super::side_panel::contrast_text;
use crate::analysis::Run;
use crate::analysis::select::{mask_causal, submatrix, visible_tokens};
use crate::app::app::Runtime;
use crate::app::state::Settings;
use crate::render::{Colormap, cell_rgb, cells_rgba};

/// What the texture depends on.
#[derive(Debug, Clone, PartialEq)]
struct HeatKey {
    run_id: u64,
    layer_idx: usize,
    heads: Vec<usize>,
    hide_special: bool,
    colormap: Colormap,
}

/// The shown matrix and its texture.
#[derive(Default)]
pub struct HeatmapCache {
    key: Option<HeatKey>,
    texture: Option<TextureHandle>,
    /// Shown values, `m × m`.
    pub values: Vec<f32>,
    /// Token positions of the rows/columns.
    pub keep: Vec<usize>,
    /// How many times the texture was built.
    pub builds: usize,
}

impl HeatmapCache {
    fn update(&mut self, ctx: &egui::Context, key: HeatKey, run: &Run) {
        if self.key.as_ref() == Some(&key) {
            return;
        }
        let a = &run.attention;
        let mean = a.mean_of_heads(key.layer_idx, &key.heads);
        self.keep = visible_tokens(&run.tokens, key.hide_special);
        self.values = submatrix(&mean, a.seq_len(), &self.keep, key.hide_special);
        if run.causal {
            mask_causal(&mut self.values, &self.keep);
        }
        let m = self.keep.len().max(1);
        let rgba = if self.keep.is_empty() { vec![0; 4] } else { cells_rgba(&self.values, 0.0, 1.0, key.colormap) };
        let image = egui::ColorImage::from_rgba_unmultiplied([m, m], &rgba);
        self.texture = Some(ctx.load_texture("heatmap", image, TextureOptions::NEAREST));
        self.key = Some(key);
        self.builds += 1;
    }

    /// The value at (query row, key column) of the shown matrix.
    pub fn value(&self, row: usize, col: usize) -> f32 {
        self.values[row * self.keep.len() + col]
    }
}

fn heads_title(heads: &[usize]) -> String {
    match heads {
        [one] => format!("head {one}"),
        many if many.len() <= 6 => {
            format!("mean of heads {}", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        }
        many => format!("mean of {} heads", many.len()),
    }
}

/// Draws the heatmap of the current layer and heads.
pub fn heatmap_view_ui(ui: &mut egui::Ui, settings: &mut Settings, rt: &mut Runtime) {
    let Some(run) = rt.run.clone() else { return };
    let heads = settings.selected_heads();
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(format!("Layer {} · {}", settings.layer_idx, heads_title(&heads))).strong());
        ui.separator();
        ui.add(egui::Slider::new(&mut settings.cell_size, 2.0..=80.0).text("cell size").logarithmic(true));
        ui.checkbox(&mut settings.hide_special, "Hide special tokens");
        ui.label(RichText::new("rows attend to columns · Ctrl+scroll zooms · drag pans").small().weak());
    });
    if heads.is_empty() {
        ui.label("No head selected: pick heads in the side panel.");
        return;
    }
    let key = HeatKey {
        run_id: rt.view_id,
        layer_idx: settings.layer_idx,
        heads,
        hide_special: settings.hide_special,
        colormap: settings.colormap,
    };
    rt.caches.heatmap.update(ui.ctx(), key, &run);
    let cache = &rt.caches.heatmap;
    let m = cache.keep.len();
    if m == 0 {
        ui.label("Nothing to show: every token is a special token and they are hidden.");
        return;
    }
    let labels: Vec<String> = cache.keep.iter().map(|&p| run.tokens.label(p)).collect();
    let cell = settings.cell_size;
    let font = FontId::proportional((cell * 0.6).clamp(9.0, 14.0));
    let show_labels = cell >= 9.0;
    let label_w = if show_labels {
        labels
            .iter()
            .map(|l| ui.painter().layout_no_wrap(l.clone(), font.clone(), Color32::WHITE).size().x)
            .fold(10.0f32, f32::max)
            .min(160.0)
            + 12.0
    } else {
        40.0
    };
    let bar_w = 80.0;
    let mut zoom = 1.0;
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
        let size = vec2(label_w + m as f32 * cell + bar_w, label_w + m as f32 * cell + 24.0);
        let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
        let cells = Rect::from_min_size(rect.min + vec2(label_w, label_w), vec2(m as f32 * cell, m as f32 * cell));
        let painter = ui.painter_at(rect);
        let clip = ui.clip_rect();
        if let Some(texture) = &cache.texture {
            painter.image(texture.id(), cells, Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)), Color32::WHITE);
        }
        let text = ui.visuals().text_color();
        let visible = |i: usize, vertical: bool| {
            let c =
                if vertical { cells.top() + (i as f32 + 0.5) * cell } else { cells.left() + (i as f32 + 0.5) * cell };
            let (lo, hi) = if vertical { (clip.top(), clip.bottom()) } else { (clip.left(), clip.right()) };
            c >= lo - cell && c <= hi + cell
        };
        if show_labels {
            for i in 0..m {
                if visible(i, true) {
                    let y = cells.top() + (i as f32 + 0.5) * cell;
                    painter.text(
                        pos2(cells.left() - 4.0, y),
                        egui::Align2::RIGHT_CENTER,
                        &labels[i],
                        font.clone(),
                        text,
                    );
                }
                if visible(i, false) {
                    column_label(
                        &painter,
                        cells.left() + (i as f32 + 0.5) * cell,
                        cells.top(),
                        &labels[i],
                        &font,
                        text,
                    );
                }
            }
        }
        // Numbers in the cells when they fit.
        if cell >= 30.0 {
            let lut = settings.colormap.lut();
            let num_font = FontId::monospace((cell * 0.3).clamp(8.0, 12.0));
            for q in (0..m).filter(|&q| visible(q, true)) {
                for k in (0..m).filter(|&k| visible(k, false)) {
                    let v = cache.value(q, k);
                    if v.is_nan() {
                        continue; // masked
                    }
                    let center = pos2(cells.left() + (k as f32 + 0.5) * cell, cells.top() + (q as f32 + 0.5) * cell);
                    cell_number(&painter, center, v, cell_rgb(&lut, v, 0.0, 1.0), &num_font);
                }
            }
        }
        colorbar(
            &painter,
            settings.colormap,
            Rect::from_min_size(pos2(cells.right() + 16.0, cells.top()), vec2(14.0, (m as f32 * cell).max(80.0))),
            text,
            (0.0, 1.0),
        );
        // Hover: exact value.
        if let Some(p) = response.hover_pos().filter(|p| cells.contains(*p)) {
            let q = (((p.y - cells.top()) / cell) as usize).min(m - 1);
            let k = (((p.x - cells.left()) / cell) as usize).min(m - 1);
            let cell_rect = Rect::from_min_size(
                pos2(cells.left() + k as f32 * cell, cells.top() + q as f32 * cell),
                vec2(cell, cell),
            );
            painter.rect_stroke(
                cell_rect,
                0.0,
                Stroke::new(2.0, ui.visuals().strong_text_color()),
                egui::StrokeKind::Outside,
            );
            let v = cache.value(q, k);
            let (qt, kt) = (labels[q].clone(), labels[k].clone());
            let weight = if v.is_nan() {
                "masked: the causal mask hides keys after the query".to_string()
            } else {
                format!("weight {v:.6}")
            };
            response.clone().on_hover_text_at_pointer(format!(
                "query “{qt}” (#{})\nkey “{kt}” (#{})\n{weight}",
                cache.keep[q], cache.keep[k]
            ));
        }
        if response.hovered() {
            zoom = ui.input(egui::InputState::zoom_delta);
        }
    });
    if (zoom - 1.0).abs() > 1e-3 {
        settings.cell_size = (settings.cell_size * zoom).clamp(2.0, 80.0);
    }
}

/// A column's label written upwards, centred on `x`, ending just above `top` (the cells' top edge).
pub fn column_label(painter: &egui::Painter, x: f32, top: f32, label: &str, font: &FontId, color: Color32) {
    let galley = painter.layout_no_wrap(label.to_owned(), font.clone(), color);
    let h = galley.size().y;
    painter.add(TextShape::new(pos2(x - h / 2.0, top - 4.0), galley, color).with_angle(-std::f32::consts::FRAC_PI_2));
}

/// A cell's value (two decimals) centred on `center`, in a colour that reads on the cell's `rgb`.
pub fn cell_number(painter: &egui::Painter, center: Pos2, value: f32, [r, g, b]: [u8; 3], font: &FontId) {
    painter.text(
        center,
        egui::Align2::CENTER_CENTER,
        crate::render::format_cell_value(value),
        font.clone(),
        contrast_text(Color32::from_rgb(r, g, b)),
    );
}

/// A vertical colour bar from `lo` (bottom) to `hi` (top) with ticks.
pub fn colorbar(painter: &egui::Painter, cmap: Colormap, rect: Rect, text: Color32, (lo, hi): (f32, f32)) {
    let steps = 64;
    for i in 0..steps {
        let t = i as f32 / (steps - 1) as f32;
        let [r, g, b] = cmap.rgb(t);
        let y1 = rect.bottom() - rect.height() * i as f32 / steps as f32;
        let y0 = rect.bottom() - rect.height() * (i + 1) as f32 / steps as f32;
        painter.rect_filled(Rect::from_x_y_ranges(rect.x_range(), y0..=y1), 0.0, Color32::from_rgb(r, g, b));
    }
    for tick in [0.0f32, 0.25, 0.5, 0.75, 1.0] {
        let y = rect.bottom() - rect.height() * tick;
        let value = lo + (hi - lo) * tick;
        painter.line_segment([Pos2::new(rect.right(), y), Pos2::new(rect.right() + 4.0, y)], Stroke::new(1.0, text));
        painter.text(
            pos2(rect.right() + 6.0, y),
            egui::Align2::LEFT_CENTER,
            crate::render::format_cell_value(value),
            FontId::proportional(11.0),
            text,
        );
    }
}
