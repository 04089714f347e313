//! Commands raised by the views, handled in one place per frame, and the answers of the short
//! tasks they start on threads of their own (`app::tasks`).

use std::path::PathBuf;
use std::sync::Arc;

use super::command::{Command, Commands, Setting};
use super::core::AttnvizApp;
use super::derive::DeriveKey;
use super::session::TokenRun;
use super::state::{Source, View};
use super::tasks::{Background, spawn_named};
use crate::analysis::Run;
use crate::export::export_file;

impl AttnvizApp {
    /// Handles one command raised by a view: the one place where widgets change the app.
    pub fn run_command(&mut self, ctx: &egui::Context, command: Command) {
        match command {
            Command::Set(setting) => {
                if matches!(setting, Setting::Words(w) if w != self.settings.words)
                    || matches!(setting, Setting::Stack(st) if st != self.settings.stack)
                {
                    // Positions change meaning between tokens and words, and between stacks.
                    self.session.pinned = None;
                }
                let switch = match setting {
                    Setting::Source(to) if to != self.settings.source => Some(to),
                    _ => None,
                };
                if let Some(to) = switch {
                    self.leave_source(to);
                }
                setting.apply(&mut self.settings);
                if switch == Some(Source::Pretrained) {
                    self.restore_parked();
                }
            }
            Command::LoadModel(dir) if dir.is_file() && crate::analysis::import::is_attention_file(&dir) => {
                self.open_attention(ctx, dir);
            }
            Command::OpenAttention(path) => self.open_attention(ctx, path),
            Command::BrowseAttention => self.session.tasks.dialog(
                ctx,
                || {
                    rfd::FileDialog::new()
                        .set_title("Open attention saved by other code")
                        .add_filter("Attention (JSON, NumPy)", &["json", "npz"])
                        .pick_file()
                },
                Background::PickedAttention,
            ),
            Command::LoadModel(dir) => {
                // A model the user asks for ends the training lab's run (its network would
                // replace the model at its next evaluation).
                if self.features.lab.end_for_another_model() {
                    self.set_status("The training lab's run ended: another model was opened", false);
                }
                self.session.switch_on_load = true;
                self.views.side.model_path_input = dir.display().to_string();
                self.load_model(dir);
            }
            Command::BrowseModel => self.session.tasks.dialog(
                ctx,
                || rfd::FileDialog::new().set_title("Open a Hugging Face model folder").pick_folder(),
                Background::PickedModel,
            ),
            Command::BrowseExport { file_name } => self.session.tasks.dialog(
                ctx,
                move || {
                    rfd::FileDialog::new()
                        .set_file_name(file_name)
                        .add_filter("PNG image", &["png"])
                        .add_filter("SVG vector figure", &["svg"])
                        .add_filter("PDF document", &["pdf"])
                        .add_filter("Numbers (CSV, JSON, NumPy)", &["csv", "json", "npz"])
                        .save_file()
                },
                Background::PickedExport,
            ),
            Command::Export(path) => self.export(ctx, path),
            Command::Train(super::command::TrainCommand::ExportPlots) => self.views.export.show(true),
            Command::Train(c) => self.features.lab.command(ctx, c, &mut self.settings, &mut self.session),
            Command::CopyImage => self.copy_image(ctx),
            Command::OpenExport => self.views.export.show(false),
            Command::CloseExport => self.views.export.open = false,
            Command::OpenHead { layer_idx, head_idx } => {
                self.settings.layer_idx = layer_idx;
                for (i, on) in self.settings.heads.iter_mut().enumerate() {
                    *on = i == head_idx;
                }
                self.settings.view = View::Heatmap;
            }
            Command::Pin(selection) => self.session.pinned = selection,
            Command::Continue(max_new) => self.session.start_generation(&self.settings, max_new),
            Command::StopGeneration => self.session.stop_generation(false),
            Command::Probe => self.start_probe(),
            Command::Playground(checked) => self.set_playground(checked),
            Command::Derive(key) => self.derive(&key),
        }
    }

    /// Asks the derive thread for `key`, for the run shown now (a view may have asked during a
    /// change of run).
    fn derive(&mut self, key: &DeriveKey) {
        let s = &mut self.session;
        let Some(run) = s.run.clone() else { return };
        if key.view_id() != Some(s.view_id) {
            return;
        }
        // A lines picture reuses the matrices derived already, if any.
        let matrices = match key {
            DeriveKey::HeadLines(lines) => s.derived.head_matrices(&lines.matrices).cloned(),
            _ => None,
        };
        if s.derived.start(key) {
            s.deriver.send(key.clone(), run, matrices);
        }
    }

    /// Handles the commands raised so far, in order.
    pub(crate) fn run_commands(&mut self, ctx: &egui::Context, commands: &mut Commands) {
        for command in commands.take() {
            if !matches!(command, Command::Derive(_)) {
                // What the command changed shows now, not at the next input event.
                ctx.request_repaint();
            }
            self.run_command(ctx, command);
        }
    }

    /// Reads an attention file off the UI thread; it is shown once read (a bad file changes
    /// nothing but the error shown).
    fn open_attention(&mut self, ctx: &egui::Context, path: PathBuf) {
        self.views.side.model_path_input = path.display().to_string();
        self.session.tasks.opening = Some(path.clone());
        let (tx, ctx) = (self.session.tasks.sender(), ctx.clone());
        spawn_named("attnviz-open", move || {
            let result = super::worker::read_attention(&path);
            let _ = tx.send(Background::OpenedAttention(path, result));
            ctx.request_repaint();
        });
    }

