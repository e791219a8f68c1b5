//! A running group member's counters, readable from any thread while the predicate
//! thread runs: what the engine delivered, saw stable, sent as nulls, and what the group
//! did across views (views installed, state transferred, re-sends).
//!
//! The engine keeps its counts in plain fields ([`EngineStats`], one engine per view) and
//! the group its own ([`crate::GroupStats`]); the predicate thread of
//! [`crate::runtime::GroupNode`] copies them here once per round that did work, adding
//! the counts of the views before (so every counter only grows). Relaxed atomics: no
//! lock, no allocation, no read-modify-write on the data path (one writer).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::EngineStats;
use crate::group::Group;

/// A member's counters at one instant (see [`crate::runtime::GroupNode::counters`]).
/// Every field counts since the member started and only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Application messages delivered (nulls and the re-sends of messages already
    /// delivered in the view before not counted).
    pub delivered: u64,
    /// Messages (nulls included) that became stable at this member — received by every
    /// member of their subgroup — in atomic subgroups.
    pub stable: u64,
    /// Null messages this member sent (the null-send technique).
    pub nulls_sent: u64,
    /// Null messages delivered (skipped, not upcalled).
    pub nulls_delivered: u64,
    /// One-sided writes (pushes) the engine queued.
    pub pushes: u64,
    /// Views installed, the first included (so view changes are this minus one).
    pub views_installed: u64,
    /// Messages re-sent in a new view after a trim cut them off.
    pub resent: u64,
    /// State-transfer snapshots this member gave to joiners.
    pub state_transfers_given: u64,
    /// Bytes of those snapshots.
    pub state_given_bytes: u64,
    /// State-transfer snapshots this member installed (it joined a subgroup).
    pub state_transfers_received: u64,
    /// Bytes of those snapshots.
    pub state_received_bytes: u64,
    /// Engine events dropped because the event queue was full.
    pub events_dropped: u64,
}

/// The shared cells behind [`NodeCounters`]: written by the thread that drives the group
/// only (the predicate thread, or a simulation's), read by anyone.
#[derive(Debug, Default)]
pub struct CounterCells {
    delivered: AtomicU64,
    stable: AtomicU64,
    nulls_sent: AtomicU64,
    nulls_delivered: AtomicU64,
    pushes: AtomicU64,
    views_installed: AtomicU64,
    resent: AtomicU64,
    state_transfers_given: AtomicU64,
    state_given_bytes: AtomicU64,
    state_transfers_received: AtomicU64,
    state_received_bytes: AtomicU64,
    events_dropped: AtomicU64,
}

/// Adds `by` to a cell that only the predicate thread writes (a plain load and store,
/// not a locked read-modify-write).
fn bump(cell: &AtomicU64, by: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl CounterCells {
    /// The counters now.
    pub fn read(&self) -> NodeCounters {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NodeCounters {
            delivered: r(&self.delivered),
            stable: r(&self.stable),
            nulls_sent: r(&self.nulls_sent),
            nulls_delivered: r(&self.nulls_delivered),
            pushes: r(&self.pushes),
            views_installed: r(&self.views_installed),
            resent: r(&self.resent),
            state_transfers_given: r(&self.state_transfers_given),
            state_given_bytes: r(&self.state_given_bytes),
            state_transfers_received: r(&self.state_transfers_received),
            state_received_bytes: r(&self.state_received_bytes),
            events_dropped: r(&self.events_dropped),
        }
    }

    /// A snapshot of `bytes` given to a joiner.
    pub fn state_given(&self, bytes: usize) {
        bump(&self.state_transfers_given, 1);
        bump(&self.state_given_bytes, bytes as u64);
    }

    /// A snapshot of `bytes` installed.
    pub fn state_received(&self, bytes: usize) {
        bump(&self.state_transfers_received, 1);
        bump(&self.state_received_bytes, bytes as u64);
    }
}

/// The driving thread's side: the counts of the engines of earlier views, added to the
/// current engine's when published.
#[derive(Debug, Default)]
pub struct EngineCarry {
    /// The engines of the views before the current one, summed.
    before: EngineStats,
    /// The view id of the engine last seen, and its counts then.
    last: Option<(u32, EngineStats)>,
}

fn add(a: &mut EngineStats, b: &EngineStats) {
    a.delivered += b.delivered;
    a.stable += b.stable;
    a.nulls_sent += b.nulls_sent;
    a.nulls_delivered += b.nulls_delivered;
    a.pushes += b.pushes;
    a.events_dropped += b.events_dropped;
}

impl EngineCarry {
    /// Copies `group`'s counts into `cells`. When the engine changed (a new view), the
    /// old engine's counts as last seen move into the sum of earlier views: counts that
    /// old engine made after the last publish and before it was replaced are not seen
    /// (the few messages of a view's last round).
    pub fn publish(&mut self, group: &Group, cells: &CounterCells) {
        if let Some(e) = group.engine() {
            let vid = e.view().vid;
            let now = e.stats();
            match self.last {
                Some((v, old)) if v != vid => add(&mut self.before, &old),
                _ => {}
            }
            self.last = Some((vid, now));
            let mut total = self.before;
            add(&mut total, &now);
            let set = |c: &AtomicU64, v: u64| c.store(v, Ordering::Relaxed);
            set(&cells.delivered, total.delivered);
            set(&cells.stable, total.stable);
            set(&cells.nulls_sent, total.nulls_sent);
            set(&cells.nulls_delivered, total.nulls_delivered);
            set(&cells.pushes, total.pushes);
            set(&cells.events_dropped, total.events_dropped);
        }
        let g = group.stats();
        cells
            .views_installed
            .store(g.views_installed, Ordering::Relaxed);
        cells.resent.store(g.resent, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_and_state_counts_add_up() {
        let c = CounterCells::default();
        c.state_given(100);
        c.state_given(20);
        c.state_received(7);
        let r = c.read();
        assert_eq!(r.state_transfers_given, 2);
        assert_eq!(r.state_given_bytes, 120);
        assert_eq!(r.state_transfers_received, 1);
        assert_eq!(r.state_received_bytes, 7);
        assert_eq!(r.delivered, 0);
    }

    #[test]
    fn engine_counts_of_earlier_views_are_kept() {
        let mut before = EngineStats::default();
        let one = EngineStats {
            delivered: 5,
            stable: 7,
            ..EngineStats::default()
        };
        add(&mut before, &one);
        add(&mut before, &one);
        assert_eq!(before.delivered, 10);
        assert_eq!(before.stable, 14);
    }
}
