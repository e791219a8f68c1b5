//! Delivery batches lent to readers: a reader's cache holds a delivered sample as (the
//! batch, its range) instead of a copy of its bytes.
//!
//! The delivery path (`DdsApp::deliver_owned`, `delivery.rs`) takes each delivered
//! [`DeliveryBatch`] whole from the engine and wraps it in a [`LentBatch`] shared by every
//! cache entry, read and loan that holds one of its samples ([`LentBytes`]). When the
//! last of them goes (the samples taken and decoded, loans returned, samples evicted),
//! the batch goes back to the participant's [`BatchPool`], and from there to the engine
//! to deliver into again: a steady stream neither copies samples into caches nor
//! allocates.
//!
//! What a held sample does to memory: it pins its whole batch (every sample a round
//! delivered in its subgroup, at most about `spindle_group::DELIVERY_STEP_BYTES_MAX`
//! plus one message), never a ring slot, so it cannot slow the writers (a large sample's
//! RDMC buffer is the exception, below). What all held
//! samples of a participant pin together is bounded by [`LENT_BYTES_MAX`] (the batches'
//! capacities); past it, deliveries are copied into the caches as before, until enough
//! batches came back.
//!
//! A large sample (one that went by RDMC) is not in the batch's buffer: the batch reads
//! it in place in its RDMC receive buffer and pins that buffer, so a held large sample
//! would hold its writer at the RDMC window. It is held only until the engine needs the
//! buffer for a later sample ([`spindle_group::runtime::Application::pins_wanted`]): then every
//! cache entry of that subgroup still lent from a batch with in-place messages is copied
//! out ([`LentBytes::pins_buffer`]) and the batch goes back. Only a loan the application
//! itself holds (`read_loaned`, `take_loaned`) keeps the buffer past that, until it is
//! dropped, as a loan of Cyclone's shared memory holds its chunk.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use spindle_group::DeliveryBatch;

/// The pool's lock; a panic while it was held leaves a plain list of batches, still good.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Most bytes of delivery batches (their capacities) a participant's readers may hold
/// lent at once: unread, read-but-kept and loaned samples pin their batches up to this;
/// a batch past it is copied into the caches instead.
pub const LENT_BYTES_MAX: usize = 32 << 20;

/// Most batches the pool keeps for the engine to reuse (more are freed).
pub const POOL_BATCHES_MAX: usize = spindle_group::SPARE_BATCHES_MAX;

/// The batches readers gave back, on their way to the engine again, and what is lent.
#[derive(Debug)]
pub struct BatchPool {
    spare: Mutex<Vec<DeliveryBatch>>,
    /// Capacity of the batches lent now (invariant: the sum of the live [`LentBatch`]es'
    /// `capacity`, at most `limit`: checked before lending).
    lent_bytes: AtomicUsize,
    /// The bound on `lent_bytes`: [`LENT_BYTES_MAX`] (lowered by tests).
    limit: AtomicUsize,
    /// Batches copied from instead of lent, because the bound was reached.
    copied: AtomicUsize,
}

impl BatchPool {
    /// An empty pool, lending up to [`LENT_BYTES_MAX`].
    pub fn new() -> Arc<BatchPool> {
        Arc::new(BatchPool {
            spare: Mutex::new(Vec::new()),
            lent_bytes: AtomicUsize::new(0),
            limit: AtomicUsize::new(LENT_BYTES_MAX),
            copied: AtomicUsize::new(0),
        })
    }

    /// Lowers (or raises) the bound on what is lent at once (tests of the fallback).
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Lends `batch` if what is lent stays within the bound ([`LENT_BYTES_MAX`]); gives
    /// it back otherwise (to be copied from, as before).
    pub fn lend(self: &Arc<Self>, batch: DeliveryBatch) -> Result<Arc<LentBatch>, DeliveryBatch> {
        let capacity = batch.capacity();
        let lent = self.lent_bytes.load(Ordering::Relaxed);
        if lent.saturating_add(capacity) > self.limit.load(Ordering::Relaxed) {
            self.copied.fetch_add(1, Ordering::Relaxed);
            return Err(batch);
        }
        // Only the delivery thread lends: the check above and this add do not race
        // with another lend (returns only lower the figure).
        self.lent_bytes.fetch_add(capacity, Ordering::Relaxed);
        Ok(Arc::new(LentBatch {
            batch: Some(batch),
            capacity,
            pool: Arc::clone(self),
        }))
    }

