//! A reader's state that the delivery path updates: its cache, its statuses, its
//! listener. The typed handle over it is [`crate::DataReader`]; the participant's shared
//! state holds these cores, and the delivery path (`delivery.rs`) feeds them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use spindle_qos::{
    partitions_match, DataReaderQos, DeliveryLevel, DestinationOrderKind, LivelinessKind,
    Partition, Presentation, SubscriberQos,
};

use crate::cache::{Cache, Origin};
use crate::clock::Clock;
use crate::common::{announced_us, lock, reason, saturating_us, TopicIdentity};
use crate::content_filter::SharedFilter;
use crate::discovery::{Endpoint, EndpointKey, Mismatch, Rxo};
use crate::held::{needs_writer, Held, Judging};
use crate::lent::LentBatch;
use crate::sample::{Coherent, InstanceHandle, SampleHeader, SampleKind, WriterHandle};
use crate::status::{
    rematch, DeadlineMissedStatus, IncompatibleQosStatus, LivelinessChangedStatus, MatchedStatus,
    SampleLostStatus, SampleRejectedStatus, StatusMask,
};
use crate::store::Store;
use spindle_transport_rdma::NodeId;

pub(crate) type Listener = Arc<dyn Fn(StatusMask) + Send + Sync>;

/// DATA_AVAILABLE if samples were `kept`.
fn available(kept: bool) -> StatusMask {
    if kept {
        StatusMask::DATA_AVAILABLE
    } else {
        StatusMask::NONE
    }
}

/// `n` as a `u32`, saturating.
fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A reader's PARTITION, read at most once per batch of samples it judges.
type Mine = std::cell::OnceCell<Arc<Partition>>;

/// The built-in table's word on a sample's writer, given the writer and the sample's
/// partition tag ([`crate::shared::State::judging`]).
pub(crate) type Table<'e> = dyn Fn(&WriterHandle, u32) -> Judging<'e> + 'e;

#[derive(Debug, Default)]
pub(crate) struct Statuses {
    pub(crate) matched: MatchedStatus,
    pub(crate) rejected: SampleRejectedStatus,
    pub(crate) lost: SampleLostStatus,
    pub(crate) liveliness: LivelinessChangedStatus,
    pub(crate) deadline: DeadlineMissedStatus,
    pub(crate) incompatible: IncompatibleQosStatus,
    /// Statuses changed since read (the StatusCondition's trigger).
    pub(crate) changes: u32,
    /// Writers already counted in `incompatible`.
    pub(crate) incompatible_seen: BTreeSet<EndpointKey>,
}

/// One reader's state. See the module docs.
pub(crate) struct ReaderCore {
    pub(crate) id: u32,
    pub(crate) topic: Arc<TopicIdentity>,
    pub(crate) subgroup: spindle_group::SubgroupId,
    /// The delivery level it requests (fixed once enabled).
    pub(crate) level: DeliveryLevel,
    /// Its subscriber's PARTITION (changed by the subscriber's `set_qos`), read once per
    /// delivered batch.
    partition: Mutex<Arc<Partition>>,
    /// Whether that partition matches the default one (samples with partition tag 0).
    default_partition: AtomicBool,
    /// Its subscriber's PRESENTATION (fixed once enabled).
    presentation: Presentation,
    /// Held while its endpoint is announced again or withdrawn
    /// ([`crate::inner::ParticipantInner::reannounce`]).
    pub(crate) announcing: Mutex<()>,
    /// Its QoS (`DataReader::set_qos` changes what DDS lets change).
    pub(crate) qos: Mutex<DataReaderQos>,
    pub(crate) cache: Mutex<Cache>,
    pub(crate) status: Mutex<Statuses>,
    matched: AtomicBool,
    pub(crate) listener: Mutex<Option<Listener>>,
    pub(crate) deleted: AtomicBool,
    /// Matched writers with a MANUAL LIVELINESS and a finite lease, and whether it has
    /// any (read per delivered batch without the lock).
    leases: Mutex<BTreeMap<WriterHandle, WriterLease>>,
    has_leases: AtomicBool,
    /// Writers of its topic whose QoS it cannot accept (REQUESTED_INCOMPATIBLE_QOS): their
    /// samples are not taken. Swapped whole when matching changes; read once per batch.
    blocked: Mutex<Arc<BTreeSet<WriterHandle>>>,
    /// The filter of the `ContentFilteredTopic` it reads, if it reads one: data samples
    /// that fail it are not kept (filtering at the reader, see `content_filter.rs`).
    pub(crate) content_filter: Option<SharedFilter>,
    /// Samples held back until the built-in table names their writers ([`crate::held`]).
    held: Mutex<Held>,
}

