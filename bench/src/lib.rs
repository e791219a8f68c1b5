//! # spindle-bench — benchmark and test harness of the Spindle DDS engine
//!
//! Code that drives the engine (`spindle-group`) from the outside to measure or test it,
//! kept out of the engine library so that the engine pulls in no command-line or JSON
//! crate:
//!
//! * [`workload`] is Derecho's `bandwidth_test` / `latency_test`, ported; the examples
//!   `bandwidth_test` and `latency_test` and the binary `spindle-group-perf` run it.
//! * The binary `spindle-group-vs` runs members that multicast, get SIGKILLed and rejoin
//!   across real processes (virtual synchrony tests, view-change benchmark).
//!
//! ```text
//! cargo run --release -p spindle-bench --example bandwidth_test -- --backend sim --nodes 2 \
//!     --senders all --size 1024 --messages 2000
//! ```
#![deny(missing_docs)]

pub mod workload;
