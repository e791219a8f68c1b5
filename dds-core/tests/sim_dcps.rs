//! The DCPS API in deterministic simulation: participants of a [`SimDomain`] on the sim
//! fabric, in virtual time, seeded. What the real-tcp tests of `dcps.rs` covered (history,
//! lifespan, deadline, ownership, time-based filter, listeners, late joiners, entity
//! creation as view changes), plus crashes and determinism. Each test runs several seeds;
//! a failure prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_dcps <test>`).

mod common;
use common::sim::{domain, reader, take_n, values, writer, ROUNDS_MAX};
use common::{atomic, keep_all, ks, order};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use spindle_dds_core::sim::{SimDomain, SIM_EPOCH_NS};
use spindle_dds_core::{
    DataReader, DataReaderListener, Error, InstanceHandle, InstanceState, Sample, SampleBuffer,
    StateMask,
};
use spindle_qos::{
    DataReaderQos, DataWriterQos, DurabilityKind, History, OwnershipKind, ResourceLimits, TopicQos,
};
use spindle_topics::{KeyedString, TopicType};

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_dcps", name, test);
}

#[test]
fn readers_see_one_order_across_two_writers_on_overlapping_topics() {
    for_seeds(
        "readers_see_one_order_across_two_writers_on_overlapping_topics",
        |seed| {
            let (d, ps) = domain(seed, 3);
            // "alpha": readers at 2 and 3, writers at 1 and 2. "beta": reader at 3, writer
            // at 2 — participants 2 and 3 are in both subgroups.
            let r2 = reader(&ps[1], "alpha", keep_all(&atomic()));
            let r3 = reader(&ps[2], "alpha", keep_all(&atomic()));
            let rb3 = reader(&ps[2], "beta", keep_all(&atomic()));
            let w1 = writer(&ps[0], "alpha", DataWriterQos::default());
            let w2 = writer(&ps[1], "alpha", DataWriterQos::default());
            let wb2 = writer(&ps[1], "beta", DataWriterQos::default());
            assert_eq!(w1.publication_matched_status().current_count, 2);
            assert_eq!(r3.subscription_matched_status().current_count, 2);
            const N: usize = 200;
            for i in 0..N {
                w1.write(&ks("one", format!("1-{i}"))).unwrap();
                w2.write(&ks("two", format!("2-{i}"))).unwrap();
                wb2.write(&ks("b", format!("b-{i}"))).unwrap();
            }
            let g2 = take_n(&d, &r2, 2 * N);
            let g3 = take_n(&d, &r3, 2 * N);
            let gb = take_n(&d, &rb3, N);
            assert_eq!((g2.len(), gb.len()), (2 * N, N), "seed {seed}");
            // One total order across both writers, the same at both readers.
            assert_eq!(order(&g2), order(&g3), "seed {seed}");
            for w in ["one", "two"] {
                let seqs: Vec<u64> = g2
                    .iter()
                    .filter(|s| s.data.as_ref().unwrap().key == w)
                    .map(|s| s.info.writer_seq)
                    .collect();
                assert_eq!(seqs, (1..=N as u64).collect::<Vec<_>>(), "writer {w}");
            }
            // Deleting a reader is a view change; the writers' matched count follows it.
            let vid = ps[2].view().map(|v| v.vid);
            ps[2]
                .create_subscriber(Default::default())
                .unwrap()
                .delete_datareader(r3)
                .unwrap();
            assert!(ps[2].view().map(|v| v.vid) > vid, "a new view");
            assert!(
                d.run_until(ROUNDS_MAX, || w2.publication_matched_status().current_count
                    == 1),
                "only participant 2 reads alpha now"
            );
        },
    );
}

#[test]
fn entity_creation_is_a_view_change_and_late_joiners_get_the_stored_history() {
    for_seeds(
        "entity_creation_is_a_view_change_and_late_joiners_get_the_stored_history",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let stored = atomic()
                .with_durability(DurabilityKind::TransientLocal)
                .with_history(History::keep_last(3));
            let before = ps[0].view().unwrap().vid;
            let t1 = ps[0]
                .create_topic::<KeyedString>("plans", stored.clone())
                .unwrap();
            let w = ps[0]
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&t1, DataWriterQos::from_topic_qos(&stored))
                .unwrap();
            let after = ps[0].view().unwrap();
            assert!(after.vid > before, "creating a writer installed a view");
            assert!(after.declared.contains_key(&1), "the view carries it");
            for i in 0..10 {
                w.write(&ks("A", format!("a{i}"))).unwrap();
                w.write(&ks("B", format!("b{i}"))).unwrap();
            }
            w.dispose(&ks("B", "")).unwrap();
            d.run_for(5_000);
            // A reader created after every write, at a participant that joins the domain
            // only now: it still holds the last 3 per instance (B's last: its dispose).
            let late = d.participant(3).unwrap();
            let t3 = late
                .create_topic::<KeyedString>("plans", stored.clone())
                .unwrap();
            let r = late
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&t3, keep_all(&stored))
                .unwrap();
            r.wait_for_historical_data(std::time::Duration::from_secs(1))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let got = r.take(usize::MAX, StateMask::ANY).unwrap();
            let a: Vec<String> = got
                .iter()
                .filter_map(|s| s.data.as_ref())
                .filter(|d| d.key == "A")
                .map(|d| d.value.clone())
                .collect();
            assert_eq!(a, vec!["a7", "a8", "a9"], "seed {seed}");
            // The history's writer lives: its instance is alive at the late reader.
            assert!(
                got.iter()
                    .filter(|s| s.data.as_ref().is_some_and(|d| d.key == "A"))
                    .all(|s| s.info.instance_state == InstanceState::Alive),
                "seed {seed}: a live writer's instance read as ended"
            );
            let b: Vec<&Sample<KeyedString>> = got
                .iter()
                .filter(|s| s.data.as_ref().is_none_or(|d| d.key == "B"))
                .collect();
            assert_eq!(b.len(), 3, "seed {seed}");
            assert!(!b[2].info.valid_data, "the dispose notice");
            assert_eq!(b[2].info.instance_state, InstanceState::NotAliveDisposed);
            // Later writes arrive after the history.
            w.write(&ks("A", "a10")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), vec!["a10"]);
            // The participant that wrote leaves; the store lives on at the reader's.
            assert_eq!(ps[1].view().unwrap().members.len(), 3);
        },
    );
}

