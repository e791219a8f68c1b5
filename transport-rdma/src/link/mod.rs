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
//! ## Modules
//!
//! This file owns the [`Hub`] (peer table, events, regions, failing and closing links,
//! probes) and the backend interface ([`LinkStream`], [`LinkHooks`]). The rest is split by
//! responsibility: `frame` (the codec, sans-IO, fuzzed), `handshake` (the hello and the
//! acceptor's decision, sans-IO), `connect` (the initiator and acceptor drivers),
//! `outbound` (queues, batching, send syscalls, the writer thread) and `inbound` (the
//! reader thread and frame dispatch).
//!
//! ## Wire format
//!
//! Every frame is `body_len: u32 LE, kind: u8, body`; integers are little endian. See
//! `frame::Frame` for the bodies. Every length is checked against the crate's `*_MAX` bounds
//! and every write against the target region before anything is applied; a peer whose
//! bytes do not decode is disconnected with [`FailureReason::Malformed`].
//!
//! ## Handshake and simultaneous connects
//!
//! With a [`FabricConfig::domain_secret`], both sides first run the Noise handshake of
//! [`crate::trust`] (the dialer proves the secret, the acceptor proves it back, the dialer
//! confirms): a peer that fails is refused before anything below happens, and the `Hello`
//! must name the node ids the handshake authenticated. With encryption on (tcp), every
//! byte after the handshake travels in sealed records (`Outbound`'s queue holds them
//! sealed; the reader opens them before decoding frames).
//!
//! The initiator sends `Hello` (its node id, the node id it expects to reach, its
//! incarnation and its region table). The acceptor decides, under the peer-table lock:
//! with no link (or a failed one) it accepts; with its own attempt to the same peer in
//! flight it accepts only if the initiator has the lower node id (the connection
//! initiated by the lower node id is the one kept, on both sides), and only from the
//! incarnation that answered that attempt's `Hello` with a refusal (waiting up to half
//! the connect time-out for the answer; taking the hello if none comes): node ids are
//! claims, and the endpoint at the address we dialed is the peer, so another process
//! claiming its id never takes the place of our dial (its link's end would report the
//! live peer failed); with a live link to the same incarnation it rejects (after giving
//! that link up to half the connect time-out to fail: the peer may be re-dialing right
//! after closing it, its Goodbye still in flight); with a live link to another
//! incarnation it waits the same way (a restarted peer's old link fails as soon as the
//! dead process's socket closes) and then refuses: a second process claiming a live
//! peer's id never displaces it. Accepting means replying with its own `Hello`;
//! rejecting means `Refused` (carrying the acceptor's incarnation, and whether it holds a
//! live link to the dialer's id: then the dialer gives up at once). Both sides report
//! [`Event::PeerConnected`] once the link is installed, with the peer's regions already
//! known.
//!
//! ## Threads, queues and backpressure
//!
//! Per link: a reader thread decodes frames into a reusable buffer and applies writes in
//! order (through [`LinkHooks::apply_write`]; it polls the socket before it blocks while
//! recent waits were short, `inbound::ReadSpin`), and a writer thread that only works when
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
//! link, feeds each link's [`crate::detector::Detector`] with the latest arrival, and
//! fails a link whose silence exceeds the detector's bound; it first sends the peer an
//! `Excluded` frame saying so (the peer, should it wake, fails the link with
//! [`FailureReason::Excluded`]). Silence is forgiven when the probe thread's own tick
//! came late (this process was stopped or starved: on one overloaded machine the peer
//! starves too), while the reader is busy, and while bytes wait unread in the socket.
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

mod connect;
mod frame;
mod handshake;
mod inbound;
mod outbound;

pub use frame::{decode_all, REGION_TAG_BYTES_MAX};
use frame::{
    encode_excluded, encode_goodbye, encode_probe, encode_region_announce, encode_region_withdraw,
    RegionEntry,
};
use outbound::Outbound;

