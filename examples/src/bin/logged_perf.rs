//! The LoggedStore benchmark: a PERSISTENT topic's committed sample rate and its
//! write → globally-persisted latency, next to a raw `fdatasync`-batched append of the
//! same bytes to the same disk, in the same run.
//!
//! `logged_perf --dir DIR [--size BYTES] [--samples N] [--latency-samples M]`: three
//! participants in this process (tcp on loopback, each with its own data directory under
//! DIR), one writer on node 1 and a reader on nodes 2 and 3, so all three log every
//! sample. *Committed rate*: N samples written as fast as the window allows, then
//! `wait_for_acknowledgments`; N ÷ the time until it returns (every sample durable in all
//! three logs). *Latency*: M times, one sample written and `wait_for_acknowledgments`
//! (closed loop, no other traffic): the time from write to durable at every member.
//! *Raw reference*: the same N payloads appended to one file in DIR with one `write` and
//! one `fdatasync` per batch, at batches 1 and 64 (the writer's window), and three files
//! at batch 64 (one per replica, as the three logs do on this one disk).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use spindle_dds_core::{Contact, DomainParticipant, DomainParticipantFactory, ParticipantConfig};
use spindle_examples::procs::{free_port, BoxError};
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, TopicQos};
use spindle_topics::KeyedString;

#[derive(Parser)]
#[command(
    about = "A PERSISTENT topic's committed rate and write-to-durable latency, next to a raw fdatasync append"
)]
struct Args {
    /// Where the data directories and the raw reference files go (the disk measured).
    #[arg(long)]
    dir: PathBuf,
    /// Payload bytes per sample.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Samples for the rate.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Samples for the latency.
    #[arg(long, default_value_t = 500)]
    latency_samples: usize,
}

/// Ring slots of the writer (the most samples in flight).
const WINDOW: usize = 64;

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("logged_perf: {e}");
        std::process::exit(1);
    }
}

fn qos() -> TopicQos {
    TopicQos::default()
        .with_reliability(Reliability::reliable())
        .with_durability(DurabilityKind::Persistent)
        .with_history(History::keep_last(1))
}

fn domain(dir: &Path, size: usize) -> Result<Vec<DomainParticipant>, BoxError> {
    let ids = [1u32, 2, 3];
    let addrs: Vec<String> = ids
        .iter()
        .map(|_| free_port().map(|p| format!("127.0.0.1:{p}")))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut cfg = ParticipantConfig::new(*id, spindle_dds_core::Transport::Tcp, &addrs[i]);
        if *id == 1 {
            cfg.bootstrap = vec![1];
        } else {
            cfg.contacts = vec![Contact {
                node: 1,
                address: addrs[0].clone(),
            }];
        }
        cfg.window_slots = WINDOW;
        cfg.slot_payload_bytes = (size + 1024).next_power_of_two().min(64 * 1024);
        cfg.data_dir = Some(dir.join(format!("node-{id}")));
        out.push(DomainParticipantFactory::instance().create_participant(
            0,
            Default::default(),
            &cfg,
        )?);
    }
    Ok(out)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Appends `n` payloads of `size` bytes to `files` files, `batch` per `write` +
/// `fdatasync` each; returns appends per second.
fn raw(dir: &Path, n: u64, size: usize, batch: u64, files: usize) -> Result<f64, BoxError> {
    let mut fs: Vec<std::fs::File> = (0..files)
        .map(|f| std::fs::File::create(dir.join(format!("raw-{f}.bin"))))
        .collect::<Result<_, _>>()?;
    let buf = vec![0x5Au8; size * batch as usize];
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        let k = batch.min(n - done);
        for f in &mut fs {
            f.write_all(&buf[..size * k as usize])?;
            f.sync_data()?;
        }
        done += k;
    }
    let s = start.elapsed().as_secs_f64();
    for f in 0..files {
        let _ = std::fs::remove_file(dir.join(format!("raw-{f}.bin")));
    }
    Ok(n as f64 / s)
}

fn run(a: Args) -> Result<(), BoxError> {
    let dir = a
        .dir
        .join(format!("logged-perf-{}-{}", a.size, std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ps = domain(&dir, a.size)?;
    let topics: Vec<_> = ps
        .iter()
        .map(|p| p.create_topic::<KeyedString>("logged-perf", qos()))
        .collect::<Result<_, _>>()?;
    let _readers: Vec<_> = ps[1..]
        .iter()
        .zip(&topics[1..])
        .map(|(p, t)| {
            p.create_subscriber(Default::default())?
                .create_datareader(t, DataReaderQos::from_topic_qos(&qos()))
        })
        .collect::<Result<_, _>>()?;
    let mut wq = DataWriterQos::from_topic_qos(&qos());
    wq.reliability.max_blocking_time = spindle_qos::Duration::from_secs(30);
    let w = ps[0]
        .create_publisher(Default::default())?
        .create_datawriter(&topics[0], wq)?;
    let value = "x".repeat(a.size);
    let sample = KeyedString {
        key: "k".into(),
        value,
    };
    let ack = Duration::from_secs(60);
    // Warm-up.
    for _ in 0..WINDOW {
        w.write(&sample)?;
    }
    w.wait_for_acknowledgments(ack)?;
    // Committed rate.
    let start = Instant::now();
    for _ in 0..a.samples {
        w.write(&sample)?;
    }
    w.wait_for_acknowledgments(ack)?;
    let logged_rate = a.samples as f64 / start.elapsed().as_secs_f64();
    // Latency, closed loop.
    let mut lat = Vec::with_capacity(a.latency_samples);
    for _ in 0..a.latency_samples {
        let t = Instant::now();
        w.write(&sample)?;
        w.wait_for_acknowledgments(ack)?;
        lat.push(t.elapsed());
    }
    lat.sort_unstable();
    // The participants stay up (idle, their threads parked) while the raw references run.
    // Raw references, same run, same disk.
    let raw1 = raw(&dir, a.samples.min(2_000), a.size, 1, 1)?;
    let raw64 = raw(&dir, a.samples, a.size, WINDOW as u64, 1)?;
    let raw64x3 = raw(&dir, a.samples, a.size, WINDOW as u64, 3)?;
    let _ = std::fs::remove_dir_all(&dir);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "size {} B: LoggedStore committed {:.0} samples/s ({:.1} MB/s); write->durable at 3 \
         members p50 {:.0} us p99 {:.0} us ({} samples); raw fdatasync append: batch 1 {:.0}/s, \
         batch {WINDOW} {:.0}/s, batch {WINDOW} x 3 files {:.0}/s; LoggedStore / raw batch \
         {WINDOW} = {:.2}, / raw batch {WINDOW} x 3 files = {:.2}",
        a.size,
        logged_rate,
        logged_rate * a.size as f64 / 1e6,
        us(percentile(&lat, 0.5)),
        us(percentile(&lat, 0.99)),
        lat.len(),
        raw1,
        raw64,
        raw64x3,
        logged_rate / raw64,
        logged_rate / raw64x3,
    );
    Ok(())
}
