//! The DCPS API end to end, participants in one process over real tcp on loopback.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_dds_core::{
    Contact, DataReader, DataReaderListener, DomainParticipant, DomainParticipantFactory, Error,
    InstanceState, ParticipantConfig, Sample, StateMask, Transport, WaitSet,
};
use spindle_qos::{
    DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, ResourceLimits, TopicQos,
};
use spindle_topics::KeyedString;

fn domain(n: u32) -> Vec<DomainParticipant> {
    let f = DomainParticipantFactory::instance();
    let mut c1 = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
    c1.bootstrap = vec![1];
    let p1 = f
        .create_participant(0, Default::default(), &c1)
        .expect("participant 1");
    let mut out = vec![p1];
    for id in 2..=n {
        let mut c = ParticipantConfig::new(id, Transport::Tcp, "127.0.0.1:0");
        c.contacts = vec![Contact {
            node: 1,
            address: out[0].address().to_string(),
        }];
        out.push(
            f.create_participant(0, Default::default(), &c)
                .expect("participant"),
        );
    }
    out
}

/// Stops the participants, the last joined first.
fn close_all(ps: Vec<DomainParticipant>) {
    for p in ps.into_iter().rev() {
        p.close();
    }
}

/// Polls `done` until it holds or 30 s pass (no bound on when: the machine is shared).
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn atomic() -> TopicQos {
    TopicQos::default().with_reliability(Reliability::reliable())
}

fn ks(key: &str, value: String) -> KeyedString {
    KeyedString {
        key: key.into(),
        value,
    }
}

/// Takes from `r` until `n` samples arrived (or 30 s passed).
fn take_n(r: &DataReader<KeyedString>, n: usize) -> Vec<Sample<KeyedString>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ws = WaitSet::new();
    ws.attach_condition(r.create_readcondition(StateMask::ANY));
    while got.len() < n && Instant::now() < deadline {
        let _ = ws.wait(Duration::from_millis(100));
        got.extend(r.take(usize::MAX, StateMask::ANY).expect("take"));
    }
    got
}

fn order(s: &[Sample<KeyedString>]) -> Vec<(u32, u64, String)> {
    s.iter()
        .map(|s| {
            (
                s.info.view_id,
                s.info.order_index,
                s.data.as_ref().map_or(String::new(), |d| d.value.clone()),
            )
        })
        .collect()
}

#[test]
fn readers_see_one_order_across_two_writers_on_overlapping_topics() {
    let ps = domain(3);
    // Topic "alpha": readers at 2 and 3, writers at 1 and 2. Topic "beta": reader at 3,
    // writer at 2 — participant 2 and 3 are in both subgroups.
    let topics: Vec<_> = ps
        .iter()
        .map(|p| p.create_topic::<KeyedString>("alpha", atomic()).unwrap())
        .collect();
    let betas: Vec<_> = ps
        .iter()
        .map(|p| p.create_topic::<KeyedString>("beta", atomic()).unwrap())
        .collect();
    let rq = DataReaderQos::from_topic_qos(&atomic()).with_history(History::keep_all());
    let r2 = ps[1]
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&topics[1], rq.clone())
        .unwrap();
    let r3 = ps[2]
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&topics[2], rq.clone())
        .unwrap();
    let rb3 = ps[2]
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&betas[2], rq)
        .unwrap();
    let w1 = ps[0]
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&topics[0], DataWriterQos::default())
        .unwrap();
    let pub2 = ps[1].create_publisher(Default::default()).unwrap();
    let w2 = pub2
        .create_datawriter(&topics[1], DataWriterQos::default())
        .unwrap();
    let wb2 = pub2
        .create_datawriter(&betas[1], DataWriterQos::default())
        .unwrap();
    // Matched statuses reflect the installed view: two reading participants, two writers.
    assert_eq!(w1.publication_matched_status().current_count, 2);
    assert_eq!(r3.subscription_matched_status().current_count, 2);
    const N: usize = 300;
    let a = std::thread::spawn(move || {
        for i in 0..N {
            w1.write(&ks("one", format!("1-{i}"))).unwrap();
        }
        w1
    });
    for i in 0..N {
        w2.write(&ks("two", format!("2-{i}"))).unwrap();
        wb2.write(&ks("b", format!("b-{i}"))).unwrap();
    }
    let _w1 = a.join().unwrap();
    let g2 = take_n(&r2, 2 * N);
    let g3 = take_n(&r3, 2 * N);
    let gb = take_n(&rb3, N);
    assert_eq!(g2.len(), 2 * N);
    assert_eq!(gb.len(), N);
    // One total order across both writers, identical at both readers (no RTPS DDS gives
    // this): same values at the same (view, index) positions, in the same sequence.
    assert_eq!(order(&g2), order(&g3));
    let firsts: Vec<&str> = g2
        .iter()
        .map(|s| s.data.as_ref().unwrap().key.as_str())
        .collect();
    assert!(firsts.contains(&"one") && firsts.contains(&"two"));
    // Each writer's samples keep its order, numbered from 1.
    for w in ["one", "two"] {
        let seqs: Vec<u64> = g2
            .iter()
            .filter(|s| s.data.as_ref().unwrap().key == w)
            .map(|s| s.info.writer_seq)
            .collect();
        assert_eq!(seqs, (1..=N as u64).collect::<Vec<_>>(), "writer {w}");
    }
    // Deleting a reader changes the layout through a view change: the writers' matched
    // count follows the installed view.
    let vid = ps[2].view().map(|v| v.vid);
    let sub3 = ps[2].create_subscriber(Default::default()).unwrap();
    sub3.delete_datareader(r3).unwrap();
    assert!(
        ps[2].view().map(|v| v.vid) > vid,
        "deleting a reader installed a new view"
    );
    assert!(
        eventually(|| w2.publication_matched_status().current_count == 1),
        "only participant 2 reads alpha now"
    );
    close_all(ps);
}

