//! Stream links shared by the tcp and shm backends: framing, handshake, probes.
//!
//! A backend that talks to each peer over one reliable byte stream (a `TcpStream`, a
//! `UnixStream`) builds on a [`Hub`]: the hub owns the local regions, the peer table, the
//! event queue and the doorbell, and runs the protocol below on any [`LinkStream`]. The
//! backend only makes streams (listens, dials) and hands them over:
//!
//! - [`Hub::new`] with a [`LinkHooks`] implementation (the defaults give tcp behaviour);
//! - an accepted stream goes to [`Hub::run_acceptor`] (on a thread of its own: it performs
//!   the handshake, then becomes that peer's reader thread);
//! - [`crate::Endpoint::connect`] becomes [`Hub::begin_connect`] (dedups attempts; returns an
//!   attempt id or `None` when a link exists or is being made), then the backend dials on
//!   a thread and calls [`Hub::run_initiator`] with the stream, or
//!   [`Hub::attempt_failed`] if dialing fails;
//! - every other [`crate::Endpoint`] method delegates to the hub method of the same name.
//!
//! ## Wire format
//!
//! Every frame is `body_len: u32 LE, kind: u8, body`; integers are little endian. See
//! [`Frame`] for the bodies. Every length is checked against the crate's `*_MAX` bounds
//! and every write against the target region before anything is applied; a peer whose
//! bytes do not decode is disconnected with [`FailureReason::Malformed`].
//!
//! ## Handshake and simultaneous connects
//!
//! The initiator sends `Hello` (its node id, the node id it expects to reach, its
//! incarnation and its region table). The acceptor decides, under the peer-table lock:
//! with no link (or a failed one) it accepts; with its own attempt to the same peer in
//! flight it accepts only if the initiator has the lower node id (the connection
//! initiated by the lower node id is the one kept, on both sides); with a live link to
//! the same incarnation it rejects (after giving that link up to half the connect
//! time-out to fail: the peer may be re-dialing right after closing it, its Goodbye still
//! in flight); with a live link to an older incarnation (the peer restarted) it fails the
//! old link and accepts. Accepting means replying with its own
//! `Hello`; rejecting means `Goodbye`. Both sides report [`Event::PeerConnected`] once the
//! link is installed, with the peer's regions already known.
//!
//! ## Threads, queues and backpressure
//!
//! Per link: a reader thread decodes frames into a reusable buffer and applies writes in
//! order (through [`LinkHooks::apply_write`]), and a writer thread that only works when
//! the socket would block. Writers encode frames into the link's outbound buffer and the
//! first caller to find the socket free sends the whole buffer with one non-blocking
//! syscall (opportunistic batching: frames queued meanwhile by other threads go out in
//! the next syscall); a payload of 16 KiB or more meeting an idle link goes out straight
//! from the caller's slice (`sendmsg`, no copy). When the socket is full the buffer is
//! handed to the writer thread;
//! callers keep queuing up to [`FabricConfig::outbound_bytes_max`] bytes, then get
//! [`Error::QueueFull`] for that peer only. Events go into a queue bounded by
//! [`EVENT_QUEUE_MAX`]; when it is full the reader stops reading from its peer
//! (backpressure, never loss). A peer counts as silent only while its reader is blocked
//! on the socket, never while it applies a large frame or waits for event-queue room.
//! A probe thread sends `Probe` every [`FabricConfig::probe_interval_ms`] on each idle
//! link and fails links silent for [`FabricConfig::probe_timeout_ms`].
//!
//! ## Lock order
//!
//! `local` (regions) before `peers` before a link's `out`; the event queue's lock is
//! taken alone. [`Hub`] never calls [`LinkHooks`] with `out` or the event queue held
//! (hooks may be called with `local`, `peers` or a link's remote-region table held: they
//! must not call back into the hub).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod frame;

pub use frame::{decode_all, REGION_TAG_BYTES_MAX};
use frame::{
    encode_goodbye, encode_hello, encode_probe, encode_region_announce, encode_region_withdraw,
    malformed, Frame, FrameReader, Head, Hello, RegionEntry, Step,
};

use crate::{
    Doorbell, Error, Event, FabricConfig, FailureReason, NodeId, Region, RegionDesc, RegionId,
    Result, EVENT_QUEUE_MAX, PEERS_MAX, REGIONS_PER_ENDPOINT_MAX, SEND_BYTES_MAX, WORD_BYTES,
    WRITE_BYTES_MAX,
};

// ---------------------------------------------------------------------------------------
// Streams and hooks
// ---------------------------------------------------------------------------------------

/// A connected, reliable byte stream to one peer (TcpStream, UnixStream).
pub trait LinkStream: Read + Write + AsRawFd + Send + Sync + Sized + 'static {
    /// Another handle to the same stream.
    fn try_clone_stream(&self) -> io::Result<Self>;
    /// Shuts both directions down, waking threads blocked on the stream.
    fn shutdown_both(&self);
    /// Sets the read time-out (`None`: block).
    fn set_read_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Sets the time-out of blocking writes.
    fn set_write_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl LinkStream for std::net::TcpStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn set_read_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
    fn set_write_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_write_timeout(timeout)
    }
}

impl LinkStream for std::os::unix::net::UnixStream {
    fn try_clone_stream(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn set_read_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
    fn set_write_timeout_ms(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_write_timeout(timeout)
    }
}

/// What the hub does with an outgoing one-sided write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteWrite {
    /// Frame it on the link (tcp).
    Framed,
    /// The hook already wrote the peer's memory itself (shm); nothing goes on the link.
    Done,
}

