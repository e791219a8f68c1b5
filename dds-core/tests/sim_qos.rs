//! The QoS policies the DCPS layer enforces, in deterministic simulation: PARTITION,
//! DESTINATION_ORDER, READER_DATA_LIFECYCLE, LIVELINESS, PRESENTATION coherent sets and
//! the request/offer matching rules (the table is `docs/qos.md`). Each test runs several
//! seeds; a failure prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_qos <test>`).

mod common;
use common::sim::{domain, reader, take_n, values, writer, ROUNDS_MAX};
use common::{atomic, keep_all, ks};

use spindle_dds_core::sim::SIM_EPOCH_NS;
use spindle_dds_core::{DataReader, DomainParticipant, Error, InstanceState, StateMask};
use spindle_qos::DataWriterQos;
use spindle_topics::KeyedString;

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_qos", name, test);
}

/// PARTITION is enforced, not only parsed: readers match and receive only the writers
/// whose publisher shares a partition with their subscriber (names, `fnmatch` wildcards,
/// the default partition), matched statuses count only those, and a reader in a
/// partition nobody writes gets nothing. The wildcard reader sees both writers' samples
/// in the one total order the others see them in.
#[test]
fn partitions_decide_which_writers_a_reader_matches_and_hears() {
    use spindle_qos::{Partition, PublisherQos, SubscriberQos};
    for_seeds(
        "partitions_decide_which_writers_a_reader_matches_and_hears",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let part = |names: &[&str]| Partition {
                name: names.iter().map(|n| n.to_string()).collect(),
            };
            let reader_in = |p: &DomainParticipant, names: &[&str]| {
                let t = p.create_topic::<KeyedString>("P", atomic()).unwrap();
                let sub = p
                    .create_subscriber(SubscriberQos {
                        partition: part(names),
                        ..Default::default()
                    })
                    .unwrap();
                sub.create_datareader(&t, keep_all(&atomic())).unwrap()
            };
            let writer_in = |p: &DomainParticipant, names: &[&str]| {
                let t = p.create_topic::<KeyedString>("P", atomic()).unwrap();
                let publisher = p
                    .create_publisher(PublisherQos {
                        partition: part(names),
                        ..Default::default()
                    })
                    .unwrap();
                publisher
                    .create_datawriter(&t, DataWriterQos::default())
                    .unwrap()
            };
            let r_a = reader_in(&ps[1], &["A"]);
            let r_default = reader_in(&ps[1], &[]);
            let r_wild = reader_in(&ps[2], &["*"]);
            let r_b = reader_in(&ps[2], &["B", "C?"]);
            let w_a = writer_in(&ps[0], &["A", "Z"]);
            let w_default = writer_in(&ps[0], &[]);
            for i in 0..3 {
                w_a.write(&ks("k", format!("a{i}"))).unwrap();
                w_default.write(&ks("k", format!("d{i}"))).unwrap();
            }
            let wild = take_n(&d, &r_wild, 6);
            let a = take_n(&d, &r_a, 3);
            let default = take_n(&d, &r_default, 3);
            d.run_for(50_000);
            assert_eq!(values(&a), ["a0", "a1", "a2"], "seed {seed}");
            assert_eq!(values(&default), ["d0", "d1", "d2"], "seed {seed}");
            let wild = values(&wild);
            assert_eq!(wild.len(), 6, "seed {seed}: {wild:?}");
            assert!(
                r_a.take(usize::MAX, StateMask::ANY).unwrap().is_empty()
                    && r_default
                        .take(usize::MAX, StateMask::ANY)
                        .unwrap()
                        .is_empty()
                    && r_b.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}: a sample reached a reader outside its writer's partitions"
            );
            let counts = [&r_a, &r_default, &r_wild, &r_b]
                .map(|r| r.subscription_matched_status().current_count);
            assert_eq!(
                counts,
                [1, 1, 2, 0],
                "seed {seed}: readers' matched writers"
            );
            let counts = [&w_a, &w_default].map(|w| w.publication_matched_status().current_count);
            assert_eq!(counts, [2, 2], "seed {seed}: writers' matched readers");
            // Names that do not fit the built-in announcement are refused up front.
            let huge = vec!["x".repeat(600), "y".repeat(600)];
            let e = ps[0]
                .create_publisher(PublisherQos {
                    partition: Partition { name: huge },
                    ..Default::default()
                })
                .unwrap_err();
            assert!(
                e.to_string().contains("PARTITION_BYTES_MAX"),
                "seed {seed}: {e}"
            );
        },
    );
}

