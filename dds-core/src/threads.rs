//! The participant on threads and the wall clock: its group runs on a predicate thread
//! ([`GroupNode`]) that hands engine output to the delivery path, and a DEADLINE timer
//! thread calls [`handle_timeout`] every tick.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use spindle_group::persist::Persister;
use spindle_group::runtime::{GroupNode, Spin};
use spindle_group::{Group, Sender, SubgroupId};
use spindle_transport_rdma::{Endpoint, NodeId};

use crate::common::lock;
use crate::config::ParticipantConfig;
use crate::delivery::{handle_timeout, DdsApp};
use crate::error::{Error, Result};
use crate::shared::{Driver, Shared, State};

/// Shortest and longest DEADLINE tick.
/// How often the timer thread looks whether anything needs time checked, while nothing
/// does.
const TIMER_IDLE_POLL: Duration = Duration::from_secs(1);
/// How often `leave` looks whether the group let the participant go.
const LEAVE_POLL: Duration = Duration::from_millis(2);

/// Opens a fresh endpoint for the participant (the factory's, from its configuration):
/// what a participant that rejoins runs on.
pub(crate) type Reopen = Box<dyn Fn() -> Result<Arc<dyn Endpoint>> + Send + Sync>;

/// How many times a rejoin tries to open its endpoint again while the old one's address
/// is still being released, [`REOPEN_PAUSE`] apart.
const REOPEN_TRIES_MAX: u32 = 50;
/// The pause between two tries to reopen the endpoint.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

/// A [`Driver`] over a predicate thread. See the module docs.
pub(crate) struct ThreadDriver {
    node: Mutex<Option<GroupNode>>,
    /// The endpoint the group runs on (replaced when the participant rejoins).
    ep: Mutex<Arc<dyn Endpoint>>,
    /// How to open a fresh endpoint to rejoin on (`None`: the caller brought its own
    /// endpoint, and the participant cannot rejoin).
    reopen: Option<Reopen>,
    spin: Spin,
}

impl ThreadDriver {
    /// Starts the predicate thread of `group` over `ep`, delivering into `shared`; it
    /// spins as `spin` says (idle before parking on the doorbell, at work before a yield).
    /// With `persister`, it logs the LoggedStore subgroups ([`crate::logged`]).
    pub(crate) fn start(
        ep: Arc<dyn Endpoint>,
        group: Group,
        shared: &Arc<Shared>,
        spin: Spin,
        persister: Option<Persister>,
        reopen: Option<Reopen>,
    ) -> Result<ThreadDriver> {
        let app = DdsApp::new(Arc::clone(shared));
        let node = GroupNode::start_logged(Arc::clone(&ep), group, app, spin, persister)
            .map_err(crate::config::predicate_setting_error)?;
        start_timer(shared);
        Ok(ThreadDriver {
            node: Mutex::new(Some(node)),
            ep: Mutex::new(ep),
            reopen,
            spin,
        })
    }

    /// Opens the endpoint again, retrying while the old one's address is released.
    fn reopen(&self) -> Result<Arc<dyn Endpoint>> {
        let Some(open) = &self.reopen else {
            return Err(Error::Unsupported(
                "rejoining needs a participant the factory created (it reopens the endpoint)"
                    .into(),
            ));
        };
        let mut tries = 0;
        loop {
            match open() {
                Ok(ep) => return Ok(ep),
                Err(e) if tries + 1 >= REOPEN_TRIES_MAX => return Err(e),
                Err(_) => {
                    tries += 1;
                    std::thread::sleep(REOPEN_PAUSE);
                }
            }
        }
    }
}

/// The group a participant that lost its place joins again through: every member it
/// knew (the last view's addresses) and its configured contacts.
fn rejoining_group(
    config: &ParticipantConfig,
    ep: &dyn Endpoint,
    known: BTreeMap<NodeId, String>,
) -> Result<Group> {
    let me = config.node_id;
    let mut contacts: BTreeMap<NodeId, String> =
        known.into_iter().filter(|(n, _)| *n != me).collect();
    for c in config.contacts.iter().filter(|c| c.node != me) {
        contacts.entry(c.node).or_insert_with(|| c.address.clone());
    }
    if contacts.is_empty() {
        return Err(Error::PreconditionNotMet(
            "no member to rejoin through: the last view had no other member and the \
             configuration lists no contacts"
                .into(),
        ));
    }
    let gcfg = crate::declare::dds_group_config(config.domain_id);
    Ok(Group::join(ep, contacts.into_iter().collect(), gcfg)?)
}

