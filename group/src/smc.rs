//! SMC, the sender's side: a ring of `window_slots` slots in the sender's own SST region,
//! loaned to application threads for in-place construction (Spindle III-A).
//!
//! Application threads and the predicate thread share a ring without a lock: a slot index
//! is reserved by a compare-and-swap on `reserved`, filled in place, and marked ready in
//! `ready`; the predicate thread advances the committed frontier over ready slots and
//! pushes them. The receive predicate reserves slots the same way for null messages, so
//! nulls and application messages interleave in one sender order.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use spindle_transport_rdma::{NodeId, Region, WORD_BYTES};

use crate::error::{Error, Result};
use crate::layout::{DeliveryMode, Geometry, SubgroupId, NULL_LEN, RDMC_LEN, SLOT_HEADER_BYTES};
use crate::rdmc::{RdmcConfig, RdmcGroup};

/// How many times a sending thread that found the window full yields before it parks
/// ([`Sender::wait_for_room`]): a window that frees within a few scheduler turns costs no
/// wake-up, and one that does not costs no core.
pub const ROOM_SPIN_TRIES: u32 = 16;

/// The longest a thread parked for room sleeps before it looks again: a bound, not the
/// mechanism (the predicate thread wakes it when the window moves), so that no missed
/// wake-up can stall a writer for longer.
pub const ROOM_WAIT_SLICE: Duration = Duration::from_millis(1);

/// What wakes the predicate thread after a commit (set by the runtime).
pub(crate) type Waker = Box<dyn Fn() + Send + Sync>;

/// A sender's side of its RDMC group, shared by its application threads and the predicate
/// thread (Derecho §3.6): a large message is written in place into the next send buffer
/// of the sender's RDMC region and announced by a slot of the ring ([`RDMC_LEN`]: its
/// RDMC sequence number and size), so it takes its turn in the round-robin order.
pub(crate) struct LargeTx {
    pub(crate) region: Region,
    pub(crate) members: usize,
    pub(crate) config: RdmcConfig,
    /// Held while a large send takes its RDMC sequence number and its slot, so the
    /// announcements in the ring come in RDMC order whatever threads send.
    order: Mutex<()>,
    /// Large messages reserved so far (the next has RDMC sequence number `reserved + 1`).
    reserved: AtomicU64,
    /// Large messages whose send buffer may be reused: consumed by every member (as a
    /// slot is) and posted by the RDMC group. Set by the predicate thread.
    pub(crate) freed: AtomicU64,
}

impl LargeTx {
    /// True while every send buffer holds a message some member has not consumed.
    fn window_full(&self) -> bool {
        let in_flight = self
            .reserved
            .load(Ordering::Acquire)
            .saturating_sub(self.freed.load(Ordering::Acquire));
        in_flight >= self.config.window_messages as u64
    }

    pub(crate) fn new(region: Region, members: usize, config: RdmcConfig) -> LargeTx {
        LargeTx {
            region,
            members,
            config,
            order: Mutex::new(()),
            reserved: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }
}

/// Application threads parked in [`Sender::wait_for_room`] on a full window, and what
/// wakes them: the predicate thread, when it sees the window move
/// ([`Ring::wake_room_waiters`]), or the ring stopping ([`Ring::stop`]).
#[derive(Default)]
struct RoomWaiters {
    /// Threads parked or about to park: the predicate thread looks at nothing else while
    /// this is zero, so a ring nobody waits on costs one load per step.
    parked: AtomicU32,
    /// The window's position (`limit` + RDMC buffers freed) at the last wake-up: the
    /// predicate thread wakes the parked threads only when it moved.
    seen: AtomicU64,
    lock: Mutex<()>,
    moved: Condvar,
}

/// The ring shared by a sender's application threads and the predicate thread.
pub(crate) struct Ring {
    pub(crate) subgroup: SubgroupId,
    pub(crate) node: NodeId,
    pub(crate) region: Region,
    pub(crate) geom: Geometry,
    pub(crate) mode: DeliveryMode,
    pub(crate) sender_rank: usize,
    /// Next message index to hand out.
    reserved: AtomicU64,
    /// `ready[k % window_slots] == k + 1` once message `k` is filled and committed.
    ready: Box<[AtomicU64]>,
    /// Indices below this are known free (refreshed from the members' counters).
    limit: AtomicU64,
    /// Set when the engine stops (application sends then fail).
    pub(crate) stopped: AtomicBool,
    waker: OnceLock<Waker>,
    /// Held by the runtime while it posts writes when the early-lock-release technique is
    /// off (the Derecho baseline); commits then take it too.
    pub(crate) post_lock: Option<Arc<Mutex<()>>>,
    /// Large messages by RDMC, when the subgroup has them.
    pub(crate) large: Option<LargeTx>,
    room: RoomWaiters,
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("subgroup", &self.subgroup)
            .field("node", &self.node)
            .field("sender_rank", &self.sender_rank)
            .field("reserved", &self.reserved.load(Ordering::Relaxed))
            .finish()
    }
}

