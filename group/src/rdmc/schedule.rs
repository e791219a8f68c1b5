//! RDMC block schedules (RDMC §4.3–4.4) as pure functions of the member count, the block
//! count and (for one member's part) its rank.
//!
//! Rank 0 is the root: the only member that holds the message at step 0. A schedule is a
//! list of *steps*; in one step each member sends at most one block and receives at most
//! one block, and a member only sends a block it received in an earlier step (the root
//! has every block). Every member computes the same schedule from the same inputs, so a
//! receiver knows which block arrives from which peer before it arrives, and a sender
//! knows which block to send next and to whom, without any message about the schedule.
//!
//! | kind | steps for `k` blocks, `n` members |
//! |---|---|
//! | [`ScheduleKind::BinomialPipeline`] | `k + ceil(log2 n) - 1` (for `n` not a power of two: `k + floor(log2 n)`, see below) |
//! | [`ScheduleKind::Chain`] | `k + n - 2` |
//! | [`ScheduleKind::BinomialTree`] | `k * ceil(log2 n)` |
//! | [`ScheduleKind::Sequential`] | `k * (n - 1)` |
//!
//! (`n = 1` needs no step at all.)
//!
//! **Binomial pipeline** (Ganesan and Seshadri, as RDMC §4.4 states it): the `n = 2^l`
//! members are the vertices of an `l`-dimensional hypercube; in step `j` each member
//! exchanges a block with its neighbour along dimension `j % l`. The root sends block
//! `min(j, k - 1)`; every other member sends the highest-numbered block it received before
//! step `j` that its neighbour lacks, and nothing to the root.
//!
//! **Members beyond a power of two** (the "general case" RDMC omits for brevity): with
//! `N = 2^floor(log2 n)` there are `N` vertices; vertex `v` in `1..=n-N` is played by two
//! *twins*, ranks `v` and `v + N - 1`. The hypercube exchange runs between vertices as
//! above (a twinned vertex has a block if either twin has it). Inside a twinned vertex, in
//! every step, one twin sends the vertex's outgoing block (one that has it), the other
//! twin receives the incoming one, and the receiving twin forwards to the sending twin a
//! block it lacks; in a step without hypercube traffic the twins swap one block each way.
//! Each member still sends and receives at most one block per step. This takes exactly
//! `k + floor(log2 n)` steps — one more than the hypercube of `N` alone, as RDMC §4.3 says
//! ("the final receipt spreads over two asynchronous steps"), and equal to
//! `k + ceil(log2 n) - 1`, so one formula holds for every `n`. The tests check it for
//! every `n <= 130` and sampled `k <= 70`, and the property tests for random `n`, `k`.

use crate::{Error, Result};

/// Most members one RDMC group may have (the sender included): a root and as many
/// receivers as one endpoint may have peers.
pub const RDMC_MEMBERS_MAX: u32 = spindle_transport_rdma::PEERS_MAX as u32 + 1;
/// Most blocks one RDMC message may be split into.
pub const RDMC_BLOCKS_MAX: u32 = 1 << 16;
/// Most block transfers one computed schedule may hold (`members * blocks` bounds the
/// number of useful transfers; this caps the memory a schedule takes).
pub const SCHEDULE_TRANSFERS_MAX: usize = 1 << 24;

/// Which pattern of block transfers carries an RDMC message (RDMC §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ScheduleKind {
    /// The binomial pipeline over a hypercube (RDMC §4.4): the default.
    #[default]
    BinomialPipeline,
    /// A bucket brigade: rank `r` relays each block to rank `r + 1`.
    Chain,
    /// A binomial tree of whole messages, sent block by block: in stage `s`, every rank
    /// below `2^s` sends the message to the rank `2^s` above it.
    BinomialTree,
    /// The root sends the whole message to each receiver in turn.
    Sequential,
}

impl ScheduleKind {
    /// Every kind, the default first.
    pub const ALL: [ScheduleKind; 4] = [
        ScheduleKind::BinomialPipeline,
        ScheduleKind::Chain,
        ScheduleKind::BinomialTree,
        ScheduleKind::Sequential,
    ];

    /// The kind's name as the benchmarks print it (`binomial_pipeline`, `chain`,
    /// `binomial_tree`, `sequential`).
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::BinomialPipeline => "binomial_pipeline",
            ScheduleKind::Chain => "chain",
            ScheduleKind::BinomialTree => "binomial_tree",
            ScheduleKind::Sequential => "sequential",
        }
    }

    /// The kind named `name` (as [`ScheduleKind::name`] prints it).
    pub fn from_name(name: &str) -> Option<ScheduleKind> {
        ScheduleKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One block moving from one member to another in one step. Ranks index the RDMC group's
/// members; rank 0 is the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Transfer {
    /// The sending rank.
    pub from: u32,
    /// The receiving rank.
    pub to: u32,
    /// The block (0-based).
    pub block: u32,
}

