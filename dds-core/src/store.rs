//! The volatile store of a store-level subgroup (docs/design.md §4, VolatileStore): every member
//! keeps the subgroup's recent messages, per topic and instance, bounded by the depth the
//! members declared. Members see the same deliveries in the same views, so their stores
//! are identical; a member that newly enters the subgroup gets one by state transfer.

use std::collections::{BTreeMap, VecDeque};

use spindle_topics::KeyHash;

use crate::cache::Origin;
use crate::coherent_sets::PendingSets;
use crate::error::{Error, Result};
use crate::sample::{Coherent, SampleHeader, SampleKind, WriterHandle};
use spindle_transport_rdma::NodeId;

/// Most messages one store keeps (the oldest go first).
pub const STORE_SAMPLES_MAX: usize = 65_536;
/// Most bytes one store keeps (it must fit one state transfer).
pub const STORE_BYTES_MAX: usize = spindle_group::group::STATE_BYTES_MAX - 1024;

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Where it came from and sits in the order.
    pub origin: Origin,
    /// The whole message: header and CDR payload.
    pub bytes: Vec<u8>,
}

/// The store. See the module docs.
#[derive(Debug, Default)]
pub struct Store {
    next: u64,
    order: BTreeMap<u64, Stored>,
    per_instance: BTreeMap<(u64, KeyHash), VecDeque<u64>>,
    bytes: usize,
    /// Coherent sets not ended yet, per writer (node, writer id): where their samples sit.
    /// An ended set's samples are stored as plain samples and its end is not stored, so
    /// a later reader gets every finished set and no unfinished one; replaying a snapshot
    /// rebuilds this from the samples still marked.
    /// At most [`STORE_SAMPLES_MAX`] places in all (more than the store holds samples
    /// would only name evicted ones), so writer ids that begin sets and never end them
    /// cannot grow the store past its bounds.
    open_sets: PendingSets<u64, STORE_SAMPLES_MAX>,
}

impl Store {
    /// Adds a delivered message; `depth` (0: keep all) bounds each instance.
    pub fn push(&mut self, h: &SampleHeader, origin: Origin, bytes: &[u8], depth: u16) {
        let writer = h.writer(origin.node);
        match h.kind {
            SampleKind::Liveliness => return,
            SampleKind::CoherentEnd => {
                self.end_sets(&[writer]);
                return;
            }
            SampleKind::GroupCoherentEnd => {
                // A GROUP-scope publisher's end: every set it lists ends (a bad list, a
                // peer's, ends none: the delivery path logged it).
                let payload = bytes
                    .get(crate::sample::SAMPLE_HEADER_BYTES..)
                    .unwrap_or(&[]);
                let ids = crate::sample::decode_group_end(payload).unwrap_or_default();
                let writers: Vec<_> = ids
                    .into_iter()
                    .map(|writer_id| WriterHandle {
                        node: origin.node,
                        writer_id,
                    })
                    .collect();
                self.end_sets(&writers);
                return;
            }
            _ => {}
        }
        let key = (h.topic_id, h.key_hash);
        let q = self.per_instance.entry(key).or_default();
        let at = self.next;
        self.next += 1;
        q.push_back(at);
        let mut evict = Vec::new();
        if depth > 0 {
            while q.len() > usize::from(depth) {
                if let Some(old) = q.pop_front() {
                    evict.push(old);
                }
            }
        }
        for old in evict {
            if let Some(s) = self.order.remove(&old) {
                self.bytes -= s.bytes.len();
            }
        }
        self.bytes += bytes.len();
        self.order.insert(
            at,
            Stored {
                origin,
                bytes: bytes.to_vec(),
            },
        );
        match h.coherent {
            Coherent::No => {}
            mark => {
                // A set left unended by this writer stays marked: never handed out.
                if mark == Coherent::Begins {
                    self.open_sets.open(writer);
                }
                // Past a bound (a peer's), the set is dropped, left unended likewise.
                self.open_sets.hold(writer, at, usize::MAX);
            }
        }
        while self.order.len() > STORE_SAMPLES_MAX || self.bytes > STORE_BYTES_MAX {
            let Some((old, s)) = self.order.pop_first() else {
                break;
            };
            self.bytes -= s.bytes.len();
            if let Ok((h, _)) = SampleHeader::decode(&s.bytes) {
                if let Some(q) = self.per_instance.get_mut(&(h.topic_id, h.key_hash)) {
                    q.retain(|x| *x != old);
                }
            }
        }
        self.per_instance.retain(|_, q| !q.is_empty());
    }

