//! The view-change protocol of one view (Derecho Appendix B.1, B.3, B.5) as a sans-IO state
//! machine over the view's top-level SST.
//!
//! Every member of a view owns one row of a membership region (one region per view, pushed
//! to every other member). A row holds, each word written only by its owner:
//!
//! * `group_set` + `group` — the group the member is configured for
//!   ([`crate::group::GroupConfig::group_id`]), gated by `group_set`; the first two words
//!   of every row, so that they stay where they are whatever else a later format changes.
//!   A member whose row names another group is treated as failed (suspected, and named
//!   in the reason of a shutdown): members that bootstrap together are never checked as
//!   a joiner is, so a member of another domain, or of a build with another wire
//!   format, listed among the bootstrap members is caught here.
//! * `suspected` — a bitmap over the view's ranks; suspicions propagate: a member copies
//!   the bits of every row it does not suspect itself.
//! * `num_changes` + `changes` — the proposals (remove a member, add a joiner). Only the
//!   leader (the lowest-ranked unsuspected member) appends; the others echo its list and
//!   acknowledge it in `num_acked`; the leader commits (`num_committed`) once every
//!   unsuspected member acknowledged.
//! * `leader_ack` — the rank (+1) of the leader this member follows. A new leader acts only
//!   after every unsuspected member follows it, so what they echoed before is visible to it.
//! * `wedged` + `frozen` — set once the member's engine is wedged: its `received_num` per
//!   subgroup and sender, frozen.
//! * `trim_tag` + the trim — the ragged trim, computed by a leader from the frozen counters
//!   once the committed changes cover every suspicion and every remaining member is wedged,
//!   tagged with the leader's rank (+1), echoed by the others. A new leader adopts the
//!   highest-tagged trim it finds. A member acts on a trim (delivers up to it and installs
//!   the next view) once a majority of the view's rows carry it.
//! * `active` — the member is running (a joiner sets it once its state arrived).
//!
//! Data is published before the word that gates it (`write_then_release`): the change
//! entries before `num_changes`, the frozen counters before `wedged`, the trim before
//! `trim_tag`; readers read the gate first, with acquire.
//!
//! A member that can no longer reach a majority of the view, or that the others suspect,
//! shuts itself down: a minority never installs a view (no split brain). A member that
//! asked to leave (its own row suspects itself) never installs a view again, so it
//! counts toward the majority until it fails, and the others keep pushing to it until
//! the trim that removes it: it echoes that trim and lingers until they drop it
//! (`group::LEAVE_LINGER_US` at most), so a domain of two goes on when one leaves.

use std::collections::{BTreeSet, VecDeque};

use spindle_transport_rdma::{NodeId, Region, RegionId, WORD_BYTES};

use crate::dare::{handoff_source, DareReport};
use crate::engine::{drain_queue, Push, PushBytes};
use crate::error::{Error, Result};
use crate::layout::{
    sst_region_id, DeliveryMode, Layout, SubgroupSpec, View, DECLARED_BYTES_MAX, SUBGROUPS_MAX,
};

/// Most changes one view change carries (further ones go to the next view change).
pub const CHANGES_MAX: usize = 32;
/// Longest fabric address a joiner may have, in bytes.
pub const ADDRESS_BYTES_MAX: usize = 64;
/// Bytes of the body of one change entry (a joiner's address or a declaration).
const CHANGE_BYTES_MAX: usize = if ADDRESS_BYTES_MAX > DECLARED_BYTES_MAX {
    ADDRESS_BYTES_MAX
} else {
    DECLARED_BYTES_MAX
};
const _: () = assert!(
    CHANGE_BYTES_MAX % WORD_BYTES == 0,
    "change bodies are whole words"
);
/// Words of one change entry: `kind << 32 | node`, the body's length, then the body.
const CHANGE_WORDS: usize = 2 + CHANGE_BYTES_MAX / WORD_BYTES;
const KIND_REMOVE: u64 = 1;
const KIND_ADD: u64 = 2;
const KIND_DECLARE: u64 = 3;
/// The layout index whose region id the membership region takes (beyond any subgroup).
const MEMBERSHIP_INDEX: usize = (1 << 12) - 1;
const _: () = assert!(
    SUBGROUPS_MAX < MEMBERSHIP_INDEX,
    "subgroup indices stay below it"
);

/// The region id of view `vid`'s membership region.
pub fn membership_region_id(vid: u32) -> RegionId {
    sst_region_id(vid, MEMBERSHIP_INDEX)
}

/// One proposed change of membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The member leaves the group (failed, suspected, cut off, or leaving).
    Remove(NodeId),
    /// A joiner enters the group, reachable at `address`.
    Add {
        /// The joiner.
        node: NodeId,
        /// Its fabric address.
        address: String,
    },
    /// A member's declaration (see [`View::declared`]) becomes `declared`; an empty one
    /// removes the entry.
    Declare {
        /// The member.
        node: NodeId,
        /// What it declares, at most [`DECLARED_BYTES_MAX`] bytes.
        declared: Vec<u8>,
    },
}

/// A ragged trim: the changes the next view applies and, per subgroup and sender of the
/// view's layout (in layout order), how many of the sender's messages survive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trim {
    /// Rank + 1 of the leader that computed it.
    pub tag: u64,
    /// The committed changes, in order.
    pub changes: Vec<Change>,
    /// Per subgroup (layout order), per sender rank: messages kept.
    pub cuts: Vec<u64>,
}

impl Trim {
    /// True if the trim removes `node`.
    pub fn removes(&self, node: NodeId) -> bool {
        self.changes.contains(&Change::Remove(node))
    }
}

