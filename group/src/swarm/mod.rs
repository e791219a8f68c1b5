//! Swarm simulation of whole groups under faults, with a checker of virtual synchrony.
//!
//! A cluster runs several [`Group`]s over one deterministic sim fabric in one thread,
//! each with a small application that sends named messages, keeps the delivered sequence
//! of every subgroup as its state (shipped to joiners by state transfer), and logs what it
//! delivered in which view. A [`Scenario`] (a small builder) schedules faults — crashes,
//! restarts that rejoin, partitions, pauses (a member frozen like a SIGSTOPped process,
//! excluded by the failure detector if the pause outlasts it, told so when it wakes),
//! leaves — over a fabric with seeded delay jitter — at rounds or when a
//! view change is under way; [`run_seed`] draws a random scenario from a seed. Every run
//! has a safety phase under faults and a liveness phase in which the faults heal, crashed
//! nodes restart and rejoin, and the healed group must install one view and deliver
//! everything its surviving senders sent.
//!
//! The [`Checker`] records violations (it never panics): view ids increase; one
//! membership per view id (no split brain); each view holds a majority of the previous
//! one; members that pass from view v to v+1 delivered the same messages in v in every
//! atomic subgroup (virtual synchrony); one total order per atomic subgroup across views
//! (every node's sequence is a prefix of the final one, so nothing past an agreed trim was
//! ever delivered); no duplicates; each sender's order kept; payloads intact.
//!
//! ```
//! use spindle_group::swarm::{run_seed, SwarmConfig};
//! let report = run_seed(7, &SwarmConfig::default());
//! assert!(report.violations.is_empty(), "{:?}", report.violations);
//! assert!(report.liveness_failure.is_none());
//! assert_eq!(report, run_seed(7, &SwarmConfig::default()), "same seed, same run");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{FabricConfig, NodeId};

use crate::engine::{EngineConfig, Techniques};
use crate::error::Error;
use crate::group::{Group, GroupConfig, GroupOutput, LayoutFn};
use crate::layout::{DareSettings, DeliveryMode, Layout, SubgroupId, SubgroupSpec, View};
use crate::rdmc::{RdmcConfig, ScheduleKind};
use crate::runtime::drive;
use crate::testkit::{SimCluster, SimNode};

mod checker;
pub use checker::{Checker, VIOLATIONS_KEPT};

/// Virtual time a round moves the fabric by, at most (µs); the seed picks each step.
pub const ROUND_STEP_US_MAX: u64 = 150;

/// A message's identity: origin node, its incarnation, and the origin's counter.
pub type MsgId = (NodeId, u32, u64);

/// The three subgroups of the swarm's layout.
pub const SG_ALL: SubgroupId = 0;
/// Members of rank 1 and up; the first two send (needs 2 members).
pub const SG_TAIL: SubgroupId = 1;
/// Every member, unordered; the first two send.
pub const SG_UNORDERED: SubgroupId = 2;
/// Every member sends, ordered by DARE ([`DeliveryMode::Dare`], [`SWARM_DARE`]).
pub const SG_DARE: SubgroupId = 3;

/// The swarm's dare subgroup's settings: a short log (its ring wraps within a run) and a
/// small sender window.
pub const SWARM_DARE: DareSettings = DareSettings {
    log_entries: 32,
    sender_window: 8,
    heartbeat_us: 1_000,
    election_timeout_us: 10_000,
};

/// Slot payload of the swarm's subgroups: a message above it is large and goes by RDMC.
pub const SWARM_SLOT_PAYLOAD_BYTES: usize = 96;
/// The largest message of the swarm (its subgroups' RDMC `message_bytes_max`).
pub const SWARM_MESSAGE_BYTES_MAX: usize = 3000;

/// The swarm's RDMC settings for `seed` (schedule, block size and window vary with it).
pub fn swarm_rdmc(seed: u64) -> RdmcConfig {
    let schedule = [
        ScheduleKind::BinomialPipeline,
        ScheduleKind::Chain,
        ScheduleKind::BinomialTree,
        ScheduleKind::Sequential,
    ][(seed % 4) as usize];
    RdmcConfig {
        block_bytes: 256 << (seed / 4 % 3),
        message_bytes_max: SWARM_MESSAGE_BYTES_MAX,
        schedule,
        window_messages: 1 + (seed / 12 % 2) as usize,
    }
}

/// [`swarm_layout_with`] with the default dare settings [`SWARM_DARE`].
pub fn swarm_layout(window_slots: usize, rdmc: Option<RdmcConfig>) -> LayoutFn {
    swarm_layout_with(window_slots, rdmc, SWARM_DARE)
}

