//! PRESENTATION GROUP access scope in deterministic simulation: coherent sets that span a
//! publisher's topics (whole at every reader of every topic, or at none — also when the
//! writer's participant crashes inside the set), ordered access across a subscriber's
//! readers (`Subscriber::begin_access`/`get_datareaders`: one order, the same at every
//! participant), and the refusal of a GROUP-scope entity whose topics would ride two
//! subgroups. A failure prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_group <test>`).

mod common;
use common::sim::{domain, take_n, values, ROUNDS_MAX};
use common::{atomic, keep_all, ks};

use spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT;
use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{
    subgroup_of, DataReader, DataWriter, DomainParticipant, Error, Publisher, StateMask, Subscriber,
};
use spindle_qos::{
    DataWriterQos, DomainParticipantQos, Presentation, PresentationAccessScope, PublisherQos,
    SubscriberQos,
};
use spindle_topics::KeyedString;

/// Seeds of the crash test: each cuts the set at another point.
const CRASH_SEEDS: std::ops::RangeInclusive<u64> = 1..=32;

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_group", name, test);
}

/// `n` topic names that hash onto one subgroup (of the default count), and one that
/// does not.
fn topics(n: usize) -> (Vec<String>, String) {
    let sg = |name: &str| subgroup_of(name, TOPIC_SUBGROUPS_DEFAULT);
    let names = (0..).map(|i| format!("G{i}"));
    let same: Vec<String> = names
        .clone()
        .filter(|t| sg(t) == sg("G0"))
        .take(n)
        .collect();
    let other = names
        .clone()
        .find(|t| sg(t) != sg("G0"))
        .expect("another subgroup");
    (same, other)
}

fn group(coherent_access: bool, ordered_access: bool) -> Presentation {
    Presentation {
        access_scope: PresentationAccessScope::Group,
        coherent_access,
        ordered_access,
    }
}

fn group_publisher(p: &DomainParticipant, coherent: bool, ordered: bool) -> Publisher {
    p.create_publisher(PublisherQos {
        presentation: group(coherent, ordered),
        ..Default::default()
    })
    .unwrap()
}

fn group_subscriber(p: &DomainParticipant, coherent: bool, ordered: bool) -> Subscriber {
    p.create_subscriber(SubscriberQos {
        presentation: group(coherent, ordered),
        ..Default::default()
    })
    .unwrap()
}

fn writer_of(p: &DomainParticipant, publisher: &Publisher, t: &str) -> DataWriter<KeyedString> {
    let t = p.create_topic::<KeyedString>(t, atomic()).unwrap();
    publisher
        .create_datawriter(&t, DataWriterQos::default())
        .unwrap()
}

fn reader_of(p: &DomainParticipant, sub: &Subscriber, t: &str) -> DataReader<KeyedString> {
    let t = p.create_topic::<KeyedString>(t, atomic()).unwrap();
    sub.create_datareader(&t, keep_all(&atomic())).unwrap()
}

/// Every sample each reader holds now, taken.
fn drain(readers: &[DataReader<KeyedString>]) -> Vec<Vec<String>> {
    readers
        .iter()
        .map(|r| values(&r.take(usize::MAX, StateMask::ANY).unwrap()))
        .collect()
}

/// A coherent set begun on a GROUP-scope publisher spans all its writers: readers of each
/// of its three topics (in two participants, under plain and GROUP subscribers) see
/// nothing of it until it ends, then each its whole part, in the order written.
#[test]
fn a_group_coherent_set_over_three_topics_reaches_every_reader_whole() {
    for_seeds(
        "a_group_coherent_set_over_three_topics_reaches_every_reader_whole",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let (names, _) = topics(3);
            let mut readers = Vec::new();
            for (i, p) in ps[1..].iter().enumerate() {
                let sub = if i == 0 {
                    p.create_subscriber(Default::default()).unwrap()
                } else {
                    group_subscriber(p, true, false)
                };
                for t in &names {
                    readers.push(reader_of(p, &sub, t));
                }
            }
            let publisher = group_publisher(&ps[0], true, false);
            let writers: Vec<_> = names
                .iter()
                .map(|t| writer_of(&ps[0], &publisher, t))
                .collect();
            for set in 0..3 {
                publisher.begin_coherent_changes().unwrap();
                for i in 0..6 {
                    let w = (i + set) % writers.len();
                    writers[w]
                        .write(&ks(&format!("k{}", i % 2), format!("s{set}-{i}")))
                        .unwrap();
                    d.run_for(2_000);
                }
                d.run_for(20_000);
                assert!(
                    drain(&readers).iter().all(|v| v.is_empty()),
                    "seed {seed}: set {set} is held back at every reader until it ends"
                );
                publisher.end_coherent_changes().unwrap();
                let parts: Vec<Vec<String>> =
                    readers.iter().map(|r| values(&take_n(&d, r, 2))).collect();
                for (j, part) in parts.iter().enumerate() {
                    let w = j % writers.len();
                    let want: Vec<String> = (0..6)
                        .filter(|i| (i + set) % writers.len() == w)
                        .map(|i| format!("s{set}-{i}"))
                        .collect();
                    assert_eq!(part, &want, "seed {seed}: set {set}, reader {j} whole");
                }
            }
        },
    );
}

