//! The simulation harness (feature `testkit`): nodes over one deterministic sim fabric,
//! driven round by round from one thread.
//!
//! Every simulation of the project runs on this one loop — the engine tests
//! (`tests/common`), the swarm of view changes under faults ([`crate::swarm`]), the
//! workloads' `--backend sim` (`spindle-bench`) and DCPS in simulation
//! (`spindle_dds_core::sim`). A [`SimCluster`] owns the [`SimWorld`], the nodes (anything
//! that is a [`SimNode`]: an [`EngineNode`], a swarm member, a DCPS participant) and the
//! seeded generator that picks how far virtual time moves after each round. A round steps
//! every live node once, in id order, at the same virtual time, then advances the fabric.
//! Runs of many nodes step event by event instead ([`SimCluster::next_event`]: the next
//! delivery, then only the nodes it reached), as the RDMC completion table does with 1025.
//! The same seed and the same calls give the same run ([`SimCluster::trace_hash`]).
//!
//! ```
//! use spindle_group::testkit::{engine_cluster, SimCluster};
//! use spindle_group::{DeliveryMode, EngineConfig, Layout, SubgroupSpec, View};
//! use spindle_transport_rdma::sim::{SimConfig, SimWorld};
//!
//! let layout = Layout {
//!     subgroups: vec![SubgroupSpec {
//!         id: 0,
//!         members: vec![1, 2],
//!         senders: vec![1, 2],
//!         mode: DeliveryMode::Atomic,
//!         window_slots: 4,
//!         slot_payload_bytes: 64,
//!         rdmc: None,
//!         delivery_prefix: None,
//!     }],
//! };
//! let world = SimWorld::new(7, SimConfig::default());
//! let mut sim = engine_cluster(world, &View::new(1, vec![1, 2]), &layout,
//!     EngineConfig::default(), 7, 0..200).unwrap();
//! let sender = sim.nodes[&1].engine.sender(0).unwrap();
//! sender.try_send(b"hello").unwrap();
//! let mut got = 0;
//! while got == 0 {
//!     sim.round();
//!     while let Some(b) = sim.nodes.get_mut(&2).unwrap().engine.poll_delivery() {
//!         got += b.len();
//!     }
//! }
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{Endpoint, Event, NodeId, Region};

use crate::engine::{Engine, EngineConfig};
use crate::error::{Error, Result};
use crate::group::{Group, GroupConfig, GroupOutput};
use crate::layout::{Layout, View};

/// Steps the fabric may take to bring up the links of a new [`engine_cluster`].
pub const CONNECT_STEPS_MAX: usize = 1_000_000;
/// Steps one node takes in a row in [`SimCluster::settle`] while it reports work.
pub const SETTLE_STEPS_MAX: usize = 1 << 16;

/// One node a [`SimCluster`] runs.
pub trait SimNode {
    /// False once the node is gone (crashed, stopped); the rounds skip it.
    fn is_live(&self) -> bool {
        true
    }
    /// One step of the node at virtual time `now_us`: take the fabric's events, run,
    /// post the writes and sends. `scratch` is shared by all nodes of the cluster. True
    /// if anything happened.
    fn step(&mut self, now_us: u64, scratch: &mut Vec<u8>) -> bool;
}

/// An [`Engine`] of a fixed view over a sim endpoint. Its deliveries and events stay in
/// the engine for the caller to poll.
#[derive(Debug)]
pub struct EngineNode {
    /// The node's endpoint.
    pub ep: Arc<SimEndpoint>,
    /// The node's engine.
    pub engine: Engine,
    /// The test crashed it: it no longer runs.
    pub crashed: bool,
}

impl SimNode for EngineNode {
    fn is_live(&self) -> bool {
        !self.crashed
    }

    fn step(&mut self, now_us: u64, _scratch: &mut Vec<u8>) -> bool {
        let mut work = false;
        while let Some(event) = self.ep.poll_event() {
            work = true;
            crate::runtime::handle_fabric_event(&mut self.engine, event);
        }
        work |= self.engine.step();
        // A dare subgroup's core runs on the (virtual) clock, as on the predicate thread.
        if self.engine.has_dare() {
            work |= crate::runtime::step_dare(&mut self.engine, &*self.ep, now_us);
        }
        let ep = &self.ep;
        work |= self.engine.drain_pushes(|p, bytes| p.post(&**ep, bytes)) > 0;
        work | (self
            .engine
            .drain_dare(|out, imm, ctrl| crate::runtime::post_dare(&**ep, out, imm, ctrl))
            > 0)
    }
}

/// Nodes over one simulated fabric. See the module docs.
#[derive(Debug)]
pub struct SimCluster<N> {
    /// The simulated fabric.
    pub world: SimWorld,
    /// The nodes, by id (rounds step them in this order).
    pub nodes: BTreeMap<NodeId, N>,
    /// The generator of round steps; tests may draw their traffic from it too, so one
    /// seed decides everything.
    pub rng: ChaCha8Rng,
    step_us: Range<u64>,
    rounds: u64,
    scratch: Vec<u8>,
}

