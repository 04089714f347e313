//! Pixel-level drawing: new images with capped sides, filled rectangles, alpha blending, anti-aliased lines.

use image::{Rgba, RgbaImage};

/// Largest width or height, in pixels, of any image this module makes.
pub const MAX_SIDE: u32 = 8192;

/// A new image filled with `background`, each side rounded up and clamped to 1..=[`MAX_SIDE`].
pub(crate) fn new_image(width: f32, height: f32, background: [u8; 4]) -> RgbaImage {
    RgbaImage::from_pixel(side(width), side(height), Rgba(background))
}

fn side(len: f32) -> u32 {
    if len.is_finite() { len.ceil().clamp(1.0, MAX_SIDE as f32) as u32 } else { 1 }
}

/// Paints `color` over pixel (x, y) with opacity `coverage × color alpha` (outside the image: nothing).
pub(crate) fn blend_pixel(img: &mut RgbaImage, x: i64, y: i64, color: [u8; 4], coverage: f32) {
    if x < 0 || y < 0 || x >= i64::from(img.width()) || y >= i64::from(img.height()) {
        return;
    }
    let alpha = coverage * f32::from(color[3]) / 255.0;
    blend_rgba(&mut img.get_pixel_mut(x as u32, y as u32).0, color, alpha);
}

/// Source-over blending of `color` with opacity `alpha` (0..=1) onto one RGBA pixel, in 1/256 steps.
#[inline]
fn blend_rgba(px: &mut [u8; 4], color: [u8; 4], alpha: f32) {
    if alpha.is_nan() || alpha <= 0.0 {
        return;
    }
    let a = (alpha.min(1.0) * 256.0) as u32;
    let keep = 256 - a;
    for c in 0..3 {
        px[c] = ((u32::from(color[c]) * a + u32::from(px[c]) * keep + 128) >> 8) as u8;
    }
    px[3] = ((255 * a + u32::from(px[3]) * keep + 128) >> 8) as u8;
}

/// Fills the pixels whose centres lie in the rectangle (x, y, width, height), blending if `color` is translucent.
pub(crate) fn fill_rect(img: &mut RgbaImage, x: f32, y: f32, width: f32, height: f32, color: [u8; 4]) {
    let (Some((x0, x1)), Some((y0, y1))) = (pixel_span(x, width, img.width()), pixel_span(y, height, img.height()))
    else {
        return;
    };
    for py in y0..y1 {
        for px in x0..x1 {
            if color[3] == 255 {
                img.put_pixel(px, py, Rgba(color));
            } else {
                blend_pixel(img, i64::from(px), i64::from(py), color, 1.0);
            }
        }
    }
}

/// Pixel indices `start..end` covered by `[pos, pos + len)`, clipped to `0..limit`; `None` when empty.
fn pixel_span(pos: f32, len: f32, limit: u32) -> Option<(u32, u32)> {
    if !pos.is_finite() || !len.is_finite() || len <= 0.0 {
        return None;
    }
    let start = pos.round().clamp(0.0, limit as f32) as u32;
    let end = (pos + len).round().clamp(0.0, limit as f32) as u32;
    (start < end).then_some((start, end))
}

/// Draws a one-pixel outline just inside the rectangle (x, y, width, height).
pub(crate) fn stroke_rect(img: &mut RgbaImage, x: f32, y: f32, width: f32, height: f32, color: [u8; 4]) {
    let (x, y, width, height) = (x.round(), y.round(), width.round(), height.round());
    if width < 1.0 || height < 1.0 {
        return;
    }
    fill_rect(img, x, y, width, 1.0, color);
    fill_rect(img, x, y + height - 1.0, width, 1.0, color);
    fill_rect(img, x, y + 1.0, 1.0, height - 2.0, color);
    fill_rect(img, x + width - 1.0, y + 1.0, 1.0, height - 2.0, color);
}

/// An anti-aliased straight line of `width` pixels with soft ends, painted with opacity `alpha`.
#[cfg(test)]
pub(crate) fn draw_line(img: &mut RgbaImage, from: (f32, f32), to: (f32, f32), width: f32, color: [u8; 4], alpha: f32) {
    let (img_w, img_h) = (i64::from(img.width()), i64::from(img.height()));
    let mut band = Band { pixels: img, width: img_w, first_row: 0, rows: img_h };
    draw_line_in(&mut band, from, to, width, &[(color, alpha)]);
}

