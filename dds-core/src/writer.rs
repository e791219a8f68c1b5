//! Typed writers (DDS `DataWriter`).

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use spindle_qos::DataWriterQos;
use spindle_topics::{Endianness, TopicType};

use crate::clock::Clock;
use crate::common::{instance_of, lock, on_delivery_thread};
use crate::delivery::{count, matched_entry, readers_of};
use crate::discovery::{Endpoint, EndpointKey};
use crate::error::{Error, Result};
use crate::inner::{ParticipantInner, TopicInner};
use crate::registered::{NoKey, Registered};
use crate::sample::{Coherent, InstanceHandle, SampleHeader, SampleKind, SAMPLE_HEADER_BYTES};
use crate::status::{
    DeadlineMissedStatus, IncompatibleQosStatus, LivelinessLostStatus, MatchedStatus,
};
use crate::writer_core::{blocking_us, lifespan_ns, WritePath, WriterCore};

/// How long a writer lets pass between looks for the next view's sender while a view
/// change runs.
const VIEW_CHANGE_PAUSE: Duration = Duration::from_micros(50);
/// How long `wait_for_acknowledgments` waits before it looks whether to nudge.
const NUDGE_AFTER: Duration = Duration::from_millis(20);
/// How long `wait_for_readers` lets pass between looks.
const READERS_POLL: Duration = Duration::from_millis(1);

/// Writes samples of `T` to a topic (DDS `DataWriter`). Cheap to clone.
pub struct DataWriter<T: TopicType> {
    core: Arc<WriterCore>,
    topic: Arc<TopicInner>,
    _t: PhantomData<fn(T)>,
}

impl DataWriter<spindle_topics::CdrSample> {
    /// A handle on `core` (of participant `p`) for its deletion by its publisher's or
    /// participant's `delete_contained_entities`, which hold cores, not typed writers:
    /// the unregisters and disposes a deletion sends carry the instance's key hash only,
    /// whatever the writer's type.
    pub(crate) fn erased(core: Arc<WriterCore>, p: &Arc<ParticipantInner>) -> Self {
        let topic = Arc::new(TopicInner {
            participant: Arc::clone(p),
            ident: Arc::clone(&core.topic),
            qos: Default::default(),
            type_name: core.topic.type_name.clone(),
            dyn_type: None,
        });
        DataWriter::new(core, topic)
    }
}

impl<T: TopicType> Clone for DataWriter<T> {
    fn clone(&self) -> Self {
        DataWriter {
            core: Arc::clone(&self.core),
            topic: Arc::clone(&self.topic),
            _t: PhantomData,
        }
    }
}

impl<T: TopicType> std::fmt::Debug for DataWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataWriter")
            .field("id", &self.core.id)
            .field("topic", &self.core.topic.name)
            .finish()
    }
}

impl<T: TopicType> DataWriter<T> {
    pub(crate) fn new(core: Arc<WriterCore>, topic: Arc<TopicInner>) -> Self {
        DataWriter {
            core,
            topic,
            _t: PhantomData,
        }
    }

