//! Vector backends of a [`Drawing`]: SVG written here, PDF converted from that SVG by `svg2pdf`
//! (text stays text in both, in the embedded `DejaVu` Sans: selectable and searchable).

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};

use thiserror::Error;

use super::draw::{Anchor, Cells, Drawing, Item, TextRun};
use super::text::{FONT_BYTES, em_and_ascent, line_height};

/// Most cells a vector file draws as one rectangle each (256 × 256); a figure with more carries
/// its cell grids as embedded images, and says so in its title.
pub const MAX_VECTOR_CELLS: usize = 256 * 256;

/// The font family every text run names.
const FAMILY: &str = "DejaVu Sans";

/// A figure that could not be turned into a PDF.
#[derive(Debug, Error)]
pub enum VectorError {
    /// The SVG did not parse (a bug: it is written here).
    #[error("cannot read the figure's SVG: {0}")]
    Svg(String),
    /// `svg2pdf` failed.
    #[error("cannot convert the figure to PDF: {0}")]
    Pdf(String),
}

/// `#rrggbb` of a colour.
fn hex([r, g, b, _]: [u8; 4]) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// ` fill-opacity="a"` (or the given attribute) when the colour is translucent, else nothing.
fn opacity(attr: &str, color: [u8; 4]) -> String {
    if color[3] == 255 { String::new() } else { format!(" {attr}=\"{:.3}\"", f32::from(color[3]) / 255.0) }
}

/// A number short: at most two decimals, no trailing zeros.
fn num(v: f32) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

/// Text made safe for XML: markup characters escaped, control characters (which have no
/// picture) dropped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Whether the figure's cells go into the file as images (too many for one rectangle each).
pub fn cells_as_images(drawing: &Drawing) -> bool {
    drawing.cell_count() > MAX_VECTOR_CELLS
}

/// The title a vector file carries: the figure's, and a note when its cells are an image.
pub fn vector_title(drawing: &Drawing) -> String {
    if cells_as_images(drawing) {
        format!(
            "{} (cells embedded as an image: more than {MAX_VECTOR_CELLS} cells, too many for one rectangle each)",
            drawing.title
        )
    } else {
        drawing.title.clone()
    }
}

/// Writes the figure as an SVG document: one `<rect>` per cell (or an embedded image past
/// [`MAX_VECTOR_CELLS`]), one `<line>` per line and colour, one `<text>` per text run.
pub fn to_svg(drawing: &Drawing) -> String {
    to_svg_page(drawing, 1.0)
}

/// [`to_svg`] of a figure drawn at `scale` (its pixels are `scale` × its size at 1×): the page is
/// the size at 1× (`width` and `height`, in points for a PDF), whatever the scale, and the drawing
/// fills it (`viewBox` in the drawing's pixels). A PNG's scale sets its resolution; a vector file's
/// only makes it heavier, so a vector figure has the same page at every scale.
pub fn to_svg_page(drawing: &Drawing, scale: f32) -> String {
    let (width, height) = drawing.size_px();
    let (page_w, page_h) = page_size(drawing, scale);
    let images = cells_as_images(drawing);
    let mut out = String::new();
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         xmlns:xlink=\"http://www.w3.org/1999/xlink\" version=\"1.1\" width=\"{}\" height=\"{}\" \
         viewBox=\"0 0 {width} {height}\" xml:space=\"preserve\" font-family=\"{FAMILY}\">\n<title>{}</title>\n",
        num(page_w),
        num(page_h),
        escape(&vector_title(drawing))
    );
    let _ = writeln!(
        out,
        "<rect width=\"{width}\" height=\"{height}\" fill=\"{}\"{}/>",
        hex(drawing.background),
        opacity("fill-opacity", drawing.background)
    );
    for item in &drawing.items {
        match item {
            Item::Rect { rect, color } => {
                let [x, y, w, h] = snap(*rect);
                if w > 0.0 && h > 0.0 {
                    let _ = writeln!(
                        out,
                        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}/>",
                        num(x),
                        num(y),
                        num(w),
                        num(h),
                        hex(*color),
                        opacity("fill-opacity", *color)
                    );
                }
            }
            Item::Frame { rect, color } => {
                let [x, y, w, h] = rect.map(f32::round);
                if w >= 1.0 && h >= 1.0 {
                    let _ = writeln!(
                        out,
                        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\"{} stroke-width=\"1\"/>",
                        num(x + 0.5),
                        num(y + 0.5),
                        num(w - 1.0),
                        num(h - 1.0),
                        hex(*color),
                        opacity("stroke-opacity", *color)
                    );
                }
            }
            Item::Lines { width, strokes } => {
                let _ = writeln!(out, "<g fill=\"none\" stroke-width=\"{}\" stroke-linecap=\"butt\">", num(*width));
                for stroke in strokes {
                    for &(color, alpha) in &stroke.paints {
                        let alpha = alpha.clamp(0.0, 1.0) * f32::from(color[3]) / 255.0;
                        if alpha.is_nan() || alpha <= 0.0 {
                            continue;
                        }
                        let _ = writeln!(
                            out,
                            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-opacity=\"{:.3}\"/>",
                            num(stroke.from.0),
                            num(stroke.from.1),
                            num(stroke.to.0),
                            num(stroke.to.1),
                            hex(color),
                            alpha
                        );
                    }
                }
                out.push_str("</g>\n");
            }
            Item::Text(run) => write_text(&mut out, run),
            Item::Cells(cells) => write_cells(&mut out, cells, images),
        }
    }
    out.push_str("</svg>\n");
    out
}