/// A straight line from `from` to `to` (pixels) drawn with opacity `alpha`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Start point.
    pub from: (f32, f32),
    /// End point.
    pub to: (f32, f32),
    /// Opacity, 0..=1.
    pub alpha: f32,
}

/// Consecutive full rows of an image's RGBA bytes.
struct Band<'a> {
    pixels: &'a mut [u8],
    /// Image width in pixels.
    width: i64,
    /// Image row of the band's first row.
    first_row: i64,
    /// Number of rows in the band.
    rows: i64,
}

/// Rows per band when drawing many lines: a band of a wide image still fits in the CPU cache.
const BAND_ROWS: usize = 64;

/// One line drawn in several colours, one after another (the heads of a head view that join the
/// same two tokens): where they overlap exactly, the line's coverage is computed once.
#[derive(Debug, Clone, PartialEq)]
pub struct Stroke {
    /// Start point (pixels).
    pub from: (f32, f32),
    /// End point (pixels).
    pub to: (f32, f32),
    /// Each colour with its opacity (0..=1), blended in this order.
    pub paints: Vec<([u8; 4], f32)>,
}

/// Draws strokes of one width, band by band (bands shared among threads); every pixel sees the
/// strokes blended in slice order and each stroke's paints in their order, exactly as if each
/// paint of each stroke were drawn one line after another.
pub(crate) fn draw_strokes(img: &mut RgbaImage, strokes: &[Stroke], width: f32) {
    if strokes.is_empty() {
        return;
    }
    let img_w = i64::from(img.width());
    let reach = width.max(1.0) / 2.0 + 2.0;
    let spans: Vec<(f32, f32)> =
        strokes.iter().map(|s| (s.from.1.min(s.to.1) - reach, s.from.1.max(s.to.1) + reach)).collect();
    let row_bytes = img.width() as usize * 4;
    let bands: Vec<Band> = img
        .chunks_mut(row_bytes * BAND_ROWS)
        .enumerate()
        .map(|(i, pixels)| {
            let rows = (pixels.len() / row_bytes) as i64;
            Band { pixels, width: img_w, first_row: (i * BAND_ROWS) as i64, rows }
        })
        .collect();
    let draw_band = |band: &mut Band| {
        let (top_row, end_row) = (band.first_row as f32, (band.first_row + band.rows) as f32);
        for (stroke, &(top, bottom)) in strokes.iter().zip(&spans) {
            if bottom >= top_row && top < end_row {
                draw_line_in(band, stroke.from, stroke.to, width, &stroke.paints);
            }
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(8);
    // Threads pay off only when there is real work.
    if threads == 1 || bands.len() < 2 || strokes.len() < 64 {
        for mut band in bands {
            draw_band(&mut band);
        }
        return;
    }
    let mut groups: Vec<Vec<Band>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, band) in bands.into_iter().enumerate() {
        groups[i % threads].push(band);
    }
    std::thread::scope(|scope| {
        for group in groups {
            scope.spawn(|| group.into_iter().for_each(|mut band| draw_band(&mut band)));
        }
    });
}

/// Most paints one stroke blends without allocating.
const MAX_PAINTS: usize = 64;

/// Draws the part of an anti-aliased line that falls within `band`, once per paint.
///
/// Walks the longer axis one pixel at a time and covers only the few pixels across the line, so
/// long lines cost their length, not their bounding box.
fn draw_line_in(band: &mut Band, (x0, y0): (f32, f32), (x1, y1): (f32, f32), width: f32, paints: &[([u8; 4], f32)]) {
    if ![x0, y0, x1, y1, width].iter().all(|v| v.is_finite()) || width <= 0.0 {
        return;
    }
    if paints.len() > MAX_PAINTS {
        for chunk in paints.chunks(MAX_PAINTS) {
            draw_line_in(band, (x0, y0), (x1, y1), width, chunk);
        }
        return;
    }
    // Lines thinner than a pixel are drawn one pixel wide and fainter.
    let mut colors = [([0u8; 4], 0.0f32); MAX_PAINTS];
    let mut count = 0;
    for &(color, alpha) in paints {
        if alpha.is_finite() && alpha > 0.0 {
            colors[count] = (color, alpha.min(1.0) * width.min(1.0) * f32::from(color[3]) / 255.0);
            count += 1;
        }
    }
    let colors = &colors[..count];
    let (dx, dy) = (x1 - x0, y1 - y0);
    let len = dx.hypot(dy);
    if colors.is_empty() || len < 1e-3 {
        return;
    }
    let half = width.max(1.0) / 2.0;
    let (ux, uy) = (dx / len, dy / len);
    // Coverage fades over the last pixel at both ends of the segment.
    let ends = |px: f32, py: f32| -> f32 {
        let along = (px - x0) * ux + (py - y0) * uy;
        (0.5 + along).clamp(0.0, 1.0) * (0.5 + len - along).clamp(0.0, 1.0)
    };
    let img_w = band.width;
    let (row_start, row_end) = (band.first_row, band.first_row + band.rows);
    let stride = img_w as usize;
    let pixels: &mut [u8] = band.pixels;
    let mut paint = |x: i64, y: i64, cov: f32| {
        let i = ((y - row_start) as usize * stride + x as usize) * 4;
        if let Some(px) = pixels.get_mut(i..i + 4).and_then(|p| <&mut [u8; 4]>::try_from(p).ok()) {
            for &(color, alpha) in colors {
                blend_rgba(px, color, cov * alpha);
            }
        }
    };
    let major_x = dx.abs() >= dy.abs();
    // Along the minor axis, distance from the centre line grows by this factor per pixel.
    let slope = if major_x { dx.abs() / len } else { dy.abs() / len };
    let reach = (half + 0.5) / slope;
    if major_x {
        let start = (x0.min(x1) - half).floor().max(0.0) as i64;
        let end = ((x0.max(x1) + half).ceil() as i64).min(img_w - 1);
        for x in start..=end {
            let cx = x as f32 + 0.5;
            let yc = y0 + (cx - x0) * dy / dx;
            let near_end = (cx - x0).abs() < half + 2.0 || (cx - x1).abs() < half + 2.0;
            let y_start = floor_i64(yc - reach).max(row_start);
            let y_end = floor_i64(yc + reach + 1.0).min(row_end - 1);
            for y in y_start..=y_end {
                let cy = y as f32 + 0.5;
                let mut cov = (half + 0.5 - (cy - yc).abs() * slope).clamp(0.0, 1.0);
                if near_end {
                    cov *= ends(cx, cy);
                }
                if cov > 0.0 {
                    paint(x, y, cov);
                }
            }
        }
    } else {
        let start = ((y0.min(y1) - half).floor() as i64).max(row_start);
        let end = ((y0.max(y1) + half).ceil() as i64).min(row_end - 1);
        for y in start..=end {
            let cy = y as f32 + 0.5;
            let xc = x0 + (cy - y0) * dx / dy;
            let near_end = (cy - y0).abs() < half + 2.0 || (cy - y1).abs() < half + 2.0;
            let x_start = floor_i64(xc - reach).max(0);
            let x_end = floor_i64(xc + reach + 1.0).min(img_w - 1);
            for x in x_start..=x_end {
                let cx = x as f32 + 0.5;
                let mut cov = (half + 0.5 - (cx - xc).abs() * slope).clamp(0.0, 1.0);
                if near_end {
                    cov *= ends(cx, cy);
                }
                if cov > 0.0 {
                    paint(x, y, cov);
                }
            }
        }
    }
}

/// `v.floor()` as an integer without a libm call (plain casts truncate toward zero).
#[inline]
fn floor_i64(v: f32) -> i64 {
    let t = v as i64;
    if (t as f32) > v { t.saturating_sub(1) } else { t }
}

/// An image as PNG bytes (the PNG backend; SVG embeds dense cell grids this way too).
pub fn png_bytes(image: &RgbaImage) -> Result<Vec<u8>, image::ImageError> {
    let mut bytes = Vec::new();
    image.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)?;
    Ok(bytes)
}

