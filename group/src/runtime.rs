//! The runtime: drives one node's [`Engine`] (a fixed view, [`Node`]) or [`Group`] (views
//! that change, [`GroupNode`]) over a real fabric with one predicate thread.
//!
//! The thread loops `step`, posts the pushes, hands delivery batches to the application's
//! upcall and feeds fabric failures back into the engine. It spins while there is work
//! and for [`Spin::before_park_us`] after, then parks on the endpoint's doorbell
//! (woken by writes landing, fabric events, drained queues, and application commits via
//! [`Endpoint::wake`]), so an idle node burns no core (docs/design.md §3, §8).
//!
//! The spin adapts to one case: work that arrives less than the configured spin after a
//! park began says the stream's period sits just past the spin (a 1 kHz stream against
//! Derecho's 1 ms), where the thread spins nearly the whole period and still pays a
//! wake-up per sample. The spin then grows to cover the gap it saw, up to
//! [`IDLE_SPIN_GROWTH_MAX`] times the configured one; a park longer than the configured
//! spin brings it back. docs/benchmarks.md ("An idle spin that covers a stream's
//! period") has the 1 kHz latency and CPU it was kept for.
//!
//! A thread with work never parks, and while it works it does not yield either, so a
//! thread that shares its core (another process's predicate thread, when the machine
//! packs several onto one CPU) waits for the scheduler to take the core away. With
//! [`Spin::busy_yield_us`] set, after that long at work without an idle round the thread
//! yields once: a ping's predicate thread beside one draining a bulk stream gets its turn
//! within that bound instead of a time slice. It is off by default (a latency setting):
//! measured on two vCPUs it cut a ping's p99 beside a bulk stream by about 3× and cost
//! streams over tcp up to a fifth of their rate (docs/benchmarks.md, "A busy predicate
//! thread that yields").

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spindle_transport_rdma::{Endpoint, Event, NodeId};

use crate::counters::{CounterCells, EngineCarry, NodeCounters};
use crate::engine::{DeliveryBatch, Engine, EngineConfig, EngineEvent, EngineStats};
use crate::error::{Error, Result};
use crate::group::{Group, GroupAction, GroupOutput, ViewInstalled};
use crate::layout::{Layout, SubgroupId, View};
use crate::persist::{PersistedFrontier, Persister};
use crate::sched::{spawn_placed, ThreadSched};
use crate::smc::Sender;

/// Events kept for the application before older ones are dropped.
pub const NODE_EVENTS_MAX: usize = 1024;
/// Longest a parked predicate thread sleeps before it looks again on its own.
pub const PARK_MS_MAX: u64 = 1_000;
/// Busy rounds between two looks at the fabric's event queue.
const EVENT_POLL_ROUNDS: u32 = 64;
/// Busy rounds between two updates of the shared counters.
const STATS_ROUNDS: u32 = 1024;
/// Idle rounds between two readings of the clock.
const CLOCK_ROUNDS: u32 = 16;
/// Most a predicate thread's idle spin grows to, as a multiple of its configured
/// `spin_before_park_us` (see the module docs).
pub const IDLE_SPIN_GROWTH_MAX: u32 = 2;
const _: () = assert!(IDLE_SPIN_GROWTH_MAX >= 1);
/// How a predicate thread spins (see the module docs): idle before it parks, and at work
/// before it lets a thread that shares its core have a turn; and where the scheduler runs
/// it ([`ThreadSched`]: its CPUs and class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spin {
    /// How long the thread keeps spinning after its last work before parking, to begin
    /// with: a stream whose period sits just past it makes the spin grow, up to
    /// [`IDLE_SPIN_GROWTH_MAX`] times this.
    pub before_park_us: u64,
    /// After this long at work without an idle round the thread yields once; 0: never.
    pub busy_yield_us: u64,
    /// The thread's CPUs and scheduling class, applied as it starts (the default: as the
    /// process's). A real-time thread should not spin on a core the application needs
    /// ([`crate::sched`]).
    pub sched: ThreadSched,
}

impl From<u64> for Spin {
    /// `before_park_us`, no busy yield, and the process's own CPUs and class.
    fn from(before_park_us: u64) -> Spin {
        Spin {
            before_park_us,
            busy_yield_us: 0,
            sched: ThreadSched::default(),
        }
    }
}

/// When an idle predicate thread parks: it yields for its spin budget after its last
/// work, then parks on the doorbell; the budget adapts as the module docs say
/// ([`next_spin_budget`]).
struct IdleSpin {
    base: Duration,
    budget: Duration,
    rounds: u32,
    last_work: Instant,
    parked_at: Option<Instant>,
    /// [`Spin::busy_yield_us`] (`None`: never).
    busy_yield: Option<Duration>,
    /// Rounds with work since the last idle round or yield.
    busy_rounds: u32,
    /// When those rounds began (read at the first, so only after an idle round).
    busy_since: Instant,
}

/// What one idle round ([`IdleSpin::idle`]) found.
struct IdleRound {
    /// The budget since the last work is spent: the caller parks.
    park: bool,
    /// The clock as the round read it, if it did (the first idle round after work does,
    /// and every [`CLOCK_ROUNDS`]th): the loop's own time, so that an idle loop reads the
    /// clock once per round at most.
    now: Option<Instant>,
}

impl IdleSpin {
    fn new(spin: Spin) -> IdleSpin {
        let base = Duration::from_micros(spin.before_park_us);
        IdleSpin {
            busy_yield: (spin.busy_yield_us > 0).then(|| Duration::from_micros(spin.busy_yield_us)),
            base,
            budget: base,
            rounds: 0,
            last_work: Instant::now(),
            parked_at: None,
            busy_rounds: 0,
            busy_since: Instant::now(),
        }
    }

