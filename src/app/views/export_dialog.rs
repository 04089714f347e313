//! The "Export" window: path (typed, or through the native save dialog), format (PNG, SVG, PDF —
//! the path's extension), scale, save — or the numbers as CSV / JSON / NPZ for views that have
//! them; and *Copy image* puts the figure on the clipboard, for pasting into slides.

use std::path::{Path, PathBuf};

use egui::RichText;

use crate::app::command::{Command, Commands, Setting};
use crate::app::data::ViewData;
use crate::app::state::{Settings, View};
use crate::export::ImageFormat;

/// `path` with its extension replaced by the format's (a path with none gets one).
pub fn with_extension(path: &str, format: ImageFormat) -> String {
    let path = Path::new(path);
    let name = path.file_name().map_or_else(|| "attnviz".into(), |n| n.to_string_lossy().into_owned());
    let stem = match name.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem.to_string(),
        _ => name,
    };
    path.with_file_name(format!("{stem}.{}", format.extension())).display().to_string()
}

/// A default file name for the current view (or the training lab's plots, `lab_plots`), in the
/// folder of the last export, else in `home`.
pub fn default_export_path(settings: &Settings, home: Option<&Path>, lab_plots: bool) -> PathBuf {
    let name = if lab_plots {
        crate::app::lab::figure::export_name(&settings.train)
    } else {
        settings.view.export_name(settings)
    };
    let dir = settings.export_dir.clone().or_else(|| home.map(Path::to_path_buf)).unwrap_or_else(|| PathBuf::from("."));
    dir.join(name)
}

/// The export window's state.
#[derive(Debug, Default)]
pub struct ExportDialog {
    /// Whether the window is open.
    pub open: bool,
    /// The export path being edited.
    pub path_input: String,
    /// The folder a relative path is taken from: the working directory (tests give the app a
    /// temporary one, so that a typed file name never lands in the source tree).
    pub work_dir: PathBuf,
    /// The folder exports go to until one is written elsewhere: `$HOME`.
    pub home: Option<PathBuf>,
    /// A figure drawn for the clipboard, handed to egui on the next frame.
    pub clipboard: Option<egui::ColorImage>,
    /// The dialog exports the training lab's plots (else the current view).
    pub lab_plots: bool,
}

impl ExportDialog {
    /// Opens the window on the training lab's plots (`lab_plots`) or the current view; the path
    /// typed for the other one makes way for this one's default name.
    pub fn show(&mut self, lab_plots: bool) {
        if self.lab_plots != lab_plots {
            self.path_input.clear();
        }
        self.lab_plots = lab_plots;
        self.open = true;
    }

    /// Draws the export window.
    pub fn ui(&mut self, ctx: &egui::Context, data: &ViewData<'_>, commands: &mut Commands) {
        let lab_plots = self.lab_plots && data.features.lab.lab.is_some();
        if self.path_input.is_empty() {
            self.path_input = default_export_path(data.settings, self.home.as_deref(), lab_plots).display().to_string();
        }
        export_dialog_ui(ctx, data, lab_plots, &mut self.path_input, &self.work_dir, commands);
    }
}

/// Draws the export window.
fn export_dialog_ui(
    ctx: &egui::Context,
    data: &ViewData<'_>,
    lab_plots: bool,
    path_input: &mut String,
    work_dir: &Path,
    commands: &mut Commands,
) {
    let settings = data.settings;
    let mut open = true;
    let window = egui::Window::new("Export").open(&mut open).collapsible(false).resizable(false);
    window.anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0]).show(ctx, |ui| {
        let what = if lab_plots {
            "the training lab's plots (loss, held-out loss, the task's metric, each head's score)"
        } else {
            settings.view.export_what(settings, data.pinned.is_some())
        };
        ui.label(format!(
            "Saves {what} as a PNG image, or as an SVG or PDF vector figure (text stays text), laid out the same \
             way as `attnviz export`."
        ));
        if lab_plots
            || matches!(
                settings.view,
                View::Heatmap | View::Neuron | View::Stats | View::Rollout | View::Compare | View::Lens
            )
        {
            ui.label(RichText::new("End the path in .csv, .json or .npz to save the numbers instead.").small().weak());
        }
        let label = ui.label("Export path");
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(path_input).desired_width(360.0)).labelled_by(label.id);
            if ui.button("Browse…").clicked() {
                let file_name = PathBuf::from(&*path_input)
                    .file_name()
                    .map_or_else(|| "attnviz.png".to_string(), |n| n.to_string_lossy().into_owned());
                commands.push(Command::BrowseExport { file_name });
            }
        });
        ui.horizontal(|ui| {
            ui.label("Format");
            let current = ImageFormat::of_path(Path::new(path_input.trim()));
            for format in ImageFormat::ALL {
                let name = format.extension().to_ascii_uppercase();
                if ui.selectable_label(current == Some(format), name).clicked() {
                    *path_input = with_extension(path_input.trim(), format);
                }
            }
        });
        ui.horizontal(|ui| {
            ui.label("Scale");
            for s in 1..=4u8 {
                if ui.selectable_label(settings.export_scale == s, format!("{s}×")).clicked() {
                    commands.push(Command::Set(Setting::ExportScale(s)));
                }
            }
        });
        ui.horizontal(|ui| {
            let busy = data.exporting;
            if ui.add_enabled(!busy, egui::Button::new(RichText::new("Save").strong())).clicked() {
                // Empty stays empty: the app asks for a path.
                let typed = path_input.trim();
                let path = if typed.is_empty() { PathBuf::new() } else { work_dir.join(typed) };
                commands.push(Command::Export(path));
            }
            let copy = egui::Button::new("Copy image");
            if ui
                .add_enabled(!busy, copy)
                .on_hover_text("Copy the figure as an image, for pasting into slides")
                .clicked()
            {
                commands.push(Command::CopyImage);
            }
            if busy {
                ui.spinner();
                ui.label("Writing…");
            }
        });
        if let Some(status) = data.status.filter(|s| s.is_error) {
            ui.colored_label(ui.visuals().error_fg_color, &status.text);
        }
    });
    if !open || ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
        commands.push(Command::CloseExport);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choosing_a_format_replaces_the_extension_only() {
        assert_eq!(with_extension("/a/b/head view.png", ImageFormat::Svg), "/a/b/head view.svg");
        assert_eq!(with_extension("/a/b.c/fig", ImageFormat::Pdf), "/a/b.c/fig.pdf");
        assert_eq!(with_extension("fig.layer.2.csv", ImageFormat::Png), "fig.layer.2.png");
        assert_eq!(with_extension(".hidden", ImageFormat::Svg), ".hidden.svg");
    }
}