/// Colour of text written on a cell of colour `rgb`: near-black on light cells, near-white on dark
/// ones, by WCAG relative luminance. The one rule for cell text on screen and in exported PNGs.
pub fn cell_text_rgb(rgb: [u8; 3]) -> [u8; 3] {
    if luminance(rgb) > 0.4 { [20, 20, 20] } else { [245, 245, 245] }
}

/// Relative luminance (0 = black, 1 = white) of an sRGB colour, for choosing readable text on it.
pub(crate) fn luminance(rgb: [u8; 3]) -> f32 {
    let lin = |c: u8| {
        let c = f32::from(c) / 255.0;
        if c <= 0.04045 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
    };
    0.2126 * lin(rgb[0]) + 0.7152 * lin(rgb[1]) + 0.0722 * lin(rgb[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_capped_and_never_zero() {
        let img = new_image(1e9, f32::NAN, [0, 0, 0, 255]);
        assert_eq!(img.dimensions(), (MAX_SIDE, 1));
        assert_eq!(new_image(0.0, -5.0, [0; 4]).dimensions(), (1, 1));
    }

    #[test]
    fn blending_half_white_over_black_gives_mid_grey() {
        let mut img = new_image(2.0, 2.0, [0, 0, 0, 255]);
        blend_pixel(&mut img, 1, 1, [255, 255, 255, 255], 0.5);
        blend_pixel(&mut img, -1, 7, [255, 255, 255, 255], 1.0);
        assert_eq!(img.get_pixel(1, 1).0, [128, 128, 128, 255]);
        assert_eq!(img.get_pixel(0, 0).0, [0, 0, 0, 255]);
    }

    #[test]
    fn lines_cover_their_path_and_nothing_far_away() {
        let mut img = new_image(100.0, 100.0, [0, 0, 0, 255]);
        draw_line(&mut img, (10.0, 10.0), (90.0, 50.0), 2.0, [255, 0, 0, 255], 1.0);
        assert!(img.get_pixel(50, 30).0[0] > 200);
        assert_eq!(img.get_pixel(50, 60).0[0], 0);
        // Steep lines walk the other axis.
        draw_line(&mut img, (5.0, 0.0), (7.0, 99.0), 1.0, [0, 255, 0, 255], 1.0);
        assert!(img.get_pixel(6, 50).0[1] > 100);
        // Off-image and degenerate lines are ignored.
        draw_line(&mut img, (-50.0, -50.0), (1e6, f32::NAN), 2.0, [0, 0, 255, 255], 1.0);
        draw_line(&mut img, (3.0, 3.0), (3.0, 3.0), 2.0, [0, 0, 255, 255], 1.0);
        draw_line(&mut img, (-1e30, 5.0), (1e30, -1e30), 2.0, [0, 0, 255, 255], 1.0);
        draw_line(&mut img, (5.0, -1e30), (6.0, 1e30), 2.0, [0, 0, 255, 255], 1.0);
    }

    #[test]
    fn banded_drawing_gives_the_same_pixels() {
        let segments: Vec<Segment> = (0..40)
            .map(|i| Segment {
                from: (3.0, i as f32 * 7.0),
                to: (60.0, 290.0 - i as f32 * 5.0),
                alpha: 0.3 + i as f32 / 80.0,
            })
            .collect();
        let mut one_by_one = new_image(64.0, 300.0, [255, 255, 255, 255]);
        for s in &segments {
            draw_line(&mut one_by_one, s.from, s.to, 2.0, [200, 30, 90, 255], s.alpha);
        }
        let mut banded = new_image(64.0, 300.0, [255, 255, 255, 255]);
        let strokes: Vec<Stroke> = segments
            .iter()
            .map(|s| Stroke { from: s.from, to: s.to, paints: vec![([200, 30, 90, 255], s.alpha)] })
            .collect();
        draw_strokes(&mut banded, &strokes, 2.0);
        assert_eq!(one_by_one, banded);
    }

    #[test]
    fn a_stroke_of_several_paints_is_the_line_drawn_once_per_paint() {
        let paints: Vec<([u8; 4], f32)> =
            (0..70).map(|i| ([(i * 3) as u8, 200 - i as u8, 90, 255], 0.05 + i as f32 / 100.0)).collect();
        let (from, to) = ((2.0, 3.0), (60.0, 280.0));
        let mut one_by_one = new_image(64.0, 300.0, [255, 255, 255, 255]);
        for &(color, alpha) in &paints {
            draw_line(&mut one_by_one, from, to, 2.5, color, alpha);
        }
        let mut stroked = new_image(64.0, 300.0, [255, 255, 255, 255]);
        // 70 paints: more than one chunk of MAX_PAINTS.
        draw_strokes(&mut stroked, &[Stroke { from, to, paints }], 2.5);
        assert_eq!(one_by_one, stroked);
    }
}
