//! A participant's counters and their Prometheus exposition.
//!
//! `DomainParticipant::counters` returns a plain [`ParticipantCounters`]: the group
//! member's counters ([`spindle_group::NodeCounters`]: delivered, stable, null-sends,
//! views, state transferred), published by the predicate thread, and DCPS's own (samples
//! and bytes written, large samples, samples received, samples of topics with no local
//! reader). Every count is a relaxed atomic that only grows: reading never blocks the data
//! path, and the data path takes no lock and allocates nothing for it.
//!
//! With `[metrics] listen = "127.0.0.1:9464"` in the participant's TOML
//! ([`MetricsConfig`]; off by default) the participant serves them in the Prometheus text
//! exposition format (`GET /metrics`, version 0.0.4) on a small HTTP endpoint of its own (`metrics_http.rs`):
//! one thread, one connection at a time, [`METRICS_IO_TIMEOUT_MS`] to read a request of at
//! most [`METRICS_REQUEST_BYTES_MAX`] bytes and write the answer; anything else gets a 4xx
//! status, never a panic.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use spindle_group::NodeCounters;

use crate::error::{Error, Result};

/// The `[metrics]` table of a participant's TOML.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where to serve the Prometheus endpoint (`host:port`, e.g. `127.0.0.1:9464`; port 0
    /// picks a free one, see `DomainParticipant::metrics_address`). `None`, the default:
    /// no endpoint.
    #[serde(default)]
    pub listen: Option<String>,
}

impl MetricsConfig {
    /// Checks `listen`; the error names the key and `origin`.
    pub fn validate(&self, origin: &str) -> Result<()> {
        if let Some(l) = &self.listen {
            if l.parse::<SocketAddr>().is_err() {
                return Err(Error::Config(format!(
                    "{origin}: [metrics] listen = {l:?}: not a socket address \
                     (host:port with a numeric host, e.g. \"127.0.0.1:9464\")"
                )));
            }
        }
        Ok(())
    }
}

/// Longest the endpoint waits to read a request or write an answer, in ms.
pub const METRICS_IO_TIMEOUT_MS: u64 = 2_000;
/// The largest request the endpoint reads (request line and headers).
pub const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;

/// A participant's counters at one instant (`DomainParticipant::counters`). Every
/// count is since the participant started and only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParticipantCounters {
    /// The participant's node id.
    pub node: u32,
    /// The id of the installed view (0 before the first).
    pub view_id: u32,
    /// The group member's counters (delivered, stable, nulls, views, state transferred).
    pub group: NodeCounters,
    /// Samples (and control messages) this participant's writers wrote.
    pub samples_written: u64,
    /// Their bytes, sample headers included.
    pub written_bytes: u64,
    /// Of those, samples above the slot, moved by RDMC.
    pub large_samples_written: u64,
    /// Samples delivered to DCPS in the topic subgroups (built-in topic not counted).
    pub samples_received: u64,
    /// Their bytes, sample headers included.
    pub received_bytes: u64,
    /// Received samples of topics no reader of this participant reads (dropped: they
    /// share a subgroup with a topic it reads).
    pub samples_without_reader: u64,
}

/// The cells behind the DCPS half of [`ParticipantCounters`], in the participant's shared
/// state, but for what its live writers wrote: each writer counts its own samples in its
/// [`WriteCells`] (`WriterCore::written`), and a read sums them (`counters_of`, with the
/// participant's state held, so a writer being deleted is counted in exactly one place).
///
/// The retired writers' cells and the delivery path's live on separate cache lines:
/// the predicate thread counts every batch.
#[derive(Debug, Default)]
pub(crate) struct DcpsCounters {
    retired: std::sync::Mutex<Retired>,
    samples_received: AtomicU64,
    received_bytes: AtomicU64,
    samples_without_reader: AtomicU64,
}

/// What deleted writers wrote: their cells while someone may still write through them,
/// summed once nobody can.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Retired {
    /// Cells of deleted writers that a handle (a clone of the writer, a loan) still
    /// reaches.
    held: Vec<std::sync::Arc<WriteCells>>,
    /// The sums of the cells nobody reaches any more.
    samples_written: u64,
    written_bytes: u64,
    large_samples_written: u64,
}

impl Retired {
    /// Sums the cells nobody else holds (their writer is gone: nothing more is counted in
    /// them) into the totals, and drops them.
    fn fold(&mut self) {
        let mut kept = Vec::with_capacity(self.held.len());
        for cells in self.held.drain(..) {
            if std::sync::Arc::strong_count(&cells) == 1 {
                self.samples_written += cells.samples_written.load(Ordering::Relaxed);
                self.written_bytes += cells.written_bytes.load(Ordering::Relaxed);
                self.large_samples_written += cells.large_samples_written.load(Ordering::Relaxed);
            } else {
                kept.push(cells);
            }
        }
        self.held = kept;
    }
}

