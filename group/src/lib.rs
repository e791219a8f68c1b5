//! # spindle-group — the Derecho engine
//!
//! This crate will hold the atomic-multicast engine of Spindle DDS (DESIGN §3): views and
//! membership, the shared state table (SST), small-message multicast (SMC), RDMC for large
//! messages, ordered delivery with the Spindle techniques (opportunistic batching,
//! null-sends, in-place sends), epoch termination with ragged trim, persistence and restart.
//!
//! The engine is a sans-IO state machine per node, driven by a thin runtime over a
//! `spindle-transport-rdma` fabric. It is built by issues 4 and 5; for now the crate only
//! marks its place in the workspace.
#![deny(missing_docs)]
