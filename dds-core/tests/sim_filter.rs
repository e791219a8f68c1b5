//! ContentFilteredTopic and QueryCondition in deterministic simulation: a filtered reader
//! sees exactly the subset of an unfiltered reader's samples that passes its expression,
//! in the same total order; parameter changes take effect; a QueryCondition wakes a
//! WaitSet only for matching samples and `take_w_condition` takes only those. A failure
//! prints its seed and the command that reproduces it
//! (`SPINDLE_SIM_SEED=<seed> cargo test -p spindle-dds-core --test sim_filter <test>`).

mod common;
use common::sim::{domain, ROUNDS_MAX};
use common::{atomic, keep_all, ks};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spindle_dds_core::sim::SimDomain;
use spindle_dds_core::{
    Condition, DataReader, DataWriter, DomainParticipant, Error, Sample, StateMask, Topic,
    TopicDescription, WaitSet,
};
use spindle_qos::{DataWriterQos, Presentation, PresentationAccessScope, PublisherQos};
use spindle_topics::avionics::{FlightPhase, GeoPoint, NavigationPosition};
use spindle_topics::KeyedString;

fn for_seeds(name: &str, test: impl Fn(u64)) {
    common::sim::for_seeds("sim_filter", name, test);
}

type Nav = NavigationPosition;

const PHASES: [FlightPhase; 4] = [
    FlightPhase::Taxi,
    FlightPhase::Climb,
    FlightPhase::Cruise,
    FlightPhase::Descent,
];

/// A seeded random position report of aircraft `id`.
fn nav(rng: &mut ChaCha8Rng, id: u32, n: u64) -> Nav {
    Nav {
        aircraft_id: id,
        timestamp_ns: n,
        position: GeoPoint {
            latitude_deg: rng.gen_range(-90.0..90.0),
            longitude_deg: rng.gen_range(-180.0..180.0),
            altitude_m: rng.gen_range(0.0..12_000.0),
        },
        velocity_ned_mps: [0.0; 3],
        horizontal_accuracy_m: 5.0,
        gnss_valid: rng.gen_bool(0.8),
        phase: PHASES[rng.gen_range(0..PHASES.len())],
    }
}

fn nav_topic(p: &DomainParticipant) -> Topic<Nav> {
    p.create_topic::<Nav>("nav", atomic()).unwrap()
}

fn nav_reader<D: TopicDescription<Sample = Nav>>(p: &DomainParticipant, d: &D) -> DataReader<Nav> {
    p.create_subscriber(Default::default())
        .unwrap()
        .create_datareader(d, keep_all(&atomic()))
        .unwrap()
}

fn nav_writer(p: &DomainParticipant) -> DataWriter<Nav> {
    p.create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&nav_topic(p), DataWriterQos::default())
        .unwrap()
}

/// Runs the domain until `r` gave `n` samples; what it gave.
fn take_n<T: spindle_topics::TopicType>(
    d: &SimDomain,
    r: &DataReader<T>,
    n: usize,
) -> Vec<Sample<T>> {
    let mut got = Vec::new();
    d.run_until(ROUNDS_MAX, || {
        got.extend(r.take(usize::MAX, StateMask::ANY).unwrap());
        got.len() >= n
    });
    got
}

/// `(view, order index, timestamp)`: each sample's place in the total order and which.
fn places(s: &[Sample<Nav>]) -> Vec<(u32, u64, u32, u64)> {
    s.iter()
        .map(|s| {
            let d = s.data.as_ref().expect("data");
            (
                s.info.view_id,
                s.info.order_index,
                d.aircraft_id,
                d.timestamp_ns,
            )
        })
        .collect()
}

/// The expression the tests use, as Rust.
fn high_cruise(n: &Nav, floor_m: f32) -> bool {
    n.position.altitude_m > floor_m && n.phase == FlightPhase::Cruise && n.gnss_valid
}