/// What the protocol decided for this view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A majority holds this trim: deliver up to it and install the next view.
    Install(Trim),
    /// This node must stop; the text says why.
    ShutDown(String),
    /// This node asked to leave and the next view no longer has it.
    Left,
}

/// Word indices within a row.
#[derive(Debug, Clone)]
struct RowGeometry {
    suspected_words: usize,
    frozen_words: usize,
    row_bytes: usize,
}

/// Most a node left without a majority beside members of another group waits for its
/// own group to reach them before it stops (see `Membership::step`), in µs.
pub const GROUP_NOTICE_WAIT_US: u64 = 100_000;

/// Words before the `suspected` bitmap: `group_set` and `group`.
const GROUP_WORDS: usize = 2;

impl RowGeometry {
    fn new(members: usize, frozen_words: usize) -> RowGeometry {
        let suspected_words = members.div_ceil(64);
        let g = RowGeometry {
            suspected_words,
            frozen_words,
            row_bytes: 0,
        };
        let words = g.trim_cuts() + frozen_words;
        RowGeometry {
            row_bytes: (words * WORD_BYTES).div_ceil(64) * 64,
            ..g
        }
    }
    fn group_set(&self) -> usize {
        0
    }
    fn group(&self) -> usize {
        1
    }
    fn suspected(&self) -> usize {
        GROUP_WORDS
    }
    fn num_changes(&self) -> usize {
        GROUP_WORDS + self.suspected_words
    }
    fn num_acked(&self) -> usize {
        self.num_changes() + 1
    }
    fn num_committed(&self) -> usize {
        self.num_changes() + 2
    }
    fn leader_ack(&self) -> usize {
        self.num_changes() + 3
    }
    fn active(&self) -> usize {
        self.num_changes() + 4
    }
    fn wedged(&self) -> usize {
        self.num_changes() + 5
    }
    fn trim_tag(&self) -> usize {
        self.num_changes() + 6
    }
    fn changes(&self) -> usize {
        self.num_changes() + 7
    }
    fn frozen(&self) -> usize {
        self.changes() + CHANGES_MAX * CHANGE_WORDS
    }
    fn trim_num(&self) -> usize {
        self.frozen() + self.frozen_words
    }
    fn trim_changes(&self) -> usize {
        self.trim_num() + 1
    }
    fn trim_cuts(&self) -> usize {
        self.trim_changes() + CHANGES_MAX * CHANGE_WORDS
    }
    /// Byte offset of word `w` of rank `rank`'s row.
    fn at(&self, rank: usize, w: usize) -> usize {
        rank * self.row_bytes + w * WORD_BYTES
    }
}

/// Which parts of this node's row changed since the last push.
#[derive(Debug, Default, Clone, Copy)]
struct Dirty {
    suspected: bool,
    acks: bool,
    changes: bool,
    frozen: bool,
    trim: bool,
}

/// The membership state machine of one node in one view. See the module docs.
#[derive(Debug)]
pub struct Membership {
    view: View,
    rank: usize,
    layout: Layout,
    geom: RowGeometry,
    region_id: RegionId,
    region: Region,
    suspected: Vec<bool>,
    /// Members reported failed from outside the rows (the fabric, the engine, a bad row):
    /// unlike a member that asked to leave, these no longer take part.
    failed: Vec<bool>,
    leaving: bool,
    changes: Vec<Change>,
    num_acked: usize,
    num_committed: usize,
    leader_ack: u64,
    active: bool,
    wedge_wanted: bool,
    /// Set when this node shut down because the members it lost had suspected it.
    excluded_by: Option<NodeId>,
    /// The members this node lost when it shut down for want of a majority (empty
    /// otherwise), in rank order.
    lost: Vec<NodeId>,
    frozen: Option<Vec<u64>>,
    trim: Option<Trim>,
    /// This node, as leader, has adopted the longest list and highest trim it found.
    adopted: bool,
    /// The leader this node echoes (follower side).
    following: Option<usize>,
    pending_joins: Vec<(NodeId, String)>,
    pending_declares: Vec<(NodeId, Vec<u8>)>,
    pushes: VecDeque<Push>,
    dirty: Dirty,
    outcome: Option<Outcome>,
    misbehaved: Vec<(NodeId, String)>,
    /// The group this node is configured for.
    group: GroupName,
    /// Per rank: its row's group still to be checked (set until the row names one, or
    /// the member is suspected).
    group_unchecked: Vec<bool>,
    /// How many of `group_unchecked` are set: the check costs nothing once it is 0.
    groups_unchecked: usize,
    /// Members whose rows named another group, with theirs.
    foreign: Vec<(NodeId, u64)>,
    /// When this node, finding itself without a majority beside members of another
    /// group, began to wait for its own group to reach them.
    foreign_since_us: Option<u64>,
}

/// The group a node is configured for, and how to name a group in messages (the
/// [`crate::group::GroupConfig`] fields `group_id` and `group_label`).
#[derive(Debug, Clone, Copy)]
struct GroupName {
    id: u64,
    label: fn(u64) -> String,
}

