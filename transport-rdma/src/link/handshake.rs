//! The stream link's handshake decisions, sans-IO: the `Hello` a side sends, the checks
//! a received `Hello` must pass, and the acceptor's decision ([`decide`]) — accept,
//! reject a duplicate, lose a simultaneous connect's tie-break, or refuse a link claiming
//! the id of a live peer (or of the peer that answered our own dial) for another
//! incarnation. The drivers that run these over a stream are in `connect.rs`.

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
    /// Our own attempt to the peer is in flight. `refused_by`: the incarnation of the
    /// endpoint that answered it with a refusal (the peer, dialing us instead), once one
    /// did.
    Pending {
        /// The refusing endpoint's incarnation, from its `Refused` frame.
        refused_by: Option<u64>,
    },
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

/// The acceptor's decision on a `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Final.
    Now(Admit),
    /// Not yet: the caller asks again a moment later, until half its connect time-out
    /// has passed; then this answer stands.
    Later(Admit),
}

impl Decision {
    /// The answer, whether final or not.
    pub(crate) fn admit(self) -> Admit {
        match self {
            Decision::Now(a) | Decision::Later(a) => a,
        }
    }
}

/// The acceptor's decision on `hello` (already checked), received by node `local` whose
/// table holds `existing` for the sender and has `room` for one more peer.
///
/// A hello claiming the id of a live peer is never taken over that peer's link: from the
/// same incarnation it is a duplicate, from another one [`Admit::RejectLiveId`] (asked
/// again a moment later: a restarted peer's old link fails at once).
///
/// While our own dial to the peer is in flight, the tie-break may give the link to the
/// peer's dial instead (the lower id's is kept). Node ids are only claims (in an open
/// domain anyone may send any `Hello`, and with a secret any holder of it): the endpoint
/// that answered our dial at the peer's address is the peer, and only a hello from its
/// incarnation takes the dial's place; another is refused, so a process claiming the
/// peer's id never stands for it (its link's end would report the live peer failed).
/// Until our dial is answered the hello waits; if it never is, the hello is taken.
pub(crate) fn decide(local: NodeId, hello: &Hello, existing: Existing, room: bool) -> Decision {
    let view = match existing {
        Existing::None => PeerView::Absent,
        Existing::Failed => PeerView::Down,
        Existing::Pending { .. } => PeerView::Dialing,
        Existing::Up { incarnation } => PeerView::Linked {
            restarted: incarnation != hello.incarnation,
        },
    };
    match (admit(local, hello.node, view, room), existing) {
        (Admit::RejectDuplicate, _) => Decision::Later(Admit::RejectDuplicate),
        (Admit::AcceptReplacing, _) => Decision::Later(Admit::RejectLiveId),
        (Admit::Accept, Existing::Pending { refused_by: None }) => Decision::Later(Admit::Accept),
        (
            Admit::Accept,
            Existing::Pending {
                refused_by: Some(peer),
            },
        ) if peer != hello.incarnation => Decision::Now(Admit::RejectLiveId),
        (other, _) => Decision::Now(other),
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
        use Decision::{Later, Now};
        let h = hello_from(3, 5, 77);
        let pending = |refused_by| Existing::Pending { refused_by };
        let cases = [
            (Existing::None, true, Now(Admit::Accept)),
            (Existing::None, false, Now(Admit::RejectFull)),
            (Existing::Failed, true, Now(Admit::Accept)),
            (Existing::Failed, false, Now(Admit::RejectFull)),
            // Node 3 < 5 dialed too, and refused 5's dial as incarnation 77: its
            // connection is the one kept.
            (pending(Some(77)), true, Now(Admit::Accept)),
            // 5's dial is not answered yet: the hello waits for the answer.
            (pending(None), true, Later(Admit::Accept)),
            (
                Existing::Up { incarnation: 77 },
                true,
                Later(Admit::RejectDuplicate),
            ),
            // Another process claims live node 3: refused, the live link stays.
            (
                Existing::Up { incarnation: 76 },
                true,
                Later(Admit::RejectLiveId),
            ),
            (
                Existing::Up { incarnation: 76 },
                false,
                Later(Admit::RejectLiveId),
            ),
        ];
        for (existing, room, want) in cases {
            assert_eq!(decide(5, &h, existing, room), want, "{existing:?} {room}");
        }
        // Node 9 > 5 dialed while 5 dials it: 5 keeps its own attempt.
        let h = hello_from(9, 5, 1);
        for refused_by in [None, Some(1)] {
            assert_eq!(
                decide(5, &h, pending(refused_by), true),
                Now(Admit::RejectTieBreak)
            );
        }
    }

    #[test]
    fn a_hello_claiming_the_peer_that_refused_our_dial_is_taken_only_from_its_incarnation() {
        // Node 5 dials node 3; 3 (incarnation 77) refuses, as it dials 5 itself. Another
        // process claims node 3 before 3's own dial arrives: it never takes the place of
        // 5's dial, whose answer said who node 3 is.
        let impostor = hello_from(3, 5, 0xdead);
        let refused = Existing::Pending {
            refused_by: Some(77),
        };
        assert_eq!(
            decide(5, &impostor, refused, true),
            Decision::Now(Admit::RejectLiveId)
        );
        assert_eq!(
            decide(5, &hello_from(3, 5, 77), refused, true),
            Decision::Now(Admit::Accept)
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
