//! Typed readers (DDS `DataReader`), their listeners and read conditions.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use spindle_qos::{DataReaderQos, DeliveryLevel, QosPolicyId};
use spindle_topics::TopicType;

use crate::cache::{Cache, Origin};
use crate::condition::{notify_all, Condition};
use crate::domain::{instance_of, lock, reason, update_matched, TopicInner};
use crate::error::{Error, Result};
use crate::sample::{InstanceHandle, Sample, SampleHeader, StateMask, WriterHandle};
use crate::status::{
    DeadlineMissedStatus, IncompatibleQosStatus, LivelinessChangedStatus, MatchedStatus,
    SampleRejectedStatus, StatusMask,
};
use crate::store::Store;

type Listener = Arc<dyn Fn(StatusMask) + Send + Sync>;

#[derive(Debug, Default)]
struct Statuses {
    matched: MatchedStatus,
    rejected: SampleRejectedStatus,
    liveliness: LivelinessChangedStatus,
    deadline: DeadlineMissedStatus,
    incompatible: IncompatibleQosStatus,
    /// Statuses changed since read (the StatusCondition's trigger).
    changes: u32,
}

pub(crate) struct ReaderCore {
    pub(crate) id: u32,
    pub(crate) topic: Arc<TopicInner>,
    pub(crate) subgroup: spindle_group::SubgroupId,
    qos: DataReaderQos,
    cache: Mutex<Cache>,
    status: Mutex<Statuses>,
    matched: AtomicBool,
    listener: Mutex<Option<Listener>>,
    pub(crate) deleted: AtomicBool,
}

