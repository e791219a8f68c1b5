//! A hung participant is excluded, wakes, and — configured with `rejoin = true` — joins
//! the domain again as a new member, with its reader and writer kept.
//!
//! Three processes (this test binary re-run as `rejoin_child`) form a domain over tcp on
//! loopback: node 1 bootstraps it, nodes 2 and 3 join through it. Each writes a RELIABLE VOLATILE keep-all topic without end (every
//! few milliseconds) and takes everything it delivers, in order. Node 3 alone sets
//! `rejoin = true`. The test SIGSTOPs node 3 until nodes 1 and 2 installed a view
//! without it, then SIGCONTs it. Checked:
//! * node 3's stopped listener fires, saying it was excluded;
//! * node 3 becomes a member again (a later view with all three), without a restart;
//! * after that, node 3 takes samples of nodes 1 and 2, and they take node 3's samples
//!   written after it rejoined (its writer and reader survived);
//! * virtual synchrony: nodes 1 and 2 took the same samples in the same order (one
//!   sequence a prefix of the other), and what node 3 took after rejoining is one
//!   contiguous stretch of that order (it joined the total order at one point and lost
//!   nothing after it).
//!
//! No timing is asserted: every wait has a generous deadline.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_dds_core::{DomainParticipantFactory, StateMask};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

mod common;
use common::procs::{loopback_members, member_config, spawn_child, ChildProc};

const IDS: [u32; 3] = [1, 2, 3];
/// The member that hangs and rejoins.
const HUNG: u32 = 3;
/// Every wait of the test and of the children.
const WAIT_MAX: Duration = Duration::from_secs(90);
const TOPIC: &str = "rejoin-topic";
const ENV_ID: &str = "SPINDLE_REJOIN_CHILD_ID";
const ENV_MEMBERS: &str = "SPINDLE_REJOIN_CHILD_MEMBERS";
const ENV_OUT: &str = "SPINDLE_REJOIN_CHILD_OUT";
/// Pause between two writes of a child.
const WRITE_PAUSE: Duration = Duration::from_millis(4);

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_history(History::keep_all())
}

/// A child: one bootstrap member that writes and takes until its stdin says `QUIT`, then
/// writes what it took (one `writer:k` per line) to its output file.
#[test]
#[ignore = "spawned by a_hung_participant_with_rejoin_joins_again_and_keeps_its_entities"]
fn rejoin_child() {
    let (Ok(id), Ok(members), Ok(out)) = (
        std::env::var(ENV_ID),
        std::env::var(ENV_MEMBERS),
        std::env::var(ENV_OUT),
    ) else {
        return;
    };
    let id: u32 = id.parse().unwrap();
    let mut cfg = member_config(id, &members);
    cfg.bootstrap = vec![1];
    cfg.rejoin = id == HUNG;
    cfg.entity_timeout_ms = WAIT_MAX.as_millis() as u64;
    // (`member_config` tolerates a loaded machine's stalls: only the real hang is suspected.)
    let p = DomainParticipantFactory::instance()
        .create_participant(0, Default::default(), &cfg)
        .unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    {
        let stopped = Arc::clone(&stopped);
        p.set_stopped_listener(move |why| {
            println!("STOPPED {why}");
            stopped.store(true, Ordering::Release);
        });
    }
    let t = p.create_topic::<KeyedString>(TOPIC, qos()).unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(
            &t,
            DataWriterQos::from_topic_qos(&qos()).with_max_blocking_time(
                spindle_qos::Duration::from_secs(WAIT_MAX.as_secs() as i64),
            ),
        )
        .unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, DataReaderQos::from_topic_qos(&qos()))
        .unwrap();
    let quit = Arc::new(AtomicBool::new(false));
    {
        let quit = Arc::clone(&quit);
        std::thread::spawn(move || {
            for l in std::io::stdin().lock().lines().map_while(Result::ok) {
                if l.trim() == "QUIT" {
                    quit.store(true, Ordering::Release);
                }
            }
        });
    }
    println!("READY");
    let mut taken: Vec<String> = Vec::new();
    let mut last_vid = 0;
    // After a stop: the view that holds this node again, and the first samples of each
    // other writer taken since.
    let mut rejoined = false;
    let mut fresh_from: Vec<String> = Vec::new();
    let mut k = 0u64;
    while !quit.load(Ordering::Acquire) {
        // Writes fail only where no rejoin is configured and the participant stopped.
        let v = KeyedString {
            key: format!("n{id}"),
            value: format!("n{id}:{k}"),
        };
        if w.write(&v).is_ok() {
            k += 1;
        }
        for s in r.take(usize::MAX, StateMask::ANY).unwrap_or_default() {
            let Some(d) = s.data else { continue };
            let writer = d.value.split(':').next().unwrap_or_default().to_string();
            if rejoined && writer != format!("n{id}") && !fresh_from.contains(&writer) {
                println!("FRESH {writer}");
                fresh_from.push(writer);
            }
            taken.push(d.value);
        }
        if let Some(v) = p.view() {
            if v.vid != last_vid {
                last_vid = v.vid;
                let members: Vec<String> = v.members.iter().map(u32::to_string).collect();
                println!("VIEW {} {}", v.vid, members.join(","));
                if stopped.load(Ordering::Acquire)
                    && p.stopped().is_none()
                    && v.members.contains(&id)
                    && !rejoined
                {
                    rejoined = true;
                    // What this node takes from here on is its new incarnation's.
                    taken.push("REJOINED".into());
                    println!("REJOINED {} {k}", v.vid);
                }
            }
        }
        std::thread::sleep(WRITE_PAUSE);
    }
    let mut f = std::fs::File::create(&out).unwrap();
    for t in &taken {
        writeln!(f, "{t}").unwrap();
    }
    f.sync_all().unwrap();
    println!("DONE {}", taken.len());
}

