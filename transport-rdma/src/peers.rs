//! The peer state machine every linked backend shares: tcp and shm (through the stream
//! link, `link/`), libfabric and verbs (through the side channel, `side_link.rs`).
//!
//! This module owns the decisions, never the I/O: where a link to a peer stands
//! ([`LinkState`]), and whether a peer's incoming hello is taken ([`admit`]) — the
//! tie-break between simultaneous connects (the connection initiated by the lower node id
//! is the one kept, on both sides), duplicates, restarts and the [`crate::PEERS_MAX`]
//! bound — and the table that applies them ([`PeerTable`]): one entry per peer, link ids
//! that let stale threads recognise that their link was replaced, idempotent dials, and
//! marking a link down exactly once ([`PeerTable::mark_down`]). What a backend does
//! around those steps (tear down a queue pair, shut a stream, emit the failure event) it
//! does with the entry [`PeerTable::mark_down`] hands back, once.

use std::collections::BTreeMap;

use crate::{Error, FailureReason, NodeId, Result, PEERS_MAX};

/// Where the link to one peer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// Our own dial is in flight.
    Dialing,
    /// A link exists and is exchanging its set-up (region tables); not usable yet.
    #[cfg_attr(not(any(feature = "libfabric", feature = "verbs")), allow(dead_code))]
    // only the side-channel backends use it
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
    /// A live link holds the hello's node id for another incarnation, and did not fail
    /// while we waited (the stream links' answer where [`admit`] says
    /// [`Admit::AcceptReplacing`]): a second process claiming a live member's id never
    /// displaces it.
    RejectLiveId,
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

/// One peer's entry in a [`PeerTable`]: the backend's record of its link to that peer.
pub(crate) trait PeerEntry {
    /// Where the link stands.
    fn state(&self) -> LinkState;
    /// The id of the link, or of the dial attempt, this entry belongs to (unique in its
    /// table: see [`PeerTable::next_link_id`]).
    fn link_id(&self) -> u64;
    /// True if the entry counts toward [`crate::PEERS_MAX`]. Default: while not down.
    fn holds_slot(&self) -> bool {
        self.state() != LinkState::Down
    }
    /// Marks the entry down for `reason` (called once per link, by
    /// [`PeerTable::mark_down`]); releases what the entry holds that needs no backend.
    fn set_down(&mut self, reason: &FailureReason);
}

/// The peers of one endpoint and where each link stands. Callers hold it under their
/// lock; every method is sans-IO.
#[derive(Debug)]
pub(crate) struct PeerTable<E> {
    entries: BTreeMap<NodeId, E>,
    next_link: u64,
}

impl<E: PeerEntry> Default for PeerTable<E> {
    fn default() -> Self {
        PeerTable {
            entries: BTreeMap::new(),
            next_link: 1,
        }
    }
}

/// Fails unless `peer` is another node than `local`.
pub(crate) fn check_not_self(local: NodeId, peer: NodeId) -> Result<()> {
    if peer == local {
        return Err(Error::InvalidPeer {
            peer,
            detail: "an endpoint cannot link to itself".into(),
        });
    }
    Ok(())
}

impl<E: PeerEntry> PeerTable<E> {
    /// The entry of `peer`.
    pub(crate) fn get(&self, peer: NodeId) -> Option<&E> {
        self.entries.get(&peer)
    }

    /// The entry of `peer`, to change.
    pub(crate) fn get_mut(&mut self, peer: NodeId) -> Option<&mut E> {
        self.entries.get_mut(&peer)
    }

    /// Installs `entry` for `peer`, returning the one it replaces.
    pub(crate) fn insert(&mut self, peer: NodeId, entry: E) -> Option<E> {
        self.entries.insert(peer, entry)
    }

