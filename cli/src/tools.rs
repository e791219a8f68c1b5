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
    #[arg(long, value_name = "TYPE", conflicts_with = "types")]
    pub template: Option<String>,
}

/// Runs `spindle idl`.
pub fn run_idl(a: IdlArgs) -> Result<u8, Fail> {
    if let Some(t) = &a.template {
        println!("{}", template(&a, t)?);
        return Ok(0);
    }
    if a.types {
        // A type several files define (one including another) is listed once.
        let mut seen = std::collections::BTreeSet::new();
        for f in &a.files {
            let lib = spindle_idl::types::TypeLibrary::from_file(f, &a.include)
                .map_err(|e| Fail::input(e.to_string()))?;
            for n in lib.struct_names() {
                if seen.insert(n.to_string()) {
                    println!("{n}");
                }
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

/// The JSON template of type `t`, from whichever of the files defines it: refused if
/// none does (naming the structs they define), or if two define it differently.
fn template(a: &IdlArgs, t: &str) -> Result<String, Fail> {
    let mut found: Vec<(&PathBuf, serde_json::Value)> = Vec::new();
    let mut known = Vec::new();
    for f in &a.files {
        let lib = spindle_idl::types::TypeLibrary::from_file(f, &a.include)
            .map_err(|e| Fail::input(e.to_string()))?;
        match DynType::new(std::sync::Arc::new(lib), t) {
            Ok(dt) => {
                let zero = dt
                    .zero_json()
                    .map_err(|e| Fail::input(format!("{}: {e}", f.display())))?;
                found.push((f, zero));
            }
            Err(spindle_dynamic::Error::UnknownType { known: k, .. }) => known.push(k),
            Err(e) => return Err(Fail::input(format!("{}: {e}", f.display()))),
        }
    }
    let Some((first, zero)) = found.first() else {
        let known: Vec<&str> = known.iter().flat_map(|k| k.split(", ")).collect();
        return Err(Fail::input(format!(
            "no struct {t} in the IDL; it defines: {}",
            known.join(", ")
        )));
    };
    // One included by another gives the same type twice: the same template.
    if let Some((other, _)) = found.iter().find(|(_, z)| z != zero) {
        return Err(Fail::input(format!(
            "{t} is defined differently in {} and {}: give one of them",
            first.display(),
            other.display()
        )));
    }
    serde_json::to_string_pretty(zero).map_err(|e| Fail::failed(e.to_string()))
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
