//! The positional-encoding panel: the sinusoidal encoding (positions × dimensions) and its dot
//! products `pe_i · pe_j` side by side, line plots of a few dimensions and of one row of the dot
//! products, and — for a model with learned absolute positions — the dot products and cosine
//! similarities of its learned table next to them.

use egui::{RichText, Sense, TextEdit, TextureHandle, TextureOptions, Vec2, vec2};
use egui_plot::{Legend, Line, Plot, PlotPoints};

use crate::analysis::pe::{self, PeLayout, PeParams, PositionalEncoding, learned_dot_range};
use crate::analysis::select::submatrix;
use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::state::{PeFigure, Settings};
use crate::app::widgets::{round_label, round_marks};
use crate::app::worker::PositionSimilarity;
use crate::render::{Colormap, cells_rgba};

/// A matrix on screen: its values and texture.
struct Shown {
    values: Vec<f32>,
    rows: usize,
    cols: usize,
    range: (f32, f32),
    texture: TextureHandle,
}

impl Shown {
    fn new(
        ctx: &egui::Context,
        name: &str,
        values: Vec<f32>,
        (rows, cols): (usize, usize),
        range: (f32, f32),
        colormap: Colormap,
    ) -> Self {
        let rgba = cells_rgba(&values, range.0, range.1, colormap);
        let image = egui::ColorImage::from_rgba_unmultiplied([cols, rows], &rgba);
        let texture = ctx.load_texture(name, image, TextureOptions::NEAREST);
        Self { values, rows, cols, range, texture }
    }
}

/// The colour range of `values`: symmetric around zero when `diverging`, else min to max.
fn value_range(values: &[f32], diverging: bool) -> (f32, f32) {
    let (lo, hi) = values.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if diverging {
        let m = lo.abs().max(hi.abs()).max(f32::MIN_POSITIVE);
        (-m, m)
    } else if hi > lo {
        (lo, hi)
    } else {
        (lo, lo + 1.0)
    }
}

/// What the sinusoidal textures depend on.
type SinKey = (PeParams, Colormap);
/// What the learned textures depend on: model folder, positions, colour map.
type LearnedKey = (std::path::PathBuf, usize, Colormap);

/// Encodings, textures and the typed parameters of the panel.
#[derive(Default)]
pub struct PeView {
    sin_key: Option<SinKey>,
    /// The sinusoidal encoding shown (None while the parameters are invalid).
    pub encoding: Option<PositionalEncoding>,
    enc_shown: Option<Shown>,
    dot_shown: Option<Shown>,
    learned_key: Option<LearnedKey>,
    learned_dot: Option<Shown>,
    learned_cos: Option<Shown>,
    /// The typed `d_model`, positions and base.
    inputs: Option<[String; 3]>,
    /// Why the typed parameters are invalid.
    pub error: Option<String>,
    /// The last hovered cell: (figure, row, column, value).
    pub hovered: Option<(PeFigure, usize, usize, f32)>,
    /// How many times the sinusoidal textures were built.
    pub builds: usize,
    /// A figure whose "Export PNG…" button was clicked this frame.
    export_request: Option<PeFigure>,
}

