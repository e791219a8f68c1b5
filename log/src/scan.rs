//! Recovery of one segment's bytes: which entries are valid, where a torn tail begins,
//! and whether a bad entry is instead corruption of bytes that had been synced. Pure: the
//! caller reads the file and acts on the answer.

use crate::entry::{self, Decoded, Invalid, ENTRY_ALIGN_BYTES};

/// Bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SPNDLOG1";
/// Offset of a segment's first entry.
pub const SEGMENT_HEADER_BYTES: u64 = SEGMENT_MAGIC.len() as u64;

const _: () = assert!(SEGMENT_HEADER_BYTES as usize % ENTRY_ALIGN_BYTES == 0);

/// An entry found by [`scan`], with its offset in the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub offset: u64,
    pub decoded: Decoded,
}

/// What [`scan`] found in a segment that is usable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// The valid entries, in file order.
    pub entries: Vec<Found>,
    /// Where the valid prefix ends: the segment's length after the torn tail is cut.
    pub valid_end: u64,
    /// Why the bytes from `valid_end` on are a torn tail, if there are any.
    pub torn: Option<Invalid>,
}

/// The segment is corrupt at `offset`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Corrupt {
    pub offset: u64,
    pub reason: String,
}

/// Scans a whole segment. `last` says whether it is the log's newest segment, the only
/// one that may end in a torn tail: every older segment was synced in full before the
/// next one was created, so a bad entry there is corruption.
///
/// In the last segment, a bad entry at offset `p` is a torn tail — cut from `p` on —
/// unless some later valid entry says it was written after `p` had been synced
/// (`synced_end > p`): then the bytes at `p` had been durable and changed since, which is
/// corruption. The limitation: the newest synced batch is vouched for only by a later
/// append, so a bit flip in it reads as a torn tail.
pub(crate) fn scan(bytes: &[u8], last: bool) -> Result<Scanned, Corrupt> {
    let len = bytes.len() as u64;
    if len < SEGMENT_HEADER_BYTES {
        if last && SEGMENT_MAGIC.starts_with(bytes) {
            // Created but its header never reached the disk: an empty segment.
            return Ok(Scanned {
                entries: Vec::new(),
                valid_end: 0,
                torn: (len > 0).then_some(Invalid::Truncated),
            });
        }
        return Err(Corrupt {
            offset: 0,
            reason: format!("segment of {len} bytes is shorter than its header"),
        });
    }
    if bytes[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
        return Err(Corrupt {
            offset: 0,
            reason: "not a Spindle log segment (bad segment magic)".into(),
        });
    }
    let mut entries = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES;
    while at < len {
        match entry::decode(&bytes[at as usize..]) {
            Ok(decoded) => {
                entries.push(Found {
                    offset: at,
                    decoded,
                });
                at += decoded.total_bytes as u64;
            }
            Err(why) => {
                if !last {
                    return Err(Corrupt {
                        offset: at,
                        reason: format!("{why} in a sealed segment"),
                    });
                }
                if let Some(later) = vouching_entry(bytes, at) {
                    return Err(Corrupt {
                        offset: at,
                        reason: format!(
                            "{why}, but the entry at offset {later} was written after this \
                             offset had been synced"
                        ),
                    });
                }
                return Ok(Scanned {
                    entries,
                    valid_end: at,
                    torn: Some(why),
                });
            }
        }
    }
    Ok(Scanned {
        entries,
        valid_end: at,
        torn: None,
    })
}

/// The offset of a valid entry after `bad` whose `synced_end` lies past `bad`.
fn vouching_entry(bytes: &[u8], bad: u64) -> Option<u64> {
    let mut p = bad as usize + ENTRY_ALIGN_BYTES;
    while p < bytes.len() {
        match entry::decode(&bytes[p..]) {
            Ok(d) if d.synced_end > bad => return Some(p as u64),
            Ok(d) => p += d.total_bytes,
            Err(_) => p += ENTRY_ALIGN_BYTES,
        }
    }
    None
}