/// Waits for a line of `p` for which `pick` gives something; panics after [`WAIT_MAX`].
fn wait_for<R>(p: &ChildProc, what: &str, mut pick: impl FnMut(&str) -> Option<R>) -> R {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match p.lines.recv_timeout(left) {
            Ok(l) => {
                if let Some(r) = pick(&l) {
                    return r;
                }
            }
            Err(e) => panic!("waiting for {what}: {e:?}"),
        }
    }
}

fn spawn(id: u32, members: &str, out: &std::path::Path, err: &std::path::Path) -> ChildProc {
    spawn_child(
        "rejoin_child",
        &[
            (ENV_ID, id.to_string()),
            (ENV_MEMBERS, members.to_string()),
            (ENV_OUT, out.display().to_string()),
            ("RUST_LOG", "warn".to_string()),
        ],
        Stdio::from(std::fs::File::create(err).unwrap()),
    )
}

fn signal(p: &ChildProc, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &p.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} failed");
}

/// `VIEW <vid> <members>` → (vid, members).
fn view_of(line: &str) -> Option<(u32, Vec<u32>)> {
    let rest = &line[line.find("VIEW ")? + 5..];
    let (vid, members) = rest.split_once(' ')?;
    let members = members.split(',').filter_map(|m| m.parse().ok()).collect();
    Some((vid.parse().ok()?, members))
}