/// A matched writer whose lease this reader watches.
#[derive(Debug, Clone, Copy)]
struct WriterLease {
    kind: LivelinessKind,
    lease_us: u64,
    /// When it was last heard from (µs on the participant's clock).
    last_us: u64,
    alive: bool,
}

impl ReaderCore {
    /// This entity as the built-in topic announces it.
    pub(crate) fn endpoint(&self) -> Endpoint {
        let qos = lock(&self.qos);
        Endpoint {
            entity: self.id,
            topic_id: self.topic.topic_id,
            type_id: self.topic.type_id,
            type_hash: self.topic.type_hash,
            reader: true,
            level: self.level,
            partition: Partition::clone(&self.partition()),
            liveliness: qos.liveliness.kind,
            lease_us: announced_us(qos.liveliness.lease_duration),
            rxo: Rxo::of(
                qos.durability.kind,
                self.presentation,
                qos.deadline.period,
                qos.latency_budget.duration,
                qos.ownership.kind,
                qos.reliability.kind,
                qos.destination_order.kind,
            ),
        }
    }

    pub(crate) fn new(
        id: u32,
        topic: Arc<TopicIdentity>,
        qos: DataReaderQos,
        clock: Arc<dyn Clock>,
        subscriber: &SubscriberQos,
        content_filter: Option<SharedFilter>,
    ) -> Arc<ReaderCore> {
        let partition = subscriber.partition.clone();
        Arc::new(ReaderCore {
            id,
            presentation: subscriber.presentation,
            default_partition: AtomicBool::new(partitions_match(&Partition::default(), &partition)),
            partition: Mutex::new(Arc::new(partition)),
            subgroup: topic.subgroup,
            level: qos.delivery_level(),
            topic,
            cache: Mutex::new({
                let mut c = Cache::with_clock(qos.history, qos.resource_limits, clock);
                // Past u64::MAX µs (584,000 years) saturated: the cache adds periods
                // saturating, so u64::MAX is never reached.
                c.set_deadline_us(qos.deadline.period.to_std().map(saturating_us));
                c.set_exclusive(qos.ownership.kind == spindle_qos::OwnershipKind::Exclusive);
                c.set_by_source_timestamp(
                    qos.destination_order.kind == DestinationOrderKind::BySourceTimestamp,
                );
                let us = |d: spindle_qos::Duration| d.to_std().map(saturating_us);
                c.set_autopurge_us(
                    us(qos.reader_data_lifecycle.autopurge_nowriter_samples_delay),
                    us(qos.reader_data_lifecycle.autopurge_disposed_samples_delay),
                );
                c.set_minimum_separation_us(
                    qos.time_based_filter
                        .minimum_separation
                        .to_std()
                        .map_or(u64::MAX, saturating_us),
                );
                c
            }),
            qos: Mutex::new(qos),
            announcing: Mutex::new(()),
            status: Mutex::new(Statuses::default()),
            matched: AtomicBool::new(false),
            listener: Mutex::new(None),
            deleted: AtomicBool::new(false),
            leases: Mutex::new(BTreeMap::new()),
            has_leases: AtomicBool::new(false),
            blocked: Mutex::new(Arc::new(BTreeSet::new())),
            held: Mutex::new(Held::default()),
            content_filter,
        })
    }

    /// The writers whose samples it does not take (their QoS fails its request).
    pub(crate) fn blocked(&self) -> Arc<BTreeSet<WriterHandle>> {
        Arc::clone(&lock(&self.blocked))
    }

    /// Its subscriber's PARTITION now.
    pub(crate) fn partition(&self) -> Arc<Partition> {
        Arc::clone(&lock(&self.partition))
    }