impl ReaderCore {
    pub(crate) fn new(id: u32, topic: Arc<TopicInner>, qos: DataReaderQos) -> Arc<ReaderCore> {
        Arc::new(ReaderCore {
            id,
            subgroup: topic.subgroup,
            topic,
            cache: Mutex::new({
                let mut c = Cache::new(qos.history, qos.resource_limits);
                c.set_deadline_us(qos.deadline.period.to_std().map(|d| d.as_micros() as u64));
                c.set_exclusive(qos.ownership.kind == spindle_qos::OwnershipKind::Exclusive);
                c.set_minimum_separation_us(
                    qos.time_based_filter
                        .minimum_separation
                        .to_std()
                        .map_or(u64::MAX, |d| d.as_micros() as u64),
                );
                c
            }),
            qos,
            status: Mutex::new(Statuses::default()),
            matched: AtomicBool::new(false),
            listener: Mutex::new(None),
            deleted: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_matched(&self) -> bool {
        self.matched.load(Ordering::Acquire)
    }

    /// Adds a delivered sample; false if rejected (counted in SAMPLE_REJECTED).
    pub(crate) fn insert(&self, h: &SampleHeader, payload: &[u8], o: Origin) -> bool {
        self.insert_all(std::iter::once((h, payload, o)))
    }

    /// Adds delivered samples of this reader's topic under one lock of the cache;
    /// true if any was kept.
    pub(crate) fn insert_all<'a>(
        &self,
        items: impl Iterator<Item = (&'a SampleHeader, &'a [u8], Origin)>,
    ) -> bool {
        let mut kept = false;
        let mut rejected = Vec::new();
        {
            let mut cache = lock(&self.cache);
            for (h, payload, o) in items {
                match cache.insert(h, payload, o) {
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
    pub(crate) fn prime(&self, store: &Store) -> bool {
        let mut any = false;
        for s in store.iter() {
            if let Ok((h, payload)) = SampleHeader::decode(&s.bytes) {
                if h.topic_id == self.topic.topic_id {
                    any |= self.insert(&h, payload, s.origin);
                }
            }
        }
        any
    }

    /// The view changed; returns the statuses that changed.
    pub(crate) fn on_view(
        &self,
        vid: u32,
        in_subgroup: bool,
        writers: u32,
        level: DeliveryLevel,
        gone: &dyn Fn(&WriterHandle) -> bool,
    ) -> StatusMask {
        let mut mask = StatusMask::NONE;
        // A RELIABLE reader does not match BEST_EFFORT-only writers (RxO).
        // The writers must offer at least the level this reader requests (RELIABILITY
        // and DURABILITY are requested-vs-offered policies).
        let compatible = !in_subgroup || self.qos.delivery_level() <= level;
        let matched = in_subgroup && compatible;
        self.matched.store(matched, Ordering::Release);
        lock(&self.cache).writers_gone(gone);
        let mut s = lock(&self.status);
        let before = s.matched.current_count;
        if update_matched(&mut s.matched, if matched { writers } else { 0 }, vid) {
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
            l.alive_count = now;
            mask = mask | StatusMask::LIVELINESS_CHANGED;
        }
        if !compatible {
            s.incompatible.total_count += 1;
            s.incompatible.total_count_change += 1;
            s.incompatible.last_policy_id = Some(if level == DeliveryLevel::Unordered {
                QosPolicyId::Reliability
            } else {
                QosPolicyId::Durability
            });
            mask = mask | StatusMask::REQUESTED_INCOMPATIBLE_QOS;
        }
        s.changes |= mask.0;
        mask
    }

    /// The reader's DEADLINE period, if finite.
    pub(crate) fn deadline_us(&self) -> Option<u64> {
        self.qos
            .deadline
            .period
            .to_std()
            .map(|d| d.as_micros() as u64)
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

/// Reads samples of `T` from a topic (DDS `DataReader`). Cheap to clone.
pub struct DataReader<T: TopicType> {
    core: Arc<ReaderCore>,
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Clone for DataReader<T> {
    fn clone(&self) -> Self {
        DataReader {
            core: Arc::clone(&self.core),
            _t: PhantomData,
        }
    }
}

impl<T: TopicType> std::fmt::Debug for DataReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataReader")
            .field("id", &self.core.id)
            .field("topic", &self.core.topic.name)
            .finish()
    }
}

/// Callbacks of a reader (DDS `DataReaderListener`), run on the participant's delivery
/// thread. Every method has an empty default.
pub trait DataReaderListener<T: TopicType>: Send + Sync + 'static {
    /// New samples are in the cache.
    fn on_data_available(&self, _reader: &DataReader<T>) {}
    /// The matched writers changed (the installed view changed).
    fn on_subscription_matched(&self, _reader: &DataReader<T>, _status: MatchedStatus) {}
    /// A sample was rejected by RESOURCE_LIMITS.
    fn on_sample_rejected(&self, _reader: &DataReader<T>, _status: SampleRejectedStatus) {}
    /// An instance went a DEADLINE period without data.
    fn on_requested_deadline_missed(&self, _reader: &DataReader<T>, _status: DeadlineMissedStatus) {
    }
    /// Matched writers' participants joined or left the view.
    fn on_liveliness_changed(&self, _reader: &DataReader<T>, _status: LivelinessChangedStatus) {}
    /// The writers offer less than this reader requests.
    fn on_requested_incompatible_qos(
        &self,
        _reader: &DataReader<T>,
        _status: IncompatibleQosStatus,
    ) {
    }
}

impl<T: TopicType> DataReader<T> {
    pub(crate) fn new(core: Arc<ReaderCore>) -> Self {
        DataReader {
            core,
            _t: PhantomData,
        }
    }

    pub(crate) fn core(&self) -> &Arc<ReaderCore> {
        &self.core
    }

    pub(crate) fn refresh_matched(&self) {
        let p = &self.core.topic.participant;
        let me = p.me();
        let st = lock(&p.shared.state);
        let vid = st.view.as_ref().map_or(0, |v| v.vid);
        let (in_sg, writers, level) = match st.subgroups.get(&self.core.subgroup) {
            Some(d) if d.spec.members.contains(&me) => (true, d.spec.senders.len() as u32, d.level),
            _ => (false, 0, DeliveryLevel::Unordered),
        };
        let members: Vec<_> = st
            .view
            .as_ref()
            .map(|v| v.members.clone())
            .unwrap_or_default();
        drop(st);
        self.core
            .on_view(vid, in_sg, writers, level, &|w| !members.contains(&w.node));
    }

    /// The topic's name.
    pub fn topic_name(&self) -> &str {
        &self.core.topic.name
    }

    /// The reader's QoS.
    pub fn qos(&self) -> &DataReaderQos {
        &self.core.qos
    }

    fn check(&self) -> Result<()> {
        if self.core.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted(format!("reader {}", self.core.id)));
        }
        Ok(())
    }

    fn access(
        &self,
        max: usize,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
    ) -> Result<Vec<Sample<T>>> {
        self.check()?;
        let raw = lock(&self.core.cache).access(max, mask, instance, take);
        {
            let mut s = lock(&self.core.status);
            s.changes &= !StatusMask::DATA_AVAILABLE.0;
        }
        raw.into_iter()
            .map(|(info, bytes)| {
                let data = if info.valid_data {
                    Some(T::decode(&bytes)?)
                } else {
                    None
                };
                Ok(Sample { data, info })
            })
            .collect()
    }

    /// Returns up to `max` samples in the states of `mask`, leaving them in the cache
    /// (DDS `read`); they come in the topic's total order.
    pub fn read(&self, max: usize, mask: StateMask) -> Result<Vec<Sample<T>>> {
        self.access(max, &mask, None, false)
    }

    /// Like [`DataReader::read`], but removes the samples (DDS `take`).
    pub fn take(&self, max: usize, mask: StateMask) -> Result<Vec<Sample<T>>> {
        self.access(max, &mask, None, true)
    }

    /// Reads the samples of one instance (DDS `read_instance`).
    pub fn read_instance(
        &self,
        max: usize,
        instance: InstanceHandle,
        mask: StateMask,
    ) -> Result<Vec<Sample<T>>> {
        self.access(max, &mask, Some(instance), false)
    }

    /// Takes the samples of one instance (DDS `take_instance`).
    pub fn take_instance(
        &self,
        max: usize,
        instance: InstanceHandle,
        mask: StateMask,
    ) -> Result<Vec<Sample<T>>> {
        self.access(max, &mask, Some(instance), true)
    }

    /// Takes the next sample not read yet (DDS `take_next_sample`); `NoData` if none.
    pub fn take_next_sample(&self) -> Result<Sample<T>> {
        self.access(1, &StateMask::NOT_READ, None, true)?
            .pop()
            .ok_or(Error::NoData)
    }

    /// Reads the next sample not read yet (DDS `read_next_sample`); `NoData` if none.
    pub fn read_next_sample(&self) -> Result<Sample<T>> {
        self.access(1, &StateMask::NOT_READ, None, false)?
            .pop()
            .ok_or(Error::NoData)
    }

    /// The instance handle of `data`'s key (DDS `lookup_instance`).
    pub fn lookup_instance(&self, data: &T) -> Result<InstanceHandle> {
        instance_of(data)
    }

    /// `SUBSCRIPTION_MATCHED_STATUS`: the writers' participants in the installed view;
    /// reading it resets the change counts.
    pub fn subscription_matched_status(&self) -> MatchedStatus {
        let mut s = lock(&self.core.status);
        let out = s.matched;
        s.matched.total_count_change = 0;
        s.matched.current_count_change = 0;
        s.changes &= !StatusMask::SUBSCRIPTION_MATCHED.0;
        out
    }

    /// `SAMPLE_REJECTED_STATUS`.
    pub fn sample_rejected_status(&self) -> SampleRejectedStatus {
        let mut s = lock(&self.core.status);
        let out = s.rejected;
        s.rejected.total_count_change = 0;
        s.changes &= !StatusMask::SAMPLE_REJECTED.0;
        out
    }

    /// `LIVELINESS_CHANGED_STATUS`.
    pub fn liveliness_changed_status(&self) -> LivelinessChangedStatus {
        let mut s = lock(&self.core.status);
        let out = s.liveliness;
        s.liveliness.alive_count_change = 0;
        s.liveliness.not_alive_count_change = 0;
        s.changes &= !StatusMask::LIVELINESS_CHANGED.0;
        out
    }

    /// `REQUESTED_DEADLINE_MISSED_STATUS` (checked by the participant's deadline timer).
    pub fn requested_deadline_missed_status(&self) -> DeadlineMissedStatus {
        let mut s = lock(&self.core.status);
        let out = s.deadline;
        s.deadline.total_count_change = 0;
        s.changes &= !StatusMask::REQUESTED_DEADLINE_MISSED.0;
        out
    }

    /// `REQUESTED_INCOMPATIBLE_QOS_STATUS`.
    pub fn requested_incompatible_qos_status(&self) -> IncompatibleQosStatus {
        let mut s = lock(&self.core.status);
        let out = s.incompatible.clone();
        s.incompatible.total_count_change = 0;
        s.changes &= !StatusMask::REQUESTED_INCOMPATIBLE_QOS.0;
        out
    }

    /// Statuses changed and not read since (DDS `get_status_changes`).
    pub fn status_changes(&self) -> StatusMask {
        StatusMask(lock(&self.core.status).changes)
    }

    /// Installs `listener` (replacing one set before).
    pub fn set_listener(&self, listener: impl DataReaderListener<T>) {
        let weak: Weak<ReaderCore> = Arc::downgrade(&self.core);
        let l: Listener = Arc::new(move |mask: StatusMask| {
            let Some(core) = weak.upgrade() else { return };
            let r = DataReader::<T>::new(core);
            if mask.intersects(StatusMask::SUBSCRIPTION_MATCHED) {
                let s = lock(&r.core.status).matched;
                listener.on_subscription_matched(&r, s);
            }
            if mask.intersects(StatusMask::REQUESTED_DEADLINE_MISSED) {
                let s = lock(&r.core.status).deadline;
                listener.on_requested_deadline_missed(&r, s);
            }
            if mask.intersects(StatusMask::LIVELINESS_CHANGED) {
                let s = lock(&r.core.status).liveliness;
                listener.on_liveliness_changed(&r, s);
            }
            if mask.intersects(StatusMask::REQUESTED_INCOMPATIBLE_QOS) {
                let s = lock(&r.core.status).incompatible.clone();
                listener.on_requested_incompatible_qos(&r, s);
            }
            if mask.intersects(StatusMask::DATA_AVAILABLE) {
                let rejected = lock(&r.core.status).rejected;
                if rejected.total_count_change > 0 {
                    listener.on_sample_rejected(&r, rejected);
                }
                listener.on_data_available(&r);
            }
        });
        *lock(&self.core.listener) = Some(l);
    }

    /// A condition that holds while samples in the states of `mask` are in the cache
    /// (DDS `create_readcondition`).
    pub fn create_readcondition(&self, mask: StateMask) -> Arc<ReadCondition> {
        Arc::new(ReadCondition {
            core: Arc::clone(&self.core),
            mask,
        })
    }

    /// A condition that holds while a status in `enabled` changed unread (DDS
    /// `get_statuscondition` with `set_enabled_statuses`).
    pub fn status_condition(&self, enabled: StatusMask) -> Arc<StatusCondition> {
        Arc::new(StatusCondition {
            core: Arc::clone(&self.core),
            enabled,
        })
    }
}

/// Holds while a reader has samples in the mask's states (DDS `ReadCondition`).
pub struct ReadCondition {
    core: Arc<ReaderCore>,
    mask: StateMask,
}

impl std::fmt::Debug for ReadCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCondition")
            .field("mask", &self.mask)
            .finish()
    }
}

impl Condition for ReadCondition {
    fn trigger_value(&self) -> bool {
        lock(&self.core.cache).any(&self.mask, None)
    }
}

/// Holds while an enabled status of a reader changed unread (DDS `StatusCondition`).
pub struct StatusCondition {
    core: Arc<ReaderCore>,
    enabled: StatusMask,
}

impl std::fmt::Debug for StatusCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusCondition")
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl Condition for StatusCondition {
    fn trigger_value(&self) -> bool {
        let changes = StatusMask(lock(&self.core.status).changes);
        changes.intersects(self.enabled)
            && (!self.enabled.intersects(StatusMask::DATA_AVAILABLE)
                || changes.0 & !StatusMask::DATA_AVAILABLE.0 & self.enabled.0 != 0
                || !lock(&self.core.cache).is_empty())
    }
}

/// Wakes waiting WaitSets (after a change outside the delivery path).
#[allow(dead_code)]
pub(crate) fn wake() {
    notify_all();
}