impl<N: SimNode> SimCluster<N> {
    /// An empty cluster over `world`; after each round virtual time moves by a step drawn
    /// from `step_us` with a generator seeded by `rng_seed` (an empty range: no step).
    pub fn new(world: SimWorld, rng_seed: u64, step_us: Range<u64>) -> SimCluster<N> {
        SimCluster {
            world,
            nodes: BTreeMap::new(),
            rng: ChaCha8Rng::seed_from_u64(rng_seed),
            step_us,
            rounds: 0,
            scratch: Vec::new(),
        }
    }

    /// Links each pair of `pairs` (the first node dials the second; `ep` gives a node's
    /// endpoint), runs the fabric until it is idle, and checks that every node saw one
    /// link come up per pair it is in: an error naming the first node short of its links
    /// otherwise. The nodes' fabric events are consumed.
    pub fn connect(
        &mut self,
        pairs: &[(NodeId, NodeId)],
        ep: impl Fn(&N) -> &SimEndpoint,
    ) -> Result<()> {
        let mut links: BTreeMap<NodeId, usize> = self.nodes.keys().map(|&id| (id, 0)).collect();
        for &(a, b) in pairs {
            let (Some(na), Some(nb)) = (self.nodes.get(&a), self.nodes.get(&b)) else {
                return Err(Error::Config(format!("sim: no node {a} or {b} to link")));
            };
            ep(na).connect(b, &ep(nb).address())?;
            *links.entry(a).or_default() += 1;
            *links.entry(b).or_default() += 1;
        }
        self.world
            .run_until_idle(CONNECT_STEPS_MAX.max(8 * pairs.len()));
        for (id, n) in &self.nodes {
            let mut connected = 0;
            while let Some(e) = ep(n).poll_event() {
                connected += usize::from(matches!(e, Event::PeerConnected { .. }));
            }
            let want = links[id];
            if connected != want {
                return Err(Error::Config(format!(
                    "sim: node {id} has {connected} links of {want}"
                )));
            }
        }
        Ok(())
    }

    /// [`SimCluster::connect`] for every pair of `ids`, each node dialing those after it.
    pub fn connect_mesh(&mut self, ids: &[NodeId], ep: impl Fn(&N) -> &SimEndpoint) -> Result<()> {
        let pairs: Vec<(NodeId, NodeId)> = ids
            .iter()
            .enumerate()
            .flat_map(|(i, &a)| ids[i + 1..].iter().map(move |&b| (a, b)))
            .collect();
        self.connect(&pairs, ep)
    }

    /// Rounds run so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Virtual time now, in µs.
    pub fn now_us(&self) -> u64 {
        self.world.now_us()
    }

    /// The ids of the live nodes, in order.
    pub fn live(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.is_live())
            .map(|(id, _)| *id)
            .collect()
    }

    /// One step of node `id` at the current virtual time (nothing if it is not live).
    pub fn step_node(&mut self, id: NodeId) -> bool {
        let now_us = self.world.now_us();
        match self.nodes.get_mut(&id) {
            Some(n) if n.is_live() => n.step(now_us, &mut self.scratch),
            _ => false,
        }
    }

    /// Moves virtual time by one seeded step, applying what falls due.
    pub fn advance(&mut self) {
        self.rounds += 1;
        if !self.step_us.is_empty() {
            let dt = self.rng.gen_range(self.step_us.clone());
            self.world.run_for(dt);
        }
    }

    /// One round: every live node steps once, in id order, and `after` sees each right
    /// after its step (to take its outputs); then virtual time advances. True if any node
    /// did something.
    pub fn round_with(&mut self, mut after: impl FnMut(NodeId, &mut N)) -> bool {
        let mut work = false;
        for id in self.live() {
            work |= self.step_node(id);
            if let Some(n) = self.nodes.get_mut(&id) {
                after(id, n);
            }
        }
        self.advance();
        work
    }

    /// One round, outputs left in the nodes.
    pub fn round(&mut self) -> bool {
        self.round_with(|_, _| {})
    }

    /// Event-driven stepping, for runs of many nodes (a round steps every node): steps
    /// the nodes in `also` and those the fabric woke since the last call
    /// ([`SimWorld::take_woken`]: a write landed, an event queued, a full link drained),
    /// each again while it reports work (at most [`SETTLE_STEPS_MAX`] times), all at the
    /// current virtual time. True if any did something.
    pub fn settle(&mut self, also: &[NodeId]) -> bool {
        let mut woken = also.to_vec();
        let mut work = false;
        loop {
            self.world.take_woken(&mut woken);
            if woken.is_empty() {
                return work;
            }
            woken.sort_unstable();
            woken.dedup();
            for id in std::mem::take(&mut woken) {
                for _ in 0..SETTLE_STEPS_MAX {
                    if !self.step_node(id) {
                        break;
                    }
                    work = true;
                }
            }
        }
    }

    /// Applies the fabric's next delivery or timer (virtual time jumps to its due time)
    /// and [`SimCluster::settle`]s the nodes it woke. False if nothing was left to apply.
    pub fn next_event(&mut self) -> bool {
        if !self.world.step() {
            return false;
        }
        self.settle(&[]);
        true
    }

    /// Hash of every delivery and timer of the fabric so far.
    pub fn trace_hash(&self) -> u64 {
        self.world.trace_hash()
    }
}

