//! Password-protected links (protocol 4.5), the origin's side: the
//! password a creation or edit sets (checked, then hashed with argon2id
//! off the async threads), and a visitor's entry of it (limited, checked,
//! answered with an unlock token the edges open in process).

use crate::config::UnlockConfig;
use crate::links::LinkError;
use crate::passwords::{hash_password, Checks, SigninLimiter};
use prometheus::{IntCounter, IntCounterVec};
use shorturl_common::unlock::UnlockKeys;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Shortest and longest password (characters).
pub const MIN_PASSWORD: usize = 4;
pub const MAX_PASSWORD: usize = 128;

/// A password as a creation or edit gave it, checked, not yet hashed.
/// `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct NewPassword(String);

impl std::fmt::Debug for NewPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewPassword(<redacted>)")
    }
}

impl NewPassword {
    /// `s` when it is one: [`MIN_PASSWORD`]-[`MAX_PASSWORD`] characters
    /// (not bytes) without control characters.
    pub fn new(s: &str) -> Option<NewPassword> {
        let ok = (MIN_PASSWORD..=MAX_PASSWORD).contains(&s.chars().count())
            && !s.chars().any(char::is_control);
        ok.then(|| NewPassword(s.to_owned()))
    }
}

/// How a visitor's password entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// The right password: here is the token.
    Opened,
    Wrong,
    /// Over the attempt budgets (nothing was checked).
    Limited,
    /// `unlock.max_concurrent_checks` checks are running.
    Busy,
}

impl Entry {
    pub fn label(self) -> &'static str {
        match self {
            Entry::Opened => "ok",
            Entry::Wrong => "wrong",
            Entry::Limited => "limited",
            Entry::Busy => "busy",
        }
    }
}

/// The origin's password-link service: keys, budgets, checks.
pub struct Unlocker {
    pub keys: UnlockKeys,
    pub token_ttl: Duration,
    limiter: SigninLimiter,
    checks: Checks,
    /// New passwords hashed at once (each holds ~19 MiB): creations wait
    /// for a permit rather than fail.
    hashes: Arc<Semaphore>,
    /// `shorturl_unlock_attempts_total{result}`.
    pub attempts: IntCounterVec,
}

impl Unlocker {
    pub fn new(cfg: &UnlockConfig, attempts: IntCounterVec, checks: IntCounter) -> Unlocker {
        Unlocker {
            keys: cfg.keys.clone(),
            token_ttl: cfg.token_ttl,
            limiter: SigninLimiter::new(
                cfg.burst,
                cfg.refill_per_min,
                cfg.address_burst,
                cfg.address_refill_per_min,
            ),
            checks: Checks::new(cfg.max_concurrent_checks, checks),
            hashes: Arc::new(Semaphore::new(cfg.max_concurrent_checks as usize)),
            attempts,
        }
    }

    /// The argon2id PHC string of `p`, hashed on a blocking thread; a
    /// password cannot be set at all without a key to sign tokens with.
    pub async fn hash(&self, p: NewPassword) -> Result<String, LinkError> {
        if self.keys.is_empty() {
            return Err(LinkError::PasswordsDisabled);
        }
        let permit = Arc::clone(&self.hashes)
            .acquire_owned()
            .await
            .map_err(|_| LinkError::PasswordHash)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            hash_password(&p.0)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .ok_or(LinkError::PasswordHash)
    }

    /// `password` entered for the link named `link` (`<domain>/<code>`)
    /// whose hash is `phc`, by a visitor at `client`: budgets first, then
    /// the bounded check (see `crate::passwords`). Counted by result.
    pub async fn enter(
        &self,
        link: &str,
        client: Option<IpAddr>,
        phc: String,
        password: String,
    ) -> Entry {
        let entry = self.check(link, client, phc, password).await;
        self.attempts.with_label_values(&[entry.label()]).inc();
        entry
    }

    async fn check(
        &self,
        link: &str,
        client: Option<IpAddr>,
        phc: String,
        password: String,
    ) -> Entry {
        if !self.limiter.take(link, client) {
            return Entry::Limited;
        }
        let Some(permit) = self.checks.try_start() else {
            self.limiter.give_back(link, client);
            return Entry::Busy;
        };
        if self.checks.verify(permit, phc, password).await {
            self.limiter.give_back(link, client);
            Entry::Opened
        } else {
            Entry::Wrong
        }
    }

    /// Counts an entry refused before any check (`bad_request`,
    /// `cross_site`).
    pub fn refused(&self, label: &'static str) {
        self.attempts.with_label_values(&[label]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    fn unlocker(keys: UnlockKeys, burst: u32) -> Unlocker {
        let cfg = UnlockConfig {
            keys,
            burst,
            max_concurrent_checks: 1,
            ..UnlockConfig::default()
        };
        let attempts = IntCounterVec::new(Opts::new("unlock_test", "t"), &["result"]).unwrap();
        Unlocker::new(&cfg, attempts, IntCounter::new("c", "c").unwrap())
    }

    #[tokio::test]
    async fn entries_are_limited_before_the_check_and_a_success_gives_back() {
        let keys =
            UnlockKeys::from_base64(["AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]).unwrap();
        let u = unlocker(keys, 2);
        let phc = u.hash(NewPassword("right pw".into())).await.unwrap();
        assert!(phc.starts_with("$argon2id$"));
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let link = "s.shop55.com/pw1";
        let enter = |p: &str| u.enter(link, Some(ip), phc.clone(), p.to_owned());
        assert_eq!(enter("right pw").await, Entry::Opened);
        assert_eq!(
            enter("right pw").await,
            Entry::Opened,
            "a success costs nothing"
        );
        assert_eq!(enter("wrong").await, Entry::Wrong);
        assert_eq!(enter("wrong").await, Entry::Wrong);
        assert_eq!(enter("right pw").await, Entry::Limited);
        // Another address still gets in: no budget is the link's alone.
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(
            u.enter(link, Some(other), phc.clone(), "right pw".into())
                .await,
            Entry::Opened
        );
        assert_eq!(u.attempts.with_label_values(&["limited"]).get(), 1);
        assert_eq!(u.attempts.with_label_values(&["ok"]).get(), 3);
    }

    #[tokio::test]
    async fn no_key_no_password() {
        let u = unlocker(UnlockKeys::default(), 2);
        assert!(matches!(
            u.hash(NewPassword("right pw".into())).await,
            Err(LinkError::PasswordsDisabled)
        ));
    }
}
