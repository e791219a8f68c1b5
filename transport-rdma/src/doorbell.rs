//! The doorbell a predicate thread parks on when its regions are quiet.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// What a backend does on every ring instead of the bell's own state
/// ([`Doorbell::take_over`]).
type OnRing = Box<dyn Fn() + Send + Sync>;

/// A wake-up signal that is cheap to ring when nobody sleeps (one atomic swap) and never
/// loses a ring: a ring that happens before [`Doorbell::wait`] makes that wait return at
/// once. Backends ring it when a peer's write lands in a local region, when an event is
/// queued and when an outbound queue drains. A backend that parks its owner elsewhere
/// (shm parks on a futex in shared memory) takes every ring over with
/// [`Doorbell::take_over`]: the bell's own state, which nobody would wait on, is then
/// left alone (one atomic swap less per ring, on every commit of a sender).
#[derive(Default)]
pub struct Doorbell {
    rung: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    on_ring: OnceLock<OnRing>,
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell")
            .field("rung", &self.rung.load(Ordering::Relaxed))
            .field("sleepers", &self.sleepers.load(Ordering::Relaxed))
            .field("on_ring", &self.on_ring.get().is_some())
            .finish()
    }
}

impl Doorbell {
    /// A doorbell that has not been rung.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rings the bell, waking every thread parked in [`Doorbell::wait`]; on a bell taken
    /// over ([`Doorbell::take_over`]), runs the backend's ring instead.
    pub fn ring(&self) {
        if let Some(f) = self.on_ring.get() {
            f();
            return;
        }
        if !self.rung.swap(true, Ordering::AcqRel) && self.sleepers.load(Ordering::Acquire) > 0 {
            // Taking the lock orders this notify after a sleeper's check of `rung`.
            let _guard = self
                .lock
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            self.wake.notify_all();
        }
    }

    /// Makes every later [`Doorbell::ring`] call `f` instead of setting the bell (once
    /// set, for good), for a backend whose owner parks elsewhere: [`Doorbell::wait`] on
    /// such a bell only times out. False if it was taken over already.
    pub fn take_over(&self, f: impl Fn() + Send + Sync + 'static) -> bool {
        self.on_ring.set(Box::new(f)).is_ok()
    }

    /// Parks until the bell rings or `timeout` passes; returns true if it rang. Clears the
    /// ring, so the next wait parks again.
    pub fn wait(&self, timeout: Duration) -> bool {
        if self.rung.swap(false, Ordering::AcqRel) {
            return true;
        }
        self.sleepers.fetch_add(1, Ordering::AcqRel);
        let guard = self
            .lock
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let (_guard, _) = self
            .wake
            .wait_timeout_while(guard, timeout, |_| !self.rung.load(Ordering::Acquire))
            .unwrap_or_else(|poison| poison.into_inner());
        self.sleepers.fetch_sub(1, Ordering::AcqRel);
        self.rung.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn ring_before_wait_is_not_lost() {
        let bell = Doorbell::new();
        bell.ring();
        assert!(bell.wait(Duration::from_secs(5)));
        assert!(!bell.wait(Duration::from_millis(1)));
    }

    #[test]
    fn a_bell_taken_over_hands_every_ring_to_its_backend() {
        let bell = Doorbell::new();
        let rings = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&rings);
        assert!(bell.take_over(move || {
            r.fetch_add(1, Ordering::AcqRel);
        }));
        assert!(!bell.take_over(|| {}));
        bell.ring();
        bell.ring();
        assert_eq!(rings.load(Ordering::Acquire), 2);
        // The bell's own state is left alone: its owner waits elsewhere.
        assert!(!bell.wait(Duration::from_millis(1)));
    }

    #[test]
    fn ring_wakes_a_parked_thread() {
        let bell = Arc::new(Doorbell::new());
        let sleeper = {
            let bell = Arc::clone(&bell);
            std::thread::spawn(move || bell.wait(Duration::from_secs(60)))
        };
        while bell.sleepers.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        bell.ring();
        assert!(sleeper.join().unwrap());
    }
}