#[test]
fn a_late_reader_on_a_stored_topic_gets_the_history_and_keep_last_bounds_it() {
    let ps = domain(2);
    let stored = atomic()
        .with_durability(DurabilityKind::TransientLocal)
        .with_history(History::keep_last(3));
    let t1 = ps[0]
        .create_topic::<KeyedString>("plans", stored.clone())
        .unwrap();
    let w = ps[0]
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t1, DataWriterQos::from_topic_qos(&stored))
        .unwrap();
    for i in 0..10 {
        w.write(&ks("A", format!("a{i}"))).unwrap();
        w.write(&ks("B", format!("b{i}"))).unwrap();
    }
    w.dispose(&ks("B", String::new())).unwrap();
    // Created after every write: it still holds the last 3 per instance (B's last being
    // its dispose notice).
    let t2 = ps[1]
        .create_topic::<KeyedString>("plans", stored.clone())
        .unwrap();
    let r = ps[1]
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(
            &t2,
            DataReaderQos::from_topic_qos(&stored).with_history(History::keep_all()),
        )
        .unwrap();
    let got = r.take(usize::MAX, StateMask::ANY).unwrap();
    let a: Vec<String> = got
        .iter()
        .filter_map(|s| s.data.as_ref())
        .filter(|d| d.key == "A")
        .map(|d| d.value.clone())
        .collect();
    assert_eq!(a, vec!["a7", "a8", "a9"]);
    let b: Vec<&Sample<KeyedString>> = got
        .iter()
        .filter(|s| s.data.as_ref().is_none_or(|d| d.key == "B"))
        .collect();
    assert_eq!(b.len(), 3);
    assert!(!b[2].info.valid_data, "the dispose notice");
    assert_eq!(b[2].info.instance_state, InstanceState::NotAliveDisposed);
    // Later writes still arrive, after the history.
    w.write(&ks("A", "a10".into())).unwrap();
    let more = take_n(&r, 1);
    assert_eq!(more[0].data.as_ref().unwrap().value, "a10");
    close_all(ps);
}

#[test]
fn bad_qos_and_misuse_are_dds_errors_not_panics() {
    let ps = domain(1);
    let p = &ps[0];
    let persistent = atomic().with_durability(DurabilityKind::Persistent);
    assert!(matches!(
        p.create_topic::<KeyedString>("logged", persistent),
        Err(Error::Unsupported(_))
    ));
    let bad = atomic()
        .with_history(History::keep_last(10))
        .with_resource_limits(ResourceLimits {
            max_samples: 100,
            max_instances: 10,
            max_samples_per_instance: 5,
        });
    match p.create_topic::<KeyedString>("bad", bad) {
        Err(Error::InconsistentPolicy(e)) => assert!(e.to_string().contains("10"), "{e}"),
        other => panic!("expected InconsistentPolicy, got {other:?}"),
    }
    let t = p.create_topic::<KeyedString>("t", atomic()).unwrap();
    assert!(matches!(
        p.create_topic::<spindle_topics::Sequence>("t", atomic()),
        Err(Error::PreconditionNotMet(_))
    ));
    let s = p.create_subscriber(Default::default()).unwrap();
    let r = s
        .create_datareader(&t, DataReaderQos::from_topic_qos(&atomic()))
        .unwrap();
    assert!(matches!(r.take_next_sample(), Err(Error::NoData)));
    assert!(
        matches!(p.clone().delete(), Err(Error::PreconditionNotMet(_))),
        "entities remain"
    );
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::default())
        .unwrap();
    let big = ks("k", "x".repeat(10_000));
    assert!(
        matches!(w.write(&big), Err(Error::OutOfResources(_))),
        "larger than the slot"
    );
    s.delete_datareader(r.clone()).unwrap();
    assert!(matches!(
        r.take(1, StateMask::ANY),
        Err(Error::AlreadyDeleted(_))
    ));
    close_all(ps);
}

