//! Registered memory: the regions peers write into one-sided.
//!
//! A [`Region`] is a block of 8-byte words shared with the fabric. Peers write into it
//! (through the backend) while the owner reads it; the owner may also write it locally
//! (its own SST row, its own SMC slots) before pushing those bytes to peers. Every access
//! that may meet another goes through atomic word operations, so concurrent access is
//! never a data race, and an aligned 8-byte word is never torn: a reader sees either the
//! old or the new value. Ranges behind a guard, which by the protocol nobody else touches
//! meanwhile, may also be copied in bulk (the `_guarded` methods below).
//!
//! Ordering, as the fabric contract needs it:
//! - [`Region::write_bytes`] begins with a release fence, so a reader that observes (with an
//!   acquire load) any word of a later write also observes every word of every earlier
//!   write made by the same thread (the backend applies one peer's writes from one thread,
//!   in issue order).
//! - [`Region::store_u64`] is a release store and [`Region::load_u64`] an acquire load:
//!   that pair is the guard of "write the payload, then the guard" (docs/design.md §2).
//! - [`Region::read_bytes`] uses relaxed loads: call it after the acquire load of the guard.
//! - The `_guarded` variants ([`Region::write_bytes_guarded`], [`Region::copy_from_guarded`],
//!   [`Region::read_append_guarded`]) move whole words with one bulk copy instead of one
//!   atomic per word: for ranges behind a guard, which no one else touches during the copy
//!   (a word of such a range read before its guard may be torn; contract item 3).
//!   [`Region::guarded_slice`] reads such a range in place, for as long as the caller
//!   keeps it behind its guard (a delivered large message lent to the application), and
//!   [`Region::watch_pins`] makes the region refuse the peers' writes it applies into
//!   such ranges.
//! - [`Region::limit_peer_writes`] says which ranges each peer may write at all (a
//!   member's own rows and slots); a backend that applies its peers' writes refuses the
//!   rest and fails the peer's link.
//!
//! Memory, as large regions need it (an RDMC buffer may be 256 MiB): a heap region of
//! [`HEAP_MAP_BYTES_MIN`] bytes or more is a private anonymous mapping, so its address
//! space is reserved at once but a page is only allocated (zeroed by the kernel) when
//! first touched; the shm backend's memfd mappings are sparse the same way. The owner may
//! hand an idle range's pages back to the kernel with [`Region::reclaim`] (it reads as
//! zeros afterwards); memory a device registered (verbs, libfabric) is never reclaimed.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::{Error, RegionId, Result, REGION_BYTES_MAX};

mod grants;
mod pins;
pub use grants::{PeerWrites, PEER_WRITE_RANGES_MAX};
pub use pins::PINNED_BUFFERS_MAX;
use pins::{wait_readable, PinnedBuffers};

/// Size of the fabric's atomic unit, in bytes.
pub const WORD_BYTES: usize = 8;

/// Bytes [`Region::copy_from`] moves per step through its stack buffer when source and
/// destination offsets sit at different places in their words.
pub const COPY_CHUNK_BYTES: usize = 4096;

/// How a bulk copy into or out of a region moves its whole words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Words {
    /// One relaxed atomic load or store per word: a word written concurrently is seen
    /// whole, old or new. For ranges others may write while we read them (SST rows).
    Atomic,
    /// One bulk copy (`memcpy`, vectorised), about twice the speed on large ranges, for
    /// a range **behind a guard**: by the protocol, no thread of this process writes it
    /// during the copy (a slot or RDMC buffer its sender has not published yet, or one
    /// received and not yet released), and a reader looks at it only after the guard's
    /// acquire load. A word of such a range read before its guard may be seen torn, which
    /// contract item 3 allows. A peer process that breaks the protocol and writes the
    /// range anyway can only leave torn or stale bytes in the copy — payload, which the
    /// engine never trusts for memory safety. (The only Rust references to region memory
    /// are [`Region::guarded_slice`]'s byte slices, under the same premise.)
    Guarded,
}

impl Words {
    /// How to copy a write's payload: in bulk when a guard follows it, else word by word.
    fn behind(guard: Option<(usize, u64)>) -> Words {
        Words::bulk(guard.is_some())
    }

    /// In bulk (behind a guard) or word by word.
    fn bulk(guarded: bool) -> Words {
        if guarded {
            Words::Guarded
        } else {
            Words::Atomic
        }
    }
}

/// A registered region of memory, shared with the fabric. Cloning is cheap (a reference
/// count); the memory lives until the last clone and the backend release it.
#[derive(Clone)]
pub struct Region {
    inner: Arc<RegionInner>,
}

struct RegionInner {
    id: RegionId,
    /// How idle pages go back to the kernel ([`Region::reclaim`]).
    reclaim: Reclaim,
    /// First word of the region; valid for `words` words while `_backing` lives.
    ptr: NonNull<AtomicU64>,
    words: usize,
    /// Held while a [`Region::fill_guarded`] runs (one at a time per region).
    filling: Mutex<()>,
    /// The buffers whose pins refuse peers' writes ([`Region::watch_pins`]).
    pinned: OnceLock<PinnedBuffers>,
    /// What each peer may write ([`Region::limit_peer_writes`]; unset: anything).
    grants: OnceLock<PeerWrites>,
    /// Owner of the memory (a heap allocation, a mapping); dropped last.
    _backing: Box<dyn Any + Send + Sync>,
}

// SAFETY: the region's memory is accessed through `AtomicU64` operations, which are safe
// to perform from any thread, or in bulk only on ranges behind a guard (`Words::Guarded`,
// `recv_into` through its pointer; `guarded_slice` and `fill_guarded` through a byte slice
// that lives while the caller holds the guard); `_backing` is itself Send + Sync and keeps
// the memory alive for as long as the `RegionInner` exists.
unsafe impl Send for RegionInner {}
// SAFETY: as above: shared access is atomic word access, or bulk access behind a guard.
unsafe impl Sync for RegionInner {}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.id())
            .field("len", &self.len())
            .finish()
    }
}

