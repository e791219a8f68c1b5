//! Helpers shared by the log's tests: deterministic payloads and scratch directories.
#![allow(dead_code)]

use spindle_log::{entry_bytes, EntryMeta, Version, SEGMENT_HEADER_BYTES};

/// SplitMix64: a seeded, portable mixer for test data.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The payload of entry `i` under `seed`: 0 to `len_max` bytes, all derived from both.
pub fn payload(seed: u64, i: u64, len_max: u64) -> Vec<u8> {
    let h = mix(seed ^ mix(i));
    let len = h % (len_max + 1);
    (0..len).map(|k| mix(h ^ k) as u8).collect()
}

/// The metadata of entry `i`: view `1 + i / 100`, writer and time derived from `i`.
pub fn meta(i: u64) -> EntryMeta {
    EntryMeta {
        version: Version::new(1 + i / 100, i % 100),
        writer: i % 3 + 1,
        timestamp_us: 1_700_000_000_000_000 + i * 10,
    }
}

/// The offset of each entry in a single segment holding payloads of these lengths, and
/// the segment's length.
pub fn offsets(lens: &[usize]) -> (Vec<u64>, u64) {
    let mut at = SEGMENT_HEADER_BYTES;
    let mut out = Vec::new();
    for &l in lens {
        out.push(at);
        at += entry_bytes(l) as u64;
    }
    (out, at)
}

/// Copies every file of `from` into a fresh directory.
pub fn copy_dir(from: &std::path::Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("scratch directory");
    for item in std::fs::read_dir(from).expect("list") {
        let p = item.expect("entry").path();
        std::fs::copy(&p, to.path().join(p.file_name().expect("name"))).expect("copy");
    }
    to
}
