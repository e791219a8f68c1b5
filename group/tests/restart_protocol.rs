//! The restart protocol's core ([`spindle_group::restart::Restart`]) between members whose
//! messages this test carries, over logs on disk: the leader waits (and says so) while
//! fewer than a majority of the last view reported; with every member, or a majority
//! after the grace period, every log becomes the longest reported one and the plan
//! resumes in the next view. The logs differ in length as after a crash mid-stream.

use std::collections::BTreeMap;
use std::time::Duration;

use spindle_group::persist::{Persistence, Persister};
use spindle_group::restart::{Plan, Restart, RestartConfig};
use spindle_group::View;
use spindle_log::{EntryMeta, LogConfig, Version};

const SG: u32 = 6;
const GRACE_US: u64 = 1_000_000;

fn persister(dir: &std::path::Path, id: u32, entries: u64) -> Persister {
    let mut p = Persistence::new(dir.join(format!("node-{id}")))
        .subgroup(SG, LogConfig::default())
        .open()
        .unwrap();
    p.view_installed(&View::new(1, vec![1, 2, 3])).unwrap();
    let log = p.log_mut(SG).unwrap();
    for i in 0..entries {
        let meta = EntryMeta {
            version: Version::new(1, i),
            writer: 1 + i % 3,
            timestamp_us: i,
        };
        log.append(meta, format!("m{i}").as_bytes()).unwrap();
    }
    log.sync().unwrap();
    p
}

fn config() -> RestartConfig {
    RestartConfig {
        leader: 1,
        leader_address: "addr-1".into(),
        grace_us: GRACE_US,
        timeout: Duration::from_secs(60),
        group_id: 0,
        group_label: spindle_group::group::plain_group_label,
    }
}

/// Runs the members in `ids` until every one finished or `until_us` of simulated time
/// passed (steps of 10 ms); returns each one's plan, if it finished.
fn run(
    nodes: &mut BTreeMap<u32, (Restart, Persister)>,
    until_us: u64,
) -> BTreeMap<u32, Option<Plan>> {
    run_with(nodes, until_us, |_, _| None)
}

/// [`run`], where `forge(from, to)` may name `(by, at)`: node `by` also delivers a copy
/// of each message of `from` to `to` to node `at`, as its own, just before the real one.
fn run_with(
    nodes: &mut BTreeMap<u32, (Restart, Persister)>,
    until_us: u64,
    forge: impl Fn(u32, u32) -> Option<(u32, u32)>,
) -> BTreeMap<u32, Option<Plan>> {
    let mut now_us = 0;
    while now_us < until_us {
        let ids: Vec<u32> = nodes.keys().copied().collect();
        for id in &ids {
            let (r, p) = nodes.get_mut(id).unwrap();
            r.handle_time(now_us, p).unwrap();
        }
        // Carry every queued message until none is left (self-sends included).
        loop {
            let mut moved = false;
            for id in &ids {
                while let Some((to, bytes)) = nodes.get_mut(id).unwrap().0.poll_send() {
                    moved = true;
                    if let Some((by, at)) = forge(*id, to) {
                        if let Some((r, p)) = nodes.get_mut(&at) {
                            r.handle_message(by, &bytes, now_us, p).unwrap();
                        }
                    }
                    if let Some((r, p)) = nodes.get_mut(&to) {
                        r.handle_message(*id, &bytes, now_us, p).unwrap();
                    }
                }
            }
            if !moved {
                break;
            }
        }
        if nodes.values().all(|(r, _)| r.finished().is_some()) {
            break;
        }
        now_us += 10_000;
    }
    nodes
        .iter()
        .map(|(id, (r, _))| (*id, r.finished().cloned()))
        .collect()
}

fn log_of(p: &mut Persister) -> Vec<(Version, Vec<u8>)> {
    p.log_mut(SG)
        .unwrap()
        .range(..)
        .unwrap()
        .map(|e| e.map(|e| (e.meta.version, e.payload)))
        .collect::<Result<_, _>>()
        .unwrap()
}

fn start(dir: &std::path::Path, lengths: &[(u32, u64)]) -> BTreeMap<u32, (Restart, Persister)> {
    lengths
        .iter()
        .map(|(id, n)| {
            let mut p = persister(dir, *id, *n);
            let r = Restart::new(*id, format!("addr-{id}"), config(), &mut p).unwrap();
            (*id, (r, p))
        })
        .collect()
}

