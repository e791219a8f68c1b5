//! The deterministic in-process simulator backend.
//!
//! A [`SimWorld`] hosts any number of [`SimEndpoint`]s in one process. Nothing happens on
//! its own: writes, sends and link set-up become *deliveries* queued with a virtual due
//! time, and the test (or the conformance harness) moves the world forward with
//! [`SimWorld::step`], [`SimWorld::run_until_idle`] or [`SimWorld::run_for`]. One `u64`
//! seed drives every random choice (per-delivery link delays), so a seed replays the same
//! run exactly; [`SimWorld::trace_hash`] fingerprints what was applied.
//!
//! Ordering: deliveries on one directed link keep issue order (a delivery is due at the
//! later of its drawn time and the previous delivery's time on that link); deliveries on
//! different links interleave by due time, ties broken by issue sequence number.
//!
//! Bandwidth (off by default): with [`SimConfig::link_rate_bytes_per_s`] each node's NIC
//! sends and receives one transfer at a time at that rate, so a write lands at
//! `max(sender's send side free, receiver's receive side free, post time) + len / rate +
//! link delay` (the `nic` module). [`SimEndpoint::write_phantom`] moves a length without
//! bytes, for measurements too large to hold their bytes.
//!
//! Faults: [`Rule`]s delay deliveries or drop links, [`SimWorld::partition`] splits the
//! world, [`SimWorld::pause`] holds a node's traffic, [`SimWorld::crash`] kills a node
//! (its peers see [`FailureReason::Crashed`] after [`SimConfig::failure_detection_us`]) and
//! [`SimWorld::restart`] brings it back with fresh regions.
//!
//! ```
//! use spindle_transport_rdma::sim::{SimConfig, SimWorld};
//! use spindle_transport_rdma::{Endpoint, Event};
//!
//! let world = SimWorld::new(42, SimConfig::default());
//! let a = world.endpoint(1);
//! let b = world.endpoint(2);
//! let row = b.register_region(1, 64)?;
//! a.connect(2, &b.address())?;
//! world.run_until_idle(1_000);
//! assert_eq!(a.poll_event(), Some(Event::PeerConnected { peer: 2 }));
//! assert_eq!(b.poll_event(), Some(Event::PeerConnected { peer: 1 }));
//! a.write_then_release(2, 1, 8, b"payload", 0, 1)?;
//! assert_eq!(row.load_u64(0), 0); // nothing lands before the world is stepped
//! world.run_until_idle(1_000);
//! assert_eq!(row.load_u64(0), 1);
//! assert_eq!(row.to_vec(8, 7)?, b"payload");
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

mod faults;
mod nic;
mod rules;

pub use rules::{DeliveryKind, Rule, Verdict};

use crate::detector::{Detector, DetectorConfig};
use crate::{
    check_region_len, round_up_to_words, Endpoint, Error, Event, FabricConfig, FailureReason,
    NodeId, Region, RegionDesc, RegionId, Result, EVENT_QUEUE_MAX, PEERS_MAX,
    REGIONS_PER_ENDPOINT_MAX, SEND_BYTES_MAX, WORD_BYTES, WRITE_BYTES_MAX,
};

/// Most deliveries one directed link may have in flight; beyond it writes and sends
/// return [`Error::QueueFull`].
pub const SIM_IN_FLIGHT_MAX: usize = 4096;

/// Most fault rules a world holds at once (a partition adds two per crossing pair).
pub const SIM_RULES_MAX: usize = 65_536;

/// Settings of a simulated world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Smallest link delay drawn for a delivery, in virtual microseconds.
    pub link_delay_min_us: u64,
    /// Largest link delay drawn for a delivery (inclusive), in virtual microseconds.
    pub link_delay_max_us: u64,
    /// How long after a crash its peers see [`FailureReason::Crashed`].
    pub failure_detection_us: u64,
    /// Delay jitter: the chance, per million deliveries, that a delivery's delay gets a
    /// spike on top (a descheduled sender, a retransmission). 0 draws nothing, so worlds
    /// without spikes replay as before.
    pub delay_spike_per_million: u32,
    /// Largest extra delay of a spike (drawn uniformly from 1 to this), in virtual
    /// microseconds.
    pub delay_spike_max_us: u64,
    /// Settings every endpoint shares (its failure-detector settings decide when a paused
    /// or cut-off node is suspected, in virtual time; its `outbound_bytes_max` bounds
    /// bytes in flight).
    pub fabric: FabricConfig,
    /// The bandwidth model: each node's NIC sends, and separately receives, one write or
    /// send at a time at this many bytes per second, and a transfer lands its drawn link
    /// delay after its last byte crossed (the model is in `sim/nic.rs`). `None` (the
    /// default): transfers take no time beyond the link delay, and seeded runs replay as
    /// they always have.
    pub link_rate_bytes_per_s: Option<u64>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            link_delay_min_us: 5,
            link_delay_max_us: 50,
            failure_detection_us: 10_000,
            delay_spike_per_million: 0,
            delay_spike_max_us: 0,
            fabric: FabricConfig::default(),
            link_rate_bytes_per_s: None,
        }
    }
}

/// A simulated world: every node, link and pending delivery, behind one lock. Cloning is
/// cheap and shares the world.
#[derive(Clone)]
pub struct SimWorld {
    shared: Arc<Shared>,
}

