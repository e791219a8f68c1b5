//! Large messages in a subgroup's total order (Derecho §3.6) over the deterministic
//! simulated fabric: messages above the slot go by the senders' RDMC groups and take
//! their turn in the round-robin order of the small ones. Many seeds, every schedule,
//! overlapping atomic and unordered subgroups; every delivery is checked as it happens
//! (stability: every member received — for a large message, completed — it first;
//! payload; round-robin index) and every run at its end (one sequence per subgroup,
//! sender order, no gaps or duplicates, quiescence).

mod common;

use common::{overlapping_layout, Sim, PAYLOAD_BYTES_MIN};
use rand::Rng;
use spindle_group::rdmc::{RdmcConfig, ScheduleKind};
use spindle_group::{Error, Layout, Techniques};

/// Seeds of the mixed-size run.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=24;
/// Messages each sender sends per subgroup.
const MESSAGES_PER_SENDER: usize = 30;
/// Give-up bound for a run to settle (rounds, not time).
const ROUNDS_MAX: usize = 200_000;
/// The largest message of the test subgroups.
const MESSAGE_BYTES_MAX: usize = 20_000;

fn rdmc_for(seed: u64) -> RdmcConfig {
    let schedule = match seed % 4 {
        0 => ScheduleKind::BinomialPipeline,
        1 => ScheduleKind::Chain,
        2 => ScheduleKind::BinomialTree,
        _ => ScheduleKind::Sequential,
    };
    RdmcConfig {
        block_bytes: 512 << (seed % 4),
        message_bytes_max: MESSAGE_BYTES_MAX,
        schedule,
        window_messages: 1 + (seed % 3) as usize,
    }
}

fn large_layout(seed: u64) -> Layout {
    let mut layout = overlapping_layout(4 + (seed % 7) as usize, 64 + (seed % 3) as usize * 40);
    for sg in &mut layout.subgroups {
        sg.rdmc = Some(rdmc_for(seed));
    }
    layout
}

/// One seeded run: senders send bursts of small and large messages (about a third large).
fn run(seed: u64, techniques: Techniques) -> Sim {
    let layout = large_layout(seed);
    let mut sim = Sim::new(seed, &[1, 2, 3], layout.clone(), techniques);
    let mut plan: Vec<(u32, u32, usize)> = Vec::new();
    for spec in &layout.subgroups {
        for s in &spec.senders {
            plan.push((spec.id, *s, MESSAGES_PER_SENDER));
        }
    }
    let mut rounds = 0;
    while plan.iter().any(|p| p.2 > 0) {
        rounds += 1;
        assert!(rounds < ROUNDS_MAX, "seed {seed}: sending did not finish");
        for p in plan.iter_mut() {
            if p.2 == 0 || sim.cluster.rng.gen_range(0..100) >= 30 {
                continue;
            }
            let slot = sim.spec(p.0).slot_payload_bytes;
            let len = if sim.cluster.rng.gen_range(0..3) == 0 {
                sim.cluster.rng.gen_range(slot + 1..=MESSAGE_BYTES_MAX)
            } else {
                sim.cluster.rng.gen_range(PAYLOAD_BYTES_MIN..=slot)
            };
            if sim.send(p.1, p.0, len) {
                p.2 -= 1;
            }
        }
        sim.round();
    }
    sim.settle(ROUNDS_MAX);
    sim.check_final();
    sim.check_quiescent();
    sim
}

