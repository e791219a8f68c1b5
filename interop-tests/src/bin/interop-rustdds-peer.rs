//! A plain RustDDS application (the `rustdds` API only; no Spindle crate) for the interop
//! tests: publishes or checks the interop workload on RTPS over UDP, on loopback only.
//!
//! ```text
//! interop-rustdds-peer pub DOMAIN WRITER COUNT PAYLOAD_BYTES [READERS [GAP_US]]
//!     waits for READERS (default 1) matched readers, pausing GAP_US between samples, writes COUNT samples and a dispose of k0, waits for
//!     every acknowledgment, prints `SENT COUNT`, and stays up until stdin closes
//! interop-rustdds-peer sub DOMAIN WRITERS COUNT PAYLOAD_BYTES TIMEOUT_S
//!     prints `READY` (and `MATCHED` once it knows a writer), takes until WRITERS writers delivered COUNT samples and a dispose
//!     each, prints the checker's summary (`OK …` or `INCOMPLETE …`); exit 0 iff OK
//! interop-rustdds-peer record DOMAIN TIMEOUT_S
//!     prints `READY`, takes until RECORD_QUIET_MS pass without a sample, prints
//!     `RECORD samples=N set=… order=…` (the semantic comparison)
//! interop-rustdds-peer perf-pub DOMAIN MODE SIZE COUNT
//! interop-rustdds-peer perf-sub DOMAIN MODE SIZE COUNT TIMEOUT_S STACK
//!     the comparison workload (`spindle_interop_tests::perf`): MODE is `throughput` or
//!     `latency`; the subscriber prints `READY`, then one JSON line labelled STACK
//! With `INTEROP_WAIT_GO=1`, `pub` prints `MATCHED` once matched and waits for a line
//! `go` on stdin before it writes.
//! ```

use std::io::BufRead;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rustdds::policy::{History, Reliability, ResourceLimits};
use rustdds::with_key::Sample;
use rustdds::{
    DataReaderStatus, DataWriterStatus, DomainParticipantBuilder, Keyed, QosPolicies,
    QosPolicyBuilder, ReadCondition, StatusEvented, TopicKind,
};
use serde::{Deserialize, Serialize};
use spindle_interop_tests::perf::{now_ns, perf_value, PerfStats, LATENCY_GAP_US, PERF_TOPIC};
use spindle_interop_tests::workload::{
    key_of, value_of, Checker, Record, DISPOSED_KEY, RECORD_QUIET_MS,
};
use spindle_interop_tests::{TOPIC, TYPE_NAME};

/// `DDS::KeyedString`: `@key string key; string value;`.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct KeyedString {
    key: String,
    value: String,
}

impl Keyed for KeyedString {
    type K = String;
    fn key(&self) -> String {
        self.key.clone()
    }
}

/// With `INTEROP_WAIT_GO=1` a publisher, once matched, prints `MATCHED` and waits for a
/// line `go` on stdin (the test sends it when the other side knows this writer too).
fn wait_go() {
    if std::env::var("INTEROP_WAIT_GO").is_ok_and(|v| v == "1") {
        println!("MATCHED");
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.trim() == "go" {
                return;
            }
            line.clear();
        }
    }
}

/// Most samples taken at once.
const TAKE_BATCH: usize = 1024;

/// RustDDS readers keep 64 samples unless told: room for a whole run.
const SAMPLES_MAX: i32 = 1 << 20;