    /// A round that did work; after [`Spin::busy_yield_us`] of them without an idle round,
    /// it yields the core once.
    fn worked(&mut self) {
        if let Some(bound) = self.busy_yield {
            self.busy(bound);
        }
        self.rounds = 0;
        if let Some(at) = self.parked_at.take() {
            self.budget = next_spin_budget(self.base, self.budget, at.elapsed());
        }
    }

    /// The busy yield's count for one round with work (before `rounds` is reset: a
    /// non-zero `rounds` says idle rounds came before this one).
    fn busy(&mut self, bound: Duration) {
        if self.rounds > 0 {
            // The first busy round after idle ones.
            self.busy_rounds = 0;
            self.busy_since = Instant::now();
        }
        self.busy_rounds += 1;
        if busy_yield_due(self.busy_rounds, self.busy_since, bound, Instant::now) {
            std::thread::yield_now();
            self.busy_rounds = 0;
            self.busy_since = Instant::now();
        }
    }

    /// An idle round: yields the CPU (the application's threads may need this core;
    /// 2-core machines run several nodes) and reads the clock only now and then; it
    /// says to park once the budget since the last work is spent.
    fn idle(&mut self) -> IdleRound {
        self.rounds += 1;
        let mut now = None;
        if self.rounds == 1 {
            self.last_work = Instant::now();
            now = Some(self.last_work);
        }
        std::thread::yield_now();
        if self.rounds % CLOCK_ROUNDS == 0 {
            let at = Instant::now();
            now = Some(at);
            if at.saturating_duration_since(self.last_work) >= self.budget {
                self.parked_at.get_or_insert(at);
                return IdleRound { park: true, now };
            }
        }
        IdleRound { park: false, now }
    }

    /// True in the first idle round after work.
    fn just_idle(&self) -> bool {
        self.rounds == 1
    }
}

/// Whether a predicate thread that has done `busy_rounds` rounds of work since `since`
/// yields now: every [`CLOCK_ROUNDS`] rounds it reads the clock (`now`), and yields once
/// `bound` ([`Spin::busy_yield_us`]) has passed.
fn busy_yield_due(
    busy_rounds: u32,
    since: Instant,
    bound: Duration,
    now: impl FnOnce() -> Instant,
) -> bool {
    busy_rounds % CLOCK_ROUNDS == 0 && now().saturating_duration_since(since) >= bound
}

/// The spin budget once work came `parked_for` into a park begun with `budget`, for a
/// configured spin `base` ([`IdleSpin`]).
fn next_spin_budget(base: Duration, budget: Duration, parked_for: Duration) -> Duration {
    if parked_for < base {
        (budget + parked_for + base / 8).min(base * IDLE_SPIN_GROWTH_MAX)
    } else {
        base
    }
}

/// Most rounds of the group's predicate thread one [`Endpoint::cork`] spans: the round
/// that handed the application deliveries and the next, whose pushes carry what the
/// upcall wrote. A busy stream thus holds its acknowledgements back by one round at most.
const CORK_ROUNDS_MAX: u32 = 2;

/// Most messages a round may hand the application for its pushes to wait for the next
/// round's (see [`CORK_ROUNDS_MAX`]): a reply to a few samples is worth the wait, the
/// acknowledgements of a stream's batch are not.
const CORK_CARRY_MESSAGES_MAX: usize = 8;

/// How to run one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The view (this node must be a member).
    pub view: View,
    /// The subgroups.
    pub layout: Layout,
    /// Engine settings (the Spindle techniques).
    pub engine: EngineConfig,
    /// Fabric addresses of the other members this node shares a subgroup with.
    pub peers: BTreeMap<NodeId, String>,
    /// How the predicate thread spins: idle before parking, at work before a yield.
    pub spin: Spin,
    /// How long one park lasts at most (a safety net: wake-ups come from the doorbell).
    pub park_ms: u64,
    /// How long link and region set-up may take.
    pub setup_timeout_ms: u64,
}

