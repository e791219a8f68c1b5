//! The DCPS API end to end over real tcp on loopback, participants in one process with
//! their own threads: concurrent writers and the real clock. The rest of DCPS is tested in
//! deterministic simulation (`sim_dcps.rs`, where the late reader of a stored topic, the
//! QoS policies and crashes are); the multi-process, SIGKILL tests are in the `examples`
//! crate.

mod common;
use common::{atomic, ks, order};

use std::time::{Duration, Instant};

use spindle_dds_core::{
    Contact, DataReader, DomainParticipant, DomainParticipantFactory, ParticipantConfig, Sample,
    StateMask, Transport, WaitSet,
};
use spindle_qos::{DataReaderQos, DataWriterQos, History};
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

/// A reader and a writer of topic `name` in `p`: true once the reader took the one
/// sample the writer wrote.
fn delivers_its_own_sample(p: &DomainParticipant, name: &str) -> bool {
    let t = p.create_topic::<KeyedString>(name, atomic()).unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, DataReaderQos::from_topic_qos(&atomic()))
        .unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::default())
        .unwrap();
    w.write(&ks("k", "v")).unwrap();
    let mut got = 0;
    eventually(|| {
        got += r.take(usize::MAX, StateMask::ANY).unwrap().len();
        got == 1
    })
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
    // Writes wait for room as long as it takes: this test must not depend on how fast
    // a loaded machine drains the window (the default RELIABILITY max_blocking_time is
    // 100 ms).
    let wq = DataWriterQos::default().with_max_blocking_time(spindle_qos::Duration::from_secs(120));
    let w1 = ps[0]
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&topics[0], wq.clone())
        .unwrap();
    let pub2 = ps[1].create_publisher(Default::default()).unwrap();
    let w2 = pub2.create_datawriter(&topics[1], wq.clone()).unwrap();
    let wb2 = pub2.create_datawriter(&betas[1], wq).unwrap();
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

/// Over real tcp: one of two participants is deleted (a graceful leave); the other keeps
/// its majority and goes on delivering.
#[test]
fn the_survivor_of_two_goes_on_after_the_other_is_deleted() {
    let mut ps = domain(2);
    let second = ps.pop().expect("two participants");
    second.delete().expect("delete");
    assert!(
        delivers_its_own_sample(&ps[0], "after"),
        "the survivor delivers after the other left"
    );
    close_all(ps);
}

