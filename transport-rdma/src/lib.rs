//! # spindle-transport-rdma — the fabric
//!
//! The bottom layer of Spindle DDS: memory regions that peers write into one-sided, and
//! two-sided messages with a 32-bit immediate, modelled on RDMA verbs and libfabric RMA so
//! that the Derecho engine above runs unchanged on InfiniBand, RoCE, libfabric providers,
//! TCP, shared memory or an in-process simulator (docs/design.md §2).
//!
//! ## The contract
//!
//! Every backend implements [`Endpoint`], and every backend passes the same conformance
//! suite (`conformance`, feature `testkit`). What an [`Endpoint`] promises:
//!
//! 1. **Regions.** [`Endpoint::register_region`] registers zeroed memory under a
//!    [`RegionId`] unique on that endpoint; connected peers learn its descriptor
//!    ([`RegionDesc`]) from the endpoint ([`Event::RegionAnnounced`]). A region is
//!    addressed by `(node, region_id)`.
//! 2. **One-sided writes.** [`Endpoint::write`] copies bytes into a peer's region at an
//!    offset, without the peer's CPU taking part in the protocol. Writes to one peer are
//!    applied **in issue order** (FIFO), and every aligned 8-byte word is applied
//!    **atomically** (never torn). Precisely: if the owner's acquire load of a word
//!    ([`Region::load_u64`]) returns a value written by write *W* from peer *P*, the owner
//!    also sees every byte of every write *P* issued before *W*.
//! 3. **Payload, then guard.** [`Endpoint::write_then_release`] writes a payload and then
//!    stores a guard word with release semantics: an owner whose acquire load sees the new
//!    guard sees the payload (Derecho 3.4). Callers use this, never field order. The
//!    payload's words are whole once the guard is seen; before it, a backend may show them
//!    partly written (tcp reads a payload of 64 KiB or more from the socket straight into
//!    the region, by a kernel copy; shm and the tcp reader copy a guarded payload in bulk,
//!    [`Region::write_bytes_guarded`]): read a guarded payload only after its guard.
//! 4. **Owner access.** The owner reads its regions through [`Region`] (acquire loads of
//!    words, relaxed byte copies after a guard) and may write them locally, and may park
//!    on the endpoint's doorbell ([`Endpoint::wait`]) until a peer writes, an event
//!    arrives or an outbound queue drains.
//! 5. **Two-sided sends.** [`Endpoint::send`] delivers a buffer with a 32-bit immediate as
//!    [`Event::Recv`]. Sends are ordered with writes to the same peer: a write issued before
//!    a send is visible when the [`Event::Recv`] is polled.
//! 6. **Failures.** A broken link surfaces once as [`Event::PeerFailed`] naming the peer;
//!    the fabric never retransmits above its own link. Each backend probes every peer
//!    every [`FabricConfig::probe_interval_ms`] and declares it failed once its silence
//!    exceeds the bound of the adaptive failure detector ([`detector`]: learned from the
//!    peer's gaps between arrivals, between [`FabricConfig::suspect_floor_ms`] and
//!    [`FabricConfig::suspect_ceiling_ms`]; Derecho 3.7). A peer that suspected this
//!    node tells it so when it can ([`FailureReason::Excluded`]). There is no completion
//!    per write on the hot path.
//! 7. **Bounds.** Sizes are bounded by the `*_MAX` constants below; oversize or malformed
//!    input — including any bytes from a peer — gives an [`Error`], never a panic. A peer
//!    that sends malformed bytes is disconnected with [`FailureReason::Malformed`].
//! 8. **Corking.** Between [`Endpoint::cork`] and the outermost [`Endpoint::uncork`] a
//!    backend may hold the writes and sends of the corking thread, to hand them to the
//!    fabric together; at the uncork everything held goes out, in issue order. Nothing
//!    corked is lost, and other threads' writes are not held. Nor is anything held for
//!    long: a corking thread that stays busy does not silence its links — what it holds
//!    goes out by the failure detector's next probe tick at the latest.
//! 9. **Writes from a local region.** [`Endpoint::write_from`] is [`Endpoint::write`] (or,
//!    with a guard, [`Endpoint::write_then_release`]) whose bytes are a range of a local
//!    [`Region`] ([`LocalRange`]) instead of a slice: same ordering, same guard rule, same
//!    errors, and a bad local range is an [`Error`] too. The default reads the range into
//!    a per-thread scratch and writes that; a backend that can move the bytes straight
//!    from the region overrides it (shm copies from the local mapping into the peer's;
//!    tcp hands a large range to the socket from the region's memory and copies the rest
//!    into its outbound queue). As with [`Endpoint::write`], the bytes are taken when the
//!    call returns: the caller may change the range afterwards (RDMC completes a message
//!    once its writes are posted). An RDMA override that lets the NIC read the range
//!    later must keep that promise some other way (not done: libfabric and verbs keep the
//!    default). Words stay whole (item 2) for ranges nobody stores into during the call,
//!    which is what callers write from (committed slots, RDMC blocks, rows of the calling
//!    thread): a word another thread stores into meanwhile may arrive torn, since a
//!    kernel copy is not a word-by-word load.
//! 10. **What a peer may write.** Once its owner limits a region
//!     ([`Region::limit_peer_writes`]: per peer, the ranges it may write), a backend whose
//!     [`Endpoint::enforces_peer_writes`] is true (tcp, the simulator: they apply their
//!     peers' writes themselves) refuses a write or guard outside the writer's ranges: it
//!     lands nowhere, and the link fails at the owner with [`FailureReason::Malformed`]
//!     naming the range. shm and the RDMA backends cannot see their peers' writes; there
//!     the limits are the protocol's rule only.
//!
//! ## A region, read and written locally
//!
//! ```
//! use spindle_transport_rdma::Region;
//!
//! let row = Region::new_heap(7, 64)?;
//! row.write_bytes(8, b"payload")?;   // the data …
//! row.store_u64(0, 1);               // … then its guard (release)
//! assert_eq!(row.load_u64(0), 1);    // acquire: the payload is visible
//! assert_eq!(row.to_vec(8, 7)?, b"payload");
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::time::Duration;

