//! Restart after total failure (Derecho App. B.4–B.6) over the sim fabric, with logs on
//! disk: three members of a logged subgroup run; at a seeded round every one of them
//! dies at once; every write not yet synced is lost (each log is cut back to what it had
//! made durable, and some get a torn tail of garbage); the members restart from their
//! data directories, the restart plan picks the durable state from a majority, the logs
//! are brought to it, and the domain resumes in a higher view. Checked: every version
//! that was globally persisted before the crash is there, unchanged; nothing that was not
//! delivered is; every member's log is the same sequence, before and after the restart;
//! a restart with one member of three waits.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_group::persist::{restart_plan, Persistence, Persister, RestartPlan};
use spindle_group::runtime::drive;
use spindle_group::testkit::{bootstrapped_groups, SimCluster, SimNode};
use spindle_group::{Group, GroupConfig, GroupOutput, Layout, LayoutFn, View};
use spindle_log::{Log, LogConfig, Version};
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{FabricConfig, NodeId};

const SG: u32 = 6;
const SEEDS: std::ops::Range<u64> = 1..9;
const ROUNDS_MAX: usize = 200_000;
/// Messages sent after the restart.
const AFTER: u64 = 60;

fn layout() -> LayoutFn {
    Arc::new(|view: &View| Ok(Layout::one_subgroup(view, SG, 8, 64)))
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 2048,
        write_buffer_bytes_max: 256,
    }
}

struct Node {
    ep: Arc<SimEndpoint>,
    group: Group,
    persister: Persister,
    sync_every: u64,
    steps: u64,
    vid: u32,
    delivered: Vec<(Version, Vec<u8>)>,
    /// The highest global frontier seen: (vid, global persisted_num).
    global: (u32, u64),
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
                    self.persister.view_installed(&v.view).expect("log view");
                }
                _ => {}
            }
        }
        if self.steps % self.sync_every == 0 {
            work |= self.persister.sync(&mut self.group).expect("sync");
        }
        for f in self.persister.frontiers(&self.group) {
            self.global = self.global.max((f.vid, f.global_persisted_num));
        }
        work
    }
}

fn persistence(dir: &std::path::Path, id: NodeId) -> Persistence {
    Persistence::new(dir.join(format!("node-{id}"))).subgroup(SG, small_segments())
}

