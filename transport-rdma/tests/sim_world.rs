//! The deterministic simulator: ordering, determinism, faults, bounds; and the shared
//! conformance suite driven through it.

use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::sim::{
    DeliveryKind, Rule, SimConfig, SimEndpoint, SimWorld, Verdict, SIM_IN_FLIGHT_MAX,
};
use spindle_transport_rdma::{Endpoint, Error, Event, FabricConfig, FailureReason, NodeId, Region};

/// Seeds for the many-seed tests.
const SEEDS: std::ops::Range<u64> = 1..41;
/// Step bound for `run_until_idle` in these tests.
const STEPS_MAX: usize = 1_000_000;

fn events(ep: &SimEndpoint) -> Vec<Event> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

fn failed(events: &[Event], peer: NodeId) -> Vec<FailureReason> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::PeerFailed { peer: p, reason } if *p == peer => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// Two linked nodes (1 -> 2), node 2 owning region 1 of `len` bytes; events drained.
fn pair(world: &SimWorld, len: usize) -> (Arc<SimEndpoint>, Arc<SimEndpoint>, Region) {
    let seed = world.seed();
    let a = world.endpoint(1);
    let b = world.endpoint(2);
    let region = b.register_region(1, len).expect("register");
    a.connect(2, &b.address()).expect("connect");
    world.run_until_idle(STEPS_MAX);
    assert_eq!(
        events(&a),
        vec![Event::PeerConnected { peer: 2 }],
        "seed {seed}"
    );
    assert_eq!(
        events(&b),
        vec![Event::PeerConnected { peer: 1 }],
        "seed {seed}"
    );
    assert!(
        a.remote_region(2, 1).is_some(),
        "seed {seed}: region known at connect"
    );
    (a, b, region)
}

fn wide_delays() -> SimConfig {
    SimConfig {
        link_delay_min_us: 1,
        link_delay_max_us: 1_000,
        ..SimConfig::default()
    }
}

#[test]
fn writes_on_a_link_apply_in_issue_order_under_random_delays() {
    for seed in SEEDS {
        let world = SimWorld::new(seed, wide_delays());
        let (a, b, region) = pair(&world, 64);
        // Each write stores its sequence number; applied in order, the word only grows,
        // and the final value is the last one issued.
        let writes = 300u64;
        let mut seen = 0u64;
        for i in 1..=writes {
            a.write(2, 1, 0, &i.to_ne_bytes()).expect("write");
            a.send(2, i as u32, &[]).expect("send");
            // Interleave issue and delivery so writes meet different delays.
            if i % 7 == 0 {
                for _ in 0..5 {
                    world.step();
                    let now = region.load_u64(0);
                    assert!(
                        now >= seen,
                        "seed {seed}: word went back from {seen} to {now}"
                    );
                    seen = now;
                }
            }
        }
        while world.step() {
            let now = region.load_u64(0);
            assert!(
                now >= seen,
                "seed {seed}: word went back from {seen} to {now}"
            );
            seen = now;
        }
        assert_eq!(region.load_u64(0), writes, "seed {seed}: last write wins");
        // Sends come in issue order too, and each after its write.
        let imms: Vec<u32> = events(&b)
            .into_iter()
            .filter_map(|e| match e {
                Event::Recv { imm, .. } => Some(imm),
                _ => None,
            })
            .collect();
        assert_eq!(
            imms,
            (1..=writes as u32).collect::<Vec<_>>(),
            "seed {seed}: send order"
        );
    }
}

