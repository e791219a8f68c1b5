//! Communication statuses (DDS 1.4 §2.2.4.1), as the view reflects them: a writer's
//! matched readers are the participants that read its topic's subgroup in the installed
//! view, and a reader's matched writers are the subgroup's senders.

use crate::sample::InstanceHandle;

/// Which status changed (a bit set, like DDS `StatusMask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StatusMask(pub u32);

impl StatusMask {
    /// `DATA_AVAILABLE`.
    pub const DATA_AVAILABLE: StatusMask = StatusMask(1 << 10);
    /// `SAMPLE_REJECTED`.
    pub const SAMPLE_REJECTED: StatusMask = StatusMask(1 << 3);
    /// `SAMPLE_LOST`.
    pub const SAMPLE_LOST: StatusMask = StatusMask(1 << 7);
    /// `LIVELINESS_CHANGED`.
    pub const LIVELINESS_CHANGED: StatusMask = StatusMask(1 << 12);
    /// `REQUESTED_INCOMPATIBLE_QOS`.
    pub const REQUESTED_INCOMPATIBLE_QOS: StatusMask = StatusMask(1 << 6);
    /// `OFFERED_INCOMPATIBLE_QOS`.
    pub const OFFERED_INCOMPATIBLE_QOS: StatusMask = StatusMask(1 << 5);
    /// `REQUESTED_DEADLINE_MISSED`.
    pub const REQUESTED_DEADLINE_MISSED: StatusMask = StatusMask(1 << 2);
    /// `PUBLICATION_MATCHED`.
    pub const PUBLICATION_MATCHED: StatusMask = StatusMask(1 << 13);
    /// `SUBSCRIPTION_MATCHED`.
    pub const SUBSCRIPTION_MATCHED: StatusMask = StatusMask(1 << 14);
    /// Every status.
    pub const ALL: StatusMask = StatusMask(u32::MAX);
    /// No status.
    pub const NONE: StatusMask = StatusMask(0);

    /// True if any bit of `other` is set here.
    pub fn intersects(self, other: StatusMask) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for StatusMask {
    type Output = StatusMask;
    fn bitor(self, rhs: StatusMask) -> StatusMask {
        StatusMask(self.0 | rhs.0)
    }
}

/// `PUBLICATION_MATCHED_STATUS` (writer) and `SUBSCRIPTION_MATCHED_STATUS` (reader):
/// counts of matched participants on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatchedStatus {
    /// Matches ever made.
    pub total_count: u32,
    /// Change of `total_count` since the status was last read.
    pub total_count_change: i32,
    /// Matches now.
    pub current_count: u32,
    /// Change of `current_count` since the status was last read.
    pub current_count_change: i32,
    /// The view id the counts come from.
    pub view_id: u32,
}

/// `INCONSISTENT_TOPIC_STATUS`: readers and writers elsewhere in the domain on a topic of
/// this name with another DDS type; they are not matched with this participant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InconsistentTopicStatus {
    /// Such endpoints ever seen.
    pub total_count: u32,
    /// Change since the status was last read.
    pub total_count_change: i32,
}

/// `SAMPLE_REJECTED_STATUS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleRejectedStatus {
    /// Samples rejected ever.
    pub total_count: u32,
    /// Change since last read.
    pub total_count_change: i32,
    /// Why the last one was rejected.
    pub last_reason: SampleRejectedReason,
    /// Its instance.
    pub last_instance_handle: InstanceHandle,
}

/// `SAMPLE_LOST_STATUS` (reader): samples delivered to its participant that it could
/// not judge, so did not take: held back for a writer the built-in table never named
/// before a view change (or past `HELD_BYTES_MAX`), whose partition and QoS are
/// unknown ([`crate::DataReader::sample_lost_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleLostStatus {
    /// Samples ever lost.
    pub total_count: u32,
    /// Change of `total_count` since the status was last read.
    pub total_count_change: i32,
}

/// Why a sample was rejected (DDS `SampleRejectedStatusKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleRejectedReason {
    /// Nothing rejected yet.
    #[default]
    NotRejected,
    /// `max_instances`.
    ByInstancesLimit,
    /// `max_samples`.
    BySamplesLimit,
    /// `max_samples_per_instance`.
    BySamplesPerInstanceLimit,
}

/// `LIVELINESS_LOST_STATUS`: how often a writer with a MANUAL_BY_PARTICIPANT or
/// MANUAL_BY_TOPIC LIVELINESS let its lease pass without writing or asserting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LivelinessLostStatus {
    /// Leases missed in all.
    pub total_count: u32,
    /// Change of `total_count` since last read.
    pub total_count_change: i32,
}

/// `LIVELINESS_CHANGED_STATUS`: matched writers alive — in the view, and for writers with
/// a manual LIVELINESS and a finite lease, heard from within their lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LivelinessChangedStatus {
    /// Writers alive.
    pub alive_count: u32,
    /// Writers no longer alive: each that left the view after it matched, plus each
    /// matched writer whose lease passed unasserted (until it is heard from again).
    pub not_alive_count: u32,
    /// Change of `alive_count` since last read.
    pub alive_count_change: i32,
    /// Change of `not_alive_count` since last read.
    pub not_alive_count_change: i32,
}

/// `REQUESTED_DEADLINE_MISSED_STATUS`: instances that went a DEADLINE period without data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeadlineMissedStatus {
    /// Periods missed ever (over all instances).
    pub total_count: u32,
    /// Change since last read.
    pub total_count_change: i32,
    /// The instance that missed last.
    pub last_instance_handle: InstanceHandle,
}

/// `REQUESTED_INCOMPATIBLE_QOS_STATUS` / `OFFERED_INCOMPATIBLE_QOS_STATUS`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IncompatibleQosStatus {
    /// Incompatibilities ever found.
    pub total_count: u32,
    /// Change since last read.
    pub total_count_change: i32,
    /// The last policy found incompatible.
    pub last_policy_id: Option<spindle_qos::QosPolicyId>,
}

impl IncompatibleQosStatus {
    /// Counts one more incompatible endpoint, which failed on `policy` first.
    pub(crate) fn count(&mut self, policy: spindle_qos::QosPolicyId) {
        self.total_count += 1;
        self.total_count_change += 1;
        self.last_policy_id = Some(policy);
    }
}

/// Updates a matched status to `current`, counting new matches.
pub(crate) fn rematch(s: &mut MatchedStatus, current: u32, view_id: u32) -> bool {
    if s.current_count == current {
        s.view_id = view_id;
        return false;
    }
    if current > s.current_count {
        let added = current - s.current_count;
        s.total_count += added;
        s.total_count_change += added as i32;
    }
    s.current_count_change += current as i32 - s.current_count as i32;
    s.current_count = current;
    s.view_id = view_id;
    true
}
