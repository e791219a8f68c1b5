//! RDMC on the deterministic sim fabric (feature `testkit`): one [`RdmcGroup`] per node
//! over a [`SimCluster`], and the seeded fault scenario the tests run on many seeds.
//!
//! [`run_seed`] draws everything from its seed — members, block size, schedule, window,
//! message sizes and bytes, per-delivery link delays, and whether and when a member (root or
//! receiver) crashes mid-transfer — runs the transfer to its end, and checks:
//!
//! * every receiver that reports a message complete holds exactly the root's bytes;
//! * nothing hangs: every live member ends with every message complete or with the
//!   group's failure reported, within [`RDMC_SIM_ROUNDS_MAX`] rounds;
//! * with no crash, every message completes everywhere and no failure is reported.
//!
//! The same seed gives the same run and the same [`RdmcSeedOutcome::trace_hash`].
//!
//! ```
//! let outcome = spindle_group::rdmc_sim::run_seed(3);
//! assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
//! assert_eq!(spindle_group::rdmc_sim::run_seed(3).trace_hash, outcome.trace_hash);
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{Endpoint, Event, NodeId, RegionId};

use crate::rdmc::{RdmcConfig, RdmcEvent, RdmcGroup, ScheduleKind};
use crate::testkit::{SimCluster, SimNode};
use crate::{Error, Result};

/// The region id every member registers its RDMC buffer under in these simulations.
pub const RDMC_SIM_REGION_ID: RegionId = 0x5244_4d43;
/// Rounds a seeded run may take before it counts as hung.
pub const RDMC_SIM_ROUNDS_MAX: u64 = 200_000;
/// Most messages one seeded run sends.
pub const RDMC_SIM_MESSAGES_MAX: usize = 8;

/// One member of a simulated RDMC group: its endpoint, its group core, what it saw.
#[derive(Debug)]
pub struct RdmcNode {
    /// The node's endpoint.
    pub ep: Arc<SimEndpoint>,
    /// The node's part of the group.
    pub group: RdmcGroup,
    /// The test crashed it.
    pub crashed: bool,
    /// Events in order.
    pub events: Vec<RdmcEvent>,
    /// Receivers: the bytes of each completed message, by sequence number (read, then
    /// released at once).
    pub received: BTreeMap<u64, Vec<u8>>,
    /// When each message completed here (virtual µs), by sequence number.
    pub completed_at: BTreeMap<u64, u64>,
    /// Payload-free mode, for measurements only ([`measure_completion`] with
    /// [`RdmcData::Phantom`]): writes at or past this offset (the message buffers) go as
    /// [`SimEndpoint::write_phantom`] — their length, not their bytes — and completed
    /// messages are released unread. `None`: every write carries its bytes.
    pub phantom_from: Option<usize>,
}

impl RdmcNode {
    fn new(ep: Arc<SimEndpoint>, group: RdmcGroup) -> RdmcNode {
        RdmcNode {
            ep,
            group,
            crashed: false,
            events: Vec::new(),
            received: BTreeMap::new(),
            completed_at: BTreeMap::new(),
            phantom_from: None,
        }
    }
}

impl SimNode for RdmcNode {
    fn is_live(&self) -> bool {
        !self.crashed
    }

    fn step(&mut self, now_us: u64, scratch: &mut Vec<u8>) -> bool {
        let mut work = false;
        while let Some(event) = self.ep.poll_event() {
            work = true;
            if let Event::PeerFailed { peer, .. } = event {
                self.group.handle_peer_failed(peer);
            }
        }
        work |= self.group.step();
        let ep = &self.ep;
        work |= match self.phantom_from {
            None => self
                .group
                .drain_writes(scratch, |w, bytes| w.post(&**ep, bytes)),
            Some(from) => self.group.drain_writes_by(|w, region| {
                if w.offset >= from {
                    return ep.write_phantom(w.peer, w.region, w.offset, w.len, w.guard);
                }
                scratch.clear();
                region.read_append(w.offset, w.len, scratch)?;
                w.post(&**ep, scratch)
            }),
        } > 0;
        while let Some(event) = self.group.poll_event() {
            work = true;
            self.events.push(event);
            if let RdmcEvent::Completed { seq, .. } = event {
                self.completed_at.insert(seq, now_us);
                if self.group.rank() != 0 {
                    if self.phantom_from.is_none() {
                        if let Ok(bytes) = self.group.read_message() {
                            self.received.insert(seq, bytes);
                        }
                    }
                    self.group.release();
                }
            }
        }
        work
    }
}

