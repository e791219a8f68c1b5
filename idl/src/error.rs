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
        // A long line is quoted around the column only (a generated or minified file can
        // have lines of megabytes).
        let chars: Vec<char> = self.source_line.chars().collect();
        let at = self.col.saturating_sub(1).min(chars.len());
        let (start, end) = if chars.len() <= QUOTED_LINE_CHARS_MAX {
            (0, chars.len())
        } else {
            let end = (at.saturating_sub(QUOTED_LINE_CHARS_MAX / 2) + QUOTED_LINE_CHARS_MAX)
                .min(chars.len());
            (end - QUOTED_LINE_CHARS_MAX, end)
        };
        let lead = if start > 0 { "…" } else { "" };
        let trail = if end < chars.len() { "…" } else { "" };
        let quoted: String = chars[start..end].iter().collect();
        writeln!(f, "{lead}{quoted}{trail}")?;
        // The caret sits under the column; tabs are kept so it lines up in a terminal.
        let pad: String = lead
            .chars()
            .chain(chars[start..at].iter().copied())
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{pad}^")
    }
}

/// The most characters of a source line a diagnostic quotes (around its column).
pub const QUOTED_LINE_CHARS_MAX: usize = 160;

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

#[cfg(test)]
mod tests {
    use super::{Diagnostic, QUOTED_LINE_CHARS_MAX};

    fn shown(line: &str, col: usize) -> (String, String) {
        let d = Diagnostic {
            file: "f.idl".into(),
            line: 1,
            col,
            message: "m".into(),
            source_line: line.into(),
        };
        let text = d.to_string();
        let mut lines = text.lines().skip(1);
        (
            lines.next().unwrap().to_string(),
            lines.next().unwrap().to_string(),
        )
    }

    /// A short line is quoted whole with the caret under the column; a long one only
    /// around the column, marked, the caret still under the offending character.
    #[test]
    fn long_lines_are_quoted_around_the_column() {
        assert_eq!(
            shown("struct S { long x };", 19),
            (
                "struct S { long x };".into(),
                format!("{}^", " ".repeat(18))
            )
        );
        let long = format!("{}X{}", "(".repeat(100_000), ")".repeat(100_000));
        let (quoted, caret) = shown(&long, 100_001);
        assert!(quoted.starts_with('…') && quoted.ends_with('…'), "{quoted}");
        assert_eq!(quoted.chars().count(), QUOTED_LINE_CHARS_MAX + 2);
        assert_eq!(quoted.chars().nth(caret.chars().count() - 1), Some('X'));
        let (quoted, caret) = shown(&long, 1);
        assert!(!quoted.starts_with('…') && quoted.ends_with('…'));
        assert_eq!(caret, "^");
    }
}