/// One writer's counts of what it wrote ([`ParticipantCounters::samples_written`] and its
/// bytes). Counted only with the writer's write path held, so a count is a load and a
/// store, not a locked add (dropping the two locked adds a sample raised 1 KiB DCPS
/// throughput on one core by 3–4 %, `docs/benchmarks.md`); read by anyone.
#[derive(Debug, Default)]
pub(crate) struct WriteCells {
    samples_written: AtomicU64,
    written_bytes: AtomicU64,
    large_samples_written: AtomicU64,
}

impl WriteCells {
    /// The writer wrote a sample of `bytes` (header included); `large`: by RDMC. Only
    /// with the writer's write path held (no other thread counts in these cells
    /// meanwhile, the invariant that makes load-then-store exact).
    pub(crate) fn wrote_held(&self, bytes: usize, large: bool) {
        let add = |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.samples_written, 1);
        add(&self.written_bytes, bytes as u64);
        if large {
            add(&self.large_samples_written, 1);
        }
    }

    fn add_to(&self, c: &mut ParticipantCounters) {
        c.samples_written += self.samples_written.load(Ordering::Relaxed);
        c.written_bytes += self.written_bytes.load(Ordering::Relaxed);
        c.large_samples_written += self.large_samples_written.load(Ordering::Relaxed);
    }
}

impl DcpsCounters {
    /// Copies the counts into `c`: the delivery path's, the retired writers' and those
    /// of `live`, the participant's writers (read with its state held).
    pub(crate) fn fill<'a>(
        &self,
        c: &mut ParticipantCounters,
        live: impl IntoIterator<Item = &'a WriteCells>,
    ) {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        {
            let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            retired.fold();
            c.samples_written = retired.samples_written;
            c.written_bytes = retired.written_bytes;
            c.large_samples_written = retired.large_samples_written;
            for cells in &retired.held {
                cells.add_to(c);
            }
        }
        for cells in live {
            cells.add_to(c);
        }
        c.samples_received = r(&self.samples_received);
        c.received_bytes = r(&self.received_bytes);
        c.samples_without_reader = r(&self.samples_without_reader);
    }

    /// A writer left the participant's writers (with the participant's state held, so a
    /// read counts it either there or here): its cells are kept until nobody can count in
    /// them, then summed.
    pub(crate) fn retire(&self, cells: &std::sync::Arc<WriteCells>) {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.held.push(std::sync::Arc::clone(cells));
        retired.fold();
    }

    /// The delivery path received `samples` samples of `bytes` in one batch, `unread` of
    /// them of topics without a local reader (one call per batch).
    pub(crate) fn received(&self, samples: usize, bytes: usize, unread: usize) {
        if samples == 0 {
            return;
        }
        self.samples_received
            .fetch_add(samples as u64, Ordering::Relaxed);
        self.received_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        if unread > 0 {
            self.samples_without_reader
                .fetch_add(unread as u64, Ordering::Relaxed);
        }
    }
}

/// One metric of the exposition: name (without the `spindle_` prefix), help, type.
struct Metric {
    name: &'static str,
    help: &'static str,
    counter: bool,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        counter: true,
    }
}

/// The metrics, in the order of [`values`].
const METRICS: [Metric; 19] = [
    Metric {
        name: "view_id",
        help: "Id of the installed view.",
        counter: false,
    },
    counter(
        "delivered_total",
        "Application messages delivered by the group.",
    ),
    counter(
        "stable_total",
        "Messages seen stable (received by every member) in atomic subgroups.",
    ),
    counter(
        "nulls_sent_total",
        "Null messages sent (the null-send technique).",
    ),
    counter(
        "nulls_delivered_total",
        "Null messages delivered (skipped).",
    ),
    counter("pushes_total", "One-sided writes queued by the engine."),
    counter(
        "views_installed_total",
        "Views installed, the first included.",
    ),
    counter(
        "resent_total",
        "Messages re-sent in a new view after a trim cut them off.",
    ),
    counter(
        "state_transfers_given_total",
        "State-transfer snapshots given to joiners.",
    ),
    counter(
        "state_given_bytes_total",
        "Bytes of state-transfer snapshots given.",
    ),
    counter(
        "state_transfers_received_total",
        "State-transfer snapshots installed.",
    ),
    counter(
        "state_received_bytes_total",
        "Bytes of state-transfer snapshots installed.",
    ),
    counter(
        "engine_events_dropped_total",
        "Engine events dropped on a full queue.",
    ),
    counter(
        "samples_written_total",
        "Samples written by this participant's writers.",
    ),
    counter(
        "written_bytes_total",
        "Bytes written by this participant's writers, headers included.",
    ),
    counter(
        "large_samples_written_total",
        "Samples above the slot, moved by RDMC.",
    ),
    counter(
        "samples_received_total",
        "Samples delivered to DCPS in topic subgroups.",
    ),
    counter(
        "received_bytes_total",
        "Bytes of samples delivered to DCPS, headers included.",
    ),
    counter(
        "samples_without_reader_total",
        "Received samples of topics no local reader reads.",
    ),
];

