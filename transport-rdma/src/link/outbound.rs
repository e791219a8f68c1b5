//! The outbound side of a stream link: each link's outbound queue, the non-blocking
//! and blocking send syscalls (no SIGPIPE), opportunistic batching on the caller's thread,
//! the writer thread that takes over when the socket is full, and the write/send entry
//! points that frame a caller's bytes.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::frame::{Head, IN_PLACE_WRITE_BYTES_MIN};
use super::{lock, read, up_links, Hub, Link, LinkStream, RemoteWrite};
use crate::trust::SendCipher;
use crate::{
    Error, FailureReason, LocalRange, NodeId, RegionDesc, RegionId, Result, SEND_BYTES_MAX,
    WORD_BYTES, WRITE_BYTES_MAX,
};

/// Rounds of "send what others queued meanwhile" one caller does before handing the
/// rest to the link's writer thread.
const CALLER_FLUSH_ROUNDS_MAX: usize = 4;
/// Payloads at least this large skip the outbound buffer when the link is idle.
const DIRECT_SEND_BYTES_MIN: usize = 16 << 10;

/// Most bytes a link's queue holds for a cork ([`Hub::cork`]): past it, frames go to the
/// socket at once, corked or not (one system call per this many bytes at least).
pub(crate) const CORKED_BYTES_MAX: usize = 256 << 10;

// A frame small enough to be held is always below the cork's bound.
const _: () = assert!(DIRECT_SEND_BYTES_MIN < CORKED_BYTES_MAX);

thread_local! {
    /// The hub this thread has corked (its address; 0: none) and how deeply.
    static CORK: std::cell::Cell<(usize, u32)> = const { std::cell::Cell::new((0, 0)) };
}
/// Writes larger than this go out as several `Write` frames of at most this many payload
/// bytes, cut at region offsets that are multiples of it (so at word boundaries; the
/// guard, if any, rides on the last). Frames this size fit the socket buffers and the
/// reader's buffer, so large writes neither spill into a copied outbound buffer nor make
/// the reader grow and re-read a megabyte before applying it. Applying a write frame by
/// frame keeps the contract: words stay whole, order stays FIFO. Guarded writes of
/// [`IN_PLACE_WRITE_BYTES_MIN`] or more on a plaintext link are not cut: the reader reads
/// their payload in place, past its buffer.
const WRITE_FRAME_PAYLOAD_BYTES_MAX: usize = 64 << 10;

#[derive(Debug, Default)]
pub(super) struct Outbound {
    /// Encoded frames not yet handed to the socket.
    pub(super) pending: Vec<u8>,
    /// A buffer the socket would not take all of, and how much of it was sent; owned by
    /// the writer thread.
    pub(super) inflight: Option<(Vec<u8>, usize)>,
    /// Someone (a caller or the writer thread) is sending; others only append.
    pub(super) flushing: bool,
    /// An empty buffer kept for reuse (up to `outbound_bytes_max` of capacity: a buffer
    /// freed after a burst comes back as fresh pages, and faulting them in cost more than
    /// the copy into them).
    pub(super) spare: Vec<u8>,
    /// The writer thread should exit (after draining, if `drain_then_close`).
    pub(super) closed: bool,
    /// Send everything queued, then shut the stream down.
    pub(super) drain_then_close: bool,
    /// A draining link whose peer may be stopped (an exclusion): keep trying to send
    /// until this instant, and shut down only once the peer has read everything sent
    /// (see [`EXCLUDED_LINGER`]). `None`: one more write time-out, then give up.
    pub(super) drain_until: Option<Instant>,
    /// Seals what is sent into records (an encrypted link): `pending` holds plaintext
    /// frames, and whoever takes it to send ([`Outbound::take_pending`]) seals the whole
    /// batch at once. Only the one sender (`flushing`) takes it, so records reach the
    /// socket in the order of their nonces.
    pub(super) seal: Option<SendCipher>,
    /// The plaintext buffer of the last sealed batch, kept for reuse like `spare`.
    plain_spare: Vec<u8>,
}

