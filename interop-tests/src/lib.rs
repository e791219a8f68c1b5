//! # spindle-interop-tests — tests across implementations
//!
//! Spindle DDS next to other DDS implementations, each side a separate process speaking
//! only its own stack:
//!
//! * `interop-rustdds-peer` — a plain RustDDS application (the `rustdds` API only);
//! * `interop-spindle-peer` — a plain Spindle application (`spindle-dds-core` only);
//! * `spindle-rtps-bridge` (crate `spindle-rtps-bridge`) between them.
//!
//! Every peer publishes or checks the same workload ([`workload`]): writer `w` writes
//! samples `0..count` of the keyed topic [`TOPIC`] (type [`TYPE_NAME`], the layout of
//! `spindle_topics::KeyedString`: `@key string key; string value;`), the key of sample `s`
//! is [`workload::key_of`]`(s)` and its value [`workload::value_of`]`(w, s, bytes)`, then
//! it disposes instance [`workload::DISPOSED_KEY`]. A subscriber feeds what it takes to a
//! [`workload::Checker`]: every sample, in order per writer, with the same key and payload
//! bytes, and the dispose as a dispose. This library holds the workload, the checker and
//! the process plumbing the tests share; it links neither DDS stack.
#![deny(missing_docs)]

pub mod perf;
pub mod procs;
pub mod workload;

/// The topic every interop peer uses.
pub const TOPIC: &str = "InteropReadings";

/// Its registered type name (the layout of `spindle_topics::KeyedString`).
pub const TYPE_NAME: &str = "DDS::KeyedString";
