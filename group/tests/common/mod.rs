//! A deterministic harness: engines of several nodes over one simulated fabric, driven
//! from one thread, with a checker that watches every delivery.

#![allow(dead_code)]

use std::collections::BTreeMap;

use spindle_group::testkit::{engine_cluster, EngineNode, SimCluster};
use spindle_group::{
    DeliveryBatch, DeliveryMode, Engine, EngineConfig, Error, Layout, SubgroupId, SubgroupSpec,
    Techniques, View,
};
use spindle_transport_rdma::sim::{SimConfig, SimWorld};
use spindle_transport_rdma::{NodeId, Region};

/// What one node delivered in one subgroup: `(global_index, sender_rank, sender_seq)`.
pub type Delivered = Vec<(u64, u32, u64)>;

/// A payload that names its message, padded to `len` with a pattern derived from it (so
/// a corrupted or invented message is caught).
pub fn payload(subgroup: SubgroupId, sender: NodeId, seq: u64, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len.max(20));
    p.extend_from_slice(&subgroup.to_le_bytes());
    p.extend_from_slice(&sender.to_le_bytes());
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&(len as u32).to_le_bytes());
    let mut x = (u64::from(subgroup) << 40) ^ (u64::from(sender) << 32) ^ seq;
    while p.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        p.push((x >> 56) as u8);
    }
    p.truncate(len.max(20));
    p
}

/// Message sizes used by the harness: at least the 20-byte name.
pub const PAYLOAD_BYTES_MIN: usize = 20;

pub struct Sim {
    pub seed: u64,
    /// The engines over the sim fabric (the project's one simulation harness); its `rng`
    /// draws the round steps and the tests' traffic.
    pub cluster: SimCluster<EngineNode>,
    pub layout: Layout,
    pub delivered: BTreeMap<(NodeId, SubgroupId), Delivered>,
    /// Messages each (subgroup, sender) has sent: their lengths, by sender seq (nulls
    /// take seqs too, so there are gaps).
    pub sent: BTreeMap<(SubgroupId, NodeId), BTreeMap<u64, usize>>,
    /// Engine events seen (a test that crashes nodes expects them; others panic on one).
    pub events: Vec<(NodeId, spindle_group::EngineEvent)>,
    /// The node whose delivered batches are kept (after the checks) in `held` instead of
    /// dropped, as an application that holds its deliveries.
    pub hold: Option<NodeId>,
    /// The batches kept from `hold`.
    pub held: Vec<DeliveryBatch>,
}

