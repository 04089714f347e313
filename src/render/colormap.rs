//! Colormaps for values and distinct colours for heads.

/// A continuous colormap from the `colorous` crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Colormap {
    /// Perceptually uniform dark blue → yellow.
    #[default]
    Viridis,
    /// Perceptually uniform black → pale yellow through purple.
    Magma,
    /// Perceptually uniform black → yellow through red.
    Inferno,
    /// Perceptually uniform blue → yellow through magenta.
    Plasma,
    /// Viridis tuned for colour-vision deficiency: blue → yellow.
    Cividis,
    /// White → black.
    Greys,
    /// Diverging: blue (low) → white → red (high).
    RdBu,
    /// Diverging: purple (low) → white → orange (high).
    PuOr,
}

impl Colormap {
    /// Every colormap, in menu order.
    pub const ALL: [Colormap; 8] =
        [Self::Viridis, Self::Magma, Self::Inferno, Self::Plasma, Self::Cividis, Self::Greys, Self::RdBu, Self::PuOr];

    /// Lower-case name, the same as its serde and command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Viridis => "viridis",
            Self::Magma => "magma",
            Self::Inferno => "inferno",
            Self::Plasma => "plasma",
            Self::Cividis => "cividis",
            Self::Greys => "greys",
            Self::RdBu => "rdbu",
            Self::PuOr => "puor",
        }
    }

    /// The colormap called `name` (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether the map has a neutral middle, for values centred on zero.
    pub fn is_diverging(self) -> bool {
        matches!(self, Self::RdBu | Self::PuOr)
    }

    /// Colour at `t` in [0, 1] (clamped; NaN gives the colour of 0).
    pub fn rgb(self, t: f32) -> [u8; 3] {
        let t = if t.is_nan() { 0.0 } else { f64::from(t.clamp(0.0, 1.0)) };
        let (gradient, t) = match self {
            Self::Viridis => (colorous::VIRIDIS, t),
            Self::Magma => (colorous::MAGMA, t),
            Self::Inferno => (colorous::INFERNO, t),
            Self::Plasma => (colorous::PLASMA, t),
            Self::Cividis => (colorous::CIVIDIS, t),
            Self::Greys => (colorous::GREYS, t),
            // colorous runs red → blue; negative values should be the cool end.
            Self::RdBu => (colorous::RED_BLUE, 1.0 - t),
            // colorous already runs purple → orange: cool low, warm high like RdBu above.
            Self::PuOr => (colorous::PURPLE_ORANGE, t),
        };
        let c = gradient.eval_continuous(t);
        [c.r, c.g, c.b]
    }

    /// The map sampled at 256 evenly spaced points, entry `i` at `t = i / 255`.
    pub fn lut(self) -> [[u8; 3]; 256] {
        std::array::from_fn(|i| self.rgb(i as f32 / 255.0))
    }
}

/// Index into a 256-entry lookup table for `value` in [`lo`, `hi`]; NaN and empty ranges give 0.
pub(crate) fn lut_index(value: f32, lo: f32, hi: f32) -> usize {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) || value.is_nan() {
        return 0;
    }
    let t = ((value - lo) / span).clamp(0.0, 1.0);
    (t * 255.0 + 0.5) as usize
}

/// Colour of masked cells (NaN values: keys a causal mask hid), a neutral grey no colour map uses.
pub const MASKED_RGB: [u8; 3] = [128, 128, 128];

/// Colour of one cell: `value` in [`lo`, `hi`] through `lut`, NaN (masked) as [`MASKED_RGB`].
pub fn cell_rgb(lut: &[[u8; 3]; 256], value: f32, lo: f32, hi: f32) -> [u8; 3] {
    if value.is_nan() { MASKED_RGB } else { lut[lut_index(value, lo, hi)] }
}

/// Cell values to RGBA bytes, one pixel per value in order, mapping [`lo`, `hi`] through `cmap`
/// (NaN, a masked cell, as [`MASKED_RGB`]).
pub fn cells_rgba(values: &[f32], lo: f32, hi: f32, cmap: Colormap) -> Vec<u8> {
    let lut = cmap.lut();
    let mut out = Vec::with_capacity(values.len() * 4);
    for &v in values {
        let [r, g, b] = cell_rgb(&lut, v, lo, hi);
        out.extend_from_slice(&[r, g, b, 255]);
    }
    out
}

/// Qualitative colours that stay apart for common colour-vision deficiencies.
///
/// Okabe–Ito's seven colours (black left out: it vanishes on the dark theme), then Paul Tol's
/// muted wine, grey, sand, purple and pale cyan, picked greedily for the largest Oklab distance
/// under normal, deuteranope and protanope vision.
const QUALITATIVE: [[u8; 3]; 12] = [
    [0x00, 0x72, 0xB2], // blue
    [0xE6, 0x9F, 0x00], // orange
    [0x00, 0x9E, 0x73], // bluish green
    [0xD5, 0x5E, 0x00], // vermillion
    [0x56, 0xB4, 0xE9], // sky blue
    [0xCC, 0x79, 0xA7], // reddish purple
    [0xF0, 0xE4, 0x42], // yellow
    [0x88, 0x22, 0x55], // wine
    [0xBB, 0xBB, 0xBB], // grey
    [0xDD, 0xCC, 0x77], // sand
    [0xAA, 0x33, 0x77], // purple
    [0x88, 0xCC, 0xEE], // pale cyan
];

