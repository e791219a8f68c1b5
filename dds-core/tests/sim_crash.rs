//! The total-crash checker of the LoggedStore level (the simulation evidence):
//! a domain of participants, each logging a PERSISTENT topic to its own data directory,
//! writes from seeded nodes at seeded rounds; at a seeded point every process *and its
//! machine* dies at once — the simulated disk ([`SimDomain::crash_with_disk`],
//! `spindle_log::Log::crash`) loses every write that was not synced, and keeps a seeded
//! prefix of the unsynced bytes with seeded garbage after it (a torn write); the domain
//! restarts from the data directories (the first participant, in seeded order, begins it
//! from its own log; the others join it); then it goes on writing, and dies again.
//!
//! After every crash the checker asserts, from the logs on disk:
//! * no globally persisted version (a sample some reader saw `durable`) is lost or
//!   changed: every member's log holds it, at its version;
//! * all replicas' logs are prefixes of one sequence, and that sequence is what was
//!   delivered, in order (nothing invented, nothing reordered);
//!
//! and after every restart, from the readers: every restarted reader sees exactly the
//! restored durable history — the log the domain restarted from, which holds every
//! globally persisted sample and only delivered ones, in order.
//!
//! Seeds: `SEEDS` by default; `SPINDLE_SIM_SEED=<seed>` runs one; `SPINDLE_CRASH_SEEDS=<n>`
//! runs seeds `1..=n` (a longer swarm). A failure prints the seed, the trace hash of each
//! epoch so far, and the command that reproduces it.

mod common;
use common::{atomic, keep_all, ks};

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{subgroup_of, DataReader, DataWriter, DomainParticipant, Sample, StateMask};
use spindle_log::{Log, LogConfig, TornWrite};
use spindle_qos::{DataWriterQos, DurabilityKind, History, TopicQos};
use spindle_topics::KeyedString;

/// Seeds run by default (bounded: CI has two cores).
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;
/// Crash-and-restart cycles per seed.
const EPOCHS: u32 = 3;
/// Participants of the domain.
const NODES: u32 = 3;
/// Rounds of traffic before a crash, at most (the seed picks how many).
const ROUNDS_BEFORE_CRASH_MAX: u64 = 700;
/// Steps between two group commits, at most (the seed picks).
const SYNC_EVERY_STEPS_MAX: u64 = 12;
/// Rounds a restarted reader may take to get its history.
const ROUNDS_MAX: u64 = 200_000;
/// Unsynced bytes a torn write keeps, at most.
const TORN_KEPT_BYTES_MAX: u64 = 6_000;
/// Garbage bytes after a torn write, at most.
const TORN_GARBAGE_BYTES_MAX: usize = 200;
const TOPIC: &str = "crash-recorder";

/// A place in the subgroup's order: (view id, order index).
type Place = (u64, u64);

fn persistent() -> TopicQos {
    atomic()
        .with_durability(DurabilityKind::Persistent)
        .with_history(History::keep_all())
}

fn node_dir(root: &Path, id: u32) -> PathBuf {
    root.join(format!("node-{id}"))
}

fn participant(d: &SimDomain, root: &Path, id: u32) -> DomainParticipant {
    d.participant_with(id, Default::default(), |c| {
        c.data_dir = Some(node_dir(root, id));
    })
    .unwrap_or_else(|e| panic!("participant {id}: {e}"))
}

fn writer(p: &DomainParticipant) -> DataWriter<KeyedString> {
    let t = p.create_topic::<KeyedString>(TOPIC, persistent()).unwrap();
    p.create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::from_topic_qos(&persistent()))
        .unwrap()
}

fn reader(p: &DomainParticipant) -> DataReader<KeyedString> {
    let t = p.create_topic::<KeyedString>(TOPIC, persistent()).unwrap();
    p.create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, keep_all(&persistent()))
        .unwrap()
}