    /// A stamp read from the participant's clock when the sample is numbered.
    fn now(&self) -> Stamp<'_> {
        Stamp::Now(self.topic.participant.clock())
    }

    pub(crate) fn core(&self) -> &Arc<WriterCore> {
        &self.core
    }

    pub(crate) fn refresh_matched(&self) {
        let p = &self.topic.participant;
        let st = lock(&p.shared.state);
        let vid = st.view.as_ref().map_or(0, |v| v.vid);
        let readers = readers_of(&st, &self.core.endpoint());
        drop(st);
        self.core.on_view(vid, count(&readers));
    }

    /// The readers this writer matches now (DDS `get_matched_subscriptions`), each named
    /// by its participant's node and its entity id there, sorted: the readers
    /// [`DataWriter::publication_matched_status`] counts, from the same built-in table
    /// (of the domain's readers of its topic, those of its type in a common partition
    /// whose QoS it satisfies).
    pub fn get_matched_subscriptions(&self) -> Result<Vec<EndpointKey>> {
        self.check()?;
        let st = lock(&self.topic.participant.shared.state);
        Ok(readers_of(&st, &self.core.endpoint()))
    }

    /// What the built-in topic announced of `reader`, one of
    /// [`DataWriter::get_matched_subscriptions`] (DDS `get_matched_subscription_data`):
    /// its topic, type, level, partition and requested QoS. `BadParameter` if this writer
    /// does not match it (any more).
    pub fn get_matched_subscription_data(&self, reader: EndpointKey) -> Result<Endpoint> {
        self.check()?;
        let st = lock(&self.topic.participant.shared.state);
        let matched = readers_of(&st, &self.core.endpoint());
        matched_entry(&st, &matched, reader, &format!("writer {}", self.core.id))
    }

    /// This writer's id within its participant.
    pub fn id(&self) -> u32 {
        self.core.id
    }

    /// The topic's name.
    pub fn topic_name(&self) -> &str {
        &self.core.topic.name
    }

    /// The writer's QoS.
    pub fn qos(&self) -> DataWriterQos {
        lock(&self.core.qos).clone()
    }

    /// Changes the QoS (DDS `set_qos`): DEADLINE, LATENCY_BUDGET, TRANSPORT_PRIORITY,
    /// LIFESPAN, USER_DATA, OWNERSHIP_STRENGTH and WRITER_DATA_LIFECYCLE may change
    /// after creation; another policy that differs is `ImmutablePolicy`, an
    /// inconsistent QoS `InconsistentPolicy`. LIFESPAN and OWNERSHIP_STRENGTH apply from
    /// the next sample; a new DEADLINE restarts the
    /// period of every instance it watches now (from infinite, each is watched from its
    /// next write). A new DEADLINE or LATENCY_BUDGET is announced again, and this returns
    /// once the announcement is delivered here: readers that request more than it now
    /// offers are no longer matched (each side counts the other in its INCOMPATIBLE_QOS
    /// status), and those it now satisfies are; such a change is `IllegalOperation` from
    /// a listener (the delivery thread delivers the announcement it waits for).
    pub fn set_qos(&self, qos: DataWriterQos) -> Result<()> {
        self.check()?;
        qos.check()?;
        {
            let q = lock(&self.core.qos);
            q.changeable_to(&qos)?;
            crate::common::announcing_allowed(
                (q.deadline, q.latency_budget) != (qos.deadline, qos.latency_budget),
            )?;
        }
        let core = &self.core;
        let p = &self.topic.participant;
        p.reannounce(
            &core.announcing,
            &core.deleted,
            || {
                let mut q = lock(&core.qos);
                let announced =
                    (q.deadline, q.latency_budget) != (qos.deadline, qos.latency_budget);
                if q.deadline != qos.deadline {
                    core.set_deadline(qos.deadline.period, p.now_us());
                    if let Some(period) = core.deadline_us() {
                        p.shared.want_timer(period);
                    }
                }
                core.blocking_us.store(blocking_us(&qos), Ordering::Relaxed);
                core.lifespan_ns.store(lifespan_ns(&qos), Ordering::Relaxed);
                core.strength
                    .store(qos.ownership_strength.value, Ordering::Relaxed);
                *q = qos;
                drop(q);
                announced.then(|| core.endpoint())
            },
            || {},
        )
    }

    /// Writes `data`, stamped now (DDS `write`): the clock is read where the sample takes
    /// its place in the writer's order, so one writer's stamps never go back along its
    /// samples, also when several threads share it (a reader ordering BY_SOURCE_TIMESTAMP
    /// drops none of them as older); otherwise as [`DataWriter::write_w_timestamp`].
    pub fn write(&self, data: &T) -> Result<()> {
        self.write_stamped(data, self.now())
    }

    /// Writes `data` with the source timestamp `timestamp_ns` (ns since the Unix epoch).
    /// Blocks while the window is full or a view change runs, up to RELIABILITY's
    /// `max_blocking_time`, then returns `Timeout`.
    /// A sample whose encoding exceeds the slot goes by RDMC in the same order when the
    /// participant's `sample_bytes_max` allows it (encoded at its exact size in place in
    /// the writer's registered RDMC send buffer); above that, or above the slot without
    /// it, `OutOfResources` naming the limit.
    pub fn write_w_timestamp(&self, data: &T, timestamp_ns: i64) -> Result<()> {
        self.write_stamped(data, Stamp::At(timestamp_ns))
    }

    fn write_stamped(&self, data: &T, stamp: Stamp<'_>) -> Result<()> {
        let key = instance_of(data)?;
        self.send(SampleKind::Data, key, Some(data), stamp, |buf| {
            data.encode_into(Endianness::Little, buf)
        })
    }

    /// Disposes the instance of `data`'s key (DDS `dispose`). The dispose carries `data`
    /// when its encoding is at most [`crate::cache::KEY_SAMPLE_BYTES_MAX`], so that a
    /// reader that never had a data sample of the instance learns which one ended
    /// (`get_key_value`).
    pub fn dispose(&self, data: &T) -> Result<()> {
        self.dispose_stamped(data, self.now())
    }

    /// [`DataWriter::dispose`] with the source timestamp `timestamp_ns` (ns since the
    /// Unix epoch; DDS `dispose_w_timestamp`).
    pub fn dispose_w_timestamp(&self, data: &T, timestamp_ns: i64) -> Result<()> {
        self.dispose_stamped(data, Stamp::At(timestamp_ns))
    }

    fn dispose_stamped(&self, data: &T, stamp: Stamp<'_>) -> Result<()> {
        let key = instance_of(data)?;
        self.send(SampleKind::Dispose, key, Some(data), stamp, |buf| {
            Ok(key_body(data, buf))
        })
    }

    /// Unregisters the instance of `data`'s key (DDS `unregister_instance`); with
    /// WRITER_DATA_LIFECYCLE `autodispose_unregistered_instances` it is disposed first.
    /// Both carry `data` when its encoding is short (at most
    /// [`crate::cache::KEY_SAMPLE_BYTES_MAX`]), as [`DataWriter::dispose`]'s does.
    pub fn unregister_instance(&self, data: &T) -> Result<()> {
        self.unregister_stamped(data, self.now())
    }

    /// [`DataWriter::unregister_instance`] with the source timestamp `timestamp_ns` (ns
    /// since the Unix epoch; DDS `unregister_instance_w_timestamp`), the dispose before
    /// it too.
    pub fn unregister_instance_w_timestamp(&self, data: &T, timestamp_ns: i64) -> Result<()> {
        self.unregister_stamped(data, Stamp::At(timestamp_ns))
    }

    fn unregister_stamped(&self, data: &T, stamp: Stamp<'_>) -> Result<()> {
        self.unregister_key(instance_of(data)?, Some(data), stamp)
    }

    /// Unregisters instance `key`, disposing it first under WRITER_DATA_LIFECYCLE
    /// `autodispose_unregistered_instances` (as Cyclone does, also when its last sample
    /// was a dispose). Both carry `value`, if given ([`key_body`]).
    fn unregister_key(
        &self,
        key: InstanceHandle,
        value: Option<&T>,
        stamp: Stamp<'_>,
    ) -> Result<()> {
        let body = |buf: &mut [u8]| Ok(value.map_or(0, |v| key_body(v, buf)));
        if self
            .qos()
            .writer_data_lifecycle
            .autodispose_unregistered_instances
        {
            self.send(SampleKind::Dispose, key, None, stamp, body)?;
        }
        self.send(SampleKind::Unregister, key, None, stamp, body)
    }

    /// Asserts this writer's LIVELINESS without writing (DDS `assert_liveliness`): under
    /// MANUAL_BY_TOPIC or MANUAL_BY_PARTICIPANT with a finite lease, a write or this
    /// renews the lease at every matched reader (one small message through the topic's
    /// subgroup, in its order); a reader that hears neither for a lease counts the writer
    /// not alive (LIVELINESS_CHANGED) and its instances NOT_ALIVE_NO_WRITERS, and the
    /// writer counts LIVELINESS_LOST. Harmless under AUTOMATIC.
    pub fn assert_liveliness(&self) -> Result<()> {
        send_control(&self.core, &self.topic.participant, SampleKind::Liveliness)
    }

    /// `LIVELINESS_LOST_STATUS`: leases this writer let pass without writing or asserting
    /// (MANUAL kinds with a finite lease); reading it resets the change count.
    pub fn liveliness_lost_status(&self) -> LivelinessLostStatus {
        let mut s = lock(&self.core.liveliness_lost);
        let out = *s;
        s.total_count_change = 0;
        out
    }

    /// Registers the instance of `data`'s key and returns its handle (DDS
    /// `register_instance`; the first `write` or `dispose` of an instance registers it
    /// too). Nothing is sent: readers learn of the instance from its first sample.
    /// `OutOfResources` past RESOURCE_LIMITS `max_instances`. The writer keeps `data`'s
    /// encoding, when at most [`crate::cache::KEY_SAMPLE_BYTES_MAX`] long, for
    /// [`DataWriter::get_key_value`] ([`crate::registered`]).
    pub fn register_instance(&self, data: &T) -> Result<InstanceHandle> {
        self.check()?;
        let key = instance_of(data)?;
        lock(&self.core.path).registered.register(
            key,
            &self.core.topic.name,
            key_of(Some(data)),
        )?;
        Ok(key)
    }

    /// The handle of `data`'s instance if this writer registered it and did not
    /// unregister it since (DDS `lookup_instance`; `None` is DDS's `HANDLE_NIL`).
    pub fn lookup_instance(&self, data: &T) -> Result<Option<InstanceHandle>> {
        self.check()?;
        let key = instance_of(data)?;
        Ok(lock(&self.core.path)
            .registered
            .contains(key)
            .then_some(key))
    }

    /// The key of registered instance `handle` (DDS `get_key_value`): a whole sample is
    /// returned, its key members the instance's, the others as the sample that
    /// registered it had them. `BadParameter` if this writer has not registered the
    /// instance (or unregistered it); `PreconditionNotMet` if the sample that registered
    /// it was larger than [`crate::cache::KEY_SAMPLE_BYTES_MAX`], or the writer's keys
    /// had reached [`crate::registered::REGISTERED_KEY_BYTES_MAX`] (not kept).
    pub fn get_key_value(&self, handle: InstanceHandle) -> Result<T> {
        self.check()?;
        let path = lock(&self.core.path);
        match path.registered.key_sample(handle) {
            Ok(bytes) => Ok(T::decode_with_key_hash(bytes, &handle.0)?),
            Err(NoKey::NotRegistered) => Err(self.not_registered(handle)),
            Err(NoKey::NotKept) => Err(Error::PreconditionNotMet(format!(
                "writer {} kept no key of instance {}: the sample that registered it was \
                 larger than {} bytes, or its keys had reached {} bytes",
                self.core.id,
                handle.0,
                crate::cache::KEY_SAMPLE_BYTES_MAX,
                crate::registered::REGISTERED_KEY_BYTES_MAX
            ))),
        }
    }

    /// Disposes registered instance `handle` (DDS `dispose` given the handle, as
    /// Cyclone's `dds_dispose_ih`), stamped now. `BadParameter` if this writer has not
    /// registered it.
    pub fn dispose_by_handle(&self, handle: InstanceHandle) -> Result<()> {
        self.registered(handle)?;
        self.send(SampleKind::Dispose, handle, None, self.now(), |_| Ok(0))
    }

    /// Unregisters registered instance `handle` (DDS `unregister_instance` given the
    /// handle), stamped now; disposed first under WRITER_DATA_LIFECYCLE
    /// `autodispose_unregistered_instances`. `BadParameter` if this writer has not
    /// registered it.
    pub fn unregister_by_handle(&self, handle: InstanceHandle) -> Result<()> {
        self.registered(handle)?;
        self.unregister_key(handle, None, self.now())
    }

    /// `BadParameter` unless this writer registered instance `handle`.
    fn registered(&self, handle: InstanceHandle) -> Result<()> {
        self.check()?;
        if lock(&self.core.path).registered.contains(handle) {
            Ok(())
        } else {
            Err(self.not_registered(handle))
        }
    }

    fn not_registered(&self, handle: InstanceHandle) -> Error {
        Error::BadParameter(format!(
            "instance {} is not registered with writer {} of topic {:?}",
            handle.0, self.core.id, self.core.topic.name
        ))
    }

    /// `PUBLICATION_MATCHED_STATUS`: the participants that read the topic in the
    /// installed view; reading it resets the change counts.
    pub fn publication_matched_status(&self) -> MatchedStatus {
        let mut s = lock(&self.core.matched);
        let out = *s;
        s.total_count_change = 0;
        s.current_count_change = 0;
        out
    }

    /// `OFFERED_INCOMPATIBLE_QOS_STATUS`: readers of its topic (in a common partition)
    /// that request more than it offers, each counted once, with the last policy that
    /// failed; they are not matched. Reading it resets the change count.
    pub fn offered_incompatible_qos_status(&self) -> IncompatibleQosStatus {
        let mut s = lock(&self.core.incompatible);
        let out = s.0.clone();
        s.0.total_count_change = 0;
        out
    }

    /// `OFFERED_DEADLINE_MISSED_STATUS`: instances this writer left unwritten for a
    /// DEADLINE period (checked by the participant's deadline timer).
    pub fn offered_deadline_missed_status(&self) -> DeadlineMissedStatus {
        let mut s = lock(&self.core.deadline_missed);
        let out = *s;
        s.total_count_change = 0;
        out
    }

    /// Calls `on_publication_matched` on the delivery thread when the matched status
    /// changes (DDS `DataWriterListener`). Replaces an earlier listener.
    pub fn set_listener(
        &self,
        on_publication_matched: impl Fn(MatchedStatus) + Send + Sync + 'static,
    ) {
        *lock(&self.core.listener) = Some(Arc::new(on_publication_matched));
    }

    /// Waits until at least `count` participants read the topic (a convenience for
    /// applications that must not write before their readers exist).
    /// `IllegalOperation` from a listener (the delivery thread, which installs views).
    pub fn wait_for_readers(&self, count: u32, timeout: Duration) -> Result<()> {
        if on_delivery_thread() {
            return Err(Error::IllegalOperation(
                "wait_for_readers from a listener would block the views it waits for".into(),
            ));
        }
        let p = &self.topic.participant;
        if p.poll_until(timeout, READERS_POLL, || {
            lock(&self.core.matched).current_count >= count
        }) {
            Ok(())
        } else {
            let other_types = lock(&p.shared.inconsistent)
                .get(&self.core.topic.topic_id)
                .map_or(0, |t| t.status.total_count);
            let why = if other_types > 0 {
                format!(
                    "; {other_types} reader(s) or writer(s) on topic {:?} have another type \
                     than its {} (or another definition of it) and are not matched \
                     (INCONSISTENT_TOPIC)",
                    self.core.topic.name, self.core.topic.type_name
                )
            } else {
                String::new()
            };
            Err(Error::Timeout(format!(
                "fewer than {count} readers matched{why}"
            )))
        }
    }

    /// Waits until every sample this writer wrote so far is acknowledged (DDS
    /// `wait_for_acknowledgments`): on a PERSISTENT (LoggedStore) topic, durable in the
    /// synced log of every member of the topic's subgroup ([`crate::logged`]); on the
    /// other levels, delivered here, which for the ordered levels means stable: every
    /// member of the subgroup received it and delivers it in the same order. `Timeout`
    /// once `timeout` passes (on the participant's clock); `IllegalOperation` from a
    /// listener (the delivery thread, which does the acknowledging).
    pub fn wait_for_acknowledgments(&self, timeout: Duration) -> Result<()> {
        if on_delivery_thread() {
            return Err(Error::IllegalOperation(
                "wait_for_acknowledgments from a listener would block the deliveries it \
                 waits for"
                    .into(),
            ));
        }
        self.check()?;
        let target = self.core.seq.load(Ordering::Acquire);
        if target == 0 {
            return Ok(());
        }
        let (id, sg, logged) = (
            self.core.id,
            self.core.subgroup,
            self.core.level == spindle_qos::DeliveryLevel::LoggedStore,
        );
        let p = &self.topic.participant;
        let what = |st: &crate::shared::State| {
            // Where the wait stands: the writer's last sample delivered here (sequence
            // number, view, place in the view's order) and, on a PERSISTENT topic, how far
            // the subgroup's durable frontiers reached.
            let delivered = st.own_delivered.get(&id).map_or_else(
                || "none of its samples delivered here".to_string(),
                |(seq, vid, index)| {
                    format!("its sample {seq} delivered here in view {vid} at order index {index}")
                },
            );
            let durable = if logged {
                st.durable.get(&sg).map_or_else(
                    || "; no durable frontier known".to_string(),
                    |d| format!("; durable frontiers {d}"),
                )
            } else {
                String::new()
            };
            format!(
                "writer {id} on {:?}: sample {target} not acknowledged ({}) within {} ms: \
                 {delivered}{durable}",
                self.core.topic.name,
                if logged {
                    "durable at every member"
                } else {
                    "delivered"
                },
                timeout.as_millis()
            )
        };
        let acknowledged = |st: &crate::shared::State| {
            st.own_delivered.get(&id).is_some_and(|(seq, vid, index)| {
                *seq >= target
                    && (!logged || st.durable.get(&sg).is_some_and(|d| d.covers(*vid, *index)))
            })
        };
        p.shared.ack_waiters.fetch_add(1, Ordering::AcqRel);
        let done = self.wait_acknowledged(target, logged, timeout, |slice| {
            p.wait_until(slice, what, acknowledged)
        });
        p.shared.ack_waiters.fetch_sub(1, Ordering::AcqRel);
        done
    }

    /// Runs `wait` in slices of at most [`NUDGE_AFTER`] until it succeeds or `timeout`
    /// passes. Between slices, on a PERSISTENT topic whose last sample (`target`) was
    /// delivered in an earlier view than the current one, sends one nudge per view
    /// ([`crate::logged::NUDGE_TOPIC_ID`]): with no traffic in the current view its
    /// frontier would never move to vouch for that sample.
    fn wait_acknowledged(
        &self,
        target: u64,
        logged: bool,
        timeout: Duration,
        wait: impl Fn(Duration) -> Result<()>,
    ) -> Result<()> {
        let p = &self.topic.participant;
        let deadline_us = p
            .now_us()
            .saturating_add(crate::common::saturating_us(timeout));
        let mut nudged_vid = None;
        loop {
            let left_us = deadline_us.saturating_sub(p.now_us());
            let slice = Duration::from_micros(left_us).min(NUDGE_AFTER);
            match wait(slice) {
                Err(Error::Timeout(why)) if left_us <= crate::common::saturating_us(slice) => {
                    return Err(Error::Timeout(why))
                }
                Err(Error::Timeout(_)) => {}
                other => return other,
            }
            if !logged {
                continue;
            }
            let (delivered_vid, current_vid) = {
                let st = lock(&p.shared.state);
                (
                    st.own_delivered
                        .get(&self.core.id)
                        .filter(|(seq, _, _)| *seq >= target)
                        .map(|(_, vid, _)| *vid),
                    st.view.as_ref().map(|v| v.vid),
                )
            };
            if let (Some(d), Some(c)) = (delivered_vid, current_vid) {
                if d < c && nudged_vid != Some(c) {
                    let sent = p
                        .sender(self.core.subgroup)
                        .and_then(|s| s.try_send(&crate::logged::nudge()));
                    if sent.is_ok() {
                        nudged_vid = Some(c);
                    }
                }
            }
        }
    }

    /// Borrows the next slot of the writer's ring with a default `T` to fill in place
    /// (DDS `loan_sample`); [`LoanedSample::write`] sends it.
    pub fn loan_sample(&self) -> Result<LoanedSample<T>>
    where
        T: Default,
    {
        self.check()?;
        let ((loan, room), path) = loan(&self.core, &self.topic.participant)?;
        drop(path);
        Ok(LoanedSample {
            writer: self.clone(),
            loan: Some((loan, room)),
            value: T::default(),
        })
    }

    fn check(&self) -> Result<()> {
        if self.core.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted(format!("writer {}", self.core.id)));
        }
        self.topic.participant.check_alive()
    }

    /// Sends one sample in the next slot of the writer's ring, lent for the call
    /// ([`spindle_group::Sender::try_send_with`]: no loan handle, so no reference count
    /// per sample), filled by [`fill_slot`] with the write path held; or by RDMC when its
    /// encoding does not fit ([`DataWriter::sent`]).
    fn send(
        &self,
        kind: SampleKind,
        key: InstanceHandle,
        value: Option<&T>,
        stamp: Stamp<'_>,
        mut body: impl FnMut(&mut [u8]) -> std::result::Result<usize, spindle_topics::Error>,
    ) -> Result<()> {
        self.check()?;
        let core = &*self.core;
        let p = &self.topic.participant;
        let (filled, path) = with_room_held(core, p, 0, |s, staging, registered| {
            if let Err(e) = registered.admit(key, kind, &core.topic.name, key_of(value)) {
                return Ok(Err(NotSent::Failed(e)));
            }
            let max = s.payload_bytes_max();
            s.try_send_with(|slot| {
                fill_slot(
                    core,
                    staging,
                    max,
                    kind,
                    key,
                    stamp,
                    &mut body,
                    |at, bytes| slot.write_at(at, bytes),
                )
            })
        })?;
        self.sent(filled.map(drop), path, kind, key, stamp, body)
    }

    /// What follows a sample's fill, with the write path `path` still held: the DEADLINE
    /// and LIVELINESS bookkeeping once it went; for a sample that did not fit its slot
    /// (the slot became a null and kept its turn), the RDMC path with the write path let
    /// go while it waits for a buffer.
    fn sent<'w>(
        &'w self,
        filled: std::result::Result<(), NotSent>,
        mut path: MutexGuard<'w, WritePath>,
        kind: SampleKind,
        key: InstanceHandle,
        stamp: Stamp<'_>,
        body: impl FnMut(&mut [u8]) -> std::result::Result<usize, spindle_topics::Error>,
    ) -> Result<()> {
        match filled {
            Ok(()) => {}
            Err(NotSent::Large { room, needed }) => {
                drop(path);
                self.send_large(room, needed, kind, key, stamp, body)?;
                path = lock(&self.core.path);
            }
            Err(NotSent::Failed(e)) => return Err(e),
        }
        path.registered.wrote(key, kind);
        drop(path);
        self.written(kind, key);
        Ok(())
    }

    /// Unregisters every instance this writer registered (wrote and did not unregister),
    /// disposing each first under WRITER_DATA_LIFECYCLE
    /// `autodispose_unregistered_instances`: what deleting a writer does, as DDS says, so
    /// readers see its instances end (NOT_ALIVE_DISPOSED, or NOT_ALIVE_NO_WRITERS when no
    /// other writer has them) instead of alive for as long as its participant lives. The
    /// first send that fails (the participant stopped) ends it, logged.
    pub(crate) fn unregister_all(&self) {
        let keys = lock(&self.core.path).registered.take_written();
        for key in keys {
            if let Err(e) = self.unregister_key(key, None, self.now()) {
                tracing::warn!(
                    topic = %self.core.topic.name,
                    writer = self.core.id,
                    error = %e,
                    "deleting a writer: its instances could not all be unregistered"
                );
                return;
            }
        }
    }

    /// A write's DEADLINE and manual LIVELINESS bookkeeping (nothing unless set).
    fn written(&self, kind: SampleKind, key: InstanceHandle) {
        let p = &self.topic.participant;
        if self.core.deadline_us().is_some() && kind != SampleKind::Liveliness {
            self.core.wrote(key, kind != SampleKind::Data, p.now_us());
        }
        if self.core.manual_lease_us().is_some() {
            self.core.asserted(p.now_us());
        }
    }
}

