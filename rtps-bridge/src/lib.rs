//! # spindle-rtps-bridge — Spindle DDS ⇄ standard DDS over RTPS
//!
//! One process that is at the same time a Spindle [`DomainParticipant`] and an RTPS
//! participant (RustDDS 0.15), forwarding the samples of the topics its TOML file lists
//! both ways as serialized CDR, never decoded (Spindle's XCDR1 is byte-identical to
//! Cyclone's and RustDDS's plain CDR). What is and is not promised at the RTPS edge is in
//! docs/design.md ("The RTPS edge").
//!
//! [`DomainParticipant`]: spindle_dds_core::DomainParticipant
#![deny(missing_docs)]

pub mod bridge;
pub mod cli;
pub mod config;
mod error;
pub mod keys;
pub mod rtps;

pub use bridge::{Bridge, Stats, StatsSnapshot};
pub use config::{BridgeConfig, Direction, TopicConfig};
pub use error::{Error, Result};
