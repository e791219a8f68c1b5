//! Group-commit throughput of the log next to a raw reference in the same run.
//!
//! ```text
//! cargo run --release -p spindle-log --example log_bench -- [DIR] [--quick]
//! ```
//!
//! For each entry size and batch (appends per `sync`), appends the same total bytes two
//! ways in `DIR` (default: the system's temp directory; put it on the disk you measure):
//! through [`Log`] (header, checksum, segments, index) and through a bare loop that
//! gathers the same payload bytes in memory, writes them to one file in one `write` per
//! batch and calls `fdatasync` after it — the raw append a log cannot beat (it has no
//! headers, no checksums, no index). Prints one line per case with appends/s, MB/s and
//! the log ÷ raw ratio (medians of REPEATS alternating runs).

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

use spindle_log::{EntryMeta, Log, LogConfig, Version};

/// (entry payload bytes, appends per sync, appends in the run)
const CASES: [(usize, u64, u64); 6] = [
    (1024, 1, 2_000),
    (1024, 16, 16_000),
    (1024, 256, 128_000),
    (65536, 1, 500),
    (65536, 16, 2_000),
    (65536, 64, 4_000),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let base = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("spindle-log-bench-{}", std::process::id()));
    println!("dir {}", dir.display());
    println!("payload_bytes batch appends | log appends/s MB/s | raw appends/s MB/s | log/raw");
    for (size, batch, n) in CASES {
        let n = if quick { n / 10 } else { n };
        let payload = vec![0xA5u8; size];
        // Alternate log and raw runs so that both see the same phases of a noisy host,
        // and report the median of each.
        let mut log_s = Vec::new();
        let mut raw_s = Vec::new();
        for _ in 0..REPEATS {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("bench directory");
            log_s.push(run_log(&dir, &payload, batch, n));
            raw_s.push(run_raw(&dir, &payload, batch, n));
        }
        let (log_s, raw_s) = (median(log_s), median(raw_s));
        let mb = (n as f64 * size as f64) / 1e6;
        println!(
            "{size} {batch} {n} | {:.0} {:.1} | {:.0} {:.1} | {:.2}",
            n as f64 / log_s,
            mb / log_s,
            n as f64 / raw_s,
            mb / raw_s,
            raw_s / log_s
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs per case and side; the median is reported.
const REPEATS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds to append `n` entries through the log, syncing every `batch`.
fn run_log(dir: &std::path::Path, payload: &[u8], batch: u64, n: u64) -> f64 {
    let t = Instant::now();
    let mut log = Log::open(dir.join("log"), LogConfig::default()).expect("open");
    for i in 0..n {
        let meta = EntryMeta {
            version: Version::new(1, i),
            writer: 1,
            timestamp_us: i,
        };
        log.append(meta, payload).expect("append");
        if (i + 1) % batch == 0 {
            log.sync().expect("sync");
        }
    }
    log.close().expect("close");
    t.elapsed().as_secs_f64()
}

/// Seconds to write the same payloads raw: one `write` and one `fdatasync` per batch.
fn run_raw(dir: &std::path::Path, payload: &[u8], batch: u64, n: u64) -> f64 {
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(dir.join("raw"))
        .expect("raw file");
    let mut pending = Vec::with_capacity(payload.len() * batch as usize);
    for i in 0..n {
        pending.extend_from_slice(payload);
        if (i + 1) % batch == 0 {
            f.write_all(&pending).expect("write");
            pending.clear();
            f.sync_data().expect("fdatasync");
        }
    }
    f.write_all(&pending).expect("write");
    f.sync_data().expect("fdatasync");
    t.elapsed().as_secs_f64()
}