#[test]
fn one_member_of_three_waits_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(dir.path(), &[(1, 5)]);
    let plans = run(&mut nodes, 10 * GRACE_US);
    assert_eq!(plans[&1], None, "one of three never restarts");
    let why = nodes[&1].0.waiting_for();
    assert!(
        why.contains("view 1") && why.contains("1 of its members") && why.contains("2 needed"),
        "{why}"
    );
    // Its log is untouched.
    assert_eq!(log_of(&mut nodes.get_mut(&1).unwrap().1).len(), 5);
}

#[test]
fn every_member_back_restores_the_longest_log_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(dir.path(), &[(1, 6), (2, 9), (3, 3)]);
    let longest = log_of(&mut nodes.get_mut(&2).unwrap().1);
    let plans = run(&mut nodes, 100 * GRACE_US);
    for (id, plan) in &plans {
        let plan = plan
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} did not finish"));
        assert_eq!(plan.view, View::new(2, vec![1, 2, 3]), "node {id}");
        assert_eq!(plan.sources[&SG], (2, Some(Version::new(1, 8))));
        assert_eq!(plan.addresses[&3], "addr-3");
    }
    for (id, (_, p)) in nodes.iter_mut() {
        assert_eq!(log_of(p), longest, "node {id}'s log");
    }
}

#[test]
fn entries_from_anyone_but_the_planned_source_are_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(dir.path(), &[(1, 6), (2, 9), (3, 3)]);
    let longest = log_of(&mut nodes.get_mut(&2).unwrap().1);
    // Node 9 (no member) hands node 3 a copy of everything the source, node 2, sends
    // node 1: node 1's entries (from its own, longer log's end on), which would leave
    // node 3's log with a gap if taken.
    let plans = run_with(&mut nodes, 100 * GRACE_US, |from, to| {
        (from == 2 && to == 1).then_some((9, 3))
    });
    assert!(plans.values().all(Option::is_some), "{plans:?}");
    for (id, (_, p)) in nodes.iter_mut() {
        assert_eq!(
            log_of(p),
            longest,
            "node {id}'s log: the copies were not taken"
        );
    }
}

#[test]
fn a_majority_restarts_after_the_grace_period_without_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    // Node 2 (the longest log) stays dead; 1 and 3 are a majority of view 1.
    let mut nodes = start(dir.path(), &[(1, 6), (3, 3)]);
    let want = log_of(&mut nodes.get_mut(&1).unwrap().1);
    let plans = run(&mut nodes, 100 * GRACE_US);
    for (id, plan) in &plans {
        let plan = plan
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} did not finish"));
        assert_eq!(plan.view, View::new(2, vec![1, 3]), "node {id}");
    }
    for (id, (_, p)) in nodes.iter_mut() {
        assert_eq!(log_of(p), want, "node {id}'s log");
    }
    // Node 2 comes back later with a longer log: it is not in the restarted view.
    let mut p2 = persister(dir.path(), 2, 0);
    let mut late = Restart::new(2, "addr-2".into(), config(), &mut p2).unwrap();
    late.handle_time(0, &mut p2).unwrap();
    let (to, report) = late.poll_send().unwrap();
    assert_eq!(to, 1);
    let (r1, p1) = nodes.get_mut(&1).unwrap();
    r1.handle_message(2, &report, 0, p1).unwrap();
    // The leader answers with its plan, which tells node 2 it is not in the view: it
    // must join the restarted domain as a new member (DCPS then joins through its
    // contacts, and the state transfer brings its log to the domain's).
    let (to, plan) = r1.poll_send().expect("the plan goes to the late member");
    assert_eq!(to, 2);
    assert_eq!(r1.address_of(2), Some("addr-2"));
    match late.handle_message(1, &plan, 0, &mut p2) {
        Err(spindle_group::Error::Restart(why)) => {
            assert!(why.contains("join it as a new member"), "{why}")
        }
        other => panic!("expected Error::Restart, got {other:?}"),
    }
    assert!(late.finished().is_none());
}