impl NodeConfig {
    /// Settings for `view` and `layout` with every default: all techniques on, 1 ms of
    /// spinning before parking (Derecho's figure), 30 s for set-up.
    pub fn new(view: View, layout: Layout, peers: BTreeMap<NodeId, String>) -> NodeConfig {
        NodeConfig {
            view,
            layout,
            engine: EngineConfig::default(),
            peers,
            spin: Spin::from(1_000),
            park_ms: 50,
            setup_timeout_ms: 30_000,
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    events: Mutex<VecDeque<EngineEvent>>,
    stats: Mutex<EngineStats>,
}

/// A running node: its engine on a predicate thread of its own.
pub struct Node {
    shared: Arc<Shared>,
    senders: BTreeMap<SubgroupId, Sender>,
    endpoint: Arc<dyn Endpoint>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node", &self.endpoint.node())
            .field("subgroups", &self.senders.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Tells a predicate thread to stop, wakes it from its park, and joins it.
fn stop_thread(stop: &AtomicBool, endpoint: &dyn Endpoint, thread: &mut Option<JoinHandle<()>>) {
    stop.store(true, Ordering::Release);
    endpoint.wake();
    if let Some(t) = thread.take() {
        let _ = t.join();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Node {
    /// Registers the node's SST regions on `endpoint`, links to its peers, waits until
    /// every peer's regions are known, and starts the predicate thread. `upcall` runs on
    /// that thread with every batch of delivered messages.
    pub fn start(
        endpoint: Arc<dyn Endpoint>,
        cfg: NodeConfig,
        upcall: impl FnMut(&DeliveryBatch) + Send + 'static,
    ) -> Result<Node> {
        let me = endpoint.node();
        if cfg.park_ms == 0 || cfg.park_ms > PARK_MS_MAX {
            return Err(Error::Config(format!(
                "park_ms {} must be 1..={PARK_MS_MAX}",
                cfg.park_ms
            )));
        }
        let mut engine = Engine::new(
            me,
            cfg.view.clone(),
            cfg.layout.clone(),
            cfg.engine.clone(),
            {
                let ep = Arc::clone(&endpoint);
                move |id, len| Ok(ep.register_region(id, len)?)
            },
        )?;
        let regions = engine.regions();
        let needed: std::collections::BTreeSet<NodeId> = regions
            .iter()
            .flat_map(|(_, _, p)| p.iter().copied())
            .collect();
        for peer in &needed {
            let address = cfg.peers.get(peer).ok_or_else(|| {
                Error::Config(format!(
                    "no address for member {peer} of a subgroup of {me}"
                ))
            })?;
            endpoint.connect(*peer, address)?;
        }
        let deadline = Instant::now() + Duration::from_millis(cfg.setup_timeout_ms);
        loop {
            while let Some(event) = endpoint.poll_event() {
                if let Event::PeerFailed { peer, reason } = event {
                    if needed.contains(&peer) && Instant::now() < deadline {
                        tracing::debug!(node = me, peer, %reason, "set-up: linking again");
                        let _ = endpoint.connect(peer, &cfg.peers[&peer]);
                    }
                }
            }
            let ready = regions.iter().all(|(_, region, peers)| {
                peers
                    .iter()
                    .all(|p| endpoint.remote_region(*p, *region).is_some())
            });
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                let missing: Vec<_> = regions
                    .iter()
                    .flat_map(|(_, r, peers)| {
                        peers
                            .iter()
                            .filter(|p| endpoint.remote_region(**p, *r).is_none())
                            .map(move |p| (*p, *r))
                    })
                    .collect();
                return Err(Error::Config(format!(
                    "node {me}: set-up timed out after {} ms; (peer, region) not known: {missing:?}",
                    cfg.setup_timeout_ms
                )));
            }
            endpoint.wait(Duration::from_millis(10));
        }
        let senders = regions
            .iter()
            .filter_map(|(sg, _, _)| engine.sender(*sg).ok().map(|s| (*sg, s)))
            .collect();
        {
            let ep = Arc::clone(&endpoint);
            engine.set_waker(move || ep.wake());
        }
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = Arc::clone(&shared);
            let ep = Arc::clone(&endpoint);
            spawn_placed(
                format!("spindle-predicates-{me}"),
                cfg.spin.sched,
                move || predicate_loop(engine, ep, &cfg, &shared, upcall),
            )?
        };
        Ok(Node {
            shared,
            senders,
            endpoint,
            thread: Some(thread),
        })
    }

    /// A handle for sending in `subgroup`.
    pub fn sender(&self, subgroup: SubgroupId) -> Result<Sender> {
        self.senders
            .get(&subgroup)
            .cloned()
            .ok_or(Error::NotASender {
                subgroup,
                node: self.endpoint.node(),
            })
    }

    /// The next engine event (a wedge, a misbehaving peer).
    pub fn poll_event(&self) -> Option<EngineEvent> {
        lock(&self.shared.events).pop_front()
    }

    /// The engine's counters, as of the predicate thread's last pass.
    pub fn stats(&self) -> EngineStats {
        *lock(&self.shared.stats)
    }

    /// Stops the predicate thread (the endpoint stays open); returns the final counters.
    pub fn stop(mut self) -> EngineStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        stop_thread(&self.shared.stop, &*self.endpoint, &mut self.thread);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.halt();
    }
}

fn predicate_loop(
    mut engine: Engine,
    ep: Arc<dyn Endpoint>,
    cfg: &NodeConfig,
    shared: &Shared,
    mut upcall: impl FnMut(&DeliveryBatch),
) {
    let mut idle = IdleSpin::new(cfg.spin);
    let park = Duration::from_millis(cfg.park_ms);
    let mut round: u32 = 0;
    // A dare subgroup's core runs on the clock (heartbeats, elections) and on two-sided
    // messages: its fabric events are taken every round, and a park never outlasts its
    // heartbeat.
    let dare = engine.dare_heartbeat_us();
    let park = dare.map_or(park, |hb| park.min(Duration::from_micros(hb)));
    let start = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        round = round.wrapping_add(1);
        let mut work = engine.step();
        if dare.is_some() {
            work |= step_dare(&mut engine, &*ep, start.elapsed().as_micros() as u64);
        }
        {
            let _corked = Corked::new(&*ep);
            work |= engine.drain_pushes(|p, bytes| p.post(&*ep, bytes)) > 0;
            work |= engine.drain_dare(|out, imm, ctrl| post_dare(&*ep, out, imm, ctrl)) > 0;
        }
        while let Some(batch) = engine.poll_delivery() {
            upcall(&batch);
            engine.recycle(batch);
            work = true;
        }
        // Fabric events are rare (failures): look every few rounds, and whenever idle.
        if !work || round % EVENT_POLL_ROUNDS == 0 || dare.is_some() {
            while let Some(event) = ep.poll_event() {
                handle_fabric_event(&mut engine, event);
                work = true;
            }
        }
        if let Some(event) = engine.poll_event() {
            let mut q = lock(&shared.events);
            q.push_back(event);
            while let Some(e) = engine.poll_event() {
                q.push_back(e);
            }
            while q.len() > NODE_EVENTS_MAX {
                q.pop_front();
            }
        }
        if work {
            idle.worked();
            if round % STATS_ROUNDS == 0 {
                *lock(&shared.stats) = engine.stats();
            }
            continue;
        }
        if idle.idle().park {
            ep.wait(park);
        }
        if idle.just_idle() {
            *lock(&shared.stats) = engine.stats();
        }
    }
    *lock(&shared.stats) = engine.stats();
}

/// Hands a fabric event to a fixed view's engine: a failed peer, an announced region (a
/// dare subgroup's re-keyed log), a dare subgroup's two-sided message; others are not the
/// engine's. [`Node`]'s predicate thread and the sim's `testkit::EngineNode` both use it.
pub(crate) fn handle_fabric_event(engine: &mut Engine, event: Event) {
    match event {
        Event::PeerFailed { peer, .. } => engine.handle_peer_failed(peer),
        Event::RegionAnnounced { peer, region } => {
            engine.handle_region_announced(peer, region.region);
        }
        Event::Recv { peer, imm, data } if crate::engine::is_dare_imm(imm) => {
            if let Err(e) = engine.handle_dare_recv(peer, imm, &data) {
                tracing::warn!(peer, error = %e, "bad dare message");
            }
        }
        _ => {}
    }
}

/// Steps the engine's dare subgroups at `now_us` over `ep` (a fixed view's [`Node`]):
/// the log regions their cores wait for, their steps (registering re-keyed log regions
/// on `ep`), and the withdrawal of the regions they re-keyed away from.
pub(crate) fn step_dare(engine: &mut Engine, ep: &dyn Endpoint, now_us: u64) -> bool {
    for (peer, region) in engine.dare_regions_awaited() {
        if ep.remote_region(peer, region).is_some() {
            engine.handle_region_announced(peer, region);
        }
    }
    let work = engine.step_dare(now_us, &mut |id, len| Ok(ep.register_region(id, len)?));
    for r in engine.take_withdrawn_regions() {
        let _ = ep.deregister_region(r);
    }
    work
}

// ----- the group runtime ----------------------------------------------------------------

/// What a [`GroupNode`] hands to the application, on its predicate thread, in order.
pub trait Application: Send + 'static {
    /// Messages delivered in one subgroup.
    fn deliver(&mut self, batch: &DeliveryBatch);
    /// Messages delivered in one subgroup, the batch handed over whole: an application
    /// that keeps it (readers borrowing its bytes) gives back another batch it is done
    /// with, or none, for the engine to reuse ([`Engine::recycle`]). By default
    /// [`Application::deliver`], and the batch goes back.
    fn deliver_owned(&mut self, batch: DeliveryBatch) -> Option<DeliveryBatch> {
        self.deliver(&batch);
        Some(batch)
    }
    /// A new view is installed; later deliveries belong to it.
    fn view_installed(&mut self, _view: &ViewInstalled) {}
    /// The state of `subgroup` now (every delivery so far applied), for a joiner.
    fn snapshot(&mut self, _subgroup: SubgroupId) -> Vec<u8> {
        Vec::new()
    }
    /// Replace the state of `subgroup` with `state` (this node joined it).
    fn install(&mut self, _subgroup: SubgroupId, _state: &[u8]) {}
    /// This node's messages the last view change could not re-send (it is no longer a
    /// sender of the subgroup), handed back in order.
    fn undeliverable(&mut self, _subgroup: SubgroupId, _payloads: Vec<Vec<u8>>) {}
    /// A large message of `subgroup` waits for an RDMC buffer a batch this application
    /// kept (from [`Application::deliver_owned`]) pins: give back such batches, copying
    /// out what must be kept ([`DeliveryBatch::holds_in_place`]). Nothing by default (an
    /// application that keeps no batch pins nothing).
    fn pins_wanted(&mut self, _subgroup: SubgroupId) {}
    /// The node stopped: shut down (`Some(why)`) or left (`None`).
    fn stopped(&mut self, _why: Option<&str>) {}
    /// The runner handed over everything one round of the group produced (deliveries of
    /// every subgroup, views): work batched across subgroups, such as waking readers,
    /// is best done here once rather than after each batch.
    fn round_end(&mut self) {}
    /// A logged subgroup's global persistence frontier moved: every message of the view
    /// below it is durable at every member (only with [`GroupNode::start_logged`]).
    fn persisted(&mut self, _frontier: &PersistedFrontier) {}
}

#[derive(Default)]
struct GroupShared {
    stop: AtomicBool,
    done: AtomicBool,
    senders: Mutex<BTreeMap<SubgroupId, Sender>>,
    view: Mutex<Option<View>>,
    /// The members' addresses as of the last view installed ([`Group::addresses`]).
    addresses: Mutex<BTreeMap<NodeId, String>>,
    leave: AtomicBool,
    declare: Mutex<Option<Vec<u8>>>,
    /// Set with `declare`, so the predicate thread takes the lock only when there is one.
    declare_pending: AtomicBool,
    /// Why the node stopped, once it did: excluded by a member, or shut down with a
    /// reason (`None` inside: left, or halted).
    why: Mutex<Option<Stop>>,
    /// What the node did, published by the predicate thread.
    counters: CounterCells,
    /// While joining: why links to contacts failed ([`Group::join_failures`]), published
    /// by the predicate thread.
    join_failures: Mutex<Vec<(NodeId, String)>>,
}

/// Why a [`GroupNode`] stopped.
#[derive(Debug, Clone)]
enum Stop {
    Excluded(crate::group::Exclusion),
    LostMajority { vid: u32, why: String },
    ShutDown(String),
    Left,
}

/// A running group member: its [`Group`] on a predicate thread of its own, delivering to
/// an [`Application`].
pub struct GroupNode {
    shared: Arc<GroupShared>,
    endpoint: Arc<dyn Endpoint>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GroupNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupNode")
            .field("node", &self.endpoint.node())
            .field("view", &*lock(&self.shared.view))
            .finish()
    }
}