impl Outbound {
    /// Appends the frame(s) `encode` writes to the queue.
    pub(super) fn append(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.pending);
    }

    /// Takes everything queued for sending, leaving an empty (reused) buffer: the frames
    /// themselves, or on an encrypted link the records sealing them. Callers hold
    /// `flushing` (or drain a closed link): one sender at a time.
    pub(super) fn take_pending(&mut self, keep_bytes_max: usize) -> Vec<u8> {
        let spare = std::mem::take(&mut self.spare);
        let plain = std::mem::replace(&mut self.pending, spare);
        let Some(seal) = &mut self.seal else {
            return plain;
        };
        let mut sealed = std::mem::take(&mut self.plain_spare);
        sealed.clear();
        seal.seal(&plain, &mut sealed);
        if plain.capacity() <= keep_bytes_max {
            let mut plain = plain;
            plain.clear();
            self.plain_spare = plain;
        }
        sealed
    }

    fn queued_bytes(&self) -> usize {
        self.pending.len() + self.inflight.as_ref().map_or(0, |(b, s)| b.len() - s)
    }
}

// ---------------------------------------------------------------------------------------
// Sockets: non-blocking and blocking sends without SIGPIPE
// ---------------------------------------------------------------------------------------

/// Sends as much of `buf` as the socket takes without blocking; `Ok(n)` with `n <
/// buf.len()` means the socket is full.
fn send_nonblocking(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    send_two_nonblocking(fd, buf, Payload::Slice(&[]))
}

/// A frame's payload: the caller's slice, or a range of a local region
/// ([`crate::Endpoint::write_from`]) taken in place: sent to the socket from the region's
/// memory, or copied from it into the outbound queue, never through a scratch copy first.
#[derive(Debug, Clone, Copy)]
pub(super) enum Payload<'a> {
    /// The caller's bytes.
    Slice(&'a [u8]),
    /// A range of a local region, checked against it when the write was accepted.
    Region(LocalRange<'a>),
}

impl<'a> Payload<'a> {
    fn len(&self) -> usize {
        match self {
            Payload::Slice(b) => b.len(),
            Payload::Region(r) => r.len,
        }
    }

    /// The `n` bytes from `at` (`at + n <= self.len()`).
    fn part(&self, at: usize, n: usize) -> Payload<'a> {
        match *self {
            Payload::Slice(b) => Payload::Slice(&b[at..at + n]),
            Payload::Region(r) => {
                // Invariant: a part lies inside the range it is cut from.
                assert!(at + n <= r.len, "a payload part lies inside its payload");
                Payload::Region(LocalRange {
                    region: r.region,
                    offset: r.offset + at,
                    len: n,
                })
            }
        }
    }

    /// Appends the bytes to `out` (a region's by whole-word loads, as
    /// [`crate::Region::read_append`]).
    fn append_to(&self, out: &mut Vec<u8>) {
        match self {
            Payload::Slice(b) => out.extend_from_slice(b),
            // Invariant: a region payload's range was checked against its region when
            // the write was accepted (`Hub::write_from`), and parts stay inside.
            Payload::Region(r) => r
                .region
                .read_append(r.offset, r.len, out)
                .expect("a region payload lies inside its region"),
        }
    }

    /// The address of the first byte and the length, for an `iovec`.
    fn raw(&self) -> (*const u8, usize) {
        match self {
            Payload::Slice(b) => (b.as_ptr(), b.len()),
            // Invariant: as in `append_to`, the range lies inside the region.
            Payload::Region(r) => (
                r.region
                    .range_ptr(r.offset, r.len)
                    .expect("a region payload lies inside its region"),
                r.len,
            ),
        }
    }
}

