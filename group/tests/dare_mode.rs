//! A dare subgroup (`DeliveryMode::Dare`) of the engine beside atomic and unordered ones,
//! on the deterministic sim fabric (the swarm's layout has one: `swarm::SG_DARE`, every
//! member a sender): one log order at every member within a view, elections within a
//! view, and the hand-off at a view change after a crash of its leader or of a
//! follower. The swarm's checker asserts, over the dare subgroup as over the atomic
//! ones: members that pass from a view to the next delivered the same messages in it,
//! every node's sequence is a prefix of the longest (no committed entry lost, nothing
//! delivered out of the one order), no duplicate, each sender's order kept, payloads
//! intact; it also asserts one leader per view and term. The liveness phase asserts every
//! surviving sender's messages are delivered at every member. A failing seed prints the
//! command that reruns it.

use spindle_group::swarm::{Fault, Report, Scenario, Target, When};
use spindle_group::DareSettings;

fn check(r: &Report) {
    r.assert_clean();
    assert!(
        r.dare_delivered > 0,
        "seed {}: nothing delivered by DARE",
        r.seed
    );
}

/// The leaders of the dare subgroup seen in view `vid`: `(term, leader)`.
fn leaders_in(r: &Report, vid: u32) -> Vec<(u64, u32)> {
    r.dare_leaders
        .iter()
        .filter(|(v, _, _)| *v == vid)
        .map(|(_, t, l)| (*t, *l))
        .collect()
}

#[test]
fn a_dare_subgroup_beside_atomic_ones_delivers_one_order_at_every_member() {
    for seed in 1..=8 {
        let nodes = 3 + (seed % 3) as u32;
        let r = Scenario::new(nodes).seed(seed).run();
        check(&r);
        // No fault: one view, and one leader elected once in it.
        assert!(
            r.views.iter().all(|(_, _, vid, _)| *vid == 1),
            "seed {seed}: {:?}",
            r.views
        );
        let leaders = leaders_in(&r, 1);
        assert_eq!(leaders.len(), 1, "seed {seed}: leaders {leaders:?}");
    }
}

#[test]
fn a_paused_dare_leader_is_replaced_within_the_view_and_nothing_is_lost() {
    // Elections within a view: the leader pauses past the election time-out but well
    // under the fabric's 20 ms probe time-out, so the view survives and a new term's
    // leader takes over; the old one comes back to a later term.
    let fast = DareSettings {
        heartbeat_us: 200,
        election_timeout_us: 1_000,
        ..spindle_group::swarm::SWARM_DARE
    };
    for seed in 1..=8 {
        let r = Scenario::new(3 + (seed % 3) as u32)
            .seed(seed)
            .dare(fast)
            .at(When::Round(400), Fault::PauseFor(Target::DareLeader, 60))
            .run();
        check(&r);
        assert!(
            r.views.iter().all(|(_, _, vid, _)| *vid == 1),
            "seed {seed}: the pause changed the view: {:?}",
            r.views
        );
        let leaders = leaders_in(&r, 1);
        let mut distinct: Vec<u32> = leaders.iter().map(|(_, l)| *l).collect();
        distinct.dedup();
        assert!(
            leaders.len() >= 2 && distinct.len() >= 2,
            "seed {seed}: no new leader after the pause: {leaders:?}"
        );
    }
}

#[test]
fn the_dare_leader_crashes_and_the_survivors_hand_its_log_over() {
    for seed in 1..=10 {
        let r = Scenario::new(3 + (seed % 3) as u32)
            .seed(seed)
            .at(When::Round(400), Fault::Crash(Target::DareLeader))
            .run();
        check(&r);
        assert!(r.faults_fired >= 1, "seed {seed}: no crash");
        // The survivors installed a later view whose instance elected a leader in a term
        // past every term of view 1 (its log region ids are new).
        let before = leaders_in(&r, 1);
        let after: Vec<(u64, u32)> = r
            .dare_leaders
            .iter()
            .filter(|(v, _, _)| *v > 1)
            .map(|(_, t, l)| (*t, *l))
            .collect();
        assert!(
            !after.is_empty() && !before.is_empty(),
            "seed {seed}: later views' leaders {after:?}, view 1's {before:?}"
        );
        let max_before = before.iter().map(|(t, _)| *t).max().unwrap_or(0);
        assert!(
            after.iter().all(|(t, _)| *t > max_before),
            "seed {seed}: later views' terms {after:?} not past view 1's {before:?}"
        );
    }
}

#[test]
fn a_dare_follower_crashes_and_the_survivors_hand_over() {
    for seed in 1..=10 {
        let r = Scenario::new(3 + (seed % 3) as u32)
            .seed(seed)
            .at(When::Round(400), Fault::Crash(Target::DareFollower))
            .run();
        check(&r);
        assert!(
            r.views.iter().any(|(_, _, vid, _)| *vid >= 2),
            "seed {seed}: no view change"
        );
    }
}

#[test]
fn the_dare_leader_crashes_in_the_middle_of_a_view_change() {
    for seed in 1..=6 {
        let r = Scenario::new(5)
            .seed(seed)
            .at(When::Round(300), Fault::Crash(Target::DareFollower))
            .at(When::ViewChangeFrom(300), Fault::Crash(Target::DareLeader))
            .run();
        check(&r);
    }
}