/// Two writers on two participants write seeded random reports; a reader on a
/// content-filtered topic (nested member, enum by name, boolean, a parameter) on each of
/// two other participants sees exactly the reports of an unfiltered reader beside it
/// that pass, in the same total order (same view and order index).
#[test]
fn a_filtered_reader_sees_exactly_the_matching_subset_in_the_same_order() {
    for_seeds(
        "a_filtered_reader_sees_exactly_the_matching_subset_in_the_same_order",
        |seed| {
            let (d, ps) = domain(seed, 4);
            let expr = "position.altitude_m > %0 AND phase = 'CRUISE' AND gnss_valid = TRUE";
            let mut pairs = Vec::new();
            for p in &ps[2..] {
                let t = nav_topic(p);
                let cft = p
                    .create_contentfilteredtopic("high-cruise", &t, expr, &["3000".into()])
                    .unwrap();
                pairs.push((nav_reader(p, &t), nav_reader(p, &cft)));
            }
            let writers = [nav_writer(&ps[0]), nav_writer(&ps[1])];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let total = 60;
            for n in 0..total {
                let w = rng.gen_range(0..2usize);
                writers[w].write(&nav(&mut rng, w as u32 + 1, n)).unwrap();
                if n % 7 == 0 {
                    d.run_for(2_000);
                }
            }
            let mut first: Option<Vec<(u32, u64, u32, u64)>> = None;
            for (all, filtered) in &pairs {
                let all = take_n(&d, all, total as usize);
                assert_eq!(all.len(), total as usize, "seed {seed}");
                let expected: Vec<Sample<Nav>> = all
                    .into_iter()
                    .filter(|s| high_cruise(s.data.as_ref().unwrap(), 3000.0))
                    .collect();
                assert!(!expected.is_empty(), "seed {seed}: some reports pass");
                let got = take_n(&d, filtered, expected.len());
                d.run_for(20_000);
                assert!(
                    filtered
                        .take(usize::MAX, StateMask::ANY)
                        .unwrap()
                        .is_empty(),
                    "seed {seed}: nothing more passes"
                );
                assert_eq!(places(&got), places(&expected), "seed {seed}");
                // Every filtered reader sees the same samples in the same order.
                match &first {
                    None => first = Some(places(&got)),
                    Some(f) => assert_eq!(f, &places(&got), "seed {seed}"),
                }
            }
        },
    );
}

/// `set_expression_parameters` takes effect for samples delivered after it, at every
/// reader of the topic; the getters say what is in force; too few parameters is an
/// error that changes nothing.
#[test]
fn changed_expression_parameters_take_effect() {
    for_seeds("changed_expression_parameters_take_effect", |seed| {
        let (d, ps) = domain(seed, 2);
        let t = ps[1].create_topic::<KeyedString>("K", atomic()).unwrap();
        let cft = ps[1]
            .create_contentfilteredtopic(
                "K-of",
                &t,
                "key = %0 OR value LIKE %1",
                &["'a'".into(), "'x%'".into()],
            )
            .unwrap();
        let r = ps[1]
            .create_subscriber(Default::default())
            .unwrap()
            .create_datareader(&cft, keep_all(&atomic()))
            .unwrap();
        let w = ps[0]
            .create_publisher(Default::default())
            .unwrap()
            .create_datawriter(
                &ps[0].create_topic::<KeyedString>("K", atomic()).unwrap(),
                DataWriterQos::default(),
            )
            .unwrap();
        let batch = |tag: &str| {
            for k in ["a", "b", "c"] {
                w.write(&ks(k, format!("{tag}-{k}"))).unwrap();
            }
            w.write(&ks("c", format!("x{tag}"))).unwrap();
        };
        let vals = |s: Vec<Sample<KeyedString>>| -> Vec<String> {
            s.into_iter().map(|s| s.data.unwrap().value).collect()
        };
        batch("1");
        assert_eq!(vals(take_n(&d, &r, 2)), ["1-a", "x1"], "seed {seed}");
        assert!(matches!(
            cft.set_expression_parameters(&["'b'".into()]),
            Err(Error::BadParameter(_))
        ));
        assert_eq!(cft.get_expression_parameters(), ["'a'", "'x%'"]);
        cft.set_expression_parameters(&["'b'".into(), "'none'".into()])
            .unwrap();
        assert_eq!(cft.get_expression_parameters(), ["'b'", "'none'"]);
        assert_eq!(cft.get_filter_expression(), "key = %0 OR value LIKE %1");
        batch("2");
        assert_eq!(vals(take_n(&d, &r, 1)), ["2-b"], "seed {seed}");
        d.run_for(20_000);
        assert!(
            r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
            "seed {seed}: the old parameters no longer pass anything"
        );
    });
}

