//! The DCPS benchmark behind `dds_perf` and `spindle perf`: DataWriter → DataReader throughput and latency (the DCPS layer's cost next to the raw
//! engine's `bandwidth_test` / `latency_test`): two processes, a publisher (node 1) and a
//! subscriber (node 2), one topic of `Sequence` samples at a delivery level.
//!
//! `dds_perf --transport tcp --level atomic --size 1024 --samples 100000 [--latency]`
//! prints one JSON line: `{"transport","level","size","samples","msgs_per_s",
//! "bytes_per_s","lat_p50_us","lat_p99_us"}`. Throughput is counted at the subscriber,
//! from the writing of the first sample (its source timestamp) to the taking of the last. Latency (`--latency`: one sample in flight) is from
//! `write` to the sample's delivery to a reader in the writer's own participant — for the
//! ordered levels, the moment every member has it (stability), as `latency_test` measures.
//! That is neither a round trip between the processes nor a one-way time between them.
//!
//! `dds_perf --pingpong [--roundtrips 100000] [--warmup 2000] [--listener] [--bulk-size N]
//! [--histogram FILE]` measures what a DDS user compares with `ddsperf ping`/`pong`: the
//! round trip between two processes over two topics, one sample in flight (see
//! `perf/pingpong.rs`). Its last line is one JSON object with `rtt_p50_us`,
//! `rtt_p90_us`, `rtt_p99_us`, `rtt_p999_us`, `rtt_p9999_us`, `rtt_max_us` (exact, over
//! every measured round trip), transport, level, size and trigger; `--histogram` writes
//! the log-linear histogram as CSV. It stops by itself after `--seconds`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Subcommand;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_dds_core::clock::{Clock, WallClock};
use spindle_dds_core::config::SAMPLE_BYTES_MAX_LIMIT;
use spindle_dds_core::{
    Contact, DataReader, DataReaderListener, DomainParticipant, DomainParticipantFactory,
    ParticipantConfig, SampleBuffer, StateMask, Transport, WaitSet,
};
use spindle_qos::{DataReaderQos, DataWriterQos, DurabilityKind, History, Reliability, TopicQos};
use spindle_topics::Sequence;

pub mod pingpong;

