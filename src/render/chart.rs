//! Line charts (the training lab's curves): series of (x, y) points on labelled axes with round
//! tick marks, a legend beside the plot. Laid out once as a [`Drawing`], as every figure is.

use super::canvas::Stroke;
use super::draw::{Anchor, Drawing, Item};
use super::text::text_width;
use super::{AXIS_PX, LABEL_PX, TITLE_PX, Theme, head_colors};

/// One curve of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name, in the legend and as the column of its numbers.
    pub name: String,
    /// Its points, (x, y), in increasing x.
    pub points: Vec<[f64; 2]>,
    /// Drawn as dots instead of a line (values measured now and then, as evaluations are).
    pub dots: bool,
}

/// A line chart: series on labelled axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// The horizontal axis's title.
    pub x_axis: String,
    /// The vertical axis's title.
    pub y_axis: String,
    /// The curves.
    pub series: Vec<Series>,
    /// Values the horizontal axis shows whatever the data (step 0).
    pub x_include: Vec<f64>,
    /// Values the vertical axis shows whatever the data (0 and 1 for a score).
    pub y_include: Vec<f64>,
}

/// Most points a series draws (longer ones are thinned to every k-th point; its numbers keep all).
pub const CHART_POINTS: usize = 1500;

/// Every `k`-th point, so that at most [`CHART_POINTS`] remain.
pub fn thinned(points: &[[f64; 2]]) -> Vec<[f64; 2]> {
    let k = points.len().div_ceil(CHART_POINTS).max(1);
    points.iter().step_by(k).copied().collect()
}

/// The round step (1, 2 or 5 × 10ⁿ) at least `least` long; NaN when `least` is not positive.
pub fn round_step(least: f64) -> f64 {
    if !(least.is_finite() && least > 0.0) {
        return f64::NAN;
    }
    let power = 10f64.powf(least.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|&s| s >= least).unwrap_or(10.0 * power)
}

/// The multiples of `step` within `lo..=hi` (at most 1000).
pub fn marks_between(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    if !(step.is_finite() && step > 0.0 && lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Vec::new();
    }
    #[allow(clippy::cast_possible_truncation)] // bounded by the range over its step, and taken 1000 at most
    let (first, last) = ((lo / step).ceil() as i64, (hi / step).floor() as i64);
    #[allow(clippy::cast_precision_loss)] // a thousand marks at most
    (first..=last).take(1000).map(|i| i as f64 * step).collect()
}

/// A tick's label: as many decimals as the step needs.
fn mark_label(value: f64, step: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a few decimals
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    // −0 reads as 0.
    let value = if value.abs() < step * 1e-9 { 0.0 } else { value };
    format!("{value:.decimals$}")
}

/// The range a chart's axis spans: the values' (and `include`'s), widened when empty or flat.
fn span(values: impl Iterator<Item = f64>, include: &[f64], pad: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.chain(include.iter().copied()).filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let margin = (hi - lo) * pad;
    (lo - margin, hi + margin)
}

