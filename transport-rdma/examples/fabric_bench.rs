//! Fabric benchmark: one-sided write throughput and round-trip latency between two
//! processes (or, for `sim`, two endpoints of one simulated world).
//!
//! ```text
//! cargo run --release -p spindle-transport-rdma --example fabric_bench -- \
//!     --backend <sim|tcp|tcp-noise|tcp-auth|shm> --size <bytes> --seconds <s>
//! (`tcp-noise`: tcp links with a domain secret, encrypted; `tcp-auth`: authenticated only)
//! cargo run --release -p spindle-transport-rdma --example fabric_bench -- \
//!     --reference memcpy --size <bytes> --seconds <s>
//! ```
//!
//! Throughput: the initiator writes `size` bytes into the target's region over and over; every
//! `ack_every` writes it publishes a counter with `write_then_release`, the target echoes
//! the counter back into the initiator's region, and the initiator keeps at most
//! `WINDOW_BYTES_MAX` bytes unacknowledged, so the figure is what the target actually
//! received, not what was queued. Latency: a ping-pong of `size`-byte guarded writes, one
//! at a time; the round trip is measured at the initiator.
//!
//! The last line printed is one JSON object:
//! `{"backend","size","seconds","writes","writes_per_s","bytes_per_s","rtt_samples","rtt_p50_us","rtt_p99_us"}`.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use spindle_transport_rdma::{
    open_backend, DomainSecret, Endpoint, Error, Event, FabricConfig, NodeId, Region,
    WRITE_BYTES_MAX,
};

/// Region ids used by the benchmark.
const DATA_REGION: u32 = 1;
/// Offsets inside the data region: the throughput guard, the ping guard, then payload.
const GUARD_THROUGHPUT: usize = 0;
const GUARD_PING: usize = 8;
const PAYLOAD: usize = 64;
/// Most bytes the initiator may have written but not seen acknowledged.
const WINDOW_BYTES_MAX: usize = 32 << 20;
/// Most round-trip samples kept.
const RTT_SAMPLES_MAX: usize = 2_000_000;
/// A peer that makes no progress for this long is given up on (not a measurement).
const STALL_GIVE_UP: Duration = Duration::from_secs(60);

const INITIATOR: NodeId = 1;
const TARGET: NodeId = 2;

#[derive(Parser, Debug)]
#[command(about = "Spindle DDS fabric benchmark")]
struct Args {
    /// Backend: sim, tcp, shm (or a feature-gated one such as libfabric).
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// libfabric provider (`tcp` or `shm`), with `--backend libfabric`.
    #[arg(long)]
    provider: Option<String>,
    /// Reference workload instead of a fabric: `memcpy`.
    #[arg(long)]
    reference: Option<String>,
    /// Write size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Total measuring time in seconds (half throughput, half latency).
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Microseconds a guard is spun on before parking on the doorbell.
    #[arg(long, default_value_t = SPIN_BEFORE_PARK_US_DEFAULT)]
    spin_us: u64,
    /// Internal: play the target side, connecting to this initiator address.
    #[arg(long, hide = true)]
    target_of: Option<String>,
}

