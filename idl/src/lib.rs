//! # spindle-idl — the IDL compiler
//!
//! Turns OMG IDL 4.2 data definitions (modules, structs with inheritance, enums, unions,
//! typedefs, constants, bounded/unbounded strings and sequences, arrays, the usual
//! annotations) into Rust types implementing `spindle_topics::TopicType`.
//!
//! Three ways to use it, like `prost-build`:
//!
//! * from a build script: `spindle_idl::Builder::new().compile(&["idl/x.idl"], &["idl"])`
//!   writes `x.rs` into `OUT_DIR` (and prints `cargo:rerun-if-changed` for every file read);
//!   the crate then does `include!(concat!(env!("OUT_DIR"), "/x.rs"));`
//! * the `spindle-idlc` binary: `spindle-idlc x.idl --out generated/ -I idl`;
//! * in memory: [`generate`];
//! * at run time, without generating code: [`types::TypeLibrary`] (the resolved types of a
//!   file, for `spindle-dynamic`).
//!
//! The generated code needs `spindle-topics` and `serde` as dependencies. Each output file
//! is self-contained: it holds the definitions of its IDL file and of everything that
//! file includes.
//!
//! Errors point at the source: `file:line:col: error: what`, the line, and a caret:
//!
//! ```
//! let err = spindle_idl::generate("x.idl", "struct S { long x };", &[] as &[&str]).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "x.idl:1:19: error: expected `;` after the member declaration, found `}`\n\
//!      struct S { long x };\n                  ^"
//! );
//! ```
//!
//! Not supported (each a clear error): `fixed`, `map`, `@mutable`, interfaces
//! and other non-data constructs, function-like macros.
#![deny(missing_docs)]

mod ast;
mod codegen;
mod error;
mod lexer;
mod parser;
pub mod types;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use error::{Diagnostic, Error, Result};

/// Compiles IDL files into Rust modules (one `.rs` file per IDL file).
#[derive(Debug, Clone, Default)]
pub struct Builder {
    out_dir: Option<PathBuf>,
    rerun_lines: bool,
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// Output file name (`avionics.rs` for `avionics.idl`).
    pub file_name: String,
    /// The Rust source.
    pub code: String,
    /// Every file read (the IDL file and its includes).
    pub inputs: Vec<PathBuf>,
}

impl Builder {
    /// A builder writing into `OUT_DIR` and printing `cargo:rerun-if-changed` lines.
    pub fn new() -> Self {
        Builder {
            out_dir: None,
            rerun_lines: true,
        }
    }

    /// Writes into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed=<file>` for every file read (default on).
    pub fn emit_rerun_if_changed(mut self, on: bool) -> Self {
        self.rerun_lines = on;
        self
    }

    /// Compiles `files`, searching `include_dirs` for `#include`s, and writes one `.rs`
    /// file per IDL file. Pass `&[] as &[&str]` for no include directories.
    pub fn compile<P: AsRef<Path>, Q: AsRef<Path>>(
        &self,
        files: &[P],
        include_dirs: &[Q],
    ) -> Result<()> {
        let out_dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or(Error::NoOutDir)?,
        };
        if out_dir.exists() && !out_dir.is_dir() {
            return Err(Error::Io {
                path: out_dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "exists and is not a directory: the output directory must be one",
                ),
            });
        }
        std::fs::create_dir_all(&out_dir).map_err(|source| Error::Io {
            path: out_dir.clone(),
            source,
        })?;
        // Two inputs whose output files would have one name (the same file name in two
        // directories): the second would overwrite the first.
        let mut written: BTreeMap<String, PathBuf> = BTreeMap::new();
        for f in files {
            let g = generate_file(f.as_ref(), include_dirs)?;
            if let Some(first) = written.insert(g.file_name.clone(), f.as_ref().to_path_buf()) {
                return Err(Error::Io {
                    path: f.as_ref().to_path_buf(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!(
                            "compiles to {}, as {} does; rename one of them",
                            g.file_name,
                            first.display()
                        ),
                    ),
                });
            }
            if self.rerun_lines {
                for input in &g.inputs {
                    println!("cargo:rerun-if-changed={}", input.display());
                }
            }
            let path = out_dir.join(&g.file_name);
            std::fs::write(&path, g.code).map_err(|source| Error::Io { path, source })?;
        }
        Ok(())
    }
}

/// Compiles one IDL file in memory.
pub fn generate_file<Q: AsRef<Path>>(file: &Path, include_dirs: &[Q]) -> Result<Generated> {
    let text = lexer::read_source(file)?;
    let name = file.display().to_string();
    let dirs: Vec<PathBuf> = include_dirs
        .iter()
        .map(|d| d.as_ref().to_path_buf())
        .collect();
    let mut sources = lexer::Sources::default();
    let path = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let idx = sources.add(name, path, text);
    let origin = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let code = compile_sources(&mut sources, idx, &dirs, &origin)?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "idl".into());
    let mut file_name = codegen::snake(&stem).trim_start_matches("r#").to_string();
    if file_name.is_empty() {
        file_name = "idl".into();
    }
    file_name.push_str(".rs");
    Ok(Generated {
        file_name,
        code,
        inputs: sources.files.iter().map(|f| f.path.clone()).collect(),
    })
}

/// Compiles IDL source text in memory; `name` is used in diagnostics. `#include`s are
/// searched in `include_dirs` only.
pub fn generate<Q: AsRef<Path>>(name: &str, source: &str, include_dirs: &[Q]) -> Result<String> {
    let dirs: Vec<PathBuf> = include_dirs
        .iter()
        .map(|d| d.as_ref().to_path_buf())
        .collect();
    let mut sources = lexer::Sources::default();
    let idx = sources.add(name.to_string(), PathBuf::from(name), source.to_string());
    compile_sources(&mut sources, idx, &dirs, name)
}

/// Parses and checks IDL source text without generating code.
pub fn check(name: &str, source: &str) -> Result<()> {
    let mut sources = lexer::Sources::default();
    let idx = sources.add(name.to_string(), PathBuf::from(name), source.to_string());
    let toks = lexer::Preprocessor::new(&mut sources, &[]).run(idx)?;
    parser::parse(&toks, &sources).map(|_| ())
}

fn compile_sources(
    sources: &mut lexer::Sources,
    idx: usize,
    dirs: &[PathBuf],
    origin: &str,
) -> Result<String> {
    let toks = lexer::Preprocessor::new(sources, dirs).run(idx)?;
    let spec = parser::parse(&toks, sources)?;
    // Each struct's TopicType::TYPE_HASH: the library's, as run-time types compute it.
    let lib = types::TypeLibrary::from_spec(&spec).map_err(|name| {
        let pos = lexer::Pos {
            file: idx,
            line: 1,
            col: 1,
        };
        sources.error(pos, format!("type `{name}` is named but never defined"))
    })?;
    let hashes: BTreeMap<String, u64> = lib
        .struct_names()
        .into_iter()
        .filter_map(|n| Some((n.to_string(), lib.type_hash(lib.lookup(n)?))))
        .collect();
    codegen::generate(&spec, sources, origin, &lexer::to_source(&toks), &hashes)
}
