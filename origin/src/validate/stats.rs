//! Validation of the stats query strings (`GET /api/v1/links/{code}/stats`,
//! `GET /api/v1/stats`): the range, the interval, the tenant.

use super::query::Params;
use crate::clicks::{
    GroupBy, Interval, LinkQuery, LiveQuery, StatsRange, TenantFilter, TenantQuery,
};
use crate::config::ClicksConfig;
use crate::error::ApiError;
use shorturl_common::host::normalize_host;

/// The range when `from` is not given: the 7 days before `to`.
pub const DEFAULT_SPAN_SECS: u64 = 7 * 86_400;
/// Links in a tenant answer when `limit` is not given.
pub const DEFAULT_TOP: u32 = 20;
/// Most links in a tenant answer.
pub const MAX_TOP: u32 = 100;

fn invalid(kind: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(kind, msg)
}

/// `from`, `to` (RFC 3339; default the 7 days before now) and the
/// interval, checked against the configured number of points.
fn range(
    p: &Params,
    interval: Interval,
    max_points: u64,
    now: u64,
) -> Result<StatsRange, ApiError> {
    let to = p.time("to")?.unwrap_or(now);
    let from = p
        .time("from")?
        .unwrap_or(to.saturating_sub(DEFAULT_SPAN_SECS));
    if from > to {
        return Err(invalid("invalid_range", "from is after to"));
    }
    let step = interval.secs();
    let from = from - from % step;
    if (to - from).div_ceil(step) > max_points {
        return Err(invalid(
            "range_too_long",
            format!(
                "the range holds more than {max_points} {}s",
                interval.as_str()
            ),
        ));
    }
    Ok(StatsRange { from, to, interval })
}

/// `group_by` (one of [`GroupBy`]'s API names; `destination` only where
/// `destination` says so) and `format` (`json`, the default, or `csv`,
/// which needs `group_by`).
fn grouping(p: &Params, destination: bool) -> Result<(Option<GroupBy>, bool), ApiError> {
    let group_by = match p.get("group_by") {
        None => None,
        Some(g) => Some(
            GroupBy::parse(g)
                .filter(|g| destination || *g != GroupBy::Destination)
                .ok_or_else(|| {
                    let names: Vec<&str> = GroupBy::all()
                        .filter(|g| destination || *g != GroupBy::Destination)
                        .map(GroupBy::as_str)
                        .collect();
                    invalid(
                        "invalid_group_by",
                        format!("group_by must be one of {}", names.join(", ")),
                    )
                })?,
        ),
    };
    let csv = match p.get("format") {
        None | Some("json") => false,
        Some("csv") if group_by.is_some() => true,
        Some("csv") => {
            return Err(invalid(
                "invalid_format",
                "format=csv answers the groups of a group_by: give group_by",
            ))
        }
        Some(_) => return Err(invalid("invalid_format", "format must be json or csv")),
    };
    Ok((group_by, csv))
}

/// `GET /api/v1/links/{code}/stats?from&to&interval=hour|day&group_by&format`
/// (default `day`).
pub fn parse_link_stats(
    query: Option<&str>,
    cfg: &ClicksConfig,
    now: u64,
) -> Result<LinkQuery, ApiError> {
    let p = Params::parse(
        query,
        &["from", "to", "interval", "domain", "group_by", "format"],
    )?;
    let (interval, max) = match p.get("interval") {
        None | Some("day") => (Interval::Day, cfg.max_day_points),
        Some("hour") => (Interval::Hour, cfg.max_hour_points),
        Some(_) => return Err(invalid("invalid_interval", "interval must be hour or day")),
    };
    let (group_by, csv) = grouping(&p, true)?;
    Ok(LinkQuery {
        range: range(&p, interval, max, now)?,
        group_by,
        csv,
    })
}

/// Exactly one of `app`, `kdt_id`, `domain`: whose links.
fn tenant_filter(p: &Params) -> Result<TenantFilter, ApiError> {
    let named: Vec<&str> = ["app", "kdt_id", "domain"]
        .into_iter()
        .filter(|n| p.get(n).is_some())
        .collect();
    Ok(match named[..] {
        ["app"] => match p.get("app") {
            Some(a) if !a.is_empty() && a.len() <= 64 => TenantFilter::App(a.to_owned()),
            _ => return Err(invalid("invalid_app", "app must be 1-64 characters")),
        },
        ["kdt_id"] => TenantFilter::KdtId(
            p.get("kdt_id")
                .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|k| k.parse().ok())
                .ok_or_else(|| invalid("invalid_kdt_id", "kdt_id must be an integer >= 0"))?,
        ),
        ["domain"] => TenantFilter::Domain(
            p.get("domain")
                .and_then(normalize_host)
                .ok_or_else(|| invalid("invalid_domain", "domain is not a valid host"))?,
        ),
        _ => {
            return Err(invalid(
                "invalid_tenant",
                "give exactly one of app, kdt_id, domain",
            ))
        }
    })
}

/// `limit`: 1 to [`MAX_TOP`], default [`DEFAULT_TOP`].
fn top_limit(p: &Params) -> Result<u32, ApiError> {
    match p.get("limit") {
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_TOP).contains(n) && l.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                invalid(
                    "invalid_limit",
                    format!("limit must be an integer from 1 to {MAX_TOP}"),
                )
            }),
        None => Ok(DEFAULT_TOP),
    }
}

