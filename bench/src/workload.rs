//! Derecho's `bandwidth_test` and `latency_test` workloads, ported (docs/design.md §8).
//!
//! `N` nodes form one view; every node is a member of subgroup 0 (and, with
//! `--layout overlapping`, nodes `2..=N` also form subgroup 1). All, half or one of the
//! members send `--messages` messages of `--size` bytes each; every node waits until it
//! has delivered everything. With `tcp` and `shm` the nodes are separate processes: node 1
//! (this process) starts the others as children of the same executable, hands out the
//! addresses, and collects their results; with `sim` the nodes are engines in one thread
//! over the deterministic simulator.
//!
//! The last line printed is one JSON object with at least
//! `{"backend","nodes","senders","size","mode","msgs_per_s","bytes_per_s","lat_p50_us","lat_p99_us"}`.
//! `msgs_per_s` is the mean over nodes of messages delivered per second; latency is from a
//! sender's commit to its own delivery of the message (in atomic mode: once every member
//! has it). With `--log DIR` each node writes `DIR/node-<id>.log`, one line per delivered
//! message: `<subgroup> <global_index> <sender_rank> <sender_seq> <size>`.
//!
//! A `--size` above the largest slot ([`spindle_group::layout::SLOT_PAYLOAD_BYTES_MAX`])
//! goes by RDMC inside the subgroup's total order (`ARCHITECTURE.md`, "Large messages"):
//! the subgroup gets slots of the largest size for the announcements and an RDMC
//! configuration (binomial pipeline, `--rdmc-block-bytes`, `--rdmc-window` messages in
//! flight per sender, `message_bytes_max` = `--size`), and each message is sent with
//! `Sender::try_send` (one copy into the registered send buffer) — the raw engine's side
//! of DCPS's large samples.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use spindle_transport_rdma::{open_backend, Endpoint, FabricConfig, NodeId};

use spindle_group::layout::{DeliveryMode, Layout, SubgroupSpec, View};
use spindle_group::rdmc::{RdmcConfig, ScheduleKind};
use spindle_group::runtime::{Node, NodeConfig};
use spindle_group::{EngineConfig, Error, Techniques};

/// Most nodes a workload run may start.
pub const WORKLOAD_NODES_MAX: usize = 16;
/// Most messages per sender in one run.
pub const WORKLOAD_MESSAGES_MAX: u64 = 100_000_000;
/// Most bytes of one message (`--size`): RDMC's largest message.
pub const WORKLOAD_MESSAGE_BYTES_MAX: usize = spindle_group::rdmc::RDMC_MESSAGE_BYTES_MAX;
/// Most latency samples a node keeps.
pub const LATENCY_SAMPLES_MAX: usize = 100_000;
/// In bandwidth runs, one message in this many (by sender seq) is timed; latency runs time
/// every message. Timing every message would make the harness, not the engine, the cost.
pub const LATENCY_SAMPLE_EVERY: u64 = 64;

/// Which members send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Senders {
    /// Every member.
    All,
    /// The first half of the members (rounded up).
    Half,
    /// The first member only.
    One,
}

/// Which subgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutKind {
    /// One subgroup of every node.
    Single,
    /// Subgroup 0 of every node and subgroup 1 of nodes `2..=N`.
    Overlapping,
}

/// Delivery mode on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Total order.
    Atomic,
    /// On receipt.
    Unordered,
    /// Leader-based total order (DARE, `spindle_group::dare`) in a subgroup of the
    /// engine (`DeliveryMode::Dare`): senders hand messages to the leader, which
    /// replicates its log with one-sided writes and commits on a majority. tcp and shm
    /// only; messages up to the largest slot.
    Dare,
    /// The same protocol as a group of its own beside the engine
    /// (`spindle_group::dare::runtime::DareMember`, the path before DARE was a delivery
    /// mode), kept to compare the two. tcp and shm only; `--layout single` only.
    DareStandalone,
}

/// The settings of the workloads' dare subgroups (and of `--mode dare-standalone`): a
/// log of 1,024 entries, heartbeats every 2 ms, elections after 100 ms of silence (the
/// loaded 2-core machines the workloads run on pause processes for tens of ms).
pub fn workload_dare_settings(window: usize) -> spindle_group::DareSettings {
    spindle_group::DareSettings {
        log_entries: 1024,
        sender_window: window.clamp(1, spindle_group::dare::DARE_SENDER_WINDOW_MAX),
        heartbeat_us: 2_000,
        election_timeout_us: 100_000,
    }
}

