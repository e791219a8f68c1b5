//! Bytes a peer writes are input from outside, also after they were checked: a sender
//! that rewrites an announcement slot (Derecho §3.6: [`RDMC_LEN`], RDMC sequence number,
//! size) after it was received, before it is delivered, must get a clear
//! `PeerMisbehaved` and a stopped subgroup at the receiver — never a panic on its
//! predicate thread, nor a message delivered from the rewritten words. Over the
//! deterministic sim fabric, several seeds: node 1 sends, nodes 2 and 3 receive; node 3
//! is held back, so node 2 has received the message but cannot deliver it (not stable)
//! while the test rewrites node 2's copy of node 1's slot.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use spindle_group::layout::{rdmc_region_id, sst_region_id, Geometry, RDMC_LEN};
use spindle_group::rdmc::{RdmcConfig, ScheduleKind};
use spindle_group::testkit::{engine_cluster_seeing_regions, EngineNode, SimCluster};
use spindle_group::{DeliveryMode, EngineConfig, EngineEvent, Layout, SubgroupSpec, View};
use spindle_transport_rdma::sim::{SimConfig, SimWorld};
use spindle_transport_rdma::{Endpoint, NodeId, Region, WORD_BYTES};

const SG: u32 = 5;
const SEEDS: std::ops::RangeInclusive<u64> = 1..=6;
const ROUNDS_MAX: usize = 20_000;
const SLOT_PAYLOAD: usize = 64;
const LARGE: usize = 1_000;

fn spec() -> SubgroupSpec {
    SubgroupSpec {
        id: SG,
        members: vec![1, 2, 3],
        senders: vec![1],
        mode: DeliveryMode::Atomic,
        window_slots: 4,
        slot_payload_bytes: SLOT_PAYLOAD,
        rdmc: Some(RdmcConfig {
            block_bytes: 256,
            message_bytes_max: 4096,
            // 1 → 2 → 3: node 2 completes a message without node 3.
            schedule: ScheduleKind::Chain,
            window_messages: 2,
        }),
        delivery_prefix: None,
    }
}

/// Three engines over the sim fabric, with each node's SST region kept (a test writes
/// into node 2's as node 1's one-sided writes would).
struct Cluster {
    seed: u64,
    sim: SimCluster<EngineNode>,
    sst: BTreeMap<NodeId, Region>,
    geom: Geometry,
    events: Vec<(NodeId, EngineEvent)>,
    /// Messages each node delivered: `(sender_seq, payload)`.
    delivered: BTreeMap<NodeId, Vec<(u64, Vec<u8>)>>,
}

impl Cluster {
    fn new(seed: u64) -> Cluster {
        let layout = Layout {
            subgroups: vec![spec()],
        };
        let view = View::new(1, vec![1, 2, 3]);
        let cfg = SimConfig {
            link_delay_min_us: 1,
            link_delay_max_us: 1 + seed % 200,
            ..SimConfig::default()
        };
        let mut sst = BTreeMap::new();
        let sim = engine_cluster_seeing_regions(
            SimWorld::new(seed, cfg),
            &view,
            &layout,
            EngineConfig::default(),
            seed ^ 0x5EED,
            0..100,
            |n, r| {
                if r.id() == sst_region_id(1, 0) {
                    sst.insert(n, r.clone());
                }
            },
        )
        .unwrap_or_else(|e| panic!("seed {seed}: cluster: {e}"));
        Cluster {
            seed,
            sim,
            sst,
            geom: Geometry::new(&spec()).unwrap(),
            events: Vec::new(),
            delivered: BTreeMap::new(),
        }
    }

    /// Steps `nodes` once each, takes their outputs, advances the fabric.
    fn round(&mut self, nodes: &[NodeId]) {
        for &n in nodes {
            self.sim.step_node(n);
            let e = &mut self.sim.nodes.get_mut(&n).expect("node").engine;
            while let Some(ev) = e.poll_event() {
                self.events.push((n, ev));
            }
            while let Some(b) = e.poll_delivery() {
                let log = self.delivered.entry(n).or_default();
                log.extend(b.iter().map(|m| (m.sender_seq, m.payload.to_vec())));
            }
        }
        self.sim.advance();
    }

    fn send(&mut self, len: usize) {
        let seed = self.seed;
        let sender = self.sim.nodes[&1].engine.sender(SG).unwrap();
        sender
            .try_send(&vec![0xA5; len])
            .unwrap_or_else(|e| panic!("seed {seed}: send of {len} bytes: {e}"));
    }

