//! Text labels with the embedded `DejaVu Sans`: measuring, fitting and anti-aliased drawing (also rotated).

use std::borrow::Cow;
use std::sync::LazyLock;

use ab_glyph::{Font, FontRef, Glyph, GlyphId, PxScale, ScaleFont, point};
use image::RgbaImage;

use super::canvas::blend_pixel;

/// The embedded `DejaVu` Sans font file (also the app's fallback font for labels).
pub const FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The one font of every figure; `None` only if the embedded file were broken (then no text is drawn).
static FONT: LazyLock<Option<FontRef<'static>>> = LazyLock::new(|| FontRef::try_from_slice(FONT_BYTES).ok());

/// Longest text laid out, in characters; the rest is ignored (a label is never this long on screen).
const MAX_CHARS: usize = 4096;

/// Text sizes outside this range are clamped (pixels per em).
const MIN_PX: f32 = 1.0;
const MAX_PX: f32 = 512.0;

fn clamp_px(px: f32) -> Option<f32> {
    (px.is_finite() && px > 0.0).then(|| px.clamp(MIN_PX, MAX_PX))
}

/// Glyphs of `text` on one line, their origin at the top-left of the line box, with the end x of each char.
struct Line {
    glyphs: Vec<Glyph>,
    /// Byte index where each laid-out char ends, and the pen x after it.
    ends: Vec<(usize, f32)>,
    width: f32,
}

fn layout(font: &FontRef<'static>, text: &str, px: f32) -> Line {
    let scaled = font.as_scaled(PxScale::from(px));
    let ascent = scaled.ascent();
    let mut line = Line { glyphs: Vec::new(), ends: Vec::new(), width: 0.0 };
    let mut pen = 0.0f32;
    let mut prev: Option<GlyphId> = None;
    for (byte, c) in text.char_indices().take(MAX_CHARS) {
        // Control characters have no picture; they take no room.
        if c.is_control() {
            continue;
        }
        let id = scaled.glyph_id(c);
        if let Some(prev) = prev {
            pen += scaled.kern(prev, id);
        }
        line.glyphs.push(id.with_scale_and_position(px, point(pen, ascent)));
        pen += scaled.h_advance(id);
        line.ends.push((byte + c.len_utf8(), pen));
        prev = Some(id);
    }
    line.width = pen.max(0.0);
    line
}

/// Width in pixels of `text` drawn at `px` pixels per em.
pub fn text_width(text: &str, px: f32) -> f32 {
    match (FONT.as_ref(), clamp_px(px)) {
        (Some(font), Some(px)) => layout(font, text, px).width,
        _ => 0.0,
    }
}

/// Height in pixels of one line of text (ascent to descent) at `px` pixels per em.
pub(crate) fn line_height(px: f32) -> f32 {
    match (FONT.as_ref(), clamp_px(px)) {
        (Some(font), Some(px)) => {
            let scaled = font.as_scaled(PxScale::from(px));
            scaled.ascent() - scaled.descent()
        }
        _ => 0.0,
    }
}

/// Font size in the CSS sense (pixels per em) and ascent in pixels of text `px` pixels tall
/// (ascent to descent, as measured here): what an SVG or PDF needs to place the same text.
pub(crate) fn em_and_ascent(px: f32) -> (f32, f32) {
    match (FONT.as_ref(), clamp_px(px)) {
        (Some(font), Some(px)) => {
            let em = font.units_per_em().map_or(px, |upem| px * upem / font.height_unscaled());
            (em, font.as_scaled(PxScale::from(px)).ascent())
        }
        _ => (px, px * 0.8),
    }
}

/// The em size (CSS font size, egui's font size) of text `px` pixels tall as measured here.
pub fn em_size(px: f32) -> f32 {
    em_and_ascent(px).0
}

/// `text` shortened with a trailing "…" so that it is at most `max_width` pixels wide at `px`.
pub fn fit_text(text: &str, px: f32, max_width: f32) -> String {
    let (Some(font), Some(px)) = (FONT.as_ref(), clamp_px(px)) else {
        return String::new();
    };
    let line = layout(font, text, px);
    if line.width <= max_width && text.chars().count() <= MAX_CHARS {
        return text.to_string();
    }
    let room = max_width - layout(font, "…", px).width;
    let keep = line.ends.iter().take_while(|(_, x)| *x <= room).last().map_or(0, |(byte, _)| *byte);
    if keep == 0 && room < 0.0 {
        return String::new();
    }
    format!("{}…", text[..keep].trim_end())
}

/// Whether `c` belongs to a right-to-left script (Hebrew, Arabic, Syriac, Thaana, N'Ko and their presentation forms).
fn is_rtl(c: char) -> bool {
    matches!(u32::from(c), 0x0590..=0x08FF | 0xFB1D..=0xFDFF | 0xFE70..=0xFEFF)
}

/// The characters in the order they appear on screen: a purely right-to-left label is reversed.
///
/// There is no bidi algorithm or shaping here; labels mixing directions stay in logical order.
fn display_order(text: &str) -> Cow<'_, str> {
    let rtl = text.chars().any(is_rtl) && !text.chars().any(|c| c.is_alphanumeric() && !is_rtl(c));
    if rtl { text.chars().rev().collect() } else { Cow::Borrowed(text) }
}

/// Whether a coordinate is near enough to any image to be worth drawing (and far from integer overflow).
fn on_canvas(v: f32) -> bool {
    v.is_finite() && v.abs() < 1e7
}