impl Membership {
    /// The membership of `me`, configured for `group` (the group's id and how messages
    /// name a group: [`crate::group::GroupConfig`]'s `group_id` and `group_label`), in
    /// `view`, whose subgroups are `layout` (empty when the view is inadequate).
    /// `register` allocates the view's membership region.
    pub fn new(
        me: NodeId,
        group: (u64, fn(u64) -> String),
        view: View,
        layout: Layout,
        active: bool,
        register: impl FnOnce(RegionId, usize) -> Result<Region>,
    ) -> Result<Membership> {
        view.validate()?;
        let rank = view
            .members
            .iter()
            .position(|m| *m == me)
            .ok_or_else(|| Error::Config(format!("node {me} is not in view {}", view.vid)))?;
        let frozen_words = layout
            .subgroups
            .iter()
            .map(SubgroupSpec::frozen_words)
            .sum();
        let geom = RowGeometry::new(view.members.len(), frozen_words);
        let region_id = membership_region_id(view.vid);
        let region = register(region_id, geom.row_bytes * view.members.len())?;
        // Each member writes only its own row.
        let mut grants = spindle_transport_rdma::PeerWrites::default();
        for (r, &m) in view.members.iter().enumerate().filter(|(r, _)| *r != rank) {
            grants.grant(m, r * geom.row_bytes..(r + 1) * geom.row_bytes)?;
        }
        region.limit_peer_writes(grants)?;
        let n = view.members.len();
        let mut m = Membership {
            rank,
            layout,
            geom,
            region_id,
            region,
            suspected: vec![false; n],
            failed: vec![false; n],
            leaving: false,
            changes: Vec::new(),
            num_acked: 0,
            num_committed: 0,
            leader_ack: 0,
            active,
            wedge_wanted: false,
            excluded_by: None,
            lost: Vec::new(),
            frozen: None,
            trim: None,
            adopted: false,
            following: None,
            pending_joins: Vec::new(),
            pending_declares: Vec::new(),
            pushes: VecDeque::new(),
            dirty: Dirty::default(),
            outcome: None,
            misbehaved: Vec::new(),
            group: GroupName {
                id: group.0,
                label: group.1,
            },
            group_unchecked: (0..n).map(|k| k != rank).collect(),
            groups_unchecked: n - 1,
            foreign: Vec::new(),
            foreign_since_us: None,
            view,
        };
        m.dirty.acks = true;
        m.push_group();
        Ok(m)
    }

    /// The view.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The membership region's id.
    pub fn region_id(&self) -> RegionId {
        self.region_id
    }

    /// The member this node currently takes as leader (the lowest-ranked it does not
    /// suspect).
    pub fn leader(&self) -> Option<NodeId> {
        (0..self.view.members.len())
            .find(|k| !self.suspected[*k])
            .map(|k| self.view.members[k])
    }

    /// Members this node suspects.
    pub fn suspected(&self) -> Vec<NodeId> {
        self.ranks_where(|k| self.suspected[k])
    }

    fn ranks_where(&self, f: impl Fn(usize) -> bool) -> Vec<NodeId> {
        (0..self.view.members.len())
            .filter(|k| f(*k))
            .map(|k| self.view.members[k])
            .collect()
    }

    /// True once the protocol wants the engine wedged (a suspicion or a proposed change).
    pub fn wants_wedge(&self) -> bool {
        self.wedge_wanted
    }

    /// The decision, once there is one.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Peers whose rows broke the protocol since the last call (they are suspected).
    pub fn take_misbehaved(&mut self) -> Vec<(NodeId, String)> {
        std::mem::take(&mut self.misbehaved)
    }

    /// Joins this node (as leader) still has to propose.
    pub fn pending_joins(&self) -> &[(NodeId, String)] {
        &self.pending_joins
    }

    /// Members whose rows do not say `active` yet.
    pub fn inactive(&self) -> Vec<NodeId> {
        let g = &self.geom;
        self.ranks_where(|k| {
            if k == self.rank {
                !self.active
            } else {
                self.region.load_u64(g.at(k, g.active())) == 0
            }
        })
    }

    // ----- inputs -------------------------------------------------------------------

    /// `node` is suspected (the fabric reported it failed, or it misbehaved). Its queued
    /// pushes are dropped.
    pub fn suspect(&mut self, node: NodeId) {
        if let Some(k) = self.view.members.iter().position(|m| *m == node) {
            self.failed[k] = true;
            if !self.suspected[k] {
                self.suspected[k] = true;
                self.dirty.suspected = true;
                // Except this node's group: a member of another group must learn why it
                // is left out, also when its row arrived before this node's went out.
                let group = self.geom.at(self.rank, self.geom.group());
                self.pushes.retain(|p| p.peer != node || p.offset == group);
            }
        }
    }

    /// A joiner asked to enter the group (the leader proposes it once every member is
    /// active).
    pub fn request_join(&mut self, node: NodeId, address: String) {
        if address.len() > ADDRESS_BYTES_MAX {
            return;
        }
        self.pending_joins.retain(|(n, _)| *n != node);
        self.pending_joins.push((node, address));
    }

    /// A member asked to change its declaration (the leader proposes it once every member
    /// is active; a later request from the same member replaces an earlier one).
    /// Declarations longer than [`DECLARED_BYTES_MAX`] or from non-members are ignored.
    pub fn request_declare(&mut self, node: NodeId, declared: Vec<u8>) {
        if declared.len() > DECLARED_BYTES_MAX || !self.view.members.contains(&node) {
            return;
        }
        self.pending_declares.retain(|(n, _)| *n != node);
        self.pending_declares.push((node, declared));
    }

    /// Declarations this node (as leader) still has to propose.
    pub fn pending_declares(&self) -> &[(NodeId, Vec<u8>)] {
        &self.pending_declares
    }

    /// This node wants to leave: it suspects itself, so the others remove it; it follows
    /// the protocol until a trim without it reaches a majority ([`Outcome::Left`]).
    pub fn leave(&mut self) {
        self.leaving = true;
        self.suspected[self.rank] = true;
        self.dirty.suspected = true;
    }

    /// The engine is wedged; `frozen` is its `received_num` per subgroup and sender of the
    /// layout, in layout order (zeros for subgroups this node is not in).
    pub fn set_frozen(&mut self, frozen: Vec<u64>) {
        assert_eq!(
            frozen.len(),
            self.geom.frozen_words,
            "one frozen counter per subgroup sender of the layout"
        );
        self.frozen = Some(frozen);
        self.dirty.frozen = true;
    }