/// DESTINATION_ORDER BY_SOURCE_TIMESTAMP is enforced: per instance, a sample stamped
/// earlier than the newest one a reader kept is dropped there (a BY_RECEPTION reader keeps
/// it), so the instance ends with the value written last by the writers' clocks. Every
/// reader sees the same order, so every BY_SOURCE reader drops the same samples.
#[test]
fn destination_order_by_source_timestamp_drops_older_samples_per_instance() {
    use spindle_qos::{DestinationOrder, DestinationOrderKind};
    for_seeds(
        "destination_order_by_source_timestamp_drops_older_samples_per_instance",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let by_source = |p: &DomainParticipant| {
                let mut q = keep_all(&atomic());
                q.destination_order = DestinationOrder {
                    kind: DestinationOrderKind::BySourceTimestamp,
                };
                reader(p, "D", q)
            };
            let (s1, s2) = (by_source(&ps[1]), by_source(&ps[2]));
            let by_reception = reader(&ps[2], "D", keep_all(&atomic()));
            // The writers offer BY_SOURCE_TIMESTAMP, which the BY_SOURCE readers request.
            let offered = DataWriterQos {
                destination_order: DestinationOrder {
                    kind: DestinationOrderKind::BySourceTimestamp,
                },
                ..Default::default()
            };
            let (w0, w1) = (
                writer(&ps[0], "D", offered.clone()),
                writer(&ps[1], "D", offered),
            );
            let t = SIM_EPOCH_NS;
            w0.write_w_timestamp(&ks("k", "late clock"), t + 2_000)
                .unwrap();
            take_n(&d, &by_reception, 1);
            w1.write_w_timestamp(&ks("k", "early clock"), t + 1_000)
                .unwrap();
            w1.write_w_timestamp(&ks("j", "other instance"), t + 1_000)
                .unwrap();
            w1.write_w_timestamp(&ks("k", "latest"), t + 3_000).unwrap();
            assert_eq!(
                values(&take_n(&d, &by_reception, 3)),
                ["early clock", "other instance", "latest"],
                "seed {seed}: BY_RECEPTION keeps every sample"
            );
            d.run_for(10_000);
            for r in [&s1, &s2] {
                assert_eq!(
                    values(&r.take(usize::MAX, StateMask::ANY).unwrap()),
                    ["late clock", "other instance", "latest"],
                    "seed {seed}: BY_SOURCE drops the sample stamped before the newest"
                );
            }
        },
    );
}

/// `dispose_w_timestamp` and `unregister_instance_w_timestamp` stamp what they send with
/// the time given, and BY_SOURCE_TIMESTAMP orders them with the data by it: a dispose
/// stamped before the instance's newest sample is dropped, one stamped after it disposes.
#[test]
fn disposes_and_unregisters_carry_the_timestamp_given() {
    use spindle_qos::{DestinationOrder, DestinationOrderKind};
    for_seeds(
        "disposes_and_unregisters_carry_the_timestamp_given",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let by_source = DestinationOrder {
                kind: DestinationOrderKind::BySourceTimestamp,
            };
            let mut rq = keep_all(&atomic());
            rq.destination_order = by_source;
            let r = reader(&ps[1], "T", rq);
            let w = writer(
                &ps[0],
                "T",
                DataWriterQos {
                    destination_order: by_source,
                    ..Default::default()
                },
            );
            let t = SIM_EPOCH_NS;
            w.write_w_timestamp(&ks("k", "v"), t + 2_000).unwrap();
            w.write_w_timestamp(&ks("j", "v"), t + 2_000).unwrap();
            // Older than k's sample: dropped at a BY_SOURCE_TIMESTAMP reader.
            w.dispose_w_timestamp(&ks("k", ""), t + 1_000).unwrap();
            w.dispose_w_timestamp(&ks("j", ""), t + 3_000).unwrap();
            // With autodispose (the default), a dispose then the unregister, both at t + 4 µs.
            w.unregister_instance_w_timestamp(&ks("k", ""), t + 4_000)
                .unwrap();
            let got = take_n(&d, &r, 5);
            let seen: Vec<(bool, i64)> = got
                .iter()
                .map(|s| (s.info.valid_data, s.info.source_timestamp_ns - t))
                .collect();
            assert_eq!(
                seen,
                [
                    (true, 2_000),
                    (true, 2_000),
                    (false, 3_000),
                    (false, 4_000),
                    (false, 4_000)
                ],
                "seed {seed}: k's early dispose dropped, the others stamped as given"
            );
            let state = |key| r.lookup_instance(&ks(key, "")).unwrap().expect("known");
            assert_eq!(
                got.iter()
                    .rev()
                    .find(|s| s.info.instance_handle == state("j"))
                    .map(|s| s.info.instance_state),
                Some(InstanceState::NotAliveDisposed),
                "seed {seed}"
            );
        },
    );
}