/// The swarm's deterministic layout function: [`SG_ALL`] (every member sends, atomic),
/// [`SG_TAIL`] (ranks 1.., the first two send, atomic) and [`SG_UNORDERED`], each with
/// large messages by RDMC when `rdmc` is set, and [`SG_DARE`] (every member sends,
/// ordered by DARE, no large messages); a view of fewer than 3 members is inadequate.
pub fn swarm_layout_with(
    window_slots: usize,
    rdmc: Option<RdmcConfig>,
    dare: DareSettings,
) -> LayoutFn {
    Arc::new(move |view: &View| {
        let m = &view.members;
        if m.len() < 3 {
            return Err(format!(
                "subgroup {SG_TAIL} needs 2 members besides rank 0; view {} has {}",
                view.vid,
                m.len()
            ));
        }
        let sg = |id, members: Vec<NodeId>, senders: Vec<NodeId>, mode| SubgroupSpec {
            id,
            members,
            senders,
            mode,
            window_slots,
            slot_payload_bytes: SWARM_SLOT_PAYLOAD_BYTES,
            rdmc: rdmc.clone(),
            delivery_prefix: None,
        };
        Ok(Layout {
            subgroups: vec![
                sg(SG_ALL, m.clone(), m.clone(), DeliveryMode::Atomic),
                sg(
                    SG_TAIL,
                    m[1..].to_vec(),
                    m[1..3].to_vec(),
                    DeliveryMode::Atomic,
                ),
                sg(
                    SG_UNORDERED,
                    m.clone(),
                    m[..2].to_vec(),
                    DeliveryMode::Unordered,
                ),
                SubgroupSpec {
                    rdmc: None,
                    ..sg(SG_DARE, m.clone(), m.clone(), DeliveryMode::Dare(dare))
                },
            ],
        })
    })
}

/// Rounds between two restarts of stopped nodes in the liveness phase.
pub const LIVENESS_RESTART_ROUNDS: u64 = 4_000;

/// A fault the scenario applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The node's process dies (its fabric endpoint with it).
    Crash(Target),
    /// A crashed or shut-down node starts again as a new incarnation and rejoins.
    Restart(NodeId),
    /// The fabric splits into these sides until [`Fault::Heal`].
    Partition(Vec<Vec<NodeId>>),
    /// Every partition heals.
    Heal,
    /// The node freezes, as a SIGSTOPped process: it does not run and the fabric holds its
    /// traffic, until [`Fault::Resume`].
    Pause(NodeId),
    /// A paused node's traffic flows again.
    Resume(NodeId),
    /// The node leaves the group gracefully.
    Leave(NodeId),
    /// The node declares something new ([`Group::declare`]): a view change that changes
    /// no membership. The liveness phase checks that the final view carries it.
    Declare(NodeId),
    /// The target freezes as with [`Fault::Pause`] and resumes this many rounds later.
    PauseFor(Target, u64),
}

/// Whom a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// This node.
    Node(NodeId),
    /// The leader of the newest view a live node holds (its lowest-ranked member alive).
    Leader,
    /// A node that is joining right now (no fault if none is).
    Joiner,
    /// The node that leads [`SG_DARE`]'s current term, as the live node with the
    /// newest view knows it (no fault if none is known).
    DareLeader,
    /// A member of [`SG_DARE`] that does not lead it: the highest-ranked live one.
    DareFollower,
}

/// When a fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// At this round.
    Round(u64),
    /// At the first round, from this one on, in which some live node is wedged for a view
    /// change.
    ViewChangeFrom(u64),
    /// At the first round, from this one on, in which some node is joining.
    JoiningFrom(u64),
}

/// A scripted run: nodes, faults, and how long each phase lasts.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Seed of the fabric's delays and the applications' sends.
    pub seed: u64,
    /// Initial members (nodes 1..=nodes).
    pub nodes: u32,
    /// The faults, each with its trigger.
    pub faults: Vec<(When, Fault)>,
    /// Rounds of the safety phase (applications send; faults fire).
    pub safety_rounds: u64,
    /// Most rounds the liveness phase may take.
    pub liveness_rounds_max: u64,
    /// Percent chance that a node sends in a round.
    pub send_percent: u32,
    /// Send window of every subgroup.
    pub window_slots: usize,
    /// Percent of sends that are large (above the slot, by RDMC, up to
    /// [`SWARM_MESSAGE_BYTES_MAX`]); 0 runs the subgroups without RDMC.
    pub large_percent: u32,
    /// Whether the liveness phase restarts crashed and shut-down nodes.
    pub restart_in_liveness: bool,
    /// The settings of the dare subgroup [`SG_DARE`].
    pub dare: DareSettings,
    /// Apply every fault even when more than a minority would be impaired (scripted
    /// scenarios that test minority shutdown); random seeds keep a majority.
    pub unbounded_faults: bool,
}

impl Scenario {
    /// A scenario of `nodes` initial members with no faults.
    pub fn new(nodes: u32) -> Scenario {
        Scenario {
            seed: 1,
            nodes,
            faults: Vec::new(),
            safety_rounds: 1_500,
            liveness_rounds_max: 60_000,
            send_percent: 30,
            window_slots: 8,
            large_percent: 0,
            restart_in_liveness: true,
            unbounded_faults: false,
            dare: SWARM_DARE,
        }
    }

    /// Sets the dare subgroup's settings.
    pub fn dare(mut self, settings: DareSettings) -> Scenario {
        self.dare = settings;
        self
    }

    /// Applies every fault even when more than a minority would be impaired.
    pub fn unbounded_faults(mut self) -> Scenario {
        self.unbounded_faults = true;
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Scenario {
        self.seed = seed;
        self
    }

    /// Adds a fault.
    pub fn at(mut self, when: When, fault: Fault) -> Scenario {
        self.faults.push((when, fault));
        self
    }

    /// Sets the safety phase's length.
    pub fn safety_rounds(mut self, rounds: u64) -> Scenario {
        self.safety_rounds = rounds;
        self
    }

    /// Whether the liveness phase restarts crashed and shut-down nodes (default yes).
    pub fn restart_in_liveness(mut self, on: bool) -> Scenario {
        self.restart_in_liveness = on;
        self
    }

    /// Runs the scenario.
    pub fn run(&self) -> Report {
        Cluster::new(self).run()
    }
}

/// Settings of [`run_seed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwarmConfig {
    /// Smallest cluster.
    pub nodes_min: u32,
    /// Largest cluster.
    pub nodes_max: u32,
}

