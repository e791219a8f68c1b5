//! A writer's state that the view changes and the DEADLINE timer update: its matched
//! and deadline statuses, its cached sender, its sequence numbers. The typed handle over
//! it is [`crate::DataWriter`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_qos::{
    DataWriterQos, DeliveryLevel, LivelinessKind, Partition, Presentation, PublisherQos,
    QosPolicyId,
};

use crate::common::{announced_us, lock, saturating_us, TopicIdentity};
use crate::discovery::{partition_tag, Endpoint, EndpointKey, Rxo};
use crate::registered::Registered;
use crate::sample::{Coherent, InstanceHandle, COHERENT_SET_SAMPLES_MAX};
use crate::status::{
    rematch, DeadlineMissedStatus, IncompatibleQosStatus, LivelinessLostStatus, MatchedStatus,
};
use spindle_transport_rdma::NodeId;

pub(crate) type WriterListener = Arc<dyn Fn(MatchedStatus) + Send + Sync>;

/// A publisher's coherent set (PRESENTATION `coherent_access`), shared with its writers.
#[derive(Debug, Default)]
pub(crate) struct CoherentSet {
    /// Open between `begin_coherent_changes` and `end_coherent_changes`.
    open: AtomicBool,
    /// The writers that wrote in the open set, and how many samples each.
    written: Mutex<BTreeMap<u32, usize>>,
}

impl CoherentSet {
    /// Opens a set; false if one is open already.
    pub(crate) fn begin(&self) -> bool {
        !self.open.swap(true, Ordering::AcqRel)
    }

    /// Closes the set: the writers that wrote in it (each must end it at its readers);
    /// `None` if none was open.
    pub(crate) fn end(&self) -> Option<Vec<u32>> {
        if !self.open.swap(false, Ordering::AcqRel) {
            return None;
        }
        Some(
            std::mem::take(&mut *lock(&self.written))
                .into_keys()
                .collect(),
        )
    }

    /// The mark for writer `id`'s next sample: `No` outside a set, `Begins` for its first
    /// in the open set, else `Continues`; `OutOfResources` past
    /// [`COHERENT_SET_SAMPLES_MAX`].
    pub(crate) fn mark(&self, id: u32) -> crate::error::Result<Coherent> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(Coherent::No);
        }
        let mut written = lock(&self.written);
        let n = written.entry(id).or_insert(0);
        if *n >= COHERENT_SET_SAMPLES_MAX {
            return Err(crate::error::Error::OutOfResources(format!(
                "writer {id}: a coherent set of more than {COHERENT_SET_SAMPLES_MAX} samples \
                 (COHERENT_SET_SAMPLES_MAX); end it and begin another"
            )));
        }
        *n += 1;
        Ok(if *n == 1 {
            Coherent::Begins
        } else {
            Coherent::Continues
        })
    }
}

