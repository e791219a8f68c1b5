//! A reader's history cache: samples per instance under HISTORY and RESOURCE_LIMITS, in
//! arrival order (which is the subgroup's total order).
//!
//! Notices — samples without data that say an instance ended — are kept beside the data
//! samples, at most [`INSTANCE_NOTICES_MAX`] per instance (the oldest goes first):
//! HISTORY depth and RESOURCE_LIMITS count data samples only, so a dispose or an
//! unregister never pushes out the instance's last values, and every notice a reader
//! that keeps up takes is there. A writer's dispose and unregister
//! become notices; so does the loss of an instance's last writer (it left the view, its
//! lease lapsed, or a restarted domain's history names a writer no longer there) when the
//! instance holds no unread sample to carry its new state ([`Cache::writers_gone`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use spindle_qos::{History, HistoryKind, ResourceLimits, LENGTH_UNLIMITED};

use crate::clock::{Clock, WallClock};
pub use crate::coherent_sets::COHERENT_PENDING_SAMPLES_MAX;
use crate::coherent_sets::{Hold, PendingSets};
use crate::lent::{LentBatch, LentBytes};
use crate::sample::{
    Coherent, InstanceHandle, InstanceState, SampleHeader, SampleInfo, SampleKind, SampleState,
    StateMask, ViewState, WriterHandle,
};

/// Where a delivered message came from and sits in the total order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The writer's participant.
    pub node: spindle_transport_rdma::NodeId,
    /// The view it was delivered in.
    pub view_id: u32,
    /// Its index in the subgroup's order in that view.
    pub order_index: u64,
}

/// Where a sample became readable in its subgroup's total order: the place (view, order
/// index) of the delivery that made it readable — its own, or for a coherent set's
/// sample the set's end — then the sample's own place. Every reader of the subgroup's
/// topics agrees on it, so it orders samples across readers (PRESENTATION GROUP
/// `ordered_access`, `Subscriber::get_datareaders`); within one cache it grows with
/// arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The delivery that made it readable: view and order index.
    pub readable_at: (u32, u64),
    /// The sample's own delivery: view and order index.
    pub delivered_at: (u32, u64),
}

impl Position {
    /// A sample delivered at `sample`, readable from the delivery at `readable`.
    pub fn of(readable: Origin, sample: Origin) -> Position {
        Position {
            readable_at: (readable.view_id, readable.order_index),
            delivered_at: (sample.view_id, sample.order_index),
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// When LIFESPAN expires it (wall-clock ns), if it does.
    expires_ns: Option<i64>,
    instance: InstanceHandle,
    read: bool,
    info: SampleInfo,
    payload: Payload,
    /// Where it became readable (see [`Position`]).
    position: Position,
}

/// A cache's samples in arrival order (which only grows): a deque of (arrival, entry)
/// with the arrivals increasing, so a new sample is a push at the back and a lookup a
/// binary search. A sample removed from the middle (a KEEP_LAST eviction, a take of one
/// instance) leaves a hole until holes reach either end, or outnumber the samples by
/// [`SAMPLE_HOLES_SLACK`] (then the deque is compacted): memory stays within twice the
/// samples held, and every removal is O(1) amortized. (A `BTreeMap` insert of the large
/// entry was the cache's costliest step per sample.)
#[derive(Debug, Default)]
struct Samples {
    slots: VecDeque<(u64, Option<Entry>)>,
    /// Samples held: the slots that are not holes.
    live: usize,
}

/// Holes a cache's sample deque may hold beyond the number of samples before it is
/// compacted ([`Samples`]).
const SAMPLE_HOLES_SLACK: usize = 32;

impl Samples {
    fn len(&self) -> usize {
        self.live
    }

    fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn index(&self, arrival: u64) -> Option<usize> {
        self.slots.binary_search_by_key(&arrival, |(a, _)| *a).ok()
    }

    fn insert(&mut self, arrival: u64, e: Entry) {
        // Invariant: arrivals increase along the deque (the binary search relies on it).
        assert!(
            self.slots.back().is_none_or(|(a, _)| *a < arrival),
            "arrivals only grow"
        );
        self.slots.push_back((arrival, Some(e)));
        self.live += 1;
    }

    fn get(&self, arrival: u64) -> Option<&Entry> {
        self.index(arrival).and_then(|i| self.slots[i].1.as_ref())
    }

    fn get_mut(&mut self, arrival: u64) -> Option<&mut Entry> {
        self.index(arrival).and_then(|i| self.slots[i].1.as_mut())
    }

    fn remove(&mut self, arrival: u64) -> Option<Entry> {
        let i = self.index(arrival)?;
        let e = self.slots[i].1.take()?;
        self.live -= 1;
        while self.slots.front().is_some_and(|(_, e)| e.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|(_, e)| e.is_none()) {
            self.slots.pop_back();
        }
        if self.slots.len() > 2 * self.live + SAMPLE_HOLES_SLACK {
            self.slots.retain(|(_, e)| e.is_some());
        }
        Some(e)
    }

    /// The samples with their arrivals, in arrival order.
    fn iter(&self) -> impl Iterator<Item = (u64, &Entry)> + '_ {
        self.slots
            .iter()
            .filter_map(|(a, e)| e.as_ref().map(|e| (*a, e)))
    }

    /// The samples, in arrival order.
    fn values(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.slots.iter().filter_map(|(_, e)| e.as_ref())
    }

    /// Every sample, in arrival order, the deque emptied but keeping its room for the
    /// next deliveries ([`Samples::trim_room`] bounds it): a reader that takes all it
    /// holds each time does not grow the deque from nothing again (reallocating and
    /// copying the entries at each doubling showed per sample in profiles).
    fn drain_entries(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.live = 0;
        self.slots.drain(..).filter_map(|(_, e)| e)
    }

    /// Gives back the deque's room past [`SAMPLES_ROOM_KEPT`] slots (or the samples held).
    fn trim_room(&mut self) {
        self.slots.shrink_to(SAMPLES_ROOM_KEPT);
    }
}

/// Slots of room a cache's sample deque keeps once emptied ([`Samples::drain_entries`]):
/// enough for the samples one round delivers at 1 KiB, a few hundred KiB of entries.
const SAMPLES_ROOM_KEPT: usize = 1024;

/// A QueryCondition's test of a sample's bytes, if a read has one ([`Cache::access_if`]).
pub type Query<'a> = Option<&'a dyn Fn(&[u8]) -> bool>;

/// A sample's serialized bytes as a cache holds and hands them out: borrowed from the
/// delivery batch they came in (no copy at all), or a copy owned until a `read` shares it
/// with the samples (or loans) it returned; reading a sample again copies nothing, and a
/// `take` moves the bytes out without a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// One holder: the cache, or whoever took the sample.
    Owned(Vec<u8>),
    /// Shared by the cache and what `read` returned.
    Shared(Arc<Vec<u8>>),
    /// In the delivery batch the sample came in, which stays lent while any of its
    /// samples is held ([`crate::lent`]).
    Lent(LentBytes),
}