/// The chart laid out: title, plot frame, grid, round ticks with labels on both axes, axis titles,
/// the curves clipped to the plot, and the legend on the right.
pub fn chart_drawing(chart: &Chart, theme: Theme, scale: f32) -> Drawing {
    let s = super::clamp_scale(scale);
    let (fg, muted) = (theme.foreground(), theme.muted());
    let grid = match theme {
        Theme::Light => [228, 228, 232, 255],
        Theme::Dark => [62, 63, 68, 255],
    };
    let colors = head_colors(chart.series.len());
    let legend_w = chart.series.iter().map(|c| text_width(&c.name, LABEL_PX * s)).fold(0.0, f32::max) + 28.0 * s;
    let (plot_w, plot_h) = (520.0 * s, 220.0 * s);
    let (left, top) = (78.0 * s, 40.0 * s);
    let width = (left + plot_w + 16.0 * s + legend_w).max(text_width(&chart.title, TITLE_PX * s) + 24.0 * s);
    let height = (top + plot_h + 52.0 * s).max(top + 18.0 * s * chart.series.len() as f32 + 8.0 * s);
    let mut d = Drawing::new(width, height, theme.background(), &chart.title);
    d.text(&chart.title, 12.0 * s, 18.0 * s, TITLE_PX * s, Anchor::Start, fg);

    let points = || chart.series.iter().flat_map(|c| c.points.iter());
    let (x_lo, x_hi) = span(points().map(|p| p[0]), &chart.x_include, 0.0);
    let (y_lo, y_hi) = span(points().map(|p| p[1]), &chart.y_include, 0.05);
    #[allow(clippy::cast_possible_truncation)] // pixels
    let screen_from_value = |x: f64, y: f64| {
        let sx = left + ((x - x_lo) / (x_hi - x_lo)) as f32 * plot_w;
        let sy = top + plot_h - ((y - y_lo) / (y_hi - y_lo)) as f32 * plot_h;
        (sx, sy)
    };
    let line = |from: (f32, f32), to: (f32, f32), color: [u8; 4]| Stroke { from, to, paints: vec![(color, 1.0)] };

    // Grid and ticks: marks at least 80 (x) and 36 (y) pixels apart.
    let x_step = round_step((x_hi - x_lo) * f64::from(80.0 * s / plot_w));
    let y_step = round_step((y_hi - y_lo) * f64::from(36.0 * s / plot_h));
    let mut grid_lines = Vec::new();
    let mut ticks = Vec::new();
    for x in marks_between(x_lo, x_hi, x_step) {
        let (sx, _) = screen_from_value(x, y_lo);
        grid_lines.push(line((sx, top), (sx, top + plot_h), grid));
        ticks.push(line((sx, top + plot_h), (sx, top + plot_h + 4.0 * s), muted));
        d.items.push(Item::Text(super::draw::TextRun {
            text: mark_label(x, x_step),
            x: sx,
            y: top + plot_h + 13.0 * s,
            px: LABEL_PX * s,
            anchor: Anchor::Middle,
            color: fg,
            up: false,
        }));
    }
    for y in marks_between(y_lo, y_hi, y_step) {
        let (_, sy) = screen_from_value(x_lo, y);
        grid_lines.push(line((left, sy), (left + plot_w, sy), grid));
        ticks.push(line((left - 4.0 * s, sy), (left, sy), muted));
        d.text(&mark_label(y, y_step), left - 7.0 * s, sy, LABEL_PX * s, Anchor::End, fg);
    }
    d.items.insert(0, Item::Lines { width: s, strokes: grid_lines });
    d.items.push(Item::Lines { width: s, strokes: ticks });
    d.frame(left, top, plot_w, plot_h, muted);
    d.text(&chart.x_axis, left + plot_w / 2.0, top + plot_h + 34.0 * s, AXIS_PX * s, Anchor::Middle, muted);
    d.text_up(&chart.y_axis, 14.0 * s, top + plot_h / 2.0, AXIS_PX * s, Anchor::Middle, muted);

    // The curves, and the legend.
    let inside = |v: f64, lo: f64, hi: f64| v.is_finite() && v >= lo && v <= hi;
    for (i, (series, rgb)) in chart.series.iter().zip(&colors).enumerate() {
        let color = [rgb[0], rgb[1], rgb[2], 255];
        let shown: Vec<(f32, f32)> = thinned(&series.points)
            .into_iter()
            .filter(|p| inside(p[0], x_lo, x_hi) && inside(p[1], y_lo, y_hi))
            .map(|p| screen_from_value(p[0], p[1]))
            .collect();
        let ly = top + 9.0 * s + 18.0 * s * i as f32;
        let lx = left + plot_w + 16.0 * s;
        if series.dots {
            let r = 2.5 * s;
            for &(x, y) in &shown {
                d.rect(x - r, y - r, 2.0 * r, 2.0 * r, color);
            }
            d.rect(lx + 7.0 * s - r, ly - r, 2.0 * r, 2.0 * r, color);
        } else {
            let strokes = shown.windows(2).map(|w| line(w[0], w[1], color)).collect();
            d.items.push(Item::Lines { width: 1.5 * s, strokes });
            d.items.push(Item::Lines { width: 2.0 * s, strokes: vec![line((lx, ly), (lx + 16.0 * s, ly), color)] });
        }
        d.text(&series.name, lx + 22.0 * s, ly, LABEL_PX * s, Anchor::Start, fg);
    }
    d
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // round marks are exact
mod tests {
    use super::*;

    fn texts(d: &Drawing) -> Vec<String> {
        d.items.iter().filter_map(|i| if let Item::Text(t) = i { Some(t.text.clone()) } else { None }).collect()
    }

    #[test]
    fn marks_are_round_and_labelled_with_the_decimals_they_need() {
        assert_eq!(round_step(0.37), 0.5);
        assert_eq!(round_step(130.0), 200.0);
        assert!(round_step(0.0).is_nan());
        assert_eq!(marks_between(-0.2, 4.4, 2.0), vec![0.0, 2.0, 4.0]);
        assert!(marks_between(0.0, f64::NAN, 1.0).is_empty());
        assert_eq!(mark_label(0.1 + 0.2, 0.1), "0.3");
        assert_eq!(mark_label(500.0, 500.0), "500");
        assert_eq!(mark_label(-1e-17, 0.2), "0.0");
    }

    #[test]
    fn a_chart_has_its_titles_round_ticks_on_both_axes_and_a_legend() {
        let loss: Vec<[f64; 2]> = (1..=300).map(|i| [f64::from(i), 4.0 / f64::from(i).sqrt()]).collect();
        let chart = Chart {
            title: "Loss".into(),
            x_axis: "step".into(),
            y_axis: "loss".into(),
            series: vec![
                Series { name: "training loss".into(), points: loss, dots: false },
                Series { name: "held out".into(), points: vec![[100.0, 0.5], [200.0, 0.3]], dots: true },
            ],
            x_include: vec![0.0],
            y_include: vec![0.0],
        };
        let d = chart_drawing(&chart, Theme::Light, 1.0);
        let t = texts(&d);
        for want in ["Loss", "step", "loss", "training loss", "held out", "0", "100", "200", "300", "1", "2", "3", "4"]
        {
            assert!(t.iter().any(|x| x == want), "{want} in {t:?}");
        }
        // The y axis starts at 0 (included) and the loss's 299 segments are drawn.
        let segments: usize = d
            .items
            .iter()
            .map(
                |i| if let Item::Lines { width, strokes } = i { usize::from(*width == 1.5) * strokes.len() } else { 0 },
            )
            .sum();
        assert_eq!(segments, 299);
        // Scaled twice, twice the size.
        let big = chart_drawing(&chart, Theme::Dark, 2.0);
        assert!((big.width - 2.0 * d.width).abs() < 1.0 && (big.height - 2.0 * d.height).abs() < 1.0);
    }
}
