//! Every policy and entity QoS default matches DDS 1.4 §2.2.3.

use spindle_qos::*;

#[test]
fn policy_defaults_match_the_spec() {
    let ms100 = Duration {
        sec: 0,
        nanosec: 100_000_000,
    };
    // (policy, actual, expected) as Debug strings so one table covers every type.
    let table: Vec<(&str, String, String)> = vec![
        (
            "USER_DATA",
            format!("{:?}", UserData::default()),
            format!("{:?}", UserData { value: vec![] }),
        ),
        (
            "TOPIC_DATA",
            format!("{:?}", TopicData::default()),
            format!("{:?}", TopicData { value: vec![] }),
        ),
        (
            "GROUP_DATA",
            format!("{:?}", GroupData::default()),
            format!("{:?}", GroupData { value: vec![] }),
        ),
        (
            "DURABILITY",
            format!("{:?}", Durability::default()),
            format!(
                "{:?}",
                Durability {
                    kind: DurabilityKind::Volatile
                }
            ),
        ),
        (
            "DURABILITY_SERVICE",
            format!("{:?}", DurabilityService::default()),
            format!(
                "{:?}",
                DurabilityService {
                    service_cleanup_delay: Duration { sec: 0, nanosec: 0 },
                    history_kind: HistoryKind::KeepLast,
                    history_depth: 1,
                    max_samples: -1,
                    max_instances: -1,
                    max_samples_per_instance: -1,
                }
            ),
        ),
        (
            "PRESENTATION",
            format!("{:?}", Presentation::default()),
            format!(
                "{:?}",
                Presentation {
                    access_scope: PresentationAccessScope::Instance,
                    coherent_access: false,
                    ordered_access: false,
                }
            ),
        ),
        (
            "DEADLINE",
            format!("{:?}", Deadline::default()),
            format!(
                "{:?}",
                Deadline {
                    period: Duration {
                        sec: i64::MAX,
                        nanosec: 999_999_999
                    }
                }
            ),
        ),
        (
            "LATENCY_BUDGET",
            format!("{:?}", LatencyBudget::default()),
            format!(
                "{:?}",
                LatencyBudget {
                    duration: Duration { sec: 0, nanosec: 0 }
                }
            ),
        ),
        (
            "OWNERSHIP",
            format!("{:?}", Ownership::default()),
            format!(
                "{:?}",
                Ownership {
                    kind: OwnershipKind::Shared
                }
            ),
        ),
        (
            "OWNERSHIP_STRENGTH",
            format!("{:?}", OwnershipStrength::default()),
            format!("{:?}", OwnershipStrength { value: 0 }),
        ),
        (
            "LIVELINESS",
            format!("{:?}", Liveliness::default()),
            format!(
                "{:?}",
                Liveliness {
                    kind: LivelinessKind::Automatic,
                    lease_duration: Duration::INFINITE
                }
            ),
        ),
        (
            "TIME_BASED_FILTER",
            format!("{:?}", TimeBasedFilter::default()),
            format!(
                "{:?}",
                TimeBasedFilter {
                    minimum_separation: Duration::ZERO
                }
            ),
        ),
        (
            "PARTITION",
            format!("{:?}", Partition::default()),
            format!("{:?}", Partition { name: vec![] }),
        ),
        (
            "RELIABILITY",
            format!("{:?}", Reliability::default()),
            format!(
                "{:?}",
                Reliability {
                    kind: ReliabilityKind::BestEffort,
                    max_blocking_time: ms100
                }
            ),
        ),
        (
            "TRANSPORT_PRIORITY",
            format!("{:?}", TransportPriority::default()),
            format!("{:?}", TransportPriority { value: 0 }),
        ),
        (
            "LIFESPAN",
            format!("{:?}", Lifespan::default()),
            format!(
                "{:?}",
                Lifespan {
                    duration: Duration::INFINITE
                }
            ),
        ),
        (
            "DESTINATION_ORDER",
            format!("{:?}", DestinationOrder::default()),
            format!(
                "{:?}",
                DestinationOrder {
                    kind: DestinationOrderKind::ByReceptionTimestamp
                }
            ),
        ),
        (
            "HISTORY",
            format!("{:?}", History::default()),
            format!(
                "{:?}",
                History {
                    kind: HistoryKind::KeepLast,
                    depth: 1
                }
            ),
        ),
        (
            "RESOURCE_LIMITS",
            format!("{:?}", ResourceLimits::default()),
            format!(
                "{:?}",
                ResourceLimits {
                    max_samples: -1,
                    max_instances: -1,
                    max_samples_per_instance: -1
                }
            ),
        ),
        (
            "ENTITY_FACTORY",
            format!("{:?}", EntityFactory::default()),
            format!(
                "{:?}",
                EntityFactory {
                    autoenable_created_entities: true
                }
            ),
        ),
        (
            "WRITER_DATA_LIFECYCLE",
            format!("{:?}", WriterDataLifecycle::default()),
            format!(
                "{:?}",
                WriterDataLifecycle {
                    autodispose_unregistered_instances: true
                }
            ),
        ),
        (
            "READER_DATA_LIFECYCLE",
            format!("{:?}", ReaderDataLifecycle::default()),
            format!(
                "{:?}",
                ReaderDataLifecycle {
                    autopurge_nowriter_samples_delay: Duration::INFINITE,
                    autopurge_disposed_samples_delay: Duration::INFINITE,
                }
            ),
        ),
    ];
    assert_eq!(table.len(), 22, "one row per policy");
    for (policy, actual, expected) in &table {
        assert_eq!(actual, expected, "default of {policy}");
        assert!(
            QosPolicyId::ALL.iter().any(|id| id.name() == *policy),
            "{policy} is a QosPolicyId name"
        );
    }
}