impl Payload {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Shared(v) => v,
            Payload::Lent(l) => l.bytes(),
        }
    }

    /// Another handle on the same bytes (the first share turns `Owned` into `Shared`).
    fn share(&mut self) -> Payload {
        if let Payload::Owned(v) = self {
            *self = Payload::Shared(Arc::new(std::mem::take(v)));
        }
        self.clone()
    }

    /// The buffer, if this was its last holder (for reuse); lent bytes go back with
    /// their batch when its last sample goes.
    fn into_buffer(self) -> Option<Vec<u8>> {
        match self {
            Payload::Owned(v) => Some(v),
            Payload::Shared(v) => Arc::try_unwrap(v).ok(),
            Payload::Lent(_) => None,
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Entry {
    /// The sample's info as an access returns it: its states now.
    fn info_now(&self, view_state: ViewState, instance_state: InstanceState) -> SampleInfo {
        SampleInfo {
            sample_state: if self.read {
                SampleState::Read
            } else {
                SampleState::NotRead
            },
            view_state,
            instance_state,
            ..self.info
        }
    }
}

#[derive(Debug)]
struct Instance {
    /// Its data samples' arrivals, oldest first: what HISTORY and RESOURCE_LIMITS count.
    arrivals: VecDeque<u64>,
    /// Its kept notices' arrivals, oldest first: writers' disposes and unregisters, and
    /// the reader's own NOT_ALIVE_NO_WRITERS notices for writers that went
    /// ([`Cache::writers_gone`]). Kept beside the data samples so that ending an
    /// instance never pushes out its last values; at most [`INSTANCE_NOTICES_MAX`] (the
    /// oldest goes first).
    notices: VecDeque<u64>,
    /// When the instance's DEADLINE next expires (µs on the process clock), once it had
    /// data.
    deadline_at_us: Option<u64>,
    /// The owner under EXCLUSIVE ownership: the writer and its strength.
    owner: Option<(WriterHandle, i32)>,
    /// When the instance last kept a data sample (µs on the process clock), for
    /// TIME_BASED_FILTER.
    last_kept_us: Option<u64>,
    state: InstanceState,
    /// When it left ALIVE (µs on the process clock), for READER_DATA_LIFECYCLE.
    not_alive_since_us: Option<u64>,
    /// The newest source timestamp kept, for DESTINATION_ORDER BY_SOURCE_TIMESTAMP.
    newest_source_ns: Option<i64>,
    new: bool,
    disposed_generation_count: u32,
    no_writers_generation_count: u32,
    writers: BTreeSet<WriterHandle>,
    /// A copy of the instance's first data sample at most [`KEY_SAMPLE_BYTES_MAX`]
    /// long: its key, for `get_key_value` (a dispose or unregister notice carries only
    /// the key's hash).
    key_sample: Option<Box<[u8]>>,
}

impl Instance {
    /// Forgets its sample at `arrival` (taken, expired or evicted).
    fn forget(&mut self, arrival: u64) {
        if let Some(i) = self.notices.iter().position(|a| *a == arrival) {
            self.notices.remove(i);
        } else {
            self.arrivals.retain(|a| *a != arrival);
        }
    }

    /// Takes the sample at `arrival` (the cache's next): data after its other data
    /// samples, a notice after its other notices. Returns the arrival of the notice that
    /// pushed out past [`INSTANCE_NOTICES_MAX`], if one did.
    fn place(&mut self, arrival: u64, valid_data: bool) -> Option<u64> {
        if valid_data {
            self.arrivals.push_back(arrival);
            return None;
        }
        let out = (self.notices.len() >= INSTANCE_NOTICES_MAX)
            .then(|| self.notices.pop_front())
            .flatten();
        self.notices.push_back(arrival);
        out
    }

    /// True if it holds a sample: data or a notice.
    fn holds_samples(&self) -> bool {
        !self.arrivals.is_empty() || !self.notices.is_empty()
    }

    /// Its samples' arrivals: data, then notices.
    fn all_arrivals(&self) -> impl Iterator<Item = u64> + '_ {
        self.arrivals
            .iter()
            .copied()
            .chain(self.notices.iter().copied())
    }
}

/// Most notices an instance keeps beside its data samples (the module docs): past it, a
/// new notice pushes out the oldest. Notices are bounded by `max_instances` times this.
pub const INSTANCE_NOTICES_MAX: usize = 16;

/// The largest data sample a cache copies to keep an instance's key
/// ([`Cache::key_sample`]); an instance whose first sample is larger keeps none, so
/// the copies cost at most this much memory per instance.
pub const KEY_SAMPLE_BYTES_MAX: usize = 4096;

/// Why a cache holds no key for an instance ([`Cache::key_sample`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoKey {
    /// The cache does not know the instance (never heard of, or forgotten before the
    /// last [`PURGED_KEYS_MAX`] it forgot).
    UnknownInstance,
    /// No data sample of it arrived here (only notices), or its first was larger than
    /// [`KEY_SAMPLE_BYTES_MAX`].
    NotKept,
}