/// The workload's command line (shared by `bandwidth_test`, `latency_test` and
/// `spindle-group-perf`).
#[derive(Debug, Clone, Parser)]
#[command(about = "Spindle DDS multicast workloads (Derecho's bandwidth_test / latency_test)")]
pub struct Args {
    /// Fabric: sim, tcp or shm.
    #[arg(long, default_value = "shm")]
    pub backend: String,
    /// Nodes in the view.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Which members send.
    #[arg(long, value_enum, default_value = "all")]
    pub senders: Senders,
    /// Payload bytes per message.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Messages per sender.
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Delivery mode.
    #[arg(long, value_enum, default_value = "atomic")]
    pub mode: Mode,
    /// Subgroup layout.
    #[arg(long, value_enum, default_value = "single")]
    pub layout: LayoutKind,
    /// Slots per sender ring.
    #[arg(long, default_value_t = 256)]
    pub window: usize,
    /// Messages above the slot in flight per sender (RDMC `window_messages`).
    #[arg(long, default_value_t = 1)]
    pub rdmc_window: usize,
    /// RDMC block size in bytes (at most `--size`).
    #[arg(long, default_value_t = 1 << 20)]
    pub rdmc_block_bytes: usize,
    /// Latency mode: each sender keeps one message in flight (`latency_test`).
    #[arg(long)]
    pub latency: bool,
    /// Turn the four batching techniques off.
    #[arg(long)]
    pub no_batching: bool,
    /// Turn null-sends off.
    #[arg(long)]
    pub no_nulls: bool,
    /// Turn early lock release off (commits share a lock with the posting of writes).
    #[arg(long)]
    pub no_early_lock_release: bool,
    /// One upcall per message instead of per batch.
    #[arg(long)]
    pub no_batched_upcall: bool,
    /// Write each node's delivered sequence to `DIR/node-<id>.log`.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Give up (with an error) after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// The failure detector's floor (`FabricConfig::suspect_floor_ms`; the fabric's
    /// default when absent): tests on a loaded machine raise it so that scheduler stalls
    /// are not taken for hung members.
    #[arg(long)]
    pub suspect_floor_ms: Option<u64>,
    /// Internal: run as child node ID of a multi-process run.
    #[arg(long, hide = true)]
    pub child_id: Option<NodeId>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one node measured.
#[derive(Debug, Clone, Default)]
struct NodeResult {
    node: NodeId,
    delivered: u64,
    elapsed_s: f64,
    latencies_us: Vec<f64>,
    nulls_sent: u64,
    pushes: u64,
}

impl NodeResult {
    fn to_line(&self) -> String {
        let lats: Vec<String> = self
            .latencies_us
            .iter()
            .map(|l| format!("{l:.3}"))
            .collect();
        format!(
            "{} {} {} {} {} {}",
            self.node,
            self.delivered,
            self.elapsed_s,
            self.nulls_sent,
            self.pushes,
            if lats.is_empty() {
                "-".to_string()
            } else {
                lats.join(",")
            }
        )
    }

    fn from_line(line: &str) -> Result<NodeResult, BoxError> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 6 {
            return Err(format!("bad result line from a child: {line:?}").into());
        }
        let latencies_us = if f[5] == "-" {
            Vec::new()
        } else {
            f[5].split(',').map(str::parse).collect::<Result<_, _>>()?
        };
        Ok(NodeResult {
            node: f[0].parse()?,
            delivered: f[1].parse()?,
            elapsed_s: f[2].parse()?,
            nulls_sent: f[3].parse()?,
            pushes: f[4].parse()?,
            latencies_us,
        })
    }
}

impl Args {
    fn check(&self) -> Result<(), BoxError> {
        if !(1..=WORKLOAD_NODES_MAX).contains(&self.nodes) {
            return Err(format!("--nodes must be 1..={WORKLOAD_NODES_MAX}").into());
        }
        if self.messages == 0 || self.messages > WORKLOAD_MESSAGES_MAX {
            return Err(format!("--messages must be 1..={WORKLOAD_MESSAGES_MAX}").into());
        }
        if self.size == 0 || self.size > WORKLOAD_MESSAGE_BYTES_MAX {
            return Err(format!("--size must be 1..={WORKLOAD_MESSAGE_BYTES_MAX} bytes").into());
        }
        let dare = matches!(self.mode, Mode::Dare | Mode::DareStandalone);
        if let Some(rdmc) = self.rdmc() {
            if dare {
                return Err(format!(
                    "--mode dare takes at most {} bytes (--size {})",
                    spindle_group::layout::SLOT_PAYLOAD_BYTES_MAX,
                    self.size
                )
                .into());
            }
            rdmc.validate()
                .map_err(|e| format!("--size {} by RDMC: {e}", self.size))?;
        }
        if !["sim", "tcp", "shm"].contains(&self.backend.as_str()) {
            return Err(format!("--backend {}: expected sim, tcp or shm", self.backend).into());
        }
        if self.mode == Mode::DareStandalone && self.backend == "sim" {
            return Err("--mode dare-standalone runs over tcp or shm".into());
        }
        if self.mode == Mode::DareStandalone && self.layout != LayoutKind::Single {
            return Err("--mode dare-standalone runs with --layout single".into());
        }
        Ok(())
    }