/// Heap regions of at least this many bytes are anonymous mappings whose pages are
/// allocated on first touch (smaller ones are plain heap allocations).
pub const HEAP_MAP_BYTES_MIN: usize = 64 << 10;

/// The system's page size (what mappings and [`Region::reclaim`] round to).
pub fn page_bytes() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// How a region's idle pages may be handed back to the kernel ([`Region::reclaim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// Never: small heap regions, and memory a device registered (it may have pinned
    /// the pages: dropping them would leave the device writing elsewhere).
    Never,
    /// A private anonymous mapping: `MADV_DONTNEED` (the pages read as zero after).
    Private,
    /// A shared mapping of a memory file (shm's memfds, which peers map too):
    /// `MADV_REMOVE` frees the file's pages, for every mapping of it.
    Shared,
}

/// A private anonymous mapping of zero pages, allocated by the kernel on first touch,
/// unmapped on drop.
pub(crate) struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory owned by this value; every access to it goes through atomics
// (Region) or, for device-registered staging, through the owner's lock.
unsafe impl Send for AnonMap {}
// SAFETY: as above.
unsafe impl Sync for AnonMap {}

impl AnonMap {
    /// Maps `len` bytes (rounded up to whole pages, at least one) of zero pages.
    pub(crate) fn new(len: usize) -> Result<AnonMap> {
        let len = len.max(1).div_ceil(page_bytes()) * page_bytes();
        // SAFETY: a fresh anonymous mapping chosen by the kernel (addr null, fd -1); it
        // aliases no Rust object. MAP_NORESERVE: the address space is reserved, pages
        // are allocated when touched. The result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io(
                "mapping region memory",
                std::io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| {
            Error::io(
                "mapping region memory",
                std::io::Error::other("null mapping"),
            )
        })?;
        Ok(AnonMap { ptr, len })
    }

    /// The first byte (page aligned).
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The mapped length (whole pages).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no reference into the
        // mapping outlives `self` (whoever lends it out holds `self` as its backing).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Rounds a requested region length up to whole words.
pub fn round_up_to_words(len_bytes: usize) -> usize {
    len_bytes.div_ceil(WORD_BYTES) * WORD_BYTES
}

impl Region {
    /// Allocates a zeroed region of at least `len_bytes` bytes on the heap (rounded up to
    /// whole words). From [`HEAP_MAP_BYTES_MIN`] bytes on it is an anonymous mapping whose
    /// pages the kernel allocates when first touched, and [`Region::reclaim`] gives idle
    /// pages back. Backends whose peers cannot reach the local heap (shm) build regions
    /// over their own mappings instead.
    pub fn new_heap(id: RegionId, len_bytes: usize) -> Result<Region> {
        check_region_len(len_bytes)?;
        let words = round_up_to_words(len_bytes) / WORD_BYTES;
        if words * WORD_BYTES >= HEAP_MAP_BYTES_MIN {
            let map = AnonMap::new(words * WORD_BYTES)?;
            assert!(
                map.len() >= words * WORD_BYTES,
                "the mapping (whole pages) covers the region"
            );
            let ptr = map.ptr();
            // SAFETY: `ptr` is page aligned and valid for `map.len() >= words * 8` bytes
            // while `map` (the backing) lives; nothing else refers to the fresh mapping.
            let region = unsafe { Region::from_raw(id, ptr, words * WORD_BYTES, Box::new(map)) };
            return Ok(region.with_reclaim(Reclaim::Private));
        }
        let mut storage: Box<[AtomicU64]> = (0..words.max(1)).map(|_| AtomicU64::new(0)).collect();
        let ptr = NonNull::new(storage.as_mut_ptr()).expect("a Box never holds a null pointer");
        Ok(Region {
            inner: Arc::new(RegionInner {
                id,
                reclaim: Reclaim::Never,
                ptr,
                words,
                filling: Mutex::new(()),
                pinned: OnceLock::new(),
                grants: OnceLock::new(),
                _backing: Box::new(storage),
            }),
        })
    }

    /// Says how this region's idle pages go back to the kernel (a new region: no clone
    /// of it exists yet). Only for memory no device registered.
    pub(crate) fn with_reclaim(mut self, reclaim: Reclaim) -> Region {
        Arc::get_mut(&mut self.inner)
            .expect("with_reclaim on a region nobody else holds yet")
            .reclaim = reclaim;
        self
    }

    /// Wraps memory that a backend mapped or registered itself.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned and valid for reads and writes of `len_bytes` bytes
    /// (a multiple of 8) for as long as `backing` lives, and all access to that memory from
    /// this process must go through atomic operations (other processes may write it
    /// concurrently with atomic or word-sized stores).
    pub(crate) unsafe fn from_raw(
        id: RegionId,
        ptr: NonNull<u8>,
        len_bytes: usize,
        backing: Box<dyn Any + Send + Sync>,
    ) -> Region {
        assert!(
            len_bytes % WORD_BYTES == 0,
            "raw region length must be whole words"
        );
        assert!(
            ptr.as_ptr() as usize % WORD_BYTES == 0,
            "raw region must be word aligned"
        );
        Region {
            inner: Arc::new(RegionInner {
                id,
                reclaim: Reclaim::Never,
                ptr: ptr.cast(),
                words: len_bytes / WORD_BYTES,
                filling: Mutex::new(()),
                pinned: OnceLock::new(),
                grants: OnceLock::new(),
                _backing: backing,
            }),
        }
    }

    /// The region's id, unique per endpoint.
    pub fn id(&self) -> RegionId {
        self.inner.id
    }