impl Default for SwarmConfig {
    fn default() -> Self {
        SwarmConfig {
            nodes_min: 3,
            nodes_max: 7,
        }
    }
}

/// The scenario `run_seed` draws from `seed`: 3–7 nodes, and a seeded schedule of at
/// most a minority of concurrent faults — crashes (of the leader, of a node mid view
/// change, of a joiner), restarts, a minority partition, a pause, a leave.
pub fn scenario_for_seed(seed: u64, cfg: &SwarmConfig) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5CE7_A210);
    let nodes = rng.gen_range(cfg.nodes_min..=cfg.nodes_max);
    let mut s = Scenario::new(nodes).seed(seed);
    s.send_percent = rng.gen_range(5..60);
    s.window_slots = rng.gen_range(2..=16);
    let minority = (nodes - 1) / 2;
    let faults = rng.gen_range(0..=3);
    let mut round = 100;
    for _ in 0..faults {
        round += rng.gen_range(50..400);
        let node = rng.gen_range(1..=nodes);
        let f = match rng.gen_range(0..8) {
            0 => (When::Round(round), Fault::Crash(Target::Node(node))),
            1 => (When::Round(round), Fault::Crash(Target::Leader)),
            2 => (When::ViewChangeFrom(round), Fault::Crash(Target::Leader)),
            3 => (When::Round(round), Fault::Pause(node)),
            4 => (When::Round(round), Fault::Leave(node)),
            5 if minority > 0 => {
                let k = rng.gen_range(1..=minority);
                let side: Vec<NodeId> = (1..=k).map(|i| (node + i - 1) % nodes + 1).collect();
                let rest: Vec<NodeId> = (1..=nodes).filter(|n| !side.contains(n)).collect();
                (When::Round(round), Fault::Partition(vec![side, rest]))
            }
            6 => (When::JoiningFrom(round), Fault::Crash(Target::Joiner)),
            7 => (When::Round(round), Fault::Declare(node)),
            _ => (When::Round(round), Fault::Crash(Target::Node(node))),
        };
        s = s.at(f.0, f.1);
        if matches!(s.faults.last(), Some((_, Fault::Pause(_)))) {
            s = s.at(
                When::Round(round + rng.gen_range(5..300)),
                Fault::Resume(node),
            );
        }
        if matches!(s.faults.last(), Some((_, Fault::Partition(_)))) {
            s = s.at(When::Round(round + rng.gen_range(50..300)), Fault::Heal);
        }
        if rng.gen_bool(0.5) {
            // A restart during the safety phase: the node rejoins under faults.
            s = s.at(
                When::Round(round + rng.gen_range(20..200)),
                Fault::Restart(node),
            );
        }
    }
    s.safety_rounds = round + 300;
    // Drawn last, so the faults of a seed stay what they were before large messages.
    s.large_percent = [0, 10, 25][rng.gen_range(0..3)];
    s
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Initial members.
    pub nodes: u32,
    /// Safety violations found (empty when the run is correct).
    pub violations: Vec<String>,
    /// Why the liveness phase failed, if it did.
    pub liveness_failure: Option<String>,
    /// Views installed, summed over nodes.
    pub views_installed: u64,
    /// Application messages delivered, summed over nodes.
    pub messages_delivered: u64,
    /// Of those, large ones (by RDMC).
    pub large_delivered: u64,
    /// Of those, in the dare subgroup ([`SG_DARE`]).
    pub dare_delivered: u64,
    /// Every leader of [`SG_DARE`] seen: `(view id, term, leader)`, as its members knew
    /// them round by round (the checker asserts one leader per view and term).
    pub dare_leaders: Vec<(u32, u64, NodeId)>,
    /// Large deliveries in a later view than the one the sender was in when it sent: the
    /// message was cut off by a view change (its RDMC transfer, or its stability, was
    /// incomplete at the trim) and re-sent.
    pub large_later_view: u64,
    /// Faults that fired.
    pub faults_fired: usize,
    /// Every view installed: `(round, node, vid, members)`, in order.
    pub views: Vec<(u64, NodeId, u32, Vec<NodeId>)>,
    /// Every shutdown: `(round, node, why)`.
    pub shutdowns: Vec<(u64, NodeId, String)>,
    /// The shutdowns the group typed as a lost majority ([`crate::Group::lost_majority`]):
    /// `(node, view)`.
    pub lost_majority: Vec<(NodeId, u32)>,
    /// Hash of the fabric trace and of every node's deliveries: equal for equal seeds.
    pub trace_hash: u64,
}

/// Per node: its application and its group.
pub(crate) struct NodeRun {
    id: NodeId,
    incarnation: u32,
    ep: Arc<SimEndpoint>,
    group: Option<Group>,
    /// Per subgroup: the delivered sequence (the state; replaced at state transfer).
    state: BTreeMap<SubgroupId, Vec<MsgId>>,
    /// `(vid, subgroup) -> what was delivered in that view`.
    per_view: BTreeMap<(u32, SubgroupId), Vec<MsgId>>,
    views: Vec<View>,
    /// Per view id: the subgroups this node was a member of.
    subgroups_in: BTreeMap<u32, BTreeSet<SubgroupId>>,
    counter: u64,
    sent: Vec<(SubgroupId, MsgId)>,
    /// What this incarnation declared last.
    declared: Option<Vec<u8>>,
    /// The node's process is gone (crash) or stopped (shutdown / left).
    down: bool,
    crashed: bool,
    left: bool,
    /// Why the group stopped, if it did.
    ended: Option<String>,
    /// Paused like a SIGSTOPped process: it neither runs nor sends, and the fabric holds
    /// its traffic, until resumed.
    frozen: bool,
}