    /// Rounds of nodes 1 and 2 (node 3 held back) until node 2 received `n` messages.
    fn received_at_2(&mut self, n: u64) {
        let seed = self.seed;
        for _ in 0..ROUNDS_MAX {
            if self.sim.nodes[&2].engine.received_num(SG, 0).unwrap() >= n {
                assert!(
                    self.delivered.get(&2).map_or(0, Vec::len) < n as usize,
                    "seed {seed}: node 2 delivered before node 3 received"
                );
                return;
            }
            self.round(&[1, 2]);
        }
        panic!("seed {seed}: node 2 never received message {}", n - 1);
    }

    /// Node 2's copy of word `word` of node 1's slot `k` (0: tag, 1: length, 2 and 3: an
    /// announcement's sequence number and size).
    fn rewrite_at_2(&self, k: u64, word: usize, value: u64) {
        let at = self.geom.slot(0, k) + word * WORD_BYTES;
        self.sst[&2].store_u64(at, value);
    }

    /// Rounds of every node until node 2 reports node 1; checks the report and that node
    /// 2 delivered nothing from the rewritten slot.
    fn expect_report_at_2(&mut self, rewritten: u64) {
        let seed = self.seed;
        for _ in 0..ROUNDS_MAX {
            if self.events.iter().any(|(n, _)| *n == 2) {
                break;
            }
            self.round(&[1, 2, 3]);
        }
        let at_2: Vec<_> = self.events.iter().filter(|(n, _)| *n == 2).collect();
        assert!(
            matches!(
                at_2.as_slice(),
                [(_, EngineEvent::PeerMisbehaved { subgroup: SG, peer: 1, detail })]
                    if detail.contains(&format!("message {rewritten}"))
                        && detail.contains("overwritten")
            ),
            "seed {seed}: expected node 2 to report node 1's message {rewritten}, got {:?}",
            self.events
        );
        let delivered = self.delivered.get(&2).cloned().unwrap_or_default();
        assert!(
            delivered.iter().all(|(seq, _)| *seq < rewritten),
            "seed {seed}: node 2 delivered the rewritten message: {:?}",
            delivered
                .iter()
                .map(|(s, p)| (s, p.len()))
                .collect::<Vec<_>>()
        );
        // The subgroup is stopped at node 2 (its sends would fail), and the engine runs on.
        for _ in 0..10 {
            self.round(&[1, 2, 3]);
        }
    }
}

/// Runs `case` on every seed; a panic (the engine's or a check's) names its seed.
fn every_seed(case: impl Fn(&mut Cluster)) {
    for seed in SEEDS {
        let got = catch_unwind(AssertUnwindSafe(|| {
            let mut c = Cluster::new(seed);
            case(&mut c);
        }));
        if let Err(e) = got {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if msg.starts_with(&format!("seed {seed}:")) {
                panic!("{msg}");
            }
            panic!("seed {seed}: {msg}");
        }
    }
}

#[test]
fn an_announcement_renumbered_after_receipt_is_reported_not_delivered() {
    every_seed(|c| {
        c.send(LARGE);
        c.received_at_2(1);
        // RDMC message 1 now claims to be message 2.
        c.rewrite_at_2(0, 2, 2);
        c.expect_report_at_2(0);
    });
}

#[test]
fn a_small_message_turned_into_an_announcement_after_receipt_is_reported() {
    every_seed(|c| {
        c.send(10);
        c.received_at_2(1);
        // A well-formed announcement of RDMC message 1 where a small message was received.
        c.rewrite_at_2(0, 2, 1);
        c.rewrite_at_2(0, 3, LARGE as u64);
        c.rewrite_at_2(0, 1, RDMC_LEN);
        c.expect_report_at_2(0);
    });
}

#[test]
fn an_announcement_turned_into_a_small_message_after_receipt_is_reported() {
    every_seed(|c| {
        c.send(LARGE);
        c.received_at_2(1);
        // The announcement's length word now says an 8-byte message is in the slot.
        c.rewrite_at_2(0, 1, 8);
        // A later large message, as the sender goes on.
        c.send(LARGE + 1);
        c.expect_report_at_2(0);
    });
}

#[test]
fn an_announcement_resized_after_receipt_is_reported() {
    every_seed(|c| {
        c.send(LARGE);
        c.received_at_2(1);
        // Within the RDMC buffer, but not the size the transfer completed with.
        c.rewrite_at_2(0, 3, 8);
        c.expect_report_at_2(0);
    });
}

