//! The simulator's bandwidth model (`SimConfig::link_rate_bytes_per_s`), phantom writes
//! and woken nodes, in virtual time: when each write lands is read from the world's clock
//! as it applies it.

use std::sync::Arc;

use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{Endpoint, Event, NodeId, Region};

/// 1 byte per ns: a 1,000,000-byte write takes 1,000 µs of NIC time.
const RATE: u64 = 1_000_000_000;
const MB: usize = 1_000_000;
/// The fixed per-transfer latency (link delay) of these worlds.
const LATENCY_US: u64 = 3;
const STEPS_MAX: usize = 1_000_000;

fn config(rate: Option<u64>) -> SimConfig {
    SimConfig {
        link_delay_min_us: LATENCY_US,
        link_delay_max_us: LATENCY_US,
        link_rate_bytes_per_s: rate,
        ..SimConfig::default()
    }
}

/// Nodes 1..=n, each with region 1 of `len` bytes, linked as `links`; events drained.
fn world(
    seed: u64,
    rate: Option<u64>,
    n: NodeId,
    links: &[(NodeId, NodeId)],
) -> (SimWorld, Vec<Arc<SimEndpoint>>, Vec<Region>) {
    let world = SimWorld::new(seed, config(rate));
    let eps: Vec<_> = (1..=n).map(|i| world.endpoint(i)).collect();
    let regions: Vec<_> = eps
        .iter()
        .map(|e| e.register_region(1, 2 * MB).expect("register"))
        .collect();
    for &(a, b) in links {
        let address = eps[b as usize - 1].address();
        eps[a as usize - 1].connect(b, &address).expect("connect");
    }
    world.run_until_idle(STEPS_MAX);
    for e in &eps {
        while let Some(ev) = e.poll_event() {
            assert!(matches!(ev, Event::PeerConnected { .. }), "{ev:?}");
        }
    }
    (world, eps, regions)
}

/// Steps the world until every `(region, guard value)` shows its guard at offset 0;
/// returns the virtual time (µs after `start`) at which each did.
fn landing_times(world: &SimWorld, watch: &[(&Region, u64)], start: u64) -> Vec<u64> {
    let mut at = vec![None; watch.len()];
    while at.iter().any(Option::is_none) {
        assert!(world.step(), "a write never landed");
        for (i, (region, value)) in watch.iter().enumerate() {
            if at[i].is_none() && region.load_u64(0) == *value {
                at[i] = Some(world.now_us() - start);
            }
        }
    }
    at.into_iter().map(Option::unwrap).collect()
}

#[test]
fn two_writes_from_one_sender_serialize_on_its_nic() {
    let (world, eps, regions) = world(1, Some(RATE), 3, &[(1, 2), (1, 3)]);
    let start = world.now_us();
    let bytes = vec![7u8; MB];
    eps[0].write_then_release(2, 1, 8, &bytes, 0, 1).unwrap();
    eps[0].write_then_release(3, 1, 8, &bytes, 0, 2).unwrap();
    let at = landing_times(&world, &[(&regions[1], 1), (&regions[2], 2)], start);
    assert_eq!(at, vec![1000 + LATENCY_US, 2000 + LATENCY_US]);
    assert_eq!(regions[2].to_vec(8, MB).unwrap(), bytes);
}