/// `GET /api/v1/stats?app|kdt_id|domain&tag&from&to&limit&group_by&format`: exactly one of
/// the three tenant parameters; the range is whole days.
pub fn parse_tenant_stats(
    query: Option<&str>,
    cfg: &ClicksConfig,
    now: u64,
) -> Result<TenantQuery, ApiError> {
    let p = Params::parse(
        query,
        &[
            "app", "kdt_id", "domain", "tag", "from", "to", "limit", "group_by", "format",
        ],
    )?;
    let filter = tenant_filter(&p)?;
    let limit = top_limit(&p)?;
    let tag = p.get("tag").map(crate::links::tags::one).transpose()?;
    let range = range(&p, Interval::Day, cfg.max_day_points, now)?;
    // A destination label means another URL on every link: no tenant sum.
    let (group_by, csv) = grouping(&p, false)?;
    Ok(TenantQuery {
        filter,
        tag,
        range,
        limit,
        group_by,
        csv,
    })
}

/// `GET /api/v1/live?app|kdt_id|domain&limit`: the tenant as for stats
/// (the range is always the last hour).
pub fn parse_live_tenant(query: Option<&str>) -> Result<LiveQuery, ApiError> {
    let p = Params::parse(query, &["app", "kdt_id", "domain", "limit"])?;
    Ok(LiveQuery {
        filter: tenant_filter(&p)?,
        limit: top_limit(&p)?,
    })
}

/// `GET /api/v1/links/{code}/live[?domain]`: no other parameter.
pub fn parse_live_link(query: Option<&str>) -> Result<(), ApiError> {
    Params::parse(query, &["domain"]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn kind<T: std::fmt::Debug>(r: Result<T, ApiError>) -> &'static str {
        r.err().map(|e| e.kind).unwrap_or("ok")
    }

    #[test]
    fn link_ranges() {
        let cfg = ClicksConfig::default();
        let q = parse_link_stats(None, &cfg, NOW).unwrap();
        assert_eq!((q.group_by, q.csv), (None, false));
        let r = q.range;
        assert_eq!(r.interval, Interval::Day);
        assert_eq!((r.to, r.from % 86_400), (NOW, 0));
        let r = parse_link_stats(
            Some("interval=hour&from=2027-01-15T08:30:00Z&to=2027-01-15T10:00:00Z"),
            &cfg,
            NOW,
        )
        .unwrap()
        .range;
        assert_eq!(r.to - r.from, 3600 * 2);
        assert_eq!(r.from % 3600, 0);
        let cases = [
            ("interval=week", "invalid_interval"),
            ("group_by=lang", "invalid_group_by"),
            ("group_by=Country", "invalid_group_by"),
            ("format=csv", "invalid_format"),
            ("group_by=os&format=xml", "invalid_format"),
            ("from=yesterday", "invalid_date"),
            (
                "from=2027-01-02T00:00:00Z&to=2027-01-01T00:00:00Z",
                "invalid_range",
            ),
            (
                "interval=hour&from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z",
                "range_too_long",
            ),
            (
                "from=2020-01-01T00:00:00Z&to=2027-01-01T00:00:00Z",
                "range_too_long",
            ),
            ("nope=1", "invalid_query"),
            (
                "to=2027-01-01T00:00:00Z&to=2027-01-01T00:00:00Z",
                "invalid_query",
            ),
        ];
        for (q, want) in cases {
            assert_eq!(kind(parse_link_stats(Some(q), &cfg, NOW)), want, "{q}");
        }
    }

    #[test]
    fn groupings() {
        let cfg = ClicksConfig::default();
        let q = parse_link_stats(Some("group_by=language&format=csv"), &cfg, NOW).unwrap();
        assert_eq!(q.group_by.map(GroupBy::as_str), Some("language"));
        assert!(q.csv);
        let q = parse_link_stats(Some("group_by=destination&format=json"), &cfg, NOW).unwrap();
        assert_eq!((q.group_by, q.csv), (Some(GroupBy::Destination), false));
        let q = parse_tenant_stats(Some("app=a&group_by=utm_campaign"), &cfg, NOW).unwrap();
        assert_eq!(q.group_by.map(GroupBy::as_str), Some("utm_campaign"));
        let names: Vec<&str> = GroupBy::all().map(GroupBy::as_str).collect();
        assert_eq!(
            names,
            [
                "country",
                "browser",
                "os",
                "language",
                "source",
                "utm_source",
                "utm_medium",
                "utm_campaign",
                "city",
                "destination"
            ]
        );
    }

    #[test]
    fn tenants() {
        let cfg = ClicksConfig::default();
        let q = parse_tenant_stats(Some("kdt_id=55"), &cfg, NOW).unwrap();
        assert_eq!(
            (q.filter, q.limit, q.tag),
            (TenantFilter::KdtId(55), DEFAULT_TOP, None)
        );
        let q = parse_tenant_stats(Some("domain=S.Shop55.com.&tag=%20spring"), &cfg, NOW).unwrap();
        assert_eq!(q.filter, TenantFilter::Domain("s.shop55.com".into()));
        assert_eq!(q.tag.as_deref(), Some("spring"));
        let cases = [
            ("", "invalid_tenant"),
            ("app=a&kdt_id=1", "invalid_tenant"),
            ("app=", "invalid_app"),
            ("kdt_id=-1", "invalid_kdt_id"),
            ("domain=a%20b", "invalid_domain"),
            ("app=a&limit=101", "invalid_limit"),
            ("app=a&interval=hour", "invalid_query"),
            ("app=a&tag=", "invalid_tags"),
            ("app=a&tag=a,b", "invalid_tags"),
            ("app=a&group_by=destination", "invalid_group_by"),
            ("app=a&format=csv", "invalid_format"),
        ];
        for (q, want) in cases {
            assert_eq!(kind(parse_tenant_stats(Some(q), &cfg, NOW)), want, "{q}");
        }
    }
}
