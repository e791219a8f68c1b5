//! Authenticated and encrypted tcp links: peers without the domain secret (or with
//! another one) are refused before any region is announced, a second link claiming a
//! live peer's id never displaces it (nor the dial to a peer that answered it), and
//! encrypted links carry no plaintext frame.

mod tcp_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use spindle_transport_rdma::tcp::TcpEndpoint;
use spindle_transport_rdma::trust::{
    read_framed, InitiatorHandshake, Opener, Opening, HANDSHAKE_MESSAGE_BYTES_MAX,
};
use spindle_transport_rdma::{DomainSecret, Endpoint, Event, FabricConfig, FailureReason};
use tcp_common::*;

const SECRET: &[u8] = b"the domain's own secret, 32 byte";

fn secret(s: &[u8]) -> DomainSecret {
    DomainSecret::new(s).unwrap()
}

fn cfg_with(secret: Option<DomainSecret>, encrypt: bool) -> FabricConfig {
    FabricConfig {
        domain_secret: secret,
        encrypt_links: encrypt,
        // A second link claiming a live id waits half of this for the live one to fail.
        connect_timeout_ms: 2_000,
        ..test_config()
    }
}

fn member(node: u32) -> Arc<TcpEndpoint> {
    open_with(node, cfg_with(Some(secret(SECRET)), true))
}

/// The `PeerFailed` reason `ep` reports for `peer`.
fn failure_of(ep: &Arc<TcpEndpoint>, peer: u32) -> FailureReason {
    match event_where(
        &**ep,
        "the refused dial's failure",
        |e| matches!(e, Event::PeerFailed { peer: p, .. } if *p == peer),
    ) {
        Event::PeerFailed { reason, .. } => reason,
        _ => unreachable!(),
    }
}

#[test]
fn peers_without_the_secret_are_refused_before_any_region_is_announced() {
    let b = member(202);
    let rb = b.register_region(1, 8).unwrap();
    let outsiders = [
        (203, Some(secret(b"a guess that is not the secret"))),
        (204, None),
    ];
    for (i, (node, their_secret)) in outsiders.into_iter().enumerate() {
        let a = open_with(node, cfg_with(their_secret, true));
        a.connect(b.node(), &b.address()).unwrap();
        let reason = failure_of(&a, b.node());
        assert!(
            matches!(reason, FailureReason::ConnectionLost(_)),
            "the outsider's dial fails: {reason}"
        );
        assert_eq!(a.remote_region(b.node(), 1), None, "no region reached it");
        assert!(a.peers().is_empty());
        wait_until(&*b, "the refusal counted", || {
            b.refused_links() == i as u64 + 1
        });
    }
    // A hand-made plaintext Hello gets no byte back: nothing about b's regions leaks.
    let mut s = TcpStream::connect(b.address()).unwrap();
    s.set_read_timeout(Some(GIVE_UP)).unwrap();
    s.write_all(&hello(205, b.node(), &[])).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(
        reply.is_empty(),
        "replied {reply:?} to an unauthenticated hello"
    );
    // The member never saw any of them, and still links with a peer that has the secret.
    assert_eq!(b.poll_event(), None, "no event for a refused peer");
    assert!(b.peers().is_empty());
    let a = member(201);
    link(&a, &b);
    a.write(b.node(), 1, 0, &7u64.to_le_bytes()).unwrap();
    wait_until(&*b, "a write from the member", || rb.load_u64(0) == 7);
    assert_eq!(b.refused_links(), 3);
}

#[test]
fn members_with_different_secrets_never_link() {
    let b = open_with(
        212,
        cfg_with(Some(secret(b"an impostor's own secret")), true),
    );
    b.register_region(1, 8).unwrap();
    let a = member(211);
    a.connect(b.node(), &b.address()).unwrap();
    // b refuses a's message 1 (it cannot open it), so a never learns b's regions.
    let reason = failure_of(&a, b.node());
    assert!(!matches!(reason, FailureReason::Closed), "{reason}");
    assert_eq!(a.remote_region(b.node(), 1), None);
    wait_until(&*b, "the refusal counted", || b.refused_links() == 1);
    assert_eq!(b.poll_event(), None);
}