#[test]
fn two_senders_to_one_receiver_serialize_on_its_nic() {
    let (world, eps, regions) = world(2, Some(RATE), 3, &[(1, 3), (2, 3)]);
    let start = world.now_us();
    eps[0]
        .write_then_release(3, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    // Node 2's write waits for node 3's receive side; it then lands its own guard.
    let at = landing_times(&world, &[(&regions[2], 1)], start);
    eps[1]
        .write_then_release(3, 1, 16, &vec![2u8; MB / 2], 0, 2)
        .unwrap();
    let later = landing_times(&world, &[(&regions[2], 2)], start);
    assert_eq!(at, vec![1000 + LATENCY_US]);
    // Posted at 1003 µs: the receive side is free from 1000, so it starts when posted.
    assert_eq!(later, vec![1000 + LATENCY_US + 500 + LATENCY_US]);
    // Both posted at once: the second waits for the first on the receiver.
    let start = world.now_us();
    eps[0]
        .write_then_release(3, 1, 8, &vec![1u8; MB], 0, 3)
        .unwrap();
    eps[1]
        .write_then_release(3, 1, 8, &vec![2u8; MB], 0, 4)
        .unwrap();
    let at = landing_times(&world, &[(&regions[2], 3), (&regions[2], 4)], start);
    assert_eq!(at, vec![1000 + LATENCY_US, 2000 + LATENCY_US]);
}

#[test]
fn independent_pairs_overlap_and_a_relay_waits_only_for_its_block() {
    let (world, eps, regions) = world(3, Some(RATE), 4, &[(1, 2), (3, 4), (2, 4)]);
    let start = world.now_us();
    eps[0]
        .write_then_release(2, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    eps[2]
        .write_then_release(4, 1, 8, &vec![3u8; MB], 0, 1)
        .unwrap();
    let at = landing_times(&world, &[(&regions[1], 1), (&regions[3], 1)], start);
    assert_eq!(at, vec![1000 + LATENCY_US, 1000 + LATENCY_US]);
    // Node 2 relays to node 4 as soon as its block landed: both its send side and node
    // 4's receive side are free by then.
    eps[1]
        .write_then_release(4, 1, 8, &vec![2u8; MB], 0, 2)
        .unwrap();
    let at = landing_times(&world, &[(&regions[3], 2)], start);
    assert_eq!(at, vec![2 * (1000 + LATENCY_US)]);
}

/// The receive side is taken when a transfer starts, not when it is posted: node 1 posts
/// to 2 then to 3 at once, so its write to 3 starts at 1,000 µs; node 4's write to 3,
/// posted just after node 1's two, is on node 3's receive side first, from 0.
#[test]
fn a_transfer_queued_behind_others_does_not_hold_its_receiver_before_it_starts() {
    let (world, eps, regions) = world(7, Some(RATE), 4, &[(1, 2), (1, 3), (4, 3)]);
    let start = world.now_us();
    eps[0]
        .write_then_release(2, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    eps[0]
        .write_then_release(3, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    eps[3]
        .write_then_release(3, 1, 8, &vec![4u8; MB], 0, 4)
        .unwrap();
    let at = landing_times(&world, &[(&regions[2], 4), (&regions[2], 1)], start);
    assert_eq!(at, vec![1000 + LATENCY_US, 2000 + LATENCY_US]);
}

#[test]
fn a_phantom_write_takes_its_nic_time_and_lands_only_its_guard() {
    let (world, eps, regions) = world(4, Some(RATE), 2, &[(1, 2)]);
    regions[1].write_bytes(64, &[9u8; 128]).unwrap();
    let start = world.now_us();
    eps[0].write_phantom(2, 1, 64, MB, Some((0, 5))).unwrap();
    eps[0].write_then_release(2, 1, 8, &[1u8; 8], 0, 6).unwrap();
    let at = landing_times(&world, &[(&regions[1], 5)], start);
    assert_eq!(at, vec![1000 + LATENCY_US]);
    assert_eq!(regions[1].to_vec(64, 128).unwrap(), vec![9u8; 128]);
    // It is checked like a write.
    assert!(eps[0].write_phantom(2, 1, 2 * MB, 8, None).is_err());
    assert!(eps[0].write_phantom(2, 9, 0, 8, None).is_err());
}

#[test]
fn without_a_rate_a_write_takes_only_its_link_delay() {
    let (world, eps, regions) = world(5, None, 3, &[(1, 2), (1, 3)]);
    let start = world.now_us();
    eps[0]
        .write_then_release(2, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    eps[0]
        .write_then_release(3, 1, 8, &vec![1u8; MB], 0, 1)
        .unwrap();
    let at = landing_times(&world, &[(&regions[1], 1), (&regions[2], 1)], start);
    assert_eq!(at, vec![LATENCY_US, LATENCY_US]);
}

#[test]
fn take_woken_names_each_node_a_landing_reached_once() {
    let (world, eps, _regions) = world(6, Some(RATE), 3, &[(1, 2), (1, 3)]);
    let mut woken = Vec::new();
    world.take_woken(&mut woken); // the set-up's events
    woken.clear();
    eps[0].write(2, 1, 8, &[1u8; 8]).unwrap();
    eps[0].write(2, 1, 16, &[1u8; 8]).unwrap();
    world.run_until_idle(STEPS_MAX);
    world.take_woken(&mut woken);
    assert_eq!(
        woken,
        vec![2],
        "two writes to node 2, nothing to 3 or back to 1"
    );
    woken.clear();
    world.take_woken(&mut woken);
    assert!(woken.is_empty());
    eps[0].send(3, 1, b"x").unwrap();
    world.run_until_idle(STEPS_MAX);
    world.take_woken(&mut woken);
    assert_eq!(woken, vec![3]);
}

#[test]
fn same_seed_same_trace_with_the_model_on() {
    let run = |seed| {
        let (world, eps, _r) = world(seed, Some(RATE), 3, &[(1, 2), (2, 3), (1, 3)]);
        for i in 0..20u64 {
            let len = 1000 * (1 + i as usize % 7);
            eps[(i % 2) as usize]
                .write_then_release(3, 1, 8, &vec![i as u8; len], 0, i)
                .unwrap();
        }
        world.run_until_idle(STEPS_MAX);
        (world.trace_hash(), world.now_us())
    };
    assert_eq!(run(11), run(11));
}
