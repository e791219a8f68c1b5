//! One consistent and one inconsistent case per consistency rule.

use spindle_qos::*;

/// Asserts `r` is `Inconsistent` on `policy` with a detail containing every `needle`.
#[track_caller]
fn assert_inconsistent(r: Result<()>, policy: QosPolicyId, needles: &[&str]) {
    match r {
        Err(QosError::Inconsistent { policy: p, detail }) => {
            assert_eq!(p, policy, "detail: {detail}");
            for n in needles {
                assert!(detail.contains(n), "{detail:?} should mention {n:?}");
            }
        }
        other => panic!("expected Inconsistent {policy}, got {other:?}"),
    }
}

fn limits(max_samples: i32, max_instances: i32, per_instance: i32) -> ResourceLimits {
    ResourceLimits {
        max_samples,
        max_instances,
        max_samples_per_instance: per_instance,
    }
}

#[test]
fn keep_last_depth_at_least_one() {
    let ok = DataWriterQos::default().with_history(History::keep_last(1));
    assert_eq!(ok.check(), Ok(()));
    for depth in [0, -1, i32::MIN] {
        let bad = DataWriterQos::default().with_history(History::keep_last(depth));
        assert_inconsistent(
            bad.check(),
            QosPolicyId::History,
            &["history depth", &depth.to_string()],
        );
    }
    // KEEP_ALL ignores the depth.
    let keep_all = DataReaderQos::default().with_history(History {
        kind: HistoryKind::KeepAll,
        depth: 0,
    });
    assert_eq!(keep_all.check(), Ok(()));
}

#[test]
fn depth_within_max_samples_per_instance() {
    let ok = DataReaderQos::default()
        .with_history(History::keep_last(5))
        .with_resource_limits(limits(-1, -1, 5));
    assert_eq!(ok.check(), Ok(()));
    let bad = DataReaderQos::default()
        .with_history(History::keep_last(10))
        .with_resource_limits(limits(100, 10, 5));
    assert_inconsistent(
        bad.check(),
        QosPolicyId::History,
        &[
            "history depth 10",
            "resource_limits.max_samples_per_instance 5",
        ],
    );
    let err = bad.check().unwrap_err();
    assert_eq!(
        err.to_string(),
        "inconsistent HISTORY policy: history depth 10 exceeds resource_limits.max_samples_per_instance 5"
    );
    // Unlimited per-instance: any depth.
    let deep = TopicQos::default().with_history(History::keep_last(i32::MAX));
    assert_eq!(deep.check(), Ok(()));
}

#[test]
fn resource_limit_values() {
    assert_eq!(
        TopicQos::default()
            .with_resource_limits(limits(1, 1, 1))
            .check(),
        Ok(())
    );
    assert_eq!(
        TopicQos::default()
            .with_resource_limits(limits(-1, -1, -1))
            .check(),
        Ok(())
    );
    for (l, field, v) in [
        (limits(0, -1, -1), "resource_limits.max_samples", "0"),
        (limits(-1, -2, -1), "resource_limits.max_instances", "-2"),
        (
            limits(-1, -1, i32::MIN),
            "resource_limits.max_samples_per_instance",
            &i32::MIN.to_string()[..],
        ),
    ] {
        let bad = TopicQos::default()
            .with_history(History::keep_all())
            .with_resource_limits(l);
        assert_inconsistent(bad.check(), QosPolicyId::ResourceLimits, &[field, v]);
    }
}

#[test]
fn max_samples_not_below_per_instance() {
    // Limited total, unlimited per instance: fine.
    assert_eq!(
        DataWriterQos::default()
            .with_resource_limits(limits(3, -1, -1))
            .check(),
        Ok(())
    );
    assert_eq!(
        DataWriterQos::default()
            .with_resource_limits(limits(5, -1, 5))
            .check(),
        Ok(())
    );
    let bad = DataWriterQos::default().with_resource_limits(limits(4, -1, 5));
    assert_inconsistent(
        bad.check(),
        QosPolicyId::ResourceLimits,
        &[
            "resource_limits.max_samples 4",
            "resource_limits.max_samples_per_instance 5",
        ],
    );
}

