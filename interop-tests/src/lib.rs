//! # spindle-interop-tests — tests across implementations
//!
//! This crate will hold the tests and side-by-side benchmarks that put Spindle DDS next to
//! other DDS implementations: RustDDS peers, the RTPS bridge, and `ddsperf` comparisons.
#![deny(missing_docs)]