    /// Every entry, by ascending peer id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &E)> {
        self.entries.iter().map(|(&id, e)| (id, e))
    }

    #[cfg_attr(not(any(feature = "libfabric", feature = "verbs")), allow(dead_code))] // only the side-channel backends use it
    /// Every peer with an entry, ascending.
    pub(crate) fn ids(&self) -> Vec<NodeId> {
        self.entries.keys().copied().collect()
    }

    /// Peers whose link is in one of `states`, ascending.
    pub(crate) fn in_states(&self, states: &[LinkState]) -> Vec<NodeId> {
        self.iter()
            .filter(|(_, e)| states.contains(&e.state()))
            .map(|(id, _)| id)
            .collect()
    }

    /// A fresh link (or dial attempt) id, never given out before by this table.
    pub(crate) fn next_link_id(&mut self) -> u64 {
        let id = self.next_link;
        self.next_link += 1;
        id
    }

    /// True if a link to `peer` fits under [`crate::PEERS_MAX`]: fewer than that many
    /// other peers hold a slot.
    pub(crate) fn room_for(&self, peer: NodeId) -> bool {
        let others = self
            .entries
            .iter()
            .filter(|(&id, e)| id != peer && e.holds_slot())
            .count();
        others < PEERS_MAX
    }

    /// True if `peer`'s entry belongs to link (or attempt) `link` and is not down: the
    /// check a thread of that link makes before acting on the entry.
    pub(crate) fn is_current(&self, peer: NodeId, link: u64) -> bool {
        self.get(peer)
            .is_some_and(|e| e.link_id() == link && e.state() != LinkState::Down)
    }

    /// Starts a dial to `peer`: `Ok(None)` if a link exists or is being made (connect is
    /// idempotent), else installs `dialing(attempt)` and returns the attempt id.
    pub(crate) fn begin_dial(
        &mut self,
        peer: NodeId,
        dialing: impl FnOnce(u64) -> E,
    ) -> Result<Option<u64>> {
        if self.get(peer).is_some_and(|e| e.state() != LinkState::Down) {
            return Ok(None);
        }
        if !self.room_for(peer) {
            return Err(Error::InvalidPeer {
                peer,
                detail: format!("already linked to {PEERS_MAX} peers (PEERS_MAX)"),
            });
        }
        let attempt = self.next_link_id();
        self.entries.insert(peer, dialing(attempt));
        Ok(Some(attempt))
    }

    #[cfg_attr(not(any(feature = "libfabric", feature = "verbs")), allow(dead_code))] // only the side-channel backends use it
    /// What the table knows about `peer`, for [`admit`]; `restarted` tells whether a hello
    /// comes from a newer incarnation than the entry's live link.
    pub(crate) fn view(&self, peer: NodeId, restarted: impl FnOnce(&E) -> bool) -> PeerView {
        match self.get(peer) {
            None => PeerView::Absent,
            Some(e) => match e.state() {
                LinkState::Down => PeerView::Down,
                LinkState::Dialing => PeerView::Dialing,
                LinkState::Handshaking | LinkState::Up => PeerView::Linked {
                    restarted: restarted(e),
                },
            },
        }
    }

    /// Marks the link `link` to `peer` down — once: `Some(entry)` only for the call that
    /// took it down (the caller then reports the failure), `None` if the entry belongs to
    /// another link or is down already.
    pub(crate) fn mark_down(
        &mut self,
        peer: NodeId,
        link: u64,
        reason: &FailureReason,
    ) -> Option<&mut E> {
        if !self.is_current(peer, link) {
            return None;
        }
        let entry = self.entries.get_mut(&peer)?;
        entry.set_down(reason);
        // Invariant: a link is reported down once, so set_down must leave it down.
        assert_eq!(
            entry.state(),
            LinkState::Down,
            "set_down leaves the entry down"
        );
        Some(entry)
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

    #[derive(Debug)]
    struct Entry {
        state: LinkState,
        link: u64,
    }

    impl PeerEntry for Entry {
        fn state(&self) -> LinkState {
            self.state
        }
        fn link_id(&self) -> u64 {
            self.link
        }
        fn set_down(&mut self, _reason: &FailureReason) {
            self.state = LinkState::Down;
        }
    }

    fn dialing(link: u64) -> Entry {
        Entry {
            state: LinkState::Dialing,
            link,
        }
    }

    #[test]
    fn dials_are_idempotent_and_links_go_down_once() {
        let mut t = PeerTable::<Entry>::default();
        let a = t.begin_dial(2, dialing).unwrap().expect("a new dial");
        assert_eq!(t.begin_dial(2, dialing).unwrap(), None, "already dialing");
        assert!(t.is_current(2, a));
        assert_eq!(t.view(2, |_| false), PeerView::Dialing);
        // The link replaces the attempt: the attempt's thread is stale now.
        let link = t.next_link_id();
        assert_ne!(link, a);
        t.insert(
            2,
            Entry {
                state: LinkState::Up,
                link,
            },
        );
        assert_eq!(t.in_states(&[LinkState::Up]), vec![2]);
        assert!(
            t.mark_down(2, a, &FailureReason::LocalClose).is_none(),
            "stale"
        );
        assert!(
            t.mark_down(2, link, &FailureReason::Closed).is_some(),
            "first"
        );
        assert!(
            t.mark_down(2, link, &FailureReason::Closed).is_none(),
            "only once"
        );
        assert_eq!(t.view(2, |_| false), PeerView::Down);
        assert!(
            t.mark_down(9, link, &FailureReason::Closed).is_none(),
            "unknown peer"
        );
        // A down peer may be dialed again, with a fresh id.
        let b = t.begin_dial(2, dialing).unwrap().expect("a new dial");
        assert!(b > link);
        assert!(check_not_self(1, 1).is_err() && check_not_self(1, 2).is_ok());
    }

    #[test]
    fn the_table_is_bounded_by_peers_max() {
        let mut t = PeerTable::<Entry>::default();
        for peer in 0..PEERS_MAX as NodeId {
            assert!(t.begin_dial(peer, dialing).unwrap().is_some());
        }
        assert!(!t.room_for(PEERS_MAX as NodeId));
        assert!(t.room_for(0), "a peer's own slot does not count against it");
        assert!(t.begin_dial(PEERS_MAX as NodeId, dialing).is_err());
        let link = t.get(0).unwrap().link;
        t.mark_down(0, link, &FailureReason::LocalClose);
        assert!(
            t.room_for(PEERS_MAX as NodeId),
            "a down entry frees its slot"
        );
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
