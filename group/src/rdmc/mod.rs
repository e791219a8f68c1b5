//! RDMC: large messages by block-pipelined multicast (the RDMC paper; Derecho §3.3, §3.6).
//!
//! An [`RdmcGroup`] is one node's part of one *RDMC group*: a fixed list of members whose
//! first member, the *root*, is the only one that sends (RDMC §4.1; an application that
//! wants several senders makes one group per sender over the same members). It is a
//! sans-IO core like [`crate::Engine`]: it reads its own registered region, takes inputs
//! (`send`, `release`, `handle_peer_failed`), and returns the one-sided writes to post
//! ([`RdmcGroup::drain_writes`]) and what happened ([`RdmcGroup::poll_event`]). No thread,
//! socket or clock inside.
//!
//! ## How a message moves
//!
//! Each member registers **one region**, sized once and reused for every message: a
//! header of control words, then a window of [`RdmcConfig::window_messages`] buffers of
//! [`RdmcConfig::message_bytes_max`] each; message `seq` uses buffer `(seq - 1) % window`
//! (the root's buffers are its send buffers; the application fills one in place, or
//! [`RdmcGroup::send`] copies into it). Memory per member and group is therefore
//! bounded and stated: [`RdmcGroup::region_bytes`]. That is address space: the fabric
//! allocates a region's pages when they are first written (heap and shm regions; memory
//! a device pins at registration is the exception), and once a message is done with
//! ([`RdmcGroup::release`] on a receiver, [`RdmcGroup::reclaim_buffer`] for a root's send
//! buffer) the pages of its buffer past [`RDMC_RESIDENT_BYTES`] go back to the kernel.
//! So a member's resident RDMC memory, when idle, is at most `RDMC_RESIDENT_BYTES` per
//! buffer however large the messages were, and messages up to that size reuse resident
//! pages.
//!
//! 1. **Ready.** A member that releases a message writes how many messages it has
//!    released into the root's `ready[rank]` word (an SST-style column; RDMC's
//!    `ready_for_block`, per message rather than per block because each buffer is sized
//!    once for a whole message).
//! 2. **Announcement.** When every member has released message `seq - window` (so the
//!    buffer is free everywhere), the root writes the size and then, as its guard, the
//!    sequence number into announcement entry `(seq - 1) % window` of each member. A
//!    receiver learns a message and its size before any of its data arrives (RDMC's
//!    "incoming message" upcall: [`RdmcEvent::Incoming`]).
//! 3. **Blocks.** Every member computes the same [`schedule::Schedule`] from (member
//!    count, block count) and walks its own sends in step order. A block goes by one
//!    one-sided write into the receiver's buffer at the block's offset, followed (write,
//!    then release) by the sender's counter word `blocks_from[sender rank]` in the
//!    receiver's header. Writes from one peer land in issue order and every member posts
//!    all its sends of one message before any of the next, so the receiver knows from
//!    the schedules exactly which block of which message each counter increment brought.
//!    A send waits only for its block to have arrived (RDMC's asynchronous steps: sends
//!    and receives are decoupled).
//! 4. **Completion.** A member whose receives of a message have all landed and whose
//!    sends of it have all been posted reports [`RdmcEvent::Completed`], in sequence
//!    order; the oldest completed message stays in its buffer
//!    ([`RdmcGroup::read_message`], [`RdmcGroup::message_offset`]) until
//!    [`RdmcGroup::release`].
//! 5. **Failure.** A member's link failing ([`RdmcGroup::handle_peer_failed`]) ends the
//!    group: an unfinished message is reported as [`RdmcEvent::Failed`] and nothing more
//!    is sent. As in RDMC, the application (in Derecho: the view change) repairs by
//!    making a new group.
//!
//! At most `window_messages` ([`RDMC_WINDOW_MESSAGES_MAX`] at most) messages are in
//! flight per group: a root that has that many unreleased messages gets
//! [`Error::RdmcBusy`] ([`RdmcGroup::can_send`] says so beforehand) — flow control,
//! never unbounded memory.
//!
//! ## Two members, driven by hand
//!
//! ```
//! use spindle_group::rdmc::{RdmcConfig, RdmcEvent, RdmcGroup, ScheduleKind};
//! use spindle_transport_rdma::Region;
//!
//! let config = RdmcConfig { block_bytes: 1024, message_bytes_max: 8192,
//!     schedule: ScheduleKind::BinomialPipeline, window_messages: 1 };
//! let len = RdmcGroup::region_bytes(2, &config);
//! let regions = [Region::new_heap(1, len)?, Region::new_heap(1, len)?];
//! let mut root = RdmcGroup::new(10, vec![10, 11], config.clone(), regions[0].clone())?;
//! let mut receiver = RdmcGroup::new(11, vec![10, 11], config, regions[1].clone())?;
//! let message: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
//! root.send(&message)?;
//! let mut scratch = Vec::new();
//! let mut done = None;
//! for _ in 0..20 {
//!     for (i, g) in [&mut root, &mut receiver].into_iter().enumerate() {
//!         g.step();
//!         // The "fabric": copy each write into the peer's region.
//!         g.drain_writes(&mut scratch, |w, bytes| {
//!             let peer = &regions[(w.peer - 10) as usize];
//!             peer.write_bytes(w.offset, bytes)?;
//!             if let Some((at, value)) = w.guard {
//!                 peer.store_u64(at, value);
//!             }
//!             Ok(())
//!         });
//!         while let Some(event) = g.poll_event() {
//!             if let (1, RdmcEvent::Completed { seq, size_bytes }) = (i, event) {
//!                 done = Some((seq, size_bytes));
//!             }
//!         }
//!     }
//! }
//! assert_eq!(done, Some((1, 5000)));
//! assert_eq!(receiver.read_message()?, message);
//! # Ok::<(), spindle_group::Error>(())
//! ```

