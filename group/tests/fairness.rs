//! Fairness across subgroups (Spindle III): a quiet subgroup's message is not held behind
//! a busy subgroup's backlog. A 1 KiB "ping" subgroup beside a subgroup whose window is
//! full of 65,000-byte messages, on the sim fabric, counted in steps and bytes (no time):
//! the receiver delivers the ping in the first step after it landed, before any of that
//! step's bulk bytes, and no step copies more than the byte budget (plus one message) of
//! the bulk backlog. Both delivery modes; the seed is printed on failure.

mod common;

use common::{payload, subgroup_spec, Sim};
use spindle_group::{DeliveryMode, Layout, SubgroupId, Techniques, DELIVERY_STEP_BYTES_MAX};
use spindle_transport_rdma::NodeId;

/// The busy subgroup and its message size.
const BULK: SubgroupId = 1;
const BULK_BYTES: usize = 65_000;
/// Its window: the backlog the receiver finds (about 2 MB, eight budgets).
const BULK_WINDOW: usize = 32;
/// The quiet subgroup and its message size.
const PING: SubgroupId = 2;
const PING_BYTES: usize = 1024;
/// Pings sent one after another while the backlog waits (each in its own step).
const PINGS: u64 = 3;
/// Node 1 writes both subgroups; node 2 receives them.
const WRITER: NodeId = 1;
const RECEIVER: NodeId = 2;
/// Bound on the steps any loop of the test takes (a hang fails, it does not spin).
const STEPS_MAX: usize = 10_000;

fn layout(mode: DeliveryMode) -> Layout {
    let sg = |id, window_slots, slot_payload_bytes| {
        subgroup_spec(
            id,
            vec![WRITER, RECEIVER],
            vec![WRITER],
            mode,
            window_slots,
            slot_payload_bytes,
        )
    };
    Layout {
        subgroups: vec![sg(BULK, BULK_WINDOW, 64 << 10), sg(PING, 8, PING_BYTES)],
    }
}

/// What one step of the receiver delivered: per batch, in the order polled, its
/// subgroup, its messages' sender seqs and its bytes.
type Step = Vec<(SubgroupId, Vec<u64>, usize)>;

/// Steps node `n` once and takes its deliveries, checking each payload.
fn step(sim: &mut Sim, n: NodeId) -> Step {
    let seed = sim.seed;
    sim.cluster.step_node(n);
    let engine = &mut sim.cluster.nodes.get_mut(&n).expect("node").engine;
    let mut out = Vec::new();
    while let Some(b) = engine.poll_delivery() {
        let mut seqs = Vec::new();
        let mut bytes = 0;
        for m in b.iter() {
            let len = if b.subgroup() == BULK {
                BULK_BYTES
            } else {
                PING_BYTES
            };
            assert_eq!(
                m.payload,
                &payload(b.subgroup(), m.sender, m.sender_seq, len)[..],
                "seed {seed}: node {n}: payload of {}/{}",
                b.subgroup(),
                m.sender_seq
            );
            seqs.push(m.sender_seq);
            bytes += m.payload.len();
        }
        out.push((b.subgroup(), seqs, bytes));
    }
    out
}

/// Node 1 steps (its own deliveries dropped) until nothing is left to push; then the
/// fabric applies every write in flight. Node 2 does not step meanwhile.
fn writer_pushes_and_fabric_settles(sim: &mut Sim) {
    for _ in 0..STEPS_MAX {
        let work = sim.cluster.step_node(WRITER);
        let engine = &mut sim.cluster.nodes.get_mut(&WRITER).expect("node").engine;
        while engine.poll_delivery().is_some() {}
        if !work {
            break;
        }
    }
    sim.cluster.world.run_until_idle(STEPS_MAX);
}

/// Bytes of `subgroup` a step delivered.
fn bytes_of(step: &Step, subgroup: SubgroupId) -> usize {
    step.iter().filter(|b| b.0 == subgroup).map(|b| b.2).sum()
}

