//! The libfabric backend (feature `libfabric`): the fabric contract over any libfabric
//! provider — `tcp;ofi_rxm` and `shm` on any Linux box, `verbs;ofi_rxm` or `efa` on RDMA
//! hardware.
//!
//! ## How it maps the contract
//!
//! - One `FI_EP_RDM` endpoint per [`LibfabricEndpoint`], with one completion queue
//!   (`FI_CQ_FORMAT_DATA`) and one address vector. A progress thread owned by the backend
//!   polls the completion queue (most providers progress data manually), issues queued
//!   operations and runs the failure detector.
//! - **Regions** are page-aligned zeroed memory registered with `fi_mr_reg`
//!   (`FI_REMOTE_WRITE`); peers learn `(id, len, address, key)` at set-up.
//! - **Writes** are `FI_RMA` writes (`fi_writemsg`) into the peer's MR, carrying
//!   `FI_REMOTE_CQ_DATA` so the owner's progress thread sees the write land and rings its
//!   doorbell. **Sends** are `FI_MSG` sends (`fi_sendmsg`) whose immediate travels as
//!   remote CQ data; a send larger than one receive buffer travels as several chunks,
//!   reassembled in order.
//! - **Who sent it.** The endpoint has `FI_SOURCE` (a provider without it is refused), and
//!   completions are read with `fi_cq_readfrom`, so each receive carries the sender's index
//!   in our address vector. A chunk's header names its source node; it is taken as that
//!   node's only if the index is the one `fi_av_insert` gave for that node's endpoint name
//!   when its link was set up. Otherwise it is dropped, and the named node's link is left
//!   alone; if the index is another peer's, that peer is failed
//!   ([`FailureReason::Malformed`]) for sending under someone else's name. Two limits:
//!   the source is the provider's word (`ofi_rxm` takes it from the connection, whose
//!   peer named itself when it connected; `shm` from a command header the sender writes
//!   into shared memory), so this stops a peer that lies in our header, not one that
//!   also patches its provider; and libfabric 1.17's `shm` reports a stale source for a
//!   sender outside the address vector (fixed in 1.18), so there a stranger's chunk can
//!   still pass as a peer's, and no peer is failed on the strength of its source.
//! - **FIFO.** The backend asks for `FI_ORDER_WAW | FI_ORDER_WAS | FI_ORDER_SAW |
//!   FI_ORDER_SAS` and checks that the provider also orders data placement
//!   (`max_order_waw_size`). When the provider promises both, operations to one peer are
//!   pipelined ([`PEER_OPS_IN_FLIGHT_MAX`]); when it does not, the backend enforces the
//!   order itself: one operation in flight per peer, each with `FI_DELIVERY_COMPLETE`, so
//!   an operation is issued only after the previous one was placed in the peer's memory.
//!   Large writes are split at word-aligned target offsets, so no aligned word is torn
//!   between two operations.
//! - **Set-up and failures.** A small TCP side channel (one stream per peer) carries the
//!   libfabric endpoint names, region tables, region announcements and withdrawals, and
//!   heartbeat probes. A peer is declared failed when its side channel breaks, when it is
//!   silent past the failure detector's bound ([`crate::detector`]), or when an operation to it
//!   completes in error. The peer table, the side channel's protocol and the per-peer
//!   operation queues are shared with the verbs backend (`side_link.rs`); this module
//!   supplies the libfabric steps (its `SideBackend`) and the completion handling.
//! - **Provider.** [`LibfabricEndpoint::open`] takes the provider name (`"tcp;ofi_rxm"`,
//!   `"shm"`, `"verbs;ofi_rxm"`, `"efa"`); an empty name lets libfabric choose, and
//!   libfabric itself honours the `FI_PROVIDER` environment variable as a filter.
//!
//! ## Why our own bindings
//!
//! The bindings are generated at build time by bindgen from the system's libfabric headers
//! (Debian's `libfabric-dev`, 1.17 or newer), and libfabric's static-inline calls go
//! through a small C shim (`csrc/fi_shim.c`) compiled with `cc`. The crates.io
//! `ofi-libfabric-sys` needs libfabric 2.x headers, which Debian does not ship, and
//! `libfabric-sys` 0.0.2 is an unmaintained 2017 build; generating our own against the
//! installed headers keeps the ABI in step with the library we link. All `unsafe` of the
//! backend lives in this module.
//!
//! ## Example
//!
//! ```no_run
//! use spindle_transport_rdma::libfabric::LibfabricEndpoint;
//! use spindle_transport_rdma::{Endpoint, FabricConfig};
//!
//! let a = LibfabricEndpoint::open(1, "tcp;ofi_rxm", FabricConfig::default())?;
//! let b = LibfabricEndpoint::open(2, "tcp;ofi_rxm", FabricConfig::default())?;
//! let _row = b.register_region(7, 64)?;
//! a.connect(2, &b.address())?;
//! // … poll `a` until Event::PeerConnected { peer: 2 }, then:
//! a.write_then_release(2, 7, 8, b"payload", 0, 1)?;
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::net::TcpListener;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::side_channel::{frame, lock, u32_at, u64_at, KIND_REGION};
use crate::side_link::{
    self, Op, Post, SendHeader, SideBackend, SideLinks, SideState, SEND_HEADER_BYTES,
};
use crate::{
    Endpoint, Error, Event, FabricConfig, FailureReason, NodeId, Region, RegionDesc, RegionId,
    Result, EVENT_QUEUE_MAX, WORD_BYTES,
};

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    rust_2018_idioms,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/fi_bindings.rs"));
}