fn main() {
    let args = Args::parse();
    SPIN_BEFORE_PARK_US.store(args.spin_us, Ordering::Relaxed);
    let result = if let Some(reference) = &args.reference {
        reference_run(reference, &args)
    } else if let Some(initiator) = &args.target_of {
        target_main(&args, initiator)
    } else if args.backend == "sim" {
        sim_run(&args)
    } else {
        initiator_main(&args)
    };
    if let Err(e) = result {
        eprintln!("fabric_bench: {e}");
        std::process::exit(1);
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn backend_name(args: &Args) -> String {
    match (&args.backend[..], &args.provider) {
        ("libfabric", Some(p)) => format!("libfabric-{p}"),
        _ => args.backend.clone(),
    }
}

fn check_size(args: &Args) -> Result<(), BoxError> {
    if args.size == 0 || args.size > WRITE_BYTES_MAX {
        return Err(format!("--size must be 1..={WRITE_BYTES_MAX} bytes").into());
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err("--seconds must be in (0, 3600]".into());
    }
    Ok(())
}

/// Opens an endpoint and its data region.
fn open(args: &Args, node: NodeId) -> Result<(Arc<dyn Endpoint>, Region), BoxError> {
    // `tcp-noise`: tcp with a domain secret (Noise handshake, encrypted records);
    // `tcp-auth`: the same handshake, frames in clear afterwards.
    let (name, cfg) = match args.backend.as_str() {
        "tcp-noise" | "tcp-auth" => (
            "tcp".to_string(),
            FabricConfig {
                domain_secret: Some(DomainSecret::new(b"fabric_bench domain secret")?),
                encrypt_links: args.backend == "tcp-noise",
                ..FabricConfig::default()
            },
        ),
        _ => (backend_name(args), FabricConfig::default()),
    };
    let ep = open_backend(&name, node, cfg)?;
    let region = ep.register_region(DATA_REGION, PAYLOAD + args.size)?;
    Ok((ep, region))
}

/// Waits until `peer` is connected and its data region is known.
fn await_peer(ep: &dyn Endpoint, peer: NodeId, pump: &mut dyn FnMut()) -> Result<(), BoxError> {
    let start = Instant::now();
    loop {
        while let Some(event) = ep.poll_event() {
            if let Event::PeerFailed { peer: p, reason } = event {
                if p == peer {
                    return Err(format!("peer {peer} failed during set-up: {reason}").into());
                }
            }
        }
        if ep.peers().contains(&peer) && ep.remote_region(peer, DATA_REGION).is_some() {
            return Ok(());
        }
        if start.elapsed() > STALL_GIVE_UP {
            return Err(format!("peer {peer} did not connect").into());
        }
        pump();
        ep.wait(Duration::from_millis(1));
    }
}

/// Retries a write or send while the outbound queue is full.
fn retry(
    ep: &dyn Endpoint,
    pump: &mut dyn FnMut(),
    mut op: impl FnMut() -> Result<(), Error>,
) -> Result<(), BoxError> {
    let start = Instant::now();
    loop {
        match op() {
            Ok(()) => return Ok(()),
            Err(Error::QueueFull { .. }) if start.elapsed() < STALL_GIVE_UP => {
                pump();
                ep.wait(Duration::from_micros(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long a guard is spun on before parking on the doorbell: long enough that a
/// ping-pong partner is still spinning when the answer lands (a futex wake costs tens of
/// microseconds), short enough that on a machine with fewer cores than busy threads the
/// backend's own threads get the CPU.
const SPIN_BEFORE_PARK_US_DEFAULT: u64 = 100;
/// The spin budget of this run (`--spin-us`), set once in `main`.
static SPIN_BEFORE_PARK_US: AtomicU64 = AtomicU64::new(SPIN_BEFORE_PARK_US_DEFAULT);

fn spin_before_park() -> Duration {
    Duration::from_micros(SPIN_BEFORE_PARK_US.load(Ordering::Relaxed))
}

/// Waits until the word at `offset` of `region` reaches `value` (or beyond): spins a
/// little, then parks on the endpoint's doorbell.
fn spin_until(
    ep: &dyn Endpoint,
    region: &Region,
    offset: usize,
    value: u64,
    pump: &mut dyn FnMut(),
) -> Result<(), BoxError> {
    let mut spins: u64 = 0;
    let mut since = Instant::now();
    let mut last = region.load_u64(offset);
    while last < value {
        spins += 1;
        if spins % 64 == 0 && since.elapsed() > spin_before_park() {
            ep.wait(Duration::from_millis(1));
        }
        if spins % 256 == 0 {
            pump();
            if let Some(Event::PeerFailed { peer, reason }) = ep.poll_event() {
                return Err(format!("peer {peer} failed: {reason}").into());
            }
        }
        if spins % 4096 == 0 && since.elapsed() > STALL_GIVE_UP {
            return Err(format!("no progress at offset {offset} for {STALL_GIVE_UP:?}").into());
        }
        std::hint::spin_loop();
        let now = region.load_u64(offset);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Ok(())
}

struct Figures {
    writes: u64,
    throughput_s: f64,
    rtts_ns: Vec<u64>,
}

/// The initiator side: throughput, then ping-pong. `pump` advances a simulated world.
fn initiator_work(
    ep: &dyn Endpoint,
    region: &Region,
    args: &Args,
    pump: &mut dyn FnMut(),
) -> Result<Figures, BoxError> {
    let payload = vec![0xA5u8; args.size];
    let half = Duration::from_secs_f64(args.seconds / 2.0);
    let window_writes = (WINDOW_BYTES_MAX / args.size).clamp(4, 1 << 16) as u64;
    let ack_every = (window_writes / 4).max(1);

    // Throughput.
    let start = Instant::now();
    let mut writes: u64 = 0;
    while start.elapsed() < half {
        for _ in 0..ack_every {
            retry(ep, pump, || {
                ep.write(TARGET, DATA_REGION, PAYLOAD, &payload)
            })?;
            writes += 1;
        }
        retry(ep, pump, || {
            ep.write_then_release(TARGET, DATA_REGION, PAYLOAD, &[], GUARD_THROUGHPUT, writes)
        })?;
        // Keep at most a window outstanding.
        let acked_at_least = writes.saturating_sub(window_writes);
        spin_until(ep, region, GUARD_THROUGHPUT, acked_at_least, pump)?;
    }
    spin_until(ep, region, GUARD_THROUGHPUT, writes, pump)?;
    let throughput_s = start.elapsed().as_secs_f64();

    // Latency: ping-pong of guarded writes.
    let mut rtts_ns = Vec::new();
    let start = Instant::now();
    let mut ping: u64 = 0;
    while start.elapsed() < half && rtts_ns.len() < RTT_SAMPLES_MAX {
        ping += 1;
        let sent = Instant::now();
        retry(ep, pump, || {
            ep.write_then_release(TARGET, DATA_REGION, PAYLOAD, &payload, GUARD_PING, ping)
        })?;
        spin_until(ep, region, GUARD_PING, ping, pump)?;
        rtts_ns.push(sent.elapsed().as_nanos() as u64);
    }
    // Tell the target we are done (ping guard u64::MAX).
    retry(ep, pump, || {
        ep.write_then_release(TARGET, DATA_REGION, 0, &[], GUARD_PING, u64::MAX)
    })?;
    Ok(Figures {
        writes,
        throughput_s,
        rtts_ns,
    })
}

/// The target side: echo throughput counters and pings until the initiator says done.
/// Returns false while there is more to do (for the simulated, single-threaded run).
struct Target {
    acked: u64,
    ponged: u64,
    payload: Vec<u8>,
}

impl Target {
    fn new(size: usize) -> Self {
        Target {
            acked: 0,
            ponged: 0,
            payload: vec![0x5Au8; size],
        }
    }

    /// One pass over the guards; returns Ok(true) once the initiator is done.
    fn step(&mut self, ep: &dyn Endpoint, region: &Region) -> Result<bool, BoxError> {
        let count = region.load_u64(GUARD_THROUGHPUT);
        if count != self.acked {
            self.acked = count;
            let op =
                || ep.write_then_release(INITIATOR, DATA_REGION, 0, &[], GUARD_THROUGHPUT, count);
            retry(ep, &mut || {}, op)?;
        }
        let ping = region.load_u64(GUARD_PING);
        if ping == u64::MAX {
            return Ok(true);
        }
        if ping != self.ponged {
            self.ponged = ping;
            let payload = &self.payload;
            let op = || {
                ep.write_then_release(INITIATOR, DATA_REGION, PAYLOAD, payload, GUARD_PING, ping)
            };
            retry(ep, &mut || {}, op)?;
        }
        Ok(false)
    }
}

fn target_main(args: &Args, initiator_addr: &str) -> Result<(), BoxError> {
    check_size(args)?;
    let (ep, region) = open(args, TARGET)?;
    ep.connect(INITIATOR, initiator_addr)?;
    await_peer(&*ep, INITIATOR, &mut || {})?;
    let mut target = Target::new(args.size);
    let mut idle_spins: u64 = 0;
    let mut since = Instant::now();
    loop {
        let before = (target.acked, target.ponged);
        if target.step(&*ep, &region)? {
            break;
        }
        if (target.acked, target.ponged) != before {
            since = Instant::now();
            idle_spins = 0;
            continue;
        }
        idle_spins += 1;
        if idle_spins % 64 == 0 && since.elapsed() > spin_before_park() {
            ep.wait(Duration::from_millis(1));
        }
        if idle_spins % 1024 == 0 {
            match ep.poll_event() {
                Some(Event::PeerFailed { peer, reason }) => {
                    return Err(format!("initiator {peer} failed: {reason}").into())
                }
                _ if since.elapsed() > STALL_GIVE_UP => {
                    return Err("initiator made no progress".into())
                }
                _ => {}
            }
        }
        std::hint::spin_loop();
    }
    ep.close();
    Ok(())
}

fn initiator_main(args: &Args) -> Result<(), BoxError> {
    check_size(args)?;
    let (ep, region) = open(args, INITIATOR)?;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--backend", &args.backend, "--size", &args.size.to_string()])
        .args(["--spin-us", &args.spin_us.to_string()])
        .args(
            args.provider
                .iter()
                .flat_map(|p| ["--provider", p.as_str()]),
        )
        .args(["--target-of", &ep.address()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take();
    let result = await_peer(&*ep, TARGET, &mut || {})
        .and_then(|()| initiator_work(&*ep, &region, args, &mut || {}));
    let status = child.wait()?;
    if let Some(out) = stdout {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            eprintln!("target: {line}");
        }
    }
    let figures = result?;
    if !status.success() {
        return Err(format!("target process exited with {status}").into());
    }
    ep.close();
    report(args, &figures);
    Ok(())
}

/// Both endpoints in one simulated world, driven from this thread. Throughput and latency
/// are wall-clock figures of the simulator itself (its cost), not of a network.
fn sim_run(args: &Args) -> Result<(), BoxError> {
    check_size(args)?;
    use spindle_transport_rdma::sim::{SimConfig, SimWorld};
    let world = SimWorld::new(0x5eed, SimConfig::default());
    let a = world.endpoint(INITIATOR);
    let b = world.endpoint(TARGET);
    let ra = a.register_region(DATA_REGION, PAYLOAD + args.size)?;
    let rb = b.register_region(DATA_REGION, PAYLOAD + args.size)?;
    a.connect(TARGET, &b.address())?;
    let mut target = Target::new(args.size);
    let b_dyn: Arc<dyn Endpoint> = b.clone();
    let mut pump = || {
        world.run_until_idle(1 << 20);
        while b_dyn.poll_event().is_some() {}
        // The target's echo is part of the world's progress.
        let _ = target.step(&*b_dyn, &rb);
        world.run_until_idle(1 << 20);
    };
    await_peer(&*a, TARGET, &mut pump)?;
    let figures = initiator_work(&*a, &ra, args, &mut pump)?;
    report(args, &figures);
    Ok(())
}

fn percentile_us(sorted_ns: &[u64], p: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted_ns.len() - 1) as f64).round() as usize;
    sorted_ns[rank.min(sorted_ns.len() - 1)] as f64 / 1000.0
}

fn report(args: &Args, figures: &Figures) {
    let mut rtts = figures.rtts_ns.clone();
    rtts.sort_unstable();
    let writes_per_s = figures.writes as f64 / figures.throughput_s;
    let bytes_per_s = writes_per_s * args.size as f64;
    eprintln!(
        "{}: {} B writes: {:.0} writes/s, {:.1} MB/s; rtt p50 {:.1} us, p99 {:.1} us ({} samples)",
        backend_name(args),
        args.size,
        writes_per_s,
        bytes_per_s / 1e6,
        percentile_us(&rtts, 50.0),
        percentile_us(&rtts, 99.0),
        rtts.len()
    );
    let json = serde_json::json!({
        "backend": backend_name(args),
        "size": args.size,
        "seconds": args.seconds,
        "writes": figures.writes,
        "writes_per_s": writes_per_s.round(),
        "bytes_per_s": bytes_per_s.round(),
        "rtt_samples": rtts.len(),
        "rtt_p50_us": (percentile_us(&rtts, 50.0) * 100.0).round() / 100.0,
        "rtt_p99_us": (percentile_us(&rtts, 99.0) * 100.0).round() / 100.0,
    });
    println!("{json}");
    let _ = std::io::stdout().flush();
}

/// Reference figures measured with the same sizes: `memcpy` copies `size` bytes between
/// two buffers (as large as the region the fabric writes into) for the given time.
fn reference_run(reference: &str, args: &Args) -> Result<(), BoxError> {
    check_size(args)?;
    if reference != "memcpy" {
        return Err(format!("unknown reference {reference:?} (expected memcpy)").into());
    }
    let src = vec![0xA5u8; args.size];
    let mut dst = vec![0u8; args.size];
    let deadline = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut copies: u64 = 0;
    while start.elapsed() < deadline {
        for _ in 0..64 {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        copies += 64;
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes_per_s = copies as f64 * args.size as f64 / secs;
    eprintln!("memcpy: {} B: {:.1} MB/s", args.size, bytes_per_s / 1e6);
    let json = serde_json::json!({
        "reference": "memcpy",
        "size": args.size,
        "seconds": args.seconds,
        "copies_per_s": (copies as f64 / secs).round(),
        "bytes_per_s": bytes_per_s.round(),
    });
    println!("{json}");
    Ok(())
}
