//! # spindle-topics — typed topics
//!
//! This crate will hold the `TopicType` trait every DDS data type implements (type name,
//! CDR encoding, keys and key hashes), the CDR helpers, built-in types and the avionics
//! data model generated from `topics/idl/` (issue 6).
#![deny(missing_docs)]
