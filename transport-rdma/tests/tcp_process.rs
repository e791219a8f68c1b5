//! The tcp backend across processes: this test binary re-runs itself as the peer
//! (`peer_process` below, selected by an environment variable), then the parent checks
//! guarded writes both ways, and that a SIGKILLed peer is reported lost and a SIGSTOPped
//! peer is failed by probe time-out.

mod tcp_common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spindle_transport_rdma::tcp::TcpEndpoint;
use spindle_transport_rdma::{Endpoint, Event, FabricConfig, FailureReason};
use tcp_common::*;

const CHILD_ENV: &str = "SPINDLE_TCP_TEST_PEER";
const PARENT: u32 = 1;
const CHILD: u32 = 2;
/// Payload bytes per guarded write.
const PAYLOAD: usize = 4096;
/// Round trips in the echo check.
const ROUNDS: u64 = 200;

/// The peer side: links to the parent, then echoes every guard it sees (with the
/// payload it guards) back into the parent's region, until the parent goes away.
#[test]
#[ignore = "the peer process, run by spawn_peer with --ignored"]
fn peer_process() {
    let parent_addr = std::env::var(CHILD_ENV)
        .unwrap_or_else(|_| panic!("peer_process runs only as a child, with {CHILD_ENV} set"));
    let cfg = FabricConfig {
        suspect_floor_ms: 20_000,
        suspect_ceiling_ms: 20_000,
        ..FabricConfig::default()
    };
    let ep = TcpEndpoint::open(CHILD, "127.0.0.1:0", cfg).unwrap();
    let region = ep.register_region(1, 8 + PAYLOAD).unwrap();
    ep.connect(PARENT, &parent_addr).unwrap();
    let mut last = 0;
    let mut payload = vec![0u8; PAYLOAD];
    loop {
        while let Some(event) = ep.poll_event() {
            if let Event::PeerFailed { .. } = event {
                return;
            }
        }
        let g = region.load_u64(0);
        if g != last {
            last = g;
            region.read_bytes(8, &mut payload).unwrap();
            ep.write_then_release(PARENT, 1, 8, &payload, 0, g).unwrap();
        }
        ep.wait(Duration::from_millis(50));
    }
}

fn spawn_peer(parent: &TcpEndpoint) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "peer_process",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, parent.address())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the peer process")
}

fn linked_pair(
    cfg: FabricConfig,
) -> (
    std::sync::Arc<TcpEndpoint>,
    Child,
    spindle_transport_rdma::Region,
) {
    let ep = open_with(PARENT, cfg);
    let region = ep.register_region(1, 8 + PAYLOAD).unwrap();
    let child = spawn_peer(&ep);
    event_where(
        &*ep,
        "the peer process links",
        |e| matches!(e, Event::PeerConnected { peer } if *peer == CHILD),
    );
    (ep, child, region)
}

fn echo_rounds(ep: &TcpEndpoint, region: &spindle_transport_rdma::Region) {
    let mut back = vec![0u8; PAYLOAD];
    for round in 1..=ROUNDS {
        let byte = (round % 256) as u8;
        ep.write_then_release(CHILD, 1, 8, &vec![byte; PAYLOAD], 0, round)
            .unwrap();
        wait_until(ep, "echo", || region.load_u64(0) == round);
        region.read_bytes(8, &mut back).unwrap();
        assert!(
            back.iter().all(|b| *b == byte),
            "round {round}: payload under the echoed guard is not the one sent"
        );
    }
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

#[test]
fn guarded_writes_cross_processes_and_sigkill_is_detected() {
    let (ep, mut child, region) = linked_pair(test_config());
    echo_rounds(&ep, &region);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    match event_where(&*ep, "failure of the killed peer", |e| {
        matches!(e, Event::PeerFailed { .. })
    }) {
        Event::PeerFailed { peer, reason } => {
            assert_eq!(peer, CHILD);
            assert!(
                matches!(reason, FailureReason::ConnectionLost(_)),
                "{reason:?}"
            );
        }
        _ => unreachable!(),
    }
    assert!(ep.peers().is_empty());
}

#[test]
fn a_stopped_process_is_failed_by_probe_timeout() {
    let cfg = FabricConfig {
        probe_interval_ms: 20,
        suspect_floor_ms: 2_000,
        suspect_ceiling_ms: 2_000,
        ..FabricConfig::default()
    };
    let (ep, mut child, region) = linked_pair(cfg);
    echo_rounds(&ep, &region);
    signal(&child, "-STOP");
    let started = Instant::now();
    let event = event_where(&*ep, "probe time-out", |e| {
        matches!(e, Event::PeerFailed { .. })
    });
    signal(&child, "-CONT");
    let _ = child.kill();
    child.wait().unwrap();
    match event {
        Event::PeerFailed { peer, reason } => {
            assert_eq!(peer, CHILD);
            assert!(
                matches!(reason, FailureReason::ProbeTimeout { .. }),
                "{reason:?} after {:?}",
                started.elapsed()
            );
        }
        _ => unreachable!(),
    }
}
