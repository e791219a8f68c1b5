//! Trust on the stream links: the domain secret, the Noise handshake that proves
//! knowledge of it, and the record layer that encrypts a link after it (sans-IO; the
//! drivers in `link/connect.rs` move these bytes over a stream).
//!
//! ## Why Noise
//!
//! A domain shares one secret. `Noise_NNpsk0_25519_ChaChaPoly_SHA256` (through the
//! `snow` crate, no home-made cryptography) is a mutual proof of a pre-shared key over
//! fresh ephemeral keys from both sides, and the same handshake yields the transport
//! keys that encrypt the link, so authentication and encryption are one exchange:
//!
//! 1. initiator → acceptor: `e`, and the payload `(initiator id, target id)` sealed under
//!    a key mixed from the PSK. An acceptor with another secret cannot open it: the peer
//!    is refused before it learns anything, and before any region is announced.
//! 2. acceptor → initiator: `e, ee`, and the payload `(acceptor id, initiator id)` sealed
//!    under keys mixed from the PSK and both ephemeral keys: proves the acceptor knows the
//!    secret, and that the answer is fresh (it depends on the initiator's new `e`).
//! 3. initiator → acceptor: the first transport record, `CONFIRM_MAGIC` and both ids.
//!    It proves the initiator holds the ephemeral key of message 1, so a recorded
//!    message 1 replayed by an outsider goes no further than this step.
//!
//! Both node ids are inside the handshake transcript, so the `Hello` that follows must
//! name the same ids. Every check is an AEAD tag verification (constant time, in the
//! `chacha20poly1305` crate) or a comparison of public ids.
//!
//! ## Records
//!
//! With encryption on, every byte after the handshake travels in records of
//! `len: u16 LE` and `len` bytes of ChaCha20-Poly1305 ciphertext (at most
//! [`RECORD_PLAIN_BYTES_MAX`] plaintext bytes each, nonces counting up from 0 in each
//! direction). The frame codec above is unchanged: it encodes and decodes plaintext.

use std::fmt;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use snow::params::NoiseParams;
use snow::{Builder, HandshakeState, StatelessTransportState};

use crate::{Error, NodeId, Result};

/// The Noise protocol every stream link of a domain with a secret speaks.
pub const NOISE_PROTOCOL: &str = "Noise_NNpsk0_25519_ChaChaPoly_SHA256";
/// Mixed into the handshake transcript: both sides must agree on it.
const PROLOGUE: &[u8] = b"spindle-dds stream link v1";
/// Label that separates the PSK derived from a domain secret from any other use of it.
const PSK_LABEL: &[u8] = b"spindle-dds domain secret v1\0";
/// Fewest bytes a domain secret may have.
pub const DOMAIN_SECRET_BYTES_MIN: usize = 16;
/// Most bytes a domain secret (or its key file) may have.
pub const DOMAIN_SECRET_BYTES_MAX: usize = 4096;
/// Largest handshake message accepted from a peer (ours are 56 bytes).
pub const HANDSHAKE_MESSAGE_BYTES_MAX: usize = 256;
/// Bytes of a record's length prefix (also the prefix of a handshake message).
pub const RECORD_HEADER_BYTES: usize = 2;
/// Bytes of the AEAD tag every record carries.
pub const RECORD_TAG_BYTES: usize = 16;
/// Largest Noise message, tag included.
const RECORD_BYTES_MAX: usize = 65_535;
/// Most plaintext bytes in one record.
pub const RECORD_PLAIN_BYTES_MAX: usize = RECORD_BYTES_MAX - RECORD_TAG_BYTES;
/// The first bytes of the initiator's confirmation record.
const CONFIRM_MAGIC: &[u8; 4] = b"SPDC";
/// Bytes of a handshake payload: two node ids.
const IDS_BYTES: usize = 8;

/// A domain's shared secret, kept only as the 32-byte Noise PSK derived from it
/// (SHA-256 over a label and the secret). Its `Debug` never shows it, so a logged
/// configuration does not leak it.
#[derive(Clone)]
pub struct DomainSecret {
    psk: Arc<[u8; 32]>,
}

