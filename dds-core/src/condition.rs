//! WaitSets and conditions (DDS 1.4 §2.2.2.1.6–9).
//!
//! A [`WaitSet`] blocks until one of its conditions is true. Every change a condition
//! depends on (a delivery, a status change, a guard set) wakes all waiting WaitSets of
//! the process, which re-check their own conditions: simple, and correct under any
//! interleaving.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

static EPOCH: Mutex<u64> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();
/// WaitSets inside [`WaitSet::wait`] now. [`notify_all`] takes the lock and wakes only
/// when there is one: the delivery path calls it every round that delivered something,
/// and a condition variable's notify is a system call even with nobody waiting.
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Bumped by every [`notify_all`], without a lock: what a spinning [`WaitSet::wait`]
/// watches before it re-checks its conditions.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// How long [`WaitSet::wait`] spins (yielding) for a change before it sleeps, by
/// default, in µs. Environment `SPINDLE_WAITSET_SPIN_US` sets it for the process (read
/// once; 0 sleeps at once). Measured with `dds_perf --pingpong` over shm, 1 KiB, three
/// rounds beside `ddsperf` (docs/benchmarks.md): the round trip's p50 fell from 30–42 µs
/// to 18–25 µs unordered and from 31–45 µs to 23–32 µs atomic; over tcp it made no
/// difference beyond the noise.
pub const WAITSET_SPIN_US_DEFAULT: u64 = 50;

/// The spin of [`WaitSet::wait`] ([`WAITSET_SPIN_US_DEFAULT`], `SPINDLE_WAITSET_SPIN_US`).
fn waitset_spin() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("SPINDLE_WAITSET_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(WAITSET_SPIN_US_DEFAULT);
        Duration::from_micros(us)
    })
}

/// Something a condition depends on changed: wake every waiting WaitSet.
pub(crate) fn notify_all() {
    CHANGES.fetch_add(1, Ordering::Release);
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
pub struct WaitSet {
    conditions: Vec<Arc<dyn Condition>>,
    /// How long `wait` spins before it sleeps ([`WaitSet::set_spin`]).
    spin: Duration,
}

impl Default for WaitSet {
    fn default() -> WaitSet {
        WaitSet {
            conditions: Vec::new(),
            spin: waitset_spin(),
        }
    }
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

    /// Sets how long [`WaitSet::wait`] spins, yielding the CPU and watching for a
    /// change, before it sleeps (an extension to DDS; the default is
    /// `SPINDLE_WAITSET_SPIN_US` or [`WAITSET_SPIN_US_DEFAULT`]). A spin trades CPU for
    /// the wake-up latency of a sleep.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
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

    /// The attached conditions that hold now.
    fn active(&self) -> Vec<Arc<dyn Condition>> {
        self.conditions
            .iter()
            .filter(|c| c.trigger_value())
            .cloned()
            .collect()
    }

    /// Waits until at least one condition holds and returns those that do;
    /// `Timeout` if none does within `timeout`. Spins first for the WaitSet's spin
    /// ([`WaitSet::set_spin`]), then sleeps.
    pub fn wait(&self, timeout: Duration) -> Result<Vec<Arc<dyn Condition>>> {
        let deadline = Instant::now() + timeout;
        let spin = self.spin;
        if !spin.is_zero() {
            // A short spin first: a stream's next round usually comes within
            // microseconds, sooner than a sleep and a wake-up would.
            let until = Instant::now() + spin.min(timeout);
            loop {
                let seen = CHANGES.load(Ordering::Acquire);
                let active = self.active();
                if !active.is_empty() {
                    return Ok(active);
                }
                while CHANGES.load(Ordering::Acquire) == seen && Instant::now() < until {
                    std::thread::yield_now();
                }
                if Instant::now() >= until {
                    break;
                }
            }
        }
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
            let active = self.active();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard set by another thread, at a varying moment, wakes the WaitSet: with a
    /// spin and without one (the sleeping path, whose wake-up `notify_all` may skip only
    /// when nobody waits). A lost wake-up would show as a `Timeout` after 10 s.
    #[test]
    fn a_guard_set_elsewhere_wakes_a_spinning_or_sleeping_waitset() {
        for spin_us in [0, 200] {
            for i in 0..200u64 {
                let g = GuardCondition::new();
                let mut ws = WaitSet::new();
                ws.set_spin(Duration::from_micros(spin_us));
                ws.attach_condition(g.clone());
                let setter = {
                    let g = Arc::clone(&g);
                    std::thread::spawn(move || {
                        // From "before the wait starts" to "well into the sleep".
                        std::thread::sleep(Duration::from_micros(i * 7 % 500));
                        g.set_trigger_value(true);
                    })
                };
                let woke = ws.wait(Duration::from_secs(10)).map(|c| c.len());
                setter.join().unwrap();
                match woke {
                    Ok(n) => assert_eq!(n, 1, "spin {spin_us} µs, round {i}"),
                    Err(e) => panic!("spin {spin_us} µs, round {i}: {e}"),
                }
            }
        }
    }

    #[test]
    fn nothing_set_is_a_timeout() {
        for spin_us in [0, 1_000] {
            let mut ws = WaitSet::new();
            ws.set_spin(Duration::from_micros(spin_us));
            ws.attach_condition(GuardCondition::new());
            match ws.wait(Duration::from_millis(5)) {
                Ok(c) => panic!("spin {spin_us} µs: {} conditions held", c.len()),
                Err(e) => assert!(e.to_string().contains("no condition of 1 triggered"), "{e}"),
            }
        }
    }
}
