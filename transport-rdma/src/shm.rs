//! The shm backend: processes on one host map each other's regions.
//!
//! ## Regions
//!
//! Every local region is an anonymous `memfd_create` file mapped `MAP_SHARED`; the owner
//! wraps its mapping in a [`Region`]. Nothing is ever created in a file system, so a
//! crashed process leaves no files behind: the memory goes away with the last mapping.
//!
//! A peer reaches the region through the tag the link layer carries in the region
//! announcement: the owner's pid, the memfd's descriptor number and inode, and the mapping
//! length. The peer opens `/proc/<pid>/fd/<fd>` (allowed for processes of the same user:
//! it needs only ptrace *read* access, which Yama does not restrict), checks that the inode
//! is the announced one (a closed and reused descriptor number is detected, never mapped)
//! and maps the file itself. This replaces `SCM_RIGHTS` descriptor passing, which would
//! need ancillary data on the shared stream link (`link.rs`) that its `Read`/`Write`
//! streams do not carry; the crash behaviour (no files left) is the same.
//!
//! ## One-sided writes
//!
//! [`Endpoint::write`] copies straight into the peer's mapping on the caller's thread,
//! with the target CPU taking no part: the copy goes through [`Region::write_bytes`] on a
//! [`Region`] wrapping the *remote* mapping, so words are stored atomically after a
//! release fence, and the guard of [`Endpoint::write_then_release`] is a release store.
//! A guarded write's payload goes in one bulk copy instead
//! ([`Region::write_bytes_guarded`], [`Region::copy_from_guarded`]): its words may be seen
//! torn before the guard (contract item 3), never after.
//! Writes to one peer are serialised by a per-peer lock, so the peer sees them in issue
//! order (FIFO) even when several local threads write to it.
//!
//! ## Doorbell
//!
//! Each endpoint has a one-page control memfd, announced with its regions, holding a
//! 32-bit sequence word and a count of the owner's threads parked on it. A writer bumps
//! the sequence after each write and calls `FUTEX_WAKE` (shared, not private: the word
//! lives in a mapping shared between processes) only when that count is not zero, so a
//! busy owner — one whose predicate thread is still spinning — costs writers one atomic
//! add and one load, and no thread of the owner is woken at all. [`Endpoint::wait`] parks
//! the calling thread itself in `FUTEX_WAIT` on that word, so a write to a parked owner
//! wakes its predicate thread directly (one wake-up, not two through a helper thread).
//! Everything else that rings the hub's [`crate::Doorbell`] (events, drained queues,
//! [`Endpoint::wake`]) bumps the same word through the doorbell's ring hook. A futex was
//! chosen over an eventfd because a write to a busy owner then needs no syscall at all,
//! where an eventfd write always is one. Between [`Endpoint::cork`] and the outermost
//! [`Endpoint::uncork`] the writes still land at once, but each peer's doorbell is rung
//! once, at the uncork (contract item 8): a predicate round that pushes to sixteen
//! subgroups of a peer bumps that peer's shared sequence word once, not thirty-two times.
//! The hub keeps the cork (per thread, as for its held frames); a write made under it
//! marks its peer's ring held, and the outermost uncork rings the marked peers (the
//! hooks' `flush_held`).
//!
//! ## Control path and failures
//!
//! Two-sided sends, region announcements and withdrawals, probes and failure detection run
//! over one Unix stream socket per peer (the shared link, `link.rs`); the listening
//! socket is in the abstract namespace (`@spindle-<namespace>-<node>`), so it too leaves no
//! file. A peer process that dies closes its sockets ([`FailureReason::ConnectionLost`]);
//! a stopped one stops answering probes ([`FailureReason::ProbeTimeout`]).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use spindle_transport_rdma::{shm::ShmEndpoint, Endpoint, FabricConfig};
//!
//! let ns = format!("doc-{}", std::process::id());
//! let a = ShmEndpoint::open(1, &ns, FabricConfig::default())?;
//! let b = ShmEndpoint::open(2, &ns, FabricConfig::default())?;
//! let row = b.register_region(7, 64)?;
//! a.connect(2, &b.address())?;
//! let deadline = Instant::now() + Duration::from_secs(30);
//! while a.remote_region(2, 7).is_none() {
//!     assert!(Instant::now() < deadline, "link never came up");
//!     a.wait(Duration::from_millis(50));
//! }
//! a.write_then_release(2, 7, 8, b"payload", 0, 1)?;
//! assert_eq!(row.load_u64(0), 1); // the copy is done when write returns
//! assert_eq!(row.to_vec(8, 7)?, b"payload");
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::link::{Hub, LinkHooks, RemoteWrite};
use crate::{
    Endpoint, Error, FabricConfig, FailureReason, LocalRange, NodeId, Region, RegionDesc, RegionId,
    Result, REGION_BYTES_MAX,
};

