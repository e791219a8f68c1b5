//! The comparison workload (`scripts/bench-interop.sh`): one publisher process, one
//! subscriber process, reliable, the keyed topic [`PERF_TOPIC`] (`DDS::KeyedString`, 8
//! instances), samples of a given size, on any stack.
//!
//! Each value starts with its send time (ns since the Unix epoch, read from the same host
//! clock the subscriber reads), so a subscriber measures one-way latency directly. A
//! `throughput` run writes as fast as the writer may (reliable: it blocks when the
//! window is full) and the subscriber counts from its first sample to its last; a
//! `latency` run paces the writer ([`LATENCY_GAP_US`] between samples) so queues stay
//! empty and the percentiles are of one-way times, not of queueing.

use std::time::{SystemTime, UNIX_EPOCH};

/// The comparison topic.
pub const PERF_TOPIC: &str = "InteropPerf";

/// Gap between samples of a latency run.
pub const LATENCY_GAP_US: u64 = 1_000;

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Bytes of a sample's encoding that are not its value: the 4-byte encapsulation header,
/// the key string ("k0".."k7": length, 3 bytes, padding to 4) and the value's length.
pub const SAMPLE_OVERHEAD_BYTES: usize = 4 + 8 + 4 + 1;

/// Bytes of the stamp that starts every value: the send time (20 digits), `-`, the
/// sequence number (10 digits), `-`.
pub const STAMP_BYTES: usize = 32;

/// The value of sample `seq` sent at `sent_ns`, sized so the whole sample encodes to
/// `size` bytes (never less than the [`STAMP_BYTES`] stamp). For an API that takes its
/// sample by value (RustDDS's `write`); one that borrows it keeps one value and stamps it
/// in place ([`stamp_perf_value`]), as `ddsperf` does.
pub fn perf_value(sent_ns: u64, seq: u64, size: usize) -> String {
    let want = size.saturating_sub(SAMPLE_OVERHEAD_BYTES).max(STAMP_BYTES);
    let mut v = Vec::with_capacity(want);
    v.extend_from_slice(&stamp(sent_ns, seq));
    v.resize(want, b'x');
    // The stamp is ASCII digits and dashes, the padding ASCII: always UTF-8.
    String::from_utf8(v).expect("an ASCII value")
}

/// Overwrites the stamp at the head of `value` (made by [`perf_value`]) with `sent_ns`
/// and `seq`, in place: the writer of a borrowing API sends one value over and over.
pub fn stamp_perf_value(value: &mut String, sent_ns: u64, seq: u64) {
    let s = stamp(sent_ns, seq);
    // The stamp is ASCII, so it replaces ASCII bytes by ASCII bytes of the same length.
    let head = std::str::from_utf8(&s).expect("an ASCII stamp");
    value.replace_range(..STAMP_BYTES, head);
}

/// `{sent_ns:020}-{seq:010}-` without a formatter or an allocation (values of more
/// digits keep their low ones; `seq` wraps at 10^10, `sent_ns` cannot reach 10^20).
fn stamp(sent_ns: u64, seq: u64) -> [u8; STAMP_BYTES] {
    let mut out = [b'-'; STAMP_BYTES];
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 20, sent_ns);
    put(21, 10, seq);
    out
}

/// The send time and sequence number stamped into a value.
pub fn parse_perf_value(v: &str) -> Option<(u64, u64)> {
    let t = v.get(..20)?.parse().ok()?;
    let s = v.get(21..31)?.parse().ok()?;
    Some((t, s))
}

/// What a perf subscriber measured.
#[derive(Debug, Default)]
pub struct PerfStats {
    first_ns: u64,
    last_ns: u64,
    samples: u64,
    latencies_ns: Vec<u64>,
    out_of_order: u64,
    last_seq: Option<u64>,
}

/// Most latencies a subscriber keeps (the rest are counted, not kept).
pub const LATENCIES_KEPT_MAX: usize = 1 << 20;

impl PerfStats {
    /// One sample taken now.
    pub fn sample(&mut self, value: &str) {
        let now = now_ns();
        if self.samples == 0 {
            self.first_ns = now;
        }
        self.last_ns = now;
        self.samples += 1;
        if let Some((sent, seq)) = parse_perf_value(value) {
            if self.latencies_ns.len() < LATENCIES_KEPT_MAX {
                self.latencies_ns.push(now.saturating_sub(sent));
            }
            if self.last_seq.is_some_and(|l| seq != l + 1) {
                self.out_of_order += 1;
            }
            self.last_seq = Some(seq);
        }
    }

    /// Samples so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The JSON line: stack, mode, size, samples, complete (all `expected` arrived),
    /// msgs_per_s, bytes_per_s, lat_p50_us, lat_p99_us, out_of_order (per the single
    /// writer's sequence).
    pub fn json(&mut self, stack: &str, mode: &str, size: usize, expected: u64) -> String {
        self.latencies_ns.sort_unstable();
        let pct = |p: f64| -> f64 {
            if self.latencies_ns.is_empty() {
                return f64::NAN;
            }
            let i = ((self.latencies_ns.len() - 1) as f64 * p).round() as usize;
            self.latencies_ns[i] as f64 / 1e3
        };
        let secs = (self.last_ns.saturating_sub(self.first_ns)) as f64 / 1e9;
        let rate = if secs > 0.0 {
            (self.samples.saturating_sub(1)) as f64 / secs
        } else {
            0.0
        };
        format!(
            "{{\"stack\":\"{stack}\",\"mode\":\"{mode}\",\"size\":{size},\"samples\":{},\
             \"complete\":{},\
             \"msgs_per_s\":{:.0},\"bytes_per_s\":{:.0},\"lat_p50_us\":{:.1},\
             \"lat_p99_us\":{:.1},\"out_of_order\":{}}}",
            self.samples,
            self.samples >= expected,
            rate,
            rate * size as f64,
            pct(0.50),
            pct(0.99),
            self.out_of_order
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_stamp_and_size() {
        let v = perf_value(1_764_000_000_123_456_789, 42, 1024);
        assert_eq!(parse_perf_value(&v), Some((1_764_000_000_123_456_789, 42)));
        assert_eq!(v.len() + SAMPLE_OVERHEAD_BYTES, 1024);
        assert!(perf_value(1, 1, 16).len() >= 32);
        assert_eq!(
            &v[..32],
            &format!("{:020}-{:010}-", 1_764_000_000_123_456_789u64, 42)
        );
    }

    #[test]
    fn a_value_stamped_in_place_reads_back_its_new_stamp() {
        let mut v = perf_value(1, 1, 1024);
        let len = v.len();
        stamp_perf_value(&mut v, 1_764_000_000_987_654_321, 9_876_543_210);
        assert_eq!(
            parse_perf_value(&v),
            Some((1_764_000_000_987_654_321, 9_876_543_210))
        );
        assert_eq!(v.len(), len);
        assert!(v[STAMP_BYTES..].bytes().all(|b| b == b'x'));
    }

    #[test]
    fn stats_count_and_report() {
        let mut s = PerfStats::default();
        for seq in 0..10 {
            s.sample(&perf_value(now_ns(), seq, 64));
        }
        s.sample(&perf_value(now_ns(), 3, 64));
        let j = s.json("x", "throughput", 64, 11);
        assert!(
            j.contains("\"samples\":11") && j.contains("\"out_of_order\":1"),
            "{j}"
        );
    }
}
