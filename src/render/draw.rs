//! A figure as data: a display list of rectangles, frames, lines, text runs and cell grids, laid out
//! once by the figure code and drawn by every backend — RGBA pixels here (PNG), SVG and PDF in
//! [`super::svg`], egui shapes in the app — so they all agree.

use image::RgbaImage;

use super::canvas::{MAX_SIDE, Stroke, draw_strokes, fill_rect, new_image, stroke_rect};
use super::text::{draw_text, draw_text_up, line_height, text_width};

/// Where a text run sits on its anchor point, along its reading direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The text starts at the anchor.
    Start,
    /// The text is centred on the anchor.
    Middle,
    /// The text ends at the anchor.
    End,
}

/// A line of text in the embedded `DejaVu` Sans.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRun {
    /// The text (one line).
    pub text: String,
    /// Anchor x; for upright text, the centre of the turned line box.
    pub x: f32,
    /// Anchor y: the vertical centre of the line box; for upright text, the point along the text
    /// that `anchor` names (the start is at the bottom).
    pub y: f32,
    /// Size in pixels, ascent to descent (as `ab_glyph` measures it).
    pub px: f32,
    /// Where the text sits on its anchor.
    pub anchor: Anchor,
    /// Colour.
    pub color: [u8; 4],
    /// Turned a quarter left, reading bottom to top.
    pub up: bool,
}

impl TextRun {
    /// Left edge and top of the line box (for upright text: of the turned box).
    pub fn top_left(&self) -> (f32, f32) {
        let (width, height) = (text_width(&self.text, self.px), line_height(self.px));
        let before = match self.anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => width / 2.0,
            Anchor::End => width,
        };
        if self.up {
            // Reading upwards, the start is at the bottom of the turned box.
            (self.x - height / 2.0, self.y - (width - before))
        } else {
            (self.x - before, self.y - height / 2.0)
        }
    }
}

/// A grid of coloured cells: a heatmap's matrix or a thumbnail.
#[derive(Debug, Clone, PartialEq)]
pub struct Cells {
    /// Left edge of column 0.
    pub x: f32,
    /// Top edge of row 0.
    pub y: f32,
    /// Width of a cell.
    pub cell_w: f32,
    /// Height of a cell.
    pub cell_h: f32,
    /// Columns.
    pub cols: usize,
    /// Rows.
    pub rows: usize,
    /// `rows × cols` colours, row-major, RGBA.
    pub rgba: Vec<u8>,
}

impl Cells {
    /// Colour of cell (`row`, `col`).
    pub fn color(&self, row: usize, col: usize) -> [u8; 4] {
        let k = (row * self.cols + col) * 4;
        [self.rgba[k], self.rgba[k + 1], self.rgba[k + 2], self.rgba[k + 3]]
    }
}

/// One thing drawn, in image pixels (scale already applied).
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A filled rectangle (x, y, width, height).
    Rect {
        /// Left, top, width, height.
        rect: [f32; 4],
        /// Fill colour.
        color: [u8; 4],
    },
    /// A one-pixel outline just inside the rectangle.
    Frame {
        /// Left, top, width, height.
        rect: [f32; 4],
        /// Line colour.
        color: [u8; 4],
    },
    /// Straight lines of one width, each painted in one or more colours in turn (a head view's
    /// heads joining the same two tokens).
    Lines {
        /// Line width.
        width: f32,
        /// The lines.
        strokes: Vec<Stroke>,
    },
    /// A text run.
    Text(TextRun),
    /// A grid of coloured cells.
    Cells(Cells),
}

/// A figure: its size, background, title (for the file's metadata) and what is drawn, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawing {
    /// Width in pixels (rounded up, at most [`MAX_SIDE`], when drawn).
    pub width: f32,
    /// Height in pixels.
    pub height: f32,
    /// Background colour.
    pub background: [u8; 4],
    /// What the figure shows, for a vector file's title.
    pub title: String,
    /// Everything drawn, back to front.
    pub items: Vec<Item>,
}

impl Drawing {
    /// An empty figure of this size.
    pub fn new(width: f32, height: f32, background: [u8; 4], title: &str) -> Self {
        Self { width, height, background, title: title.to_string(), items: Vec::new() }
    }

    /// Width and height in whole pixels, as the PNG has them.
    pub fn size_px(&self) -> (u32, u32) {
        let side = |len: f32| if len.is_finite() { len.ceil().clamp(1.0, MAX_SIDE as f32) as u32 } else { 1 };
        (side(self.width), side(self.height))
    }

