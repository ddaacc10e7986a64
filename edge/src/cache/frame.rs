//! The redirect's head cut around its URL, built once per process.
//!
//! Every link's pre-serialised redirect is the same status line and
//! headers with only the `Location` value changing, so a cache entry keeps
//! just its URL and the fast path writes `before ‖ url ‖ after`. Storing
//! each link's whole head cost ~90 bytes per entry beyond the URL: more
//! than the entry's own bookkeeping (`docs/perf.md`, "Memory").

use std::sync::Arc;

/// Builds the redirect's head for a URL: the bytes and the offset of the
/// URL inside them (`None`: the URL cannot be a `Location`).
pub type Serialiser = dyn Fn(&str) -> Option<(Vec<u8>, usize)> + Send + Sync;

/// A redirect head without its URL.
pub struct Frame {
    serialise: Arc<Serialiser>,
    before: Box<[u8]>,
    after: Box<[u8]>,
}

impl Frame {
    /// The frame of `serialise`'s heads, cut around a probe URL; `None`
    /// when the serialiser does not put the URL where it says.
    pub fn new(serialise: Arc<Serialiser>) -> Option<Frame> {
        const PROBE: &str = "/";
        let (head, at) = serialise(PROBE)?;
        let end = at.checked_add(PROBE.len())?;
        if head.get(at..end)? != PROBE.as_bytes() {
            return None;
        }
        Some(Frame {
            before: head.get(..at)?.into(),
            after: head.get(end..)?.into(),
            serialise,
        })
    }

    /// True when the head the serialiser writes for `url` is exactly this
    /// frame around it (a URL it refuses, or writes differently, is not:
    /// such a link is answered by the proxy).
    pub fn fits(&self, url: &str) -> bool {
        let Some((head, at)) = (self.serialise)(url) else {
            return false;
        };
        let end = at + url.len();
        at == self.before.len()
            && head.len() == end + self.after.len()
            && head[..at] == *self.before
            && head[at..end] == *url.as_bytes()
            && head[end..] == *self.after
    }

    /// The head of a redirect to `url` (one that [`Frame::fits`], or a
    /// destination chosen by the link's validated rules): three slices
    /// written in order.
    pub fn around<'a>(&'a self, url: &'a [u8]) -> [&'a [u8]; 3] {
        [&self.before, url, &self.after]
    }

    /// The head for `url`, made now (a URL not known to fit).
    pub fn serialise(&self, url: &str) -> Option<Vec<u8>> {
        (self.serialise)(url).map(|(head, _)| head)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A serialiser of heads `302` + `Location` that refuses a line break:
    /// the shape of the fast path's, for the cache's tests.
    pub(in crate::cache) fn location(url: &str) -> Option<(Vec<u8>, usize)> {
        if url.contains('\n') {
            return None;
        }
        let mut r = b"HTTP/1.1 302 Found\r\nLocation: ".to_vec();
        let at = r.len();
        r.extend_from_slice(url.as_bytes());
        r.extend_from_slice(b"\r\n");
        Some((r, at))
    }

    #[test]
    fn the_frame_is_the_head_around_any_url() {
        let Some(f) = Frame::new(Arc::new(location)) else {
            panic!("no frame")
        };
        let url = "https://x.example/a?b=1";
        assert!(f.fits(url));
        assert_eq!(
            f.around(url.as_bytes()).concat(),
            b"HTTP/1.1 302 Found\r\nLocation: https://x.example/a?b=1\r\n"
        );
        assert_eq!(f.serialise(url), location(url).map(|(h, _)| h));
        // Refused by the serialiser: does not fit.
        assert!(!f.fits("https://x.example/\nSet-Cookie: a=b"));
    }

    #[test]
    fn a_serialiser_that_varies_or_misplaces_is_not_believed() {
        // Misplaces the URL: no frame at all.
        assert!(Frame::new(Arc::new(|u: &str| Some((u.as_bytes().to_vec(), 1)))).is_none());
        // A head that depends on the URL beyond Location: only the probe's
        // kind of URL fits.
        let varies = |u: &str| {
            let mut r = b"HTTP/1.1 302 Found\r\nLocation: ".to_vec();
            let at = r.len();
            r.extend_from_slice(u.as_bytes());
            r.extend_from_slice(if u.len() > 1 {
                b"\r\nX: long\r\n"
            } else {
                b"\r\n"
            });
            Some((r, at))
        };
        let Some(f) = Frame::new(Arc::new(varies)) else {
            panic!("no frame")
        };
        assert!(f.fits("/"));
        assert!(!f.fits("https://x.example/"));
    }
}