/// One valid entry as [`inspect_segment`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// Byte offset of the entry in its segment.
    pub offset: u64,
    /// Version, writer, timestamp.
    pub meta: crate::EntryMeta,
    /// Payload bytes.
    pub payload_len: usize,
    /// The CRC-32 stored with the entry (it verified).
    pub crc: u32,
    /// The segment offset its writer knew durable when it appended it.
    pub synced_end: u64,
}

/// What a segment holds, read without changing it (the offline inspector's view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentReport {
    /// The valid entries before any torn tail or corruption.
    pub entries: Vec<EntryInfo>,
    /// Where the valid prefix ends.
    pub valid_end: u64,
    /// A torn tail from `valid_end` on, and what was found there; [`crate::Log::open`]
    /// would cut it.
    pub torn: Option<String>,
    /// Corruption: its offset and what is wrong; [`crate::Log::open`] would refuse the log.
    pub corrupt: Option<(u64, String)>,
}

/// Reads a segment's bytes as [`crate::Log::open`] would (`last`: it is the newest
/// segment), without changing anything. Pure; never panics, whatever the bytes.
///
/// ```
/// let report = spindle_log::inspect_segment(b"SPNDLOG1", true);
/// assert!(report.entries.is_empty() && report.torn.is_none() && report.corrupt.is_none());
/// let report = spindle_log::inspect_segment(b"garbage!", false);
/// assert_eq!(report.corrupt.unwrap().0, 0);
/// ```
pub fn inspect_segment(bytes: &[u8], last: bool) -> SegmentReport {
    let info = |f: &Found| EntryInfo {
        offset: f.offset,
        meta: f.decoded.meta,
        payload_len: f.decoded.payload_len,
        crc: f.decoded.crc,
        synced_end: f.decoded.synced_end,
    };
    match scan(bytes, last) {
        Ok(s) => SegmentReport {
            entries: s.entries.iter().map(info).collect(),
            valid_end: s.valid_end,
            torn: s.torn.map(|t| t.to_string()),
            corrupt: None,
        },
        Err(c) => {
            // The entries before the corruption, for the report.
            let mut entries = Vec::new();
            let mut at = SEGMENT_HEADER_BYTES as usize;
            while (at as u64) < c.offset && at < bytes.len() {
                match entry::decode(&bytes[at..]) {
                    Ok(decoded) => {
                        entries.push(info(&Found {
                            offset: at as u64,
                            decoded,
                        }));
                        at += decoded.total_bytes;
                    }
                    Err(_) => break,
                }
            }
            SegmentReport {
                entries,
                valid_end: c.offset,
                torn: None,
                corrupt: Some((c.offset, c.reason)),
            }
        }
    }
}

/// The checks a log makes across its segments, beyond each segment's own: versions only
/// grow from entry to entry, and the newest segment's number leaves one for the next.
/// [`crate::Log::open`] and the offline report ([`crate::report::report`]) share them, so
/// `verify` says clean exactly when open accepts the log.
#[derive(Debug, Default)]
pub(crate) struct Across {
    prev: Option<crate::entry::Version>,
}

impl Across {
    /// The next entry, in log order, has `version`: `Err` with the reason if it does not
    /// follow the one before.
    pub(crate) fn entry(&mut self, version: crate::entry::Version) -> Result<(), String> {
        if let Some(prev) = self.prev.filter(|p| version <= *p) {
            return Err(format!("version {version} follows version {prev}"));
        }
        self.prev = Some(version);
        Ok(())
    }

    /// The newest segment is numbered `number`: `Err` with the reason if no number is
    /// left for the next (a name no segment of a log gets: it numbers them from 0).
    pub(crate) fn newest_segment(number: u64) -> Result<(), String> {
        if number == u64::MAX {
            return Err(format!(
                "segment number {number} (from the file name) leaves no number for the next \
                 segment; move the file away"
            ));
        }
        Ok(())
    }
}
