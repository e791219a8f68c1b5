//! QoS durations past what a u64 of µs holds (584,000 years) that are not INFINITE are
//! never truncated into short ones: every use treats them as (practically) infinite.
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_qos_bad_input`.)

mod common;
use common::sim::{domain, reader, take_n, values, writer, ROUNDS_MAX};
use common::{atomic, keep_all, ks};

use spindle_dds_core::discovery::Rxo;
use spindle_dds_core::{DataReader, StateMask};
use spindle_qos::{
    DataWriterQos, Deadline, Duration as QosDuration, Liveliness, LivelinessKind,
    ReaderDataLifecycle, TimeBasedFilter,
};
use spindle_topics::KeyedString;

/// 18,446,744,073,710 s is 2^64 + 448,384 µs: truncated to a u64 it was 0.45 s.
const HUGE: QosDuration = QosDuration::new(18_446_744_073_710, 0);

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_qos_bad_input", name, test);
}

/// The announced policies: infinite, as the wire's u64::MAX says, not 0.45 s.
#[test]
fn announced_durations_past_u64_micros_are_infinite() {
    let rxo = Rxo::of(
        Default::default(),
        Default::default(),
        HUGE,
        HUGE,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!((rxo.deadline_us, rxo.latency_budget_us), (None, None));
    let finite = Rxo::of(
        Default::default(),
        Default::default(),
        QosDuration::from_millis(3),
        QosDuration::new(18_446_744_073_709, 0),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    assert_eq!(finite.deadline_us, Some(3_000));
    assert_eq!(finite.latency_budget_us, Some(18_446_744_073_709_000_000));
}

/// DEADLINE, LIVELINESS, READER_DATA_LIFECYCLE and TIME_BASED_FILTER of [`HUGE`] on both
/// sides: a second of silence misses no deadline, loses no liveliness, purges nothing,
/// and a second sample within the separation is filtered; a reader requesting a
/// [`HUGE`] lease matches an AUTOMATIC INFINITE writer.
#[test]
fn qos_durations_past_u64_micros_are_not_truncated() {
    for_seeds("qos_durations_past_u64_micros_are_not_truncated", |seed| {
        let (d, ps) = domain(seed, 2);
        let mut rq = keep_all(&atomic());
        rq.deadline = Deadline { period: HUGE };
        rq.liveliness.lease_duration = HUGE;
        rq.reader_data_lifecycle = ReaderDataLifecycle {
            autopurge_nowriter_samples_delay: HUGE,
            autopurge_disposed_samples_delay: HUGE,
        };
        rq.time_based_filter = TimeBasedFilter {
            minimum_separation: HUGE,
        };
        let r = reader(&ps[1], "Huge", rq);
        let w = writer(
            &ps[0],
            "Huge",
            DataWriterQos {
                deadline: Deadline { period: HUGE },
                liveliness: Liveliness {
                    kind: LivelinessKind::ManualByTopic,
                    lease_duration: HUGE,
                },
                ..Default::default()
            },
        );
        let mut lq = keep_all(&atomic());
        lq.liveliness.lease_duration = HUGE;
        let leased = reader(&ps[1], "Plain", lq);
        let plain = writer(&ps[0], "Plain", DataWriterQos::default());

        w.write(&ks("a", "1")).unwrap();
        w.write(&ks("b", "1")).unwrap();
        w.dispose(&ks("b", "")).unwrap();
        plain.write(&ks("p", "1")).unwrap();
        let keys = |r: &DataReader<KeyedString>| {
            let mut k: Vec<String> = r
                .read(usize::MAX, StateMask::ANY)
                .unwrap()
                .iter()
                .filter_map(|s| s.data.as_ref().map(|d| format!("{}{}", d.key, d.value)))
                .collect();
            k.sort();
            k
        };
        assert!(
            d.run_until(ROUNDS_MAX, || keys(&r).len() == 2),
            "seed {seed}: samples arrive"
        );
        d.run_for(1_000_000);
        let l = r.liveliness_changed_status();
        assert_eq!(
            (l.alive_count, l.not_alive_count),
            (1, 0),
            "seed {seed}: reader's view of the lease"
        );
        w.write(&ks("a", "2")).unwrap();
        d.run_for(200_000);
        assert_eq!(
            w.offered_deadline_missed_status().total_count,
            0,
            "seed {seed}: offered deadline"
        );
        assert_eq!(
            r.requested_deadline_missed_status().total_count,
            0,
            "seed {seed}: requested deadline"
        );
        assert_eq!(
            w.liveliness_lost_status().total_count,
            0,
            "seed {seed}: writer lease"
        );
        assert_eq!(
            keys(&r),
            ["a1", "b1"],
            "seed {seed}: nothing purged, a2 filtered"
        );
        assert_eq!(
            values(&take_n(&d, &leased, 1)),
            ["1"],
            "seed {seed}: a HUGE requested lease matches an INFINITE one"
        );
        assert_eq!(
            leased.requested_incompatible_qos_status().total_count,
            0,
            "seed {seed}"
        );
    });
}
