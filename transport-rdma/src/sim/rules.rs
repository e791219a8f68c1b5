//! Fault rules of a simulated world: which deliveries they match and what they do.

use std::ops::RangeInclusive;

use crate::{NodeId, RegionId};

/// What kind of delivery a [`Rule`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeliveryKind {
    /// A one-sided write (with or without a guard).
    Write,
    /// A two-sided send.
    Send,
    /// Link set-up, region announcements and withdrawals, goodbyes.
    Control,
}

/// What a matching [`Rule`] does to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Nothing (shadows later rules).
    Pass,
    /// Adds this many virtual microseconds to the delivery's delay (decided at issue;
    /// the link stays FIFO, so later deliveries on it wait too).
    Delay(u64),
    /// The link fails at both ends when a matching delivery falls due
    /// ([`crate::Event::PeerFailed`] with [`crate::FailureReason::ConnectionLost`]);
    /// pending deliveries on it are discarded.
    DropLink,
    /// Adds this many µs to the delay *outside* the link's FIFO order (later deliveries
    /// may land first): with [`DeliveryKind::Control`], shm's announcements on a socket
    /// beside its writes, which are memory copies done at issue.
    Lag(u64),
}

/// A fault rule. `None` fields match anything; the rule is active while
/// `after_us <= now < until_us` (virtual). Rules are matched in the order added (rules
/// added by [`super::SimWorld::partition`] go first); the first match decides: `Delay`
/// and `Lag` at issue time, `DropLink` at delivery time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Sending node.
    pub from: Option<NodeId>,
    /// Receiving node.
    pub to: Option<NodeId>,
    /// Kind of delivery.
    pub kind: Option<DeliveryKind>,
    /// Target region ids: `Some` matches only one-sided writes into a region whose id
    /// lies in the range (say, one protocol's regions and not the rest of the traffic
    /// on the link); `None` matches any delivery.
    pub regions: Option<RangeInclusive<RegionId>>,
    /// Active from this virtual time on.
    pub after_us: u64,
    /// Active before this virtual time.
    pub until_us: u64,
    /// What happens to a match.
    pub verdict: Verdict,
}

impl Rule {
    pub(super) fn matches(
        &self,
        from: NodeId,
        to: NodeId,
        kind: DeliveryKind,
        region: Option<RegionId>,
        now_us: u64,
    ) -> bool {
        self.from.is_none_or(|f| f == from)
            && self.to.is_none_or(|t| t == to)
            && self.kind.is_none_or(|k| k == kind)
            && self
                .regions
                .as_ref()
                .is_none_or(|rs| region.is_some_and(|r| rs.contains(&r)))
            && self.after_us <= now_us
            && now_us < self.until_us
    }
}