/// Sends as much of `head` then `payload` as the socket takes without blocking, in one
/// `sendmsg` where possible; `Ok(n)` with `n` short of both lengths means the socket is
/// full. A region payload goes from the region's memory: the kernel copies it, and a word
/// another thread stores into meanwhile may be taken torn (contract item 9: callers do
/// not write from ranges they are storing into).
fn send_two_nonblocking(fd: RawFd, head: &[u8], payload: Payload<'_>) -> io::Result<usize> {
    let (body, body_len) = payload.raw();
    let total = head.len() + body_len;
    let mut sent = 0;
    while sent < total {
        let (a, a_len, b_len) = if sent < head.len() {
            (head[sent..].as_ptr(), head.len() - sent, body_len)
        } else {
            (body.wrapping_add(sent - head.len()), total - sent, 0)
        };
        let mut iov = [
            libc::iovec {
                iov_base: a as *mut libc::c_void,
                iov_len: a_len,
            },
            libc::iovec {
                iov_base: body as *mut libc::c_void,
                iov_len: b_len,
            },
        ];
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = if b_len == 0 { 1 } else { 2 };
        // SAFETY: `msg` points at `iov`, whose entries describe live memory the kernel
        // only reads: the tail of `head`, and the tail of the payload — the caller's
        // slice, or a range of a region checked against it (`Payload::raw`) whose memory
        // the borrowed `Region` keeps mapped for this call. All outlive the call. Words
        // of a region that other threads store into meanwhile are read by the kernel,
        // not by Rust code. `fd` is the link's socket.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock => return Ok(sent),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(err),
        }
    }
    Ok(sent)
}

/// Sends all of `buf`, blocking (up to the socket's write time-out per call, then
/// retrying while `keep_going` says so).
fn send_blocking(fd: RawFd, buf: &[u8], keep_going: impl Fn() -> bool) -> io::Result<()> {
    let mut sent = 0;
    while sent < buf.len() {
        let rest = &buf[sent..];
        // SAFETY: as in `send_nonblocking`.
        let n = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut if keep_going() => continue,
            _ => return Err(err),
        }
    }
    Ok(())
}

/// How long the link to an excluded peer keeps trying to hand it the `Excluded` frame.
/// A stopped peer's receive buffer is full of what was streamed to it before it stopped,
/// so the frame waits in our send queue behind it; shutting the link down before the
/// peer (woken) has read that backlog would discard the frame, and the peer would only
/// see a lost connection. Bounded: a peer stopped for longer learns less, not nothing
/// (its links fail, and it stops).
pub(crate) const EXCLUDED_LINGER: Duration = Duration::from_secs(30);

/// How often a lingering link looks whether the peer has read what was sent.
const LINGER_POLL: Duration = Duration::from_millis(10);

/// Waits until the peer has read (tcp: acknowledged; unix: taken from its queue) every
/// byte sent on `fd`, or `deadline`: closing before that could discard the unread tail.
fn wait_until_read(fd: RawFd, deadline: Instant) {
    loop {
        let mut unsent: libc::c_int = 0;
        // SAFETY: `fd` is the link's open socket (the link, which owns the stream, is
        // alive for this call), and SIOCOUTQ (= TIOCOUTQ) writes one c_int through the
        // valid pointer we pass; a failure only returns -1.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unsent as *mut libc::c_int) };
        if rc != 0 || unsent == 0 || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(LINGER_POLL);
    }
}

impl<S: LinkStream> Hub<S> {
    /// Starts the writer thread of `link`.
    pub(super) fn spawn_writer(self: &Arc<Self>, link: &Arc<Link<S>>) -> Result<()> {
        let hub = Arc::clone(self);
        let l = Arc::clone(link);
        std::thread::Builder::new()
            .name(format!("spindle-w{}-{}", self.node, link.peer))
            .spawn(move || hub.writer_loop(&l))
            .map(|_| ())
            .map_err(|e| Error::io("spawning a writer thread", e))
    }

