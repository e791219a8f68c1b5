//! Virtual synchrony across real processes: members that multicast, get SIGKILLed and
//! rejoin, over tcp or shm on loopback.
//!
//! * `spindle-group-vs node --id N --nodes K --backend tcp --messages M --log FILE` runs
//!   one member (the driver starts it): it prints `ADDR <address>`, reads
//!   `PEERS 1=<a> 2=<b> ...` (or `JOIN 1=<a> ...` to join a running group), sends `M`
//!   messages in one atomic subgroup of every member, logs each delivery as
//!   `<vid> <global_index> <sender> <counter>`, prints `VIEW <vid> <unix_ns> <members>`
//!   for each view, and prints `DONE` once it delivered an end marker from every member of
//!   the current view; it exits when its stdin ends (or says `EXIT`).
//! * `spindle-group-vs kills --backend tcp --nodes 5 --kills 50` measures the time from
//!   SIGKILL to the new view installed at every survivor, restarting the victim as a
//!   joiner after each kill, and prints one JSON line with p50 and p99 in ms.
//! * `spindle-group-vs pauses --backend tcp --nodes 3 --pauses 50` measures the time from
//!   SIGSTOP to the new view (without the stopped member) installed at every survivor;
//!   then resumes the member (SIGCONT), checks that it exits with the "excluded" error,
//!   and restarts it as a joiner. Its last line is one JSON object with
//!   `pause_to_view_ms_p50`, `_p99`, `_max` and `false_suspicions` (live members that
//!   left a view).
//! * `spindle-group-vs soak --backend tcp --nodes 3 --seconds 600` streams unpaced from
//!   every member and counts live members suspected (run it beside a CPU hog).
//!
//! The failure-detector flags (`--probe-interval-ms`, `--suspect-floor-ms`,
//! `--suspect-ceiling-ms`, `--suspect-deviations`) override the fabric defaults of every
//! member.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args as ClapArgs, Parser, Subcommand};
use spindle_group::runtime::{Application, GroupNode};
use spindle_group::{DeliveryBatch, Group, GroupConfig, Layout, View, ViewInstalled};
use spindle_transport_rdma::{open_backend, DomainSecret, Endpoint, FabricConfig, NodeId};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser, Debug)]
#[command(about = "Virtual synchrony across processes")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One member.
    Node {
        #[arg(long)]
        id: NodeId,
        #[arg(long, default_value = "tcp")]
        backend: String,
        /// Messages to send (0: send until stdin says STOP).
        #[arg(long, default_value_t = 2000)]
        messages: u64,
        /// Delivery log.
        #[arg(long)]
        log: Option<std::path::PathBuf>,
        /// Pause between two sends of an endless sender, in microseconds (0: none).
        #[arg(long, default_value_t = 200)]
        pace_us: u64,
        /// Print `RATE <unix_ns> <delivered>` this often (0: never).
        #[arg(long, default_value_t = 0)]
        rate_ms: u64,
        #[command(flatten)]
        fd: Detection,
        /// The domain secret (links are authenticated and, over tcp, encrypted); the
        /// environment's `SPINDLE_DOMAIN_SECRET` when the flag is absent.
        #[arg(long)]
        secret: Option<String>,
        /// Where a tcp member listens (`host:port`; default 127.0.0.1 on a free port):
        /// an address inside a network namespace, for the partition test.
        #[arg(long)]
        listen: Option<String>,
        /// Order the subgroup by DARE (`DeliveryMode::Dare`, the workloads' settings)
        /// instead of atomic multicast.
        #[arg(long)]
        dare: bool,
    },
    /// Throughput around a join: 4 members send unpaced, a fifth joins.
    JoinDip {
        #[arg(long, default_value = "tcp")]
        backend: String,
        #[arg(long, default_value_t = 4)]
        nodes: u32,
    },
    /// The kill benchmark.
    Kills {
        #[arg(long, default_value = "tcp")]
        backend: String,
        #[arg(long, default_value_t = 5)]
        nodes: u32,
        #[arg(long, default_value_t = 50)]
        kills: u32,
    },
    /// The pause benchmark: SIGSTOP a member, time the view without it, SIGCONT it.
    Pauses {
        #[arg(long, default_value = "tcp")]
        backend: String,
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        #[arg(long, default_value_t = 50)]
        pauses: u32,
        /// Pause between two sends of every member, in microseconds (0: unpaced).
        #[arg(long, default_value_t = 200)]
        pace_us: u64,
        #[command(flatten)]
        fd: Detection,
    },
    /// The soak: every member streams; count live members suspected.
    Soak {
        #[arg(long, default_value = "tcp")]
        backend: String,
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Pause between two sends of every member, in microseconds (0: unpaced).
        #[arg(long, default_value_t = 0)]
        pace_us: u64,
        #[command(flatten)]
        fd: Detection,
    },
}

