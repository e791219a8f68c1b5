//! Which parts of a region each peer may write ([`Region::limit_peer_writes`]): the
//! owner's statement of the protocol's rule "a member writes only its own rows and slots",
//! which a backend that applies its peers' writes itself (tcp, the simulator) enforces.

use std::ops::Range;

use super::Region;
use crate::{Error, NodeId, Result, WORD_BYTES};

/// Most byte ranges one peer may be granted in one region: a member's control row, its
/// ring, and room for a layout that splits them.
pub const PEER_WRITE_RANGES_MAX: usize = 8;

/// The byte ranges of one region each peer may write; a peer not named may write none.
/// Built by the region's owner and handed to [`Region::limit_peer_writes`].
///
/// ```
/// use spindle_transport_rdma::{PeerWrites, Region};
///
/// let region = Region::new_heap(1, 256).unwrap();
/// let mut grants = PeerWrites::default();
/// grants.grant(7, 0..64).unwrap(); // peer 7's row
/// grants.grant(7, 128..256).unwrap(); // and its ring
/// region.limit_peer_writes(grants).unwrap();
/// assert!(region.peer_may_write(7, 128, 8));
/// assert!(!region.peer_may_write(7, 64, 8)); // not its own
/// assert!(!region.peer_may_write(8, 0, 8)); // a peer not named
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerWrites {
    /// Per peer, ascending by node: its ranges, each non-empty.
    peers: Vec<(NodeId, Vec<Range<usize>>)>,
}

impl PeerWrites {
    /// Lets `peer` write `range` (more ranges add up); an error (never a panic) for an
    /// empty or reversed range, or past [`PEER_WRITE_RANGES_MAX`] ranges for one peer.
    pub fn grant(&mut self, peer: NodeId, range: Range<usize>) -> Result<&mut PeerWrites> {
        if range.is_empty() {
            return Err(Error::Config(format!(
                "peer {peer}: the empty write range {range:?}"
            )));
        }
        let at = match self.peers.binary_search_by_key(&peer, |(p, _)| *p) {
            Ok(at) => at,
            Err(at) => {
                self.peers.insert(at, (peer, Vec::new()));
                at
            }
        };
        let ranges = &mut self.peers[at].1;
        if ranges.len() >= PEER_WRITE_RANGES_MAX {
            return Err(Error::Config(format!(
                "peer {peer}: more than PEER_WRITE_RANGES_MAX ({PEER_WRITE_RANGES_MAX}) write \
                 ranges"
            )));
        }
        ranges.push(range);
        Ok(self)
    }

    /// Every one of `peers` may write all of a region of `len` bytes (a region any member
    /// of a group writes into, but no one outside it).
    pub fn whole_to(peers: impl IntoIterator<Item = NodeId>, len: usize) -> Result<PeerWrites> {
        let mut grants = PeerWrites::default();
        for p in peers {
            grants.grant(p, 0..len)?;
        }
        Ok(grants)
    }

    /// Whether `peer` may write `len` bytes at `offset`: the whole range lies inside one
    /// of its grants (an empty write anywhere a grant begins or ends counts as inside).
    pub fn allows(&self, peer: NodeId, offset: usize, len: usize) -> bool {
        let Ok(at) = self.peers.binary_search_by_key(&peer, |(p, _)| *p) else {
            return false;
        };
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        self.peers[at]
            .1
            .iter()
            .any(|r| r.start <= offset && end <= r.end)
    }
}

impl Region {
    /// From now on, a peer's write that this process applies (tcp's link readers, the
    /// simulator) must lie inside what `grants` gives that peer — payload and guard word
    /// alike — or it is refused and the peer's link fails as malformed, naming the range.
    /// Peers that write the memory directly (shm's mappings, RDMA devices) are not seen:
    /// [`crate::Endpoint::enforces_peer_writes`] says which backends check. Once per
    /// region; errors (never panics) on a second call or a grant past the region's end.
    pub fn limit_peer_writes(&self, grants: PeerWrites) -> Result<()> {
        for (peer, ranges) in &grants.peers {
            for r in ranges {
                self.check_range(r.start, r.end - r.start).map_err(|_| {
                    Error::Config(format!(
                        "region {}: peer {peer}'s write range {r:?} is past its {} bytes",
                        self.id(),
                        self.len()
                    ))
                })?;
            }
        }
        self.inner.grants.set(grants).map_err(|_| {
            Error::Config(format!(
                "region {}: its peers' writes are limited already",
                self.id()
            ))
        })
    }

