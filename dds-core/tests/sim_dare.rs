//! DCPS topics ordered by DARE in deterministic simulation: participants configured with
//! `atomic_ordering = "dare"` put their Atomic (RELIABLE + VOLATILE) topics on a subgroup
//! of `DeliveryMode::Dare` — a leader per term orders every writer's samples — with the
//! same API as the round-robin order. Three participants write and read one topic; the
//! DARE leader's participant crashes mid-stream; the survivors' readers hold one
//! sequence, every survivor's samples once and in its order, and the crashed writer's a
//! prefix of what it wrote. A failure prints its seed and the command that reruns it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_dare <test>`).

mod common;
use common::{atomic, keep_all};

use std::time::Duration;

use spindle_dds_core::declare::{dds_subgroups, subgroup_of, TOPIC_SUBGROUPS_DEFAULT};
use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{AtomicOrdering, DataReader, DataWriter, DomainParticipant, StateMask};
use spindle_group::DeliveryMode;
use spindle_qos::{DataWriterQos, DomainParticipantQos};
use spindle_topics::Sequence;
use spindle_transport_rdma::sim::{DeliveryKind, Rule, Verdict};

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

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds_in(SEEDS, "sim_dare", name, test)
}

fn endpoints(p: &DomainParticipant) -> (DataReader<Sequence>, DataWriter<Sequence>) {
    let t = p.create_topic::<Sequence>(TOPIC, atomic()).unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, keep_all(&atomic()))
        .unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::from_topic_qos(&atomic()))
        .unwrap();
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
            let ps: Vec<DomainParticipant> = (1..=3)
                .map(|id| {
                    d.participant_with(id, DomainParticipantQos::default(), |c| {
                        c.atomic_ordering = AtomicOrdering::Dare;
                    })
                    .expect("participant")
                })
                .collect();
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
                    for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
                        let data = s.data.expect("valid data");
                        let (w, i) = parse(&data.payload);
                        assert_eq!(
                            data.payload,
                            payload(w, i),
                            "seed {seed}: reader {}: sample {i} of {w}",
                            n + 2
                        );
                        got[n].push((s.info.view_id, s.info.order_index, w, i));
                    }
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

/// The shape of `dds_perf --level dare`: one participant only writes the topic, another
/// only reads it (the writer is handed sample headers only), the subgroup appearing in
/// the view that declares them. Every sample arrives once, in the writer's order.
#[test]
fn a_writer_only_and_a_reader_only_participant_on_a_dare_topic() {
    for_seeds(
        "a_writer_only_and_a_reader_only_participant_on_a_dare_topic",
        |seed| {
            let d = SimDomain::new(seed);
            let dare = |id| {
                d.participant_with(id, DomainParticipantQos::default(), |c| {
                    c.atomic_ordering = AtomicOrdering::Dare;
                })
                .expect("participant")
            };
            // The reader's participant joins the domain after the writer exists: it joins
            // a view whose dare subgroup already runs.
            let mut ps: Vec<DomainParticipant> = vec![dare(1)];
            let t = ps[0].create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let w = ps[0]
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&t, DataWriterQos::from_topic_qos(&atomic()))
                .unwrap();
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
            let dare = |id| {
                d.participant_with(id, DomainParticipantQos::default(), |c| {
                    c.atomic_ordering = AtomicOrdering::Dare;
                })
                .expect("participant")
            };
            let p1 = dare(1);
            let t = p1.create_topic::<Sequence>(TOPIC, atomic()).unwrap();
            let w = p1
                .create_publisher(Default::default())
                .unwrap()
                .create_datawriter(&t, DataWriterQos::from_topic_qos(&atomic()))
                .unwrap();
            let p2 = dare(2);
            for (from, to) in [(1, 2), (2, 1)] {
                d.world().add_rule(Rule {
                    from: Some(from),
                    to: Some(to),
                    kind: Some(DeliveryKind::Write),
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
