//! Counting the items of a batch creation (`POST /api/v1/links/batch`,
//! protocol section 5) while its body streams through an edge, so the
//! per-client creation limit spends one token per item (issue 23, item 9).
//!
//! Sans-IO: [`ItemCounter::feed`] takes the body in whatever pieces it
//! arrives (a chunk may end inside a string or an escape), and
//! [`ItemCounter::items`] gives the count. It does not validate JSON: it
//! counts the elements of every array directly under the top-level object
//! (`{"links": [a, b, c]}` → 3), which is never fewer than the origin's
//! count of `links`. A body that is not an object, or has no such array,
//! counts as 1: the origin refuses it, like a single creation. Garbage may
//! count more than it holds, never less than a valid body does. The
//! OpenResty module mirrors it (`lua-compat/openresty/lua/shorturl/batch.lua`).

/// The streaming counter (a few bytes of state; no allocation).
#[derive(Debug, Clone, Default)]
pub struct ItemCounter {
    /// Open containers (`{` or `[` not yet closed).
    depth: u32,
    /// Whether the body starts with an object: unknown before its first
    /// non-blank byte.
    object: Option<bool>,
    /// The container open at depth 2 is an array under the top-level
    /// object: its elements count.
    counting: bool,
    /// Inside such an array, an element has started since the last `,`.
    in_element: bool,
    in_string: bool,
    /// The previous byte of the string was an unescaped `\`.
    escape: bool,
    elements: u64,
}

impl ItemCounter {
    /// A counter for a new body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts the next piece of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.object == Some(false) {
            return; // not an object: 1, whatever follows
        }
        for &b in chunk {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                continue;
            }
            if self.object.is_none() {
                let object = b == b'{';
                self.object = Some(object);
                if !object {
                    return;
                }
            }
            if self.counting && self.depth == 2 && !self.in_element && b != b',' && b != b']' {
                self.elements = self.elements.saturating_add(1);
                self.in_element = true;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth = self.depth.saturating_add(1);
                    if self.depth == 2 {
                        self.counting = b == b'[';
                        self.in_element = false;
                    }
                }
                b'}' | b']' => {
                    if self.depth == 2 {
                        self.counting = false;
                    }
                    self.depth = self.depth.saturating_sub(1);
                }
                b',' if self.depth == 2 => self.in_element = false,
                _ => {}
            }
        }
    }

    /// The items counted so far: at least 1.
    pub fn items(&self) -> u64 {
        self.elements.max(1)
    }
}

/// The items of a whole body (the OpenResty module's case: it reads the
/// body before counting).
pub fn count_items(body: &[u8]) -> u64 {
    let mut c = ItemCounter::new();
    c.feed(body);
    c.items()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count of `body` fed whole, and fed in every split into two
    /// pieces and one byte at a time: all must agree.
    fn count(body: &str) -> u64 {
        let b = body.as_bytes();
        let whole = count_items(b);
        for cut in 0..=b.len() {
            let mut c = ItemCounter::new();
            c.feed(&b[..cut]);
            c.feed(&b[cut..]);
            assert_eq!(c.items(), whole, "{body:?} cut at {cut}");
        }
        let mut c = ItemCounter::new();
        for byte in b.chunks(1) {
            c.feed(byte);
        }
        assert_eq!(c.items(), whole, "{body:?} byte by byte");
        whole
    }

    #[test]
    fn counts_the_links() {
        assert_eq!(count(r#"{"links": []}"#), 1);
        assert_eq!(count(r#"{"links": [{"url": "https://a.example/"}]}"#), 1);
        assert_eq!(
            count(r#"{"links":[{"url":"https://a.example/"},{"url":"https://b.example/"}]}"#),
            2
        );
        let many = format!(
            r#"{{ "links" : [ {} ] }}"#,
            vec![r#"{"url": "https://x.example/?a=[1,2]&b={c}"}"#; 21].join(" ,\n\t")
        );
        assert_eq!(count(&many), 21);
    }

    #[test]
    fn strings_and_escapes_hide_structure_across_chunks() {
        // Brackets, braces, commas and quotes inside strings do not count,
        // escaped quotes and backslashes included.
        let body =
            r#"{"links": [{"url": "https://a.example/\"],[{\\", "code": "x,y"}, {"url": "\\\\"}]}"#;
        assert_eq!(count(body), 2);
        let body = r#"{"a\"": "[", "links": ["\u005d", "\\", "]"]}"#;
        assert_eq!(count(body), 3);
    }

    #[test]
    fn nested_arrays_count_once_per_element() {
        assert_eq!(count(r#"{"links": [[1, 2, 3], [4], {"x": [5, 6]}]}"#), 3);
        // Arrays deeper than directly under the top-level object never count.
        assert_eq!(count(r#"{"a": {"links": [1, 2, 3]}}"#), 1);
        // Every array directly under the top-level object counts: more
        // than the origin's count, never fewer.
        assert_eq!(count(r#"{"links": [1, 2], "other": [3, 4, 5]}"#), 5);
        assert_eq!(count(r#"{"links": [1, 2]} {"links": [3]}"#), 3);
    }

    #[test]
    fn anything_but_an_object_counts_one() {
        for body in [
            "",
            "   ",
            "[1, 2, 3, 4]",
            r#""{\"links\": [1, 2, 3]}""#,
            "garbage [1,2,3]",
            "null",
            r#"{"links": "1,2,3"}"#,
            r#"{"links": 5}"#,
        ] {
            assert_eq!(count(body), 1, "{body:?}");
        }
    }

    #[test]
    fn garbage_never_panics_and_never_counts_below_one() {
        for body in [
            "{",
            "}",
            "]]]]",
            "{[[[[",
            "{\"",
            "{\"\\",
            r#"{"links": [1 2 3]}"#,
            r#"{"links": [,,,]}"#,
            "{]]]]][1,2,3]",
            "{\"links\": [1, 2",
        ] {
            assert!(count(body) >= 1, "{body:?}");
        }
        assert_eq!(count(r#"{"links": [1, 2"#), 2, "an unfinished body");
        // Depth never wraps.
        let deep = format!("{{{}", "[".repeat(100_000));
        assert_eq!(count_items(deep.as_bytes()), 1);
        let mut c = ItemCounter::new();
        c.feed(&[0xff, 0x00, b'{', 0xfe]);
        assert_eq!(c.items(), 1);
    }
}
