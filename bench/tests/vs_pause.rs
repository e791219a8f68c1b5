//! A hung member, across real processes: three members over tcp (and shm) stream in one
//! atomic subgroup; one is SIGSTOPped mid-stream. The survivors must exclude it and agree
//! on what was delivered; once resumed (SIGCONT) it must exit on its own with the error
//! that says it was excluded, and must not have delivered anything the survivors did not.
//! Deadlines are generous and nothing here asserts on timing.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::{deliveries, finish_members, signal, start_members, wait_members};

/// How long any one step may take on a loaded machine before the test gives up.
const STEP_DEADLINE: Duration = Duration::from_secs(120);

fn run(backend: &str) {
    let dir =
        std::env::temp_dir().join(format!("spindle-vs-pause-{backend}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut procs = start_members(backend, 3, &dir, Stdio::piped);
    for (id, p) in &procs {
        wait_members(p, "1,2,3", &format!("{backend} node {id}"));
    }
    // Mid-stream, node 3 hangs.
    std::thread::sleep(Duration::from_millis(400));
    let mut hung = procs.remove(&3).expect("node 3");
    assert!(signal(&hung.child, "-STOP"), "{backend}: SIGSTOP failed");
    for (id, p) in &procs {
        wait_members(p, "1,2", &format!("{backend} node {id}"));
    }
    // It wakes: it must find out on its own that it was excluded, and exit saying so.
    assert!(signal(&hung.child, "-CONT"), "{backend}: SIGCONT failed");
    let mut err = String::new();
    let mut stderr = hung.child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let deadline = Instant::now() + STEP_DEADLINE;
    let status = loop {
        if let Some(status) = hung.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{backend}: the woken member never exited"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert!(
        !status.success(),
        "{backend}: the excluded member exited successfully: {err}"
    );
    // "... node N suspected this node after M ms of silence", or, when the member that
    // suspected it is known only from its membership row, "... (this node was silent)".
    assert!(
        err.contains("excluded from the group")
            && (err.contains("ms of silence") || err.contains("was silent")),
        "{backend}: the woken member's error does not say it was excluded: {err:?}"
    );
    drop(hung);
    std::thread::sleep(Duration::from_millis(300));
    finish_members(&mut procs, backend, STEP_DEADLINE);
    let log = |id: u32| std::fs::read(dir.join(format!("node-{id}.log"))).unwrap_or_default();
    let (one, two) = (log(1), log(2));
    // Virtual synchrony: the survivors delivered the same messages in the same order.
    assert!(
        one == two,
        "{backend}: node 2's delivery log differs from node 1's"
    );
    let survived = deliveries(&one);
    assert!(
        survived.len() > 100,
        "{backend}: only {} deliveries logged",
        survived.len()
    );
    let text = String::from_utf8_lossy(&one);
    assert!(
        text.contains("VIEW 2 1,2"),
        "{backend}: no view without node 3"
    );
    // The excluded member delivered nothing the survivors did not, in the same order:
    // its deliveries are a prefix of theirs (what it logged before it hung).
    let hung_log = deliveries(&log(3));
    assert!(
        hung_log.len() <= survived.len() && hung_log[..] == survived[..hung_log.len()],
        "{backend}: the excluded member's {} deliveries are not a prefix of the survivors'",
        hung_log.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_a_stopped_member_is_excluded_and_told_so() {
    run("tcp");
}

#[test]
fn shm_a_stopped_member_is_excluded_and_told_so() {
    run("shm");
}
