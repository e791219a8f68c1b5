//! A thin runtime for [`DareNode`] over a real fabric (tcp, shm, …): one thread per
//! member steps the core, posts its writes and sends, and hands deliveries to an upcall —
//! the counterpart of [`crate::runtime::Node`] for a DARE group.
//!
//! Membership is fixed for the life of a [`DareMember`]; a group whose membership changes
//! is rebuilt by the caller (the view change of the engine, not DARE's own
//! reconfiguration).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spindle_transport_rdma::{Endpoint, Event, NodeId, Region, RegionId};

use super::layout::DARE_CTRL_REGION_ID;
use super::{DareConfig, DareDelivery, DareEvent, DareNode, DareOut, DARE_IMM};
use crate::sched::{spawn_placed, ThreadSched};
use crate::{Error, Result};

/// Rounds without work before the thread parks on the endpoint's doorbell.
const IDLE_SPINS_MAX: u32 = 64;
/// How long one park lasts at most (the heartbeat and election clocks run between).
const PARK_US: u64 = 200;
/// Events ([`DareEvent`]) kept for [`DareMember::poll_event`]; older ones are dropped.
pub const DARE_RUNTIME_EVENTS_MAX: usize = 1024;

/// Link failures kept for [`DareMember::describe`].
const DARE_RUNTIME_FAILURES_MAX: usize = 64;

/// Hands one fabric event to the core (a link failure also into `failures`).
fn take_event(c: &mut DareNode, me: NodeId, e: Event, failures: &Mutex<Vec<String>>) {
    match e {
        Event::PeerFailed { peer, reason } => {
            let mut f = lock(failures);
            if f.len() < DARE_RUNTIME_FAILURES_MAX {
                f.push(format!("node {peer}: {reason}"));
            }
            c.handle_peer_failed(peer)
        }
        Event::RegionAnnounced { peer, region } => c.handle_region_announced(peer, region.region),
        Event::Recv { peer, imm, data } if imm == DARE_IMM => {
            if let Err(e) = c.handle_recv(peer, &data) {
                tracing::warn!(node = me, %e, "dare: dropped");
            }
        }
        _ => {}
    }
}

/// Posts one output of the core.
fn post(ep: &dyn Endpoint, out: &DareOut) -> spindle_transport_rdma::Result<()> {
    post_with(ep, out, DARE_IMM)
}

