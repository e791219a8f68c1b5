//! A sending thread that finds its window full parks in `Sender::wait_for_room` and is
//! woken by the predicate thread when the window moves, or by the view stopping — not by
//! its timeout, which these tests make far longer than they wait.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use spindle_group::{
    DeliveryMode, Engine, EngineConfig, Error, Layout, Sender, SubgroupSpec, View,
};
use spindle_transport_rdma::Region;

const WINDOW: usize = 2;

/// Far longer than any test waits: a parked thread that returns was woken.
const PARK_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long the test waits for a parked thread to be woken before it calls the
/// wake-up lost (a liveness bound, not a speed measurement).
const WOKEN_WITHIN: Duration = Duration::from_secs(120);

fn engine() -> Engine {
    let spec = SubgroupSpec {
        id: 0,
        members: vec![1],
        senders: vec![1],
        mode: DeliveryMode::Atomic,
        window_slots: WINDOW,
        slot_payload_bytes: 64,
        rdmc: None,
        delivery_prefix: None,
    };
    let layout = Layout {
        subgroups: vec![spec],
    };
    Engine::new(
        1,
        View::new(1, vec![1]),
        layout,
        EngineConfig::default(),
        |id, len| Ok(Region::new_heap(id, len)?),
    )
    .unwrap()
}

/// Fills the window, starts a thread that parks on it and reports what a loan then
/// gives, and returns once that thread is parked.
fn park_on_full_window(sender: &Sender) -> mpsc::Receiver<Result<u64, Error>> {
    for k in 0..WINDOW {
        let mut loan = sender.try_loan().unwrap();
        loan.write_at(0, &[k as u8; 8]).unwrap();
        loan.commit();
    }
    assert!(
        matches!(sender.try_loan(), Err(Error::WindowFull { .. })),
        "the window of {WINDOW} holds {WINDOW} undelivered messages"
    );
    let (tx, rx) = mpsc::channel();
    let s = sender.clone();
    std::thread::spawn(move || {
        s.wait_for_room(8, PARK_TIMEOUT);
        let _ = tx.send(s.try_loan().map(|l| l.seq()));
    });
    let start = Instant::now();
    while sender.parked_for_room() == 0 {
        assert!(start.elapsed() < WOKEN_WITHIN, "the thread never parked");
        std::thread::sleep(Duration::from_millis(1));
    }
    rx
}

#[test]
fn a_thread_parked_on_a_full_window_is_woken_when_the_predicate_thread_frees_it() {
    let mut e = engine();
    let sender = e.sender(0).unwrap();
    let rx = park_on_full_window(&sender);
    let start = Instant::now();
    let got = loop {
        // The predicate thread's step: pushes, delivers, frees the window, wakes.
        e.step();
        while e.poll_delivery().is_some() {}
        if let Ok(r) = rx.try_recv() {
            break r;
        }
        assert!(
            start.elapsed() < WOKEN_WITHIN,
            "the parked thread was not woken when the window moved"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        got.unwrap(),
        WINDOW as u64,
        "the next slot after the window's"
    );
    assert_eq!(sender.parked_for_room(), 0);
}

#[test]
fn a_thread_parked_on_a_full_window_is_woken_by_the_wedge_and_told_so() {
    let mut e = engine();
    let sender = e.sender(0).unwrap();
    let rx = park_on_full_window(&sender);
    e.wedge();
    let got = rx
        .recv_timeout(WOKEN_WITHIN)
        .expect("the parked thread was not woken by the wedge");
    assert!(
        matches!(got, Err(Error::Wedged { subgroup: 0 })),
        "a stopped view's sender says Wedged: {got:?}"
    );
}