/// This node's own ring is memory a peer that maps it (shm) could rewrite: an own
/// announcement renumbered between the commit and the predicate thread's look at it is
/// reported as this node's own misbehaviour (the group then stops this node), not an
/// assertion's panic.
#[test]
fn an_own_announcement_rewritten_before_its_send_is_reported_not_a_panic() {
    every_seed(|c| {
        let seed = c.seed;
        c.send(LARGE);
        // RDMC message 1, in node 1's own slot 0, now claims to be message 7.
        let at = c.geom.slot(0, 0) + 2 * WORD_BYTES;
        c.sst[&1].store_u64(at, 7);
        c.round(&[1]);
        assert!(
            matches!(
                c.events.as_slice(),
                [(1, EngineEvent::PeerMisbehaved { subgroup: SG, peer: 1, detail })]
                    if detail.contains("own slot 0") && detail.contains("overwritten")
            ),
            "seed {seed}: expected node 1 to report its own slot, got {:?}",
            c.events
        );
        for _ in 0..10 {
            c.round(&[1, 2, 3]);
        }
        assert!(
            c.delivered.values().all(Vec::is_empty),
            "seed {seed}: the rewritten message was delivered"
        );
    });
}

/// A member writes only its own row and ring (Derecho's SST rule): over a fabric that
/// applies its peers' writes (the simulator here, tcp for real), node 2's write into node
/// 3's copy of node 1's ring lands nowhere, node 3 loses its link to node 2 (the engine
/// reports it failed), and node 3 runs on.
#[test]
fn a_write_into_another_members_ring_fails_the_writers_link() {
    every_seed(|c| {
        let seed = c.seed;
        let at = c.geom.slot(0, 1) + 2 * WORD_BYTES;
        let before = c.sst[&3].load_u64(at);
        c.sim.nodes[&2]
            .ep
            .write(3, sst_region_id(1, 0), at, &99u64.to_le_bytes())
            .unwrap_or_else(|e| panic!("seed {seed}: the stray write: {e}"));
        for _ in 0..ROUNDS_MAX {
            if c.events.iter().any(|(n, _)| *n == 3) {
                break;
            }
            c.round(&[1, 2, 3]);
        }
        assert!(
            c.events
                .iter()
                .any(|(n, e)| *n == 3 && matches!(e, EngineEvent::Wedged { peer: 2, .. })),
            "seed {seed}: expected node 3 to see node 2 fail, got {:?}",
            c.events
        );
        assert_eq!(
            c.sst[&3].load_u64(at),
            before,
            "seed {seed}: the stray write landed"
        );
        for _ in 0..10 {
            c.round(&[1, 2, 3]);
        }
    });
}

/// An RDMC region takes writes from the members of its transfer only: node 4, in the
/// view but not in the subgroup, writing into node 2's copy of node 1's RDMC region loses
/// its link to node 2 (the simulator applies writes as tcp does), and nothing lands.
#[test]
fn a_node_outside_the_subgroup_may_not_write_its_rdmc_region() {
    for seed in SEEDS {
        let layout = Layout {
            subgroups: vec![spec()],
        };
        let view = View::new(1, vec![1, 2, 3, 4]);
        let rdmc = rdmc_region_id(1, 0);
        let mut at_2 = None;
        let mut sim = engine_cluster_seeing_regions(
            SimWorld::new(seed, SimConfig::default()),
            &view,
            &layout,
            EngineConfig::default(),
            seed,
            0..100,
            |n, r| {
                if n == 2 && r.id() == rdmc {
                    at_2 = Some(r.clone());
                }
            },
        )
        .unwrap_or_else(|e| panic!("seed {seed}: cluster: {e}"));
        let region = at_2.unwrap_or_else(|| panic!("seed {seed}: node 2 has no RDMC region"));
        let ep4 = sim.nodes[&4].ep.clone();
        for _ in 0..ROUNDS_MAX {
            if ep4.remote_region(2, rdmc).is_some() {
                break;
            }
            sim.round();
        }
        let last = region.len() - WORD_BYTES;
        ep4.write(2, rdmc, last, &77u64.to_le_bytes())
            .unwrap_or_else(|e| panic!("seed {seed}: the stray write: {e}"));
        let mut lost = false;
        for _ in 0..ROUNDS_MAX {
            for &n in &[1, 2, 3] {
                sim.step_node(n);
            }
            sim.advance();
            // Node 4 is not stepped: its fabric events stay for the test to read.
            while let Some(e) = ep4.poll_event() {
                lost |= matches!(e, spindle_transport_rdma::Event::PeerFailed { peer: 2, .. });
            }
            if lost {
                break;
            }
        }
        assert!(lost, "seed {seed}: node 4 kept its link to node 2");
        assert_eq!(
            region.load_u64(last),
            0,
            "seed {seed}: the stray write landed"
        );
    }
}
