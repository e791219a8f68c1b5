//! The view change of a dare subgroup: the hand-off of its DARE instance to the next
//! view's (`crate::dare::handoff`, ARCHITECTURE.md "Across views: the hand-off").
//!
//! A wedged member's frozen words for a dare subgroup are its hand-off report (`log
//! term`, `tail`, `applied`, `term`: [`frozen_counters`]); the trim leader puts the
//! subgroup's hand-off in the trim (`source`, `from`, `to`, the next instance's first
//! term: `Membership::dare_handoff`). Before a member installs the next view, it ends the
//! instance ([`Group::dare_handoffs`]): the source ships its log's entries after `from`
//! (a `DareEntries` message per chunk to every other surviving member of the subgroup)
//! and delivers the ones it lacks; every other survivor waits for them (unless it
//! delivered up to `to` already) and delivers the ones it lacks — so every survivor ends
//! the instance at `to`, in one order, before the next view's first delivery. Its
//! undelivered messages are sent again in the next view, and the next view's instance
//! starts one past every term reported. A source that fails before its entries arrived
//! leaves the members that wait for them no way to end the instance in the order the
//! others did: they shut down (a restart rejoins with a state transfer).

use std::collections::BTreeMap;

use spindle_transport_rdma::NodeId;

use super::wire::Msg;
use super::{Current, Group, GroupAction, MEMBERSHIP_IMM};
use crate::dare::DareDelivery;
use crate::error::{Error, Result};
use crate::layout::{DeliveryMode, Layout, SubgroupId, DARE_FROZEN_WORDS};
use crate::membership::Trim;

/// Most bytes of entries one `DareEntries` message carries (a hand-off ships as many
/// as it needs).
pub const DARE_HANDOFF_CHUNK_BYTES_MAX: usize = 1 << 20;

/// One dare subgroup's hand-off as it ended here: the subgroup, the messages to send
/// again in the next view (oldest first), the next instance's first term.
pub(super) type Ended = (SubgroupId, Vec<Vec<u8>>, u64);

/// The hand-offs of the current view's dare subgroups.
#[derive(Debug, Default)]
pub(super) struct DareHandoffs {
    /// The view whose instances end.
    vid: u32,
    /// Per subgroup and sender: the first index it shipped and the entries received so
    /// far. Kept per sender because the source is named by the trim, which may come after
    /// its entries; only the source's are used ([`DareHandoffs::complete`]).
    received: BTreeMap<(SubgroupId, NodeId), (u64, BTreeMap<u64, DareDelivery>)>,
    /// Per subgroup: ended here, with the messages to send again and the next instance's
    /// first term.
    ended: BTreeMap<SubgroupId, (Vec<Vec<u8>>, u64)>,
}

/// The engine's frozen words per subgroup of the layout, in layout order: `received_num`
/// per sender, a dare subgroup's hand-off report (zeros where this node is not a member).
pub(super) fn frozen_counters(c: &Current, me: NodeId) -> Vec<u64> {
    let mut out = Vec::new();
    for sg in c.layout.iter().flat_map(|l| l.subgroups.iter()) {
        let words = sg.frozen_words();
        if !sg.members.contains(&me) {
            out.extend(std::iter::repeat_n(0, words));
            continue;
        }
        match (sg.mode, c.engine.received(sg.id)) {
            (DeliveryMode::Dare(_), _) => match c.engine.dare_report(sg.id) {
                Ok((r, term)) => out.extend([r.log_term, r.tail, r.applied, term]),
                Err(_) => out.extend(std::iter::repeat_n(0, words)),
            },
            (_, Ok(r)) => out.extend_from_slice(r),
            (_, Err(_)) => out.extend(std::iter::repeat_n(0, words)),
        }
    }
    out
}

impl DareHandoffs {
    /// Entries of subgroup `subgroup`'s instance of view `vid`, from `first` on, as
    /// `from` shipped them (one chunk).
    pub(super) fn received(
        &mut self,
        from: NodeId,
        current_vid: u32,
        vid: u32,
        subgroup: SubgroupId,
        first: u64,
        entries: Vec<DareDelivery>,
    ) {
        if vid != current_vid {
            return; // an instance this node already ended, or never ran
        }
        if self.vid != vid {
            *self = DareHandoffs {
                vid,
                ..DareHandoffs::default()
            };
        }
        let (f, held) = self.received.entry((subgroup, from)).or_default();
        *f = first;
        for e in entries {
            if held.len() >= crate::dare::DARE_LOG_ENTRIES_MAX {
                break;
            }
            held.insert(e.index, e);
        }
    }

