//! `guide:`: in-app browser guidance (protocol 4.6): which in-app browsers
//! get the page, which destinations they cannot open, and which links
//! guide by default.

use super::file::GuideFile;
use super::{err, ConfigError};
use shorturl_common::host::normalize_host;
use shorturl_common::link_rules::{App, Set};
use std::collections::BTreeMap;

/// The validated `guide:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuideConfig {
    /// Links guide unless their domain or they say otherwise.
    pub default: bool,
    /// Normalised short domain → on or off.
    pub domains: BTreeMap<String, bool>,
    /// The in-app browsers guided (a link's `b`).
    pub apps: Set<App>,
    /// Lower case, without the dot.
    pub extensions: Vec<String>,
    /// Normalised hosts.
    pub hosts: Vec<String>,
}

impl Default for GuideConfig {
    fn default() -> Self {
        GuideConfig {
            default: true,
            domains: BTreeMap::new(),
            apps: [App::Wechat, App::Qq, App::Weibo, App::Alipay, App::Dingtalk]
                .into_iter()
                .collect(),
            extensions: vec!["apk".into()],
            hosts: Vec::new(),
        }
    }
}

/// `guide:`.
pub fn guide(f: GuideFile) -> Result<GuideConfig, ConfigError> {
    let d = GuideConfig::default();
    let mut domains = BTreeMap::new();
    for (host, on) in f.domains {
        let Some(h) = normalize_host(&host) else {
            return err("guide.domains", format!("not a host: {host:?}"));
        };
        domains.insert(h, on);
    }
    let apps = match f.apps {
        None => d.apps,
        Some(names) => {
            let mut apps = Vec::new();
            for n in &names {
                match App::parse(n) {
                    Some(a) => apps.push(a),
                    None => {
                        let known: Vec<&str> = App::ALL.iter().map(|a| a.as_str()).collect();
                        return err(
                            "guide.apps",
                            format!("unknown app {n:?} (one of {})", known.join(", ")),
                        );
                    }
                }
            }
            apps.into_iter().collect()
        }
    };
    let extensions = match f.extensions {
        None => d.extensions,
        Some(exts) => {
            let mut out = Vec::new();
            for e in exts {
                let e = e.trim_start_matches('.').to_ascii_lowercase();
                if e.is_empty() || e.len() > 16 || !e.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return err("guide.extensions", format!("not a file extension: {e:?}"));
                }
                out.push(e);
            }
            out
        }
    };
    let mut hosts = Vec::new();
    for h in f.hosts {
        match normalize_host(&h) {
            Some(n) => hosts.push(n),
            None => return err("guide.hosts", format!("not a host: {h:?}")),
        }
    }
    Ok(GuideConfig {
        default: f.default.unwrap_or(d.default),
        domains,
        apps,
        extensions,
        hosts,
    })
}