/// The places where a backend changes the link's behaviour. Every method has the tcp
/// behaviour as its default.
pub trait LinkHooks: Send + Sync + 'static {
    /// Makes the memory for a local region of `len` bytes (whole words) and the tag peers
    /// need to reach it (at most [`REGION_TAG_BYTES_MAX`] bytes). Default: heap, no tag.
    fn make_region(&self, id: RegionId, len: usize) -> Result<(Region, Vec<u8>)> {
        Ok((Region::new_heap(id, len)?, Vec::new()))
    }

    /// A local region was deregistered.
    fn region_dropped(&self, _id: RegionId) {}

    /// A peer announced a region (in its `Hello` or later). An error disconnects the peer
    /// as malformed. After a peer restarts, its new link announces ids the old link had
    /// announced: the new announcement replaces the old one. Default: nothing to do.
    fn remote_region_announced(
        &self,
        _peer: NodeId,
        _desc: RegionDesc,
        _tag: &[u8],
    ) -> std::result::Result<(), String> {
        Ok(())
    }

    /// A peer withdrew a region, or its link failed (`None`: all of its regions).
    fn remote_region_withdrawn(&self, _peer: NodeId, _id: Option<RegionId>) {}

    /// An outgoing write to `peer`'s region `desc`, already checked against the region's
    /// bounds (and the guard for alignment and bounds). Default: frame it.
    fn remote_write(
        &self,
        _peer: NodeId,
        _desc: RegionDesc,
        _offset: usize,
        _bytes: &[u8],
        _guard: Option<(usize, u64)>,
    ) -> Result<RemoteWrite> {
        Ok(RemoteWrite::Framed)
    }

    /// Applies a `Write`/`WriteRelease` frame from `peer` to local `region`, already
    /// checked against its bounds (and the guard for alignment and bounds). Called from
    /// that peer's reader thread, in frame order. Default: copy, then release-store the
    /// guard. shm never frames writes, so it may keep the default.
    fn apply_write(
        &self,
        _peer: NodeId,
        region: &Region,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        region.write_bytes(offset, bytes)?;
        if let Some((guard_offset, value)) = guard {
            region.store_u64(guard_offset, value);
        }
        Ok(())
    }
}

/// The tcp behaviour: every hook at its default.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultHooks;

impl LinkHooks for DefaultHooks {}

// ---------------------------------------------------------------------------------------
// Sockets: non-blocking and blocking sends without SIGPIPE
// ---------------------------------------------------------------------------------------

/// Sends as much of `buf` as the socket takes without blocking; `Ok(n)` with `n <
/// buf.len()` means the socket is full.
fn send_nonblocking(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < buf.len() {
        let rest = &buf[sent..];
        // SAFETY: `rest` is a valid readable slice of `rest.len()` bytes for the duration
        // of the call; `fd` is a socket owned by the link, kept open by its `LinkStream`.
        let n = unsafe {
            libc::send(
                fd,
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
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

/// Sends as much of `head` then `payload` as the socket takes without blocking, in one
/// `sendmsg` where possible; `Ok(n)` with `n` short of both lengths means the socket is
/// full.
fn send_two_nonblocking(fd: RawFd, head: &[u8], payload: &[u8]) -> io::Result<usize> {
    let total = head.len() + payload.len();
    let mut sent = 0;
    while sent < total {
        let (a, b) = if sent < head.len() {
            (&head[sent..], payload)
        } else {
            (&payload[sent - head.len()..], &[][..])
        };
        let mut iov = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut libc::c_void,
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            },
        ];
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = if b.is_empty() { 1 } else { 2 };
        // SAFETY: `msg` points at `iov`, whose entries describe the live slices `a` and
        // `b` (the kernel only reads them); all outlive the call. `fd` is the link's socket.
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}
fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------

/// Rounds of "send what others queued meanwhile" one caller does before handing the
/// rest to the link's writer thread.
const CALLER_FLUSH_ROUNDS_MAX: usize = 4;
/// Payloads at least this large skip the outbound buffer when the link is idle.
const DIRECT_SEND_BYTES_MIN: usize = 16 << 10;
/// Writes larger than this go out as several `Write` frames of at most this many payload
/// bytes, cut at region offsets that are multiples of it (so at word boundaries; the
/// guard, if any, rides on the last). Frames this size fit the socket buffers and the
/// reader's buffer, so large writes neither spill into a copied outbound buffer nor make
/// the reader grow and re-read a megabyte before applying it. Applying a write frame by
/// frame keeps the contract: words stay whole, order stays FIFO.
const WRITE_FRAME_PAYLOAD_BYTES_MAX: usize = 64 << 10;
/// How often a rejected initiator checks whether the peer's own link has arrived.
const REJECTED_POLL: Duration = Duration::from_millis(5);
/// How long a reader blocked on a full event queue sleeps between checks for failure.
const BACKPRESSURE_RECHECK: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Outbound {
    /// Encoded frames not yet handed to the socket.
    pending: Vec<u8>,
    /// A buffer the socket would not take all of, and how much of it was sent; owned by
    /// the writer thread.
    inflight: Option<(Vec<u8>, usize)>,
    /// Someone (a caller or the writer thread) is sending; others only append.
    flushing: bool,
    /// An empty buffer kept for reuse (up to `outbound_bytes_max` of capacity: a buffer
    /// freed after a burst comes back as fresh pages, and faulting them in cost more than
    /// the copy into them).
    spare: Vec<u8>,
    /// The writer thread should exit (after draining, if `drain_then_close`).
    closed: bool,
    /// Send everything queued, then shut the stream down.
    drain_then_close: bool,
}

impl Outbound {
    fn queued_bytes(&self) -> usize {
        self.pending.len() + self.inflight.as_ref().map_or(0, |(b, s)| b.len() - s)
    }
}

/// One live connection to a peer.
struct Link<S: LinkStream> {
    peer: NodeId,
    /// The peer's incarnation (from its `Hello`).
    incarnation: u64,
    stream: S,
    fd: RawFd,
    out: Mutex<Outbound>,
    out_wake: Condvar,
    /// Held while one write or send is queued, so the frames of a split write are never
    /// interleaved with another caller's.
    issue: Mutex<()>,
    remote_regions: RwLock<BTreeMap<RegionId, RegionDesc>>,
    /// Hub clock (ms) when bytes last arrived.
    last_heard_ms: AtomicU64,
    /// The reader is blocked reading the socket: only then does silence count against
    /// the peer (not while it applies frames or waits for event-queue room).
    waiting: AtomicBool,
    failed: AtomicBool,
}

impl<S: LinkStream> std::fmt::Debug for Link<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("peer", &self.peer)
            .field("failed", &self.failed.load(Ordering::Relaxed))
            .finish()
    }
}

enum Slot<S: LinkStream> {
    /// Our own connection attempt is in flight.
    Pending {
        attempt: u64,
    },
    Up(Arc<Link<S>>),
    Failed(FailureReason),
}

struct Local {
    regions: BTreeMap<RegionId, (Region, Vec<u8>)>,
    /// Deregistered ids: late writes to them are dropped, not treated as malformed.
    withdrawn: BTreeSet<RegionId>,
}

/// The shared state of a stream-linked endpoint. See the module docs for how a backend
/// drives it.
pub struct Hub<S: LinkStream> {
    node: NodeId,
    incarnation: u64,
    cfg: FabricConfig,
    hooks: Arc<dyn LinkHooks>,
    start: Instant,
    local: RwLock<Local>,
    peers: RwLock<BTreeMap<NodeId, Slot<S>>>,
    events: Mutex<VecDeque<Event>>,
    events_space: Condvar,
    doorbell: Doorbell,
    next_attempt: AtomicU64,
    closed: AtomicBool,
}

impl<S: LinkStream> std::fmt::Debug for Hub<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("node", &self.node)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

fn fresh_incarnation(node: NodeId) -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let pid = u64::from(std::process::id());
    nanos ^ (pid << 32) ^ u64::from(node).rotate_left(17) ^ COUNTER.fetch_add(1, Ordering::Relaxed)
}

