//! Views, subgroup layouts, and the byte geometry of each subgroup's SST region.
//!
//! Every member computes the same [`Geometry`] from the same [`View`] and [`SubgroupSpec`],
//! so a row written at an offset on one node lands at the same offset on every other.

use std::collections::{BTreeMap, BTreeSet};

use spindle_transport_rdma::{
    round_up_to_words, NodeId, PeerWrites, RegionId, REGION_BYTES_MAX, WORD_BYTES,
};

use crate::error::{Error, Result};
use crate::rdmc::{RdmcConfig, RdmcGroup};

/// Words a dare subgroup takes in the frozen counters and the trim
/// ([`SubgroupSpec::frozen_words`]).
pub const DARE_FROZEN_WORDS: usize = 4;

/// A subgroup's id, unique within a layout.
pub type SubgroupId = u32;

/// Most members in one view.
pub const VIEW_MEMBERS_MAX: usize = 256;
/// Most subgroups in one layout.
pub const SUBGROUPS_MAX: usize = 1024;
/// Most members of one subgroup.
pub const SUBGROUP_MEMBERS_MAX: usize = 64;
/// Most slots in one sender's ring.
pub const WINDOW_SLOTS_MAX: usize = 4096;
/// Largest slot payload (larger messages go by RDMC when the subgroup has an
/// [`SubgroupSpec::rdmc`] configuration).
pub const SLOT_PAYLOAD_BYTES_MAX: usize = 64 << 10;
/// The length word of a slot that announces an RDMC message (Derecho §3.6): its payload
/// is two words, the message's RDMC sequence number (1, 2, … per sender and view) and its
/// size in bytes; the bytes themselves move by the sender's RDMC group.
pub const RDMC_LEN: u64 = u64::MAX - 1;
/// Payload bytes of an RDMC announcement slot (the smallest slot payload of a subgroup
/// with RDMC).
pub const RDMC_ANNOUNCE_BYTES: usize = 2 * WORD_BYTES;
/// Most RDMC groups in one layout (one per sender of every subgroup with RDMC): their
/// region ids take the indices above the subgroups' and below the membership's.
pub const RDMC_GROUPS_MAX: usize = 2046;
const RDMC_REGION_INDEX_BASE: usize = 2048;
const _: () = assert!(SUBGROUPS_MAX <= RDMC_REGION_INDEX_BASE);
const _: () = assert!(RDMC_REGION_INDEX_BASE + RDMC_GROUPS_MAX < (1 << 12) - 1);
/// Bytes of the header in front of every slot's payload: the message's index + 1, then
/// its length (or [`NULL_LEN`]).
pub const SLOT_HEADER_BYTES: usize = 2 * WORD_BYTES;
/// The length word of a null message's slot.
pub const NULL_LEN: u64 = u64::MAX;
/// Bytes reserved at the head of each sender's ring for its `published_num` guard (a
/// cache line, so the guard never shares a line with a slot).
pub const RING_HEADER_BYTES: usize = 64;
/// Control rows are padded to this many bytes (a cache line).
pub const CTRL_ROW_ALIGN_BYTES: usize = 64;

/// How a subgroup orders deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryMode {
    /// One total order (round-robin over senders); a message is delivered once every member
    /// has received it and all earlier messages are delivered.
    Atomic,
    /// Delivered on receipt; each sender's order is kept, nothing more.
    Unordered,
    /// One total order chosen by a leader ([`crate::dare`], DARE §3): the subgroup has no
    /// SMC rings; each member runs one [`crate::dare::DareNode`] per view over the
    /// subgroup's members, a sender's message goes to the leader, which replicates it
    /// into the followers' logs and commits it on a majority. The payload bound is the
    /// subgroup's `slot_payload_bytes`, the sender's staging window its `window_slots`.
    /// Liveness needs a majority of the subgroup's members in each view.
    Dare(DareSettings),
}