/// One writer written from four threads at once, every tenth sample above the slot (by
/// RDMC): every sample arrives once, and the writer's sequence numbers follow the order
/// every reader sees (a write numbers its sample where it takes its place in the ring,
/// under the writer's one lock), so a reader can tell the writer's own order from
/// `writer_seq`; the source timestamps, read there too, never go back along it.
#[test]
fn threads_sharing_one_writer_are_numbered_in_the_order_delivered() {
    let ps = domain(2);
    let topics: Vec<_> = ps
        .iter()
        .map(|p| p.create_topic::<KeyedString>("shared", atomic()).unwrap())
        .collect();
    let rq = DataReaderQos::from_topic_qos(&atomic()).with_history(History::keep_all());
    let readers: Vec<_> = ps
        .iter()
        .zip(&topics)
        .map(|(p, t)| {
            p.create_subscriber(Default::default())
                .unwrap()
                .create_datareader(t, rq.clone())
                .unwrap()
        })
        .collect();
    let wq = DataWriterQos::default().with_max_blocking_time(spindle_qos::Duration::from_secs(120));
    let w = ps[0]
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&topics[0], wq)
        .unwrap();
    const THREADS: usize = 4;
    const N: usize = 250;
    let before = ps[0].counters();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    // Above the default 4096-byte slot: by RDMC, in the same order.
                    let pad = if i % 10 == 0 {
                        "x".repeat(8192)
                    } else {
                        String::new()
                    };
                    w.write(&ks(&format!("t{t}"), format!("{t}-{i}-{pad}")))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let got: Vec<_> = readers.iter().map(|r| take_n(r, THREADS * N)).collect();
    for g in &got {
        assert_eq!(g.len(), THREADS * N, "every sample arrives");
        let mut values: Vec<String> = g
            .iter()
            .map(|s| s.data.as_ref().unwrap().value.clone())
            .collect();
        values.sort();
        values.dedup();
        assert_eq!(values.len(), THREADS * N, "none twice");
        let seqs: Vec<u64> = g.iter().map(|s| s.info.writer_seq).collect();
        assert_eq!(
            seqs,
            (1..=(THREADS * N) as u64).collect::<Vec<_>>(),
            "writer_seq in delivery order"
        );
        // `write` reads the clock where the sample takes its place: the stamps follow
        // the writer's order too (a BY_SOURCE_TIMESTAMP reader drops none as older).
        let stamps: Vec<i64> = g.iter().map(|s| s.info.source_timestamp_ns).collect();
        let back = stamps.windows(2).position(|w| w[1] < w[0]);
        assert_eq!(back, None, "a stamp went back along writer_seq");
        // Each thread's own samples keep the order it wrote them in.
        for t in 0..THREADS {
            let mine: Vec<String> = g
                .iter()
                .filter(|s| s.data.as_ref().unwrap().key == format!("t{t}"))
                .map(|s| s.data.as_ref().unwrap().value.clone())
                .collect();
            let want: Vec<String> = (0..N)
                .map(|i| {
                    let pad = if i % 10 == 0 {
                        "x".repeat(8192)
                    } else {
                        String::new()
                    };
                    format!("{t}-{i}-{pad}")
                })
                .collect();
            assert_eq!(mine, want, "thread {t}'s order");
        }
    }
    assert_eq!(order(&got[0]), order(&got[1]), "one order at both readers");
    // The writer's own counts, kept with its write path held, miss no thread's write.
    let after = ps[0].counters();
    assert_eq!(
        after.samples_written - before.samples_written,
        (THREADS * N) as u64,
        "one count per write: {after:?}"
    );
    assert_eq!(
        after.large_samples_written - before.large_samples_written,
        (THREADS * N / 10) as u64,
        "every tenth by RDMC: {after:?}"
    );
    drop((readers, w));
    close_all(ps);
}

/// The thread of this process named `name`, as its `/proc` directory.
fn thread_dir(name: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        (comm.trim() == name).then_some(dir)
    })
}

/// A line of `/proc/.../status`, after its key.
fn status_value(dir: &std::path::Path, key: &str) -> String {
    let status = std::fs::read_to_string(dir.join("status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key} in {status}"))
}

/// `predicate_cpus` keeps the participant's predicate thread to the CPU given, and the
/// participant delivers; a CPU the process may not use fails the creation of the next
/// participant with an error naming the setting, and the first one goes on.
/// `predicate_fifo_priority` is granted and seen on the thread (as root), or refused
/// naming the setting and the privilege it needs.
#[test]
fn the_predicate_thread_runs_where_the_configuration_puts_it() {
    let f = DomainParticipantFactory::instance();
    let allowed = status_value(std::path::Path::new("/proc/self"), "Cpus_allowed_list:");
    // The last CPU of the first range ("0-1,4" -> 1).
    let cpu: usize = allowed
        .split(',')
        .next()
        .and_then(|r| r.rsplit('-').next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("Cpus_allowed_list {allowed:?}"));
    let mut c1 = ParticipantConfig::new(7, Transport::Tcp, "127.0.0.1:0");
    c1.bootstrap = vec![7];
    c1.predicate_cpus = vec![cpu];
    let p = f
        .create_participant(0, Default::default(), &c1)
        .expect("placed participant");
    let dir = thread_dir("spindle-group-7").expect("the predicate thread");
    assert_eq!(status_value(&dir, "Cpus_allowed_list:"), cpu.to_string());

    let mut bad = ParticipantConfig::new(8, Transport::Tcp, "127.0.0.1:0");
    bad.bootstrap = vec![8];
    bad.predicate_cpus = vec![1023];
    let e = f
        .create_participant(0, Default::default(), &bad)
        .expect_err("a CPU this process may not use is refused")
        .to_string();
    assert!(e.contains("predicate_cpus") && e.contains("1023"), "{e}");

    assert!(
        delivers_its_own_sample(&p, "placed"),
        "the placed participant delivers"
    );
    p.close();

    let mut rt = ParticipantConfig::new(9, Transport::Tcp, "127.0.0.1:0");
    rt.bootstrap = vec![9];
    rt.predicate_fifo_priority = 1;
    rt.spin_before_park_us = 0;
    match f.create_participant(0, Default::default(), &rt) {
        Ok(p) => {
            let dir = thread_dir("spindle-group-9").expect("the predicate thread");
            let stat = std::fs::read_to_string(dir.join("stat")).expect("stat");
            // Fields after the command's closing parenthesis; policy is field 41 of stat,
            // the 39th after it (SCHED_FIFO = 1), rt_priority the 38th.
            let after: Vec<&str> = stat
                .rsplit_once(')')
                .expect("stat")
                .1
                .split_whitespace()
                .collect();
            assert_eq!(
                (after[37], after[38]),
                ("1", "1"),
                "rt_priority 1, SCHED_FIFO: {stat}"
            );
            p.close();
        }
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.contains("predicate_fifo_priority") && e.contains("CAP_SYS_NICE"),
                "{e}"
            );
        }
    }
}

