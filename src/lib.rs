//! attnviz: see what every attention head of a transformer looks at.
//!
//! Data flows one way: text → tokenizer → [`model`] → plain [`analysis::Attention`] →
//! [`render`] images and the [`app`] views.

pub mod alloc;
pub mod analysis;
pub mod app;
pub mod atomic;
pub mod cli;
pub mod export;
pub mod model;
pub mod render;
pub mod train;
