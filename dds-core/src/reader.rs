//! Typed readers (DDS `DataReader`), their listeners and read conditions.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use spindle_qos::{DataReaderQos, DeliveryLevel};
use spindle_topics::TopicType;

use crate::cache::{NoKey, Payload, Query};
use crate::common::{instance_of, lock};
use crate::condition::{notify_all, Condition};
use crate::delivery::{count, matched_entry, writers_of};
use crate::discovery::{Endpoint, EndpointKey};
use crate::error::{Error, Result};
use crate::inner::TopicInner;
use crate::reader_core::{Listener, ReaderCore};
use crate::sample::{InstanceHandle, Sample, SampleBuffer, SampleInfo, StateMask};
use crate::status::{
    DeadlineMissedStatus, IncompatibleQosStatus, LivelinessChangedStatus, MatchedStatus,
    SampleLostStatus, SampleRejectedStatus, StatusMask,
};

/// Reads samples of `T` from a topic (DDS `DataReader`). Cheap to clone.
pub struct DataReader<T: TopicType> {
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) topic: Arc<TopicInner>,
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Clone for DataReader<T> {
    fn clone(&self) -> Self {
        DataReader {
            core: Arc::clone(&self.core),
            topic: Arc::clone(&self.topic),
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
    /// Samples were lost ([`DataReader::sample_lost_status`]).
    fn on_sample_lost(&self, _reader: &DataReader<T>, _status: SampleLostStatus) {}
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

/// A reader of this participant, as [`DataReader::handle`] and
/// [`Subscriber::get_datareaders`](crate::Subscriber::get_datareaders) name it: its
/// entity id within the participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReaderHandle(pub u32);

impl<T: TopicType> DataReader<T> {
    pub(crate) fn new(core: Arc<ReaderCore>, topic: Arc<TopicInner>) -> Self {
        DataReader {
            core,
            topic,
            _t: PhantomData,
        }
    }

    pub(crate) fn core(&self) -> &Arc<ReaderCore> {
        &self.core
    }

    /// Sets the reader's membership and matched statuses from the installed view and the
    /// endpoint table (right after creation; later changes come by the delivery path).
    pub(crate) fn refresh_matched(&self) {
        let p = &self.topic.participant;
        let me = p.me();
        let st = lock(&p.shared.state);
        let vid = st.view.as_ref().map_or(0, |v| v.vid);
        let member = st
            .subgroups
            .get(&self.core.subgroup)
            .is_some_and(|d| d.spec.members.contains(&me));
        let (compatible, incompatible) = writers_of(&st, &self.core.endpoint());
        let members: Vec<_> = st
            .view
            .as_ref()
            .map(|v| v.members.clone())
            .unwrap_or_default();
        drop(st);
        // Notices this adds raise DATA_AVAILABLE in the status; the reader is new, so no
        // listener of it runs yet.
        let _noticed = self
            .core
            .set_member(member, &|w| !members.contains(&w.node));
        self.core
            .rematch(me, vid, count(&compatible), &incompatible);
    }

    /// The writers this reader matches now (DDS `get_matched_publications`), each named by
    /// its participant's node and its entity id there, sorted: the writers
    /// [`DataReader::subscription_matched_status`] counts, from the same built-in table
    /// (of the domain's writers of its topic, those of its type in a common partition
    /// that offer what it requests).
    pub fn get_matched_publications(&self) -> Result<Vec<EndpointKey>> {
        self.check()?;
        let st = lock(&self.topic.participant.shared.state);
        Ok(writers_of(&st, &self.core.endpoint()).0)
    }

    /// What the built-in topic announced of `writer`, one of
    /// [`DataReader::get_matched_publications`] (DDS `get_matched_publication_data`):
    /// its topic, type, level, partition and offered QoS. `BadParameter` if this reader
    /// does not match it (any more).
    pub fn get_matched_publication_data(&self, writer: EndpointKey) -> Result<Endpoint> {
        self.check()?;
        let st = lock(&self.topic.participant.shared.state);
        let matched = writers_of(&st, &self.core.endpoint()).0;
        matched_entry(&st, &matched, writer, &format!("reader {}", self.core.id))
    }

    /// Waits until this reader holds its topic's history (DDS
    /// `wait_for_historical_data`): the samples a TRANSIENT_LOCAL, TRANSIENT or
    /// PERSISTENT store kept before it was created, or before this participant rejoined
    /// the domain. `create_datareader` already waits for them, so this returns at once
    /// unless the participant is receiving them again (a rejoin's state transfer), and at
    /// once for a VOLATILE reader. `Timeout` after `max_wait` saying what is awaited;
    /// `IllegalOperation` from a listener (it would block the delivery it waits for).
    pub fn wait_for_historical_data(&self, max_wait: std::time::Duration) -> Result<()> {
        if crate::common::on_delivery_thread() {
            return Err(Error::IllegalOperation(
                "wait_for_historical_data from a listener would block the deliveries it \
                 waits for"
                    .into(),
            ));
        }
        self.check()?;
        if lock(&self.core.qos).durability.kind == spindle_qos::DurabilityKind::Volatile {
            return Ok(());
        }
        let p = &self.topic.participant;
        let (sg, me) = (self.core.subgroup, p.me());
        p.wait_until(
            max_wait,
            |st| {
                format!(
                    "reader {} on {:?}: the history of subgroup {sg} not received within {} \
                     ms ({})",
                    self.core.id,
                    self.core.topic.name,
                    max_wait.as_millis(),
                    if st.awaiting_state.contains(&sg) {
                        "its state transfer is awaited"
                    } else {
                        "the view does not yet make this participant a reader of it"
                    }
                )
            },
            |st| st.history_held(sg, me),
        )
    }

    /// This reader's handle (DDS `get_instance_handle`): what
    /// [`Subscriber::get_datareaders`](crate::Subscriber::get_datareaders) names it by.
    pub fn handle(&self) -> ReaderHandle {
        ReaderHandle(self.core.id)
    }

    /// The topic's name.
    pub fn topic_name(&self) -> &str {
        &self.core.topic.name
    }

    /// The reader's QoS.
    pub fn qos(&self) -> DataReaderQos {
        lock(&self.core.qos).clone()
    }

    /// Changes the QoS (DDS `set_qos`): DEADLINE, LATENCY_BUDGET, TIME_BASED_FILTER,
    /// READER_DATA_LIFECYCLE and USER_DATA may change after creation; another policy
    /// that differs is `ImmutablePolicy`, an inconsistent QoS `InconsistentPolicy`.
    /// A new DEADLINE restarts every alive instance's period now; a new
    /// TIME_BASED_FILTER applies from the next sample; new autopurge delays apply to
    /// instances already not alive too. A new DEADLINE or LATENCY_BUDGET is announced
    /// again, and this returns once the announcement is delivered here: writers that
    /// no longer offer what it requests are no longer matched (each side counts the
    /// other in its INCOMPATIBLE_QOS status), and those that now do are; such a change is
    /// `IllegalOperation` from a listener (the delivery thread delivers the announcement
    /// it waits for).
    pub fn set_qos(&self, qos: DataReaderQos) -> Result<()> {
        self.check()?;
        qos.check()?;
        {
            let q = lock(&self.core.qos);
            q.changeable_to(&qos)?;
            crate::common::announcing_allowed(
                (q.deadline, q.latency_budget) != (qos.deadline, qos.latency_budget),
            )?;
        }
        let p = &self.topic.participant;
        if let Some(period) = qos.deadline.period.to_std() {
            p.shared
                .want_timer(crate::common::saturating_us(period).max(1));
        }
        let core = &self.core;
        p.reannounce(
            &core.announcing,
            &core.deleted,
            || core.change_qos(qos).then(|| core.endpoint()),
            || {},
        )
    }

    fn check(&self) -> Result<()> {
        if self.core.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted(format!("reader {}", self.core.id)));
        }
        Ok(())
    }

    /// The samples an access picks, undecoded, with DATA_AVAILABLE cleared.
    fn access_raw(
        &self,
        max: usize,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
    ) -> Result<Vec<(SampleInfo, Payload)>> {
        self.access_raw_if(max, mask, Pick::from(instance), take, None)
    }

    /// [`DataReader::access_raw`] of the samples whose bytes pass `query`, if given.
    fn access_raw_if(
        &self,
        max: usize,
        mask: &StateMask,
        pick: Pick,
        take: bool,
        query: Query<'_>,
    ) -> Result<Vec<(SampleInfo, Payload)>> {
        self.check()?;
        let mut raw = {
            let mut cache = lock(&self.core.cache);
            // The next instance is chosen under the same lock as its samples are taken.
            let instance = match pick {
                Pick::Any => None,
                Pick::Instance(h) => Some(h),
                Pick::After(after) => match cache.next_instance(after, mask, query) {
                    Some(h) => Some(h),
                    None => return Ok(Vec::new()),
                },
            };
            cache.access_if(max, mask, instance, take, query)
        };
        lock(&self.core.status).changes &= !StatusMask::DATA_AVAILABLE.0;
        if self.core.level == DeliveryLevel::LoggedStore && !raw.is_empty() {
            let st = lock(&self.topic.participant.shared.state);
            if let Some(d) = st.durable.get(&self.core.subgroup) {
                for (info, _) in &mut raw {
                    info.durable = d.covers(info.view_id, info.order_index);
                }
            }
        }
        Ok(raw)
    }

    fn access(
        &self,
        max: usize,
        mask: &StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
    ) -> Result<Vec<Sample<T>>> {
        self.access_if(max, mask, Pick::from(instance), take, None)
    }

    /// Decoded samples of [`DataReader::access_raw_if`] (what `read_w_condition` and
    /// `take_w_condition` use).
    pub(crate) fn access_if(
        &self,
        max: usize,
        mask: &StateMask,
        pick: Pick,
        take: bool,
        query: Query<'_>,
    ) -> Result<Vec<Sample<T>>> {
        let raw = self.access_raw_if(max, mask, pick, take, query)?;
        let mut spent = Vec::with_capacity(raw.len());
        let samples = raw
            .into_iter()
            .map(|(info, bytes)| {
                let data = if info.valid_data {
                    Some(T::decode_with_key_hash(&bytes, &info.instance_handle.0)?)
                } else {
                    None
                };
                spent.push(bytes);
                Ok(Sample { data, info })
            })
            .collect();
        // The decoded samples own their data; the bytes go back for later deliveries.
        lock(&self.core.cache).recycle(spent);
        samples
    }

    /// Like [`DataReader::take`], but lends the samples' serialized bytes instead of
    /// decoding them (DDS `take` with a loan, as Cyclone's loans): nothing is copied or
    /// decoded until [`LoanedRead::data`] asks. The bytes are those the engine delivered,
    /// in the delivery batch the reader's cache borrowed ([`crate::lent`]; a copy made at
    /// delivery past [`crate::lent::LENT_BYTES_MAX`]), never a ring slot, so a held loan
    /// does not hold back the writers; it pins its samples' batches until dropped or
    /// [`LoanedSamples::return_loan`], when they go back for later deliveries.
    pub fn take_loaned(&self, max: usize, mask: StateMask) -> Result<LoanedSamples<T>> {
        Ok(LoanedSamples::new(
            &self.core,
            self.access_raw(max, &mask, None, true)?,
        ))
    }

    /// Like [`DataReader::read`], but lends the samples: the cache and the loan share the
    /// bytes (no copy, no decode); they stay in the cache, marked READ.
    pub fn read_loaned(&self, max: usize, mask: StateMask) -> Result<LoanedSamples<T>> {
        Ok(LoanedSamples::new(
            &self.core,
            self.access_raw(max, &mask, None, false)?,
        ))
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

    /// Like [`DataReader::take`], but decodes into `out`'s values kept from earlier
    /// accesses instead of new ones ([`SampleBuffer`]): a reader that takes with the same
    /// buffer allocates and frees nothing per sample. `out` then holds exactly the taken
    /// samples; returns how many. If a sample does not decode, the error is returned and
    /// `out` holds the samples before it (the access took them all, as `take` does).
    pub fn take_into(
        &self,
        out: &mut SampleBuffer<T>,
        max: usize,
        mask: StateMask,
    ) -> Result<usize> {
        self.access_into(out, max, &mask, true)
    }

    /// Like [`DataReader::read`], decoding into `out` as [`DataReader::take_into`] does.
    pub fn read_into(
        &self,
        out: &mut SampleBuffer<T>,
        max: usize,
        mask: StateMask,
    ) -> Result<usize> {
        self.access_into(out, max, &mask, false)
    }

    fn access_into(
        &self,
        out: &mut SampleBuffer<T>,
        max: usize,
        mask: &StateMask,
        take: bool,
    ) -> Result<usize> {
        let raw = self.access_raw(max, mask, None, take)?;
        out.clear();
        let decoded = raw
            .iter()
            .try_for_each(|(info, bytes)| out.push_decoded(info, bytes.bytes()));
        // The values own their data; the bytes go back for later deliveries.
        lock(&self.core.cache).recycle(raw.into_iter().map(|(_, b)| b));
        decoded.map(|()| out.len())
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

    /// Reads the samples of the next instance (DDS `read_next_instance`): the one with the
    /// smallest handle above `previous` (from the first, if `None`) that holds samples
    /// `mask` accepts; empty once there is none. Handles order instances by their key
    /// hash, so passing each result's `info.instance_handle` back visits every instance
    /// once, in one order at every reader:
    ///
    /// ```no_run
    /// # fn visit(r: &spindle_dds_core::DataReader<spindle_topics::KeyedString>)
    /// #     -> spindle_dds_core::Result<()> {
    /// use spindle_dds_core::StateMask;
    /// let mut previous = None;
    /// loop {
    ///     let samples = r.read_next_instance(usize::MAX, previous, StateMask::ANY)?;
    ///     let Some(first) = samples.first() else { break };
    ///     previous = Some(first.info.instance_handle);
    ///     // … one instance's samples, oldest first
    /// }
    /// # Ok(()) }
    /// ```
    pub fn read_next_instance(
        &self,
        max: usize,
        previous: Option<InstanceHandle>,
        mask: StateMask,
    ) -> Result<Vec<Sample<T>>> {
        self.access_if(max, &mask, Pick::After(previous), false, None)
    }

    /// Takes the samples of the next instance (DDS `take_next_instance`): as
    /// [`DataReader::read_next_instance`], taking them.
    pub fn take_next_instance(
        &self,
        max: usize,
        previous: Option<InstanceHandle>,
        mask: StateMask,
    ) -> Result<Vec<Sample<T>>> {
        self.access_if(max, &mask, Pick::After(previous), true, None)
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

    /// The handle of `data`'s instance if this reader knows it (DDS `lookup_instance`;
    /// `None` is DDS's `HANDLE_NIL`): a sample of it arrived, and the reader did not
    /// forget it since (see [`DataReader::get_key_value`]).
    pub fn lookup_instance(&self, data: &T) -> Result<Option<InstanceHandle>> {
        self.check()?;
        let key = instance_of(data)?;
        Ok(lock(&self.core.cache).knows(key).then_some(key))
    }

    /// The key of instance `handle` (DDS `get_key_value`): what a dispose or unregister
    /// notice, which carries no data, is about. A whole sample of the instance is
    /// returned, its key members the instance's (the others as its first data sample
    /// had them). `BadParameter` if this reader does not know the instance (or forgot
    /// it: ended and taken before the last [`crate::cache::PURGED_KEYS_MAX`] it forgot);
    /// `PreconditionNotMet` if no data sample of it reached this reader, or its first was
    /// larger than [`crate::cache::KEY_SAMPLE_BYTES_MAX`] (not kept).
    pub fn get_key_value(&self, handle: InstanceHandle) -> Result<T> {
        self.check()?;
        let cache = lock(&self.core.cache);
        match cache.key_sample(handle) {
            Ok(bytes) => Ok(T::decode_with_key_hash(bytes, &handle.0)?),
            Err(NoKey::UnknownInstance) => Err(Error::BadParameter(format!(
                "instance {} is not known to reader {}",
                handle.0, self.core.id
            ))),
            Err(NoKey::NotKept) => Err(Error::PreconditionNotMet(format!(
                "reader {} holds no key of instance {}: no data sample of it arrived here, \
                 or its first was larger than {} bytes",
                self.core.id,
                handle.0,
                crate::cache::KEY_SAMPLE_BYTES_MAX
            ))),
        }
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

    /// `SAMPLE_LOST_STATUS`: samples delivered to this participant that the reader
    /// could not judge and so did not take — held back for a writer the built-in table
    /// never named before a view change, or past `HELD_BYTES_MAX` (16 MiB) held —
    /// as DDS counts samples a reader never got. Reading it resets the change count.
    pub fn sample_lost_status(&self) -> SampleLostStatus {
        let mut s = lock(&self.core.status);
        let out = s.lost;
        s.lost.total_count_change = 0;
        s.changes &= !StatusMask::SAMPLE_LOST.0;
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
        let weak_topic: Weak<TopicInner> = Arc::downgrade(&self.topic);
        let l: Listener = Arc::new(move |mask: StatusMask| {
            let (Some(core), Some(topic)) = (weak.upgrade(), weak_topic.upgrade()) else {
                return;
            };
            let r = DataReader::<T>::new(core, topic);
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
            if mask.intersects(StatusMask::SAMPLE_LOST) {
                let s = lock(&r.core.status).lost;
                listener.on_sample_lost(&r, s);
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

/// Samples lent by [`DataReader::take_loaned`] or [`DataReader::read_loaned`]: their
/// infos and serialized bytes, decoded only on demand. Dropping the loan (or
/// [`LoanedSamples::return_loan`]) gives the buffers back to the reader.
///
/// ```
/// # use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask, Transport};
/// # use spindle_qos::{DataReaderQos, DataWriterQos, DomainParticipantQos, Reliability, TopicQos};
/// # use spindle_topics::KeyedString;
/// # let mut cfg = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
/// # cfg.bootstrap = vec![1];
/// # let p = DomainParticipantFactory::instance()
/// #     .create_participant(0, DomainParticipantQos::default(), &cfg)?;
/// # let topic = p.create_topic::<KeyedString>("loans", TopicQos::default())?;
/// # let reader = p.create_subscriber(Default::default())?.create_datareader(
/// #     &topic, DataReaderQos::default().with_reliability(Reliability::reliable()))?;
/// # let writer = p.create_publisher(Default::default())?
/// #     .create_datawriter(&topic, DataWriterQos::default())?;
/// writer.write(&KeyedString { key: "a".into(), value: "hello".into() })?;
/// let mut seen = 0;
/// while seen == 0 {
///     let loan = reader.take_loaned(16, StateMask::ANY)?;
///     for s in loan.iter() {
///         assert!(s.info.valid_data);
///         // Decoded only here, from the reader's own bytes:
///         assert_eq!(s.data()?.map(|d| d.value), Some("hello".to_string()));
///         seen += 1;
///     }
///     loan.return_loan(); // or drop it: the buffers go back to the reader
/// }
/// # p.close();
/// # Ok::<(), spindle_dds_core::Error>(())
/// ```
pub struct LoanedSamples<T: TopicType> {
    core: Arc<ReaderCore>,
    samples: Vec<(SampleInfo, Payload)>,
    _t: PhantomData<fn() -> T>,
}

/// One lent sample: its info and its bytes, borrowed from the [`LoanedSamples`].
pub struct LoanedRead<'a, T: TopicType> {
    /// Its info.
    pub info: &'a SampleInfo,
    bytes: &'a [u8],
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Clone for LoanedRead<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: TopicType> Copy for LoanedRead<'_, T> {}

impl<T: TopicType> std::fmt::Debug for LoanedRead<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanedRead")
            .field("info", self.info)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl<'a, T: TopicType> LoanedRead<'a, T> {
    /// Decodes the value (`None` for dispose and unregister notices).
    pub fn data(&self) -> Result<Option<T>> {
        if self.info.valid_data {
            Ok(Some(T::decode_with_key_hash(
                self.bytes,
                &self.info.instance_handle.0,
            )?))
        } else {
            Ok(None)
        }
    }

    /// The sample's CDR encoding (empty for notices), without decoding it.
    pub fn cdr_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<T: TopicType> LoanedSamples<T> {
    fn new(core: &Arc<ReaderCore>, samples: Vec<(SampleInfo, Payload)>) -> Self {
        LoanedSamples {
            core: Arc::clone(core),
            samples,
            _t: PhantomData,
        }
    }

    /// How many samples are lent.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True if none.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The `i`th sample, in the topic's total order.
    pub fn get(&self, i: usize) -> Option<LoanedRead<'_, T>> {
        self.samples.get(i).map(|(info, bytes)| LoanedRead {
            info,
            bytes: bytes.bytes(),
            _t: PhantomData,
        })
    }

    /// The samples in the topic's total order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = LoanedRead<'_, T>> + '_ {
        self.samples.iter().map(|(info, bytes)| LoanedRead {
            info,
            bytes: bytes.bytes(),
            _t: PhantomData,
        })
    }

    /// Ends the loan (DDS `return_loan`; dropping does the same).
    pub fn return_loan(self) {}
}

impl<T: TopicType> std::fmt::Debug for LoanedSamples<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanedSamples")
            .field("reader", &self.core.id)
            .field("len", &self.samples.len())
            .finish()
    }
}

impl<T: TopicType> Drop for LoanedSamples<T> {
    fn drop(&mut self) {
        if !self.samples.is_empty() {
            let spent = std::mem::take(&mut self.samples)
                .into_iter()
                .map(|(_, b)| b);
            lock(&self.core.cache).recycle(spent);
        }
    }
}

/// Holds while a reader has samples in the mask's states (DDS `ReadCondition`).
pub struct ReadCondition {
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) mask: StateMask,
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

/// Which instances an access picks its samples from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pick {
    /// Every instance.
    Any,
    /// This one.
    Instance(InstanceHandle),
    /// The one with the smallest handle above this (from the first, if `None`) that
    /// holds an accepted sample.
    After(Option<InstanceHandle>),
}

impl From<Option<InstanceHandle>> for Pick {
    fn from(instance: Option<InstanceHandle>) -> Pick {
        instance.map_or(Pick::Any, Pick::Instance)
    }
}