/// A QueryCondition is true only while a sample in the cache passes it: samples that do
/// not leave it (and a WaitSet on it) untriggered while a plain ReadCondition triggers;
/// a matching one triggers it; `take_w_condition` takes just the matching samples and
/// leaves the others; a parameter change re-targets it; another reader's condition is
/// refused.
#[test]
fn a_query_condition_triggers_a_waitset_only_for_matching_samples() {
    for_seeds(
        "a_query_condition_triggers_a_waitset_only_for_matching_samples",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let t = nav_topic(&ps[1]);
            let r = nav_reader(&ps[1], &t);
            let other = nav_reader(&ps[1], &t);
            let w = nav_writer(&ps[0]);
            let q = r
                .create_querycondition(StateMask::NOT_READ, "phase = %0", &["'CRUISE'".into()])
                .unwrap();
            let any = r.create_readcondition(StateMask::ANY);
            let mut ws = WaitSet::new();
            ws.attach_condition(q.clone());
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut not_cruise = 0;
            for n in 0..10 {
                let mut s = nav(&mut rng, 1, n);
                if s.phase == FlightPhase::Cruise {
                    s.phase = FlightPhase::Taxi;
                }
                w.write(&s).unwrap();
                not_cruise += 1;
            }
            assert!(
                d.run_until(ROUNDS_MAX, || any.trigger_value()),
                "seed {seed}"
            );
            d.run_for(20_000);
            assert!(!q.trigger_value(), "seed {seed}: nothing in cruise yet");
            assert!(matches!(
                ws.wait(std::time::Duration::ZERO),
                Err(Error::Timeout(_))
            ));
            assert!(r.take_w_condition(100, &*q).unwrap().is_empty());
            let mut s = nav(&mut rng, 2, 100);
            s.phase = FlightPhase::Cruise;
            w.write(&s).unwrap();
            assert!(d.run_until(ROUNDS_MAX, || q.trigger_value()), "seed {seed}");
            assert_eq!(ws.wait(std::time::Duration::ZERO).unwrap().len(), 1);
            let got = r.take_w_condition(100, &*q).unwrap();
            assert_eq!(places(&got).len(), 1, "seed {seed}");
            assert_eq!(got[0].data.as_ref().unwrap().phase, FlightPhase::Cruise);
            assert!(!q.trigger_value(), "seed {seed}: taken");
            // The others stayed in the cache; a new parameter selects some of them.
            q.set_query_parameters(&["'TAXI'".into()]).unwrap();
            let taxi = r.read_w_condition(100, &*q).unwrap();
            assert!(!taxi.is_empty(), "seed {seed}");
            assert!(taxi
                .iter()
                .all(|s| s.data.as_ref().unwrap().phase == FlightPhase::Taxi));
            // Read, no longer NOT_READ: the condition does not hold for them any more.
            assert!(!q.trigger_value(), "seed {seed}");
            let rest = r.take(100, StateMask::ANY).unwrap();
            assert_eq!(rest.len(), not_cruise, "seed {seed}");
            assert!(matches!(
                other.take_w_condition(10, &*q),
                Err(Error::PreconditionNotMet(_))
            ));
        },
    );
}

