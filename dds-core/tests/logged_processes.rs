//! Total failure of a DCPS domain of real processes, and its restart over the network.
//!
//! Three processes, and in a second test five (this test binary re-run as
//! `logged_domain_child`), are the bootstrap members of a domain, each with a data directory of its own. Each writes a
//! PERSISTENT topic without pause and, every few samples, waits for them to be
//! acknowledged (durable in every member's log) and says so. Once every process has had
//! samples acknowledged past a round-dependent mark, all of them are SIGKILLed at once,
//! mid-stream. The next round restarts them from their data directories: they run the
//! restart protocol (`spindle_group::restart`: reports to the leader, node 1; its plan
//! from a majority of the last logged view; logs brought to the restored state), the
//! domain resumes in the view after the last logged one, and each process reads the
//! durable history back through a PERSISTENT reader. Rounds alternate tcp and shm.
//!
//! Checked per round, per writer of every earlier round: every sample acknowledged before
//! the kill is in every process's history after the restart (present ≥ acknowledged), the
//! history of each writer is a prefix of what it wrote (no gap, nothing it did not
//! write), and every process reads the same history.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use spindle_dds_core::{
    Contact, DomainParticipantFactory, Error, ParticipantConfig, StateMask, Transport,
};
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

/// Kill-and-restart rounds on one set of data directories (bounded for CI time: about
/// half a second each on an idle machine).
const ROUNDS: u32 = 20;
/// The tests of this file run one at a time (each spawns its own domain of processes; at
/// once they would be 11 processes on the CI machine's two cores, slow enough for the
/// failure detector to exclude members).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The domain sizes the tests run: every process a bootstrap member.
const SMALL: u32 = 3;
const LARGE: u32 = 5;
/// Liveness bound per wait (not a timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);
/// Samples a child writes between two waits for acknowledgment.
const ACK_EVERY: u64 = 25;
const TOPIC: &str = "flight-recorder";
const ENV_DIR: &str = "SPINDLE_LOGGED_DOMAIN_DIR";
const ENV_ID: &str = "SPINDLE_LOGGED_DOMAIN_ID";
const ENV_ROUND: &str = "SPINDLE_LOGGED_DOMAIN_ROUND";
const ENV_TRANSPORT: &str = "SPINDLE_LOGGED_DOMAIN_TRANSPORT";
/// The child's entity time-out (its restart's too), if not `WAIT_MAX`.
const ENV_TIMEOUT_MS: &str = "SPINDLE_LOGGED_DOMAIN_TIMEOUT_MS";
/// A late member's restart time-out in `a_member_back_after_the_restart_joins_with_its_log`.
const LATE_TIMEOUT_MS: u64 = 4_000;
/// `id=listen=address,...` for the members.
const ENV_MEMBERS: &str = "SPINDLE_LOGGED_DOMAIN_MEMBERS";

fn persistent() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_durability(DurabilityKind::Persistent)
        .with_history(History::keep_all())
}

