//! Virtual synchrony under faults, on the deterministic sim fabric (crate
//! `spindle_group::swarm`): at least 500 random seeds, determinism, and scripted
//! scenarios. A failing seed prints the command that reruns it.

use spindle_group::swarm::{
    reproduce_command, run_seed, Fault, Report, Scenario, SwarmConfig, Target, When,
};

/// Seeds `cargo test` runs (split over four tests so two cores share them).
const SEEDS_PER_TEST: u64 = 125;

fn seeds(start: u64) {
    let cfg = SwarmConfig::default();
    let mut faults = 0;
    let mut views = 0;
    for seed in start..start + SEEDS_PER_TEST {
        let r = run_seed(seed, &cfg);
        r.assert_clean();
        faults += r.faults_fired;
        views += r.views_installed;
    }
    // The seeds do exercise view changes, not just quiet runs.
    assert!(
        faults > SEEDS_PER_TEST as usize / 2,
        "only {faults} faults fired"
    );
    assert!(
        views > SEEDS_PER_TEST * 3 * 2,
        "only {views} views installed"
    );
}

#[test]
fn swarm_seeds_1_to_125() {
    seeds(1);
}

#[test]
fn swarm_seeds_126_to_250() {
    seeds(126);
}

#[test]
fn swarm_seeds_251_to_375() {
    seeds(251);
}

#[test]
fn swarm_seeds_376_to_500() {
    seeds(376);
}

#[test]
fn a_seed_run_twice_gives_the_same_trace() {
    for seed in [3, 42, 99] {
        let a = run_seed(seed, &SwarmConfig::default());
        let b = run_seed(seed, &SwarmConfig::default());
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed}");
        assert_eq!(a, b, "seed {seed}");
    }
}

/// Views installed after `round` with a vid above `vid`.
fn views_after(r: &Report, round: u64, vid: u32) -> Vec<(u64, u32, u32, Vec<u32>)> {
    r.views
        .iter()
        .filter(|(at, _, v, _)| *at >= round && *v > vid)
        .cloned()
        .collect()
}

#[test]
fn the_leader_crashes_in_the_middle_of_a_view_change() {
    for seed in 1..=10 {
        let r = Scenario::new(5)
            .seed(seed)
            .at(When::Round(200), Fault::Crash(Target::Node(5)))
            .at(When::ViewChangeFrom(200), Fault::Crash(Target::Leader))
            .run();
        r.assert_clean();
        assert_eq!(r.faults_fired, 2, "seed {seed}: both crashes happened");
        // The survivors 2, 3, 4 installed a view without 1 and 5 (before the liveness
        // phase brought them back).
        assert!(
            r.views
                .iter()
                .any(|(_, n, _, m)| *n == 2 && *m == vec![2, 3, 4]),
            "seed {seed}: no view [2, 3, 4] at node 2: {:?}",
            r.views
        );
    }
}

#[test]
fn two_members_crash_at_once() {
    for seed in 1..=10 {
        let r = Scenario::new(5)
            .seed(seed)
            .at(When::Round(300), Fault::Crash(Target::Node(2)))
            .at(When::Round(300), Fault::Crash(Target::Node(4)))
            .run();
        r.assert_clean();
        assert!(
            r.views
                .iter()
                .any(|(_, n, _, m)| *n == 1 && *m == vec![1, 3, 5]),
            "seed {seed}: one view change removed both: {:?}",
            r.views
        );
    }
}

#[test]
fn a_joiner_crashes_during_its_join() {
    for seed in 1..=10 {
        let r = Scenario::new(5)
            .seed(seed)
            .at(When::Round(200), Fault::Crash(Target::Node(3)))
            .at(When::Round(400), Fault::Restart(3))
            .at(When::JoiningFrom(400), Fault::Crash(Target::Joiner))
            .run();
        r.assert_clean();
        assert_eq!(r.faults_fired, 3, "seed {seed}");
    }
}

#[test]
fn a_3_2_partition_leaves_the_majority_running_and_shuts_the_minority_down() {
    for seed in 1..=10 {
        let r = Scenario::new(5)
            .seed(seed)
            .at(
                When::Round(300),
                Fault::Partition(vec![vec![1, 2, 3], vec![4, 5]]),
            )
            .at(When::Round(1200), Fault::Heal)
            .run();
        r.assert_clean();
        for n in [4, 5] {
            assert!(
                r.shutdowns
                    .iter()
                    .any(|(_, x, why)| *x == n && why.contains("majority")),
                "seed {seed}: node {n} on the minority side did not shut down: {:?}",
                r.shutdowns
            );
            // Typed too, as the participant acts on it: the view it lost.
            assert!(
                r.lost_majority.iter().any(|(x, vid)| *x == n && *vid >= 1),
                "seed {seed}: node {n}'s shut-down is not typed a lost majority: {:?}",
                r.lost_majority
            );
        }
        assert!(
            r.lost_majority.iter().all(|(x, _)| [4, 5].contains(x)),
            "seed {seed}: only the minority lost its majority: {:?}",
            r.lost_majority
        );
        // The minority installed nothing while cut off.
        for (at, n, vid, m) in views_after(&r, 300, 1) {
            if at < 1200 {
                assert!(
                    ![4, 5].contains(&n),
                    "seed {seed}: node {n} installed view {vid} {m:?} in the minority"
                );
            }
        }
        assert!(
            r.views.iter().any(|(_, _, _, m)| *m == vec![1, 2, 3]),
            "seed {seed}: the majority went on as [1, 2, 3]"
        );
    }
}

