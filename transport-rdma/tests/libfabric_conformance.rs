//! The libfabric backend through the shared conformance suite, on the `tcp;ofi_rxm` and
//! `shm` providers: every check with endpoints as threads of this process, then the
//! cross-process workloads with the issue half in a child process (this test binary re-run
//! as the ignored `conformance_peer_process`).
#![cfg(feature = "libfabric")]

use std::process::{Command, Stdio};
use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::libfabric::LibfabricEndpoint;
use spindle_transport_rdma::{Endpoint, FabricConfig, NodeId};

const PEER_ENV: &str = "SPINDLE_LIBFABRIC_CONFORMANCE_PEER";

/// Real libfabric endpoints on one provider.
struct Libfabric {
    provider: &'static str,
}

impl Harness for Libfabric {
    fn name(&self) -> String {
        format!("libfabric {}", self.provider)
    }

    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        Arc::new(
            LibfabricEndpoint::open(node, self.provider, cfg)
                .unwrap_or_else(|err| panic!("libfabric {} endpoint: {err}", self.provider)),
        )
    }
}

#[test]
fn tcp_provider_passes_the_conformance_suite_in_one_process() {
    conformance::run_all(&mut Libfabric {
        provider: "tcp;ofi_rxm",
    });
}

#[test]
fn shm_provider_passes_the_conformance_suite_in_one_process() {
    conformance::run_all(&mut Libfabric { provider: "shm" });
}

/// The child side of the cross-process run: `provider#target@address` comes in the
/// environment.
#[test]
#[ignore = "run as the peer process by the cross-process conformance tests"]
fn conformance_peer_process() {
    let spec = std::env::var(PEER_ENV).expect("run by the cross-process conformance tests");
    let (provider, rest) = spec.split_once('#').expect("provider#target@address");
    let (target, address) = rest.split_once('@').expect("target@address");
    let target: NodeId = target.parse().expect("target node id");
    // A node id the parent's suite never hands out.
    let ep = LibfabricEndpoint::open(
        7_000_000 + std::process::id() % 1_000_000,
        provider,
        FabricConfig::default(),
    )
    .expect("libfabric endpoint");
    conformance::run_peer_role(&ep, target, address).expect("peer role");
    ep.close();
}

fn across_processes(provider: &'static str) {
    conformance::run_cross_process(&mut Libfabric { provider }, |address, node| {
        Command::new(std::env::current_exe().expect("test binary path"))
            .args([
                "--ignored",
                "--exact",
                "conformance_peer_process",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(PEER_ENV, format!("{provider}#{node}@{address}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the peer process")
    });
}

#[test]
fn tcp_provider_passes_the_conformance_suite_across_processes() {
    across_processes("tcp;ofi_rxm");
}

#[test]
fn shm_provider_passes_the_conformance_suite_across_processes() {
    across_processes("shm");
}
