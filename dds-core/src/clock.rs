//! The participant's clock: the one source of "now" for DCPS.
//!
//! Every time DCPS reads — a DEADLINE expiring, a LIFESPAN ending, a TIME_BASED_FILTER
//! separation, a source timestamp, the time-out of a blocking call — comes from the
//! participant's [`Clock`]. A participant on threads uses [`WallClock`]; a participant in
//! the simulation reads the simulated fabric's virtual time, so the same seed gives the
//! same run.
//!
//! ```
//! use spindle_dds_core::clock::{Clock, WallClock};
//! let c = WallClock;
//! let a = c.now_us();
//! assert!(c.now_us() >= a, "monotonic");
//! assert!(c.wall_ns() > 1_600_000_000_000_000_000, "ns since the Unix epoch");
//! ```
//!
//! # The wall clock of source timestamps
//!
//! Every `write` stamps its sample, so [`WallClock::wall_ns`] is on the write path. It
//! reads the CPU's time-stamp counter (through the `quanta` crate, which uses it only
//! where it is invariant and falls back to the OS clock elsewhere) and maps it to wall
//! time by a [`WallSegment`]: a start and a rate. Every [`WALL_RESYNC_PERIOD_NS`] the
//! first reader past the period reads the system's wall clock again
//! ([`WallSegment::resync`]): the next segment starts where the last one ends (no jump)
//! and its rate is the measured one, corrected so that it meets the system clock again
//! one period later. So the clock never goes back, and stays within a few hundred ns of
//! the system's after the first periods; a difference above [`WALL_STEP_NS`] is a step
//! of the system clock (set by hand, or by NTP) and is followed at once, as `SystemTime`
//! follows it. The counter is taken to run in step on every CPU, as invariant TSCs do on
//! current hosts (what the kernel's own clock also relies on when its clocksource is
//! `tsc`); a read on a CPU whose counter lags the segment's start reads that start.
//! On the benchmark host a read cost 9.2 ns against 23.5 ns for
//! `SystemTime::now` (`cargo bench -p spindle-dds-core --bench stages --
//! source_timestamp`; docs/benchmarks.md, "The source timestamp's clock").
//!
//! ```
//! use spindle_dds_core::clock::{WallSegment, WALL_RESYNC_PERIOD_NS};
//! // The counter ticks 3 times a ns; the segment thinks 3.0003 (100 ppm slow).
//! let seg = WallSegment { raw0: 0, wall0_ns: 0, ns_per_tick: 1.0 / 3.0003 };
//! let period_ticks = 3 * WALL_RESYNC_PERIOD_NS as u64;
//! let next = seg.resync((0, 0), (period_ticks, WALL_RESYNC_PERIOD_NS));
//! assert_eq!(next.at(period_ticks), seg.at(period_ticks), "no jump");
//! assert!(next.at(period_ticks) < WALL_RESYNC_PERIOD_NS, "behind by 5 µs");
//! // It runs a little faster than the truth for one period, until it meets it again.
//! let later = 2 * period_ticks;
//! assert!((next.at(later) - 2 * WALL_RESYNC_PERIOD_NS).abs() < 10);
//! ```

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};

/// How often [`WallClock`] reads the system's wall clock again to correct its course.
pub const WALL_RESYNC_PERIOD_NS: i64 = 50_000_000;

/// A difference from the system's wall clock above this at a resync is a step of that
/// clock, followed at once; a smaller one is slewed out over the next period.
pub const WALL_STEP_NS: i64 = 1_000_000;

/// A reading of the system clock is paired with the counter only if the counter reads
/// before and after it are at most this far apart: a thread interrupted in between would
/// pair them wrongly by the interruption.
pub const WALL_PAIR_SPREAD_NS_MAX: i64 = 2_000;

/// Readings tried at a resync before it is left for later.
const WALL_PAIR_TRIES: u32 = 4;

// A slewed segment's rate stays within ±(step ÷ period) of the measured one: positive, so
// the clock never goes back.
const _: () = assert!(WALL_STEP_NS * 10 <= WALL_RESYNC_PERIOD_NS);
const _: () = assert!(WALL_PAIR_SPREAD_NS_MAX * 100 <= WALL_STEP_NS);

/// Where DCPS reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Monotonic microseconds (DEADLINE, TIME_BASED_FILTER, blocking time-outs).
    fn now_us(&self) -> u64;
    /// Nanoseconds since the Unix epoch (source timestamps and LIFESPAN).
    fn wall_ns(&self) -> i64;
}

