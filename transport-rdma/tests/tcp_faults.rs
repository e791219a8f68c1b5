//! The tcp backend under hostile or broken peers: garbage bytes, crafted out-of-bounds
//! frames, a peer that stops reading, a peer that goes silent. The endpoint must survive,
//! report the right failure, and keep serving its other peers.

mod tcp_common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use spindle_transport_rdma::tcp::{decode_frames, TcpEndpoint};
use spindle_transport_rdma::{Endpoint, Error, Event, FabricConfig, FailureReason};
use tcp_common::*;

/// splitmix64: a seeded generator for the garbage (no extra dependency).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Checks that `a` still serves peer `b` (a write lands).
fn still_works(
    a: &Arc<TcpEndpoint>,
    b: &Arc<TcpEndpoint>,
    region: &spindle_transport_rdma::Region,
    value: u64,
) {
    a.write(b.node(), 1, 0, &value.to_le_bytes()).unwrap();
    wait_until(&**b, "write to a healthy peer", || {
        region.load_u64(0) == value
    });
}

#[test]
fn random_garbage_connections_are_dropped_and_the_endpoint_survives() {
    let seed: u64 = std::env::var("SPINDLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x05ee_d7c9);
    println!("seed {seed} (set SPINDLE_SEED to reproduce)");
    let mut rng = SplitMix(seed);
    let (a, b) = (open(31), open(32));
    let rb = b.register_region(1, 8).unwrap();
    link(&a, &b);
    for round in 0..30u64 {
        let len = (rng.next() % 4096) as usize;
        let mut junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if round % 3 == 0 && junk.len() >= 5 {
            // A plausible header with a huge length.
            junk[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            junk[4] = 4;
        }
        let mut s = std::net::TcpStream::connect(a.address()).unwrap();
        let _ = s.write_all(&junk);
        drop(s);
        still_works(&a, &b, &rb, round + 1);
    }
    // No event was reported for nameless garbage streams.
    assert_eq!(a.poll_event(), None, "seed {seed}");
}

#[test]
fn a_peer_sending_garbage_after_hello_is_failed_as_malformed() {
    let (a, b) = (open(41), open(42));
    let ra = a.register_region(1, 64).unwrap();
    let rb = b.register_region(1, 8).unwrap();
    link(&a, &b);
    let cases: Vec<(u32, Vec<u8>)> = vec![
        // Unknown frame kind.
        (50, vec![0, 0, 0, 0, 200]),
        // Oversize body length.
        (51, {
            let mut f = (u32::MAX).to_le_bytes().to_vec();
            f.push(4);
            f
        }),
        // Write past the end of region 1 (64 bytes).
        (52, write_frame(1, 60, &[1; 8])),
        // Offset overflowing any address.
        (53, write_frame(1, u64::MAX, &[1])),
        // Write to a region that never existed.
        (54, write_frame(77, 0, &[1])),
        // A second Hello.
        (55, hello(55, 41, &[])),
        // WriteRelease with a misaligned guard.
        (56, {
            let mut body = 1u32.to_le_bytes().to_vec();
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend_from_slice(&3u64.to_le_bytes());
            body.extend_from_slice(&9u64.to_le_bytes());
            frame(5, &body)
        }),
        // Probe with a body.
        (57, frame(7, &[1, 2, 3])),
    ];
    for (i, (node, bad)) in cases.into_iter().enumerate() {
        let mut s = raw_peer(&a, node, &[]);
        // A valid write first: it lands, then the garbage.
        s.write_all(&write_frame(1, 8, &(i as u64 + 1).to_le_bytes()))
            .unwrap();
        s.write_all(&bad).unwrap();
        match event_where(&*a, "PeerFailed", |e| matches!(e, Event::PeerFailed { .. })) {
            Event::PeerFailed { peer, reason } => {
                assert_eq!(peer, node);
                assert!(
                    matches!(reason, FailureReason::Malformed(_)),
                    "case {i}: {reason:?}"
                );
            }
            _ => unreachable!(),
        }
        assert_eq!(
            ra.load_u64(8),
            i as u64 + 1,
            "the valid write before the garbage landed"
        );
        assert!(!a.peers().contains(&node));
        still_works(&a, &b, &rb, i as u64 + 100);
    }
}

#[test]
fn a_stalled_peer_fills_only_its_own_queue() {
    let cfg = FabricConfig {
        outbound_bytes_max: spindle_transport_rdma::WRITE_BYTES_MAX,
        ..test_config()
    };
    let a = open_with(61, cfg);
    let b = open(62);
    let rb = b.register_region(1, 1 << 20).unwrap();
    link(&a, &b);
    // Node 63 completes the handshake, keeps sending probes (so it is not silent), and
    // never reads.
    let stalled = raw_peer(&a, 63, &[(1, 1 << 20)]);
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let mut s = stalled.try_clone().unwrap();
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if s.write_all(&probe_frame()).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let chunk = vec![5u8; 1 << 20];
    let mut full = false;
    // Bounded: the socket buffers plus 16 MiB of queue hold far fewer than 1000 MiB.
    for i in 0..1000u64 {
        match a.write(63, 1, 0, &chunk) {
            Ok(()) => {}
            Err(Error::QueueFull { peer }) => {
                assert_eq!(peer, 63);
                full = true;
                break;
            }
            Err(e) => panic!("write {i} to the stalled peer: {e}"),
        }
        // Writes to the healthy peer keep flowing meanwhile.
        a.write_then_release(62, 1, 8, &chunk[..4096], 0, i + 1)
            .unwrap();
    }
    assert!(full, "the stalled peer's queue never filled");
    still_works(&a, &b, &rb, 1 << 40);
    assert!(
        a.peers().contains(&63),
        "stalled but alive peer is still linked"
    );
    stop.store(true, Ordering::Release);
    prober.join().unwrap();
    drop(stalled);
}

#[test]
fn a_silent_peer_is_failed_by_probe_timeout() {
    let cfg = FabricConfig {
        probe_interval_ms: 10,
        suspect_floor_ms: 150,
        suspect_ceiling_ms: 150,
        ..FabricConfig::default()
    };
    let a = open_with(71, cfg);
    let b = open(72);
    let rb = b.register_region(1, 8).unwrap();
    link(&a, &b);
    let silent = raw_peer(&a, 73, &[]);
    match event_where(&*a, "probe timeout", |e| {
        matches!(e, Event::PeerFailed { .. })
    }) {
        Event::PeerFailed { peer, reason } => {
            assert_eq!(peer, 73);
            match reason {
                FailureReason::ProbeTimeout { silent_ms } => assert!(silent_ms >= 150),
                other => panic!("expected a probe time-out, got {other:?}"),
            }
        }
        _ => unreachable!(),
    }
    // The healthy peer (which probes) was not failed.
    still_works(&a, &b, &rb, 9);
    assert_eq!(a.peers(), vec![72]);
    drop(silent);
}

#[test]
fn a_killed_connection_is_reported_lost() {
    let (a, b) = (open(81), open(82));
    link(&a, &b);
    let s = raw_peer(&a, 83, &[]);
    drop(s); // no Goodbye: end of stream
    match event_where(&*a, "lost", |e| matches!(e, Event::PeerFailed { .. })) {
        Event::PeerFailed { peer, reason } => {
            assert_eq!(peer, 83);
            assert!(
                matches!(reason, FailureReason::ConnectionLost(_)),
                "{reason:?}"
            );
        }
        _ => unreachable!(),
    }
    // Connecting to a port nobody listens on reports a failed link, not a hang.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    a.connect(99, &dead_addr).unwrap();
    match event_where(&*a, "connect failure", |e| {
        matches!(e, Event::PeerFailed { .. })
    }) {
        Event::PeerFailed { peer, .. } => assert_eq!(peer, 99),
        _ => unreachable!(),
    }
    assert!(matches!(
        a.connect(81, &b.address()),
        Err(Error::InvalidPeer { .. })
    ));
    assert!(matches!(
        a.connect(5, "not an address"),
        Err(Error::BadAddress { .. })
    ));
}

proptest::proptest! {
    /// Random bytes never panic the frame decoder.
    #[test]
    fn random_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
        let _ = decode_frames(&bytes);
    }

    /// Valid frames with random bytes spliced in never panic it, and a valid prefix
    /// still decodes.
    #[test]
    fn spliced_frames_never_panic(
        junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        at in 0usize..200,
    ) {
        let mut bytes = hello(1, 2, &[(1, 64)]);
        bytes.extend_from_slice(&write_frame(1, 8, b"abcdefgh"));
        bytes.extend_from_slice(&probe_frame());
        let at = at % (bytes.len() + 1);
        let whole = decode_frames(&bytes[..at]);
        bytes.splice(at..at, junk);
        let n = decode_frames(&bytes);
        // Frames wholly before the splice point still decode.
        proptest::prop_assert!(n >= whole, "{n} frames decoded, {whole} were intact");
    }
}

#[test]
fn a_full_event_queue_pauses_the_peer_without_loss_or_false_timeout() {
    use spindle_transport_rdma::EVENT_QUEUE_MAX;
    let sends = EVENT_QUEUE_MAX as u32 + 5_000;
    let a = open(91);
    // b times peers out quickly: its reader, parked on the full queue, must not count
    // the pause as the peer's silence.
    let b = open_with(
        92,
        FabricConfig {
            probe_interval_ms: 10,
            suspect_floor_ms: 1_000,
            suspect_ceiling_ms: 1_000,
            ..FabricConfig::default()
        },
    );
    link(&a, &b);
    let sender = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            for i in 0..sends {
                loop {
                    match a.send(92, i, &i.to_le_bytes()) {
                        Ok(()) => break,
                        Err(Error::QueueFull { .. }) => {
                            a.wait(Duration::from_millis(5));
                        }
                        Err(e) => panic!("send {i}: {e}"),
                    }
                }
            }
        })
    };
    sender.join().unwrap();
    // Let b sit on a full queue for longer than its probe time-out.
    thread::sleep(Duration::from_millis(2_500));
    for i in 0..sends {
        match next_event(&*b) {
            Event::Recv { peer, imm, data } => {
                assert_eq!((peer, imm), (91, i));
                assert_eq!(data, i.to_le_bytes());
            }
            other => panic!("event {i}: unexpected {other:?}"),
        }
    }
    assert_eq!(b.peers(), vec![91]);
    assert_eq!(a.peers(), vec![92]);
    assert_eq!(a.poll_event(), None);
}

#[test]
fn a_hello_for_another_node_or_a_data_frame_first_is_refused() {
    use std::io::Read;
    let (a, b) = (open(101), open(102));
    let rb = b.register_region(1, 8).unwrap();
    link(&a, &b);
    for first in [
        hello(103, 999, &[]), // meant for node 999
        hello(101, 101, &[]), // claims our own id
        write_frame(1, 0, &[1; 8]),
        probe_frame(),
    ] {
        let mut s = std::net::TcpStream::connect(a.address()).unwrap();
        s.set_read_timeout(Some(GIVE_UP)).unwrap();
        s.write_all(&first).unwrap();
        // The endpoint closes the stream without replying.
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        assert!(reply.is_empty(), "replied {reply:?} to {first:?}");
    }
    still_works(&a, &b, &rb, 7);
    assert_eq!(a.poll_event(), None);
    assert_eq!(a.peers(), vec![102]);
}
