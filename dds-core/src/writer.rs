//! Typed writers (DDS `DataWriter`).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spindle_qos::DataWriterQos;
use spindle_topics::{Endianness, TopicType};

use crate::domain::{instance_of, lock, on_delivery_thread, update_matched, TopicInner};
use crate::error::{Error, Result};
use crate::sample::{InstanceHandle, SampleHeader, SampleKind, SAMPLE_HEADER_BYTES};
use crate::status::{DeadlineMissedStatus, MatchedStatus};

type WriterListener = Arc<dyn Fn(MatchedStatus) + Send + Sync>;

pub(crate) struct WriterCore {
    pub(crate) id: u32,
    pub(crate) topic: Arc<TopicInner>,
    pub(crate) subgroup: spindle_group::SubgroupId,
    qos: Mutex<DataWriterQos>,
    seq: AtomicU64,
    write_lock: Mutex<Vec<u8>>,
    sender: Mutex<Option<spindle_group::Sender>>,
    /// RELIABILITY `max_blocking_time`, kept apart from the QoS so `write` reads it
    /// without a lock.
    blocking_us: AtomicU64,
    /// LIFESPAN in ns (0: infinite) and OWNERSHIP_STRENGTH, stamped on every sample.
    lifespan_ns: AtomicU64,
    strength: AtomicI32,
    matched: Mutex<MatchedStatus>,
    listener: Mutex<Option<WriterListener>>,
    pub(crate) deleted: AtomicBool,
    /// DEADLINE period in µs, if finite, and per instance when it next expires.
    pub(crate) deadline_us: Option<u64>,
    deadlines: Mutex<BTreeMap<InstanceHandle, u64>>,
    deadline_missed: Mutex<DeadlineMissedStatus>,
}

impl WriterCore {
    pub(crate) fn new(id: u32, topic: Arc<TopicInner>, qos: DataWriterQos) -> Arc<WriterCore> {
        let blocking = blocking_us(&qos);
        let lifespan = lifespan_ns(&qos);
        let strength = qos.ownership_strength.value;
        let deadline_period = qos.deadline.period;
        Arc::new(WriterCore {
            id,
            subgroup: topic.subgroup,
            topic,
            qos: Mutex::new(qos),
            seq: AtomicU64::new(0),
            write_lock: Mutex::new(Vec::new()),
            sender: Mutex::new(None),
            blocking_us: AtomicU64::new(blocking),
            lifespan_ns: AtomicU64::new(lifespan),
            strength: AtomicI32::new(strength),
            matched: Mutex::new(MatchedStatus::default()),
            listener: Mutex::new(None),
            deleted: AtomicBool::new(false),
            deadline_us: deadline_period
                .to_std()
                .map(|d| (d.as_micros() as u64).max(1)),
            deadlines: Mutex::new(BTreeMap::new()),
            deadline_missed: Mutex::new(DeadlineMissedStatus::default()),
        })
    }

    /// The view changed: `readers` participants read the subgroup now.
    pub(crate) fn on_view(&self, vid: u32, readers: u32) -> bool {
        update_matched(&mut lock(&self.matched), readers, vid)
    }

    /// Counts instances this writer did not write for a DEADLINE period by `now_us`
    /// (OFFERED_DEADLINE_MISSED); true if any.
    pub(crate) fn check_deadlines(&self, now_us: u64) -> bool {
        let Some(period) = self.deadline_us else {
            return false;
        };
        let mut missed = Vec::new();
        for (h, at) in lock(&self.deadlines).iter_mut() {
            while *at <= now_us {
                missed.push(*h);
                *at += period;
            }
        }
        let Some(last) = missed.last() else {
            return false;
        };
        let mut s = lock(&self.deadline_missed);
        s.total_count += missed.len() as u32;
        s.total_count_change += missed.len() as i32;
        s.last_instance_handle = *last;
        true
    }

    /// An instance was written (or, with `gone`, unregistered or disposed).
    fn wrote(&self, key: InstanceHandle, gone: bool) {
        if let Some(period) = self.deadline_us {
            let mut d = lock(&self.deadlines);
            if gone {
                d.remove(&key);
            } else {
                d.insert(key, crate::cache::now_us().saturating_add(period));
            }
        }
    }

    pub(crate) fn fire(&self) {
        let l = lock(&self.listener).clone();
        if let Some(l) = l {
            l(*lock(&self.matched));
        }
    }
}