impl NodeRun {
    fn new(id: NodeId, incarnation: u32, ep: Arc<SimEndpoint>, group: Group) -> NodeRun {
        NodeRun {
            id,
            incarnation,
            ep,
            group: Some(group),
            state: BTreeMap::new(),
            declared: None,
            per_view: BTreeMap::new(),
            views: Vec::new(),
            subgroups_in: BTreeMap::new(),
            counter: 0,
            sent: Vec::new(),
            down: false,
            crashed: false,
            left: false,
            ended: None,
            frozen: false,
        }
    }
}

impl SimNode for NodeRun {
    fn is_live(&self) -> bool {
        !self.down
    }

    fn step(&mut self, now_us: u64, _scratch: &mut Vec<u8>) -> bool {
        if self.frozen {
            return false;
        }
        match self.group.as_mut() {
            Some(g) => drive(g, &*self.ep, now_us),
            None => false,
        }
    }
}

/// The cluster of one run. See the module docs.
struct Cluster {
    sc: Scenario,
    /// The fabric, the node runs and the seeded generator of round steps, faults and
    /// traffic: the project's simulation harness.
    sim: SimCluster<NodeRun>,
    cfg: GroupConfig,
    /// Node runs that ended (crashed or shut down), kept for the final checks.
    past: Vec<NodeRun>,
    checker: Checker,
    round: u64,
    fired: Vec<bool>,
    paused: BTreeSet<NodeId>,
    /// Nodes on the smaller sides of the active partition.
    cut_off: BTreeSet<NodeId>,
    /// Nodes asked to leave.
    leaving: BTreeSet<NodeId>,
    delivered_total: u64,
    large_delivered: u64,
    dare_delivered: u64,
    dare_leaders: BTreeSet<(u32, u64, NodeId)>,
    /// Large messages sent, with the view their sender was in.
    large_sent_in: BTreeMap<MsgId, u32>,
    large_later_view: u64,
    delivery_hash: u64,
    /// Print every non-delivery output (set by `SPINDLE_SWARM_DEBUG`).
    debug: bool,
    view_log: Vec<(u64, NodeId, u32, Vec<NodeId>)>,
    shutdown_log: Vec<(u64, NodeId, String)>,
    lost_majority_log: Vec<(NodeId, u32)>,
}

fn payload(id: MsgId, sg: SubgroupId, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&id.0.to_le_bytes());
    p.extend_from_slice(&id.1.to_le_bytes());
    p.extend_from_slice(&id.2.to_le_bytes());
    p.extend_from_slice(&sg.to_le_bytes());
    let mut x = u64::from(id.0) << 40 ^ u64::from(id.1) << 32 ^ id.2 ^ u64::from(sg) << 56;
    while p.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        p.push((x >> 56) as u8);
    }
    p
}

fn parse_payload(p: &[u8]) -> Option<(MsgId, SubgroupId)> {
    if p.len() < 20 {
        return None;
    }
    let u32at = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    let mut c = [0u8; 8];
    c.copy_from_slice(&p[8..16]);
    Some(((u32at(0), u32at(4), u64::from_le_bytes(c)), u32at(16)))
}

fn encode_state(list: &[MsgId]) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.len() * 16);
    for (n, i, c) in list {
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

fn decode_state(b: &[u8]) -> Option<Vec<MsgId>> {
    if b.len() % 16 != 0 {
        return None;
    }
    Some(
        b.chunks_exact(16)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&c[8..16]);
                (
                    u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                    u64::from_le_bytes(w),
                )
            })
            .collect(),
    )
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

impl Cluster {
    fn new(sc: &Scenario) -> Cluster {
        let seed = sc.seed;
        let sim = SimConfig {
            link_delay_min_us: 1,
            link_delay_max_us: 1 + seed % 200,
            failure_detection_us: 2_000,
            // Delay jitter on every other seed: one delivery in a thousand is held up to
            // 2 ms longer (a descheduled sender), below the detector's 20 ms floor.
            delay_spike_per_million: if seed % 2 == 0 { 1_000 } else { 0 },
            delay_spike_max_us: 2_000,
            fabric: FabricConfig {
                probe_interval_ms: 5,
                suspect_floor_ms: 20,
                suspect_ceiling_ms: 20,
                ..FabricConfig::default()
            },
            link_rate_bytes_per_s: None,
        };
        let world = SimWorld::new(seed, sim);
        let techniques = if seed % 3 == 0 {
            Techniques::all().with_batching(false)
        } else {
            Techniques::all()
        };
        let cfg = GroupConfig {
            engine: EngineConfig { techniques },
            layout: swarm_layout_with(
                sc.window_slots,
                (sc.large_percent > 0).then(|| swarm_rdmc(seed)),
                sc.dare,
            ),
            activation_timeout_us: 60_000,
            join_retry_us: 3_000,
            group_id: 0,
            group_label: crate::plain_group_label,
        };
        let ids: Vec<NodeId> = (1..=sc.nodes).collect();
        let view = View::new(1, ids.clone());
        let mut sim = SimCluster::new(world, seed ^ 0xA11CE, 0..ROUND_STEP_US_MAX);
        let groups = crate::testkit::bootstrapped_groups(&sim.world, &view, &cfg)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for (id, ep, group) in groups {
            sim.nodes.insert(id, NodeRun::new(id, 0, ep, group));
        }
        Cluster {
            fired: vec![false; sc.faults.len()],
            sc: sc.clone(),
            sim,
            cfg,
            past: Vec::new(),
            checker: Checker::default(),
            round: 0,
            paused: BTreeSet::new(),
            cut_off: BTreeSet::new(),
            leaving: BTreeSet::new(),
            delivered_total: 0,
            large_delivered: 0,
            dare_delivered: 0,
            dare_leaders: BTreeSet::new(),
            large_sent_in: BTreeMap::new(),
            large_later_view: 0,
            delivery_hash: 0xcbf2_9ce4_8422_2325,
            debug: std::env::var_os("SPINDLE_SWARM_DEBUG").is_some(),
            view_log: Vec::new(),
            shutdown_log: Vec::new(),
            lost_majority_log: Vec::new(),
        }
    }