impl<T: TopicType> DataWriter<T> {
    /// The large-sample path of [`DataWriter::send`] and [`LoanedSample::write`]: encodes
    /// the header and the `needed` bytes of body **in place** in the next registered RDMC
    /// send buffer (`Sender::try_send_filled`: no staging buffer, no copy) and sends it
    /// by RDMC, waiting for a free send buffer up to RELIABILITY's `max_blocking_time`.
    /// `room` is the slot's payload, for the error.
    fn send_large(
        &self,
        room: usize,
        needed: usize,
        kind: SampleKind,
        key: InstanceHandle,
        stamp: Stamp<'_>,
        mut body: impl FnMut(&mut [u8]) -> std::result::Result<usize, spindle_topics::Error>,
    ) -> Result<()> {
        let p = &self.topic.participant;
        let total = SAMPLE_HEADER_BYTES.saturating_add(needed);
        let max = with_room(&self.core, p, 0, |s| Ok(s.message_bytes_max()))?;
        if total > max {
            return Err(Error::OutOfResources(format!(
                "a sample of {needed} bytes (with its {SAMPLE_HEADER_BYTES}-byte \
                 header) exceeds the largest message of topic {:?}'s subgroup, \
                 {max} bytes: the slot ({room} bytes of payload) and \
                 sample_bytes_max = {} (at most {}); raise them or bound the type",
                self.core.topic.name,
                p.config.sample_bytes_max,
                crate::config::SAMPLE_BYTES_MAX_LIMIT
            )));
        }
        let coherent = coherent_mark(&self.core, kind)?;
        // The fill runs with the write path held, where the message takes its place in
        // the ring: the sequence number is taken there, once the body is encoded (a
        // failed encode numbers nothing).
        with_room(&self.core, p, total, |s| {
            s.try_send_filled(total, |buf| {
                let n = body(&mut buf[SAMPLE_HEADER_BYTES..])?;
                let mut hb = [0u8; SAMPLE_HEADER_BYTES];
                numbered(&self.core, kind, key, stamp, coherent).encode(&mut hb);
                buf[..SAMPLE_HEADER_BYTES].copy_from_slice(&hb);
                let len = SAMPLE_HEADER_BYTES + n;
                // Counted where it is numbered, with the write path held.
                self.core.written.wrote_held(len, true);
                Ok::<_, spindle_topics::Error>(len)
            })
        })?
        .map_err(Error::Topic)?;
        Ok(())
    }
}