use crate::detector::{stall_us, Detector, DetectorConfig, StallLog, Verdict};
use crate::peers::{check_not_self, LinkState, PeerEntry, PeerTable};
use crate::{
    Doorbell, Error, Event, FabricConfig, FailureReason, LocalRange, NodeId, Region, RegionDesc,
    RegionId, Result, EVENT_QUEUE_MAX, REGIONS_PER_ENDPOINT_MAX,
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

    /// Whether links may be encrypted after the handshake (when a domain secret is set
    /// and [`FabricConfig::encrypt_links`] is on). Default: yes (tcp). shm says no: its
    /// writes go straight into mapped memory, which a cipher on the stream would not cover.
    fn may_encrypt(&self) -> bool {
        true
    }

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
    /// bounds (and the guard for alignment and bounds). `corked`: the calling thread
    /// corks the hub ([`Hub::cork`]), so what the write signals to the peer (shm's
    /// doorbell ring) may be held for [`LinkHooks::flush_held`]. Default: frame it.
    fn remote_write(
        &self,
        _peer: NodeId,
        _desc: RegionDesc,
        _offset: usize,
        _bytes: &[u8],
        _guard: Option<(usize, u64)>,
        _corked: bool,
    ) -> Result<RemoteWrite> {
        Ok(RemoteWrite::Framed)
    }

    /// An outgoing [`crate::Endpoint::write_from`], checked as for
    /// [`LinkHooks::remote_write`] (and the local range against its region). Default:
    /// frame it (from a scratch copy of the range).
    fn remote_write_from(
        &self,
        _peer: NodeId,
        _desc: RegionDesc,
        _offset: usize,
        _from: LocalRange<'_>,
        _guard: Option<(usize, u64)>,
        _corked: bool,
    ) -> Result<RemoteWrite> {
        Ok(RemoteWrite::Framed)
    }

    /// Lets go of what writes made under a cork held back (shm: the peers' doorbell
    /// rings), as the hub sends its held frames: called at every thread's outermost
    /// [`Hub::uncork`]. A corking thread busy elsewhere delays nothing past a probe
    /// interval: every tick sends each peer a frame, whose arrival rings its doorbell.
    /// Default: nothing is held.
    fn flush_held(&self) {}

    /// Applies a `Write`/`WriteRelease` frame from `peer` to local `region`, already
    /// checked against its bounds (and the guard for alignment and bounds). Called from
    /// that peer's reader thread, in frame order. Default: copy, then release-store the
    /// guard. shm never frames writes, so it may keep the default. A `WriteRelease` whose
    /// payload is 64 KiB or more, on a plaintext link, does not come here: the reader
    /// takes its payload from the socket straight into the region and then releases the
    /// guard, as this default would.
    fn apply_write(
        &self,
        _peer: NodeId,
        region: &Region,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        region.apply_write(offset, bytes, guard)
    }
}

/// The [`crate::Endpoint`] methods a hub-backed backend (tcp, shm) forwards to its hub
/// (`self.hub: Arc<Hub<_>>`) as they are; each backend writes the rest (its address,
/// how it dials, parks and closes). Expands inside `impl Endpoint for …`.
macro_rules! forward_to_hub {
    () => {
        fn node(&self) -> $crate::NodeId {
            self.hub.node()
        }

        fn disconnect(&self, peer: $crate::NodeId) -> $crate::Result<()> {
            self.hub.disconnect(peer)
        }

        fn peers(&self) -> Vec<$crate::NodeId> {
            self.hub.peers()
        }

        fn register_region(
            &self,
            id: $crate::RegionId,
            len_bytes: usize,
        ) -> $crate::Result<$crate::Region> {
            self.hub.register_region(id, len_bytes)
        }

        fn deregister_region(&self, id: $crate::RegionId) -> $crate::Result<()> {
            self.hub.deregister_region(id)
        }

        fn remote_region(
            &self,
            peer: $crate::NodeId,
            id: $crate::RegionId,
        ) -> Option<$crate::RegionDesc> {
            self.hub.remote_region(peer, id)
        }

        fn write(
            &self,
            peer: $crate::NodeId,
            region: $crate::RegionId,
            offset: usize,
            bytes: &[u8],
        ) -> $crate::Result<()> {
            self.hub.write(peer, region, offset, bytes)
        }

        fn write_then_release(
            &self,
            peer: $crate::NodeId,
            region: $crate::RegionId,
            offset: usize,
            bytes: &[u8],
            guard_offset: usize,
            guard_value: u64,
        ) -> $crate::Result<()> {
            self.hub
                .write_then_release(peer, region, offset, bytes, guard_offset, guard_value)
        }

        fn write_from(
            &self,
            peer: $crate::NodeId,
            region: $crate::RegionId,
            offset: usize,
            from: $crate::LocalRange<'_>,
            guard: Option<(usize, u64)>,
        ) -> $crate::Result<()> {
            self.hub.write_from(peer, region, offset, from, guard)
        }

        fn send(&self, peer: $crate::NodeId, imm: u32, bytes: &[u8]) -> $crate::Result<()> {
            self.hub.send(peer, imm, bytes)
        }

        fn poll_event(&self) -> Option<$crate::Event> {
            self.hub.poll_event()
        }

        fn cork(&self) {
            self.hub.cork();
        }

        // The outermost uncork also lets the hooks go of what they held (shm's doorbell
        // rings: `LinkHooks::flush_held`).
        fn uncork(&self) {
            self.hub.uncork();
        }

        fn wake(&self) {
            self.hub.doorbell().ring();
        }

        fn stall_ms(&self, within: std::time::Duration) -> Option<u64> {
            self.hub.stall_ms(within)
        }
    };
}
pub(crate) use forward_to_hub;

