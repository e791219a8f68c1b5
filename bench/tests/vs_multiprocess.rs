//! Five processes over tcp (and shm) on loopback, every member sending in one subgroup,
//! atomic or ordered by DARE (`spindle-group-vs node --dare`, `DeliveryMode::Dare`): the
//! leader and then a follower are SIGKILLed mid-stream, for real; the survivors must
//! install the same views and write byte-for-byte identical delivery logs (for DARE:
//! whichever of them led its instance, the hand-off ends each view's instance at one
//! index everywhere).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::{finish_members, start_members_with, Proc};

/// Waits until `p` prints `VIEW <vid> ...`; returns the member list.
fn wait_view(p: &Proc, vid: u32, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = p
            .lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{what}: no view {vid}: {e}"));
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 4 && f[0] == "VIEW" && f[1] == vid.to_string() {
            return f[3].to_string();
        }
    }
}

fn run(backend: &str, dare: bool) {
    let dir = std::env::temp_dir().join(format!(
        "spindle-vs-{backend}-{dare}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let args: &[&str] = if dare { &["--dare"] } else { &[] };
    let (mut procs, _) = start_members_with(backend, 5, &dir, Stdio::inherit, args);
    for (id, p) in &procs {
        assert_eq!(
            wait_view(p, 1, &format!("{backend} node {id}")),
            "1,2,3,4,5"
        );
    }
    // Mid-stream: the leader (node 1, rank 0) dies, then a follower (node 3).
    std::thread::sleep(Duration::from_millis(400));
    drop(procs.remove(&1));
    for (id, p) in &procs {
        assert_eq!(wait_view(p, 2, &format!("{backend} node {id}")), "2,3,4,5");
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(procs.remove(&3));
    for (id, p) in &procs {
        assert_eq!(wait_view(p, 3, &format!("{backend} node {id}")), "2,4,5");
    }
    std::thread::sleep(Duration::from_millis(300));
    finish_members(&mut procs, backend, Duration::from_secs(120));
    let logs: BTreeMap<u32, Vec<u8>> = [2u32, 4, 5]
        .iter()
        .map(|id| {
            (
                *id,
                std::fs::read(dir.join(format!("node-{id}.log"))).unwrap(),
            )
        })
        .collect();
    let text = String::from_utf8_lossy(&logs[&2]);
    let deliveries = text.lines().filter(|l| !l.starts_with("VIEW")).count();
    assert!(
        deliveries > 100,
        "{backend}: only {deliveries} deliveries logged"
    );
    if dare {
        // DARE's log indexes start at 1 in each view's instance (atomic mode's
        // round-robin index at 0): the subgroup did run DARE.
        let first = text
            .lines()
            .find(|l| l.starts_with("1 "))
            .expect("a delivery in view 1");
        assert_eq!(
            first.split(' ').nth(1),
            Some("1"),
            "{backend}: first delivery {first:?}"
        );
    }
    for v in ["VIEW 1 ", "VIEW 2 ", "VIEW 3 "] {
        assert!(text.contains(v), "{backend}: log lacks {v}");
    }
    // Survivors delivered in view 1 and 2 messages of the nodes that died afterwards.
    assert!(
        text.lines()
            .any(|l| l.starts_with("1 ") && l.split(' ').nth(2) == Some("1")),
        "{backend}: nothing of node 1 delivered in view 1"
    );
    for id in [4, 5] {
        assert!(
            logs[&id] == logs[&2],
            "{backend}: node {id}'s delivery log differs from node 2's"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_survivors_of_two_kills_deliver_identical_logs() {
    run("tcp", false);
}

#[test]
fn shm_survivors_of_two_kills_deliver_identical_logs() {
    run("shm", false);
}

#[test]
fn tcp_dare_survivors_of_two_kills_deliver_identical_logs() {
    run("tcp", true);
}

#[test]
fn shm_dare_survivors_of_two_kills_deliver_identical_logs() {
    run("shm", true);
}