#[test]
fn durability_service_rules() {
    let ok = DurabilityService {
        service_cleanup_delay: Duration::from_secs(1),
        history_kind: HistoryKind::KeepLast,
        history_depth: 3,
        max_samples: 10,
        max_instances: 2,
        max_samples_per_instance: 5,
    };
    let topic = |ds| TopicQos {
        durability_service: ds,
        ..TopicQos::default()
    };
    let writer = |ds| DataWriterQos {
        durability_service: ds,
        ..DataWriterQos::default()
    };
    assert_eq!(topic(ok).check(), Ok(()));
    assert_eq!(writer(ok).check(), Ok(()));

    let cases: [(DurabilityService, &[&str]); 5] = [
        (
            DurabilityService {
                history_depth: 0,
                ..ok
            },
            &["durability_service.history_depth 0"],
        ),
        (
            DurabilityService {
                history_depth: 6,
                ..ok
            },
            &[
                "durability_service.history_depth 6",
                "durability_service.max_samples_per_instance 5",
            ],
        ),
        (
            DurabilityService {
                max_instances: 0,
                ..ok
            },
            &["durability_service.max_instances 0"],
        ),
        (
            DurabilityService {
                max_samples: 4,
                history_depth: 1,
                ..ok
            },
            &[
                "durability_service.max_samples 4",
                "durability_service.max_samples_per_instance 5",
            ],
        ),
        (
            DurabilityService {
                service_cleanup_delay: Duration::from_millis(-1500),
                ..ok
            },
            &[
                "durability_service.service_cleanup_delay",
                "-1.500000000s",
                "negative",
            ],
        ),
    ];
    for (ds, needles) in cases {
        assert_inconsistent(topic(ds).check(), QosPolicyId::DurabilityService, needles);
        assert_inconsistent(writer(ds).check(), QosPolicyId::DurabilityService, needles);
    }
    // KEEP_ALL service history ignores its depth.
    let keep_all = DurabilityService {
        history_kind: HistoryKind::KeepAll,
        history_depth: 0,
        ..ok
    };
    assert_eq!(topic(keep_all).check(), Ok(()));
}