impl Sim {
    pub fn new(seed: u64, nodes: &[NodeId], layout: Layout, techniques: Techniques) -> Sim {
        let cfg = SimConfig {
            link_delay_min_us: 1,
            link_delay_max_us: 1 + seed % 400,
            ..SimConfig::default()
        };
        let cluster = engine_cluster(
            SimWorld::new(seed, cfg),
            &View::new(1, nodes.to_vec()),
            &layout,
            EngineConfig { techniques },
            seed ^ 0x5EED,
            0..200,
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        Sim {
            seed,
            cluster,
            layout,
            delivered: BTreeMap::new(),
            sent: BTreeMap::new(),
            events: Vec::new(),
            hold: None,
            held: Vec::new(),
        }
    }

    /// Node `n`'s engine.
    pub fn engine(&self, n: NodeId) -> &Engine {
        &self.cluster.nodes[&n].engine
    }

    /// True once any node was crashed by the test.
    pub fn any_crashed(&self) -> bool {
        self.cluster.nodes.values().any(|n| n.crashed)
    }

    /// Crashes node `n`: its process is gone; its engine no longer runs.
    pub fn crash(&mut self, n: NodeId) {
        self.cluster.world.crash(n);
        if let Some(node) = self.cluster.nodes.get_mut(&n) {
            node.crashed = true;
        }
    }

    pub fn spec(&self, subgroup: SubgroupId) -> &SubgroupSpec {
        self.layout
            .subgroups
            .iter()
            .find(|s| s.id == subgroup)
            .expect("subgroup in layout")
    }

    /// Tries to send one message of `len` bytes; false if the window is full.
    pub fn send(&mut self, node: NodeId, subgroup: SubgroupId, len: usize) -> bool {
        let seed = self.seed;
        let sender = self.engine(node).sender(subgroup).unwrap();
        if len > sender.payload_bytes_max() {
            // A large message, by RDMC in the same order (the harness is one thread: the
            // next sequence number is known before the send).
            let seq = sender.next_seq();
            let bytes = payload(subgroup, node, seq, len);
            return match sender.try_send(&bytes) {
                Ok(got) => {
                    assert_eq!(got, seq, "seed {seed}: sender seq");
                    self.sent
                        .entry((subgroup, node))
                        .or_default()
                        .insert(seq, bytes.len());
                    true
                }
                Err(Error::WindowFull { .. }) => false,
                Err(Error::Wedged { .. }) if self.any_crashed() => false,
                Err(e) => panic!("seed {seed}: send: {e}"),
            };
        }
        match sender.try_loan() {
            Ok(mut loan) => {
                let seq = loan.seq();
                let bytes = payload(subgroup, node, seq, len);
                loan.write_at(0, &bytes).unwrap();
                assert_eq!(loan.commit(), seq, "seed {seed}: sender seq");
                self.sent
                    .entry((subgroup, node))
                    .or_default()
                    .insert(seq, bytes.len());
                true
            }
            Err(Error::WindowFull { .. }) => false,
            Err(Error::Wedged { .. }) if self.any_crashed() => false,
            Err(e) => panic!("seed {seed}: send: {e}"),
        }
    }

    /// One round: every engine steps and posts its pushes; every delivery is checked; then
    /// the simulated fabric advances by a seeded amount.
    pub fn round(&mut self) -> bool {
        let seed = self.seed;
        let mut work = false;
        for n in self.cluster.live() {
            work |= self.cluster.step_node(n);
            let crashed = self.any_crashed();
            let engine = &mut self.cluster.nodes.get_mut(&n).expect("node").engine;
            let mut events = Vec::new();
            while let Some(e) = engine.poll_event() {
                assert!(
                    crashed,
                    "seed {seed}: node {n}: unexpected engine event {e:?}"
                );
                events.push((n, e));
            }
            let mut batches = Vec::new();
            while let Some(b) = engine.poll_delivery() {
                batches.push(b);
            }
            self.events.extend(events);
            for b in batches {
                for m in b.iter() {
                    self.check_delivery(n, b.subgroup(), m);
                }
                if self.hold == Some(n) {
                    self.held.push(b);
                }
            }
        }
        self.cluster.advance();
        work
    }

    fn check_delivery(
        &mut self,
        node: NodeId,
        subgroup: SubgroupId,
        m: spindle_group::Message<'_>,
    ) {
        let seed = self.seed;
        let spec = self.spec(subgroup).clone();
        let sender = spec.senders[m.sender_rank as usize];
        assert_eq!(m.sender, sender, "seed {seed}: sender id");
        let lens = self.sent.get(&(subgroup, sender));
        let len = lens.and_then(|l| l.get(&m.sender_seq)).unwrap_or_else(|| {
            panic!(
                "seed {seed}: node {node} delivered message {} of {sender} in {subgroup}, \
                 never sent (invented)",
                m.sender_seq
            )
        });
        // A delivery-prefix member is handed the message's first bytes only.
        let cut = spec
            .delivery_prefix
            .as_ref()
            .filter(|p| p.members.contains(&node))
            .map_or(usize::MAX, |p| p.bytes);
        let whole = payload(subgroup, sender, m.sender_seq, *len);
        assert_eq!(
            m.payload,
            &whole[..whole.len().min(cut)],
            "seed {seed}: node {node}: payload of {subgroup}/{sender}/{} corrupted",
            m.sender_seq
        );
        assert_eq!(m.full_len, *len, "seed {seed}: node {node}: full length");
        assert_eq!(
            m.global_index,
            m.sender_seq * spec.senders.len() as u64 + u64::from(m.sender_rank),
            "seed {seed}: global index is round-robin"
        );
        if spec.mode == DeliveryMode::Atomic {
            // Stability: every member has received the message before anyone delivers it.
            for member in &spec.members {
                let r = self
                    .engine(*member)
                    .received_num(subgroup, m.sender_rank as usize)
                    .unwrap();
                assert!(
                    r > m.sender_seq,
                    "seed {seed}: node {node} delivered {subgroup}/{sender}/{} before node \
                     {member} received it",
                    m.sender_seq
                );
            }
        }
        let log = self.delivered.entry((node, subgroup)).or_default();
        if let Some(&(last_g, _, _)) = log.last() {
            if spec.mode == DeliveryMode::Atomic {
                assert!(
                    m.global_index > last_g,
                    "seed {seed}: global order goes back"
                );
            }
        }
        log.push((m.global_index, m.sender_rank, m.sender_seq));
    }

    /// Total messages sent in `subgroup`.
    pub fn sent_in(&self, subgroup: SubgroupId) -> usize {
        self.sent
            .iter()
            .filter(|((s, _), _)| *s == subgroup)
            .map(|(_, v)| v.len())
            .sum()
    }

    /// Rounds until every member delivered everything sent; panics (with the seed) if
    /// that takes more than `rounds_max` rounds.
    pub fn settle(&mut self, rounds_max: usize) {
        for _ in 0..rounds_max {
            self.round();
            if self.all_delivered() {
                return;
            }
        }
        let state: Vec<_> = self.delivered.iter().map(|(k, v)| (*k, v.len())).collect();
        panic!(
            "seed {}: not everything delivered after {rounds_max} rounds: {state:?}",
            self.seed
        );
    }

    pub fn all_delivered(&self) -> bool {
        self.layout.subgroups.iter().all(|spec| {
            let want = self.sent_in(spec.id);
            spec.members
                .iter()
                .all(|m| self.delivered.get(&(*m, spec.id)).map_or(0, |v| v.len()) == want)
        })
    }

    /// The end-of-run checks: one sequence per subgroup (atomic), sender order kept, no
    /// gaps, no duplicates.
    pub fn check_final(&self) {
        let seed = self.seed;
        for spec in &self.layout.subgroups {
            let reference = self.delivered.get(&(spec.members[0], spec.id));
            for m in &spec.members {
                let log = self
                    .delivered
                    .get(&(*m, spec.id))
                    .cloned()
                    .unwrap_or_default();
                if spec.mode == DeliveryMode::Atomic {
                    assert_eq!(
                        Some(&log),
                        reference.or(Some(&Vec::new())),
                        "seed {seed}: node {m} delivered another sequence in subgroup {}",
                        spec.id
                    );
                }
                for (rank, s) in spec.senders.iter().enumerate() {
                    let seqs: Vec<u64> = log
                        .iter()
                        .filter(|(_, r, _)| *r as usize == rank)
                        .map(|(_, _, q)| *q)
                        .collect();
                    let want: Vec<u64> = self
                        .sent
                        .get(&(spec.id, *s))
                        .map(|v| v.keys().copied().collect())
                        .unwrap_or_default();
                    assert_eq!(
                        seqs, want,
                        "seed {seed}: node {m}, subgroup {}: messages of sender {s} out of \
                         order, duplicated or missing",
                        spec.id
                    );
                }
            }
        }
    }

    /// Quiescence: with nobody sending and everything delivered, the engines post no more
    /// writes and send no nulls.
    pub fn check_quiescent(&mut self) {
        let seed = self.seed;
        // Let the last acknowledgements land.
        for _ in 0..50 {
            self.round();
        }
        let before: Vec<_> = self
            .cluster
            .nodes
            .values()
            .map(|n| n.engine.stats())
            .collect();
        for _ in 0..200 {
            self.round();
        }
        let after: Vec<_> = self
            .cluster
            .nodes
            .values()
            .map(|n| n.engine.stats())
            .collect();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(a.pushes, b.pushes, "seed {seed}: writes after quiescence");
            assert_eq!(
                a.nulls_sent, b.nulls_sent,
                "seed {seed}: nulls after quiescence"
            );
        }
    }
}