/// The process's clocks: `Instant` for [`Clock::now_us`], `SystemTime` for
/// [`Clock::wall_ns`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_us(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_micros() as u64
    }

    fn wall_ns(&self) -> i64 {
        static WALL: OnceLock<TscWall> = OnceLock::new();
        WALL.get_or_init(TscWall::start).now_ns()
    }
}

/// The system's wall clock, in ns since the Unix epoch (0 before it).
pub fn system_wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// One stretch of [`WallClock`]'s course: `wall0_ns` at counter value `raw0`, then
/// `ns_per_tick` ns per tick of the counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WallSegment {
    /// The counter value the segment starts at.
    pub raw0: u64,
    /// The wall time at `raw0`, in ns since the Unix epoch.
    pub wall0_ns: i64,
    /// Ns per tick of the counter.
    pub ns_per_tick: f64,
}

impl WallSegment {
    /// The wall time at counter value `raw`; a value before `raw0` (read on a core whose
    /// counter lags) counts as `raw0`.
    pub fn at(&self, raw: u64) -> i64 {
        let ahead_ns = raw.saturating_sub(self.raw0) as f64 * self.ns_per_tick;
        self.wall0_ns.saturating_add(ahead_ns as i64)
    }

    /// The segment after this one, given the system clock's reading `now` (counter value,
    /// wall ns) and its reading `last` at the start of this one. It starts where this one
    /// ends at `now`'s counter value, at the rate measured between the two readings,
    /// corrected to meet the system clock again [`WALL_RESYNC_PERIOD_NS`] later. A
    /// difference above [`WALL_STEP_NS`], or readings that do not move forward, are a step
    /// of the system clock: the next segment starts at `now`'s wall time, at this rate.
    pub fn resync(&self, last: (u64, i64), now: (u64, i64)) -> WallSegment {
        let predicted_ns = self.at(now.0);
        let behind_ns = now.1.saturating_sub(predicted_ns);
        let measured = (now.0 > last.0 && now.1 > last.1)
            .then(|| (now.1 - last.1) as f64 / (now.0 - last.0) as f64)
            // A rate off by a tenth is a step between the readings, not the counter's.
            .filter(|r| (r / self.ns_per_tick - 1.0).abs() < 0.1);
        match measured {
            Some(rate) if behind_ns.abs() <= WALL_STEP_NS => WallSegment {
                raw0: now.0,
                wall0_ns: predicted_ns,
                ns_per_tick: rate * (1.0 + behind_ns as f64 / WALL_RESYNC_PERIOD_NS as f64),
            },
            _ => WallSegment {
                raw0: now.0,
                wall0_ns: now.1,
                ns_per_tick: self.ns_per_tick,
            },
        }
    }

    /// Counter ticks in one [`WALL_RESYNC_PERIOD_NS`] at this rate.
    fn period_ticks(&self) -> u64 {
        (WALL_RESYNC_PERIOD_NS as f64 / self.ns_per_tick) as u64
    }
}

/// The process's [`WallClock`]: the counter and its current [`WallSegment`], published
/// under a sequence lock (even: whole; odd: a resync is writing it) so that a read takes
/// no lock and writes no shared memory.
struct TscWall {
    counter: quanta::Clock,
    seq: AtomicU64,
    raw0: AtomicU64,
    wall0_ns: AtomicI64,
    ns_per_tick_bits: AtomicU64,
    /// The counter value from which a resync is due.
    resync_at: AtomicU64,
    /// The system clock's reading at the last resync; held by the thread that resyncs.
    last: Mutex<(u64, i64)>,
}

impl TscWall {
    fn start() -> TscWall {
        let counter = quanta::Clock::new();
        const SPAN: u64 = 1 << 40;
        let rate = match counter.delta_as_nanos(0, SPAN) {
            0 => 1.0,
            ns => ns as f64 / SPAN as f64,
        };
        let first = pair(&counter, rate).unwrap_or_else(|| (counter.raw(), system_wall_ns()));
        let seg = WallSegment {
            raw0: first.0,
            wall0_ns: first.1,
            ns_per_tick: rate,
        };
        TscWall {
            seq: AtomicU64::new(0),
            raw0: AtomicU64::new(seg.raw0),
            wall0_ns: AtomicI64::new(seg.wall0_ns),
            ns_per_tick_bits: AtomicU64::new(seg.ns_per_tick.to_bits()),
            resync_at: AtomicU64::new(seg.raw0.saturating_add(seg.period_ticks())),
            last: Mutex::new(first),
            counter,
        }
    }