/// A cluster of [`RdmcNode`]s for `members` (the first is the root), every pair linked.
pub fn rdmc_cluster(
    world: SimWorld,
    members: &[NodeId],
    config: &RdmcConfig,
    rng_seed: u64,
    step_us: std::ops::Range<u64>,
) -> Result<SimCluster<RdmcNode>> {
    let mut sim = SimCluster::new(world, rng_seed, step_us);
    let len = RdmcGroup::region_bytes(members.len(), config);
    for &n in members {
        let ep = sim.world.endpoint(n);
        let region = ep.register_region(RDMC_SIM_REGION_ID, len)?;
        let group = RdmcGroup::new(n, members.to_vec(), config.clone(), region)?;
        sim.nodes.insert(n, RdmcNode::new(ep, group));
    }
    sim.connect_mesh(members, |n| &n.ep)?;
    Ok(sim)
}

/// What one seeded run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmcSeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Fingerprint of every delivery of the fabric: equal for equal seeds.
    pub trace_hash: u64,
    /// Members, root first.
    pub members: Vec<NodeId>,
    /// The schedule drawn.
    pub schedule: ScheduleKind,
    /// The window drawn (messages in flight).
    pub window_messages: usize,
    /// The member crashed, if any.
    pub crashed: Option<NodeId>,
    /// Messages completed, summed over live receivers.
    pub completions: usize,
    /// Live members that reported the group's failure.
    pub failures_reported: usize,
    /// Live members that reported the failure with a message in flight (mid-transfer).
    pub failures_mid_transfer: usize,
    /// Rounds run.
    pub rounds: u64,
    /// Broken checks, in words; empty if the run is correct.
    pub violations: Vec<String>,
}

/// The bytes of message `seq` in the run of `seed` (a pure function, so the checker
/// needs no copy of what the root sent).
pub fn message_bytes(seed: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..len).map(|_| rng.gen()).collect()
}

/// Runs the seeded RDMC fault scenario of the module docs.
pub fn run_seed(seed: u64) -> RdmcSeedOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n: u32 = rng.gen_range(2..=9);
    let members: Vec<NodeId> = (1..=n).collect();
    let schedule = ScheduleKind::ALL[rng.gen_range(0..ScheduleKind::ALL.len())];
    let block_bytes = [8usize, 64, 512, 4096][rng.gen_range(0..4)];
    let config = RdmcConfig {
        block_bytes,
        message_bytes_max: 64 * 1024,
        schedule,
        window_messages: rng.gen_range(1..=3),
    };
    let messages: Vec<usize> = (0..rng.gen_range(1..=RDMC_SIM_MESSAGES_MAX))
        .map(|_| rng.gen_range(1..=config.message_bytes_max.min(block_bytes * 40)))
        .collect();
    // A crash, if drawn: of any member (the root too), some rounds after the root
    // handed over a drawn message, so that it lands mid-transfer.
    let crash: Option<(NodeId, usize, u64)> = if rng.gen_bool(0.5) {
        let who = members[rng.gen_range(0..members.len())];
        Some((who, rng.gen_range(1..=messages.len()), rng.gen_range(0..40)))
    } else {
        None
    };
    let mut crash_at_round: Option<u64> = None;
    let sim_config = SimConfig {
        link_delay_min_us: 1,
        link_delay_max_us: rng.gen_range(2..=200),
        ..SimConfig::default()
    };
    let world = SimWorld::new(seed, sim_config);
    let mut outcome = RdmcSeedOutcome {
        seed,
        trace_hash: 0,
        members: members.clone(),
        schedule,
        window_messages: config.window_messages,
        crashed: None,
        completions: 0,
        failures_reported: 0,
        failures_mid_transfer: 0,
        rounds: 0,
        violations: Vec::new(),
    };
    let mut sim = match rdmc_cluster(world, &members, &config, seed, 1..20) {
        Ok(sim) => sim,
        Err(e) => {
            outcome.violations.push(format!("set-up failed: {e}"));
            return outcome;
        }
    };
    let root = members[0];
    let mut next = 0usize;
    loop {
        if let Some((who, _, _)) = crash {
            if crash_at_round == Some(sim.rounds()) && outcome.crashed.is_none() {
                sim.world.crash(who);
                if let Some(node) = sim.nodes.get_mut(&who) {
                    node.crashed = true;
                }
                outcome.crashed = Some(who);
            }
        }
        let root_node = sim.nodes.get_mut(&root).expect("the root is a node");
        if next < messages.len() && !root_node.crashed && root_node.group.can_send() {
            let bytes = message_bytes(seed, next as u64 + 1, messages[next]);
            match root_node.group.send(&bytes) {
                Ok(()) => {
                    next += 1;
                    if let Some((_, after_message, delay_rounds)) = crash {
                        if after_message == next {
                            crash_at_round = Some(sim.rounds() + delay_rounds);
                        }
                    }
                }
                Err(Error::RdmcFailed { .. }) => next = messages.len(),
                Err(e) => {
                    outcome
                        .violations
                        .push(format!("root refused message {}: {e}", next + 1));
                    next = messages.len();
                }
            }
        }
        sim.round();
        let done = sim.nodes.values().filter(|x| !x.crashed).all(|x| {
            x.group.failed().is_some()
                || (next == messages.len()
                    && !x.group.is_busy()
                    && (x.group.rank() == 0 || x.received.len() == messages.len()))
        });
        if done {
            break;
        }
        if sim.rounds() >= RDMC_SIM_ROUNDS_MAX {
            outcome.violations.push(format!(
                "hung: {} rounds without every live member complete or failed",
                sim.rounds()
            ));
            break;
        }
    }
    outcome.rounds = sim.rounds();
    for (id, node) in &sim.nodes {
        if node.crashed {
            continue;
        }
        let failed = node
            .events
            .iter()
            .any(|e| matches!(e, RdmcEvent::Failed { .. }));
        outcome.failures_reported += usize::from(failed);
        outcome.failures_mid_transfer += node
            .events
            .iter()
            .filter(|e| matches!(e, RdmcEvent::Failed { seq, .. } if *seq != 0))
            .count();
        if outcome.crashed.is_none() && failed {
            outcome
                .violations
                .push(format!("node {id} reported a failure with nobody crashed"));
        }
        for (&seq, bytes) in &node.received {
            outcome.completions += 1;
            let len = messages.get(seq as usize - 1).copied().unwrap_or(0);
            if *bytes != message_bytes(seed, seq, len) {
                outcome.violations.push(format!(
                    "node {id}: message {seq} ({len} bytes) differs from the root's"
                ));
            }
        }
        let completed: Vec<u64> = node
            .events
            .iter()
            .filter_map(|e| match e {
                RdmcEvent::Completed { seq, .. } => Some(*seq),
                _ => None,
            })
            .collect();
        if completed != (1..=completed.len() as u64).collect::<Vec<_>>() {
            outcome.violations.push(format!(
                "node {id}: completions out of order: {completed:?}"
            ));
        }
        if outcome.crashed.is_none() && completed.len() != messages.len() {
            outcome.violations.push(format!(
                "node {id}: {} of {} messages completed with nobody crashed",
                completed.len(),
                messages.len()
            ));
        }
    }
    outcome.trace_hash = sim.trace_hash();
    outcome
}

