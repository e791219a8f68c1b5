//! Property tests: no panics on arbitrary values, `check` agrees with `check_all`, and a
//! writer built from a reader's own kinds and durations always matches it.

use proptest::prelude::*;
use proptest::sample::select;
use spindle_qos::*;

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::INFINITE),
        Just(Duration::ZERO),
        (any::<i64>(), any::<u32>()).prop_map(|(sec, nanosec)| Duration { sec, nanosec }),
        (-3i64..4, 0u32..1_000_000_000).prop_map(|(sec, nanosec)| Duration { sec, nanosec }),
        any::<i64>().prop_map(Duration::from_nanos),
    ]
}

fn limit() -> impl Strategy<Value = i32> {
    prop_oneof![Just(LENGTH_UNLIMITED), -3i32..12, any::<i32>()]
}

fn history() -> impl Strategy<Value = History> {
    (
        select(vec![HistoryKind::KeepLast, HistoryKind::KeepAll]),
        limit(),
    )
        .prop_map(|(kind, depth)| History { kind, depth })
}

fn limits() -> impl Strategy<Value = ResourceLimits> {
    (limit(), limit(), limit()).prop_map(|(a, b, c)| ResourceLimits {
        max_samples: a,
        max_instances: b,
        max_samples_per_instance: c,
    })
}

fn durability_kind() -> impl Strategy<Value = DurabilityKind> {
    select(vec![
        DurabilityKind::Volatile,
        DurabilityKind::TransientLocal,
        DurabilityKind::Transient,
        DurabilityKind::Persistent,
    ])
}

fn liveliness_kind() -> impl Strategy<Value = LivelinessKind> {
    select(vec![
        LivelinessKind::Automatic,
        LivelinessKind::ManualByParticipant,
        LivelinessKind::ManualByTopic,
    ])
}

fn reliability_kind() -> impl Strategy<Value = ReliabilityKind> {
    select(vec![ReliabilityKind::BestEffort, ReliabilityKind::Reliable])
}

fn order_kind() -> impl Strategy<Value = DestinationOrderKind> {
    select(vec![
        DestinationOrderKind::ByReceptionTimestamp,
        DestinationOrderKind::BySourceTimestamp,
    ])
}

fn ownership_kind() -> impl Strategy<Value = OwnershipKind> {
    select(vec![OwnershipKind::Shared, OwnershipKind::Exclusive])
}

fn durability_service() -> impl Strategy<Value = DurabilityService> {
    (duration(), history(), limits()).prop_map(|(d, h, l)| DurabilityService {
        service_cleanup_delay: d,
        history_kind: h.kind,
        history_depth: h.depth,
        max_samples: l.max_samples,
        max_instances: l.max_instances,
        max_samples_per_instance: l.max_samples_per_instance,
    })
}