/// Pairwise distinct colours for `n` heads: a colour-blind-aware palette up to 12, evenly spaced OKLCH hues above.
pub fn head_colors(n: usize) -> Vec<[u8; 3]> {
    if n <= QUALITATIVE.len() {
        return QUALITATIVE[..n].to_vec();
    }
    // Hues spread evenly around the circle but handed out in a golden-ratio stride, so neighbouring
    // heads get far-apart hues; the lightness alternates between two levels.
    let stride = golden_stride(n);
    (0..n)
        .map(|i| {
            let slot = (i * stride) % n;
            let hue = 25.0 + 360.0 * slot as f64 / n as f64;
            let lightness = if i % 2 == 0 { 0.60 } else { 0.76 };
            oklch_to_srgb(lightness, 0.14, hue)
        })
        .collect()
}

/// A step near `n / φ²` that is coprime with `n`, so `i * step mod n` visits every slot once.
fn golden_stride(n: usize) -> usize {
    let start = ((n as f64) * 0.381_966).round().max(1.0) as usize;
    (start..n).find(|&s| gcd(s, n) == 1).unwrap_or(1)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `sRGB` bytes of an OKLCH colour, lowering the chroma until it fits the sRGB gamut.
fn oklch_to_srgb(lightness: f64, chroma: f64, hue_deg: f64) -> [u8; 3] {
    let (sin, cos) = hue_deg.to_radians().sin_cos();
    let mut chroma = chroma;
    for _ in 0..32 {
        let rgb = oklab_to_linear_srgb(lightness, chroma * cos, chroma * sin);
        if rgb.iter().all(|c| (-1e-4..=1.0 + 1e-4).contains(c)) {
            return rgb.map(encode_srgb);
        }
        chroma *= 0.92;
    }
    oklab_to_linear_srgb(lightness, 0.0, 0.0).map(encode_srgb)
}

/// Björn Ottosson's Oklab to linear `sRGB`.
fn oklab_to_linear_srgb(l: f64, a: f64, b: f64) -> [f64; 3] {
    let l_ = (l + 0.396_337_777_4 * a + 0.215_803_757_3 * b).powi(3);
    let m_ = (l - 0.105_561_345_8 * a - 0.063_854_172_8 * b).powi(3);
    let s_ = (l - 0.089_484_177_5 * a - 1.291_485_548 * b).powi(3);
    [
        4.076_741_662_1 * l_ - 3.307_711_591_3 * m_ + 0.230_969_929_2 * s_,
        -1.268_438_004_6 * l_ + 2.609_757_401_1 * m_ - 0.341_319_396_5 * s_,
        -0.004_196_086_3 * l_ - 0.703_418_614_7 * m_ + 1.707_614_701 * s_,
    ]
}

fn encode_srgb(linear: f64) -> u8 {
    let c = linear.clamp(0.0, 1.0);
    let encoded = if c <= 0.003_130_8 { 12.92 * c } else { 1.055 * c.powf(1.0 / 2.4) - 0.055 };
    (encoded * 255.0).round() as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_colors_are_pairwise_distinct() {
        assert!(head_colors(0).is_empty());
        for n in 1..=64 {
            let colors = head_colors(n);
            assert_eq!(colors.len(), n);
            for i in 0..n {
                for j in i + 1..n {
                    assert_ne!(colors[i], colors[j], "n={n}: heads {i} and {j}");
                }
            }
        }
    }

    #[test]
    fn generated_head_colors_are_perceptibly_apart() {
        let colors = head_colors(64);
        for (i, a) in colors.iter().enumerate() {
            for b in &colors[i + 1..] {
                let dist: i32 = a.iter().zip(b).map(|(&x, &y)| (i32::from(x) - i32::from(y)).abs()).sum();
                assert!(dist >= 6, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn cells_map_the_range_ends_to_the_lut_ends() {
        for cmap in Colormap::ALL {
            let lut = cmap.lut();
            let px = cells_rgba(&[-1.0, 2.0, f32::NAN, -5.0, 9.0], -1.0, 2.0, cmap);
            assert_eq!(px.len(), 20);
            assert_eq!(&px[0..3], &lut[0]);
            assert_eq!(&px[4..7], &lut[255]);
            assert_eq!(&px[8..11], &MASKED_RGB, "NaN is a masked cell");
            assert_eq!(&px[12..15], &lut[0]);
            assert_eq!(&px[16..19], &lut[255]);
            assert!(px.chunks(4).all(|p| p[3] == 255));
        }
        // An empty range does not divide by zero.
        assert_eq!(cells_rgba(&[1.0], 1.0, 1.0, Colormap::Viridis).len(), 4);
    }

    #[test]
    fn diverging_maps_run_cool_to_warm_through_white() {
        let low = Colormap::RdBu.rgb(0.0);
        let high = Colormap::RdBu.rgb(1.0);
        assert!(low[2] > low[0], "low end is blue: {low:?}");
        assert!(high[0] > high[2], "high end is red: {high:?}");
        let mid = Colormap::RdBu.rgb(0.5);
        assert!(mid.iter().all(|&c| c > 230), "{mid:?}");
        let low = Colormap::PuOr.rgb(0.0);
        assert!(low[2] > low[1], "low end is purple: {low:?}");
        assert!(Colormap::PuOr.is_diverging() && !Colormap::Viridis.is_diverging());
        assert_eq!(Colormap::Viridis.rgb(f32::NAN), Colormap::Viridis.rgb(0.0));
    }

    #[test]
    fn names_round_trip() {
        for cmap in Colormap::ALL {
            assert_eq!(Colormap::from_name(cmap.name()), Some(cmap));
            assert_eq!(serde_json::to_string(&cmap).unwrap(), format!("\"{}\"", cmap.name()));
        }
        assert_eq!(Colormap::from_name("RdBu"), Some(Colormap::RdBu));
        assert_eq!(Colormap::from_name("jet"), None);
    }
}