fn values(c: &ParticipantCounters) -> [u64; 19] {
    let g = &c.group;
    [
        u64::from(c.view_id),
        g.delivered,
        g.stable,
        g.nulls_sent,
        g.nulls_delivered,
        g.pushes,
        g.views_installed,
        g.resent,
        g.state_transfers_given,
        g.state_given_bytes,
        g.state_transfers_received,
        g.state_received_bytes,
        g.events_dropped,
        c.samples_written,
        c.written_bytes,
        c.large_samples_written,
        c.samples_received,
        c.received_bytes,
        c.samples_without_reader,
    ]
}

impl ParticipantCounters {
    /// The counters in the Prometheus text exposition format (version 0.0.4): a
    /// `# HELP` and a `# TYPE` line per metric, names prefixed `spindle_`, each sample
    /// labelled with the participant's `node`.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        for (m, v) in METRICS.iter().zip(values(self)) {
            let kind = if m.counter { "counter" } else { "gauge" };
            // Writing to a String cannot fail.
            let _ = writeln!(out, "# HELP spindle_{} {}", m.name, m.help);
            let _ = writeln!(out, "# TYPE spindle_{} {kind}", m.name);
            let _ = writeln!(out, "spindle_{}{{node=\"{}\"}} {v}", m.name, self.node);
        }
        out
    }
}

/// The status line and body for request bytes `req` (`complete`: its headers ended).
pub(crate) fn respond(
    req: &[u8],
    complete: bool,
    counters: &ParticipantCounters,
) -> (&'static str, String) {
    if !complete {
        return (
            "431 Request Header Fields Too Large",
            "request too large\n".into(),
        );
    }
    let line = req.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics" | "/")) => ("200 OK", counters.to_prometheus()),
        (Some("GET"), Some(_)) => ("404 Not Found", "only /metrics is served\n".into()),
        (Some(_), Some(_)) => ("405 Method Not Allowed", "only GET\n".into()),
        _ => ("400 Bad Request", "not an HTTP request\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_help_type_and_a_value_per_metric() {
        let c = ParticipantCounters {
            node: 7,
            view_id: 3,
            samples_written: 42,
            group: NodeCounters {
                delivered: 11,
                ..NodeCounters::default()
            },
            ..ParticipantCounters::default()
        };
        let text = c.to_prometheus();
        assert!(text.contains("# TYPE spindle_view_id gauge\n"), "{text}");
        assert!(
            text.contains("spindle_samples_written_total{node=\"7\"} 42\n"),
            "{text}"
        );
        assert!(
            text.contains("spindle_delivered_total{node=\"7\"} 11\n"),
            "{text}"
        );
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(
            (samples, helps, types),
            (METRICS.len(), METRICS.len(), METRICS.len())
        );
    }

    #[test]
    fn bad_requests_get_4xx_not_a_panic() {
        let c = ParticipantCounters::default();
        assert_eq!(
            respond(b"GET /metrics HTTP/1.1\r\n\r\n", true, &c).0,
            "200 OK"
        );
        assert!(respond(b"GET /x HTTP/1.1\r\n\r\n", true, &c)
            .0
            .starts_with("404"));
        assert!(respond(b"POST /metrics HTTP/1.1\r\n\r\n", true, &c)
            .0
            .starts_with("405"));
        assert!(respond(b"\xff\xfe\r\n\r\n", true, &c).0.starts_with("400"));
        assert!(respond(b"GET /metrics", false, &c).0.starts_with("431"));
        assert!(respond(b"", true, &c).0.starts_with("400"));
    }

    #[test]
    fn a_bad_listen_address_names_the_key() {
        let m = MetricsConfig {
            listen: Some("localhost-ish".into()),
        };
        let e = m.validate("p.toml").unwrap_err().to_string();
        assert!(
            e.contains("p.toml") && e.contains("[metrics] listen"),
            "{e}"
        );
        assert!(MetricsConfig::default().validate("p.toml").is_ok());
    }
}
