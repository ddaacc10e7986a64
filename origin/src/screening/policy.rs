//! The screening policy (protocol 4.7): domains with an action, matched by
//! the longest listed suffix of a destination's host; and the domain-list
//! formats it is read from.

use sha2::{Digest, Sha256};
use shorturl_common::host::normalize_host;
use shorturl_common::link_rules::Screen;
use std::collections::HashMap;
use std::net::IpAddr;

/// What an entry does to links whose destination it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Refused at creation; existing links get the warning page with no
    /// way on.
    Block,
    /// Refused at creation; existing links get the warning page with a
    /// way on.
    Warn,
    /// Clean, whatever a parent domain's entry says.
    Allow,
}

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "block" => Some(Action::Block),
            "warn" => Some(Action::Warn),
            "allow" => Some(Action::Allow),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Block => "block",
            Action::Warn => "warn",
            Action::Allow => "allow",
        }
    }

    /// What a link covered by this entry answers (`None`: clean).
    pub fn screen(self) -> Option<Screen> {
        match self {
            Action::Block => Some(Screen::Block),
            Action::Warn => Some(Screen::Warn),
            Action::Allow => None,
        }
    }
}

/// A destination the policy screens: its host and the entry that covers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub host: String,
    /// The listed domain (the host or a parent of it).
    pub domain: String,
    pub screen: Screen,
}

/// The policy in force: one map, normalised domain → action.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    entries: HashMap<String, Action>,
    fingerprint: String,
}

impl Policy {
    /// The policy of `layers`, later layers winning for the same domain
    /// (the files in order, then the managed entries).
    pub fn new<'a>(layers: impl IntoIterator<Item = (Action, &'a [String])>) -> Policy {
        let mut entries = HashMap::new();
        for (action, domains) in layers {
            for d in domains {
                entries.insert(d.clone(), action);
            }
        }
        let fingerprint = fingerprint(&entries);
        Policy {
            entries,
            fingerprint,
        }
    }

    /// A stable digest of the entries: origins with the same policy agree
    /// on it, so the pass knows whether its last run was for this policy.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry covering `host` (normalised): the host's own, else its
    /// nearest listed parent domain's. An address matches only itself.
    pub fn lookup<'a>(&self, host: &'a str) -> Option<(&'a str, Action)> {
        if self.entries.is_empty() {
            return None;
        }
        if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
            return self.entries.get(host).map(|a| (host, *a));
        }
        let mut rest = host;
        loop {
            if let Some(a) = self.entries.get(rest) {
                return Some((rest, *a));
            }
            rest = rest.split_once('.')?.1;
        }
    }

    /// The hit of one destination URL (`None`: clean, or no host).
    pub fn check(&self, url: &str) -> Option<Hit> {
        let u = url::Url::parse(url).ok()?;
        let host = normalize_host(u.host_str()?)?;
        let (domain, action) = self.lookup(&host)?;
        let screen = action.screen()?;
        Some(Hit {
            domain: domain.to_owned(),
            host,
            screen,
        })
    }

    /// The strongest hit among `urls` (a link's destinations), the first of
    /// equal ones.
    pub fn check_all<'u>(&self, urls: impl IntoIterator<Item = &'u str>) -> Option<Hit> {
        let mut worst: Option<Hit> = None;
        for u in urls {
            if let Some(h) = self.check(u) {
                if worst.as_ref().is_none_or(|w| h.screen > w.screen) {
                    worst = Some(h);
                }
            }
        }
        worst
    }
}

fn fingerprint(entries: &HashMap<String, Action>) -> String {
    let mut sorted: Vec<(&String, &Action)> = entries.iter().collect();
    sorted.sort();
    let mut h = Sha256::new();
    for (d, a) in sorted {
        h.update(d.as_bytes());
        h.update(b" ");
        h.update(a.as_str().as_bytes());
        h.update(b"\n");
    }
    hex::encode(&h.finalize()[..12])
}

/// A domain list read: its domains (normalised, in order, duplicates
/// kept once) and how many lines named no domain.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ParsedList {
    pub domains: Vec<String>,
    pub skipped: usize,
}

/// Names hosts-files give their own machine: never screened.
const LOCAL_NAMES: [&str; 6] = [
    "localhost",
    "localhost.localdomain",
    "local",
    "broadcasthost",
    "ip6-localhost",
    "ip6-loopback",
];

