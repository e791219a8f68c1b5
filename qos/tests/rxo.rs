//! Requested-versus-offered compatibility, rule by rule.

use spindle_qos::*;

fn reliable_pair() -> (DataWriterQos, PublisherQos, DataReaderQos, SubscriberQos) {
    (
        DataWriterQos::default(),
        PublisherQos::default(),
        DataReaderQos::default().with_reliability(Reliability::reliable()),
        SubscriberQos::default(),
    )
}

fn incompatible(
    w: &DataWriterQos,
    p: &PublisherQos,
    r: &DataReaderQos,
    s: &SubscriberQos,
) -> Vec<QosPolicyId> {
    incompatible_policies(w, p, r, s)
}

#[test]
fn defaults_are_compatible() {
    let (w, p, r, s) = reliable_pair();
    assert!(incompatible(&w, &p, &r, &s).is_empty());
    assert!(incompatible(&w, &p, &DataReaderQos::default(), &s).is_empty());
}

#[test]
fn durability() {
    use DurabilityKind::*;
    let (w, p, r, s) = reliable_pair();
    let kinds = [Volatile, TransientLocal, Transient, Persistent];
    for offered in kinds {
        for requested in kinds {
            let got = incompatible(
                &w.clone().with_durability(offered),
                &p,
                &r.clone().with_durability(requested),
                &s,
            );
            if offered >= requested {
                assert!(got.is_empty(), "{offered:?} vs {requested:?}");
            } else {
                assert_eq!(
                    got,
                    vec![QosPolicyId::Durability],
                    "{offered:?} vs {requested:?}"
                );
            }
        }
    }
}

#[test]
fn presentation() {
    use PresentationAccessScope::*;
    let (w, _, r, _) = reliable_pair();
    let pres = |access_scope, coherent_access, ordered_access| Presentation {
        access_scope,
        coherent_access,
        ordered_access,
    };
    let check = |offered: Presentation, requested: Presentation| {
        incompatible(
            &w,
            &PublisherQos {
                presentation: offered,
                ..PublisherQos::default()
            },
            &r,
            &SubscriberQos {
                presentation: requested,
                ..SubscriberQos::default()
            },
        )
    };
    let bad = vec![QosPolicyId::Presentation];
    assert!(check(pres(Group, false, false), pres(Topic, false, false)).is_empty());
    assert!(check(pres(Topic, false, false), pres(Topic, false, false)).is_empty());
    assert_eq!(
        check(pres(Instance, false, false), pres(Topic, false, false)),
        bad
    );
    assert_eq!(
        check(pres(Topic, false, false), pres(Group, false, false)),
        bad
    );
    // Coherent access requested must be offered; offered but not requested is fine.
    assert!(check(pres(Topic, true, false), pres(Topic, false, false)).is_empty());
    assert!(check(pres(Topic, true, false), pres(Topic, true, false)).is_empty());
    assert_eq!(
        check(pres(Topic, false, false), pres(Topic, true, false)),
        bad
    );
    // Ordered access likewise.
    assert!(check(pres(Topic, false, true), pres(Topic, false, false)).is_empty());
    assert!(check(pres(Topic, false, true), pres(Topic, false, true)).is_empty());
    assert_eq!(
        check(pres(Topic, false, false), pres(Topic, false, true)),
        bad
    );
}

#[test]
fn deadline() {
    let (w, p, r, s) = reliable_pair();
    let one = Duration::from_secs(1);
    let two = Duration::from_secs(2);
    assert!(incompatible(
        &w.clone().with_deadline(one),
        &p,
        &r.clone().with_deadline(two),
        &s
    )
    .is_empty());
    assert!(incompatible(
        &w.clone().with_deadline(one),
        &p,
        &r.clone().with_deadline(one),
        &s
    )
    .is_empty());
    assert!(incompatible(&w.clone().with_deadline(one), &p, &r, &s).is_empty()); // reader INFINITE
    assert_eq!(
        incompatible(
            &w.clone().with_deadline(two),
            &p,
            &r.clone().with_deadline(one),
            &s
        ),
        vec![QosPolicyId::Deadline]
    );
    assert_eq!(
        incompatible(&w, &p, &r.clone().with_deadline(two), &s),
        vec![QosPolicyId::Deadline]
    );
}

#[test]
fn latency_budget() {
    let (mut w, p, mut r, s) = reliable_pair();
    w.latency_budget.duration = Duration::from_millis(5);
    r.latency_budget.duration = Duration::from_millis(10);
    assert!(incompatible(&w, &p, &r, &s).is_empty());
    r.latency_budget.duration = Duration::from_millis(4);
    assert_eq!(
        incompatible(&w, &p, &r, &s),
        vec![QosPolicyId::LatencyBudget]
    );
}