fn presentation() -> impl Strategy<Value = Presentation> {
    (
        select(vec![
            PresentationAccessScope::Instance,
            PresentationAccessScope::Topic,
            PresentationAccessScope::Group,
        ]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(access_scope, coherent_access, ordered_access)| Presentation {
                access_scope,
                coherent_access,
                ordered_access,
            },
        )
}

fn partition() -> impl Strategy<Value = Partition> {
    prop::collection::vec("[ab*?!\\[\\]\\\\-]{0,6}", 0..4).prop_map(|name| Partition { name })
}

fn writer() -> impl Strategy<Value = DataWriterQos> {
    (
        (
            durability_kind(),
            durability_service(),
            duration(),
            duration(),
            liveliness_kind(),
            duration(),
        ),
        (
            reliability_kind(),
            duration(),
            order_kind(),
            history(),
            limits(),
            any::<i32>(),
        ),
        (duration(), ownership_kind(), any::<i32>(), any::<bool>()),
    )
        .prop_map(
            |((dk, ds, dl, lb, lk, ll), (rk, rb, ok, h, l, tp), (ls, ow, os, ad))| DataWriterQos {
                durability: Durability { kind: dk },
                durability_service: ds,
                deadline: Deadline { period: dl },
                latency_budget: LatencyBudget { duration: lb },
                liveliness: Liveliness {
                    kind: lk,
                    lease_duration: ll,
                },
                reliability: Reliability {
                    kind: rk,
                    max_blocking_time: rb,
                },
                destination_order: DestinationOrder { kind: ok },
                history: h,
                resource_limits: l,
                transport_priority: TransportPriority { value: tp },
                lifespan: Lifespan { duration: ls },
                user_data: UserData::default(),
                ownership: Ownership { kind: ow },
                ownership_strength: OwnershipStrength { value: os },
                writer_data_lifecycle: WriterDataLifecycle {
                    autodispose_unregistered_instances: ad,
                },
            },
        )
}

fn reader() -> impl Strategy<Value = DataReaderQos> {
    (
        (
            durability_kind(),
            duration(),
            duration(),
            liveliness_kind(),
            duration(),
            reliability_kind(),
        ),
        (
            duration(),
            order_kind(),
            history(),
            limits(),
            ownership_kind(),
            duration(),
        ),
        (duration(), duration()),
    )
        .prop_map(
            |((dk, dl, lb, lk, ll, rk), (rb, ok, h, l, ow, tbf), (nw, dd))| DataReaderQos {
                durability: Durability { kind: dk },
                deadline: Deadline { period: dl },
                latency_budget: LatencyBudget { duration: lb },
                liveliness: Liveliness {
                    kind: lk,
                    lease_duration: ll,
                },
                reliability: Reliability {
                    kind: rk,
                    max_blocking_time: rb,
                },
                destination_order: DestinationOrder { kind: ok },
                history: h,
                resource_limits: l,
                user_data: UserData::default(),
                ownership: Ownership { kind: ow },
                time_based_filter: TimeBasedFilter {
                    minimum_separation: tbf,
                },
                reader_data_lifecycle: ReaderDataLifecycle {
                    autopurge_nowriter_samples_delay: nw,
                    autopurge_disposed_samples_delay: dd,
                },
            },
        )
}

fn topic() -> impl Strategy<Value = TopicQos> {
    (writer(), any::<u8>()).prop_map(|(w, b)| TopicQos {
        topic_data: TopicData { value: vec![b] },
        durability: w.durability,
        durability_service: w.durability_service,
        deadline: w.deadline,
        latency_budget: w.latency_budget,
        liveliness: w.liveliness,
        reliability: w.reliability,
        destination_order: w.destination_order,
        history: w.history,
        resource_limits: w.resource_limits,
        transport_priority: w.transport_priority,
        lifespan: w.lifespan,
        ownership: w.ownership,
    })
}

fn publisher() -> impl Strategy<Value = PublisherQos> {
    (presentation(), partition()).prop_map(|(presentation, partition)| PublisherQos {
        presentation,
        partition,
        ..PublisherQos::default()
    })
}

fn subscriber() -> impl Strategy<Value = SubscriberQos> {
    (presentation(), partition()).prop_map(|(presentation, partition)| SubscriberQos {
        presentation,
        partition,
        ..SubscriberQos::default()
    })
}

/// `check` is the first of `check_all`, and `check_all` is sorted by policy id.
fn agrees(check: Result<()>, all: Vec<QosError>) -> std::result::Result<(), TestCaseError> {
    prop_assert_eq!(check.is_ok(), all.is_empty());
    if let Err(e) = check {
        prop_assert_eq!(&e, &all[0]);
    }
    let ids: Vec<QosPolicyId> = all.iter().map(QosError::policy).collect();
    prop_assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{:?}", ids);
    for e in &all {
        let inconsistent = matches!(e, QosError::Inconsistent { .. });
        prop_assert!(inconsistent);
        prop_assert!(!e.to_string().is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn writer_check_agrees(w in writer()) {
        agrees(w.check(), w.check_all())?;
        let _ = w.delivery_level();
        prop_assert_eq!(w.changeable_to(&w), Ok(()));
    }

    #[test]
    fn reader_check_agrees(r in reader()) {
        agrees(r.check(), r.check_all())?;
        prop_assert_eq!(r.changeable_to(&r), Ok(()));
    }

    #[test]
    fn topic_check_agrees(t in topic()) {
        agrees(t.check(), t.check_all())?;
        let _ = DataWriterQos::from_topic_qos(&t).check_all();
        let _ = DataReaderQos::from_topic_qos(&t).check_all();
        prop_assert_eq!(t.changeable_to(&t), Ok(()));
    }

    #[test]
    fn group_check_agrees(p in publisher(), s in subscriber()) {
        agrees(p.check(), p.check_all())?;
        agrees(s.check(), s.check_all())?;
        let _ = partitions_match(&p.partition, &s.partition);
        // A non-empty partition list always matches itself.
        prop_assert!(partitions_match(&p.partition, &p.partition));
    }

    #[test]
    fn rxo_never_panics_and_is_sorted(w in writer(), p in publisher(), r in reader(), s in subscriber()) {
        let ids = incompatible_policies(&w, &p, &r, &s);
        prop_assert!(ids.windows(2).all(|x| x[0] < x[1]), "{:?}", ids);
    }

    #[test]
    fn writer_from_reader_kinds_is_compatible(r in reader(), pres in presentation()) {
        // Default-derived writer with the reader's kinds and durations.
        let mut w = DataWriterQos::default()
            .with_reliability(r.reliability)
            .with_durability(r.durability.kind)
            .with_deadline(r.deadline.period);
        w.latency_budget = r.latency_budget;
        w.liveliness = r.liveliness;
        w.ownership = r.ownership;
        w.destination_order = r.destination_order;
        let p = PublisherQos { presentation: pres, ..PublisherQos::default() };
        let s = SubscriberQos { presentation: pres, ..SubscriberQos::default() };
        prop_assert_eq!(incompatible_policies(&w, &p, &r, &s), Vec::<QosPolicyId>::new());
    }

    #[test]
    fn stronger_writer_is_compatible_with_default_reader(w in writer()) {
        // A default reader requests the minimum of everything except OWNERSHIP, and the
        // infinite deadline/lease; so only those can be incompatible.
        let ids = incompatible_policies(&w, &PublisherQos::default(), &DataReaderQos::default(), &SubscriberQos::default());
        for id in ids {
            prop_assert!(
                matches!(id, QosPolicyId::Ownership | QosPolicyId::Deadline | QosPolicyId::LatencyBudget | QosPolicyId::Liveliness),
                "{}", id
            );
        }
    }

    #[test]
    fn level_code_roundtrip(code in any::<u8>()) {
        match DeliveryLevel::from_u8(code) {
            Some(l) => prop_assert_eq!(l.to_u8(), code),
            None => prop_assert!(code >= 4),
        }
    }

    #[test]
    fn level_parse_never_panics(s in ".{0,20}") {
        if let Ok(l) = s.parse::<DeliveryLevel>() {
            prop_assert!(l.name().eq_ignore_ascii_case(&s));
        }
    }

    #[test]
    fn duration_conversions_never_panic(d in duration(), n in any::<i64>()) {
        let _ = d.to_std();
        let _ = d.as_nanos();
        let _ = d.to_string();
        prop_assert_eq!(Duration::from_nanos(n).as_nanos(), Some(i128::from(n)));
        prop_assert_eq!(Duration::from_micros(n).as_nanos(), Some(i128::from(n) * 1_000));
        prop_assert_eq!(Duration::from_millis(n).as_nanos(), Some(i128::from(n) * 1_000_000));
        if let (Some(s), true) = (d.to_std(), d.nanosec < 1_000_000_000) {
            prop_assert_eq!(Duration::from_std(s).as_nanos(), d.as_nanos());
        }
    }
}
