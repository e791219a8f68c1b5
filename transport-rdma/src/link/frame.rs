//! The stream link's frame codec (sans-IO): the wire constants, [`Frame`] and its
//! encoders, [`decode_frame`], and the reusable receive buffer [`FrameReader`] that
//! decodes frames in place. This is the fuzzed surface (`decode_all`): any bytes a peer
//! may send decode to frames or to an error, never a panic.
//!
//! Every frame is `body_len: u32 LE, kind: u8, body`; integers are little endian.

use std::io::{self, Read};

use crate::{
    Error, NodeId, RegionId, Result, REGIONS_PER_ENDPOINT_MAX, REGION_BYTES_MAX, SEND_BYTES_MAX,
    WORD_BYTES, WRITE_BYTES_MAX,
};

/// Initial receive buffer per link; it grows to the largest frame seen.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// `"SPDL"`: the first field of every `Hello`.
pub const HELLO_MAGIC: u32 = 0x5350_444C;
/// Wire protocol version; a peer with another version is rejected as malformed.
pub const PROTOCOL_VERSION: u16 = 1;
/// Bytes of the frame header: body length (u32) and kind (u8).
pub const FRAME_HEADER_BYTES: usize = 5;
/// Largest opaque tag a backend may attach to a region (shm: the mapping's name).
pub const REGION_TAG_BYTES_MAX: usize = 256;
/// Fixed part of a `WriteRelease` body: region, offset, guard offset, guard.
const WRITE_RELEASE_FIXED_BYTES: usize = 4 + 8 + 8 + 8;
/// Fixed part of a `Hello` body: magic, version, node, target, incarnation, count.
const HELLO_FIXED_BYTES: usize = 4 + 2 + 4 + 4 + 8 + 4;
/// One region-table entry without its tag: id, len, tag length.
const REGION_ENTRY_FIXED_BYTES: usize = 4 + 8 + 2;
/// Largest frame body any kind may have.
pub const FRAME_BODY_BYTES_MAX: usize = {
    let write = WRITE_BYTES_MAX + WRITE_RELEASE_FIXED_BYTES;
    let send = SEND_BYTES_MAX + 4;
    let hello = HELLO_FIXED_BYTES
        + REGIONS_PER_ENDPOINT_MAX * (REGION_ENTRY_FIXED_BYTES + REGION_TAG_BYTES_MAX);
    let mut max = write;
    if send > max {
        max = send;
    }
    if hello > max {
        max = hello;
    }
    max
};
const _: () = assert!(FRAME_BODY_BYTES_MAX <= u32::MAX as usize);
/// Largest whole `Hello` frame (a full region table with the longest tags).
const HELLO_FRAME_BYTES_MAX: usize = FRAME_HEADER_BYTES
    + HELLO_FIXED_BYTES
    + REGIONS_PER_ENDPOINT_MAX * (REGION_ENTRY_FIXED_BYTES + REGION_TAG_BYTES_MAX);
const _: () = assert!(HELLO_FRAME_BYTES_MAX <= FRAME_HEADER_BYTES + FRAME_BODY_BYTES_MAX);

const KIND_HELLO: u8 = 1;
const KIND_REGION_ANNOUNCE: u8 = 2;
const KIND_REGION_WITHDRAW: u8 = 3;
const KIND_WRITE: u8 = 4;
const KIND_WRITE_RELEASE: u8 = 5;
const KIND_SEND: u8 = 6;
const KIND_PROBE: u8 = 7;
const KIND_GOODBYE: u8 = 8;
const KIND_EXCLUDED: u8 = 9;
const KIND_REFUSED: u8 = 10;

/// One entry of a region table, as carried by `Hello` and `RegionAnnounce`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionEntry {
    /// The region id on the sender.
    pub id: RegionId,
    /// Its length in bytes (whole words, at most [`REGION_BYTES_MAX`]).
    pub len: usize,
    /// Backend-specific bytes (at most [`REGION_TAG_BYTES_MAX`]); empty for tcp.
    pub tag: Vec<u8>,
}

/// The first frame each side sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's node id.
    pub node: NodeId,
    /// The node id the sender expects to be talking to.
    pub target: NodeId,
    /// Distinguishes restarts of the same node id (a fresh value per endpoint).
    pub incarnation: u64,
    /// The sender's registered regions.
    pub regions: Vec<RegionEntry>,
}

