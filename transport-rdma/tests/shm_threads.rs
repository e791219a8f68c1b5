//! shm backend, two endpoints in one process (threads): writes, guards, FIFO, untorn
//! words, sends, the doorbell, withdrawal and graceful close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_transport_rdma::shm::ShmEndpoint;
use spindle_transport_rdma::{Endpoint, Error, Event, FabricConfig, FailureReason, NodeId};

const GIVE_UP: Duration = Duration::from_secs(60);

fn namespace(test: &str) -> String {
    format!("t-{}-{test}", std::process::id())
}

/// Polls `ep` until `pred` accepts an event, returning it; panics after [`GIVE_UP`].
fn expect_event(ep: &ShmEndpoint, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        while let Some(ev) = ep.poll_event() {
            if pred(&ev) {
                return ev;
            }
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        ep.wait(Duration::from_millis(50));
    }
}

fn pair(test: &str) -> (Arc<ShmEndpoint>, Arc<ShmEndpoint>) {
    let ns = namespace(test);
    let a = ShmEndpoint::open(1, &ns, FabricConfig::default()).unwrap();
    let b = ShmEndpoint::open(2, &ns, FabricConfig::default()).unwrap();
    a.connect(2, &b.address()).unwrap();
    let connected = |peer: NodeId| move |e: &Event| *e == Event::PeerConnected { peer };
    expect_event(&a, "a connected", connected(2));
    expect_event(&b, "b connected", connected(1));
    (a, b)
}

fn announced(ep: &ShmEndpoint, peer: NodeId, region: u32) {
    let deadline = Instant::now() + GIVE_UP;
    while ep.remote_region(peer, region).is_none() {
        assert!(Instant::now() < deadline, "region {region} never announced");
        ep.wait(Duration::from_millis(20));
        while ep.poll_event().is_some() {}
    }
}

#[test]
fn write_guard_and_send_ordered_after_write() {
    let (a, b) = pair("basic");
    let row = b.register_region(7, 100).unwrap();
    assert_eq!(row.len(), 104);
    announced(&a, 2, 7);
    assert!(matches!(
        a.write(2, 7, 100, b"12345"),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        a.write_then_release(2, 7, 8, b"x", 4, 1),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        a.write(2, 8, 0, b"x"),
        Err(Error::UnknownRegion { .. })
    ));
    a.write_then_release(2, 7, 11, b"unaligned payload", 0, 9)
        .unwrap();
    a.write(2, 7, 96, b"tail").unwrap();
    a.send(2, 0xABCD, b"after the writes").unwrap();
    let ev = expect_event(&b, "recv", |e| matches!(e, Event::Recv { .. }));
    assert_eq!(
        ev,
        Event::Recv {
            peer: 1,
            imm: 0xABCD,
            data: b"after the writes".to_vec()
        }
    );
    assert_eq!(row.load_u64(0), 9);
    assert_eq!(row.to_vec(11, 17).unwrap(), b"unaligned payload");
    assert_eq!(row.to_vec(96, 4).unwrap(), b"tail");
    assert_eq!(
        row.to_vec(8, 3).unwrap(),
        [0, 0, 0],
        "bytes around the write kept"
    );
}

