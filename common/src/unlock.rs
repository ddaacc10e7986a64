//! Unlock tokens of password-protected links (protocol 4.5): what the
//! origin hands a visitor who entered a link's password, and what an edge
//! checks in process on every later visit, so those visits never reach
//! the origin. The OpenResty module checks the same
//! (`lua-compat/openresty/lua/shorturl/unlock.lua`).
//!
//! A token is `1.<kid>.<exp>.<mac>`: the key's id, its expiry (Unix
//! seconds) and base64url(HMAC-SHA256(key, "1\n<domain>\n<code>\n
//! <version>\n<exp>")). It names the record's version, so any edit of the
//! link (a new password included) voids every earlier token; it names the
//! key, so keys rotate without breaking live tokens.

use crate::secret_key::{KeyError, SecretKey};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The cookie that carries a token (scoped to `/{code}`).
pub const COOKIE: &str = "su_pass";
/// The token format's version, its first field.
const FORMAT: &str = "1";
/// Bytes of a MAC in base64url without padding.
const MAC_B64_LEN: usize = 43;

/// The keys tokens are made and checked with: the first signs (the
/// origin's `unlock.key`), every one opens. Empty: nothing is signed and
/// no token opens. `Debug` shows ids only.
#[derive(Debug, Clone, Default)]
pub struct UnlockKeys {
    keys: Vec<SecretKey>,
}

impl UnlockKeys {
    pub fn new(keys: Vec<SecretKey>) -> UnlockKeys {
        UnlockKeys { keys }
    }

    /// Keys from base64 texts, in order (the first signs).
    pub fn from_base64<'a>(
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<UnlockKeys, KeyError> {
        texts
            .into_iter()
            .map(SecretKey::from_base64)
            .collect::<Result<Vec<_>, _>>()
            .map(UnlockKeys::new)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The token for `code` on `domain` at record `version`, valid until
    /// `exp` (`None`: no key to sign with).
    pub fn sign(&self, domain: &str, code: &str, version: u64, exp: u64) -> Option<String> {
        let key = self.keys.first()?;
        let mac = URL_SAFE_NO_PAD.encode(
            mac(key, domain, code, version, exp)?
                .finalize()
                .into_bytes(),
        );
        Some(format!("{FORMAT}.{}.{exp}.{mac}", key.id()))
    }

    /// Whether `token` opens `code` on `domain` at record `version` at
    /// `now`: a key of ours by its id, not expired, and its MAC (compared
    /// in constant time).
    pub fn opens(&self, token: &[u8], domain: &str, code: &str, version: u64, now: u64) -> bool {
        let Ok(token) = std::str::from_utf8(token) else {
            return false;
        };
        let mut parts = token.split('.');
        let (Some(FORMAT), Some(kid), Some(exp), Some(mac_b64), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return false;
        };
        if exp.is_empty() || exp.len() > 20 || !exp.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(exp) = exp.parse::<u64>() else {
            return false;
        };
        if now >= exp || mac_b64.len() != MAC_B64_LEN {
            return false;
        }
        let Ok(given) = URL_SAFE_NO_PAD.decode(mac_b64) else {
            return false;
        };
        self.keys.iter().filter(|k| k.id() == kid).any(|k| {
            mac(k, domain, code, version, exp).is_some_and(|m| m.verify_slice(&given).is_ok())
        })
    }

    /// Whether any `su_pass` value of the `Cookie` header values `cookies`
    /// opens the link (see [`UnlockKeys::opens`]).
    pub fn opened_by<'c>(
        &self,
        cookies: impl IntoIterator<Item = &'c [u8]>,
        domain: &str,
        code: &str,
        version: u64,
        now: u64,
    ) -> bool {
        !self.is_empty()
            && cookies
                .into_iter()
                .flat_map(|h| h.split(|&b| b == b';'))
                .filter_map(|pair| {
                    let pair = pair.trim_ascii();
                    let value = pair.strip_prefix(COOKIE.as_bytes())?.strip_prefix(b"=")?;
                    Some(value.trim_ascii())
                })
                .any(|v| self.opens(v, domain, code, version, now))
    }
}

fn mac(key: &SecretKey, domain: &str, code: &str, version: u64, exp: u64) -> Option<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(key.bytes()).ok()?;
    m.update(format!("{FORMAT}\n{domain}\n{code}\n{version}\n{exp}").as_bytes());
    Some(m)
}