/// Why a sample was not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// RESOURCE_LIMITS `max_instances` reached.
    Instances,
    /// RESOURCE_LIMITS `max_samples` reached (KEEP_ALL, or KEEP_LAST across instances).
    Samples,
    /// `max_samples_per_instance` reached under KEEP_ALL.
    SamplesPerInstance,
}

/// One reader's cache. See the module docs.
#[derive(Debug)]
pub struct Cache {
    history: History,
    limits: ResourceLimits,
    samples: Samples,
    instances: BTreeMap<InstanceHandle, Instance>,
    next_arrival: u64,
    /// The place of the last sample kept: a notice the cache makes itself
    /// ([`Cache::writers_gone`]) takes it.
    last_position: Position,
    /// The reader's DEADLINE period in µs (`None`: infinite).
    deadline_us: Option<u64>,
    /// TIME_BASED_FILTER `minimum_separation` in µs (0: keep every sample).
    minimum_separation_us: u64,
    /// OWNERSHIP EXCLUSIVE: per instance, only the strongest alive writer's samples.
    exclusive: bool,
    /// DESTINATION_ORDER BY_SOURCE_TIMESTAMP: per instance, a sample older (by source
    /// timestamp) than the newest kept is dropped.
    by_source_timestamp: bool,
    /// READER_DATA_LIFECYCLE: µs after an instance became NOT_ALIVE_NO_WRITERS,
    /// respectively NOT_ALIVE_DISPOSED, its samples and the instance are purged (`None`:
    /// never).
    autopurge_nowriter_us: Option<u64>,
    autopurge_disposed_us: Option<u64>,
    /// Coherent sets held back until they end, per writer: each sample's header, bytes
    /// and origin (bounded per set and in all, [`COHERENT_PENDING_SAMPLES_MAX`]; a set past a bound
    /// is dropped).
    pending_sets: PendingSets<(SampleHeader, Vec<u8>, Origin), COHERENT_PENDING_SAMPLES_MAX>,
    /// Where "now" comes from (LIFESPAN, TIME_BASED_FILTER).
    clock: Arc<dyn Clock>,
    /// Payload buffers given back after `take` (and by evictions), reused by `insert` so
    /// that a steady stream of samples allocates nothing; at most [`SPARE_BYTES_MAX`]
    /// bytes of capacity in all.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// The keys of the last [`PURGED_KEYS_MAX`] instances forgotten, newest last: a
    /// notice taken often ends its instance, and `get_key_value` on its handle still
    /// says which it was.
    purged_keys: VecDeque<(InstanceHandle, Box<[u8]>)>,
}

/// How many forgotten instances' keys a cache keeps ([`Cache::key_sample`]): at most
/// this × [`KEY_SAMPLE_BYTES_MAX`] bytes.
pub const PURGED_KEYS_MAX: usize = 256;

/// A sample's bytes on their way into the cache: borrowed from a delivery (copied in),
/// in a lent delivery batch (kept there, not copied), or already copied (a held-back
/// coherent set's).
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Lent(&'a Arc<LentBatch>, &'a [u8]),
    Owned(Vec<u8>),
}

impl Bytes<'_> {
    fn slice(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) | Bytes::Lent(_, b) => b,
            Bytes::Owned(b) => b,
        }
    }
}

/// Most capacity, in bytes, a cache keeps in spare payload buffers.
pub const SPARE_BYTES_MAX: usize = 4 << 20;

fn limit(v: i32) -> usize {
    if v == LENGTH_UNLIMITED || v <= 0 {
        usize::MAX
    } else {
        v as usize
    }
}

impl Cache {
    /// Copies every sample lent from a batch that pins an RDMC buffer
    /// ([`LentBytes::pins_buffer`]) into bytes of its own, dropping its hold on the
    /// batch; returns how many.
    pub fn copy_in_place(&mut self) -> usize {
        let mut copied = 0;
        for e in self
            .samples
            .slots
            .iter_mut()
            .filter_map(|(_, e)| e.as_mut())
        {
            if let Payload::Lent(l) = &e.payload {
                if l.pins_buffer() {
                    e.payload = Payload::Owned(l.bytes().to_vec());
                    copied += 1;
                }
            }
        }
        copied
    }

    /// An empty cache under `history` and `limits` (checked by the QoS crate already),
    /// on the process's [`WallClock`].
    pub fn new(history: History, limits: ResourceLimits) -> Cache {
        Cache::with_clock(history, limits, Arc::new(WallClock))
    }

