//! Plain attention data and what is derived from it: no Candle, no egui.

pub mod attention;
pub mod npz;
pub mod pe;
pub mod run;
pub mod select;
pub mod tokens;

pub use attention::{Attention, HeadVectors, ShapeError};
pub use pe::{PeLayout, PeParams, PositionalEncoding};
pub use run::Run;
pub use tokens::Tokens;
