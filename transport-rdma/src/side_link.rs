//! The link machinery the libfabric and verbs backends share, generic over the
//! backend-specific steps ([`SideBackend`]).
//!
//! Both backends set each peer link up over a TCP side channel (`side_channel.rs`) and
//! move data with fabric operations. This module owns everything around that which is
//! the same for both: the peer table ([`crate::peers::PeerTable`] of [`SidePeer`]s) and
//! its connect / dial / accept / tie-break steps, the side-channel reader thread (region
//! tables, readiness, probes, goodbyes), the probe-based failure detector, failing a link
//! exactly once ([`SideLinks::fail_peer`]: one [`Event::PeerFailed`] per link), per-peer
//! queues of outbound operations and their issue loop, send chunking and reassembly, the
//! event queue, and the [`crate::Endpoint`] calls that are pure bookkeeping. A backend
//! supplies the fabric: the hello it sends, how a link's fabric resources are made and
//! torn down, how a region is described, and how one operation is posted.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::detector::{monotonic_us, stall_us, Detector, DetectorConfig, StallLog, Verdict};
use crate::peers::{check_not_self, LinkState, PeerEntry, PeerTable};
use crate::side_channel::{
    frame, lock, u32_at, u64_at, FrameReader, KIND_BYE, KIND_EXCLUDED, KIND_HELLO, KIND_HELLO_ACK,
    KIND_PROBE, KIND_READY, KIND_REGION, KIND_REJECT, KIND_WITHDRAW, REJECTED,
};
use crate::trust::{
    read_framed, AcceptorHandshake, InitiatorHandshake, HANDSHAKE_MESSAGE_BYTES_MAX,
};
use crate::{
    check_region_len, Doorbell, Error, Event, FabricConfig, FailureReason, NodeId, RegionDesc,
    RegionId, Result, EVENT_QUEUE_MAX, REGIONS_PER_ENDPOINT_MAX, SEND_BYTES_MAX, WORD_BYTES,
    WRITE_BYTES_MAX,
};

/// Largest fabric operation (one write chunk, one send chunk with its header), in bytes.
pub(crate) const CHUNK_BYTES_MAX: usize = 64 << 10;
/// Bytes of the header in front of every send chunk: magic, source node, immediate,
/// total length, offset (five `u32` LE).
pub(crate) const SEND_HEADER_BYTES: usize = 20;
/// How long a reader thread sleeps while the owner's event queue is full.
const BACKPRESSURE_PARK: Duration = Duration::from_millis(1);
/// How often a rejected dialer checks whether the peer's own link has arrived.
const REJECTED_POLL: Duration = Duration::from_millis(2);
/// How long the accept thread sleeps when no connection is waiting.
const ACCEPT_IDLE_PARK: Duration = Duration::from_millis(5);
/// How long the accept thread backs off after an accept error.
const ACCEPT_ERROR_PARK: Duration = Duration::from_millis(50);

const _: () = assert!(CHUNK_BYTES_MAX % WORD_BYTES == 0);
const _: () = assert!(SEND_BYTES_MAX <= u32::MAX as usize);

/// One outbound operation, queued per peer until a staging slot and the window allow it.
#[derive(Debug)]
pub(crate) enum Op {
    /// A one-sided write of at most [`CHUNK_BYTES_MAX`] bytes.
    Write {
        /// Target address in the peer's region (as the peer announced it).
        remote_addr: u64,
        /// The region's remote key.
        key: u64,
        /// The bytes.
        bytes: Vec<u8>,
        /// The last chunk of a write call (verbs: carries an immediate so the owner's
        /// doorbell rings).
        #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
        notify: bool,
    },
    /// One send chunk, header included.
    Send {
        /// The immediate.
        imm: u32,
        /// Header and body.
        chunk: Vec<u8>,
    },
}

impl Op {
    /// Bytes the operation moves (what counts against the outbound bound).
    pub(crate) fn len(&self) -> usize {
        match self {
            Op::Write { bytes, .. } => bytes.len(),
            Op::Send { chunk, .. } => chunk.len(),
        }
    }
}

/// A peer's region as it announced it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteMr {
    /// Length in bytes.
    pub(crate) len: usize,
    /// Base address operations target (0 for offset-addressed providers).
    pub(crate) addr: u64,
    /// Remote key.
    pub(crate) key: u64,
}

/// One peer's entry.
#[derive(Debug)]
pub(crate) struct SidePeer<C> {
    /// Where the link stands.
    pub(crate) state: LinkState,
    /// Id of the side-channel link (or dial) this state belongs to.
    pub(crate) link: u64,
    /// The side channel's write half.
    pub(crate) stream: Option<TcpStream>,
    /// The link's fabric resources, once established.
    pub(crate) conn: Option<C>,
    /// The peer's regions.
    pub(crate) remote: BTreeMap<RegionId, RemoteMr>,
    /// Operations waiting for a staging slot.
    pub(crate) queue: VecDeque<Op>,
    /// Bytes in `queue`.
    pub(crate) queued_bytes: usize,
    /// Operations posted and not yet completed.
    pub(crate) in_flight: usize,
    /// When the side channel last delivered a frame.
    pub(crate) last_heard: Instant,
    /// The peer's failure detector (made at the first probe tick).
    pub(crate) detector: Option<Detector>,
    /// A send being reassembled: (imm, total length, bytes so far).
    pub(crate) partial: Option<(u32, usize, Vec<u8>)>,
}

