//! The participant's shared state, and the [`Driver`] that runs it.
//!
//! [`Shared`] is what the delivery path and the application's threads share: the
//! installed view, the DDS subgroups computed from it, the readers and writers by topic,
//! the stores of store-level subgroups. The delivery path (`delivery.rs`) is the only code
//! that changes it from engine output; the entities register and unregister themselves.
//!
//! A [`Driver`] is how the participant reaches its group and lets time pass: on threads
//! (`threads.rs`: a predicate thread, the wall clock) or in the simulation (`sim.rs`:
//! every participant of a simulated domain on the caller's thread, in virtual time).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use spindle_group::persist::RetentionHandle;
use spindle_group::{Sender, SubgroupId, View};
use spindle_transport_rdma::NodeId;

use crate::clock::Clock;
use crate::declare::DdsSubgroup;
use crate::discovery::{Endpoint, EndpointKey};
use crate::error::Result;
use crate::held::{Announced, Judging};
use crate::lent::BatchPool;
use crate::logged::Durable;
use crate::reader_core::ReaderCore;
use crate::store::Store;
use crate::writer_core::WriterCore;

/// What the delivery thread and the application's threads share.
pub(crate) struct State {
    pub(crate) view: Option<View>,
    pub(crate) subgroups: BTreeMap<SubgroupId, DdsSubgroup>,
    pub(crate) readers: BTreeMap<u64, Vec<Arc<ReaderCore>>>,
    pub(crate) writers: BTreeMap<u32, Arc<WriterCore>>,
    pub(crate) stores: BTreeMap<SubgroupId, Store>,
    /// Store-level subgroups this node entered whose state a member will ship.
    pub(crate) awaiting_state: BTreeSet<SubgroupId>,
    pub(crate) stopped: Option<String>,
    /// Every reader and writer of the domain, by (participant, entity): the built-in
    /// topic's table ([`crate::discovery`]).
    pub(crate) endpoints: BTreeMap<EndpointKey, Endpoint>,
    /// The last announcements of endpoints deleted recently ([`crate::held`]).
    pub(crate) gone: crate::held::Gone,
    /// The PARTITION names live writers left ([`crate::held::Former`]).
    pub(crate) former: crate::held::FormerNames,
    /// The participants, writers and readers this participant ignores ([`Ignored`]).
    pub(crate) ignored: Ignored,
    /// Per logged subgroup, the samples this participant's log held when it started
    /// ([`crate::logged`]): its store when it enters the subgroup, merged with any store
    /// a member ships.
    pub(crate) recovered: BTreeMap<SubgroupId, Store>,
    /// Per subgroup, the global persistence frontiers seen.
    pub(crate) durable: BTreeMap<SubgroupId, Durable>,
    /// Per writer of this participant (by id): its last sample delivered here, as
    /// (writer_seq, view id, order index).
    pub(crate) own_delivered: OwnDelivered,
    /// The logs' retention, shared with the predicate thread's persister (with a
    /// `data_dir`).
    pub(crate) retention: Option<RetentionHandle>,
}

impl State {
    /// What the built-in table lets a reader do with a sample of writer `w` tagged `tag`
    /// ([`crate::held::Judging`]): judge it by the PARTITION names the writer tagged it
    /// with — its announced ones, ones it left since, or, if it was deleted recently, its
    /// last ones — or hold it back while those may still come.
    pub(crate) fn judging(&self, w: &crate::sample::WriterHandle, tag: u32) -> Judging<'_> {
        let key = (w.node, w.writer_id);
        let found = match self.endpoints.get(&key) {
            Some(e) => Some(Announced {
                endpoint: e,
                former: self.former.get(&key),
                live: true,
            }),
            None => self.gone.get(&key).map(|(e, former)| Announced {
                endpoint: e,
                former,
                live: false,
            }),
        };
        crate::held::judge(found, tag)
    }

    /// The built-in table is installed here, not still awaited from a giver (a joiner's
    /// topic state may come before it): only then does it name every live writer.
    pub(crate) fn table_whole(&self) -> bool {
        !self
            .awaiting_state
            .contains(&crate::declare::BUILTIN_SUBGROUP)
    }

    /// Node `me`'s readers of subgroup `sg` hold what the view gives them: `me` reads the
    /// subgroup in the installed layout (or it has no writer yet, and a reader matches
    /// one when it comes), and on a store-level subgroup its stored history has arrived
    /// (no state transfer of it is awaited).
    pub(crate) fn history_held(&self, sg: SubgroupId, me: NodeId) -> bool {
        self.subgroups
            .get(&sg)
            .is_none_or(|d| d.readers.contains(&me))
            && !self.awaiting_state.contains(&sg)
    }
}

