//! QoS changed after creation, in deterministic simulation: a publisher's or
//! subscriber's PARTITION moves its writers or readers (announced again, judged by the
//! names each sample was written under), and a reader's or writer's DEADLINE and
//! LATENCY_BUDGET are enforced and matched as they are now; and the default QoS a
//! participant, publisher or subscriber gives new entities. Each test runs several seeds;
//! a failure prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_set_qos <test>`).

mod common;
use common::sim::{domain, reader, take_n, values, writer};
use common::{atomic, keep_all, ks, order};

use spindle_dds_core::{DataReader, DataWriter, DomainParticipant, Error, StateMask};
use spindle_qos::{
    DataWriterQos, Deadline, Duration as QosDuration, History, Partition, Presentation,
    PublisherQos, QosPolicyId, SubscriberQos,
};
use spindle_topics::KeyedString;

/// Samples a writer writes just before its publisher moves.
const BURST: usize = 200;

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_set_qos", name, test);
}

fn part(names: &[&str]) -> Partition {
    Partition {
        name: names.iter().map(|n| n.to_string()).collect(),
    }
}

/// A reader of topic "M" in a subscriber of PARTITION `names`, and the subscriber.
fn reader_in(
    p: &DomainParticipant,
    names: &[&str],
) -> (spindle_dds_core::Subscriber, DataReader<KeyedString>) {
    let t = p.create_topic::<KeyedString>("M", atomic()).unwrap();
    let sub = p
        .create_subscriber(SubscriberQos {
            partition: part(names),
            ..Default::default()
        })
        .unwrap();
    let r = sub.create_datareader(&t, keep_all(&atomic())).unwrap();
    (sub, r)
}

/// Everything `r` holds now.
fn drain(r: &DataReader<KeyedString>) -> Vec<String> {
    values(&r.take(usize::MAX, StateMask::ANY).unwrap())
}

