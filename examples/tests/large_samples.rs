//! Large samples across processes, over tcp and shm: three participants write small and
//! 1–16 MiB samples on one topic; every reader's log is the same sequence (one total
//! order for small and large together) holding every sample once, and each process
//! checked every sample's bytes.

use std::collections::BTreeMap;
use std::process::Command;

use spindle_examples::large_samples::{sizes, PARTICIPANTS};
use spindle_examples::parse_log;

/// The two transports' runs take turns (six processes moving 16 MiB samples at once on a
/// small shared host would starve each other).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(transport: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "spindle-large-samples-test-{transport}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_large_samples"))
        .args(["--transport", transport, "--out"])
        .arg(&dir)
        .output()
        .expect("run large_samples");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "large_samples over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut logs = BTreeMap::new();
    for node in 1..=PARTICIPANTS {
        let name = format!("{node}.log");
        let text = std::fs::read_to_string(dir.join(&name))
            .unwrap_or_else(|e| panic!("{transport}: {name}: {e}\n{stdout}"));
        logs.insert(node, parse_log(&name, &text).expect("well-formed log"));
    }
    let reference = &logs[&1];
    let want: usize = (1..=PARTICIPANTS).map(|n| sizes(n).len()).sum();
    assert_eq!(reference.len(), want, "{transport}: every sample once");
    for (node, log) in &logs {
        assert_eq!(
            log, reference,
            "{transport}: node {node} took another sequence"
        );
    }
    // `<writer>.<index>.<len>`: each writer's samples in its order, all of them.
    for n in 1..=PARTICIPANTS {
        let got: Vec<(u64, usize)> = reference
            .iter()
            .filter_map(|l| {
                let f: Vec<&str> = l.key.split('.').collect();
                (f[0] == n.to_string()).then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
            })
            .collect();
        let wanted: Vec<(u64, usize)> = sizes(n)
            .into_iter()
            .enumerate()
            .map(|(i, s)| (i as u64, s))
            .collect();
        assert_eq!(got, wanted, "{transport}: writer {n}'s samples, in order");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn small_and_16_mib_samples_share_one_order_over_tcp() {
    run("tcp");
}

#[test]
fn small_and_16_mib_samples_share_one_order_over_shm() {
    run("shm");
}
