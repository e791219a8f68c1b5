//! The predicates of one step (Derecho 3.3, Spindle III): send, receive with null-sends,
//! delivery, and the control row's acknowledgements.

use spindle_transport_rdma::{NodeId, Region, WORD_BYTES};

use super::{push_to_peers, Engine, Halt};
use super::{
    DELIVERY_BATCH_MAX, DELIVERY_QUEUE_MAX, DELIVERY_STEP_BYTES_MAX, PUSH_BYTES_MAX,
    PUSH_GAP_BYTES_MIN, PUSH_QUEUE_MAX, RECEIVE_BATCH_MAX, SEND_BATCH_MAX,
};
use crate::layout::{DeliveryMode, NULL_LEN, RDMC_LEN, SLOT_HEADER_BYTES};

impl Engine {
    /// Evaluates every subgroup's predicates once, starting from a different subgroup each
    /// time (fairness), and serving first the subgroups that did not use their whole byte
    /// budget ([`DELIVERY_STEP_BYTES_MAX`]) in the step before: a quiet subgroup's pushes
    /// and deliveries are queued before a busy one's, and a busy one copies at most its
    /// budget before the step ends. Returns true if anything happened (a driver spins
    /// while it does).
    pub fn step(&mut self) -> bool {
        self.stats.steps += 1;
        let n = self.subgroups.len();
        if n == 0 {
            return false;
        }
        let start = self.next_start;
        self.next_start = (start + 1) % n;
        for s in &mut self.subgroups {
            s.deferred = std::mem::take(&mut s.saturated);
        }
        let mut work = false;
        for deferred in [false, true] {
            for j in 0..n {
                let i = (start + j) % n;
                if self.subgroups[i].deferred == deferred {
                    work |= self.step_subgroup(i);
                }
            }
        }
        // Threads parked on a full window (`Sender::wait_for_room`), whatever moved it:
        // this step's deliveries, a peer's counters, an RDMC buffer freed, a DARE commit.
        for s in &self.subgroups {
            if let Some(ring) = &s.ring {
                ring.wake_room_waiters();
            }
        }
        work
    }

    /// Takes `bytes` from the running predicate's budget, and marks the subgroup
    /// saturated (served last in the next step) once the budget is used up.
    fn spend(&mut self, i: usize, bytes: usize) {
        self.step_budget = self.step_budget.saturating_sub(bytes);
        let s = &mut self.subgroups[i];
        if self.step_budget == 0 && !s.saturated {
            s.saturated = true;
            self.stats.budget_stops += 1;
        }
    }

    fn step_subgroup(&mut self, i: usize) -> bool {
        if self.subgroups[i].halt != Halt::Running || self.is_dare(i) {
            // A dare subgroup runs in `Engine::step_dare`, which takes the time.
            return false;
        }
        let mut work = self.send_predicate(i);
        match self.step_large(i) {
            Ok(w) => work |= w,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        }
        let received = match self.receive_predicate(i) {
            Ok(r) => r,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        };
        work |= received;
        if self.null_send(i) {
            work = true;
            self.send_predicate(i);
        }
        match self.delivery_predicate(i) {
            Ok(delivered) => work |= delivered,
            Err((peer, detail)) => {
                self.misbehaved(i, peer, detail);
                return true;
            }
        }
        work |= self.flush_ctrl(i);
        self.track_persisted(i);
        let s = &mut self.subgroups[i];
        if s.large.as_mut().is_some_and(|l| l.take_wanted())
            && !self.pins_wanted.contains(&s.spec.id)
        {
            // At most one entry per subgroup.
            self.pins_wanted.push_back(s.spec.id);
        }
        work
    }

    /// Runs the subgroup's RDMC groups (crate::large) and frees the send buffers of own
    /// messages every member consumed (the rule that frees a slot, `Ring::refresh_limit`).
    fn step_large(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let s = &mut self.subgroups[i];
        let Some(l) = &mut s.large else {
            return Ok(false);
        };
        // Buffers whose deliveries were given back first, so their ready words go out
        // with this step's writes.
        let released = l.release_unpinned();
        let work = l.step()? | released;
        if let Some(ring) = &s.ring {
            let (g, region, rank) = (&s.geom, &s.region, ring.sender_rank);
            let consumed = |k: u64| {
                (0..g.members).all(|m| match s.spec.mode {
                    DeliveryMode::Atomic => {
                        g.messages_before(rank, region.load_u64(g.delivered_num(m))) > k
                    }
                    DeliveryMode::Unordered | DeliveryMode::Dare(_) => {
                        region.load_u64(g.received_num(m, rank)) > k
                    }
                })
            };
            if let (Some(freed), Some(tx)) = (l.free_own(consumed), &ring.large) {
                tx.freed.store(freed, std::sync::atomic::Ordering::Release);
            }
        }
        Ok(work)
    }