impl GroupNode {
    /// Starts the predicate thread for `group` (from [`Group::bootstrap`] or
    /// [`Group::join`]) over `endpoint`, spinning as `spin` says (a [`Spin`], or only its
    /// `before_park_us`).
    pub fn start(
        endpoint: Arc<dyn Endpoint>,
        group: Group,
        app: impl Application,
        spin: impl Into<Spin>,
    ) -> Result<GroupNode> {
        Self::start_logged(endpoint, group, app, spin, None)
    }

    /// As [`GroupNode::start`], and with `persister` (from [`crate::persist::Persistence`])
    /// the logged subgroups' deliveries are appended to their logs in delivery order,
    /// synced once per pass of the predicate loop (group commit), published as this
    /// member's `persisted_num`, and the global frontier's moves reach
    /// [`Application::persisted`].
    pub fn start_logged(
        endpoint: Arc<dyn Endpoint>,
        mut group: Group,
        app: impl Application,
        spin: impl Into<Spin>,
        persister: Option<Persister>,
    ) -> Result<GroupNode> {
        let spin = spin.into();
        let shared = Arc::new(GroupShared::default());
        {
            let ep = Arc::clone(&endpoint);
            group.set_waker(Arc::new(move || ep.wake()));
        }
        let thread = {
            let shared = Arc::clone(&shared);
            let ep = Arc::clone(&endpoint);
            spawn_placed(
                format!("spindle-group-{}", endpoint.node()),
                spin.sched,
                move || group_loop(group, ep, &shared, app, spin, persister),
            )?
        };
        Ok(GroupNode {
            shared,
            endpoint,
            thread: Some(thread),
        })
    }