    /// Moves it to PARTITION `names` (its subscriber's `set_qos`): from now on it takes
    /// only samples written under names these match. Its endpoint to announce, or `None`
    /// if they are its names already.
    pub(crate) fn moved_to(&self, names: Partition) -> Option<Endpoint> {
        let mut mine = lock(&self.partition);
        if **mine == names {
            return None;
        }
        self.default_partition.store(
            partitions_match(&Partition::default(), &names),
            Ordering::Release,
        );
        *mine = Arc::new(names);
        drop(mine);
        Some(self.endpoint())
    }

    /// Whether a sample with header `h`, sent by `sender`, comes from a writer it matches:
    /// not one in `blocked` (see [`ReaderCore::blocked`]), and written in a partition
    /// `mine` (this reader's, read once per batch and only when a sample needs it)
    /// matches: the default partition (tag 0) when `mine` matches
    /// it; another when the names its writer tagged it with (`judging`, from the endpoint
    /// table: [`crate::held::Judging`]) match. A sample of a writer not announced here, or
    /// of names nobody announced, is not taken (as a DDS reader takes nothing from a
    /// writer before they match).
    pub(crate) fn accepts<'e>(
        &self,
        h: &SampleHeader,
        sender: NodeId,
        judging: impl FnOnce() -> Judging<'e>,
        blocked: &BTreeSet<WriterHandle>,
        mine: &Mine,
    ) -> bool {
        if !blocked.is_empty() && blocked.contains(&h.writer(sender)) {
            return false;
        }
        if h.partition_tag == 0 {
            return self.default_partition.load(Ordering::Acquire);
        }
        // The writer's names are looked up only here: most samples are in the default
        // partition, and the lookup is per sample.
        match judging() {
            Judging::Under(names) => partitions_match(names, mine.get_or_init(|| self.partition())),
            Judging::Wait | Judging::Refused => false,
        }
    }

    /// True while this node is a member of the reader's subgroup.
    pub(crate) fn is_member(&self) -> bool {
        self.matched.load(Ordering::Acquire)
    }

    /// Judges and keeps delivered `items` in their order — those of this reader's topic
    /// at its level, and GROUP set ends — or, from the first the built-in table
    /// (`judging`) cannot judge yet, holds them back in that order ([`crate::held`]).
    /// DATA_AVAILABLE if any was kept, SAMPLE_LOST if held samples were lost
    /// ([`ReaderCore::release_held`]). With `lent`, as [`ReaderCore::insert_all`].
    pub(crate) fn route<'a, 'e>(
        &self,
        items: impl Iterator<Item = (&'a SampleHeader, &'a [u8], Origin)>,
        judging: &Table<'e>,
        lent: Option<&Arc<LentBatch>>,
    ) -> StatusMask {
        let mut held = lock(&self.held);
        let blocked = self.blocked();
        let mine = Mine::new();
        let mut items = items;
        let mut kept = false;
        if held.is_empty() {
            // One table lookup per run of one writer's samples under one tag.
            let mut last: Option<(WriterHandle, u32, bool)> = None;
            let mut first_unknown = None;
            let judged = items
                .by_ref()
                .map_while(|(h, p, o)| {
                    let w = h.writer(o.node);
                    let tag = h.partition_tag;
                    let known = !needs_writer(h)
                        || match last {
                            Some((lw, lt, k)) if lw == w && lt == tag => k,
                            _ => {
                                let k = judging(&w, tag) != Judging::Wait;
                                last = Some((w, tag, k));
                                k
                            }
                        };
                    if known {
                        Some((h, p, o))
                    } else {
                        first_unknown = Some((h, p, o));
                        None
                    }
                })
                .filter(|(h, _, o)| self.judged(h, o, judging, &blocked, &mine));
            kept = self.insert_all(judged, lent);
            let Some((h, p, o)) = first_unknown else {
                return available(kept);
            };
            held.push(h, p, o);
        }
        for (h, p, o) in items {
            held.push(h, p, o);
        }
        available(kept) | self.release(&mut held, judging, &blocked, false)
    }

    /// Takes the held-back samples the table (`judging`) can judge now (`all`: every
    /// one, at a view change). DATA_AVAILABLE if any was kept; SAMPLE_LOST (counted) if
    /// any went out still unjudgeable — `all`, or past [`crate::held::HELD_BYTES_MAX`] —
    /// and was not taken.
    pub(crate) fn release_held(&self, judging: &Table<'_>, all: bool) -> StatusMask {
        let mut held = lock(&self.held);
        if held.is_empty() {
            return StatusMask::NONE;
        }
        let blocked = self.blocked();
        self.release(&mut held, judging, &blocked, all)
    }

    fn release(
        &self,
        held: &mut Held,
        judging: &Table<'_>,
        blocked: &BTreeSet<WriterHandle>,
        all: bool,
    ) -> StatusMask {
        let mine = Mine::new();
        let ready = held.ready(&|w, tag| judging(w, tag) != Judging::Wait, all);
        let unjudged = |h: &SampleHeader, o: &Origin| {
            needs_writer(h) && judging(&h.writer(o.node), h.partition_tag) == Judging::Wait
        };
        // Lost: what is not taken because the table still cannot judge it (a
        // default-partition sample of an unnamed writer may still be taken).
        let mut lost = 0usize;
        let kept = self.insert_all(
            ready
                .iter()
                .filter(|(h, _, o)| {
                    let take = self.judged(h, o, judging, blocked, &mine);
                    if !take && unjudged(h, o) {
                        lost += 1;
                    }
                    take
                })
                .map(|(h, p, o)| (h, p.as_slice(), *o)),
            None,
        );
        if lost == 0 {
            return available(kept);
        }
        tracing::warn!(
            topic = %self.topic.name,
            reader = self.id,
            lost,
            "samples of writers the built-in table never named were not taken (SAMPLE_LOST)"
        );
        let mut s = lock(&self.status);
        s.lost.total_count = s.lost.total_count.saturating_add(saturating_u32(lost));
        s.lost.total_count_change = s
            .lost
            .total_count_change
            .saturating_add(i32::try_from(lost).unwrap_or(i32::MAX));
        s.changes |= StatusMask::SAMPLE_LOST.0;
        available(kept) | StatusMask::SAMPLE_LOST
    }

    /// Whether this reader takes delivered sample `h` from `o`: a GROUP set's end, or
    /// a sample [`ReaderCore::accepts`] by the table's word on its writer.
    fn judged(
        &self,
        h: &SampleHeader,
        o: &Origin,
        judging: &Table<'_>,
        blocked: &BTreeSet<WriterHandle>,
        mine: &Mine,
    ) -> bool {
        !needs_writer(h)
            || self.accepts(
                h,
                o.node,
                || judging(&h.writer(o.node), h.partition_tag),
                blocked,
                mine,
            )
    }

    /// Adds a delivered sample; false if rejected (counted in SAMPLE_REJECTED).
    pub(crate) fn insert(&self, h: &SampleHeader, payload: &[u8], o: Origin) -> bool {
        self.insert_all(std::iter::once((h, payload, o)), None)
    }

    /// Adds delivered samples of this reader's topic under one lock of the cache;
    /// true if any was kept. With `lent`, the batch the payloads lie in, kept samples
    /// borrow their bytes from it instead of being copied ([`crate::lent`]).
    pub(crate) fn insert_all<'a>(
        &self,
        items: impl Iterator<Item = (&'a SampleHeader, &'a [u8], Origin)>,
        lent: Option<&Arc<LentBatch>>,
    ) -> bool {
        let mut kept = false;
        let mut rejected = Vec::new();
        {
            let mut cache = lock(&self.cache);
            let now_us = cache.now_us();
            for (h, payload, o) in items {
                if h.kind == SampleKind::Data
                    && self
                        .content_filter
                        .as_ref()
                        .is_some_and(|f| !f.passes(payload))
                {
                    // Filtered out; a coherent set it opens is still held, for the rest.
                    if h.coherent == Coherent::Begins {
                        cache.begin_set(h.writer(o.node));
                    }
                    continue;
                }
                let inserted = match lent {
                    Some(batch) => cache.insert_lent_at(h, batch, payload, o, now_us),
                    None => cache.insert_at(h, payload, o, now_us),
                };
                match inserted {
                    Ok(k) => kept |= k,
                    Err(r) => rejected.push((r, h.key_hash)),
                }
            }
        }
        let mut s = lock(&self.status);
        if kept {
            s.changes |= StatusMask::DATA_AVAILABLE.0;
        }
        for (r, key) in rejected {
            s.rejected.total_count += 1;
            s.rejected.total_count_change += 1;
            s.rejected.last_reason = reason(&r);
            s.rejected.last_instance_handle = InstanceHandle(key);
            s.changes |= StatusMask::SAMPLE_REJECTED.0;
        }
        kept
    }

    /// Loads this topic's samples from a store; true if any.
    /// Only a reader that requests a store level (DURABILITY TRANSIENT_LOCAL or above)
    /// gets history, and only samples offered at the level it requests, in partitions it
    /// matches ([`ReaderCore::accepts`], by the built-in table's word on its writers,
    /// `judging`, the writers in `endpoints`: the history of a
    /// writer deleted since, outside the default partition, goes with it, as a DDS
    /// writer's TRANSIENT_LOCAL history does). With `table_whole` (the built-in table is
    /// installed, not awaited from a giver), the history's writers it does not hold as
    /// writers are gone.
    pub(crate) fn prime(
        &self,
        store: &Store,
        judging: &Table<'_>,
        endpoints: &BTreeMap<EndpointKey, Endpoint>,
        table_whole: bool,
    ) -> bool {
        if !self.level.keeps_history() {
            return false;
        }
        let mut any = false;
        let blocked = self.blocked();
        let mine = Mine::new();
        for s in store.iter() {
            if let Ok((h, payload)) = SampleHeader::decode(&s.bytes) {
                if h.topic_id == self.topic.topic_id
                    && h.level >= self.level
                    && self.accepts(
                        &h,
                        s.origin.node,
                        || judging(&h.writer(s.origin.node), h.partition_tag),
                        &blocked,
                        &mine,
                    )
                {
                    any |= self.insert(&h, payload, s.origin);
                }
            }
        }
        // Writers of the history that the built-in table does not hold as writers are gone (the
        // writers of a domain's previous run, read back from its logs, whose node may be
        // back under the same id; a writer's announcement precedes its samples in the
        // order, so every live writer of a stored sample is in the table): their
        // instances have no writers until one writes again. Not while the table is still
        // on its way (a joiner's topic state may come before the built-in one).
        if !table_whole {
            return any;
        }
        self.writers_gone(&|w| {
            endpoints
                .get(&(w.node, w.writer_id))
                .is_none_or(|e| e.reader)
        }) || any
    }

    /// The view changed: whether this node is a member of the reader's subgroup now,
    /// and which writers left the view. True if instances they left got notices
    /// ([`Self::writers_gone`]).
    pub(crate) fn set_member(
        &self,
        in_subgroup: bool,
        gone: &dyn Fn(&WriterHandle) -> bool,
    ) -> bool {
        self.matched.store(in_subgroup, Ordering::Release);
        self.writers_gone(gone)
    }

    /// Writers in `gone` left or lost their liveliness: their instances end
    /// ([`Cache::writers_gone`]); true if that added notices, DATA_AVAILABLE then raised.
    fn writers_gone(&self, gone: &dyn Fn(&WriterHandle) -> bool) -> bool {
        let noticed = lock(&self.cache).writers_gone(gone);
        if noticed {
            lock(&self.status).changes |= StatusMask::DATA_AVAILABLE.0;
        }
        noticed
    }

    /// Sets the matched writers whose leases it watches — `(writer, kind, lease)` for
    /// those with a MANUAL LIVELINESS and a finite lease — at `now_us`: a new one starts
    /// alive, heard from now; one no longer matched is forgotten.
    pub(crate) fn watch_leases(
        &self,
        writers: &[(WriterHandle, LivelinessKind, u64)],
        now_us: u64,
    ) {
        let mut leases = lock(&self.leases);
        leases.retain(|w, _| writers.iter().any(|(x, _, _)| x == w));
        for (w, kind, lease_us) in writers {
            let l = leases.entry(*w).or_insert(WriterLease {
                kind: *kind,
                lease_us: *lease_us,
                last_us: now_us,
                alive: true,
            });
            (l.kind, l.lease_us) = (*kind, *lease_us);
        }
        self.has_leases.store(!leases.is_empty(), Ordering::Release);
    }

    /// True if it watches some writer's lease.
    pub(crate) fn has_leases(&self) -> bool {
        self.has_leases.load(Ordering::Acquire)
    }

    /// The writers in `heard` (sorted) were heard from at `now_us` (samples or
    /// assertions): their leases renew, and under MANUAL_BY_PARTICIPANT the lease of
    /// every writer whose participant was heard from (any of its entities asserts it).
    /// Returns LIVELINESS_CHANGED if a writer became alive again.
    pub(crate) fn heard_from(&self, heard: &[WriterHandle], now_us: u64) -> StatusMask {
        let mut back = 0u32;
        {
            let mut leases = lock(&self.leases);
            for (w, l) in leases.iter_mut() {
                let renewed = heard.binary_search(w).is_ok()
                    || (l.kind == LivelinessKind::ManualByParticipant
                        && heard.iter().any(|h| h.node == w.node));
                if renewed {
                    l.last_us = l.last_us.max(now_us);
                    if !l.alive {
                        l.alive = true;
                        back += 1;
                    }
                }
            }
        }
        if back == 0 {
            return StatusMask::NONE;
        }
        let mut s = lock(&self.status);
        let l = &mut s.liveliness;
        l.alive_count += back;
        l.alive_count_change += back as i32;
        l.not_alive_count = l.not_alive_count.saturating_sub(back);
        l.not_alive_count_change -= back as i32;
        s.changes |= StatusMask::LIVELINESS_CHANGED.0;
        StatusMask::LIVELINESS_CHANGED
    }

    /// Writers whose lease passed unrenewed by `now_us` are no longer alive: counted in
    /// LIVELINESS_CHANGED, and the instances only they wrote become
    /// NOT_ALIVE_NO_WRITERS (with notices, [`Cache::writers_gone`]: DATA_AVAILABLE).
    /// Returns the statuses that changed.
    pub(crate) fn check_leases(&self, now_us: u64) -> StatusMask {
        let lapsed: Vec<WriterHandle> = {
            let mut leases = lock(&self.leases);
            leases
                .iter_mut()
                .filter(|(_, l)| l.alive && now_us.saturating_sub(l.last_us) > l.lease_us)
                .map(|(w, l)| {
                    l.alive = false;
                    *w
                })
                .collect()
        };
        if lapsed.is_empty() {
            return StatusMask::NONE;
        }
        let noticed = self.writers_gone(&|w| lapsed.contains(w));
        let n = lapsed.len() as u32;
        let mut s = lock(&self.status);
        let l = &mut s.liveliness;
        l.alive_count = l.alive_count.saturating_sub(n);
        l.alive_count_change -= n as i32;
        l.not_alive_count += n;
        l.not_alive_count_change += n as i32;
        s.changes |= StatusMask::LIVELINESS_CHANGED.0;
        if noticed {
            StatusMask::LIVELINESS_CHANGED | StatusMask::DATA_AVAILABLE
        } else {
            StatusMask::LIVELINESS_CHANGED
        }
    }

    /// Matched writers whose lease has lapsed (counted not alive).
    fn lapsed(&self) -> u32 {
        lock(&self.leases).values().filter(|l| !l.alive).count() as u32
    }

    /// The writers of its topic changed (an announcement, a view): `compatible` offer at
    /// least the level it requests; `incompatible` (node, entity) offer less. Returns the
    /// statuses that changed.
    pub(crate) fn rematch(
        &self,
        me: NodeId,
        vid: u32,
        compatible: u32,
        incompatible: &[(EndpointKey, Mismatch)],
    ) -> StatusMask {
        let mut mask = StatusMask::NONE;
        let mut s = lock(&self.status);
        let before = s.matched.current_count;
        if rematch(&mut s.matched, compatible, vid) {
            mask = mask | StatusMask::SUBSCRIPTION_MATCHED;
            let now = s.matched.current_count;
            let l = &mut s.liveliness;
            if now > before {
                l.alive_count_change += (now - before) as i32;
            } else {
                l.not_alive_count += before - now;
                l.not_alive_count_change += (before - now) as i32;
                l.alive_count_change -= (before - now) as i32;
            }
            l.alive_count = now.saturating_sub(self.lapsed());
            mask = mask | StatusMask::LIVELINESS_CHANGED;
        }
        for (w, why) in incompatible {
            // A writer of another type counts on the topic (INCONSISTENT_TOPIC), not here.
            let Mismatch::Qos(policy) = why else { continue };
            if !s.incompatible_seen.insert(*w) {
                continue;
            }
            s.incompatible.count(*policy);
            tracing::warn!(
                topic = %self.topic.name,
                "reader {me}.{} requests more than writer {}.{} offers ({policy:?}): not \
                 matched (REQUESTED_INCOMPATIBLE_QOS)",
                self.id,
                w.0,
                w.1
            );
            mask = mask | StatusMask::REQUESTED_INCOMPATIBLE_QOS;
        }
        // Their samples are not taken: they do not match.
        let blocked: BTreeSet<WriterHandle> = incompatible
            .iter()
            .map(|((node, writer_id), _)| WriterHandle {
                node: *node,
                writer_id: *writer_id,
            })
            .collect();
        *lock(&self.blocked) = Arc::new(blocked);
        s.changes |= mask.0;
        mask
    }

    /// Changes its QoS to `qos` (`DataReader::set_qos`, after `changeable_to`): its
    /// cache applies a new DEADLINE (each alive instance's period restarts now),
    /// TIME_BASED_FILTER (from the next sample) and READER_DATA_LIFECYCLE; true if what
    /// it announces changed (DEADLINE, LATENCY_BUDGET).
    pub(crate) fn change_qos(&self, qos: DataReaderQos) -> bool {
        let mut q = lock(&self.qos);
        let announced = (q.deadline, q.latency_budget) != (qos.deadline, qos.latency_budget);
        let new_deadline = q.deadline != qos.deadline;
        let us = |d: spindle_qos::Duration| d.to_std().map(saturating_us);
        let (deadline, separation, autopurge) = (
            us(qos.deadline.period),
            us(qos.time_based_filter.minimum_separation).unwrap_or(u64::MAX),
            (
                us(qos.reader_data_lifecycle.autopurge_nowriter_samples_delay),
                us(qos.reader_data_lifecycle.autopurge_disposed_samples_delay),
            ),
        );
        *q = qos;
        drop(q);
        let mut c = lock(&self.cache);
        if new_deadline {
            c.change_deadline_us(deadline);
        }
        c.set_minimum_separation_us(separation);
        c.set_autopurge_us(autopurge.0, autopurge.1);
        announced
    }

    /// The reader's DEADLINE period, if finite.
    pub(crate) fn deadline_us(&self) -> Option<u64> {
        lock(&self.qos).deadline.period.to_std().map(saturating_us)
    }

    /// Counts instances whose DEADLINE passed by `now_us`; the changed statuses.
    pub(crate) fn check_deadlines(&self, now_us: u64) -> StatusMask {
        let missed = lock(&self.cache).deadline_misses(now_us);
        let Some(last) = missed.last() else {
            return StatusMask::NONE;
        };
        let mut s = lock(&self.status);
        s.deadline.total_count += missed.len() as u32;
        s.deadline.total_count_change += missed.len() as i32;
        s.deadline.last_instance_handle = *last;
        s.changes |= StatusMask::REQUESTED_DEADLINE_MISSED.0;
        StatusMask::REQUESTED_DEADLINE_MISSED
    }

    pub(crate) fn fire(&self, mask: StatusMask) {
        let l = lock(&self.listener).clone();
        if let Some(l) = l {
            l(mask);
        }
    }

    pub(crate) fn clear_listener(&self) {
        *lock(&self.listener) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::WallClock;
    use crate::discovery::partition_tag;
    use crate::sample::StateMask;
    use spindle_qos::{History, SubscriberQos};
    use spindle_topics::KeyHash;

    /// The table's word on a sample, as `State::judging` gives it for writers in `table`
    /// (none deleted, none moved).
    fn judging<'e>(
        table: &'e BTreeMap<EndpointKey, Endpoint>,
        w: &WriterHandle,
        tag: u32,
    ) -> Judging<'e> {
        let found = table
            .get(&(w.node, w.writer_id))
            .map(|endpoint| crate::held::Announced {
                endpoint,
                former: None,
                live: true,
            });
        crate::held::judge(found, tag)
    }

    /// A partitioned writer's samples delivered before the table names it are held back,
    /// and samples of a known writer delivered after them wait behind them; once the
    /// table names the writer, all are judged and kept in delivery order. A view change
    /// judges what is still held with the table as it is: a sample of a writer never
    /// named is lost (SAMPLE_LOST).
    #[test]
    fn samples_wait_in_order_for_the_table_to_name_their_writer() {
        let topic = Arc::new(TopicIdentity {
            name: "T".into(),
            topic_id: 5,
            subgroup: 0,
            type_id: 9,
            type_hash: None,
            type_name: "K".into(),
        });
        let x = Partition {
            name: vec!["x".into()],
        };
        let sub = SubscriberQos {
            partition: x.clone(),
            ..Default::default()
        };
        let qos = DataReaderQos::default().with_history(History::keep_all());
        let r = ReaderCore::new(
            1,
            Arc::clone(&topic),
            qos.clone(),
            Arc::new(WallClock),
            &sub,
            None,
        );
        // A reader of the default partition, for a default-partition sample.
        let plain = ReaderCore::new(
            2,
            topic,
            qos,
            Arc::new(WallClock),
            &Default::default(),
            None,
        );
        let tag = partition_tag(&x.name);
        let hdr = |writer_id, key: u8| SampleHeader {
            kind: SampleKind::Data,
            writer_id,
            topic_id: 5,
            writer_seq: 1,
            source_timestamp_ns: 0,
            key_hash: KeyHash([key; 16]),
            lifespan_ns: 0,
            ownership_strength: 0,
            level: r.level,
            partition_tag: tag,
            coherent: Coherent::No,
        };
        let writer = |entity| Endpoint {
            entity,
            topic_id: 5,
            type_id: 9,
            type_hash: None,
            reader: false,
            level: r.level,
            partition: x.clone(),
            liveliness: Default::default(),
            lease_us: None,
            rxo: Rxo::default(),
        };
        let o = |node, order_index| Origin {
            node,
            view_id: 1,
            order_index,
        };
        let delivered = |r: &ReaderCore| -> Vec<u64> {
            lock(&r.cache)
                .positions(&StateMask::ANY)
                .iter()
                .map(|p| p.delivered_at.1)
                .collect()
        };
        let mut table: BTreeMap<EndpointKey, Endpoint> = BTreeMap::new();
        table.insert((3, 8), writer(8));
        let (a, b, c) = (hdr(7, 1), hdr(8, 2), hdr(6, 3));
        // 2.7 is not in the table yet: its sample and 3.8's after it are held.
        let kept = r.route(
            [(&a, &b"a"[..], o(2, 0)), (&b, &b"b"[..], o(3, 1))].into_iter(),
            &|w, tag| judging(&table, w, tag),
            None,
        );
        assert!(kept == StatusMask::NONE && delivered(&r).is_empty());
        assert_eq!(
            r.release_held(&|w, tag| judging(&table, w, tag), false),
            StatusMask::NONE
        );
        table.insert((2, 7), writer(7));
        assert_eq!(
            r.release_held(&|w, tag| judging(&table, w, tag), false),
            StatusMask::DATA_AVAILABLE
        );
        assert_eq!(delivered(&r), [0, 1], "kept in delivery order");
        // 4.6 is never named: a view change judges it (not taken: a partitioned sample
        // of a writer nobody announced), and counts it lost.
        r.route(
            [(&c, &b"c"[..], o(4, 2))].into_iter(),
            &|w, tag| judging(&table, w, tag),
            None,
        );
        assert_eq!(
            r.release_held(&|w, tag| judging(&table, w, tag), true),
            StatusMask::SAMPLE_LOST
        );
        assert_eq!(delivered(&r), [0, 1]);
        assert!(lock(&r.held).is_empty());
        let lost = lock(&r.status).lost;
        assert_eq!((lost.total_count, lost.total_count_change), (1, 1));
        // A default-partition sample of a writer never named is judged by the default
        // partition alone at the view change: taken, so not lost.
        let d = SampleHeader {
            partition_tag: 0,
            ..hdr(6, 4)
        };
        plain.route(
            [(&d, &b"d"[..], o(4, 3))].into_iter(),
            &|w, tag| judging(&table, w, tag),
            None,
        );
        assert_eq!(
            plain.release_held(&|w, tag| judging(&table, w, tag), true),
            StatusMask::DATA_AVAILABLE
        );
        assert_eq!(delivered(&plain), [3]);
        assert_eq!(lock(&plain.status).lost.total_count, 0);
    }
}