mod backend;
#[cfg(feature = "testkit")]
pub mod conformance;
pub mod detector;
mod doorbell;
mod error;
#[cfg(feature = "libfabric")]
pub mod libfabric;
pub(crate) mod link;
mod peers;
mod region;
pub mod shm;
#[cfg(any(feature = "libfabric", feature = "verbs"))]
mod side_channel;
#[cfg(any(feature = "libfabric", feature = "verbs"))]
mod side_link;
pub mod sim;
pub mod tcp;
pub mod trust;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use backend::{backend_names, open_backend};
pub use doorbell::Doorbell;
pub use error::{Error, FailureReason, Result};
pub use region::{
    check_region_len, page_bytes, round_up_to_words, PeerWrites, Region, COPY_CHUNK_BYTES,
    HEAP_MAP_BYTES_MIN, PEER_WRITE_RANGES_MAX, PINNED_BUFFERS_MAX, WORD_BYTES,
};
pub use trust::DomainSecret;

/// A node's stable id in the domain.
pub type NodeId = u32;

/// A region's id, unique on the endpoint that registered it.
pub type RegionId = u32;

/// Largest region one endpoint may register, in bytes.
pub const REGION_BYTES_MAX: usize = 1 << 30;
/// Most regions one endpoint may have registered at once.
pub const REGIONS_PER_ENDPOINT_MAX: usize = 4096;
/// Largest single one-sided write, in bytes.
pub const WRITE_BYTES_MAX: usize = 16 << 20;
/// Largest single two-sided send, in bytes.
pub const SEND_BYTES_MAX: usize = 16 << 20;
/// Most peers one endpoint may be linked to.
pub const PEERS_MAX: usize = 1024;
/// Most events queued for the owner before a backend stops taking input from peers
/// (backpressure, never loss).
pub const EVENT_QUEUE_MAX: usize = 65_536;
/// Upper bound for [`FabricConfig::outbound_bytes_max`].
pub const OUTBOUND_BYTES_MAX: usize = 1 << 30;

/// Most bytes the default [`Endpoint::write_from`] keeps in its per-thread scratch
/// between calls (a larger one is freed after its write).
pub const WRITE_FROM_SCRATCH_KEPT_BYTES: usize = 16 << 20;

std::thread_local! {
    /// The default [`Endpoint::write_from`]'s scratch, one per thread.
    static WRITE_FROM_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads `from` into this thread's scratch and hands the bytes to `f` (the default
/// [`Endpoint::write_from`], and a framing backend's).
pub(crate) fn with_local_bytes(
    from: LocalRange<'_>,
    f: impl FnOnce(&[u8]) -> Result<()>,
) -> Result<()> {
    WRITE_FROM_SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        scratch.clear();
        from.region
            .read_append(from.offset, from.len, &mut scratch)?;
        let result = f(&scratch);
        if scratch.capacity() > WRITE_FROM_SCRATCH_KEPT_BYTES {
            *scratch = Vec::new();
        }
        result
    })
}

