//! The colour bar beside a figure, and round tick values with consistently formatted labels.

use super::colormap::Colormap;
use super::draw::{Anchor, Cells, Drawing, Item};
use super::text::{line_height, text_width};
use super::{LABEL_PX, Theme};

/// One labelled mark on a scale.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tick {
    /// Position along the scale, 0 = low end, 1 = high end.
    pub t: f32,
    /// Text shown beside it.
    pub label: String,
}

/// A vertical colour bar: sizes in pixels, already scaled.
#[derive(Debug, Clone)]
pub(crate) struct Colorbar {
    pub ticks: Vec<Tick>,
    pub bar_width: f32,
    pub tick_len: f32,
    pub font_px: f32,
    /// Gap between tick mark and label.
    pub pad: f32,
}

impl Colorbar {
    /// A bar for `scale` with the given ticks.
    pub fn new(ticks: Vec<Tick>, scale: f32) -> Self {
        Self { ticks, bar_width: 14.0 * scale, tick_len: 4.0 * scale, font_px: LABEL_PX * scale, pad: 3.0 * scale }
    }

    /// Total width: bar, ticks and the widest label.
    pub fn width(&self) -> f32 {
        let labels = self.ticks.iter().map(|t| text_width(&t.label, self.font_px)).fold(0.0, f32::max);
        self.bar_width + self.tick_len + self.pad + labels
    }

    /// How many ticks fit on a bar `height` pixels tall at this font size.
    pub fn max_ticks(height: f32, scale: f32) -> usize {
        ((height / (line_height(LABEL_PX * scale) * 2.2)).floor() as usize).clamp(2, 7)
    }

    /// Adds the bar with its top-left at (`left`, `top`) to a figure, high values on top.
    pub fn draw(&self, d: &mut Drawing, left: f32, top: f32, height: f32, cmap: Colormap, theme: Theme) {
        let (left, top, height) = (left.round(), top.round(), height.round().max(2.0));
        let lut = cmap.lut();
        let rows = height as usize;
        // One pixel-high cell per row: the gradient (an image in files with many cells).
        let rgba: Vec<u8> = (0..rows)
            .flat_map(|row| {
                let frac = 1.0 - (row as f32 + 0.5) / rows as f32;
                let [red, green, blue] = lut[(frac * 255.0).round() as usize];
                [red, green, blue, 255]
            })
            .collect();
        d.items.push(Item::Cells(Cells { x: left, y: top, cell_w: self.bar_width, cell_h: 1.0, cols: 1, rows, rgba }));
        let bar_w = self.bar_width.round();
        d.frame(left, top, bar_w, height, theme.muted());
        for tick in &self.ticks {
            let ty = top + (1.0 - tick.t.clamp(0.0, 1.0)) * (height - 1.0);
            let tx = left + bar_w;
            d.rect(tx, ty.round(), self.tick_len, 1.0_f32.max((self.tick_len / 4.0).round()), theme.muted());
            d.text(
                &tick.label,
                tx + self.tick_len + self.pad,
                ty + 0.5,
                self.font_px,
                Anchor::Start,
                theme.foreground(),
            );
        }
    }
}

/// A colour bar alone, `height` pixels tall from `lo` (bottom) to `hi` (top), its bar at the
/// left edge and round ticks right of it: the bar the app draws beside its heatmaps, laid out by
/// the same code as the exported figures' bar. The background is transparent.
pub fn colorbar_drawing((lo, hi): (f32, f32), cmap: Colormap, height: f32, scale: f32, theme: Theme) -> Drawing {
    let bar = Colorbar::new(nice_ticks(lo, hi, Colorbar::max_ticks(height, scale)), scale);
    // Half a label of room above and below for the end ticks' text.
    let overhang = (line_height(bar.font_px) / 2.0).ceil();
    let mut d = Drawing::new(bar.width().ceil(), height + 2.0 * overhang, [0, 0, 0, 0], "colour bar");
    bar.draw(&mut d, 0.0, overhang, height, cmap, theme);
    d
}

/// Ticks of a colour bar labelled only at its ends, e.g. "0" and "max".
pub(crate) fn end_ticks(low: &str, high: &str) -> Vec<Tick> {
    vec![Tick { t: 0.0, label: low.to_string() }, Tick { t: 1.0, label: high.to_string() }]
}

/// Round values between `lo` and `hi` (at most `max_count`, at least the two ends), placed and labelled.
pub(crate) fn nice_ticks(lo: f32, hi: f32, max_count: usize) -> Vec<Tick> {
    let (lo, hi) = (f64::from(lo), f64::from(hi));
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return vec![Tick { t: 0.0, label: format_values(&[lo], 1.0)[0].clone() }];
    }
    let max_count = max_count.max(2);
    let mut step = nice_step(span / (max_count - 1) as f64);
    let mut values = tick_values(lo, hi, step);
    while values.len() > max_count {
        step = nice_step(step * 1.01);
        values = tick_values(lo, hi, step);
    }
    if values.len() < 2 {
        // A range so narrow no round value falls inside: label its ends.
        values = vec![lo, hi];
        step = span;
    }
    let labels = format_values(&values, step);
    values.iter().zip(labels).map(|(&v, label)| Tick { t: ((v - lo) / span) as f32, label }).collect()
}