/// One writer streams blocks whose words all carry the write's sequence number (both
/// halves), then the guard; the owner checks that every word it sees is whole and at least
/// the guard it read first (FIFO + payload-before-guard).
#[test]
fn fifo_untorn_words_and_guard() {
    const WRITES: u64 = 20_000;
    const BLOCK_WORDS: usize = 64;
    let (a, b) = pair("fifo");
    let row = b.register_region(1, 8 + BLOCK_WORDS * 8).unwrap();
    announced(&a, 2, 1);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let a = Arc::clone(&a);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut block = vec![0u8; BLOCK_WORDS * 8];
            for i in 1..=WRITES {
                let word = i | (i << 32);
                for chunk in block.chunks_exact_mut(8) {
                    chunk.copy_from_slice(&word.to_ne_bytes());
                }
                a.write_then_release(2, 1, 8, &block, 0, i).unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let deadline = Instant::now() + GIVE_UP;
    let mut checks = 0u64;
    loop {
        let finished = done.load(Ordering::Acquire);
        let guard = row.load_u64(0);
        let data = row.to_vec(8, BLOCK_WORDS * 8).unwrap();
        for chunk in data.chunks_exact(8) {
            let w = u64::from_ne_bytes(chunk.try_into().unwrap());
            assert_eq!(w >> 32, w & 0xFFFF_FFFF, "torn word {w:#x}");
            assert!(
                w & 0xFFFF_FFFF >= guard,
                "word {w} older than guard {guard}"
            );
        }
        checks += 1;
        if finished && guard == WRITES {
            break;
        }
        assert!(Instant::now() < deadline, "writer never finished");
    }
    writer.join().unwrap();
    assert!(checks > 0);
}

#[test]
fn remote_write_wakes_a_parked_owner() {
    let (a, b) = pair("bell");
    let row = b.register_region(3, 64).unwrap();
    announced(&a, 2, 3);
    while b.poll_event().is_some() {}
    b.wait(Duration::from_millis(1)); // clear any earlier ring
    let parked = {
        let b = Arc::clone(&b);
        let row = row.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + GIVE_UP;
            while row.load_u64(0) == 0 {
                assert!(Instant::now() < deadline, "write never landed");
                b.wait(GIVE_UP);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    a.write_then_release(2, 3, 8, b"ding", 0, 1).unwrap();
    parked.join().unwrap();
    assert_eq!(row.to_vec(8, 4).unwrap(), b"ding");
}

#[test]
fn withdrawn_region_rejects_writes_and_close_is_reported() {
    let (a, b) = pair("withdraw");
    let _row = b.register_region(5, 64).unwrap();
    announced(&a, 2, 5);
    b.deregister_region(5).unwrap();
    expect_event(&a, "withdrawal", |e| {
        *e == Event::RegionWithdrawn { peer: 2, region: 5 }
    });
    assert!(matches!(
        a.write(2, 5, 0, b"late"),
        Err(Error::UnknownRegion { .. })
    ));
    b.close();
    let ev = expect_event(&a, "failure", |e| matches!(e, Event::PeerFailed { .. }));
    assert_eq!(
        ev,
        Event::PeerFailed {
            peer: 2,
            reason: FailureReason::Closed
        }
    );
    assert!(matches!(b.register_region(6, 8), Err(Error::Closed)));
}

#[test]
fn empty_and_odd_sized_regions() {
    let (a, b) = pair("sizes");
    let empty = b.register_region(1, 0).unwrap();
    let odd = b.register_region(2, 4097).unwrap();
    assert_eq!((empty.len(), odd.len()), (0, 4104));
    announced(&a, 2, 1);
    announced(&a, 2, 2);
    a.write(2, 1, 0, b"").unwrap();
    assert!(matches!(
        a.write(2, 1, 0, b"x"),
        Err(Error::OutOfBounds { .. })
    ));
    a.write_then_release(2, 2, 4093, b"end", 4096, 5).unwrap();
    assert_eq!(odd.load_u64(4096), 5);
    assert_eq!(odd.to_vec(4093, 3).unwrap(), b"end");
}

#[test]
fn bad_namespaces_and_addresses_are_errors() {
    assert!(ShmEndpoint::open(1, &"x".repeat(65), FabricConfig::default()).is_err());
    assert!(ShmEndpoint::open(1, "nul\0", FabricConfig::default()).is_err());
    let a = ShmEndpoint::open(1, &namespace("addr"), FabricConfig::default()).unwrap();
    assert!(a.connect(2, "").is_err());
    assert!(a.connect(2, "@").is_err());
    // The same name twice is refused (a second run in the same namespace).
    assert!(ShmEndpoint::open(1, &namespace("addr"), FabricConfig::default()).is_err());
    // Nobody listens there: the attempt fails and is reported.
    a.connect(9, "@spindle-nobody-home-9").unwrap();
    expect_event(&a, "failed connect", |e| {
        matches!(e, Event::PeerFailed { peer: 9, .. })
    });
}
