//! What a participant ignores (DDS `ignore_participant`, `ignore_publication`,
//! `ignore_subscription`), in deterministic simulation. Each test runs several seeds; a
//! failure prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_ignore <test>`).

mod common;
use common::sim::{domain, reader, take_n, values, writer};
use common::{atomic, keep_all, ks, order};

use spindle_dds_core::{DataReader, DataWriter, Error, StateMask, IGNORED_MAX};
use spindle_qos::DataWriterQos;
use spindle_topics::KeyedString;

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_ignore", name, test);
}

fn readers_matched(w: &DataWriter<KeyedString>) -> u32 {
    w.publication_matched_status().current_count
}

fn writers_matched(r: &DataReader<KeyedString>) -> u32 {
    r.subscription_matched_status().current_count
}

/// A participant that ignores itself stops hearing its own writer, one that ignores a
/// writer stops hearing it, and one that ignores a reader stops counting it; matched
/// statuses follow at once. The other participants' readers are untouched: they keep
/// every sample in the one order.
#[test]
fn ignored_participants_writers_and_readers_are_neither_heard_nor_counted() {
    for_seeds(
        "ignored_participants_writers_and_readers_are_neither_heard_nor_counted",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let r1 = reader(&ps[0], "I", keep_all(&atomic()));
            let r3 = reader(&ps[2], "I", keep_all(&atomic()));
            let w1 = writer(&ps[0], "I", DataWriterQos::default());
            let w2 = writer(&ps[1], "I", DataWriterQos::default());
            d.run_until(common::sim::ROUNDS_MAX, || {
                writers_matched(&r1) == 2 && readers_matched(&w2) == 2
            });
            w1.write(&ks("k", "own0")).unwrap();
            w2.write(&ks("k", "other0")).unwrap();
            assert_eq!(take_n(&d, &r1, 2).len(), 2, "seed {seed}");

            assert_eq!(ps[0].discovered_participants(), [1, 2, 3], "seed {seed}");
            let endpoints = ps[0].discovered_endpoints().len();
            ps[0].ignore_participant(ps[0].node_id()).unwrap();
            assert_eq!(ps[0].discovered_participants(), [2, 3], "seed {seed}");
            assert_eq!(
                ps[0].discovered_endpoints().len(),
                endpoints - 2,
                "seed {seed}: its own reader and writer are no longer listed"
            );
            assert_eq!(writers_matched(&r1), 1, "seed {seed}: only w2 now");
            assert_eq!(readers_matched(&w1), 1, "seed {seed}: only r3 now");
            w1.write(&ks("k", "own1")).unwrap();
            w2.write(&ks("k", "other1")).unwrap();
            // own1, wherever the order put it, is not taken (checked below).
            assert_eq!(values(&take_n(&d, &r1, 1)), ["other1"], "seed {seed}");

            ps[0]
                .ignore_publication((ps[1].node_id(), w2.id()))
                .unwrap();
            assert_eq!(writers_matched(&r1), 0, "seed {seed}");
            w2.write(&ks("k", "other2")).unwrap();
            w1.write(&ks("k", "own2")).unwrap();
            let all = take_n(&d, &r3, 6);
            let got = values(&all);
            let seq = |prefix: &str| -> Vec<String> {
                got.iter()
                    .filter(|v| v.starts_with(prefix))
                    .cloned()
                    .collect()
            };
            assert_eq!(
                seq("own"),
                ["own0", "own1", "own2"],
                "seed {seed}: r3 {got:?}"
            );
            assert_eq!(
                seq("other"),
                ["other0", "other1", "other2"],
                "seed {seed}: r3 {got:?}"
            );
            d.run_for(50_000);
            assert!(
                r1.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}: r1 took a sample of what its participant ignores"
            );
            assert!(
                order(&all).windows(2).all(|p| p[0].1 < p[1].1),
                "seed {seed}: r3 takes them in the total order"
            );

            assert_eq!(readers_matched(&w2), 2, "seed {seed}: r1 and r3");
            ps[1]
                .ignore_subscription((ps[2].node_id(), r3.handle().0))
                .unwrap();
            assert_eq!(readers_matched(&w2), 1, "seed {seed}: r1 only");
            assert_eq!(writers_matched(&r3), 2, "seed {seed}: r3 is not told");
        },
    );
}

/// A participant ignores at most `IGNORED_MAX` participants, writers and readers; one
/// more is refused naming the bound, and ignoring again what it ignores is no new entry.
#[test]
fn what_a_participant_ignores_is_bounded() {
    for_seeds("what_a_participant_ignores_is_bounded", |seed| {
        let (_d, ps) = domain(seed, 1);
        let max = u32::try_from(IGNORED_MAX).unwrap();
        for i in 0..max {
            ps[0].ignore_publication((9, i)).unwrap();
        }
        ps[0].ignore_publication((9, 0)).unwrap();
        let e = ps[0].ignore_participant(9).unwrap_err();
        assert!(
            matches!(&e, Error::OutOfResources(m) if m.contains("IGNORED_MAX")),
            "seed {seed}: {e}"
        );
    });
}
