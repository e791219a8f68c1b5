//! The crate's one error type.

use std::path::PathBuf;

use crate::Version;

/// Everything that can go wrong with a log. Each variant says what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The operating system refused a file operation (disk full, permissions, a missing
    /// directory). The log is unchanged past its last successful [`crate::Log::sync`];
    /// drop it and reopen once the cause is fixed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What the log was doing ("open", "write", "fdatasync", …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Bytes that had been made durable no longer read back as they were written (bit rot,
    /// another program writing the file, a sealed segment cut short). Nothing is cut: restore
    /// this replica's log from a peer or move the file away.
    #[error("log file {path} is corrupt at byte offset {offset}: {reason}")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// The byte offset in it of the first bad entry.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// An append did not carry a version above the log's last one; entries are written in
    /// delivery order, so this is a bug in the caller.
    #[error("version {given} does not follow the log's last version {last}")]
    VersionNotIncreasing {
        /// The log's last version.
        last: Version,
        /// The version of the refused append.
        given: Version,
    },
    /// The payload exceeds [`crate::PAYLOAD_BYTES_MAX`].
    #[error("payload of {len_bytes} bytes exceeds the entry maximum of {max_bytes} bytes")]
    PayloadTooLarge {
        /// The payload's length.
        len_bytes: usize,
        /// The maximum.
        max_bytes: usize,
    },
    /// A [`crate::LogConfig`] field is out of range; the text names it and its bound.
    #[error("invalid log configuration: {0}")]
    Config(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, LogError>;
