//! The participant's Prometheus endpoint (`[metrics] listen`), scraped over loopback: a
//! domain of one over tcp writes and reads samples, and the scraped values are the
//! participant's counters. Bad addresses are configuration errors naming the key.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask};
use spindle_qos::{DataReaderQos, DataWriterQos, DomainParticipantQos, Reliability, TopicQos};
use spindle_topics::KeyedString;

/// One HTTP exchange: the status line and the body.
fn http(addr: std::net::SocketAddr, request: &[u8]) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// `name → value` of the exposition's samples; checks every sample has its HELP and TYPE.
fn parse(body: &str) -> BTreeMap<String, u64> {
    let mut values = BTreeMap::new();
    let mut typed = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let name = w.next().unwrap().to_string();
            assert!(matches!(w.next(), Some("counter" | "gauge")), "{line}");
            typed.push(name);
        } else if line.starts_with("# HELP ") {
        } else {
            let (name_labels, value) = line.rsplit_once(' ').expect(line);
            let name = name_labels.split('{').next().unwrap();
            assert_eq!(
                typed.last().map(String::as_str),
                Some(name),
                "TYPE before {line}"
            );
            values.insert(name.to_string(), value.parse().expect(line));
        }
    }
    values
}

#[test]
fn the_endpoint_serves_the_counters_over_loopback() {
    let mut cfg = ParticipantConfig::from_toml_str(
        r#"
node_id = 1
transport = "tcp"
listen = "127.0.0.1:0"
bootstrap = [1]
[metrics]
listen = "127.0.0.1:0"
"#,
        "metrics.toml",
    )
    .unwrap();
    cfg.entity_timeout_ms = 30_000;
    let p = DomainParticipantFactory::instance()
        .create_participant(0, DomainParticipantQos::default(), &cfg)
        .unwrap();
    let addr = p.metrics_address().expect("the endpoint listens");
    let topic = p
        .create_topic::<KeyedString>("scraped", TopicQos::default())
        .unwrap();
    let reader = p
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(
            &topic,
            DataReaderQos::default().with_reliability(Reliability::reliable()),
        )
        .unwrap();
    let writer = p
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&topic, DataWriterQos::default())
        .unwrap();
    const N: usize = 25;
    for i in 0..N {
        writer
            .write(&KeyedString {
                key: format!("k{i}"),
                value: format!("v{i}"),
            })
            .unwrap();
    }
    // One instance per sample, so the reader's KEEP_LAST 1 keeps them all. The bound
    // only stops a hang; it asserts nothing about speed.
    let mut got = 0;
    for _ in 0..60_000 {
        got += reader.take(N, StateMask::ANY).unwrap().len();
        if got >= N {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, N, "every sample read");
    let (status, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let v = parse(&body);
    assert_eq!(v["spindle_samples_written_total"], N as u64, "{body}");
    assert!(v["spindle_samples_received_total"] >= N as u64, "{body}");
    assert!(v["spindle_delivered_total"] >= N as u64, "{body}");
    assert!(v["spindle_views_installed_total"] >= 1, "{body}");
    assert_eq!(
        v["spindle_view_id"],
        u64::from(p.view().unwrap().vid),
        "{body}"
    );
    assert!(body.contains("node=\"1\""), "{body}");
    // Bad requests get a status, and the endpoint serves on.
    assert!(http(addr, b"BREW /pot HTTP/1.1\r\n\r\n").0.contains("405"));
    assert!(http(addr, b"GET /nothing HTTP/1.1\r\n\r\n")
        .0
        .contains("404"));
    assert!(http(addr, &[0xff; 8 * 1024]).0.contains("431"));
    let (status, _) = http(addr, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    drop((writer, reader, topic));
}

#[test]
fn bad_metrics_addresses_are_config_errors_naming_the_key() {
    let text = |listen: &str| {
        format!(
            "node_id = 1\ntransport = \"tcp\"\nlisten = \"127.0.0.1:0\"\nbootstrap = [1]\n\
             [metrics]\nlisten = \"{listen}\"\n"
        )
    };
    let e = ParticipantConfig::from_toml_str(&text("nowhere"), "m.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("m.toml") && e.contains("[metrics] listen"),
        "{e}"
    );
    let e = ParticipantConfig::from_toml_str(
        "node_id = 1\ntransport = \"tcp\"\nlisten = \"x\"\nbootstrap = [1]\n[metrics]\nport = 1\n",
        "m.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("port"), "{e}");
    // An address in use: the participant is not created, and says why.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg =
        ParticipantConfig::from_toml_str(&text(&taken.local_addr().unwrap().to_string()), "m")
            .unwrap();
    let e = DomainParticipantFactory::instance()
        .create_participant(0, DomainParticipantQos::default(), &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[metrics] listen"), "{e}");
}
