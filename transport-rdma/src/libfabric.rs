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
//!   silent for [`crate::FabricConfig::probe_timeout_ms`], or when an operation to it
//!   completes in error.
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

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::side_channel::{
    frame, lock, u32_at, u64_at, FrameReader, KIND_BYE, KIND_HELLO, KIND_HELLO_ACK, KIND_PROBE,
    KIND_READY, KIND_REGION, KIND_REJECT, KIND_WITHDRAW, REJECTED,
};
use crate::{
    check_region_len, Doorbell, Endpoint, Error, Event, FabricConfig, FailureReason, NodeId,
    Region, RegionDesc, RegionId, Result, EVENT_QUEUE_MAX, PEERS_MAX, REGIONS_PER_ENDPOINT_MAX,
    SEND_BYTES_MAX, WORD_BYTES, WRITE_BYTES_MAX,
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
pub const CHUNK_BYTES_MAX: usize = 64 << 10;
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
/// Header of every send chunk: magic, source node, imm, total length, chunk offset.
const SEND_HEADER_BYTES: usize = 20;
const SEND_MAGIC: u32 = 0x5350_4649; // "SPFI"
/// Receive buffer size: one chunk plus its header.
const RX_BUF_BYTES: usize = CHUNK_BYTES_MAX + SEND_HEADER_BYTES;
const PAGE_BYTES: usize = 4096;

// Chunks split at aligned offsets stay word-aligned.
const _: () = assert!(CHUNK_BYTES_MAX % WORD_BYTES == 0);
const _: () = assert!(SEND_BYTES_MAX <= u32::MAX as usize);

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
    layout: std::alloc::Layout,
}

// SAFETY: the memory is only touched through atomics (regions) or by the progress thread
// under the state lock (staging buffers); the MR handle is thread-safe (FI_THREAD_SAFE).
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