/// Failure-detector overrides (unset: the fabric's defaults).
#[derive(ClapArgs, Debug, Clone, Default)]
struct Detection {
    #[arg(long)]
    probe_interval_ms: Option<u64>,
    #[arg(long)]
    suspect_floor_ms: Option<u64>,
    #[arg(long)]
    suspect_ceiling_ms: Option<u64>,
    #[arg(long)]
    suspect_deviations: Option<u32>,
}

impl Detection {
    fn fabric(&self) -> FabricConfig {
        let d = FabricConfig::default();
        FabricConfig {
            probe_interval_ms: self.probe_interval_ms.unwrap_or(d.probe_interval_ms),
            suspect_floor_ms: self.suspect_floor_ms.unwrap_or(d.suspect_floor_ms),
            suspect_ceiling_ms: self.suspect_ceiling_ms.unwrap_or(d.suspect_ceiling_ms),
            suspect_deviations: self.suspect_deviations.unwrap_or(d.suspect_deviations),
            ..d
        }
    }

    /// The same overrides as command-line flags for a member.
    fn flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |name: &str, v: Option<u64>| {
            if let Some(v) = v {
                out.push(format!("--{name}"));
                out.push(v.to_string());
            }
        };
        add("probe-interval-ms", self.probe_interval_ms);
        add("suspect-floor-ms", self.suspect_floor_ms);
        add("suspect-ceiling-ms", self.suspect_ceiling_ms);
        add("suspect-deviations", self.suspect_deviations.map(u64::from));
        out
    }
}

/// The one subgroup: every member, every member sends, atomic.
fn layout(view: &View) -> Result<Layout, String> {
    Ok(Layout::one_subgroup(view, 0, 64, 64))
}