/// Most dare subgroups in one layout (each takes its own range of log region ids and
/// of two-sided immediates).
pub const DARE_SUBGROUPS_MAX: usize = 16;
/// Default [`DareSettings::log_entries`].
pub const DARE_MODE_LOG_ENTRIES_DEFAULT: usize = 1024;
/// Default [`DareSettings::sender_window`].
pub const DARE_MODE_SENDER_WINDOW_DEFAULT: usize = 256;
/// Default [`DareSettings::heartbeat_us`].
pub const DARE_MODE_HEARTBEAT_US_DEFAULT: u64 = 1_000;
/// Default [`DareSettings::election_timeout_us`].
pub const DARE_MODE_ELECTION_TIMEOUT_US_DEFAULT: u64 = 10_000;

/// The settings of a [`DeliveryMode::Dare`] subgroup (the rest of its
/// [`crate::dare::DareConfig`] comes from the [`SubgroupSpec`]: the payload bound is its
/// `slot_payload_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DareSettings {
    /// Slots in each member's log ring.
    pub log_entries: usize,
    /// Messages a sender may have handed to the leader and not yet delivered itself.
    pub sender_window: usize,
    /// How often the leader writes its heartbeat word, in µs.
    pub heartbeat_us: u64,
    /// The smallest election time-out, in µs (see
    /// [`crate::dare::DareConfig::election_timeout_us`]).
    pub election_timeout_us: u64,
}

impl Default for DareSettings {
    fn default() -> Self {
        DareSettings {
            log_entries: DARE_MODE_LOG_ENTRIES_DEFAULT,
            sender_window: DARE_MODE_SENDER_WINDOW_DEFAULT,
            heartbeat_us: DARE_MODE_HEARTBEAT_US_DEFAULT,
            election_timeout_us: DARE_MODE_ELECTION_TIMEOUT_US_DEFAULT,
        }
    }
}

impl DareSettings {
    /// The [`crate::dare::DareConfig`] of a dare subgroup whose messages carry at most
    /// `payload_bytes_max` bytes.
    pub fn config(&self, payload_bytes_max: usize) -> crate::dare::DareConfig {
        crate::dare::DareConfig {
            log_entries: self.log_entries,
            payload_bytes_max,
            sender_window: self.sender_window,
            heartbeat_us: self.heartbeat_us,
            election_timeout_us: self.election_timeout_us,
        }
    }
}

/// A membership view: an id, the members in rank order, and what each member declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The view id; grows by one with every view change.
    pub vid: u32,
    /// The members' node ids; a member's rank is its index here.
    pub members: Vec<NodeId>,
    /// What members declared through [`crate::Group::declare`] (opaque to the engine, at
    /// most [`DECLARED_BYTES_MAX`] bytes each), agreed by the view change like the member
    /// list, so a layout function may depend on it: DDS declares its readers and writers
    /// here. A member that declared nothing has no entry.
    pub declared: BTreeMap<NodeId, Vec<u8>>,
}

/// Most bytes one member may declare (see [`View::declared`]).
pub const DECLARED_BYTES_MAX: usize = 256;

impl View {
    /// View `vid` of `members`, nothing declared.
    pub fn new(vid: u32, members: Vec<NodeId>) -> View {
        View {
            vid,
            members,
            declared: BTreeMap::new(),
        }
    }

    /// Checks the member list: not empty, no duplicates, within [`VIEW_MEMBERS_MAX`].
    pub fn validate(&self) -> Result<()> {
        if self.members.is_empty() || self.members.len() > VIEW_MEMBERS_MAX {
            return Err(Error::Config(format!(
                "view {}: {} members, must be 1..={VIEW_MEMBERS_MAX}",
                self.vid,
                self.members.len()
            )));
        }
        let unique: BTreeSet<_> = self.members.iter().collect();
        if unique.len() != self.members.len() {
            return Err(Error::Config(format!(
                "view {}: a node appears twice in {:?}",
                self.vid, self.members
            )));
        }
        Ok(())
    }
}

