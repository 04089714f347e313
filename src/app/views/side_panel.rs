//! The side panel: model, layer and head pickers, theme and colours.

use std::path::PathBuf;

use egui::{Color32, RichText, Sense, Stroke, TextEdit};

use crate::app::command::{Command, Commands};
use crate::app::data::ViewData;
use crate::app::state::{Settings, Source, ThemeChoice};
use crate::app::widgets::head_color;
use crate::render::Colormap;

/// The side panel's state: the typed model folder and the playground's typed numbers.
pub struct SidePanel {
    /// The typed model path (fallback when no native dialog exists).
    pub model_path_input: String,
    /// The playground's hyperparameter panel.
    pub playground: super::playground_panel::PlaygroundPanel,
}

impl SidePanel {
    /// A panel showing `model_dir` in its model box and `playground` in its number boxes.
    pub fn new(model_dir: &std::path::Path, playground: &crate::model::PlaygroundConfig) -> Self {
        Self {
            model_path_input: model_dir.display().to_string(),
            playground: super::playground_panel::PlaygroundPanel::new(playground),
        }
    }

    /// Draws the side panel.
    pub fn ui(&mut self, ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
        let mut settings = data.settings.clone();
        egui::Panel::left("side").resizable(true).default_size(270.0).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                source_ui(ui, &mut settings, data);
                ui.separator();
                match settings.source {
                    Source::Pretrained => {
                        self.model_ui(ui, &settings.recent_models, data, commands);
                        record_tokens_ui(ui, &mut settings);
                        ui.add_space(4.0);
                        crate::app::intervene::panel::interventions_panel_ui(ui, &mut settings, data);
                    }
                    Source::Playground => self.playground.ui(ui, &mut settings, data, commands),
                    Source::File => attention_file_ui(ui, data, commands),
                }
                ui.separator();
                // The shape of what is shown: the run's (playground, fewer layers), else the model's.
                let shape = data
                    .run
                    .map(|r| (r.long.as_ref().map_or(r.attention.layers(), |l| l.layers_total), r.attention.heads()))
                    .or_else(|| data.model.map(|m| (m.layers, m.heads)));
                if let Some((layers, heads)) = shape {
                    layer_picker_ui(ui, &mut settings, layers);
                    ui.add_space(6.0);
                    // Grouped-query attention is the loaded model's: the playground (or its run,
                    // still on screen while the pretrained model's comes) has none.
                    let pretrained_shown =
                        settings.source == Source::Pretrained && data.run.is_none_or(|r| !r.playground);
                    let model = data.model.filter(|_| pretrained_shown);
                    let kv = model.map_or(heads, |m| m.kv_heads).clamp(1, heads);
                    head_chips_ui(ui, &mut settings, heads, kv);
                    ui.separator();
                }
                appearance_ui(ui, &mut settings);
            });
        });
        commands.set_changed(data.settings, &settings);
    }
}

/// The longest input recorded at token level; longer ones are pooled (the input bar says how).
fn record_tokens_ui(ui: &mut egui::Ui, settings: &mut Settings) {
    ui.horizontal(|ui| {
        let label = ui.label("Record up to");
        ui.add(
            egui::DragValue::new(&mut settings.record_tokens).update_while_editing(false)
                .range(1..=crate::app::state::MAX_RECORD_TOKENS)
                .speed(8.0),
        )
        .labelled_by(label.id)
        .on_hover_text(
            "Inputs up to this many tokens record every head at token level (also scores, q and k for the neuron view). \
             Longer ones compute each head once and keep it pooled: an overview in spans and a window of 256 tokens at \
             token level — the memory of every head at token level grows with the square of the length.",
        );
        ui.label("tokens");
    });
}

