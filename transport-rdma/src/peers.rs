//! The peer state machine every linked backend shares: tcp and shm (through the stream
//! link, `link/`), libfabric and verbs (through the side channel, `side_link.rs`).
//!
//! This module owns the decisions, never the I/O: where a link to a peer stands
//! ([`LinkState`]), and whether a peer's incoming hello is taken ([`admit`]) — the
//! tie-break between simultaneous connects (the connection initiated by the lower node id
//! is the one kept, on both sides), duplicates, restarts and the [`crate::PEERS_MAX`]
//! bound.

use crate::NodeId;

/// Where the link to one peer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// Our own dial is in flight.
    Dialing,
    /// A link exists and is exchanging its set-up (region tables); not usable yet.
    Handshaking,
    /// Usable.
    Up,
    /// Failed or closed; a new connect may start a new link.
    Down,
}

/// What the accepting side knows about a peer when that peer's hello arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerView {
    /// Never linked.
    Absent,
    /// The last link failed or was closed.
    Down,
    /// Our own dial to the peer is in flight (both sides connect at once).
    Dialing,
    /// A link is up or being set up. `restarted`: the hello comes from a newer
    /// incarnation of the peer than that link's (the peer restarted).
    Linked {
        /// The hello's incarnation differs from the live link's.
        restarted: bool,
    },
}

/// The accepting side's answer to a hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Take the new link.
    Accept,
    /// Take the new link and fail the old one: the peer restarted.
    AcceptReplacing,
    /// A live link to the same incarnation exists: the new one is a duplicate.
    RejectDuplicate,
    /// Both sides dialed and ours, from the lower node id, is the one kept.
    RejectTieBreak,
    /// Already linked to [`crate::PEERS_MAX`] other peers.
    RejectFull,
}

impl Admit {
    /// True when the new link is taken.
    pub(crate) fn accepts(self) -> bool {
        matches!(self, Admit::Accept | Admit::AcceptReplacing)
    }
}

/// Decides whether node `local` takes an incoming link from `peer`, given what it knows
/// about `peer` and whether its table has `room` for one more peer (fewer than
/// [`crate::PEERS_MAX`] others hold a slot). Pure: the caller holds the table lock.
pub(crate) fn admit(local: NodeId, peer: NodeId, view: PeerView, room: bool) -> Admit {
    match view {
        PeerView::Absent | PeerView::Down if room => Admit::Accept,
        PeerView::Absent | PeerView::Down => Admit::RejectFull,
        // Both sides dialed: keep the connection initiated by the lower id.
        PeerView::Dialing if peer < local => Admit::Accept,
        PeerView::Dialing => Admit::RejectTieBreak,
        PeerView::Linked { restarted: false } => Admit::RejectDuplicate,
        PeerView::Linked { restarted: true } => Admit::AcceptReplacing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_decision_table() {
        use Admit::*;
        use PeerView::*;
        let linked = |restarted| Linked { restarted };
        // (local, peer, view, room) -> decision
        let table = [
            (5, 3, Absent, true, Accept),
            (5, 3, Absent, false, RejectFull),
            (5, 3, Down, true, Accept),
            (5, 3, Down, false, RejectFull),
            // Simultaneous connect: the lower node's dial wins on both sides.
            (5, 3, Dialing, true, Accept),
            (3, 5, Dialing, true, RejectTieBreak),
            (3, 5, Dialing, false, RejectTieBreak),
            (5, 3, linked(false), true, RejectDuplicate),
            (3, 5, linked(false), true, RejectDuplicate),
            (5, 3, linked(true), true, AcceptReplacing),
            (5, 3, linked(true), false, AcceptReplacing),
        ];
        for (local, peer, view, room, want) in table {
            assert_eq!(
                admit(local, peer, view, room),
                want,
                "local {local}, peer {peer}, {view:?}, room {room}"
            );
        }
        assert!(Accept.accepts() && AcceptReplacing.accepts());
        assert!(!RejectDuplicate.accepts() && !RejectTieBreak.accepts() && !RejectFull.accepts());
    }

    #[test]
    fn exactly_one_side_keeps_a_simultaneous_connect() {
        for (a, b) in [(1, 2), (2, 1), (7, 1000)] {
            // a's acceptor sees b's hello while a dials b, and the other way round.
            let at_a = admit(a, b, PeerView::Dialing, true).accepts();
            let at_b = admit(b, a, PeerView::Dialing, true).accepts();
            assert!(at_a != at_b, "{a} and {b}: exactly one link is kept");
        }
    }
}