    /// The current view, once installed.
    pub fn view(&self) -> Option<View> {
        lock(&self.shared.view).clone()
    }

    /// The member's counters (deliveries, stability, nulls, views, state transferred),
    /// as of the predicate thread's last round that did work. Never blocks it.
    pub fn counters(&self) -> NodeCounters {
        self.shared.counters.read()
    }

    /// While this node joins: each contact whose last link failed, and why (published by
    /// the predicate thread; empty once a member). What a join that times out reports.
    pub fn join_failures(&self) -> Vec<(NodeId, String)> {
        lock(&self.shared.join_failures).clone()
    }

    /// The fabric addresses of the members known as of the last view installed: where
    /// a node that stopped may ask to join again.
    pub fn addresses(&self) -> BTreeMap<NodeId, String> {
        lock(&self.shared.addresses).clone()
    }

    /// True once the node stopped (shut down or left).
    pub fn is_done(&self) -> bool {
        self.shared.done.load(Ordering::Acquire)
    }

    /// The error for calls made after the node stopped: [`Error::Excluded`] if a member
    /// excluded it (it was stopped, starved or cut off for too long),
    /// [`Error::LostMajority`] if its view lost its majority, [`Error::ShutDown`] with the
    /// group's reason for any other shut-down, else [`Error::Stopped`].
    pub fn stop_error(&self) -> Error {
        match lock(&self.shared.why).clone() {
            Some(Stop::Excluded(x)) => x.error(),
            Some(Stop::LostMajority { vid, why }) => Error::LostMajority { vid, why },
            Some(Stop::ShutDown(why)) => Error::ShutDown(why),
            Some(Stop::Left) | None => Error::Stopped,
        }
    }

    /// A handle for sending in `subgroup` in the current view; [`Error::Wedged`] during a
    /// view change (retry, or use [`GroupNode::send`]).
    pub fn sender(&self, subgroup: SubgroupId) -> Result<Sender> {
        if self.is_done() {
            return Err(self.stop_error());
        }
        lock(&self.shared.senders)
            .get(&subgroup)
            .cloned()
            .ok_or(Error::Wedged { subgroup })
    }