/// A publisher's `set_qos` moves its writer from partition A to B right after a burst of
/// writes: readers in A take exactly what it wrote before the move (also what is
/// delivered after their participant learnt of it), readers in B exactly what it wrote
/// after, and two wildcard readers on different participants all of it in one order.
/// Matched statuses follow the move, and so does a subscriber's own move. PRESENTATION
/// cannot change.
#[test]
fn a_partition_moves_its_writers_and_readers_and_each_sample_keeps_the_names_it_was_written_under()
{
    for_seeds(
        "a_partition_moves_its_writers_and_readers_and_each_sample_keeps_the_names_it_was_written_under",
        |seed| {
            let (d, ps) = domain(seed, 3);
            let (sub_a, r_a) = reader_in(&ps[1], &["A"]);
            let (_, r_b) = reader_in(&ps[2], &["B"]);
            let (_, any_1) = reader_in(&ps[1], &["*"]);
            let (_, any_2) = reader_in(&ps[2], &["*"]);
            let t = ps[0].create_topic::<KeyedString>("M", atomic()).unwrap();
            let publisher = ps[0]
                .create_publisher(PublisherQos {
                    partition: part(&["A"]),
                    ..Default::default()
                })
                .unwrap();
            let w = publisher
                .create_datawriter(&t, DataWriterQos::default())
                .unwrap();
            let matched = |w: &DataWriter<KeyedString>| w.publication_matched_status().current_count;
            assert_eq!(matched(&w), 3, "seed {seed}: r_a and both wildcards");
            // A burst, so that some of it is still undelivered when the move's
            // announcement is.
            let before: Vec<String> = (0..BURST).map(|i| format!("a{i}")).collect();
            for v in &before {
                w.write(&ks("k", v.clone())).unwrap();
            }
            publisher
                .set_qos(PublisherQos {
                    partition: part(&["B"]),
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(publisher.qos().partition, part(&["B"]), "seed {seed}");
            let after: Vec<String> = (0..3).map(|i| format!("b{i}")).collect();
            for v in &after {
                w.write(&ks("k", v.clone())).unwrap();
            }
            let all_1 = take_n(&d, &any_1, BURST + 3);
            let all_2 = take_n(&d, &any_2, BURST + 3);
            assert_eq!(
                values(&all_1),
                [before.clone(), after.clone()].concat(),
                "seed {seed}"
            );
            assert_eq!(order(&all_1), order(&all_2), "seed {seed}: one order");
            assert_eq!(values(&take_n(&d, &r_a, BURST)), before, "seed {seed}");
            assert_eq!(values(&take_n(&d, &r_b, 3)), after, "seed {seed}");
            d.run_for(50_000);
            assert!(
                drain(&r_a).is_empty() && drain(&r_b).is_empty(),
                "seed {seed}: a sample reached a reader outside the names it was written under"
            );
            let current = |r: &DataReader<KeyedString>| r.subscription_matched_status().current_count;
            assert_eq!(
                [&r_a, &r_b, &any_1, &any_2].map(current),
                [0, 1, 1, 1],
                "seed {seed}: readers' matched writers after the move"
            );
            assert_eq!(matched(&w), 3, "seed {seed}: r_b and both wildcards");

            // The reader follows its subscriber to B: it matches the writer again and
            // takes what it writes from then on.
            sub_a
                .set_qos(SubscriberQos {
                    partition: part(&["B"]),
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(current(&r_a), 1, "seed {seed}");
            w.write(&ks("k", "b3")).unwrap();
            assert_eq!(values(&take_n(&d, &r_a, 1)), ["b3"], "seed {seed}");
            assert_eq!(values(&take_n(&d, &r_b, 1)), ["b3"], "seed {seed}");
            d.run_until(common::sim::ROUNDS_MAX, || matched(&w) == 4);
            assert_eq!(matched(&w), 4, "seed {seed}: r_a, r_b and both wildcards");

            // Only PARTITION, GROUP_DATA and ENTITY_FACTORY change after creation.
            let e = publisher
                .set_qos(PublisherQos {
                    presentation: Presentation {
                        coherent_access: true,
                        ..Default::default()
                    },
                    ..Default::default()
                })
                .unwrap_err();
            assert!(matches!(e, Error::ImmutablePolicy(_)), "seed {seed}: {e}");
            let e = sub_a
                .set_qos(SubscriberQos {
                    partition: part(&["", "x"]),
                    ..Default::default()
                })
                .unwrap_err();
            assert!(matches!(e, Error::InconsistentPolicy(_)), "seed {seed}: {e}");
            assert_eq!(sub_a.qos().partition, part(&["B"]), "seed {seed}: unchanged");
        },
    );
}

/// A reader's `set_qos` to a DEADLINE shorter than its writer offers unmatches the
/// writer (REQUESTED_INCOMPATIBLE_QOS names DEADLINE, the writer's OFFERED one counts
/// the reader) and its samples stop; the writer's `set_qos` to a shorter one matches
/// them again. The new periods are enforced at both ends. Policies DDS fixes at
/// creation are refused.
#[test]
fn a_changed_deadline_is_announced_matched_and_enforced() {
    for_seeds(
        "a_changed_deadline_is_announced_matched_and_enforced",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let period = |ms| Deadline {
                period: QosDuration::from_millis(ms),
            };
            let r = reader(&ps[1], "D", keep_all(&atomic()));
            let w = writer(
                &ps[0],
                "D",
                DataWriterQos {
                    deadline: period(100),
                    ..Default::default()
                },
            );
            w.write(&ks("k", "v0")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), ["v0"], "seed {seed}");
            let mut rq = r.qos();
            rq.deadline = period(50);
            r.set_qos(rq.clone()).unwrap();
            assert_eq!(r.qos().deadline, period(50), "seed {seed}");
            let s = r.requested_incompatible_qos_status();
            assert_eq!(
                (s.total_count, s.last_policy_id),
                (1, Some(QosPolicyId::Deadline)),
                "seed {seed}"
            );
            assert_eq!(
                r.subscription_matched_status().current_count,
                0,
                "seed {seed}"
            );
            d.run_until(common::sim::ROUNDS_MAX, || {
                w.offered_incompatible_qos_status().total_count == 1
            });
            assert_eq!(
                w.offered_incompatible_qos_status().last_policy_id,
                Some(QosPolicyId::Deadline),
                "seed {seed}"
            );
            w.write(&ks("k", "unheard")).unwrap();
            d.run_for(20_000);
            assert!(
                drain(&r).is_empty(),
                "seed {seed}: an unmatched writer's sample"
            );

            let mut wq = w.qos();
            wq.deadline = period(20);
            w.set_qos(wq).unwrap();
            d.run_until(common::sim::ROUNDS_MAX, || {
                r.subscription_matched_status().current_count == 1
            });
            assert_eq!(
                w.publication_matched_status().current_count,
                1,
                "seed {seed}"
            );
            w.write(&ks("k", "v1")).unwrap();
            assert_eq!(values(&take_n(&d, &r, 1)), ["v1"], "seed {seed}");
            let (missed_r, missed_w) = (
                r.requested_deadline_missed_status().total_count,
                w.offered_deadline_missed_status().total_count,
            );
            // Silence for 300 ms: at least 5 of the reader's 50 ms periods pass, and 14 of
            // the writer's 20 ms ones.
            d.run_for(300_000);
            let r_missed = r.requested_deadline_missed_status().total_count - missed_r;
            let w_missed = w.offered_deadline_missed_status().total_count - missed_w;
            assert!(r_missed >= 5, "seed {seed}: reader missed {r_missed}");
            assert!(w_missed >= 14, "seed {seed}: writer missed {w_missed}");

            // From a listener (the delivery thread), a change that must be announced is
            // refused: it would wait for a delivery that thread makes.
            let from_listener = std::sync::Arc::new(std::sync::Mutex::new(None));
            let seen = std::sync::Arc::clone(&from_listener);
            let mut changed = r.qos();
            changed.deadline = period(60);
            r.set_listener(OnData(move |r: &DataReader<KeyedString>| {
                *seen.lock().unwrap() = Some(r.set_qos(changed.clone()));
            }));
            w.write(&ks("k", "v2")).unwrap();
            d.run_until(common::sim::ROUNDS_MAX, || {
                from_listener.lock().unwrap().is_some()
            });
            let got = from_listener.lock().unwrap().take();
            assert!(
                matches!(got, Some(Err(Error::IllegalOperation(_)))),
                "seed {seed}: {got:?}"
            );
            assert_eq!(r.qos().deadline, period(50), "seed {seed}: unchanged");

            // What DDS fixes at creation stays fixed.
            let e = r
                .set_qos(rq.clone().with_history(History::keep_last(3)))
                .unwrap_err();
            assert!(matches!(e, Error::ImmutablePolicy(_)), "seed {seed}: {e}");
            let mut bad = rq;
            bad.deadline = period(10);
            bad.time_based_filter.minimum_separation = QosDuration::from_millis(20);
            let e = r.set_qos(bad).unwrap_err();
            assert!(
                matches!(e, Error::InconsistentPolicy(_)),
                "seed {seed}: {e}"
            );
            assert_eq!(r.qos().deadline, period(50), "seed {seed}: unchanged");
        },
    );
}

/// The defaults a participant, publisher and subscriber give are the specification's
/// until set (and the participant's clock is the domain's); set ones are what the next entities are created with, shared by a
/// publisher's clones; an inconsistent default is refused and changes nothing.
#[test]
fn set_defaults_are_what_new_entities_get() {
    use spindle_qos::{DataReaderQos, DurabilityKind, ResourceLimits, TopicQos};
    for_seeds("set_defaults_are_what_new_entities_get", |seed| {
        let (d, ps) = domain(seed, 1);
        let p = &ps[0];
        // Its clock (DDS `get_current_time`) is the domain's virtual one.
        let now_ns = spindle_dds_core::sim::SIM_EPOCH_NS + 1_000 * d.now_us() as i64;
        assert_eq!(p.current_time_ns(), now_ns, "seed {seed}");
        assert_eq!(p.default_topic_qos(), TopicQos::default(), "seed {seed}");
        let stored = atomic().with_durability(DurabilityKind::TransientLocal);
        p.set_default_topic_qos(stored.clone()).unwrap();
        let t = p
            .create_topic::<KeyedString>("Defaults", p.default_topic_qos())
            .unwrap();
        assert_eq!(t.qos(), &stored, "seed {seed}");
        let mut inconsistent = stored.clone().with_history(History::keep_last(5));
        inconsistent.resource_limits = ResourceLimits {
            max_samples_per_instance: 2,
            ..Default::default()
        };
        let e = p.set_default_topic_qos(inconsistent).unwrap_err();
        assert!(
            matches!(e, Error::InconsistentPolicy(_)),
            "seed {seed}: {e}"
        );
        assert_eq!(p.default_topic_qos(), stored, "seed {seed}: unchanged");

        p.set_default_publisher_qos(PublisherQos {
            partition: part(&["A"]),
            ..Default::default()
        })
        .unwrap();
        let publisher = p.create_publisher(p.default_publisher_qos()).unwrap();
        assert_eq!(publisher.qos().partition, part(&["A"]), "seed {seed}");
        let e = p
            .set_default_subscriber_qos(SubscriberQos {
                partition: part(&[""]),
                ..Default::default()
            })
            .unwrap_err();
        assert!(
            matches!(e, Error::InconsistentPolicy(_)),
            "seed {seed}: {e}"
        );

        let prompt =
            DataWriterQos::from_topic_qos(&stored).with_deadline(QosDuration::from_millis(40));
        assert_eq!(
            publisher.default_datawriter_qos(),
            DataWriterQos::default(),
            "seed {seed}"
        );
        publisher
            .clone()
            .set_default_datawriter_qos(prompt.clone())
            .unwrap();
        let w = publisher
            .create_datawriter(&t, publisher.default_datawriter_qos())
            .unwrap();
        assert_eq!(w.qos(), prompt, "seed {seed}: set through a clone");

        let sub = p.create_subscriber(p.default_subscriber_qos()).unwrap();
        let keep_all = DataReaderQos::from_topic_qos(&stored).with_history(History::keep_all());
        sub.set_default_datareader_qos(keep_all.clone()).unwrap();
        let r = sub
            .create_datareader(&t, sub.default_datareader_qos())
            .unwrap();
        assert_eq!(r.qos(), keep_all, "seed {seed}");
    });
}

/// A listener that runs `f` on DATA_AVAILABLE.
struct OnData<F>(F);

impl<F: Fn(&DataReader<KeyedString>) + Send + Sync + 'static>
    spindle_dds_core::DataReaderListener<KeyedString> for OnData<F>
{
    fn on_data_available(&self, reader: &DataReader<KeyedString>) {
        (self.0)(reader);
    }
}