/// The pixels a filled rectangle covers in the PNG (its edges rounded).
fn snap([x, y, w, h]: [f32; 4]) -> [f32; 4] {
    let (x0, y0, x1, y1) = (x.round(), y.round(), (x + w).round(), (y + h).round());
    [x0, y0, x1 - x0, y1 - y0]
}

fn write_text(out: &mut String, run: &TextRun) {
    let text = escape(&run.text);
    if text.trim().is_empty() {
        return;
    }
    let (em, ascent) = em_and_ascent(run.px);
    let anchor = match run.anchor {
        Anchor::Start => "start",
        Anchor::Middle => "middle",
        Anchor::End => "end",
    };
    let fill = format!("fill=\"{}\"{}", hex(run.color), opacity("fill-opacity", run.color));
    let top_of_box = line_height(run.px) / 2.0;
    if run.up {
        // The turned line box's left edge is the text's top: the baseline is `ascent` right of it.
        let x = run.x - top_of_box + ascent;
        let _ = writeln!(
            out,
            "<text transform=\"translate({} {}) rotate(-90)\" font-size=\"{}\" text-anchor=\"{anchor}\" {fill}>{text}</text>",
            num(x),
            num(run.y),
            num(em)
        );
    } else {
        let y = run.y - top_of_box + ascent;
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{anchor}\" {fill}>{text}</text>",
            num(run.x),
            num(y),
            num(em)
        );
    }
}

fn write_cells(out: &mut String, cells: &Cells, as_image: bool) {
    if cells.rows == 0 || cells.cols == 0 {
        return;
    }
    let (w, h) = (cells.cols as f32 * cells.cell_w, cells.rows as f32 * cells.cell_h);
    if as_image {
        let img = image::RgbaImage::from_raw(cells.cols as u32, cells.rows as u32, cells.rgba.clone());
        let png = img.and_then(|img| super::png_bytes(&img).ok());
        if let Some(png) = png {
            let _ = writeln!(
                out,
                "<image x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" preserveAspectRatio=\"none\" \
                 image-rendering=\"optimizeSpeed\" xlink:href=\"data:image/png;base64,{}\"/>",
                num(cells.x),
                num(cells.y),
                num(w),
                num(h),
                base64(&png)
            );
        }
        return;
    }
    // Crisp edges: neighbouring cells meet without a hairline seam.
    out.push_str("<g shape-rendering=\"crispEdges\">\n");
    for row in 0..cells.rows {
        for col in 0..cells.cols {
            let color = cells.color(row, col);
            let (x, y) = (cells.x + col as f32 * cells.cell_w, cells.y + row as f32 * cells.cell_h);
            let [x, y, cw, ch] = snap([x, y, cells.cell_w, cells.cell_h]);
            let _ = writeln!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}/>",
                num(x),
                num(y),
                num(cw),
                num(ch),
                hex(color),
                opacity("fill-opacity", color)
            );
        }
    }
    out.push_str("</g>\n");
}

