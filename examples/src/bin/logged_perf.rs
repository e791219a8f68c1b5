//! The LoggedStore benchmark: a PERSISTENT topic's committed sample rate and its
//! write → globally-persisted latency, next to a raw `fdatasync`-batched append of the
//! same bytes to the same disk, in the same run.
//!
//! `logged_perf --dir DIR [--size BYTES] [--samples N] [--latency-samples M] [--writers W]`:
//! three participants in this process (tcp on loopback, each with its own data directory
//! under DIR), a writer on each of nodes 1..=W (W is 1 to 3, each on its own thread) and
//! a reader on nodes 2 and 3, so all three log every sample. Samples larger than a ring
//! slot go by RDMC (`sample_bytes_max` is set to fit them).
//! *Committed rate*: N samples (N ÷ W per writer) written as fast as the window allows,
//! then `wait_for_acknowledgments`; N ÷ the time until the last writer's returns (every
//! sample durable in all three logs). *Latency*: M times (M ÷ W per writer, the writers
//! at once), one sample written and `wait_for_acknowledgments` (closed loop): the time
//! from write to durable at every member.
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
    /// Writers, one per node from node 1 (1 to 3).
    #[arg(long, default_value_t = 1)]
    writers: usize,
}

/// Ring slots of the writer (the most samples in flight).
const WINDOW: usize = 64;
/// The largest ring slot configured; larger samples go by RDMC.
const SLOT_BYTES_MAX: usize = 64 * 1024;

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
        cfg.slot_payload_bytes = (size + 1024).next_power_of_two().min(SLOT_BYTES_MAX);
        if size + 1024 > SLOT_BYTES_MAX {
            // Larger than a slot: by RDMC.
            cfg.sample_bytes_max = (size + 4096).next_power_of_two();
        }
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
    if !(1..=3).contains(&a.writers) {
        return Err(format!("--writers {} is not 1, 2 or 3", a.writers).into());
    }
    let mut wq = DataWriterQos::from_topic_qos(&qos());
    wq.reliability.max_blocking_time = spindle_qos::Duration::from_secs(30);
    let writers: Vec<_> = ps[..a.writers]
        .iter()
        .zip(&topics)
        .map(|(p, t)| {
            p.create_publisher(Default::default())?
                .create_datawriter(t, wq.clone())
        })
        .collect::<Result<_, _>>()?;
    let ack = Duration::from_secs(60);
    let per_writer = a.samples / a.writers as u64;
    let lat_per_writer = a.latency_samples / a.writers;
    let size = a.size;
    // Each writer on its own thread: warm-up, the rate, then (all at once again) the
    // latency loop. Each returns its rate phase's time and its latencies.
    let barrier = std::sync::Barrier::new(a.writers);
    let results: Vec<Result<(Duration, Vec<Duration>), String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let barrier = &barrier;
                sc.spawn(move || -> Result<(Duration, Vec<Duration>), String> {
                    let e = |x: spindle_dds_core::Error| x.to_string();
                    let sample = KeyedString {
                        key: format!("k{i}"),
                        value: "x".repeat(size),
                    };
                    for _ in 0..WINDOW {
                        w.write(&sample).map_err(e)?;
                    }
                    w.wait_for_acknowledgments(ack).map_err(e)?;
                    barrier.wait();
                    let t0 = Instant::now();
                    for _ in 0..per_writer {
                        w.write(&sample).map_err(e)?;
                    }
                    w.wait_for_acknowledgments(ack).map_err(e)?;
                    let took = t0.elapsed();
                    barrier.wait();
                    let mut lat = Vec::with_capacity(lat_per_writer);
                    for _ in 0..lat_per_writer {
                        let t = Instant::now();
                        w.write(&sample).map_err(e)?;
                        w.wait_for_acknowledgments(ack).map_err(e)?;
                        lat.push(t.elapsed());
                    }
                    Ok((took, lat))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a writer thread panicked".into()))
            })
            .collect()
    });
    let mut took = Duration::ZERO;
    let mut lat = Vec::new();
    for r in results {
        let (t, l) = r?;
        took = took.max(t);
        lat.extend(l);
    }
    let logged_rate = (per_writer * a.writers as u64) as f64 / took.as_secs_f64();
    lat.sort_unstable();
    // The participants stay up (idle, their threads parked) while the raw references run.
    // Raw references, same run, same disk.
    let raw1 = raw(&dir, a.samples.min(2_000), a.size, 1, 1)?;
    let raw64 = raw(&dir, a.samples, a.size, WINDOW as u64, 1)?;
    let raw64x3 = raw(&dir, a.samples, a.size, WINDOW as u64, 3)?;
    let _ = std::fs::remove_dir_all(&dir);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "size {} B, {} writer(s): LoggedStore committed {:.0} samples/s ({:.1} MB/s); write->durable at 3 \
         members p50 {:.0} us p99 {:.0} us ({} samples); raw fdatasync append: batch 1 {:.0}/s, \
         batch {WINDOW} {:.0}/s, batch {WINDOW} x 3 files {:.0}/s; LoggedStore / raw batch \
         {WINDOW} = {:.2}, / raw batch {WINDOW} x 3 files = {:.2}",
        a.size,
        a.writers,
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
