//! The interop workload and its checker.

use std::collections::{BTreeMap, BTreeSet};

/// How many instances the workload cycles through.
pub const KEYS: u64 = 8;

/// The instance every writer disposes after its last sample.
pub const DISPOSED_KEY: &str = "k0";

/// The key of sample `seq`.
pub fn key_of(seq: u64) -> String {
    format!("k{}", seq % KEYS)
}

/// The value of writer `writer`'s sample `seq`, padded with a pattern to `bytes` bytes
/// (at least the 16-byte prefix).
pub fn value_of(writer: u32, seq: u64, bytes: usize) -> String {
    let mut v = format!("w{writer:03}-s{seq:010}-");
    let mut i = 0u8;
    while v.len() < bytes {
        v.push((b'a' + i % 26) as char);
        i = i.wrapping_add(1);
    }
    v
}

/// Parses `w<writer>-s<seq>-…` back to `(writer, seq)`.
pub fn parse_value(value: &str) -> Option<(u32, u64)> {
    let rest = value.strip_prefix('w')?;
    let (w, rest) = rest.split_once("-s")?;
    let (s, _) = rest.split_once('-')?;
    Some((w.parse().ok()?, s.parse().ok()?))
}

/// What a subscriber saw, checked as it arrives.
#[derive(Debug, Default)]
pub struct Checker {
    count: u64,
    payload_bytes: usize,
    next: BTreeMap<u32, u64>,
    disposed_by_writer: BTreeSet<u32>,
    disposes: u64,
    samples: u64,
    problems: Vec<String>,
    order_hash: u64,
}

/// Most problems a checker keeps verbatim (it still counts the rest).
pub const PROBLEMS_KEPT_MAX: usize = 20;

impl Checker {
    /// A checker expecting `count` samples of `payload_bytes` from each writer.
    pub fn new(count: u64, payload_bytes: usize) -> Checker {
        Checker {
            count,
            payload_bytes,
            order_hash: 0xcbf2_9ce4_8422_2325,
            ..Checker::default()
        }
    }

    fn problem(&mut self, p: String) {
        if self.problems.len() < PROBLEMS_KEPT_MAX {
            self.problems.push(p);
        } else if self.problems.len() == PROBLEMS_KEPT_MAX {
            self.problems.push("… more problems".into());
        }
    }

    /// A data sample.
    pub fn data(&mut self, key: &str, value: &str) {
        self.samples += 1;
        let Some((w, s)) = parse_value(value) else {
            self.problem(format!("value {value:?} is not a workload value"));
            return;
        };
        for b in w.to_le_bytes().iter().chain(s.to_le_bytes().iter()) {
            self.order_hash = (self.order_hash ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        let next = self.next.entry(w).or_insert(0);
        if s != *next {
            let want = *next;
            self.problem(format!("writer {w}: sample {s} where {want} was due"));
        }
        *self.next.get_mut(&w).unwrap_or(&mut 0) = s + 1;
        if key != key_of(s) {
            self.problem(format!(
                "writer {w} sample {s}: key {key:?}, not {:?}",
                key_of(s)
            ));
        }
        if value != value_of(w, s, self.payload_bytes) {
            self.problem(format!("writer {w} sample {s}: payload bytes differ"));
        }
    }

    /// A dispose of instance `key` (by the writer whose samples were last seen on it,
    /// when the stack does not say which writer disposed).
    pub fn dispose(&mut self, key: &str) {
        self.disposes += 1;
        if key != DISPOSED_KEY {
            self.problem(format!("dispose of {key:?}, not {DISPOSED_KEY:?}"));
        }
        // Count it for the first writer that finished and has no dispose yet.
        let done: Vec<u32> = self
            .next
            .iter()
            .filter(|(_, n)| **n >= self.count)
            .map(|(w, _)| *w)
            .collect();
        match done
            .into_iter()
            .find(|w| !self.disposed_by_writer.contains(w))
        {
            Some(w) => {
                self.disposed_by_writer.insert(w);
            }
            None => self.problem(format!("dispose of {key:?} before a writer finished")),
        }
    }

    /// True once `writers` writers each delivered every sample and their dispose.
    pub fn complete(&self, writers: usize) -> bool {
        self.next.len() >= writers
            && self.next.values().all(|n| *n >= self.count)
            && self.disposed_by_writer.len() >= writers
    }

    /// Samples seen in all.
    pub fn received(&self) -> u64 {
        self.samples
    }

    /// What went wrong (empty when nothing did).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// FNV-1a over the `(writer, seq)` of every data sample in arrival order: two readers
    /// that saw the same samples in the same order have the same hash.
    pub fn order_hash(&self) -> u64 {
        self.order_hash
    }

    /// The one-line summary every subscriber peer prints.
    pub fn summary(&self, writers: usize) -> String {
        format!(
            "{} received={} writers={} disposes={} problems={} order={:016x}",
            if self.complete(writers) && self.problems.is_empty() {
                "OK"
            } else {
                "INCOMPLETE"
            },
            self.received(),
            self.next.len(),
            self.disposes,
            self.problems.len(),
            self.order_hash
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_stream_is_complete_and_a_gap_or_swap_is_a_problem() {
        let mut c = Checker::new(3, 40);
        for s in 0..3 {
            c.data(&key_of(s), &value_of(1, s, 40));
        }
        assert!(!c.complete(1), "no dispose yet");
        c.dispose(DISPOSED_KEY);
        assert!(
            c.complete(1) && c.problems().is_empty(),
            "{:?}",
            c.problems()
        );
        assert!(c.summary(1).starts_with("OK received=3"));

        let mut c = Checker::new(3, 40);
        c.data(&key_of(1), &value_of(2, 1, 40));
        c.data(&key_of(0), &value_of(2, 0, 40));
        assert!(!c.problems().is_empty());
        let mut c = Checker::new(3, 40);
        c.data(&key_of(1), &value_of(2, 0, 40));
        c.data(&key_of(1), &value_of(2, 1, 41));
        assert_eq!(c.problems().len(), 2, "{:?}", c.problems());
    }

    #[test]
    fn values_parse_back() {
        assert_eq!(parse_value(&value_of(7, 123, 64)), Some((7, 123)));
        assert_eq!(value_of(7, 123, 64).len(), 64);
        assert_eq!(parse_value("nonsense"), None);
    }
}

/// What a reader of the semantic comparison holds: its samples as `(writer, seq)` in
/// arrival order.
#[derive(Debug, Default)]
pub struct Record {
    order: Vec<(u32, u64)>,
}

impl Record {
    /// A data sample with workload value `value`.
    pub fn data(&mut self, value: &str) {
        if let Some(ws) = parse_value(value) {
            self.order.push(ws);
        }
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// `RECORD samples=N set=<hash of the sorted samples> order=<hash in arrival order>`:
    /// readers with the same samples have the same `set`; in the same order, the same
    /// `order`.
    pub fn line(&self) -> String {
        let hash = |it: &mut dyn Iterator<Item = &(u32, u64)>| {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for (w, s) in it {
                for b in w.to_le_bytes().iter().chain(s.to_le_bytes().iter()) {
                    h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
                }
            }
            h
        };
        let mut sorted = self.order.clone();
        sorted.sort_unstable();
        format!(
            "RECORD samples={} set={:016x} order={:016x}",
            self.order.len(),
            hash(&mut sorted.iter()),
            hash(&mut self.order.iter())
        )
    }
}

/// How long a recording reader waits, after its last sample, before it reports.
pub const RECORD_QUIET_MS: u64 = 3_000;
