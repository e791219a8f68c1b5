//! Declared interest and the DDS layout (docs/design.md §5).
//!
//! A topic's name hashes (FNV-1a, stable across processes and builds) to a 64-bit topic
//! id, and the id onto one of [`TOPIC_SUBGROUPS`] subgroups ([`subgroup_of`]): any number
//! of topics share a bounded set of subgroups, so a participant's declaration, its rings
//! and the layout stay bounded however many topics it has. Each participant declares,
//! through the view change ([`spindle_group::Group::declare`]), one entry per subgroup it
//! reads or writes: whether it reads, whether it writes, the delivery level, and the ring
//! sizes it needs. Which topic each reader and writer is on travels separately, on the
//! built-in topic ([`crate::discovery`]), so creating an entity on a subgroup the
//! participant already reads or writes needs no view change. Every member computes the same layout from the same view
//! ([`dds_layout`]): one subgroup per declared id that has a writer; its members are the
//! participants that declared it (in view rank order), its senders those that write.

use std::collections::BTreeMap;

use spindle_group::{
    DeliveryMode, Layout, LayoutFn, SubgroupId, SubgroupSpec, View, DECLARED_BYTES_MAX,
};
use spindle_qos::DeliveryLevel;
use spindle_transport_rdma::NodeId;

use crate::error::{Error, Result};

/// The version byte in front of a declaration.
const DECLARATION_VERSION: u8 = 1;
/// Bytes of one encoded entry.
const ENTRY_BYTES: usize = 10;
/// Most subgroups one participant may read or write (what fits in one declaration).
pub const DECLARED_SUBGROUPS_MAX: usize = (DECLARED_BYTES_MAX - 1) / ENTRY_BYTES;
/// Ring slots are declared as a power of two up to this exponent.
const WINDOW_LOG2_MAX: u8 = 12;
/// Slot payloads are declared in KiB, up to 64.
const SLOT_KIB_MAX: u8 = 64;

const FLAG_READER: u8 = 1;
const FLAG_WRITER: u8 = 2;

/// The stable 64-bit id of a topic name (FNV-1a).
pub fn topic_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Subgroups the domain's topics hash onto (ids `0..TOPIC_SUBGROUPS`). Topics that share
/// one are delivered in one total order together, and ride at the highest level any of
/// their writers offers (a reader still takes only its topic's samples, and only those
/// offered at the level it requests). Every participant of a domain must use the same
/// value.
pub const TOPIC_SUBGROUPS: u32 = 16;
/// The subgroup of the built-in topic ([`crate::discovery`]): every participant reads and
/// writes it.
pub const BUILTIN_SUBGROUP: SubgroupId = TOPIC_SUBGROUPS;
const _: () = assert!(
    (TOPIC_SUBGROUPS as usize) < DECLARED_SUBGROUPS_MAX,
    "every topic subgroup and the built-in one fit one declaration"
);

/// The subgroup that carries topic `name`: its id's hash bucket.
pub fn subgroup_of(name: &str) -> SubgroupId {
    subgroup_of_id(topic_id(name))
}

/// The subgroup that carries the topic whose id is `topic_id`.
pub fn subgroup_of_id(topic_id: u64) -> SubgroupId {
    (topic_id % u64::from(TOPIC_SUBGROUPS)) as SubgroupId
}

/// One participant's interest in one subgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// It has a reader on a topic of the subgroup.
    pub reader: bool,
    /// It has a writer on a topic of the subgroup.
    pub writer: bool,
    /// The delivery level its entities ask for.
    pub level: DeliveryLevel,
    /// Ring slots per sender it needs (rounded up to a power of two).
    pub window_slots: usize,
    /// Slot payload bytes it needs (rounded up to whole KiB).
    pub slot_payload_bytes: usize,
    /// History depth per instance a store-level subgroup keeps (0: keep all, bounded
    /// by [`crate::store::STORE_SAMPLES_MAX`]).
    pub store_depth: u16,
}

impl Interest {
    /// Folds `other` (another entity on the same subgroup) into this interest.
    pub fn merge(&mut self, other: &Interest) {
        self.reader |= other.reader;
        self.writer |= other.writer;
        self.level = self.level.max(other.level);
        self.window_slots = self.window_slots.max(other.window_slots);
        self.slot_payload_bytes = self.slot_payload_bytes.max(other.slot_payload_bytes);
        self.store_depth = merge_depth(self.store_depth, other.store_depth);
    }
}

/// 0 (keep all) wins over any depth; otherwise the deeper one.
fn merge_depth(a: u16, b: u16) -> u16 {
    if a == 0 || b == 0 {
        0
    } else {
        a.max(b)
    }
}

/// Encodes one participant's interests (at most [`DECLARED_SUBGROUPS_MAX`]).
pub fn encode_declaration(interests: &BTreeMap<SubgroupId, Interest>) -> Result<Vec<u8>> {
    if interests.len() > DECLARED_SUBGROUPS_MAX {
        return Err(Error::OutOfResources(format!(
            "a participant may read or write at most {DECLARED_SUBGROUPS_MAX} subgroups; \
             it asked for {}",
            interests.len()
        )));
    }
    if interests.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(1 + interests.len() * ENTRY_BYTES);
    out.push(DECLARATION_VERSION);
    for (sg, i) in interests {
        let window_log2 =
            (i.window_slots.max(1).next_power_of_two().trailing_zeros() as u8).min(WINDOW_LOG2_MAX);
        let slot_kib = i
            .slot_payload_bytes
            .div_ceil(1024)
            .clamp(1, SLOT_KIB_MAX as usize) as u8;
        out.extend_from_slice(&sg.to_le_bytes());
        out.push((u8::from(i.reader) * FLAG_READER) | (u8::from(i.writer) * FLAG_WRITER));
        out.push(i.level.to_u8());
        out.push(window_log2);
        out.push(slot_kib);
        out.extend_from_slice(&i.store_depth.to_le_bytes());
    }
    Ok(out)
}

