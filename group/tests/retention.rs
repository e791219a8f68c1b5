//! Retention of a logged subgroup's log (`persist::Retention`): whole old segments go
//! once every entry in them is past the count or age bound; the log keeps at least what
//! the bounds say, and at most one segment more; the newest entries are never touched.

use spindle_group::persist::{Persistence, Persister, Retention};
use spindle_log::{EntryMeta, LogConfig, Version};

const SG: u32 = 2;
const ENTRIES: u64 = 200;
/// Entries of 100 payload bytes per 2 KiB segment: at most 2048 / 160.
const PER_SEGMENT_MAX: u64 = 13;

fn logged(dir: &std::path::Path) -> Persister {
    let cfg = LogConfig {
        segment_bytes_max: 2048,
        write_buffer_bytes_max: 512,
    };
    let mut p = Persistence::new(dir).subgroup(SG, cfg).open().unwrap();
    let log = p.log_mut(SG).unwrap();
    for i in 0..ENTRIES {
        let meta = EntryMeta {
            version: Version::new(1, i),
            writer: 1,
            timestamp_us: 1_000_000 + i * 1_000,
        };
        log.append(meta, &[i as u8; 100]).unwrap();
    }
    log.sync().unwrap();
    p
}

fn versions(p: &mut Persister) -> Vec<u64> {
    p.log_mut(SG)
        .unwrap()
        .metas()
        .map(|m| m.version.order_index)
        .collect()
}

#[test]
fn a_count_bound_removes_whole_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = logged(dir.path());
    assert_eq!(
        p.retain(u64::MAX).unwrap(),
        0,
        "no retention set: nothing goes"
    );
    p.retention().lock().unwrap().insert(
        SG,
        Retention {
            entries_max: Some(50),
            age_max_us: None,
        },
    );
    let gone = p.retain(0).unwrap();
    let left = versions(&mut p);
    assert_eq!(gone as u64 + left.len() as u64, ENTRIES);
    assert!(
        left.len() >= 50 && left.len() as u64 <= 50 + PER_SEGMENT_MAX,
        "{} left",
        left.len()
    );
    assert_eq!(
        left,
        (ENTRIES - left.len() as u64..ENTRIES).collect::<Vec<_>>()
    );
    // Reopened, the log starts where retention left it.
    drop(p);
    let mut p = logged_reopen(dir.path());
    assert_eq!(versions(&mut p), left);
}

fn logged_reopen(dir: &std::path::Path) -> Persister {
    let cfg = LogConfig {
        segment_bytes_max: 2048,
        write_buffer_bytes_max: 512,
    };
    Persistence::new(dir).subgroup(SG, cfg).open().unwrap()
}

#[test]
fn an_age_bound_removes_segments_older_than_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = logged(dir.path());
    p.retention().lock().unwrap().insert(
        SG,
        Retention {
            entries_max: None,
            age_max_us: Some(60_000),
        },
    );
    // Now is entry 150's time + 60 ms: entries 150.. are young enough.
    let now = 1_000_000 + 150 * 1_000 + 60_000;
    p.retain(now).unwrap();
    let left = versions(&mut p);
    assert!(
        left[0] <= 150 && left[0] + PER_SEGMENT_MAX > 150,
        "first kept {}",
        left[0]
    );
    assert_eq!(*left.last().unwrap(), ENTRIES - 1);
    // Everything too old: all but the active segment go.
    p.retain(u64::MAX).unwrap();
    let left = versions(&mut p);
    assert!(!left.is_empty() && left.len() as u64 <= PER_SEGMENT_MAX);
    assert_eq!(*left.last().unwrap(), ENTRIES - 1);
}
