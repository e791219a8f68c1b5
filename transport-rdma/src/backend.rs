//! Opening an endpoint of any backend by name, for tools, benchmarks and the
//! cross-process conformance peer.

use std::sync::Arc;

use crate::{Endpoint, Error, FabricConfig, NodeId, Result};

/// Backend names [`open_backend`] accepts, in this build.
pub fn backend_names() -> Vec<&'static str> {
    let mut names = vec!["tcp", "shm"];
    if cfg!(feature = "libfabric") {
        names.extend(["libfabric-tcp", "libfabric-shm"]);
    }
    if cfg!(feature = "verbs") {
        names.push("verbs");
    }
    names
}

/// Opens an endpoint for `node` on the backend called `name`, listening on loopback:
/// `tcp`, `shm`, `libfabric-<provider>` (e.g. `libfabric-tcp`, `libfabric-shm`, with the
/// `libfabric` feature) or `verbs` (with the `verbs` feature). The `sim` backend has no
/// standalone endpoints: create a [`crate::sim::SimWorld`] instead.
pub fn open_backend(name: &str, node: NodeId, cfg: FabricConfig) -> Result<Arc<dyn Endpoint>> {
    cfg.validate()?;
    match name {
        "tcp" => Ok(crate::tcp::TcpEndpoint::open(node, "127.0.0.1:0", cfg)?),
        "shm" => open_shm(node, cfg),
        "sim" => Err(Error::Config(
            "the sim backend has no standalone endpoints: use sim::SimWorld".into(),
        )),
        #[cfg(feature = "libfabric")]
        other if other.starts_with("libfabric-") => {
            let provider = &other["libfabric-".len()..];
            Ok(Arc::new(crate::libfabric::LibfabricEndpoint::open(
                node, provider, cfg,
            )?))
        }
        #[cfg(feature = "verbs")]
        "verbs" => Ok(Arc::new(crate::verbs::VerbsEndpoint::open(node, cfg)?)),
        other => Err(Error::Config(format!(
            "unknown backend {other:?}; this build has: {}",
            backend_names().join(", ")
        ))),
    }
}

/// Opens a shm endpoint in a namespace unique to this process, so independent runs on
/// one host never collide; peers reach it through its address, not the namespace.
fn open_shm(node: NodeId, cfg: FabricConfig) -> Result<Arc<dyn Endpoint>> {
    let namespace = format!("p{}", std::process::id());
    Ok(crate::shm::ShmEndpoint::open(node, &namespace, cfg)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_backend_names_the_known_ones() {
        let err = open_backend("carrier-pigeon", 1, FabricConfig::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("carrier-pigeon") && text.contains("tcp"),
            "{text}"
        );
    }

    #[test]
    fn tcp_opens_on_loopback() {
        let ep = open_backend("tcp", 4, FabricConfig::default()).unwrap();
        assert_eq!(ep.node(), 4);
        assert!(ep.address().starts_with("127.0.0.1:"), "{}", ep.address());
        ep.close();
    }

    #[test]
    fn shm_opens_with_an_address() {
        let ep = open_backend("shm", 5, FabricConfig::default()).unwrap();
        assert_eq!(ep.node(), 5);
        assert!(ep.address().contains('5'), "{}", ep.address());
        ep.close();
    }
}