    /// Shows an attention file that was read: its run replaces what is shown (the pretrained
    /// model's run is parked, as for the playground).
    fn show_attention(&mut self, path: &std::path::Path, run: Arc<Run>) {
        if self.settings.source != Source::File {
            self.leave_source(Source::File);
        }
        self.settings.source = Source::File;
        self.settings.attention_file = Some(path.to_path_buf());
        self.settings.fit_model(run.attention.layers(), run.attention.heads());
        self.session.stop_generation(true);
        let id = self.session.worker.next_id();
        let input = self.session.run_input(&self.settings);
        let s = &mut self.session;
        s.asked.show_now(id, input);
        s.load_error = None;
        s.run_error = None;
        s.pinned = None;
        s.probe_shown = false;
        s.inference_ms = 0.0;
        let a = &run.attention;
        let text = format!(
            "Opened {}: {} layers × {} heads × {} tokens (attention only: views that need the model say so)",
            path.display(),
            a.layers(),
            a.heads(),
            a.seq_len()
        );
        s.token_run = Some(TokenRun { source_id: id, run, window: None });
        self.set_status(text, false);
    }

    /// Writes the current view to `path` off the UI thread.
    fn export(&mut self, ctx: &egui::Context, path: PathBuf) {
        if path.as_os_str().is_empty() {
            self.set_status("Export failed: enter a file path", true);
            return;
        }
        let figure = self.current_figure();
        let style = self.export_style(ctx.theme() == egui::Theme::Dark);
        let run = self.session.run.clone();
        let (tx, ctx) = (self.session.tasks.sender(), ctx.clone());
        self.session.tasks.exporting = Some(path.clone());
        spawn_named("attnviz-export", move || {
            let result = export_file(run.as_deref(), &figure, style, &path)
                .map(|size| size.unwrap_or((0, 0)))
                .map_err(|e| e.to_string());
            let _ = tx.send(Background::Exported(path, result));
            ctx.request_repaint();
        });
    }

    /// Draws the current view's figure off the UI thread and puts it on the clipboard.
    fn copy_image(&mut self, ctx: &egui::Context) {
        let figure = self.current_figure();
        let style = self.export_style(ctx.theme() == egui::Theme::Dark);
        let run = self.session.run.clone();
        let (tx, ctx) = (self.session.tasks.sender(), ctx.clone());
        spawn_named("attnviz-copy", move || {
            let image = crate::export::render_figure(run.as_deref(), &figure, style).map_err(|e| e.to_string());
            let image = image.map(|img| {
                let size = [img.width() as usize, img.height() as usize];
                egui::ColorImage::from_rgba_unmultiplied(size, img.as_raw())
            });
            let _ = tx.send(Background::Copied(image));
            ctx.request_repaint();
        });
    }

    /// Applies the answers of finished tasks.
    pub(crate) fn poll_tasks(&mut self) {
        while let Ok(msg) = self.session.tasks.rx.try_recv() {
            match msg {
                Background::Exported(path, result) => {
                    self.session.tasks.exporting = None;
                    match result {
                        Ok((w, h)) => {
                            let size = if w == 0 { "numbers".to_string() } else { format!("{w}×{h} px") };
                            self.set_status(format!("Exported {} ({size})", path.display()), false);
                            self.settings.export_dir = path.parent().map(std::path::Path::to_path_buf);
                            self.views.export.open = false;
                        }
                        Err(e) => self.set_status(format!("Export failed: {e}"), true),
                    }
                }
                Background::Copied(Ok(image)) => {
                    let [w, h] = image.size;
                    self.views.export.clipboard = Some(image);
                    self.set_status(format!("Copied the figure to the clipboard ({w}×{h} px)"), false);
                }
                Background::Copied(Err(e)) => self.set_status(format!("Copy failed: {e}"), true),
                Background::PickedModel(Some(dir)) => {
                    self.views.side.model_path_input = dir.display().to_string();
                    self.session.switch_on_load = true;
                    self.load_model(dir);
                }
                Background::PickedExport(Some(path)) => self.views.export.path_input = path.display().to_string(),
                Background::CachedModels(models) => self.session.cached_models = Some(models),
                Background::PickedSave(Some(dir)) => self.features.lab.save_in(dir),
                Background::PickedSave(None) => {
                    self.set_status("Nothing chosen: type the folder in the lab's Save box", false);
                }
                Background::PickedAttention(Some(path)) => {
                    self.views.side.model_path_input = path.display().to_string();
                    self.session.tasks.pending_open = Some(path);
                }
                Background::OpenedAttention(path, result) => {
                    self.session.tasks.opening = None;
                    match result {
                        Ok(run) => self.show_attention(&path, run),
                        Err(e) => {
                            let msg = format!("Could not open {e}");
                            self.session.load_error = Some(msg.clone());
                            self.set_status(msg, true);
                        }
                    }
                }
                Background::PickedModel(None) | Background::PickedExport(None) | Background::PickedAttention(None) => {
                    self.set_status(
                        "Nothing chosen (if no file dialog appeared, this desktop has none: type the path in the box)",
                        false,
                    );
                }
            }
        }
    }
}