/// [`layout`] with the subgroup ordered by DARE.
fn dare_layout(view: &View) -> Result<Layout, String> {
    let mut l = layout(view)?;
    for s in &mut l.subgroups {
        s.mode = spindle_group::DeliveryMode::Dare(
            spindle_bench::workload::workload_dare_settings(s.window_slots),
        );
    }
    Ok(l)
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A counter `u64::MAX` marks "this sender is done".
const END: u64 = u64::MAX;

struct App {
    me: NodeId,
    log: Option<std::io::BufWriter<std::fs::File>>,
    view: Vec<NodeId>,
    vid: u32,
    ended: BTreeSet<NodeId>,
    finished: mpsc::Sender<String>,
    said_done: bool,
    delivered: Arc<std::sync::atomic::AtomicU64>,
}

impl App {
    fn check_done(&mut self) {
        if !self.said_done && self.view.iter().all(|m| self.ended.contains(m)) {
            self.said_done = true;
            if let Some(l) = &mut self.log {
                let _ = l.flush();
            }
            let _ = self.finished.send("done".into());
        }
    }
}

impl Application for App {
    fn deliver(&mut self, batch: &DeliveryBatch) {
        self.delivered
            .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for m in batch.iter() {
            if self.said_done || m.payload.len() < 12 {
                continue;
            }
            let sender = u32::from_le_bytes(m.payload[0..4].try_into().unwrap_or([0; 4]));
            let counter = u64::from_le_bytes(m.payload[4..12].try_into().unwrap_or([0; 8]));
            if let Some(l) = &mut self.log {
                let _ = writeln!(l, "{} {} {} {}", self.vid, m.global_index, sender, counter);
            }
            if counter == END {
                self.ended.insert(sender);
            }
        }
        self.check_done();
    }

    fn view_installed(&mut self, v: &ViewInstalled) {
        self.vid = v.view.vid;
        self.view = v.view.members.clone();
        let members: Vec<String> = v.view.members.iter().map(|m| m.to_string()).collect();
        println!("VIEW {} {} {}", v.view.vid, unix_ns(), members.join(","));
        if let Some(l) = &mut self.log {
            let _ = writeln!(l, "VIEW {} {}", v.view.vid, members.join(","));
        }
        let _ = self.me;
        self.check_done();
    }

    fn stopped(&mut self, why: Option<&str>) {
        let _ = self
            .finished
            .send(format!("stopped: {}", why.unwrap_or("left")));
    }
}

fn parse_peers(rest: &str) -> Result<BTreeMap<NodeId, String>, BoxError> {
    let mut out = BTreeMap::new();
    for e in rest.split_whitespace() {
        let (n, a) = e.split_once('=').ok_or("bad peer entry")?;
        out.insert(n.parse()?, a.to_string());
    }
    Ok(out)
}

fn node_main(
    id: NodeId,
    ep: Arc<dyn Endpoint>,
    messages: u64,
    log: Option<std::path::PathBuf>,
    pace_us: u64,
    rate_ms: u64,
    dare: bool,
) -> Result<(), BoxError> {
    println!("ADDR {}", ep.address());
    std::io::stdout().flush()?;
    let mut stdin = BufReader::new(std::io::stdin());
    let mut line = String::new();
    stdin.read_line(&mut line)?;
    let line = line.trim().to_string();
    let mut cfg = if dare {
        GroupConfig::new(Arc::new(dare_layout))
    } else {
        GroupConfig::new(Arc::new(layout))
    };
    cfg.join_retry_us = 50_000;
    let group = if let Some(rest) = line.strip_prefix("PEERS ") {
        let peers = parse_peers(rest)?;
        let view = View::new(1, peers.keys().copied().collect());
        Group::bootstrap(&*ep, view, peers, cfg, 0)?
    } else if let Some(rest) = line.strip_prefix("JOIN ") {
        let contacts = parse_peers(rest)?
            .into_iter()
            .filter(|(n, _)| *n != id)
            .collect();
        Group::join(&*ep, contacts, cfg)?
    } else {
        return Err(format!("expected PEERS or JOIN, got {line:?}").into());
    };
    let (tx, rx) = mpsc::channel();
    let app = App {
        me: id,
        log: match log {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
            None => None,
        },
        view: Vec::new(),
        vid: 0,
        ended: BTreeSet::new(),
        finished: tx,
        said_done: false,
        delivered: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    if rate_ms > 0 {
        let d = Arc::clone(&app.delivered);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(rate_ms));
            println!(
                "RATE {} {}",
                unix_ns(),
                d.load(std::sync::atomic::Ordering::Relaxed)
            );
        });
    }
    let node = GroupNode::start(Arc::clone(&ep), group, app, 1_000)?;
    // `STOP` on stdin ends an endless sender; end of stdin (or `EXIT`) ends the process
    // once it is done (the driver waits for every member's DONE first, so no member
    // leaves while another still needs it for a majority).
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut l = String::new();
        while stdin.read_line(&mut l).is_ok_and(|n| n > 0) {
            match l.trim() {
                "STOP" => {
                    let _ = stop_tx.send(());
                }
                "EXIT" => break,
                _ => {}
            }
            l.clear();
        }
        let _ = stop_tx.send(());
        let _ = exit_tx.send(());
    });
    let mut counter = 0u64;
    let mut payload = [0u8; 48];
    payload[0..4].copy_from_slice(&id.to_le_bytes());
    loop {
        let last = (messages > 0 && counter == messages) || stop_rx.try_recv().is_ok();
        let c = if last { END } else { counter };
        payload[4..12].copy_from_slice(&c.to_le_bytes());
        node.send(0, &payload, Duration::from_secs(60))?;
        if last {
            break;
        }
        counter += 1;
        if messages == 0 && pace_us > 0 {
            // An endless sender paces itself (the kill benchmark measures view changes,
            // not throughput).
            std::thread::sleep(Duration::from_micros(pace_us));
        }
    }
    let result = rx.recv_timeout(Duration::from_secs(120))?;
    if result != "done" {
        return Err(result.into());
    }
    println!("DONE");
    std::io::stdout().flush()?;
    let _ = exit_rx.recv();
    drop(node);
    ep.close();
    Ok(())
}

struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

fn spawn_node(id: NodeId, backend: &str, messages: u64) -> Result<(Proc, String), BoxError> {
    spawn_node_with(id, backend, messages, &[])
}