#[test]
fn a_2_2_1_partition_has_no_majority_and_every_member_shuts_down() {
    for seed in 1..=10 {
        let r = Scenario::new(5)
            .seed(seed)
            .unbounded_faults()
            .restart_in_liveness(false)
            .at(
                When::Round(300),
                Fault::Partition(vec![vec![1, 2], vec![3, 4], vec![5]]),
            )
            .safety_rounds(1500)
            .run();
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert!(
            views_after(&r, 300, 1).is_empty(),
            "seed {seed}: a view was installed without a majority: {:?}",
            views_after(&r, 300, 1)
        );
        for n in 1..=5 {
            assert!(
                r.shutdowns.iter().any(|(_, x, _)| *x == n),
                "seed {seed}: node {n} kept running without a majority"
            );
        }
        assert!(
            r.liveness_failure.is_some(),
            "nobody can recover without restarts"
        );
    }
}

#[test]
fn a_member_that_is_only_slow_is_not_removed() {
    for seed in 1..=10 {
        // Paused well under the fabric's 20 ms probe time-out.
        let r = Scenario::new(4)
            .seed(seed)
            .at(When::Round(300), Fault::Pause(2))
            .at(When::Round(330), Fault::Resume(2))
            .run();
        r.assert_clean();
        assert!(
            r.views.iter().all(|(_, _, vid, _)| *vid == 1),
            "seed {seed}: a slow member caused a view change: {:?}",
            r.views.iter().filter(|v| v.2 > 1).collect::<Vec<_>>()
        );
        assert!(r.shutdowns.is_empty(), "seed {seed}");
    }
}

#[test]
fn a_member_paused_past_the_detector_is_excluded_and_told_so_when_it_wakes() {
    for seed in 1..=10 {
        // A round moves virtual time by 0 to 150 µs (75 µs on average): 2,000 frozen
        // rounds (about 150 ms) outlast the swarm fabric's 20 ms suspicion floor.
        let r = Scenario::new(4)
            .seed(seed)
            .at(When::Round(300), Fault::Pause(2))
            .at(When::Round(2_300), Fault::Resume(2))
            .safety_rounds(2_600)
            .run();
        r.assert_clean();
        assert!(
            r.views
                .iter()
                .any(|(_, n, _, members)| *n != 2 && !members.contains(&2)),
            "seed {seed}: the paused member was never excluded\nreproduce: {}",
            reproduce_command(seed)
        );
        assert!(
            r.shutdowns.iter().any(|(_, n, why)| *n == 2
                && why.contains("excluded from the group")
                && why.contains("ms of silence")),
            "seed {seed}: the woken member did not stop as excluded: {:?}\nreproduce: {}",
            r.shutdowns,
            reproduce_command(seed)
        );
    }
}

#[test]
fn a_member_leaves_gracefully() {
    for seed in 1..=5 {
        let r = Scenario::new(4)
            .seed(seed)
            .at(When::Round(300), Fault::Leave(3))
            .restart_in_liveness(false)
            .run();
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert!(
            r.views.iter().any(|(_, _, _, m)| *m == vec![1, 2, 4]),
            "seed {seed}: the others installed a view without 3"
        );
        assert!(
            r.shutdowns.iter().all(|(_, n, _)| *n != 3),
            "seed {seed}: left, not shut down"
        );
    }
}

#[test]
fn declarations_change_the_view_but_not_its_members_even_when_the_leader_crashes() {
    for seed in 1..=5 {
        // Two members declare at once, then the leader crashes while the view change that
        // carries them may still run: the liveness phase only settles once the final view
        // carries both declarations (a lost request is repeated to the next leader).
        let r = Scenario::new(5)
            .seed(seed)
            .at(When::Round(200), Fault::Declare(3))
            .at(When::Round(200), Fault::Declare(4))
            .at(When::ViewChangeFrom(200), Fault::Crash(Target::Leader))
            .restart_in_liveness(false)
            .run();
        r.assert_clean();
        assert!(
            r.faults_fired >= 3,
            "seed {seed}: {} faults",
            r.faults_fired
        );
        // Without the crash, the declarations alone give a view of the same members.
        let q = Scenario::new(4)
            .seed(seed)
            .at(When::Round(200), Fault::Declare(2))
            .restart_in_liveness(false)
            .run();
        q.assert_clean();
        assert!(
            q.views
                .iter()
                .any(|(_, _, v, m)| *v == 2 && *m == vec![1, 2, 3, 4]),
            "seed {seed}: no view 2 of the same members: {:?}",
            q.views
        );
        assert!(q.shutdowns.is_empty(), "seed {seed}: {:?}", q.shutdowns);
    }
}
