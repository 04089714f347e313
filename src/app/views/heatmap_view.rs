//! The heatmap view: one head (or the mean of the selected heads) with labelled axes, a colour
//! bar, exact values on hover, numbers in the cells when they fit, zoom (Ctrl+scroll) and pan.

use egui::RichText;

use crate::analysis::Run;
use crate::analysis::select::{mask_hidden, submatrix_rect, visible_tokens};
use crate::app::command::Commands;
use crate::app::data::ViewData;
use crate::app::intervene::knockout;
use crate::app::widgets::matrix::{FitCache, MatrixSpec, MatrixTexture, fit_cell, matrix_ui, zoom_step, zoom_ui};
use crate::render::Colormap;

/// What the texture depends on.
#[derive(Debug, Clone, PartialEq)]
struct HeatKey {
    run_id: u64,
    layer_idx: usize,
    heads: Vec<usize>,
    hide_special: bool,
    colormap: Colormap,
}

/// The heatmap view's state: the shown matrix and its texture.
#[derive(Default)]
pub struct HeatmapView {
    key: Option<HeatKey>,
    texture: MatrixTexture,
    /// Shown values, rows × columns.
    pub values: Vec<f32>,
    /// Token positions of the rows (queries).
    pub keep: Vec<usize>,
    /// Token positions of the columns (keys: the source tokens for cross-attention).
    pub keep_keys: Vec<usize>,
    /// How many times the texture was built.
    pub builds: usize,
    /// The cell whose context menu is open (row, column of the shown matrix).
    menu_cell: Option<(usize, usize)>,
    /// Why the last Alt+click could not knock its cell out.
    pub knockout_error: Option<String>,
    /// The cell side that fits the room.
    fit: FitCache,
}

impl HeatmapView {
    /// The cell side the heatmap was last fitted at (its *Fit* zoom).
    pub fn fitted_cell(&self) -> f32 {
        self.fit.cell
    }
}

impl HeatmapView {
    fn update(&mut self, key: HeatKey, run: &Run) {
        if self.key.as_ref() == Some(&key) {
            return;
        }
        let a = &run.attention;
        let mean = a.mean_of_heads(key.layer_idx, &key.heads);
        self.keep = visible_tokens(&run.tokens, key.hide_special);
        self.keep_keys = visible_tokens(run.keys(), key.hide_special);
        self.values = submatrix_rect(&mean, a.keys(), &self.keep, &self.keep_keys, key.hide_special);
        if run.has_mask() {
            mask_hidden(&mut self.values, &self.keep, run.causal, run.window_of(key.layer_idx));
        }
        self.key = Some(key);
        self.builds += 1;
    }

    /// The figure on screen as a display list: the exported heatmap's layout at the view's cell
    /// size, with where its cells are (figure pixels = points from the widget's top-left).
    pub fn figure(&self) -> Option<(&crate::render::Drawing, crate::render::CellGrid)> {
        Some((self.texture.drawing()?, self.texture.grid()?))
    }

    /// How many times the figure was laid out.
    pub fn figure_layouts(&self) -> usize {
        self.texture.layouts
    }