/// A decoded frame; byte payloads borrow the receive buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Handshake.
    Hello(Hello),
    /// A region registered after the link came up.
    RegionAnnounce(RegionEntry),
    /// A region deregistered.
    RegionWithdraw {
        /// The region id.
        id: RegionId,
    },
    /// One-sided write of `bytes` at `offset` of the receiver's region `region`.
    Write {
        /// Target region.
        region: RegionId,
        /// Byte offset.
        offset: usize,
        /// The data.
        bytes: &'a [u8],
    },
    /// Write, then release-store `guard` into the word at `guard_offset`.
    WriteRelease {
        /// Target region.
        region: RegionId,
        /// Byte offset of the payload.
        offset: usize,
        /// The payload.
        bytes: &'a [u8],
        /// Aligned offset of the guard word.
        guard_offset: usize,
        /// The guard value.
        guard: u64,
    },
    /// Two-sided message.
    Send {
        /// Immediate.
        imm: u32,
        /// The message.
        bytes: &'a [u8],
    },
    /// Heartbeat; carries nothing.
    Probe,
    /// The sender closes the link on purpose.
    Goodbye,
    /// The sender suspected us after `silent_ms` of silence and closes the link.
    Excluded {
        /// How long we had been silent at the sender.
        silent_ms: u64,
    },
    /// The acceptor's answer to a `Hello` it does not take (instead of its own `Hello`):
    /// it closes the connection.
    Refused(Refusal),
}

/// Why an acceptor refused a dialer's `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The refusing endpoint's incarnation, so a dialer refused by the tie-break knows
    /// which incarnation's own dial to wait for.
    pub incarnation: u64,
    /// The acceptor holds a live link to the dialer's node id under another incarnation
    /// (another process claims a live member's id): no link back is coming.
    pub live_id: bool,
}

/// The answer to a `Hello`, as the dialer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The link is taken; the acceptor's `Hello`.
    Hello(Hello),
    /// The link is refused (`None`: a `Goodbye`, which says no more).
    Refused(Option<Refusal>),
}

/// Result of looking at the front of a receive buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole frame, and how many bytes of the buffer it used.
    Frame(Frame<'a>, usize),
    /// More bytes are needed: the frame (as far as known) is `needed` bytes long.
    Incomplete {
        /// Total bytes the buffer must hold, from its start, to decode the next frame.
        needed: usize,
    },
}

pub(crate) fn malformed(detail: impl Into<String>) -> Error {
    Error::Malformed {
        source_name: "peer".into(),
        detail: detail.into(),
    }
}

/// A little-endian cursor over a frame body; every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(malformed(format!("frame body too short for {what}")));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(b);
        Ok(u64::from_le_bytes(raw))
    }
    fn usize(&mut self, what: &str) -> Result<usize> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| malformed(format!("{what} {v} overflows usize")))
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }
    fn finish(&self, what: &str) -> Result<()> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!(
                "{} trailing bytes after {what}",
                self.bytes.len()
            )))
        }
    }
    fn region_entry(&mut self) -> Result<RegionEntry> {
        let id = self.u32("region id")?;
        let len = self.usize("region length")?;
        if len > REGION_BYTES_MAX || len % WORD_BYTES != 0 {
            return Err(malformed(format!("region {id} has bad length {len}")));
        }
        let tag_len = usize::from(self.u16("region tag length")?);
        if tag_len > REGION_TAG_BYTES_MAX {
            return Err(malformed(format!("region tag of {tag_len} bytes")));
        }
        let tag = self.take(tag_len, "region tag")?.to_vec();
        Ok(RegionEntry { id, len, tag })
    }
}

/// The fixed head of a `WriteRelease` body: region, offset, guard offset, guard.
fn write_release_head(c: &mut Cursor<'_>) -> Result<(RegionId, usize, usize, u64)> {
    let region = c.u32("region")?;
    let offset = c.usize("offset")?;
    let guard_offset = c.usize("guard offset")?;
    let guard = c.u64("guard")?;
    Ok((region, offset, guard_offset, guard))
}

