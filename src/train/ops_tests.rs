//! Unit tests of `ops.rs`, in a file of their own.
#![allow(clippy::float_cmp)] // masked probabilities are exactly 0

use super::*;
use crate::train::attention::Attention;

/// Every value of `var`'s gradient in `grads` against the central difference of `loss` (called
/// with `var`'s values, one of them moved by ±1e-6), to `tol`.
fn check_gradient(
    what: &str,
    var: &Var,
    grads: &candle_core::backprop::GradStore,
    tol: f64,
    loss: impl Fn(&Tensor) -> f64,
) {
    let g = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let base = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
    for i in 0..base.len() {
        let at = |delta: f64| {
            let mut v = base.clone();
            v[i] += delta;
            loss(&Tensor::from_vec(v, var.as_tensor().shape(), var.device()).unwrap())
        };
        let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
        assert!((numeric - g[i]).abs() < tol, "{what} grad {i}: {numeric} vs {}", g[i]);
    }
}
use candle_core::{Device, Var};

/// Both operations' gradients against central differences, in f64.
#[test]
fn gradients_match_finite_differences() {
    let dev = Device::Cpu;
    // Two sequences of 3 tokens, d 4, 2 heads; the second sequence 2 tokens long.
    let s = Var::from_tensor(&Tensor::randn(0f64, 1.0, (6, 12), &dev).unwrap()).unwrap();
    let w = Tensor::randn(0f64, 1.0, (6, 4), &dev).unwrap();
    for causal in [true, false] {
        let op = Attention { heads: 2, len: 3, scale: 0.7, causal, lengths: Some(Arc::new(vec![3, 2])) };
        let loss = |s: &Tensor| op.apply(s).unwrap().mul(&w).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
        let grads = op.apply(s.as_tensor()).unwrap().mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
        check_gradient(&format!("attention (causal {causal})"), &s, &grads, 1e-6, loss);
        // The output is the probabilities times the values, as unfused operations compute it.
        let p = op.probabilities(s.as_tensor()).unwrap();
        let v = s.as_tensor().narrow(1, 8, 4).unwrap().reshape((2, 3, 2, 2)).unwrap().transpose(1, 2).unwrap();
        let want = p.matmul(&v.contiguous().unwrap()).unwrap().transpose(1, 2).unwrap().reshape((6, 4)).unwrap();
        let got = op.apply(s.as_tensor()).unwrap();
        let diff = (want - got).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f64>().unwrap();
        assert!(diff < 1e-12, "{diff}");
        // Masked keys get exactly zero probability; rows sum to 1.
        let p = p.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        assert_eq!(p[1] == 0.0, causal); // sequence 0, head 0, query 0, key 1: after the query
        assert_eq!(p[2 * 2 * 9 - 1], 0.0); // sequence 1, head 1, query 2, key 2: padding
        assert!(p.chunks(3).all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    }

    // The bias's gradient is the sum of the output gradient's rows; x's is the output gradient.
    let x = Var::from_tensor(&Tensor::randn(0f64, 1.0, (4, 3), &dev).unwrap()).unwrap();
    let b = Var::from_tensor(&Tensor::randn(0f64, 1.0, 3, &dev).unwrap()).unwrap();
    let wt = Tensor::randn(0f64, 1.0, (4, 3), &dev).unwrap();
    let y = AddBias.apply(&x, &b).unwrap();
    assert_eq!(y.to_vec2::<f64>().unwrap(), x.broadcast_add(&b).unwrap().to_vec2::<f64>().unwrap());
    let grads = y.mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(grads.get(&x).unwrap().to_vec2::<f64>().unwrap(), wt.to_vec2::<f64>().unwrap());
    let db = grads.get(&b).unwrap().to_vec1::<f64>().unwrap();
    let want = wt.sum(0).unwrap().to_vec1::<f64>().unwrap();
    assert!(db.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12), "{db:?} vs {want:?}");

    let x = Var::from_tensor(&Tensor::randn(0f64, 1.0, (3, 5), &dev).unwrap()).unwrap();
    let gamma = Var::from_tensor(&Tensor::randn(1f64, 0.3, 5, &dev).unwrap()).unwrap();
    let beta = Var::from_tensor(&Tensor::randn(0f64, 0.3, 5, &dev).unwrap()).unwrap();
    let wt = Tensor::randn(0f64, 1.0, (3, 5), &dev).unwrap();
    let ln = LayerNorm { eps: 1e-5 };
    let f = |x: &Tensor, g: &Tensor, b: &Tensor| {
        ln.apply(x, g, b).unwrap().mul(&wt).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap()
    };
    let grads = ln.apply(&x, &gamma, &beta).unwrap().mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
    check_gradient("layer norm x", &x, &grads, 1e-6, |t| f(t, &gamma, &beta));
    check_gradient("layer norm gamma", &gamma, &grads, 1e-6, |t| f(&x, t, &beta));
    check_gradient("layer norm beta", &beta, &grads, 1e-6, |t| f(&x, &gamma, t));
}