/// A child process: one bootstrap member that writes until it is killed.
#[test]
#[ignore = "spawned by total_failure_of_a_dcps_domain_and_restart_over_the_network"]
fn logged_domain_child() {
    let (Ok(dir), Ok(id), Ok(round), Ok(transport), Ok(members)) = (
        std::env::var(ENV_DIR),
        std::env::var(ENV_ID),
        std::env::var(ENV_ROUND),
        std::env::var(ENV_TRANSPORT),
        std::env::var(ENV_MEMBERS),
    ) else {
        return;
    };
    let id: u32 = id.parse().unwrap();
    let transport = if transport == "shm" {
        Transport::Shm
    } else {
        Transport::Tcp
    };
    let mut listen = String::new();
    let mut contacts = Vec::new();
    for m in members.split(',') {
        let mut it = m.splitn(3, '=');
        let (n, l, a) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let n: u32 = n.parse().unwrap();
        if n == id {
            listen = l.to_string();
        }
        contacts.push(Contact {
            node: n,
            address: a.to_string(),
        });
    }
    let mut cfg = ParticipantConfig::new(id, transport, listen);
    cfg.bootstrap = contacts.iter().map(|c| c.node).collect();
    cfg.contacts = contacts;
    cfg.data_dir = Some(std::path::Path::new(&dir).join(format!("node-{id}")));
    // Nobody is excluded here on purpose (every process dies by SIGKILL, all at once).
    common::procs::tolerate_stalls(&mut cfg);
    cfg.entity_timeout_ms =
        std::env::var(ENV_TIMEOUT_MS).map_or(WAIT_MAX.as_millis() as u64, |t| t.parse().unwrap());
    let p = DomainParticipantFactory::instance()
        .create_participant(0, Default::default(), &cfg)
        .unwrap();
    println!("STARTED view {}", p.view().unwrap().vid);
    let t = p.create_topic::<KeyedString>(TOPIC, persistent()).unwrap();
    let w = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t, DataWriterQos::from_topic_qos(&persistent()))
        .unwrap();
    let r = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t, DataReaderQos::from_topic_qos(&persistent()))
        .unwrap();
    // The history this process reads back: per writer "r<round>-n<node>", the highest
    // k and how many samples (a prefix has k + 1).
    let mut per_writer: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in r.read(usize::MAX, StateMask::ANY).unwrap() {
        let Some(d) = s.data else { continue };
        let Some((writer, k)) = d.value.rsplit_once("-k") else {
            continue;
        };
        if writer.starts_with(&format!("r{round}-")) {
            continue; // this round's writers, already writing
        }
        let e = per_writer.entry(writer.to_string()).or_default();
        e.0 = e.0.max(k.parse().unwrap());
        e.1 += 1;
    }
    for (writer, (k, count)) in &per_writer {
        println!("HISTORY {writer} {k} {count}");
    }
    println!("READY");
    for k in 0u64.. {
        let v = KeyedString {
            key: format!("n{id}"),
            value: format!("r{round}-n{id}-k{k}"),
        };
        // A write blocked past RELIABILITY max_blocking_time (a view change wedged the
        // subgroup: the other processes' entities come in one view change each) returns
        // `Timeout`, and the application writes again, up to `WAIT_MAX`.
        let since = std::time::Instant::now();
        let written = loop {
            match w.write(&v) {
                Err(Error::Timeout(_)) if since.elapsed() < WAIT_MAX => continue,
                other => break other,
            }
        };
        if let Err(e) = written {
            println!("GAVE UP writing sample {k}: {e}");
            break;
        }
        // Mid-stream, but bounded: what the stores keep over all rounds stays far below
        // STORE_SAMPLES_MAX.
        std::thread::sleep(Duration::from_millis(1));
        if (k + 1) % ACK_EVERY == 0 {
            if let Err(e) = w.wait_for_acknowledgments(WAIT_MAX) {
                println!("GAVE UP waiting for sample {}: {e}", k + 1);
                break;
            }
            println!("ACKED {}", k + 1);
        }
    }
}

fn spawn(dir: &std::path::Path, id: u32, round: u32, transport: &str, members: &str) -> Child {
    spawn_with(
        dir,
        id,
        round,
        transport,
        members,
        WAIT_MAX.as_millis() as u64,
    )
}

fn spawn_with(
    dir: &std::path::Path,
    id: u32,
    round: u32,
    transport: &str,
    members: &str,
    timeout_ms: u64,
) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "logged_domain_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_DIR, dir)
        .env(ENV_ID, id.to_string())
        .env(ENV_ROUND, round.to_string())
        .env(ENV_TRANSPORT, transport)
        .env(ENV_MEMBERS, members)
        .env(ENV_TIMEOUT_MS, timeout_ms.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join(format!("node-{id}-round-{round}.stderr"))).unwrap(),
        ))
        .spawn()
        .unwrap()
}

/// What the children of `round` wrote to stderr (for a failure's message).
fn stderr_of(dir: &std::path::Path, ids: &[u32], round: u32) -> String {
    ids.iter()
        .map(|id| {
            let p = dir.join(format!("node-{id}-round-{round}.stderr"));
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            // The panic's message (the line after "panicked at"), not the backtrace.
            let lines: Vec<&str> = text.lines().collect();
            let why: Vec<&str> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.contains("panicked at"))
                .flat_map(|(i, _)| lines[i..(i + 2).min(lines.len())].iter().copied())
                .collect();
            format!("node {id}: {why:?}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text after `tag` in a child's stdout line (the harness may print before it).
fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|i| &line[i + tag.len()..])
}

/// Kills (SIGKILL) and reaps the children left when a round fails half-way.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn total_failure_of_a_dcps_domain_and_restart_over_the_network() {
    let _serial = one_at_a_time();
    total_failure_and_restart(SMALL);
}

#[test]
fn total_failure_of_five_processes_and_restart_over_the_network() {
    let _serial = one_at_a_time();
    total_failure_and_restart(LARGE);
}