    /// Sends `payload` in `subgroup`, waiting through full windows and view changes until
    /// `timeout` passes. Nothing committed is lost across a view change: the group
    /// re-sends what the old view cut off.
    pub fn send(&self, subgroup: SubgroupId, payload: &[u8], timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut sender: Option<Sender> = None;
        let mut tries: u32 = 0;
        loop {
            if sender.is_none() {
                sender = self.sender(subgroup).ok();
            }
            let err = match &sender {
                Some(s) => match s.try_send(payload) {
                    Ok(seq) => return Ok(seq),
                    Err(e @ (Error::WindowFull { .. } | Error::Wedged { .. })) => e,
                    Err(e) => return Err(e),
                },
                None => Error::Wedged { subgroup },
            };
            if matches!(err, Error::Wedged { .. }) {
                sender = None;
            }
            if self.is_done() {
                return Err(self.stop_error());
            }
            if Instant::now() >= deadline {
                return Err(err);
            }
            tries = tries.saturating_add(1);
            match &sender {
                Some(s) => s.back_off(
                    payload.len(),
                    tries,
                    deadline.saturating_duration_since(Instant::now()),
                ),
                // A view change: no sender to wait on yet.
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }

    /// Declares `declared` for this node (see [`Group::declare`]); a later view carries it
    /// and the application sees it in `view_installed`.
    pub fn declare(&self, declared: Vec<u8>) -> Result<()> {
        if declared.len() > crate::layout::DECLARED_BYTES_MAX {
            return Err(Error::Config(format!(
                "a declaration of {} bytes, at most {}",
                declared.len(),
                crate::layout::DECLARED_BYTES_MAX
            )));
        }
        *lock(&self.shared.declare) = Some(declared);
        self.shared.declare_pending.store(true, Ordering::Release);
        self.endpoint.wake();
        Ok(())
    }

    /// Asks to leave the group; the application's `stopped(None)` follows.
    pub fn leave(&self) {
        self.shared.leave.store(true, Ordering::Release);
        self.endpoint.wake();
    }

    /// Stops the predicate thread (the endpoint stays open).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        stop_thread(&self.shared.stop, &*self.endpoint, &mut self.thread);
    }
}

impl Drop for GroupNode {
    fn drop(&mut self) {
        self.halt();
    }
}

fn group_loop(
    mut group: Group,
    ep: Arc<dyn Endpoint>,
    shared: &GroupShared,
    mut app: impl Application,
    spin: Spin,
    mut persister: Option<Persister>,
) {
    let start = Instant::now();
    let mut idle = IdleSpin::new(spin);
    let mut refresh = true;
    let mut round: u32 = 0;
    let mut now_us = 0;
    // The next round reads the clock whatever its number (the first, and after a park).
    let mut clock_due = true;
    let mut carry = EngineCarry::default();
    // Rounds the endpoint has been corked for (0: not corked). See `CORK_ROUNDS_MAX`.
    let mut corked_rounds: u32 = 0;
    while !shared.stop.load(Ordering::Acquire) {
        round = round.wrapping_add(1);
        if corked_rounds == 0 {
            ep.cork();
        }
        corked_rounds += 1;
        if shared.leave.load(Ordering::Acquire) && shared.leave.swap(false, Ordering::AcqRel) {
            group.leave();
        }
        if shared.declare_pending.load(Ordering::Acquire)
            && shared.declare_pending.swap(false, Ordering::AcqRel)
        {
            if let Some(d) = lock(&shared.declare).take() {
                // Checked against the bound by GroupNode::declare.
                let _ = group.declare(d);
            }
        }
        // The group's time-outs are milliseconds: a busy loop reads the clock every few
        // rounds, an idle one every round (once: the idle spin's reading when it has one).
        if clock_due || round % CLOCK_ROUNDS == 0 {
            now_us = start.elapsed().as_micros() as u64;
            clock_due = false;
        }
        let mut work = drive(&mut group, &*ep, now_us);
        // Messages handed to the application this round.
        let mut delivered = 0;
        while let Some(out) = group.poll() {
            work = true;
            if let GroupOutput::Delivery(b) = &out {
                delivered += b.len();
                if delivered > CORK_CARRY_MESSAGES_MAX && corked_rounds > 0 {
                    // A stream's batch: its acknowledgements go before the upcall.
                    ep.uncork();
                    corked_rounds = 0;
                }
            }
            let stop = match (&out, group.exclusion()) {
                (GroupOutput::ShutDown(_), Some(x)) => Some(Stop::Excluded(x)),
                (GroupOutput::ShutDown(why), None) => Some(match group.lost_majority() {
                    Some(vid) => Stop::LostMajority {
                        vid,
                        why: why.clone(),
                    },
                    None => Stop::ShutDown(why.clone()),
                }),
                (GroupOutput::Left, _) => Some(Stop::Left),
                _ => None,
            };
            if stop.is_some() {
                *lock(&shared.why) = stop;
            }
            if let Some(p) = &mut persister {
                // The first stage (delivery) is the application's; the second (the log)
                // follows in the same order.
                if let Err(e) = p.record(&out) {
                    tracing::error!(error = %e, "logged store: logging stops, frontier frozen");
                    persister = None;
                }
            }
            if let GroupOutput::InstallState { state, .. } = &out {
                shared.counters.state_received(state.len());
            }
            match hand_to(&mut group, &mut app, out) {
                Handed::StateGiven { bytes } => shared.counters.state_given(bytes),
                Handed::View(view) => {
                    *lock(&shared.view) = Some(view);
                    *lock(&shared.addresses) = group.addresses().clone();
                    lock(&shared.senders).clear();
                    refresh = true;
                }
                Handed::State => refresh = true,
                Handed::Stopped => shared.done.store(true, Ordering::Release),
                Handed::Other => {}
            }
        }
        if work {
            app.round_end();
            carry.publish(&group, &shared.counters);
            if group.view().is_none() {
                *lock(&shared.join_failures) = group
                    .join_failures()
                    .iter()
                    .map(|(n, why)| (*n, why.to_string()))
                    .collect();
            }
        }
        // This round's pushes (the acknowledgements of what it received above all) wait
        // for the next round's when the application was handed a few deliveries: what
        // its upcall wrote (a reply) then leaves in the same system call. Not for a
        // stream's big rounds (uncorked above, before the upcall: their senders wait for
        // those acknowledgements), nor across a log's sync, which may take milliseconds.
        if corked_rounds > 0
            && (delivered == 0 || corked_rounds >= CORK_ROUNDS_MAX || persister.is_some())
        {
            ep.uncork();
            corked_rounds = 0;
        }
        if let Some(p) = &mut persister {
            // Group commit: one sync per log covers every delivery of this pass.
            match p.commit(&mut group, |f| app.persisted(f)) {
                Ok(synced) => work |= synced,
                Err(e) => {
                    tracing::error!(error = %e, "logged store: logging stops, frontier frozen");
                    persister = None;
                }
            }
        }
        if group.is_done() {
            shared.done.store(true, Ordering::Release);
            lock(&shared.senders).clear();
            break;
        }
        if refresh {
            // Publish the new view's senders once the group hands them out (after its
            // state arrived and its re-sends went out).
            let mut all = true;
            let mut map = lock(&shared.senders);
            for sg in group
                .layout()
                .map(|l| l.subgroups.clone())
                .unwrap_or_default()
            {
                match group.sender(sg.id) {
                    Ok(s) => {
                        map.insert(sg.id, s);
                    }
                    Err(Error::NotASender { .. } | Error::UnknownSubgroup { .. }) => {}
                    Err(_) => all = false,
                }
            }
            refresh = !all;
        }
        if work {
            idle.worked();
            continue;
        }
        let spun = idle.idle();
        // An idle round's time is the spin's reading when it took one (the first idle
        // round after work does), else the next round reads the clock itself.
        match spun.now {
            Some(at) => now_us = at.saturating_duration_since(start).as_micros() as u64,
            None => clock_due = true,
        }
        if spun.park {
            // Park, but wake in time for the group's time-outs (joins, activation) and a
            // dare subgroup's heartbeats.
            let hb = group.engine().and_then(Engine::dare_heartbeat_us);
            let park = Duration::from_millis(5);
            ep.wait(hb.map_or(park, |hb| park.min(Duration::from_micros(hb))));
            clock_due = true;
        }
    }
    if corked_rounds > 0 {
        ep.uncork();
    }
}

/// What [`hand_to`] did with one output, for the runner's own bookkeeping.
#[derive(Debug)]
pub enum Handed {
    /// A new view was installed (the application saw it); its senders change.
    View(View),
    /// A subgroup's state was installed: its sender may be handed out now.
    State,
    /// The node stopped (shut down or left; the application saw it).
    Stopped,
    /// A snapshot of `bytes` was given to a joiner.
    StateGiven {
        /// The snapshot's size.
        bytes: usize,
    },
    /// A delivery or messages handed back.
    Other,
}

/// Hands one [`GroupOutput`] to `app` (answering a state request through `group`): the
/// one place a group's output becomes application upcalls, used by [`GroupNode`]'s
/// predicate thread and by the simulations alike.
pub fn hand_to(group: &mut Group, app: &mut impl Application, out: GroupOutput) -> Handed {
    match out {
        GroupOutput::Delivery(b) => {
            if let Some(b) = app.deliver_owned(b) {
                group.recycle(b);
            }
            Handed::Other
        }
        GroupOutput::ViewInstalled(v) => {
            app.view_installed(&v);
            Handed::View(v.view)
        }
        GroupOutput::StateRequested { subgroup, joiner } => {
            let _span = tracing::info_span!("state_transfer_give", subgroup, joiner).entered();
            let state = app.snapshot(subgroup);
            tracing::debug!(bytes = state.len(), "state snapshot taken");
            if let Err(e) = group.provide_state(subgroup, joiner, &state) {
                tracing::error!(subgroup, joiner, error = %e, "state transfer");
            }
            Handed::StateGiven { bytes: state.len() }
        }
        GroupOutput::InstallState { subgroup, state } => {
            let _span = tracing::info_span!("state_transfer_install", subgroup).entered();
            tracing::debug!(bytes = state.len(), "installing state");
            app.install(subgroup, &state);
            Handed::State
        }
        GroupOutput::Undeliverable { subgroup, payloads } => {
            app.undeliverable(subgroup, payloads);
            Handed::Other
        }
        GroupOutput::PinsWanted { subgroup } => {
            app.pins_wanted(subgroup);
            Handed::Other
        }
        GroupOutput::ShutDown(why) => {
            app.stopped(Some(&why));
            Handed::Stopped
        }
        GroupOutput::Left => {
            app.stopped(None);
            Handed::Stopped
        }
    }
}

/// One round of a [`Group`] over `ep` at `now_us`: hands it the fabric's events, runs it
/// once, performs the [`GroupAction`]s it queued (in order) and posts its pushes, holding
/// a push whose peer has not announced the region yet.
/// Returns true if anything happened. The predicate thread of [`GroupNode`] and the
/// simulations drive a group only through this function.
pub fn drive(group: &mut Group, ep: &dyn Endpoint, now_us: u64) -> bool {
    let mut work = false;
    while let Some(ev) = ep.poll_event() {
        work = true;
        group.handle_event(ep, ev, now_us);
    }
    work |= group.handle_time(ep, now_us);
    let perform_all = |group: &mut Group| {
        while let Some(action) = group.poll_action() {
            if let Some(unsent) = perform(ep, action) {
                group.handle_unsent(unsent);
            }
        }
    };
    perform_all(group);
    // The last (peer, region) seen announced: a round's pushes mostly go to a few.
    let mut known = None;
    // The round's pushes reach each peer together (tcp: one system call per link).
    let _corked = Corked::new(ep);
    let posted = group.drain_pushes(|p, bytes| {
        if known != Some((p.peer, p.region)) {
            if ep.remote_region(p.peer, p.region).is_none() {
                // The peer has not installed this view (or the link is not up yet): hold.
                return Err(spindle_transport_rdma::Error::QueueFull { peer: p.peer });
            }
            known = Some((p.peer, p.region));
        }
        p.post(ep, bytes)
    });
    let posted = posted + group.drain_dare(|out, imm, ctrl| post_dare(ep, out, imm, ctrl));
    drop(_corked);
    // State transfers, which follow the round's writes.
    perform_all(group);
    work || posted > 0
}

/// Posts one output of a dare subgroup's core ([`Group::drain_dare`]): a write, or a
/// two-sided send with the subgroup's immediate `imm`. A send or a control-region write
/// to a peer that has not announced the view's control region `ctrl` yet is held
/// (`QueueFull`), as an SST push is; a log-region write goes out as it is (the core
/// writes only into log regions it heard announced; a withdrawn one refuses it).
pub fn post_dare(
    ep: &dyn Endpoint,
    out: &crate::dare::DareOut,
    imm: u32,
    ctrl: spindle_transport_rdma::RegionId,
) -> spindle_transport_rdma::Result<()> {
    use crate::dare::DareOut;
    let (peer, gated) = match out {
        DareOut::Write { peer, region, .. } => (*peer, *region == ctrl),
        DareOut::Send { peer, .. } => (*peer, true),
    };
    if gated && ep.remote_region(peer, ctrl).is_none() {
        return Err(spindle_transport_rdma::Error::QueueFull { peer });
    }
    crate::dare::runtime::post_with(ep, out, imm)
}

/// An [`Endpoint::cork`] ended when dropped, whatever path leaves the scope.
pub(crate) struct Corked<'a>(&'a dyn Endpoint);

