//! Helpers the simulated DCPS tests share (`sim_dcps.rs`, `sim_qos.rs`): seeds, a domain,
//! readers and writers of `KeyedString`, waiting in virtual time.

use std::panic::{catch_unwind, AssertUnwindSafe};

use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{DataReader, DomainParticipant, Sample, StateMask};
use spindle_qos::{DataReaderQos, DataWriterQos};
use spindle_topics::KeyedString;

use super::atomic;

/// Seeds each test runs (override with `SPINDLE_SIM_SEED`).
pub const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;
/// Rounds a test waits for something before it fails.
pub const ROUNDS_MAX: u64 = 200_000;

/// Runs `test` for every seed; a failure names the seed and how to reproduce it.
pub fn for_seeds(file: &str, name: &str, test: impl Fn(u64)) {
    for_seeds_in(SEEDS, file, name, test)
}

/// [`for_seeds`] over `seeds` instead of [`SEEDS`].
pub fn for_seeds_in(
    seeds: std::ops::RangeInclusive<u64>,
    file: &str,
    name: &str,
    test: impl Fn(u64),
) {
    let seeds: Vec<u64> = match std::env::var("SPINDLE_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SPINDLE_SIM_SEED is a number")],
        Err(_) => seeds.collect(),
    };
    for seed in seeds {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| test(seed))) {
            eprintln!(
                "{name} failed with seed {seed}; reproduce: SPINDLE_SIM_SEED={seed} cargo test \
                 -p spindle-dds-core --test {file} {name}"
            );
            std::panic::resume_unwind(e);
        }
    }
}

/// A simulated domain of `n` participants, 1 first, the others joining one by one.
pub fn domain(seed: u64, n: u32) -> (SimDomain, Vec<DomainParticipant>) {
    let d = SimDomain::new(seed);
    let ps = (1..=n)
        .map(|id| d.participant(id).expect("participant"))
        .collect();
    (d, ps)
}

pub fn reader(p: &DomainParticipant, topic: &str, qos: DataReaderQos) -> DataReader<KeyedString> {
    let t = p.create_topic::<KeyedString>(topic, atomic()).unwrap();
    p.create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, qos)
        .unwrap()
}

pub fn writer(
    p: &DomainParticipant,
    topic: &str,
    qos: DataWriterQos,
) -> spindle_dds_core::DataWriter<KeyedString> {
    let t = p.create_topic::<KeyedString>(topic, atomic()).unwrap();
    p.create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, qos)
        .unwrap()
}

/// Runs the domain until `r` gave `n` samples in all; what it gave.
pub fn take_n(d: &SimDomain, r: &DataReader<KeyedString>, n: usize) -> Vec<Sample<KeyedString>> {
    let mut got = Vec::new();
    d.run_until(ROUNDS_MAX, || {
        got.extend(r.take(usize::MAX, StateMask::ANY).unwrap());
        got.len() >= n
    });
    got
}

pub fn values(s: &[Sample<KeyedString>]) -> Vec<String> {
    s.iter()
        .filter_map(|s| s.data.as_ref().map(|d| d.value.clone()))
        .collect()
}