/// Writes samples of `T` to a topic (DDS `DataWriter`). Cheap to clone.
pub struct DataWriter<T: TopicType> {
    core: Arc<WriterCore>,
    _t: PhantomData<fn(T)>,
}

impl<T: TopicType> Clone for DataWriter<T> {
    fn clone(&self) -> Self {
        DataWriter {
            core: Arc::clone(&self.core),
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

/// RELIABILITY `max_blocking_time` in µs (an hour for INFINITE).
fn blocking_us(qos: &DataWriterQos) -> u64 {
    qos.reliability
        .max_blocking_time
        .to_std()
        .unwrap_or(Duration::from_secs(3600))
        .as_micros() as u64
}

/// LIFESPAN in ns (0 for INFINITE).
fn lifespan_ns(qos: &DataWriterQos) -> u64 {
    qos.lifespan
        .duration
        .to_std()
        .map_or(0, |d| (d.as_nanos() as u64).max(1))
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

impl<T: TopicType> DataWriter<T> {
    pub(crate) fn new(core: Arc<WriterCore>) -> Self {
        DataWriter {
            core,
            _t: PhantomData,
        }
    }

    pub(crate) fn core(&self) -> &Arc<WriterCore> {
        &self.core
    }

    pub(crate) fn refresh_matched(&self) {
        let p = &self.core.topic.participant;
        let st = lock(&p.shared.state);
        let vid = st.view.as_ref().map_or(0, |v| v.vid);
        let readers = st
            .subgroups
            .get(&self.core.subgroup)
            .map_or(0, |d| d.readers.len() as u32);
        drop(st);
        self.core.on_view(vid, readers);
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

    /// Changes the QoS (only the policies DDS lets change after enable).
    pub fn set_qos(&self, qos: DataWriterQos) -> Result<()> {
        qos.check()?;
        let mut q = lock(&self.core.qos);
        q.changeable_to(&qos)?;
        self.core
            .blocking_us
            .store(blocking_us(&qos), Ordering::Relaxed);
        self.core
            .lifespan_ns
            .store(lifespan_ns(&qos), Ordering::Relaxed);
        self.core
            .strength
            .store(qos.ownership_strength.value, Ordering::Relaxed);
        *q = qos;
        Ok(())
    }

    /// Writes `data`, stamped now (DDS `write`).
    pub fn write(&self, data: &T) -> Result<()> {
        self.write_w_timestamp(data, now_ns())
    }

    /// Writes `data` with the source timestamp `timestamp_ns` (ns since the Unix epoch).
    /// Blocks while the window is full or a view change runs, up to RELIABILITY's
    /// `max_blocking_time`, then returns `Timeout`.
    pub fn write_w_timestamp(&self, data: &T, timestamp_ns: i64) -> Result<()> {
        let key = instance_of(data)?;
        self.send(SampleKind::Data, key, timestamp_ns, |buf| {
            data.encode_into(Endianness::Little, buf)
                .map_err(|e| match e {
                    spindle_topics::Error::BufferTooSmall { needed, .. } => {
                        Error::OutOfResources(format!(
                            "a sample of {needed} bytes does not fit the topic's {}-byte slots; \
                     raise slot_payload_bytes or bound the type",
                            buf.len()
                        ))
                    }
                    e => Error::Topic(e),
                })
        })
    }

    /// Disposes the instance of `data`'s key (DDS `dispose`).
    pub fn dispose(&self, data: &T) -> Result<()> {
        let key = instance_of(data)?;
        self.send(SampleKind::Dispose, key, now_ns(), |_| Ok(0))
    }

    /// Unregisters the instance of `data`'s key (DDS `unregister_instance`); with
    /// WRITER_DATA_LIFECYCLE `autodispose_unregistered_instances` it is disposed first.
    pub fn unregister_instance(&self, data: &T) -> Result<()> {
        let key = instance_of(data)?;
        if self
            .qos()
            .writer_data_lifecycle
            .autodispose_unregistered_instances
        {
            self.send(SampleKind::Dispose, key, now_ns(), |_| Ok(0))?;
        }
        self.send(SampleKind::Unregister, key, now_ns(), |_| Ok(0))
    }

    /// The instance handle of `data`'s key (DDS `register_instance`; registration is
    /// implicit on the first write).
    pub fn register_instance(&self, data: &T) -> Result<InstanceHandle> {
        instance_of(data)
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
    pub fn wait_for_readers(&self, count: u32, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while lock(&self.core.matched).current_count < count {
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "fewer than {count} readers matched"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Borrows the next slot of the writer's ring with a default `T` to fill in place
    /// (DDS `loan_sample`); [`LoanedSample::write`] sends it.
    pub fn loan_sample(&self) -> Result<LoanedSample<T>>
    where
        T: Default,
    {
        self.check()?;
        let (loan, room) = self.loan(Instant::now() + self.blocking_time())?;
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
        self.core.topic.participant.check_alive()
    }

    fn blocking_time(&self) -> Duration {
        Duration::from_micros(self.core.blocking_us.load(Ordering::Relaxed))
    }

    /// A slot of the ring and the payload room after the header. The sender handle is
    /// cached; a view change stops its ring (`Wedged`) and the next view's is fetched.
    fn loan(&self, deadline: Instant) -> Result<(spindle_group::Loan, usize)> {
        let p = &self.core.topic.participant;
        let mut tries = 0u32;
        loop {
            let cached = lock(&self.core.sender).clone();
            let sender = match cached {
                Some(s) => Ok(s),
                None => p.sender(self.core.subgroup).inspect(|s| {
                    *lock(&self.core.sender) = Some(s.clone());
                }),
            };
            let err = match sender {
                Ok(s) => match s.try_loan() {
                    Ok(l) => {
                        let max = s.payload_bytes_max();
                        let room = max.checked_sub(SAMPLE_HEADER_BYTES).ok_or_else(|| {
                            Error::OutOfResources(format!(
                                "slots of {max} bytes hold no sample header"
                            ))
                        })?;
                        return Ok((l, room));
                    }
                    Err(e @ spindle_group::Error::WindowFull { .. }) => e,
                    Err(e @ spindle_group::Error::Wedged { .. }) => {
                        *lock(&self.core.sender) = None;
                        e
                    }
                    Err(e) => return Err(e.into()),
                },
                Err(e @ spindle_group::Error::Wedged { .. }) => e,
                Err(e) => return Err(e.into()),
            };
            p.check_alive()?;
            if on_delivery_thread() || Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "writing {}: {err} (RELIABILITY max_blocking_time)",
                    self.core.topic.name
                )));
            }
            tries = tries.wrapping_add(1);
            if tries % 64 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Encodes with `body` into the staging buffer, then loans a slot and writes the
    /// header and body into it.
    fn send(
        &self,
        kind: SampleKind,
        key: InstanceHandle,
        timestamp_ns: i64,
        body: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<()> {
        self.check()?;
        let deadline = Instant::now() + self.blocking_time();
        let mut staging = lock(&self.core.write_lock);
        let (loan, room) = self.loan(deadline)?;
        staging.resize(room, 0);
        let n = body(&mut staging[..])?;
        self.core.wrote(key, kind != SampleKind::Data);
        self.finish(loan, kind, key, timestamp_ns, &staging[..n])
    }

    fn finish(
        &self,
        mut loan: spindle_group::Loan,
        kind: SampleKind,
        key: InstanceHandle,
        timestamp_ns: i64,
        body: &[u8],
    ) -> Result<()> {
        let seq = self.core.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let h = SampleHeader {
            kind,
            writer_id: self.core.id,
            topic_id: self.core.topic.topic_id,
            writer_seq: seq,
            source_timestamp_ns: timestamp_ns,
            key_hash: key.0,
            lifespan_ns: self.core.lifespan_ns.load(Ordering::Relaxed),
            ownership_strength: self.core.strength.load(Ordering::Relaxed),
        };
        let mut hb = [0u8; SAMPLE_HEADER_BYTES];
        h.encode(&mut hb);
        loan.write_at(0, &hb)?;
        loan.write_at(SAMPLE_HEADER_BYTES, body)?;
        loan.commit();
        Ok(())
    }
}

/// A slot of the writer's ring and a value to build in place (DDS loaned sample).
/// Dropping it without [`LoanedSample::write`] sends nothing (a null keeps the order).
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
        let Some((loan, room)) = self.loan.take() else {
            return Err(Error::PreconditionNotMet(
                "the loan was already written".into(),
            ));
        };
        let key = instance_of(&self.value)?;
        let mut staging = lock(&self.writer.core.write_lock);
        staging.resize(room, 0);
        let n = self
            .value
            .encode_into(Endianness::Little, &mut staging[..])?;
        self.writer
            .finish(loan, SampleKind::Data, key, now_ns(), &staging[..n])
    }
}
