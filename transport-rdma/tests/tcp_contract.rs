//! The tcp backend against the fabric contract, with endpoints as threads of one process:
//! FIFO, untorn words, payload-then-guard, sends ordered with writes, region announcements,
//! simultaneous connects, graceful disconnects.

mod tcp_common;

use std::sync::Arc;
use std::thread;

use spindle_transport_rdma::{Endpoint, Error, Event, FailureReason, RegionDesc};
use tcp_common::*;

#[test]
fn writes_land_in_issue_order() {
    const SLOTS: u64 = 16;
    const WRITES: u64 = 20_000;
    let (a, b) = (open(1), open(2));
    let region = b.register_region(1, 8 * (SLOTS as usize + 1)).unwrap();
    link(&a, &b);
    let writer = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            for i in 1..=WRITES {
                let slot = 8 + 8 * (i % SLOTS) as usize;
                // The data word, then the counter: FIFO means a reader that sees the
                // counter at i sees slot i % SLOTS at i (or a later value of that slot).
                loop {
                    match a.write(2, 1, slot, &i.to_le_bytes()) {
                        Ok(()) => break,
                        Err(Error::QueueFull { .. }) => {
                            a.wait(std::time::Duration::from_millis(1));
                        }
                        Err(e) => panic!("write: {e}"),
                    }
                }
                a.write(2, 1, 0, &i.to_le_bytes())
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        })
    };
    let mut seen = 0;
    wait_until(&*b, "all writes", || {
        let c = region.load_u64(0);
        assert!(c >= seen, "the counter never goes back ({c} after {seen})");
        seen = c;
        if c > 0 {
            let v = region.load_u64(8 + 8 * (c % SLOTS) as usize);
            assert!(
                v >= c && v % SLOTS == c % SLOTS,
                "counter {c} visible but its slot holds {v}: FIFO broken"
            );
        }
        c == WRITES
    });
    writer.join().unwrap();
}

#[test]
fn words_are_never_torn_and_guard_publishes_payload() {
    const WORDS: usize = 512;
    const ROUNDS: u64 = 300;
    let (a, b) = (open(3), open(4));
    let region = b.register_region(9, 8 + 8 * WORDS).unwrap();
    link(&a, &b);
    let writer = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            let mut payload = vec![0u8; 8 * WORDS];
            for k in 1..=ROUNDS {
                // Every byte of every word is (k % 251) + 1 (never 0, the unwritten payload): a reader that sees a word mixing
                // two rounds' bytes saw a torn word.
                let byte = (k % 251) as u8 + 1;
                payload.iter_mut().for_each(|x| *x = byte);
                a.write_then_release(4, 9, 8, &payload, 0, k).unwrap();
            }
        })
    };
    let mut out = vec![0u8; 8 * WORDS];
    wait_until(&*b, "all rounds", || {
        let g = region.load_u64(0);
        region.read_bytes(8, &mut out).unwrap();
        for word in out.chunks_exact(8) {
            assert!(
                word.iter().all(|x| *x == word[0]),
                "torn word {word:?} under guard {g}"
            );
            if g > 0 {
                // Payload written for round >= g: its byte is that of g or a later round.
                assert_ne!(word[0], 0, "guard {g} visible before its payload");
            }
        }
        g == ROUNDS
    });
    assert!(out.iter().all(|x| *x == (ROUNDS % 251) as u8 + 1));
    writer.join().unwrap();
}

