//! The sim fabric's bandwidth model ([`super::SimConfig::link_rate_bytes_per_s`]) and the
//! writes that carry only their length ([`SimEndpoint::write_phantom`]).
//!
//! **Bandwidth.** With a link rate set, every node has one NIC with a send side and a
//! receive side, each moving one transfer at a time at that rate. What a node posts
//! (writes, sends, and its control deliveries, which carry no bytes and so take no time
//! but keep their place in the order) waits in its NIC's queue, first in first out. When a
//! transfer reaches the head of the queue, at time `h` (its post time, or when the one
//! before it finished), it takes the receiver's receive side: it starts at
//! `max(h, receive side free)`, occupies both sides for `len / rate`, and lands the drawn
//! link delay (the per-transfer latency) after its last byte crossed:
//! `due = max(post, send side free, receive side free) + len / rate + delay`.
//!
//! The sides are busy for the transfer time, not the latency: a NIC starts its next
//! transfer while the previous one is on the wire, as a real one does and as the schedule
//! model of the RDMC paper (§4.2) and `spindle_group::rdmc::model` assume. The receive
//! side is taken when a transfer actually starts (the head-of-queue event,
//! [`super::Timer::NicHead`]), not when it is posted: a root that posts a hundred blocks
//! at once does not book its receivers' NICs far ahead and block the transfers other
//! senders start meanwhile. Free times are kept in nanoseconds; only due times round up
//! to the world's microsecond, so rounding does not add up along a queue.
//!
//! With no rate (the default) nothing here is consulted and every run replays as before.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{Delivery, Entry, SimEndpoint, State, Timer};
use crate::{NodeId, RegionId, Result};

/// A delivery waiting in its sender's NIC queue, with what was drawn for it at post time.
#[derive(Debug)]
pub(super) struct Queued {
    delivery: Delivery,
    post_us: u64,
    delay_us: u64,
    lag_us: u64,
}

/// Every node's NIC: when each side is next free (virtual ns) and what waits to be sent.
#[derive(Debug, Default)]
pub(super) struct Nics {
    send_free_ns: BTreeMap<NodeId, u64>,
    recv_free_ns: BTreeMap<NodeId, u64>,
    queues: BTreeMap<NodeId, VecDeque<Queued>>,
    /// Nodes with a [`Timer::NicHead`] pending.
    armed: BTreeSet<NodeId>,
}

