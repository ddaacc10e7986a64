//! `shorturl_edge_click*` metrics (protocol section 7; the OpenResty module
//! exports the same names).

use pingora_prometheus::prometheus::{self, IntCounter, IntCounterVec, IntGauge, Opts};

/// Click counters, resolved to label handles once.
pub struct ClicksMetrics {
    /// Clicks counted (`clicks_total{kind="human"}`).
    pub human: IntCounter,
    /// `clicks_total{kind="bot"}`.
    pub bot: IntCounter,
    /// Batches the stream accepted (`click_batches_total{result="sent"}`).
    pub batches_sent: IntCounter,
    /// Failed attempts to send a batch, kept for the next try
    /// (`{result="retried"}`).
    pub batches_retried: IntCounter,
    /// `click_queue_full_total`: clicks that found their thread's queue
    /// full; the request drained the queues itself (slower, nothing lost).
    pub queue_full: IntCounter,
    /// `clicks_unsalted_total`: human clicks with an address that are in
    /// no unique-visitor sketch (the day's salt unknown: Redis unreachable).
    pub unsalted: IntCounter,
    /// `click_backpressure_total`: pauses of request threads while the
    /// edge was behind in sending (`Clicks::yield_to_flusher`).
    pub backpressure: IntCounter,
    /// `{reason="buffer_full"}`: oldest unsent batches dropped past
    /// `max_buffered_clicks`.
    pub dropped_buffer_full: IntCounter,
    /// `{reason="stream_full"}`: clicks appended while the stream was at its
    /// `MAXLEN` (each such append trims an older entry, read or not).
    pub dropped_stream_full: IntCounter,
    /// Clicks counted and not sent yet.
    pub buffered: IntGauge,
    /// Distinct links in the counts since the last cut
    /// (`clicks_links_held`; bounded by `clicks.max_links`).
    pub links_held: IntGauge,
    /// Batches cut before the flush interval because the counts reached
    /// `clicks.max_links` (`click_early_cuts_total`).
    pub early_cuts: IntCounter,
    /// Bytes of unsent batches (`clicks_buffered_bytes`; bounded by
    /// `clicks.max_buffered_bytes`).
    pub buffered_bytes: IntGauge,
    /// Bytes of the counts' hash tables, the current counts' and those kept
    /// for reuse (`clicks_table_bytes`; bounded by `clicks.max_links`).
    pub table_bytes: IntGauge,
    /// Bots' clicks taken from cache entries' tallies at a harvest
    /// (`click_tallies_total{how="harvested"}`) and from entries leaving
    /// the cache (`how="spilled"`): `clicks::tally`.
    pub tallies_harvested: IntCounter,
    pub tallies_spilled: IntCounter,
}

impl ClicksMetrics {
    /// Creates and registers the metrics (a second instance in one process
    /// keeps working counters that are not exported).
    pub fn new() -> Result<ClicksMetrics, prometheus::Error> {
        let (m, collectors) = Self::build()?;
        for c in collectors {
            let _ = prometheus::register(c);
        }
        Ok(m)
    }

    /// Working counters, exported nowhere (unit tests).
    pub fn unregistered() -> Result<ClicksMetrics, prometheus::Error> {
        Self::build().map(|(m, _)| m)
    }

    #[allow(clippy::type_complexity)]
    fn build(
    ) -> Result<(ClicksMetrics, Vec<Box<dyn prometheus::core::Collector>>), prometheus::Error> {
        let clicks = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_clicks_total",
                "Redirects counted as clicks, by kind (human or bot).",
            ),
            &["kind"],
        )?;
        let batches = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_click_batches_total",
                "Click batches appended to the stream (sent) and failed attempts (retried).",
            ),
            &["result"],
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_clicks_dropped_total",
                "Clicks lost by the edge, by reason (buffer_full, stream_full).",
            ),
            &["reason"],
        )?;
        let buffered = IntGauge::new(
            "shorturl_edge_clicks_buffered",
            "Clicks counted and not yet appended to the stream.",
        )?;
        let links_held = IntGauge::new(
            "shorturl_edge_clicks_links_held",
            "Distinct links in the click counts since the last cut (at most clicks.max_links).",
        )?;
        let buffered_bytes = IntGauge::new(
            "shorturl_edge_clicks_buffered_bytes",
            "Bytes of click batches not yet appended to the stream (at most clicks.max_buffered_bytes).",
        )?;
        let table_bytes = IntGauge::new(
            "shorturl_edge_clicks_table_bytes",
            "Bytes of the click counts' hash tables, in use and kept for reuse (bounded by clicks.max_links).",
        )?;
        let early_cuts = IntCounter::new(
            "shorturl_edge_click_early_cuts_total",
            "Cuts made before the flush interval because the counts reached clicks.max_links.",
        )?;
        let queue_full = IntCounter::new(
            "shorturl_edge_click_queue_full_total",
            "Clicks that found their thread's queue full: the request drained the queues itself (a slower answer; no click lost).",
        )?;
        let unsalted = IntCounter::new(
            "shorturl_edge_clicks_unsalted_total",
            "Human clicks in no unique-visitor sketch: the edge did not know the day's salt (Redis unreachable since before the day).",
        )?;
        let backpressure = IntCounter::new(
            "shorturl_edge_click_backpressure_total",
            "Request-thread pauses while half of max_buffered_clicks (or of max_buffered_bytes) was unsent and Redis was taking batches (the flusher catching up; no click dropped).",
        )?;
        let tallies = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_click_tallies_total",
                "Bots' clicks counted on cache entries and taken into the counts, by how (harvested at a flush, spilled by an entry leaving the cache).",
            ),
            &["how"],
        )?;
        let m = ClicksMetrics {
            human: clicks.with_label_values(&["human"]),
            bot: clicks.with_label_values(&["bot"]),
            batches_sent: batches.with_label_values(&["sent"]),
            batches_retried: batches.with_label_values(&["retried"]),
            queue_full: queue_full.clone(),
            unsalted: unsalted.clone(),
            backpressure: backpressure.clone(),
            dropped_buffer_full: dropped.with_label_values(&["buffer_full"]),
            dropped_stream_full: dropped.with_label_values(&["stream_full"]),
            buffered: buffered.clone(),
            links_held: links_held.clone(),
            early_cuts: early_cuts.clone(),
            buffered_bytes: buffered_bytes.clone(),
            table_bytes: table_bytes.clone(),
            tallies_harvested: tallies.with_label_values(&["harvested"]),
            tallies_spilled: tallies.with_label_values(&["spilled"]),
        };
        Ok((
            m,
            vec![
                Box::new(clicks),
                Box::new(batches),
                Box::new(dropped),
                Box::new(buffered),
                Box::new(links_held),
                Box::new(early_cuts),
                Box::new(buffered_bytes),
                Box::new(table_bytes),
                Box::new(queue_full),
                Box::new(unsalted),
                Box::new(backpressure),
                Box::new(tallies),
            ],
        ))
    }

    /// Clicks lost, every reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_buffer_full.get() + self.dropped_stream_full.get()
    }
}