#[test]
fn sends_arrive_in_order_after_earlier_writes() {
    let (a, b) = (open(5), open(6));
    let region = b.register_region(2, 64).unwrap();
    link(&a, &b);
    for i in 0..200u32 {
        a.write(6, 2, 8, &u64::from(i).to_le_bytes()).unwrap();
        a.send(6, i, &i.to_le_bytes().repeat(i as usize % 7))
            .unwrap();
    }
    for i in 0..200u32 {
        match next_event(&*b) {
            Event::Recv { peer, imm, data } => {
                assert_eq!((peer, imm), (5, i));
                assert_eq!(data, i.to_le_bytes().repeat(i as usize % 7));
                assert!(
                    region.load_u64(8) >= u64::from(i),
                    "write issued before send {i} not visible at its Recv"
                );
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    // Large send, at the bound; and one over the bound is refused locally.
    let big = vec![7u8; spindle_transport_rdma::SEND_BYTES_MAX];
    a.send(6, 99, &big).unwrap();
    match event_where(&*b, "big send", |e| matches!(e, Event::Recv { .. })) {
        Event::Recv { imm, data, .. } => assert!(imm == 99 && data == big),
        _ => unreachable!(),
    }
    assert!(matches!(
        a.send(6, 1, &vec![0; spindle_transport_rdma::SEND_BYTES_MAX + 1]),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn regions_are_announced_withdrawn_and_checked() {
    let (a, b) = (open(7), open(8));
    b.register_region(1, 16).unwrap();
    link(&a, &b);
    // Known at PeerConnected.
    assert_eq!(
        a.remote_region(8, 1),
        Some(RegionDesc {
            node: 8,
            region: 1,
            len: 16
        })
    );
    let r2 = b.register_region(2, 13).unwrap();
    assert_eq!(r2.len(), 16);
    match event_where(&*a, "announce", |e| {
        matches!(e, Event::RegionAnnounced { .. })
    }) {
        Event::RegionAnnounced { peer, region } => {
            assert_eq!(
                (peer, region),
                (
                    8,
                    RegionDesc {
                        node: 8,
                        region: 2,
                        len: 16
                    }
                )
            )
        }
        _ => unreachable!(),
    }
    assert!(matches!(
        a.write(8, 2, 9, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        a.write(8, 3, 0, &[0; 8]),
        Err(Error::UnknownRegion { .. })
    ));
    assert!(matches!(
        a.write_then_release(8, 2, 0, &[1], 4, 1),
        Err(Error::Misaligned { offset: 4 })
    ));
    assert!(matches!(
        a.write(1234, 2, 0, &[0]),
        Err(Error::NotConnected { .. })
    ));
    assert!(matches!(
        b.register_region(2, 8),
        Err(Error::RegionExists { .. })
    ));
    a.write(8, 2, 0, b"ok").unwrap();
    wait_until(&*b, "write lands", || r2.to_vec(0, 2).unwrap() == b"ok");
    b.deregister_region(2).unwrap();
    // A write racing with the withdrawal is dropped, not treated as malformed.
    let _ = a.write(8, 2, 0, b"no");
    match event_where(&*a, "withdraw", |e| {
        matches!(e, Event::RegionWithdrawn { .. })
    }) {
        Event::RegionWithdrawn { peer, region } => assert_eq!((peer, region), (8, 2)),
        _ => unreachable!(),
    }
    assert!(matches!(
        a.write(8, 2, 0, &[0; 8]),
        Err(Error::UnknownRegion { .. })
    ));
    assert_eq!(
        r2.to_vec(0, 2).unwrap(),
        b"ok",
        "local clone stays readable"
    );
    // The link is still healthy.
    assert_eq!(a.peers(), vec![8]);
}

#[test]
fn simultaneous_connects_leave_exactly_one_link() {
    for round in 0..20u32 {
        let (na, nb) = (100 + 2 * round, 101 + 2 * round);
        let (a, b) = (open(na), open(nb));
        let ra = a.register_region(1, 8).unwrap();
        let rb = b.register_region(1, 8).unwrap();
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let (aa, ba) = (a.address(), b.address());
        let t1 = thread::spawn(move || a2.connect(nb, &ba).unwrap());
        let t2 = thread::spawn(move || b2.connect(na, &aa).unwrap());
        t1.join().unwrap();
        t2.join().unwrap();
        for (ep, peer) in [(&a, nb), (&b, na)] {
            match next_event(&**ep) {
                Event::PeerConnected { peer: p } => assert_eq!(p, peer, "round {round}"),
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        a.write_then_release(nb, 1, 0, &[], 0, u64::from(round) + 1)
            .unwrap();
        b.write_then_release(na, 1, 0, &[], 0, u64::from(round) + 1)
            .unwrap();
        wait_until(&*b, "write a->b", || rb.load_u64(0) == u64::from(round) + 1);
        wait_until(&*a, "write b->a", || ra.load_u64(0) == u64::from(round) + 1);
        // No failure or second connection was reported.
        assert_eq!(a.poll_event(), None, "round {round}");
        assert_eq!(b.poll_event(), None, "round {round}");
        assert_eq!((a.peers(), b.peers()), (vec![nb], vec![na]));
    }
}

#[test]
fn disconnect_and_close_are_reported_as_closed() {
    let (a, b, c) = (open(11), open(12), open(13));
    link(&a, &b);
    link(&a, &c);
    a.disconnect(12).unwrap();
    assert_eq!(
        event_where(&*a, "local close", |e| matches!(
            e,
            Event::PeerFailed { .. }
        )),
        Event::PeerFailed {
            peer: 12,
            reason: FailureReason::LocalClose
        }
    );
    assert_eq!(
        event_where(&*b, "closed", |e| matches!(e, Event::PeerFailed { .. })),
        Event::PeerFailed {
            peer: 11,
            reason: FailureReason::Closed
        }
    );
    assert!(matches!(
        a.write(12, 1, 0, &[]),
        Err(Error::PeerFailed { .. })
    ));
    c.close();
    assert_eq!(
        event_where(&*a, "closed", |e| matches!(e, Event::PeerFailed { .. })),
        Event::PeerFailed {
            peer: 13,
            reason: FailureReason::Closed
        }
    );
    assert!(matches!(c.register_region(1, 8), Err(Error::Closed)));
    // A restarted node 13 can link again.
    let c2 = open(13);
    let r = c2.register_region(5, 8).unwrap();
    link(&a, &c2);
    a.write(13, 5, 0, &[42]).unwrap();
    wait_until(&*c2, "write after restart", || r.load_u64(0) == 42);
}

#[test]
fn large_writes_are_applied_whole() {
    let (a, b) = (open(21), open(22));
    let size = spindle_transport_rdma::WRITE_BYTES_MAX;
    let region = b.register_region(1, size + 8).unwrap();
    link(&a, &b);
    let payload: Vec<u8> = (0..size).map(|i| (i * 7 % 256) as u8).collect();
    for round in 1..=3u64 {
        a.write_then_release(22, 1, 8, &payload, 0, round).unwrap();
    }
    wait_until(&*b, "large writes", || region.load_u64(0) == 3);
    assert!(region.to_vec(8, size).unwrap() == payload);
    assert!(matches!(
        a.write(22, 1, 0, &vec![0; size + 1]),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn a_pair_relinks_right_after_a_disconnect() {
    let (a, b) = (open(201), open(202));
    let rb = b.register_region(1, 8).unwrap();
    let ra = a.register_region(1, 8).unwrap();
    link(&a, &b);
    for round in 1..=10u64 {
        // Alternate who disconnects and who dials again, with no pause in between.
        let (x, y) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        x.disconnect(y.node()).unwrap();
        x.connect(y.node(), &y.address()).unwrap();
        for (ep, peer) in [(x, y.node()), (y, x.node())] {
            event_where(&**ep, "relink", |e| match e {
                Event::PeerConnected { peer: p } => *p == peer,
                Event::PeerFailed { reason, .. } => {
                    assert!(
                        matches!(reason, FailureReason::LocalClose | FailureReason::Closed),
                        "round {round}: node {} saw {reason:?} from {peer}",
                        ep.node()
                    );
                    false
                }
                _ => false,
            });
        }
        a.write(202, 1, 0, &round.to_le_bytes()).unwrap();
        b.write(201, 1, 0, &round.to_le_bytes()).unwrap();
        wait_until(&*b, "write a->b", || rb.load_u64(0) == round);
        wait_until(&*a, "write b->a", || ra.load_u64(0) == round);
    }
}

#[test]
fn a_write_larger_than_a_frame_lands_whole_before_its_guard() {
    // Larger than the link's frame payload (64 KiB), starting off a frame boundary, of a
    // length that is not a whole number of words: the write goes out as several frames.
    const LEN: usize = 200_003;
    const AT: usize = 64 + 8;
    let (a, b) = (open(211), open(212));
    let region = b.register_region(3, AT + LEN + 8).unwrap();
    link(&a, &b);
    for round in 1..=3u64 {
        let payload: Vec<u8> = (0..LEN).map(|i| (i as u64 * 31 + round) as u8).collect();
        a.write_then_release(212, 3, AT, &payload, 0, round)
            .unwrap();
        wait_until(&*b, "guard", || region.load_u64(0) == round);
        assert_eq!(
            region.to_vec(AT, LEN).unwrap(),
            payload,
            "round {round}: the guard was visible before the whole payload"
        );
    }
}