impl DomainSecret {
    /// A secret from its bytes: at least [`DOMAIN_SECRET_BYTES_MIN`] and at most
    /// [`DOMAIN_SECRET_BYTES_MAX`] of them (a passphrase, or random bytes).
    pub fn new(secret: &[u8]) -> Result<DomainSecret> {
        if secret.len() < DOMAIN_SECRET_BYTES_MIN || secret.len() > DOMAIN_SECRET_BYTES_MAX {
            return Err(Error::Config(format!(
                "domain secret of {} bytes: it must have {DOMAIN_SECRET_BYTES_MIN}..={} bytes",
                secret.len(),
                DOMAIN_SECRET_BYTES_MAX
            )));
        }
        let mut h = Sha256::new();
        h.update(PSK_LABEL);
        h.update(secret);
        Ok(DomainSecret {
            psk: Arc::new(h.finalize().into()),
        })
    }

    /// A secret read from a key file: its bytes, without one trailing newline (`\n` or
    /// `\r\n`). The error names the file, never its contents.
    pub fn from_file(path: &Path) -> Result<DomainSecret> {
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::Config(format!("domain secret file {shown}: {e}")))?;
        if meta.len() > DOMAIN_SECRET_BYTES_MAX as u64 + 2 {
            return Err(Error::Config(format!(
                "domain secret file {shown}: {} bytes, at most {DOMAIN_SECRET_BYTES_MAX}",
                meta.len()
            )));
        }
        let mut bytes = std::fs::read(path)
            .map_err(|e| Error::Config(format!("domain secret file {shown}: {e}")))?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        DomainSecret::new(&bytes)
            .map_err(|e| Error::Config(format!("domain secret file {shown}: {e}")))
    }

    fn psk(&self) -> &[u8; 32] {
        &self.psk
    }
}

impl fmt::Debug for DomainSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DomainSecret(<redacted>)")
    }
}

impl PartialEq for DomainSecret {
    /// Constant time in the key (configurations are compared in tests, not on the wire).
    fn eq(&self, other: &Self) -> bool {
        self.psk
            .iter()
            .zip(other.psk.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for DomainSecret {}

fn refused(detail: impl Into<String>) -> Error {
    Error::Unauthenticated {
        detail: detail.into(),
    }
}

fn builder(secret: &DomainSecret) -> Result<Builder<'_>> {
    let params: NoiseParams = NOISE_PROTOCOL
        .parse()
        .map_err(|e| Error::Config(format!("noise parameters: {e}")))?;
    Builder::new(params)
        .psk(0, secret.psk())
        .and_then(|b| b.prologue(PROLOGUE))
        .map_err(|e| Error::Config(format!("noise builder: {e}")))
}

fn ids(a: NodeId, b: NodeId) -> [u8; IDS_BYTES] {
    let mut out = [0; IDS_BYTES];
    out[..4].copy_from_slice(&a.to_le_bytes());
    out[4..].copy_from_slice(&b.to_le_bytes());
    out
}

fn parse_ids(payload: &[u8]) -> Result<(NodeId, NodeId)> {
    if payload.len() != IDS_BYTES {
        return Err(refused(format!(
            "handshake payload of {} bytes, expected {IDS_BYTES}",
            payload.len()
        )));
    }
    let a = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let b = u32::from_le_bytes([payload[4], payload[5], payload[6], payload[7]]);
    Ok((a, b))
}

/// Appends a length-prefixed message to `out`.
fn push_framed(out: &mut Vec<u8>, msg: &[u8]) {
    assert!(
        msg.len() <= RECORD_BYTES_MAX,
        "a record never exceeds the Noise message bound (callers cut plaintext to fit)"
    );
    out.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    out.extend_from_slice(msg);
}

/// The initiator between sending message 1 and reading message 2.
pub struct InitiatorHandshake {
    hs: HandshakeState,
    local: NodeId,
    target: NodeId,
}

impl fmt::Debug for InitiatorHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitiatorHandshake")
            .field("local", &self.local)
            .field("target", &self.target)
            .finish()
    }
}

