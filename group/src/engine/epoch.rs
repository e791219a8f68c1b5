//! Epoch termination (Derecho 3.6), driven by the group layer ([`crate::group`]): the
//! wedge, the frozen counters, delivery up to the ragged trim, and what is re-sent after it.

use spindle_transport_rdma::{NodeId, WORD_BYTES};

use super::{Engine, Halt};
use crate::error::{Error, Result};
use crate::large::Large;
use crate::layout::{DeliveryMode, SubgroupId, NULL_LEN, RDMC_LEN, SLOT_HEADER_BYTES};

impl Engine {
    /// Wedges every subgroup: no more sends, receipts or deliveries in this view (the
    /// first step of epoch termination, Derecho 3.6). The received counters are frozen
    /// from here on ([`Engine::received`]); application sends fail with
    /// [`Error::Wedged`].
    ///
    /// A dare subgroup's core stops stepping (quiesced) and its log region is withdrawn
    /// ([`Engine::take_withdrawn_regions`]): its leader's writes no longer land, so the
    /// log the core reports for the hand-off stays what it reported.
    pub fn wedge(&mut self) {
        self.wedged = true;
        for s in &mut self.subgroups {
            s.halt = Halt::Stopped;
            if let Some(ring) = &s.ring {
                ring.stop();
            }
            if let Some(d) = &mut s.dare {
                let log = d.core.as_ref().and_then(|c| c.log_region_id());
                d.withdrawn.extend(log);
            }
        }
    }

    /// True once [`Engine::wedge`] ran.
    pub fn is_wedged(&self) -> bool {
        self.wedged
    }

    /// Messages received from each sender of `subgroup` (by sender rank); frozen once the
    /// engine is wedged.
    pub fn received(&self, subgroup: SubgroupId) -> Result<&[u64]> {
        Ok(&self.state(subgroup)?.received)
    }

    /// Delivers, in order, every message of `subgroup` before its ragged trim. `cuts[r]`
    /// is how many messages of sender rank `r` the trim keeps. Atomic mode delivers the
    /// round-robin prefix the cuts allow; unordered mode delivers nothing more (its
    /// messages went up on receipt). The trim comes from a peer's row, so a trim this node
    /// cannot honour is an error, not a panic.
    pub fn deliver_to_trim(&mut self, subgroup: SubgroupId, cuts: &[u64]) -> Result<()> {
        let i = self.subgroup_index(subgroup)?;
        let s = &self.subgroups[i];
        if s.dare.is_some() {
            // A dare subgroup ends its instance by the hand-off (`Engine::end_dare`).
            return Ok(());
        }
        if cuts.len() != s.geom.senders {
            return Err(Error::Protocol(format!(
                "trim of subgroup {subgroup} has {} cuts for {} senders",
                cuts.len(),
                s.geom.senders
            )));
        }
        if s.spec.mode != DeliveryMode::Atomic {
            return Ok(());
        }
        let n = s.geom.senders as u64;
        let trim = cuts
            .iter()
            .enumerate()
            .map(|(r, c)| c.saturating_mul(n).saturating_add(r as u64))
            .min()
            .unwrap_or(0);
        let mut d = s.delivered;
        while d < trim {
            let s = &self.subgroups[i];
            let rank = (d % n) as usize;
            let k = d / n;
            let slot = s.geom.slot(rank, k);
            if k >= s.received[rank] || s.region.load_u64(slot) != k + 1 {
                return Err(Error::Protocol(format!(
                    "trim of subgroup {subgroup} keeps message {k} of sender rank {rank}, \
                     which this node has not received"
                )));
            }
            self.deliver_one(i, rank, k);
            d += 1;
        }
        self.finish_deliveries(i);
        Ok(())
    }

    /// This node's application messages in `subgroup` from sequence number `cut` on, in
    /// order (nulls left out): what it re-sends in the next view. `None` while an
    /// application thread still holds a loan on the ring (the view change waits for it).
    pub fn messages_past_trim(
        &self,
        subgroup: SubgroupId,
        cut: u64,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let s = self.state(subgroup)?;
        let Some(ring) = s.ring.as_ref().filter(|_| s.dare.is_none()) else {
            // A dare subgroup's undelivered messages come from `Engine::end_dare`.
            return Ok(Some(Vec::new()));
        };
        let reserved = ring.reserved();
        let committed = ring.advance_committed(s.committed, u64::MAX);
        if committed < reserved {
            return Ok(None);
        }
        let rank = ring.sender_rank;
        let first = cut.max(committed.saturating_sub(s.geom.window_slots as u64));
        let mut out = Vec::new();
        for k in first..committed {
            let slot = s.geom.slot(rank, k);
            let len = s.region.load_u64(slot + WORD_BYTES);
            match (len, &s.large) {
                (NULL_LEN, _) => {}
                (RDMC_LEN, Some(l)) => {
                    let mut bytes = vec![0; Large::size(&s.region, &s.geom, rank, k)];
                    l.peek(&s.region, &s.geom, rank, k, &mut bytes)?;
                    out.push(bytes);
                }
                _ => out.push(s.region.to_vec(slot + SLOT_HEADER_BYTES, len as usize)?),
            }
        }
        Ok(Some(out))
    }

    /// How many of sender rank `rank`'s messages in `subgroup`, from sequence number
    /// `from` on, this node already holds for the application: application messages
    /// (nulls left out) it received, plus re-sends it delivered in an earlier view and has
    /// not received here yet (see [`Engine::skip_resent`]). After a trim at `from`, this
    /// is how many of the sender's re-sends in the next view this node must skip.
    pub fn messages_held_from(&self, subgroup: SubgroupId, rank: usize, from: u64) -> Result<u64> {
        let s = self.state(subgroup)?;
        let received = *s
            .received
            .get(rank)
            .ok_or(Error::UnknownSubgroup { subgroup })?;
        let first = from.max(received.saturating_sub(s.geom.window_slots as u64));
        let app = (first..received)
            .filter(|k| s.region.load_u64(s.geom.slot(rank, *k) + WORD_BYTES) != NULL_LEN)
            .count() as u64;
        // Re-sends are never nulls, so the skipped ones not received yet count whole.
        Ok(app + s.skip[rank].saturating_sub(received))
    }

    /// The first `count` messages of `sender` in `subgroup` in this view are re-sends
    /// this node already delivered in the previous view: they count as received and
    /// delivered but are not handed up again (unordered mode; atomic mode never needs it,
    /// nothing past the trim was delivered anywhere).
    pub fn skip_resent(&mut self, subgroup: SubgroupId, sender: NodeId, count: u64) -> Result<()> {
        let i = self.subgroup_index(subgroup)?;
        let s = &mut self.subgroups[i];
        if let Some(rank) = s.senders.iter().position(|x| *x == sender) {
            s.skip[rank] = count;
        }
        Ok(())
    }
}
