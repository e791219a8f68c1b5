//! The tcp backend through the shared conformance suite: every check with endpoints as
//! threads of this process, then the cross-process workloads with the issue half in a
//! child process (this test binary re-run as `conformance_peer_process`).

use std::process::{Command, Stdio};
use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::tcp::TcpEndpoint;
use spindle_transport_rdma::{Endpoint, FabricConfig, NodeId};

const PEER_ENV: &str = "SPINDLE_TCP_CONFORMANCE_PEER";

/// Real tcp endpoints on loopback.
struct Tcp;

impl Harness for Tcp {
    fn name(&self) -> String {
        "tcp".into()
    }

    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        TcpEndpoint::open(node, "127.0.0.1:0", cfg).expect("tcp endpoint on loopback")
    }
}

#[test]
fn tcp_passes_the_conformance_suite_in_one_process() {
    conformance::run_all(&mut Tcp);
}

/// The child side of the cross-process run: `target:address` comes in the environment.
#[test]
fn conformance_peer_process() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return; // run as a normal test: nothing to do
    };
    let (target, address) = spec.split_once('@').expect("target@address");
    let target: NodeId = target.parse().expect("target node id");
    // A node id the parent's suite never hands out.
    let ep = TcpEndpoint::open(
        7_000_000 + std::process::id() % 1_000_000,
        "127.0.0.1:0",
        FabricConfig::default(),
    )
    .expect("tcp endpoint");
    conformance::run_peer_role(&*ep, target, address).expect("peer role");
    ep.close();
}

#[test]
fn tcp_passes_the_conformance_suite_across_processes() {
    conformance::run_cross_process(&mut Tcp, |address, node| {
        Command::new(std::env::current_exe().expect("test binary path"))
            .args([
                "--exact",
                "conformance_peer_process",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(PEER_ENV, format!("{node}@{address}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the peer process")
    });
}
