//! The standard DCPS QoS policies (DDS 1.4 §2.2.3) and their ids.

use std::fmt;

use crate::time::Duration;

/// The value of a resource limit that means "no limit".
pub const LENGTH_UNLIMITED: i32 = -1;

/// The id of a QoS policy, with the specification's numeric values as discriminants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosPolicyId {
    /// `USER_DATA`.
    UserData = 1,
    /// `DURABILITY`.
    Durability = 2,
    /// `PRESENTATION`.
    Presentation = 3,
    /// `DEADLINE`.
    Deadline = 4,
    /// `LATENCY_BUDGET`.
    LatencyBudget = 5,
    /// `OWNERSHIP`.
    Ownership = 6,
    /// `OWNERSHIP_STRENGTH`.
    OwnershipStrength = 7,
    /// `LIVELINESS`.
    Liveliness = 8,
    /// `TIME_BASED_FILTER`.
    TimeBasedFilter = 9,
    /// `PARTITION`.
    Partition = 10,
    /// `RELIABILITY`.
    Reliability = 11,
    /// `DESTINATION_ORDER`.
    DestinationOrder = 12,
    /// `HISTORY`.
    History = 13,
    /// `RESOURCE_LIMITS`.
    ResourceLimits = 14,
    /// `ENTITY_FACTORY`.
    EntityFactory = 15,
    /// `WRITER_DATA_LIFECYCLE`.
    WriterDataLifecycle = 16,
    /// `READER_DATA_LIFECYCLE`.
    ReaderDataLifecycle = 17,
    /// `TOPIC_DATA`.
    TopicData = 18,
    /// `GROUP_DATA`.
    GroupData = 19,
    /// `TRANSPORT_PRIORITY`.
    TransportPriority = 20,
    /// `LIFESPAN`.
    Lifespan = 21,
    /// `DURABILITY_SERVICE`.
    DurabilityService = 22,
}

impl QosPolicyId {
    /// Every policy id, in ascending numeric order.
    pub const ALL: [QosPolicyId; 22] = [
        QosPolicyId::UserData,
        QosPolicyId::Durability,
        QosPolicyId::Presentation,
        QosPolicyId::Deadline,
        QosPolicyId::LatencyBudget,
        QosPolicyId::Ownership,
        QosPolicyId::OwnershipStrength,
        QosPolicyId::Liveliness,
        QosPolicyId::TimeBasedFilter,
        QosPolicyId::Partition,
        QosPolicyId::Reliability,
        QosPolicyId::DestinationOrder,
        QosPolicyId::History,
        QosPolicyId::ResourceLimits,
        QosPolicyId::EntityFactory,
        QosPolicyId::WriterDataLifecycle,
        QosPolicyId::ReaderDataLifecycle,
        QosPolicyId::TopicData,
        QosPolicyId::GroupData,
        QosPolicyId::TransportPriority,
        QosPolicyId::Lifespan,
        QosPolicyId::DurabilityService,
    ];

    /// The specification's numeric id (`QosPolicyId_t`).
    pub fn to_i32(self) -> i32 {
        self as i32
    }

    /// The policy id with numeric value `id`, if there is one.
    pub fn from_i32(id: i32) -> Option<QosPolicyId> {
        let index = usize::try_from(id).ok()?.checked_sub(1)?;
        QosPolicyId::ALL.get(index).copied()
    }

    /// The specification's name of the policy, e.g. `"DURABILITY"`.
    pub fn name(&self) -> &'static str {
        match self {
            QosPolicyId::UserData => "USER_DATA",
            QosPolicyId::Durability => "DURABILITY",
            QosPolicyId::Presentation => "PRESENTATION",
            QosPolicyId::Deadline => "DEADLINE",
            QosPolicyId::LatencyBudget => "LATENCY_BUDGET",
            QosPolicyId::Ownership => "OWNERSHIP",
            QosPolicyId::OwnershipStrength => "OWNERSHIP_STRENGTH",
            QosPolicyId::Liveliness => "LIVELINESS",
            QosPolicyId::TimeBasedFilter => "TIME_BASED_FILTER",
            QosPolicyId::Partition => "PARTITION",
            QosPolicyId::Reliability => "RELIABILITY",
            QosPolicyId::DestinationOrder => "DESTINATION_ORDER",
            QosPolicyId::History => "HISTORY",
            QosPolicyId::ResourceLimits => "RESOURCE_LIMITS",
            QosPolicyId::EntityFactory => "ENTITY_FACTORY",
            QosPolicyId::WriterDataLifecycle => "WRITER_DATA_LIFECYCLE",
            QosPolicyId::ReaderDataLifecycle => "READER_DATA_LIFECYCLE",
            QosPolicyId::TopicData => "TOPIC_DATA",
            QosPolicyId::GroupData => "GROUP_DATA",
            QosPolicyId::TransportPriority => "TRANSPORT_PRIORITY",
            QosPolicyId::Lifespan => "LIFESPAN",
            QosPolicyId::DurabilityService => "DURABILITY_SERVICE",
        }
    }
}

