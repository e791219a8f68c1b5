//! The `large_memory` tool end to end, over tcp and shm, small: with the participants'
//! default `sample_bytes_max` (256 MiB) participant 1 writes three 20 MiB samples (above
//! the 16 MiB an RDMC buffer keeps resident) and both readers take all three; each
//! process reports its RSS before and after. Checks the report, not the figures (the
//! host is shared): both phases of both processes, every sample taken, the default limit.

use std::process::Command;

/// The two transports' runs take turns (four processes moving 20 MiB samples).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(transport: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_large_memory"))
        .args(["--transport", transport, "--samples", "3", "--size"])
        .arg((20 << 20).to_string())
        .output()
        .expect("run large_memory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "large_memory over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One JSON object per line, flat: checked by its fields' text.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        4,
        "{transport}: two phases of two processes\n{stdout}"
    );
    let has = |l: &str, field: &str| l.contains(field);
    for phase in ["ready", "after"] {
        let n = lines
            .iter()
            .filter(|l| has(l, &format!("\"phase\":\"{phase}\"")))
            .count();
        assert_eq!(n, 2, "{transport}: {phase} of both processes\n{stdout}");
    }
    for l in &lines {
        assert!(l.starts_with('{') && l.ends_with('}'), "{l}");
        assert!(has(l, &format!("\"transport\":\"{transport}\"")), "{l}");
        assert!(has(l, "\"sample_bytes_max\":268435456"), "the default: {l}");
        assert!(has(l, "\"rss_kib\":") && !has(l, "\"rss_kib\":0,"), "{l}");
        if has(l, "\"phase\":\"after\"") {
            assert!(
                has(l, "\"samples\":3,"),
                "{transport}: every sample taken: {l}"
            );
        }
    }
}

#[test]
fn large_memory_over_tcp_reports_both_phases() {
    run("tcp");
}

#[test]
fn large_memory_over_shm_reports_both_phases() {
    run("shm");
}