/// The `Set-Cookie` value carrying `token` for `/{code}`, kept for
/// `max_age` seconds; `Secure` when the visitor came over HTTPS.
pub fn set_cookie(token: &str, code: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={token}; Path=/{code}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared test vector (`lua-compat/openresty/t/unlock_test.lua`):
    /// key bytes 0..31.
    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const EXP: u64 = 1_900_000_000;

    fn keys(texts: &[&str]) -> UnlockKeys {
        UnlockKeys::from_base64(texts.iter().copied()).unwrap()
    }

    fn other() -> String {
        use base64::engine::general_purpose::STANDARD;
        STANDARD.encode([9u8; 32])
    }

    #[test]
    fn a_token_opens_its_link_at_its_version_until_it_expires() {
        let k = keys(&[KEY]);
        let t = k.sign("s.shop55.com", "pw1", 3, EXP).unwrap();
        let now = EXP - 10;
        assert!(k.opens(t.as_bytes(), "s.shop55.com", "pw1", 3, now), "{t}");
        assert!(
            !k.opens(t.as_bytes(), "s.shop55.com", "pw1", 3, EXP),
            "expired"
        );
        assert!(
            !k.opens(t.as_bytes(), "s.shop55.com", "pw1", 4, now),
            "an edit voids it"
        );
        assert!(
            !k.opens(t.as_bytes(), "s.other.com", "pw1", 3, now),
            "another domain"
        );
        assert!(
            !k.opens(t.as_bytes(), "s.shop55.com", "pw2", 3, now),
            "another code"
        );
        // The contract's vector, computed apart (Python's hmac).
        assert_eq!(
            t,
            "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E"
        );
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], "1");
        assert_eq!(parts[1], SecretKey::from_base64(KEY).unwrap().id());
        assert_eq!(parts[2], EXP.to_string());
        assert_eq!(parts[3].len(), MAC_B64_LEN);
    }

    #[test]
    fn tampered_or_malformed_tokens_open_nothing() {
        let k = keys(&[KEY]);
        let t = k.sign("s.shop55.com", "pw1", 3, EXP).unwrap();
        let now = EXP - 10;
        let mut flipped = t.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let later = t.replace(&EXP.to_string(), &(EXP + 1000).to_string());
        for bad in [
            flipped,
            later.into_bytes(),
            t.replacen('1', "2", 1).into_bytes(),
            format!("{t}.x").into_bytes(),
            b"1.abc.1900000000".to_vec(),
            b"".to_vec(),
            b"\xff\xfe".to_vec(),
            t.replace(&EXP.to_string(), "+1900000000").into_bytes(),
        ] {
            assert!(
                !k.opens(&bad, "s.shop55.com", "pw1", 3, now),
                "{:?}",
                String::from_utf8_lossy(&bad)
            );
        }
        assert!(!UnlockKeys::default().opens(t.as_bytes(), "s.shop55.com", "pw1", 3, now));
        assert!(UnlockKeys::default()
            .sign("s.shop55.com", "pw1", 3, EXP)
            .is_none());
    }

    #[test]
    fn rotation_keeps_live_tokens_and_drops_unknown_keys() {
        let old = keys(&[KEY]);
        let t = old.sign("s.shop55.com", "pw1", 3, EXP).unwrap();
        let both = keys(&[&other(), KEY]);
        let t2 = both.sign("s.shop55.com", "pw1", 3, EXP).unwrap();
        assert_ne!(t, t2, "signed with the new key");
        for tok in [&t, &t2] {
            assert!(both.opens(tok.as_bytes(), "s.shop55.com", "pw1", 3, EXP - 1));
        }
        assert!(!keys(&[&other()]).opens(t.as_bytes(), "s.shop55.com", "pw1", 3, EXP - 1));
    }

    #[test]
    fn any_su_pass_cookie_may_open() {
        let k = keys(&[KEY]);
        let t = k.sign("s.shop55.com", "pw1", 3, EXP).unwrap();
        let h1 = b"a=1; su_pass=junk".as_slice();
        let h2 = format!("su_passx=1;su_pass={t} ; b=2");
        let open =
            |hs: &[&[u8]]| k.opened_by(hs.iter().copied(), "s.shop55.com", "pw1", 3, EXP - 1);
        assert!(open(&[h1, h2.as_bytes()]));
        assert!(!open(&[h1]));
        assert!(!open(&[format!("xsu_pass={t}").as_bytes()]));
        assert!(!open(&[]));
    }

    #[test]
    fn the_cookie_is_scoped_to_the_link() {
        assert_eq!(
            set_cookie("T", "pw1", 3600, true),
            "su_pass=T; Path=/pw1; Max-Age=3600; HttpOnly; SameSite=Lax; Secure"
        );
        assert!(!set_cookie("T", "pw1", 60, false).contains("Secure"));
    }
}
