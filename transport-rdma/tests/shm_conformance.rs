//! The shm backend against the shared conformance suite: endpoints as threads of this
//! process, and across processes (the test binary re-runs itself as the peer, selected by
//! `SPINDLE_SHM_CONFORMANCE_PEER`).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::shm::ShmEndpoint;
use spindle_transport_rdma::{Endpoint, FabricConfig, NodeId};

/// Peer processes take node ids far from the suite's own.
const PEER_NODE_OFFSET: NodeId = 1_000_000;

struct Shm {
    namespace: String,
}

impl Harness for Shm {
    fn name(&self) -> String {
        format!("shm ({})", self.namespace)
    }

    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        ShmEndpoint::open(node, &self.namespace, cfg).expect("shm endpoint")
    }
}

#[test]
fn conformance_threads() {
    conformance::run_all(&mut Shm {
        namespace: format!("ct-{}", std::process::id()),
    });
}

/// The peer role; a no-op unless run as a peer by `conformance_processes`.
#[test]
fn peer_entry() {
    let Ok(spec) = std::env::var("SPINDLE_SHM_CONFORMANCE_PEER") else {
        return;
    };
    let mut parts = spec.splitn(3, ' ');
    let (Some(ns), Some(target), Some(address)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad peer spec {spec:?}");
    };
    let target: NodeId = target.parse().expect("target node id");
    let ep = ShmEndpoint::open(target + PEER_NODE_OFFSET, ns, FabricConfig::default())
        .expect("peer endpoint");
    conformance::run_peer_role(&*ep, target, address).expect("peer role");
    ep.close();
}

#[test]
fn conformance_processes() {
    let pid = std::process::id();
    let mut h = Shm {
        namespace: format!("cx-{pid}"),
    };
    conformance::run_cross_process(&mut h, |address, node| -> Child {
        Command::new(std::env::current_exe().expect("own test binary"))
            .args(["peer_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env(
                "SPINDLE_SHM_CONFORMANCE_PEER",
                format!("cxp-{pid} {node} {address}"),
            )
            .stdout(Stdio::null())
            .spawn()
            .expect("spawning the peer process")
    });
}