/// Largest piece one operation carries: writes and sends are split into pieces of at most
/// this many bytes (the size of one staging and one receive buffer).
pub const CHUNK_BYTES_MAX: usize = side_link::CHUNK_BYTES_MAX;
/// Registered staging buffers for outbound operations (all peers together).
pub const TX_SLOTS_MAX: usize = 64;
/// Receive buffers kept posted for inbound sends.
pub const RX_SLOTS_MAX: usize = 64;
/// Operations in flight to one peer when the provider orders them itself.
pub const PEER_OPS_IN_FLIGHT_MAX: usize = 16;
/// Completions read from the completion queue per call.
const CQ_BATCH_MAX: usize = 64;
/// Completion queue depth.
const CQ_ENTRIES_MAX: usize = 4096;
/// Largest libfabric endpoint name we accept from a peer.
const FABRIC_NAME_BYTES_MAX: usize = 1024;
/// How long the progress thread parks when it has nothing to do: most providers progress
/// data only when the completion queue is polled, so it never parks for long.
const IDLE_PARK: Duration = Duration::from_millis(1);
/// After its last completion or issue, the progress thread keeps polling (yielding the
/// core between polls) this long before it parks: an answer to what it just sent is
/// progressed at once instead of after a park, while an idle endpoint costs no CPU.
const SPIN_AFTER_ACTIVITY: Duration = Duration::from_millis(2);
/// First field of every send chunk.
const SEND_MAGIC: u32 = 0x5350_4649; // "SPFI"
/// Receive buffer size: one chunk plus its header.
const RX_BUF_BYTES: usize = CHUNK_BYTES_MAX + SEND_HEADER_BYTES;
/// The source address of a completion whose sender is not in our address vector
/// (`FI_ADDR_NOTAVAIL` of `rdma/fabric.h`, `(uint64_t) -1`, which bindgen cannot see).
const FI_ADDR_NOTAVAIL: sys::fi_addr_t = u64::MAX;
/// `FI_VERSION(1, 18)` of `rdma/fabric.h` (major in the high 16 bits).
const FI_VERSION_1_18: u32 = (1 << 16) | 18;

/// The libfabric return code as an [`Error`].
fn fi_error(context: &str, ret: i64) -> Error {
    let code = ret.unsigned_abs().min(i32::MAX as u64) as i32;
    // SAFETY: fi_strerror accepts any error number and returns a pointer to a static,
    // NUL-terminated string.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    Error::io(
        context.to_string(),
        std::io::Error::other(format!("libfabric error {code}: {text}")),
    )
}

fn check(context: &str, ret: std::os::raw::c_int) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(fi_error(context, ret as i64))
    }
}

/// Fabric and domain: everything memory registrations need. Closed when the last MR and
/// the endpoint are gone.
struct Domain {
    /// Next MR key to request when the provider lets the application choose keys (no
    /// FI_MR_PROV_KEY).
    next_key: std::sync::atomic::AtomicU64,
    info: *mut sys::fi_info,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
}

// SAFETY: the domain was opened with FI_THREAD_SAFE (checked in `open`), so its handles may
// be used from any thread; the raw pointers are only dereferenced by libfabric.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: the handles were opened in `open` and are closed exactly once, here, after
        // every object opened on them (MRs hold an Arc<Domain>, the endpoint too).
        unsafe {
            if !self.domain.is_null() {
                sys::spindle_fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                sys::spindle_fi_close(&mut (*self.fabric).fid);
            }
            if !self.info.is_null() {
                sys::fi_freeinfo(self.info);
            }
        }
    }
}

/// Page-aligned zeroed memory registered with the domain.
struct Registered {
    domain: Arc<Domain>,
    mr: *mut sys::fid_mr,
    ptr: NonNull<u8>,
    /// The length peers may write (whole words), at most the allocation's.
    len: usize,
    /// The memory: zero pages the kernel allocates when first touched (by the provider or
    /// us), unmapped after `Drop` closed the MR (fields drop after `drop`).
    map: crate::region::AnonMap,
}

// SAFETY: the memory is only touched through atomics (regions) or by the progress thread
// under the state lock (staging buffers); the MR handle is thread-safe (FI_THREAD_SAFE).
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

