//! DCPS topics ordered by DARE in deterministic simulation: participants configured with
//! `atomic_ordering = "dare"` put their Atomic (RELIABLE + VOLATILE) topics on a subgroup
//! of `DeliveryMode::Dare` — a leader per term orders every writer's samples — with the
//! same API as the round-robin order. Three participants write and read one topic; the
//! DARE leader's participant crashes mid-stream; the survivors' readers hold one
//! sequence, every survivor's samples once and in its order, and the crashed writer's a
//! prefix of what it wrote. A late one-sided write of a dare topic's ended instance never
//! lands in the log of another dare topic that took over its place in the layout. A
//! failure prints its seed and the command that reruns it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_dare <test>`).

mod common;
use common::{atomic, keep_all};

use std::time::Duration;

use spindle_dds_core::declare::{
    dds_subgroups, declarations, subgroup_of, TOPIC_SUBGROUPS_DEFAULT,
};
use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{
    AtomicOrdering, DataReader, DataWriter, DomainParticipant, StateMask, Topic,
};
use spindle_group::dare::layout::{DARE_LOG_REGION_BASE, DARE_TERM_MAX};
use spindle_group::{DareSettings, DeliveryMode, SubgroupId};
use spindle_qos::{DataWriterQos, DomainParticipantQos};
use spindle_topics::Sequence;
use spindle_transport_rdma::sim::{DeliveryKind, Rule, Verdict};
use spindle_transport_rdma::RegionId;

/// Seeds each test runs (override with `SPINDLE_SIM_SEED`).
const SEEDS: std::ops::RangeInclusive<u64> = 1..=4;
/// One-way delay of every one-sided write between the two participants of
/// `a_dare_topic_elects_when_a_round_trip_outlasts_the_election_time_out`, in µs: a round
/// trip of 30 ms, past the longest election time-out a DCPS dare subgroup draws (twice
/// `DARE_MODE_ELECTION_TIMEOUT_US_DEFAULT`).
const SLOW_WRITE_US: u64 = 15_000;
/// Rounds a test waits for something before it fails.
const ROUNDS_MAX: u64 = 400_000;
/// Samples each writer writes.
const SAMPLES_PER_WRITER: u64 = 40;
/// The topic.
const TOPIC: &str = "flight-controls";
/// How long the one-sided writes into the first dare subgroup's log regions issued in
/// the window of `a_late_write_of_an_ended_dare_instance_never_lands_in_another_topics_log`
/// take, in µs (outside their links' FIFO order): past the view change that turns the
/// second topic dare and its instance's first election (its election time-out is 10–20 ms).
const LATE_WRITE_US: u64 = 150_000;
/// The window in which those writes are issued, in µs.
const LATE_WINDOW_US: u64 = 5_000;
/// Samples of that test's first topic written before, and in, the window: the late
/// writes carry log indices (and a `tail`) past what the second topic's log holds when
/// they land.
const X_BEFORE: u64 = 30;
const X_LATE: u64 = 10;
/// Samples of its second topic, [`Y_EARLY`] of them before the late writes land.
const Y_SAMPLES: u64 = 40;
const Y_EARLY: u64 = 5;

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds_in(SEEDS, "sim_dare", name, test)
}

/// Participant `id` of `d` with `atomic_ordering = "dare"`, and `settings` for its dare
/// subgroups if given (the defaults otherwise).
fn dare_participant(d: &SimDomain, id: u32, settings: Option<DareSettings>) -> DomainParticipant {
    d.participant_with(id, DomainParticipantQos::default(), |c| {
        c.atomic_ordering = AtomicOrdering::Dare;
        if let Some(s) = settings {
            c.dare = s;
        }
    })
    .expect("participant")
}

/// An Atomic-level writer of `t` in a new publisher of `p`.
fn writer(p: &DomainParticipant, t: &Topic<Sequence>) -> DataWriter<Sequence> {
    p.create_publisher(Default::default())
        .unwrap()
        .create_datawriter(t, DataWriterQos::from_topic_qos(&atomic()))
        .unwrap()
}

fn endpoints(p: &DomainParticipant) -> (DataReader<Sequence>, DataWriter<Sequence>) {
    let t = p.create_topic::<Sequence>(TOPIC, atomic()).unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, keep_all(&atomic()))
        .unwrap();
    let w = writer(p, &t);
    (r, w)
}

