//! Installing the next view once a majority holds a trim: the dare subgroups'
//! hand-offs, re-sends, deliveries up to the trim, the next view's engine and membership,
//! the joiners' NEW_VIEW and state transfers (Derecho 3.6, App. B); and a NEW_VIEW's
//! arrival: the view a joiner enters, refused unless it comes from that view's first
//! member and has a view id past 0; at a member, ignored (a member's next view comes from
//! its trim, never from a NEW_VIEW), and nobody is suspected for one.

use spindle_transport_rdma::NodeId;

use super::wire::{send, Msg, NewView};
use super::{Group, GroupAction, GroupOutput, LocalFabric, Phase};
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
        // A subgroup with nothing to re-send gets no queue: an empty one would be handed
        // back as undeliverable (nothing) when this member no longer sends there.
        for (sg, msgs) in resends.into_iter().filter(|(_, m)| !m.is_empty()) {
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

    /// A NEW_VIEW `nv` arrived from `peer`. Only a joiner enters a view from one, and only
    /// from the member that sends it: the view's first member (see [`Group::install`],
    /// which sends it, and `join_request`, which repeats it); one from anyone else is
    /// refused. Which view the group is at, a joiner cannot know (it has no view yet, and
    /// neither a join nor a redirect carries one); but the view a NEW_VIEW carries follows
    /// another, so its id is past 0, and one with view id 0 is refused. Its id may be
    /// `u32::MAX`, the last view id (a group at `u32::MAX - 1` admitting a node): `install`
    /// refuses only the view after it. A member never enters a view from a NEW_VIEW (its
    /// next view comes from its trim): it ignores one and suspects nobody for it, see
    /// [`Group::new_view_at_member`].
    pub(super) fn new_view<L: LocalFabric + ?Sized>(
        &mut self,
        local: &L,
        peer: NodeId,
        nv: NewView,
        now_us: u64,
    ) -> Result<()> {
        match self.phase {
            Phase::Joining { .. } => {}
            Phase::Member => {
                self.new_view_at_member(peer, nv.view.vid);
                return Ok(());
            }
            Phase::Done => return Ok(()),
        }
        let NewView {
            view,
            addresses,
            holders,
            dare_first_term,
        } = nv;
        view.validate()?;
        let sender = view.members[0];
        if peer != sender {
            return Err(Error::Protocol(format!(
                "NEW_VIEW {} from {peer}, not from its view's first member {sender} (the \
                 only member that sends it): refused",
                view.vid
            )));
        }
        if view.vid == 0 {
            return Err(Error::Protocol(format!(
                "NEW_VIEW 0 from {peer}: a joiner's view follows another, its id is at \
                 least 1: refused"
            )));
        }
        if !view.members.contains(&self.me) {
            return Err(Error::Protocol(format!(
                "NEW_VIEW {} from {peer} does not hold this node",
                view.vid
            )));
        }
        self.addresses.extend(addresses);
        self.holders = holders;
        // The survivors' first term: this node's instances key the same regions.
        self.dare_first_term = self.dare_first_term.max(dare_first_term);
        self.phase = Phase::Member;
        self.join_failures.clear();
        let me = [self.me];
        self.enter_view(local, view.clone(), &me, now_us)?;
        self.announce(view, vec![self.me], Vec::new());
        self.apply_early_states();
        Ok(())
    }

    /// A NEW_VIEW for view `vid` reached this member from `peer`: ignored, whatever the
    /// view and whoever sent it. A member's next view is its current one's id + 1,
    /// computed from the trim a majority holds, never taken from a NEW_VIEW: nothing is
    /// installed, delivered or trimmed for one, so suspecting its sender would buy no
    /// safety. It could evict a correct leader: a joiner that retried its JOIN just before
    /// it installed its view may get the leader's reply for a view two or more changes
    /// later (`join_request` repeats the current view's NEW_VIEW, `new_view_msg`), which
    /// looks like one for a view past the next. So nobody is suspected: one for the next
    /// view or an earlier one (a joiner's, repeated, delayed, or meant for an earlier
    /// incarnation of this node's id) is logged at debug level, one for a view past the
    /// next with a warning naming its sender, its view and the current one.
    fn new_view_at_member(&self, peer: NodeId, vid: u32) {
        let Some(c) = self.current.as_ref() else {
            return;
        };
        let current = c.view.vid;
        // At the last view id, every view is the next or an earlier one.
        if current.checked_add(1).is_some_and(|next| vid > next) {
            tracing::warn!(
                node = self.me,
                from = peer,
                vid,
                current,
                "a NEW_VIEW for a view past this member's next: ignored: a member's next \
                 view comes from its trim"
            );
        } else {
            tracing::debug!(
                node = self.me,
                from = peer,
                vid,
                current,
                "a NEW_VIEW at a member: ignored"
            );
        }
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