#[test]
fn reliability_constructors() {
    assert_eq!(Reliability::reliable().kind, ReliabilityKind::Reliable);
    assert_eq!(
        Reliability::reliable().max_blocking_time,
        Duration::from_millis(100)
    );
    assert_eq!(Reliability::best_effort(), Reliability::default());
    assert_eq!(
        History::keep_last(7),
        History {
            kind: HistoryKind::KeepLast,
            depth: 7
        }
    );
    assert_eq!(History::keep_all().kind, HistoryKind::KeepAll);
    assert_eq!(LENGTH_UNLIMITED, -1);
}

#[test]
fn entity_defaults() {
    let w = DataWriterQos::default();
    assert_eq!(w.reliability, Reliability::reliable());
    assert_eq!(w.durability, Durability::default());
    assert_eq!(w.history, History::default());
    assert_eq!(w.resource_limits, ResourceLimits::default());
    assert_eq!(w.deadline.period, Duration::INFINITE);
    assert_eq!(w.lifespan.duration, Duration::INFINITE);
    assert_eq!(w.ownership_strength.value, 0);
    assert!(w.writer_data_lifecycle.autodispose_unregistered_instances);

    let r = DataReaderQos::default();
    assert_eq!(r.reliability, Reliability::best_effort());
    assert_eq!(r.time_based_filter.minimum_separation, Duration::ZERO);
    assert_eq!(r.reader_data_lifecycle, ReaderDataLifecycle::default());

    let t = TopicQos::default();
    assert_eq!(t.reliability, Reliability::best_effort());
    assert_eq!(t.durability_service, DurabilityService::default());

    assert_eq!(
        PublisherQos::default().presentation,
        Presentation::default()
    );
    assert!(SubscriberQos::default().partition.name.is_empty());
    assert!(
        DomainParticipantQos::default()
            .entity_factory
            .autoenable_created_entities
    );

    for e in [
        TopicQos::default().check(),
        DataWriterQos::default().check(),
        DataReaderQos::default().check(),
        PublisherQos::default().check(),
        SubscriberQos::default().check(),
        DomainParticipantQos::default().check(),
    ] {
        assert_eq!(e, Ok(()));
    }
}