/// Payload bytes from which a `WriteRelease` frame still arriving is read from the stream
/// straight into its region ([`FrameReader::pending_release`]) instead of through the
/// receive buffer: RDMC's blocks, not the small writes of rows and slots.
pub(crate) const IN_PLACE_WRITE_BYTES_MIN: usize = 64 << 10;
const _: () = assert!(IN_PLACE_WRITE_BYTES_MIN <= WRITE_BYTES_MAX);

/// The head of a `WriteRelease` frame whose payload (of at least
/// [`IN_PLACE_WRITE_BYTES_MIN`] bytes) has not all arrived.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PendingRelease<'a> {
    /// Target region.
    pub(crate) region: RegionId,
    /// Byte offset of the payload.
    pub(crate) offset: usize,
    /// Aligned offset of the guard word.
    pub(crate) guard_offset: usize,
    /// The guard value.
    pub(crate) guard: u64,
    /// Payload bytes in all.
    pub(crate) len: usize,
    /// The payload's first bytes, already buffered (fewer than `len`).
    pub(crate) have: &'a [u8],
}

/// Looks at the front of `buf`: a whole frame, a request for more bytes, or an error for
/// bytes that can never decode. Never panics, whatever `buf` holds.
pub fn decode_frame(buf: &[u8]) -> Result<Decoded<'_>> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(Decoded::Incomplete {
            needed: FRAME_HEADER_BYTES,
        });
    }
    let body_len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let kind = buf[4];
    if body_len > FRAME_BODY_BYTES_MAX {
        return Err(malformed(format!(
            "frame body of {body_len} bytes exceeds {FRAME_BODY_BYTES_MAX}"
        )));
    }
    if !(KIND_HELLO..=KIND_REFUSED).contains(&kind) {
        return Err(malformed(format!("unknown frame kind {kind}")));
    }
    let total = FRAME_HEADER_BYTES + body_len;
    if buf.len() < total {
        return Ok(Decoded::Incomplete { needed: total });
    }
    let mut c = Cursor {
        bytes: &buf[FRAME_HEADER_BYTES..total],
    };
    let frame = match kind {
        KIND_HELLO => {
            let magic = c.u32("magic")?;
            if magic != HELLO_MAGIC {
                return Err(malformed(format!("bad magic {magic:#x}")));
            }
            let version = c.u16("version")?;
            if version != PROTOCOL_VERSION {
                return Err(malformed(format!(
                    "protocol version {version}, expected {PROTOCOL_VERSION}"
                )));
            }
            let node = c.u32("node")?;
            let target = c.u32("target")?;
            let incarnation = c.u64("incarnation")?;
            let count = c.u32("region count")? as usize;
            if count > REGIONS_PER_ENDPOINT_MAX {
                return Err(malformed(format!("{count} regions in hello")));
            }
            // Each entry is at least REGION_ENTRY_FIXED_BYTES: reject before allocating.
            if count * REGION_ENTRY_FIXED_BYTES > c.bytes.len() {
                return Err(malformed("hello region table is truncated"));
            }
            let mut regions = Vec::with_capacity(count);
            for _ in 0..count {
                regions.push(c.region_entry()?);
            }
            c.finish("hello")?;
            Frame::Hello(Hello {
                node,
                target,
                incarnation,
                regions,
            })
        }
        KIND_REGION_ANNOUNCE => {
            let entry = c.region_entry()?;
            c.finish("region announce")?;
            Frame::RegionAnnounce(entry)
        }
        KIND_REGION_WITHDRAW => {
            let id = c.u32("region id")?;
            c.finish("region withdraw")?;
            Frame::RegionWithdraw { id }
        }
        KIND_WRITE => {
            let region = c.u32("region")?;
            let offset = c.usize("offset")?;
            let bytes = c.rest();
            if bytes.len() > WRITE_BYTES_MAX {
                return Err(malformed(format!("write of {} bytes", bytes.len())));
            }
            Frame::Write {
                region,
                offset,
                bytes,
            }
        }
        KIND_WRITE_RELEASE => {
            let (region, offset, guard_offset, guard) = write_release_head(&mut c)?;
            let bytes = c.rest();
            if bytes.len() > WRITE_BYTES_MAX {
                return Err(malformed(format!("write of {} bytes", bytes.len())));
            }
            Frame::WriteRelease {
                region,
                offset,
                bytes,
                guard_offset,
                guard,
            }
        }
        KIND_SEND => {
            let imm = c.u32("imm")?;
            let bytes = c.rest();
            if bytes.len() > SEND_BYTES_MAX {
                return Err(malformed(format!("send of {} bytes", bytes.len())));
            }
            Frame::Send { imm, bytes }
        }
        KIND_PROBE => {
            c.finish("probe")?;
            Frame::Probe
        }
        KIND_EXCLUDED => {
            let silent_ms = c.u64("silent ms")?;
            c.finish("excluded")?;
            Frame::Excluded { silent_ms }
        }
        KIND_REFUSED => {
            let incarnation = c.u64("incarnation")?;
            let live_id = match c.u8("refusal reason")? {
                0 => false,
                1 => true,
                other => return Err(malformed(format!("refusal reason {other}: 0 or 1"))),
            };
            c.finish("refused")?;
            Frame::Refused(Refusal {
                incarnation,
                live_id,
            })
        }
        _ => {
            c.finish("goodbye")?;
            Frame::Goodbye
        }
    };
    Ok(Decoded::Frame(frame, total))
}