/// Sample `i` of writer `w`: its writer and index, then a pattern of them.
fn payload(w: u32, i: u64) -> Vec<u8> {
    let mut p = w.to_le_bytes().to_vec();
    p.extend_from_slice(&i.to_le_bytes());
    p.extend((0..100u64).map(|k| (k ^ i ^ u64::from(w)) as u8));
    p
}

fn parse(p: &[u8]) -> (u32, u64) {
    let w = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
    let i = u64::from_le_bytes(p[4..12].try_into().expect("8 bytes"));
    (w, i)
}

#[test]
fn a_dare_ordered_topic_keeps_one_order_when_its_leader_crashes() {
    for_seeds(
        "a_dare_ordered_topic_keeps_one_order_when_its_leader_crashes",
        |seed| {
            let d = SimDomain::new(seed);
            let ps: Vec<DomainParticipant> =
                (1..=3).map(|id| dare_participant(&d, id, None)).collect();
            let eps: Vec<_> = ps.iter().map(endpoints).collect();
            for (_, w) in &eps {
                w.wait_for_readers(3, Duration::from_secs(60)).unwrap();
            }
            // The topic's subgroup is ordered by DARE, in the layout every member computes.
            let view = ps[0].view().expect("a view");
            let sg = subgroup_of(TOPIC, TOPIC_SUBGROUPS_DEFAULT);
            let spec = dds_subgroups(&view)
                .into_iter()
                .find(|s| s.spec.id == sg)
                .expect("the topic's subgroup")
                .spec;
            assert!(
                matches!(spec.mode, DeliveryMode::Dare(_)),
                "seed {seed}: subgroup {sg} is {:?}",
                spec.mode
            );
            // Half the samples from everyone, then node 1 (the first member: the DARE
            // instance's first leader) crashes, then the survivors write the rest.
            let half = SAMPLES_PER_WRITER / 2;
            for i in 0..half {
                for (k, (_, w)) in eps.iter().enumerate() {
                    let data = Sequence {
                        payload: payload(k as u32 + 1, i),
                    };
                    w.write(&data)
                        .unwrap_or_else(|e| panic!("seed {seed}: write {i} of {}: {e}", k + 1));
                }
            }
            // Node 1 crashes once both survivors took some of its samples, with the
            // survivors' own samples still on their way.
            let mut got: Vec<Vec<(u32, u64, u32, u64)>> = vec![Vec::new(); 2];
            let take = |got: &mut Vec<Vec<(u32, u64, u32, u64)>>| {
                for (n, (r, _)) in eps.iter().skip(1).enumerate() {
                    let what = format!("reader {}", n + 2);
                    got[n].extend(take_checked(seed, &what, r));
                }
            };
            let started = d.run_until(ROUNDS_MAX, || {
                take(&mut got);
                got.iter().all(|g| g.iter().any(|s| s.2 == 1))
            });
            assert!(started, "seed {seed}: nothing of node 1 delivered: {got:?}");
            d.crash(1);
            for i in half..SAMPLES_PER_WRITER {
                for (k, (_, w)) in eps.iter().enumerate().skip(1) {
                    let data = Sequence {
                        payload: payload(k as u32 + 1, i),
                    };
                    w.write(&data)
                        .unwrap_or_else(|e| panic!("seed {seed}: write {i} of {}: {e}", k + 1));
                }
            }
            let done = d.run_until(ROUNDS_MAX, || {
                take(&mut got);
                let survivors_done = |g: &Vec<(u32, u64, u32, u64)>| {
                    (2..=3).all(|w| {
                        g.iter().filter(|s| s.2 == w).count() == SAMPLES_PER_WRITER as usize
                    })
                };
                got.iter().all(survivors_done)
                    && ps[1].view().is_some_and(|v| !v.members.contains(&1))
            });
            assert!(
                done,
                "seed {seed}: survivors took {:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            // One last take: what the view without node 1 delivered before it is in.
            take(&mut got);
            assert_eq!(got[0], got[1], "seed {seed}: both survivors, one sequence");
            for w in 1..=3u32 {
                let seq: Vec<u64> = got[0].iter().filter(|s| s.2 == w).map(|s| s.3).collect();
                let want: Vec<u64> = (0..seq.len() as u64).collect();
                assert_eq!(
                    seq, want,
                    "seed {seed}: writer {w}'s samples, once, in order"
                );
                if w != 1 {
                    assert_eq!(
                        seq.len() as u64,
                        SAMPLES_PER_WRITER,
                        "seed {seed}: writer {w}"
                    );
                } else {
                    assert!(
                        seq.len() as u64 <= half,
                        "seed {seed}: writer 1 wrote {half}"
                    );
                }
            }
        },
    );
}

/// A participant's `[dare]` settings ([`spindle_dds_core::ParticipantConfig::dare`]) reach
/// its topic's dare subgroup: every member's layout carries them and the engine runs the
/// subgroup's core with them (its heartbeat); with a log of 8 slots and a window of 4
/// messages the ring wraps many times, and every sample still arrives once, in order.
#[test]
fn a_participants_dare_settings_reach_its_topics_subgroup() {
    for_seeds(
        "a_participants_dare_settings_reach_its_topics_subgroup",
        |seed| {
            let settings = DareSettings {
                log_entries: 8,
                sender_window: 4,
                heartbeat_us: 250,
                election_timeout_us: 4_000,
            };
            assert_ne!(settings, DareSettings::default());
            let d = SimDomain::new(seed);
            let ps: Vec<DomainParticipant> = (1..=3)
                .map(|id| dare_participant(&d, id, Some(settings)))
                .collect();
            let eps: Vec<_> = ps.iter().map(endpoints).collect();
            for (_, w) in &eps {
                w.wait_for_readers(3, Duration::from_secs(60)).unwrap();
            }
            let sg = subgroup_of(TOPIC, TOPIC_SUBGROUPS_DEFAULT);
            for id in 1..=3 {
                let (mode, heartbeat) = d
                    .inspect_group(id, |g| {
                        let mode = g
                            .layout()
                            .and_then(|l| l.subgroups.iter().find(|s| s.id == sg))
                            .map(|s| s.mode);
                        (mode, g.engine().and_then(|e| e.dare_heartbeat_us()))
                    })
                    .expect("a participant");
                assert_eq!(
                    mode,
                    Some(DeliveryMode::Dare(settings)),
                    "seed {seed}: node {id}'s layout"
                );
                assert_eq!(
                    heartbeat,
                    Some(settings.heartbeat_us),
                    "seed {seed}: node {id}'s engine"
                );
            }
            for i in 0..SAMPLES_PER_WRITER {
                for (k, (_, w)) in eps.iter().enumerate() {
                    w.write(&Sequence {
                        payload: payload(k as u32 + 1, i),
                    })
                    .unwrap_or_else(|e| panic!("seed {seed}: write {i} of {}: {e}", k + 1));
                }
            }
            let mut got: Vec<Vec<(u32, u64)>> = vec![Vec::new(); 3];
            let all = 3 * SAMPLES_PER_WRITER as usize;
            let done = d.run_until(ROUNDS_MAX, || {
                for (n, (r, _)) in eps.iter().enumerate() {
                    take_into(seed, &format!("reader {}", n + 1), r, &mut got[n]);
                }
                got.iter().all(|g| g.len() >= all)
            });
            assert!(
                done,
                "seed {seed}: took {:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for n in 1..3 {
                assert_eq!(
                    got[n],
                    got[0],
                    "seed {seed}: readers 1 and {}: one order",
                    n + 1
                );
            }
            for w in 1..=3u32 {
                let seq: Vec<u64> = got[0].iter().filter(|s| s.0 == w).map(|s| s.1).collect();
                assert_eq!(
                    seq,
                    (0..SAMPLES_PER_WRITER).collect::<Vec<_>>(),
                    "seed {seed}: writer {w}'s samples, once, in order"
                );
            }
        },
    );
}

/// The shape of `dds_perf --level dare`: one participant only writes the topic, another
/// only reads it (the writer is handed sample headers only), the subgroup appearing in
/// the view that declares them. Every sample arrives once, in the writer's order.
#[test]
fn a_writer_only_and_a_reader_only_participant_on_a_dare_topic() {
    for_seeds(
        "a_writer_only_and_a_reader_only_participant_on_a_dare_topic",
        |seed| {
            let d = SimDomain::new(seed);
            let dare = |id| dare_participant(&d, id, None);
            // The reader's participant joins the domain after the writer exists: it joins
            // a view whose dare subgroup already runs.
            let mut ps: Vec<DomainParticipant> = vec![dare(1)];
            let t = ps[0].create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let w = writer(&ps[0], &t);
            ps.push(dare(2));
            let t2 = ps[1].create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let r = ps[1]
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&t2, keep_all(&atomic()))
                .unwrap();
            w.wait_for_readers(1, Duration::from_secs(60)).unwrap();
            for i in 0..SAMPLES_PER_WRITER {
                w.write(&Sequence {
                    payload: payload(1, i),
                })
                .unwrap_or_else(|e| panic!("seed {seed}: write {i}: {e}"));
            }
            let mut got = Vec::new();
            let done = d.run_until(ROUNDS_MAX, || {
                for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
                    got.push(parse(&s.data.expect("valid data").payload).1);
                }
                got.len() >= SAMPLES_PER_WRITER as usize
            });
            assert!(done, "seed {seed}: took {} samples", got.len());
            assert_eq!(
                got,
                (0..SAMPLES_PER_WRITER).collect::<Vec<_>>(),
                "seed {seed}: every sample once, in order"
            );
        },
    );
}

