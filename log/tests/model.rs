//! The log against a model (a vector): random appends, syncs, reopens, truncations and
//! retention with small segments, every read compared.

mod common;

use common::{meta, payload};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use spindle_log::{Log, LogConfig, LogError, Version};

/// The seed of every property run in this file.
const SEED: u64 = 0x5EED_010C;

#[derive(Clone, Debug)]
enum Op {
    /// Append this many entries.
    Append(u8),
    Sync,
    /// Drop the log (buffered bytes reach the page cache, unsynced) and open it again.
    Reopen,
    /// Truncate after the entry at this fraction of the log.
    TruncateAfter(u8),
    /// Remove whole segments through the entry at this fraction of the log.
    RemoveThrough(u8),
    /// Read a range given by two fractions of the log.
    Read(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..20).prop_map(Op::Append),
        2 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => any::<u8>().prop_map(Op::TruncateAfter),
        1 => any::<u8>().prop_map(Op::RemoveThrough),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Read(a, b)),
    ]
}

fn config() -> Config {
    Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..Config::default()
    }
}

fn pick(model: &[(u64, Vec<u8>)], frac: u8) -> Option<u64> {
    if model.is_empty() {
        return None;
    }
    Some(model[frac as usize * (model.len() - 1) / 255].0)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_log_behaves_like_a_vector(
        ops in proptest::collection::vec(op(), 1..60),
        segment_bytes_max in 64u64..2048,
        write_buffer_bytes_max in 0usize..600,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes_max, write_buffer_bytes_max };
        let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
        let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Append(n) => {
                    for _ in 0..n {
                        let p = payload(SEED, next, 300);
                        log.append(meta(next), &p).unwrap();
                        model.push((next, p));
                        next += 1;
                    }
                }
                Op::Sync => {
                    let persisted = log.sync().unwrap();
                    prop_assert_eq!(persisted, log.last_version());
                    prop_assert!(!log.has_unsynced());
                }
                Op::Reopen => {
                    drop(log);
                    log = Log::open(dir.path(), cfg.clone()).unwrap();
                    prop_assert!(log.recovery().torn_tail.is_none());
                    prop_assert_eq!(log.persisted(), log.last_version());
                }
                Op::TruncateAfter(f) => {
                    if let Some(i) = pick(&model, f) {
                        let keep = model.iter().position(|e| e.0 == i).unwrap() + 1;
                        let removed = log.truncate_after(meta(i).version).unwrap();
                        prop_assert_eq!(removed, model.len() - keep);
                        model.truncate(keep);
                        prop_assert_eq!(log.persisted(), Some(meta(i).version));
                        // Appends go on after the cut (never reusing a cut version here).
                    }
                }
                Op::RemoveThrough(f) => {
                    if let Some(i) = pick(&model, f) {
                        let removed = log.remove_segments_through(meta(i).version).unwrap();
                        prop_assert!(removed <= model.iter().filter(|e| e.0 <= i).count());
                        model.drain(..removed);
                        prop_assert!(log.segment_count() >= 1);
                    }
                }
                Op::Read(a, b) => {
                    if let (Some(x), Some(y)) = (pick(&model, a), pick(&model, b)) {
                        let (lo, hi) = (meta(x.min(y)).version, meta(x.max(y)).version);
                        let got: Vec<_> = log.range(lo..=hi).unwrap()
                            .collect::<Result<_, _>>().unwrap();
                        let want: Vec<_> = model.iter()
                            .filter(|e| (lo..=hi).contains(&meta(e.0).version)).collect();
                        prop_assert_eq!(got.len(), want.len());
                        for (g, w) in got.iter().zip(want) {
                            prop_assert_eq!(g.meta, meta(w.0));
                            prop_assert_eq!(&g.payload, &w.1);
                        }
                    }
                }
            }
            prop_assert_eq!(log.len(), model.len());
            prop_assert_eq!(log.first_version(), model.first().map(|e| meta(e.0).version));
            if let Some(last) = model.last() {
                prop_assert_eq!(log.last_version(), Some(meta(last.0).version));
            }
            let metas: Vec<_> = log.metas().collect();
            let want: Vec<_> = model.iter().map(|e| meta(e.0)).collect();
            prop_assert_eq!(metas, want);
        }
        // Everything reads back after a final reopen.
        log.close().unwrap();
        let mut log = Log::open(dir.path(), cfg).unwrap();
        let got: Vec<_> = log.range(..).unwrap().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(got.len(), model.len());
        for (g, w) in got.iter().zip(&model) {
            prop_assert_eq!(&g.payload, &w.1);
        }
    }
}

#[test]
fn appends_must_increase_and_configs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(meta(5), b"x").unwrap();
    match log.append(meta(5), b"y") {
        Err(LogError::VersionNotIncreasing { last, given }) => {
            assert_eq!((last, given), (meta(5).version, meta(5).version));
        }
        other => panic!("expected VersionNotIncreasing, got {other:?}"),
    }
    assert!(log.append(meta(4), b"y").is_err());
    drop(log);
    let bad = LogConfig {
        segment_bytes_max: 10,
        ..LogConfig::default()
    };
    assert!(matches!(
        Log::open(dir.path(), bad),
        Err(LogError::Config(_))
    ));
}

#[test]
fn a_segment_holds_at_least_one_entry_however_large() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes_max: 128,
        write_buffer_bytes_max: 0,
    };
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    for i in 0..3u64 {
        log.append(meta(i), &vec![i as u8; 1000]).unwrap();
    }
    assert_eq!(log.segment_count(), 3);
    // Rollover synced the first two.
    assert_eq!(log.persisted(), Some(meta(1).version));
    assert_eq!(log.sync().unwrap(), Some(meta(2).version));
    // Retention removes whole sealed segments only.
    assert_eq!(log.remove_segments_through(Version::new(1, 1)).unwrap(), 2);
    assert_eq!(log.first_version(), Some(meta(2).version));
    assert_eq!(log.remove_segments_through(Version::new(9, 0)).unwrap(), 0);
    drop(log);
    let mut log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(
        log.get(meta(2).version).unwrap().unwrap().payload,
        vec![2u8; 1000]
    );
    assert!(log.get(meta(1).version).unwrap().is_none());
}