impl Registered {
    fn new(domain: &Arc<Domain>, len_bytes: usize, access: u64) -> Result<Registered> {
        // An anonymous mapping, not `alloc_zeroed`: with a page alignment the system
        // allocator zero-fills (touches) every page up front, a mapping is zero pages
        // allocated on first touch (a 256 MiB RDMC region costs address space only).
        let map = crate::region::AnonMap::new(len_bytes.max(WORD_BYTES))?;
        let (ptr, len) = (map.ptr(), map.len());
        let mut mr: *mut sys::fid_mr = std::ptr::null_mut();
        let requested_key = domain.next_key.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` is valid for `len` bytes until `Drop` frees it, after closing the MR;
        // the domain outlives the MR (we hold an Arc to it).
        let ret = unsafe {
            sys::spindle_fi_mr_reg(
                domain.domain,
                ptr.as_ptr().cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                std::ptr::null_mut(),
            )
        };
        if ret != 0 {
            // `map` unmaps the memory, never registered.
            return Err(fi_error("registering memory (fi_mr_reg)", ret as i64));
        }
        Ok(Registered {
            domain: Arc::clone(domain),
            mr,
            ptr,
            len: crate::round_up_to_words(len_bytes),
            map,
        })
    }

    fn key(&self) -> u64 {
        // SAFETY: `mr` is an open MR until Drop.
        unsafe { sys::spindle_fi_mr_key(self.mr) }
    }

    fn desc(&self) -> *mut std::os::raw::c_void {
        // SAFETY: `mr` is an open MR until Drop.
        unsafe { sys::spindle_fi_mr_desc(self.mr) }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: the MR was opened in `new` and is closed once; the memory (`map`) is
        // unmapped only after this, when the fields drop, so the MR no longer exposes it.
        unsafe {
            sys::spindle_fi_close(&mut (*self.mr).fid);
        }
        let _ = (&self.domain, self.map.len());
    }
}

/// The endpoint objects. Closed before the domain (it holds an Arc to it).
struct Fabric {
    domain: Arc<Domain>,
    ep: *mut sys::fid_ep,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    /// The provider places RMA data in issue order, so operations may be pipelined.
    ordered: bool,
    /// Remote addresses are virtual addresses (FI_MR_VIRT_ADDR), not offsets.
    virt_addr: bool,
    /// A receive from a sender outside our address vector has the source
    /// `FI_ADDR_NOTAVAIL`, so a source that is a peer's address means that peer sent it.
    /// Not so with libfabric 1.17's shm provider: it writes no source for such a
    /// completion, which then reads as whatever that completion-queue slot held before
    /// (zero, or an earlier sender's address); fixed in 1.18.
    unknown_source_exact: bool,
    provider: String,
    name: Vec<u8>,
}

// SAFETY: FI_THREAD_SAFE endpoint; see `Domain`.
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: opened in `open_fabric`, closed once, endpoint first (it is bound to the
        // CQ and AV).
        unsafe {
            if !self.ep.is_null() {
                sys::spindle_fi_close(&mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                sys::spindle_fi_close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                sys::spindle_fi_close(&mut (*self.cq).fid);
            }
        }
    }
}

const ORDER_NEEDED: u64 =
    (sys::FI_ORDER_WAW | sys::FI_ORDER_WAS | sys::FI_ORDER_SAW | sys::FI_ORDER_SAS) as u64;

fn open_fabric(provider: &str) -> Result<Fabric> {
    // First ask for ordered delivery; a provider that cannot give it is still used, with
    // the backend enforcing the order (see the module docs).
    let info = match getinfo(provider, true) {
        Ok(info) => info,
        Err(_) => getinfo(provider, false)?,
    };
    let mut domain = Domain {
        next_key: std::sync::atomic::AtomicU64::new(1),
        info,
        fabric: std::ptr::null_mut(),
        domain: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid fi_info returned by fi_getinfo; the out-pointers are valid.
    unsafe {
        check(
            "opening the fabric",
            sys::spindle_fi_fabric(
                (*info).fabric_attr,
                &mut domain.fabric,
                std::ptr::null_mut(),
            ),
        )?;
        check(
            "opening the domain",
            sys::spindle_fi_domain(
                domain.fabric,
                info,
                &mut domain.domain,
                std::ptr::null_mut(),
            ),
        )?;
    }
    let domain = Arc::new(domain);
    // SAFETY: `info` and its attribute structs stay valid while `domain` lives.
    let (ordered, virt_addr, provider_name, cq_data_size, caps) = unsafe {
        let ep_attr = &*(*info).ep_attr;
        let tx = &*(*info).tx_attr;
        let dom = &*(*info).domain_attr;
        let prov = CStr::from_ptr((*(*info).fabric_attr).prov_name)
            .to_string_lossy()
            .into_owned();
        (
            tx.msg_order & ORDER_NEEDED == ORDER_NEEDED
                && ep_attr.max_order_waw_size >= CHUNK_BYTES_MAX,
            dom.mr_mode & sys::FI_MR_VIRT_ADDR as i32 != 0,
            prov,
            dom.cq_data_size,
            (*info).caps,
        )
    };
    if caps & sys::FI_SOURCE == 0 {
        // Without the source address a receive could not be checked against the node its
        // header names (see `Shared::rx_done`): refuse rather than run unchecked.
        return Err(Error::Config(format!(
            "provider {provider_name} does not report the source of receives (FI_SOURCE)"
        )));
    }
    if cq_data_size < 4 {
        return Err(Error::Config(format!(
            "provider {provider_name} carries {cq_data_size} bytes of remote CQ data; 4 needed"
        )));
    }
    // SAFETY: fi_version takes no arguments and only returns the library's version.
    let version = unsafe { sys::fi_version() };
    let unknown_source_exact = !(provider_name == "shm" && version < FI_VERSION_1_18);
    let mut fabric = Fabric {
        domain: Arc::clone(&domain),
        ep: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        av: std::ptr::null_mut(),
        ordered,
        virt_addr,
        unknown_source_exact,
        provider: provider_name,
        name: Vec::new(),
    };
    let mut cq_attr = sys::fi_cq_attr {
        size: CQ_ENTRIES_MAX,
        format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
        wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
        ..Default::default()
    };
    let mut av_attr = sys::fi_av_attr {
        type_: sys::fi_av_type_FI_AV_TABLE,
        count: 0, // provider default (shm allows at most 256)
        ..Default::default()
    };
    let mut name = vec![0u8; FABRIC_NAME_BYTES_MAX];
    let mut name_len = name.len();
    // SAFETY: every handle passed is open (or being opened into a valid out-pointer); the
    // bind flags are the ones libfabric documents for an RDM endpoint; the shm name is a
    // NUL-terminated string of the length given, which the provider copies.
    unsafe {
        check(
            "opening the completion queue",
            sys::spindle_fi_cq_open(
                domain.domain,
                &mut cq_attr,
                &mut fabric.cq,
                std::ptr::null_mut(),
            ),
        )?;
        check(
            "opening the address vector",
            sys::spindle_fi_av_open(
                domain.domain,
                &mut av_attr,
                &mut fabric.av,
                std::ptr::null_mut(),
            ),
        )?;
        check(
            "opening the endpoint",
            sys::spindle_fi_endpoint(domain.domain, info, &mut fabric.ep, std::ptr::null_mut()),
        )?;
        check(
            "binding the completion queue",
            sys::spindle_fi_ep_bind(
                fabric.ep,
                &mut (*fabric.cq).fid,
                (sys::FI_TRANSMIT | sys::FI_RECV) as u64,
            ),
        )?;
        check(
            "binding the address vector",
            sys::spindle_fi_ep_bind(fabric.ep, &mut (*fabric.av).fid, 0),
        )?;
        if fabric.provider == "shm" {
            let mut unique = shm_endpoint_name();
            check(
                "naming the shm endpoint",
                sys::spindle_fi_setname(fabric.ep, unique.as_mut_ptr().cast(), unique.len()),
            )?;
        }
        check("enabling the endpoint", sys::spindle_fi_enable(fabric.ep))?;
        check(
            "reading the endpoint name",
            sys::spindle_fi_getname(fabric.ep, name.as_mut_ptr().cast(), &mut name_len),
        )?;
    }
    name.truncate(name_len.min(FABRIC_NAME_BYTES_MAX));
    fabric.name = name;
    Ok(fabric)
}

/// A name for a shm endpoint that no other endpoint, live or dead, has had: libfabric's
/// default, `<pid>:<uid>:<index>`, is the name of a shared-memory file, which a SIGKILLed
/// process leaves behind; once the pid is reused, the new process finds "its" file held
/// by a live process (itself) and `fi_enable` fails with EBUSY. The name adds the clock
/// (nanoseconds) and a per-process count to the pid, NUL-terminated as libfabric wants.
fn shm_endpoint_name() -> Vec<u8> {
    static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = OPENED.fetch_add(1, Ordering::Relaxed);
    let mut name = format!("spindle-{}-{nanos:x}-{count}", std::process::id()).into_bytes();
    name.push(0);
    name
}

fn getinfo(provider: &str, ordered: bool) -> Result<*mut sys::fi_info> {
    let prov =
        CString::new(provider).map_err(|_| Error::Config("provider name has a NUL".into()))?;
    // SAFETY: fi_allocinfo returns a zeroed fi_info with allocated attribute structs (or
    // null, checked); we only set plain fields, and reset `prov_name` (which points into our
    // CString, not malloc'd memory) before fi_freeinfo.
    unsafe {
        let hints = sys::spindle_fi_allocinfo();
        if hints.is_null() {
            return Err(Error::Config("fi_allocinfo failed".into()));
        }
        (*hints).caps = (sys::FI_MSG
            | sys::FI_RMA
            | sys::FI_SEND
            | sys::FI_RECV
            | sys::FI_WRITE
            | sys::FI_REMOTE_WRITE) as u64
            // Receive completions name the sender's address (checked in `rx_done`).
            | sys::FI_SOURCE;
        (*hints).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
        (*(*hints).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
        (*(*hints).domain_attr).mr_mode =
            (sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY)
                as i32;
        (*(*hints).domain_attr).threading = sys::fi_threading_FI_THREAD_SAFE;
        if ordered {
            (*(*hints).tx_attr).msg_order = ORDER_NEEDED;
            (*(*hints).rx_attr).msg_order = ORDER_NEEDED;
        }
        if !provider.is_empty() {
            (*(*hints).fabric_attr).prov_name = prov.as_ptr().cast_mut();
        }
        let mut info: *mut sys::fi_info = std::ptr::null_mut();
        let ret = sys::fi_getinfo(
            sys::spindle_fi_version_1_17(),
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints,
            &mut info,
        );
        (*(*hints).fabric_attr).prov_name = std::ptr::null_mut();
        sys::fi_freeinfo(hints);
        if ret != 0 || info.is_null() {
            return Err(Error::Config(format!(
                "no libfabric provider matches {provider:?} (FI_EP_RDM with RMA, messages and \
                 FI_SOURCE): {}",
                fi_error("fi_getinfo", ret as i64)
            )));
        }
        // Keep only the first match.
        let first = sys::fi_dupinfo(info);
        sys::fi_freeinfo(info);
        if first.is_null() {
            return Err(Error::Config("fi_dupinfo failed".into()));
        }
        Ok(first)
    }
}

/// The libfabric side of a [`SideLinks`]: the fabric objects, staging and receive
/// buffers and their operation contexts.
struct Fi {
    fabric: Fabric,
    tx_buf: Registered,
    rx_buf: Registered,
    /// Receive completions put back into posting order (see [`RxOrder`]).
    rx_order: Mutex<RxOrder>,
    /// One libfabric operation context per tx slot, then per rx slot (FI_CONTEXT2 mode).
    contexts: Box<[std::cell::UnsafeCell<sys::fi_context2>]>,
}

// SAFETY: `contexts` is only handed to libfabric (which writes it while an operation is
// outstanding) and compared by address; every other field is Send + Sync.
unsafe impl Send for Fi {}
// SAFETY: as above.
unsafe impl Sync for Fi {}

type Shared = SideLinks<Fi>;

impl SideBackend for Fi {
    type Local = ();
    /// The peer's libfabric endpoint name.
    type Remote = Vec<u8>;
    /// The peer's address in our address vector.
    type Conn = u64;
    type Registered = Registered;
    type Extra = ();
    const NAME: &'static str = "fi";
    const SEND_MAGIC: u32 = SEND_MAGIC;

    fn prepare(&self) -> Result<()> {
        Ok(())
    }

    fn hello_payload(&self, node: NodeId, _local: &()) -> Vec<u8> {
        let mut p = node.to_le_bytes().to_vec();
        p.extend_from_slice(&self.fabric.name);
        p
    }

    fn parse_hello(&self, payload: &[u8]) -> Option<(NodeId, Vec<u8>)> {
        let node = u32_at(payload, 0)?;
        let name = payload.get(4..)?.to_vec();
        (!name.is_empty() && name.len() <= FABRIC_NAME_BYTES_MAX).then_some((node, name))
    }

    /// Inserts the peer's fabric name into the address vector.
    fn connect_fabric(&self, node: NodeId, peer: NodeId, _local: (), name: Vec<u8>) -> Option<u64> {
        let mut fi_addr: u64 = u64::MAX;
        // SAFETY: `name` is a peer's endpoint name of `name.len()` bytes; the AV copies it.
        // One address is inserted into `fi_addr`.
        let ret = unsafe {
            sys::spindle_fi_av_insert(
                self.fabric.av,
                name.as_ptr().cast(),
                1,
                &mut fi_addr,
                0,
                std::ptr::null_mut(),
            )
        };
        if ret != 1 {
            tracing::warn!(node, peer, ret, "fi_av_insert rejected the peer's name");
            return None;
        }
        Some(fi_addr)
    }

    fn installed(&self, _: &mut (), _peer: NodeId, _link: u64, _conn: &u64, _old: Option<u64>) {}

    fn link_down(&self, _: &mut (), _conn: u64) {}

    fn region_frame(&self, id: RegionId, reg: &Registered) -> Vec<u8> {
        region_frame(id, reg, self.fabric.virt_addr, reg.len)
    }

    fn region_key(payload: &[u8]) -> Option<u64> {
        u64_at(payload, 20)
    }

    fn window(&self) -> usize {
        if self.fabric.ordered {
            PEER_OPS_IN_FLIGHT_MAX
        } else {
            1
        }
    }

    fn post(&self, slot: usize, fi_addr: &u64, op: &Op) -> Post {
        match self.post_op(slot, *fi_addr, op) {
            Ok(true) => Post::Done,
            Ok(false) => Post::Busy, // EAGAIN: progress first
            Err(err) => Post::Failed(err.to_string()),
        }
    }
}

/// Receive buffers are matched to messages in posting order (FI_ORDER_SAS), but a
/// provider may *complete* them out of order (a rendezvous message completes after a
/// later eager one). Completions are therefore handed on in posting order.
#[derive(Debug, Default)]
struct RxOrder {
    /// Posting sequence of the receive currently posted in each slot.
    slot_seq: Vec<u64>,
    next_post: u64,
    next_deliver: u64,
    /// Completed receives waiting for earlier ones, by posting sequence.
    done: BTreeMap<u64, RxDone>,
}

/// A finished receive, as the completion queue reported it.
#[derive(Debug, Clone, Copy)]
struct RxDone {
    slot: usize,
    flags: u64,
    len: usize,
    /// The remote CQ data (the immediate).
    data: u64,
    /// Where the message came from: the sender's index in our address vector
    /// (`FI_SOURCE`), or [`FI_ADDR_NOTAVAIL`] when it is not in it.
    src: sys::fi_addr_t,
    /// False: the receive completed in error.
    ok: bool,
}

/// A [`crate::Endpoint`] over a libfabric provider (see the module docs).
pub struct LibfabricEndpoint {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for LibfabricEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibfabricEndpoint")
            .field("node", &self.shared.node)
            .field("provider", &self.shared.backend.fabric.provider)
            .field("address", &self.shared.listen_addr)
            .finish()
    }
}

impl LibfabricEndpoint {
    /// Opens an endpoint for `node` on `provider` (`"tcp;ofi_rxm"`, `"shm"`,
    /// `"verbs;ofi_rxm"`, `"efa"`, or `""` for libfabric's choice), with its side channel
    /// listening on 127.0.0.1 (an ephemeral port).
    pub fn open(node: NodeId, provider: &str, cfg: FabricConfig) -> Result<LibfabricEndpoint> {
        Self::open_on(node, provider, "127.0.0.1:0", cfg)
    }

    /// As [`LibfabricEndpoint::open`], with the side channel listening on `bind`.
    pub fn open_on(
        node: NodeId,
        provider: &str,
        bind: &str,
        cfg: FabricConfig,
    ) -> Result<LibfabricEndpoint> {
        cfg.validate()?;
        let fabric = open_fabric(provider)?;
        let access = (sys::FI_SEND | sys::FI_RECV | sys::FI_WRITE) as u64;
        let tx_buf = Registered::new(&fabric.domain, TX_SLOTS_MAX * CHUNK_BYTES_MAX, access)?;
        let rx_buf = Registered::new(&fabric.domain, RX_SLOTS_MAX * RX_BUF_BYTES, access)?;
        let listener = TcpListener::bind(bind).map_err(|err| Error::BadAddress {
            addr: bind.to_string(),
            detail: err.to_string(),
        })?;
        let listen_addr = listener
            .local_addr()
            .map_err(|err| Error::io("reading the side-channel address", err))?;
        listener
            .set_nonblocking(true)
            .map_err(|err| Error::io("configuring the side-channel listener", err))?;
        let contexts: Box<[std::cell::UnsafeCell<sys::fi_context2>]> = (0..TX_SLOTS_MAX
            + RX_SLOTS_MAX)
            .map(|_| std::cell::UnsafeCell::new(sys::fi_context2::default()))
            .collect();
        tracing::debug!(node, provider = %fabric.provider, ordered = fabric.ordered, "libfabric endpoint open");
        let backend = Fi {
            fabric,
            tx_buf,
            rx_buf,
            rx_order: Mutex::new(RxOrder {
                slot_seq: vec![0; RX_SLOTS_MAX],
                ..RxOrder::default()
            }),
            contexts,
        };
        let shared = SideLinks::new(node, cfg, listen_addr, backend, (), TX_SLOTS_MAX);
        for slot in 0..RX_SLOTS_MAX {
            shared.backend.post_recv(slot)?;
        }
        let mut threads = Vec::new();
        {
            let shared = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fi-progress-{node}"))
                    .spawn(move || shared.progress_loop())
                    .map_err(|err| Error::io("spawning the progress thread", err))?,
            );
        }
        threads.push(shared.spawn_accept(listener)?);
        Ok(LibfabricEndpoint {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The libfabric provider actually in use (for example `tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.shared.backend.fabric.provider
    }

