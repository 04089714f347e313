//! The training lab's curves as charts: what the panel plots and what Export writes (PNG, SVG, PDF,
//! or the numbers as CSV / JSON / NPZ), from one list — and `attnviz train --plots` the same.

use std::sync::Arc;

use crate::export::Figure;
use crate::render::{Chart, Series};
use crate::train::{Evaluation, TaskKind, TrainConfig};

/// The lab's charts: the training and held-out losses; the task's metric (the best head's
/// induction score, or the held-out accuracy, with the order-dependent sentences' for the
/// sentiment task); for the induction task each head's induction score. `losses` are
/// `(step, loss)`.
pub fn charts(cfg: &TrainConfig, losses: &[[f64; 2]], evaluations: &[Evaluation]) -> Vec<Chart> {
    let induction = cfg.task == TaskKind::Induction;
    let at = |value: fn(&Evaluation) -> Option<f32>| -> Vec<[f64; 2]> {
        evaluations.iter().filter_map(|e| Some([e.step as f64, f64::from(value(e)?)])).collect()
    };
    let mut out = vec![Chart {
        title: format!("Loss · {}", cfg.describe()),
        x_axis: "step".into(),
        y_axis: "loss (cross-entropy)".into(),
        series: vec![
            Series { name: "training loss".into(), points: losses.to_vec(), dots: false },
            Series {
                name: if induction { "held-out loss (repeated half)" } else { "held-out loss" }.into(),
                points: at(|e| Some(e.held_out_loss)),
                dots: true,
            },
        ],
        x_include: vec![0.0],
        y_include: vec![0.0],
    }];
    let mut metric = vec![Series {
        name: if induction { "induction score (best head)" } else { "held-out accuracy" }.into(),
        points: at(|e| Some(e.metric)),
        dots: false,
    }];
    let order = at(|e| e.order_accuracy);
    if !order.is_empty() {
        metric.push(Series { name: "order-dependent accuracy".into(), points: order, dots: false });
    }
    out.push(Chart {
        title: if induction { "The best head's induction score" } else { "Held-out accuracy" }.into(),
        x_axis: "step".into(),
        y_axis: if induction { "induction score" } else { "accuracy" }.into(),
        series: metric,
        x_include: vec![0.0],
        y_include: vec![0.0, 1.0],
    });
    let count = evaluations.iter().map(|e| e.head_scores.len()).max().unwrap_or(0);
    if induction && count > 0 {
        let heads = cfg.heads.max(1);
        let series = (0..count)
            .map(|i| Series {
                name: format!("L{} H{}", i / heads, i % heads),
                points: evaluations
                    .iter()
                    .filter_map(|e| Some([e.step as f64, f64::from(*e.head_scores.get(i)?)]))
                    .collect(),
                dots: false,
            })
            .collect();
        out.push(Chart {
            title: "Each head's induction score (the bump: an induction head forming)".into(),
            x_axis: "step".into(),
            y_axis: "induction score".into(),
            series,
            x_include: vec![0.0],
            y_include: vec![0.0, 1.0],
        });
    }
    out
}

/// The charts as the figure Export writes.
pub fn figure(cfg: &TrainConfig, losses: &[[f64; 2]], evaluations: &[Evaluation]) -> Figure {
    Figure::Charts(Arc::new(charts(cfg, losses, evaluations)))
}

/// The file name an export of the lab's plots gets by default.
pub fn export_name(cfg: &TrainConfig) -> String {
    format!("attnviz-training-{}.png", cfg.task.name())
}

/// A trainer's losses (one per step, from step 1) as `(step, loss)`.
pub fn steps_and_losses(losses: &[f32]) -> Vec<[f64; 2]> {
    losses.iter().enumerate().map(|(i, &l)| [(i + 1) as f64, f64::from(l)]).collect()
}
