//! shm backend across processes: the test binary re-runs itself as the peer
//! (`SPINDLE_SHM_CHILD` selects the role). One-sided writes both ways with FIFO, untorn
//! words and guards; sends; a SIGKILLed peer is detected by its socket closing; a
//! SIGSTOPped peer by the probe time-out; no files are left behind.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_transport_rdma::shm::ShmEndpoint;
use spindle_transport_rdma::{Endpoint, Event, FabricConfig, FailureReason, Region};

const GIVE_UP: Duration = Duration::from_secs(60);
const PARENT: u32 = 1;
const CHILD: u32 = 2;
/// Parent's region the child writes into, and the child's the parent writes into.
const REGION: u32 = 1;
const BLOCK_WORDS: usize = 32;
const REGION_BYTES: usize = 8 + BLOCK_WORDS * 8;
/// Parent → child: "write `n` FIFO blocks into my region" (data: n as u64 LE).
const IMM_STREAM: u32 = 1;
/// Parent → child: "send back what is in your region after the guard" (data: len u64).
const IMM_ECHO: u32 = 2;
/// Child → parent: the echoed bytes.
const IMM_ECHOED: u32 = 3;
/// Child → parent: streaming done.
const IMM_STREAMED: u32 = 4;

fn cfg() -> FabricConfig {
    FabricConfig {
        probe_interval_ms: 20,
        suspect_floor_ms: 500,
        suspect_ceiling_ms: 500,
        ..FabricConfig::default()
    }
}

/// The child's role, run by `spawn_child` with `--ignored`.
#[test]
#[ignore = "the child process, run by spawn_child with --ignored"]
fn child_entry() {
    let ns = std::env::var("SPINDLE_SHM_CHILD")
        .unwrap_or_else(|_| panic!("child_entry runs only as a child, with SPINDLE_SHM_CHILD set"));
    let ep = ShmEndpoint::open(CHILD, &ns, cfg()).expect("child endpoint");
    let row = ep
        .register_region(REGION, REGION_BYTES)
        .expect("child region");
    ep.connect(PARENT, &format!("@spindle-{ns}-{PARENT}"))
        .expect("connect");
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        ep.wait(Duration::from_millis(100));
        while let Some(ev) = ep.poll_event() {
            match ev {
                Event::Recv {
                    imm: IMM_STREAM,
                    data,
                    ..
                } => {
                    let n = u64::from_le_bytes(data[..8].try_into().unwrap());
                    stream_blocks(&ep, PARENT, n);
                    ep.send(PARENT, IMM_STREAMED, &[]).unwrap();
                }
                Event::Recv {
                    imm: IMM_ECHO,
                    data,
                    ..
                } => {
                    let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
                    assert_eq!(row.load_u64(0), 1, "guard before the send");
                    let bytes = row.to_vec(8, len).unwrap();
                    ep.send(PARENT, IMM_ECHOED, &bytes).unwrap();
                }
                Event::PeerFailed { .. } => return,
                _ => {}
            }
        }
    }
}

/// Writes `n` blocks whose words all carry the write's number (both halves), each
/// followed by the guard.
fn stream_blocks(ep: &ShmEndpoint, peer: u32, n: u64) {
    let mut block = vec![0u8; BLOCK_WORDS * 8];
    for i in 1..=n {
        let word = i | (i << 32);
        for chunk in block.chunks_exact_mut(8) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        ep.write_then_release(peer, REGION, 8, &block, 0, i)
            .unwrap();
    }
}

struct Peer {
    child: Child,
    ep: Arc<ShmEndpoint>,
    row: Region,
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Resume it in case a test stopped it, then kill and reap it.
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_child(test: &str) -> Peer {
    let ns = format!("p-{}-{test}", std::process::id());
    let ep = ShmEndpoint::open(PARENT, &ns, cfg()).unwrap();
    let row = ep.register_region(REGION, REGION_BYTES).unwrap();
    let child = start_child(&ns);
    let peer = Peer { child, ep, row };
    linked(&peer.ep);
    peer
}

fn start_child(ns: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPINDLE_SHM_CHILD", ns)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until the child's region is known (the link is up).
fn linked(ep: &ShmEndpoint) {
    let deadline = Instant::now() + GIVE_UP;
    while ep.remote_region(CHILD, REGION).is_none() {
        assert!(Instant::now() < deadline, "child never connected");
        ep.wait(Duration::from_millis(50));
        while let Some(ev) = ep.poll_event() {
            assert!(!matches!(ev, Event::PeerFailed { .. }), "{ev:?}");
        }
    }
}

/// A one-sided write into the child's region, read back by the child after the guard.
fn echo_round_trip(ep: &ShmEndpoint, payload: &[u8]) {
    ep.write_then_release(CHILD, REGION, 8, payload, 0, 1)
        .unwrap();
    ep.send(CHILD, IMM_ECHO, &(payload.len() as u64).to_le_bytes())
        .unwrap();
    let ev = expect_event(ep, "echo", |e| matches!(e, Event::Recv { .. }));
    assert_eq!(
        ev,
        Event::Recv {
            peer: CHILD,
            imm: IMM_ECHOED,
            data: payload.to_vec()
        }
    );
}

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

fn shm_files(ns: &str) -> Vec<String> {
    let mut found = Vec::new();
    for dir in ["/dev/shm", "/tmp"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("spindle") && name.contains(ns) {
                    found.push(format!("{dir}/{name}"));
                }
            }
        }
    }
    found
}

