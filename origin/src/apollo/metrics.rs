//! Prometheus view of the whitelist, read from [`Whitelist::status`] at
//! scrape time so `/metrics` and `/shorturl_status` never disagree.

use crate::whitelist::{Source, Whitelist};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, Registry};
use std::sync::Arc;

/// Registers the whitelist metrics (`shorturl_whitelist_size`,
/// `shorturl_whitelist_dynamic_size`, `shorturl_whitelist_source{source}`,
/// `shorturl_whitelist_last_refresh_timestamp_seconds`,
/// `shorturl_apollo_invalid_values_total`, `shorturl_apollo_refresh_errors_total`)
/// into `registry`, whose namespace is `shorturl`.
pub fn register_metrics(
    registry: &Registry,
    whitelist: Arc<Whitelist>,
) -> Result<(), prometheus::Error> {
    registry.register(Box::new(WhitelistCollector::new(whitelist)?))
}

struct WhitelistCollector {
    whitelist: Arc<Whitelist>,
    size: IntGauge,
    dynamic_size: IntGauge,
    source: IntGaugeVec,
    last_refresh: IntGauge,
    invalid_values: IntCounter,
    refresh_errors: IntCounter,
    descs: Vec<Desc>,
}

const SOURCES: [Source; 3] = [Source::StaticOnly, Source::Apollo, Source::File];

impl WhitelistCollector {
    fn new(whitelist: Arc<Whitelist>) -> Result<Self, prometheus::Error> {
        let size = IntGauge::new(
            "whitelist_size",
            "Domains links may be created on (default, static and Apollo)",
        )?;
        let dynamic_size = IntGauge::new(
            "whitelist_dynamic_size",
            "Merchant domains from Apollo (or its last-good file)",
        )?;
        let source = IntGaugeVec::new(
            Opts::new(
                "whitelist_source",
                "Where the merchant-domain list comes from (1 = current)",
            ),
            &["source"],
        )?;
        let last_refresh = IntGauge::new(
            "whitelist_last_refresh_timestamp_seconds",
            "Unix time of the last successful Apollo answer (0 = never)",
        )?;
        let invalid_values = IntCounter::new(
            "apollo_invalid_values_total",
            "Apollo values refused by validation (counted as empty)",
        )?;
        let refresh_errors =
            IntCounter::new("apollo_refresh_errors_total", "Failed Apollo requests")?;
        let mut descs = Vec::new();
        for c in [
            &size as &dyn Collector,
            &dynamic_size,
            &source,
            &last_refresh,
            &invalid_values,
            &refresh_errors,
        ] {
            descs.extend(c.desc().into_iter().cloned());
        }
        Ok(WhitelistCollector {
            whitelist,
            size,
            dynamic_size,
            source,
            last_refresh,
            invalid_values,
            refresh_errors,
            descs,
        })
    }
}

impl Collector for WhitelistCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let st = self.whitelist.status();
        self.size.set(st.size as i64);
        self.dynamic_size.set(st.dynamic_size as i64);
        for s in SOURCES {
            self.source
                .with_label_values(&[s.as_str()])
                .set(i64::from(st.source == s.as_str()));
        }
        self.last_refresh
            .set(st.last_refresh_unix.unwrap_or(0) as i64);
        // Counters only move forward; catch up with the whitelist's atomics.
        self.invalid_values
            .inc_by(st.invalid_values.saturating_sub(self.invalid_values.get()));
        self.refresh_errors
            .inc_by(st.refresh_errors.saturating_sub(self.refresh_errors.get()));
        let mut out = Vec::new();
        for c in [
            &self.size as &dyn Collector,
            &self.dynamic_size,
            &self.source,
            &self.last_refresh,
            &self.invalid_values,
            &self.refresh_errors,
        ] {
            out.extend(c.collect());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    #[test]
    fn scrape_reflects_status() {
        let wl = Arc::new(Whitelist::new(
            "sho.rt".into(),
            ["static.com".to_string()].into_iter().collect(),
        ));
        let reg = Registry::new_custom(Some("shorturl".into()), None).unwrap();
        register_metrics(&reg, Arc::clone(&wl)).unwrap();
        wl.note_invalid_value();
        wl.note_refresh_ok(1234);
        let mut buf = Vec::new();
        TextEncoder::new().encode(&reg.gather(), &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for line in [
            "shorturl_whitelist_size 2",
            "shorturl_whitelist_source{source=\"static-only\"} 1",
            "shorturl_whitelist_source{source=\"apollo\"} 0",
            "shorturl_whitelist_last_refresh_timestamp_seconds 1234",
            "shorturl_apollo_invalid_values_total 1",
            "shorturl_apollo_refresh_errors_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