fn put_header(out: &mut Vec<u8>, kind: u8, body_len: usize) {
    assert!(
        body_len <= FRAME_BODY_BYTES_MAX,
        "callers check sizes against the *_MAX bounds before encoding"
    );
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.push(kind);
}

fn put_entry(out: &mut Vec<u8>, entry: &RegionEntry) {
    assert!(
        entry.tag.len() <= REGION_TAG_BYTES_MAX,
        "hooks return tags within REGION_TAG_BYTES_MAX (checked at registration)"
    );
    out.extend_from_slice(&entry.id.to_le_bytes());
    out.extend_from_slice(&(entry.len as u64).to_le_bytes());
    out.extend_from_slice(&(entry.tag.len() as u16).to_le_bytes());
    out.extend_from_slice(&entry.tag);
}

/// Appends a `Hello` frame.
pub fn encode_hello(out: &mut Vec<u8>, hello: &Hello) {
    let body: usize = HELLO_FIXED_BYTES
        + hello
            .regions
            .iter()
            .map(|e| REGION_ENTRY_FIXED_BYTES + e.tag.len())
            .sum::<usize>();
    put_header(out, KIND_HELLO, body);
    out.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&hello.node.to_le_bytes());
    out.extend_from_slice(&hello.target.to_le_bytes());
    out.extend_from_slice(&hello.incarnation.to_le_bytes());
    out.extend_from_slice(&(hello.regions.len() as u32).to_le_bytes());
    for entry in &hello.regions {
        put_entry(out, entry);
    }
}

/// Appends a `RegionAnnounce` frame.
pub fn encode_region_announce(out: &mut Vec<u8>, entry: &RegionEntry) {
    put_header(
        out,
        KIND_REGION_ANNOUNCE,
        REGION_ENTRY_FIXED_BYTES + entry.tag.len(),
    );
    put_entry(out, entry);
}

/// Appends a `RegionWithdraw` frame.
pub fn encode_region_withdraw(out: &mut Vec<u8>, id: RegionId) {
    put_header(out, KIND_REGION_WITHDRAW, 4);
    out.extend_from_slice(&id.to_le_bytes());
}

/// Longest fixed part of a frame that carries a payload (header + `WriteRelease` fields).
const HEAD_BYTES_MAX: usize = FRAME_HEADER_BYTES + WRITE_RELEASE_FIXED_BYTES;

/// The bytes of a frame that precede its payload, on the stack.
pub(crate) struct Head {
    bytes: [u8; HEAD_BYTES_MAX],
    len: usize,
}

