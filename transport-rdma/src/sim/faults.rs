//! Faults injected into a [`SimWorld`]: partitions, crashes, pauses and restarts.

use std::sync::Arc;

use super::{
    Entry, NodeState, PeerState, Rule, SimEndpoint, SimWorld, State, Timer, Verdict, SIM_RULES_MAX,
};
use crate::{FailureReason, NodeId};

impl SimWorld {
    /// Splits the world: every link between nodes on different sides drops (both
    /// directions, from now until [`SimWorld::clear_rules`]). Links that are up fail at both
    /// ends with [`FailureReason::ProbeTimeout`] once the failure detector's timeout
    /// passes with the link still cut,
    /// or earlier with [`FailureReason::ConnectionLost`] when traffic meets the cut.
    pub fn partition(&self, sides: &[&[NodeId]]) {
        let mut st = self.shared.lock();
        let now = st.now_us;
        let timeout_us = st.suspicion_delay_us();
        let mut pairs = Vec::new();
        for (i, side) in sides.iter().enumerate() {
            for other in &sides[i + 1..] {
                for &a in side.iter() {
                    for &b in other.iter() {
                        if a != b {
                            pairs.push((a, b));
                        }
                    }
                }
            }
        }
        let mut new_rules = Vec::new();
        for &(a, b) in &pairs {
            for (from, to) in [(a, b), (b, a)] {
                new_rules.push(Rule {
                    from: Some(from),
                    to: Some(to),
                    kind: None,
                    regions: None,
                    after_us: now,
                    until_us: u64::MAX,
                    verdict: Verdict::DropLink,
                });
            }
        }
        let room = SIM_RULES_MAX.saturating_sub(st.rules.len());
        if new_rules.len() > room {
            tracing::warn!("sim: partition truncated to {room} rules");
            new_rules.truncate(room);
        }
        st.rules.splice(0..0, new_rules);
        for (a, b) in pairs {
            if st.live_link(a, b) || st.live_link(b, a) {
                st.schedule_at(
                    now.saturating_add(timeout_us),
                    Entry::Timer(Timer::PartitionCheck { a, b }),
                );
            }
        }
    }

    /// Crashes `node`: what it has in flight, to or from it, is discarded; its peers see
    /// [`FailureReason::Crashed`] after [`super::SimConfig::failure_detection_us`]; its endpoint
    /// handles return [`crate::Error::Closed`] from now on.
    pub fn crash(&self, node: NodeId) {
        let mut st = self.shared.lock();
        st.crash(node);
    }

    /// Holds `node`'s traffic, in and out, until [`SimWorld::resume`]. If it stays paused
    /// past the failure detector's timeout (virtual), its peers fail their links to it
    /// with [`FailureReason::ProbeTimeout`] and it sees them fail with
    /// [`FailureReason::Excluded`] (the peer's last word, read once it resumes).
    pub fn pause(&self, node: NodeId) {
        let mut st = self.shared.lock();
        let timeout_us = st.suspicion_delay_us();
        let now = st.now_us;
        let Some(n) = st.nodes.get_mut(&node) else {
            return;
        };
        if n.paused {
            return;
        }
        n.paused = true;
        n.pause_epoch += 1;
        let epoch = n.pause_epoch;
        st.schedule_at(
            now.saturating_add(timeout_us),
            Entry::Timer(Timer::PauseCheck { node, epoch }),
        );
    }

    /// Releases a paused node; its held traffic flows again, in order.
    pub fn resume(&self, node: NodeId) {
        if let Some(n) = self.shared.lock().nodes.get_mut(&node) {
            n.paused = false;
        }
    }

    /// Restarts `node` (crashing it first if it is alive): a new endpoint with the same
    /// id, no regions and no links. Peers may connect to it again.
    pub fn restart(&self, node: NodeId) -> Arc<SimEndpoint> {
        let mut st = self.shared.lock();
        let incarnation = match st.nodes.get(&node) {
            Some(n) => {
                if !n.crashed {
                    st.crash(node);
                }
                st.nodes[&node].incarnation + 1
            }
            None => 1,
        };
        st.nodes.insert(node, NodeState::new(incarnation));
        Arc::new(SimEndpoint {
            shared: Arc::clone(&self.shared),
            node,
            incarnation,
        })
    }
}

impl State {
    fn crash(&mut self, node: NodeId) {
        let detect_us = self.cfg.failure_detection_us;
        let now = self.now_us;
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        if n.crashed {
            return;
        }
        n.crashed = true;
        n.paused = false;
        n.events.clear();
        let incarnation = n.incarnation;
        self.discard(|d| d.from == node || d.to == node);
        let watchers: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, s)| **id != node && s.peers.get(&node).is_some_and(PeerState::live))
            .map(|(id, _)| *id)
            .collect();
        for at in watchers {
            let peer_incarnation = self.nodes[&at].peers[&node].incarnation;
            // A link still connecting learns nothing from the crashed side: fail it too.
            let peer_incarnation = if peer_incarnation == 0 {
                0
            } else {
                incarnation
            };
            self.schedule_at(
                now.saturating_add(detect_us),
                Entry::Timer(Timer::Fail {
                    at,
                    peer: node,
                    peer_incarnation,
                    reason: FailureReason::Crashed,
                }),
            );
        }
    }
}
