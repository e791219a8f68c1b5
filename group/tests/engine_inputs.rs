//! Bytes a peer writes into our SST are input from outside: a broken or hostile row or
//! ring must give a clear event and a stopped subgroup, never a panic.

mod common;

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_group::layout::{Geometry, SLOT_HEADER_BYTES};
use spindle_group::{DeliveryMode, Engine, EngineEvent, Error, Layout, SubgroupSpec};
use spindle_transport_rdma::Region;

const WINDOW: usize = 4;
const PAYLOAD: usize = 32;

fn spec() -> SubgroupSpec {
    SubgroupSpec {
        id: 5,
        members: vec![1, 2],
        senders: vec![1, 2],
        mode: DeliveryMode::Atomic,
        window_slots: WINDOW,
        slot_payload_bytes: PAYLOAD,
        rdmc: None,
        delivery_prefix: None,
    }
}

/// Two engines whose "fabric" copies pushes straight into the peer's region.
struct Pair {
    engines: BTreeMap<u32, Engine>,
    regions: BTreeMap<u32, Region>,
    geom: Geometry,
}

impl Pair {
    fn new() -> Pair {
        let layout = Layout {
            subgroups: vec![spec()],
        };
        let (engines, regions) = common::heap_engines(&[1, 2], &layout);
        Pair {
            engines,
            regions,
            geom: Geometry::new(&spec()).unwrap(),
        }
    }

    fn round(&mut self) -> Vec<(u32, EngineEvent)> {
        let mut events = Vec::new();
        for (n, e) in &mut self.engines {
            e.step();
            let regions = &self.regions;
            e.drain_pushes(|p, bytes| p.apply(&regions[&p.peer], bytes));
            while e.poll_delivery().is_some() {}
            while let Some(ev) = e.poll_event() {
                events.push((*n, ev));
            }
        }
        events
    }

    /// Node 2's copy of node 1's ring.
    fn ring_of_1_at_2(&self) -> (&Region, usize) {
        (&self.regions[&2], self.geom.ring(0))
    }
}

fn expect_misbehaved(events: &[(u32, EngineEvent)], what: &str) {
    assert!(
        events.iter().any(|(n, e)| *n == 2
            && matches!(e, EngineEvent::PeerMisbehaved { peer: 1, subgroup: 5, detail } if detail.contains(what))),
        "expected node 2 to report node 1 ({what}), got {events:?}"
    );
}

#[test]
fn a_slot_out_of_sequence_stops_the_subgroup() {
    let mut p = Pair::new();
    let (r, ring) = p.ring_of_1_at_2();
    let slot = p.geom.slot(0, 0);
    r.store_u64(slot, 7); // the tag of message 0 must be 1
    r.store_u64(ring, 1);
    let events = p.round();
    expect_misbehaved(&events, "tagged 7");
    // The subgroup is stopped at node 2: its sends fail with a clear error.
    let sender = p.engines[&2].sender(5).unwrap();
    assert!(matches!(sender.try_send(b"x"), Err(Error::Wedged { .. })));
}

#[test]
fn a_length_beyond_the_slot_stops_the_subgroup() {
    let mut p = Pair::new();
    let (r, ring) = p.ring_of_1_at_2();
    let slot = p.geom.slot(0, 0);
    r.store_u64(slot + 8, 1 << 40);
    r.store_u64(slot, 1);
    r.store_u64(ring, 1);
    expect_misbehaved(&p.round(), "claims");
}

#[test]
fn a_sender_running_past_the_window_stops_the_subgroup() {
    let mut p = Pair::new();
    let (r, ring) = p.ring_of_1_at_2();
    r.store_u64(ring, WINDOW as u64 + 3);
    expect_misbehaved(&p.round(), "window");
}

#[test]
fn random_bytes_in_peer_rows_never_panic() {
    for seed in 0..200u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut p = Pair::new();
        // A little honest traffic first.
        for n in [1, 2] {
            let s = p.engines[&n].sender(5).unwrap();
            let _ = s.try_send(&[n as u8; 10]);
        }
        p.round();
        // Then node 1's row and ring in node 2's memory are overwritten at random: words
        // that look like counters, tags and lengths, small and huge.
        let r = p.regions[&2].clone();
        for _ in 0..rng.gen_range(1..20) {
            let word = match rng.gen_range(0..3) {
                0 => rng.gen_range(0..8),
                1 => u64::MAX - rng.gen_range(0..4),
                _ => rng.gen(),
            };
            let spots = [
                p.geom.received_num(0, 0),
                p.geom.received_num(0, 1),
                p.geom.delivered_num(0),
                p.geom.ring(0),
                p.geom.slot(0, rng.gen_range(0..WINDOW as u64)),
                p.geom.slot(0, rng.gen_range(0..WINDOW as u64)) + 8,
            ];
            r.store_u64(spots[rng.gen_range(0..spots.len())], word);
            if rng.gen_bool(0.2) {
                let at = p.geom.slot(0, 0) + SLOT_HEADER_BYTES;
                let junk: Vec<u8> = (0..PAYLOAD).map(|_| rng.gen()).collect();
                r.write_bytes(at, &junk).unwrap();
            }
        }
        for _ in 0..10 {
            for n in [1, 2] {
                let s = p.engines[&n].sender(5).unwrap();
                let _ = s.try_send(&[n as u8; 10]);
            }
            // Must not panic; events are allowed.
            p.round();
        }
    }
}