    /// An empty cache that reads the time from `clock`.
    pub fn with_clock(history: History, limits: ResourceLimits, clock: Arc<dyn Clock>) -> Cache {
        Cache {
            history,
            limits,
            samples: Samples::default(),
            instances: BTreeMap::new(),
            purged_keys: VecDeque::new(),
            next_arrival: 0,
            last_position: Position {
                readable_at: (0, 0),
                delivered_at: (0, 0),
            },
            deadline_us: None,
            minimum_separation_us: 0,
            exclusive: false,
            by_source_timestamp: false,
            autopurge_nowriter_us: None,
            autopurge_disposed_us: None,
            pending_sets: PendingSets::default(),
            clock,
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// Gives back payloads (after `take` decoded them, or a loan was returned) for later
    /// samples to reuse their buffers; those still shared elsewhere, and those past
    /// [`SPARE_BYTES_MAX`], are left to be freed.
    pub fn recycle(&mut self, payloads: impl IntoIterator<Item = Payload>) {
        for b in payloads.into_iter().filter_map(Payload::into_buffer) {
            self.keep_spare(b);
        }
    }

    fn keep_spare(&mut self, b: Vec<u8>) {
        // Invariant: spare_bytes == sum of the spare buffers' capacities <= SPARE_BYTES_MAX.
        let cap = b.capacity();
        if cap > 0 && self.spare_bytes + cap <= SPARE_BYTES_MAX {
            self.spare_bytes += cap;
            self.spare.push(b);
        }
    }

    /// A copy of `payload` in a spare buffer if there is one.
    fn copy_payload(&mut self, payload: &[u8]) -> Vec<u8> {
        match self.spare.pop() {
            Some(mut b) => {
                self.spare_bytes -= b.capacity();
                b.clear();
                b.extend_from_slice(payload);
                b
            }
            None => payload.to_vec(),
        }
    }

    /// Sets OWNERSHIP EXCLUSIVE: per instance, samples only from the owner — the alive
    /// writer with the highest strength (ties: the lower writer handle). Every reader sees
    /// the samples in the same order, so every reader picks the same owner at the same
    /// sample.
    pub fn set_exclusive(&mut self, on: bool) {
        self.exclusive = on;
    }

    /// Sets DESTINATION_ORDER: with `by_source_timestamp`, per instance, a sample whose
    /// source timestamp is older than the newest one kept is dropped (not rejected), so
    /// the instance's value is the one written last by the writers' clocks.
    pub fn set_by_source_timestamp(&mut self, on: bool) {
        self.by_source_timestamp = on;
    }

    /// Sets READER_DATA_LIFECYCLE: how long after an instance lost its last writer
    /// (`nowriter_us`), or was disposed (`disposed_us`), its samples — read or not — and
    /// the instance itself are purged (`None`: kept until taken).
    pub fn set_autopurge_us(&mut self, nowriter_us: Option<u64>, disposed_us: Option<u64>) {
        self.autopurge_nowriter_us = nowriter_us;
        self.autopurge_disposed_us = disposed_us;
    }

    /// Drops samples whose LIFESPAN has passed, and those of instances whose
    /// READER_DATA_LIFECYCLE autopurge delay has passed (with the instances).
    fn purge_expired(&mut self) {
        let now = self.clock.wall_ns();
        let now_us = self.clock.now_us();
        let (nowriter, disposed) = (self.autopurge_nowriter_us, self.autopurge_disposed_us);
        let purged: BTreeSet<InstanceHandle> = if nowriter.is_none() && disposed.is_none() {
            BTreeSet::new()
        } else {
            self.instances
                .iter()
                .filter(|(_, i)| {
                    let delay = match i.state {
                        InstanceState::Alive => None,
                        InstanceState::NotAliveNoWriters => nowriter,
                        InstanceState::NotAliveDisposed => disposed,
                    };
                    delay
                        .zip(i.not_alive_since_us)
                        .is_some_and(|(d, since)| now_us.saturating_sub(since) >= d)
                })
                .map(|(h, _)| *h)
                .collect()
        };
        let expired: Vec<(u64, InstanceHandle)> = self
            .samples
            .iter()
            .filter(|(_, e)| e.expires_ns.is_some_and(|x| x <= now) || purged.contains(&e.instance))
            .map(|(a, e)| (a, e.instance))
            .collect();
        for h in &purged {
            if let Some(i) = self.instances.remove(h) {
                self.keep_purged_key(*h, i);
            }
        }
        for (a, i) in expired {
            if let Some(e) = self.samples.remove(a) {
                self.recycle([e.payload]);
            }
            if let Some(inst) = self.instances.get_mut(&i) {
                inst.forget(a);
            }
        }
    }

    /// Sets TIME_BASED_FILTER: per instance, data samples that arrive less than
    /// `minimum_separation_us` after the last one kept are filtered out (not rejected).
    pub fn set_minimum_separation_us(&mut self, us: u64) {
        self.minimum_separation_us = us;
    }

    /// Sets the DEADLINE period the cache watches (`None`: infinite), from the next
    /// sample of each instance on.
    pub fn set_deadline_us(&mut self, period: Option<u64>) {
        self.deadline_us = period.map(|p| p.max(1));
    }

    /// Changes the DEADLINE period (a reader's `set_qos`): every alive instance starts a
    /// new period now (`None`: none is watched any more).
    pub fn change_deadline_us(&mut self, period: Option<u64>) {
        self.set_deadline_us(period);
        let at = self
            .deadline_us
            .map(|p| self.clock.now_us().saturating_add(p));
        for inst in self.instances.values_mut() {
            inst.deadline_at_us = at.filter(|_| inst.state == InstanceState::Alive);
        }
    }

    /// Instances whose DEADLINE passed without new data by `now_us`, one entry per missed
    /// period (REQUESTED_DEADLINE_MISSED); alive instances only.
    pub fn deadline_misses(&mut self, now_us: u64) -> Vec<InstanceHandle> {
        let Some(period) = self.deadline_us else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (h, inst) in self.instances.iter_mut() {
            if inst.state != InstanceState::Alive {
                continue;
            }
            while let Some(at) = inst.deadline_at_us.filter(|at| *at <= now_us) {
                out.push(*h);
                inst.deadline_at_us = Some(at + period);
            }
        }
        out
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True if no sample is held.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The instance with the smallest handle above `after` (any, if `None`) that holds a
    /// sample `mask` (and `query`, if given) accepts, expired samples dropped first (DDS
    /// `read_next_instance`'s choice).
    pub fn next_instance(
        &mut self,
        after: Option<InstanceHandle>,
        mask: &StateMask,
        query: Query<'_>,
    ) -> Option<InstanceHandle> {
        self.purge_expired();
        self.samples
            .values()
            .filter(|e| after.is_none_or(|a| e.instance > a) && self.picks(e, mask, None, query))
            .map(|e| e.instance)
            .min()
    }

    /// Whether an access by `mask`, `instance` (any, if `None`) and `query` (a
    /// QueryCondition's filter: samples without data never pass one) picks `e`.
    fn picks(
        &self,
        e: &Entry,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        query: Query<'_>,
    ) -> bool {
        instance.is_none_or(|i| i == e.instance)
            && self.accepts(mask, e)
            && query.is_none_or(|q| e.info.valid_data && q(e.payload.bytes()))
    }

    /// True if some sample matches `mask` (and `instance`, if given).
    pub fn any(&self, mask: &StateMask, instance: Option<InstanceHandle>) -> bool {
        self.any_if(mask, instance, None)
    }

    /// [`Cache::any`], counting only samples whose bytes pass `query` (a QueryCondition's
    /// filter: samples without data never do), if given.
    pub fn any_if(
        &self,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        query: Query<'_>,
    ) -> bool {
        self.samples
            .values()
            .any(|e| self.picks(e, mask, instance, query))
    }

    /// The [`Position`]s of the samples matching `mask`, in the order a read returns them
    /// (expired samples are dropped first, as a read drops them).
    pub fn positions(&mut self, mask: &StateMask) -> Vec<Position> {
        self.purge_expired();
        self.samples
            .values()
            .filter(|e| self.accepts(mask, e))
            .map(|e| e.position)
            .collect()
    }

    fn accepts(&self, mask: &StateMask, e: &Entry) -> bool {
        let Some(inst) = self.instances.get(&e.instance) else {
            return false;
        };
        mask.accepts(
            if e.read {
                SampleState::Read
            } else {
                SampleState::NotRead
            },
            if inst.new {
                ViewState::New
            } else {
                ViewState::NotNew
            },
            inst.state,
        )
    }

    /// Adds a delivered message; `Ok(false)` if TIME_BASED_FILTER filtered it. Dispose and
    /// unregister notices are kept as samples without data, as DDS readers see them.
    pub fn insert(
        &mut self,
        h: &SampleHeader,
        payload: &[u8],
        o: Origin,
    ) -> Result<bool, Rejected> {
        let now_us = self.clock.now_us();
        self.insert_at(h, payload, o, now_us)
    }

    /// The cache's clock now, in µs (for [`Cache::insert_at`]).
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// [`Cache::insert`] at `now_us` on the cache's clock: a batch of samples delivered
    /// together reads the clock once. A sample of a coherent set is held back (`Ok(false)`)
    /// until the set's end, which inserts the whole set (see [`Coherent`]).
    pub fn insert_at(
        &mut self,
        h: &SampleHeader,
        payload: &[u8],
        o: Origin,
        now_us: u64,
    ) -> Result<bool, Rejected> {
        self.insert_bytes(h, Bytes::Borrowed(payload), o, now_us)
    }

    /// [`Cache::insert_at`] of a sample whose `payload` lies in the lent delivery batch
    /// `batch`: a kept sample holds its bytes there ([`Payload::Lent`]) instead of a copy
    /// (a coherent set's samples are still copied while held back).
    pub fn insert_lent_at(
        &mut self,
        h: &SampleHeader,
        batch: &Arc<LentBatch>,
        payload: &[u8],
        o: Origin,
        now_us: u64,
    ) -> Result<bool, Rejected> {
        self.insert_bytes(h, Bytes::Lent(batch, payload), o, now_us)
    }

    fn insert_bytes(
        &mut self,
        h: &SampleHeader,
        payload: Bytes<'_>,
        o: Origin,
        now_us: u64,
    ) -> Result<bool, Rejected> {
        let writer = h.writer(o.node);
        match (h.kind, h.coherent) {
            // A lease renewal, not a sample (the delivery path handles it).
            (SampleKind::Liveliness, _) => Ok(false),
            (SampleKind::CoherentEnd, _) => self.end_sets(&[writer], o, now_us),
            (SampleKind::GroupCoherentEnd, _) => {
                // The delivery path checked the list (`decode_group_end`); a bad one ends
                // nothing.
                let writers: Vec<WriterHandle> = crate::sample::decode_group_end(payload.slice())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|writer_id| WriterHandle {
                        node: o.node,
                        writer_id,
                    })
                    .collect();
                self.end_sets(&writers, o, now_us)
            }
            (_, Coherent::No) => self.insert_one(h, payload, o, Position::of(o, o), now_us),
            (_, mark) => {
                let copy = match payload {
                    Bytes::Owned(b) => b,
                    b => self.copy_payload(b.slice()),
                };
                if mark == Coherent::Begins {
                    // A set left unended by this writer is dropped: it never ended.
                    if let Some(old) = self.pending_sets.open(writer) {
                        self.recycle(old.into_iter().map(|(_, b, _)| Payload::Owned(b)));
                    }
                }
                // A set whose first sample this reader did not see is not held at all;
                // held samples count against RESOURCE_LIMITS `max_samples` with the kept.
                let room = limit(self.limits.max_samples).saturating_sub(self.samples.len());
                match self.pending_sets.hold(writer, (*h, copy, o), room) {
                    Hold::Held => {}
                    Hold::NoSet => {}
                    Hold::Dropped(old) => {
                        tracing::warn!(
                            writer = ?writer,
                            held = self.pending_sets.samples(),
                            "a coherent set past its bound was dropped (COHERENT_SET_SAMPLES_MAX, \
                             COHERENT_PENDING_SAMPLES_MAX or RESOURCE_LIMITS max_samples)"
                        );
                        self.recycle(old.into_iter().map(|(_, b, _)| Payload::Owned(b)));
                    }
                }
                Ok(false)
            }
        }
    }

    /// `writer` began a coherent set whose first sample this reader does not keep (a
    /// content filter dropped it): the set is held as if it had, so its later samples are.
    pub fn begin_set(&mut self, writer: WriterHandle) {
        if let Some(old) = self.pending_sets.open(writer) {
            self.recycle(old.into_iter().map(|(_, b, _)| Payload::Owned(b)));
        }
    }

    /// The coherent sets of `writers` ended, by the message at `end` (one writer's end,
    /// or a GROUP-scope publisher's for all its writers): their samples go in together,
    /// in the total order they were delivered in, at `end`'s [`Position`]; true if any
    /// was kept (the first rejection is returned if none was).
    fn end_sets(
        &mut self,
        writers: &[WriterHandle],
        end: Origin,
        now_us: u64,
    ) -> Result<bool, Rejected> {
        let mut set: Vec<(SampleHeader, Vec<u8>, Origin)> = writers
            .iter()
            .filter_map(|w| self.pending_sets.remove(w))
            .flatten()
            .collect();
        set.sort_by_key(|(_, _, o)| (o.view_id, o.order_index));
        let mut kept = false;
        let mut rejected = None;
        for (h, bytes, o) in set {
            let h = SampleHeader {
                coherent: Coherent::No,
                ..h
            };
            match self.insert_one(&h, Bytes::Owned(bytes), o, Position::of(end, o), now_us) {
                Ok(k) => kept |= k,
                Err(r) => rejected = rejected.or(Some(r)),
            }
        }
        match rejected {
            Some(r) if !kept => Err(r),
            _ => Ok(kept),
        }
    }

    /// Inserts one sample outside any coherent set.
    fn insert_one(
        &mut self,
        h: &SampleHeader,
        payload: Bytes<'_>,
        o: Origin,
        position: Position,
        now_us: u64,
    ) -> Result<bool, Rejected> {
        let handle = InstanceHandle(h.key_hash);
        let now = now_us;
        let expires_ns = (h.lifespan_ns > 0).then(|| {
            h.source_timestamp_ns
                .saturating_add(h.lifespan_ns.min(i64::MAX as u64) as i64)
        });
        if expires_ns.is_some_and(|x| x <= self.clock.wall_ns()) {
            return Ok(false);
        }
        if self.by_source_timestamp
            && self.instances.get(&handle).is_some_and(|i| {
                i.newest_source_ns
                    .is_some_and(|newest| h.source_timestamp_ns < newest)
            })
        {
            return Ok(false);
        }
        if self.exclusive && h.kind != SampleKind::Unregister {
            let w = h.writer(o.node);
            if let Some(inst) = self.instances.get_mut(&handle) {
                match inst.owner {
                    Some((owner, strength))
                        if owner != w
                            && (h.ownership_strength < strength
                                || (h.ownership_strength == strength && w > owner)) =>
                    {
                        return Ok(false);
                    }
                    _ => inst.owner = Some((w, h.ownership_strength)),
                }
            }
        }
        if self.minimum_separation_us > 0 && h.kind == SampleKind::Data {
            let recent = self.instances.get(&handle).and_then(|i| {
                i.last_kept_us.filter(|t| {
                    i.state == InstanceState::Alive
                        && now.saturating_sub(*t) < self.minimum_separation_us
                })
            });
            if recent.is_some() {
                return Ok(false);
            }
        }
        let writer = h.writer(o.node);
        // One lookup for the common case, an instance known already.
        let known_len = self.instances.get(&handle).map(|i| i.arrivals.len());
        if known_len.is_none() {
            if self.instances.len() >= limit(self.limits.max_instances) {
                self.purge_empty_instances();
                if self.instances.len() >= limit(self.limits.max_instances) {
                    return Err(Rejected::Instances);
                }
            }
            self.instances.insert(
                handle,
                Instance {
                    arrivals: VecDeque::new(),
                    notices: VecDeque::new(),
                    deadline_at_us: None,
                    last_kept_us: None,
                    owner: None,
                    state: InstanceState::Alive,
                    not_alive_since_us: None,
                    newest_source_ns: None,
                    new: true,
                    disposed_generation_count: 0,
                    no_writers_generation_count: 0,
                    writers: BTreeSet::new(),
                    key_sample: None,
                },
            );
        }
        if self.exclusive && h.kind == SampleKind::Data {
            if let Some(inst) = self.instances.get_mut(&handle) {
                if inst.owner.is_none() {
                    inst.owner = Some((writer, h.ownership_strength));
                }
            }
        }
        let per_instance = match self.history.kind {
            HistoryKind::KeepLast => (self.history.depth.max(1) as usize)
                .min(limit(self.limits.max_samples_per_instance)),
            HistoryKind::KeepAll => limit(self.limits.max_samples_per_instance),
        };
        let valid = h.kind == SampleKind::Data;
        // A notice is kept beside the data samples (`Instance::notices`): the limits
        // count data only, and it never pushes one out.
        let inst_len = if valid { known_len.unwrap_or(0) } else { 0 };
        let keep_last = self.history.kind == HistoryKind::KeepLast;
        if inst_len >= per_instance && !keep_last {
            return Err(Rejected::SamplesPerInstance);
        }
        let evict_own = keep_last && inst_len >= per_instance;
        // Samples held back in unended coherent sets count too (`pending_sets`).
        if valid
            && !evict_own
            && self.samples.len() + self.pending_sets.samples() >= limit(self.limits.max_samples)
        {
            return Err(Rejected::Samples);
        }
        // A notice's body, when it has one, is the value its writer gave (its key members
        // the instance's): the key of an instance no data sample gave one here.
        let notice_key = (!valid)
            .then(|| payload.slice())
            .filter(|b| {
                b.len() > spindle_topics::ENCAPSULATION_HEADER_LEN
                    && b.len() <= KEY_SAMPLE_BYTES_MAX
            })
            .filter(|_| {
                self.instances
                    .get(&handle)
                    .is_some_and(|i| i.key_sample.is_none())
            })
            .map(Box::<[u8]>::from);
        // No rejection after this point: the bytes are kept (lent, or copied).
        let copy = match payload {
            Bytes::Owned(b) if valid => Payload::Owned(b),
            Bytes::Lent(batch, b) if valid => match batch.share(b) {
                Some(l) => Payload::Lent(l),
                None => Payload::Owned(self.copy_payload(b)),
            },
            Bytes::Borrowed(b) if valid => Payload::Owned(self.copy_payload(b)),
            Bytes::Owned(b) => {
                self.keep_spare(b);
                Payload::Owned(Vec::new())
            }
            Bytes::Borrowed(_) | Bytes::Lent(..) => Payload::Owned(Vec::new()),
        };
        let Some(inst) = self.instances.get_mut(&handle) else {
            return Err(Rejected::Instances);
        };
        if valid && inst.key_sample.is_none() && copy.bytes().len() <= KEY_SAMPLE_BYTES_MAX {
            // Once per instance: a run of samples of one instance pays one comparison.
            inst.key_sample = Some(copy.bytes().into());
        } else if notice_key.is_some() {
            inst.key_sample = notice_key;
        }
        let evicted = if evict_own {
            inst.arrivals
                .pop_front()
                .and_then(|old| self.samples.remove(old))
        } else {
            None
        };
        match h.kind {
            SampleKind::Data => {
                match inst.state {
                    InstanceState::NotAliveDisposed => {
                        inst.disposed_generation_count += 1;
                        inst.new = true;
                    }
                    InstanceState::NotAliveNoWriters => {
                        inst.no_writers_generation_count += 1;
                        inst.new = true;
                    }
                    InstanceState::Alive => {}
                }
                inst.state = InstanceState::Alive;
                inst.not_alive_since_us = None;
                inst.writers.insert(writer);
                inst.last_kept_us = Some(now);
                if let Some(period) = self.deadline_us {
                    inst.deadline_at_us = Some(now.saturating_add(period));
                }
            }
            SampleKind::Dispose => {
                if inst.state != InstanceState::NotAliveDisposed {
                    inst.not_alive_since_us = Some(now);
                }
                inst.state = InstanceState::NotAliveDisposed;
            }
            SampleKind::Unregister => {
                inst.writers.remove(&writer);
                if inst.owner.is_some_and(|(o, _)| o == writer) {
                    inst.owner = None;
                }
                if inst.writers.is_empty() && inst.state == InstanceState::Alive {
                    inst.state = InstanceState::NotAliveNoWriters;
                    inst.not_alive_since_us = Some(now);
                }
            }
            SampleKind::Liveliness | SampleKind::CoherentEnd | SampleKind::GroupCoherentEnd => {}
        }
        inst.newest_source_ns = inst.newest_source_ns.max(Some(h.source_timestamp_ns));
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let pushed_out = inst.place(arrival, valid);
        let info = SampleInfo {
            sample_state: SampleState::NotRead,
            view_state: ViewState::New,
            instance_state: inst.state,
            source_timestamp_ns: h.source_timestamp_ns,
            instance_handle: handle,
            publication_handle: writer,
            disposed_generation_count: inst.disposed_generation_count,
            no_writers_generation_count: inst.no_writers_generation_count,
            valid_data: valid,
            view_id: o.view_id,
            order_index: o.order_index,
            writer_seq: h.writer_seq,
            durable: false,
        };
        self.keep(arrival, pushed_out, info, copy, position, expires_ns);
        if let Some(e) = evicted {
            self.recycle([e.payload]);
        }
        Ok(true)
    }

    /// Keeps the sample at `arrival` (placed in its instance by [`Instance::place`],
    /// which pushed out the notice at `pushed_out`, if any: given back).
    fn keep(
        &mut self,
        arrival: u64,
        pushed_out: Option<u64>,
        info: SampleInfo,
        payload: Payload,
        position: Position,
        expires_ns: Option<i64>,
    ) {
        self.last_position = position;
        self.samples.insert(
            arrival,
            Entry {
                expires_ns,
                instance: info.instance_handle,
                read: false,
                info,
                payload,
                position,
            },
        );
        if let Some(e) = pushed_out.and_then(|a| self.samples.remove(a)) {
            self.recycle([e.payload]);
        }
    }

    /// Writers in `gone` left the domain or lost their liveliness: instances only they
    /// wrote lose their writers (NOT_ALIVE_NO_WRITERS), as if they had unregistered. An
    /// instance that so ends while it holds no unread sample to carry its new state to
    /// a `read` or `take` gets a notice of its own (`valid_data` false, from the last of
    /// its writers that went, stamped now, in no order: `ORDER_INDEX_NONE`, in the
    /// place of the last sample this cache kept for PRESENTATION's merges), as DDS
    /// readers see a lost writer. True if it added a notice.
    pub fn writers_gone(&mut self, gone: &dyn Fn(&WriterHandle) -> bool) -> bool {
        let now_us = self.clock.now_us();
        // Their unended coherent sets never end: dropped (every reader drops the same).
        let unended: Vec<WriterHandle> = self
            .pending_sets
            .writers()
            .filter(|w| gone(w))
            .copied()
            .collect();
        for w in unended {
            if let Some(set) = self.pending_sets.remove(&w) {
                self.recycle(set.into_iter().map(|(_, b, _)| Payload::Owned(b)));
            }
        }
        let mut ended = Vec::new();
        for (handle, inst) in self.instances.iter_mut() {
            let last_gone = inst.writers.iter().rev().find(|w| gone(w)).copied();
            inst.writers.retain(|w| !gone(w));
            if inst.owner.is_some_and(|(o, _)| gone(&o)) {
                inst.owner = None;
            }
            if let Some(w) = last_gone {
                if inst.writers.is_empty() && inst.state == InstanceState::Alive {
                    inst.state = InstanceState::NotAliveNoWriters;
                    inst.not_alive_since_us = Some(now_us);
                    ended.push((*handle, w));
                }
            }
        }
        let now_ns = self.clock.wall_ns();
        let mut noticed = false;
        for (handle, writer) in ended {
            let Some(inst) = self.instances.get_mut(&handle) else {
                continue;
            };
            let unread = inst
                .all_arrivals()
                .any(|a| self.samples.get(a).is_some_and(|e| !e.read));
            if unread {
                continue;
            }
            let view_id = self.last_position.delivered_at.0;
            let info = SampleInfo {
                sample_state: SampleState::NotRead,
                view_state: ViewState::New,
                instance_state: InstanceState::NotAliveNoWriters,
                source_timestamp_ns: now_ns,
                instance_handle: handle,
                publication_handle: writer,
                disposed_generation_count: inst.disposed_generation_count,
                no_writers_generation_count: inst.no_writers_generation_count,
                valid_data: false,
                view_id,
                order_index: crate::sample::ORDER_INDEX_NONE,
                writer_seq: 0,
                durable: false,
            };
            let arrival = self.next_arrival;
            self.next_arrival += 1;
            let pushed_out = inst.place(arrival, false);
            let position = self.last_position;
            self.keep(
                arrival,
                pushed_out,
                info,
                Payload::Owned(Vec::new()),
                position,
                None,
            );
            noticed = true;
        }
        noticed
    }

    /// Returns (and with `take`, removes) up to `max` samples matching `mask` and
    /// `instance`, in arrival order; read samples become READ, their instances NOT_NEW.
    /// Taken payloads move out; read ones are shared with the cache, not copied.
    pub fn access(
        &mut self,
        max: usize,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
    ) -> Vec<(SampleInfo, Payload)> {
        self.access_if(max, mask, instance, take, None)
    }

    /// [`Cache::access`] of only the samples whose bytes pass `query` (a QueryCondition's
    /// filter: samples without data never do), if given.
    pub fn access_if(
        &mut self,
        max: usize,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
        query: Query<'_>,
    ) -> Vec<(SampleInfo, Payload)> {
        self.purge_expired();
        if take
            && query.is_none()
            && instance.is_none()
            && *mask == StateMask::ANY
            && max >= self.samples.len()
        {
            return self.take_all();
        }
        let mut picked = Vec::new();
        for (arrival, e) in self.samples.iter() {
            if picked.len() >= max {
                break;
            }
            if !self.picks(e, mask, instance, query) {
                continue;
            }
            picked.push(arrival);
        }
        let mut out = Vec::with_capacity(picked.len());
        let mut touched = BTreeSet::new();
        for arrival in picked {
            let (instance, view_new, state) = {
                let Some(e) = self.samples.get(arrival) else {
                    continue;
                };
                let Some(inst) = self.instances.get(&e.instance) else {
                    continue;
                };
                (e.instance, inst.new, inst.state)
            };
            touched.insert(instance);
            let view_state = if view_new {
                ViewState::New
            } else {
                ViewState::NotNew
            };
            if take {
                if let Some(e) = self.samples.remove(arrival) {
                    if let Some(inst) = self.instances.get_mut(&instance) {
                        inst.forget(arrival);
                    }
                    let info = e.info_now(view_state, state);
                    out.push((info, e.payload));
                }
            } else if let Some(e) = self.samples.get_mut(arrival) {
                let info = e.info_now(view_state, state);
                e.read = true;
                out.push((info, e.payload.share()));
            }
        }
        for i in touched {
            if let Some(inst) = self.instances.get_mut(&i) {
                inst.new = false;
            }
        }
        self.purge_empty_instances();
        out
    }

    /// Takes every sample (the common `take(ANY)` of a reader that keeps up): one pass,
    /// no per-sample removal.
    fn take_all(&mut self) -> Vec<(SampleInfo, Payload)> {
        let mut out = Vec::with_capacity(self.samples.len());
        let mut last: Option<(InstanceHandle, ViewState, InstanceState)> = None;
        for e in self.samples.drain_entries() {
            let (view_state, state) = match last {
                Some((h, v, s)) if h == e.instance => (v, s),
                _ => {
                    let (v, s) = self.instances.get(&e.instance).map_or(
                        (ViewState::NotNew, e.info.instance_state),
                        |i| {
                            (
                                if i.new {
                                    ViewState::New
                                } else {
                                    ViewState::NotNew
                                },
                                i.state,
                            )
                        },
                    );
                    last = Some((e.instance, v, s));
                    (v, s)
                }
            };
            let info = e.info_now(view_state, state);
            out.push((info, e.payload));
        }
        self.samples.trim_room();
        for inst in self.instances.values_mut() {
            inst.arrivals.clear();
            inst.notices.clear();
            inst.new = false;
        }
        self.purge_empty_instances();
        out
    }

    /// Forgets instances with no samples left that no writer keeps alive.
    fn purge_empty_instances(&mut self) {
        let purged = &mut self.purged_keys;
        self.instances.retain(|h, i| {
            let keep =
                i.holds_samples() || (i.state == InstanceState::Alive && !i.writers.is_empty());
            if !keep {
                if let Some(k) = i.key_sample.take() {
                    Self::push_purged_key(purged, *h, k);
                }
            }
            keep
        });
    }

    /// Keeps the key of forgotten instance `h` among the last [`PURGED_KEYS_MAX`].
    fn keep_purged_key(&mut self, h: InstanceHandle, mut i: Instance) {
        if let Some(k) = i.key_sample.take() {
            Self::push_purged_key(&mut self.purged_keys, h, k);
        }
    }

    fn push_purged_key(
        purged: &mut VecDeque<(InstanceHandle, Box<[u8]>)>,
        h: InstanceHandle,
        key: Box<[u8]>,
    ) {
        if purged.len() >= PURGED_KEYS_MAX {
            purged.pop_front();
        }
        purged.push_back((h, key));
    }

    /// Whether the cache knows instance `h`: it holds it, or it is among the last
    /// [`PURGED_KEYS_MAX`] it forgot (whose keys `get_key_value` still gives).
    pub fn knows(&self, h: InstanceHandle) -> bool {
        self.instances.contains_key(&h) || self.purged_keys.iter().any(|(k, _)| *k == h)
    }

    /// The instance's state, if the cache knows it.
    pub fn instance_state(&self, h: InstanceHandle) -> Option<InstanceState> {
        self.instances.get(&h).map(|i| i.state)
    }

    /// The bytes of a data sample of instance `h` (its first), from which its key
    /// decodes (DDS `get_key_value`): kept while the cache knows the instance, and for
    /// the last [`PURGED_KEYS_MAX`] instances it forgot.
    pub fn key_sample(&self, h: InstanceHandle) -> Result<&[u8], NoKey> {
        if let Some(inst) = self.instances.get(&h) {
            return inst.key_sample.as_deref().ok_or(NoKey::NotKept);
        }
        self.purged_keys
            .iter()
            .rev()
            .find(|(k, _)| *k == h)
            .map(|(_, b)| &**b)
            .ok_or(NoKey::UnknownInstance)
    }
}

#[cfg(test)]
mod tests;