/// Reads a domain list in the formats public feeds use: hosts-file lines
/// (`0.0.0.0 evil.example` — every name after the address), one domain per
/// line, and adblock-style `||evil.example^`; `#` and `!` start comments,
/// a leading `*.` is dropped (a domain covers its subdomains anyway).
/// Lines with no valid domain are counted, not fatal: a feed's odd line
/// must not throw away the rest.
pub fn parse_list(text: &str) -> ParsedList {
    let mut out = ParsedList::default();
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('!') || line.starts_with('[') {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let names: Vec<&str> = if first.parse::<IpAddr>().is_ok() {
            words.collect()
        } else {
            vec![first]
        };
        let mut any = false;
        for n in names {
            let n = n.strip_prefix("||").unwrap_or(n);
            let n = n.strip_suffix('^').unwrap_or(n);
            let n = n.strip_prefix("*.").unwrap_or(n);
            if LOCAL_NAMES.contains(&n) || n.parse::<IpAddr>().is_ok() {
                any = true;
                continue;
            }
            if let Some(d) = domain(n) {
                any = true;
                if seen.insert(d.clone()) {
                    out.domains.push(d);
                }
            }
        }
        if !any {
            out.skipped += 1;
        }
    }
    out
}

/// A domain an entry may name: a normalised host name of at least one dot
/// or an address, letters, digits, `-`, `_` and `.` only.
pub fn domain(s: &str) -> Option<String> {
    let d = normalize_host(s)?;
    if d.parse::<IpAddr>().is_ok() {
        return Some(d);
    }
    let ok = d.len() <= 253
        && d.contains('.')
        && !d.starts_with('.')
        && !d.ends_with('.')
        && !d.contains("..")
        && d.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    ok.then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(block: &[&str], warn: &[&str], allow: &[&str]) -> Policy {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (b, w, a) = (v(block), v(warn), v(allow));
        Policy::new([
            (Action::Block, &b[..]),
            (Action::Warn, &w[..]),
            (Action::Allow, &a[..]),
        ])
    }

    #[test]
    fn the_longest_listed_suffix_decides() {
        let p = policy(&["evil.example"], &["shady.example"], &["ok.evil.example"]);
        let screen = |u: &str| p.check(u).map(|h| (h.domain, h.screen));
        assert_eq!(
            screen("https://EVIL.example/x"),
            Some(("evil.example".into(), Screen::Block))
        );
        assert_eq!(
            screen("https://a.b.evil.example:8443/"),
            Some(("evil.example".into(), Screen::Block))
        );
        assert_eq!(screen("https://ok.evil.example/"), None);
        assert_eq!(screen("https://x.ok.evil.example/"), None);
        assert_eq!(screen("https://notevil.example/"), None);
        assert_eq!(
            screen("http://www.shady.example/"),
            Some(("shady.example".into(), Screen::Warn))
        );
        assert_eq!(screen("https://example/"), None);
        let worst = p.check_all(["https://shady.example/", "https://evil.example/", "x"]);
        assert_eq!(worst.map(|h| h.screen), Some(Screen::Block));
    }

    #[test]
    fn addresses_match_only_themselves() {
        let p = policy(&["192.0.2.1", "2.1"], &[], &[]);
        assert!(p.check("http://192.0.2.1/x").is_some());
        assert!(p.check("http://198.51.2.1/x").is_none());
    }

    #[test]
    fn a_later_layer_wins_and_the_fingerprint_follows_the_entries() {
        let a = policy(&["evil.example"], &["evil.example"], &[]);
        assert_eq!(
            a.lookup("evil.example"),
            Some(("evil.example", Action::Warn))
        );
        let b = policy(&[], &["evil.example"], &[]);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(
            a.fingerprint(),
            policy(&["evil.example"], &[], &[]).fingerprint()
        );
        assert_ne!(Policy::default().fingerprint(), b.fingerprint());
    }

    #[test]
    fn public_list_formats_are_read() {
        let text = "# URLhaus hostfile\n\
                    127.0.0.1\tlocalhost\n\
                    0.0.0.0 evil.example  other.example # two names\n\
                    phish.example\n\
                    ||ads.example^\n\
                    *.wild.example\n\
                    ! adblock comment\n\
                    [Adblock Plus 2.0]\n\
                    Evil.Example\n\
                    not a domain!\n\
                    nodot\n";
        let l = parse_list(text);
        assert_eq!(
            l.domains,
            [
                "evil.example",
                "other.example",
                "phish.example",
                "ads.example",
                "wild.example"
            ]
        );
        assert_eq!(l.skipped, 2);
    }
}