impl fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimWorld")
            .field("seed", &self.shared.seed)
            .field("now_us", &self.now_us())
            .finish()
    }
}

struct Shared {
    seed: u64,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in a test; keep the world usable.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkStatus {
    Connecting,
    Up,
    Failed,
}

#[derive(Debug)]
struct PeerState {
    status: LinkStatus,
    /// Why the link failed (when `status == Failed`).
    reason: FailureReason,
    /// The peer's incarnation this link belongs to (0 until known).
    incarnation: u64,
    remote: BTreeMap<RegionId, RegionDesc>,
}

impl PeerState {
    fn live(&self) -> bool {
        self.status != LinkStatus::Failed
    }
}

#[derive(Debug)]
struct NodeState {
    incarnation: u64,
    closed: bool,
    crashed: bool,
    paused: bool,
    pause_epoch: u64,
    regions: BTreeMap<RegionId, Region>,
    events: VecDeque<Event>,
    activity: bool,
    peers: BTreeMap<NodeId, PeerState>,
}

impl NodeState {
    fn new(incarnation: u64) -> Self {
        NodeState {
            incarnation,
            closed: false,
            crashed: false,
            paused: false,
            pause_epoch: 0,
            regions: BTreeMap::new(),
            events: VecDeque::new(),
            activity: false,
            peers: BTreeMap::new(),
        }
    }

    fn alive(&self) -> bool {
        !self.closed && !self.crashed
    }

    fn descs(&self, node: NodeId) -> Vec<RegionDesc> {
        self.regions
            .values()
            .map(|r| RegionDesc {
                node,
                region: r.id(),
                len: r.len(),
            })
            .collect()
    }

    fn push_event(&mut self, event: Event) {
        self.events.push_back(event);
        self.activity = true;
    }

    /// Marks the link to `peer` failed and reports it once.
    fn fail_peer(&mut self, peer: NodeId, reason: FailureReason) -> bool {
        match self.peers.get_mut(&peer) {
            Some(p) if p.live() => {
                p.status = LinkStatus::Failed;
                p.reason = reason.clone();
                p.remote.clear();
                self.push_event(Event::PeerFailed { peer, reason });
                true
            }
            _ => false,
        }
    }
}

/// What a write carries: its bytes, or only its length ([`SimEndpoint::write_phantom`]).
#[derive(Debug)]
enum WriteData {
    Bytes(Vec<u8>),
    Phantom(usize),
}

impl WriteData {
    fn len(&self) -> usize {
        match self {
            WriteData::Bytes(b) => b.len(),
            WriteData::Phantom(len) => *len,
        }
    }
}

#[derive(Debug)]
enum Payload {
    Write {
        region: RegionId,
        offset: usize,
        data: WriteData,
        guard: Option<(usize, u64)>,
    },
    Send {
        imm: u32,
        data: Vec<u8>,
    },
    ConnectRequest {
        regions: Vec<RegionDesc>,
    },
    ConnectAccept {
        regions: Vec<RegionDesc>,
    },
    Announce(RegionDesc),
    Withdraw(RegionId),
    Goodbye,
}

impl Payload {
    fn kind(&self) -> DeliveryKind {
        match self {
            Payload::Write { .. } => DeliveryKind::Write,
            Payload::Send { .. } => DeliveryKind::Send,
            _ => DeliveryKind::Control,
        }
    }

    /// The target region of a one-sided write.
    fn region(&self) -> Option<RegionId> {
        match self {
            Payload::Write { region, .. } => Some(*region),
            _ => None,
        }
    }

    fn bytes_len(&self) -> usize {
        match self {
            Payload::Write { data, .. } => data.len(),
            Payload::Send { data, .. } => data.len(),
            _ => 0,
        }
    }

    fn makes_event(&self) -> bool {
        !matches!(self, Payload::Write { .. })
    }
}

#[derive(Debug)]
struct Delivery {
    from: NodeId,
    to: NodeId,
    from_incarnation: u64,
    to_incarnation: u64,
    payload: Payload,
}

#[derive(Debug)]
enum Timer {
    /// `at` learns that `peer` (incarnation `peer_incarnation`) failed.
    Fail {
        at: NodeId,
        peer: NodeId,
        peer_incarnation: u64,
        reason: FailureReason,
    },
    /// A node paused since `epoch` is declared failed by its peers if still paused.
    PauseCheck { node: NodeId, epoch: u64 },
    /// A partitioned link is declared failed if still cut.
    PartitionCheck { a: NodeId, b: NodeId },
    /// The bandwidth model: `node`'s NIC starts its next queued transfer.
    NicHead { node: NodeId },
}

#[derive(Debug)]
enum Entry {
    Delivery(Delivery),
    Timer(Timer),
}

#[derive(Debug, Default)]
struct LinkLoad {
    /// Due time of the last delivery queued on the link (FIFO floor).
    last_due_us: u64,
    in_flight: usize,
    bytes: usize,
    /// A write or send was refused with QueueFull; ring the sender when it drains.
    refused: bool,
}

struct State {
    cfg: SimConfig,
    now_us: u64,
    rng: ChaCha8Rng,
    next_seq: u64,
    queue: BTreeMap<(u64, u64), Entry>,
    nodes: BTreeMap<NodeId, NodeState>,
    links: BTreeMap<(NodeId, NodeId), LinkLoad>,
    rules: Vec<Rule>,
    trace: u64,
    /// When each NIC is next free (the bandwidth model; unused without a link rate).
    nics: nic::Nics,
    /// Nodes whose activity went from none to some since [`SimWorld::take_woken`].
    woken: BTreeSet<NodeId>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl State {
    fn hash(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.trace ^= u64::from(*b);
            self.trace = self.trace.wrapping_mul(FNV_PRIME);
        }
    }