    /// Notes a move of the subgroup's global persistence frontier (a counter; the runtime
    /// reads the frontier with [`Engine::global_persisted_num`]).
    fn track_persisted(&mut self, i: usize) {
        let s = &mut self.subgroups[i];
        if s.persisted == 0 {
            return; // no log here, or nothing durable yet: the minimum cannot move
        }
        let global = Self::min_persisted(s);
        if global > s.global_persisted {
            // Invariant: the minimum includes this node's own frontier, so a peer's word,
            // whatever its bytes, never lifts it above what this node made durable.
            assert!(
                global <= s.persisted,
                "the minimum exceeds this node's own frontier"
            );
            s.global_persisted = global;
            self.stats.persisted_frontier_moves += 1;
        }
    }

    /// Send predicate: advance over committed slots of this node's ring and push them.
    fn send_predicate(&mut self, i: usize) -> bool {
        let batch = self.techniques.batch_sends;
        if self.pushes.len() >= PUSH_QUEUE_MAX {
            return false;
        }
        let s = &mut self.subgroups[i];
        let Some(ring) = s.ring.clone() else {
            return false;
        };
        self.step_budget = DELIVERY_STEP_BYTES_MAX;
        // At most the step's budget of full slots (and at least one message): a ring of
        // 64 KiB slots pushes 4 per step, so other subgroups' sends (a ping beside a bulk
        // stream) wait for 256 KiB, not 64 MiB, of copies.
        let send_max =
            SEND_BATCH_MAX.min((self.step_budget / s.geom.slot_payload_bytes.max(1)).max(1) as u64);
        let old_committed = s.committed;
        let committed = ring.advance_committed(s.committed, send_max);
        if committed == s.committed && s.pushed == committed {
            return false;
        }
        let rank = ring.sender_rank;
        if committed > s.committed {
            let old = s.committed;
            if let Some(l) = &mut s.large {
                for k in old..committed {
                    if s.region.load_u64(s.geom.slot(rank, k) + WORD_BYTES) != RDMC_LEN {
                        continue;
                    }
                    if let Err(detail) = l.on_commit(&s.region, &s.geom, k) {
                        let me = self.node;
                        self.misbehaved(i, me, detail);
                        return true;
                    }
                }
            }
            s.committed = committed;
            // Own messages count as received at commit.
            s.received[rank] = committed;
            let my_rank = s.my_rank;
            s.region
                .store_u64(s.geom.received_num(my_rank, rank), committed);
            self.note_ctrl(i, rank);
            if self.subgroups[i].spec.mode == DeliveryMode::Unordered {
                for k in old..committed {
                    self.deliver_one(i, rank, k);
                }
                self.finish_deliveries(i);
            }
        }
        let s = &mut self.subgroups[i];
        let w = s.geom.window_slots as u64;
        let mut pushed_bytes = 0;
        let slots_per_chunk = if batch {
            (PUSH_BYTES_MAX / s.geom.slot_bytes).max(1) as u64
        } else {
            1
        };
        while s.pushed < s.committed {
            let first = s.pushed;
            let wrap = w - first % w;
            let n_max = (s.committed - first).min(wrap).min(slots_per_chunk);
            // One push carries a run of whole slots and the last one up to its message's
            // end; a slot whose message leaves `PUSH_GAP_BYTES_MIN` or more of it unused
            // ends the run, so small messages in large slots cross the fabric at about
            // their own size, not the slot's.
            let mut n = 0;
            let mut last_used = 0;
            while n < n_max {
                last_used =
                    slot_used_bytes(&s.region, s.geom.slot(rank, first + n)).min(s.geom.slot_bytes);
                n += 1;
                if s.geom.slot_bytes - last_used >= PUSH_GAP_BYTES_MIN {
                    break;
                }
            }
            let offset = s.geom.slot(rank, first);
            let len = (n as usize - 1) * s.geom.slot_bytes + last_used;
            let guard = Some((s.geom.ring(rank), first + n));
            push_to_peers(&mut self.pushes, &mut self.stats, s, offset, len, guard);
            s.pushed = first + n;
            pushed_bytes += len;
        }
        if committed - old_committed == send_max {
            // Stopped at the budget's count of slots: more may be committed.
            self.spend(i, usize::MAX);
        } else {
            self.spend(i, pushed_bytes);
        }
        true
    }