#[test]
fn transient_history_outlives_its_writer_and_transient_local_history_does_not() {
    for_seeds(
        "transient_history_outlives_its_writer_and_transient_local_history_does_not",
        |seed| {
            let (d, ps) = domain(seed, 2);
            // Per kind: a topic written at node 1 and read at node 2, the writer deleted,
            // then a reader at a participant that joins only now.
            let kinds = [
                (DurabilityKind::Transient, "kept", 4),
                (DurabilityKind::TransientLocal, "writers", 0),
            ];
            for (kind, topic, _) in kinds {
                let q = atomic()
                    .with_durability(kind)
                    .with_history(History::keep_last(4));
                let t1 = ps[0].create_topic::<KeyedString>(topic, q.clone()).unwrap();
                let publisher = ps[0].create_publisher(Default::default()).unwrap();
                let w = publisher
                    .create_datawriter(&t1, DataWriterQos::from_topic_qos(&q))
                    .unwrap();
                let r2 = reader(&ps[1], topic, keep_all(&q));
                for i in 0..5 {
                    w.write(&ks("A", format!("a{i}"))).unwrap();
                    w.write(&ks("B", format!("b{i}"))).unwrap();
                }
                assert_eq!(take_n(&d, &r2, 10).len(), 10, "seed {seed}: {kind:?}");
                publisher.delete_datawriter(w).unwrap();
                d.run_for(5_000);
            }
            let late = d.participant(3).unwrap();
            for (kind, topic, want) in kinds {
                let q = atomic()
                    .with_durability(kind)
                    .with_history(History::keep_last(4));
                let r = reader(&late, topic, keep_all(&q));
                d.run_for(5_000);
                let taken = r.take(usize::MAX, StateMask::ANY).unwrap();
                let got = values(&taken);
                assert_eq!(got.len(), want, "seed {seed}: {kind:?}: {got:?}");
                if want > 0 {
                    // The writer's HISTORY (the last 4 per instance: two values, then the
                    // dispose and unregister its deletion sent), in the order written, and
                    // the instances ended as its deletion left them.
                    assert_eq!(got, vec!["a3", "b3", "a4", "b4"], "seed {seed}: {kind:?}");
                    assert_eq!(taken.len(), 8, "seed {seed}: {kind:?}");
                    assert!(
                        taken
                            .iter()
                            .all(|s| s.info.instance_state == InstanceState::NotAliveDisposed),
                        "seed {seed}: {kind:?}"
                    );
                } else {
                    assert!(taken.is_empty(), "seed {seed}: {kind:?}");
                }
            }
        },
    );
}

#[test]
fn deleting_a_writer_ends_the_instances_it_registered_at_every_reader() {
    use spindle_qos::WriterDataLifecycle;
    for_seeds(
        "deleting_a_writer_ends_the_instances_it_registered_at_every_reader",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let readers = [
                reader(&ps[1], "ends", keep_all(&atomic())),
                reader(&ps[2], "ends", keep_all(&atomic())),
            ];
            for (autodispose, ended) in [
                (true, InstanceState::NotAliveDisposed),
                (false, InstanceState::NotAliveNoWriters),
            ] {
                let t = ps[0].create_topic::<KeyedString>("ends", atomic()).unwrap();
                let publisher = ps[0].create_publisher(Default::default()).unwrap();
                let qos = DataWriterQos {
                    writer_data_lifecycle: WriterDataLifecycle {
                        autodispose_unregistered_instances: autodispose,
                    },
                    ..DataWriterQos::from_topic_qos(&atomic())
                };
                let w = publisher.create_datawriter(&t, qos).unwrap();
                for k in ["k1", "k2", "k1", "k3"] {
                    w.write(&ks(k, "v")).unwrap();
                }
                // k3 ends before the deletion: the deletion does not end it again.
                w.unregister_instance(&ks("k3", "")).unwrap();
                for r in &readers {
                    take_n(&d, r, 4 + usize::from(autodispose) + 1);
                }
                publisher.delete_datawriter(w).unwrap();
                let notices = if autodispose { 4 } else { 2 };
                for r in &readers {
                    let got = take_n(&d, r, notices);
                    assert_eq!(got.len(), notices, "seed {seed}: autodispose {autodispose}");
                    assert!(got.iter().all(|s| !s.info.valid_data), "seed {seed}");
                    for k in ["k1", "k2"] {
                        let h = r.lookup_instance(&ks(k, "")).unwrap().expect("known");
                        assert!(
                            got.iter()
                                .any(|s| s.info.instance_handle == h
                                    && s.info.instance_state == ended),
                            "seed {seed}: {k} ended as {ended:?}: {got:?}"
                        );
                    }
                    // A notice carries no data; get_key_value says which instance it
                    // is about.
                    let mut keys: Vec<String> = got
                        .iter()
                        .map(|s| r.get_key_value(s.info.instance_handle).unwrap().key)
                        .collect();
                    keys.dedup();
                    assert_eq!(keys.len(), 2, "seed {seed}: {keys:?}");
                    assert!(keys.iter().all(|k| k == "k1" || k == "k2"), "{keys:?}");
                    let never = ks("never written", "");
                    assert_eq!(r.lookup_instance(&never).unwrap(), None, "seed {seed}");
                    let handle = InstanceHandle(never.key_hash().unwrap());
                    assert!(matches!(
                        r.get_key_value(handle),
                        Err(Error::BadParameter(_))
                    ));
                }
            }
        },
    );
}

