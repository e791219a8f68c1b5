//! DARE across a view change, seeded on the sim fabric: the hand-off of
//! [`crate::dare::handoff_source`] between two instances of a group.
//!
//! [`run_handoff_seed`] draws 3 or 5 members, a ring, a window, link delays (lagging
//! announcements on half the seeds, a member whose incoming writes are slow on half) and
//! how many messages each member sends; runs the
//! first instance until a drawn time — crashing one member (the leader of the moment or
//! another) on half the seeds — then quiesces it as a view change would: every survivor
//! stops stepping and reports its log, the chosen log's entries are shipped to every
//! survivor, which delivers what it lacks. A second instance over the survivors (a new
//! view: new world, new regions, terms from 1) takes each survivor's undelivered
//! messages and a few new ones, and runs until every survivor delivered all of them.
//!
//! The checker asserts: every survivor ends the first instance at the same index with
//! the same deliveries, among them every entry any leader committed; what the crashed
//! member delivered is a prefix of that; at the
//! end all survivors delivered one list; each survivor's messages are delivered exactly
//! once each, in the order sent, across both instances; a crashed sender's messages at
//! most once each, a prefix of what it sent.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_transport_rdma::sim::{DeliveryKind, Rule, SimConfig, SimWorld, Verdict};
use spindle_transport_rdma::NodeId;

use super::{current_leader, dare_cluster, DareSimNode, DARE_SIM_ROUNDS_MAX};
use crate::dare::{handoff_source, DareConfig, DareEvent};
use crate::testkit::SimCluster;

/// Most messages one member sends in each instance of a hand-off run.
pub const DARE_HANDOFF_MESSAGES_MAX: usize = 10;

/// What one seeded hand-off run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DareHandoffOutcome {
    /// The seed.
    pub seed: u64,
    /// Members of the first instance.
    pub members: Vec<NodeId>,
    /// The member crashed in the first instance, if any.
    pub crashed: Option<NodeId>,
    /// The hand-off: the source's node and the range `(from, to]` shipped.
    pub handoff: Option<(NodeId, u64, u64)>,
    /// Entries the survivors delivered from the shipped range (catching up), summed.
    pub caught_up: usize,
    /// Messages delivered by each survivor in the second instance.
    pub second_deliveries: usize,
    /// Broken checks, in words; empty if the run is correct.
    pub violations: Vec<String>,
}

fn payload(seed: u64, sender: NodeId, k: usize) -> Vec<u8> {
    format!("{seed}:{sender}:{k}").into_bytes()
}

fn sim_config(rng: &mut ChaCha8Rng) -> SimConfig {
    SimConfig {
        link_delay_min_us: 1,
        link_delay_max_us: rng.gen_range(2..=200),
        ..SimConfig::default()
    }
}

fn lag(sim: &SimCluster<DareSimNode>, lag_us: u64) {
    if lag_us > 0 {
        sim.world.add_rule(Rule {
            from: None,
            to: None,
            kind: Some(DeliveryKind::Control),
            regions: None,
            after_us: sim.now_us(),
            until_us: u64::MAX,
            verdict: Verdict::Lag(lag_us),
        });
    }
}

/// Runs the seeded hand-off of the module docs. A panic inside (an invariant of the
/// core) comes back as a violation.
pub fn run_handoff_seed(seed: u64) -> DareHandoffOutcome {
    let mut outcome = DareHandoffOutcome {
        seed,
        members: Vec::new(),
        crashed: None,
        handoff: None,
        caught_up: 0,
        second_deliveries: 0,
        violations: Vec::new(),
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut o = outcome.clone();
        run(seed, &mut o);
        o
    }));
    match r {
        Ok(o) => o,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            outcome
                .violations
                .push(format!("an invariant failed: {what}"));
            outcome
        }
    }
}