/// An error of the benchmark (its processes, its domain, its arguments).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The benchmark's settings (a clap argument group: `dds_perf` parses it alone, `spindle
/// perf` beside its own flags). The process's [`Role`] comes beside it (a subcommand of
/// the binary); without one it is the driver: it starts the two processes (this
/// executable again, with a role) and returns their result.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// tcp or shm.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// unordered, atomic, dare (the Atomic level, its subgroup ordered by DARE) or
    /// volatilestore.
    #[arg(long, default_value = "atomic")]
    pub level: String,
    /// Payload bytes per sample.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Samples to write.
    #[arg(long, default_value_t = 100_000)]
    pub samples: u64,
    /// Ring slots per writer.
    #[arg(long, default_value_t = 256)]
    pub window: usize,
    /// One sample in flight; report latency percentiles.
    #[arg(long)]
    pub latency: bool,
    /// The subscriber takes in `on_data_available` (on the delivery thread) instead of
    /// waiting on a WaitSet in a thread of its own.
    #[arg(long)]
    pub listener: bool,
    /// The subscriber takes loans (`take_loaned`: the bytes lent, not decoded) instead of
    /// decoded copies.
    #[arg(long)]
    pub loan: bool,
    /// Ping/pong between the two processes: the round trip, one sample in flight.
    #[arg(long)]
    pub pingpong: bool,
    /// Pings a second (`--pingpong`), as `ddsperf ping HZHz`; 0 (the default): the next
    /// ping upon each pong, back to back. A paced run measures what an application that
    /// writes now and then meets (its threads idle between samples), a back-to-back run
    /// the round trip with every thread hot.
    #[arg(long, default_value_t = 0)]
    pub rate: u32,
    /// Round trips to record (`--pingpong`), after the warm-up.
    #[arg(long, default_value_t = 100_000)]
    pub roundtrips: u64,
    /// Round trips to run first and not record (`--pingpong`).
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,
    /// The ping side stops after this many seconds even if not done (`--pingpong`).
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// Write the round-trip histogram to this file as CSV (`--pingpong`).
    #[arg(long)]
    pub histogram: Option<std::path::PathBuf>,
    /// Payload bytes of a bulk stream on a third topic, from the ping process to the
    /// pong process, during the round trips (`--pingpong`; 0: none).
    #[arg(long, default_value_t = 0)]
    pub bulk_size: usize,
    /// The participants' `spin_before_park_us` (their default if not given).
    #[arg(long)]
    pub spin_before_park_us: Option<u64>,
    /// The participants' `busy_yield_us` (their default, 0: never, if not given).
    #[arg(long)]
    pub busy_yield_us: Option<u64>,
    /// The participants' `predicate_cpus`, comma-separated: the CPUs both processes'
    /// predicate threads may run on (their default, the process's own, if not given).
    #[arg(long, value_delimiter = ',')]
    pub predicate_cpus: Option<Vec<usize>>,
    /// The participants' `predicate_fifo_priority`: 1..=99 runs both processes'
    /// predicate threads in SCHED_FIFO (needs CAP_SYS_NICE; their default, 0, if not given).
    #[arg(long)]
    pub predicate_fifo_priority: Option<u8>,
    /// Topics the samples are spread over, round-robin (throughput runs).
    #[arg(long, default_value_t = 1)]
    pub busy_topics: usize,
    /// Topics beside them with a writer and a reader each, never written.
    #[arg(long, default_value_t = 0)]
    pub idle_topics: usize,
    /// Subgroups the topics hash onto (`ParticipantConfig::topic_subgroups`).
    #[arg(long, default_value_t = spindle_dds_core::declare::TOPIC_SUBGROUPS_DEFAULT)]
    pub topic_subgroups: u32,
    /// The participants' `slot_payload_bytes` (default: the sample's size and its
    /// overhead, up to 64 KiB). Give the configuration's default (4096) to measure what
    /// an application that keeps it gets.
    #[arg(long)]
    pub slot_payload_bytes: Option<usize>,
    /// The participants' `large_window_messages`: large samples in flight per writer
    /// (default: the configuration's, 1).
    #[arg(long)]
    pub large_window_messages: Option<usize>,
    /// The participants' failure-detector floor (`[fabric] suspect_floor_ms`; the
    /// ceiling is raised to it): long enough for processes under `valgrind`, whose
    /// threads take turns, not to suspect each other.
    #[arg(long)]
    pub suspect_floor_ms: Option<u64>,
    /// The participants' `entity_timeout_ms` (joining and creating entities; their
    /// default if not given).
    #[arg(long)]
    pub entity_timeout_ms: Option<u64>,
}

/// The process a driver starts (with `--pingpong`: the ping and the pong process).
#[derive(Subcommand, Clone, Debug)]
pub enum Role {
    /// The publisher process (started by the benchmark).
    Pub {
        /// Where to listen (`host:port` for tcp, a namespace for shm).
        listen: String,
    },
    /// The subscriber process (started by the benchmark).
    Sub {
        /// Where to listen.
        listen: String,
        /// The publisher's address.
        contact: String,
    },
}

/// Runs what `a` and `role` say: a role's process (returns `None`; it speaks to its
/// driver on stdout), or the driver (`role` `None`), which starts
/// `std::env::current_exe()` twice with `exe_args` (e.g. `["perf"]` for `spindle perf`),
/// then the benchmark's flags and a role (`pub LISTEN`, `sub LISTEN CONTACT`), and returns
/// the result: one JSON object.
pub fn run(a: &Args, role: Option<Role>, exe_args: &[String]) -> Result<Option<String>, BoxError> {
    a.check()?;
    match (role, a.pingpong) {
        (Some(Role::Pub { listen }), true) => pingpong::ping(a, &listen).map(|_| None),
        (Some(Role::Sub { listen, contact }), true) => {
            pingpong::pong(a, &listen, &contact).map(|_| None)
        }
        (None, true) => pingpong::bench(a, exe_args).map(Some),
        (Some(Role::Pub { listen }), false) => publisher(a, &listen).map(|_| None),
        (Some(Role::Sub { listen, contact }), false) => {
            subscriber(a, &listen, &contact).map(|_| None)
        }
        (None, false) => bench(a, exe_args).map(Some),
    }
}