/// The fonts an SVG of ours needs: the embedded `DejaVu` Sans only (no system fonts are read, so
/// every machine makes the same file).
static FONTS: LazyLock<Arc<usvg::fontdb::Database>> = LazyLock::new(|| {
    let mut db = usvg::fontdb::Database::new();
    db.load_font_data(FONT_BYTES.to_vec());
    db.set_sans_serif_family(FAMILY);
    Arc::new(db)
});

/// Parses an SVG written by [`to_svg`] with the embedded font.
pub fn parse_svg(svg: &str) -> Result<usvg::Tree, VectorError> {
    let options = usvg::Options { fontdb: FONTS.clone(), font_family: FAMILY.to_string(), ..usvg::Options::default() };
    usvg::Tree::from_str(svg, &options).map_err(|e| VectorError::Svg(e.to_string()))
}

/// Writes the figure as a one-page PDF (1 pixel = 1 point), text as text in a subset of the
/// embedded font.
pub fn to_pdf(drawing: &Drawing) -> Result<Vec<u8>, VectorError> {
    to_pdf_page(drawing, 1.0)
}

/// [`to_pdf`] of a figure drawn at `scale`: the page is its size at 1×, in points
/// ([`to_svg_page`]).
pub fn to_pdf_page(drawing: &Drawing, scale: f32) -> Result<Vec<u8>, VectorError> {
    let tree = parse_svg(&to_svg_page(drawing, scale))?;
    svg2pdf::to_pdf(&tree, svg2pdf::ConversionOptions::default(), svg2pdf::PageOptions::default())
        .map_err(|e| VectorError::Pdf(e.to_string()))
}