/// What `dds_perf --level dare` met over shm and tcp on a loaded machine: two processes
/// whose loops come round every few milliseconds, so that a vote request and its grant
/// took longer than the election time-out. Both members stood again before the other's
/// grant came back, for ever (the terms climbed, no leader, nothing delivered). Modelled
/// here by one-sided writes between the participants taking [`SLOW_WRITE_US`] each way
/// from before the reader's declaration (the view that puts both on the dare subgroup).
/// With the election time-out doubling after each election without a leader
/// (`DARE_ELECTION_BACKOFF_SHIFT_MAX`), a leader is elected and every sample arrives.
#[test]
fn a_dare_topic_elects_when_a_round_trip_outlasts_the_election_time_out() {
    for_seeds(
        "a_dare_topic_elects_when_a_round_trip_outlasts_the_election_time_out",
        |seed| {
            let d = SimDomain::new(seed);
            let dare = |id| dare_participant(&d, id, None);
            let p1 = dare(1);
            let t = p1.create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let w = writer(&p1, &t);
            let p2 = dare(2);
            for (from, to) in [(1, 2), (2, 1)] {
                d.world().add_rule(Rule {
                    from: Some(from),
                    to: Some(to),
                    kind: Some(DeliveryKind::Write),
                    regions: None,
                    after_us: 0,
                    until_us: u64::MAX,
                    verdict: Verdict::Delay(SLOW_WRITE_US),
                });
            }
            let t2 = p2.create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let r = p2
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&t2, keep_all(&atomic()))
                .unwrap();
            w.wait_for_readers(1, Duration::from_secs(60)).unwrap();
            for i in 0..SAMPLES_PER_WRITER {
                w.write(&Sequence {
                    payload: payload(1, i),
                })
                .unwrap_or_else(|e| panic!("seed {seed}: write {i}: {e}"));
            }
            let mut got = Vec::new();
            let done = d.run_until(ROUNDS_MAX, || {
                for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
                    got.push(parse(&s.data.expect("valid data").payload).1);
                }
                got.len() >= SAMPLES_PER_WRITER as usize
            });
            assert!(
                done,
                "seed {seed}: took {} samples by {} µs (no DARE leader?)",
                got.len(),
                d.now_us()
            );
            assert_eq!(
                got,
                (0..SAMPLES_PER_WRITER).collect::<Vec<_>>(),
                "seed {seed}: every sample once, in order"
            );
        },
    );
}

