//! Large messages in a subgroup's total order (Derecho §3.6): the engine's side of the
//! subgroup's RDMC groups.
//!
//! A subgroup with an RDMC configuration ([`crate::SubgroupSpec::rdmc`]) has one
//! [`RdmcGroup`] per sender, made at view installation from the view (root = that sender,
//! then the other members in subgroup order; region ids from [`rdmc_region_id`]) and
//! dropped with the engine at the view change. A sender writes a large message into its
//! next send buffer and announces it in its next SMC slot ([`RDMC_LEN`]: RDMC sequence
//! number and size), so the slot sequence keeps the round-robin order; the RDMC group
//! moves the bytes. A member counts that slot as **received** (its `received_num` for
//! the sender moves past it) only once the RDMC transfer of that message completed
//! locally, so stability — the minimum over members — waits for every member to hold the
//! whole message, exactly as for SMC, and the ragged trim of a view change never keeps an
//! incomplete one. Delivery does not copy the message: the delivery batch holds an
//! [`InPlace`] view of the RDMC buffer, which **pins** the buffer until the batch is
//! recycled or dropped (the runtime does so when the upcall returns), and the buffer is
//! released — its ready word posted to the root — only then, oldest first (RDMC paper §3:
//! the receive buffer is the application's until it is done). A sender reuses a send
//! buffer only once the message it held is consumed by every member (as a slot is),
//! posted, and no longer pinned by its own delivery, so a message past a trim can still
//! be re-sent from it in the next view. Pins bound nothing new: a buffer held keeps its
//! sender at the RDMC window, as a slow receiver does.
//!
//! An announcement slot stays writable by its sender after it was received (a peer
//! writes this node's memory), so what it announced is recorded when it is received
//! (committed, for an own message), and delivery goes by that record ([`Announced`],
//! [`Large::check_unchanged`]), never by the slot's words read again: a slot that no
//! longer says what it said is the sender's breach, reported, not a panic here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spindle_transport_rdma::{NodeId, PeerWrites, Region, RegionId, WORD_BYTES};

use crate::error::Result;
use crate::layout::{rdmc_region_id, Geometry, SubgroupSpec, RDMC_LEN, SLOT_HEADER_BYTES};
use crate::push::{Push, PushBytes};
use crate::rdmc::{RdmcConfig, RdmcEvent, RdmcGroup, RDMC_WINDOW_MESSAGES_MAX};
use crate::smc::LargeTx;

/// The subgroup's RDMC groups as one member sees them.
pub(crate) struct Large {
    /// Per sender rank: this node's part of that sender's RDMC group.
    groups: Vec<RdmcGroup>,
    config: RdmcConfig,
    /// This node's sender rank, if it sends.
    own: Option<usize>,
    /// Per sender rank: messages completed here and not yet released, oldest first (at
    /// most the RDMC window).
    completed: Vec<VecDeque<Completed>>,
    /// Per sender rank: the buffers an [`InPlace`] delivery pins, one bit per window
    /// entry (`(seq - 1) % window`); cleared when the last clone of the view drops.
    pins: Vec<Arc<AtomicU64>>,
    /// Per sender rank: the RDMC sequence number the next announcement must carry.
    next_seq: Vec<u64>,
    /// Own messages committed and whose send buffer is not free yet: `(seq, slot index,
    /// size)`.
    own_pending: VecDeque<(u64, u64, usize)>,
    /// Per sender rank: the latest message whose buffer was found pinned when it was
    /// needed (asked for once: [`Large::take_wanted`]).
    asked: Vec<u64>,
    /// A pinned buffer is needed since the last [`Large::take_wanted`].
    wanted: bool,
    /// Unparks the predicate thread when a pin goes (it may go on another thread).
    waker: Option<PinWaker>,
}

/// What a dropped pin calls to wake the predicate thread.
pub(crate) type PinWaker = Arc<dyn Fn() + Send + Sync>;