fn placed(s: &[Sample<KeyedString>]) -> Vec<(Place, String, bool)> {
    s.iter()
        .filter_map(|s| {
            let v = s.data.as_ref()?.value.clone();
            Some((
                (u64::from(s.info.view_id), s.info.order_index),
                v,
                s.info.durable,
            ))
        })
        .collect()
}

/// What node `id`'s log of the topic's subgroup holds, read offline (opening it cuts a
/// torn tail, as the restarting process would).
fn logged(root: &Path, id: u32) -> Vec<(Place, String)> {
    let sg = subgroup_of(TOPIC, spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT);
    let dir = node_dir(root, id).join(format!("subgroup-{sg}"));
    if !dir.exists() {
        return Vec::new();
    }
    let mut log = Log::open(&dir, LogConfig::default())
        .unwrap_or_else(|e| panic!("node {id}: the log does not open after the crash: {e}"));
    log.range(..)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let body = &e.payload[spindle_dds_core::sample::SAMPLE_HEADER_BYTES..];
            let v = <KeyedString as spindle_topics::TopicType>::decode(body)
                .unwrap()
                .value;
            ((e.meta.version.view_id, e.meta.version.order_index), v)
        })
        .collect()
}

/// What the disk keeps of a log's unsynced bytes: seeded.
fn torn(rng: &mut ChaCha8Rng) -> TornWrite {
    let kept_bytes = if rng.gen_bool(0.5) {
        rng.gen_range(0..TORN_KEPT_BYTES_MAX)
    } else {
        0
    };
    let mut garbage = Vec::new();
    if rng.gen_bool(0.5) {
        garbage = vec![0; rng.gen_range(1..TORN_GARBAGE_BYTES_MAX)];
        rng.fill(&mut garbage[..]);
        if garbage.len() >= 4 && rng.gen_bool(0.5) {
            garbage[..4].copy_from_slice(b"SPLE"); // an entry's magic, then garbage
        }
    }
    TornWrite {
        kept_bytes,
        garbage,
    }
}

/// The participants in a seeded order (the first begins the domain).
fn shuffled(rng: &mut ChaCha8Rng) -> Vec<u32> {
    let mut order: Vec<u32> = (1..=NODES).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    order
}