/// Multiples of `step` within [`lo`, `hi`] (with a little tolerance), zero snapped to exactly zero.
fn tick_values(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step - 1e-6).ceil() as i64;
    let last = (hi / step + 1e-6).floor() as i64;
    if last < first || last - first > 1000 {
        return Vec::new();
    }
    (first..=last).map(|k| if k == 0 { 0.0 } else { k as f64 * step }).collect()
}

/// The smallest of 1, 2, 2.5, 5 × 10ᵏ that is at least `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !(raw > 0.0 && raw.is_finite()) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().find(|&n| fraction <= n * (1.0 + 1e-9)).unwrap_or(10.0);
    nice * magnitude
}

/// Labels for ticks `step` apart, all with the same number of decimals (0.00, 0.25, …) or as 1.5e-4 when tiny or huge.
pub(crate) fn format_values(values: &[f64], step: f64) -> Vec<String> {
    let largest = values.iter().map(|v| v.abs()).fold(0.0, f64::max);
    let decimals = (0..=10).find(|&d| {
        let scaled = step * 10f64.powi(d);
        (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
    });
    let text = |v: f64| match decimals {
        Some(d) if d <= 3 && largest < 1e6 => format!("{v:.prec$}", prec = d as usize),
        _ => {
            if v == 0.0 {
                return "0".to_string();
            }
            let digits = (largest.log10().floor() - step.log10().floor()).clamp(0.0, 3.0) as usize;
            format!("{v:.digits$e}")
        }
    };
    values.iter().map(|&v| with_minus_sign(&text(v))).collect()
}

/// A number formatted for print: two decimals, a true minus sign, NaN as "NaN".
pub fn format_cell_value(v: f32) -> String {
    if v.is_nan() { "NaN".to_string() } else { with_minus_sign(&format!("{v:.2}")) }
}

/// Replaces the ASCII hyphen of negative numbers with the typographic minus (U+2212).
fn with_minus_sign(s: &str) -> String {
    if !s.contains('-') {
        return s.to_string();
    }
    let s =
        if s.strip_prefix('-').is_some_and(|rest| rest.chars().all(|c| c == '0' || c == '.')) { &s[1..] } else { s };
    s.replace('-', "\u{2212}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(lo: f32, hi: f32, n: usize) -> Vec<String> {
        nice_ticks(lo, hi, n).into_iter().map(|t| t.label).collect()
    }

    #[test]
    fn unit_range_gets_quarters_or_fifths() {
        assert_eq!(labels(0.0, 1.0, 5), ["0.00", "0.25", "0.50", "0.75", "1.00"]);
        assert_eq!(labels(0.0, 1.0, 3), ["0.0", "0.5", "1.0"]);
        assert_eq!(labels(-1.0, 1.0, 5), ["\u{2212}1.0", "\u{2212}0.5", "0.0", "0.5", "1.0"]);
    }

    #[test]
    fn ticks_lie_inside_the_range() {
        for (lo, hi) in [(0.013, 0.87), (-3.7, 12.2), (100.0, 64000.0), (0.0, 1e-4), (0.99999, 1.00001)] {
            let ticks = nice_ticks(lo, hi, 6);
            assert!(ticks.len() >= 2 && ticks.len() <= 6, "{lo}..{hi}: {ticks:?}");
            assert!(ticks.iter().all(|t| (-1e-4..=1.0001).contains(&t.t)), "{ticks:?}");
        }
    }

    #[test]
    fn tiny_and_huge_ranges_use_exponents() {
        let tiny = labels(0.0, 0.0004, 5);
        assert!(tiny.iter().any(|l| l.contains('e')), "{tiny:?}");
        let huge = labels(0.0, 4e7, 5);
        assert!(huge.iter().any(|l| l.contains('e')), "{huge:?}");
    }

    #[test]
    fn degenerate_ranges_do_not_panic() {
        assert_eq!(nice_ticks(1.0, 1.0, 5).len(), 1);
        assert_eq!(nice_ticks(f32::NAN, 1.0, 5).len(), 1);
        assert_eq!(nice_ticks(0.0, f32::INFINITY, 5).len(), 1);
    }

    #[test]
    fn cell_values_have_two_decimals_and_no_negative_zero() {
        assert_eq!(format_cell_value(0.254), "0.25");
        assert_eq!(format_cell_value(-0.001), "0.00");
        assert_eq!(format_cell_value(-1.5), "\u{2212}1.50");
    }
}
