//! Contract item 10: a backend that applies its peers' writes itself refuses one outside
//! what the region grants the writer ([`crate::Region::limit_peer_writes`]).

use super::{drive_until, link, retry, Harness, Node};
use crate::{FailureReason, PeerWrites, WORD_BYTES};

/// Where [`crate::Endpoint::enforces_peer_writes`] says so: a peer's writes inside its grants
/// land; its first write (or guard) outside them lands nowhere and fails its link at the
/// region's owner as malformed, naming the range. Other backends are skipped with the
/// reason printed (their peers write the memory directly).
pub fn check_peer_writes(h: &mut dyn Harness) {
    let name = h.name();
    let mut b = Node::open(h);
    if !b.ep.enforces_peer_writes() {
        eprintln!("{name}: check_peer_writes skipped: peers write this backend's memory directly");
        b.ep.close();
        return;
    }
    let mut a = Node::open(h);
    let mut c = Node::open(h);
    let (ida, idb, idc) = (a.id(), b.id(), c.id());
    let region =
        b.ep.register_region(1, 256)
            .unwrap_or_else(|e| panic!("{name}: register: {e}"));
    let mut grants = PeerWrites::default();
    // a: a row and a ring; c: one word.
    grants
        .grant(ida, 0..64)
        .and_then(|g| g.grant(ida, 128..192))
        .unwrap();
    grants.grant(idc, 192..200).unwrap();
    region
        .limit_peer_writes(grants)
        .unwrap_or_else(|e| panic!("{name}: limit_peer_writes: {e}"));
    link(h, &mut a, &mut b, &[1]);
    link(h, &mut c, &mut b, &[1]);
    retry(&*a.ep, "a write inside the row", || {
        a.ep.write(idb, 1, 0, &5u64.to_le_bytes())
    });
    retry(&*a.ep, "a guarded write inside the ring", || {
        a.ep.write_then_release(idb, 1, 128, &6u64.to_le_bytes(), 136, 7)
    });
    drive_until(h, &mut [&mut b], "the writes inside a's grants", |_| {
        region.load_u64(136) == 7
    });
    assert_eq!(
        (region.load_u64(0), region.load_u64(128)),
        (5, 6),
        "{name}: writes inside the grants land"
    );
    // Outside its grants (the ring's neighbour), then one more inside: neither lands.
    retry(&*a.ep, "a write outside a's grants", || {
        a.ep.write(idb, 1, 64, &8u64.to_le_bytes())
    });
    let _ = a.ep.write(idb, 1, 8, &9u64.to_le_bytes());
    // c: the payload inside its word, the guard outside.
    retry(&*c.ep, "a guard outside c's grant", || {
        c.ep.write_then_release(idb, 1, 192, &10u64.to_le_bytes(), 200, 11)
    });
    drive_until(h, &mut [&mut b], "b to fail a's and c's links", |n| {
        n[0].failed(ida).is_some() && n[0].failed(idc).is_some()
    });
    for (peer, what) in [
        (ida, "write of 8 bytes at 64"),
        (idc, "guard of 8 bytes at 200"),
    ] {
        match b.failed(peer) {
            Some(FailureReason::Malformed(why))
                if why.contains(what) && why.contains("outside what it may write") => {}
            other => panic!("{name}: peer {peer}'s {what}: expected Malformed, got {other:?}"),
        }
    }
    assert_eq!(
        [64, 8, 192, 200].map(|at| region.load_u64(at)),
        [0; 4],
        "{name}: nothing outside the grants, or after the refusal, landed"
    );
    // A peer with no grant at all is refused too.
    let mut d = Node::open(h);
    let idd = d.id();
    link(h, &mut d, &mut b, &[1]);
    retry(&*d.ep, "a write by a peer granted nothing", || {
        d.ep.write(idb, 1, 0, &[1; WORD_BYTES])
    });
    drive_until(h, &mut [&mut b], "b to fail d's link", |n| {
        n[0].failed(idd).is_some()
    });
    assert!(
        matches!(b.failed(idd), Some(FailureReason::Malformed(_))),
        "{name}: a peer granted nothing: {:?}",
        b.failed(idd)
    );
    assert_eq!(region.load_u64(0), 5, "{name}: its write did not land");
    for n in [a, b, c, d] {
        n.ep.close();
    }
}