#[test]
fn a_hung_participant_with_rejoin_joins_again_and_keeps_its_entities() {
    let dir = tempfile::tempdir().unwrap();
    let members = loopback_members(&IDS);
    let out = |id: u32| dir.path().join(format!("taken-{id}.txt"));
    let err = |id: u32| dir.path().join(format!("node-{id}.stderr"));
    let mut procs: Vec<ChildProc> = Vec::new();
    for id in IDS {
        let p = spawn(id, &members, &out(id), &err(id));
        wait_for(&p, "READY", |l| l.contains("READY").then_some(()));
        procs.push(p);
    }
    let stderr_all = || {
        IDS.iter()
            .map(|id| {
                let text = std::fs::read_to_string(err(*id)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "node {id}: {:?}",
                    tail.into_iter().rev().collect::<Vec<_>>()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Every member sees the view of all three (its lines before are of earlier views).
    let mut full = 0;
    for p in &procs {
        let vid = wait_for(p, "the view of all three", |l| {
            view_of(l).and_then(|(vid, m)| (m.len() == IDS.len()).then_some(vid))
        });
        full = full.max(vid);
    }
    // Mid-stream, node 3 hangs until the others moved on without it.
    std::thread::sleep(Duration::from_millis(300));
    let hung = &procs[(HUNG - 1) as usize];
    signal(hung, "-STOP");
    let mut without = 0;
    for p in &procs[..2] {
        let vid = wait_for(p, "a view without node 3", |l| {
            view_of(l).and_then(|(vid, m)| (vid > full && !m.contains(&HUNG)).then_some(vid))
        });
        without = without.max(vid);
    }
    signal(hung, "-CONT");
    let why = wait_for(hung, "node 3's stopped listener", |l| {
        l.find("STOPPED ").map(|i| l[i + 8..].to_string())
    });
    assert!(
        why.contains("excluded"),
        "node 3 stopped, but not saying it was excluded: {why:?}\n{}",
        stderr_all()
    );
    let (back_vid, written_before) = wait_for(hung, "node 3 rejoining", |l| {
        let rest = &l[l.find("REJOINED ")? + 9..];
        let (vid, k) = rest.split_once(' ')?;
        Some((vid.parse::<u32>().ok()?, k.parse::<u64>().ok()?))
    });
    assert!(
        back_vid > without,
        "node 3 rejoined in view {back_vid}, not after view {without} that excluded it"
    );
    for p in &procs[..2] {
        wait_for(p, "a view with node 3 again", |l| {
            view_of(l).and_then(|(vid, m)| (vid > without && m.contains(&HUNG)).then_some(()))
        });
    }
    // Its reader and writer survived: it takes the others' samples, and they take its
    // samples written after the rejoin.
    let mut fresh = std::collections::BTreeSet::new();
    wait_for(hung, "node 3 taking samples of nodes 1 and 2", |l| {
        if let Some(i) = l.find("FRESH ") {
            fresh.insert(l[i + 6..].trim().to_string());
        }
        (fresh.contains("n1") && fresh.contains("n2")).then_some(())
    });
    // Let everyone run a little in the new view, then stop.
    std::thread::sleep(Duration::from_millis(500));
    for p in &mut procs {
        writeln!(p.stdin, "QUIT").unwrap();
    }
    for p in &procs {
        wait_for(p, "DONE", |l| l.contains("DONE").then_some(()));
    }
    let read = |id: u32| -> Vec<String> {
        std::fs::read_to_string(out(id))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (one, two, three) = (read(1), read(2), read(3));
    // Virtual synchrony: node 2 joined node 1's total order at one point and took every
    // sample after it in the same order (node 1 bootstrapped: it took them all).
    assert_stretch_of("node 2", &two, &one);
    // Node 3's samples written after it rejoined reached both survivors.
    for (name, seq) in [("node 1", &one), ("node 2", &two)] {
        let late_from_3 = seq.iter().any(|v| {
            v.strip_prefix("n3:")
                .and_then(|k| k.parse::<u64>().ok())
                .is_some_and(|k| k >= written_before)
        });
        assert!(
            late_from_3,
            "{name} took none of node 3's samples written after it rejoined (k >= {written_before})"
        );
    }
    // What node 3 took after rejoining is one contiguous stretch of that order too.
    let after: Vec<String> = three
        .iter()
        .skip_while(|v| *v != "REJOINED")
        .skip(1)
        .cloned()
        .collect();
    assert_stretch_of("node 3 after rejoining", &after, &one);
}

/// Asserts that `part` (non-empty) is one contiguous stretch of `order`, as far as both
/// go: it starts somewhere in `order` and follows it sample by sample.
fn assert_stretch_of(name: &str, part: &[String], order: &[String]) {
    assert!(!part.is_empty(), "{name} took nothing");
    let start = order.iter().position(|v| *v == part[0]).unwrap_or_else(|| {
        panic!(
            "{name}'s first sample, {}, is not in node 1's order",
            part[0]
        )
    });
    let overlap = part.len().min(order.len() - start);
    for (i, v) in part[..overlap].iter().enumerate() {
        assert_eq!(
            v,
            &order[start + i],
            "{name}'s sample {i} differs from node 1's order (from its position {start})"
        );
    }
}