#[test]
fn writes_both_ways_fifo_and_sends() {
    const WRITES: u64 = 20_000;
    let p = spawn_child("fifo");
    // Parent → child one-sided, then a send: the child reads it after the guard.
    p.ep.write_then_release(CHILD, REGION, 8, b"from the parent", 0, 1)
        .unwrap();
    p.ep.send(CHILD, IMM_ECHO, &15u64.to_le_bytes()).unwrap();
    let ev = expect_event(&p.ep, "echo", |e| matches!(e, Event::Recv { .. }));
    assert_eq!(
        ev,
        Event::Recv {
            peer: CHILD,
            imm: IMM_ECHOED,
            data: b"from the parent".to_vec()
        }
    );
    // Child → parent stream, checked while it lands.
    p.ep.send(CHILD, IMM_STREAM, &WRITES.to_le_bytes()).unwrap();
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let guard = p.row.load_u64(0);
        let data = p.row.to_vec(8, BLOCK_WORDS * 8).unwrap();
        for chunk in data.chunks_exact(8) {
            let w = u64::from_ne_bytes(chunk.try_into().unwrap());
            assert_eq!(w >> 32, w & 0xFFFF_FFFF, "torn word {w:#x}");
            assert!(
                w & 0xFFFF_FFFF >= guard,
                "word {w} older than guard {guard}"
            );
        }
        if guard == WRITES {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stream never finished (guard {guard})"
        );
    }
    expect_event(&p.ep, "streamed", |e| {
        matches!(
            e,
            Event::Recv {
                imm: IMM_STREAMED,
                ..
            }
        )
    });
}

#[test]
fn sigkilled_peer_is_detected_and_leaves_no_files() {
    let mut p = spawn_child("kill");
    let ns = format!("p-{}-kill", std::process::id());
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let ev = expect_event(&p.ep, "failure", |e| matches!(e, Event::PeerFailed { .. }));
    let Event::PeerFailed { peer, reason } = ev else {
        unreachable!()
    };
    assert_eq!(peer, CHILD);
    assert!(
        matches!(reason, FailureReason::ConnectionLost(_)),
        "{reason:?}"
    );
    assert!(p.ep.write(CHILD, REGION, 0, b"x").is_err());
    p.ep.close();
    assert_eq!(shm_files(&ns), Vec::<String>::new());
}

#[test]
fn sigstopped_peer_fails_by_probe_timeout() {
    let p = spawn_child("stop");
    // SAFETY: kill(2) on our own child's pid; Peer's drop resumes and kills it.
    assert_eq!(unsafe { libc::kill(p.child.id() as i32, libc::SIGSTOP) }, 0);
    let ev = expect_event(&p.ep, "failure", |e| matches!(e, Event::PeerFailed { .. }));
    let Event::PeerFailed { peer, reason } = ev else {
        unreachable!()
    };
    assert_eq!(peer, CHILD);
    assert!(
        matches!(reason, FailureReason::ProbeTimeout { .. }),
        "{reason:?}"
    );
}

/// A peer that crashed and restarted under the same node id is linked again, and the
/// parent's writes land in the new process's memory, not the dead one's.
#[test]
fn restarted_peer_is_mapped_afresh() {
    let mut p = spawn_child("restart");
    echo_round_trip(&p.ep, b"first life");
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    expect_event(&p.ep, "failure", |e| {
        matches!(e, Event::PeerFailed { peer: CHILD, .. })
    });
    p.child = start_child(&format!("p-{}-restart", std::process::id()));
    linked(&p.ep);
    echo_round_trip(&p.ep, b"second life, longer");
}