/// The writer's participant crashes inside a GROUP coherent set over three topics — after
/// a seed-chosen number of its samples, or with its end just sent — on many seeds: every
/// reader of every topic holds all of its part of the set, or every reader holds none;
/// never a part, and the two participants' readers agree.
#[test]
fn a_group_coherent_set_cut_by_a_crash_is_all_or_none_across_readers() {
    let name = "a_group_coherent_set_cut_by_a_crash_is_all_or_none_across_readers";
    let seeds: Vec<u64> = match std::env::var("SPINDLE_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SPINDLE_SIM_SEED is a number")],
        Err(_) => CRASH_SEEDS.collect(),
    };
    for seed in seeds {
        let run = std::panic::catch_unwind(|| crash_inside_a_group_set(seed));
        if let Err(e) = run {
            eprintln!(
                "{name} failed with seed {seed}; reproduce: SPINDLE_SIM_SEED={seed} cargo \
                 test -p spindle-dds-core --test sim_group {name}"
            );
            std::panic::resume_unwind(e);
        }
    }
}

fn crash_inside_a_group_set(seed: u64) {
    const SAMPLES: u64 = 6;
    let (d, ps) = domain(seed, 3);
    let (names, _) = topics(3);
    let mut readers = Vec::new();
    for p in &ps[1..] {
        let sub = group_subscriber(p, true, false);
        for t in &names {
            readers.push(reader_of(p, &sub, t));
        }
    }
    let publisher = group_publisher(&ps[0], true, false);
    let writers: Vec<_> = names
        .iter()
        .map(|t| writer_of(&ps[0], &publisher, t))
        .collect();
    // One finished set first: every reader has its part.
    publisher.begin_coherent_changes().unwrap();
    for (i, w) in writers.iter().enumerate() {
        w.write(&ks("k", format!("done-{i}"))).unwrap();
    }
    publisher.end_coherent_changes().unwrap();
    for r in &readers {
        assert_eq!(take_n(&d, r, 1).len(), 1, "seed {seed}: the first set");
    }
    // The cut set: `cut` samples, then (when all are written) its end, then the crash.
    let cut = seed % (SAMPLES + 2);
    publisher.begin_coherent_changes().unwrap();
    for i in 0..cut.min(SAMPLES) {
        let w = &writers[(i as usize) % writers.len()];
        w.write(&ks("k", format!("cut-{i}"))).unwrap();
        d.run_for(1_000 + (seed * 700 + i * 300) % 4_000);
    }
    if cut >= SAMPLES {
        publisher.end_coherent_changes().unwrap();
        // A few rounds, or none, for the end to travel before the crash.
        for _ in 0..(cut - SAMPLES) * (seed % 5) {
            d.round();
        }
    }
    d.crash(1);
    assert!(
        d.run_until(ROUNDS_MAX, || ps[1..]
            .iter()
            .all(|p| p.view().is_some_and(|v| !v.members.contains(&1)))),
        "seed {seed}: the crash is noticed"
    );
    d.run_for(50_000);
    let got = drain(&readers);
    let part = |j: usize| -> Vec<String> {
        (0..cut.min(SAMPLES))
            .filter(|i| (*i as usize) % writers.len() == j % writers.len())
            .map(|i| format!("cut-{i}"))
            .collect()
    };
    let whole = got.iter().enumerate().all(|(j, v)| *v == part(j));
    let none = got.iter().all(|v| v.is_empty());
    assert!(
        (whole && cut >= SAMPLES) || none,
        "seed {seed}: the set cut after {cut} of {SAMPLES} (end sent: {}) is all-or-none \
         across readers, got {got:?}",
        cut >= SAMPLES
    );
    eprintln!(
        "seed {seed}: cut after {cut}: {}",
        if none { "none delivered" } else { "whole" }
    );
}