/// The bytes of an [`Endpoint::write_from`]: `len` bytes of a local `region` at `offset`.
#[derive(Debug, Clone, Copy)]
pub struct LocalRange<'a> {
    /// The local region the bytes are in (registered on the endpoint or not).
    pub region: &'a Region,
    /// Where they start in it.
    pub offset: usize,
    /// How many.
    pub len: usize,
}

/// What a peer needs to know to write into a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionDesc {
    /// The node that owns the region.
    pub node: NodeId,
    /// The region's id on that node.
    pub region: RegionId,
    /// Its length in bytes (whole words).
    pub len: usize,
}

/// Something the fabric reports to the owner of an endpoint, in order per peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The link to `peer` is up; the regions it had registered are already known
    /// ([`Endpoint::remote_region`]). Both sides of a link see this event.
    PeerConnected {
        /// The peer.
        peer: NodeId,
    },
    /// `peer` registered a region after the link came up.
    RegionAnnounced {
        /// The peer.
        peer: NodeId,
        /// The region.
        region: RegionDesc,
    },
    /// `peer` deregistered a region; writes to it now fail with [`Error::UnknownRegion`].
    RegionWithdrawn {
        /// The peer.
        peer: NodeId,
        /// The region id.
        region: RegionId,
    },
    /// A two-sided message from `peer`.
    Recv {
        /// The sender.
        peer: NodeId,
        /// The 32-bit immediate it was sent with.
        imm: u32,
        /// The message.
        data: Vec<u8>,
    },
    /// The link to `peer` broke; reported once per link.
    PeerFailed {
        /// The peer.
        peer: NodeId,
        /// Why.
        reason: FailureReason,
    },
}

/// Most a probe interval, suspicion floor or ceiling may be (ten minutes): longer is a
/// typo, not a setting.
pub const SUSPECT_MS_MAX: u64 = 600_000;

/// Most deviations [`FabricConfig::suspect_deviations`] may ask for.
pub const SUSPECT_DEVIATIONS_MAX: u32 = 64;

/// Settings common to every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricConfig {
    /// How often each idle peer is probed (a one-word write that doubles as a heartbeat),
    /// and how often silence is judged.
    pub probe_interval_ms: u64,
    /// The adaptive failure detector's lower bound: a peer is never suspected after less
    /// silence than this, however regular its traffic (see the `detector` module).
    pub suspect_floor_ms: u64,
    /// The adaptive failure detector's upper bound: a peer silent this long is always
    /// suspected, however irregular its traffic was. Also bounds how long a write to a
    /// peer that stopped reading may block.
    pub suspect_ceiling_ms: u64,
    /// How many mean deviations of a peer's gaps between arrivals, above the mean gap, its
    /// silence may reach before it is suspected (TCP's retransmission time-out uses 4).
    pub suspect_deviations: u32,
    /// Bytes that may wait in the outbound queue to one peer before writes and sends to it
    /// return [`Error::QueueFull`].
    pub outbound_bytes_max: usize,
    /// How long link set-up may take before [`Endpoint::connect`] gives up.
    pub connect_timeout_ms: u64,
    /// The domain's shared secret. When set, every tcp and shm link starts with a Noise
    /// handshake proving both sides know it ([`trust`]); a peer that fails it is refused
    /// before any region is announced. `None`: links are not authenticated.
    pub domain_secret: Option<DomainSecret>,
    /// With a [`FabricConfig::domain_secret`], encrypt tcp links (ChaCha20-Poly1305
    /// records keyed by the handshake). On by default; off leaves authentication only.
    /// shm links are same-host memory and never encrypted.
    pub encrypt_links: bool,
    /// The longest a stream link's reader thread (tcp; shm's control link) polls its
    /// socket, yielding the core between polls, before it blocks in `recv`, at most
    /// [`READ_SPIN_US_MAX`]; 0 blocks at once. The poll adapts to the waits the reader
    /// sees, as KVM's halt polling does: a wait that ended within this bound doubles the
    /// next poll (from 10 µs), a longer one halves it. A peer that answers within
    /// microseconds (a ping/pong, a stream) is then read without the wake-up of a
    /// sleeping thread, which on a virtual machine is most of a round trip's cost over
    /// loopback; a link with sparse traffic (a periodic topic, probes) blocks at once and
    /// costs no core. Measured in docs/benchmarks.md ("The link reader's spin").
    pub read_spin_us: u64,
}

