//! The LoggedStore level (RELIABLE + DURABILITY PERSISTENT) in deterministic simulation:
//! participants of a [`SimDomain`], each logging to a data directory of its own (a real
//! temporary directory: the sim fabric has no simulated disk, and a simulated crash loses
//! nothing that was synced, as on a real disk). Each test runs several seeds; a failure
//! prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_logged <test>`).

mod common;
use common::{atomic, keep_all, ks};

use std::path::{Path, PathBuf};
use std::time::Duration;

use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{
    subgroup_of, DataReader, DataWriter, DomainParticipant, Error, Sample, StateMask,
};
use spindle_log::{Log, LogConfig};
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, TopicQos};
use spindle_topics::KeyedString;

/// Seeds each test runs (override with `SPINDLE_SIM_SEED`).
const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;
/// Rounds a test waits for something before it fails.
const ROUNDS_MAX: u64 = 200_000;
/// Virtual time `wait_for_acknowledgments` may take (the simulation runs rounds meanwhile).
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "flight-recorder";

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds_in(SEEDS, "sim_logged", name, test)
}

/// RELIABLE + PERSISTENT: the LoggedStore level; the writers keep all their history
/// (their HISTORY bounds what the store keeps per instance, as for TRANSIENT_LOCAL).
fn persistent() -> TopicQos {
    atomic()
        .with_durability(DurabilityKind::Persistent)
        .with_history(History::keep_all())
}

fn node_dir(root: &Path, id: u32) -> PathBuf {
    root.join(format!("node-{id}"))
}

/// Participants `ids` of `d`, in order, each logging under `root/node-<id>` if `logs`.
fn participants(d: &SimDomain, root: &Path, ids: &[u32], logs: bool) -> Vec<DomainParticipant> {
    ids.iter()
        .map(|id| {
            d.participant_with(*id, Default::default(), |c| {
                if logs {
                    c.data_dir = Some(node_dir(root, *id));
                }
            })
            .expect("participant")
        })
        .collect()
}

fn writer(p: &DomainParticipant, qos: TopicQos) -> DataWriter<KeyedString> {
    let t = p.create_topic::<KeyedString>(TOPIC, qos.clone()).unwrap();
    p.create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::from_topic_qos(&qos))
        .unwrap()
}

fn reader(p: &DomainParticipant, qos: TopicQos, rq: DataReaderQos) -> DataReader<KeyedString> {
    let t = p.create_topic::<KeyedString>(TOPIC, qos).unwrap();
    p.create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, rq)
        .unwrap()
}

/// Runs `d` until `r` has `n` samples (read, not taken); returns them.
fn read_n(d: &SimDomain, r: &DataReader<KeyedString>, n: usize) -> Vec<Sample<KeyedString>> {
    let mut got = Vec::new();
    d.run_until(ROUNDS_MAX, || {
        got = r.read(usize::MAX, StateMask::ANY).unwrap();
        got.len() >= n
    });
    got
}

fn values(s: &[Sample<KeyedString>]) -> Vec<String> {
    s.iter()
        .filter_map(|s| s.data.as_ref().map(|d| d.value.clone()))
        .collect()
}

/// The values a node's log of the topic's subgroup holds (read offline).
fn logged_values(root: &Path, id: u32) -> Vec<String> {
    let sg = subgroup_of(TOPIC, spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT);
    let dir = node_dir(root, id).join(format!("subgroup-{sg}"));
    let mut log = Log::open(&dir, LogConfig::default()).unwrap();
    log.range(..)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let body = &e.payload[spindle_dds_core::sample::SAMPLE_HEADER_BYTES..];
            <KeyedString as spindle_topics::TopicType>::decode(body)
                .unwrap()
                .value
        })
        .collect()
}

#[test]
fn persistent_samples_are_acknowledged_once_durable_at_every_member() {
    for_seeds(
        "persistent_samples_are_acknowledged_once_durable_at_every_member",
        |seed| {
            let root = tempfile::tempdir().unwrap();
            let d = SimDomain::new(seed);
            let ps = participants(&d, root.path(), &[1, 2, 3], true);
            let rq = keep_all(&persistent());
            let r2 = reader(&ps[1], persistent(), rq.clone());
            let r3 = reader(&ps[2], persistent(), rq);
            let w = writer(&ps[0], persistent());
            // An Atomic topic sharing nothing with the logged one: not logged.
            let v = writer(&ps[0], atomic());
            let n = 20 + seed as usize;
            for i in 0..n {
                w.write(&ks(["A", "B"][i % 2], format!("e{i}"))).unwrap();
            }
            w.wait_for_acknowledgments(ACK_TIMEOUT)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            // Acknowledged: every member's frontier passed the last sample; each reader's
            // node learns it from the SST within a few rounds.
            for r in [&r2, &r3] {
                let mut got = Vec::new();
                assert!(
                    d.run_until(ROUNDS_MAX, || {
                        got = r.read(usize::MAX, StateMask::ANY).unwrap();
                        got.len() == n && got.iter().all(|s| s.info.durable)
                    }),
                    "seed {seed}: {} of {n} samples, durable {:?}",
                    got.len(),
                    got.iter().map(|s| s.info.durable).collect::<Vec<_>>()
                );
                assert_eq!(
                    values(&got),
                    (0..n).map(|i| format!("e{i}")).collect::<Vec<_>>(),
                    "seed {seed}"
                );
            }
            // Another level: acknowledged once delivered.
            v.write(&ks("x", "volatile")).unwrap();
            v.wait_for_acknowledgments(ACK_TIMEOUT).unwrap();
            // Every log holds the persistent samples, in order, and nothing else.
            drop((r2, r3, w, v, ps, d));
            for id in 1..=3 {
                assert_eq!(
                    logged_values(root.path(), id),
                    (0..n).map(|i| format!("e{i}")).collect::<Vec<_>>(),
                    "seed {seed}: node {id}'s log"
                );
            }
        },
    );
}

