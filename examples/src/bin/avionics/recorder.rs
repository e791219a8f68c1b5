//! The flight-data recorder: a logged topic (RELIABLE + DURABILITY PERSISTENT, the
//! LoggedStore level) that survives the loss of every process.
//!
//! `avionics recorder` runs three recorder processes, the bootstrap members of a domain of
//! their own, each with a data directory (`<out>/fdr-<node>`). Each records events
//! (`HealthHeartbeat` samples on the topic `FlightDataRecorder`, one instance per
//! recorder) and, every [`ACK_EVERY`] events, waits until they are durable in every
//! member's log (`DataWriter::wait_for_acknowledgments`). After `--seconds`, the whole
//! domain is SIGKILLed at once, mid-stream. Then the three restart from their data
//! directories: they run the restart protocol (the restart leader, node 1, collects the
//! last logged view and each log's end from a majority, every log is brought to the
//! restored state), the domain resumes in the view after the last logged one, and each
//! restarted process reads the recorder's history back through a PERSISTENT reader. The
//! driver checks that every event acknowledged before the kill is read back by every
//! process, without a gap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use spindle_dds_core::{
    Contact, DomainParticipant, DomainParticipantFactory, ParticipantConfig, StateMask, Transport,
};
use spindle_examples::procs::{free_port, BoxError, Proc};
use spindle_examples::run_dir::RunDir;
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, TopicQos};
use spindle_topics::avionics::{HealthHeartbeat, HealthStatus};

/// The logged topic.
pub const TOPIC: &str = "FlightDataRecorder";
/// The recorder processes' node ids: every one a bootstrap member.
const RECORDERS: [u32; 3] = [1, 2, 3];
/// Events a recorder writes between two waits for acknowledgment.
pub const ACK_EVERY: u64 = 20;
/// How long a process or a wait may take before the run fails (a liveness bound).
const WAIT_MAX: Duration = Duration::from_secs(60);

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_durability(DurabilityKind::Persistent)
        .with_history(History::keep_all())
}

fn writer_qos() -> DataWriterQos {
    let mut q = DataWriterQos::from_topic_qos(&qos());
    q.reliability.max_blocking_time = spindle_qos::Duration::from_secs(10);
    q
}

/// One recorder process: `phase` is `record` (write events until killed) or `read` (read
/// the history back, then wait for EXIT).
pub fn member(
    node: u32,
    transport: &str,
    members: &str,
    data_dir: &Path,
    phase: &str,
) -> Result<(), BoxError> {
    let t = match transport {
        "tcp" => Transport::Tcp,
        "shm" => Transport::Shm,
        t => return Err(format!("transport {t:?}: tcp or shm").into()),
    };
    let mut listen = String::new();
    let mut contacts = Vec::new();
    for m in members.split(',') {
        let mut it = m.splitn(3, '=');
        let (Some(n), Some(l), Some(a)) = (it.next(), it.next(), it.next()) else {
            return Err(format!("member {m:?}: expected node=listen=address").into());
        };
        let n: u32 = n.parse()?;
        if n == node {
            listen = l.to_string();
        }
        contacts.push(Contact {
            node: n,
            address: a.to_string(),
        });
    }
    let mut cfg = ParticipantConfig::new(node, t, listen);
    cfg.bootstrap = RECORDERS.to_vec();
    cfg.contacts = contacts;
    cfg.data_dir = Some(data_dir.to_path_buf());
    cfg.entity_timeout_ms = WAIT_MAX.as_millis() as u64;
    let p = DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?;
    super::line(&format!("VIEW {}", p.view().map_or(0, |v| v.vid)))?;
    match phase {
        "record" => record(&p, node),
        "read" => read_back(&p),
        other => Err(format!("recorder phase {other:?}: record or read").into()),
    }
}

