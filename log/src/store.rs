//! [`Log`]: segment files in one directory, an in-memory index, group commit.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::entry::{self, EntryMeta, Version, HEADER_BYTES, PAYLOAD_BYTES_MAX};
use crate::error::{LogError, Result};
use crate::scan::{self, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC};

/// The smallest `segment_bytes_max` a [`LogConfig`] may name: a header and one empty entry.
pub const SEGMENT_BYTES_MIN: u64 = SEGMENT_HEADER_BYTES + entry::entry_bytes(0) as u64;
/// The largest `write_buffer_bytes_max` a [`LogConfig`] may name.
pub const WRITE_BUFFER_BYTES_LIMIT: usize = 64 << 20;
/// The file name suffix of a segment (`00000000000000000007.seg`).
pub const SEGMENT_SUFFIX: &str = ".seg";

/// How a [`Log`] lays out and buffers its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment is sealed and a new one started when the next entry would take it past
    /// this many bytes (a segment holds at least one entry, however large).
    pub segment_bytes_max: u64,
    /// Appended bytes are kept in memory until this many are waiting, then written to the
    /// file (not synced). `0` writes every append at once.
    pub write_buffer_bytes_max: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 64 << 20,
            write_buffer_bytes_max: 1 << 20,
        }
    }
}

impl LogConfig {
    fn check(&self) -> Result<()> {
        if self.segment_bytes_max < SEGMENT_BYTES_MIN {
            return Err(LogError::Config(format!(
                "segment_bytes_max = {} is below the minimum of {SEGMENT_BYTES_MIN}",
                self.segment_bytes_max
            )));
        }
        if self.write_buffer_bytes_max > WRITE_BUFFER_BYTES_LIMIT {
            return Err(LogError::Config(format!(
                "write_buffer_bytes_max = {} exceeds {WRITE_BUFFER_BYTES_LIMIT}",
                self.write_buffer_bytes_max
            )));
        }
        Ok(())
    }
}

/// What [`Log::open`] repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The torn tail cut from the newest segment, if there was one.
    pub torn_tail: Option<TornTail>,
}

/// Bytes at the end of the newest segment that were never completely synced, cut on open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Where the cut was made (the segment's new length).
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes_cut: u64,
    /// What was found at `offset`.
    pub reason: String,
}

/// One entry read back: its metadata and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Version, writer and timestamp.
    pub meta: EntryMeta,
    /// The bytes appended.
    pub payload: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Indexed {
    meta: EntryMeta,
    segment: u64,
    offset: u64,
    payload_len: usize,
}

#[derive(Debug)]
struct Segment {
    number: u64,
    path: PathBuf,
}

/// An append-only, versioned, checksummed log in one directory.
///
/// Appends are buffered; [`Log::sync`] writes what is buffered and makes every append
/// since the previous sync durable with one `fdatasync` (group commit), then advances
/// [`Log::persisted`]. One process owns a log directory at a time.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    /// Oldest first; never empty; the last is the active segment.
    segments: Vec<Segment>,
    /// Every entry of the segments, in version order.
    entries: Vec<Indexed>,
    /// The version of the last entry removed by [`Log::remove_segments_through`].
    floor: Option<Version>,
    active: File,
    /// Appended bytes not yet written to `active`; they belong at `written_end`.
    buffer: Vec<u8>,
    /// Bytes of the active segment handed to the operating system.
    written_end: u64,
    /// Bytes of the active segment known durable.
    synced_end: u64,
    /// `entries[..synced_entries]` are durable.
    synced_entries: usize,
    recovery: Recovery,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |source| LogError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}{SEGMENT_SUFFIX}"))
}

