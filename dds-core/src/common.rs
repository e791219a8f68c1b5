//! What every DCPS module uses: the lock that survives a poisoned mutex, the flag that
//! marks the delivery thread, a topic's identity and the small mappings readers and
//! writers share. It imports no other DCPS module but the data types below it.

use std::sync::{Mutex, MutexGuard};

use spindle_group::SubgroupId;
use spindle_topics::TopicType;

use crate::cache::Rejected;
use crate::error::Result;
use crate::sample::InstanceHandle;
use crate::status::SampleRejectedReason;

/// Locks `m`, taking the data of a poisoned mutex as it is: a listener that panicked must
/// not take the participant down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static ON_DELIVERY_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on a participant's delivery thread (inside listeners), where waiting for a view
/// change would deadlock.
pub(crate) fn on_delivery_thread() -> bool {
    ON_DELIVERY_THREAD.with(|c| c.get())
}

/// `IllegalOperation` from a listener (the delivery thread) for a `set_qos` that must
/// announce a change and wait for the announcement's delivery, which that thread makes
/// (`announces`: it would).
pub(crate) fn announcing_allowed(announces: bool) -> crate::error::Result<()> {
    if announces && on_delivery_thread() {
        return Err(crate::error::Error::IllegalOperation(
            "a set_qos that changes PARTITION, DEADLINE or LATENCY_BUDGET cannot run from a \
             listener: it waits for its announcement, which the delivery thread delivers"
                .into(),
        ));
    }
    Ok(())
}

/// Marks (or unmarks) this thread as a delivery thread: the participant's predicate
/// thread marks itself for good; a simulation marks the thread for one round.
pub(crate) fn set_delivery_thread(on: bool) {
    ON_DELIVERY_THREAD.with(|c| c.set(on));
}

/// A topic as the entities of one participant know it.
#[derive(Debug)]
pub(crate) struct TopicIdentity {
    /// The topic's name.
    pub(crate) name: String,
    /// The name's hash that samples carry ([`crate::topic_id`]).
    pub(crate) topic_id: u64,
    /// The subgroup that carries it ([`crate::subgroup_of`]).
    pub(crate) subgroup: SubgroupId,
    /// Its DDS type name's id ([`crate::declare::type_id`]).
    pub(crate) type_id: u64,
    /// The structural hash of its type's definition (`TopicType::TYPE_HASH`, or the
    /// run-time type's), `None` when unknown; never `Some(0)` (0 means unknown on the
    /// wire).
    pub(crate) type_hash: Option<u64>,
    /// Its DDS type name.
    pub(crate) type_name: String,
}

/// Maps a cache rejection to the status reason.
pub(crate) fn reason(r: &Rejected) -> SampleRejectedReason {
    match r {
        Rejected::Instances => SampleRejectedReason::ByInstancesLimit,
        Rejected::Samples => SampleRejectedReason::BySamplesLimit,
        Rejected::SamplesPerInstance => SampleRejectedReason::BySamplesPerInstanceLimit,
    }
}

/// The instance handle of `data`'s key (zeros for a keyless type).
pub(crate) fn instance_of<T: TopicType>(data: &T) -> Result<InstanceHandle> {
    if T::HAS_KEY {
        Ok(InstanceHandle(data.key_hash()?))
    } else {
        Ok(InstanceHandle::default())
    }
}

/// A QoS duration in µs for this node's own timing, `u64::MAX` past it (584,000 years): a
/// duration that long is not INFINITE, but every use treats u64::MAX µs as never reached
/// (saturating arithmetic), never as a short one.
pub(crate) fn saturating_us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A QoS duration as announced to the domain, in µs: `None` (infinite) for INFINITE and
/// at or past u64::MAX µs (584,000 years), as the wire's u64::MAX says anyway, so this
/// node and the others match it alike.
pub(crate) fn announced_us(d: spindle_qos::Duration) -> Option<u64> {
    d.to_std()
        .and_then(|d| u64::try_from(d.as_micros()).ok())
        .filter(|us| *us != u64::MAX)
}
