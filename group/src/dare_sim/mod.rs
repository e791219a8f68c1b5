//! DARE on the deterministic sim fabric (feature `testkit`): one [`DareNode`] per member
//! over a [`SimCluster`], and the seeded fault scenario the tests run on many seeds.
//!
//! [`run_seed`] draws everything from its seed — 3 to 5 members, the log ring, the sender
//! window, link delays and delay spikes, which members send how many messages — and one
//! or two faults, each at a drawn time:
//!
//! * **crash** of the leader of the moment (or of a follower);
//! * **pause** of the leader (its traffic held for longer than the election time-out but
//!   less than the fabric's suspicion time-out: it comes back deposed, its held writes meet
//!   re-keyed regions, its uncommitted entries are overwritten by log adjustment);
//! * **partition** of a minority that holds the leader (permanent);
//! * **delay** of every delivery from the leader for a while.
//!
//! A *correct* member never crashed and stayed on the majority side. The checker
//! ([`check`]) asserts, over every member's deliveries (crashed ones' included):
//!
//! * at most one leader per term (from the `Elected` events);
//! * one log order: any two members' delivery lists are one a prefix of the other;
//! * no committed entry lost or changed across elections: every index any leader
//!   reported committed names one entry, every delivery at that index is that entry, and
//!   every correct member delivers every committed message;
//! * each sender's messages delivered once each, in order (asserted inside the core);
//! * liveness: each correct member delivers every message of every correct sender
//!   within [`DARE_SIM_ROUNDS_MAX`] rounds.
//!
//! The same seed gives the same run and the same [`DareSeedOutcome::trace_hash`].
//!
//! ```
//! let outcome = spindle_group::dare_sim::run_seed(3);
//! assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
//! assert_eq!(spindle_group::dare_sim::run_seed(3).trace_hash, outcome.trace_hash);
//! ```

pub mod handoff;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_transport_rdma::sim::{DeliveryKind, Rule, SimConfig, SimEndpoint, SimWorld, Verdict};
use spindle_transport_rdma::{Endpoint, Event, NodeId, Region, RegionId};

use crate::dare::layout::{DARE_CTRL_REGION_ID, DARE_LOG_REGION_BASE};
use crate::dare::{DareConfig, DareDelivery, DareEvent, DareNode, DareOut, DareRole, DARE_IMM};
use crate::testkit::{SimCluster, SimNode};
use crate::Result;

/// Rounds a seeded run may take before it counts as hung.
pub const DARE_SIM_ROUNDS_MAX: u64 = 400_000;
/// Most extra delay of a region announcement past later writes, in virtual µs.
pub const DARE_SIM_CONTROL_LAG_US_MAX: u64 = 2_000;
/// Most messages one member sends in a seeded run.
pub const DARE_SIM_MESSAGES_PER_SENDER_MAX: usize = 12;

/// One member of a simulated DARE group: its endpoint, its core, what it saw.
#[derive(Debug)]
pub struct DareSimNode {
    /// The node's endpoint.
    pub ep: Arc<SimEndpoint>,
    /// The node's part of the group.
    pub dare: DareNode,
    /// The test crashed it.
    pub crashed: bool,
    /// Deliveries in order.
    pub delivered: Vec<DareDelivery>,
    /// Events in order.
    pub events: Vec<DareEvent>,
    /// Writes and sends the fabric refused (to failed links or withdrawn regions: a
    /// deposed leader's writes end here).
    pub refused: u64,
    /// Errors of the core (a violation if any).
    pub errors: Vec<String>,
    /// Writes this node issued into a peer's log region that the peer had already
    /// withdrawn (re-keyed): a deposed leader's writes, refused by the fabric.
    pub late_writes: u64,
    /// The log regions this node withdrew, with their bytes at withdrawal (the checker
    /// asserts nothing landed in them afterwards).
    pub withdrawn: Vec<(RegionId, Region, Vec<u8>)>,
    /// The highest index this node committed as leader.
    pub committed_max: u64,
    log_regions: BTreeMap<RegionId, Region>,
    withdrawals: Withdrawals,
}

/// When each member withdrew each of its log regions (virtual µs), shared by a cluster.
pub type Withdrawals = Arc<Mutex<BTreeMap<(NodeId, RegionId), u64>>>;

