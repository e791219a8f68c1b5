//! The ibverbs backend (feature `verbs`): the fabric contract over RC queue pairs on
//! InfiniBand or RoCE devices.
//!
//! - Device discovery uses the `ibverbs` crate (0.9). Its safe API posts plain SENDs
//!   only, so the data path calls `ibverbs-sys` (the bindings `ibverbs` itself is built
//!   on) for `IBV_WR_RDMA_WRITE_WITH_IMM` and `IBV_WR_SEND_WITH_IMM`. All `unsafe` of the
//!   backend lives in this module.
//! - One RC queue pair per peer, set up over a small TCP side channel (QP number, LID, GID
//!   and the region table travel there, as do region announcements, withdrawals and
//!   heartbeat probes). The peer table, that protocol and the per-peer operation queues
//!   are shared with the libfabric backend (`side_link.rs`); this module supplies the
//!   verbs steps (its `SideBackend`: queue pairs, posting) and the completion handling.
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

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;

use crate::side_channel::{frame, u32_at, KIND_REGION};
use crate::side_link::{
    self, Op, Post, SendHeader, SideBackend, SideLinks, SideState, SEND_HEADER_BYTES,
};
use crate::{
    Endpoint, Error, Event, FabricConfig, FailureReason, NodeId, Region, RegionDesc, RegionId,
    Result, EVENT_QUEUE_MAX, WORD_BYTES,
};

/// The RDMA devices on this machine (empty without RDMA hardware or drivers).
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
pub const CHUNK_BYTES_MAX: usize = side_link::CHUNK_BYTES_MAX;
/// Registered staging buffers for outbound work requests (all peers together).
pub const TX_SLOTS_MAX: usize = 64;
/// Receive buffers posted per peer's queue pair.
pub const RX_SLOTS_PER_PEER_MAX: usize = 16;
/// Work requests in flight on one queue pair.
pub const PEER_OPS_IN_FLIGHT_MAX: usize = 16;
const CQ_BATCH_MAX: usize = 64;
const CQ_ENTRIES_MAX: i32 = 4096;
const IDLE_PARK: Duration = Duration::from_millis(1);
const SEND_MAGIC: u32 = 0x5350_5642; // "SPVB"
const RX_BUF_BYTES: usize = CHUNK_BYTES_MAX + SEND_HEADER_BYTES;
const PAGE_BYTES: usize = 4096;
const PORT_NUM: u8 = 1;
/// Immediate carried by RDMA writes (sends carry the caller's immediate and a header).
const WRITE_IMM: u32 = 0;
/// Bit set in a receive's wr_id (tx wr_ids are slot numbers).
const RX_WR_BIT: u64 = 1 << 63;

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

/// The verbs side of a [`SideLinks`]: the device and the staging buffer.
struct Vb {
    device: Arc<Device>,
    tx_buf: Registered,
}

/// Verbs state kept under the [`SideLinks`] lock.
#[derive(Default)]
struct VbExtra {
    /// Failed queue pairs stay alive until the endpoint is dropped (flushed completions
    /// may still refer to them).
    retired_qps: Vec<Arc<Qp>>,
    /// QP number → peer and link, for receive completions.
    by_qpn: BTreeMap<u32, (NodeId, u64)>,
}

type Shared = SideLinks<Vb>;

impl SideBackend for Vb {
    /// The link's own queue pair, made before the hello that names it.
    type Local = Qp;
    /// The peer's queue pair.
    type Remote = QpInfo;
    type Conn = Arc<Qp>;
    type Registered = Registered;
    type Extra = VbExtra;
    const NAME: &'static str = "verbs";
    const SEND_MAGIC: u32 = SEND_MAGIC;

    fn prepare(&self) -> Result<Qp> {
        Qp::new(&self.device)
    }

    fn hello_payload(&self, node: NodeId, qp: &Qp) -> Vec<u8> {
        hello_payload(node, qp.info())
    }

    fn parse_hello(&self, payload: &[u8]) -> Option<(NodeId, QpInfo)> {
        parse_hello(payload)
    }

    /// Moves our queue pair to RTS against the peer's.
    fn connect_fabric(
        &self,
        node: NodeId,
        peer: NodeId,
        qp: Qp,
        remote: QpInfo,
    ) -> Option<Arc<Qp>> {
        if let Err(err) = qp.connect(remote) {
            tracing::warn!(node, peer, %err, "connecting the queue pair failed");
            return None;
        }
        Some(Arc::new(qp))
    }

    fn installed(
        &self,
        extra: &mut VbExtra,
        peer: NodeId,
        link: u64,
        qp: &Arc<Qp>,
        old: Option<Arc<Qp>>,
    ) {
        extra.by_qpn.insert(qp.info().qpn, (peer, link));
        if let Some(old) = old {
            extra.retired_qps.push(old);
        }
    }

    fn link_down(&self, extra: &mut VbExtra, qp: Arc<Qp>) {
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
        extra.retired_qps.push(qp);
    }

