//! The shared conformance suite on the deterministic simulator, over many seeds: random
//! per-link delays and cross-link reordering must never break the contract. A failure
//! names its seed; `SPINDLE_SIM_SEED=<seed>` reruns just that one.

use std::sync::Arc;

use spindle_transport_rdma::conformance::{self, Harness};
use spindle_transport_rdma::sim::{SimConfig, SimWorld};
use spindle_transport_rdma::{Endpoint, FabricConfig, NodeId};

/// Seeds run by `cargo test` (each runs the whole suite).
const SEEDS: u64 = 12;
/// Deliveries applied per progress call.
const STEPS_PER_PROGRESS: usize = 256;

struct Sim {
    world: SimWorld,
}

impl Harness for Sim {
    fn name(&self) -> String {
        format!(
            "sim seed {} (rerun: SPINDLE_SIM_SEED={})",
            self.world.seed(),
            self.world.seed()
        )
    }
    fn open(&mut self, node: NodeId, _cfg: FabricConfig) -> Arc<dyn Endpoint> {
        self.world.endpoint(node)
    }
    fn progress(&mut self) {
        if self.world.run_until_idle(STEPS_PER_PROGRESS) == 0 {
            // Nothing due: let virtual time pass (probes, failure detection).
            self.world.run_for(1_000);
        }
    }
    fn concurrent(&self) -> bool {
        false
    }
    fn crash(&mut self, node: NodeId) -> bool {
        self.world.crash(node);
        true
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SPINDLE_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("SPINDLE_SIM_SEED is a u64")],
        Err(_) => (0..SEEDS).map(|i| 0x5eed_0000 + i).collect(),
    }
}

#[test]
fn sim_conforms_over_many_seeds() {
    for seed in seeds() {
        let mut harness = Sim {
            world: SimWorld::new(seed, SimConfig::default()),
        };
        conformance::run_all(&mut harness);
    }
}

/// The same suite with the bandwidth model on (each NIC at 1 GB/s per direction, so a
/// 16 MiB write takes 16.8 ms of virtual time): timing changes, the contract does not.
#[test]
fn sim_conforms_with_the_bandwidth_model() {
    for seed in seeds().into_iter().take(4) {
        let mut harness = Sim {
            world: SimWorld::new(
                seed,
                SimConfig {
                    link_rate_bytes_per_s: Some(1_000_000_000),
                    ..SimConfig::default()
                },
            ),
        };
        conformance::run_all(&mut harness);
    }
}
