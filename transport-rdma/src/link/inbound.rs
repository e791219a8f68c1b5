//! The inbound side of a stream link: the reader thread that decodes frames in place
//! and applies them in order (writes through the hooks, sends and region changes as
//! events), with backpressure when the owner's event queue is full.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::frame::{malformed, Frame, FrameReader, PendingRelease, Step};
use super::{lock, read, write, Hub, Link, LinkStream};
use crate::trust::{Opener, Opening};
use crate::{
    Error, Event, FailureReason, NodeId, Region, RegionDesc, RegionId, Result, EVENT_QUEUE_MAX,
    REGIONS_PER_ENDPOINT_MAX, WORD_BYTES,
};

/// How long a reader blocked on a full event queue sleeps between checks for failure.
const BACKPRESSURE_RECHECK: Duration = Duration::from_millis(50);

impl<S: LinkStream> Hub<S> {
    /// Queues an event from `link`'s reader, waiting while the queue is full
    /// (backpressure). Returns false if the link failed meanwhile (event dropped with it).
    pub(super) fn push_data(&self, link: &Link<S>, event: Event) -> bool {
        let mut q = lock(&self.events);
        while q.len() >= EVENT_QUEUE_MAX {
            if link.failed.load(Ordering::Acquire) || self.is_closed() {
                return false;
            }
            q = self
                .events_space
                .wait_timeout(q, BACKPRESSURE_RECHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        q.push_back(event);
        drop(q);
        self.doorbell.ring();
        true
    }

    /// The link's reader thread: reads `stream` (through `opener` if the link is
    /// encrypted), applies frames in order, and fails the link when it ends.
    pub(super) fn reader_loop(
        &self,
        link: &Arc<Link<S>>,
        mut reader: FrameReader,
        mut stream: S,
        mut opener: Option<Opener>,
    ) {
        let mut spin = ReadSpin::new(self.config().read_spin_us);
        let reason = loop {
            match reader.step(|frame| self.apply(link, frame)) {
                Ok(Step::Applied) => self.doorbell.ring(),
                Ok(Step::NeedRead { needed }) => {
                    if opener.is_none() {
                        match reader.pending_release() {
                            Ok(Some(w)) => {
                                if let Err(reason) =
                                    self.apply_in_place(link, w, &mut stream, &mut spin)
                                {
                                    break reason;
                                }
                                reader.clear();
                                self.doorbell.ring();
                                continue;
                            }
                            Ok(None) => {}
                            Err(e) => break failure_of(e),
                        }
                    }
                    let got = self.wait_read(link, &mut spin, |until| {
                        let mut polled = PollThenBlock {
                            inner: &mut stream,
                            until,
                        };
                        let mut from = Opening {
                            inner: &mut polled,
                            opener: opener.as_mut(),
                        };
                        reader.fill(&mut from, needed)
                    });
                    match got {
                        Ok(0) => break FailureReason::ConnectionLost("end of stream".into()),
                        Ok(_) => {}
                        // A record that does not open: tampered with, or not ours.
                        Err(Error::Io { source, .. })
                            if source.kind() == std::io::ErrorKind::InvalidData =>
                        {
                            break FailureReason::Malformed(source.to_string())
                        }
                        Err(e) => break FailureReason::ConnectionLost(e.to_string()),
                    }
                }
                Ok(Step::Goodbye) => break FailureReason::Closed,
                Ok(Step::Excluded { silent_ms }) => break FailureReason::Excluded { silent_ms },
                Err(e) => break failure_of(e),
            }
        };
        self.doorbell.ring();
        if matches!(reason, FailureReason::Malformed(_)) {
            tracing::warn!(node = self.node, peer = link.peer, %reason, "disconnecting peer");
        }
        self.fail(link, reason);
    }

    /// Applies one frame from `link`'s peer. `Ok(false)`: a Goodbye.
    pub(super) fn apply(&self, link: &Link<S>, frame: Frame<'_>) -> Result<bool> {
        if link.failed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        match frame {
            Frame::Write {
                region,
                offset,
                bytes,
            } => self.apply_write(link, region, offset, bytes, None)?,
            Frame::WriteRelease {
                region,
                offset,
                bytes,
                guard_offset,
                guard,
            } => self.apply_write(link, region, offset, bytes, Some((guard_offset, guard)))?,
            Frame::Send { imm, bytes } => {
                let event = Event::Recv {
                    peer: link.peer,
                    imm,
                    data: bytes.to_vec(),
                };
                if !self.push_data(link, event) {
                    return Err(Error::Closed);
                }
            }
            Frame::Probe => {}
            Frame::Goodbye => return Ok(false),
            Frame::RegionAnnounce(entry) => {
                let desc = RegionDesc {
                    node: link.peer,
                    region: entry.id,
                    len: entry.len,
                };
                {
                    let mut remote = write(&link.remote_regions);
                    if remote.len() >= REGIONS_PER_ENDPOINT_MAX && !remote.contains_key(&entry.id) {
                        return Err(malformed(
                            "peer announced more than REGIONS_PER_ENDPOINT_MAX regions",
                        ));
                    }
                    self.hooks
                        .remote_region_announced(link.peer, desc, &entry.tag)
                        .map_err(malformed)?;
                    remote.insert(entry.id, desc);
                }
                let event = Event::RegionAnnounced {
                    peer: link.peer,
                    region: desc,
                };
                if !self.push_data(link, event) {
                    return Err(Error::Closed);
                }
            }
            Frame::RegionWithdraw { id } => {
                let known = write(&link.remote_regions).remove(&id).is_some();
                if known {
                    self.hooks.remote_region_withdrawn(link.peer, Some(id));
                    let event = Event::RegionWithdrawn {
                        peer: link.peer,
                        region: id,
                    };
                    if !self.push_data(link, event) {
                        return Err(Error::Closed);
                    }
                }
            }
            Frame::Hello(_) => return Err(malformed("hello after the handshake")),
            Frame::Refused { .. } => return Err(malformed("refusal after the handshake")),
            // `FrameReader::step` ends the link on it before it reaches us.
            Frame::Excluded { .. } => return Ok(false),
        }
        Ok(true)
    }

    pub(super) fn apply_write(
        &self,
        link: &Link<S>,
        id: RegionId,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        match self.write_target(link.peer, id, offset, bytes.len(), guard)? {
            Some(region) => self
                .hooks
                .apply_write(link.peer, &region, offset, bytes, guard),
            None => Ok(()), // raced with our withdrawal: dropped, as documented
        }
    }

    /// The local region `peer`'s write of `len` bytes at `offset` (and its guard) goes
    /// to, checked against its bounds and against what the region lets `peer` write
    /// ([`Region::limit_peer_writes`]): `None` for a region we withdrew (the write is
    /// dropped), an error for an unknown region or a range or guard outside either.
    fn write_target(
        &self,
        peer: NodeId,
        id: RegionId,
        offset: usize,
        len: usize,
        guard: Option<(usize, u64)>,
    ) -> Result<Option<Region>> {
        let local = read(&self.local);
        let Some((region, _)) = local.regions.get(&id) else {
            if local.withdrawn.contains(&id) {
                return Ok(None);
            }
            return Err(malformed(format!("write to unknown region {id}")));
        };
        let bad = |what: &str| {
            malformed(format!(
                "{what} out of bounds of region {id} ({} bytes)",
                region.len()
            ))
        };
        if region.check_range(offset, len).is_err() {
            return Err(bad("write"));
        }
        if let Some((guard_offset, _)) = guard {
            if guard_offset % WORD_BYTES != 0 {
                return Err(malformed(format!("misaligned guard offset {guard_offset}")));
            }
            if region.check_range(guard_offset, WORD_BYTES).is_err() {
                return Err(bad("guard"));
            }
        }
        if let Some(why) = region.peer_write_refused(peer, offset, len, guard.map(|g| g.0)) {
            return Err(malformed(why));
        }
        Ok(Some(region.clone()))
    }

    /// One read of `link`'s socket by `read`, given the instant its polling ends (the
    /// [`ReadSpin`]'s poll), kept as a wait: silence is judged only while the reader waits
    /// on the socket, not while it applies frames or waits for event-queue room, and the
    /// spin learns from how long the read took.
    fn wait_read<R>(
        &self,
        link: &Link<S>,
        spin: &mut ReadSpin,
        read: impl FnOnce(Instant) -> R,
    ) -> R {
        link.last_heard_ms.store(self.now_ms(), Ordering::Release);
        link.waiting.store(true, Ordering::Release);
        let started = Instant::now();
        let got = read(started + spin.poll());
        spin.waited(started.elapsed());
        link.waiting.store(false, Ordering::Release);
        link.last_heard_ms.store(self.now_ms(), Ordering::Release);
        got
    }

    /// Applies a large `WriteRelease` frame whose payload is still arriving
    /// ([`FrameReader::pending_release`]) by reading the rest of the payload from `stream`
    /// straight into its region, [`IN_PLACE_READ_BYTES_MAX`] at a time (each read a
    /// [`Hub::wait_read`], as the buffer's reads are), then releasing the guard: the
    /// payload crosses from the socket into the region in one copy, not two. The default
    /// [`super::LinkHooks::apply_write`] done in place; only for plaintext links (an
    /// encrypted record must be opened in a buffer).
    fn apply_in_place(
        &self,
        link: &Link<S>,
        w: PendingRelease<'_>,
        stream: &mut S,
        spin: &mut ReadSpin,
    ) -> std::result::Result<(), FailureReason> {
        let guard = Some((w.guard_offset, w.guard));
        let target = self
            .write_target(link.peer, w.region, w.offset, w.len, guard)
            .map_err(failure_of)?;
        if let Some(region) = &target {
            region
                .write_bytes_for_peer(w.offset, w.have, true)
                .map_err(failure_of)?;
        }
        // A write to a region we withdrew is read off the stream and dropped.
        let mut drain = Vec::new();
        let fd = stream.as_raw_fd();
        let mut at = w.have.len();
        while at < w.len {
            let want = (w.len - at).min(IN_PLACE_READ_BYTES_MAX);
            let got = self.wait_read(link, spin, |until| match &target {
                Some(region) => poll_then_block(until, |flags| {
                    region.recv_into(fd, w.offset + at, want, flags)
                }),
                None => {
                    drain.resize(want, 0);
                    io::Read::read(
                        &mut PollThenBlock {
                            inner: &mut *stream,
                            until,
                        },
                        &mut drain,
                    )
                }
            });
            match got {
                Ok(0) => return Err(FailureReason::ConnectionLost("end of stream".into())),
                Ok(n) => at += n,
                Err(e) => return Err(FailureReason::ConnectionLost(e.to_string())),
            }
        }
        if let Some(region) = target {
            // Payload, then guard (contract item 3): a release store after the last byte.
            region.store_u64(w.guard_offset, w.guard);
        }
        Ok(())
    }
}

/// Why a link's reader stops on `e`, an error from decoding or applying its peer's frames.
fn failure_of(e: Error) -> FailureReason {
    match e {
        Error::Malformed { detail, .. } => FailureReason::Malformed(detail),
        Error::Closed => FailureReason::LocalClose,
        e => FailureReason::ConnectionLost(e.to_string()),
    }
}

/// Most payload bytes [`Hub::apply_in_place`] asks one read for: between reads the link
/// counts as heard from, so a long payload arriving slowly is not taken for silence.
const IN_PLACE_READ_BYTES_MAX: usize = 256 << 10;

/// How long a link's reader polls its socket before it blocks, adapted to the waits it
/// sees, as KVM's halt polling adapts to a vCPU's: a wait that ended within
/// [`crate::FabricConfig::read_spin_us`] and outlasted the poll doubles the next poll
/// (from [`READ_SPIN_START`], at most that bound), a longer one halves it (below the
/// start: no poll). A peer that answers within microseconds (a ping/pong, a stream) is
/// read without waking a sleeping thread; a link whose traffic is sparse (a periodic
/// topic, probes) blocks at once and costs no core. Sans-IO: the reader loop feeds it
/// the waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadSpin {
    max: Duration,
    poll: Duration,
}

/// The first poll after a short wait. Then it doubles while waits stay short.
pub(crate) const READ_SPIN_START: Duration = Duration::from_micros(10);

impl ReadSpin {
    /// No poll yet, at most `max_us` later.
    pub(crate) fn new(max_us: u64) -> Self {
        ReadSpin {
            max: Duration::from_micros(max_us),
            poll: Duration::ZERO,
        }
    }