/// The segment files of the log in `dir`, oldest first: `(number, path)`. Other files
/// are ignored; a segment's name on something that is not a regular file (a directory,
/// a FIFO, which reading would block on) is [`LogError::Corrupt`] naming it.
pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for item in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let item = item.map_err(io_err("list", dir))?;
        let name = item.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SEGMENT_SUFFIX)) else {
            continue;
        };
        if let Ok(n) = stem.parse::<u64>() {
            let path = item.path();
            // Following a symbolic link, as reading it would.
            let kind = fs::metadata(&path)
                .map_err(io_err("stat", &path))?
                .file_type();
            if !kind.is_file() {
                use std::os::unix::fs::FileTypeExt;
                let what = if kind.is_dir() {
                    "directory"
                } else if kind.is_fifo() {
                    "FIFO"
                } else if kind.is_socket() {
                    "socket"
                } else {
                    "device"
                };
                return Err(LogError::Corrupt {
                    path,
                    offset: 0,
                    reason: format!("a segment's name on a {what}, not a regular file"),
                });
            }
            out.push((n, path));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Reads, without opening the log for writing, the entries of the log in `dir` whose
/// versions lie in `range`, oldest first: how another thread reads the history of a log
/// that its owner keeps appending to (DCPS's reads over history). Each segment is read
/// whole and verified as [`inspect_segment`](crate::inspect_segment) does; the bytes past
/// the last whole entry of a segment (an append under way) are left out, a segment that
/// retention removed meanwhile is skipped, and corruption is
/// [`LogError::Corrupt`] naming the file and offset.
pub fn read_entries(dir: &Path, range: impl RangeBounds<Version>) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (_, path) in list_segments(dir)? {
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        let report = scan::inspect_segment(&bytes, true);
        if let Some((offset, reason)) = report.corrupt {
            return Err(LogError::Corrupt {
                path,
                offset,
                reason,
            });
        }
        for e in report
            .entries
            .iter()
            .filter(|e| range.contains(&e.meta.version))
        {
            let at = e.offset as usize + HEADER_BYTES;
            // Invariant: inspect_segment reports only entries whose payload lies inside
            // `bytes` (it verified their checksum over it).
            out.push(Entry {
                meta: e.meta,
                payload: bytes[at..at + e.payload_len].to_vec(),
            });
        }
    }
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir))
}

/// Creates segment `number` with its header, durable with its directory entry.
fn create_segment(dir: &Path, number: u64) -> Result<(Segment, File)> {
    let path = segment_path(dir, number);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io_err("create", &path))?;
    file.write_all_at(&SEGMENT_MAGIC, 0)
        .map_err(io_err("write", &path))?;
    file.sync_data().map_err(io_err("fdatasync", &path))?;
    sync_dir(dir)?;
    Ok((Segment { number, path }, file))
}