    /// True when the provider promised FIFO placement and operations are pipelined; false
    /// when the backend enforces the order with one delivery-complete operation in flight
    /// per peer.
    pub fn provider_ordered(&self) -> bool {
        self.shared.backend.fabric.ordered
    }
}

fn region_frame(id: RegionId, reg: &Registered, virt_addr: bool, len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(28);
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&(len as u64).to_le_bytes());
    let addr = if virt_addr {
        reg.ptr.as_ptr() as u64
    } else {
        0
    };
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend_from_slice(&reg.key().to_le_bytes());
    frame(KIND_REGION, &p)
}

impl Fi {
    fn context(&self, index: usize) -> *mut std::os::raw::c_void {
        assert!(
            index < self.contexts.len(),
            "context index inside the table"
        );
        self.contexts[index].get().cast()
    }

    fn context_index(&self, ctx: *mut std::os::raw::c_void) -> Option<usize> {
        let base = self.contexts.as_ptr() as usize;
        let size = std::mem::size_of::<std::cell::UnsafeCell<sys::fi_context2>>();
        let at = (ctx as usize).checked_sub(base)?;
        (at % size == 0 && at / size < self.contexts.len()).then_some(at / size)
    }

    fn rx_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < RX_SLOTS_MAX, "rx slot inside the rx buffer");
        // SAFETY: slot * RX_BUF_BYTES + RX_BUF_BYTES <= the rx buffer's length.
        unsafe { self.rx_buf.ptr.as_ptr().add(slot * RX_BUF_BYTES) }
    }

    fn tx_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < TX_SLOTS_MAX, "tx slot inside the tx buffer");
        // SAFETY: slot * CHUNK_BYTES_MAX + CHUNK_BYTES_MAX <= the tx buffer's length.
        unsafe { self.tx_buf.ptr.as_ptr().add(slot * CHUNK_BYTES_MAX) }
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        loop {
            let mut order = self.rx_order.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the rx slot's memory is registered and only touched by libfabric while
            // the receive is posted; its context entry is owned by this slot.
            let ret = unsafe {
                sys::spindle_fi_recv(
                    self.fabric.ep,
                    self.rx_ptr(slot).cast(),
                    RX_BUF_BYTES,
                    self.rx_buf.desc(),
                    u64::MAX, // FI_ADDR_UNSPEC
                    self.context(TX_SLOTS_MAX + slot),
                )
            };
            if ret == 0 {
                order.slot_seq[slot] = order.next_post;
                order.next_post += 1;
                return Ok(());
            }
            drop(order);
            if ret == -(sys::FI_EAGAIN as isize) {
                std::thread::yield_now();
                continue;
            }
            return Err(fi_error("posting a receive (fi_recv)", ret as i64));
        }
    }

    /// Posts one operation from staging slot `slot`; Ok(false) on EAGAIN.
    fn post_op(&self, slot: usize, fi_addr: u64, op: &Op) -> Result<bool> {
        let staging = self.tx_ptr(slot);
        let mut flags = (sys::FI_COMPLETION | sys::FI_REMOTE_CQ_DATA) as u64;
        if !self.fabric.ordered {
            flags |= sys::FI_DELIVERY_COMPLETE as u64;
        }
        let mut desc = [self.tx_buf.desc()];
        let ret = match op {
            Op::Write {
                remote_addr,
                key,
                bytes,
                ..
            } => {
                assert!(
                    bytes.len() <= CHUNK_BYTES_MAX,
                    "writes are split into chunks"
                );
                // SAFETY: the staging slot holds CHUNK_BYTES_MAX bytes and is free (popped
                // from tx_free), so libfabric is not reading it.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), staging, bytes.len()) };
                let iov = sys::iovec {
                    iov_base: staging.cast(),
                    iov_len: bytes.len(),
                };
                let rma = sys::fi_rma_iov {
                    addr: *remote_addr,
                    len: bytes.len(),
                    key: *key,
                };
                let msg = sys::fi_msg_rma {
                    msg_iov: &iov,
                    desc: desc.as_mut_ptr(),
                    iov_count: 1,
                    addr: fi_addr,
                    rma_iov: &rma,
                    rma_iov_count: 1,
                    context: self.context(slot),
                    data: 0,
                };
                // SAFETY: `msg` and what it points to live across the call (libfabric copies
                // the descriptors); the staging memory stays untouched until the completion.
                unsafe { sys::spindle_fi_writemsg(self.fabric.ep, &msg, flags) }
            }
            Op::Send { imm, chunk } => {
                assert!(
                    chunk.len() <= RX_BUF_BYTES.min(CHUNK_BYTES_MAX),
                    "sends are split into chunks"
                );
                // SAFETY: as for writes.
                unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), staging, chunk.len()) };
                let iov = sys::iovec {
                    iov_base: staging.cast(),
                    iov_len: chunk.len(),
                };
                let msg = sys::fi_msg {
                    msg_iov: &iov,
                    desc: desc.as_mut_ptr(),
                    iov_count: 1,
                    addr: fi_addr,
                    context: self.context(slot),
                    data: *imm as u64,
                };
                // SAFETY: as for writes.
                unsafe { sys::spindle_fi_sendmsg(self.fabric.ep, &msg, flags) }
            }
        };
        if ret == 0 {
            Ok(true)
        } else if ret == -(sys::FI_EAGAIN as isize) {
            Ok(false)
        } else {
            Err(fi_error("posting an operation", ret as i64))
        }
    }
}