    fn techniques(&self) -> Techniques {
        Techniques {
            null_sends: !self.no_nulls,
            early_lock_release: !self.no_early_lock_release,
            batched_upcall: !self.no_batched_upcall,
            ..Techniques::all()
        }
        .with_batching(!self.no_batching)
    }

    /// The RDMC configuration of the subgroups when `--size` exceeds the largest slot.
    pub fn rdmc(&self) -> Option<RdmcConfig> {
        (self.size > spindle_group::layout::SLOT_PAYLOAD_BYTES_MAX).then(|| RdmcConfig {
            block_bytes: self.rdmc_block_bytes.min(self.size.next_multiple_of(8)),
            message_bytes_max: self.size,
            schedule: ScheduleKind::BinomialPipeline,
            window_messages: self.rdmc_window,
        })
    }

    /// Bytes of a message's slot payload: `--size`, or the largest slot when the message
    /// goes by RDMC.
    fn slot_bytes(&self) -> usize {
        self.size.min(spindle_group::layout::SLOT_PAYLOAD_BYTES_MAX)
    }

    fn members(&self) -> Vec<NodeId> {
        (1..=self.nodes as NodeId).collect()
    }

    /// The layout every node computes from the arguments.
    pub fn layout(&self) -> Layout {
        let pick = |members: &[NodeId]| -> Vec<NodeId> {
            let n = match self.senders {
                Senders::All => members.len(),
                Senders::Half => members.len().div_ceil(2),
                Senders::One => 1,
            };
            members[..n].to_vec()
        };
        let mode = match self.mode {
            Mode::Atomic | Mode::DareStandalone => DeliveryMode::Atomic,
            Mode::Dare => DeliveryMode::Dare(workload_dare_settings(self.window)),
            Mode::Unordered => DeliveryMode::Unordered,
        };
        let spec = |id, members: Vec<NodeId>| SubgroupSpec {
            id,
            senders: pick(&members),
            members,
            mode,
            window_slots: self.window,
            slot_payload_bytes: self.slot_bytes(),
            rdmc: self.rdmc(),
            delivery_prefix: None,
        };
        let all = self.members();
        let mut subgroups = vec![spec(0, all.clone())];
        if self.layout == LayoutKind::Overlapping && all.len() > 1 {
            subgroups.push(spec(1, all[1..].to_vec()));
        }
        Layout { subgroups }
    }

    fn senders_label(&self) -> &'static str {
        match self.senders {
            Senders::All => "all",
            Senders::Half => "half",
            Senders::One => "one",
        }
    }
}

/// Runs the workload the arguments describe; prints the JSON line (node 1) or the result
/// line (a child). The entry point of the examples and of `spindle-group-perf`.
pub fn main_with(args: Args) {
    let result = args.check().and_then(|()| {
        if let Some(id) = args.child_id {
            child_main(&args, id)
        } else if args.backend == "sim" {
            sim_main(&args)
        } else {
            parent_main(&args)
        }
    });
    if let Err(e) = result {
        eprintln!("spindle-group workload: {e}");
        std::process::exit(1);
    }
}

// ----- one node over a real fabric ---------------------------------------------------