fn qos() -> QosPolicies {
    QosPolicyBuilder::new()
        .reliability(Reliability::Reliable {
            max_blocking_time: rustdds::Duration::from_secs(5),
        })
        .history(History::KeepAll)
        .resource_limits(ResourceLimits {
            max_samples: SAMPLES_MAX,
            max_instances: SAMPLES_MAX,
            max_samples_per_instance: SAMPLES_MAX,
        })
        .build()
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({what}) missing or bad: {args:?}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let domain: u16 = arg(&args, 1, "domain");
    let participant = DomainParticipantBuilder::new(domain)
        .with_only_networks(["127.0.0.1".parse::<std::net::IpAddr>().expect("ip")])
        .build()
        .expect("RustDDS participant");
    if mode.starts_with("perf") {
        return match mode {
            "perf-pub" => perf_pub(&participant, &args),
            _ => perf_sub(&participant, &args),
        };
    }
    let topic = participant
        .create_topic(
            TOPIC.to_string(),
            TYPE_NAME.to_string(),
            &qos(),
            TopicKind::WithKey,
        )
        .expect("topic");
    match mode {
        "pub" => {
            let writer_id: u32 = arg(&args, 2, "writer");
            let count: u64 = arg(&args, 3, "count");
            let bytes: usize = arg(&args, 4, "payload bytes");
            let publisher = participant.create_publisher(&qos()).expect("publisher");
            let writer = publisher
                .create_datawriter_cdr::<KeyedString>(&topic, Some(qos()))
                .expect("writer");
            let readers: usize = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(1);
            let gap_us: u64 = args.get(6).and_then(|a| a.parse().ok()).unwrap_or(0);
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut matched = 0;
            // Wait for the readers to match (RustDDS 0.15's matched-subscriptions call is a
            // placeholder; the status events are not).
            while matched < readers {
                match writer.try_recv_status() {
                    Some(DataWriterStatus::PublicationMatched { .. }) => matched += 1,
                    Some(_) => {}
                    None => {
                        assert!(Instant::now() < deadline, "no reader matched in 30 s");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
            wait_go();
            for seq in 0..count {
                if gap_us > 0 {
                    std::thread::sleep(Duration::from_micros(gap_us));
                }
                let v = KeyedString {
                    key: key_of(seq),
                    value: value_of(writer_id, seq, bytes),
                };
                // Reliable: blocks while the send window is full (back-pressure).
                let mut v = Some(v);
                while let Some(s) = v.take() {
                    if let Err(rustdds::dds::result::WriteError::WouldBlock { data }) =
                        writer.write(s, None)
                    {
                        v = Some(data);
                    }
                }
            }
            writer
                .dispose(&DISPOSED_KEY.to_string(), None)
                .expect("dispose");
            // Linger: reliable delivery finishes only while the writer lives.
            let acked = writer.wait_for_acknowledgments(Duration::from_secs(60));
            println!("SENT {count} acked={acked:?}");
            for line in std::io::stdin().lock().lines() {
                if line.map(|l| l.trim() == "stop").unwrap_or(true) {
                    break;
                }
            }
            ExitCode::SUCCESS
        }
        "record" => {
            let timeout_s: u64 = arg(&args, 2, "timeout");
            let subscriber = participant.create_subscriber(&qos()).expect("subscriber");
            let mut reader = subscriber
                .create_datareader_cdr::<KeyedString>(&topic, Some(qos()))
                .expect("reader");
            println!("READY");
            let mut rec = Record::default();
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let mut last = Instant::now();
            while Instant::now() < deadline
                && (rec.is_empty() || last.elapsed() < Duration::from_millis(RECORD_QUIET_MS))
            {
                match reader.take(TAKE_BATCH, ReadCondition::not_read()) {
                    Ok(got) if got.is_empty() => std::thread::sleep(Duration::from_millis(1)),
                    Ok(got) => {
                        for s in got {
                            if let Sample::Value(v) = s.into_value() {
                                rec.data(&v.value);
                                last = Instant::now();
                            }
                        }
                    }
                    Err(e) => eprintln!("take: {e:?}"),
                }
            }
            println!("{}", rec.line());
            for line in std::io::stdin().lock().lines() {
                if line.map(|l| l.trim() == "stop").unwrap_or(true) {
                    break;
                }
            }
            ExitCode::SUCCESS
        }
        "sub" => {
            let writers: usize = arg(&args, 2, "writers");
            let count: u64 = arg(&args, 3, "count");
            let bytes: usize = arg(&args, 4, "payload bytes");
            let timeout_s: u64 = arg(&args, 5, "timeout");
            let subscriber = participant.create_subscriber(&qos()).expect("subscriber");
            let mut reader = subscriber
                .create_datareader_cdr::<KeyedString>(&topic, Some(qos()))
                .expect("reader");
            println!("READY");
            let mut matched = false;
            let mut check = Checker::new(count, bytes);
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            while !check.complete(writers) && Instant::now() < deadline {
                while let Some(st) = reader.try_recv_status() {
                    if !matched && matches!(st, DataReaderStatus::SubscriptionMatched { .. }) {
                        // The reader knows a writer: what it writes now reaches us.
                        println!("MATCHED");
                        matched = true;
                    }
                }
                // In batches: RustDDS sorts its whole cache on every take.
                match reader.take(TAKE_BATCH, ReadCondition::not_read()) {
                    // A timed poll: the mio 0.6 wake-ups can be missed.
                    Ok(got) if got.is_empty() => std::thread::sleep(Duration::from_micros(500)),
                    Ok(got) => {
                        for s in got {
                            match s.into_value() {
                                Sample::Value(v) => check.data(&v.key, &v.value),
                                Sample::Dispose(k) => check.dispose(&k),
                            }
                        }
                    }
                    Err(e) => eprintln!("take: {e:?}"),
                }
            }
            for p in check.problems() {
                println!("PROBLEM {p}");
            }
            println!("{}", check.summary(writers));
            if check.complete(writers) && check.problems().is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        other => {
            eprintln!("interop-rustdds-peer: mode {other:?}: pub, sub, perf-pub or perf-sub");
            ExitCode::from(2)
        }
    }
}

/// How long a perf subscriber sleeps when its reader had nothing (a timed poll).
const PERF_POLL_US: u64 = 50;

fn perf_topic(participant: &rustdds::DomainParticipant) -> rustdds::Topic {
    participant
        .create_topic(
            PERF_TOPIC.to_string(),
            TYPE_NAME.to_string(),
            &qos(),
            TopicKind::WithKey,
        )
        .expect("topic")
}

fn perf_pub(participant: &rustdds::DomainParticipant, args: &[String]) -> ExitCode {
    let mode: String = arg(args, 2, "mode");
    let size: usize = arg(args, 3, "size");
    let count: u64 = arg(args, 4, "count");
    let topic = perf_topic(participant);
    let publisher = participant.create_publisher(&qos()).expect("publisher");
    let writer = publisher
        .create_datawriter_cdr::<KeyedString>(&topic, Some(qos()))
        .expect("writer");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match writer.try_recv_status() {
            Some(DataWriterStatus::PublicationMatched { .. }) => break,
            Some(_) => {}
            None => {
                assert!(Instant::now() < deadline, "no reader matched in 60 s");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    for seq in 0..count {
        if mode == "latency" {
            std::thread::sleep(Duration::from_micros(LATENCY_GAP_US));
        }
        let mut v = Some(KeyedString {
            key: key_of(seq),
            value: perf_value(now_ns(), seq, size),
        });
        while let Some(s) = v.take() {
            if let Err(rustdds::dds::result::WriteError::WouldBlock { data }) =
                writer.write(s, None)
            {
                v = Some(data);
            }
        }
    }
    let acked = writer.wait_for_acknowledgments(Duration::from_secs(120));
    println!("SENT {count} acked={acked:?}");
    for line in std::io::stdin().lock().lines() {
        if line.map(|l| l.trim() == "stop").unwrap_or(true) {
            break;
        }
    }
    ExitCode::SUCCESS
}

fn perf_sub(participant: &rustdds::DomainParticipant, args: &[String]) -> ExitCode {
    let mode: String = arg(args, 2, "mode");
    let size: usize = arg(args, 3, "size");
    let count: u64 = arg(args, 4, "count");
    let timeout_s: u64 = arg(args, 5, "timeout");
    let stack: String = arg(args, 6, "stack");
    let topic = perf_topic(participant);
    let subscriber = participant.create_subscriber(&qos()).expect("subscriber");
    let mut reader = subscriber
        .create_datareader_cdr::<KeyedString>(&topic, Some(qos()))
        .expect("reader");
    println!("READY");
    let mut stats = PerfStats::default();
    let deadline = Instant::now() + Duration::from_secs(timeout_s);
    while stats.samples() < count && Instant::now() < deadline {
        match reader.take(TAKE_BATCH, ReadCondition::not_read()) {
            Ok(got) if got.is_empty() => std::thread::sleep(Duration::from_micros(PERF_POLL_US)),
            Ok(got) => {
                for s in got {
                    if let Sample::Value(v) = s.into_value() {
                        stats.sample(&v.value);
                    }
                }
            }
            Err(e) => eprintln!("take: {e:?}"),
        }
    }
    println!("{}", stats.json(&stack, &mode, size, count));
    if stats.samples() >= count {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