impl SidePanel {
    fn model_ui(&mut self, ui: &mut egui::Ui, recent: &[PathBuf], data: &ViewData<'_>, commands: &mut Commands) {
        if let Some(m) = data.model {
            ui.label(RichText::new(&m.name).strong());
            ui.label(format!("{} · {} layers × {} heads × {} wide", m.family, m.layers, m.heads, m.hidden));
            ui.label(format!("up to {} tokens", m.max_positions));
            path_label_ui(ui, &m.dir).on_hover_text(format!("Loaded from this folder:\n{}", m.dir.display()));
        }
        if let Some(dir) = data.loading {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!(
                    "Loading {}…",
                    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
                ));
            });
        }
        if let Some(err) = data.load_error {
            ui.colored_label(ui.visuals().error_fg_color, err);
            if data.model.is_some() {
                ui.label(RichText::new("The previous model is still loaded.").small());
            }
        }
        ui.add_space(4.0);
        let busy = data.loading.is_some();
        if ui.add_enabled(!busy, egui::Button::new("Open model folder…")).on_hover_text("A Hugging Face model folder: config.json, tokenizer.json, model.safetensors. You can also drop a folder on the window, or type a hub id from the local cache.").clicked() {
            commands.push(Command::BrowseModel);
        }
        let label = ui.label("Model folder or hub id");
        ui.horizontal(|ui| {
            let response =
                ui.add(TextEdit::singleline(&mut self.model_path_input).desired_width(170.0)).labelled_by(label.id);
            let enter = response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if ui.add_enabled(!busy, egui::Button::new("Load")).clicked() || (enter && !busy) {
                commands.push(Command::LoadModel(self.model_path_input.trim().into()));
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("Embedded:").small());
            let Some(models) = data.embedded else {
                ui.label(RichText::new("not found (see the message above)").small().weak());
                return;
            };
            // The embedded model loaded now looks selected.
            let loaded = |dir: &std::path::Path| data.model.is_some_and(|m| m.dir == dir);
            let minilm = models.join(crate::model::loader::DEFAULT_MODEL_NAME);
            if ui
                .add_enabled(!busy, egui::Button::new("all-MiniLM-L6-v2").small().selected(loaded(&minilm)))
                .on_hover_text("The sentence encoder attnviz opens on (BERT family, 6 layers × 12 heads)")
                .clicked()
            {
                commands.push(Command::LoadModel(minilm));
            }
            let smollm2 = models.join(crate::model::loader::SMOLLM2_NAME);
            if smollm2.is_dir()
                && ui
                    .add_enabled(!busy, egui::Button::new("SmolLM2-135M-Instruct").small().selected(loaded(&smollm2)))
                    .on_hover_text("A small language model that writes (Llama family, 30 layers × 9 heads, Q4_1 GGUF): type a prompt and press Continue")
                    .clicked()
            {
                commands.push(Command::LoadModel(smollm2));
            }
        });
        if ui.button("Open attention file…").on_hover_text(ATTENTION_HINT).clicked() {
            commands.push(Command::BrowseAttention);
        }
        known_models_ui(ui, recent, data, commands, busy);
    }
}

/// The one-click switch between the pretrained model and the playground.
fn source_ui(ui: &mut egui::Ui, settings: &mut Settings, data: &ViewData<'_>) {
    ui.heading("Model");
    let name = data.model.map_or("no model loaded", |m| m.name.as_str());
    ui.horizontal_wrapped(|ui| {
        ui.selectable_value(&mut settings.source, Source::Pretrained, RichText::new(format!("Pretrained: {name}")))
            .on_hover_text("The loaded model with its trained weights");
        ui.selectable_value(&mut settings.source, Source::Playground, "Playground")
            .on_hover_text("A from-scratch encoder with random weights and hyperparameters you choose");
        if let Some(path) = &settings.attention_file {
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            ui.selectable_value(&mut settings.source, Source::File, format!("File: {name}"))
                .on_hover_text(format!("Attention saved by other code: {}", path.display()));
        }
    });
}

/// The attention file shown: what it holds, what works without a model, and how to open another.
fn attention_file_ui(ui: &mut egui::Ui, data: &ViewData<'_>, commands: &mut Commands) {
    ui.label(RichText::new("Attention file").strong());
    if let Some(path) = &data.settings.attention_file {
        path_label_ui(ui, path);
    }
    if let Some(run) = data.run {
        let a = &run.attention;
        let shape = format!("{} layers × {} heads × {} tokens", a.layers(), a.heads(), a.seq_len());
        ui.label(RichText::new(&run.model_name).strong());
        ui.label(if a.is_square() { shape } else { format!("{shape} × {} keys", a.keys()) });
        if run.decoder.is_some() {
            ui.label(RichText::new("with a decoder side: pick Decoder or Cross above the views").small());
        }
    }
    ui.label(
        RichText::new(
            "Attention only: the head view, model view, heatmap, statistics, rollout, words, comparisons and \
             export work; views that run the model (neuron view, logit lens, attribution, graph, writing) say so.",
        )
        .small()
        .weak(),
    );
    if let Some(err) = data.load_error {
        ui.colored_label(ui.visuals().error_fg_color, err);
    }
    if ui.button("Open attention file…").on_hover_text(ATTENTION_HINT).clicked() {
        commands.push(Command::BrowseAttention);
    }
}

/// What an attention file is, for hover texts.
const ATTENTION_HINT: &str = "Attention saved by other code, as JSON or NumPy .npz: `attentions` (layers × heads × \
     queries × keys) and `tokens` — what `attnviz dump` writes, or the README's Python for Hugging Face, \
     TransformerLens or a vision transformer. You can also drop the file on the window or type its path below.";

