//! # spindle-dds-core — DCPS on the Spindle engine
//!
//! An application written against the DDS DCPS API publishes and subscribes typed topics;
//! underneath, each topic lives in a replicated subgroup of the domain's top-level group
//! and every sample goes by atomic multicast (docs/design.md §4–§5, Spindle IV-F).
//!
//! * A [`DomainParticipant`] is one member of the domain's group; it joins through the
//!   contacts of its [`ParticipantConfig`] (a TOML file with environment overrides).
//! * A topic's name hashes onto one of [`ParticipantConfig::topic_subgroups`] subgroups
//!   (16 by default; [`subgroup_of`]); any number of topics share them. A participant declares, through
//!   a view change, which subgroups it reads and writes; the layout every member computes
//!   from the view ([`declare::dds_layout`]) makes it a member (and a sender) of them.
//!   Which topic each reader and writer is on travels on the built-in topic
//!   ([`discovery`]), in one total order at every member: matched statuses and RxO count
//!   the endpoints of one topic. `create_datawriter`/`create_datareader` return once the
//!   view carries the participant's interest and the announcement is delivered; an entity
//!   on a subgroup the participant already reads or writes needs no view change.
//! * The delivery level follows from RELIABILITY and DURABILITY ([`DeliveryLevel`]):
//!   BEST_EFFORT is Unordered; RELIABLE + VOLATILE is Atomic (one total order across all
//!   writers, all-or-none across crashes); RELIABLE + TRANSIENT_LOCAL/TRANSIENT is
//!   VolatileStore (as Atomic, and late readers get the stored history); RELIABLE +
//!   PERSISTENT is LoggedStore (as VolatileStore, and every member logs the samples to
//!   its `data_dir`; [`DataWriter::wait_for_acknowledgments`] waits until they are durable
//!   at every member, [`SampleInfo::durable`] says so per sample, and a participant that
//!   restarts reads its history back from the log: module [`logged`]).
//! * Every participant runs over a driver: on threads (a predicate thread and the wall
//!   clock; what [`DomainParticipantFactory`] makes) or, with the `testkit` feature, in a
//!   simulated domain (`sim::SimDomain`: every participant on the deterministic sim
//!   fabric, in virtual time, seeded) — the same delivery path and entities either way.
//! * Readers keep a history cache per instance ([`DataReader::read`], [`DataReader::take`])
//!   and every [`SampleInfo`] carries `(view_id, order_index)`: the same at every reader.
//!
//! ## A domain of one, over TCP on loopback
//!
//! ```
//! use spindle_dds_core::{
//!     DomainParticipantFactory, ParticipantConfig, StateMask, Transport,
//! };
//! use spindle_qos::{DataReaderQos, DataWriterQos, DomainParticipantQos, DurabilityKind,
//!     Reliability, TopicQos};
//! use spindle_topics::KeyedString;
//!
//! let mut cfg = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
//! cfg.bootstrap = vec![1];
//! let factory = DomainParticipantFactory::instance();
//! let p = factory.create_participant(0, DomainParticipantQos::default(), &cfg)?;
//! let topic = p.create_topic::<KeyedString>("greetings", TopicQos::default())?;
//! let publisher = p.create_publisher(Default::default())?;
//! let subscriber = p.create_subscriber(Default::default())?;
//! // RELIABLE + VOLATILE: the Atomic level.
//! let reader = subscriber.create_datareader(
//!     &topic,
//!     DataReaderQos::default().with_reliability(Reliability::reliable()),
//! )?;
//! let writer = publisher.create_datawriter(&topic, DataWriterQos::default())?;
//! writer.write(&KeyedString { key: "a".into(), value: "hello".into() })?;
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     got = reader.take(10, StateMask::ANY)?;
//! }
//! assert_eq!(got[0].data.as_ref().map(|d| d.value.as_str()), Some("hello"));
//! assert_eq!(got[0].info.writer_seq, 1);
//! publisher.delete_datawriter(writer)?;
//! subscriber.delete_datareader(reader)?;
//! p.delete()?;
//! # Ok::<(), spindle_dds_core::Error>(())
//! ```
//!
//! ## Limits, today
//!
//! * `write` takes the writer's write path (one lock: its cached sender and its reused
//!   staging buffer), has the ring slot lent for the call (`Sender::try_send_with`),
//!   encodes into the staging buffer and stores it into the slot with one bulk copy (`Region::write_bytes_guarded`: the slot
//!   is the writer's until its commit publishes it). Encoding straight into the slot,
//!   as a large sample is encoded into its send buffer (below), was tried and not kept:
//!   `Region::fill_guarded`'s one-fill-per-region lock cost more CPU per 1 KiB sample
//!   than the copy it saved, and a prototype fill with no lock saved nothing either
//!   (docs/benchmarks.md, "Small samples encoded in place in their slot" and "… without
//!   a lock"). `loan_sample` reserves the slot first and builds the value beside
//!   it. A sample above the topic's slot (bounded types size it; set
//!   `slot_payload_bytes` for unbounded ones) goes by RDMC, in the same order, when the
//!   participant's `sample_bytes_max` allows it: its encoding is measured against the
//!   slot, then encoded at its exact size **in place** in the writer's registered RDMC
//!   send buffer (`Sender::try_send_filled`, no staging buffer and no copy; the slot it
//!   had loaned becomes a null);
//!   above `sample_bytes_max`, or above the slot without it, `OutOfResources` naming the
//!   setting. On delivery it is not copied: the delivered batch reads it in place in the
//!   RDMC receive buffer, which the batch pins (a reader's cache borrows it there, and
//!   `take` decodes it: one copy), until the engine needs the buffer for a later sample;
//!   then the caches copy what they keep ([`lent`]). `loan_sample` works for large samples with the
//!   same API: the application fills the loaned value, and [`LoanedSample::write`] sends
//!   it by RDMC as `write` does (test: `tests/sim_large.rs`, 4 MiB samples written
//!   through loans and read through `take_loaned`): the loaned value is encoded into the
//!   send buffer in place as `write`'s is. The send buffer is lent to the encoder as a
//!   `&mut [u8]` only while it is the writer's alone by the protocol (no member reads it
//!   before the announcement, and it is refilled only once every member consumed its
//!   previous message and no delivery pins it), one fill at a time
//!   (`Region::fill_guarded`); a peer that breaks the protocol and writes it anyway races
//!   with the encoder exactly as it would with a copy. A value is not laid over the
//!   buffer itself (a `&mut T` the application fills field by field): the encoding is
//!   CDR, not the value's memory layout.
//! * Reads: a reader's cache borrows the delivered batch a sample came in instead of
//!   copying the sample ([`lent`]): the batch goes back to the engine once its last
//!   sample is taken, dropped or evicted. What held samples pin is bounded per
//!   participant ([`lent::LENT_BYTES_MAX`]); past it, samples are copied into the cache
//!   as before. [`DataReader::take_loaned`] and [`DataReader::read_loaned`] lend those
//!   bytes without decoding them ([`LoanedSamples`], decoded on demand); a held loan pins
//!   its samples' batches, never a ring slot, so it cannot slow the writers of small
//!   samples; a held loan of a batch with a large sample pins that sample's RDMC buffer,
//!   which holds its writer at its RDMC window until the loan is dropped. A `read`
//!   shares the bytes with the cache instead of copying them.
//!   [`DataReader::take_into`] and [`DataReader::read_into`] decode into the values a
//!   [`SampleBuffer`] kept from earlier accesses, so a reader that takes with one buffer
//!   allocates nothing per sample.
//! * Topics that share a subgroup are delivered in one total order together, and ride at
//!   the highest level any writer of the subgroup offers (a reader still takes only its
//!   topic's samples offered at the level it requests). A participant with a reader on
//!   one topic of a subgroup receives the subgroup's other topics too, and drops them.
//!   [`ParticipantConfig::topic_subgroups`] must be the same in every participant of a
//!   domain (one that differs from the domain's first member is refused when it joins).
//! * A member whose state transfer is cut by a further view change keeps going with the
//!   store it had; if it then ships that store to a later reader, the reader may miss
//!   history (never order or all-or-none of new samples).
//! * The DDS filter language ([`filter`]: comparisons, `BETWEEN`, `LIKE`, `AND`/`OR`/`NOT`,
//!   nested member paths, `%n` parameters; errors name the byte) serves
//!   [`ContentFilteredTopic`] ([`DomainParticipant::create_contentfilteredtopic`]) and
//!   [`QueryCondition`] ([`DataReader::create_querycondition`]): member names resolved
//!   against the type's IDL ([`content_filter`]), samples decoded by it and filtered at
//!   the reader (each filtered sample costs a decode into member values); a type without
//!   IDL (a raw CDR topic) is `Unsupported`.
//! * Enforced at run time: DEADLINE on both sides (REQUESTED_ and OFFERED_DEADLINE_MISSED,
//!   by a timer thread per participant, or every round in simulation), TIME_BASED_FILTER,
//!   LIFESPAN (each sample carries its writer's lifespan; readers drop it once
//!   `source_timestamp + lifespan` passed) and
//!   OWNERSHIP EXCLUSIVE (per instance, the strongest alive writer; the total order makes
//!   every reader pick the same owner at the same sample), and PARTITION (a reader
//!   matches and takes samples only of writers whose publisher shares a partition with its
//!   subscriber, names and `fnmatch` wildcards; each sample carries its writer's
//!   partition tag and each announcement its names, [`discovery`]; a publisher's or
//!   subscriber's `set_qos` moves its writers or readers, each sample judged by the
//!   names it was written under), DESTINATION_ORDER BY_SOURCE_TIMESTAMP (per
//!   instance, a sample stamped before the newest one kept is dropped) and
//!   READER_DATA_LIFECYCLE (a disposed instance, or one without writers, is purged with
//!   its samples once its autopurge delay passed; observed at the next read or take).
//!   LIVELINESS: AUTOMATIC is membership in the view (the failure detector is the
//!   lease); MANUAL_BY_TOPIC and MANUAL_BY_PARTICIPANT with a finite lease are renewed by
//!   writes and `assert_liveliness` (a header-only message in the topic's order), watched
//!   by every matched reader (LIVELINESS_CHANGED, instances NOT_ALIVE_NO_WRITERS when a
//!   lease lapses, with a notice where no unread sample carries the change, as when a
//!   writer leaves the view) and by the writer itself (LIVELINESS_LOST), on the participant's
//!   timer. PRESENTATION `coherent_access`:
//!   `begin_coherent_changes`/`end_coherent_changes` on the publisher; readers hold a
//!   set back until its end and take it whole, and a set whose writer fails first is
//!   dropped by every reader alike; stores keep finished sets only. GROUP access scope
//!   spans the publisher's (subscriber's) topics that share one subgroup — an entity
//!   whose topic rides another is refused — with one end for the whole set
//!   (`SampleKind::GroupCoherentEnd`) and one order across a subscriber's readers
//!   (`Subscriber::begin_access`, `get_datareaders`).
#![deny(missing_docs)]

