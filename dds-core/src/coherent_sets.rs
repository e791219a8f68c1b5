//! Coherent sets held back until they end ([`PendingSets`]): a reader's (copies of the
//! samples, `cache.rs`) and a store's (where the samples sit, `store.rs`). Bounded per
//! set and in all, since a set's samples come from a peer and an unended set is never
//! taken.

use std::collections::BTreeMap;

use crate::sample::{WriterHandle, COHERENT_SET_SAMPLES_MAX};

/// Most samples one reader holds back in all its unended coherent sets together. Each set
/// holds at most [`COHERENT_SET_SAMPLES_MAX`]; without this bound, writer ids that begin
/// sets and never end them would each hold that many copies until their writer leaves.
/// Enough for four sets of the longest kind at once, or a GROUP-scope set across many
/// writers.
pub const COHERENT_PENDING_SAMPLES_MAX: usize = 4 * COHERENT_SET_SAMPLES_MAX;

/// The unended coherent sets of one reader or store, by writer, each a list of `T` (what
/// is held of a sample), and how many they hold in all: at most `BOUND`. Every change
/// goes through these methods, which keep the count.
#[derive(Debug)]
pub(crate) struct PendingSets<T, const BOUND: usize> {
    sets: BTreeMap<WriterHandle, Vec<T>>,
    /// Items held in all `sets`.
    samples: usize,
}

impl<T, const BOUND: usize> Default for PendingSets<T, BOUND> {
    fn default() -> Self {
        PendingSets {
            sets: BTreeMap::new(),
            samples: 0,
        }
    }
}

/// What [`PendingSets::hold`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hold<T> {
    /// Held until its set ends.
    Held,
    /// The writer has no open set here (its first sample was missed, or its set was
    /// dropped): not held.
    NoSet,
    /// Past a bound: the whole set was dropped (returned, to recycle its buffers).
    Dropped(Vec<T>),
}

impl<T, const BOUND: usize> PendingSets<T, BOUND> {
    /// Items held in all sets.
    pub(crate) fn samples(&self) -> usize {
        self.samples
    }

    /// Opens an empty set for `writer`; returns the set it left unended, if any.
    pub(crate) fn open(&mut self, writer: WriterHandle) -> Option<Vec<T>> {
        let old = self.sets.insert(writer, Vec::new());
        self.forget(old)
    }

    /// Takes `writer`'s set out (it ended, or it never will).
    pub(crate) fn remove(&mut self, writer: &WriterHandle) -> Option<Vec<T>> {
        let set = self.sets.remove(writer);
        self.forget(set)
    }

    /// Holds `item` in `writer`'s open set, unless the set is full
    /// ([`COHERENT_SET_SAMPLES_MAX`]), or the sets hold `BOUND` items, or `room` (what
    /// else the holder may hold, a reader's RESOURCE_LIMITS) is used up: then the set is
    /// dropped whole, as every holder with the same bounds drops it.
    pub(crate) fn hold(&mut self, writer: WriterHandle, item: T, room: usize) -> Hold<T> {
        let Some(set) = self.sets.get_mut(&writer) else {
            return Hold::NoSet;
        };
        if set.len() < COHERENT_SET_SAMPLES_MAX && self.samples < BOUND && self.samples < room {
            set.push(item);
            self.samples += 1;
            return Hold::Held;
        }
        Hold::Dropped(self.remove(&writer).unwrap_or_default())
    }

    /// The writers with an open set.
    pub(crate) fn writers(&self) -> impl Iterator<Item = &WriterHandle> {
        self.sets.keys()
    }

    fn forget(&mut self, set: Option<Vec<T>>) -> Option<Vec<T>> {
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

    /// The items in all sets, counted one by one (for tests of the count).
    #[cfg(test)]
    pub(crate) fn recount(&self) -> usize {
        self.sets.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's sets, each held sample standing for its copy by its sequence number.
    type ReaderSets = PendingSets<u64, COHERENT_PENDING_SAMPLES_MAX>;

    fn held(seq: u64) -> u64 {
        seq
    }

    #[test]
    fn made_up_writers_cannot_hold_more_than_the_reader_wide_bound() {
        let mut p = ReaderSets::default();
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
        let total = p.recount();
        assert_eq!(total, p.samples(), "the count is the sum of the sets");
        // Ending (removing) a set frees its room.
        let w = *p.writers().next().unwrap();
        let n = p.remove(&w).unwrap().len();
        assert_eq!(p.samples(), total - n);
    }

    #[test]
    fn a_set_is_dropped_at_the_readers_room_and_at_its_own_bound() {
        let mut p = ReaderSets::default();
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
