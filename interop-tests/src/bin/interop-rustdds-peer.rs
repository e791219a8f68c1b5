//! A plain RustDDS application (the `rustdds` API only; no Spindle crate) for the interop
//! tests: publishes or checks the interop workload on RTPS over UDP, on loopback only.
//!
//! ```text
//! interop-rustdds-peer pub DOMAIN WRITER COUNT PAYLOAD_BYTES [READERS]
//!     waits for READERS (default 1) matched readers, writes COUNT samples and a dispose of k0, waits for
//!     every acknowledgment, prints `SENT COUNT`, and stays up until stdin closes
//! interop-rustdds-peer sub DOMAIN WRITERS COUNT PAYLOAD_BYTES TIMEOUT_S
//!     prints `READY`, takes until WRITERS writers delivered COUNT samples and a dispose
//!     each, prints the checker's summary (`OK …` or `INCOMPLETE …`); exit 0 iff OK
//! ```

use std::io::BufRead;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rustdds::policy::{History, Reliability, ResourceLimits};
use rustdds::with_key::Sample;
use rustdds::{
    DataWriterStatus, DomainParticipantBuilder, Keyed, QosPolicies, QosPolicyBuilder,
    ReadCondition, StatusEvented, TopicKind,
};
use serde::{Deserialize, Serialize};
use spindle_interop_tests::workload::{key_of, value_of, Checker, DISPOSED_KEY};
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
            for seq in 0..count {
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
            let mut check = Checker::new(count, bytes);
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            while !check.complete(writers) && Instant::now() < deadline {
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
            eprintln!("interop-rustdds-peer: mode {other:?}: pub or sub");
            ExitCode::from(2)
        }
    }
}
