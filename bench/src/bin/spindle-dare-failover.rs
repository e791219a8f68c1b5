//! `spindle-dare-failover`: how long a DARE group takes from its leader's failure to the
//! first commit in the new term, over a real fabric (tcp or shm on loopback).
//!
//! Each trial starts `--nodes` members in this process (one endpoint and one
//! `DareMember` thread each), waits for a leader, has a follower send messages until some
//! are delivered everywhere, then closes the leader's endpoint (its links break at once,
//! as a killed process's would) and times, from that instant, the first `Committed` event
//! of a leader of a later term (a follower hands over one more message right after the
//! close, so a commit is always due). The last line is JSON: trials, p50 and max in ms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use spindle_group::dare::runtime::DareMember;
use spindle_group::dare::{DareConfig, DareEvent};
use spindle_transport_rdma::{open_backend, Endpoint, FabricConfig, NodeId};

/// Most trials one run may ask for.
const TRIALS_MAX: usize = 100;
/// Most members.
const NODES_MAX: usize = 9;
/// The least silence after which the fabric suspects a peer, ms (see [`fabric_config`]).
const SUSPECT_FLOOR_MS: u64 = 1_000;

#[derive(Debug, Parser)]
#[command(about = "DARE leader failure → first commit in the new term")]
struct Args {
    /// Fabric: tcp or shm.
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// Members (3 to 9).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Trials.
    #[arg(long, default_value_t = 10)]
    trials: usize,
    /// Give up on a trial after this many seconds.
    #[arg(long, default_value_t = 20)]
    timeout_s: u64,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fabric's settings: the leader's close is seen at once ("peer closed the link"),
/// so the failure detector's floor does not enter the measured time; it is raised from
/// 50 ms to [`SUSPECT_FLOOR_MS`] because on a loaded machine (two cores, load 4.5) the
/// survivors suspected each other after 54–103 ms of a starved thread's silence, and a
/// DARE group, whose membership is fixed, cannot take a member back: no majority is left.
fn fabric_config() -> FabricConfig {
    FabricConfig {
        suspect_floor_ms: SUSPECT_FLOOR_MS,
        suspect_ceiling_ms: SUSPECT_FLOOR_MS.max(FabricConfig::default().suspect_ceiling_ms),
        ..FabricConfig::default()
    }
}

/// Each member's state, one line each (printed when a trial gives up).
fn dump(handles: &[DareMember]) -> String {
    handles
        .iter()
        .map(|h| format!("\n  {}", h.describe()))
        .collect()
}

fn trial(args: &Args, index: usize) -> Result<f64, BoxError> {
    // Fresh node ids per trial (shm names endpoints by process and node).
    let base = (index * NODES_MAX) as NodeId;
    let members: Vec<NodeId> = (base + 1..=base + args.nodes as NodeId).collect();
    let eps: Vec<Arc<dyn Endpoint>> = members
        .iter()
        .map(|&m| open_backend(&args.backend, m, fabric_config()))
        .collect::<Result<_, _>>()?;
    let addresses: BTreeMap<NodeId, String> = eps.iter().map(|e| (e.node(), e.address())).collect();
    let config = DareConfig {
        log_entries: 256,
        payload_bytes_max: 64,
        sender_window: 16,
        heartbeat_us: 2_000,
        election_timeout_us: 100_000,
    };
    let delivered: Vec<Arc<AtomicU64>> = members.iter().map(|_| Arc::default()).collect();
    let mut handles = Vec::new();
    let starts: Vec<_> = eps
        .iter()
        .zip(&delivered)
        .map(|(ep, d)| {
            let (ep, d, members, addresses, config) = (
                Arc::clone(ep),
                Arc::clone(d),
                members.clone(),
                addresses.clone(),
                config.clone(),
            );
            std::thread::spawn(move || {
                DareMember::start(ep, members, &addresses, config, Duration::from_secs(10), {
                    move |_| {
                        d.fetch_add(1, Ordering::Release);
                    }
                })
            })
        })
        .collect();
    for s in starts {
        handles.push(s.join().map_err(|_| "a member's start panicked")??);
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let leader = loop {
        if let (Some(l), _) = handles[0].leader() {
            if handles.iter().all(|h| h.leader().0 == Some(l)) {
                break l;
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no first leader; members:{}", dump(&handles)).into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let (_, old_term) = handles[0].leader();
    let sender = members
        .iter()
        .position(|&m| m != leader)
        .expect("a follower");
    for i in 0..10u64 {
        while handles[sender].try_send(&i.to_le_bytes()).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    while delivered.iter().any(|d| d.load(Ordering::Acquire) < 10) {
        if Instant::now() > deadline {
            return Err(format!(
                "the first messages were not delivered; members:{}",
                dump(&handles)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // One more message in flight, then the leader goes.
    let _ = handles[sender].try_send(b"after");
    let li = members.iter().position(|&m| m == leader).expect("leader");
    let old = handles.remove(li);
    let old_ep = eps[li].clone();
    let t0 = Instant::now();
    old_ep.close();
    old.stop();
    // And one after: a commit is then due in the new term even if everything sent
    // before was committed under the old leader.
    let survivor = if sender > li { sender - 1 } else { sender };
    while handles[survivor].try_send(b"post").is_err() {
        std::thread::sleep(Duration::from_micros(100));
    }
    let elapsed = loop {
        let mut found = None;
        for h in &handles {
            while let Some(e) = h.poll_event() {
                if let DareEvent::Committed { .. } = e {
                    if h.leader().1 > old_term && found.is_none() {
                        found = Some(t0.elapsed());
                    }
                }
            }
        }
        if let Some(t) = found {
            break t;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no commit in a new term (old leader {leader}, term {old_term}); members:{}",
                dump(&handles)
            )
            .into());
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    for h in handles {
        h.stop();
    }
    for e in eps {
        e.close();
    }
    Ok(elapsed.as_secs_f64() * 1e3)
}

fn main() {
    let args = Args::parse();
    if !["tcp", "shm"].contains(&args.backend.as_str())
        || !(3..=NODES_MAX).contains(&args.nodes)
        || !(1..=TRIALS_MAX).contains(&args.trials)
    {
        eprintln!(
            "spindle-dare-failover: --backend tcp|shm, --nodes 3..={NODES_MAX}, --trials 1..={TRIALS_MAX}"
        );
        std::process::exit(2);
    }
    let mut ms = Vec::new();
    for i in 0..args.trials {
        match trial(&args, i) {
            Ok(t) => ms.push(t),
            Err(e) => {
                eprintln!("spindle-dare-failover: trial {i}: {e}");
                std::process::exit(1);
            }
        }
    }
    ms.sort_by(f64::total_cmp);
    let p50 = ms[ms.len() / 2];
    let max = ms[ms.len() - 1];
    println!(
        "{}",
        serde_json::json!({
            "backend": args.backend,
            "nodes": args.nodes,
            "trials": ms.len(),
            "failover_to_commit_p50_ms": (p50 * 100.0).round() / 100.0,
            "failover_to_commit_max_ms": (max * 100.0).round() / 100.0,
            "all_ms": ms.iter().map(|m| (m * 100.0).round() / 100.0).collect::<Vec<_>>(),
        })
    );
}
