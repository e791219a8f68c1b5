//! `spindle perf` end to end with small counts: a criterion that cannot be met exits 1
//! (an impossible --min-rate, an impossible --max-p99), one that always holds exits 0
//! with the table, and a criterion the mode cannot measure is bad usage (exit 2). No
//! timing is asserted.

use std::process::{Command, Output};

use serde_json::Value;

fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .arg("perf")
        .args(args)
        .output()
        .expect("run spindle perf")
}

#[test]
fn an_impossible_min_rate_fails_with_exit_1_and_says_so() {
    let o = perf(&[
        "--transport",
        "tcp",
        "--size",
        "64",
        "--samples",
        "300",
        "--min-rate",
        "1e15",
        "--json",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(r["received"], 300.0);
    assert_eq!(r["criteria"][0]["passed"], false, "{r}");
}

#[test]
fn a_criterion_that_holds_passes_and_the_table_is_printed() {
    let o = perf(&[
        "--transport",
        "shm",
        "--size",
        "64",
        "--samples",
        "300",
        "--min-rate",
        "0",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.lines().any(|l| l.starts_with("msgs_per_s")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("PASS")), "{out}");
}

#[test]
fn an_impossible_round_trip_bound_fails_with_exit_1() {
    let o = perf(&[
        "--pingpong",
        "--transport",
        "tcp",
        "--size",
        "16",
        "--roundtrips",
        "100",
        "--warmup",
        "10",
        "--seconds",
        "60",
        "--max-p99",
        "0",
        "--json",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(r["roundtrips"], 100);
    assert_eq!(r["criteria"][0]["passed"], false, "{r}");
}

#[test]
fn a_latency_bound_on_a_throughput_run_is_bad_usage() {
    let o = perf(&["--samples", "10", "--max-p99", "100"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-p99 needs --latency or --pingpong"));
}