/// One writer's state. See the module docs.
pub(crate) struct WriterCore {
    pub(crate) id: u32,
    pub(crate) topic: Arc<TopicIdentity>,
    pub(crate) subgroup: spindle_group::SubgroupId,
    /// The delivery level it offers (RELIABILITY and DURABILITY: fixed once enabled).
    pub(crate) level: DeliveryLevel,
    /// Its publisher's PARTITION (changed by the publisher's `set_qos`: [`WriterCore::moved_to`])
    /// and the tag its samples carry, [`partition_tag`] of those names, switched once
    /// they are announced.
    partition: Mutex<Partition>,
    pub(crate) partition_tag: AtomicU32,
    /// Its publisher's PRESENTATION (fixed once enabled).
    presentation: Presentation,
    /// Held while its endpoint is announced again or withdrawn
    /// ([`crate::inner::ParticipantInner::reannounce`]).
    pub(crate) announcing: Mutex<()>,
    pub(crate) qos: Mutex<DataWriterQos>,
    /// The last sequence number taken (0: none yet). Only a holder of [`WriterCore::path`]
    /// takes one, so it is read and then stored, not incremented atomically (the locked
    /// add was about 10 ns a sample in a profile on the benchmark host); readers without
    /// the path (`wait_for_acknowledgments`) only load it.
    pub(crate) seq: AtomicU64,
    /// The source timestamp of its last sample stamped from the clock (`write`,
    /// `dispose`, ...; not `write_w_timestamp`), in ns since the Unix epoch: the next one
    /// is never earlier. Read and stored with the write path held, as `seq`.
    pub(crate) last_stamp_ns: AtomicI64,
    /// What it wrote, counted with the write path held ([`crate::metrics::WriteCells`];
    /// an `Arc`: a deleted writer's cells are summed once nobody can write through it).
    pub(crate) written: Arc<crate::metrics::WriteCells>,
    /// The write path's state, one lock per write: the cached sender and the staging
    /// buffer.
    pub(crate) path: Mutex<WritePath>,
    /// RELIABILITY `max_blocking_time`, kept apart from the QoS so `write` reads it
    /// without a lock.
    pub(crate) blocking_us: AtomicU64,
    /// LIFESPAN in ns (0: infinite) and OWNERSHIP_STRENGTH, stamped on every sample.
    pub(crate) lifespan_ns: AtomicU64,
    pub(crate) strength: AtomicI32,
    pub(crate) matched: Mutex<MatchedStatus>,
    /// OFFERED_INCOMPATIBLE_QOS, and the readers it counted (each once).
    pub(crate) incompatible: Mutex<(IncompatibleQosStatus, BTreeSet<EndpointKey>)>,
    pub(crate) listener: Mutex<Option<WriterListener>>,
    pub(crate) deleted: AtomicBool,
    /// DEADLINE period in µs (0: infinite; changed by `set_qos`), and per instance when
    /// it next expires.
    deadline_us: AtomicU64,
    deadlines: Mutex<BTreeMap<InstanceHandle, u64>>,
    pub(crate) deadline_missed: Mutex<DeadlineMissedStatus>,
    /// LIVELINESS kind and lease (µs; `None`: infinite), fixed once enabled.
    pub(crate) liveliness: LivelinessKind,
    pub(crate) lease_us: Option<u64>,
    /// When it last wrote or asserted liveliness (µs on the participant's clock; 0:
    /// not yet checked), whether the lease has passed since, and LIVELINESS_LOST.
    last_asserted_us: AtomicU64,
    lost: AtomicBool,
    pub(crate) liveliness_lost: Mutex<LivelinessLostStatus>,
    /// Its publisher's coherent set, under PRESENTATION `coherent_access`.
    pub(crate) coherent: Option<Arc<CoherentSet>>,
}

/// What a write holds while it loans a slot, encodes and commits: taken once per sample
/// (`writer::with_room_held` returns it held), so a write pays one lock, not one per part.
pub(crate) struct WritePath {
    /// The subgroup's sender handle, cached; a view change's `Wedged` drops it and the
    /// next view's is fetched.
    pub(crate) sender: Option<spindle_group::Sender>,
    /// Where a small sample is encoded before its copy into the slot: grown to the slot,
    /// never shrunk, not zero-filled again per sample (a large sample is encoded in place
    /// in its RDMC send buffer, not here).
    pub(crate) staging: Vec<u8>,
    /// The instances it registered ([`crate::registered`]).
    pub(crate) registered: Registered,
}

