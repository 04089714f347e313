//! The app's one heatmap drawer: a labelled matrix of coloured cells with exact values on hover,
//! numbers in the cells when they fit and a colour bar — used by the heatmap, statistics, rollout,
//! attribution and comparison views. Everything but the cells' colours is the exported heatmap
//! figure ([`crate::render::heatmap_drawing_with_cells`]: the same layout code at the view's cell
//! size) painted from its display list: the labels, their thinning and "…", the frame, the axis
//! titles, the numbers in the cells and the colour bar are those of the PNG, SVG and PDF. The
//! display list is laid out again only when what it depends on changes (data, labels, cell size,
//! theme), the cells' texture only when the data or colours change; a frame paints only what is
//! in view (a 512-token matrix stays fluid).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use egui::{Color32, FontId, Rect, Sense, Stroke, TextureHandle, TextureOptions, Vec2, pos2, vec2};

pub use crate::render::symmetric_range;
use crate::render::{CellGrid, Colormap, Drawing, HeatmapSpec, Item, cells_rgba, heatmap_drawing_with_cells};

/// A matrix texture, the figure laid out around it, and what they were built from.
#[derive(Default)]
pub struct MatrixTexture {
    key: Option<u64>,
    texture: Option<TextureHandle>,
    /// How many times the texture was built.
    pub builds: usize,
    /// The figure's display list, what it was laid out for, and where its cells are (figure pixels).
    figure: Option<Figure>,
    /// How many times the figure was laid out.
    pub layouts: usize,
}

impl MatrixTexture {
    /// The display list last painted: the exported heatmap figure at the view's cell size.
    pub fn drawing(&self) -> Option<&Drawing> {
        self.figure.as_ref().map(|f| &f.drawing)
    }

    /// Where the cells are in [`Self::drawing`].
    pub fn grid(&self) -> Option<CellGrid> {
        self.figure.as_ref().map(|f| f.grid)
    }
}

/// A matrix's figure laid out, and an index of it for painting what is in view.
struct Figure {
    key: u64,
    drawing: Drawing,
    grid: CellGrid,
    /// Items that are not numbers in cells (labels, frame, colour bar …), in order.
    others: Vec<usize>,
    /// The numbers in the cells, row by row: (column, item).
    numbers: Vec<(usize, usize)>,
    /// Where each row's numbers start in `numbers` (one more entry than rows).
    row_starts: Vec<usize>,
    /// The row labels and the row axis's title (left of the cells): kept in view when the
    /// matrix is scrolled sideways.
    row_heads: Vec<usize>,
    /// The column labels and the column axis's title (under the cells): kept in view when the
    /// matrix is scrolled up past them.
    col_heads: Vec<usize>,
}

