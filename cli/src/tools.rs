//! `spindle idl` and `spindle log`: the IDL compiler and the log inspector.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use spindle_dynamic::DynType;

use crate::Fail;

/// `spindle idl`.
#[derive(Debug, Args)]
pub struct IdlArgs {
    /// IDL files (one .rs file each is written to --out).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory of the generated Rust.
    #[arg(short, long, default_value = ".")]
    pub out: PathBuf,
    /// Include directory for `#include` (repeatable).
    #[arg(short = 'I', long = "include")]
    pub include: Vec<PathBuf>,
    /// Instead of compiling: list the structs the files define (a topic's type is one).
    #[arg(long)]
    pub types: bool,
    /// Instead of compiling: print a JSON sample of this type with every member at its
    /// zero, to edit and give to `spindle pub`.
    #[arg(long, value_name = "TYPE")]
    pub template: Option<String>,
}

/// Runs `spindle idl`.
pub fn run_idl(a: IdlArgs) -> Result<u8, Fail> {
    if let Some(t) = &a.template {
        for f in &a.files {
            let dt = DynType::from_idl_file(f, &a.include, t)?;
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &dt.zero_json()
                        .map_err(|e| Fail::input(format!("{}: {e}", f.display())))?
                )
                .map_err(|e| Fail::failed(e.to_string()))?
            );
        }
        return Ok(0);
    }
    if a.types {
        for f in &a.files {
            let lib = spindle_idl::types::TypeLibrary::from_file(f, &a.include)
                .map_err(|e| Fail::input(e.to_string()))?;
            for n in lib.struct_names() {
                println!("{n}");
            }
        }
        return Ok(0);
    }
    spindle_idl::Builder::new()
        .out_dir(&a.out)
        .emit_rerun_if_changed(false)
        .compile(&a.files, &a.include)
        .map_err(|e| Fail::input(e.to_string()))?;
    Ok(0)
}

/// `spindle log`.
#[derive(Debug, Args)]
pub struct LogArgs {
    #[command(subcommand)]
    pub cmd: LogCmd,
}

/// What to do with a log.
#[derive(Debug, Subcommand)]
pub enum LogCmd {
    /// List every entry (segment, offset, version, writer, time, length, CRC), then torn
    /// tails and corruption. Exit 0 clean, 1 unreadable or no segment there, 3 torn tail,
    /// 4 corrupt.
    Inspect {
        /// One log's directory (a data directory's `subgroup-<id>`).
        dir: PathBuf,
        /// Also show each entry's first payload bytes.
        #[arg(long)]
        payloads: bool,
    },
    /// Check the log without listing it, as `inspect` does. Exit 0 clean, 1 unreadable or
    /// no segment there, 3 torn tail, 4 corrupt.
    Verify {
        /// One log's directory.
        dir: PathBuf,
    },
}

/// Runs `spindle log`.
pub fn run_log(a: LogArgs) -> Result<u8, Fail> {
    let (dir, list, payloads) = match &a.cmd {
        LogCmd::Inspect { dir, payloads } => (dir, true, *payloads),
        LogCmd::Verify { dir } => (dir, false, false),
    };
    let mut out = std::io::stdout().lock();
    // A closed stdout (`| head`) ends the listing quietly.
    Ok(
        spindle_log::report::report("spindle log", dir, list, payloads, &mut out)
            .map_or(0, |v| v.exit_code()),
    )
}