/// Ordered access with GROUP scope: samples of three topics, written by two participants
/// (one inside GROUP coherent sets), read at two participants by walking
/// `get_datareaders` between `begin_access` and `end_access` and taking one sample from
/// each reader it names: every sample once, in one order, the same at both. Misuse is
/// `PreconditionNotMet`.
#[test]
fn ordered_access_reads_a_subscribers_topics_in_one_order_everywhere() {
    for_seeds(
        "ordered_access_reads_a_subscribers_topics_in_one_order_everywhere",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let (names, _) = topics(3);
            let subs: Vec<(Subscriber, Vec<DataReader<KeyedString>>)> = ps[1..]
                .iter()
                .map(|p| {
                    let sub = group_subscriber(p, false, true);
                    let rs = names.iter().map(|t| reader_of(p, &sub, t)).collect();
                    (sub, rs)
                })
                .collect();
            let publisher = group_publisher(&ps[0], true, true);
            let w0: Vec<_> = names[..2]
                .iter()
                .map(|t| writer_of(&ps[0], &publisher, t))
                .collect();
            // Readers requesting GROUP ordered access match only writers offering it.
            let other = group_publisher(&ps[1], false, true);
            let w1 = writer_of(&ps[1], &other, &names[2]);
            let mut written = 0;
            for round in 0..4u64 {
                let coherent = round % 2 == 1;
                if coherent {
                    publisher.begin_coherent_changes().unwrap();
                }
                for i in 0..3u64 {
                    w0[((round + i) % 2) as usize]
                        .write(&ks("k", format!("p0-{round}-{i}")))
                        .unwrap();
                    w1.write(&ks("k", format!("p1-{round}-{i}"))).unwrap();
                    written += 2;
                    d.run_for(500 + (seed * 311 + i * 977) % 3_000);
                }
                if coherent {
                    publisher.end_coherent_changes().unwrap();
                }
            }
            // Everything arrived everywhere before the walk.
            assert!(
                d.run_until(ROUNDS_MAX, || subs.iter().all(|(_, rs)| {
                    rs.iter()
                        .map(|r| r.read(usize::MAX, StateMask::ANY).unwrap().len())
                        .sum::<usize>()
                        == written
                })),
                "seed {seed}: every sample arrives"
            );
            let mut orders = Vec::new();
            for (sub, rs) in &subs {
                assert!(
                    matches!(
                        sub.get_datareaders(StateMask::ANY),
                        Err(Error::PreconditionNotMet(_))
                    ),
                    "seed {seed}: get_datareaders outside an access"
                );
                assert!(matches!(
                    sub.end_access(),
                    Err(Error::PreconditionNotMet(_))
                ));
                sub.begin_access().unwrap();
                let list = sub.get_datareaders(StateMask::ANY).unwrap();
                assert_eq!(list.len(), written, "seed {seed}: one entry per sample");
                let mut order = Vec::new();
                for h in list {
                    let (i, r) = rs
                        .iter()
                        .enumerate()
                        .find(|(_, r)| r.handle() == h)
                        .expect("a reader of this subscriber");
                    let s = r.take(1, StateMask::ANY).unwrap();
                    order.push(format!("{}:{}", names[i], values(&s).join("")));
                }
                sub.end_access().unwrap();
                orders.push(order);
            }
            assert_eq!(
                orders[0], orders[1],
                "seed {seed}: one order at both readers"
            );
            let mut seen = orders[0].clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), written, "seed {seed}: every sample once");
            // Each writer's samples keep their order; a set's samples stay together.
            let pos = |v: &str| orders[0].iter().position(|s| s.ends_with(v)).unwrap();
            for round in 0..4 {
                assert!(pos(&format!("p1-{round}-0")) < pos(&format!("p1-{round}-2")));
            }
            let set: Vec<usize> = (0..3).map(|i| pos(&format!("p0-1-{i}"))).collect();
            assert_eq!(
                set,
                [set[0], set[0] + 1, set[0] + 2],
                "seed {seed}: {orders:?}"
            );
        },
    );
}

/// A GROUP-scope publisher or subscriber (with coherent or ordered access) spans one
/// subgroup: a writer or reader on a topic of another subgroup is refused with
/// `Unsupported`, naming both topics, both subgroups and `topic_subgroups`; with
/// `topic_subgroups = 1` every topic shares the one subgroup and both are accepted.
#[test]
fn a_group_scope_entity_on_topics_of_two_subgroups_is_refused_naming_them() {
    for_seeds(
        "a_group_scope_entity_on_topics_of_two_subgroups_is_refused_naming_them",
        |seed| {
            let (_d, ps) = domain(seed, 1);
            let (names, other) = topics(1);
            let p = &ps[0];
            let publisher = group_publisher(p, true, false);
            writer_of(p, &publisher, &names[0]);
            let t = p.create_topic::<KeyedString>(&other, atomic()).unwrap();
            let e = publisher
                .create_datawriter(&t, DataWriterQos::default())
                .unwrap_err();
            let sg = |t: &str| subgroup_of(t, TOPIC_SUBGROUPS_DEFAULT);
            let text = e.to_string();
            assert!(matches!(e, Error::Unsupported(_)), "seed {seed}: {text}");
            for part in [
                format!("\"{}\"", names[0]),
                format!("subgroup {}", sg(&names[0])),
                format!("\"{other}\""),
                format!("subgroup {}", sg(&other)),
                "topic_subgroups".to_string(),
            ] {
                assert!(text.contains(&part), "seed {seed}: {part} in {text}");
            }
            let sub = group_subscriber(p, false, true);
            reader_of(p, &sub, &other);
            let t0 = p.create_topic::<KeyedString>(&names[0], atomic()).unwrap();
            let e = sub.create_datareader(&t0, keep_all(&atomic())).unwrap_err();
            assert!(
                matches!(e, Error::Unsupported(ref s) if s.contains("subscriber")),
                "seed {seed}: {e}"
            );
            // One subgroup for every topic: both accepted.
            let d1 = SimDomain::new(seed);
            let p1 = d1
                .participant_with(1, DomainParticipantQos::default(), |c| {
                    c.topic_subgroups = 1
                })
                .unwrap();
            let publisher = group_publisher(&p1, true, true);
            writer_of(&p1, &publisher, &names[0]);
            writer_of(&p1, &publisher, &other);
        },
    );
}
