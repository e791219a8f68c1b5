//! Large messages (by RDMC, in the subgroups' total order) across view changes, on the
//! deterministic sim fabric with the swarm's checker (one order per atomic subgroup, the
//! same messages in a view at every member that passes to the next, no duplicates, each
//! sender's order, payloads intact): every send is large, so crashes land in the middle
//! of RDMC transfers; the ragged trim (which counts an RDMC message as received only
//! once complete) decides and the messages past it are re-sent in the next view. A
//! failing seed prints the command that reruns it.

use spindle_group::swarm::{Fault, Report, Scenario, Target, When};

/// Seeds per scripted scenario.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

fn check(test: &str, r: &Report) {
    let again = format!(
        "cargo test -p spindle-group --all-features --test large_view_change {test} \
         (seed {})",
        r.seed
    );
    assert!(
        r.violations.is_empty(),
        "seed {}: violations {:?}\nreproduce: {again}",
        r.seed,
        r.violations
    );
    assert!(
        r.liveness_failure.is_none(),
        "seed {}: {}\nreproduce: {again}",
        r.seed,
        r.liveness_failure.as_deref().unwrap_or("")
    );
    assert!(r.large_delivered > 0, "seed {}: no large message", r.seed);
}

/// Every send large, often: RDMC transfers are in flight at any round.
fn all_large(nodes: u32, seed: u64) -> Scenario {
    let mut s = Scenario::new(nodes).seed(seed);
    s.large_percent = 100;
    s.send_percent = 50;
    s
}

/// Runs `scenario` on every seed; returns the large deliveries cut off by a view change
/// and re-sent, summed.
fn run_all(test: &str, scenario: impl Fn(u64) -> Scenario) -> u64 {
    let mut later = 0;
    for seed in SEEDS {
        let r = scenario(seed).run();
        check(test, &r);
        assert!(r.faults_fired > 0, "seed {seed}: the fault fired");
        later += r.large_later_view;
    }
    later
}

#[test]
fn a_sender_crashes_in_the_middle_of_its_rdmc_transfers() {
    // Node 2 sends in every subgroup (rank 1: SG_ALL, SG_TAIL, SG_UNORDERED).
    let later = run_all("a_sender_crashes", |seed| {
        all_large(4, seed).at(When::Round(300 + seed * 7), Fault::Crash(Target::Node(2)))
    });
    assert!(later > 0, "no large message was cut off by the view change");
}

#[test]
fn a_receiver_crashes_in_the_middle_of_rdmc_transfers_it_relays() {
    // Node 4 receives in every subgroup and relays blocks in the binomial schedules.
    let later = run_all("a_receiver_crashes", |seed| {
        all_large(4, seed).at(When::Round(300 + seed * 7), Fault::Crash(Target::Node(4)))
    });
    assert!(later > 0, "no large message was cut off by the view change");
}

#[test]
fn the_leader_crashes_during_a_view_change_with_large_messages_in_flight() {
    run_all("the_leader_crashes", |seed| {
        all_large(5, seed)
            .at(When::Round(250), Fault::Crash(Target::Node(5)))
            .at(When::ViewChangeFrom(250), Fault::Crash(Target::Leader))
    });
}