pub mod model;
pub mod schedule;

use std::collections::VecDeque;
use std::sync::Arc;

use spindle_transport_rdma::{NodeId, Region, WORD_BYTES, WRITE_BYTES_MAX};

pub use schedule::{Schedule, ScheduleKind, Transfer};

use crate::push::Push;
use crate::{Error, Result};

/// Largest [`RdmcConfig::window_messages`]: messages one RDMC group may have in flight,
/// each with its own buffer on every member.
pub const RDMC_WINDOW_MESSAGES_MAX: usize = 16;
/// Writes an [`RdmcGroup`] queues before [`RdmcGroup::drain_writes`] takes them; a step
/// stops issuing block sends at this bound (the rest go in later steps).
pub const RDMC_WRITES_QUEUED_MAX: usize = 64;
/// Events an [`RdmcGroup`] queues for [`RdmcGroup::poll_event`]: at most the incoming
/// and completed events of the messages in flight, and one failure.
pub const RDMC_EVENTS_QUEUED_MAX: usize = 2 * RDMC_WINDOW_MESSAGES_MAX + 1;
/// Smallest block size (one word, so every block offset stays word-aligned).
pub const RDMC_BLOCK_BYTES_MIN: usize = WORD_BYTES;
/// Largest message one group may carry (its buffer is registered memory).
pub const RDMC_MESSAGE_BYTES_MAX: usize = 512 << 20;

/// Bytes at the start of each RDMC buffer that stay resident once its message is done;
/// the pages past them, which only messages larger than this touched, are handed back to
/// the kernel (`Region::reclaim`) before the buffer takes another message. 16 MiB: the
/// 1–16 MiB samples of the issue (maps, tiles, frames) keep reusing their pages, a burst
/// of 64–256 MiB ones does not leave its memory behind.
pub const RDMC_RESIDENT_BYTES: usize = 16 << 20;

const _: () = assert!(RDMC_WINDOW_MESSAGES_MAX >= 1);
const _: () = assert!(RDMC_MESSAGE_BYTES_MAX <= spindle_transport_rdma::REGION_BYTES_MAX / 2);

/// How an RDMC group moves its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmcConfig {
    /// Block size in bytes: a message of `s` bytes moves as `ceil(s / block_bytes)`
    /// blocks. A multiple of 8, at most the fabric's `WRITE_BYTES_MAX`. The default,
    /// 1 MiB, was chosen by measurement (docs/benchmarks.md, "RDMC": best or within noise
    /// of the best on tcp and shm among 64 KiB–4 MiB).
    pub block_bytes: usize,
    /// The largest message, in bytes: each member's buffer is this big.
    pub message_bytes_max: usize,
    /// The block schedule.
    pub schedule: ScheduleKind,
    /// Messages in flight at once (1 to [`RDMC_WINDOW_MESSAGES_MAX`]): every member
    /// holds this many buffers of `message_bytes_max`.
    pub window_messages: usize,
}

impl Default for RdmcConfig {
    fn default() -> Self {
        RdmcConfig {
            block_bytes: 1 << 20,
            message_bytes_max: 64 << 20,
            schedule: ScheduleKind::BinomialPipeline,
            window_messages: 1,
        }
    }
}

impl RdmcConfig {
    /// Checks the settings against each other and the crate's bounds.
    pub fn validate(&self) -> Result<()> {
        if self.block_bytes < RDMC_BLOCK_BYTES_MIN
            || self.block_bytes % WORD_BYTES != 0
            || self.block_bytes > WRITE_BYTES_MAX
        {
            return Err(Error::Config(format!(
                "RDMC block_bytes ({}) must be a multiple of {WORD_BYTES} between \
                 {RDMC_BLOCK_BYTES_MIN} and {WRITE_BYTES_MAX}",
                self.block_bytes
            )));
        }
        if self.message_bytes_max == 0 || self.message_bytes_max > RDMC_MESSAGE_BYTES_MAX {
            return Err(Error::Config(format!(
                "RDMC message_bytes_max ({}) must lie between 1 and {RDMC_MESSAGE_BYTES_MAX}",
                self.message_bytes_max
            )));
        }
        if self.window_messages == 0 || self.window_messages > RDMC_WINDOW_MESSAGES_MAX {
            return Err(Error::Config(format!(
                "RDMC window_messages ({}) must lie between 1 and {RDMC_WINDOW_MESSAGES_MAX}",
                self.window_messages
            )));
        }
        let total =
            self.message_bytes_max.next_multiple_of(64) as u128 * self.window_messages as u128;
        if total > spindle_transport_rdma::REGION_BYTES_MAX as u128 / 2 {
            return Err(Error::Config(format!(
                "RDMC message_bytes_max ({}) times window_messages ({}) exceeds {} bytes",
                self.message_bytes_max,
                self.window_messages,
                spindle_transport_rdma::REGION_BYTES_MAX / 2
            )));
        }
        let blocks = self.message_bytes_max.div_ceil(self.block_bytes);
        if blocks > schedule::RDMC_BLOCKS_MAX as usize {
            return Err(Error::Config(format!(
                "RDMC message_bytes_max / block_bytes ({blocks} blocks) exceeds {}",
                schedule::RDMC_BLOCKS_MAX
            )));
        }
        Ok(())
    }
}

