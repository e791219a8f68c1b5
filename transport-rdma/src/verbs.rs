//! The ibverbs backend (feature `verbs`): the fabric contract over RC queue pairs on
//! InfiniBand or RoCE devices.
//!
//! - Device discovery uses the `ibverbs` crate (0.9). Its safe API posts plain SENDs
//!   only, so the data path calls `ibverbs-sys` (the bindings `ibverbs` itself is built
//!   on) for `IBV_WR_RDMA_WRITE_WITH_IMM` and `IBV_WR_SEND_WITH_IMM`. All `unsafe` of the
//!   backend lives in this module.
//! - One RC queue pair per peer, set up over a small TCP side channel (QP number, LID, GID
//!   and the region table travel there, as do region announcements, withdrawals and
//!   heartbeat probes).
//! - **Writes** are RDMA WRITEs into the peer's registered region. Each carries an
//!   immediate so the owner's completion queue sees it land and rings the doorbell.
//!   **Sends** are SENDs with immediate; a send larger than one receive buffer travels as
//!   several chunks, reassembled in order.
//! - **FIFO** is the RC queue pair's: operations on one QP execute in posting order, so a
//!   guard written after its payload is placed after it.
//! - **Failures**: a work completion in error (retry exceeded, remote access error, flush)
//!   fails the peer, as do a broken side channel and probe silence.
//!
//! On a machine without an RDMA device (the common case on development machines and CI)
//! [`VerbsEndpoint::open`] returns [`Error::Config`] saying so, and the tests skip with
//! that reason printed. The data path has been compiled here but not run: this
//! development machine has no RDMA device. RDMA hardware is also served by the libfabric
//! backend with the `verbs;ofi_rxm` provider.
//!
//! ```no_run
//! use spindle_transport_rdma::verbs::{rdma_devices, VerbsEndpoint};
//! use spindle_transport_rdma::FabricConfig;
//!
//! if rdma_devices()?.is_empty() {
//!     println!("no RDMA device: verbs backend unavailable");
//! } else {
//!     let _ep = VerbsEndpoint::open(1, FabricConfig::default())?;
//! }
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;

use crate::side_channel::{
    frame, lock, u32_at, u64_at, FrameReader, KIND_BYE, KIND_HELLO, KIND_HELLO_ACK, KIND_PROBE,
    KIND_READY, KIND_REGION, KIND_REJECT, KIND_WITHDRAW, REJECTED,
};
use crate::{
    check_region_len, Doorbell, Endpoint, Error, Event, FabricConfig, FailureReason, NodeId,
    Region, RegionDesc, RegionId, Result, EVENT_QUEUE_MAX, PEERS_MAX, REGIONS_PER_ENDPOINT_MAX,
    SEND_BYTES_MAX, WORD_BYTES, WRITE_BYTES_MAX,
};

/// Names of the RDMA devices on this machine (empty when there are none, or when the
/// kernel exposes no verbs at all).
pub fn rdma_devices() -> Result<Vec<String>> {
    match ibverbs::devices() {
        Ok(list) => Ok(list
            .iter()
            .map(|dev| {
                dev.name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "<unnamed>".to_string())
            })
            .collect()),
        // No verbs support in the kernel (ENOSYS: no /sys/class/infiniband) or no
        // uverbs device files: no devices.
        Err(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(Vec::new())
        }
        Err(err) => Err(Error::io("listing RDMA devices (ibv_get_device_list)", err)),
    }
}

/// Largest piece one work request carries.
pub const CHUNK_BYTES_MAX: usize = 64 << 10;
/// Registered staging buffers for outbound work requests (all peers together).
pub const TX_SLOTS_MAX: usize = 64;
/// Receive buffers posted per peer's queue pair.
pub const RX_SLOTS_PER_PEER_MAX: usize = 16;
/// Work requests in flight on one queue pair.
pub const PEER_OPS_IN_FLIGHT_MAX: usize = 16;
const CQ_BATCH_MAX: usize = 64;
const CQ_ENTRIES_MAX: i32 = 4096;
const IDLE_PARK: Duration = Duration::from_millis(1);
const SEND_HEADER_BYTES: usize = 20;
const SEND_MAGIC: u32 = 0x5350_5642; // "SPVB"
const RX_BUF_BYTES: usize = CHUNK_BYTES_MAX + SEND_HEADER_BYTES;
const PAGE_BYTES: usize = 4096;
const PORT_NUM: u8 = 1;
/// Immediate carried by RDMA writes (sends carry the caller's immediate and a header).
const WRITE_IMM: u32 = 0;
/// Bit set in a receive's wr_id (tx wr_ids are slot numbers).
const RX_WR_BIT: u64 = 1 << 63;