/// The f32 attention (the engine's kernels) against the f64 loops, forward and backward, for
/// causal and padded sequences.
#[test]
fn attention_in_f32_matches_the_f64_loops() {
    let dev = Device::Cpu;
    // Five tokens (one block of queries), and 37 (the causal products in blocks of 16, the last
    // one short).
    let cases = [
        (5, vec![(true, None), (false, Some(vec![5, 2, 0])), (true, Some(vec![3, 5, 1]))]),
        (37, vec![(true, None), (false, Some(vec![37, 20, 1])), (true, Some(vec![30, 37, 17]))]),
    ];
    for (len, masks) in cases {
        let x = Tensor::randn(0f64, 1.0, (3 * len, 3 * 8), &dev).unwrap();
        let g = Tensor::randn(0f64, 1.0, (3 * len, 8), &dev).unwrap();
        for (causal, lengths) in masks {
            let op = Attention { heads: 2, len, scale: 0.5, causal, lengths: lengths.map(Arc::new) };
            let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (x32, g32) = (f(&x), f(&g));
            let (x64, g64) = (
                x.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
                g.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            );
            let close = |a: &[f32], b: &[f64], what: &str| {
                assert_eq!(a.len(), b.len());
                let diff = a.iter().zip(b).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max);
                assert!(diff < 1e-5, "{what} ({len} tokens, causal {causal}) off by {diff}");
            };
            let (mut kept, forward) = (Vec::new(), op.forward(&x64, 8));
            close(&op.forward_f32(&x32, 8, None), &forward, "forward");
            close(&op.forward_f32(&x32, 8, Some(&mut kept)), &forward, "forward keeping the probabilities");
            let backward = op.backward(&x64, &g64, 8);
            close(&op.backward_f32(&x32, &g32, 8, None), &backward, "backward");
            close(&op.backward_f32(&x32, &g32, 8, Some(&kept)), &backward, "backward on the kept probabilities");
        }
    }
}

