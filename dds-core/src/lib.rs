//! # spindle-dds-core — DCPS on the engine
//!
//! This crate will hold the DCPS entities (participants, topics, publishers, subscribers,
//! typed data writers and readers), history caches, listeners, wait-sets and the mapping of
//! topics onto the engine's subgroups (DESIGN §5). It is built by issue 7.
#![deny(missing_docs)]
