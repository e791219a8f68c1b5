//! The one-sided write every sans-IO core of the crate queues (the engine's SST and SMC
//! pushes, the membership rows, RDMC's blocks) and the one loop that posts a queue of them
//! in order per peer.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ops::Deref;

use spindle_transport_rdma::{LocalRange, NodeId, Region, RegionId};

/// The bytes of a [`Push`] as the drains hand them to their poster: a range of the
/// node's own region, left in place (SST, SMC and membership pushes, and RDMC blocks of a
/// MiB or more), which [`Push::post`] hands to the fabric with
/// [`spindle_transport_rdma::Endpoint::write_from`] — no copy into a scratch first: over
/// shm one copy in all, from the local mapping into the peer's; tcp frames it from one
/// copy. Derefs to the bytes for a poster that wants them (the doc examples' fabrics): the
/// range is then read once, on first use, into a buffer of its own.
pub struct PushBytes<'a> {
    from: LocalRange<'a>,
    read: OnceCell<Vec<u8>>,
}

impl<'a> PushBytes<'a> {
    /// `len` bytes of the local `region` at `offset`, left in place. The range must lie
    /// inside the region (the cores compute it from their own layout).
    pub fn in_place(region: &'a Region, offset: usize, len: usize) -> Self {
        PushBytes {
            from: LocalRange {
                region,
                offset,
                len,
            },
            read: OnceCell::new(),
        }
    }

    /// The local range the bytes are in.
    pub fn local_range(&self) -> LocalRange<'a> {
        self.from
    }
}

impl Deref for PushBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let from = &self.from;
        self.read.get_or_init(|| {
            let mut out = Vec::new();
            if let Err(e) = from.region.read_append(from.offset, from.len, &mut out) {
                // Ranges come from this crate's cores, never from a peer: a bad one is a
                // bug.
                unreachable!("a push's range outside its region: {e}");
            }
            out
        })
    }
}

/// What [`Push::post`] takes: bytes already read (a slice, a `Vec`), or a [`PushBytes`],
/// whose bytes left in place go to the fabric by `Endpoint::write_from`.
pub trait PostBytes {
    /// The local range, when the bytes are left in place.
    fn local_range(&self) -> Option<LocalRange<'_>>;
    /// The bytes (read on first use when left in place).
    fn bytes(&self) -> &[u8];
}

impl PostBytes for [u8] {
    fn local_range(&self) -> Option<LocalRange<'_>> {
        None
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl PostBytes for Vec<u8> {
    fn local_range(&self) -> Option<LocalRange<'_>> {
        None
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl PostBytes for PushBytes<'_> {
    fn local_range(&self) -> Option<LocalRange<'_>> {
        Some(PushBytes::local_range(self))
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for PushBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushBytes")
            .field("offset", &self.from.offset)
            .field("len", &self.from.len)
            .finish()
    }
}

/// A one-sided write the engine wants posted: bytes `offset..offset + len` of the node's
/// own copy of region `region`, written at the same offset of `peer`'s copy; then, if
/// `guard` is set, the word at the guard offset stored with release semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Push {
    /// The member to write to.
    pub peer: NodeId,
    /// The SST region.
    pub region: RegionId,
    /// Where the bytes start.
    pub offset: usize,
    /// How many bytes.
    pub len: usize,
    /// `(guard_offset, guard_value)`: published after the bytes.
    pub guard: Option<(usize, u64)>,
}

impl Push {
    /// Posts this push on `endpoint` with `bytes` (what [`crate::Engine::drain_pushes`]
    /// hands out): a plain write, or a write then the guard's release.
    pub fn post<B: PostBytes + ?Sized>(
        &self,
        endpoint: &dyn spindle_transport_rdma::Endpoint,
        bytes: &B,
    ) -> spindle_transport_rdma::Result<()> {
        if let Some(from) = bytes.local_range() {
            return endpoint.write_from(self.peer, self.region, self.offset, from, self.guard);
        }
        let bytes = bytes.bytes();
        match self.guard {
            Some((at, value)) => {
                endpoint.write_then_release(self.peer, self.region, self.offset, bytes, at, value)
            }
            None => endpoint.write(self.peer, self.region, self.offset, bytes),
        }
    }
}

impl Push {
    /// Applies this push to `peer`, the peer's copy of the region mapped in this process
    /// (the in-process fabrics of tests, benchmarks and examples): the bytes — copied
    /// straight from the local region when left in place — then the guard, stored with
    /// release semantics.
    pub fn apply<B: PostBytes + ?Sized>(
        &self,
        peer: &Region,
        bytes: &B,
    ) -> spindle_transport_rdma::Result<()> {
        match bytes.local_range() {
            Some(from) => peer.copy_from(self.offset, from.region, from.offset, from.len)?,
            None => peer.write_bytes(self.offset, bytes.bytes())?,
        }
        if let Some((at, value)) = self.guard {
            peer.store_u64(at, value);
        }
        Ok(())
    }
}

/// Posts the pushes of `queue` in order per peer (see [`crate::Engine::drain_pushes`]); `region`
/// finds the local region a push reads from. Stops scanning once `peers_total` peers are
/// held. Returns how many were posted and the peers whose post failed for good (their
/// pushes are dropped).
pub(crate) fn drain_queue<'r>(
    queue: &mut VecDeque<Push>,
    peers_total: usize,
    region: impl Fn(RegionId) -> Option<&'r Region>,
    mut post: impl FnMut(&Push, &PushBytes<'_>) -> spindle_transport_rdma::Result<()>,
) -> (usize, Vec<NodeId>) {
    let mut posted = 0;
    let mut held: Vec<NodeId> = Vec::new();
    let mut failed: Vec<NodeId> = Vec::new();
    let mut kept = VecDeque::new();
    while let Some(push) = queue.pop_front() {
        if held.contains(&push.peer) {
            kept.push_back(push);
            if held.len() >= peers_total {
                break;
            }
            continue;
        }
        if failed.contains(&push.peer) {
            continue;
        }
        let Some(r) = region(push.region) else {
            continue;
        };
        if r.check_range(push.offset, push.len).is_err() {
            // Pushes come from the cores' own layouts: a range outside the region is a
            // bug, dropped rather than posted.
            continue;
        }
        // Left in place: the fabric copies the bytes from the region itself.
        match post(&push, &PushBytes::in_place(r, push.offset, push.len)) {
            Ok(()) => posted += 1,
            Err(spindle_transport_rdma::Error::QueueFull { .. }) => {
                held.push(push.peer);
                kept.push_back(push);
                if held.len() >= peers_total {
                    break;
                }
            }
            Err(_) => failed.push(push.peer),
        }
    }
    // What was not scanned keeps its place behind what was held (no allocation when
    // nothing was held, the common case).
    if !failed.is_empty() {
        queue.retain(|p| !failed.contains(&p.peer));
    }
    while let Some(p) = kept.pop_back() {
        queue.push_front(p);
    }
    (posted, failed)
}