/// A small scenario with random delays, returning the trace hash.
fn scenario(seed: u64) -> u64 {
    let world = SimWorld::new(seed, wide_delays());
    let (a, b, _region) = pair(&world, 256);
    let back = a.register_region(9, 64).expect("register");
    world.run_until_idle(STEPS_MAX);
    for i in 0..50u64 {
        a.write(2, 1, (i as usize % 32) * 8, &i.to_ne_bytes())
            .expect("write");
        b.write(1, 9, 0, &i.to_ne_bytes()).expect("write back");
        b.send(1, i as u32, b"x").expect("send");
        if i % 3 == 0 {
            world.step();
        }
    }
    world.run_until_idle(STEPS_MAX);
    assert_eq!(back.load_u64(0), 49, "seed {seed}");
    world.trace_hash()
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    for seed in SEEDS {
        let first = scenario(seed);
        assert_eq!(
            first,
            scenario(seed),
            "seed {seed}: same seed, different trace"
        );
        assert_ne!(
            first,
            scenario(seed + 1000),
            "seed {seed}: different seeds, same trace"
        );
    }
}

#[test]
fn partition_fails_the_links_at_both_ends() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, SimConfig::default());
        let (a, b, _region) = pair(&world, 64);
        let c = world.endpoint(3);
        c.connect(1, &a.address()).expect("connect");
        world.run_until_idle(STEPS_MAX);
        events(&a);
        events(&c);
        world.partition(&[&[1, 3], &[2]]);
        world.run_until_idle(STEPS_MAX);
        let (ea, eb, ec) = (events(&a), events(&b), events(&c));
        assert_eq!(
            failed(&ea, 2).len(),
            1,
            "seed {seed}: a sees b fail once: {ea:?}"
        );
        assert_eq!(
            failed(&eb, 1).len(),
            1,
            "seed {seed}: b sees a fail once: {eb:?}"
        );
        assert!(
            failed(&ea, 3).is_empty() && ec.is_empty(),
            "seed {seed}: same side unharmed"
        );
        assert!(
            matches!(
                a.write(2, 1, 0, &[0; 8]),
                Err(Error::PeerFailed { peer: 2, .. })
            ),
            "seed {seed}: writes across a partition fail"
        );
        assert_eq!(a.peers(), vec![3], "seed {seed}");
    }
}

#[test]
fn drop_link_rule_fails_the_link_at_both_ends_when_traffic_meets_it() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, SimConfig::default());
        let (a, b, region) = pair(&world, 64);
        world.add_rule(Rule {
            from: Some(1),
            to: Some(2),
            kind: Some(DeliveryKind::Send),
            regions: None,
            after_us: 0,
            until_us: u64::MAX,
            verdict: Verdict::DropLink,
        });
        a.write(2, 1, 0, &5u64.to_ne_bytes()).expect("write");
        a.send(2, 1, b"dropped").expect("send");
        a.write(2, 1, 0, &6u64.to_ne_bytes()).expect("write");
        world.run_until_idle(STEPS_MAX);
        let (ea, eb) = (events(&a), events(&b));
        assert_eq!(failed(&ea, 2).len(), 1, "seed {seed}: {ea:?}");
        assert_eq!(failed(&eb, 1).len(), 1, "seed {seed}: {eb:?}");
        assert!(
            !eb.iter().any(|e| matches!(e, Event::Recv { .. })),
            "seed {seed}: the dropped send arrived"
        );
        assert_eq!(
            region.load_u64(0),
            5,
            "seed {seed}: nothing after the drop is applied"
        );
    }
}

fn short_probe() -> SimConfig {
    SimConfig {
        fabric: FabricConfig {
            probe_interval_ms: 1,
            suspect_floor_ms: 10,
            suspect_ceiling_ms: 10,
            ..FabricConfig::default()
        },
        ..SimConfig::default()
    }
}

#[test]
fn pause_past_the_probe_timeout_fails_with_probe_timeout() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, short_probe());
        let (a, b, region) = pair(&world, 64);
        world.pause(2);
        a.write(2, 1, 0, &3u64.to_ne_bytes()).expect("write");
        world.run_for(11_000);
        assert_eq!(
            region.load_u64(0),
            0,
            "seed {seed}: paused node received a write"
        );
        let ea = events(&a);
        assert_eq!(
            failed(&ea, 2),
            vec![FailureReason::ProbeTimeout { silent_ms: 10 }],
            "seed {seed}: {ea:?}"
        );
        world.resume(2);
        world.run_until_idle(STEPS_MAX);
        assert_eq!(
            region.load_u64(0),
            0,
            "seed {seed}: write on a failed link applied"
        );
        let eb = events(&b);
        assert_eq!(
            failed(&eb, 1),
            vec![FailureReason::Excluded { silent_ms: 10 }],
            "seed {seed}: the paused node learns it was excluded: {eb:?}"
        );
    }
}