impl Args {
    /// Checks the arguments before any process starts or joins: `Err` names the argument
    /// and what it accepts (bad usage, not a failed run). [`run`] checks them first too.
    pub fn check(&self) -> Result<(), BoxError> {
        transport(self)?;
        topic_qos(self)?;
        if self.pingpong {
            return pingpong::check_args(self);
        }
        if self.samples == 0 {
            return Err("--samples 0: write at least 1".into());
        }
        let largest = SAMPLE_BYTES_MAX_LIMIT - SAMPLE_OVERHEAD_BYTES;
        for (flag, v) in [("--size", self.size), ("--bulk-size", self.bulk_size)] {
            if v > largest {
                return Err(format!("{flag} {v}: at most {largest} bytes").into());
            }
        }
        // What the participants would refuse (--window, --predicate-cpus, ...), named
        // by its configuration key.
        participant_config(self, 1, &listen_pair(self, "check").0, None)?
            .validate("the participants' configuration from these arguments")?;
        Ok(())
    }
}

/// Where the two processes of a run listen: any free port on loopback (tcp), or one
/// namespace `<prefix><this process id>` (shm).
pub(crate) fn listen_pair(a: &Args, prefix: &str) -> (String, String) {
    match a.transport.as_str() {
        "tcp" => ("127.0.0.1:0".to_string(), "127.0.0.1:0".to_string()),
        _ => {
            let ns = format!("{prefix}{}", std::process::id());
            (ns.clone(), ns)
        }
    }
}

/// What a sample adds to its payload in a slot: its header and the `Sequence`'s CDR
/// length, rounded up.
const SAMPLE_OVERHEAD_BYTES: usize = 128;

fn transport(a: &Args) -> Result<Transport, BoxError> {
    match a.transport.as_str() {
        "tcp" => Ok(Transport::Tcp),
        "shm" => Ok(Transport::Shm),
        t => Err(format!("--transport {t:?}: tcp or shm").into()),
    }
}

fn topic_qos(a: &Args) -> Result<TopicQos, BoxError> {
    Ok(match a.level.as_str() {
        "unordered" => TopicQos::default(),
        // `dare`: the Atomic level, its subgroup ordered by DARE (`atomic_ordering`).
        "atomic" | "dare" => TopicQos::default().with_reliability(Reliability::reliable()),
        "volatilestore" => TopicQos::default()
            .with_reliability(Reliability::reliable())
            .with_durability(DurabilityKind::TransientLocal)
            .with_history(History::keep_last(1)),
        l => return Err(format!("--level {l:?}: unordered, atomic, dare or volatilestore").into()),
    })
}

fn participant(
    a: &Args,
    node: u32,
    listen: &str,
    contact: Option<&str>,
) -> Result<DomainParticipant, BoxError> {
    let cfg = participant_config(a, node, listen, contact)?;
    Ok(DomainParticipantFactory::instance().create_participant(0, Default::default(), &cfg)?)
}

