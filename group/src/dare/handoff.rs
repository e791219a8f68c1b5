//! Handing a DARE group over to the next view (the engine's view change, not DARE's own
//! reconfiguration): the pieces a view change needs, sans-IO like the core.
//!
//! At a view change every surviving member stops stepping its [`DareNode`] (the old
//! instance is quiesced; its regions are withdrawn by the driver) and reports its log
//! ([`DareNode::handoff_report`]: log term, tail, applied). [`handoff_source`] picks the
//! log an election would pick — the highest `(log term, tail)` — which holds every
//! committed entry (leader completeness: the leader that wrote its tail was elected by a
//! majority, which met every earlier commit's majority, and a new-term tail reaches a
//! follower only once it holds that leader's whole elected log), hence everything any
//! member delivered, crashed ones included. Its entries from the least `applied` of the
//! survivors up to its tail are shipped ([`DareNode::entries_since`]) and every survivor
//! delivers the ones it lacks ([`DareNode::catch_up`]): all survivors end the old
//! instance at one index of one order, nothing delivered twice. Entries past that tail
//! were never committed; their senders still hold them: [`DareNode::into_pending`] hands
//! each survivor's undelivered messages to the next view's instance, which sends them
//! again (under new sequence numbers). A crashed sender's undelivered messages are lost,
//! as in atomic mode.
//!
//! The shipped range is in the source's ring as long as the survivors were linked to the
//! old leader: it reuses a slot only once every linked member delivered its previous
//! entry, so linked members are less than a ring apart. A member left out as
//! [`super::DareEvent::Lagging`] may be further behind; [`DareNode::entries_since`]
//! then fails with an error naming the index, and that member needs a state transfer.

use spindle_transport_rdma::NodeId;

use super::{DareDelivery, DareNode};
use crate::{Error, Result};

/// What a quiesced member reports to the view change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DareReport {
    /// The member.
    pub node: NodeId,
    /// The term of the leader that last wrote its log's `tail`.
    pub log_term: u64,
    /// Its log's `tail`.
    pub tail: u64,
    /// The index it delivered up to.
    pub applied: u64,
}

/// The survivor whose log the next view continues, and the range `(from, to]` of log
/// indexes every survivor ends the old instance with: the report with the highest
/// `(log term, tail)` (ties to the lowest node id), `from` the least `applied`, `to` its
/// tail. `None` if `reports` is empty. An error if a survivor delivered past that tail
/// (it cannot happen while the core's invariants hold; the text names both members).
pub fn handoff_source(reports: &[DareReport]) -> Result<Option<(NodeId, u64, u64)>> {
    let Some(from) = reports.iter().map(|r| r.applied).min() else {
        return Ok(None);
    };
    let src = reports
        .iter()
        .max_by(|a, b| {
            (a.log_term, a.tail)
                .cmp(&(b.log_term, b.tail))
                .then(b.node.cmp(&a.node))
        })
        .expect("not empty");
    if let Some(r) = reports.iter().find(|r| r.applied > src.tail) {
        return Err(Error::Protocol(format!(
            "dare: hand-off: node {} delivered up to {}, past the tail {} of node {}'s log \
             (log term {})",
            r.node, r.applied, src.tail, src.node, src.log_term
        )));
    }
    Ok(Some((src.node, from, src.tail)))
}

impl DareNode {
    /// This member's report to a view change (call once it no longer steps).
    pub fn handoff_report(&self) -> DareReport {
        // A member that never stepped has no log yet.
        let (tail, log_term) = if self.log_key.is_some() {
            self.last_entry()
        } else {
            (0, 0)
        };
        DareReport {
            node: self.me,
            log_term,
            tail,
            applied: self.applied,
        }
    }

