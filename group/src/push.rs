//! The one-sided write every sans-IO core of the crate queues (the engine's SST and SMC
//! pushes, the membership rows, RDMC's blocks) and the one loop that posts a queue of them
//! in order per peer.

use std::collections::VecDeque;

use spindle_transport_rdma::{NodeId, Region, RegionId};

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
    pub fn post(
        &self,
        endpoint: &dyn spindle_transport_rdma::Endpoint,
        bytes: &[u8],
    ) -> spindle_transport_rdma::Result<()> {
        match self.guard {
            Some((at, value)) => {
                endpoint.write_then_release(self.peer, self.region, self.offset, bytes, at, value)
            }
            None => endpoint.write(self.peer, self.region, self.offset, bytes),
        }
    }
}

/// Posts the pushes of `queue` in order per peer (see [`crate::Engine::drain_pushes`]); `region`
/// finds the local region a push reads from. Stops scanning once `peers_total` peers are
/// held. Returns how many were posted and the peers whose post failed for good (their
/// pushes are dropped).
pub(crate) fn drain_queue<'r>(
    queue: &mut VecDeque<Push>,
    scratch: &mut Vec<u8>,
    peers_total: usize,
    region: impl Fn(RegionId) -> Option<&'r Region>,
    mut post: impl FnMut(&Push, &[u8]) -> spindle_transport_rdma::Result<()>,
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
        // Grow only: a short push after a long one must not zero the long one's bytes
        // again (a memset per slot push).
        if scratch.len() < push.len {
            scratch.resize(push.len, 0);
        }
        let bytes = &mut scratch[..push.len];
        if r.read_bytes(push.offset, bytes).is_err() {
            continue;
        }
        match post(&push, bytes) {
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