/// One subgroup of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubgroupSpec {
    /// The subgroup's id.
    pub id: SubgroupId,
    /// Its members, in subgroup rank order; all must be in the view.
    pub members: Vec<NodeId>,
    /// The members that send, in sender rank order (round-robin order).
    pub senders: Vec<NodeId>,
    /// Atomic or unordered delivery.
    pub mode: DeliveryMode,
    /// Slots in each sender's ring (`window_size`).
    pub window_slots: usize,
    /// Largest message payload, in bytes.
    pub slot_payload_bytes: usize,
    /// Large messages: `Some` lets a sender send messages above `slot_payload_bytes`, up
    /// to `message_bytes_max`, by RDMC in the same total order (one RDMC group per sender,
    /// root = that sender). Every member then registers, per sender, a region of
    /// [`RdmcGroup::region_bytes`] (about `window_messages × message_bytes_max`): see
    /// [`SubgroupSpec::rdmc_bytes_per_member`].
    pub rdmc: Option<RdmcConfig>,
    /// Members handed only a prefix of each delivered message: `None` hands every member
    /// whole messages. Every member still receives, acknowledges and delivers every
    /// message in the same order (the protocol is unchanged); only the copy out of the
    /// ring into the delivery batch stops at the prefix ([`Message::full_len`] says how
    /// long the message was). For members whose application reads only a header of
    /// what the subgroup carries (a DCPS participant that writes a subgroup's topics
    /// but reads none of them).
    ///
    /// [`Message::full_len`]: crate::Message::full_len
    pub delivery_prefix: Option<DeliveryPrefix>,
}

/// Which members of a subgroup are handed only a prefix of each message, and how long
/// ([`SubgroupSpec::delivery_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPrefix {
    /// Bytes handed over of each message (the whole message when it is shorter).
    pub bytes: usize,
    /// The members concerned; each must be a member of the subgroup.
    pub members: Vec<NodeId>,
}

impl SubgroupSpec {
    /// Words this subgroup takes in a member's frozen counters and in a trim at a view
    /// change (`crate::membership`): one `received_num` per sender, or, for a dare
    /// subgroup, its hand-off report (`log_term`, `tail`, `applied`, `term`) and in the
    /// trim the hand-off (`source`, `from`, `to`, the next instance's first term).
    pub fn frozen_words(&self) -> usize {
        match self.mode {
            DeliveryMode::Dare(_) => DARE_FROZEN_WORDS,
            _ => self.senders.len(),
        }
    }

    /// The RDMC memory each member of this subgroup registers: one region per sender
    /// (zero without RDMC).
    pub fn rdmc_bytes_per_member(&self) -> usize {
        self.rdmc.as_ref().map_or(0, |c| {
            self.senders.len() * RdmcGroup::region_bytes(self.members.len(), c)
        })
    }
}

/// The subgroups of a view, computed the same way by every member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// The subgroups.
    pub subgroups: Vec<SubgroupSpec>,
}

impl Layout {
    /// One atomic subgroup `id` of every member of `view`, every member a sender: the
    /// layout of the workloads and tests that need no more.
    ///
    /// ```
    /// use spindle_group::{DeliveryMode, Layout, View};
    /// let view = View::new(1, vec![4, 7]);
    /// let l = Layout::one_subgroup(&view, 3, 16, 64);
    /// assert_eq!(l.subgroups[0].senders, vec![4, 7]);
    /// assert_eq!(l.subgroups[0].mode, DeliveryMode::Atomic);
    /// assert!(l.validate(&view).is_ok());
    /// ```
    pub fn one_subgroup(
        view: &View,
        id: SubgroupId,
        window_slots: usize,
        slot_payload_bytes: usize,
    ) -> Layout {
        Layout {
            subgroups: vec![SubgroupSpec {
                id,
                members: view.members.clone(),
                senders: view.members.clone(),
                mode: DeliveryMode::Atomic,
                window_slots,
                slot_payload_bytes,
                rdmc: None,
                delivery_prefix: None,
            }],
        }
    }

