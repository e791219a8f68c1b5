//! PRESENTATION GROUP access scope: what a publisher's coherent sets and a subscriber's
//! ordered access span. Topics hash onto subgroups (`declare.rs`) and only the topics of
//! one subgroup share a total order, so GROUP scope is honoured over the topics of the
//! publisher (subscriber) that share one subgroup: [`GroupScope::admit`] refuses a writer
//! (reader) whose topic rides another subgroup than the entity's others — never a silent
//! weakening to TOPIC scope. [`order_by_position`] is the subscriber's one order across
//! its readers (`Subscriber::get_datareaders`). Sans-IO: no waits, no group.

use std::collections::BTreeMap;
use std::sync::Mutex;

use spindle_group::SubgroupId;
use spindle_qos::{Presentation, PresentationAccessScope};

use crate::cache::Position;
use crate::common::lock;
use crate::error::{Error, Result};

/// The topics of one GROUP-scope publisher or subscriber (one with `coherent_access` or
/// `ordered_access`: without either, GROUP scope promises nothing to keep).
#[derive(Debug)]
pub(crate) struct GroupScope {
    /// "publisher" or "subscriber", for errors.
    whose: &'static str,
    /// Its writers (readers) by entity id: topic name and subgroup.
    members: Mutex<BTreeMap<u32, (String, SubgroupId)>>,
}

impl GroupScope {
    /// The scope a publisher or subscriber with `p` keeps, if GROUP scope binds it.
    pub(crate) fn of(p: &Presentation, whose: &'static str) -> Option<GroupScope> {
        (p.access_scope == PresentationAccessScope::Group
            && (p.coherent_access || p.ordered_access))
            .then(|| GroupScope {
                whose,
                members: Mutex::new(BTreeMap::new()),
            })
    }

    /// Admits entity `id` on `topic`, carried by `subgroup` (of `topic_subgroups`):
    /// `Unsupported` if the entity's other topics ride another subgroup, naming both
    /// topics, both subgroups and the setting.
    pub(crate) fn admit(
        &self,
        id: u32,
        topic: &str,
        subgroup: SubgroupId,
        topic_subgroups: u32,
    ) -> Result<()> {
        let mut members = lock(&self.members);
        if let Some((other, sg)) = members.values().find(|(_, sg)| *sg != subgroup) {
            return Err(Error::Unsupported(format!(
                "PRESENTATION GROUP access scope: this {whose}'s topic \"{other}\" rides \
                 subgroup {sg} and topic \"{topic}\" subgroup {subgroup} (of topic_subgroups \
                 = {topic_subgroups}); only topics of one subgroup share a total order, so a \
                 GROUP-scope {whose} spans one subgroup. Use another {whose} for \"{topic}\", \
                 or topic names that hash onto one subgroup (topic_subgroups = 1 puts every \
                 topic in one)",
                whose = self.whose
            )));
        }
        members.insert(id, (topic.to_owned(), subgroup));
        Ok(())
    }

    /// Entity `id` was deleted (or its creation failed).
    pub(crate) fn remove(&self, id: u32) {
        lock(&self.members).remove(&id);
    }
}

/// The one order of several readers' samples: `positions[i]` are reader `i`'s samples'
/// positions in the order they are read (ascending, as a cache keeps them); the result
/// names a reader per sample, the readers interleaved by position — reading one sample
/// from each reader named, in turn, reads every sample in the total order.
pub(crate) fn order_by_position(positions: &[Vec<Position>]) -> Vec<usize> {
    let mut all: Vec<(Position, usize)> = positions
        .iter()
        .enumerate()
        .flat_map(|(i, ps)| ps.iter().map(move |p| (*p, i)))
        .collect();
    // Positions are unique per sample (its own delivery's place is), so the reader
    // index breaks no tie.
    all.sort_unstable();
    all.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(readable: u64, delivered: u64) -> Position {
        Position {
            readable_at: (1, readable),
            delivered_at: (1, delivered),
        }
    }

    #[test]
    fn a_group_scope_spans_one_subgroup_and_names_both_topics_when_refusing() {
        let p = Presentation {
            access_scope: PresentationAccessScope::Group,
            coherent_access: true,
            ordered_access: false,
        };
        let g = GroupScope::of(&p, "publisher").expect("GROUP scope binds");
        g.admit(1, "A", 3, 16).unwrap();
        g.admit(2, "B", 3, 16).unwrap();
        let e = g.admit(3, "C", 5, 16).unwrap_err().to_string();
        for part in [
            "\"A\"",
            "subgroup 3",
            "\"C\"",
            "subgroup 5",
            "topic_subgroups",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
        g.remove(1);
        g.remove(2);
        g.admit(3, "C", 5, 16).unwrap();
        let topic = Presentation {
            access_scope: PresentationAccessScope::Topic,
            ..p
        };
        assert!(GroupScope::of(&topic, "publisher").is_none());
        let plain = Presentation {
            coherent_access: false,
            ..p
        };
        assert!(GroupScope::of(&plain, "subscriber").is_none());
    }

    #[test]
    fn readers_are_interleaved_by_their_samples_positions() {
        // A coherent set ended at 9: b's sample 3 and a's sample 5 became readable there.
        let a = vec![pos(1, 1), pos(4, 4), pos(9, 5)];
        let b = vec![pos(2, 2), pos(9, 3)];
        let c = vec![];
        assert_eq!(order_by_position(&[a, b, c]), [0, 1, 0, 1, 0]);
    }
}