/// The configuration of node `node` of the benchmark (the publisher, 1, bootstraps; the
/// subscriber joins through `contact`).
fn participant_config(
    a: &Args,
    node: u32,
    listen: &str,
    contact: Option<&str>,
) -> Result<ParticipantConfig, BoxError> {
    let mut cfg = ParticipantConfig::new(node, transport(a)?, listen);
    cfg.window_slots = a.window;
    cfg.topic_subgroups = a.topic_subgroups;
    if a.level == "dare" {
        cfg.atomic_ordering = spindle_dds_core::AtomicOrdering::Dare;
    }
    // A Sequence is unbounded: size the slots for the payload, its CDR length and header.
    let largest = a
        .size
        .max(a.bulk_size)
        .saturating_add(SAMPLE_OVERHEAD_BYTES);
    cfg.slot_payload_bytes = a.slot_payload_bytes.unwrap_or(largest.min(64 * 1024));
    if largest > 64 * 1024 {
        // Larger samples go by RDMC (the writer declares its largest sample).
        cfg.sample_bytes_max = largest;
    }
    if let Some(w) = a.large_window_messages {
        cfg.large_window_messages = w;
    }
    if let Some(us) = a.spin_before_park_us {
        cfg.spin_before_park_us = us;
    }
    if let Some(us) = a.busy_yield_us {
        cfg.busy_yield_us = us;
    }
    if let Some(cpus) = &a.predicate_cpus {
        cfg.predicate_cpus = cpus.clone();
    }
    if let Some(p) = a.predicate_fifo_priority {
        cfg.predicate_fifo_priority = p;
    }
    if let Some(ms) = a.suspect_floor_ms {
        cfg.fabric.suspect_floor_ms = ms;
        cfg.fabric.suspect_ceiling_ms = cfg.fabric.suspect_ceiling_ms.max(ms);
    }
    if let Some(ms) = a.entity_timeout_ms {
        cfg.entity_timeout_ms = ms;
    }
    match contact {
        None => cfg.bootstrap = vec![node],
        Some(c) => {
            cfg.contacts = vec![Contact {
                node: 1,
                address: c.to_string(),
            }]
        }
    }
    Ok(cfg)
}

/// The busy topics (the first is `perf`) and the idle ones.
fn topic_names(a: &Args) -> (Vec<String>, Vec<String>) {
    let busy = (0..a.busy_topics.max(1))
        .map(|k| {
            if k == 0 {
                "perf".to_string()
            } else {
                format!("perf-{k}")
            }
        })
        .collect();
    let idle = (0..a.idle_topics).map(|i| format!("idle-{i}")).collect();
    (busy, idle)
}

fn reader_qos(q: &TopicQos) -> DataReaderQos {
    DataReaderQos::from_topic_qos(q).with_history(History::keep_all())
}

fn line(s: &str) -> Result<(), BoxError> {
    let mut o = std::io::stdout();
    writeln!(o, "{s}")?;
    o.flush()?;
    Ok(())
}

fn wait_line(expect: &str) -> Result<(), BoxError> {
    let mut l = String::new();
    std::io::stdin().read_line(&mut l)?;
    if l.trim() != expect {
        return Err(format!("expected {expect}, got {l:?}").into());
    }
    Ok(())
}

fn publisher(a: &Args, listen: &str) -> Result<(), BoxError> {
    let p = participant(a, 1, listen, None)?;
    line(&format!("ADDR {}", p.address()))?;
    let q = topic_qos(a)?;
    let (busy, idle) = topic_names(a);
    let t = p.create_topic::<Sequence>(&busy[0], q.clone())?;
    // The latency run reads its own samples (delivery = stability at every member); the
    // throughput run has no reader besides the subscriber's.
    let own = if a.latency {
        Some(
            p.create_subscriber(Default::default())?
                .create_datareader(&t, reader_qos(&q))?,
        )
    } else {
        None
    };
    let publ = p.create_publisher(Default::default())?;
    let mut writers = Vec::new();
    for name in busy.iter().chain(&idle) {
        let t = p.create_topic::<Sequence>(name, q.clone())?;
        // A benchmark writes as fast as the window allows: it waits for room however long
        // a loaded machine takes (the default max_blocking_time is 100 ms).
        let wq = DataWriterQos::from_topic_qos(&q)
            .with_max_blocking_time(spindle_qos::Duration::from_secs(60));
        writers.push(publ.create_datawriter(&t, wq)?);
    }
    for w in &writers {
        w.wait_for_readers(1 + u32::from(a.latency), Duration::from_secs(60))?;
    }
    // Idle: created and matched, kept, never written.
    let _idle_writers = writers.split_off(busy.len());
    let w = &writers[0];
    line("READY")?;
    wait_line("GO")?;
    let sample = Sequence {
        payload: vec![0x5A; a.size],
    };
    let mut lat_us = Vec::new();
    for i in 0..a.samples {
        let w = if own.is_some() {
            w
        } else {
            &writers[i as usize % writers.len()]
        };
        if let Some(own) = &own {
            let t0 = Instant::now();
            w.write(&sample)?;
            loop {
                if !own.take(usize::MAX, StateMask::ANY)?.is_empty() {
                    break;
                }
                std::hint::spin_loop();
            }
            lat_us.push(t0.elapsed().as_secs_f64() * 1e6);
        } else {
            w.write(&sample)?;
        }
    }
    lat_us.sort_by(f64::total_cmp);
    let pct = |q: f64| -> f64 {
        if lat_us.is_empty() {
            return 0.0;
        }
        lat_us[((lat_us.len() - 1) as f64 * q).round() as usize]
    };
    line(&format!("LAT {:.1} {:.1}", pct(0.5), pct(0.99)))?;
    // Stay until the subscriber is done.
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
    report_counters(&p);
    p.close();
    Ok(())
}