impl Shared {
    /// A receive slot completed (`done.ok` false: in error): hands on every completion
    /// that is next in posting order, re-posting each buffer after use.
    fn rx_completed(&self, done: RxDone) {
        let ready: Vec<RxDone> = {
            let mut order = lock(&self.backend.rx_order);
            let seq = order.slot_seq[done.slot];
            order.done.insert(seq, done);
            let mut ready = Vec::new();
            loop {
                let next = order.next_deliver;
                let Some(entry) = order.done.remove(&next) else {
                    break;
                };
                order.next_deliver += 1;
                ready.push(entry);
            }
            ready
        };
        for done in ready {
            if !done.ok {
                tracing::warn!(node = self.node, "receive completed in error");
            } else if done.flags & sys::FI_REMOTE_WRITE as u64 != 0 {
                self.doorbell.ring();
            } else {
                self.rx_done(done.slot, done.len, done.data, done.src);
            }
            self.repost(done.slot);
        }
    }

    // ---- progress ----

    fn progress_loop(self: Arc<Self>) {
        let mut last_probe = Instant::now();
        let mut last_activity = Instant::now();
        while !self.is_closed() {
            let mut busy = self.poll_cq_once();
            busy |= self.issue_queued();
            if last_probe.elapsed() >= self.cfg.probe_interval() {
                last_probe = Instant::now();
                self.probe_peers();
            }
            if busy {
                last_activity = Instant::now();
            } else if last_activity.elapsed() < SPIN_AFTER_ACTIVITY {
                std::thread::yield_now();
            } else if self.work.wait(IDLE_PARK) {
                last_activity = Instant::now();
            }
        }
    }

