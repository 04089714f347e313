//! The desktop app (eframe/egui): type a sentence, inspect every head, export PNGs.

#[allow(clippy::module_inception)] // app/app.rs holds the eframe::App, as in the house layout
pub mod app;
pub mod attribution;
pub mod command;
pub mod compare;
pub mod core;
pub mod data;
pub mod derive;
pub mod experts;
pub mod features;
pub mod figure;
pub mod generation;
pub mod graph;
pub mod handle;
pub mod intervene;
pub mod lab;
pub mod legacy;
pub mod lens;
pub mod patching;
pub mod rollout;
pub mod runs;
pub mod session;
pub mod slot;
pub mod state;
pub mod tasks;
pub mod text;
pub mod ui;
pub mod views;
pub mod widgets;
pub mod worker;

use std::path::PathBuf;

pub use app::{SAVE_AFTER, Startup};
pub use command::{Command, Commands, Setting};
pub use core::AttnvizApp;
pub use data::{Status, ViewData};
pub use rollout::{Flow, FlowKey};

/// Opens the desktop app window.
/// OpenGL (glow) unless `ATTNVIZ_RENDERER=wgpu`: without a GPU (VMs, remote desktops, laptops
/// without drivers) Mesa's software OpenGL draws a frame of this app several times faster than its
/// software Vulkan, and with a GPU either is fast.
fn renderer() -> eframe::Renderer {
    match std::env::var("ATTNVIZ_RENDERER").as_deref() {
        Ok("wgpu") => eframe::Renderer::Wgpu,
        _ => eframe::Renderer::Glow,
    }
}

pub fn run_app(model: Option<PathBuf>, text: Option<String>, text_pair: Option<String>) -> anyhow::Result<()> {
    run_app_with(Startup { model_dir: model, text, text_pair, ..Startup::default() })
}

/// Opens the desktop app window as `startup` says.
pub fn run_app_with(startup: Startup) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("attnviz")
            .with_app_id("attnviz")
            .with_inner_size([1360.0, 860.0])
            .with_min_inner_size([640.0, 420.0])
            .with_drag_and_drop(true),
        renderer: renderer(),
        ..Default::default()
    };
    eframe::run_native("attnviz", options, Box::new(move |cc| Ok(Box::new(AttnvizApp::new(cc, startup)))))
        .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
