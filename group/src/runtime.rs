//! The runtime: drives one node's [`Engine`] over a real fabric with one predicate thread.
//!
//! The thread loops `step`, posts the pushes, hands delivery batches to the application's
//! upcall and feeds fabric failures back into the engine. It spins while there is work
//! and for [`NodeConfig::spin_before_park_us`] after, then parks on the endpoint's doorbell
//! (woken by writes landing, fabric events, drained queues, and application commits via
//! [`Endpoint::wake`]), so an idle node burns no core (DESIGN §3, §8).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spindle_transport_rdma::{Endpoint, Event, NodeId};

use crate::engine::{DeliveryBatch, Engine, EngineConfig, EngineEvent, EngineStats};
use crate::error::{Error, Result};
use crate::layout::{Layout, SubgroupId, View};
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
    /// How long the predicate thread keeps spinning after its last work before parking.
    pub spin_before_park_us: u64,
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
            spin_before_park_us: 1_000,
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
        let engine = Engine::new(
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
            std::thread::Builder::new()
                .name(format!("spindle-predicates-{me}"))
                .spawn(move || predicate_loop(engine, ep, &cfg, &shared, upcall))
                .map_err(|e| Error::Config(format!("spawning the predicate thread: {e}")))?
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
        self.shared.stop.store(true, Ordering::Release);
        self.endpoint.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
    let spin = Duration::from_micros(cfg.spin_before_park_us);
    let park = Duration::from_millis(cfg.park_ms);
    let mut scratch = Vec::new();
    let mut last_work = Instant::now();
    let mut idle_rounds: u32 = 0;
    let mut round: u32 = 0;
    while !shared.stop.load(Ordering::Acquire) {
        round = round.wrapping_add(1);
        let mut work = engine.step();
        work |= engine.drain_pushes(&mut scratch, |p, bytes| p.post(&*ep, bytes)) > 0;
        while let Some(batch) = engine.poll_delivery() {
            upcall(&batch);
            work = true;
        }
        // Fabric events are rare (failures): look every few rounds, and whenever idle.
        if !work || round % EVENT_POLL_ROUNDS == 0 {
            while let Some(event) = ep.poll_event() {
                if let Event::PeerFailed { peer, .. } = event {
                    engine.handle_peer_failed(peer);
                }
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
            idle_rounds = 0;
            if round % STATS_ROUNDS == 0 {
                *lock(&shared.stats) = engine.stats();
            }
            continue;
        }
        idle_rounds += 1;
        if idle_rounds == 1 {
            last_work = Instant::now();
            *lock(&shared.stats) = engine.stats();
        }
        // Idle: yield rather than spin hard (the application's threads may need this core;
        // 2-core machines run several nodes), read the clock only now and then, and park
        // once the spin budget is spent.
        std::thread::yield_now();
        if idle_rounds % CLOCK_ROUNDS == 0 && last_work.elapsed() >= spin {
            ep.wait(park);
        }
    }
    *lock(&shared.stats) = engine.stats();
}
