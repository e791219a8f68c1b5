//! The RDMA transports a participant's TOML selects (`transport = "libfabric"` with its
//! `provider`, `transport = "verbs"` with its `device`; their keys are checked by
//! `ParticipantConfig::validate`): their endpoints opened — or, in a build without the backend, an error that says which cargo
//! feature and which system package it needs. (tcp and shm are opened in
//! `participant.rs`.)

use std::sync::Arc;

use spindle_transport_rdma::Endpoint;

use crate::config::{ParticipantConfig, Transport};
use crate::error::{Error, Result};

/// What a build without the libfabric backend says.
#[cfg(not(feature = "libfabric"))]
const NEEDS_LIBFABRIC: &str = "this build has no libfabric backend: build with the \
     `libfabric` cargo feature (`cargo build -p spindle-cli --features libfabric`, or \
     spindle-dds-core's `libfabric` feature), which needs the system's libfabric \
     (Debian: libfabric-dev; scripts/setup-rdma.sh installs it)";

/// What a build without the verbs backend says.
#[cfg(not(feature = "verbs"))]
const NEEDS_VERBS: &str = "this build has no verbs backend: build with the `verbs` cargo \
     feature (`cargo build -p spindle-cli --features verbs`, or spindle-dds-core's `verbs` \
     feature), which needs rdma-core's libibverbs (Debian: libibverbs-dev, \
     ibverbs-providers; scripts/setup-rdma.sh installs them) and an RDMA device";

/// Opens the endpoint of `cfg`'s libfabric or verbs transport.
pub(crate) fn open_rdma(cfg: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    match cfg.transport {
        Transport::Libfabric => open_libfabric(cfg),
        Transport::Verbs => open_verbs(cfg),
        other => Err(Error::Config(format!(
            "transport = {:?} is not an RDMA transport",
            other.name()
        ))),
    }
}

#[cfg(feature = "libfabric")]
fn open_libfabric(cfg: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    let provider = cfg.provider.as_deref().unwrap_or_default();
    let ep = spindle_transport_rdma::libfabric::LibfabricEndpoint::open_on(
        cfg.node_id,
        provider,
        &cfg.listen,
        cfg.fabric.clone(),
    )
    .map_err(|e| {
        Error::Config(format!(
            "transport = \"libfabric\", provider = {provider:?}: {e} (`fi_info -l` lists the \
             providers this machine's libfabric has)"
        ))
    })?;
    tracing::info!(
        node = cfg.node_id,
        provider = ep.provider(),
        "libfabric endpoint open"
    );
    Ok(Arc::new(ep))
}

#[cfg(not(feature = "libfabric"))]
fn open_libfabric(_cfg: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    Err(Error::Config(format!(
        "transport = \"libfabric\": {NEEDS_LIBFABRIC}"
    )))
}

#[cfg(feature = "verbs")]
fn open_verbs(cfg: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    let ep = spindle_transport_rdma::verbs::VerbsEndpoint::open_on(
        cfg.node_id,
        &cfg.listen,
        cfg.fabric.clone(),
    )
    .map_err(|e| {
        Error::Config(format!(
            "transport = \"verbs\": {e} (`ibv_devices` lists this machine's RDMA devices; \
             rdma-core's ibverbs-providers must be installed)"
        ))
    })?;
    if let Some(want) = cfg.device.as_deref() {
        if ep.device() != want {
            let got = ep.device().to_string();
            ep.close();
            return Err(Error::Config(format!(
                "transport = \"verbs\", device = {want:?}: the verbs backend opens the \
                 machine's first RDMA device, {got:?}; choosing another is not supported yet"
            )));
        }
    }
    Ok(Arc::new(ep))
}

#[cfg(not(feature = "verbs"))]
fn open_verbs(_cfg: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    Err(Error::Config(format!(
        "transport = \"verbs\": {NEEDS_VERBS}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ParticipantConfig> {
        ParticipantConfig::from_toml_str(text, "t.toml")
    }

    const BASE: &str = "node_id = 1\nbootstrap = [1]\n";

    #[test]
    fn transport_keys_are_checked_naming_the_key() {
        let ok = parse(&format!(
            "{BASE}transport = \"libfabric\"\nlisten = \"127.0.0.1:0\"\nprovider = \"tcp;ofi_rxm\"\n"
        ))
        .unwrap();
        assert_eq!(ok.transport, Transport::Libfabric);
        assert_eq!(ok.provider.as_deref(), Some("tcp;ofi_rxm"));
        let ok = parse(&format!(
            "{BASE}transport = \"verbs\"\nlisten = \"10.0.0.1:7400\"\ndevice = \"mlx5_0\"\n"
        ))
        .unwrap();
        assert_eq!(ok.device.as_deref(), Some("mlx5_0"));
        let e = parse(&format!(
            "{BASE}transport = \"tcp\"\nlisten = \"127.0.0.1:0\"\nprovider = \"efa\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("t.toml") && e.contains("provider") && e.contains("libfabric"),
            "{e}"
        );
        let e = parse(&format!(
            "{BASE}transport = \"libfabric\"\nlisten = \"127.0.0.1:0\"\ndevice = \"mlx5_0\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("device") && e.contains("verbs"), "{e}");
        let e = parse(&format!(
            "{BASE}transport = \"verbs\"\nlisten = \"nowhere\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("listen") && e.contains("host:port"), "{e}");
        let e = parse(&format!(
            "{BASE}transport = \"udp\"\nlisten = \"127.0.0.1:0\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("t.toml") && e.contains("udp"), "{e}");
    }

    #[cfg(not(feature = "libfabric"))]
    #[test]
    fn without_the_feature_libfabric_names_the_feature_and_the_package() {
        let cfg = parse(&format!(
            "{BASE}transport = \"libfabric\"\nlisten = \"127.0.0.1:0\"\n"
        ))
        .unwrap();
        let e = open_rdma(&cfg).err().unwrap().to_string();
        assert!(
            e.contains("`libfabric` cargo feature") && e.contains("libfabric-dev"),
            "{e}"
        );
    }

    #[cfg(not(feature = "verbs"))]
    #[test]
    fn without_the_feature_verbs_names_the_feature_and_the_package() {
        let cfg = parse(&format!(
            "{BASE}transport = \"verbs\"\nlisten = \"127.0.0.1:0\"\n"
        ))
        .unwrap();
        let e = open_rdma(&cfg).err().unwrap().to_string();
        assert!(
            e.contains("`verbs` cargo feature") && e.contains("libibverbs"),
            "{e}"
        );
    }

    #[cfg(feature = "libfabric")]
    #[test]
    fn an_unknown_libfabric_provider_is_named() {
        let cfg = parse(&format!(
            "{BASE}transport = \"libfabric\"\nlisten = \"127.0.0.1:0\"\n\
             provider = \"no-such-provider\"\n"
        ))
        .unwrap();
        let e = open_rdma(&cfg).err().unwrap().to_string();
        assert!(
            e.contains("no-such-provider") && e.contains("fi_info"),
            "{e}"
        );
    }
}