    /// Checks every subgroup against the view and the bounds of this module.
    pub fn validate(&self, view: &View) -> Result<()> {
        view.validate()?;
        if self.subgroups.len() > SUBGROUPS_MAX {
            return Err(Error::Config(format!(
                "{} subgroups, at most {SUBGROUPS_MAX}",
                self.subgroups.len()
            )));
        }
        let mut ids = BTreeSet::new();
        let rdmc_groups: usize = self
            .subgroups
            .iter()
            .filter(|s| s.rdmc.is_some())
            .map(|s| s.senders.len())
            .sum();
        if rdmc_groups > RDMC_GROUPS_MAX {
            return Err(Error::Config(format!(
                "{rdmc_groups} RDMC groups (senders of subgroups with RDMC), at most \
                 {RDMC_GROUPS_MAX}"
            )));
        }
        let dare = self
            .subgroups
            .iter()
            .filter(|s| matches!(s.mode, DeliveryMode::Dare(_)))
            .count();
        if dare > DARE_SUBGROUPS_MAX {
            return Err(Error::Config(format!(
                "{dare} dare subgroups, at most {DARE_SUBGROUPS_MAX}"
            )));
        }
        for sg in &self.subgroups {
            if !ids.insert(sg.id) {
                return Err(Error::Config(format!(
                    "subgroup id {} appears twice",
                    sg.id
                )));
            }
            Geometry::new(sg)?;
            if let Some(m) = sg.members.iter().find(|m| !view.members.contains(m)) {
                return Err(Error::Config(format!(
                    "subgroup {}: member {m} is not in view {}",
                    sg.id, view.vid
                )));
            }
            if let DeliveryMode::Dare(d) = sg.mode {
                if sg.rdmc.is_some() {
                    return Err(Error::Config(format!(
                        "subgroup {}: a dare subgroup carries no large messages (rdmc must be \
                         None)",
                        sg.id
                    )));
                }
                d.config(sg.slot_payload_bytes)
                    .validate()
                    .map_err(|e| Error::Config(format!("subgroup {}: {e}", sg.id)))?;
            }
            let prefixed = sg.delivery_prefix.iter().flat_map(|p| &p.members);
            if let Some(m) = prefixed.clone().find(|m| !sg.members.contains(m)) {
                return Err(Error::Config(format!(
                    "subgroup {}: delivery_prefix names {m}, not a member of it",
                    sg.id
                )));
            }
        }
        Ok(())
    }
}

/// Byte offsets of one subgroup's SST region. Every member's copy has the same layout:
/// one control row per member (`received_num` per sender, then `delivered_num`, then
/// `persisted_num`), then one
/// ring per sender (its `published_num` guard, then `window_slots` slots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Members of the subgroup.
    pub members: usize,
    /// Senders of the subgroup.
    pub senders: usize,
    /// Slots per ring.
    pub window_slots: usize,
    /// Largest payload.
    pub slot_payload_bytes: usize,
    /// Bytes of one control row.
    pub ctrl_row_bytes: usize,
    /// Bytes of one slot, header included.
    pub slot_bytes: usize,
    /// Bytes of one ring, header included.
    pub ring_bytes: usize,
    /// Bytes of the whole region.
    pub region_bytes: usize,
}

