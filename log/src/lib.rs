//! # spindle-log — the logged store's persistent log
//!
//! The durable half of the LoggedStore delivery level (docs/design.md §3 "Persistence",
//! §10 "The logged store"; Derecho §2.6 and Appendix B.2–B.4). Each member of a logged
//! subgroup appends the messages it delivers, in delivery order, to one [`Log`]: a
//! directory of append-only segment files. Every entry carries
//!
//! * its [`Version`] — `(view id, order index)`, strictly increasing along the log,
//! * the writer (the sending node's id),
//! * a timestamp: **the sender's clock** (microseconds since the Unix epoch, the DCPS
//!   source timestamp), not a hybrid logical clock,
//! * a CRC-32 over header and payload.
//!
//! **Group commit.** [`Log::append`] only buffers; [`Log::sync`] writes the buffer and
//! makes every append since the previous sync durable with one `fdatasync`. The caller —
//! the engine's runtime, once per pass of its loop — reads the persisted frontier from
//! [`Log::persisted`] and publishes it (the SST's `persisted_num`). Under load one sync
//! covers many appends, the Spindle batching idea applied to the disk.
//!
//! **Recovery.** [`Log::open`] verifies every entry. A torn tail of the newest segment (an
//! entry cut short or failing its checksum because a crash came before its sync) is cut
//! and reported in [`Log::recovery`]. Bytes that had been synced and no longer verify are
//! [`LogError::Corrupt`], naming the file and byte offset — never a panic, never a silent
//! cut. The two are told apart by `synced_end`, which each entry records: the offset up
//! to which its segment was durable when it was written (module `entry` has the format).
//! A segment is synced in full before the next is created, so only the newest segment may
//! end torn. [`Log::truncate_after`] cuts entries past a version (the ragged trim on
//! restart); [`Log::remove_segments_through`] drops whole old segments (retention).
//!
//! **Simulated crashes.** [`Log::crash`] is the simulated disk of the crash tests: it drops
//! the log as a power failure would, keeping of its newest segment the synced bytes, a
//! chosen prefix of the unsynced ones and optional garbage after them ([`TornWrite`]).
//! Only the newest segment can hold unsynced bytes (segments are sealed synced;
//! truncation and retention sync at once), so this is the whole of the disk's state. The
//! real path is untouched: no trait, no indirection.
//!
//! **The index** is in memory: one small record per entry (version, writer, timestamp,
//! segment, offset, length), rebuilt by the verifying scan on open, searched by binary
//! search for [`Log::range`] and [`Log::get`].
//!
//! **Offline inspection.** The `spindle-log` binary lists a log's entries (segment,
//! offset, version, writer, time, length, CRC) and reports torn tails and corruption
//! without changing a byte (`spindle-log inspect DIR`, `spindle-log verify DIR`);
//! [`inspect_segment`] is the same reading as a pure function.
//!
//! ## Why not a WAL crate
//!
//! Write-ahead-log crates exist (okaywal, commitlog, TiKV's raft-engine). What this log
//! needs is small and specific: entries keyed by our own `(view, index)` version with
//! writer and timestamp, a persisted frontier the engine reads and publishes, truncation
//! of a suffix by version (the ragged trim) and of a prefix by whole segments (retention),
//! and an open that tells a torn tail from corruption and names file and offset. The
//! general crates assign their own entry ids and checkpoint or recycle segments on their
//! own schedule (okaywal), carry multi-group machinery and compression we would not use
//! (raft-engine), or leave syncing and torn-tail policy to the caller (commitlog), so the
//! adapter would be about as large as this crate (~600 lines) and would hide exactly the
//! durability rules we must get right. The only dependency is `crc32fast` for the
//! checksum.
//!
//! ## Example
//!
//! ```
//! use spindle_log::{EntryMeta, Log, LogConfig, Version};
//!
//! let dir = std::env::temp_dir().join(format!("spindle-log-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let mut log = Log::open(&dir, LogConfig::default())?;
//! for i in 0..3 {
//!     let meta = EntryMeta { version: Version::new(1, i), writer: 7, timestamp_us: 1_000 + i };
//!     log.append(meta, format!("sample {i}").as_bytes())?;
//! }
//! assert_eq!(log.persisted(), None); // appended, not yet durable
//! assert_eq!(log.sync()?, Some(Version::new(1, 2))); // one fdatasync for all three
//!
//! let read: Vec<_> = log.range(Version::new(1, 1)..)?.collect::<Result<_, _>>()?;
//! assert_eq!(read[0].payload, b"sample 1");
//! assert_eq!(read[1].meta.writer, 7);
//!
//! // The ragged trim decided that only (1, 0) committed:
//! log.truncate_after(Version::new(1, 0))?;
//! drop(log);
//! let log = Log::open(&dir, LogConfig::default())?;
//! assert_eq!(log.last_version(), Some(Version::new(1, 0)));
//! assert!(log.recovery().torn_tail.is_none());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), spindle_log::LogError>(())
//! ```
#![deny(missing_docs)]

pub mod entry;
mod error;
pub mod report;
mod scan;
mod store;

pub use entry::{entry_bytes, EntryMeta, Version, HEADER_BYTES, PAYLOAD_BYTES_MAX};
pub use error::{LogError, Result};
pub use scan::{inspect_segment, EntryInfo, SegmentReport, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC};
pub use store::{
    list_segments, read_entries, CrashImage, Entries, Entry, Log, LogConfig, Recovery, TornTail,
    TornWrite, SEGMENT_BYTES_MIN, SEGMENT_SUFFIX, WRITE_BUFFER_BYTES_LIMIT,
};