/// The page of a figure drawn at `scale`: its size in pixels over the scale (at least a point).
pub fn page_size(drawing: &Drawing, scale: f32) -> (f32, f32) {
    let scale = if scale.is_finite() && scale > 0.0 { scale } else { 1.0 };
    let (w, h) = drawing.size_px();
    ((w as f32 / scale).max(1.0), (h as f32 / scale).max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Attention;
    use crate::render::{Colormap, HeadViewSpec, HeatmapSpec, Theme, head_view_drawing, heatmap_drawing};

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn text_is_escaped_and_control_characters_dropped() {
        assert_eq!(escape("<a & \"b\">\u{0}\u{7}"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(num(1.0), "1");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(2.345), "2.35");
    }

    const WORDS: [&str; 5] = ["The", "cat", "sat", "answer", "Ġ<&>"];

    fn labels() -> Vec<String> {
        WORDS.iter().map(ToString::to_string).collect()
    }

    fn heatmap_of(values: &[f32], n: usize, labels: &[String], scale: f32) -> Drawing {
        heatmap_drawing(&HeatmapSpec {
            values,
            rows: n,
            cols: n,
            row_labels: labels,
            col_labels: labels,
            row_axis: "query",
            col_axis: "key",
            title: "layer 0 · head 1",
            range: Some((0.0, 1.0)),
            colormap: Colormap::Viridis,
            theme: Theme::Light,
            scale,
            show_values: true,
            sink: None,
        })
    }

    /// 1 layer, 3 heads, 5 tokens, rows summing to 1 with a few exact zeros.
    fn attention() -> Attention {
        let (heads, n) = (3, 5);
        let mut data = vec![0.0f32; heads * n * n];
        for h in 0..heads {
            for q in 0..n {
                let row = &mut data[(h * n + q) * n..(h * n + q + 1) * n];
                for (k, v) in row.iter_mut().enumerate() {
                    *v = if (q + k + h) % 3 == 0 { 0.0 } else { 1.0 + k as f32 };
                }
                let sum: f32 = row.iter().sum();
                for v in row.iter_mut() {
                    *v /= sum;
                }
            }
        }
        Attention::new(1, heads, n, data).unwrap()
    }

    fn head_view_of(att: &Attention, labels: &[String]) -> Drawing {
        head_view_drawing(&HeadViewSpec {
            attention: att,
            layer_idx: 0,
            labels,
            key_labels: None,
            heads: &[0, 1, 2],
            selected_token: None,
            threshold: 0.0,
            theme: Theme::Light,
            scale: 1.0,
            title: "layer 0",
            segments: None,
            sinks: None,
        })
    }

    /// The texts of the SVG's `<text>` elements.
    fn svg_texts(doc: &usvg::roxmltree::Document) -> Vec<String> {
        doc.descendants().filter(|n| n.has_tag_name("text")).map(|n| n.text().unwrap_or("").to_string()).collect()
    }

    fn count(doc: &usvg::roxmltree::Document, tag: &str) -> usize {
        doc.descendants().filter(|n| n.has_tag_name(tag)).count()
    }

    #[test]
    fn the_svg_parses_with_labels_as_text_and_one_element_per_cell_and_line() {
        let n = WORDS.len();
        let values: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 / 6.0).collect();
        let heat = heatmap_of(&values, n, &labels(), 1.0);
        let svg = to_svg(&heat);
        parse_svg(&svg).unwrap();
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        let texts = svg_texts(&doc);
        for word in WORDS {
            // Each label twice: on the rows and under the columns.
            assert_eq!(texts.iter().filter(|t| *t == word).count(), 2, "{word} in {texts:?}");
        }
        assert!(texts.iter().any(|t| t == "0.50"), "values printed in the cells are text too");
        let cell_rects = doc
            .descendants()
            .filter(|n| n.attribute("shape-rendering") == Some("crispEdges"))
            .map(|g| g.children().filter(|c| c.has_tag_name("rect")).count())
            .collect::<Vec<_>>();
        // The matrix, then the colour bar (one cell per pixel row).
        assert_eq!(cell_rects[0], n * n);
        assert_eq!(cell_rects.iter().sum::<usize>(), heat.cell_count());
        assert_eq!(count(&doc, "image"), 0);

        let att = attention();
        let heads = head_view_of(&att, &labels());
        let svg = to_svg(&heads);
        parse_svg(&svg).unwrap();
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        let drawn_weights = att.head(0, 0).iter().chain(att.head(0, 1)).chain(att.head(0, 2));
        let expected = drawn_weights.filter(|&&w| w >= 1.0 / 255.0).count();
        assert!(expected > 0 && expected < 3 * n * n);
        assert_eq!(count(&doc, "line"), expected, "one line per head, query and key with weight");
        let texts = svg_texts(&doc);
        for word in WORDS {
            assert_eq!(texts.iter().filter(|t| *t == word).count(), 2, "{word} on both sides");
        }
    }

    /// Mean absolute difference per channel, and the share of pixels differing by more than 64
    /// in some channel, between a PNG rendering and the SVG rasterised by resvg.
    fn compare_with_png(drawing: &Drawing) -> (f64, f64) {
        let png = drawing.to_rgba();
        let tree = parse_svg(&to_svg(drawing)).unwrap();
        let mut pixmap = resvg::tiny_skia::Pixmap::new(png.width(), png.height()).unwrap();
        resvg::render(&tree, resvg::tiny_skia::Transform::identity(), &mut pixmap.as_mut());
        let (mut sum, mut far) = (0u64, 0usize);
        for (a, b) in png.pixels().zip(pixmap.pixels()) {
            let b = b.demultiply();
            let diffs = [a.0[0].abs_diff(b.red()), a.0[1].abs_diff(b.green()), a.0[2].abs_diff(b.blue())];
            sum += diffs.iter().map(|&d| u64::from(d)).sum::<u64>();
            far += usize::from(diffs.iter().any(|&d| d > 64));
        }
        if std::env::var_os("ATTNVIZ_DEBUG_SVG").is_some() {
            png.save("/tmp/cmp-png.png").unwrap();
            pixmap.save_png("/tmp/cmp-svg.png").unwrap();
        }
        let pixels = (png.width() * png.height()) as f64;
        (sum as f64 / (3.0 * pixels), far as f64 / pixels)
    }

    #[test]
    fn the_svg_rasterised_matches_the_png() {
        let n = WORDS.len();
        let values: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 / 6.0).collect();
        for scale in [1.0, 2.0] {
            let (mean, far) = compare_with_png(&heatmap_of(&values, n, &labels(), scale));
            assert!(mean < 3.0 && far < 0.03, "heatmap ×{scale}: mean {mean:.2}, far {far:.4}");
        }
        let (mean, far) = compare_with_png(&head_view_of(&attention(), &labels()));
        assert!(mean < 3.0 && far < 0.03, "head view: mean {mean:.2}, far {far:.4}");
        // And a figure whose cells travel as an image.
        let big = 300;
        let values: Vec<f32> = (0..big * big).map(|i| ((i * 37) % 101) as f32 / 100.0).collect();
        let (mean, far) = compare_with_png(&heatmap_of(&values, big, &[], 1.0));
        assert!(mean < 3.0 && far < 0.03, "dense heatmap: mean {mean:.2}, far {far:.4}");
    }

    #[test]
    fn a_long_head_view_keeps_the_line_budget_and_says_so_in_its_title() {
        // 1 layer, 2 heads, 160 tokens, uniform: 51 200 lines, more than the budget.
        let n = 160;
        let att = Attention::new(1, 2, n, vec![1.0 / n as f32; 2 * n * n]).unwrap();
        let words: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let heads = head_view_of(&att, &words);
        let drawn: usize = heads
            .items
            .iter()
            .map(|i| match i {
                Item::Lines { strokes, .. } => strokes.iter().map(|s| s.paints.len()).sum(),
                _ => 0,
            })
            .sum();
        assert_eq!(drawn, crate::render::LINE_BUDGET);
        assert!(heads.title.contains("the 30000 strongest of 51200 lines"), "{}", heads.title);
        let svg = to_svg(&heads);
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(count(&doc, "line"), crate::render::LINE_BUDGET);
        assert!(svg_texts(&doc).iter().any(|t| t.contains("strongest of 51200 lines")), "the notice is drawn");
    }

    #[test]
    fn the_lens_grid_and_the_graph_are_vectors_too() {
        use crate::render::{EdgeKind, GraphEdge, GraphFigure, GraphNode};
        let rows = vec!["embeddings".to_string(), "block 1".to_string()];
        let cols = vec!["The".to_string(), "capital".to_string()];
        let cells: Vec<String> = ["the", "city", " Paris", "of"].map(String::from).to_vec();
        let grid = crate::render::text_grid_drawing(&crate::render::TextGridSpec {
            title: "Logit lens",
            note: "colour: probability",
            row_labels: &rows,
            col_labels: &cols,
            cells: &cells,
            values: &[0.1, 0.2, 0.9, 0.4],
            range: (0.0, 1.0),
            colormap: Colormap::Viridis,
            selected_col: Some(1),
            theme: Theme::Light,
            scale: 1.0,
            bar: None,
            fit_cells: false,
        });
        let svg = to_svg(&grid);
        parse_svg(&svg).unwrap();
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        let texts = svg_texts(&doc);
        for word in ["embeddings", "capital", " Paris", "city", "Logit lens"] {
            assert!(texts.iter().any(|t| t == word), "{word} in {texts:?}");
        }
        let (mean, far) = compare_with_png(&grid);
        assert!(mean < 3.0 && far < 0.03, "lens: mean {mean:.2}, far {far:.4}");

        let node = |column: f32, level: f32| GraphNode { column, level, label: "x".into() };
        let edge = |from, to, kind| GraphEdge { from, to, weight: 0.5, kind, name: String::new() };
        let figure = GraphFigure {
            title: "graph".into(),
            tokens: vec!["a".into(), "b".into()],
            layers: 1,
            nodes: vec![node(0.0, 0.0), node(1.0, 1.0), node(1.0, 2.0)],
            edges: vec![edge(0, 1, EdgeKind::Attention), edge(1, 2, EdgeKind::Mlp), edge(0, 2, EdgeKind::Residual)],
        };
        let svg = to_svg(&crate::render::graph_drawing(&figure, Theme::Dark, 1.0));
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(count(&doc, "line"), 3, "one line per edge");
        assert!(svg_texts(&doc).iter().any(|t| t == "b"));
    }

    #[test]
    fn dense_grids_travel_as_an_embedded_image_and_the_title_says_so() {
        let big = 300;
        let values: Vec<f32> = (0..big * big).map(|i| (i % 11) as f32 / 10.0).collect();
        let drawing = heatmap_of(&values, big, &[], 1.0);
        assert!(drawing.cell_count() > MAX_VECTOR_CELLS);
        let svg = to_svg(&drawing);
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(count(&doc, "image"), 2, "the matrix and the colour bar");
        assert!(count(&doc, "rect") < 1000, "no rectangle per cell");
        let title = doc.descendants().find(|n| n.has_tag_name("title")).and_then(|n| n.text()).unwrap();
        assert!(title.contains("embedded as an image"), "{title}");
        // As rectangles the 90 000 cells would take about 5 MB.
        assert!(svg.len() < 1_000_000, "{} bytes", svg.len());
        // Just under the budget, one rectangle per cell.
        let small = 240;
        let drawing = heatmap_of(&values[..small * small], small, &[], 1.0);
        assert!(!cells_as_images(&drawing));
    }

    /// A minimal reading of a PDF: checks the cross-reference table points at every object, and
    /// returns the text the pages show (every string shown, decoded through the fonts'
    /// `ToUnicode` maps, in order).
    fn pdf_text(pdf: &[u8]) -> String {
        assert!(pdf.starts_with(b"%PDF-1."), "a PDF header");
        assert!(String::from_utf8_lossy(&pdf[pdf.len().saturating_sub(16)..]).trim_end().ends_with("%%EOF"));
        let at = rfind(pdf, b"startxref").unwrap() + b"startxref".len();
        let tail = String::from_utf8_lossy(&pdf[at..]);
        let start: usize = tail.split_whitespace().next().unwrap().parse().unwrap();
        assert!(pdf[start..].starts_with(b"xref"), "startxref points at the table");
        let table = String::from_utf8_lossy(&pdf[start..]);
        let mut lines = table.lines().skip(1);
        let header: Vec<usize> = lines.next().unwrap().split_whitespace().map(|v| v.parse().unwrap()).collect();
        let (first, count) = (header[0], header[1]);
        assert!(count > 3);
        for (i, line) in lines.take(count).enumerate() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields[2] == "n" {
                let offset: usize = fields[0].parse().unwrap();
                let id = first + i;
                assert!(pdf[offset..].starts_with(format!("{id} 0 obj").as_bytes()), "object {id} at {offset}");
            }
        }
        // Every stream with its dictionary, inflated when compressed.
        let mut streams: Vec<(String, Vec<u8>)> = Vec::new();
        let mut rest = pdf;
        while let Some(at) = find(rest, b"stream") {
            let dict_start = rfind(&rest[..at], b"<<").unwrap_or(0);
            let dict = String::from_utf8_lossy(&rest[dict_start..at]).to_string();
            let mut body = at + b"stream".len();
            body += if rest[body] == b'\r' { 2 } else { 1 };
            let end = body + find(&rest[body..], b"endstream").unwrap();
            let raw = &rest[body..end];
            let data = if dict.contains("FlateDecode") {
                miniz_oxide::inflate::decompress_to_vec_zlib(raw).expect("a stream inflates")
            } else {
                raw.to_vec()
            };
            streams.push((dict, data));
            rest = &rest[end + b"endstream".len()..];
        }
        // Glyph codes → text, from the fonts' ToUnicode maps.
        let mut map = std::collections::HashMap::new();
        for (_, cmap) in streams.iter().filter(|(_, s)| find(s, b"beginbfchar").is_some()) {
            let cmap = String::from_utf8_lossy(cmap);
            for section in cmap.split("beginbfchar").skip(1) {
                let section = section.split("endbfchar").next().unwrap();
                let hexes: Vec<&str> = section.split(['<', '>']).map(str::trim).filter(|s| !s.is_empty()).collect();
                for pair in hexes.chunks(2) {
                    let utf16: Vec<u16> = pair[1]
                        .as_bytes()
                        .chunks(4)
                        .map(|c| u16::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
                        .collect();
                    let code = u16::from_str_radix(pair[0], 16).unwrap();
                    map.insert(code, String::from_utf16_lossy(&utf16));
                }
            }
        }
        assert!(!map.is_empty(), "the font has a ToUnicode map");
        // Page content: every string shown, its two-byte codes decoded, in order.
        let mut out = String::new();
        for (_, content) in streams.iter().filter(|(dict, s)| !dict.contains("Subtype") && find(s, b"Tj").is_some()) {
            let mut i = 0;
            while i < content.len() {
                if content[i] != b'(' {
                    i += 1;
                    continue;
                }
                let (mut bytes, mut depth) = (Vec::new(), 1);
                i += 1;
                while i < content.len() {
                    match content[i] {
                        b'\\' => {
                            i += 1;
                            let c = content[i];
                            if c.is_ascii_digit() {
                                let digits = content[i..].iter().take(3).take_while(|d| d.is_ascii_digit()).count();
                                let octal = std::str::from_utf8(&content[i..i + digits]).unwrap();
                                bytes.push(u8::from_str_radix(octal, 8).unwrap());
                                i += digits - 1;
                            } else {
                                let map = [(b'n', b'\n'), (b'r', b'\r'), (b't', b'\t'), (b'b', 8), (b'f', 12)];
                                bytes.push(map.iter().find(|(k, _)| *k == c).map_or(c, |(_, v)| *v));
                            }
                        }
                        b'(' => {
                            depth += 1;
                            bytes.push(b'(');
                        }
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                            bytes.push(b')');
                        }
                        c => bytes.push(c),
                    }
                    i += 1;
                }
                for code in bytes.chunks(2).filter(|c| c.len() == 2) {
                    let code = u16::from_be_bytes([code[0], code[1]]);
                    out.push_str(map.get(&code).map_or("\u{FFFD}", String::as_str));
                }
                i += 1;
            }
        }
        out
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).rposition(|w| w == needle)
    }

    #[test]
    fn the_pdf_opens_and_holds_the_labels_as_text() {
        let att = attention();
        let pdf = to_pdf(&head_view_of(&att, &labels())).unwrap();
        let text = pdf_text(&pdf);
        for word in WORDS {
            assert_eq!(text.matches(word).count(), 2, "{word} on both sides in {text:?}");
        }
        let n = WORDS.len();
        let values: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 / 6.0).collect();
        let pdf = to_pdf(&heatmap_of(&values, n, &labels(), 1.0)).unwrap();
        let text = pdf_text(&pdf);
        assert!(text.starts_with("layer 0 · head 1"), "{text:?}");
        assert_eq!(text.matches("answer").count(), 2);
    }

    /// A line chart (the training lab's curves) as SVG and PDF: its axis titles, tick labels and
    /// legend are text, its curve lines.
    #[test]
    fn a_line_chart_is_a_vector_figure_with_its_labels_as_text() {
        use crate::render::{Chart, Series, chart_drawing};
        let chart = Chart {
            title: "Loss".into(),
            x_axis: "step".into(),
            y_axis: "loss".into(),
            series: vec![Series {
                name: "training loss".into(),
                points: (0..=40).map(|i| [f64::from(i), 3.0 - f64::from(i) / 20.0]).collect(),
                dots: false,
            }],
            x_include: vec![0.0],
            y_include: vec![0.0],
        };
        let drawing = chart_drawing(&chart, Theme::Light, 1.0);
        let svg = to_svg(&drawing);
        let doc = usvg::roxmltree::Document::parse(&svg).unwrap();
        parse_svg(&svg).unwrap();
        assert!(count(&doc, "line") >= 40, "the curve's 40 segments");
        let texts = svg_texts(&doc);
        for want in ["Loss", "step", "loss", "training loss", "0", "20", "40", "3"] {
            assert!(texts.iter().any(|t| t == want), "{want} in {texts:?}");
        }
        let text = pdf_text(&to_pdf(&drawing).unwrap());
        assert!(text.starts_with("Loss") && text.contains("training loss") && text.contains("step"), "{text:?}");
    }
}
