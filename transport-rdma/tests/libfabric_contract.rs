//! The fabric contract on the libfabric backend, with the `tcp;ofi_rxm` and `shm`
//! providers (both run on any Linux machine), two endpoints in one process.
#![cfg(feature = "libfabric")]

use std::time::{Duration, Instant};

mod libfabric_common;
use libfabric_common::{connected, next_event, DEADLINE, PROVIDERS};

use spindle_transport_rdma::libfabric::LibfabricEndpoint;
use spindle_transport_rdma::{Endpoint, Error, Event, FabricConfig, FailureReason};

fn open_pair(provider: &str) -> (LibfabricEndpoint, LibfabricEndpoint) {
    let a = LibfabricEndpoint::open(1, provider, FabricConfig::default())
        .unwrap_or_else(|err| panic!("opening {provider}: {err}"));
    let b = LibfabricEndpoint::open(2, provider, FabricConfig::default()).unwrap();
    (a, b)
}

#[test]
fn writes_are_fifo_and_guarded_on_every_provider() {
    for provider in PROVIDERS {
        let (a, b) = open_pair(provider);
        let row = b.register_region(7, 4096).unwrap();
        connected(&a, &b);
        // The region registered before connecting is known once connected.
        assert_eq!(
            a.remote_region(2, 7).map(|d| d.len),
            Some(4096),
            "{provider}"
        );
        // Rounds of payload-then-guard: round r writes eight words of value r into slot
        // r % SLOTS, then guard r. An owner that sees guard g finds every word of slot
        // g % SLOTS at g or later (a later round may reuse the slot, an earlier never), and
        // no word torn.
        const SLOTS: u64 = 32;
        let rounds: u64 = 300;
        let reader = {
            let row = row.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut seen = 0;
                while seen < rounds {
                    let guard = row.load_u64(0);
                    assert!(guard >= seen, "guard went back from {seen} to {guard}");
                    if guard > seen {
                        let slot = 8 + (guard % SLOTS) as usize * 64;
                        for word in 0..8 {
                            let value = row.load_u64(slot + word * 8);
                            assert!(
                                value >= guard,
                                "guard {guard} visible before its payload ({value})"
                            );
                            assert!(value <= rounds, "torn or foreign word {value:#x}");
                        }
                        seen = guard;
                    }
                    assert!(start.elapsed() < DEADLINE, "guard stuck at {seen}");
                    std::hint::spin_loop();
                }
                seen
            })
        };
        for round in 1..=rounds {
            let payload: Vec<u8> = (0..8).flat_map(|_| round.to_ne_bytes()).collect();
            let slot = 8 + (round % SLOTS) as usize * 64;
            loop {
                match a.write_then_release(2, 7, slot, &payload, 0, round) {
                    Ok(()) => break,
                    Err(Error::QueueFull { .. }) => {
                        a.wait(Duration::from_millis(10));
                    }
                    Err(err) => panic!("{provider}: {err}"),
                }
            }
        }
        assert_eq!(reader.join().unwrap(), rounds, "{provider}");
        // A large write (split into chunks) lands whole, and a later send sees it.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let region = b.register_region(8, 300_000).unwrap();
        next_event(
            &a,
            "RegionAnnounced",
            |e| matches!(e, Event::RegionAnnounced { region, .. } if region.region == 8),
        );
        a.write(2, 8, 3, &big).unwrap();
        a.send(2, 42, b"after the write").unwrap();
        let event = next_event(&b, "Recv", |e| matches!(e, Event::Recv { .. }));
        assert_eq!(
            event,
            Event::Recv {
                peer: 1,
                imm: 42,
                data: b"after the write".to_vec()
            },
            "{provider}"
        );
        assert_eq!(
            region.to_vec(3, big.len()).unwrap(),
            big,
            "{provider}: write before send"
        );
        a.close();
        b.close();
    }
}

#[test]
fn sends_keep_order_and_size_and_bounds_are_errors() {
    for provider in PROVIDERS {
        let (a, b) = open_pair(provider);
        connected(&b, &a); // b dials this time
        let sizes = [0usize, 1, 100, 65_536, 70_000, 1 << 20];
        for (i, &size) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|j| (j * 7 + i) as u8).collect();
            a.send(2, i as u32, &data).unwrap();
        }
        for (i, &size) in sizes.iter().enumerate() {
            let event = next_event(&b, "Recv", |e| matches!(e, Event::Recv { .. }));
            let Event::Recv { peer, imm, data } = event else {
                unreachable!()
            };
            assert_eq!((peer, imm, data.len()), (1, i as u32, size), "{provider}");
            assert!(
                data.iter()
                    .enumerate()
                    .all(|(j, &x)| x == (j * 7 + i) as u8),
                "{provider}"
            );
        }
        b.register_region(3, 16).unwrap();
        next_event(&a, "RegionAnnounced", |e| {
            matches!(e, Event::RegionAnnounced { .. })
        });
        assert!(matches!(
            a.write(2, 3, 9, &[0; 8]),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            a.write(2, 4, 0, &[0; 8]),
            Err(Error::UnknownRegion { .. })
        ));
        assert!(matches!(
            a.write(3, 3, 0, &[0; 8]),
            Err(Error::NotConnected { .. })
        ));
        assert!(matches!(
            a.write_then_release(2, 3, 0, &[1], 4, 1),
            Err(Error::Misaligned { .. })
        ));
        assert!(matches!(
            a.send(2, 0, &vec![0; (16 << 20) + 1]),
            Err(Error::TooLarge { .. })
        ));
        b.deregister_region(3).unwrap();
        next_event(&a, "RegionWithdrawn", |e| {
            matches!(e, Event::RegionWithdrawn { peer: 2, region: 3 })
        });
        assert!(matches!(
            a.write(2, 3, 0, &[0; 8]),
            Err(Error::UnknownRegion { .. })
        ));
        a.close();
        b.close();
    }
}