impl Ring {
    pub(crate) fn new(
        subgroup: SubgroupId,
        node: NodeId,
        region: Region,
        geom: Geometry,
        mode: DeliveryMode,
        sender_rank: usize,
        post_lock: Option<Arc<Mutex<()>>>,
    ) -> Ring {
        let ready = (0..geom.window_slots).map(|_| AtomicU64::new(0)).collect();
        let limit = AtomicU64::new(geom.window_slots as u64);
        Ring {
            subgroup,
            node,
            region,
            geom,
            mode,
            sender_rank,
            reserved: AtomicU64::new(0),
            ready,
            limit,
            stopped: AtomicBool::new(false),
            waker: OnceLock::new(),
            post_lock,
            large: None,
            room: RoomWaiters::default(),
        }
    }

    /// Stops the ring: application sends fail with [`Error::Wedged`] from now on, and
    /// threads parked for room wake to see it.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _g = self.room.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.room.moved.notify_all();
    }

    /// Where the window stands: it moved when this did (both terms only grow).
    fn window_mark(&self) -> u64 {
        let freed = self
            .large
            .as_ref()
            .map_or(0, |tx| tx.freed.load(Ordering::Acquire));
        self.refresh_limit().wrapping_add(freed)
    }

    /// True when a message of `len` bytes finds room now (or the ring stopped, which the
    /// send reports).
    fn has_room(&self, len: usize) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return true;
        }
        let large_room = match &self.large {
            Some(tx) if len > self.geom.slot_payload_bytes => !tx.window_full(),
            _ => true,
        };
        large_room && self.refresh_limit() > self.reserved()
    }

    /// Called by the predicate thread after each step: wakes the threads parked for room
    /// when the window moved since the last wake-up. No system call while nobody is
    /// parked or the window stands still.
    pub(crate) fn wake_room_waiters(&self) {
        // SeqCst, paired with the parking thread's increment: either this sees it, or
        // that thread's own check under the lock sees the window as it is now.
        if self.room.parked.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mark = self.window_mark();
        if self.room.seen.swap(mark, Ordering::AcqRel) != mark {
            let _g = self.room.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.room.moved.notify_all();
        }
    }

    pub(crate) fn set_waker(&self, waker: Waker) {
        let _ = self.waker.set(waker);
    }

    /// Messages reserved so far (sent, being built, or nulls).
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Recomputes which indices are free: index `k` may be reused once message `k - w` is
    /// consumed by every member (delivered in atomic mode, received in unordered mode).
    fn refresh_limit(&self) -> u64 {
        let g = &self.geom;
        let consumed = (0..g.members)
            .map(|m| match self.mode {
                DeliveryMode::Atomic => {
                    g.messages_before(self.sender_rank, self.region.load_u64(g.delivered_num(m)))
                }
                // A dare subgroup's ring is a local staging ring: the engine counts a
                // message as received when it hands it to the DARE core.
                DeliveryMode::Unordered | DeliveryMode::Dare(_) => {
                    self.region.load_u64(g.received_num(m, self.sender_rank))
                }
            })
            .min()
            .unwrap_or(0);
        // Peer-written counters: saturate rather than trust them not to overflow.
        let limit = consumed.saturating_add(g.window_slots as u64);
        self.limit.fetch_max(limit, Ordering::AcqRel).max(limit)
    }

    /// Reserves up to `want` consecutive indices; returns the first and how many.
    fn reserve(&self, want: u64) -> (u64, u64) {
        let mut cur = self.reserved.load(Ordering::Acquire);
        loop {
            let mut limit = self.limit.load(Ordering::Acquire);
            if cur + want > limit {
                limit = self.refresh_limit();
            }
            let n = want.min(limit.saturating_sub(cur));
            if n == 0 {
                return (cur, 0);
            }
            match self.reserved.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (cur, n),
                Err(now) => cur = now,
            }
        }
    }

    /// Writes slot `index`'s header and marks it ready.
    fn publish(&self, index: u64, len: u64) {
        let slot = self.geom.slot(self.sender_rank, index);
        self.region.store_u64(slot + WORD_BYTES, len);
        self.region.store_u64(slot, index + 1);
        // Release: the predicate thread's acquire of the tag sees the payload and header.
        self.ready[(index % self.geom.window_slots as u64) as usize]
            .store(index + 1, Ordering::Release);
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get() {
            w();
        }
    }

    /// Reserves up to `count` null messages (fewer if the window is short); returns how
    /// many were reserved. Called by the predicate thread only.
    pub(crate) fn reserve_nulls(&self, count: u64) -> u64 {
        let (first, n) = self.reserve(count);
        for k in first..first + n {
            self.publish(k, NULL_LEN);
        }
        n
    }

    /// Advances the committed frontier from `committed` over ready slots, up to `max`
    /// messages; returns the new frontier.
    pub(crate) fn advance_committed(&self, committed: u64, max: u64) -> u64 {
        let w = self.geom.window_slots as u64;
        let mut c = committed;
        while c - committed < max && self.ready[(c % w) as usize].load(Ordering::Acquire) == c + 1 {
            c += 1;
        }
        c
    }
}