    fn schedule_at(&mut self, due_us: u64, entry: Entry) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.insert((due_us, seq), entry);
    }

    /// Queues a delivery on the link `from -> to` with a drawn delay (plus rule delays),
    /// keeping the link FIFO.
    fn enqueue(&mut self, from: NodeId, to: NodeId, payload: Payload) {
        let kind = payload.kind();
        let (min, max) = (self.cfg.link_delay_min_us, self.cfg.link_delay_max_us);
        let mut delay = if max > min {
            self.rng.gen_range(min..=max)
        } else {
            min
        };
        let spikes = self.cfg.delay_spike_per_million;
        if spikes > 0
            && self.cfg.delay_spike_max_us > 0
            && self.rng.gen_range(0..1_000_000u32) < spikes
        {
            delay = delay.saturating_add(self.rng.gen_range(1..=self.cfg.delay_spike_max_us));
        }
        let now = self.now_us;
        let (extra, lag) = match self
            .rules
            .iter()
            .find(|r| r.matches(from, to, kind, payload.region(), now))
            .map(|r| r.verdict)
        {
            Some(Verdict::Delay(extra)) => (extra, 0),
            Some(Verdict::Lag(lag)) => (0, lag),
            _ => (0, 0),
        };
        delay = delay.saturating_add(extra);
        let from_incarnation = self.nodes.get(&from).map_or(0, |n| n.incarnation);
        let to_incarnation = self.nodes.get(&to).map_or(0, |n| n.incarnation);
        let load = self.links.entry((from, to)).or_default();
        load.in_flight += 1;
        load.bytes += payload.bytes_len();
        let d = Delivery {
            from,
            to,
            from_incarnation,
            to_incarnation,
            payload,
        };
        if self.cfg.link_rate_bytes_per_s.is_some() {
            // The bandwidth model: it waits its turn on the sender's NIC.
            self.nic_enqueue(d, delay, lag);
        } else {
            self.schedule_delivery(now, delay, lag, d);
        }
    }

    /// Queues `d`, which left its sender at `sent_us`, to land `delay_us` later (not
    /// before the link's previous delivery), plus `lag_us`.
    fn schedule_delivery(&mut self, sent_us: u64, delay_us: u64, lag_us: u64, d: Delivery) {
        let load = self.links.entry((d.from, d.to)).or_default();
        let due = sent_us.saturating_add(delay_us).max(load.last_due_us);
        if lag_us == 0 {
            load.last_due_us = due; // a lagged delivery holds back none after it
        }
        self.schedule_at(due.saturating_add(lag_us), Entry::Delivery(d));
    }

    /// Removes a queued entry, keeping the link accounting right.
    fn take(&mut self, key: (u64, u64)) -> Option<Entry> {
        let entry = self.queue.remove(&key)?;
        if let Entry::Delivery(d) = &entry {
            self.unload(d.from, d.to, d.payload.bytes_len());
        }
        Some(entry)
    }

    /// A delivery of `bytes` on `from -> to` left the link (landed or dropped): its
    /// accounting, and the sender's wake-up if it was refused for room.
    fn unload(&mut self, from: NodeId, to: NodeId, bytes: usize) {
        if let Some(load) = self.links.get_mut(&(from, to)) {
            load.in_flight = load.in_flight.saturating_sub(1);
            load.bytes = load.bytes.saturating_sub(bytes);
            if load.refused && load.in_flight < SIM_IN_FLIGHT_MAX {
                load.refused = false;
                if let Some(n) = self.nodes.get_mut(&from) {
                    n.activity = true;
                }
            }
        }
    }