    fn run(mut self) -> Report {
        let safety = self.sc.safety_rounds;
        while self.round < safety {
            self.faults();
            self.sends();
            self.round_once();
        }
        // Liveness: everything heals; crashed and shut-down nodes restart and rejoin (again
        // every few thousand rounds, as a supervisor would restart a process that stopped).
        self.sim.world.clear_rules();
        self.cut_off.clear();
        for n in std::mem::take(&mut self.paused) {
            self.resume(n);
        }
        let mut liveness_failure = None;
        let mut settled = false;
        for i in 0..self.sc.liveness_rounds_max {
            if self.sc.restart_in_liveness && i % LIVENESS_RESTART_ROUNDS == 0 {
                let down: Vec<NodeId> = self
                    .sim
                    .nodes
                    .values()
                    .filter(|n| n.down)
                    .map(|n| n.id)
                    .collect();
                for id in down {
                    self.restart(id);
                }
            }
            self.round_once();
            if self.round % 64 == 0 && self.settled() {
                settled = true;
                break;
            }
        }
        if !settled {
            liveness_failure = Some(self.liveness_state());
        } else {
            self.final_checks();
        }
        let views_installed = self
            .sim
            .nodes
            .values()
            .chain(&self.past)
            .map(|n| n.views.len() as u64)
            .sum();
        let mut h = self.delivery_hash;
        fnv(&mut h, &self.sim.world.trace_hash().to_le_bytes());
        Report {
            seed: self.sc.seed,
            nodes: self.sc.nodes,
            violations: self.checker.violations,
            liveness_failure,
            views_installed,
            messages_delivered: self.delivered_total,
            large_delivered: self.large_delivered,
            dare_delivered: self.dare_delivered,
            dare_leaders: self.dare_leaders.into_iter().collect(),
            large_later_view: self.large_later_view,
            faults_fired: self.fired.iter().filter(|f| **f).count(),
            views: self.view_log,
            shutdowns: self.shutdown_log,
            lost_majority: self.lost_majority_log,
            trace_hash: h,
        }
    }

    fn live(&self) -> impl Iterator<Item = &NodeRun> {
        self.sim.nodes.values().filter(|n| !n.down)
    }

    fn leader(&self) -> Option<NodeId> {
        let newest = self
            .live()
            .filter_map(|n| n.group.as_ref().and_then(|g| g.view()).cloned())
            .max_by_key(|v| v.vid)?;
        newest
            .members
            .iter()
            .copied()
            .find(|m| self.sim.nodes.get(m).is_some_and(|n| !n.down))
    }

    fn faults(&mut self) {
        for i in 0..self.sc.faults.len() {
            if self.fired[i] {
                continue;
            }
            let (when, fault) = self.sc.faults[i].clone();
            let due = match when {
                When::Round(r) => self.round >= r,
                When::ViewChangeFrom(r) => {
                    self.round >= r
                        && self.live().any(|n| {
                            n.group
                                .as_ref()
                                .and_then(|g| g.engine())
                                .is_some_and(|e| e.is_wedged())
                        })
                }
                When::JoiningFrom(r) => {
                    self.round >= r
                        && self
                            .live()
                            .any(|n| n.group.as_ref().is_some_and(|g| !g.is_active()))
                }
            };
            if !due {
                continue;
            }
            self.fired[i] = true;
            if self.debug {
                eprintln!(
                    "round {} t={}us fault {fault:?}",
                    self.round,
                    self.sim.world.now_us()
                );
            }
            self.apply(fault);
        }
    }

    /// Nodes that are down, paused, cut off or still joining: the faults never impair
    /// more than a minority of the initial members at once (so a majority survives and
    /// the liveness phase can succeed).
    fn impaired(&self) -> BTreeSet<NodeId> {
        self.sim
            .nodes
            .values()
            .filter(|n| {
                n.down
                    || self.paused.contains(&n.id)
                    || self.cut_off.contains(&n.id)
                    || self.leaving.contains(&n.id)
                    || n.group.as_ref().is_some_and(|g| !g.is_active())
            })
            .map(|n| n.id)
            .collect()
    }

    fn within_budget(&self, extra: &[NodeId]) -> bool {
        let mut s = self.impaired();
        s.extend(extra.iter().copied());
        s.len() as u32 <= (self.sc.nodes - 1) / 2
    }