/// `delete_contained_entities` deletes what one-by-one deletion would, at every reader
/// (instances ended, matches gone), and the publisher's, topic's and participant's
/// deletions wait for their entities as DDS says.
#[test]
fn delete_contained_entities_deletes_every_writer_and_reader_as_one_by_one_deletion_would() {
    fn is<T>(r: Result<T, Error>, want: fn(&Error) -> bool, seed: u64, what: &str) {
        match r {
            Err(e) if want(&e) => {}
            Err(e) => panic!("seed {seed}: {what}: unexpected error {e}"),
            Ok(_) => panic!("seed {seed}: {what}: succeeded"),
        }
    }
    let precondition = |e: &Error| matches!(e, Error::PreconditionNotMet(_));
    let deleted = |e: &Error| matches!(e, Error::AlreadyDeleted(_));
    for_seeds(
        "delete_contained_entities_deletes_every_writer_and_reader_as_one_by_one_deletion_would",
        |seed| {
            let (d, mut ps) = domain(seed, 2);
            let wq = DataWriterQos::from_topic_qos(&atomic());
            let ta = ps[0]
                .create_topic::<KeyedString>("cont_a", atomic())
                .unwrap();
            let tb = ps[0]
                .create_topic::<KeyedString>("cont_b", atomic())
                .unwrap();
            let publisher = ps[0].create_publisher(Default::default()).unwrap();
            let wa = publisher.create_datawriter(&ta, wq.clone()).unwrap();
            let wb = publisher.create_datawriter(&tb, wq.clone()).unwrap();
            let own = ps[0]
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&ta, keep_all(&atomic()))
                .unwrap();
            let far = [
                reader(&ps[1], "cont_a", keep_all(&atomic())),
                reader(&ps[1], "cont_b", keep_all(&atomic())),
            ];
            wa.write(&ks("a1", "v")).unwrap();
            wb.write(&ks("b1", "v")).unwrap();
            for r in &far {
                assert_eq!(values(&take_n(&d, r, 1)), ["v"], "seed {seed}");
            }
            is(
                ps[0].delete_publisher(publisher.clone()),
                precondition,
                seed,
                "a publisher with writers",
            );
            is(
                ps[0].delete_topic(ta.clone()),
                precondition,
                seed,
                "a topic in use",
            );
            let other = ps[0].create_publisher(Default::default()).unwrap();
            let elsewhere = ps[1].create_publisher(Default::default()).unwrap();
            is(
                elsewhere.delete_datawriter(wa.clone()),
                precondition,
                seed,
                "another participant's writer",
            );

            publisher.delete_contained_entities().unwrap();
            for r in &far {
                let got = take_n(&d, r, 2);
                assert!(
                    got.iter().all(|s| !s.info.valid_data)
                        && got
                            .iter()
                            .any(|s| s.info.instance_state == InstanceState::NotAliveDisposed),
                    "seed {seed}: the writer's instance ended: {got:?}"
                );
                assert_eq!(
                    r.subscription_matched_status().current_count,
                    0,
                    "seed {seed}"
                );
                assert!(
                    r.get_matched_publications().unwrap().is_empty(),
                    "seed {seed}"
                );
            }
            is(
                wa.write(&ks("a2", "v")),
                deleted,
                seed,
                "a deleted writer's write",
            );
            is(
                publisher.delete_datawriter(wb),
                deleted,
                seed,
                "a second deletion",
            );
            ps[0].delete_publisher(publisher.clone()).unwrap();
            is(
                publisher.create_datawriter(&ta, wq.clone()),
                deleted,
                seed,
                "a deleted publisher",
            );

            // The participant's deletion reaches the rest: its reader (whose subscriber
            // handle is gone) and its empty publisher; then its topics.
            let w_late = other.create_datawriter(&tb, wq.clone()).unwrap();
            assert_eq!(
                far[1].get_matched_publications().unwrap().len(),
                1,
                "seed {seed}"
            );
            ps[0].delete_contained_entities().unwrap();
            is(
                own.take(1, StateMask::ANY),
                deleted,
                seed,
                "a deleted reader's take",
            );
            is(
                w_late.write(&ks("b2", "v")),
                deleted,
                seed,
                "a deleted writer's write",
            );
            is(
                other.create_datawriter(&tb, wq.clone()),
                deleted,
                seed,
                "a deleted publisher",
            );
            assert!(
                ps[0].find_topic::<KeyedString>("cont_a").is_err(),
                "seed {seed}"
            );
            d.run_for(5_000);
            let gone = ps[0].node_id();
            assert!(
                ps[1].discovered_endpoints().iter().all(|(n, _)| *n != gone),
                "seed {seed}: participant {gone}'s endpoints left the table"
            );
            // The participant creates anew, and may then be deleted.
            let again = writer(&ps[0], "cont_a", wq.clone());
            again.write(&ks("a3", "again")).unwrap();
            assert_eq!(values(&take_n(&d, &far[0], 1)), ["again"], "seed {seed}");
            ps[0].delete_contained_entities().unwrap();
            ps.remove(0).delete().unwrap();
        },
    );
}

#[test]
fn next_instance_reads_visit_every_instance_once_in_handle_order() {
    for_seeds(
        "next_instance_reads_visit_every_instance_once_in_handle_order",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let w = writer(&ps[0], "tracks", DataWriterQos::from_topic_qos(&atomic()));
            let r = reader(&ps[1], "tracks", keep_all(&atomic()));
            let keys = ["K3", "K1", "K4", "K2", "K5"];
            for round in 0..3 {
                for k in keys {
                    w.write(&ks(k, format!("{k}-{round}"))).unwrap();
                }
            }
            d.run_until(ROUNDS_MAX, || {
                r.read(usize::MAX, StateMask::ANY).unwrap().len() == 15
            });
            // Visit by read_next_instance: each instance once, all its samples, oldest
            // first, handles increasing; nothing is consumed.
            let mut previous = None;
            let mut visited = Vec::new();
            loop {
                let got = r
                    .read_next_instance(usize::MAX, previous, StateMask::ANY)
                    .unwrap();
                let Some(first) = got.first() else { break };
                let h = first.info.instance_handle;
                assert!(
                    got.iter().all(|s| s.info.instance_handle == h),
                    "seed {seed}"
                );
                assert!(
                    previous.is_none_or(|p| h > p),
                    "seed {seed}: handles increase"
                );
                let key = &first.data.as_ref().unwrap().key;
                assert_eq!(
                    values(&got),
                    (0..3).map(|i| format!("{key}-{i}")).collect::<Vec<_>>(),
                    "seed {seed}"
                );
                visited.push(key.clone());
                previous = Some(h);
            }
            visited.sort();
            assert_eq!(visited, ["K1", "K2", "K3", "K4", "K5"], "seed {seed}");
            // The mask applies: every sample is read now, so no instance has NOT_READ ones.
            assert!(r
                .read_next_instance(usize::MAX, None, StateMask::NOT_READ)
                .unwrap()
                .is_empty());
            // take_next_instance consumes one instance at a time, at most `max` samples.
            let one = r.take_next_instance(2, None, StateMask::ANY).unwrap();
            assert_eq!(one.len(), 2, "seed {seed}");
            // Then instance by instance (the first one's last sample first): the other 13.
            let mut taken = 0;
            let mut previous = None;
            loop {
                let got = r
                    .take_next_instance(usize::MAX, previous, StateMask::ANY)
                    .unwrap();
                let Some(first) = got.first() else { break };
                previous = Some(first.info.instance_handle);
                taken += got.len();
            }
            assert_eq!(taken, 13, "seed {seed}");
            assert!(
                r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}"
            );
        },
    );
}

#[test]
fn a_participant_of_another_domain_is_refused_by_name_and_never_joins() {
    for_seeds(
        "a_participant_of_another_domain_is_refused_by_name_and_never_joins",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let r = reader(&ps[1], "separate", keep_all(&atomic()));
            let view = ps[0].view().unwrap();
            // Node 3 is configured for domain 1, its contacts are domain 0's members.
            let e = d
                .participant_with(3, Default::default(), |c| c.domain_id = 1)
                .expect_err("a participant of domain 1 joined domain 0");
            let m = e.to_string();
            assert!(
                m.contains("member of domain 0 (wire version")
                    && m.contains("configured for domain 1 (wire version"),
                "seed {seed}: {m}"
            );
            d.run_for(20_000);
            assert_eq!(ps[0].view().unwrap().members, view.members, "seed {seed}");
            // Domain 0 goes on.
            let w = writer(&ps[0], "separate", DataWriterQos::from_topic_qos(&atomic()));
            w.write(&ks("k", "v")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), ["v"], "seed {seed}");
        },
    );
}

