//! Pages helpers: raw requests with `Host` and headers, and reading QR
//! codes back (`testkit::qr`).

use super::Setup;
use reqwest::header::HeaderMap;

/// One GET (or HEAD) with `Host` and extra headers: status, headers, body.
pub async fn get(
    s: &Setup,
    method: reqwest::Method,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
) -> (u16, HeaderMap, Vec<u8>) {
    let o = &s.origin;
    let mut req = o.http.request(method, o.url(path)).header("Host", host);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = r.headers().clone();
    (status, h, r.bytes().await.unwrap().to_vec())
}

pub async fn fetch(
    s: &Setup,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
) -> (u16, HeaderMap, Vec<u8>) {
    get(s, reqwest::Method::GET, path, host, extra).await
}

pub fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
}

pub use testkit::qr::{decode, png_grey, svg_matrix};

/// Decodes the PNG and the SVG of `code` on `host` at `size`, checks that
/// they draw the same modules, and returns both texts.
pub async fn decode_both(s: &Setup, host: &str, code: &str, size: u32) -> (String, String) {
    let (st, h, png) = fetch(s, &format!("/{code}.png?size={size}"), host, &[]).await;
    assert_eq!(st, 200);
    assert_eq!(header(&h, "content-type"), "image/png");
    assert_eq!(header(&h, "content-length"), png.len().to_string());
    assert_eq!(header(&h, "cache-control"), "public, max-age=86400");
    assert_eq!(header(&h, "x-content-type-options"), "nosniff");
    let (w, hh, grey) = png_grey(&png);
    assert_eq!((w, hh), (size as usize, size as usize));
    let from_png = decode(w, hh, |x, y| grey[y * w + x]);

    let (st, h, svg) = fetch(s, &format!("/{code}.svg?size={size}&margin=2"), host, &[]).await;
    assert_eq!(st, 200);
    assert_eq!(header(&h, "content-type"), "image/svg+xml");
    assert_eq!(header(&h, "content-length"), svg.len().to_string());
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains(&format!("width=\"{size}\" height=\"{size}\"")));
    let (n, dark) = svg_matrix(&svg);
    // The same modules as the PNG (margin 4 there, 2 here): sample the
    // PNG at each module's centre.
    let png_n = n + 4;
    let scale = w / png_n;
    let off = (w - scale * png_n) / 2;
    for my in 0..n {
        for mx in 0..n {
            let (px, py) = (
                off + (mx + 2) * scale + scale / 2,
                off + (my + 2) * scale + scale / 2,
            );
            assert_eq!(
                grey[py * w + px] == 0,
                dark[my * n + mx],
                "module {mx},{my}"
            );
        }
    }
    // Rasterise the SVG (4 px a module) and decode it too.
    let from_svg = decode(n * 4, n * 4, |x, y| {
        if dark[(y / 4) * n + x / 4] {
            0
        } else {
            255
        }
    });
    (from_png, from_svg)
}