/// Most participants, writers and readers one participant ignores, together
/// ([`crate::DomainParticipant::ignore_participant`] and its kin).
pub const IGNORED_MAX: usize = 4096;

/// What a participant ignores (DDS `ignore_participant`, `ignore_publication`,
/// `ignore_subscription`), for good: its readers take no sample of an ignored writer, or
/// of any writer of an ignored participant, and its matched and incompatible-QoS
/// statuses count none of them. At most [`IGNORED_MAX`] entries.
#[derive(Debug, Default)]
pub(crate) struct Ignored {
    nodes: BTreeSet<NodeId>,
    publications: BTreeSet<EndpointKey>,
    subscriptions: BTreeSet<EndpointKey>,
}

/// What [`Ignored::add`] ignores.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ignore {
    /// A participant, by node id, with every reader and writer it has or creates.
    Participant(NodeId),
    /// One writer.
    Publication(EndpointKey),
    /// One reader.
    Subscription(EndpointKey),
}

impl Ignored {
    /// Whether endpoint `key` (a reader if `reader`) is ignored.
    pub(crate) fn covers(&self, key: &EndpointKey, reader: bool) -> bool {
        self.nodes.contains(&key.0)
            || if reader {
                self.subscriptions.contains(key)
            } else {
                self.publications.contains(key)
            }
    }

    /// Whether participant `node` is ignored.
    pub(crate) fn ignores_participant(&self, node: NodeId) -> bool {
        self.nodes.contains(&node)
    }

    /// Ignores `what` from now on; `OutOfResources` past [`IGNORED_MAX`] entries
    /// (ignoring again what is ignored is no new entry).
    pub(crate) fn add(&mut self, what: Ignore) -> Result<()> {
        let held = self.nodes.len() + self.publications.len() + self.subscriptions.len();
        let new = match what {
            Ignore::Participant(n) => !self.nodes.contains(&n),
            Ignore::Publication(k) => !self.publications.contains(&k),
            Ignore::Subscription(k) => !self.subscriptions.contains(&k),
        };
        if new && held >= IGNORED_MAX {
            return Err(crate::error::Error::OutOfResources(format!(
                "cannot ignore {what:?}: this participant already ignores {held} \
                 participants, writers and readers (IGNORED_MAX)"
            )));
        }
        match what {
            Ignore::Participant(n) => self.nodes.insert(n),
            Ignore::Publication(k) => self.publications.insert(k),
            Ignore::Subscription(k) => self.subscriptions.insert(k),
        };
        Ok(())
    }
}

/// One topic's INCONSISTENT_TOPIC status and the endpoints it counted.
#[derive(Debug, Default)]
pub(crate) struct Inconsistent {
    pub(crate) status: crate::status::InconsistentTopicStatus,
    pub(crate) seen: BTreeSet<EndpointKey>,
}

/// Where each of this participant's writers' last sample delivered here landed, by writer
/// id: (writer_seq, view id, order index), in a vector sorted by id. The delivery path
/// records one position per run of a writer's samples in a batch — one per sample when
/// many writers' samples interleave (one topic each, sharing a subgroup) — so a lookup is
/// a binary search over the participant's writers, without allocation once the writer is
/// known (a `BTreeMap` insert was about 110 instructions per sample with 50 writers).
#[derive(Debug, Default)]
pub(crate) struct OwnDelivered(Vec<(u32, (u64, u32, u64))>);