fn subscriber(a: &Args, listen: &str, contact: &str) -> Result<(), BoxError> {
    let p = participant(a, 2, listen, Some(contact))?;
    let q = topic_qos(a)?;
    let (busy, idle) = topic_names(a);
    let sub = p.create_subscriber(Default::default())?;
    let mut readers = Vec::new();
    for name in busy.iter().chain(&idle) {
        let t = p.create_topic::<Sequence>(name, q.clone())?;
        readers.push(sub.create_datareader(&t, reader_qos(&q))?);
    }
    let _idle_readers = readers.split_off(busy.len());
    if a.listener {
        return take_in_listener(a, p, readers);
    }
    line("READY")?;
    let mut ws = WaitSet::new();
    for r in &readers {
        ws.attach_condition(r.create_readcondition(StateMask::ANY));
    }
    let mut count = 0u64;
    // When the run's first sample was written (its source timestamp).
    let mut first: Option<i64> = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut buf = SampleBuffer::new();
    while count < a.samples && Instant::now() < deadline {
        let mut got = 0;
        for r in &readers {
            let (n, written_ns) = take_all_stamped(r, a.loan, &mut buf)?;
            got += n;
            first = first.or(written_ns);
        }
        if got == 0 {
            if let Some(why) = no_more_samples(&p, &readers) {
                eprintln!("dds_perf sub: {count} of {} samples: {why}", a.samples);
                break;
            }
            let _ = ws.wait(Duration::from_millis(10));
            continue;
        }
        count += got;
    }
    line(&rate_line(count, first))?;
    report_counters(&p);
    p.close();
    Ok(())
}

/// Prints the participant's group counters to stderr (`SPINDLE_PERF_COUNTERS` set): how
/// many pushes and deliveries the run took, to read batching from.
fn report_counters(p: &DomainParticipant) {
    if std::env::var_os("SPINDLE_PERF_COUNTERS").is_none() {
        return;
    }
    let c = p.counters();
    eprintln!(
        "counters node {}: delivered {} pushes {} nulls_sent {} samples_written {} samples_received {}",
        c.node, c.group.delivered, c.group.pushes, c.group.nulls_sent, c.samples_written, c.samples_received
    );
}

/// Takes every sample `r` holds, decoded into `buf`'s values (as a DDS application that
/// keeps its samples between takes does: no allocation per sample) or (with `loan`) lent;
/// returns how many.
pub(crate) fn take_all_into(
    r: &DataReader<Sequence>,
    loan: bool,
    buf: &mut SampleBuffer<Sequence>,
) -> Result<u64, BoxError> {
    Ok(if loan {
        r.take_loaned(usize::MAX, StateMask::ANY)?.len() as u64
    } else {
        r.take_into(buf, usize::MAX, StateMask::ANY)? as u64
    })
}

/// Takes every sample `r` holds, decoded into new values or (with `loan`) lent; returns
/// how many (the ping-pong's one sample at a time).
pub(crate) fn take_all(r: &DataReader<Sequence>, loan: bool) -> Result<u64, BoxError> {
    Ok(if loan {
        r.take_loaned(usize::MAX, StateMask::ANY)?.len() as u64
    } else {
        r.take(usize::MAX, StateMask::ANY)?.len() as u64
    })
}