fn run(seed: u64, o: &mut DareHandoffOutcome) {
    let v = |o: &mut DareHandoffOutcome, s: String| o.violations.push(s);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6861_6e64_6f66_6600);
    let n: u32 = [3, 5][rng.gen_range(0..2)];
    let members: Vec<NodeId> = (1..=n).collect();
    o.members = members.clone();
    let config = DareConfig {
        log_entries: [8usize, 64][rng.gen_range(0..2)],
        payload_bytes_max: 48,
        sender_window: rng.gen_range(1..=6),
        heartbeat_us: 300,
        election_timeout_us: 3_000,
    };
    let lag_us = if rng.gen_bool(0.5) {
        rng.gen_range(1..=2_000)
    } else {
        0
    };
    let counts: BTreeMap<NodeId, usize> = members
        .iter()
        .map(|&m| (m, rng.gen_range(0..=DARE_HANDOFF_MESSAGES_MAX)))
        .collect();
    // The view change comes a few rounds after a drawn number of messages were handed
    // over (traffic in flight), the crash (if any) after a smaller number.
    let total_first: usize = counts.values().sum();
    let stop_after = rng.gen_range(0..=total_first);
    let stop_rounds = rng.gen_range(0..40u64);
    let crash_at = rng
        .gen_bool(0.5)
        .then(|| (rng.gen_range(0..=stop_after), rng.gen_bool(0.5)));
    let world = SimWorld::new(seed, sim_config(&mut rng));
    let mut sim = match dare_cluster(world, &members, &config, seed, 1..40) {
        Ok(s) => s,
        Err(e) => return v(o, format!("set-up failed: {e}")),
    };
    lag(&sim, lag_us);
    // On half the seeds one member's incoming writes are slow: its log trails the
    // others', so the logs the hand-off chooses from differ.
    if rng.gen_bool(0.5) {
        let slow = members[rng.gen_range(0..members.len())];
        sim.world.add_rule(Rule {
            from: None,
            to: Some(slow),
            kind: Some(DeliveryKind::Write),
            regions: None,
            after_us: sim.now_us(),
            until_us: u64::MAX,
            verdict: Verdict::Delay(rng.gen_range(300..3_000)),
        });
    }
    // Every message each member handed over, by payload, in order.
    let mut sent: BTreeMap<NodeId, Vec<Vec<u8>>> = members.iter().map(|&m| (m, vec![])).collect();
    let mut handed = 0;
    let mut since_stop = 0;
    let mut deadline_rounds = None;
    loop {
        if let Some((at, leader)) = crash_at {
            if handed >= at && o.crashed.is_none() {
                let l = current_leader(&sim);
                let victim = if leader {
                    l
                } else {
                    l.map(|l| {
                        if l == members[0] {
                            members[1]
                        } else {
                            members[0]
                        }
                    })
                };
                if let Some(x) = victim {
                    sim.world.crash(x);
                    sim.nodes.get_mut(&x).expect("member").crashed = true;
                    o.crashed = Some(x);
                }
            }
        }
        for &m in &members {
            let node = sim.nodes.get_mut(&m).expect("member");
            let s = sent.get_mut(&m).expect("member");
            if !node.crashed
                && handed < stop_after
                && s.len() < counts[&m]
                && node.dare.can_send()
                && rng.gen_bool(0.3)
            {
                let p = payload(seed, m, s.len());
                match node.dare.send(&p) {
                    Ok(_) => {
                        s.push(p);
                        handed += 1;
                    }
                    Err(e) => return v(o, format!("node {m}: send refused: {e}")),
                }
            }
        }
        sim.round();
        // Stop once the drawn messages are handed over and a leader is elected (or after
        // a bound: windows full behind a crashed leader), and the drawn rounds passed.
        let stuck = deadline_rounds.is_some_and(|d| sim.rounds() >= d);
        if (handed >= stop_after && current_leader(&sim).is_some()) || stuck {
            since_stop += 1;
            if since_stop > stop_rounds {
                break;
            }
        } else if deadline_rounds.is_none() && sim.now_us() > 50_000 {
            deadline_rounds = Some(sim.rounds() + 1_000);
        }
        if sim.rounds() >= DARE_SIM_ROUNDS_MAX {
            return v(o, "first instance: too many rounds".into());
        }
    }
    // The view change: survivors quiesce (no more steps) and hand over.
    let survivors: Vec<NodeId> = members
        .iter()
        .copied()
        .filter(|m| Some(*m) != o.crashed)
        .collect();
    let reports: Vec<_> = survivors
        .iter()
        .map(|m| sim.nodes[m].dare.handoff_report())
        .collect();
    let (source, from, to) = match handoff_source(&reports) {
        Ok(Some(h)) => h,
        Ok(None) => return v(o, "no survivors".into()),
        Err(e) => return v(o, format!("hand-off: {e}; reports {reports:?}")),
    };
    o.handoff = Some((source, from, to));
    let entries = match sim.nodes[&source].dare.entries_since(from) {
        Ok(e) => e,
        Err(e) => return v(o, format!("hand-off: {e}; reports {reports:?}")),
    };
    for m in &survivors {
        let node = sim.nodes.get_mut(m).expect("member");
        let before = node.delivered.len();
        if let Err(e) = node.dare.catch_up(&entries) {
            return v(o, format!("node {m}: {e}; reports {reports:?}"));
        }
        while let Some(d) = node.dare.poll_delivery() {
            node.delivered.push(d);
        }
        o.caught_up += node.delivered.len() - before;
        if node.dare.applied() != to {
            v(
                o,
                format!(
                    "node {m} ended the first instance at {}, not {to}",
                    node.dare.applied()
                ),
            );
        }
    }
    let key = |d: &crate::dare::DareDelivery| (d.index, d.sender, d.sender_seq);
    let first: Vec<_> = sim.nodes[&survivors[0]].delivered.iter().map(key).collect();
    for m in &survivors[1..] {
        let other: Vec<_> = sim.nodes[m].delivered.iter().map(key).collect();
        if other != first {
            v(
                o,
                format!(
                    "survivors {} and {m} ended the first instance apart",
                    survivors[0]
                ),
            );
        }
    }
    // No committed entry is lost: every entry a leader of the first instance committed
    // (crashed ones included) is delivered there by every survivor.
    for (id, node) in &sim.nodes {
        for e in &node.events {
            if let DareEvent::Committed {
                index,
                sender,
                sender_seq,
                ..
            } = *e
            {
                if !first.contains(&(index, sender, sender_seq)) {
                    v(
                        o,
                        format!(
                            "entry {index} ({sender}, {sender_seq}) committed by node {id} was \
                         not delivered by the survivors"
                        ),
                    );
                }
            }
        }
    }
    if let Some(c) = o.crashed {
        let got: Vec<_> = sim.nodes[&c].delivered.iter().map(key).collect();
        if got.len() > first.len() || got[..] != first[..got.len()] {
            v(
                o,
                format!(
                    "crashed node {c} delivered what the survivors did not: {got:?} vs {first:?}"
                ),
            );
        }
    }
    // The next view: a new instance over the survivors, the undelivered messages again.
    let mut lists: BTreeMap<NodeId, Vec<Vec<u8>>> = BTreeMap::new();
    let mut pending: BTreeMap<NodeId, Vec<Vec<u8>>> = BTreeMap::new();
    for m in &survivors {
        let node = sim.nodes.remove(m).expect("member");
        lists.insert(
            *m,
            node.delivered.iter().map(|d| d.payload.clone()).collect(),
        );
        pending.insert(*m, node.dare.into_pending());
    }
    let crashed_list: Option<Vec<Vec<u8>>> = o.crashed.map(|c| {
        sim.nodes[&c]
            .delivered
            .iter()
            .map(|d| d.payload.clone())
            .collect()
    });
    drop(sim);
    let world = SimWorld::new(seed.wrapping_add(1), sim_config(&mut rng));
    let mut sim = match dare_cluster(world, &survivors, &config, seed.wrapping_add(1), 1..40) {
        Ok(s) => s,
        Err(e) => return v(o, format!("second set-up failed: {e}")),
    };
    lag(&sim, lag_us);
    let mut queue: BTreeMap<NodeId, Vec<Vec<u8>>> = BTreeMap::new();
    for m in &survivors {
        let mut q = pending.remove(m).unwrap_or_default();
        let more = rng.gen_range(0..=3);
        for _ in 0..more {
            let s = sent.get_mut(m).expect("member");
            let p = payload(seed, *m, s.len());
            s.push(p.clone());
            q.push(p);
        }
        q.reverse();
        queue.insert(*m, q);
    }
    let total: usize = queue.values().map(Vec::len).sum();
    loop {
        for m in &survivors {
            let node = sim.nodes.get_mut(m).expect("member");
            let q = queue.get_mut(m).expect("member");
            while node.dare.can_send() {
                let Some(p) = q.pop() else { break };
                if let Err(e) = node.dare.send(&p) {
                    return v(o, format!("node {m}: second send refused: {e}"));
                }
            }
        }
        sim.round();
        if survivors
            .iter()
            .all(|m| sim.nodes[m].delivered.len() == total)
        {
            break;
        }
        if sim.rounds() >= DARE_SIM_ROUNDS_MAX {
            return v(o, format!("second instance hung: {total} messages due"));
        }
    }
    o.second_deliveries = total;
    for m in &survivors {
        let l = lists.get_mut(m).expect("member");
        l.extend(sim.nodes[m].delivered.iter().map(|d| d.payload.clone()));
    }
    let one = &lists[&survivors[0]];
    for m in &survivors[1..] {
        if &lists[m] != one {
            v(
                o,
                format!(
                    "survivors {} and {m} delivered different lists",
                    survivors[0]
                ),
            );
        }
    }
    let prefix = |who: NodeId, l: &[Vec<u8>]| -> Vec<Vec<u8>> {
        let tag = format!("{seed}:{who}:").into_bytes();
        l.iter().filter(|p| p.starts_with(&tag)).cloned().collect()
    };
    for m in &members {
        let got = prefix(*m, one);
        let want = &sent[m];
        let ok = if Some(*m) == o.crashed {
            got.len() <= want.len() && got[..] == want[..got.len()]
        } else {
            &got == want
        };
        if !ok {
            v(
                o,
                format!(
                    "node {m}'s messages delivered as {} of {} sent, not once each in order",
                    got.len(),
                    want.len()
                ),
            );
        }
    }
    if let Some(cl) = crashed_list {
        if cl.len() > one.len() || cl[..] != one[..cl.len()] {
            v(
                o,
                "the crashed member's deliveries are not a prefix of the survivors'".into(),
            );
        }
    }
}
