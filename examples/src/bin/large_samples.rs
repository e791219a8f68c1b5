//! Large samples across processes: three participants (separate processes) share one
//! topic of `Spindle::Sequence` samples; each writes small (100 B … 2 KiB) and large
//! (1 MiB … 16 MiB, by RDMC) samples interleaved, and every reader logs what it took. The
//! logs must be identical: one order for small and large samples together, every sample
//! intact (each process checks the bytes of every sample it takes).
//!
//! With `--kill`, every participant writes its sizes [`KILL_ROUNDS`] times over and
//! participant [`KILLED`] is SIGKILLed once its first round is written, while it streams
//! the second (it is sending or receiving a large sample then): the survivors' logs must still be identical, with the
//! killed writer's samples a prefix of what it wrote, all before the view that removed it.
//!
//! `large_samples [--transport tcp|shm] [--out DIR] [--kill]` runs the domain;
//! `large_samples member ...` is one process of it (started by the former).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use spindle_dds_core::{DomainParticipantFactory, StateMask};
use spindle_examples::large_samples::{
    payload, sizes, sizes_written, KILLED, KILL_ROUNDS, PARTICIPANTS, SAMPLE_BYTES_MAX, TOPIC,
};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::Sequence;

use spindle_examples::procs::{self, member_config, Addresses, BoxError, Proc};
use spindle_examples::run_dir::RunDir;

/// How long a process may take for one step before the domain gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Parser)]
#[command(about = "Three processes, small and 1-16 MiB samples on one topic, one order")]
struct Args {
    /// tcp or shm.
    #[arg(long, default_value = "tcp")]
    transport: String,
    /// Write each reader's log to `DIR/<node>.log`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// SIGKILL participant 3 while it streams large samples (every participant writes its
    /// sizes several times over).
    #[arg(long)]
    kill: bool,
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
        out: PathBuf,
        /// How many times over the participant writes its sizes.
        rounds: u32,
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
            out,
            rounds,
        }) => member(node, &transport, &listen, &contact, &out, rounds)
            .map_err(|e| format!("participant {node}: {e}").into()),
        None => domain(&args.transport, args.out, args.kill),
    };
    if let Err(e) = r {
        eprintln!("large_samples: {e}");
        std::process::exit(1);
    }
}

fn member(
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    out: &Path,
    rounds: u32,
) -> Result<(), BoxError> {
    let mut cfg = member_config(node, transport, listen, contact)?;
    cfg.entity_timeout_ms = 60_000;
    cfg.sample_bytes_max = SAMPLE_BYTES_MAX;
    // This run is about one order for small and large samples, not failure detection: on
    // a loaded host a debug build copying 16 MiB samples may stall a process for tens of
    // milliseconds, which the default floor (50 ms) would take for a hung member.
    cfg.fabric.suspect_floor_ms = 5_000;
    cfg.fabric.suspect_ceiling_ms = 10_000;
    let p = DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?;
    let mut stdin = BufReader::new(std::io::stdin());
    let say = procs::tell_parent;
    let next = procs::from_parent;
    say("JOINED")?;
    if next(&mut stdin) != "CREATE" {
        return Ok(());
    }
    let qos = TopicQos::default().with_reliability(Reliability::reliable());
    let mut wqos = DataWriterQos::from_topic_qos(&qos);
    wqos.reliability.max_blocking_time = spindle_qos::Duration::from_secs(60);
    let t = p.create_topic::<Sequence>(TOPIC, qos.clone())?;
    let r = p.create_subscriber(Default::default())?.create_datareader(
        &t,
        DataReaderQos::from_topic_qos(&qos).with_history(History::keep_all()),
    )?;
    let w = p
        .create_publisher(Default::default())?
        .create_datawriter(&t, wqos)?;
    w.wait_for_readers(PARTICIPANTS, STEP_TIMEOUT)?;
    say("CREATED")?;
    if next(&mut stdin) != "WRITE" {
        return Ok(());
    }
    for (i, len) in sizes_written(node, rounds).into_iter().enumerate() {
        w.write(&Sequence {
            payload: payload(node, i as u64, len),
        })?;
        if i + 1 == sizes(node).len() {
            // Its first round is written (and, one large sample in flight at a time,
            // its earlier large ones reached every member): the second is under way.
            say("WRITING")?;
        }
    }
    say("WROTE")?;
    // Done once every writer's samples are all here, or the writer has left the view
    // (its last samples were delivered before the view that removed it was installed,
    // so they are in the reader's cache by the time `view` shows that view).
    let want = |n: u32| sizes_written(n, rounds).len();
    let mut took = vec![0usize; PARTICIPANTS as usize + 1];
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let members = p.view().map(|v| v.members).unwrap_or_default();
        let done = (1..=PARTICIPANTS).all(|n| took[n as usize] == want(n) || !members.contains(&n));
        if std::time::Instant::now() > deadline {
            return Err(format!("node {node}: took {took:?} samples per writer").into());
        }
        for s in r.take(usize::MAX, StateMask::ANY)? {
            // The killed writer's instance ends with a notice this reader made itself.
            if !s.info.in_total_order() {
                continue;
            }
            let data = s.data.as_ref().ok_or("a sample without data")?;
            let (from, i) = spindle_examples::large_samples::parse(&data.payload)
                .ok_or("a sample too short to name its writer")?;
            let len = data.payload.len();
            if data.payload != payload(from, i, len) {
                return Err(
                    format!("node {node}: sample {i} of {from} ({len} bytes) corrupted").into(),
                );
            }
            lines.push(format!(
                "{} {} {} {from}.{i}.{len} {}",
                s.info.view_id, s.info.order_index, s.info.publication_handle, s.info.writer_seq
            ));
            if let Some(t) = took.get_mut(from as usize) {
                *t += 1;
            }
        }
        if done {
            break; // one take after the check: what the last view delivered is in
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join(format!("{node}.log")), lines.join("\n") + "\n")?;
    say("DONE")?;
    // Stay a member until the domain ends, so no view change cuts the others.
    let _ = next(&mut stdin);
    Ok(())
}

