//! The QoS of each DCPS entity.

use crate::consistency::{self as rules, Violations};
use crate::delivery::DeliveryLevel;
use crate::error::{QosError, Result};
use crate::policy::{
    Deadline, DestinationOrder, Durability, DurabilityKind, DurabilityService, EntityFactory,
    GroupData, History, LatencyBudget, Lifespan, Liveliness, Ownership, OwnershipStrength,
    Partition, Presentation, QosPolicyId, ReaderDataLifecycle, Reliability, ResourceLimits,
    TimeBasedFilter, TopicData, TransportPriority, UserData, WriterDataLifecycle,
};
use crate::time::Duration;

/// The first violation, or `Ok`.
fn first(violations: Violations) -> Result<()> {
    match violations.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `Err(Immutable)` if `old` and `new` differ.
fn same<T: PartialEq>(policy: QosPolicyId, old: &T, new: &T) -> Result<()> {
    if old == new {
        Ok(())
    } else {
        Err(QosError::Immutable { policy })
    }
}

/// The `with_*` helpers shared by topic, writer and reader QoS.
macro_rules! builders {
    ($ty:ident) => {
        impl $ty {
            /// Returns this QoS with `RELIABILITY` set to `reliability`.
            #[must_use]
            pub fn with_reliability(mut self, reliability: Reliability) -> Self {
                self.reliability = reliability;
                self
            }

            /// Returns this QoS with the `DURABILITY` kind set to `kind`.
            #[must_use]
            pub fn with_durability(mut self, kind: DurabilityKind) -> Self {
                self.durability.kind = kind;
                self
            }

            /// Returns this QoS with `HISTORY` set to `history`.
            #[must_use]
            pub fn with_history(mut self, history: History) -> Self {
                self.history = history;
                self
            }

            /// Returns this QoS with `RESOURCE_LIMITS` set to `limits`.
            #[must_use]
            pub fn with_resource_limits(mut self, limits: ResourceLimits) -> Self {
                self.resource_limits = limits;
                self
            }

            /// Returns this QoS with the `DEADLINE` period set to `period`.
            #[must_use]
            pub fn with_deadline(mut self, period: Duration) -> Self {
                self.deadline.period = period;
                self
            }

            /// Returns this QoS with `RELIABILITY`'s `max_blocking_time` (how long a write
            /// may wait for room or a view change) set to `max`.
            #[must_use]
            pub fn with_max_blocking_time(mut self, max: Duration) -> Self {
                self.reliability.max_blocking_time = max;
                self
            }

            /// The delivery level its `RELIABILITY` and `DURABILITY` ask for.
            pub fn delivery_level(&self) -> DeliveryLevel {
                DeliveryLevel::of(&self.reliability, &self.durability)
            }

            /// The first inconsistency (in ascending policy id order), or `Ok`.
            pub fn check(&self) -> Result<()> {
                first(self.check_all())
            }
        }
    };
}

/// The QoS of a `DomainParticipant`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DomainParticipantQos {
    /// `USER_DATA`.
    pub user_data: UserData,
    /// `ENTITY_FACTORY`.
    pub entity_factory: EntityFactory,
}

impl DomainParticipantQos {
    /// The first inconsistency, or `Ok` (no participant policy can be inconsistent).
    pub fn check(&self) -> Result<()> {
        first(self.check_all())
    }

    /// Every inconsistency (always empty: participant policies have no constraints).
    pub fn check_all(&self) -> Vec<QosError> {
        Vec::new()
    }

    /// Whether an enabled participant may change to `new` (always: both policies are
    /// changeable).
    pub fn changeable_to(&self, new: &Self) -> Result<()> {
        let _ = new;
        Ok(())
    }
}

