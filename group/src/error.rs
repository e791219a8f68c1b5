//! The crate's one error type.

use spindle_transport_rdma::NodeId;

use crate::SubgroupId;

/// Everything that can go wrong in the engine. Each variant says what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A view, layout or engine setting is invalid; the text names the field and the
    /// bound it breaks. Fix the configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The predicate thread cannot be placed as its [`crate::sched::ThreadSched`] says
    /// (a CPU out of range or missing, a priority out of range or not permitted).
    #[error("the predicate thread's {setting}: {why}")]
    ThreadSched {
        /// The setting: `cpus` or `fifo_priority`.
        setting: &'static str,
        /// What is wrong with it, or what the operating system said.
        why: String,
    },
    /// The subgroup is not in the layout, or this node is not one of its members.
    #[error("subgroup {subgroup} is unknown on this node")]
    UnknownSubgroup {
        /// The subgroup.
        subgroup: SubgroupId,
    },
    /// This node is a member but not a sender of the subgroup.
    #[error("node {node} is not a sender of subgroup {subgroup}")]
    NotASender {
        /// The subgroup.
        subgroup: SubgroupId,
        /// This node.
        node: NodeId,
    },
    /// Every slot of the send window holds a message some member has not delivered yet;
    /// retry after the engine made progress (flow control, never loss).
    #[error("send window of subgroup {subgroup} is full")]
    WindowFull {
        /// The subgroup.
        subgroup: SubgroupId,
    },
    /// The message does not fit in one slot of the subgroup.
    #[error("message of {len} bytes exceeds the slot payload of {max} bytes")]
    PayloadTooLarge {
        /// The message length.
        len: usize,
        /// The subgroup's `slot_payload_bytes`.
        max: usize,
    },
    /// The message is larger than the largest message of the subgroup (its RDMC
    /// `message_bytes_max`).
    #[error(
        "message of {len} bytes exceeds the largest message of subgroup {subgroup}: {max} bytes \
         (its RDMC message_bytes_max)"
    )]
    MessageTooLarge {
        /// The subgroup.
        subgroup: SubgroupId,
        /// The message length.
        len: usize,
        /// The subgroup's RDMC `message_bytes_max`.
        max: usize,
    },
    /// The engine has stopped (a peer broke the protocol or the node shut down).
    #[error("the engine has stopped")]
    Stopped,
    /// The view is changing: this sender's view is wedged. Take a new [`crate::Sender`]
    /// once the next view is installed; the group re-sends what the old view did not
    /// deliver, so nothing committed is lost.
    #[error("subgroup {subgroup} is wedged for a view change")]
    Wedged {
        /// The subgroup.
        subgroup: SubgroupId,
    },
    /// The current view cannot give every subgroup its minimum members; sends wait for
    /// more members to join.
    #[error("the view is inadequate: {0}")]
    Inadequate(String),
    /// This node left the group or was shut down by it; the text says why (lost its
    /// majority, removed from the view, left).
    #[error("shut down: {0}")]
    ShutDown(String),
    /// This node's view `vid` lost its majority (too few of its members reachable) and no
    /// member said it excluded this node: it stopped, cut off from the others or having
    /// outlived them. A bootstrap member started again while the others run the domain
    /// gets this for its first view (it may join the running domain instead).
    #[error("shut down: {why}")]
    LostMajority {
        /// The view whose majority was lost.
        vid: u32,
        /// What the membership protocol saw (members reachable, of how many).
        why: String,
    },
    /// The other members excluded this node: `by` suspected it (heard nothing from it for
    /// `silent_ms`, when `by`'s last word arrived; the process was stopped, swapped out or
    /// cut off) and the group moved on without it. Start a new process (or rejoin as a
    /// new member).
    #[error(
        "excluded from the group in view {vid}: node {by} suspected this node{}",
        after_silence(*.silent_ms)
    )]
    Excluded {
        /// The view this node was last a member of.
        vid: u32,
        /// The member that suspected this node (the first to say so).
        by: NodeId,
        /// How long `by` had found this node silent, if its last word arrived.
        silent_ms: Option<u64>,
    },
    /// A peer's bytes or message break the membership protocol; the text names what.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The RDMC group still has a message in flight (one at a time per group); retry
    /// after it completes.
    #[error("the RDMC group has a message in flight")]
    RdmcBusy,
    /// The RDMC group failed because `peer` did; make a new group (in a subgroup: the
    /// view change does).
    #[error("the RDMC group failed: node {peer} is gone")]
    RdmcFailed {
        /// The member whose failure ended the group.
        peer: NodeId,
    },
    /// The fabric refused an operation.
    #[error("fabric: {0}")]
    Fabric(#[from] spindle_transport_rdma::Error),
    /// A logged subgroup's log failed (its directory, the disk, or corruption found on
    /// open); the text of the inner error names the file and what to do.
    #[error("log: {0}")]
    Log(#[from] spindle_log::LogError),
    /// A restart after total failure could not go on: too few members came back in time
    /// (the text says how many of how many), or the leader restarted without this node.
    #[error("restart after total failure: {0}")]
    Restart(String),
    /// A DARE sender has `window` messages handed over and not yet delivered; retry
    /// after some are delivered.
    #[error("the DARE send window of {window} messages is full")]
    DareWindowFull {
        /// The sender window.
        window: usize,
    },
}

fn after_silence(silent_ms: Option<u64>) -> String {
    silent_ms.map_or_else(
        || " (this node was silent)".to_string(),
        |ms| format!(" after {ms} ms of silence"),
    )
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