impl Figure {
    fn new(key: u64, drawing: Drawing, grid: CellGrid) -> Self {
        let (mut others, mut numbers, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        let (mut row_heads, mut col_heads) = (Vec::new(), Vec::new());
        let bottom = grid.top + grid.rows as f32 * grid.cell_h;
        let right = grid.left + grid.cols as f32 * grid.cell_w;
        for (i, item) in drawing.items.iter().enumerate() {
            if let Item::Text(t) = item {
                if t.x < grid.left && t.y >= grid.top {
                    row_heads.push(i);
                } else if t.y > bottom && (grid.left..=right).contains(&t.x) {
                    col_heads.push(i);
                }
            }
            match item {
                Item::Text(t) if !t.up => match grid.cell_at(t.x, t.y) {
                    Some((row, col)) => {
                        numbers.push((col, i));
                        rows.push(row);
                    }
                    None => others.push(i),
                },
                _ => others.push(i),
            }
        }
        // The figure writes its numbers row by row; counted per row, the index finds them.
        let mut row_starts = vec![0; grid.rows + 1];
        for &row in &rows {
            row_starts[row + 1] += 1;
        }
        for r in 0..grid.rows {
            row_starts[r + 1] += row_starts[r];
        }
        Self { key, drawing, grid, others, numbers, row_starts, row_heads, col_heads }
    }

    /// Paints the row labels at the left edge of `visible` when the matrix is scrolled sideways
    /// past them, and the column labels at its bottom edge when they are scrolled out of view
    /// below, each over a band of the figure's background (screen coordinates; the figure is at
    /// `origin`). Which were painted: (rows, columns).
    fn paint_sticky(&self, painter: &egui::Painter, origin: egui::Pos2, visible: Rect) -> (bool, bool) {
        let g = &self.grid;
        let band = super::figure::color(self.drawing.background);
        let shift_x = visible.left() - origin.x;
        // How far the column labels' band (from the cells' bottom to the figure's) lies below view.
        let bottom = g.top + g.rows as f32 * g.cell_h;
        let band_h = self.drawing.height - bottom;
        let shift_y = (visible.bottom() - (origin.y + self.drawing.height)).max(visible.top() - (origin.y + bottom));
        let rows = shift_x > 0.5 && !self.row_heads.is_empty();
        let cols = shift_y < -0.5 && !self.col_heads.is_empty() && band_h < visible.height() / 2.0;
        let heads = |list: &[usize]| list.iter().map(|&i| &self.drawing.items[i]).collect::<Vec<_>>();
        if cols {
            let top = origin.y + bottom + shift_y;
            painter.rect_filled(
                Rect::from_min_max(pos2(visible.left(), top), pos2(visible.right(), top + band_h)),
                0.0,
                band,
            );
            let at = origin + vec2(0.0, shift_y);
            super::figure::paint_items(painter, heads(&self.col_heads).into_iter(), at, visible, None);
        }
        if rows {
            let strip = Rect::from_min_max(visible.left_top(), pos2(visible.left() + g.left, visible.bottom()));
            painter.rect_filled(strip, 0.0, band);
            let at = origin + vec2(shift_x, 0.0);
            super::figure::paint_items(painter, heads(&self.row_heads).into_iter(), at, visible, None);
        }
        (rows, cols)
    }

    /// The items that can show within `visible` (figure pixels): all but the numbers, and the
    /// numbers of the cells within a cell of it.
    fn items_near(&self, visible: Rect) -> impl Iterator<Item = &Item> {
        let g = &self.grid;
        let span = |lo: f32, hi: f32, start: f32, pitch: f32, n: usize| {
            let first = (((lo - start) / pitch).floor() - 1.0).max(0.0) as usize;
            let last = ((((hi - start) / pitch).ceil() + 1.0).max(0.0) as usize).min(n);
            first..last.max(first)
        };
        let rows = span(visible.top(), visible.bottom(), g.top, g.cell_h, g.rows);
        let cols = span(visible.left(), visible.right(), g.left, g.cell_w, g.cols);
        let numbers = rows.flat_map(move |r| {
            let cols = cols.clone();
            self.numbers[self.row_starts[r]..self.row_starts[r + 1]]
                .iter()
                .filter(move |(c, _)| cols.contains(c))
                .map(|&(_, i)| i)
        });
        self.others.iter().copied().chain(numbers).map(|i| &self.drawing.items[i])
    }
}

/// What to draw.
pub struct MatrixSpec<'a> {
    /// Texture name (unique per widget).
    pub id: &'a str,
    /// `rows × cols`, row-major; NaN draws as masked.
    pub values: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// One label per row.
    pub row_labels: &'a [String],
    /// One label per column.
    pub col_labels: &'a [String],
    /// Titles of the vertical and the horizontal axis (as in the exported figure).
    pub axes: (&'a str, &'a str),
    /// Values at the ends of the colour map.
    pub range: (f32, f32),
    /// Colour map.
    pub colormap: Colormap,
    /// Cell side in points (whole points are used).
    pub cell: f32,
    /// The hover text of cell (row, col) with value v.
    pub hover: &'a dyn Fn(usize, usize, f32) -> String,
    /// Accessible name of each cell, when cells are clickable (None: not clickable).
    pub clickable: Option<&'a dyn Fn(usize, usize) -> String>,
    /// One value per row drawn as a column apart, labelled "sink" (an attention sink's share).
    pub sink: Option<&'a [f32]>,
}

