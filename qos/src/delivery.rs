//! Spindle delivery levels.

use std::fmt;
use std::str::FromStr;

use crate::policy::{Durability, DurabilityKind, Reliability, ReliabilityKind};

/// The delivery level a topic's `RELIABILITY` and `DURABILITY` map to on Spindle.
/// Ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeliveryLevel {
    /// `RELIABILITY` `BEST_EFFORT` (any durability): delivered on receipt, with no wait
    /// for stability.
    Unordered,
    /// `RELIABLE` + `DURABILITY` `VOLATILE`: totally ordered, and all-or-none across
    /// crashes.
    Atomic,
    /// `RELIABLE` + `TRANSIENT_LOCAL` or `TRANSIENT`: as [`DeliveryLevel::Atomic`], plus
    /// kept in memory at readers, bounded by `HISTORY`/`RESOURCE_LIMITS`, so late joiners
    /// receive it.
    VolatileStore,
    /// `RELIABLE` + `PERSISTENT`: as [`DeliveryLevel::VolatileStore`], plus a durable log.
    LoggedStore,
}

impl DeliveryLevel {
    /// Every level, weakest first.
    pub const ALL: [DeliveryLevel; 4] = [
        DeliveryLevel::Unordered,
        DeliveryLevel::Atomic,
        DeliveryLevel::VolatileStore,
        DeliveryLevel::LoggedStore,
    ];

    /// The level for a `RELIABILITY`/`DURABILITY` pair (`BEST_EFFORT` is always
    /// [`DeliveryLevel::Unordered`]).
    pub fn of(reliability: &Reliability, durability: &Durability) -> DeliveryLevel {
        match (reliability.kind, durability.kind) {
            (ReliabilityKind::BestEffort, _) => DeliveryLevel::Unordered,
            (ReliabilityKind::Reliable, DurabilityKind::Volatile) => DeliveryLevel::Atomic,
            (
                ReliabilityKind::Reliable,
                DurabilityKind::TransientLocal | DurabilityKind::Transient,
            ) => DeliveryLevel::VolatileStore,
            (ReliabilityKind::Reliable, DurabilityKind::Persistent) => DeliveryLevel::LoggedStore,
        }
    }

    /// The wire code, 0 (Unordered) to 3 (LoggedStore).
    pub fn to_u8(self) -> u8 {
        self as u8
    }

    /// The level with wire code `code`, if any.
    pub fn from_u8(code: u8) -> Option<DeliveryLevel> {
        DeliveryLevel::ALL.get(usize::from(code)).copied()
    }

    /// The name: `"Unordered"`, `"Atomic"`, `"VolatileStore"` or `"LoggedStore"`.
    pub fn name(&self) -> &'static str {
        match self {
            DeliveryLevel::Unordered => "Unordered",
            DeliveryLevel::Atomic => "Atomic",
            DeliveryLevel::VolatileStore => "VolatileStore",
            DeliveryLevel::LoggedStore => "LoggedStore",
        }
    }

    /// Whether delivery is totally ordered (every level but Unordered).
    pub fn is_ordered(&self) -> bool {
        *self != DeliveryLevel::Unordered
    }

    /// Whether readers keep history for late joiners (VolatileStore and LoggedStore).
    pub fn keeps_history(&self) -> bool {
        matches!(
            self,
            DeliveryLevel::VolatileStore | DeliveryLevel::LoggedStore
        )
    }
}

impl fmt::Display for DeliveryLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no delivery level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery level {0:?} (expected Unordered, Atomic, VolatileStore or LoggedStore)")]
pub struct ParseDeliveryLevelError(pub String);

impl FromStr for DeliveryLevel {
    type Err = ParseDeliveryLevelError;

    /// Parses a level name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<DeliveryLevel, ParseDeliveryLevelError> {
        DeliveryLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseDeliveryLevelError(s.to_owned()))
    }
}