fn domain(transport: &str, out: Option<PathBuf>, kill: bool) -> Result<(), BoxError> {
    let dir = RunDir::new(out, "large-samples")?;
    let r = run(transport, &dir.path, kill);
    dir.finish(r)
}

fn run(transport: &str, out: &Path, kill: bool) -> Result<(), BoxError> {
    let addresses = Addresses::new(transport, "ls")?;
    let first = addresses.first().to_string();
    let contact = addresses.contact();
    println!(
        "large_samples: {PARTICIPANTS} processes over {transport}, topic {TOPIC}, \
         sample_bytes_max {SAMPLE_BYTES_MAX}; logs in {}",
        out.display()
    );
    let rounds = if kill { KILL_ROUNDS } else { 1 };
    let spawn = |node: u32, listen: &str| {
        let args: Vec<String> = ["member", &node.to_string(), transport, listen, &contact]
            .iter()
            .map(|s| s.to_string())
            .chain([out.to_string_lossy().to_string(), rounds.to_string()])
            .collect();
        Proc::spawn_self(&format!("participant {node}"), &args)
    };
    let mut procs = vec![spawn(1, &first)?];
    procs[0].expect("JOINED", STEP_TIMEOUT)?;
    for node in 2..=PARTICIPANTS {
        let p = spawn(node, &addresses.listen()?)?;
        p.expect("JOINED", STEP_TIMEOUT)?;
        procs.push(p);
    }
    for p in &mut procs {
        p.say("CREATE");
    }
    for p in &procs {
        p.expect("CREATED", STEP_TIMEOUT)?;
    }
    for p in &mut procs {
        p.say("WRITE");
    }
    if kill {
        let victim = &mut procs[KILLED as usize - 1];
        victim.expect("WRITING", STEP_TIMEOUT)?;
        // Its first round is written, its second under way (16 MiB samples among them).
        std::thread::sleep(Duration::from_millis(20));
        // std's Child::kill is SIGKILL on Unix: a crash, not a graceful leave.
        victim.child.kill()?;
        let _ = victim.child.wait();
        println!("  SIGKILL participant {KILLED} while it streams large samples");
        procs.remove(KILLED as usize - 1);
    }
    for p in &procs {
        p.expect("WROTE", STEP_TIMEOUT)?;
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
    println!("  every participant logged its reader");
    Ok(())
}