impl OwnDelivered {
    /// Writer `id`'s position, if one of its samples was delivered here.
    pub(crate) fn get(&self, id: &u32) -> Option<&(u64, u32, u64)> {
        self.0
            .binary_search_by_key(id, |(w, _)| *w)
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Records writer `id`'s newest delivered position.
    pub(crate) fn insert(&mut self, id: u32, at: (u64, u32, u64)) {
        match self.0.binary_search_by_key(&id, |(w, _)| *w) {
            Ok(i) => self.0[i].1 = at,
            Err(i) => self.0.insert(i, (id, at)),
        }
    }

    /// Forgets writer `id` (deleted).
    pub(crate) fn remove(&mut self, id: &u32) {
        if let Ok(i) = self.0.binary_search_by_key(id, |(w, _)| *w) {
            self.0.remove(i);
        }
    }
}

/// One participant's shared state. See the module docs.
pub(crate) struct Shared {
    pub(crate) me: NodeId,
    /// Set once `stopped` is (read without the state lock on every write).
    pub(crate) stopped_flag: AtomicBool,
    /// Callers in `wait_for_acknowledgments`: the delivery path wakes them (a condition
    /// variable's notify costs a system call, so only when someone waits).
    pub(crate) ack_waiters: AtomicUsize,
    pub(crate) state: Mutex<State>,
    pub(crate) view_changed: Condvar,
    pub(crate) clock: Arc<dyn Clock>,
    /// How often the passing of time must be checked ([`crate::delivery::handle_timeout`]:
    /// DEADLINE, LIVELINESS leases), in µs; `u64::MAX` while nothing needs it. Only
    /// lowered ([`Shared::want_timer`]); the driver reads it every tick.
    pub(crate) timer_tick_us: AtomicU64,
    /// Set once a reader of this participant watches a writer's LIVELINESS lease: only
    /// then does the delivery path note whom it heard from.
    pub(crate) leases_watched: AtomicBool,
    /// Per topic id: INCONSISTENT_TOPIC, the readers and writers of its name with
    /// another type than this participant's, or another definition of it
    /// ([`crate::discovery::same_type`]; [`crate::delivery`] counts them once each).
    pub(crate) inconsistent: Mutex<BTreeMap<u64, Inconsistent>>,
    /// Called once with the reason when the participant stops (excluded, shut down, left).
    pub(crate) stopped_listener: Mutex<Option<StoppedListener>>,
    /// DCPS's counters ([`crate::metrics`]).
    pub(crate) counters: crate::metrics::DcpsCounters,
    /// The participant rejoins when the group goes on without it
    /// ([`crate::ParticipantConfig::rejoin`]).
    pub(crate) rejoin_enabled: AtomicBool,
    /// Set when the group went on without this participant and it is joining again:
    /// writes and entity calls wait, as through a view change, instead of failing.
    pub(crate) rejoining: AtomicBool,
    /// Delivery batches lent to the readers' caches, and those they gave back
    /// ([`crate::lent`]).
    pub(crate) lent: Arc<BatchPool>,
}

/// What [`Shared::stopped_listener`] holds: the callback, and whether it ran (the
/// participant's stop and the listener's registration may race; it runs once).
pub(crate) type StoppedListener = Arc<(AtomicBool, Box<dyn Fn(&str) + Send + Sync>)>;

/// Runs a stopped listener with `why`, unless it ran already.
pub(crate) fn fire_stopped(l: &StoppedListener, why: &str) {
    if !l.0.swap(true, Ordering::AcqRel) {
        (l.1)(why);
    }
}

/// Shortest tick of the time checks, in µs.
pub(crate) const TIMER_TICK_US_MIN: u64 = 1_000;
/// Longest tick of the time checks, in µs (when some period needs them at all).
pub(crate) const TIMER_TICK_US_MAX: u64 = 50_000;

impl Shared {
    /// Removes writer `id` from the participant's writers (with its state, `st`, held):
    /// what it wrote stays counted ([`crate::metrics::DcpsCounters::retire`]).
    pub(crate) fn remove_writer(&self, st: &mut State, id: u32) {
        if let Some(w) = st.writers.remove(&id) {
            self.counters.retire(&w.written);
        }
    }

    /// Something needs time checked at least every `period_us` (a DEADLINE period, a
    /// LIVELINESS lease): the tick becomes a quarter of it, within
    /// [`TIMER_TICK_US_MIN`]..=[`TIMER_TICK_US_MAX`], if that is shorter than now.
    pub(crate) fn want_timer(&self, period_us: u64) {
        let tick = (period_us / 4).clamp(TIMER_TICK_US_MIN, TIMER_TICK_US_MAX);
        self.timer_tick_us.fetch_min(tick, Ordering::AcqRel);
    }

    /// The tick the time checks need now (`None`: none needed).
    pub(crate) fn timer_tick_us(&self) -> Option<u64> {
        Some(self.timer_tick_us.load(Ordering::Acquire)).filter(|t| *t != u64::MAX)
    }

    pub(crate) fn new(me: NodeId, clock: Arc<dyn Clock>) -> Arc<Shared> {
        Arc::new(Shared {
            me,
            stopped_flag: AtomicBool::new(false),
            ack_waiters: AtomicUsize::new(0),
            state: Mutex::new(State {
                view: None,
                subgroups: BTreeMap::new(),
                readers: BTreeMap::new(),
                writers: BTreeMap::new(),
                stores: BTreeMap::new(),
                awaiting_state: BTreeSet::new(),
                stopped: None,
                endpoints: BTreeMap::new(),
                former: Default::default(),
                ignored: Default::default(),
                gone: Default::default(),
                recovered: BTreeMap::new(),
                durable: BTreeMap::new(),
                own_delivered: OwnDelivered::default(),
                retention: None,
            }),
            view_changed: Condvar::new(),
            clock,
            timer_tick_us: AtomicU64::new(u64::MAX),
            leases_watched: AtomicBool::new(false),
            inconsistent: Mutex::new(BTreeMap::new()),
            stopped_listener: Mutex::new(None),
            counters: Default::default(),
            rejoin_enabled: AtomicBool::new(false),
            rejoining: AtomicBool::new(false),
            lent: BatchPool::new(),
        })
    }