    /// Discards every pending delivery matching `pred`.
    fn discard(&mut self, pred: impl Fn(&Delivery) -> bool) {
        let keys: Vec<(u64, u64)> = self
            .queue
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Delivery(d) if pred(d)))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.take(key);
        }
        self.nic_discard(pred);
    }

    /// Fails the link between `a` and `b` at both ends with `reason` and drops what is
    /// in flight on it.
    fn fail_link(&mut self, a: NodeId, b: NodeId, reason: FailureReason) {
        for (x, y) in [(a, b), (b, a)] {
            if let Some(n) = self.nodes.get_mut(&x) {
                n.fail_peer(y, reason.clone());
            }
        }
        self.discard(|d| (d.from == a && d.to == b) || (d.from == b && d.to == a));
    }

    /// `at` refused a write from `writer` (as tcp's reader refuses a malformed frame):
    /// `at` sees [`FailureReason::Malformed`] with `why`, `writer` its link lost; what is
    /// in flight between them is dropped.
    fn fail_link_malformed(&mut self, at: NodeId, writer: NodeId, why: String) {
        if let Some(n) = self.nodes.get_mut(&at) {
            n.fail_peer(writer, FailureReason::Malformed(why));
        }
        if let Some(n) = self.nodes.get_mut(&writer) {
            let lost = FailureReason::ConnectionLost("sim: the peer refused a write".into());
            n.fail_peer(at, lost);
        }
        self.discard(|d| (d.from == at && d.to == writer) || (d.from == writer && d.to == at));
    }

    /// `watcher` suspected `silent` after `silent_ms`: it sees
    /// [`FailureReason::ProbeTimeout`], `silent` sees [`FailureReason::Excluded`];
    /// what is in flight between them is dropped.
    fn fail_link_suspected(&mut self, watcher: NodeId, silent: NodeId, silent_ms: u64) {
        if let Some(n) = self.nodes.get_mut(&watcher) {
            n.fail_peer(silent, FailureReason::ProbeTimeout { silent_ms });
        }
        if let Some(n) = self.nodes.get_mut(&silent) {
            n.fail_peer(watcher, FailureReason::Excluded { silent_ms });
        }
        self.discard(|d| {
            (d.from == watcher && d.to == silent) || (d.from == silent && d.to == watcher)
        });
    }

    /// How long after a peer falls silent the shared failure detector suspects it: a
    /// fresh [`Detector`] (the simulator does not model probe traffic, so every link's
    /// detector starts from the probe interval) fires just past its timeout.
    fn suspicion_delay_us(&self) -> u64 {
        let cfg = DetectorConfig::from_fabric(&self.cfg.fabric);
        Detector::new(cfg, 0).timeout_us().saturating_add(1)
    }

    /// Whether a DropLink rule currently cuts `a -> b` for control traffic.
    fn cut(&self, a: NodeId, b: NodeId) -> bool {
        self.rules
            .iter()
            .find(|r| r.matches(a, b, DeliveryKind::Control, None, self.now_us))
            .is_some_and(|r| r.verdict == Verdict::DropLink)
    }

    fn live_link(&self, a: NodeId, b: NodeId) -> bool {
        self.nodes
            .get(&a)
            .and_then(|n| n.peers.get(&b))
            .is_some_and(PeerState::live)
    }

    /// The next entry that may be applied now: timers always, deliveries unless an end
    /// is paused, the target's event queue is full, or an earlier delivery on the same
    /// link is held.
    fn next_eligible(&self, horizon_us: u64) -> Option<(u64, u64)> {
        let mut held: BTreeSet<(NodeId, NodeId)> = BTreeSet::new();
        for (key, entry) in &self.queue {
            if key.0 > horizon_us {
                return None;
            }
            let Entry::Delivery(d) = entry else {
                return Some(*key);
            };
            let link = (d.from, d.to);
            if held.contains(&link) {
                continue;
            }
            let paused = |n: NodeId| self.nodes.get(&n).is_some_and(|s| s.paused);
            let full = d.payload.makes_event()
                && self
                    .nodes
                    .get(&d.to)
                    .is_some_and(|s| s.events.len() >= EVENT_QUEUE_MAX);
            if paused(d.from) || paused(d.to) || full {
                held.insert(link);
                continue;
            }
            return Some(*key);
        }
        None
    }

    fn apply(&mut self, key: (u64, u64)) {
        // Whom this entry may wake: a delivery's two ends, a timer's anyone.
        let touched: Vec<NodeId> = match self.queue.get(&key) {
            Some(Entry::Delivery(d)) => vec![d.from, d.to],
            Some(Entry::Timer(Timer::NicHead { .. })) => Vec::new(),
            Some(Entry::Timer(_)) => self.nodes.keys().copied().collect(),
            None => return,
        };
        let quiet: Vec<NodeId> = touched
            .into_iter()
            .filter(|n| self.nodes.get(n).is_some_and(|s| !s.activity))
            .collect();
        self.apply_entry(key);
        for n in quiet {
            if self.nodes.get(&n).is_some_and(|s| s.activity) {
                self.woken.insert(n);
            }
        }
    }

    fn apply_entry(&mut self, key: (u64, u64)) {
        let Some(entry) = self.take(key) else {
            return;
        };
        self.now_us = self.now_us.max(key.0);
        let now = self.now_us;
        self.hash(&now.to_le_bytes());
        self.hash(&key.1.to_le_bytes());
        match entry {
            Entry::Timer(timer) => self.apply_timer(timer),
            Entry::Delivery(d) => self.apply_delivery(d),
        }
    }

    fn apply_timer(&mut self, timer: Timer) {
        match timer {
            Timer::NicHead { node } => {
                self.hash(&[12]);
                self.hash(&node.to_le_bytes());
                self.nic_head(node);
            }
            Timer::Fail {
                at,
                peer,
                peer_incarnation,
                reason,
            } => {
                self.hash(&[1]);
                self.hash(&at.to_le_bytes());
                self.hash(&peer.to_le_bytes());
                if let Some(n) = self.nodes.get_mut(&at) {
                    let same = n
                        .peers
                        .get(&peer)
                        .is_some_and(|p| p.incarnation == peer_incarnation);
                    if same {
                        n.fail_peer(peer, reason);
                    }
                }
            }
            Timer::PauseCheck { node, epoch } => {
                self.hash(&[2]);
                self.hash(&node.to_le_bytes());
                let still = self
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.paused && n.pause_epoch == epoch);
                if still {
                    let silent_ms = self.suspicion_delay_us() / 1000;
                    let peers: Vec<NodeId> = self.nodes[&node]
                        .peers
                        .iter()
                        .filter(|(_, p)| p.live())
                        .map(|(id, _)| *id)
                        .collect();
                    for peer in peers {
                        // The peers suspect the paused node; it reads their last word
                        // (that it was excluded) once it resumes.
                        self.fail_link_suspected(peer, node, silent_ms);
                    }
                }
            }
            Timer::PartitionCheck { a, b } => {
                self.hash(&[3]);
                self.hash(&a.to_le_bytes());
                self.hash(&b.to_le_bytes());
                if (self.cut(a, b) || self.cut(b, a))
                    && (self.live_link(a, b) || self.live_link(b, a))
                {
                    let reason = FailureReason::ProbeTimeout {
                        silent_ms: self.suspicion_delay_us() / 1000,
                    };
                    self.fail_link(a, b, reason);
                }
            }
        }
    }

    fn apply_delivery(&mut self, d: Delivery) {
        let kind = d.payload.kind();
        self.hash(&[
            4,
            match kind {
                DeliveryKind::Write => 0,
                DeliveryKind::Send => 1,
                DeliveryKind::Control => 2,
            },
        ]);
        self.hash(&d.from.to_le_bytes());
        self.hash(&d.to.to_le_bytes());
        let now = self.now_us;
        if let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.matches(d.from, d.to, kind, d.payload.region(), now))
        {
            if rule.verdict == Verdict::DropLink {
                self.hash(&[5]);
                self.fail_link(
                    d.from,
                    d.to,
                    FailureReason::ConnectionLost("sim: link dropped".into()),
                );
                return;
            }
        }
        let Some(target_state) = self.nodes.get(&d.to) else {
            // No such node: a connect is refused, anything else vanishes.
            if matches!(d.payload, Payload::ConnectRequest { .. }) {
                self.refuse(d.from, d.to);
            }
            return;
        };
        if !target_state.alive() || target_state.incarnation != d.to_incarnation {
            if matches!(d.payload, Payload::ConnectRequest { .. }) {
                self.refuse(d.from, d.to);
            }
            return;
        }
        let from_regions_ok = |p: &PeerState| p.live() && p.incarnation == d.from_incarnation;
        match d.payload {
            Payload::ConnectRequest { regions } => {
                self.hash(&[6]);
                let inc = d.from_incarnation;
                let target = self.nodes.get_mut(&d.to).expect("checked above");
                let known = target.peers.get(&d.from).map(|p| (p.status, p.incarnation));
                match known {
                    Some((LinkStatus::Up, i)) if i == inc => return,
                    Some((LinkStatus::Up, _)) => {
                        // The peer restarted before its crash was detected here.
                        target.fail_peer(d.from, FailureReason::Crashed);
                    }
                    _ => {}
                }
                if target.peers.len() >= PEERS_MAX && !target.peers.contains_key(&d.from) {
                    self.refuse(d.from, d.to);
                    return;
                }
                let target = self.nodes.get_mut(&d.to).expect("checked above");
                target.peers.insert(
                    d.from,
                    PeerState {
                        status: LinkStatus::Up,
                        reason: FailureReason::LocalClose,
                        incarnation: inc,
                        remote: regions.into_iter().map(|r| (r.region, r)).collect(),
                    },
                );
                target.push_event(Event::PeerConnected { peer: d.from });
                let mine = target.descs(d.to);
                self.enqueue_accept(d.to, d.from, mine);
            }
            Payload::ConnectAccept { regions } => {
                self.hash(&[7]);
                let target = self.nodes.get_mut(&d.to).expect("checked above");
                if let Some(p) = target.peers.get_mut(&d.from) {
                    if p.status == LinkStatus::Connecting {
                        p.status = LinkStatus::Up;
                        p.incarnation = d.from_incarnation;
                        p.remote = regions.into_iter().map(|r| (r.region, r)).collect();
                        target.push_event(Event::PeerConnected { peer: d.from });
                    }
                }
            }
            payload => {
                let target = self.nodes.get_mut(&d.to).expect("checked above");
                if !target.peers.get(&d.from).is_some_and(from_regions_ok) {
                    return;
                }
                match payload {
                    Payload::Write {
                        region,
                        offset,
                        data,
                        guard,
                    } => {
                        let Some(r) = target.regions.get(&region).cloned() else {
                            return; // withdrawn while the write was in flight
                        };
                        let guard_at = guard.map(|g| g.0);
                        if let Some(why) =
                            r.peer_write_refused(d.from, offset, data.len(), guard_at)
                        {
                            self.hash(&[12]);
                            self.fail_link_malformed(d.to, d.from, why);
                            return;
                        }
                        let ok = match &data {
                            WriteData::Bytes(bytes) => {
                                r.write_bytes_for_peer(offset, bytes, false).is_ok()
                            }
                            WriteData::Phantom(len) => r.check_range(offset, *len).is_ok(),
                        };
                        if let Some((g, value)) = guard {
                            if ok && g % WORD_BYTES == 0 && r.check_range(g, WORD_BYTES).is_ok() {
                                r.store_u64(g, value);
                            }
                        }
                        target.activity = true;
                        self.hash(&region.to_le_bytes());
                        self.hash(&offset.to_le_bytes());
                        match &data {
                            WriteData::Bytes(bytes) => self.hash(bytes),
                            WriteData::Phantom(len) => self.hash(&len.to_le_bytes()),
                        }
                        if let Some((g, value)) = guard {
                            self.hash(&g.to_le_bytes());
                            self.hash(&value.to_le_bytes());
                        }
                    }
                    Payload::Send { imm, data } => {
                        self.hash(&imm.to_le_bytes());
                        self.hash(&data);
                        let target = self.nodes.get_mut(&d.to).expect("checked above");
                        target.push_event(Event::Recv {
                            peer: d.from,
                            imm,
                            data,
                        });
                    }
                    Payload::Announce(desc) => {
                        if let Some(p) = target.peers.get_mut(&d.from) {
                            p.remote.insert(desc.region, desc);
                        }
                        target.push_event(Event::RegionAnnounced {
                            peer: d.from,
                            region: desc,
                        });
                        self.hash(&[8]);
                        self.hash(&desc.region.to_le_bytes());
                    }
                    Payload::Withdraw(id) => {
                        if let Some(p) = target.peers.get_mut(&d.from) {
                            p.remote.remove(&id);
                        }
                        target.push_event(Event::RegionWithdrawn {
                            peer: d.from,
                            region: id,
                        });
                        self.hash(&[9]);
                        self.hash(&id.to_le_bytes());
                    }
                    Payload::Goodbye => {
                        target.fail_peer(d.from, FailureReason::Closed);
                        self.hash(&[10]);
                    }
                    Payload::ConnectRequest { .. } | Payload::ConnectAccept { .. } => {}
                }
            }
        }
    }

    fn enqueue_accept(&mut self, from: NodeId, to: NodeId, regions: Vec<RegionDesc>) {
        self.enqueue(from, to, Payload::ConnectAccept { regions });
    }

    /// A connect from `from` to `to` found nobody: `from` sees the link fail.
    fn refuse(&mut self, from: NodeId, to: NodeId) {
        self.hash(&[11]);
        if let Some(n) = self.nodes.get_mut(&from) {
            n.fail_peer(
                to,
                FailureReason::ConnectionLost("sim: connection refused".into()),
            );
        }
    }
}

