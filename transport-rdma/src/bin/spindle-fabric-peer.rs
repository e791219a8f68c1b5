//! The remote half of the cross-process conformance suite
//! (`spindle_transport_rdma::conformance::run_cross_process`).
//!
//! ```text
//! spindle-fabric-peer --backend <tcp|shm|libfabric-tcp|...> --node <id> --target <id> --address <addr>
//!                     [--secret <domain secret>] [--encrypt <true|false>]
//! ```
//! Opens an endpoint, connects to the target and issues the suite's workloads when told to.
//! Exits 0 when the target says done, 1 with a message on any error.

use spindle_transport_rdma::{conformance, open_backend, DomainSecret, NodeId};

fn main() {
    if let Err(e) = run() {
        eprintln!("spindle-fabric-peer: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut backend = None;
    let mut node = None;
    let mut target = None;
    let mut address = None;
    let mut cfg = conformance::contract_config();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--backend" => backend = Some(value),
            "--node" => node = Some(parse_node(&flag, &value)?),
            "--target" => target = Some(parse_node(&flag, &value)?),
            "--address" => address = Some(value),
            "--secret" => {
                cfg.domain_secret =
                    Some(DomainSecret::new(value.as_bytes()).map_err(|e| e.to_string())?)
            }
            "--encrypt" => {
                cfg.encrypt_links = value
                    .parse()
                    .map_err(|_| format!("--encrypt takes true or false, got {value:?}"))?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let backend = backend.ok_or("--backend is required")?;
    let node = node.ok_or("--node is required")?;
    let target = target.ok_or("--target is required")?;
    let address = address.ok_or("--address is required")?;
    let ep = open_backend(&backend, node, cfg).map_err(|e| e.to_string())?;
    let result = conformance::run_peer_role(&*ep, target, &address).map_err(|e| e.to_string());
    ep.close();
    result
}

fn parse_node(flag: &str, value: &str) -> Result<NodeId, String> {
    value
        .parse()
        .map_err(|_| format!("{flag} takes a node id (u32), got {value:?}"))
}
