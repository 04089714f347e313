//! A matrix as a full figure: title, axis labels, coloured cells, optional values, colour bar.

use image::RgbaImage;

use super::canvas::{MAX_SIDE, cell_text_rgb};
use super::colorbar::{Colorbar, format_cell_value, nice_step, nice_ticks};
use super::colormap::{Colormap, cells_rgba};
use super::draw::{Anchor, Cells, Drawing, Item, TextRun};
use super::text::{fit_text, line_height, text_width};
use super::{AXIS_PX, LABEL_PX, TITLE_PX, Theme, clamp_scale, label_or_index};

/// What to draw as a heatmap figure.
#[derive(Debug, Clone, Copy)]
pub struct HeatmapSpec<'a> {
    /// Cell values, `rows × cols`, row-major; rows without data are dropped.
    pub values: &'a [f32],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// One label per row, or empty for numeric ticks.
    pub row_labels: &'a [String],
    /// One label per column, or empty for numeric ticks.
    pub col_labels: &'a [String],
    /// Title of the vertical axis, e.g. "query".
    pub row_axis: &'a str,
    /// Title of the horizontal axis, e.g. "key".
    pub col_axis: &'a str,
    /// Title above the figure.
    pub title: &'a str,
    /// Values mapped to the ends of the colormap; `None` for the data's range (symmetric for diverging maps).
    pub range: Option<(f32, f32)>,
    /// Colormap of the cells.
    pub colormap: Colormap,
    /// Light or dark figure.
    pub theme: Theme,
    /// Size multiplier, 1..=4.
    pub scale: f32,
    /// Print each value in its cell when the cell is big enough.
    pub show_values: bool,
    /// One value per row drawn as a column of its own right of the matrix, apart from the
    /// keys and labelled "sink" (an attention sink's share of each row), or None.
    pub sink: Option<&'a [f32]>,
}

/// The label of the sink's column.
pub const SINK_LABEL: &str = "sink";

/// Largest cell side before scaling, in pixels.
const MAX_CELL: f32 = 22.0;
/// Longest side of the matrix before scaling, in pixels.
const MATRIX_BUDGET: f32 = 4096.0;
/// Longest label before scaling, in pixels; longer ones end in "…".
const MAX_LABEL: f32 = 120.0;

/// Where everything of a heatmap figure goes, in image pixels.
#[derive(Debug, Clone)]
pub(crate) struct HeatmapLayout {
    pub scale: f32,
    pub width: f32,
    pub height: f32,
    /// Rows and columns that have data.
    pub rows: usize,
    pub cols: usize,
    /// Colour range.
    pub lo: f32,
    pub hi: f32,
    /// Cells drawn: the matrix itself, or pooled when it has more cells than pixels.
    pub grid_rows: usize,
    pub grid_cols: usize,
    /// Pixels per grid cell (whole number).
    pub grid_px: f32,
    pub matrix_x: f32,
    pub matrix_y: f32,
    pub matrix_w: f32,
    pub matrix_h: f32,
    pub title_px: f32,
    pub axis_px: f32,
    pub label_px: f32,
    /// Row index and label of every row tick shown.
    pub row_ticks: Vec<(usize, String)>,
    /// Column index and label of every column tick shown.
    pub col_ticks: Vec<(usize, String)>,
    /// Column labels are drawn turned a quarter (text labels) rather than flat (numbers).
    pub col_vertical: bool,
    pub tick_len: f32,
    pub gap: f32,
    pub colorbar: Option<Colorbar>,
    pub colorbar_x: f32,
    pub colorbar_h: f32,
    /// Font size for cell values, when they are shown.
    pub value_px: Option<f32>,
    /// Left edge of the sink's column (when the spec has one) and its width.
    pub sink_x: f32,
    pub sink_w: f32,
}