impl SimWorld {
    /// A world whose every random choice follows `seed`.
    pub fn new(seed: u64, cfg: SimConfig) -> SimWorld {
        SimWorld {
            shared: Arc::new(Shared {
                seed,
                state: Mutex::new(State {
                    cfg,
                    now_us: 0,
                    rng: ChaCha8Rng::seed_from_u64(seed),
                    next_seq: 0,
                    queue: BTreeMap::new(),
                    nodes: BTreeMap::new(),
                    links: BTreeMap::new(),
                    rules: Vec::new(),
                    trace: FNV_OFFSET,
                    nics: nic::Nics::default(),
                    woken: BTreeSet::new(),
                }),
            }),
        }
    }

    /// The seed the world was built with (print it with every failure).
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// An endpoint for `node` (address `sim:<node>`), created on first use; later calls
    /// return a handle on the node's current incarnation.
    pub fn endpoint(&self, node: NodeId) -> Arc<SimEndpoint> {
        let mut st = self.shared.lock();
        let incarnation = st
            .nodes
            .entry(node)
            .or_insert_with(|| NodeState::new(1))
            .incarnation;
        Arc::new(SimEndpoint {
            shared: Arc::clone(&self.shared),
            node,
            incarnation,
        })
    }

    /// Node `node`'s local region `id`, as its owner holds it (a test writes into it as a
    /// peer that maps the memory, shm's way, would), if registered.
    pub fn region(&self, node: NodeId, id: RegionId) -> Option<Region> {
        self.shared
            .lock()
            .nodes
            .get(&node)?
            .regions
            .get(&id)
            .cloned()
    }