/// An application's handle for sending in one subgroup. Cheap to clone; clones may send
/// from several threads at once (each message gets its own slot; one thread's messages
/// keep their order).
///
/// ```
/// # use spindle_group::{Engine, EngineConfig, View, Layout, SubgroupSpec, DeliveryMode};
/// # use spindle_transport_rdma::Region;
/// # let view = View::new(1, vec![1]);
/// # let spec = SubgroupSpec { id: 0, members: vec![1], senders: vec![1],
/// #     mode: DeliveryMode::Atomic, window_slots: 8, slot_payload_bytes: 64, rdmc: None,
/// #     delivery_prefix: None };
/// # let layout = Layout { subgroups: vec![spec] };
/// # let mut engine = Engine::new(1, view, layout, EngineConfig::default(),
/// #     |id, len| Ok(Region::new_heap(id, len)?))?;
/// use std::io::Write;
/// let sender = engine.sender(0)?;
/// let mut loan = sender.try_loan()?;   // a slot of the ring, in place
/// write!(loan, "temperature={}", 21)?; // built directly in the slot
/// let seq = loan.commit();             // the predicate thread pushes it
/// assert_eq!(seq, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sender {
    pub(crate) ring: Arc<Ring>,
}

impl Sender {
    /// The subgroup this handle sends in.
    pub fn subgroup(&self) -> SubgroupId {
        self.ring.subgroup
    }

    /// The largest payload one message may carry in a slot (a [`Loan`]).
    pub fn payload_bytes_max(&self) -> usize {
        self.ring.geom.slot_payload_bytes
    }

    /// The largest message [`Sender::try_send`] takes: the RDMC `message_bytes_max` when
    /// the subgroup moves large messages by RDMC, else the slot payload.
    pub fn message_bytes_max(&self) -> usize {
        match &self.ring.large {
            Some(tx) => tx.config.message_bytes_max.max(self.payload_bytes_max()),
            None => self.payload_bytes_max(),
        }
    }

    /// The sender sequence number the next message gets, unless another thread (or a
    /// null of the predicate thread) takes it first.
    pub fn next_seq(&self) -> u64 {
        self.ring.reserved()
    }

    /// Borrows the next slot. [`Error::WindowFull`] when every slot holds a message some
    /// member has not consumed yet (retry later; nothing is lost).
    pub fn try_loan(&self) -> Result<Loan> {
        let index = self.reserve_one()?;
        Ok(Loan {
            ring: Arc::clone(&self.ring),
            slot: Slot::new(index),
        })
    }