/// Longest namespace string accepted by [`ShmEndpoint::open`], in bytes (the abstract
/// socket name must fit in `sockaddr_un`).
pub const NAMESPACE_BYTES_MAX: usize = 64;
/// Most inbound connections that may be in their handshake at once.
pub const HANDSHAKES_MAX: usize = 64;

/// Page size assumed for mapping lengths (mappings are rounded up to it).
const PAGE_BYTES: usize = 4096;
/// Magic first word of a control page.
const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"SPNDLSHM");
/// Byte offset of the futex sequence word in the control page.
const CONTROL_SEQ_OFFSET: usize = 8;
/// Byte offset of the count of the owner's threads parked on the sequence word.
const CONTROL_SLEEPING_OFFSET: usize = 12;
/// Version of the region tag layout.
const TAG_VERSION: u32 = 1;
/// Bytes of an encoded region tag.
const TAG_BYTES: usize = 4 + 4 + 4 + 8 + 8 + 4 + 8;
/// Longest abstract socket name: `sun_path` (108 bytes) less the leading NUL.
const SOCKET_NAME_BYTES_MAX: usize = 107;

// The control words lie inside the control page, 4-aligned for the futex.
const _: () = assert!(CONTROL_SLEEPING_OFFSET + 4 <= PAGE_BYTES && CONTROL_SEQ_OFFSET % 4 == 0);
// A tag fits the link layer's bound on region tags.
const _: () = assert!(TAG_BYTES <= crate::link::REGION_TAG_BYTES_MAX);
// "spindle-<namespace>-<node id, at most 10 digits>" fits an abstract socket name.
const _: () = assert!("spindle-".len() + NAMESPACE_BYTES_MAX + 1 + 10 <= SOCKET_NAME_BYTES_MAX);

// ---------------------------------------------------------------------------------------
// Mappings
// ---------------------------------------------------------------------------------------

/// A `MAP_SHARED` read-write mapping of a memfd, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; this process only accesses it through
// atomic operations (Region, the control words), which are safe from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (a non-zero multiple of the page size) of `file`.
    fn map(file: &File, len: usize) -> Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (addr null) of a file descriptor we
        // own; it aliases no Rust object. Errors are checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io(
                "mapping shared memory",
                std::io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| {
            Error::io(
                "mapping shared memory",
                std::io::Error::other("null mapping"),
            )
        })?;
        Ok(Mapping { ptr, len })
    }

    /// The 32-bit atomic at `offset` (4-aligned, inside the mapping).
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset % 4 == 0 && offset + 4 <= self.len,
            "control word offsets are constants inside the first page"
        );
        // SAFETY: aligned (page-aligned base, 4-aligned offset) and inside the mapping,
        // which lives as long as `&self`; all access to it is atomic.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn magic(&self) -> u64 {
        // SAFETY: offset 0 of a page-aligned mapping of at least one page; atomic access.
        unsafe { &*self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
            .load(Ordering::Acquire)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no reference into the
        // mapping outlives `self` (Regions hold the Mapping as their backing).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn map_len_for(len: usize) -> usize {
    len.max(1).div_ceil(PAGE_BYTES) * PAGE_BYTES
}

/// Creates a zeroed memfd of `len` bytes.
fn memfd(name: &str, len: usize) -> Result<File> {
    let cname = CString::new(name).map_err(|_| Error::Config("memfd name has a NUL".into()))?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::io("memfd_create", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len as u64)
        .map_err(|e| Error::io("sizing a memfd", e))?;
    Ok(file)
}

/// The device every memfd lives on (the kernel's internal shmem mount), found once by
/// creating one; `None` if that failed (then only inodes are compared).
fn memfd_device() -> Option<u64> {
    static DEVICE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *DEVICE.get_or_init(|| {
        memfd("spindle-device-probe", 0)
            .and_then(|f| f.metadata().map_err(|e| Error::io("stat of a memfd", e)))
            .map(|m| m.dev())
            .ok()
    })
}

