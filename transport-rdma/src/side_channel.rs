//! The TCP side channel the libfabric and verbs backends share: it carries what RDMA
//! itself cannot — the hello that names a node and its fabric address (or queue pair),
//! region descriptors and keys, readiness, probes and goodbyes — as length-prefixed frames
//! `[len u32 LE][kind u8][payload]`, `len` counting kind and payload.

use std::io::Read;
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};

/// Largest side-channel frame (names and region descriptors are small).
pub(crate) const SIDE_FRAME_BYTES_MAX: usize = 4096;

// Side-channel frame kinds.
pub(crate) const KIND_HELLO: u8 = 1;
pub(crate) const KIND_HELLO_ACK: u8 = 2;
pub(crate) const KIND_REGION: u8 = 3;
pub(crate) const KIND_WITHDRAW: u8 = 4;
pub(crate) const KIND_READY: u8 = 5;
pub(crate) const KIND_PROBE: u8 = 6;
pub(crate) const KIND_BYE: u8 = 7;
/// The acceptor keeps its own link (tie-break of a simultaneous connect, or a link that is
/// already up): the dialer waits for that link instead of reporting a failure.
pub(crate) const KIND_REJECT: u8 = 8;
/// The sender suspected us after the silence in the payload (`u64` LE, ms) and closes the
/// link.
pub(crate) const KIND_EXCLUDED: u8 = 9;
/// Dial outcome for a [`KIND_REJECT`] answer.
pub(crate) const REJECTED: &str = "the peer kept its own link";

/// Locks `m`, taking the data of a poisoned lock as it is (a panicking peer thread must
/// not take the endpoint down with it).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// One frame of `kind` around `payload`.
pub(crate) fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&(1 + payload.len() as u32).to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// The little-endian `u32` at `at`, if the bytes are there.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The little-endian `u64` at `at`, if the bytes are there.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Accumulates side-channel bytes and cuts frames out of them.
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next frame: `Ok(Some)` a frame, `Ok(None)` a read time-out, `Err` a broken or
    /// malformed stream.
    pub(crate) fn next(
        &mut self,
        stream: &mut TcpStream,
    ) -> std::result::Result<Option<(u8, Vec<u8>)>, String> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32_at(&self.buf, 0).unwrap_or(0) as usize;
                if len == 0 || len > SIDE_FRAME_BYTES_MAX {
                    return Err(format!("side-channel frame of {len} bytes"));
                }
                if self.buf.len() >= 4 + len {
                    let kind = self.buf[4];
                    let payload = self.buf[5..4 + len].to_vec();
                    self.buf.drain(..4 + len);
                    return Ok(Some((kind, payload)));
                }
            }
            let mut tmp = [0u8; 4096];
            match stream.read(&mut tmp) {
                Ok(0) => return Err("side channel closed".into()),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cut_and_reject_oversize() {
        let (a, b) = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (a, l.accept().unwrap().0)
        };
        let mut a = a;
        let mut b = b;
        use std::io::Write;
        a.write_all(&frame(KIND_PROBE, b"xy")).unwrap();
        a.write_all(&frame(KIND_BYE, &[])).unwrap();
        let mut r = FrameReader::default();
        assert_eq!(r.next(&mut b).unwrap(), Some((KIND_PROBE, b"xy".to_vec())));
        assert_eq!(r.next(&mut b).unwrap(), Some((KIND_BYE, Vec::new())));
        a.write_all(&((SIDE_FRAME_BYTES_MAX as u32 + 1).to_le_bytes()))
            .unwrap();
        assert!(r.next(&mut b).unwrap_err().contains("side-channel frame"));
        assert_eq!(u64_at(&[1, 0, 0, 0, 0, 0, 0, 0], 0), Some(1));
        assert_eq!(u32_at(&[1, 0, 0], 0), None);
    }
}
