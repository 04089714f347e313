//! The eframe app's shell: `logic` polls the worker and the background threads and asks for what
//! the settings need, `ui` lets the views draw plain data ([`ViewData`]) and collect [`Command`]s,
//! which [`AttnvizApp::run_command`] (`app::handle`) handles in one place. The shown run lives in
//! `app::runs`, each feature's results in its folder (`app::features`).

use std::path::PathBuf;
use std::time::Instant;

use super::command::{Command, Commands};

use super::core::{AttnvizApp, Shell, view_data};
use super::derive::{Derived, Deriver};
use super::features::Features;
use super::session::{Asked, KeyClock, Playground, Session, Sources};
use super::state::{RolloutMode, Settings, Source, ThemeChoice, View};
use super::tasks::{Background, Tasks};
use super::ui::Views;
use super::worker::Worker;

/// Key of the settings in eframe's storage.
const SETTINGS_KEY: &str = "attnviz-settings";

/// Settings are written this long after their last change (a kill — SIGTERM, a crash — loses at
/// most this much; typing does not write at every keystroke).
pub const SAVE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// While background work goes on, the UI draws one frame this often (spinners turn), and none in
/// the first: see [`AttnvizApp::logic`].
pub const BUSY_FRAME: std::time::Duration = std::time::Duration::from_millis(250);

/// Longest a keystroke's frame waits for the run it asked for: see [`AttnvizApp::ui`].
pub const KEY_WAIT: std::time::Duration = std::time::Duration::from_millis(30);

/// How the app starts: the command line's `--model`, `--text`, `--text-pair`.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    /// Model folder to load instead of the remembered one.
    pub model_dir: Option<PathBuf>,
    /// Sentence A to start with.
    pub text: Option<String>,
    /// The Hugging Face cache to list models from (None: where Python keeps it).
    pub hf_cache: Option<PathBuf>,
    /// Sentence B to start with.
    pub text_pair: Option<String>,
    /// The folder a relative export path is taken from (None: the process's working directory).
    pub work_dir: Option<PathBuf>,
    /// The folder exports go to until one is written elsewhere (None: `$HOME`).
    pub home: Option<PathBuf>,
    /// An attention file to open ([`crate::analysis::import`]).
    pub attention_file: Option<PathBuf>,
    /// Longest a keystroke's frame waits for its run (None: [`KEY_WAIT`]; tests, on a machine
    /// busy with other tests, wait longer).
    pub key_wait: Option<std::time::Duration>,
    /// The folder holding the embedded models (None: looked for where
    /// [`crate::model::loader::model_search_path`] says; tests give an empty folder to stand for a
    /// binary far from its models).
    pub models: Option<PathBuf>,
}

impl AttnvizApp {
    /// Creates the app, restoring settings from eframe's storage and starting the worker.
    pub fn new(cc: &eframe::CreationContext<'_>, startup: Startup) -> Self {
        Self::with_storage(&cc.egui_ctx, cc.storage, startup)
    }

