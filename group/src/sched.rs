//! Where a predicate thread runs and at what priority: [`ThreadSched`].
//!
//! On a machine whose cores the application shares with the engine, a predicate thread
//! that has work waits for the scheduler like any other thread: beside a bulk stream that
//! keeps every core busy, a ping's round trip waits for each process's predicate thread
//! to get a core back (docs/benchmarks.md, "The loaded ping's floor"). Two settings let
//! the application say what the engine's thread is worth to it, as Cyclone DDS's
//! `Threads/Thread/Scheduling` and avionics deployments do:
//!
//! * [`ThreadSched::cpus`]: the CPUs the thread may run on (`sched_setaffinity`), for
//!   instance a core the application keeps for it;
//! * [`ThreadSched::fifo_priority`]: 1..=99 puts the thread in the real-time class
//!   `SCHED_FIFO` at that priority, so it runs as soon as it has work, ahead of every
//!   time-shared thread. That needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` at least as high;
//!   without it the runtime refuses to start and says so.
//!
//! A real-time thread that spins keeps its core from every time-shared thread: with
//! `fifo_priority` on a core the application's threads also need, set the spin before
//! parking to 0 (measured in docs/benchmarks.md, "The predicate thread in the real-time
//! class": with it the bulk stream beside a paced ping kept a third of its rate,
//! with the default spin it starved).
//!
//! ```
//! use spindle_group::sched::ThreadSched;
//!
//! let sched = ThreadSched::default().with_cpus(&[0])?.with_fifo_priority(10)?;
//! assert_eq!(sched.cpus(), vec![0]);
//! assert_eq!(sched.fifo_priority(), 10);
//! assert!(ThreadSched::default().with_cpus(&[5000]).is_err(), "past THREAD_CPUS_MAX");
//! assert!(ThreadSched::default().with_fifo_priority(100).is_err(), "past 99");
//! # Ok::<(), spindle_group::Error>(())
//! ```

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use thread_priority::{
    set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy, ThreadPriority,
    ThreadPriorityValue, ThreadSchedulePolicy,
};

use crate::error::{Error, Result};

/// CPUs a [`ThreadSched`] can name: 0 to this, exclusive (the C library's `CPU_SETSIZE`,
/// 1024 on Linux).
pub const THREAD_CPUS_MAX: usize = CpuSet::count();
/// The highest `SCHED_FIFO` priority (Linux's range is 1..=99).
pub const FIFO_PRIORITY_MAX: u8 = 99;

/// Where a predicate thread runs and at what priority (see the module docs). The default
/// changes nothing: the thread inherits the process's CPUs and time-shared class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadSched {
    /// The CPUs the thread may run on. None: wherever the process may.
    cpus: CpuSet,
    /// 0: the time-shared class; 1..=[`FIFO_PRIORITY_MAX`]: `SCHED_FIFO` at it.
    fifo_priority: u8,
}

impl ThreadSched {
    /// This, with the thread kept to `cpus` (none: no change). Refuses a CPU at or past
    /// [`THREAD_CPUS_MAX`]; a CPU the machine lacks is refused when the thread starts.
    pub fn with_cpus(mut self, cpus: &[usize]) -> Result<ThreadSched> {
        self.cpus = CpuSet::new();
        for &c in cpus {
            self.cpus.set(c).map_err(|_| Error::ThreadSched {
                setting: "cpus",
                why: format!("CPU {c}: CPUs are numbered below {THREAD_CPUS_MAX}"),
            })?;
        }
        Ok(self)
    }

    /// This, with the thread in `SCHED_FIFO` at `priority` (0: the time-shared class).
    pub fn with_fifo_priority(mut self, priority: u8) -> Result<ThreadSched> {
        if priority > FIFO_PRIORITY_MAX {
            return Err(Error::ThreadSched {
                setting: "fifo_priority",
                why: format!("{priority}: at most {FIFO_PRIORITY_MAX} (0: the time-shared class)"),
            });
        }
        self.fifo_priority = priority;
        Ok(self)
    }

    /// The CPUs the thread is kept to, ascending (empty: no change).
    pub fn cpus(&self) -> Vec<usize> {
        cpus_of(&self.cpus)
    }

    /// The `SCHED_FIFO` priority (0: the time-shared class).
    pub fn fifo_priority(&self) -> u8 {
        self.fifo_priority
    }

    /// Applies this to the calling thread. An error names the setting and what the
    /// operating system said; the thread is then as it was for what failed.
    pub fn apply_to_current_thread(&self) -> Result<()> {
        if self.cpus != CpuSet::new() {
            let cpus = self.cpus();
            // Pid 0: the calling thread.
            sched_setaffinity(Pid::from_raw(0), &self.cpus).map_err(|e| Error::ThreadSched {
                setting: "cpus",
                why: format!(
                    "{cpus:?}: {e} (none of them is a CPU this machine has and the process \
                     may use?)"
                ),
            })?;
        }
        if self.fifo_priority > 0 {
            let value = ThreadPriorityValue::try_from(self.fifo_priority).map_err(|e| {
                Error::ThreadSched {
                    setting: "fifo_priority",
                    why: format!("{}: {e}", self.fifo_priority),
                }
            })?;
            set_thread_priority_and_policy(
                thread_native_id(),
                ThreadPriority::Crossplatform(value),
                ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
            )
            .map_err(|e| Error::ThreadSched {
                setting: "fifo_priority",
                why: format!(
                    "{}: SCHED_FIFO refused: {e} (it needs CAP_SYS_NICE or an RLIMIT_RTPRIO \
                     of at least that priority)",
                    self.fifo_priority
                ),
            })?;
        }
        Ok(())
    }
}

