//! QR codes of a short URL, as SVG or PNG, with deterministic bytes (the
//! same URL and parameters always give the same body, so its ETag holds
//! across origins).

use qrcode::{Color, EcLevel, QrCode};

pub use shorturl_common::pages::{
    QrParamError, QrParams, DEFAULT_MARGIN, DEFAULT_SIZE, MAX_MARGIN, SIZE_RANGE,
};

/// Why a QR code could not be made.
#[derive(Debug, thiserror::Error)]
pub enum QrError {
    /// The URL does not fit in a QR code (longer than any version holds).
    #[error("cannot encode the URL as a QR code: {0}")]
    Encode(#[from] qrcode::types::QrError),
    /// The PNG encoder failed (writing to memory: a bug, not input).
    #[error("cannot encode the PNG: {0}")]
    Png(#[from] png::EncodingError),
}

/// The module grid of `url` with its quiet zone: `side` × `side`,
/// row-major, `true` for dark.
pub struct Grid {
    pub side: usize,
    pub dark: Vec<bool>,
}

impl Grid {
    /// Encodes `url` (error correction M: survives a smudged print).
    pub fn new(url: &str, margin: u32) -> Result<Grid, QrError> {
        let code = QrCode::with_error_correction_level(url, EcLevel::M)?;
        let w = code.width();
        let m = margin as usize;
        let side = w + 2 * m;
        let mut dark = vec![false; side * side];
        for (i, c) in code.to_colors().into_iter().enumerate() {
            if c == Color::Dark {
                dark[(i / w + m) * side + i % w + m] = true;
            }
        }
        Ok(Grid { side, dark })
    }

    fn is_dark(&self, x: usize, y: usize) -> bool {
        self.dark.get(y * self.side + x).copied().unwrap_or(false)
    }
}

/// The SVG of `url`: `size` px square, one `<rect>` per horizontal run of
/// dark modules, in module units (`viewBox`), black on white.
/// What a link's QR code encodes: its short URL with the QR marker
/// (protocol 3.7), which the edges count as the click's `source` and never
/// forward.
pub fn scan_url(short_url: &str) -> String {
    format!("{short_url}?{}", shorturl_common::clicks::dims::QR_MARKER)
}

pub fn svg(url: &str, p: QrParams) -> Result<Vec<u8>, QrError> {
    let g = Grid::new(url, p.margin)?;
    let n = g.side;
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{size}\" height=\"{size}\" viewBox=\"0 0 {n} {n}\" shape-rendering=\"crispEdges\">\
         <rect width=\"{n}\" height=\"{n}\" fill=\"#ffffff\"/><g fill=\"#000000\">",
        size = p.size
    );
    for y in 0..n {
        let mut x = 0;
        while x < n {
            if !g.is_dark(x, y) {
                x += 1;
                continue;
            }
            let start = x;
            while x < n && g.is_dark(x, y) {
                x += 1;
            }
            s.push_str(&format!(
                "<rect x=\"{start}\" y=\"{y}\" width=\"{}\" height=\"1\"/>",
                x - start
            ));
        }
    }
    s.push_str("</g></svg>\n");
    Ok(s.into_bytes())
}

/// The PNG of `url`: 1-bit greyscale, whole pixels per module, the code
/// centred in a `size` px square (or, when `size` is smaller than one pixel
/// per module, the smallest square that holds one).
pub fn png(url: &str, p: QrParams) -> Result<Vec<u8>, QrError> {
    let g = Grid::new(url, p.margin)?;
    let n = g.side;
    let size = (p.size as usize).max(n);
    let scale = size / n;
    let offset = (size - scale * n) / 2;
    let row_bytes = size.div_ceil(8);
    let mut pixels = vec![0xffu8; row_bytes * size];
    for py in 0..size {
        for px in 0..size {
            let (Some(mx), Some(my)) = (
                px.checked_sub(offset).map(|v| v / scale),
                py.checked_sub(offset).map(|v| v / scale),
            ) else {
                continue;
            };
            if mx < n && my < n && g.is_dark(mx, my) {
                pixels[py * row_bytes + px / 8] &= !(0x80 >> (px % 8));
            }
        }
    }
    let side = u32::try_from(size).unwrap_or(u32::MAX);
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, side, side);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(png::BitDepth::One);
    let mut w = enc.write_header()?;
    w.write_image_data(&pixels)?;
    w.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renderings_are_deterministic_and_sized() {
        let p = QrParams {
            size: 200,
            margin: 4,
        };
        let url = "https://sho.rt/abc123";
        let a = png(url, p).unwrap();
        assert_eq!(a, png(url, p).unwrap());
        assert_eq!(svg(url, p).unwrap(), svg(url, p).unwrap());
        // IHDR width and height.
        assert_eq!(&a[16..24], &[0, 0, 0, 200, 0, 0, 0, 200]);
        // More modules than pixels: one pixel a module, the smallest square.
        let long = format!("https://sho.rt/{}", "x".repeat(60));
        let small = png(
            &long,
            QrParams {
                size: 64,
                margin: 16,
            },
        )
        .unwrap();
        let side = Grid::new(&long, 16).unwrap().side as u8;
        assert!(side > 64);
        assert_eq!(&small[16..24], &[0, 0, 0, side, 0, 0, 0, side]);
        let s = String::from_utf8(svg(url, p).unwrap()).unwrap();
        assert!(
            s.contains("width=\"200\" height=\"200\" viewBox=\"0 0 33 33\""),
            "{s}"
        );
    }
}
