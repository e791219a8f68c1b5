//! A plain Spindle DDS application (`spindle-dds-core` only; no RTPS crate) for the
//! interop tests: publishes or checks the interop workload in a Spindle domain.
//!
//! ```text
//! interop-spindle-peer pub CONFIG.toml WRITER COUNT PAYLOAD_BYTES [READERS [GAP_US]]
//!     waits for READERS (default 1) matched readers, pausing GAP_US between samples writes COUNT samples and a dispose of k0, prints
//!     `SENT COUNT`, and stays up until stdin closes
//! interop-spindle-peer count CONFIG.toml EXPECTED TIMEOUT_S
//!     prints `READY`, counts data samples until EXPECTED arrived and then QUIET_MS more
//!     (or TIMEOUT_S), prints `COUNT n`, stays up until stdin closes
//! interop-spindle-peer perf-pub CONFIG.toml MODE SIZE COUNT
//! interop-spindle-peer perf-sub CONFIG.toml MODE SIZE COUNT TIMEOUT_S STACK
//!     the comparison workload (`spindle_interop_tests::perf`): MODE is `throughput` or
//!     `latency`; the subscriber prints `READY`, then one JSON line labelled STACK
//! interop-spindle-peer record CONFIG.toml TIMEOUT_S
//!     prints `READY`, takes until RECORD_QUIET_MS pass without a sample, prints
//!     `RECORD samples=N set=… order=…` (the semantic comparison)
//! interop-spindle-peer host CONFIG.toml
//!     joins (or starts) the domain with no reader or writer, prints `READY`, stays up
//!     until stdin closes
//! interop-spindle-peer sub CONFIG.toml WRITERS COUNT PAYLOAD_BYTES TIMEOUT_S
//!     prints `READY`, takes until WRITERS writers delivered COUNT samples and a dispose
//!     each, prints the checker's summary (`OK …` or `INCOMPLETE …`), stays up until stdin
//!     closes; exit 0 iff OK
//! ```
//!
//! Readers are woken as a Spindle application would be, never polled: `perf-sub` takes in
//! `on_data_available` on the participant's delivery thread (a listener, as Cyclone's
//! `ddsperf` does by default), the other modes wait in a WaitSet on a read condition.
//!
//! With `RUST_LOG` set (e.g. `info,spindle_transport_rdma=debug`), the engine's and the
//! fabric's tracing goes to stderr, which `scripts/bench-interop.sh --keep` keeps: the
//! view changes, suspicions and dropped links of a run that lost a member.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use spindle_dds_core::{
    DataReader, DataReaderListener, DomainParticipantFactory, InstanceState, ParticipantConfig,
    StateMask, WaitSet,
};
use spindle_interop_tests::perf::{
    now_ns, perf_value, stamp_perf_value, PerfStats, LATENCY_GAP_US, PERF_TOPIC,
};
use spindle_interop_tests::workload::{
    key_of, value_of, Checker, Record, DISPOSED_KEY, KEYS, RECORD_QUIET_MS,
};
use spindle_interop_tests::TOPIC;
use spindle_qos::{
    DataReaderQos, DataWriterQos, DomainParticipantQos, History, Reliability, TopicQos,
};
use spindle_topics::{KeyedString, TopicType};

/// Longest single WaitSet wait before a loop looks at its deadline again (a sample wakes
/// it at once).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Most samples one take of the perf listener lends.
const PERF_TAKE_MAX: usize = 1024;

/// How long `count` keeps counting after the expected number arrived.
const QUIET_MS: u64 = 1_500;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({what}) missing or bad: {args:?}"))
}

/// A WaitSet that wakes when `reader` holds samples.
fn data_waitset(reader: &DataReader<KeyedString>) -> WaitSet {
    let mut ws = WaitSet::new();
    ws.attach_condition(reader.create_readcondition(StateMask::ANY));
    ws
}

/// Waits for samples, at most [`WAIT_SLICE`] and never past `deadline`.
fn wait_data(ws: &WaitSet, deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    // A timeout is not an error here: the caller looks at its deadline.
    let _ = ws.wait(left.min(WAIT_SLICE));
}

/// The perf subscriber's listener: takes (loaned, decoding each value for its stamp) on
/// the delivery thread and wakes the main thread once `count` samples arrived.
struct PerfListener {
    state: Arc<(Mutex<PerfStats>, Condvar)>,
    count: u64,
}

