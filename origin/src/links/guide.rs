//! In-app browser guidance (protocol 4.6), the origin's side: whether a
//! link carries `b` (the in-app browsers that get the guidance page),
//! decided when the link is written from its own setting, its domain's
//! and the destinations those browsers refuse (`guide:` configuration).

use crate::config::GuideConfig;
use crate::links::options::Settings;
use shorturl_common::link_rules::Set;

/// Sets `s.o.guide` for a link on `domain` to `url`: the configured apps
/// when guidance is on for it and any of its destinations is refused.
pub fn apply(cfg: &GuideConfig, domain: &str, url: &str, s: &mut Settings) {
    let on = s
        .guide
        .or_else(|| cfg.domains.get(domain).copied())
        .unwrap_or(cfg.default);
    let refused = on
        && std::iter::once(url)
            .chain(s.destinations())
            .any(|u| refuses(cfg, u));
    s.o.guide = if refused { cfg.apps } else { Set::default() };
}

/// Whether the guided in-app browsers refuse `url`: an app download by
/// its extension, or a listed host (or a subdomain of one).
fn refuses(cfg: &GuideConfig, url: &str) -> bool {
    let Ok(u) = url::Url::parse(url) else {
        return false;
    };
    let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
    let listed = cfg.hosts.iter().any(|h| {
        host == *h
            || host
                .strip_suffix(h.as_str())
                .is_some_and(|p| p.ends_with('.'))
    });
    let path = u.path().to_ascii_lowercase();
    let download = path
        .rsplit_once('.')
        .is_some_and(|(_, ext)| cfg.extensions.iter().any(|e| e == ext));
    listed || download
}

#[cfg(test)]
mod tests {
    use super::*;
    use shorturl_common::link_rules::{App, Rule};

    fn cfg() -> GuideConfig {
        GuideConfig {
            hosts: vec!["apps.apple.com".into()],
            domains: [("quiet.example".to_owned(), false)].into_iter().collect(),
            ..GuideConfig::default()
        }
    }

    fn guided(domain: &str, url: &str, s: &mut Settings) -> bool {
        apply(&cfg(), domain, url, s);
        !s.o.guide.is_empty()
    }

    #[test]
    fn downloads_and_listed_hosts_are_guided_where_it_is_on() {
        let mut s = Settings::default();
        assert!(guided(
            "s.shop55.com",
            "https://dl.example/app/Shop.APK?v=2",
            &mut s
        ));
        assert!(s.o.guide.contains(App::Wechat) && s.o.guide.contains(App::Dingtalk));
        assert!(!s.o.guide.contains(App::Facebook));
        assert!(guided(
            "s.shop55.com",
            "https://apps.apple.com/app/id1",
            &mut s
        ));
        assert!(guided("s.shop55.com", "https://x.apps.apple.com/", &mut s));
        assert!(!guided(
            "s.shop55.com",
            "https://notapps.apple.com/",
            &mut s
        ));
        assert!(!guided("s.shop55.com", "https://shop.example/apk", &mut s));
        // A rule's destination counts too.
        s.o.rules = vec![Rule {
            url: Some("https://dl.example/a.apk".into()),
            ..Rule::default()
        }];
        assert!(guided("s.shop55.com", "https://shop.example/", &mut s));
        // Off for the domain, unless the link says on; the link's off wins.
        assert!(!guided("quiet.example", "https://shop.example/", &mut s));
        s.guide = Some(true);
        assert!(guided("quiet.example", "https://shop.example/", &mut s));
        s.guide = Some(false);
        assert!(!guided("s.shop55.com", "https://dl.example/a.apk", &mut s));
    }
}