    /// Virtual time, in microseconds since the world was built.
    pub fn now_us(&self) -> u64 {
        self.shared.lock().now_us
    }

    /// Applies the next delivery or timer that may be applied (advancing virtual time to
    /// its due time); false if there is none.
    pub fn step(&self) -> bool {
        let mut st = self.shared.lock();
        match st.next_eligible(u64::MAX) {
            Some(key) => {
                st.apply(key);
                true
            }
            None => false,
        }
    }

    /// Steps until nothing is left to apply or `steps_max` steps were taken; returns the
    /// number of steps taken.
    pub fn run_until_idle(&self, steps_max: usize) -> usize {
        let mut steps = 0;
        while steps < steps_max && self.step() {
            steps += 1;
        }
        steps
    }

    /// Advances virtual time by `duration_us`, applying everything due on the way.
    pub fn run_for(&self, duration_us: u64) {
        let mut st = self.shared.lock();
        let end = st.now_us.saturating_add(duration_us);
        while let Some(key) = st.next_eligible(end) {
            st.apply(key);
        }
        st.now_us = st.now_us.max(end);
    }

    /// Adds a fault rule after the existing ones. Rules beyond [`SIM_RULES_MAX`] are
    /// ignored (with a warning).
    pub fn add_rule(&self, rule: Rule) {
        let mut st = self.shared.lock();
        if st.rules.len() >= SIM_RULES_MAX {
            tracing::warn!("sim: rule ignored, {SIM_RULES_MAX} rules already");
            return;
        }
        st.rules.push(rule);
    }

    /// Removes every rule (and so heals partitions).
    pub fn clear_rules(&self) {
        self.shared.lock().rules.clear();
    }