fn record(p: &DomainParticipant, node: u32) -> Result<(), BoxError> {
    let t = p.create_topic::<HealthHeartbeat>(TOPIC, qos())?;
    let w = p
        .create_publisher(Default::default())?
        .create_datawriter(&t, writer_qos())?;
    super::line("READY")?;
    for k in 0u64.. {
        w.write(&HealthHeartbeat {
            aircraft_id: 0xA1,
            subsystem: format!("fdr{node}"),
            sequence_number: k as u32,
            status: HealthStatus::default(),
            severity_code: 'I',
            temperature_c: 21,
            detail: format!("event {k}"),
            fault_codes: Vec::new(),
        })?;
        if (k + 1) % ACK_EVERY == 0 {
            w.wait_for_acknowledgments(WAIT_MAX)?;
            super::line(&format!("ACKED {}", k + 1))?;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn read_back(p: &DomainParticipant) -> Result<(), BoxError> {
    let t = p.create_topic::<HealthHeartbeat>(TOPIC, qos())?;
    // A writer makes the subgroup exist (its history comes with it); it writes nothing.
    let _w = p
        .create_publisher(Default::default())?
        .create_datawriter(&t, writer_qos())?;
    let r = p
        .create_subscriber(Default::default())?
        .create_datareader(&t, DataReaderQos::from_topic_qos(&qos()))?;
    // Per recorder: how many events, the highest sequence number.
    let mut per: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in r.read(usize::MAX, StateMask::ANY)? {
        let Some(d) = s.data else { continue };
        let e = per.entry(d.subsystem).or_default();
        e.0 += 1;
        e.1 = e.1.max(u64::from(d.sequence_number));
    }
    for (sub, (count, max)) in &per {
        super::line(&format!("READBACK {sub} {count} {max}"))?;
    }
    super::line("DONE")?;
    // Stay a member until every recorder has read (a leave would change the view).
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
    Ok(())
}

/// The members argument: `node=listen=address,...` for fresh listen addresses.
fn members(transport: &str, ns: &str) -> Result<String, BoxError> {
    let mut out = Vec::new();
    for n in RECORDERS {
        out.push(match transport {
            "tcp" => {
                let a = format!("127.0.0.1:{}", free_port()?);
                format!("{n}={a}={a}")
            }
            "shm" => format!("{n}={ns}={}", ParticipantConfig::shm_address(ns, n)),
            t => return Err(format!("--transport {t:?}: tcp or shm").into()),
        });
    }
    Ok(out.join(","))
}

fn spawn(
    node: u32,
    transport: &str,
    members: &str,
    out: &Path,
    phase: &str,
) -> Result<Proc, BoxError> {
    let args: Vec<String> = [
        "recorder-member",
        &node.to_string(),
        transport,
        members,
        &out.join(format!("fdr-{node}")).to_string_lossy(),
        phase,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Proc::spawn_self(&format!("fdr{node}"), &args)
}

/// The whole run: record, SIGKILL every process, restart, read back, check.
pub fn domain(out: Option<PathBuf>, transport: &str, seconds: u64) -> Result<(), BoxError> {
    let dir = RunDir::new(out, "recorder")?;
    let r = run(&dir.path, transport, seconds);
    dir.finish(r)
}

fn run(out: &Path, transport: &str, seconds: u64) -> Result<(), BoxError> {
    for n in RECORDERS {
        let d = out.join(format!("fdr-{n}"));
        if d.exists() {
            std::fs::remove_dir_all(&d)?;
        }
    }
    std::fs::create_dir_all(out)?;
    println!(
        "recorder: {} processes over {transport} record events on the PERSISTENT topic \
         {TOPIC} for {seconds} s; then all are SIGKILLed and restarted; data in {}",
        RECORDERS.len(),
        out.display()
    );
    let ns = format!("fdr{}", std::process::id());
    let m = members(transport, &format!("{ns}a"))?;
    let mut procs = RECORDERS
        .iter()
        .map(|n| spawn(*n, transport, &m, out, "record"))
        .collect::<Result<Vec<_>, _>>()?;
    for p in &procs {
        p.expect("READY", WAIT_MAX)
            .map_err(|_| format!("{} did not become ready", p.name))?;
    }
    std::thread::sleep(Duration::from_millis(seconds * 1000));
    // The whole domain dies at once, mid-stream (std's kill is SIGKILL on Unix).
    for p in &mut procs {
        p.child.kill()?;
    }
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for p in &mut procs {
        let _ = p.child.wait();
        let last = p
            .lines
            .try_iter()
            .filter_map(|l| l.strip_prefix("ACKED ").and_then(|n| n.parse().ok()))
            .max()
            .unwrap_or(0);
        acked.insert(p.name.clone(), last);
    }
    println!("  SIGKILL all; events acknowledged (durable at every member) before: {acked:?}");
    drop(procs);
    // Restart from the data directories.
    let m = members(transport, &format!("{ns}b"))?;
    let mut procs = RECORDERS
        .iter()
        .map(|n| spawn(*n, transport, &m, out, "read"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut read: BTreeMap<String, BTreeMap<String, (u64, u64)>> = BTreeMap::new();
    for p in &procs {
        let view = p.expect("VIEW", WAIT_MAX)?;
        let mut mine = BTreeMap::new();
        loop {
            let l = p
                .lines
                .recv_timeout(WAIT_MAX)
                .map_err(|_| format!("{} did not read the history back", p.name))?;
            if l == "DONE" {
                break;
            }
            if let Some(rest) = l.strip_prefix("READBACK ") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if let [sub, count, max] = f[..] {
                    mine.insert(sub.to_string(), (count.parse()?, max.parse()?));
                }
            }
        }
        println!(
            "  {} restarted ({}), read back {:?} (recorder: (events, last seq))",
            p.name,
            view.to_lowercase(),
            mine
        );
        read.insert(p.name.clone(), mine);
    }
    for p in &mut procs {
        p.say("EXIT");
        p.stdin = None;
    }
    for p in &mut procs {
        let _ = p.child.wait();
    }
    let first = read.values().next().cloned().unwrap_or_default();
    let mut failed = Vec::new();
    for (who, got) in &read {
        if got != &first {
            failed.push(format!(
                "{who} read a different history: {got:?} vs {first:?}"
            ));
        }
    }
    for (rec, before) in &acked {
        let (count, max) = first.get(rec).copied().unwrap_or((0, 0));
        if count < *before {
            failed.push(format!(
                "{rec}: {before} events acknowledged before the kill, {count} read back"
            ));
        }
        if count > 0 && count != max + 1 {
            failed.push(format!(
                "{rec}: {count} events read back up to sequence {max}: a gap"
            ));
        }
    }
    if !failed.is_empty() {
        return Err(failed.join("; ").into());
    }
    println!(
        "every event acknowledged before the kill was read back by every restarted recorder, \
         in one gap-free history per recorder"
    );
    Ok(())
}