impl SimNode for DareSimNode {
    fn is_live(&self) -> bool {
        !self.crashed
    }

    fn step(&mut self, now_us: u64, _scratch: &mut Vec<u8>) -> bool {
        let mut work = false;
        while let Some(event) = self.ep.poll_event() {
            work = true;
            match event {
                Event::PeerFailed { peer, .. } => self.dare.handle_peer_failed(peer),
                Event::RegionAnnounced { peer, region } => {
                    self.dare.handle_region_announced(peer, region.region)
                }
                Event::Recv { peer, imm, data } if imm == DARE_IMM => {
                    if let Err(e) = self.dare.handle_recv(peer, &data) {
                        self.errors.push(e.to_string());
                    }
                }
                _ => {}
            }
        }
        if self.dare.stopped().is_some() {
            return work;
        }
        let ep = Arc::clone(&self.ep);
        let me = ep.node();
        let (log_regions, withdrawn, withdrawals) = (
            &mut self.log_regions,
            &mut self.withdrawn,
            &self.withdrawals,
        );
        let mut rekey = |old: Option<RegionId>, new: RegionId, len: usize| -> Result<Region> {
            if let Some(old) = old {
                ep.deregister_region(old)?;
                if let Some(region) = log_regions.remove(&old) {
                    let bytes = region.to_vec(0, region.len())?;
                    withdrawn.push((old, region, bytes));
                }
                withdrawals
                    .lock()
                    .expect("withdrawals lock")
                    .insert((me, old), now_us);
            }
            let region = ep.register_region(new, len)?;
            log_regions.insert(new, region.clone());
            Ok(region)
        };
        match self.dare.step(now_us, &mut rekey) {
            Ok(w) => work |= w,
            Err(e) => self.errors.push(e.to_string()),
        }
        while let Some(out) = self.dare.poll_out() {
            work = true;
            if let DareOut::Write { peer, region, .. } = &out {
                if *region >= DARE_LOG_REGION_BASE {
                    let w = self.withdrawals.lock().expect("withdrawals lock");
                    if w.get(&(*peer, *region)).is_some_and(|&t| t <= now_us) {
                        self.late_writes += 1;
                    }
                }
            }
            let r = match out {
                DareOut::Write {
                    peer,
                    region,
                    offset,
                    bytes,
                    guard: None,
                } => self.ep.write(peer, region, offset, &bytes),
                DareOut::Write {
                    peer,
                    region,
                    offset,
                    bytes,
                    guard: Some((at, value)),
                } => self
                    .ep
                    .write_then_release(peer, region, offset, &bytes, at, value),
                DareOut::Send { peer, bytes } => self.ep.send(peer, DARE_IMM, &bytes),
            };
            self.refused += u64::from(r.is_err());
        }
        while let Some(d) = self.dare.poll_delivery() {
            self.delivered.push(d);
        }
        while let Some(e) = self.dare.poll_event() {
            if let DareEvent::Committed { index, .. } = e {
                self.committed_max = self.committed_max.max(index);
            }
            self.events.push(e);
        }
        work
    }
}

/// A cluster of [`DareSimNode`]s for `members`, every pair linked.
pub fn dare_cluster(
    world: SimWorld,
    members: &[NodeId],
    config: &DareConfig,
    rng_seed: u64,
    step_us: std::ops::Range<u64>,
) -> Result<SimCluster<DareSimNode>> {
    let mut sim = SimCluster::new(world, rng_seed, step_us);
    let withdrawals = Withdrawals::default();
    for &n in members {
        let ep = sim.world.endpoint(n);
        let ctrl = ep.register_region(
            DARE_CTRL_REGION_ID,
            DareNode::ctrl_region_bytes(members.len()),
        )?;
        let dare = DareNode::new(n, members.to_vec(), config.clone(), ctrl, rng_seed)?;
        sim.nodes.insert(
            n,
            DareSimNode {
                ep,
                dare,
                crashed: false,
                delivered: Vec::new(),
                events: Vec::new(),
                refused: 0,
                errors: Vec::new(),
                late_writes: 0,
                committed_max: 0,
                withdrawn: Vec::new(),
                log_regions: BTreeMap::new(),
                withdrawals: Arc::clone(&withdrawals),
            },
        );
    }
    sim.connect_mesh(members, |n| &n.ep)?;
    Ok(sim)
}

