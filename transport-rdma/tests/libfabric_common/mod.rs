//! What the libfabric test binaries share: the providers they run on, the give-up bound,
//! waiting for an endpoint's event, and linking two endpoints.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use spindle_transport_rdma::libfabric::LibfabricEndpoint;
use spindle_transport_rdma::{Endpoint, Event, NodeId};

/// Give-up bound for anything awaited (liveness, never asserted as a timing).
pub const DEADLINE: Duration = Duration::from_secs(60);
/// The providers every libfabric test runs on (both work on any Linux machine).
pub const PROVIDERS: [&str; 2] = ["tcp;ofi_rxm", "shm"];

/// The next event of `ep` that `pred` accepts (`Some(true)`); `Some(false)` skips it,
/// `None` fails the test with that event.
pub fn next_event_checked(
    ep: &LibfabricEndpoint,
    what: &str,
    pred: impl Fn(&Event) -> Option<bool>,
) -> Event {
    let start = Instant::now();
    loop {
        while let Some(event) = ep.poll_event() {
            match pred(&event) {
                Some(true) => return event,
                Some(false) => {}
                None => panic!("node {} waiting for {what} saw {event:?}", ep.node()),
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "node {} never saw {what}",
            ep.node()
        );
        ep.wait(Duration::from_millis(50));
    }
}

/// The next event of `ep` that `pred` accepts, skipping the others.
pub fn next_event(ep: &LibfabricEndpoint, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    next_event_checked(ep, what, |e| Some(pred(e)))
}

/// `a` dials `b`; returns once both saw the link come up.
pub fn connected(a: &LibfabricEndpoint, b: &LibfabricEndpoint) {
    a.connect(b.node(), &b.address()).unwrap();
    let (peer_a, peer_b): (NodeId, NodeId) = (a.node(), b.node());
    next_event(a, "PeerConnected", |e| {
        *e == Event::PeerConnected { peer: peer_b }
    });
    next_event(b, "PeerConnected", |e| {
        *e == Event::PeerConnected { peer: peer_a }
    });
}