#[test]
fn a_member_without_a_log_holds_the_frontier_back() {
    for_seeds("a_member_without_a_log_holds_the_frontier_back", |seed| {
        let root = tempfile::tempdir().unwrap();
        let d = SimDomain::new(seed);
        let mut ps = participants(&d, root.path(), &[1, 2], true);
        ps.extend(participants(&d, root.path(), &[3], false));
        // Node 3 has no data_dir: it cannot create a PERSISTENT topic...
        match ps[2].create_topic::<KeyedString>(TOPIC, persistent()) {
            Err(Error::PreconditionNotMet(why)) => assert!(why.contains("data_dir"), "{why}"),
            other => panic!("seed {seed}: expected PreconditionNotMet, got {other:?}"),
        }
        // ...but a TRANSIENT_LOCAL reader of the topic makes it a member of the subgroup,
        // and it logs nothing: the frontier does not move.
        let tl = atomic().with_durability(DurabilityKind::TransientLocal);
        let r3 = reader(&ps[2], tl.clone(), keep_all(&tl));
        let w = writer(&ps[0], persistent());
        w.write(&ks("A", "e0")).unwrap();
        assert_eq!(values(&read_n(&d, &r3, 1)), vec!["e0"], "seed {seed}");
        match w.wait_for_acknowledgments(Duration::from_millis(200)) {
            Err(Error::Timeout(why)) => assert!(why.contains("durable"), "{why}"),
            other => panic!("seed {seed}: expected Timeout, got {other:?}"),
        }
        // A reader that does not ask for PERSISTENT never says durable.
        assert!(r3
            .read(1, StateMask::ANY)
            .unwrap()
            .iter()
            .all(|s| !s.info.durable));
    });
}

#[test]
fn late_readers_and_a_restarted_domain_get_the_durable_history() {
    for_seeds(
        "late_readers_and_a_restarted_domain_get_the_durable_history",
        |seed| {
            let root = tempfile::tempdir().unwrap();
            let n = 30 + seed as usize;
            let written: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
            {
                let d = SimDomain::new(seed);
                let ps = participants(&d, root.path(), &[1, 2, 3], true);
                let w = writer(&ps[0], persistent());
                // A reader on node 3 makes it a member (and a logger) from the start.
                let r3 = reader(&ps[2], persistent(), keep_all(&persistent()));
                for (i, v) in written.iter().enumerate() {
                    w.write(&ks(["A", "B", "C"][i % 3], v.clone())).unwrap();
                }
                w.wait_for_acknowledgments(ACK_TIMEOUT)
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                assert_eq!(values(&read_n(&d, &r3, n)), written, "seed {seed}");
                // A late reader gets the history up to its HISTORY depth per instance.
                let late = reader(
                    &ps[1],
                    persistent(),
                    DataReaderQos::from_topic_qos(&persistent())
                        .with_history(History::keep_last(2)),
                );
                let got = read_n(&d, &late, 6);
                assert_eq!(values(&got), written[n - 6..].to_vec(), "seed {seed}");
                // Total failure: every process dies at once.
                for id in 1..=3 {
                    d.crash(id);
                }
                drop((w, r3, late));
            }
            // The domain restarts from the data directories: the first process begins the
            // domain above its last logged view, the others join.
            let d = SimDomain::new(seed ^ 0xB5);
            let ps = participants(&d, root.path(), &[1, 2, 3], true);
            assert!(
                ps[0].view().unwrap().vid > 1,
                "seed {seed}: the restarted domain begins after the logged views"
            );
            let w = writer(&ps[0], persistent());
            // A new process's reader gets every durable sample, from the logs.
            let r2 = reader(&ps[1], persistent(), keep_all(&persistent()));
            let got = read_n(&d, &r2, n);
            assert_eq!(
                values(&got),
                written,
                "seed {seed}: history after the restart"
            );
            // And the domain goes on logging after its history.
            w.write(&ks("A", "after")).unwrap();
            w.wait_for_acknowledgments(ACK_TIMEOUT)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let got = read_n(&d, &r2, n + 1);
            assert_eq!(values(&got)[n], "after", "seed {seed}");
            assert!(
                got[n].info.durable || {
                    d.run_until(ROUNDS_MAX, || {
                        r2.read(usize::MAX, StateMask::ANY).unwrap()[n].info.durable
                    })
                }
            );
        },
    );
}

