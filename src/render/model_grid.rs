//! Every layer and head at once: a grid of small attention heatmaps.

use image::RgbaImage;

use super::canvas::MAX_SIDE;
use super::colorbar::{Colorbar, end_ticks};
use super::colormap::{Colormap, cell_rgb};
use super::draw::{Anchor, Cells, Drawing, Item};
use super::heatmap::{pool, thinned};
use super::text::{line_height, text_width};
use super::{AXIS_PX, LABEL_PX, NOTE_PX, TITLE_PX, Theme, clamp_scale};
use crate::analysis::Attention;

/// What to draw as a model grid.
#[derive(Debug, Clone, Copy)]
pub struct ModelGridSpec<'a> {
    /// Attention of every layer and head.
    pub attention: &'a Attention,
    /// Colormap of the thumbnails.
    pub colormap: Colormap,
    /// Light or dark figure.
    pub theme: Theme,
    /// Size multiplier, 1..=4.
    pub scale: f32,
    /// Title above the grid.
    pub title: &'a str,
    /// Draw keys after the query as masked (a causal model).
    pub causal: bool,
    /// Per layer, draw keys this many positions or more before the query as masked (its sliding
    /// window); a layer past the list's end has none.
    pub windows: &'a [Option<usize>],
}

/// Where everything of the model grid goes, in image pixels.
#[derive(Debug, Clone)]
pub(crate) struct GridLayout {
    pub scale: f32,
    pub width: f32,
    pub height: f32,
    /// Side of one thumbnail.
    pub thumb: f32,
    /// Pixels per token in a thumbnail (whole number), or 1 when tokens are pooled.
    pub cell_px: usize,
    /// Cells per thumbnail side: tokens, or fewer when pooled.
    pub cells: usize,
    pub gap: f32,
    pub grid_x: f32,
    pub grid_y: f32,
    pub label_px: f32,
    pub layer_step: usize,
    pub head_step: usize,
    pub colorbar: Colorbar,
}

impl GridLayout {
    /// Top-left corner of the thumbnail of (`layer_idx`, `head_idx`).
    pub fn thumb_origin(&self, layer_idx: usize, head_idx: usize) -> (f32, f32) {
        let pitch = self.thumb + self.gap;
        (self.grid_x + head_idx as f32 * pitch, self.grid_y + layer_idx as f32 * pitch)
    }
}

pub(crate) fn grid_layout(spec: &ModelGridSpec) -> GridLayout {
    let s = clamp_scale(spec.scale);
    let att = spec.attention;
    // Cross-attention (targets × sources) is drawn in a square thumbnail of its longer side.
    let (layers, heads, n) = (att.layers(), att.heads(), att.seq_len().max(att.keys()));
    let margin = 16.0 * s;
    let gap = (6.0 * s).round();
    let title_px = TITLE_PX * s;
    let axis_px = AXIS_PX * s;
    let label_px = LABEL_PX * s;

    // Thumbnail: max(48, min(n, 128)) × scale, shrunk if the grid would pass the image cap.
    let wanted = (48.0f32.max(n.min(128) as f32) * s).round();
    let fit = |count: usize| (MAX_SIDE as f32 - 220.0 * s) / count.max(1) as f32 - gap;
    let max_thumb = fit(layers).min(fit(heads)).floor().max(4.0);
    let target = wanted.min(max_thumb);
    let (cells, cell_px) = if n == 0 {
        (0, 1)
    } else if (n as f32) <= target {
        // Whole pixels per token: crisp cells, the thumbnail a little larger than asked.
        let per = (target / n as f32).ceil() as usize;
        let per = if (n * per) as f32 > max_thumb { per - 1 } else { per }.max(1);
        (n, per)
    } else {
        (target as usize, 1)
    };
    let thumb = if n == 0 { target } else { (cells * cell_px) as f32 };

    let layer_labels = (0..layers).map(|l| format!("L{l}"));
    let layer_label_w = layer_labels.map(|l| text_width(&l, label_px)).fold(0.0, f32::max);
    let layer_step = thinned(layers, thumb + gap, line_height(label_px) * 1.1);
    let head_label_w = text_width(&format!("H{}", heads.saturating_sub(1)), label_px);
    let head_step = thinned(heads, thumb + gap, head_label_w + 6.0 * s);

    let title_h = if spec.title.is_empty() { 0.0 } else { line_height(title_px) + 6.0 * s };
    let note_h = line_height(NOTE_PX * s) + 8.0 * s;
    let axis_h = line_height(axis_px) + 4.0 * s;
    let grid_y = (margin + title_h + note_h + axis_h + line_height(label_px) + 6.0 * s).round();
    let grid_x = (margin + axis_h + 2.0 * s + layer_label_w + 6.0 * s).round();
    let grid_w = heads as f32 * (thumb + gap) - gap;
    let grid_h = layers as f32 * (thumb + gap) - gap;
    let colorbar = Colorbar::new(end_ticks("0", "max"), s);
    let bar_h = (grid_h.max(0.0)).clamp(60.0 * s, 200.0 * s);
    let width = (grid_x + grid_w.max(0.0) + 16.0 * s + colorbar.width() + margin)
        .max(text_width(spec.title, title_px) + 2.0 * margin)
        .max(text_width(NOTE, NOTE_PX * s) + 2.0 * margin);
    let height = (grid_y + grid_h.max(bar_h) + margin).max(grid_y + 40.0 * s);
    GridLayout {
        scale: s,
        width,
        height,
        thumb,
        cell_px,
        cells,
        gap,
        grid_x,
        grid_y,
        label_px,
        layer_step,
        head_step,
        colorbar,
    }
}

