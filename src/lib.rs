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

/// The unit tests run on the binary's allocator ([`alloc::Allocator`]; `src/main.rs` installs it).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;
