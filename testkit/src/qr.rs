//! Reading QR codes back in tests: the PNG through the `png` decoder, the
//! SVG from its `<rect>` runs, both decoded with `rqrr` (origin and edge
//! tests alike).

/// A PNG as a greyscale grid (0 black, 255 white): width, height, pixels.
pub fn png_grey(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut d = png::Decoder::new(std::io::Cursor::new(bytes));
    d.set_transformations(png::Transformations::EXPAND);
    let mut reader = d.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Grayscale);
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let (w, h) = (info.width as usize, info.height as usize);
    buf.truncate(w * h);
    (w, h, buf)
}

/// Decodes the one QR code of a `w` × `h` greyscale image.
pub fn decode(w: usize, h: usize, px: impl Fn(usize, usize) -> u8) -> String {
    let mut img = rqrr::PreparedImage::prepare_from_greyscale(w, h, px);
    let grids = img.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code in the image");
    grids[0].decode().unwrap().1
}

/// The module matrix of our SVG: `viewBox` side and its dark `<rect>` runs.
pub fn svg_matrix(svg: &str) -> (usize, Vec<bool>) {
    let attr = |el: &str, name: &str| -> usize {
        let start = el.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        el[start..].split('"').next().unwrap().parse().unwrap()
    };
    let vb = svg.split("viewBox=\"0 0 ").nth(1).unwrap();
    let n: usize = vb.split(' ').next().unwrap().parse().unwrap();
    let mut dark = vec![false; n * n];
    let group = svg.split("<g fill=\"#000000\">").nth(1).unwrap();
    for el in group.split("<rect").skip(1) {
        let (x, y, w) = (attr(el, "x"), attr(el, "y"), attr(el, "width"));
        assert_eq!(attr(el, "height"), 1);
        for i in x..x + w {
            dark[y * n + i] = true;
        }
    }
    (n, dark)
}

/// The text of a PNG QR code.
pub fn decode_png(bytes: &[u8]) -> String {
    let (w, h, grey) = png_grey(bytes);
    decode(w, h, |x, y| grey[y * w + x])
}

/// The text of an SVG QR code (rasterised at 4 px a module).
pub fn decode_svg(bytes: &[u8]) -> String {
    let (n, dark) = svg_matrix(std::str::from_utf8(bytes).unwrap());
    decode(n * 4, n * 4, |x, y| {
        if dark[(y / 4) * n + x / 4] {
            0
        } else {
            255
        }
    })
}
