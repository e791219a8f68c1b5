//! Fuzzes what a peer sends before and right after a link is authenticated: handshake
//! message 1 (to an acceptor), message 2 (to a dialer), and encrypted records (to a
//! link's reader). Any bytes are refused with an error, never a panic, and only the
//! real handshake opens a link.
//!
//! ```text
//! cd transport-rdma/fuzz && cargo +nightly fuzz run handshake -- -max_total_time=60
//! ```
#![no_main]

use std::io::Read;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use spindle_transport_rdma::trust::{
    read_framed, AcceptorHandshake, InitiatorHandshake, Opener, Opening, RecvCipher,
    HANDSHAKE_MESSAGE_BYTES_MAX,
};
use spindle_transport_rdma::DomainSecret;

fn secret() -> &'static DomainSecret {
    static SECRET: OnceLock<DomainSecret> = OnceLock::new();
    SECRET.get_or_init(|| DomainSecret::new(b"the fuzzed domain's secret").unwrap())
}

/// The receiving half of one real session (the acceptor's), for the records mode.
fn session() -> &'static RecvCipher {
    static RECV: OnceLock<RecvCipher> = OnceLock::new();
    RECV.get_or_init(|| {
        let (init, m1) = InitiatorHandshake::start(secret(), 1, 2).unwrap();
        let (acc, _, m2) = AcceptorHandshake::respond(secret(), 2, &m1[2..]).unwrap();
        let (_, confirm) = init.finish(&m2[2..]).unwrap();
        acc.confirm(&confirm[2..]).unwrap().recv
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        // An acceptor reads message 1 from anyone.
        0 => {
            let _ = AcceptorHandshake::respond(secret(), 2, rest);
        }
        // A dialer reads message 2 from whoever answered.
        1 => {
            let (init, _) = InitiatorHandshake::start(secret(), 1, 2).unwrap();
            assert!(init.finish(rest).is_err(), "forged message 2 accepted");
        }
        // Length-prefixed handshake messages off a stream.
        2 => {
            let mut stream = rest;
            while read_framed(&mut stream, HANDSHAKE_MESSAGE_BYTES_MAX, "fuzz").is_ok() {}
        }
        // A link's reader opens records: forged ones never open.
        _ => {
            let mut opener = Opener::new(session().clone());
            let mut inner = rest;
            let mut plain = Vec::new();
            let got = Opening {
                inner: &mut inner,
                opener: Some(&mut opener),
            }
            .read_to_end(&mut plain);
            assert!(got.is_err() || plain.is_empty(), "a forged record opened");
        }
    }
});