    /// How long the next wait polls before it blocks.
    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }

    /// A wait (polling and blocking) took `waited`.
    pub(crate) fn waited(&mut self, waited: Duration) {
        if waited > self.max {
            self.poll /= 2;
            if self.poll < READ_SPIN_START {
                self.poll = Duration::ZERO;
            }
        } else if waited > self.poll {
            self.poll = (self.poll * 2).max(READ_SPIN_START).min(self.max);
        }
    }
}

/// A link's stream read by polling until `until`, then by blocking: the reader thread's
/// spin ([`ReadSpin`]). Each poll is one non-blocking `recv`; between polls the thread
/// yields its core, so the threads that share it (the predicate thread above all) run as
/// soon as they have work.
struct PollThenBlock<'a, S> {
    inner: &'a mut S,
    /// Poll until then; past: block at once.
    until: Instant,
}

impl<S: LinkStream> io::Read for PollThenBlock<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        poll_then_block(self.until, |flags| {
            // SAFETY: `fd` is the open socket `self.inner` owns, borrowed for this call;
            // `buf` is a live, writable slice of `buf.len()` bytes, and `recv` writes at
            // most that many into it.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        })
    }
}

/// One read by `recv(flags)`: polled with `MSG_DONTWAIT` until `until`, yielding the core
/// between polls, then blocking (flags 0). MSG_DONTWAIT makes one call non-blocking
/// without touching the descriptor's flags, which the writer's clone of the socket shares.
fn poll_then_block(
    until: Instant,
    mut recv: impl FnMut(libc::c_int) -> io::Result<usize>,
) -> io::Result<usize> {
    while Instant::now() < until {
        match recv(libc::MSG_DONTWAIT) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    loop {
        match recv(0) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn short_waits_grow_the_poll_to_the_bound_and_a_long_one_stops_it() {
        let mut spin = ReadSpin::new(1_000);
        assert_eq!(spin.poll(), Duration::ZERO, "a new link blocks at once");
        // A ping/pong: every wait about 45 us.
        let mut polls = Vec::new();
        for _ in 0..5 {
            spin.waited(45 * US);
            polls.push(spin.poll().as_micros());
        }
        assert_eq!(
            polls,
            [10, 20, 40, 80, 80],
            "doubles until it covers the wait"
        );
        // Waits shorter than the poll (the poll caught the data) leave it.
        spin.waited(30 * US);
        assert_eq!(spin.poll(), 80 * US);
        // Short waits never push it past the bound.
        for _ in 0..20 {
            spin.waited(900 * US);
        }
        assert_eq!(spin.poll(), 1_000 * US);
        // A wait past the bound (a stall, a sparse topic, a probe on an idle link) halves
        // it: one tail in a ping/pong leaves most of the poll, a run of them stops it.
        let mut polls = Vec::new();
        for _ in 0..8 {
            spin.waited(1_001 * US);
            polls.push(spin.poll().as_micros());
        }
        assert_eq!(polls, [500, 250, 125, 62, 31, 15, 0, 0]);
    }

    #[test]
    fn a_zero_bound_and_sparse_traffic_never_poll() {
        // A zero bound; a 1 kHz topic: every wait 1 ms or more against a 200 us bound.
        for (max_us, waits_us) in [(0, [0, 1, 10, 5_000]), (200, [1_000, 1_200, 999, 10_000])] {
            let mut spin = ReadSpin::new(max_us);
            for w in waits_us {
                spin.waited(w * US);
                assert_eq!(
                    spin.poll(),
                    Duration::ZERO,
                    "bound {max_us} us, wait {w} us"
                );
            }
        }
    }
}
