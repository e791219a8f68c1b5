//! Many topics across processes: three participants (separate processes) share 1,000
//! topics — topic `i` is written at participant `i % 3 + 1` and read at the next one (and
//! at the third one too for every tenth topic) — create and match 2,000-odd readers and
//! writers, write one round, lose participant 3 to SIGKILL, write a second round, and log
//! what every reader took. Prints how long creating and matching took and each process's
//! resident memory.
//!
//! `many_topics [--transport tcp|shm] [--topics N] [--out DIR]` runs the domain;
//! `many_topics member ...` is one process of it (started by the former).

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use spindle_dds_core::{DomainParticipantFactory, StateMask};
use spindle_examples::many_topics::{readers_of, topic_name, writer_of, PARTICIPANTS};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

use spindle_examples::procs::{self, member_config, Addresses, BoxError, Proc};
use spindle_examples::run_dir::RunDir;

/// How long a process may take for one step before the domain gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(about = "Three processes, many topics, one SIGKILL: every reader gets exactly its topic")]
struct Args {
    /// tcp or shm.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "shm"])]
    transport: String,
    /// Topics in the domain (at least 1).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    topics: usize,
    /// Write each reader's log to `DIR/<node>-<topic>.log`.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(subcommand)]
    member: Option<Member>,
}

#[derive(Subcommand)]
enum Member {
    /// One process of the domain (started by the domain itself).
    Member {
        node: u32,
        transport: String,
        listen: String,
        contact: String,
        topics: usize,
        out: PathBuf,
    },
}

fn main() {
    let args = Args::parse();
    let r = match args.member {
        Some(Member::Member {
            node,
            transport,
            listen,
            contact,
            topics,
            out,
        }) => member(node, &transport, &listen, &contact, topics, &out),
        None => domain(&args.transport, args.topics, args.out),
    };
    if let Err(e) = r {
        eprintln!("many_topics: {e}");
        std::process::exit(1);
    }
}

// ----- one process ----------------------------------------------------------------------

/// This process's resident memory, in KiB (0 if /proc does not say).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn member(
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    topics: usize,
    out: &Path,
) -> Result<(), BoxError> {
    let mut cfg = member_config(node, transport, listen, contact)?;
    cfg.entity_timeout_ms = 60_000;
    let p = DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?;
    let mut stdin = BufReader::new(std::io::stdin());
    let say = procs::tell_parent;
    let next = procs::from_parent;
    say("JOINED")?;
    if next(&mut stdin) != "CREATE" {
        return Ok(());
    }
    let qos = TopicQos::default().with_reliability(Reliability::reliable());
    // A write may wait through the view change that removes the killed participant
    // (failure detection, then the change): RELIABILITY max_blocking_time is that bound.
    let wqos = DataWriterQos::from_topic_qos(&qos)
        .with_max_blocking_time(spindle_qos::Duration::from_secs(60));
    let start = Instant::now();
    let sub = p.create_subscriber(Default::default())?;
    let publ = p.create_publisher(Default::default())?;
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for i in 0..topics {
        let reads = readers_of(i).contains(&node);
        let writes = writer_of(i) == node;
        if !reads && !writes {
            continue;
        }
        let t = p.create_topic::<KeyedString>(&topic_name(i), qos.clone())?;
        if reads {
            let q = DataReaderQos::from_topic_qos(&qos).with_history(History::keep_all());
            readers.push((i, sub.create_datareader(&t, q)?));
        }
        if writes {
            writers.push((i, publ.create_datawriter(&t, wqos.clone())?));
        }
    }
    let created_ms = start.elapsed().as_millis();
    // Matched: every writer sees exactly the readers of its own topic.
    for (i, w) in &writers {
        let want = readers_of(*i).len() as u32;
        w.wait_for_readers(want, STEP_TIMEOUT)?;
        let got = w.publication_matched_status().current_count;
        if got != want {
            return Err(format!("topic {i}: {got} readers matched, expected {want}").into());
        }
    }
    say(&format!(
        "CREATED {created_ms} {} {} {} {}",
        start.elapsed().as_millis(),
        rss_kib(),
        readers.len(),
        writers.len()
    ))?;
    for round in 0.. {
        match next(&mut stdin).as_str() {
            "WRITE" => {
                for (i, w) in &writers {
                    w.write(&KeyedString {
                        key: "k".into(),
                        value: format!("{i}-{round}"),
                    })?;
                }
                say("WROTE")?;
            }
            "STOP" => break,
            _ => return Ok(()),
        }
    }
    std::fs::create_dir_all(out)?;
    for (i, r) in &readers {
        let mut f = std::io::BufWriter::new(std::fs::File::create(
            out.join(format!("{node}-{}.log", topic_name(*i))),
        )?);
        // The log is of the total order: a notice a reader made itself is in none.
        let taken = r.take(usize::MAX, StateMask::ANY)?;
        for s in taken.iter().filter(|s| s.info.in_total_order()) {
            let value = s.data.as_ref().map_or("-".to_string(), |d| d.value.clone());
            writeln!(
                f,
                "{} {} {} {value} {}",
                s.info.view_id, s.info.order_index, s.info.publication_handle, s.info.writer_seq
            )?;
        }
        f.flush()?;
    }
    say("DONE")?;
    // Stay a member until the domain ends, so no view change cuts the others.
    let _ = next(&mut stdin);
    Ok(())
}