    /// Receive predicate: take new messages from every other sender's ring. Returns
    /// whether any arrived; `Err` names a member whose ring breaks the protocol.
    fn receive_predicate(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let batch = if self.techniques.batch_receives {
            RECEIVE_BATCH_MAX
        } else {
            1
        };
        let mode = self.subgroups[i].spec.mode;
        let own = self.subgroups[i].ring.as_ref().map(|r| r.sender_rank);
        // One budget for every sender's messages (unordered mode delivers them here).
        self.step_budget = DELIVERY_STEP_BYTES_MAX;
        let senders = self.subgroups[i].geom.senders;
        let mut any = false;
        for rank in 0..senders {
            if Some(rank) == own {
                continue;
            }
            let s = &self.subgroups[i];
            let g = &s.geom;
            let sender = s.senders[rank];
            let published = s.region.load_u64(g.ring(rank));
            let have = s.received[rank];
            if published <= have {
                continue;
            }
            let consumed = match mode {
                DeliveryMode::Atomic => g.messages_before(rank, s.delivered),
                DeliveryMode::Unordered | DeliveryMode::Dare(_) => have,
            };
            if published > consumed + g.window_slots as u64 {
                return Err((
                    sender,
                    format!(
                        "published {published} messages with only {consumed} consumed here \
                         and a window of {}",
                        g.window_slots
                    ),
                ));
            }
            let mut upto = published.min(have + batch);
            let left = self.step_budget;
            let s = &mut self.subgroups[i];
            let g = &s.geom;
            // Unordered mode delivers what it receives: the step's byte budget applies
            // here (at least one message of each sender).
            let mut step_bytes = 0;
            let mut stopped = false;
            for k in have..upto {
                let slot = g.slot(rank, k);
                let tag = s.region.load_u64(slot);
                if tag != k + 1 {
                    return Err((sender, format!("slot of message {k} is tagged {tag}")));
                }
                let len = s.region.load_u64(slot + WORD_BYTES);
                if let (RDMC_LEN, Some(l)) = (len, &mut s.large) {
                    // Received only once its RDMC transfer completed here (Derecho §3.6).
                    if !l.receive(&s.region, g, rank, k).map_err(|e| (sender, e))? {
                        upto = k;
                        break;
                    }
                } else if len != NULL_LEN && len > g.slot_payload_bytes as u64 {
                    return Err((
                        sender,
                        format!(
                            "message {k} claims {len} bytes, the slot holds {}",
                            g.slot_payload_bytes
                        ),
                    ));
                }
                if mode == DeliveryMode::Unordered {
                    let size = match (len, &s.large) {
                        // As received just above (the slot may have changed since).
                        (RDMC_LEN, Some(l)) => l.announced(rank, k).map_or(0, |a| a.size),
                        (NULL_LEN, _) => 0,
                        _ => len as usize,
                    };
                    step_bytes += size.min(s.delivery_prefix);
                    if step_bytes >= left && k + 1 < upto {
                        stopped = true;
                        upto = k + 1;
                        break;
                    }
                }
            }
            if upto == have {
                continue;
            }
            if mode == DeliveryMode::Unordered {
                for k in have..upto {
                    self.try_deliver_one(i, rank, k)?;
                }
            }
            self.spend(i, if stopped { usize::MAX } else { step_bytes });
            let s = &mut self.subgroups[i];
            s.received[rank] = upto;
            let my_rank = s.my_rank;
            s.region.store_u64(s.geom.received_num(my_rank, rank), upto);
            any = true;
            if self.techniques.batch_acks {
                self.note_ctrl(i, rank);
            } else {
                for _ in have..upto {
                    self.note_ctrl(i, rank);
                }
            }
        }
        if mode == DeliveryMode::Unordered {
            self.finish_deliveries(i);
        }
        Ok(any)
    }

    /// Null-send (Spindle III-B): if this node's next turn precedes a message it has
    /// received, fill its turns up to that message with nulls — unless an application
    /// message of its own is being built or waits to be pushed (an active sender fills its
    /// turns itself; a null would only push its message a round later). Evaluated from
    /// the received counters every step, so a turn skipped while the application was busy
    /// is filled once it is idle, and nothing is sent once every sender is caught up
    /// (quiescence). Returns true if it sent any.
    fn null_send(&mut self, i: usize) -> bool {
        let s = &self.subgroups[i];
        if !self.techniques.null_sends || s.spec.mode != DeliveryMode::Atomic {
            return false;
        }
        let Some(ring) = &s.ring else {
            return false;
        };
        let me = ring.sender_rank;
        let Some(highest) = (0..s.geom.senders)
            .filter(|r| *r != me && s.received[*r] > 0)
            .map(|r| s.geom.global_index(r, s.received[r] - 1))
            .max()
        else {
            return false;
        };
        let target = s.geom.messages_before(me, highest);
        let have = ring.reserved();
        if target <= have || have > s.committed {
            return false;
        }
        let sent = ring.reserve_nulls(target - have);
        self.stats.nulls_sent += sent;
        sent > 0
    }

