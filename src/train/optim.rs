//! `AdamW` over the network's parameters: candle-nn's update (`candle_nn::AdamW`, the same
//! operations in the same order, in f32 — so the same bits), in one sweep per parameter instead of
//! fifteen tensor operations that each allocate. At the lab's sizes those small operations cost
//! more than the arithmetic.

use candle_core::{DType, Result, Tensor, Var};
use candle_nn::ParamsAdamW;

/// A parameter and its two moments.
#[derive(Debug)]
struct Slot {
    var: Var,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// The optimiser.
#[derive(Debug)]
pub struct AdamW {
    slots: Vec<Slot>,
    /// Its settings (the learning rate changes between steps).
    pub params: ParamsAdamW,
    step_t: i32,
}

impl AdamW {
    /// For these f32 parameters.
    pub fn new(vars: Vec<Var>, params: ParamsAdamW) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|var| {
                if var.dtype() != DType::F32 {
                    candle_core::bail!("the optimiser steps f32 parameters, got {:?}", var.dtype());
                }
                let n = var.elem_count();
                Ok(Slot { var, m: vec![0.0; n], v: vec![0.0; n] })
            })
            .collect::<Result<_>>()?;
        Ok(Self { slots, params, step_t: 0 })
    }

    /// Sets the learning rate of the next step.
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.params.lr = lr;
    }

    /// The gradients of `loss`, then one step (as candle-nn's `backward_step`).
    #[cfg(test)]
    fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.step_with(|t| Ok(grads.get(t).cloned()))
    }

    /// One step on the gradients `grad` gives for each parameter (parameters without one stay).
    #[allow(clippy::cast_possible_truncation)] // candle-nn rounds its f64 constants to f32 alike
    pub fn step_with(&mut self, grad: impl Fn(&Tensor) -> Result<Option<Tensor>>) -> Result<()> {
        self.step_t += 1;
        let p = &self.params;
        let (b1, b2) = (p.beta1, p.beta2);
        // As candle-nn: the f64 constants, each rounded to f32 where it meets the tensors.
        let scale_m = (1f64 / (1f64 - b1.powi(self.step_t))) as f32;
        let scale_v = (1f64 / (1f64 - b2.powi(self.step_t))) as f32;
        let decay = (1f64 - p.lr * p.weight_decay) as f32;
        let (b1f, one_b1, b2f, one_b2) = (b1 as f32, (1.0 - b1) as f32, b2 as f32, (1.0 - b2) as f32);
        let (eps, lr) = (p.eps as f32, p.lr as f32);
        for slot in &mut self.slots {
            let Some(g) = grad(slot.var.as_tensor())? else { continue };
            let g: Vec<f32> = g.flatten_all()?.to_vec1()?;
            let mut theta: Vec<f32> = slot.var.as_tensor().flatten_all()?.to_vec1()?;
            for (((t, m), v), &g) in theta.iter_mut().zip(&mut slot.m).zip(&mut slot.v).zip(&g) {
                *m = *m * b1f + g * one_b1;
                *v = *v * b2f + (g * g) * one_b2;
                let (m_hat, v_hat) = (*m * scale_m, *v * scale_v);
                *t = *t * decay - m_hat / (v_hat.sqrt() + eps) * lr;
            }
            slot.var.set(&Tensor::from_vec(theta, slot.var.shape(), slot.var.device())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the same operations give the same bits
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_nn::Optimizer;

    /// Three steps of this optimiser and of candle-nn's `AdamW` from the same start on the same
    /// losses: the same parameters, bit for bit.
    #[test]
    fn steps_as_candle_nn_adamw_does() {
        let dev = Device::Cpu;
        let start = [Tensor::randn(0f32, 1.0, (3, 4), &dev).unwrap(), Tensor::randn(0f32, 1.0, 5, &dev).unwrap()];
        let vars = |s: &[Tensor]| s.iter().map(|t| Var::from_tensor(t).unwrap()).collect::<Vec<_>>();
        let (ours, theirs) = (vars(&start), vars(&start));
        let params = ParamsAdamW { lr: 0.01, weight_decay: 0.1, ..ParamsAdamW::default() };
        let mut a = AdamW::new(ours.clone(), params.clone()).unwrap();
        let mut b = candle_nn::AdamW::new(theirs.clone(), params).unwrap();
        let loss = |v: &[Var]| {
            let x = v[0].as_tensor().sqr().unwrap().sum_all().unwrap();
            (x + v[1].as_tensor().sin().unwrap().sum_all().unwrap()).unwrap()
        };
        for step in 0..3 {
            let lr = 0.01 / f64::from(step + 1);
            a.set_learning_rate(lr);
            b.set_learning_rate(lr);
            a.backward_step(&loss(&ours)).unwrap();
            b.backward_step(&loss(&theirs)).unwrap();
            for (x, y) in ours.iter().zip(&theirs) {
                let x: Vec<f32> = x.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
                let y: Vec<f32> = y.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
                assert_eq!(x, y, "step {step}");
            }
        }
        assert_ne!(ours[0].as_tensor().to_vec2::<f32>().unwrap(), start[0].to_vec2::<f32>().unwrap());
    }
}