/// The explanation printed under the title.
const NOTE: &str = "each head scaled to its own maximum; rows = queries, columns = keys";

/// Draws every layer (rows) × head (columns) as a small heatmap, each scaled to its own maximum.
pub fn model_grid(spec: &ModelGridSpec) -> RgbaImage {
    model_grid_drawing(spec).to_rgba()
}

/// The model grid as a display list.
pub fn model_grid_drawing(spec: &ModelGridSpec) -> Drawing {
    let lay = grid_layout(spec);
    let s = lay.scale;
    let theme = spec.theme;
    let (fg, muted) = (theme.foreground(), theme.muted());
    let att = spec.attention;
    let (layers, heads, seq_len) = (att.layers(), att.heads(), att.seq_len());
    let mut d = Drawing::new(lay.width, lay.height, theme.background(), spec.title);
    let margin = 16.0 * s;
    let title_px = TITLE_PX * s;
    let axis_px = AXIS_PX * s;

    let mut y = margin;
    if !spec.title.is_empty() {
        d.text(spec.title, lay.width / 2.0, y + line_height(title_px) / 2.0, title_px, Anchor::Middle, fg);
        y += line_height(title_px) + 6.0 * s;
    }
    d.text(NOTE, lay.width / 2.0, y + line_height(NOTE_PX * s) / 2.0, NOTE_PX * s, Anchor::Middle, muted);
    if layers == 0 || heads == 0 {
        return d;
    }

    let grid_w = heads as f32 * (lay.thumb + lay.gap) - lay.gap;
    let grid_h = layers as f32 * (lay.thumb + lay.gap) - lay.gap;
    // Axis titles and labels.
    let head_label_y = lay.grid_y - 4.0 * s - line_height(lay.label_px) / 2.0;
    let axis_y = head_label_y - line_height(lay.label_px) / 2.0 - 4.0 * s - line_height(axis_px) / 2.0;
    d.text("head", lay.grid_x + grid_w / 2.0, axis_y, axis_px, Anchor::Middle, fg);
    for h in (0..heads).step_by(lay.head_step) {
        let (x, _) = lay.thumb_origin(0, h);
        d.text(&format!("H{h}"), x + lay.thumb / 2.0, head_label_y, lay.label_px, Anchor::Middle, fg);
    }
    for l in (0..layers).step_by(lay.layer_step) {
        let (_, y) = lay.thumb_origin(l, 0);
        d.text(&format!("L{l}"), lay.grid_x - 6.0 * s, y + lay.thumb / 2.0, lay.label_px, Anchor::End, fg);
    }
    let layer_axis_h = text_width("layer", axis_px);
    let layer_axis_y = (lay.grid_y + grid_h / 2.0 - layer_axis_h / 2.0).max(lay.grid_y);
    let axis_mid = margin + line_height(axis_px) / 2.0;
    d.text_up("layer", axis_mid, layer_axis_y + layer_axis_h, axis_px, Anchor::Start, fg);

    // Thumbnails.
    let lut = spec.colormap.lut();
    for layer_idx in 0..layers {
        for head_idx in 0..heads {
            let (left, top) = lay.thumb_origin(layer_idx, head_idx);
            if seq_len > 0 && att.keys() > 0 {
                let head = att.head(layer_idx, head_idx);
                let window = spec.windows.get(layer_idx).copied().flatten();
                let cells = if spec.causal || window.is_some() {
                    let mut masked = head.to_vec();
                    let all: Vec<usize> = (0..seq_len).collect();
                    crate::analysis::select::mask_hidden(&mut masked, &all, spec.causal, window);
                    pool(&masked, seq_len, seq_len, lay.cells, lay.cells)
                } else {
                    pool(head, seq_len, att.keys(), lay.cells, lay.cells)
                };
                let max = cells.iter().copied().filter(|v| v.is_finite()).fold(0.0, f32::max);
                let hi = if max > 0.0 { max } else { 1.0 };
                let px = lay.cell_px as f32;
                let rgba = cells.iter().flat_map(|&v| {
                    let [red, green, blue] = cell_rgb(&lut, v, 0.0, hi);
                    [red, green, blue, 255]
                });
                let (rows, cols) = (lay.cells, lay.cells);
                let rgba = rgba.collect();
                d.items.push(Item::Cells(Cells { x: left, y: top, cell_w: px, cell_h: px, cols, rows, rgba }));
            }
            d.frame(left - 1.0, top - 1.0, lay.thumb + 2.0, lay.thumb + 2.0, muted);
        }
    }
    let bar_h = grid_h.clamp(60.0 * s, 200.0 * s);
    lay.colorbar.draw(&mut d, lay.grid_x + grid_w + 16.0 * s, lay.grid_y, bar_h, spec.colormap, theme);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(layers: usize, heads: usize, n: usize) -> Attention {
        let v = if n == 0 { 0.0 } else { 1.0 / n as f32 };
        Attention::new(layers, heads, n, vec![v; layers * heads * n * n]).unwrap()
    }

    fn spec(att: &Attention) -> ModelGridSpec<'_> {
        ModelGridSpec {
            attention: att,
            colormap: Colormap::Viridis,
            theme: Theme::Light,
            scale: 1.0,
            title: "Model",
            causal: false,
            windows: &[],
        }
    }

    #[test]
    fn size_follows_layers_heads_and_scale() {
        let base = model_grid(&spec(&uniform(2, 8, 8)));
        let more_layers = model_grid(&spec(&uniform(4, 8, 8)));
        let more_heads = model_grid(&spec(&uniform(2, 11, 8)));
        let lay = grid_layout(&spec(&uniform(2, 8, 8)));
        let pitch = (lay.thumb + lay.gap) as u32;
        assert_eq!(more_layers.height() - base.height(), 2 * pitch);
        assert_eq!(more_heads.width() - base.width(), 3 * pitch);
        assert_eq!(more_layers.width(), base.width());
        let scaled = model_grid(&ModelGridSpec { scale: 2.0, ..spec(&uniform(2, 8, 8)) });
        assert!(scaled.width() > base.width() * 3 / 2);
    }

    #[test]
    fn thumbnails_are_at_least_one_pixel_per_token_up_to_128() {
        for n in [1, 5, 48, 100, 128, 300] {
            let lay = grid_layout(&spec(&uniform(1, 1, n)));
            assert!(lay.thumb >= 48.0, "n={n}");
            assert!(lay.thumb >= n.min(128) as f32, "n={n}");
            assert!(lay.thumb <= 128.0 + n as f32, "n={n}");
        }
    }

    #[test]
    fn each_thumbnail_reaches_the_top_of_the_map() {
        // Head 0 puts everything on key 0, head 1 is uniform: both show the top colour somewhere.
        let n = 4;
        let mut data = vec![0.25f32; 2 * n * n];
        for q in 0..n {
            data[q * n..(q + 1) * n].copy_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        }
        let att = Attention::new(1, 2, n, data).unwrap();
        let sp = spec(&att);
        let img = model_grid(&sp);
        let lay = grid_layout(&sp);
        let top = Colormap::Viridis.lut()[255];
        for h in 0..2 {
            let (x, y) = lay.thumb_origin(0, h);
            let c = img.get_pixel((x + 1.0) as u32, (y + 1.0) as u32).0;
            assert_eq!(c[..3], top, "head {h}");
        }
    }

    #[test]
    fn huge_and_empty_models_do_not_panic() {
        model_grid(&spec(&uniform(0, 0, 0)));
        model_grid(&spec(&uniform(2, 2, 0)));
        model_grid(&spec(&uniform(1, 1, 1)));
        let big = model_grid(&ModelGridSpec { scale: 4.0, ..spec(&uniform(48, 40, 2)) });
        assert!(big.width() <= MAX_SIDE && big.height() <= MAX_SIDE);
        let nan = Attention::new(1, 1, 2, vec![f32::NAN; 4]).unwrap();
        model_grid(&spec(&nan));
    }
}
