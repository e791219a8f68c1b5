//! A participant's counters (`DomainParticipant::counters`) in deterministic simulation:
//! they move as samples flow, views change and a joiner gets a store's state, and never
//! go back. Each test runs several seeds; a failure prints its seed and the command that
//! reproduces it (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test
//! sim_counters <test>`).

mod common;
use common::sim::{domain, reader, take_n, writer};
use common::{atomic, keep_all, ks};

use spindle_dds_core::ParticipantCounters;
use spindle_qos::{DataWriterQos, DurabilityKind, History};
use spindle_topics::KeyedString;

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_counters", name, test);
}

/// Every counter of `after` is at least that of `before`.
fn grew(before: &ParticipantCounters, after: &ParticipantCounters) -> bool {
    let (b, a) = (&before.group, &after.group);
    a.delivered >= b.delivered
        && a.stable >= b.stable
        && a.nulls_sent >= b.nulls_sent
        && a.views_installed >= b.views_installed
        && a.state_received_bytes >= b.state_received_bytes
        && after.samples_written >= before.samples_written
        && after.samples_received >= before.samples_received
}

#[test]
fn counters_move_as_samples_flow_and_views_change() {
    for_seeds("counters_move_as_samples_flow_and_views_change", |seed| {
        let (d, ps) = domain(seed, 3);
        let r = reader(&ps[1], "alpha", keep_all(&atomic()));
        let w = writer(&ps[0], "alpha", DataWriterQos::default());
        let before_w = ps[0].counters();
        let before_r = ps[1].counters();
        assert_eq!(before_w.node, 1);
        assert!(
            before_w.group.views_installed >= 1,
            "seed {seed}: {before_w:?}"
        );
        const N: usize = 100;
        for i in 0..N {
            w.write(&ks("k", format!("v{i}"))).unwrap();
        }
        assert_eq!(take_n(&d, &r, N).len(), N, "seed {seed}");
        d.run_for(2_000);
        let after_w = ps[0].counters();
        let after_r = ps[1].counters();
        assert_eq!(
            after_w.samples_written - before_w.samples_written,
            N as u64,
            "seed {seed}: one count per write"
        );
        assert!(after_w.written_bytes >= before_w.written_bytes + N as u64 * 64);
        assert!(
            after_r.samples_received - before_r.samples_received >= N as u64,
            "seed {seed}: {after_r:?}"
        );
        assert!(
            after_r.group.delivered - before_r.group.delivered >= N as u64,
            "seed {seed}: {after_r:?}"
        );
        assert!(
            after_r.group.stable - before_r.group.stable >= N as u64,
            "seed {seed}: every delivered message was stable first: {after_r:?}"
        );
        assert!(grew(&before_w, &after_w) && grew(&before_r, &after_r));
        // Participant 3 reads nothing of alpha: it is not in its subgroup, so none of
        // its samples reach it.
        assert_eq!(ps[2].counters().samples_received, 0, "seed {seed}");
        // A reader elsewhere is a view change, and the counters keep what came before.
        let _r3 = reader(&ps[2], "alpha", keep_all(&atomic()));
        let later = ps[1].counters();
        assert!(
            later.group.views_installed > after_r.group.views_installed,
            "seed {seed}: {later:?}"
        );
        assert!(later.view_id > after_r.view_id, "seed {seed}");
        assert!(
            grew(&after_r, &later),
            "seed {seed}: {after_r:?} then {later:?}"
        );
    });
}

#[test]
fn a_joiner_counts_the_state_it_got_and_the_giver_what_it_gave() {
    for_seeds(
        "a_joiner_counts_the_state_it_got_and_the_giver_what_it_gave",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let stored = atomic()
                .with_durability(DurabilityKind::TransientLocal)
                .with_history(History::keep_last(3));
            let t1 = ps[0]
                .create_topic::<KeyedString>("plans", stored.clone())
                .unwrap();
            let w = ps[0]
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&t1, DataWriterQos::from_topic_qos(&stored))
                .unwrap();
            for i in 0..10 {
                w.write(&ks("A", format!("a{i}"))).unwrap();
            }
            d.run_for(5_000);
            let late = d.participant(3).unwrap();
            let t3 = late
                .create_topic::<KeyedString>("plans", stored.clone())
                .unwrap();
            let r = late
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&t3, keep_all(&stored))
                .unwrap();
            assert_eq!(
                take_n(&d, &r, 3).len(),
                3,
                "seed {seed}: the stored history"
            );
            d.run_for(2_000);
            let got = late.counters().group;
            assert!(got.state_transfers_received >= 1, "seed {seed}: {got:?}");
            assert!(got.state_received_bytes > 0, "seed {seed}: {got:?}");
            let given: u64 = ps
                .iter()
                .map(|p| p.counters().group.state_given_bytes)
                .sum();
            assert!(given >= got.state_received_bytes, "seed {seed}: {given}");
        },
    );
}

#[test]
fn a_deleted_writers_samples_stay_counted() {
    for_seeds("a_deleted_writers_samples_stay_counted", |seed| {
        let (d, ps) = domain(seed, 2);
        let r = reader(&ps[1], "alpha", keep_all(&atomic()));
        let t = ps[0]
            .create_topic::<KeyedString>("alpha", atomic())
            .unwrap();
        let publisher = ps[0].create_publisher(Default::default()).unwrap();
        let before = ps[0].counters();
        const N: usize = 40;
        let w = publisher
            .create_datawriter(&t, DataWriterQos::default())
            .unwrap();
        // A clone outlives the deletion: its cells stay reachable until it goes.
        let clone = w.clone();
        for i in 0..N {
            w.write(&ks("k", format!("v{i}"))).unwrap();
        }
        assert_eq!(take_n(&d, &r, N).len(), N, "seed {seed}");
        let written = ps[0].counters();
        assert_eq!(
            written.samples_written - before.samples_written,
            N as u64,
            "seed {seed}: {written:?}"
        );
        publisher.delete_datawriter(w).unwrap();
        let deleted = ps[0].counters();
        // Deleting it disposed and unregistered its one instance (autodispose, the
        // default): two more samples, each a header alone.
        assert_eq!(
            (deleted.samples_written, deleted.written_bytes),
            (
                written.samples_written + 2,
                written.written_bytes + 2 * spindle_dds_core::sample::SAMPLE_HEADER_BYTES as u64
            ),
            "seed {seed}: a deleted writer's counts stay, with its last two notices"
        );
        assert!(
            clone.write(&ks("k", "late".to_string())).is_err(),
            "seed {seed}: a deleted writer writes nothing"
        );
        drop(clone);
        let w2 = publisher
            .create_datawriter(&t, DataWriterQos::default())
            .unwrap();
        for i in 0..N {
            w2.write(&ks("k", format!("w{i}"))).unwrap();
        }
        // The deleted writer's dispose and unregister notices, then the new writer's.
        assert_eq!(take_n(&d, &r, N + 2).len(), N + 2, "seed {seed}");
        let later = ps[0].counters();
        assert_eq!(
            later.samples_written - before.samples_written,
            2 * N as u64 + 2,
            "seed {seed}: the deleted writer's and the new one's: {later:?}"
        );
        assert!(grew(&deleted, &later), "seed {seed}");
    });
}
