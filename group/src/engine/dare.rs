//! A dare subgroup ([`DeliveryMode::Dare`]): one [`DareNode`] per member and view, driven
//! by the engine beside the SMC subgroups.
//!
//! The subgroup has no SMC rings. A sender's application threads fill a *staging ring*
//! (local memory, the same [`crate::Sender`] and loans as the other modes); each
//! [`Engine::step_dare`] hands its committed messages to [`DareNode::send`] (a slot is
//! free again once handed over; the core's `sender_window` then bounds what is in flight),
//! steps the core with the time and a re-keying callback, queues its writes and sends
//! (posted by [`Engine::drain_dare`]: `QueueFull` holds that peer's outputs, in order —
//! a dropped entry would leave a hole under a later `tail`, a dropped send a gap the
//! leader waits on) and turns its deliveries into the same [`DeliveryBatch`]es as atomic
//! mode's, the log index as the order index and the sender's rank among the subgroup's
//! members as `sender_rank`.
//!
//! Region ids: the control region takes the subgroup's SST id of the view (so it is new
//! every view), the log regions `DARE_LOG_REGION_BASE + ordinal × 2^24 + term` (the
//! ordinal: the subgroup's place among the layout's dare subgroups), the two-sided sends
//! the immediate [`dare_imm`] of the view and ordinal, so a message of an earlier view's
//! instance is never taken for this one's. An ordinal can pass to another subgroup when
//! the layout changes; the group starts every instance of a view at one group-wide first
//! term past every term reported before ([`Engine::set_dare_first_term`]), so a log id is
//! never used by two instances.

use std::collections::VecDeque;
use std::sync::Arc;

use spindle_transport_rdma::{NodeId, Region, RegionId, WORD_BYTES};

use super::{Engine, Halt, Meta, DELIVERY_QUEUE_MAX, SEND_BATCH_MAX};
use crate::dare::layout::{DARE_LOG_REGION_BASE, DARE_TERM_MAX};
use crate::dare::{DareDelivery, DareNode, DareOut, DareReport};
use crate::error::{Error, Result};
use crate::layout::{DeliveryMode, SubgroupId, NULL_LEN, SLOT_HEADER_BYTES};

/// The top byte of every immediate of an engine's dare subgroup ([`dare_imm`]).
pub const DARE_ENGINE_IMM_TAG: u32 = 0xDA00_0000;
/// Outputs of one dare subgroup's core queued and not yet posted above which the engine
/// stops stepping it (the fabric is behind; the core keeps its state meanwhile).
pub const DARE_OUT_QUEUE_MAX: usize = 4096;

/// The two-sided immediate of the dare subgroup with `ordinal` (its place among the
/// layout's dare subgroups) in view `vid`.
pub fn dare_imm(vid: u32, ordinal: usize) -> u32 {
    debug_assert!(ordinal < crate::layout::DARE_SUBGROUPS_MAX);
    DARE_ENGINE_IMM_TAG | ((vid & 0xF_FFFF) << 4) | (ordinal as u32 & 0xF)
}

/// True if `imm` is the immediate of some engine's dare subgroup.
pub fn is_dare_imm(imm: u32) -> bool {
    imm & 0xFF00_0000 == DARE_ENGINE_IMM_TAG
}

/// The first log region id of the dare subgroup with `ordinal`.
pub(crate) fn dare_log_base(ordinal: usize) -> RegionId {
    DARE_LOG_REGION_BASE + ordinal as RegionId * (DARE_TERM_MAX as RegionId + 1)
}

/// The DARE side of a subgroup's state.
pub(super) struct DareSub {
    /// The core; `None` once handed over ([`Engine::end_dare`]).
    pub(super) core: Option<DareNode>,
    /// The immediate of this view's sends.
    pub(super) imm: u32,
    /// The control region's id.
    pub(super) ctrl_id: RegionId,
    /// The members, in rank order (a delivery's `sender_rank` indexes it).
    pub(super) members: Arc<[NodeId]>,
    /// Outputs not yet posted, in order.
    pub(super) out: VecDeque<DareOut>,
    /// Log regions the core withdrew, for the driver to deregister.
    pub(super) withdrawn: Vec<RegionId>,
    /// The core has stepped (its first term is fixed).
    pub(super) stepped: bool,
}