/// Recently opened models and the models in the local Hugging Face cache, each opened in a click.
fn known_models_ui(ui: &mut egui::Ui, recent: &[PathBuf], data: &ViewData<'_>, commands: &mut Commands, busy: bool) {
    let current = data.model.map(|m| m.dir.clone());
    let mut open = None;
    egui::CollapsingHeader::new("Models on this computer").default_open(true).show(ui, |ui| {
        let others: Vec<&PathBuf> = recent.iter().filter(|m| Some(*m) != current.as_ref()).collect();
        if !others.is_empty() {
            ui.label(RichText::new("Recent").small().strong());
            for spec in others {
                let name =
                    spec.file_name().map_or_else(|| spec.display().to_string(), |n| n.to_string_lossy().into_owned());
                let shown = crate::model::hub::id_of(spec).unwrap_or(name);
                if ui
                    .add_enabled(!busy, egui::Button::new(shown).small())
                    .on_hover_text(spec.display().to_string())
                    .clicked()
                {
                    open = Some(spec.clone());
                }
            }
        }
        ui.label(RichText::new("Hugging Face cache").small().strong())
            .on_hover_text(crate::model::hub::cache_dir().display().to_string());
        match data.cached_models {
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(RichText::new("looking…").small());
                });
            }
            Some([]) => {
                ui.label(RichText::new("none found (models downloaded with Python appear here)").small().weak());
            }
            Some(models) => {
                for m in models {
                    let size = format!("{:.0} MB", m.bytes as f64 / 1e6);
                    let (detail, ok) = match &m.summary {
                        Ok(s) => (format!("{s} · {size}"), true),
                        Err(e) => (format!("cannot open: {e}"), false),
                    };
                    let button = egui::Button::new(&m.id).small();
                    let response = ui.add_enabled(!busy && ok, button).on_hover_text(&detail);
                    ui.label(RichText::new(detail).small().weak());
                    if response.clicked() {
                        open = Some(m.dir.clone());
                    }
                }
            }
        }
    });
    if let Some(spec) = open {
        commands.push(Command::LoadModel(spec));
    }
}

fn layer_picker_ui(ui: &mut egui::Ui, settings: &mut Settings, layers: usize) {
    ui.label(RichText::new("Layer").strong());
    ui.horizontal_wrapped(|ui| {
        for l in 0..layers {
            ui.selectable_value(&mut settings.layer_idx, l, format!("L{l}")).on_hover_text(format!("Layer {l}"));
        }
    });
}

/// Head chips in each head's colour: click toggles, double-click solos.
/// With grouped-query attention (`kv_heads` < `heads`) the chips are grouped by the key/value
/// head their queries share, and each chip says which.
pub fn head_chips_ui(ui: &mut egui::Ui, settings: &mut Settings, heads: usize, kv_heads: usize) {
    ui.horizontal(|ui| {
        ui.label(RichText::new("Heads").strong());
        if ui.small_button("All").clicked() {
            settings.heads.iter_mut().for_each(|h| *h = true);
        }
        if ui.small_button("None").clicked() {
            settings.heads.iter_mut().for_each(|h| *h = false);
        }
    });
    ui.label(RichText::new("click toggles · double-click solos").small().weak());
    let group = (heads / kv_heads.max(1)).max(1);
    if group > 1 {
        ui.label(
            RichText::new(if kv_heads == 1 {
                format!("{heads} query heads share 1 key/value head (multi-query)")
            } else {
                format!("{heads} query heads share {kv_heads} key/value heads, {group} each (grouped)")
            })
            .small()
            .weak(),
        );
    }
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing = egui::vec2(3.0, 3.0);
        for h in 0..heads.min(settings.heads.len()) {
            if group > 1 && h > 0 && h % group == 0 {
                ui.add_space(8.0);
            }
            let on = settings.heads[h];
            let color = head_color(h, heads);
            let text_color = if on { contrast_text(color) } else { ui.visuals().weak_text_color() };
            let button = egui::Button::new(RichText::new(format!("H{h}")).color(text_color).monospace())
                .fill(if on { color } else { Color32::TRANSPARENT })
                .stroke(Stroke::new(1.5, color))
                .sense(Sense::click());
            let shares = if group > 1 {
                let others = if group == 2 { "1 other head".to_string() } else { format!("{} other heads", group - 1) };
                format!(" (keys and values of key/value head {}, shared with {others})", h / group)
            } else {
                String::new()
            };
            let response = ui
                .add(button)
                .on_hover_text(format!("Head {h}{shares}: click to toggle, double-click to show only this head"));
            if response.double_clicked() || response.triple_clicked() {
                for (i, flag) in settings.heads.iter_mut().enumerate() {
                    *flag = i == h;
                }
            } else if response.clicked() {
                settings.heads[h] = !on;
            }
        }
    });
}

