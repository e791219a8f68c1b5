//! The command line of `spindle-rtps-bridge` (also run by `interop-tests`' `interop-bridge`).
//!
//! `spindle-rtps-bridge CONFIG.toml` runs a bridge until its standard input closes (or
//! reads a line `stop`) or Ctrl-C or SIGTERM arrives (then it exits 130; a second one
//! exits at once), then lingers for reliable delivery, prints its counters and leaves
//! its Spindle domain (a view change without it, never a crash to the others). It
//! prints `READY` on standard output once every reader and writer exists, and
//! `STATS into_spindle=… into_rtps=… skipped_own=… dropped=… rtps_gaps=…
//! handshake_timeouts=… unacked_at_stop=…` when it stops (`rtps_gaps`: sequence numbers of
//! RTPS writers that never reached it; the last two: handshakes with new RTPS readers and
//! lingers at stop that ran to their bounds without every acknowledgment); in between,
//! `MATCHED rtps_readers=N` whenever the number of RTPS readers matched with its writers
//! changes (a volatile RTPS reader gets only what is written after it matched),
//! `MATCHED rtps_writers=N` whenever the number of RTPS writers its readers know changes,
//! `BRIDGES N` whenever it learns of another bridge in its Spindle domain, and
//! `LOST rtps_gaps=N` whenever the count of RTPS samples that never reached it grows (a
//! reliable RTPS writer that outran the bridge: RustDDS's reader acknowledges on receipt
//! and cannot push back, so the loss is reported as it happens). Warnings (a refused
//! write, a sample not forwarded, a gap) go to standard error (`RUST_LOG` filters them).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spindle_dds_core::ParticipantConfig;

use crate::{Bridge, BridgeConfig};

/// How often the matched-readers count is looked at.
pub const MATCH_WATCH_MS: u64 = 20;

/// Runs the command line `args` (without the program name).
pub fn main_with_args(args: &[String]) -> ExitCode {
    main_named("spindle-rtps-bridge", args)
}

/// As [`main_with_args`], naming itself `program` in its messages (`spindle bridge`).
pub fn main_named(program: &str, args: &[String]) -> ExitCode {
    // The bridge's warnings (a refused write, a sample it could not forward) to stderr;
    // `RUST_LOG` overrides. A caller that set up its own subscriber (`spindle bridge`)
    // keeps it.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
    let [path] = args else {
        eprintln!("usage: {program} CONFIG.toml");
        return ExitCode::from(2);
    };
    let cfg = match BridgeConfig::from_toml_file(&PathBuf::from(path)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{program}: {e}");
            return ExitCode::from(2);
        }
    };
    let spindle_cfg = match ParticipantConfig::from_toml_file(&cfg.spindle_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{program}: {e}");
            return ExitCode::from(2);
        }
    };
    let program_owned = program.to_string();
    let bridge = match Bridge::start(&cfg, &spindle_cfg) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{program}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("READY");
    let _ = std::io::stdout().flush();
    // Report each change of the matched RTPS readers: `MATCHED rtps_readers=N`.
    let stats = bridge.stats_handle();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let (mut last, mut last_bridges, mut last_writers) = (0i64, 0i64, 0i64);
            let mut last_gaps = 0u64;
            while !done.load(Ordering::Relaxed) {
                let now = stats.rtps_readers_matched.load(Ordering::Relaxed);
                if now != last {
                    println!("MATCHED rtps_readers={now}");
                    let _ = std::io::stdout().flush();
                    last = now;
                }
                let writers = stats.rtps_writers_matched.load(Ordering::Relaxed);
                if writers != last_writers {
                    println!("MATCHED rtps_writers={writers}");
                    let _ = std::io::stdout().flush();
                    last_writers = writers;
                }
                let gaps = stats.rtps_gaps.load(Ordering::Relaxed);
                if gaps != last_gaps {
                    println!("LOST rtps_gaps={gaps}");
                    let _ = std::io::stdout().flush();
                    last_gaps = gaps;
                }
                let bridges = stats.bridges_known.load(Ordering::Relaxed);
                if bridges != last_bridges {
                    println!("BRIDGES {bridges}");
                    let _ = std::io::stdout().flush();
                    last_bridges = bridges;
                }
                std::thread::sleep(Duration::from_millis(MATCH_WATCH_MS));
            }
        })
    };
    // Stops on `stop`, the end of standard input, or the first Ctrl-C or SIGTERM (a
    // second one exits at once); the bridge then leaves its Spindle domain.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<bool>();
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (tx, interrupted) = (stop_tx.clone(), Arc::clone(&interrupted));
        let installed = ctrlc::set_handler(move || {
            if interrupted.swap(true, Ordering::AcqRel) {
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
            eprintln!("{program_owned}: stopping: leaving the domain (again to quit at once)");
            let _ = tx.send(true);
        });
        if let Err(e) = installed {
            eprintln!("{program}: Ctrl-C will not leave the domain cleanly: {e}");
        }
    }
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l.trim() == "stop" => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = stop_tx.send(false);
    });
    let by_signal = stop_rx.recv().unwrap_or(false);
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let s = bridge.stop();
    println!(
        "STATS into_spindle={} into_rtps={} skipped_own={} dropped={} rtps_gaps={} \
         handshake_timeouts={} unacked_at_stop={}",
        s.into_spindle,
        s.into_rtps,
        s.skipped_own,
        s.dropped,
        s.rtps_gaps,
        s.handshake_timeouts,
        s.unacked_at_stop
    );
    if by_signal {
        ExitCode::from(EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    }
}

/// Exit code after Ctrl-C or SIGTERM (128 + SIGINT, as shells report it), as `spindle`'s
/// other commands use.
pub const EXIT_INTERRUPTED: u8 = 130;