    /// Adds a filled rectangle.
    pub fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, color: [u8; 4]) {
        self.items.push(Item::Rect { rect: [x, y, w, h], color });
    }

    /// Adds a one-pixel outline.
    pub fn frame(&mut self, x: f32, y: f32, w: f32, h: f32, color: [u8; 4]) {
        self.items.push(Item::Frame { rect: [x, y, w, h], color });
    }

    /// Adds a line of text at an anchor (`y` the centre of the line box).
    pub fn text(&mut self, text: &str, x: f32, y: f32, px: f32, anchor: Anchor, color: [u8; 4]) {
        let run = TextRun { text: text.to_string(), x, y, px, anchor, color, up: false };
        self.items.push(Item::Text(run));
    }

    /// Adds a line of text with its line box's top-left at (`x`, `y`).
    pub fn text_at(&mut self, text: &str, x: f32, y: f32, px: f32, color: [u8; 4]) {
        self.text(text, x, y + line_height(px) / 2.0, px, Anchor::Start, color);
    }

    /// Adds a line of text turned a quarter left; `x` is the centre of its turned line box, `y`
    /// the point along it that `anchor` names.
    pub fn text_up(&mut self, text: &str, x: f32, y: f32, px: f32, anchor: Anchor, color: [u8; 4]) {
        let run = TextRun { text: text.to_string(), x, y, px, anchor, color, up: true };
        self.items.push(Item::Text(run));
    }

    /// Places `parts` left to right (`horizontal`) or top to bottom, top/left aligned, `gap`
    /// pixels apart, on `background` (each part's size rounded up, as in its PNG).
    pub fn stack(parts: Vec<Drawing>, horizontal: bool, gap: f32, background: [u8; 4]) -> Drawing {
        let sizes: Vec<(f32, f32)> = parts
            .iter()
            .map(|p| {
                let (w, h) = p.size_px();
                (w as f32, h as f32)
            })
            .collect();
        let gaps = gap * parts.len().saturating_sub(1) as f32;
        let (width, height) = if horizontal {
            (sizes.iter().map(|s| s.0).sum::<f32>() + gaps, sizes.iter().map(|s| s.1).fold(1.0, f32::max))
        } else {
            (sizes.iter().map(|s| s.0).fold(1.0, f32::max), sizes.iter().map(|s| s.1).sum::<f32>() + gaps)
        };
        let title = parts.iter().map(|p| p.title.as_str()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" | ");
        let mut out = Drawing::new(width, height, background, &title);
        let mut offset = 0.0;
        for (part, (w, h)) in parts.into_iter().zip(sizes) {
            let (dx, dy) = if horizontal { (offset, 0.0) } else { (0.0, offset) };
            out.rect(dx, dy, w, h, part.background);
            out.items.extend(part.items.into_iter().map(|item| item.translated(dx, dy)));
            offset += if horizontal { w } else { h } + gap;
        }
        out
    }

    /// Number of cells in all cell grids.
    pub fn cell_count(&self) -> usize {
        self.items.iter().map(|i| if let Item::Cells(c) = i { c.rows * c.cols } else { 0 }).sum()
    }

    /// Draws the figure into an RGBA image (the PNG backend).
    pub fn to_rgba(&self) -> RgbaImage {
        let mut img = new_image(self.width, self.height, self.background);
        for item in &self.items {
            match item {
                Item::Rect { rect: [x, y, w, h], color } => fill_rect(&mut img, *x, *y, *w, *h, *color),
                Item::Frame { rect: [x, y, w, h], color } => stroke_rect(&mut img, *x, *y, *w, *h, *color),
                Item::Lines { width, strokes } => draw_strokes(&mut img, strokes, *width),
                Item::Text(run) => {
                    let (left, top) = run.top_left();
                    if run.up {
                        draw_text_up(&mut img, &run.text, left, top, run.px, run.color);
                    } else {
                        draw_text(&mut img, &run.text, left.round(), top.round(), run.px, run.color);
                    }
                }
                Item::Cells(cells) => {
                    for row in 0..cells.rows {
                        for col in 0..cells.cols {
                            let (x, y) = (cells.x + col as f32 * cells.cell_w, cells.y + row as f32 * cells.cell_h);
                            fill_rect(&mut img, x, y, cells.cell_w, cells.cell_h, cells.color(row, col));
                        }
                    }
                }
            }
        }
        img
    }
}

impl Item {
    /// The same item moved by (`dx`, `dy`).
    fn translated(self, dx: f32, dy: f32) -> Item {
        let shift = |[x, y, w, h]: [f32; 4]| [x + dx, y + dy, w, h];
        match self {
            Item::Rect { rect, color } => Item::Rect { rect: shift(rect), color },
            Item::Frame { rect, color } => Item::Frame { rect: shift(rect), color },
            Item::Lines { width, strokes } => Item::Lines {
                width,
                strokes: strokes
                    .into_iter()
                    .map(|s| Stroke { from: (s.from.0 + dx, s.from.1 + dy), to: (s.to.0 + dx, s.to.1 + dy), ..s })
                    .collect(),
            },
            Item::Text(run) => Item::Text(TextRun { x: run.x + dx, y: run.y + dy, ..run }),
            Item::Cells(cells) => Item::Cells(Cells { x: cells.x + dx, y: cells.y + dy, ..cells }),
        }
    }
}