    fn apply(&mut self, fault: Fault) {
        let hits: Vec<NodeId> = match &fault {
            Fault::Crash(Target::Node(n)) | Fault::Pause(n) | Fault::Leave(n) => vec![*n],
            Fault::Crash(t) | Fault::PauseFor(t, _) if *t != Target::Joiner => {
                self.target(*t).into_iter().collect()
            }
            Fault::Partition(sides) => {
                let largest = sides.iter().map(|s| s.len()).max().unwrap_or(0);
                let mut skipped_largest = false;
                let mut hit = Vec::new();
                for s in sides {
                    if s.len() == largest && !skipped_largest {
                        skipped_largest = true;
                    } else {
                        hit.extend(s.iter().copied());
                    }
                }
                hit
            }
            _ => Vec::new(),
        };
        if !self.sc.unbounded_faults && !self.within_budget(&hits) {
            if self.debug {
                eprintln!("round {}: fault skipped (budget)", self.round);
            }
            return;
        }
        match fault {
            Fault::Crash(t) => {
                if let Some(id) = self.target(t) {
                    self.crash(id);
                }
            }
            Fault::PauseFor(t, rounds) => {
                if let Some(id) = self.target(t) {
                    self.apply(Fault::Pause(id));
                    self.sc
                        .faults
                        .push((When::Round(self.round + rounds), Fault::Resume(id)));
                    self.fired.push(false);
                }
            }
            Fault::Restart(id) => {
                if self.sim.nodes.get(&id).is_some_and(|n| n.down) {
                    self.restart(id);
                }
            }
            Fault::Partition(sides) => {
                let refs: Vec<&[NodeId]> = sides.iter().map(|s| s.as_slice()).collect();
                self.sim.world.partition(&refs);
                self.cut_off.extend(hits);
            }
            Fault::Heal => {
                self.sim.world.clear_rules();
                self.cut_off.clear();
            }
            Fault::Pause(id) => {
                if let Some(n) = self.sim.nodes.get_mut(&id).filter(|n| !n.down) {
                    n.frozen = true;
                    self.sim.world.pause(id);
                    self.paused.insert(id);
                }
            }
            Fault::Resume(id) => {
                self.resume(id);
            }
            Fault::Leave(id) => {
                self.leaving.insert(id);
                if let Some(g) = self.sim.nodes.get_mut(&id).and_then(|n| n.group.as_mut()) {
                    g.leave();
                }
            }
            Fault::Declare(id) => {
                let round = self.round;
                if let Some(n) = self.sim.nodes.get_mut(&id) {
                    if let Some(g) = n.group.as_mut() {
                        let d = round.to_le_bytes().to_vec();
                        if g.declare(d.clone()).is_ok() {
                            n.declared = Some(d);
                        }
                    }
                }
            }
        }
    }

    /// A paused node wakes: its traffic flows and it runs again (it may find that the
    /// others excluded it meanwhile).
    fn resume(&mut self, id: NodeId) {
        self.sim.world.resume(id);
        self.paused.remove(&id);
        if let Some(n) = self.sim.nodes.get_mut(&id) {
            n.frozen = false;
        }
    }

    fn crash(&mut self, id: NodeId) {
        if let Some(n) = self.sim.nodes.get_mut(&id) {
            if n.crashed {
                return;
            }
            self.sim.world.crash(id);
            n.down = true;
            n.crashed = true;
            n.group = None;
        }
    }

    fn restart(&mut self, id: NodeId) {
        let Some(old) = self.sim.nodes.remove(&id) else {
            return;
        };
        let incarnation = old.incarnation + 1;
        self.leaving.remove(&id);
        self.past.push(old);
        let ep = self.sim.world.restart(id);
        let contacts: Vec<(NodeId, String)> = (1..=self.sc.nodes)
            .filter(|n| *n != id)
            .map(|n| (n, format!("sim:{n}")))
            .collect();
        let group = Group::join(&*ep, contacts, self.cfg.clone())
            .unwrap_or_else(|e| panic!("seed {}: join {id}: {e}", self.sc.seed));
        self.sim
            .nodes
            .insert(id, NodeRun::new(id, incarnation, ep, group));
    }

    fn sends(&mut self) {
        let pct = self.sc.send_percent;
        let ids: Vec<NodeId> = self.live().map(|n| n.id).collect();
        for id in ids {
            if self.sim.rng.gen_range(0..100) >= pct {
                continue;
            }
            let sg = [SG_ALL, SG_TAIL, SG_UNORDERED, SG_DARE][self.sim.rng.gen_range(0..4)];
            // A dare subgroup carries no large messages.
            let len = if self.sim.rng.gen_range(0..100) < self.sc.large_percent && sg != SG_DARE {
                self.sim
                    .rng
                    .gen_range(SWARM_SLOT_PAYLOAD_BYTES + 1..=SWARM_MESSAGE_BYTES_MAX)
            } else {
                self.sim.rng.gen_range(20..=SWARM_SLOT_PAYLOAD_BYTES)
            };
            let n = self.sim.nodes.get_mut(&id).expect("live node");
            let Some(g) = n.group.as_ref() else {
                continue;
            };
            let sender = match g.sender(sg) {
                Ok(s) => s,
                Err(_) => continue,
            };
            if n.frozen {
                continue;
            }
            let msg: MsgId = (id, n.incarnation, n.counter);
            match sender.try_send(&payload(msg, sg, len)) {
                Ok(_) => {
                    n.counter += 1;
                    n.sent.push((sg, msg));
                    if len > SWARM_SLOT_PAYLOAD_BYTES {
                        let vid = n.views.last().map_or(0, |v| v.vid);
                        self.large_sent_in.insert(msg, vid);
                    }
                }
                Err(
                    Error::WindowFull { .. } | Error::Wedged { .. } | Error::DareWindowFull { .. },
                ) => {}
                Err(e) => self
                    .checker
                    .violation(format!("node {id}: send failed unexpectedly: {e}")),
            }
        }
    }