/// Two topics of one name whose types (or definitions) differ count each other in
/// INCONSISTENT_TOPIC: `mine`, a reader's, the other side's one writer; `other`, a
/// writer's, the reader and the writer of `mine`'s type; reading resets the change.
fn each_counts_the_other<A: spindle_topics::TopicType, B: spindle_topics::TopicType>(
    seed: u64,
    mine: &spindle_dds_core::Topic<A>,
    other: &spindle_dds_core::Topic<B>,
) {
    assert_eq!(
        mine.inconsistent_topic_status().total_count,
        1,
        "seed {seed}: the reader's topic counts the other side's writer"
    );
    let s = other.inconsistent_topic_status();
    assert_eq!(
        (s.total_count, s.total_count_change),
        (2, 2),
        "seed {seed}: a reader and a writer"
    );
    assert_eq!(
        other.inconsistent_topic_status().total_count_change,
        0,
        "seed {seed}: read, the change resets"
    );
}

/// One topic name with two types: DDS's INCONSISTENT_TOPIC. A reader and a writer of
/// different types do not match (no matched count, no samples, `wait_for_readers` not
/// satisfied), each side's topic counts the other in `inconsistent_topic_status`, and a
/// writer of the reader's type still reaches it.
#[test]
fn a_topic_name_with_two_types_is_inconsistent_and_not_matched() {
    use spindle_topics::{CdrSample, TopicType};
    for_seeds(
        "a_topic_name_with_two_types_is_inconsistent_and_not_matched",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let mine = ps[1].create_topic::<KeyedString>("T", atomic()).unwrap();
            let r = ps[1]
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&mine, keep_all(&atomic()))
                .unwrap();
            // A writer of another type on the same name (its bytes happen to be a valid
            // KeyedString: only the type decides).
            let other = ps[0]
                .create_cdr_topic("T", "Other::Type", atomic())
                .unwrap();
            let w = ps[0]
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&other, DataWriterQos::from_topic_qos(&atomic()))
                .unwrap();
            let v = ks("k", "mistyped");
            let bytes = v.encode(spindle_topics::Endianness::Little).unwrap();
            w.write(&CdrSample::new(bytes, v.key_hash().unwrap()).unwrap())
                .unwrap();
            let e = w
                .wait_for_readers(1, std::time::Duration::from_millis(200))
                .unwrap_err();
            assert!(
                matches!(&e, Error::Timeout(m) if m.contains("another type than its Other::Type")),
                "seed {seed}: {e}"
            );
            // A writer of the reader's type, after it: its sample is the only one taken.
            let good = writer(&ps[2], "T", DataWriterQos::from_topic_qos(&atomic()));
            good.write(&ks("k", "typed")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), ["typed"], "seed {seed}");
            d.run_for(10_000);
            assert!(
                r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}"
            );
            assert_eq!(
                r.subscription_matched_status().current_count,
                1,
                "seed {seed}"
            );
            assert_eq!(
                w.publication_matched_status().current_count,
                0,
                "seed {seed}"
            );
            each_counts_the_other(seed, &mine, &other);
        },
    );
}