    /// Moves into `out` (in id order) the nodes whose activity — a write landed, an event
    /// queued, a full link drained; what [`Endpoint::wait`] reports — went from none to
    /// some since the last call, and clears their activity: the caller steps them now.
    /// For event-driven runs of many nodes, which step only the nodes something reached.
    pub fn take_woken(&self, out: &mut Vec<NodeId>) {
        let mut st = self.shared.lock();
        let woken = std::mem::take(&mut st.woken);
        for n in woken {
            if let Some(s) = st.nodes.get_mut(&n) {
                s.activity = false;
            }
            out.push(n);
        }
    }

    /// FNV-1a over every delivery and timer applied so far (time, order, ends, payload).
    pub fn trace_hash(&self) -> u64 {
        self.shared.lock().trace
    }
}

/// One node of a [`SimWorld`]; implements [`Endpoint`]. Its methods never block and
/// nothing reaches a peer until the world is stepped.
pub struct SimEndpoint {
    shared: Arc<Shared>,
    node: NodeId,
    incarnation: u64,
}

impl fmt::Debug for SimEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimEndpoint")
            .field("node", &self.node)
            .field("incarnation", &self.incarnation)
            .finish()
    }
}

impl SimEndpoint {
    /// The world state, if this handle's incarnation is alive.
    fn live(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.shared.lock();
        match st.nodes.get(&self.node) {
            Some(n) if n.incarnation == self.incarnation && n.alive() => Ok(st),
            _ => Err(Error::Closed),
        }
    }

    fn me<'a>(&self, st: &'a mut State) -> &'a mut NodeState {
        st.nodes
            .get_mut(&self.node)
            .expect("live() checked the node exists")
    }

    /// Checks that the link to `peer` is up and has room; returns nothing on success.
    fn check_link(&self, st: &State, peer: NodeId, bytes: usize) -> Result<()> {
        let me = &st.nodes[&self.node];
        match me.peers.get(&peer) {
            Some(p) if p.status == LinkStatus::Up => {}
            Some(p) if p.status == LinkStatus::Failed => {
                return Err(Error::PeerFailed {
                    peer,
                    reason: p.reason.clone(),
                })
            }
            _ => return Err(Error::NotConnected { peer }),
        }
        if let Some(load) = st.links.get(&(self.node, peer)) {
            if load.in_flight >= SIM_IN_FLIGHT_MAX
                || load.bytes.saturating_add(bytes) > st.cfg.fabric.outbound_bytes_max
            {
                return Err(Error::QueueFull { peer });
            }
        }
        Ok(())
    }

    fn refused(st: &mut State, from: NodeId, peer: NodeId) {
        if let Some(load) = st.links.get_mut(&(from, peer)) {
            load.refused = true;
        }
    }

    /// A write of `len` bytes: `bytes` (of that length), or none for a phantom write.
    fn issue_write(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        len: usize,
        bytes: Option<&[u8]>,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        let mut st = self.live()?;
        if len > WRITE_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "write",
                len,
                max: WRITE_BYTES_MAX,
            });
        }
        let me = &st.nodes[&self.node];
        let desc = match me.peers.get(&peer) {
            Some(p) if p.status == LinkStatus::Up => p.remote.get(&region).copied(),
            _ => None,
        };
        if me
            .peers
            .get(&peer)
            .is_some_and(|p| p.status == LinkStatus::Up)
        {
            let Some(desc) = desc else {
                return Err(Error::UnknownRegion { node: peer, region });
            };
            let oob = |offset: usize, len: usize| Error::OutOfBounds {
                node: peer,
                region,
                offset,
                len,
                region_len: desc.len,
            };
            if let Some((g, _)) = guard {
                if g % WORD_BYTES != 0 {
                    return Err(Error::Misaligned { offset: g });
                }
                if g.checked_add(WORD_BYTES).is_none_or(|end| end > desc.len) {
                    return Err(oob(g, WORD_BYTES));
                }
            }
            if offset.checked_add(len).is_none_or(|end| end > desc.len) {
                return Err(oob(offset, len));
            }
        }
        if let Err(e) = self.check_link(&st, peer, len) {
            if matches!(e, Error::QueueFull { .. }) {
                Self::refused(&mut st, self.node, peer);
            }
            return Err(e);
        }
        st.enqueue(
            self.node,
            peer,
            Payload::Write {
                region,
                offset,
                data: bytes.map_or(WriteData::Phantom(len), |b| WriteData::Bytes(b.to_vec())),
                guard,
            },
        );
        Ok(())
    }

    /// Queues `payload` to every peer whose link is up or coming up.
    fn broadcast(&self, st: &mut State, payload: impl Fn() -> Payload) {
        let peers: Vec<NodeId> = self
            .me(st)
            .peers
            .iter()
            .filter(|(_, p)| p.live())
            .map(|(id, _)| *id)
            .collect();
        for peer in peers {
            st.enqueue(self.node, peer, payload());
        }
    }
}

/// Parses `sim:<node>`.
fn parse_address(address: &str) -> Result<NodeId> {
    address
        .strip_prefix("sim:")
        .and_then(|n| n.parse::<NodeId>().ok())
        .ok_or_else(|| Error::BadAddress {
            addr: address.to_string(),
            detail: "expected sim:<node id>".into(),
        })
}

impl Endpoint for SimEndpoint {
    fn node(&self) -> NodeId {
        self.node
    }