const _: () = assert!(CHUNK_BYTES_MAX % WORD_BYTES == 0);
const _: () = assert!(SEND_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(TX_SLOTS_MAX >= PEER_OPS_IN_FLIGHT_MAX);

fn os_error(context: &str, errno: i32) -> Error {
    Error::io(
        context.to_string(),
        std::io::Error::from_raw_os_error(errno),
    )
}

/// Device context, protection domain and completion queue.
struct Device {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    cq: *mut ffi::ibv_cq,
    lid: u16,
    gid: [u8; 16],
    gid_index: u8,
    mtu: ffi::ibv_mtu,
    name: String,
}

// SAFETY: verbs objects are thread-safe per the libibverbs API; the pointers are only
// passed to libibverbs.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: each handle was created in `open_device`, is destroyed once, after every
        // QP and MR created on it (they hold an Arc<Device>).
        unsafe {
            if !self.cq.is_null() {
                ffi::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ffi::ibv_close_device(self.ctx);
            }
        }
    }
}

fn open_device() -> Result<Device> {
    let mut count = 0;
    // SAFETY: ibv_get_device_list returns an array of `count` devices (or null) that we
    // free below after opening the first one.
    let list = unsafe { ffi::ibv_get_device_list(&mut count) };
    if list.is_null() || count <= 0 {
        if !list.is_null() {
            // SAFETY: returned by ibv_get_device_list.
            unsafe { ffi::ibv_free_device_list(list) };
        }
        return Err(Error::Config(
            "no RDMA device on this machine (ibverbs::devices() is empty)".into(),
        ));
    }
    let mut device = Device {
        ctx: std::ptr::null_mut(),
        pd: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        lid: 0,
        gid: [0; 16],
        gid_index: 0,
        mtu: ffi::IBV_MTU_1024,
        name: String::new(),
    };
    // SAFETY: `list` holds `count >= 1` valid device pointers until freed; the context
    // outlives the list.
    unsafe {
        let dev = *list;
        let name = ffi::ibv_get_device_name(dev);
        if !name.is_null() {
            device.name = std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned();
        }
        device.ctx = ffi::ibv_open_device(dev);
        ffi::ibv_free_device_list(list);
    }
    if device.ctx.is_null() {
        return Err(Error::io(
            format!("opening RDMA device {}", device.name),
            std::io::Error::last_os_error(),
        ));
    }
    let mut port = ffi::ibv_port_attr::default();
    // SAFETY: the context is open; `port` is a valid ibv_port_attr to fill (the compat
    // pointer type is the same struct, as the ibverbs crate passes it).
    let errno = unsafe {
        ffi::ibv_query_port(
            device.ctx,
            PORT_NUM,
            (&mut port as *mut ffi::ibv_port_attr).cast(),
        )
    };
    if errno != 0 {
        return Err(os_error("querying the RDMA port", errno));
    }
    if port.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
        return Err(Error::Config(format!(
            "RDMA device {} port {PORT_NUM} is not active",
            device.name
        )));
    }
    device.lid = port.lid;
    device.mtu = port.active_mtu;
    device.gid_index = std::env::var("SPINDLE_VERBS_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut gid = ffi::ibv_gid::default();
    // SAFETY: the context is open; `gid` is a valid out-parameter.
    let errno =
        unsafe { ffi::ibv_query_gid(device.ctx, PORT_NUM, device.gid_index.into(), &mut gid) };
    if errno != 0 {
        return Err(os_error("querying the port GID", errno));
    }
    // SAFETY: every bit pattern is a valid [u8; 16].
    device.gid = unsafe { gid.raw };
    // SAFETY: the context is open.
    device.pd = unsafe { ffi::ibv_alloc_pd(device.ctx) };
    if device.pd.is_null() {
        return Err(Error::io(
            "allocating a protection domain",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the context is open; no completion channel, vector 0.
    device.cq = unsafe {
        ffi::ibv_create_cq(
            device.ctx,
            CQ_ENTRIES_MAX,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if device.cq.is_null() {
        return Err(Error::io(
            "creating the completion queue",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(device)
}

/// Page-aligned zeroed memory registered with the protection domain.
struct Registered {
    device: Arc<Device>,
    mr: *mut ffi::ibv_mr,
    ptr: NonNull<u8>,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the memory is accessed through atomics (regions) or by the progress thread under
// the state lock (staging and receive buffers); the MR handle is only read.
unsafe impl Send for Registered {}
// SAFETY: as above.
unsafe impl Sync for Registered {}

impl Registered {
    fn new(device: &Arc<Device>, len_bytes: usize, remote_write: bool) -> Result<Registered> {
        let alloc_len = len_bytes.max(WORD_BYTES).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let layout = std::alloc::Layout::from_size_align(alloc_len, PAGE_BYTES)
            .map_err(|err| Error::Config(format!("region layout: {err}")))?;
        // SAFETY: non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::io(
                "allocating RDMA memory",
                std::io::ErrorKind::OutOfMemory.into(),
            )
        })?;
        let mut access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if remote_write {
            access |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        // SAFETY: `ptr` is valid for `alloc_len` bytes until Drop, which deregisters first.
        let mr =
            unsafe { ffi::ibv_reg_mr(device.pd, ptr.as_ptr().cast(), alloc_len, access as i32) };
        if mr.is_null() {
            let err = std::io::Error::last_os_error();
            // SAFETY: allocated above with this layout, never registered.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            return Err(Error::io("registering memory (ibv_reg_mr)", err));
        }
        Ok(Registered {
            device: Arc::clone(device),
            mr,
            ptr,
            len: crate::round_up_to_words(len_bytes),
            layout,
        })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is registered until Drop.
        unsafe { (*self.mr).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: `mr` is registered until Drop.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, deregistered once, before the memory is freed.
        unsafe {
            ffi::ibv_dereg_mr(self.mr);
            std::alloc::dealloc(self.ptr.as_ptr(), self.layout);
        }
        let _ = &self.device;
    }
}

/// One RC queue pair with its receive buffers.
struct Qp {
    device: Arc<Device>,
    qp: *mut ffi::ibv_qp,
    rx: Registered,
}

// SAFETY: ibv_post_send / ibv_post_recv are thread-safe per libibverbs; we also only post
// under the state lock.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `Qp::new`, destroyed once; its receive MR is dropped after.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
        let _ = &self.device;
    }
}

/// What the peer needs to connect its QP to ours.
#[derive(Debug, Clone, Copy)]
struct QpInfo {
    qpn: u32,
    lid: u16,
    gid: [u8; 16],
}

impl Qp {
    fn new(device: &Arc<Device>) -> Result<Qp> {
        let rx = Registered::new(device, RX_SLOTS_PER_PEER_MAX * RX_BUF_BYTES, false)?;
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: device.cq,
            recv_cq: device.cq,
            srq: std::ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: PEER_OPS_IN_FLIGHT_MAX as u32,
                max_recv_wr: RX_SLOTS_PER_PEER_MAX as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the PD and CQ are live (held by `device`); `init` is valid.
        let qp = unsafe { ffi::ibv_create_qp(device.pd, &mut init) };
        if qp.is_null() {
            return Err(Error::io(
                "creating an RC queue pair",
                std::io::Error::last_os_error(),
            ));
        }
        let qp = Qp {
            device: Arc::clone(device),
            qp,
            rx,
        };
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: PORT_NUM,
            qp_access_flags: ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ffi::ibv_qp_attr_mask::IBV_QP_PORT
            | ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        qp.modify(&mut attr, mask, "moving the QP to INIT")?;
        for slot in 0..RX_SLOTS_PER_PEER_MAX {
            qp.post_recv(slot)?;
        }
        Ok(qp)
    }

    fn info(&self) -> QpInfo {
        QpInfo {
            // SAFETY: the QP is live.
            qpn: unsafe { (*self.qp).qp_num },
            lid: self.device.lid,
            gid: self.device.gid,
        }
    }

    fn modify(
        &self,
        attr: &mut ffi::ibv_qp_attr,
        mask: ffi::ibv_qp_attr_mask,
        what: &str,
    ) -> Result<()> {
        // SAFETY: the QP is live; `attr` is valid for the fields named in `mask`.
        let errno = unsafe { ffi::ibv_modify_qp(self.qp, attr, mask.0 as i32) };
        if errno != 0 {
            return Err(os_error(what, errno));
        }
        Ok(())
    }

    /// INIT → RTR → RTS towards `remote`.
    fn connect(&self, remote: QpInfo) -> Result<()> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: self.device.mtu,
            dest_qp_num: remote.qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ffi::ibv_ah_attr {
                dlid: remote.lid,
                sl: 0,
                src_path_bits: 0,
                port_num: PORT_NUM,
                ..Default::default()
            },
            ..Default::default()
        };
        if remote.gid != [0; 16] {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
            attr.ah_attr.grh.hop_limit = 0xff;
            attr.ah_attr.grh.sgid_index = self.device.gid_index;
        }
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_AV
            | ffi::ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ffi::ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ffi::ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ffi::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut attr, mask, "moving the QP to RTR")?;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ffi::ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ffi::ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut attr, mask, "moving the QP to RTS")
    }

    fn rx_ptr(&self, slot: usize) -> *mut u8 {
        assert!(
            slot < RX_SLOTS_PER_PEER_MAX,
            "rx slot inside the receive buffer"
        );
        // SAFETY: slot * RX_BUF_BYTES + RX_BUF_BYTES <= the buffer's length.
        unsafe { self.rx.ptr.as_ptr().add(slot * RX_BUF_BYTES) }
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        let mut sge = ffi::ibv_sge {
            addr: self.rx_ptr(slot) as u64,
            length: RX_BUF_BYTES as u32,
            lkey: self.rx.lkey(),
        };
        let mut wr = ffi::ibv_recv_wr {
            wr_id: RX_WR_BIT | slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; its context's ops table has post_recv (libibverbs fills
        // it); `wr` and `sge` live across the call, the buffer until the completion.
        let errno = unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_recv {
                Some(post) => post(self.qp, &mut wr, &mut bad),
                None => libc_enosys(),
            }
        };
        if errno != 0 {
            return Err(os_error("posting a receive", errno));
        }
        Ok(())
    }

    fn post_send(&self, wr: &mut ffi::ibv_send_wr) -> i32 {
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and its SGE live across the call, the staging buffer
        // until the completion.
        unsafe {
            let ctx = (*self.qp).context;
            match (*ctx).ops.post_send {
                Some(post) => post(self.qp, wr, &mut bad),
                None => libc_enosys(),
            }
        }
    }
}

fn libc_enosys() -> i32 {
    38 // ENOSYS
}

#[derive(Debug)]
enum Op {
    Write {
        remote_addr: u64,
        rkey: u32,
        bytes: Vec<u8>,
        /// Carry an immediate (the owner's doorbell rings); set on a write call's last chunk.
        notify: bool,
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
    rkey: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    Dialing,
    Handshaking,
    Up,
    Down,
}

struct Peer {
    state: LinkState,
    link: u64,
    stream: Option<TcpStream>,
    qp: Option<Arc<Qp>>,
    remote: BTreeMap<RegionId, RemoteMr>,
    queue: VecDeque<Op>,
    queued_bytes: usize,
    in_flight: usize,
    last_heard: Instant,
    partial: Option<(u32, usize, Vec<u8>)>,
}

#[derive(Debug, Clone, Copy)]
struct TxSlot {
    peer: NodeId,
    link: u64,
}

struct State {
    regions: BTreeMap<RegionId, Arc<Registered>>,
    /// Withdrawn regions and failed queue pairs stay alive until the endpoint is dropped
    /// (peers' in-flight writes and flushed completions may still refer to them).
    retired: Vec<Arc<Registered>>,
    retired_qps: Vec<Arc<Qp>>,
    peers: BTreeMap<NodeId, Peer>,
    /// QP number → peer, for receive completions.
    by_qpn: BTreeMap<u32, (NodeId, u64)>,
    events: VecDeque<Event>,
    tx_free: Vec<usize>,
    tx_slots: Vec<Option<TxSlot>>,
    next_link: u64,
}

struct Shared {
    node: NodeId,
    cfg: FabricConfig,
    device: Arc<Device>,
    listen_addr: SocketAddr,
    state: Mutex<State>,
    doorbell: Doorbell,
    work: Doorbell,
    closed: AtomicBool,
    tx_buf: Registered,
}

/// A [`crate::Endpoint`] over RC queue pairs on an RDMA device (see the module docs).
pub struct VerbsEndpoint {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for VerbsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsEndpoint")
            .field("node", &self.shared.node)
            .field("device", &self.shared.device.name)
            .field("address", &self.shared.listen_addr)
            .finish()
    }
}

impl VerbsEndpoint {
    /// Opens an endpoint for `node` on the first RDMA device (port 1; GID index from
    /// `SPINDLE_VERBS_GID_INDEX`, default 0), with its side channel on 127.0.0.1.
    /// Errors with [`Error::Config`] when there is no RDMA device.
    pub fn open(node: NodeId, cfg: FabricConfig) -> Result<VerbsEndpoint> {
        Self::open_on(node, "127.0.0.1:0", cfg)
    }

    /// As [`VerbsEndpoint::open`], with the side channel listening on `bind` (peers on
    /// other hosts need a routable address).
    pub fn open_on(node: NodeId, bind: &str, cfg: FabricConfig) -> Result<VerbsEndpoint> {
        cfg.validate()?;
        if rdma_devices()?.is_empty() {
            return Err(Error::Config(
                "no RDMA device on this machine (ibverbs::devices() is empty)".into(),
            ));
        }
        let device = Arc::new(open_device()?);
        let tx_buf = Registered::new(&device, TX_SLOTS_MAX * CHUNK_BYTES_MAX, false)?;
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
        let shared = Arc::new(Shared {
            node,
            cfg,
            device,
            listen_addr,
            state: Mutex::new(State {
                regions: BTreeMap::new(),
                retired: Vec::new(),
                retired_qps: Vec::new(),
                peers: BTreeMap::new(),
                by_qpn: BTreeMap::new(),
                events: VecDeque::new(),
                tx_free: (0..TX_SLOTS_MAX).rev().collect(),
                tx_slots: vec![None; TX_SLOTS_MAX],
                next_link: 1,
            }),
            doorbell: Doorbell::new(),
            work: Doorbell::new(),
            closed: AtomicBool::new(false),
            tx_buf,
        });
        let mut threads = Vec::new();
        let progress = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name(format!("verbs-progress-{node}"))
                .spawn(move || progress.progress_loop())
                .map_err(|err| Error::io("spawning the progress thread", err))?,
        );
        let acceptor = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name(format!("verbs-accept-{node}"))
                .spawn(move || acceptor.accept_loop(listener))
                .map_err(|err| Error::io("spawning the accept thread", err))?,
        );
        Ok(VerbsEndpoint {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The RDMA device in use.
    pub fn device(&self) -> &str {
        &self.shared.device.name
    }
}

fn region_frame(id: RegionId, reg: &Registered) -> Vec<u8> {
    let mut p = Vec::with_capacity(24);
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&(reg.len as u64).to_le_bytes());
    p.extend_from_slice(&(reg.ptr.as_ptr() as u64).to_le_bytes());
    p.extend_from_slice(&reg.rkey().to_le_bytes());
    frame(KIND_REGION, &p)
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn hello_payload(node: NodeId, info: QpInfo) -> Vec<u8> {
    let mut p = node.to_le_bytes().to_vec();
    p.extend_from_slice(&info.qpn.to_le_bytes());
    p.extend_from_slice(&info.lid.to_le_bytes());
    p.extend_from_slice(&info.gid);
    p
}

fn parse_hello(p: &[u8]) -> Option<(NodeId, QpInfo)> {
    if p.len() != 26 {
        return None;
    }
    let gid: [u8; 16] = p.get(10..26)?.try_into().ok()?;
    Some((
        u32_at(p, 0)?,
        QpInfo {
            qpn: u32_at(p, 4)?,
            lid: u16_at(p, 8)?,
            gid,
        },
    ))
}

impl Shared {
    fn tx_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < TX_SLOTS_MAX, "tx slot inside the staging buffer");
        // SAFETY: slot * CHUNK_BYTES_MAX + CHUNK_BYTES_MAX <= the buffer's length.
        unsafe { self.tx_buf.ptr.as_ptr().add(slot * CHUNK_BYTES_MAX) }
    }

    fn push_event(&self, state: &mut State, event: Event) {
        state.events.push_back(event);
        self.doorbell.ring();
    }

    fn fail_peer(&self, state: &mut State, peer: NodeId, link: u64, reason: FailureReason) {
        let Some(p) = state.peers.get_mut(&peer) else {
            return;
        };
        if p.link != link || p.state == LinkState::Down {
            return;
        }
        p.state = LinkState::Down;
        if let Some(stream) = p.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        p.queue.clear();
        p.queued_bytes = 0;
        p.remote.clear();
        p.partial = None;
        if let Some(qp) = p.qp.take() {
            // Moving the QP to ERR flushes its outstanding work requests.
            let mut attr = ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
                ..Default::default()
            };
            let _ = qp.modify(
                &mut attr,
                ffi::ibv_qp_attr_mask::IBV_QP_STATE,
                "moving the QP to ERR",
            );
            state.retired_qps.push(qp);
        }
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

    fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        while !self.closed.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&self);
                    let _ = std::thread::Builder::new()
                        .name(format!("verbs-accepted-{}", self.node))
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

    fn accepted(self: Arc<Self>, mut stream: TcpStream) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(timeout));
        let mut reader = FrameReader::default();
        let Ok(Some((KIND_HELLO, payload))) = reader.next(&mut stream) else {
            return;
        };
        let Some((peer, remote)) = parse_hello(&payload) else {
            return;
        };
        if peer == self.node {
            return;
        }
        let Ok(qp) = Qp::new(&self.device) else {
            return;
        };
        let link = {
            let mut state = lock(&self.state);
            let accept = match state.peers.get(&peer) {
                None => state.peers.len() < PEERS_MAX,
                Some(p) => match p.state {
                    LinkState::Down => true,
                    LinkState::Up | LinkState::Handshaking => false,
                    LinkState::Dialing => peer < self.node,
                },
            };
            if !accept {
                let _ = stream.write_all(&frame(KIND_REJECT, &[]));
                return;
            }
            if stream
                .write_all(&frame(KIND_HELLO_ACK, &hello_payload(self.node, qp.info())))
                .is_err()
            {
                return;
            }
            match self.establish(&mut state, peer, qp, remote, &stream) {
                Some(link) => link,
                None => return,
            }
        };
        self.read_loop(peer, link, stream, reader);
    }

    fn dial(self: Arc<Self>, peer: NodeId, address: String, link: u64) {
        let timeout = Duration::from_millis(self.cfg.connect_timeout_ms);
        let result = (|| -> std::result::Result<(TcpStream, FrameReader, Qp, QpInfo), String> {
            let qp = Qp::new(&self.device).map_err(|e| e.to_string())?;
            let addr: SocketAddr = address.parse().map_err(|err| format!("{err}"))?;
            let mut stream =
                TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            stream
                .set_read_timeout(Some(timeout))
                .map_err(|e| e.to_string())?;
            stream
                .write_all(&frame(KIND_HELLO, &hello_payload(self.node, qp.info())))
                .map_err(|e| e.to_string())?;
            let mut reader = FrameReader::default();
            match reader.next(&mut stream)? {
                Some((KIND_HELLO_ACK, payload)) => match parse_hello(&payload) {
                    Some((node, remote)) if node == peer => Ok((stream, reader, qp, remote)),
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
            Ok((stream, reader, qp, remote)) if still_ours => {
                if let Some(new_link) = self.establish(&mut state, peer, qp, remote, &stream) {
                    drop(state);
                    self.read_loop(peer, new_link, stream, reader);
                }
            }
            Ok((stream, ..)) => {
                let _ = stream.shutdown(Shutdown::Both);
            }
            Err(why) if still_ours => {
                self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
            }
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

    fn establish(
        &self,
        state: &mut State,
        peer: NodeId,
        qp: Qp,
        remote: QpInfo,
        stream: &TcpStream,
    ) -> Option<u64> {
        if let Err(err) = qp.connect(remote) {
            tracing::warn!(node = self.node, peer, %err, "connecting the queue pair failed");
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        let writer = stream.try_clone().ok()?;
        let _ = writer.set_write_timeout(Some(self.cfg.probe_timeout()));
        let link = state.next_link;
        state.next_link += 1;
        let qp = Arc::new(qp);
        state.by_qpn.insert(qp.info().qpn, (peer, link));
        if let Some(old) = state.peers.get_mut(&peer).and_then(|p| p.qp.take()) {
            state.retired_qps.push(old);
        }
        state.peers.insert(
            peer,
            Peer {
                state: LinkState::Handshaking,
                link,
                stream: Some(writer),
                qp: Some(qp),
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
            table.extend(region_frame(id, reg));
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
                let (Some(id), Some(len), Some(addr), Some(rkey)) = (
                    u32_at(payload, 0),
                    u64_at(payload, 4),
                    u64_at(payload, 12),
                    u32_at(payload, 20),
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
                p.remote.insert(id, RemoteMr { len, addr, rkey });
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
            KIND_BYE => self.fail_peer(state, peer, link, FailureReason::Closed),
            other => {
                return Err(malformed(&format!(
                    "unknown side-channel frame kind {other}"
                )))
            }
        }
        Ok(())
    }

    fn progress_loop(self: Arc<Self>) {
        let mut last_probe = Instant::now();
        while !self.closed.load(Ordering::Acquire) {
            let mut busy = self.poll_cq_once();
            busy |= self.issue_queued();
            if last_probe.elapsed() >= self.cfg.probe_interval() {
                last_probe = Instant::now();
                self.probe_peers();
            }
            if !busy {
                self.work.wait(IDLE_PARK);
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

    fn poll_cq_once(&self) -> bool {
        if lock(&self.state).events.len() >= EVENT_QUEUE_MAX {
            return false;
        }
        let mut wcs = [ffi::ibv_wc::default(); CQ_BATCH_MAX];
        // SAFETY: the CQ is live; `wcs` has room for CQ_BATCH_MAX completions.
        let n = unsafe {
            let ctx = (*self.device.cq).context;
            match (*ctx).ops.poll_cq {
                Some(poll) => poll(self.device.cq, CQ_BATCH_MAX as i32, wcs.as_mut_ptr()),
                None => -1,
            }
        };
        if n <= 0 {
            return false;
        }
        for wc in &wcs[..(n as usize).min(CQ_BATCH_MAX)] {
            self.completed(wc);
        }
        true
    }

    fn completed(&self, wc: &ffi::ibv_wc) {
        let wr_id = wc.wr_id();
        if wr_id & RX_WR_BIT == 0 {
            let slot = (wr_id as usize).min(TX_SLOTS_MAX - 1);
            let mut state = lock(&self.state);
            let owner = state.tx_slots[slot].take();
            if owner.is_some() {
                state.tx_free.push(slot);
            }
            if let Some(owner) = owner {
                if let Some((status, vendor)) = wc.error() {
                    self.fail_peer(
                        &mut state,
                        owner.peer,
                        owner.link,
                        FailureReason::ConnectionLost(format!(
                            "work completion status {status} (vendor error {vendor})"
                        )),
                    );
                } else if let Some(p) = state.peers.get_mut(&owner.peer) {
                    if p.link == owner.link {
                        p.in_flight = p.in_flight.saturating_sub(1);
                        if p.queue.is_empty() && p.in_flight == 0 {
                            self.doorbell.ring();
                        }
                    }
                }
            }
            return;
        }
        let slot = ((wr_id & !RX_WR_BIT) as usize).min(RX_SLOTS_PER_PEER_MAX - 1);
        let mut state = lock(&self.state);
        let Some(&(peer, link)) = state.by_qpn.get(&wc.qp_num) else {
            return;
        };
        let Some(qp) = state
            .peers
            .get(&peer)
            .filter(|p| p.link == link)
            .and_then(|p| p.qp.clone())
        else {
            return;
        };
        if let Some((status, vendor)) = wc.error() {
            // Flushed receives of a failed QP land here too; fail_peer ignores repeats.
            self.fail_peer(
                &mut state,
                peer,
                link,
                FailureReason::ConnectionLost(format!(
                    "receive completion status {status} (vendor error {vendor})"
                )),
            );
            return;
        }
        if wc.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
            self.doorbell.ring();
        } else {
            let len = wc.len().min(RX_BUF_BYTES);
            let mut bytes = vec![0u8; len];
            // SAFETY: the receive completed, so the device no longer writes the slot; `len`
            // bytes of it hold the message.
            unsafe { std::ptr::copy_nonoverlapping(qp.rx_ptr(slot), bytes.as_mut_ptr(), len) };
            self.rx_chunk(
                &mut state,
                peer,
                link,
                &bytes,
                wc.imm_data().map(u32::from_be),
            );
        }
        if let Err(err) = qp.post_recv(slot) {
            self.fail_peer(
                &mut state,
                peer,
                link,
                FailureReason::ConnectionLost(err.to_string()),
            );
        }
    }

    fn rx_chunk(
        &self,
        state: &mut State,
        peer: NodeId,
        link: u64,
        bytes: &[u8],
        imm_wire: Option<u32>,
    ) {
        let Some(p) = state.peers.get_mut(&peer) else {
            return;
        };
        let fields = (
            u32_at(bytes, 0),
            u32_at(bytes, 4),
            u32_at(bytes, 8),
            u32_at(bytes, 12),
            u32_at(bytes, 16),
        );
        let (Some(magic), Some(src), Some(imm), Some(total), Some(offset)) = fields else {
            self.fail_peer(
                state,
                peer,
                link,
                FailureReason::Malformed("short send chunk".into()),
            );
            return;
        };
        let (total, offset) = (total as usize, offset as usize);
        let body = &bytes[SEND_HEADER_BYTES..];
        let valid = magic == SEND_MAGIC
            && src == peer
            && imm_wire == Some(imm)
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
                state,
                peer,
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
                self.push_event(state, Event::Recv { peer, imm, data });
            }
        }
    }

    fn issue_queued(&self) -> bool {
        let mut state = lock(&self.state);
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
                if p.state != LinkState::Up
                    || p.in_flight >= PEER_OPS_IN_FLIGHT_MAX
                    || p.queue.is_empty()
                {
                    break;
                }
                let Some(qp) = p.qp.clone() else { break };
                let op = p.queue.front().expect("checked non-empty");
                let errno = self.post(slot, &qp, op);
                if errno == 12 {
                    break; // ENOMEM: send queue full, wait for completions
                }
                if errno != 0 {
                    let link = p.link;
                    let why = std::io::Error::from_raw_os_error(errno).to_string();
                    self.fail_peer(&mut state, peer, link, FailureReason::ConnectionLost(why));
                    break;
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

    fn post(&self, slot: usize, qp: &Qp, op: &Op) -> i32 {
        let staging = self.tx_ptr(slot);
        let (bytes, opcode, imm, rdma) = match op {
            Op::Write {
                remote_addr,
                rkey,
                bytes,
                notify,
            } => (
                bytes,
                if *notify {
                    ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
                } else {
                    ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE
                },
                WRITE_IMM,
                Some((*remote_addr, *rkey)),
            ),
            Op::Send { imm, chunk } => {
                (chunk, ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, *imm, None)
            }
        };
        assert!(
            bytes.len() <= CHUNK_BYTES_MAX,
            "operations are split into chunks"
        );
        // SAFETY: the staging slot is free (taken from tx_free) and holds CHUNK_BYTES_MAX.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), staging, bytes.len()) };
        let mut sge = ffi::ibv_sge {
            addr: staging as u64,
            length: bytes.len() as u32,
            lkey: self.tx_buf.lkey(),
        };
        // SAFETY: an all-zero ibv_send_wr is a valid empty work request (plain C struct).
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        if let Some((remote_addr, rkey)) = rdma {
            wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        }
        qp.post_send(&mut wr)
    }

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
            let take = (CHUNK_BYTES_MAX - at % WORD_BYTES).min(bytes.len() - pos);
            ops.push(Op::Write {
                remote_addr: mr.addr + at as u64,
                rkey: mr.rkey,
                bytes: bytes[pos..pos + take].to_vec(),
                notify: pos + take == bytes.len(),
            });
            pos += take;
        }
        Ok(ops)
    }
}

impl Endpoint for VerbsEndpoint {
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
                qp: None,
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
            .name(format!("verbs-dial-{}-{peer}", shared.node))
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
        let reg = Arc::new(Registered::new(&shared.device, len_bytes, true)?);
        let (ptr, len) = (reg.ptr, reg.len);
        let backing: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(&reg));
        // SAFETY: `ptr` is page-aligned and valid for `len` (whole words) bytes while
        // `backing` lives; this process accesses it only through `Region`'s atomics, the
        // device writes it on behalf of peers.
        let region = unsafe { Region::from_raw(id, ptr, len, backing) };
        let mut state = lock(&shared.state);
        if state.regions.contains_key(&id) {
            return Err(Error::RegionExists { region: id });
        }
        let announce = region_frame(id, &reg);
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
        // The guard is a later work request on the same RC QP: executed after the payload.
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

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}
