//! DARE mode over real processes: three members over tcp and shm on loopback, every
//! member sending; each node's delivered log (index, sender, sequence number, size) must
//! be the same sequence, with every message of every sender once. The same workload on
//! the sim fabric (`--backend sim`: every node in one process, virtual time) too.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const PERF: &str = env!("CARGO_BIN_EXE_spindle-group-perf");
/// Messages per sender.
const MESSAGES: u64 = 300;

fn read_log(dir: &Path, node: u32) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("node-{node}.log")))
        .unwrap_or_else(|e| panic!("node {node} log: {e}"))
        .lines()
        .map(str::to_string)
        .collect()
}

fn run_and_compare(backend: &str) {
    let dir =
        std::env::temp_dir().join(format!("spindle-dare-mp-{backend}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let json = common::perf_result(
        Command::new(PERF)
            .args(["--backend", backend, "--nodes", "3", "--senders", "all"])
            .args(["--mode", "dare", "--size", "100", "--window", "16"])
            .args(["--messages", &MESSAGES.to_string(), "--timeout-s", "120"])
            .args(["--suspect-floor-ms", "250"])
            .arg("--log")
            .arg(&dir),
        &format!("{backend}/dare"),
    );
    assert_eq!(json["mode"], "dare");
    let first = read_log(&dir, 1);
    assert_eq!(
        first.len() as u64,
        3 * MESSAGES,
        "{backend}: node 1 delivered"
    );
    let mut seen = BTreeSet::new();
    let mut last_index = 0u64;
    for line in &first {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "log line {line:?}");
        let index: u64 = f[1].parse().expect("index");
        assert!(
            index > last_index,
            "{backend}: log indexes not increasing at {line:?}"
        );
        last_index = index;
        assert!(
            seen.insert((f[2].to_string(), f[3].to_string())),
            "{backend}: {line:?} delivered twice"
        );
        assert_eq!(f[4], "100");
    }
    for node in [2, 3] {
        assert_eq!(
            read_log(&dir, node),
            first,
            "{backend}: node {node} differs from node 1"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_processes_over_tcp_deliver_one_log_order() {
    run_and_compare("tcp");
}

#[test]
fn three_processes_over_shm_deliver_one_log_order() {
    run_and_compare("shm");
}

#[test]
fn three_nodes_on_the_sim_fabric_deliver_one_log_order() {
    run_and_compare("sim");
}