    /// Creates the app with settings from `storage` (if any); the worker wakes `ctx`.
    pub fn with_storage(ctx: &egui::Context, storage: Option<&dyn eframe::Storage>, startup: Startup) -> Self {
        let mut settings: Settings = storage.and_then(|s| eframe::get_value(s, SETTINGS_KEY)).unwrap_or_default();
        // Settings saved before the features kept their own: their flat keys, into the nested ones.
        if let Some(flat) = storage.and_then(|s| eframe::get_value::<super::legacy::FlatSettings>(s, SETTINGS_KEY)) {
            flat.upgrade(&mut settings);
        }
        if let Some(text) = startup.text {
            settings.text = text;
        }
        if let Some(pair) = startup.text_pair {
            settings.pair_enabled = !pair.is_empty();
            settings.text_pair = pair;
        }
        if startup.model_dir.is_some() {
            settings.model_dir = startup.model_dir;
        }
        install_fonts(ctx);
        // A blinking cursor repaints the window twice a second for as long as a sentence box has
        // focus, which is most of the time: a steady cursor lets an idle app draw nothing.
        ctx.all_styles_mut(|style| {
            style.visuals.text_cursor.blink = false;
            // Without a GPU every frame is drawn in software: hover and tooltip changes appear in
            // one frame instead of fading in over several.
            style.animation_time = 0.0;
            // Software GL fills every panel's pixels once more per frame (a full window: two thirds
            // of a frame's CPU under Xvfb); the window is cleared to the panel colour instead
            // (`clear_color`), which looks the same.
            style.visuals.panel_fill = egui::Color32::TRANSPARENT;
        });
        let wake = ctx.clone();
        let worker = Worker::spawn(move |progress| {
            if progress {
                // A generation's next run: one frame (egui draws two for a plain request, "to let
                // things settle"; the message after it, or the last one, comes soon).
                wake.request_repaint_after(std::time::Duration::from_millis(1));
            } else {
                wake.request_repaint();
            }
        })
        .expect("cannot start the inference thread");
        let wake = ctx.clone();
        let deriver = Deriver::spawn(move || wake.request_repaint()).expect("cannot start the derive thread");
        let embedded = match startup.models {
            Some(folder) => crate::model::loader::find_models(&[folder])
                .map_err(|looked| crate::model::ModelError::NoEmbeddedModels { looked }.to_string()),
            None => crate::model::loader::embedded_models().map_err(|e| e.to_string()),
        };
        let default_dir = match (&embedded, std::env::var_os("ATTNVIZ_MODEL").filter(|v| !v.is_empty())) {
            (_, Some(dir)) => Some(PathBuf::from(dir)),
            (Ok(models), None) => Some(models.join(crate::model::loader::DEFAULT_MODEL_NAME)),
            (Err(_), None) => None,
        };
        // No model to open (the embedded ones not found, none remembered): the views say why.
        let model_dir = settings.model_dir.clone().or(default_dir);
        let mut views = Views::new(&settings, model_dir.as_deref().unwrap_or(std::path::Path::new("")));
        views.export.work_dir = startup.work_dir.or_else(|| std::env::current_dir().ok()).unwrap_or_default();
        views.export.home =
            startup.home.or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from));
        let tasks = Tasks::default();
        let background_tx = tasks.sender();
        let mut app = Self {
            session: Session {
                worker,
                deriver,
                model: None,
                loading: None,
                load_error: None,
                embedded,
                switch_on_load: false,
                run: None,
                token_run: None,
                view_id: 0,
                shown_from: None,
                asked: Asked::default(),
                probe_shown: false,
                playground: Playground::default(),
                run_error: None,
                inference_ms: 0.0,
                keys: KeyClock {
                    typed: None,
                    edit_run: None,
                    edit_run_ms: None,
                    hold_for: None,
                    key_wait: startup.key_wait.unwrap_or(KEY_WAIT),
                    frame_started: Instant::now(),
                },
                pinned: None,
                status: None,
                derived: Derived::default(),
                generation: None,
                sources: Sources::default(),
                cached_models: None,
                tasks,
            },
            features: Features::default(),
            views,
            settings,
            shell: Shell::default(),
        };
        // The remembered hyperparameters, checked as if just typed.
        let checked = app.views.side.playground.check(&app.settings.playground);
        app.set_playground(checked);
        if let Some(dir) = model_dir {
            app.load_model(dir);
        } else {
            let why = app.session.default_model().err().unwrap_or_default();
            app.session.load_error = Some(why.clone());
            app.set_status(why, true);
        }
        if let Some(path) = startup.attention_file {
            app.run_command(ctx, Command::OpenAttention(path));
        }
        // Listing the cache reads every model's config.json: off the UI thread.
        let cache = startup.hf_cache.unwrap_or_else(crate::model::hub::cache_dir);
        let scan = std::thread::Builder::new().name("hf-cache-scan".into()).spawn(move || {
            let _ = background_tx.send(Background::CachedModels(crate::model::hub::list_in(&cache)));
        });
        if let Err(e) = scan {
            app.session.cached_models = Some(Vec::new());
            app.set_status(format!("cannot list the Hugging Face cache: {e}"), true);
        }
        app
    }

    /// Writes the settings to `storage` once they have not changed for [`SAVE_AFTER`] (`now`),
    /// and flushes it. Returns how long to wait before asking again, while changes are unsaved.
    pub fn autosave(&mut self, storage: &mut dyn eframe::Storage, now: Instant) -> Option<std::time::Duration> {
        let s = &mut self.shell;
        if s.saved.as_ref() == Some(&self.settings) {
            s.unsaved = None;
            return None;
        }
        let since = match &s.unsaved {
            Some((seen, since)) if *seen == self.settings => *since,
            _ => {
                s.unsaved = Some((self.settings.clone(), now));
                now
            }
        };
        let quiet = now.saturating_duration_since(since);
        if quiet < SAVE_AFTER {
            return Some(SAVE_AFTER.saturating_sub(quiet));
        }
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
        storage.flush();
        s.saved = Some(self.settings.clone());
        s.unsaved = None;
        None
    }

    /// Asks every feature for what the settings need: the shown run, run B, the readouts.
    fn request_what_is_needed(&mut self) {
        self.steer_as_asked();
        self.request_run_if_changed();
        self.features.compare.request(&self.settings, &self.session);
        self.features.request(&self.session.shown(&self.settings));
    }

    /// Puts the Steer panel's steering into the interventions once its vector is made (and takes
    /// it out when the panel is off): the shown run and Continue use the steered model.
    fn steer_as_asked(&mut self) {
        let Some(model) = self.session.model.as_ref().filter(|_| self.settings.source == Source::Pretrained) else {
            return;
        };
        if let Some(wanted) = self.features.intervene.wanted_steering(&self.settings, &model.dir)
            && self.settings.interventions.steer != wanted
        {
            self.settings.interventions.steer = wanted;
        }
    }

    /// Starts computing attention flow in the background if the rollout view wants it.
    fn request_flow_if_needed(&mut self, ctx: &egui::Context) {
        if self.settings.view != View::Rollout || self.settings.rollout.mode != RolloutMode::Flow {
            return;
        }
        let Some(run) = self.session.run.clone() else { return };
        let key = self.flow_key();
        let ctx = ctx.clone();
        self.features.flow.request(&run, key, move || ctx.request_repaint());
    }

    fn apply_theme(&mut self, ctx: &egui::Context) {
        if self.shell.applied_theme != Some(self.settings.theme) {
            ctx.set_theme(match self.settings.theme {
                ThemeChoice::System => egui::ThemePreference::System,
                ThemeChoice::Dark => egui::ThemePreference::Dark,
                ThemeChoice::Light => egui::ThemePreference::Light,
            });
            self.shell.applied_theme = Some(self.settings.theme);
            ctx.request_repaint(); // the new visuals show from the next frame on
        }
    }
}