fn cluster(seed: u64, dir: &std::path::Path, view: &View) -> SimCluster<Node> {
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
    let cfg = GroupConfig::new(layout());
    let mut sim: SimCluster<Node> = SimCluster::new(world, seed, 1..20);
    let groups =
        bootstrapped_groups(&sim.world, view, &cfg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (id, ep, group) in groups {
        let persister = persistence(dir, id).open().unwrap();
        let sync_every = sim.rng.gen_range(1..8);
        sim.nodes.insert(
            id,
            Node {
                ep,
                group,
                persister,
                sync_every,
                steps: 0,
                vid: 0,
                delivered: Vec::new(),
                global: (0, 0),
            },
        );
    }
    sim
}

/// Sends up to `count` messages tagged `tag`, one attempt per round, for `rounds` rounds
/// (or until `stop` says so).
fn run_traffic(
    sim: &mut SimCluster<Node>,
    tag: &str,
    count: u64,
    rounds: usize,
    mut stop: impl FnMut(&SimCluster<Node>, u64) -> bool,
) -> bool {
    let mut sent = 0u64;
    let ids: Vec<NodeId> = sim.nodes.keys().copied().collect();
    for _ in 0..rounds {
        if sent < count {
            let from = ids[sim.rng.gen_range(0..ids.len())];
            if let Ok(s) = sim.nodes[&from].group.sender(SG) {
                if s.try_send(format!("{tag}{sent}@{from}").as_bytes()).is_ok() {
                    sent += 1;
                }
            }
        }
        sim.round();
        if stop(sim, sent) {
            return true;
        }
    }
    false
}

fn read_all(log: &mut Log) -> Vec<(Version, Vec<u8>)> {
    log.range(..)
        .unwrap()
        .map(|e| e.map(|e| (e.meta.version, e.payload)))
        .collect::<Result<_, _>>()
        .unwrap()
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let view = View::new(1, vec![1, 2, 3]);
    let mut sim = cluster(seed, dir.path(), &view);
    // Phase 1: traffic, then every process dies at a seeded round.
    let crash_round = rng.gen_range(50..1500);
    run_traffic(&mut sim, "a", u64::MAX, crash_round, |_, _| false);
    let longest = sim
        .nodes
        .values()
        .map(|n| n.delivered.clone())
        .max_by_key(|d| d.len())
        .unwrap();
    for n in sim.nodes.values() {
        assert_eq!(
            n.delivered[..],
            longest[..n.delivered.len()],
            "seed {seed}: one order"
        );
    }
    let global = sim.nodes.values().map(|n| n.global).max().unwrap();
    let globally_persisted: Vec<_> = longest
        .iter()
        .filter(|(v, _)| v.view_id == u64::from(global.0) && v.order_index < global.1)
        .cloned()
        .collect();
    let durable: BTreeMap<NodeId, Option<Version>> = sim
        .nodes
        .iter()
        .map(|(id, n)| (*id, n.persister.log(SG).unwrap().persisted()))
        .collect();
    drop(sim); // SIGKILL for all: nothing more is synced
               // What the disks keep: only synced bytes, sometimes plus a torn write.
    for (id, persisted) in &durable {
        let d = persistence(dir.path(), *id).subgroup_dir(SG);
        let mut log = Log::open(&d, small_segments()).unwrap();
        log.truncate_after(persisted.unwrap_or_default()).unwrap();
        drop(log);
        if rng.gen_bool(0.5) {
            let segs = spindle_log::list_segments(&d).unwrap();
            let last = &segs.last().unwrap().1;
            let mut junk = vec![0u8; rng.gen_range(1..200)];
            rng.fill(&mut junk[..]);
            junk[..4].copy_from_slice(b"SPLE"); // a header that starts right, then garbage
            let mut bytes = std::fs::read(last).unwrap();
            bytes.extend_from_slice(&junk);
            std::fs::write(last, bytes).unwrap();
        }
    }
    // Phase 2: restart from the data directories.
    let mut persisters: BTreeMap<NodeId, Persister> = view
        .members
        .iter()
        .map(|id| (*id, persistence(dir.path(), *id).open().unwrap()))
        .collect();
    let mut reports: Vec<_> = persisters
        .iter_mut()
        .map(|(id, p)| p.restart_report(*id).unwrap())
        .collect();
    // One member of three is not enough: the plan waits.
    let alone = restart_plan(&reports[..1]);
    assert!(
        matches!(
            alone,
            RestartPlan::Wait {
                have: 1,
                need: 2,
                ..
            }
        ),
        "seed {seed}: {alone:?}"
    );
    // A majority (seeded: all three, or two of them) restarts.
    if rng.gen_bool(0.5) {
        let gone = rng.gen_range(0..3);
        reports.remove(gone);
    }
    let restarting: Vec<NodeId> = reports.iter().map(|r| r.node).collect();
    let RestartPlan::Restore { vid, sources } = restart_plan(&reports) else {
        panic!("seed {seed}: a majority must restart");
    };
    assert_eq!(
        vid, 2,
        "seed {seed}: the restart's view follows the last logged one"
    );
    let (source, last) = sources[&SG];
    let source_entries: Vec<_> = persisters
        .get_mut(&source)
        .unwrap()
        .log_mut(SG)
        .unwrap()
        .range(..)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for id in &restarting {
        let p = persisters.get_mut(id).unwrap();
        p.restore(SG, last, source_entries.clone())
            .unwrap_or_else(|e| panic!("seed {seed}: restore {id}: {e}"));
    }
    let restored: Vec<_> = read_all(
        persisters
            .get_mut(&restarting[0])
            .unwrap()
            .log_mut(SG)
            .unwrap(),
    );
    for id in &restarting {
        let mine = read_all(persisters.get_mut(id).unwrap().log_mut(SG).unwrap());
        assert_eq!(
            mine, restored,
            "seed {seed}: node {id} restored the same log"
        );
    }
    assert!(
        restored.len() >= globally_persisted.len()
            && restored[..globally_persisted.len()] == globally_persisted[..],
        "seed {seed}: a globally persisted version was lost or changed \
         ({} globally persisted, {} restored)",
        globally_persisted.len(),
        restored.len()
    );
    assert_eq!(
        restored[..],
        longest[..restored.len()],
        "seed {seed}: the restored state holds only what was delivered, in order"
    );
    eprintln!(
        "seed {seed}: crash at round {crash_round}: {} delivered, {} globally persisted, {} restored from {} of {:?}",
        longest.len(),
        globally_persisted.len(),
        restored.len(),
        restarting.len(),
        durable
    );
    drop(persisters);
    // Phase 3: the domain resumes in view 2 and goes on logging.
    let view2 = View::new(vid, restarting.clone());
    let mut sim = cluster(seed ^ 0xB4, dir.path(), &view2);
    let done = run_traffic(&mut sim, "b", AFTER, ROUNDS_MAX, |sim, sent| {
        sent == AFTER
            && sim.nodes.values().all(|n| {
                n.delivered.len() as u64 == AFTER
                    && n.global == (vid, n.delivered.last().unwrap().0.order_index + 1)
            })
    });
    assert!(
        done,
        "seed {seed}: the restarted domain did not persist its new messages"
    );
    let after: Vec<_> = sim.nodes[&restarting[0]].delivered.clone();
    drop(sim);
    for id in &restarting {
        let d = persistence(dir.path(), *id).subgroup_dir(SG);
        let mut log = Log::open(&d, small_segments()).unwrap();
        let all = read_all(&mut log);
        assert_eq!(
            all[..restored.len()],
            restored[..],
            "seed {seed}: node {id}"
        );
        assert_eq!(all[restored.len()..], after[..], "seed {seed}: node {id}");
    }
}

#[test]
fn total_failure_keeps_every_globally_persisted_version() {
    for seed in SEEDS {
        run(seed);
    }
}