impl PeView {
    fn update_sin(&mut self, ctx: &egui::Context, params: PeParams, colormap: Colormap) {
        if self.sin_key == Some((params, colormap)) {
            return;
        }
        self.sin_key = Some((params, colormap));
        match pe::sinusoidal(params) {
            Ok(enc) => {
                let (n, d) = (params.positions, params.d_model);
                let (enc_range, dot_range) = (value_range(&enc.encoding, true), value_range(&enc.dot, false));
                let encoding = enc.encoding.clone();
                self.enc_shown = Some(Shown::new(ctx, "pe-encoding", encoding, (n, d), enc_range, Colormap::RdBu));
                self.dot_shown = Some(Shown::new(ctx, "pe-dot", enc.dot.clone(), (n, n), dot_range, colormap));
                self.encoding = Some(enc);
                self.error = None;
                self.builds += 1;
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    fn update_learned(&mut self, ctx: &egui::Context, key: LearnedKey, sim: &PositionSimilarity) {
        if self.learned_key.as_ref() == Some(&key) {
            return;
        }
        let n = key.1.min(sim.positions);
        let first: Vec<usize> = (0..n).collect();
        let dot = submatrix(&sim.dot, sim.positions, &first, false);
        let range = learned_dot_range(&dot).unwrap_or_else(|| value_range(&dot, false));
        self.learned_dot = Some(Shown::new(ctx, "learned-dot", dot, (n, n), range, key.2));
        let cos = submatrix(&sim.cosine, sim.positions, &first, false);
        self.learned_cos = Some(Shown::new(ctx, "learned-cos", cos, (n, n), (-1.0, 1.0), Colormap::RdBu));
        self.learned_key = Some(key);
    }
}

/// A small numeric text box; returns the parsed value when it is committed (Enter or focus lost,
/// not every keystroke: typing 127 never draws 12) and parses.
fn number_box<T: std::str::FromStr>(ui: &mut egui::Ui, label: &str, text: &mut String, hint: &str) -> Option<T> {
    let label = ui.label(label).on_hover_text(hint);
    let response = ui.add(TextEdit::singleline(text).desired_width(64.0)).labelled_by(label.id);
    if response.lost_focus() { text.trim().parse().ok() } else { None }
}

impl PeView {
    /// Draws the panel.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        pe_view_ui(ui, &mut settings, data, self, commands);
        commands.set_changed(data.settings, &settings);
    }
}

/// Draws the panel.
fn pe_view_ui(
    ui: &mut egui::Ui,
    settings: &mut Settings,
    data: &ViewData<'_>,
    view: &mut PeView,
    commands: &mut Commands,
) {
    let cache = &mut *view;
    let p = &mut settings.pe;
    let inputs =
        cache.inputs.get_or_insert_with(|| [p.d_model.to_string(), p.positions.to_string(), p.base.to_string()]);
    let mut typed_error = None;
    ui.horizontal_wrapped(|ui| {
        let [d_text, n_text, base_text] = inputs;
        if let Some(v) = number_box(ui, "d_model", d_text, "Width of the encoding (an even number)") {
            p.d_model = v;
        }
        if let Some(v) = number_box(ui, "positions", n_text, "Number of positions (rows)") {
            p.positions = v;
        }
        if let Some(v) =
            number_box(ui, "base", base_text, "Wavelength base: 10000 in the paper, some courses write 1000")
        {
            p.base = v;
        }
        for b in [10_000.0, 1_000.0] {
            if ui.small_button(format!("{b}")).clicked() {
                p.base = b;
                *base_text = b.to_string();
            }
        }
        ui.separator();
        ui.selectable_value(&mut p.layout, PeLayout::Interleaved, "interleaved")
            .on_hover_text("The paper: PE[p, 2i] = sin(p / base^(2i/D)), PE[p, 2i+1] = cos(…)");
        ui.selectable_value(&mut p.layout, PeLayout::Concatenated, "concatenated")
            .on_hover_text("tensor2tensor / the Illustrated Transformer: all sines, then all cosines");
        // Each box as its own type: "12.5" is a number but not a width, and would be ignored.
        for (text, what) in [(&*d_text, "d_model"), (&*n_text, "positions")] {
            if text.trim().parse::<usize>().is_err() {
                typed_error = Some(format!("{what}: {:?} is not a whole number", text.trim()));
            }
        }
        if base_text.trim().parse::<f64>().is_err() {
            typed_error = Some(format!("base: {:?} is not a number", base_text.trim()));
        }
    });
    if p.positions > 2048 {
        typed_error = Some(format!("positions: at most 2048 here, got {}", p.positions));
    }
    if p.d_model > 4096 {
        typed_error = Some(format!("d_model: at most 4096 here, got {}", p.d_model));
    }
    if typed_error.is_none() {
        cache.update_sin(ui.ctx(), *p, settings.colormap);
    }
    if let Some(err) = typed_error.as_ref().or(cache.error.as_ref()) {
        ui.colored_label(ui.visuals().error_fg_color, format!("⚠ {err}"));
        if cache.encoding.is_some() {
            ui.label(RichText::new("Showing the last valid encoding.").small().weak());
        }
    }
    let learned = data.model.and_then(|m| m.positions.clone().map(|sim| (m.dir.clone(), m.name.clone(), sim)));
    let Some(enc) = cache.encoding.clone() else { return };
    let params = enc.params;
    egui::ScrollArea::vertical().auto_shrink([false, false]).show(ui, |ui| {
        let side = ((ui.available_width() - 40.0) / 2.0).clamp(160.0, 420.0);
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                let title = format!("Encoding PE ({} positions × {} dimensions, {})", params.positions, params.d_model, params.layout.name());
                figure_ui(ui, view, PeFigure::Encoding, &title, vec2(side, side), ("position", "dimension"));
            });
            ui.vertical(|ui| {
                let title = format!("Dot products PE_i · PE_j ({} × {})", params.positions, params.positions);
                figure_ui(ui, view, PeFigure::Dot, &title, vec2(side, side), ("position i", "position j"));
            });
        });
        ui.add_space(8.0);
        plots_ui(ui, settings, &enc, side);
        ui.add_space(8.0);
        match learned {
            Some((dir, name, sim)) => {
                ui.label(RichText::new(format!("Learned position embeddings of {name}")).strong());
                ui.label(
                    RichText::new(format!(
                        "The first {} of its {} learned positions, to compare with the fixed encoding above. Dot-product colours stop at the 99th percentile; hover for exact values.",
                        params.positions.min(sim.positions),
                        sim.table_positions
                    ))
                    .small()
                    .weak(),
                );
                view.update_learned(ui.ctx(), (dir, params.positions, settings.colormap), &sim);
                ui.horizontal_top(|ui| {
                    ui.vertical(|ui| {
                        figure_ui(ui, view, PeFigure::LearnedDot, "Dot products (learned)", vec2(side, side), ("position i", "position j"));
                    });
                    ui.vertical(|ui| {
                        figure_ui(ui, view, PeFigure::LearnedCosine, "Cosine similarity (learned)", vec2(side, side), ("position i", "position j"));
                    });
                });
            }
            None => {
                ui.label(RichText::new("The loaded model has no learned position table to compare with.").weak());
            }
        }
    });
    if let Some(open) = view.export_request.take() {
        settings.pe_figure = open;
        commands.push(Command::OpenExport);
    }
}

