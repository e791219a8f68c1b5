//! The stream link's handshake decisions, sans-IO: the `Hello` a side sends, the checks
//! a received `Hello` must pass, and the acceptor's decision ([`decide`]) — accept,
//! reject a duplicate, lose a simultaneous connect's tie-break, or refuse a second link
//! claiming a live peer's id. The drivers that run these over a stream are in `connect.rs`.

use std::collections::BTreeMap;

use super::frame::{malformed, Hello, RegionEntry};
use crate::peers::{admit, Admit, PeerView};
use crate::{NodeId, Region, RegionId, Result};

/// What the acceptor's peer table holds for the hello's sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Existing {
    /// No slot.
    None,
    /// The last link failed or was closed.
    Failed,
    /// Our own attempt to the peer is in flight.
    Pending,
    /// A live link to the peer incarnation `incarnation`.
    Up {
        /// The incarnation the live link's `Hello` carried.
        incarnation: u64,
    },
}

/// The `Hello` node `node` (incarnation `incarnation`) sends to `target`, announcing
/// `regions` (id → region and backend tag).
pub(crate) fn hello(
    node: NodeId,
    incarnation: u64,
    target: NodeId,
    regions: &BTreeMap<RegionId, (Region, Vec<u8>)>,
) -> Hello {
    Hello {
        node,
        target,
        incarnation,
        regions: regions
            .iter()
            .map(|(id, (region, tag))| RegionEntry {
                id: *id,
                len: region.len(),
                tag: tag.clone(),
            })
            .collect(),
    }
}

/// Checks a `Hello` received by node `local`: meant for it, not from itself, and (for an
/// initiator) from the node it dialed, `expected`.
pub(crate) fn check_hello(local: NodeId, hello: &Hello, expected: Option<NodeId>) -> Result<()> {
    if hello.target != local {
        return Err(malformed(format!(
            "hello meant for node {}, this is node {local}",
            hello.target
        )));
    }
    if hello.node == local {
        return Err(malformed("hello from our own node id"));
    }
    if let Some(expected) = expected {
        if hello.node != expected {
            return Err(malformed(format!(
                "expected node {expected}, reached node {}",
                hello.node
            )));
        }
    }
    Ok(())
}

/// The acceptor's decision on `hello` (already checked), received by node `local` whose
/// table holds `existing` for the sender and has `room` for one more peer. A hello
/// claiming the id of a live peer is never taken over that peer's link: from the same
/// incarnation it is a duplicate, from another one [`Admit::RejectLiveId`] (the caller
/// waits a moment for the old link to fail, as a restarted peer's does, then asks again).
pub(crate) fn decide(local: NodeId, hello: &Hello, existing: Existing, room: bool) -> Admit {
    let view = match existing {
        Existing::None => PeerView::Absent,
        Existing::Failed => PeerView::Down,
        Existing::Pending => PeerView::Dialing,
        Existing::Up { incarnation } => PeerView::Linked {
            restarted: incarnation != hello.incarnation,
        },
    };
    match admit(local, hello.node, view, room) {
        Admit::AcceptReplacing => Admit::RejectLiveId,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello_from(node: NodeId, target: NodeId, incarnation: u64) -> Hello {
        hello(node, incarnation, target, &BTreeMap::new())
    }

    #[test]
    fn decision_table() {
        let h = hello_from(3, 5, 77);
        let cases = [
            (Existing::None, true, Admit::Accept),
            (Existing::None, false, Admit::RejectFull),
            (Existing::Failed, true, Admit::Accept),
            (Existing::Failed, false, Admit::RejectFull),
            // Node 3 < 5 dialed too: its connection is the one kept.
            (Existing::Pending, true, Admit::Accept),
            (
                Existing::Up { incarnation: 77 },
                true,
                Admit::RejectDuplicate,
            ),
            // Another process claims live node 3: refused, the live link stays.
            (Existing::Up { incarnation: 76 }, true, Admit::RejectLiveId),
            (Existing::Up { incarnation: 76 }, false, Admit::RejectLiveId),
        ];
        for (existing, room, want) in cases {
            assert_eq!(decide(5, &h, existing, room), want, "{existing:?} {room}");
        }
        // Node 9 > 5 dialed while 5 dials it: 5 keeps its own attempt.
        let h = hello_from(9, 5, 1);
        assert_eq!(
            decide(5, &h, Existing::Pending, true),
            Admit::RejectTieBreak
        );
    }

    #[test]
    fn hellos_are_checked() {
        let regions = BTreeMap::from([(4, (Region::new_heap(4, 16).unwrap(), b"t".to_vec()))]);
        let h = hello(3, 77, 5, &regions);
        assert_eq!(
            h.regions,
            vec![RegionEntry {
                id: 4,
                len: 16,
                tag: b"t".to_vec()
            }]
        );
        assert!(check_hello(5, &h, None).is_ok());
        assert!(check_hello(5, &h, Some(3)).is_ok());
        assert!(
            check_hello(5, &h, Some(4)).is_err(),
            "reached the wrong node"
        );
        assert!(check_hello(6, &h, None).is_err(), "meant for another node");
        assert!(
            check_hello(3, &hello_from(3, 3, 1), None).is_err(),
            "from ourselves"
        );
    }
}