#[test]
fn bad_qos_and_misuse_are_dds_errors_not_panics() {
    for_seeds("bad_qos_and_misuse_are_dds_errors_not_panics", |_seed| {
        let (_d, ps) = domain(1, 1);
        let p = &ps[0];
        let persistent = atomic().with_durability(DurabilityKind::Persistent);
        // PERSISTENT without a data_dir to log to: refused, naming the setting.
        match p.create_topic::<KeyedString>("logged", persistent) {
            Err(Error::PreconditionNotMet(why)) => assert!(why.contains("data_dir"), "{why}"),
            other => panic!("expected PreconditionNotMet, got {other:?}"),
        }
        let bad = atomic()
            .with_history(History::keep_last(10))
            .with_resource_limits(ResourceLimits {
                max_samples: 100,
                max_instances: 10,
                max_samples_per_instance: 5,
            });
        match p.create_topic::<KeyedString>("bad", bad) {
            Err(Error::InconsistentPolicy(e)) => assert!(e.to_string().contains("10"), "{e}"),
            other => panic!("expected InconsistentPolicy, got {other:?}"),
        }
        let t = p.create_topic::<KeyedString>("t", atomic()).unwrap();
        assert!(matches!(
            p.create_topic::<spindle_topics::Sequence>("t", atomic()),
            Err(Error::PreconditionNotMet(_))
        ));
        let s = p.create_subscriber(Default::default()).unwrap();
        let r = s
            .create_datareader(&t, DataReaderQos::from_topic_qos(&atomic()))
            .unwrap();
        assert!(matches!(r.take_next_sample(), Err(Error::NoData)));
        assert!(
            matches!(p.clone().delete(), Err(Error::PreconditionNotMet(_))),
            "entities remain"
        );
        let w = writer(p, "t", DataWriterQos::default());
        // Larger than the slot: by RDMC, since large samples are on by default (above
        // `sample_bytes_max`, or above the slot with it 0, `OutOfResources`: sim_large).
        w.write(&ks("k", "x".repeat(10_000)))
            .expect("a sample above the slot goes by RDMC by default");
        s.delete_datareader(r.clone()).unwrap();
        assert!(matches!(
            r.take(1, StateMask::ANY),
            Err(Error::AlreadyDeleted(_))
        ));
    });
}

struct Counter(Arc<AtomicUsize>);
impl DataReaderListener<KeyedString> for Counter {
    fn on_data_available(&self, r: &DataReader<KeyedString>) {
        let n = r.take(usize::MAX, StateMask::ANY).map_or(0, |v| v.len());
        self.0.fetch_add(n, Ordering::SeqCst);
    }
}

#[test]
fn listeners_and_best_effort_readers_get_data_and_reliable_readers_do_not_match_best_effort_writers(
) {
    for_seeds("listeners_and_best_effort_readers_get_data", |seed| {
        let (d, ps) = domain(seed, 2);
        let be = TopicQos::default();
        let t0 = ps[0]
            .create_topic::<KeyedString>("fast", be.clone())
            .unwrap();
        let t1 = ps[1]
            .create_topic::<KeyedString>("fast", be.clone())
            .unwrap();
        let s1 = ps[1].create_subscriber(Default::default()).unwrap();
        let r = s1.create_datareader(&t1, keep_all(&be)).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        r.set_listener(Counter(Arc::clone(&count)));
        let strict = s1
            .create_datareader(&t1, DataReaderQos::from_topic_qos(&atomic()))
            .unwrap();
        let w = ps[0]
            .create_publisher(Default::default())
            .unwrap()
            .create_datawriter(&t0, DataWriterQos::from_topic_qos(&be))
            .unwrap();
        for i in 0..50 {
            w.write(&ks("k", format!("{i}"))).unwrap();
        }
        d.run_until(ROUNDS_MAX, || count.load(Ordering::SeqCst) >= 50);
        d.run_for(2_000);
        assert_eq!(
            count.load(Ordering::SeqCst),
            50,
            "seed {seed}: every sample, once"
        );
        assert_eq!(strict.take(usize::MAX, StateMask::ANY).unwrap().len(), 0);
        assert!(strict.requested_incompatible_qos_status().total_count > 0);
    });
}

#[test]
fn deadlines_are_missed_in_virtual_time_on_both_sides() {
    for_seeds(
        "deadlines_are_missed_in_virtual_time_on_both_sides",
        |seed| {
            let (d, ps) = domain(seed, 1);
            let p = &ps[0];
            let period = spindle_qos::Duration::from_millis(20);
            let r = reader(
                p,
                "ticks",
                DataReaderQos::from_topic_qos(&atomic()).with_deadline(period),
            );
            let w = writer(p, "ticks", DataWriterQos::default().with_deadline(period));
            // Nothing written yet: no instance, nothing missed, however long we wait.
            d.run_for(100_000);
            assert_eq!(r.requested_deadline_missed_status().total_count, 0);
            assert_eq!(w.offered_deadline_missed_status().total_count, 0);
            w.write(&ks("k", "once")).unwrap();
            assert_eq!(take_n(&d, &r, 1).len(), 1);
            // Then silence for 5 periods of virtual time: 4 or 5 misses on each side (the
            // write and its delivery are a few virtual ms apart), none more.
            d.run_for(100_000);
            let rs = r.requested_deadline_missed_status();
            let ws = w.offered_deadline_missed_status();
            assert!(
                (4..=5).contains(&rs.total_count),
                "seed {seed}: reader missed {}",
                rs.total_count
            );
            assert!(
                (4..=5).contains(&ws.total_count),
                "seed {seed}: writer missed {}",
                ws.total_count
            );
            assert_eq!(
                rs.last_instance_handle,
                r.lookup_instance(&ks("k", "")).unwrap().expect("known")
            );
            // Writing again restarts the period: half a period later, nothing new.
            w.write(&ks("k", "again")).unwrap();
            assert_eq!(take_n(&d, &r, 1).len(), 1);
            d.run_for(5_000);
            let now = r.requested_deadline_missed_status();
            assert_eq!(
                (now.total_count, now.total_count_change),
                (rs.total_count, 0),
                "seed {seed}: no miss within the period"
            );
        },
    );
}

#[test]
fn time_based_filter_keeps_one_sample_per_instance_per_separation() {
    for_seeds("time_based_filter_keeps_one_sample_per_instance", |seed| {
        let (d, ps) = domain(seed, 1);
        let p = &ps[0];
        let mut qos = keep_all(&atomic());
        qos.time_based_filter.minimum_separation = spindle_qos::Duration::from_millis(50);
        let r = reader(p, "filtered", qos);
        let all = reader(p, "filtered", keep_all(&atomic()));
        let w = writer(p, "filtered", DataWriterQos::default());
        for i in 0..20 {
            w.write(&ks(if i % 2 == 0 { "a" } else { "b" }, format!("{i}")))
                .unwrap();
        }
        assert_eq!(take_n(&d, &all, 20).len(), 20);
        assert_eq!(
            values(&r.take(usize::MAX, StateMask::ANY).unwrap()),
            ["0", "1"]
        );
        // A separation of virtual time later, the next sample per instance is kept.
        d.run_for(60_000);
        w.write(&ks("a", "20")).unwrap();
        assert_eq!(take_n(&d, &all, 1).len(), 1);
        assert_eq!(values(&r.take(usize::MAX, StateMask::ANY).unwrap()), ["20"]);
    });
}

