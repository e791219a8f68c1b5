//! The libfabric backend takes a send as the node its header names only if it came from
//! that node's fabric address (`FI_SOURCE`): one linked peer cannot pass its messages off
//! as another's, nor get another's link failed. The forged sends go through the test
//! kit's `testkit_send_as`, below the contract (a real endpoint always names itself).
//!
//! Its own test binary: it opens several endpoints at once, which other tests measuring
//! this process's memory must not see.
#![cfg(feature = "libfabric")]

use std::time::{Duration, Instant};

mod libfabric_common;
use libfabric_common::{connected, next_event_checked, DEADLINE, PROVIDERS};

use spindle_transport_rdma::libfabric::LibfabricEndpoint;
use spindle_transport_rdma::{Endpoint, Event, FabricConfig, FailureReason, NodeId};

fn open(node: NodeId, provider: &str) -> LibfabricEndpoint {
    LibfabricEndpoint::open(node, provider, FabricConfig::default())
        .unwrap_or_else(|err| panic!("opening {provider}: {err}"))
}

/// Waits until `ep` has handed on (delivered or dropped) `count` receives.
fn wait_received(ep: &LibfabricEndpoint, count: u64, provider: &str) {
    let start = Instant::now();
    while ep.testkit_receives() < count {
        assert!(
            start.elapsed() < DEADLINE,
            "{provider}: node {} never received it",
            ep.node()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `c` can still send to `a`, and `a` takes it as `c`'s: the next message `a` delivers
/// (so nothing forged was delivered before it) is `c`'s own.
fn still_linked(a: &LibfabricEndpoint, c: &LibfabricEndpoint, provider: &str) {
    c.send(a.node(), 8, b"really from c").unwrap();
    let c_node = c.node();
    let got = next_event_checked(a, "C's message", |e| match e {
        Event::Recv { .. } => Some(true),
        Event::PeerFailed { peer, .. } if *peer == c_node => None,
        _ => Some(false),
    });
    assert_eq!(
        got,
        Event::Recv {
            peer: c_node,
            imm: 8,
            data: b"really from c".to_vec()
        },
        "{provider}"
    );
}

#[test]
fn each_linked_peer_has_its_own_source_address_and_genuine_sends_pass() {
    for provider in PROVIDERS {
        let (a, b, c) = (open(1, provider), open(2, provider), open(3, provider));
        connected(&a, &b);
        connected(&c, &a); // C dials this time
        let of_b = a.testkit_peer_address(2).expect("B has an address");
        let of_c = a.testkit_peer_address(3).expect("C has an address");
        assert_ne!(of_b, of_c, "{provider}");
        // Genuine traffic, in several chunks too, is taken as its sender's.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        b.send(1, 1, &big).unwrap();
        c.send(1, 2, b"c").unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            let event = next_event_checked(&a, "Recv", |e| match e {
                Event::Recv { .. } => Some(true),
                Event::PeerFailed { .. } => None,
                _ => Some(false),
            });
            let Event::Recv { peer, imm, data } = event else {
                unreachable!()
            };
            got.push((peer, imm, data));
        }
        got.sort();
        assert_eq!(
            got,
            vec![(2, 1, big.clone()), (3, 2, b"c".to_vec())],
            "{provider}"
        );
        assert_eq!(a.peers(), vec![2, 3], "{provider}");
        for ep in [&a, &b, &c] {
            ep.close();
        }
    }
}

#[test]
fn a_peer_cannot_send_under_another_nodes_name() {
    for provider in PROVIDERS {
        let (a, b, c) = (open(1, provider), open(2, provider), open(3, provider));
        connected(&a, &b);
        connected(&a, &c);
        let exact = a.testkit_unknown_source_exact();
        // B puts on the fabric, under C's name, a chunk that fits no message of C's
        // (taken as C's, it would fail C's link as malformed), then a whole, well-formed
        // message (taken as C's, it would be delivered as C's).
        let before = a.testkit_receives();
        let to_a = b.testkit_peer_address(1).expect("A has an address at B");
        b.testkit_send_as(to_a, 3, 7, 5, b"a stray chunk").unwrap();
        b.testkit_send_as(to_a, 3, 7, 0, b"forged by b").unwrap();
        wait_received(&a, before + 2, provider);
        if exact {
            // A fails B, the node that really sent it …
            let failed = next_event_checked(&a, "B's failure", |e| match e {
                Event::PeerFailed { peer: 2, .. } => Some(true),
                Event::Recv { .. } | Event::PeerFailed { .. } => None,
                _ => Some(false),
            });
            assert_eq!(
                failed,
                Event::PeerFailed {
                    peer: 2,
                    reason: FailureReason::Malformed(
                        "fabric message claiming to come from node 3".into()
                    )
                },
                "{provider}"
            );
            // … and B sees its link to A go down.
            next_event_checked(&b, "the link to A down", |e| {
                Some(matches!(e, Event::PeerFailed { peer: 1, .. }))
            });
        }
        // Either way A did not deliver it as C's, and C's link is untouched.
        still_linked(&a, &c, provider);
        let up: Vec<NodeId> = if exact { vec![3] } else { vec![2, 3] };
        assert_eq!(a.peers(), up, "{provider}");
        for ep in [&a, &b, &c] {
            ep.close();
        }
    }
}

#[test]
fn a_stranger_cannot_send_under_a_peers_name() {
    for provider in PROVIDERS {
        let (a, b, c) = (open(1, provider), open(2, provider), open(3, provider));
        connected(&a, &b);
        connected(&a, &c);
        if !a.testkit_unknown_source_exact() {
            // libfabric 1.17's shm: the stranger's send reads as coming from whatever
            // address that completion-queue slot last held, here B's or C's.
            eprintln!("{provider}: skipped, the provider misreports unknown sources");
            continue;
        }
        // D has no link to A (A never inserted its name) but knows A's fabric name.
        let d = open(4, provider);
        let to_a = d
            .testkit_insert_address(&a.testkit_fabric_name())
            .expect("A's name goes into D's address vector");
        let before = a.testkit_receives();
        d.testkit_send_as(to_a, 3, 7, 0, b"forged by a stranger")
            .unwrap();
        // A receives it and drops it (its source is not in A's address vector), failing
        // nobody: the next message A delivers is C's own, and B and C are still up.
        wait_received(&a, before + 1, provider);
        still_linked(&a, &c, provider);
        assert_eq!(a.peers(), vec![2, 3], "{provider}");
        for ep in [&a, &b, &c, &d] {
            ep.close();
        }
    }
}
