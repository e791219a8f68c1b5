//! Round-trip latencies as `dds_perf --pingpong` reports them: exact percentiles from
//! every recorded round trip, and a log-linear histogram of fixed buckets (bounded
//! memory whatever the count) for plots.
//!
//! ```
//! use spindle_examples::latency::{percentiles, Histogram};
//! let mut h = Histogram::new();
//! let mut rtts: Vec<u64> = (1..=1000).map(|i| i * 1000).collect(); // 1 µs .. 1 ms
//! for &ns in &rtts {
//!     h.record(ns);
//! }
//! let p = percentiles(&mut rtts).unwrap();
//! assert_eq!(p.p50_ns, 500_000);
//! assert_eq!(p.max_ns, 1_000_000);
//! assert_eq!(h.count(), 1000);
//! ```

/// Linear sub-buckets per power of two, as a power of two: 32 sub-buckets, so a bucket
/// is at most 1/32 (about 3%) of its value wide.
pub const SUB_BUCKETS_LOG2: u32 = 5;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKETS_LOG2;
/// Values at or above `2^RANGE_NS_LOG2` ns (about 18 minutes) share the last bucket.
pub const RANGE_NS_LOG2: u32 = 40;
/// The number of buckets: exact ones below [`SUB_BUCKETS_LOG2`]'s power of two, then 32
/// per power of two up to [`RANGE_NS_LOG2`].
pub const BUCKETS: usize =
    (SUB_BUCKETS + (RANGE_NS_LOG2 - SUB_BUCKETS_LOG2) as u64 * SUB_BUCKETS) as usize;

/// A latency histogram over log-linear buckets of nanoseconds: fixed memory
/// ([`BUCKETS`] counters), about 3% resolution, exact below 32 ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// The bucket that holds `ns` (the last one for values beyond the range).
    pub fn bucket_of(ns: u64) -> usize {
        if ns < SUB_BUCKETS {
            return ns as usize;
        }
        let msb = 63 - ns.leading_zeros();
        if msb >= RANGE_NS_LOG2 {
            return BUCKETS - 1;
        }
        let shift = msb - SUB_BUCKETS_LOG2;
        let sub = (ns >> shift) - SUB_BUCKETS; // 0..SUB_BUCKETS
        (SUB_BUCKETS + u64::from(shift) * SUB_BUCKETS + sub) as usize
    }

    /// The values bucket `i` holds: `low_ns..high_ns` (the last bucket also holds every
    /// larger value).
    pub fn bucket_bounds(i: usize) -> (u64, u64) {
        let i = i as u64;
        if i < SUB_BUCKETS {
            return (i, i + 1);
        }
        let j = i - SUB_BUCKETS;
        let shift = j / SUB_BUCKETS;
        let sub = j % SUB_BUCKETS + SUB_BUCKETS;
        (sub << shift, (sub + 1) << shift)
    }

    /// Counts one value.
    pub fn record(&mut self, ns: u64) {
        self.counts[Histogram::bucket_of(ns)] += 1;
        self.total += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The smallest value recorded (`None` when empty).
    pub fn min_ns(&self) -> Option<u64> {
        (self.total > 0).then_some(self.min_ns)
    }

    /// The largest value recorded (`None` when empty).
    pub fn max_ns(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max_ns)
    }

    /// The buckets that hold values, in order: `(low_ns, high_ns, count)`.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let (lo, hi) = Histogram::bucket_bounds(i);
                (lo, hi, *c)
            })
    }

    /// The histogram as CSV: a header line, then one line per non-empty bucket with its
    /// bounds in µs, its count and the fraction of all values at or below its top.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("low_us,high_us,count,cumulative_fraction\n");
        let mut seen = 0u64;
        for (lo, hi, c) in self.buckets() {
            seen += c;
            out.push_str(&format!(
                "{:.3},{:.3},{},{:.9}\n",
                lo as f64 / 1e3,
                hi as f64 / 1e3,
                c,
                seen as f64 / self.total as f64
            ));
        }
        out
    }
}

/// The percentiles `dds_perf --pingpong` reports, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// The median.
    pub p50_ns: u64,
    /// The 90th percentile.
    pub p90_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The 99.9th percentile.
    pub p999_ns: u64,
    /// The 99.99th percentile.
    pub p9999_ns: u64,
    /// The largest value.
    pub max_ns: u64,
    /// The smallest value.
    pub min_ns: u64,
    /// The mean, rounded down.
    pub mean_ns: u64,
}