#[test]
fn negative_durations() {
    let neg = Duration::from_millis(-1);
    let pos = Duration::from_millis(1);

    // Writer/topic duration fields.
    type WriterCase = (fn(&mut DataWriterQos, Duration), QosPolicyId, &'static str);
    let writer_cases: [WriterCase; 5] = [
        (
            |q, d| q.deadline.period = d,
            QosPolicyId::Deadline,
            "deadline.period",
        ),
        (
            |q, d| q.latency_budget.duration = d,
            QosPolicyId::LatencyBudget,
            "latency_budget.duration",
        ),
        (
            |q, d| q.liveliness.lease_duration = d,
            QosPolicyId::Liveliness,
            "liveliness.lease_duration",
        ),
        (
            |q, d| q.reliability.max_blocking_time = d,
            QosPolicyId::Reliability,
            "reliability.max_blocking_time",
        ),
        (
            |q, d| q.lifespan.duration = d,
            QosPolicyId::Lifespan,
            "lifespan.duration",
        ),
    ];
    for (set, policy, field) in writer_cases {
        let mut q = DataWriterQos::default();
        set(&mut q, pos);
        assert_eq!(q.check(), Ok(()), "{field}");
        set(&mut q, neg);
        assert_inconsistent(q.check(), policy, &[field, "-0.001000000s", "negative"]);
        // The same fields on a topic.
        let t = TopicQos {
            deadline: q.deadline,
            latency_budget: q.latency_budget,
            liveliness: q.liveliness,
            reliability: q.reliability,
            lifespan: q.lifespan,
            ..TopicQos::default()
        };
        assert_inconsistent(t.check(), policy, &[field, "negative"]);
    }

    type ReaderCase = (fn(&mut DataReaderQos, Duration), QosPolicyId, &'static str);
    let reader_cases: [ReaderCase; 7] = [
        (
            |q, d| q.deadline.period = d,
            QosPolicyId::Deadline,
            "deadline.period",
        ),
        (
            |q, d| q.latency_budget.duration = d,
            QosPolicyId::LatencyBudget,
            "latency_budget.duration",
        ),
        (
            |q, d| q.liveliness.lease_duration = d,
            QosPolicyId::Liveliness,
            "liveliness.lease_duration",
        ),
        (
            |q, d| q.time_based_filter.minimum_separation = d,
            QosPolicyId::TimeBasedFilter,
            "time_based_filter.minimum_separation",
        ),
        (
            |q, d| q.reliability.max_blocking_time = d,
            QosPolicyId::Reliability,
            "reliability.max_blocking_time",
        ),
        (
            |q, d| q.reader_data_lifecycle.autopurge_nowriter_samples_delay = d,
            QosPolicyId::ReaderDataLifecycle,
            "reader_data_lifecycle.autopurge_nowriter_samples_delay",
        ),
        (
            |q, d| q.reader_data_lifecycle.autopurge_disposed_samples_delay = d,
            QosPolicyId::ReaderDataLifecycle,
            "reader_data_lifecycle.autopurge_disposed_samples_delay",
        ),
    ];
    for (set, policy, field) in reader_cases {
        let mut q = DataReaderQos::default();
        set(&mut q, pos);
        assert_eq!(q.check(), Ok(()), "{field}");
        set(&mut q, neg);
        // A negative deadline also falls below the (zero) filter; the first error is still
        // the negative value itself.
        assert_inconsistent(q.check(), policy, &[field, "-0.001000000s", "negative"]);
    }
}

#[test]
fn unnormalised_nanoseconds() {
    let q = DataWriterQos::default().with_deadline(Duration {
        sec: 1,
        nanosec: 1_000_000_000,
    });
    assert_inconsistent(
        q.check(),
        QosPolicyId::Deadline,
        &["deadline.period", "nanosec 1000000000"],
    );
}

#[test]
fn reader_deadline_not_below_time_based_filter() {
    let mut ok = DataReaderQos::default().with_deadline(Duration::from_secs(1));
    ok.time_based_filter.minimum_separation = Duration::from_secs(1);
    assert_eq!(ok.check(), Ok(()));
    let mut bad = ok.clone();
    bad.time_based_filter.minimum_separation = Duration::from_secs(2);
    assert_inconsistent(
        bad.check(),
        QosPolicyId::TimeBasedFilter,
        &[
            "time_based_filter.minimum_separation 2.000000000s",
            "deadline.period 1.000000000s",
        ],
    );
    // Infinite deadline accepts any separation.
    let mut inf = DataReaderQos::default();
    inf.time_based_filter.minimum_separation = Duration::from_secs(i64::MAX);
    assert_eq!(inf.check(), Ok(()));
}

#[test]
fn partition_names_not_empty() {
    let ok = PublisherQos {
        partition: Partition {
            name: vec!["a".into(), "b*".into()],
        },
        ..PublisherQos::default()
    };
    assert_eq!(ok.check(), Ok(()));
    let bad = SubscriberQos {
        partition: Partition {
            name: vec!["a".into(), String::new()],
        },
        ..SubscriberQos::default()
    };
    assert_inconsistent(
        bad.check(),
        QosPolicyId::Partition,
        &["partition.name[1]", "empty"],
    );
    let bad_pub = PublisherQos {
        partition: bad.partition.clone(),
        ..PublisherQos::default()
    };
    assert_inconsistent(
        bad_pub.check(),
        QosPolicyId::Partition,
        &["partition.name[1]"],
    );
}

#[test]
fn first_violation_is_lowest_id_and_check_all_lists_every_one() {
    let mut q = DataReaderQos::default()
        .with_history(History::keep_last(0))
        .with_resource_limits(limits(0, -1, -1))
        .with_deadline(Duration::from_secs(-1));
    q.reader_data_lifecycle.autopurge_disposed_samples_delay = Duration::from_secs(-3);
    let all = q.check_all();
    let ids: Vec<QosPolicyId> = all
        .iter()
        .map(|e| match e {
            QosError::Inconsistent { policy, .. } => *policy,
            QosError::Immutable { policy } => panic!("unexpected Immutable {policy}"),
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            QosPolicyId::Deadline,
            QosPolicyId::TimeBasedFilter,
            QosPolicyId::History,
            QosPolicyId::ResourceLimits,
            QosPolicyId::ReaderDataLifecycle,
        ]
    );
    assert_eq!(q.check(), Err(all[0].clone()));
    assert_eq!(all[0].policy(), QosPolicyId::Deadline);
}

#[test]
fn changeable_to() {
    let w = DataWriterQos::default();
    // Changeable policies.
    let mut w2 = w.clone().with_deadline(Duration::from_secs(1));
    w2.latency_budget.duration = Duration::from_secs(1);
    w2.user_data.value = vec![1];
    w2.ownership_strength.value = 5;
    w2.transport_priority.value = 3;
    w2.lifespan.duration = Duration::from_secs(3);
    w2.writer_data_lifecycle.autodispose_unregistered_instances = false;
    assert_eq!(w.changeable_to(&w2), Ok(()));
    // Immutable ones.
    let immutable = |q: DataWriterQos, policy| {
        assert_eq!(
            DataWriterQos::default().changeable_to(&q),
            Err(QosError::Immutable { policy })
        );
    };
    immutable(
        w.clone().with_durability(DurabilityKind::Persistent),
        QosPolicyId::Durability,
    );
    immutable(
        w.clone().with_reliability(Reliability::best_effort()),
        QosPolicyId::Reliability,
    );
    immutable(
        w.clone().with_history(History::keep_last(2)),
        QosPolicyId::History,
    );
    immutable(
        w.clone().with_resource_limits(limits(9, 9, 9)),
        QosPolicyId::ResourceLimits,
    );
    let mut o = w.clone();
    o.ownership.kind = OwnershipKind::Exclusive;
    immutable(o, QosPolicyId::Ownership);
    let mut l = w.clone();
    l.liveliness.lease_duration = Duration::from_secs(1);
    immutable(l, QosPolicyId::Liveliness);
    let mut d = w.clone();
    d.destination_order.kind = DestinationOrderKind::BySourceTimestamp;
    immutable(d, QosPolicyId::DestinationOrder);
    let mut s = w.clone();
    s.durability_service.history_depth = 3;
    immutable(s, QosPolicyId::DurabilityService);
    // First (lowest id) immutable difference wins.
    let both = w
        .clone()
        .with_history(History::keep_last(2))
        .with_durability(DurabilityKind::Transient);
    assert_eq!(
        w.changeable_to(&both),
        Err(QosError::Immutable {
            policy: QosPolicyId::Durability
        })
    );
    assert_eq!(
        QosError::Immutable {
            policy: QosPolicyId::Durability
        }
        .to_string(),
        "DURABILITY cannot be changed once the entity is enabled"
    );

    let r = DataReaderQos::default();
    let mut r2 = r.clone().with_deadline(Duration::from_secs(1));
    r2.time_based_filter.minimum_separation = Duration::from_millis(10);
    r2.reader_data_lifecycle.autopurge_disposed_samples_delay = Duration::ZERO;
    r2.user_data.value = vec![7];
    assert_eq!(r.changeable_to(&r2), Ok(()));
    assert_eq!(
        r.changeable_to(&r.clone().with_reliability(Reliability::reliable())),
        Err(QosError::Immutable {
            policy: QosPolicyId::Reliability
        })
    );

    let t = TopicQos::default();
    let mut t2 = t.clone().with_deadline(Duration::from_secs(1));
    t2.topic_data.value = vec![1];
    t2.transport_priority.value = 1;
    t2.lifespan.duration = Duration::ZERO;
    assert_eq!(t.changeable_to(&t2), Ok(()));
    assert_eq!(
        t.changeable_to(&t.clone().with_resource_limits(limits(1, 1, 1))),
        Err(QosError::Immutable {
            policy: QosPolicyId::ResourceLimits
        })
    );

    let p = PublisherQos::default();
    let mut p2 = p.clone();
    p2.partition.name = vec!["x".into()];
    p2.group_data.value = vec![1];
    assert_eq!(p.changeable_to(&p2), Ok(()));
    p2.presentation.coherent_access = true;
    assert_eq!(
        p.changeable_to(&p2),
        Err(QosError::Immutable {
            policy: QosPolicyId::Presentation
        })
    );
    let s = SubscriberQos::default();
    let mut s2 = s.clone();
    s2.presentation.access_scope = PresentationAccessScope::Group;
    assert_eq!(
        s.changeable_to(&s2),
        Err(QosError::Immutable {
            policy: QosPolicyId::Presentation
        })
    );
    let dp = DomainParticipantQos::default();
    let mut dp2 = dp.clone();
    dp2.entity_factory.autoenable_created_entities = false;
    assert_eq!(dp.changeable_to(&dp2), Ok(()));
}