impl InitiatorHandshake {
    /// Starts the handshake of node `local` dialing `target`: the state, and message 1
    /// (length-prefixed) to send.
    pub fn start(
        secret: &DomainSecret,
        local: NodeId,
        target: NodeId,
    ) -> Result<(InitiatorHandshake, Vec<u8>)> {
        let mut hs = builder(secret)?
            .build_initiator()
            .map_err(|e| Error::Config(format!("noise initiator: {e}")))?;
        let mut msg = [0u8; HANDSHAKE_MESSAGE_BYTES_MAX];
        let n = hs
            .write_message(&ids(local, target), &mut msg)
            .map_err(|e| refused(format!("writing handshake message 1: {e}")))?;
        let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + n);
        push_framed(&mut out, &msg[..n]);
        Ok((InitiatorHandshake { hs, local, target }, out))
    }

    /// Reads message 2 (its body, without the length prefix): the acceptor must prove
    /// the secret and name itself `target`. Returns the session and the confirmation
    /// record (length-prefixed) to send before anything else.
    pub fn finish(mut self, msg2: &[u8]) -> Result<(Session, Vec<u8>)> {
        let mut payload = [0u8; HANDSHAKE_MESSAGE_BYTES_MAX];
        let n = self.hs.read_message(msg2, &mut payload).map_err(|_| {
            refused(format!(
                "node {} did not prove the domain secret (handshake message 2)",
                self.target
            ))
        })?;
        let (responder, initiator) = parse_ids(&payload[..n])?;
        if responder != self.target || initiator != self.local {
            return Err(refused(format!(
                "handshake names nodes {responder}/{initiator}, expected {}/{}",
                self.target, self.local
            )));
        }
        let state = self
            .hs
            .into_stateless_transport_mode()
            .map_err(|e| refused(format!("noise transport: {e}")))?;
        let mut session = Session::new(state);
        let mut confirm = Vec::with_capacity(4 + IDS_BYTES);
        confirm.extend_from_slice(CONFIRM_MAGIC);
        confirm.extend_from_slice(&ids(self.local, self.target));
        let mut out = Vec::new();
        session.send.seal(&confirm, &mut out);
        Ok((session, out))
    }
}

/// The acceptor after answering message 1, waiting for the confirmation record.
pub struct AcceptorHandshake {
    session: Session,
    local: NodeId,
    peer: NodeId,
}

impl fmt::Debug for AcceptorHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcceptorHandshake")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish()
    }
}

impl AcceptorHandshake {
    /// Reads message 1 (its body) at node `local`: the initiator must prove the secret
    /// and target `local`. Returns the state, the initiator's claimed id, and message 2
    /// (length-prefixed) to send.
    pub fn respond(
        secret: &DomainSecret,
        local: NodeId,
        msg1: &[u8],
    ) -> Result<(AcceptorHandshake, NodeId, Vec<u8>)> {
        let mut hs = builder(secret)?
            .build_responder()
            .map_err(|e| Error::Config(format!("noise responder: {e}")))?;
        let mut payload = [0u8; HANDSHAKE_MESSAGE_BYTES_MAX];
        let n = hs
            .read_message(msg1, &mut payload)
            .map_err(|_| refused("the dialer did not prove the domain secret"))?;
        let (peer, target) = parse_ids(&payload[..n])?;
        if target != local {
            return Err(refused(format!(
                "handshake meant for node {target}, this is node {local}"
            )));
        }
        if peer == local {
            return Err(refused("handshake from our own node id"));
        }
        let mut msg = [0u8; HANDSHAKE_MESSAGE_BYTES_MAX];
        let m = hs
            .write_message(&ids(local, peer), &mut msg)
            .map_err(|e| refused(format!("writing handshake message 2: {e}")))?;
        let state = hs
            .into_stateless_transport_mode()
            .map_err(|e| refused(format!("noise transport: {e}")))?;
        let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + m);
        push_framed(&mut out, &msg[..m]);
        Ok((
            AcceptorHandshake {
                session: Session::new(state),
                local,
                peer,
            },
            peer,
            out,
        ))
    }

    /// Checks the confirmation record (its body): the initiator holds the keys of this
    /// handshake. Returns the session.
    pub fn confirm(mut self, record: &[u8]) -> Result<Session> {
        let mut plain = Vec::new();
        self.session.recv.open(record, &mut plain).map_err(|_| {
            refused(format!(
                "node {} did not confirm the handshake (a replayed message 1?)",
                self.peer
            ))
        })?;
        let mut want = Vec::with_capacity(4 + IDS_BYTES);
        want.extend_from_slice(CONFIRM_MAGIC);
        want.extend_from_slice(&ids(self.peer, self.local));
        if plain != want {
            return Err(refused("handshake confirmation names other nodes"));
        }
        Ok(self.session)
    }
}