// The layers, bottom to top; a module uses only modules of lower layers (ARCHITECTURE.md;
// scripts/check-layering.py checks that no two modules use each other):
// 1. data: clock, sample, status, store, lent, cache, condition, metrics, config, declare,
//    discovery, filter, content_filter, error, logged
// 2. entity state: common, group_scope; reader_core, writer_core, registered; shared (+ the Driver trait)
// 3. the delivery path: delivery (DdsApp and handle_timeout: engine output enters here)
// 4. drivers and handles: inner; metrics_http, transport; threads; topic; reader, writer;
//    publisher, subscriber; participant; counters (DomainParticipant::counters); history
//    (reads over a PERSISTENT reader's log); query; sim (feature testkit); lent_tests (tests
//    of `lent` in simulation)
pub mod cache;
pub mod clock;
mod coherent_sets;
mod common;
pub mod condition;
pub mod config;
mod contained;
pub mod content_filter;
mod counters;
pub mod declare;
mod delivery;
pub mod discovery;
mod error;
pub mod filter;
mod group_scope;
mod held;
mod history;
mod inner;
pub mod lent;
#[cfg(all(test, feature = "testkit"))]
mod lent_tests;
pub mod logged;
pub mod metrics;
mod metrics_http;
mod participant;
mod publisher;
mod query;
mod reader;
mod reader_core;
pub mod registered;
pub mod sample;
mod shared;
#[cfg(feature = "testkit")]
pub mod sim;
pub mod status;
pub mod store;
mod subscriber;
mod threads;
mod topic;
mod transport;
mod writer;
mod writer_core;

pub use condition::{Condition, GuardCondition, WaitSet};
pub use config::{AtomicOrdering, Contact, ParticipantConfig, Transport, SPIN_BEFORE_PARK_US_MAX};
pub use declare::{subgroup_of, topic_id};
pub use delivery::DdsApp;
pub use error::{Error, Result};
pub use inner::ENDPOINTS_MAX;
pub use metrics::{MetricsConfig, ParticipantCounters};
pub use participant::{DomainParticipant, DomainParticipantFactory, REJOIN_RETRY_MS};
pub use publisher::Publisher;
pub use query::{ConditionParts, QueryCondition, ReadConditionLike};
pub use reader::{
    DataReader, DataReaderListener, LoanedRead, LoanedSamples, ReadCondition, ReaderHandle,
    StatusCondition,
};
pub use sample::{
    InstanceHandle, InstanceState, Sample, SampleBuffer, SampleInfo, SampleState, StateMask,
    ViewState, WriterHandle, ORDER_INDEX_NONE,
};
pub use shared::IGNORED_MAX;
pub use spindle_qos::DeliveryLevel;
pub use subscriber::Subscriber;
pub use topic::{ContentFilteredTopic, Topic, TopicDescription};
pub use writer::{DataWriter, LoanedSample};