    /// The value at (query row, key column) of the shown matrix.
    pub fn value(&self, row: usize, col: usize) -> f32 {
        self.values[row * self.keep_keys.len() + col]
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

impl HeatmapView {
    /// Draws the heatmap of the current layer and heads.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        heatmap_view_ui(ui, &mut settings, data, self);
        commands.set_changed(data.settings, &settings);
    }
}

/// Draws the heatmap of the current layer and heads.
fn heatmap_view_ui(
    ui: &mut egui::Ui,
    settings: &mut crate::app::state::Settings,
    data: &ViewData<'_>,
    cache: &mut HeatmapView,
) {
    let Some(run) = data.run else { return };
    let heads = settings.selected_heads();
    let knockable = knockout::knockable(data);
    let layer = settings.layer_idx;
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new(format!("Layer {} · {}", settings.layer_idx, heads_title(&heads))).strong());
        ui.separator();
        zoom_ui(ui, &mut settings.zoom.heatmap, cache.fit.cell);
        ui.checkbox(&mut settings.hide_special, "Hide special tokens");
        let axes = if run.key_tokens.is_some() {
            "rows: target tokens · columns: source tokens"
        } else {
            "rows attend to columns"
        };
        ui.label(RichText::new(format!("{axes} · Ctrl+scroll zooms · drag pans")).small().weak());
        if knockable.is_ok() {
            ui.label(RichText::new("· right-click or Alt+click a cell to knock it out").small().weak());
        }
        if run.sinks.is_some() {
            ui.label(
                RichText::new("· sink: the share of each row that goes to the head's attention sink, no token")
                    .small()
                    .weak(),
            );
        }
    });
    if let Some(e) = &cache.knockout_error {
        ui.label(RichText::new(e).small().color(ui.visuals().error_fg_color));
    }
    if heads.is_empty() {
        ui.label("No head selected: pick heads in the side panel.");
        return;
    }
    let key = HeatKey {
        run_id: data.view_id,
        layer_idx: settings.layer_idx,
        heads,
        hide_special: settings.hide_special,
        colormap: settings.colormap,
    };
    cache.update(key, run);
    let (m, cols) = (cache.keep.len(), cache.keep_keys.len());
    if m == 0 || cols == 0 {
        ui.label("Nothing to show: every token is a special token and they are hidden.");
        return;
    }
    let labels: Vec<String> = cache.keep.iter().map(|&p| run.label(p)).collect();
    let key_labels: Vec<String> = cache.keep_keys.iter().map(|&p| run.key_label(p)).collect();
    let (keep, keep_keys) = (&cache.keep, &cache.keep_keys);
    let (row_name, col_name) = if run.key_tokens.is_some() { ("target", "source") } else { ("query", "key") };
    let iv = settings.interventions.clone();
    let hover = |q: usize, k: usize, v: f32| {
        let weight = if v.is_nan() {
            "masked: the causal mask hides keys after the query".to_string()
        } else if knockout::is_knocked_out(&iv, layer, keep[q], keep_keys[k]) {
            format!("knocked out: weight {v:.6} by intervention (right-click to restore)")
        } else {
            format!("weight {v:.6}")
        };
        format!(
            "{row_name} “{}” (#{})\n{col_name} “{}” (#{})\n{weight}",
            labels[q], keep[q], key_labels[k], keep_keys[k]
        )
    };
    // A model with attention sinks: each shown row's share of the heads' sinks, a column apart.
    let sink: Option<Vec<f32>> = run.sinks.as_ref().zip(cache.key.as_ref()).map(|(s, k)| {
        let mean = s.mean_of_heads(k.layer_idx, &k.heads);
        keep.iter().map(|&q| mean[q]).collect()
    });
    let spec = MatrixSpec {
        id: "heatmap",
        values: &cache.values,
        rows: m,
        cols,
        row_labels: &labels,
        col_labels: &key_labels,
        axes: crate::export::heatmap_axes(run),
        range: (0.0, 1.0),
        colormap: settings.colormap,
        cell: 0.0,
        hover: &hover,
        clickable: None,
        sink: sink.as_deref(),
    };
    let texture_key = crate::app::widgets::matrix::key_of(
        &cache.key.as_ref().map(|k| (k.run_id, k.layer_idx, &k.heads, k.hide_special)),
    );
    // Fit: the whole figure in the room (the default, until zoomed).
    let room = ui.available_size() - egui::vec2(2.0, 2.0);
    let fitted = cache
        .fit
        .get(texture_key ^ crate::app::widgets::matrix::key_of(&settings.colormap), room, || fit_cell(ui, &spec, room));
    let spec = MatrixSpec { cell: settings.zoom.heatmap.unwrap_or(fitted), ..spec };
    let mut zoomed = None;
    let (keep, keep_keys) = (keep.clone(), keep_keys.clone());
    egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
        let shown = matrix_ui(ui, &mut cache.texture, texture_key, &spec);
        if shown.response.hovered() {
            zoomed = zoom_step(ui, spec.cell);
        }
        let Ok(layers) = knockable else { return };
        // Knocked-out entries are crossed out: zero by intervention, not by what the model computed.
        if let Some(cells) = shown.cells {
            // Not over the labels kept in view at the left and bottom edges.
            let rect = shown.response.rect;
            let mut clip = ui.clip_rect().intersect(rect);
            if shown.sticky.0 {
                clip.min.x += cells.left - rect.left();
            }
            if shown.sticky.1 {
                clip.max.y -= rect.bottom() - (cells.top + cells.rows as f32 * cells.cell_h);
            }
            let painter = ui.painter_at(clip);
            let color = ui.visuals().error_fg_color;
            for e in settings.interventions.knockout.iter().filter(|e| e.at(layer)) {
                let (Some(r), Some(c)) =
                    (keep.iter().position(|&p| p == e.query), keep_keys.iter().position(|&p| p == e.key))
                else {
                    continue;
                };
                let (x, y) = cells.cell_min(r, c);
                let rect = egui::Rect::from_min_size(egui::pos2(x, y), egui::vec2(cells.cell_w, cells.cell_h));
                knockout::mark_cell(&painter, rect, color);
            }
        }
        // Alt held (or carried by the click itself: a press and release within one frame).
        let alt = ui.input(|i| {
            i.modifiers.alt
                || i.events.iter().any(|e| matches!(e, egui::Event::PointerButton { modifiers, .. } if modifiers.alt))
        });
        if shown.response.clicked()
            && alt
            && let Some((r, c)) = shown.hovered
        {
            cache.knockout_error = knockout::toggle(settings, run, layers, layer, (keep[r], keep_keys[c])).err();
        }
        if shown.response.secondary_clicked() {
            cache.menu_cell = shown.hovered;
        }
        shown.response.context_menu(|ui| {
            let Some((r, c)) = cache.menu_cell else {
                ui.close();
                return;
            };
            let (q, k) = (keep[r], keep_keys[c]);
            knockout::menu_ui(
                ui,
                &mut settings.interventions,
                run,
                (layers, layer),
                (q, Some(k)),
                (&run.label(q), &run.key_label(k)),
            );
        });
    });
    if zoomed.is_some() {
        settings.zoom.heatmap = zoomed;
    }
}