fn quiet_subgroup_is_not_held_behind_a_busy_one(mode: DeliveryMode, seed: u64) {
    let mut sim = Sim::new(seed, &[WRITER, RECEIVER], layout(mode), Techniques::all());
    let mut sent = 0;
    while sim.send(WRITER, BULK, BULK_BYTES) {
        sent += 1;
    }
    assert_eq!(sent, BULK_WINDOW, "seed {seed}: the bulk window fills");
    writer_pushes_and_fabric_settles(&mut sim);
    // The bound every step of the receiver keeps: one budget, plus the message that
    // crossed it.
    let step_bound = DELIVERY_STEP_BYTES_MAX + BULK_BYTES;
    let mut bulk_seqs = Vec::new();
    // The receiver's first step finds the whole backlog: it copies one budget of it.
    let first = step(&mut sim, RECEIVER);
    let b = bytes_of(&first, BULK);
    assert!(
        b > 0 && b <= step_bound,
        "seed {seed}: {mode:?}: first step delivered {b} bulk bytes (bound {step_bound})"
    );
    bulk_seqs.extend(first.iter().flat_map(|b| b.1.iter().copied()));
    // Pings land, one per step, while most of the backlog waits: in consecutive steps,
    // so the step's rotation starts once from each subgroup.
    for ping in 0..PINGS {
        assert!(
            sim.send(WRITER, PING, PING_BYTES),
            "seed {seed}: ping window"
        );
        writer_pushes_and_fabric_settles(&mut sim);
        let s = step(&mut sim, RECEIVER);
        // Delivered in the first step after it landed, in the step's first batch: no
        // bulk byte of this step is copied ahead of it.
        assert_eq!(
            s.first().map(|b| (b.0, b.1.clone())),
            Some((PING, vec![ping])),
            "seed {seed}: {mode:?}: ping {ping} is the first delivery of the step after it \
             landed; the step delivered {:?}",
            s.iter().map(|b| (b.0, b.1.len(), b.2)).collect::<Vec<_>>()
        );
        let b = bytes_of(&s, BULK);
        assert!(
            b > 0 && b <= step_bound,
            "seed {seed}: {mode:?}: ping {ping}'s step delivered {b} bulk bytes (bound \
             {step_bound})"
        );
        bulk_seqs.extend(
            s.iter()
                .filter(|b| b.0 == BULK)
                .flat_map(|b| b.1.iter().copied()),
        );
    }
    // The rest of the backlog: every step within the bound, every message once, in
    // order.
    let mut steps = 1 + PINGS as usize;
    while bulk_seqs.len() < BULK_WINDOW && steps < STEPS_MAX {
        let s = step(&mut sim, RECEIVER);
        let b = bytes_of(&s, BULK);
        assert!(
            b <= step_bound,
            "seed {seed}: {mode:?}: step {steps} delivered {b} bulk bytes (bound {step_bound})"
        );
        assert_eq!(bytes_of(&s, PING), 0, "seed {seed}: one ping only");
        bulk_seqs.extend(s.iter().flat_map(|b| b.1.iter().copied()));
        steps += 1;
    }
    assert_eq!(
        bulk_seqs,
        (0..BULK_WINDOW as u64).collect::<Vec<_>>(),
        "seed {seed}: {mode:?}: the backlog delivered once, in order"
    );
    // The budget, not the message count, split the backlog.
    let min_steps = (BULK_WINDOW * BULK_BYTES).div_ceil(step_bound);
    assert!(
        steps >= min_steps,
        "seed {seed}: {mode:?}: {steps} steps for the backlog, at least {min_steps} expected"
    );
}

#[test]
fn unordered_ping_is_delivered_before_a_busy_subgroups_backlog() {
    for seed in 1..=8 {
        quiet_subgroup_is_not_held_behind_a_busy_one(DeliveryMode::Unordered, seed);
    }
}

#[test]
fn atomic_ping_is_delivered_before_a_busy_subgroups_backlog() {
    for seed in 1..=8 {
        quiet_subgroup_is_not_held_behind_a_busy_one(DeliveryMode::Atomic, seed);
    }
}