#[test]
fn a_second_link_claiming_a_live_id_is_refused_and_the_live_one_stays() {
    let (a, b) = (member(221), member(222));
    let rb = b.register_region(1, 8).unwrap();
    link(&a, &b);
    // Another process (here an endpoint) with the secret claims node 221.
    let impostor = member(221);
    impostor.connect(b.node(), &b.address()).unwrap();
    let reason = failure_of(&impostor, b.node());
    // Told why (no link back is coming), not left to time out waiting for one.
    assert!(
        matches!(&reason, FailureReason::ConnectionLost(why)
            if why.contains("linked to a live node 221 of another incarnation")),
        "the second link is refused, saying why: {reason}"
    );
    assert_eq!(b.refused_links(), 1);
    // The live link was not displaced: no failure at either end, and data still lands.
    assert_eq!(b.peers(), vec![221]);
    assert_eq!(a.peers(), vec![222]);
    a.write(b.node(), 1, 0, &9u64.to_le_bytes()).unwrap();
    wait_until(&*b, "a write on the live link", || rb.load_u64(0) == 9);
    assert_eq!(
        b.poll_event(),
        None,
        "b saw no failure and no second connect"
    );
    assert_eq!(a.poll_event(), None);
}

/// A relay on loopback: accepts one connection and, once the returned sender says so,
/// forwards it to `to` both ways. Holds a dial in flight for as long as a test needs.
fn held_relay(to: String) -> (String, mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (release, released) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (inbound, _) = listener.accept().unwrap();
        if released.recv().is_err() {
            return;
        }
        let outbound = TcpStream::connect(&to).unwrap();
        let (mut from, mut into) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut into);
            let _ = into.shutdown(Shutdown::Write);
        });
        let (mut back, mut out) = (outbound, inbound);
        let _ = std::io::copy(&mut back, &mut out);
        let _ = out.shutdown(Shutdown::Write);
    });
    (addr, release)
}

/// The events `ep` reports up to and including `PeerConnected { peer }`.
fn events_until_connected(ep: &Arc<TcpEndpoint>, peer: u32) -> Vec<Event> {
    let mut seen = Vec::new();
    event_where(&**ep, "the real peer connected", |e| {
        seen.push(e.clone());
        matches!(e, Event::PeerConnected { peer: p } if *p == peer)
    });
    seen
}

#[test]
fn a_hello_claiming_a_peer_being_dialed_is_refused_when_that_peer_answered_as_another() {
    // An open domain (no secret): ids are claims, and the dial to the address we were
    // given is what tells the real peer. Node 251 dials 253 and 253 dials 251 at once;
    // 251's dial is held in a relay, so 253 hears from 251 only by refusing its own dial
    // (251 < 253: the tie-break keeps 251's). Meanwhile another process claims 251.
    let cfg = FabricConfig {
        connect_timeout_ms: 30_000,
        ..cfg_with(None, false)
    };
    let (a, b) = (open_with(251, cfg.clone()), open_with(253, cfg));
    let rb = b.register_region(1, 8).unwrap();
    let (relay, release) = held_relay(b.address());
    a.connect(b.node(), &relay).unwrap();
    b.connect(a.node(), &a.address()).unwrap();
    // The impostor's hello (another incarnation than 251's) gets a refusal, never the
    // member's Hello: taken, its link would stand for 251, and its end (right below)
    // would report the live 251 failed.
    let mut s = TcpStream::connect(b.address()).unwrap();
    s.set_read_timeout(Some(GIVE_UP)).unwrap();
    s.write_all(&hello(a.node(), b.node(), &[])).unwrap();
    let mut header = [0u8; 5];
    s.read_exact(&mut header).unwrap();
    assert_eq!(
        header[4], 10,
        "a refusal (kind 10); kind 1 is the member's Hello: it took an impostor's hello \
         for the peer it was dialing"
    );
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    drop(s);
    assert_eq!(b.refused_links(), 1);
    // The real 251's dial now arrives and is taken: the first thing either end reports
    // about the other is the link coming up, and data goes over it.
    release.send(()).unwrap();
    for (ep, peer) in [(&b, a.node()), (&a, b.node())] {
        let seen = events_until_connected(ep, peer);
        let before = &seen[..seen.len() - 1];
        assert!(
            !before.iter().any(|e| matches!(e,
                Event::PeerFailed { peer: p, .. } | Event::PeerConnected { peer: p } if *p == peer)),
            "node {} reported {peer} failed, or connected twice: {seen:?}",
            ep.node()
        );
    }
    a.write(b.node(), 1, 0, &5u64.to_le_bytes()).unwrap();
    wait_until(&*b, "a write from the real peer", || rb.load_u64(0) == 5);
    assert_eq!(b.peers(), vec![a.node()]);
}