    /// Reads one batch of completions; true if there were any.
    fn poll_cq_once(&self) -> bool {
        if self.lock().events.len() >= EVENT_QUEUE_MAX {
            return false; // backpressure: leave inbound completions in the queue
        }
        let mut entries = [sys::fi_cq_data_entry::default(); CQ_BATCH_MAX];
        let mut sources: [sys::fi_addr_t; CQ_BATCH_MAX] = [FI_ADDR_NOTAVAIL; CQ_BATCH_MAX];
        // SAFETY: `entries` has room for CQ_BATCH_MAX entries of the CQ's format (DATA) and
        // `sources` for as many source addresses, one per entry read (the endpoint has
        // FI_SOURCE, checked in `open_fabric`).
        let ret = unsafe {
            sys::spindle_fi_cq_readfrom(
                self.backend.fabric.cq,
                entries.as_mut_ptr().cast(),
                CQ_BATCH_MAX,
                sources.as_mut_ptr(),
            )
        };
        if ret > 0 {
            let got = (ret as usize).min(CQ_BATCH_MAX);
            for (entry, &src) in entries[..got].iter().zip(&sources[..got]) {
                self.completed(entry, src);
            }
            return true;
        }
        if ret == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: `err` is a valid error entry to fill.
            let got = unsafe { sys::spindle_fi_cq_readerr(self.backend.fabric.cq, &mut err, 0) };
            if got > 0 {
                self.completed_in_error(&err);
            }
            return true;
        }
        false
    }

    /// One completion; `src` is its source address (meaningful for receives only).
    fn completed(&self, entry: &sys::fi_cq_data_entry, src: sys::fi_addr_t) {
        let flags = entry.flags;
        match self.backend.context_index(entry.op_context) {
            Some(index) if index < TX_SLOTS_MAX => self.tx_done(index),
            Some(index) => self.rx_completed(RxDone {
                slot: index - TX_SLOTS_MAX,
                flags,
                len: entry.len,
                data: entry.data,
                src,
                ok: true,
            }),
            // A peer's write landed in one of our regions (remote CQ data, no buffer used).
            None if flags & sys::FI_REMOTE_WRITE as u64 != 0 => self.doorbell.ring(),
            None => tracing::warn!(node = self.node, flags, "completion without our context"),
        }
    }

    fn repost(&self, slot: usize) {
        if self.is_closed() {
            return;
        }
        if let Err(err) = self.backend.post_recv(slot) {
            tracing::error!(node = self.node, %err, "re-posting a receive failed");
        }
    }

    fn completed_in_error(&self, err: &sys::fi_cq_err_entry) {
        let Some(index) = self.backend.context_index(err.op_context) else {
            tracing::warn!(
                node = self.node,
                err = err.err,
                "completion error without context"
            );
            return;
        };
        let why = fi_error("operation", err.err as i64).to_string();
        if index < TX_SLOTS_MAX {
            let owner = self.lock().tx_slots[index];
            self.tx_done(index);
            if let Some(slot) = owner {
                let mut state = self.lock();
                self.fail_peer(
                    &mut state,
                    slot.peer,
                    slot.link,
                    FailureReason::ConnectionLost(why),
                );
            }
        } else {
            // A receive failed (for example truncated): the sender is unknown; re-post.
            tracing::warn!(node = self.node, %why, "receive completed in error");
            self.rx_completed(RxDone {
                slot: index - TX_SLOTS_MAX,
                flags: err.flags,
                len: 0,
                data: 0,
                src: FI_ADDR_NOTAVAIL,
                ok: false,
            });
        }
    }

    fn tx_done(&self, slot: usize) {
        let mut state = self.lock();
        if let Some(owner) = Shared::release_tx(&mut state, slot) {
            self.op_done(&mut state, owner);
        }
    }

    /// A send chunk arrived in receive slot `slot` from address `src` of our address
    /// vector. It is taken as the node its header names only if `src` is that node's
    /// address: the header is the sender's word, the source address the fabric's (each
    /// link's `conn` is what `fi_av_insert` gave for the name that node's side channel
    /// sent). A chunk from anywhere else is dropped without touching the named node's
    /// link, or a liar could cut it; a known peer that sent it under another node's name
    /// has its own link failed (see [`Shared::misattributed`]).
    fn rx_done(&self, slot: usize, len: usize, data: u64, src: sys::fi_addr_t) {
        let len = len.min(RX_BUF_BYTES);
        let mut bytes = vec![0u8; len];
        // SAFETY: the receive completed, so libfabric no longer writes the slot; `len` bytes
        // of it hold the message.
        unsafe {
            std::ptr::copy_nonoverlapping(self.backend.rx_ptr(slot), bytes.as_mut_ptr(), len)
        };
        let mut state = self.lock();
        let Some(h) = SendHeader::parse(&bytes) else {
            tracing::warn!(node = self.node, len, "dropping a short fabric message");
            return;
        };
        let Some(p) = state.peers.get(h.src) else {
            tracing::warn!(
                node = self.node,
                src = h.src,
                "fabric message from an unknown peer"
            );
            return;
        };
        if p.conn != Some(src) {
            let claimed_up = p.conn.is_some();
            self.misattributed(&mut state, h.src, claimed_up, src);
            return;
        }
        let link = p.link;
        let header_ok = u64::from(h.imm) == data & 0xffff_ffff;
        let body = &bytes[SEND_HEADER_BYTES..];
        if self
            .reassemble(&mut state, h.src, h, header_ok, body)
            .is_err()
        {
            self.fail_peer(
                &mut state,
                h.src,
                link,
                FailureReason::Malformed("bad send chunk".into()),
            );
        }
    }

    /// A send chunk whose header names `claimed` came from address `src`, which is not
    /// `claimed`'s (`claimed_up`: `claimed` has a fabric address now). Dropped; the node
    /// that really sent it, if `src` is a peer's, is failed for the impersonation —
    /// unless the provider may misreport sources (`Fabric::unknown_source_exact`).
    fn misattributed(
        &self,
        state: &mut SideState<Fi>,
        claimed: NodeId,
        claimed_up: bool,
        src: sys::fi_addr_t,
    ) {
        let sender = (src != FI_ADDR_NOTAVAIL)
            .then(|| {
                state
                    .peers
                    .iter()
                    .find(|(_, p)| p.conn == Some(src))
                    .map(|(peer, p)| (peer, p.link))
            })
            .flatten();
        let source = if src == FI_ADDR_NOTAVAIL {
            "FI_ADDR_NOTAVAIL".to_string()
        } else {
            format!("fi_addr {src}")
        };
        match sender {
            // The provider may report a stale source for a sender that is not in our
            // address vector (see `Fabric::unknown_source_exact`): `peer` may be
            // innocent, so it is not failed.
            Some((peer, _)) if !self.backend.fabric.unknown_source_exact => tracing::warn!(
                node = self.node,
                claimed_src = claimed,
                source = %source,
                sender = peer,
                provider = %self.backend.fabric.provider,
                "dropping a fabric message whose header names another node (its source may be \
                 misreported by this provider, so the sender's link is left up)"
            ),
            Some((peer, link)) => {
                tracing::warn!(
                    node = self.node,
                    claimed_src = claimed,
                    source = %source,
                    sender = peer,
                    "dropping a fabric message whose header names another node; failing its sender"
                );
                self.fail_peer(
                    state,
                    peer,
                    link,
                    FailureReason::Malformed(format!(
                        "fabric message claiming to come from node {claimed}"
                    )),
                );
            }
            // The claimed node's link is down and its address forgotten: most likely a
            // chunk it sent before the link went down (nothing to deliver either way).
            None if !claimed_up => tracing::debug!(
                node = self.node,
                claimed_src = claimed,
                source = %source,
                "dropping a fabric message for a link that is down"
            ),
            None => tracing::warn!(
                node = self.node,
                claimed_src = claimed,
                source = %source,
                "dropping a fabric message not sent from the address of the node it names"
            ),
        }
    }
}

