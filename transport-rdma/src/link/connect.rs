//! Setting a stream link up: the initiator and acceptor sides of the handshake, driven
//! over a blocking stream, with the decisions themselves in [`super::handshake`].

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::frame::{
    encode_goodbye, encode_hello, encode_refused, encode_region_announce, encode_region_withdraw,
    malformed, FrameReader, Hello, Refusal, RegionEntry, Reply,
};
use super::handshake::{self, Decision, Existing};
use super::outbound::Outbound;
use super::{lock, read, write, Hub, Link, LinkStream, Slot};
use crate::detector::Detector;
use crate::peers::Admit;
use crate::trust::{
    read_framed, AcceptorHandshake, InitiatorHandshake, Opener, Opening,
    HANDSHAKE_MESSAGE_BYTES_MAX,
};
use crate::{Error, Event, FailureReason, NodeId, RegionDesc, RegionId, Result};

/// A link the handshake installed: the link, its reader's buffer (which may already hold
/// frames), and the opener of its records if it is encrypted.
type Installed<S> = (Arc<Link<S>>, FrameReader, Option<Opener>);

/// How often a rejected initiator checks whether the peer's own link has arrived.
const REJECTED_POLL: Duration = Duration::from_millis(5);

impl<S: LinkStream> Hub<S> {
    pub(super) fn new_link(&self, id: u64, stream: S, hello: &Hello) -> Result<Arc<Link<S>>> {
        let now = self.now_ms();
        let fd = stream.as_raw_fd();
        let _ = stream.set_write_timeout_ms(Some(self.cfg.suspect_ceiling()));
        let mut remote = BTreeMap::new();
        for entry in &hello.regions {
            let desc = RegionDesc {
                node: hello.node,
                region: entry.id,
                len: entry.len,
            };
            self.hooks
                .remote_region_announced(hello.node, desc, &entry.tag)
                .map_err(malformed)?;
            remote.insert(entry.id, desc);
        }
        Ok(Arc::new(Link {
            id,
            peer: hello.node,
            incarnation: hello.incarnation,
            stream,
            fd,
            out: Mutex::new(Outbound::default()),
            out_wake: Condvar::new(),
            issue: Mutex::new(()),
            remote_regions: RwLock::new(remote),
            last_heard_ms: AtomicU64::new(now),
            detector: Mutex::new(Detector::new(self.detector_cfg, now.saturating_mul(1000))),
            waiting: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        }))
    }