#[test]
fn lifespan_ends_in_virtual_time_and_exclusive_ownership_keeps_the_strongest_writer() {
    for_seeds("lifespan_and_exclusive_ownership", |seed| {
        let (d, ps) = domain(seed, 2);
        let p = &ps[0];
        let mut excl = keep_all(&atomic());
        excl.ownership.kind = OwnershipKind::Exclusive;
        let r = reader(&ps[1], "owned", excl);
        let all = reader(&ps[1], "owned", keep_all(&atomic()));
        let mut weak_q = DataWriterQos::default();
        weak_q.ownership.kind = OwnershipKind::Exclusive;
        weak_q.ownership_strength.value = 1;
        let mut strong_q = weak_q.clone();
        strong_q.ownership_strength.value = 5;
        let weak = writer(p, "owned", weak_q);
        let strong = writer(p, "owned", strong_q);
        weak.write(&ks("k", "w1")).unwrap();
        strong.write(&ks("k", "s1")).unwrap();
        weak.write(&ks("k", "w2")).unwrap();
        strong.write(&ks("k", "s2")).unwrap();
        // A sample whose LIFESPAN ended before it was written never reaches a reader.
        let mut short = DataWriterQos::default();
        short.lifespan.duration = spindle_qos::Duration::from_secs(1);
        let brief = writer(p, "owned", short.clone());
        let hour_ago = SIM_EPOCH_NS + (d.now_us() as i64) * 1_000 - 3_600_000_000_000;
        brief
            .write_w_timestamp(&ks("old", "stale"), hour_ago)
            .unwrap();
        strong.write(&ks("k", "s3")).unwrap();
        let owned = values(&take_n(&d, &r, 4));
        assert_eq!(owned, ["w1", "s1", "s2", "s3"], "seed {seed}");
        // The shared reader matches only the shared writer (OWNERSHIP kinds must be equal),
        // whose stale sample never arrives.
        d.run_for(20_000);
        assert!(
            all.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
            "seed {seed}: a stale sample, or one of an exclusive writer, reached the shared reader"
        );
        // The strong writer unregisters: ownership falls back to the weak one.
        strong.unregister_instance(&ks("k", "")).unwrap();
        weak.write(&ks("k", "w3")).unwrap();
        assert_eq!(values(&take_n(&d, &r, 1)), ["w3"], "seed {seed}");
        // A sample delivered in time but not taken expires in the cache once its
        // lifespan passes in virtual time.
        brief.write(&ks("fresh", "soon gone")).unwrap();
        assert!(d.run_until(ROUNDS_MAX, || all
            .read(usize::MAX, StateMask::ANY)
            .unwrap()
            .iter()
            .any(|s| s.data.as_ref().is_some_and(|v| v.key == "fresh"))));
        d.run_for(1_100_000);
        assert!(
            !values(&all.take(usize::MAX, StateMask::ANY).unwrap()).contains(&"soon gone".into()),
            "seed {seed}: the sample outlived its lifespan"
        );
    });
}

