//! Byte geometry of a DARE member's two regions, and the packed words they hold.
//!
//! **Control region** (one per member, registered once under [`DARE_CTRL_REGION_ID`]),
//! arrays of words indexed by the *writer's* rank `r` among `n` members:
//!
//! | words            | written by `r`, read by the owner                                 |
//! |------------------|-------------------------------------------------------------------|
//! | `hb[r]`          | leader `r`'s heartbeat: `pack(term, counter)`                      |
//! | `vote_req[r]`    | candidate `r`'s vote request: `last_index`, `last_term`, `term` (guard) |
//! | `grant[r]`       | voter `r`'s vote for the owner: the term it was granted in        |
//! | `hello[r]`       | follower `r`'s first word to the owner as leader: `pack(term, commit)` |
//! | `ack[r]`, `applied[r]` | follower `r`: `pack(term, tail)` it holds from this leader, and the index it has delivered |
//!
//! **Log region** (one per member, *re-keyed* every term: registered under
//! [`log_region_id`]`(term)`, the previous key withdrawn — DARE's QP reset): a header of
//! `tail = pack(term, index)` and `commit` written by the leader, then a ring of
//! `log_entries` slots, slot of index `k` at `(k - 1) % log_entries`, each an
//! [`ENTRY_HEADER_BYTES`] header (`index`, `term`, `sender rank | payload length`,
//! `sender_seq`) and the payload.

use spindle_transport_rdma::{NodeId, PeerWrites, RegionId, WORD_BYTES};

use crate::error::Result;

/// Region id of every member's control region.
pub const DARE_CTRL_REGION_ID: RegionId = 0x4441_5245;
/// Base of the log regions' ids: the log for `term` is `DARE_LOG_REGION_BASE + term`.
pub const DARE_LOG_REGION_BASE: RegionId = 0x5000_0000;
/// Largest term: terms are packed into the top 24 bits of a word. An election past it
/// stops the member with an error (16 million elections).
pub const DARE_TERM_MAX: u64 = (1 << 24) - 1;
/// Largest log index: indexes fill the low 40 bits of a packed word.
pub const DARE_INDEX_MAX: u64 = (1 << 40) - 1;
/// Bytes of an entry's header in a log slot.
pub const ENTRY_HEADER_BYTES: usize = 4 * WORD_BYTES;
/// Bytes of the log region's header (`tail`, `commit`, two spare words).
pub const LOG_HEADER_BYTES: usize = 4 * WORD_BYTES;
/// Offset of the `tail` word in the log region.
pub const LOG_TAIL_OFFSET: usize = 0;
/// Offset of the `commit` word in the log region.
pub const LOG_COMMIT_OFFSET: usize = WORD_BYTES;

const _: () = assert!(DARE_LOG_REGION_BASE as u64 + DARE_TERM_MAX < u32::MAX as u64);

/// The id the log region is registered under in `term` (a group of its own: base
/// [`DARE_LOG_REGION_BASE`]).
pub fn log_region_id(term: u64) -> RegionId {
    log_region_id_at(DARE_LOG_REGION_BASE, term)
}

/// The id the log region is registered under in `term` when the group's log ids start
/// at `base` (an engine's dare subgroups each take their own base, see
/// [`crate::dare::DareNode::with_log_region_base`]).
pub fn log_region_id_at(base: RegionId, term: u64) -> RegionId {
    assert!(term <= DARE_TERM_MAX, "term {term} beyond DARE_TERM_MAX");
    base + term as RegionId
}

/// `term` and `index` in one word (so a reader never sees one without the other).
pub fn pack(term: u64, index: u64) -> u64 {
    assert!(term <= DARE_TERM_MAX && index <= DARE_INDEX_MAX);
    (term << 40) | index
}

/// The `(term, index)` of a packed word.
pub fn unpack(word: u64) -> (u64, u64) {
    (word >> 40, word & DARE_INDEX_MAX)
}

/// Offsets into a control region of `n` members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtrlLayout {
    n: usize,
}

