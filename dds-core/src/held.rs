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
//! announcement, [`Gone`]), so its last samples are judged as its others were.
//!
//! A publisher's `set_qos` may move its writers to other PARTITION names. Each sample
//! carries the tag of the names it was written under, and the writer announces the new
//! names before its samples carry their tag: a sample whose tag the table does not name
//! yet is held the same way, and one written under names the writer has left since is
//! judged by those ([`Former`]), so every reader takes what was written in its
//! partitions, before and after the move, and the same at every participant. Held
//! samples are copies, at most [`HELD_BYTES_MAX`] bytes per reader (past it the oldest
//! is judged with the table as it is), and a view change judges whatever is still held;
//! a sample the table still cannot judge then is not taken, and counts in the reader's
//! SAMPLE_LOST status.

use std::collections::VecDeque;

use std::collections::BTreeMap;

use spindle_qos::Partition;

use crate::cache::Origin;
use crate::discovery::{partition_tag, Endpoint, EndpointKey};
use crate::sample::{SampleHeader, SampleKind, WriterHandle};

/// Most bytes of samples one reader holds back waiting for a writer's announcement.
pub const HELD_BYTES_MAX: usize = 16 << 20;

/// How many deleted writers' last announcements a participant keeps ([`Gone`]).
pub const GONE_ENDPOINTS_MAX: usize = 1024;

/// How many PARTITION name sets a writer left (by its publisher's `set_qos`) the table
/// keeps for it ([`Former`]), the oldest going first.
pub const FORMER_PARTITIONS_MAX: usize = 8;

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
    /// first that `known` (given its writer and partition tag) says the table cannot
    /// judge yet (all of them with `all`), and the oldest ones while more than
    /// [`HELD_BYTES_MAX`] bytes are held.
    pub(crate) fn ready(
        &mut self,
        known: &dyn Fn(&WriterHandle, u32) -> bool,
        all: bool,
    ) -> Vec<(SampleHeader, Vec<u8>, Origin)> {
        let mut out = Vec::new();
        while let Some((h, _, o)) = self.samples.front() {
            let judged_now = all
                || self.bytes > HELD_BYTES_MAX
                || !needs_writer(h)
                || known(&h.writer(o.node), h.partition_tag);
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

/// The last announcements of writers deleted recently, newest last, with the names
/// each left before ([`Former`]): samples of theirs delivered after the deletion was
/// applied here are judged by them. Kept while their participant stays in the view.
#[derive(Debug, Default)]
pub(crate) struct Gone {
    endpoints: VecDeque<(EndpointKey, Endpoint, Option<Former>)>,
}

impl Gone {
    /// Keeps the last announcement of deleted endpoint `key`, and the names it left.
    pub(crate) fn keep(&mut self, key: EndpointKey, e: Endpoint, former: Option<Former>) {
        if self.endpoints.len() >= GONE_ENDPOINTS_MAX {
            self.endpoints.pop_front();
        }
        self.endpoints.push_back((key, e, former));
    }

    /// Forgets the endpoints of participants not in `members` (they left the view): a
    /// node id back later is another incarnation, whose entity ids start over.
    pub(crate) fn retain_nodes(&mut self, members: &[spindle_transport_rdma::NodeId]) {
        self.endpoints
            .retain(|((node, _), _, _)| members.contains(node));
    }

    /// The last announcement of deleted endpoint `key`, and the names it left, if kept.
    pub(crate) fn get(&self, key: &EndpointKey) -> Option<(&Endpoint, Option<&Former>)> {
        self.endpoints
            .iter()
            .rev()
            .find(|(k, _, _)| k == key)
            .map(|(_, e, f)| (e, f.as_ref()))
    }
}

/// The PARTITION names one writer left, by tag, newest last: its samples written before
/// the move and delivered after the table took its new names are judged by these. At
/// most [`FORMER_PARTITIONS_MAX`]; once one went, a tag the writer does not name is no
/// longer taken as one still to come ([`Former::overflowed`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Former {
    names: VecDeque<(u32, Partition)>,
    overflowed: bool,
}

impl Former {
    /// The names the writer put `tag` in its samples under, if it left them.
    pub(crate) fn names(&self, tag: u32) -> Option<&Partition> {
        self.names
            .iter()
            .rev()
            .find(|(t, _)| *t == tag)
            .map(|(_, p)| p)
    }

    /// Whether it lost names past [`FORMER_PARTITIONS_MAX`]: a tag of the writer that
    /// neither its announcement nor these name may be one of those.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }
}

/// Per live writer of the table, the PARTITION names it left ([`Former`]).
#[derive(Debug, Default)]
pub(crate) struct FormerNames {
    writers: BTreeMap<EndpointKey, Former>,
}

impl FormerNames {
    /// Writer `key`'s announcement changes from `old` to `new`: notes the names it left,
    /// if they differ, and forgets `new`'s among those it left (they are its own again).
    pub(crate) fn moved(&mut self, key: EndpointKey, old: &Endpoint, new: &Endpoint) {
        if old.reader || new.reader || old.partition == new.partition {
            return;
        }
        let f = self.writers.entry(key).or_default();
        let (left, back) = (
            partition_tag(&old.partition.name),
            partition_tag(&new.partition.name),
        );
        f.names.retain(|(t, _)| *t != left && *t != back);
        if f.names.len() >= FORMER_PARTITIONS_MAX {
            f.names.pop_front();
            f.overflowed = true;
        }
        f.names.push_back((left, old.partition.clone()));
    }

    /// The names writer `key` left, if any.
    pub(crate) fn get(&self, key: &EndpointKey) -> Option<&Former> {
        self.writers.get(key)
    }

    /// Takes writer `key`'s (it was deleted: [`Gone`] keeps them).
    pub(crate) fn remove(&mut self, key: &EndpointKey) -> Option<Former> {
        self.writers.remove(key)
    }

    /// Forgets the writers of participants not in `members`, as [`Gone::retain_nodes`].
    pub(crate) fn retain_nodes(&mut self, members: &[spindle_transport_rdma::NodeId]) {
        self.writers.retain(|(node, _), _| members.contains(node));
    }
}

/// What the built-in table lets a reader do with a sample of a writer, given its tag
/// ([`crate::shared::State::judging`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Judging<'e> {
    /// Hold it back: the table does not name its writer yet, or not the names a live
    /// writer tagged it with (their announcement is on its way).
    Wait,
    /// Judge it by the names its writer tagged it with (any, for tag 0: the default
    /// partition needs no names).
    Under(&'e Partition),
    /// Not taken: the sender's entity is no writer, or no names of its tag will come.
    Refused,
}

/// What the built-in table holds of a sample's writer: its last announcement, the
/// names it left, and whether it is live (not deleted).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Announced<'e> {
    pub(crate) endpoint: &'e Endpoint,
    pub(crate) former: Option<&'e Former>,
    pub(crate) live: bool,
}