/// Per `(participant, topic)`: the reader's samples as [`order`] gives them.
type ByReader = BTreeMap<(u32, &'static str), Vec<(u32, u64, String)>>;

/// Four participants, two overlapping topics, writers interleaved; one writer's
/// participant crashes mid-stream. Returns every reader's samples by (participant, topic)
/// and the trace hash.
fn crash_run(seed: u64) -> (ByReader, u64) {
    let (d, mut ps) = domain(seed, 4);
    // 1 writes A; 2 writes and reads A, writes B; 3 reads A and B; 4 reads A, writes and
    // reads B.
    let mut readers = Vec::new();
    for (i, t) in [(1, "A"), (2, "A"), (3, "A"), (2, "B"), (3, "B")] {
        readers.push((i as u32 + 1, t, reader(&ps[i], t, keep_all(&atomic()))));
    }
    let wa1 = writer(&ps[0], "A", DataWriterQos::default());
    let wa2 = writer(&ps[1], "A", DataWriterQos::default());
    let wb2 = writer(&ps[1], "B", DataWriterQos::default());
    let wb4 = writer(&ps[3], "B", DataWriterQos::default());
    const N: usize = 60;
    for i in 0..N {
        if i < N / 2 {
            wa1.write(&ks("1", format!("a1-{i}"))).unwrap();
        } else if i == N / 2 {
            d.crash(1);
        }
        wa2.write(&ks("2", format!("a2-{i}"))).unwrap();
        wb2.write(&ks("2", format!("b2-{i}"))).unwrap();
        wb4.write(&ks("4", format!("b4-{i}"))).unwrap();
    }
    assert!(
        d.run_until(ROUNDS_MAX, || ps[1]
            .view()
            .is_some_and(|v| !v.members.contains(&1))),
        "seed {seed}: the crash is noticed"
    );
    d.run_for(50_000);
    drop(ps.remove(0));
    let mut got = BTreeMap::new();
    for (node, topic, r) in &readers {
        got.insert(
            (*node, *topic),
            order(&r.take(usize::MAX, StateMask::ANY).unwrap()),
        );
    }
    (got, d.trace_hash())
}

#[test]
fn a_writer_crash_leaves_every_reader_with_the_same_samples_in_the_same_order() {
    for_seeds(
        "a_writer_crash_leaves_every_reader_with_the_same_samples",
        |seed| {
            let (got, _) = crash_run(seed);
            for topic in ["A", "B"] {
                let lists: Vec<&Vec<(u32, u64, String)>> = got
                    .iter()
                    .filter(|((_, t), _)| *t == topic)
                    .map(|(_, l)| l)
                    .collect();
                // All-or-none and one total order: every reader of the topic, the same list.
                for l in &lists[1..] {
                    assert_eq!(*l, lists[0], "seed {seed}: readers of {topic} differ");
                }
                // Each surviving writer's samples, all of them, in its order, once.
                let prefix = if topic == "A" { "a2-" } else { "b2-" };
                let mine: Vec<&str> = lists[0]
                    .iter()
                    .map(|(_, _, v)| v.as_str())
                    .filter(|v| v.starts_with(prefix))
                    .collect();
                let want: Vec<String> = (0..60).map(|i| format!("{prefix}{i}")).collect();
                assert_eq!(mine, want, "seed {seed}: writer order in {topic}");
            }
            // The crashed writer's samples: a prefix of what it wrote, in its order.
            let a1: Vec<&str> = got[&(2, "A")]
                .iter()
                .map(|(_, _, v)| v.as_str())
                .filter(|v| v.starts_with("a1-"))
                .collect();
            let want: Vec<String> = (0..a1.len()).map(|i| format!("a1-{i}")).collect();
            assert_eq!(a1, want, "seed {seed}: the crashed writer's samples");
        },
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let mut hashes = Vec::new();
    for seed in [5, 6] {
        let (a, ha) = crash_run(seed);
        let (b, hb) = crash_run(seed);
        assert_eq!(ha, hb, "seed {seed}: trace hashes differ");
        assert_eq!(a, b, "seed {seed}: readers' samples differ");
        hashes.push(ha);
    }
    assert_ne!(hashes[0], hashes[1], "the seed decides the run");
}

/// Topic `i` of the thousand-topic test: written at participant `i % 3`, read at
/// `(i + 1) % 3`, and at `(i + 2) % 3` too for every tenth topic.
fn thousand_topic_readers(i: usize) -> Vec<usize> {
    if i % 10 == 0 {
        vec![(i + 1) % 3, (i + 2) % 3]
    } else {
        vec![(i + 1) % 3]
    }
}

#[test]
fn a_thousand_topics_share_bounded_subgroups_and_each_reader_gets_exactly_its_topic() {
    for_seeds("a_thousand_topics_share_bounded_subgroups", |seed| {
        const TOPICS: usize = 1000;
        let (d, ps) = domain(seed, 3);
        let first_view = ps[0].view().unwrap().vid;
        let name = |i: usize| format!("Topic{i:04}");
        let subs: Vec<_> = ps
            .iter()
            .map(|p| p.create_subscriber(Default::default()).unwrap())
            .collect();
        let pubs: Vec<_> = ps
            .iter()
            .map(|p| p.create_publisher(Default::default()).unwrap())
            .collect();
        let mut readers = Vec::new();
        for i in 0..TOPICS {
            for at in thousand_topic_readers(i) {
                let t = ps[at]
                    .create_topic::<KeyedString>(&name(i), atomic())
                    .unwrap();
                let r = subs[at].create_datareader(&t, keep_all(&atomic())).unwrap();
                readers.push((i, at, r));
            }
        }
        let mut writers = Vec::new();
        for i in 0..TOPICS {
            let t = ps[i % 3]
                .create_topic::<KeyedString>(&name(i), atomic())
                .unwrap();
            let w = pubs[i % 3]
                .create_datawriter(&t, DataWriterQos::default())
                .unwrap();
            // Matched per topic, not per shared subgroup.
            assert_eq!(
                w.publication_matched_status().current_count as usize,
                thousand_topic_readers(i).len(),
                "seed {seed}: readers of topic {i}"
            );
            writers.push(w);
        }
        // 2,000 entities on 16 shared subgroups: a few dozen view changes, not one each.
        let views = ps[0].view().unwrap().vid - first_view;
        assert!(
            views < 100,
            "seed {seed}: {views} view changes for 2,000 entities"
        );
        for (i, w) in writers.iter().enumerate() {
            w.write(&ks("k", format!("{i}-0"))).unwrap();
        }
        // Participant 3 crashes; the others write once more.
        d.crash(3);
        for (i, w) in writers.iter().enumerate().filter(|(i, _)| i % 3 != 2) {
            w.write(&ks("k", format!("{i}-1"))).unwrap();
        }
        let survivors: Vec<&(usize, usize, DataReader<KeyedString>)> =
            readers.iter().filter(|(_, at, _)| *at != 2).collect();
        let mut got: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
        // Writers at the survivors: both samples. (The crashed one's: what the view
        // change's trim kept, the same at every survivor.)
        let complete = |got: &BTreeMap<(usize, usize), Vec<String>>| {
            survivors
                .iter()
                .filter(|(i, _, _)| i % 3 != 2)
                .all(|(i, at, _)| got.get(&(*i, *at)).map_or(0, |v| v.len()) >= 2)
        };
        assert!(
            d.run_until(ROUNDS_MAX / 100, || {
                for _ in 0..100 {
                    d.round();
                }
                for (i, at, r) in &survivors {
                    got.entry((*i, *at))
                        .or_default()
                        .extend(values(&r.take(usize::MAX, StateMask::ANY).unwrap()));
                }
                complete(&got)
            }),
            "seed {seed}: not every surviving reader got its samples"
        );
        d.run_for(20_000);
        for (i, at, r) in &survivors {
            let list = got.entry((*i, *at)).or_default();
            list.extend(values(&r.take(usize::MAX, StateMask::ANY).unwrap()));
            // Exactly its topic's samples, in its writer's order, once each; of the
            // crashed writer's one sample, all or none.
            let want: Vec<String> = if i % 3 == 2 {
                list.iter().take(1).cloned().collect()
            } else {
                vec![format!("{i}-0"), format!("{i}-1")]
            };
            assert_eq!(
                *list,
                want,
                "seed {seed}: reader of topic {i} at participant {}",
                at + 1
            );
            if i % 3 == 2 {
                assert!(
                    list.is_empty() || list[0] == format!("{i}-0"),
                    "seed {seed}: topic {i}: {list:?}"
                );
            }
        }
        // All-or-none across the crash: a crashed writer's topic read at both survivors
        // holds the same samples at both.
        for i in (0..TOPICS).filter(|i| i % 3 == 2 && i % 10 == 0) {
            assert_eq!(got.get(&(i, 0)), got.get(&(i, 1)), "seed {seed}: topic {i}");
        }
    });
}

#[test]
fn a_restarted_participant_leaves_no_stale_endpoints() {
    for_seeds(
        "a_restarted_participant_leaves_no_stale_endpoints",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let w = writer(&ps[0], "T", DataWriterQos::default());
            let _a = reader(&ps[1], "T", keep_all(&atomic()));
            let _b = reader(&ps[1], "T", keep_all(&atomic()));
            let _c = reader(&ps[2], "T", keep_all(&atomic()));
            assert_eq!(w.publication_matched_status().current_count, 3);
            d.crash(2);
            assert!(
                d.run_until(ROUNDS_MAX, || w.publication_matched_status().current_count
                    == 1),
                "seed {seed}: the crashed participant's readers are gone"
            );
            // A new process with the same id: the table it receives still holds its old
            // incarnation's readers; they must not count.
            let p2 = d.restart(2).unwrap();
            let r = reader(&p2, "T", keep_all(&atomic()));
            assert!(
                d.run_until(ROUNDS_MAX, || w.publication_matched_status().current_count
                    == 2),
                "seed {seed}: the new reader matched"
            );
            d.run_for(20_000);
            assert_eq!(
                w.publication_matched_status().current_count,
                2,
                "seed {seed}"
            );
            assert_eq!(
                r.subscription_matched_status().current_count,
                1,
                "seed {seed}: one writer"
            );
            // A participant that joins after all this sees the same table.
            let late = d.participant(4).unwrap();
            let lw = writer(&late, "T", DataWriterQos::default());
            assert_eq!(
                lw.publication_matched_status().current_count,
                2,
                "seed {seed}"
            );
            w.write(&ks("k", "after")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), ["after"], "seed {seed}");
        },
    );
}

