//! The sim fabric's bandwidth model ([`super::SimConfig::link_rate_bytes_per_s`]) and the
//! writes that carry only their length ([`SimEndpoint::write_phantom`]).
//!
//! **Bandwidth.** With a link rate set, every node has one NIC with a send side and a
//! receive side, each moving one transfer (a write or a send; control deliveries such as
//! link set-up and region announcements are not data and keep the plain link delay) at a
//! time at that rate. A transfer of `len` bytes from `a` to `b` posted at `now` starts at
//! `max(a's send side free, b's receive side free, now)`, occupies both sides for
//! `len / rate`, and lands the drawn link delay (the per-transfer latency) after its last
//! byte left: `due = start + len / rate + delay`. The sides are busy for the transfer
//! time only, not the latency: a NIC starts its next transfer while the previous one is
//! on the wire, as a real one does, and as the schedule model of the RDMC paper (§4.2)
//! and `spindle_group::rdmc::model` assume. Reservations are made in posting order
//! (first come, first served on each side); the free times are kept in nanoseconds and
//! only the due time is rounded up to the world's microsecond, so rounding never adds up
//! along a NIC's queue.
//!
//! With no rate (the default) nothing here is consulted and every run replays as before.

use std::collections::BTreeMap;

use super::SimEndpoint;
use crate::{NodeId, RegionId, Result};

/// When each node's NIC sides are next free, in virtual nanoseconds.
#[derive(Debug, Default)]
pub(super) struct Nics {
    send_free_ns: BTreeMap<NodeId, u64>,
    recv_free_ns: BTreeMap<NodeId, u64>,
}

/// Nanoseconds `len` bytes take at `rate` bytes per second (rounded up; at least 0).
pub(super) fn transfer_ns(len: usize, rate: u64) -> u64 {
    let rate = u128::from(rate.max(1));
    let ns = (len as u128 * 1_000_000_000).div_ceil(rate);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

impl Nics {
    /// Reserves `from`'s send side and `to`'s receive side for `len` bytes at `rate`,
    /// posted at `now_us`; returns the virtual microsecond (rounded up) by which the last
    /// byte has crossed, before the latency.
    pub(super) fn reserve(
        &mut self,
        from: NodeId,
        to: NodeId,
        len: usize,
        now_us: u64,
        rate: u64,
    ) -> u64 {
        let send_free = self.send_free_ns.entry(from).or_default();
        let recv_free = self.recv_free_ns.entry(to).or_default();
        let start = now_us.saturating_mul(1000).max(*send_free).max(*recv_free);
        let end = start.saturating_add(transfer_ns(len, rate));
        *send_free = end;
        *recv_free = end;
        end.div_ceil(1000)
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