impl fmt::Display for QosPolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `USER_DATA`: opaque data attached to a participant, writer or reader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UserData {
    /// The bytes (default empty).
    pub value: Vec<u8>,
}

/// `TOPIC_DATA`: opaque data attached to a topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TopicData {
    /// The bytes (default empty).
    pub value: Vec<u8>,
}

/// `GROUP_DATA`: opaque data attached to a publisher or subscriber.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GroupData {
    /// The bytes (default empty).
    pub value: Vec<u8>,
}

/// How long data outlives its writer. Ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DurabilityKind {
    /// Data is not kept for late-joining readers (default).
    #[default]
    Volatile,
    /// The writer keeps data for late joiners while it lives.
    TransientLocal,
    /// A service keeps data for late joiners beyond the writer, in memory.
    Transient,
    /// A service keeps data for late joiners on permanent storage.
    Persistent,
}

/// `DURABILITY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Durability {
    /// The kind (default [`DurabilityKind::Volatile`]).
    pub kind: DurabilityKind,
}

/// `DURABILITY_SERVICE`: history and limits of the service behind `TRANSIENT` and
/// `PERSISTENT` durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DurabilityService {
    /// How long the service keeps an instance's data after it is disposed and has no
    /// writer (default zero).
    pub service_cleanup_delay: Duration,
    /// The service's history kind (default [`HistoryKind::KeepLast`]).
    pub history_kind: HistoryKind,
    /// The service's history depth for `KEEP_LAST` (default 1).
    pub history_depth: i32,
    /// The service's sample limit (default [`LENGTH_UNLIMITED`]).
    pub max_samples: i32,
    /// The service's instance limit (default [`LENGTH_UNLIMITED`]).
    pub max_instances: i32,
    /// The service's per-instance sample limit (default [`LENGTH_UNLIMITED`]).
    pub max_samples_per_instance: i32,
}

impl Default for DurabilityService {
    fn default() -> DurabilityService {
        DurabilityService {
            service_cleanup_delay: Duration::ZERO,
            history_kind: HistoryKind::KeepLast,
            history_depth: 1,
            max_samples: LENGTH_UNLIMITED,
            max_instances: LENGTH_UNLIMITED,
            max_samples_per_instance: LENGTH_UNLIMITED,
        }
    }
}

/// The scope over which `PRESENTATION` applies. Ordered from narrowest to widest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PresentationAccessScope {
    /// Per instance (default).
    #[default]
    Instance,
    /// Per topic.
    Topic,
    /// Across the topics of a publisher/subscriber.
    Group,
}

/// `PRESENTATION`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Presentation {
    /// The access scope (default [`PresentationAccessScope::Instance`]).
    pub access_scope: PresentationAccessScope,
    /// Whether coherent change sets are supported (default false).
    pub coherent_access: bool,
    /// Whether the order of changes is preserved (default false).
    pub ordered_access: bool,
}

/// `DEADLINE`: the longest time between updates of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Deadline {
    /// The period (default [`Duration::INFINITE`]).
    pub period: Duration,
}

impl Default for Deadline {
    fn default() -> Deadline {
        Deadline {
            period: Duration::INFINITE,
        }
    }
}

/// `LATENCY_BUDGET`: a hint of acceptable delivery delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LatencyBudget {
    /// The budget (default [`Duration::ZERO`]).
    pub duration: Duration,
}

/// Whether several writers may update one instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum OwnershipKind {
    /// All writers may update an instance (default).
    #[default]
    Shared,
    /// Only the strongest live writer updates an instance.
    Exclusive,
}

/// `OWNERSHIP`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ownership {
    /// The kind (default [`OwnershipKind::Shared`]).
    pub kind: OwnershipKind,
}

/// `OWNERSHIP_STRENGTH`: a writer's strength for exclusive ownership.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OwnershipStrength {
    /// The strength (default 0).
    pub value: i32,
}

/// How liveliness is asserted. Ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LivelinessKind {
    /// The infrastructure asserts liveliness (default).
    #[default]
    Automatic,
    /// The application asserts it per participant.
    ManualByParticipant,
    /// The application asserts it per writer.
    ManualByTopic,
}

/// `LIVELINESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Liveliness {
    /// The kind (default [`LivelinessKind::Automatic`]).
    pub kind: LivelinessKind,
    /// The lease (default [`Duration::INFINITE`]).
    pub lease_duration: Duration,
}

impl Default for Liveliness {
    fn default() -> Liveliness {
        Liveliness {
            kind: LivelinessKind::Automatic,
            lease_duration: Duration::INFINITE,
        }
    }
}

/// `TIME_BASED_FILTER`: the least time between samples a reader wants per instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TimeBasedFilter {
    /// The separation (default [`Duration::ZERO`]).
    pub minimum_separation: Duration,
}

/// `PARTITION`: the logical partitions of a publisher or subscriber.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Partition {
    /// Partition names, possibly with `fnmatch` wildcards (default empty, meaning the
    /// default partition `""`).
    pub name: Vec<String>,
}

/// Whether delivery is reliable. Ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReliabilityKind {
    /// Samples may be lost (default for topics and readers).
    #[default]
    BestEffort,
    /// Samples are delivered reliably (default for writers).
    Reliable,
}

