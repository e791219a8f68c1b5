//! The last view id: a view change after view `u32::MAX` shuts the group down with an
//! error naming the view (it neither panics nor wraps to view 0), and a restart plan
//! has no view to restart into. Seeded sim runs; a failure names its seed.

use std::collections::BTreeMap;
use std::sync::Arc;

use spindle_transport_rdma::sim::{SimEndpoint, SimWorld};
use spindle_transport_rdma::NodeId;

use spindle_group::persist::{restart_plan, RestartPlan, RestartReport};
use spindle_group::runtime::drive;
use spindle_group::testkit::{bootstrapped_groups, membership_world};
use spindle_group::{Group, GroupConfig, GroupOutput, Layout, View};

const ROUNDS_MAX: usize = 50_000;

/// Groups of `members` started in view `vid` (as from a logged view, or a NEW_VIEW
/// a joiner was sent) over the sim fabric; every node runs until its links are up.
fn start(
    seed: u64,
    vid: u32,
    members: &[NodeId],
) -> (SimWorld, BTreeMap<NodeId, (Arc<SimEndpoint>, Group)>) {
    let world = membership_world(seed);
    let view = View::new(vid, members.to_vec());
    let cfg = GroupConfig::new(Arc::new(|v: &View| Ok(Layout::one_subgroup(v, 0, 8, 64))));
    let mut nodes: BTreeMap<NodeId, (Arc<SimEndpoint>, Group)> =
        bootstrapped_groups(&world, &view, &cfg)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
            .into_iter()
            .map(|(n, ep, g)| (n, (ep, g)))
            .collect();
    for _ in 0..200 {
        for (ep, g) in nodes.values_mut() {
            drive(g, &**ep, world.now_us());
            while g.poll().is_some() {}
        }
        world.run_for(10);
    }
    (world, nodes)
}

#[test]
fn a_view_change_after_the_last_view_id_shuts_down_naming_it() {
    for seed in 1..=3 {
        let run = std::panic::catch_unwind(|| last_view_id_run(seed));
        assert!(run.is_ok(), "seed {seed}: panicked (above)");
    }
}

/// One seeded run of [`a_view_change_after_the_last_view_id_shuts_down_naming_it`].
fn last_view_id_run(seed: u64) {
    let (world, mut nodes) = start(seed, u32::MAX, &[1, 2, 3]);
    // A member fails: the survivors (a majority) agree on a trim, and the next view
    // would need id u32::MAX + 1.
    world.crash(3);
    nodes.remove(&3);
    let mut why: BTreeMap<NodeId, String> = BTreeMap::new();
    for _ in 0..ROUNDS_MAX {
        for (n, (ep, g)) in nodes.iter_mut() {
            drive(g, &**ep, world.now_us());
            while let Some(out) = g.poll() {
                match out {
                    GroupOutput::ShutDown(w) => {
                        why.insert(*n, w);
                    }
                    GroupOutput::ViewInstalled(v) => {
                        panic!("seed {seed}: node {n} installed view {}", v.view.vid)
                    }
                    _ => {}
                }
            }
        }
        if why.len() == nodes.len() {
            break;
        }
        world.run_for(10);
    }
    // Every survivor stops (the first to reach the install refuses it; the other
    // may find itself alone first), none panics or wraps to view 0, and the refusal
    // names the view.
    let refused = format!("view {} is the last view id", u32::MAX);
    assert!(
        why.len() == nodes.len() && why.values().any(|w| w.contains(&refused)),
        "seed {seed}: the survivors should shut down, one naming view {}: {why:?}",
        u32::MAX
    );
}

/// A report of a view logged at `vid` by node `node`.
fn report(node: NodeId, vid: u32) -> RestartReport {
    RestartReport {
        node,
        last_view: Some(View::new(vid, vec![1, 2, 3])),
        tails: BTreeMap::new(),
    }
}

#[test]
fn a_restart_from_the_last_view_id_has_no_next_view() {
    // The reports are a peer's bytes (or a local log's): a majority at view u32::MAX.
    let reports = [report(1, u32::MAX), report(2, u32::MAX), report(3, 7)];
    match restart_plan(&reports) {
        RestartPlan::LastViewId => {}
        other => panic!("{other:?}: no view above {}", u32::MAX),
    }
    // One below the bound still restarts, into the last view id.
    let reports = [report(1, u32::MAX - 1), report(2, u32::MAX - 1)];
    assert!(matches!(
        restart_plan(&reports),
        RestartPlan::Restore { vid: u32::MAX, .. }
    ));
}