    /// Length in bytes (the registered length rounded up to whole words).
    pub fn len(&self) -> usize {
        self.inner.words * WORD_BYTES
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.words == 0
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < self.inner.words,
            "word index inside the region (checked by callers)"
        );
        // SAFETY: `index < words`, the memory is valid and aligned for `words` AtomicU64
        // while `inner` (and so `_backing`) lives, which `&self` guarantees.
        unsafe { &*self.inner.ptr.as_ptr().add(index) }
    }

    /// Checks that `len` bytes at `offset` lie inside the region.
    pub fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                node: u32::MAX,
                region: self.id(),
                offset,
                len,
                region_len: self.len(),
            }),
        }
    }

    fn check_word(&self, offset: usize) -> Result<usize> {
        if offset % WORD_BYTES != 0 {
            return Err(Error::Misaligned { offset });
        }
        self.check_range(offset, WORD_BYTES)?;
        Ok(offset / WORD_BYTES)
    }

    /// The address of the byte at `offset`, once `len` bytes there are checked to lie
    /// inside the region: for a backend that hands the range to the kernel (a socket
    /// send) instead of copying it out first. Valid while this region (a clone) lives.
    pub(crate) fn range_ptr(&self, offset: usize, len: usize) -> Result<*const u8> {
        self.check_range(offset, len)?;
        Ok(self
            .inner
            .ptr
            .as_ptr()
            .cast::<u8>()
            .cast_const()
            .wrapping_add(offset))
    }

    /// Receives up to `len` bytes from the socket `fd` into the region at `offset`, with
    /// one `recv(2)` given `flags`: the kernel copies them into the region's memory, with
    /// no buffer in between. For a backend that takes a guarded payload off a stream (tcp's
    /// large `WriteRelease` frames): those bytes land by a kernel copy, not word by word,
    /// so a word read before the payload's guard may be seen torn (contract item 3), and
    /// the caller releases the guard after the last byte. Errors (never panics) if the
    /// range does not fit; otherwise what `recv` returns.
    pub(crate) fn recv_into(
        &self,
        fd: std::os::fd::RawFd,
        offset: usize,
        len: usize,
        flags: libc::c_int,
    ) -> std::io::Result<usize> {
        let invalid =
            |e: Error| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string());
        let at = self.range_ptr(offset, len).map_err(invalid)?.cast_mut();
        let blocking = flags & libc::MSG_DONTWAIT == 0;
        loop {
            if blocking && self.watches(offset, len) {
                // A pin waits for a write inside its buffer (`settle_pin`): wait for the
                // bytes outside, so that a pin never waits on the network.
                wait_readable(fd)?;
            }
            let entered = self.enter_apply(offset, len).map_err(invalid)?;
            let flags = if entered.is_some() {
                flags | libc::MSG_DONTWAIT
            } else {
                flags
            };
            // SAFETY: `at..at + len` lies inside the region (checked by `range_ptr`), whose
            // memory `&self` keeps alive for the call; the region's words are atomics
            // (interior mutability), so memory reached through its pointer may be written;
            // `recv` writes at most `len` bytes there, and through no Rust reference; no
            // buffer held in place is among them (`enter_apply`).
            let n = unsafe { libc::recv(fd, at.cast(), len, flags) };
            let e = std::io::Error::last_os_error();
            self.exit_apply(entered);
            if n >= 0 {
                return Ok(n as usize);
            }
            // Readable, then nothing after all (another reader cannot exist; a spurious
            // wake-up): wait again.
            if !(blocking && entered.is_some() && e.kind() == std::io::ErrorKind::WouldBlock) {
                return Err(e);
            }
        }
    }

    /// Acquire load of the aligned word at `offset` (the guard side of the contract).
    ///
    /// # Panics
    /// If `offset` is not 8-byte aligned or not inside the region: offsets are computed by
    /// our own code from the region's layout, never taken from a peer.
    pub fn load_u64(&self, offset: usize) -> u64 {
        let index = self
            .check_word(offset)
            .expect("load_u64: aligned offset inside the region");
        self.word(index).load(Ordering::Acquire)
    }

    /// Release store of the aligned word at `offset`: the owner's local update of a word
    /// (for example its own SST row), or a backend applying a guard.
    ///
    /// # Panics
    /// As [`Region::load_u64`].
    pub fn store_u64(&self, offset: usize, value: u64) {
        let index = self
            .check_word(offset)
            .expect("store_u64: aligned offset inside the region");
        self.word(index).store(value, Ordering::Release);
    }

    /// Copies `bytes` into the region at `offset`. Starts with a release fence (see the
    /// module docs); whole words are stored atomically, partial words at either end are
    /// merged with compare-and-swap so that bytes of the same word written by someone else
    /// are never lost. Errors (never panics) if the range does not fit.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.write_words(offset, bytes, Words::Atomic)
    }

    /// [`Region::write_bytes`] into a range behind a guard (one nobody else touches during
    /// the call; see the module docs): the whole words go in one bulk copy, so a word read
    /// before the guard moves may be seen torn. For a sender filling a slot or buffer no
    /// one reads until it is published, and for a backend applying a guarded write
    /// (contract item 3).
    pub fn write_bytes_guarded(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.write_words(offset, bytes, Words::Guarded)
    }

    /// Applies a one-sided write of `bytes` at `offset` and then, with a `guard`
    /// `(offset, value)`, release-stores the guard word: the payload in one bulk copy
    /// when a guard follows it (contract item 3), word by word when none does. How every
    /// backend applies [`crate::Endpoint::write`] and `write_then_release`. Errors (never
    /// panics) if the payload's range or the guard word does not fit.
    pub(crate) fn apply_write(
        &self,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        self.check_guard(guard)?;
        // In bulk when a guard follows, refused into a pinned buffer.
        self.write_bytes_for_peer(offset, bytes, guard.is_some())?;
        self.release_guard(guard);
        Ok(())
    }

    /// [`Region::apply_write`] from `len` bytes of `src` at `src_offset`
    /// ([`crate::Endpoint::write_from`] by a backend that maps its peers' memory).
    pub(crate) fn apply_write_from(
        &self,
        offset: usize,
        src: &Region,
        src_offset: usize,
        len: usize,
        guard: Option<(usize, u64)>,
    ) -> Result<()> {
        self.check_guard(guard)?;
        self.copy_words(offset, src, src_offset, len, Words::behind(guard))?;
        self.release_guard(guard);
        Ok(())
    }

    fn check_guard(&self, guard: Option<(usize, u64)>) -> Result<()> {
        match guard {
            Some((at, _)) => self.check_word(at).map(|_| ()),
            None => Ok(()),
        }
    }

    fn release_guard(&self, guard: Option<(usize, u64)>) {
        if let Some((at, value)) = guard {
            self.store_u64(at, value);
        }
    }

    fn write_words(&self, offset: usize, bytes: &[u8], words: Words) -> Result<()> {
        self.check_range(offset, bytes.len())?;
        fence(Ordering::Release);
        let mut pos = offset;
        let mut src = bytes;
        // Leading partial word.
        let head = pos % WORD_BYTES;
        if head != 0 && !src.is_empty() {
            let take = (WORD_BYTES - head).min(src.len());
            self.merge_word(pos / WORD_BYTES, head, &src[..take]);
            pos += take;
            src = &src[take..];
        }
        // Whole words: one relaxed atomic store per word (a plain 8-byte store on x86-64
        // and aarch64), so no word is ever torn, with no per-word bounds check.
        let mut chunks = src.chunks_exact(WORD_BYTES);
        let mut index = pos / WORD_BYTES;
        let whole = chunks.len();
        assert!(
            index + whole <= self.inner.words,
            "range checked above: whole words fit"
        );
        let base = self.inner.ptr.as_ptr();
        match words {
            Words::Atomic => {
                for (i, chunk) in (&mut chunks).enumerate() {
                    // SAFETY: `chunk` is exactly 8 bytes (chunks_exact), read unaligned.
                    let value = unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<u64>()) };
                    // SAFETY: `index + i < index + whole <= words` (asserted above), so the
                    // word lies inside the region, which `&self` keeps alive.
                    unsafe { &*base.add(index + i) }.store(value, Ordering::Relaxed);
                }
            }
            // SAFETY: the `whole` words from `index` lie inside the region (asserted
            // above), which `&self` keeps alive; `src` holds at least `whole * 8` bytes
            // (chunks_exact) and is not region memory reached through this region's words
            // (a `&[u8]` cannot alias memory written through atomics). The region is
            // reached through its pointer only, and the caller of a guarded write keeps
            // every reader and writer of this process off the range ([`Words::Guarded`]).
            Words::Guarded => unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    base.add(index).cast::<u8>(),
                    whole * WORD_BYTES,
                )
            },
        }
        index += whole;
        // Trailing partial word.
        let tail = chunks.remainder();
        if !tail.is_empty() {
            self.merge_word(index, 0, tail);
        }
        Ok(())
    }

    /// Copies `len` bytes of `src` at `src_offset` into this region at `offset`, without
    /// a buffer in between when both offsets sit at the same place in their words (the
    /// usual case: block-aligned buffers), else through a small stack buffer
    /// ([`COPY_CHUNK_BYTES`] at a time). Ordering as [`Region::write_bytes`] on this side
    /// (a release fence first, whole words stored atomically, partial words merged) and
    /// [`Region::read_bytes`] on `src` (relaxed loads). This is how a backend that maps
    /// its peers' memory applies [`crate::Endpoint::write_from`]. Errors (never panics)
    /// if a range does not fit, or if both ranges are in one region and overlap.
    pub fn copy_from(
        &self,
        offset: usize,
        src: &Region,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.copy_words(offset, src, src_offset, len, Words::Atomic)
    }

    /// [`Region::copy_from`] for a guarded write (see the module docs): the whole words go
    /// in one bulk copy, so a word of this side read before the guard moves may be seen
    /// torn (contract item 3); the source range must be one no one writes during the call.
    pub fn copy_from_guarded(
        &self,
        offset: usize,
        src: &Region,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.copy_words(offset, src, src_offset, len, Words::Guarded)
    }

    fn copy_words(
        &self,
        offset: usize,
        src: &Region,
        src_offset: usize,
        len: usize,
        words: Words,
    ) -> Result<()> {
        self.check_range(offset, len)?;
        src.check_range(src_offset, len)?;
        if self.inner.ptr == src.inner.ptr && offset < src_offset + len && src_offset < offset + len
        {
            return Err(Error::Config(format!(
                "copy_from: {len} bytes at {src_offset} overlap their destination at {offset} \
                 in region {}",
                self.id()
            )));
        }
        if len == 0 {
            return Ok(());
        }
        if offset % WORD_BYTES != src_offset % WORD_BYTES {
            let mut buf = [0u8; COPY_CHUNK_BYTES];
            let mut done = 0;
            while done < len {
                let n = COPY_CHUNK_BYTES.min(len - done);
                src.read_bytes(src_offset + done, &mut buf[..n])?;
                self.write_bytes(offset + done, &buf[..n])?;
                done += n;
            }
            return Ok(());
        }
        fence(Ordering::Release);
        // Leading and trailing partial words go through `read_bytes`/`merge_word`.
        let head = ((WORD_BYTES - offset % WORD_BYTES) % WORD_BYTES).min(len);
        if head > 0 {
            let mut raw = [0u8; WORD_BYTES];
            src.read_bytes(src_offset, &mut raw[..head])?;
            self.merge_word(offset / WORD_BYTES, offset % WORD_BYTES, &raw[..head]);
        }
        let whole = (len - head) / WORD_BYTES;
        let to = (offset + head) / WORD_BYTES;
        let from = (src_offset + head) / WORD_BYTES;
        // Invariant: both word runs lie inside their regions (ranges checked above).
        assert!(
            to + whole <= self.inner.words && from + whole <= src.inner.words,
            "copy_from: word runs inside both regions"
        );
        let dst_base = self.inner.ptr.as_ptr();
        let src_base = src.inner.ptr.as_ptr();
        match words {
            Words::Atomic => {
                for i in 0..whole {
                    // SAFETY: `from + i < from + whole <= src.words` and `to + i < to +
                    // whole <= self.words` (asserted above): both words lie inside their
                    // regions, which `&self` and `&src` keep alive; access is atomic, as
                    // everywhere in a region.
                    let value = unsafe { &*src_base.add(from + i) }.load(Ordering::Relaxed);
                    // SAFETY: as above.
                    unsafe { &*dst_base.add(to + i) }.store(value, Ordering::Relaxed);
                }
            }
            // SAFETY: both word runs lie inside their regions (asserted above), which
            // `&self` and `&src` keep alive, and do not overlap (checked above when both
            // are one region; two regions are two mappings). Both are reached through their
            // pointers only, and the caller of a guarded copy keeps every writer of this
            // process off both ranges ([`Words::Guarded`]).
            Words::Guarded => unsafe {
                std::ptr::copy_nonoverlapping(
                    src_base.add(from).cast::<u8>().cast_const(),
                    dst_base.add(to).cast::<u8>(),
                    whole * WORD_BYTES,
                )
            },
        }
        let done = head + whole * WORD_BYTES;
        if done < len {
            let mut raw = [0u8; WORD_BYTES];
            let tail = len - done;
            src.read_bytes(src_offset + done, &mut raw[..tail])?;
            self.merge_word((offset + done) / WORD_BYTES, 0, &raw[..tail]);
        }
        Ok(())
    }

    /// Merges `bytes` into word `index` starting at byte `start` of the word.
    fn merge_word(&self, index: usize, start: usize, bytes: &[u8]) {
        assert!(
            start + bytes.len() <= WORD_BYTES,
            "a partial word stays inside its word"
        );
        let word = self.word(index);
        let mut current = word.load(Ordering::Relaxed);
        loop {
            let mut raw = current.to_ne_bytes();
            raw[start..start + bytes.len()].copy_from_slice(bytes);
            let merged = u64::from_ne_bytes(raw);
            match word.compare_exchange_weak(current, merged, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Copies `out.len()` bytes from the region at `offset` into `out`, with relaxed word
    /// loads: call it after the acquire load of the guard that protects these bytes.
    /// Errors (never panics) if the range does not fit.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        // SAFETY: `out` is `out.len()` writable bytes, and the range was checked.
        unsafe { self.read_raw(offset, out.as_mut_ptr(), out.len(), Words::Atomic) };
        Ok(())
    }

    /// Appends `len` bytes of the region at `offset` to `out`, as [`Region::read_bytes`]
    /// does, without first zero-filling the room (a delivery copies each message once,
    /// into a reused buffer). Errors (never panics, `out` unchanged) if the range does
    /// not fit.
    pub fn read_append(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.read_append_words(offset, len, out, Words::Atomic)
    }

    /// [`Region::read_append`] of a range behind a guard the caller acquired (see the
    /// module docs): one bulk copy of the whole words. For a delivery, after the
    /// slot's or the RDMC message's guard, while the sender cannot reuse the range.
    pub fn read_append_guarded(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<()> {
        self.read_append_words(offset, len, out, Words::Guarded)
    }

    fn read_append_words(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
        words: Words,
    ) -> Result<()> {
        self.check_range(offset, len)?;
        out.reserve(len);
        let at = out.len();
        // SAFETY: `reserve` made room for `len` more bytes after the `at` initialised
        // ones; `read_raw` writes every one of those `len` bytes (the range was checked),
        // so the first `at + len` bytes are initialised when `set_len` runs.
        unsafe {
            self.read_raw(offset, out.as_mut_ptr().add(at), len, words);
            out.set_len(at + len);
        }
        Ok(())
    }

    /// The `len` bytes at `offset`, read in place instead of copied out: for a range
    /// **behind a guard** that stays so while the slice lives — by the protocol, no
    /// thread of this process and no peer writes it until the caller gives the range
    /// back (a delivered RDMC message whose buffer is pinned until its delivery batch is
    /// dropped: `spindle_group`'s in-place deliveries). Call it after the guard's acquire
    /// load. A peer that breaks the protocol and writes the range anyway can change
    /// payload bytes under the reader; nothing reads lengths or offsets from them.
    /// Errors (never panics) if the range does not fit.
    pub fn guarded_slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check_range(offset, len)?;
        fence(Ordering::Acquire);
        // SAFETY: `offset..offset + len` lies inside the region (checked above), whose
        // mapping `&self` keeps alive for the slice's lifetime (the slice borrows `self`).
        // Every byte of a region is initialised (zeroed at allocation). The caller holds
        // the range behind a guard for as long as the slice lives, so by the protocol no
        // thread of this process and no peer writes it meanwhile: the premise of every
        // `_guarded` method, here for the slice's lifetime rather than one copy's. A peer
        // that breaks the protocol is refused where this process applies its writes into
        // a watched buffer (`watch_pins`); through its own mapping (shm) or a device it
        // races with the reader exactly as it would race with a guarded copy; the bytes
        // are plain `u8` (every value valid) and the engine derives no length or offset
        // from them.
        Ok(unsafe {
            std::slice::from_raw_parts(self.inner.ptr.as_ptr().cast::<u8>().add(offset), len)
        })
    }

    /// Lends the `len` bytes at `offset` to `fill` as a mutable byte slice, in place, and
    /// returns what `fill` returns: for a range **behind a guard** that nobody else reads
    /// or writes until the caller publishes it (a message's send buffer before its
    /// announcement), so a value can be encoded straight into it instead of into a buffer
    /// of its own first. A release fence follows, so the guard's release store publishes
    /// the bytes. One fill runs at a time per region (never two mutable slices of one
    /// region): a concurrent call waits for the running one, as on a mutex, and a call
    /// from inside `fill` on the same region deadlocks, as a mutex's would. Errors (never
    /// panics) if the range does not fit.
    pub fn fill_guarded<R>(
        &self,
        offset: usize,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        self.check_range(offset, len)?;
        // A fill that panicked left no state behind the lock: take it poisoned or not.
        let _filling = self.inner.filling.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `offset..offset + len` lies inside the region (checked above), whose
        // mapping `&self` keeps alive while the slice lives (it does not outlive `fill`).
        // Every byte is initialised (zeroed at allocation). No other mutable slice of this
        // region exists (`filling`, held above), and the caller holds the range behind a guard
        // it has not published, so by the protocol no thread of this process and no peer
        // reads or writes it meanwhile (the premise of every `_guarded` method); a peer
        // that breaks the protocol races with the fill as it would with a guarded copy.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(self.inner.ptr.as_ptr().cast::<u8>().add(offset), len)
        };
        let out = fill(bytes);
        fence(Ordering::Release);
        Ok(out)
    }

    /// Copies `len` bytes at `offset` to `dst`, writing every one of them: whole words as
    /// `words` says (relaxed loads and unaligned stores, or one bulk copy), partial words
    /// at either end by byte copies of a loaded word.
    ///
    /// # Safety
    /// `offset..offset + len` must lie inside the region (`check_range`), and `dst` must
    /// be valid for `len` byte writes, not overlapping the region.
    unsafe fn read_raw(&self, offset: usize, dst: *mut u8, len: usize, words: Words) {
        let mut pos = offset;
        let mut done = 0;
        // Leading partial word.
        let head = pos % WORD_BYTES;
        if head != 0 && len != 0 {
            let take = (WORD_BYTES - head).min(len);
            let raw = self
                .word(pos / WORD_BYTES)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            // SAFETY: `take <= len` bytes from a local array to `dst` (valid, per the
            // contract).
            unsafe { std::ptr::copy_nonoverlapping(raw[head..].as_ptr(), dst, take) };
            done += take;
            pos += take;
        }
        // Whole words, without per-word bounds checks.
        let whole = (len - done) / WORD_BYTES;
        let index = pos / WORD_BYTES;
        assert!(
            index + whole <= self.inner.words,
            "range checked by the caller: whole words fit"
        );
        let base = self.inner.ptr.as_ptr();
        match words {
            Words::Atomic => {
                for i in 0..whole {
                    // SAFETY: `index + i < index + whole <= words` (asserted above), so the
                    // word lies inside the region, which `&self` keeps alive.
                    let value = unsafe { &*base.add(index + i) }.load(Ordering::Relaxed);
                    // SAFETY: `done + 8 * (i + 1) <= len`, so the 8 bytes lie inside
                    // `dst`'s `len` writable bytes (the contract); unaligned store.
                    unsafe {
                        std::ptr::write_unaligned(
                            dst.add(done + i * WORD_BYTES).cast::<u64>(),
                            value,
                        )
                    };
                }
            }
            // SAFETY: the `whole` words from `index` lie inside the region (asserted
            // above), which `&self` keeps alive, and `dst + done` has `whole * 8` of its
            // `len` writable bytes left, not overlapping the region (the contract). The
            // region is reached through its pointer only (no Rust reference to its bytes
            // exists), and the caller of a guarded read keeps every writer of this process
            // off the range ([`Words::Guarded`]).
            Words::Guarded => unsafe {
                std::ptr::copy_nonoverlapping(
                    base.add(index).cast::<u8>().cast_const(),
                    dst.add(done),
                    whole * WORD_BYTES,
                )
            },
        }
        done += whole * WORD_BYTES;
        pos += whole * WORD_BYTES;
        // Trailing partial word.
        if done < len {
            let take = len - done;
            let raw = self
                .word(pos / WORD_BYTES)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            // SAFETY: `take < 8` bytes to the last `take` of `dst`'s `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), dst.add(done), take) };
        }
        fence(Ordering::Acquire);
    }

    /// Hands the pages wholly inside `len` bytes at `offset` back to the kernel, when this
    /// region's memory allows it (large heap regions, shm memfds; never memory a device
    /// registered): they read as zeros afterwards and are allocated again when next
    /// written. Returns the bytes given back (0 when the region keeps its pages).
    ///
    /// Call it only on an **idle** range: one that no local thread and no peer writes
    /// until this returns (a write racing with it may be lost; memory stays valid
    /// either way). Errors (never panics) if the range does not fit.
    pub fn reclaim(&self, offset: usize, len: usize) -> Result<usize> {
        self.check_range(offset, len)?;
        let advice = match self.inner.reclaim {
            Reclaim::Never => return Ok(0),
            Reclaim::Private => libc::MADV_DONTNEED,
            Reclaim::Shared => libc::MADV_REMOVE,
        };
        let base = self.inner.ptr.as_ptr() as usize;
        // Whole pages only: a partial page also holds bytes outside the range.
        let page = page_bytes();
        let start = (base + offset).next_multiple_of(page);
        let end = (base + offset + len) / page * page;
        if end <= start {
            return Ok(0);
        }
        // SAFETY: [start, end) lies inside this region's mapping (checked above, rounded
        // inward), which `&self` keeps mapped. The advice only replaces the pages' contents
        // with zeros (private: fresh zero pages; shared: the file's hole); no Rust reference
        // assumes their contents: every access is an atomic load or store, or a
        // `guarded_slice` of a range its caller holds, which is not idle.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
        if rc != 0 {
            return Err(Error::io(
                "giving region pages back (madvise)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(end - start)
    }

    /// Convenience: reads `len` bytes at `offset` into a new vector.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        // Checked before the allocation: a length read from a peer's words never sizes
        // a buffer past the region.
        self.check_range(offset, len)?;
        let mut out = vec![0; len];
        self.read_bytes(offset, &mut out)?;
        Ok(out)
    }
}

/// Rejects region lengths over [`REGION_BYTES_MAX`].
pub fn check_region_len(len_bytes: usize) -> Result<()> {
    if len_bytes > REGION_BYTES_MAX {
        return Err(Error::TooLarge {
            what: "region",
            len: len_bytes,
            max: REGION_BYTES_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_vec_checks_the_range_before_it_allocates() {
        let r = Region::new_heap(1, 64).unwrap();
        // A length from a peer's words past the region: an error, not a huge allocation
        // (with usize::MAX, a capacity-overflow panic before).
        assert!(r.to_vec(8, usize::MAX).is_err());
        assert!(r.to_vec(0, 1 << 40).is_err());
        assert_eq!(r.to_vec(8, 16).unwrap(), vec![0; 16]);
    }

    #[test]
    fn a_guarded_fill_writes_in_place_once_at_a_time_and_a_guarded_slice_reads_it() {
        let r = Region::new_heap(1, 4096).unwrap();
        let pattern: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 5) as u8).collect();
        // An odd offset and length: the slice is bytes, not words.
        let got = r
            .fill_guarded(13, 1000, |b| {
                assert_eq!(b.len(), 1000);
                b.copy_from_slice(&pattern);
                b.len()
            })
            .unwrap();
        assert_eq!(got, 1000, "fill's value comes back");
        assert_eq!(r.to_vec(13, 1000).unwrap(), pattern);
        assert_eq!(r.guarded_slice(13, 1000).unwrap(), &pattern[..]);
        assert_eq!(r.load_u64(0), 0, "the bytes before are untouched");
        // Once it returned, the next fill runs; ranges past the end are errors.
        assert_eq!(r.fill_guarded(0, 8, |b| b.len()).unwrap(), 8);
        assert!(r.fill_guarded(4090, 8, |_| ()).is_err());
        assert!(r.guarded_slice(4096, 1).is_err());
        assert_eq!(r.guarded_slice(4096, 0).unwrap(), &[] as &[u8]);
        // Two threads filling their own ranges of one region take turns: each range
        // ends up with its own thread's last bytes.
        std::thread::scope(|t| {
            for half in 0..2u8 {
                let r = &r;
                t.spawn(move || {
                    for round in 0..500u32 {
                        let v = half.wrapping_mul(100).wrapping_add(round as u8);
                        r.fill_guarded(usize::from(half) * 2048, 2048, |b| b.fill(v))
                            .unwrap();
                    }
                });
            }
        });
        for half in 0..2usize {
            let want = (half as u8).wrapping_mul(100).wrapping_add(499u32 as u8);
            assert!(r
                .to_vec(half * 2048, 2048)
                .unwrap()
                .iter()
                .all(|b| *b == want));
        }
    }

    #[test]
    fn copy_from_moves_every_byte_at_any_alignment_and_keeps_the_neighbours() {
        let src = Region::new_heap(1, 10_000).unwrap();
        let pattern: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        src.write_bytes(0, &pattern).unwrap();
        // Same word phase (fast path) and different phases (stack buffer, more than one
        // chunk), with partial words at both ends; word by word and in bulk (guarded).
        for (guarded, from, to, len) in [false, true].into_iter().flat_map(|g| {
            [
                (0, 0, 9_000),
                (5, 13, 8_003),
                (3, 8, 5_001),
                (8, 1, 4_100),
                (7, 7, 1),
                (6, 14, 20),
            ]
            .map(|(f, t, l)| (g, f, t, l))
        }) {
            let dst = Region::new_heap(2, 10_000).unwrap();
            dst.write_bytes(0, &[0xEE; 10_000]).unwrap();
            if guarded {
                dst.copy_from_guarded(to, &src, from, len).unwrap();
            } else {
                dst.copy_from(to, &src, from, len).unwrap();
            }
            let got = dst.to_vec(0, 10_000).unwrap();
            assert_eq!(
                &got[to..to + len],
                &pattern[from..from + len],
                "{from}->{to} {len} guarded {guarded}"
            );
            assert!(
                got[..to].iter().all(|b| *b == 0xEE),
                "bytes before {to} kept"
            );
            assert!(
                got[to + len..].iter().all(|b| *b == 0xEE),
                "bytes after {} kept",
                to + len
            );
        }
        let dst = Region::new_heap(2, 64).unwrap();
        assert!(
            dst.copy_from(60, &src, 0, 8).is_err(),
            "destination range past the end"
        );
        assert!(
            dst.copy_from(0, &src, 9_996, 8).is_err(),
            "source range past the end"
        );
        assert!(
            src.copy_from(4, &src, 0, 8).is_err(),
            "overlapping ranges of one region"
        );
        assert!(
            src.copy_from_guarded(4, &src, 0, 8).is_err(),
            "overlapping ranges of one region, guarded"
        );
        src.copy_from(100, &src, 0, 8).unwrap();
        assert_eq!(src.to_vec(100, 8).unwrap(), &pattern[..8]);
    }

    #[test]
    fn unaligned_writes_merge_and_read_back() {
        let region = Region::new_heap(1, 40).unwrap();
        region.write_bytes(3, b"hello, spindle").unwrap();
        region.write_bytes(0, b"abc").unwrap();
        assert_eq!(region.to_vec(0, 17).unwrap(), b"abchello, spindle");
        assert!(region.write_bytes(35, b"123456").is_err());
        assert!(region.read_bytes(39, &mut [0; 2]).is_err());
    }

    #[test]
    fn read_append_matches_read_bytes_at_every_offset_and_length() {
        let region = Region::new_heap(7, 40).unwrap();
        let pattern: Vec<u8> = (1..=40).collect();
        region.write_bytes(0, &pattern).unwrap();
        for guarded in [false, true] {
            for offset in 0..40 {
                for len in 0..=(40 - offset) {
                    let mut out = vec![0xEE; 3];
                    if guarded {
                        region.read_append_guarded(offset, len, &mut out).unwrap();
                    } else {
                        region.read_append(offset, len, &mut out).unwrap();
                    }
                    assert_eq!(
                        &out[..3],
                        &[0xEE; 3],
                        "offset {offset} len {len} guarded {guarded}: prefix kept"
                    );
                    assert_eq!(
                        &out[3..],
                        &pattern[offset..offset + len],
                        "offset {offset} len {len} guarded {guarded}"
                    );
                }
            }
            let mut out = vec![1, 2];
            let refused = if guarded {
                region.read_append_guarded(38, 3, &mut out)
            } else {
                region.read_append(38, 3, &mut out)
            };
            assert!(refused.is_err());
            assert_eq!(out, [1, 2], "a refused read leaves the vector as it was");
        }
    }

    proptest::proptest! {
        /// Any sequence of writes and reads at any offsets behaves like a plain byte array
        /// (the model), and out-of-range accesses are errors, never panics.
        #[test]
        fn behaves_like_a_byte_array(
            len in 0usize..200,
            ops in proptest::collection::vec(
                (
                    0usize..220,
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70),
                    proptest::prelude::any::<bool>(),
                ),
                1..40,
            ),
        ) {
            let region = Region::new_heap(3, len).unwrap();
            let mut model = vec![0u8; region.len()];
            // Word-atomic and bulk (guarded) writes, mixed: the same bytes either way.
            for (offset, bytes, guarded) in ops {
                let fits = offset + bytes.len() <= model.len();
                let written = if guarded {
                    region.write_bytes_guarded(offset, &bytes)
                } else {
                    region.write_bytes(offset, &bytes)
                };
                proptest::prop_assert_eq!(written.is_ok(), fits);
                if fits {
                    model[offset..offset + bytes.len()].copy_from_slice(&bytes);
                }
                let mut out = vec![0u8; bytes.len()];
                let read_ok = region.read_bytes(offset, &mut out).is_ok();
                proptest::prop_assert_eq!(read_ok, fits);
                if fits {
                    proptest::prop_assert_eq!(&out[..], &model[offset..offset + bytes.len()]);
                }
            }
            proptest::prop_assert_eq!(region.to_vec(0, model.len()).unwrap(), model);
        }
    }

    /// Resident set size of this process, in bytes (`VmRSS`).
    fn rss_bytes() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/self/status");
        kib * 1024
    }

    /// A 256 MiB heap region costs address space, not memory, until written; reclaimed
    /// pages read as zeros and leave the resident set; small regions keep their pages.
    #[test]
    fn a_large_heap_region_is_lazy_and_gives_pages_back() {
        const LEN: usize = 256 << 20;
        const WRITTEN: usize = 32 << 20;
        let before = rss_bytes();
        let region = Region::new_heap(5, LEN).unwrap();
        assert_eq!(region.len(), LEN);
        // Not a strict equality: other tests of this process allocate meanwhile.
        assert!(
            rss_bytes() < before + (16 << 20),
            "no page touched at creation: RSS {} -> {}",
            before,
            rss_bytes()
        );
        assert!(region.to_vec(LEN - 8, 8).unwrap() == [0; 8], "zeroed");
        region
            .write_bytes(LEN - WRITTEN, &vec![7u8; WRITTEN])
            .unwrap();
        let written = rss_bytes();
        assert!(
            written >= before + WRITTEN / 2,
            "written pages are resident"
        );
        // An unaligned range: only the pages wholly inside go back.
        let given = region.reclaim(LEN - WRITTEN + 1, WRITTEN - 1).unwrap();
        assert_eq!(given, WRITTEN - page_bytes());
        assert!(
            rss_bytes() + WRITTEN / 2 <= written,
            "reclaimed pages left the resident set"
        );
        assert!(
            region.to_vec(LEN - WRITTEN, 2).unwrap() == [7, 7],
            "first page kept"
        );
        let page = page_bytes();
        let tail = region.to_vec(LEN - WRITTEN + page, WRITTEN - page).unwrap();
        assert!(
            tail.iter().all(|b| *b == 0),
            "reclaimed pages read as zeros"
        );
        region.write_bytes(LEN - 8, &[9; 8]).unwrap();
        assert!(
            region.to_vec(LEN - 8, 8).unwrap() == [9; 8],
            "written again"
        );
        assert!(region.reclaim(LEN - 8, 16).is_err(), "range checked");
        let small = Region::new_heap(6, 4096).unwrap();
        small.write_bytes(0, &[1; 4096]).unwrap();
        assert_eq!(
            small.reclaim(0, 4096).unwrap(),
            0,
            "small regions keep pages"
        );
        assert!(small.to_vec(0, 4096).unwrap() == [1; 4096]);
    }

    #[test]
    fn words_are_atomic_and_aligned() {
        let region = Region::new_heap(2, 17).unwrap();
        assert_eq!(region.len(), 24);
        region.store_u64(16, u64::MAX);
        assert_eq!(region.load_u64(16), u64::MAX);
        assert!(matches!(
            region.check_word(4),
            Err(Error::Misaligned { offset: 4 })
        ));
    }
}