impl<C> SidePeer<C> {
    fn new(state: LinkState, link: u64, stream: Option<TcpStream>, conn: Option<C>) -> Self {
        SidePeer {
            state,
            link,
            stream,
            conn,
            remote: BTreeMap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_flight: 0,
            last_heard: Instant::now(),
            detector: None,
            partial: None,
        }
    }
}

impl<C> PeerEntry for SidePeer<C> {
    fn state(&self) -> LinkState {
        self.state
    }
    fn link_id(&self) -> u64 {
        self.link
    }
    /// A down entry keeps its place: the table holds at most [`crate::PEERS_MAX`] peers.
    fn holds_slot(&self) -> bool {
        true
    }
    fn set_down(&mut self, _reason: &FailureReason) {
        self.state = LinkState::Down;
        if let Some(stream) = self.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.queue.clear();
        self.queued_bytes = 0;
        self.remote.clear();
        self.partial = None;
    }
}

/// The owner of a staging slot: the operation's peer and link.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxSlot {
    /// The peer.
    pub(crate) peer: NodeId,
    /// The link the operation was issued on.
    pub(crate) link: u64,
}

/// What posting one operation gave.
#[derive(Debug)]
pub(crate) enum Post {
    /// Posted.
    Done,
    /// The fabric is busy: stop issuing until completions are read (libfabric EAGAIN).
    #[cfg_attr(not(feature = "libfabric"), allow(dead_code))]
    Busy,
    /// This peer's queue is full: go on with the next peer (verbs ENOMEM).
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    PeerBusy,
    /// The post failed: the peer fails with this reason.
    Failed(String),
}

/// Everything behind the lock of a [`SideLinks`].
pub(crate) struct SideState<B: SideBackend> {
    /// The peers.
    pub(crate) peers: PeerTable<SidePeer<B::Conn>>,
    /// Registered local regions.
    pub(crate) regions: BTreeMap<RegionId, Arc<B::Registered>>,
    /// Withdrawn regions stay registered (peers' in-flight writes may still land) until
    /// the endpoint is dropped.
    pub(crate) retired: Vec<Arc<B::Registered>>,
    /// Events for the owner.
    pub(crate) events: VecDeque<Event>,
    /// Free staging slots.
    pub(crate) tx_free: Vec<usize>,
    /// The owner of each staging slot in use.
    pub(crate) tx_slots: Vec<Option<TxSlot>>,
    /// The backend's own state.
    pub(crate) extra: B::Extra,
    /// When [`SideLinks::probe_peers`] ran (monotonic µs), to tell our own stalls.
    pub(crate) stalls: StallLog,
}

/// The backend-specific steps of a side-channel-linked backend.
pub(crate) trait SideBackend: Send + Sync + Sized + 'static {
    /// Made before a hello is sent (verbs: the link's queue pair).
    type Local: Send;
    /// What a peer's hello names besides its node id (its fabric address).
    type Remote: Send;
    /// A link's fabric resources once established.
    type Conn: Clone + Send;
    /// A registered local region.
    type Registered: Send + Sync;
    /// Backend state kept under the [`SideLinks`] lock.
    type Extra: Send;
    /// Thread-name prefix.
    const NAME: &'static str;
    /// First field of every send chunk.
    const SEND_MAGIC: u32;

    /// Prepares the local side of a new link.
    fn prepare(&self) -> Result<Self::Local>;
    /// The hello payload that names node `node` and `local`.
    fn hello_payload(&self, node: NodeId, local: &Self::Local) -> Vec<u8>;
    /// Parses a peer's hello payload.
    fn parse_hello(&self, payload: &[u8]) -> Option<(NodeId, Self::Remote)>;
    /// Connects the fabric to `peer` (it logs why when it cannot).
    fn connect_fabric(
        &self,
        node: NodeId,
        peer: NodeId,
        local: Self::Local,
        remote: Self::Remote,
    ) -> Option<Self::Conn>;
    /// Link `link` to `peer` was installed with `conn`, replacing `old` if any.
    fn installed(
        &self,
        extra: &mut Self::Extra,
        peer: NodeId,
        link: u64,
        conn: &Self::Conn,
        old: Option<Self::Conn>,
    );
    /// A link went down: release its fabric resources.
    fn link_down(&self, extra: &mut Self::Extra, conn: Self::Conn);
    /// The side-channel frame that announces local region `id`.
    fn region_frame(&self, id: RegionId, reg: &Self::Registered) -> Vec<u8>;
    /// The remote key of a region frame (the bytes after id, length and address).
    fn region_key(payload: &[u8]) -> Option<u64>;
    /// Operations in flight allowed per peer.
    fn window(&self) -> usize;
    /// Posts `op` to `conn` from staging slot `slot`.
    fn post(&self, slot: usize, conn: &Self::Conn, op: &Op) -> Post;
}

/// The shared state of a side-channel-linked endpoint.
pub(crate) struct SideLinks<B: SideBackend> {
    /// This endpoint's node.
    pub(crate) node: NodeId,
    /// The configuration.
    pub(crate) cfg: FabricConfig,
    /// The side channel's listening address.
    pub(crate) listen_addr: SocketAddr,
    /// Peers, regions, events, staging slots.
    pub(crate) state: Mutex<SideState<B>>,
    /// Rung on landed writes, events and drained queues.
    pub(crate) doorbell: Doorbell,
    /// Rung when outbound work is queued, to wake the progress thread.
    pub(crate) work: Doorbell,
    /// Set by close.
    pub(crate) closed: AtomicBool,
    /// The fabric.
    pub(crate) backend: B,
}

