//! CSRF tokens: 256 random bits, hex, one per session (and one per
//! sign-in form, double-submitted in a cookie), compared in constant time.

/// A fresh token (64 hex digits).
pub fn token() -> String {
    let b: [u8; 32] = rand::random();
    hex::encode(b)
}

/// Whether `given` equals `expected`, in time independent of where they differ.
pub fn matches(expected: &str, given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare() {
        let t = token();
        assert_eq!(t.len(), 64);
        assert_ne!(t, token());
        assert!(matches(&t, Some(&t.clone())));
        assert!(!matches(&t, None));
        assert!(!matches(&t, Some("")));
        assert!(!matches(&t, Some(&t[..63])));
        assert!(!matches("", Some("")));
        let mut other = t.clone().into_bytes();
        other[10] = if other[10] == b'a' { b'b' } else { b'a' };
        assert!(!matches(&t, Some(std::str::from_utf8(&other).unwrap())));
    }
}