#[test]
fn from_topic_qos_copies_shared_policies() {
    let topic = TopicQos {
        topic_data: TopicData {
            value: vec![1, 2, 3],
        },
        transport_priority: TransportPriority { value: 9 },
        lifespan: Lifespan {
            duration: Duration::from_secs(5),
        },
        ownership: Ownership {
            kind: OwnershipKind::Exclusive,
        },
        liveliness: Liveliness {
            kind: LivelinessKind::ManualByTopic,
            lease_duration: Duration::from_secs(2),
        },
        destination_order: DestinationOrder {
            kind: DestinationOrderKind::BySourceTimestamp,
        },
        latency_budget: LatencyBudget {
            duration: Duration::from_millis(3),
        },
        durability_service: DurabilityService {
            history_depth: 4,
            ..Default::default()
        },
        ..TopicQos::default()
    }
    .with_durability(DurabilityKind::Transient)
    .with_history(History::keep_all())
    .with_resource_limits(ResourceLimits {
        max_samples: 10,
        max_instances: 2,
        max_samples_per_instance: 5,
    })
    .with_deadline(Duration::from_secs(1));

    let w = DataWriterQos::from_topic_qos(&topic);
    assert_eq!(w.durability, topic.durability);
    assert_eq!(w.durability_service, topic.durability_service);
    assert_eq!(w.deadline, topic.deadline);
    assert_eq!(w.latency_budget, topic.latency_budget);
    assert_eq!(w.liveliness, topic.liveliness);
    // The topic's BEST_EFFORT is copied over the writer's RELIABLE default.
    assert_eq!(w.reliability, Reliability::best_effort());
    assert_eq!(w.destination_order, topic.destination_order);
    assert_eq!(w.history, topic.history);
    assert_eq!(w.resource_limits, topic.resource_limits);
    assert_eq!(w.transport_priority, topic.transport_priority);
    assert_eq!(w.lifespan, topic.lifespan);
    assert_eq!(w.ownership, topic.ownership);
    assert_eq!(w.user_data, UserData::default());
    assert_eq!(w.ownership_strength, OwnershipStrength::default());
    assert_eq!(w.writer_data_lifecycle, WriterDataLifecycle::default());

    let topic = topic.with_reliability(Reliability::reliable());
    let r = DataReaderQos::from_topic_qos(&topic);
    assert_eq!(r.durability, topic.durability);
    assert_eq!(r.deadline, topic.deadline);
    assert_eq!(r.latency_budget, topic.latency_budget);
    assert_eq!(r.liveliness, topic.liveliness);
    assert_eq!(r.reliability, Reliability::reliable());
    assert_eq!(r.destination_order, topic.destination_order);
    assert_eq!(r.history, topic.history);
    assert_eq!(r.resource_limits, topic.resource_limits);
    assert_eq!(r.ownership, topic.ownership);
    assert_eq!(r.time_based_filter, TimeBasedFilter::default());
    assert_eq!(r.reader_data_lifecycle, ReaderDataLifecycle::default());
    assert_eq!(r.user_data, UserData::default());
}

#[test]
fn policy_ids_and_names() {
    let expected = [
        (1, "USER_DATA"),
        (2, "DURABILITY"),
        (3, "PRESENTATION"),
        (4, "DEADLINE"),
        (5, "LATENCY_BUDGET"),
        (6, "OWNERSHIP"),
        (7, "OWNERSHIP_STRENGTH"),
        (8, "LIVELINESS"),
        (9, "TIME_BASED_FILTER"),
        (10, "PARTITION"),
        (11, "RELIABILITY"),
        (12, "DESTINATION_ORDER"),
        (13, "HISTORY"),
        (14, "RESOURCE_LIMITS"),
        (15, "ENTITY_FACTORY"),
        (16, "WRITER_DATA_LIFECYCLE"),
        (17, "READER_DATA_LIFECYCLE"),
        (18, "TOPIC_DATA"),
        (19, "GROUP_DATA"),
        (20, "TRANSPORT_PRIORITY"),
        (21, "LIFESPAN"),
        (22, "DURABILITY_SERVICE"),
    ];
    for (id, (num, name)) in QosPolicyId::ALL.iter().zip(expected) {
        assert_eq!(*id as i32, num);
        assert_eq!(id.to_i32(), num);
        assert_eq!(id.name(), name);
        assert_eq!(id.to_string(), name);
        assert_eq!(QosPolicyId::from_i32(num), Some(*id));
    }
    assert_eq!(QosPolicyId::from_i32(0), None);
    assert_eq!(QosPolicyId::from_i32(23), None);
    assert_eq!(QosPolicyId::from_i32(-1), None);
}

#[test]
fn kind_orders() {
    use DurabilityKind::*;
    assert!(Volatile < TransientLocal && TransientLocal < Transient && Transient < Persistent);
    assert!(PresentationAccessScope::Instance < PresentationAccessScope::Topic);
    assert!(PresentationAccessScope::Topic < PresentationAccessScope::Group);
    assert!(LivelinessKind::Automatic < LivelinessKind::ManualByParticipant);
    assert!(LivelinessKind::ManualByParticipant < LivelinessKind::ManualByTopic);
    assert!(ReliabilityKind::BestEffort < ReliabilityKind::Reliable);
    assert!(DestinationOrderKind::ByReceptionTimestamp < DestinationOrderKind::BySourceTimestamp);
}
