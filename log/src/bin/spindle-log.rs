//! `spindle-log`: inspect a logged store's log offline, without changing it.
//!
//! ```text
//! spindle-log inspect DIR [--payloads]   every entry: segment, offset, version, writer,
//!                                        time, length, CRC; then torn tails and corruption
//! spindle-log verify DIR                 exit 0: opens clean; 3: a torn tail (open would
//!                                        cut it); 4: corrupt (open would refuse it)
//! ```
//!
//! DIR is one log's directory (a data directory's `subgroup-<id>`).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use spindle_log::{inspect_segment, list_segments};

const USAGE: &str = "usage: spindle-log inspect DIR [--payloads] | spindle-log verify DIR";
/// Payload bytes shown per entry with --payloads.
const PAYLOAD_SHOWN_BYTES_MAX: usize = 32;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, dir) = match (args.first(), args.get(1)) {
        (Some(c), Some(d)) => (c.as_str(), Path::new(d)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let payloads = args.iter().any(|a| a == "--payloads");
    match cmd {
        // A closed stdout (`| head`) ends the listing quietly.
        "inspect" | "verify" => run(dir, cmd == "inspect", payloads).unwrap_or(ExitCode::SUCCESS),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(dir: &Path, list: bool, payloads: bool) -> std::io::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut o = stdout.lock();
    let segments = match list_segments(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("spindle-log: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if list {
        writeln!(
            o,
            "segment offset version writer time_us time_utc len crc32 synced_end"
        )?;
    }
    let (mut entries, mut torn, mut corrupt) = (0usize, false, false);
    for (i, (number, path)) in segments.iter().enumerate() {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("spindle-log: read {}: {e}", path.display());
                return Ok(ExitCode::from(1));
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
                    let at = e.offset as usize + spindle_log::HEADER_BYTES;
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
        ExitCode::from(4)
    } else if torn {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
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