    /// This node runs (a joiner once its state is installed).
    pub fn set_active(&mut self) {
        if !self.active {
            self.active = true;
            self.dirty.acks = true;
        }
    }

    // ----- the protocol -------------------------------------------------------------

    fn peer(&self, rank: usize, w: usize) -> u64 {
        self.region.load_u64(self.geom.at(rank, w))
    }

    fn bad(&mut self, rank: usize, what: String) {
        let node = self.view.members[rank];
        tracing::warn!(node = self.view.members[self.rank], peer = node, %what, "membership row");
        self.misbehaved.push((node, what));
        self.suspect(node);
    }

    /// The other members whose rows (as last written here) suspect this node, suspected
    /// or not themselves.
    fn suspected_by(&self) -> Vec<NodeId> {
        let (w, b) = (self.rank / 64, self.rank % 64);
        (0..self.view.members.len())
            .filter(|k| *k != self.rank && self.peer(*k, self.geom.suspected() + w) & (1 << b) != 0)
            .map(|k| self.view.members[k])
            .collect()
    }

    /// The member whose row suspected this node when it shut down, if that is why.
    pub fn excluded_by(&self) -> Option<NodeId> {
        self.excluded_by
    }

    /// The members this node lost when it shut down for want of a majority, in rank
    /// order (empty if it did not).
    pub fn lost_majority_to(&self) -> &[NodeId] {
        &self.lost
    }

    /// Writes this node's group into its row and queues it to every other member, first
    /// of all its pushes; suspecting a member does not drop it (see `suspect`).
    fn push_group(&mut self) {
        let g = &self.geom;
        let (group, set) = (g.at(self.rank, g.group()), g.at(self.rank, g.group_set()));
        self.region.store_u64(group, self.group.id);
        self.region.store_u64(set, 1);
        for (k, &peer) in self.view.members.iter().enumerate() {
            if k != self.rank {
                self.pushes.push_back(Push {
                    peer,
                    region: self.region_id,
                    offset: group,
                    len: WORD_BYTES,
                    guard: Some((set, 1)),
                });
            }
        }
    }

    /// Whether this node's group is still queued to some member.
    fn group_queued(&self) -> bool {
        let group = self.geom.at(self.rank, self.geom.group());
        self.pushes.iter().any(|p| p.offset == group)
    }

    /// Checks the group of every row not checked yet that names one (see the module
    /// docs): a member of another group is treated as failed.
    fn check_groups(&mut self) {
        for k in 0..self.view.members.len() {
            if !self.group_unchecked[k] {
                continue;
            }
            // A suspected member's row is read too: it may be why this node stops.
            let set = self.peer(k, self.geom.group_set()) == 1;
            if !set && !self.suspected[k] {
                continue;
            }
            self.group_unchecked[k] = false;
            self.groups_unchecked -= 1;
            if !set {
                continue;
            }
            let theirs = self.peer(k, self.geom.group());
            if theirs != self.group.id {
                let node = self.view.members[k];
                self.foreign.push((node, theirs));
                let label = self.group.label;
                self.bad(
                    k,
                    format!(
                        "member {node} is configured for {}, this node for {}",
                        label(theirs),
                        label(self.group.id)
                    ),
                );
            }
        }
    }

    /// What this node learnt of members of other groups, if any.
    fn foreign_groups(&self) -> Option<String> {
        let label = self.group.label;
        let theirs: Vec<String> = self
            .foreign
            .iter()
            .map(|(node, g)| format!("member {node} is configured for {}", label(*g)))
            .collect();
        (!theirs.is_empty()).then(|| {
            format!(
                "{}, this node for {}",
                theirs.join(", "),
                label(self.group.id)
            )
        })
    }

    fn shut_down(&mut self, why: String) {
        tracing::info!(node = self.view.members[self.rank], %why, "shutting down");
        self.outcome = Some(Outcome::ShutDown(why));
    }