impl WriterCore {
    /// This entity as the built-in topic announces it.
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint {
            entity: self.id,
            topic_id: self.topic.topic_id,
            type_id: self.topic.type_id,
            type_hash: self.topic.type_hash,
            reader: false,
            level: self.level,
            partition: lock(&self.partition).clone(),
            liveliness: self.liveliness,
            lease_us: self.lease_us,
            rxo: {
                let q = lock(&self.qos);
                Rxo::of(
                    q.durability.kind,
                    self.presentation,
                    q.deadline.period,
                    q.latency_budget.duration,
                    q.ownership.kind,
                    q.reliability.kind,
                    q.destination_order.kind,
                )
            },
        }
    }

    pub(crate) fn new(
        id: u32,
        topic: Arc<TopicIdentity>,
        qos: DataWriterQos,
        publisher: &PublisherQos,
        coherent: Option<Arc<CoherentSet>>,
    ) -> Arc<WriterCore> {
        let partition = publisher.partition.clone();
        let blocking = blocking_us(&qos);
        let lifespan = lifespan_ns(&qos);
        let strength = qos.ownership_strength.value;
        let deadline_period = qos.deadline.period;
        let max_instances = qos.resource_limits.max_instances;
        let lease_us = announced_us(qos.liveliness.lease_duration).map(|us| us.max(1));
        Arc::new(WriterCore {
            id,
            presentation: publisher.presentation,
            liveliness: qos.liveliness.kind,
            lease_us,
            last_asserted_us: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            liveliness_lost: Mutex::new(LivelinessLostStatus::default()),
            coherent,
            partition_tag: AtomicU32::new(partition_tag(&partition.name)),
            partition: Mutex::new(partition),
            announcing: Mutex::new(()),
            subgroup: topic.subgroup,
            level: qos.delivery_level(),
            topic,
            qos: Mutex::new(qos),
            seq: AtomicU64::new(0),
            last_stamp_ns: AtomicI64::new(i64::MIN),
            written: Arc::default(),
            path: Mutex::new(WritePath {
                sender: None,
                staging: Vec::new(),
                registered: Registered::new(max_instances),
            }),
            blocking_us: AtomicU64::new(blocking),
            lifespan_ns: AtomicU64::new(lifespan),
            strength: AtomicI32::new(strength),
            matched: Mutex::new(MatchedStatus::default()),
            incompatible: Mutex::new(Default::default()),
            listener: Mutex::new(None),
            deleted: AtomicBool::new(false),
            deadline_us: AtomicU64::new(deadline_of(deadline_period).unwrap_or(0)),
            deadlines: Mutex::new(BTreeMap::new()),
            deadline_missed: Mutex::new(DeadlineMissedStatus::default()),
        })
    }

    /// The lease the application must renew (write or assert within), for a MANUAL
    /// LIVELINESS with a finite lease; `None` otherwise (AUTOMATIC: membership in the
    /// view is liveliness).
    pub(crate) fn manual_lease_us(&self) -> Option<u64> {
        self.lease_us
            .filter(|_| self.liveliness != LivelinessKind::Automatic)
    }

    /// Its DEADLINE period in µs, if finite.
    pub(crate) fn deadline_us(&self) -> Option<u64> {
        Some(self.deadline_us.load(Ordering::Relaxed)).filter(|us| *us > 0)
    }

    /// Its DEADLINE changed to `period` (`set_qos`) at `now_us`: the instances it
    /// watches start a new period now; from infinite, each is watched from its next
    /// write.
    pub(crate) fn set_deadline(&self, period: spindle_qos::Duration, now_us: u64) {
        let period = deadline_of(period);
        let mut d = lock(&self.deadlines);
        self.deadline_us
            .store(period.unwrap_or(0), Ordering::Relaxed);
        match period {
            Some(us) => d
                .values_mut()
                .for_each(|at| *at = now_us.saturating_add(us)),
            None => d.clear(),
        }
    }

    /// Moves it to PARTITION `names` (its publisher's `set_qos`); its samples keep their
    /// tag until [`WriterCore::retag`]. Its endpoint to announce, or `None` if they are
    /// its names already.
    pub(crate) fn moved_to(&self, names: Partition) -> Option<Endpoint> {
        let mut mine = lock(&self.partition);
        if *mine == names {
            return None;
        }
        *mine = names;
        drop(mine);
        Some(self.endpoint())
    }

    /// Tags its samples with its PARTITION names now (once they are announced).
    pub(crate) fn retag(&self) {
        let tag = partition_tag(&lock(&self.partition).name);
        self.partition_tag.store(tag, Ordering::Relaxed);
    }

    /// The writer wrote or asserted its liveliness at `now_us`.
    pub(crate) fn asserted(&self, now_us: u64) {
        self.last_asserted_us
            .store(now_us.max(1), Ordering::Relaxed);
        self.lost.store(false, Ordering::Relaxed);
    }

    /// Counts a lease that passed unrenewed by `now_us` (LIVELINESS_LOST, once per
    /// lapse); true if it did now.
    pub(crate) fn check_liveliness(&self, now_us: u64) -> bool {
        let Some(lease) = self.manual_lease_us() else {
            return false;
        };
        let last = self.last_asserted_us.load(Ordering::Relaxed);
        if last == 0 {
            // The lease runs from the first check after creation.
            self.asserted(now_us);
            return false;
        }
        if now_us.saturating_sub(last) <= lease || self.lost.swap(true, Ordering::Relaxed) {
            return false;
        }
        let mut s = lock(&self.liveliness_lost);
        s.total_count += 1;
        s.total_count_change += 1;
        true
    }

    /// The view changed: `readers` participants read the subgroup now.
    pub(crate) fn on_view(&self, vid: u32, readers: u32) -> bool {
        rematch(&mut lock(&self.matched), readers, vid)
    }

    /// Counts in OFFERED_INCOMPATIBLE_QOS, once each, the readers of its topic that
    /// request more than it offers (`policy`: the first that fails), with a warning
    /// naming them (`me`: this participant's node id, for the message).
    pub(crate) fn offered_incompatible(&self, me: NodeId, readers: &[(EndpointKey, QosPolicyId)]) {
        let mut s = lock(&self.incompatible);
        for ((node, entity), policy) in readers {
            if !s.1.insert((*node, *entity)) {
                continue;
            }
            s.0.count(*policy);
            tracing::warn!(
                topic = %self.topic.name,
                "writer {me}.{} offers less than reader {node}.{entity} requests ({policy:?}): \
                 not matched (OFFERED_INCOMPATIBLE_QOS)",
                self.id,
            );
        }
    }

    /// Counts instances this writer did not write for a DEADLINE period by `now_us`
    /// (OFFERED_DEADLINE_MISSED); true if any.
    pub(crate) fn check_deadlines(&self, now_us: u64) -> bool {
        let Some(period) = self.deadline_us() else {
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
    pub(crate) fn wrote(&self, key: InstanceHandle, gone: bool, now_us: u64) {
        if let Some(period) = self.deadline_us() {
            let mut d = lock(&self.deadlines);
            if gone {
                d.remove(&key);
            } else {
                d.insert(key, now_us.saturating_add(period));
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

/// What an INFINITE RELIABILITY `max_blocking_time` blocks a write for, in µs: an hour.
const INFINITE_BLOCKING_US: u64 = 3_600 * 1_000_000;

/// RELIABILITY `max_blocking_time` in µs ([`INFINITE_BLOCKING_US`] for INFINITE).
pub(crate) fn blocking_us(qos: &DataWriterQos) -> u64 {
    qos.reliability
        .max_blocking_time
        .to_std()
        .map_or(INFINITE_BLOCKING_US, saturating_us)
}

/// LIFESPAN in ns (0 for INFINITE; one past 584 years, whose nanoseconds do not fit,
/// saturates rather than wrapping into a short lifespan).
pub(crate) fn lifespan_ns(qos: &DataWriterQos) -> u64 {
    qos.lifespan.duration.to_std().map_or(0, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
    })
}

/// A DEADLINE period in µs (at least 1), if finite.
fn deadline_of(period: spindle_qos::Duration) -> Option<u64> {
    period.to_std().map(|d| saturating_us(d).max(1))
}
