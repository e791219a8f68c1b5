//! Bootstrap members started one by one: three processes list each other as `bootstrap`
//! members, but start a while apart, as a service manager or a person would start them.
//! The first ones must wait for the others (dialing again a member not up yet) instead
//! of giving up with "lost the majority", and all three must form one view and exchange
//! a sample each way. Before the redial (`spindle_group`'s `REDIAL_US`), the first
//! process failed as soon as its first dial was refused.
//!
//! No timing is asserted: the stagger only makes the late start certain.

use std::process::Stdio;
use std::time::{Duration, Instant};

use spindle_dds_core::{DomainParticipantFactory, StateMask};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

mod common;
use common::procs::{loopback_members, member_config, spawn_child};

const IDS: [u32; 3] = [1, 2, 3];
const WAIT_MAX: Duration = Duration::from_secs(60);
/// Between two starts: long enough that the first dials are refused.
const STAGGER: Duration = Duration::from_millis(700);
const ENV_ID: &str = "SPINDLE_BOOT_CHILD_ID";
const ENV_MEMBERS: &str = "SPINDLE_BOOT_CHILD_MEMBERS";

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_history(History::keep_all())
}

/// A child: one bootstrap member; writes one sample, and prints `ALL` once it has taken
/// a sample of every member.
#[test]
#[ignore = "spawned by bootstrap_members_started_one_by_one_form_one_view"]
fn bootstrap_child() {
    let (Ok(id), Ok(members)) = (std::env::var(ENV_ID), std::env::var(ENV_MEMBERS)) else {
        return;
    };
    let id: u32 = id.parse().unwrap();
    let mut cfg = member_config(id, &members);
    cfg.bootstrap = IDS.to_vec();
    cfg.entity_timeout_ms = WAIT_MAX.as_millis() as u64;
    let p = DomainParticipantFactory::instance()
        .create_participant(0, Default::default(), &cfg)
        .unwrap();
    println!("VIEW {:?}", p.view().map(|v| v.members));
    let t = p.create_topic::<KeyedString>("boot-topic", qos()).unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, DataReaderQos::from_topic_qos(&qos()))
        .unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::from_topic_qos(&qos()))
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + WAIT_MAX;
    let mut k = 0;
    while seen.len() < IDS.len() && Instant::now() < deadline {
        // Until every member took one: later members' readers may not exist yet.
        let _ = w.write(&KeyedString {
            key: format!("n{id}"),
            value: format!("n{id}:{k}"),
        });
        k += 1;
        for s in r.take(usize::MAX, StateMask::ANY).unwrap_or_default() {
            if let Some(d) = s.data {
                seen.insert(d.key);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("SEEN {}", seen.len());
    if seen.len() == IDS.len() {
        println!("ALL");
    }
    // Stay until the others are done too (their last samples need a majority).
    std::thread::sleep(Duration::from_secs(2));
}

#[test]
fn bootstrap_members_started_one_by_one_form_one_view() {
    let members = loopback_members(&IDS);
    let mut procs = Vec::new();
    for id in IDS {
        let env = [(ENV_ID, id.to_string()), (ENV_MEMBERS, members.clone())];
        procs.push((id, spawn_child("bootstrap_child", &env, Stdio::inherit())));
        std::thread::sleep(STAGGER);
    }
    for (id, p) in &mut procs {
        let deadline = Instant::now() + WAIT_MAX * 2;
        let mut said = Vec::new();
        let all = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match p.lines.recv_timeout(left) {
                Ok(l) if l.contains("ALL") => break true,
                Ok(l) => said.push(l),
                Err(_) => break false,
            }
        };
        assert!(
            all,
            "node {id} never took a sample of every member; it said {said:?}"
        );
        let status = p.child.wait().unwrap();
        assert!(status.success(), "node {id} exited with {status}");
    }
}
