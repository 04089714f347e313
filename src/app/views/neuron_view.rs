//! The neuron view: for one layer, head and query token, the query vector q, every key vector `k_j`,
//! their elementwise products `q∘k_j`, the scaled dot products and the softmax, as rows of coloured
//! cells aligned with the tokens — how each attention weight arises. Click a token on the left to
//! pick the query.

use std::fmt::Write as _;

use egui::{Color32, FontId, Rect, RichText, Sense, Stroke, pos2, vec2};

use super::side_panel::contrast_text;
use crate::analysis::run::NeuronBreakdown;
use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::widgets::matrix::symmetric_range;
use crate::render::{Colormap, cell_rgb};

/// Height of one key row.
const ROW: f32 = 18.0;

fn color(lut: &[[u8; 3]; 256], v: f32, (lo, hi): (f32, f32)) -> Color32 {
    let [r, g, b] = cell_rgb(lut, v, lo, hi);
    Color32::from_rgb(r, g, b)
}

/// A column title for a score term: "content q·k" → "content", "content→position" → "c→p".
fn short_term_name(name: &str) -> &str {
    match name {
        "content q·k" => "content",
        "content→position" => "c→p",
        "position→content" => "p→c",
        "relative-position bias" => "rel. bias",
        other => other,
    }
}

/// Draws the neuron view (it keeps no state of its own).
pub fn neuron_view_ui(ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
    let Some(run) = data.run else { return };
    let settings = data.settings;
    let a = &run.attention;
    let (layer_idx, heads) = data.selection();
    let head_idx = heads.first().copied().unwrap_or(0);
    let n = a.seq_len();
    let query = settings.neuron_query.min(n.saturating_sub(1));
    if query != settings.neuron_query {
        // A shorter run than the query picked: the export follows what is shown.
        commands.push(Command::Set(Setting::NeuronQuery(query)));
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(format!("Layer {layer_idx}")).strong());
        ui.separator();
        ui.label("Head");
        for h in 0..a.heads() {
            if ui.selectable_label(h == head_idx, format!("head {h}")).on_hover_text(format!("Show head {h}")).clicked()
            {
                let solo = (0..settings.heads.len()).map(|i| i == h).collect();
                commands.push(Command::Set(Setting::Heads(solo)));
            }
        }
    });
    let Some(neuron) = run.neuron.as_ref() else {
        ui.label(if data.settings.source == crate::app::state::Source::File {
            "The neuron view needs the model: it shows the query and key vectors each weight arises from, and an \
             attention file holds only the weights. Open the model in the side panel to see it."
        } else if run.long.is_some() {
            "The neuron view shows the query and key vectors of single tokens, which an input this long does not \
             record (only pooled attention): raise “Record up to” in the side panel past its length, or shorten it."
        } else if data.stack.is_some_and(|s| s != crate::analysis::Stack::Encoder) {
            "The neuron view shows the encoder's query and key vectors (the decoder's are not recorded): \
             pick Encoder above to see it."
        } else {
            "The neuron view shows the query and key vectors of single tokens: turn off “Words” (above) to see it."
        });
        return;
    };
    let b = neuron.breakdown(a, layer_idx, head_idx, query, |j| run.is_masked(layer_idx, query, j));
    ui.label(
        RichText::new(
            "Click a query token on the left. Each row is one key j: its vector k_j, the products q∘k_j \
             (their sum is q·k_j), the score and the softmax weight. Red > 0 > blue; hover for values.",
        )
        .small()
        .weak(),
    );
    if neuron.rotated {
        ui.label(
            RichText::new(
                "q and k are shown after the rotary position rotation (RoPE): their dot product, scaled, is the score.",
            )
            .small(),
        );
    }
    if !b.terms.is_empty() {
        let names: Vec<&str> = b.terms.iter().map(|(name, _)| name.as_str()).collect();
        ui.label(
            RichText::new(format!(
                "This model's score is not just q·k: it is the sum of {} (each scaled as the model scales it), \
                 shown in the columns before the score; the softmax is applied to that sum.",
                names.join(" + ")
            ))
            .small(),
        );
    }
    let labels: Vec<String> = (0..n).map(|i| run.label(i)).collect();
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
        if let Some(picked) = cells_ui(ui, &b, &labels, query, settings.colormap) {
            commands.push(Command::Set(Setting::NeuronQuery(picked)));
        }
    });
}

