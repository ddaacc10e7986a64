//! The tables of human clicks per value of each dimension (protocol 3.7),
//! one rendering for a link's page and a tenant's (merchant, app): each
//! value with its share as a bar (a `<meter>`: the console's policy allows
//! no inline style), countries with their English names, each table with
//! its CSV.

use super::super::countries;
use super::super::html::{esc, num};
use crate::clicks::{GroupBy, GroupCount};
use shorturl_common::clicks::dims::city_label;
use shorturl_common::clicks::{Dim, OTHER_REFERRER};
use std::fmt::Write;

/// The heading of a dimension's table.
fn title(g: GroupBy) -> &'static str {
    match g.as_str() {
        "country" => "Countries",
        "browser" => "Browsers",
        "os" => "Operating systems",
        "language" => "Languages",
        "source" => "Sources (link or QR code)",
        "utm_source" => "UTM source",
        "utm_medium" => "UTM medium",
        "utm_campaign" => "UTM campaign",
        "city" => "Cities",
        _ => "Destinations",
    }
}

/// A value as people read it (escaped): `-` is "(none)", `~other`
/// "(others)", a country code is followed by its name (a code the table
/// lacks, or `unknown`, stands alone), a city is its name and country.
fn label(g: GroupBy, value: &str) -> String {
    match value {
        "-" => "(none)".into(),
        OTHER_REFERRER => "(others)".into(),
        v if g == GroupBy::Dim(Dim::City) => esc(&city_label(v)),
        v => match countries::name(v).filter(|_| g == GroupBy::Dim(Dim::Country)) {
            Some(name) => format!("<code>{}</code> {}", esc(v), esc(name)),
            None => esc(v),
        },
    }
}

/// One value's row: its clicks and its share of the table's `total`, as
/// a bar and in per cent.
fn row(g: GroupBy, c: &GroupCount, total: u64) -> String {
    let share = c.human as f64 * 100.0 / total.max(1) as f64;
    format!(
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"share\">\
         <meter min=\"0\" max=\"{total}\" value=\"{n}\"></meter> {share:.1}%</td></tr>",
        label(g, &c.value),
        num(c.human),
        n = c.human,
    )
}

/// A table per dimension of `dims` under the heading `heading`, values
/// most clicked first (as [`crate::clicks::stats::groups`] sorts them).
/// Each table's CSV is at `{csv_base}dim=<name>&format=csv`: `csv_base` is
/// the page's path with its query so far, ending in `?` or `&` (escaped
/// here).
pub fn tables(heading: &str, csv_base: &str, dims: &[(GroupBy, Vec<GroupCount>)]) -> String {
    let mut s = format!(
        "<h2>{}</h2><div class=\"grid dims\" id=\"dimensions\">",
        esc(heading)
    );
    for (g, groups) in dims {
        // Cities are counted only by edges with a city database: without
        // one every click's city is `unknown`, a table not worth showing.
        if *g == GroupBy::Dim(Dim::City) && groups.iter().all(|c| c.value == "unknown") {
            continue;
        }
        let name = g.as_str();
        let _ = write!(
            s,
            "<div><h3>{}</h3><table id=\"dim-{name}\"><thead><tr><th>Value</th>\
             <th class=\"n\">Clicks</th><th>Share</th></tr></thead><tbody>",
            title(*g)
        );
        let total = groups.iter().map(|c| c.human).sum();
        for c in groups {
            s.push_str(&row(*g, c, total));
        }
        if groups.is_empty() {
            s.push_str("<tr><td colspan=\"3\">No clicks counted.</td></tr>");
        }
        let _ = write!(
            s,
            "</tbody></table><a class=\"csv\" id=\"dim-{name}-csv\" href=\"{}\">Download CSV</a></div>",
            esc(&format!("{csv_base}dim={name}&format=csv"))
        );
    }
    s.push_str("</div>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(value: &str, human: u64) -> GroupCount {
        GroupCount {
            value: value.into(),
            human,
        }
    }

    #[test]
    fn shares_names_and_escaping() {
        let country = GroupBy::Dim(Dim::Country);
        let dims = vec![
            (
                country,
                vec![
                    count("DE", 3),
                    count("XK", 1),
                    count("unknown", 1),
                    count("~other", 1),
                ],
            ),
            (
                GroupBy::Dim(Dim::UtmSource),
                vec![count("a<b>", 2), count("-", 2)],
            ),
            (GroupBy::Dim(Dim::Os), vec![]),
            (
                GroupBy::Dim(Dim::City),
                vec![count("BR-S%C3%A3o%20Paulo", 2), count("unknown", 1)],
            ),
        ];
        let h = tables("By <dimension>", "/admin/links/abc?", &dims);
        assert!(h.contains("<h2>By &lt;dimension&gt;</h2>"), "{h}");
        assert!(
            h.contains(
                "<tr><td><code>DE</code> Germany</td><td class=\"n\">3</td><td class=\"share\">\
                 <meter min=\"0\" max=\"6\" value=\"3\"></meter> 50.0%</td></tr>"
            ),
            "{h}"
        );
        assert!(h.contains("<td>XK</td><td class=\"n\">1</td>"), "{h}");
        assert!(h.contains("<td>unknown</td>"), "{h}");
        assert!(h.contains("<td>(others)</td>"), "{h}");
        assert!(
            h.contains("<td>a&lt;b&gt;</td>") && !h.contains("a<b>"),
            "{h}"
        );
        assert!(h.contains("<td>(none)</td><td class=\"n\">2</td>"), "{h}");
        assert!(h.contains("No clicks counted."), "{h}");
        assert!(
            h.contains("<td>São Paulo, BR</td><td class=\"n\">2</td>"),
            "{h}"
        );
        let no_city = tables(
            "x",
            "/",
            &[(GroupBy::Dim(Dim::City), vec![count("unknown", 4)])],
        );
        assert!(!no_city.contains("dim-city"), "{no_city}");
        // A browser named like a country code is not a country.
        assert_eq!(label(GroupBy::Dim(Dim::Browser), "DE"), "DE");
        assert!(h.contains(
            "id=\"dim-country-csv\" href=\"/admin/links/abc?dim=country&amp;format=csv\""
        ));
    }
}
