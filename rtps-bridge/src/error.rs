//! The bridge's one error type.

/// Everything that can go wrong in the bridge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file is unreadable or wrong; `what` names the key (and the line).
    #[error("{origin}: {what}")]
    Config {
        /// The file.
        origin: String,
        /// What is wrong, naming the key.
        what: String,
    },
    /// The RTPS side (RustDDS) refused something.
    #[error("RTPS side: {0}")]
    Rtps(String),
    /// The Spindle side refused something.
    #[error("Spindle side: {0}")]
    Spindle(#[from] spindle_dds_core::Error),
}

/// The bridge's result.
pub type Result<T> = std::result::Result<T, Error>;
