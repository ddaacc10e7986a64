//! Reading a server's Prometheus `/metrics` in tests.

/// How many requests the origin on `port` served on `route`, from its
/// `/metrics` (the request-duration histogram's count, all status classes).
pub fn route_count(port: u16, route: &str) -> u64 {
    let text = crate::http::get(port, "/metrics", "localhost").text();
    let label = format!("route=\"{route}\"");
    text.lines()
        .filter(|l| l.contains("request_duration_seconds_count{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The value of one series (`name{labels}` exactly as exposed) in a
/// Prometheus text exposition; `None` when absent.
pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}