impl PeView {
    fn shown(&self, which: PeFigure) -> Option<&Shown> {
        match which {
            PeFigure::Encoding => self.enc_shown.as_ref(),
            PeFigure::Dot => self.dot_shown.as_ref(),
            PeFigure::LearnedDot => self.learned_dot.as_ref(),
            PeFigure::LearnedCosine => self.learned_cos.as_ref(),
        }
    }
}

/// One heatmap with its title, range, exact value on hover and an export button.
fn figure_ui(ui: &mut egui::Ui, cache: &mut PeView, which: PeFigure, title: &str, size: Vec2, axes: (&str, &str)) {
    if cache.shown(which).is_none() {
        return;
    }
    ui.horizontal(|ui| {
        ui.label(RichText::new(title).strong());
        if ui.small_button("Export PNG…").on_hover_text("Save this heatmap as a PNG image").clicked() {
            cache.export_request = Some(which);
        }
    });
    let Some(shown) = cache.shown(which) else { return };
    ui.label(
        RichText::new(format!(
            "rows: {} · columns: {} · colours {:.3} … {:.3}",
            axes.0, axes.1, shown.range.0, shown.range.1
        ))
        .small()
        .weak(),
    );
    let (rect, response) = ui.allocate_exact_size(size, Sense::hover());
    ui.painter().image(
        shown.texture.id(),
        rect,
        egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
        egui::Color32::WHITE,
    );
    if let Some(pos) = response.hover_pos() {
        let col = (((pos.x - rect.left()) / rect.width()) * shown.cols as f32).floor() as usize;
        let row = (((pos.y - rect.top()) / rect.height()) * shown.rows as f32).floor() as usize;
        if row < shown.rows && col < shown.cols {
            let value = shown.values[row * shown.cols + col];
            let text = format!("{} {row}, {} {col}: {value:.6}", axes.0, axes.1);
            response.on_hover_text_at_pointer(text);
            cache.hovered = Some((which, row, col, value));
        }
    }
}

