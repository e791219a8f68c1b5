//! Segment file names are input too: a name whose number leaves no next segment
//! (`18446744073709551615.seg`) is refused at open, naming the file, never overflows.

mod common;

use common::meta;
use spindle_log::{Log, LogConfig, LogError, SEGMENT_BYTES_MIN};

/// Every append starts a new segment.
fn tiny_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: SEGMENT_BYTES_MIN,
        write_buffer_bytes_max: 4096,
    }
}

#[test]
fn a_segment_numbered_u64_max_is_refused_at_open() {
    let name = format!("{}.seg", u64::MAX);
    for with_older in [false, true] {
        let dir = tempfile::tempdir().expect("scratch directory");
        if with_older {
            let mut log = Log::open(dir.path(), tiny_segments()).unwrap();
            for i in 0..3 {
                log.append(meta(i), b"x").unwrap();
            }
            log.sync().unwrap();
        }
        let stray = dir.path().join(&name);
        std::fs::write(&stray, b"").unwrap();
        match Log::open(dir.path(), tiny_segments()) {
            Err(LogError::Corrupt {
                path,
                offset,
                reason,
            }) => {
                assert_eq!(path, stray);
                assert_eq!(offset, 0);
                assert!(
                    reason.contains("no number for the next segment"),
                    "{reason}"
                );
                let shown = LogError::Corrupt {
                    path,
                    offset,
                    reason,
                }
                .to_string();
                assert!(shown.contains(&name), "{shown}");
            }
            Err(e) => panic!("{e}"),
            Ok(mut log) => {
                // Appends roll over to the next segment: its number overflowed.
                for i in 10..13 {
                    log.append(meta(i), b"y").unwrap();
                }
                log.sync().unwrap();
                panic!("opened a log whose next segment has no number");
            }
        }
        // Refused before anything changed.
        assert_eq!(std::fs::metadata(&stray).unwrap().len(), 0);
    }
}
