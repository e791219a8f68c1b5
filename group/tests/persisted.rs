//! Two-stage delivery over the sim fabric: three members of a logged subgroup deliver,
//! append to their logs and sync at different, seeded paces (a slow disk, a fast one);
//! the SST's `persisted_num` column gives the global frontier. Checked every round: the
//! frontier any member sees never claims more than every member's log holds durably.
//! Checked at the end: the frontier reaches the last message, the application upcall saw
//! it, and the three logs hold the same entries, in the delivery order.

use std::sync::Arc;

use rand::Rng;
use spindle_group::persist::{PersistedFrontier, Persistence, Persister};
use spindle_group::runtime::drive;
use spindle_group::testkit::{bootstrapped_groups, SimCluster, SimNode};
use spindle_group::{Group, GroupConfig, GroupOutput, Layout, LayoutFn, View};
use spindle_log::{LogConfig, Version};
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{FabricConfig, NodeId};

const SG: u32 = 4;
const SEEDS: [u64; 3] = [1, 2, 3];
const MESSAGES: u64 = 300;
const ROUNDS_MAX: usize = 200_000;

fn layout() -> LayoutFn {
    Arc::new(|view: &View| Ok(Layout::one_subgroup(view, SG, 8, 64)))
}

struct Node {
    ep: Arc<SimEndpoint>,
    group: Group,
    persister: Persister,
    /// How many rounds of 8 this node's disk syncs in (seeded: disks of different speed).
    sync_every: u64,
    steps: u64,
    delivered: Vec<(Version, Vec<u8>)>,
    vid: u32,
    frontiers: Vec<PersistedFrontier>,
}

impl SimNode for Node {
    fn step(&mut self, now_us: u64, _scratch: &mut Vec<u8>) -> bool {
        self.steps += 1;
        let mut work = drive(&mut self.group, &*self.ep, now_us);
        while let Some(out) = self.group.poll() {
            work = true;
            match &out {
                GroupOutput::Delivery(b) => {
                    self.persister.append(b).expect("append");
                    for m in b.iter() {
                        let v = Version::new(u64::from(self.vid), m.global_index);
                        self.delivered.push((v, m.payload.to_vec()));
                    }
                }
                GroupOutput::ViewInstalled(v) => {
                    self.vid = v.view.vid;
                    self.persister
                        .view_installed(&v.view)
                        .expect("log the view");
                }
                _ => {}
            }
        }
        if self.steps % self.sync_every == 0 {
            work |= self.persister.sync(&mut self.group).expect("sync");
        }
        self.frontiers.extend(self.persister.frontiers(&self.group));
        work
    }
}