    /// Forgets the membership this participant lost, before it joins again as a new
    /// member: no view, no subgroups (so every store-level subgroup it enters gets its
    /// state shipped, like any joiner's), no stores, not stopped, the stopped listener
    /// armed again, and the writers' senders (the old engine's) dropped. Readers keep
    /// what they hold; the endpoint table is rebuilt by the built-in state transfer.
    pub(crate) fn reset_for_rejoin(&self) {
        let mut st = crate::common::lock(&self.state);
        st.view = None;
        st.subgroups.clear();
        st.stores.clear();
        st.awaiting_state.clear();
        st.stopped = None;
        for w in st.writers.values() {
            crate::common::lock(&w.path).sender = None;
        }
        drop(st);
        if let Some(l) = crate::common::lock(&self.stopped_listener).as_ref() {
            l.0.store(false, Ordering::Release);
        }
        self.stopped_flag.store(false, Ordering::Release);
    }
}

/// How a participant reaches its group and lets time pass. See the module docs.
pub(crate) trait Driver: Send + Sync {
    /// The sender of `subgroup` in the installed view (`Wedged` during a view change).
    fn sender(&self, subgroup: SubgroupId) -> spindle_group::Result<Sender>;
    /// Hands the participant's declaration to the group; a later view carries it.
    fn declare(&self, declared: Vec<u8>) -> Result<()>;
    /// Leaves the group, waiting (on the participant's clock) up to `timeout` for it.
    fn leave(&self, timeout: Duration);
    /// Stops without leaving: to the others, a crash.
    fn stop(&self);
    /// After the group went on without this participant: starts a new incarnation that
    /// joins again (see [`crate::ParticipantConfig::rejoin`]), `shared` reset for it.
    /// Not every driver can.
    fn rejoin(&self, _shared: &Arc<Shared>, _config: &crate::ParticipantConfig) -> Result<()> {
        Err(crate::error::Error::Unsupported(
            "this participant cannot rejoin its domain".into(),
        ))
    }
    /// Waits up to `max` for `shared`'s state to change, giving the guard back: a
    /// condition variable on threads; one round of the simulated domain in simulation.
    fn wait_changed<'a>(
        &self,
        shared: &'a Shared,
        st: MutexGuard<'a, State>,
        max: Duration,
    ) -> MutexGuard<'a, State>;
    /// The group member's counters (zero once the driver stopped).
    fn group_counters(&self) -> spindle_group::NodeCounters;
    /// While joining: each contact whose last link failed, and why
    /// ([`spindle_group::GroupNode::join_failures`]); what a join's time-out reports.
    fn join_failures(&self) -> Vec<(NodeId, String)> {
        Vec::new()
    }
    /// Why the group stopped, once it did by itself (shut down, excluded; not left):
    /// [`spindle_group::GroupNode::stop_error`], typed, so the participant can act on the
    /// kind (a first view that lost its majority).
    fn stop_error(&self) -> Option<spindle_group::Error> {
        None
    }
    /// Lets about `hint` pass while a caller polls for something (zero: just yield): a
    /// sleep on threads; one round in simulation.
    fn idle(&self, hint: Duration);
    /// Waits up to `max` for `sender`'s full window to find room for a message of `len`
    /// bytes: parked until the predicate thread sees the window move on threads
    /// ([`Sender::wait_for_room`]); one round in simulation.
    fn wait_room(&self, sender: &Sender, len: usize, max: Duration);
}

#[cfg(test)]
mod tests {
    use super::OwnDelivered;

    /// Positions by writer id, whatever order writers first deliver in: the newest one
    /// kept per writer, none for a writer never delivered or deleted.
    #[test]
    fn own_delivered_keeps_each_writers_newest_position() {
        let mut m = OwnDelivered::default();
        for (w, seq) in [(7, 1), (3, 1), (9, 1), (3, 2), (7, 2), (1, 1), (3, 3)] {
            m.insert(w, (seq, 1, u64::from(w) * 10 + seq));
        }
        assert_eq!(m.get(&3), Some(&(3, 1, 33)));
        assert_eq!(m.get(&7), Some(&(2, 1, 72)));
        assert_eq!(m.get(&1), Some(&(1, 1, 11)));
        assert_eq!(m.get(&9), Some(&(1, 1, 91)));
        assert_eq!(m.get(&5), None);
        m.remove(&7);
        assert_eq!(m.get(&7), None);
        assert_eq!(m.get(&9), Some(&(1, 1, 91)));
        m.remove(&5);
        let ids: Vec<u32> = m.0.iter().map(|(w, _)| *w).collect();
        assert_eq!(ids, vec![1, 3, 9], "sorted, one entry per writer");
    }
}