/// The longest [`FabricConfig::read_spin_us`] accepted.
pub const READ_SPIN_US_MAX: u64 = 100_000;

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            // Measured on a 2-vCPU box (docs/benchmarks.md, "Hung members"): a stopped
            // member is excluded within 100 ms at p99, and a soak under a bulk stream and
            // a CPU hog suspected no live member. A crashed process is noticed at once
            // by its broken connection; the detector only catches peers that hang.
            probe_interval_ms: 10,
            suspect_floor_ms: 50,
            suspect_ceiling_ms: 2_000,
            suspect_deviations: 4,
            outbound_bytes_max: 64 << 20,
            connect_timeout_ms: 5_000,
            domain_secret: None,
            encrypt_links: true,
            // The predicate thread's default spin (group's `NodeConfig`): a reply that
            // would not wake the one does not wake the other.
            read_spin_us: 1_000,
        }
    }
}

impl FabricConfig {
    /// Checks the settings against each other and against the crate's bounds; the error
    /// names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        for (name, value) in [
            ("probe_interval_ms", self.probe_interval_ms),
            ("suspect_floor_ms", self.suspect_floor_ms),
            ("suspect_ceiling_ms", self.suspect_ceiling_ms),
        ] {
            if value == 0 || value > SUSPECT_MS_MAX {
                return bad(format!(
                    "{name} ({value}) must lie between 1 and {SUSPECT_MS_MAX}"
                ));
            }
        }
        if self.probe_interval_ms >= self.suspect_floor_ms {
            return bad(format!(
                "probe_interval_ms ({}) must be below suspect_floor_ms ({}): a peer must \
                 get at least one probe through before it can be suspected",
                self.probe_interval_ms, self.suspect_floor_ms
            ));
        }
        if self.suspect_floor_ms > self.suspect_ceiling_ms {
            return bad(format!(
                "suspect_floor_ms ({}) must not exceed suspect_ceiling_ms ({})",
                self.suspect_floor_ms, self.suspect_ceiling_ms
            ));
        }
        if self.suspect_deviations == 0 || self.suspect_deviations > SUSPECT_DEVIATIONS_MAX {
            return bad(format!(
                "suspect_deviations ({}) must lie between 1 and {SUSPECT_DEVIATIONS_MAX}",
                self.suspect_deviations
            ));
        }
        if self.outbound_bytes_max < WRITE_BYTES_MAX.max(SEND_BYTES_MAX)
            || self.outbound_bytes_max > OUTBOUND_BYTES_MAX
        {
            return bad(format!(
                "outbound_bytes_max ({}) must lie between {} and {}",
                self.outbound_bytes_max,
                WRITE_BYTES_MAX.max(SEND_BYTES_MAX),
                OUTBOUND_BYTES_MAX
            ));
        }
        if self.read_spin_us > READ_SPIN_US_MAX {
            return bad(format!(
                "read_spin_us ({}) must not exceed {READ_SPIN_US_MAX}",
                self.read_spin_us
            ));
        }
        Ok(())
    }

    /// The probe interval as a [`Duration`].
    pub fn probe_interval(&self) -> Duration {
        Duration::from_millis(self.probe_interval_ms)
    }

    /// The suspicion ceiling as a [`Duration`].
    pub fn suspect_ceiling(&self) -> Duration {
        Duration::from_millis(self.suspect_ceiling_ms)
    }
}

/// One node's attachment to the fabric. All methods take `&self` and are safe to call
/// from several threads; an endpoint is usually shared as `Arc<dyn Endpoint>`.
pub trait Endpoint: Send + Sync + fmt::Debug {
    /// This endpoint's node id.
    fn node(&self) -> NodeId;

    /// The address peers pass to [`Endpoint::connect`] to reach this endpoint
    /// (`127.0.0.1:7400` for tcp, a name for shm, `sim:3` for sim).
    fn address(&self) -> String;

    /// Starts setting up a link to `peer` at `address`. Either side, or both at once, may
    /// call it; it is idempotent. The link is usable once [`Event::PeerConnected`] has
    /// been polled; until then writes to the peer fail with [`Error::NotConnected`].
    fn connect(&self, peer: NodeId, address: &str) -> Result<()>;

    /// Closes the link to `peer` gracefully; the peer sees
    /// [`Event::PeerFailed`] with [`FailureReason::Closed`].
    fn disconnect(&self, peer: NodeId) -> Result<()>;

    /// Peers whose link is up, in ascending order.
    fn peers(&self) -> Vec<NodeId>;

