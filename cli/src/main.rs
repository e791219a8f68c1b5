//! `spindle`: Spindle DDS from the command line.
//!
//! ```text
//! spindle sub --config node1.toml --idl avionics.idl --type Avionics::AirData --topic AirData
//! spindle pub --config node2.toml --idl avionics.idl --type Avionics::AirData --topic AirData \
//!     --rate 10 '{"aircraft_id": 1, ...}'
//! spindle idl avionics.idl --out generated/       (the compiler, as spindle-idlc)
//! spindle idl avionics.idl --template Avionics::AirData
//! spindle log inspect DIR | spindle log verify DIR
//! spindle status --config node3.toml --watch --topic AirData
//! spindle perf --transport shm --level atomic --size 1024 --samples 100000 --min-rate 1e5
//! spindle status --config node3.toml --watch --metrics 127.0.0.1:9464
//! spindle bridge bridge.toml                      (the RTPS bridge, as spindle-rtps-bridge)
//! ```
//!
//! `RUST_LOG` filters the engine's and DCPS's tracing events onto stderr
//! (`RUST_LOG=spindle_group=info spindle sub …` shows every view installed).
//!
//! Exit codes: 0 done; 1 failed (a criterion not met, a timeout, the domain failed);
//! 2 bad usage or input (arguments, configuration, IDL, JSON, type names); 130 stopped by
//! Ctrl-C or SIGTERM (`pub`, `sub` and `status` leave the domain first; a second one
//! exits at once).

mod domain;
mod interrupt;
mod perf;
mod pubsub;
mod scrape;
mod status;
mod sweep;
mod tools;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Spindle DDS from the command line: publish and subscribe with types read from IDL at
/// run time, compile IDL, inspect logs.
#[derive(Debug, Parser)]
#[command(name = "spindle", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write samples given as JSON (arguments, a file or stdin) to a topic, at a rate.
    Pub(pubsub::PubArgs),
    /// Read a topic and print each sample as a JSON line with its SampleInfo.
    Sub(pubsub::SubArgs),
    /// Compile IDL into Rust (as spindle-idlc), list its types or print a JSON template.
    Idl(tools::IdlArgs),
    /// Inspect or verify a logged store's log offline (as spindle-log).
    Log(tools::LogArgs),
    /// Throughput, latency or round trip between two processes (as dds_perf), with
    /// pass/fail criteria (--min-rate, --max-p99: exit 1 when not met).
    Perf(perf::PerfArgs),
    /// The domain as a member sees it: the view (members, leader), subgroups, topics with
    /// their readers and writers, counters (its own, and others' --metrics endpoints);
    /// --watch follows changes and shows rates.
    Status(status::StatusArgs),
    /// Bridge a Spindle domain and an RTPS (standard DDS) domain, as spindle-rtps-bridge:
    /// prints READY once its readers and writers exist, runs until stdin closes or reads
    /// `stop`, then prints its STATS.
    Bridge(BridgeArgs),
}

/// `spindle bridge`.
#[derive(Debug, clap::Args)]
struct BridgeArgs {
    /// The bridge's TOML file (`[rtps]`, `[spindle] config = …`, `[[topic]]`).
    config: std::path::PathBuf,
}

/// Why a command failed, and the exit code that says so.
#[derive(Debug)]
pub struct Fail {
    /// 1: failed (a criterion, a timeout, the domain); 2: bad usage or input.
    pub code: u8,
    /// The message for stderr.
    pub message: String,
}

/// Exit code of a failed run (criterion not met, time-out, domain error).
pub const EXIT_FAILED: u8 = 1;
/// Exit code of bad usage or input.
pub const EXIT_BAD_INPUT: u8 = 2;

impl Fail {
    /// A failed run (exit 1).
    pub fn failed(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }

    /// Bad usage or input (exit 2).
    pub fn input(message: impl Into<String>) -> Fail {
        Fail {
            code: EXIT_BAD_INPUT,
            message: message.into(),
        }
    }
}

/// Errors of types from outside (IDL, JSON) are bad input.
impl From<spindle_dynamic::Error> for Fail {
    fn from(e: spindle_dynamic::Error) -> Fail {
        Fail::input(e.to_string())
    }
}

/// Errors of the domain are failures, except configuration errors, which are bad input.
impl From<spindle_dds_core::Error> for Fail {
    fn from(e: spindle_dds_core::Error) -> Fail {
        match e {
            spindle_dds_core::Error::Config(_)
            | spindle_dds_core::Error::BadParameter(_)
            | spindle_dds_core::Error::InconsistentPolicy(_) => Fail::input(e.to_string()),
            other => Fail::failed(other.to_string()),
        }
    }
}

/// The tracing filter when `RUST_LOG` is not set: warnings and errors only.
const LOG_FILTER_DEFAULT: &str = "warn";

/// Sends the engine's and DCPS's tracing events (view changes, suspicions, state
/// transfer …) to stderr, filtered by `RUST_LOG` (e.g. `RUST_LOG=spindle_group=info`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(LOG_FILTER_DEFAULT));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    if matches!(cli.cmd, Cmd::Pub(_) | Cmd::Sub(_) | Cmd::Status(_)) {
        interrupt::install();
    }
    let r = match cli.cmd {
        Cmd::Pub(a) => pubsub::run_pub(a),
        Cmd::Sub(a) => pubsub::run_sub(a),
        Cmd::Idl(a) => tools::run_idl(a),
        Cmd::Log(a) => tools::run_log(a),
        Cmd::Perf(a) => perf::run_perf(a),
        Cmd::Status(a) => status::run_status(a),
        Cmd::Bridge(a) => {
            let args = [a.config.to_string_lossy().into_owned()];
            return spindle_rtps_bridge::cli::main_named("spindle bridge", &args);
        }
    };
    match r {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("spindle: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
