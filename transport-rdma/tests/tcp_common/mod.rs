//! Helpers shared by the tcp tests: endpoints on loopback, bounded waits, and a raw peer
//! that speaks the wire format by hand (to send garbage, stall, or go silent).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_transport_rdma::tcp::TcpEndpoint;
use spindle_transport_rdma::{Endpoint, Event, FabricConfig, NodeId};

/// Give-up bound for anything that should happen (never the thing asserted).
pub const GIVE_UP: Duration = Duration::from_secs(60);

/// Settings for tests: a long probe time-out, so a busy shared machine never fails a
/// link by accident (the probe time-out has its own test).
pub fn test_config() -> FabricConfig {
    FabricConfig {
        suspect_floor_ms: 20_000,
        suspect_ceiling_ms: 20_000,
        ..FabricConfig::default()
    }
}

pub fn open(node: NodeId) -> Arc<TcpEndpoint> {
    open_with(node, test_config())
}

pub fn open_with(node: NodeId, cfg: FabricConfig) -> Arc<TcpEndpoint> {
    TcpEndpoint::open(node, "127.0.0.1:0", cfg).expect("open endpoint")
}

/// Waits until `cond` holds, parking on `ep`'s doorbell; panics after [`GIVE_UP`].
pub fn wait_until(ep: &dyn Endpoint, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + GIVE_UP;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        ep.wait(Duration::from_millis(20));
    }
}

/// The next event on `ep`; panics after [`GIVE_UP`].
pub fn next_event(ep: &dyn Endpoint) -> Event {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        if let Some(e) = ep.poll_event() {
            return e;
        }
        assert!(Instant::now() < deadline, "gave up waiting for an event");
        ep.wait(Duration::from_millis(20));
    }
}

/// The next event matching `pred`, skipping others; panics after [`GIVE_UP`].
pub fn event_where(ep: &dyn Endpoint, what: &str, mut pred: impl FnMut(&Event) -> bool) -> Event {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        while let Some(e) = ep.poll_event() {
            if pred(&e) {
                return e;
            }
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        ep.wait(Duration::from_millis(20));
    }
}

/// Links `a` and `b` (a dials b) and waits for both PeerConnected events.
pub fn link(a: &Arc<TcpEndpoint>, b: &Arc<TcpEndpoint>) {
    a.connect(b.node(), &b.address()).expect("connect");
    let (na, nb) = (a.node(), b.node());
    event_where(
        &**a,
        "PeerConnected at a",
        |e| matches!(e, Event::PeerConnected { peer } if *peer == nb),
    );
    event_where(
        &**b,
        "PeerConnected at b",
        |e| matches!(e, Event::PeerConnected { peer } if *peer == na),
    );
}

// ----- hand-made wire frames (the format documented in src/link.rs) --------------------

pub fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.push(kind);
    out.extend_from_slice(body);
    out
}

pub fn hello(node: NodeId, target: NodeId, regions: &[(u32, u64)]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x5350_444Cu32.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&node.to_le_bytes());
    body.extend_from_slice(&target.to_le_bytes());
    body.extend_from_slice(&0xfeed_u64.to_le_bytes());
    body.extend_from_slice(&(regions.len() as u32).to_le_bytes());
    for (id, len) in regions {
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
    }
    frame(1, &body)
}

pub fn write_frame(region: u32, offset: u64, bytes: &[u8]) -> Vec<u8> {
    let mut body = region.to_le_bytes().to_vec();
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(bytes);
    frame(4, &body)
}

pub fn probe_frame() -> Vec<u8> {
    frame(7, &[])
}

/// A raw peer that did the handshake with `ep` as node `node`; `ep` has reported it
/// connected (the event is consumed).
pub fn raw_peer(ep: &Arc<TcpEndpoint>, node: NodeId, regions: &[(u32, u64)]) -> TcpStream {
    let mut s = TcpStream::connect(ep.address()).expect("raw connect");
    s.set_read_timeout(Some(GIVE_UP)).unwrap();
    s.write_all(&hello(node, ep.node(), regions)).unwrap();
    // Read the reply Hello: header, then body.
    let mut header = [0u8; 5];
    s.read_exact(&mut header).unwrap();
    assert_eq!(header[4], 1, "the reply is a Hello");
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    event_where(
        &**ep,
        "raw peer connected",
        |e| matches!(e, Event::PeerConnected { peer } if *peer == node),
    );
    s
}