/// A slot of the writer's ring and a value to build in place (DDS loaned sample).
/// Dropping it without [`LoanedSample::write`] sends nothing (a null keeps the order).
/// The slot fixes the sample's place in the order when it is loaned, and
/// [`SampleInfo::writer_seq`](crate::SampleInfo::writer_seq) is taken when it is written:
/// loans of one writer written in the order they were taken (one at a time, as
/// `write` does) keep the two in step; written in another order, readers get them in
/// loan order with the sequence numbers of the writes.
pub struct LoanedSample<T: TopicType> {
    writer: DataWriter<T>,
    loan: Option<(spindle_group::Loan, usize)>,
    value: T,
}

impl<T: TopicType> std::fmt::Debug for LoanedSample<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanedSample")
            .field("writer", &self.writer)
            .finish()
    }
}

impl<T: TopicType> std::ops::Deref for LoanedSample<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: TopicType> std::ops::DerefMut for LoanedSample<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: TopicType> LoanedSample<T> {
    /// Sends the value in the loaned slot.
    pub fn write(mut self) -> Result<()> {
        let Some((mut loan, room)) = self.loan.take() else {
            return Err(Error::PreconditionNotMet(
                "the loan was already written".into(),
            ));
        };
        let key = instance_of(&self.value)?;
        let value = &self.value;
        let mut body = |buf: &mut [u8]| value.encode_into(Endianness::Little, buf);
        let w = &self.writer;
        let stamp = w.now();
        let mut path = lock(&w.core.path);
        let admitted = path.registered.admit(
            key,
            SampleKind::Data,
            &w.core.topic.name,
            key_of(Some(value)),
        );
        if let Err(e) = admitted {
            // The slot becomes a null and keeps its turn.
            drop(loan);
            return Err(e);
        }
        let max = room + SAMPLE_HEADER_BYTES;
        let filled = fill_slot(
            &w.core,
            &mut path.staging,
            max,
            SampleKind::Data,
            key,
            stamp,
            &mut body,
            |at, bytes| loan.write_at(at, bytes),
        );
        match &filled {
            Ok(()) => drop(loan.commit()),
            // A value grown past the slot goes by RDMC, as for `write`; the slot a null.
            Err(_) => drop(loan),
        }
        w.sent(filled, path, SampleKind::Data, key, stamp, body)
    }
}