/// A send chunk's header fields (see [`SEND_HEADER_BYTES`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendHeader {
    /// Must be the backend's `SEND_MAGIC`.
    pub(crate) magic: u32,
    /// The sending node.
    pub(crate) src: NodeId,
    /// The immediate.
    pub(crate) imm: u32,
    /// The whole message's length.
    pub(crate) total: usize,
    /// This chunk's offset in the message.
    pub(crate) offset: usize,
}

impl SendHeader {
    /// Parses the header at the front of `bytes`.
    pub(crate) fn parse(bytes: &[u8]) -> Option<SendHeader> {
        Some(SendHeader {
            magic: u32_at(bytes, 0)?,
            src: u32_at(bytes, 4)?,
            imm: u32_at(bytes, 8)?,
            total: u32_at(bytes, 12)? as usize,
            offset: u32_at(bytes, 16)? as usize,
        })
    }
}

impl<B: SideBackend> SideLinks<B> {
    /// A new endpoint state with `tx_slots` staging slots; nothing runs yet.
    pub(crate) fn new(
        node: NodeId,
        cfg: FabricConfig,
        listen_addr: SocketAddr,
        backend: B,
        extra: B::Extra,
        tx_slots: usize,
    ) -> Arc<Self> {
        Arc::new(SideLinks {
            node,
            cfg,
            listen_addr,
            state: Mutex::new(SideState {
                peers: PeerTable::default(),
                regions: BTreeMap::new(),
                retired: Vec::new(),
                events: VecDeque::new(),
                tx_free: (0..tx_slots).rev().collect(),
                tx_slots: vec![None; tx_slots],
                extra,
                stalls: StallLog::default(),
            }),
            doorbell: Doorbell::new(),
            work: Doorbell::new(),
            closed: AtomicBool::new(false),
            backend,
        })
    }