impl DareSub {
    pub(super) fn new(core: DareNode, imm: u32, ctrl_id: RegionId) -> DareSub {
        DareSub {
            members: core.members().to_vec().into(),
            core: Some(core),
            imm,
            ctrl_id,
            out: VecDeque::new(),
            withdrawn: Vec::new(),
            stepped: false,
        }
    }
}

impl Engine {
    fn dare_index(&self, subgroup: SubgroupId) -> Result<usize> {
        self.subgroups
            .iter()
            .position(|s| s.spec.id == subgroup && s.dare.is_some())
            .ok_or(Error::UnknownSubgroup { subgroup })
    }

    /// The shortest heartbeat of this node's dare subgroups, in µs (`None` without one):
    /// a driver wakes at least this often.
    pub fn dare_heartbeat_us(&self) -> Option<u64> {
        self.subgroups
            .iter()
            .filter_map(|s| match s.spec.mode {
                DeliveryMode::Dare(d) if s.dare.is_some() => Some(d.heartbeat_us),
                _ => None,
            })
            .min()
    }

    /// True if this node is a member of a dare subgroup in this view.
    pub fn has_dare(&self) -> bool {
        self.subgroups.iter().any(|s| s.dare.is_some())
    }

    /// Starts the core of dare subgroup `subgroup` at `term` (before its first step): the
    /// instance of a view after a hand-off starts one past every term reported at the
    /// view change, so its log region ids are new.
    pub fn set_dare_first_term(&mut self, subgroup: SubgroupId, term: u64) -> Result<()> {
        let i = self.dare_index(subgroup)?;
        let d = self.subgroups[i].dare.as_mut().expect("a dare subgroup");
        if d.stepped {
            return Err(Error::Protocol(format!(
                "subgroup {subgroup}: the DARE instance already started"
            )));
        }
        if let Some(core) = d.core.take() {
            d.core = Some(core.with_first_term(term)?);
        }
        Ok(())
    }

    /// Steps every running dare subgroup once at `now_us`: hands the staging ring's
    /// committed messages to the core, steps it (`register` registers a log region when
    /// the core re-keys it), queues its outputs, and turns its deliveries into delivery
    /// batches. Returns true if anything happened.
    pub fn step_dare(
        &mut self,
        now_us: u64,
        register: &mut dyn FnMut(RegionId, usize) -> Result<Region>,
    ) -> bool {
        let mut work = false;
        for i in 0..self.subgroups.len() {
            if self.subgroups[i].dare.is_none() || self.subgroups[i].halt != Halt::Running {
                continue;
            }
            work |= self.take_staged(i);
            let s = &mut self.subgroups[i];
            let d = s.dare.as_mut().expect("checked");
            let Some(core) = d.core.as_mut() else {
                continue;
            };
            if d.out.len() < DARE_OUT_QUEUE_MAX {
                d.stepped = true;
                let withdrawn = &mut d.withdrawn;
                let mut rekey = |old: Option<RegionId>, new: RegionId, len: usize| {
                    if let Some(old) = old {
                        withdrawn.push(old);
                    }
                    register(new, len)
                };
                match core.step(now_us, &mut rekey) {
                    Ok(w) => work |= w,
                    Err(e) => {
                        // The core stopped (a term past its bound, a region it could not
                        // register): the subgroup stops here; the view change ends it.
                        tracing::error!(node = self.node, subgroup = s.spec.id, %e,
                            "dare: the subgroup's core stopped");
                        s.halt = Halt::Stopped;
                        if let Some(ring) = &s.ring {
                            ring.stop();
                        }
                        continue;
                    }
                }
                while let Some(o) = core.poll_out() {
                    d.out.push_back(o);
                    work = true;
                }
                while let Some(e) = core.poll_event() {
                    tracing::debug!(node = self.node, subgroup = s.spec.id, event = ?e, "dare");
                }
            }
            work |= self.deliver_dare(i, false);
        }
        work
    }