/// When a write that starts now must give up waiting (RELIABILITY
/// `max_blocking_time`), on the participant's clock.
fn blocking_deadline_us(core: &WriterCore, p: &ParticipantInner) -> u64 {
    p.now_us()
        .saturating_add(core.blocking_us.load(Ordering::Relaxed))
}

/// A slot of the ring and the payload room after the header, with the write path held
/// (the sender handle is cached in it; a view change stops its ring, `Wedged`, and the
/// next view's is fetched). The RELIABILITY deadline starts at the first refusal (the
/// clock is read only when the writer has to wait).
fn loan<'c>(
    core: &'c WriterCore,
    p: &ParticipantInner,
) -> Result<((spindle_group::Loan, usize), MutexGuard<'c, WritePath>)> {
    let ((l, max), path) = with_room_held(core, p, 0, |s, _, _| {
        Ok((s.try_loan()?, s.payload_bytes_max()))
    })?;
    let room = max.checked_sub(SAMPLE_HEADER_BYTES).ok_or_else(|| {
        Error::OutOfResources(format!("slots of {max} bytes hold no sample header"))
    })?;
    Ok(((l, room), path))
}

/// [`with_room_held`] without keeping the write path.
fn with_room<R>(
    core: &WriterCore,
    p: &ParticipantInner,
    len: usize,
    mut attempt: impl FnMut(&spindle_group::Sender) -> spindle_group::Result<R>,
) -> Result<R> {
    with_room_held(core, p, len, |s, _, _| attempt(s)).map(|(r, _)| r)
}