/// Adds `DejaVu` Sans as a fallback after egui's fonts (arrows, symbols, most alphabets), and draws a
/// box for any glyph still missing: token text is arbitrary user input and must never panic.
/// Size of egui's small text (hints, captions, candidate labels) in points.
pub const SMALL_TEXT_PX: f32 = 11.0;

fn install_fonts(ctx: &egui::Context) {
    use egui::epaint::text::{FontInsert, FontPriority, InsertFontFamily};
    let mut families: Vec<InsertFontFamily> = [egui::FontFamily::Proportional, egui::FontFamily::Monospace]
        .into_iter()
        .map(|family| InsertFontFamily { family, priority: FontPriority::Lowest })
        .collect();
    // The figures' own family: the head view's labels in the font its layout measured.
    families.push(InsertFontFamily { family: super::widgets::figure::figure_font(), priority: FontPriority::Highest });
    ctx.add_font(FontInsert::new("DejaVuSans", egui::FontData::from_static(crate::render::text::FONT_BYTES), families));
    ctx.set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
    // Hints, captions and the candidates' labels are small text: egui's 9 points are hard to
    // read at 1× scale.
    ctx.all_styles_mut(|style| {
        let small = style.text_styles.entry(egui::TextStyle::Small).or_insert_with(|| egui::FontId::proportional(9.0));
        small.size = small.size.max(SMALL_TEXT_PX);
    });
}

