//! Bootstrap members of different groups (another domain, or a build with another wire
//! format: `GroupConfig::group_id`). A joiner's group is checked when it asks to join;
//! members that start together are checked by their membership rows, which name their
//! groups. The members of one group that hold a majority go on without the others; a
//! member left without a majority stops, naming both groups, and its stop is a lost
//! majority (not an exclusion), so a DCPS participant falls back to joining and is
//! refused by name. Groups on the sim fabric, driven by the runtime's `drive`; a failure
//! names its seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use spindle_transport_rdma::{Endpoint, NodeId};

use spindle_group::testkit::{group_round, membership_world, SimGroupNode as Node};
use spindle_group::{Group, GroupConfig, Layout, View};

/// Rounds of 10 µs of virtual time a run takes at most.
const ROUNDS_MAX: usize = 50_000;

fn label(group_id: u64) -> String {
    format!("domain {group_id}")
}

/// The members of view 1 bootstrapped together, each configured for the group `groups`
/// gives it.
fn bootstrap(
    seed: u64,
    groups: &[(NodeId, u64)],
) -> (
    spindle_transport_rdma::sim::SimWorld,
    BTreeMap<NodeId, Node>,
) {
    let world = membership_world(seed);
    let view = View::new(1, groups.iter().map(|(n, _)| *n).collect());
    let eps: BTreeMap<NodeId, _> = groups
        .iter()
        .map(|(n, _)| (*n, world.endpoint(*n)))
        .collect();
    let addresses: BTreeMap<NodeId, String> =
        eps.iter().map(|(n, ep)| (*n, ep.address())).collect();
    let nodes = groups
        .iter()
        .map(|&(n, group_id)| {
            let mut cfg =
                GroupConfig::new(Arc::new(|v: &View| Ok(Layout::one_subgroup(v, 0, 4, 64))));
            cfg.group_id = group_id;
            cfg.group_label = label;
            let ep = Arc::clone(&eps[&n]);
            let g = Group::bootstrap(&*ep, view.clone(), addresses.clone(), cfg, 0)
                .unwrap_or_else(|e| panic!("seed {seed}: bootstrapping node {n}: {e}"));
            (n, Node::new(ep, g))
        })
        .collect();
    (world, nodes)
}

/// Runs `run(seed)` for seeds 1 to 3; a panic anywhere in a run fails naming its seed.
fn for_seeds(run: fn(u64)) {
    for seed in 1..=3 {
        let r = std::panic::catch_unwind(|| run(seed));
        assert!(r.is_ok(), "seed {seed}: failed (above)");
    }
}

/// Whether `n` stopped as having lost its majority, naming both groups.
fn stopped_naming_both(n: &Node, member: NodeId, theirs: u64, mine: u64) -> bool {
    n.g.lost_majority().is_some()
        && n.shut_down.as_deref().is_some_and(|why| {
            why.contains(&format!(
                "member {member} is configured for domain {theirs}"
            )) && why.contains(&format!("this node for domain {mine}"))
        })
}

#[test]
fn a_bootstrap_member_of_another_group_is_left_out_and_stops_naming_both() {
    for_seeds(|seed| {
        let (world, mut nodes) = bootstrap(seed, &[(1, 0), (2, 0), (3, 7)]);
        let done = |nodes: &BTreeMap<NodeId, Node>| {
            nodes[&3].shut_down.is_some()
                && [1, 2].iter().all(|n| {
                    nodes[n]
                        .installed
                        .last()
                        .is_some_and(|v| v.members == [1, 2])
                })
        };
        for _ in 0..ROUNDS_MAX {
            if done(&nodes) {
                break;
            }
            group_round(&world, &mut nodes, 10);
        }
        assert!(done(&nodes), "seed {seed}: {nodes:?}");
        assert!(
            stopped_naming_both(&nodes[&3], 1, 0, 7),
            "seed {seed}: {:?}",
            nodes[&3].shut_down
        );
        for n in [1, 2] {
            assert!(nodes[&n].shut_down.is_none(), "seed {seed}: node {n}");
        }
    });
}

#[test]
fn two_bootstrap_members_of_two_groups_both_stop_naming_both() {
    for_seeds(|seed| {
        let (world, mut nodes) = bootstrap(seed, &[(1, 0), (2, 5)]);
        for _ in 0..ROUNDS_MAX {
            if nodes.values().all(|n| n.shut_down.is_some()) {
                break;
            }
            group_round(&world, &mut nodes, 10);
        }
        assert!(
            stopped_naming_both(&nodes[&1], 2, 5, 0),
            "seed {seed}: {:?}",
            nodes[&1].shut_down
        );
        assert!(
            stopped_naming_both(&nodes[&2], 1, 0, 5),
            "seed {seed}: {:?}",
            nodes[&2].shut_down
        );
        // Neither installs a view after the first.
        for n in nodes.values() {
            assert!(
                n.installed.iter().all(|v| v.vid == 1),
                "seed {seed}: {:?}",
                n.installed
            );
        }
    });
}