    fn region_frame(&self, id: RegionId, reg: &Registered) -> Vec<u8> {
        region_frame(id, reg)
    }

    fn region_key(payload: &[u8]) -> Option<u64> {
        u32_at(payload, 20).map(u64::from)
    }

    fn window(&self) -> usize {
        PEER_OPS_IN_FLIGHT_MAX
    }

    fn post(&self, slot: usize, qp: &Arc<Qp>, op: &Op) -> Post {
        match self.post_op(slot, qp, op) {
            0 => Post::Done,
            12 => Post::PeerBusy, // ENOMEM: send queue full, wait for completions
            errno => Post::Failed(std::io::Error::from_raw_os_error(errno).to_string()),
        }
    }
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
            .field("device", &self.shared.backend.device.name)
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
        let backend = Vb { device, tx_buf };
        let shared = SideLinks::new(
            node,
            cfg,
            listen_addr,
            backend,
            VbExtra::default(),
            TX_SLOTS_MAX,
        );
        let mut threads = Vec::new();
        let progress = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name(format!("verbs-progress-{node}"))
                .spawn(move || progress.progress_loop())
                .map_err(|err| Error::io("spawning the progress thread", err))?,
        );
        threads.push(shared.spawn_accept(listener)?);
        Ok(VerbsEndpoint {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The RDMA device in use.
    pub fn device(&self) -> &str {
        &self.shared.backend.device.name
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

impl Vb {
    fn tx_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < TX_SLOTS_MAX, "tx slot inside the staging buffer");
        // SAFETY: slot * CHUNK_BYTES_MAX + CHUNK_BYTES_MAX <= the buffer's length.
        unsafe { self.tx_buf.ptr.as_ptr().add(slot * CHUNK_BYTES_MAX) }
    }

    fn post_op(&self, slot: usize, qp: &Qp, op: &Op) -> i32 {
        let staging = self.tx_ptr(slot);
        let (bytes, opcode, imm, rdma) = match op {
            Op::Write {
                remote_addr,
                key,
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
                // Lossless: verbs keys are announced as u32 (`Vb::region_key`).
                Some((*remote_addr, *key as u32)),
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
}

impl Shared {
    fn progress_loop(self: Arc<Self>) {
        let mut last_probe = Instant::now();
        while !self.is_closed() {
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

    fn poll_cq_once(&self) -> bool {
        if self.lock().events.len() >= EVENT_QUEUE_MAX {
            return false;
        }
        let mut wcs = [ffi::ibv_wc::default(); CQ_BATCH_MAX];
        // SAFETY: the CQ is live; `wcs` has room for CQ_BATCH_MAX completions.
        let n = unsafe {
            let ctx = (*self.backend.device.cq).context;
            match (*ctx).ops.poll_cq {
                Some(poll) => poll(
                    self.backend.device.cq,
                    CQ_BATCH_MAX as i32,
                    wcs.as_mut_ptr(),
                ),
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
            let mut state = self.lock();
            if let Some(owner) = Shared::release_tx(&mut state, slot) {
                if let Some((status, vendor)) = wc.error() {
                    self.fail_peer(
                        &mut state,
                        owner.peer,
                        owner.link,
                        FailureReason::ConnectionLost(format!(
                            "work completion status {status} (vendor error {vendor})"
                        )),
                    );
                } else {
                    self.op_done(&mut state, owner);
                }
            }
            return;
        }
        let slot = ((wr_id & !RX_WR_BIT) as usize).min(RX_SLOTS_PER_PEER_MAX - 1);
        let mut state = self.lock();
        let Some(&(peer, link)) = state.extra.by_qpn.get(&wc.qp_num) else {
            return;
        };
        let Some(qp) = state
            .peers
            .get(peer)
            .filter(|p| p.link == link)
            .and_then(|p| p.conn.clone())
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
        state: &mut SideState<Vb>,
        peer: NodeId,
        link: u64,
        bytes: &[u8],
        imm_wire: Option<u32>,
    ) {
        if state.peers.get(peer).is_none() {
            return;
        }
        let Some(h) = SendHeader::parse(bytes) else {
            self.fail_peer(
                state,
                peer,
                link,
                FailureReason::Malformed("short send chunk".into()),
            );
            return;
        };
        let header_ok = h.src == peer && imm_wire == Some(h.imm);
        let body = &bytes[SEND_HEADER_BYTES..];
        if self.reassemble(state, peer, h, header_ok, body).is_err() {
            self.fail_peer(
                state,
                peer,
                link,
                FailureReason::Malformed("bad send chunk".into()),
            );
        }
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
        let reg = Arc::new(Registered::new(&shared.backend.device, len_bytes, true)?);
        let (ptr, len) = (reg.ptr, reg.len);
        let backing: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(&reg));
        // SAFETY: `ptr` is page-aligned and valid for `len` (whole words) bytes while
        // `backing` lives; this process accesses it only through `Region`'s atomics, the
        // device writes it on behalf of peers.
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
        // The guard is a later work request on the same RC QP: executed after the payload.
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

impl Drop for VerbsEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}