/// Spawns the thread `name` running `body`, after it applied `sched` to itself: an error
/// applying it is returned here, and then `body` never runs.
pub(crate) fn spawn_placed(
    name: String,
    sched: ThreadSched,
    body: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    let (placed_tx, placed_rx) = std::sync::mpsc::sync_channel::<Result<()>>(1);
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let placed = sched.apply_to_current_thread();
            let ok = placed.is_ok();
            let _ = placed_tx.send(placed);
            if ok {
                body();
            }
        })
        .map_err(|e| Error::Config(format!("spawning the thread {name}: {e}")))?;
    let placed = placed_rx
        .recv()
        .unwrap_or_else(|_| Err(Error::Config(format!("the thread {name} ended first"))));
    match placed {
        Ok(()) => Ok(handle),
        Err(e) => {
            let _ = handle.join();
            Err(e)
        }
    }
}

/// The CPUs the calling thread may run on now, ascending: where a [`ThreadSched`] with no
/// CPUs of its own leaves a thread, and what one with CPUs can ask for. An error names
/// what the operating system said.
pub fn current_thread_cpus() -> Result<Vec<usize>> {
    let set = nix::sched::sched_getaffinity(Pid::from_raw(0)).map_err(|e| Error::ThreadSched {
        setting: "cpus",
        why: format!("reading this thread's CPUs: {e}"),
    })?;
    Ok(cpus_of(&set))
}

/// The CPUs in `set`, ascending.
fn cpus_of(set: &CpuSet) -> Vec<usize> {
    (0..THREAD_CPUS_MAX)
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn allowed_cpus() -> Vec<usize> {
        current_thread_cpus().expect("this thread's CPUs")
    }

    #[test]
    fn settings_out_of_range_are_refused_naming_them() {
        let e = ThreadSched::default()
            .with_cpus(&[0, THREAD_CPUS_MAX])
            .unwrap_err();
        assert!(
            matches!(&e, Error::ThreadSched { setting: "cpus", why } if why.contains("1024")),
            "{e}"
        );
        let e = ThreadSched::default().with_fifo_priority(100).unwrap_err();
        assert!(
            matches!(&e, Error::ThreadSched { setting: "fifo_priority", why } if why.contains("100")),
            "{e}"
        );
        let s = ThreadSched::default()
            .with_cpus(&[3, 64, 1, THREAD_CPUS_MAX - 1])
            .unwrap();
        assert_eq!(s.cpus(), vec![1, 3, 64, THREAD_CPUS_MAX - 1]);
        assert_eq!(ThreadSched::default().cpus(), Vec::<usize>::new());
    }

    #[test]
    fn a_placed_thread_runs_on_the_cpu_it_was_given() {
        let cpu = *allowed_cpus().last().expect("some CPU is allowed");
        let sched = ThreadSched::default().with_cpus(&[cpu]).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let t = spawn_placed("sched-test".into(), sched, move || {
            *s.lock().unwrap() = allowed_cpus();
        })
        .expect("placed");
        t.join().expect("the placed thread ran");
        assert_eq!(*seen.lock().unwrap(), vec![cpu]);
    }

    #[test]
    fn a_thread_that_cannot_be_placed_is_refused_and_never_runs_its_body() {
        let missing = (0..THREAD_CPUS_MAX)
            .rev()
            .find(|c| !allowed_cpus().contains(c))
            .expect("a machine with fewer than 1024 CPUs");
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        let sched = ThreadSched::default().with_cpus(&[missing]).unwrap();
        let e = spawn_placed("sched-test".into(), sched, move || {
            r.store(true, Ordering::Release)
        })
        .unwrap_err();
        assert!(
            matches!(&e, Error::ThreadSched { setting: "cpus", why } if why.contains(&missing.to_string())),
            "{e}"
        );
        assert!(!ran.load(Ordering::Acquire), "the body must not run");
    }

    /// SCHED_FIFO is granted (the test runs with CAP_SYS_NICE, as root) and then seen on
    /// the thread, or refused with an error that names the setting and the privilege.
    #[test]
    fn fifo_is_applied_or_refused_with_the_privilege_named() {
        let sched = ThreadSched::default().with_fifo_priority(1).unwrap();
        let policy = Arc::new(std::sync::Mutex::new(None));
        let p = Arc::clone(&policy);
        match spawn_placed("sched-test".into(), sched, move || {
            *p.lock().unwrap() = thread_priority::thread_schedule_policy().ok();
        }) {
            Ok(t) => {
                t.join().expect("the placed thread ran");
                assert_eq!(
                    *policy.lock().unwrap(),
                    Some(ThreadSchedulePolicy::Realtime(
                        RealtimeThreadSchedulePolicy::Fifo
                    ))
                );
            }
            Err(e) => assert!(
                matches!(&e, Error::ThreadSched { setting: "fifo_priority", why } if why.contains("CAP_SYS_NICE")),
                "{e}"
            ),
        }
    }
}