#[test]
fn short_pause_holds_traffic_without_failure() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, short_probe());
        let (a, b, region) = pair(&world, 64);
        world.pause(2);
        a.write(2, 1, 0, &3u64.to_ne_bytes()).expect("write");
        a.send(2, 4, b"held").expect("send");
        world.run_for(5_000);
        assert_eq!(
            region.load_u64(0),
            0,
            "seed {seed}: paused node received a write"
        );
        assert!(
            events(&b).is_empty(),
            "seed {seed}: paused node received a send"
        );
        world.resume(2);
        world.run_until_idle(STEPS_MAX);
        assert_eq!(
            region.load_u64(0),
            3,
            "seed {seed}: held write applied after resume"
        );
        let eb = events(&b);
        assert_eq!(eb.len(), 1, "seed {seed}: {eb:?}");
        assert!(
            matches!(&eb[0], Event::Recv { imm: 4, .. }),
            "seed {seed}: {eb:?}"
        );
        assert!(
            events(&a).is_empty(),
            "seed {seed}: no failure after a short pause"
        );
    }
}

#[test]
fn crash_is_detected_after_the_delay_and_nothing_from_it_lands_afterwards() {
    for seed in SEEDS.take(10) {
        let cfg = SimConfig {
            failure_detection_us: 5_000,
            ..wide_delays()
        };
        let world = SimWorld::new(seed, cfg);
        let (a, b, _region) = pair(&world, 64);
        let back = a.register_region(2, 64).expect("register");
        world.run_until_idle(STEPS_MAX);
        events(&b);
        for i in 1..=20u64 {
            b.write(1, 2, 0, &i.to_ne_bytes()).expect("write");
        }
        let crashed_at = world.now_us();
        world.crash(2);
        assert!(
            matches!(b.write(1, 2, 0, &[0; 8]), Err(Error::Closed)),
            "seed {seed}"
        );
        world.run_for(4_999);
        assert!(
            failed(&events(&a), 2).is_empty(),
            "seed {seed}: detected too early"
        );
        world.run_until_idle(STEPS_MAX);
        assert!(world.now_us() >= crashed_at + 5_000, "seed {seed}");
        assert_eq!(
            failed(&events(&a), 2),
            vec![FailureReason::Crashed],
            "seed {seed}"
        );
        assert_eq!(
            back.load_u64(0),
            0,
            "seed {seed}: a write from the crashed node landed"
        );
    }
}

#[test]
fn restarted_node_can_be_connected_again() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, SimConfig::default());
        let (a, _b, _region) = pair(&world, 64);
        world.crash(2);
        world.run_until_idle(STEPS_MAX);
        assert_eq!(
            failed(&events(&a), 2),
            vec![FailureReason::Crashed],
            "seed {seed}"
        );
        let b2 = world.restart(2);
        let fresh = b2.register_region(1, 16).expect("fresh region");
        a.connect(2, &b2.address()).expect("reconnect");
        world.run_until_idle(STEPS_MAX);
        assert_eq!(
            events(&a),
            vec![Event::PeerConnected { peer: 2 }],
            "seed {seed}"
        );
        assert_eq!(
            events(&b2),
            vec![Event::PeerConnected { peer: 1 }],
            "seed {seed}"
        );
        assert_eq!(
            a.remote_region(2, 1).map(|d| d.len),
            Some(16),
            "seed {seed}"
        );
        a.write(2, 1, 8, &9u64.to_ne_bytes()).expect("write");
        world.run_until_idle(STEPS_MAX);
        assert_eq!(fresh.load_u64(8), 9, "seed {seed}");
    }
}

