//! The ibverbs backend (feature `verbs`): RC queue pairs on InfiniBand / RoCE devices.
//!
//! Status: device discovery and the no-device path are in place; the RC data path is not
//! yet. [`VerbsEndpoint::open`] finds the RDMA devices with the `ibverbs` crate (0.9) and
//! returns [`Error::Config`] naming the reason when it cannot serve the contract:
//!
//! - no RDMA device on the machine (`ibverbs::devices()` is empty) — the common case on
//!   development machines and CI, where the tests skip with that reason printed;
//! - a device is present: the RC queue-pair data path (RDMA WRITE for one-sided writes,
//!   SEND with immediate for two-sided sends, QP set-up over a TCP side channel, QP errors
//!   as failure events) needs `ibv_post_send` with `IBV_WR_RDMA_WRITE` and
//!   `IBV_WR_SEND_WITH_IMM`, which the `ibverbs` 0.9 safe API does not expose (its
//!   `post_send` issues plain `IBV_WR_SEND` only), so it is to be written against
//!   `ibverbs-sys` directly. Until then, RDMA hardware is served by the libfabric backend
//!   with the `verbs;ofi_rxm` provider, which runs the same contract over the same verbs.
//!
//! ```no_run
//! use spindle_transport_rdma::verbs::{rdma_devices, VerbsEndpoint};
//! use spindle_transport_rdma::FabricConfig;
//!
//! if rdma_devices()?.is_empty() {
//!     println!("no RDMA device: verbs backend unavailable");
//! } else {
//!     let _ep = VerbsEndpoint::open(1, FabricConfig::default());
//! }
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use crate::{Error, FabricConfig, NodeId, Result};

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

/// An endpoint on an RDMA device over RC queue pairs (see the module docs for status).
#[derive(Debug)]
pub struct VerbsEndpoint {
    node: NodeId,
}

impl VerbsEndpoint {
    /// Opens an endpoint for `node` on the first RDMA device. Errors with
    /// [`Error::Config`] when there is no device, or when the verbs data path is not
    /// available (see the module docs).
    pub fn open(node: NodeId, cfg: FabricConfig) -> Result<VerbsEndpoint> {
        cfg.validate()?;
        let devices = rdma_devices()?;
        let Some(device) = devices.first() else {
            return Err(Error::Config(
                "no RDMA device on this machine (ibverbs::devices() is empty)".into(),
            ));
        };
        let _ = node;
        Err(Error::Config(format!(
            "RDMA device {device} found, but the verbs RC data path is not implemented yet; \
             use the libfabric backend with provider verbs;ofi_rxm"
        )))
    }

    /// This endpoint's node id.
    pub fn node(&self) -> NodeId {
        self.node
    }
}