/// Posts one output of a DARE core on `ep`, its two-sided sends with immediate `imm`.
pub(crate) fn post_with(
    ep: &dyn Endpoint,
    out: &DareOut,
    imm: u32,
) -> spindle_transport_rdma::Result<()> {
    match out {
        DareOut::Write {
            peer,
            region,
            offset,
            bytes,
            guard: None,
        } => ep.write(*peer, *region, *offset, bytes),
        DareOut::Write {
            peer,
            region,
            offset,
            bytes,
            guard: Some((at, value)),
        } => ep.write_then_release(*peer, *region, *offset, bytes, *at, *value),
        DareOut::Send { peer, bytes } => ep.send(*peer, imm, bytes),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One member of a DARE group over a real fabric. See the module docs.
pub struct DareMember {
    core: Arc<Mutex<DareNode>>,
    events: Arc<Mutex<std::collections::VecDeque<DareEvent>>>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    ep: Arc<dyn Endpoint>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DareMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DareMember")
            .field("node", &self.ep.node())
            .finish()
    }
}

impl DareMember {
    /// Registers the control region, links to `peers` (id → address; every other
    /// member), waits up to `setup_timeout` until every peer's control region is known,
    /// and starts the member's thread. `upcall` runs on that thread with each delivered
    /// message, in log order.
    pub fn start(
        ep: Arc<dyn Endpoint>,
        members: Vec<NodeId>,
        peers: &BTreeMap<NodeId, String>,
        config: DareConfig,
        setup_timeout: Duration,
        upcall: impl FnMut(&DareDelivery) + Send + 'static,
    ) -> Result<DareMember> {
        let placed = ThreadSched::default();
        Self::start_placed(ep, members, peers, config, setup_timeout, placed, upcall)
    }

    /// [`DareMember::start`] with the member's thread placed by `sched` (its CPUs and
    /// scheduling class, as a group's predicate thread is: [`crate::sched`]), applied as
    /// the thread starts; a placement the system refuses is the error, and no thread runs.
    pub fn start_placed(
        ep: Arc<dyn Endpoint>,
        members: Vec<NodeId>,
        peers: &BTreeMap<NodeId, String>,
        config: DareConfig,
        setup_timeout: Duration,
        sched: ThreadSched,
        mut upcall: impl FnMut(&DareDelivery) + Send + 'static,
    ) -> Result<DareMember> {
        let me = ep.node();
        let ctrl = ep.register_region(
            DARE_CTRL_REGION_ID,
            DareNode::ctrl_region_bytes(members.len()),
        )?;
        let core = DareNode::new(me, members.clone(), config, ctrl, u64::from(me))?;
        let others: Vec<NodeId> = members.iter().copied().filter(|&m| m != me).collect();
        for p in &others {
            let address = peers
                .get(p)
                .ok_or_else(|| Error::Config(format!("dare: no address for member {p}")))?;
            ep.connect(*p, address)?;
        }
        let deadline = Instant::now() + setup_timeout;
        while !others
            .iter()
            .all(|p| ep.remote_region(*p, DARE_CTRL_REGION_ID).is_some())
        {
            while let Some(e) = ep.poll_event() {
                if let Event::PeerFailed { peer, .. } = e {
                    if let Some(a) = peers.get(&peer) {
                        let _ = ep.connect(peer, a);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Config(format!(
                    "dare: node {me}: set-up timed out; peers linked: {:?} of {others:?}",
                    ep.peers()
                )));
            }
            ep.wait(Duration::from_millis(5));
        }
        let core = Arc::new(Mutex::new(core));
        let events: Arc<Mutex<std::collections::VecDeque<DareEvent>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let thread = {
            let (core, events, stop, ep, failures) = (
                Arc::clone(&core),
                Arc::clone(&events),
                Arc::clone(&stop),
                Arc::clone(&ep),
                Arc::clone(&failures),
            );
            spawn_placed(format!("spindle-dare-{me}"), sched, move || {
                let start = Instant::now();
                let mut log_regions: BTreeMap<RegionId, Region> = BTreeMap::new();
                let mut idle = 0u32;
                let mut deliveries = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let mut work = false;
                    {
                        let mut c = lock(&core);
                        while let Some(e) = ep.poll_event() {
                            work = true;
                            take_event(&mut c, me, e, &failures);
                        }
                        // A region announced before the link was up on this side
                        // came without an event: ask the fabric for the ones awaited.
                        for (peer, region) in c.log_regions_awaited() {
                            if ep.remote_region(peer, region).is_some() {
                                c.handle_region_announced(peer, region);
                            }
                        }
                        let now_us = start.elapsed().as_micros() as u64;
                        let mut rekey =
                            |old: Option<RegionId>, new: RegionId, len: usize| -> Result<Region> {
                                if let Some(old) = old {
                                    ep.deregister_region(old)?;
                                    log_regions.remove(&old);
                                }
                                let r = ep.register_region(new, len)?;
                                log_regions.insert(new, r.clone());
                                Ok(r)
                            };
                        match c.step(now_us, &mut rekey) {
                            Ok(w) => work |= w,
                            Err(e) => {
                                tracing::error!(node = me, %e, "dare: member stopped");
                                break;
                            }
                        }
                        while let Some(out) = c.poll_out() {
                            work = true;
                            // A full outbound queue is backpressure: wait for it to
                            // drain and post again (a dropped entry would leave a hole
                            // under a later `tail`). Other refusals (a failed link, a
                            // region withdrawn by a member that moved to a later term)
                            // are the protocol's business: the core learns of them by
                            // failure events and terms.
                            while let Err(spindle_transport_rdma::Error::QueueFull { .. }) =
                                post(&*ep, &out)
                            {
                                if stop.load(Ordering::Acquire) {
                                    break;
                                }
                                // Keep taking input meanwhile: a peer blocked on its
                                // own full queue to us must not wait on us in turn.
                                while let Some(e) = ep.poll_event() {
                                    take_event(&mut c, me, e, &failures);
                                }
                                ep.wait(Duration::from_micros(PARK_US));
                            }
                        }
                        while let Some(d) = c.poll_delivery() {
                            deliveries.push(d);
                        }
                        let mut q = lock(&events);
                        while let Some(e) = c.poll_event() {
                            q.push_back(e);
                            if q.len() > DARE_RUNTIME_EVENTS_MAX {
                                q.pop_front();
                            }
                        }
                    }
                    // The upcall runs without the core's lock (it may send).
                    for d in deliveries.drain(..) {
                        work = true;
                        upcall(&d);
                    }
                    if work {
                        idle = 0;
                        continue;
                    }
                    idle += 1;
                    if idle < IDLE_SPINS_MAX {
                        std::thread::yield_now();
                    } else {
                        ep.wait(Duration::from_micros(PARK_US));
                    }
                }
            })?
        };
        Ok(DareMember {
            core,
            events,
            failures,
            stop,
            ep,
            thread: Some(thread),
        })
    }

    /// Hands a message to the group; its `sender_seq`. [`Error::DareWindowFull`] while
    /// [`DareConfig::sender_window`] messages are undelivered here.
    pub fn try_send(&self, payload: &[u8]) -> Result<u64> {
        let seq = lock(&self.core).send(payload)?;
        self.ep.wake();
        Ok(seq)
    }

    /// The leader of the current term, as this member knows it, and the term.
    pub fn leader(&self) -> (Option<NodeId>, u64) {
        let c = lock(&self.core);
        (c.leader(), c.term())
    }

    /// The next event (elections, commits as leader, members left out), if any.
    pub fn poll_event(&self) -> Option<DareEvent> {
        lock(&self.events).pop_front()
    }

    /// One line of the member's state, for a diagnosis ([`DareNode::describe`]), and the
    /// link failures the fabric reported to it, with their reasons.
    pub fn describe(&self) -> String {
        let core = lock(&self.core).describe();
        format!("{core} | link failures {:?}", lock(&self.failures))
    }

    /// Why the member stopped, if it did.
    pub fn stopped(&self) -> Option<String> {
        lock(&self.core).stopped().map(str::to_string)
    }

    /// Stops the thread (the endpoint stays open).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.ep.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DareMember {
    fn drop(&mut self) {
        self.halt();
    }
}
