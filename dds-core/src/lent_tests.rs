//! Tests of the lent delivery batches ([`crate::lent`]) on the deterministic sim fabric,
//! several seeds (a failure names its seed). A module of its own above `sim`, so that
//! `lent` stays a data module below the cache.

use std::sync::Arc;

use crate::sim::SimDomain;
use crate::{DataReader, DomainParticipant, StateMask};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;
const ROUNDS_MAX: u64 = 200_000;
const N: usize = 60;

fn qos() -> TopicQos {
    TopicQos::default().with_reliability(Reliability::reliable())
}

/// Participant 1 writes N samples of topic "t" (after `before`); participant 2 reads
/// them with a KEEP_ALL reader, and runs until the reader holds all of them (read,
/// not taken).
fn setup(
    seed: u64,
    before: impl FnOnce(&DomainParticipant),
) -> (SimDomain, [DomainParticipant; 2], DataReader<KeyedString>) {
    let d = SimDomain::new(seed);
    let p1 = d.participant(1).expect("participant 1");
    let p2 = d.participant(2).expect("participant 2");
    before(&p2);
    let t2 = p2.create_topic::<KeyedString>("t", qos()).unwrap();
    let r = p2
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(
            &t2,
            DataReaderQos::from_topic_qos(&qos()).with_history(History::keep_all()),
        )
        .unwrap();
    let t1 = p1.create_topic::<KeyedString>("t", qos()).unwrap();
    let w = p1
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t1, DataWriterQos::default())
        .unwrap();
    for i in 0..N {
        let value = KeyedString {
            key: format!("k{}", i % 3),
            value: format!("v{i}"),
        };
        w.write(&value).unwrap();
    }
    let arrived = d.run_until(ROUNDS_MAX, || {
        r.read(usize::MAX, StateMask::ANY).unwrap().len() >= N
    });
    assert!(arrived, "seed {seed}: the {N} samples arrived");
    (d, [p1, p2], r)
}

fn values(r: &DataReader<KeyedString>) -> Vec<String> {
    r.take(usize::MAX, StateMask::ANY)
        .unwrap()
        .into_iter()
        .filter_map(|s| s.data.map(|d| d.value))
        .collect()
}

fn expected() -> Vec<String> {
    (0..N).map(|i| format!("v{i}")).collect()
}

#[test]
fn held_samples_borrow_their_batch_and_give_it_back() {
    for seed in SEEDS {
        let (_d, [_, p], r) = setup(seed, |_| {});
        let pool = Arc::clone(&p.inner.shared.lent);
        assert!(
            pool.lent_bytes() > 0,
            "seed {seed}: the cache holds the delivered batches, not copies"
        );
        assert_eq!(pool.copied(), 0, "seed {seed}: nothing was past the bound");
        // A loan pins its samples' batches past the take that empties the cache.
        let loan = r.read_loaned(usize::MAX, StateMask::ANY).unwrap();
        assert_eq!(loan.len(), N, "seed {seed}");
        assert_eq!(
            values(&r),
            expected(),
            "seed {seed}: every sample, in order"
        );
        assert!(
            pool.lent_bytes() > 0,
            "seed {seed}: the loan holds its batches"
        );
        assert_eq!(
            loan.iter()
                .map(|s| s.data().unwrap().unwrap().value)
                .collect::<Vec<_>>(),
            expected(),
            "seed {seed}: the loan reads the same bytes"
        );
        drop(loan);
        assert_eq!(
            pool.lent_bytes(),
            0,
            "seed {seed}: the last holder gave every batch back"
        );
        assert!(
            pool.spare_len() > 0,
            "seed {seed}: into the pool, for reuse"
        );
    }
}

#[test]
fn past_the_bound_deliveries_are_copied() {
    for seed in SEEDS {
        let (_d, [_, p], r) = setup(seed, |p| p.inner.shared.lent.set_limit(0));
        let pool = Arc::clone(&p.inner.shared.lent);
        assert_eq!(
            pool.lent_bytes(),
            0,
            "seed {seed}: nothing lent past the bound"
        );
        assert!(
            pool.copied() > 0,
            "seed {seed}: the batches were copied from"
        );
        assert_eq!(
            values(&r),
            expected(),
            "seed {seed}: every sample, in order"
        );
    }
}
