//! # spindle-idl — the IDL compiler
//!
//! This crate will hold the OMG IDL 4.2 parser (data-definition subset, preprocessor) and
//! the Rust code generator that turns IDL types into [`TopicType`] implementations, usable
//! from `build.rs`, as the `spindle-idlc` binary, and as `include!`-able output (issue 6).
//!
//! [`TopicType`]: https://docs.rs/spindle-topics
#![deny(missing_docs)]