    /// Delivery predicate (atomic mode): deliver, in round-robin order, every message all
    /// members have received.
    fn delivery_predicate(&mut self, i: usize) -> std::result::Result<bool, (NodeId, String)> {
        let s = &self.subgroups[i];
        if s.spec.mode != DeliveryMode::Atomic {
            return Ok(false);
        }
        let g = &s.geom;
        // Stability: the minimum over members of received_num, per sender, computed into
        // the engine's reused scratch (a fresh vector per subgroup per step was the step's
        // most frequent allocation once many subgroups run).
        let mut stable = std::mem::take(&mut self.stable_scratch);
        stable.clear();
        stable.extend_from_slice(&s.received);
        for m in (0..g.members).filter(|m| *m != s.my_rank) {
            for (rank, v) in stable.iter_mut().enumerate() {
                *v = (*v).min(s.region.load_u64(g.received_num(m, rank)));
            }
        }
        let delivered = self.deliver_stable(i, &stable);
        self.stable_scratch = stable;
        delivered
    }

    /// Delivers, in round-robin order, the messages below `stable` (per sender, the
    /// minimum over members of `received_num`), at most a batch's worth.
    fn deliver_stable(
        &mut self,
        i: usize,
        stable: &[u64],
    ) -> std::result::Result<bool, (NodeId, String)> {
        let senders = self.subgroups[i].geom.senders as u64;
        let stable_total: u64 = stable.iter().sum();
        let s = &mut self.subgroups[i];
        if stable_total > s.stable_seen {
            self.stats.stable += stable_total - s.stable_seen;
            s.stable_seen = stable_total;
        }
        let s = &self.subgroups[i];
        let bound = if self.techniques.batch_deliveries {
            DELIVERY_BATCH_MAX
        } else {
            1
        };
        if self.deliveries.len() >= DELIVERY_QUEUE_MAX {
            return Ok(false);
        }
        let start = s.delivered;
        let mut d = start;
        let mut copied = 0;
        self.step_budget = DELIVERY_STEP_BYTES_MAX;
        let left = self.step_budget;
        while d - start < bound {
            let rank = (d % senders) as usize;
            let k = d / senders;
            if k >= stable[rank] {
                break;
            }
            // Invariant: a message is delivered only after this node received it (its own
            // received_num is part of the minimum).
            assert!(
                k < self.subgroups[i].received[rank],
                "delivering message {k} of sender {rank} before receiving it"
            );
            // The slot is checked again against what was received (its sender can still
            // write it): a change is the sender's breach.
            copied += self.try_deliver_one(i, rank, k)?;
            d += 1;
            if !self.techniques.batch_acks {
                // One ack per delivered message (the unbatched baseline).
                self.finish_deliveries(i);
            }
            if copied >= left {
                // More may be stable: the rest waits for the next step.
                self.spend(i, usize::MAX);
                break;
            }
        }
        if d == start {
            return Ok(false);
        }
        if copied < left {
            self.spend(i, copied);
        }
        self.finish_deliveries(i);
        Ok(true)
    }

    /// Word `word` of this node's control row changed: push it now (acks unbatched) or
    /// at the end of the step (batched).
    pub(super) fn note_ctrl(&mut self, i: usize, word: usize) {
        let s = &mut self.subgroups[i];
        s.ctrl_dirty = Some(match s.ctrl_dirty {
            None => (word, word),
            Some((lo, hi)) => (lo.min(word), hi.max(word)),
        });
        if !self.techniques.batch_acks {
            self.flush_ctrl(i);
        }
    }

    /// Pushes the changed words of this node's control row to the other members.
    fn flush_ctrl(&mut self, i: usize) -> bool {
        let s = &mut self.subgroups[i];
        let Some((lo, hi)) = s.ctrl_dirty.take() else {
            return false;
        };
        let offset = s.geom.ctrl_row(s.my_rank) + lo * WORD_BYTES;
        let len = (hi - lo + 1) * WORD_BYTES;
        push_to_peers(&mut self.pushes, &mut self.stats, s, offset, len, None);
        true
    }
}

/// The bytes of the slot at `slot` that hold its message: the header and the payload,
/// rounded up to whole words (a null's and an RDMC announcement's as the layout says).
fn slot_used_bytes(region: &Region, slot: usize) -> usize {
    let payload = match region.load_u64(slot + WORD_BYTES) {
        NULL_LEN => 0,
        RDMC_LEN => crate::layout::RDMC_ANNOUNCE_BYTES,
        len => spindle_transport_rdma::round_up_to_words(len as usize),
    };
    SLOT_HEADER_BYTES + payload
}
