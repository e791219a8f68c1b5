//! How a node ends its membership other than by failing: it leaves (and lingers until the
//! others dropped it), or it learns it was excluded, and why.

use spindle_transport_rdma::NodeId;

use crate::error::Error;

/// Why this node was excluded, as the first peer that suspected it said (see
/// [`spindle_transport_rdma::FailureReason::Excluded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exclusion {
    /// The view this node was a member of.
    pub vid: u32,
    /// The member that suspected this node.
    pub by: NodeId,
    /// How long it had found this node silent (when its last word arrived: the
    /// member may also be known only from its membership row).
    pub silent_ms: Option<u64>,
}

impl Exclusion {
    /// The error an application sees for it.
    pub fn error(&self) -> Error {
        Error::Excluded {
            vid: self.vid,
            by: self.by,
            silent_ms: self.silent_ms,
        }
    }
}

/// How long a node that left keeps its links up so the remaining members see it echo the
/// trim that removes it (they count it toward their majority until then; they drop it
/// once they installed the next view).
pub const LEAVE_LINGER_US: u64 = 2_000_000;