#[test]
fn a_shorter_log_gets_the_tail_of_the_longest_across_views() {
    let dir = tempfile::tempdir().unwrap();
    // Both logged views 1 and 2; node 1 also logged three deliveries of view 2 that
    // node 3 had not synced when everything died. Node 2 stays dead.
    let mut p1 = persister(dir.path(), 1, 4);
    {
        p1.view_installed(&View::new(2, vec![1, 3])).unwrap();
        let log = p1.log_mut(SG).unwrap();
        for i in 0..3 {
            let meta = EntryMeta {
                version: Version::new(2, i),
                writer: 1,
                timestamp_us: 0,
            };
            log.append(meta, b"stale").unwrap();
        }
        log.sync().unwrap();
    }
    let mut p3 = persister(dir.path(), 3, 4);
    p3.view_installed(&View::new(2, vec![1, 3])).unwrap();
    let r1 = Restart::new(1, "addr-1".into(), config(), &mut p1).unwrap();
    let r3 = Restart::new(3, "addr-3".into(), config(), &mut p3).unwrap();
    let mut nodes: BTreeMap<u32, (Restart, Persister)> = [(1, (r1, p1)), (3, (r3, p3))].into();
    let plans = run(&mut nodes, 100 * GRACE_US);
    // The longest log is node 1's: it is the restored state, and node 3 gets its tail.
    let plan = plans[&3].clone().expect("node 3 finished");
    assert_eq!(plan.view.vid, 3);
    assert_eq!(plan.sources[&SG], (1, Some(Version::new(2, 2))));
    let a = log_of(&mut nodes.get_mut(&1).unwrap().1);
    let b = log_of(&mut nodes.get_mut(&3).unwrap().1);
    assert_eq!(a.len(), 7);
    assert_eq!(a, b);
}

#[test]
fn a_domain_whose_last_view_is_the_last_view_id_refuses_to_restart_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: BTreeMap<u32, (Restart, Persister)> = [1u32, 2, 3]
        .into_iter()
        .map(|id| {
            let mut p = persister(dir.path(), id, 2);
            p.view_installed(&View::new(u32::MAX, vec![1, 2, 3]))
                .unwrap();
            let r = Restart::new(id, format!("addr-{id}"), config(), &mut p).unwrap();
            (id, (r, p))
        })
        .collect();
    let mut refused = None;
    let mut now_us = 0;
    while refused.is_none() && now_us < 100 * GRACE_US {
        for id in [1u32, 2, 3] {
            let (r, p) = nodes.get_mut(&id).unwrap();
            if let Err(e) = r.handle_time(now_us, p) {
                refused = Some((id, e));
            }
            while let Some((to, bytes)) = nodes.get_mut(&id).unwrap().0.poll_send() {
                if let Some((r, p)) = nodes.get_mut(&to) {
                    if let Err(e) = r.handle_message(id, &bytes, now_us, p) {
                        refused = refused.or(Some((to, e)));
                    }
                }
            }
        }
        now_us += 10_000;
    }
    match refused {
        Some((1, spindle_group::Error::Restart(why))) => {
            assert!(why.contains("the last view id"), "{why}")
        }
        other => panic!("the leader should refuse, naming the view: {other:?}"),
    }
    assert!(
        nodes.values().all(|(r, _)| r.finished().is_none()),
        "nobody restarted"
    );
}

#[test]
fn a_member_of_another_group_is_refused_by_the_leader_and_stops_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(dir.path(), &[(1, 6), (2, 9)]);
    // Node 3 was in the last view too, but is configured for group 7.
    let mut p3 = persister(dir.path(), 3, 3);
    let cfg = RestartConfig {
        group_id: 7,
        ..config()
    };
    let mut r3 = Restart::new(3, "addr-3".into(), cfg, &mut p3).unwrap();
    r3.handle_time(0, &mut p3).unwrap();
    let (to, report) = r3.poll_send().expect("a report");
    assert_eq!(to, 1);
    let (leader, lp) = nodes.get_mut(&1).unwrap();
    leader.handle_message(3, &report, 0, lp).unwrap();
    let (back_to, refusal) = leader.poll_send().expect("a refusal");
    assert_eq!(back_to, 3);
    let e = r3.handle_message(1, &refusal, 0, &mut p3).unwrap_err();
    assert!(
        matches!(&e, spindle_group::Error::Restart(m)
            if m.contains("node 1, is configured for group 0, this node for group 7")),
        "{e}"
    );
    // Not counted: the others restart without it, after the grace period (two of the
    // last view's three), and its log is untouched.
    let plans = run(&mut nodes, 100 * GRACE_US);
    for (id, plan) in &plans {
        let plan = plan
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} did not finish"));
        assert_eq!(plan.view.members, vec![1, 2], "node {id}");
    }
    assert_eq!(log_of(&mut p3).len(), 3);
}