/// A participant configured with another topic subgroup count than the domain's is
/// refused when it joins, with an error that names the setting; the domain goes on, and
/// a domain configured with one topic subgroup carries every topic in one total order.
#[test]
fn a_participant_with_another_topic_subgroup_count_is_refused() {
    for_seeds(
        "a_participant_with_another_topic_subgroup_count_is_refused",
        |seed| {
            let d = SimDomain::new(seed);
            let one = |c: &mut spindle_dds_core::ParticipantConfig| c.topic_subgroups = 1;
            let p1 = d
                .participant_with(1, Default::default(), one)
                .expect("participant 1");
            // Refused while participant 1 is alone: its leaving does not cost participant
            // 1 its majority.
            let e = d
                .participant_with(2, Default::default(), |c| c.topic_subgroups = 16)
                .expect_err("a different count is refused")
                .to_string();
            assert!(
                e.contains("topic_subgroups = 16") && e.contains("onto 1"),
                "seed {seed}: {e}"
            );
            let p3 = d
                .participant_with(3, Default::default(), one)
                .expect("participant 3");
            // One subgroup: samples of two topics written by two participants come to a
            // reader of both in one order at every reader.
            let ra = reader(&p3, "A", keep_all(&atomic()));
            let rb = reader(&p3, "B", keep_all(&atomic()));
            let wa = writer(&p1, "A", DataWriterQos::default());
            let wb = writer(&p3, "B", DataWriterQos::default());
            for i in 0..20 {
                wa.write(&ks("a", format!("a{i}"))).unwrap();
                wb.write(&ks("b", format!("b{i}"))).unwrap();
            }
            let a = take_n(&d, &ra, 20);
            let b = take_n(&d, &rb, 20);
            let mut idx: Vec<(u32, u64)> = a
                .iter()
                .chain(&b)
                .map(|s| (s.info.view_id, s.info.order_index))
                .collect();
            let n = idx.len();
            idx.sort_unstable();
            idx.dedup();
            assert_eq!(idx.len(), n, "seed {seed}: one order, no index twice");
            assert!(a
                .iter()
                .all(|s| s.data.as_ref().is_some_and(|d| d.key == "a")));
            assert!(b
                .iter()
                .all(|s| s.data.as_ref().is_some_and(|d| d.key == "b")));
        },
    );
}

/// Loaned reads give the same samples, infos and order as copying ones: `take_loaned`
/// decodes on demand, `read_loaned` leaves the samples in the cache (READ), and a
/// returned loan's buffers serve later deliveries.
#[test]
fn loaned_reads_match_copying_reads() {
    for_seeds("loaned_reads_match_copying_reads", |seed| {
        let (d, ps) = domain(seed, 2);
        let loaning = reader(&ps[1], "L", keep_all(&atomic()));
        let copying = reader(&ps[1], "L", keep_all(&atomic()));
        let w = writer(&ps[0], "L", DataWriterQos::default());
        for round in 0..3 {
            for i in 0..10 {
                w.write(&ks(&format!("k{}", i % 3), format!("{round}-{i}")))
                    .unwrap();
            }
            w.dispose(&ks("k0", "")).unwrap();
            let copied = take_n(&d, &copying, 11);
            let mut lent = Vec::new();
            d.run_until(ROUNDS_MAX, || {
                let peek = loaning.read_loaned(usize::MAX, StateMask::ANY).unwrap();
                if peek.len() < 11 {
                    return false;
                }
                let again = loaning.read_loaned(usize::MAX, StateMask::ANY).unwrap();
                assert_eq!(peek.len(), again.len(), "seed {seed}: a read leaves them");
                assert!(again
                    .iter()
                    .all(|s| s.info.sample_state == spindle_dds_core::SampleState::Read));
                drop((peek, again));
                let loan = loaning.take_loaned(usize::MAX, StateMask::ANY).unwrap();
                for s in loan.iter() {
                    lent.push((*s.info, s.data().unwrap()));
                }
                loan.return_loan();
                true
            });
            assert_eq!(lent.len(), copied.len(), "seed {seed} round {round}");
            for ((info, data), c) in lent.iter().zip(&copied) {
                assert_eq!(data, &c.data, "seed {seed} round {round}");
                assert_eq!(
                    (
                        info.order_index,
                        info.view_id,
                        info.valid_data,
                        info.instance_state
                    ),
                    (
                        c.info.order_index,
                        c.info.view_id,
                        c.info.valid_data,
                        c.info.instance_state
                    ),
                    "seed {seed} round {round}"
                );
            }
            assert!(loaning
                .take_loaned(usize::MAX, StateMask::ANY)
                .unwrap()
                .is_empty());
        }
    });
}

/// `take_into` and `read_into` give what `take` and `read` give (values, notices, infos,
/// order), reusing one buffer's values across accesses of more and fewer samples; `max`
/// bounds an access as for `take`.
#[test]
fn take_into_matches_the_copying_take() {
    for_seeds("take_into_matches_the_copying_take", |seed| {
        let (d, ps) = domain(seed, 2);
        let into = reader(&ps[1], "I", keep_all(&atomic()));
        let copying = reader(&ps[1], "I", keep_all(&atomic()));
        let w = writer(&ps[0], "I", DataWriterQos::default());
        let mut buf = SampleBuffer::new();
        for (round, n) in [10usize, 3, 25, 1].into_iter().enumerate() {
            for i in 0..n {
                w.write(&ks(
                    &format!("k{}", i % 3),
                    format!("{round}-{i}-{}", "x".repeat(i)),
                ))
                .unwrap();
            }
            w.dispose(&ks("k0", "")).unwrap();
            d.run_until(ROUNDS_MAX, || {
                into.read_into(&mut buf, usize::MAX, StateMask::ANY)
                    .unwrap()
                    > n
            });
            assert_eq!(buf.len(), n + 1, "seed {seed} round {round}: all read");
            // The copying reader, in the same participant, holds the same samples now: it
            // takes them at the same instant, so each sample's instance state (the
            // instance's at the access) is the same on both paths, however many
            // delivery steps the round's samples took.
            let copied = copying.take(usize::MAX, StateMask::ANY).unwrap();
            assert_eq!(copied.len(), n + 1, "seed {seed} round {round}: all taken");
            // A read leaves them (READ now); take them in steps of at most 4.
            let mut taken = Vec::new();
            loop {
                let got = into.take_into(&mut buf, 4, StateMask::ANY).unwrap();
                assert_eq!(got, buf.len(), "seed {seed}: the count is the buffer's");
                assert!(got <= 4, "seed {seed}: max bounds an access");
                if got == 0 {
                    break;
                }
                taken.extend(buf.iter().cloned());
            }
            assert!(
                buf.capacity() >= 4,
                "seed {seed}: values kept for the next access"
            );
            assert_eq!(taken.len(), copied.len(), "seed {seed} round {round}");
            for (t, c) in taken.iter().zip(&copied) {
                assert_eq!(t.data, c.data, "seed {seed} round {round}");
                assert_eq!(
                    (t.info.order_index, t.info.valid_data, t.info.instance_state),
                    (c.info.order_index, c.info.valid_data, c.info.instance_state),
                    "seed {seed} round {round}"
                );
                assert_eq!(
                    t.info.sample_state,
                    spindle_dds_core::SampleState::Read,
                    "seed {seed}: read before"
                );
            }
            assert!(
                taken.iter().any(|s| s.data.is_none()),
                "seed {seed}: the dispose notice comes without data"
            );
        }
    });
}

