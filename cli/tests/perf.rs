//! `spindle perf` end to end with small counts: a criterion that cannot be met exits 1
//! (an impossible --min-rate, an impossible --max-p99), one that always holds exits 0
//! with the table, and a criterion the mode cannot measure is bad usage (exit 2). No
//! timing is asserted.

use std::process::{Command, Output};

use serde_json::Value;

/// One benchmark at a time: each runs two processes flat out, and several at once on a
/// 2-core machine starve each other past their joins' time-outs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn perf(args: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
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
    let out = stdout_exiting(&o, 1);
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
    let out = stdout_exiting(&o, 0);
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
    let out = stdout_exiting(&o, 1);
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

/// Arguments no run can use are bad usage (exit 2) named by flag, found before any
/// process starts or joins — not a failed run after a join's time-out, and never a
/// vacuous PASS over nothing measured.
#[test]
fn arguments_no_run_can_use_are_bad_usage_named_by_flag() {
    for (args, named) in [
        (&["--samples", "0"][..], "--samples 0"),
        (
            &["--latency", "--samples", "0", "--max-p99", "10"],
            "--samples 0",
        ),
        (&["--level", "bogus"], "--level \"bogus\""),
        (&["--transport", "udp"], "--transport \"udp\""),
        (&["--size", "1000000000"], "--size 1000000000: at most"),
        (&["--window", "0"], "window_slots = 0"),
    ] {
        let o = perf(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing ran");
    }
}

#[test]
fn a_small_sweep_writes_csv_json_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sweep");
    let o = perf(&[
        "sweep",
        "--sizes",
        "16,256",
        "--levels",
        "unordered",
        "--transports",
        "shm",
        "--samples",
        "200",
        "--roundtrips",
        "50",
        "--warmup",
        "5",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let csv = std::fs::read_to_string(out.join("sweep.csv")).expect("sweep.csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "transport,level,size,msgs_per_s,rtt_p50_us,rtt_p99_us"
    );
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[1].starts_with("shm,unordered,16,") && rows[2].starts_with("shm,unordered,256,"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).expect("json"))
            .expect("sweep.json");
    assert_eq!(json.as_array().map(Vec::len), Some(2));
    for svg in ["rate.svg", "rtt.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).expect("plot");
        assert!(
            text.starts_with("<svg") && text.contains("polyline"),
            "{svg}"
        );
    }
    // Bad usage: an empty grid.
    let o = perf(&["sweep", "--sizes", "", "--out", &out.to_string_lossy()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `o`'s stdout, once its exit code is asserted to be `code` (the message shows both
/// streams).
fn stdout_exiting(o: &Output, code: i32) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(code),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}