#[test]
fn small_and_large_messages_keep_one_order_on_every_seed() {
    for seed in SEEDS {
        let techniques = if seed % 2 == 0 {
            Techniques::all()
        } else {
            Techniques::none()
        };
        let sim = run(seed, techniques);
        for spec in &sim.layout.subgroups {
            let large = sim
                .sent
                .iter()
                .filter(|((sg, _), _)| *sg == spec.id)
                .flat_map(|(_, v)| v.values())
                .filter(|len| **len > spec.slot_payload_bytes)
                .count();
            assert!(
                large > 0,
                "seed {seed}: subgroup {} sent no large message",
                spec.id
            );
            assert_eq!(
                sim.sent_in(spec.id),
                spec.senders.len() * MESSAGES_PER_SENDER,
                "seed {seed}: everything was sent"
            );
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_large_run() {
    let a = run(5, Techniques::all());
    let b = run(5, Techniques::all());
    assert_eq!(a.delivered, b.delivered, "seed 5: deliveries differ");
    assert_eq!(
        a.cluster.trace_hash(),
        b.cluster.trace_hash(),
        "seed 5: traces differ"
    );
}

#[test]
fn a_message_above_the_largest_is_a_clear_error_and_above_the_slot_without_rdmc_too() {
    let layout = large_layout(1);
    let sim = Sim::new(1, &[1, 2, 3], layout, Techniques::all());
    let sender = sim.engine(1).sender(10).unwrap();
    assert_eq!(sender.message_bytes_max(), MESSAGE_BYTES_MAX);
    let err = sender
        .try_send(&vec![7; MESSAGE_BYTES_MAX + 1])
        .unwrap_err();
    assert!(
        matches!(err, Error::MessageTooLarge { subgroup: 10, len, max }
            if len == MESSAGE_BYTES_MAX + 1 && max == MESSAGE_BYTES_MAX),
        "{err:?}"
    );
    assert!(err.to_string().contains("message_bytes_max"), "{err}");
    let plain = Sim::new(1, &[1, 2, 3], overlapping_layout(4, 64), Techniques::all());
    let sender = plain.engine(1).sender(10).unwrap();
    assert_eq!(sender.message_bytes_max(), 64);
    assert!(matches!(
        sender.try_send(&[1; 65]),
        Err(Error::PayloadTooLarge { len: 65, max: 64 })
    ));
}

#[test]
fn a_full_rdmc_window_is_flow_control_not_loss() {
    let mut layout = large_layout(3);
    for sg in &mut layout.subgroups {
        sg.rdmc.as_mut().unwrap().window_messages = 1;
    }
    let mut sim = Sim::new(3, &[1, 2, 3], layout, Techniques::all());
    assert!(sim.send(1, 10, 5000));
    // The one send buffer holds a message no member consumed yet.
    assert!(
        !sim.send(1, 10, 6000),
        "a second large message needs a free buffer"
    );
    // Small messages still go.
    assert!(sim.send(1, 10, 30));
    sim.settle(ROUNDS_MAX);
    for _ in 0..100 {
        sim.round();
    }
    assert!(
        sim.send(1, 10, 6000),
        "the buffer is free once every member delivered"
    );
    sim.settle(ROUNDS_MAX);
    sim.check_final();
}

/// Messages above `RDMC_RESIDENT_BYTES`: each buffer's pages past them go back to the
/// kernel once its message is done (a receiver's on delivery, a sender's once every
/// member consumed it), and the next message into the same buffers still arrives intact
/// at every member, in order.
#[test]
fn messages_above_the_resident_bytes_reuse_their_given_back_buffers_intact() {
    use spindle_group::rdmc::RDMC_RESIDENT_BYTES;
    const MESSAGES: usize = 3;
    let seed = 7;
    let mut layout = overlapping_layout(4, 64);
    let big = RDMC_RESIDENT_BYTES + (2 << 20);
    layout.subgroups.truncate(1);
    // One sender to two receivers (a relay among them): ~18 MiB messages are slow to
    // move word by word in a debug build.
    layout.subgroups[0].senders = vec![1];
    layout.subgroups[0].rdmc = Some(RdmcConfig {
        block_bytes: 1 << 20,
        message_bytes_max: big,
        schedule: ScheduleKind::BinomialPipeline,
        window_messages: 1,
    });
    let id = layout.subgroups[0].id;
    let senders = layout.subgroups[0].senders.clone();
    let mut sim = Sim::new(seed, &[1, 2, 3], layout, Techniques::all());
    let mut left: Vec<usize> = vec![MESSAGES; senders.len()];
    let mut rounds = 0;
    while left.iter().any(|l| *l > 0) {
        rounds += 1;
        assert!(rounds < ROUNDS_MAX, "seed {seed}: sending did not finish");
        for (i, s) in senders.iter().enumerate() {
            // Sizes across the resident bound, up to the largest.
            let len = big - (left[i] * 300_000) % (4 << 20);
            if left[i] > 0 && sim.send(*s, id, len) {
                left[i] -= 1;
            }
        }
        sim.round();
    }
    sim.settle(ROUNDS_MAX);
    sim.check_final();
    sim.check_quiescent();
    assert_eq!(
        sim.sent_in(id),
        senders.len() * MESSAGES,
        "seed {seed}: all sent"
    );
}

/// A delivered large message is read in place: a batch the application keeps pins its
/// RDMC buffer. The next large message of that sender then waits (at a window of one
/// buffer, no member delivers it), the engine asks once for the buffer
/// (`poll_pins_wanted`), the held message stays intact meanwhile, and once the batch is
/// dropped the next message arrives everywhere, in order.
#[test]
fn a_held_large_delivery_pins_its_buffer_until_dropped() {
    for seed in 1..=6u64 {
        let mut layout = overlapping_layout(4, 64);
        layout.subgroups.truncate(1);
        layout.subgroups[0].senders = vec![1];
        layout.subgroups[0].rdmc = Some(RdmcConfig {
            window_messages: 1,
            ..rdmc_for(seed)
        });
        let id = layout.subgroups[0].id;
        let mut sim = Sim::new(seed, &[1, 2, 3], layout, Techniques::all());
        sim.hold = Some(2);
        assert!(sim.send(1, id, 5000), "seed {seed}: first send");
        sim.settle(ROUNDS_MAX);
        let seq = *sim.sent[&(id, 1)].keys().next().expect("one sent");
        let first = common::payload(id, 1, seq, 5000);
        let held = |sim: &Sim| -> Vec<Vec<u8>> {
            sim.held
                .iter()
                .filter(|b| b.holds_in_place())
                .flat_map(|b| b.iter().map(|m| m.payload.to_vec()))
                .collect()
        };
        assert_eq!(
            held(&sim),
            vec![first.clone()],
            "seed {seed}: node 2 holds the first in place"
        );
        // Every member delivered the first: its sender's buffer is free again.
        let mut rounds = 0;
        while !sim.send(1, id, 6000) {
            rounds += 1;
            assert!(rounds < ROUNDS_MAX, "seed {seed}: second send");
            sim.round();
        }
        for _ in 0..2_000 {
            sim.round();
        }
        for n in [1, 2, 3] {
            assert_eq!(
                sim.delivered.get(&(n, id)).map_or(0, Vec::len),
                1,
                "seed {seed}: node {n} cannot deliver the second while node 2's buffer is pinned"
            );
        }
        let node2 = &mut sim.cluster.nodes.get_mut(&2).expect("node 2").engine;
        assert_eq!(
            node2.poll_pins_wanted(),
            Some(id),
            "seed {seed}: asked for the buffer"
        );
        assert_eq!(node2.poll_pins_wanted(), None, "seed {seed}: once");
        assert_eq!(
            held(&sim),
            vec![first],
            "seed {seed}: the held message is intact"
        );
        sim.hold = None;
        sim.held.clear();
        sim.settle(ROUNDS_MAX);
        for n in [1, 2, 3] {
            assert_eq!(
                sim.delivered.get(&(n, id)).map_or(0, Vec::len),
                2,
                "seed {seed}: node {n} delivers the second once the buffer is given back"
            );
        }
        sim.check_final();
        sim.check_quiescent();
    }
}

/// `Sender::try_send_filled` writes a large message straight into its send buffer: it
/// arrives intact at every member in its turn; a fill that fails sends nothing of it (its
/// slot becomes a null, its RDMC sequence number is the next message's); a fill that
/// reports nothing or more than it was lent, and a length within the slot, are errors.
#[test]
fn a_large_message_filled_in_place_arrives_and_a_failed_fill_sends_nothing() {
    for seed in 1..=6u64 {
        let mut layout = overlapping_layout(4, 64);
        layout.subgroups.truncate(1);
        layout.subgroups[0].senders = vec![1];
        layout.subgroups[0].rdmc = Some(rdmc_for(seed));
        let id = layout.subgroups[0].id;
        let mut sim = Sim::new(seed, &[1, 2, 3], layout, Techniques::all());
        let sender = sim.engine(1).sender(id).unwrap();
        let slot = sender.payload_bytes_max();
        assert!(
            matches!(
                sender.try_send_filled(slot, |_| Ok::<_, ()>(1)),
                Err(Error::Config(_))
            ),
            "seed {seed}: a length within the slot"
        );
        assert!(
            matches!(
                sender.try_send_filled(8000, |_| Err::<usize, _>("encoder failed")),
                Ok(Err("encoder failed"))
            ),
            "seed {seed}: the filler's error comes back"
        );
        for bad in [0, 8001] {
            assert!(
                matches!(
                    sender.try_send_filled(8000, |_| Ok::<_, ()>(bad)),
                    Err(Error::Config(_))
                ),
                "seed {seed}: a fill of {bad} bytes"
            );
        }
        // The next sequence number is known (one thread); the message is shorter than
        // what it was lent.
        let seq = sender.next_seq();
        let bytes = common::payload(id, 1, seq, 7000);
        let sent = sender.try_send_filled(8000, |b| {
            b[..bytes.len()].copy_from_slice(&bytes);
            Ok::<_, ()>(bytes.len())
        });
        assert!(
            matches!(sent, Ok(Ok(s)) if s == seq),
            "seed {seed}: sent in place"
        );
        sim.sent
            .entry((id, 1))
            .or_default()
            .insert(seq, bytes.len());
        // And a copied one after it, in the same order (once a send buffer is free).
        let mut rounds = 0;
        while !sim.send(1, id, 9000) {
            rounds += 1;
            assert!(rounds < ROUNDS_MAX, "seed {seed}: the next large message");
            sim.round();
        }
        sim.settle(ROUNDS_MAX);
        sim.check_final();
        sim.check_quiescent();
        for n in [1, 2, 3] {
            assert_eq!(
                sim.delivered[&(n, id)].len(),
                2,
                "seed {seed}: node {n} delivers both, once"
            );
        }
    }
}
