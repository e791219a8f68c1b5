//! Large samples in deterministic simulation: with `sample_bytes_max` set, a sample above
//! the slot is written by RDMC with the same API and delivered in the one total order of
//! its topic's subgroup, among the small samples of the same topic, intact, to every
//! reader. Each test runs several seeds; a failure prints its seed and the command that
//! reproduces it (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test
//! sim_large <test>`).

mod common;
use common::{atomic, keep_all};

use std::time::Duration;

use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{DataReader, DataWriter, DomainParticipant, Error, StateMask};
use spindle_qos::{DataWriterQos, DomainParticipantQos};
use spindle_topics::Sequence;

/// Seeds each test runs (override with `SPINDLE_SIM_SEED`).
const SEEDS: std::ops::RangeInclusive<u64> = 1..=3;
/// Rounds a test waits for something before it fails.
const ROUNDS_MAX: u64 = 400_000;
/// The participants' `sample_bytes_max`.
const SAMPLE_BYTES_MAX: usize = 2 << 20;
/// Samples each writer writes.
const SAMPLES_PER_WRITER: u64 = 9;

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds_in(SEEDS, "sim_large", name, test)
}

fn domain(seed: u64, n: u32, sample_bytes_max: usize) -> (SimDomain, Vec<DomainParticipant>) {
    domain_with_windows(seed, n, sample_bytes_max, &[])
}

/// As [`domain`], participant `id` with `large_window_messages` = `windows[id - 1]` (the
/// default past the slice's end).
fn domain_with_windows(
    seed: u64,
    n: u32,
    sample_bytes_max: usize,
    windows: &[usize],
) -> (SimDomain, Vec<DomainParticipant>) {
    let d = SimDomain::new(seed);
    let ps = (1..=n)
        .map(|id| {
            d.participant_with(id, DomainParticipantQos::default(), |c| {
                c.sample_bytes_max = sample_bytes_max;
                if let Some(w) = windows.get(id as usize - 1) {
                    c.large_window_messages = *w;
                }
            })
            .expect("participant")
        })
        .collect();
    (d, ps)
}

/// A payload of `len` bytes naming its writer and index, the rest a pattern of them.
fn payload(writer: u32, i: u64, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&writer.to_le_bytes());
    p.extend_from_slice(&i.to_le_bytes());
    let mut x = (u64::from(writer) << 32) ^ i;
    while p.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        p.push((x >> 56) as u8);
    }
    p
}

fn parse(p: &[u8]) -> (u32, u64) {
    let w = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
    let i = u64::from_le_bytes(p[4..12].try_into().expect("8 bytes"));
    (w, i)
}

/// Sizes of writer `w`'s samples: small ones (100 B) and large ones (64 KiB … 1.9 MiB)
/// interleaved.
fn size(seed: u64, w: u32, i: u64) -> usize {
    if (i + u64::from(w) + seed) % 3 == 0 {
        100
    } else {
        (64 << 10) + ((i * 211_000 + seed * 7_919) as usize % (SAMPLE_BYTES_MAX - (128 << 10)))
    }
}

/// What a reader got: (view, order index, writer, index, bytes).
type Got = (u32, u64, u32, u64, usize);

