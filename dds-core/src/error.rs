//! The crate's error: the DDS return codes (DDS 1.4 §2.2.1.1), as a Rust enum.

/// What went wrong, named after the DDS return code it stands for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `RETCODE_ERROR`: a generic failure (the text says what failed).
    #[error("error: {0}")]
    Error(String),
    /// `RETCODE_UNSUPPORTED`: the operation or QoS is not supported (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// `RETCODE_BAD_PARAMETER`: an argument is wrong (the text names it).
    #[error("bad parameter: {0}")]
    BadParameter(String),
    /// `RETCODE_PRECONDITION_NOT_MET`: the entity is not in a state that allows this
    /// (for example, deleting a participant that still has entities).
    #[error("precondition not met: {0}")]
    PreconditionNotMet(String),
    /// `RETCODE_OUT_OF_RESOURCES`: a bound is reached (history, resource limits, sizes).
    #[error("out of resources: {0}")]
    OutOfResources(String),
    /// `RETCODE_NOT_ENABLED`: the entity is not enabled.
    #[error("not enabled: {0}")]
    NotEnabled(String),
    /// `RETCODE_IMMUTABLE_POLICY`: a QoS policy that cannot change after enable.
    #[error("immutable policy: {0}")]
    ImmutablePolicy(spindle_qos::QosError),
    /// `RETCODE_INCONSISTENT_POLICY`: the QoS policies contradict each other.
    #[error("inconsistent policy: {0}")]
    InconsistentPolicy(spindle_qos::QosError),
    /// `RETCODE_ALREADY_DELETED`: the entity was deleted.
    #[error("already deleted: {0}")]
    AlreadyDeleted(String),
    /// `RETCODE_TIMEOUT`: the operation did not finish in time (the text says what it
    /// waited for).
    #[error("timeout: {0}")]
    Timeout(String),
    /// `RETCODE_NO_DATA`: there is no sample to read or take.
    #[error("no data")]
    NoData,
    /// `RETCODE_ILLEGAL_OPERATION`: the operation may not be called here (for example,
    /// from a listener on the delivery thread, where waiting would deadlock).
    #[error("illegal operation: {0}")]
    IllegalOperation(String),
    /// The participant's configuration is wrong (the text names the key and the file).
    #[error("configuration: {0}")]
    Config(String),
    /// The engine reported an error.
    #[error("engine: {0}")]
    Group(#[from] spindle_group::Error),
    /// The fabric (transport) reported an error, e.g. the listen address is taken.
    #[error("transport: {0}")]
    Transport(#[from] spindle_transport_rdma::Error),
    /// Encoding or decoding a sample failed.
    #[error("sample encoding: {0}")]
    Topic(#[from] spindle_topics::Error),
}

impl From<spindle_qos::QosError> for Error {
    fn from(e: spindle_qos::QosError) -> Error {
        match e {
            spindle_qos::QosError::Immutable { .. } => Error::ImmutablePolicy(e),
            _ => Error::InconsistentPolicy(e),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