/// The participant's timer thread: every [`Shared::timer_tick_us`] (which DEADLINE
/// periods and LIVELINESS leases set), the passing of time is handed to
/// [`handle_timeout`]; while nothing needs it, the thread only looks once per
/// [`TIMER_IDLE_POLL`]. It ends with the participant.
fn start_timer(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name(format!("spindle-timer-{}", shared.me))
        .spawn(move || loop {
            // A stopped participant (it may rejoin) needs no time checks meanwhile.
            let tick = match weak.upgrade() {
                Some(shared) if !shared.stopped_flag.load(Ordering::Acquire) => {
                    shared.timer_tick_us()
                }
                Some(_) => None,
                None => break,
            };
            std::thread::sleep(tick.map_or(TIMER_IDLE_POLL, Duration::from_micros));
            let Some(shared) = weak.upgrade() else { break };
            if tick.is_some() {
                handle_timeout(&shared, shared.clock.now_us());
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "the timer thread (DEADLINE, LIVELINESS) did not start");
    }
}

impl Driver for ThreadDriver {
    fn sender(&self, subgroup: SubgroupId) -> spindle_group::Result<Sender> {
        match &*lock(&self.node) {
            Some(n) => n.sender(subgroup),
            None => Err(spindle_group::Error::Stopped),
        }
    }

    fn declare(&self, declared: Vec<u8>) -> Result<()> {
        match &*lock(&self.node) {
            Some(n) => Ok(n.declare(declared)?),
            None => Err(Error::AlreadyDeleted("the participant was deleted".into())),
        }
    }

    fn leave(&self, timeout: Duration) {
        let node = lock(&self.node).take();
        if let Some(n) = node {
            n.leave();
            let deadline = std::time::Instant::now() + timeout;
            while !n.is_done() && std::time::Instant::now() < deadline {
                std::thread::sleep(LEAVE_POLL);
            }
            n.stop();
        }
    }

    fn stop(&self) {
        if let Some(n) = lock(&self.node).take() {
            n.stop();
        }
    }

    fn rejoin(&self, shared: &Arc<Shared>, config: &ParticipantConfig) -> Result<()> {
        // The old node's thread has ended (it stopped); its links are failed. Close the
        // endpoint so its address is free, and open it again as a new incarnation.
        let known = match lock(&self.node).take() {
            Some(old) => {
                let known = old.addresses();
                old.stop();
                known
            }
            None => BTreeMap::new(),
        };
        lock(&self.ep).close();
        let ep = self.reopen()?;
        let group = rejoining_group(config, &*ep, known)?;
        shared.reset_for_rejoin();
        let app = DdsApp::new(Arc::clone(shared));
        let node = GroupNode::start_logged(Arc::clone(&ep), group, app, self.spin, None)?;
        *lock(&self.node) = Some(node);
        *lock(&self.ep) = ep;
        Ok(())
    }

    fn wait_changed<'a>(
        &self,
        shared: &'a Shared,
        st: MutexGuard<'a, State>,
        max: Duration,
    ) -> MutexGuard<'a, State> {
        shared
            .view_changed
            .wait_timeout(st, max)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    fn group_counters(&self) -> spindle_group::NodeCounters {
        lock(&self.node)
            .as_ref()
            .map(GroupNode::counters)
            .unwrap_or_default()
    }

    fn join_failures(&self) -> Vec<(NodeId, String)> {
        lock(&self.node)
            .as_ref()
            .map(GroupNode::join_failures)
            .unwrap_or_default()
    }

    fn stop_error(&self) -> Option<spindle_group::Error> {
        // Not gated on `is_done`: the predicate thread records why before it hands the
        // stop to the participant, and marks the node done only after, so a waiter woken
        // by the stop may look in between.
        lock(&self.node)
            .as_ref()
            .map(GroupNode::stop_error)
            .filter(|e| !matches!(e, spindle_group::Error::Stopped))
    }

    fn idle(&self, hint: Duration) {
        if hint.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(hint);
        }
    }

    fn wait_room(&self, sender: &Sender, len: usize, max: Duration) {
        sender.wait_for_room(len, max);
    }
}
