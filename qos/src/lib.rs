//! # spindle-qos — DDS QoS policies and delivery levels
//!
//! Every standard DCPS QoS policy (DDS 1.4 §2.2.3) with the specification's defaults,
//! the QoS of each entity, consistency checks, requested/offered (RxO) matching, and the
//! mapping from `RELIABILITY` × `DURABILITY` to one of Spindle's four
//! [`DeliveryLevel`]s.
//!
//! ## Building QoS
//!
//! Each entity QoS starts from the specification's defaults; the `with_*` helpers change
//! the common policies, and every field is public for the rest.
//!
//! ```
//! use spindle_qos::{
//!     DataReaderQos, DataWriterQos, DurabilityKind, Duration, History, Reliability,
//!     ReliabilityKind,
//! };
//!
//! // Writers default to RELIABLE; readers and topics to BEST_EFFORT.
//! assert_eq!(DataWriterQos::default().reliability.kind, ReliabilityKind::Reliable);
//! assert_eq!(DataReaderQos::default().reliability.kind, ReliabilityKind::BestEffort);
//!
//! let writer = DataWriterQos::default()
//!     .with_durability(DurabilityKind::TransientLocal)
//!     .with_history(History::keep_last(10))
//!     .with_deadline(Duration::from_millis(100));
//! let reader = DataReaderQos::default()
//!     .with_reliability(Reliability::reliable())
//!     .with_durability(DurabilityKind::TransientLocal)
//!     .with_deadline(Duration::from_secs(1));
//! # let _ = (writer, reader);
//! ```
//!
//! ## Checking consistency
//!
//! [`DataWriterQos::check`] (and the same method on the other entity QoS) returns the
//! first inconsistency by policy id; `check_all` returns all of them.
//!
//! ```
//! use spindle_qos::{DataWriterQos, History, QosError, QosPolicyId, ResourceLimits};
//!
//! assert_eq!(DataWriterQos::default().check(), Ok(()));
//!
//! let bad = DataWriterQos::default()
//!     .with_history(History::keep_last(10))
//!     .with_resource_limits(ResourceLimits {
//!         max_samples: 100,
//!         max_instances: 10,
//!         max_samples_per_instance: 5,
//!     });
//! match bad.check() {
//!     Err(QosError::Inconsistent { policy, detail }) => {
//!         assert_eq!(policy, QosPolicyId::History);
//!         assert_eq!(detail, "history depth 10 exceeds resource_limits.max_samples_per_instance 5");
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```
//!
//! ## Matching a writer with a reader
//!
//! [`incompatible_policies`] lists every policy on which the writer offers less than the
//! reader requests; [`partitions_match`] tells whether their publisher and subscriber
//! share a partition.
//!
//! ```
//! use spindle_qos::{
//!     incompatible_policies, partitions_match, DataReaderQos, DataWriterQos, DurabilityKind,
//!     Partition, PublisherQos, QosPolicyId, Reliability, SubscriberQos,
//! };
//!
//! let publisher = PublisherQos {
//!     partition: Partition { name: vec!["sensors/*".into()] },
//!     ..PublisherQos::default()
//! };
//! let subscriber = SubscriberQos {
//!     partition: Partition { name: vec!["sensors/lidar".into()] },
//!     ..SubscriberQos::default()
//! };
//! assert!(partitions_match(&publisher.partition, &subscriber.partition));
//!
//! let writer = DataWriterQos::default(); // RELIABLE, VOLATILE
//! let reader = DataReaderQos::default().with_reliability(Reliability::reliable());
//! assert!(incompatible_policies(&writer, &publisher, &reader, &subscriber).is_empty());
//!
//! // A reader asking for more durability than the writer offers does not match.
//! let late_joiner = reader.with_durability(DurabilityKind::TransientLocal);
//! assert_eq!(
//!     incompatible_policies(&writer, &publisher, &late_joiner, &subscriber),
//!     vec![QosPolicyId::Durability],
//! );
//! ```
//!
//! ## Delivery level
//!
//! ```
//! use spindle_qos::{DataReaderQos, DataWriterQos, DeliveryLevel, DurabilityKind, TopicQos};
//!
//! assert_eq!(TopicQos::default().delivery_level(), DeliveryLevel::Unordered);
//! assert_eq!(DataWriterQos::default().delivery_level(), DeliveryLevel::Atomic);
//!
//! let level = DataWriterQos::default()
//!     .with_durability(DurabilityKind::Persistent)
//!     .delivery_level();
//! assert_eq!(level, DeliveryLevel::LoggedStore);
//! assert!(level.is_ordered() && level.keeps_history());
//! assert_eq!(DeliveryLevel::from_u8(level.to_u8()), Some(level));
//! assert_eq!("volatilestore".parse(), Ok(DeliveryLevel::VolatileStore));
//! assert_eq!(DataReaderQos::default().delivery_level().to_string(), "Unordered");
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod consistency;
mod delivery;
mod entity;
mod error;
mod policy;
mod rxo;
mod time;

pub use delivery::{DeliveryLevel, ParseDeliveryLevelError};
pub use entity::{
    DataReaderQos, DataWriterQos, DomainParticipantQos, PublisherQos, SubscriberQos, TopicQos,
};
pub use error::{QosError, Result};
pub use policy::{
    Deadline, DestinationOrder, DestinationOrderKind, Durability, DurabilityKind,
    DurabilityService, EntityFactory, GroupData, History, HistoryKind, LatencyBudget, Lifespan,
    Liveliness, LivelinessKind, Ownership, OwnershipKind, OwnershipStrength, Partition,
    Presentation, PresentationAccessScope, QosPolicyId, ReaderDataLifecycle, Reliability,
    ReliabilityKind, ResourceLimits, TimeBasedFilter, TopicData, TransportPriority, UserData,
    WriterDataLifecycle, LENGTH_UNLIMITED,
};
pub use rxo::{incompatible_policies, partitions_match};
pub use time::Duration;