/// The id range of the log regions of a layout's first dare subgroup (ordinal 0): every
/// term of it.
fn first_dare_log_regions() -> std::ops::RangeInclusive<RegionId> {
    DARE_LOG_REGION_BASE..=DARE_LOG_REGION_BASE + DARE_TERM_MAX as RegionId
}

/// The dare subgroups of `p`'s current layout, in layout order (a subgroup's place here
/// is its ordinal, which keys its log region ids).
fn dare_subgroups(p: &DomainParticipant) -> Vec<SubgroupId> {
    p.view()
        .map(|v| dds_subgroups(&v))
        .unwrap_or_default()
        .into_iter()
        .filter(|s| matches!(s.spec.mode, DeliveryMode::Dare(_)))
        .map(|s| s.spec.id)
        .collect()
}

/// Takes everything `r` holds as `(view id, order index, writer tag, index)`, checking
/// each payload against [`payload`].
fn take_checked(seed: u64, what: &str, r: &DataReader<Sequence>) -> Vec<(u32, u64, u32, u64)> {
    let mut got = Vec::new();
    for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
        let data = s.data.expect("valid data");
        let (w, i) = parse(&data.payload);
        assert_eq!(
            data.payload,
            payload(w, i),
            "seed {seed}: {what}: sample {i} of {w} is not what was written"
        );
        got.push((s.info.view_id, s.info.order_index, w, i));
    }
    got
}

