//! The logged store's second stage in the real runtime: three `GroupNode`s over the tcp
//! fabric, each logging the subgroup (`GroupNode::start_logged`). Every member's log ends
//! up holding exactly its deliveries, in order, and the `Application::persisted` upcall
//! reports the global frontier reaching the last message.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_group::persist::{PersistedFrontier, Persistence};
use spindle_group::runtime::{Application, GroupNode};
use spindle_group::{DeliveryBatch, Group, GroupConfig, Layout, View, ViewInstalled};
use spindle_log::{Log, LogConfig, Version};
use spindle_transport_rdma::{open_backend, FabricConfig, NodeId};

const SG: u32 = 2;
/// Messages each of the three members sends.
const PER_SENDER: u64 = 200;
/// Liveness bound (not a timing assertion): how long the test waits for the frontier.
const WAIT_MAX: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Seen {
    vid: u32,
    delivered: Vec<(Version, Vec<u8>)>,
    frontiers: Vec<PersistedFrontier>,
}

struct App(Arc<Mutex<Seen>>);

impl Application for App {
    fn deliver(&mut self, batch: &DeliveryBatch) {
        let mut s = self.0.lock().unwrap();
        let vid = u64::from(s.vid);
        for m in batch.iter() {
            s.delivered
                .push((Version::new(vid, m.global_index), m.payload.to_vec()));
        }
    }
    fn view_installed(&mut self, v: &ViewInstalled) {
        self.0.lock().unwrap().vid = v.view.vid;
    }
    fn persisted(&mut self, f: &PersistedFrontier) {
        self.0.lock().unwrap().frontiers.push(*f);
    }
}

fn layout(view: &View) -> Result<Layout, String> {
    Ok(Layout::one_subgroup(view, SG, 16, 128))
}

#[test]
fn three_logging_members_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<NodeId> = vec![1, 2, 3];
    let eps: Vec<_> = ids
        .iter()
        .map(|id| open_backend("tcp", *id, FabricConfig::default()).unwrap())
        .collect();
    let addresses: BTreeMap<NodeId, String> = ids
        .iter()
        .zip(&eps)
        .map(|(id, ep)| (*id, ep.address()))
        .collect();
    let view = View::new(1, ids.clone());
    let mut nodes = Vec::new();
    let mut seen = Vec::new();
    for (id, ep) in ids.iter().zip(&eps) {
        let cfg = GroupConfig::new(Arc::new(layout));
        let group = Group::bootstrap(&**ep, view.clone(), addresses.clone(), cfg, 0).unwrap();
        let persister = Persistence::new(dir.path().join(format!("node-{id}")))
            .subgroup(SG, LogConfig::default())
            .open()
            .unwrap();
        let s = Arc::new(Mutex::new(Seen::default()));
        seen.push(Arc::clone(&s));
        nodes.push(
            GroupNode::start_logged(Arc::clone(ep), group, App(s), 1_000, Some(persister)).unwrap(),
        );
    }
    std::thread::scope(|scope| {
        for (i, node) in nodes.iter().enumerate() {
            scope.spawn(move || {
                for k in 0..PER_SENDER {
                    let msg = format!("node {} message {k}", i + 1);
                    node.send(SG, msg.as_bytes(), WAIT_MAX).unwrap();
                }
            });
        }
    });
    let total = 3 * PER_SENDER as usize;
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let done = seen.iter().all(|s| {
            let s = s.lock().unwrap();
            let last = s.delivered.last().map(|d| d.0.order_index + 1);
            s.delivered.len() == total && s.frontiers.last().map(|f| f.global_persisted_num) == last
        });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the global frontier did not reach the last message within {WAIT_MAX:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for node in nodes {
        node.stop();
    }
    let first = seen[0].lock().unwrap().delivered.clone();
    for (id, s) in ids.iter().zip(&seen) {
        let s = s.lock().unwrap();
        assert_eq!(s.delivered, first, "node {id}: one total order");
        let mut log = Log::open(
            dir.path().join(format!("node-{id}/subgroup-{SG}")),
            LogConfig::default(),
        )
        .unwrap();
        let logged: Vec<(Version, Vec<u8>)> = log
            .range(..)
            .unwrap()
            .map(|e| e.map(|e| (e.meta.version, e.payload)))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            logged, s.delivered,
            "node {id}: the log is the delivery order"
        );
        assert!(s
            .frontiers
            .windows(2)
            .all(|w| w[0].global_persisted_num < w[1].global_persisted_num));
    }
}