/// One member's part of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankStep {
    /// `(peer rank, block)` this member sends in the step, if any.
    pub send: Option<(u32, u32)>,
    /// `(peer rank, block)` this member receives in the step, if any.
    pub recv: Option<(u32, u32)>,
}

/// A whole schedule: every transfer of every step, for one member count and block count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: ScheduleKind,
    members: u32,
    blocks: u32,
    steps: Vec<Vec<Transfer>>,
}

impl Schedule {
    /// Computes the schedule of `kind` for `members` ranks (the root included) and
    /// `blocks` blocks. Fails if `members` is 0 or above [`RDMC_MEMBERS_MAX`], `blocks`
    /// is 0 or above [`RDMC_BLOCKS_MAX`], or the schedule would exceed
    /// [`SCHEDULE_TRANSFERS_MAX`] transfers.
    pub fn new(kind: ScheduleKind, members: u32, blocks: u32) -> Result<Schedule> {
        if members == 0 || members > RDMC_MEMBERS_MAX {
            return Err(Error::Config(format!(
                "RDMC members ({members}) must lie between 1 and {RDMC_MEMBERS_MAX}"
            )));
        }
        if blocks == 0 || blocks > RDMC_BLOCKS_MAX {
            return Err(Error::Config(format!(
                "RDMC blocks ({blocks}) must lie between 1 and {RDMC_BLOCKS_MAX}"
            )));
        }
        // Every kind sends each block to each receiver exactly once.
        let transfers = (members as usize - 1) * blocks as usize;
        if transfers > SCHEDULE_TRANSFERS_MAX {
            return Err(Error::Config(format!(
                "an RDMC schedule of {members} members and {blocks} blocks has {transfers} \
                 transfers, above {SCHEDULE_TRANSFERS_MAX}; use larger blocks"
            )));
        }
        let steps = match kind {
            ScheduleKind::BinomialPipeline => binomial_pipeline(members, blocks),
            ScheduleKind::Chain => chain(members, blocks),
            ScheduleKind::BinomialTree => binomial_tree(members, blocks),
            ScheduleKind::Sequential => sequential(members, blocks),
        };
        Ok(Schedule {
            kind,
            members,
            blocks,
            steps,
        })
    }

    /// The kind.
    pub fn kind(&self) -> ScheduleKind {
        self.kind
    }

    /// The member count (the root included).
    pub fn members(&self) -> u32 {
        self.members
    }

    /// The block count.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// How many steps the schedule takes.
    pub fn step_count(&self) -> usize {
        self.steps.len()
    }

