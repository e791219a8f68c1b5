//! Bootstrap members started one by one: three processes list each other as `bootstrap`
//! members, but start a while apart, as a service manager or a person would start them.
//! The first ones must wait for the others (dialing again a member not up yet) instead
//! of giving up with "lost the majority", and all three must form one view and exchange
//! a sample each way. Before the redial (`spindle_group`'s `REDIAL_US`), the first
//! process failed as soon as its first dial was refused.
//!
//! And a bootstrap member of another domain among them: the others leave it out and go
//! on, and it fails naming both domains (their membership rows name their groups).
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
/// The child's domain (default 0).
const ENV_DOMAIN: &str = "SPINDLE_BOOT_CHILD_DOMAIN";
/// How many members' samples the child waits for (default all of [`IDS`]).
const ENV_EXPECT: &str = "SPINDLE_BOOT_CHILD_EXPECT";

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_history(History::keep_all())
}

/// A child: one bootstrap member; writes one sample, and prints `ALL` once it has taken
/// a sample of every member it expects; `REFUSED` and the error if it cannot take part.
#[test]
#[ignore = "spawned by bootstrap_members_started_one_by_one_form_one_view"]
fn bootstrap_child() {
    let (Ok(id), Ok(members)) = (std::env::var(ENV_ID), std::env::var(ENV_MEMBERS)) else {
        return;
    };
    let id: u32 = id.parse().unwrap();
    let env_or = |k: &str, default: usize| {
        std::env::var(k).map_or(default, |v| v.parse().expect("a number"))
    };
    let domain = env_or(ENV_DOMAIN, 0) as u32;
    let expect = env_or(ENV_EXPECT, IDS.len());
    let mut cfg = member_config(id, &members);
    cfg.bootstrap = IDS.to_vec();
    cfg.domain_id = domain;
    cfg.entity_timeout_ms = WAIT_MAX.as_millis() as u64;
    let p = match DomainParticipantFactory::instance().create_participant(
        domain,
        Default::default(),
        &cfg,
    ) {
        Ok(p) => p,
        Err(e) => {
            println!("REFUSED {e}");
            return;
        }
    };
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
    while seen.len() < expect && Instant::now() < deadline {
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
    println!("FINAL {:?}", p.view().map(|v| v.members));
    if seen.len() == expect {
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

#[test]
fn a_bootstrap_member_of_another_domain_is_left_out_and_fails_naming_both() {
    let members = loopback_members(&IDS);
    let mut procs = Vec::new();
    for id in IDS {
        let (domain, expect) = if id == 3 { (1, 3) } else { (0, 2) };
        let env = [
            (ENV_ID, id.to_string()),
            (ENV_MEMBERS, members.clone()),
            (ENV_DOMAIN, domain.to_string()),
            (ENV_EXPECT, expect.to_string()),
        ];
        procs.push((id, spawn_child("bootstrap_child", &env, Stdio::inherit())));
    }
    for (id, p) in &mut procs {
        let deadline = Instant::now() + WAIT_MAX * 2;
        let mut said = Vec::new();
        let last = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match p.lines.recv_timeout(left) {
                Ok(l) if l.contains("ALL") || l.contains("REFUSED") => break l,
                Ok(l) => said.push(l),
                Err(_) => panic!("node {id} said neither ALL nor REFUSED: {said:?}"),
            }
        };
        if *id == 3 {
            // Its membership rows' check (naming whichever of the other two it heard
            // first), then its join's refusal, each naming both.
            assert!(
                [1, 2].iter().any(|m| {
                    last.contains(&format!(
                        "member {m} is configured for domain 0 (wire version"
                    ))
                }) && last.contains("this node for domain 1 (wire version")
                    && last.contains("configured for domain 1 (wire version"),
                "node 3: {last}"
            );
        } else {
            assert!(last.contains("ALL"), "node {id}: {last}; before: {said:?}");
            assert!(
                said.iter().any(|l| l.ends_with("FINAL Some([1, 2])")),
                "node {id} formed no view without node 3: {said:?}"
            );
        }
    }
    for (id, p) in &mut procs {
        let status = p.child.wait().unwrap();
        assert!(status.success(), "node {id} exited with {status}");
    }
}