/// [`take_all_into`], and the source timestamp of the first sample taken (ns on the
/// writer's wall clock): for a run's first batch, when the run's first sample was
/// written.
fn take_all_stamped(
    r: &DataReader<Sequence>,
    loan: bool,
    buf: &mut SampleBuffer<Sequence>,
) -> Result<(u64, Option<i64>), BoxError> {
    Ok(if loan {
        let got = r.take_loaned(usize::MAX, StateMask::ANY)?;
        let written = got.get(0).map(|s| s.info.source_timestamp_ns);
        (got.len() as u64, written)
    } else {
        let n = r.take_into(buf, usize::MAX, StateMask::ANY)? as u64;
        (n, buf.first().map(|s| s.info.source_timestamp_ns))
    })
}

/// The subscriber's result: `RATE received secs`, the time from the writing of the run's
/// first sample (`first_ns`, its source timestamp) to now, when the last was taken. So
/// the first batch taken counts as the others do, and a short run, all of it in that
/// batch, still has a rate.
fn rate_line(count: u64, first_ns: Option<i64>) -> String {
    let secs = first_ns.map_or(0.0, |t| {
        WallClock.wall_ns().saturating_sub(t).max(0) as f64 / 1e9
    });
    format!("RATE {count} {secs:.9}")
}

/// Counts in the listener; the main thread only waits for the last sample.
struct Count {
    count: Arc<AtomicU64>,
    /// When the run's first sample was written (its source timestamp).
    first: Arc<Mutex<Option<i64>>>,
    loan: bool,
    /// The values each take decodes into (locked once per callback, not per sample).
    buf: Mutex<SampleBuffer<Sequence>>,
}

impl DataReaderListener<Sequence> for Count {
    fn on_data_available(&self, r: &DataReader<Sequence>) {
        let mut buf = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        let (n, written_ns) = take_all_stamped(r, self.loan, &mut buf).unwrap_or((0, None));
        drop(buf);
        if let Some(t) = written_ns {
            self.first
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(t);
        }
        self.count.fetch_add(n, Ordering::Release);
    }
}

