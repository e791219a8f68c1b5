//! The offline inspector behind `spindle-log` and `spindle log`: lists a log's entries
//! and reports torn tails and corruption without changing a byte.

use std::io::Write;
use std::path::Path;

use crate::{inspect_segment, list_segments};

/// Payload bytes shown per entry with `payloads`.
pub const PAYLOAD_SHOWN_BYTES_MAX: usize = 32;

/// What [`report`] found: the exit status of `spindle-log verify` / `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Opens clean (exit 0).
    Clean,
    /// The directory or a segment could not be read, or the directory holds no segment
    /// (exit 1; the reason went to stderr).
    Unreadable,
    /// A torn tail that open would cut (exit 3).
    Torn,
    /// Corrupt: open would refuse it (exit 4).
    Corrupt,
}

impl Verdict {
    /// The process exit code the command line tools use.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Clean => 0,
            Verdict::Unreadable => 1,
            Verdict::Torn => 3,
            Verdict::Corrupt => 4,
        }
    }
}

/// Reads the log in `dir` and writes the report to `o`: with `list`, every entry
/// (segment, offset, version, writer, time, length, CRC, synced end) and, with `payloads`,
/// its first bytes; then torn tails, corruption and a summary line. Read errors are
/// printed to stderr with `prog` and give [`Verdict::Unreadable`]; an error writing `o`
/// is returned (a closed pipe ends the listing).
pub fn report(
    prog: &str,
    dir: &Path,
    list: bool,
    payloads: bool,
    o: &mut dyn Write,
) -> std::io::Result<Verdict> {
    let segments = match list_segments(dir) {
        Ok(s) => s,
        Err(crate::LogError::Corrupt {
            path,
            offset,
            reason,
        }) => {
            writeln!(o, "corrupt: {} at byte {offset}: {reason}", path.display())?;
            return Ok(Verdict::Corrupt);
        }
        Err(e) => {
            eprintln!("{prog}: {e}");
            return Ok(Verdict::Unreadable);
        }
    };
    if list {
        writeln!(
            o,
            "segment offset version writer time_us time_utc len crc32 synced_end"
        )?;
    }
    if segments.is_empty() {
        // Open would start a new log here; a check of nothing is not a clean log.
        eprintln!(
            "{prog}: no log segments (NUMBER.seg) in {}: a participant keeps one log per \
             topic subgroup, in the subgroup-N directories of its data_dir",
            dir.display()
        );
        return Ok(Verdict::Unreadable);
    }
    let (mut entries, mut torn, mut corrupt) = (0usize, false, false);
    let mut across = Some(crate::scan::Across::default());
    for (i, (number, path)) in segments.iter().enumerate() {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{prog}: read {}: {e}", path.display());
                return Ok(Verdict::Unreadable);
            }
        };
        let report = inspect_segment(&bytes, i + 1 == segments.len());
        entries += report.entries.len();
        if list {
            for e in &report.entries {
                writeln!(
                    o,
                    "{number} {} {} {} {} {} {} {:08x} {}",
                    e.offset,
                    e.meta.version,
                    e.meta.writer,
                    e.meta.timestamp_us,
                    utc(e.meta.timestamp_us),
                    e.payload_len,
                    e.crc,
                    e.synced_end
                )?;
                if payloads {
                    let at = e.offset as usize + crate::HEADER_BYTES;
                    let n = e.payload_len.min(PAYLOAD_SHOWN_BYTES_MAX);
                    let hex: String = bytes[at..at + n]
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    writeln!(
                        o,
                        "  payload {hex}{}",
                        if n < e.payload_len { "…" } else { "" }
                    )?;
                }
            }
        }
        if let Some(why) = &report.torn {
            torn = true;
            writeln!(
                o,
                "torn tail: {} from byte {} ({} bytes): {why}",
                path.display(),
                report.valid_end,
                bytes.len() as u64 - report.valid_end
            )?;
        }
        if let Some((offset, why)) = &report.corrupt {
            corrupt = true;
            writeln!(o, "corrupt: {} at byte {offset}: {why}", path.display())?;
        }
        // What open checks across segments; the first failure is reported (open stops
        // there).
        let mut fail = across.as_mut().and_then(|a| {
            report
                .entries
                .iter()
                .find_map(|e| a.entry(e.meta.version).err().map(|why| (e.offset, why)))
        });
        if fail.is_none() && across.is_some() && i + 1 == segments.len() {
            fail = crate::scan::Across::newest_segment(*number)
                .err()
                .map(|why| (0, why));
        }
        if let Some((offset, why)) = fail {
            corrupt = true;
            across = None;
            writeln!(o, "corrupt: {} at byte {offset}: {why}", path.display())?;
        }
    }
    writeln!(
        o,
        "{} segments, {entries} valid entries{}",
        segments.len(),
        if corrupt {
            ", CORRUPT"
        } else if torn {
            ", torn tail"
        } else {
            ", clean"
        }
    )?;
    Ok(if corrupt {
        Verdict::Corrupt
    } else if torn {
        Verdict::Torn
    } else {
        Verdict::Clean
    })
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for microseconds since the Unix epoch (the proleptic
/// Gregorian calendar; Howard Hinnant's days-to-civil algorithm).
fn utc(us: u64) -> String {
    let secs = us / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        us % 1_000_000
    )
}