#[test]
fn queue_full_at_the_in_flight_bound_and_room_after_delivery() {
    let seed = 7;
    let world = SimWorld::new(seed, SimConfig::default());
    let (a, _b, region) = pair(&world, 64);
    while a.wait(std::time::Duration::ZERO) {}
    for i in 0..SIM_IN_FLIGHT_MAX as u64 {
        a.write(2, 1, 0, &i.to_ne_bytes())
            .unwrap_or_else(|e| panic!("seed {seed}: write {i}: {e}"));
    }
    assert!(
        matches!(a.write(2, 1, 0, &[0; 8]), Err(Error::QueueFull { peer: 2 })),
        "seed {seed}: write past the bound"
    );
    assert!(
        matches!(a.send(2, 0, b""), Err(Error::QueueFull { peer: 2 })),
        "seed {seed}"
    );
    assert!(world.step(), "seed {seed}");
    assert!(
        a.wait(std::time::Duration::ZERO),
        "seed {seed}: drained queue rings the sender"
    );
    a.write(2, 1, 0, &u64::MAX.to_ne_bytes())
        .expect("room after a delivery");
    world.run_until_idle(STEPS_MAX);
    assert_eq!(region.load_u64(0), u64::MAX, "seed {seed}");
}

#[test]
fn addresses_and_self_links_are_checked() {
    let world = SimWorld::new(3, SimConfig::default());
    let a = world.endpoint(1);
    assert_eq!(a.address(), "sim:1");
    assert!(matches!(
        a.connect(2, "tcp:2"),
        Err(Error::BadAddress { .. })
    ));
    assert!(matches!(
        a.connect(2, "sim:3"),
        Err(Error::BadAddress { .. })
    ));
    assert!(matches!(
        a.connect(1, "sim:1"),
        Err(Error::InvalidPeer { .. })
    ));
    // Nobody at node 9: the link fails instead of hanging.
    a.connect(9, "sim:9").expect("connect is queued");
    world.run_until_idle(STEPS_MAX);
    assert_eq!(failed(&events(&a), 9).len(), 1);
    a.close();
    assert!(matches!(a.register_region(1, 8), Err(Error::Closed)));
}

/// The shared conformance suite, driven by stepping the world.
struct Sim {
    world: SimWorld,
}

impl Harness for Sim {
    fn name(&self) -> String {
        format!("sim(seed {})", self.world.seed())
    }
    fn open(&mut self, node: NodeId, _cfg: FabricConfig) -> Arc<dyn Endpoint> {
        self.world.endpoint(node)
    }
    fn progress(&mut self) {
        for _ in 0..16 {
            if !self.world.step() {
                break;
            }
        }
    }
    fn concurrent(&self) -> bool {
        false
    }
    fn crash(&mut self, node: NodeId) -> bool {
        self.world.crash(node);
        true
    }
}

#[test]
fn conformance_suite_passes_on_the_simulator() {
    for seed in [1, 2] {
        conformance::run_all(&mut Sim {
            world: SimWorld::new(seed, wide_delays()),
        });
    }
}

#[test]
fn delay_rule_postpones_deliveries_and_keeps_the_link_fifo() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, SimConfig::default());
        let (a, _b, region) = pair(&world, 64);
        let start = world.now_us();
        world.add_rule(Rule {
            from: Some(1),
            to: Some(2),
            kind: Some(DeliveryKind::Write),
            regions: None,
            after_us: start,
            until_us: start + 1,
            verdict: Verdict::Delay(100_000),
        });
        a.write(2, 1, 0, &1u64.to_ne_bytes())
            .expect("delayed write");
        world.run_for(1);
        // The rule has expired, but the next write still queues behind the delayed one.
        a.write(2, 1, 0, &2u64.to_ne_bytes()).expect("later write");
        world.run_for(99_000);
        assert_eq!(
            region.load_u64(0),
            0,
            "seed {seed}: delayed write applied early"
        );
        world.run_until_idle(STEPS_MAX);
        assert_eq!(
            region.load_u64(0),
            2,
            "seed {seed}: the later write must land last"
        );
        assert!(world.now_us() >= start + 100_000, "seed {seed}");
    }
}

