//! What a push of the send predicate carries: a run of whole slots and the last one up to
//! its message's end, a run ending at a slot whose message leaves `PUSH_GAP_BYTES_MIN` or
//! more of it unused. Small messages in large slots cross the fabric at about their own
//! size, and the receiver still gets every message whole and in order.

mod common;

use spindle_group::layout::{Geometry, SLOT_HEADER_BYTES};
use spindle_group::{DeliveryMode, Layout, SubgroupSpec, PUSH_GAP_BYTES_MIN};
use spindle_transport_rdma::round_up_to_words;

/// Slots far larger than the small messages (the DCPS default slot).
const SLOT_PAYLOAD: usize = 4096;
const SMALL: usize = 100;
/// A message that leaves less than `PUSH_GAP_BYTES_MIN` of its slot unused.
const NEAR_FULL: usize = SLOT_PAYLOAD - 64;

fn spec() -> SubgroupSpec {
    SubgroupSpec {
        id: 3,
        members: vec![1, 2],
        senders: vec![1],
        mode: DeliveryMode::Unordered,
        window_slots: 16,
        slot_payload_bytes: SLOT_PAYLOAD,
        rdmc: None,
        delivery_prefix: None,
    }
}

fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn small_messages_in_large_slots_are_pushed_at_their_size() {
    assert!(
        SLOT_PAYLOAD - round_up_to_words(SMALL) >= PUSH_GAP_BYTES_MIN
            && SLOT_PAYLOAD - round_up_to_words(NEAR_FULL) < PUSH_GAP_BYTES_MIN,
        "the test's sizes straddle the gap bound"
    );
    let layout = Layout {
        subgroups: vec![spec()],
    };
    let geom = Geometry::new(&spec()).unwrap();
    let (mut engines, regions) = common::heap_engines(&[1, 2], &layout);
    // small, small, small, near-full, small: the near-full one runs on into the next.
    let sizes = [SMALL, SMALL, SMALL, NEAR_FULL, SMALL];
    let sender = engines[&1].sender(3).unwrap();
    for (i, len) in sizes.iter().enumerate() {
        sender.try_send(&message(i, *len)).unwrap();
    }
    let e1 = engines.get_mut(&1).unwrap();
    e1.step();
    // The ring's pushes to node 2: those guarded by node 1's ring counter.
    let mut ring_pushes = Vec::new();
    e1.drain_pushes(|p, bytes| {
        if p.guard.is_some_and(|(at, _)| at == geom.ring(0)) {
            ring_pushes.push((p.offset, p.len));
        }
        p.apply(&regions[&p.peer], bytes)
    });
    let used = |len: usize| SLOT_HEADER_BYTES + round_up_to_words(len);
    let expected = vec![
        (geom.slot(0, 0), used(SMALL)),
        (geom.slot(0, 1), used(SMALL)),
        (geom.slot(0, 2), used(SMALL)),
        (geom.slot(0, 3), geom.slot_bytes + used(SMALL)),
    ];
    assert_eq!(
        ring_pushes, expected,
        "one push per small message, the near-full slot's run carrying the next"
    );
    let pushed: usize = ring_pushes.iter().map(|p| p.1).sum();
    assert!(
        pushed < 2 * geom.slot_bytes,
        "{pushed} bytes pushed for five messages, not five slots"
    );
    // Node 2 gets every message whole, in order.
    let e2 = engines.get_mut(&2).unwrap();
    let mut got = Vec::new();
    for _ in 0..8 {
        e2.step();
        while let Some(b) = e2.poll_delivery() {
            got.extend(b.iter().map(|m| m.payload.to_vec()));
        }
    }
    let want: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, len)| message(i, *len))
        .collect();
    assert_eq!(got, want, "node 2 delivers the five messages as sent");
}