/// A coherent set whose first sample a content filter drops still arrives, as its
/// passing samples, when it ends; one cut by the writer's crash never does.
#[test]
fn coherent_sets_stay_whole_through_a_content_filter() {
    for_seeds(
        "coherent_sets_stay_whole_through_a_content_filter",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let t = ps[1].create_topic::<KeyedString>("C", atomic()).unwrap();
            let cft = ps[1]
                .create_contentfilteredtopic("C-keep", &t, "value LIKE 'keep%'", &[])
                .unwrap();
            let r = ps[1]
                .create_subscriber(Default::default())
                .unwrap()
                .create_datareader(&cft, keep_all(&atomic()))
                .unwrap();
            let publisher = ps[0]
                .create_publisher(PublisherQos {
                    presentation: Presentation {
                        access_scope: PresentationAccessScope::Topic,
                        coherent_access: true,
                        ordered_access: false,
                    },
                    ..Default::default()
                })
                .unwrap();
            let w = publisher
                .create_datawriter(
                    &ps[0].create_topic::<KeyedString>("C", atomic()).unwrap(),
                    DataWriterQos::default(),
                )
                .unwrap();
            publisher.begin_coherent_changes().unwrap();
            for v in ["drop-0", "keep-1", "drop-2", "keep-3"] {
                w.write(&ks("k", v)).unwrap();
            }
            d.run_for(20_000);
            assert!(
                r.take(usize::MAX, StateMask::ANY).unwrap().is_empty(),
                "seed {seed}: held back until the set ends"
            );
            publisher.end_coherent_changes().unwrap();
            let got: Vec<String> = take_n(&d, &r, 2)
                .into_iter()
                .map(|s| s.data.unwrap().value)
                .collect();
            assert_eq!(got, ["keep-1", "keep-3"], "seed {seed}");
        },
    );
}

/// Creation errors: a bad expression names the byte, an unknown member is named (with
/// the members the type has), too few parameters, and a raw CDR topic (no IDL) is
/// Unsupported, as are queries on its readers.
#[test]
fn bad_filters_are_refused_at_creation_with_what_and_where() {
    let (_d, ps) = domain(1, 1);
    let p = &ps[0];
    let t = nav_topic(p);
    let err = |e: Error| e.to_string();
    assert_eq!(
        err(p
            .create_contentfilteredtopic("f", &t, "phase = 'CRUISE' AND", &[])
            .unwrap_err()),
        "bad parameter: filter expression at byte 20: expected a value, found the end"
    );
    assert_eq!(
        err(p
            .create_contentfilteredtopic("f", &t, "gnss_valid AND position.alt_m > 3", &[])
            .unwrap_err()),
        "bad parameter: filter expression at byte 11: expected a comparison (=, <>, <, <=, >, \
         >=, LIKE) or BETWEEN, found AND"
    );
    assert_eq!(
        err(p
            .create_contentfilteredtopic("f", &t, "gnss_valid = TRUE AND position.alt_m > 3", &[])
            .unwrap_err()),
        "bad parameter: filter expression at byte 22: member `position.alt_m`: \
         Avionics::GeoPoint has no member `alt_m` (it has latitude_deg, longitude_deg, \
         altitude_m)"
    );
    assert_eq!(
        err(p
            .create_contentfilteredtopic("f", &t, "phase.x = 1", &[])
            .unwrap_err()),
        "bad parameter: filter expression at byte 0: member `phase.x`: enum \
         Avionics::FlightPhase has no members"
    );
    assert!(matches!(
        p.create_contentfilteredtopic("f", &t, "aircraft_id = %1", &["1".into()]),
        Err(Error::BadParameter(_))
    ));
    let raw = p
        .create_cdr_topic("nav", "Avionics::NavigationPosition", atomic())
        .unwrap();
    let e = p
        .create_contentfilteredtopic("f", &raw, "aircraft_id = 1", &[])
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    let raw_reader = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&raw, keep_all(&atomic()))
        .unwrap();
    assert!(matches!(
        raw_reader.create_querycondition(StateMask::ANY, "aircraft_id = 1", &[]),
        Err(Error::Unsupported(_))
    ));
}