impl Large {
    /// The RDMC groups of `spec` (numbered from `first` in the layout) for `node`, and the
    /// sender side shared with the ring when `node` sends.
    pub(crate) fn new(
        node: NodeId,
        vid: u32,
        spec: &SubgroupSpec,
        config: &RdmcConfig,
        first: usize,
        mut register: impl FnMut(RegionId, usize) -> Result<Region>,
    ) -> Result<(Large, Option<LargeTx>)> {
        let mut groups = Vec::new();
        let mut tx = None;
        let own = spec.senders.iter().position(|s| *s == node);
        let senders = spec.senders.len();
        let pins: Vec<Arc<AtomicU64>> = (0..senders).map(|_| Arc::new(AtomicU64::new(0))).collect();
        for (r, sender) in spec.senders.iter().enumerate() {
            let mut members = vec![*sender];
            members.extend(spec.members.iter().copied().filter(|m| m != sender));
            let bytes = RdmcGroup::region_bytes(members.len(), config);
            let region = register(rdmc_region_id(vid, first + r), bytes)?;
            // Any member of the transfer may relay blocks or acknowledge into it; a node
            // outside the subgroup may not write it at all.
            let others = members.iter().copied().filter(|m| *m != node);
            region.limit_peer_writes(PeerWrites::whole_to(others, region.len())?)?;
            // A peer's write into a buffer a delivery holds in place is refused where this
            // process applies it; no peer writes an own send buffer at all.
            let (at, stride) = RdmcGroup::buffers(members.len(), config);
            let watched = if own == Some(r) {
                Arc::new(AtomicU64::new(u64::MAX))
            } else {
                Arc::clone(&pins[r])
            };
            region.watch_pins(watched, at, stride, config.window_messages)?;
            if own == Some(r) {
                tx = Some(LargeTx::new(region.clone(), members.len(), config.clone()));
            }
            groups.push(RdmcGroup::new(node, members, config.clone(), region)?);
        }
        Ok((
            Large {
                groups,
                config: config.clone(),
                own,
                completed: vec![VecDeque::new(); senders],
                pins,
                next_seq: vec![1; senders],
                own_pending: VecDeque::new(),
                asked: vec![0; senders],
                wanted: false,
                waker: None,
            },
            tx,
        ))
    }