    /// Evaluates the protocol once, at `now_us` (the caller's clock, µs); returns true if
    /// anything changed.
    pub fn step(&mut self, now_us: u64) -> bool {
        if self.outcome.is_some() {
            return false;
        }
        let n = self.view.members.len();
        let vid = self.view.vid;
        // What this step may change, to tell the runner whether it worked. Suspicions are
        // only ever added within a view, so their count tells whether one was: no copy
        // of the flags (this runs every round of the predicate thread).
        let before = (
            self.suspected_count(),
            self.changes.len(),
            self.num_committed,
        );
        if self.groups_unchecked > 0 {
            self.check_groups();
        }
        // Suspicions propagate from every row this node does not suspect.
        for k in 0..n {
            if k == self.rank || self.suspected[k] {
                continue;
            }
            for w in 0..self.geom.suspected_words {
                let mut bits = self.peer(k, self.geom.suspected() + w);
                // The set bits only: a quiet row costs one load per word.
                while bits != 0 {
                    let j = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if j < n && !self.suspected[j] {
                        self.suspected[j] = true;
                        self.dirty.suspected = true;
                    }
                }
            }
        }
        if self.suspected[self.rank] && !self.leaving {
            self.excluded_by = self.suspected_by().first().copied();
            self.shut_down(format!(
                "removed from view {vid}: other members suspect this node"
            ));
            return true;
        }
        // A trim a majority already holds is decided: act on it before counting who is
        // left (a leaver closes its links once it saw the trim, maybe before we did).
        self.act();
        if self.outcome.is_some() {
            self.flush();
            return true;
        }
        // A member that asked to leave still takes part until the trim that removes it:
        // it counts toward the majority (a domain of two goes on when one leaves) unless
        // it failed since.
        let alive = (0..n)
            .filter(|k| *k == self.rank || self.takes_part(*k))
            .count();
        if alive * 2 <= n && self.leaving {
            // A leaver cut off from the rest (they installed the view without it and
            // closed their links) is done: it wanted out.
            self.outcome = Some(Outcome::Left);
            return true;
        }
        if alive * 2 <= n {
            self.lost = (0..n)
                .filter(|k| *k != self.rank && !self.takes_part(*k))
                .map(|k| self.view.members[k])
                .collect();
            if let Some(why) = self.foreign_groups() {
                // Not before the members of the other group can learn it too (the runner
                // drains the queue), but a push a member never takes (it left the view)
                // is not waited for past GROUP_NOTICE_WAIT_US.
                let since = *self.foreign_since_us.get_or_insert(now_us);
                if self.group_queued() && now_us.saturating_sub(since) < GROUP_NOTICE_WAIT_US {
                    return true;
                }
                // Not excluded, whatever their rows say: this node is of another group.
                self.shut_down(format!(
                    "lost the majority of view {vid}: {alive} of its {n} members \
                     reachable; {why}"
                ));
                return true;
            }
            // Members we lost whose rows suspect us: we were excluded (stopped or starved
            // while they moved on), not cut off. Only the message differs.
            let by = self.suspected_by();
            if let Some(first) = by.first() {
                self.excluded_by = Some(*first);
                self.shut_down(format!(
                    "removed from view {vid}: suspected by {by:?} (this node was silent)"
                ));
            } else {
                self.shut_down(format!(
                    "lost the majority of view {vid}: {alive} of its {n} members reachable"
                ));
            }
            return true;
        }
        let Some(leader) = (0..n).find(|k| !self.suspected[*k]) else {
            self.shut_down(format!("every member of view {vid} is suspected"));
            return true;
        };
        let changes_seen = !self.changes.is_empty()
            || (leader != self.rank && self.peer(leader, self.geom.num_changes()) > 0);
        if !self.wedge_wanted && (self.suspected.iter().any(|s| *s) || changes_seen) {
            self.wedge_wanted = true;
            tracing::info!(
                node = self.view.members[self.rank],
                vid,
                suspected = ?self.suspected(),
                "view change begins: wedging"
            );
        }
        // The span of a view change's steps: only while one runs, never on the data path.
        let _span = self.wedge_wanted.then(|| {
            tracing::debug_span!(
                "view_change",
                node = self.view.members[self.rank],
                vid,
                leader = self.view.members[leader]
            )
            .entered()
        });
        if self.leader_ack != leader as u64 + 1 {
            self.leader_ack = leader as u64 + 1;
            self.dirty.acks = true;
        }
        if leader == self.rank {
            self.lead();
        } else {
            self.follow(leader);
        }
        self.act();
        let work = self.dirty.suspected
            || self.dirty.acks
            || self.dirty.changes
            || self.dirty.frozen
            || self.dirty.trim
            || self.outcome.is_some()
            || before
                != (
                    self.suspected_count(),
                    self.changes.len(),
                    self.num_committed,
                );
        self.flush();
        work
    }

    /// True once every other member was reported failed (for a node that left: they all
    /// dropped it).
    pub fn others_failed(&self) -> bool {
        (0..self.view.members.len()).all(|k| k == self.rank || self.failed[k])
    }

    /// How many members this node suspects (a count that only grows within a view).
    fn suspected_count(&self) -> usize {
        self.suspected.iter().filter(|s| **s).count()
    }

    /// True if member `k` asked to leave: its own row suspects itself.
    fn asked_to_leave(&self, k: usize) -> bool {
        self.peer(k, self.geom.suspected() + k / 64) & (1 << (k % 64)) != 0
    }

    /// True if member `k` (not this one) still takes part in this view change: it is not
    /// suspected, or it is leaving and did not fail.
    fn takes_part(&self, k: usize) -> bool {
        !self.suspected[k] || (!self.failed[k] && self.asked_to_leave(k))
    }