/// Calls `plot(x, y, coverage)` for every pixel the text touches, with the line box's top-left at (`x`, `y`).
fn rasterize(text: &str, px: f32, x: f32, y: f32, mut plot: impl FnMut(i64, i64, f32)) {
    let (Some(font), Some(px)) = (FONT.as_ref(), clamp_px(px)) else {
        return;
    };
    if !on_canvas(x) || !on_canvas(y) {
        return;
    }
    for mut glyph in layout(font, &display_order(text), px).glyphs {
        glyph.position = point(glyph.position.x + x, glyph.position.y + y);
        if let Some(outlined) = font.outline_glyph(glyph) {
            let bounds = outlined.px_bounds();
            let (left, top) = (bounds.min.x as i64, bounds.min.y as i64);
            outlined.draw(|gx, gy, coverage| plot(left + i64::from(gx), top + i64::from(gy), coverage));
        }
    }
}

/// Draws `text` with its line box's top-left corner at (`x`, `y`), `px` pixels per em, alpha-blended.
pub fn draw_text(img: &mut RgbaImage, text: &str, x: f32, y: f32, px: f32, color: [u8; 4]) {
    rasterize(text, px, x, y, |gx, gy, coverage| blend_pixel(img, gx, gy, color, coverage));
}

/// Draws `text` turned a quarter left (reading bottom to top); its rotated box's top-left is (`x`, `y`).
///
/// The box is `line_height(px)` wide and `text_width(text, px)` tall.
pub(crate) fn draw_text_up(img: &mut RgbaImage, text: &str, x: f32, y: f32, px: f32, color: [u8; 4]) {
    if !on_canvas(x) || !on_canvas(y) {
        return;
    }
    let height = text_width(text, px).ceil() as i64;
    let (left, top) = (x.round() as i64, y.round() as i64);
    // Unrotated pixel (u, v) lands at (v, height - 1 - u) inside the rotated box.
    rasterize(text, px, 0.0, 0.0, |u, v, coverage| blend_pixel(img, left + v, top + height - 1 - u, color, coverage));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::canvas::new_image;

    #[test]
    fn width_grows_with_text_and_size() {
        assert!(text_width("", 12.0).abs() < f32::EPSILON);
        let a = text_width("attention", 12.0);
        assert!(a > 30.0 && a < 80.0, "{a}");
        assert!(text_width("attention", 24.0) > 1.9 * a);
        assert!(text_width("x", f32::NAN).abs() < f32::EPSILON);
        // Control characters take no room.
        assert!((text_width("a\u{0}\u{7}b", 12.0) - text_width("ab", 12.0)).abs() < f32::EPSILON);
    }

    #[test]
    fn fitting_shortens_with_an_ellipsis() {
        assert_eq!(fit_text("short", 12.0, 1000.0), "short");
        let fitted = fit_text("a rather long label for a token", 12.0, 60.0);
        assert!(fitted.ends_with('…'), "{fitted}");
        assert!(text_width(&fitted, 12.0) <= 60.0);
        assert_eq!(fit_text("abc", 12.0, 0.0), "");
        // Never cuts inside a multi-byte character.
        let fitted = fit_text("ééééééééééééééééé", 12.0, 40.0);
        assert!(fitted.ends_with('…'));
    }

    #[test]
    fn drawing_marks_pixels_and_survives_odd_text() {
        let mut img = new_image(120.0, 40.0, [255, 255, 255, 255]);
        draw_text(&mut img, "Hello", 4.0, 4.0, 20.0, [0, 0, 0, 255]);
        assert!(img.pixels().any(|p| p.0[0] < 100));
        for odd in ["", "\u{200B}", "\u{202E}abc", "שלום", "\u{0}\n\t", "🦀", "日本語", "\u{10FFFF}"] {
            draw_text(&mut img, odd, 0.0, 0.0, 12.0, [0, 0, 0, 255]);
            draw_text_up(&mut img, odd, 0.0, 0.0, 12.0, [0, 0, 0, 255]);
        }
        draw_text(&mut img, "far away", 1e9, -1e9, 12.0, [0, 0, 0, 255]);
        draw_text(&mut img, "very far", 1e30, -1e30, 12.0, [0, 0, 0, 255]);
        draw_text_up(&mut img, "very far", f32::MAX, 0.0, 12.0, [0, 0, 0, 255]);
        draw_text(&mut img, "x", 0.0, 0.0, 1e9, [0, 0, 0, 255]);
    }

    #[test]
    fn right_to_left_labels_are_shown_reversed() {
        assert_eq!(display_order("שלום"), "םולש");
        assert_eq!(display_order("…שלום"), "םולש…");
        assert_eq!(display_order("abc"), "abc");
        assert_eq!(display_order("a שלום"), "a שלום");
    }

    #[test]
    fn rotated_text_is_taller_than_wide() {
        let mut img = new_image(40.0, 120.0, [255, 255, 255, 255]);
        draw_text_up(&mut img, "vertical", 5.0, 5.0, 14.0, [0, 0, 0, 255]);
        let dark: Vec<(u32, u32)> =
            img.enumerate_pixels().filter(|(_, _, p)| p.0[0] < 128).map(|(x, y, _)| (x, y)).collect();
        let (min_x, max_x) = (dark.iter().map(|p| p.0).min().unwrap(), dark.iter().map(|p| p.0).max().unwrap());
        let (min_y, max_y) = (dark.iter().map(|p| p.1).min().unwrap(), dark.iter().map(|p| p.1).max().unwrap());
        assert!(max_y - min_y > 2 * (max_x - min_x));
    }
}