    /// The region ids of the groups (one per sender).
    pub(crate) fn regions(&self) -> impl Iterator<Item = RegionId> + '_ {
        self.groups.iter().map(|g| g.region().id())
    }

    /// Runs every group once and takes its events. `Err` names the member whose failure
    /// (or breach) ended a group.
    pub(crate) fn step(&mut self) -> std::result::Result<bool, (NodeId, String)> {
        let mut work = false;
        for (r, g) in self.groups.iter_mut().enumerate() {
            work |= g.step();
            while let Some(e) = g.poll_event() {
                match e {
                    RdmcEvent::Completed { seq, size_bytes } if Some(r) != self.own => {
                        self.completed[r].push_back(Completed {
                            seq,
                            size_bytes,
                            slot: None,
                            delivered: false,
                        });
                        // Invariant: a receiver holds at most a window of messages.
                        assert!(self.completed[r].len() <= RDMC_WINDOW_MESSAGES_MAX);
                    }
                    RdmcEvent::Failed { seq, peer } => {
                        let root = g.members()[0];
                        return Err((
                            peer,
                            format!("the RDMC group of sender {root} failed (message {seq})"),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(work)
    }

    /// The own message in slot `k` (just committed) goes out by RDMC. An error when the
    /// slot's announcement is not the next own RDMC message: this node's senders write
    /// them in RDMC order (`LargeTx::order`), so something else rewrote this node's ring
    /// — a peer that maps its memory (shm), which backends that apply their peers' writes
    /// refuse (`Region::limit_peer_writes`).
    pub(crate) fn on_commit(
        &mut self,
        region: &Region,
        geom: &Geometry,
        k: u64,
    ) -> std::result::Result<(), String> {
        let Some(own) = self.own else { return Ok(()) };
        let (seq, size) = announcement(region, geom, own, k);
        if seq != self.next_seq[own] {
            return Err(format!(
                "this node's own slot {k} announces RDMC message {seq}, expected {}: its \
                 ring was overwritten",
                self.next_seq[own]
            ));
        }
        self.next_seq[own] += 1;
        self.own_pending.push_back((seq, k, size as usize));
        if let Err(e) = self.groups[own].send_in_place(size as usize) {
            // Only a failed group refuses (LargeTx bounds the window): its Failed event
            // stops the subgroup.
            tracing::debug!(seq, error = %e, "RDMC send refused");
        }
        Ok(())
    }

    /// How many own messages' send buffers are free: those consumed by every member
    /// (`consumed(k)` for their slot) and completed by the RDMC group. A freed buffer's
    /// pages past `RDMC_RESIDENT_BYTES` go back to the kernel here, before the caller
    /// publishes it to the senders (`LargeTx::freed`), while nothing reads or writes it.
    pub(crate) fn free_own(&mut self, consumed: impl Fn(u64) -> bool) -> Option<u64> {
        let own = self.own?;
        let posted = self.groups[own].released();
        let mut freed = None;
        while let Some(&(seq, k, size)) = self.own_pending.front() {
            if seq > posted || !consumed(k) {
                break;
            }
            if self.pinned(own, seq) {
                // The next own message wants this buffer: ask for it.
                self.ask_if_pinned(own, seq + self.config.window_messages as u64);
                break;
            }
            self.own_pending.pop_front();
            self.groups[own].reclaim_buffer(seq, size);
            freed = Some(seq);
        }
        freed
    }

    /// Receive predicate, for the announcement in slot `k` of sender `rank`: `Ok(true)`
    /// when its message is complete here (the slot counts as received), `Ok(false)` while
    /// it is not, `Err` when the announcement breaks the protocol.
    pub(crate) fn receive(
        &mut self,
        region: &Region,
        geom: &Geometry,
        rank: usize,
        k: u64,
    ) -> std::result::Result<bool, String> {
        let (seq, size) = announcement(region, geom, rank, k);
        if seq != self.next_seq[rank] {
            return Err(format!(
                "slot {k} announces RDMC message {seq}, expected {}",
                self.next_seq[rank]
            ));
        }
        if size == 0 || size > self.config.message_bytes_max as u64 {
            return Err(format!(
                "slot {k} announces an RDMC message of {size} bytes, the largest is {}",
                self.config.message_bytes_max
            ));
        }
        let Some(c) = self.completed[rank].iter_mut().find(|c| c.seq == seq) else {
            // Its buffer still holds an older message a delivery pins: ask for it.
            self.ask_if_pinned(rank, seq);
            return Ok(false);
        };
        if c.size_bytes as u64 != size {
            return Err(format!(
                "RDMC message {seq} has {} bytes, its slot announced {size}",
                c.size_bytes
            ));
        }
        // What delivery goes by: the slot's words may change from here on.
        c.slot = Some(k);
        self.next_seq[rank] += 1;
        Ok(true)
    }

    /// The size of the message announced in slot `k` of sender `rank`, read from the slot
    /// (an own one: a received message's is [`Large::announced`]).
    pub(crate) fn size(region: &Region, geom: &Geometry, rank: usize, k: u64) -> usize {
        announcement(region, geom, rank, k).1 as usize
    }

    /// What slot `k` of sender `rank` announced when it was received ([`Large::receive`]),
    /// or, for an own message, committed ([`Large::on_commit`]), while it is not
    /// delivered yet; `None` if it announced no RDMC message then.
    pub(crate) fn announced(&self, rank: usize, k: u64) -> Option<Announced> {
        if Some(rank) == self.own {
            return self
                .own_pending
                .iter()
                .find(|p| p.1 == k)
                .map(|&(seq, _, size)| Announced { seq, size });
        }
        self.completed[rank]
            .iter()
            .find(|c| c.slot == Some(k) && !c.delivered)
            .map(|c| Announced {
                seq: c.seq,
                size: c.size_bytes,
            })
    }

    /// Before slot `k` of sender `rank` is delivered: what it announced when it was
    /// received ([`Large::announced`]) if that was an RDMC message, `None` if it was not,
    /// and `Err` (what changed) when the slot no longer says so — its length word
    /// (`len_word`, as the caller read it) or its announcement was rewritten since.
    /// Delivery goes by the record, not by the words read here.
    pub(crate) fn check_unchanged(
        &self,
        region: &Region,
        geom: &Geometry,
        rank: usize,
        k: u64,
        len_word: u64,
    ) -> std::result::Result<Option<Announced>, String> {
        match (self.announced(rank, k), len_word == RDMC_LEN) {
            (None, false) => Ok(None),
            (None, true) => Err(format!(
                "message {k} was overwritten before delivery: its slot announces an RDMC \
                 message, which it did not when it was received"
            )),
            (Some(a), false) => Err(format!(
                "message {k} was overwritten before delivery: its slot announced RDMC \
                 message {} when it was received, its length word is now {len_word}",
                a.seq
            )),
            (Some(a), true) => {
                let (seq, size) = announcement(region, geom, rank, k);
                if (seq, size) == (a.seq, a.size as u64) {
                    Ok(Some(a))
                } else {
                    Err(format!(
                        "message {k} was overwritten before delivery: its slot announced \
                         RDMC message {} of {} bytes when it was received, now message \
                         {seq} of {size} bytes",
                        a.seq, a.size
                    ))
                }
            }
        }
    }

    /// Delivers the message `a` of sender `rank` (as [`Large::check_unchanged`] gave it):
    /// a view of its first `len` bytes (at most its size: less with a delivery prefix)
    /// left in its buffer, which it pins until dropped. On a receiver the buffer is
    /// released by [`Large::release_unpinned`] once no view pins it.
    pub(crate) fn take(&mut self, rank: usize, a: Announced, len: usize) -> Result<InPlace> {
        let seq = a.seq;
        self.mark_delivered(rank, seq);
        let g = &self.groups[rank];
        let offset = RdmcGroup::buffer_offset(g.members().len(), &self.config, seq);
        g.region().check_range(offset, len)?;
        let bit = self.pin_bit(seq);
        let was = self.pins[rank].fetch_or(bit, Ordering::SeqCst);
        // Invariant: a buffer holds one message at a time, and is reused (by a later
        // message) only once released, which waits for its pin: a message is pinned once.
        assert!(was & bit == 0, "RDMC buffer pinned twice");
        // A peer's write that entered the buffer before the pin (none, by the protocol)
        // ends before the view reads it; later ones are refused.
        g.region().settle_pin(bit.trailing_zeros() as usize);
        Ok(InPlace {
            region: g.region().clone(),
            offset,
            len,
            _pin: Arc::new(Pin {
                pins: Arc::clone(&self.pins[rank]),
                bit,
                waker: self.waker.clone(),
            }),
        })
    }

    /// Passes over the message `a` of sender `rank` (a re-send this node delivered in an
    /// earlier view): its buffer is released as a delivered one.
    pub(crate) fn skip(&mut self, rank: usize, a: Announced) {
        self.mark_delivered(rank, a.seq);
    }

    /// Marks RDMC message `seq` of sender `rank` delivered (on a receiver). Its buffer
    /// is released once it and every older message of the sender are delivered and
    /// unpinned ([`Large::release_unpinned`]), whatever order a broken sender's slots
    /// brought them in.
    fn mark_delivered(&mut self, rank: usize, seq: u64) {
        if Some(rank) == self.own {
            return;
        }
        if let Some(c) = self.completed[rank]
            .iter_mut()
            .find(|c| c.seq == seq && !c.delivered)
        {
            c.delivered = true;
        }
    }

    /// Releases, oldest first, the received messages that are delivered and no longer
    /// pinned (their buffers may take later messages: the ready word goes to the root).
    /// True if it released any.
    pub(crate) fn release_unpinned(&mut self) -> bool {
        let mut released = false;
        for r in 0..self.groups.len() {
            while let Some(c) = self.completed[r].front() {
                if !c.delivered || self.pinned(r, c.seq) {
                    break;
                }
                self.completed[r].pop_front();
                self.groups[r].release();
                released = true;
            }
        }
        released
    }

    /// Registers what a dropped pin calls to unpark the predicate thread.
    pub(crate) fn set_waker(&mut self, waker: PinWaker) {
        self.waker = Some(waker);
    }

    /// True once after a delivery's pin held a buffer a later message needs: the
    /// application is asked to give its in-place views back (copying what it keeps).
    pub(crate) fn take_wanted(&mut self) -> bool {
        std::mem::take(&mut self.wanted)
    }

    /// Notes that message `seq` of sender `rank` needs its buffer, when an older
    /// message's delivery pins it (once per message).
    fn ask_if_pinned(&mut self, rank: usize, seq: u64) {
        if self.asked[rank] < seq && self.pinned(rank, seq) {
            self.asked[rank] = seq;
            self.wanted = true;
        }
    }

    fn pin_bit(&self, seq: u64) -> u64 {
        1 << ((seq - 1) % self.config.window_messages as u64)
    }

    fn pinned(&self, rank: usize, seq: u64) -> bool {
        self.pins[rank].load(Ordering::Acquire) & self.pin_bit(seq) != 0
    }

    /// Copies the message announced in slot `k` of sender `rank` into `out`, keeping it
    /// (an own message past a trim, re-sent in the next view: its send buffer is not
    /// reused before every member consumed it).
    pub(crate) fn peek(
        &self,
        region: &Region,
        geom: &Geometry,
        rank: usize,
        k: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let (seq, _) = announcement(region, geom, rank, k);
        let g = &self.groups[rank];
        let at = RdmcGroup::buffer_offset(g.members().len(), &self.config, seq);
        Ok(g.region().read_bytes(at, out)?)
    }

    /// Posts the groups' queued writes through `post` (see [`RdmcGroup::drain_writes_by`]),
    /// each with its bytes left in place in the group's region ([`PushBytes::in_place`]:
    /// a block goes to the fabric with `Endpoint::write_from`, not copied into a scratch
    /// first). The fabric takes the bytes before the post returns (contract item 9), as
    /// RDMC's rule — a message completes once its writes are posted — expects.
    pub(crate) fn drain(
        &mut self,
        mut post: impl FnMut(&Push, &PushBytes<'_>) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        self.groups
            .iter_mut()
            .map(|g| {
                g.drain_writes_by(|w, region| {
                    post(w, &PushBytes::in_place(region, w.offset, w.len))
                })
            })
            .sum()
    }
}

// The pins of one sender's buffers are the bits of one word.
const _: () = assert!(RDMC_WINDOW_MESSAGES_MAX <= u64::BITS as usize);

/// A received message completed here and not yet released.
#[derive(Debug, Clone, Copy)]
struct Completed {
    seq: u64,
    size_bytes: usize,
    /// The slot whose announcement of it was received ([`Large::receive`]), once it was.
    slot: Option<u64>,
    /// Handed to the application (its buffer waits only for the pin to go).
    delivered: bool,
}

/// What an announcement slot said when it was received (or committed, for an own
/// message): the RDMC message delivery goes by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Announced {
    /// Its RDMC sequence number.
    pub(crate) seq: u64,
    /// Its size in bytes (1 to the configuration's `message_bytes_max`).
    pub(crate) size: usize,
}

/// A delivered large message read in place in its RDMC buffer, which it pins (no later
/// message is written into it, and a sender does not refill it) until the last clone of
/// it drops.
#[derive(Debug, Clone)]
pub(crate) struct InPlace {
    region: Region,
    offset: usize,
    len: usize,
    _pin: Arc<Pin>,
}

impl InPlace {
    /// The message's bytes (its first `len`).
    pub(crate) fn bytes(&self) -> &[u8] {
        // The range was checked when the view was made, and the pin keeps every writer
        // off it (the guard of `Region::guarded_slice`) while `self` lives.
        self.region
            .guarded_slice(self.offset, self.len)
            .expect("an in-place message's range was checked when it was delivered")
    }
}

/// The pin of one RDMC buffer: its bit in the sender's pin word, cleared on drop (and
/// the predicate thread woken to release the buffer).
struct Pin {
    pins: Arc<AtomicU64>,
    bit: u64,
    waker: Option<PinWaker>,
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pin({:#x})", self.bit)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.pins.fetch_and(!self.bit, Ordering::AcqRel);
        if let Some(w) = &self.waker {
            w();
        }
    }
}

/// The RDMC sequence number and size an announcement slot carries.
fn announcement(region: &Region, geom: &Geometry, rank: usize, k: u64) -> (u64, u64) {
    let at = geom.slot(rank, k) + SLOT_HEADER_BYTES;
    (region.load_u64(at), region.load_u64(at + WORD_BYTES))
}