/// A fault of a seeded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DareFault {
    /// Crash the leader of the moment.
    CrashLeader,
    /// Crash a follower of the moment.
    CrashFollower,
    /// Hold the leader's traffic for this many µs.
    PauseLeader(u64),
    /// Cut the leader and (with 5 members) one more member off from the rest, for good.
    PartitionLeader,
    /// Delay every delivery from the leader by this many µs, for 20 ms.
    DelayLeader(u64),
}

/// What one seeded run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DareSeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Fingerprint of every delivery of the fabric: equal for equal seeds.
    pub trace_hash: u64,
    /// Members.
    pub members: Vec<NodeId>,
    /// Faults applied, with the virtual time (µs) and the node they hit.
    pub faults: Vec<(u64, DareFault, NodeId)>,
    /// How far region announcements lag the writes issued after them (µs; 0: in order).
    pub control_lag_us: u64,
    /// Leaders elected, by term.
    pub leaders: BTreeMap<u64, NodeId>,
    /// Messages delivered, summed over correct members.
    pub deliveries: usize,
    /// Writes and sends the fabric refused at issue, summed over members.
    pub refused: u64,
    /// Writes issued into log regions their owner had already withdrawn (re-keyed),
    /// summed over members: revocation at work.
    pub late_writes: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Broken checks, in words; empty if the run is correct.
    pub violations: Vec<String>,
}

/// Largest payload of a seeded run.
pub const DARE_SIM_PAYLOAD_BYTES_MAX: usize = 48;

/// The length of message `seq` of `sender` (0 to [`DARE_SIM_PAYLOAD_BYTES_MAX`]).
pub fn message_len(sender: NodeId, seq: u64) -> usize {
    (seq as usize * 7 + sender as usize) % (DARE_SIM_PAYLOAD_BYTES_MAX + 1)
}

/// The payload of message `seq` of `sender` in the run of `seed`.
pub fn message_bytes(seed: u64, sender: NodeId, seq: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(
        seed ^ (u64::from(sender) << 48) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    (0..len).map(|_| rng.gen()).collect()
}

fn current_leader(sim: &SimCluster<DareSimNode>) -> Option<NodeId> {
    sim.nodes
        .iter()
        .filter(|(_, n)| !n.crashed && n.dare.role() == DareRole::Leader)
        .max_by_key(|(_, n)| n.dare.term())
        .map(|(id, _)| *id)
}

/// Runs the seeded DARE fault scenario of the module docs. A panic inside (an
/// invariant `assert!` of the core) comes back as a violation naming the seed's run.
pub fn run_seed(seed: u64) -> DareSeedOutcome {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed_unchecked(seed))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            DareSeedOutcome {
                seed,
                trace_hash: 0,
                members: Vec::new(),
                faults: Vec::new(),
                control_lag_us: 0,
                leaders: BTreeMap::new(),
                deliveries: 0,
                refused: 0,
                late_writes: 0,
                rounds: 0,
                violations: vec![format!("an invariant failed: {what}")],
            }
        }
    }
}

