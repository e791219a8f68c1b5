//! A writer's state that the view changes and the DEADLINE timer update: its matched
//! and deadline statuses, its cached sender, its sequence numbers. The typed handle over
//! it is [`crate::DataWriter`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spindle_qos::{DataWriterQos, DeliveryLevel, Partition};

use crate::common::{lock, TopicIdentity};
use crate::discovery::{partition_tag, Endpoint};
use crate::sample::InstanceHandle;
use crate::status::{rematch, DeadlineMissedStatus, MatchedStatus};

pub(crate) type WriterListener = Arc<dyn Fn(MatchedStatus) + Send + Sync>;

/// One writer's state. See the module docs.
pub(crate) struct WriterCore {
    pub(crate) id: u32,
    pub(crate) topic: Arc<TopicIdentity>,
    pub(crate) subgroup: spindle_group::SubgroupId,
    /// The delivery level it offers (RELIABILITY and DURABILITY: fixed once enabled).
    pub(crate) level: DeliveryLevel,
    /// Its publisher's PARTITION when it was created, and the tag its samples carry.
    pub(crate) partition: Partition,
    pub(crate) partition_tag: u32,
    pub(crate) qos: Mutex<DataWriterQos>,
    pub(crate) seq: AtomicU64,
    pub(crate) write_lock: Mutex<Vec<u8>>,
    pub(crate) sender: Mutex<Option<spindle_group::Sender>>,
    /// RELIABILITY `max_blocking_time`, kept apart from the QoS so `write` reads it
    /// without a lock.
    pub(crate) blocking_us: AtomicU64,
    /// LIFESPAN in ns (0: infinite) and OWNERSHIP_STRENGTH, stamped on every sample.
    pub(crate) lifespan_ns: AtomicU64,
    pub(crate) strength: AtomicI32,
    pub(crate) matched: Mutex<MatchedStatus>,
    pub(crate) listener: Mutex<Option<WriterListener>>,
    pub(crate) deleted: AtomicBool,
    /// DEADLINE period in µs, if finite, and per instance when it next expires.
    pub(crate) deadline_us: Option<u64>,
    deadlines: Mutex<BTreeMap<InstanceHandle, u64>>,
    pub(crate) deadline_missed: Mutex<DeadlineMissedStatus>,
}

impl WriterCore {
    /// This entity as the built-in topic announces it.
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint {
            entity: self.id,
            topic_id: self.topic.topic_id,
            reader: false,
            level: self.level,
            partition: self.partition.clone(),
        }
    }

    pub(crate) fn new(
        id: u32,
        topic: Arc<TopicIdentity>,
        qos: DataWriterQos,
        partition: Partition,
    ) -> Arc<WriterCore> {
        let blocking = blocking_us(&qos);
        let lifespan = lifespan_ns(&qos);
        let strength = qos.ownership_strength.value;
        let deadline_period = qos.deadline.period;
        Arc::new(WriterCore {
            id,
            partition_tag: partition_tag(&partition.name),
            partition,
            subgroup: topic.subgroup,
            level: qos.delivery_level(),
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
        rematch(&mut lock(&self.matched), readers, vid)
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
    pub(crate) fn wrote(&self, key: InstanceHandle, gone: bool, now_us: u64) {
        if let Some(period) = self.deadline_us {
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

/// RELIABILITY `max_blocking_time` in µs (an hour for INFINITE).
pub(crate) fn blocking_us(qos: &DataWriterQos) -> u64 {
    qos.reliability
        .max_blocking_time
        .to_std()
        .unwrap_or(Duration::from_secs(3600))
        .as_micros() as u64
}

/// LIFESPAN in ns (0 for INFINITE).
pub(crate) fn lifespan_ns(qos: &DataWriterQos) -> u64 {
    qos.lifespan
        .duration
        .to_std()
        .map_or(0, |d| (d.as_nanos() as u64).max(1))
}