/// One seed: `EPOCHS` rounds of traffic, total crash, restart. Returns the trace hash of
/// each epoch.
fn run(seed: u64) -> Vec<u64> {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Everything ever delivered, by place: one value per place (one total order).
    let mut delivered: BTreeMap<Place, String> = BTreeMap::new();
    // Every sample some reader saw durable everywhere (globally persisted), ever.
    let mut durable: BTreeMap<Place, String> = BTreeMap::new();
    // What the domain restarted from, which every restarted reader must show.
    let mut restored: Option<Vec<(Place, String)>> = None;
    let mut hashes = Vec::new();
    let mut next = 0u64;
    let mut order = shuffled(&mut rng);
    for epoch in 0..EPOCHS {
        let d = SimDomain::new(seed.wrapping_mul(31).wrapping_add(u64::from(epoch)));
        // The group commit every few steps, so that a crash finds unsynced appends.
        let sync_every = rng.gen_range(1..=SYNC_EVERY_STEPS_MAX);
        d.set_disk_sync_every(sync_every);
        let ps: BTreeMap<u32, DomainParticipant> = order
            .iter()
            .map(|id| (*id, participant(&d, root, *id)))
            .collect();
        let writers: Vec<DataWriter<KeyedString>> = order[..rng.gen_range(1..=order.len())]
            .iter()
            .map(|id| writer(&ps[id]))
            .collect();
        let rs: BTreeMap<u32, DataReader<KeyedString>> =
            ps.iter().map(|(id, p)| (*id, reader(p))).collect();
        if let Some(want) = &restored {
            for (id, r) in &rs {
                let mut got = Vec::new();
                d.run_until(ROUNDS_MAX, || {
                    got = placed(&r.read(usize::MAX, StateMask::ANY).unwrap());
                    got.len() >= want.len()
                });
                let got: Vec<(Place, String)> = got.into_iter().map(|(p, v, _)| (p, v)).collect();
                assert_eq!(
                    &got, want,
                    "seed {seed} epoch {epoch}: node {id}'s restarted reader does not show \
                     exactly the restored durable history"
                );
            }
        }
        let rounds = rng.gen_range(1..ROUNDS_BEFORE_CRASH_MAX);
        let rate = rng.gen_range(0.05..0.9);
        for _ in 0..rounds {
            if rng.gen_bool(rate) {
                let w = &writers[rng.gen_range(0..writers.len())];
                let key = ["A", "B", "C"][rng.gen_range(0..3)];
                if w.write(&ks(key, format!("s{epoch}.{next}"))).is_ok() {
                    next += 1;
                }
            }
            d.round();
        }
        // What was delivered, and what some reader saw durable everywhere.
        for (id, r) in &rs {
            for (place, v, is_durable) in placed(&r.read(usize::MAX, StateMask::ANY).unwrap()) {
                let old = delivered.entry(place).or_insert_with(|| v.clone());
                assert_eq!(
                    *old, v,
                    "seed {seed} epoch {epoch}: node {id} delivered {v} at {place:?}, \
                     another node {old}"
                );
                if is_durable {
                    durable.insert(place, v);
                }
            }
        }
        hashes.push(d.trace_hash());
        // Total failure: every process and its machine, at once.
        for id in &order {
            d.crash_with_disk(*id, |_| torn(&mut rng))
                .unwrap_or_else(|e| panic!("seed {seed} epoch {epoch}: {e}"));
        }
        drop((writers, rs, ps, d));
        let logs: BTreeMap<u32, Vec<(Place, String)>> =
            order.iter().map(|id| (*id, logged(root, *id))).collect();
        let longest = logs.values().max_by_key(|l| l.len()).unwrap().clone();
        for (id, log) in &logs {
            assert_eq!(
                log[..],
                longest[..log.len()],
                "seed {seed} epoch {epoch}: node {id}'s log is not a prefix of the longest"
            );
            for (place, v) in &durable {
                assert!(
                    log.binary_search(&(*place, v.clone())).is_ok(),
                    "seed {seed} epoch {epoch}: node {id}'s log lost the globally persisted \
                     {v} at {place:?} ({} entries)",
                    log.len()
                );
            }
        }
        for (place, v) in &longest {
            assert_eq!(
                delivered.get(place),
                Some(v),
                "seed {seed} epoch {epoch}: a log holds {v} at {place:?}, never delivered so"
            );
        }
        eprintln!(
            "seed {seed} epoch {epoch}: {rounds} rounds, sync every {sync_every} steps, {} delivered so far, {} durable, \
             logs {:?}, trace {:#x}",
            delivered.len(),
            durable.len(),
            logs.values().map(Vec::len).collect::<Vec<_>>(),
            hashes[hashes.len() - 1]
        );
        // The next epoch's first participant begins the domain from its own log: that is
        // the restored durable history every restarted reader must show.
        order = shuffled(&mut rng);
        restored = Some(logs[&order[0]].clone());
    }
    hashes
}

#[test]
fn total_crashes_keep_every_globally_persisted_version() {
    let seeds: Vec<u64> = match (
        std::env::var("SPINDLE_SIM_SEED"),
        std::env::var("SPINDLE_CRASH_SEEDS"),
    ) {
        (Ok(s), _) => vec![s.parse().expect("SPINDLE_SIM_SEED is a number")],
        (_, Ok(n)) => (1..=n.parse().expect("SPINDLE_CRASH_SEEDS is a number")).collect(),
        _ => SEEDS.collect(),
    };
    for seed in seeds {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| run(seed))) {
            eprintln!(
                "total crash checker failed with seed {seed}; reproduce: SPINDLE_SIM_SEED={seed} \
                 cargo test -p spindle-dds-core --test sim_crash"
            );
            std::panic::resume_unwind(e);
        }
    }
}
