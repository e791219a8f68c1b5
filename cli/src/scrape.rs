//! Reading participants' counters for `spindle status`: this member's own
//! (`DomainParticipant::counters`) and other participants' Prometheus endpoints
//! (`[metrics] listen` in their TOML), scraped over plain HTTP.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use spindle_dds_core::ParticipantCounters;

/// How long one scrape may take (connect, write, read), per endpoint.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read from an endpoint.
const SCRAPE_BYTES_MAX: u64 = 1 << 20;

/// The counters whose rates `--watch` shows, by their exposition names.
pub const RATED: [&str; 4] = [
    "spindle_delivered_total",
    "spindle_stable_total",
    "spindle_samples_written_total",
    "spindle_samples_received_total",
];

/// `counters` as exposition name → value (what a scrape of the same participant gives).
pub fn own(counters: &ParticipantCounters) -> BTreeMap<String, u64> {
    parse(&counters.to_prometheus()).unwrap_or_default()
}

/// Scrapes `GET /metrics` from `address` (`host:port`): name → value, or why not.
pub fn scrape(address: &str) -> Result<BTreeMap<String, u64>, String> {
    let addr = address
        .to_socket_addrs()
        .map_err(|e| format!("{address}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address}: no address"))?;
    let mut s =
        TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT).map_err(|e| format!("{address}: {e}"))?;
    let io = |e: std::io::Error| format!("{address}: {e}");
    s.set_read_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: spindle\r\nConnection: close\r\n\r\n")
        .map_err(io)?;
    let mut text = String::new();
    s.take(SCRAPE_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(io)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{address}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("{address}: {status}"));
    }
    parse(body).map_err(|e| format!("{address}: {e}"))
}

/// The samples of a Prometheus text exposition: name → value (labels dropped; the
/// last sample of a name wins; non-integer values refused).
pub fn parse(body: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in body.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("line {}: no value: {line:?}", n + 1))?;
        let name = name.split('{').next().unwrap_or(name).trim();
        let value: u64 = value
            .parse()
            .map_err(|_| format!("line {}: value {value:?} is not a count", n + 1))?;
        out.insert(name.to_string(), value);
    }
    Ok(out)
}

/// Counters as a JSON object.
pub fn to_json(values: &BTreeMap<String, u64>) -> Value {
    Value::Object(
        values
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}

/// The rates of [`RATED`] between two readings `dt` apart, per second.
pub fn rates(before: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>, dt: Duration) -> Value {
    let secs = dt.as_secs_f64().max(1e-3);
    let mut m = Map::new();
    for name in RATED {
        if let (Some(a), Some(b)) = (before.get(name), now.get(name)) {
            let per_s = b.saturating_sub(*a) as f64 / secs;
            let short = name
                .trim_start_matches("spindle_")
                .trim_end_matches("_total");
            m.insert(
                format!("{short}_per_s"),
                json!((per_s * 10.0).round() / 10.0),
            );
        }
    }
    Value::Object(m)
}

/// The readings of the last print, per source (`"self"` or an address), for rates.
#[derive(Debug, Default)]
pub struct Previous {
    at: Option<Instant>,
    values: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Previous {
    /// Adds `"rates"` to each entry of `entries` (objects with `"source"` and
    /// `"counters"`) against the last call's readings, and keeps these.
    pub fn rate(&mut self, entries: &mut [Value]) {
        let now = Instant::now();
        let mut values = BTreeMap::new();
        for e in entries.iter_mut() {
            let source = e["source"].as_str().unwrap_or_default().to_string();
            let Some(c) = e["counters"].as_object() else {
                continue;
            };
            let c: BTreeMap<String, u64> = c
                .iter()
                .filter_map(|(k, v)| v.as_u64().map(|v| (k.clone(), v)))
                .collect();
            if let (Some(at), Some(before)) = (self.at, self.values.get(&source)) {
                e["rates"] = rates(before, &c, now - at);
            }
            values.insert(source, c);
        }
        self.at = Some(now);
        self.values = values;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_exposition_and_refuses_junk() {
        let c = ParticipantCounters {
            node: 4,
            samples_written: 9,
            ..ParticipantCounters::default()
        };
        let v = own(&c);
        assert_eq!(v["spindle_samples_written_total"], 9);
        assert!(parse("spindle_x{a=\"b\"} 1.5").is_err());
        assert!(parse("novalue").is_err());
    }

    #[test]
    fn rates_are_per_second() {
        let a: BTreeMap<String, u64> = [("spindle_delivered_total".into(), 100)].into();
        let b: BTreeMap<String, u64> = [("spindle_delivered_total".into(), 300)].into();
        let r = rates(&a, &b, Duration::from_secs(2));
        assert_eq!(r["delivered_per_s"], 100.0);
    }
}