/// True if `meta` is the memfd `ino`: the inode number, on the memfds' device (inode
/// numbers of other filesystems, sockets' among them, may repeat it).
fn is_memfd(meta: &std::fs::Metadata, ino: u64) -> bool {
    meta.ino() == ino && memfd_device().is_none_or(|dev| meta.dev() == dev)
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit word in a shared mapping that outlives the
    // call; FUTEX_WAIT (without the private flag, since other processes wake it) only
    // reads it. Spurious returns (EINTR, EAGAIN, ETIMEDOUT) are fine: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Rings the doorbell of the endpoint whose control page is `control`: bumps its
/// sequence and wakes its parked threads, if any. SeqCst pairs with the parker's count
/// increment and re-check in [`ShmEndpoint`]'s `wait`: either it sees the new sequence
/// or this sees it parked.
fn ring(control: &Mapping) {
    let seq = control.atomic_u32(CONTROL_SEQ_OFFSET);
    seq.fetch_add(1, Ordering::SeqCst);
    if control
        .atomic_u32(CONTROL_SLEEPING_OFFSET)
        .load(Ordering::SeqCst)
        != 0
    {
        futex_wake(seq);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned 32-bit word of a live shared mapping; FUTEX_WAKE
    // does not access memory beyond looking up waiters on that address.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

// ---------------------------------------------------------------------------------------
// Region tags
// ---------------------------------------------------------------------------------------

/// How a peer finds a region's memory: carried as the link layer's region tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tag {
    pid: u32,
    fd: i32,
    ino: u64,
    map_len: u64,
    control_fd: i32,
    control_ino: u64,
}

impl Tag {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TAG_BYTES);
        out.extend_from_slice(&TAG_VERSION.to_le_bytes());
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.fd.to_le_bytes());
        out.extend_from_slice(&self.ino.to_le_bytes());
        out.extend_from_slice(&self.map_len.to_le_bytes());
        out.extend_from_slice(&self.control_fd.to_le_bytes());
        out.extend_from_slice(&self.control_ino.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Tag, String> {
        if bytes.len() != TAG_BYTES {
            return Err(format!(
                "shm region tag of {} bytes, expected {TAG_BYTES}",
                bytes.len()
            ));
        }
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let u64_at =
            |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        if u32_at(0) != TAG_VERSION {
            return Err(format!("shm region tag version {}", u32_at(0)));
        }
        Ok(Tag {
            pid: u32_at(4),
            fd: u32_at(8) as i32,
            ino: u64_at(12),
            map_len: u64_at(20),
            control_fd: u32_at(28) as i32,
            control_ino: u64_at(32),
        })
    }
}

/// Opens the memfd `fd` of process `pid` and maps it, if it still is inode `ino` on the
/// memfds' device ([`is_memfd`]).
/// `Ok(None)`: the descriptor is gone or was reused (the owner withdrew the region
/// meanwhile; its withdrawal follows on the link).
///
/// A reused number names whatever the owner opened since: another memfd or a file,
/// which `/proc` opens, or a socket or an eventfd — the links and endpoints of a group
/// changing views open those all the time — which it does not (ENXIO). So the inode
/// decides, not whether the open works: it is looked at before the open (nothing else of
/// the owner's is opened), after it (the number may be reused in between), and when the
/// open fails, which is an error only if the number still names the announced memfd.
fn map_remote(pid: u32, fd: i32, ino: u64, map_len: usize) -> Result<Option<Mapping>> {
    let path = format!("/proc/{pid}/fd/{fd}");
    // True if `path` names inode `ino` now; false if it names nothing or something else.
    let names_memfd = || match std::fs::metadata(&path) {
        Ok(meta) => Ok(is_memfd(&meta, ino)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("stat {path}"), e)),
    };
    if !names_memfd()? {
        return Ok(None);
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            return if names_memfd()? {
                Err(Error::io(format!("opening {path}"), e))
            } else {
                Ok(None)
            };
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {path}"), e))?;
    if !is_memfd(&meta, ino) || meta.len() < map_len as u64 {
        return Ok(None);
    }
    Mapping::map(&file, map_len).map(Some)
}

// ---------------------------------------------------------------------------------------
// Hooks
// ---------------------------------------------------------------------------------------

/// What this endpoint mapped of one peer.
#[derive(Debug)]
struct PeerMaps {
    bell: Arc<PeerBell>,
    control_ino: u64,
    regions: BTreeMap<RegionId, Region>,
    /// Serialises writes to this peer: issue order is apply order.
    order: Arc<Mutex<()>>,
}

/// A peer's doorbell: its control page, and whether a write made under a cork holds a
/// ring of it back for [`LinkHooks::flush_held`].
#[derive(Debug)]
struct PeerBell {
    control: Mapping,
    held: AtomicBool,
}

#[derive(Debug)]
struct ShmHooks {
    node: NodeId,
    pid: u32,
    control_file: File,
    control_ino: u64,
    /// Local regions' memfds, kept open so that peers can open them through /proc.
    local: Mutex<BTreeMap<RegionId, File>>,
    remote: RwLock<BTreeMap<NodeId, PeerMaps>>,
    /// Set after a [`PeerBell`]'s `held`: some ring may be held back.
    held_any: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LinkHooks for ShmHooks {
    /// Writes land straight in mapped memory of this host, which no cipher on the stream
    /// would cover: shm links are authenticated (with a domain secret) but not encrypted.
    fn may_encrypt(&self) -> bool {
        false
    }

    fn make_region(&self, id: RegionId, len: usize) -> Result<(Region, Vec<u8>)> {
        let map_len = map_len_for(len);
        let file = memfd(&format!("spindle-{}-{id}", self.node), map_len)?;
        let ino = file
            .metadata()
            .map_err(|e| Error::io("stat of a memfd", e))?
            .ino();
        let mapping = Mapping::map(&file, map_len)?;
        let ptr = mapping.ptr;
        // SAFETY: `ptr` is page aligned and valid for `map_len >= len` bytes while the
        // mapping (the backing) lives; `len` is whole words (the hub rounds it); this
        // process accesses the memory only through Region's atomics (or in bulk behind a
        // guard), and peers write it only through Region on their own mapping.
        let region = unsafe { Region::from_raw(id, ptr, len, Box::new(mapping)) }
            .with_reclaim(crate::region::Reclaim::Shared);
        let tag = Tag {
            pid: self.pid,
            fd: file.as_raw_fd(),
            ino,
            map_len: map_len as u64,
            control_fd: self.control_file.as_raw_fd(),
            control_ino: self.control_ino,
        };
        lock(&self.local).insert(id, file);
        Ok((region, tag.encode()))
    }

    fn region_dropped(&self, id: RegionId) {
        lock(&self.local).remove(&id);
    }

    fn remote_region_announced(
        &self,
        peer: NodeId,
        desc: RegionDesc,
        tag: &[u8],
    ) -> std::result::Result<(), String> {
        let tag = Tag::decode(tag)?;
        let map_len = usize::try_from(tag.map_len).map_err(|_| "map_len overflows")?;
        if map_len % PAGE_BYTES != 0
            || map_len < desc.len
            || map_len > map_len_for(REGION_BYTES_MAX)
            || desc.len % crate::WORD_BYTES != 0
        {
            return Err(format!(
                "shm region {} of {} bytes announced with a mapping of {map_len} bytes",
                desc.region, desc.len
            ));
        }
        let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
        let need_control = !matches!(
            remote.get(&peer),
            Some(maps) if maps.control_ino == tag.control_ino
        );
        if need_control {
            let Some(control) = map_remote(tag.pid, tag.control_fd, tag.control_ino, PAGE_BYTES)
                .map_err(|e| e.to_string())?
            else {
                return Ok(()); // peer is going away; its link fails next
            };
            if control.magic() != CONTROL_MAGIC {
                return Err("shm control page has a bad magic word".into());
            }
            remote.insert(
                peer,
                PeerMaps {
                    bell: Arc::new(PeerBell {
                        control,
                        held: AtomicBool::new(false),
                    }),
                    control_ino: tag.control_ino,
                    regions: BTreeMap::new(),
                    order: Arc::new(Mutex::new(())),
                },
            );
        }
        let Some(maps) = remote.get_mut(&peer) else {
            return Ok(());
        };
        match map_remote(tag.pid, tag.fd, tag.ino, map_len).map_err(|e| e.to_string())? {
            Some(mapping) => {
                let ptr = mapping.ptr;
                // SAFETY: page aligned, valid for `map_len >= desc.len` bytes while the
                // mapping lives (it is the backing); accessed only through Region's
                // atomics here, and word-atomically by its owner.
                let region =
                    unsafe { Region::from_raw(desc.region, ptr, desc.len, Box::new(mapping)) };
                maps.regions.insert(desc.region, region);
            }
            None => {
                // Withdrawn before we got to it: writes to it fail with UnknownRegion
                // until its withdrawal arrives.
                maps.regions.remove(&desc.region);
            }
        }
        Ok(())
    }

    fn remote_region_withdrawn(&self, peer: NodeId, id: Option<RegionId>) {
        let mut remote = self.remote.write().unwrap_or_else(|p| p.into_inner());
        match id {
            Some(id) => {
                if let Some(maps) = remote.get_mut(&peer) {
                    maps.regions.remove(&id);
                }
            }
            None => {
                remote.remove(&peer);
            }
        }
    }

    fn remote_write(
        &self,
        peer: NodeId,
        desc: RegionDesc,
        offset: usize,
        bytes: &[u8],
        guard: Option<(usize, u64)>,
        corked: bool,
    ) -> Result<RemoteWrite> {
        self.store_remote(peer, desc, corked, |region| {
            region.apply_write(offset, bytes, guard)
        })
    }

    fn remote_write_from(
        &self,
        peer: NodeId,
        desc: RegionDesc,
        offset: usize,
        from: LocalRange<'_>,
        guard: Option<(usize, u64)>,
        corked: bool,
    ) -> Result<RemoteWrite> {
        // One copy, from the local mapping straight into the peer's (no scratch).
        self.store_remote(peer, desc, corked, |region| {
            region.apply_write_from(offset, from.region, from.offset, from.len, guard)
        })
    }

    fn flush_held(&self) {
        if !self.held_any.swap(false, Ordering::AcqRel) {
            return;
        }
        let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
        for maps in remote.values() {
            if maps.bell.held.swap(false, Ordering::AcqRel) {
                ring(&maps.bell.control);
            }
        }
    }
}

impl ShmHooks {
    /// Applies a write (payload and guard) to `peer`'s mapped region `desc` with
    /// `store`, in the peer's issue order, and rings its doorbell — or, `corked`, holds
    /// the ring for [`LinkHooks::flush_held`] (once per peer however many writes).
    fn store_remote(
        &self,
        peer: NodeId,
        desc: RegionDesc,
        corked: bool,
        store: impl FnOnce(&Region) -> Result<()>,
    ) -> Result<RemoteWrite> {
        let (region, bell, order) = {
            let remote = self.remote.read().unwrap_or_else(|p| p.into_inner());
            let maps = remote.get(&peer);
            match maps.and_then(|m| m.regions.get(&desc.region).map(|r| (m, r))) {
                Some((maps, region)) => (
                    region.clone(),
                    Arc::clone(&maps.bell),
                    Arc::clone(&maps.order),
                ),
                None => {
                    return Err(Error::UnknownRegion {
                        node: peer,
                        region: desc.region,
                    })
                }
            }
        };
        {
            let _in_order = lock(&order);
            store(&region)?;
        }
        if corked {
            // `held` before `held_any`: a flush that sees the latter sees the former.
            bell.held.store(true, Ordering::Release);
            self.held_any.store(true, Ordering::Release);
        } else {
            ring(&bell.control);
        }
        Ok(RemoteWrite::Done)
    }
}

// ---------------------------------------------------------------------------------------
// The endpoint
// ---------------------------------------------------------------------------------------

/// A shared-memory endpoint. Create it with [`ShmEndpoint::open`]; use it through
/// [`Endpoint`].
#[derive(Debug)]
pub struct ShmEndpoint {
    hub: Arc<Hub<UnixStream>>,
    name: String,
    control: Arc<Mapping>,
    /// The control sequence as of the last [`Endpoint::wait`].
    seen: AtomicU32,
}

impl ShmEndpoint {
    /// Opens an endpoint for `node`, listening on the abstract Unix socket
    /// `@spindle-<namespace>-<node>` ([`Endpoint::address`]). `namespace` isolates
    /// independent groups on one host (a unique string per test run); at most
    /// [`NAMESPACE_BYTES_MAX`] bytes, no NUL.
    pub fn open(node: NodeId, namespace: &str, cfg: FabricConfig) -> Result<Arc<ShmEndpoint>> {
        if namespace.len() > NAMESPACE_BYTES_MAX || namespace.contains('\0') {
            return Err(Error::Config(format!(
                "shm namespace must be at most {NAMESPACE_BYTES_MAX} bytes without NUL"
            )));
        }
        cfg.validate()?;
        let name = format!("@spindle-{namespace}-{node}");
        let addr = parse_address(&name)?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| Error::BadAddress {
            addr: name.clone(),
            detail: e.to_string(),
        })?;

        let control_file = memfd(&format!("spindle-{node}-control"), PAGE_BYTES)?;
        let control_ino = control_file
            .metadata()
            .map_err(|e| Error::io("stat of a memfd", e))?
            .ino();
        let control = Arc::new(Mapping::map(&control_file, PAGE_BYTES)?);
        // SAFETY: offset 0 of the fresh page-aligned page; atomic access only.
        unsafe { &*control.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
            .store(CONTROL_MAGIC, Ordering::Release);

        let hooks = Arc::new(ShmHooks {
            node,
            pid: std::process::id(),
            control_file,
            control_ino,
            local: Mutex::new(BTreeMap::new()),
            remote: RwLock::new(BTreeMap::new()),
            held_any: AtomicBool::new(false),
        });
        let hub = Hub::new(node, cfg, Arc::clone(&hooks) as Arc<dyn LinkHooks>)?;

        {
            // Events, drained queues and wake() ring the hub's doorbell: make them bump
            // the futex word the predicate thread parks on (and nothing else: nobody
            // waits on the hub's doorbell of an shm endpoint).
            let control = Arc::clone(&control);
            hub.doorbell().take_over(move || ring(&control));
        }
        let accept_hub = Arc::clone(&hub);
        std::thread::Builder::new()
            .name(format!("spindle-accept-{node}"))
            .spawn(move || accept_loop(accept_hub, listener))
            .map_err(|e| Error::io("spawning the accept thread", e))?;
        Ok(Arc::new(ShmEndpoint {
            hub,
            name,
            control,
            seen: AtomicU32::new(0),
        }))
    }
}

fn accept_loop(hub: Arc<Hub<UnixStream>>, listener: UnixListener) {
    let in_handshake = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if hub.is_closed() {
            return;
        }
        let Ok(stream) = stream else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if in_handshake.fetch_add(1, Ordering::AcqRel) >= HANDSHAKES_MAX {
            in_handshake.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let h = Arc::clone(&hub);
        let counter = Arc::clone(&in_handshake);
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-r{}", hub.node()))
            .spawn(move || {
                let guard = HandshakeGuard(counter);
                h.run_acceptor_then(stream, move || drop(guard));
            });
        if spawned.is_err() {
            in_handshake.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

struct HandshakeGuard(Arc<AtomicUsize>);

impl Drop for HandshakeGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `@name` is an abstract socket name; anything else a file-system path.
fn parse_address(address: &str) -> Result<SocketAddr> {
    let bad = |detail: String| Error::BadAddress {
        addr: address.to_owned(),
        detail,
    };
    match address.strip_prefix('@') {
        Some(name) if !name.is_empty() => {
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| bad(e.to_string()))
        }
        Some(_) => Err(bad("empty abstract name".into())),
        None if address.is_empty() => Err(bad("empty address".into())),
        None => SocketAddr::from_pathname(address).map_err(|e| bad(e.to_string())),
    }
}

impl Endpoint for ShmEndpoint {
    crate::link::forward_to_hub!();

    fn address(&self) -> String {
        self.name.clone()
    }

    fn connect(&self, peer: NodeId, address: &str) -> Result<()> {
        let addr = parse_address(address)?;
        let Some(attempt) = self.hub.begin_connect(peer)? else {
            return Ok(());
        };
        let hub = Arc::clone(&self.hub);
        let shown = address.to_owned();
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-r{}-{}", hub.node(), peer))
            .spawn(move || match UnixStream::connect_addr(&addr) {
                Ok(stream) => hub.run_initiator(peer, attempt, stream),
                Err(e) => hub.attempt_failed(
                    peer,
                    attempt,
                    FailureReason::Unreachable(format!("connecting to {shown}: {e}")),
                ),
            });
        if let Err(e) = spawned {
            self.hub
                .attempt_failed(peer, attempt, FailureReason::ConnectionLost(e.to_string()));
            return Err(Error::io("spawning a connect thread", e));
        }
        Ok(())
    }

    fn wait(&self, timeout: Duration) -> bool {
        let seq = self.control.atomic_u32(CONTROL_SEQ_OFFSET);
        let parked = self.control.atomic_u32(CONTROL_SLEEPING_OFFSET);
        let before = seq.load(Ordering::SeqCst);
        // Rung (a write landed, an event, a wake) since the last wait: no need to park.
        if self.seen.swap(before, Ordering::AcqRel) != before {
            return true;
        }
        parked.fetch_add(1, Ordering::SeqCst);
        if seq.load(Ordering::SeqCst) == before && !self.hub.is_closed() {
            futex_wait(seq, before, timeout);
        }
        parked.fetch_sub(1, Ordering::SeqCst);
        let after = seq.load(Ordering::Acquire);
        self.seen.store(after, Ordering::Release);
        after != before
    }

    fn close(&self) {
        if self.hub.is_closed() {
            return;
        }
        self.hub.close();
        // The hub's close rang the doorbell; wake any parked thread once more regardless.
        ring(&self.control);
        // Wake the accept thread so it sees the hub closed and exits.
        if let Ok(addr) = parse_address(&self.name) {
            let _ = UnixStream::connect_addr(&addr);
        }
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_reject_garbage() {
        let tag = Tag {
            pid: 42,
            fd: 7,
            ino: 99,
            map_len: 8192,
            control_fd: 8,
            control_ino: 100,
        };
        assert_eq!(Tag::decode(&tag.encode()), Ok(tag));
        assert!(Tag::decode(&[]).is_err());
        assert!(Tag::decode(&[0xFF; TAG_BYTES]).is_err());
        assert!(Tag::decode(&tag.encode()[1..]).is_err());
    }

    /// Connects `a` to `b` (node 2) and waits, at most 30 s, until `a` knows `b`'s
    /// region `region`.
    fn link_to_region(a: &ShmEndpoint, b: &ShmEndpoint, region: RegionId) {
        a.connect(2, &b.address()).unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(30);
        while a.remote_region(2, region).is_none() {
            assert!(std::time::Instant::now() < give_up, "link never came up");
            a.wait(Duration::from_millis(10));
        }
    }

    /// A thread parked in `wait` with a long timeout is woken by a peer's write and by
    /// `wake` (it parks on the futex itself: a lost wake-up would leave it parked).
    #[test]
    fn a_parked_wait_is_woken_by_a_write_and_by_wake() {
        use std::sync::mpsc;
        let ns = format!("parked-{}", std::process::id());
        let a = ShmEndpoint::open(1, &ns, FabricConfig::default()).unwrap();
        let b = ShmEndpoint::open(2, &ns, FabricConfig::default()).unwrap();
        let _row = b.register_region(7, 64).unwrap();
        link_to_region(&a, &b, 7);
        while b.wait(Duration::ZERO) {}
        for via_write in [true, false] {
            let (tx, rx) = mpsc::channel();
            let parked = {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    let _ = tx.send(());
                    b.wait(Duration::from_secs(600))
                })
            };
            rx.recv().unwrap();
            // Until the waiter is parked (or returned), keep ringing: either way the
            // parked thread must come back long before its 600 s timeout.
            while !parked.is_finished() {
                if via_write {
                    a.write(2, 7, 0, &1u64.to_le_bytes()).unwrap();
                } else {
                    b.wake();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                parked.join().unwrap(),
                "woken by a ring, not by its timeout"
            );
            while b.wait(Duration::ZERO) {}
        }
        a.close();
        b.close();
    }

    /// Corked writes land at once but ring each peer's doorbell once, at the outermost
    /// uncork: nested uncorks hold the ring, the last one wakes a parked peer (probes are
    /// a minute apart here, so they do not ring it meanwhile).
    #[test]
    fn corked_writes_ring_the_peer_once_at_the_outermost_uncork() {
        let ns = format!("corked-ring-{}", std::process::id());
        let cfg = FabricConfig {
            probe_interval_ms: 60_000,
            suspect_floor_ms: 600_000,
            suspect_ceiling_ms: 600_000,
            ..FabricConfig::default()
        };
        let a = ShmEndpoint::open(1, &ns, cfg.clone()).unwrap();
        let b = ShmEndpoint::open(2, &ns, cfg).unwrap();
        let row = b.register_region(7, 64).unwrap();
        link_to_region(&a, &b, 7);
        let give_up = std::time::Instant::now() + Duration::from_secs(30);
        // Until b has seen the link come up (its events ring its doorbell too).
        while !b.peers().contains(&1) {
            assert!(
                std::time::Instant::now() < give_up,
                "link never came up at b"
            );
            b.wait(Duration::from_millis(10));
        }
        while b.poll_event().is_some() {}
        while b.wait(Duration::ZERO) {}
        let rings = || {
            b.control
                .atomic_u32(CONTROL_SEQ_OFFSET)
                .load(Ordering::SeqCst)
        };
        let before = rings();
        a.cork();
        a.cork();
        for i in 0..3u64 {
            a.write(2, 7, i as usize * 8, &(i + 10).to_le_bytes())
                .unwrap();
        }
        a.uncork();
        assert_eq!(row.load_u64(16), 12, "a corked write lands at once");
        assert_eq!(rings(), before, "no ring before the outermost uncork");
        let parked = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.wait(Duration::from_secs(120)))
        };
        a.uncork();
        assert_eq!(
            rings(),
            before + 1,
            "three writes to one peer: one ring, at the outermost uncork"
        );
        assert!(
            parked.join().unwrap(),
            "the outermost uncork rang the peer's doorbell"
        );
        a.close();
        b.close();
    }

    /// A local region's idle pages go back to its memfd's owner (the file's blocks are
    /// freed) and read as zeros through every mapping, a peer's included.
    #[test]
    fn reclaimed_pages_leave_the_memfd_for_every_mapping() {
        use std::os::unix::fs::MetadataExt;
        const LEN: usize = 64 * PAGE_BYTES;
        let file = memfd("spindle-reclaim", LEN).unwrap();
        assert_eq!(file.metadata().unwrap().blocks(), 0, "sparse when made");
        let mapping = Mapping::map(&file, LEN).unwrap();
        let ptr = mapping.ptr;
        // SAFETY: as in make_region: page aligned, LEN bytes while `mapping` lives.
        let region = unsafe { Region::from_raw(1, ptr, LEN, Box::new(mapping)) }
            .with_reclaim(crate::region::Reclaim::Shared);
        let ino = file.metadata().unwrap().ino();
        let peer = map_remote(std::process::id(), file.as_raw_fd(), ino, LEN)
            .unwrap()
            .expect("own memfd maps through /proc");
        // SAFETY: as above, for the second mapping of the same file.
        let peer = unsafe { Region::from_raw(1, peer.ptr, LEN, Box::new(peer)) };
        region.write_bytes(0, &[5; LEN]).unwrap();
        assert!(
            file.metadata().unwrap().blocks() > 0,
            "written pages allocated"
        );
        assert!(
            peer.to_vec(LEN - 8, 8).unwrap() == [5; 8],
            "the peer sees them"
        );
        assert_eq!(
            region.reclaim(PAGE_BYTES, LEN - PAGE_BYTES).unwrap(),
            LEN - PAGE_BYTES
        );
        // Checked before reading the range again: a read of a memfd hole through a
        // shared mapping allocates its page again (zeroed).
        assert!(
            file.metadata().unwrap().blocks() * 512 <= 2 * PAGE_BYTES as u64,
            "the file's pages were freed"
        );
        assert!(peer.to_vec(0, 8).unwrap() == [5; 8], "the first page kept");
        assert!(peer
            .to_vec(PAGE_BYTES, LEN - PAGE_BYTES)
            .unwrap()
            .iter()
            .all(|b| *b == 0));
        assert!(region.to_vec(LEN - 8, 8).unwrap() == [0; 8]);
    }

    #[test]
    fn remote_maps_check_the_inode() {
        let file = memfd("spindle-test", PAGE_BYTES).unwrap();
        let ino = file.metadata().unwrap().ino();
        let pid = std::process::id();
        let fd = file.as_raw_fd();
        let mapped = map_remote(pid, fd, ino, PAGE_BYTES).unwrap();
        assert!(mapped.is_some(), "own memfd maps through /proc");
        assert!(map_remote(pid, fd, ino + 1, PAGE_BYTES).unwrap().is_none());
        assert!(map_remote(pid, fd, ino, 2 * PAGE_BYTES).unwrap().is_none());
        assert!(map_remote(pid, i32::MAX, ino, PAGE_BYTES)
            .unwrap()
            .is_none());
        // A file elsewhere announced with its own inode number is not a memfd: the number
        // alone could repeat across filesystems.
        let dir = std::env::temp_dir().join(format!("spindle-shm-dev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("region"))
            .unwrap();
        plain.set_len(PAGE_BYTES as u64).unwrap();
        let plain_meta = plain.metadata().unwrap();
        if memfd_device().is_some_and(|dev| dev != plain_meta.dev()) {
            assert!(
                map_remote(pid, plain.as_raw_fd(), plain_meta.ino(), PAGE_BYTES)
                    .unwrap()
                    .is_none(),
                "a plain file with the announced inode number is not the region"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A withdrawn region's descriptor number the owner reused for a socket (a link it
    /// accepted or dialed meanwhile), which /proc will not open (ENXIO): the region is
    /// gone, as when the number is free or names another memfd — not an error, which
    /// the link layer takes for a malformed announcement and drops the link over.
    #[test]
    fn a_region_fd_reused_by_a_socket_is_gone_not_malformed() {
        let withdrawn = memfd("spindle-withdrawn", PAGE_BYTES).unwrap();
        let ino = withdrawn.metadata().unwrap().ino();
        drop(withdrawn);
        let (socket, _other_end) = UnixStream::pair().unwrap();
        let pid = std::process::id();
        assert!(
            map_remote(pid, socket.as_raw_fd(), ino, PAGE_BYTES)
                .unwrap()
                .is_none(),
            "a number that names a socket now is not the announced memfd"
        );

        // Through an announcement, as the handshake and the reader apply it: accepted,
        // nothing mapped (the owner's withdrawal follows on the link). The owner's
        // control page is made as `ShmEndpoint::open` makes it.
        let control_file = memfd("spindle-test-control", PAGE_BYTES).unwrap();
        let control = Mapping::map(&control_file, PAGE_BYTES).unwrap();
        // SAFETY: offset 0 of the fresh page-aligned page; atomic access only.
        unsafe { &*control.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
            .store(CONTROL_MAGIC, Ordering::Release);
        let own_control = memfd("spindle-test-own-control", PAGE_BYTES).unwrap();
        let hooks = ShmHooks {
            node: 2,
            pid,
            control_ino: own_control.metadata().unwrap().ino(),
            control_file: own_control,
            local: Mutex::new(BTreeMap::new()),
            remote: RwLock::new(BTreeMap::new()),
            held_any: AtomicBool::new(false),
        };
        let stale = Tag {
            pid,
            fd: socket.as_raw_fd(),
            ino,
            map_len: PAGE_BYTES as u64,
            control_fd: control_file.as_raw_fd(),
            control_ino: control_file.metadata().unwrap().ino(),
        };
        let desc = RegionDesc {
            node: 1,
            region: 7,
            len: PAGE_BYTES,
        };
        assert_eq!(
            hooks.remote_region_announced(1, desc, &stale.encode()),
            Ok(()),
            "a region withdrawn in flight does not fail the link"
        );
        assert!(
            hooks
                .remote
                .read()
                .unwrap()
                .get(&1)
                .is_some_and(|maps| maps.regions.is_empty()),
            "the owner's control page is mapped, the withdrawn region is not"
        );
    }

    #[test]
    fn addresses_parse_or_error() {
        assert!(parse_address("@spindle-x-1").is_ok());
        assert!(parse_address("@").is_err());
        assert!(parse_address("").is_err());
    }
}