    /// Sends one message that `fill` builds in place in the next slot, lent for the call
    /// only: what a [`Loan`] does, without a handle to keep (so no reference to the ring
    /// is counted per message). `fill`'s `Ok` commits what it wrote and gives the sender
    /// sequence number; its `Err` sends a null in the slot's place, as a dropped loan
    /// does, and is handed back inside `Ok`. [`Error::WindowFull`] and [`Error::Wedged`]
    /// as [`Sender::try_loan`], before `fill` runs.
    ///
    /// ```
    /// # use spindle_group::{Engine, EngineConfig, View, Layout, SubgroupSpec, DeliveryMode};
    /// # use spindle_transport_rdma::Region;
    /// # let view = View::new(1, vec![1]);
    /// # let spec = SubgroupSpec { id: 0, members: vec![1], senders: vec![1],
    /// #     mode: DeliveryMode::Atomic, window_slots: 8, slot_payload_bytes: 64, rdmc: None,
    /// #     delivery_prefix: None };
    /// # let layout = Layout { subgroups: vec![spec] };
    /// # let mut engine = Engine::new(1, view, layout, EngineConfig::default(),
    /// #     |id, len| Ok(Region::new_heap(id, len)?))?;
    /// let sender = engine.sender(0)?;
    /// let sent = sender.try_send_with(|slot| {
    ///     slot.write_at(0, b"header")?;
    ///     slot.write_at(6, b" and body")
    /// })?;
    /// assert_eq!(sent?, 0);
    /// // A fill that fails sends a null in its place: the next message is number 2.
    /// let failed = sender.try_send_with(|slot| slot.write_at(60, b"past the slot"))?;
    /// assert!(failed.is_err());
    /// assert_eq!(sender.try_send(b"next")?, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_send_with<E>(
        &self,
        fill: impl FnOnce(&mut SlotFill<'_>) -> std::result::Result<(), E>,
    ) -> Result<std::result::Result<u64, E>> {
        let index = self.reserve_one()?;
        let mut slot = SlotFill {
            ring: &self.ring,
            slot: Slot::new(index),
        };
        Ok(fill(&mut slot).map(|()| slot.commit()))
    }

    /// Reserves the next index for one message.
    fn reserve_one(&self) -> Result<u64> {
        self.check_running()?;
        let (index, n) = self.ring.reserve(1);
        if n == 0 {
            return Err(Error::WindowFull {
                subgroup: self.ring.subgroup,
            });
        }
        Ok(index)
    }

    /// Sends `payload` as one message (a loan, a copy, a commit); returns its sender
    /// sequence number. A payload above the slot goes by RDMC when the subgroup has it
    /// (copied once into the registered send buffer), in the same order; one above
    /// [`Sender::message_bytes_max`] is [`Error::MessageTooLarge`] (or
    /// [`Error::PayloadTooLarge`] without RDMC). [`Error::WindowFull`] also when every
    /// RDMC send buffer holds a message some member has not consumed.
    pub fn try_send(&self, payload: &[u8]) -> Result<u64> {
        let max = self.payload_bytes_max();
        if payload.len() > max {
            let len = payload.len();
            // One bulk copy into the send buffer.
            return self
                .try_send_filled(len, |buf| {
                    buf.copy_from_slice(payload);
                    Ok::<_, std::convert::Infallible>(len)
                })
                .map(|sent| sent.unwrap_or_else(|never| match never {}));
        }
        self.try_send_with(|slot| slot.write_at(0, payload))?
    }