/// The product in f32 (the engine's kernels, rows split between threads) equals the f64 triple
/// loop for every transposition, large enough to be split; its gradients and the
/// cross-entropy's match central differences in f64.
#[test]
fn products_and_cross_entropy_match_plain_formulas_and_differences() {
    let dev = Device::Cpu;
    let (m, k, n) = (100, 64, 48);
    assert!(m * k * n >= PARALLEL_MULADDS);
    for (a_t, b_t) in [(false, false), (false, true), (true, false), (true, true)] {
        let op = Product { a_t, b_t };
        let a = Tensor::randn(0f64, 1.0, if a_t { (k, m) } else { (m, k) }, &dev).unwrap();
        let b = Tensor::randn(0f64, 1.0, if b_t { (n, k) } else { (k, n) }, &dev).unwrap();
        let want = op.apply(&a, &b).unwrap();
        let plain = |x: &Tensor, t: bool| if t { x.t().unwrap() } else { x.clone() };
        let reference = plain(&a, a_t).matmul(&plain(&b, b_t)).unwrap();
        let d = (&want - reference).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f64>().unwrap();
        assert!(d < 1e-12, "f64 product ({a_t}, {b_t}) off by {d}");
        let f = |x: &Tensor| x.to_dtype(DType::F32).unwrap();
        let got = op.apply(&f(&a), &f(&b)).unwrap().to_dtype(DType::F64).unwrap();
        let d = (&want - got).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f64>().unwrap();
        assert!(d < 1e-4, "f32 product ({a_t}, {b_t}) off by {d}");

        // Gradients of a small one against central differences.
        let a = Var::from_tensor(&Tensor::randn(0f64, 1.0, if a_t { (3, 4) } else { (4, 3) }, &dev).unwrap()).unwrap();
        let b = Var::from_tensor(&Tensor::randn(0f64, 1.0, if b_t { (5, 3) } else { (3, 5) }, &dev).unwrap()).unwrap();
        let w = Tensor::randn(0f64, 1.0, (4, 5), &dev).unwrap();
        let loss = |a: &Tensor, b: &Tensor| op.apply(a, b).unwrap().mul(&w).unwrap().sum_all().unwrap();
        let grads = loss(&a, &b).backward().unwrap();
        let value = |l: Tensor| l.to_scalar::<f64>().unwrap();
        check_gradient(&format!("product ({a_t}, {b_t}) a"), &a, &grads, 1e-6, |t| value(loss(t, &b)));
        check_gradient(&format!("product ({a_t}, {b_t}) b"), &b, &grads, 1e-6, |t| value(loss(&a, t)));
    }

    // Cross-entropy: the mean over the counted rows of −log softmax at the target, as the
    // unfused operations compute it; its gradient against central differences.
    let x = Var::from_tensor(&Tensor::randn(0f64, 2.0, (5, 4), &dev).unwrap()).unwrap();
    let ce = CrossEntropy { targets: Arc::new(vec![2, CrossEntropy::SKIP, 0, 3, 3]), mean_over: None };
    let got = ce.apply(&x).unwrap().to_scalar::<f64>().unwrap();
    let rows = x.as_tensor().to_vec2::<f64>().unwrap();
    let picked: Vec<f64> = [(0, 2), (2, 0), (3, 3), (4, 3)]
        .iter()
        .map(|&(r, t): &(usize, usize)| {
            let lse = rows[r].iter().map(|v| v.exp()).sum::<f64>().ln();
            rows[r][t] - lse
        })
        .collect();
    let want = -picked.iter().sum::<f64>() / 4.0;
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    let scale = 0.7;
    let grads = (ce.apply(&x).unwrap() * scale).unwrap().backward().unwrap();
    let g = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
    assert!(g[4..8].iter().all(|&v| v == 0.0), "a skipped row has no gradient");
    check_gradient("cross-entropy", &x, &grads, 1e-7, |t| scale * ce.apply(t).unwrap().to_scalar::<f64>().unwrap());
    // Parts of the rows, each its share of the whole mean (`mean_over`), add up to it; a part
    // cannot claim more targets than the whole.
    let part = |r: std::ops::Range<usize>| {
        let targets = Arc::new(ce.targets[r.clone()].to_vec());
        let rows = x.as_tensor().narrow(0, r.start, r.len()).unwrap();
        CrossEntropy { targets, mean_over: Some(4) }.apply(&rows).unwrap().to_scalar::<f64>().unwrap()
    };
    let parts = part(0..2) + part(2..5);
    assert!((parts - want).abs() < 1e-12, "{parts} vs {want}");
    let too_many = CrossEntropy { targets: Arc::new(vec![1, 2]), mean_over: Some(1) };
    assert!(too_many.apply(&x.as_tensor().narrow(0, 0, 2).unwrap()).is_err());
    assert!(
        CrossEntropy { targets: Arc::new(vec![4]), mean_over: None }
            .apply(&x.as_tensor().narrow(0, 0, 1).unwrap())
            .is_err()
    );
}
