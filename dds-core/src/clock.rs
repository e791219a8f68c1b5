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
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64)
    }
}