/// Nanoseconds `len` bytes take at `rate` bytes per second (rounded up).
pub(super) fn transfer_ns(len: usize, rate: u64) -> u64 {
    let rate = u128::from(rate.max(1));
    let ns = (len as u128 * 1_000_000_000).div_ceil(rate);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

impl Nics {
    /// Moves `len` bytes at `rate` from `from`'s send side to `to`'s receive side, ready
    /// at `ready_us` (call it in the order transfers reach their queue heads); returns
    /// the virtual microsecond (rounded up) by which the last byte has crossed.
    pub(super) fn reserve(
        &mut self,
        from: NodeId,
        to: NodeId,
        len: usize,
        ready_us: u64,
        rate: u64,
    ) -> u64 {
        let send_free = self.send_free_ns.entry(from).or_default();
        let recv_free = self.recv_free_ns.entry(to).or_default();
        let start = ready_us
            .saturating_mul(1000)
            .max(*send_free)
            .max(*recv_free);
        let end = start.saturating_add(transfer_ns(len, rate));
        *send_free = end;
        *recv_free = end;
        end.div_ceil(1000)
    }

    /// When `node`'s send side is next free, in µs (rounded up).
    fn send_free_us(&self, node: NodeId) -> u64 {
        self.send_free_ns
            .get(&node)
            .copied()
            .unwrap_or(0)
            .div_ceil(1000)
    }
}

impl State {
    /// Puts `d` (with its drawn delay and lag) in its sender's NIC queue, and wakes the
    /// NIC if it was idle.
    pub(super) fn nic_enqueue(&mut self, d: Delivery, delay_us: u64, lag_us: u64) {
        let node = d.from;
        let post_us = self.now_us;
        self.nics.queues.entry(node).or_default().push_back(Queued {
            delivery: d,
            post_us,
            delay_us,
            lag_us,
        });
        if self.nics.armed.insert(node) {
            let at = post_us.max(self.nics.send_free_us(node));
            self.schedule_at(at, Entry::Timer(Timer::NicHead { node }));
        }
    }

    /// `node`'s NIC starts the transfer at the head of its queue (and arms itself for the
    /// next one, when this one's last byte has left).
    pub(super) fn nic_head(&mut self, node: NodeId) {
        let rate = self.cfg.link_rate_bytes_per_s.unwrap_or(u64::MAX);
        let Some(q) = self
            .nics
            .queues
            .get_mut(&node)
            .and_then(VecDeque::pop_front)
        else {
            self.nics.armed.remove(&node);
            return;
        };
        let len = q.delivery.payload.bytes_len();
        let sent_us = self.nics.reserve(node, q.delivery.to, len, q.post_us, rate);
        self.schedule_delivery(sent_us, q.delay_us, q.lag_us, q.delivery);
        if self.nics.queues.get(&node).is_some_and(|q| !q.is_empty()) {
            let at = self.now_us.max(self.nics.send_free_us(node));
            self.schedule_at(at, Entry::Timer(Timer::NicHead { node }));
        } else {
            self.nics.armed.remove(&node);
        }
    }

    /// Drops the queued deliveries matching `pred` (a crash, a failed link).
    pub(super) fn nic_discard(&mut self, pred: impl Fn(&Delivery) -> bool) {
        let mut dropped = Vec::new();
        for q in self.nics.queues.values_mut() {
            q.retain(|x| {
                let drop = pred(&x.delivery);
                if drop {
                    dropped.push((
                        x.delivery.from,
                        x.delivery.to,
                        x.delivery.payload.bytes_len(),
                    ));
                }
                !drop
            });
        }
        for (from, to, bytes) in dropped {
            self.unload(from, to, bytes);
        }
    }
}

impl SimEndpoint {
    /// A write of `len` bytes that carries only its length: it is checked like
    /// [`crate::Endpoint::write_then_release`] (link, region, bounds, room), takes the
    /// NIC time of `len` bytes under the bandwidth model, keeps its link's order, and on
    /// landing stores its guard word (if any) — but the target's bytes stay as they were.
    ///
    /// Only for measurements at a scale whose bytes would not fit in memory (the RDMC
    /// completion table of docs/benchmarks.md moves 256 MiB to 1024 receivers); nothing
    /// that reads the written bytes may use it. Correctness runs use real writes.
    pub fn write_phantom(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        len: usize,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        self.issue_write(peer, region, offset, len, None, guard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u64 = 1_000_000_000; // 1 byte per ns

    #[test]
    fn transfer_time_rounds_up_to_the_nanosecond() {
        assert_eq!(transfer_ns(1000, RATE), 1000);
        assert_eq!(transfer_ns(0, RATE), 0);
        assert_eq!(transfer_ns(1, 3_000_000_000), 1);
        // 1 MiB at 100 Gb/s: 83,886.08 ns.
        assert_eq!(transfer_ns(1 << 20, 12_500_000_000), 83_887);
    }

    #[test]
    fn two_transfers_from_one_sender_serialize() {
        let mut nics = Nics::default();
        assert_eq!(nics.reserve(1, 2, 1_000_000, 0, RATE), 1000);
        // To another receiver, posted at once: waits for the sender's send side.
        assert_eq!(nics.reserve(1, 3, 1_000_000, 0, RATE), 2000);
    }

    #[test]
    fn two_senders_to_one_receiver_serialize() {
        let mut nics = Nics::default();
        assert_eq!(nics.reserve(1, 3, 1_000_000, 0, RATE), 1000);
        assert_eq!(nics.reserve(2, 3, 1_000_000, 0, RATE), 2000);
    }

    #[test]
    fn independent_pairs_overlap_and_a_later_post_starts_when_posted() {
        let mut nics = Nics::default();
        assert_eq!(nics.reserve(1, 2, 1_000_000, 0, RATE), 1000);
        assert_eq!(nics.reserve(3, 4, 1_000_000, 0, RATE), 1000);
        // Node 2 relays what it received: its send side was free, node 1's receive too.
        assert_eq!(nics.reserve(2, 1, 1_000_000, 1000, RATE), 2000);
        // Posted after the sides fell free: starts at its post time.
        assert_eq!(nics.reserve(1, 2, 500_000, 5000, RATE), 5500);
        // Fractions of a microsecond add up along a queue before the due time rounds up.
        let mut nics = Nics::default();
        assert_eq!(nics.reserve(1, 2, 1500, 0, RATE), 2);
        assert_eq!(nics.reserve(1, 2, 1500, 0, RATE), 3);
    }
}
