//! The participant on threads and the wall clock: its group runs on a predicate thread
//! ([`GroupNode`]) that hands engine output to the delivery path, and a DEADLINE timer
//! thread calls [`handle_timeout`] every tick.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use spindle_group::persist::Persister;
use spindle_group::runtime::GroupNode;
use spindle_group::{Group, Sender, SubgroupId};
use spindle_transport_rdma::Endpoint;

use crate::common::lock;
use crate::delivery::{handle_timeout, DdsApp};
use crate::error::{Error, Result};
use crate::shared::{Driver, Shared, State};

/// Shortest and longest DEADLINE tick.
/// How often the timer thread looks whether anything needs time checked, while nothing
/// does.
const TIMER_IDLE_POLL: Duration = Duration::from_secs(1);
/// How often `leave` looks whether the group let the participant go.
const LEAVE_POLL: Duration = Duration::from_millis(2);

/// A [`Driver`] over a predicate thread. See the module docs.
pub(crate) struct ThreadDriver {
    node: Mutex<Option<GroupNode>>,
}

impl ThreadDriver {
    /// Starts the predicate thread of `group` over `ep`, delivering into `shared`; it
    /// spins `spin_before_park_us` after its last work before parking on the doorbell.
    /// With `persister`, it logs the LoggedStore subgroups ([`crate::logged`]).
    pub(crate) fn start(
        ep: Arc<dyn Endpoint>,
        group: Group,
        shared: &Arc<Shared>,
        spin_before_park_us: u64,
        persister: Option<Persister>,
    ) -> Result<ThreadDriver> {
        let app = DdsApp::new(Arc::clone(shared));
        let node = GroupNode::start_logged(ep, group, app, spin_before_park_us, persister)?;
        start_timer(shared);
        Ok(ThreadDriver {
            node: Mutex::new(Some(node)),
        })
    }
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
            let tick = match weak.upgrade() {
                Some(shared) if !shared.stopped_flag.load(Ordering::Acquire) => {
                    shared.timer_tick_us()
                }
                _ => break,
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

    fn idle(&self, hint: Duration) {
        if hint.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(hint);
        }
    }
}
