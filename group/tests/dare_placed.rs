//! A standalone DARE member's thread is placed as a group's predicate thread is
//! (`DareMember::start_placed`, `sched::ThreadSched`): it delivers on the CPU it was given,
//! and a CPU this process may not use is refused naming the setting, with no thread left
//! running. One member over tcp on loopback (a group of one commits alone).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use spindle_group::dare::runtime::DareMember;
use spindle_group::dare::DareConfig;
use spindle_group::sched::{current_thread_cpus, ThreadSched};
use spindle_group::Error;
use spindle_transport_rdma::{open_backend, FabricConfig};

fn allowed_cpus() -> Vec<usize> {
    current_thread_cpus().expect("this thread's CPUs")
}

#[test]
fn a_dare_member_delivers_on_the_cpu_it_was_placed_on() {
    let cpu = *allowed_cpus().last().expect("some CPU is allowed");
    let ep = open_backend("tcp", 1, FabricConfig::default()).expect("tcp endpoint");
    let (seen_tx, seen_rx) = mpsc::channel();
    let member = DareMember::start_placed(
        ep,
        vec![1],
        &BTreeMap::new(),
        DareConfig::default(),
        Duration::from_secs(10),
        ThreadSched::default().with_cpus(&[cpu]).unwrap(),
        move |_| {
            let _ = seen_tx.send(allowed_cpus());
        },
    )
    .expect("a placed member starts");
    // Sends wait for the member to lead its term of one.
    let mut sent = false;
    for _ in 0..2_000 {
        if member.try_send(b"placed").is_ok() {
            sent = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        sent,
        "the member never took a message: {}",
        member.describe()
    );
    let seen = seen_rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("no delivery: {}", member.describe()));
    assert_eq!(
        seen,
        vec![cpu],
        "the upcall ran on the member's placed thread"
    );
    member.stop();
}

#[test]
fn a_dare_member_that_cannot_be_placed_is_refused_naming_the_setting() {
    let missing = (0..1024)
        .rev()
        .find(|c| !allowed_cpus().contains(c))
        .expect("a machine with fewer than 1024 CPUs");
    let ep = open_backend("tcp", 2, FabricConfig::default()).expect("tcp endpoint");
    let placed = DareMember::start_placed(
        ep,
        vec![2],
        &BTreeMap::new(),
        DareConfig::default(),
        Duration::from_secs(10),
        ThreadSched::default().with_cpus(&[missing]).unwrap(),
        |_| {},
    );
    let Err(e) = placed else {
        panic!("CPU {missing}, which this process may not use, was accepted");
    };
    assert!(
        matches!(&e, Error::ThreadSched { setting: "cpus", why } if why.contains(&missing.to_string())),
        "{e}"
    );
}