impl MatrixSpec<'_> {
    /// The exported heatmap figure of these cells, untitled, at 1×, numbers in the cells.
    fn figure(&self, theme: crate::render::Theme) -> HeatmapSpec<'_> {
        HeatmapSpec {
            values: self.values,
            rows: self.rows,
            cols: self.cols,
            row_labels: self.row_labels,
            col_labels: self.col_labels,
            row_axis: self.axes.0,
            col_axis: self.axes.1,
            title: "",
            range: Some(self.range),
            colormap: self.colormap,
            theme,
            scale: 1.0,
            show_values: true,
            sink: self.sink,
        }
    }
}

/// Hashes anything into a texture key.
pub fn key_of(value: &impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// Smallest and largest cell side in points a matrix view zooms to.
pub const CELL_RANGE: (f32, f32) = (2.0, 80.0);

/// The cell side at which `spec`'s figure (its `cell` ignored) fits `room` whole, in
/// [`CELL_RANGE`] (a view's *Fit*).
pub fn fit_cell(ui: &egui::Ui, spec: &MatrixSpec<'_>, room: Vec2) -> f32 {
    let figure = spec.figure(super::figure::theme_of(ui));
    crate::render::heatmap_fit_cell(&figure, (room.x, room.y), CELL_RANGE)
}

/// A view's fitted cell side, laid out again only when what it fits or the room changes.
#[derive(Default)]
pub struct FitCache {
    key: Option<(u64, [u32; 2])>,
    /// The cell side last fitted.
    pub cell: f32,
}

impl FitCache {
    /// The cell side that fits `room` for the figure `key` names (`fit` computes it).
    pub fn get(&mut self, key: u64, room: Vec2, fit: impl FnOnce() -> f32) -> f32 {
        let k = (key, [room.x.to_bits(), room.y.to_bits()]);
        if self.key != Some(k) {
            self.cell = fit();
            self.key = Some(k);
        }
        self.cell
    }
}

/// Smallest and largest thumbnail side in points the model view zooms to.
pub const THUMB_RANGE: (f32, f32) = (16.0, 160.0);

/// Smallest and largest scale of the views drawn at a scale of their default size (the logit
/// lens, the contribution graph).
pub const SCALE_RANGE: (f32, f32) = (0.2, 2.0);

/// The cell side after this frame's Ctrl+scroll (or pinch) over the view: one step of 10 % in or
/// out of `cell`; None when there was none.
pub fn zoom_step(ui: &egui::Ui, cell: f32) -> Option<f32> {
    zoom_step_in(ui, cell, CELL_RANGE)
}

/// `value` after this frame's Ctrl+scroll (or pinch): 10 % in or out per notch of the wheel (a
/// trackpad's points counted as lines of 40), per pinch event, kept in `range`; None when there
/// was none. Counted from the frame's raw events: egui's own zoom factor spreads one notch over
/// the frames of its smoothing, which would take a 10 % step in each.
pub fn zoom_step_in(ui: &egui::Ui, value: f32, (lo, hi): (f32, f32)) -> Option<f32> {
    let steps: f32 = ui.input(|i| {
        i.events
            .iter()
            .map(|e| match e {
                egui::Event::MouseWheel { unit, delta, modifiers, .. } if modifiers.command || modifiers.ctrl => {
                    let d = delta.x + delta.y;
                    match unit {
                        egui::MouseWheelUnit::Point => d / 40.0,
                        egui::MouseWheelUnit::Line => d,
                        egui::MouseWheelUnit::Page => d * 3.0,
                    }
                }
                egui::Event::Zoom(f) if (f - 1.0).abs() > 1e-3 => {
                    if *f > 1.0 {
                        1.0
                    } else {
                        -1.0
                    }
                }
                _ => 0.0,
            })
            .sum()
    });
    if steps.abs() < 1e-3 {
        return None;
    }
    Some((value * 1.1f32.powf(steps)).clamp(lo, hi))
}

/// The zoom control of a matrix view: *Fit* (the whole figure in the room) or a cell size.
/// `zoom`: None fits; `fitted`: the cell size that fits.
pub fn zoom_ui(ui: &mut egui::Ui, zoom: &mut Option<f32>, fitted: f32) {
    zoom_ui_in(ui, zoom, fitted, (CELL_RANGE, "cell size"));
}

/// A view's zoom row: [`zoom_ui_in`] and the Ctrl+scroll hint.
pub fn zoom_row(ui: &mut egui::Ui, zoom: &mut Option<f32>, fitted: f32, range_what: ((f32, f32), &str)) {
    ui.horizontal(|ui| {
        zoom_ui_in(ui, zoom, fitted, range_what);
        ui.label(egui::RichText::new("Ctrl+scroll zooms").small().weak());
    });
}

/// The zoom control of a view: *Fit* or a value in `range`, the slider named `what`.
fn zoom_ui_in(ui: &mut egui::Ui, zoom: &mut Option<f32>, fitted: f32, ((lo, hi), what): ((f32, f32), &str)) {
    if ui.selectable_label(zoom.is_none(), "Fit").on_hover_text("The whole figure in the room").clicked() {
        *zoom = None;
    }
    let mut value = zoom.unwrap_or(fitted);
    let slider = egui::Slider::new(&mut value, lo..=hi).text(what).logarithmic(true);
    if ui.add(slider).changed() {
        *zoom = Some(value);
    }
}

/// The smallest scale *Fit* draws a text figure at (the lens, the graph): below half its size
/// its words are too small to read, so a larger figure is drawn at half size and scrolls (the
/// slider and Ctrl+scroll still go down to [`SCALE_RANGE`]'s smallest).
pub const FIT_SCALE_FLOOR: f32 = 0.5;

/// The scale at which a figure of `size` (at scale 1) fits `room`: at most 1 (the default size
/// is the largest a fitted view is drawn at), at least [`FIT_SCALE_FLOOR`].
pub fn fit_scale(size: Vec2, room: Vec2) -> f32 {
    let s = (room.x / size.x.max(1.0)).min(room.y / size.y.max(1.0));
    if s.is_finite() { s.clamp(FIT_SCALE_FLOOR, 1.0) } else { 1.0 }
}

/// The range of the finite values (0..1 when there are none).
pub fn data_range(values: &[f32]) -> (f32, f32) {
    let (lo, hi) = values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (0.0, 1.0)
    } else if hi - lo < 1e-9 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

/// A one-line label no wider than `max_width`, ending in "…" when it is cut (a long token must
/// not be clipped, or look like a shorter one).
pub fn fitted_label(
    painter: &egui::Painter,
    text: &str,
    font: &FontId,
    color: Color32,
    max_width: f32,
) -> Arc<egui::Galley> {
    let mut job = egui::text::LayoutJob::simple_singleline(text.to_owned(), font.clone(), color);
    job.wrap =
        egui::text::TextWrapping { max_width, max_rows: 1, break_anywhere: true, overflow_character: Some('…') };
    painter.layout_job(job)
}

/// What a drawn matrix reports.
pub struct MatrixResponse {
    /// The cell clicked (clickable matrices only).
    pub clicked: Option<(usize, usize)>,
    /// The cell under the pointer.
    pub hovered: Option<(usize, usize)>,
    /// Where the cells are on screen (None: nothing drawn).
    pub cells: Option<CellGrid>,
    /// Whether the row labels and the column labels were painted kept in view (the matrix
    /// scrolled past them).
    pub sticky: (bool, bool),
    /// The whole widget's response (hover, drag).
    pub response: egui::Response,
}

/// Builds the cells' texture and lays the figure out when what they depend on changed (`key`
/// names the values); returns the figure's size in points.
pub fn prepare_matrix(ui: &egui::Ui, tex: &mut MatrixTexture, key: u64, spec: &MatrixSpec<'_>) -> Vec2 {
    let (rows, cols) = (spec.rows, spec.cols);
    let full_key = key_of(&(key, rows, cols, spec.range.0.to_bits(), spec.range.1.to_bits(), spec.colormap));
    if tex.key != Some(full_key) {
        let rgba = cells_rgba(spec.values, spec.range.0, spec.range.1, spec.colormap);
        let image = egui::ColorImage::from_rgba_unmultiplied([cols, rows], &rgba);
        tex.texture = Some(ui.ctx().load_texture(spec.id, image, TextureOptions::NEAREST));
        tex.key = Some(full_key);
        tex.builds += 1;
    }
    let theme = super::figure::theme_of(ui);
    let cell = spec.cell.floor().max(1.0);
    let sink_bits: Option<Vec<u32>> = spec.sink.map(|s| s.iter().map(|v| v.to_bits()).collect());
    let figure_key = key_of(&(
        (full_key, cell.to_bits(), theme, spec.axes),
        (spec.row_labels, spec.col_labels, spec.values.len(), sink_bits),
    ));
    if tex.figure.as_ref().is_none_or(|f| f.key != figure_key) {
        let figure = spec.figure(theme);
        let (drawing, grid) = heatmap_drawing_with_cells(&figure, cell);
        tex.figure = Some(Figure::new(figure_key, drawing, grid));
        tex.layouts += 1;
    }
    tex.figure.as_ref().map_or(Vec2::ZERO, |f| vec2(f.drawing.width.ceil(), f.drawing.height.ceil()))
}

/// Draws the matrix: the exported heatmap figure's display list at the view's cell size, with
/// hover (the cell outlined, its exact value) and, for clickable matrices, a widget per cell.
pub fn matrix_ui(ui: &mut egui::Ui, tex: &mut MatrixTexture, key: u64, spec: &MatrixSpec<'_>) -> MatrixResponse {
    let (rows, cols) = (spec.rows, spec.cols);
    if rows == 0 || cols == 0 {
        let response = ui.label("Nothing to show.");
        return MatrixResponse { clicked: None, hovered: None, cells: None, sticky: (false, false), response };
    }
    let size = prepare_matrix(ui, tex, key, spec);
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let Some(figure) = &tex.figure else {
        return MatrixResponse { clicked: None, hovered: None, cells: None, sticky: (false, false), response };
    };
    let grid = &figure.grid;
    let painter = ui.painter_at(rect);
    let visible = ui.clip_rect().intersect(rect);
    let texture = tex.texture.as_ref().map(TextureHandle::id);
    // Only the numbers of the cells in view: a 512-token matrix has a quarter million.
    let items = figure.items_near(visible.translate(-rect.min.to_vec2()));
    super::figure::paint_items(&painter, items, rect.min, visible, texture);
    let sticky = figure.paint_sticky(&painter, rect.min, visible);
    // The figure's cells on screen: hover and clicks find their cell here.
    let cells = CellGrid { left: grid.left + rect.min.x, top: grid.top + rect.min.y, ..*grid };
    let cell_rect = |r: usize, c: usize| {
        let (x, y) = cells.cell_min(r, c);
        Rect::from_min_size(pos2(x, y), vec2(cells.cell_w, cells.cell_h))
    };
    let mut clicked = None;
    // Not under a label kept in view over the cells.
    let under_heads = |p: egui::Pos2| {
        (sticky.0 && p.x < visible.left() + grid.left)
            || (sticky.1
                && p.y > visible.bottom() - (figure.drawing.height - grid.top - grid.rows as f32 * grid.cell_h))
    };
    let hovered = response.hover_pos().filter(|&p| !under_heads(p)).and_then(|p| cells.cell_at(p.x, p.y));
    let outline = Stroke::new(2.0, ui.visuals().strong_text_color());
    if let Some(name) = spec.clickable {
        // Each cell is a widget of its own, so it can be found and clicked by name.
        for r in 0..rows {
            for c in 0..cols {
                let hit = cell_rect(r, c);
                let id = ui.scope_id().with((spec.id, r, c));
                let resp = ui.interact(hit, id, Sense::click());
                let label = name(r, c);
                resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
                if resp.clicked() {
                    clicked = Some((r, c));
                }
                if resp.hovered() {
                    painter.rect_stroke(hit, 0.0, outline, egui::StrokeKind::Inside);
                    resp.on_hover_text_at_pointer((spec.hover)(r, c, spec.values[r * cols + c]));
                }
            }
        }
    } else if let Some((r, c)) = hovered {
        painter.rect_stroke(cell_rect(r, c), 0.0, outline, egui::StrokeKind::Outside);
        response.clone().on_hover_text_at_pointer((spec.hover)(r, c, spec.values[r * cols + c]));
    }
    MatrixResponse { clicked, hovered, cells: Some(cells), sticky, response }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_end_in_an_ellipsis_within_their_room_and_short_ones_stay_whole() {
        let ctx = egui::Context::default();
        let font = FontId::proportional(14.0);
        let mut output = ctx.run_ui(egui::RawInput::default(), |ui| {
            let long = fitted_label(ui.painter(), "internationalisation", &font, Color32::WHITE, 60.0);
            let last = long.rows.last().and_then(|r| r.row.glyphs.last()).map(|g| g.chr);
            assert!(long.elided && last == Some('…'), "cut with an ellipsis: {last:?}");
            assert!(long.size().x <= 61.0, "{}", long.size().x);
            assert!(!fitted_label(ui.painter(), "cat", &font, Color32::WHITE, 60.0).elided);
        });
        output.textures_delta.clear(); // no renderer here to take the font atlas
    }

    #[test]
    fn a_frame_paints_the_numbers_of_the_cells_in_view_and_everything_else() {
        let n = 40;
        let values: Vec<f32> = (0..n * n).map(|i| (i % 97) as f32 / 97.0).collect();
        let labels: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let spec = HeatmapSpec {
            values: &values,
            rows: n,
            cols: n,
            row_labels: &labels,
            col_labels: &labels,
            row_axis: "query",
            col_axis: "key",
            title: "",
            range: Some((0.0, 1.0)),
            colormap: Colormap::Viridis,
            theme: crate::render::Theme::Dark,
            scale: 1.0,
            show_values: true,
            sink: None,
        };
        let (drawing, grid) = heatmap_drawing_with_cells(&spec, 30.0);
        let all = drawing.items.len();
        let figure = Figure::new(0, drawing, grid);
        assert_eq!(figure.numbers.len(), n * n);
        assert_eq!(figure.others.len() + n * n, all);
        // A view of 3 × 2 cells: their numbers and those of a cell around, and every other item.
        let (x, y) = grid.cell_min(10, 20);
        let view = Rect::from_min_size(pos2(x, y), vec2(3.0 * grid.cell_w, 2.0 * grid.cell_h));
        let near: Vec<&Item> = figure.items_near(view).collect();
        let cells: Vec<(usize, usize)> =
            near.iter().filter_map(|i| if let Item::Text(t) = i { grid.cell_at(t.x, t.y) } else { None }).collect();
        assert_eq!(cells.len(), 5 * 4, "{cells:?}");
        assert!(cells.iter().all(|&(r, c)| (9..=12).contains(&r) && (19..=23).contains(&c)));
        assert_eq!(near.len(), figure.others.len() + 5 * 4);
    }
}