fn endpoints(p: &DomainParticipant, topic: &str) -> (DataReader<Sequence>, DataWriter<Sequence>) {
    let t = p.create_topic::<Sequence>(topic, atomic()).unwrap();
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

#[test]
fn large_and_small_samples_of_a_topic_arrive_in_one_order_intact() {
    for_seeds(
        "large_and_small_samples_of_a_topic_arrive_in_one_order_intact",
        |seed| large_and_small_in_one_order(seed, &[]),
    );
}

/// The same with writers whose participants let two and three large samples be in flight
/// (`large_window_messages`): the subgroup's RDMC window is three buffers, consecutive
/// samples overlap, and every one still arrives intact in one order.
#[test]
fn large_samples_in_flight_two_and_three_at_a_time_arrive_in_one_order_intact() {
    for_seeds(
        "large_samples_in_flight_two_and_three_at_a_time_arrive_in_one_order_intact",
        |seed| large_and_small_in_one_order(seed, &[2, 3]),
    );
}

/// Writers 1 and 2 write large and small samples of one topic, 3 only reads: every reader
/// gets every sample intact, once, in one order.
fn large_and_small_in_one_order(seed: u64, windows: &[usize]) {
    let (d, ps) = domain_with_windows(seed, 3, SAMPLE_BYTES_MAX, windows);
    let eps: Vec<_> = ps.iter().map(|p| endpoints(p, "terrain-tiles")).collect();
    for (_, w) in &eps {
        w.wait_for_readers(3, Duration::from_secs(60)).unwrap();
    }
    // Writers 1 and 2 write; 3 only reads.
    for i in 0..SAMPLES_PER_WRITER {
        for (k, (_, w)) in eps.iter().take(2).enumerate() {
            let wid = k as u32 + 1;
            let data = Sequence {
                payload: payload(wid, i, size(seed, wid, i)),
            };
            w.write(&data)
                .unwrap_or_else(|e| panic!("seed {seed}: write: {e}"));
        }
    }
    let want = 2 * SAMPLES_PER_WRITER as usize;
    let mut got: Vec<Vec<Got>> = vec![Vec::new(); 3];
    let done = d.run_until(ROUNDS_MAX, || {
        for (n, (r, _)) in eps.iter().enumerate() {
            for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
                let data = s.data.expect("valid data");
                let (w, i) = parse(&data.payload);
                assert_eq!(
                    data.payload,
                    payload(w, i, size(seed, w, i)),
                    "seed {seed}: reader {n}: sample {i} of writer {w} corrupted"
                );
                got[n].push((s.info.view_id, s.info.order_index, w, i, data.payload.len()));
            }
        }
        got.iter().all(|g| g.len() >= want)
    });
    assert!(
        done,
        "seed {seed}: readers got {:?} of {want}",
        got.iter().map(Vec::len).collect::<Vec<_>>()
    );
    for g in &got {
        assert_eq!(g.len(), want, "seed {seed}: no duplicates");
        assert_eq!(g, &got[0], "seed {seed}: every reader, one order");
        for w in 1..=2 {
            let seq: Vec<u64> = g.iter().filter(|s| s.2 == w).map(|s| s.3).collect();
            assert_eq!(
                seq,
                (0..SAMPLES_PER_WRITER).collect::<Vec<_>>(),
                "seed {seed}: writer {w}'s order"
            );
        }
    }
    let large = got[0].iter().filter(|s| s.4 > 64 << 10).count();
    assert!(large >= 8, "seed {seed}: only {large} large samples");
    assert!(
        got[0].iter().any(|s| s.4 == 100),
        "seed {seed}: small samples too"
    );
}

/// Readers that read large samples and keep them (read, not taken) in both the writer's
/// participant and another, at one large sample in flight per writer (the default
/// window): each delivered large sample is read in place in its RDMC buffer, which its
/// reader's cache holds; the writer's next large sample needs that buffer, the engine
/// asks for it back, and the caches copy what they keep. So every write goes through
/// (none waits out `max_blocking_time`), and the kept samples are intact when taken at
/// the end, in order.
#[test]
fn readers_that_keep_large_samples_do_not_hold_their_writer() {
    const SAMPLES: u64 = 5;
    const BIG: usize = 1 << 20;
    for_seeds(
        "readers_that_keep_large_samples_do_not_hold_their_writer",
        |seed| {
            let (d, ps) = domain(seed, 2, 2 * BIG);
            let eps: Vec<_> = ps.iter().map(|p| endpoints(p, "camera-frames")).collect();
            eps[0]
                .1
                .wait_for_readers(2, Duration::from_secs(60))
                .unwrap();
            for i in 0..SAMPLES {
                let data = Sequence {
                    payload: payload(1, i, BIG - i as usize),
                };
                eps[0]
                    .1
                    .write(&data)
                    .unwrap_or_else(|e| panic!("seed {seed}: write of sample {i}: {e}"));
                // Each reader reads the sample and keeps it.
                let mut read = [false; 2];
                let done = d.run_until(ROUNDS_MAX, || {
                    for (n, (r, _)) in eps.iter().enumerate() {
                        read[n] |= !r.read(usize::MAX, StateMask::NOT_READ).unwrap().is_empty();
                    }
                    read.iter().all(|x| *x)
                });
                assert!(done, "seed {seed}: sample {i} read by {read:?}");
            }
            for (n, (r, _)) in eps.iter().enumerate() {
                let got: Vec<(u64, usize)> = r
                    .take(usize::MAX, StateMask::ANY)
                    .unwrap()
                    .into_iter()
                    .map(|s| {
                        let data = s.data.expect("valid data");
                        let (w, i) = parse(&data.payload);
                        assert!(
                            w == 1 && data.payload == payload(1, i, BIG - i as usize),
                            "seed {seed}: reader {n}: sample {i} corrupted"
                        );
                        (i, data.payload.len())
                    })
                    .collect();
                assert_eq!(
                    got.iter().map(|g| g.0).collect::<Vec<_>>(),
                    (0..SAMPLES).collect::<Vec<_>>(),
                    "seed {seed}: reader {n} keeps every sample, in order"
                );
            }
        },
    );
}