/// Dials `ep` as node `node` with the secret and the real handshake, sends a Hello, and
/// returns the stream, the opener (if `encrypted`) and the raw bytes of the reply.
fn dial_by_hand(ep: &Arc<TcpEndpoint>, node: u32, encrypted: bool) -> (Vec<u8>, Vec<u8>) {
    let mut s = TcpStream::connect(ep.address()).unwrap();
    s.set_read_timeout(Some(GIVE_UP)).unwrap();
    let (hs, m1) = InitiatorHandshake::start(&secret(SECRET), node, ep.node()).unwrap();
    s.write_all(&m1).unwrap();
    let m2 = read_framed(&mut s, HANDSHAKE_MESSAGE_BYTES_MAX, "message 2").unwrap();
    let (mut session, confirm) = hs.finish(&m2).unwrap();
    s.write_all(&confirm).unwrap();
    let plain_hello = hello(node, ep.node(), &[]);
    if encrypted {
        let mut sealed = Vec::new();
        session.send.seal(&plain_hello, &mut sealed);
        s.write_all(&sealed).unwrap();
    } else {
        s.write_all(&plain_hello).unwrap();
    }
    event_where(
        &**ep,
        "the hand-made peer connected",
        |e| matches!(e, Event::PeerConnected { peer } if *peer == node),
    );
    // The reply Hello (and maybe a probe): whatever arrives within a moment.
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut raw = vec![0u8; 4096];
    let mut got = 0;
    while let Ok(n) = s.read(&mut raw[got..]) {
        if n == 0 || got + n == raw.len() {
            break;
        }
        got += n;
    }
    raw.truncate(got);
    let mut plain = vec![0u8; 4096];
    let n = if encrypted {
        let mut opener = Opener::new(session.recv);
        let mut inner = &raw[..];
        Opening {
            inner: &mut inner,
            opener: Some(&mut opener),
        }
        .read(&mut plain)
        .unwrap()
    } else {
        (&raw[..]).read(&mut plain).unwrap()
    };
    plain.truncate(n);
    (raw, plain)
}

#[test]
fn encrypted_links_carry_no_plaintext_frame_and_auth_only_links_do() {
    const MAGIC: [u8; 4] = 0x5350_444Cu32.to_le_bytes();
    let has_magic = |b: &[u8]| b.windows(4).any(|w| w == MAGIC);
    let b = member(232);
    b.register_region(1, 8).unwrap();
    let (raw, plain) = dial_by_hand(&b, 231, true);
    assert!(!raw.is_empty(), "the member replied");
    assert!(
        !has_magic(&raw),
        "the reply Hello is not on the wire in clear"
    );
    assert_eq!(plain[4], 1, "the opened reply is a Hello frame");
    assert!(has_magic(&plain), "and it opens to the member's Hello");

    let c = open_with(242, cfg_with(Some(secret(SECRET)), false));
    c.register_region(1, 8).unwrap();
    let (raw, _) = dial_by_hand(&c, 241, false);
    assert!(
        has_magic(&raw),
        "encrypt_links = false: authenticated, then in clear"
    );
}