    /// The coherent sets of `writers` ended: their samples stand alone from now on.
    fn end_sets(&mut self, writers: &[WriterHandle]) {
        for w in writers {
            for at in self.open_sets.remove(w).unwrap_or_default() {
                if let Some(s) = self.order.get_mut(&at) {
                    SampleHeader::clear_coherent(&mut s.bytes);
                }
            }
        }
    }

    /// The stored messages, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Stored> {
        self.order.values()
    }

    /// Messages held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The union of two stores of one subgroup (a member's, and what a log recovered):
    /// each message once, by its place in the order `(view_id, order_index)`, oldest
    /// first; `depth` as in [`Store::push`].
    pub fn merged(a: &Store, b: &Store, depth: u16) -> Store {
        let mut all: BTreeMap<(u32, u64), &Stored> = BTreeMap::new();
        for s in a.iter().chain(b.iter()) {
            all.entry((s.origin.view_id, s.origin.order_index))
                .or_insert(s);
        }
        let mut out = Store::default();
        for s in all.values() {
            if let Ok((h, _)) = SampleHeader::decode(&s.bytes) {
                out.push(&h, s.origin, &s.bytes, depth);
            }
        }
        out
    }

    /// What a log recovered (`recovered`) that is consistent with the store a member
    /// shipped (`shipped`): its samples up to the newest one `shipped` also holds. Past
    /// it, the log held what was delivered here before a total failure but not kept by
    /// the restarted domain, which went on without it (the same cut the log gets,
    /// [`spindle_group::persist::Persister`]'s state install).
    pub fn consistent_with(recovered: &Store, shipped: &Store) -> Store {
        // A sample's identity: its place, writer and source timestamp (the bytes may
        // differ in a coherent-set flag the store clears).
        let id = |s: &Stored| {
            let at_ns = SampleHeader::decode(&s.bytes).map_or(0, |(h, _)| h.source_timestamp_ns);
            (s.origin.node, at_ns)
        };
        let held: BTreeMap<(u32, u64), (NodeId, i64)> = shipped
            .iter()
            .map(|s| ((s.origin.view_id, s.origin.order_index), id(s)))
            .collect();
        let shared = recovered
            .iter()
            .filter(|s| held.get(&(s.origin.view_id, s.origin.order_index)) == Some(&id(s)))
            .map(|s| (s.origin.view_id, s.origin.order_index))
            .max();
        let mut out = Store::default();
        for s in recovered.iter() {
            if Some((s.origin.view_id, s.origin.order_index)) <= shared {
                if let Ok((h, _)) = SampleHeader::decode(&s.bytes) {
                    out.push(&h, s.origin, &s.bytes, 0);
                }
            }
        }
        out
    }

    /// The store as a state-transfer snapshot.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes + self.order.len() * 24);
        out.extend_from_slice(&(self.order.len() as u32).to_le_bytes());
        for s in self.order.values() {
            out.extend_from_slice(&s.origin.node.to_le_bytes());
            out.extend_from_slice(&s.origin.view_id.to_le_bytes());
            out.extend_from_slice(&s.origin.order_index.to_le_bytes());
            out.extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&s.bytes);
        }
        out
    }

    /// A store from a snapshot a peer sent (bounds-checked; `depth` as in [`Store::push`]).
    pub fn from_snapshot(bytes: &[u8], depth: u16) -> Result<Store> {
        let mut store = Store::default();
        if bytes.is_empty() {
            return Ok(store);
        }
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let end = at
                .checked_add(n)
                .filter(|e| *e <= bytes.len())
                .ok_or_else(|| {
                    Error::Error(format!(
                        "store snapshot of {} bytes ends early at {at}",
                        bytes.len()
                    ))
                })?;
            let s = &bytes[at..end];
            at = end;
            Ok(s)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let count = u32_of(take(4)?) as usize;
        if count > STORE_SAMPLES_MAX {
            return Err(Error::Error(format!("store snapshot of {count} messages")));
        }
        for _ in 0..count {
            let node = u32_of(take(4)?);
            let view_id = u32_of(take(4)?);
            let mut w = [0u8; 8];
            w.copy_from_slice(take(8)?);
            let order_index = u64::from_le_bytes(w);
            let len = u32_of(take(4)?) as usize;
            let msg = take(len)?;
            let (h, _) = SampleHeader::decode(msg)?;
            store.push(
                &h,
                Origin {
                    node,
                    view_id,
                    order_index,
                },
                msg,
                depth,
            );
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::COHERENT_SET_SAMPLES_MAX;
    use crate::sample::SAMPLE_HEADER_BYTES;

    fn msg(key: u8, seq: u64) -> (SampleHeader, Vec<u8>) {
        let h = SampleHeader {
            kind: SampleKind::Data,
            writer_id: 1,
            topic_id: 4,
            writer_seq: seq,
            source_timestamp_ns: 0,
            key_hash: KeyHash([key; 16]),
            lifespan_ns: 0,
            ownership_strength: 0,
            partition_tag: 0,
            coherent: Coherent::No,
            level: spindle_qos::DeliveryLevel::VolatileStore,
        };
        let mut b = [0u8; SAMPLE_HEADER_BYTES];
        h.encode(&mut b);
        let mut v = b.to_vec();
        v.extend_from_slice(&seq.to_le_bytes());
        (h, v)
    }

    #[test]
    fn unended_sets_of_made_up_writers_hold_at_most_the_stores_bound() {
        let mut s = Store::default();
        let per_set = COHERENT_SET_SAMPLES_MAX as u64;
        // A peer begins a set under ever new writer ids, fills each, ends none.
        let writers = (STORE_SAMPLES_MAX as u64 / per_set) + 4;
        let mut at = 0;
        for w in 0..writers {
            for k in 0..per_set {
                // Many instances: an eviction's per-instance search stays short.
                let (h, mut b) = msg((k % 251) as u8, k);
                let h = SampleHeader {
                    writer_id: w as u32,
                    coherent: if k == 0 {
                        Coherent::Begins
                    } else {
                        Coherent::Continues
                    },
                    ..h
                };
                let mut head = [0u8; SAMPLE_HEADER_BYTES];
                h.encode(&mut head);
                b[..SAMPLE_HEADER_BYTES].copy_from_slice(&head);
                let o = Origin {
                    node: 9,
                    view_id: 1,
                    order_index: at,
                };
                at += 1;
                s.push(&h, o, &b, 0);
                assert!(
                    s.open_sets.samples() <= STORE_SAMPLES_MAX,
                    "writer {w}, sample {k}"
                );
            }
        }
        assert_eq!(
            s.open_sets.recount(),
            s.open_sets.samples(),
            "the count is the sum of the sets"
        );
        assert!(
            s.open_sets.writers().count() < writers as usize,
            "some sets were let go"
        );
    }

    #[test]
    fn depth_bounds_each_instance_and_snapshots_roundtrip() {
        let mut s = Store::default();
        for i in 0..10u64 {
            let (h, b) = msg((i % 2) as u8, i);
            s.push(
                &h,
                Origin {
                    node: 1,
                    view_id: 2,
                    order_index: i,
                },
                &b,
                3,
            );
        }
        let seqs: Vec<u64> = s.iter().map(|m| m.origin.order_index).collect();
        assert_eq!(seqs, vec![4, 5, 6, 7, 8, 9]);
        let snap = s.snapshot();
        let t = Store::from_snapshot(&snap, 3).unwrap();
        assert_eq!(t.iter().collect::<Vec<_>>(), s.iter().collect::<Vec<_>>());
        for cut in [1, 5, snap.len() - 1] {
            assert!(
                Store::from_snapshot(&snap[..cut], 3).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_store_keeps_finished_coherent_sets_as_plain_samples_and_unfinished_ones_marked() {
        let push = |s: &mut Store, seq: u64, kind: SampleKind, coherent: Coherent| {
            let (h, mut b) = msg(seq as u8, seq);
            let h = SampleHeader {
                kind,
                coherent,
                ..h
            };
            let mut head = [0u8; SAMPLE_HEADER_BYTES];
            h.encode(&mut head);
            b[..SAMPLE_HEADER_BYTES].copy_from_slice(&head);
            let o = Origin {
                node: 1,
                view_id: 1,
                order_index: seq,
            };
            s.push(&h, o, &b, 0);
        };
        let marks = |s: &Store| -> Vec<Coherent> {
            s.iter()
                .map(|m| SampleHeader::decode(&m.bytes).unwrap().0.coherent)
                .collect()
        };
        let mut s = Store::default();
        push(&mut s, 1, SampleKind::Data, Coherent::Begins);
        push(&mut s, 2, SampleKind::Data, Coherent::Continues);
        push(&mut s, 3, SampleKind::CoherentEnd, Coherent::No);
        push(&mut s, 4, SampleKind::Data, Coherent::Begins);
        push(&mut s, 5, SampleKind::Liveliness, Coherent::No);
        // The finished set is plain, its end and the liveliness message are not kept, the
        // unfinished set stays marked.
        assert_eq!(
            marks(&s),
            [Coherent::No, Coherent::No, Coherent::Begins],
            "after the first set"
        );
        // A joiner's store from a snapshot knows the open set, and finishes it the same.
        let mut t = Store::from_snapshot(&s.snapshot(), 0).unwrap();
        for st in [&mut s, &mut t] {
            push(st, 6, SampleKind::Data, Coherent::Continues);
            push(st, 7, SampleKind::CoherentEnd, Coherent::No);
        }
        assert_eq!(marks(&s), [Coherent::No; 4]);
        assert_eq!(s.iter().collect::<Vec<_>>(), t.iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_group_coherent_end_finishes_the_sets_of_every_writer_it_lists() {
        // Writers 1 and 2 of one publisher (node 1), writer 3 outside the set.
        let push = |s: &mut Store, seq: u64, writer_id: u32, kind, coherent, body: &[u8]| {
            let (h, _) = msg(seq as u8, seq);
            let h = SampleHeader {
                kind,
                coherent,
                writer_id,
                ..h
            };
            let mut head = [0u8; SAMPLE_HEADER_BYTES];
            h.encode(&mut head);
            let mut b = head.to_vec();
            b.extend_from_slice(body);
            let o = Origin {
                node: 1,
                view_id: 1,
                order_index: seq,
            };
            s.push(&h, o, &b, 0);
        };
        let marks = |s: &Store| -> Vec<Coherent> {
            s.iter()
                .map(|m| SampleHeader::decode(&m.bytes).unwrap().0.coherent)
                .collect()
        };
        let mut s = Store::default();
        push(&mut s, 1, 1, SampleKind::Data, Coherent::Begins, b"a");
        push(&mut s, 2, 2, SampleKind::Data, Coherent::Begins, b"b");
        push(&mut s, 3, 3, SampleKind::Data, Coherent::Begins, b"c");
        push(&mut s, 4, 1, SampleKind::Data, Coherent::Continues, b"d");
        let end = crate::sample::encode_group_end(&[1, 2]).unwrap();
        push(
            &mut s,
            5,
            2,
            SampleKind::GroupCoherentEnd,
            Coherent::No,
            &end,
        );
        assert_eq!(
            marks(&s),
            [Coherent::No, Coherent::No, Coherent::Begins, Coherent::No],
            "writers 1 and 2 finished, writer 3's set still open, the end not kept"
        );
        // A bad list (a peer's) ends nothing.
        push(
            &mut s,
            6,
            3,
            SampleKind::GroupCoherentEnd,
            Coherent::No,
            b"xyz",
        );
        assert_eq!(marks(&s)[2], Coherent::Begins);
    }

    #[test]
    fn merged_stores_hold_each_message_once_in_order() {
        let push = |s: &mut Store, i: u64| {
            let (h, b) = msg(0, i);
            let o = Origin {
                node: 1,
                view_id: 2,
                order_index: i,
            };
            s.push(&h, o, &b, 0);
        };
        let (mut a, mut b) = (Store::default(), Store::default());
        for i in 0..6 {
            push(&mut a, i);
        }
        for i in 3..9 {
            push(&mut b, i);
        }
        let m = Store::merged(&a, &b, 0);
        let order: Vec<u64> = m.iter().map(|s| s.origin.order_index).collect();
        assert_eq!(order, (0..9).collect::<Vec<_>>());
        let m = Store::merged(&b, &a, 4);
        let order: Vec<u64> = m.iter().map(|s| s.origin.order_index).collect();
        assert_eq!(order, vec![5, 6, 7, 8], "depth 4 keeps the newest");
    }
}