/// One type name, two definitions (two IDL files, as two programs might have): the
/// structural hash each side announces tells them apart, so a reader of one definition
/// never takes the other's bytes, and both topics count the other side in
/// INCONSISTENT_TOPIC, as for two type names. A side that does not know its definition (a
/// raw CDR topic without a run-time type) still matches by the name.
#[test]
fn one_type_name_with_two_definitions_is_inconsistent_and_not_matched() {
    use spindle_dynamic::DynType;
    use spindle_topics::{CdrSample, Endianness};
    for_seeds(
        "one_type_name_with_two_definitions_is_inconsistent_and_not_matched",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let a = DynType::from_idl_source(
                "a.idl",
                "module T { struct Plain { long x; }; };",
                "T::Plain",
            )
            .unwrap();
            let b = DynType::from_idl_source(
                "b.idl",
                "module T { struct Plain { string<8> x; double y; }; };",
                "T::Plain",
            )
            .unwrap();
            assert_eq!(a.type_name(), b.type_name());
            let sample = |t: &DynType, json: &str| {
                let e = t.encode_json_str(json, Endianness::Little).unwrap();
                CdrSample::new(e.bytes, e.key_hash).unwrap()
            };
            let read = |p: &DomainParticipant, t| -> DataReader<CdrSample> {
                p.create_subscriber(Default::default())
                    .unwrap()
                    .create_datareader(t, keep_all(&atomic()))
                    .unwrap()
            };
            let write = |p: &DomainParticipant, t| {
                p.create_publisher(Default::default())
                    .unwrap()
                    .create_datawriter(t, DataWriterQos::from_topic_qos(&atomic()))
                    .unwrap()
            };
            let take = |r: &DataReader<CdrSample>, n: usize| {
                let mut got = Vec::new();
                d.run_until(ROUNDS_MAX, || {
                    got.extend(r.take(usize::MAX, StateMask::ANY).unwrap());
                    got.len() >= n
                });
                got.iter()
                    .filter_map(|s| s.data.as_ref().map(|c| a.decode_json(c.bytes()).unwrap()))
                    .collect::<Vec<_>>()
            };
            let mine = ps[1].create_cdr_topic_with_type("P", &a, atomic()).unwrap();
            let r = read(&ps[1], &mine);
            // One participant's topic has one definition.
            let e = ps[1]
                .create_cdr_topic_with_type("P", &b, atomic())
                .unwrap_err();
            assert!(
                matches!(&e, Error::PreconditionNotMet(m) if m.contains("another definition of type T::Plain")),
                "seed {seed}: {e}"
            );
            let other = ps[0].create_cdr_topic_with_type("P", &b, atomic()).unwrap();
            let w = write(&ps[0], &other);
            w.write(&sample(&b, r#"{"x": "mistyped", "y": 1.5}"#))
                .unwrap();
            let e = w
                .wait_for_readers(1, std::time::Duration::from_millis(200))
                .unwrap_err();
            assert!(
                matches!(&e, Error::Timeout(m) if m.contains("another definition of it")),
                "seed {seed}: {e}"
            );
            // A writer of the reader's definition, after it: its sample is the only one.
            let same = ps[2].create_cdr_topic_with_type("P", &a, atomic()).unwrap();
            write(&ps[2], &same)
                .write(&sample(&a, r#"{"x": 7}"#))
                .unwrap();
            assert_eq!(take(&r, 1), [serde_json::json!({"x": 7})], "seed {seed}");
            d.run_for(10_000);
            assert!(
                r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}"
            );
            assert_eq!(r.subscription_matched_status().current_count, 1);
            assert_eq!(w.publication_matched_status().current_count, 0);
            each_counts_the_other(seed, &mine, &other);
            assert_eq!(
                same.inconsistent_topic_status().total_count,
                1,
                "seed {seed}"
            );

            // The same name where one side does not know its definition: the name decides.
            let unknown = ps[0].create_cdr_topic("Q", "T::Plain", atomic()).unwrap();
            let known = ps[1].create_cdr_topic_with_type("Q", &a, atomic()).unwrap();
            let rq = read(&ps[1], &known);
            write(&ps[0], &unknown)
                .write(&sample(&a, r#"{"x": 9}"#))
                .unwrap();
            assert_eq!(take(&rq, 1), [serde_json::json!({"x": 9})], "seed {seed}");
            assert_eq!(rq.subscription_matched_status().current_count, 1);
            assert_eq!(known.inconsistent_topic_status().total_count, 0);
            assert_eq!(unknown.inconsistent_topic_status().total_count, 0);
        },
    );
}

/// READER_DATA_LIFECYCLE is enforced in virtual time: a disposed instance's samples (and
/// an instance whose writer unregistered it) are purged once the autopurge delay passed —
/// read or not — while a reader with the default (infinite) delays keeps them.
#[test]
fn reader_data_lifecycle_autopurges_after_its_delays() {
    use spindle_qos::{Duration as QosDuration, ReaderDataLifecycle};
    for_seeds(
        "reader_data_lifecycle_autopurges_after_its_delays",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let mut q = keep_all(&atomic());
            q.reader_data_lifecycle = ReaderDataLifecycle {
                autopurge_nowriter_samples_delay: QosDuration::from_millis(300),
                autopurge_disposed_samples_delay: QosDuration::from_millis(100),
            };
            let purging = reader(&ps[1], "A", q);
            let keeping = reader(&ps[1], "A", keep_all(&atomic()));
            // Unregistering must not dispose (the default WRITER_DATA_LIFECYCLE does).
            let mut wq = DataWriterQos::default();
            wq.writer_data_lifecycle.autodispose_unregistered_instances = false;
            let w = writer(&ps[0], "A", wq);
            w.write(&ks("disposed", "d")).unwrap();
            w.write(&ks("unregistered", "u")).unwrap();
            w.write(&ks("alive", "a")).unwrap();
            w.dispose(&ks("disposed", "")).unwrap();
            w.unregister_instance(&ks("unregistered", "")).unwrap();
            // A read (not a take) leaves the samples in both caches.
            let seen = |r: &DataReader<KeyedString>| {
                let mut keys: Vec<String> = r
                    .read(usize::MAX, StateMask::ANY)
                    .unwrap()
                    .iter()
                    .filter_map(|s| s.data.as_ref().map(|d| d.key.clone()))
                    .collect();
                keys.sort();
                keys
            };
            let all = ["alive", "disposed", "unregistered"];
            assert!(
                d.run_until(ROUNDS_MAX, || seen(&purging).len() == 3),
                "seed {seed}: samples arrive"
            );
            d.run_for(200_000);
            assert_eq!(
                seen(&purging),
                ["alive", "unregistered"],
                "seed {seed}: 200 ms"
            );
            d.run_for(200_000);
            assert_eq!(seen(&purging), ["alive"], "seed {seed}: 400 ms");
            assert_eq!(seen(&keeping), all, "seed {seed}: infinite delays keep all");
            // A purged instance is forgotten: new data makes it NEW and ALIVE again.
            w.write(&ks("disposed", "again")).unwrap();
            let again = take_n(&d, &purging, 2);
            let back = again
                .iter()
                .find(|s| s.data.as_ref().is_some_and(|v| v.value == "again"))
                .expect("the new sample");
            assert_eq!(
                (back.info.view_state, back.info.disposed_generation_count),
                (spindle_dds_core::ViewState::New, 0),
                "seed {seed}"
            );
        },
    );
}

/// LIVELINESS MANUAL_BY_TOPIC with a finite lease is enforced in virtual time: while the
/// writer writes or asserts within its lease the reader counts it alive; once it stays
/// silent past the lease the reader counts it not alive (LIVELINESS_CHANGED), its
/// instances become NOT_ALIVE_NO_WRITERS and the writer counts LIVELINESS_LOST; a new
/// write brings it back. Under MANUAL_BY_PARTICIPANT the participant's assertion renews
/// it, and so does any other entity of its participant.
#[test]
fn manual_liveliness_leases_expire_and_renew() {
    use spindle_qos::{Duration as QosDuration, Liveliness, LivelinessKind};
    for_seeds("manual_liveliness_leases_expire_and_renew", |seed| {
        let (d, ps) = domain(seed, 2);
        let r = reader(&ps[1], "L", keep_all(&atomic()));
        let manual = |kind| {
            let q = DataWriterQos {
                liveliness: Liveliness {
                    kind,
                    lease_duration: QosDuration::from_millis(100),
                },
                ..Default::default()
            };
            writer(&ps[0], "L", q)
        };
        let by_topic = manual(LivelinessKind::ManualByTopic);
        let by_participant = manual(LivelinessKind::ManualByParticipant);
        by_topic.write(&ks("t", "1")).unwrap();
        by_participant.write(&ks("p", "1")).unwrap();
        // Read, not taken: the samples stay to show their instances' states.
        let held = |n: usize| r.read(usize::MAX, StateMask::ANY).unwrap().len() >= n;
        assert!(d.run_until(ROUNDS_MAX, || held(2)), "seed {seed}");
        let alive = |r: &DataReader<KeyedString>| r.liveliness_changed_status().alive_count;
        assert!(
            d.run_until(ROUNDS_MAX, || alive(&r) == 2),
            "seed {seed}: both alive"
        );
        // 300 ms of participant assertions: they renew only the MANUAL_BY_PARTICIPANT
        // writer; the MANUAL_BY_TOPIC one, silent, lapses.
        for _ in 0..6 {
            d.run_for(50_000);
            ps[0].assert_liveliness().unwrap();
        }
        d.run_for(20_000);
        let s = r.liveliness_changed_status();
        assert_eq!(
            (s.alive_count, s.not_alive_count),
            (1, 1),
            "seed {seed}: one renewed"
        );
        assert_eq!(
            by_topic.liveliness_lost_status().total_count,
            1,
            "seed {seed}"
        );
        assert_eq!(
            by_participant.liveliness_lost_status().total_count,
            0,
            "seed {seed}"
        );
        // Silence past the lease: both lapsed.
        d.run_for(300_000);
        let s = r.liveliness_changed_status();
        assert_eq!(
            (s.alive_count, s.not_alive_count),
            (0, 2),
            "seed {seed}: lapsed"
        );
        assert_eq!(
            by_participant.liveliness_lost_status().total_count,
            1,
            "seed {seed}"
        );
        // Their samples were read already, so each instance also gets a notice (no data)
        // that says it ended.
        let states: Vec<(bool, InstanceState)> = r
            .read(usize::MAX, StateMask::ANY)
            .unwrap()
            .iter()
            .map(|s| (s.info.valid_data, s.info.instance_state))
            .collect();
        assert_eq!(
            states,
            [
                (true, InstanceState::NotAliveNoWriters),
                (true, InstanceState::NotAliveNoWriters),
                (false, InstanceState::NotAliveNoWriters),
                (false, InstanceState::NotAliveNoWriters)
            ],
            "seed {seed}: the lapsed writers' instances"
        );
        // A write brings the writer back, and its instance.
        by_topic.write(&ks("t", "2")).unwrap();
        assert!(d.run_until(ROUNDS_MAX, || held(5)), "seed {seed}");
        let back = r.read(usize::MAX, StateMask::ANY).unwrap();
        let t_state = |v: &str| {
            back.iter()
                .find(|s| {
                    s.data
                        .as_ref()
                        .is_some_and(|d| d.value == v && d.key == "t")
                })
                .map(|s| s.info.instance_state)
        };
        assert_eq!(t_state("2"), Some(InstanceState::Alive), "seed {seed}");
        // Any entity of a participant asserts its MANUAL_BY_PARTICIPANT writers: both back.
        let s = r.liveliness_changed_status();
        assert_eq!(
            (s.alive_count, s.not_alive_count),
            (2, 0),
            "seed {seed}: back"
        );
    });
}

/// PRESENTATION coherent sets (TOPIC scope): a set's samples reach each reader all at
/// once when the set ends, never before; when the writer crashes inside a set, every
/// reader drops the whole set — each holds exactly the finished sets, the same samples in
/// the same order. Misuse is an error (GROUP scope: `sim_group.rs`).
#[test]
fn coherent_sets_arrive_whole_or_not_at_all_even_when_the_writer_crashes() {
    use spindle_qos::{Presentation, PresentationAccessScope, PublisherQos};
    for_seeds(
        "coherent_sets_arrive_whole_or_not_at_all_even_when_the_writer_crashes",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let readers = [
                reader(&ps[1], "C", keep_all(&atomic())),
                reader(&ps[2], "C", keep_all(&atomic())),
            ];
            let coherent = |scope| PublisherQos {
                presentation: Presentation {
                    access_scope: scope,
                    coherent_access: true,
                    ordered_access: false,
                },
                ..Default::default()
            };
            let publisher = ps[0]
                .create_publisher(coherent(PresentationAccessScope::Topic))
                .unwrap();
            let t = ps[0].create_topic::<KeyedString>("C", atomic()).unwrap();
            let w = publisher
                .create_datawriter(&t, DataWriterQos::default())
                .unwrap();
            assert!(matches!(
                publisher.end_coherent_changes(),
                Err(Error::PreconditionNotMet(_))
            ));
            // Three finished sets of four samples over two instances.
            for set in 0..3 {
                publisher.begin_coherent_changes().unwrap();
                assert!(publisher.begin_coherent_changes().is_err(), "seed {seed}");
                for i in 0..4 {
                    w.write(&ks(&format!("k{}", i % 2), format!("s{set}-{i}")))
                        .unwrap();
                }
                d.run_for(20_000);
                for r in &readers {
                    assert!(
                        r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                        "seed {seed}: set {set} is held back until it ends"
                    );
                }
                publisher.end_coherent_changes().unwrap();
                for r in &readers {
                    assert_eq!(take_n(&d, r, 4).len(), 4, "seed {seed}: set {set} whole");
                }
            }
            // A fourth set, cut by the writer's crash after some of it reached the readers.
            publisher.begin_coherent_changes().unwrap();
            let before_crash = 1 + (seed % 4) as usize;
            for i in 0..before_crash {
                w.write(&ks("k0", format!("cut-{i}"))).unwrap();
                d.run_for(5_000);
            }
            d.crash(1);
            assert!(
                d.run_until(ROUNDS_MAX, || ps[1]
                    .view()
                    .is_some_and(|v| !v.members.contains(&1))),
                "seed {seed}: the crash is noticed"
            );
            d.run_for(50_000);
            for r in &readers {
                // Only the notices of the instances the crashed writer left: no data.
                let got = r.take(usize::MAX, StateMask::ANY).unwrap();
                assert!(
                    !got.is_empty()
                        && got.iter().all(|s| !s.info.valid_data
                        && s.info.instance_state == InstanceState::NotAliveNoWriters),
                    "seed {seed}: no sample of the cut set ({before_crash} written) arrives: {got:?}"
                );
            }
        },
    );
}

/// Matching follows the DDS request/offer rules beyond RELIABILITY and DURABILITY: a
/// writer offering a longer DEADLINE than a reader requests, or another OWNERSHIP kind, is
/// not matched — counted in REQUESTED_INCOMPATIBLE_QOS with that policy — and its samples
/// never reach the reader, while a compatible writer's do.
#[test]
fn writers_failing_a_readers_requested_qos_are_not_matched_and_not_heard() {
    use spindle_qos::{Deadline, Duration as QosDuration, Ownership, OwnershipKind, QosPolicyId};
    for_seeds(
        "writers_failing_a_readers_requested_qos_are_not_matched_and_not_heard",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let mut rq = keep_all(&atomic());
            rq.deadline = Deadline {
                period: QosDuration::from_millis(100),
            };
            let strict = reader(&ps[1], "Q", rq);
            let mut eq = keep_all(&atomic());
            eq.ownership = Ownership {
                kind: OwnershipKind::Exclusive,
            };
            let exclusive = reader(&ps[1], "Q", eq);
            let lax = writer(&ps[0], "Q", DataWriterQos::default());
            let prompt = writer(
                &ps[0],
                "Q",
                DataWriterQos {
                    deadline: Deadline {
                        period: QosDuration::from_millis(50),
                    },
                    ..Default::default()
                },
            );
            lax.write(&ks("a", "lax")).unwrap();
            prompt.write(&ks("b", "prompt")).unwrap();
            assert_eq!(values(&take_n(&d, &strict, 1)), ["prompt"], "seed {seed}");
            d.run_for(20_000);
            assert!(
                strict.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}: the writer with the longer deadline is not heard"
            );
            let s = strict.requested_incompatible_qos_status();
            assert_eq!(
                (s.total_count, s.last_policy_id),
                (1, Some(QosPolicyId::Deadline)),
                "seed {seed}"
            );
            assert_eq!(strict.subscription_matched_status().current_count, 1);
            // Neither shared-ownership writer serves the exclusive reader.
            assert!(
                exclusive
                    .take(usize::MAX, StateMask::ANY)
                    .unwrap()
                    .is_empty(),
                "seed {seed}"
            );
            let s = exclusive.requested_incompatible_qos_status();
            assert_eq!(
                (s.total_count, s.last_policy_id),
                (2, Some(QosPolicyId::Ownership)),
                "seed {seed}"
            );
            assert_eq!(
                [&lax, &prompt].map(|w| w.publication_matched_status().current_count),
                [0, 1],
                "seed {seed}: writers count only the readers they serve"
            );
            // And the writers count, once each, the readers they fail
            // (OFFERED_INCOMPATIBLE_QOS): lax fails both (deadline, ownership), prompt
            // the exclusive one.
            let offered = |w: &spindle_dds_core::DataWriter<KeyedString>| {
                let s = w.offered_incompatible_qos_status();
                (s.total_count, s.total_count_change, s.last_policy_id)
            };
            assert_eq!(offered(&lax).0, 2, "seed {seed}");
            assert_eq!(
                offered(&prompt),
                (1, 1, Some(QosPolicyId::Ownership)),
                "seed {seed}"
            );
            assert_eq!(
                offered(&prompt).1,
                0,
                "seed {seed}: reading resets the change"
            );
            // The matched lists name exactly the endpoints the statuses count, and their
            // data is what the built-in topic announced.
            let (n0, n1) = (ps[0].node_id(), ps[1].node_id());
            let strict_key = (n1, strict.handle().0);
            assert_eq!(prompt.get_matched_subscriptions().unwrap(), [strict_key]);
            assert!(lax.get_matched_subscriptions().unwrap().is_empty());
            assert_eq!(
                strict.get_matched_publications().unwrap(),
                [(n0, prompt.id())],
                "seed {seed}"
            );
            assert!(exclusive.get_matched_publications().unwrap().is_empty());
            let data = strict
                .get_matched_publication_data((n0, prompt.id()))
                .unwrap();
            assert_eq!(
                (data.entity, data.reader, data.rxo.deadline_us),
                (prompt.id(), false, Some(50_000)),
                "seed {seed}"
            );
            let data = prompt.get_matched_subscription_data(strict_key).unwrap();
            assert_eq!((data.entity, data.reader), (strict_key.1, true));
            let refused = strict
                .get_matched_publication_data((n0, lax.id()))
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains(&format!("endpoint {n0}.{} is not matched", lax.id())),
                "seed {seed}: {refused}"
            );
        },
    );
}