/// Samples of 4 MiB written through `loan_sample` (the application fills the loaned
/// value; it goes by RDMC in the topic's order) and read through `take_loaned`, among
/// small loaned ones: every reader gets every sample intact, in one order.
#[test]
fn four_mib_samples_written_and_read_through_loans_arrive_intact_in_one_order() {
    const LOANED: u64 = 5;
    const BIG: usize = 4 << 20;
    let len = |i: u64| if i % 2 == 0 { BIG } else { 100 };
    for_seeds(
        "four_mib_samples_written_and_read_through_loans_arrive_intact_in_one_order",
        |seed| {
            let (d, ps) = domain(seed, 2, 2 * BIG);
            let eps: Vec<_> = ps.iter().map(|p| endpoints(p, "software-images")).collect();
            eps[0]
                .1
                .wait_for_readers(2, Duration::from_secs(60))
                .unwrap();
            for i in 0..LOANED {
                let mut loan = eps[0]
                    .1
                    .loan_sample()
                    .unwrap_or_else(|e| panic!("seed {seed}: loan_sample: {e}"));
                loan.payload = payload(1, i, len(i));
                loan.write()
                    .unwrap_or_else(|e| panic!("seed {seed}: loaned write of sample {i}: {e}"));
            }
            let mut got: Vec<Vec<(u64, u64)>> = vec![Vec::new(); 2];
            let done = d.run_until(ROUNDS_MAX, || {
                for (n, (r, _)) in eps.iter().enumerate() {
                    let loaned = r.take_loaned(usize::MAX, StateMask::ANY).unwrap();
                    for s in loaned.iter() {
                        let data = s.data().unwrap().expect("valid data");
                        let (w, i) = parse(&data.payload);
                        assert_eq!(
                            (w, data.payload.len()),
                            (1, len(i)),
                            "seed {seed}: reader {n}: sample {i}'s writer and size"
                        );
                        assert!(
                            data.payload == payload(1, i, len(i)),
                            "seed {seed}: reader {n}: sample {i} corrupted"
                        );
                        got[n].push((s.info.order_index, i));
                    }
                }
                got.iter().all(|g| g.len() >= LOANED as usize)
            });
            assert!(
                done,
                "seed {seed}: readers got {:?} of {LOANED}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for g in &got {
                assert_eq!(
                    g.iter().map(|s| s.1).collect::<Vec<_>>(),
                    (0..LOANED).collect::<Vec<_>>(),
                    "seed {seed}: each sample once, in the writer's order"
                );
                assert_eq!(g, &got[0], "seed {seed}: every reader, one order");
            }
        },
    );
}

#[test]
fn a_sample_above_the_limit_is_out_of_resources_naming_the_setting() {
    for_seeds(
        "a_sample_above_the_limit_is_out_of_resources_naming_the_setting",
        |seed| {
            let (_d, ps) = domain(seed, 1, SAMPLE_BYTES_MAX);
            let (_, w) = endpoints(&ps[0], "big");
            let too_big = Sequence {
                payload: vec![1; SAMPLE_BYTES_MAX],
            };
            match w.write(&too_big) {
                Err(Error::OutOfResources(m)) => {
                    assert!(m.contains("sample_bytes_max = 2097152"), "{m}")
                }
                other => panic!("seed {seed}: {other:?}"),
            }
            // The writer still writes what fits.
            w.write(&Sequence {
                payload: vec![2; 1 << 20],
            })
            .unwrap();
            // Without the setting, a sample above the slot is refused the same way.
            let (_d, ps) = domain(seed, 1, 0);
            let (_, w) = endpoints(&ps[0], "big");
            match w.write(&Sequence {
                payload: vec![3; 10_000],
            }) {
                Err(Error::OutOfResources(m)) => {
                    assert!(m.contains("sample_bytes_max = 0"), "{m}")
                }
                other => panic!("seed {seed}: {other:?}"),
            }
        },
    );
}