/// `ROUNDS` rounds of: `n` processes start (restarting from their data directories after
/// the first), write until each had samples acknowledged, and are all SIGKILLed.
fn total_failure_and_restart(n: u32) {
    let ids: Vec<u32> = (1..=n).collect();
    let dir = tempfile::tempdir().unwrap();
    // Per writer of an earlier round: samples acknowledged before its kill.
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..ROUNDS {
        let transport = ["tcp", "shm"][round as usize % 2];
        let ns = format!("lg{}n{n}r{round}", std::process::id());
        let members: Vec<String> = ids
            .iter()
            .map(|id| {
                if transport == "tcp" {
                    let port = common::procs::loopback_port();
                    format!("{id}=127.0.0.1:{port}=127.0.0.1:{port}")
                } else {
                    format!("{id}={ns}={}", ParticipantConfig::shm_address(&ns, *id))
                }
            })
            .collect();
        let members = members.join(",");
        let mut children = Children(
            ids.iter()
                .map(|id| spawn(dir.path(), *id, round, transport, &members))
                .collect(),
        );
        let (tx, rx) = mpsc::channel::<(usize, String)>();
        for (i, c) in children.0.iter_mut().enumerate() {
            let out = c.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((i, line)).is_err() {
                        break;
                    }
                }
            });
        }
        // Each child's history and first view, then acknowledgments past the mark.
        let mut history: Vec<BTreeMap<String, (u64, u64)>> = vec![BTreeMap::new(); ids.len()];
        let mut views = vec![0u32; ids.len()];
        let mut ready = vec![false; ids.len()];
        let mut acks = vec![0u64; ids.len()];
        let mark = ACK_EVERY * (2 + u64::from(round % 3));
        let give_up = std::time::Instant::now() + 3 * WAIT_MAX;
        while ready.iter().any(|r| !r) || acks.iter().any(|a| *a < mark) {
            assert!(
                std::time::Instant::now() < give_up,
                "round {round} ({transport}): ready {ready:?}, acks {acks:?} after {:?}\n{}",
                3 * WAIT_MAX,
                stderr_of(dir.path(), &ids, round)
            );
            let (i, line) = rx.recv_timeout(WAIT_MAX).unwrap_or_else(|e| {
                panic!(
                    "round {round} ({transport}): ready {ready:?}, acks {acks:?}: {e}\n{}",
                    stderr_of(dir.path(), &ids, round)
                )
            });
            if let Some(v) = after(&line, "STARTED view ") {
                views[i] = v.trim().parse().unwrap();
            } else if let Some(h) = after(&line, "HISTORY ") {
                let f: Vec<&str> = h.split_whitespace().collect();
                history[i].insert(
                    f[0].to_string(),
                    (f[1].parse().unwrap(), f[2].parse().unwrap()),
                );
            } else if after(&line, "READY").is_some() {
                ready[i] = true;
            } else if let Some(a) = after(&line, "ACKED ") {
                acks[i] = acks[i].max(a.trim().parse().unwrap());
            } else if let Some(why) = after(&line, "GAVE UP ") {
                panic!(
                    "round {round} ({transport}): node {} gave up {why}; ready {ready:?}, \
                     acks {acks:?}\n{}",
                    ids[i],
                    stderr_of(dir.path(), &ids, round)
                );
            }
        }
        // Mid-stream: every process dies at once.
        for c in &mut children.0 {
            c.kill().unwrap();
        }
        for c in &mut children.0 {
            let _ = c.wait();
        }
        while let Ok((i, line)) = rx.try_recv() {
            if let Some(a) = after(&line, "ACKED ") {
                acks[i] = acks[i].max(a.trim().parse().unwrap());
            }
        }
        // What came back from the logs at the start of this round.
        for (i, h) in history.iter().enumerate() {
            assert_eq!(
                h, &history[0],
                "round {round}: node {} reads the same history",
                ids[i]
            );
            for (writer, (k, count)) in h {
                assert_eq!(
                    count,
                    &(k + 1),
                    "round {round}: {writer}'s history has a gap"
                );
            }
        }
        for (writer, before) in &acked {
            let present = history[0].get(writer).map_or(0, |(_, c)| *c);
            assert!(
                present >= *before,
                "round {round}: {writer}: {before} acknowledged before the kill, {present} \
                 read back after the restart"
            );
        }
        if round > 0 {
            assert!(
                views.iter().all(|v| *v > 1),
                "round {round}: restarted in view {views:?}"
            );
        }
        let present: u64 = history[0].values().map(|(_, c)| c).sum();
        eprintln!(
            "{n} processes, round {round} ({transport}): first views {views:?}; {} samples of {} earlier \
             writers acknowledged before their kill, {present} read back after the restart; \
             this round acknowledged {acks:?} before the kill",
            acked.values().sum::<u64>(),
            acked.len(),
        );
        for (i, id) in ids.iter().enumerate() {
            acked.insert(format!("r{round}-n{id}"), acks[i]);
        }
    }
    // Offline, after the last kill: every restart brought the logs to one restored
    // state, so everything before the last round is the same sequence in each.
    let sg =
        spindle_dds_core::subgroup_of(TOPIC, spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT);
    let last = format!("r{}-", ROUNDS - 1);
    let logs: Vec<Vec<(spindle_log::Version, String)>> = ids
        .iter()
        .map(|id| {
            let d = dir
                .path()
                .join(format!("node-{id}"))
                .join(format!("subgroup-{sg}"));
            let mut log = spindle_log::Log::open(&d, spindle_log::LogConfig::default()).unwrap();
            log.range(..)
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let body = &e.payload[spindle_dds_core::sample::SAMPLE_HEADER_BYTES..];
                    let v = <KeyedString as spindle_topics::TopicType>::decode(body).unwrap();
                    (e.meta.version, v.value)
                })
                .filter(|(_, v)| !v.starts_with(&last))
                .collect()
        })
        .collect();
    for (id, log) in ids.iter().zip(&logs) {
        assert_eq!(log, &logs[0], "node {id}'s log before the last round");
    }
    let total: u64 = acked
        .iter()
        .filter(|(w, _)| !w.starts_with(&last))
        .map(|(_, a)| a)
        .sum();
    assert!(
        logs[0].len() as u64 >= total,
        "{} logged, {total} acknowledged",
        logs[0].len()
    );
    eprintln!(
        "after {ROUNDS} rounds: the {n} logs agree on {} entries before the last round \
         ({total} of them acknowledged before their kill)",
        logs[0].len()
    );
}

