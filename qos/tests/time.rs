//! `Duration` construction, conversion and ordering.

use spindle_qos::Duration;

#[test]
fn constructors_normalise() {
    assert_eq!(Duration::from_secs(3), Duration { sec: 3, nanosec: 0 });
    assert_eq!(
        Duration::from_millis(1_500),
        Duration {
            sec: 1,
            nanosec: 500_000_000
        }
    );
    assert_eq!(
        Duration::from_micros(2_000_001),
        Duration {
            sec: 2,
            nanosec: 1_000
        }
    );
    assert_eq!(
        Duration::from_nanos(1_000_000_001),
        Duration { sec: 1, nanosec: 1 }
    );
    assert_eq!(
        Duration::from_millis(-1),
        Duration {
            sec: -1,
            nanosec: 999_000_000
        }
    );
    assert_eq!(Duration::from_nanos(-1).as_nanos(), Some(-1));
    assert_eq!(
        Duration::from_nanos(i64::MIN).as_nanos(),
        Some(i128::from(i64::MIN))
    );
    assert_eq!(
        Duration::from_millis(i64::MAX).as_nanos(),
        Some(i128::from(i64::MAX) * 1_000_000)
    );
    assert_eq!(
        Duration::from_micros(i64::MIN).as_nanos(),
        Some(i128::from(i64::MIN) * 1_000)
    );
}

#[test]
fn infinite_orders_above_everything_finite() {
    assert!(Duration::INFINITE.is_infinite());
    assert!(!Duration::ZERO.is_infinite());
    for d in [
        Duration::ZERO,
        Duration::from_secs(i64::MAX),
        Duration {
            sec: i64::MAX,
            nanosec: 999_999_998,
        },
        Duration::from_millis(i64::MAX),
        Duration::from_secs(-5),
    ] {
        assert!(d < Duration::INFINITE, "{d:?}");
        assert!(!d.is_infinite());
    }
    assert!(Duration::from_secs(-1) < Duration::ZERO);
    assert!(Duration::from_millis(999) < Duration::from_secs(1));
}

#[test]
fn std_conversions() {
    let d = std::time::Duration::new(5, 7);
    assert_eq!(Duration::from_std(d), Duration { sec: 5, nanosec: 7 });
    assert_eq!(Duration::from_std(d).to_std(), Some(d));
    assert_eq!(
        Duration::from_std(std::time::Duration::MAX),
        Duration::INFINITE
    );
    assert_eq!(
        Duration::from_std(std::time::Duration::from_secs(i64::MAX as u64 + 1)),
        Duration::INFINITE
    );
    assert_eq!(Duration::INFINITE.to_std(), None);
    assert_eq!(Duration::from_millis(-1).to_std(), None);
    // Unnormalised nanoseconds are carried, never panic.
    assert_eq!(
        Duration {
            sec: 1,
            nanosec: u32::MAX
        }
        .to_std(),
        Some(std::time::Duration::new(1, 0) + std::time::Duration::from_nanos(u64::from(u32::MAX)))
    );
    let big = Duration {
        sec: i64::MAX - 1,
        nanosec: u32::MAX,
    };
    assert!(big.to_std().is_some());
    assert_eq!(Duration::INFINITE.as_nanos(), None);
    assert_eq!(Duration::from_secs(2).as_nanos(), Some(2_000_000_000));
}

#[test]
fn display() {
    assert_eq!(Duration::from_millis(1_500).to_string(), "1.500000000s");
    assert_eq!(Duration::from_millis(-500).to_string(), "-0.500000000s");
    assert_eq!(Duration::INFINITE.to_string(), "INFINITE");
}