#[test]
fn a_restarted_domain_with_readers_only_gets_the_durable_history() {
    for_seeds(
        "a_restarted_domain_with_readers_only_gets_the_durable_history",
        |seed| {
            let root = tempfile::tempdir().unwrap();
            let n = 10 + seed as usize;
            let written: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
            {
                let d = SimDomain::new(seed);
                let ps = participants(&d, root.path(), &[1, 2], true);
                let w = writer(&ps[0], persistent());
                let r2 = reader(&ps[1], persistent(), keep_all(&persistent()));
                for (i, v) in written.iter().enumerate() {
                    w.write(&ks(["A", "B"][i % 2], v.clone())).unwrap();
                }
                w.wait_for_acknowledgments(ACK_TIMEOUT)
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                assert_eq!(values(&read_n(&d, &r2, n)), written, "seed {seed}");
                for id in 1..=2 {
                    d.crash(id);
                }
                drop((w, r2));
            }
            // The recorder's playback: the domain restarts with readers and no writer.
            // The PERSISTENT topic's subgroup must still be there to hold the logged
            // history and hand it to them.
            let d = SimDomain::new(seed ^ 0x5A);
            let ps = participants(&d, root.path(), &[1, 2], true);
            for p in &ps {
                let r = reader(p, persistent(), keep_all(&persistent()));
                let got = read_n(&d, &r, n);
                assert_eq!(values(&got), written, "seed {seed}: node {}", p.node_id());
                assert!(
                    got.iter().all(|s| s.info.instance_state
                        == spindle_dds_core::InstanceState::NotAliveNoWriters),
                    "seed {seed}: node {}: the history's writers are gone: {:?}",
                    p.node_id(),
                    got.iter()
                        .map(|s| s.info.instance_state)
                        .collect::<Vec<_>>()
                );
            }
        },
    );
}

#[test]
fn reads_over_history_by_version_time_and_range() {
    for_seeds("reads_over_history_by_version_time_and_range", |seed| {
        let root = tempfile::tempdir().unwrap();
        let d = SimDomain::new(seed);
        let ps = participants(&d, root.path(), &[1, 2], true);
        let r = reader(&ps[1], persistent(), keep_all(&persistent()));
        let w = writer(&ps[0], persistent());
        let t0 = spindle_dds_core::sim::SIM_EPOCH_NS + 1_000_000;
        let n = 12 + seed as usize;
        let keys = ["A", "B", "C"];
        for i in 0..n {
            let at = t0 + i as i64 * 1_000;
            w.write_w_timestamp(&ks(keys[i % 3], format!("e{i}")), at)
                .unwrap();
        }
        w.wait_for_acknowledgments(ACK_TIMEOUT)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let live = read_n(&d, &r, n);
        // The range over all of history is what the reader delivered, in the same order.
        let all: Vec<Sample<KeyedString>> = r.read_range(..).unwrap().collect();
        let place = |s: &[Sample<KeyedString>]| -> Vec<(u32, u64, String)> {
            s.iter()
                .map(|s| {
                    (
                        s.info.view_id,
                        s.info.order_index,
                        s.data.as_ref().unwrap().value.clone(),
                    )
                })
                .collect()
        };
        assert_eq!(place(&all), place(&live), "seed {seed}");
        // One version.
        let mid = &live[n / 2];
        let got = r
            .read_version(mid.info.view_id, mid.info.order_index)
            .unwrap()
            .expect("logged");
        assert_eq!(got.data, mid.data, "seed {seed}");
        assert_eq!(got.info.writer_seq, mid.info.writer_seq);
        // A sub-range, bounds inclusive.
        let (a, b) = (&live[2].info, &live[5].info);
        let some: Vec<_> = r
            .read_range((a.view_id, a.order_index)..=(b.view_id, b.order_index))
            .unwrap()
            .collect();
        assert_eq!(place(&some), place(&live[2..6]), "seed {seed}");
        // The state as of a time: per key, the last sample written at or before it.
        let k = 7usize;
        let state = r.read_at(t0 + k as i64 * 1_000).unwrap();
        let mut values: Vec<String> = values(&state);
        values.sort();
        let mut want: Vec<String> = (k - 2..=k).map(|i| format!("e{i}")).collect();
        want.sort();
        assert_eq!(values, want, "seed {seed}");
        assert!(r.read_at(t0 - 1).unwrap().is_empty());
        // Only PERSISTENT readers read history.
        let tl = atomic().with_durability(DurabilityKind::TransientLocal);
        let volatile = reader(&ps[1], tl.clone(), keep_all(&tl));
        assert!(matches!(
            volatile.read_range(..),
            Err(Error::PreconditionNotMet(_))
        ));
    });
}