impl<'a> Corked<'a> {
    /// Corks `ep` until the value is dropped.
    pub(crate) fn new(ep: &'a dyn Endpoint) -> Corked<'a> {
        ep.cork();
        Corked(ep)
    }
}

impl Drop for Corked<'_> {
    fn drop(&mut self) {
        self.0.uncork();
    }
}

/// Carries out one [`GroupAction`] on `ep`; gives back a send to retry (no link yet, or
/// its queue is full). Failures of the others are the protocol's to notice (a link that
/// does not come up surfaces as a failure event; joins and declarations are repeated).
pub fn perform(ep: &dyn Endpoint, action: GroupAction) -> Option<GroupAction> {
    match action {
        GroupAction::Connect { peer, address } => {
            let _ = ep.connect(peer, &address);
        }
        GroupAction::Disconnect { peer } => {
            let _ = ep.disconnect(peer);
        }
        GroupAction::DeregisterRegion(id) => {
            let _ = ep.deregister_region(id);
        }
        GroupAction::Send {
            peer,
            imm,
            ref bytes,
            retry,
        } => match ep.send(peer, imm, bytes) {
            Err(
                spindle_transport_rdma::Error::NotConnected { .. }
                | spindle_transport_rdma::Error::QueueFull { .. },
            ) if retry => return Some(action),
            _ => {}
        },
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_busy_thread_yields_once_the_bound_passed_and_only_at_a_clock_round() {
        let since = Instant::now();
        let bound = Duration::from_micros(50);
        let at = |d: Duration| move || since + d;
        assert!(busy_yield_due(CLOCK_ROUNDS, since, bound, at(bound)));
        assert!(busy_yield_due(
            2 * CLOCK_ROUNDS,
            since,
            bound,
            at(bound * 3)
        ));
        assert!(
            !busy_yield_due(
                CLOCK_ROUNDS,
                since,
                bound,
                at(bound - Duration::from_micros(1))
            ),
            "before the bound"
        );
        assert!(
            !busy_yield_due(CLOCK_ROUNDS - 1, since, bound, at(bound * 3)),
            "the clock is read only every CLOCK_ROUNDS rounds"
        );
    }

    #[test]
    fn busy_rounds_restart_after_an_idle_round_and_after_a_yield() {
        let mut idle = IdleSpin::new(Spin {
            before_park_us: 1_000,
            busy_yield_us: 50,
            sched: ThreadSched::default(),
        });
        // Busy since long ago: the next clock round yields and starts over.
        idle.busy_since = Instant::now() - Duration::from_secs(1);
        for _ in 0..CLOCK_ROUNDS - 1 {
            idle.worked();
        }
        assert_eq!(idle.busy_rounds, CLOCK_ROUNDS - 1);
        let before = Instant::now();
        idle.worked();
        assert_eq!(idle.busy_rounds, 0, "yielded at the clock round");
        assert!(idle.busy_since >= before, "and the busy time starts over");
        // An idle round between: the next work starts a fresh busy run.
        idle.worked();
        idle.busy_since = Instant::now() - Duration::from_secs(1);
        let _ = idle.idle();
        let before = Instant::now();
        idle.worked();
        assert_eq!(idle.busy_rounds, 1);
        assert!(idle.busy_since >= before);
    }

    #[test]
    fn without_a_busy_yield_busy_rounds_are_not_counted() {
        let mut idle = IdleSpin::new(Spin::from(1_000));
        assert_eq!(idle.busy_yield, None);
        let since = idle.busy_since;
        for _ in 0..4 * CLOCK_ROUNDS {
            idle.worked();
        }
        assert_eq!(idle.busy_rounds, 0);
        assert_eq!(idle.busy_since, since);
    }

    #[test]
    fn a_park_cut_short_grows_the_spin_to_cover_the_gap_within_the_cap() {
        // A 1 kHz stream against 1 ms: the park began at 1 ms and work came 0.1 ms in.
        let grown = next_spin_budget(MS, MS, MS / 10);
        assert_eq!(
            grown,
            MS + MS / 10 + MS / 8,
            "budget + gap + an eighth of the spin"
        );
        // It never grows past IDLE_SPIN_GROWTH_MAX times the configured spin.
        let mut b = MS;
        for _ in 0..20 {
            b = next_spin_budget(MS, b, MS * 9 / 10);
        }
        assert_eq!(b, MS * IDLE_SPIN_GROWTH_MAX);
    }

    #[test]
    fn a_long_park_brings_the_spin_back_and_zero_stays_zero() {
        let grown = MS * IDLE_SPIN_GROWTH_MAX;
        assert_eq!(
            next_spin_budget(MS, grown, MS),
            MS,
            "parked as long as the spin"
        );
        assert_eq!(next_spin_budget(MS, grown, 50 * MS), MS);
        // spin_before_park_us = 0: park at once, always.
        assert_eq!(
            next_spin_budget(Duration::ZERO, Duration::ZERO, Duration::ZERO),
            Duration::ZERO
        );
    }

    #[test]
    fn an_idle_spin_parks_only_once_its_budget_is_spent() {
        let mut idle = IdleSpin::new(Spin::from(3_600_000_000));
        for _ in 0..4 * CLOCK_ROUNDS {
            assert!(!idle.idle().park, "an hour's budget is not spent");
        }
        let mut idle = IdleSpin::new(Spin::from(0));
        let parked = (0..CLOCK_ROUNDS).filter(|_| idle.idle().park).count();
        assert_eq!(parked, 1, "a zero budget parks at the first clock reading");
        assert!(idle.parked_at.is_some());
        idle.worked();
        assert!(idle.parked_at.is_none() && idle.rounds == 0);
        assert_eq!(idle.budget, Duration::ZERO);
    }
}