impl Registered {
    fn new(domain: &Arc<Domain>, len_bytes: usize, access: u64) -> Result<Registered> {
        let len = len_bytes.max(WORD_BYTES).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let layout = std::alloc::Layout::from_size_align(len, PAGE_BYTES)
            .map_err(|err| Error::Config(format!("region layout: {err}")))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::io(
                "allocating region memory",
                std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            )
        })?;
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
            // SAFETY: allocated above with this layout and not registered.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            return Err(fi_error("registering memory (fi_mr_reg)", ret as i64));
        }
        Ok(Registered {
            domain: Arc::clone(domain),
            mr,
            ptr,
            len: crate::round_up_to_words(len_bytes),
            layout,
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
        // SAFETY: the MR was opened in `new` and is closed once; the memory is freed only
        // after the MR no longer exposes it to the provider.
        unsafe {
            sys::spindle_fi_close(&mut (*self.mr).fid);
            std::alloc::dealloc(self.ptr.as_ptr(), self.layout);
        }
        let _ = &self.domain;
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
    let (ordered, virt_addr, provider_name, cq_data_size) = unsafe {
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
        )
    };
    if cq_data_size < 4 {
        return Err(Error::Config(format!(
            "provider {provider_name} carries {cq_data_size} bytes of remote CQ data; 4 needed"
        )));
    }
    let mut fabric = Fabric {
        domain: Arc::clone(&domain),
        ep: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        av: std::ptr::null_mut(),
        ordered,
        virt_addr,
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
    // bind flags are the ones libfabric documents for an RDM endpoint.
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
            | sys::FI_REMOTE_WRITE) as u64;
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
                "no libfabric provider matches {provider:?} (FI_EP_RDM with RMA and messages): {}",
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

/// One outbound operation, queued per peer until a staging slot and the window allow it.
#[derive(Debug)]
enum Op {
    Write {
        remote_addr: u64,
        key: u64,
        bytes: Vec<u8>,
    },
    Send {
        imm: u32,
        chunk: Vec<u8>,
    },
}

impl Op {
    fn len(&self) -> usize {
        match self {
            Op::Write { bytes, .. } => bytes.len(),
            Op::Send { chunk, .. } => chunk.len(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct RemoteMr {
    len: usize,
    addr: u64,
    key: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    /// Our dial (attempt `link`) is in progress.
    Dialing,
    /// Side channel up, region tables being exchanged.
    Handshaking,
    /// Usable.
    Up,
    /// Failed or closed; `connect` may start a new link.
    Down,
}

#[derive(Debug)]
struct Peer {
    state: LinkState,
    /// Id of the side-channel link this state belongs to (stale threads compare it).
    link: u64,
    stream: Option<TcpStream>,
    fi_addr: u64,
    remote: BTreeMap<RegionId, RemoteMr>,
    queue: VecDeque<Op>,
    queued_bytes: usize,
    in_flight: usize,
    last_heard: Instant,
    /// A send being reassembled: (imm, total length, bytes so far).
    partial: Option<(u32, usize, Vec<u8>)>,
}

#[derive(Debug, Clone, Copy)]
struct TxSlot {
    peer: NodeId,
    link: u64,
}

struct State {
    regions: BTreeMap<RegionId, Arc<Registered>>,
    /// Withdrawn regions stay registered (peers' in-flight writes may still land) until the
    /// endpoint is dropped.
    retired: Vec<Arc<Registered>>,
    peers: BTreeMap<NodeId, Peer>,
    events: VecDeque<Event>,
    tx_free: Vec<usize>,
    tx_slots: Vec<Option<TxSlot>>,
    next_link: u64,
}

struct Shared {
    node: NodeId,
    cfg: FabricConfig,
    fabric: Fabric,
    listen_addr: SocketAddr,
    state: Mutex<State>,
    doorbell: Doorbell,
    /// Rung when outbound work is queued, to wake the progress thread.
    work: Doorbell,
    closed: AtomicBool,
    tx_buf: Registered,
    rx_buf: Registered,
    /// Receive completions put back into posting order (see [`RxOrder`]).
    rx_order: Mutex<RxOrder>,
    /// One libfabric operation context per tx slot, then per rx slot (FI_CONTEXT2 mode).
    contexts: Box<[std::cell::UnsafeCell<sys::fi_context2>]>,
}

// SAFETY: `contexts` is only handed to libfabric (which writes it while an operation is
// outstanding) and compared by address; every other field is Send + Sync.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// Receive buffers are matched to messages in posting order (FI_ORDER_SAS), but a
/// provider may *complete* them out of order (a rendezvous message completes after a
/// later eager one). Completions are therefore handed on in posting order.
#[derive(Debug, Default)]
struct RxOrder {
    /// Posting sequence of the receive currently posted in each slot.
    slot_seq: Vec<u64>,
    next_post: u64,
    next_deliver: u64,
    /// Completed receives waiting for earlier ones: seq -> (slot, flags, len, data, ok).
    done: BTreeMap<u64, (usize, u64, usize, u64, bool)>,
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
            .field("provider", &self.shared.fabric.provider)
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
        let shared = Arc::new(Shared {
            node,
            cfg,
            fabric,
            listen_addr,
            state: Mutex::new(State {
                regions: BTreeMap::new(),
                retired: Vec::new(),
                peers: BTreeMap::new(),
                events: VecDeque::new(),
                tx_free: (0..TX_SLOTS_MAX).rev().collect(),
                tx_slots: vec![None; TX_SLOTS_MAX],
                next_link: 1,
            }),
            doorbell: Doorbell::new(),
            work: Doorbell::new(),
            closed: AtomicBool::new(false),
            tx_buf,
            rx_buf,
            rx_order: Mutex::new(RxOrder {
                slot_seq: vec![0; RX_SLOTS_MAX],
                ..RxOrder::default()
            }),
            contexts,
        });
        for slot in 0..RX_SLOTS_MAX {
            shared.post_recv(slot)?;
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
        {
            let shared = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fi-accept-{node}"))
                    .spawn(move || shared.accept_loop(listener))
                    .map_err(|err| Error::io("spawning the accept thread", err))?,
            );
        }
        Ok(LibfabricEndpoint {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The libfabric provider actually in use (for example `tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.shared.fabric.provider
    }

    /// True when the provider promised FIFO placement and operations are pipelined; false
    /// when the backend enforces the order with one delivery-complete operation in flight
    /// per peer.
    pub fn provider_ordered(&self) -> bool {
        self.shared.fabric.ordered
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

impl Shared {
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

    /// A receive slot completed (`ok` false: in error): hands on every completion that is
    /// next in posting order, re-posting each buffer after use.
    fn rx_completed(&self, slot: usize, flags: u64, len: usize, data: u64, ok: bool) {
        let ready: Vec<(usize, u64, usize, u64, bool)> = {
            let mut order = self.rx_order.lock().unwrap_or_else(|p| p.into_inner());
            let seq = order.slot_seq[slot];
            order.done.insert(seq, (slot, flags, len, data, ok));
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
        for (slot, flags, len, data, ok) in ready {
            if !ok {
                tracing::warn!(node = self.node, "receive completed in error");
            } else if flags & sys::FI_REMOTE_WRITE as u64 != 0 {
                self.doorbell.ring();
            } else {
                self.rx_done(slot, len, data);
            }
            self.repost(slot);
        }
    }

    fn push_event(&self, state: &mut State, event: Event) {
        state.events.push_back(event);
        self.doorbell.ring();
    }

    /// Marks the link to `peer` down (once) and reports it.
    fn fail_peer(&self, state: &mut State, peer: NodeId, link: u64, reason: FailureReason) {
        let Some(p) = state.peers.get_mut(&peer) else {
            return;
        };
        if p.link != link || p.state == LinkState::Down {
            return;
        }
        let was_dialing = p.state == LinkState::Dialing;
        p.state = LinkState::Down;
        if let Some(stream) = p.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        p.queue.clear();
        p.queued_bytes = 0;
        p.remote.clear();
        p.partial = None;
        tracing::debug!(node = self.node, peer, %reason, "libfabric link down");
        let _ = was_dialing;
        self.push_event(state, Event::PeerFailed { peer, reason });
    }

    fn send_side(&self, state: &mut State, peer: NodeId, bytes: &[u8]) {
        let Some(p) = state.peers.get_mut(&peer) else {
            return;
        };
        let link = p.link;
        let failed = match p.stream.as_mut() {
            Some(stream) => stream.write_all(bytes).err(),
            None => None,
        };
        if let Some(err) = failed {
            self.fail_peer(
                state,
                peer,
                link,
                FailureReason::ConnectionLost(err.to_string()),
            );
        }
    }

    // ---- side channel ----

    fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        while !self.closed.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&self);
                    let _ = std::thread::Builder::new()
                        .name(format!("fi-accepted-{}", self.node))
                        .spawn(move || shared.accepted(stream));
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(err) => {
                    tracing::warn!(node = self.node, %err, "side-channel accept failed");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn hello_payload(&self) -> Vec<u8> {
        let mut p = self.node.to_le_bytes().to_vec();
        p.extend_from_slice(&self.fabric.name);
        p
    }

    fn parse_hello(payload: &[u8]) -> Option<(NodeId, Vec<u8>)> {
        let node = u32_at(payload, 0)?;
        let name = payload.get(4..)?.to_vec();
        (!name.is_empty() && name.len() <= FABRIC_NAME_BYTES_MAX).then_some((node, name))
    }

    fn accepted(self: Arc<Self>, mut stream: TcpStream) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(timeout));
        let mut reader = FrameReader::default();
        let Ok(Some((KIND_HELLO, payload))) = reader.next(&mut stream) else {
            return;
        };
        let Some((peer, name)) = Self::parse_hello(&payload) else {
            return;
        };
        if peer == self.node {
            return;
        }
        let link = {
            let mut state = lock(&self.state);
            let accept = match state.peers.get(&peer) {
                None => true,
                Some(p) => match p.state {
                    LinkState::Down => true,
                    LinkState::Up | LinkState::Handshaking => false,
                    // Both dialed at once: the lower node's dial wins on both sides.
                    LinkState::Dialing => peer < self.node,
                },
            };
            if !accept || state.peers.len() >= PEERS_MAX && !state.peers.contains_key(&peer) {
                let _ = stream.write_all(&frame(KIND_REJECT, &[]));
                return;
            }
            if stream
                .write_all(&frame(KIND_HELLO_ACK, &self.hello_payload()))
                .is_err()
            {
                return;
            }
            match self.establish(&mut state, peer, &name, &stream) {
                Some(link) => link,
                None => return,
            }
        };
        self.read_loop(peer, link, stream, reader);
    }

    fn dial(self: Arc<Self>, peer: NodeId, address: String, link: u64) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let result = (|| -> std::result::Result<(TcpStream, FrameReader, Vec<u8>), String> {
            let addr: SocketAddr = address.parse().map_err(|err| format!("{err}"))?;
            let mut stream =
                TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            stream
                .set_read_timeout(Some(timeout))
                .map_err(|e| e.to_string())?;
            stream
                .write_all(&frame(KIND_HELLO, &self.hello_payload()))
                .map_err(|e| e.to_string())?;
            let mut reader = FrameReader::default();
            match reader.next(&mut stream)? {
                Some((KIND_HELLO_ACK, payload)) => match Self::parse_hello(&payload) {
                    Some((node, name)) if node == peer => Ok((stream, reader, name)),
                    Some((node, _)) => Err(format!("node {node} answered, not {peer}")),
                    None => Err("malformed hello".into()),
                },
                Some((KIND_REJECT, _)) => Err(REJECTED.into()),
                Some(_) => Err("unexpected side-channel frame".into()),
                None => Err("timed out waiting for the peer".into()),
            }
        })();
        if matches!(&result, Err(why) if why == REJECTED) {
            self.await_peer_link(peer, link, timeout);
            return;
        }
        let mut state = lock(&self.state);
        let still_ours = state
            .peers
            .get(&peer)
            .is_some_and(|p| p.link == link && p.state == LinkState::Dialing);
        match result {
            Ok((stream, reader, name)) if still_ours => {
                if let Some(new_link) = self.establish(&mut state, peer, &name, &stream) {
                    drop(state);
                    self.read_loop(peer, new_link, stream, reader);
                }
            }
            Ok((stream, _, _)) => {
                let _ = stream.shutdown(Shutdown::Both);
            }
            Err(why) if still_ours => {
                self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
            }
            // Superseded by the peer's own dial: nothing to report.
            Err(_) => {}
        }
    }

    /// Our dial to `peer` was rejected because the peer keeps (or is setting up) the link it
    /// dialed itself: wait for that link to replace our dial; report a failure only if it
    /// never comes.
    fn await_peer_link(&self, peer: NodeId, link: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut state = lock(&self.state);
            let still_ours = state
                .peers
                .get(&peer)
                .is_some_and(|p| p.link == link && p.state == LinkState::Dialing);
            if !still_ours || self.closed.load(Ordering::Acquire) {
                return;
            }
            if Instant::now() >= deadline {
                let why = format!("{REJECTED}, and it never linked back");
                self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                return;
            }
            drop(state);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Installs a side-channel link to `peer`: inserts its fabric name into the address
    /// vector and sends our region table, then Ready. Returns the link id.
    fn establish(
        &self,
        state: &mut State,
        peer: NodeId,
        name: &[u8],
        stream: &TcpStream,
    ) -> Option<u64> {
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
            tracing::warn!(
                node = self.node,
                peer,
                ret,
                "fi_av_insert rejected the peer's name"
            );
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        let writer = stream.try_clone().ok()?;
        // Side-channel writes happen under the state lock: a peer that stops reading must
        // not wedge us, so a blocked write fails the link after the probe time-out.
        let _ = writer.set_write_timeout(Some(self.cfg.probe_timeout()));
        let link = state.next_link;
        state.next_link += 1;
        state.peers.insert(
            peer,
            Peer {
                state: LinkState::Handshaking,
                link,
                stream: Some(writer),
                fi_addr,
                remote: BTreeMap::new(),
                queue: VecDeque::new(),
                queued_bytes: 0,
                in_flight: 0,
                last_heard: Instant::now(),
                partial: None,
            },
        );
        let mut table = Vec::new();
        for (&id, reg) in &state.regions {
            table.extend(region_frame(id, reg, self.fabric.virt_addr, reg_len(reg)));
        }
        table.extend(frame(KIND_READY, &[]));
        self.send_side(state, peer, &table);
        Some(link)
    }

    fn read_loop(&self, peer: NodeId, link: u64, mut stream: TcpStream, mut reader: FrameReader) {
        let _ = stream.set_read_timeout(Some(self.cfg.probe_interval()));
        loop {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let next = reader.next(&mut stream);
            let mut state = lock(&self.state);
            let current = state
                .peers
                .get(&peer)
                .is_some_and(|p| p.link == link && p.state != LinkState::Down);
            if !current {
                return;
            }
            match next {
                Ok(None) => continue,
                Err(why) => {
                    self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                    return;
                }
                Ok(Some((kind, payload))) => {
                    if let Some(p) = state.peers.get_mut(&peer) {
                        p.last_heard = Instant::now();
                    }
                    if let Err(why) = self.handle_frame(&mut state, peer, link, kind, &payload) {
                        self.fail_peer(&mut state, peer, link, why);
                        return;
                    }
                }
            }
            drop(state);
            // Backpressure: stop reading the peer while the owner's event queue is full.
            while lock(&self.state).events.len() >= EVENT_QUEUE_MAX
                && !self.closed.load(Ordering::Acquire)
            {
                std::thread::sleep(IDLE_PARK);
            }
        }
    }

    fn handle_frame(
        &self,
        state: &mut State,
        peer: NodeId,
        link: u64,
        kind: u8,
        payload: &[u8],
    ) -> std::result::Result<(), FailureReason> {
        let malformed = |what: &str| FailureReason::Malformed(what.to_string());
        let up = state
            .peers
            .get(&peer)
            .is_some_and(|p| p.state == LinkState::Up);
        match kind {
            KIND_REGION => {
                let (Some(id), Some(len), Some(addr), Some(key)) = (
                    u32_at(payload, 0),
                    u64_at(payload, 4),
                    u64_at(payload, 12),
                    u64_at(payload, 20),
                ) else {
                    return Err(malformed("short region frame"));
                };
                let len = usize::try_from(len).map_err(|_| malformed("region length"))?;
                check_region_len(len).map_err(|_| malformed("region too large"))?;
                let p = state
                    .peers
                    .get_mut(&peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.remote.len() >= REGIONS_PER_ENDPOINT_MAX && !p.remote.contains_key(&id) {
                    return Err(malformed("too many regions"));
                }
                p.remote.insert(id, RemoteMr { len, addr, key });
                if up {
                    self.push_event(
                        state,
                        Event::RegionAnnounced {
                            peer,
                            region: RegionDesc {
                                node: peer,
                                region: id,
                                len,
                            },
                        },
                    );
                }
            }
            KIND_WITHDRAW => {
                let id = u32_at(payload, 0).ok_or_else(|| malformed("short withdraw frame"))?;
                let p = state
                    .peers
                    .get_mut(&peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.remote.remove(&id).is_some() && up {
                    self.push_event(state, Event::RegionWithdrawn { peer, region: id });
                }
            }
            KIND_READY => {
                let p = state
                    .peers
                    .get_mut(&peer)
                    .ok_or_else(|| malformed("no peer"))?;
                if p.state == LinkState::Handshaking {
                    p.state = LinkState::Up;
                    self.push_event(state, Event::PeerConnected { peer });
                }
            }
            KIND_PROBE => {}
            KIND_BYE => {
                self.fail_peer(state, peer, link, FailureReason::Closed);
            }
            other => {
                return Err(malformed(&format!(
                    "unknown side-channel frame kind {other}"
                )))
            }
        }
        Ok(())
    }

    // ---- progress ----

    fn progress_loop(self: Arc<Self>) {
        let mut last_probe = Instant::now();
        let mut last_activity = Instant::now();
        while !self.closed.load(Ordering::Acquire) {
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

    fn probe_peers(&self) {
        let mut state = lock(&self.state);
        let timeout = self.cfg.probe_timeout();
        let peers: Vec<(NodeId, u64, LinkState, Duration)> = state
            .peers
            .iter()
            .map(|(&id, p)| (id, p.link, p.state, p.last_heard.elapsed()))
            .collect();
        let probe = frame(KIND_PROBE, &[]);
        for (peer, link, link_state, silent) in peers {
            if !matches!(link_state, LinkState::Up | LinkState::Handshaking) {
                continue;
            }
            if silent > timeout {
                let silent_ms = silent.as_millis().min(u64::MAX as u128) as u64;
                self.fail_peer(
                    &mut state,
                    peer,
                    link,
                    FailureReason::ProbeTimeout { silent_ms },
                );
            } else {
                self.send_side(&mut state, peer, &probe);
            }
        }
    }

    /// Reads one batch of completions; true if there were any.
    fn poll_cq_once(&self) -> bool {
        if lock(&self.state).events.len() >= EVENT_QUEUE_MAX {
            return false; // backpressure: leave inbound completions in the queue
        }
        let mut entries = [sys::fi_cq_data_entry::default(); CQ_BATCH_MAX];
        // SAFETY: `entries` has room for CQ_BATCH_MAX entries of the CQ's format (DATA).
        let ret = unsafe {
            sys::spindle_fi_cq_read(self.fabric.cq, entries.as_mut_ptr().cast(), CQ_BATCH_MAX)
        };
        if ret > 0 {
            for entry in &entries[..(ret as usize).min(CQ_BATCH_MAX)] {
                self.completed(entry);
            }
            return true;
        }
        if ret == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: `err` is a valid error entry to fill.
            let got = unsafe { sys::spindle_fi_cq_readerr(self.fabric.cq, &mut err, 0) };
            if got > 0 {
                self.completed_in_error(&err);
            }
            return true;
        }
        false
    }

    fn completed(&self, entry: &sys::fi_cq_data_entry) {
        let flags = entry.flags;
        match self.context_index(entry.op_context) {
            Some(index) if index < TX_SLOTS_MAX => self.tx_done(index),
            Some(index) => {
                self.rx_completed(index - TX_SLOTS_MAX, flags, entry.len, entry.data, true)
            }
            // A peer's write landed in one of our regions (remote CQ data, no buffer used).
            None if flags & sys::FI_REMOTE_WRITE as u64 != 0 => self.doorbell.ring(),
            None => tracing::warn!(node = self.node, flags, "completion without our context"),
        }
    }

    fn repost(&self, slot: usize) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Err(err) = self.post_recv(slot) {
            tracing::error!(node = self.node, %err, "re-posting a receive failed");
        }
    }

    fn completed_in_error(&self, err: &sys::fi_cq_err_entry) {
        let Some(index) = self.context_index(err.op_context) else {
            tracing::warn!(
                node = self.node,
                err = err.err,
                "completion error without context"
            );
            return;
        };
        let why = fi_error("operation", err.err as i64).to_string();
        if index < TX_SLOTS_MAX {
            let owner = lock(&self.state).tx_slots[index];
            self.tx_done(index);
            if let Some(slot) = owner {
                let mut state = lock(&self.state);
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
            self.rx_completed(index - TX_SLOTS_MAX, err.flags, 0, 0, false);
        }
    }

    fn tx_done(&self, slot: usize) {
        let mut state = lock(&self.state);
        if let Some(owner) = state.tx_slots[slot].take() {
            state.tx_free.push(slot);
            if let Some(p) = state.peers.get_mut(&owner.peer) {
                if p.link == owner.link {
                    p.in_flight = p.in_flight.saturating_sub(1);
                    if p.queue.is_empty() && p.in_flight == 0 {
                        self.doorbell.ring(); // outbound queue drained
                    }
                }
            }
        }
    }

    fn rx_done(&self, slot: usize, len: usize, data: u64) {
        let len = len.min(RX_BUF_BYTES);
        let mut bytes = vec![0u8; len];
        // SAFETY: the receive completed, so libfabric no longer writes the slot; `len` bytes
        // of it hold the message.
        unsafe { std::ptr::copy_nonoverlapping(self.rx_ptr(slot), bytes.as_mut_ptr(), len) };
        let mut state = lock(&self.state);
        let (Some(magic), Some(src), Some(imm), Some(total), Some(offset)) = (
            u32_at(&bytes, 0),
            u32_at(&bytes, 4),
            u32_at(&bytes, 8),
            u32_at(&bytes, 12),
            u32_at(&bytes, 16),
        ) else {
            tracing::warn!(node = self.node, len, "dropping a short fabric message");
            return;
        };
        let Some(p) = state.peers.get_mut(&src) else {
            tracing::warn!(node = self.node, src, "fabric message from an unknown peer");
            return;
        };
        let link = p.link;
        let (total, offset) = (total as usize, offset as usize);
        let body = &bytes[SEND_HEADER_BYTES..];
        let valid = magic == SEND_MAGIC
            && imm as u64 == data & 0xffff_ffff
            && total <= SEND_BYTES_MAX
            && offset
                .checked_add(body.len())
                .is_some_and(|end| end <= total)
            && match &p.partial {
                None => offset == 0,
                Some((pimm, ptotal, buf)) => {
                    *pimm == imm && *ptotal == total && buf.len() == offset
                }
            };
        if !valid {
            self.fail_peer(
                &mut state,
                src,
                link,
                FailureReason::Malformed("bad send chunk".into()),
            );
            return;
        }
        let (_, _, buf) = p
            .partial
            .get_or_insert_with(|| (imm, total, Vec::with_capacity(total)));
        buf.extend_from_slice(body);
        if buf.len() == total {
            let (imm, _, data) = p.partial.take().expect("just inserted");
            if p.state == LinkState::Up {
                self.push_event(
                    &mut state,
                    Event::Recv {
                        peer: src,
                        imm,
                        data,
                    },
                );
            }
        }
    }

    /// Issues queued operations while slots and windows allow; true if any was issued.
    fn issue_queued(&self) -> bool {
        let mut state = lock(&self.state);
        let window = if self.fabric.ordered {
            PEER_OPS_IN_FLIGHT_MAX
        } else {
            1
        };
        let peers: Vec<NodeId> = state.peers.keys().copied().collect();
        let mut issued = false;
        for peer in peers {
            loop {
                let Some(slot) = state.tx_free.last().copied() else {
                    return issued;
                };
                let Some(p) = state.peers.get_mut(&peer) else {
                    break;
                };
                if p.state != LinkState::Up || p.in_flight >= window || p.queue.is_empty() {
                    break;
                }
                let op = p.queue.front().expect("checked non-empty");
                match self.post(slot, p.fi_addr, op) {
                    Ok(true) => {}
                    Ok(false) => return issued, // EAGAIN: progress first
                    Err(err) => {
                        let link = p.link;
                        self.fail_peer(
                            &mut state,
                            peer,
                            link,
                            FailureReason::ConnectionLost(err.to_string()),
                        );
                        break;
                    }
                }
                let op = p.queue.pop_front().expect("checked non-empty");
                p.queued_bytes -= op.len();
                p.in_flight += 1;
                let link = p.link;
                state.tx_free.pop();
                state.tx_slots[slot] = Some(TxSlot { peer, link });
                issued = true;
            }
        }
        issued
    }

    /// Posts one operation from staging slot `slot`; Ok(false) on EAGAIN.
    fn post(&self, slot: usize, fi_addr: u64, op: &Op) -> Result<bool> {
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

    /// Queues `ops` to `peer` (all or nothing).
    fn enqueue(&self, peer: NodeId, ops: Vec<Op>) -> Result<()> {
        let mut state = lock(&self.state);
        let p = self.up_peer(&mut state, peer)?;
        let bytes: usize = ops.iter().map(Op::len).sum();
        if p.queued_bytes + bytes > self.cfg.outbound_bytes_max {
            return Err(Error::QueueFull { peer });
        }
        p.queued_bytes += bytes;
        p.queue.extend(ops);
        drop(state);
        self.work.ring();
        Ok(())
    }

    fn up_peer<'a>(&self, state: &'a mut State, peer: NodeId) -> Result<&'a mut Peer> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        match state.peers.get_mut(&peer) {
            Some(p) if p.state == LinkState::Up => Ok(p),
            _ => Err(Error::NotConnected { peer }),
        }
    }

    /// Splits a write into word-aligned chunks and checks it against the remote region.
    fn write_ops(
        &self,
        peer: NodeId,
        region: RegionId,
        offset: usize,
        bytes: &[u8],
    ) -> Result<Vec<Op>> {
        if bytes.len() > WRITE_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "write",
                len: bytes.len(),
                max: WRITE_BYTES_MAX,
            });
        }
        let mut state = lock(&self.state);
        let p = self.up_peer(&mut state, peer)?;
        let mr = *p
            .remote
            .get(&region)
            .ok_or(Error::UnknownRegion { node: peer, region })?;
        let fits = matches!(offset.checked_add(bytes.len()), Some(end) if end <= mr.len);
        if !fits {
            return Err(Error::OutOfBounds {
                node: peer,
                region,
                offset,
                len: bytes.len(),
                region_len: mr.len,
            });
        }
        let mut ops = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let at = offset + pos;
            // Chunk ends fall on aligned target offsets, so no word straddles two chunks.
            let take = (CHUNK_BYTES_MAX - at % WORD_BYTES).min(bytes.len() - pos);
            ops.push(Op::Write {
                remote_addr: mr.addr + at as u64,
                key: mr.key,
                bytes: bytes[pos..pos + take].to_vec(),
            });
            pos += take;
        }
        Ok(ops)
    }
}

fn reg_len(reg: &Registered) -> usize {
    reg.len
}

impl Endpoint for LibfabricEndpoint {
    fn node(&self) -> NodeId {
        self.shared.node
    }

    fn address(&self) -> String {
        self.shared.listen_addr.to_string()
    }

    fn connect(&self, peer: NodeId, address: &str) -> Result<()> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if peer == shared.node {
            return Err(Error::InvalidPeer {
                peer,
                detail: "an endpoint does not link to itself".into(),
            });
        }
        address
            .parse::<SocketAddr>()
            .map_err(|err| Error::BadAddress {
                addr: address.to_string(),
                detail: err.to_string(),
            })?;
        let mut state = lock(&shared.state);
        if let Some(p) = state.peers.get(&peer) {
            if p.state != LinkState::Down {
                return Ok(());
            }
        } else if state.peers.len() >= PEERS_MAX {
            return Err(Error::InvalidPeer {
                peer,
                detail: format!("more than {PEERS_MAX} peers"),
            });
        }
        let link = state.next_link;
        state.next_link += 1;
        state.peers.insert(
            peer,
            Peer {
                state: LinkState::Dialing,
                link,
                stream: None,
                fi_addr: u64::MAX,
                remote: BTreeMap::new(),
                queue: VecDeque::new(),
                queued_bytes: 0,
                in_flight: 0,
                last_heard: Instant::now(),
                partial: None,
            },
        );
        drop(state);
        let dialer = Arc::clone(shared);
        let address = address.to_string();
        std::thread::Builder::new()
            .name(format!("fi-dial-{}-{peer}", shared.node))
            .spawn(move || dialer.dial(peer, address, link))
            .map_err(|err| Error::io("spawning a dial thread", err))?;
        Ok(())
    }

    fn disconnect(&self, peer: NodeId) -> Result<()> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let mut state = lock(&shared.state);
        let Some(p) = state.peers.get(&peer) else {
            return Err(Error::NotConnected { peer });
        };
        let link = p.link;
        shared.send_side(&mut state, peer, &frame(KIND_BYE, &[]));
        shared.fail_peer(&mut state, peer, link, FailureReason::LocalClose);
        Ok(())
    }

    fn peers(&self) -> Vec<NodeId> {
        lock(&self.shared.state)
            .peers
            .iter()
            .filter(|(_, p)| p.state == LinkState::Up)
            .map(|(&id, _)| id)
            .collect()
    }

    fn register_region(&self, id: RegionId, len_bytes: usize) -> Result<Region> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        check_region_len(len_bytes)?;
        let len = crate::round_up_to_words(len_bytes);
        {
            let state = lock(&shared.state);
            if state.regions.contains_key(&id) {
                return Err(Error::RegionExists { region: id });
            }
            if state.regions.len() >= REGIONS_PER_ENDPOINT_MAX {
                return Err(Error::TooLarge {
                    what: "region count",
                    len: state.regions.len() + 1,
                    max: REGIONS_PER_ENDPOINT_MAX,
                });
            }
        }
        let reg = Arc::new(Registered::new(
            &shared.fabric.domain,
            len,
            (sys::FI_REMOTE_WRITE | sys::FI_WRITE) as u64,
        )?);
        let ptr = reg.ptr;
        let backing: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(&reg));
        // SAFETY: `ptr` is page-aligned and valid for at least `len` (whole words) bytes while
        // `backing` (an Arc of the registration) lives; this process only accesses it through
        // `Region`'s atomics, the provider writes it on behalf of peers.
        let region = unsafe { Region::from_raw(id, ptr, len, backing) };
        let mut state = lock(&shared.state);
        if state.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        let announce = region_frame(id, &reg, shared.fabric.virt_addr, len);
        state.regions.insert(id, reg);
        let peers: Vec<NodeId> = state
            .peers
            .iter()
            .filter(|(_, p)| matches!(p.state, LinkState::Up | LinkState::Handshaking))
            .map(|(&id, _)| id)
            .collect();
        for peer in peers {
            shared.send_side(&mut state, peer, &announce);
        }
        Ok(region)
    }

    fn deregister_region(&self, id: RegionId) -> Result<()> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let mut state = lock(&shared.state);
        let reg = state.regions.remove(&id).ok_or(Error::UnknownRegion {
            node: shared.node,
            region: id,
        })?;
        state.retired.push(reg);
        let withdraw = frame(KIND_WITHDRAW, &id.to_le_bytes());
        let peers: Vec<NodeId> = state
            .peers
            .iter()
            .filter(|(_, p)| matches!(p.state, LinkState::Up | LinkState::Handshaking))
            .map(|(&id, _)| id)
            .collect();
        for peer in peers {
            shared.send_side(&mut state, peer, &withdraw);
        }
        Ok(())
    }

    fn remote_region(&self, peer: NodeId, id: RegionId) -> Option<RegionDesc> {
        let state = lock(&self.shared.state);
        let mr = state.peers.get(&peer)?.remote.get(&id)?;
        Some(RegionDesc {
            node: peer,
            region: id,
            len: mr.len,
        })
    }

    fn write(&self, peer: NodeId, region: RegionId, offset: usize, bytes: &[u8]) -> Result<()> {
        let ops = self.shared.write_ops(peer, region, offset, bytes)?;
        if ops.is_empty() {
            return Ok(());
        }
        self.shared.enqueue(peer, ops)
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
        if guard_offset % WORD_BYTES != 0 {
            return Err(Error::Misaligned {
                offset: guard_offset,
            });
        }
        let mut ops = self.shared.write_ops(peer, region, offset, bytes)?;
        // The guard is a separate, later operation: FIFO placement (promised by the provider
        // or enforced with delivery-complete) puts it after the payload.
        ops.extend(self.shared.write_ops(
            peer,
            region,
            guard_offset,
            &guard_value.to_ne_bytes(),
        )?);
        self.shared.enqueue(peer, ops)
    }

    fn send(&self, peer: NodeId, imm: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() > SEND_BYTES_MAX {
            return Err(Error::TooLarge {
                what: "send",
                len: bytes.len(),
                max: SEND_BYTES_MAX,
            });
        }
        let body_max = CHUNK_BYTES_MAX - SEND_HEADER_BYTES;
        let mut ops = Vec::new();
        let mut offset = 0;
        loop {
            let take = body_max.min(bytes.len() - offset);
            let mut chunk = Vec::with_capacity(SEND_HEADER_BYTES + take);
            chunk.extend_from_slice(&SEND_MAGIC.to_le_bytes());
            chunk.extend_from_slice(&self.shared.node.to_le_bytes());
            chunk.extend_from_slice(&imm.to_le_bytes());
            chunk.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            chunk.extend_from_slice(&(offset as u32).to_le_bytes());
            chunk.extend_from_slice(&bytes[offset..offset + take]);
            ops.push(Op::Send { imm, chunk });
            offset += take;
            if offset >= bytes.len() {
                break;
            }
        }
        self.shared.enqueue(peer, ops)
    }

    fn poll_event(&self) -> Option<Event> {
        lock(&self.shared.state).events.pop_front()
    }

    fn wait(&self, timeout: Duration) -> bool {
        self.shared.doorbell.wait(timeout)
    }

    fn wake(&self) {
        self.shared.doorbell.ring();
    }

    fn close(&self) {
        let shared = &self.shared;
        {
            let mut state = lock(&shared.state);
            if shared.closed.swap(true, Ordering::AcqRel) {
                return;
            }
            let peers: Vec<NodeId> = state.peers.keys().copied().collect();
            let bye = frame(KIND_BYE, &[]);
            for peer in peers {
                shared.send_side(&mut state, peer, &bye);
                if let Some(p) = state.peers.get_mut(&peer) {
                    p.state = LinkState::Down;
                    if let Some(stream) = p.stream.take() {
                        let _ = stream.shutdown(Shutdown::Both);
                    }
                    p.queue.clear();
                }
            }
        }
        shared.work.ring();
        let threads: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
        shared.doorbell.ring();
    }
}

impl Drop for LibfabricEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}
