//! DDS `Duration_t`.

use std::fmt;

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A DDS duration (`Duration_t`): whole seconds plus nanoseconds.
///
/// `nanosec` is meant to be below one second; the constructors always normalise it so.
/// Negative durations are representable (`sec < 0`, with `nanosec` counting forward from
/// `sec`) so that a QoS holding one can be rejected by `check()`.
///
/// The derived ordering compares `sec` first, then `nanosec`, so [`Duration::INFINITE`]
/// orders above every finite, normalised duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    /// Whole seconds (may be negative).
    pub sec: i64,
    /// Nanoseconds added to `sec`, in `0..1_000_000_000` when normalised.
    pub nanosec: u32,
}

impl Duration {
    /// The infinite duration (`DURATION_INFINITE`).
    pub const INFINITE: Duration = Duration {
        sec: i64::MAX,
        nanosec: 999_999_999,
    };
    /// The zero duration (`DURATION_ZERO`).
    pub const ZERO: Duration = Duration { sec: 0, nanosec: 0 };

    /// A duration of `sec` seconds and `nanosec` nanoseconds, taken as given.
    pub const fn new(sec: i64, nanosec: u32) -> Duration {
        Duration { sec, nanosec }
    }

    /// A duration of `secs` whole seconds.
    pub const fn from_secs(secs: i64) -> Duration {
        Duration {
            sec: secs,
            nanosec: 0,
        }
    }

    /// A duration of `millis` milliseconds (may be negative).
    pub const fn from_millis(millis: i64) -> Duration {
        Duration {
            sec: millis.div_euclid(1_000),
            nanosec: (millis.rem_euclid(1_000) * 1_000_000) as u32,
        }
    }

    /// A duration of `micros` microseconds (may be negative).
    pub const fn from_micros(micros: i64) -> Duration {
        Duration {
            sec: micros.div_euclid(1_000_000),
            nanosec: (micros.rem_euclid(1_000_000) * 1_000) as u32,
        }
    }

    /// A duration of `nanos` nanoseconds (may be negative).
    pub const fn from_nanos(nanos: i64) -> Duration {
        Duration {
            sec: nanos.div_euclid(NANOS_PER_SEC),
            nanosec: nanos.rem_euclid(NANOS_PER_SEC) as u32,
        }
    }

    /// Converts a [`std::time::Duration`], saturating to [`Duration::INFINITE`] when it
    /// does not fit.
    pub fn from_std(d: std::time::Duration) -> Duration {
        match i64::try_from(d.as_secs()) {
            Ok(sec) => Duration {
                sec,
                nanosec: d.subsec_nanos(),
            }
            .min(Duration::INFINITE),
            Err(_) => Duration::INFINITE,
        }
    }

    /// Whether this is [`Duration::INFINITE`] (or beyond it).
    pub fn is_infinite(&self) -> bool {
        *self >= Duration::INFINITE
    }

    /// Whether this duration is below zero.
    pub fn is_negative(&self) -> bool {
        self.sec < 0
    }

    /// The equivalent [`std::time::Duration`]; `None` if infinite or negative.
    pub fn to_std(&self) -> Option<std::time::Duration> {
        if self.is_infinite() {
            return None;
        }
        let secs = u64::try_from(self.sec).ok()?;
        std::time::Duration::from_secs(secs)
            .checked_add(std::time::Duration::from_nanos(u64::from(self.nanosec)))
    }

    /// The total number of nanoseconds (negative for a negative duration); `None` if
    /// infinite.
    pub fn as_nanos(&self) -> Option<i128> {
        if self.is_infinite() {
            return None;
        }
        Some(i128::from(self.sec) * i128::from(NANOS_PER_SEC) + i128::from(self.nanosec))
    }
}

impl Default for Duration {
    /// [`Duration::ZERO`].
    fn default() -> Duration {
        Duration::ZERO
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Duration {
        Duration::from_std(d)
    }
}

impl fmt::Display for Duration {
    /// `INFINITE`, or seconds with nine decimals, e.g. `-0.500000000s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_nanos() {
            None => f.write_str("INFINITE"),
            Some(n) => {
                let sign = if n < 0 { "-" } else { "" };
                let abs = n.unsigned_abs();
                let per = NANOS_PER_SEC as u128;
                write!(f, "{sign}{}.{:09}s", abs / per, abs % per)
            }
        }
    }
}