/// Text colour that reads on `bg`: the exported figures' rule ([`crate::render::cell_text_rgb`]),
/// so a cell's number has the same colour on screen and in the PNG.
pub fn contrast_text(bg: Color32) -> Color32 {
    let [r, g, b] = crate::render::cell_text_rgb([bg.r(), bg.g(), bg.b()]);
    Color32::from_rgb(r, g, b)
}

fn appearance_ui(ui: &mut egui::Ui, settings: &mut Settings) {
    ui.label(RichText::new("Theme").strong());
    ui.horizontal(|ui| {
        ui.selectable_value(&mut settings.theme, ThemeChoice::System, "System");
        ui.selectable_value(&mut settings.theme, ThemeChoice::Dark, "Dark");
        ui.selectable_value(&mut settings.theme, ThemeChoice::Light, "Light");
    });
    ui.add_space(4.0);
    ui.horizontal(|ui| {
        let label = ui.label(RichText::new("Colour map").strong());
        egui::ComboBox::from_id_salt("colormap")
            .selected_text(settings.colormap.name())
            .show_ui(ui, |ui| {
                for cmap in Colormap::ALL {
                    ui.selectable_value(&mut settings.colormap, cmap, cmap.name());
                }
            })
            .response
            .labelled_by(label.id);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_text_follows_the_exports_luminance_rule_where_the_old_luma_rule_disagreed() {
        // Cells where the app's old rule (luma > 140: black) and the PNG's (WCAG luminance > 0.4:
        // dark) disagreed: (0, 200, 0) has luma 117 (white on screen) but luminance 0.41 (dark in
        // the PNG); (100, 180, 100) luma 147 (black) but luminance 0.36 (light). Now both are the
        // PNG's colour, as is an ordinary dark cell.
        for rgb in [[0, 200, 0], [100, 180, 100], [40, 40, 160]] {
            let on_screen = contrast_text(Color32::from_rgb(rgb[0], rgb[1], rgb[2]));
            let [r, g, b] = crate::render::cell_text_rgb(rgb);
            assert_eq!(on_screen, Color32::from_rgb(r, g, b), "cell {rgb:?}");
        }
        assert_eq!(contrast_text(Color32::from_rgb(0, 200, 0)), Color32::from_rgb(20, 20, 20));
        assert_eq!(contrast_text(Color32::from_rgb(100, 180, 100)), Color32::from_rgb(245, 245, 245));
    }
}

/// A folder's path on one line, small and weak, its middle elided ("/home/…/models/tiny") when it
/// is wider than the panel: a long path would wrap and move everything below it. Its accessible
/// name is the whole path.
fn path_label_ui(ui: &mut egui::Ui, path: &std::path::Path) -> egui::Response {
    let whole = path.display().to_string();
    let font = egui::TextStyle::Small.resolve(ui.style());
    let width =
        |text: &str| ui.fonts_mut(|f| f.layout_no_wrap(text.to_string(), font.clone(), Color32::WHITE).size().x);
    let shown = elide_middle(&whole, ui.available_width(), width);
    let response = ui.add(egui::Label::new(RichText::new(&shown).small().weak()).wrap_mode(egui::TextWrapMode::Extend));
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &whole));
    response
}

/// `text` with characters removed from its middle (replaced by "…") until `width` of it fits
/// `room`; the whole text when it fits. Keeps at least one character on each side.
pub fn elide_middle(text: &str, room: f32, width: impl Fn(&str) -> f32) -> String {
    if width(text) <= room {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let with_kept = |kept: usize| {
        let head = kept.div_ceil(2);
        let tail = kept - head;
        let mut s: String = chars[..head].iter().collect();
        s.push('…');
        s.extend(&chars[chars.len() - tail..]);
        s
    };
    // The most characters kept that still fit (a binary search over how many are kept).
    let (mut lo, mut hi) = (2.min(chars.len()), chars.len().saturating_sub(1));
    if lo >= hi || width(&with_kept(lo)) > room {
        return with_kept(lo.min(chars.len()));
    }
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if width(&with_kept(mid)) <= room { lo = mid } else { hi = mid - 1 }
    }
    with_kept(lo)
}

#[cfg(test)]
mod path_tests {
    use super::elide_middle;

    #[test]
    fn a_long_path_keeps_both_ends_and_fits() {
        let width = |s: &str| s.chars().count() as f32;
        let path = "/tmp/tmp.abcdefghij/p/tests/fixtures/models/tiny-bert";
        assert_eq!(elide_middle(path, 100.0, width), path);
        let shown = elide_middle(path, 20.0, width);
        assert_eq!(shown.chars().count(), 20);
        assert!(shown.starts_with("/tmp/tmp.a") && shown.ends_with("tiny-bert") && shown.contains('…'), "{shown}");
        assert_eq!(elide_middle("abc", 0.0, width), "a…c");
    }
}
