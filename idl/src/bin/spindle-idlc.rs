//! `spindle-idlc`: compiles IDL files into Rust source files.
//!
//! `spindle-idlc topics/idl/avionics.idl --out generated/ -I topics/idl`
//! writes `generated/avionics.rs`. On an error it prints `file:line:col: error: ...` with
//! the offending line and a caret, and exits with code 1.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Compile OMG IDL into Rust types implementing spindle_topics::TopicType.
#[derive(Debug, Parser)]
#[command(name = "spindle-idlc", version)]
struct Args {
    /// IDL files to compile (one .rs file each).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output directory.
    #[arg(short, long, default_value = ".")]
    out: PathBuf,
    /// Include directory for `#include` (repeatable).
    #[arg(short = 'I', long = "include")]
    include: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = spindle_idl::Builder::new()
        .out_dir(&args.out)
        .emit_rerun_if_changed(false)
        .compile(&args.files, &args.include);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