/// A participant that leaves (deleted) a domain of two leaves the other running: a
/// graceful leave is not a failure, and the one left alone keeps the majority.
#[test]
fn the_survivor_of_a_two_member_domain_goes_on_after_the_other_leaves() {
    for_seeds(
        "the_survivor_of_a_two_member_domain_goes_on_after_the_other_leaves",
        |seed| {
            let (d, mut ps) = domain(seed, 2);
            let second = ps.pop().expect("two participants");
            second.delete().expect("delete");
            let r = reader(&ps[0], "after", keep_all(&atomic()));
            let w = writer(&ps[0], "after", DataWriterQos::default());
            w.write(&ks("k", "v")).unwrap();
            assert_eq!(take_n(&d, &r, 1).len(), 1, "seed {seed}");
        },
    );
}

/// Raw CDR topics (`create_cdr_topic`) are the typed topic of the same name: a raw writer's
/// samples and disposes reach a typed reader in another participant as if a typed writer
/// had written them, and a typed writer's reach a raw reader as their exact encoding, with
/// the instance's key hash.
#[test]
fn raw_cdr_writers_and_readers_share_a_topic_with_typed_ones() {
    use spindle_topics::{CdrSample, Endianness, TopicType};
    for_seeds(
        "raw_cdr_writers_and_readers_share_a_topic_with_typed_ones",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let raw_topic = ps[0]
                .create_cdr_topic("R", KeyedString::TYPE_NAME, atomic())
                .unwrap();
            let raw_reader = ps[0]
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&raw_topic, keep_all(&atomic()))
                .unwrap();
            let raw_writer = ps[0]
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&raw_topic, DataWriterQos::default())
                .unwrap();
            let typed_reader = reader(&ps[1], "R", keep_all(&atomic()));
            let typed_writer = writer(&ps[1], "R", DataWriterQos::default());
            let raw = |k: &str, v: &str, e| {
                let s = ks(k, v.to_string());
                CdrSample::new(s.encode(e).unwrap(), s.key_hash().unwrap()).unwrap()
            };
            // Both byte orders: a raw sample keeps the one it was encoded in.
            raw_writer
                .write(&raw("a", "1", Endianness::Little))
                .unwrap();
            raw_writer.write(&raw("b", "2", Endianness::Big)).unwrap();
            raw_writer
                .dispose(&raw("a", "", Endianness::Little))
                .unwrap();
            let got = take_n(&d, &typed_reader, 3);
            assert_eq!(values(&got), ["1", "2"], "seed {seed}");
            assert!(
                !got[2].info.valid_data,
                "seed {seed}: the dispose is a notice"
            );
            assert_eq!(
                got[2].info.instance_state,
                InstanceState::NotAliveDisposed,
                "seed {seed}"
            );
            assert_eq!(got[2].info.instance_handle, got[0].info.instance_handle);
            let hello = ks("c", "3".to_string());
            typed_writer.write(&hello).unwrap();
            let mut seen = Vec::new();
            let arrived = d.run_until(ROUNDS_MAX, || {
                seen.extend(raw_reader.take(usize::MAX, StateMask::ANY).unwrap());
                seen.iter()
                    .filter_map(|s| s.data.as_ref())
                    .any(|s| s.key_hash_value() == hello.key_hash().unwrap())
            });
            assert!(
                arrived,
                "seed {seed}: the typed sample reaches the raw reader, keyed"
            );
            let from_typed = seen
                .iter()
                .filter_map(|s| s.data.as_ref())
                .find(|s| s.key_hash_value() == hello.key_hash().unwrap())
                .unwrap();
            assert_eq!(
                from_typed.bytes(),
                hello.encode(Endianness::Little).unwrap().as_slice(),
                "seed {seed}"
            );
            // The raw type refuses a typed topic creation, and a raw topic of another type.
            assert!(matches!(
                ps[0].create_topic::<CdrSample>("R2", atomic()),
                Err(Error::BadParameter(_))
            ));
            assert!(matches!(
                ps[1].create_cdr_topic("R", "Other::Type", atomic()),
                Err(Error::PreconditionNotMet(_))
            ));
        },
    );
}

/// A participant silent past the others' failure detector (paused) is excluded; the
/// others go on and deliver; when it runs again it learns it was excluded — its
/// `stopped()` and its stopped listener (called once) say so and by whom — and its
/// writer fails instead of writing into a view it is no longer in.
#[test]
fn a_paused_participant_is_excluded_and_learns_why_when_it_wakes() {
    for_seeds(
        "a_paused_participant_is_excluded_and_learns_why_when_it_wakes",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let r = reader(&ps[0], "X", keep_all(&atomic()));
            let w2 = writer(&ps[1], "X", DataWriterQos::default());
            let w3 = writer(&ps[2], "X", DataWriterQos::default());
            let calls = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
            let seen = Arc::clone(&calls);
            ps[2].set_stopped_listener(move |why| seen.lock().unwrap().push(why.to_string()));
            w3.write(&ks("3", "before")).unwrap();
            take_n(&d, &r, 1);
            d.world().pause(3);
            assert!(
                d.run_until(ROUNDS_MAX, || ps[0]
                    .view()
                    .is_some_and(|v| !v.members.contains(&3))),
                "seed {seed}: the silent member is excluded"
            );
            w2.write(&ks("2", "after")).unwrap();
            // The excluded writer's instance ends with a notice (its sample was taken),
            // then the new value.
            let got = take_n(&d, &r, 2);
            assert_eq!(values(&got), ["after"], "seed {seed}");
            let three = r.lookup_instance(&ks("3", "")).unwrap().expect("known");
            assert!(
                got.iter().any(|s| !s.info.valid_data
                    && s.info.instance_handle == three
                    && s.info.instance_state == InstanceState::NotAliveNoWriters),
                "seed {seed}: {got:?}"
            );
            d.world().resume(3);
            assert!(
                d.run_until(ROUNDS_MAX, || ps[2].stopped().is_some()),
                "seed {seed}: the woken member learns it stopped"
            );
            let why = ps[2].stopped().unwrap();
            assert!(why.contains("excluded"), "seed {seed}: {why}");
            assert!(why.contains("suspected"), "seed {seed}: {why}");
            d.run_for(10_000);
            assert_eq!(*calls.lock().unwrap(), [why], "seed {seed}: once");
            // A listener set later is called at once, with the same reason.
            let late = Arc::new(AtomicUsize::new(0));
            let l2 = Arc::clone(&late);
            ps[2].set_stopped_listener(move |_| {
                l2.fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(late.load(Ordering::SeqCst), 1, "seed {seed}");
            assert!(w3.write(&ks("3", "late")).is_err(), "seed {seed}");
        },
    );
}
