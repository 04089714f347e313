//! The app's views, one per file. Each view is a state struct with
//! `ui(&mut self, ui, &ViewData, &mut Commands)`: it reads plain data, draws it and pushes
//! commands; it never imports the app. `app/ui.rs` lays them out. Expensive derived data is computed off the UI thread
//! (`app::derive`); a view keeps only what it draws (textures), keyed by what they depend on.

pub mod export_dialog;
pub mod head_view;
pub mod heatmap_view;
pub mod input_bar;
pub mod model_view;
pub mod neuron_view;
pub mod pe_view;
pub mod playground_panel;
pub mod side_panel;
pub mod stats_view;
