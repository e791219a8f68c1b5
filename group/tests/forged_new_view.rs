//! A forged NEW_VIEW: at a member it changes nothing (a member's next view comes from its
//! trim, never from a NEW_VIEW, and nobody is suspected for one), and a joiner refuses
//! one not from its view's first member or with view id 0, then joins normally. Groups
//! on the sim fabric, driven by the runtime's `drive`; a failure names its seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use spindle_transport_rdma::sim::SimWorld;
use spindle_transport_rdma::{Endpoint, Event, NodeId};

use spindle_group::group::{encode_new_view, MEMBERSHIP_IMM};
use spindle_group::testkit::{
    bootstrapped_groups, group_round, membership_world, SimGroupNode as Node,
};
use spindle_group::{Group, GroupConfig, Layout, View};

/// The view the runs start in.
const VID: u32 = 5;
/// Rounds of 10 µs of virtual time a run takes at most to get where it checks.
const ROUNDS_MAX: usize = 50_000;
/// Rounds a run goes on after a forgery reached the members: past the sim fabric's
/// failure detection (2 ms), time for any suspicion to turn into a view change.
const ROUNDS_AFTER: usize = 2_000;

fn config() -> GroupConfig {
    GroupConfig::new(Arc::new(|v: &View| Ok(Layout::one_subgroup(v, 0, 4, 64))))
}

/// Members `members` bootstrapped in view [`VID`], run until their links are up.
fn members(seed: u64, world: &SimWorld, members: &[NodeId]) -> BTreeMap<NodeId, Node> {
    let view = View::new(VID, members.to_vec());
    let mut nodes: BTreeMap<NodeId, Node> = bootstrapped_groups(world, &view, &config())
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
        .into_iter()
        .map(|(n, ep, g)| (n, Node::new(ep, g)))
        .collect();
    for _ in 0..200 {
        round(world, &mut nodes);
    }
    nodes
}

/// One round of 10 µs.
fn round(world: &SimWorld, nodes: &mut BTreeMap<NodeId, Node>) {
    group_round(world, nodes, 10);
}

/// A NEW_VIEW from `from` of view `vid` with `members` (in that order) at the addresses
/// of `world`, as the fabric hands it over.
fn forged(world: &SimWorld, from: NodeId, vid: u32, members: &[NodeId]) -> Event {
    let view = View::new(vid, members.to_vec());
    let addresses = members
        .iter()
        .map(|m| (*m, world.endpoint(*m).address()))
        .collect();
    let holders = BTreeMap::from([(0, members.to_vec())]);
    Event::Recv {
        peer: from,
        imm: MEMBERSHIP_IMM,
        data: encode_new_view(&view, addresses, holders, 0),
    }
}

/// Runs `run(seed)` for seeds 1 to 3; a panic anywhere in a run fails naming its seed.
fn for_seeds(run: fn(u64)) {
    for seed in 1..=3 {
        let r = std::panic::catch_unwind(|| run(seed));
        assert!(r.is_ok(), "seed {seed}: failed (above)");
    }
}

#[test]
fn a_forged_new_view_at_members_changes_nothing() {
    for_seeds(|seed| {
        // (sender, the view it names, the members it is sent to): from the leader (1, the
        // first member), and from a member that does not lead (2, naming itself first, as
        // the sender of a NEW_VIEW is its view's first member).
        let forgeries: [(NodeId, [NodeId; 4], [NodeId; 2]); 2] =
            [(1, [1, 2, 3, 4], [2, 3]), (2, [2, 1, 3, 4], [1, 3])];
        for vid in [VID + 2, u32::MAX] {
            for (from, view, to) in forgeries {
                let world = membership_world(seed);
                let mut nodes = members(seed, &world, &[1, 2, 3]);
                for m in to {
                    let n = nodes.get_mut(&m).unwrap();
                    let ev = forged(&world, from, vid, &view);
                    n.g.handle_event(&*n.ep, ev, world.now_us());
                }
                for _ in 0..ROUNDS_AFTER {
                    round(&world, &mut nodes);
                }
                // Nobody installs the forged view, nobody stops, and nobody is suspected:
                // a suspicion would have changed the view.
                for (m, n) in &nodes {
                    let vids: Vec<u32> = n.installed.iter().map(|v| v.vid).collect();
                    assert_eq!(
                        vids,
                        vec![VID],
                        "seed {seed}, forged view {vid} from {from}: node {m}'s views"
                    );
                    assert_eq!(
                        n.g.view().map(|v| (v.vid, v.members.clone())),
                        Some((VID, vec![1, 2, 3])),
                        "seed {seed}, forged view {vid} from {from}: node {m}'s view"
                    );
                    assert_eq!(
                        n.g.stats().views_installed,
                        1,
                        "seed {seed}, forged view {vid} from {from}: node {m}'s view count"
                    );
                    assert!(
                        n.shut_down.is_none() && !n.g.is_done() && n.g.is_active(),
                        "seed {seed}, forged view {vid} from {from}: node {m} stopped: {:?}",
                        n.shut_down
                    );
                }
            }
        }
    });
}

#[test]
fn a_joiner_refuses_a_new_view_not_from_its_first_member_or_with_view_id_0() {
    for_seeds(|seed| {
        // (sender, view id, members): from a member its view does not put first (whatever
        // the id), and from the first member with an id no view change gives.
        let forgeries: [(NodeId, u32, [NodeId; 4]); 3] = [
            (2, VID + 2, [1, 2, 3, 4]),
            (3, u32::MAX, [1, 2, 3, 4]),
            (1, 0, [1, 2, 3, 4]),
        ];
        for (from, vid, view) in forgeries {
            let world = membership_world(seed);
            let mut nodes = members(seed, &world, &[1, 2, 3]);
            let ep = world.endpoint(4);
            let contacts = vec![(1, world.endpoint(1).address())];
            let mut g = Group::join(&*ep, contacts, config())
                .unwrap_or_else(|e| panic!("seed {seed}: join: {e}"));
            g.handle_event(&*ep, forged(&world, from, vid, &view), world.now_us());
            assert!(
                g.view().is_none(),
                "seed {seed}: the joiner entered view {vid} from {from}"
            );
            nodes.insert(4, Node::new(ep, g));
            // It joins as it would have: the leader admits it in the next view.
            for _ in 0..ROUNDS_MAX {
                if nodes.values().all(|n| n.g.is_active()) {
                    break;
                }
                round(&world, &mut nodes);
            }
            let vids: Vec<(u32, Vec<NodeId>)> = nodes[&4]
                .installed
                .iter()
                .map(|v| (v.vid, v.members.clone()))
                .collect();
            assert_eq!(
                vids,
                vec![(VID + 1, vec![1, 2, 3, 4])],
                "seed {seed}, forged view {vid} from {from}: the joiner's views"
            );
            for (m, n) in &nodes {
                assert!(
                    n.g.is_active() && n.shut_down.is_none(),
                    "seed {seed}, forged view {vid} from {from}: node {m} is not active: {:?}",
                    n.shut_down
                );
            }
        }
    });
}
