//! # spindle-group — the Derecho engine
//!
//! The atomic-multicast engine of Spindle DDS (docs/design.md §3). Members of a subgroup multicast
//! small messages to each other through the SST and SMC over one-sided writes, and
//! deliver them in one total order (atomic mode) or on receipt (unordered mode), with the
//! Spindle techniques: opportunistic batching of sends, receives, deliveries and
//! acknowledgements; null-sends; in-place message construction; writes posted without
//! holding locks; a batched delivery upcall.
//!
//! * [`Engine`] is the sans-IO core of one node: no thread, socket or clock inside.
//! * [`runtime`] drives an engine over a real fabric with one predicate thread per node;
//!   [`sched`] says where that thread runs and at what priority.
//! * [`persist`] is the logged store's second stage: the runtime appends a logged
//!   subgroup's deliveries to a `spindle-log` log, syncs them in groups and publishes the
//!   durable prefix as the member's `persisted_num` SST column.
//! * [`restart`] is the restart after total failure over the network: reports to a
//!   restart leader, its plan from a majority, the logs brought to the restored state,
//!   then the group bootstraps in the view after the last logged one.
//! * [`layout`] holds views, subgroup layouts and the SST byte geometry.
//! * [`rdmc`] moves large messages by block-pipelined multicast (RDMC): the four block
//!   schedules ([`rdmc::schedule`]) and the sans-IO transfer core [`rdmc::RdmcGroup`]
//!   (`rdmc_sim`, feature `testkit`: the same on the sim fabric, seeded, with crashes).
//!   A subgroup with [`SubgroupSpec::rdmc`] sends a message above its slot by its
//!   sender's RDMC group, in the same total order as the small ones (Derecho §3.6; the
//!   engine's side is the private module `large`).
//! * [`dare`] is the DARE-style leader-based ordering core (a leader replicates its log
//!   into the followers' logs with one-sided writes, commits on a majority, elections
//!   through vote arrays, a deposed leader revoked by re-keying the log region);
//!   `dare_sim` (feature `testkit`) runs it seeded on the sim fabric with leader crashes,
//!   pauses, partitions and delays.
//! * `testkit` (cargo feature `testkit`, off by default) is the simulation harness every
//!   simulation of the project runs on: nodes over one deterministic sim fabric, stepped
//!   round by round from one thread.
//! * `swarm` (feature `testkit`) is the seeded simulation of view changes under faults
//!   that the tests and the `swarm` example run; `swarm::checker` holds every invariant
//!   it checks.
//! * Derecho's `bandwidth_test` / `latency_test`, ported, live in the `spindle-bench` crate
//!   (module `spindle_bench::workload`), out of the engine.
//!
//! ## Cargo features
//!
//! * `testkit`: builds the `testkit` and `swarm` modules (and pulls in `rand` /
//!   `rand_chacha` for them).
//!
//! ## Three nodes, one subgroup, driven by hand
//!
//! Here the "fabric" is a loop that copies each push into the peer's region — exactly
//! what a one-sided write does — so the whole protocol runs in one thread.
//!
//! ```
//! use std::collections::BTreeMap;
//! use spindle_group::{DeliveryMode, Engine, EngineConfig, Layout, SubgroupSpec, View};
//! use spindle_transport_rdma::Region;
//!
//! let view = View::new(1, vec![1, 2, 3]);
//! let layout = Layout {
//!     subgroups: vec![SubgroupSpec {
//!         id: 0,
//!         members: vec![1, 2, 3],
//!         senders: vec![1, 2, 3],
//!         mode: DeliveryMode::Atomic,
//!         window_slots: 16,
//!         slot_payload_bytes: 64,
//!         rdmc: None,
//!         delivery_prefix: None,
//!     }],
//! };
//! let mut regions = BTreeMap::new();
//! let mut engines = Vec::new();
//! for node in [1, 2, 3] {
//!     let engine = Engine::new(node, view.clone(), layout.clone(), EngineConfig::default(),
//!         |id, len| {
//!             let r = Region::new_heap(id, len)?;
//!             regions.insert(node, r.clone());
//!             Ok(r)
//!         })?;
//!     engines.push(engine);
//! }
//! engines[0].sender(0)?.try_send(b"hello")?;
//! engines[2].sender(0)?.try_send(b"world")?;
//!
//! let mut delivered: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
//! for _ in 0..20 {
//!     for e in &mut engines {
//!         e.step();
//!         e.drain_pushes(|push, bytes| push.apply(&regions[&push.peer], bytes));
//!         while let Some(batch) = e.poll_delivery() {
//!             for m in batch.iter() {
//!                 delivered.entry(e.node()).or_default().push(m.payload.to_vec());
//!             }
//!         }
//!     }
//! }
//! // Node 2 sent nothing: its null let "world" (sender rank 2) follow "hello" at once.
//! for node in [1, 2, 3] {
//!     assert_eq!(delivered[&node], vec![b"hello".to_vec(), b"world".to_vec()]);
//! }
//! # Ok::<(), spindle_group::Error>(())
//! ```
#![deny(missing_docs)]

pub mod counters;
pub mod dare;
#[cfg(feature = "testkit")]
pub mod dare_sim;
mod engine;
mod error;
pub mod group;
mod large;
pub mod layout;
pub mod membership;
pub mod persist;
mod push;
pub mod rdmc;
#[cfg(feature = "testkit")]
pub mod rdmc_sim;
pub mod restart;
pub mod runtime;
pub mod sched;
mod smc;
#[cfg(feature = "testkit")]
pub mod swarm;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use counters::NodeCounters;
pub use engine::{
    dare_imm, is_dare_imm, DeliveryBatch, Engine, EngineConfig, EngineEvent, EngineStats, Message,
    PostBytes, Push, PushBytes, Techniques, DARE_ENGINE_IMM_TAG, DARE_OUT_QUEUE_MAX,
    DELIVERY_BATCH_MAX, DELIVERY_QUEUE_MAX, DELIVERY_STEP_BYTES_MAX, EVENT_QUEUE_MAX,
    PUSH_BYTES_MAX, PUSH_GAP_BYTES_MIN, PUSH_QUEUE_MAX, RECEIVE_BATCH_MAX, SEND_BATCH_MAX,
    SPARE_BATCHES_BYTES_MAX, SPARE_BATCHES_MAX, SPARE_BATCH_BYTES_MAX,
};
pub use error::{Error, Result};
pub use group::{
    plain_group_label, Exclusion, Group, GroupAction, GroupConfig, GroupOutput, GroupStats,
    LayoutFn, LocalFabric, ViewInstalled,
};
pub use layout::{
    DareSettings, DeliveryMode, DeliveryPrefix, Layout, SubgroupId, SubgroupSpec, View,
    DECLARED_BYTES_MAX,
};
pub use smc::{Loan, Sender, SlotFill, ROOM_SPIN_TRIES, ROOM_WAIT_SLICE};
