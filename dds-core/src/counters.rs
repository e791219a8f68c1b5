//! `DomainParticipant::counters` and `metrics_address` ([`crate::metrics`]).

use std::net::SocketAddr;

use crate::metrics::ParticipantCounters;
use crate::metrics_http::counters_of;
use crate::participant::DomainParticipant;

impl DomainParticipant {
    /// The participant's counters now ([`crate::metrics`]): what its group member
    /// delivered, saw stable, sent as nulls, the views it installed and the state it
    /// transferred, and what its writers wrote and its readers' subgroups received.
    pub fn counters(&self) -> ParticipantCounters {
        counters_of(&self.inner)
    }

    /// Where the participant's Prometheus endpoint listens (`[metrics] listen`), if it
    /// has one: the bound address, so a port 0 shows the port picked.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        *crate::common::lock(&self.inner.metrics_address)
    }
}