/// Runs node `me` over `ep` to the end of the workload.
fn run_node(
    args: &Args,
    ep: Arc<dyn Endpoint>,
    peers: BTreeMap<NodeId, String>,
) -> Result<NodeResult, BoxError> {
    if args.mode == Mode::DareStandalone {
        return run_dare_node(args, ep, peers);
    }
    let me = ep.node();
    let layout = args.layout();
    let view = View::new(1, args.members());
    let expected: u64 = layout
        .subgroups
        .iter()
        .filter(|s| s.members.contains(&me))
        .map(|s| s.senders.len() as u64 * args.messages)
        .sum();
    let mut cfg = NodeConfig::new(view, layout.clone(), peers);
    cfg.engine = EngineConfig {
        techniques: args.techniques(),
    };
    let delivered = Arc::new(AtomicU64::new(0));
    let done_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    // Commit instants of this node's own messages, by (subgroup, seq), for latency.
    let in_flight: Arc<Mutex<BTreeMap<(u32, u64), Instant>>> = Arc::default();
    let own_delivered = Arc::new(AtomicU64::new(0));
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut log = match &args.log {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(BufWriter::new(std::fs::File::create(
                dir.join(format!("node-{me}.log")),
            )?))
        }
        None => None,
    };
    let log_error: Arc<Mutex<Option<String>>> = Arc::default();
    let upcall = {
        let delivered = Arc::clone(&delivered);
        let done_at = Arc::clone(&done_at);
        let in_flight = Arc::clone(&in_flight);
        let own_delivered = Arc::clone(&own_delivered);
        let latencies = Arc::clone(&latencies);
        let log_error = Arc::clone(&log_error);
        let latency_mode = args.latency;
        move |batch: &spindle_group::DeliveryBatch| {
            let now = Instant::now();
            let mut line = String::new();
            for m in batch.iter() {
                if m.sender == me {
                    let sampled = latency_mode || m.sender_seq % LATENCY_SAMPLE_EVERY == 0;
                    let sent_at = if sampled {
                        in_flight
                            .lock()
                            .map_or(None, |mut f| f.remove(&(batch.subgroup(), m.sender_seq)))
                    } else {
                        None
                    };
                    if let Some(t) = sent_at {
                        let mut l = latencies.lock().unwrap_or_else(|p| p.into_inner());
                        if l.len() < LATENCY_SAMPLES_MAX {
                            l.push(now.duration_since(t).as_secs_f64() * 1e6);
                        }
                    }
                    own_delivered.fetch_add(1, Ordering::Release);
                }
                if let Some(w) = log.as_mut() {
                    if let Some(bad) = payload_fault(&m) {
                        let mut e = log_error.lock().unwrap_or_else(|p| p.into_inner());
                        e.get_or_insert(bad);
                    }
                    line.clear();
                    line.push_str(&m.log_line(batch.subgroup()));
                    line.push('\n');
                    if let Err(e) = w.write_all(line.as_bytes()) {
                        *log_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    }
                }
            }
            let total =
                delivered.fetch_add(batch.len() as u64, Ordering::AcqRel) + batch.len() as u64;
            if total >= expected {
                if let Some(w) = log.as_mut() {
                    if let Err(e) = w.flush() {
                        *log_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    }
                }
                done_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(now);
            }
        }
    };
    let node = Node::start(Arc::clone(&ep), cfg, upcall)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let start = Instant::now();
    let failed = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for spec in layout.subgroups.iter().filter(|s| s.senders.contains(&me)) {
        let sender = node.sender(spec.id)?;
        let in_flight = Arc::clone(&in_flight);
        let own_delivered = Arc::clone(&own_delivered);
        let failed = Arc::clone(&failed);
        let (messages, size, latency) = (args.messages, args.size, args.latency);
        let large = args.rdmc().is_some();
        let subgroup = spec.id;
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let payload = vec![FILL_BYTE; size];
            let mut sent = 0u64;
            let mut tries: u64 = 0;
            // Consecutive full windows (see `wait_room`).
            let mut full: u32 = 0;
            while sent < messages {
                tries += 1;
                if tries % 1024 == 0
                    && (Instant::now() > deadline || failed.load(Ordering::Acquire))
                {
                    return Err(format!(
                        "subgroup {subgroup}: sent only {sent} of {messages}"
                    ));
                }
                if large {
                    // By RDMC: one copy into the send buffer, announced in the next slot.
                    // The commit instant is recorded after the send returns its sequence
                    // number (a delivery that beats it only loses that latency sample).
                    let t = Instant::now();
                    match sender.try_send(&payload) {
                        Ok(seq) => {
                            if latency || seq % LATENCY_SAMPLE_EVERY == 0 {
                                in_flight
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .insert((subgroup, seq), t);
                            }
                            sent += 1;
                            full = 0;
                            if latency {
                                wait_own(&own_delivered, sent, deadline)?;
                            }
                        }
                        Err(Error::WindowFull { .. }) => wait_room(&sender, size, &mut full),
                        Err(e) => return Err(e.to_string()),
                    }
                    continue;
                }
                // Built in place in the slot lent for the call (no loan handle to count).
                let filled = sender.try_send_with(|slot| {
                    let seq = slot.seq();
                    slot.write_at(0, &payload)?;
                    if size >= 8 {
                        slot.write_at(0, &seq.to_le_bytes())?;
                    }
                    if latency || seq % LATENCY_SAMPLE_EVERY == 0 {
                        in_flight
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert((subgroup, seq), Instant::now());
                    }
                    Ok::<_, Error>(())
                });
                match filled.and_then(|f| f) {
                    Ok(_) => {
                        sent += 1;
                        full = 0;
                        if latency {
                            wait_own(&own_delivered, sent, deadline)?;
                        }
                    }
                    Err(Error::WindowFull { .. }) => wait_room(&sender, size, &mut full),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        }));
    }
    let mut errors = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("a sender thread panicked".into()),
        }
    }
    while delivered.load(Ordering::Acquire) < expected && errors.is_empty() {
        if let Some(e) = node.poll_event() {
            failed.store(true, Ordering::Release);
            errors.push(format!("{e:?}"));
            break;
        }
        if Instant::now() > deadline {
            errors.push(format!(
                "node {me}: delivered {} of {expected} in {} s",
                delivered.load(Ordering::Acquire),
                args.timeout_s
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(e) = log_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        errors.push(format!("logging the deliveries: {e}"));
    }
    let stats = node.stop();
    if !errors.is_empty() {
        return Err(errors.join("; ").into());
    }
    let end = done_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_else(Instant::now);
    let latencies_us = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(NodeResult {
        node: me,
        delivered: delivered.load(Ordering::Acquire),
        elapsed_s: end.duration_since(start).as_secs_f64(),
        latencies_us,
        nulls_sent: stats.nulls_sent,
        pushes: stats.pushes,
    })
}

/// With `--log`, every delivered payload is checked against what the senders write: the
/// fill byte `0xA5` throughout, except the first 8 bytes of a message sent through an
/// SMC slot, which carry its sequence number (little-endian) when the size allows. A
/// message corrupted on its way (a wrong offset, a torn or short copy) fails the run,
/// naming the message and the first bad byte.
fn payload_fault(m: &spindle_group::Message<'_>) -> Option<String> {
    let p = m.payload;
    if p.len() != m.full_len {
        return None; // a delivery prefix: only the first bytes are here
    }
    let seq_bytes = m.sender_seq.to_le_bytes();
    let seq_at_head = p.len() >= 8 && p[..8] == seq_bytes;
    let from = if seq_at_head { 8 } else { 0 };
    let bad = p[from..].iter().position(|&b| b != FILL_BYTE)?;
    let at = from + bad;
    Some(format!(
        "a corrupted delivery: message {} of sender {} ({} bytes): byte {at} is {:#04x}, \
         expected {FILL_BYTE:#04x}",
        m.sender_seq,
        m.sender,
        p.len(),
        p[at]
    ))
}

/// The byte every workload payload is filled with.
const FILL_BYTE: u8 = 0xA5;

/// A sender's window is full: [`spindle_group::Sender::back_off`] after `full` full
/// windows in a row, as `GroupNode::send` does (yield, then park until the window moves).
fn wait_room(sender: &spindle_group::Sender, len: usize, full: &mut u32) {
    *full = full.saturating_add(1);
    sender.back_off(len, *full, spindle_group::ROOM_WAIT_SLICE);
}

/// Latency mode: waits until this node delivered its own `sent` messages. Spins briefly,
/// then yields: on a machine with fewer cores than busy threads a pure spin starves the
/// predicate threads for whole scheduler slices.
fn wait_own(own_delivered: &AtomicU64, sent: u64, deadline: Instant) -> Result<(), String> {
    let mut waits: u64 = 0;
    while own_delivered.load(Ordering::Acquire) < sent {
        waits += 1;
        if waits % 1024 == 0 && Instant::now() > deadline {
            return Err("latency test: a message never came back".into());
        }
        if waits < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Runs node `me` of a DARE group over `ep` to the end of the workload: the same
/// senders, messages and measurements as the atomic mode (latency: from the hand-over to
/// the sender's own delivery, which comes once a majority holds the message).
fn run_dare_node(
    args: &Args,
    ep: Arc<dyn Endpoint>,
    peers: BTreeMap<NodeId, String>,
) -> Result<NodeResult, BoxError> {
    use spindle_group::dare::runtime::DareMember;
    use spindle_group::dare::DareConfig;
    let me = ep.node();
    let layout = args.layout();
    let spec = &layout.subgroups[0];
    let expected = spec.senders.len() as u64 * args.messages;
    let config: DareConfig = workload_dare_settings(args.window).config(args.size);
    let delivered = Arc::new(AtomicU64::new(0));
    let own_delivered = Arc::new(AtomicU64::new(0));
    let done_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let in_flight: Arc<Mutex<BTreeMap<u64, Instant>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let log_error: Arc<Mutex<Option<String>>> = Arc::default();
    let mut log = match &args.log {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(BufWriter::new(std::fs::File::create(
                dir.join(format!("node-{me}.log")),
            )?))
        }
        None => None,
    };
    let members = args.members();
    let upcall = {
        let log_error = Arc::clone(&log_error);
        let (delivered, own_delivered, done_at, in_flight, latencies) = (
            Arc::clone(&delivered),
            Arc::clone(&own_delivered),
            Arc::clone(&done_at),
            Arc::clone(&in_flight),
            Arc::clone(&latencies),
        );
        move |d: &spindle_group::dare::DareDelivery| {
            let now = Instant::now();
            if d.sender == me {
                let sent_at = in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&d.sender_seq);
                if let Some(t) = sent_at {
                    let mut l = latencies.lock().unwrap_or_else(|p| p.into_inner());
                    if l.len() < LATENCY_SAMPLES_MAX {
                        l.push(now.duration_since(t).as_secs_f64() * 1e6);
                    }
                }
                own_delivered.fetch_add(1, Ordering::Release);
            }
            if let Some(w) = log.as_mut() {
                // The same line as the engine's: subgroup 0, the log index as the global
                // index, the sender's rank, its sequence number, the size.
                let rank = members.iter().position(|&m| m == d.sender).unwrap_or(0);
                let line = format!(
                    "0 {} {rank} {} {}\n",
                    d.index,
                    d.sender_seq,
                    d.payload.len()
                );
                if let Err(e) = w.write_all(line.as_bytes()) {
                    *log_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
            }
            if delivered.fetch_add(1, Ordering::AcqRel) + 1 >= expected {
                if let Some(w) = log.as_mut() {
                    if let Err(e) = w.flush() {
                        *log_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    }
                }
                done_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(now);
            }
        }
    };
    let member = DareMember::start(
        Arc::clone(&ep),
        args.members(),
        &peers,
        config,
        Duration::from_secs(30),
        upcall,
    )?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    // Wait for the first leader, so that the measurement starts with the group ready.
    while member.leader().0.is_none() {
        if Instant::now() > deadline {
            return Err(format!("node {me}: no DARE leader elected").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let start = Instant::now();
    if spec.senders.contains(&me) {
        let payload = vec![FILL_BYTE; args.size];
        let mut sent = 0u64;
        while sent < args.messages {
            if Instant::now() > deadline {
                return Err(format!("node {me}: sent only {sent} of {}", args.messages).into());
            }
            let sampled_next = args.latency || (sent + 1) % LATENCY_SAMPLE_EVERY == 0;
            let t = Instant::now();
            match member.try_send(&payload) {
                Ok(seq) => {
                    if sampled_next {
                        in_flight
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(seq, t);
                    }
                    sent += 1;
                    if args.latency {
                        let mut waits = 0u64;
                        while own_delivered.load(Ordering::Acquire) < sent {
                            waits += 1;
                            if waits % 1024 == 0 && Instant::now() > deadline {
                                return Err("latency test: a message never came back".into());
                            }
                            if waits < 64 {
                                std::hint::spin_loop();
                            } else {
                                std::thread::yield_now();
                            }
                        }
                    }
                }
                Err(Error::DareWindowFull { .. }) => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
    }
    while delivered.load(Ordering::Acquire) < expected {
        if Instant::now() > deadline {
            return Err(format!(
                "node {me}: delivered {} of {expected} in {} s",
                delivered.load(Ordering::Acquire),
                args.timeout_s
            )
            .into());
        }
        if let Some(why) = member.stopped() {
            return Err(format!("node {me}: DARE member stopped: {why}").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(e) = log_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(format!("writing the log: {e}").into());
    }
    // The member keeps serving (a leader still writes entries and `commit` into slower
    // followers' logs) until the process exits: every node of a run stays up until node
    // 1 has collected all results.
    std::mem::forget(member);
    let end = done_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_else(Instant::now);
    let latencies_us = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(NodeResult {
        node: me,
        delivered: delivered.load(Ordering::Acquire),
        elapsed_s: end.duration_since(start).as_secs_f64(),
        latencies_us,
        nulls_sent: 0,
        pushes: 0,
    })
}

fn open(args: &Args, node: NodeId) -> Result<Arc<dyn Endpoint>, BoxError> {
    let d = FabricConfig::default();
    let cfg = FabricConfig {
        suspect_floor_ms: args.suspect_floor_ms.unwrap_or(d.suspect_floor_ms),
        ..d
    };
    Ok(open_backend(&args.backend, node, cfg)?)
}

struct Children {
    procs: Vec<(
        NodeId,
        Child,
        Option<ChildStdin>,
        BufReader<std::process::ChildStdout>,
    )>,
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child, stdin, _) in &mut self.procs {
            drop(stdin.take());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn read_line(r: &mut BufReader<std::process::ChildStdout>, what: &str) -> Result<String, BoxError> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(format!("a child exited before sending {what}").into());
    }
    Ok(line.trim_end().to_string())
}

fn parent_main(args: &Args) -> Result<(), BoxError> {
    let ep = open(args, 1)?;
    let exe = std::env::current_exe()?;
    let passed: Vec<String> = std::env::args().skip(1).collect();
    let mut children = Children { procs: Vec::new() };
    for id in 2..=args.nodes as NodeId {
        let mut child = Command::new(&exe)
            .args(&passed)
            .arg("--child-id")
            .arg(id.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("child stdout")?);
        children.procs.push((id, child, stdin, stdout));
    }
    let mut addresses = BTreeMap::new();
    addresses.insert(1, ep.address());
    for (id, _, _, out) in &mut children.procs {
        let line = read_line(out, "its address")?;
        let addr = line
            .strip_prefix("ADDR ")
            .ok_or_else(|| format!("child {id}: expected ADDR, got {line:?}"))?;
        addresses.insert(*id, addr.to_string());
    }
    let peers_line: String = addresses
        .iter()
        .map(|(id, a)| format!("{id}={a}"))
        .collect::<Vec<_>>()
        .join(" ");
    for (_, _, stdin, _) in &mut children.procs {
        let s = stdin.as_mut().ok_or("child stdin")?;
        writeln!(s, "PEERS {peers_line}")?;
        s.flush()?;
    }
    let mut peers = addresses.clone();
    peers.remove(&1);
    let mine = run_node(args, Arc::clone(&ep), peers)?;
    let mut results = vec![mine];
    for (id, _, _, out) in &mut children.procs {
        let line = read_line(out, "its result")?;
        let r = line
            .strip_prefix("DONE ")
            .ok_or_else(|| format!("child {id}: expected DONE, got {line:?}"))?;
        results.push(NodeResult::from_line(r)?);
    }
    for (_, _, stdin, _) in &mut children.procs {
        if let Some(s) = stdin.as_mut() {
            let _ = writeln!(s, "EXIT");
            let _ = s.flush();
        }
    }
    for (id, child, stdin, _) in &mut children.procs {
        drop(stdin.take());
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("child {id} exited with {status}").into());
        }
    }
    children.procs.clear();
    ep.close();
    print_summary(args, &results);
    Ok(())
}

fn child_main(args: &Args, id: NodeId) -> Result<(), BoxError> {
    let ep = open(args, id)?;
    let stdout = std::io::stdout();
    println!("ADDR {}", ep.address());
    stdout.lock().flush()?;
    let stdin = std::io::stdin();
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let list = line
        .trim_end()
        .strip_prefix("PEERS ")
        .ok_or_else(|| format!("expected PEERS, got {line:?}"))?;
    let mut peers = BTreeMap::new();
    for entry in list.split_whitespace() {
        let (n, a) = entry.split_once('=').ok_or("bad PEERS entry")?;
        let n: NodeId = n.parse()?;
        if n != id {
            peers.insert(n, a.to_string());
        }
    }
    let result = run_node(args, Arc::clone(&ep), peers)?;
    println!("DONE {}", result.to_line());
    stdout.lock().flush()?;
    // Stay linked until node 1 has every result: an early exit would look like a crash.
    line.clear();
    let _ = stdin.lock().read_line(&mut line);
    ep.close();
    Ok(())
}

// ----- all nodes in the simulator ----------------------------------------------------

/// Virtual time a round of `--backend sim` moves (µs).
const SIM_ROUND_STEP_US: u64 = 20;

fn sim_main(args: &Args) -> Result<(), BoxError> {
    use spindle_group::testkit::engine_cluster;
    use spindle_transport_rdma::sim::{SimConfig, SimWorld};
    let layout = args.layout();
    let view = View::new(1, args.members());
    // Every node in one thread on the simulated fabric; virtual time moves 20 µs a round.
    let mut sim = engine_cluster(
        SimWorld::new(1, SimConfig::default()),
        &view,
        &layout,
        EngineConfig {
            techniques: args.techniques(),
        },
        1,
        SIM_ROUND_STEP_US..SIM_ROUND_STEP_US + 1,
    )?;
    let ids: Vec<NodeId> = view.members.clone();
    let expected: Vec<u64> = ids
        .iter()
        .map(|id| {
            layout
                .subgroups
                .iter()
                .filter(|s| s.members.contains(id))
                .map(|s| s.senders.len() as u64 * args.messages)
                .sum()
        })
        .collect();
    let mut delivered = vec![0u64; ids.len()];
    let mut sent: BTreeMap<(NodeId, u32), u64> = BTreeMap::new();
    let mut in_flight: BTreeMap<(NodeId, u32, u64), Instant> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut logs: Vec<Option<BufWriter<std::fs::File>>> = Vec::new();
    for id in &ids {
        logs.push(match &args.log {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Some(BufWriter::new(std::fs::File::create(
                    dir.join(format!("node-{id}.log")),
                )?))
            }
            None => None,
        });
    }
    let payload = vec![FILL_BYTE; args.size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.timeout_s);
    while delivered.iter().zip(&expected).any(|(d, e)| d < e) {
        if Instant::now() > deadline {
            return Err(format!("sim: delivered {delivered:?} of {expected:?}").into());
        }
        for (i, &me) in ids.iter().enumerate() {
            for spec in layout.subgroups.iter().filter(|s| s.senders.contains(&me)) {
                let count = sent.entry((me, spec.id)).or_default();
                let own_pending = in_flight.keys().any(|(n, s, _)| *n == me && *s == spec.id);
                if *count < args.messages && !(args.latency && own_pending) {
                    let sender = sim.nodes[&me].engine.sender(spec.id)?;
                    while *count < args.messages {
                        if args.rdmc().is_some() {
                            match sender.try_send(&payload) {
                                Ok(seq) => {
                                    in_flight.insert((me, spec.id, seq), Instant::now());
                                    *count += 1;
                                    if args.latency {
                                        break;
                                    }
                                }
                                Err(Error::WindowFull { .. }) => break,
                                Err(e) => return Err(e.into()),
                            }
                            continue;
                        }
                        match sender.try_loan() {
                            Ok(mut loan) => {
                                loan.write_at(0, &payload)?;
                                in_flight.insert((me, spec.id, loan.seq()), Instant::now());
                                loan.commit();
                                *count += 1;
                                if args.latency {
                                    break;
                                }
                            }
                            Err(Error::WindowFull { .. }) => break,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            sim.step_node(me);
            let engine = &mut sim.nodes.get_mut(&me).ok_or("sim: node gone")?.engine;
            while let Some(batch) = engine.poll_delivery() {
                let now = Instant::now();
                for m in batch.iter() {
                    if m.sender == me {
                        if let Some(t) = in_flight.remove(&(me, batch.subgroup(), m.sender_seq)) {
                            if latencies.len() < LATENCY_SAMPLES_MAX {
                                latencies.push(now.duration_since(t).as_secs_f64() * 1e6);
                            }
                        }
                    }
                    if let Some(w) = logs[i].as_mut() {
                        writeln!(w, "{}", m.log_line(batch.subgroup()))?;
                    }
                }
                delivered[i] += batch.len() as u64;
            }
            if let Some(e) = engine.poll_event() {
                return Err(format!("node {me}: {e:?}").into());
            }
        }
        sim.advance();
    }
    let elapsed = start.elapsed().as_secs_f64();
    for w in logs.iter_mut().flatten() {
        w.flush()?;
    }
    let results: Vec<NodeResult> = sim
        .nodes
        .values()
        .zip(&delivered)
        .map(|(n, d)| NodeResult {
            node: n.ep.node(),
            delivered: *d,
            elapsed_s: elapsed,
            latencies_us: if n.ep.node() == 1 {
                latencies.clone()
            } else {
                Vec::new()
            },
            nulls_sent: n.engine.stats().nulls_sent,
            pushes: n.engine.stats().pushes,
        })
        .collect();
    print_summary(args, &results);
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn print_summary(args: &Args, results: &[NodeResult]) {
    let rates: Vec<f64> = results
        .iter()
        .map(|r| r.delivered as f64 / r.elapsed_s.max(1e-9))
        .collect();
    let msgs_per_s = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let mut lats: Vec<f64> = results
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    lats.sort_by(f64::total_cmp);
    let t = args.techniques();
    let json = serde_json::json!({
        "backend": args.backend,
        "nodes": args.nodes,
        "senders": args.senders_label(),
        "size": args.size,
        "mode": match args.mode {
            Mode::Atomic => "atomic",
            Mode::Unordered => "unordered",
            Mode::Dare => "dare",
            Mode::DareStandalone => "dare-standalone",
        },
        "layout": match args.layout { LayoutKind::Single => "single", LayoutKind::Overlapping => "overlapping" },
        "latency_mode": args.latency,
        "messages": args.messages,
        "window": args.window,
        "rdmc_window": args.rdmc().map(|r| r.window_messages),
        "rdmc_block_bytes": args.rdmc().map(|r| r.block_bytes),
        "msgs_per_s": msgs_per_s.round(),
        "bytes_per_s": (msgs_per_s * args.size as f64).round(),
        "lat_p50_us": (percentile(&lats, 0.5) * 10.0).round() / 10.0,
        "lat_p99_us": (percentile(&lats, 0.99) * 10.0).round() / 10.0,
        "batching": t.batch_sends,
        "null_sends": t.null_sends,
        "early_lock_release": t.early_lock_release,
        "batched_upcall": t.batched_upcall,
        "nulls_sent": results.iter().map(|r| r.nulls_sent).sum::<u64>(),
        "writes": results.iter().map(|r| r.pushes).sum::<u64>(),
    });
    println!("{json}");
}