    /// The entries a member that delivered up to `applied` needs to reach `to`, once
    /// every one of them arrived from `source`, the trim's (`None` until then; what any
    /// other member shipped is not looked at). An error if the shipment starts
    /// past `applied + 1`: the entries this member lacks from there on never come (the
    /// source's ring no longer held them, or the `first` of a `DareEntries` message is
    /// wrong), and ending the instance short of `to` would part it from the others.
    fn complete(
        &self,
        subgroup: SubgroupId,
        source: NodeId,
        applied: u64,
        to: u64,
    ) -> Result<Option<Vec<DareDelivery>>> {
        let Some((first, held)) = self.received.get(&(subgroup, source)) else {
            return Ok(None);
        };
        let from = applied.saturating_add(1);
        if from > to {
            return Ok(Some(Vec::new()));
        }
        if *first > from {
            return Err(Error::Protocol(format!(
                "subgroup {subgroup}: the hand-off ships entries from index {first} on, but \
                 this node delivered only up to {applied} and needs {from} to {to}"
            )));
        }
        // `first <= from <= to`: the range below is well formed.
        if !(from..=to).all(|k| held.contains_key(&k)) {
            return Ok(None);
        }
        Ok(Some(
            held.range(from..=to).map(|(_, e)| e.clone()).collect(),
        ))
    }
}

impl Group {
    /// Ends this node's part of every dare subgroup's instance in `layout` as `trim`
    /// says (see the module docs). `None` while it waits (for shipped entries, or for an
    /// application loan on a staging ring); then, per dare subgroup of the layout, its
    /// id, the messages to send again (empty where this node is not a member) and the
    /// next instance's first term. An error if the hand-off cannot be completed here.
    pub(super) fn dare_handoffs(
        &mut self,
        layout: &Layout,
        trim: &Trim,
    ) -> Result<Option<Vec<Ended>>> {
        let me = self.me;
        let Some(c) = self.current.as_mut() else {
            return Ok(None);
        };
        let vid = c.view.vid;
        if self.dare.vid != vid {
            self.dare = DareHandoffs {
                vid,
                ..DareHandoffs::default()
            };
        }
        let mut waiting = false;
        let mut out = Vec::new();
        let mut base = 0;
        for sg in &layout.subgroups {
            let words = sg.frozen_words();
            let cuts = trim.cuts.get(base..base + words).ok_or_else(|| {
                Error::Protocol(format!("the trim has no cut for subgroup {}", sg.id))
            })?;
            base += words;
            let DeliveryMode::Dare(settings) = sg.mode else {
                continue;
            };
            debug_assert_eq!(words, DARE_FROZEN_WORDS);
            let (source, from, to, first_term) = (cuts[0] as NodeId, cuts[1], cuts[2], cuts[3]);
            if !sg.members.contains(&me) {
                out.push((sg.id, Vec::new(), first_term));
                continue;
            }
            if let Some((resend, t)) = self.dare.ended.get(&sg.id) {
                out.push((sg.id, resend.clone(), *t));
                continue;
            }
            if c.engine.dare_loan_open(sg.id)? {
                waiting = true;
                continue;
            }
            let applied = c.engine.dare_applied(sg.id)?;
            let entries = if source == me {
                // The ring holds the last `log_entries` entries up to the tail; a member
                // that needs older ones cannot catch up (it shuts down, below).
                let first = from.max(to.saturating_sub(settings.log_entries as u64));
                // Up to `to` only: what the others end the instance with.
                let mut entries = c.engine.dare_entries_since(sg.id, first)?;
                entries.retain(|e| e.index <= to);
                let others = sg
                    .members
                    .iter()
                    .filter(|m| **m != me && !trim.removes(**m));
                for peer in others {
                    for chunk in chunks(&entries) {
                        let msg = Msg::DareEntries {
                            vid,
                            subgroup: sg.id,
                            first: first + 1,
                            entries: chunk.to_vec(),
                        };
                        self.actions.push_back(GroupAction::Send {
                            peer: *peer,
                            imm: MEMBERSHIP_IMM,
                            bytes: msg.encode(),
                            retry: true,
                        });
                    }
                }
                entries
            } else if applied >= to {
                Vec::new()
            } else {
                match self.dare.complete(sg.id, source, applied, to)? {
                    Some(e) => e,
                    None => {
                        if c.membership.suspected().contains(&source) {
                            return Err(Error::Protocol(format!(
                                "subgroup {}: the hand-off source {source} failed before its \
                                 entries up to {to} arrived (this node delivered up to \
                                 {applied})",
                                sg.id
                            )));
                        }
                        waiting = true;
                        continue;
                    }
                }
            };
            let (resend, regions) = c.engine.end_dare(sg.id, &entries)?;
            self.actions
                .extend(regions.into_iter().map(GroupAction::DeregisterRegion));
            self.dare.ended.insert(sg.id, (resend.clone(), first_term));
            out.push((sg.id, resend, first_term));
        }
        Ok((!waiting).then_some(out))
    }
}