impl HeatmapLayout {
    /// Where the data cells are.
    pub fn grid(&self) -> CellGrid {
        CellGrid {
            left: self.matrix_x,
            top: self.matrix_y,
            cell_w: self.matrix_w / self.cols.max(1) as f32,
            cell_h: self.matrix_h / self.rows.max(1) as f32,
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// Centre of data cell (`row`, `col`) in image pixels.
    pub fn cell_center(&self, row: usize, col: usize) -> (f32, f32) {
        self.grid().cell_center(row, col)
    }
}

/// Where the cells of a matrix are: the one cell geometry of the exported heatmap (pixels) and
/// of the app's heatmaps (points).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellGrid {
    /// Left edge of column 0.
    pub left: f32,
    /// Top edge of row 0.
    pub top: f32,
    /// Width of a cell.
    pub cell_w: f32,
    /// Height of a cell.
    pub cell_h: f32,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl CellGrid {
    /// Top-left corner of cell (`row`, `col`).
    pub fn cell_min(&self, row: usize, col: usize) -> (f32, f32) {
        (self.left + col as f32 * self.cell_w, self.top + row as f32 * self.cell_h)
    }

    /// Centre of cell (`row`, `col`).
    pub fn cell_center(&self, row: usize, col: usize) -> (f32, f32) {
        let (x, y) = self.cell_min(row, col);
        (x + self.cell_w / 2.0, y + self.cell_h / 2.0)
    }

    /// The cell at (`x`, `y`), if any.
    pub fn cell_at(&self, x: f32, y: f32) -> Option<(usize, usize)> {
        let (col, row) = ((x - self.left) / self.cell_w, (y - self.top) / self.cell_h);
        (col >= 0.0 && row >= 0.0 && (row as usize) < self.rows && (col as usize) < self.cols)
            .then_some((row as usize, col as usize))
    }
}

/// The colour range to use: the given one when it is usable, else the data's (symmetric for diverging maps).
pub(crate) fn resolve_range(values: &[f32], range: Option<(f32, f32)>, diverging: bool) -> (f32, f32) {
    if let Some((a, b)) = range
        && a.is_finite()
        && b.is_finite()
    {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        return widen(lo, hi);
    }
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (min, max) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if min > max {
        return (0.0, 1.0);
    }
    if diverging {
        let m = min.abs().max(max.abs());
        return if m > 0.0 { (-m, m) } else { (-1.0, 1.0) };
    }
    widen(min, max)
}

/// The symmetric range around 0 covering every finite value (at least ±1e-6).
pub fn symmetric_range(values: &[f32]) -> (f32, f32) {
    let m = values.iter().filter(|v| v.is_finite()).fold(1e-6f32, |m, v| m.max(v.abs()));
    (-m, m)
}

/// A non-empty range: a single value is widened to include 0 (and 1 if the value is 0).
fn widen(lo: f32, hi: f32) -> (f32, f32) {
    if hi > lo {
        return (lo, hi);
    }
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
}

/// Shows every `step`-th index of `count`, with `step` from 1, 2, 5, 10, 20, … so that labels `need` pixels apart fit cells `pitch` apart.
pub(crate) fn thinned(count: usize, pitch: f32, need: f32) -> usize {
    if count == 0 || pitch <= 0.0 {
        return 1;
    }
    if pitch >= need {
        return 1;
    }
    let raw = f64::from(need / pitch);
    let mut step = nice_step(raw);
    if (step - step.round()).abs() > 1e-9 {
        // 2.5 × 10ᵏ is not a whole step for small k; take the next nice one.
        step = nice_step(step * 1.01);
    }
    (step.round() as usize).max(1)
}

/// Decides every size and position of the figure for `spec`.
pub(crate) fn heatmap_layout(spec: &HeatmapSpec) -> HeatmapLayout {
    heatmap_layout_with(spec, None)
}

/// [`heatmap_layout`] with cells `cell` pixels wide (whole pixels; the app's zoom) instead of the
/// figure's own size; nothing is pooled and the size budget does not apply.
fn heatmap_layout_with(spec: &HeatmapSpec, cell_px: Option<f32>) -> HeatmapLayout {
    let s = clamp_scale(spec.scale);
    let cols = spec.cols;
    let rows = spec.values.len().checked_div(cols).map_or(0, |full_rows| spec.rows.min(full_rows));
    let values = &spec.values[..rows * cols];
    let (lo, hi) = resolve_range(values, spec.range, spec.colormap.is_diverging());

    let margin = 16.0 * s;
    let gap = 4.0 * s;
    let tick_len = 4.0 * s;
    let title_px = TITLE_PX * s;
    let axis_px = AXIS_PX * s;
    let label_px = LABEL_PX * s;
    let max_label = MAX_LABEL * s;

    // Cell size: up to 22 px × scale, shrinking so the matrix stays within budget.
    let reserve = 2.0 * margin + 2.0 * max_label + 120.0 * s;
    let budget = (MATRIX_BUDGET * s).min(MAX_SIDE as f32 - reserve);
    let longest = rows.max(cols);
    let max_cell = MAX_CELL * s;
    let cell = if longest == 0 {
        max_cell
    } else {
        // Up to 24 cells a side keep the full size; beyond, the side grows like √n so figures stay printable,
        // but cells stay tall enough for text labels, and full size when values are printed in them.
        let soft = max_cell * (24.0 / longest as f32).sqrt();
        let has_text = !spec.row_labels.is_empty() || !spec.col_labels.is_empty();
        let text_floor = if has_text { line_height(label_px) * 1.05 } else { 0.0 };
        let wanted = if spec.show_values { max_cell } else { soft.max(text_floor).min(max_cell) };
        wanted.min(budget / longest as f32)
    };
    let cell = cell_px.filter(|c| c.is_finite()).map_or(cell, |c| c.max(1.0));
    let (grid_rows, grid_cols, grid_px) = if cell >= 1.0 {
        (rows, cols, cell.floor())
    } else {
        let pooled = |n: usize| ((n as f32 * cell).round() as usize).clamp(1, n.max(1)).min(n);
        (pooled(rows), pooled(cols), 1.0)
    };
    let matrix_w = grid_cols as f32 * grid_px;
    let matrix_h = grid_rows as f32 * grid_px;
    let row_pitch = if rows == 0 { 0.0 } else { matrix_h / rows as f32 };
    let col_pitch = if cols == 0 { 0.0 } else { matrix_w / cols as f32 };

    // Row ticks: text labels or numbers, thinned to fit.
    let row_step = thinned(rows, row_pitch, line_height(label_px) * 1.05);
    let row_ticks: Vec<(usize, String)> = (0..rows)
        .step_by(row_step)
        .map(|i| (i, fit_text(&tick_text(spec.row_labels, i), label_px, max_label)))
        .collect();
    // Column ticks: text labels turned upright, numbers flat.
    let col_vertical = !spec.col_labels.is_empty();
    let col_need = if col_vertical {
        line_height(label_px) * 1.05
    } else {
        text_width(&cols.saturating_sub(1).to_string(), label_px) + 8.0 * s
    };
    let col_step = thinned(cols, col_pitch, col_need);
    let col_ticks: Vec<(usize, String)> = (0..cols)
        .step_by(col_step)
        .map(|i| (i, fit_text(&tick_text(spec.col_labels, i), label_px, max_label)))
        .collect();

    let row_label_w = row_ticks.iter().map(|(_, l)| text_width(l, label_px)).fold(0.0, f32::max);
    let col_label_h = if col_ticks.is_empty() {
        0.0
    } else if col_vertical {
        col_ticks.iter().map(|(_, l)| text_width(l, label_px)).fold(0.0, f32::max)
    } else {
        line_height(label_px)
    };
    let title_h = if spec.title.is_empty() { 0.0 } else { line_height(title_px) + 10.0 * s };
    let row_axis_w = if spec.row_axis.is_empty() { 0.0 } else { line_height(axis_px) + 6.0 * s };
    let col_axis_h = if spec.col_axis.is_empty() { 0.0 } else { line_height(axis_px) + 6.0 * s };

    let empty = rows == 0 || cols == 0;
    let colorbar_h = matrix_h.max(100.0 * s);
    let colorbar = (!empty).then(|| Colorbar::new(nice_ticks(lo, hi, Colorbar::max_ticks(colorbar_h, s)), s));
    let colorbar_w = colorbar.as_ref().map_or(0.0, |c| 16.0 * s + c.width());
    // The sink's column: a gap, then one grid cell wide (at least wide enough to read).
    let sink_gap = (10.0 * s).round();
    let sink_w = if spec.sink.is_some() && !empty { grid_px.max((6.0 * s).round()) } else { 0.0 };
    let sink_block = if sink_w > 0.0 { sink_gap + sink_w } else { 0.0 };
    let sink_label_w = if sink_w > 0.0 { text_width(SINK_LABEL, label_px) } else { 0.0 };

    let left = (margin + row_axis_w + row_label_w + gap + tick_len).round();
    let content_w = left + matrix_w + sink_block + colorbar_w + margin;
    let title_w = text_width(spec.title, title_px) + 2.0 * margin;
    let (width, matrix_x) =
        if title_w > content_w { (title_w, left + ((title_w - content_w) / 2.0).round()) } else { (content_w, left) };
    let matrix_y = (margin + title_h).round();
    let below = tick_len + gap + col_label_h.max(sink_label_w) + col_axis_h + margin;
    let height = (matrix_y + matrix_h + below).max(matrix_y + colorbar_h + margin);
    let (width, height) = if empty { (width.max(240.0 * s), height.max(matrix_y + 60.0 * s)) } else { (width, height) };

    let value_px = if spec.show_values && grid_rows == rows && grid_cols == cols && !empty {
        value_font(values, grid_px, s)
    } else {
        None
    };

    HeatmapLayout {
        scale: s,
        width,
        height,
        rows,
        cols,
        lo,
        hi,
        grid_rows,
        grid_cols,
        grid_px,
        matrix_x,
        matrix_y,
        matrix_w,
        matrix_h,
        title_px,
        axis_px,
        label_px,
        row_ticks,
        col_ticks,
        col_vertical,
        tick_len,
        gap,
        colorbar,
        colorbar_x: matrix_x + matrix_w + sink_block + 16.0 * s,
        colorbar_h,
        value_px,
        sink_x: matrix_x + matrix_w + sink_gap,
        sink_w,
    }
}

fn tick_text(labels: &[String], i: usize) -> String {
    if labels.is_empty() { i.to_string() } else { label_or_index(labels, i) }
}

/// Font size that fits the widest printed value in a cell, or `None` when that would be unreadably small.
fn value_font(values: &[f32], cell: f32, s: f32) -> Option<f32> {
    let px = (cell * 0.4).min(10.0 * s);
    if px < 6.5 {
        return None; // too small however short the values
    }
    // Digits are all as wide in DejaVu Sans: the widest text is that of the lowest or the highest
    // value (the most digits, a minus sign), or a NaN or infinity when there is one.
    let (mut lo, mut hi, mut odd) = (f32::INFINITY, f32::NEG_INFINITY, Vec::new());
    for &v in values {
        if v.is_finite() {
            (lo, hi) = (lo.min(v), hi.max(v));
        } else if !odd.iter().any(|o: &f32| o.to_bits() == v.to_bits() || (o.is_nan() && v.is_nan())) {
            odd.push(v);
        }
    }
    let candidates = [lo, hi].into_iter().filter(|v| v.is_finite()).chain(odd);
    let widest = candidates.map(|v| text_width(&format_cell_value(v), px)).fold(0.0, f32::max);
    let room = cell - 3.0 * s;
    let px = if widest > room && widest > 0.0 { px * room / widest } else { px };
    (px >= 6.5).then_some(px)
}

/// Mean of the finite values of each block when `rows × cols` is shown as `grid_rows × grid_cols` (NaN where none).
pub(crate) fn pool(values: &[f32], rows: usize, cols: usize, grid_rows: usize, grid_cols: usize) -> Vec<f32> {
    if grid_rows == rows && grid_cols == cols {
        return values.to_vec();
    }
    let span = |i: usize, n: usize, g: usize| (i * n / g, ((i + 1) * n / g).max(i * n / g + 1).min(n));
    let mut out = Vec::with_capacity(grid_rows * grid_cols);
    for gr in 0..grid_rows {
        let (r0, r1) = span(gr, rows, grid_rows);
        for gc in 0..grid_cols {
            let (c0, c1) = span(gc, cols, grid_cols);
            let (mut sum, mut count) = (0.0f64, 0u32);
            for r in r0..r1 {
                for &v in &values[r * cols + c0..r * cols + c1] {
                    if v.is_finite() {
                        sum += f64::from(v);
                        count += 1;
                    }
                }
            }
            out.push(if count == 0 { f32::NAN } else { (sum / f64::from(count)) as f32 });
        }
    }
    out
}

/// Draws the heatmap figure described by `spec` into an RGBA image.
pub fn heatmap(spec: &HeatmapSpec) -> RgbaImage {
    heatmap_drawing(spec).to_rgba()
}

/// The heatmap figure described by `spec` as a display list: title, labels, cells, colour bar.
pub fn heatmap_drawing(spec: &HeatmapSpec) -> Drawing {
    figure_of(spec, &heatmap_layout(spec))
}

/// The largest whole cell size (in `min..=max`) at which the figure fits `room` (width, height):
/// labels, titles and colour bar take what they take, the cells share the rest.
pub fn heatmap_fit_cell(spec: &HeatmapSpec, room: (f32, f32), (min, max): (f32, f32)) -> f32 {
    let size = |cell: f32| {
        let lay = heatmap_layout_with(spec, Some(cell));
        (lay.width, lay.height)
    };
    let fits = |cell: f32| {
        let (w, h) = size(cell);
        w <= room.0 && h <= room.1
    };
    // The figure grows with the cells (labels thin out as they shrink): the largest that fits,
    // by bisection over whole cell sizes.
    let (mut lo, mut hi) = (min.floor().max(1.0), max.floor().max(1.0));
    if fits(hi) {
        return hi;
    }
    if !fits(lo) {
        return lo;
    }
    while hi - lo > 1.0 {
        let mid = f32::midpoint(lo, hi).floor();
        if fits(mid) { lo = mid } else { hi = mid }
    }
    lo
}

/// The heatmap figure with cells `cell_px` pixels wide (the app's zoom: the exported figure's
/// layout, labels, frame, cell values and colour bar around cells of the size on screen), and
/// where its cells are. The matrix is the drawing's first [`Item::Cells`].
pub fn heatmap_drawing_with_cells(spec: &HeatmapSpec, cell_px: f32) -> (Drawing, CellGrid) {
    let lay = heatmap_layout_with(spec, Some(cell_px));
    (figure_of(spec, &lay), lay.grid())
}

fn figure_of(spec: &HeatmapSpec, lay: &HeatmapLayout) -> Drawing {
    let s = lay.scale;
    let theme = spec.theme;
    let (fg, muted) = (theme.foreground(), theme.muted());
    let mut d = Drawing::new(lay.width, lay.height, theme.background(), spec.title);

    if !spec.title.is_empty() {
        let title_w = text_width(spec.title, lay.title_px);
        let empty = lay.rows == 0 || lay.cols == 0;
        let centre = if empty { lay.width / 2.0 } else { lay.matrix_x + lay.matrix_w / 2.0 };
        let x = (centre - title_w / 2.0).clamp(16.0 * s, (lay.width - 16.0 * s - title_w).max(16.0 * s));
        d.text_at(spec.title, x.round(), 16.0 * s, lay.title_px, fg);
    }
    if lay.rows == 0 || lay.cols == 0 {
        d.text("no data", lay.width / 2.0, lay.matrix_y + 24.0 * s, lay.label_px, Anchor::Middle, muted);
        return d;
    }

    // Cells.
    let values = &spec.values[..lay.rows * lay.cols];
    let rgba = push_cells(&mut d, values, (lay.cols, lay.grid_cols), lay, spec.colormap, (lay.matrix_x, lay.grid_px));
    if let Some(px) = lay.value_px {
        for (i, &v) in values.iter().enumerate().filter(|(_, v)| !v.is_nan()) {
            let (row, col) = (i / lay.cols, i % lay.cols);
            value_text(&mut d.items, &rgba[i * 4..], v, lay.cell_center(row, col), px);
        }
    }
    d.frame(lay.matrix_x - 1.0, lay.matrix_y - 1.0, lay.matrix_w + 2.0, lay.matrix_h + 2.0, muted);
    if let Some(sink) = spec.sink.filter(|_| lay.sink_w > 0.0) {
        sink_column(&mut d, spec, lay, sink);
    }

    // Row ticks and labels on the left.
    let tick_w = (s).round().max(1.0);
    for (i, label) in &lay.row_ticks {
        let (_, y) = lay.cell_center(*i, 0);
        d.rect(lay.matrix_x - 1.0 - lay.tick_len, (y - tick_w / 2.0).round(), lay.tick_len, tick_w, muted);
        let x = lay.matrix_x - 1.0 - lay.tick_len - lay.gap;
        d.text(label, x, y, lay.label_px, Anchor::End, fg);
    }
    // Column ticks and labels below.
    let bottom = lay.matrix_y + lay.matrix_h + 1.0;
    let label_top = bottom + lay.tick_len + lay.gap;
    for (j, label) in &lay.col_ticks {
        let (x, _) = lay.cell_center(0, *j);
        d.rect((x - tick_w / 2.0).round(), bottom, tick_w, lay.tick_len, muted);
        if lay.col_vertical {
            // Upright text reads bottom to top, so each label ends next to the matrix.
            d.text_up(label, x, label_top, lay.label_px, Anchor::End, fg);
        } else {
            d.text(label, x, label_top + line_height(lay.label_px) / 2.0, lay.label_px, Anchor::Middle, fg);
        }
    }
    // Axis titles.
    let label_extent = if lay.col_vertical {
        lay.col_ticks.iter().map(|(_, l)| text_width(l, lay.label_px)).fold(0.0, f32::max)
    } else {
        line_height(lay.label_px)
    };
    if !spec.col_axis.is_empty() {
        let y = label_top + label_extent + 6.0 * s + line_height(lay.axis_px) / 2.0;
        d.text(spec.col_axis, lay.matrix_x + lay.matrix_w / 2.0, y, lay.axis_px, Anchor::Middle, fg);
    }
    if !spec.row_axis.is_empty() {
        let axis_h = text_width(spec.row_axis, lay.axis_px);
        let y = (lay.matrix_y + lay.matrix_h / 2.0 - axis_h / 2.0).max(lay.matrix_y);
        let row_label_w = lay.row_ticks.iter().map(|(_, l)| text_width(l, lay.label_px)).fold(0.0, f32::max);
        let x = lay.matrix_x - 1.0 - lay.tick_len - lay.gap - row_label_w - 6.0 * s - line_height(lay.axis_px);
        d.text_up(spec.row_axis, x + line_height(lay.axis_px) / 2.0, y + axis_h, lay.axis_px, Anchor::Start, fg);
    }

    if let Some(bar) = &lay.colorbar {
        bar.draw(&mut d, lay.colorbar_x, lay.matrix_y - 1.0, lay.colorbar_h + 2.0, spec.colormap, theme);
    }
    d
}

/// `values` (`rows × cols` of the layout's rows, `cols.0` columns) pooled to its grid rows and
/// `cols.1` columns, coloured over its range, as a block of cells at `x` (its top), `cell_w` wide;
/// returns each grid cell's colour (RGBA).
fn push_cells(
    d: &mut Drawing,
    values: &[f32],
    (cols, grid_cols): (usize, usize),
    lay: &HeatmapLayout,
    colormap: Colormap,
    (x, cell_w): (f32, f32),
) -> Vec<u8> {
    let grid = pool(values, lay.rows, cols, lay.grid_rows, grid_cols);
    let rgba = cells_rgba(&grid, lay.lo, lay.hi, colormap);
    let opaque: Vec<u8> = rgba.chunks_exact(4).flat_map(|c| [c[0], c[1], c[2], 255]).collect();
    d.items.push(Item::Cells(Cells {
        x,
        y: lay.matrix_y,
        cell_w,
        cell_h: lay.grid_px,
        cols: grid_cols,
        rows: lay.grid_rows,
        rgba: opaque,
    }));
    rgba
}

/// A cell's value printed at its centre `at`, in the colour that reads on the cell's (`rgba`).
fn value_text(items: &mut Vec<Item>, rgba: &[u8], v: f32, (x, y): (f32, f32), px: f32) {
    let [r, g, b] = cell_text_rgb([rgba[0], rgba[1], rgba[2]]);
    let text = format_cell_value(v);
    items.push(Item::Text(TextRun { text, x, y, px, anchor: Anchor::Middle, color: [r, g, b, 255], up: false }));
}

/// The sink's column: each row's value in the matrix's colours, framed apart from the keys, its
/// values printed where the matrix prints its own, "sink" written below it.
fn sink_column(d: &mut Drawing, spec: &HeatmapSpec, lay: &HeatmapLayout, sink: &[f32]) {
    let mut values: Vec<f32> = sink.iter().copied().take(lay.rows).collect();
    values.resize(lay.rows, f32::NAN);
    let rgba = push_cells(d, &values, (1, 1), lay, spec.colormap, (lay.sink_x, lay.sink_w));
    let muted = spec.theme.muted();
    d.frame(lay.sink_x - 1.0, lay.matrix_y - 1.0, lay.sink_w + 2.0, lay.matrix_h + 2.0, muted);
    if let Some(px) = lay.value_px.filter(|_| lay.sink_w >= lay.grid_px) {
        for (row, &v) in values.iter().enumerate().filter(|(_, v)| !v.is_nan()) {
            let at = (lay.sink_x + lay.sink_w / 2.0, lay.cell_center(row, 0).1);
            value_text(&mut d.items, &rgba[row * 4..], v, at, px);
        }
    }
    let x = lay.sink_x + lay.sink_w / 2.0;
    let top = lay.matrix_y + lay.matrix_h + 1.0 + lay.tick_len + lay.gap;
    let fg = spec.theme.foreground();
    if lay.col_vertical {
        d.text_up(SINK_LABEL, x, top, lay.label_px, Anchor::End, fg);
    } else {
        d.text(SINK_LABEL, x, top + line_height(lay.label_px) / 2.0, lay.label_px, Anchor::Middle, fg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_and_positions_map_both_ways() {
        let grid = CellGrid { left: 10.0, top: 20.0, cell_w: 4.0, cell_h: 5.0, rows: 3, cols: 2 };
        assert_eq!(grid.cell_center(2, 1), (16.0, 32.5));
        assert_eq!(grid.cell_at(16.0, 32.5), Some((2, 1)));
        assert_eq!(grid.cell_at(9.9, 21.0), None);
        assert_eq!(grid.cell_at(18.0, 21.0), None, "right of the last column");
    }

    fn spec<'a>(values: &'a [f32], rows: usize, cols: usize, labels: &'a [String]) -> HeatmapSpec<'a> {
        HeatmapSpec {
            values,
            rows,
            cols,
            row_labels: labels,
            col_labels: labels,
            row_axis: "query",
            col_axis: "key",
            title: "Layer 0, head 0",
            range: None,
            colormap: Colormap::Viridis,
            theme: Theme::Light,
            scale: 1.0,
            show_values: false,
            sink: None,
        }
    }

    #[test]
    fn a_sink_is_a_column_apart_from_the_keys_labelled_sink() {
        let values = [1.0f32, 0.0, 0.25, 0.25];
        let sink = [0.0f32, 0.5];
        let names = labels(2);
        let plain = spec(&values, 2, 2, &names);
        let with = HeatmapSpec { sink: Some(&sink), range: Some((0.0, 1.0)), ..plain };
        let (a, b) = (heatmap_layout(&plain), heatmap_layout(&with));
        assert!(b.width > a.width, "the column takes room");
        assert!(b.sink_x > b.matrix_x + b.matrix_w, "apart from the keys");
        assert!(texts(&heatmap_drawing(&with)).iter().any(|t| t.0 == SINK_LABEL));
        assert!(!texts(&heatmap_drawing(&plain)).iter().any(|t| t.0 == SINK_LABEL));
        // Its cells have the colour of their value.
        let img = heatmap(&with);
        let y = b.cell_center(1, 0).1;
        let expected = Colormap::Viridis.lut()[super::super::colormap::lut_index(0.5, 0.0, 1.0)];
        assert_eq!(img.get_pixel((b.sink_x + b.sink_w / 2.0) as u32, y as u32).0[..3], expected);
    }

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("tok{i}")).collect()
    }

    #[test]
    fn cell_centres_have_the_colour_of_their_value() {
        let values: Vec<f32> = (0..12).map(|i| i as f32 / 11.0).collect();
        let names = labels(4);
        for cmap in [Colormap::Viridis, Colormap::RdBu] {
            for scale in [1.0, 2.5] {
                let spec =
                    HeatmapSpec { colormap: cmap, scale, range: Some((0.0, 1.0)), ..spec(&values, 3, 4, &names) };
                let img = heatmap(&spec);
                let lay = heatmap_layout(&spec);
                for (row, col) in [(0, 0), (1, 2), (2, 3)] {
                    let (x, y) = lay.cell_center(row, col);
                    let expected = cmap.lut()[super::super::colormap::lut_index(values[row * 4 + col], 0.0, 1.0)];
                    assert_eq!(img.get_pixel(x as u32, y as u32).0[..3], expected, "{cmap:?} cell ({row},{col})");
                }
            }
        }
    }

    #[test]
    fn images_grow_with_cells_and_scale() {
        let small = vec![0.5f32; 4 * 4];
        let large = vec![0.5f32; 30 * 30];
        let (a, b) = (labels(4), labels(30));
        let img_small = heatmap(&spec(&small, 4, 4, &a));
        let img_large = heatmap(&spec(&large, 30, 30, &b));
        assert!(img_large.width() > img_small.width() && img_large.height() > img_small.height());
        let img_scaled = heatmap(&HeatmapSpec { scale: 2.0, ..spec(&small, 4, 4, &a) });
        assert!(img_scaled.width() > img_small.width() * 3 / 2);
        // Scale is clamped.
        let huge = heatmap(&HeatmapSpec { scale: 100.0, ..spec(&small, 4, 4, &a) });
        let four = heatmap(&HeatmapSpec { scale: 4.0, ..spec(&small, 4, 4, &a) });
        assert_eq!(huge.dimensions(), four.dimensions());
    }

    #[test]
    fn large_matrices_shrink_cells_and_stay_capped() {
        let n = 600;
        let values = vec![0.1f32; n * n];
        let lay = heatmap_layout(&spec(&values, n, n, &[]));
        assert!(lay.grid_px >= 1.0 && lay.grid_px < 22.0);
        assert!(lay.matrix_w <= 4096.0);
        let n = 10_000;
        let values: Vec<f32> = (0..n * 3).map(|i| (i % 7) as f32).collect();
        let img = heatmap(&spec(&values, n, 3, &[]));
        assert!(img.height() <= MAX_SIDE && img.width() <= MAX_SIDE);
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let weird: Vec<String> =
            ["", "\u{200B}", "\u{202E}evil", "a\u{0}b", "🦀🦀", "x".repeat(500).as_str()].map(String::from).to_vec();
        let nan = [f32::NAN, f32::INFINITY, -1.0, f32::NAN, 0.0, 2.0];
        heatmap(&spec(&nan, 2, 3, &weird));
        heatmap(&HeatmapSpec { show_values: true, ..spec(&nan, 2, 3, &weird) });
        heatmap(&spec(&[], 0, 0, &[]));
        heatmap(&spec(&[1.0], 1, 1, &[]));
        heatmap(&spec(&[1.0], 5, 5, &[]));
        heatmap(&spec(&[1.0, 2.0], 1, 0, &[]));
        heatmap(&spec(&[f32::NAN; 4], 2, 2, &[]));
        heatmap(&HeatmapSpec { range: Some((f32::NAN, 3.0)), scale: f32::NAN, ..spec(&nan, 2, 3, &[]) });
        heatmap(&HeatmapSpec { range: Some((2.0, 2.0)), colormap: Colormap::PuOr, ..spec(&nan, 2, 3, &[]) });
        heatmap(&HeatmapSpec { title: "", row_axis: "", col_axis: "", ..spec(&nan, 2, 3, &[]) });
    }

    /// The texts of a drawing with their anchors, in order.
    fn texts(d: &Drawing) -> Vec<(String, f32, f32)> {
        d.items
            .iter()
            .filter_map(|i| if let Item::Text(t) = i { Some((t.text.clone(), t.x, t.y)) } else { None })
            .collect()
    }

    #[test]
    fn the_app_layout_is_the_figure_layout_at_its_cell_size() {
        let values: Vec<f32> = (0..16).map(|i| i as f32 / 15.0).collect();
        let names = labels(4);
        let spec = HeatmapSpec { show_values: true, ..spec(&values, 4, 4, &names) };
        // At the figure's own cell size, the app's display list is the exported figure's.
        let lay = heatmap_layout(&spec);
        let (same, grid) = heatmap_drawing_with_cells(&spec, lay.grid_px);
        assert_eq!(same, heatmap_drawing(&spec));
        assert_eq!(grid, lay.grid());
        // Zoomed in, the same texts (the taller colour bar has more ticks), each label beside its
        // row or column and each value in its cell.
        let (zoomed, grid) = heatmap_drawing_with_cells(&spec, 40.0);
        assert_eq!((grid.cell_w, grid.cell_h), (40.0, 40.0));
        let (a, b) = (texts(&same), texts(&zoomed));
        let before_bar = |t: &[(String, f32, f32)]| {
            let end = t.iter().position(|t| t.0 == "query").unwrap();
            t[..=end].iter().map(|t| t.0.clone()).collect::<Vec<_>>()
        };
        assert_eq!(before_bar(&a), before_bar(&b));
        for (text, x, y) in &b {
            if let Some(row) = names.iter().position(|n| n == text) {
                let on_row = (y - grid.cell_center(row, 0).1).abs() < 1e-3;
                let on_col = (x - grid.cell_center(0, row).0).abs() < 1e-3;
                assert!(on_row || on_col, "{text} at ({x}, {y})");
            }
        }
        let value = format_cell_value(values[2 * 4 + 3]);
        let (_, x, y) = b.iter().find(|t| t.0 == value).unwrap();
        assert_eq!(grid.cell_at(*x, *y), Some((2, 3)), "{value} is printed in its cell");
        // Whole cells, never pooled.
        assert!((heatmap_drawing_with_cells(&spec, 2.7).1.cell_w - 2.0).abs() < 1e-6);
    }

    #[test]
    fn ranges_default_to_data_and_are_symmetric_for_diverging_maps() {
        assert_eq!(resolve_range(&[0.2, 0.8, f32::NAN], None, false), (0.2, 0.8));
        assert_eq!(resolve_range(&[-0.2, 0.8], None, true), (-0.8, 0.8));
        assert_eq!(resolve_range(&[1.0, 1.0], None, false), (0.0, 1.0));
        assert_eq!(resolve_range(&[], None, false), (0.0, 1.0));
        assert_eq!(resolve_range(&[0.5], Some((1.0, 0.0)), false), (0.0, 1.0));
    }
}