/// Large samples are on by default, up to 256 MiB: participants left at their defaults
/// exchange a sample above the slot (and above the 16 MiB an RDMC buffer keeps resident)
/// intact, and a sample above 256 MiB gets `OutOfResources` naming `sample_bytes_max`
/// and its value (the encoding is measured first: the 256 MiB payload is never copied).
#[test]
fn by_default_large_samples_go_up_to_256_mib_and_a_larger_one_names_the_limit() {
    use spindle_dds_core::config::SAMPLE_BYTES_MAX_DEFAULT;
    assert_eq!(SAMPLE_BYTES_MAX_DEFAULT, 256 << 20);
    for_seeds(
        "by_default_large_samples_go_up_to_256_mib_and_a_larger_one_names_the_limit",
        |seed| {
            let d = SimDomain::new(seed);
            let ps: Vec<DomainParticipant> = (1..=2)
                .map(|id| d.participant(id).expect("participant"))
                .collect();
            let eps: Vec<_> = ps.iter().map(|p| endpoints(p, "images")).collect();
            for (_, w) in &eps {
                w.wait_for_readers(2, Duration::from_secs(60)).unwrap();
            }
            let big = payload(1, 0, (17 << 20) + 5);
            eps[0]
                .1
                .write(&Sequence {
                    payload: big.clone(),
                })
                .unwrap_or_else(|e| panic!("seed {seed}: write: {e}"));
            let mut got = None;
            let done = d.run_until(ROUNDS_MAX, || {
                if let Some(s) = eps[1].0.take(1, StateMask::ANY).unwrap().pop() {
                    got = s.data.map(|d| d.payload);
                }
                got.is_some()
            });
            assert!(done, "seed {seed}: the large sample did not arrive");
            assert!(got.as_ref() == Some(&big), "seed {seed}: intact");
            // Zeroed (calloc'd) and never copied: only its length is encoded.
            let too_big = Sequence {
                payload: vec![0; SAMPLE_BYTES_MAX_DEFAULT],
            };
            match eps[0].1.write(&too_big) {
                Err(Error::OutOfResources(m)) => assert!(
                    m.contains("sample_bytes_max = 268435456"),
                    "seed {seed}: {m}"
                ),
                other => panic!("seed {seed}: {other:?}"),
            }
        },
    );
}

/// A member crashes while a writer's large sample is in flight to it and the writer's
/// RDMC window (one message) is full: the writer's next large sample waits through the
/// view change and goes in the next view (the stopped view's sender says it is wedged,
/// not that its window is full for ever), and both survivors take every sample of the
/// writer once, in its order, in one sequence.
#[test]
fn a_writer_with_a_large_sample_in_flight_to_a_crashed_member_writes_on_in_the_next_view() {
    for_seeds(
        "a_writer_with_a_large_sample_in_flight_to_a_crashed_member_writes_on_in_the_next_view",
        |seed| {
            let (d, ps) = domain(seed, 3, SAMPLE_BYTES_MAX);
            let eps: Vec<_> = ps.iter().map(|p| endpoints(p, "terrain-tiles")).collect();
            for (_, w) in &eps {
                w.wait_for_readers(3, Duration::from_secs(60)).unwrap();
            }
            let w = &eps[0].1;
            let len = |i: u64| (1 << 20) + i as usize * 1000;
            let write = |i: u64| {
                w.write(&Sequence {
                    payload: payload(1, i, len(i)),
                })
                .unwrap_or_else(|e| panic!("seed {seed}: write {i}: {e}"))
            };
            write(0);
            // Sample 0 is handed to RDMC and no round ran since: it is in flight to 3.
            d.crash(3);
            let vid = ps[0].view().expect("a view").vid;
            for i in 1..SAMPLES_PER_WRITER {
                write(i);
            }
            assert!(
                ps[0].view().expect("a view").vid > vid,
                "seed {seed}: the writer went on in a later view"
            );
            let want = SAMPLES_PER_WRITER as usize;
            let mut got: Vec<Vec<Got>> = vec![Vec::new(); 2];
            let done = d.run_until(ROUNDS_MAX, || {
                for (n, (r, _)) in eps.iter().take(2).enumerate() {
                    for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
                        let data = s.data.expect("valid data");
                        let (wid, i) = parse(&data.payload);
                        assert_eq!(
                            data.payload,
                            payload(wid, i, len(i)),
                            "seed {seed}: reader {n}: sample {i} corrupted"
                        );
                        got[n].push((
                            s.info.view_id,
                            s.info.order_index,
                            wid,
                            i,
                            data.payload.len(),
                        ));
                    }
                }
                got.iter().all(|g| g.len() >= want)
            });
            assert!(
                done,
                "seed {seed}: survivors took {:?} of {want}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            assert_eq!(got[0], got[1], "seed {seed}: both survivors, one sequence");
            let order: Vec<u64> = got[0].iter().map(|s| s.3).collect();
            assert_eq!(
                order,
                (0..SAMPLES_PER_WRITER).collect::<Vec<_>>(),
                "seed {seed}: every sample once, in the writer's order"
            );
        },
    );
}