    fn now_ns(&self) -> i64 {
        let (seg, due) = self.segment();
        let raw = self.counter.raw();
        if raw >= due {
            if let Some(next) = self.resync(seg) {
                return next.at(raw);
            }
        }
        seg.at(raw)
    }

    /// The current segment and the counter value its resync is due at.
    fn segment(&self) -> (WallSegment, u64) {
        let mut tries = 0u32;
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s % 2 == 0 {
                let seg = WallSegment {
                    raw0: self.raw0.load(Ordering::Relaxed),
                    wall0_ns: self.wall0_ns.load(Ordering::Relaxed),
                    ns_per_tick: f64::from_bits(self.ns_per_tick_bits.load(Ordering::Relaxed)),
                };
                let due = self.resync_at.load(Ordering::Relaxed);
                // Orders the loads above before the check that no resync wrote meanwhile.
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s {
                    return (seg, due);
                }
            }
            tries += 1;
            if tries % 64 == 0 {
                std::thread::yield_now(); // the resyncing thread lost its core
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Reads the system clock and publishes the segment after `seg`; None if another
    /// thread resyncs or did since `seg` was read, or no clean reading was had (then the
    /// next one is due a tenth of a period later).
    fn resync(&self, seg: WallSegment) -> Option<WallSegment> {
        let mut last = match self.last.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        if self.segment().0 != seg {
            return None;
        }
        let Some(now) = pair(&self.counter, seg.ns_per_tick) else {
            let later = self.counter.raw().saturating_add(seg.period_ticks() / 10);
            self.resync_at.store(later, Ordering::Relaxed);
            return None;
        };
        let next = seg.resync(*last, now);
        *last = now;
        let s = self.seq.load(Ordering::Relaxed);
        // Only the holder of `last` writes: odd while the fields change.
        self.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.raw0.store(next.raw0, Ordering::Relaxed);
        self.wall0_ns.store(next.wall0_ns, Ordering::Relaxed);
        self.ns_per_tick_bits
            .store(next.ns_per_tick.to_bits(), Ordering::Relaxed);
        self.resync_at.store(
            next.raw0.saturating_add(next.period_ticks()),
            Ordering::Relaxed,
        );
        self.seq.store(s + 2, Ordering::Release);
        Some(next)
    }
}

/// A reading of the system's wall clock paired with the counter value at its middle, if
/// the counter reads around it are at most [`WALL_PAIR_SPREAD_NS_MAX`] apart within
/// [`WALL_PAIR_TRIES`] tries.
fn pair(counter: &quanta::Clock, ns_per_tick: f64) -> Option<(u64, i64)> {
    (0..WALL_PAIR_TRIES).find_map(|_| {
        let before = counter.raw();
        let wall_ns = system_wall_ns();
        let after = counter.raw();
        let spread_ns = after.checked_sub(before)? as f64 * ns_per_tick;
        (spread_ns <= WALL_PAIR_SPREAD_NS_MAX as f64)
            .then(|| (before + (after - before) / 2, wall_ns))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system clock: `ns_per_tick` ns per counter tick from `wall0_ns`, moved by
    /// `step_ns` from counter value `step_at` on.
    struct Truth {
        ns_per_tick: f64,
        wall0_ns: i64,
        step_at: u64,
        step_ns: i64,
    }

    impl Truth {
        fn at(&self, raw: u64) -> i64 {
            let step = if raw >= self.step_at { self.step_ns } else { 0 };
            self.wall0_ns + (raw as f64 * self.ns_per_tick) as i64 + step
        }
    }

    /// A read of the segments' clock: (period, counter value, value, the truth's).
    type Read = (usize, u64, i64, i64);

    /// Runs `periods` segments against `truth` from a first one at `first_ns_per_tick`,
    /// each resync's system-clock reading off by up to ±20 ns (seeded); reads each
    /// segment at 64 points, the first at its start, and at its last tick.
    fn run(truth: &Truth, first_ns_per_tick: f64, periods: usize, seed: u64) -> Vec<Read> {
        let mut rng = seed.max(1);
        let mut jitter_ns = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % 41) as i64 - 20
        };
        let mut seg = WallSegment {
            raw0: 0,
            wall0_ns: truth.at(0),
            ns_per_tick: first_ns_per_tick,
        };
        let mut last = (0, truth.at(0));
        let mut reads = Vec::new();
        for period in 0..periods {
            let span = seg.period_ticks();
            for k in 0..64 {
                let raw = seg.raw0 + span * k / 64;
                reads.push((period, raw, seg.at(raw), truth.at(raw)));
            }
            let raw = seg.raw0 + span;
            // The last read before the resync: a jump back shows at the join.
            reads.push((period, raw - 1, seg.at(raw - 1), truth.at(raw - 1)));
            let now = (raw, truth.at(raw) + jitter_ns());
            seg = seg.resync(last, now);
            last = now;
        }
        reads
    }

    fn never_back(reads: &[Read], seed: u64) {
        for w in reads.windows(2) {
            assert!(
                w[1].2 >= w[0].2,
                "seed {seed}: back from {:?} to {:?}",
                w[0],
                w[1]
            );
        }
    }

    fn worst_error_from(reads: &[Read], period: usize) -> i64 {
        reads
            .iter()
            .filter(|r| r.0 >= period)
            .map(|r| (r.2 - r.3).abs())
            .max()
            .unwrap_or(i64::MAX)
    }

    const GHZ_3: f64 = 1.0 / 3.0;
    const EPOCH_2026_NS: i64 = 1_790_000_000_000_000_000;

    #[test]
    fn a_wrong_first_rate_is_corrected_without_going_back() {
        for seed in 1..=8 {
            let truth = Truth {
                ns_per_tick: GHZ_3,
                wall0_ns: EPOCH_2026_NS,
                step_at: u64::MAX,
                step_ns: 0,
            };
            // 200 ppm fast: 10 µs ahead by the first resync.
            let reads = run(&truth, GHZ_3 * 1.0002, 12, seed);
            never_back(&reads, seed);
            assert!(
                worst_error_from(&reads, 0) > 5_000,
                "seed {seed}: starts off"
            );
            let worst = worst_error_from(&reads, 3);
            assert!(
                worst < 200,
                "seed {seed}: still {worst} ns off after 3 resyncs"
            );
        }
    }

    #[test]
    fn a_small_step_back_of_the_system_clock_is_slewed_out() {
        for seed in 1..=8 {
            let truth = Truth {
                ns_per_tick: GHZ_3,
                wall0_ns: EPOCH_2026_NS,
                // Half-way through the fifth period, 0.4 ms back.
                step_at: (4.5 * WALL_RESYNC_PERIOD_NS as f64 / GHZ_3) as u64,
                step_ns: -400_000,
            };
            let reads = run(&truth, GHZ_3, 16, seed);
            never_back(&reads, seed);
            let worst = worst_error_from(&reads, 10);
            assert!(worst < 200, "seed {seed}: still {worst} ns off");
        }
    }

    #[test]
    fn a_large_step_of_the_system_clock_is_followed_at_once() {
        for (seed, step_ns) in [
            (1, 10_000_000_000),
            (2, -10_000_000_000),
            (3, 2 * WALL_STEP_NS),
        ] {
            let truth = Truth {
                ns_per_tick: GHZ_3,
                wall0_ns: EPOCH_2026_NS,
                step_at: (3.5 * WALL_RESYNC_PERIOD_NS as f64 / GHZ_3) as u64,
                step_ns,
            };
            let reads = run(&truth, GHZ_3, 8, seed);
            // Off by the step until the next resync, then on it.
            assert!(
                worst_error_from(&reads, 3) >= step_ns.abs() - 200,
                "seed {seed}"
            );
            let worst = worst_error_from(&reads, 4);
            assert!(
                worst < 200,
                "seed {seed}: still {worst} ns off after the resync"
            );
            if step_ns > 0 {
                never_back(&reads, seed);
            }
        }
    }

    #[test]
    fn the_process_clock_follows_the_system_clock_and_never_goes_back() {
        // Two threads read across three resyncs; every read lies between system-clock
        // reads before and after it, within the slew a resync allows.
        let slack_ns = 10 * WALL_STEP_NS;
        let readers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    let end_ns = system_wall_ns() + 3 * WALL_RESYNC_PERIOD_NS;
                    let mut prev = i64::MIN;
                    let mut reads = 0u64;
                    loop {
                        let before = system_wall_ns();
                        for _ in 0..1000 {
                            let v = WallClock.wall_ns();
                            assert!(v >= prev, "went back from {prev} to {v}");
                            prev = v;
                        }
                        reads += 1000;
                        let after = system_wall_ns();
                        assert!(
                            prev >= before - slack_ns && prev <= after + slack_ns,
                            "{prev} outside [{before}, {after}] ± {slack_ns}"
                        );
                        if after > end_ns {
                            return reads;
                        }
                    }
                })
            })
            .collect();
        for r in readers {
            assert!(r.join().expect("reader") > 0);
        }
    }
}