impl Log {
    /// Opens the log in `dir`, creating the directory and a first segment if needed.
    ///
    /// Every segment is read and every checksum verified. A torn tail of the newest
    /// segment (an entry cut short or failing its checksum, with no later entry vouching
    /// that its bytes had been synced) is cut and reported in [`Log::recovery`]; anything
    /// else that does not verify is [`LogError::Corrupt`], naming file and offset, and
    /// nothing is changed. Everything found is synced before this returns, so it is all
    /// [`Log::persisted`].
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        config.check()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
        let numbers: Vec<u64> = list_segments(&dir)?.into_iter().map(|s| s.0).collect();
        let mut entries: Vec<Indexed> = Vec::new();
        let mut recovery = Recovery::default();
        let mut segments = Vec::new();
        let mut across = scan::Across::default();
        for (i, &number) in numbers.iter().enumerate() {
            let path = segment_path(&dir, number);
            let bytes = fs::read(&path).map_err(io_err("read", &path))?;
            let last = i + 1 == numbers.len();
            let scanned = scan::scan(&bytes, last).map_err(|c| LogError::Corrupt {
                path: path.clone(),
                offset: c.offset,
                reason: c.reason,
            })?;
            for found in &scanned.entries {
                let meta = found.decoded.meta;
                if let Err(reason) = across.entry(meta.version) {
                    return Err(LogError::Corrupt {
                        path,
                        offset: found.offset,
                        reason,
                    });
                }
                entries.push(Indexed {
                    meta,
                    segment: number,
                    offset: found.offset,
                    payload_len: found.decoded.payload_len,
                });
            }
            if let Some(why) = scanned.torn {
                recovery.torn_tail = Some(TornTail {
                    path: path.clone(),
                    offset: scanned.valid_end,
                    bytes_cut: bytes.len() as u64 - scanned.valid_end,
                    reason: why.to_string(),
                });
            }
            segments.push(Segment { number, path });
        }
        if let Some(seg) = segments.last() {
            // Refused before anything is changed.
            scan::Across::newest_segment(seg.number).map_err(|reason| LogError::Corrupt {
                path: seg.path.clone(),
                offset: 0,
                reason,
            })?;
        }
        let (active, end) = match segments.last() {
            None => {
                let (segment, file) = create_segment(&dir, 0)?;
                segments.push(segment);
                (file, SEGMENT_HEADER_BYTES)
            }
            Some(seg) => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&seg.path)
                    .map_err(io_err("open", &seg.path))?;
                let mut end = file.metadata().map_err(io_err("stat", &seg.path))?.len();
                if let Some(t) = &recovery.torn_tail {
                    file.set_len(t.offset)
                        .map_err(io_err("truncate", &seg.path))?;
                    end = t.offset;
                }
                if end < SEGMENT_HEADER_BYTES {
                    file.write_all_at(&SEGMENT_MAGIC, 0)
                        .map_err(io_err("write", &seg.path))?;
                    end = SEGMENT_HEADER_BYTES;
                }
                // What a killed process left in the page cache becomes durable here.
                file.sync_data().map_err(io_err("fdatasync", &seg.path))?;
                sync_dir(&dir)?;
                (file, end)
            }
        };
        let synced_entries = entries.len();
        Ok(Log {
            dir,
            config,
            segments,
            entries,
            floor: None,
            active,
            buffer: Vec::new(),
            written_end: end,
            synced_end: end,
            synced_entries,
            recovery,
        })
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What [`Log::open`] repaired.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// How many entries the log holds (appended and not truncated or removed).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many segment files the log has.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The version of the oldest entry held.
    pub fn first_version(&self) -> Option<Version> {
        self.entries.first().map(|e| e.meta.version)
    }

    /// The version of the last entry appended (the next append must be above it).
    pub fn last_version(&self) -> Option<Version> {
        self.entries.last().map(|e| e.meta.version).or(self.floor)
    }

    /// The persisted frontier: the last version made durable by a sync (every entry up to
    /// it survives a crash of the process or the machine).
    pub fn persisted(&self) -> Option<Version> {
        self.entries[..self.synced_entries]
            .last()
            .map(|e| e.meta.version)
            .or(self.floor)
    }

    /// Whether appends are waiting for a [`Log::sync`].
    pub fn has_unsynced(&self) -> bool {
        self.synced_entries < self.entries.len()
    }

    /// The metadata of every entry held, oldest first.
    pub fn metas(&self) -> impl ExactSizeIterator<Item = EntryMeta> + '_ {
        self.entries.iter().map(|e| e.meta)
    }

    /// Appends an entry. It is buffered (and written to the file once
    /// `write_buffer_bytes_max` bytes wait); it is durable after the next [`Log::sync`].
    /// Starting a new segment syncs the old one first.
    pub fn append(&mut self, meta: EntryMeta, payload: &[u8]) -> Result<()> {
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(LogError::PayloadTooLarge {
                len_bytes: payload.len(),
                max_bytes: PAYLOAD_BYTES_MAX,
            });
        }
        if let Some(last) = self.last_version() {
            if meta.version <= last {
                return Err(LogError::VersionNotIncreasing {
                    last,
                    given: meta.version,
                });
            }
        }
        let need = entry::entry_bytes(payload.len()) as u64;
        let active_len = self.written_end + self.buffer.len() as u64;
        if active_len > SEGMENT_HEADER_BYTES && active_len + need > self.config.segment_bytes_max {
            self.roll_over()?;
        }
        let offset = self.written_end + self.buffer.len() as u64;
        entry::encode(&meta, payload, self.synced_end, &mut self.buffer);
        self.entries.push(Indexed {
            meta,
            segment: self.active_number(),
            offset,
            payload_len: payload.len(),
        });
        if self.buffer.len() >= self.config.write_buffer_bytes_max {
            self.flush()?;
        }
        Ok(())
    }

    /// Makes every append so far durable with one `fdatasync` of the active segment and
    /// returns the new [`Log::persisted`] frontier. Does nothing when nothing is waiting.
    pub fn sync(&mut self) -> Result<Option<Version>> {
        if self.has_unsynced() || !self.buffer.is_empty() {
            self.flush()?;
            let path = &self.segments.last().expect("never empty").path;
            self.active.sync_data().map_err(io_err("fdatasync", path))?;
            self.synced_end = self.written_end;
            self.synced_entries = self.entries.len();
        }
        Ok(self.persisted())
    }

    /// Reads the entry of version `v`, if the log holds it.
    pub fn get(&mut self, v: Version) -> Result<Option<Entry>> {
        self.range(v..=v)?.next().transpose()
    }

    /// The entries whose versions lie in `range`, oldest first, read from the files (each
    /// checksum verified again). Buffered appends are written to the file first.
    pub fn range(&mut self, range: impl RangeBounds<Version>) -> Result<Entries<'_>> {
        self.flush()?;
        let from = match range.start_bound() {
            Bound::Included(v) => self.entries.partition_point(|e| e.meta.version < *v),
            Bound::Excluded(v) => self.entries.partition_point(|e| e.meta.version <= *v),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(v) => self.entries.partition_point(|e| e.meta.version <= *v),
            Bound::Excluded(v) => self.entries.partition_point(|e| e.meta.version < *v),
            Bound::Unbounded => self.entries.len(),
        };
        Ok(Entries {
            log: self,
            next: from,
            end: to.max(from),
            file: None,
        })
    }

    /// Removes every entry whose version is above `v` (the ragged trim on restart cuts
    /// what was logged but never committed), durably: the cut segment is truncated and
    /// synced, later segments are deleted. Returns how many entries were removed.
    pub fn truncate_after(&mut self, v: Version) -> Result<usize> {
        self.flush()?;
        let keep = self.entries.partition_point(|e| e.meta.version <= v);
        if keep == self.entries.len() {
            return Ok(0);
        }
        let cut = self.entries[keep];
        let removed = self.entries.len() - keep;
        while self.active_number() > cut.segment {
            let seg = self.segments.pop().expect("the cut segment stays");
            fs::remove_file(&seg.path).map_err(io_err("remove", &seg.path))?;
        }
        let seg = self.segments.last().expect("never empty");
        if seg.number != cut.segment {
            // Invariant: every entry's segment is held, so popping stops at the cut one.
            return Err(LogError::Corrupt {
                path: seg.path.clone(),
                offset: 0,
                reason: format!(
                    "segment {} of entry {} is missing",
                    cut.segment, cut.meta.version
                ),
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&seg.path)
            .map_err(io_err("open", &seg.path))?;
        file.set_len(cut.offset)
            .map_err(io_err("truncate", &seg.path))?;
        file.sync_data().map_err(io_err("fdatasync", &seg.path))?;
        sync_dir(&self.dir)?;
        self.active = file;
        self.entries.truncate(keep);
        self.written_end = cut.offset;
        self.synced_end = cut.offset;
        self.synced_entries = keep;
        Ok(removed)
    }

    /// Retention: deletes every sealed segment (never the active one) whose entries all
    /// have versions at or below `v`, oldest first, stopping at the first that holds a
    /// later entry. Returns how many entries went with them.
    pub fn remove_segments_through(&mut self, v: Version) -> Result<usize> {
        let mut gone_segments = 0;
        let mut gone_entries = 0;
        while gone_segments + 1 < self.segments.len() {
            let number = self.segments[gone_segments].number;
            let n = self.entries[gone_entries..]
                .iter()
                .take_while(|e| e.segment == number)
                .count();
            if n > 0 && self.entries[gone_entries + n - 1].meta.version > v {
                break;
            }
            gone_entries += n;
            gone_segments += 1;
        }
        if gone_segments == 0 {
            return Ok(0);
        }
        for seg in self.segments.drain(..gone_segments) {
            fs::remove_file(&seg.path).map_err(io_err("remove", &seg.path))?;
        }
        sync_dir(&self.dir)?;
        if gone_entries > 0 {
            self.floor = Some(self.entries[gone_entries - 1].meta.version);
        }
        self.entries.drain(..gone_entries);
        // Sealed segments are synced, so every removed entry was counted as synced.
        assert!(self.synced_entries >= gone_entries); // invariant: sealed ⇒ synced
        self.synced_entries -= gone_entries;
        Ok(gone_entries)
    }

    /// Writes what is buffered and syncs it; the log stays usable. Dropping a log without
    /// this hands buffered appends to the operating system without syncing them.
    pub fn close(mut self) -> Result<Option<Version>> {
        self.sync()
    }

    /// The simulated crash of the process and its machine, for the crash tests (the
    /// normal path never calls it, and it costs nothing there): the log is gone without
    /// a sync, and its newest segment — the only file holding unsynced bytes, since sealed
    /// segments, truncations and removals are synced when they happen — keeps its synced
    /// bytes, then the first `torn.kept_bytes` of the unsynced ones (written or still
    /// buffered), then `torn.garbage`. [`Log::open`] on the directory then sees what a
    /// real disk could show after a power failure at this point.
    pub fn crash(mut self, torn: &TornWrite) -> Result<CrashImage> {
        let path = self.segments.last().expect("never empty").path.clone();
        let mut unsynced = vec![0; (self.written_end - self.synced_end) as usize];
        self.active
            .read_exact_at(&mut unsynced, self.synced_end)
            .map_err(io_err("read", &path))?;
        unsynced.append(&mut self.buffer); // emptied: Drop writes nothing more
        let kept = (torn.kept_bytes as usize).min(unsynced.len());
        let mut tail = unsynced[..kept].to_vec();
        tail.extend_from_slice(&torn.garbage);
        self.active
            .set_len(self.synced_end)
            .map_err(io_err("truncate", &path))?;
        self.active
            .write_all_at(&tail, self.synced_end)
            .map_err(io_err("write", &path))?;
        Ok(CrashImage {
            path,
            synced_bytes: self.synced_end,
            unsynced_bytes: unsynced.len() as u64,
            len_bytes: self.synced_end + tail.len() as u64,
        })
    }

    fn active_number(&self) -> u64 {
        self.segments.last().expect("never empty").number
    }

    fn flush(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let path = &self.segments.last().expect("never empty").path;
        self.active
            .write_all_at(&self.buffer, self.written_end)
            .map_err(io_err("write", path))?;
        self.written_end += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Seals the active segment (synced in full, so only the newest segment can ever hold
    /// a torn tail) and starts the next.
    fn roll_over(&mut self) -> Result<()> {
        self.sync()?;
        let active = self.segments.last().expect("never empty");
        // Invariant: `Log::open` refuses a segment numbered u64::MAX, and numbers grow by
        // one per segment, so this never fails in practice; an error, never a wrap.
        let next = active
            .number
            .checked_add(1)
            .ok_or_else(|| LogError::Corrupt {
                path: active.path.clone(),
                offset: 0,
                reason: "the last segment number; no next segment can be created".into(),
            })?;
        let (segment, file) = create_segment(&self.dir, next)?;
        self.segments.push(segment);
        self.active = file;
        self.written_end = SEGMENT_HEADER_BYTES;
        self.synced_end = SEGMENT_HEADER_BYTES;
        Ok(())
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // Best effort, not a sync: a dropped log's buffered appends reach the page cache.
        let _ = self.flush();
    }
}

/// What a simulated crash leaves of the bytes a [`Log`] had not synced: the simulated
/// disk of the crash tests ([`Log::crash`]). A real disk keeps every synced byte, and of
/// the bytes written or buffered after the last sync some prefix, possibly followed by
/// bytes that never belonged there (a torn page).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TornWrite {
    /// How many of the unsynced bytes (in append order) survive; clamped to how many
    /// there are. `0`: every write not synced is lost.
    pub kept_bytes: u64,
    /// Bytes found after the kept ones (garbage from a torn write), possibly empty.
    pub garbage: Vec<u8>,
}

/// What [`Log::crash`] did to the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashImage {
    /// The newest segment file.
    pub path: PathBuf,
    /// Its length that was durable (synced).
    pub synced_bytes: u64,
    /// How many unsynced bytes there were (written to the file or still buffered).
    pub unsynced_bytes: u64,
    /// Its length now: synced, plus the kept unsynced bytes, plus the garbage.
    pub len_bytes: u64,
}

/// The entries of a [`Log::range`], read from the segment files in order.
#[derive(Debug)]
pub struct Entries<'a> {
    log: &'a Log,
    next: usize,
    end: usize,
    file: Option<(u64, File)>,
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.next >= self.end {
            return None;
        }
        let at = self.log.entries[self.next];
        self.next += 1;
        Some(self.read(at))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl Entries<'_> {
    fn read(&mut self, at: Indexed) -> Result<Entry> {
        let path = segment_path(&self.log.dir, at.segment);
        if self.file.as_ref().map(|f| f.0) != Some(at.segment) {
            let f = File::open(&path).map_err(io_err("open", &path))?;
            self.file = Some((at.segment, f));
        }
        let (_, file) = self.file.as_ref().expect("just opened");
        let mut bytes = vec![0; HEADER_BYTES + at.payload_len];
        file.read_exact_at(&mut bytes, at.offset)
            .map_err(io_err("read", &path))?;
        let corrupt = |reason: String| LogError::Corrupt {
            path: path.clone(),
            offset: at.offset,
            reason,
        };
        // Padding is not read: decode only needs header and payload.
        let mut padded = bytes;
        padded.resize(entry::entry_bytes(at.payload_len), 0);
        let d = entry::decode(&padded).map_err(|why| corrupt(format!("{why} on read")))?;
        if d.meta != at.meta {
            return Err(corrupt("entry changed since the log was opened".into()));
        }
        Ok(Entry {
            meta: d.meta,
            payload: entry::payload_of(&padded, &d),
        })
    }
}