    fn enforces_peer_writes(&self) -> bool {
        true
    }

    fn address(&self) -> String {
        format!("sim:{}", self.node)
    }

    fn connect(&self, peer: NodeId, address: &str) -> Result<()> {
        let mut st = self.live()?;
        let target = parse_address(address)?;
        if target != peer {
            return Err(Error::BadAddress {
                addr: address.to_string(),
                detail: format!("names node {target}, not {peer}"),
            });
        }
        if peer == self.node {
            return Err(Error::InvalidPeer {
                peer,
                detail: "an endpoint cannot link to itself".into(),
            });
        }
        let node = self.node;
        let me = self.me(&mut st);
        if me.peers.get(&peer).is_some_and(PeerState::live) {
            return Ok(()); // idempotent
        }
        let linked = me.peers.values().filter(|p| p.live()).count();
        if linked >= PEERS_MAX {
            return Err(Error::InvalidPeer {
                peer,
                detail: format!("already {PEERS_MAX} peers"),
            });
        }
        me.peers.insert(
            peer,
            PeerState {
                status: LinkStatus::Connecting,
                reason: FailureReason::LocalClose,
                incarnation: 0,
                remote: BTreeMap::new(),
            },
        );
        let regions = me.descs(node);
        st.enqueue(node, peer, Payload::ConnectRequest { regions });
        Ok(())
    }

    fn disconnect(&self, peer: NodeId) -> Result<()> {
        let mut st = self.live()?;
        let me = self.me(&mut st);
        match me.peers.get_mut(&peer) {
            Some(p) if p.live() => {
                p.status = LinkStatus::Failed;
                p.reason = FailureReason::LocalClose;
                p.remote.clear();
                st.enqueue(self.node, peer, Payload::Goodbye);
                Ok(())
            }
            _ => Err(Error::NotConnected { peer }),
        }
    }

    fn peers(&self) -> Vec<NodeId> {
        let Ok(mut st) = self.live() else {
            return Vec::new();
        };
        self.me(&mut st)
            .peers
            .iter()
            .filter(|(_, p)| p.status == LinkStatus::Up)
            .map(|(id, _)| *id)
            .collect()
    }

    fn register_region(&self, id: RegionId, len_bytes: usize) -> Result<Region> {
        let mut st = self.live()?;
        check_region_len(len_bytes)?;
        let node = self.node;
        let me = self.me(&mut st);
        if me.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        if me.regions.len() >= REGIONS_PER_ENDPOINT_MAX {
            return Err(Error::TooLarge {
                what: "region count",
                len: me.regions.len() + 1,
                max: REGIONS_PER_ENDPOINT_MAX,
            });
        }
        let region = Region::new_heap(id, len_bytes)?;
        me.regions.insert(id, region.clone());
        let desc = RegionDesc {
            node,
            region: id,
            len: round_up_to_words(len_bytes),
        };
        self.broadcast(&mut st, || Payload::Announce(desc));
        Ok(region)
    }

    fn deregister_region(&self, id: RegionId) -> Result<()> {
        let mut st = self.live()?;
        if self.me(&mut st).regions.remove(&id).is_none() {
            return Err(Error::UnknownRegion {
                node: self.node,
                region: id,
            });
        }
        self.broadcast(&mut st, || Payload::Withdraw(id));
        Ok(())
    }

    fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        let mut st = self.live().ok()?;
        let p = self.me(&mut st).peers.get(&peer)?;
        if p.status != LinkStatus::Up {
            return None;
        }
        p.remote.get(&id).copied()
    }

    fn write(&self, peer: NodeId, region: RegionId, offset: usize, bytes: &[u8]) -> Result<()> {
        self.issue_write(peer, region, offset, bytes.len(), Some(bytes), None)
    }

    fn write_then_release(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard_offset: usize,
        guard_value: u64,
    ) -> Result<()> {
        self.issue_write(
            peer,
            region,
            offset,
            bytes.len(),
            Some(bytes),
            Some((guard_offset, guard_value)),
        )
    }

    fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()> {
        let mut st = self.live()?;
        if bytes.len() > SEND_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "send",
                len: bytes.len(),
                max: SEND_BYTES_MAX,
            });
        }
        if let Err(e) = self.check_link(&st, peer, bytes.len()) {
            if matches!(e, Error::QueueFull { .. }) {
                Self::refused(&mut st, self.node, peer);
            }
            return Err(e);
        }
        st.enqueue(
            self.node,
            peer,
            Payload::Send {
                imm,
                data: bytes.to_vec(),
            },
        );
        Ok(())
    }

    fn poll_event(&self) -> Option<Event> {
        let mut st = self.live().ok()?;
        self.me(&mut st).events.pop_front()
    }

    fn wait(&self, _timeout: Duration) -> bool {
        let Ok(mut st) = self.live() else {
            return false;
        };
        let me = self.me(&mut st);
        std::mem::replace(&mut me.activity, false)
    }

    fn close(&self) {
        let Ok(mut st) = self.live() else {
            return;
        };
        self.broadcast(&mut st, || Payload::Goodbye);
        let me = self.me(&mut st);
        me.closed = true;
        me.events.clear();
        for p in me.peers.values_mut() {
            if p.live() {
                p.status = LinkStatus::Failed;
                p.reason = FailureReason::LocalClose;
                p.remote.clear();
            }
        }
    }
}