/// The query picker (left, one clickable token per row) and, aligned with it, the q row and one row
/// of cells per key. Returns the query token clicked.
fn cells_ui(
    ui: &mut egui::Ui,
    b: &NeuronBreakdown,
    labels: &[String],
    query: usize,
    weights_map: Colormap,
) -> Option<usize> {
    let (n, d) = (labels.len(), b.head_dim);
    let lut = Colormap::RdBu.lut();
    let weight_lut = weights_map.lut();
    let cell = (ui.available_width() - 520.0).div_euclid(2.0 * d as f32).clamp(4.0, 14.0);
    let picker_w = 120.0;
    let label_w = picker_w + 110.0;
    let gap = 14.0;
    let x_keys = label_w;
    let x_prod = x_keys + d as f32 * cell + gap;
    // Where the score sums several terms, they come first and the score after them: a + b + c = score.
    let x_terms0 = x_prod + d as f32 * cell + gap;
    let x_terms: Vec<f32> = (0..b.terms.len()).map(|t| x_terms0 + t as f32 * (56.0 + gap / 2.0)).collect();
    let x_score = x_terms.last().map_or(x_terms0, |x| x + 56.0 + gap);
    let x_weight = x_score + 56.0 + gap;
    let width = x_weight + 150.0;
    let vec_range = symmetric_range(&[b.query.as_slice(), b.keys.as_slice()].concat());
    let prod_range = symmetric_range(&b.products);
    let score_range = symmetric_range(&b.scores);
    let header = ROW * 2.0;
    let (rect, response) = ui.allocate_exact_size(vec2(width, header + (n as f32 + 1.0) * ROW), Sense::hover());
    let painter = ui.painter_at(rect);
    let text = ui.visuals().text_color();
    let weak = ui.visuals().weak_text_color();
    let font = FontId::proportional(12.0);
    let o = rect.min;
    let score_title = if b.terms.is_empty() { "q·k_j/√d" } else { "= score" };
    for (x, title) in [(x_keys, "k_j  (q on top)"), (x_prod, "q ∘ k_j"), (x_score, score_title), (x_weight, "softmax")]
    {
        painter.text(o + vec2(x, ROW * 0.5), egui::Align2::LEFT_CENTER, title, font.clone(), text);
    }
    for ((name, _), &x) in b.terms.iter().zip(&x_terms) {
        let short = short_term_name(name);
        painter.text(o + vec2(x, ROW * 0.5), egui::Align2::LEFT_CENTER, short, FontId::proportional(10.0), text);
    }
    // The query row.
    let qy = o.y + ROW;
    painter.text(
        pos2(o.x + label_w - 6.0, qy + ROW / 2.0),
        egui::Align2::RIGHT_CENTER,
        format!("q: {}", labels[query]),
        font.clone(),
        text,
    );
    for (i, &v) in b.query.iter().enumerate() {
        let r = Rect::from_min_size(pos2(o.x + x_keys + i as f32 * cell, qy + 1.0), vec2(cell - 0.5, ROW - 2.0));
        painter.rect_filled(r, 0.0, color(&lut, v, vec_range));
    }
    let clip = ui.clip_rect();
    let top = o.y + header;
    // The query picker: each token a button of its own, on the row of the same token.
    let mut picked = None;
    for (i, label) in labels.iter().enumerate() {
        let y = top + i as f32 * ROW;
        if y + ROW < clip.top() || y > clip.bottom() {
            continue;
        }
        let hit = Rect::from_min_size(pos2(o.x, y), vec2(picker_w - 8.0, ROW));
        let resp = ui.interact(hit, ui.scope_id().with(("neuron-query", i)), Sense::click());
        resp.widget_info(|| egui::WidgetInfo::selected(egui::Role::Button, true, i == query, label));
        let fill = if i == query {
            ui.visuals().selection.bg_fill
        } else if resp.hovered() {
            ui.visuals().widgets.hovered.weak_bg_fill
        } else {
            Color32::TRANSPARENT
        };
        painter.rect_filled(hit.shrink(1.0), 3.0, fill);
        painter.text(hit.center(), egui::Align2::CENTER_CENTER, label, font.clone(), text);
        if resp.on_hover_text(format!("Use “{label}” (#{i}) as the query")).clicked() {
            picked = Some(i);
        }
    }
    for j in 0..n {
        let y = top + j as f32 * ROW;
        if y + ROW < clip.top() || y > clip.bottom() {
            continue;
        }
        painter.text(
            pos2(o.x + label_w - 6.0, y + ROW / 2.0),
            egui::Align2::RIGHT_CENTER,
            &labels[j],
            font.clone(),
            text,
        );
        for i in 0..d {
            let k = b.keys[j * d + i];
            let p = b.products[j * d + i];
            let rk = Rect::from_min_size(pos2(o.x + x_keys + i as f32 * cell, y + 1.0), vec2(cell - 0.5, ROW - 2.0));
            let rp = Rect::from_min_size(pos2(o.x + x_prod + i as f32 * cell, y + 1.0), vec2(cell - 0.5, ROW - 2.0));
            painter.rect_filled(rk, 0.0, color(&lut, k, vec_range));
            painter.rect_filled(rp, 0.0, color(&lut, p, prod_range));
        }
        let score = b.scores[j];
        let rs = Rect::from_min_size(pos2(o.x + x_score, y + 1.0), vec2(56.0, ROW - 2.0));
        let fill = color(&lut, score, score_range);
        painter.rect_filled(rs, 0.0, fill);
        let score_text = if score.is_nan() { "masked".to_string() } else { crate::render::format_cell_value(score) };
        let ink = contrast_text(fill);
        painter.text(rs.center(), egui::Align2::CENTER_CENTER, score_text, FontId::monospace(10.0), ink);
        for ((_, values), &x) in b.terms.iter().zip(&x_terms) {
            let v = values[j];
            let r = Rect::from_min_size(pos2(o.x + x, y + 1.0), vec2(56.0, ROW - 2.0));
            let fill = color(&lut, v, score_range);
            painter.rect_filled(r, 0.0, fill);
            let t = if v.is_nan() { "masked".to_string() } else { crate::render::format_cell_value(v) };
            painter.text(r.center(), egui::Align2::CENTER_CENTER, t, FontId::monospace(10.0), contrast_text(fill));
        }
        let w = b.weights[j];
        if w.is_nan() {
            painter.text(pos2(o.x + x_weight, y + ROW / 2.0), egui::Align2::LEFT_CENTER, "masked", font.clone(), weak);
        } else {
            let bar = Rect::from_min_size(pos2(o.x + x_weight, y + 2.0), vec2(90.0 * w.clamp(0.0, 1.0), ROW - 4.0));
            painter.rect_filled(bar, 0.0, color(&weight_lut, w, (0.0, 1.0)));
            painter.rect_stroke(
                Rect::from_min_size(pos2(o.x + x_weight, y + 2.0), vec2(90.0, ROW - 4.0)),
                0.0,
                Stroke::new(0.5, weak),
                egui::StrokeKind::Inside,
            );
            painter.text(
                pos2(o.x + x_weight + 96.0, y + ROW / 2.0),
                egui::Align2::LEFT_CENTER,
                format!("{w:.3}"),
                FontId::monospace(11.0),
                text,
            );
        }
    }
    // Hover: the exact value under the pointer.
    if let Some(p) = response.hover_pos() {
        let rel = p - o;
        let row = ((rel.y - header) / ROW).floor();
        let dim = |x0: f32| ((rel.x - x0) / cell).floor();
        let info = if rel.y >= ROW && rel.y < header && rel.x >= x_keys && dim(x_keys) < d as f32 {
            let i = dim(x_keys) as usize;
            Some(format!("q[{i}] = {:.6} (query “{}”)", b.query[i], labels[query]))
        } else if row >= 0.0 && (row as usize) < n {
            let j = row as usize;
            if rel.x >= x_keys && dim(x_keys) < d as f32 {
                let i = dim(x_keys) as usize;
                Some(format!("k_{j}[{i}] = {:.6} (key “{}”)\nq[{i}] = {:.6}", b.keys[j * d + i], labels[j], b.query[i]))
            } else if rel.x >= x_prod && dim(x_prod) < d as f32 {
                let i = dim(x_prod) as usize;
                let dot: f32 = b.products[j * d..(j + 1) * d].iter().sum();
                Some(format!(
                    "q[{i}] · k_{j}[{i}] = {:.6}\nsum over dimensions: q·k_{j} = {dot:.6}",
                    b.products[j * d + i]
                ))
            } else if rel.x >= x_terms0 {
                let dot: f32 = b.products[j * d..(j + 1) * d].iter().sum();
                let mut info = format!("key “{}” (#{j})\nq·k = {dot:.6}\n", labels[j]);
                for (name, values) in &b.terms {
                    let _ = writeln!(info, "  {name} = {:.6}", values[j]);
                }
                let sum = if b.terms.is_empty() { "scaled score" } else { "score (the sum)" };
                let _ = write!(info, "{sum} = {:.6}\nsoftmax weight = {:.6}", b.scores[j], b.weights[j]);
                Some(info)
            } else {
                None
            }
        } else {
            None
        };
        if let Some(info) = info {
            response.on_hover_text_at_pointer(info);
        }
    }
    picked
}
