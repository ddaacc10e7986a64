//! Console users: their password check, through the shared gates of
//! `crate::passwords` (the attempt budgets and the bound on concurrent
//! checks are taken by the sign-in view before this runs).
use crate::config::AdminUser;
use crate::passwords::{hash_password, Checks};
use shorturl_common::failpoint;
use std::sync::{Arc, OnceLock};
use tokio::sync::OwnedSemaphorePermit;

pub use crate::passwords::{HashError, SigninLimiter};

/// A hash nobody knows the password of: checked for unknown user names so
/// that they take as long as known ones (no user-name oracle by timing).
fn decoy() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let random: [u8; 16] = rand::random();
        hash_password(&hex::encode(random)).unwrap_or_default()
    })
}

/// The configured user `name` whose password is `password`, checked
/// under `permit` (see [`Checks::verify`]); an unknown name is checked
/// against a decoy hash, so it takes as long as a known one.
pub async fn check(
    checks: &Checks,
    permit: OwnedSemaphorePermit,
    users: Arc<Vec<AdminUser>>,
    name: String,
    password: String,
) -> Option<AdminUser> {
    checks.done.inc();
    // Tests hold a check here, with its permit, to fill the bound.
    if let Some(path) = failpoint::hold_path("origin.admin.check.hold", &name) {
        failpoint::hold(path).await;
    }
    let user = users.iter().find(|u| u.name == name).cloned();
    let phc = user
        .as_ref()
        .map_or_else(|| decoy().to_owned(), |u| u.password_hash.clone());
    let ok = checks.run(permit, phc, password).await;
    user.filter(|_| ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passwords::hash_password;
    use prometheus::IntCounter;

    #[tokio::test]
    async fn concurrent_checks_are_bounded_and_counted() {
        let h = hash_password("pw").unwrap();
        let users = Arc::new(vec![AdminUser {
            name: "ops".into(),
            password_hash: h,
            role: crate::config::Role::Admin,
            merchants: Default::default(),
            sso: false,
        }]);
        let checks = Checks::new(2, IntCounter::new("c", "c").unwrap());
        let p1 = checks.try_start().unwrap();
        let p2 = checks.try_start().unwrap();
        assert!(checks.try_start().is_none(), "a third waits for nobody");
        drop(p2);
        let ok = check(&checks, p1, Arc::clone(&users), "ops".into(), "pw".into()).await;
        assert_eq!(ok.map(|u| u.name), Some("ops".to_owned()));
        let p = checks.try_start().unwrap();
        assert!(check(&checks, p, users, "nobody".into(), "pw".into())
            .await
            .is_none());
        assert_eq!(checks.done.get(), 2);
        assert!(checks.try_start().is_some(), "permits released");
    }
}