    /// Moves committed messages of subgroup `i`'s staging ring into its core, as its
    /// window allows; a moved slot is free again.
    fn take_staged(&mut self, i: usize) -> bool {
        let s = &mut self.subgroups[i];
        let (Some(ring), Some(core)) = (&s.ring, s.dare.as_mut().and_then(|d| d.core.as_mut()))
        else {
            return false;
        };
        let committed = ring.advance_committed(s.committed, SEND_BATCH_MAX);
        let mut k = s.committed;
        while k < committed && core.can_send() {
            let slot = s.geom.slot(0, k);
            let len = s.region.load_u64(slot + WORD_BYTES);
            if len != NULL_LEN {
                // The ring took at most the slot's payload (the core's payload bound).
                let Ok(bytes) = s.region.to_vec(slot + SLOT_HEADER_BYTES, len as usize) else {
                    break;
                };
                if let Err(e) = core.send(&bytes) {
                    tracing::warn!(node = self.node, subgroup = s.spec.id, %e,
                        "dare: a staged message was refused");
                    break;
                }
            }
            k += 1;
        }
        if k == s.committed {
            return false;
        }
        s.committed = k;
        s.pushed = k;
        s.received[0] = k;
        // Frees the slots for the ring (its limit reads this word).
        s.region.store_u64(s.geom.received_num(0, 0), k);
        true
    }

    /// Polls subgroup `i`'s core's deliveries into delivery batches (at most while the
    /// delivery queue has room, unless `all`). True if any.
    fn deliver_dare(&mut self, i: usize, all: bool) -> bool {
        let mut any = false;
        loop {
            if !all && self.deliveries.len() >= DELIVERY_QUEUE_MAX {
                break;
            }
            let s = &mut self.subgroups[i];
            let d = s.dare.as_mut().expect("a dare subgroup");
            let Some(m) = d.core.as_mut().and_then(DareNode::poll_delivery) else {
                break;
            };
            let members = Arc::clone(&d.members);
            self.deliver_dare_one(i, members, m);
            any = true;
        }
        if any {
            let s = &mut self.subgroups[i];
            s.batch_open = false;
        }
        any
    }

    fn deliver_dare_one(&mut self, i: usize, members: Arc<[NodeId]>, m: DareDelivery) {
        let s = &mut self.subgroups[i];
        s.delivered += 1;
        self.stats.delivered += 1;
        let Some(rank) = members.iter().position(|x| *x == m.sender) else {
            return; // catch_up and the core check senders against the members
        };
        let batch = super::delivery::open_batch(
            &mut self.deliveries,
            &mut self.spare_batches,
            &mut self.stats.delivery_batches,
            self.techniques.batched_upcall && s.batch_open,
            s.spec.id,
            &members,
        );
        s.batch_open = true;
        let start = batch.payload.len();
        let len = m.payload.len().min(s.delivery_prefix);
        batch.payload.extend_from_slice(&m.payload[..len]);
        batch.metas.push(Meta {
            global_index: m.index,
            sender_rank: rank as u32,
            // The sender's ring index, as `Loan::seq` gave it: the core numbers a view's
            // messages from 1 in the staging ring's order (`take_staged`). A loan dropped
            // without a commit (a null, never handed to the core) shifts the rest of that
            // sender's view by one.
            sender_seq: m.sender_seq.saturating_sub(1),
            start,
            len,
            full_len: m.payload.len(),
            in_place: None,
        });
    }

    /// A two-sided message with immediate `imm` from `peer`: handed to the dare subgroup
    /// of this view whose immediate it is (others, an earlier view's, are dropped).
    /// Malformed bytes are an error naming the peer.
    pub fn handle_dare_recv(&mut self, peer: NodeId, imm: u32, data: &[u8]) -> Result<()> {
        let Some(s) = self
            .subgroups
            .iter_mut()
            .find(|s| s.dare.as_ref().is_some_and(|d| d.imm == imm))
        else {
            return Ok(());
        };
        if s.halt != Halt::Running {
            return Ok(());
        }
        match s.dare.as_mut().and_then(|d| d.core.as_mut()) {
            Some(core) => core.handle_recv(peer, data),
            None => Ok(()),
        }
    }