    fn unsuspected_others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.view.members.len()).filter(move |k| *k != self.rank && !self.suspected[*k])
    }

    fn lead(&mut self) {
        let me = self.rank as u64 + 1;
        let g = self.geom.clone();
        if self
            .unsuspected_others()
            .any(|k| self.peer(k, g.leader_ack()) != me)
        {
            return;
        }
        if !self.adopted {
            self.adopted = true;
            let me_rank = self.rank;
            for k in (0..self.view.members.len()).filter(|k| *k != me_rank) {
                let nk = self.peer(k, g.num_changes()) as usize;
                if nk > self.changes.len() {
                    if let Some(list) = self.read_changes(k, g.changes(), nk) {
                        self.changes = list;
                        self.dirty.changes = true;
                    }
                }
                let tag = self.peer(k, g.trim_tag());
                if tag > self.trim.as_ref().map_or(0, |t| t.tag) {
                    if let Some(t) = self.read_trim(k, tag) {
                        self.trim = Some(t);
                        self.dirty.trim = true;
                    }
                }
            }
        }
        if self.trim.is_none() {
            for k in 0..self.view.members.len() {
                let node = self.view.members[k];
                if self.suspected[k]
                    && !self.changes.contains(&Change::Remove(node))
                    && self.changes.len() < CHANGES_MAX
                {
                    self.changes.push(Change::Remove(node));
                    self.dirty.changes = true;
                }
            }
            if self.inactive().is_empty() {
                for (node, address) in self.pending_joins.clone() {
                    let proposed = self
                        .changes
                        .iter()
                        .any(|c| matches!(c, Change::Add { node: x, .. } if *x == node));
                    let room = !self.view.members.contains(&node)
                        || self.changes.contains(&Change::Remove(node));
                    if !proposed && room && self.changes.len() < CHANGES_MAX {
                        self.changes.push(Change::Add { node, address });
                        self.dirty.changes = true;
                        self.pending_joins.retain(|(x, _)| *x != node);
                    }
                }
                for (node, declared) in std::mem::take(&mut self.pending_declares) {
                    let current = self.view.declared.get(&node).map_or(&[][..], |d| d);
                    let proposed = self.changes.iter().rev().find_map(|c| match c {
                        Change::Declare { node: x, declared } if *x == node => Some(declared),
                        _ => None,
                    });
                    let unchanged = proposed.map_or(current, |p| p.as_slice()) == declared;
                    let removed = self.changes.contains(&Change::Remove(node));
                    if unchanged || removed {
                        continue;
                    }
                    if self.changes.len() < CHANGES_MAX {
                        self.changes.push(Change::Declare { node, declared });
                        self.dirty.changes = true;
                    } else {
                        self.pending_declares.push((node, declared));
                    }
                }
            }
        }
        if self.num_acked != self.changes.len() {
            self.num_acked = self.changes.len();
            self.dirty.acks = true;
        }
        let want = self.changes.len();
        if self.num_committed < want
            && self
                .unsuspected_others()
                .all(|k| self.peer(k, g.num_acked()) as usize >= want)
        {
            self.num_committed = want;
            self.dirty.acks = true;
        }
        if self.trim.is_none() && self.num_committed > 0 {
            self.compute_trim();
        }
    }

    /// The leader's ragged trim, once the committed changes remove every suspected member
    /// and every remaining member has published its frozen counters.
    fn compute_trim(&mut self) {
        let committed = self.changes[..self.num_committed].to_vec();
        let removed: BTreeSet<NodeId> = committed
            .iter()
            .filter_map(|c| match c {
                Change::Remove(n) => Some(*n),
                _ => None,
            })
            .collect();
        let n = self.view.members.len();
        if (0..n).any(|k| self.suspected[k] && !removed.contains(&self.view.members[k])) {
            return;
        }
        let Some(own) = self.frozen.clone() else {
            return;
        };
        let g = self.geom.clone();
        let remaining: Vec<usize> = (0..n)
            .filter(|k| !removed.contains(&self.view.members[*k]))
            .collect();
        if remaining
            .iter()
            .any(|k| *k != self.rank && self.peer(*k, g.wedged()) != 1)
        {
            return;
        }
        let mut cuts = Vec::with_capacity(g.frozen_words);
        let mut base = 0;
        for sg in &self.layout.subgroups.clone() {
            if matches!(sg.mode, DeliveryMode::Dare(_)) {
                let Some(c) = self.dare_handoff(sg, &removed, &own, base) else {
                    return;
                };
                cuts.extend(c);
                base += sg.frozen_words();
                continue;
            }
            let senders = sg.senders.len();
            let mut c = vec![u64::MAX; senders];
            let mut any = false;
            for m in sg.members.iter().filter(|m| !removed.contains(m)) {
                let Some(k) = self.view.members.iter().position(|x| x == m) else {
                    continue;
                };
                any = true;
                for (r, v) in c.iter_mut().enumerate() {
                    let f = if k == self.rank {
                        own[base + r]
                    } else {
                        self.peer(k, g.frozen() + base + r)
                    };
                    *v = (*v).min(f);
                }
            }
            if !any {
                c = vec![0; senders];
            }
            if sg.mode == DeliveryMode::Atomic {
                // Cut at the first round-robin gap.
                let s = senders as u64;
                let trim = c
                    .iter()
                    .enumerate()
                    .map(|(r, k)| k.saturating_mul(s).saturating_add(r as u64))
                    .min()
                    .unwrap_or(0);
                for (r, v) in c.iter_mut().enumerate() {
                    let r = r as u64;
                    *v = if trim <= r { 0 } else { (trim - r).div_ceil(s) };
                }
            }
            cuts.extend(c);
            base += senders;
        }
        tracing::debug!(changes = committed.len(), cuts = ?cuts, "ragged trim computed");
        self.trim = Some(Trim {
            tag: self.rank as u64 + 1,
            changes: committed,
            cuts,
        });
        self.dirty.trim = true;
    }

    /// A dare subgroup's part of the trim, from its remaining members' frozen reports
    /// (`log_term`, `tail`, `applied`, `term` at `base` of their frozen words): the
    /// hand-off source, the range `(from, to]` every survivor ends the instance with
    /// ([`handoff_source`]), and the next instance's first term, one past every term
    /// reported. `None` (and the member suspected) if the reports cannot be honoured.
    fn dare_handoff(
        &mut self,
        sg: &SubgroupSpec,
        removed: &BTreeSet<NodeId>,
        own: &[u64],
        base: usize,
    ) -> Option<Vec<u64>> {
        let g = self.geom.clone();
        let mut reports = Vec::new();
        let mut term_max = 0u64;
        for m in sg.members.iter().filter(|m| !removed.contains(m)) {
            let Some(k) = self.view.members.iter().position(|x| x == m) else {
                continue;
            };
            let w = |j: usize| {
                if k == self.rank {
                    own[base + j]
                } else {
                    self.peer(k, g.frozen() + base + j)
                }
            };
            reports.push(DareReport {
                node: *m,
                log_term: w(0),
                tail: w(1),
                applied: w(2),
            });
            term_max = term_max.max(w(0)).max(w(3));
        }
        match handoff_source(&reports) {
            Ok(Some((source, from, to))) => Some(vec![
                u64::from(source),
                from,
                to,
                term_max.saturating_add(1),
            ]),
            Ok(None) => Some(vec![0; sg.frozen_words()]),
            Err(e) => {
                let culprit = reports.iter().max_by_key(|r| r.applied).map(|r| r.node);
                if let Some(k) =
                    culprit.and_then(|c| self.view.members.iter().position(|x| *x == c))
                {
                    self.bad(k, format!("subgroup {}: {e}", sg.id));
                }
                None
            }
        }
    }

    fn follow(&mut self, leader: usize) {
        let g = self.geom.clone();
        let switched = self.following != Some(leader);
        self.following = Some(leader);
        let ln = self.peer(leader, g.num_changes()) as usize;
        if ln > CHANGES_MAX {
            self.bad(leader, format!("num_changes {ln} exceeds {CHANGES_MAX}"));
            return;
        }
        if ln > self.changes.len() || (switched && ln == self.changes.len() && ln > 0) {
            if let Some(list) = self.read_changes(leader, g.changes(), ln) {
                if list != self.changes {
                    self.changes = list;
                    self.dirty.changes = true;
                }
            }
        }
        if self.num_acked != self.changes.len() {
            self.num_acked = self.changes.len();
            self.dirty.acks = true;
        }
        let lc = (self.peer(leader, g.num_committed()) as usize).min(self.num_acked);
        if lc > self.num_committed {
            self.num_committed = lc;
            self.dirty.acks = true;
        }
        let tag = self.peer(leader, g.trim_tag());
        if tag != 0 && self.trim.as_ref().map(|t| t.tag) != Some(tag) {
            if let Some(t) = self.read_trim(leader, tag) {
                self.trim = Some(t);
                self.dirty.trim = true;
            }
        }
    }

    fn act(&mut self) {
        let Some(trim) = self.trim.clone() else {
            return;
        };
        if self.frozen.is_none() || self.outcome.is_some() {
            return;
        }
        let g = &self.geom;
        let n = self.view.members.len();
        let holders = 1
            + (0..n)
                .filter(|k| *k != self.rank && self.peer(*k, g.trim_tag()) == trim.tag)
                .count();
        if holders * 2 <= n {
            return;
        }
        let me = self.view.members[self.rank];
        tracing::debug!(
            node = me,
            vid = self.view.vid,
            holders,
            "trim decided by a majority"
        );
        self.outcome = Some(if trim.removes(me) {
            if self.leaving {
                Outcome::Left
            } else {
                Outcome::ShutDown(format!(
                    "removed from the group by the view after {}",
                    self.view.vid
                ))
            }
        } else {
            Outcome::Install(trim)
        });
    }

    // ----- rows ---------------------------------------------------------------------

    fn read_changes(&mut self, rank: usize, at: usize, count: usize) -> Option<Vec<Change>> {
        if count > CHANGES_MAX {
            self.bad(rank, format!("{count} changes, at most {CHANGES_MAX}"));
            return None;
        }
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let base = self.geom.at(rank, at + i * CHANGE_WORDS);
            match decode_change(&self.region, base) {
                Ok(c) => out.push(c),
                Err(e) => {
                    self.bad(rank, format!("change {i}: {e}"));
                    return None;
                }
            }
        }
        Some(out)
    }

    fn read_trim(&mut self, rank: usize, tag: u64) -> Option<Trim> {
        let g = self.geom.clone();
        if tag as usize > self.view.members.len() {
            self.bad(rank, format!("trim tag {tag} names no rank"));
            return None;
        }
        let count = self.peer(rank, g.trim_num()) as usize;
        let changes = self.read_changes(rank, g.trim_changes(), count)?;
        let cuts = (0..g.frozen_words)
            .map(|i| self.peer(rank, g.trim_cuts() + i))
            .collect();
        Some(Trim { tag, changes, cuts })
    }

    fn store_changes(&self, at: usize, list: &[Change]) {
        for (i, c) in list.iter().enumerate() {
            encode_change(
                &self.region,
                self.geom.at(self.rank, at + i * CHANGE_WORDS),
                c,
            );
        }
    }

    /// Writes the dirty parts of this node's row and queues their pushes: data first,
    /// then the word that gates it.
    fn flush(&mut self) {
        let d = std::mem::take(&mut self.dirty);
        if !(d.suspected || d.acks || d.changes || d.frozen || d.trim) {
            // The steady state, every round: nothing to write, no peer list to build.
            return;
        }
        let g = self.geom.clone();
        // Leavers too: they must see the trim that removes them to echo it.
        let peers: Vec<NodeId> = (0..self.view.members.len())
            .filter(|k| *k != self.rank && self.takes_part(*k))
            .map(|k| self.view.members[k])
            .collect();
        type Section = (usize, usize, Option<(usize, u64)>);
        let mut out: Vec<Section> = Vec::new();
        let mut queue = |offset: usize, len: usize, guard: Option<(usize, u64)>| {
            out.push((offset, len, guard));
        };
        let row = |w: usize| g.at(self.rank, w);
        if d.changes {
            self.store_changes(g.changes(), &self.changes);
            let len = self.changes.len() * CHANGE_WORDS * WORD_BYTES;
            let num = self.changes.len() as u64;
            self.region.store_u64(row(g.num_changes()), num);
            if len > 0 {
                queue(row(g.changes()), len, Some((row(g.num_changes()), num)));
            } else {
                queue(row(g.num_changes()), WORD_BYTES, None);
            }
        }
        if d.acks {
            self.region
                .store_u64(row(g.num_acked()), self.num_acked as u64);
            self.region
                .store_u64(row(g.num_committed()), self.num_committed as u64);
            self.region.store_u64(row(g.leader_ack()), self.leader_ack);
            self.region
                .store_u64(row(g.active()), u64::from(self.active));
            queue(row(g.num_acked()), 4 * WORD_BYTES, None);
        }
        if d.suspected {
            for w in 0..g.suspected_words {
                let mut bits = 0u64;
                for b in 0..64 {
                    if self.suspected.get(w * 64 + b).copied().unwrap_or(false) {
                        bits |= 1 << b;
                    }
                }
                self.region.store_u64(row(g.suspected() + w), bits);
            }
            queue(row(g.suspected()), g.suspected_words * WORD_BYTES, None);
        }
        if d.frozen {
            if let Some(f) = &self.frozen {
                for (i, v) in f.iter().enumerate() {
                    self.region.store_u64(row(g.frozen() + i), *v);
                }
            }
            self.region.store_u64(row(g.wedged()), 1);
            if g.frozen_words > 0 {
                queue(
                    row(g.frozen()),
                    g.frozen_words * WORD_BYTES,
                    Some((row(g.wedged()), 1)),
                );
            } else {
                queue(row(g.wedged()), WORD_BYTES, None);
            }
        }
        if d.trim {
            if let Some(t) = &self.trim {
                self.region
                    .store_u64(row(g.trim_num()), t.changes.len() as u64);
                self.store_changes(g.trim_changes(), &t.changes);
                for (i, v) in t.cuts.iter().enumerate() {
                    self.region.store_u64(row(g.trim_cuts() + i), *v);
                }
                self.region.store_u64(row(g.trim_tag()), t.tag);
                let len = (g.trim_cuts() + g.frozen_words - g.trim_num()) * WORD_BYTES;
                queue(row(g.trim_num()), len, Some((row(g.trim_tag()), t.tag)));
            }
        }
        for (offset, len, guard) in out {
            for &peer in &peers {
                self.pushes.push_back(Push {
                    peer,
                    region: self.region_id,
                    offset,
                    len,
                    guard,
                });
            }
        }
    }

    /// Posts queued pushes (see [`crate::Engine::drain_pushes`]); a peer whose post fails
    /// for good is suspected. Returns how many were posted.
    pub fn drain_pushes(
        &mut self,
        post: impl FnMut(&Push, &PushBytes<'_>) -> spindle_transport_rdma::Result<()>,
    ) -> usize {
        let region = &self.region;
        let id = self.region_id;
        let peers_total = self.view.members.len();
        let (posted, failed) = drain_queue(
            &mut self.pushes,
            peers_total,
            |r| (r == id).then_some(region),
            post,
        );
        for peer in failed {
            self.suspect(peer);
        }
        posted
    }

    /// True if no push is waiting.
    pub fn is_drained(&self) -> bool {
        self.pushes.is_empty()
    }
}

