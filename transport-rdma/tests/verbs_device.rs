//! The verbs backend: on a machine without an RDMA device the tests skip with the reason
//! printed; the backend still builds and reports the missing device as an error.
#![cfg(feature = "verbs")]

use spindle_transport_rdma::verbs::{rdma_devices, VerbsEndpoint};
use spindle_transport_rdma::{Error, FabricConfig};

#[test]
fn open_reports_why_it_cannot_serve() {
    let devices = rdma_devices().expect("listing devices never fails on a sane machine");
    match VerbsEndpoint::open(1, FabricConfig::default()) {
        Err(Error::Config(reason)) if devices.is_empty() => {
            assert!(reason.contains("no RDMA device"), "{reason}");
            eprintln!("skipping verbs data-path tests: {reason}");
        }
        Err(Error::Config(reason)) => {
            assert!(reason.contains(&devices[0]), "{reason}");
            eprintln!("skipping verbs data-path tests: {reason}");
        }
        Err(other) => panic!("unexpected error opening verbs: {other}"),
        Ok(ep) => panic!("verbs endpoint {ep:?} opened, but its data path is not implemented"),
    }
}

#[test]
fn invalid_config_is_rejected_first() {
    let cfg = FabricConfig {
        probe_interval_ms: 0,
        ..FabricConfig::default()
    };
    assert!(matches!(VerbsEndpoint::open(1, cfg), Err(Error::Config(_))));
}
