//! `spindle-rdmc-bench`: RDMC transfers over a real fabric (issue 14, before RDMC joins a
//! subgroup's total order). One root multicasts `--size`-byte messages to `--nodes - 1`
//! receivers by [`spindle_group::rdmc::RdmcGroup`] with the chosen schedule and block
//! size, back to back, for `--seconds`; or, with `--reference memcpy`, copies `--size`
//! bytes in a loop as the same-run reference.
//!
//! Every node is a thread of this process with its own endpoint (`tcp` on loopback or
//! `shm`), linked to every other node: the bytes cross real sockets or shared mappings,
//! but the nodes share the machine's two cores. A message's latency runs from the root's
//! `send` to the last receiver's completion (one process, one clock).
//!
//! The last line printed is one JSON object:
//! `{"backend","schedule","nodes","size","block_bytes","window","msgs","msgs_per_s","bytes_per_s","lat_p50_us","lat_p99_us"}`
//! (`bytes_per_s` counts message bytes delivered to each receiver once: `size * msgs / s`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use spindle_group::rdmc::{RdmcConfig, RdmcEvent, RdmcGroup, ScheduleKind};
use spindle_transport_rdma::{open_backend, Endpoint, Event, FabricConfig, NodeId};

const RDMC_REGION_ID: u32 = 0x5244_4d43;
/// Messages timed at most per run (the latency sample buffer's bound).
const SAMPLES_MAX: usize = 100_000;

#[derive(Debug, Parser)]
#[command(about = "RDMC multicast throughput and latency over tcp or shm")]
struct Args {
    /// Fabric backend: tcp or shm.
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// binomial_pipeline, chain, binomial_tree or sequential.
    #[arg(long, default_value = "binomial_pipeline")]
    schedule: String,
    /// Members, the root included.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Block size in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    block_bytes: usize,
    /// Messages in flight (receive buffers per member).
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Measuring time in seconds (at least 3 messages are sent).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Reference workload instead of RDMC: `memcpy`.
    #[arg(long)]
    reference: Option<String>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args = Args::parse();
    let result = match args.reference.as_deref() {
        Some("memcpy") => memcpy(&args),
        Some(other) => Err(format!("unknown reference {other:?} (expected memcpy)").into()),
        None => run(&args),
    };
    if let Err(e) = result {
        eprintln!("spindle-rdmc-bench: {e}");
        std::process::exit(1);
    }
}