impl Geometry {
    /// The geometry of `spec`, after checking it (members, senders, bounds).
    pub fn new(spec: &SubgroupSpec) -> Result<Geometry> {
        let id = spec.id;
        let bad = |what: String| Err(Error::Config(format!("subgroup {id}: {what}")));
        if spec.members.is_empty() || spec.members.len() > SUBGROUP_MEMBERS_MAX {
            return bad(format!(
                "{} members, must be 1..={SUBGROUP_MEMBERS_MAX}",
                spec.members.len()
            ));
        }
        let members: BTreeSet<_> = spec.members.iter().collect();
        if members.len() != spec.members.len() {
            return bad("a member appears twice".into());
        }
        if spec.senders.is_empty() {
            return bad("no senders".into());
        }
        let senders: BTreeSet<_> = spec.senders.iter().collect();
        if senders.len() != spec.senders.len() {
            return bad("a sender appears twice".into());
        }
        if let Some(s) = spec.senders.iter().find(|s| !members.contains(s)) {
            return bad(format!("sender {s} is not a member"));
        }
        if spec.window_slots == 0 || spec.window_slots > WINDOW_SLOTS_MAX {
            return bad(format!(
                "window_slots {} must be 1..={WINDOW_SLOTS_MAX}",
                spec.window_slots
            ));
        }
        if spec.slot_payload_bytes > SLOT_PAYLOAD_BYTES_MAX {
            return bad(format!(
                "slot_payload_bytes {} exceeds {SLOT_PAYLOAD_BYTES_MAX}",
                spec.slot_payload_bytes
            ));
        }
        if let Some(c) = &spec.rdmc {
            if spec.slot_payload_bytes < RDMC_ANNOUNCE_BYTES {
                return bad(format!(
                    "slot_payload_bytes {} is below the {RDMC_ANNOUNCE_BYTES} bytes of an RDMC \
                     announcement",
                    spec.slot_payload_bytes
                ));
            }
            if let Err(e) = c.validate() {
                return bad(format!("{e}"));
            }
        }
        // received_num per sender, delivered_num, persisted_num.
        let ctrl_row_bytes = ((spec.senders.len() + 2) * WORD_BYTES).div_ceil(CTRL_ROW_ALIGN_BYTES)
            * CTRL_ROW_ALIGN_BYTES;
        let slot_bytes = SLOT_HEADER_BYTES + round_up_to_words(spec.slot_payload_bytes);
        let ring_bytes = RING_HEADER_BYTES + spec.window_slots * slot_bytes;
        let region_bytes = spec.members.len() * ctrl_row_bytes + spec.senders.len() * ring_bytes;
        if region_bytes > REGION_BYTES_MAX {
            return bad(format!(
                "its SST region would take {region_bytes} bytes, more than {REGION_BYTES_MAX}"
            ));
        }
        Ok(Geometry {
            members: spec.members.len(),
            senders: spec.senders.len(),
            window_slots: spec.window_slots,
            slot_payload_bytes: spec.slot_payload_bytes,
            ctrl_row_bytes,
            slot_bytes,
            ring_bytes,
            region_bytes,
        })
    }

    /// Offset of member `rank`'s control row.
    pub fn ctrl_row(&self, rank: usize) -> usize {
        rank * self.ctrl_row_bytes
    }

    /// Offset of member `rank`'s `received_num` for sender `sender_rank`.
    pub fn received_num(&self, rank: usize, sender_rank: usize) -> usize {
        self.ctrl_row(rank) + sender_rank * WORD_BYTES
    }

    /// Offset of member `rank`'s `delivered_num`.
    pub fn delivered_num(&self, rank: usize) -> usize {
        self.ctrl_row(rank) + self.senders * WORD_BYTES
    }

    /// Offset of member `rank`'s `persisted_num`: how far, in the subgroup's delivery order
    /// of this view, the member's log is durable (the logged store's second frontier).
    pub fn persisted_num(&self, rank: usize) -> usize {
        self.delivered_num(rank) + WORD_BYTES
    }

    /// Offset of sender `sender_rank`'s ring (its `published_num` guard).
    pub fn ring(&self, sender_rank: usize) -> usize {
        self.members * self.ctrl_row_bytes + sender_rank * self.ring_bytes
    }