    /// The fabric announced `peer`'s region `region`: the dare subgroups' cores learn of
    /// their followers' log regions this way.
    pub fn handle_region_announced(&mut self, peer: NodeId, region: RegionId) {
        for s in &mut self.subgroups {
            if let Some(core) = s.dare.as_mut().and_then(|d| d.core.as_mut()) {
                core.handle_region_announced(peer, region);
            }
        }
    }

    /// The log regions the dare subgroups' cores wait to hear announced (a driver that
    /// may have missed announcements asks its fabric and reports the known ones).
    pub fn dare_regions_awaited(&self) -> Vec<(NodeId, RegionId)> {
        self.subgroups
            .iter()
            .filter_map(|s| s.dare.as_ref().and_then(|d| d.core.as_ref()))
            .flat_map(DareNode::log_regions_awaited)
            .collect()
    }

    /// Log regions the dare subgroups' cores withdrew since the last call (the driver
    /// deregisters them).
    pub fn take_withdrawn_regions(&mut self) -> Vec<RegionId> {
        self.subgroups
            .iter_mut()
            .filter_map(|s| s.dare.as_mut())
            .flat_map(|d| std::mem::take(&mut d.withdrawn))
            .collect()
    }

    /// Posts the dare subgroups' queued outputs, in order per peer: `post(out, imm,
    /// ctrl)` gets each with the subgroup's immediate and control region id. When it
    /// fails with `QueueFull` or `NotConnected` that peer's outputs stay queued for the
    /// next call; any other refusal (a region withdrawn by a member that moved on, a
    /// failed link) drops that output — the protocol learns of those by terms and failure
    /// events. Returns how many were posted.
    pub fn drain_dare(
        &mut self,
        mut post: impl FnMut(&DareOut, u32, RegionId) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        let mut posted = 0;
        for s in &mut self.subgroups {
            let Some(d) = s.dare.as_mut() else {
                continue;
            };
            let mut held: Vec<NodeId> = Vec::new();
            let mut kept = VecDeque::new();
            while let Some(o) = d.out.pop_front() {
                let peer = match &o {
                    DareOut::Write { peer, .. } | DareOut::Send { peer, .. } => *peer,
                };
                if held.contains(&peer) {
                    kept.push_back(o);
                    continue;
                }
                match post(&o, d.imm, d.ctrl_id) {
                    Ok(()) => posted += 1,
                    Err(
                        spindle_transport_rdma::Error::QueueFull { .. }
                        | spindle_transport_rdma::Error::NotConnected { .. },
                    ) => {
                        held.push(peer);
                        kept.push_back(o);
                    }
                    Err(e) => {
                        tracing::debug!(node = self.node, peer, %e, "dare: output refused");
                    }
                }
            }
            d.out = kept;
        }
        posted
    }

    /// This node's hand-off report for dare subgroup `subgroup` (call once wedged): the
    /// core's [`DareReport`] and its current term.
    pub fn dare_report(&self, subgroup: SubgroupId) -> Result<(DareReport, u64)> {
        let i = self.dare_index(subgroup)?;
        let d = self.subgroups[i].dare.as_ref().expect("a dare subgroup");
        let core = d.core.as_ref().ok_or_else(|| {
            Error::Protocol(format!(
                "subgroup {subgroup}: the DARE instance was handed over"
            ))
        })?;
        Ok((core.handoff_report(), core.term()))
    }

    /// The entries of this node's log of dare subgroup `subgroup` after index `from`: what
    /// the hand-off source ships ([`DareNode::entries_since`]).
    pub fn dare_entries_since(&self, subgroup: SubgroupId, from: u64) -> Result<Vec<DareDelivery>> {
        let i = self.dare_index(subgroup)?;
        let d = self.subgroups[i].dare.as_ref().expect("a dare subgroup");
        match d.core.as_ref() {
            Some(core) => core.entries_since(from),
            None => Err(Error::Protocol(format!(
                "subgroup {subgroup}: the DARE instance was handed over"
            ))),
        }
    }

