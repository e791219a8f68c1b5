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
use crate::testkit::{SimCluster, SimNode, CONNECT_STEPS_MAX};
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
}

impl SimNode for RdmcNode {
    fn is_live(&self) -> bool {
        !self.crashed
    }

    fn step(&mut self, _now_us: u64, scratch: &mut Vec<u8>) -> bool {
        let mut work = false;
        while let Some(event) = self.ep.poll_event() {
            work = true;
            if let Event::PeerFailed { peer, .. } = event {
                self.group.handle_peer_failed(peer);
            }
        }
        work |= self.group.step();
        let ep = &self.ep;
        work |= self
            .group
            .drain_writes(scratch, |w, bytes| w.post(&**ep, bytes))
            > 0;
        while let Some(event) = self.group.poll_event() {
            work = true;
            self.events.push(event);
            if let RdmcEvent::Completed { seq, .. } = event {
                if self.group.rank() != 0 {
                    if let Ok(bytes) = self.group.read_message() {
                        self.received.insert(seq, bytes);
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
        sim.nodes.insert(
            n,
            RdmcNode {
                ep,
                group,
                crashed: false,
                events: Vec::new(),
                received: BTreeMap::new(),
            },
        );
    }
    for (i, &a) in members.iter().enumerate() {
        for &b in &members[i + 1..] {
            let address = sim.nodes[&b].ep.address();
            sim.nodes[&a].ep.connect(b, &address)?;
        }
    }
    sim.world.run_until_idle(CONNECT_STEPS_MAX);
    for (id, n) in &sim.nodes {
        let mut connected = 0;
        while let Some(e) = n.ep.poll_event() {
            connected += usize::from(matches!(e, Event::PeerConnected { .. }));
        }
        if connected != members.len() - 1 {
            return Err(Error::Config(format!(
                "sim: node {id} has {connected} links of {}",
                members.len() - 1
            )));
        }
    }
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