    /// Sends a message above the slot (by RDMC, in the same order as [`Sender::try_send`])
    /// whose bytes `fill` writes straight into its registered send buffer: `fill` is lent
    /// `len_max` bytes and returns how many of them the message is, at most `len_max`
    /// (an encoder writes the value in place, with no buffer of its own first). Returns
    /// `Ok(Ok(seq))` once sent; `Ok(Err(e))` when `fill` failed (nothing is sent: the
    /// slot becomes a null, the RDMC sequence number stays unused); `Err` as
    /// [`Sender::try_send`] for a message of `len_max` bytes, without calling `fill`
    /// ([`Error::WindowFull`]: retry later). A `len_max` within the slot is
    /// [`Error::Config`]: small messages go through [`Sender::try_loan`].
    pub fn try_send_filled<E>(
        &self,
        len_max: usize,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<usize, E>,
    ) -> Result<std::result::Result<u64, E>> {
        self.check_running()?;
        if len_max <= self.payload_bytes_max() {
            return Err(Error::Config(format!(
                "try_send_filled of {len_max} bytes: within the slot ({} bytes), use a loan",
                self.payload_bytes_max()
            )));
        }
        let ring = &self.ring;
        let Some(tx) = &ring.large else {
            return Err(Error::PayloadTooLarge {
                len: len_max,
                max: ring.geom.slot_payload_bytes,
            });
        };
        if len_max > tx.config.message_bytes_max {
            return Err(Error::MessageTooLarge {
                subgroup: ring.subgroup,
                len: len_max,
                max: tx.config.message_bytes_max,
            });
        }
        let _order = tx.order.lock().unwrap_or_else(|p| p.into_inner());
        let seq = tx.reserved.load(Ordering::Acquire) + 1;
        if tx.window_full() {
            return Err(Error::WindowFull {
                subgroup: ring.subgroup,
            });
        }
        let mut loan = self.try_loan()?;
        // A failed fill drops the loan: a null takes the slot, the sequence number is not
        // used. The buffer is the sender's until the announcement publishes it.
        let at = RdmcGroup::buffer_offset(tx.members, &tx.config, seq);
        let len = match tx.region.fill_guarded(at, len_max, fill)? {
            // An announcement carries 1 ..= message_bytes_max bytes.
            Ok(n) if n > 0 && n <= len_max => n,
            Ok(n) => {
                return Err(Error::Config(format!(
                    "try_send_filled: fill reported {n} bytes of the {len_max} it was lent \
                     (a message has 1 to {len_max})"
                )))
            }
            Err(e) => return Ok(Err(e)),
        };
        let slot = ring.geom.slot(ring.sender_rank, loan.slot.index) + SLOT_HEADER_BYTES;
        ring.region.store_u64(slot, seq);
        ring.region.store_u64(slot + WORD_BYTES, len as u64);
        tx.reserved.store(seq, Ordering::Release);
        let index = loan.slot.index;
        loan.finish(RDMC_LEN);
        Ok(Ok(index))
    }
}

impl Sender {
    /// Parks the calling thread until a message of `len` bytes may find room in this
    /// sender's window (or the sender's view stopped), for at most `timeout`; returns at
    /// once when it already may. A thread that saw [`Error::WindowFull`] waits here
    /// instead of spinning: the predicate thread wakes it when the members' counters move
    /// the window. It may return early (then try again); it never sends anything.
    pub fn wait_for_room(&self, len: usize, timeout: Duration) {
        let ring = &self.ring;
        let g = ring.room.lock.lock().unwrap_or_else(|p| p.into_inner());
        ring.room.parked.fetch_add(1, Ordering::SeqCst);
        // Checked under the lock the waking thread takes to notify: a move after this
        // check wakes the wait below.
        if !ring.has_room(len) {
            let _ = ring.room.moved.wait_timeout(g, timeout);
        }
        ring.room.parked.fetch_sub(1, Ordering::SeqCst);
    }

    /// What a sending thread does after its `tries`-th [`Error::WindowFull`] in a row:
    /// yields for the first [`ROOM_SPIN_TRIES`], then parks in
    /// [`Sender::wait_for_room`] for at most `max` and [`ROOM_WAIT_SLICE`] (a thread
    /// that only yielded kept a core busy while the threads that free its window waited
    /// for one). [`crate::runtime::GroupNode::send`] backs off this way.
    pub fn back_off(&self, len: usize, tries: u32, max: Duration) {
        if tries > ROOM_SPIN_TRIES {
            self.wait_for_room(len, max.min(ROOM_WAIT_SLICE));
        } else {
            std::thread::yield_now();
        }
    }

    /// Threads parked in [`Sender::wait_for_room`] on this sender's window now.
    pub fn parked_for_room(&self) -> u32 {
        self.ring.room.parked.load(Ordering::SeqCst)
    }