fn encode_change(region: &Region, at: usize, c: &Change) {
    let (kind, node, body) = match c {
        Change::Remove(n) => (KIND_REMOVE, *n, &[][..]),
        Change::Add { node, address } => (KIND_ADD, *node, address.as_bytes()),
        Change::Declare { node, declared } => (KIND_DECLARE, *node, declared.as_slice()),
    };
    // Bodies were checked against their bounds when the join or declaration was requested.
    let body = &body[..body.len().min(CHANGE_BYTES_MAX)];
    region.store_u64(at, kind << 32 | u64::from(node));
    region.store_u64(at + WORD_BYTES, body.len() as u64);
    let _ = region.write_bytes(at + 2 * WORD_BYTES, body);
}

/// Decodes `bytes` laid out as one membership change of an SST row, as a peer wrote it
/// (kind and node word, length word, body); true if it decodes. Never panics, whatever
/// the bytes: the entry point of the `sst_change` fuzz target (`group/fuzz`).
pub fn decode_sst_change(bytes: &[u8]) -> bool {
    let len = bytes.len().max(2 * WORD_BYTES);
    let Ok(region) = Region::new_heap(0, len) else {
        return false;
    };
    region.write_bytes(0, bytes).is_ok() && decode_change(&region, 0).is_ok()
}

