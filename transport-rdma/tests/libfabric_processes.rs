//! The libfabric backend across processes: this test binary re-runs itself as the peer
//! process (the ignored `peer_process` test, selected by an environment variable), on the
//! `tcp;ofi_rxm` and `shm` providers. The peer writes guarded rounds into the parent's
//! region and sends messages; the parent checks the contract, then SIGKILLs the peer and
//! expects a failure event.
#![cfg(feature = "libfabric")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spindle_transport_rdma::libfabric::LibfabricEndpoint;
use spindle_transport_rdma::{Endpoint, Error, Event, FabricConfig, FailureReason};

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Give-up bound for anything awaited (liveness, never asserted as a timing).
const DEADLINE: Duration = Duration::from_secs(60);
const ROUNDS: u64 = 500;
const SLOTS: u64 = 16;
const ENV_PROVIDER: &str = "SPINDLE_LF_PEER_PROVIDER";
const ENV_ADDRESS: &str = "SPINDLE_LF_PEER_ADDRESS";

fn next_event(ep: &LibfabricEndpoint, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    let start = Instant::now();
    loop {
        while let Some(event) = ep.poll_event() {
            if pred(&event) {
                return event;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "node {} never saw {what}",
            ep.node()
        );
        ep.wait(Duration::from_millis(50));
    }
}

/// The peer process: node 2. Connects to the parent (node 1), writes ROUNDS guarded
/// rounds into its region 5, sends "done", then idles until killed.
#[test]
#[ignore = "run as the peer process by guarded_writes_across_processes"]
fn peer_process() {
    let (Ok(provider), Ok(address)) = (std::env::var(ENV_PROVIDER), std::env::var(ENV_ADDRESS))
    else {
        panic!("peer_process runs only as the child of guarded_writes_across_processes");
    };
    let ep = LibfabricEndpoint::open(2, &provider, FabricConfig::default()).unwrap();
    ep.connect(1, &address).unwrap();
    next_event(&ep, "PeerConnected", |e| {
        *e == Event::PeerConnected { peer: 1 }
    });
    assert!(
        ep.remote_region(1, 5).is_some(),
        "region table arrives with the link"
    );
    for round in 1..=ROUNDS {
        let payload: Vec<u8> = (0..4).flat_map(|_| round.to_ne_bytes()).collect();
        let slot = 8 + (round % SLOTS) as usize * 32;
        loop {
            match ep.write_then_release(1, 5, slot, &payload, 0, round) {
                Ok(()) => break,
                Err(Error::QueueFull { .. }) => {
                    ep.wait(Duration::from_millis(10));
                }
                Err(err) => panic!("peer: {err}"),
            }
        }
    }
    ep.send(1, 99, b"done").unwrap();
    // Stay alive until the parent kills us (bounded).
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        while ep.poll_event().is_some() {}
        ep.wait(Duration::from_millis(100));
    }
}

#[test]
fn guarded_writes_across_processes() {
    for provider in ["tcp;ofi_rxm", "shm"] {
        let ep = LibfabricEndpoint::open(1, provider, FabricConfig::default()).unwrap();
        let row = ep.register_region(5, 8 + SLOTS as usize * 32).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "peer_process", "--nocapture"])
            .env(ENV_PROVIDER, provider)
            .env(ENV_ADDRESS, ep.address())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        next_event(&ep, "PeerConnected", |e| {
            *e == Event::PeerConnected { peer: 2 }
        });
        // Owner side of the guard pattern, while the other process writes.
        let start = Instant::now();
        let mut seen = 0;
        while seen < ROUNDS {
            let guard = row.load_u64(0);
            assert!(
                guard >= seen,
                "{provider}: guard went back from {seen} to {guard}"
            );
            if guard > seen {
                let slot = 8 + (guard % SLOTS) as usize * 32;
                for word in 0..4 {
                    let value = row.load_u64(slot + word * 8);
                    assert!(
                        value >= guard && value <= ROUNDS,
                        "{provider}: guard {guard}, word {value:#x}"
                    );
                }
                seen = guard;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{provider}: peer process exited early ({status}) at round {seen}");
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{provider}: guard stuck at {seen}"
            );
            std::hint::spin_loop();
        }
        let done = next_event(&ep, "Recv", |e| matches!(e, Event::Recv { .. }));
        assert_eq!(
            done,
            Event::Recv {
                peer: 2,
                imm: 99,
                data: b"done".to_vec()
            },
            "{provider}"
        );
        if provider == "tcp;ofi_rxm" {
            // A frozen peer (SIGSTOP: its connections stay open, it just goes silent) is
            // declared failed by the probe time-out.
            signal(child.id(), "STOP");
            let event = next_event(&ep, "PeerFailed", |e| {
                matches!(e, Event::PeerFailed { peer: 2, .. })
            });
            assert!(
                matches!(
                    event,
                    Event::PeerFailed {
                        reason: FailureReason::ProbeTimeout { .. },
                        ..
                    }
                ),
                "{provider}: {event:?}"
            );
            signal(child.id(), "CONT");
            child.kill().unwrap();
            child.wait().unwrap();
            ep.close();
            continue;
        }
        // A peer process that dies is reported as failed (side channel reset or probe silence).
        child.kill().unwrap();
        child.wait().unwrap();
        next_event(&ep, "PeerFailed", |e| {
            matches!(e, Event::PeerFailed { peer: 2, .. })
        });
        assert!(ep.peers().is_empty(), "{provider}");
        ep.close();
    }
}