#[test]
fn ownership() {
    use OwnershipKind::*;
    let (mut w, p, mut r, s) = reliable_pair();
    for (o, q, ok) in [
        (Shared, Shared, true),
        (Exclusive, Exclusive, true),
        (Shared, Exclusive, false),
        (Exclusive, Shared, false),
    ] {
        w.ownership.kind = o;
        r.ownership.kind = q;
        let got = incompatible(&w, &p, &r, &s);
        if ok {
            assert!(got.is_empty());
        } else {
            assert_eq!(got, vec![QosPolicyId::Ownership], "{o:?} vs {q:?}");
        }
    }
}

#[test]
fn liveliness() {
    use LivelinessKind::*;
    let (mut w, p, mut r, s) = reliable_pair();
    let kinds = [Automatic, ManualByParticipant, ManualByTopic];
    for o in kinds {
        for q in kinds {
            w.liveliness.kind = o;
            r.liveliness.kind = q;
            let got = incompatible(&w, &p, &r, &s);
            assert_eq!(got.is_empty(), o >= q, "{o:?} vs {q:?}");
        }
    }
    w.liveliness = Liveliness {
        kind: Automatic,
        lease_duration: Duration::from_secs(1),
    };
    r.liveliness = Liveliness {
        kind: Automatic,
        lease_duration: Duration::from_secs(2),
    };
    assert!(incompatible(&w, &p, &r, &s).is_empty());
    r.liveliness.lease_duration = Duration::from_millis(500);
    assert_eq!(incompatible(&w, &p, &r, &s), vec![QosPolicyId::Liveliness]);
}

#[test]
fn reliability() {
    let (w, p, r, s) = reliable_pair();
    let be_writer = w.clone().with_reliability(Reliability::best_effort());
    assert!(incompatible(&w, &p, &r, &s).is_empty());
    assert!(incompatible(&w, &p, &DataReaderQos::default(), &s).is_empty());
    assert!(incompatible(&be_writer, &p, &DataReaderQos::default(), &s).is_empty());
    assert_eq!(
        incompatible(&be_writer, &p, &r, &s),
        vec![QosPolicyId::Reliability]
    );
}

#[test]
fn destination_order() {
    use DestinationOrderKind::*;
    let (mut w, p, mut r, s) = reliable_pair();
    for (o, q, ok) in [
        (ByReceptionTimestamp, ByReceptionTimestamp, true),
        (BySourceTimestamp, ByReceptionTimestamp, true),
        (BySourceTimestamp, BySourceTimestamp, true),
        (ByReceptionTimestamp, BySourceTimestamp, false),
    ] {
        w.destination_order.kind = o;
        r.destination_order.kind = q;
        let got = incompatible(&w, &p, &r, &s);
        assert_eq!(got.is_empty(), ok, "{o:?} vs {q:?}");
        if !ok {
            assert_eq!(got, vec![QosPolicyId::DestinationOrder]);
        }
    }
}

#[test]
fn every_incompatibility_at_once_sorted_by_id() {
    let w = DataWriterQos::default()
        .with_reliability(Reliability::best_effort())
        .with_deadline(Duration::from_secs(9));
    let mut w = w;
    w.latency_budget.duration = Duration::from_secs(1);
    w.liveliness.lease_duration = Duration::from_secs(10);
    let p = PublisherQos::default();

    let mut r = DataReaderQos::default()
        .with_reliability(Reliability::reliable())
        .with_durability(DurabilityKind::Persistent)
        .with_deadline(Duration::from_secs(1));
    r.ownership.kind = OwnershipKind::Exclusive;
    r.liveliness.kind = LivelinessKind::ManualByTopic;
    r.destination_order.kind = DestinationOrderKind::BySourceTimestamp;
    let s = SubscriberQos {
        presentation: Presentation {
            access_scope: PresentationAccessScope::Group,
            coherent_access: true,
            ordered_access: true,
        },
        ..SubscriberQos::default()
    };
    assert_eq!(
        incompatible_policies(&w, &p, &r, &s),
        vec![
            QosPolicyId::Durability,
            QosPolicyId::Presentation,
            QosPolicyId::Deadline,
            QosPolicyId::LatencyBudget,
            QosPolicyId::Ownership,
            QosPolicyId::Liveliness,
            QosPolicyId::Reliability,
            QosPolicyId::DestinationOrder,
        ]
    );

    // A few at once.
    let r2 = DataReaderQos::default()
        .with_reliability(Reliability::reliable())
        .with_durability(DurabilityKind::Transient);
    let w2 = DataWriterQos::default()
        .with_reliability(Reliability::best_effort())
        .with_deadline(Duration::from_secs(1));
    let r2 = r2.with_deadline(Duration::from_millis(10));
    assert_eq!(
        incompatible_policies(&w2, &p, &r2, &SubscriberQos::default()),
        vec![
            QosPolicyId::Durability,
            QosPolicyId::Deadline,
            QosPolicyId::Reliability
        ]
    );
}