    /// Lets a frame of `frame_bytes` join `link`'s queue, whose guard `out` is, and gives
    /// the guard back: not once the link failed or closed (the link's error, else
    /// `NotConnected`; the guard is released before the peer table is read), not while a
    /// broken link's reader drains (`QueueFull`: the failure follows), and, when
    /// `bounded`, not past [`FabricConfig::outbound_bytes_max`] (`QueueFull`).
    fn admit<'a>(
        &self,
        link: &Link<S>,
        out: MutexGuard<'a, Outbound>,
        frame_bytes: usize,
        bounded: bool,
    ) -> Result<MutexGuard<'a, Outbound>> {
        let failed = link.failed.load(Ordering::Acquire);
        if out.closed && !failed {
            // A send broke and the reader is draining the peer's last frames
            // (`write_broke`): the link fails once it is done, with the reason it finds.
            return Err(Error::QueueFull { peer: link.peer });
        }
        if failed || out.closed {
            drop(out);
            return Err(self
                .link(link.peer)
                .err()
                .unwrap_or(Error::NotConnected { peer: link.peer }));
        }
        if bounded && out.queued_bytes() + frame_bytes > self.cfg.outbound_bytes_max {
            return Err(Error::QueueFull { peer: link.peer });
        }
        Ok(out)
    }

    /// Appends a frame to `link`'s outbound buffer (within the bound unless `control`)
    /// and sends if the socket is free.
    pub(super) fn enqueue(
        &self,
        link: &Link<S>,
        frame_bytes: usize,
        control: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        {
            let mut out = self.admit(link, lock(&link.out), frame_bytes, !control)?;
            out.append(encode);
            if out.flushing {
                return Ok(());
            }
            // Held only well inside the queue's own bound, so a cork never turns into
            // `QueueFull` for the thread holding it.
            let hold_bytes_max = CORKED_BYTES_MAX.min(self.cfg.outbound_bytes_max / 2);
            if self.corked_here() && out.pending.len() < hold_bytes_max {
                // Held for this thread's outermost uncork, which flushes every link.
                self.held.store(true, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.try_flush(link);
        Ok(())
    }

    /// Starts holding the small frames this thread queues (see
    /// [`crate::Endpoint::cork`]). A cork is the calling thread's: frames other threads
    /// queue meanwhile (probes, a writer's sends) go out at once, and carry the held ones
    /// with them. A thread corks one hub at a time; its corks of another hub meanwhile are
    /// no-ops (and so are the matching uncorks).
    pub fn cork(&self) {
        let me = self as *const Self as usize;
        CORK.with(|c| match c.get() {
            (0, _) => c.set((me, 1)),
            (hub, depth) if hub == me => c.set((me, depth + 1)),
            _ => {}
        });
    }

    /// Ends a [`Hub::cork`]; this thread's outermost hands every link's held frames to
    /// its socket and lets the hooks go of what they held ([`super::LinkHooks::flush_held`]).
    pub fn uncork(&self) {
        let me = self as *const Self as usize;
        let last = CORK.with(|c| match c.get() {
            (hub, depth) if hub == me => {
                // Invariant: every uncork matches a cork of this thread, so the depth of
                // a recorded cork is at least one.
                assert!(depth > 0, "Hub::uncork without a matching cork");
                c.set(if depth == 1 { (0, 0) } else { (me, depth - 1) });
                depth == 1
            }
            _ => false,
        });
        if !last {
            return;
        }
        if self.held.swap(false, Ordering::Relaxed) {
            // The peer table's lock is released first: a send that breaks fails its link,
            // which takes the table's write lock.
            let links = up_links(&read(&self.peers));
            for link in links {
                self.try_flush(&link);
            }
        }
        self.hooks.flush_held();
    }

    /// True while the calling thread holds a cork of this hub.
    fn corked_here(&self) -> bool {
        let me = self as *const Self as usize;
        CORK.with(|c| c.get().0 == me)
    }

    /// Queues a frame made of `head` and `payload`. A large payload meeting an idle link
    /// goes to the socket straight from the caller's slice (no copy into the queue);
    /// otherwise as [`Hub::enqueue`].
    /// `bounded`: subject to [`FabricConfig::outbound_bytes_max`] (the later frames of a
    /// split write are not, so a write whose first frame was accepted is queued whole: the
    /// queue may exceed the bound by at most one write).
    pub(super) fn enqueue_payload(
        &self,
        link: &Link<S>,
        head: &[u8],
        payload: Payload<'_>,
        bounded: bool,
    ) -> Result<()> {
        let frame_bytes = head.len() + payload.len();
        if payload.len() >= DIRECT_SEND_BYTES_MIN && self.corked_here() {
            // Frames held ahead of a large payload go first, so the payload can still go
            // to the socket straight from the caller's slice.
            self.try_flush(link);
        }
        if payload.len() < DIRECT_SEND_BYTES_MIN {
            return self.enqueue(link, frame_bytes, !bounded, |out| {
                out.extend_from_slice(head);
                payload.append_to(out);
            });
        }
        {
            let mut out = self.admit(link, lock(&link.out), frame_bytes, bounded)?;
            // An encrypted link seals every frame into the queue: no direct send.
            if out.flushing || !out.pending.is_empty() || out.seal.is_some() {
                out.append(|p| {
                    p.extend_from_slice(head);
                    payload.append_to(p);
                });
                let idle = !out.flushing;
                drop(out);
                if idle {
                    self.try_flush(link);
                }
                return Ok(());
            }
            out.flushing = true;
        }
        let result = send_two_nonblocking(link.fd, head, payload);
        let mut out = lock(&link.out);
        match result {
            Ok(n) if n == frame_bytes => {
                out.flushing = false;
                let more = !out.pending.is_empty();
                drop(out);
                link.out_wake.notify_all();
                if more {
                    self.try_flush(link);
                }
            }
            Ok(n) => {
                // The socket is full: the writer thread sends the rest, from a copy.
                let mut rest = std::mem::take(&mut out.spare);
                rest.clear();
                if n < head.len() {
                    rest.extend_from_slice(&head[n..]);
                    payload.append_to(&mut rest);
                } else {
                    let done = n - head.len();
                    payload
                        .part(done, payload.len() - done)
                        .append_to(&mut rest);
                }
                out.inflight = Some((rest, 0));
                drop(out);
                link.out_wake.notify_all();
            }
            Err(e) => {
                out.flushing = false;
                drop(out);
                link.out_wake.notify_all();
                self.write_broke(link, &e.to_string());
            }
        }
        Ok(())
    }

    /// Sends the outbound buffer from the calling thread, without blocking; hands it to
    /// the writer thread when the socket is full.
    pub(super) fn try_flush(&self, link: &Link<S>) {
        let mut out = lock(&link.out);
        if out.flushing || out.pending.is_empty() || out.closed {
            return;
        }
        out.flushing = true;
        for _ in 0..CALLER_FLUSH_ROUNDS_MAX {
            let buf = out.take_pending(self.cfg.outbound_bytes_max);
            drop(out);
            let result = send_nonblocking(link.fd, &buf);
            out = lock(&link.out);
            match result {
                Ok(n) if n == buf.len() => {
                    if buf.capacity() <= self.cfg.outbound_bytes_max {
                        let mut buf = buf;
                        buf.clear();
                        out.spare = buf;
                    }
                    if out.pending.is_empty() {
                        out.flushing = false;
                        if out.drain_then_close {
                            drop(out);
                            link.out_wake.notify_all();
                        }
                        return;
                    }
                }
                Ok(n) => {
                    out.inflight = Some((buf, n));
                    drop(out);
                    link.out_wake.notify_all();
                    return;
                }
                Err(e) => {
                    out.flushing = false;
                    drop(out);
                    link.out_wake.notify_all();
                    self.write_broke(link, &e.to_string());
                    return;
                }
            }
        }
        // Others keep queuing: let the writer thread carry on.
        let buf = out.take_pending(self.cfg.outbound_bytes_max);
        out.inflight = Some((buf, 0));
        drop(out);
        link.out_wake.notify_all();
    }

    /// A send to `link`'s peer failed: the connection is gone, but the peer's last frames
    /// (an `Excluded` saying it suspected us while we were stopped, a `Goodbye`) may still
    /// wait unread in the socket. Writing stops here and the reader drains what is left:
    /// it reports the failure with the reason it finds there, or the connection error at
    /// the end of the stream (a read time-out bounds the wait).
    pub(super) fn write_broke(&self, link: &Link<S>, why: &str) {
        {
            let mut out = lock(&link.out);
            if out.closed {
                return;
            }
            out.closed = true;
        }
        link.out_wake.notify_all();
        tracing::debug!(
            node = self.node,
            peer = link.peer,
            why,
            "send failed; draining the reader"
        );
        if link
            .stream
            .set_read_timeout_ms(Some(self.cfg.suspect_ceiling()))
            .is_err()
        {
            self.fail(link, FailureReason::ConnectionLost(why.to_string()));
        }
    }

    pub(super) fn writer_loop(&self, link: &Link<S>) {
        loop {
            let (buf, sent) = {
                let mut out = lock(&link.out);
                loop {
                    if let Some(job) = out.inflight.take() {
                        break job;
                    }
                    // Drain only once `fail` has marked the link (`closed`): shutting the
                    // stream down earlier would let our own reader see the end of stream
                    // and report it before the local close.
                    if out.drain_then_close && out.closed && !out.flushing {
                        if out.pending.is_empty() {
                            let linger = out.drain_until;
                            drop(out);
                            if let Some(deadline) = linger {
                                wait_until_read(link.fd, deadline);
                            }
                            link.stream.shutdown_both();
                            return;
                        }
                        out.flushing = true;
                        let buf = out.take_pending(self.cfg.outbound_bytes_max);
                        break (buf, 0);
                    }
                    if out.closed && !out.drain_then_close {
                        return;
                    }
                    out = link.out_wake.wait(out).unwrap_or_else(|p| p.into_inner());
                }
            };
            // A stalled peer: keep retrying until the link fails (a draining link gets one
            // more write time-out, then gives up).
            let keep_going = || {
                let out = lock(&link.out);
                !out.closed || out.drain_until.is_some_and(|d| Instant::now() < d)
            };
            let result = send_blocking(link.fd, &buf[sent..], keep_going);
            let mut out = lock(&link.out);
            if let Err(e) = result {
                out.flushing = false;
                let draining = out.drain_then_close;
                drop(out);
                if draining {
                    link.stream.shutdown_both();
                    return;
                }
                self.write_broke(link, &e.to_string());
                return;
            }
            if buf.capacity() <= self.cfg.outbound_bytes_max {
                let mut buf = buf;
                buf.clear();
                out.spare = buf;
            }
            if out.pending.is_empty() {
                out.flushing = false;
                drop(out);
                self.doorbell.ring();
            } else {
                let next = out.take_pending(self.cfg.outbound_bytes_max);
                out.inflight = Some((next, 0));
            }
        }
    }

    pub(super) fn remote_desc(&self, link: &Link<S>, region: RegionId) -> Result<RegionDesc> {
        read(&link.remote_regions)
            .get(&region)
            .copied()
            .ok_or(Error::UnknownRegion {
                node: link.peer,
                region,
            })
    }

    pub(super) fn check_write(desc: &RegionDesc, offset: usize, len: usize) -> Result<()> {
        if len > WRITE_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "write",
                len,
                max: WRITE_BYTES_MAX,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= desc.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                node: desc.node,
                region: desc.region,
                offset,
                len,
                region_len: desc.len,
            }),
        }
    }

    pub(super) fn check_guard(desc: &RegionDesc, guard_offset: usize) -> Result<()> {
        if guard_offset % WORD_BYTES != 0 {
            return Err(Error::Misaligned {
                offset: guard_offset,
            });
        }
        Self::check_write(desc, guard_offset, WORD_BYTES)
    }

    /// One-sided write (see [`crate::Endpoint::write`]).
    pub fn write(&self, peer: NodeId, region: RegionId, offset: usize, bytes: &[u8]) -> Result<()> {
        let link = self.link(peer)?;
        let desc = self.remote_desc(&link, region)?;
        Self::check_write(&desc, offset, bytes.len())?;
        if self
            .hooks
            .remote_write(peer, desc, offset, bytes, None, self.corked_here())?
            == RemoteWrite::Done
        {
            return Ok(());
        }
        self.enqueue_write(&link, region, offset, Payload::Slice(bytes), None)
    }

    /// Queues a write as one frame, or as several (see [`WRITE_FRAME_PAYLOAD_BYTES_MAX`]).
    pub(super) fn enqueue_write(
        &self,
        link: &Link<S>,
        region: RegionId,
        offset: usize,
        bytes: Payload<'_>,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        let _issue = lock(&link.issue);
        // A large guarded write on a plaintext link is one frame: the peer's reader takes
        // its payload off the socket straight into the region (contract item 3 lets the
        // payload's words land unevenly before the guard); its buffer never holds it.
        let whole = guard.is_some() && bytes.len() >= IN_PLACE_WRITE_BYTES_MIN && !self.encrypts();
        let mut at = 0;
        loop {
            let abs = offset + at;
            let frame_end =
                (abs / WRITE_FRAME_PAYLOAD_BYTES_MAX + 1) * WRITE_FRAME_PAYLOAD_BYTES_MAX;
            let n = if whole {
                bytes.len()
            } else {
                (frame_end - abs).min(bytes.len() - at)
            };
            let last = at + n == bytes.len();
            let head = Head::write(region, abs, if last { guard } else { None }, n);
            self.enqueue_payload(link, head.as_slice(), bytes.part(at, n), at == 0)?;
            at += n;
            if last {
                return Ok(());
            }
        }
    }

    /// Write, then release the guard (see [`crate::Endpoint::write_then_release`]).
    pub fn write_then_release(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard_offset: usize,
        guard_value: u64,
    ) -> Result<()> {
        let link = self.link(peer)?;
        let desc = self.remote_desc(&link, region)?;
        Self::check_write(&desc, offset, bytes.len())?;
        Self::check_guard(&desc, guard_offset)?;
        let guard = Some((guard_offset, guard_value));
        if self
            .hooks
            .remote_write(peer, desc, offset, bytes, guard, self.corked_here())?
            == RemoteWrite::Done
        {
            return Ok(());
        }
        self.enqueue_write(&link, region, offset, Payload::Slice(bytes), guard)
    }

    /// Write from a local region (see [`crate::Endpoint::write_from`]): the hooks move
    /// it straight when they can (shm), else it is framed from the region in place (a
    /// large frame meeting an idle socket goes from the region's memory, the rest is
    /// copied from it into the queue).
    pub fn write_from(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        from: LocalRange<'_>,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        let link = self.link(peer)?;
        let desc = self.remote_desc(&link, region)?;
        Self::check_write(&desc, offset, from.len)?;
        if let Some((guard_offset, _)) = guard {
            Self::check_guard(&desc, guard_offset)?;
        }
        from.region.check_range(from.offset, from.len)?;
        if self
            .hooks
            .remote_write_from(peer, desc, offset, from, guard, self.corked_here())?
            == RemoteWrite::Done
        {
            return Ok(());
        }
        self.enqueue_write(&link, region, offset, Payload::Region(from), guard)
    }

    /// Two-sided send (see [`crate::Endpoint::send`]).
    pub fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() > SEND_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "send",
                len: bytes.len(),
                max: SEND_BYTES_MAX,
            });
        }
        let link = self.link(peer)?;
        let head = Head::send(imm, bytes.len());
        let _issue = lock(&link.issue);
        self.enqueue_payload(&link, head.as_slice(), Payload::Slice(bytes), true)
    }

    /// The descriptor of `peer`'s region `id`.
    pub fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        let link = self.link(peer).ok()?;
        let desc = read(&link.remote_regions).get(&id).copied();
        desc
    }
}
