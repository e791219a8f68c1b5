//! Torn tails are cut, corruption is reported with file and offset, garbage never panics.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use common::{copy_dir, meta, offsets, payload};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use spindle_log::{Log, LogConfig, LogError};

/// The seed of every test in this file (payloads and property runs).
const SEED: u64 = 0x5EED_0106;

fn one_segment() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 30,
        write_buffer_bytes_max: 4096,
    }
}

fn segment_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut segs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

/// Writes `n` entries, synced in batches of `batch`, and returns their payload lengths.
fn write_log(dir: &std::path::Path, n: u64, batch: u64) -> Vec<usize> {
    let mut log = Log::open(dir, one_segment()).unwrap();
    let mut lens = Vec::new();
    for i in 0..n {
        let p = payload(SEED, i, 200);
        lens.push(p.len());
        log.append(meta(i), &p).unwrap();
        if (i + 1) % batch == 0 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
    lens
}

#[test]
fn a_cut_at_every_byte_of_the_last_entry_is_a_torn_tail() {
    let src = tempfile::tempdir().unwrap();
    let lens = write_log(src.path(), 6, 2);
    let (offs, end) = offsets(&lens);
    let last = *offs.last().unwrap();
    assert_eq!(fs::metadata(segment_file(src.path())).unwrap().len(), end);
    for cut in last..end {
        let d = copy_dir(src.path());
        let seg = segment_file(d.path());
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let mut log = Log::open(d.path(), one_segment())
            .unwrap_or_else(|e| panic!("seed {SEED:#x}: cut at {cut}: {e}"));
        assert_eq!(log.len(), 5, "seed {SEED:#x}: cut at {cut}");
        let torn = log.recovery().torn_tail.clone();
        assert_eq!(torn.is_some(), cut > last, "seed {SEED:#x}: cut at {cut}");
        if let Some(t) = torn {
            assert_eq!((t.offset, t.bytes_cut), (last, cut - last));
        }
        // The cut is durable and the log goes on from it.
        assert_eq!(fs::metadata(&seg).unwrap().len(), last);
        log.append(meta(5), b"again").unwrap();
        log.close().unwrap();
        let mut log = Log::open(d.path(), one_segment()).unwrap();
        assert_eq!(log.len(), 6);
        assert!(log.recovery().torn_tail.is_none());
        let e = log.get(meta(5).version).unwrap().unwrap();
        assert_eq!(e.payload, b"again");
        let e = log.get(meta(4).version).unwrap().unwrap();
        assert_eq!(e.payload, payload(SEED, 4, 200));
    }
}

#[test]
fn a_bad_checksum_in_the_last_entry_is_a_torn_tail() {
    let src = tempfile::tempdir().unwrap();
    let lens = write_log(src.path(), 4, 4);
    let (offs, end) = offsets(&lens);
    let last = offs[3];
    for byte in last + 4..end.min(last + 56 + lens[3] as u64) {
        let d = copy_dir(src.path());
        let seg = segment_file(d.path());
        flip(&seg, byte);
        let log = Log::open(d.path(), one_segment()).unwrap();
        assert_eq!(log.len(), 3, "flip at {byte}");
        assert_eq!(log.recovery().torn_tail.as_ref().unwrap().offset, last);
    }
}

fn flip(path: &std::path::Path, at: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn a_flip_in_every_byte_of_a_middle_entry_is_corruption_named_by_file_and_offset() {
    let src = tempfile::tempdir().unwrap();
    // Batches of 3: entry 4 was synced before entries 6.. were written.
    let lens = write_log(src.path(), 12, 3);
    let (offs, _) = offsets(&lens);
    let at = offs[4];
    for byte in at..at + 56 + lens[4] as u64 {
        let d = copy_dir(src.path());
        let seg = segment_file(d.path());
        flip(&seg, byte);
        let before = fs::read(&seg).unwrap();
        match Log::open(d.path(), one_segment()) {
            Err(LogError::Corrupt { path, offset, .. }) => {
                assert_eq!((path, offset), (seg.clone(), at), "flip at {byte}");
            }
            other => panic!("flip at byte {byte}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            fs::read(&seg).unwrap(),
            before,
            "a corrupt log is left as it is"
        );
    }
}

#[test]
fn corruption_in_a_sealed_segment_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes_max: 512,
        write_buffer_bytes_max: 0,
    };
    let mut log = Log::open(d.path(), config.clone()).unwrap();
    for i in 0..20 {
        log.append(meta(i), &payload(SEED, i, 100)).unwrap();
    }
    log.close().unwrap();
    let mut segs: Vec<_> = fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    // The last byte of the first entry's header (its synced_end) in the first segment.
    flip(&segs[0], 8 + 50);
    match Log::open(d.path(), config) {
        Err(LogError::Corrupt {
            path,
            offset,
            reason,
        }) => {
            assert_eq!((path, offset), (segs[0].clone(), 8), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

fn config() -> Config {
    Config {
        cases: 256,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Whatever bytes a segment holds, opening it returns a log or an error, never a panic;
    /// and a log it returns reads back without error.
    #[test]
    fn garbage_never_panics(
        at in 0u64..2048,
        junk in proptest::collection::vec(any::<u8>(), 1..256),
        truncate in proptest::option::of(0u64..2048),
    ) {
        let src = tempfile::tempdir().unwrap();
        write_log(src.path(), 10, 4);
        let seg = segment_file(src.path());
        let f = OpenOptions::new().read(true).write(true).open(&seg).unwrap();
        f.write_all_at(&junk, at).unwrap();
        if let Some(t) = truncate {
            f.set_len(t).unwrap();
        }
        if let Ok(mut log) = Log::open(src.path(), one_segment()) {
            let n = log.len();
            let read: Result<Vec<_>, _> = log.range(..).unwrap().collect();
            prop_assert_eq!(read.unwrap().len(), n);
        }
    }
}

#[test]
fn the_inspector_reports_without_changing_anything() {
    let src = tempfile::tempdir().unwrap();
    let lens = write_log(src.path(), 12, 3);
    let seg = segment_file(src.path());
    let (offs, end) = offsets(&lens);
    let bytes = fs::read(&seg).unwrap();
    let r = spindle_log::inspect_segment(&bytes, true);
    assert_eq!(r.entries.len(), 12);
    assert_eq!(
        (r.valid_end, r.torn.clone(), r.corrupt.clone()),
        (end, None, None)
    );
    assert_eq!(r.entries[4].offset, offs[4]);
    assert_eq!(r.entries[4].meta, meta(4));
    // A flip in entry 4: corrupt at its offset, the entries before it still listed.
    let mut bad = bytes.clone();
    bad[offs[4] as usize + 60] ^= 1;
    let r = spindle_log::inspect_segment(&bad, true);
    assert_eq!(r.corrupt.as_ref().map(|c| c.0), Some(offs[4]));
    assert_eq!(r.entries.len(), 4);
    // A cut inside the last entry: a torn tail.
    let r = spindle_log::inspect_segment(&bytes[..end as usize - 3], true);
    assert_eq!((r.entries.len(), r.valid_end), (11, offs[11]));
    assert!(r.torn.is_some());
}

#[test]
fn a_concurrent_reader_sees_whole_entries_of_a_log_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes_max: 2048,
        write_buffer_bytes_max: 256,
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    for i in 0..40 {
        log.append(meta(i), &payload(SEED, i, 100)).unwrap();
        if i % 7 == 0 {
            log.sync().unwrap();
        }
        // What a reader sees at any moment: whole entries in order, each one checked.
        let seen = spindle_log::read_entries(dir.path(), ..).unwrap();
        let expect: Vec<u64> = (0..seen.len() as u64).collect();
        assert_eq!(
            seen.iter()
                .map(|e| e.meta.version.order_index)
                .collect::<Vec<_>>(),
            expect
        );
        for e in &seen {
            assert_eq!(e.payload, payload(SEED, e.meta.version.order_index, 100));
        }
    }
    log.sync().unwrap();
    assert!(log.segment_count() > 2, "several segments");
    let mid = spindle_log::read_entries(dir.path(), meta(10).version..=meta(20).version).unwrap();
    assert_eq!(mid.len(), 11);
    // Retention removed old segments: the reader sees what is left.
    log.remove_segments_through(meta(15).version).unwrap();
    let left = spindle_log::read_entries(dir.path(), ..).unwrap();
    assert_eq!(left.last().unwrap().meta.version, meta(39).version);
    assert!(left.first().unwrap().meta.version <= meta(16).version);
}

/// The offline report ([`spindle_log::report::report`], behind `spindle log verify`)
/// judges a log as open does, across segments too: a repeated entry, segments whose
/// versions go back, and a newest segment numbered `u64::MAX` are corrupt for both, named
/// by file and offset; a directory without segments is no log (open would start one).
#[test]
fn the_report_refuses_what_open_refuses_across_segments() {
    use spindle_log::report::{report, Verdict};
    let src = tempfile::tempdir().unwrap();
    let lens = write_log(src.path(), 6, 6);
    let seg = segment_file(src.path());
    let (offs, end) = offsets(&lens);
    let bytes = fs::read(&seg).unwrap();
    let last = bytes[offs[5] as usize..end as usize].to_vec();
    let verdict = |dir: &std::path::Path| {
        let mut out = Vec::new();
        let v = report("test", dir, false, false, &mut out).unwrap();
        (v, String::from_utf8(out).unwrap())
    };
    let (v, text) = verdict(src.path());
    assert_eq!(v, Verdict::Clean, "{text}");
    type Damage<'a> = Box<dyn Fn(&std::path::Path) + 'a>;
    let name = |n: u64| format!("{n:020}.seg");
    let cases: Vec<(&str, Damage<'_>, u64)> = vec![
        (
            "the last entry appended twice",
            Box::new(|d: &std::path::Path| {
                let mut f = OpenOptions::new()
                    .append(true)
                    .open(segment_file(d))
                    .unwrap();
                std::io::Write::write_all(&mut f, &last).unwrap();
            }),
            end,
        ),
        (
            "a second segment repeating the first",
            Box::new(move |d: &std::path::Path| {
                fs::copy(segment_file(d), d.join(name(1))).unwrap();
            }),
            offs[0],
        ),
        (
            "the segment renamed u64::MAX",
            Box::new(|d: &std::path::Path| {
                fs::rename(segment_file(d), d.join(format!("{}.seg", u64::MAX))).unwrap();
            }),
            0,
        ),
    ];
    for (what, damage, offset) in cases {
        let dir = copy_dir(src.path());
        damage(dir.path());
        let (v, text) = verdict(dir.path());
        assert_eq!(v, Verdict::Corrupt, "{what}: {text}");
        assert!(
            text.contains(&format!("at byte {offset}:")),
            "{what}: {text}"
        );
        match Log::open(dir.path(), one_segment()) {
            Err(LogError::Corrupt { offset: at, .. }) => assert_eq!(at, offset, "{what}"),
            other => panic!("{what}: open gave {other:?}"),
        }
    }
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(verdict(empty.path()).0, Verdict::Unreadable);
    // A segment's name on a FIFO: reading it would block both forever.
    let fifo = copy_dir(src.path());
    let name = fifo.path().join(format!("{:020}.seg", 1));
    let made = std::process::Command::new("mkfifo")
        .arg(&name)
        .status()
        .unwrap();
    assert!(made.success());
    let (v, text) = verdict(fifo.path());
    assert_eq!(v, Verdict::Corrupt, "{text}");
    assert!(text.contains("a segment's name on a FIFO"), "{text}");
    assert!(matches!(
        Log::open(fifo.path(), one_segment()),
        Err(LogError::Corrupt { .. })
    ));
}