/// Line plots: a few dimensions across positions, and one row of the dot products.
fn plots_ui(ui: &mut egui::Ui, settings: &mut Settings, enc: &PositionalEncoding, side: f32) {
    let PeParams { d_model, positions, .. } = enc.params;
    ui.horizontal_top(|ui| {
        ui.vertical(|ui| {
            ui.set_width(side);
            ui.label(RichText::new("Dimensions across positions").strong());
            ui.horizontal(|ui| {
                ui.label("dimensions:");
                for dims in [
                    [0, 1, 2, 3],
                    [0, 1, d_model / 4, d_model / 2],
                    [0, d_model / 4, d_model / 2, d_model.saturating_sub(2)],
                ] {
                    let dims: Vec<usize> = dims
                        .iter()
                        .copied()
                        .filter(|&d| d < d_model)
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    let text = dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                    if ui.selectable_label(settings.pe_plot_dims == dims, text).clicked() {
                        settings.pe_plot_dims = dims;
                    }
                }
            });
            Plot::new("pe-dims")
                .height(200.0)
                .legend(Legend::default())
                .x_axis_label("position")
                .x_grid_spacer(round_marks(48.0))
                .y_grid_spacer(round_marks(28.0))
                .x_axis_formatter(round_label)
                .y_axis_formatter(round_label)
                .allow_scroll(false)
                .show(ui, |plot| {
                    for &d in settings.pe_plot_dims.iter().filter(|&&d| d < d_model) {
                        let points: Vec<[f64; 2]> =
                            (0..positions).map(|p| [p as f64, f64::from(enc.encoding[p * d_model + d])]).collect();
                        plot.line(Line::new(format!("dim {d}"), PlotPoints::from(points)));
                    }
                });
        });
        ui.vertical(|ui| {
            ui.set_width(side);
            ui.label(RichText::new("One row of the dot products").strong());
            settings.pe_plot_row = settings.pe_plot_row.min(positions.saturating_sub(1));
            let label = ui.label("position i");
            ui.add(egui::Slider::new(&mut settings.pe_plot_row, 0..=positions.saturating_sub(1))).labelled_by(label.id);
            let i = settings.pe_plot_row;
            let plot = Plot::new("pe-dot-row")
                .height(200.0)
                .x_axis_label("position j")
                .x_grid_spacer(round_marks(48.0))
                .y_grid_spacer(round_marks(28.0))
                .x_axis_formatter(round_label)
                .y_axis_formatter(round_label)
                .allow_scroll(false);
            plot.show(ui, |plot| {
                let points: Vec<[f64; 2]> =
                    (0..positions).map(|j| [j as f64, f64::from(enc.dot[i * positions + j])]).collect();
                plot.line(Line::new(format!("PE_{i} · PE_j"), PlotPoints::from(points)));
            });
            ui.label(
                RichText::new("Similarity is highest at j = i and falls with the distance |i − j|.").small().weak(),
            );
        });
    });
}