/// A writer in a partition that writes as soon as it is created reaches every reader
/// there, in its own participant and in another, with every sample: a reader holds
/// samples back until the built-in table names their writer (`held.rs`; the unit test
/// `reader_core::tests` makes the announcement come late, which the simulator's
/// schedule does not), and none stays held.
#[test]
fn a_partitioned_writers_first_samples_all_reach_its_reader() {
    use spindle_qos::{Partition, PublisherQos, SubscriberQos};
    common::sim::for_seeds_in(
        1..=48,
        "sim_qos",
        "a_partitioned_writers_first_samples_all_reach_its_reader",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let part = || Partition {
                name: vec!["x".to_string()],
            };
            let reader_in_x = |p: &DomainParticipant| {
                let t = p.create_topic::<KeyedString>("PX", atomic()).unwrap();
                p.create_subscriber(SubscriberQos {
                    partition: part(),
                    ..Default::default()
                })
                .unwrap()
                .create_datareader(&t, keep_all(&atomic()))
                .unwrap()
            };
            let (r, own) = (reader_in_x(&ps[1]), reader_in_x(&ps[0]));
            let t = ps[0].create_topic::<KeyedString>("PX", atomic()).unwrap();
            let w = ps[0]
                .create_publisher(PublisherQos {
                    partition: part(),
                    ..Default::default()
                })
                .unwrap()
                .create_datawriter(&t, DataWriterQos::default())
                .unwrap();
            w.wait_for_readers(1, std::time::Duration::from_secs(10))
                .unwrap();
            for i in 0..2 {
                w.write(&ks("k", format!("v{i}"))).unwrap();
            }
            for r in [&r, &own] {
                let got = take_n(&d, r, 2);
                assert_eq!(values(&got), ["v0", "v1"], "seed {seed}");
            }
        },
    );
}