impl CtrlLayout {
    /// The layout for `n` members.
    pub fn new(n: usize) -> CtrlLayout {
        CtrlLayout { n }
    }
    /// Bytes of the region.
    pub fn bytes(&self) -> usize {
        8 * self.n * WORD_BYTES
    }
    /// `hb[rank]`.
    pub fn hb(&self, rank: usize) -> usize {
        rank * WORD_BYTES
    }
    /// `vote_req[rank]`: three words, the last (the term) is the guard.
    pub fn vote_req(&self, rank: usize) -> usize {
        (self.n + 3 * rank) * WORD_BYTES
    }
    /// `grant[rank]`.
    pub fn grant(&self, rank: usize) -> usize {
        (4 * self.n + rank) * WORD_BYTES
    }
    /// `hello[rank]`.
    pub fn hello(&self, rank: usize) -> usize {
        (5 * self.n + rank) * WORD_BYTES
    }
    /// `ack[rank]`, followed by `applied[rank]` (written together).
    pub fn ack(&self, rank: usize) -> usize {
        (6 * self.n + 2 * rank) * WORD_BYTES
    }
    /// `applied[rank]`.
    pub fn applied(&self, rank: usize) -> usize {
        self.ack(rank) + WORD_BYTES
    }
    /// What each other member may write into `me`'s control region: the words indexed
    /// by its own rank, which only it writes (`Region::limit_peer_writes`).
    pub fn peer_writes(&self, members: &[NodeId], me: NodeId) -> Result<PeerWrites> {
        let mut grants = PeerWrites::default();
        for (r, &m) in members.iter().enumerate().filter(|(_, m)| **m != me) {
            for (at, words) in [
                (self.hb(r), 1),
                (self.vote_req(r), 3),
                (self.grant(r), 1),
                (self.hello(r), 1),
                (self.ack(r), 2),
            ] {
                grants.grant(m, at..at + words * WORD_BYTES)?;
            }
        }
        Ok(grants)
    }
}

/// Offsets into a log region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLayout {
    /// Slots in the ring.
    pub entries: usize,
    /// Bytes of one slot (header and largest payload, whole words).
    pub slot_bytes: usize,
}

impl LogLayout {
    /// The layout for a ring of `entries` slots carrying payloads up to
    /// `payload_bytes_max`.
    pub fn new(entries: usize, payload_bytes_max: usize) -> LogLayout {
        let payload = payload_bytes_max.div_ceil(WORD_BYTES) * WORD_BYTES;
        LogLayout {
            entries,
            slot_bytes: ENTRY_HEADER_BYTES + payload,
        }
    }
    /// Bytes of the region.
    pub fn bytes(&self) -> usize {
        LOG_HEADER_BYTES + self.entries * self.slot_bytes
    }
    /// Offset of the slot holding index `index` (1-based).
    pub fn slot(&self, index: u64) -> usize {
        debug_assert!(index >= 1);
        LOG_HEADER_BYTES + ((index - 1) as usize % self.entries) * self.slot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_and_regions_do_not_overlap() {
        assert_eq!(unpack(pack(7, 12345)), (7, 12345));
        assert_eq!(
            unpack(pack(DARE_TERM_MAX, DARE_INDEX_MAX)),
            (DARE_TERM_MAX, DARE_INDEX_MAX)
        );
        let c = CtrlLayout::new(5);
        assert!(c.hb(4) < c.vote_req(0));
        assert!(c.vote_req(4) + 2 * WORD_BYTES < c.grant(0));
        assert!(c.grant(4) < c.hello(0));
        assert!(c.hello(4) < c.ack(0));
        assert_eq!(c.applied(4) + WORD_BYTES, c.bytes());
        let l = LogLayout::new(4, 10);
        assert_eq!(l.slot_bytes, ENTRY_HEADER_BYTES + 16);
        assert_eq!(l.slot(1), l.slot(5));
        assert_eq!(l.slot(4) + l.slot_bytes, l.bytes());
    }

    #[test]
    fn each_member_may_write_the_control_words_of_its_own_rank_only() {
        let members = [10, 11, 12, 13, 14];
        let c = CtrlLayout::new(members.len());
        let g = c.peer_writes(&members, 12).unwrap();
        let w = WORD_BYTES;
        for (r, &m) in members.iter().enumerate() {
            // Every word of the region: writable by `m` exactly when it is one of rank r's.
            let own = [
                c.hb(r),
                c.vote_req(r),
                c.vote_req(r) + w,
                c.vote_req(r) + 2 * w,
                c.grant(r),
                c.hello(r),
                c.ack(r),
                c.applied(r),
            ];
            for at in (0..c.bytes()).step_by(w) {
                let may = g.allows(m, at, w);
                assert_eq!(
                    may,
                    m != 12 && own.contains(&at),
                    "member {m} (rank {r}), word at {at}"
                );
            }
        }
    }
}