fn decode_change(region: &Region, at: usize) -> std::result::Result<Change, String> {
    let w = region.load_u64(at);
    let node = (w & 0xFFFF_FFFF) as NodeId;
    let len = region.load_u64(at + WORD_BYTES);
    let body = |max: usize| -> std::result::Result<Vec<u8>, String> {
        if len > max as u64 {
            return Err(format!("a body of {len} bytes, at most {max}"));
        }
        let mut bytes = vec![0u8; len as usize];
        region
            .read_bytes(at + 2 * WORD_BYTES, &mut bytes)
            .map_err(|e| e.to_string())?;
        Ok(bytes)
    };
    match w >> 32 {
        KIND_REMOVE => Ok(Change::Remove(node)),
        KIND_ADD => {
            let address = String::from_utf8(body(ADDRESS_BYTES_MAX)?)
                .map_err(|_| "address is not UTF-8".to_string())?;
            Ok(Change::Add { node, address })
        }
        KIND_DECLARE => Ok(Change::Declare {
            node,
            declared: body(DECLARED_BYTES_MAX)?,
        }),
        k => Err(format!("unknown change kind {k}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuzz_entry_point_decodes_sst_changes_and_refuses_junk() {
        let region = Region::new_heap(0, CHANGE_WORDS * WORD_BYTES).unwrap();
        for c in [
            Change::Remove(3),
            Change::Add {
                node: 4,
                address: "127.0.0.1:7404".into(),
            },
            Change::Declare {
                node: 5,
                declared: vec![1, 2, 3],
            },
        ] {
            encode_change(&region, 0, &c);
            let row = region.to_vec(0, region.len()).unwrap();
            assert_eq!(decode_change(&region, 0), Ok(c));
            assert!(decode_sst_change(&row));
        }
        assert!(!decode_sst_change(&[]), "an empty row is no change");
        assert!(!decode_sst_change(&[0xff; 64]), "unknown kind, huge length");
        let mut huge = vec![0u8; 16];
        huge[4] = 2; // KIND_ADD
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(!decode_sst_change(&huge), "a body longer than any bound");
    }
}