    /// [`Error::Wedged`] once the view this sender belongs to has stopped. Checked before
    /// anything else a send may report: an RDMC window held by a message of a stopped
    /// view never frees, and a caller that saw `WindowFull` would retry this sender for
    /// ever instead of taking the next view's.
    fn check_running(&self) -> Result<()> {
        if self.ring.stopped.load(Ordering::Acquire) {
            return Err(Error::Wedged {
                subgroup: self.ring.subgroup,
            });
        }
        Ok(())
    }
}

/// A loaned slot: write the message into it, then [`Loan::commit`]. Dropping a loan
/// without committing sends a null in its place, so the sender's order stays gap-free.
#[derive(Debug)]
pub struct Loan {
    ring: Arc<Ring>,
    slot: Slot,
}

/// A slot lent to one message until it is published: what [`Loan`] and [`SlotFill`]
/// share, given the ring each holds.
#[derive(Debug)]
struct Slot {
    index: u64,
    len: usize,
    done: bool,
}

impl Slot {
    fn new(index: u64) -> Slot {
        Slot {
            index,
            len: 0,
            done: false,
        }
    }

    fn write_at(&mut self, ring: &Ring, offset: usize, bytes: &[u8]) -> Result<()> {
        let max = ring.geom.slot_payload_bytes;
        let end = offset.saturating_add(bytes.len());
        if end > max {
            return Err(Error::PayloadTooLarge { len: end, max });
        }
        let slot = ring.geom.slot(ring.sender_rank, self.index);
        // The slot is this loan's until its commit publishes it: one bulk copy.
        ring.region
            .write_bytes_guarded(slot + SLOT_HEADER_BYTES + offset, bytes)?;
        self.len = self.len.max(end);
        Ok(())
    }

    /// Publishes what was written; returns the sender sequence number.
    fn commit(&mut self, ring: &Ring) -> u64 {
        self.finish(ring, self.len as u64);
        self.index
    }

    /// Publishes the message, `len` bytes long (or a null: [`NULL_LEN`]), once.
    fn finish(&mut self, ring: &Ring, len: u64) {
        if self.done {
            return;
        }
        self.done = true;
        let guard = ring
            .post_lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
        ring.publish(self.index, len);
        drop(guard);
        ring.wake();
    }
}

/// What a lent slot offers, kept ([`Loan`]) or lent for one call ([`SlotFill`]): both
/// hold a `slot` and a `ring` (an `Arc` or a reference).
macro_rules! lent_slot_methods {
    () => {
        /// The message's sender sequence number.
        pub fn seq(&self) -> u64 {
            self.slot.index
        }

        /// Bytes written so far (the message length at commit).
        pub fn len(&self) -> usize {
            self.slot.len
        }

        /// True if nothing was written yet.
        pub fn is_empty(&self) -> bool {
            self.slot.len == 0
        }

        /// Writes `bytes` at `offset` of the payload; the message length becomes at
        /// least `offset + bytes.len()`.
        pub fn write_at(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
            self.slot.write_at(&self.ring, offset, bytes)
        }
    };
}

impl Loan {
    lent_slot_methods!();

    /// Publishes the message; returns its sender sequence number.
    pub fn commit(mut self) -> u64 {
        self.slot.commit(&self.ring)
    }

    fn finish(&mut self, len: u64) {
        self.slot.finish(&self.ring, len);
    }
}

/// The slot [`Sender::try_send_with`] lends its `fill`: written as a [`Loan`] is, and
/// published when `fill` returns.
#[derive(Debug)]
pub struct SlotFill<'a> {
    ring: &'a Ring,
    slot: Slot,
}

impl SlotFill<'_> {
    lent_slot_methods!();

    fn commit(mut self) -> u64 {
        self.slot.commit(self.ring)
    }
}

impl Drop for SlotFill<'_> {
    fn drop(&mut self) {
        self.slot.finish(self.ring, NULL_LEN);
    }
}

impl io::Write for Loan {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.ring.geom.slot_payload_bytes - self.slot.len;
        let n = buf.len().min(room);
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "message exceeds the slot payload",
            ));
        }
        let at = self.slot.len;
        self.write_at(at, &buf[..n]).map_err(io::Error::other)?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.finish(NULL_LEN);
    }
}