fn take_in_listener(
    a: &Args,
    p: DomainParticipant,
    readers: Vec<DataReader<Sequence>>,
) -> Result<(), BoxError> {
    let count = Arc::new(AtomicU64::new(0));
    let first = Arc::new(Mutex::new(None));
    for r in &readers {
        r.set_listener(Count {
            count: Arc::clone(&count),
            first: Arc::clone(&first),
            loan: a.loan,
            buf: Mutex::new(SampleBuffer::new()),
        });
    }
    line("READY")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while count.load(Ordering::Acquire) < a.samples && Instant::now() < deadline {
        if let Some(why) = no_more_samples(&p, &readers) {
            let n = count.load(Ordering::Acquire);
            eprintln!("dds_perf sub: {n} of {} samples: {why}", a.samples);
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let start = *first.lock().unwrap_or_else(|p| p.into_inner());
    line(&rate_line(count.load(Ordering::Acquire), start))?;
    report_counters(&p);
    p.close();
    Ok(())
}

/// Why no more samples will come, if none will: this participant stopped (excluded, or
/// it lost the majority when the publisher went), or every reader matched a writer and
/// none is matched now (the publisher left). The subscriber then reports what it got
/// instead of waiting out its deadline.
fn no_more_samples<T: spindle_topics::TopicType>(
    p: &DomainParticipant,
    readers: &[DataReader<T>],
) -> Option<String> {
    if let Some(why) = p.stopped() {
        return Some(format!("the participant stopped: {why}"));
    }
    readers
        .iter()
        .all(|r| {
            let m = r.subscription_matched_status();
            m.total_count > 0 && m.current_count == 0
        })
        .then(|| "the publisher left".to_string())
}

/// The flags every child process of a run gets from the parent's: how the participants
/// are set up and what the samples are (each mode adds its own).
pub(crate) fn child_args(a: &Args, exe_args: &[String], c: &mut Command) {
    c.args(exe_args)
        .args(["--transport", &a.transport, "--level", &a.level])
        .args(["--size", &a.size.to_string()])
        .args(["--window", &a.window.to_string()])
        .args(["--topic-subgroups", &a.topic_subgroups.to_string()]);
    if a.listener {
        c.arg("--listener");
    }
    if a.loan {
        c.arg("--loan");
    }
    if let Some(us) = a.spin_before_park_us {
        c.args(["--spin-before-park-us", &us.to_string()]);
    }
    if let Some(us) = a.busy_yield_us {
        c.args(["--busy-yield-us", &us.to_string()]);
    }
    if let Some(cpus) = &a.predicate_cpus {
        let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        c.args(["--predicate-cpus", &list.join(",")]);
    }
    if let Some(p) = a.predicate_fifo_priority {
        c.args(["--predicate-fifo-priority", &p.to_string()]);
    }
    if let Some(ms) = a.suspect_floor_ms {
        c.args(["--suspect-floor-ms", &ms.to_string()]);
    }
    if let Some(ms) = a.entity_timeout_ms {
        c.args(["--entity-timeout-ms", &ms.to_string()]);
    }
    if let Some(b) = a.slot_payload_bytes {
        c.args(["--slot-payload-bytes", &b.to_string()]);
    }
    if let Some(w) = a.large_window_messages {
        c.args(["--large-window-messages", &w.to_string()]);
    }
}

fn bench(a: &Args, exe_args: &[String]) -> Result<String, BoxError> {
    let exe = std::env::current_exe()?;
    let common = |c: &mut Command| {
        child_args(a, exe_args, c);
        c.args(["--samples", &a.samples.to_string()]);
        if a.latency {
            c.arg("--latency");
        }
        c.args(["--busy-topics", &a.busy_topics.to_string()])
            .args(["--idle-topics", &a.idle_topics.to_string()]);
    };
    let (pub_listen, sub_listen) = listen_pair(a, "perf");
    let mut pc = Command::new(&exe);
    common(&mut pc);
    let mut publisher = pc
        .args(["pub", &pub_listen])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut pout = BufReader::new(publisher.stdout.take().ok_or("stdout")?).lines();
    let addr = pout
        .next()
        .ok_or("publisher ended")??
        .strip_prefix("ADDR ")
        .ok_or("expected ADDR")?
        .to_string();
    let mut sc = Command::new(&exe);
    common(&mut sc);
    let mut subscriber = sc
        .args(["sub", &sub_listen, &addr])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut sout = BufReader::new(subscriber.stdout.take().ok_or("stdout")?).lines();
    if sout.next().ok_or("subscriber ended")?? != "READY" {
        return Err("subscriber not ready".into());
    }
    if pout.next().ok_or("publisher ended")?? != "READY" {
        return Err("publisher not ready".into());
    }
    let mut pin = publisher.stdin.take().ok_or("stdin")?;
    writeln!(pin, "GO")?;
    pin.flush()?;
    let rate = sout.next().ok_or("subscriber ended without a result")??;
    let lat = pout.next().ok_or("publisher ended without a result")??;
    drop(pin);
    let _ = subscriber.wait();
    let _ = publisher.wait();
    let r: Vec<&str> = rate.split_whitespace().collect();
    let l: Vec<&str> = lat.split_whitespace().collect();
    if r.len() != 3 || l.len() != 3 {
        return Err(format!("unexpected results {rate:?} {lat:?}").into());
    }
    let count: f64 = r[1].parse()?;
    let secs: f64 = r[2].parse()?;
    // null when nothing arrived (never a rate of 0 for samples that did).
    let (msgs_per_s, bytes_per_s) = if count > 0.0 && secs > 0.0 {
        let m = count / secs;
        (format!("{m:.0}"), format!("{:.0}", m * a.size as f64))
    } else {
        ("null".to_string(), "null".to_string())
    };
    Ok(format!(
        "{{\"transport\":\"{}\",\"level\":\"{}\",\"size\":{},\"samples\":{},\"received\":{},\"latency_mode\":{},\"listener\":{},\"loan\":{},\"busy_topics\":{},\"idle_topics\":{},\"topic_subgroups\":{},\"msgs_per_s\":{},\"bytes_per_s\":{},\"lat_p50_us\":{},\"lat_p99_us\":{}}}",
        a.transport, a.level, a.size, a.samples, count, a.latency, a.listener, a.loan, a.busy_topics.max(1), a.idle_topics, a.topic_subgroups, msgs_per_s, bytes_per_s, l[1], l[2]
    ))
}
