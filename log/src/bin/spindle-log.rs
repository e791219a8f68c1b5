//! `spindle-log`: inspect a logged store's log offline, without changing it.
//!
//! ```text
//! spindle-log inspect DIR [--payloads]   every entry: segment, offset, version, writer,
//!                                        time, length, CRC; then torn tails and corruption
//! spindle-log verify DIR                 exit 0: opens clean; 1: unreadable, or no
//!                                        segment there; 3: a torn tail (open would cut
//!                                        it); 4: corrupt (open would refuse it)
//! ```
//!
//! DIR is one log's directory (a data directory's `subgroup-<id>`).

use std::path::Path;
use std::process::ExitCode;

use spindle_log::report::report;

const USAGE: &str = "usage: spindle-log inspect DIR [--payloads] | spindle-log verify DIR";

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
        "inspect" | "verify" => {
            let mut out = std::io::stdout().lock();
            report("spindle-log", dir, cmd == "inspect", payloads, &mut out)
                .map_or(ExitCode::SUCCESS, |v| ExitCode::from(v.exit_code()))
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