#[test]
fn world_and_endpoints_are_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<SimWorld>();
    shareable::<SimEndpoint>();
    // A clone drives the same world.
    let world = SimWorld::new(5, SimConfig::default());
    let other = world.clone();
    let (a, _b, region) = pair(&world, 8);
    a.write(2, 1, 0, &4u64.to_ne_bytes()).expect("write");
    std::thread::spawn(move || other.run_until_idle(STEPS_MAX))
        .join()
        .expect("stepping thread");
    assert_eq!(region.load_u64(0), 4);
}

/// `Verdict::Lag` takes a delivery out of the link's FIFO order: a send issued after a
/// lagged announcement lands first (shm: announcements on a socket beside writes that
/// are memory copies); without the rule the announcement lands first.
#[test]
fn lag_rule_lets_later_deliveries_overtake_an_announcement() {
    for seed in SEEDS.take(10) {
        for lagged in [false, true] {
            let world = SimWorld::new(seed, SimConfig::default());
            let (a, b, _region) = pair(&world, 64);
            if lagged {
                world.add_rule(Rule {
                    from: Some(2),
                    to: Some(1),
                    kind: Some(DeliveryKind::Control),
                    regions: None,
                    after_us: world.now_us(),
                    until_us: u64::MAX,
                    verdict: Verdict::Lag(10_000),
                });
            }
            b.register_region(9, 64).expect("register");
            b.send(1, 7, b"after the announcement").expect("send");
            world.run_until_idle(STEPS_MAX);
            let ea = events(&a);
            let at = |f: &dyn Fn(&Event) -> bool| ea.iter().position(f);
            let recv = at(&|e| matches!(e, Event::Recv { .. })).expect("the send landed");
            let announced = at(&|e| matches!(e, Event::RegionAnnounced { .. }))
                .expect("the announcement landed");
            assert_eq!(
                recv < announced,
                lagged,
                "seed {seed}, lagged {lagged}: events {ea:?}"
            );
            assert!(
                a.remote_region(2, 9).is_some(),
                "seed {seed}: known in the end"
            );
        }
    }
}

/// A rule's `regions` limits it to one-sided writes into those region ids: a write into
/// region 2 (in the range) is held back, one into region 1 and a send on the same link
/// are not; without the range both writes would be held.
#[test]
fn a_region_range_limits_a_rule_to_writes_into_those_regions() {
    for seed in SEEDS.take(10) {
        let world = SimWorld::new(seed, SimConfig::default());
        let (a, b, outside) = pair(&world, 64);
        let inside = b.register_region(2, 64).expect("register");
        world.run_until_idle(STEPS_MAX);
        let _ = events(&a);
        let start = world.now_us();
        world.add_rule(Rule {
            from: Some(1),
            to: Some(2),
            kind: None,
            regions: Some(2..=5),
            after_us: start,
            until_us: u64::MAX,
            verdict: Verdict::Lag(100_000),
        });
        a.write(2, 2, 0, &7u64.to_ne_bytes()).expect("held write");
        a.write(2, 1, 0, &8u64.to_ne_bytes()).expect("free write");
        a.send(2, 3, b"free send").expect("send");
        world.run_for(50_000);
        assert_eq!(
            outside.load_u64(0),
            8,
            "seed {seed}: region 1 is outside the range"
        );
        assert!(
            events(&b).iter().any(|e| matches!(e, Event::Recv { .. })),
            "seed {seed}: a send matches no region range"
        );
        assert_eq!(inside.load_u64(0), 0, "seed {seed}: region 2 is held back");
        world.run_until_idle(STEPS_MAX);
        assert_eq!(inside.load_u64(0), 7, "seed {seed}: and lands in the end");
        assert!(world.now_us() >= start + 100_000, "seed {seed}");
    }
}
