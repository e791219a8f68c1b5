//! What large samples cost a participant in memory and start-up time: two processes on
//! loopback (tcp or shm), each with a writer and a reader of the unbounded
//! `Spindle::Sequence` type (so, with `sample_bytes_max` above the slot, the topic's
//! subgroup gets an RDMC group per writer and every member registers its buffers).
//! Each process prints one JSON line per phase: after its entities matched (`ready`:
//! milliseconds since the process started, RSS) and after participant 1 wrote
//! `--samples` samples of `--size` bytes that both readers took (`after`: RSS, and the
//! milliseconds from the start of the writes to the last sample taken).
//!
//! `large_memory [--transport tcp|shm] [--sample-bytes-max N] [--samples 10]
//! [--size 67108864]` runs the pair (docs/benchmarks.md, "Large samples: memory");
//! `--sample-bytes-max` left out keeps the participants' default; the environment
//! variable `LARGE_MEMORY_OUTBOUND_BYTES_MAX` sets the participants' `[fabric]
//! outbound_bytes_max`.

use std::io::BufReader;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask};
use spindle_examples::procs::{self, member_config, Addresses, BoxError, Proc};
use spindle_qos::{DataReaderQos, DataWriterQos, History, Reliability, TopicQos};
use spindle_topics::Sequence;

/// How long one step may take before the pair gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);
/// Most samples one run writes (each up to `sample_bytes_max`).
const SAMPLES_MAX: usize = 64;
/// The topic.
const TOPIC: &str = "large-memory";

#[derive(Parser)]
#[command(about = "RSS and start-up time of a participant with large samples on")]
struct Args {
    /// tcp or shm.
    #[arg(long, default_value = "tcp")]
    transport: String,
    /// The participants' `sample_bytes_max` (left out: the default).
    #[arg(long)]
    sample_bytes_max: Option<usize>,
    /// Samples participant 1 writes (at most 64).
    #[arg(long, default_value_t = 10)]
    samples: usize,
    /// Payload bytes of each sample.
    #[arg(long, default_value_t = 64 << 20)]
    size: usize,
    #[command(subcommand)]
    member: Option<Member>,
}

#[derive(Subcommand)]
enum Member {
    /// One process of the pair (started by the pair itself).
    Member {
        node: u32,
        transport: String,
        listen: String,
        contact: String,
        /// `sample_bytes_max`, or "default".
        sample_bytes_max: String,
        samples: usize,
        size: usize,
    },
}

fn main() {
    let start = Instant::now();
    let args = Args::parse();
    let r = match args.member {
        Some(Member::Member {
            node,
            transport,
            listen,
            contact,
            sample_bytes_max,
            samples,
            size,
        }) => member(
            start,
            node,
            &transport,
            &listen,
            &contact,
            &sample_bytes_max,
            (samples, size),
        ),
        None => pair(&args),
    };
    if let Err(e) = r {
        eprintln!("large_memory: {e}");
        std::process::exit(1);
    }
}

/// `VmRSS`, `RssAnon` and `RssShmem` of this process, in KiB (0 where not reported).
fn rss_kib() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssShmem:"))
}