/// A one-sided write an [`RdmcGroup`] wants posted: the same shape as the engine's
/// [`crate::engine::Push`] (bytes of the local region written at the same offset of the
/// peer's, then the guard word released), posted the same way ([`Push::post`]).
pub type RdmcWrite = Push;

/// What an [`RdmcGroup`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmcEvent {
    /// A receiver learned of message `seq` of `size_bytes` before its data.
    Incoming {
        /// The message's sequence number (1, 2, … per group).
        seq: u64,
        /// Its size.
        size_bytes: usize,
    },
    /// Message `seq` is complete here: on a receiver every block has landed (read it with
    /// [`RdmcGroup::read_message`], then [`RdmcGroup::release`]); on the root every block
    /// has been posted and the send buffer may be reused.
    Completed {
        /// The message.
        seq: u64,
        /// Its size.
        size_bytes: usize,
    },
    /// The group failed: `peer` is unreachable (or broke the protocol). Message `seq`
    /// (0 if none was in flight) is not complete here and never will be; nothing more
    /// moves in this group.
    Failed {
        /// The message in flight, or 0.
        seq: u64,
        /// The member whose failure ended the group.
        peer: NodeId,
    },
}

/// The layout of a member's region: control words, then the window of buffers.
#[derive(Debug, Clone, Copy)]
struct Header {
    members: usize,
    window: usize,
    buffer_stride: usize,
}

impl Header {
    fn new(members: usize, config: &RdmcConfig) -> Header {
        Header {
            members,
            window: config.window_messages,
            buffer_stride: config.message_bytes_max.next_multiple_of(64),
        }
    }
    /// Announcement entry of `seq`: its guard word (the sequence number) …
    fn announce_seq(&self, seq: u64) -> usize {
        2 * self.entry(seq) * WORD_BYTES
    }
    /// … and its payload word (the size in bytes).
    fn announce_size(&self, seq: u64) -> usize {
        (2 * self.entry(seq) + 1) * WORD_BYTES
    }
    fn entry(&self, seq: u64) -> usize {
        assert!(seq >= 1, "sequence numbers start at 1");
        ((seq - 1) % self.window as u64) as usize
    }
    fn blocks_from(&self, rank: usize) -> usize {
        (2 * self.window + rank) * WORD_BYTES
    }
    fn ready(&self, rank: usize) -> usize {
        (2 * self.window + self.members + rank) * WORD_BYTES
    }
    fn data(&self) -> usize {
        ((2 * self.window + 2 * self.members) * WORD_BYTES).next_multiple_of(64)
    }
    fn buffer(&self, seq: u64) -> usize {
        self.data() + self.entry(seq) * self.buffer_stride
    }
    fn region_bytes(&self) -> usize {
        self.data() + self.window * self.buffer_stride
    }
}

/// One message in flight on this member.
#[derive(Debug)]
struct Active {
    seq: u64,
    size_bytes: usize,
    /// My sends, in step order, and how many are posted.
    sends: Vec<Transfer>,
    sends_posted: usize,
    /// Per peer rank: the blocks it sends me, in its issue order, and how many landed.
    expected: Vec<Vec<u32>>,
    landed_from: Vec<usize>,
    have: Vec<bool>,
    blocks_missing: usize,
    completed: bool,
}

impl Active {
    fn sends_done(&self) -> bool {
        self.sends_posted == self.sends.len()
    }
}

/// One node's part of one RDMC group. See the module docs.
#[derive(Debug)]
pub struct RdmcGroup {
    node: NodeId,
    members: Vec<NodeId>,
    rank: usize,
    config: RdmcConfig,
    region: Region,
    header: Header,
    /// Messages this member has released (a receiver) or completed (the root).
    released: u64,
    /// The last sequence number announced (root) or taken from an announcement.
    announced: u64,
    /// Root: messages written into their buffers and not yet announced (their sizes).
    staged: VecDeque<usize>,
    /// Messages in flight here, oldest first (at most `window_messages`).
    actives: VecDeque<Active>,
    /// Per peer rank: blocks I have written to it (the guard values), over all messages.
    sent_to: Vec<u64>,
    /// Per peer rank: its counter increments already attributed to a message.
    landed_taken: Vec<u64>,
    /// The last schedule computed, reused while the block count stays the same.
    schedule_cache: Option<Arc<Schedule>>,
    writes: VecDeque<RdmcWrite>,
    events: VecDeque<RdmcEvent>,
    failed: Option<NodeId>,
}

impl RdmcGroup {
    /// The bytes of the region each member registers for a group of `members` members:
    /// the header and `window_messages` buffers of `message_bytes_max`.
    pub fn region_bytes(members: usize, config: &RdmcConfig) -> usize {
        Header::new(members, config).region_bytes()
    }

