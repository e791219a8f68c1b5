//! The simulated disk ([`Log::crash`]): whatever was appended, synced, buffered or
//! written when the crash came, and whatever torn write it left, the reopened log holds
//! every entry that was persisted, unchanged, then at most a prefix of the later appends —
//! never an error, never an entry that was not appended. Several crashes on one log.

mod common;

use common::{meta, payload};
use proptest::prelude::*;
use spindle_log::{Log, LogConfig, TornWrite};

/// Crashes per case, on the same directory.
const CRASHES: usize = 3;

#[derive(Clone, Debug)]
struct Crash {
    appends: usize,
    sync_every: usize,
    kept_frac: u16,
    garbage: Vec<u8>,
}

fn crash() -> impl Strategy<Value = Crash> {
    (
        0usize..40,
        1usize..12,
        0u16..=1000,
        prop::collection::vec(any::<u8>(), 0..120),
    )
        .prop_map(|(appends, sync_every, kept_frac, garbage)| Crash {
            appends,
            sync_every,
            kept_frac,
            garbage,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_keeps_everything_persisted_and_a_prefix_of_the_rest(
        crashes in prop::collection::vec(crash(), CRASHES),
        segment_bytes_max in 200u64..3000,
        write_buffer_bytes_max in 0usize..600,
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes_max, write_buffer_bytes_max };
        // What the log must hold: (index, payload), in order.
        let mut held: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut next = 0u64;
        for c in &crashes {
            let mut log = Log::open(dir.path(), config.clone()).unwrap();
            let mut appended = held.clone();
            let mut persisted = held.len();
            for k in 0..c.appends {
                let p = payload(seed, next, 150);
                log.append(meta(next), &p).unwrap();
                appended.push((next, p));
                next += 1;
                if (k + 1) % c.sync_every == 0 {
                    log.sync().unwrap();
                    persisted = appended.len();
                }
            }
            // Sealing a segment syncs it: the log's own frontier is the lower bound.
            let frontier = log.persisted().map(|v| (v.view_id - 1) * 100 + v.order_index);
            if let Some(f) = frontier {
                persisted = persisted.max(appended.iter().position(|(i, _)| *i == f).unwrap() + 1);
            }
            let unsynced = (log.len() - persisted) as u64;
            let torn = TornWrite {
                kept_bytes: u64::from(c.kept_frac) * (unsynced * 300 + 64) / 1000,
                garbage: c.garbage.clone(),
            };
            let image = log.crash(&torn).unwrap();
            prop_assert!(image.len_bytes >= image.synced_bytes);
            let mut log = Log::open(dir.path(), config.clone())
                .unwrap_or_else(|e| panic!("reopen after {image:?}: {e}"));
            let got: Vec<(u64, Vec<u8>)> = log
                .range(..)
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let v = e.meta.version;
                    ((v.view_id - 1) * 100 + v.order_index, e.payload)
                })
                .collect();
            prop_assert!(got.len() >= persisted, "{} held, {persisted} persisted", got.len());
            prop_assert!(got.len() <= appended.len());
            prop_assert_eq!(&got[..], &appended[..got.len()]);
            if torn.kept_bytes == 0 && torn.garbage.is_empty() {
                prop_assert_eq!(got.len(), persisted, "nothing unsynced survives");
            }
            held = got;
            next = held.last().map_or(0, |(i, _)| i + 1);
        }
    }
}
