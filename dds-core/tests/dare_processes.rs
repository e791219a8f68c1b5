//! A DCPS topic ordered by DARE (`atomic_ordering = "dare"`) across real processes, over
//! tcp and shm on loopback: the regression test of the election livelock seen with
//! `dds_perf --level dare` (no sample delivered: the two members stood again before the
//! other's grant came back; `sim_dare.rs` models it with slow writes).
//!
//! Three processes (this test binary re-run as `dare_child`) each write a RELIABLE
//! VOLATILE keep-all topic ([`SAMPLES`] samples, `n<id>:<k>`) once all three readers are
//! matched, and take everything they deliver. Checked:
//! * without faults, every process takes every sample, all three in one order, each
//!   writer's samples once and in the order written;
//! * with node 1 SIGKILLed midway, the survivors take all of each other's samples, both
//!   in one order (equal sequences), each writer's once and in order, node 1's a prefix
//!   of what it wrote.
//!
//! No timing is asserted: every wait has a generous deadline.

use std::io::{BufRead, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_dds_core::{
    AtomicOrdering, Contact, DomainParticipantFactory, ParticipantConfig, StateMask, Transport,
};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

mod common;
use common::procs::{spawn_child, ChildProc};

const IDS: [u32; 3] = [1, 2, 3];
/// Samples each process writes.
const SAMPLES: u64 = 300;
/// Every wait of the test and of the children.
const WAIT_MAX: Duration = Duration::from_secs(120);
const TOPIC: &str = "dare-topic";
const ENV_ID: &str = "SPINDLE_DARE_CHILD_ID";
const ENV_TRANSPORT: &str = "SPINDLE_DARE_CHILD_TRANSPORT";
/// Node 1's address for the others (absent for node 1, which bootstraps).
const ENV_CONTACT: &str = "SPINDLE_DARE_CHILD_CONTACT";
/// The shm namespace of a run (shm only).
const ENV_NAMESPACE: &str = "SPINDLE_DARE_CHILD_NAMESPACE";
const ENV_OUT: &str = "SPINDLE_DARE_CHILD_OUT";
/// Pause between two writes of a child.
const WRITE_PAUSE: Duration = Duration::from_millis(2);
/// How often a child writes its status to stderr (and its `TAKEN` line again).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// A failure shows at most this many of each child's other stderr lines (a panic's
/// message), and its last status lines.
const CONTEXT_LOG_LINES: usize = 60;
const CONTEXT_STATUS_LINES: usize = 3;
/// Node 2 takes this many of node 1's samples before node 1 is SIGKILLed.
const KILL_AFTER: usize = 50;
/// One run at a time: twelve processes at once would starve a small machine.
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_history(History::keep_all())
}

