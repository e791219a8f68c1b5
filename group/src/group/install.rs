//! Installing the next view once a majority holds a trim: the dare subgroups'
//! hand-offs, re-sends, deliveries up to the trim, the next view's engine and membership,
//! the joiners' NEW_VIEW and state transfers (Derecho 3.6, App. B).

use spindle_transport_rdma::NodeId;

use super::wire::{send, Msg, NewView};
use super::{Group, GroupAction, GroupOutput, LocalFabric};
use crate::error::{Error, Result};
use crate::layout::{DeliveryMode, SubgroupSpec, View};
use crate::membership::{Change, Trim};

impl Group {
    /// Acts on a trim a majority holds: re-sends, deliveries up to the trim, the next view.
    /// Returns false while an application loan still holds the ring.
    pub(super) fn install<L: LocalFabric + ?Sized>(
        &mut self,
        local: &L,
        trim: Trim,
        now_us: u64,
    ) -> Result<bool> {
        let me = self.me;
        let Some(c) = self.current.as_ref() else {
            return Ok(false);
        };
        // The view id came from a peer (a NEW_VIEW) or a log: the last one has no next,
        // refused before anything of the view change is done.
        let Some(next_vid) = c.view.vid.checked_add(1) else {
            return Err(Error::Protocol(format!(
                "view {} is the last view id: no view can follow it",
                c.view.vid
            )));
        };
        let layout = c.layout.clone().unwrap_or_default();
        let total: usize = layout
            .subgroups
            .iter()
            .map(SubgroupSpec::frozen_words)
            .sum();
        if trim.cuts.len() != total {
            return Err(Error::Protocol(format!(
                "trim has {} cuts, the layout {total} frozen words",
                trim.cuts.len()
            )));
        }
        // The dare subgroups' instances end first, at one index everywhere.
        let Some(dare) = self.dare_handoffs(&layout, &trim)? else {
            return Ok(false);
        };
        let Some(c) = self.current.as_mut() else {
            return Ok(false);
        };
        let removed_now: Vec<NodeId> = trim
            .changes
            .iter()
            .filter_map(|ch| match ch {
                Change::Remove(n) => Some(*n),
                _ => None,
            })
            .collect();
        let mut resends = Vec::new();
        let mut skips = Vec::new();
        let mut base = 0;
        for sg in &layout.subgroups {
            let cuts = &trim.cuts[base..base + sg.frozen_words()];
            base += sg.frozen_words();
            if !sg.members.contains(&me) || matches!(sg.mode, DeliveryMode::Dare(_)) {
                continue;
            }
            if let Some(r) = sg.senders.iter().position(|s| *s == me) {
                match c.engine.messages_past_trim(sg.id, cuts[r])? {
                    None => return Ok(false),
                    Some(v) => resends.push((sg.id, v)),
                }
            }
            if sg.mode == DeliveryMode::Unordered {
                // Only senders that stay re-send; a removed sender's skip would wrongly
                // hide the first messages of a later incarnation with the same id.
                for (r, s) in sg.senders.iter().enumerate() {
                    let n = c.engine.messages_held_from(sg.id, r, cuts[r])?;
                    if n > 0 && !removed_now.contains(s) {
                        skips.push(((sg.id, *s), n));
                    }
                }
            }
        }
        let mut base = 0;
        for sg in &layout.subgroups {
            let cuts = &trim.cuts[base..base + sg.frozen_words()];
            base += sg.frozen_words();
            if sg.members.contains(&me) {
                c.engine.deliver_to_trim(sg.id, cuts)?;
            }
        }
        for (sg, msgs, first_term) in dare {
            if !msgs.is_empty() {
                resends.push((sg, msgs));
            }
            // Every dare subgroup's reported terms raise the one group-wide first term
            // (see `dare_first_term`).
            self.dare_first_term = self.dare_first_term.max(first_term);
        }
        while let Some(b) = c.engine.poll_delivery() {
            self.outputs.push_back(GroupOutput::Delivery(b));
        }
        // The next view: survivors in their order, then the joiners.
        let old = c.view.clone();
        let mut removed = Vec::new();
        let mut added = Vec::new();
        let mut declared = old.declared.clone();
        for ch in &trim.changes {
            match ch {
                Change::Remove(n) => {
                    removed.push(*n);
                    declared.remove(n);
                }
                Change::Add { node, address } => {
                    if !added.contains(node) {
                        added.push(*node);
                        self.addresses.insert(*node, address.clone());
                    }
                    // A joiner starts with nothing declared, even under a removed id.
                    declared.remove(node);
                }
                Change::Declare { node, declared: d } => {
                    if d.is_empty() {
                        declared.remove(node);
                    } else {
                        declared.insert(*node, d.clone());
                    }
                }
            }
        }
        let mut members: Vec<NodeId> = old
            .members
            .iter()
            .copied()
            .filter(|m| !removed.contains(m))
            .collect();
        for a in &added {
            if !members.contains(a) {
                members.push(*a);
            }
        }
        let departed: Vec<NodeId> = old
            .members
            .iter()
            .copied()
            .filter(|m| !members.contains(m) || added.contains(m))
            .collect();
        let carried: Vec<NodeId> = c
            .membership
            .suspected()
            .into_iter()
            .filter(|n| !removed.contains(n) && *n != me)
            .collect();
        let joins = c.membership.pending_joins().to_vec();
        let declares = c.membership.pending_declares().to_vec();
        declared.retain(|n, _| members.contains(n));
        let view = View {
            vid: next_vid,
            members,
            declared,
        };
        let _span = tracing::info_span!("install_view", node = me, vid = view.vid).entered();
        tracing::info!(members = ?view.members, "installing view");
        let holders_before = self.holders.clone();
        let Some(prev) = self.current.take() else {
            return Ok(false);
        };
        self.retiring = Some(prev.membership);
        for (sg, msgs) in resends {
            self.stats.resent += msgs.len() as u64;
            self.pending_resends.entry(sg).or_default().extend(msgs);
        }
        self.pending_skips
            .retain(|(_, s), _| !removed_now.contains(s));
        self.pending_skips.extend(skips);
        let plan = self.enter_view(local, view.clone(), &added, now_us)?;
        let c = self.current.as_mut().expect("entered");
        for n in carried {
            c.membership.suspect(n);
        }
        for (n, a) in joins {
            c.membership.request_join(n, a);
        }
        for (n, d) in declares {
            c.membership.request_declare(n, d);
        }
        c.joiners = added.clone();
        if !added.is_empty() && view.members.first() == Some(&me) {
            // Joiners hold no state, even one that rejoins under the id of a member this
            // change removed.
            let holders = holders_before
                .iter()
                .map(|(sg, ids)| {
                    let ids = ids.iter().copied().filter(|i| !added.contains(i));
                    (*sg, ids.collect())
                })
                .collect();
            let addresses = view
                .members
                .iter()
                .map(|m| (*m, self.addresses.get(m).cloned().unwrap_or_default()))
                .collect();
            let msg = Msg::NewView(NewView {
                view: view.clone(),
                addresses,
                holders,
                dare_first_term: self.dare_first_term,
            })
            .encode();
            for a in &added {
                self.actions.push_back(send(*a, msg.clone()));
            }
            c.new_view_msg = Some(msg);
        }
        for r in &removed {
            if !view.members.contains(r) {
                self.actions.push_back(GroupAction::Disconnect { peer: *r });
            }
        }
        self.announce(view, added, departed);
        for (sg, giver, receiver) in plan {
            if giver == me {
                self.outputs.push_back(GroupOutput::StateRequested {
                    subgroup: sg,
                    joiner: receiver,
                });
            }
        }
        self.apply_early_states();
        self.flush_resends();
        Ok(true)
    }

    /// Puts re-sends into the current view's rings, in order, as the window allows.
    pub(super) fn flush_resends(&mut self) -> bool {
        let Some(c) = &self.current else {
            return false;
        };
        if c.layout.is_none() || !c.awaiting_state.is_empty() || c.engine.is_wedged() {
            return false;
        }
        let mut work = false;
        for (sg, q) in self.pending_resends.iter_mut() {
            let Ok(sender) = c.engine.sender(*sg) else {
                // Not a sender of this subgroup in this (adequate) view: hand them back.
                self.outputs.push_back(GroupOutput::Undeliverable {
                    subgroup: *sg,
                    payloads: q.drain(..).collect(),
                });
                work = true;
                continue;
            };
            while let Some(msg) = q.front() {
                match sender.try_send(msg) {
                    Ok(_) => {
                        q.pop_front();
                        work = true;
                    }
                    Err(Error::WindowFull { .. }) => break,
                    Err(e) => {
                        tracing::error!(node = self.me, subgroup = sg, error = %e,
                            "a re-send does not fit the new view's subgroup; dropped");
                        q.pop_front();
                    }
                }
            }
        }
        self.pending_resends.retain(|_, q| !q.is_empty());
        work
    }
}