    /// Runs the initiator side on a freshly dialed stream for `attempt`, then becomes the
    /// link's reader thread. Returns when the link ends.
    pub fn run_initiator(self: Arc<Self>, peer: NodeId, attempt: u64, mut stream: S) {
        let result = (|| -> Result<Option<Installed<S>>> {
            stream
                .set_read_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)))
                .map_err(|e| Error::io("setting a read time-out", e))?;
            let _ = stream
                .set_write_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)));
            // Prove the domain secret first: nothing else goes out before the peer has
            // proved it too.
            let (mut seal, mut opener) = match &self.cfg.domain_secret {
                None => (None, None),
                Some(secret) => {
                    let (hs, m1) = InitiatorHandshake::start(secret, self.node, peer)?;
                    stream
                        .write_all(&m1)
                        .map_err(|e| Error::io("sending handshake message 1", e))?;
                    let m2 = read_framed(
                        &mut stream,
                        HANDSHAKE_MESSAGE_BYTES_MAX,
                        "handshake message 2 (a peer with another domain secret closes here)",
                    )?;
                    let (session, confirm) = hs.finish(&m2)?;
                    stream
                        .write_all(&confirm)
                        .map_err(|e| Error::io("sending the handshake confirmation", e))?;
                    if self.encrypts() {
                        (Some(session.send), Some(Opener::new(session.recv)))
                    } else {
                        (None, None)
                    }
                }
            };
            let hello = {
                let local = read(&self.local);
                handshake::hello(self.node, self.incarnation, peer, &local.regions)
            };
            let mut buf = Vec::new();
            encode_hello(&mut buf, &hello);
            if let Some(seal) = &mut seal {
                let plain = std::mem::take(&mut buf);
                seal.seal(&plain, &mut buf);
            }
            let regions_sent: BTreeSet<RegionId> = hello.regions.iter().map(|e| e.id).collect();
            stream
                .write_all(&buf)
                .map_err(|e| Error::io("sending hello", e))?;
            let mut reader = FrameReader::new();
            let reply = reader.next_owned_hello(&mut Opening {
                inner: &mut stream,
                opener: opener.as_mut(),
            })?;
            let reply = match reply {
                Reply::Hello(reply) => reply,
                Reply::Refused(Some(Refusal { live_id: true, .. })) => {
                    // No link back is coming: the peer is linked to a live node of our
                    // id. Said at once, in words the join's time-out can carry.
                    return Err(Error::io(
                        "handshake",
                        io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!(
                                "node {peer} refused this link: it is linked to a live node \
                                 {} of another incarnation (is another process running with \
                                 node id {}?)",
                                self.node, self.node
                            ),
                        ),
                    ));
                }
                Reply::Refused(why) => {
                    let by = why.map(|w| w.incarnation);
                    // The peer keeps its own connection to us, which replaces our
                    // attempt: only a hello from the incarnation that refused us may take
                    // its place (see `handshake::decide`). Give up on the peer if its
                    // connection never comes.
                    if let Some(Slot::Pending {
                        attempt: a,
                        refused_by,
                    }) = write(&self.peers).get_mut(peer)
                    {
                        if *a == attempt {
                            *refused_by = by;
                        }
                    }
                    let deadline =
                        Instant::now() + Duration::from_millis(self.cfg.connect_timeout_ms);
                    while Instant::now() < deadline && !self.is_closed() {
                        let pending = read(&self.peers).is_current(peer, attempt);
                        if !pending {
                            return Ok(None);
                        }
                        std::thread::sleep(REJECTED_POLL);
                    }
                    return Err(Error::io(
                        "handshake",
                        io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            "peer refused our link and did not link back",
                        ),
                    ));
                }
            };
            handshake::check_hello(self.node, &reply, Some(peer))?;
            stream
                .set_read_timeout_ms(None)
                .map_err(|e| Error::io("clearing the read time-out", e))?;
            let clone = stream
                .try_clone_stream()
                .map_err(|e| Error::io("cloning a stream", e))?;
            // Install, unless another link won meanwhile.
            let local = read(&self.local);
            let mut peers = write(&self.peers);
            let ours = peers.is_current(peer, attempt);
            if !ours {
                drop(peers);
                drop(local);
                let mut bye = Vec::new();
                encode_goodbye(&mut bye);
                if let Some(seal) = &mut seal {
                    let plain = std::mem::take(&mut bye);
                    seal.seal(&plain, &mut bye);
                }
                let _ = stream.write_all(&bye);
                stream.shutdown_both();
                return Ok(None);
            }
            let id = peers.next_link_id();
            let link = self.new_link(id, clone, &reply)?;
            // Regions that changed between our Hello and now.
            {
                let mut out = lock(&link.out);
                out.seal = seal;
                for (id, (region, tag)) in &local.regions {
                    if !regions_sent.contains(id) {
                        let entry = RegionEntry {
                            id: *id,
                            len: region.len(),
                            tag: tag.clone(),
                        };
                        out.append(|p| encode_region_announce(p, &entry));
                    }
                }
                for id in &regions_sent {
                    if !local.regions.contains_key(id) {
                        out.append(|p| encode_region_withdraw(p, *id));
                    }
                }
            }
            peers.insert(peer, Slot::Up(Arc::clone(&link)));
            drop(peers);
            drop(local);
            self.push_control(Event::PeerConnected { peer });
            Ok(Some((link, reader, opener)))
        })();
        match result {
            Ok(Some((link, reader, opener))) => {
                if let Err(e) = self.spawn_writer(&link) {
                    self.fail(&link, FailureReason::ConnectionLost(e.to_string()));
                    return;
                }
                self.try_flush(&link);
                self.reader_loop(&link, reader, stream, opener);
            }
            Ok(None) => {}
            Err(e) => {
                let reason = match e {
                    Error::Malformed { detail, .. } => FailureReason::Malformed(detail),
                    Error::Unauthenticated { detail } => {
                        self.refused(&detail);
                        FailureReason::Unauthenticated(detail)
                    }
                    other => FailureReason::ConnectionLost(other.to_string()),
                };
                stream.shutdown_both();
                self.attempt_failed(peer, attempt, reason);
            }
        }
    }

    /// Runs the acceptor side on an accepted stream, then becomes the link's reader
    /// thread. Streams whose first bytes are not a valid `Hello` for this node are
    /// dropped (no peer id is known, so no event). Returns when the link ends.
    #[allow(dead_code)] // tcp uses run_acceptor_then; shm may use either
    pub fn run_acceptor(self: Arc<Self>, stream: S) {
        self.run_acceptor_then(stream, || {});
    }

    /// As [`Hub::run_acceptor`], calling `handshake_done` once the handshake is over
    /// (accepted, rejected or failed), before the link's reader loop starts.
    pub fn run_acceptor_then(self: Arc<Self>, mut stream: S, handshake_done: impl FnOnce()) {
        if self.is_closed() {
            handshake_done();
            return;
        }
        let result = (|| -> Result<Option<Installed<S>>> {
            stream
                .set_read_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)))
                .map_err(|e| Error::io("setting a read time-out", e))?;
            let _ = stream
                .set_write_timeout_ms(Some(Duration::from_millis(self.cfg.connect_timeout_ms)));
            // With a domain secret, the dialer proves it before we read anything else or
            // say anything about ourselves: a peer that fails is refused here, before the
            // peer table, the regions or the membership protocol ever see it.
            let (mut seal, mut opener, proven) = match &self.cfg.domain_secret {
                None => (None, None, None),
                Some(secret) => {
                    let m1 = read_framed(
                        &mut stream,
                        HANDSHAKE_MESSAGE_BYTES_MAX,
                        "handshake message 1",
                    )?;
                    let (acc, peer, m2) = AcceptorHandshake::respond(secret, self.node, &m1)?;
                    stream
                        .write_all(&m2)
                        .map_err(|e| Error::io("sending handshake message 2", e))?;
                    let confirm = read_framed(
                        &mut stream,
                        HANDSHAKE_MESSAGE_BYTES_MAX,
                        "the handshake confirmation",
                    )?;
                    let session = acc.confirm(&confirm)?;
                    if self.encrypts() {
                        (
                            Some(session.send),
                            Some(Opener::new(session.recv)),
                            Some(peer),
                        )
                    } else {
                        (None, None, Some(peer))
                    }
                }
            };
            let mut reader = FrameReader::new();
            let Reply::Hello(hello) = reader.next_owned_hello(&mut Opening {
                inner: &mut stream,
                opener: opener.as_mut(),
            })?
            else {
                return Ok(None);
            };
            // The Hello must come from the node the handshake authenticated.
            handshake::check_hello(self.node, &hello, proven)?;
            stream
                .set_read_timeout_ms(None)
                .map_err(|e| Error::io("clearing the read time-out", e))?;
            let peer = hello.node;
            let stale_deadline =
                Instant::now() + Duration::from_millis(self.cfg.connect_timeout_ms / 2);
            let (local, mut peers, decision) = loop {
                let local = read(&self.local);
                let peers = write(&self.peers);
                let existing = match peers.get(peer) {
                    None => Existing::None,
                    Some(Slot::Failed(_)) => Existing::Failed,
                    Some(Slot::Pending { refused_by, .. }) => Existing::Pending {
                        refused_by: *refused_by,
                    },
                    Some(Slot::Up(link)) => Existing::Up {
                        incarnation: link.incarnation,
                    },
                };
                let room = peers.room_for(peer);
                // Asked again a moment later (`Decision::Later`): a live link to the same
                // incarnation is either a duplicate from a simultaneous connect (rejected
                // below) or a link the peer already closed and whose Goodbye or end of
                // stream we have not processed yet (the peer reconnecting right after a
                // disconnect): give it a moment to fail. So is a live link to another
                // incarnation: a restarted peer's old link fails as soon as its dead
                // process's socket closes, while a second process claiming a live
                // member's id is refused, never displacing it. And a hello that would
                // take the place of our own dial to the peer waits for the dial's answer,
                // which says which incarnation the peer is.
                let decision = match handshake::decide(self.node, &hello, existing, room) {
                    Decision::Later(_) if Instant::now() < stale_deadline && !self.is_closed() => {
                        None
                    }
                    d => Some(d.admit()),
                };
                if let Some(decision) = decision {
                    break (local, peers, decision);
                }
                drop(peers);
                drop(local);
                std::thread::sleep(REJECTED_POLL);
            };
            if !decision.accepts() {
                drop(peers);
                drop(local);
                if decision == Admit::RejectLiveId {
                    self.refused(&format!(
                        "a link claims node {peer} as incarnation {:#x}, not the one that \
                         is linked or that answered our dial; that one stays",
                        hello.incarnation
                    ));
                }
                let mut bye = Vec::new();
                encode_refused(
                    &mut bye,
                    Refusal {
                        incarnation: self.incarnation,
                        live_id: decision == Admit::RejectLiveId,
                    },
                );
                if let Some(seal) = &mut seal {
                    let plain = std::mem::take(&mut bye);
                    seal.seal(&plain, &mut bye);
                }
                let _ = stream.write_all(&bye);
                stream.shutdown_both();
                return Ok(None);
            }
            let id = peers.next_link_id();
            let link = self.new_link(
                id,
                stream
                    .try_clone_stream()
                    .map_err(|e| Error::io("cloning a stream", e))?,
                &hello,
            )?;
            // The reply Hello is the link's first frame: later announcements follow it.
            {
                let reply = handshake::hello(self.node, self.incarnation, peer, &local.regions);
                let mut out = lock(&link.out);
                out.seal = seal;
                out.append(|p| encode_hello(p, &reply));
            }
            peers.insert(peer, Slot::Up(Arc::clone(&link)));
            drop(peers);
            drop(local);
            self.push_control(Event::PeerConnected { peer });
            Ok(Some((link, reader, opener)))
        })();
        match result {
            Ok(Some((link, reader, opener))) => {
                handshake_done();
                if let Err(e) = self.spawn_writer(&link) {
                    self.fail(&link, FailureReason::ConnectionLost(e.to_string()));
                    return;
                }
                self.try_flush(&link);
                self.reader_loop(&link, reader, stream, opener);
            }
            Ok(None) => handshake_done(),
            Err(e) => {
                handshake_done();
                if matches!(e, Error::Unauthenticated { .. }) {
                    self.refused(&e);
                } else {
                    tracing::debug!(node = self.node, error = %e, "dropping an inbound stream");
                }
                stream.shutdown_both();
            }
        }
    }
}