impl Endpoint for LibfabricEndpoint {
    fn node(&self) -> NodeId {
        self.shared.node
    }

    fn address(&self) -> String {
        self.shared.listen_addr.to_string()
    }

    fn connect(&self, peer: NodeId, address: &str) -> Result<()> {
        self.shared.connect(peer, address)
    }

    fn disconnect(&self, peer: NodeId) -> Result<()> {
        self.shared.disconnect(peer)
    }

    fn peers(&self) -> Vec<NodeId> {
        self.shared.peers()
    }

    fn register_region(&self, id: RegionId, len_bytes: usize) -> Result<Region> {
        let shared = &self.shared;
        shared.check_new_region(id, len_bytes)?;
        let len = crate::round_up_to_words(len_bytes);
        let reg = Arc::new(Registered::new(
            &shared.backend.fabric.domain,
            len,
            (sys::FI_REMOTE_WRITE | sys::FI_WRITE) as u64,
        )?);
        let ptr = reg.ptr;
        let backing: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(&reg));
        // SAFETY: `ptr` is page-aligned and valid for at least `len` (whole words) bytes while
        // `backing` (an Arc of the registration) lives; this process only accesses it through
        // `Region`'s atomics, the provider writes it on behalf of peers.
        let region = unsafe { Region::from_raw(id, ptr, len, backing) };
        shared.install_region(id, reg)?;
        Ok(region)
    }

    fn deregister_region(&self, id: RegionId) -> Result<()> {
        self.shared.deregister_region(id)
    }

    fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        self.shared.remote_region(peer, id)
    }

    fn write(&self, peer: NodeId, region: RegionId, offset: usize, bytes: &[u8]) -> Result<()> {
        self.shared.write(peer, region, offset, bytes)
    }

    fn write_then_release(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
        guard_offset: usize,
        guard_value: u64,
    ) -> Result<()> {
        // The guard is a separate, later operation: FIFO placement (promised by the provider
        // or enforced with delivery-complete) puts it after the payload.
        self.shared
            .write_then_release(peer, region, offset, bytes, guard_offset, guard_value)
    }

    fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()> {
        self.shared.send(peer, imm, bytes)
    }

    fn poll_event(&self) -> Option<Event> {
        self.shared.poll_event()
    }

    fn wait(&self, timeout: Duration) -> bool {
        self.shared.doorbell.wait(timeout)
    }

    fn wake(&self) {
        self.shared.doorbell.ring();
    }

    fn stall_ms(&self, within: Duration) -> Option<u64> {
        self.shared.stall_ms(within)
    }

    fn close(&self) {
        self.shared.close(&self.threads);
    }
}