/// How the data of a measured transfer travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmcData {
    /// Real bytes (drawn from the seed), checked intact at every receiver.
    Bytes,
    /// Payload-free: block writes carry only their length
    /// ([`SimEndpoint::write_phantom`]), so a message of any size to any number of
    /// receivers costs no memory for its bytes. For the completion table only; the
    /// schedule, the handshake, the counters and every guard word run as in a real
    /// transfer.
    Phantom,
}

/// One case of the completion table: one message of `size_bytes` from the root to
/// `receivers` receivers on `schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionCase {
    /// The schedule.
    pub schedule: ScheduleKind,
    /// Receivers (the root comes on top).
    pub receivers: u32,
    /// The message size.
    pub size_bytes: usize,
    /// The block size.
    pub block_bytes: usize,
}

/// The links of a measurement: the sim fabric's bandwidth model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bytes per second each NIC sends, and separately receives
    /// ([`SimConfig::link_rate_bytes_per_s`]).
    pub rate_bytes_per_s: u64,
    /// Latency added to every transfer, in µs (the link delay, fixed).
    pub latency_us: u64,
}

impl LinkSpec {
    /// The same links in the schedule model's terms ([`crate::rdmc::model`]).
    pub fn model(&self) -> crate::rdmc::model::LinkModel {
        crate::rdmc::model::LinkModel {
            link_bytes_per_s: self.rate_bytes_per_s,
            latency_us: self.latency_us as f64,
        }
    }
}

/// What one measured transfer took, in virtual µs after the root handed the message over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The first receiver to complete.
    pub first_us: u64,
    /// The last receiver to complete: the table's figure.
    pub last_us: u64,
    /// Links brought up (pairs of members): the schedule's pairs and the root's.
    pub links: usize,
    /// Deliveries and timers the fabric applied, set-up included.
    pub fabric_steps: u64,
    /// Fingerprint of the run: equal for equal seeds and cases.
    pub trace_hash: u64,
}

/// Most fabric deliveries one measured transfer may take before it counts as stalled
/// (256 MiB to 1024 receivers in 1 MiB blocks takes about 270,000).
pub const COMPLETION_STEPS_MAX: u64 = 50_000_000;

