//! The delivery level of each reliability × durability combination.

use spindle_qos::*;

#[test]
fn all_eight_combinations() {
    use DeliveryLevel::*;
    use DurabilityKind::*;
    let table = [
        (Reliability::best_effort(), Volatile, Unordered),
        (Reliability::best_effort(), TransientLocal, Unordered),
        (Reliability::best_effort(), Transient, Unordered),
        (Reliability::best_effort(), Persistent, Unordered),
        (Reliability::reliable(), Volatile, Atomic),
        (Reliability::reliable(), TransientLocal, VolatileStore),
        (Reliability::reliable(), Transient, VolatileStore),
        (Reliability::reliable(), Persistent, LoggedStore),
    ];
    for (rel, dur, level) in table {
        assert_eq!(
            DeliveryLevel::of(&rel, &Durability { kind: dur }),
            level,
            "{rel:?} {dur:?}"
        );
        assert_eq!(
            DataWriterQos::default()
                .with_reliability(rel)
                .with_durability(dur)
                .delivery_level(),
            level
        );
        assert_eq!(
            DataReaderQos::default()
                .with_reliability(rel)
                .with_durability(dur)
                .delivery_level(),
            level
        );
        assert_eq!(
            TopicQos::default()
                .with_reliability(rel)
                .with_durability(dur)
                .delivery_level(),
            level
        );
    }
    assert_eq!(DataWriterQos::default().delivery_level(), Atomic);
    assert_eq!(DataReaderQos::default().delivery_level(), Unordered);
    assert_eq!(TopicQos::default().delivery_level(), Unordered);
}

#[test]
fn codes_roundtrip() {
    let levels = [
        DeliveryLevel::Unordered,
        DeliveryLevel::Atomic,
        DeliveryLevel::VolatileStore,
        DeliveryLevel::LoggedStore,
    ];
    for (i, level) in levels.iter().enumerate() {
        assert_eq!(usize::from(level.to_u8()), i);
        assert_eq!(DeliveryLevel::from_u8(level.to_u8()), Some(*level));
    }
    for code in 4..=u8::MAX {
        assert_eq!(DeliveryLevel::from_u8(code), None, "{code}");
    }
    assert!(levels.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(DeliveryLevel::ALL, levels);
}

#[test]
fn names_and_parsing() {
    for (level, name) in [
        (DeliveryLevel::Unordered, "Unordered"),
        (DeliveryLevel::Atomic, "Atomic"),
        (DeliveryLevel::VolatileStore, "VolatileStore"),
        (DeliveryLevel::LoggedStore, "LoggedStore"),
    ] {
        assert_eq!(level.name(), name);
        assert_eq!(level.to_string(), name);
        assert_eq!(name.parse::<DeliveryLevel>(), Ok(level));
        assert_eq!(name.to_uppercase().parse::<DeliveryLevel>(), Ok(level));
        assert_eq!(name.to_lowercase().parse::<DeliveryLevel>(), Ok(level));
    }
    let err = "Store".parse::<DeliveryLevel>().unwrap_err();
    assert_eq!(err, ParseDeliveryLevelError("Store".into()));
    assert!(err.to_string().contains("\"Store\""));
    assert!("".parse::<DeliveryLevel>().is_err());
    assert!(" Atomic".parse::<DeliveryLevel>().is_err());
    let _: &dyn std::error::Error = &err;
}

#[test]
fn properties() {
    assert!(!DeliveryLevel::Unordered.is_ordered());
    assert!(DeliveryLevel::Atomic.is_ordered());
    assert!(DeliveryLevel::VolatileStore.is_ordered());
    assert!(DeliveryLevel::LoggedStore.is_ordered());
    assert!(!DeliveryLevel::Unordered.keeps_history());
    assert!(!DeliveryLevel::Atomic.keeps_history());
    assert!(DeliveryLevel::VolatileStore.keeps_history());
    assert!(DeliveryLevel::LoggedStore.keeps_history());
}