impl DataReaderListener<KeyedString> for PerfListener {
    fn on_data_available(&self, r: &DataReader<KeyedString>) {
        let (stats, done) = &*self.state;
        let mut st = stats.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let got = match r.take_loaned(PERF_TAKE_MAX, StateMask::ANY) {
                Ok(g) if !g.is_empty() => g,
                Ok(_) => break,
                Err(e) => {
                    eprintln!("take: {e}");
                    break;
                }
            };
            for s in got.iter() {
                if let Ok(Some(v)) = s.data() {
                    st.sample(&v.value);
                }
            }
        }
        if st.samples() >= self.count {
            done.notify_all();
        }
    }
}

fn wait_stdin() {
    for line in std::io::stdin().lock().lines() {
        if line.map(|l| l.trim() == "stop").unwrap_or(true) {
            break;
        }
    }
}

fn main() -> ExitCode {
    // Only when asked for: without RUST_LOG the peer writes nothing the runs did not.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let path: PathBuf = arg(&args, 1, "config");
    let cfg = ParticipantConfig::from_toml_file(&path).expect("participant config");
    let p = DomainParticipantFactory::instance()
        .create_participant(cfg.domain_id, DomainParticipantQos::default(), &cfg)
        .expect("participant");
    let topic_name = if mode.starts_with("perf") {
        PERF_TOPIC
    } else {
        TOPIC
    };
    let topic = p
        .create_topic::<KeyedString>(topic_name, TopicQos::default())
        .expect("topic");
    let reliable = Reliability {
        max_blocking_time: spindle_qos::Duration::from_millis(10_000),
        ..Reliability::reliable()
    };
    // Every mode's reader: reliable, keep-all; every mode's writer: reliable.
    let new_reader = || {
        p.create_subscriber(Default::default())
            .expect("subscriber")
            .create_datareader(
                &topic,
                DataReaderQos::default()
                    .with_reliability(reliable)
                    .with_history(History::keep_all()),
            )
            .expect("reader")
    };
    let new_writer = || {
        p.create_publisher(Default::default())
            .expect("publisher")
            .create_datawriter(&topic, DataWriterQos::default().with_reliability(reliable))
            .expect("writer")
    };
    let code = match mode {
        "pub" => {
            let writer_id: u32 = arg(&args, 2, "writer");
            let count: u64 = arg(&args, 3, "count");
            let bytes: usize = arg(&args, 4, "payload bytes");
            let writer = new_writer();
            let readers: u32 = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(1);
            let gap_us: u64 = args.get(6).and_then(|a| a.parse().ok()).unwrap_or(0);
            writer
                .wait_for_readers(readers, Duration::from_secs(30))
                .expect("matched readers");
            for seq in 0..count {
                if gap_us > 0 {
                    std::thread::sleep(Duration::from_micros(gap_us));
                }
                writer
                    .write(&KeyedString {
                        key: key_of(seq),
                        value: value_of(writer_id, seq, bytes),
                    })
                    .expect("write");
            }
            writer
                .dispose(&KeyedString {
                    key: DISPOSED_KEY.into(),
                    value: String::new(),
                })
                .expect("dispose");
            println!("SENT {count}");
            wait_stdin();
            ExitCode::SUCCESS
        }
        "sub" => {
            let writers: usize = arg(&args, 2, "writers");
            let count: u64 = arg(&args, 3, "count");
            let bytes: usize = arg(&args, 4, "payload bytes");
            let timeout_s: u64 = arg(&args, 5, "timeout");
            let reader = new_reader();
            println!("READY");
            let mut check = Checker::new(count, bytes);
            let mut keys: HashMap<[u8; 16], String> = HashMap::new();
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let ws = data_waitset(&reader);
            while !check.complete(writers) && Instant::now() < deadline {
                wait_data(&ws, deadline);
                let got = reader.take(256, StateMask::ANY).expect("take");
                for s in got {
                    match s.data {
                        Some(v) => {
                            if let Ok(h) = v.key_hash() {
                                keys.entry(h.0).or_insert_with(|| v.key.clone());
                            }
                            check.data(&v.key, &v.value);
                        }
                        // A notice without data: a dispose, unless its instance now has
                        // no writers (an unregister). Its instance_state is the instance's
                        // state at this take, as DDS says, so a dispose of k0 that the
                        // other writer's next k0 made alive again before this take reads
                        // Alive: still a dispose.
                        None if s.info.instance_state != InstanceState::NotAliveNoWriters => {
                            let k = keys
                                .get(&s.info.instance_handle.0 .0)
                                .cloned()
                                .unwrap_or_else(|| format!("unknown {}", s.info.instance_handle.0));
                            check.dispose(&k);
                        }
                        None => {}
                    }
                }
            }
            for p in check.problems() {
                println!("PROBLEM {p}");
            }
            println!("{}", check.summary(writers));
            let ok = check.complete(writers) && check.problems().is_empty();
            wait_stdin();
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "count" => {
            let expected: u64 = arg(&args, 2, "expected");
            let timeout_s: u64 = arg(&args, 3, "timeout");
            let reader = new_reader();
            println!("READY");
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let ws = data_waitset(&reader);
            let mut n = 0u64;
            let mut quiet_until: Option<Instant> = None;
            while Instant::now() < deadline && quiet_until.is_none_or(|q| Instant::now() < q) {
                wait_data(&ws, quiet_until.unwrap_or(deadline).min(deadline));
                let got = reader.take(256, StateMask::ANY).expect("take");
                n += got.iter().filter(|s| s.info.valid_data).count() as u64;
                if n >= expected && quiet_until.is_none() {
                    // Then watch a while longer: a loop would keep samples coming.
                    quiet_until = Some(Instant::now() + Duration::from_millis(QUIET_MS));
                }
            }
            println!("COUNT {n}");
            wait_stdin();
            ExitCode::SUCCESS
        }
        "perf-pub" => {
            let mode: String = arg(&args, 2, "mode");
            let size: usize = arg(&args, 3, "size");
            let count: u64 = arg(&args, 4, "count");
            let writer = new_writer();
            writer
                .wait_for_readers(1, Duration::from_secs(60))
                .expect("a matched reader");
            // One kept sample per instance, its stamp rewritten in place before each
            // write (`write` borrows the sample), as ddsperf keeps its sample.
            let mut samples: Vec<KeyedString> = (0..KEYS)
                .map(|k| KeyedString {
                    key: key_of(k),
                    value: perf_value(0, 0, size),
                })
                .collect();
            for seq in 0..count {
                if mode == "latency" {
                    std::thread::sleep(Duration::from_micros(LATENCY_GAP_US));
                }
                let sample = &mut samples[(seq % KEYS) as usize];
                stamp_perf_value(&mut sample.value, now_ns(), seq);
                writer.write(sample).expect("write");
            }
            println!("SENT {count}");
            wait_stdin();
            ExitCode::SUCCESS
        }
        "perf-sub" => {
            let mode: String = arg(&args, 2, "mode");
            let size: usize = arg(&args, 3, "size");
            let count: u64 = arg(&args, 4, "count");
            let timeout_s: u64 = arg(&args, 5, "timeout");
            let stack: String = arg(&args, 6, "stack");
            let reader = new_reader();
            let state = Arc::new((Mutex::new(PerfStats::default()), Condvar::new()));
            reader.set_listener(PerfListener {
                state: Arc::clone(&state),
                count,
            });
            println!("READY");
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let (stats, done) = &*state;
            let mut st = stats.lock().unwrap_or_else(PoisonError::into_inner);
            while st.samples() < count {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = done
                    .wait_timeout(st, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            println!("{}", st.json(&stack, &mode, size, count));
            let ok = st.samples() >= count;
            drop(st);
            wait_stdin();
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        "record" => {
            let timeout_s: u64 = arg(&args, 2, "timeout");
            let reader = new_reader();
            println!("READY");
            let mut rec = Record::default();
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let ws = data_waitset(&reader);
            let mut last = Instant::now();
            while Instant::now() < deadline
                && (rec.is_empty() || last.elapsed() < Duration::from_millis(RECORD_QUIET_MS))
            {
                wait_data(&ws, deadline);
                let got = reader.take(256, StateMask::ANY).expect("take");
                for s in got {
                    if let Some(v) = s.data {
                        rec.data(&v.value);
                        last = Instant::now();
                    }
                }
            }
            println!("{}", rec.line());
            wait_stdin();
            ExitCode::SUCCESS
        }
        "host" => {
            println!("READY");
            wait_stdin();
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("interop-spindle-peer: mode {other:?}: pub, sub or host");
            ExitCode::from(2)
        }
    };
    p.close();
    code
}