impl Drop for LibfabricEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

/// The test kit's way below the contract (feature `testkit`): what a well-behaved endpoint
/// never does, to check how the receive path treats it (`tests/libfabric_source.rs`).
#[cfg(feature = "testkit")]
#[doc(hidden)]
impl LibfabricEndpoint {
    /// This endpoint's libfabric endpoint name (what its side channel tells peers).
    pub fn testkit_fabric_name(&self) -> Vec<u8> {
        self.shared.backend.fabric.name.clone()
    }

    /// The address of linked peer `peer` in this endpoint's address vector.
    pub fn testkit_peer_address(&self, peer: NodeId) -> Option<u64> {
        self.shared.lock().peers.get(peer).and_then(|p| p.conn)
    }

    /// Inserts libfabric endpoint name `name` into this endpoint's address vector, as
    /// linking does, but with no link; its address.
    pub fn testkit_insert_address(&self, name: &[u8]) -> Option<u64> {
        self.shared
            .backend
            .connect_fabric(self.shared.node, NodeId::MAX, (), name.to_vec())
    }

    /// Receives this endpoint has handed on so far, delivered or dropped, in posting order.
    pub fn testkit_receives(&self) -> u64 {
        lock(&self.shared.backend.rx_order).next_deliver
    }

    /// False when the provider may report a stale source for a sender outside the
    /// address vector (libfabric 1.17's shm; see the module docs).
    pub fn testkit_unknown_source_exact(&self) -> bool {
        self.shared.backend.fabric.unknown_source_exact
    }

    /// Posts one send chunk (immediate `imm`) to address `to` of this endpoint's address
    /// vector, its header naming `claimed` as the source: `body` at `offset` of a message
    /// that ends with it (offset 0: the whole message). Straight onto the fabric, past the
    /// peer queues (which always name this node), from a staging slot of no peer.
    pub fn testkit_send_as(
        &self,
        to: u64,
        claimed: NodeId,
        imm: u32,
        offset: u32,
        body: &[u8],
    ) -> Result<()> {
        if SEND_HEADER_BYTES + body.len() > CHUNK_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "test kit send",
                len: body.len(),
                max: CHUNK_BYTES_MAX - SEND_HEADER_BYTES,
            });
        }
        let mut chunk = Vec::with_capacity(SEND_HEADER_BYTES + body.len());
        let total = offset.saturating_add(body.len() as u32);
        for word in [SEND_MAGIC, claimed, imm, total, offset] {
            chunk.extend_from_slice(&word.to_le_bytes());
        }
        chunk.extend_from_slice(body);
        let op = Op::Send { imm, chunk };
        let slot = {
            let mut state = self.shared.lock();
            let slot = state
                .tx_free
                .pop()
                .ok_or(Error::QueueFull { peer: claimed })?;
            state.tx_slots[slot] = Some(side_link::TxSlot {
                peer: NodeId::MAX,
                link: u64::MAX,
            });
            slot
        };
        let start = Instant::now();
        loop {
            let err = match self.shared.backend.post_op(slot, to, &op) {
                Ok(true) => return Ok(()),
                // EAGAIN: the progress thread makes room.
                Ok(false) if start.elapsed() < Duration::from_secs(30) => {
                    std::thread::yield_now();
                    continue;
                }
                Ok(false) => Error::Config("test kit send: the fabric stayed busy".into()),
                Err(err) => err,
            };
            Shared::release_tx(&mut self.shared.lock(), slot);
            return Err(err);
        }
    }
}
