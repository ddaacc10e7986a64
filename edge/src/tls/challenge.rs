//! ACME HTTP-01 answers: `GET /.well-known/acme-challenge/{token}` is
//! answered by every edge, on plain HTTP (and TLS), from the shared store
//! (`su:1:acme:challenge:{token}`), so the CA may reach whichever edge it
//! likes while one edge is issuing.

/// The path prefix of HTTP-01 challenges (RFC 8555 section 8.3).
pub const PREFIX: &str = "/.well-known/acme-challenge/";

/// The token of a challenge path: base64url characters only, 1 to 128 of
/// them (anything else can be no token of ours: 404 without a lookup).
pub fn token_of(path: &str) -> Option<&str> {
    let t = path.strip_prefix(PREFIX)?;
    let ok = (1..=128).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_base64url() {
        assert_eq!(
            token_of("/.well-known/acme-challenge/aB3-_x"),
            Some("aB3-_x")
        );
        for bad in [
            "/.well-known/acme-challenge/",
            "/.well-known/acme-challenge/a/b",
            "/.well-known/acme-challenge/a.b",
            "/.well-known/acme-challenge/%41",
            "/.well-known/other/abc",
        ] {
            assert_eq!(token_of(bad), None, "{bad}");
        }
        let long = format!("{PREFIX}{}", "a".repeat(129));
        assert_eq!(token_of(&long), None);
    }
}