    /// Locks the state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SideState<B>> {
        lock(&self.state)
    }

    /// True once closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Spawns the side channel's accept thread (non-blocking `listener`).
    pub(crate) fn spawn_accept(self: &Arc<Self>, listener: TcpListener) -> Result<JoinHandle<()>> {
        let shared = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("{}-accept-{}", B::NAME, self.node))
            .spawn(move || shared.accept_loop(listener))
            .map_err(|err| Error::io("spawning the accept thread", err))
    }

    /// Queues an event for the owner.
    pub(crate) fn push_event(&self, state: &mut SideState<B>, event: Event) {
        state.events.push_back(event);
        self.doorbell.ring();
    }

    /// Marks link `link` to `peer` down and reports it — once per link: a stale link
    /// id or a link already down changes nothing.
    pub(crate) fn fail_peer(
        &self,
        state: &mut SideState<B>,
        peer: NodeId,
        link: u64,
        reason: FailureReason,
    ) {
        let Some(p) = state.peers.mark_down(peer, link, &reason) else {
            return;
        };
        if let Some(conn) = p.conn.take() {
            self.backend.link_down(&mut state.extra, conn);
        }
        tracing::debug!(node = self.node, peer, %reason, backend = B::NAME, "link down");
        self.push_event(state, Event::PeerFailed { peer, reason });
    }

    /// Writes `bytes` to `peer`'s side channel; a failed write fails the peer.
    pub(crate) fn send_side(&self, state: &mut SideState<B>, peer: NodeId, bytes: &[u8]) {
        let Some(p) = state.peers.get_mut(peer) else {
            return;
        };
        let link = p.link;
        let failed = match p.stream.as_mut() {
            Some(stream) => stream.write_all(bytes).err(),
            None => None,
        };
        if let Some(err) = failed {
            self.fail_peer(
                state,
                peer,
                link,
                FailureReason::ConnectionLost(err.to_string()),
            );
        }
    }

    /// Sends `bytes` on the side channel of every peer that is up or handshaking.
    fn broadcast_side(&self, state: &mut SideState<B>, bytes: &[u8]) {
        for peer in state
            .peers
            .in_states(&[LinkState::Up, LinkState::Handshaking])
        {
            self.send_side(state, peer, bytes);
        }
    }

    // ---- setting links up ----

    fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        while !self.is_closed() {
            match listener.accept() {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&self);
                    let _ = std::thread::Builder::new()
                        .name(format!("{}-accepted-{}", B::NAME, self.node))
                        .spawn(move || shared.accepted(stream));
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(ACCEPT_IDLE_PARK);
                }
                Err(err) => {
                    tracing::warn!(node = self.node, %err, "side-channel accept failed");
                    std::thread::sleep(ACCEPT_ERROR_PARK);
                }
            }
        }
    }

    fn accepted(self: Arc<Self>, mut stream: TcpStream) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(timeout));
        // With a domain secret the dialer proves it before its hello is read.
        let proven = match self.authenticate_acceptor(&mut stream) {
            Ok(proven) => proven,
            Err(e) => {
                if matches!(e, Error::Unauthenticated { .. }) {
                    tracing::warn!(node = self.node, error = %e, "refused a side-channel link");
                }
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        };
        let mut reader = FrameReader::default();
        let Ok(Some((KIND_HELLO, payload))) = reader.next(&mut stream) else {
            return;
        };
        let Some((peer, remote)) = self.backend.parse_hello(&payload) else {
            return;
        };
        if peer == self.node || proven.is_some_and(|p| p != peer) {
            return;
        }
        let Ok(local) = self.backend.prepare() else {
            return;
        };
        let link = {
            let mut state = self.lock();
            // No incarnations on the side channel: a second link is a duplicate.
            let admit = crate::peers::admit(
                self.node,
                peer,
                state.peers.view(peer, |_| false),
                state.peers.room_for(peer),
            );
            if !admit.accepts() {
                let _ = stream.write_all(&frame(KIND_REJECT, &[]));
                return;
            }
            let hello = self.backend.hello_payload(self.node, &local);
            if stream.write_all(&frame(KIND_HELLO_ACK, &hello)).is_err() {
                return;
            }
            match self.establish(&mut state, peer, local, remote, &stream) {
                Some(link) => link,
                None => return,
            }
        };
        self.read_loop(peer, link, stream, reader);
    }

    /// The acceptor's half of the Noise handshake on a side channel (see [`crate::trust`]),
    /// when a domain secret is configured: `Some(peer)` proven, `None` without a secret.
    /// The side channel is authenticated, not encrypted, and the fabric's own data path
    /// (RDMA writes, libfabric RMA) is neither.
    fn authenticate_acceptor(&self, stream: &mut TcpStream) -> Result<Option<NodeId>> {
        let Some(secret) = &self.cfg.domain_secret else {
            return Ok(None);
        };
        let m1 = read_framed(stream, HANDSHAKE_MESSAGE_BYTES_MAX, "handshake message 1")?;
        let (acc, peer, m2) = AcceptorHandshake::respond(secret, self.node, &m1)?;
        stream
            .write_all(&m2)
            .map_err(|e| Error::io("sending handshake message 2", e))?;
        let confirm = read_framed(
            stream,
            HANDSHAKE_MESSAGE_BYTES_MAX,
            "the handshake confirmation",
        )?;
        acc.confirm(&confirm)?;
        Ok(Some(peer))
    }

    /// Starts a link to `peer` at `address` (see [`crate::Endpoint::connect`]).
    pub(crate) fn connect(self: &Arc<Self>, peer: NodeId, address: &str) -> Result<()> {
        self.check_open()?;
        check_not_self(self.node, peer)?;
        address
            .parse::<SocketAddr>()
            .map_err(|err| Error::BadAddress {
                addr: address.to_string(),
                detail: err.to_string(),
            })?;
        let mut state = self.lock();
        let Some(link) = state.peers.begin_dial(peer, |link| {
            SidePeer::new(LinkState::Dialing, link, None, None)
        })?
        else {
            return Ok(());
        };
        drop(state);
        let dialer = Arc::clone(self);
        let address = address.to_string();
        std::thread::Builder::new()
            .name(format!("{}-dial-{}-{peer}", B::NAME, self.node))
            .spawn(move || dialer.dial(peer, address, link))
            .map_err(|err| Error::io("spawning a dial thread", err))?;
        Ok(())
    }

    fn dial(self: Arc<Self>, peer: NodeId, address: String, link: u64) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        type Dialed<L, R> = (TcpStream, FrameReader, L, R);
        let result = (|| -> std::result::Result<Dialed<B::Local, B::Remote>, String> {
            let local = self.backend.prepare().map_err(|e| e.to_string())?;
            let addr: SocketAddr = address.parse().map_err(|err| format!("{err}"))?;
            let mut stream =
                TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            stream
                .set_read_timeout(Some(timeout))
                .map_err(|e| e.to_string())?;
            if let Some(secret) = &self.cfg.domain_secret {
                let (hs, m1) = InitiatorHandshake::start(secret, self.node, peer)
                    .map_err(|e| e.to_string())?;
                stream.write_all(&m1).map_err(|e| e.to_string())?;
                let m2 = read_framed(
                    &mut stream,
                    HANDSHAKE_MESSAGE_BYTES_MAX,
                    "handshake message 2 (a peer with another domain secret closes here)",
                )
                .map_err(|e| e.to_string())?;
                let (_, confirm) = hs.finish(&m2).map_err(|e| e.to_string())?;
                stream.write_all(&confirm).map_err(|e| e.to_string())?;
            }
            let hello = self.backend.hello_payload(self.node, &local);
            stream
                .write_all(&frame(KIND_HELLO, &hello))
                .map_err(|e| e.to_string())?;
            let mut reader = FrameReader::default();
            match reader.next(&mut stream)? {
                Some((KIND_HELLO_ACK, payload)) => match self.backend.parse_hello(&payload) {
                    Some((node, remote)) if node == peer => Ok((stream, reader, local, remote)),
                    Some((node, _)) => Err(format!("node {node} answered, not {peer}")),
                    None => Err("malformed hello".into()),
                },
                Some((KIND_REJECT, _)) => Err(REJECTED.into()),
                Some(_) => Err("unexpected side-channel frame".into()),
                None => Err("timed out waiting for the peer".into()),
            }
        })();
        if matches!(&result, Err(why) if why == REJECTED) {
            self.await_peer_link(peer, link, timeout);
            return;
        }
        let mut state = self.lock();
        let still_ours = state
            .peers
            .get(peer)
            .is_some_and(|p| p.link == link && p.state == LinkState::Dialing);
        match result {
            Ok((stream, reader, local, remote)) if still_ours => {
                if let Some(new_link) = self.establish(&mut state, peer, local, remote, &stream) {
                    drop(state);
                    self.read_loop(peer, new_link, stream, reader);
                }
            }
            Ok((stream, ..)) => {
                let _ = stream.shutdown(Shutdown::Both);
            }
            Err(why) if still_ours => {
                self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
            }
            // Superseded by the peer's own dial: nothing to report.
            Err(_) => {}
        }
    }

    /// Our dial to `peer` was rejected because the peer keeps (or is setting up) the link it
    /// dialed itself: wait for that link to replace our dial; report a failure only if it
    /// never comes.
    fn await_peer_link(&self, peer: NodeId, link: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut state = self.lock();
            let still_ours = state
                .peers
                .get(peer)
                .is_some_and(|p| p.link == link && p.state == LinkState::Dialing);
            if !still_ours || self.is_closed() {
                return;
            }
            if Instant::now() >= deadline {
                let why = format!("{REJECTED}, and it never linked back");
                self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                return;
            }
            drop(state);
            std::thread::sleep(REJECTED_POLL);
        }
    }

    /// Installs a side-channel link to `peer`: connects the fabric, then sends our region
    /// table and Ready. Returns the link id.
    fn establish(
        &self,
        state: &mut SideState<B>,
        peer: NodeId,
        local: B::Local,
        remote: B::Remote,
        stream: &TcpStream,
    ) -> Option<u64> {
        let Some(conn) = self.backend.connect_fabric(self.node, peer, local, remote) else {
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        };
        let writer = stream.try_clone().ok()?;
        // Side-channel writes happen under the state lock: a peer that stops reading must
        // not wedge us, so a blocked write fails the link after the suspicion ceiling.
        let _ = writer.set_write_timeout(Some(self.cfg.suspect_ceiling()));
        let link = state.peers.next_link_id();
        let old = state.peers.get_mut(peer).and_then(|p| p.conn.take());
        self.backend
            .installed(&mut state.extra, peer, link, &conn, old);
        state.peers.insert(
            peer,
            SidePeer::new(LinkState::Handshaking, link, Some(writer), Some(conn)),
        );
        let mut table = Vec::new();
        for (&id, reg) in &state.regions {
            table.extend(self.backend.region_frame(id, reg));
        }
        table.extend(frame(KIND_READY, &[]));
        self.send_side(state, peer, &table);
        Some(link)
    }

    // ---- the side channel's reader ----

    fn read_loop(&self, peer: NodeId, link: u64, mut stream: TcpStream, mut reader: FrameReader) {
        let _ = stream.set_read_timeout(Some(self.cfg.probe_interval()));
        loop {
            if self.is_closed() {
                return;
            }
            let next = reader.next(&mut stream);
            let mut state = self.lock();
            if !state.peers.is_current(peer, link) {
                return;
            }
            match next {
                Ok(None) => continue,
                Err(why) => {
                    self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                    return;
                }
                Ok(Some((kind, payload))) => {
                    if let Some(p) = state.peers.get_mut(peer) {
                        p.last_heard = Instant::now();
                    }
                    if let Err(why) = self.handle_frame(&mut state, peer, link, kind, &payload) {
                        self.fail_peer(&mut state, peer, link, why);
                        return;
                    }
                }
            }
            drop(state);
            // Backpressure: stop reading the peer while the owner's event queue is full.
            while self.lock().events.len() >= EVENT_QUEUE_MAX && !self.is_closed() {
                std::thread::sleep(BACKPRESSURE_PARK);
            }
        }
    }

    fn handle_frame(
        &self,
        state: &mut SideState<B>,
        peer: NodeId,
        link: u64,
        kind: u8,
        payload: &[u8],
    ) -> std::result::Result<(), FailureReason> {
        let malformed = |what: &str| FailureReason::Malformed(what.to_string());
        let up = state
            .peers
            .get(peer)
            .is_some_and(|p| p.state == LinkState::Up);
        match kind {
            KIND_REGION => {
                let (Some(id), Some(len), Some(addr), Some(key)) = (
                    u32_at(payload, 0),
                    u64_at(payload, 4),
                    u64_at(payload, 12),
                    B::region_key(payload),
                ) else {
                    return Err(malformed("short region frame"));
                };
                let len = usize::try_from(len).map_err(|_| malformed("region length"))?;
                check_region_len(len).map_err(|_| malformed("region too large"))?;
                let p = state
                    .peers
                    .get_mut(peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.remote.len() >= REGIONS_PER_ENDPOINT_MAX && !p.remote.contains_key(&id) {
                    return Err(malformed("too many regions"));
                }
                p.remote.insert(id, RemoteMr { len, addr, key });
                if up {
                    let region = RegionDesc {
                        node: peer,
                        region: id,
                        len,
                    };
                    self.push_event(state, Event::RegionAnnounced { peer, region });
                }
            }
            KIND_WITHDRAW => {
                let id = u32_at(payload, 0).ok_or_else(|| malformed("short withdraw frame"))?;
                let p = state
                    .peers
                    .get_mut(peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.remote.remove(&id).is_some() && up {
                    self.push_event(state, Event::RegionWithdrawn { peer, region: id });
                }
            }
            KIND_READY => {
                let p = state
                    .peers
                    .get_mut(peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.state == LinkState::Handshaking {
                    p.state = LinkState::Up;
                    self.push_event(state, Event::PeerConnected { peer });
                }
            }
            KIND_PROBE => {}
            KIND_BYE => self.fail_peer(state, peer, link, FailureReason::Closed),
            KIND_EXCLUDED => {
                let silent_ms =
                    u64_at(payload, 0).ok_or_else(|| malformed("short excluded frame"))?;
                self.fail_peer(state, peer, link, FailureReason::Excluded { silent_ms });
            }
            other => {
                return Err(malformed(&format!(
                    "unknown side-channel frame kind {other}"
                )))
            }
        }
        Ok(())
    }

    /// See [`crate::Endpoint::stall_ms`]: a stall of the progress thread past these
    /// backends' floor (the ceiling, see [`SideLinks::probe_peers`]).
    pub(crate) fn stall_ms(&self, within: Duration) -> Option<u64> {
        let floor_us = DetectorConfig::from_fabric(&self.cfg).ceiling_us;
        let interval_us = self.cfg.probe_interval_ms.saturating_mul(1000);
        let within_us = within.as_micros().min(u128::from(u64::MAX)) as u64;
        self.lock()
            .stalls
            .stall_us(monotonic_us(), within_us, interval_us, floor_us)
            .map(|us| us / 1000)
    }

    /// Probes every linked peer on its side channel, feeds each peer's failure detector
    /// and fails those whose silence exceeds its bound (telling them so first, best
    /// effort). The progress thread calls it every probe interval.
    pub(crate) fn probe_peers(&self) {
        let mut state = self.lock();
        // The same detector as the stream backends, but floored at the ceiling: these
        // backends send their probes from the progress thread, which a busy workload
        // keeps from probing for longer than the default floor (the libfabric contract
        // tests suspected live peers at 50 ms on a loaded 2-vCPU machine). Until probes
        // get a thread of their own, a hang here is detected after the ceiling.
        let mut cfg = DetectorConfig::from_fabric(&self.cfg);
        cfg.floor_us = cfg.ceiling_us;
        let now_us = monotonic_us();
        // A late tick means this process was stopped or starved: forgive the silence.
        let interval_us = self.cfg.probe_interval_ms.saturating_mul(1000);
        let late_us = state.stalls.tick(now_us, interval_us, cfg.floor_us);
        let stalled = late_us > stall_us(&cfg);
        let mut suspects = Vec::new();
        let mut probed = Vec::new();
        for peer in state.peers.ids() {
            let Some(p) = state.peers.get_mut(peer) else {
                continue;
            };
            if !matches!(p.state, LinkState::Up | LinkState::Handshaking) {
                continue;
            }
            let heard_us = now_us
                .saturating_sub(p.last_heard.elapsed().as_micros().min(u64::MAX.into()) as u64);
            let d = p
                .detector
                .get_or_insert_with(|| Detector::new(cfg, heard_us));
            d.heard(heard_us);
            if stalled {
                d.forgive(now_us);
            }
            match d.check(now_us) {
                Verdict::Alive => probed.push(peer),
                // Bytes wait unread on the side channel: our reader is behind, the peer
                // is not silent.
                Verdict::Suspect { .. }
                    if p.stream
                        .as_ref()
                        .is_some_and(|s| crate::link::readable(s.as_raw_fd())) =>
                {
                    d.forgive(now_us);
                    probed.push(peer);
                }
                Verdict::Suspect {
                    silent_us,
                    timeout_us,
                } => suspects.push((peer, p.link, silent_us / 1000, timeout_us / 1000)),
            }
        }
        let probe = frame(KIND_PROBE, &[]);
        for peer in probed {
            self.send_side(&mut state, peer, &probe);
        }
        for (peer, link, silent_ms, timeout_ms) in suspects {
            tracing::info!(
                node = self.node,
                peer,
                silent_ms,
                timeout_ms,
                backend = B::NAME,
                "suspecting a silent peer"
            );
            // Never block on a peer that stopped reading: one non-blocking attempt.
            if let Some(stream) = state.peers.get_mut(peer).and_then(|p| p.stream.as_mut()) {
                let last = frame(KIND_EXCLUDED, &silent_ms.to_le_bytes());
                if stream.set_nonblocking(true).is_ok() {
                    let _ = stream.write(&last);
                }
            }
            self.fail_peer(
                &mut state,
                peer,
                link,
                FailureReason::ProbeTimeout { silent_ms },
            );
        }
    }

    // ---- outbound operations ----

    /// Issues queued operations while staging slots and per-peer windows allow; true if
    /// any was issued.
    pub(crate) fn issue_queued(&self) -> bool {
        let mut state = self.lock();
        let window = self.backend.window();
        let mut issued = false;
        for peer in state.peers.ids() {
            loop {
                let Some(slot) = state.tx_free.last().copied() else {
                    return issued;
                };
                let Some(p) = state.peers.get_mut(peer) else {
                    break;
                };
                if p.state != LinkState::Up || p.in_flight >= window || p.queue.is_empty() {
                    break;
                }
                let Some(conn) = p.conn.clone() else { break };
                let op = p.queue.front().expect("checked non-empty");
                match self.backend.post(slot, &conn, op) {
                    Post::Done => {}
                    Post::Busy => return issued,
                    Post::PeerBusy => break,
                    Post::Failed(why) => {
                        let link = p.link;
                        self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                        break;
                    }
                }
                let op = p.queue.pop_front().expect("checked non-empty");
                p.queued_bytes -= op.len();
                p.in_flight += 1;
                let link = p.link;
                state.tx_free.pop();
                state.tx_slots[slot] = Some(TxSlot { peer, link });
                issued = true;
            }
        }
        issued
    }

    /// Frees staging slot `slot`; returns its owner (`None` if it was free).
    pub(crate) fn release_tx(state: &mut SideState<B>, slot: usize) -> Option<TxSlot> {
        let owner = state.tx_slots[slot].take()?;
        state.tx_free.push(slot);
        Some(owner)
    }

    /// An operation of `owner` completed: one fewer in flight; the doorbell rings when
    /// that peer's outbound queue has drained.
    pub(crate) fn op_done(&self, state: &mut SideState<B>, owner: TxSlot) {
        if let Some(p) = state.peers.get_mut(owner.peer) {
            if p.link == owner.link {
                p.in_flight = p.in_flight.saturating_sub(1);
                if p.queue.is_empty() && p.in_flight == 0 {
                    self.doorbell.ring(); // outbound queue drained
                }
            }
        }
    }

    /// Queues `ops` to `peer` (all or nothing).
    fn enqueue(&self, peer: NodeId, ops: Vec<Op>) -> Result<()> {
        let mut state = self.lock();
        let p = self.up_peer(&mut state, peer)?;
        let bytes: usize = ops.iter().map(Op::len).sum();
        if p.queued_bytes + bytes > self.cfg.outbound_bytes_max {
            return Err(Error::QueueFull { peer });
        }
        p.queued_bytes += bytes;
        p.queue.extend(ops);
        drop(state);
        self.work.ring();
        Ok(())
    }

    fn up_peer<'a>(
        &self,
        state: &'a mut SideState<B>,
        peer: NodeId,
    ) -> Result<&'a mut SidePeer<B::Conn>> {
        self.check_open()?;
        match state.peers.get_mut(peer) {
            Some(p) if p.state == LinkState::Up => Ok(p),
            _ => Err(Error::NotConnected { peer }),
        }
    }

    /// Splits a write into chunks whose ends fall on aligned target offsets (so no word
    /// straddles two operations) and checks it against the remote region.
    fn write_ops(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
    ) -> Result<Vec<Op>> {
        if bytes.len() > WRITE_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "write",
                len: bytes.len(),
                max: WRITE_BYTES_MAX,
            });
        }
        let mut state = self.lock();
        let p = self.up_peer(&mut state, peer)?;
        let mr = *p
            .remote
            .get(&region)
            .ok_or(Error::UnknownRegion { node: peer, region })?;
        let fits = matches!(offset.checked_add(bytes.len()), Some(end) if end <= mr.len);
        if !fits {
            return Err(Error::OutOfBounds {
                node: peer,
                region,
                offset,
                len: bytes.len(),
                region_len: mr.len,
            });
        }
        let mut ops = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let at = offset + pos;
            let take = (CHUNK_BYTES_MAX - at % WORD_BYTES).min(bytes.len() - pos);
            ops.push(Op::Write {
                remote_addr: mr.addr + at as u64,
                key: mr.key,
                bytes: bytes[pos..pos + take].to_vec(),
                notify: pos + take == bytes.len(),
            });
            pos += take;
        }
        Ok(ops)
    }

    /// One-sided write (see [`crate::Endpoint::write`]).
    pub(crate) fn write(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
    ) -> Result<()> {
        let ops = self.write_ops(peer, region, offset, bytes)?;
        if ops.is_empty() {
            return Ok(());
        }
        self.enqueue(peer, ops)
    }

    /// Write, then the guard as a separate, later operation (see
    /// [`crate::Endpoint::write_then_release`]): the fabric's FIFO placement puts it after
    /// the payload.
    pub(crate) fn write_then_release(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard_offset: usize,
        guard_value: u64,
    ) -> Result<()> {
        if guard_offset % WORD_BYTES != 0 {
            return Err(Error::Misaligned {
                offset: guard_offset,
            });
        }
        let mut ops = self.write_ops(peer, region, offset, bytes)?;
        ops.extend(self.write_ops(peer, region, guard_offset, &guard_value.to_ne_bytes())?);
        self.enqueue(peer, ops)
    }

    /// Two-sided send, as chunks of at most [`CHUNK_BYTES_MAX`] bytes with a
    /// [`SendHeader`] each (see [`crate::Endpoint::send`]).
    pub(crate) fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() > SEND_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "send",
                len: bytes.len(),
                max: SEND_BYTES_MAX,
            });
        }
        let body_max = CHUNK_BYTES_MAX - SEND_HEADER_BYTES;
        let mut ops = Vec::new();
        let mut offset = 0;
        loop {
            let take = body_max.min(bytes.len() - offset);
            let mut chunk = Vec::with_capacity(SEND_HEADER_BYTES + take);
            chunk.extend_from_slice(&B::SEND_MAGIC.to_le_bytes());
            chunk.extend_from_slice(&self.node.to_le_bytes());
            chunk.extend_from_slice(&imm.to_le_bytes());
            chunk.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            chunk.extend_from_slice(&(offset as u32).to_le_bytes());
            chunk.extend_from_slice(&bytes[offset..offset + take]);
            ops.push(Op::Send { imm, chunk });
            offset += take;
            if offset >= bytes.len() {
                break;
            }
        }
        self.enqueue(peer, ops)
    }

    /// Adds a received send chunk (header `h`, already checked by the backend as far as
    /// `header_ok` says) to `peer`'s reassembly; a complete message becomes
    /// [`Event::Recv`] if the link is up. `Err(())`: the chunk does not fit the message in
    /// progress (the caller fails the peer as malformed).
    pub(crate) fn reassemble(
        &self,
        state: &mut SideState<B>,
        peer: NodeId,
        h: SendHeader,
        header_ok: bool,
        body: &[u8],
    ) -> std::result::Result<(), ()> {
        let Some(p) = state.peers.get_mut(peer) else {
            return Ok(());
        };
        let valid = header_ok
            && h.magic == B::SEND_MAGIC
            && h.total <= SEND_BYTES_MAX
            && h.offset
                .checked_add(body.len())
                .is_some_and(|end| end <= h.total)
            && match &p.partial {
                None => h.offset == 0,
                Some((pimm, ptotal, buf)) => {
                    *pimm == h.imm && *ptotal == h.total && buf.len() == h.offset
                }
            };
        if !valid {
            return Err(());
        }
        let (_, _, buf) = p
            .partial
            .get_or_insert_with(|| (h.imm, h.total, Vec::with_capacity(h.total)));
        buf.extend_from_slice(body);
        if buf.len() == h.total {
            let (imm, _, data) = p.partial.take().expect("just inserted");
            if p.state == LinkState::Up {
                self.push_event(state, Event::Recv { peer, imm, data });
            }
        }
        Ok(())
    }

    // ---- endpoint bookkeeping ----

    /// Closes the link to `peer` with a goodbye (see [`crate::Endpoint::disconnect`]).
    pub(crate) fn disconnect(&self, peer: NodeId) -> Result<()> {
        self.check_open()?;
        let mut state = self.lock();
        let Some(p) = state.peers.get(peer) else {
            return Err(Error::NotConnected { peer });
        };
        let link = p.link;
        self.send_side(&mut state, peer, &frame(KIND_BYE, &[]));
        self.fail_peer(&mut state, peer, link, FailureReason::LocalClose);
        Ok(())
    }

    /// Peers whose link is up, ascending.
    pub(crate) fn peers(&self) -> Vec<NodeId> {
        self.lock().peers.in_states(&[LinkState::Up])
    }

    /// Checks that region `id` of `len_bytes` may be registered.
    pub(crate) fn check_new_region(&self, id: RegionId, len_bytes: usize) -> Result<()> {
        self.check_open()?;
        check_region_len(len_bytes)?;
        let state = self.lock();
        if state.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        if state.regions.len() >= REGIONS_PER_ENDPOINT_MAX {
            return Err(Error::TooLarge {
                what: "region count",
                len: state.regions.len() + 1,
                max: REGIONS_PER_ENDPOINT_MAX,
            });
        }
        Ok(())
    }

    /// Installs registered region `id` and announces it to every linked peer.
    pub(crate) fn install_region(&self, id: RegionId, reg: Arc<B::Registered>) -> Result<()> {
        let mut state = self.lock();
        if state.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        let announce = self.backend.region_frame(id, &reg);
        state.regions.insert(id, reg);
        self.broadcast_side(&mut state, &announce);
        Ok(())
    }

    /// Withdraws region `id` (see [`crate::Endpoint::deregister_region`]).
    pub(crate) fn deregister_region(&self, id: RegionId) -> Result<()> {
        self.check_open()?;
        let mut state = self.lock();
        let reg = state.regions.remove(&id).ok_or(Error::UnknownRegion {
            node: self.node,
            region: id,
        })?;
        state.retired.push(reg);
        self.broadcast_side(&mut state, &frame(KIND_WITHDRAW, &id.to_le_bytes()));
        Ok(())
    }

    /// The descriptor of `peer`'s region `id`.
    pub(crate) fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        let state = self.lock();
        let mr = state.peers.get(peer)?.remote.get(&id)?;
        Some(RegionDesc {
            node: peer,
            region: id,
            len: mr.len,
        })
    }

    /// The next event, if any.
    pub(crate) fn poll_event(&self) -> Option<Event> {
        self.lock().events.pop_front()
    }

    /// Says goodbye to every peer and marks every link down (no events: the owner
    /// closed), then joins `threads`. Idempotent.
    pub(crate) fn close(&self, threads: &Mutex<Vec<JoinHandle<()>>>) {
        {
            let mut state = self.lock();
            if self.closed.swap(true, Ordering::AcqRel) {
                return;
            }
            let bye = frame(KIND_BYE, &[]);
            for peer in state.peers.ids() {
                self.send_side(&mut state, peer, &bye);
                if let Some(p) = state.peers.get_mut(peer) {
                    p.state = LinkState::Down;
                    if let Some(stream) = p.stream.take() {
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                    p.queue.clear();
                }
            }
        }
        self.work.ring();
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(threads));
        for thread in threads {
            let _ = thread.join();
        }
        self.doorbell.ring();
    }
}