// ----- the domain -----------------------------------------------------------------------

fn spawn(
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    topics: usize,
    out: &Path,
) -> Result<Proc, BoxError> {
    let args: Vec<String> = [
        "member",
        &node.to_string(),
        transport,
        listen,
        contact,
        &topics.to_string(),
        &out.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Proc::spawn_self(&format!("participant {node}"), &args)
}

fn domain(transport: &str, topics: usize, out: Option<PathBuf>) -> Result<(), BoxError> {
    let dir = RunDir::new(out, "many-topics")?;
    let r = run(transport, topics, &dir.path);
    dir.finish(r)
}

fn run(transport: &str, topics: usize, out: &Path) -> Result<(), BoxError> {
    for e in std::fs::read_dir(out)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::remove_file(p)?;
        }
    }
    let addresses = Addresses::new(transport, "mt")?;
    let first = addresses.first().to_string();
    let contact = addresses.contact();
    println!(
        "many_topics: {PARTICIPANTS} processes over {transport}, {topics} topics; participant \
         {PARTICIPANTS} is killed between two rounds; logs in {}",
        out.display()
    );
    let mut procs = vec![spawn(1, transport, &first, &contact, topics, out)?];
    procs[0].expect("JOINED", STEP_TIMEOUT)?;
    for node in 2..=PARTICIPANTS {
        let p = spawn(node, transport, &addresses.listen()?, &contact, topics, out)?;
        p.expect("JOINED", STEP_TIMEOUT)?;
        procs.push(p);
    }
    for p in &mut procs {
        p.say("CREATE");
    }
    for p in &procs {
        let l = p.expect("CREATED", STEP_TIMEOUT)?;
        let f: Vec<&str> = l.split_whitespace().collect();
        println!(
            "  {}: {} readers and {} writers created in {} ms, matched in {} ms, \
             resident {} MiB",
            p.name,
            f.get(4).unwrap_or(&"?"),
            f.get(5).unwrap_or(&"?"),
            f.get(1).unwrap_or(&"?"),
            f.get(2).unwrap_or(&"?"),
            f.get(3)
                .and_then(|k| k.parse::<u64>().ok())
                .map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0))
        );
    }
    for p in &mut procs {
        p.say("WRITE");
    }
    for p in &procs {
        p.expect("WROTE", STEP_TIMEOUT)?;
    }
    // SIGKILL (std's Child::kill on Unix): a crash, not a graceful leave.
    let mut killed = procs.pop().ok_or("no participant")?;
    killed.child.kill()?;
    let _ = killed.child.wait();
    println!("  SIGKILL participant {PARTICIPANTS}");
    for p in &mut procs {
        p.say("WRITE");
    }
    for p in &procs {
        p.expect("WROTE", STEP_TIMEOUT)?;
    }
    // Let the last samples reach every reader.
    std::thread::sleep(Duration::from_millis(1500));
    for p in &mut procs {
        p.say("STOP");
    }
    for p in &procs {
        p.expect("DONE", STEP_TIMEOUT)?;
    }
    for p in &mut procs {
        p.say("EXIT");
        p.stdin = None;
    }
    for p in &mut procs {
        let st = p.child.wait()?;
        if !st.success() {
            return Err(format!("{} exited with {st}", p.name).into());
        }
    }
    println!("  every survivor logged its readers");
    Ok(())
}