    fn round_once(&mut self) {
        self.round += 1;
        let mut outs = Vec::new();
        self.sim.round_with(|id, n| {
            if let Some(g) = n.group.as_mut() {
                while let Some(o) = g.poll() {
                    outs.push((id, o));
                }
            }
        });
        for (id, o) in outs {
            self.output(id, o);
        }
        self.watch_dare_leaders();
    }

    /// Records the leaders of [`SG_DARE`] its members know; two leaders of one view and
    /// term are a violation.
    fn watch_dare_leaders(&mut self) {
        let mut seen = Vec::new();
        for n in self.live() {
            let Some(e) = n.group.as_ref().and_then(|g| g.engine()) else {
                continue;
            };
            if let Ok(Some((Some(leader), term))) = e.dare_leader(SG_DARE) {
                seen.push((e.view().vid, term, leader));
            }
        }
        for (vid, term, leader) in seen {
            if self.dare_leaders.insert((vid, term, leader)) {
                let other = self
                    .dare_leaders
                    .iter()
                    .find(|(v, t, l)| *v == vid && *t == term && *l != leader);
                if let Some(o) = other {
                    let v = format!(
                        "two leaders of subgroup {SG_DARE} in view {vid}, term {term}: {} and \
                         {leader}",
                        o.2
                    );
                    self.checker.violation(v);
                }
            }
        }
    }

    fn dare_leader(&self) -> Option<NodeId> {
        let newest = self
            .live()
            .filter_map(|n| n.group.as_ref().and_then(|g| g.engine()))
            .max_by_key(|e| e.view().vid)?;
        match newest.dare_leader(SG_DARE) {
            Ok(Some((leader, _))) => {
                leader.filter(|l| self.sim.nodes.get(l).is_some_and(|n| !n.down))
            }
            _ => None,
        }
    }

    fn dare_follower(&self) -> Option<NodeId> {
        let leader = self.dare_leader();
        let newest = self
            .live()
            .filter_map(|n| n.group.as_ref().and_then(|g| g.layout()))
            .last()?
            .clone();
        let sg = newest.subgroups.iter().find(|s| s.id == SG_DARE)?;
        sg.members
            .iter()
            .rev()
            .copied()
            .find(|m| Some(*m) != leader && self.sim.nodes.get(m).is_some_and(|n| !n.down))
    }

    fn target(&self, t: Target) -> Option<NodeId> {
        match t {
            Target::Node(n) => Some(n),
            Target::Leader => self.leader(),
            Target::Joiner => self
                .live()
                .find(|n| n.group.as_ref().is_some_and(|g| !g.is_active()))
                .map(|n| n.id),
            Target::DareLeader => self.dare_leader(),
            Target::DareFollower => self.dare_follower(),
        }
    }

    fn output(&mut self, id: NodeId, o: GroupOutput) {
        if self.debug && !matches!(o, GroupOutput::Delivery(_)) {
            eprintln!(
                "round {} t={}us node {id}: {o:?}",
                self.round,
                self.sim.world.now_us()
            );
        }
        let n = self.sim.nodes.get_mut(&id).expect("node");
        match o {
            GroupOutput::Delivery(b) => {
                let vid = n.views.last().map_or(0, |v| v.vid);
                let sg = b.subgroup();
                for m in b.iter() {
                    self.delivered_total += 1;
                    if m.payload.len() > SWARM_SLOT_PAYLOAD_BYTES {
                        self.large_delivered += 1;
                    }
                    if sg == SG_DARE {
                        self.dare_delivered += 1;
                    }
                    let list = n.state.entry(sg).or_default();
                    let Some(msg) = self.checker.delivery(id, vid, sg, m.payload, list) else {
                        continue;
                    };
                    if self.large_sent_in.get(&msg).is_some_and(|v| *v < vid) {
                        self.large_later_view += 1;
                    }
                    list.push(msg);
                    n.per_view.entry((vid, sg)).or_default().push(msg);
                    fnv(&mut self.delivery_hash, &id.to_le_bytes());
                    fnv(&mut self.delivery_hash, &msg.2.to_le_bytes());
                }
            }
            GroupOutput::ViewInstalled(v) => {
                self.checker.view_at(id, &v.view, n.views.last());
                fnv(&mut self.delivery_hash, &v.view.vid.to_le_bytes());
                self.view_log
                    .push((self.round, id, v.view.vid, v.view.members.clone()));
                n.views.push(v.view.clone());
                let mine = v
                    .layout
                    .iter()
                    .flat_map(|l| l.subgroups.iter())
                    .filter(|s| s.members.contains(&id))
                    .map(|s| s.id)
                    .collect();
                n.subgroups_in.insert(v.view.vid, mine);
            }
            GroupOutput::StateRequested { subgroup, joiner } => {
                let bytes = encode_state(n.state.get(&subgroup).map_or(&[][..], |v| v));
                if let Some(g) = n.group.as_mut() {
                    if let Err(e) = g.provide_state(subgroup, joiner, &bytes) {
                        self.checker
                            .violation(format!("node {id}: provide_state: {e}"));
                    }
                }
            }
            GroupOutput::InstallState { subgroup, state } => match decode_state(&state) {
                Some(list) => {
                    n.state.insert(subgroup, list);
                }
                None => self
                    .checker
                    .violation(format!("node {id}: state of {subgroup} unreadable")),
            },
            GroupOutput::ShutDown(why) => {
                self.shutdown_log.push((self.round, id, why.clone()));
                if let Some(vid) = n.group.as_ref().and_then(|g| g.lost_majority()) {
                    self.lost_majority_log.push((id, vid));
                }
                n.down = true;
                n.group = None;
                n.ended = Some(why);
            }
            GroupOutput::Undeliverable { subgroup, payloads } => {
                if payloads.is_empty() {
                    self.checker.violation(format!(
                        "node {id}: nothing handed back as undeliverable in {subgroup}"
                    ));
                }
                // Handed back to the application: no longer expected anywhere.
                for p in payloads {
                    if let Some((msg, _)) = parse_payload(&p) {
                        n.sent.retain(|(s, m)| !(*s == subgroup && *m == msg));
                    }
                }
            }
            GroupOutput::Left => {
                n.down = true;
                n.left = true;
                n.group = None;
            }
            GroupOutput::PinsWanted { subgroup } => {
                // The swarm drops every batch once it has read it: nothing stays pinned.
                self.checker.violation(format!(
                    "node {id}: asked for pinned buffers of subgroup {subgroup}, none held"
                ));
            }
        }
    }

