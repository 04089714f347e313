//! Plain attention data and what is derived from it: no Candle, no egui.

pub mod attention;
pub mod attribution;
pub mod contrib;
pub mod cross;
pub mod experts;
pub mod import;
pub mod lens;
pub mod long;
pub mod npz;
pub mod patching;
pub mod pe;
pub mod roles;
pub mod rollout;
pub mod run;
pub mod select;
pub mod sinks;
pub mod stack;
pub mod stats;
pub mod tokens;
pub mod words;

pub use attention::{Attention, HeadVectors, ShapeError};
pub use cross::DecoderRun;
pub use pe::{PeLayout, PeParams, PositionalEncoding};
pub use run::Run;
pub use sinks::Sinks;
pub use stack::Stack;
pub use stats::{HeadStats, Statistic};
pub use tokens::Tokens;
