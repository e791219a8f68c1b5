//! `spindle-rtps-bridge CONFIG.toml`: runs a bridge until its standard input closes (or
//! reads a line `stop`), then lingers for reliable delivery and prints its counters.
//!
//! Prints `READY` on standard output once every reader and writer exists, and
//! `STATS into_spindle=… into_rtps=… skipped_own=… dropped=…` when it stops.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

use spindle_dds_core::ParticipantConfig;
use spindle_rtps_bridge::{Bridge, BridgeConfig};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        eprintln!("usage: spindle-rtps-bridge CONFIG.toml");
        return ExitCode::from(2);
    };
    let cfg = match BridgeConfig::from_toml_file(&PathBuf::from(path)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spindle-rtps-bridge: {e}");
            return ExitCode::from(2);
        }
    };
    let spindle_cfg = match ParticipantConfig::from_toml_file(&cfg.spindle_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spindle-rtps-bridge: {e}");
            return ExitCode::from(2);
        }
    };
    let bridge = match Bridge::start(&cfg, &spindle_cfg) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("spindle-rtps-bridge: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("READY");
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(l) if l.trim() == "stop" => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let s = bridge.stop();
    println!(
        "STATS into_spindle={} into_rtps={} skipped_own={} dropped={}",
        s.into_spindle, s.into_rtps, s.skipped_own, s.dropped
    );
    ExitCode::SUCCESS
}