fn run_seed_unchecked(seed: u64) -> DareSeedOutcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n: u32 = [3, 3, 5][rng.gen_range(0..3)];
    let members: Vec<NodeId> = (1..=n).collect();
    let config = DareConfig {
        log_entries: [4usize, 8, 64][rng.gen_range(0..3)],
        payload_bytes_max: DARE_SIM_PAYLOAD_BYTES_MAX,
        sender_window: rng.gen_range(1..=6),
        heartbeat_us: 300,
        election_timeout_us: 3_000,
    };
    let mut sends: BTreeMap<NodeId, usize> = members
        .iter()
        .map(|&m| {
            let count = if rng.gen_bool(0.3) {
                0
            } else {
                rng.gen_range(1..=DARE_SIM_MESSAGES_PER_SENDER_MAX)
            };
            (m, count)
        })
        .collect();
    let fault_count = if n == 5 {
        rng.gen_range(0..=2)
    } else {
        rng.gen_range(0..=1)
    };
    let mut plan: Vec<(u64, DareFault)> = (0..fault_count)
        .map(|i| {
            let at_us = 6_000 + i * 25_000 + rng.gen_range(0..15_000);
            let fault = match rng.gen_range(0..5) {
                0 => DareFault::CrashLeader,
                1 => DareFault::CrashFollower,
                2 => DareFault::PauseLeader(rng.gen_range(7_000..25_000)),
                3 => DareFault::PartitionLeader,
                _ => DareFault::DelayLeader(rng.gen_range(500..6_000)),
            };
            (at_us, fault)
        })
        .collect();
    plan.reverse();
    let sim_config = SimConfig {
        link_delay_min_us: 1,
        link_delay_max_us: rng.gen_range(2..=200),
        delay_spike_per_million: if rng.gen_bool(0.5) { 20_000 } else { 0 },
        delay_spike_max_us: 2_000,
        ..SimConfig::default()
    };
    // Drawn from a stream of its own, so that the other draws of a seed stay as they were
    // before lagging announcements were modelled.
    let mut lag_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6c61_675f_7368_6d00);
    let control_lag_us = if lag_rng.gen_bool(0.5) {
        lag_rng.gen_range(1..=DARE_SIM_CONTROL_LAG_US_MAX)
    } else {
        0
    };
    let world = SimWorld::new(seed, sim_config);
    let mut outcome = DareSeedOutcome {
        seed,
        trace_hash: 0,
        members: members.clone(),
        faults: Vec::new(),
        control_lag_us,
        leaders: BTreeMap::new(),
        deliveries: 0,
        refused: 0,
        late_writes: 0,
        rounds: 0,
        violations: Vec::new(),
    };
    let mut sim = match dare_cluster(world, &members, &config, seed, 1..40) {
        Ok(sim) => sim,
        Err(e) => {
            outcome.violations.push(format!("set-up failed: {e}"));
            return outcome;
        }
    };
    if control_lag_us > 0 {
        // After set-up: the links are up and the control regions known.
        sim.world.add_rule(Rule {
            from: None,
            to: None,
            kind: Some(DeliveryKind::Control),
            regions: None,
            after_us: sim.now_us(),
            until_us: u64::MAX,
            verdict: Verdict::Lag(control_lag_us),
        });
    }
    let mut sent: BTreeMap<NodeId, u64> = members.iter().map(|&m| (m, 0)).collect();
    // Members cut off (crashed, or on the minority side), and paused ones with their end.
    let mut lost: BTreeSet<NodeId> = BTreeSet::new();
    let mut paused: Option<(NodeId, u64)> = None;
    let mut extra_sent = false;
    let start_us = sim.now_us();
    loop {
        let now = sim.now_us() - start_us;
        if let Some((who, until)) = paused {
            // Late in the pause the deposed leader (it does not know yet) hands over one
            // more message: it appends it and writes it into the followers' logs, whose
            // regions for its term are withdrawn by now.
            if now + 500 >= until && !extra_sent {
                extra_sent = true;
                *sends.get_mut(&who).expect("member") += 1;
            }
            if now >= until {
                sim.world.resume(who);
                paused = None;
            }
        }
        if plan.last().is_some_and(|(at, _)| now >= *at) {
            let (_, fault) = plan.pop().expect("seen");
            let leader = current_leader(&sim);
            let victim = match fault {
                DareFault::CrashFollower => sim
                    .live()
                    .into_iter()
                    .find(|m| Some(*m) != leader && !lost.contains(m)),
                _ => leader,
            };
            // A majority stays correct: faults that would cut off more are skipped.
            let room = (n as usize - 1) / 2 - lost.len();
            let cuts = matches!(
                fault,
                DareFault::CrashLeader | DareFault::CrashFollower | DareFault::PartitionLeader
            );
            if let Some(v) = victim.filter(|v| !lost.contains(v) && (room > 0 || !cuts)) {
                match fault {
                    DareFault::CrashLeader | DareFault::CrashFollower => {
                        sim.world.crash(v);
                        if let Some(node) = sim.nodes.get_mut(&v) {
                            node.crashed = true;
                        }
                        lost.insert(v);
                    }
                    DareFault::PauseLeader(us) => {
                        if paused.is_none() {
                            sim.world.pause(v);
                            paused = Some((v, now + us));
                            extra_sent = false;
                        }
                    }
                    DareFault::PartitionLeader => {
                        let mut minority = vec![v];
                        if room > 1 {
                            if let Some(&other) =
                                members.iter().find(|m| **m != v && !lost.contains(m))
                            {
                                minority.push(other);
                            }
                        }
                        let majority: Vec<NodeId> = members
                            .iter()
                            .copied()
                            .filter(|m| !minority.contains(m))
                            .collect();
                        sim.world.partition(&[&minority, &majority]);
                        lost.extend(minority);
                    }
                    DareFault::DelayLeader(us) => {
                        let t = sim.now_us();
                        sim.world.add_rule(Rule {
                            from: Some(v),
                            to: None,
                            kind: None,
                            regions: None,
                            after_us: t,
                            until_us: t + 20_000,
                            verdict: Verdict::Delay(us),
                        });
                    }
                }
                outcome.faults.push((now, fault, v));
            }
        }
        // Senders hand over messages while their window has room.
        for (&m, &count) in &sends {
            let Some(node) = sim.nodes.get_mut(&m) else {
                continue;
            };
            if node.crashed || sent[&m] >= count as u64 || !node.dare.can_send() {
                continue;
            }
            let forced = paused.is_some_and(|(p, _)| p == m) && extra_sent;
            if forced || sim.rng.gen_bool(0.02) {
                let seq = sent[&m] + 1;
                let len = message_len(m, seq);
                match node.dare.send(&message_bytes(seed, m, seq, len)) {
                    Ok(got) if got == seq => *sent.get_mut(&m).expect("sender") = seq,
                    Ok(got) => outcome
                        .violations
                        .push(format!("node {m}: send numbered {got}, expected {seq}")),
                    Err(e) => outcome
                        .violations
                        .push(format!("node {m}: send {seq} refused: {e}")),
                }
            }
        }
        sim.round();
        let correct: Vec<NodeId> = members
            .iter()
            .copied()
            .filter(|m| !lost.contains(m))
            .collect();
        let settled = correct.iter().any(|c| {
            let leader = &sim.nodes[c].dare;
            leader.role() == DareRole::Leader
                && correct.iter().all(|o| {
                    let d = &sim.nodes[o].dare;
                    d.term() == leader.term() && d.leader() == Some(*c)
                })
        });
        // Every correct member has delivered all that any leader committed.
        let committed_max = sim
            .nodes
            .values()
            .map(|x| x.committed_max)
            .max()
            .unwrap_or(0);
        let caught_up = correct
            .iter()
            .all(|c| sim.nodes[c].dare.applied() >= committed_max);
        let done = plan.is_empty()
            && paused.is_none()
            && settled
            && caught_up
            && sends
                .iter()
                .filter(|(m, _)| correct.contains(m))
                .all(|(m, &c)| sent[m] == c as u64)
            && correct.iter().all(|c| {
                let d = &sim.nodes[c].delivered;
                correct
                    .iter()
                    .all(|s| d.iter().filter(|x| x.sender == *s).count() as u64 == sent[s])
            });
        if done {
            break;
        }
        if sim.rounds() >= DARE_SIM_ROUNDS_MAX {
            outcome.violations.push(format!(
                "hung: {} rounds without every correct member delivering every correct \
                 sender's messages",
                sim.rounds()
            ));
            break;
        }
    }
    outcome.rounds = sim.rounds();
    if std::env::var_os("DARE_SIM_DEBUG").is_some() {
        for (id, node) in &sim.nodes {
            eprintln!(
                "node {id}: crashed {} role {:?} term {} applied {} pending {} stopped {:?} events {:?}",
                node.crashed,
                node.dare.role(),
                node.dare.term(),
                node.dare.applied(),
                node.dare.pending(),
                node.dare.stopped(),
                node.events.iter().filter(|e| !matches!(e, DareEvent::Committed { .. })).collect::<Vec<_>>()
            );
        }
    }
    outcome.trace_hash = sim.trace_hash();
    let correct: BTreeSet<NodeId> = members
        .iter()
        .copied()
        .filter(|m| !lost.contains(m))
        .collect();
    check(seed, &sim, &correct, &sent, &mut outcome);
    outcome
}