impl eframe::App for AttnvizApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.poll_worker();
        self.poll_tasks();
        self.features.flow.poll();
        if let Some(image) = self.views.export.clipboard.take() {
            ctx.copy_image(image);
        }
        self.sync_view_runs();
        self.session.pin_newest_written();
        self.request_what_is_needed();
        // Drag & drop of a model folder.
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw.dropped_files.iter().map(|f| f.path().to_path_buf()).filter(|p| !p.as_os_str().is_empty()).collect()
        });
        if let Some(dir) = dropped.into_iter().next() {
            if dir.is_file() && crate::analysis::import::is_attention_file(&dir) {
                self.run_command(ctx, Command::OpenAttention(dir));
            } else {
                let dir =
                    if dir.is_file() { dir.parent().map(std::path::Path::to_path_buf).unwrap_or(dir) } else { dir };
                self.run_command(ctx, Command::LoadModel(dir));
            }
        }
        if let Some(path) = self.session.tasks.pending_open.take() {
            self.run_command(ctx, Command::OpenAttention(path));
        }
        // Background work wakes the UI when it ends (a generation that is writing, with each of
        // its messages: no frames between). Meanwhile frames would only turn spinners, and each
        // takes the CPU from that work: none in the first BUSY_FRAME (a keystroke's run shows its
        // result with no frame between), then one every BUSY_FRAME.
        if self.is_busy_besides_writing() || self.session.tasks.exporting.is_some() {
            let elapsed = self.shell.busy_since.get_or_insert_with(Instant::now).elapsed();
            ctx.request_repaint_after(BUSY_FRAME.checked_sub(elapsed).filter(|d| !d.is_zero()).unwrap_or(BUSY_FRAME));
        } else {
            self.shell.busy_since = None;
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        let start = Instant::now();
        self.session.keys.frame_started = start;
        let ctx = ui.ctx().clone();
        let before = self.settings.clone();
        self.apply_theme(&ctx);
        let mut commands = Commands::default();
        let frame_ms = self.shell.frame_ms;
        self.views.ui(ui, &view_data(&self.settings, &self.session, &self.features, frame_ms), &mut commands);
        if ctx.input(|i| i.key_pressed(egui::Key::Escape)) {
            commands.push(Command::Pin(None));
        }
        self.run_commands(&ctx, &mut commands);
        self.views.windows_ui(&ctx, &view_data(&self.settings, &self.session, &self.features, frame_ms), &mut commands);
        self.run_commands(&ctx, &mut commands);
        // The shown runs change only in `logic`, before drawing: what a frame drew is what
        // `session.run` holds after it.
        self.request_flow_if_needed(&ctx);
        self.request_what_is_needed();
        // A keystroke's frame waits, up to KEY_WAIT, for the run it asked for when the last edit's
        // run took no longer: the run has the cores to itself (a frame drawn in software would
        // take one from the model's threads), and this frame is laid out again to draw the key
        // and its result together. A run that takes longer is drawn when it comes, as any other.
        if let Some(id) = self.session.keys.hold_for.take()
            && self.session.worker.wait_for_run(id, self.session.keys.key_wait)
        {
            ctx.request_discard("the run a keystroke asked for has come: draw it with the key");
        }
        if self.settings != before {
            // A widget changed a setting after it was drawn (e.g. a selectable label): draw the
            // new state now, not at the next input event.
            ctx.request_repaint();
        }
        // The whole previous frame as eframe timed it (layout, tessellation, painting), not just
        // this function; headless (tests) it is not reported, and this function's time stands in.
        let ms = frame.info().cpu_usage.map_or_else(|| start.elapsed().as_secs_f32() * 1e3, |s| s * 1e3);
        // Changed settings are written soon after, not only at a clean exit (a SIGTERM loses
        // nothing older than SAVE_AFTER).
        if let Some(storage) = frame.storage_mut()
            && let Some(wait) = self.autosave(storage, Instant::now())
        {
            ctx.request_repaint_after(wait);
        }
        let s = &mut self.shell;
        s.frame_ms = if s.frame_ms == 0.0 { ms } else { 0.9 * s.frame_ms + 0.1 * ms };
        let busy = self.is_busy();
        self.session.time_generation(busy);
        self.time_typing();
    }

    /// The panels' colour: panels are transparent (see [`AttnvizApp::new`]), the cleared window
    /// is their background.
    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        super::widgets::panel_colour(visuals).to_normalized_gamma_f32()
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, SETTINGS_KEY, &self.settings);
        self.shell.saved = Some(self.settings.clone());
    }
}