impl<S: LinkStream> Hub<S> {
    /// A hub for node `node`, and its probe thread (which exits when the hub is closed).
    pub fn new(node: NodeId, cfg: FabricConfig, hooks: Arc<dyn LinkHooks>) -> Result<Arc<Self>> {
        cfg.validate()?;
        let hub = Arc::new(Hub {
            node,
            incarnation: fresh_incarnation(node),
            cfg,
            hooks,
            start: Instant::now(),
            local: RwLock::new(Local {
                regions: BTreeMap::new(),
                withdrawn: BTreeSet::new(),
            }),
            peers: RwLock::new(BTreeMap::new()),
            events: Mutex::new(VecDeque::new()),
            events_space: Condvar::new(),
            doorbell: Doorbell::new(),
            next_attempt: AtomicU64::new(1),
            closed: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&hub);
        std::thread::Builder::new()
            .name(format!("spindle-probe-{node}"))
            .spawn(move || probe_loop(weak))
            .map_err(|e| Error::io("spawning the probe thread", e))?;
        Ok(hub)
    }

    /// This endpoint's node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The configuration.
    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// True once [`Hub::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    // ----- events -------------------------------------------------------------------

    /// Queues a control event (connected / failed): at most two per link, so these may
    /// exceed [`EVENT_QUEUE_MAX`] by a bounded amount and are never dropped.
    fn push_control(&self, event: Event) {
        lock(&self.events).push_back(event);
        self.doorbell.ring();
    }

    /// Queues an event from `link`'s reader, waiting while the queue is full
    /// (backpressure). Returns false if the link failed meanwhile (event dropped with it).
    fn push_data(&self, link: &Link<S>, event: Event) -> bool {
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

    /// The next event, if any. Never blocks.
    pub fn poll_event(&self) -> Option<Event> {
        let mut q = lock(&self.events);
        let was_full = q.len() >= EVENT_QUEUE_MAX;
        let event = q.pop_front();
        drop(q);
        if was_full {
            self.events_space.notify_all();
        }
        event
    }

    /// Parks on the doorbell.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.doorbell.wait(timeout)
    }

    /// The doorbell (rung on landed writes, queued events and drained queues).
    #[allow(dead_code)] // for backends that write memory directly (shm)
    pub fn doorbell(&self) -> &Doorbell {
        &self.doorbell
    }

    // ----- peer table ---------------------------------------------------------------

    fn link(&self, peer: NodeId) -> Result<Arc<Link<S>>> {
        self.check_open()?;
        match read(&self.peers).get(&peer) {
            Some(Slot::Up(link)) => Ok(Arc::clone(link)),
            Some(Slot::Failed(reason)) => Err(Error::PeerFailed {
                peer,
                reason: reason.clone(),
            }),
            _ => Err(Error::NotConnected { peer }),
        }
    }

    /// Peers whose link is up, ascending.
    pub fn peers(&self) -> Vec<NodeId> {
        read(&self.peers)
            .iter()
            .filter_map(|(id, slot)| matches!(slot, Slot::Up(_)).then_some(*id))
            .collect()
    }

    /// Registers interest in a link to `peer`. `Ok(Some(attempt))`: the caller must dial
    /// and then call [`Hub::run_initiator`] or [`Hub::attempt_failed`] with that attempt.
    /// `Ok(None)`: a link exists or is being made (idempotent).
    pub fn begin_connect(&self, peer: NodeId) -> Result<Option<u64>> {
        self.check_open()?;
        if peer == self.node {
            return Err(Error::InvalidPeer {
                peer,
                detail: "an endpoint cannot link to itself".into(),
            });
        }
        let mut peers = write(&self.peers);
        match peers.get(&peer) {
            Some(Slot::Up(_)) | Some(Slot::Pending { .. }) => return Ok(None),
            _ => {}
        }
        let live = peers
            .values()
            .filter(|s| !matches!(s, Slot::Failed(_)))
            .count();
        if live >= PEERS_MAX {
            return Err(Error::InvalidPeer {
                peer,
                detail: format!("already linked to {PEERS_MAX} peers (PEERS_MAX)"),
            });
        }
        let attempt = self.next_attempt.fetch_add(1, Ordering::Relaxed);
        peers.insert(peer, Slot::Pending { attempt });
        Ok(Some(attempt))
    }

    /// Dialing for `attempt` failed: the peer is reported failed unless another link to
    /// it came up meanwhile.
    pub fn attempt_failed(&self, peer: NodeId, attempt: u64, reason: FailureReason) {
        let mut peers = write(&self.peers);
        if matches!(peers.get(&peer), Some(Slot::Pending { attempt: a }) if *a == attempt) {
            peers.insert(peer, Slot::Failed(reason.clone()));
            drop(peers);
            self.push_control(Event::PeerFailed { peer, reason });
        }
    }

    fn hello(&self, target: NodeId, local: &Local) -> Hello {
        Hello {
            node: self.node,
            target,
            incarnation: self.incarnation,
            regions: local
                .regions
                .iter()
                .map(|(id, (region, tag))| RegionEntry {
                    id: *id,
                    len: region.len(),
                    tag: tag.clone(),
                })
                .collect(),
        }
    }

    fn check_hello(&self, hello: &Hello, expected: Option<NodeId>) -> Result<()> {
        if hello.target != self.node {
            return Err(malformed(format!(
                "hello meant for node {}, this is node {}",
                hello.target, self.node
            )));
        }
        if hello.node == self.node {
            return Err(malformed("hello from our own node id"));
        }
        if let Some(expected) = expected {
            if hello.node != expected {
                return Err(malformed(format!(
                    "expected node {expected}, reached node {}",
                    hello.node
                )));
            }
        }
        Ok(())
    }

    fn new_link(&self, stream: S, hello: &Hello) -> Result<Arc<Link<S>>> {
        let now = self.now_ms();
        let fd = stream.as_raw_fd();
        let _ = stream.set_write_timeout_ms(Some(self.cfg.probe_timeout()));
        let mut remote = BTreeMap::new();
        for entry in &hello.regions {
            let desc = RegionDesc {
                node: hello.node,
                region: entry.id,
                len: entry.len,
            };
            self.hooks
                .remote_region_announced(hello.node, desc, &entry.tag)
                .map_err(malformed)?;
            remote.insert(entry.id, desc);
        }
        Ok(Arc::new(Link {
            peer: hello.node,
            incarnation: hello.incarnation,
            stream,
            fd,
            out: Mutex::new(Outbound::default()),
            out_wake: Condvar::new(),
            issue: Mutex::new(()),
            remote_regions: RwLock::new(remote),
            last_heard_ms: AtomicU64::new(now),
            waiting: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        }))
    }

    /// Starts the writer thread of `link`.
    fn spawn_writer(self: &Arc<Self>, link: &Arc<Link<S>>) -> Result<()> {
        let hub = Arc::clone(self);
        let l = Arc::clone(link);
        std::thread::Builder::new()
            .name(format!("spindle-w{}-{}", self.node, link.peer))
            .spawn(move || hub.writer_loop(&l))
            .map(|_| ())
            .map_err(|e| Error::io("spawning a writer thread", e))
    }

    /// Runs the initiator side on a freshly dialed stream for `attempt`, then becomes the
    /// link's reader thread. Returns when the link ends.
    pub fn run_initiator(self: Arc<Self>, peer: NodeId, attempt: u64, mut stream: S) {
        let result = (|| -> Result<Option<(Arc<Link<S>>, FrameReader)>> {
            stream
                .set_read_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)))
                .map_err(|e| Error::io("setting a read time-out", e))?;
            let hello = {
                let local = read(&self.local);
                self.hello(peer, &local)
            };
            let mut buf = Vec::new();
            encode_hello(&mut buf, &hello);
            let regions_sent: BTreeSet<RegionId> = hello.regions.iter().map(|e| e.id).collect();
            let _ = stream
                .set_write_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)));
            stream
                .write_all(&buf)
                .map_err(|e| Error::io("sending hello", e))?;
            let mut reader = FrameReader::new();
            let reply = reader.next_owned_hello(&mut stream)?;
            let Some(reply) = reply else {
                // Rejected (Goodbye): the peer keeps its own connection to us, which
                // replaces our attempt; give up on the peer if it never comes.
                let deadline = Instant::now() + Duration::from_millis(self.cfg.connect_timeout_ms);
                while Instant::now() < deadline && !self.is_closed() {
                    let pending = matches!(
                        read(&self.peers).get(&peer),
                        Some(Slot::Pending { attempt: a }) if *a == attempt
                    );
                    if !pending {
                        return Ok(None);
                    }
                    std::thread::sleep(REJECTED_POLL);
                }
                return Err(Error::io(
                    "handshake",
                    io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        "peer refused our link and did not link back",
                    ),
                ));
            };
            self.check_hello(&reply, Some(peer))?;
            stream
                .set_read_timeout_ms(None)
                .map_err(|e| Error::io("clearing the read time-out", e))?;
            let clone = stream
                .try_clone_stream()
                .map_err(|e| Error::io("cloning a stream", e))?;
            // Install, unless another link won meanwhile.
            let local = read(&self.local);
            let mut peers = write(&self.peers);
            let ours =
                matches!(peers.get(&peer), Some(Slot::Pending { attempt: a }) if *a == attempt);
            if !ours {
                drop(peers);
                drop(local);
                let mut bye = Vec::new();
                encode_goodbye(&mut bye);
                let _ = stream.write_all(&bye);
                stream.shutdown_both();
                return Ok(None);
            }
            let link = self.new_link(clone, &reply)?;
            // Regions that changed between our Hello and now.
            {
                let mut out = lock(&link.out);
                for (id, (region, tag)) in &local.regions {
                    if !regions_sent.contains(id) {
                        encode_region_announce(
                            &mut out.pending,
                            &RegionEntry {
                                id: *id,
                                len: region.len(),
                                tag: tag.clone(),
                            },
                        );
                    }
                }
                for id in &regions_sent {
                    if !local.regions.contains_key(id) {
                        encode_region_withdraw(&mut out.pending, *id);
                    }
                }
            }
            peers.insert(peer, Slot::Up(Arc::clone(&link)));
            drop(peers);
            drop(local);
            self.push_control(Event::PeerConnected { peer });
            Ok(Some((link, reader)))
        })();
        match result {
            Ok(Some((link, reader))) => {
                if let Err(e) = self.spawn_writer(&link) {
                    self.fail(&link, FailureReason::ConnectionLost(e.to_string()));
                    return;
                }
                self.try_flush(&link);
                self.reader_loop(&link, reader, stream);
            }
            Ok(None) => {}
            Err(e) => {
                let reason = match e {
                    Error::Malformed { detail, .. } => FailureReason::Malformed(detail),
                    other => FailureReason::ConnectionLost(other.to_string()),
                };
                self.attempt_failed(peer, attempt, reason);
            }
        }
    }

    /// Runs the acceptor side on an accepted stream, then becomes the link's reader
    /// thread. Streams whose first bytes are not a valid `Hello` for this node are
    /// dropped (no peer id is known, so no event). Returns when the link ends.
    #[allow(dead_code)] // tcp uses run_acceptor_then; shm may use either
    pub fn run_acceptor(self: Arc<Self>, stream: S) {
        self.run_acceptor_then(stream, || {});
    }

    /// As [`Hub::run_acceptor`], calling `handshake_done` once the handshake is over
    /// (accepted, rejected or failed), before the link's reader loop starts.
    pub fn run_acceptor_then(self: Arc<Self>, mut stream: S, handshake_done: impl FnOnce()) {
        if self.is_closed() {
            handshake_done();
            return;
        }
        let result = (|| -> Result<Option<(Arc<Link<S>>, FrameReader)>> {
            stream
                .set_read_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)))
                .map_err(|e| Error::io("setting a read time-out", e))?;
            let _ = stream
                .set_write_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)));
            let mut reader = FrameReader::new();
            let Some(hello) = reader.next_owned_hello(&mut stream)? else {
                return Ok(None);
            };
            self.check_hello(&hello, None)?;
            stream
                .set_read_timeout_ms(None)
                .map_err(|e| Error::io("clearing the read time-out", e))?;
            let peer = hello.node;
            let stale_deadline =
                Instant::now() + Duration::from_millis(self.cfg.connect_timeout_ms / 2);
            let (local, mut peers) = loop {
                let local = read(&self.local);
                let peers = write(&self.peers);
                // A live link to the same incarnation is either a duplicate from a
                // simultaneous connect (rejected below) or a link the peer already closed
                // and whose Goodbye or end of stream we have not processed yet (the peer
                // reconnecting right after a disconnect): give it a moment to fail.
                let same = matches!(
                    peers.get(&peer),
                    Some(Slot::Up(link)) if link.incarnation == hello.incarnation
                );
                if !same || Instant::now() >= stale_deadline || self.is_closed() {
                    break (local, peers);
                }
                drop(peers);
                drop(local);
                std::thread::sleep(REJECTED_POLL);
            };
            let mut old = None;
            let accept = match peers.get(&peer) {
                None | Some(Slot::Failed(_)) => {
                    let live = peers
                        .values()
                        .filter(|s| !matches!(s, Slot::Failed(_)))
                        .count();
                    live < PEERS_MAX
                }
                // Both sides dialed: keep the connection initiated by the lower id.
                Some(Slot::Pending { .. }) => peer < self.node,
                Some(Slot::Up(link)) if link.incarnation == hello.incarnation => false,
                Some(Slot::Up(link)) => {
                    old = Some(Arc::clone(link));
                    true
                }
            };
            if !accept {
                drop(peers);
                drop(local);
                let mut bye = Vec::new();
                encode_goodbye(&mut bye);
                let _ = stream.write_all(&bye);
                stream.shutdown_both();
                return Ok(None);
            }
            let link = self.new_link(
                stream
                    .try_clone_stream()
                    .map_err(|e| Error::io("cloning a stream", e))?,
                &hello,
            )?;
            // The reply Hello is the link's first frame: later announcements follow it.
            encode_hello(&mut lock(&link.out).pending, &self.hello(peer, &local));
            peers.insert(peer, Slot::Up(Arc::clone(&link)));
            drop(peers);
            drop(local);
            if let Some(old) = old {
                self.fail(&old, FailureReason::ConnectionLost("peer restarted".into()));
                // `fail` only marks the slot failed if it still holds `old`.
            }
            self.push_control(Event::PeerConnected { peer });
            Ok(Some((link, reader)))
        })();
        match result {
            Ok(Some((link, reader))) => {
                handshake_done();
                if let Err(e) = self.spawn_writer(&link) {
                    self.fail(&link, FailureReason::ConnectionLost(e.to_string()));
                    return;
                }
                self.try_flush(&link);
                self.reader_loop(&link, reader, stream);
            }
            Ok(None) => handshake_done(),
            Err(e) => {
                handshake_done();
                tracing::debug!(node = self.node, error = %e, "dropping an inbound stream");
                stream.shutdown_both();
            }
        }
    }

    /// Declares `link` failed (once): reports it, marks the slot, wakes its threads.
    fn fail(&self, link: &Link<S>, reason: FailureReason) {
        if link.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        let current = {
            let mut peers = write(&self.peers);
            match peers.get(&link.peer) {
                Some(Slot::Up(current)) if std::ptr::eq(Arc::as_ptr(current), link) => {
                    peers.insert(link.peer, Slot::Failed(reason.clone()));
                    true
                }
                _ => false,
            }
        };
        if current {
            // Not for a link already replaced by a newer one (peer restart): the hooks
            // hold the newer link's regions by then.
            self.hooks.remote_region_withdrawn(link.peer, None);
        }
        {
            let mut out = lock(&link.out);
            out.closed = true;
            if !out.drain_then_close {
                drop(out);
                link.stream.shutdown_both();
            }
        }
        link.out_wake.notify_all();
        self.events_space.notify_all();
        tracing::debug!(node = self.node, peer = link.peer, %reason, "link failed");
        self.push_control(Event::PeerFailed {
            peer: link.peer,
            reason,
        });
    }

    // ----- sending ------------------------------------------------------------------

    /// Appends a frame to `link`'s outbound buffer (within the bound unless `control`)
    /// and sends if the socket is free.
    fn enqueue(
        &self,
        link: &Link<S>,
        frame_bytes: usize,
        control: bool,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        {
            let mut out = lock(&link.out);
            if link.failed.load(Ordering::Acquire) || out.closed {
                drop(out);
                return Err(self
                    .link(link.peer)
                    .err()
                    .unwrap_or(Error::NotConnected { peer: link.peer }));
            }
            if !control && out.queued_bytes() + frame_bytes > self.cfg.outbound_bytes_max {
                return Err(Error::QueueFull { peer: link.peer });
            }
            encode(&mut out.pending);
            if out.flushing {
                return Ok(());
            }
        }
        self.try_flush(link);
        Ok(())
    }

    /// Queues a frame made of `head` and `payload`. A large payload meeting an idle link
    /// goes to the socket straight from the caller's slice (no copy into the queue);
    /// otherwise as [`Hub::enqueue`].
    /// `bounded`: subject to [`FabricConfig::outbound_bytes_max`] (the later frames of a
    /// split write are not, so a write whose first frame was accepted is queued whole: the
    /// queue may exceed the bound by at most one write).
    fn enqueue_payload(
        &self,
        link: &Link<S>,
        head: &[u8],
        payload: &[u8],
        bounded: bool,
    ) -> Result<()> {
        let frame_bytes = head.len() + payload.len();
        if payload.len() < DIRECT_SEND_BYTES_MIN {
            return self.enqueue(link, frame_bytes, !bounded, |out| {
                out.extend_from_slice(head);
                out.extend_from_slice(payload);
            });
        }
        {
            let mut out = lock(&link.out);
            if link.failed.load(Ordering::Acquire) || out.closed {
                drop(out);
                return Err(self
                    .link(link.peer)
                    .err()
                    .unwrap_or(Error::NotConnected { peer: link.peer }));
            }
            if bounded && out.queued_bytes() + frame_bytes > self.cfg.outbound_bytes_max {
                return Err(Error::QueueFull { peer: link.peer });
            }
            if out.flushing || !out.pending.is_empty() {
                out.pending.extend_from_slice(head);
                out.pending.extend_from_slice(payload);
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
                    rest.extend_from_slice(payload);
                } else {
                    rest.extend_from_slice(&payload[n - head.len()..]);
                }
                out.inflight = Some((rest, 0));
                drop(out);
                link.out_wake.notify_all();
            }
            Err(e) => {
                out.flushing = false;
                drop(out);
                link.out_wake.notify_all();
                self.fail(link, FailureReason::ConnectionLost(e.to_string()));
            }
        }
        Ok(())
    }

    /// Sends the outbound buffer from the calling thread, without blocking; hands it to
    /// the writer thread when the socket is full.
    fn try_flush(&self, link: &Link<S>) {
        let mut out = lock(&link.out);
        if out.flushing || out.pending.is_empty() || out.closed {
            return;
        }
        out.flushing = true;
        for _ in 0..CALLER_FLUSH_ROUNDS_MAX {
            let spare = std::mem::take(&mut out.spare);
            let buf = std::mem::replace(&mut out.pending, spare);
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
                    self.fail(link, FailureReason::ConnectionLost(e.to_string()));
                    return;
                }
            }
        }
        // Others keep queuing: let the writer thread carry on.
        let spare = std::mem::take(&mut out.spare);
        let buf = std::mem::replace(&mut out.pending, spare);
        out.inflight = Some((buf, 0));
        drop(out);
        link.out_wake.notify_all();
    }

    fn writer_loop(&self, link: &Link<S>) {
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
                            drop(out);
                            link.stream.shutdown_both();
                            return;
                        }
                        out.flushing = true;
                        let spare = std::mem::take(&mut out.spare);
                        let buf = std::mem::replace(&mut out.pending, spare);
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
            let keep_going = || !lock(&link.out).closed;
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
                self.fail(link, FailureReason::ConnectionLost(e.to_string()));
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
                let spare = std::mem::take(&mut out.spare);
                let next = std::mem::replace(&mut out.pending, spare);
                out.inflight = Some((next, 0));
            }
        }
    }

    fn remote_desc(&self, link: &Link<S>, region: RegionId) -> Result<RegionDesc> {
        read(&link.remote_regions)
            .get(&region)
            .copied()
            .ok_or(Error::UnknownRegion {
                node: link.peer,
                region,
            })
    }

    fn check_write(desc: &RegionDesc, offset: usize, len: usize) -> Result<()> {
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

    fn check_guard(desc: &RegionDesc, guard_offset: usize) -> Result<()> {
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
        if self.hooks.remote_write(peer, desc, offset, bytes, None)? == RemoteWrite::Done {
            return Ok(());
        }
        self.enqueue_write(&link, region, offset, bytes, None)
    }

    /// Queues a write as one frame, or as several (see [`WRITE_FRAME_PAYLOAD_BYTES_MAX`]).
    fn enqueue_write(
        &self,
        link: &Link<S>,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        let _issue = lock(&link.issue);
        let mut at = 0;
        loop {
            let abs = offset + at;
            let frame_end =
                (abs / WRITE_FRAME_PAYLOAD_BYTES_MAX + 1) * WRITE_FRAME_PAYLOAD_BYTES_MAX;
            let n = (frame_end - abs).min(bytes.len() - at);
            let last = at + n == bytes.len();
            let head = Head::write(region, abs, if last { guard } else { None }, n);
            self.enqueue_payload(link, head.as_slice(), &bytes[at..at + n], at == 0)?;
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
        if self.hooks.remote_write(peer, desc, offset, bytes, guard)? == RemoteWrite::Done {
            return Ok(());
        }
        self.enqueue_write(&link, region, offset, bytes, guard)
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
        self.enqueue_payload(&link, head.as_slice(), bytes, true)
    }

    /// The descriptor of `peer`'s region `id`.
    pub fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        let link = self.link(peer).ok()?;
        let desc = read(&link.remote_regions).get(&id).copied();
        desc
    }

    // ----- regions ------------------------------------------------------------------

    /// Registers and announces a region (see [`crate::Endpoint::register_region`]).
    pub fn register_region(&self, id: RegionId, len_bytes: usize) -> Result<Region> {
        self.check_open()?;
        crate::check_region_len(len_bytes)?;
        let mut local = write(&self.local);
        if local.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        if local.regions.len() >= REGIONS_PER_ENDPOINT_MAX {
            return Err(Error::TooLarge {
                what: "region table",
                len: local.regions.len() + 1,
                max: REGIONS_PER_ENDPOINT_MAX,
            });
        }
        let (region, tag) = self
            .hooks
            .make_region(id, crate::round_up_to_words(len_bytes))?;
        if tag.len() > REGION_TAG_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "region tag",
                len: tag.len(),
                max: REGION_TAG_BYTES_MAX,
            });
        }
        let entry = RegionEntry {
            id,
            len: region.len(),
            tag,
        };
        local.withdrawn.remove(&id);
        local
            .regions
            .insert(id, (region.clone(), entry.tag.clone()));
        let links: Vec<Arc<Link<S>>> = read(&self.peers)
            .values()
            .filter_map(|s| match s {
                Slot::Up(l) => Some(Arc::clone(l)),
                _ => None,
            })
            .collect();
        for link in links {
            let _ = self.enqueue(&link, 0, true, |out| encode_region_announce(out, &entry));
        }
        Ok(region)
    }

    /// Withdraws a region (see [`crate::Endpoint::deregister_region`]).
    pub fn deregister_region(&self, id: RegionId) -> Result<()> {
        self.check_open()?;
        let mut local = write(&self.local);
        if local.regions.remove(&id).is_none() {
            return Err(Error::UnknownRegion {
                node: self.node,
                region: id,
            });
        }
        local.withdrawn.insert(id);
        let links: Vec<Arc<Link<S>>> = read(&self.peers)
            .values()
            .filter_map(|s| match s {
                Slot::Up(l) => Some(Arc::clone(l)),
                _ => None,
            })
            .collect();
        for link in links {
            let _ = self.enqueue(&link, 0, true, |out| encode_region_withdraw(out, id));
        }
        drop(local);
        self.hooks.region_dropped(id);
        Ok(())
    }

    // ----- closing ------------------------------------------------------------------

    /// Sends `Goodbye` to `link`, drains what is queued, then closes it.
    fn say_goodbye(&self, link: &Link<S>) {
        {
            let mut out = lock(&link.out);
            if !out.closed {
                encode_goodbye(&mut out.pending);
                out.drain_then_close = true;
            }
        }
        link.out_wake.notify_all();
        self.fail(link, FailureReason::LocalClose);
    }

    /// Closes the link to `peer` gracefully (see [`crate::Endpoint::disconnect`]).
    pub fn disconnect(&self, peer: NodeId) -> Result<()> {
        self.check_open()?;
        let mut peers = write(&self.peers);
        match peers.get(&peer) {
            Some(Slot::Up(link)) => {
                let link = Arc::clone(link);
                drop(peers);
                self.say_goodbye(&link);
                Ok(())
            }
            Some(Slot::Pending { .. }) => {
                peers.insert(peer, Slot::Failed(FailureReason::LocalClose));
                Ok(())
            }
            Some(Slot::Failed(_)) => Ok(()),
            None => Err(Error::NotConnected { peer }),
        }
    }

    /// Closes every link and stops the hub's threads (see [`crate::Endpoint::close`]).
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let links: Vec<Arc<Link<S>>> = write(&self.peers)
            .values()
            .filter_map(|s| match s {
                Slot::Up(l) => Some(Arc::clone(l)),
                _ => None,
            })
            .collect();
        for link in links {
            self.say_goodbye(&link);
        }
        self.events_space.notify_all();
        self.doorbell.ring();
    }

    // ----- receiving ----------------------------------------------------------------

    fn reader_loop(&self, link: &Arc<Link<S>>, mut reader: FrameReader, mut stream: S) {
        let reason = loop {
            match reader.step(|frame| self.apply(link, frame)) {
                Ok(Step::Applied) => self.doorbell.ring(),
                Ok(Step::NeedRead { needed }) => {
                    // Silence is judged only while we wait on the socket: time spent
                    // applying a large frame or waiting for event-queue room is ours.
                    link.last_heard_ms.store(self.now_ms(), Ordering::Release);
                    link.waiting.store(true, Ordering::Release);
                    let got = reader.fill(&mut stream, needed);
                    link.waiting.store(false, Ordering::Release);
                    link.last_heard_ms.store(self.now_ms(), Ordering::Release);
                    match got {
                        Ok(0) => break FailureReason::ConnectionLost("end of stream".into()),
                        Ok(_) => {}
                        Err(e) => break FailureReason::ConnectionLost(e.to_string()),
                    }
                }
                Ok(Step::Goodbye) => break FailureReason::Closed,
                Err(Error::Malformed { detail, .. }) => break FailureReason::Malformed(detail),
                Err(Error::Closed) => break FailureReason::LocalClose,
                Err(e) => break FailureReason::ConnectionLost(e.to_string()),
            }
        };
        self.doorbell.ring();
        if matches!(reason, FailureReason::Malformed(_)) {
            tracing::warn!(node = self.node, peer = link.peer, %reason, "disconnecting peer");
        }
        self.fail(link, reason);
    }

    /// Applies one frame from `link`'s peer. `Ok(false)`: a Goodbye.
    fn apply(&self, link: &Link<S>, frame: Frame<'_>) -> Result<bool> {
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
        }
        Ok(true)
    }

    fn apply_write(
        &self,
        link: &Link<S>,
        id: RegionId,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        let local = read(&self.local);
        let Some((region, _)) = local.regions.get(&id) else {
            if local.withdrawn.contains(&id) {
                return Ok(()); // raced with our withdrawal: dropped, as documented
            }
            return Err(malformed(format!("write to unknown region {id}")));
        };
        let bad = |what: &str| {
            malformed(format!(
                "{what} out of bounds of region {id} ({} bytes)",
                region.len()
            ))
        };
        if region.check_range(offset, bytes.len()).is_err() {
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
        let region = region.clone();
        drop(local);
        self.hooks
            .apply_write(link.peer, &region, offset, bytes, guard)
    }
}

fn probe_loop<S: LinkStream>(hub: std::sync::Weak<Hub<S>>) {
    loop {
        let Some(h) = hub.upgrade() else { return };
        if h.is_closed() {
            return;
        }
        let interval = h.cfg.probe_interval();
        let links: Vec<Arc<Link<S>>> = read(&h.peers)
            .values()
            .filter_map(|s| match s {
                Slot::Up(l) => Some(Arc::clone(l)),
                _ => None,
            })
            .collect();
        for link in links {
            let idle = {
                let out = lock(&link.out);
                out.pending.is_empty() && !out.flushing
            };
            if idle {
                let _ = h.enqueue(&link, 0, true, encode_probe);
            }
            // `waiting` first: its release store follows the `last_heard_ms` store made
            // when the read began, so a reader seen waiting has a fresh `last_heard_ms`.
            let waiting = link.waiting.load(Ordering::Acquire);
            let heard = link.last_heard_ms.load(Ordering::Acquire);
            let silent_ms = h.now_ms().saturating_sub(heard);
            if waiting && silent_ms > h.cfg.probe_timeout_ms {
                h.fail(&link, FailureReason::ProbeTimeout { silent_ms });
            }
        }
        drop(h);
        std::thread::sleep(interval);
    }
}