    /// The entries of this member's log after index `from` up to its tail, in order —
    /// what a view change ships to the survivors. An error names the first index no
    /// longer in the ring.
    pub fn entries_since(&self, from: u64) -> Result<Vec<DareDelivery>> {
        let (tail, _) = self.last_entry();
        let mut out = Vec::new();
        for k in from + 1..=tail {
            let e = self.read_entry(k).map_err(|e| {
                Error::Protocol(format!(
                    "dare: node {}: entry {k} left the ring ({e}): the member that needs \
                     it needs a state transfer",
                    self.me
                ))
            })?;
            out.push(DareDelivery {
                index: k,
                term: e.term,
                sender: self.members[e.sender as usize],
                sender_seq: e.sender_seq,
                payload: e.payload,
            });
        }
        Ok(out)
    }
    /// Delivers the entries of `entries` past this member's [`DareNode::applied`], as the
    /// view change shipped them from the survivor that delivered most (they come back by
    /// [`DareNode::poll_delivery`]). The entries must continue this member's log: index
    /// by index from `applied + 1` at the latest, each sender's messages in sequence;
    /// anything else is an error naming the entry, and nothing is delivered.
    pub fn catch_up(&mut self, entries: &[DareDelivery]) -> Result<()> {
        let bad = |what: String| Err(Error::Protocol(format!("dare: catch-up: {what}")));
        let mut next = self.applied + 1;
        let mut seq = self.delivered_seq.clone();
        let mut take = Vec::new();
        let mut own = 0;
        for d in entries {
            if d.index < next {
                continue;
            }
            if d.index != next {
                return bad(format!("entry {} where {next} was due", d.index));
            }
            let Some(s) = self.members.iter().position(|&m| m == d.sender) else {
                return bad(format!(
                    "entry {} from node {}, not a member",
                    d.index, d.sender
                ));
            };
            if d.sender_seq != seq[s] + 1 {
                return bad(format!(
                    "entry {} is message {} of node {}, expected {}",
                    d.index,
                    d.sender_seq,
                    d.sender,
                    seq[s] + 1
                ));
            }
            if s == self.rank {
                if self.pending.get(own).map(|p| p.0) != Some(d.sender_seq) {
                    return bad(format!(
                        "entry {} is own message {}, not the next pending",
                        d.index, d.sender_seq
                    ));
                }
                own += 1;
            }
            seq[s] = d.sender_seq;
            next += 1;
            take.push(d);
        }
        for d in take {
            let s = self
                .members
                .iter()
                .position(|&m| m == d.sender)
                .expect("checked above");
            if s == self.rank {
                self.pending.pop_front();
                self.pending_sent = self.pending_sent.saturating_sub(1);
            }
            self.delivered_seq[s] = d.sender_seq;
            self.applied = d.index;
            self.deliveries.push_back(d.clone());
        }
        Ok(())
    }

    /// Ends this member's part of the group: its messages not delivered here, oldest
    /// first, for the next view's instance to send again.
    pub fn into_pending(self) -> Vec<Vec<u8>> {
        self.pending.into_iter().map(|(_, p)| p).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_the_log_an_election_would_pick_ties_to_the_lowest_id() {
        let r = |node, log_term, tail, applied| DareReport {
            node,
            log_term,
            tail,
            applied,
        };
        assert_eq!(handoff_source(&[]).expect("ok"), None);
        // A higher log term wins over a longer log of an older term.
        assert_eq!(
            handoff_source(&[r(3, 2, 9, 5), r(1, 3, 7, 6), r(2, 3, 6, 6)]).expect("ok"),
            Some((1, 5, 7))
        );
        assert_eq!(
            handoff_source(&[r(4, 1, 6, 6), r(2, 1, 6, 4)]).expect("ok"),
            Some((2, 4, 6))
        );
        // Delivered past the chosen tail: an error naming both, not a panic.
        let e = handoff_source(&[r(1, 3, 4, 4), r(2, 2, 9, 8)])
            .expect_err("inconsistent")
            .to_string();
        assert!(e.contains("node 2") && e.contains("node 1"), "{e}");
    }
}