/// The durable prefix of `n`'s log in view `vid`, as a count of the delivery order.
fn durable_num(n: &Node, vid: u32) -> u64 {
    match n.persister.log(SG).and_then(|l| l.persisted()) {
        Some(v) if v.view_id == u64::from(vid) => v.order_index + 1,
        _ => 0,
    }
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let world = SimWorld::new(
        seed,
        SimConfig {
            link_delay_min_us: 1,
            link_delay_max_us: 50,
            failure_detection_us: 2_000,
            fabric: FabricConfig::default(),
            ..SimConfig::default()
        },
    );
    let cfg = GroupConfig {
        layout: layout(),
        ..GroupConfig::new(layout())
    };
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let view = View::new(1, ids.clone());
    let mut sim: SimCluster<Node> = SimCluster::new(world, seed, 1..20);
    let groups =
        bootstrapped_groups(&sim.world, &view, &cfg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (id, ep, group) in groups {
        let persister = Persistence::new(dir.path().join(format!("node-{id}")))
            .subgroup(SG, LogConfig::default())
            .open()
            .unwrap();
        let sync_every = sim.rng.gen_range(1..8);
        sim.nodes.insert(
            id,
            Node {
                ep,
                group,
                persister,
                sync_every,
                steps: 0,
                delivered: Vec::new(),
                vid: 0,
                frontiers: Vec::new(),
            },
        );
    }
    let mut sent = 0u64;
    let mut done = false;
    for round in 0..ROUNDS_MAX {
        if sent < MESSAGES {
            let from = sim.rng.gen_range(1..=3u32);
            let n = sim.nodes.get(&from).unwrap();
            if let Ok(s) = n.group.sender(SG) {
                let msg = format!("m{sent} from {from}");
                if s.try_send(msg.as_bytes()).is_ok() {
                    sent += 1;
                }
            }
        }
        sim.round();
        // Safety: the frontier any member sees is durable at every member.
        for (id, n) in &sim.nodes {
            let Some(e) = n.group.engine() else { continue };
            let vid = e.view().vid;
            let global = e.global_persisted_num(SG).unwrap();
            for m in sim.nodes.values() {
                assert!(
                    global <= durable_num(m, vid),
                    "seed {seed} round {round}: node {id} sees frontier {global}, beyond what \
                     a member's log holds"
                );
            }
        }
        let last_global = sim.nodes[&1].delivered.last().map(|d| d.0.order_index + 1);
        if sent == MESSAGES
            && sim
                .nodes
                .values()
                .all(|n| n.delivered.len() as u64 == MESSAGES)
            && sim
                .nodes
                .values()
                .all(|n| n.frontiers.last().map(|f| f.global_persisted_num) == last_global)
        {
            done = true;
            break;
        }
    }
    assert!(
        done,
        "seed {seed}: the frontier did not reach the last message"
    );
    let logs: Vec<Vec<(Version, Vec<u8>)>> = sim
        .nodes
        .values_mut()
        .map(|n| {
            let mut log =
                spindle_log::Log::open(n.persister.log(SG).unwrap().dir(), LogConfig::default())
                    .unwrap();
            log.range(..)
                .unwrap()
                .map(|e| e.map(|e| (e.meta.version, e.payload)))
                .collect::<Result<_, _>>()
                .unwrap()
        })
        .collect();
    for (n, log) in sim.nodes.values().zip(&logs) {
        assert_eq!(
            log, &n.delivered,
            "seed {seed}: the log is the delivery order"
        );
        assert_eq!(log, &logs[0], "seed {seed}: every member logged the same");
        // Frontiers reported only ever move up.
        assert!(n
            .frontiers
            .windows(2)
            .all(|w| w[0].global_persisted_num < w[1].global_persisted_num));
        assert!(n.group.engine().unwrap().stats().persisted_frontier_moves > 0);
    }
}

#[test]
fn the_global_frontier_is_durable_everywhere_and_reaches_the_end() {
    for seed in SEEDS {
        run(seed);
    }
}

#[test]
fn persisted_num_never_runs_ahead_of_delivery() {
    use spindle_group::{Engine, EngineConfig, Error};
    use spindle_transport_rdma::Region;
    let view = View::new(1, vec![1]);
    let layout = (layout())(&view).unwrap();
    let mut e = Engine::new(1, view, layout, EngineConfig::default(), |id, len| {
        Ok(Region::new_heap(id, len)?)
    })
    .unwrap();
    e.sender(SG).unwrap().try_send(b"one").unwrap();
    for _ in 0..4 {
        e.step();
    }
    assert_eq!(e.delivered_num(SG).unwrap(), 1);
    assert!(matches!(e.handle_persisted(SG, 2), Err(Error::Config(_))));
    assert_eq!(e.global_persisted_num(SG).unwrap(), 0);
    e.handle_persisted(SG, 1).unwrap();
    e.handle_persisted(SG, 0).unwrap(); // lower: ignored
    assert_eq!(e.persisted_num(SG).unwrap(), 1);
    e.step();
    assert_eq!(e.global_persisted_num(SG).unwrap(), 1);
    assert_eq!(e.stats().persisted_frontier_moves, 1);
}
