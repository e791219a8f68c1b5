//! WaitSets and conditions (DDS 1.4 §2.2.2.1.6–9).
//!
//! A [`WaitSet`] blocks until one of its conditions is true. Every change a condition
//! depends on (a delivery, a status change, a guard set) wakes all waiting WaitSets of
//! the process, which re-check their own conditions: simple, and correct under any
//! interleaving.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

static EPOCH: Mutex<u64> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();
/// WaitSets inside [`WaitSet::wait`] now. [`notify_all`] takes the lock and wakes only
/// when there is one: the delivery path calls it every round that delivered something,
/// and a condition variable's notify is a system call even with nobody waiting.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Something a condition depends on changed: wake every waiting WaitSet.
pub(crate) fn notify_all() {
    // Dekker with `WaitSet::wait`: the change a condition reads was made before this
    // fence, a waiter counts itself before its own fence and then checks its conditions,
    // so either it sees the change or this load sees it waiting.
    fence(Ordering::SeqCst);
    if WAITING.load(Ordering::SeqCst) == 0 {
        return;
    }
    let mut e = EPOCH.lock().unwrap_or_else(|p| p.into_inner());
    *e = e.wrapping_add(1);
    CHANGED.notify_all();
}

/// A condition a [`WaitSet`] can wait for.
pub trait Condition: Send + Sync {
    /// True while the condition holds.
    fn trigger_value(&self) -> bool;
}

/// A condition the application sets by hand (DDS `GuardCondition`).
#[derive(Debug, Default)]
pub struct GuardCondition {
    value: AtomicBool,
}

impl GuardCondition {
    /// A guard that is not triggered.
    pub fn new() -> Arc<GuardCondition> {
        Arc::new(GuardCondition::default())
    }
    /// Sets the trigger value and wakes waiting WaitSets.
    pub fn set_trigger_value(&self, v: bool) {
        self.value.store(v, Ordering::Release);
        notify_all();
    }
}

impl Condition for GuardCondition {
    fn trigger_value(&self) -> bool {
        self.value.load(Ordering::Acquire)
    }
}

/// Blocks until conditions hold (DDS `WaitSet`).
#[derive(Default)]
pub struct WaitSet {
    conditions: Vec<Arc<dyn Condition>>,
}

impl std::fmt::Debug for WaitSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSet")
            .field("conditions", &self.conditions.len())
            .finish()
    }
}

impl WaitSet {
    /// An empty WaitSet.
    pub fn new() -> WaitSet {
        WaitSet::default()
    }

    /// Adds a condition.
    pub fn attach_condition(&mut self, c: Arc<dyn Condition>) {
        self.conditions.push(c);
    }

    /// Removes a condition; `PreconditionNotMet` if it is not attached.
    pub fn detach_condition(&mut self, c: &Arc<dyn Condition>) -> Result<()> {
        let before = self.conditions.len();
        self.conditions.retain(|x| !Arc::ptr_eq(x, c));
        if before == self.conditions.len() {
            return Err(Error::PreconditionNotMet(
                "the condition is not attached".into(),
            ));
        }
        Ok(())
    }

    /// The attached conditions.
    pub fn conditions(&self) -> &[Arc<dyn Condition>] {
        &self.conditions
    }

    /// Waits until at least one condition holds and returns those that do;
    /// `Timeout` if none does within `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<Vec<Arc<dyn Condition>>> {
        let deadline = Instant::now() + timeout;
        /// Counts this wait in [`WAITING`] until it returns, however it returns.
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                WAITING.fetch_sub(1, Ordering::SeqCst);
            }
        }
        WAITING.fetch_add(1, Ordering::SeqCst);
        let _counted = Counted;
        // Pairs with the fence in `notify_all` (see there).
        fence(Ordering::SeqCst);
        let mut epoch = EPOCH.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let seen = *epoch;
            drop(epoch);
            let active: Vec<_> = self
                .conditions
                .iter()
                .filter(|c| c.trigger_value())
                .cloned()
                .collect();
            if !active.is_empty() {
                return Ok(active);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout(format!(
                    "no condition of {} triggered",
                    self.conditions.len()
                )));
            }
            epoch = EPOCH.lock().unwrap_or_else(|p| p.into_inner());
            while *epoch == seen {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let (g, _) = CHANGED
                    .wait_timeout(epoch, left)
                    .unwrap_or_else(|p| p.into_inner());
                epoch = g;
            }
        }
    }
}