    /// Liveness reached: every running node is an active member of one adequate view that
    /// holds exactly the running nodes, and every message a running node sent is in every
    /// member's state of that subgroup.
    fn settled(&self) -> bool {
        let running: Vec<&NodeRun> = self.live().collect();
        if running.is_empty() {
            return false;
        }
        let Some(view) = running[0].group.as_ref().and_then(|g| g.view()).cloned() else {
            return false;
        };
        let ids: BTreeSet<NodeId> = running.iter().map(|n| n.id).collect();
        if view.members.iter().copied().collect::<BTreeSet<_>>() != ids {
            return false;
        }
        for n in &running {
            let Some(g) = &n.group else {
                return false;
            };
            if g.view() != Some(&view) || !g.is_active() || g.layout().is_none() {
                return false;
            }
            if n.declared.is_some() && view.declared.get(&n.id) != n.declared.as_ref() {
                return false;
            }
            if g.engine().is_some_and(|e| e.is_wedged()) {
                return false;
            }
        }
        let Some(layout) = running[0].group.as_ref().and_then(|g| g.layout()).cloned() else {
            return false;
        };
        for sg in &layout.subgroups {
            for sender in &running {
                for (s, msg) in &sender.sent {
                    if *s != sg.id {
                        continue;
                    }
                    for m in sg.members.iter().filter_map(|m| self.sim.nodes.get(m)) {
                        if !m.state.get(&sg.id).is_some_and(|l| l.contains(msg)) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    fn liveness_state(&self) -> String {
        let states: Vec<String> = self
            .sim
            .nodes
            .values()
            .map(|n| {
                format!(
                    "{}{}{}: {:?} active={} sent={}",
                    n.id,
                    if n.down { "(down)" } else { "" },
                    n.ended
                        .as_ref()
                        .map(|e| format!(" [{e}]"))
                        .unwrap_or_default(),
                    n.group
                        .as_ref()
                        .and_then(|g| g.view())
                        .map(|v| (v.vid, v.members.clone())),
                    n.group.as_ref().is_some_and(|g| g.is_active()),
                    n.sent.len()
                )
            })
            .collect();
        let mut missing = Vec::new();
        if let Some(layout) = self
            .live()
            .find_map(|n| n.group.as_ref().and_then(|g| g.layout()))
        {
            for sg in &layout.subgroups {
                for sender in self.live() {
                    for (s, msg) in sender.sent.iter().filter(|(s, _)| *s == sg.id) {
                        for m in sg.members.iter().filter_map(|m| self.sim.nodes.get(m)) {
                            if !m.state.get(s).is_some_and(|l| l.contains(msg)) && missing.len() < 5
                            {
                                let holders: Vec<NodeId> = self
                                    .live()
                                    .filter(|x| x.state.get(s).is_some_and(|l| l.contains(msg)))
                                    .map(|x| x.id)
                                    .collect();
                                missing.push(format!(
                                    "{msg:?} of subgroup {s} at node {} (held by {holders:?})",
                                    m.id
                                ));
                            }
                        }
                    }
                }
            }
        }
        format!(
            "no settled view after the liveness phase: {}; missing: {}",
            states.join("; "),
            missing.join(", ")
        )
    }

    /// After liveness: the checks over every run, past and present.
    fn final_checks(&mut self) {
        let all: Vec<&NodeRun> = self.sim.nodes.values().chain(&self.past).collect();
        self.checker.runs(&all);
    }
}

/// Runs the scenario drawn from `seed`.
pub fn run_seed(seed: u64, cfg: &SwarmConfig) -> Report {
    scenario_for_seed(seed, cfg).run()
}

/// The command that reruns one seed.
pub fn reproduce_command(seed: u64) -> String {
    format!("cargo run --release -p spindle-group --example swarm -- --start {seed} --seeds 1")
}

impl Report {
    /// Panics, naming the seed, what went wrong and the command that reruns it
    /// ([`reproduce_command`]), if the run broke an invariant or did not finish.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "seed {}: violations {:?}\nreproduce: {}",
            self.seed,
            self.violations,
            reproduce_command(self.seed)
        );
        assert!(
            self.liveness_failure.is_none(),
            "seed {}: {}\nreproduce: {}",
            self.seed,
            self.liveness_failure.as_deref().unwrap_or(""),
            reproduce_command(self.seed)
        );
    }
}