    /// Node `node`'s part of the group `members` (the first is the root), with `region`
    /// registered on its endpoint, zeroed, of at least [`RdmcGroup::region_bytes`] bytes,
    /// under the same id on every member.
    pub fn new(
        node: NodeId,
        members: Vec<NodeId>,
        config: RdmcConfig,
        region: Region,
    ) -> Result<RdmcGroup> {
        config.validate()?;
        if members.is_empty() || members.len() > schedule::RDMC_MEMBERS_MAX as usize {
            return Err(Error::Config(format!(
                "an RDMC group has 1 to {} members, not {}",
                schedule::RDMC_MEMBERS_MAX,
                members.len()
            )));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != members.len() {
            return Err(Error::Config("RDMC members must be distinct".into()));
        }
        let rank = members.iter().position(|&m| m == node).ok_or_else(|| {
            Error::Config(format!("node {node} is not a member of the RDMC group"))
        })?;
        let need = RdmcGroup::region_bytes(members.len(), &config);
        if region.len() < need {
            return Err(Error::Config(format!(
                "RDMC region of {} bytes is below the {need} bytes the group needs",
                region.len()
            )));
        }
        let n = members.len();
        Ok(RdmcGroup {
            node,
            rank,
            header: Header::new(n, &config),
            members,
            config,
            region,
            released: 0,
            announced: 0,
            staged: VecDeque::new(),
            actives: VecDeque::new(),
            sent_to: vec![0; n],
            landed_taken: vec![0; n],
            schedule_cache: None,
            writes: VecDeque::new(),
            events: VecDeque::new(),
            failed: None,
        })
    }

    /// Where the buffer of message `seq` (1, 2, …) starts in the region of a member of a
    /// group of `members` members.
    pub fn buffer_offset(members: usize, config: &RdmcConfig, seq: u64) -> usize {
        Header::new(members, config).buffer(seq)
    }

    /// Where the first buffer starts in the region of a member of a group of `members`
    /// members, and the stride of the window's buffers (message `seq` is in buffer
    /// `(seq - 1) % window_messages`).
    pub fn buffers(members: usize, config: &RdmcConfig) -> (usize, usize) {
        let h = Header::new(members, config);
        (h.buffer(1), h.buffer_stride)
    }

    /// Messages this member has released (a receiver) or completed (the root).
    pub fn released(&self) -> u64 {
        self.released
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// This node's rank (0: the root).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The members, root first.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The member whose failure ended the group, if it has.
    pub fn failed(&self) -> Option<NodeId> {
        self.failed
    }

    /// True if a message is staged or in flight here.
    pub fn is_busy(&self) -> bool {
        !self.staged.is_empty() || !self.actives.is_empty()
    }

    /// Root: true if [`RdmcGroup::send`] would take a message now (the group has not
    /// failed and fewer than `window_messages` messages are unfinished here).
    pub fn can_send(&self) -> bool {
        self.rank == 0
            && self.failed.is_none()
            && self.next_seq() - 1 - self.released < self.header.window as u64
    }

    fn next_seq(&self) -> u64 {
        self.announced + self.staged.len() as u64 + 1
    }

    /// True when nothing is in flight and (on the root) every member has released every
    /// message announced so far: the group may be closed or dropped without cutting a
    /// transfer short.
    pub fn all_released(&self) -> bool {
        !self.is_busy()
            && (self.rank != 0
                || (1..self.members.len())
                    .all(|r| self.region.load_u64(self.header.ready(r)) >= self.released))
    }

    /// Root: where the buffer of the next message starts in the region (fill it, then
    /// [`RdmcGroup::send_in_place`]); valid while [`RdmcGroup::can_send`].
    pub fn next_send_offset(&self) -> usize {
        self.header.buffer(self.next_seq())
    }

    /// The region.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Root: multicasts `message` (copied into the next registered send buffer). Fails
    /// with [`Error::Config`] on a receiver, [`Error::RdmcBusy`] while `window_messages`
    /// messages are unfinished, [`Error::PayloadTooLarge`] above `message_bytes_max` (or
    /// for an empty message), and [`Error::RdmcFailed`] once the group failed.
    pub fn send(&mut self, message: &[u8]) -> Result<()> {
        self.check_can_send(message.len())?;
        self.region
            .write_bytes(self.header.buffer(self.next_seq()), message)?;
        self.staged.push_back(message.len());
        Ok(())
    }

    /// Root: multicasts the first `size_bytes` bytes the application already wrote in
    /// place at [`RdmcGroup::next_send_offset`]. Same errors as [`RdmcGroup::send`].
    pub fn send_in_place(&mut self, size_bytes: usize) -> Result<()> {
        self.check_can_send(size_bytes)?;
        self.staged.push_back(size_bytes);
        Ok(())
    }

    fn check_can_send(&self, len: usize) -> Result<()> {
        if let Some(peer) = self.failed {
            return Err(Error::RdmcFailed { peer });
        }
        if self.rank != 0 {
            return Err(Error::Config(format!(
                "node {} is not the root of its RDMC group",
                self.node
            )));
        }
        if !self.can_send() {
            return Err(Error::RdmcBusy);
        }
        if len == 0 || len > self.config.message_bytes_max {
            return Err(Error::PayloadTooLarge {
                len,
                max: self.config.message_bytes_max,
            });
        }
        Ok(())
    }

    fn oldest_completed(&self) -> Option<&Active> {
        self.actives.front().filter(|a| a.completed)
    }

    /// Receiver: where the oldest completed, unreleased message starts in the region and
    /// its size (the zero-copy read: [`RdmcGroup::region`] from there).
    pub fn message_offset(&self) -> Option<(usize, usize)> {
        self.oldest_completed()
            .map(|a| (self.header.buffer(a.seq), a.size_bytes))
    }

    /// Receiver: a copy of the oldest completed, unreleased message (for tests and small
    /// users; the zero-copy path is [`RdmcGroup::message_offset`]).
    pub fn read_message(&self) -> Result<Vec<u8>> {
        match self.message_offset() {
            Some((at, len)) => Ok(self.region.to_vec(at, len)?),
            None => Err(Error::Config("no completed RDMC message to read".into())),
        }
    }

    /// Gives back to the kernel the pages of message `seq`'s buffer past
    /// [`RDMC_RESIDENT_BYTES`], up to its `size_bytes` (nothing for a message no larger).
    /// Call it only while the buffer is idle: a receiver's does so itself on
    /// [`RdmcGroup::release`]; a root calls it for a send buffer once nothing will read
    /// it again (its message posted, no re-send pending) and before filling it anew.
    pub fn reclaim_buffer(&self, seq: u64, size_bytes: usize) {
        if size_bytes <= RDMC_RESIDENT_BYTES {
            return;
        }
        let at = self.header.buffer(seq) + RDMC_RESIDENT_BYTES;
        let len = size_bytes.min(self.config.message_bytes_max) - RDMC_RESIDENT_BYTES;
        // A refusal (an unexpected madvise error) only keeps the pages.
        if let Err(e) = self.region.reclaim(at, len) {
            tracing::debug!(seq, error = %e, "RDMC buffer pages kept");
        }
    }

    /// Receiver: the application is done with the oldest completed message; its buffer
    /// may take a later one (its pages past [`RDMC_RESIDENT_BYTES`] go back to the kernel
    /// first). (The root frees its send buffers on completion by itself.)
    pub fn release(&mut self) {
        if self.oldest_completed().is_some() {
            self.finish_oldest();
        }
    }

    /// A member's link failed: the group ends (see the module docs).
    pub fn handle_peer_failed(&mut self, peer: NodeId) {
        if self.failed.is_some() || peer == self.node || !self.members.contains(&peer) {
            return;
        }
        self.fail(peer);
    }

    fn fail(&mut self, peer: NodeId) {
        self.failed = Some(peer);
        let seq = self
            .actives
            .iter()
            .find(|a| !a.completed)
            .map(|a| a.seq)
            .unwrap_or(0);
        self.staged.clear();
        self.writes.clear();
        self.events.push_back(RdmcEvent::Failed { seq, peer });
        assert!(self.events.len() <= RDMC_EVENTS_QUEUED_MAX);
    }

    fn push_event(&mut self, event: RdmcEvent) {
        self.events.push_back(event);
        // Invariant: at most two events per message in flight, plus one failure.
        assert!(self.events.len() <= RDMC_EVENTS_QUEUED_MAX);
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<RdmcEvent> {
        self.events.pop_front()
    }

    /// Posts the queued writes through `post` (with the bytes each carries, read from the
    /// region into `scratch`). A write `post` refuses with `QueueFull` stays queued for
    /// the next call; any other error fails the group on that peer. Returns the writes
    /// posted.
    pub fn drain_writes(
        &mut self,
        scratch: &mut Vec<u8>,
        mut post: impl FnMut(&RdmcWrite, &[u8]) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        self.drain_writes_by(|w, region| {
            // No zero-fill first: the scratch is shared with the engine's small pushes,
            // so a block's length is usually a regrowth, and a 1 MiB memset per block
            // showed in profiles (docs/benchmarks.md, issue 14 "performance targets").
            scratch.clear();
            if let Err(e) = region.read_append(w.offset, w.len, scratch) {
                // Offsets come from this core, never from a peer: a bad one is a bug.
                unreachable!("RDMC write outside the region: {e}");
            }
            post(w, scratch)
        })
    }

    /// [`RdmcGroup::drain_writes`] for a poster that reads the bytes itself (from the
    /// region it is handed, at the write's offset) or moves none: the sim fabric's
    /// phantom writes of the RDMC completion table (`crate::rdmc_sim`) post a block's
    /// length only. Same queueing and failure rules.
    pub fn drain_writes_by(
        &mut self,
        mut post: impl FnMut(&RdmcWrite, &Region) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        let mut posted = 0;
        while let Some(w) = self.writes.front().copied() {
            match post(&w, &self.region) {
                Ok(()) => {
                    self.writes.pop_front();
                    posted += 1;
                }
                Err(spindle_transport_rdma::Error::QueueFull { .. }) => break,
                Err(e) => {
                    tracing::debug!(node = self.node, peer = w.peer, error = %e, "RDMC write failed");
                    self.fail(w.peer);
                    break;
                }
            }
        }
        posted
    }

    /// Runs the protocol once: announce, take landed blocks, issue the sends whose blocks
    /// are here, report completions. True if anything moved.
    pub fn step(&mut self) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let mut work = if self.rank == 0 {
            self.try_announce()
        } else {
            self.take_announcements()
        };
        if self.failed.is_some() {
            return true;
        }
        if !self.actives.is_empty() {
            work |= self.take_landed_blocks();
            if self.failed.is_some() {
                return true;
            }
            work |= self.issue_sends();
            work |= self.check_completed();
        }
        work
    }

    /// Hands the group a schedule computed elsewhere, used for its messages of that
    /// block count instead of computing one: the members of one group simulated in one
    /// process share a single copy (a schedule of 1025 members and 256 blocks holds
    /// 262,144 transfers; one per member would not fit in memory). It must be of this
    /// group's schedule kind and member count.
    pub fn share_schedule(&mut self, schedule: Arc<Schedule>) -> Result<()> {
        if schedule.kind() != self.config.schedule
            || schedule.members() as usize != self.members.len()
        {
            return Err(Error::Config(format!(
                "a shared RDMC schedule of {:?} for {} members does not fit a group of {:?} \
                 with {} members",
                schedule.kind(),
                schedule.members(),
                self.config.schedule,
                self.members.len()
            )));
        }
        self.schedule_cache = Some(schedule);
        Ok(())
    }

    fn schedule_for(&mut self, blocks: u32) -> Result<Arc<Schedule>> {
        if let Some(s) = &self.schedule_cache {
            if s.blocks() == blocks {
                return Ok(s.clone());
            }
        }
        let s = Arc::new(Schedule::new(
            self.config.schedule,
            self.members.len() as u32,
            blocks,
        )?);
        self.schedule_cache = Some(s.clone());
        Ok(s)
    }

    fn start(&mut self, seq: u64, size_bytes: usize) -> Result<()> {
        let blocks = size_bytes.div_ceil(self.config.block_bytes) as u32;
        let schedule = self.schedule_for(blocks)?;
        let n = self.members.len();
        let me = self.rank as u32;
        let mut expected = vec![Vec::new(); n];
        for t in schedule.receives_of(me) {
            expected[t.from as usize].push(t.block);
        }
        let is_root = self.rank == 0;
        self.actives.push_back(Active {
            seq,
            size_bytes,
            sends: schedule.sends_of(me),
            sends_posted: 0,
            expected,
            landed_from: vec![0; n],
            have: vec![is_root; blocks as usize],
            blocks_missing: if is_root { 0 } else { blocks as usize },
            completed: false,
        });
        // Invariant: no more messages in flight than buffers.
        assert!(self.actives.len() <= self.header.window);
        self.announced = seq;
        Ok(())
    }

    fn try_announce(&mut self) -> bool {
        let mut work = false;
        while let Some(&size_bytes) = self.staged.front() {
            let seq = self.announced + 1;
            // Every member must have released message seq - window: its buffer is free.
            let free_from = seq.saturating_sub(self.header.window as u64);
            let ready = (1..self.members.len())
                .all(|r| self.region.load_u64(self.header.ready(r)) >= free_from);
            if !ready {
                break;
            }
            if let Err(e) = self.start(seq, size_bytes) {
                // Sizes were checked at send; a schedule beyond its bounds is a config error.
                unreachable!("RDMC schedule for a checked message failed: {e}");
            }
            self.staged.pop_front();
            let (at_size, at_seq) = (
                self.header.announce_size(seq),
                self.header.announce_seq(seq),
            );
            self.region.store_u64(at_size, size_bytes as u64);
            self.region.store_u64(at_seq, seq);
            for r in 1..self.members.len() {
                self.writes.push_back(RdmcWrite {
                    peer: self.members[r],
                    region: self.region.id(),
                    offset: at_size,
                    len: WORD_BYTES,
                    guard: Some((at_seq, seq)),
                });
            }
            work = true;
        }
        work
    }

    fn take_announcements(&mut self) -> bool {
        let mut work = false;
        loop {
            let next = self.announced + 1;
            let seq = self.region.load_u64(self.header.announce_seq(next));
            if seq != next {
                // The entry still holds an older message (or nothing): wait. A newer one
                // than `next` breaks the protocol (the root must wait for our release).
                if seq > next {
                    tracing::warn!(node = self.node, seq, next, "RDMC announcement ahead");
                    let root = self.members[0];
                    self.fail(root);
                    return true;
                }
                return work;
            }
            let size_bytes = self.region.load_u64(self.header.announce_size(next));
            // Bytes from the root: check before use, never panic on them.
            if size_bytes == 0
                || size_bytes > self.config.message_bytes_max as u64
                || self.actives.len() >= self.header.window
                || self.start(next, size_bytes as usize).is_err()
            {
                tracing::warn!(
                    node = self.node,
                    seq,
                    size_bytes,
                    "RDMC announcement out of protocol"
                );
                let root = self.members[0];
                self.fail(root);
                return true;
            }
            self.push_event(RdmcEvent::Incoming {
                seq,
                size_bytes: size_bytes as usize,
            });
            work = true;
        }
    }

    fn take_landed_blocks(&mut self) -> bool {
        let mut work = false;
        let mut broken = None;
        for r in 0..self.members.len() {
            let count = self.region.load_u64(self.header.blocks_from(r));
            if count < self.landed_taken[r] {
                // A counter never goes back: protocol breach.
                broken = Some(self.members[r]);
                break;
            }
            let mut fresh = count - self.landed_taken[r];
            // Increments belong to the messages in order (each member posts all its sends
            // of a message before any of the next); some may belong to a message whose
            // announcement has not landed yet: they wait.
            for a in self.actives.iter_mut() {
                while fresh > 0 && a.landed_from[r] < a.expected[r].len() {
                    let block = a.expected[r][a.landed_from[r]] as usize;
                    a.landed_from[r] += 1;
                    // Invariant: the schedule delivers each block to each receiver once.
                    assert!(!a.have[block], "RDMC block {block} landed twice");
                    a.have[block] = true;
                    a.blocks_missing -= 1;
                    fresh -= 1;
                    self.landed_taken[r] += 1;
                    work = true;
                }
                if fresh == 0 {
                    break;
                }
            }
        }
        if let Some(peer) = broken {
            tracing::warn!(node = self.node, peer, "RDMC peer counter went backwards");
            self.fail(peer);
            return true;
        }
        work
    }

    fn issue_sends(&mut self) -> bool {
        let header = self.header;
        let block_bytes = self.config.block_bytes;
        let mut work = false;
        // Messages in order: the next one's sends only after all of this one's.
        for a in self.actives.iter_mut() {
            while !a.sends_done() && self.writes.len() < RDMC_WRITES_QUEUED_MAX {
                let t = a.sends[a.sends_posted];
                if !a.have[t.block as usize] {
                    break;
                }
                let peer = t.to as usize;
                self.sent_to[peer] += 1;
                let start = t.block as usize * block_bytes;
                let len = block_bytes.min(a.size_bytes - start);
                self.writes.push_back(RdmcWrite {
                    peer: self.members[peer],
                    region: self.region.id(),
                    offset: header.buffer(a.seq) + start,
                    len,
                    guard: Some((header.blocks_from(self.rank), self.sent_to[peer])),
                });
                a.sends_posted += 1;
                work = true;
            }
            if !a.sends_done() {
                break;
            }
        }
        work
    }

    fn check_completed(&mut self) -> bool {
        // Complete only once the fabric has taken every write: it reads the block bytes
        // from these buffers when they are drained.
        if !self.writes.is_empty() {
            return false;
        }
        let mut done = Vec::new();
        for a in self.actives.iter_mut() {
            if a.completed {
                continue;
            }
            if a.blocks_missing > 0 || !a.sends_done() {
                break;
            }
            a.completed = true;
            done.push((a.seq, a.size_bytes));
        }
        let work = !done.is_empty();
        for (seq, size_bytes) in done {
            self.push_event(RdmcEvent::Completed { seq, size_bytes });
        }
        if self.rank == 0 {
            // The root's sends are posted (the fabric copied the bytes): its send
            // buffers are free again.
            while self.oldest_completed().is_some() {
                self.finish_oldest();
            }
        }
        work
    }

    fn finish_oldest(&mut self) {
        let Some(a) = self.actives.pop_front() else {
            return;
        };
        // Invariant: messages finish in sequence order.
        assert_eq!(a.seq, self.released + 1);
        self.released = a.seq;
        if self.rank != 0 {
            // Idle now: every block landed and every relay of it was posted, and the root
            // writes this buffer again only after the ready word below.
            self.reclaim_buffer(a.seq, a.size_bytes);
            let at = self.header.ready(self.rank);
            self.region.store_u64(at, self.released);
            self.writes.push_back(RdmcWrite {
                peer: self.members[0],
                region: self.region.id(),
                offset: at,
                len: WORD_BYTES,
                guard: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver(members: usize) -> (RdmcGroup, Region) {
        let config = RdmcConfig {
            block_bytes: 64,
            message_bytes_max: 1024,
            schedule: ScheduleKind::BinomialPipeline,
            window_messages: 1,
        };
        let region = Region::new_heap(1, RdmcGroup::region_bytes(members, &config)).unwrap();
        let ids = (1..=members as NodeId).collect();
        (
            RdmcGroup::new(2, ids, config, region.clone()).unwrap(),
            region,
        )
    }

    #[test]
    fn an_announcement_out_of_protocol_fails_the_group_without_panic() {
        for (seq, size) in [(1u64, 0u64), (1, 1025), (2, 10), (u64::MAX, u64::MAX)] {
            let (mut g, region) = receiver(3);
            // Window 1: entry 0 for every sequence number.
            region.store_u64(WORD_BYTES, size);
            region.store_u64(0, seq);
            assert!(g.step());
            assert_eq!(g.poll_event(), Some(RdmcEvent::Failed { seq: 0, peer: 1 }));
            assert_eq!(g.failed(), Some(1));
            assert!(!g.step());
        }
    }

    #[test]
    fn a_peer_counter_going_backwards_fails_the_group() {
        let (mut g, region) = receiver(3);
        region.store_u64(WORD_BYTES, 64);
        region.store_u64(0, 1);
        g.step();
        assert_eq!(
            g.poll_event(),
            Some(RdmcEvent::Incoming {
                seq: 1,
                size_bytes: 64
            })
        );
        // One block among three members: rank 1 (node 2) gets it from the root and
        // forwards it to its twin, rank 2 (the write goes nowhere here).
        region.store_u64(g.header.blocks_from(0), 1);
        g.step();
        assert_eq!(g.drain_writes(&mut Vec::new(), |_, _| Ok(())), 1);
        g.step();
        assert_eq!(
            g.poll_event(),
            Some(RdmcEvent::Completed {
                seq: 1,
                size_bytes: 64
            })
        );
        region.store_u64(g.header.blocks_from(0), 0);
        g.step();
        assert_eq!(g.poll_event(), Some(RdmcEvent::Failed { seq: 0, peer: 1 }));
    }

    /// A released buffer keeps its first `RDMC_RESIDENT_BYTES` and gives the pages past
    /// them back (they read as zeros), and the next message larger than that arrives
    /// intact into the same buffer.
    #[test]
    fn a_released_buffer_gives_back_its_pages_past_the_resident_bytes() {
        let config = RdmcConfig {
            block_bytes: 1 << 20,
            message_bytes_max: RDMC_RESIDENT_BYTES + (4 << 20),
            schedule: ScheduleKind::BinomialPipeline,
            window_messages: 1,
        };
        let len = RdmcGroup::region_bytes(2, &config);
        let regions = [
            Region::new_heap(1, len).unwrap(),
            Region::new_heap(1, len).unwrap(),
        ];
        let mut root =
            RdmcGroup::new(10, vec![10, 11], config.clone(), regions[0].clone()).unwrap();
        let mut rx = RdmcGroup::new(11, vec![10, 11], config.clone(), regions[1].clone()).unwrap();
        let size = config.message_bytes_max - 8;
        let at = RdmcGroup::buffer_offset(2, &config, 1);
        let mut scratch = Vec::new();
        // One step of both members, their writes applied; whether the receiver completed.
        let mut pump = |root: &mut RdmcGroup, rx: &mut RdmcGroup| {
            let mut done = false;
            for g in [root, rx] {
                g.step();
                g.drain_writes(&mut scratch, |w, bytes| {
                    let peer = &regions[(w.peer - 10) as usize];
                    peer.write_bytes(w.offset, bytes)?;
                    if let Some((at, value)) = w.guard {
                        peer.store_u64(at, value);
                    }
                    Ok(())
                });
                while let Some(e) = g.poll_event() {
                    done |= matches!(e, RdmcEvent::Completed { .. }) && g.node() == 11;
                }
            }
            done
        };
        for round in 1..=2u8 {
            for _ in 0..50 {
                if root.can_send() {
                    break;
                }
                pump(&mut root, &mut rx);
            }
            let message = vec![round; size];
            root.send(&message).unwrap();
            let done = (0..200).any(|_| pump(&mut root, &mut rx));
            assert!(done, "round {round}: the message completed");
            assert!(
                rx.read_message().unwrap() == message,
                "round {round}: intact"
            );
            rx.release();
            let kept = regions[1].to_vec(at, RDMC_RESIDENT_BYTES).unwrap();
            assert!(kept.iter().all(|b| *b == round), "resident bytes kept");
            // The pages wholly past the resident bytes read as zeros: given back.
            let page = spindle_transport_rdma::page_bytes();
            let tail_from = (at + RDMC_RESIDENT_BYTES).next_multiple_of(page);
            let tail_to = (at + size) / page * page;
            let tail = regions[1].to_vec(tail_from, tail_to - tail_from).unwrap();
            assert!(
                tail.iter().all(|b| *b == 0),
                "round {round}: pages given back"
            );
            // The root's send buffer is given back by its owner (the engine) the same way.
            root.reclaim_buffer(1, size);
            let tail = regions[0].to_vec(tail_from, tail_to - tail_from).unwrap();
            assert!(
                tail.iter().all(|b| *b == 0),
                "round {round}: send pages given back"
            );
        }
    }

    #[test]
    fn config_and_membership_are_checked() {
        let config = RdmcConfig::default();
        assert!(config.validate().is_ok());
        for bad in [
            RdmcConfig {
                block_bytes: 7,
                ..config.clone()
            },
            RdmcConfig {
                block_bytes: WRITE_BYTES_MAX + 8,
                ..config.clone()
            },
            RdmcConfig {
                message_bytes_max: 0,
                ..config.clone()
            },
            RdmcConfig {
                block_bytes: 8,
                message_bytes_max: 8 << 20,
                ..config.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let small = RdmcConfig {
            message_bytes_max: 64,
            block_bytes: 8,
            ..config
        };
        let region = Region::new_heap(1, RdmcGroup::region_bytes(2, &small)).unwrap();
        assert!(RdmcGroup::new(9, vec![1, 2], small.clone(), region.clone()).is_err());
        assert!(RdmcGroup::new(1, vec![1, 1], small.clone(), region.clone()).is_err());
        let mut root = RdmcGroup::new(1, vec![1, 2], small.clone(), region.clone()).unwrap();
        assert!(matches!(
            root.send(&[0; 65]),
            Err(Error::PayloadTooLarge { .. })
        ));
        assert!(root.can_send());
        root.send(&[1; 64]).unwrap();
        assert!(!root.can_send());
        assert!(matches!(root.send(&[1; 8]), Err(Error::RdmcBusy)));
        root.handle_peer_failed(2);
        assert!(matches!(
            root.send(&[1; 8]),
            Err(Error::RdmcFailed { peer: 2 })
        ));
        let mut receiver = RdmcGroup::new(2, vec![1, 2], small, region).unwrap();
        assert!(receiver.send(&[1; 8]).is_err());
        // A shared schedule must be of the group's kind and member count.
        let chain = Arc::new(Schedule::new(ScheduleKind::Chain, 2, 4).unwrap());
        assert!(receiver.share_schedule(chain).is_err());
        let three = Arc::new(Schedule::new(ScheduleKind::BinomialPipeline, 3, 4).unwrap());
        assert!(receiver.share_schedule(three).is_err());
        let fits = Arc::new(Schedule::new(ScheduleKind::BinomialPipeline, 2, 4).unwrap());
        assert!(receiver.share_schedule(fits).is_ok());
    }
}