/// The value of nearest rank for `parts_per_million` of the sorted `sorted` (the
/// smallest value with at least that share of all values at or below it).
pub fn nearest_rank(sorted: &[u64], parts_per_million: u64) -> Option<u64> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let rank = (n * parts_per_million).div_ceil(1_000_000).clamp(1, n);
    Some(sorted[(rank - 1) as usize])
}

/// Exact percentiles (nearest rank) of `values`, which it sorts; `None` if empty.
pub fn percentiles(values: &mut [u64]) -> Option<Percentiles> {
    values.sort_unstable();
    let at = |ppm| nearest_rank(values, ppm);
    let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
    Some(Percentiles {
        p50_ns: at(500_000)?,
        p90_ns: at(900_000)?,
        p99_ns: at(990_000)?,
        p999_ns: at(999_000)?,
        p9999_ns: at(999_900)?,
        max_ns: *values.last()?,
        min_ns: *values.first()?,
        mean_ns: (sum / values.len() as u128) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_fixed_inputs_are_the_nearest_ranks() {
        let mut v: Vec<u64> = (1..=100_000).rev().collect();
        let p = percentiles(&mut v).unwrap();
        assert_eq!(p.p50_ns, 50_000);
        assert_eq!(p.p90_ns, 90_000);
        assert_eq!(p.p99_ns, 99_000);
        assert_eq!(p.p999_ns, 99_900);
        assert_eq!(p.p9999_ns, 99_990);
        assert_eq!(p.max_ns, 100_000);
        assert_eq!(p.min_ns, 1);
        assert_eq!(p.mean_ns, 50_000);
        // One slow outlier in 10,000: p99.99 still the fast value, max the outlier.
        let mut v = vec![10; 9_999];
        v.push(5_000);
        let p = percentiles(&mut v).unwrap();
        assert_eq!((p.p9999_ns, p.max_ns), (10, 5_000));
        // Two in 10,000: p99.99 catches one.
        v[0] = 6_000;
        let p = percentiles(&mut v).unwrap();
        assert_eq!((p.p999_ns, p.p9999_ns, p.max_ns), (10, 5_000, 6_000));
        assert_eq!(percentiles(&mut []), None);
        assert_eq!(nearest_rank(&[7], 999_900), Some(7));
    }

    #[test]
    fn buckets_tile_the_range_and_hold_their_values() {
        for i in 0..BUCKETS - 1 {
            let (lo, hi) = Histogram::bucket_bounds(i);
            assert!(lo < hi, "bucket {i}");
            assert_eq!(
                hi,
                Histogram::bucket_bounds(i + 1).0,
                "bucket {i} meets the next"
            );
            assert_eq!(Histogram::bucket_of(lo), i);
            assert_eq!(Histogram::bucket_of(hi - 1), i);
            // At most 1/32 of its value wide.
            assert!(
                (hi - lo) * SUB_BUCKETS <= lo.max(SUB_BUCKETS),
                "bucket {i}: {lo}..{hi}"
            );
        }
        assert_eq!(Histogram::bucket_bounds(BUCKETS - 1).1, 1 << RANGE_NS_LOG2);
        assert_eq!(Histogram::bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn histogram_counts_and_csv() {
        let mut h = Histogram::new();
        assert_eq!((h.count(), h.min_ns(), h.max_ns()), (0, None, None));
        for ns in [5, 5, 40_000, 40_100, 3_000_000] {
            h.record(ns);
        }
        assert_eq!(h.count(), 5);
        assert_eq!((h.min_ns(), h.max_ns()), (Some(5), Some(3_000_000)));
        let b: Vec<_> = h.buckets().collect();
        // 40,000 and 40,100 ns share a bucket 1,024 ns wide (32,768..65,536 in 32 steps).
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(b[0], (5, 6, 2));
        assert_eq!(b[1].2, 2);
        assert!(b[1].0 <= 40_000 && 40_100 < b[1].1);
        let csv = h.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "low_us,high_us,count,cumulative_fraction");
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], "0.005,0.006,2,0.400000000");
        assert!(lines[3].ends_with(",1,1.000000000"), "{}", lines[3]);
    }
}
