//! This node's own ring is memory that a peer which maps it (shm) could rewrite: an own
//! RDMC announcement renumbered between its commit and the predicate thread's look at
//! it stops this node with the reason (no assertion's panic), and the other members go
//! on without it in a view of their own. Groups on the sim fabric, driven by the
//! runtime's `drive`; the test rewrites node 1's region as such a peer would. A failure
//! names its seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use spindle_transport_rdma::NodeId;

use spindle_group::layout::{sst_region_id, Geometry, SLOT_HEADER_BYTES};
use spindle_group::rdmc::{RdmcConfig, ScheduleKind};
use spindle_group::testkit::{
    bootstrapped_groups, group_round, membership_world, SimGroupNode as Node,
};
use spindle_group::{GroupConfig, Layout, SubgroupSpec, View};

/// The view the runs start in.
const VID: u32 = 3;
/// Rounds of 10 µs of virtual time a run takes at most to get where it checks.
const ROUNDS_MAX: usize = 50_000;

fn spec(v: &View) -> SubgroupSpec {
    let mut l = Layout::one_subgroup(v, 0, 4, 64);
    let mut s = l.subgroups.remove(0);
    s.rdmc = Some(RdmcConfig {
        block_bytes: 256,
        message_bytes_max: 4096,
        schedule: ScheduleKind::BinomialPipeline,
        window_messages: 2,
    });
    s
}

fn config() -> GroupConfig {
    GroupConfig::new(Arc::new(|v: &View| {
        Ok(Layout {
            subgroups: vec![spec(v)],
        })
    }))
}

#[test]
fn an_own_announcement_rewritten_stops_this_node_and_the_others_go_on() {
    for seed in 1..=3u64 {
        let world = membership_world(seed);
        let view = View::new(VID, vec![1, 2, 3]);
        let mut nodes: BTreeMap<NodeId, Node> = bootstrapped_groups(&world, &view, &config())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
            .into_iter()
            .map(|(n, ep, g)| (n, Node::new(ep, g)))
            .collect();
        for _ in 0..200 {
            group_round(&world, &mut nodes, 10);
        }
        // Node 1 commits a large message; before its predicate thread looks, the
        // announcement in its own slot 0 is renumbered (RDMC message 1 → 7).
        let sender = nodes[&1]
            .g
            .sender(0)
            .unwrap_or_else(|e| panic!("seed {seed}: sender: {e}"));
        sender
            .try_send(&[0xA5; 1_000])
            .unwrap_or_else(|e| panic!("seed {seed}: send: {e}"));
        let geom = Geometry::new(&spec(&view)).unwrap();
        let region = world
            .region(1, sst_region_id(VID, 0))
            .unwrap_or_else(|| panic!("seed {seed}: node 1 has no SST region"));
        region.store_u64(geom.slot(0, 0) + SLOT_HEADER_BYTES, 7);
        for _ in 0..ROUNDS_MAX {
            let others_moved = [2, 3]
                .iter()
                .all(|n| nodes[n].installed.iter().any(|v| !v.members.contains(&1)));
            if nodes[&1].shut_down.is_some() && others_moved {
                break;
            }
            group_round(&world, &mut nodes, 10);
        }
        let why = nodes[&1].shut_down.clone();
        assert!(
            why.as_deref().is_some_and(|w| w.contains("own slot 0")
                && w.contains("overwritten")
                && w.contains("RDMC message 7")),
            "seed {seed}: node 1 should stop naming its overwritten slot, got {why:?}"
        );
        for n in [2, 3] {
            let views: Vec<_> = nodes[&n]
                .installed
                .iter()
                .map(|v| v.members.clone())
                .collect();
            assert!(
                views.iter().any(|m| m == &vec![2, 3]),
                "seed {seed}: node {n} should go on in a view of 2 and 3, installed {views:?}"
            );
            assert_eq!(nodes[&n].shut_down, None, "seed {seed}: node {n} stopped");
        }
    }
}
