//! The tcp backend: one-sided writes emulated over one stream per peer.
//!
//! Each peer link is one TCP connection (`TCP_NODELAY`) carrying the frames of the shared
//! stream link (`src/link.rs`): a one-sided write is a `Write` frame that the peer's
//! reader thread applies to the target [`crate::Region`] in arrival order, word-atomically, so
//! the FIFO and guard properties of the contract hold. Writes go out on the caller's
//! thread when the socket is free, and frames queued meanwhile by other threads go out
//! together in one syscall (opportunistic batching).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use spindle_transport_rdma::{tcp::TcpEndpoint, Endpoint, Event, FabricConfig};
//!
//! let a = TcpEndpoint::open(1, "127.0.0.1:0", FabricConfig::default())?;
//! let b = TcpEndpoint::open(2, "127.0.0.1:0", FabricConfig::default())?;
//! let row = b.register_region(7, 64)?;
//! a.connect(2, &b.address())?;
//! let deadline = Instant::now() + Duration::from_secs(30);
//! while a.peers().is_empty() {
//!     assert!(Instant::now() < deadline, "link never came up");
//!     a.wait(Duration::from_millis(50));
//! }
//! a.write_then_release(2, 7, 8, b"payload", 0, 1)?;
//! while row.load_u64(0) != 1 {
//!     assert!(Instant::now() < deadline, "write never landed");
//!     b.wait(Duration::from_millis(50));
//! }
//! assert_eq!(row.to_vec(8, 7)?, b"payload");
//! # Ok::<(), spindle_transport_rdma::Error>(())
//! ```

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::link::{DefaultHooks, Hub};
use crate::{Endpoint, Error, FabricConfig, FailureReason, NodeId, Result};

/// Most inbound connections that may be in their handshake at once; further ones are
/// closed at once (a flood of idle connections cannot pin unbounded threads).
pub const HANDSHAKES_MAX: usize = 64;

/// A tcp endpoint. Create it with [`TcpEndpoint::open`]; use it through [`Endpoint`].
#[derive(Debug)]
pub struct TcpEndpoint {
    hub: Arc<Hub<TcpStream>>,
    addr: SocketAddr,
}

impl TcpEndpoint {
    /// Opens an endpoint for `node` listening on `listen` (for example `"127.0.0.1:0"`;
    /// [`Endpoint::address`] gives the bound address).
    pub fn open(node: NodeId, listen: &str, cfg: FabricConfig) -> Result<Arc<TcpEndpoint>> {
        let listener = TcpListener::bind(listen).map_err(|e| Error::BadAddress {
            addr: listen.to_owned(),
            detail: e.to_string(),
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the bound address", e))?;
        let hub = Hub::new(node, cfg, Arc::new(DefaultHooks))?;
        let accept_hub = Arc::clone(&hub);
        std::thread::Builder::new()
            .name(format!("spindle-accept-{node}"))
            .spawn(move || accept_loop(accept_hub, listener))
            .map_err(|e| Error::io("spawning the accept thread", e))?;
        Ok(Arc::new(TcpEndpoint { hub, addr }))
    }

    /// The bound listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many links the handshake refused so far: peers that did not prove the
    /// domain secret, and second links claiming a live peer's node id.
    pub fn refused_links(&self) -> u64 {
        self.hub.refused_links()
    }
}

fn accept_loop(hub: Arc<Hub<TcpStream>>, listener: TcpListener) {
    let in_handshake = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if hub.is_closed() {
            return;
        }
        let Ok(stream) = stream else {
            // Transient accept errors (EMFILE, ECONNABORTED): back off a little.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if in_handshake.fetch_add(1, Ordering::AcqRel) >= HANDSHAKES_MAX {
            in_handshake.fetch_sub(1, Ordering::AcqRel);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let h = Arc::clone(&hub);
        let counter = Arc::clone(&in_handshake);
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-r{}", hub.node()))
            .spawn(move || {
                // The handshake ends when run_acceptor starts reading frames; counting
                // the whole link's lifetime would cap peers, so count only until then.
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

fn resolve(address: &str) -> Result<SocketAddr> {
    address
        .to_socket_addrs()
        .map_err(|e| Error::BadAddress {
            addr: address.to_owned(),
            detail: e.to_string(),
        })?
        .next()
        .ok_or_else(|| Error::BadAddress {
            addr: address.to_owned(),
            detail: "resolves to no address".into(),
        })
}

impl Endpoint for TcpEndpoint {
    crate::link::forward_to_hub!();

    fn address(&self) -> String {
        self.addr.to_string()
    }

    fn enforces_peer_writes(&self) -> bool {
        true
    }

    fn connect(&self, peer: NodeId, address: &str) -> Result<()> {
        let addr = resolve(address)?;
        let Some(attempt) = self.hub.begin_connect(peer)? else {
            return Ok(());
        };
        let hub = Arc::clone(&self.hub);
        let timeout = Duration::from_millis(hub.config().connect_timeout_ms.max(1));
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-r{}-{}", hub.node(), peer))
            .spawn(move || match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    hub.run_initiator(peer, attempt, stream);
                }
                Err(e) => hub.attempt_failed(
                    peer,
                    attempt,
                    FailureReason::Unreachable(format!("connecting to {addr}: {e}")),
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
        self.hub.wait(timeout)
    }

    fn close(&self) {
        if self.hub.is_closed() {
            return;
        }
        self.hub.close();
        // Wake the accept thread so it sees the hub closed and exits.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(500));
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

/// Decodes `bytes` as a stream of tcp wire frames and returns how many whole frames
/// decoded before the bytes ran out or stopped decoding. Never panics, whatever the
/// bytes: the entry point of the `frame_decode` fuzz target and the property tests.
pub fn decode_frames(bytes: &[u8]) -> usize {
    crate::link::decode_all(bytes)
}
