//! RDMC over real fabrics (tcp on loopback, shm): every schedule, four members as threads
//! each with its own endpoint, messages of seeded random sizes; every receiver's bytes
//! must equal the root's. Then a receiver's endpoint is closed mid-transfer: every other
//! member must report the group's failure rather than hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_group::rdmc::{RdmcConfig, RdmcEvent, RdmcGroup, ScheduleKind};
use spindle_transport_rdma::{open_backend, Endpoint, Event, FabricConfig, NodeId};

const REGION: u32 = 77;
/// Node ids are unique across the runs of this process: shm names its endpoints by
/// process and node id, and the tests run in parallel.
static NEXT_NODE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
/// A run that has not finished by then is hung (a liveness guard, not a timing check).
const HANG_GUARD: Duration = Duration::from_secs(120);

fn message(seed: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(31) ^ seq);
    (0..len).map(|_| rng.gen()).collect()
}

fn linked(
    backend: &str,
    members: &[NodeId],
    config: &RdmcConfig,
) -> Vec<(Arc<dyn Endpoint>, RdmcGroup)> {
    let eps: Vec<Arc<dyn Endpoint>> = members
        .iter()
        .map(|&m| open_backend(backend, m, FabricConfig::default()).unwrap())
        .collect();
    for (i, a) in eps.iter().enumerate() {
        for b in &eps[i + 1..] {
            a.connect(b.node(), &b.address()).unwrap();
        }
    }
    let len = RdmcGroup::region_bytes(members.len(), config);
    let groups: Vec<RdmcGroup> = eps
        .iter()
        .map(|ep| {
            let region = ep.register_region(REGION, len).unwrap();
            RdmcGroup::new(ep.node(), members.to_vec(), config.clone(), region).unwrap()
        })
        .collect();
    let deadline = Instant::now() + HANG_GUARD;
    for ep in &eps {
        let mut connected = 0;
        while connected < members.len() - 1
            || members
                .iter()
                .any(|&m| m != ep.node() && ep.remote_region(m, REGION).is_none())
        {
            assert!(Instant::now() < deadline, "links did not come up");
            match ep.poll_event() {
                Some(Event::PeerConnected { .. }) => connected += 1,
                Some(_) => {}
                None => {
                    ep.wait(Duration::from_millis(1));
                }
            }
        }
    }
    eps.into_iter().zip(groups).collect()
}

/// Runs one node until it has `messages` completions (receiver) or sent them all (root),
/// or the group failed; returns the received messages and whether it saw a failure.
fn run_node(
    ep: Arc<dyn Endpoint>,
    mut group: RdmcGroup,
    seed: u64,
    sizes: Vec<usize>,
    close_after_blocks: Option<u64>,
) -> (Vec<Vec<u8>>, bool) {
    let mut scratch = Vec::new();
    let mut received = Vec::new();
    let mut next = 0;
    let mut root_done = 0;
    let mut posted = 0u64;
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        assert!(Instant::now() < deadline, "node {} hung", ep.node());
        while let Some(e) = ep.poll_event() {
            if let Event::PeerFailed { peer, .. } = e {
                group.handle_peer_failed(peer);
            }
        }
        if group.rank() == 0 && next < sizes.len() && group.can_send() {
            group
                .send(&message(seed, next as u64 + 1, sizes[next]))
                .unwrap();
            next += 1;
        }
        let mut work = group.step();
        let n = group.drain_writes(&mut scratch, |w, b| w.post(&*ep, b));
        posted += n as u64;
        work |= n > 0;
        if let Some(limit) = close_after_blocks {
            if posted >= limit {
                // Crash-like: this member vanishes mid-transfer.
                ep.close();
                return (received, false);
            }
        }
        while let Some(e) = group.poll_event() {
            work = true;
            match e {
                RdmcEvent::Completed { .. } if group.rank() != 0 => {
                    received.push(group.read_message().unwrap());
                    group.release();
                }
                RdmcEvent::Completed { .. } => root_done += 1,
                RdmcEvent::Failed { .. } => {
                    // After the last message, the root closing is the end of the run.
                    let done = group.rank() != 0 && received.len() == sizes.len();
                    ep.close();
                    return (received, !done);
                }
                RdmcEvent::Incoming { .. } => {}
            }
        }
        // The root ends the run once every receiver released the last message; the
        // receivers end when they see the root go.
        if group.rank() == 0 && root_done == sizes.len() && group.all_released() {
            ep.close();
            return (received, false);
        }
        if !work {
            ep.wait(Duration::from_micros(200));
        }
    }
}

fn run(backend: &str, kind: ScheduleKind, seed: u64, crash_rank: Option<usize>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let config = RdmcConfig {
        block_bytes: 4096,
        message_bytes_max: 200_000,
        schedule: kind,
        window_messages: 2,
    };
    let base = NEXT_NODE.fetch_add(4, std::sync::atomic::Ordering::Relaxed);
    let members: Vec<NodeId> = (base..base + 4).collect();
    let sizes: Vec<usize> = (0..5).map(|_| rng.gen_range(1..=200_000)).collect();
    let nodes = linked(backend, &members, &config);
    let handles: Vec<_> = nodes
        .into_iter()
        .enumerate()
        .map(|(rank, (ep, group))| {
            let sizes = sizes.clone();
            let close = (crash_rank == Some(rank)).then_some(3);
            std::thread::spawn(move || run_node(ep, group, seed, sizes, close))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (rank, (received, failed)) in results.iter().enumerate() {
        let context = format!("{backend} {kind:?} seed {seed} rank {rank}");
        for (i, bytes) in received.iter().enumerate() {
            assert!(
                *bytes == message(seed, i as u64 + 1, sizes[i]),
                "{context}: message {} differs",
                i + 1
            );
        }
        match crash_rank {
            None => {
                assert!(!failed, "{context}: failure with nobody crashed");
                if rank != 0 {
                    assert_eq!(received.len(), sizes.len(), "{context}");
                }
            }
            Some(c) if c != rank => assert!(
                *failed || received.len() == sizes.len(),
                "{context}: neither complete nor failed"
            ),
            Some(_) => {}
        }
    }
    if let Some(c) = crash_rank {
        assert!(
            results
                .iter()
                .enumerate()
                .any(|(r, (_, failed))| r != c && *failed),
            "{backend} {kind:?} seed {seed}: nobody saw rank {c} vanish"
        );
    }
}

#[test]
fn every_schedule_over_tcp_and_shm_delivers_identical_bytes() {
    for backend in ["tcp", "shm"] {
        for (i, kind) in ScheduleKind::ALL.into_iter().enumerate() {
            run(backend, kind, 100 + i as u64, None);
        }
    }
}

#[test]
fn a_receiver_vanishing_mid_transfer_is_reported_not_hung() {
    for backend in ["tcp", "shm"] {
        run(backend, ScheduleKind::BinomialPipeline, 7, Some(2));
        run(backend, ScheduleKind::Chain, 8, Some(1));
    }
}