fn member(
    start: Instant,
    node: u32,
    transport: &str,
    listen: &str,
    contact: &str,
    sample_bytes_max: &str,
    (samples, size): (usize, usize),
) -> Result<(), BoxError> {
    let mut cfg: ParticipantConfig = member_config(node, transport, listen, contact)?;
    if sample_bytes_max != "default" {
        cfg.sample_bytes_max = sample_bytes_max.parse()?;
    }
    // About memory, not failure detection: a loaded host may stall a process copying
    // 64 MiB for longer than the default floor.
    cfg.fabric.suspect_floor_ms = 5_000;
    cfg.fabric.suspect_ceiling_ms = 10_000;
    cfg.entity_timeout_ms = 60_000;
    // The tcp links' outbound buffer bound, to tell its share of the RSS apart.
    if let Ok(v) = std::env::var("LARGE_MEMORY_OUTBOUND_BYTES_MAX") {
        cfg.fabric.outbound_bytes_max = v.parse()?;
    }
    let sample_bytes_max = cfg.sample_bytes_max;
    let p = DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?;
    let created_ms = start.elapsed().as_secs_f64() * 1e3;
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
    w.wait_for_readers(2, STEP_TIMEOUT)?;
    let ready_ms = start.elapsed().as_secs_f64() * 1e3;
    let (rss, anon, shmem) = rss_kib();
    say(&format!(
        "READY {{\"phase\":\"ready\",\"node\":{node},\"transport\":\"{transport}\",\
         \"sample_bytes_max\":{sample_bytes_max},\"created_ms\":{created_ms:.1},\
         \"ready_ms\":{ready_ms:.1},\"rss_kib\":{rss},\"rss_anon_kib\":{anon},\
         \"rss_shmem_kib\":{shmem}}}"
    ))?;
    if next(&mut stdin) != "WRITE" {
        return Ok(());
    }
    let moving = Instant::now();
    if node == 1 {
        for i in 0..samples {
            let mut payload = vec![0u8; size];
            payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
            w.write(&Sequence { payload })?;
        }
    }
    // Both readers take every sample (participant 1's its own), so what stays resident
    // afterwards is the middleware's, not samples the application holds.
    let mut moved = 0;
    {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while moved < samples {
            if Instant::now() > deadline {
                return Err(format!("node {node}: took {moved} of {samples} samples").into());
            }
            for s in r.take(usize::MAX, StateMask::ANY)? {
                let data = s.data.as_ref().ok_or("a sample without data")?;
                if data.payload.len() != size {
                    return Err(format!("a sample of {} bytes", data.payload.len()).into());
                }
                moved += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let moved_ms = moving.elapsed().as_secs_f64() * 1e3;
    let (rss, anon, shmem) = rss_kib();
    say(&format!(
        "MOVED {{\"phase\":\"after\",\"node\":{node},\"transport\":\"{transport}\",\
         \"sample_bytes_max\":{sample_bytes_max},\"samples\":{moved},\"size\":{size},\
         \"moved_ms\":{moved_ms:.1},\
         \"rss_kib\":{rss},\"rss_anon_kib\":{anon},\"rss_shmem_kib\":{shmem}}}"
    ))?;
    // Stay a member until the pair ends, so no view change cuts the other.
    let _ = next(&mut stdin);
    Ok(())
}

fn pair(args: &Args) -> Result<(), BoxError> {
    if args.samples > SAMPLES_MAX {
        return Err(format!("--samples {}: at most {SAMPLES_MAX}", args.samples).into());
    }
    let transport = args.transport.as_str();
    let addresses = Addresses::new(transport, "lm")?;
    let first = addresses.first().to_string();
    let contact = addresses.contact();
    let limit = args
        .sample_bytes_max
        .map_or("default".to_string(), |n| n.to_string());
    let spawn = |node: u32, listen: &str| {
        let args: Vec<String> = [
            "member".to_string(),
            node.to_string(),
            transport.to_string(),
            listen.to_string(),
            contact.clone(),
            limit.clone(),
            args.samples.to_string(),
            args.size.to_string(),
        ]
        .to_vec();
        Proc::spawn_self(&format!("participant {node}"), &args)
    };
    let mut procs = vec![spawn(1, &first)?];
    procs[0].expect("JOINED", STEP_TIMEOUT)?;
    let p2 = spawn(2, &addresses.listen()?)?;
    p2.expect("JOINED", STEP_TIMEOUT)?;
    procs.push(p2);
    for p in &mut procs {
        p.say("CREATE");
    }
    for p in &procs {
        println!("{}", &p.expect("READY", STEP_TIMEOUT)?["READY ".len()..]);
    }
    for p in &mut procs {
        p.say("WRITE");
    }
    for p in &procs {
        println!("{}", &p.expect("MOVED", STEP_TIMEOUT)?["MOVED ".len()..]);
    }
    for p in &mut procs {
        p.say("END");
        let _ = p.child.wait();
    }
    Ok(())
}
