//! `spindle log` reads a logged store's log like `spindle-log`: a clean log lists its
//! entries and verifies with exit 0; a torn tail is exit 3; a missing directory exit 1.

use std::process::Command;

use spindle_log::{EntryMeta, Log, LogConfig, Version};

const BIN: &str = env!("CARGO_BIN_EXE_spindle");

#[test]
fn log_inspect_and_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("subgroup-0");
    {
        let mut log = Log::open(&path, LogConfig::default()).expect("open");
        for i in 0..3u64 {
            let meta = EntryMeta {
                version: Version {
                    view_id: 1,
                    order_index: i,
                },
                writer: 2,
                timestamp_us: 1_700_000_000_000_000 + i,
            };
            log.append(meta, b"payload").expect("append");
        }
        log.sync().expect("sync");
    }
    let p = path.to_string_lossy().to_string();
    let o = Command::new(BIN)
        .args(["log", "inspect", &p])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("3 valid entries, clean"), "{text}");
    let o = Command::new(BIN)
        .args(["log", "verify", &p])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0));
    // A torn tail: the newest segment cut mid-entry.
    let seg = std::fs::read_dir(&path)
        .expect("segments")
        .map(|e| e.expect("entry").path())
        .max()
        .expect("a segment");
    let len = std::fs::metadata(&seg).expect("meta").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open segment");
    f.set_len(len - 3).expect("truncate");
    let o = Command::new(BIN)
        .args(["log", "verify", &p])
        .output()
        .expect("run");
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let missing = dir.path().join("none").to_string_lossy().to_string();
    let o = Command::new(BIN)
        .args(["log", "verify", &missing])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
}