    /// Offset of the slot holding message `index` of sender `sender_rank`.
    pub fn slot(&self, sender_rank: usize, index: u64) -> usize {
        self.ring(sender_rank)
            + RING_HEADER_BYTES
            + (index % self.window_slots as u64) as usize * self.slot_bytes
    }

    /// What each other member of `spec` may write into `me`'s copy of the region (a
    /// member writes only its own control row and, a sender, its own ring: Derecho's SST
    /// rule), for [`spindle_transport_rdma::Region::limit_peer_writes`].
    pub fn peer_writes(&self, spec: &SubgroupSpec, me: NodeId) -> Result<PeerWrites> {
        let mut grants = PeerWrites::default();
        for (rank, &m) in spec.members.iter().enumerate().filter(|(_, m)| **m != me) {
            let row = self.ctrl_row(rank);
            grants.grant(m, row..row + self.ctrl_row_bytes)?;
            if let Some(s) = spec.senders.iter().position(|&x| x == m) {
                let ring = self.ring(s);
                grants.grant(m, ring..ring + self.ring_bytes)?;
            }
        }
        Ok(grants)
    }

    /// The global index of message `index` of sender `sender_rank` (round-robin order).
    pub fn global_index(&self, sender_rank: usize, index: u64) -> u64 {
        index * self.senders as u64 + sender_rank as u64
    }

    /// How many messages of sender `sender_rank` have a global index below `global`.
    pub fn messages_before(&self, sender_rank: usize, global: u64) -> u64 {
        let s = self.senders as u64;
        let r = sender_rank as u64;
        if global <= r {
            0
        } else {
            (global - r).div_ceil(s)
        }
    }
}

/// The region id of the SST region of the subgroup at position `index` of the layout in
/// view `vid` (distinct across consecutive views, so a new view's regions can be registered
/// while the old ones drain).
pub fn sst_region_id(vid: u32, index: usize) -> RegionId {
    const _: () = assert!(SUBGROUPS_MAX <= 1 << 12, "the index takes the low 12 bits");
    ((vid & 0xF_FFFF) << 12) | index as u32
}