    /// The transfers of step `step` (empty past the end).
    pub fn transfers(&self, step: usize) -> &[Transfer] {
        self.steps.get(step).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every transfer, step by step.
    pub fn steps(&self) -> &[Vec<Transfer>] {
        &self.steps
    }

    /// Rank `rank`'s part of every step (one entry per step, idle steps included).
    pub fn rank_steps(&self, rank: u32) -> Vec<RankStep> {
        self.steps
            .iter()
            .map(|step| {
                let mut part = RankStep::default();
                for t in step {
                    if t.from == rank {
                        part.send = Some((t.to, t.block));
                    }
                    if t.to == rank {
                        part.recv = Some((t.from, t.block));
                    }
                }
                part
            })
            .collect()
    }

    /// The block transfers rank `rank` sends, in step order.
    pub fn sends_of(&self, rank: u32) -> Vec<Transfer> {
        self.steps
            .iter()
            .flatten()
            .filter(|t| t.from == rank)
            .copied()
            .collect()
    }

    /// The block transfers rank `rank` receives, in step order.
    pub fn receives_of(&self, rank: u32) -> Vec<Transfer> {
        self.steps
            .iter()
            .flatten()
            .filter(|t| t.to == rank)
            .copied()
            .collect()
    }
}

/// Rank `rank`'s part of the `kind` schedule for `members` ranks and `blocks` blocks: the
/// pure function of (member count, my rank, block count) every member evaluates.
pub fn rank_schedule(
    kind: ScheduleKind,
    members: u32,
    rank: u32,
    blocks: u32,
) -> Result<Vec<RankStep>> {
    if rank >= members {
        return Err(Error::Config(format!(
            "RDMC rank {rank} is not below the member count {members}"
        )));
    }
    Ok(Schedule::new(kind, members, blocks)?.rank_steps(rank))
}

/// `floor(log2 n)` for `n >= 1`.
pub fn log2_floor(n: u32) -> u32 {
    assert!(n >= 1, "log2 of 0");
    31 - n.leading_zeros()
}

/// `ceil(log2 n)` for `n >= 1`.
pub fn log2_ceil(n: u32) -> u32 {
    let floor = log2_floor(n);
    if n.is_power_of_two() {
        floor
    } else {
        floor + 1
    }
}

/// The step count the papers give for `kind` (the table in this module's docs), which the
/// computed schedules take exactly.
pub fn step_count_bound(kind: ScheduleKind, members: u32, blocks: u32) -> usize {
    let (n, k) = (members as usize, blocks as usize);
    if n <= 1 {
        return 0;
    }
    match kind {
        ScheduleKind::BinomialPipeline => k + log2_ceil(members) as usize - 1,
        ScheduleKind::Chain => k + n - 2,
        ScheduleKind::BinomialTree => k * log2_ceil(members) as usize,
        ScheduleKind::Sequential => k * (n - 1),
    }
}

fn chain(n: u32, k: u32) -> Vec<Vec<Transfer>> {
    if n <= 1 {
        return Vec::new();
    }
    let total = (k + n - 2) as usize;
    (0..total as u32)
        .map(|j| {
            (0..n - 1)
                .filter(|&r| j >= r && j - r < k)
                .map(|r| Transfer {
                    from: r,
                    to: r + 1,
                    block: j - r,
                })
                .collect()
        })
        .collect()
}

fn sequential(n: u32, k: u32) -> Vec<Vec<Transfer>> {
    (0..k as usize * (n as usize).saturating_sub(1))
        .map(|j| {
            let j = j as u32;
            vec![Transfer {
                from: 0,
                to: 1 + j / k,
                block: j % k,
            }]
        })
        .collect()
}

fn binomial_tree(n: u32, k: u32) -> Vec<Vec<Transfer>> {
    if n <= 1 {
        return Vec::new();
    }
    let stages = log2_ceil(n);
    let mut steps = Vec::with_capacity((stages * k) as usize);
    for stage in 0..stages {
        let half = 1u32 << stage;
        for block in 0..k {
            steps.push(
                (0..half.min(n))
                    .filter(|&r| r + half < n)
                    .map(|r| Transfer {
                        from: r,
                        to: r + half,
                        block,
                    })
                    .collect(),
            );
        }
    }
    steps
}

/// Which blocks each rank holds, as one bit per block.
struct Holdings {
    words_per_rank: usize,
    bits: Vec<u64>,
}

impl Holdings {
    fn new(n: u32, k: u32) -> Holdings {
        let words_per_rank = (k as usize).div_ceil(64);
        let mut h = Holdings {
            words_per_rank,
            bits: vec![0; words_per_rank * n as usize],
        };
        for b in 0..k {
            h.set(0, b);
        }
        h
    }
    fn has(&self, rank: u32, block: u32) -> bool {
        let w = rank as usize * self.words_per_rank + block as usize / 64;
        self.bits[w] & (1 << (block % 64)) != 0
    }
    fn set(&mut self, rank: u32, block: u32) {
        let w = rank as usize * self.words_per_rank + block as usize / 64;
        self.bits[w] |= 1 << (block % 64);
    }
    /// The highest block `a` holds (or the union of `a` and `a2`) that `lacks` (and
    /// `lacks2`) does not hold.
    fn highest_missing(&self, k: u32, have: &[u32], lack: &[u32]) -> Option<u32> {
        (0..k).rev().find(|&b| {
            have.iter().any(|&r| self.has(r, b)) && lack.iter().all(|&r| !self.has(r, b))
        })
    }
    fn complete(&self, rank: u32, k: u32) -> bool {
        (0..k).all(|b| self.has(rank, b))
    }
}

/// One step under construction: who already sends and receives in it.
struct StepBuilder {
    sends: Vec<bool>,
    recvs: Vec<bool>,
    transfers: Vec<Transfer>,
}

impl StepBuilder {
    fn new(n: u32) -> StepBuilder {
        StepBuilder {
            sends: vec![false; n as usize],
            recvs: vec![false; n as usize],
            transfers: Vec::new(),
        }
    }
    fn push(&mut self, from: u32, to: u32, block: u32) {
        // Invariant: a rank sends and receives at most one block per step.
        assert!(!self.sends[from as usize] && !self.recvs[to as usize]);
        self.sends[from as usize] = true;
        self.recvs[to as usize] = true;
        self.transfers.push(Transfer { from, to, block });
    }
}

fn binomial_pipeline(n: u32, k: u32) -> Vec<Vec<Transfer>> {
    if n <= 1 {
        return Vec::new();
    }
    let l = log2_floor(n);
    let vertices = 1u32 << l;
    // Twins: vertex v in 1..=n-N is played by ranks v and v + N - 1.
    let twin_of = |v: u32| -> Option<u32> {
        let t = v + vertices - 1;
        (v != 0 && t < n).then_some(t)
    };
    let ranks_of = |v: u32| -> Vec<u32> {
        match twin_of(v) {
            Some(t) => vec![v, t],
            None => vec![v],
        }
    };
    let mut held = Holdings::new(n, k);
    let mut steps = Vec::new();
    let mut j: u32 = 0;
    // Each step moves at least one block until every rank is complete (checked below),
    // so this loop ends within (n - 1) * k steps.
    let steps_max = (n as usize) * (k as usize) + 64;
    while !(0..n).all(|r| held.complete(r, k)) {
        assert!(
            steps.len() < steps_max,
            "binomial pipeline made no progress"
        );
        let mut step = StepBuilder::new(n);
        // Hypercube exchanges between vertices, decided on the holdings before the step.
        let dim = if l == 0 { 0 } else { j % l };
        // Per vertex: the block it sends (and to which vertex).
        let mut out: Vec<Option<(u32, u32)>> = vec![None; vertices as usize];
        if l > 0 {
            for v in 0..vertices {
                let w = v ^ (1 << dim);
                if w == 0 {
                    continue;
                }
                let block = if v == 0 {
                    let preferred = j.min(k - 1);
                    if ranks_of(w).iter().all(|&r| !held.has(r, preferred)) {
                        Some(preferred)
                    } else {
                        held.highest_missing(k, &[0], &ranks_of(w))
                    }
                } else {
                    held.highest_missing(k, &ranks_of(v), &ranks_of(w))
                };
                if let Some(b) = block {
                    out[v as usize] = Some((w, b));
                }
            }
        }
        // Per vertex, which twin sends the outgoing block.
        let mut sender_rank: Vec<Option<u32>> = vec![None; vertices as usize];
        let mut receiver_rank: Vec<Option<u32>> = vec![None; vertices as usize];
        for v in 0..vertices {
            let incoming = if l > 0 {
                let w = v ^ (1 << dim);
                out[w as usize].map(|(_, b)| b)
            } else {
                None
            };
            match twin_of(v) {
                None => {
                    sender_rank[v as usize] = out[v as usize].map(|_| v);
                    receiver_rank[v as usize] = incoming.map(|_| v);
                }
                Some(t) => {
                    let (s, r) = match out[v as usize] {
                        Some((_, b)) => {
                            let (a_has, t_has) = (held.has(v, b), held.has(t, b));
                            // Prefer as sender the twin the other has nothing for, so
                            // the receiving twin can forward something useful.
                            let a_gives = held.highest_missing(k, &[v], &[t]).is_some();
                            let t_gives = held.highest_missing(k, &[t], &[v]).is_some();
                            if a_has && t_has {
                                if t_gives && !a_gives {
                                    (v, t)
                                } else {
                                    (t, v)
                                }
                            } else if a_has {
                                (v, t)
                            } else {
                                (t, v)
                            }
                        }
                        None => {
                            // No outgoing block: the incoming one goes to the twin that
                            // holds fewer blocks.
                            let count = |r: u32| (0..k).filter(|&b| held.has(r, b)).count();
                            if count(v) <= count(t) {
                                (t, v)
                            } else {
                                (v, t)
                            }
                        }
                    };
                    sender_rank[v as usize] = out[v as usize].map(|_| s);
                    receiver_rank[v as usize] = incoming.map(|_| r);
                }
            }
        }
        let before = Holdings {
            words_per_rank: held.words_per_rank,
            bits: held.bits.clone(),
        };
        for v in 0..vertices {
            if let Some((w, b)) = out[v as usize] {
                let from = sender_rank[v as usize].expect("a sending vertex has a sender");
                let to = receiver_rank[w as usize].expect("a receiving vertex has a receiver");
                step.push(from, to, b);
            }
        }
        // Inside twinned vertices: forward what one twin lacks.
        for v in 1..vertices {
            let Some(t) = twin_of(v) else { continue };
            for (a, b) in [(v, t), (t, v)] {
                if step.sends[a as usize] || step.recvs[b as usize] {
                    continue;
                }
                if let Some(block) = before.highest_missing(k, &[a], &[b]) {
                    step.push(a, b, block);
                }
            }
        }
        let step = step.transfers;
        for tr in &step {
            // Invariant: a rank only sends a block it held before the step.
            assert!(before.has(tr.from, tr.block));
            held.set(tr.to, tr.block);
        }
        steps.push(step);
        j += 1;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Replays a schedule and checks the rules every schedule must keep; returns nothing,
    /// panics with the broken rule.
    fn check(s: &Schedule) {
        let (n, k) = (s.members(), s.blocks());
        let mut held = Holdings::new(n, k);
        let mut received = vec![0u32; (n * k) as usize];
        for (j, step) in s.steps().iter().enumerate() {
            let mut sends = vec![0; n as usize];
            let mut recvs = vec![0; n as usize];
            for t in step {
                assert!(t.from < n && t.to < n && t.block < k, "{t:?} out of range");
                assert_ne!(t.from, t.to, "step {j}: {t:?} sends to itself");
                assert!(
                    held.has(t.from, t.block),
                    "step {j}: {t:?} sends a block it lacks"
                );
                sends[t.from as usize] += 1;
                recvs[t.to as usize] += 1;
            }
            assert!(
                sends.iter().all(|&c| c <= 1),
                "step {j}: a rank sends twice"
            );
            assert!(
                recvs.iter().all(|&c| c <= 1),
                "step {j}: a rank receives twice"
            );
            for t in step {
                held.set(t.to, t.block);
                received[(t.to * k + t.block) as usize] += 1;
            }
        }
        for r in 1..n {
            for b in 0..k {
                assert_eq!(
                    received[(r * k + b) as usize],
                    1,
                    "rank {r} got block {b} not once"
                );
            }
        }
        for b in 0..k {
            assert_eq!(received[b as usize], 0, "the root received block {b}");
        }
    }

    #[test]
    fn paper_step_counts_exact() {
        for kind in ScheduleKind::ALL {
            for n in [1u32, 2, 4, 8, 16, 32] {
                for k in [1u32, 2, 3, 7, 16] {
                    let s = Schedule::new(kind, n, k).unwrap();
                    check(&s);
                    assert_eq!(
                        s.step_count(),
                        step_count_bound(kind, n, k),
                        "{kind:?} n={n} k={k}"
                    );
                }
            }
        }
    }

    #[test]
    fn binomial_pipeline_non_powers_of_two_take_one_extra_step() {
        for n in 2u32..=130 {
            for k in [1u32, 2, 3, 5, 8, 13, 33, 70] {
                let s = Schedule::new(ScheduleKind::BinomialPipeline, n, k).unwrap();
                check(&s);
                let steps = (k + log2_floor(n) - 1) as usize + usize::from(!n.is_power_of_two());
                assert_eq!(s.step_count(), steps, "n={n} k={k}");
                assert_eq!(
                    s.step_count(),
                    step_count_bound(ScheduleKind::BinomialPipeline, n, k)
                );
            }
        }
    }

    #[test]
    fn rank_schedule_matches_whole_schedule() {
        let s = Schedule::new(ScheduleKind::BinomialPipeline, 6, 4).unwrap();
        let parts = rank_schedule(ScheduleKind::BinomialPipeline, 6, 3, 4).unwrap();
        assert_eq!(parts.len(), s.step_count());
        let sent: Vec<_> = parts.iter().filter_map(|p| p.send).collect();
        assert_eq!(sent.len(), s.sends_of(3).len());
        assert!(rank_schedule(ScheduleKind::Chain, 3, 3, 1).is_err());
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(Schedule::new(ScheduleKind::Chain, 0, 1).is_err());
        assert!(Schedule::new(ScheduleKind::Chain, 2, 0).is_err());
        assert!(Schedule::new(ScheduleKind::Chain, RDMC_MEMBERS_MAX + 1, 1).is_err());
        assert!(Schedule::new(ScheduleKind::Chain, 2, RDMC_BLOCKS_MAX + 1).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn every_receiver_gets_every_block_once(kind_i in 0usize..4, n in 1u32..80, k in 1u32..48) {
            let kind = ScheduleKind::ALL[kind_i];
            let s = Schedule::new(kind, n, k).unwrap();
            check(&s);
            prop_assert_eq!(s.step_count(), step_count_bound(kind, n, k));
        }
    }
}
