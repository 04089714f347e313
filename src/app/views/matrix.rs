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
}

impl Figure {
    fn new(key: u64, drawing: Drawing, grid: CellGrid) -> Self {
        let (mut others, mut numbers, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for (i, item) in drawing.items.iter().enumerate() {
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
        Self { key, drawing, grid, others, numbers, row_starts }
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
    let figure = figure_spec(spec, super::figure::theme_of(ui));
    crate::render::heatmap_fit_cell(&figure, (room.x, room.y), CELL_RANGE)
}

/// The exported heatmap figure of `spec` (no title, values printed, at scale 1): what the view draws.
fn figure_spec<'a>(spec: &MatrixSpec<'a>, theme: crate::render::Theme) -> HeatmapSpec<'a> {
    HeatmapSpec {
        values: spec.values,
        rows: spec.rows,
        cols: spec.cols,
        row_labels: spec.row_labels,
        col_labels: spec.col_labels,
        row_axis: spec.axes.0,
        col_axis: spec.axes.1,
        title: "",
        range: Some(spec.range),
        colormap: spec.colormap,
        theme,
        scale: 1.0,
        show_values: true,
        sink: spec.sink,
    }
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

/// The cell side after this frame's Ctrl+scroll (or pinch) over the view: one step of 10 % in or
/// out of `cell`; None when there was none.
pub fn zoom_step(ui: &egui::Ui, cell: f32) -> Option<f32> {
    let delta = ui.input(egui::InputState::zoom_delta);
    if (delta - 1.0).abs() < 1e-3 {
        return None;
    }
    let step = if delta > 1.0 { 1.1 } else { 1.0 / 1.1 };
    Some((cell * step).clamp(CELL_RANGE.0, CELL_RANGE.1))
}

/// The zoom control of a matrix view: *Fit* (the whole figure in the room) or a cell size.
/// `zoom`: None fits; `fitted`: the cell size that fits.
pub fn zoom_ui(ui: &mut egui::Ui, zoom: &mut Option<f32>, fitted: f32) {
    if ui.selectable_label(zoom.is_none(), "Fit").on_hover_text("The whole figure in the room").clicked() {
        *zoom = None;
    }
    let mut cell = zoom.unwrap_or(fitted);
    let slider = egui::Slider::new(&mut cell, CELL_RANGE.0..=CELL_RANGE.1).text("cell size").logarithmic(true);
    if ui.add(slider).changed() {
        *zoom = Some(cell);
    }
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
        let (drawing, grid) = heatmap_drawing_with_cells(&figure_spec(spec, theme), cell);
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
        return MatrixResponse { clicked: None, hovered: None, cells: None, response };
    }
    let size = prepare_matrix(ui, tex, key, spec);
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let Some(figure) = &tex.figure else {
        return MatrixResponse { clicked: None, hovered: None, cells: None, response };
    };
    let grid = &figure.grid;
    let painter = ui.painter_at(rect);
    let visible = ui.clip_rect().intersect(rect);
    let texture = tex.texture.as_ref().map(TextureHandle::id);
    // Only the numbers of the cells in view: a 512-token matrix has a quarter million.
    let items = figure.items_near(visible.translate(-rect.min.to_vec2()));
    super::figure::paint_items(&painter, items, rect.min, visible, texture);
    // The figure's cells on screen: hover and clicks find their cell here.
    let cells = CellGrid { left: grid.left + rect.min.x, top: grid.top + rect.min.y, ..*grid };
    let cell_rect = |r: usize, c: usize| {
        let (x, y) = cells.cell_min(r, c);
        Rect::from_min_size(pos2(x, y), vec2(cells.cell_w, cells.cell_h))
    };
    let mut clicked = None;
    let hovered = response.hover_pos().and_then(|p| cells.cell_at(p.x, p.y));
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
    MatrixResponse { clicked, hovered, cells: Some(cells), response }
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