fn memcpy(args: &Args) -> Result<(), BoxError> {
    let src = vec![0xA5u8; args.size];
    let mut dst = vec![0u8; args.size];
    let deadline = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut copies: u64 = 0;
    while start.elapsed() < deadline {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        copies += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let json = serde_json::json!({
        "reference": "memcpy",
        "size": args.size,
        "copies_per_s": (copies as f64 / secs).round(),
        "bytes_per_s": (copies as f64 * args.size as f64 / secs).round(),
    });
    println!("{json}");
    Ok(())
}

/// What the root and the receivers share: when each message was sent and how many
/// receivers have completed it.
struct Shared {
    sent_at: Mutex<Vec<Instant>>,
    completions: Vec<AtomicU64>,
    latencies_us: Mutex<Vec<f64>>,
    stop: AtomicBool,
    failed: AtomicBool,
}

fn run(args: &Args) -> Result<(), BoxError> {
    let schedule = ScheduleKind::from_name(&args.schedule)
        .ok_or_else(|| format!("unknown schedule {:?}", args.schedule))?;
    if args.nodes < 2 {
        return Err("--nodes must be at least 2".into());
    }
    let config = RdmcConfig {
        block_bytes: args.block_bytes,
        message_bytes_max: args.size,
        schedule,
        window_messages: args.window,
    };
    config.validate()?;
    let members: Vec<NodeId> = (1..=args.nodes).collect();
    let fabric = FabricConfig {
        outbound_bytes_max: (256 << 20).max(2 * args.block_bytes),
        ..FabricConfig::default()
    };
    let mut eps: Vec<Arc<dyn Endpoint>> = Vec::new();
    for &m in &members {
        eps.push(open_backend(&args.backend, m, fabric.clone())?);
    }
    for (i, a) in eps.iter().enumerate() {
        for b in &eps[i + 1..] {
            a.connect(b.node(), &b.address())?;
        }
    }
    let len = RdmcGroup::region_bytes(members.len(), &config);
    let mut groups = Vec::new();
    for ep in &eps {
        let region = ep.register_region(RDMC_REGION_ID, len)?;
        groups.push(RdmcGroup::new(
            ep.node(),
            members.clone(),
            config.clone(),
            region,
        )?);
    }
    // Wait until every link is up and every peer's region is known.
    let deadline = Instant::now() + Duration::from_secs(20);
    for ep in &eps {
        let want = members.len() - 1;
        let mut connected = 0;
        while connected < want
            || members
                .iter()
                .any(|&m| m != ep.node() && ep.remote_region(m, RDMC_REGION_ID).is_none())
        {
            if Instant::now() > deadline {
                return Err(format!("node {}: links did not come up", ep.node()).into());
            }
            match ep.poll_event() {
                Some(Event::PeerConnected { .. }) => connected += 1,
                Some(Event::PeerFailed { peer, reason }) => {
                    return Err(format!("link to {peer} failed: {reason:?}").into())
                }
                Some(_) => {}
                None => {
                    ep.wait(Duration::from_millis(1));
                }
            }
        }
    }
    let shared = Arc::new(Shared {
        sent_at: Mutex::new(Vec::new()),
        completions: (0..SAMPLES_MAX + 1).map(|_| AtomicU64::new(0)).collect(),
        latencies_us: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
    });
    let message = vec![0x5Au8; args.size];
    let receivers = members.len() as u64 - 1;
    let seconds = args.seconds;
    let mut handles = Vec::new();
    let started = Instant::now();
    for (ep, mut group) in eps.iter().cloned().zip(groups) {
        let shared = shared.clone();
        let message = message.clone();
        handles.push(std::thread::spawn(move || -> u64 {
            let mut scratch = Vec::new();
            let mut sent = 0u64;
            let is_root = group.rank() == 0;
            loop {
                if shared.stop.load(Ordering::Acquire) {
                    return sent;
                }
                let mut work = false;
                while let Some(e) = ep.poll_event() {
                    work = true;
                    if let Event::PeerFailed { peer, .. } = e {
                        group.handle_peer_failed(peer);
                    }
                }
                if is_root && (group.can_send() || !group.is_busy()) {
                    let done = started.elapsed().as_secs_f64() >= seconds && sent >= 3;
                    let all_in = sent == 0
                        || shared.completions[sent as usize].load(Ordering::Acquire) == receivers;
                    if done || sent as usize >= SAMPLES_MAX {
                        // Stop once every receiver has the last message.
                        if all_in && !group.is_busy() {
                            shared.stop.store(true, Ordering::Release);
                            return sent;
                        }
                    } else if group.can_send() && group.send(&message).is_ok() {
                        sent += 1;
                        shared.sent_at.lock().unwrap().push(Instant::now());
                        work = true;
                    }
                }
                work |= group.step();
                work |= group.drain_writes(&mut scratch, |w, b| w.post(&*ep, b)) > 0;
                while let Some(e) = group.poll_event() {
                    work = true;
                    match e {
                        RdmcEvent::Completed { seq, .. } if !is_root => {
                            group.release();
                            let now = Instant::now();
                            let n =
                                shared.completions[seq as usize].fetch_add(1, Ordering::AcqRel) + 1;
                            if n == receivers {
                                let at = shared.sent_at.lock().unwrap()[seq as usize - 1];
                                shared
                                    .latencies_us
                                    .lock()
                                    .unwrap()
                                    .push(now.duration_since(at).as_secs_f64() * 1e6);
                            }
                        }
                        RdmcEvent::Failed { .. } => {
                            shared.failed.store(true, Ordering::Release);
                            shared.stop.store(true, Ordering::Release);
                        }
                        _ => {}
                    }
                }
                if !work {
                    ep.wait(Duration::from_micros(200));
                }
            }
        }));
    }
    let mut msgs = 0;
    for h in handles {
        msgs = msgs.max(h.join().map_err(|_| "a node thread panicked")?);
    }
    let secs = started.elapsed().as_secs_f64();
    for ep in &eps {
        ep.close();
    }
    if shared.failed.load(Ordering::Acquire) {
        return Err("the RDMC group failed during the run".into());
    }
    let mut lat = shared.latencies_us.lock().unwrap().clone();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            0.0
        } else {
            let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
            (lat[i] * 100.0).round() / 100.0
        }
    };
    let json = serde_json::json!({
        "backend": args.backend,
        "schedule": schedule.name(),
        "nodes": args.nodes,
        "size": args.size,
        "block_bytes": args.block_bytes,
        "window": args.window,
        "msgs": msgs,
        "msgs_per_s": ((msgs as f64 / secs) * 100.0).round() / 100.0,
        "bytes_per_s": (msgs as f64 * args.size as f64 / secs).round(),
        "lat_p50_us": pct(0.5),
        "lat_p99_us": pct(0.99),
    });
    println!("{json}");
    Ok(())
}
