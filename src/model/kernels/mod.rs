//! The kernels, in one room: the matrix products in one fixed order (`gemm`), the element-wise
//! operations (softmax, norms, activations: `elementwise`), llama.cpp's GGUF block kinds with one
//! decoder each (`blocks`), and the one dispatch on the running CPU's instructions (`simd`).
//! Plain slices in, plain slices out: the engine calls the room, the room imports nothing of the
//! engine (nor of anything above it). The crate's SIMD `unsafe` lives here.

mod blocks;
mod elementwise;
mod gemm;
mod simd;

pub use blocks::{BlockKind, widen};
pub use elementwise::{
    LANES, Mask, add_panels, clamped_swiglu, dot, dot_finish, erf_f32, exp_f32, gelu_erf_in_place, gelu_tanh_in_place,
    layer_norm_rows, norm_scales, relu_in_place, rms_norm_rows, silu_in_place, softcap_in_place, softmax_rows,
    softmax_rows_with_sink,
};
pub use gemm::{BLOCK_ROWS, MatMut, MatRef, block_dots, block_product, matmul};
