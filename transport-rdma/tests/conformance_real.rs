//! The shared conformance suite on the real backends: endpoints as threads of this process,
//! then with the writing half in another process that is finally killed with SIGKILL.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::{open_backend, DomainSecret, Endpoint, FabricConfig, NodeId};

struct Real(&'static str);

/// A real backend whose endpoints share a domain secret (`encrypt`: tcp links encrypted
/// after the handshake; shm links never are).
struct Secured {
    backend: &'static str,
    encrypt: bool,
}

const SECRET: &str = "conformance suite domain secret";

impl Harness for Secured {
    fn name(&self) -> String {
        format!(
            "{} with a domain secret, encrypt={}",
            self.backend, self.encrypt
        )
    }
    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        let cfg = FabricConfig {
            domain_secret: Some(DomainSecret::new(SECRET.as_bytes()).unwrap()),
            encrypt_links: self.encrypt,
            ..cfg
        };
        open_backend(self.backend, node, cfg)
            .unwrap_or_else(|e| panic!("{}: open: {e}", self.name()))
    }
}

fn spawn_secured_peer(backend: &'static str, encrypt: bool) -> impl FnMut(&str, NodeId) -> Child {
    move |address, target| {
        Command::new(env!("CARGO_BIN_EXE_spindle-fabric-peer"))
            .args([
                "--backend",
                backend,
                "--node",
                &(target + 10_000).to_string(),
            ])
            .args(["--target", &target.to_string(), "--address", address])
            .args(["--secret", SECRET, "--encrypt", &encrypt.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn spindle-fabric-peer")
    }
}

impl Harness for Real {
    fn name(&self) -> String {
        self.0.to_string()
    }
    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        open_backend(self.0, node, cfg).unwrap_or_else(|e| panic!("{}: open: {e}", self.0))
    }
}

/// A real backend whose link readers block at once instead of polling after data
/// (`FabricConfig::read_spin_us` = 0): the reader's other way of waiting.
struct BlockingReads(&'static str);

impl Harness for BlockingReads {
    fn name(&self) -> String {
        format!("{} with read_spin_us = 0", self.0)
    }
    fn open(&mut self, node: NodeId, cfg: FabricConfig) -> Arc<dyn Endpoint> {
        let cfg = FabricConfig {
            read_spin_us: 0,
            ..cfg
        };
        open_backend(self.0, node, cfg).unwrap_or_else(|e| panic!("{}: open: {e}", self.name()))
    }
}

fn spawn_peer(backend: &'static str) -> impl FnMut(&str, NodeId) -> Child {
    move |address, target| {
        Command::new(env!("CARGO_BIN_EXE_spindle-fabric-peer"))
            .args([
                "--backend",
                backend,
                "--node",
                &(target + 10_000).to_string(),
            ])
            .args(["--target", &target.to_string(), "--address", address])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn spindle-fabric-peer")
    }
}

#[test]
fn tcp_conforms_in_process() {
    conformance::run_all(&mut Real("tcp"));
}

#[test]
fn tcp_conforms_in_process_with_blocking_reads() {
    conformance::run_all(&mut BlockingReads("tcp"));
}

#[test]
fn tcp_conforms_across_processes() {
    conformance::run_cross_process(&mut Real("tcp"), spawn_peer("tcp"));
}

#[test]
fn tcp_conforms_encrypted_in_process() {
    conformance::run_all(&mut Secured {
        backend: "tcp",
        encrypt: true,
    });
}

#[test]
fn tcp_conforms_encrypted_across_processes() {
    conformance::run_cross_process(
        &mut Secured {
            backend: "tcp",
            encrypt: true,
        },
        spawn_secured_peer("tcp", true),
    );
}

#[test]
fn tcp_conforms_authenticated_unencrypted_in_process() {
    conformance::run_all(&mut Secured {
        backend: "tcp",
        encrypt: false,
    });
}

#[test]
fn shm_conforms_authenticated_in_process() {
    conformance::run_all(&mut Secured {
        backend: "shm",
        encrypt: true,
    });
}

#[test]
fn shm_conforms_in_process() {
    conformance::run_all(&mut Real("shm"));
}

#[test]
fn shm_conforms_across_processes() {
    conformance::run_cross_process(&mut Real("shm"), spawn_peer("shm"));
}

#[cfg(feature = "libfabric")]
mod libfabric {
    use super::*;

    #[test]
    fn libfabric_tcp_conforms_in_process() {
        conformance::run_all(&mut Real("libfabric-tcp"));
    }

    #[test]
    fn libfabric_tcp_conforms_across_processes() {
        conformance::run_cross_process(&mut Real("libfabric-tcp"), spawn_peer("libfabric-tcp"));
    }

    #[test]
    fn libfabric_tcp_conforms_with_an_authenticated_side_channel() {
        conformance::run_all(&mut Secured {
            backend: "libfabric-tcp",
            encrypt: true,
        });
    }

    #[test]
    fn libfabric_shm_conforms_in_process() {
        conformance::run_all(&mut Real("libfabric-shm"));
    }

    #[test]
    fn libfabric_shm_conforms_across_processes() {
        conformance::run_cross_process(&mut Real("libfabric-shm"), spawn_peer("libfabric-shm"));
    }
}