/// Runs one message of `case` through a real [`RdmcGroup`] per member on the sim fabric
/// with the bandwidth model `link`, event by event (only the members a delivery reached
/// step: [`SimCluster::next_event`]), and returns when the receivers completed.
///
/// The members link only to the peers the schedule pairs them with and to the root (its
/// announcements and their ready words), not all to all, and share one computed schedule
/// ([`RdmcGroup::share_schedule`]). With [`RdmcData::Bytes`] every receiver's copy is
/// checked against the root's; a mismatch, a failure or a stall is an error naming the case.
pub fn measure_completion(
    case: CompletionCase,
    link: LinkSpec,
    data: RdmcData,
    seed: u64,
) -> Result<Completion> {
    let what = |detail: String| Error::Config(format!("RDMC completion {case:?}: {detail}"));
    let n = case.receivers + 1;
    let members: Vec<NodeId> = (1..=n).collect();
    let config = RdmcConfig {
        block_bytes: case.block_bytes,
        message_bytes_max: case.size_bytes,
        schedule: case.schedule,
        window_messages: 1,
    };
    let blocks = case.size_bytes.div_ceil(case.block_bytes) as u32;
    let schedule = Arc::new(crate::rdmc::Schedule::new(case.schedule, n, blocks)?);
    let sim_config = SimConfig {
        link_delay_min_us: link.latency_us,
        link_delay_max_us: link.latency_us,
        link_rate_bytes_per_s: Some(link.rate_bytes_per_s),
        ..SimConfig::default()
    };
    let world = SimWorld::new(seed, sim_config);
    let mut sim: SimCluster<RdmcNode> = SimCluster::new(world, seed, 0..0);
    let len = RdmcGroup::region_bytes(members.len(), &config);
    let data_from = RdmcGroup::buffer_offset(members.len(), &config, 1);
    for &m in &members {
        let ep = sim.world.endpoint(m);
        let region = ep.register_region(RDMC_SIM_REGION_ID, len)?;
        let mut group = RdmcGroup::new(m, members.clone(), config.clone(), region)?;
        group.share_schedule(Arc::clone(&schedule))?;
        let mut node = RdmcNode::new(ep, group);
        if data == RdmcData::Phantom {
            node.phantom_from = Some(data_from);
        }
        sim.nodes.insert(m, node);
    }
    // The pairs the schedule moves blocks between, and the root with everyone.
    let mut pairs: std::collections::BTreeSet<(u32, u32)> = (1..n).map(|r| (0, r)).collect();
    for t in schedule.steps().iter().flatten() {
        pairs.insert((t.from.min(t.to), t.from.max(t.to)));
    }
    let pairs: Vec<(NodeId, NodeId)> = pairs
        .iter()
        .map(|&(a, b)| (members[a as usize], members[b as usize]))
        .collect();
    sim.connect(&pairs, |n| &n.ep)
        .map_err(|e| what(e.to_string()))?;
    sim.settle(&[]); // the set-up's wake-ups
    let root = members[0];
    let start_us = sim.now_us();
    let root_node = sim.nodes.get_mut(&root).expect("the root is a node");
    let message = match data {
        RdmcData::Bytes => pattern_bytes(seed, case.size_bytes),
        RdmcData::Phantom => Vec::new(),
    };
    match data {
        RdmcData::Bytes => root_node.group.send(&message)?,
        RdmcData::Phantom => root_node.group.send_in_place(case.size_bytes)?,
    }
    sim.settle(&[root]);
    // Run until the fabric is idle (the last deliveries are the receivers' ready words);
    // each receiver noted when it completed.
    let mut steps = 0u64;
    while sim.next_event() {
        steps += 1;
        if steps >= COMPLETION_STEPS_MAX {
            return Err(what(format!("not idle after {steps} deliveries")));
        }
    }
    if let Some(node) = sim.nodes.values().find(|x| x.group.failed().is_some()) {
        return Err(what(format!(
            "node {} reported a failure: {:?}",
            node.group.node(),
            node.events.last()
        )));
    }
    if let Some(m) = members[1..]
        .iter()
        .find(|m| !sim.nodes[m].completed_at.contains_key(&1))
    {
        return Err(what(format!(
            "the fabric went idle with node {m} incomplete, {} µs in",
            sim.now_us() - start_us
        )));
    }
    if data == RdmcData::Bytes {
        for m in &members[1..] {
            if sim.nodes[m].received.get(&1) != Some(&message) {
                return Err(what(format!("node {m} holds other bytes than the root's")));
            }
        }
    }
    let at: Vec<u64> = members[1..]
        .iter()
        .map(|m| sim.nodes[m].completed_at[&1] - start_us)
        .collect();
    Ok(Completion {
        first_us: at.iter().copied().min().unwrap_or(0),
        last_us: at.iter().copied().max().unwrap_or(0),
        links: pairs.len(),
        fabric_steps: steps,
        trace_hash: sim.trace_hash(),
    })
}

/// `len` bytes that differ per seed and per word (splitmix64), cheap enough for the
/// measured transfers' real-bytes mode.
fn pattern_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}
