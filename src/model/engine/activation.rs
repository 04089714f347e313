//! The feed-forward activation, shared by a block's MLP and each expert of a mixture.

use crate::model::describe::Activation;
use crate::model::kernels;

/// The feed-forward activation on `v`, in place.
pub(super) fn activate(activation: Activation, v: &mut [f32]) {
    match activation {
        // GELUActivation: nn.functional.gelu, the exact erf form.
        Activation::Gelu => kernels::gelu_erf_in_place(v),
        // NewGELUActivation / gelu_pytorch_tanh: the tanh approximation.
        Activation::GeluTanh => kernels::gelu_tanh_in_place(v),
        Activation::Relu => kernels::relu_in_place(v),
        Activation::Silu => kernels::silu_in_place(v),
    }
}