/// A sim fabric for membership tests: links whose delays `seed` draws, 1 to `1 + 10 *
/// seed` µs (so each seed orders the messages differently), and failure detection after
/// 2 ms.
pub fn membership_world(seed: u64) -> SimWorld {
    SimWorld::new(
        seed,
        SimConfig {
            link_delay_min_us: 1,
            link_delay_max_us: 1 + seed * 10,
            failure_detection_us: 2_000,
            ..SimConfig::default()
        },
    )
}

/// The members of `view` bootstrapped together in it, each over its own endpoint of
/// `world` (which knows every member's address), in the view's member order. An error
/// names the member whose [`Group::bootstrap`] refused.
pub fn bootstrapped_groups(
    world: &SimWorld,
    view: &View,
    cfg: &GroupConfig,
) -> Result<Vec<(NodeId, Arc<SimEndpoint>, Group)>> {
    let eps: Vec<_> = view.members.iter().map(|n| world.endpoint(*n)).collect();
    let addresses: BTreeMap<NodeId, String> = view
        .members
        .iter()
        .zip(&eps)
        .map(|(n, ep)| (*n, ep.address()))
        .collect();
    view.members
        .iter()
        .zip(eps)
        .map(|(&n, ep)| {
            let g = Group::bootstrap(&*ep, view.clone(), addresses.clone(), cfg.clone(), 0)
                .map_err(|e| Error::Config(format!("bootstrapping node {n}: {e}")))?;
            Ok((n, ep, g))
        })
        .collect()
}

/// A [`Group`] on the sim fabric, driven by the runtime's `drive`, and what it output:
/// the views it installed and why it shut down. Built from [`bootstrapped_groups`]'s
/// triples; [`group_round`] runs a map of them.
#[derive(Debug)]
pub struct SimGroupNode {
    /// Its endpoint.
    pub ep: Arc<SimEndpoint>,
    /// The group.
    pub g: Group,
    /// The views it installed since it was built.
    pub installed: Vec<View>,
    /// Why it shut down, once it did.
    pub shut_down: Option<String>,
}

impl SimGroupNode {
    /// A node that has output nothing yet.
    pub fn new(ep: Arc<SimEndpoint>, g: Group) -> SimGroupNode {
        SimGroupNode {
            ep,
            g,
            installed: Vec::new(),
            shut_down: None,
        }
    }
}

/// One round of `nodes`: every node that is not done runs once at the world's time and
/// its outputs are recorded (a state a joiner asks for is given as empty), then the
/// fabric moves on `step_us` of virtual time.
pub fn group_round(world: &SimWorld, nodes: &mut BTreeMap<NodeId, SimGroupNode>, step_us: u64) {
    for n in nodes.values_mut().filter(|n| !n.g.is_done()) {
        crate::runtime::drive(&mut n.g, &*n.ep, world.now_us());
        while let Some(out) = n.g.poll() {
            match out {
                GroupOutput::ViewInstalled(v) => n.installed.push(v.view),
                GroupOutput::ShutDown(why) => n.shut_down = Some(why),
                GroupOutput::StateRequested { subgroup, joiner } => {
                    // A refusal is left to the caller's checks (the joiner goes without).
                    let _ = n.g.provide_state(subgroup, joiner, &[]);
                }
                _ => {}
            }
        }
    }
    world.run_for(step_us);
}

/// A cluster of [`EngineNode`]s, one per member of `view`, every pair linked, all running
/// `layout` under `config`. See [`SimCluster::new`] for `rng_seed` and `step_us`.
pub fn engine_cluster(
    world: SimWorld,
    view: &View,
    layout: &Layout,
    config: EngineConfig,
    rng_seed: u64,
    step_us: Range<u64>,
) -> Result<SimCluster<EngineNode>> {
    engine_cluster_seeing_regions(world, view, layout, config, rng_seed, step_us, |_, _| {})
}

/// [`engine_cluster`], handing `registered` each node's regions as its engine registers
/// them (a test that writes into a node's memory as a peer's one-sided writes would).
pub fn engine_cluster_seeing_regions(
    world: SimWorld,
    view: &View,
    layout: &Layout,
    config: EngineConfig,
    rng_seed: u64,
    step_us: Range<u64>,
    mut registered: impl FnMut(NodeId, &Region),
) -> Result<SimCluster<EngineNode>> {
    let mut sim = SimCluster::new(world, rng_seed, step_us);
    for &n in &view.members {
        let ep = sim.world.endpoint(n);
        let engine = Engine::new(
            n,
            view.clone(),
            layout.clone(),
            config.clone(),
            |id, len| {
                let r = ep.register_region(id, len)?;
                registered(n, &r);
                Ok(r)
            },
        )?;
        sim.nodes.insert(
            n,
            EngineNode {
                ep,
                engine,
                crashed: false,
            },
        );
    }
    sim.connect_mesh(&view.members, |n| &n.ep)?;
    Ok(sim)
}
