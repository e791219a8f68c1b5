//! Large samples across processes, over tcp and shm: three participants write small and
//! 1–16 MiB samples on one topic; every reader's log is the same sequence (one total
//! order for small and large together) holding every sample once, and each process
//! checked every sample's bytes. With a participant SIGKILLed while it streams large
//! samples, the survivors' logs are still identical and hold a prefix of what it wrote.

use std::collections::BTreeMap;
use std::process::Command;

use spindle_examples::large_samples::{sizes, sizes_written, KILLED, KILL_ROUNDS, PARTICIPANTS};
use spindle_examples::{parse_log, LogLine};

/// The two transports' runs take turns (six processes moving 16 MiB samples at once on a
/// small shared host would starve each other).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(transport: &str) {
    let (dir, logs) = domain(transport, false);
    let reference = &logs[&1];
    let want: usize = (1..=PARTICIPANTS).map(|n| sizes(n).len()).sum();
    assert_eq!(reference.len(), want, "{transport}: every sample once");
    for (node, log) in &logs {
        assert_eq!(
            log, reference,
            "{transport}: node {node} took another sequence"
        );
    }
    for n in 1..=PARTICIPANTS {
        assert_eq!(
            written_by(reference, n),
            numbered(sizes(n)),
            "{transport}: writer {n}'s samples, in order"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `<writer>.<index>.<len>` of each line: writer `n`'s samples as `(index, len)`, in log
/// order.
fn written_by(log: &[LogLine], n: u32) -> Vec<(u64, usize)> {
    log.iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.key.split('.').collect();
            (f[0] == n.to_string()).then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect()
}

fn numbered(sizes: Vec<usize>) -> Vec<(u64, usize)> {
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, s)| (i as u64, s))
        .collect()
}

fn kill_run(transport: &str) {
    let (dir, logs) = domain(transport, true);
    assert!(
        !logs.contains_key(&KILLED),
        "{transport}: the killed participant wrote no log"
    );
    let reference = &logs[&1];
    for (node, log) in &logs {
        assert_eq!(
            log, reference,
            "{transport}: survivor {node} took another sequence than survivor 1"
        );
    }
    for n in (1..=PARTICIPANTS).filter(|n| *n != KILLED) {
        assert_eq!(
            written_by(reference, n),
            numbered(sizes_written(n, KILL_ROUNDS)),
            "{transport}: survivor {n}'s samples, all, in order"
        );
    }
    // The killed writer: a prefix of what it wrote (nothing lost in the middle, nothing
    // invented), not empty (it was killed after its first round reached every member) and
    // not all of it (its second round was under way), delivered before the survivors'
    // last view.
    let killed = written_by(reference, KILLED);
    let all = numbered(sizes_written(KILLED, KILL_ROUNDS));
    assert!(
        !killed.is_empty() && killed.len() < all.len() && killed[..] == all[..killed.len()],
        "{transport}: the killed writer's samples are a strict prefix of what it wrote: {killed:?}"
    );
    let last_view = reference.iter().map(|l| l.view_id).max().expect("samples");
    let killed_key = format!("{KILLED}.");
    let killed_views: Vec<u32> = reference
        .iter()
        .filter(|l| l.key.starts_with(&killed_key))
        .map(|l| l.view_id)
        .collect();
    assert!(
        killed_views.iter().all(|v| *v < last_view),
        "{transport}: the killed writer's samples end before the view without it ({killed_views:?}, last view {last_view})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the example (`--kill` if `kill`) and reads every log it wrote.
fn domain(transport: &str, kill: bool) -> (std::path::PathBuf, BTreeMap<u32, Vec<LogLine>>) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "spindle-large-samples-test-{transport}-{kill}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_large_samples"));
    cmd.args(["--transport", transport, "--out"]).arg(&dir);
    if kill {
        cmd.arg("--kill");
    }
    let out = cmd.output().expect("run large_samples");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "large_samples over {transport} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut logs = BTreeMap::new();
    for node in 1..=PARTICIPANTS {
        let name = format!("{node}.log");
        let Ok(text) = std::fs::read_to_string(dir.join(&name)) else {
            assert!(kill && node == KILLED, "{transport}: no {name}\n{stdout}");
            continue;
        };
        logs.insert(node, parse_log(&name, &text).expect("well-formed log"));
    }
    (dir, logs)
}

#[test]
fn small_and_16_mib_samples_share_one_order_over_tcp() {
    run("tcp");
}

#[test]
fn small_and_16_mib_samples_share_one_order_over_shm() {
    run("shm");
}

#[test]
fn a_participant_killed_while_it_streams_large_samples_leaves_survivors_agreeing_over_tcp() {
    kill_run("tcp");
}

#[test]
fn a_participant_killed_while_it_streams_large_samples_leaves_survivors_agreeing_over_shm() {
    kill_run("shm");
}