/// The QoS of a `Topic`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TopicQos {
    /// `TOPIC_DATA`.
    pub topic_data: TopicData,
    /// `DURABILITY`.
    pub durability: Durability,
    /// `DURABILITY_SERVICE`.
    pub durability_service: DurabilityService,
    /// `DEADLINE`.
    pub deadline: Deadline,
    /// `LATENCY_BUDGET`.
    pub latency_budget: LatencyBudget,
    /// `LIVELINESS`.
    pub liveliness: Liveliness,
    /// `RELIABILITY` (default `BEST_EFFORT`).
    pub reliability: Reliability,
    /// `DESTINATION_ORDER`.
    pub destination_order: DestinationOrder,
    /// `HISTORY`.
    pub history: History,
    /// `RESOURCE_LIMITS`.
    pub resource_limits: ResourceLimits,
    /// `TRANSPORT_PRIORITY`.
    pub transport_priority: TransportPriority,
    /// `LIFESPAN`.
    pub lifespan: Lifespan,
    /// `OWNERSHIP`.
    pub ownership: Ownership,
}

builders!(TopicQos);

/// `check_all` and `changeable_to` of the QoS types that carry the topic-level policies
/// (`TopicQos`, `DataWriterQos`): the same fields, the same rules.
macro_rules! topic_level_rules {
    ($t:ident, $entity:literal) => {
        impl $t {
            /// Every inconsistency, in ascending policy id order.
            pub fn check_all(&self) -> Vec<QosError> {
                let mut out = Violations::new();
                for (id, name, d) in [
                    (QosPolicyId::Deadline, "deadline.period", self.deadline.period),
                    (QosPolicyId::LatencyBudget, "latency_budget.duration", self.latency_budget.duration),
                    (QosPolicyId::Liveliness, "liveliness.lease_duration", self.liveliness.lease_duration),
                    (QosPolicyId::Reliability, "reliability.max_blocking_time", self.reliability.max_blocking_time),
                ] {
                    rules::duration(&mut out, id, name, d);
                }
                rules::history(&mut out, &self.history, &self.resource_limits);
                rules::resource_limits(&mut out, &self.resource_limits);
                rules::duration(&mut out, QosPolicyId::Lifespan, "lifespan.duration", self.lifespan.duration);
                rules::durability_service(&mut out, &self.durability_service);
                out
            }

            #[doc = concat!("Whether an enabled ", $entity, " may change to `new`: `Err(Immutable)` for the first")]
            /// (lowest id) policy that differs and cannot change after enabling. Consistency
            /// of `new` is not checked here; use `check`.
            pub fn changeable_to(&self, new: &Self) -> Result<()> {
                same(QosPolicyId::Durability, &self.durability, &new.durability)?;
                same(QosPolicyId::Ownership, &self.ownership, &new.ownership)?;
                same(QosPolicyId::Liveliness, &self.liveliness, &new.liveliness)?;
                same(QosPolicyId::Reliability, &self.reliability, &new.reliability)?;
                same(QosPolicyId::DestinationOrder, &self.destination_order, &new.destination_order)?;
                same(QosPolicyId::History, &self.history, &new.history)?;
                same(QosPolicyId::ResourceLimits, &self.resource_limits, &new.resource_limits)?;
                same(QosPolicyId::DurabilityService, &self.durability_service, &new.durability_service)
            }
        }
    };
}

topic_level_rules!(TopicQos, "topic");
topic_level_rules!(DataWriterQos, "writer");

/// The QoS of a `Publisher`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PublisherQos {
    /// `PRESENTATION`.
    pub presentation: Presentation,
    /// `PARTITION`.
    pub partition: Partition,
    /// `GROUP_DATA`.
    pub group_data: GroupData,
    /// `ENTITY_FACTORY`.
    pub entity_factory: EntityFactory,
}

/// The QoS of a `Subscriber`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SubscriberQos {
    /// `PRESENTATION`.
    pub presentation: Presentation,
    /// `PARTITION`.
    pub partition: Partition,
    /// `GROUP_DATA`.
    pub group_data: GroupData,
    /// `ENTITY_FACTORY`.
    pub entity_factory: EntityFactory,
}