/// `RELIABILITY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reliability {
    /// The kind.
    pub kind: ReliabilityKind,
    /// How long a reliable write may block when resources are exhausted.
    pub max_blocking_time: Duration,
}

impl Reliability {
    /// The default `max_blocking_time`: 100 ms.
    pub const DEFAULT_MAX_BLOCKING_TIME: Duration = Duration::from_millis(100);

    /// `RELIABLE` with a 100 ms `max_blocking_time` (the writer default).
    pub const fn reliable() -> Reliability {
        Reliability {
            kind: ReliabilityKind::Reliable,
            max_blocking_time: Reliability::DEFAULT_MAX_BLOCKING_TIME,
        }
    }

    /// `BEST_EFFORT` with a 100 ms `max_blocking_time` (the topic and reader default).
    pub const fn best_effort() -> Reliability {
        Reliability {
            kind: ReliabilityKind::BestEffort,
            max_blocking_time: Reliability::DEFAULT_MAX_BLOCKING_TIME,
        }
    }
}

impl Default for Reliability {
    /// [`Reliability::best_effort`], the topic and reader default.
    fn default() -> Reliability {
        Reliability::best_effort()
    }
}

/// `TRANSPORT_PRIORITY`: a hint to the transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TransportPriority {
    /// The priority (default 0).
    pub value: i32,
}

/// `LIFESPAN`: how long a written sample stays valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lifespan {
    /// The lifespan (default [`Duration::INFINITE`]).
    pub duration: Duration,
}

impl Default for Lifespan {
    fn default() -> Lifespan {
        Lifespan {
            duration: Duration::INFINITE,
        }
    }
}

/// How a reader orders samples from several writers. Ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DestinationOrderKind {
    /// By the time the reader received them (default).
    #[default]
    ByReceptionTimestamp,
    /// By the writer's source timestamp.
    BySourceTimestamp,
}

/// `DESTINATION_ORDER`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DestinationOrder {
    /// The kind (default [`DestinationOrderKind::ByReceptionTimestamp`]).
    pub kind: DestinationOrderKind,
}

/// Which samples of an instance are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HistoryKind {
    /// The last `depth` samples (default).
    #[default]
    KeepLast,
    /// All samples, within `RESOURCE_LIMITS`.
    KeepAll,
}

/// `HISTORY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct History {
    /// The kind (default [`HistoryKind::KeepLast`]).
    pub kind: HistoryKind,
    /// Samples kept per instance for `KEEP_LAST` (default 1; ignored for `KEEP_ALL`).
    pub depth: i32,
}

impl History {
    /// `KEEP_LAST` with the given depth.
    pub const fn keep_last(depth: i32) -> History {
        History {
            kind: HistoryKind::KeepLast,
            depth,
        }
    }

    /// `KEEP_ALL` (depth left at 1, which it ignores).
    pub const fn keep_all() -> History {
        History {
            kind: HistoryKind::KeepAll,
            depth: 1,
        }
    }
}

impl Default for History {
    fn default() -> History {
        History::keep_last(1)
    }
}

/// `RESOURCE_LIMITS`: bounds on what a writer or reader keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceLimits {
    /// Most samples in all (default [`LENGTH_UNLIMITED`]).
    pub max_samples: i32,
    /// Most instances (default [`LENGTH_UNLIMITED`]).
    pub max_instances: i32,
    /// Most samples per instance (default [`LENGTH_UNLIMITED`]).
    pub max_samples_per_instance: i32,
}

impl Default for ResourceLimits {
    fn default() -> ResourceLimits {
        ResourceLimits {
            max_samples: LENGTH_UNLIMITED,
            max_instances: LENGTH_UNLIMITED,
            max_samples_per_instance: LENGTH_UNLIMITED,
        }
    }
}

/// `ENTITY_FACTORY`: whether created entities are enabled at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntityFactory {
    /// Enable created entities automatically (default true).
    pub autoenable_created_entities: bool,
}

impl Default for EntityFactory {
    fn default() -> EntityFactory {
        EntityFactory {
            autoenable_created_entities: true,
        }
    }
}

/// `WRITER_DATA_LIFECYCLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriterDataLifecycle {
    /// Dispose an instance when it is unregistered (default true).
    pub autodispose_unregistered_instances: bool,
}

impl Default for WriterDataLifecycle {
    fn default() -> WriterDataLifecycle {
        WriterDataLifecycle {
            autodispose_unregistered_instances: true,
        }
    }
}

/// `READER_DATA_LIFECYCLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReaderDataLifecycle {
    /// How long samples of an instance with no writers are kept (default
    /// [`Duration::INFINITE`]).
    pub autopurge_nowriter_samples_delay: Duration,
    /// How long samples of a disposed instance are kept (default [`Duration::INFINITE`]).
    pub autopurge_disposed_samples_delay: Duration,
}

impl Default for ReaderDataLifecycle {
    fn default() -> ReaderDataLifecycle {
        ReaderDataLifecycle {
            autopurge_nowriter_samples_delay: Duration::INFINITE,
            autopurge_disposed_samples_delay: Duration::INFINITE,
        }
    }
}