fn spawn_node_with(
    id: NodeId,
    backend: &str,
    messages: u64,
    extra: &[&str],
) -> Result<(Proc, String), BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["node", "--id", &id.to_string(), "--backend", backend])
        .args(["--messages", &messages.to_string()])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out: ChildStdout = child.stdout.take().ok_or("no stdout")?;
    let err = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = mpsc::channel();
    let tx_err = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // A member's error output comes back as `ERR <line>` (and is echoed).
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("[node {id}] {l}");
            if tx_err.send(format!("ERR {l}")).is_err() {
                break;
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))?
        .strip_prefix("ADDR ")
        .ok_or("expected ADDR")?
        .to_string();
    Ok((Proc { child, lines: rx }, addr))
}

fn say(p: &mut Proc, line: &str) -> Result<(), BoxError> {
    let s = p.child.stdin.as_mut().ok_or("no stdin")?;
    writeln!(s, "{line}")?;
    s.flush()?;
    Ok(())
}

/// Waits until `p` prints a view with `vid` or above; returns the view's unix ns.
fn wait_view(p: &Proc, vid: u32, deadline: Instant) -> Result<u128, BoxError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = p.lines.recv_timeout(left)?;
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() == 4 && f[0] == "VIEW" && f[1].parse::<u32>()? >= vid {
            return Ok(f[2].parse()?);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn kills_main(backend: &str, nodes: u32, kills: u32) -> Result<(), BoxError> {
    let mut procs: BTreeMap<NodeId, Proc> = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=nodes {
        let (p, a) = spawn_node(id, backend, 0)?;
        procs.insert(id, p);
        addrs.insert(id, a);
    }
    let peers = |addrs: &BTreeMap<NodeId, String>| {
        addrs
            .iter()
            .map(|(n, a)| format!("{n}={a}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let line = format!("PEERS {}", peers(&addrs));
    for p in procs.values_mut() {
        say(p, &line)?;
    }
    let deadline = || Instant::now() + Duration::from_secs(60);
    for p in procs.values() {
        wait_view(p, 1, deadline())?;
    }
    let mut vid = 1;
    let mut samples_ms = Vec::new();
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(100));
        // Alternate the leader (the lowest id alive is rank 0 only at first; after
        // restarts, ranks move) and a follower.
        let victim = if k % 2 == 0 {
            1 + (k / 2) % nodes
        } else {
            nodes - (k / 2) % nodes
        };
        let mut p = procs.remove(&victim).ok_or("victim not running")?;
        let t_kill = unix_ns();
        p.child.kill()?;
        let _ = p.child.wait();
        vid += 1;
        let mut worst = 0u128;
        for q in procs.values() {
            let t = wait_view(q, vid, deadline())?;
            worst = worst.max(t.saturating_sub(t_kill));
        }
        samples_ms.push(worst as f64 / 1e6);
        // The victim restarts and rejoins.
        let (mut np, a) = spawn_node(victim, backend, 0)?;
        addrs.insert(victim, a);
        say(&mut np, &format!("JOIN {}", peers(&addrs)))?;
        vid += 1;
        wait_view(&np, vid, deadline())?;
        for q in procs.values() {
            wait_view(q, vid, deadline())?;
        }
        procs.insert(victim, np);
    }
    for p in procs.values_mut() {
        let _ = say(p, "STOP");
    }
    for p in procs.values_mut() {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    let mut sorted = samples_ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{}",
        serde_json::json!({
            "backend": backend,
            "nodes": nodes,
            "kills": kills,
            "kill_to_view_ms_p50": percentile(&sorted, 0.5),
            "kill_to_view_ms_p99": percentile(&sorted, 0.99),
            "kill_to_view_ms_max": sorted.last().copied().unwrap_or(f64::NAN),
        })
    );
    Ok(())
}

fn join_dip_main(backend: &str, nodes: u32) -> Result<(), BoxError> {
    let mut procs: BTreeMap<NodeId, Proc> = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=nodes {
        let extra: &[&str] = if id == 1 {
            &["--pace-us", "0", "--rate-ms", "10"]
        } else {
            &["--pace-us", "0"]
        };
        let (p, a) = spawn_node_with(id, backend, 0, extra)?;
        procs.insert(id, p);
        addrs.insert(id, a);
    }
    let peers: String = addrs
        .iter()
        .map(|(n, a)| format!("{n}={a}"))
        .collect::<Vec<_>>()
        .join(" ");
    for p in procs.values_mut() {
        say(p, &format!("PEERS {peers}"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (id, p) in &procs {
        if *id != 1 {
            wait_view(p, 1, deadline)?;
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let joiner = nodes + 1;
    let (mut jp, _) = spawn_node_with(joiner, backend, 0, &["--pace-us", "0"])?;
    let t_join = unix_ns();
    say(&mut jp, &format!("JOIN {peers}"))?;
    let t_joined = wait_view(&jp, 2, deadline)?;
    std::thread::sleep(Duration::from_millis(1500));
    // Node 1's delivery counter, every 10 ms.
    let mut rate: Vec<(u128, u64)> = Vec::new();
    let mut view2_at_1 = None;
    let p1 = procs.get(&1).ok_or("node 1")?;
    while let Ok(l) = p1.lines.try_recv() {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["RATE", t, c] => rate.push((t.parse()?, c.parse()?)),
            ["VIEW", "2", t, _] => view2_at_1 = Some(t.parse::<u128>()?),
            _ => {}
        }
    }
    for p in procs.values_mut().chain(std::iter::once(&mut jp)) {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    let per_s: Vec<(u128, f64)> = rate
        .windows(2)
        .map(|w| {
            let dt = (w[1].0 - w[0].0) as f64 / 1e9;
            (w[1].0, (w[1].1 - w[0].1) as f64 / dt.max(1e-9))
        })
        .collect();
    let mut before: Vec<f64> = per_s
        .iter()
        .filter(|(t, _)| *t < t_join && *t + 1_000_000_000 >= t_join)
        .map(|(_, r)| *r)
        .collect();
    before.sort_by(|a, b| a.total_cmp(b));
    let baseline = percentile(&before, 0.5);
    let around: Vec<f64> = per_s
        .iter()
        .filter(|(t, _)| *t >= t_join && *t <= t_join + 1_000_000_000)
        .map(|(_, r)| *r)
        .collect();
    let dip = around.iter().copied().fold(f64::INFINITY, f64::min);
    let below_half_ms = per_s
        .windows(2)
        .filter(|w| w[1].0 >= t_join && w[1].0 <= t_join + 1_000_000_000)
        .filter(|w| w[1].1 < baseline / 2.0)
        .map(|w| (w[1].0 - w[0].0) as f64 / 1e6)
        .sum::<f64>();
    println!(
        "{}",
        serde_json::json!({
            "backend": backend,
            "members_before_join": nodes,
            "baseline_msgs_per_s": baseline,
            "min_10ms_msgs_per_s_in_1s_after_join": dip,
            "min_over_baseline": dip / baseline,
            "ms_below_half_baseline": below_half_ms,
            "join_to_view_ms": (t_joined.saturating_sub(t_join)) as f64 / 1e6,
            "view_at_node1_ms": view2_at_1.map(|t| t.saturating_sub(t_join) as f64 / 1e6),
        })
    );
    Ok(())
}

/// One `VIEW` line: (vid, unix ns, members).
fn parse_view(l: &str) -> Option<(u32, u128, Vec<NodeId>)> {
    let f: Vec<&str> = l.split(' ').collect();
    if f.len() != 4 || f[0] != "VIEW" {
        return None;
    }
    let members = f[3].split(',').filter_map(|m| m.parse().ok()).collect();
    Some((f[1].parse().ok()?, f[2].parse().ok()?, members))
}

/// Waits until `p` installs a view for which `want` holds; returns (unix ns, members).
fn wait_view_where(
    p: &Proc,
    deadline: Instant,
    want: impl Fn(&[NodeId]) -> bool,
) -> Result<(u128, Vec<NodeId>), BoxError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = p.lines.recv_timeout(left)?;
        if let Some((_, t, members)) = parse_view(&l) {
            if want(&members) {
                return Ok((t, members));
            }
        }
    }
}

fn signal(p: &Proc, sig: &str) -> Result<(), BoxError> {
    let status = Command::new("kill")
        .args([sig, &p.child.id().to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill {sig} failed: {status}").into());
    }
    Ok(())
}

/// Running members and their addresses.
type Members = (BTreeMap<NodeId, Proc>, BTreeMap<NodeId, String>);

fn start_members(backend: &str, nodes: u32, extra: &[String]) -> Result<Members, BoxError> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut procs = BTreeMap::new();
    let mut addrs = BTreeMap::new();
    for id in 1..=nodes {
        let (p, a) = spawn_node_with(id, backend, 0, &extra)?;
        procs.insert(id, p);
        addrs.insert(id, a);
    }
    let line = format!("PEERS {}", peer_list(&addrs));
    for p in procs.values_mut() {
        say(p, &line)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for p in procs.values() {
        wait_view(p, 1, deadline)?;
    }
    Ok((procs, addrs))
}

fn peer_list(addrs: &BTreeMap<NodeId, String>) -> String {
    addrs
        .iter()
        .map(|(n, a)| format!("{n}={a}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn pauses_main(
    backend: &str,
    nodes: u32,
    pauses: u32,
    pace_us: u64,
    fd: &Detection,
) -> Result<(), BoxError> {
    fd.fabric().validate()?;
    let mut extra = fd.flags();
    extra.extend(["--pace-us".to_string(), pace_us.to_string()]);
    let (mut procs, mut addrs) = start_members(backend, nodes, &extra)?;
    let extra_refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    let deadline = || Instant::now() + Duration::from_secs(60);
    let mut samples_ms = Vec::new();
    let mut false_suspicions = 0u32;
    let mut excluded_errors = 0u32;
    for k in 0..pauses {
        std::thread::sleep(Duration::from_millis(200));
        // Alternate the leader and a follower, as `kills` does.
        let victim = if k % 2 == 0 {
            1 + (k / 2) % nodes
        } else {
            nodes - (k / 2) % nodes
        };
        let mut p = procs.remove(&victim).ok_or("victim not running")?;
        // Taken before `kill` runs: the figure includes its start-up (conservative).
        let t_pause = unix_ns();
        signal(&p, "-STOP")?;
        let mut worst = 0u128;
        let mut gone: BTreeSet<NodeId> = BTreeSet::new();
        for q in procs.values() {
            let (t, members) = wait_view_where(q, deadline(), |m| !m.contains(&victim))?;
            worst = worst.max(t.saturating_sub(t_pause));
            gone.extend(
                addrs
                    .keys()
                    .filter(|n| **n != victim && !members.contains(n)),
            );
        }
        samples_ms.push(worst as f64 / 1e6);
        signal(&p, "-CONT")?;
        // The woken member finds out it was excluded and exits with that error.
        let end = deadline();
        let mut said = None;
        while Instant::now() < end {
            match p.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with("ERR spindle-group-vs:") => {
                    said = Some(l);
                    break;
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        match &said {
            Some(l) if l.contains("excluded") => excluded_errors += 1,
            other => {
                eprintln!("pause {k}: node {victim} woke without the excluded error: {other:?}")
            }
        }
        let _ = p.child.kill();
        let _ = p.child.wait();
        // Live members that left the view were suspected falsely: restart them too.
        false_suspicions += gone.len() as u32;
        let mut restart = vec![victim];
        for n in &gone {
            eprintln!("pause {k}: live node {n} was suspected");
            if let Some(mut q) = procs.remove(n) {
                let _ = q.child.kill();
                let _ = q.child.wait();
            }
            restart.push(*n);
        }
        for n in restart {
            let (mut np, a) = spawn_node_with(n, backend, 0, &extra_refs)?;
            addrs.insert(n, a);
            say(&mut np, &format!("JOIN {}", peer_list(&addrs)))?;
            procs.insert(n, np);
        }
        // Every member, joiners included (their first view), reaches the full view.
        let all: Vec<NodeId> = addrs.keys().copied().collect();
        for q in procs.values() {
            wait_view_where(q, deadline(), |m| {
                m.len() == all.len() && all.iter().all(|n| m.contains(n))
            })?;
        }
    }
    for p in procs.values_mut() {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    let mut sorted = samples_ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let f = fd.fabric();
    println!(
        "{}",
        serde_json::json!({
            "backend": backend,
            "nodes": nodes,
            "pauses": pauses,
            "probe_interval_ms": f.probe_interval_ms,
            "suspect_floor_ms": f.suspect_floor_ms,
            "suspect_ceiling_ms": f.suspect_ceiling_ms,
            "suspect_deviations": f.suspect_deviations,
            "excluded_errors": excluded_errors,
            "pause_to_view_ms_p50": percentile(&sorted, 0.5),
            "pause_to_view_ms_p99": percentile(&sorted, 0.99),
            "pause_to_view_ms_max": sorted.last().copied().unwrap_or(f64::NAN),
            "false_suspicions": false_suspicions,
        })
    );
    Ok(())
}

fn soak_main(
    backend: &str,
    nodes: u32,
    seconds: u64,
    pace_us: u64,
    fd: &Detection,
) -> Result<(), BoxError> {
    fd.fabric().validate()?;
    let mut extra = fd.flags();
    extra.extend([
        "--pace-us".to_string(),
        pace_us.to_string(),
        "--rate-ms".to_string(),
        "1000".to_string(),
    ]);
    let (mut procs, _) = start_members(backend, nodes, &extra)?;
    let all: Vec<NodeId> = procs.keys().copied().collect();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut suspected: BTreeSet<NodeId> = BTreeSet::new();
    let mut views = 0u32;
    let mut delivered = BTreeMap::new();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        for (id, p) in &procs {
            while let Ok(l) = p.lines.try_recv() {
                if let Some((_, _, members)) = parse_view(&l) {
                    views += 1;
                    for n in all.iter().filter(|n| !members.contains(n)) {
                        if suspected.insert(*n) {
                            eprintln!("soak: live node {n} left the view (seen at node {id})");
                        }
                    }
                } else if let Some(rest) = l.strip_prefix("RATE ") {
                    if let Some(c) = rest.split(' ').nth(1).and_then(|c| c.parse::<u64>().ok()) {
                        delivered.insert(*id, c);
                    }
                }
            }
        }
    }
    for p in procs.values_mut() {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    let f = fd.fabric();
    let min_delivered = delivered.values().copied().min().unwrap_or(0);
    println!(
        "{}",
        serde_json::json!({
            "backend": backend,
            "nodes": nodes,
            "seconds": seconds,
            "pace_us": pace_us,
            "probe_interval_ms": f.probe_interval_ms,
            "suspect_floor_ms": f.suspect_floor_ms,
            "suspect_ceiling_ms": f.suspect_ceiling_ms,
            "suspect_deviations": f.suspect_deviations,
            "views_after_the_first": views,
            "min_delivered_per_member": min_delivered,
            "false_suspicions": suspected.len(),
        })
    );
    Ok(())
}

/// `fabric` with the domain secret of `--secret`, else of `SPINDLE_DOMAIN_SECRET`.
fn with_secret(fabric: FabricConfig, secret: Option<String>) -> Result<FabricConfig, BoxError> {
    let secret = secret.or_else(|| std::env::var("SPINDLE_DOMAIN_SECRET").ok());
    let domain_secret = match secret {
        Some(s) => Some(DomainSecret::new(s.as_bytes())?),
        None => None,
    };
    Ok(FabricConfig {
        domain_secret,
        ..fabric
    })
}

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Node {
            id,
            backend,
            messages,
            log,
            pace_us,
            rate_ms,
            fd,
            secret,
            listen,
            dare,
        } => with_secret(fd.fabric(), secret).and_then(|fabric| {
            let ep = match listen {
                Some(addr) if backend == "tcp" => {
                    let ep: Arc<dyn Endpoint> =
                        spindle_transport_rdma::tcp::TcpEndpoint::open(id, &addr, fabric)?;
                    ep
                }
                Some(_) => return Err("--listen is for the tcp backend".into()),
                None => open_backend(&backend, id, fabric)?,
            };
            node_main(id, ep, messages, log, pace_us, rate_ms, dare)
        }),
        Cmd::JoinDip { backend, nodes } => join_dip_main(&backend, nodes),
        Cmd::Kills {
            backend,
            nodes,
            kills,
        } => kills_main(&backend, nodes, kills),
        Cmd::Pauses {
            backend,
            nodes,
            pauses,
            pace_us,
            fd,
        } => pauses_main(&backend, nodes, pauses, pace_us, &fd),
        Cmd::Soak {
            backend,
            nodes,
            seconds,
            pace_us,
            fd,
        } => soak_main(&backend, nodes, seconds, pace_us, &fd),
    };
    if let Err(e) = r {
        eprintln!("spindle-group-vs: {e}");
        std::process::exit(1);
    }
}
