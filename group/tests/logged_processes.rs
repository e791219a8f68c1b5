//! Total failure of real processes: three processes, each a `GroupNode` logging one
//! subgroup over tcp or shm (alternate rounds), send without pause; once every one of them has reported a global
//! persistence frontier past a round-dependent mark, all three are SIGKILLed at once. The
//! restart leader's work (reports, `restart_plan`, `Persister::restore`) runs offline on
//! their data directories, and the three restart in the next view and go on. Several
//! rounds on the same directories. Checked after each kill: every version below the
//! highest frontier any process reported is in every log, identical; the restored logs
//! are equal; and after the restart the new view's frontier moves again.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use spindle_group::persist::{restart_plan, PersistedFrontier, Persistence, RestartPlan};
use spindle_group::runtime::{Application, GroupNode};
use spindle_group::{DeliveryBatch, Group, GroupConfig, Layout, View};
use spindle_log::{Log, LogConfig, Version};
use spindle_transport_rdma::{open_backend, FabricConfig, NodeId};

const SG: u32 = 9;
/// Kill-and-restart rounds on one set of data directories.
const ROUNDS: u64 = 20;
/// Liveness bound per wait (not a timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(120);
/// The children's failure detector's floor, in ms (see the child's set-up).
const CHILD_SUSPECT_FLOOR_MS: u64 = 5_000;
const ENV_DIR: &str = "SPINDLE_LOGGED_CHILD_DIR";
const ENV_ID: &str = "SPINDLE_LOGGED_CHILD_ID";
const ENV_VID: &str = "SPINDLE_LOGGED_CHILD_VID";
const ENV_BACKEND: &str = "SPINDLE_LOGGED_CHILD_BACKEND";
/// The fabrics the rounds alternate between.
const BACKENDS: [&str; 2] = ["tcp", "shm"];

fn layout(view: &View) -> Result<Layout, String> {
    Ok(Layout::one_subgroup(view, SG, 16, 64))
}

fn persistence(dir: &std::path::Path, id: NodeId) -> Persistence {
    Persistence::new(dir.join(format!("node-{id}"))).subgroup(SG, LogConfig::default())
}

struct ChildApp;

impl Application for ChildApp {
    fn deliver(&mut self, _batch: &DeliveryBatch) {}
    fn persisted(&mut self, f: &PersistedFrontier) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "PERSISTED {} {}", f.vid, f.global_persisted_num);
        let _ = o.flush();
    }
}

/// A child process: one logging member that sends until it is killed.
#[test]
#[ignore = "spawned by total_failure_of_three_processes"]
fn logged_child() {
    let (Ok(dir), Ok(id), Ok(vid), Ok(backend)) = (
        std::env::var(ENV_DIR),
        std::env::var(ENV_ID),
        std::env::var(ENV_VID),
        std::env::var(ENV_BACKEND),
    ) else {
        return;
    };
    let id: NodeId = id.parse().unwrap();
    let vid: u32 = vid.parse().unwrap();
    // Nobody is excluded here on purpose (all three die by SIGKILL at once): suspect a
    // silent peer only after CHILD_SUSPECT_FLOOR_MS, above a loaded machine's stalls (the
    // default 50 ms floor excluded starved children at load 7-9).
    let fabric = FabricConfig {
        suspect_floor_ms: CHILD_SUSPECT_FLOOR_MS,
        suspect_ceiling_ms: FabricConfig::default()
            .suspect_ceiling_ms
            .max(CHILD_SUSPECT_FLOOR_MS),
        ..FabricConfig::default()
    };
    let ep = open_backend(&backend, id, fabric).unwrap();
    println!("ADDR {}", ep.address());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let peers: BTreeMap<NodeId, String> = line
        .trim()
        .strip_prefix("PEERS ")
        .unwrap()
        .split(',')
        .map(|p| {
            let (n, a) = p.split_once('=').unwrap();
            (n.parse().unwrap(), a.to_string())
        })
        .collect();
    let view = View::new(vid, peers.keys().copied().collect());
    let group = Group::bootstrap(&*ep, view, peers, GroupConfig::new(Arc::new(layout)), 0).unwrap();
    let persister = persistence(std::path::Path::new(&dir), id).open().unwrap();
    let node =
        GroupNode::start_logged(Arc::clone(&ep), group, ChildApp, 1_000, Some(persister)).unwrap();
    for k in 0u64.. {
        let msg = format!("v{vid} n{id} k{k}");
        if node.send(SG, msg.as_bytes(), WAIT_MAX).is_err() {
            break;
        }
    }
}

fn spawn(dir: &std::path::Path, id: NodeId, vid: u32, backend: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "logged_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_DIR, dir)
        .env(ENV_ID, id.to_string())
        .env(ENV_VID, vid.to_string())
        .env(ENV_BACKEND, backend)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The text after `tag` in a child's stdout line (the test harness may print before it
/// on the same line).
fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|i| &line[i + tag.len()..])
}

