//! Three processes over tcp and shm on loopback, two overlapping subgroups, every member
//! sending: the delivered logs of all nodes are compared; and a process killed with
//! SIGKILL mid-run makes the survivors stop with an error instead of hanging.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PERF: &str = env!("CARGO_BIN_EXE_spindle-group-perf");
/// Messages per sender in the comparison runs.
const MESSAGES: u64 = 500;

/// `(subgroup, global_index, sender_rank, sender_seq, size)` lines of one node's log.
type Log = Vec<(u32, u64, u32, u64, usize)>;

fn read_log(dir: &Path, node: u32) -> Log {
    let text = std::fs::read_to_string(dir.join(format!("node-{node}.log")))
        .unwrap_or_else(|e| panic!("node {node} log: {e}"));
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 5, "log line {l:?}");
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
            )
        })
        .collect()
}

fn run_and_compare(backend: &str, mode: &str) {
    let dir = std::env::temp_dir().join(format!(
        "spindle-group-mp-{backend}-{mode}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let json = common::perf_result(
        Command::new(PERF)
            .args(["--backend", backend, "--nodes", "3", "--senders", "all"])
            .args(["--layout", "overlapping", "--mode", mode, "--size", "200"])
            .args([
                "--messages",
                &MESSAGES.to_string(),
                "--window",
                "32",
                "--timeout-s",
                "120",
                "--suspect-floor-ms",
                "250",
            ])
            .arg("--log")
            .arg(&dir),
        &format!("{backend}/{mode}"),
    );
    assert_eq!(json["nodes"], 3);
    let logs: BTreeMap<u32, Log> = (1..=3).map(|n| (n, read_log(&dir, n))).collect();
    // Subgroup 0: nodes 1, 2, 3, all sending. Subgroup 1: nodes 2, 3, both sending.
    for (subgroup, members, senders) in [(0u32, vec![1u32, 2, 3], 3u32), (1, vec![2, 3], 2)] {
        let per_node: Vec<Log> = members
            .iter()
            .map(|n| {
                logs[n]
                    .iter()
                    .copied()
                    .filter(|l| l.0 == subgroup)
                    .collect()
            })
            .collect();
        for (n, log) in members.iter().zip(&per_node) {
            assert_eq!(
                log.len() as u64,
                u64::from(senders) * MESSAGES,
                "{backend}/{mode}: node {n} subgroup {subgroup} delivered count"
            );
            for rank in 0..senders {
                let seqs: Vec<u64> = log.iter().filter(|l| l.2 == rank).map(|l| l.3).collect();
                assert_eq!(
                    seqs.len() as u64,
                    MESSAGES,
                    "node {n}: sender {rank}'s messages"
                );
                assert!(
                    seqs.windows(2).all(|w| w[0] < w[1]),
                    "{backend}/{mode}: node {n}: sender {rank}'s order broken"
                );
            }
            assert!(log.iter().all(|l| l.4 == 200), "sizes");
        }
        if mode == "atomic" {
            for (n, log) in members.iter().zip(&per_node).skip(1) {
                assert_eq!(
                    log, &per_node[0],
                    "{backend}: node {n} delivered another sequence in subgroup {subgroup}"
                );
            }
        } else {
            for rank in 0..senders {
                let of = |log: &Log| -> Vec<u64> {
                    log.iter().filter(|l| l.2 == rank).map(|l| l.3).collect()
                };
                for log in &per_node[1..] {
                    assert_eq!(
                        of(log),
                        of(&per_node[0]),
                        "{backend}: sender {rank} differs"
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_three_processes_atomic() {
    run_and_compare("tcp", "atomic");
}

#[test]
fn tcp_three_processes_unordered() {
    run_and_compare("tcp", "unordered");
}

#[test]
fn shm_three_processes_atomic() {
    run_and_compare("shm", "atomic");
}

#[test]
fn shm_three_processes_unordered() {
    run_and_compare("shm", "unordered");
}

/// The test plays coordinator: three node processes, one killed with SIGKILL once they
/// run; the two survivors must exit on their own with an error naming the failure.
fn killed_member_wedges_the_others(backend: &str) {
    let mut children = Vec::new();
    for id in 1..=3u32 {
        let child = Command::new(PERF)
            .args(["--backend", backend, "--nodes", "3", "--senders", "all"])
            .args([
                "--size",
                "64",
                "--messages",
                "50000000",
                "--timeout-s",
                "120",
                "--suspect-floor-ms",
                "250",
            ])
            .args(["--child-id", &id.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a node");
        children.push(child);
    }
    let mut addresses = Vec::new();
    for (i, c) in children.iter_mut().enumerate() {
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim_end()
            .strip_prefix("ADDR ")
            .expect("ADDR line")
            .to_string();
        addresses.push(format!("{}={addr}", i + 1));
    }
    for c in &mut children {
        let s = c.stdin.as_mut().unwrap();
        writeln!(s, "PEERS {}", addresses.join(" ")).unwrap();
        s.flush().unwrap();
    }
    // Let them multicast for a moment, then kill node 3 for real.
    std::thread::sleep(Duration::from_millis(1500));
    let mut victim = children.pop().unwrap();
    victim.kill().expect("SIGKILL node 3");
    victim.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    for (i, mut c) in children.into_iter().enumerate() {
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("{backend}: node {} hung after node 3 was killed", i + 1);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(
            !status.success(),
            "{backend}: node {} finished 50M messages per sender?",
            i + 1
        );
        assert!(
            ["wedged", "failed", "stopped"]
                .iter()
                .any(|w| err.to_lowercase().contains(w)),
            "{backend}: node {} stopped without naming the failure: {err}",
            i + 1
        );
    }
}

#[test]
fn tcp_killed_member_wedges_the_others() {
    killed_member_wedges_the_others("tcp");
}

#[test]
fn shm_killed_member_wedges_the_others() {
    killed_member_wedges_the_others("shm");
}

/// Messages per sender in the large-message runs.
const LARGE_MESSAGES: u64 = 24;
/// Bytes of each large message: above the largest slot, so it goes by RDMC inside the
/// subgroup's order (and not a multiple of the word or the block).
const LARGE_BYTES: usize = 300_001;

/// Three processes, every member sending messages above the slot with two RDMC messages
/// in flight per sender: every node delivers every message, of its size, and the same
/// sequence.
fn large_messages_by_rdmc_deliver_one_order(backend: &str) {
    let dir = std::env::temp_dir().join(format!(
        "spindle-group-mp-large-{backend}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let json = common::perf_result(
        Command::new(PERF)
            .args(["--backend", backend, "--nodes", "3", "--senders", "all"])
            .args(["--mode", "atomic", "--size", &LARGE_BYTES.to_string()])
            .args(["--rdmc-window", "2", "--rdmc-block-bytes", "65536"])
            .args(["--messages", &LARGE_MESSAGES.to_string()])
            .args(["--timeout-s", "120", "--suspect-floor-ms", "250"])
            .arg("--log")
            .arg(&dir),
        backend,
    );
    assert_eq!(json["rdmc_window"], 2, "{backend}: the run went by RDMC");
    let logs: Vec<Log> = (1..=3).map(|n| read_log(&dir, n)).collect();
    for (n, log) in logs.iter().enumerate() {
        assert_eq!(
            log.len() as u64,
            3 * LARGE_MESSAGES,
            "{backend}: node {} delivered count",
            n + 1
        );
        assert!(
            log.iter().all(|l| l.4 == LARGE_BYTES),
            "{backend}: node {}: a message of another size",
            n + 1
        );
    }
    assert_eq!(logs[1], logs[0], "{backend}: node 2's sequence differs");
    assert_eq!(logs[2], logs[0], "{backend}: node 3's sequence differs");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_large_messages_by_rdmc_deliver_one_order() {
    large_messages_by_rdmc_deliver_one_order("tcp");
}

#[test]
fn shm_large_messages_by_rdmc_deliver_one_order() {
    large_messages_by_rdmc_deliver_one_order("shm");
}