/// Reads `child`'s stdout lines into `tx`, tagged `i`.
fn forward(child: &mut Child, i: usize, tx: &mpsc::Sender<(usize, String)>) {
    let out = child.stdout.take().unwrap();
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((i, line)).is_err() {
                break;
            }
        }
    });
}

/// Per writer: the highest k read back and how many samples.
type ReadBack = BTreeMap<String, (u64, u64)>;

/// Waits until child `i` printed READY and acknowledged at least `mark` samples; returns
/// the history it printed (writer → (highest k, count)).
fn wait_ready(
    rx: &mpsc::Receiver<(usize, String)>,
    want: &[usize],
    mark: u64,
    what: &str,
) -> BTreeMap<usize, (ReadBack, u64)> {
    let mut got: BTreeMap<usize, (ReadBack, u64)> = BTreeMap::new();
    let mut ready = std::collections::BTreeSet::new();
    let give_up = std::time::Instant::now() + 3 * WAIT_MAX;
    while want
        .iter()
        .any(|i| !ready.contains(i) || got.get(i).map_or(0, |g| g.1) < mark)
    {
        assert!(
            std::time::Instant::now() < give_up,
            "{what}: ready {ready:?} after {:?}",
            3 * WAIT_MAX
        );
        let (i, line) = rx
            .recv_timeout(WAIT_MAX)
            .unwrap_or_else(|e| panic!("{what}: ready {ready:?}: {e}"));
        let g = got.entry(i).or_default();
        if let Some(h) = after(&line, "HISTORY ") {
            let f: Vec<&str> = h.split_whitespace().collect();
            g.0.insert(
                f[0].to_string(),
                (f[1].parse().unwrap(), f[2].parse().unwrap()),
            );
        } else if after(&line, "READY").is_some() {
            ready.insert(i);
        } else if let Some(a) = after(&line, "ACKED ") {
            g.1 = g.1.max(a.trim().parse().unwrap());
        } else if let Some(why) = after(&line, "GAVE UP ") {
            panic!("{what}: child {i} gave up {why}; ready {ready:?}");
        }
    }
    got
}

