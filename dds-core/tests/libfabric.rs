//! Participants whose TOML says `transport = "libfabric"` (feature `libfabric`): two of
//! them on libfabric's `tcp;ofi_rxm` provider over loopback form a domain and exchange
//! samples in one order. Every wait is bounded; no timing is asserted.
#![cfg(feature = "libfabric")]

use std::time::Duration;

use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask, Transport};
use spindle_qos::{DataReaderQos, DataWriterQos, DomainParticipantQos, History, Reliability};
use spindle_topics::KeyedString;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn two_libfabric_participants_from_toml_exchange_samples() {
    let port = free_port();
    let c1 = ParticipantConfig::from_toml_str(
        &format!(
            "node_id = 1\ntransport = \"libfabric\"\nprovider = \"tcp;ofi_rxm\"\n\
             listen = \"127.0.0.1:{port}\"\nbootstrap = [1]\nentity_timeout_ms = 60000\n"
        ),
        "n1.toml",
    )
    .unwrap();
    assert_eq!(c1.transport, Transport::Libfabric);
    let f = DomainParticipantFactory::instance();
    let p1 = f
        .create_participant(0, DomainParticipantQos::default(), &c1)
        .unwrap();
    let c2 = ParticipantConfig::from_toml_str(
        &format!(
            "node_id = 2\ntransport = \"libfabric\"\nprovider = \"tcp;ofi_rxm\"\n\
             listen = \"127.0.0.1:0\"\nentity_timeout_ms = 60000\n\n[[contacts]]\nnode = 1\n\
             address = \"{}\"\n",
            p1.address()
        ),
        "n2.toml",
    )
    .unwrap();
    let p2 = f
        .create_participant(0, DomainParticipantQos::default(), &c2)
        .unwrap();
    let qos = DataReaderQos::default()
        .with_reliability(Reliability::reliable())
        .with_history(History::keep_all());
    let t2 = p2
        .create_topic::<KeyedString>("fi", Default::default())
        .unwrap();
    let reader = p2
        .create_subscriber(Default::default())
        .unwrap()
        .create_datareader(&t2, qos)
        .unwrap();
    let t1 = p1
        .create_topic::<KeyedString>("fi", Default::default())
        .unwrap();
    let writer = p1
        .create_publisher(Default::default())
        .unwrap()
        .create_datawriter(&t1, DataWriterQos::default())
        .unwrap();
    const N: usize = 50;
    for i in 0..N {
        writer
            .write(&KeyedString {
                key: "k".into(),
                value: format!("v{i}"),
            })
            .unwrap();
    }
    let mut got = Vec::new();
    // A bound against a hang, not a speed assertion.
    for _ in 0..60_000 {
        got.extend(reader.take(N, StateMask::ANY).unwrap());
        if got.len() >= N {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let values: Vec<String> = got
        .iter()
        .filter_map(|s| s.data.as_ref().map(|d| d.value.clone()))
        .collect();
    assert_eq!(values, (0..N).map(|i| format!("v{i}")).collect::<Vec<_>>());
    assert_eq!(p2.view().unwrap().members.len(), 2);
    drop((writer, reader, t1, t2));
}