    /// Registers a zeroed region of at least `len_bytes` bytes and announces it to every
    /// connected peer (and to peers that connect later).
    fn register_region(&self, id: RegionId, len_bytes: usize) -> Result<Region>;

    /// Withdraws a region: peers' later writes to it are rejected. Local clones of the
    /// [`Region`] stay readable.
    fn deregister_region(&self, id: RegionId) -> Result<()>;

    /// The descriptor of `peer`'s region `id`, if announced and not withdrawn.
    fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc>;

    /// One-sided write of `bytes` into `peer`'s region `region` at `offset` (contract
    /// items 2 and 7). Returns once the write is queued; it is applied at the peer in
    /// issue order.
    fn write(&self, peer: NodeId, region: RegionId, offset: usize, bytes: &[u8]) -> Result<()>;

    /// Writes `bytes` at `offset`, then stores `guard_value` into the aligned word at
    /// `guard_offset` of the same region with release semantics (contract item 3).
    fn write_then_release(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard_offset: usize,
        guard_value: u64,
    ) -> Result<()>;

    /// One-sided write of the local range `from` into `peer`'s region `region` at
    /// `offset`, then, with a `guard` `(guard_offset, guard_value)`, the guard's release
    /// as [`Endpoint::write_then_release`] (contract item 9). The default reads `from`
    /// into a per-thread scratch (kept up to [`WRITE_FROM_SCRATCH_KEPT_BYTES`]) and
    /// writes that, so every backend is correct; shm overrides it with one copy from the
    /// local mapping into the peer's.
    fn write_from(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        from: LocalRange<'_>,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        with_local_bytes(from, |bytes| match guard {
            Some((at, value)) => self.write_then_release(peer, region, offset, bytes, at, value),
            None => self.write(peer, region, offset, bytes),
        })
    }

    /// Two-sided send of `bytes` with immediate `imm`; the peer polls it as
    /// [`Event::Recv`] (contract item 5).
    fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()>;

    /// The next event, if any. Never blocks.
    fn poll_event(&self) -> Option<Event>;

    /// Parks until a peer writes into a local region, an event is queued, an outbound
    /// queue drains, or `timeout` passes; returns true if woken by activity. Activity that
    /// happened since the previous call returns at once. (The sim backend never parks:
    /// its clock only moves when the simulation is stepped.)
    fn wait(&self, timeout: Duration) -> bool;

    /// Starts holding the writes and sends the calling thread issues on this endpoint
    /// (contract item 8): until the matching [`Endpoint::uncork`] on the same thread, a
    /// backend may keep what it is handed queued — in
    /// issue order, within its outbound bound — and hand it to the fabric all at once, so
    /// that the pushes of one predicate step reach a peer together (tcp: one system call
    /// and one wake-up at the peer per link, instead of one per write). Calls nest; the
    /// default does nothing (shm stores at once, RDMA posts are already batched by the
    /// NIC's doorbell).
    fn cork(&self) {}

    /// Ends a [`Endpoint::cork`]: the outermost uncork hands everything held to the
    /// fabric. A corked write is never lost or reordered, only held until here.
    fn uncork(&self) {}

    /// Rings the endpoint's doorbell: a thread parked in [`Endpoint::wait`] returns at
    /// once (the engine's application threads wake the predicate thread with it after a
    /// commit). The default does nothing, so a caller of a backend that does not override
    /// it relies on its `wait` time-out.
    fn wake(&self) {}

    /// Whether this backend applies its peers' writes itself and so refuses a write
    /// outside what [`Region::limit_peer_writes`] grants the writer, failing its link as
    /// malformed (tcp, the simulator). False where peers write the memory directly (shm's
    /// mappings, RDMA devices): there the grants are the protocol's rule only. The
    /// default says false.
    fn enforces_peer_writes(&self) -> bool {
        false
    }

    /// If this process went silent for longer than the fabric's suspicion floor — its
    /// fabric thread ran that late (the process was stopped, swapped out or starved) — in
    /// a stall that ended at most `within` ago or is still going on, its length in ms.
    /// Peers may have suspected and excluded this node meanwhile: a group that then finds
    /// its peers gone says it was excluded, not that they failed. The default (and the
    /// sim, whose paused nodes hear `FailureReason::Excluded` from each peer) says `None`.
    fn stall_ms(&self, within: Duration) -> Option<u64> {
        let _ = within;
        None
    }

    /// Closes every link gracefully and releases the endpoint's resources; later calls
    /// fail with [`Error::Closed`].
    fn close(&self);
}