    /// The leader of dare subgroup `subgroup`'s current term as this node knows it, and
    /// the term (`None` once the instance was handed over).
    pub fn dare_leader(&self, subgroup: SubgroupId) -> Result<Option<(Option<NodeId>, u64)>> {
        let i = self.dare_index(subgroup)?;
        let d = self.subgroups[i].dare.as_ref().expect("a dare subgroup");
        Ok(d.core.as_ref().map(|c| (c.leader(), c.term())))
    }

    /// The index this node delivered up to in dare subgroup `subgroup`.
    pub fn dare_applied(&self, subgroup: SubgroupId) -> Result<u64> {
        let i = self.dare_index(subgroup)?;
        let d = self.subgroups[i].dare.as_ref().expect("a dare subgroup");
        Ok(d.core.as_ref().map_or(0, DareNode::applied))
    }

    /// Ends this node's part of dare subgroup `subgroup`'s instance at a view change
    /// (the engine is wedged): delivers the shipped `entries` it lacks
    /// ([`DareNode::catch_up`]) together with every delivery the core still held, into
    /// delivery batches; then its undelivered messages, oldest first (those handed to
    /// the core, then those still staged), for the next view to send again, and its log
    /// regions, to deregister.
    pub fn end_dare(
        &mut self,
        subgroup: SubgroupId,
        entries: &[DareDelivery],
    ) -> Result<(Vec<Vec<u8>>, Vec<RegionId>)> {
        let i = self.dare_index(subgroup)?;
        {
            let d = self.subgroups[i].dare.as_mut().expect("a dare subgroup");
            let core = d.core.as_mut().ok_or_else(|| {
                Error::Protocol(format!(
                    "subgroup {subgroup}: the DARE instance was handed over"
                ))
            })?;
            core.catch_up(entries)?;
        }
        self.deliver_dare(i, true);
        self.finish_dare_batch(i);
        let s = &mut self.subgroups[i];
        let d = s.dare.as_mut().expect("a dare subgroup");
        let core = d.core.take().expect("checked above");
        let mut regions = std::mem::take(&mut d.withdrawn);
        regions.extend(core.log_region_id());
        let mut pending = core.into_pending();
        // Messages still in the staging ring, not handed to the core.
        if let Some(ring) = &s.ring {
            let committed = ring.advance_committed(s.committed, u64::MAX);
            for k in s.committed..committed {
                let slot = s.geom.slot(0, k);
                let len = s.region.load_u64(slot + WORD_BYTES);
                if len != NULL_LEN {
                    pending.push(s.region.to_vec(slot + SLOT_HEADER_BYTES, len as usize)?);
                }
            }
        }
        Ok((pending, regions))
    }

    fn finish_dare_batch(&mut self, i: usize) {
        self.subgroups[i].batch_open = false;
    }

    /// True if this node's dare subgroup `subgroup` has an application loan open on its
    /// staging ring (the hand-off waits for it, as the atomic trim does).
    pub fn dare_loan_open(&self, subgroup: SubgroupId) -> Result<bool> {
        let i = self.dare_index(subgroup)?;
        let s = &self.subgroups[i];
        Ok(match &s.ring {
            Some(ring) => ring.advance_committed(s.committed, u64::MAX) < ring.reserved(),
            None => false,
        })
    }

    /// The fabric reported `peer` failed: the dare subgroups' cores learn of it (an
    /// election when it led); the subgroups keep running until the view change.
    pub fn handle_dare_peer_failed(&mut self, peer: NodeId) {
        for s in &mut self.subgroups {
            if let Some(core) = s.dare.as_mut().and_then(|d| d.core.as_mut()) {
                core.handle_peer_failed(peer);
            }
        }
    }

    /// True if subgroup `i` is a dare subgroup.
    pub(super) fn is_dare(&self, i: usize) -> bool {
        matches!(self.subgroups[i].spec.mode, DeliveryMode::Dare(_))
    }
}