    /// Whether `peer` may write `len` bytes at `offset` of this region: true everywhere
    /// until [`Region::limit_peer_writes`], then only inside the peer's grants.
    pub fn peer_may_write(&self, peer: NodeId, offset: usize, len: usize) -> bool {
        self.inner
            .grants
            .get()
            .is_none_or(|g| g.allows(peer, offset, len))
    }

    /// Why `peer`'s write of `len` bytes at `offset`, and the guard word at
    /// `guard_offset` if it has one, lie outside what this region lets `peer` write, if
    /// they do: the refusal a backend that applies its peers' writes reports
    /// ([`crate::Endpoint::enforces_peer_writes`]).
    pub fn peer_write_refused(
        &self,
        peer: NodeId,
        offset: usize,
        len: usize,
        guard_offset: Option<usize>,
    ) -> Option<String> {
        let outside = |what: &str, at: usize, n: usize| {
            format!(
                "peer {peer}'s {what} of {n} bytes at {at} of region {} lies outside what it \
                 may write",
                self.id()
            )
        };
        if !self.peer_may_write(peer, offset, len) {
            return Some(outside("write", offset, len));
        }
        match guard_offset {
            Some(g) if !self.peer_may_write(peer, g, WORD_BYTES) => {
                Some(outside("guard", g, WORD_BYTES))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_writes_only_inside_one_of_its_grants() {
        let mut g = PeerWrites::default();
        g.grant(3, 64..128).unwrap().grant(1, 0..64).unwrap();
        g.grant(3, 256..512).unwrap();
        assert!(g.allows(3, 64, 64));
        assert!(g.allows(3, 300, 8));
        assert!(g.allows(1, 0, 64));
        // Straddling two grants, or one grant's end, is outside.
        assert!(!g.allows(3, 120, 16));
        assert!(!g.allows(3, 500, 16));
        assert!(!g.allows(1, 64, 8));
        assert!(!g.allows(2, 0, 8), "a peer not named writes nothing");
        assert!(
            !g.allows(3, usize::MAX, 8),
            "an overflowing range is outside"
        );
    }

    #[test]
    fn bad_grants_are_named_errors() {
        let mut g = PeerWrites::default();
        let e = g.grant(4, 8..8).unwrap_err().to_string();
        assert!(e.contains("peer 4") && e.contains("empty"), "{e}");
        for k in 0..PEER_WRITE_RANGES_MAX {
            g.grant(4, k * 8..k * 8 + 8).unwrap();
        }
        let e = g.grant(4, 0..8).unwrap_err().to_string();
        assert!(e.contains("PEER_WRITE_RANGES_MAX"), "{e}");
        let r = Region::new_heap(9, 64).unwrap();
        let mut past = PeerWrites::default();
        past.grant(4, 32..72).unwrap();
        let e = r.limit_peer_writes(past).unwrap_err().to_string();
        assert!(e.contains("region 9") && e.contains("32..72"), "{e}");
        assert!(
            r.peer_may_write(4, 0, 64),
            "no limit set: every write allowed"
        );
        let mut ok = PeerWrites::default();
        ok.grant(4, 0..8).unwrap();
        r.limit_peer_writes(ok.clone()).unwrap();
        let e = r.limit_peer_writes(ok).unwrap_err().to_string();
        assert!(e.contains("limited already"), "{e}");
        assert!(r.peer_may_write(4, 0, 8) && !r.peer_may_write(4, 8, 8));
    }
}