/// A child: a member with `atomic_ordering = "dare"` that writes [`SAMPLES`] samples once
/// every reader is matched, takes until its stdin says `QUIT`, then writes what it took
/// (one `n<id>:<k>` per line) to its output file.
#[test]
#[ignore = "spawned by the tests of this file"]
fn dare_child() {
    let (Ok(id), Ok(transport), Ok(out)) = (
        std::env::var(ENV_ID),
        std::env::var(ENV_TRANSPORT),
        std::env::var(ENV_OUT),
    ) else {
        return;
    };
    let id: u32 = id.parse().unwrap();
    let (transport, listen) = match transport.as_str() {
        "tcp" => (Transport::Tcp, "127.0.0.1:0".to_string()),
        _ => (Transport::Shm, std::env::var(ENV_NAMESPACE).unwrap()),
    };
    let mut cfg = ParticipantConfig::new(id, transport, listen);
    cfg.atomic_ordering = AtomicOrdering::Dare;
    match std::env::var(ENV_CONTACT) {
        Ok(address) => cfg.contacts = vec![Contact { node: 1, address }],
        Err(_) => cfg.bootstrap = vec![id],
    }
    cfg.entity_timeout_ms = WAIT_MAX.as_millis() as u64;
    // Only the SIGKILL may be suspected, and it is noticed at once (the end of its
    // streams), not by silence.
    common::procs::tolerate_stalls(&mut cfg);
    let p = DomainParticipantFactory::instance()
        .create_participant(0, Default::default(), &cfg)
        .unwrap();
    println!("ADDR {}", p.address());
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
    w.wait_for_readers(IDS.len() as u32, WAIT_MAX).unwrap();
    println!("READY");
    let mut taken: Vec<String> = Vec::new();
    let mut k = 0u64;
    let mut reported = 0;
    let mut last_status = Instant::now();
    let from = |taken: &[String], w: u32| {
        let prefix = format!("n{w}:");
        taken.iter().filter(|v| v.starts_with(&prefix)).count()
    };
    while !quit.load(Ordering::Acquire) {
        if k < SAMPLES {
            let v = KeyedString {
                key: format!("n{id}"),
                value: format!("n{id}:{k}"),
            };
            w.write(&v).unwrap();
            k += 1;
        }
        for s in r.take(usize::MAX, StateMask::ANY).unwrap() {
            if let Some(d) = s.data {
                taken.push(d.value);
            }
        }
        let status = last_status.elapsed() >= STATUS_EVERY;
        if status {
            // For the test's failure message (it shows the children's stderr).
            last_status = Instant::now();
            let (a, b, c) = (from(&taken, 1), from(&taken, 2), from(&taken, 3));
            let view = p.view().map(|v| (v.vid, v.members));
            eprintln!(
                "status: wrote {k}, took {a} {b} {c}, view {view:?}, stopped {:?}",
                p.stopped()
            );
        }
        // Also repeated with each status: a wait that consumed the last change (node 2's
        // line that triggers the kill may already hold everything) sees it again.
        if taken.len() != reported || status {
            reported = taken.len();
            let (a, b, c) = (from(&taken, 1), from(&taken, 2), from(&taken, 3));
            println!("TAKEN {} {a} {b} {c}", taken.len());
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

/// Waits for a line of `p` for which `pick` gives something; panics after [`WAIT_MAX`]
/// with `context()` (the children's stderr).
fn wait_for<R>(
    p: &ChildProc,
    what: &str,
    context: &dyn Fn() -> String,
    mut pick: impl FnMut(&str) -> Option<R>,
) -> R {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match p.lines.recv_timeout(left) {
            Ok(l) => {
                if let Some(r) = pick(&l) {
                    return r;
                }
            }
            Err(e) => panic!("waiting for {what}: {e:?}\n{}", context()),
        }
    }
}

/// `TAKEN <all> <from 1> <from 2> <from 3>` → the per-writer counts.
fn taken_of(line: &str) -> Option<[usize; 3]> {
    let rest = &line[line.find("TAKEN ")? + 6..];
    let n: Vec<usize> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (n.len() == 4).then(|| [n[1], n[2], n[3]])
}

/// Runs the three members over `transport`; with `kill`, node 1 is SIGKILLed once node 2
/// took [`KILL_AFTER`] of its samples. Checks the order (see the module docs).
fn run(transport: &str, kill: bool) {
    let _one = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = |id: u32| dir.path().join(format!("taken-{id}.txt"));
    let err = |id: u32| dir.path().join(format!("node-{id}.stderr"));
    let namespace = format!("dare{}{}", std::process::id(), u8::from(kill));
    // A failure shows each child's stderr lines other than its status (a panic's
    // message) and its last status lines: fifteen status lines only repeat the end state.
    let context = || {
        IDS.iter()
            .map(|id| {
                let text = std::fs::read_to_string(err(*id)).unwrap_or_default();
                let (status, logs): (Vec<&str>, Vec<&str>) =
                    text.lines().partition(|l| l.starts_with("status:"));
                let first_logs = &logs[..logs.len().min(CONTEXT_LOG_LINES)];
                let last_status = &status[status.len().saturating_sub(CONTEXT_STATUS_LINES)..];
                format!(
                    "node {id}: {} other stderr lines (first {}): {first_logs:#?}\nnode {id}: last status \
                     lines: {last_status:#?}",
                    logs.len(),
                    first_logs.len()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut procs: Vec<ChildProc> = Vec::new();
    let mut contact: Option<String> = None;
    for id in IDS {
        let mut env = vec![
            (ENV_ID, id.to_string()),
            (ENV_TRANSPORT, transport.to_string()),
            (ENV_NAMESPACE, namespace.clone()),
            (ENV_OUT, out(id).display().to_string()),
            ("RUST_LOG", "warn".to_string()),
        ];
        if let Some(a) = &contact {
            env.push((ENV_CONTACT, a.clone()));
        }
        let stderr = Stdio::from(std::fs::File::create(err(id)).unwrap());
        let p = spawn_child("dare_child", &env, stderr);
        let addr = wait_for(&p, "ADDR", &context, |l| {
            l.find("ADDR ").map(|i| l[i + 5..].trim().to_string())
        });
        contact.get_or_insert(addr);
        procs.push(p);
    }
    for p in &procs {
        wait_for(p, "READY", &context, |l| l.contains("READY").then_some(()));
    }
    let survivors: Vec<u32> = if kill {
        wait_for(&procs[1], "node 2 taking node 1's samples", &context, |l| {
            taken_of(l).and_then(|t| (t[0] >= KILL_AFTER).then_some(()))
        });
        procs[0].child.kill().unwrap();
        procs[0].child.wait().unwrap();
        vec![2, 3]
    } else {
        IDS.to_vec()
    };
    // Each survivor takes every sample of every survivor (and, without the kill, all).
    for id in &survivors {
        let p = &procs[(*id - 1) as usize];
        wait_for(p, "every survivor's samples", &context, |l| {
            taken_of(l).and_then(|t| {
                survivors
                    .iter()
                    .all(|w| t[(*w - 1) as usize] as u64 == SAMPLES)
                    .then_some(())
            })
        });
    }
    for id in &survivors {
        writeln!(procs[(*id - 1) as usize].stdin, "QUIT").unwrap();
    }
    for id in &survivors {
        wait_for(&procs[(*id - 1) as usize], "DONE", &context, |l| {
            l.contains("DONE").then_some(())
        });
    }
    let read = |id: u32| -> Vec<String> {
        std::fs::read_to_string(out(id))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let seqs: Vec<Vec<String>> = survivors.iter().map(|id| read(*id)).collect();
    // One order: any two sequences are one a prefix of the other. (With the kill, a
    // sample of node 1 ordered after the survivors' last may reach one survivor before
    // `QUIT` and the other after it.)
    for (id, seq) in survivors.iter().zip(&seqs).skip(1) {
        let n = seq.len().min(seqs[0].len());
        let differ = (0..n).find(|&i| seq[i] != seqs[0][i]);
        assert!(
            differ.is_none() && (kill || seq.len() == seqs[0].len()),
            "{transport}: node {id} took another sequence than node {} (lengths {} and {}, \
             first difference at {differ:?}: {:?} and {:?})",
            survivors[0],
            seq.len(),
            seqs[0].len(),
            differ.map(|i| &seq[i]),
            differ.map(|i| &seqs[0][i]),
        );
    }
    let longest = seqs.iter().max_by_key(|s| s.len()).expect("survivors");
    for w in IDS {
        let ks: Vec<u64> = longest
            .iter()
            .filter_map(|v| v.strip_prefix(&format!("n{w}:"))?.parse().ok())
            .collect();
        let want: Vec<u64> = (0..ks.len() as u64).collect();
        assert_eq!(
            ks, want,
            "{transport}: writer {w}'s samples, once, in order"
        );
        if survivors.contains(&w) {
            assert_eq!(
                ks.len() as u64,
                SAMPLES,
                "{transport}: writer {w}'s samples"
            );
        }
    }
}

#[test]
fn a_dare_topic_delivers_every_sample_in_one_order_over_tcp() {
    run("tcp", false);
}

#[test]
fn a_dare_topic_delivers_every_sample_in_one_order_over_shm() {
    run("shm", false);
}

#[test]
fn a_dare_topic_keeps_one_order_when_a_process_is_killed_over_tcp() {
    run("tcp", true);
}

#[test]
fn a_dare_topic_keeps_one_order_when_a_process_is_killed_over_shm() {
    run("shm", true);
}
