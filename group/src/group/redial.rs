//! Members of a view that could not be reached yet: a bootstrap member started after
//! this one refuses the first dial ([`FailureReason::Unreachable`]). Within the view's
//! activation time-out such a member is dialed again every [`REDIAL_US`] instead of
//! being suspected; past it, the activation time-out suspects a member that never became
//! active, as before. A link that breaks once made is never deferred here.
//!
//! [`FailureReason::Unreachable`]: spindle_transport_rdma::FailureReason::Unreachable

use std::collections::BTreeMap;

use spindle_transport_rdma::NodeId;

use super::GroupAction;

/// How long a member waits before dialing again a member of its view it could not
/// reach, in µs.
pub const REDIAL_US: u64 = 100_000;

/// The members to dial again, and when. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Redial {
    at_us: BTreeMap<NodeId, u64>,
}

impl Redial {
    /// `peer` could not be reached at `now_us`: true (dial it again later, do not
    /// suspect it) while the view's activation window lasts, until `window_end_us`.
    pub(super) fn defer(&mut self, peer: NodeId, now_us: u64, window_end_us: u64) -> bool {
        if now_us >= window_end_us {
            self.at_us.remove(&peer);
            return false;
        }
        tracing::debug!(
            peer,
            "a member of the view is not reachable yet; dialing it again"
        );
        self.at_us.insert(peer, now_us.saturating_add(REDIAL_US));
        true
    }

    /// `peer` is linked: nothing to dial.
    pub(super) fn connected(&mut self, peer: NodeId) {
        self.at_us.remove(&peer);
    }

    /// The dials due at `now_us`, for members of the view (`members`) with a known
    /// address; members no longer in the view are forgotten.
    pub(super) fn due(
        &mut self,
        now_us: u64,
        members: &[NodeId],
        addresses: &BTreeMap<NodeId, String>,
    ) -> Vec<GroupAction> {
        if self.at_us.is_empty() {
            return Vec::new();
        }
        self.at_us.retain(|n, _| members.contains(n));
        let due: Vec<NodeId> = self
            .at_us
            .iter()
            .filter(|(_, at)| **at <= now_us)
            .map(|(n, _)| *n)
            .collect();
        due.into_iter()
            .filter_map(|n| {
                self.at_us.remove(&n);
                addresses.get(&n).map(|a| GroupAction::Connect {
                    peer: n,
                    address: a.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_member_is_dialed_again_within_the_window_and_suspected_after() {
        let mut r = Redial::default();
        let addrs: BTreeMap<NodeId, String> = [(2, "a2".to_string())].into();
        assert!(r.defer(2, 1_000, 5_000_000), "inside the window: defer");
        assert!(r.due(1_000, &[1, 2], &addrs).is_empty(), "not yet due");
        let again = r.due(1_000 + REDIAL_US, &[1, 2], &addrs);
        assert!(
            matches!(&again[..], [GroupAction::Connect { peer: 2, address }] if address == "a2"),
            "{again:?}"
        );
        assert!(
            r.due(10 * REDIAL_US, &[1, 2], &addrs).is_empty(),
            "dialed once per failure"
        );
        assert!(
            !r.defer(2, 5_000_000, 5_000_000),
            "past the window: suspect"
        );
        assert!(r.defer(3, 0, 1), "another member");
        assert!(
            r.due(REDIAL_US, &[1, 2], &addrs).is_empty(),
            "3 left the view: forgotten"
        );
        assert!(r.defer(2, 0, 10));
        r.connected(2);
        assert!(
            r.due(REDIAL_US, &[1, 2], &addrs).is_empty(),
            "linked: nothing to dial"
        );
    }
}