/// `entries` cut into runs of at most [`DARE_HANDOFF_CHUNK_BYTES_MAX`] bytes of payload
/// (at least one entry each).
fn chunks(entries: &[DareDelivery]) -> Vec<&[DareDelivery]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, e) in entries.iter().enumerate() {
        if i > start && bytes + e.payload.len() > DARE_HANDOFF_CHUNK_BYTES_MAX {
            out.push(&entries[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += e.payload.len();
    }
    if start < entries.len() {
        out.push(&entries[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_entries_starting_past_the_needed_range_are_an_error_not_a_panic() {
        let mut h = DareHandoffs::default();
        // A `DareEntries` whose `first` lies past `to`: before, `BTreeMap::range`
        // panicked on start > end.
        let forged = DareDelivery {
            index: 4,
            term: 1,
            sender: 2,
            sender_seq: 1,
            payload: b"forged".to_vec(),
        };
        h.received(2, 3, 3, 7, u64::MAX, vec![forged]);
        let e = h
            .complete(7, 2, 0, 5)
            .expect_err("first past to")
            .to_string();
        assert!(
            e.contains("subgroup 7")
                && e.contains("but this node delivered only up to 0 and needs 1 to 5"),
            "{e}"
        );
        // Without any entry held (where `range` did not panic) it was taken as complete,
        // ending the instance at 0 where the others end at 5.
        let mut h = DareHandoffs::default();
        h.received(2, 3, 3, 7, 9, Vec::new());
        assert!(h.complete(7, 2, 0, 5).is_err());
    }

    #[test]
    fn shipped_entries_reaching_back_far_enough_complete_the_range() {
        let entry = |index| DareDelivery {
            index,
            term: 1,
            sender: 2,
            sender_seq: index,
            payload: Vec::new(),
        };
        let mut h = DareHandoffs::default();
        assert_eq!(
            h.complete(7, 2, 2, 5).expect("ok"),
            None,
            "nothing shipped yet"
        );
        h.received(2, 3, 3, 7, 2, vec![entry(2), entry(3), entry(4)]);
        assert_eq!(h.complete(7, 2, 2, 5).expect("ok"), None, "5 still missing");
        h.received(2, 3, 3, 7, 2, vec![entry(5)]);
        assert_eq!(
            h.complete(7, 2, 2, 5).expect("ok"),
            Some(vec![entry(3), entry(4), entry(5)])
        );
        assert_eq!(h.complete(7, 2, 5, 5).expect("ok"), Some(Vec::new()));
        // Entries from a member that is not the trim's source are not looked at.
        let mut other = DareHandoffs::default();
        other.received(4, 3, 3, 7, 2, vec![entry(2), entry(3), entry(4), entry(5)]);
        assert_eq!(
            other.complete(7, 2, 2, 5).expect("ok"),
            None,
            "not the source's"
        );
        other.received(4, 3, 3, 7, u64::MAX, Vec::new());
        assert_eq!(
            other
                .complete(7, 2, 0, 5)
                .expect("a forged first from another member"),
            None
        );
        // A shipment from an instance this node no longer runs is dropped.
        h.received(2, 3, 2, 7, u64::MAX, vec![entry(9)]);
        assert!(h.complete(7, 2, 2, 5).expect("ok").is_some());
    }
}