/// The two directions of an authenticated link.
#[derive(Debug)]
pub struct Session {
    /// Seals what we send.
    pub send: SendCipher,
    /// Opens what we receive.
    pub recv: RecvCipher,
}

impl Session {
    fn new(state: StatelessTransportState) -> Session {
        let state = Arc::new(state);
        Session {
            send: SendCipher {
                state: Arc::clone(&state),
                nonce: 0,
            },
            recv: RecvCipher { state, nonce: 0 },
        }
    }
}

/// The sending half: seals plaintext into records, nonces counting up.
pub struct SendCipher {
    state: Arc<StatelessTransportState>,
    nonce: u64,
}

impl fmt::Debug for SendCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendCipher")
            .field("nonce", &self.nonce)
            .finish()
    }
}

impl SendCipher {
    /// Appends `plain`, sealed as records of at most [`RECORD_PLAIN_BYTES_MAX`] bytes, to
    /// `out`. Nothing is appended for empty `plain`.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) {
        for chunk in plain.chunks(RECORD_PLAIN_BYTES_MAX) {
            let len = chunk.len() + RECORD_TAG_BYTES;
            out.extend_from_slice(&(len as u16).to_le_bytes());
            let at = out.len();
            out.resize(at + len, 0);
            let n = self
                .state
                .write_message(self.nonce, chunk, &mut out[at..])
                .expect("a chunk plus its tag fits a Noise message and the space made for it");
            assert_eq!(n, len, "ChaCha20-Poly1305 output is the input plus the tag");
            // 2^64 records are never sent: the nonce never wraps.
            self.nonce += 1;
        }
    }
}

/// The receiving half: opens records, nonces counting up. A clone starts from the same
/// nonce (the fuzz target replays records against one session).
#[derive(Clone)]
pub struct RecvCipher {
    state: Arc<StatelessTransportState>,
    nonce: u64,
}

impl fmt::Debug for RecvCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvCipher")
            .field("nonce", &self.nonce)
            .finish()
    }
}

impl RecvCipher {
    /// Opens one record body (without its length prefix), appending the plaintext to
    /// `out`. A record that does not verify (tampered, replayed, reordered, another
    /// key) is an error naming it.
    pub fn open(&mut self, record: &[u8], out: &mut Vec<u8>) -> Result<()> {
        if record.len() < RECORD_TAG_BYTES || record.len() > RECORD_BYTES_MAX {
            return Err(refused(format!("record of {} bytes", record.len())));
        }
        let at = out.len();
        out.resize(at + record.len(), 0);
        match self.state.read_message(self.nonce, record, &mut out[at..]) {
            Ok(n) => {
                out.truncate(at + n);
                self.nonce += 1;
                Ok(())
            }
            Err(_) => {
                out.truncate(at);
                Err(refused(format!("record {} does not verify", self.nonce)))
            }
        }
    }
}

