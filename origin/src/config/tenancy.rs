//! The tenancy part of the configuration: API callers (keys, scopes,
//! merchant binding, rate limits) and the static merchant-domain map.

use super::file::AppFile;
use super::{err, ConfigError};
use crate::tenancy::Scope;
use shorturl_common::config::FieldError;
use shorturl_common::host::normalize_host;
use std::collections::{BTreeMap, BTreeSet};

/// One API caller.
#[derive(Debug, Clone)]
pub struct AppConfig {
    pub name: String,
    /// SHA-256 of the bearer key.
    pub key_hash: [u8; 32],
    pub rate_per_sec: f64,
    pub burst: f64,
    /// Without `scopes` in the file: [`Scope::DEFAULT`].
    pub scopes: BTreeSet<Scope>,
    /// Merchants the key is bound to (empty: not bound).
    pub merchants: BTreeSet<u64>,
    /// May target a domain this fleet serves (a deliberate chain of short links).
    pub allow_short_domain_targets: bool,
}

/// `apps:` validated.
pub fn apps(list: Vec<AppFile>) -> Result<Vec<AppConfig>, ConfigError> {
    let mut apps = Vec::new();
    let mut names = BTreeSet::new();
    for a in list {
        if a.name.is_empty() || a.name.len() > 64 || !names.insert(a.name.clone()) {
            return err(
                "apps",
                format!("name {:?} is empty, too long or repeated", a.name),
            );
        }
        let key_hash: [u8; 32] = hex::decode(a.key_sha256.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                ConfigError::from(FieldError::new(
                    format!("apps.{}.key_sha256", a.name),
                    "expected 64 hex digits",
                ))
            })?;
        let rate_per_sec = a.rate_per_sec.unwrap_or(1000.0);
        let burst = a.burst.unwrap_or(rate_per_sec * 2.0);
        if !(rate_per_sec > 0.0 && burst >= 1.0) {
            return err(
                format!("apps.{}.rate_per_sec", a.name),
                "must be > 0, and burst >= 1",
            );
        }
        let scopes = match &a.scopes {
            None => Scope::DEFAULT.into_iter().collect(),
            Some(list) => {
                let mut set = BTreeSet::new();
                for s in list {
                    let Some(scope) = Scope::parse(s) else {
                        return err(
                            format!("apps.{}.scopes", a.name),
                            format!(
                                "unknown scope {s:?} (links:create, links:read, \
                                 links:manage, stats:read, admin)"
                            ),
                        );
                    };
                    set.insert(scope);
                }
                set
            }
        };
        apps.push(AppConfig {
            name: a.name,
            key_hash,
            rate_per_sec,
            burst,
            scopes,
            merchants: a.merchants.into_iter().collect(),
            allow_short_domain_targets: a.allow_short_domain_targets,
        });
    }
    Ok(apps)
}

/// `links.merchant_domains` validated: kdt_id → normalised domains. The
/// default domain belongs to no merchant.
pub fn merchant_domains(
    map: &BTreeMap<String, Vec<String>>,
    default_domain: &str,
) -> Result<BTreeMap<u64, BTreeSet<String>>, ConfigError> {
    let mut out: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for (k, domains) in map {
        let Ok(kdt) = k.trim().parse::<u64>() else {
            return err(
                "links.merchant_domains",
                format!("key {k:?} is not a kdt_id (an integer >= 0)"),
            );
        };
        for d in domains {
            match normalize_host(d) {
                Some(n) if n != default_domain => {
                    out.entry(kdt).or_default().insert(n);
                }
                Some(_) => {
                    return err(
                        format!("links.merchant_domains.{kdt}"),
                        "the default domain belongs to no merchant",
                    )
                }
                None => {
                    return err(
                        format!("links.merchant_domains.{kdt}"),
                        format!("not a valid host: {d:?}"),
                    )
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tests::MIN;
    use super::super::Config;
    use crate::tenancy::Scope;

    #[test]
    fn scopes_merchants_and_merchant_domains() {
        let text = format!(
            "{MIN}links: {{merchant_domains: {{'55': [S.Shop55.com.], 91: [go.brand91.cn]}}}}\n\
             apps:\n  - {{name: old, key_sha256: '{k}'}}\n  \
             - {{name: m55, key_sha256: '{k2}', scopes: [links:read, stats:read], merchants: [55]}}\n",
            k = "a".repeat(64),
            k2 = "b".repeat(64)
        );
        let c = Config::parse(&text, |_| None).unwrap();
        let md: Vec<(u64, Vec<&str>)> = c
            .links
            .merchant_domains
            .iter()
            .map(|(k, v)| (*k, v.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            md,
            vec![(55, vec!["s.shop55.com"]), (91, vec!["go.brand91.cn"])]
        );
        // No scopes configured: create, read and manage (own links).
        let old: Vec<Scope> = c.apps[0].scopes.iter().copied().collect();
        assert_eq!(old, Scope::DEFAULT.to_vec());
        assert!(c.apps[0].merchants.is_empty());
        let m: Vec<Scope> = c.apps[1].scopes.iter().copied().collect();
        assert_eq!(m, vec![Scope::LinksRead, Scope::StatsRead]);
        assert_eq!(
            c.apps[1].merchants.iter().copied().collect::<Vec<_>>(),
            vec![55]
        );
    }
}