/// What one try of [`with_room_held`] found.
enum Tried<R> {
    Done(R),
    /// Wait and try again; the sender whose window was full, to park on.
    Wait(spindle_group::Error, Option<spindle_group::Sender>),
    Fail(spindle_group::Error),
    /// No sender cached: fetch the view's.
    Fetch,
}

/// Runs `attempt` on the writer's sender until it finds room for a message of `len`
/// bytes, and returns what it returned with the write path still held (one lock for the
/// loan, the encode and the commit); waits, with the path let go, while the window is
/// full or a view change runs, up to RELIABILITY's `max_blocking_time`. On a full window
/// it yields [`spindle_group::ROOM_SPIN_TRIES`] times, then parks until the window moves
/// ([`spindle_group::Sender::wait_for_room`]): a writer blocked behind a slow reader takes
/// no core from the threads that free it.
fn with_room_held<'c, R>(
    core: &'c WriterCore,
    p: &ParticipantInner,
    len: usize,
    mut attempt: impl FnMut(
        &spindle_group::Sender,
        &mut Vec<u8>,
        &mut Registered,
    ) -> spindle_group::Result<R>,
) -> Result<(R, MutexGuard<'c, WritePath>)> {
    let mut tries = 0u32;
    let mut deadline_us = None;
    loop {
        let mut path = lock(&core.path);
        let WritePath {
            sender,
            staging,
            registered,
        } = &mut *path;
        let tried = match sender.as_ref() {
            None => Tried::Fetch,
            Some(s) => match attempt(s, staging, registered) {
                Ok(r) => Tried::Done(r),
                Err(e @ spindle_group::Error::WindowFull { .. }) => Tried::Wait(e, Some(s.clone())),
                Err(e @ spindle_group::Error::Wedged { .. }) => Tried::Wait(e, None),
                Err(e) => Tried::Fail(e),
            },
        };
        let (err, full) = match tried {
            Tried::Done(r) => return Ok((r, path)),
            Tried::Fail(e) => return Err(e.into()),
            Tried::Wait(e, full) => {
                if full.is_none() {
                    path.sender = None;
                }
                drop(path);
                (e, full)
            }
            Tried::Fetch => {
                drop(path);
                match p.sender(core.subgroup) {
                    Ok(s) => {
                        lock(&core.path).sender = Some(s);
                        continue;
                    }
                    Err(e @ spindle_group::Error::Wedged { .. }) => (e, None),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        p.check_alive()?;
        let deadline_us = *deadline_us.get_or_insert_with(|| blocking_deadline_us(core, p));
        let now_us = p.now_us();
        if on_delivery_thread() || now_us >= deadline_us {
            return Err(Error::Timeout(format!(
                "writing {}: {err} (RELIABILITY max_blocking_time)",
                core.topic.name
            )));
        }
        tries = tries.saturating_add(1);
        match full {
            Some(s) if tries > spindle_group::ROOM_SPIN_TRIES => {
                let left = Duration::from_micros(deadline_us - now_us);
                p.driver
                    .wait_room(&s, len, left.min(spindle_group::ROOM_WAIT_SLICE));
            }
            Some(_) => p.driver.idle(Duration::ZERO),
            // A view change: the next view's sender is not there yet.
            None => p.driver.idle(VIEW_CHANGE_PAUSE),
        }
    }
}

/// The body of a dispose or unregister of `value`'s instance: `value`'s encoding, when
/// its type has a key and the encoding has members and fits both the slot's `buf` and
/// [`crate::cache::KEY_SAMPLE_BYTES_MAX`], so that a reader that never had a data
/// sample of the instance learns its key from it (`get_key_value`); else nothing (0).
fn key_body<T: TopicType>(value: &T, buf: &mut [u8]) -> usize {
    if !T::HAS_KEY {
        return 0;
    }
    let room = buf.len().min(crate::cache::KEY_SAMPLE_BYTES_MAX);
    match value.encode_into(Endianness::Little, &mut buf[..room]) {
        Ok(n) if n > spindle_topics::ENCAPSULATION_HEADER_LEN => n,
        // Too long, or no value to speak of: the notice goes without.
        _ => 0,
    }
}

/// How [`Registered`] encodes the sample an instance is registered with, to keep its key:
/// `value`'s encoding when it fits the buffer given (none without a value).
fn key_of<T: TopicType>(value: Option<&T>) -> impl FnOnce(&mut [u8]) -> Option<usize> + '_ {
    move |buf| value.and_then(|v| v.encode_into(Endianness::Little, buf).ok())
}

/// Why a sample did not go into its slot.
enum NotSent {
    /// Its encoding needs `needed` bytes, more than the slot's `room`: it goes by RDMC.
    Large { room: usize, needed: usize },
    /// Encoding or writing it failed.
    Failed(Error),
}

/// Encodes `body` into the staging buffer, takes the sample's header (number and stamp:
/// the write path is held) and writes both through `write` into a slot of `max` bytes;
/// counts the write. Before the header is taken, a body that does not fit is
/// [`NotSent::Large`] (nothing numbered).
#[allow(clippy::too_many_arguments)]
fn fill_slot(
    core: &WriterCore,
    staging: &mut Vec<u8>,
    max: usize,
    kind: SampleKind,
    key: InstanceHandle,
    stamp: Stamp<'_>,
    body: &mut impl FnMut(&mut [u8]) -> std::result::Result<usize, spindle_topics::Error>,
    write: impl FnMut(usize, &[u8]) -> spindle_group::Result<()>,
) -> std::result::Result<(), NotSent> {
    let room = max.checked_sub(SAMPLE_HEADER_BYTES).ok_or_else(|| {
        NotSent::Failed(Error::OutOfResources(format!(
            "slots of {max} bytes hold no sample header"
        )))
    })?;
    if staging.len() < room {
        staging.resize(room, 0);
    }
    let n = match body(&mut staging[..room]) {
        Ok(n) => n,
        Err(spindle_topics::Error::BufferTooSmall { needed, .. }) => {
            return Err(NotSent::Large { room, needed })
        }
        Err(e) => return Err(NotSent::Failed(Error::Topic(e))),
    };
    write_sample(core, kind, key, stamp, &staging[..n], write).map_err(NotSent::Failed)?;
    // With the path held, as the cells require.
    core.written.wrote_held(SAMPLE_HEADER_BYTES + n, false);
    Ok(())
}

/// Takes the sample's header (with the write path held) and writes it, then `body`,
/// through `write` (at offsets into the slot's payload).
fn write_sample(
    core: &WriterCore,
    kind: SampleKind,
    key: InstanceHandle,
    stamp: Stamp<'_>,
    body: &[u8],
    mut write: impl FnMut(usize, &[u8]) -> spindle_group::Result<()>,
) -> Result<()> {
    let mut hb = [0u8; SAMPLE_HEADER_BYTES];
    header(core, kind, key, stamp)?.encode(&mut hb);
    write(0, &hb)?;
    write(SAMPLE_HEADER_BYTES, body)?;
    Ok(())
}

/// Writes the header and `body` into the loaned slot and sends it.
fn finish(
    core: &WriterCore,
    mut loan: spindle_group::Loan,
    kind: SampleKind,
    key: InstanceHandle,
    stamp: Stamp<'_>,
    body: &[u8],
) -> Result<()> {
    write_sample(core, kind, key, stamp, body, |at, bytes| {
        loan.write_at(at, bytes)
    })?;
    loan.commit();
    Ok(())
}

/// The header of the writer's next sample (its sequence number taken, its coherent set
/// marked). Called with the write path held, where the sample takes its place in the
/// ring: a writer's sequence numbers follow the order its samples are delivered in, also
/// when several threads share it.
fn header(
    core: &WriterCore,
    kind: SampleKind,
    key: InstanceHandle,
    stamp: Stamp<'_>,
) -> Result<SampleHeader> {
    Ok(numbered(core, kind, key, stamp, coherent_mark(core, kind)?))
}

/// Where the writer's next sample of `kind` sits in its coherent set, marked (an error
/// past [`crate::sample::COHERENT_SET_SAMPLES_MAX`]).
fn coherent_mark(core: &WriterCore, kind: SampleKind) -> Result<Coherent> {
    Ok(match (&core.coherent, kind) {
        (Some(set), SampleKind::Data | SampleKind::Dispose | SampleKind::Unregister) => {
            set.mark(core.id)?
        }
        _ => Coherent::No,
    })
}

/// A sample's source timestamp.
#[derive(Clone, Copy)]
enum Stamp<'a> {
    /// Read from this clock when the sample is numbered, with the write path held, and
    /// never before the writer's last such stamp ([`WriterCore::last_stamp_ns`]).
    Now(&'a dyn Clock),
    /// Given by the application (`write_w_timestamp`), as it is.
    At(i64),
}

/// [`header`] with its coherent mark given: takes the sequence number and reads the
/// stamp.
fn numbered(
    core: &WriterCore,
    kind: SampleKind,
    key: InstanceHandle,
    stamp: Stamp<'_>,
    coherent: Coherent,
) -> SampleHeader {
    // Called with the write path held (the invariant `WriterCore::seq` rests on): no
    // other thread takes a number between the load and the store.
    debug_assert!(
        core.path.try_lock().is_err(),
        "a sequence number is taken with the write path held"
    );
    let seq = core.seq.load(Ordering::Relaxed) + 1;
    core.seq.store(seq, Ordering::Release);
    let source_timestamp_ns = match stamp {
        Stamp::At(ns) => ns,
        Stamp::Now(clock) => {
            // Read and then stored, as `seq`, for the same reason.
            let ns = clock
                .wall_ns()
                .max(core.last_stamp_ns.load(Ordering::Relaxed));
            core.last_stamp_ns.store(ns, Ordering::Relaxed);
            ns
        }
    };
    SampleHeader {
        kind,
        writer_id: core.id,
        topic_id: core.topic.topic_id,
        writer_seq: seq,
        source_timestamp_ns,
        key_hash: key.0,
        lifespan_ns: core.lifespan_ns.load(Ordering::Relaxed),
        ownership_strength: core.strength.load(Ordering::Relaxed),
        level: core.level,
        partition_tag: core.partition_tag.load(Ordering::Relaxed),
        coherent,
    }
}

/// Sends a control message of `core` — a LIVELINESS assertion or a coherent set's end: a
/// header, no body — through its topic's subgroup; it renews the writer's own lease.
pub(crate) fn send_control(
    core: &WriterCore,
    p: &ParticipantInner,
    kind: SampleKind,
) -> Result<()> {
    send_control_with(core, p, kind, &[])
}

/// [`send_control`] with a body (a GROUP coherent set's end lists its writers);
/// `OutOfResources` if the body does not fit the writer's slot.
pub(crate) fn send_control_with(
    core: &WriterCore,
    p: &ParticipantInner,
    kind: SampleKind,
    body: &[u8],
) -> Result<()> {
    if core.deleted.load(Ordering::Acquire) {
        return Err(Error::AlreadyDeleted(format!("writer {}", core.id)));
    }
    p.check_alive()?;
    let ((l, room), _path) = loan(core, p)?;
    if body.len() > room {
        return Err(Error::OutOfResources(format!(
            "writer {}: a {kind:?} of {} bytes does not fit its {room}-byte slot",
            core.id,
            body.len()
        )));
    }
    core.asserted(p.now_us());
    finish(
        core,
        l,
        kind,
        control_key(core, p),
        Stamp::Now(p.clock()),
        body,
    )
}

/// The key hash of a writer's control messages: none is an instance (readers keep no
/// sample of them), but a store keeps them apart from every instance's history, one
/// "instance" per writer.
fn control_key(core: &WriterCore, p: &ParticipantInner) -> InstanceHandle {
    let mut k = [0xC7u8; 16];
    k[..4].copy_from_slice(&p.me().to_le_bytes());
    k[4..8].copy_from_slice(&core.id.to_le_bytes());
    InstanceHandle(spindle_topics::KeyHash(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::TopicIdentity;
    use std::sync::Mutex;

    /// A clock that reads the wall times it is given, in turn.
    #[derive(Debug)]
    struct Scripted(Mutex<Vec<i64>>);

    impl Clock for Scripted {
        fn now_us(&self) -> u64 {
            0
        }
        fn wall_ns(&self) -> i64 {
            lock(&self.0).remove(0)
        }
    }

    #[test]
    fn a_clock_stepped_back_does_not_take_a_writers_stamps_back() {
        let topic = TopicIdentity {
            name: "t".into(),
            topic_id: 7,
            subgroup: 1,
            type_id: 8,
            type_hash: None,
            type_name: "T".into(),
        };
        let core = WriterCore::new(
            1,
            Arc::new(topic),
            DataWriterQos::default(),
            &Default::default(),
            None,
        );
        let clock = Scripted(Mutex::new(vec![100, 200, 150, 300, 250]));
        let _path = lock(&core.path);
        let stamp = |s: Stamp<'_>| {
            numbered(
                &core,
                SampleKind::Data,
                InstanceHandle::default(),
                s,
                Coherent::No,
            )
            .source_timestamp_ns
        };
        let read: Vec<i64> = (0..4).map(|_| stamp(Stamp::Now(&clock))).collect();
        assert_eq!(read, [100, 200, 200, 300], "150 came after 200");
        // A given stamp is the application's, as it is, and moves nothing.
        assert_eq!(stamp(Stamp::At(50)), 50);
        assert_eq!(stamp(Stamp::Now(&clock)), 300, "250 came after 300");
    }
}
