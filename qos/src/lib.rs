//! # spindle-qos — DDS QoS policies and delivery levels
//!
//! This crate will hold every standard DCPS QoS policy with the specification's defaults,
//! consistency checks, requested/offered matching, and the mapping from a topic's QoS to
//! one of the four delivery levels of DESIGN §4 (Unordered, Atomic, VolatileStore,
//! LoggedStore). It is built by issue 7.
#![deny(missing_docs)]