/// The tcp behaviour: every hook at its default.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultHooks;

impl LinkHooks for DefaultHooks {}

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

/// One live connection to a peer.
struct Link<S: LinkStream> {
    /// Unique among the hub's links and attempts (from its [`PeerTable`]).
    id: u64,
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
    /// The peer's failure detector (only the probe thread uses it).
    detector: Mutex<Detector>,
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

/// A peer's entry in the hub's [`PeerTable`].
enum Slot<S: LinkStream> {
    /// Our own connection attempt is in flight.
    Pending {
        attempt: u64,
        /// The incarnation of the peer that refused the attempt (it dials us instead), once
        /// it did: only its hello takes the attempt's place.
        refused_by: Option<u64>,
    },
    Up(Arc<Link<S>>),
    Failed(FailureReason),
}

impl<S: LinkStream> PeerEntry for Slot<S> {
    fn state(&self) -> LinkState {
        match self {
            Slot::Pending { .. } => LinkState::Dialing,
            Slot::Up(_) => LinkState::Up,
            Slot::Failed(_) => LinkState::Down,
        }
    }
    fn link_id(&self) -> u64 {
        match self {
            Slot::Pending { attempt, .. } => *attempt,
            Slot::Up(link) => link.id,
            // Never current: `PeerTable` ids start at 1 and a failed slot is down anyway.
            Slot::Failed(_) => 0,
        }
    }
    fn set_down(&mut self, reason: &FailureReason) {
        *self = Slot::Failed(reason.clone());
    }
}

/// The live links of `peers`.
fn up_links<S: LinkStream>(peers: &PeerTable<Slot<S>>) -> Vec<Arc<Link<S>>> {
    peers
        .iter()
        .filter_map(|(_, s)| match s {
            Slot::Up(l) => Some(Arc::clone(l)),
            _ => None,
        })
        .collect()
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
    detector_cfg: DetectorConfig,
    hooks: Arc<dyn LinkHooks>,
    start: Instant,
    local: RwLock<Local>,
    peers: RwLock<PeerTable<Slot<S>>>,
    events: Mutex<VecDeque<Event>>,
    events_space: Condvar,
    doorbell: Doorbell,
    closed: AtomicBool,
    /// Links refused by the handshake, and when one was last logged.
    refusals: Refusals,
    /// A frame was held by a cork: the corking thread's outermost [`Hub::uncork`]
    /// flushes the links.
    held: AtomicBool,
    /// This process's stalls, from the probe thread's ticks.
    stalls: Mutex<StallLog>,
}

/// Least time between two log lines about refused links: an outsider retrying in a
/// loop costs one line per interval, with the count of those not logged.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The count of refused links and the rate limit of their log lines.
#[derive(Debug, Default)]
struct Refusals {
    count: AtomicU64,
    /// When the last line was logged, and refusals since then not logged.
    log: Mutex<(Option<Instant>, u64)>,
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
            detector_cfg: DetectorConfig::from_fabric(&cfg),
            cfg,
            hooks,
            start: Instant::now(),
            local: RwLock::new(Local {
                regions: BTreeMap::new(),
                withdrawn: BTreeSet::new(),
            }),
            peers: RwLock::new(PeerTable::default()),
            events: Mutex::new(VecDeque::new()),
            events_space: Condvar::new(),
            doorbell: Doorbell::new(),
            closed: AtomicBool::new(false),
            refusals: Refusals::default(),
            held: AtomicBool::new(false),
            stalls: Mutex::new(StallLog::default()),
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

