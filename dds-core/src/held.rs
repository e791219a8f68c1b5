//! Samples a reader holds back until the built-in table names their writer.
//!
//! A writer announces itself on the built-in topic before it writes, and waits for the
//! announcement's delivery in its own participant; but the built-in subgroup and the
//! topic's subgroup each have their own total order, so at another participant the
//! writer's first samples may be delivered before its announcement (the built-in
//! subgroup's stability waits on other members' acknowledgements, the topic's may not).
//! A sample is judged — its PARTITION, and whether its writer is blocked (another type
//! or another definition of it, incompatible QoS) — by what the table says of its writer, so a reader that judged
//! early would drop a partitioned writer's first samples, or take an incompatible
//! writer's. Instead, from the first sample of a writer the table does not hold, the
//! reader holds back that sample and every later one, in delivery order, and takes them
//! in that order once the table names the writer: every reader still keeps the same
//! samples in the same order. A writer deleted since is still named (by its last
//! announcement, [`Gone`]), so its last samples are judged as its others were. Held
//! samples are copies, at most [`HELD_BYTES_MAX`] bytes per reader (past it the oldest
//! is judged with the table as it is), and a view change judges whatever is still held.

use std::collections::VecDeque;

use crate::cache::Origin;
use crate::discovery::{Endpoint, EndpointKey};
use crate::sample::{SampleHeader, SampleKind, WriterHandle};

/// Most bytes of samples one reader holds back waiting for a writer's announcement.
pub const HELD_BYTES_MAX: usize = 16 << 20;

/// How many deleted writers' last announcements a participant keeps ([`Gone`]).
pub const GONE_ENDPOINTS_MAX: usize = 1024;

/// A reader's held-back samples, in delivery order.
#[derive(Debug, Default)]
pub(crate) struct Held {
    samples: VecDeque<(SampleHeader, Vec<u8>, Origin)>,
    bytes: usize,
}

impl Held {
    /// Whether it holds nothing (the common case: samples are judged as they come).
    pub(crate) fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Holds back a copy of a delivered sample, after those held already.
    pub(crate) fn push(&mut self, h: &SampleHeader, payload: &[u8], o: Origin) {
        self.bytes += payload.len();
        self.samples.push_back((*h, payload.to_vec(), o));
    }

    /// Takes out, in order, the held samples that can be judged now: those before the
    /// first whose writer `known` does not name (all of them with `all`), and the
    /// oldest ones while more than [`HELD_BYTES_MAX`] bytes are held.
    pub(crate) fn ready(
        &mut self,
        known: &dyn Fn(&WriterHandle) -> bool,
        all: bool,
    ) -> Vec<(SampleHeader, Vec<u8>, Origin)> {
        let mut out = Vec::new();
        while let Some((h, _, o)) = self.samples.front() {
            let judged_now = all
                || self.bytes > HELD_BYTES_MAX
                || !needs_writer(h)
                || known(&WriterHandle {
                    node: o.node,
                    writer_id: h.writer_id,
                });
            if !judged_now {
                break;
            }
            if let Some(s) = self.samples.pop_front() {
                self.bytes -= s.1.len();
                out.push(s);
            }
        }
        out
    }
}

/// Whether judging a sample needs the table's word on its writer: every sample but a
/// GROUP coherent set's end (it goes to every reader of its subgroup).
pub(crate) fn needs_writer(h: &SampleHeader) -> bool {
    h.kind != SampleKind::GroupCoherentEnd
}

/// The last announcements of writers deleted recently, newest last: samples of theirs
/// delivered after the deletion was applied here are judged by them. Kept while their
/// participant stays in the view.
#[derive(Debug, Default)]
pub(crate) struct Gone {
    endpoints: VecDeque<(EndpointKey, Endpoint)>,
}

impl Gone {
    /// Keeps the last announcement of deleted endpoint `key`.
    pub(crate) fn keep(&mut self, key: EndpointKey, e: Endpoint) {
        if self.endpoints.len() >= GONE_ENDPOINTS_MAX {
            self.endpoints.pop_front();
        }
        self.endpoints.push_back((key, e));
    }

    /// Forgets the endpoints of participants not in `members` (they left the view): a
    /// node id back later is another incarnation, whose entity ids start over.
    pub(crate) fn retain_nodes(&mut self, members: &[spindle_transport_rdma::NodeId]) {
        self.endpoints
            .retain(|((node, _), _)| members.contains(node));
    }

    /// The last announcement of deleted endpoint `key`, if kept.
    pub(crate) fn get(&self, key: &EndpointKey) -> Option<&Endpoint> {
        self.endpoints
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deleted writers' announcements are kept newest last, at most
    /// [`GONE_ENDPOINTS_MAX`]; the newest for a key wins.
    #[test]
    fn gone_keeps_the_latest_announcements_up_to_its_bound() {
        let e = |entity| Endpoint {
            entity,
            topic_id: 1,
            type_id: 2,
            type_hash: None,
            reader: false,
            level: spindle_qos::DeliveryLevel::Atomic,
            partition: Default::default(),
            liveliness: Default::default(),
            lease_us: None,
            rxo: Default::default(),
        };
        let mut g = Gone::default();
        for i in 0..=GONE_ENDPOINTS_MAX as u32 {
            g.keep((1, i), e(i));
        }
        assert!(g.get(&(1, 0)).is_none(), "the oldest went");
        assert_eq!(g.get(&(1, 1)).map(|e| e.entity), Some(1));
        g.keep((1, 1), e(99));
        assert_eq!(g.get(&(1, 1)).map(|e| e.entity), Some(99));
        // Node 1 left the view: a node 1 back later is another incarnation.
        g.keep((2, 5), e(5));
        g.retain_nodes(&[2, 3]);
        assert!(g.get(&(1, 1)).is_none());
        assert_eq!(g.get(&(2, 5)).map(|e| e.entity), Some(5));
    }
}
