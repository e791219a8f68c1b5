//! The crate's one error enum and the caret diagnostics it carries.

use std::fmt;
use std::path::PathBuf;

/// A position-tagged problem in IDL source: rendered as
/// `file:line:col: error: <message>`, the offending line, and a caret under the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as given (or as found in an include directory).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    /// What is wrong, and what was expected.
    pub message: String,
    /// The offending source line (without its line break).
    pub source_line: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}:{}:{}: error: {}",
            self.file, self.line, self.col, self.message
        )?;
        writeln!(f, "{}", self.source_line)?;
        // The caret sits under the column; tabs are kept so it lines up in a terminal.
        let pad: String = self
            .source_line
            .chars()
            .take(self.col.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{pad}^")
    }
}

/// Everything that can go wrong compiling IDL.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The IDL is malformed or uses something unsupported.
    #[error("{0}")]
    Idl(Box<Diagnostic>),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// An input file was not found (not in the include directories either).
    #[error("{}: file not found", path.display())]
    NotFound {
        /// The file as named.
        path: PathBuf,
    },
    /// `Builder::compile` was run outside a build script and no output directory was set.
    #[error("OUT_DIR is not set: call Builder::out_dir or run from a build script")]
    NoOutDir,
}

impl Error {
    /// The diagnostic, when the error is about IDL source.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            Error::Idl(d) => Some(d),
            _ => None,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