    /// How many inbound or outbound links the handshake refused (a peer that did not
    /// prove the domain secret, or that claimed a live peer's node id).
    pub fn refused_links(&self) -> u64 {
        self.refusals.count.load(Ordering::Relaxed)
    }

    /// Whether links are encrypted after the handshake.
    fn encrypts(&self) -> bool {
        self.cfg.domain_secret.is_some() && self.cfg.encrypt_links && self.hooks.may_encrypt()
    }

    /// Counts a refused link and logs it, at most once per [`REFUSAL_LOG_INTERVAL`]
    /// (never the secret: `why` is the handshake's error).
    fn refused(&self, why: &dyn std::fmt::Display) {
        self.refusals.count.fetch_add(1, Ordering::Relaxed);
        let mut log = lock(&self.refusals.log);
        let now = Instant::now();
        match log.0 {
            Some(at) if now.duration_since(at) < REFUSAL_LOG_INTERVAL => log.1 += 1,
            _ => {
                let not_logged = log.1;
                *log = (Some(now), 0);
                drop(log);
                tracing::warn!(node = self.node, %why, not_logged, "refused a link");
            }
        }
    }

    /// True once [`Hub::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// See [`crate::Endpoint::stall_ms`]: a stall past the suspicion floor.
    pub fn stall_ms(&self, within: Duration) -> Option<u64> {
        let within_us = within.as_micros().min(u128::from(u64::MAX)) as u64;
        let interval_us = self.cfg.probe_interval_ms.saturating_mul(1000);
        lock(&self.stalls)
            .stall_us(
                self.now_us(),
                within_us,
                interval_us,
                self.detector_cfg.floor_us,
            )
            .map(|us| us / 1000)
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
        match read(&self.peers).get(peer) {
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
        read(&self.peers).in_states(&[LinkState::Up])
    }

    /// Registers interest in a link to `peer`. `Ok(Some(attempt))`: the caller must dial
    /// and then call [`Hub::run_initiator`] or [`Hub::attempt_failed`] with that attempt.
    /// `Ok(None)`: a link exists or is being made (idempotent).
    pub fn begin_connect(&self, peer: NodeId) -> Result<Option<u64>> {
        self.check_open()?;
        check_not_self(self.node, peer)?;
        write(&self.peers).begin_dial(peer, |attempt| Slot::Pending {
            attempt,
            refused_by: None,
        })
    }

    /// Dialing for `attempt` failed: the peer is reported failed unless another link to
    /// it came up meanwhile.
    pub fn attempt_failed(&self, peer: NodeId, attempt: u64, reason: FailureReason) {
        let mut peers = write(&self.peers);
        if peers.mark_down(peer, attempt, &reason).is_some() {
            drop(peers);
            self.push_control(Event::PeerFailed { peer, reason });
        }
    }

    /// Declares `link` failed (once): reports it, marks the slot, wakes its threads.
    fn fail(&self, link: &Link<S>, reason: FailureReason) {
        if link.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Only the slot still holding this link is marked (ids are unique per table).
        let current = write(&self.peers)
            .mark_down(link.peer, link.id, &reason)
            .is_some();
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
        let links: Vec<Arc<Link<S>>> = up_links(&read(&self.peers));
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
        let links: Vec<Arc<Link<S>>> = up_links(&read(&self.peers));
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
                out.append(encode_goodbye);
                out.drain_then_close = true;
            }
        }
        link.out_wake.notify_all();
        self.fail(link, FailureReason::LocalClose);
    }