/// A subgroup of small messages only (no RDMC) whose members are handed whole messages.
pub fn subgroup_spec(
    id: SubgroupId,
    members: Vec<NodeId>,
    senders: Vec<NodeId>,
    mode: DeliveryMode,
    window_slots: usize,
    slot_payload_bytes: usize,
) -> SubgroupSpec {
    SubgroupSpec {
        id,
        members,
        senders,
        mode,
        window_slots,
        slot_payload_bytes,
        rdmc: None,
        delivery_prefix: None,
    }
}

/// Three nodes, three overlapping subgroups: all of {1,2,3} atomic with every member
/// sending; {2,3} atomic with one sender; {1,3} unordered with both sending.
pub fn overlapping_layout(window_slots: usize, slot_payload_bytes: usize) -> Layout {
    let sg = |id, members, senders, mode| {
        subgroup_spec(id, members, senders, mode, window_slots, slot_payload_bytes)
    };
    Layout {
        subgroups: vec![
            sg(10, vec![1, 2, 3], vec![1, 2, 3], DeliveryMode::Atomic),
            sg(20, vec![2, 3], vec![3], DeliveryMode::Atomic),
            sg(30, vec![1, 3], vec![1, 3], DeliveryMode::Unordered),
        ],
    }
}

/// Engines of `nodes` in view 1 of `layout`, each over its own heap region (no fabric):
/// the test moves pushes itself (`Push::apply` into the peer's region). Returns the
/// engines and each node's region, by node. For one subgroup (one region per node).
pub fn heap_engines(
    nodes: &[NodeId],
    layout: &Layout,
) -> (BTreeMap<NodeId, Engine>, BTreeMap<NodeId, Region>) {
    assert_eq!(
        layout.subgroups.len(),
        1,
        "one region per node: one subgroup"
    );
    let view = View::new(1, nodes.to_vec());
    let mut regions = BTreeMap::new();
    let mut engines = BTreeMap::new();
    for &n in nodes {
        let e = Engine::new(
            n,
            view.clone(),
            layout.clone(),
            EngineConfig::default(),
            |id, len| {
                let r = Region::new_heap(id, len)?;
                regions.insert(n, r.clone());
                Ok(r)
            },
        )
        .expect("an engine of a valid layout");
        engines.insert(n, e);
    }
    (engines, regions)
}