fn read_all(log: &mut Log) -> Vec<(Version, Vec<u8>)> {
    log.range(..)
        .unwrap()
        .map(|e| e.map(|e| (e.meta.version, e.payload)))
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn total_failure_of_three_processes() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let mut vid = 1u32;
    for round in 0..ROUNDS {
        let backend = BACKENDS[round as usize % BACKENDS.len()];
        let mut children: Vec<Child> = ids
            .iter()
            .map(|id| spawn(dir.path(), *id, vid, backend))
            .collect();
        let (tx, rx) = mpsc::channel::<(usize, String)>();
        for (i, c) in children.iter_mut().enumerate() {
            let out = c.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((i, line)).is_err() {
                        break;
                    }
                }
            });
        }
        let mut addrs = BTreeMap::new();
        while addrs.len() < ids.len() {
            let (i, line) = rx.recv_timeout(WAIT_MAX).expect("a child's address");
            if let Some(a) = after(&line, "ADDR ") {
                addrs.insert(ids[i], a.to_string());
            }
        }
        let peers: Vec<String> = addrs.iter().map(|(n, a)| format!("{n}={a}")).collect();
        for c in &mut children {
            let stdin = c.stdin.as_mut().unwrap();
            writeln!(stdin, "PEERS {}", peers.join(",")).unwrap();
            stdin.flush().unwrap();
        }
        // Wait until every process reported a frontier past the mark, then kill all.
        let mark = 100 + (round % 5) * 150;
        let mut reported = [0u64; 3];
        while reported.iter().any(|g| *g < mark) {
            let (i, line) = rx
                .recv_timeout(WAIT_MAX)
                .unwrap_or_else(|e| panic!("round {round}: frontiers {reported:?}: {e}"));
            if let Some(rest) = after(&line, "PERSISTED ") {
                let (v, g) = rest.split_once(' ').unwrap();
                if v.parse::<u32>().unwrap() == vid {
                    reported[i] = reported[i].max(g.parse().unwrap());
                }
            }
        }
        for c in &mut children {
            c.kill().unwrap(); // SIGKILL
        }
        for c in &mut children {
            let _ = c.wait();
        }
        // Anything still in the pipes was reported before the kill.
        while let Ok((i, line)) = rx.try_recv() {
            if let Some(rest) = after(&line, "PERSISTED ") {
                let (v, g) = rest.split_once(' ').unwrap();
                if v.parse::<u32>().unwrap() == vid {
                    reported[i] = reported[i].max(g.parse().unwrap());
                }
            }
        }
        let global = *reported.iter().max().unwrap();
        // Offline restart: reports from the data directories, the plan, the repair.
        let mut persisters: Vec<_> = ids
            .iter()
            .map(|id| persistence(dir.path(), *id).open().unwrap())
            .collect();
        let before: Vec<_> = persisters
            .iter_mut()
            .map(|p| read_all(p.log_mut(SG).unwrap()))
            .collect();
        let persisted_everywhere: Vec<_> = before[0]
            .iter()
            .filter(|(v, _)| v.view_id == u64::from(vid) && v.order_index < global)
            .cloned()
            .collect();
        for (id, log) in ids.iter().zip(&before) {
            let mine: Vec<_> = log
                .iter()
                .filter(|(v, _)| v.view_id == u64::from(vid) && v.order_index < global)
                .cloned()
                .collect();
            assert_eq!(mine, persisted_everywhere, "round {round}: node {id}");
        }
        let reports: Vec<_> = persisters
            .iter_mut()
            .zip(&ids)
            .map(|(p, id)| p.restart_report(*id).unwrap())
            .collect();
        let RestartPlan::Restore { vid: next, sources } = restart_plan(&reports) else {
            panic!("round {round}: three of three must restart");
        };
        let (source, last) = sources[&SG];
        let src = ids.iter().position(|i| *i == source).unwrap();
        let entries: Vec<_> = persisters[src]
            .log_mut(SG)
            .unwrap()
            .range(..)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for p in &mut persisters {
            p.restore(SG, last, entries.clone()).unwrap();
        }
        let restored: Vec<_> = persisters
            .iter_mut()
            .map(|p| read_all(p.log_mut(SG).unwrap()))
            .collect();
        for r in &restored {
            assert_eq!(r, &restored[0], "round {round}: one restored log");
        }
        let n_view: usize = restored[0]
            .iter()
            .filter(|(v, _)| v.view_id == u64::from(vid))
            .count();
        let old: Vec<_> = restored[0]
            .iter()
            .filter(|(v, _)| v.view_id == u64::from(vid) && v.order_index < global)
            .cloned()
            .collect();
        assert_eq!(
            old, persisted_everywhere,
            "round {round}: the durable prefix survives"
        );
        eprintln!(
            "round {round} ({backend}): view {vid}: frontier reported {global}; {} entries persisted \
             everywhere before the kill; logs held {:?} entries; restored {} ({n_view} of \
             view {vid}) into view {next}",
            persisted_everywhere.len(),
            before.iter().map(Vec::len).collect::<Vec<_>>(),
            restored[0].len()
        );
        drop(persisters);
        vid = next;
    }
}