/// `check`, `check_all` and `changeable_to` for publisher and subscriber QoS.
macro_rules! group_qos {
    ($ty:ident) => {
        impl $ty {
            /// The first inconsistency (in ascending policy id order), or `Ok`.
            pub fn check(&self) -> Result<()> {
                first(self.check_all())
            }

            /// Every inconsistency, in ascending policy id order.
            pub fn check_all(&self) -> Vec<QosError> {
                let mut out = Violations::new();
                rules::partition(&mut out, &self.partition);
                out
            }

            /// Whether an enabled entity may change to `new`: `Err(Immutable)` if
            /// `PRESENTATION` differs (every other policy here is changeable).
            pub fn changeable_to(&self, new: &Self) -> Result<()> {
                same(
                    QosPolicyId::Presentation,
                    &self.presentation,
                    &new.presentation,
                )
            }
        }
    };
}

group_qos!(PublisherQos);
group_qos!(SubscriberQos);

/// The QoS of a `DataWriter`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DataWriterQos {
    /// `DURABILITY`.
    pub durability: Durability,
    /// `DURABILITY_SERVICE`.
    pub durability_service: DurabilityService,
    /// `DEADLINE`.
    pub deadline: Deadline,
    /// `LATENCY_BUDGET`.
    pub latency_budget: LatencyBudget,
    /// `LIVELINESS`.
    pub liveliness: Liveliness,
    /// `RELIABILITY` (default `RELIABLE`, 100 ms).
    pub reliability: Reliability,
    /// `DESTINATION_ORDER`.
    pub destination_order: DestinationOrder,
    /// `HISTORY`.
    pub history: History,
    /// `RESOURCE_LIMITS`.
    pub resource_limits: ResourceLimits,
    /// `TRANSPORT_PRIORITY`.
    pub transport_priority: TransportPriority,
    /// `LIFESPAN`.
    pub lifespan: Lifespan,
    /// `USER_DATA`.
    pub user_data: UserData,
    /// `OWNERSHIP`.
    pub ownership: Ownership,
    /// `OWNERSHIP_STRENGTH`.
    pub ownership_strength: OwnershipStrength,
    /// `WRITER_DATA_LIFECYCLE`.
    pub writer_data_lifecycle: WriterDataLifecycle,
}

impl Default for DataWriterQos {
    /// The specification's defaults; `RELIABILITY` is `RELIABLE` for writers.
    fn default() -> DataWriterQos {
        DataWriterQos {
            durability: Durability::default(),
            durability_service: DurabilityService::default(),
            deadline: Deadline::default(),
            latency_budget: LatencyBudget::default(),
            liveliness: Liveliness::default(),
            reliability: Reliability::reliable(),
            destination_order: DestinationOrder::default(),
            history: History::default(),
            resource_limits: ResourceLimits::default(),
            transport_priority: TransportPriority::default(),
            lifespan: Lifespan::default(),
            user_data: UserData::default(),
            ownership: Ownership::default(),
            ownership_strength: OwnershipStrength::default(),
            writer_data_lifecycle: WriterDataLifecycle::default(),
        }
    }
}

builders!(DataWriterQos);

impl DataWriterQos {
    /// The specification's `copy_from_topic_qos`: every policy the topic also has
    /// (including `RELIABILITY`) comes from `topic`, the rest are writer defaults.
    pub fn from_topic_qos(topic: &TopicQos) -> DataWriterQos {
        DataWriterQos {
            durability: topic.durability,
            durability_service: topic.durability_service,
            deadline: topic.deadline,
            latency_budget: topic.latency_budget,
            liveliness: topic.liveliness,
            reliability: topic.reliability,
            destination_order: topic.destination_order,
            history: topic.history,
            resource_limits: topic.resource_limits,
            transport_priority: topic.transport_priority,
            lifespan: topic.lifespan,
            ownership: topic.ownership,
            ..DataWriterQos::default()
        }
    }
}

