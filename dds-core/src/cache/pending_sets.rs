//! A reader's coherent sets held back until they end ([`PendingSets`]): bounded per set
//! and in all, since a set's samples come from a peer and an unended set is never taken.

use std::collections::BTreeMap;

use super::Origin;
use crate::sample::{SampleHeader, WriterHandle, COHERENT_SET_SAMPLES_MAX};

/// Most samples one reader holds back in all its unended coherent sets together. Each set
/// holds at most [`COHERENT_SET_SAMPLES_MAX`]; without this bound, writer ids that begin
/// sets and never end them would each hold that many copies until their writer leaves.
/// Enough for four sets of the longest kind at once, or a GROUP-scope set across many
/// writers.
pub const COHERENT_PENDING_SAMPLES_MAX: usize = 4 * COHERENT_SET_SAMPLES_MAX;

/// One held-back sample: its header, a copy of its bytes, where it was delivered.
pub(crate) type Held = (SampleHeader, Vec<u8>, Origin);

/// The unended coherent sets of one reader, by writer, and how many samples they hold.
/// Every change goes through these methods, which keep the count.
#[derive(Debug, Default)]
pub(crate) struct PendingSets {
    sets: BTreeMap<WriterHandle, Vec<Held>>,
    /// Samples held in all `sets`.
    samples: usize,
}

/// What [`PendingSets::hold`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Held until its set ends.
    Held,
    /// The writer has no open set here (this reader missed its first sample): not held.
    NoSet,
    /// Past a bound: the whole set was dropped (returned, to recycle its buffers).
    Dropped(Vec<Held>),
}

impl PendingSets {
    /// Samples held in all sets.
    pub(crate) fn samples(&self) -> usize {
        self.samples
    }

    /// Opens an empty set for `writer`; returns the set it left unended, if any.
    pub(crate) fn open(&mut self, writer: WriterHandle) -> Option<Vec<Held>> {
        let old = self.sets.insert(writer, Vec::new());
        self.forget(old)
    }

    /// Takes `writer`'s set out (it ended, or it never will).
    pub(crate) fn remove(&mut self, writer: &WriterHandle) -> Option<Vec<Held>> {
        let set = self.sets.remove(writer);
        self.forget(set)
    }

    /// Holds `sample` in `writer`'s open set, unless the set is full
    /// ([`COHERENT_SET_SAMPLES_MAX`]), or the reader's sets hold
    /// [`COHERENT_PENDING_SAMPLES_MAX`] samples, or `room` (what else the reader may hold,
    /// RESOURCE_LIMITS) is used up: then the set is dropped whole, as every reader with
    /// the same bounds drops it.
    pub(crate) fn hold(&mut self, writer: WriterHandle, sample: Held, room: usize) -> Hold {
        let Some(set) = self.sets.get_mut(&writer) else {
            return Hold::NoSet;
        };
        if set.len() < COHERENT_SET_SAMPLES_MAX
            && self.samples < COHERENT_PENDING_SAMPLES_MAX
            && self.samples < room
        {
            set.push(sample);
            self.samples += 1;
            return Hold::Held;
        }
        Hold::Dropped(self.remove(&writer).unwrap_or_default())
    }

    /// The writers with an open set.
    pub(crate) fn writers(&self) -> impl Iterator<Item = &WriterHandle> {
        self.sets.keys()
    }

    fn forget(&mut self, set: Option<Vec<Held>>) -> Option<Vec<Held>> {
        if let Some(s) = &set {
            // The count is the sum of the sets' lengths (every change passes here or
            // through `hold`).
            assert!(
                self.samples >= s.len(),
                "pending count covers every held sample"
            );
            self.samples -= s.len();
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{Coherent, SampleKind};
    use spindle_qos::DeliveryLevel;
    use spindle_topics::KeyHash;

    fn held(seq: u64) -> Held {
        let h = SampleHeader {
            kind: SampleKind::Data,
            writer_id: 1,
            topic_id: 1,
            writer_seq: seq,
            source_timestamp_ns: 0,
            key_hash: KeyHash::default(),
            lifespan_ns: 0,
            ownership_strength: 0,
            level: DeliveryLevel::Atomic,
            partition_tag: 0,
            coherent: Coherent::Continues,
        };
        let o = Origin {
            node: 1,
            view_id: 1,
            order_index: seq,
        };
        (h, vec![0; 8], o)
    }

    #[test]
    fn made_up_writers_cannot_hold_more_than_the_reader_wide_bound() {
        let mut p = PendingSets::default();
        let mut dropped = 0;
        // A peer opens sets under ever new writer ids and fills each, never ending any.
        for id in 0..64u32 {
            let w = WriterHandle {
                node: 9,
                writer_id: id,
            };
            assert!(p.open(w).is_none());
            for seq in 0..COHERENT_SET_SAMPLES_MAX as u64 {
                match p.hold(w, held(seq), usize::MAX) {
                    Hold::Held => {}
                    Hold::Dropped(set) => {
                        dropped += 1;
                        assert!(!set.is_empty() || seq == 0);
                        break;
                    }
                    Hold::NoSet => panic!("the set was opened"),
                }
            }
            assert!(p.samples() <= COHERENT_PENDING_SAMPLES_MAX);
        }
        assert!(dropped > 0, "the bound was reached");
        let total: usize = p.sets.values().map(Vec::len).sum();
        assert_eq!(total, p.samples(), "the count is the sum of the sets");
        // Ending (removing) a set frees its room.
        let w = *p.writers().next().unwrap();
        let n = p.remove(&w).unwrap().len();
        assert_eq!(p.samples(), total - n);
    }

    #[test]
    fn a_set_is_dropped_at_the_readers_room_and_at_its_own_bound() {
        let mut p = PendingSets::default();
        let w = WriterHandle {
            node: 2,
            writer_id: 1,
        };
        p.open(w);
        for seq in 0..3 {
            assert_eq!(p.hold(w, held(seq), 3), Hold::Held);
        }
        assert!(matches!(p.hold(w, held(3), 3), Hold::Dropped(s) if s.len() == 3));
        assert_eq!(p.samples(), 0);
        assert_eq!(
            p.hold(w, held(4), 3),
            Hold::NoSet,
            "a dropped set holds nothing more"
        );
        p.open(w);
        for seq in 0..COHERENT_SET_SAMPLES_MAX as u64 {
            assert_eq!(p.hold(w, held(seq), usize::MAX), Hold::Held);
        }
        assert!(matches!(p.hold(w, held(0), usize::MAX), Hold::Dropped(_)));
    }
}