/// A join that cannot happen says why, as the links to its contacts saw it: the address
/// of a contact where nothing listens, and a contact that refuses this node because a
/// live member holds its node id (another process started with the same configuration).
#[test]
fn a_join_that_times_out_names_what_each_contact_said() {
    let f = DomainParticipantFactory::instance();
    // A port nothing listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut lone = ParticipantConfig::new(3, Transport::Tcp, "127.0.0.1:0");
    lone.contacts = vec![Contact {
        node: 1,
        address: dead.to_string(),
    }];
    lone.entity_timeout_ms = 1_500;
    let e = f
        .create_participant(0, Default::default(), &lone)
        .expect_err("nobody to join")
        .to_string();
    assert!(
        e.contains(&format!(
            "contact node 1 at {dead}: could not reach the peer"
        )),
        "{e}"
    );
    // Node 2 is a live member; a second participant claiming node 2 is turned away.
    let ps = domain(2);
    let mut twin = ParticipantConfig::new(2, Transport::Tcp, "127.0.0.1:0");
    twin.contacts = vec![Contact {
        node: 1,
        address: ps[0].address().to_string(),
    }];
    let e = f
        .create_participant(0, Default::default(), &twin)
        .expect_err("a live member's id")
        .to_string();
    assert!(
        e.contains("is another process running with node id 2?"),
        "{e}"
    );
    // The live member keeps its place.
    assert_eq!(ps[0].view().expect("a view").members, vec![1, 2]);
    assert!(
        delivers_its_own_sample(&ps[1], "twin"),
        "node 2 still delivers"
    );
}

/// A bootstrap member started again while the others run the domain cannot gather its
/// first view (the bootstrap members, who have moved on); it joins the running domain
/// through its contacts instead, with the same configuration.
#[test]
fn a_bootstrap_member_started_again_joins_the_running_domain() {
    let f = DomainParticipantFactory::instance();
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        })
        .collect();
    let config = |id: u32| {
        let mut c = ParticipantConfig::new(
            id,
            Transport::Tcp,
            format!("127.0.0.1:{}", ports[id as usize - 1]),
        );
        c.bootstrap = vec![1, 2, 3];
        c.contacts = (1..=3)
            .map(|n| Contact {
                node: n,
                address: format!("127.0.0.1:{}", ports[n as usize - 1]),
            })
            .collect();
        c
    };
    let started: Vec<_> = (1..=3)
        .map(|id| {
            let c = config(id);
            std::thread::spawn(move || f.create_participant(0, Default::default(), &c))
        })
        .collect();
    let mut ps: Vec<DomainParticipant> = started
        .into_iter()
        .map(|h| h.join().expect("thread").expect("a bootstrap member"))
        .collect();
    // Node 3 crashes; the others go on without it.
    ps.pop().expect("node 3").close();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ps[0].view().map(|v| v.members) != Some(vec![1, 2]) {
        assert!(
            Instant::now() < deadline,
            "nodes 1 and 2 never went on alone"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let again = f
        .create_participant(0, Default::default(), &config(3))
        .expect("node 3 joins the running domain");
    assert_eq!(again.view().expect("a view").members, vec![1, 2, 3]);
    assert!(delivers_its_own_sample(&again, "again"), "node 3 delivers");
}