    /// Declares `link`'s silent peer failed, telling it why in a last frame it reads if
    /// it ever wakes up (best effort: a peer that stopped reading may never get it).
    fn exclude(&self, link: &Link<S>, silent_ms: u64) {
        {
            let mut out = lock(&link.out);
            if !out.closed {
                out.append(|p| encode_excluded(p, silent_ms));
                out.drain_then_close = true;
                out.drain_until = Some(Instant::now() + outbound::EXCLUDED_LINGER);
            }
        }
        link.out_wake.notify_all();
        self.fail(link, FailureReason::ProbeTimeout { silent_ms });
    }

    /// Closes the link to `peer` gracefully (see [`crate::Endpoint::disconnect`]).
    pub fn disconnect(&self, peer: NodeId) -> Result<()> {
        self.check_open()?;
        let mut peers = write(&self.peers);
        match peers.get(peer) {
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
        let links: Vec<Arc<Link<S>>> = up_links(&write(&self.peers));
        for link in links {
            self.say_goodbye(&link);
        }
        self.events_space.notify_all();
        self.doorbell.ring();
    }
}

/// True if bytes wait unread in the socket `fd` (our reader is behind, so the peer is
/// not silent however long ago we last read from it).
pub(crate) fn readable(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd on our stack for the duration of the call, and a
    // zero time-out makes `poll` return at once; a closed fd only yields POLLNVAL.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

fn probe_loop<S: LinkStream>(hub: std::sync::Weak<Hub<S>>) {
    loop {
        let Some(h) = hub.upgrade() else { return };
        if h.is_closed() {
            return;
        }
        let interval = h.cfg.probe_interval();
        let now_us = h.now_us();
        // A tick that comes late means this process was stopped or starved: every peer
        // looks silent at once, and none of it is evidence against them.
        let interval_us = h.cfg.probe_interval_ms.saturating_mul(1000);
        let late_us = lock(&h.stalls).tick(now_us, interval_us, h.detector_cfg.floor_us);
        let stalled = late_us > stall_us(&h.detector_cfg);
        let links: Vec<Arc<Link<S>>> = up_links(&read(&h.peers));
        for link in links {
            let (flushing, empty) = {
                let out = lock(&link.out);
                (out.flushing, out.pending.is_empty())
            };
            if !flushing {
                if empty {
                    let _ = h.enqueue(&link, 0, true, encode_probe);
                } else {
                    // Frames nobody is sending: a corking thread holds them (and may be
                    // busy for a while before its uncork). A tick sends them; they say
                    // the peer is alive as a probe would.
                    h.try_flush(&link);
                }
            }
            // `waiting` first: its release store follows the `last_heard_ms` store made
            // when the read began, so a reader seen waiting has a fresh `last_heard_ms`.
            let waiting = link.waiting.load(Ordering::Acquire);
            let heard_us = link
                .last_heard_ms
                .load(Ordering::Acquire)
                .saturating_mul(1000);
            let mut detector = lock(&link.detector);
            detector.heard(heard_us);
            // Silence counts only while the reader waits on the socket with nothing
            // unread in it: time spent applying frames or starved of CPU is ours.
            // On one overloaded box every process starves at once: a late tick of ours
            // says the peer's silence may be the machine's, so all of it is forgiven.
            if stalled || !waiting {
                detector.forgive(now_us);
                continue;
            }
            if let Verdict::Suspect {
                silent_us,
                timeout_us,
            } = detector.check(now_us)
            {
                if readable(link.fd) {
                    detector.forgive(now_us);
                    continue;
                }
                drop(detector);
                let silent_ms = silent_us / 1000;
                tracing::info!(
                    node = h.node,
                    peer = link.peer,
                    silent_ms,
                    timeout_ms = timeout_us / 1000,
                    "suspecting a silent peer"
                );
                h.exclude(&link, silent_ms);
            }
        }
        drop(h);
        std::thread::sleep(interval);
    }
}