struct Counter(Arc<AtomicUsize>);
impl DataReaderListener<KeyedString> for Counter {
    fn on_data_available(&self, r: &DataReader<KeyedString>) {
        let n = r.take(usize::MAX, StateMask::ANY).map_or(0, |v| v.len());
        self.0.fetch_add(n, Ordering::SeqCst);
    }
}

#[test]
fn listeners_and_best_effort_readers_get_data_and_reliable_readers_do_not_match_best_effort_writers(
) {
    let ps = domain(2);
    let be = TopicQos::default();
    let t0 = ps[0]
        .create_topic::<KeyedString>("fast", be.clone())
        .unwrap();
    let t1 = ps[1]
        .create_topic::<KeyedString>("fast", be.clone())
        .unwrap();
    let s1 = ps[1].create_subscriber(Default::default()).unwrap();
    // KEEP_ALL: with the default KEEP_LAST 1, a batched delivery of one key leaves one.
    let r = s1
        .create_datareader(
            &t1,
            DataReaderQos::from_topic_qos(&be).with_history(History::keep_all()),
        )
        .unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    r.set_listener(Counter(Arc::clone(&count)));
    let strict = s1
        .create_datareader(&t1, DataReaderQos::from_topic_qos(&atomic()))
        .unwrap();
    let w = ps[0]
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t0, DataWriterQos::from_topic_qos(&be))
        .unwrap();
    for i in 0..50 {
        w.write(&ks("k", format!("{i}"))).unwrap();
    }
    eventually(|| count.load(Ordering::SeqCst) >= 50);
    assert_eq!(
        count.load(Ordering::SeqCst),
        50,
        "the listener took every sample"
    );
    assert_eq!(strict.take(usize::MAX, StateMask::ANY).unwrap().len(), 0);
    assert!(strict.requested_incompatible_qos_status().total_count > 0);
    close_all(ps);
}

#[test]
fn a_writer_that_falls_silent_makes_the_reader_miss_its_deadline() {
    let ps = domain(1);
    let p = &ps[0];
    let t = p.create_topic::<KeyedString>("ticks", atomic()).unwrap();
    let qos = DataReaderQos::from_topic_qos(&atomic())
        .with_deadline(spindle_qos::Duration::from_millis(20));
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, qos)
        .unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::default())
        .unwrap();
    // No data yet: no instance, nothing missed.
    assert_eq!(r.requested_deadline_missed_status().total_count, 0);
    w.write(&ks("k", "once".into())).unwrap();
    // The writer then falls silent: the instance misses its deadline (eventually; no
    // bound on when, the machine is shared).
    assert!(
        eventually(|| r.requested_deadline_missed_status().total_count >= 1),
        "no deadline missed after the writer stopped"
    );
    let s = r.requested_deadline_missed_status();
    assert_eq!(
        s.last_instance_handle,
        r.lookup_instance(&ks("k", String::new())).unwrap()
    );
    close_all(ps);
}