    /// A batch given back, for the engine to deliver into again.
    pub fn spare(&self) -> Option<DeliveryBatch> {
        lock(&self.spare).pop()
    }

    /// Bytes of batches lent now.
    pub fn lent_bytes(&self) -> usize {
        self.lent_bytes.load(Ordering::Relaxed)
    }

    /// Batches waiting to go back to the engine.
    pub fn spare_len(&self) -> usize {
        lock(&self.spare).len()
    }

    /// Batches copied from instead of lent so far, because the bound was reached.
    pub fn copied(&self) -> usize {
        self.copied.load(Ordering::Relaxed)
    }

    fn give_back(&self, mut batch: DeliveryBatch, capacity: usize) {
        self.lent_bytes.fetch_sub(capacity, Ordering::Relaxed);
        // Unpins its in-place messages' buffers now, not when the engine reuses it.
        batch.clear();
        let mut spare = lock(&self.spare);
        if spare.len() < POOL_BATCHES_MAX {
            spare.push(batch);
        }
    }
}

/// A delivery batch some readers hold samples of. Dropped by its last holder, it goes
/// back to its [`BatchPool`].
#[derive(Debug)]
pub struct LentBatch {
    /// Always `Some` until dropped (or taken back by [`LentBatch::into_batch`]).
    batch: Option<DeliveryBatch>,
    /// Counted in the pool's `lent_bytes` (the batch's capacity when lent).
    capacity: usize,
    pool: Arc<BatchPool>,
}

impl LentBatch {
    /// The batch.
    pub fn batch(&self) -> &DeliveryBatch {
        self.batch
            .as_ref()
            .expect("a lent batch holds its batch until dropped")
    }

    /// The batch back, with nobody else holding it (not through the pool).
    pub fn into_batch(mut self) -> DeliveryBatch {
        let b = self
            .batch
            .take()
            .expect("a lent batch holds its batch until dropped");
        self.pool
            .lent_bytes
            .fetch_sub(self.capacity, Ordering::Relaxed);
        b
    }

    /// One delivered message's bytes in this batch: `bytes` must be a slice of
    /// [`DeliveryBatch::bytes`] or of one of its [`DeliveryBatch::in_place_bytes`] (a
    /// [`spindle_group::Message`]'s payload or part of it).
    pub fn share(self: &Arc<Self>, bytes: &[u8]) -> Option<LentBytes> {
        let b = self.batch();
        // The batch's own buffer first: every small message is there.
        [(None, Some(b.bytes()))]
            .into_iter()
            .chain((0..b.in_place_len()).map(|i| (Some(i), b.in_place_bytes(i))))
            .filter_map(|(part, all)| Some((part, all?)))
            .find_map(|(part, all)| {
                let start = (bytes.as_ptr() as usize).checked_sub(all.as_ptr() as usize)?;
                let end = start.checked_add(bytes.len())?;
                (end <= all.len()).then(|| LentBytes {
                    batch: Arc::clone(self),
                    part,
                    start,
                    end,
                })
            })
    }
}

impl Drop for LentBatch {
    fn drop(&mut self) {
        if let Some(b) = self.batch.take() {
            self.pool.give_back(b, self.capacity);
        }
    }
}

/// A sample's bytes inside a [`LentBatch`]: the batch stays lent while this lives.
#[derive(Debug, Clone)]
pub struct LentBytes {
    batch: Arc<LentBatch>,
    /// Which in-place message's bytes (`None`: the batch's own buffer).
    part: Option<usize>,
    start: usize,
    end: usize,
}

impl LentBytes {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        let b = self.batch.batch();
        let all = match self.part {
            // The batch lives as long as `self` and keeps its in-place messages.
            Some(i) => b
                .in_place_bytes(i)
                .expect("a lent batch keeps its in-place messages"),
            None => b.bytes(),
        };
        &all[self.start..self.end]
    }

    /// True if their batch pins an RDMC buffer (these bytes, or another sample of the
    /// batch, are a large sample read in place): a holder that keeps them long should
    /// copy them out, or the buffer stays pinned.
    pub fn pins_buffer(&self) -> bool {
        self.batch.batch().holds_in_place()
    }

    /// True if both are the same bytes of the same batch.
    pub fn same(&self, other: &LentBytes) -> bool {
        Arc::ptr_eq(&self.batch, &other.batch)
            && self.part == other.part
            && self.start == other.start
            && self.end == other.end
    }
}

/// Equal bytes (wherever they are).
impl PartialEq for LentBytes {
    fn eq(&self, other: &LentBytes) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for LentBytes {}