/// Derecho's restart leaves out a member that comes back after the leader decided; it
/// joins the restarted domain as a new member instead, with its log. Three processes write
/// and are SIGKILLed; nodes 1 and 2 restart (a majority: the leader decides after its
/// grace period) and write again; then node 3 comes back: its restart finds no leader
/// answering (the domain runs), times out, and it joins through its contacts. Checked: it
/// reads back every sample acknowledged before the kill, the same history as the others;
/// and after a last kill the three logs are prefixes of one sequence.
#[test]
fn a_member_back_after_the_restart_joins_with_its_log() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ids = [1u32, 2, 3];
    let members: Vec<String> = ids
        .iter()
        .map(|id| {
            let port = common::procs::loopback_port();
            format!("{id}=127.0.0.1:{port}=127.0.0.1:{port}")
        })
        .collect();
    let members = members.join(",");
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    // Round 0: all three write, then die at once.
    let mut children = Children(
        ids.iter()
            .map(|id| spawn(dir.path(), *id, 0, "tcp", &members))
            .collect(),
    );
    for (i, c) in children.0.iter_mut().enumerate() {
        forward(c, i, &tx);
    }
    let first = wait_ready(&rx, &[0, 1, 2], 2 * ACK_EVERY, "round 0");
    for c in &mut children.0 {
        c.kill().unwrap();
    }
    for c in &mut children.0 {
        let _ = c.wait();
    }
    let mut acked: BTreeMap<String, u64> = first
        .iter()
        .map(|(i, (_, a))| (format!("r0-n{}", ids[*i]), *a))
        .collect();
    while let Ok((i, line)) = rx.try_recv() {
        if let Some(a) = after(&line, "ACKED ") {
            let e = acked.entry(format!("r0-n{}", ids[i])).or_default();
            *e = (*e).max(a.trim().parse().unwrap());
        }
    }
    // Round 1: nodes 1 and 2 restart without 3; then 3 comes back, late.
    children.0.clear();
    for (i, id) in ids[..2].iter().enumerate() {
        let mut c = spawn(dir.path(), *id, 1, "tcp", &members);
        forward(&mut c, i, &tx);
        children.0.push(c);
    }
    let early = wait_ready(&rx, &[0, 1], ACK_EVERY, "round 1, nodes 1 and 2");
    let mut c = spawn_with(dir.path(), 3, 1, "tcp", &members, LATE_TIMEOUT_MS);
    forward(&mut c, 2, &tx);
    children.0.push(c);
    let late = wait_ready(&rx, &[2], ACK_EVERY, "round 1, node 3 (late)");
    let history = |h: &ReadBack| -> ReadBack {
        h.iter()
            .filter(|(w, _)| w.starts_with("r0-"))
            .map(|(w, v)| (w.clone(), *v))
            .collect()
    };
    let h3 = history(&late[&2].0);
    assert_eq!(h3, history(&early[&0].0), "node 3 reads what node 1 read");
    assert_eq!(h3, history(&early[&1].0), "node 3 reads what node 2 read");
    for (writer, before) in &acked {
        let (k, present) = h3.get(writer).copied().unwrap_or((0, 0));
        assert!(
            present >= *before && (present == 0 || present == k + 1),
            "{writer}: {before} acknowledged before the kill, {present} read back by the late \
             member (highest k {k})"
        );
    }
    for c in &mut children.0 {
        c.kill().unwrap();
    }
    for c in &mut children.0 {
        let _ = c.wait();
    }
    // Offline: the three logs are prefixes of one sequence.
    let sg =
        spindle_dds_core::subgroup_of(TOPIC, spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT);
    let logs: Vec<Vec<(spindle_log::Version, Vec<u8>)>> = ids
        .iter()
        .map(|id| {
            let d = dir
                .path()
                .join(format!("node-{id}"))
                .join(format!("subgroup-{sg}"));
            let mut log = spindle_log::Log::open(&d, spindle_log::LogConfig::default()).unwrap();
            log.range(..)
                .unwrap()
                .map(|e| e.map(|e| (e.meta.version, e.payload)).unwrap())
                .collect()
        })
        .collect();
    let longest = logs.iter().max_by_key(|l| l.len()).unwrap();
    for (id, log) in ids.iter().zip(&logs) {
        assert!(
            log[..] == longest[..log.len()],
            "node {id}'s log ({} entries) is not a prefix of the longest ({})",
            log.len(),
            longest.len()
        );
    }
    eprintln!(
        "acknowledged before the kill {acked:?}; the late member read back {:?}; logs {:?}",
        h3.values().map(|v| v.1).collect::<Vec<_>>(),
        logs.iter().map(Vec::len).collect::<Vec<_>>()
    );
}