/// The QoS of a `DataReader`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DataReaderQos {
    /// `DURABILITY`.
    pub durability: Durability,
    /// `DEADLINE`.
    pub deadline: Deadline,
    /// `LATENCY_BUDGET`.
    pub latency_budget: LatencyBudget,
    /// `LIVELINESS`.
    pub liveliness: Liveliness,
    /// `RELIABILITY` (default `BEST_EFFORT`).
    pub reliability: Reliability,
    /// `DESTINATION_ORDER`.
    pub destination_order: DestinationOrder,
    /// `HISTORY`.
    pub history: History,
    /// `RESOURCE_LIMITS`.
    pub resource_limits: ResourceLimits,
    /// `USER_DATA`.
    pub user_data: UserData,
    /// `OWNERSHIP`.
    pub ownership: Ownership,
    /// `TIME_BASED_FILTER`.
    pub time_based_filter: TimeBasedFilter,
    /// `READER_DATA_LIFECYCLE`.
    pub reader_data_lifecycle: ReaderDataLifecycle,
}

builders!(DataReaderQos);

impl DataReaderQos {
    /// The specification's `copy_from_topic_qos`: every policy the topic also has comes
    /// from `topic`, the rest are reader defaults.
    pub fn from_topic_qos(topic: &TopicQos) -> DataReaderQos {
        DataReaderQos {
            durability: topic.durability,
            deadline: topic.deadline,
            latency_budget: topic.latency_budget,
            liveliness: topic.liveliness,
            reliability: topic.reliability,
            destination_order: topic.destination_order,
            history: topic.history,
            resource_limits: topic.resource_limits,
            ownership: topic.ownership,
            ..DataReaderQos::default()
        }
    }

    /// Every inconsistency, in ascending policy id order.
    pub fn check_all(&self) -> Vec<QosError> {
        let mut out = Violations::new();
        rules::duration(
            &mut out,
            QosPolicyId::Deadline,
            "deadline.period",
            self.deadline.period,
        );
        rules::duration(
            &mut out,
            QosPolicyId::LatencyBudget,
            "latency_budget.duration",
            self.latency_budget.duration,
        );
        rules::duration(
            &mut out,
            QosPolicyId::Liveliness,
            "liveliness.lease_duration",
            self.liveliness.lease_duration,
        );
        rules::time_based_filter(&mut out, &self.time_based_filter, &self.deadline);
        rules::duration(
            &mut out,
            QosPolicyId::Reliability,
            "reliability.max_blocking_time",
            self.reliability.max_blocking_time,
        );
        rules::history(&mut out, &self.history, &self.resource_limits);
        rules::resource_limits(&mut out, &self.resource_limits);
        let rdl = &self.reader_data_lifecycle;
        rules::duration(
            &mut out,
            QosPolicyId::ReaderDataLifecycle,
            "reader_data_lifecycle.autopurge_nowriter_samples_delay",
            rdl.autopurge_nowriter_samples_delay,
        );
        rules::duration(
            &mut out,
            QosPolicyId::ReaderDataLifecycle,
            "reader_data_lifecycle.autopurge_disposed_samples_delay",
            rdl.autopurge_disposed_samples_delay,
        );
        out
    }

    /// Whether an enabled reader may change to `new`: `Err(Immutable)` for the first
    /// (lowest id) policy that differs and cannot change after enabling. Consistency of
    /// `new` is not checked here; use [`DataReaderQos::check`].
    pub fn changeable_to(&self, new: &Self) -> Result<()> {
        same(QosPolicyId::Durability, &self.durability, &new.durability)?;
        same(QosPolicyId::Ownership, &self.ownership, &new.ownership)?;
        same(QosPolicyId::Liveliness, &self.liveliness, &new.liveliness)?;
        same(
            QosPolicyId::Reliability,
            &self.reliability,
            &new.reliability,
        )?;
        same(
            QosPolicyId::DestinationOrder,
            &self.destination_order,
            &new.destination_order,
        )?;
        same(QosPolicyId::History, &self.history, &new.history)?;
        same(
            QosPolicyId::ResourceLimits,
            &self.resource_limits,
            &new.resource_limits,
        )
    }
}