#[test]
fn failures_surface_as_events() {
    for provider in PROVIDERS {
        // Graceful: disconnect gives the peer Closed.
        let (a, b) = open_pair(provider);
        connected(&a, &b);
        a.disconnect(2).unwrap();
        next_event(&b, "PeerFailed", |e| {
            *e == Event::PeerFailed {
                peer: 1,
                reason: FailureReason::Closed,
            }
        });
        assert!(b.peers().is_empty());
        next_event(&a, "PeerFailed", |e| {
            *e == Event::PeerFailed {
                peer: 2,
                reason: FailureReason::LocalClose,
            }
        });
        assert!(matches!(
            a.write(2, 0, 0, &[0; 8]),
            Err(Error::NotConnected { .. })
        ));
        // The same pair links again after a failure, and the new link carries writes.
        let row = a.register_region(4, 8).unwrap();
        b.connect(1, &a.address()).unwrap();
        next_event(&b, "PeerConnected", |e| {
            *e == Event::PeerConnected { peer: 1 }
        });
        next_event(&a, "PeerConnected", |e| {
            *e == Event::PeerConnected { peer: 2 }
        });
        b.write(1, 4, 0, &9u64.to_ne_bytes()).unwrap();
        let start = Instant::now();
        while row.load_u64(0) != 9 {
            assert!(
                start.elapsed() < DEADLINE,
                "{provider}: write on the new link never landed"
            );
            a.wait(Duration::from_millis(10));
        }
        // Dropping an endpoint (its process gone) is seen by the other side.
        let c = LibfabricEndpoint::open(3, provider, FabricConfig::default()).unwrap();
        connected(&b, &c);
        drop(c);
        let event = next_event(&b, "PeerFailed", |e| {
            matches!(e, Event::PeerFailed { peer: 3, .. })
        });
        assert!(matches!(event, Event::PeerFailed { peer: 3, .. }));
        // A peer address nobody listens on fails the dial, reported as an event.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        b.connect(9, &addr).unwrap();
        next_event(&b, "PeerFailed", |e| {
            matches!(
                e,
                Event::PeerFailed {
                    peer: 9,
                    reason: FailureReason::ConnectionLost(_)
                }
            )
        });
        a.close();
        b.close();
    }
}

#[test]
fn simultaneous_connects_make_one_link() {
    for provider in PROVIDERS {
        let (a, b) = open_pair(provider);
        a.connect(2, &b.address()).unwrap();
        b.connect(1, &a.address()).unwrap();
        next_event(&a, "PeerConnected", |e| {
            *e == Event::PeerConnected { peer: 2 }
        });
        next_event(&b, "PeerConnected", |e| {
            *e == Event::PeerConnected { peer: 1 }
        });
        let row = a.register_region(1, 8).unwrap();
        next_event(&b, "RegionAnnounced", |e| {
            matches!(e, Event::RegionAnnounced { .. })
        });
        b.write(1, 1, 0, &5u64.to_ne_bytes()).unwrap();
        let start = Instant::now();
        while row.load_u64(0) != 5 {
            assert!(start.elapsed() < DEADLINE, "{provider}: write never landed");
            a.wait(Duration::from_millis(10));
        }
        assert_eq!(a.peers(), vec![2]);
        assert_eq!(b.peers(), vec![1]);
        a.close();
        b.close();
    }
}

#[test]
fn a_side_channel_without_the_domain_secret_is_refused() {
    use spindle_transport_rdma::DomainSecret;
    let with = |s: &[u8]| FabricConfig {
        domain_secret: Some(DomainSecret::new(s).unwrap()),
        ..FabricConfig::default()
    };
    let provider = "tcp;ofi_rxm";
    let b = LibfabricEndpoint::open(12, provider, with(b"the domain's side secret")).unwrap();
    b.register_region(7, 64).unwrap();
    for (node, cfg) in [
        (11, with(b"somebody else's secret")),
        (13, FabricConfig::default()),
    ] {
        let a = LibfabricEndpoint::open(node, provider, cfg).unwrap();
        a.connect(b.node(), &b.address()).unwrap();
        let failed = next_event(&a, "the refused dial's failure", |e| {
            matches!(e, Event::PeerFailed { peer: 12, .. })
        });
        assert!(
            matches!(
                failed,
                Event::PeerFailed {
                    reason: FailureReason::ConnectionLost(_),
                    ..
                }
            ),
            "{failed:?}"
        );
        assert_eq!(
            a.remote_region(12, 7),
            None,
            "no region reached an outsider"
        );
    }
    assert_eq!(b.poll_event(), None, "the member never saw the outsiders");
    // A peer with the secret links.
    let a = LibfabricEndpoint::open(14, provider, with(b"the domain's side secret")).unwrap();
    connected(&a, &b);
    assert_eq!(a.remote_region(12, 7).map(|d| d.len), Some(64));
}