/// Decodes a declaration; `Err` names what is wrong (a peer's bytes: never a panic).
pub fn decode_declaration(
    bytes: &[u8],
) -> std::result::Result<BTreeMap<SubgroupId, Interest>, String> {
    let mut out = BTreeMap::new();
    if bytes.is_empty() {
        return Ok(out);
    }
    if bytes[0] != DECLARATION_VERSION {
        return Err(format!(
            "declaration version {}, expected {DECLARATION_VERSION}",
            bytes[0]
        ));
    }
    let body = &bytes[1..];
    if body.len() % ENTRY_BYTES != 0 {
        return Err(format!(
            "declaration body of {} bytes is not whole entries",
            body.len()
        ));
    }
    for e in body.chunks_exact(ENTRY_BYTES) {
        let sg = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let flags = e[4];
        let level = DeliveryLevel::from_u8(e[5])
            .ok_or_else(|| format!("subgroup {sg}: delivery level {} unknown", e[5]))?;
        if e[6] > WINDOW_LOG2_MAX || e[7] == 0 || e[7] > SLOT_KIB_MAX || flags & !3 != 0 {
            return Err(format!("subgroup {sg}: entry {e:?} out of range"));
        }
        out.insert(
            sg,
            Interest {
                reader: flags & FLAG_READER != 0,
                writer: flags & FLAG_WRITER != 0,
                level,
                window_slots: 1 << e[6],
                slot_payload_bytes: usize::from(e[7]) * 1024,
                store_depth: u16::from_le_bytes([e[8], e[9]]),
            },
        );
    }
    Ok(out)
}

/// One subgroup of the DDS layout, with what DDS needs beyond the engine's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdsSubgroup {
    /// The engine's subgroup.
    pub spec: SubgroupSpec,
    /// The level the writers offer (the highest a writing member declared): it sets the
    /// subgroup's delivery mode; readers that request more do not match (RxO).
    pub level: DeliveryLevel,
    /// Store depth per instance (0: keep all).
    pub store_depth: u16,
    /// Members that read.
    pub readers: Vec<NodeId>,
}

/// Every member's decoded declaration (members whose declaration does not decode are
/// taken as declaring nothing, and logged).
pub fn declarations(view: &View) -> BTreeMap<NodeId, BTreeMap<SubgroupId, Interest>> {
    let mut out = BTreeMap::new();
    for m in &view.members {
        let Some(bytes) = view.declared.get(m) else {
            continue;
        };
        match decode_declaration(bytes) {
            Ok(d) => {
                out.insert(*m, d);
            }
            Err(e) => tracing::warn!(member = m, error = %e, "undecodable declaration ignored"),
        }
    }
    out
}

/// The DDS layout of `view`: one subgroup per declared id with at least one writer.
pub fn dds_subgroups(view: &View) -> Vec<DdsSubgroup> {
    let decl = declarations(view);
    /// Per subgroup: the merged interest, its members, senders and readers, and the
    /// level the writers offer.
    type Merged = (
        Interest,
        Vec<NodeId>,
        Vec<NodeId>,
        Vec<NodeId>,
        DeliveryLevel,
    );
    let mut merged: BTreeMap<SubgroupId, Merged> = BTreeMap::new();
    for m in &view.members {
        let Some(d) = decl.get(m) else { continue };
        for (sg, i) in d {
            let e = merged.entry(*sg).or_insert_with(|| {
                (
                    *i,
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    DeliveryLevel::Unordered,
                )
            });
            e.0.merge(i);
            e.1.push(*m);
            if i.writer {
                e.2.push(*m);
                e.4 = e.4.max(i.level);
            }
            if i.reader {
                e.3.push(*m);
            }
        }
    }
    merged
        .into_iter()
        .filter(|(_, (_, _, senders, _, _))| !senders.is_empty())
        .map(
            |(id, (i, members, senders, readers, offered))| DdsSubgroup {
                spec: SubgroupSpec {
                    id,
                    members,
                    senders,
                    mode: if offered == DeliveryLevel::Unordered {
                        DeliveryMode::Unordered
                    } else {
                        DeliveryMode::Atomic
                    },
                    window_slots: i.window_slots,
                    slot_payload_bytes: i.slot_payload_bytes,
                },
                level: offered,
                store_depth: i.store_depth,
                readers,
            },
        )
        .collect()
}

/// The layout function every participant of a domain runs.
pub fn dds_layout() -> LayoutFn {
    std::sync::Arc::new(|view: &View| {
        let subgroups: Vec<SubgroupSpec> =
            dds_subgroups(view).into_iter().map(|s| s.spec).collect();
        let layout = Layout { subgroups };
        layout.validate(view).map_err(|e| e.to_string())?;
        Ok(layout)
    })
}