/// The checker of the module docs, over the members' deliveries and events.
pub fn check(
    seed: u64,
    sim: &SimCluster<DareSimNode>,
    correct: &BTreeSet<NodeId>,
    sent: &BTreeMap<NodeId, u64>,
    outcome: &mut DareSeedOutcome,
) {
    let v = &mut outcome.violations;
    // At most one leader per term.
    for (&id, node) in &sim.nodes {
        outcome.refused += node.refused;
        outcome.late_writes += node.late_writes;
        for (key, region, bytes) in &node.withdrawn {
            if region.to_vec(0, region.len()).ok().as_ref() != Some(bytes) {
                v.push(format!(
                    "node {id}: log region {key:#x} changed after it was withdrawn \
                     (a deposed leader's write landed)"
                ));
            }
        }
        for e in &node.errors {
            v.push(format!("node {id}: {e}"));
        }
        for e in &node.events {
            if let DareEvent::Elected { term } = e {
                if let Some(other) = outcome.leaders.insert(*term, id) {
                    v.push(format!(
                        "two leaders in term {term}: nodes {other} and {id}"
                    ));
                }
            }
        }
    }
    // Committed entries, as every leader reported them: one entry per index.
    let mut committed: BTreeMap<u64, (u64, NodeId, u64)> = BTreeMap::new();
    for (&id, node) in &sim.nodes {
        for e in &node.events {
            if let DareEvent::Committed {
                index,
                entry_term,
                sender,
                sender_seq,
            } = *e
            {
                let entry = (entry_term, sender, sender_seq);
                if let Some(prev) = committed.insert(index, entry) {
                    if prev != entry {
                        v.push(format!(
                            "index {index} committed as {prev:?} and later as {entry:?} \
                             (by node {id}): a committed entry changed across elections"
                        ));
                    }
                }
            }
        }
    }
    // One log order, deliveries match the committed entries and the senders' bytes.
    let lists: Vec<(NodeId, &Vec<DareDelivery>)> = sim
        .nodes
        .iter()
        .map(|(id, n)| (*id, &n.delivered))
        .collect();
    for (a, la) in &lists {
        for d in la.iter() {
            let want = (d.term, d.sender, d.sender_seq);
            if committed.get(&d.index).is_some_and(|c| *c != want) {
                v.push(format!(
                    "node {a} delivered {want:?} at index {}, committed there: {:?}",
                    d.index, committed[&d.index]
                ));
            }
            let len = message_len(d.sender, d.sender_seq);
            if d.payload != message_bytes(seed, d.sender, d.sender_seq, len) {
                v.push(format!(
                    "node {a}: message {} of node {} has other bytes than were sent",
                    d.sender_seq, d.sender
                ));
            }
        }
        for (b, lb) in &lists {
            if a >= b {
                continue;
            }
            let k = la.len().min(lb.len());
            let key = |d: &DareDelivery| (d.index, d.term, d.sender, d.sender_seq);
            if let Some(i) = (0..k).find(|&i| key(&la[i]) != key(&lb[i])) {
                v.push(format!(
                    "nodes {a} and {b} disagree at delivery {i}: {:?} vs {:?}",
                    key(&la[i]),
                    key(&lb[i])
                ));
            }
        }
    }
    // Nothing committed is lost, and correct senders' messages all arrive.
    for c in correct {
        let node = &sim.nodes[c];
        let got: BTreeSet<(NodeId, u64)> = node
            .delivered
            .iter()
            .map(|d| (d.sender, d.sender_seq))
            .collect();
        for (index, (_, s, seq)) in &committed {
            if !got.contains(&(*s, *seq)) {
                v.push(format!(
                    "correct node {c} never delivered committed index {index} ({s}, {seq})"
                ));
            }
        }
        for s in correct {
            for seq in 1..=sent[s] {
                if !got.contains(&(*s, seq)) {
                    v.push(format!(
                        "correct node {c} never delivered message {seq} of correct node {s}"
                    ));
                }
            }
        }
        outcome.deliveries += node.delivered.len();
    }
}
