//! A link's options as the `short_code.options` column stores them (JSON)
//! and as its record carries them to the edges
//! (`shorturl_common::link_rules`, protocol 3.1.1): the storage side of
//! `links::options`, which reads and shows them in the API's form. Kept
//! here so the store derives records without depending on the API layer.

use serde::{Deserialize, Serialize};
use shorturl_common::link_rules::LinkOptions;

/// The UTM fields, in the order the API lists them.
pub const UTM_FIELDS: [&str; 5] = [
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_term",
    "utm_content",
];
/// What `short_code.options` holds (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Forwarding, fallback and rules, in the record's form (never `gone`).
    #[serde(default, skip_serializing_if = "LinkOptions::is_empty")]
    pub o: LinkOptions,
    /// UTM values by field index of [`UTM_FIELDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub utm: Vec<Option<String>>,
    /// The social card (protocol 4.4): kept here, rendered by the origin;
    /// the record carries only that there is one (`g`).
    #[serde(default, skip_serializing_if = "Card::is_empty")]
    pub og: Card,
    /// The password's argon2id PHC string (protocol 4.5): kept here only;
    /// the record carries only that there is one (`p`).
    #[serde(rename = "pw", default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The link's own in-app guidance setting (API `inapp_guide`; `None`:
    /// its domain's). What it comes to is `o.guide` (`b`), set when the
    /// link is written (`links::guide`).
    #[serde(rename = "gp", default, skip_serializing_if = "Option::is_none")]
    pub guide: Option<bool>,
}

/// What link-preview crawlers are shown of a link (API `og_title`,
/// `og_description`, `og_image`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An absolute `https` URL.
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl Card {
    pub fn is_empty(&self) -> bool {
        self.title.is_none() && self.description.is_none() && self.image.is_none()
    }
}

impl Settings {
    /// The column's value (`None`: a plain link, NULL).
    pub fn to_column(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(self).unwrap_or_default())
    }

    /// Reads the column (NULL or unreadable: no options, logged).
    pub fn from_column(col: Option<&str>) -> Settings {
        let Some(s) = col.filter(|s| !s.is_empty()) else {
            return Settings::default();
        };
        serde_json::from_str(s).unwrap_or_else(|e| {
            tracing::error!(error = %e, "unreadable link options column");
            Settings::default()
        })
    }

    pub fn is_empty(&self) -> bool {
        self.o.is_empty()
            && self.utm.iter().all(Option::is_none)
            && self.og.is_empty()
            && self.password.is_none()
            && self.guide.is_none()
    }

    /// The UTM value of field `i`.
    pub fn utm(&self, i: usize) -> Option<&str> {
        self.utm.get(i).and_then(|v| v.as_deref())
    }

    /// Every URL the options may send a visitor to (rule destinations,
    /// split variants, the expiry fallback).
    pub fn destinations(&self) -> impl Iterator<Item = &str> {
        self.o
            .rules
            .iter()
            .flat_map(|r| {
                r.url
                    .iter()
                    .map(String::as_str)
                    .chain(r.split.iter().map(|(u, _)| u.as_str()))
            })
            .chain(self.o.expired_url.as_deref())
    }

    /// The options a record of a live link carries (`None`: none).
    pub fn live_options(&self) -> Option<LinkOptions> {
        let card = !self.og.is_empty();
        let password = self.password.is_some();
        (!self.o.is_empty() || card || password).then(|| LinkOptions {
            card,
            password,
            ..self.o.clone()
        })
    }

    /// The options of a disabled or expired link: its fallback alone.
    pub fn gone_options(&self) -> Option<LinkOptions> {
        self.o.expired_url.as_ref().map(|x| LinkOptions {
            expired_url: Some(x.clone()),
            gone: true,
            ..LinkOptions::default()
        })
    }

    /// `url` with the UTM fields set: each replaces a parameter of the same
    /// name (all of them), in field order, appended before the fragment.
    pub fn merge_utm(&self, url: &str) -> String {
        self.merge_utm_after(url, &Settings::default())
    }

    /// [`Settings::merge_utm`] for an edit from `before`: a field `before`
    /// set and this clears also takes its parameter out of the URL.
    pub fn merge_utm_after(&self, url: &str, before: &Settings) -> String {
        let touched = |i: usize| self.utm(i).is_some() || before.utm(i).is_some();
        if !(0..UTM_FIELDS.len()).any(touched) {
            return url.to_owned();
        }
        let Ok(mut u) = url::Url::parse(url) else {
            return url.to_owned();
        };
        let kept: Vec<(String, String)> = u
            .query_pairs()
            .filter(|(k, _)| {
                !UTM_FIELDS
                    .iter()
                    .enumerate()
                    .any(|(i, f)| k == f && touched(i))
            })
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        {
            let mut q = u.query_pairs_mut();
            q.clear();
            for (k, v) in &kept {
                q.append_pair(k, v);
            }
            for (i, f) in UTM_FIELDS.iter().enumerate() {
                if let Some(v) = self.utm(i) {
                    q.append_pair(f, v);
                }
            }
        }
        if u.query() == Some("") {
            u.set_query(None);
        }
        u.to_string()
    }
}