#[test]
fn time_based_filter_keeps_one_sample_per_instance_per_separation() {
    let ps = domain(1);
    let p = &ps[0];
    let t = p.create_topic::<KeyedString>("filtered", atomic()).unwrap();
    let mut qos = DataReaderQos::from_topic_qos(&atomic()).with_history(History::keep_all());
    qos.time_based_filter.minimum_separation = spindle_qos::Duration::from_secs(3600);
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, qos)
        .unwrap();
    let all = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(
            &t,
            DataReaderQos::from_topic_qos(&atomic()).with_history(History::keep_all()),
        )
        .unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::default())
        .unwrap();
    for i in 0..20 {
        w.write(&ks(if i % 2 == 0 { "a" } else { "b" }, format!("{i}")))
            .unwrap();
    }
    let unfiltered = take_n(&all, 20);
    assert_eq!(unfiltered.len(), 20);
    // Delivered to both readers together; the filtered one kept the first per instance.
    let got: Vec<String> = r
        .take(usize::MAX, StateMask::ANY)
        .unwrap()
        .into_iter()
        .filter_map(|s| s.data.map(|d| d.value))
        .collect();
    assert_eq!(got, vec!["0", "1"]);
    close_all(ps);
}

#[test]
fn a_writer_that_falls_silent_misses_its_offered_deadline() {
    let ps = domain(1);
    let p = &ps[0];
    let t = p.create_topic::<KeyedString>("beats", atomic()).unwrap();
    let qos = DataWriterQos::default().with_deadline(spindle_qos::Duration::from_millis(20));
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, qos)
        .unwrap();
    assert_eq!(
        w.offered_deadline_missed_status().total_count,
        0,
        "no instance written yet"
    );
    w.write(&ks("k", "once".into())).unwrap();
    assert!(
        eventually(|| w.offered_deadline_missed_status().total_count >= 1),
        "no offered deadline missed after the writer stopped"
    );
    close_all(ps);
}

#[test]
fn lifespan_drops_expired_samples_and_exclusive_ownership_keeps_the_strongest_writer() {
    let ps = domain(1);
    let p = &ps[0];
    let t = p.create_topic::<KeyedString>("owned", atomic()).unwrap();
    let keep_all = DataReaderQos::from_topic_qos(&atomic()).with_history(History::keep_all());
    let mut excl = keep_all.clone();
    excl.ownership.kind = spindle_qos::OwnershipKind::Exclusive;
    let sub = p.create_subscriber(Default::default()).unwrap();
    let r = sub.create_datareader(&t, excl).unwrap();
    let all = sub.create_datareader(&t, keep_all).unwrap();
    let publ = p.create_publisher(Default::default()).unwrap();
    let mut weak_q = DataWriterQos::default();
    weak_q.ownership.kind = spindle_qos::OwnershipKind::Exclusive;
    weak_q.ownership_strength.value = 1;
    let mut strong_q = weak_q.clone();
    strong_q.ownership_strength.value = 5;
    let weak = publ.create_datawriter(&t, weak_q).unwrap();
    let strong = publ.create_datawriter(&t, strong_q).unwrap();
    // One thread, one order: weak, strong, weak again, strong again.
    weak.write(&ks("k", "w1".into())).unwrap();
    strong.write(&ks("k", "s1".into())).unwrap();
    weak.write(&ks("k", "w2".into())).unwrap();
    strong.write(&ks("k", "s2".into())).unwrap();
    // A sample whose LIFESPAN ended before it was written never reaches a reader.
    let mut short = DataWriterQos::default();
    short.lifespan.duration = spindle_qos::Duration::from_secs(1);
    let brief = publ.create_datawriter(&t, short).unwrap();
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
        - 3_600_000_000_000;
    brief
        .write_w_timestamp(&ks("old", "stale".into()), hour_ago)
        .unwrap();
    strong.write(&ks("k", "s3".into())).unwrap();
    let everything: Vec<String> = take_n(&all, 5)
        .into_iter()
        .filter_map(|s| s.data.map(|d| d.value))
        .collect();
    assert_eq!(
        everything,
        vec!["w1", "s1", "w2", "s2", "s3"],
        "the stale sample expired"
    );
    let owned: Vec<String> = r
        .take(usize::MAX, StateMask::ANY)
        .unwrap()
        .into_iter()
        .filter_map(|s| s.data.map(|d| d.value))
        .collect();
    assert_eq!(
        owned,
        vec!["w1", "s1", "s2", "s3"],
        "after s1, the weaker writer's samples are not the owner's"
    );
    // The strong writer unregisters: ownership falls back to the weak one.
    strong.unregister_instance(&ks("k", String::new())).unwrap();
    weak.write(&ks("k", "w3".into())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut back = Vec::new();
    while back.is_empty() && Instant::now() < deadline {
        back = r
            .take(usize::MAX, StateMask::ANY)
            .unwrap()
            .into_iter()
            .filter_map(|s| s.data.map(|d| d.value))
            .collect();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(back, vec!["w3"]);
    close_all(ps);
}
