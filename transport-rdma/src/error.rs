//! The crate's one error type.

use crate::{NodeId, RegionId};

/// Why a link to a peer was declared failed. Carried by [`crate::Event::PeerFailed`] and
/// [`Error::PeerFailed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureReason {
    /// The peer closed the link on purpose (graceful leave or endpoint closed).
    Closed,
    /// The connection broke (reset, end of stream, process gone).
    ConnectionLost(String),
    /// No link could be made: dialing the peer failed (connection refused, no such
    /// address, timed out) before any byte was exchanged. The peer may simply not be up
    /// yet; a view being formed dials it again (`spindle_group`'s activation time-out
    /// bounds how long). Reported by the tcp and shm backends.
    Unreachable(String),
    /// No probe or other traffic arrived from the peer within the failure detector's
    /// time-out (this node suspected the peer).
    ProbeTimeout {
        /// How long the peer had been silent when it was declared failed.
        silent_ms: u64,
    },
    /// The peer declared *this* node failed: it heard nothing from us for `silent_ms`
    /// (we were stopped, starved or cut off) and closed the link. Our side learns it when
    /// it wakes and reads the peer's last frame.
    Excluded {
        /// How long the peer had found this node silent.
        silent_ms: u64,
    },
    /// The peer sent bytes that do not decode or break the contract (out-of-bounds write,
    /// oversize frame, unknown region). The link was closed.
    Malformed(String),
    /// The peer did not prove knowledge of the domain secret (or we could not prove
    /// ours to it): the link was refused before anything else was exchanged.
    Unauthenticated(String),
    /// The simulator crashed the peer (sim backend only).
    Crashed,
    /// The local endpoint gave up on the peer (for example [`crate::Endpoint::disconnect`]).
    LocalClose,
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::Closed => write!(f, "peer closed the link"),
            FailureReason::ConnectionLost(why) => write!(f, "connection lost: {why}"),
            FailureReason::Unreachable(why) => write!(f, "could not reach the peer: {why}"),
            FailureReason::ProbeTimeout { silent_ms } => {
                write!(f, "no probe from peer for {silent_ms} ms")
            }
            FailureReason::Excluded { silent_ms } => write!(
                f,
                "the peer suspected this node after {silent_ms} ms of silence and closed the link"
            ),
            FailureReason::Malformed(why) => write!(f, "peer sent malformed data: {why}"),
            FailureReason::Unauthenticated(why) => write!(f, "link refused: {why}"),
            FailureReason::Crashed => write!(f, "peer crashed"),
            FailureReason::LocalClose => write!(f, "link closed locally"),
        }
    }
}

/// Everything that can go wrong in the fabric. Each variant says what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No link to this peer exists yet: call [`crate::Endpoint::connect`] and wait for
    /// [`crate::Event::PeerConnected`].
    #[error("node {peer} is not connected")]
    NotConnected {
        /// The peer.
        peer: NodeId,
    },
    /// The link to this peer has failed; nothing more can be written to it. A restarted
    /// peer can be connected again.
    #[error("link to node {peer} has failed: {reason}")]
    PeerFailed {
        /// The peer.
        peer: NodeId,
        /// Why it failed.
        reason: FailureReason,
    },
    /// The peer has not announced a region with this id (or withdrew it): wait for
    /// [`crate::Event::RegionAnnounced`].
    #[error("node {node} has no region {region}")]
    UnknownRegion {
        /// The node that should own the region.
        node: NodeId,
        /// The region id.
        region: RegionId,
    },
    /// A write does not fit in the target region.
    #[error(
        "write of {len} bytes at offset {offset} does not fit region {region} of node {node} \
         ({region_len} bytes)"
    )]
    OutOfBounds {
        /// The node owning the region.
        node: NodeId,
        /// The region id.
        region: RegionId,
        /// Offset of the write.
        offset: usize,
        /// Length of the write.
        len: usize,
        /// Length of the region.
        region_len: usize,
    },
    /// A size limit of the contract was exceeded (see the `*_MAX` constants).
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was too large ("write", "send", "region", …).
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A peer's write reached bytes the region's owner holds in place for a reader
    /// ([`crate::Region::watch_pins`]): by the protocol nobody writes there, so the
    /// peer broke it.
    #[error(
        "write of {len} bytes at offset {offset} reaches a buffer of region {region} held in place"
    )]
    Pinned {
        /// The region id.
        region: RegionId,
        /// Offset of the write.
        offset: usize,
        /// Length of the write.
        len: usize,
    },
    /// A guard word (or an atomic word access) was not 8-byte aligned.
    #[error("offset {offset} is not 8-byte aligned")]
    Misaligned {
        /// The offending offset.
        offset: usize,
    },
    /// The outbound queue to this peer holds [`crate::FabricConfig::outbound_bytes_max`]
    /// bytes; nothing was queued. Call [`crate::Endpoint::wait`] and try again.
    #[error("outbound queue to node {peer} is full; wait and retry")]
    QueueFull {
        /// The peer.
        peer: NodeId,
    },
    /// A region with this id is already registered on this endpoint.
    #[error("region {region} is already registered")]
    RegionExists {
        /// The region id.
        region: RegionId,
    },
    /// A node id was used that this endpoint cannot talk to (for example its own id).
    #[error("invalid peer {peer}: {detail}")]
    InvalidPeer {
        /// The peer.
        peer: NodeId,
        /// What is wrong.
        detail: String,
    },
    /// An address could not be parsed or reached.
    #[error("bad address {addr:?}: {detail}")]
    BadAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        detail: String,
    },
    /// Bytes that came from outside (a peer, a file) do not decode.
    #[error("malformed input from {source_name}: {detail}")]
    Malformed {
        /// Where the bytes came from (peer, file).
        source_name: String,
        /// What is wrong with them.
        detail: String,
    },
    /// A peer failed the link handshake's proof of the domain secret (or named other
    /// nodes than the handshake did); the link was refused.
    #[error("link refused: {detail}")]
    Unauthenticated {
        /// What failed (never the secret).
        detail: String,
    },
    /// An operating-system call failed.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the fabric was doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The endpoint was closed; create a new one.
    #[error("endpoint is closed")]
    Closed,
    /// The configuration is inconsistent.
    #[error("invalid fabric configuration: {0}")]
    Config(String),
}

impl Error {
    /// Wraps an I/O error with what the fabric was doing when it happened.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
