//! `mysql.shards`: the link tables split by id range over several MySQL
//! servers (issue 16). Without the key, `mysql.url` is the one shard holding
//! every id (the single-server layout, unchanged). With it, `mysql.url` is
//! the *meta* database (issuer counter, custom-code directory, admin users
//! and sessions, leases, click rollups' global views) and each shard holds
//! the `short_code` rows of its range and everything kept per link.

use super::file::ShardFile;
use super::{err, ConfigError};
use shorturl_common::code::CODE_SPACE;

/// One shard: the ids `first_id..=last_id` live in `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// Name used by `pregen --shard`, logs and the custom-code directory.
    pub name: String,
    pub first_id: u64,
    pub last_id: u64,
    /// The shard's primary.
    pub url: String,
    /// Read replicas for resolution (may lag: a miss there on an issued id
    /// is asked again on the primary).
    pub replicas: Vec<String>,
}

/// The validated shard list (never empty: the single-server layout is one
/// shard over `mysql.url` holding every id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardsConfig {
    pub shards: Vec<ShardConfig>,
    /// True when `mysql.shards` was given (the directory and routing are on).
    pub sharded: bool,
    /// When a shard is unreachable, creations take ids from the next live
    /// shard's range instead of failing.
    pub skip_dead_shards: bool,
}

impl ShardsConfig {
    /// The single-server layout: one shard over `url` holding every id.
    pub fn single(url: &str) -> Self {
        ShardsConfig {
            shards: vec![ShardConfig {
                name: "main".into(),
                first_id: 1,
                last_id: CODE_SPACE,
                url: url.to_owned(),
                replicas: Vec::new(),
            }],
            sharded: false,
            skip_dead_shards: false,
        }
    }
}

fn url_ok(u: &str) -> bool {
    u.starts_with("mysql://")
}

/// Validates `mysql.shards` (absent: [`ShardsConfig::single`] over `meta_url`).
pub fn shards(
    list: Option<Vec<ShardFile>>,
    skip_dead: Option<bool>,
    meta_url: &str,
) -> Result<ShardsConfig, ConfigError> {
    let Some(list) = list else {
        if skip_dead == Some(true) {
            return err("mysql.skip_dead_shards", "needs mysql.shards");
        }
        return Ok(ShardsConfig::single(meta_url));
    };
    if list.is_empty() {
        return err(
            "mysql.shards",
            "must list at least one shard (or be left out)",
        );
    }
    let mut out: Vec<ShardConfig> = Vec::with_capacity(list.len());
    for (i, s) in list.into_iter().enumerate() {
        let at = format!("mysql.shards[{i}]");
        if s.name.is_empty()
            || s.name.len() > 64
            || !s
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return err(
                format!("{at}.name"),
                format!("1 to 64 of [A-Za-z0-9_-] (got {:?})", s.name),
            );
        }
        if out.iter().any(|o| o.name == s.name) {
            return err(format!("{at}.name"), format!("{:?} is used twice", s.name));
        }
        if s.first_id == 0 {
            return err(format!("{at}.first_id"), "must be at least 1");
        }
        if s.last_id < s.first_id {
            return err(format!("{at}.last_id"), "must be at least first_id");
        }
        if s.last_id > CODE_SPACE {
            return err(
                format!("{at}.last_id"),
                format!("at most the code space, {CODE_SPACE}"),
            );
        }
        match out.last() {
            None if s.first_id != 1 => {
                return err(format!("{at}.first_id"), "the first range starts at 1")
            }
            Some(prev) if s.first_id != prev.last_id + 1 => {
                return err(
                    format!("{at}.first_id"),
                    format!(
                        "ranges must be contiguous and ascending: expected {}",
                        prev.last_id + 1
                    ),
                )
            }
            _ => {}
        }
        if !url_ok(&s.url) {
            return err(format!("{at}.url"), "must start with mysql://");
        }
        if out.iter().any(|o| o.url == s.url) {
            return err(format!("{at}.url"), "another shard uses the same database");
        }
        for (j, r) in s.replicas.iter().enumerate() {
            if !url_ok(r) {
                return err(format!("{at}.replicas[{j}]"), "must start with mysql://");
            }
        }
        out.push(ShardConfig {
            name: s.name,
            first_id: s.first_id,
            last_id: s.last_id,
            url: s.url,
            replicas: s.replicas,
        });
    }
    Ok(ShardsConfig {
        shards: out,
        sharded: true,
        skip_dead_shards: skip_dead.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, first: u64, last: u64, url: &str) -> ShardFile {
        ShardFile {
            name: name.into(),
            first_id: first,
            last_id: last,
            url: url.into(),
            replicas: Vec::new(),
        }
    }

    fn msg(r: Result<ShardsConfig, ConfigError>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(c) => panic!("accepted {c:?}"),
        }
    }

    #[test]
    fn absent_is_one_shard_over_the_meta_url() {
        let c = shards(None, None, "mysql://m/x").unwrap();
        assert!(!c.sharded);
        assert_eq!(c.shards.len(), 1);
        assert_eq!(c.shards[0].url, "mysql://m/x");
        assert_eq!((c.shards[0].first_id, c.shards[0].last_id), (1, CODE_SPACE));
    }

    #[test]
    fn contiguous_ranges_are_accepted() {
        let c = shards(
            Some(vec![
                s("a", 1, 300, "mysql://a/x"),
                s("b", 301, 2000, "mysql://b/x"),
            ]),
            Some(true),
            "mysql://a/x",
        )
        .unwrap();
        assert!(c.sharded && c.skip_dead_shards);
        assert_eq!(c.shards[1].first_id, 301);
    }

    #[test]
    fn errors_name_the_field() {
        let gap = msg(shards(
            Some(vec![
                s("a", 1, 300, "mysql://a/x"),
                s("b", 302, 900, "mysql://b/x"),
            ]),
            None,
            "mysql://a/x",
        ));
        assert!(gap.contains("mysql.shards[1].first_id"), "{gap}");
        let start = msg(shards(Some(vec![s("a", 5, 300, "mysql://a/x")]), None, "m"));
        assert!(start.contains("mysql.shards[0].first_id"), "{start}");
        let inv = msg(shards(Some(vec![s("a", 1, 0, "mysql://a/x")]), None, "m"));
        assert!(inv.contains("mysql.shards[0].last_id"), "{inv}");
        let dup = msg(shards(
            Some(vec![
                s("a", 1, 3, "mysql://a/x"),
                s("a", 4, 9, "mysql://b/x"),
            ]),
            None,
            "m",
        ));
        assert!(dup.contains("mysql.shards[1].name"), "{dup}");
        let url = msg(shards(Some(vec![s("a", 1, 3, "http://a")]), None, "m"));
        assert!(url.contains("mysql.shards[0].url"), "{url}");
        let same = msg(shards(
            Some(vec![
                s("a", 1, 3, "mysql://a/x"),
                s("b", 4, 9, "mysql://a/x"),
            ]),
            None,
            "m",
        ));
        assert!(same.contains("mysql.shards[1].url"), "{same}");
        let skip = msg(shards(None, Some(true), "m"));
        assert!(skip.contains("mysql.skip_dead_shards"), "{skip}");
        let empty = msg(shards(Some(vec![]), None, "m"));
        assert!(empty.contains("mysql.shards"), "{empty}");
    }
}