/// A writer's instances: `register_instance` registers without sending, `lookup_instance`
/// and `get_key_value` find what it registered, RESOURCE_LIMITS `max_instances` refuses
/// a new instance before anything is sent (and an unregister makes room), the handle
/// forms of `dispose` and `unregister_instance` reach readers as the data forms do, and
/// deleting the writer ends only the instances it wrote.
#[test]
fn a_writers_instances_are_registered_bounded_looked_up_and_ended_by_handle() {
    use spindle_qos::ResourceLimits;
    for_seeds(
        "a_writers_instances_are_registered_bounded_looked_up_and_ended_by_handle",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let r = reader(&ps[1], "inst", keep_all(&atomic()));
            let t = ps[0].create_topic::<KeyedString>("inst", atomic()).unwrap();
            let publisher = ps[0].create_publisher(Default::default()).unwrap();
            let qos = DataWriterQos {
                resource_limits: ResourceLimits {
                    max_instances: 2,
                    ..Default::default()
                },
                ..DataWriterQos::from_topic_qos(&atomic())
            };
            let w = publisher.create_datawriter(&t, qos).unwrap();
            let fence = writer(&ps[0], "inst", DataWriterQos::from_topic_qos(&atomic()));

            assert_eq!(w.lookup_instance(&ks("k1", "")).unwrap(), None);
            let h1 = w.register_instance(&ks("k1", "registered")).unwrap();
            assert_eq!(w.lookup_instance(&ks("k1", "")).unwrap(), Some(h1));
            assert_eq!(w.get_key_value(h1).unwrap().key, "k1", "seed {seed}");
            w.write(&ks("k2", "v2")).unwrap();
            let h2 = w
                .lookup_instance(&ks("k2", ""))
                .unwrap()
                .expect("k2 registered");
            let full = w.write(&ks("k3", "refused")).unwrap_err();
            assert!(
                matches!(&full, Error::OutOfResources(m) if m.contains("max_instances = 2")),
                "seed {seed}: {full}"
            );
            w.write(&ks("k1", "v1")).unwrap();
            w.dispose_by_handle(h2).unwrap();
            // Under the default autodispose_unregistered_instances: a dispose, then it.
            w.unregister_by_handle(h2).unwrap();
            assert_eq!(w.lookup_instance(&ks("k2", "")).unwrap(), None);
            for gone in [w.get_key_value(h2).err(), w.dispose_by_handle(h2).err()] {
                assert!(matches!(gone, Some(Error::BadParameter(_))), "{gone:?}");
            }
            w.write(&ks("k3", "v3")).unwrap();

            let got = take_n(&d, &r, 6);
            assert_eq!(values(&got), ["v2", "v1", "v3"], "seed {seed}");
            let ends: Vec<_> = got.iter().filter(|s| !s.info.valid_data).collect();
            assert_eq!(ends.len(), 3, "seed {seed}: {got:?}");
            assert!(
                ends.iter().all(|s| s.info.instance_handle == h2),
                "seed {seed}"
            );
            assert_eq!(r.get_key_value(h2).unwrap().key, "k2", "seed {seed}");

            // k3 ends before the deletion; k4 is registered and never written: the
            // deletion ends k1 alone (a dispose and an unregister), then the fence.
            w.unregister_instance(&ks("k3", "")).unwrap();
            let h4 = w.register_instance(&ks("k4", "")).unwrap();
            take_n(&d, &r, 2);
            publisher.delete_datawriter(w).unwrap();
            fence.write(&ks("fence", "after")).unwrap();
            let mut after = Vec::new();
            d.run_until(ROUNDS_MAX, || {
                after.extend(r.take(usize::MAX, StateMask::ANY).unwrap());
                after.iter().any(|s| s.info.valid_data)
            });
            assert_eq!(values(&after), ["after"], "seed {seed}: {after:?}");
            let ended: Vec<_> = after.iter().filter(|s| !s.info.valid_data).collect();
            assert_eq!(ended.len(), 2, "seed {seed}: {after:?}");
            assert!(
                ended.iter().all(|s| s.info.instance_handle == h1),
                "seed {seed}"
            );
            assert!(
                matches!(r.get_key_value(h4), Err(Error::BadParameter(_))),
                "seed {seed}: the reader never heard of k4"
            );
        },
    );
}

/// A dispose carries the value its writer gave: a reader that never had a data sample of
/// the instance (it came later, or the data was filtered) still learns which instance
/// ended (`get_key_value`).
#[test]
fn a_dispose_names_its_instance_to_a_reader_that_never_had_its_data() {
    for_seeds(
        "a_dispose_names_its_instance_to_a_reader_that_never_had_its_data",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let r = reader(&ps[1], "ended", keep_all(&atomic()));
            let w = writer(&ps[0], "ended", DataWriterQos::from_topic_qos(&atomic()));
            w.dispose(&ks("never written", "")).unwrap();
            let got = take_n(&d, &r, 1);
            assert_eq!(got.len(), 1, "seed {seed}: {got:?}");
            let info = &got[0].info;
            assert!(!info.valid_data, "seed {seed}");
            assert_eq!(info.instance_state, InstanceState::NotAliveDisposed);
            let key = r.get_key_value(info.instance_handle).unwrap().key;
            assert_eq!(key, "never written", "seed {seed}");
            let known = r.lookup_instance(&ks("never written", "")).unwrap();
            assert_eq!(known, Some(info.instance_handle), "seed {seed}");
        },
    );
}