/// The region id of the RDMC group numbered `n` in view `vid`: the groups of a layout
/// are numbered in layout order, subgroup by subgroup (those with RDMC), sender by sender.
pub fn rdmc_region_id(vid: u32, n: usize) -> RegionId {
    assert!(
        n < RDMC_GROUPS_MAX,
        "Layout::validate bounds the RDMC groups"
    );
    sst_region_id(vid, RDMC_REGION_INDEX_BASE + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(senders: usize) -> SubgroupSpec {
        SubgroupSpec {
            id: 7,
            members: vec![1, 2, 3],
            senders: vec![1, 2, 3][..senders].to_vec(),
            mode: DeliveryMode::Atomic,
            window_slots: 4,
            slot_payload_bytes: 13,
            rdmc: None,
            delivery_prefix: None,
        }
    }

    #[test]
    fn geometry_offsets_do_not_overlap() {
        let g = Geometry::new(&spec(3)).unwrap();
        assert_eq!(g.slot_bytes, 16 + 16);
        assert_eq!(g.ctrl_row_bytes, 64);
        assert!(g.delivered_num(2) + 8 <= g.ring(0));
        assert_eq!(g.persisted_num(0), g.delivered_num(0) + 8);
        assert!(g.persisted_num(0) + 8 <= g.ctrl_row(1));
        assert!(g.persisted_num(2) + 8 <= g.ring(0));
        assert_eq!(g.slot(0, 0), g.ring(0) + 64);
        assert_eq!(g.slot(0, 4), g.slot(0, 0), "the ring wraps");
        assert!(g.slot(0, 3) + g.slot_bytes <= g.ring(1));
        assert_eq!(g.ring(2) + g.ring_bytes, g.region_bytes);
    }

    #[test]
    fn round_robin_counts() {
        let g = Geometry::new(&spec(3)).unwrap();
        assert_eq!(g.global_index(2, 1), 5);
        // Globals 0..6 hold messages 0 and 1 of each sender.
        for r in 0..3 {
            assert_eq!(g.messages_before(r, 6), 2);
        }
        assert_eq!(g.messages_before(2, 5), 1);
        assert_eq!(g.messages_before(0, 0), 0);
        assert_eq!(g.messages_before(1, 1), 0);
        assert_eq!(g.messages_before(1, 2), 1);
    }

    #[test]
    fn bad_specs_are_errors() {
        let mut s = spec(2);
        s.senders = vec![9];
        assert!(matches!(Geometry::new(&s), Err(Error::Config(m)) if m.contains("sender 9")));
        let mut s = spec(2);
        s.window_slots = 0;
        assert!(Geometry::new(&s).is_err());
        let mut s = spec(2);
        s.members = vec![1, 1];
        assert!(Geometry::new(&s).is_err());
        let view = View::new(1, vec![1, 2]);
        let layout = Layout {
            subgroups: vec![spec(1)],
        };
        assert!(matches!(layout.validate(&view), Err(Error::Config(m)) if m.contains("member 3")));
    }

    #[test]
    fn rdmc_bounds_are_checked_and_its_memory_stated() {
        let rdmc = RdmcConfig {
            block_bytes: 4096,
            message_bytes_max: 1 << 20,
            schedule: crate::rdmc::ScheduleKind::BinomialPipeline,
            window_messages: 2,
        };
        let mut s = spec(3);
        s.slot_payload_bytes = 16;
        s.rdmc = Some(rdmc.clone());
        assert!(Geometry::new(&s).is_ok());
        // Three senders, three members: one region of two 1 MiB buffers per sender.
        let per_group = RdmcGroup::region_bytes(3, &rdmc);
        assert!(
            (2 << 20..(2 << 20) + 4096).contains(&per_group),
            "{per_group}"
        );
        assert_eq!(s.rdmc_bytes_per_member(), 3 * per_group);
        assert_eq!(spec(3).rdmc_bytes_per_member(), 0);
        // An announcement needs two words of slot.
        let mut small = s.clone();
        small.slot_payload_bytes = 15;
        assert!(
            matches!(Geometry::new(&small), Err(Error::Config(m)) if m.contains("RDMC announcement"))
        );
        // The RDMC config's own bounds, named in the error.
        let mut bad = s.clone();
        bad.rdmc = Some(RdmcConfig {
            window_messages: 0,
            ..rdmc.clone()
        });
        assert!(
            matches!(Geometry::new(&bad), Err(Error::Config(m)) if m.contains("subgroup 7") && m.contains("window_messages"))
        );
        // Too many RDMC groups in one layout.
        let view = View::new(1, (1..=64).collect());
        let wide = |id| SubgroupSpec {
            id,
            members: view.members.clone(),
            senders: view.members.clone(),
            mode: DeliveryMode::Atomic,
            window_slots: 1,
            slot_payload_bytes: 16,
            rdmc: Some(RdmcConfig {
                message_bytes_max: 64,
                block_bytes: 64,
                ..rdmc.clone()
            }),
            delivery_prefix: None,
        };
        let fits = Layout {
            subgroups: (0..(RDMC_GROUPS_MAX / 64) as u32).map(wide).collect(),
        };
        assert!(fits.validate(&view).is_ok());
        let over = Layout {
            subgroups: (0..=(RDMC_GROUPS_MAX / 64) as u32).map(wide).collect(),
        };
        assert!(matches!(over.validate(&view), Err(Error::Config(m)) if m.contains("RDMC groups")));
        assert_ne!(rdmc_region_id(1, 0), sst_region_id(1, 0));
        assert_ne!(
            rdmc_region_id(1, RDMC_GROUPS_MAX - 1),
            sst_region_id(1, (1 << 12) - 1)
        );
    }
}