/// Takes everything `r` holds into `got` as `(writer tag, index)` ([`take_checked`]).
fn take_into(seed: u64, what: &str, r: &DataReader<Sequence>, got: &mut Vec<(u32, u64)>) {
    got.extend(
        take_checked(seed, what, r)
            .into_iter()
            .map(|(_, _, w, i)| (w, i)),
    );
}

/// The regression test of one group-wide first term for every dare instance (commit
/// 23c06c8). Log region ids are `DARE_LOG_REGION_BASE + ordinal × 2^24 + term`, the
/// ordinal being a dare subgroup's place among the layout's dare subgroups. Topic X's
/// subgroup turns dare first (ordinal 0) and elects; the one-sided writes into ordinal
/// 0's log regions issued in a short window (X's leader replicating [`X_LATE`] samples)
/// are held back [`LATE_WRITE_US`] outside their links' order (the sim's `Lag`). Then a
/// writer of topic Y, whose subgroup comes before X's, declares: Y's subgroup turns dare
/// and takes ordinal 0, X's moves to 1, and X's instance ends with the view. The held
/// writes land after Y's instance elected. With a first term kept per subgroup, Y's
/// started at 0 and its first leader's term was X's: the held writes landed in Y's log
/// at a follower (X's entries, `tail` and `commit` under Y's region id of that term).
/// With one first term past every term reported, Y's ids are new and the writes find no
/// region. Every reader must take exactly its topic's samples, each once, in order.
#[test]
fn a_late_write_of_an_ended_dare_instance_never_lands_in_another_topics_log() {
    for_seeds(
        "a_late_write_of_an_ended_dare_instance_never_lands_in_another_topics_log",
        |seed| {
            // Two topics, Y's subgroup before X's in the layout.
            let x_name = "late-writes-x";
            let sx = subgroup_of(x_name, TOPIC_SUBGROUPS_DEFAULT);
            let y_name = (0..1000)
                .map(|k| format!("late-writes-y{k}"))
                .find(|n| subgroup_of(n, TOPIC_SUBGROUPS_DEFAULT) < sx)
                .expect("a topic name whose subgroup comes before X's");
            let sy = subgroup_of(&y_name, TOPIC_SUBGROUPS_DEFAULT);
            let d = SimDomain::new(seed);
            let ps: Vec<DomainParticipant> =
                (1..=3).map(|id| dare_participant(&d, id, None)).collect();
            // Every participant reads both topics (readers alone put no subgroup in the
            // layout: it needs a writer).
            let topics: Vec<_> = ps
                .iter()
                .map(|p| {
                    let x = p.create_topic::<Sequence>(x_name, atomic()).unwrap();
                    let y = p.create_topic::<Sequence>(&y_name, atomic()).unwrap();
                    (x, y)
                })
                .collect();
            let readers: Vec<_> = ps
                .iter()
                .zip(&topics)
                .map(|(p, (x, y))| {
                    let s = p.create_subscriber(Default::default()).unwrap();
                    let rx = s.create_datareader(x, keep_all(&atomic())).unwrap();
                    let ry = s.create_datareader(y, keep_all(&atomic())).unwrap();
                    (rx, ry)
                })
                .collect();
            let declared_everywhere = |sg: SubgroupId| {
                ps.iter().all(|p| {
                    p.view().is_some_and(|v| {
                        let decl = declarations(&v);
                        (1..=3).all(|n| decl.get(&n).is_some_and(|d| d.contains_key(&sg)))
                    })
                })
            };
            assert!(
                d.run_until(ROUNDS_MAX, || declared_everywhere(sx)
                    && declared_everywhere(sy)),
                "seed {seed}: the readers' declarations never reached every view"
            );
            // X turns dare (the first and only dare subgroup): one instance, which elects.
            let wx = writer(&ps[0], &topics[0].0);
            wx.wait_for_readers(3, Duration::from_secs(60)).unwrap();
            assert!(
                d.run_until(ROUNDS_MAX, || ps.iter().all(|p| dare_subgroups(p) == [sx])),
                "seed {seed}: X's subgroup {sx} is not the one dare subgroup: {:?}",
                ps.iter().map(dare_subgroups).collect::<Vec<_>>()
            );
            let x_tag = 1;
            let y_tag = 2;
            let write = |w: &DataWriter<Sequence>, tag: u32, i: u64| {
                w.write(&Sequence {
                    payload: payload(tag, i),
                })
                .unwrap_or_else(|e| panic!("seed {seed}: write {i} of topic {tag}: {e}"));
            };
            let mut got_x: Vec<Vec<(u32, u64)>> = vec![Vec::new(); 3];
            let mut got_y: Vec<Vec<(u32, u64)>> = vec![Vec::new(); 3];
            let take_all = |got_x: &mut Vec<Vec<(u32, u64)>>, got_y: &mut Vec<Vec<(u32, u64)>>| {
                for (n, (rx, ry)) in readers.iter().enumerate() {
                    take_into(seed, &format!("X reader {}", n + 1), rx, &mut got_x[n]);
                    take_into(seed, &format!("Y reader {}", n + 1), ry, &mut got_y[n]);
                }
            };
            for i in 0..X_BEFORE {
                write(&wx, x_tag, i);
            }
            assert!(
                d.run_until(ROUNDS_MAX, || {
                    take_all(&mut got_x, &mut got_y);
                    got_x.iter().all(|g| g.len() as u64 >= X_BEFORE)
                }),
                "seed {seed}: X's first samples were not delivered (no leader?): {got_x:?}"
            );
            // X's leader replicates the next samples in the window; those writes land
            // long after it.
            let t = d.now_us();
            d.world().add_rule(Rule {
                from: None,
                to: None,
                kind: Some(DeliveryKind::Write),
                regions: Some(first_dare_log_regions()),
                after_us: t,
                until_us: t + LATE_WINDOW_US,
                verdict: Verdict::Lag(LATE_WRITE_US),
            });
            for i in X_BEFORE..X_BEFORE + X_LATE {
                write(&wx, x_tag, i);
            }
            d.run_for(LATE_WINDOW_US);
            // Y turns dare and takes ordinal 0 from X.
            let wy = writer(&ps[1], &topics[1].1);
            wy.wait_for_readers(3, Duration::from_secs(60)).unwrap();
            assert!(
                d.run_until(ROUNDS_MAX, || ps
                    .iter()
                    .all(|p| dare_subgroups(p) == [sy, sx])),
                "seed {seed}: Y's subgroup {sy} did not take ordinal 0 from X's {sx}: {:?}",
                ps.iter().map(dare_subgroups).collect::<Vec<_>>()
            );
            assert!(
                d.now_us() < t + LATE_WRITE_US,
                "seed {seed}: the view change outlasted the late writes ({} µs after them)",
                d.now_us() - t
            );
            // A few of Y's samples before the late writes land, the rest after.
            for i in 0..Y_EARLY {
                write(&wy, y_tag, i);
            }
            d.run_for((t + LATE_WRITE_US + LATE_WINDOW_US).saturating_sub(d.now_us()));
            for i in Y_EARLY..Y_SAMPLES {
                write(&wy, y_tag, i);
            }
            let x_all = X_BEFORE + X_LATE;
            let done = d.run_until(ROUNDS_MAX, || {
                take_all(&mut got_x, &mut got_y);
                got_x.iter().all(|g| g.len() as u64 >= x_all)
                    && got_y.iter().all(|g| g.len() as u64 >= Y_SAMPLES)
            });
            // Anything delivered twice arrives by now.
            d.run_for(LATE_WRITE_US);
            take_all(&mut got_x, &mut got_y);
            for n in 0..3 {
                let want_x: Vec<(u32, u64)> = (0..x_all).map(|i| (x_tag, i)).collect();
                let want_y: Vec<(u32, u64)> = (0..Y_SAMPLES).map(|i| (y_tag, i)).collect();
                assert_eq!(
                    got_x[n],
                    want_x,
                    "seed {seed}: X reader {}: X's samples, each once, in order, and nothing \
                     else (all delivered in time: {done})",
                    n + 1
                );
                assert_eq!(
                    got_y[n],
                    want_y,
                    "seed {seed}: Y reader {}: Y's samples, each once, in order, and nothing \
                     else (all delivered in time: {done})",
                    n + 1
                );
            }
        },
    );
}