/// Judges a sample tagged `tag` by what the table holds of its writer (`None`: not
/// announced yet): by the names it carries that tag under, its announced ones or ones
/// it left; held back while a live writer's announcement of them may still come.
pub(crate) fn judge(found: Option<Announced<'_>>, tag: u32) -> Judging<'_> {
    let Some(a) = found else {
        return Judging::Wait;
    };
    let e = a.endpoint;
    if e.reader {
        return Judging::Refused;
    }
    if tag == 0 || partition_tag(&e.partition.name) == tag {
        return Judging::Under(&e.partition);
    }
    match a.former.and_then(|f| f.names(tag)) {
        Some(names) => Judging::Under(names),
        None if a.live && !a.former.is_some_and(Former::overflowed) => Judging::Wait,
        None => Judging::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entity `entity`'s announcement on topic 1: a reader if `reader`, in PARTITION
    /// `names`.
    fn endpoint(entity: u32, reader: bool, names: &[String]) -> Endpoint {
        Endpoint {
            entity,
            topic_id: 1,
            type_id: 2,
            type_hash: None,
            reader,
            level: spindle_qos::DeliveryLevel::Atomic,
            partition: Partition {
                name: names.to_vec(),
            },
            liveliness: Default::default(),
            lease_us: None,
            rxo: Default::default(),
        }
    }

    /// Deleted writers' announcements are kept newest last, at most
    /// [`GONE_ENDPOINTS_MAX`]; the newest for a key wins.
    #[test]
    fn gone_keeps_the_latest_announcements_up_to_its_bound() {
        let e = |entity| endpoint(entity, false, &[]);
        let mut g = Gone::default();
        for i in 0..=GONE_ENDPOINTS_MAX as u32 {
            g.keep((1, i), e(i), None);
        }
        assert!(g.get(&(1, 0)).is_none(), "the oldest went");
        assert_eq!(g.get(&(1, 1)).map(|(e, _)| e.entity), Some(1));
        g.keep((1, 1), e(99), None);
        assert_eq!(g.get(&(1, 1)).map(|(e, _)| e.entity), Some(99));
        // Node 1 left the view: a node 1 back later is another incarnation.
        g.keep((2, 5), e(5), Some(Former::default()));
        g.retain_nodes(&[2, 3]);
        assert!(g.get(&(1, 1)).is_none());
        assert_eq!(
            g.get(&(2, 5)).map(|(e, f)| (e.entity, f.is_some())),
            Some((5, true))
        );
    }

    /// A sample is judged by the names its writer tagged it with, announced or left;
    /// held while a live writer's names may still come; refused when none will.
    #[test]
    fn a_sample_is_judged_by_the_names_its_tag_was_written_under() {
        let at = |reader, name: &str| endpoint(4, reader, &[name.to_string()]);
        let (a, b, c) = (at(false, "a"), at(false, "b"), at(false, "c"));
        let tag = |e: &Endpoint| partition_tag(&e.partition.name);
        let mut f = FormerNames::default();
        f.moved((1, 4), &a, &b);
        let left = f.get(&(1, 4));
        let found = |endpoint, former, live| {
            Some(Announced {
                endpoint,
                former,
                live,
            })
        };
        assert_eq!(judge(None, tag(&a)), Judging::Wait, "not announced yet");
        assert_eq!(
            judge(found(&b, left, true), 0),
            Judging::Under(&b.partition)
        );
        assert_eq!(
            judge(found(&b, left, true), tag(&b)),
            Judging::Under(&b.partition)
        );
        assert_eq!(
            judge(found(&b, left, true), tag(&a)),
            Judging::Under(&a.partition),
            "written before the move"
        );
        assert_eq!(
            judge(found(&b, left, true), tag(&c)),
            Judging::Wait,
            "its move to c is on its way"
        );
        assert_eq!(
            judge(found(&b, left, false), tag(&c)),
            Judging::Refused,
            "deleted: no move will come"
        );
        let reader = at(true, "a");
        assert_eq!(judge(found(&reader, None, true), tag(&a)), Judging::Refused);
    }

    /// A writer's left names are kept by tag, newest last, at most
    /// [`FORMER_PARTITIONS_MAX`] (then marked overflowed); names it takes again are its
    /// own, not left; a reader's moves and unchanged names note nothing.
    #[test]
    fn former_names_keep_what_a_writer_left_up_to_their_bound() {
        let at = |reader, names: &[String]| endpoint(4, reader, names);
        let name = |i: usize| vec![format!("p{i}")];
        let tag = |i: usize| partition_tag(&name(i));
        let mut f = FormerNames::default();
        let key = (1, 4);
        f.moved(key, &at(true, &name(0)), &at(true, &name(1)));
        f.moved(key, &at(false, &name(0)), &at(false, &name(0)));
        assert!(f.get(&key).is_none(), "a reader's move, or none");
        f.moved(key, &at(false, &name(0)), &at(false, &name(1)));
        f.moved(key, &at(false, &name(1)), &at(false, &name(0)));
        let left = f.get(&key).unwrap();
        assert_eq!(left.names(tag(1)), Some(&Partition { name: name(1) }));
        assert_eq!(left.names(tag(0)), None, "p0 is its own again");
        for i in 2..=FORMER_PARTITIONS_MAX + 1 {
            f.moved(key, &at(false, &name(i - 1)), &at(false, &name(i)));
        }
        assert!(!f.get(&key).unwrap().overflowed(), "p1 to p8 fit");
        let last = FORMER_PARTITIONS_MAX + 2;
        f.moved(key, &at(false, &name(last - 1)), &at(false, &name(last)));
        let left = f.get(&key).unwrap();
        assert!(left.overflowed());
        assert_eq!(left.names(tag(1)), None, "the oldest went");
        assert!(left.names(tag(last - 1)).is_some());
        f.retain_nodes(&[2]);
        assert!(f.remove(&key).is_none(), "node 1 left the view");
    }
}