impl Head {
    fn new(kind: u8, fixed: usize, payload: usize) -> Head {
        let body = fixed + payload;
        assert!(
            body <= FRAME_BODY_BYTES_MAX && FRAME_HEADER_BYTES + fixed <= HEAD_BYTES_MAX,
            "callers check sizes against the *_MAX bounds before encoding"
        );
        let mut head = Head {
            bytes: [0; HEAD_BYTES_MAX],
            len: 0,
        };
        head.put(&(body as u32).to_le_bytes());
        head.put(&[kind]);
        head
    }
    fn put(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
    /// The head of a `Write` (no guard) or `WriteRelease` frame.
    pub(crate) fn write(
        region: RegionId,
        offset: usize,
        guard: Option<(usize, u64)>,
        payload: usize,
    ) -> Head {
        let mut head = match guard {
            None => Head::new(KIND_WRITE, 12, payload),
            Some(_) => Head::new(KIND_WRITE_RELEASE, WRITE_RELEASE_FIXED_BYTES, payload),
        };
        head.put(&region.to_le_bytes());
        head.put(&(offset as u64).to_le_bytes());
        if let Some((guard_offset, guard)) = guard {
            head.put(&(guard_offset as u64).to_le_bytes());
            head.put(&guard.to_le_bytes());
        }
        head
    }
    /// The head of a `Send` frame.
    pub(crate) fn send(imm: u32, payload: usize) -> Head {
        let mut head = Head::new(KIND_SEND, 4, payload);
        head.put(&imm.to_le_bytes());
        head
    }
}

/// Appends a `Write` frame (for tests; the hub builds frame heads on the stack).
#[cfg(test)]
pub fn encode_write(out: &mut Vec<u8>, region: RegionId, offset: usize, bytes: &[u8]) {
    out.extend_from_slice(Head::write(region, offset, None, bytes.len()).as_slice());
    out.extend_from_slice(bytes);
}

/// Appends a `WriteRelease` frame (for tests; the hub builds frame heads on the stack).
#[cfg(test)]
pub fn encode_write_release(
    out: &mut Vec<u8>,
    region: RegionId,
    offset: usize,
    bytes: &[u8],
    guard_offset: usize,
    guard: u64,
) {
    let head = Head::write(region, offset, Some((guard_offset, guard)), bytes.len());
    out.extend_from_slice(head.as_slice());
    out.extend_from_slice(bytes);
}

/// Appends a `Send` frame (for tests; the hub builds frame heads on the stack).
#[cfg(test)]
pub fn encode_send(out: &mut Vec<u8>, imm: u32, bytes: &[u8]) {
    out.extend_from_slice(Head::send(imm, bytes.len()).as_slice());
    out.extend_from_slice(bytes);
}

/// Appends a `Probe` frame.
pub fn encode_probe(out: &mut Vec<u8>) {
    put_header(out, KIND_PROBE, 0);
}

/// Appends a `Goodbye` frame.
pub fn encode_goodbye(out: &mut Vec<u8>) {
    put_header(out, KIND_GOODBYE, 0);
}

/// Appends an `Excluded` frame: we suspected the peer after `silent_ms` of silence.
pub fn encode_excluded(out: &mut Vec<u8>, silent_ms: u64) {
    put_header(out, KIND_EXCLUDED, 8);
    out.extend_from_slice(&silent_ms.to_le_bytes());
}

/// Appends a `Refused` frame: we do not take the dialer's link, for `why`.
pub fn encode_refused(out: &mut Vec<u8>, why: Refusal) {
    put_header(out, KIND_REFUSED, 9);
    out.extend_from_slice(&why.incarnation.to_le_bytes());
    out.push(u8::from(why.live_id));
}

// ---------------------------------------------------------------------------------------
// Receive buffer
// ---------------------------------------------------------------------------------------

pub(crate) enum Step {
    /// Frames were applied; the buffer holds no further whole frame.
    Applied,
    /// Nothing buffered to apply: read until the buffer holds `needed` bytes.
    NeedRead { needed: usize },
    /// The peer said goodbye.
    Goodbye,
    /// The peer suspected us after `silent_ms` of silence and closed the link.
    Excluded { silent_ms: u64 },
}

/// A reusable receive buffer: frames are decoded and applied straight from it.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        FrameReader {
            buf: vec![0; READ_BUFFER_BYTES],
            start: 0,
            end: 0,
        }
    }

    /// Makes room for a frame of `needed` bytes starting at `start`, then reads once.
    /// `Ok(0)`: end of stream.
    pub(crate) fn fill<R: Read>(&mut self, stream: &mut R, needed: usize) -> Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.start + needed.max(1) > self.buf.len() || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if needed > self.buf.len() {
                // Bounded: `needed` comes from a header checked against FRAME_BODY_BYTES_MAX.
                self.buf.resize(needed, 0);
            }
        }
        loop {
            match stream.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("reading from a peer", e)),
            }
        }
    }

    /// When the buffer starts with a `WriteRelease` frame whose payload is at least
    /// [`IN_PLACE_WRITE_BYTES_MIN`] bytes and has not all arrived: its head and the payload
    /// bytes buffered so far, so that the reader can take the rest from the stream
    /// straight into the region, then [`FrameReader::clear`] the buffer (every buffered
    /// byte is this frame's). `None` for anything else, left to [`FrameReader::step`].
    pub(crate) fn pending_release(&self) -> Result<Option<PendingRelease<'_>>> {
        let buf = &self.buf[self.start..self.end];
        if buf.len() < FRAME_HEADER_BYTES + WRITE_RELEASE_FIXED_BYTES
            || buf[4] != KIND_WRITE_RELEASE
        {
            return Ok(None);
        }
        let body_len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if buf.len() >= FRAME_HEADER_BYTES + body_len || body_len > FRAME_BODY_BYTES_MAX {
            // Whole (the usual path applies it), or too long (the usual path says so).
            return Ok(None);
        }
        // `body_len` exceeds the fixed head: the buffer holds more than head and fixed
        // part, and less than the whole frame.
        let len = body_len - WRITE_RELEASE_FIXED_BYTES;
        if !(IN_PLACE_WRITE_BYTES_MIN..=WRITE_BYTES_MAX).contains(&len) {
            return Ok(None);
        }
        let mut c = Cursor {
            bytes: &buf[FRAME_HEADER_BYTES..],
        };
        let (region, offset, guard_offset, guard) = write_release_head(&mut c)?;
        Ok(Some(PendingRelease {
            region,
            offset,
            guard_offset,
            guard,
            len,
            have: c.rest(),
        }))
    }

    /// Forgets every buffered byte: a [`FrameReader::pending_release`] frame was applied.
    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Reads a handshake frame: the dialer's `Hello`, or the acceptor's answer (its
    /// `Hello`, or a refusal).
    pub(crate) fn next_owned_hello<R: Read>(&mut self, stream: &mut R) -> Result<Reply> {
        loop {
            match decode_frame(&self.buf[self.start..self.end])? {
                Decoded::Frame(frame, used) => {
                    self.start += used;
                    return match frame {
                        Frame::Hello(h) => Ok(Reply::Hello(h)),
                        Frame::Goodbye => Ok(Reply::Refused(None)),
                        Frame::Refused(why) => Ok(Reply::Refused(Some(why))),
                        _ => Err(malformed("expected hello")),
                    };
                }
                Decoded::Incomplete { needed } => {
                    // Before the handshake the peer is unknown: only a Hello (or a
                    // refusal) of a Hello's size may make us buffer.
                    if self.end - self.start >= FRAME_HEADER_BYTES {
                        let kind = self.buf[self.start + 4];
                        if ![KIND_HELLO, KIND_GOODBYE, KIND_REFUSED].contains(&kind) {
                            return Err(malformed("expected hello"));
                        }
                    }
                    if needed > HELLO_FRAME_BYTES_MAX {
                        return Err(malformed(format!("hello of {needed} bytes")));
                    }
                    if self.fill(stream, needed)? == 0 {
                        return Err(Error::io(
                            "handshake",
                            io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed"),
                        ));
                    }
                }
            }
        }
    }

    /// Applies every whole frame buffered; says whether any was applied or more bytes
    /// are needed (read them with [`FrameReader::fill`]).
    pub(crate) fn step(
        &mut self,
        mut apply: impl FnMut(Frame<'_>) -> Result<bool>,
    ) -> Result<Step> {
        let mut applied = false;
        loop {
            match decode_frame(&self.buf[self.start..self.end])? {
                Decoded::Frame(Frame::Excluded { silent_ms }, used) => {
                    self.start += used;
                    return Ok(Step::Excluded { silent_ms });
                }
                Decoded::Frame(frame, used) => {
                    let goodbye = matches!(frame, Frame::Goodbye);
                    let keep_going = apply(frame)?;
                    self.start += used;
                    if goodbye || !keep_going {
                        return Ok(Step::Goodbye);
                    }
                    applied = true;
                }
                // Let the caller ring the doorbell before it may block in a read.
                Decoded::Incomplete { .. } if applied => return Ok(Step::Applied),
                Decoded::Incomplete { needed } => return Ok(Step::NeedRead { needed }),
            }
        }
    }
}

/// Decodes `bytes` as a stream of frames until they run out or do not decode; returns
/// how many whole frames decoded. Never panics: the fuzz and property-test entry point.
pub fn decode_all(bytes: &[u8]) -> usize {
    let mut pos = 0;
    let mut frames = 0;
    while let Ok(Decoded::Frame(_, used)) = decode_frame(&bytes[pos..]) {
        assert!(used >= FRAME_HEADER_BYTES, "every frame has a header");
        pos += used;
        frames += 1;
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_guarded_write_still_arriving_is_offered_for_reading_in_place() {
        let payload: Vec<u8> = (0..IN_PLACE_WRITE_BYTES_MIN + 5).map(|i| i as u8).collect();
        let mut frame = Vec::new();
        encode_write_release(&mut frame, 7, 13, &payload, 8, 99);
        let head = FRAME_HEADER_BYTES + WRITE_RELEASE_FIXED_BYTES;
        let mut r = FrameReader::new();
        // Fed in pieces: nothing until the fixed head is in, then the head and what of the
        // payload is buffered, never once the frame is whole.
        for (upto, want_have) in [(head - 1, None), (head, Some(0)), (head + 1000, Some(1000))] {
            r.clear();
            r.fill(&mut &frame[..upto], upto).unwrap();
            let got = r.pending_release().unwrap();
            match want_have {
                None => assert_eq!(got, None, "{upto} bytes"),
                Some(n) => assert_eq!(
                    got,
                    Some(PendingRelease {
                        region: 7,
                        offset: 13,
                        guard_offset: 8,
                        guard: 99,
                        len: payload.len(),
                        have: &payload[..n],
                    }),
                    "{upto} bytes"
                ),
            }
        }
        r.clear();
        let mut whole = &frame[..];
        while r.fill(&mut whole, frame.len()).unwrap() > 0 {}
        assert_eq!(r.pending_release().unwrap(), None, "a whole frame");
        // Below the bound, or another kind: the buffer's usual path.
        for small in [IN_PLACE_WRITE_BYTES_MIN - 1, 100] {
            let mut f = Vec::new();
            encode_write_release(&mut f, 7, 13, &payload[..small], 8, 99);
            r.clear();
            r.fill(&mut &f[..head + 10], head + 10).unwrap();
            assert_eq!(r.pending_release().unwrap(), None, "{small} payload bytes");
        }
        let mut f = Vec::new();
        encode_write(&mut f, 7, 13, &payload);
        r.clear();
        r.fill(&mut &f[..head + 10], head + 10).unwrap();
        assert_eq!(r.pending_release().unwrap(), None, "an unguarded write");
    }

    fn roundtrip(encode: impl FnOnce(&mut Vec<u8>)) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        encode(&mut out);
        let len = out.len();
        (out, len)
    }

    #[test]
    fn frames_round_trip() {
        let hello = Hello {
            node: 3,
            target: 9,
            incarnation: 77,
            regions: vec![
                RegionEntry {
                    id: 1,
                    len: 64,
                    tag: vec![],
                },
                RegionEntry {
                    id: 2,
                    len: 8,
                    tag: b"shm-name".to_vec(),
                },
            ],
        };
        let (buf, len) = roundtrip(|o| encode_hello(o, &hello));
        assert_eq!(
            decode_frame(&buf).unwrap(),
            Decoded::Frame(Frame::Hello(hello.clone()), len)
        );
        let (buf, len) = roundtrip(|o| encode_write_release(o, 4, 16, b"abc", 8, 42));
        assert_eq!(
            decode_frame(&buf).unwrap(),
            Decoded::Frame(
                Frame::WriteRelease {
                    region: 4,
                    offset: 16,
                    bytes: b"abc",
                    guard_offset: 8,
                    guard: 42
                },
                len
            )
        );
        let (buf, len) = roundtrip(|o| encode_write(o, 3, 1 << 40, b"xyz"));
        assert_eq!(
            decode_frame(&buf).unwrap(),
            Decoded::Frame(
                Frame::Write {
                    region: 3,
                    offset: 1 << 40,
                    bytes: b"xyz"
                },
                len
            )
        );
        let (buf, len) = roundtrip(|o| encode_send(o, 5, b"hi"));
        assert_eq!(
            decode_frame(&buf).unwrap(),
            Decoded::Frame(
                Frame::Send {
                    imm: 5,
                    bytes: b"hi"
                },
                len
            )
        );
        let (buf, len) = roundtrip(|o| encode_excluded(o, 63));
        assert_eq!(
            decode_frame(&buf).unwrap(),
            Decoded::Frame(Frame::Excluded { silent_ms: 63 }, len)
        );
        let short = [0, 0, 0, 0, KIND_EXCLUDED];
        assert!(
            decode_frame(&short).is_err(),
            "an excluded frame carries its silence"
        );
        for live_id in [false, true] {
            let why = Refusal {
                incarnation: 0xdead,
                live_id,
            };
            let (buf, len) = roundtrip(|o| encode_refused(o, why));
            assert_eq!(
                decode_frame(&buf).unwrap(),
                Decoded::Frame(Frame::Refused(why), len)
            );
        }
        let (mut buf, _) = roundtrip(|o| {
            encode_refused(
                o,
                Refusal {
                    incarnation: 1,
                    live_id: true,
                },
            )
        });
        *buf.last_mut().unwrap() = 7;
        assert!(decode_frame(&buf).is_err(), "an unknown refusal reason");
        let (buf, len) = roundtrip(|o| {
            encode_refused(
                o,
                Refusal {
                    incarnation: 0xdead,
                    live_id: false,
                },
            )
        });
        let short = [0, 0, 0, 0, KIND_REFUSED];
        assert!(
            decode_frame(&short).is_err(),
            "a refusal carries the refuser's incarnation"
        );
        // Every strict prefix asks for more bytes.
        for cut in 0..len {
            assert!(matches!(
                decode_frame(&buf[..cut]).unwrap(),
                Decoded::Incomplete { .. }
            ));
        }
    }

    #[test]
    fn oversize_and_unknown_frames_are_errors() {
        let mut buf = ((FRAME_BODY_BYTES_MAX + 1) as u32).to_le_bytes().to_vec();
        buf.push(KIND_WRITE);
        assert!(decode_frame(&buf).is_err());
        let buf = [0, 0, 0, 0, 99];
        assert!(decode_frame(&buf).is_err());
        let buf = [1, 0, 0, 0, KIND_PROBE, 0];
        assert!(decode_frame(&buf).is_err());
    }

    proptest::proptest! {
        /// Random bytes, and random corruptions of valid frames, never panic the decoder.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = decode_all(&bytes);
        }

        #[test]
        fn corrupted_frames_never_panic(
            flips in proptest::collection::vec((0usize..128, proptest::prelude::any::<u8>()), 1..8),
        ) {
            let mut buf = Vec::new();
            encode_hello(&mut buf, &Hello { node: 1, target: 2, incarnation: 3, regions: vec![RegionEntry { id: 1, len: 8, tag: vec![1, 2] }] });
            encode_write_release(&mut buf, 1, 0, b"12345678", 0, 1);
            encode_region_announce(&mut buf, &RegionEntry { id: 7, len: 16, tag: vec![] });
            let n = buf.len();
            for (pos, byte) in flips {
                buf[pos % n] = byte;
            }
            let _ = decode_all(&buf);
        }

        /// Any bytes at the front of the buffer, a large guarded write's head among them
        /// with random fields and a random length, never panic the in-place check, and it
        /// offers only what it can: a `WriteRelease` of the in-place size, not all there.
        #[test]
        fn pending_release_never_panics(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            body_len in proptest::prelude::any::<u32>(),
            kind in 0u8..12,
        ) {
            let mut r = FrameReader::new();
            r.fill(&mut &head[..], head.len().max(1)).unwrap();
            let _ = r.pending_release();
            let mut framed = body_len.to_le_bytes().to_vec();
            framed.push(kind);
            framed.extend_from_slice(&head);
            r.clear();
            r.fill(&mut &framed[..], framed.len()).unwrap();
            if let Ok(Some(w)) = r.pending_release() {
                proptest::prop_assert_eq!(kind, KIND_WRITE_RELEASE);
                proptest::prop_assert!(w.len >= IN_PLACE_WRITE_BYTES_MIN && w.len <= WRITE_BYTES_MAX);
                proptest::prop_assert!(w.have.len() < w.len);
            }
        }
    }
}