/// A raw CDR topic whose type is known only at run time (`create_cdr_topic_with_type`
/// with a type read from the IDL file by `spindle-dynamic`, as `spindle sub` does) takes
/// content filters and query conditions like a generated type: a raw reader on a
/// content-filtered topic (nested member, enum by number, a parameter) gets exactly the
/// reports of a typed unfiltered reader beside it that pass, in the same order, as their
/// bytes; a raw topic without a type is refused saying how to give it one.
#[test]
fn a_raw_cdr_topic_with_a_run_time_type_is_filtered_and_queried() {
    use spindle_dynamic::DynType;
    use spindle_topics::{CdrSample, TopicType};
    for_seeds(
        "a_raw_cdr_topic_with_a_run_time_type_is_filtered_and_queried",
        |seed| {
            let (d, ps) = domain(seed, 2);
            let idl =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../topics/idl/avionics.idl");
            let ty = DynType::from_idl_file(&idl, &[] as &[&str], Nav::TYPE_NAME).unwrap();
            let p = &ps[1];
            let raw = p.create_cdr_topic_with_type("nav", &ty, atomic()).unwrap();
            let untyped = p.create_cdr_topic("nav", Nav::TYPE_NAME, atomic()).unwrap();
            let e = p
                .create_contentfilteredtopic("x", &untyped, "phase = 4", &[])
                .unwrap_err();
            assert!(
                matches!(&e, Error::Unsupported(t) if t.contains("create_cdr_topic_with_type")),
                "seed {seed}: {e}"
            );
            // FlightPhase: CRUISE is 4.
            let expr = "position.altitude_m > %0 AND phase = 4";
            let cft = p
                .create_contentfilteredtopic("high-cruise", &raw, expr, &["3000".into()])
                .unwrap();
            let sub = p.create_subscriber(Default::default()).unwrap();
            let filtered: DataReader<CdrSample> =
                sub.create_datareader(&cft, keep_all(&atomic())).unwrap();
            let queried: DataReader<CdrSample> =
                sub.create_datareader(&raw, keep_all(&atomic())).unwrap();
            let q = queried
                .create_querycondition(
                    StateMask::ANY,
                    "phase = 'CRUISE' AND gnss_valid = TRUE",
                    &[],
                )
                .unwrap();
            let all = nav_reader(p, &nav_topic(p));
            let w = nav_writer(&ps[0]);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let total = 40;
            for n in 0..total {
                w.write(&nav(&mut rng, 1, n)).unwrap();
            }
            let all = take_n(&d, &all, total as usize);
            let expected: Vec<&Sample<Nav>> = all
                .iter()
                .filter(|s| {
                    let n = s.data.as_ref().unwrap();
                    n.position.altitude_m > 3000.0 && n.phase == FlightPhase::Cruise
                })
                .collect();
            assert!(!expected.is_empty(), "seed {seed}: some reports pass");
            let got = take_n(&d, &filtered, expected.len());
            d.run_for(20_000);
            assert!(filtered
                .take(usize::MAX, StateMask::ANY)
                .unwrap()
                .is_empty());
            let decoded: Vec<(u64, u64)> = got
                .iter()
                .map(|s| {
                    let n = Nav::decode(s.data.as_ref().unwrap().bytes()).unwrap();
                    (s.info.order_index, n.timestamp_ns)
                })
                .collect();
            let want: Vec<(u64, u64)> = expected
                .iter()
                .map(|s| (s.info.order_index, s.data.as_ref().unwrap().timestamp_ns))
                .collect();
            assert_eq!(decoded, want, "seed {seed}");
            // The query condition on the raw reader takes only its matches.
            let matching = all
                .iter()
                .filter(|s| {
                    let n = s.data.as_ref().unwrap();
                    n.phase == FlightPhase::Cruise && n.gnss_valid
                })
                .count();
            let took = queried.take_w_condition(usize::MAX, &*q).unwrap();
            assert_eq!(took.len(), matching, "seed {seed}");
            assert_eq!(
                queried.take(usize::MAX, StateMask::ANY).unwrap().len(),
                total as usize - matching,
                "seed {seed}: the rest stays"
            );
        },
    );
}