/// Reads one length-prefixed message (a handshake message or a record) of at most
/// `max` bytes from a blocking stream. The error names `what`.
pub fn read_framed<R: Read>(stream: &mut R, max: usize, what: &str) -> Result<Vec<u8>> {
    let mut len = [0u8; RECORD_HEADER_BYTES];
    stream
        .read_exact(&mut len)
        .map_err(|e| Error::io(format!("reading {what}"), e))?;
    let len = usize::from(u16::from_le_bytes(len));
    if len > max {
        return Err(refused(format!("{what} of {len} bytes, at most {max}")));
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|e| Error::io(format!("reading {what}"), e))?;
    Ok(body)
}

/// The receiving state of an encrypted link: opens the records read from the stream and
/// hands out their plaintext, so the frame reader above sees the same bytes as on a
/// plain link. Kept apart from the stream so the link's reader thread can own both.
#[derive(Debug)]
pub struct Opener {
    cipher: RecvCipher,
    plain: Vec<u8>,
    at: usize,
    record: Vec<u8>,
}

impl Opener {
    /// Opens records with `cipher`.
    pub fn new(cipher: RecvCipher) -> Self {
        Opener {
            cipher,
            plain: Vec::new(),
            at: 0,
            record: Vec::new(),
        }
    }

    /// As [`Read::read`] on the plaintext of the records `inner` carries. A record that
    /// does not open is an [`io::ErrorKind::InvalidData`] error.
    pub fn read_from<R: Read>(&mut self, inner: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.at == self.plain.len() {
            let mut len = [0u8; RECORD_HEADER_BYTES];
            // End of stream between records is an end of stream (Ok(0)).
            loop {
                match inner.read(&mut len[..1]) {
                    Ok(0) => return Ok(0),
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            inner.read_exact(&mut len[1..])?;
            let len = usize::from(u16::from_le_bytes(len));
            self.record.resize(len, 0);
            inner.read_exact(&mut self.record)?;
            self.plain.clear();
            self.at = 0;
            self.cipher
                .open(&self.record, &mut self.plain)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        let n = buf.len().min(self.plain.len() - self.at);
        buf[..n].copy_from_slice(&self.plain[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A [`Read`] over `inner` that opens records when `opener` is set and passes the bytes
/// through otherwise.
#[derive(Debug)]
pub struct Opening<'a, R> {
    /// The stream.
    pub inner: &'a mut R,
    /// The link's receiving state, if the link is encrypted.
    pub opener: Option<&'a mut Opener>,
}

impl<R: Read> Read for Opening<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.opener.as_deref_mut() {
            Some(opener) => opener.read_from(self.inner, buf),
            None => self.inner.read(buf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> DomainSecret {
        DomainSecret::new(s.as_bytes()).unwrap()
    }

    fn body(framed: &[u8]) -> &[u8] {
        let len = usize::from(u16::from_le_bytes([framed[0], framed[1]]));
        assert_eq!(framed.len(), RECORD_HEADER_BYTES + len);
        &framed[RECORD_HEADER_BYTES..]
    }

    /// Runs the whole handshake between `a` (initiator, node 1) and `b` (acceptor, node
    /// 2); the error of the first step that fails.
    fn handshake(a: &DomainSecret, b: &DomainSecret) -> Result<(Session, Session)> {
        let (init, m1) = InitiatorHandshake::start(a, 1, 2)?;
        let (acc, peer, m2) = AcceptorHandshake::respond(b, 2, body(&m1))?;
        assert_eq!(peer, 1);
        let (si, confirm) = init.finish(body(&m2))?;
        let sa = acc.confirm(body(&confirm))?;
        Ok((si, sa))
    }

    #[test]
    fn the_same_secret_links_and_the_records_round_trip() {
        let s = secret("correct horse battery staple");
        let (mut i, mut a) = handshake(&s, &s).unwrap();
        for plain in [&b"hello"[..], &[7u8; 200_000][..], b""] {
            let mut wire = Vec::new();
            i.send.seal(plain, &mut wire);
            let mut got = Vec::new();
            let mut opener = Opener::new(a.recv);
            let mut inner = &wire[..];
            Opening {
                inner: &mut inner,
                opener: Some(&mut opener),
            }
            .read_to_end(&mut got)
            .unwrap();
            assert_eq!(got, plain);
            a.recv = opener.cipher;
        }
        // The other direction has keys of its own.
        let mut wire = Vec::new();
        a.send.seal(b"back", &mut wire);
        let mut got = Vec::new();
        i.recv.open(body(&wire), &mut got).unwrap();
        assert_eq!(got, b"back");
    }

    #[test]
    fn a_wrong_secret_is_refused_by_the_acceptor_at_message_one() {
        let (_, m1) = InitiatorHandshake::start(&secret("the outsider's guess"), 1, 2).unwrap();
        let e = AcceptorHandshake::respond(&secret("the domain's real secret"), 2, body(&m1))
            .unwrap_err();
        assert!(matches!(e, Error::Unauthenticated { .. }), "{e}");
        assert!(
            e.to_string().contains("did not prove the domain secret"),
            "{e}"
        );
    }

    #[test]
    fn an_acceptor_without_the_secret_cannot_answer() {
        let real = secret("the domain's real secret");
        let (init, _) = InitiatorHandshake::start(&real, 1, 2).unwrap();
        // An impostor acceptor answers with its own handshake under another key.
        let (_, m1) = InitiatorHandshake::start(&secret("impostor's own secret"), 1, 2).unwrap();
        let (_, _, m2) =
            AcceptorHandshake::respond(&secret("impostor's own secret"), 2, body(&m1)).unwrap();
        let e = init.finish(body(&m2)).unwrap_err();
        assert!(matches!(e, Error::Unauthenticated { .. }), "{e}");
    }

    #[test]
    fn a_replayed_message_one_gets_no_further_than_the_confirmation() {
        let s = secret("correct horse battery staple");
        let (_, m1) = InitiatorHandshake::start(&s, 1, 2).unwrap();
        // The outsider replays message 1 and must forge the confirmation without keys.
        let (acc, _, _) = AcceptorHandshake::respond(&s, 2, body(&m1)).unwrap();
        let mut forged = vec![0u8; 4 + IDS_BYTES + RECORD_TAG_BYTES];
        forged[..4].copy_from_slice(CONFIRM_MAGIC);
        assert!(acc.confirm(&forged).is_err());
    }

    #[test]
    fn ids_are_checked_on_both_sides() {
        let s = secret("correct horse battery staple");
        let (_, m1) = InitiatorHandshake::start(&s, 1, 3).unwrap();
        let e = AcceptorHandshake::respond(&s, 2, body(&m1)).unwrap_err();
        assert!(e.to_string().contains("meant for node 3"), "{e}");
        let (_, m1) = InitiatorHandshake::start(&s, 2, 2).unwrap();
        assert!(AcceptorHandshake::respond(&s, 2, body(&m1)).is_err());
    }

    #[test]
    fn tampered_and_reordered_records_do_not_open() {
        let s = secret("correct horse battery staple");
        let (mut i, mut a) = handshake(&s, &s).unwrap();
        let (mut r1, mut r2) = (Vec::new(), Vec::new());
        i.send.seal(b"first", &mut r1);
        i.send.seal(b"second", &mut r2);
        let mut out = Vec::new();
        assert!(a.recv.open(body(&r2), &mut out).is_err(), "reordered");
        let mut bad = r1.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(a.recv.open(body(&bad), &mut out).is_err(), "tampered");
        assert!(out.is_empty());
        a.recv.open(body(&r1), &mut out).unwrap();
        assert_eq!(out, b"first");
    }

    #[test]
    fn secrets_are_bounded_redacted_and_read_from_files() {
        assert!(DomainSecret::new(b"short").is_err());
        let s = secret("correct horse battery staple");
        assert_eq!(format!("{s:?}"), "DomainSecret(<redacted>)");
        assert_ne!(s, secret("correct horse battery stapler"));
        let dir = std::env::temp_dir().join(format!("spindle-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "correct horse battery staple\n").unwrap();
        assert_eq!(DomainSecret::from_file(&path).unwrap(), s);
        let e = DomainSecret::from_file(&dir.join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
