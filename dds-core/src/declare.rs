//! Declared interest and the DDS layout (docs/design.md §5).
//!
//! A topic's name hashes (FNV-1a, stable across processes and builds) to a 64-bit topic
//! id, and the id onto one of `topic_subgroups` subgroups ([`subgroup_of`],
//! [`crate::ParticipantConfig::topic_subgroups`], [`TOPIC_SUBGROUPS_DEFAULT`]): any number
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

use spindle_group::rdmc::{RdmcConfig, ScheduleKind};
use spindle_group::{
    DareSettings, DeliveryMode, DeliveryPrefix, Layout, LayoutFn, SubgroupId, SubgroupSpec, View,
    DECLARED_BYTES_MAX,
};
use spindle_qos::DeliveryLevel;
use spindle_transport_rdma::NodeId;

use crate::error::{Error, Result};
use crate::sample::SAMPLE_HEADER_BYTES;

/// The version byte in front of a declaration (2: the topic subgroup count follows it;
/// 3: slot payloads in [`SLOT_UNIT_BYTES`] units; 4: a header flags byte, and the
/// participant's DARE settings when it has a DARE writer; 5: the large window in each
/// entry's window byte; 6: [`LEVEL_OUTLIVES_WRITERS`] in the level byte).
const DECLARATION_VERSION: u8 = 6;
/// Bytes in front of the entries (or of the DARE settings): the version, the topic
/// subgroup count (u16) and the header flags.
const HEADER_BYTES: usize = 4;
/// Header flag: the participant's DARE settings follow the header
/// ([`DARE_SETTINGS_BYTES`]); set when one of its entries has [`FLAG_DARE`].
const HEADER_FLAG_DARE_SETTINGS: u8 = 1;
/// Bytes of the declared DARE settings: heartbeat and election time-out in µs, log
/// entries and sender window, each a u32.
const DARE_SETTINGS_BYTES: usize = 16;
/// The longest DARE heartbeat a participant may configure, in µs (1 s).
pub const DARE_HEARTBEAT_US_MAX: u64 = 1_000_000;
/// The longest DARE election time-out a participant may configure, in µs (60 s; a
/// member's time-out doubles at most `DARE_ELECTION_BACKOFF_SHIFT_MAX` times).
pub const DARE_ELECTION_TIMEOUT_US_MAX: u64 = 60_000_000;
/// The most DARE log entries a participant may configure: a member's log ring of a dare
/// subgroup is one registered region, and a topic subgroup's slot carries up to 64 KiB.
pub const DCPS_DARE_LOG_ENTRIES_MAX: usize = 8192;
const _: () = assert!(
    spindle_group::dare::layout::LOG_HEADER_BYTES
        + DCPS_DARE_LOG_ENTRIES_MAX
            * (spindle_group::dare::layout::ENTRY_HEADER_BYTES + SLOT_UNITS_MAX * SLOT_UNIT_BYTES)
        <= spindle_transport_rdma::REGION_BYTES_MAX
        && DCPS_DARE_LOG_ENTRIES_MAX <= spindle_group::dare::DARE_LOG_ENTRIES_MAX,
    "the largest DCPS DARE log ring fits one region"
);
const _: () = assert!(
    DARE_ELECTION_TIMEOUT_US_MAX <= u32::MAX as u64
        && spindle_group::dare::DARE_SENDER_WINDOW_MAX <= u32::MAX as usize,
    "the declared DARE settings fit their u32 fields"
);
/// Bytes of one encoded entry.
const ENTRY_BYTES: usize = 10;
/// Most subgroups one participant may read or write (what fits in one declaration).
pub const DECLARED_SUBGROUPS_MAX: usize = (DECLARED_BYTES_MAX - HEADER_BYTES) / ENTRY_BYTES;
/// Ring slots are declared as a power of two up to this exponent.
const WINDOW_LOG2_MAX: u8 = 12;
/// Slot payloads are declared in units of this many bytes, up to 1,024 units (64 KiB): 10
/// bits, the entry's slot byte and two bits of its window byte above the window's log2.
/// (In whole KiB, a 1 KiB sample with its 64-byte header and CDR length rode a 2 KiB
/// slot, and every push, which copies whole slots, moved twice the bytes.)
pub const SLOT_UNIT_BYTES: usize = 64;
/// Most slot units (64 KiB).
const SLOT_UNITS_MAX: usize = 1024;
/// The window byte's bits below the slot units' two high bits.
const WINDOW_LOG2_MASK: u8 = 0x0F;
/// Where the slot units' high bits sit in the window byte.
const SLOT_HIGH_SHIFT: u8 = 4;
/// Where the large window (minus one, 0..=2) sits in the window byte, above the slot
/// units' high bits.
const LARGE_WINDOW_SHIFT: u8 = 6;

const FLAG_READER: u8 = 1;
const FLAG_WRITER: u8 = 2;
/// A writer that asks for DARE ordering of its Atomic topics
/// ([`crate::AtomicOrdering::Dare`]); the top bit, above the large-sample bits.
const FLAG_DARE: u8 = 0x80;
/// An entry's level byte: its entities keep the subgroup's history beyond its writers
/// (DURABILITY TRANSIENT or PERSISTENT); the top bit, above the level's code.
const LEVEL_OUTLIVES_WRITERS: u8 = 0x80;
/// The large-sample bits of the flags byte, once shifted down.
const LARGE_MASK: u8 = 0x1F;
/// The flags byte's bits above the reader and writer flags hold log2 of the largest
/// sample a writer declares (0: none above the slot).
const LARGE_SHIFT: u8 = 2;
/// Smallest and largest declared log2 of a large sample (64 KiB … 256 MiB).
const LARGE_LOG2_MIN: u32 = 16;
const LARGE_LOG2_MAX: u32 = 28;
/// The largest `ParticipantConfig::sample_bytes_max` accepted (256 MiB: one RDMC buffer
/// per writing member, registered memory).
pub const SAMPLE_BYTES_MAX_LIMIT: usize = 1 << LARGE_LOG2_MAX;
const _: () = assert!(SAMPLE_BYTES_MAX_LIMIT <= spindle_group::rdmc::RDMC_MESSAGE_BYTES_MAX);
/// RDMC block size of the topic subgroups (the RDMC default, chosen by measurement:
/// docs/benchmarks.md, "RDMC"), or the whole message when smaller.
const LARGE_BLOCK_BYTES: usize = 1 << 20;
/// The default of [`crate::ParticipantConfig::large_window_messages`]: large samples in
/// flight per writer (RDMC `window_messages` of the topic subgroups). One: a send buffer
/// is reused once every member delivered its message, so consecutive samples do not
/// overlap. Two was measured against one at 1 MiB on two cores (docs/benchmarks.md, issue
/// 14 "performance targets"): no gain over tcp beyond the noise and a loss over shm (the
/// four busy threads of two processes already share two cores, and a second buffer
/// doubles the working set). Measured again once blocks went out in place
/// (`Endpoint::write_from`, docs/benchmarks.md, issue 14 "the engine's large path"): two
/// won at load ≈ 2 and lost over shm at load 3–6.5, so the gain needs free cores while
/// the cost does not: memory per member is this many buffers of the writer's declared
/// largest sample (address space; at most `RDMC_RESIDENT_BYTES` of each kept; verbs pins
/// it all). So one by default, and a setting for a deployment with cores to spare.
pub const LARGE_WINDOW_MESSAGES: usize = 1;
/// The most [`crate::ParticipantConfig::large_window_messages`] accepts (it is declared
/// in two bits).
pub const LARGE_WINDOW_MESSAGES_MAX: usize = 3;
const _: () =
    assert!(LARGE_WINDOW_MESSAGES >= 1 && LARGE_WINDOW_MESSAGES <= LARGE_WINDOW_MESSAGES_MAX);
const _: () = assert!(LARGE_WINDOW_MESSAGES_MAX <= spindle_group::rdmc::RDMC_WINDOW_MESSAGES_MAX);
// The largest window of the largest samples fits one registered region (with room for
// the header), whatever writers declare.
const _: () = assert!(
    LARGE_WINDOW_MESSAGES_MAX * SAMPLE_BYTES_MAX_LIMIT < spindle_transport_rdma::REGION_BYTES_MAX
);

/// The stable 64-bit id of a topic name (FNV-1a).
pub fn topic_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The stable 64-bit id of a DDS type name (FNV-1a, as [`topic_id`]): what endpoints
/// announce so that a reader and a writer of one topic name match only with one type.
pub fn type_id(type_name: &str) -> u64 {
    topic_id(type_name)
}

/// Subgroups the domain's topics hash onto by default
/// ([`crate::ParticipantConfig::topic_subgroups`], ids `0..topic_subgroups`). Topics that
/// share one are delivered in one total order together, and ride at the highest level any
/// of their writers offers (a reader still takes only its topic's samples, and only those
/// offered at the level it requests). Every participant of a domain must use the same
/// value.
pub const TOPIC_SUBGROUPS_DEFAULT: u32 = 16;
/// Most topic subgroups a domain may configure: each one a participant reads or writes
/// is an entry of its declaration (with the built-in subgroup's, they fit the group's
/// `DECLARED_BYTES_MAX`, which the membership SST carries for every pending change), and
/// every one of them is a ring per sender.
pub const TOPIC_SUBGROUPS_MAX: u32 = (DECLARED_SUBGROUPS_MAX - 1) as u32;
/// The subgroup of the built-in topic ([`crate::discovery`]): every participant reads and
/// writes it. Its id lies above every topic subgroup's, whatever the count.
pub const BUILTIN_SUBGROUP: SubgroupId = u32::MAX;
const _: () = assert!(
    (TOPIC_SUBGROUPS_MAX as usize) < DECLARED_SUBGROUPS_MAX
        && TOPIC_SUBGROUPS_DEFAULT <= TOPIC_SUBGROUPS_MAX,
    "every topic subgroup and the built-in one fit one declaration"
);
const _: () = assert!(
    TOPIC_SUBGROUPS_MAX < BUILTIN_SUBGROUP,
    "the built-in subgroup is none of the topics' subgroups"
);
const _: () = assert!(
    (TOPIC_SUBGROUPS_MAX as usize) < spindle_group::SPARE_BATCHES_MAX,
    "the engine keeps a delivery batch for every subgroup a round may deliver in"
);

/// The subgroup that carries topic `name` in a domain whose topics hash onto
/// `topic_subgroups` subgroups: its id's hash bucket.
pub fn subgroup_of(name: &str, topic_subgroups: u32) -> SubgroupId {
    subgroup_of_id(topic_id(name), topic_subgroups)
}

/// The subgroup that carries the topic whose id is `topic_id` (see [`subgroup_of`]).
pub fn subgroup_of_id(topic_id: u64, topic_subgroups: u32) -> SubgroupId {
    (topic_id % u64::from(topic_subgroups.max(1))) as SubgroupId
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
    /// Slot payload bytes it needs (rounded up to [`SLOT_UNIT_BYTES`]).
    pub slot_payload_bytes: usize,
    /// History depth per instance a store-level subgroup keeps (0: keep all, bounded
    /// by [`crate::store::STORE_SAMPLES_MAX`]).
    pub store_depth: u16,
    /// A writer's largest sample above the slot, by RDMC (a power of two from 64 KiB to
    /// [`SAMPLE_BYTES_MAX_LIMIT`]; 0: none).
    pub sample_bytes_max: usize,
    /// A writer asks for the subgroup's Atomic order to be DARE's
    /// ([`crate::AtomicOrdering::Dare`]).
    pub dare: bool,
    /// Large samples in flight per writer it asks for (its participant's
    /// [`crate::ParticipantConfig::large_window_messages`], 1..=[`LARGE_WINDOW_MESSAGES_MAX`];
    /// the subgroup takes the largest any member declares).
    pub large_window: usize,
    /// Its entities keep the history beyond the subgroup's writers (DURABILITY TRANSIENT
    /// or PERSISTENT): a store-level subgroup with such readers stays (and holds its
    /// store) when its last writer is gone; see [`dds_subgroups`].
    pub outlives_writers: bool,
}

impl Interest {
    /// The declared form of a configured `sample_bytes_max` for a writer whose slots hold
    /// `slot_payload_bytes`: 0 when every sample fits the slot, else a power of two of at
    /// least 64 KiB.
    pub fn large_for(sample_bytes_max: usize, slot_payload_bytes: usize) -> usize {
        if sample_bytes_max <= slot_payload_bytes {
            return 0;
        }
        sample_bytes_max
            .next_power_of_two()
            .clamp(1 << LARGE_LOG2_MIN, 1 << LARGE_LOG2_MAX)
    }
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
        self.sample_bytes_max = self.sample_bytes_max.max(other.sample_bytes_max);
        self.dare |= other.dare;
        self.large_window = self.large_window.max(other.large_window);
        self.outlives_writers |= other.outlives_writers;
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

/// Checks DARE settings a participant configures or declares
/// ([`crate::ParticipantConfig::dare`]); the error names the setting and what is wrong.
pub fn check_dare_settings(d: &DareSettings) -> std::result::Result<(), String> {
    let window_max = spindle_group::dare::DARE_SENDER_WINDOW_MAX;
    if d.heartbeat_us == 0 || d.heartbeat_us > DARE_HEARTBEAT_US_MAX {
        return Err(format!(
            "heartbeat_us = {}: must be 1..={DARE_HEARTBEAT_US_MAX}",
            d.heartbeat_us
        ));
    }
    if d.election_timeout_us < 2 * d.heartbeat_us
        || d.election_timeout_us > DARE_ELECTION_TIMEOUT_US_MAX
    {
        return Err(format!(
            "election_timeout_us = {}: must be at least twice heartbeat_us ({}) and at most \
             {DARE_ELECTION_TIMEOUT_US_MAX} (a leader must beat at least twice per time-out)",
            d.election_timeout_us, d.heartbeat_us
        ));
    }
    if d.log_entries < 2 || d.log_entries > DCPS_DARE_LOG_ENTRIES_MAX {
        return Err(format!(
            "log_entries = {}: must be 2..={DCPS_DARE_LOG_ENTRIES_MAX}",
            d.log_entries
        ));
    }
    if d.sender_window == 0 || d.sender_window > window_max {
        return Err(format!(
            "sender_window = {}: must be 1..={window_max}",
            d.sender_window
        ));
    }
    Ok(())
}

/// Encodes one participant's interests (at most [`DECLARED_SUBGROUPS_MAX`]), the topic
/// subgroup count it hashes topics with and, when one of its interests asks for DARE,
/// the DARE settings it asks for.
pub fn encode_declaration(
    topic_subgroups: u32,
    dare: &DareSettings,
    interests: &BTreeMap<SubgroupId, Interest>,
) -> Result<Vec<u8>> {
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
    let count = u16::try_from(topic_subgroups)
        .ok()
        .filter(|c| (1..=TOPIC_SUBGROUPS_MAX).contains(&u32::from(*c)))
        .ok_or_else(|| {
            Error::Config(format!(
                "topic_subgroups = {topic_subgroups}: must be 1..={TOPIC_SUBGROUPS_MAX}"
            ))
        })?;
    let with_dare = interests.values().any(|i| i.dare);
    let mut out =
        Vec::with_capacity(HEADER_BYTES + DARE_SETTINGS_BYTES + interests.len() * ENTRY_BYTES);
    out.push(DECLARATION_VERSION);
    out.extend_from_slice(&count.to_le_bytes());
    out.push(u8::from(with_dare) * HEADER_FLAG_DARE_SETTINGS);
    if with_dare {
        check_dare_settings(dare).map_err(|e| Error::Config(format!("[dare] {e}")))?;
        // In range of a u32 each (checked above; see the assertion beside the bounds).
        for v in [
            dare.heartbeat_us,
            dare.election_timeout_us,
            dare.log_entries as u64,
            dare.sender_window as u64,
        ] {
            out.extend_from_slice(&(v as u32).to_le_bytes());
        }
    }
    for (sg, i) in interests {
        let window_log2 =
            (i.window_slots.max(1).next_power_of_two().trailing_zeros() as u8).min(WINDOW_LOG2_MAX);
        // Stored as units - 1 (0..=1023): low 8 bits, then 2 bits in the window byte.
        let slot_units = i
            .slot_payload_bytes
            .div_ceil(SLOT_UNIT_BYTES)
            .clamp(1, SLOT_UNITS_MAX)
            - 1;
        let large_log2 = match i.sample_bytes_max {
            0 => 0,
            n => n
                .next_power_of_two()
                .trailing_zeros()
                .clamp(LARGE_LOG2_MIN, LARGE_LOG2_MAX) as u8,
        };
        out.extend_from_slice(&sg.to_le_bytes());
        out.push(
            (u8::from(i.reader) * FLAG_READER)
                | (u8::from(i.writer) * FLAG_WRITER)
                | (large_log2 << LARGE_SHIFT)
                | (u8::from(i.dare) * FLAG_DARE),
        );
        out.push(i.level.to_u8() | (u8::from(i.outlives_writers) * LEVEL_OUTLIVES_WRITERS));
        // 1..=LARGE_WINDOW_MESSAGES_MAX (3): two bits.
        let large_window = (i.large_window.clamp(1, LARGE_WINDOW_MESSAGES_MAX) - 1) as u8;
        out.push(
            window_log2
                | (((slot_units >> 8) as u8) << SLOT_HIGH_SHIFT)
                | (large_window << LARGE_WINDOW_SHIFT),
        );
        out.push((slot_units & 0xFF) as u8);
        out.extend_from_slice(&i.store_depth.to_le_bytes());
    }
    if out.len() > DECLARED_BYTES_MAX {
        return Err(Error::OutOfResources(format!(
            "a declaration of {} subgroups with DARE settings takes {} bytes, more than \
             {DECLARED_BYTES_MAX}",
            interests.len(),
            out.len()
        )));
    }
    Ok(out)
}

/// A decoded declaration: the topic subgroup count its participant hashes topics with
/// (`None` for an empty declaration) and its interests.
pub type Declaration = (Option<u32>, BTreeMap<SubgroupId, Interest>);

/// Decodes a declaration; `Err` names what is wrong (a peer's bytes: never a panic).
pub fn decode_declaration(bytes: &[u8]) -> std::result::Result<Declaration, String> {
    decode_full(bytes).map(|(count, _, interests)| (count, interests))
}

/// The DARE settings a declaration asks for (`None` without a DARE writer); `Err` names
/// what is wrong.
pub fn decode_dare_settings(bytes: &[u8]) -> std::result::Result<Option<DareSettings>, String> {
    decode_full(bytes).map(|(_, dare, _)| dare)
}

/// A declaration's count, DARE settings and interests.
type Decoded = (
    Option<u32>,
    Option<DareSettings>,
    BTreeMap<SubgroupId, Interest>,
);

fn decode_full(bytes: &[u8]) -> std::result::Result<Decoded, String> {
    let mut out = BTreeMap::new();
    if bytes.is_empty() {
        return Ok((None, None, out));
    }
    if bytes[0] != DECLARATION_VERSION {
        return Err(format!(
            "declaration version {}, expected {DECLARATION_VERSION}",
            bytes[0]
        ));
    }
    if bytes.len() < HEADER_BYTES {
        return Err(format!(
            "declaration of {} bytes has no header",
            bytes.len()
        ));
    }
    let count = u32::from(u16::from_le_bytes([bytes[1], bytes[2]]));
    if count == 0 || count > TOPIC_SUBGROUPS_MAX {
        return Err(format!(
            "declares {count} topic subgroups, must be 1..={TOPIC_SUBGROUPS_MAX}"
        ));
    }
    let flags = bytes[3];
    if flags & !HEADER_FLAG_DARE_SETTINGS != 0 {
        return Err(format!("declaration header flags {flags:#x} unknown"));
    }
    let mut body = &bytes[HEADER_BYTES..];
    let mut dare = None;
    if flags & HEADER_FLAG_DARE_SETTINGS != 0 {
        let Some(words) = body.get(..DARE_SETTINGS_BYTES) else {
            return Err(format!(
                "declaration of {} bytes is too short for its DARE settings",
                bytes.len()
            ));
        };
        let word = |k: usize| {
            u32::from_le_bytes([
                words[4 * k],
                words[4 * k + 1],
                words[4 * k + 2],
                words[4 * k + 3],
            ])
        };
        let d = DareSettings {
            heartbeat_us: u64::from(word(0)),
            election_timeout_us: u64::from(word(1)),
            log_entries: word(2) as usize,
            sender_window: word(3) as usize,
        };
        check_dare_settings(&d).map_err(|e| format!("declared DARE settings: {e}"))?;
        dare = Some(d);
        body = &body[DARE_SETTINGS_BYTES..];
    }
    if body.len() % ENTRY_BYTES != 0 {
        return Err(format!(
            "declaration body of {} bytes is not whole entries",
            body.len()
        ));
    }
    for e in body.chunks_exact(ENTRY_BYTES) {
        let sg = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let flags = e[4];
        let code = e[5] & !LEVEL_OUTLIVES_WRITERS;
        let level = DeliveryLevel::from_u8(code)
            .ok_or_else(|| format!("subgroup {sg}: delivery level {code} unknown"))?;
        let large_log2 = u32::from((flags >> LARGE_SHIFT) & LARGE_MASK);
        let large_ok = large_log2 == 0 || (LARGE_LOG2_MIN..=LARGE_LOG2_MAX).contains(&large_log2);
        let window_log2 = e[6] & WINDOW_LOG2_MASK;
        let high = (e[6] >> SLOT_HIGH_SHIFT) & 3;
        let large_window = usize::from(e[6] >> LARGE_WINDOW_SHIFT) + 1;
        if window_log2 > WINDOW_LOG2_MAX || large_window > LARGE_WINDOW_MESSAGES_MAX || !large_ok {
            return Err(format!("subgroup {sg}: entry {e:?} out of range"));
        }
        out.insert(
            sg,
            Interest {
                reader: flags & FLAG_READER != 0,
                writer: flags & FLAG_WRITER != 0,
                level,
                window_slots: 1 << window_log2,
                slot_payload_bytes: ((usize::from(high) << 8 | usize::from(e[7])) + 1)
                    * SLOT_UNIT_BYTES,
                store_depth: u16::from_le_bytes([e[8], e[9]]),
                sample_bytes_max: if large_log2 == 0 { 0 } else { 1 << large_log2 },
                dare: flags & FLAG_DARE != 0,
                large_window,
                outlives_writers: e[5] & LEVEL_OUTLIVES_WRITERS != 0,
            },
        );
    }
    if dare.is_some() != out.values().any(|i| i.dare) {
        return Err(format!(
            "declaration {} DARE settings but {} entry asks for DARE",
            if dare.is_some() { "has" } else { "has no" },
            if dare.is_some() { "no" } else { "an" }
        ));
    }
    Ok((Some(count), dare, out))
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
            Ok((_, d)) => {
                out.insert(*m, d);
            }
            Err(e) => tracing::warn!(member = m, error = %e, "undecodable declaration ignored"),
        }
    }
    out
}

/// The topic subgroup count of the domain in `view`: what its first member (in view rank
/// order) that declared anything hashes topics with, and that member.
pub fn domain_topic_subgroups(view: &View) -> Option<(NodeId, u32)> {
    view.members.iter().find_map(|m| {
        let bytes = view.declared.get(m)?;
        decode_declaration(bytes).ok()?.0.map(|c| (*m, c))
    })
}

/// The DDS layout of `view`: one subgroup per declared id with at least one writer, or
/// store-level with readers that keep its history beyond its writers (its first member
/// then its only sender, which sends nothing); the built-in subgroup first, then by id.
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
    // Per subgroup: the field-wise largest DARE settings its DARE writers declared.
    let mut dare_settings: BTreeMap<SubgroupId, DareSettings> = BTreeMap::new();
    for m in &view.members {
        let Some(d) = decl.get(m) else { continue };
        let asked = view
            .declared
            .get(m)
            .and_then(|b| decode_dare_settings(b).ok().flatten());
        for (sg, i) in d {
            if let (true, true, Some(a)) = (i.writer, i.dare, asked) {
                dare_settings
                    .entry(*sg)
                    .and_modify(|s| *s = most_tolerant(s, &a))
                    .or_insert(a);
            }
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
    let mut subgroups = merged
        .into_iter()
        .filter_map(|(id, (i, members, senders, readers, offered))| {
            // Readers that keep the history beyond the writers (TRANSIENT, PERSISTENT)
            // keep the subgroup at their store level, also while only writers of its
            // other, volatile topics remain (whose samples are not stored).
            let outliving = i.outlives_writers && !readers.is_empty();
            let offered = if outliving {
                offered.max(i.level)
            } else {
                offered
            };
            if !senders.is_empty() {
                return Some((id, (i, members, senders, readers, offered)));
            }
            // With no writer at all, such readers keep a store-level subgroup alive: its
            // members hold the store and hand it to joiners, so it needs a sender for the
            // engine. Its first member is named one and never sends (an idle sender sends
            // no nulls); the first writer to come takes over. The store keeps what the
            // writers' HISTORY left it (depth 0: nothing trimmed; readers declare no depth
            // of their own).
            (outliving && offered.keeps_history()).then(|| {
                let i = Interest {
                    store_depth: 0,
                    ..i
                };
                let holder = vec![members[0]];
                (id, (i, members, holder, readers, offered))
            })
        })
        .map(|(id, (i, members, senders, readers, offered))| {
            let dare = offered == DeliveryLevel::Atomic && i.dare;
            DdsSubgroup {
                spec: SubgroupSpec {
                    // A member that writes the subgroup but reads none of its topics
                    // needs only each sample's header (where its own samples landed,
                    // liveliness, counters); a store-level subgroup is stored whole by
                    // every member, and everyone reads the built-in one.
                    delivery_prefix: (!offered.keeps_history() && id != BUILTIN_SUBGROUP)
                        .then(|| DeliveryPrefix {
                            bytes: SAMPLE_HEADER_BYTES,
                            members: members
                                .iter()
                                .copied()
                                .filter(|m| !readers.contains(m))
                                .collect(),
                        })
                        .filter(|p| !p.members.is_empty()),
                    id,
                    members,
                    senders,
                    mode: match offered {
                        DeliveryLevel::Unordered => DeliveryMode::Unordered,
                        DeliveryLevel::Atomic if i.dare => {
                            DeliveryMode::Dare(dare_settings.get(&id).copied().unwrap_or_default())
                        }
                        _ => DeliveryMode::Atomic,
                    },
                    window_slots: i.window_slots,
                    slot_payload_bytes: i.slot_payload_bytes,
                    // A DARE subgroup carries messages up to its slot only.
                    rdmc: (i.sample_bytes_max > 0 && !dare).then(|| RdmcConfig {
                        block_bytes: LARGE_BLOCK_BYTES.min(i.sample_bytes_max),
                        message_bytes_max: i.sample_bytes_max,
                        schedule: ScheduleKind::BinomialPipeline,
                        window_messages: i.large_window.clamp(1, LARGE_WINDOW_MESSAGES_MAX),
                    }),
                },
                level: offered,
                store_depth: i.store_depth,
                readers,
            }
        })
        .collect::<Vec<_>>();
    // The built-in subgroup first: the engine evaluates its subgroups in layout order,
    // so an announcement that becomes stable in the same step as a sample of the
    // announced writer is delivered before it (readers need the writer's PARTITION).
    subgroups.sort_by_key(|s| s.spec.id != BUILTIN_SUBGROUP);
    subgroups
}

/// The field-wise largest of two DARE settings (each valid, so is the result: the
/// larger election time-out is at least twice the larger heartbeat). What a dare
/// subgroup runs with when its writers declared different settings: the longest
/// heartbeat and election time-out, the largest log and sender window any asked for.
fn most_tolerant(a: &DareSettings, b: &DareSettings) -> DareSettings {
    DareSettings {
        log_entries: a.log_entries.max(b.log_entries),
        sender_window: a.sender_window.max(b.sender_window),
        heartbeat_us: a.heartbeat_us.max(b.heartbeat_us),
        election_timeout_us: a.election_timeout_us.max(b.election_timeout_us),
    }
}

/// How long a participant joining the domain's group waits before it asks its contacts
/// again, in µs.
pub(crate) const JOIN_RETRY_US: u64 = 50_000;

/// The version of what participants exchange — declarations, built-in announcements,
/// sample headers, and the group's own formats (membership rows, its messages) — raised
/// whenever one of them changes (1: announcements carry the type's structural hash; 2:
/// membership rows and restart reports name their group, and a dispose or unregister
/// carries the value it was given). It is half of the group id ([`group_id`]), so a
/// participant of another build's format is refused at its join, or left out by the
/// others when it bootstraps with them, by name, instead of misreading the domain's
/// bytes.
pub const WIRE_VERSION: u32 = 2;

/// The group id of domain `domain_id` at wire version `version`: the domain in the low
/// half, the version in the high half.
///
/// ```
/// use spindle_dds_core::declare::{group_id, group_label, WIRE_VERSION};
/// let id = group_id(7, WIRE_VERSION);
/// assert_ne!(id, group_id(7, WIRE_VERSION + 1), "another build's format: another group");
/// assert_ne!(id, group_id(8, WIRE_VERSION));
/// assert_eq!(group_label(group_id(7, 3)), "domain 7 (wire version 3)");
/// ```
pub fn group_id(domain_id: u32, version: u32) -> u64 {
    u64::from(domain_id) | (u64::from(version) << 32)
}

/// How the group's messages name a DCPS group id ([`group_id`]).
pub fn group_label(group_id: u64) -> String {
    format!(
        "domain {} (wire version {})",
        group_id & u64::from(u32::MAX),
        group_id >> 32
    )
}

/// The group settings of a participant of domain `domain_id`: the DDS layout, its join
/// retry, and the domain with this build's [`WIRE_VERSION`] as the group's id (a member
/// of another domain, or of the same domain at another wire version, refuses it).
pub(crate) fn dds_group_config(domain_id: u32) -> spindle_group::GroupConfig {
    let mut g = spindle_group::GroupConfig::new(dds_layout());
    g.join_retry_us = JOIN_RETRY_US;
    g.group_id = group_id(domain_id, WIRE_VERSION);
    g.group_label = group_label;
    g
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

#[cfg(test)]
mod tests {
    use super::*;

    fn interest(reader: bool, writer: bool) -> Interest {
        Interest {
            reader,
            writer,
            level: DeliveryLevel::Atomic,
            window_slots: 64,
            slot_payload_bytes: 4096,
            store_depth: 0,
            sample_bytes_max: 0,
            dare: false,
            large_window: LARGE_WINDOW_MESSAGES,
            outlives_writers: false,
        }
    }

    #[test]
    fn declarations_roundtrip_with_their_topic_subgroup_count() {
        let mut i = BTreeMap::new();
        i.insert(3, interest(true, false));
        i.insert(BUILTIN_SUBGROUP, interest(true, true));
        let bytes = encode_declaration(8, &DareSettings::default(), &i).unwrap();
        assert_eq!(bytes.len(), HEADER_BYTES + 2 * ENTRY_BYTES);
        assert_eq!(decode_declaration(&bytes), Ok((Some(8), i.clone())));
        assert_eq!(decode_declaration(&[]), Ok((None, BTreeMap::new())));
        let e = encode_declaration(0, &DareSettings::default(), &i)
            .unwrap_err()
            .to_string();
        assert!(e.contains("topic_subgroups = 0"), "{e}");
        // Every topic subgroup and the built-in one fit one declaration.
        let all: BTreeMap<_, _> = (0..TOPIC_SUBGROUPS_MAX)
            .chain([BUILTIN_SUBGROUP])
            .map(|sg| (sg, interest(true, true)))
            .collect();
        let bytes =
            encode_declaration(TOPIC_SUBGROUPS_MAX, &DareSettings::default(), &all).unwrap();
        assert!(bytes.len() <= DECLARED_BYTES_MAX, "{} bytes", bytes.len());
        assert_eq!(decode_declaration(&bytes).unwrap().1.len(), all.len());
    }

    #[test]
    fn slots_are_declared_in_64_byte_units_up_to_64_kib() {
        for (asked, declared) in [
            (1, 64),
            (64, 64),
            (65, 128),
            (1024 + 128, 1152),
            (4096, 4096),
            (65_000, 65_024),
            (65_536, 65_536),
            (1 << 20, 65_536),
        ] {
            for window_slots in [1, 256, 4096] {
                let mut w = interest(false, true);
                w.slot_payload_bytes = asked;
                w.window_slots = window_slots;
                let mut i = BTreeMap::new();
                i.insert(3, w);
                let bytes = encode_declaration(8, &DareSettings::default(), &i).unwrap();
                let back = decode_declaration(&bytes).unwrap().1[&3];
                assert_eq!(back.slot_payload_bytes, declared, "{asked} bytes asked");
                assert_eq!(back.window_slots, window_slots, "{asked} bytes asked");
            }
        }
        // The window byte's top two bits are the large window less one: both set (a
        // window of 4) is refused.
        let bytes = encode_declaration(
            8,
            &DareSettings::default(),
            &BTreeMap::from([(3, interest(true, false))]),
        )
        .unwrap();
        let mut bad = bytes.clone();
        bad[HEADER_BYTES + 6] |= 0xC0;
        assert!(decode_declaration(&bad).is_err());
    }

    #[test]
    fn a_dare_writer_makes_its_atomic_subgroup_dare_without_rdmc() {
        // The DARE bit sits above the large-sample bits: both survive the round trip.
        let mut w = interest(false, true);
        w.dare = true;
        w.sample_bytes_max = 256 << 20;
        let mut unordered = w;
        unordered.level = DeliveryLevel::Unordered;
        let mut i = BTreeMap::new();
        i.insert(3, w);
        i.insert(5, unordered);
        let bytes = encode_declaration(8, &DareSettings::default(), &i).unwrap();
        assert_eq!(decode_declaration(&bytes).unwrap().1, i);
        let mut view = View::new(1, vec![1, 2]);
        view.declared.insert(1, bytes);
        // A reader that did not ask for DARE: one writer's bit decides for the subgroup.
        let r = BTreeMap::from([(3, interest(true, false)), (5, interest(true, false))]);
        view.declared.insert(
            2,
            encode_declaration(8, &DareSettings::default(), &r).unwrap(),
        );
        let sgs = dds_subgroups(&view);
        let spec = |id| sgs.iter().find(|s| s.spec.id == id).unwrap().spec.clone();
        let atomic = spec(3);
        assert_eq!(atomic.mode, DeliveryMode::Dare(DareSettings::default()));
        assert!(atomic.rdmc.is_none(), "a dare subgroup carries no RDMC");
        // The bit means nothing below the Atomic level.
        assert_eq!(spec(5).mode, DeliveryMode::Unordered);
        assert!(spec(5).rdmc.is_some());
        assert!(dds_layout()(&view).is_ok());
    }

    #[test]
    fn readers_that_outlive_writers_keep_a_store_subgroup_with_its_first_member_as_sender() {
        let reader = |level, outlives_writers| Interest {
            level,
            outlives_writers,
            store_depth: 1,
            ..interest(true, false)
        };
        // 3: TRANSIENT readers at 2 and 3 of a VolatileStore subgroup; 4: TRANSIENT_LOCAL
        // readers; 5: PERSISTENT; 6: the bit below the store levels means nothing.
        let mine = BTreeMap::from([
            (3, reader(DeliveryLevel::VolatileStore, true)),
            (4, reader(DeliveryLevel::VolatileStore, false)),
            (5, reader(DeliveryLevel::LoggedStore, true)),
            (6, reader(DeliveryLevel::Atomic, true)),
        ]);
        let bytes = encode_declaration(8, &DareSettings::default(), &mine).unwrap();
        assert_eq!(
            decode_declaration(&bytes).unwrap().1,
            mine,
            "the bit travels"
        );
        let mut view = View::new(1, vec![1, 2, 3]);
        view.declared.insert(2, bytes.clone());
        view.declared.insert(3, bytes);
        let sgs = dds_subgroups(&view);
        let ids: Vec<SubgroupId> = sgs.iter().map(|s| s.spec.id).collect();
        assert_eq!(
            ids,
            vec![3, 5],
            "only the store levels that outlive writers stay"
        );
        for s in &sgs {
            assert_eq!(s.spec.members, vec![2, 3]);
            assert_eq!(
                s.spec.senders,
                vec![2],
                "the first member holds the sender's place"
            );
            assert!(s.readers == vec![2, 3] && s.level.keeps_history());
            assert_eq!(
                s.store_depth, 0,
                "what the store holds is not trimmed further"
            );
        }
        assert!(dds_layout()(&view).is_ok());
        // A writer takes over: the subgroup is its again, with its history depth.
        let w = Interest {
            level: DeliveryLevel::VolatileStore,
            store_depth: 7,
            ..interest(false, true)
        };
        view.declared.insert(
            1,
            encode_declaration(8, &DareSettings::default(), &BTreeMap::from([(3, w)])).unwrap(),
        );
        let sgs = dds_subgroups(&view);
        let s3 = sgs.iter().find(|s| s.spec.id == 3).unwrap();
        assert_eq!((s3.spec.senders.clone(), s3.store_depth), (vec![1], 7));
        // A writer of a volatile topic sharing the subgroup keeps it at the store level
        // the TRANSIENT readers ask for (its own samples, offered Atomic, are not stored).
        let volatile = Interest {
            level: DeliveryLevel::Atomic,
            ..interest(false, true)
        };
        view.declared.insert(
            1,
            encode_declaration(
                8,
                &DareSettings::default(),
                &BTreeMap::from([(3, volatile)]),
            )
            .unwrap(),
        );
        let sgs = dds_subgroups(&view);
        let s3 = sgs.iter().find(|s| s.spec.id == 3).unwrap();
        assert_eq!(s3.spec.senders, vec![1]);
        assert_eq!(s3.level, DeliveryLevel::VolatileStore, "the store stays");
    }

    #[test]
    fn dare_settings_travel_with_a_dare_writer_and_the_subgroup_takes_the_most_tolerant() {
        let mut w = interest(false, true);
        w.dare = true;
        let i = BTreeMap::from([(3, w)]);
        let fast = DareSettings {
            log_entries: 64,
            sender_window: 32,
            heartbeat_us: 250,
            election_timeout_us: 3_000,
        };
        let bytes = encode_declaration(8, &fast, &i).unwrap();
        assert_eq!(
            bytes.len(),
            HEADER_BYTES + DARE_SETTINGS_BYTES + ENTRY_BYTES
        );
        assert_eq!(decode_declaration(&bytes).unwrap().1, i);
        assert_eq!(decode_dare_settings(&bytes), Ok(Some(fast)));
        // Without a DARE writer, no settings are declared.
        let plain =
            encode_declaration(8, &fast, &BTreeMap::from([(3, interest(true, true))])).unwrap();
        assert_eq!(plain.len(), HEADER_BYTES + ENTRY_BYTES);
        assert_eq!(decode_dare_settings(&plain), Ok(None));
        // One writer alone: its settings reach the subgroup.
        let mut view = View::new(1, vec![1, 2]);
        view.declared.insert(1, bytes);
        view.declared.insert(2, plain);
        let mode = |view: &View| {
            dds_subgroups(view)
                .into_iter()
                .find(|s| s.spec.id == 3)
                .unwrap()
                .spec
                .mode
        };
        assert_eq!(mode(&view), DeliveryMode::Dare(fast));
        assert!(dds_layout()(&view).is_ok());
        // Two DARE writers: field by field, the larger.
        let slow = DareSettings {
            log_entries: 16,
            sender_window: 64,
            heartbeat_us: 2_000,
            election_timeout_us: 5_000,
        };
        view.declared
            .insert(2, encode_declaration(8, &slow, &i).unwrap());
        let want = DareSettings {
            log_entries: 64,
            sender_window: 64,
            heartbeat_us: 2_000,
            election_timeout_us: 5_000,
        };
        assert_eq!(mode(&view), DeliveryMode::Dare(want));
        assert!(dds_layout()(&view).is_ok());
    }

    #[test]
    fn bad_dare_settings_are_named_errors_in_a_config_or_a_peers_declaration() {
        let ok = DareSettings::default();
        for (bad, named) in [
            (
                DareSettings {
                    heartbeat_us: 0,
                    ..ok
                },
                "heartbeat_us = 0",
            ),
            (
                DareSettings {
                    heartbeat_us: DARE_HEARTBEAT_US_MAX + 1,
                    election_timeout_us: DARE_ELECTION_TIMEOUT_US_MAX,
                    ..ok
                },
                "heartbeat_us",
            ),
            (
                DareSettings {
                    heartbeat_us: 1_000,
                    election_timeout_us: 1_999,
                    ..ok
                },
                "election_timeout_us = 1999: must be at least twice heartbeat_us (1000)",
            ),
            (
                DareSettings {
                    election_timeout_us: DARE_ELECTION_TIMEOUT_US_MAX + 1,
                    ..ok
                },
                "election_timeout_us",
            ),
            (
                DareSettings {
                    log_entries: 1,
                    ..ok
                },
                "log_entries = 1",
            ),
            (
                DareSettings {
                    log_entries: DCPS_DARE_LOG_ENTRIES_MAX + 1,
                    ..ok
                },
                "log_entries",
            ),
            (
                DareSettings {
                    sender_window: 0,
                    ..ok
                },
                "sender_window = 0",
            ),
        ] {
            let e = check_dare_settings(&bad).unwrap_err();
            assert!(e.contains(named), "{bad:?}: {e}");
            // Refused when encoding a DARE writer's declaration...
            let mut w = interest(false, true);
            w.dare = true;
            let i = BTreeMap::from([(3, w)]);
            let e = encode_declaration(8, &bad, &i).unwrap_err().to_string();
            assert!(e.contains(named), "{bad:?}: {e}");
            // ... and in a peer's declared bytes.
            let mut bytes = encode_declaration(8, &ok, &i).unwrap();
            for (k, v) in [
                bad.heartbeat_us,
                bad.election_timeout_us,
                bad.log_entries as u64,
                bad.sender_window as u64,
            ]
            .into_iter()
            .enumerate()
            {
                let at = HEADER_BYTES + 4 * k;
                bytes[at..at + 4]
                    .copy_from_slice(&(v.min(u64::from(u32::MAX)) as u32).to_le_bytes());
            }
            let e = decode_declaration(&bytes).unwrap_err();
            assert!(e.contains("DARE settings"), "{bad:?}: {e}");
        }
        // Settings without a DARE entry, an entry without settings, unknown flags.
        let mut w = interest(false, true);
        w.dare = true;
        let with = encode_declaration(8, &ok, &BTreeMap::from([(3, w)])).unwrap();
        let mut no_entry = with.clone();
        no_entry[HEADER_BYTES + DARE_SETTINGS_BYTES + 4] &= !FLAG_DARE;
        assert!(decode_declaration(&no_entry).is_err());
        let mut no_settings = with[..HEADER_BYTES].to_vec();
        no_settings.extend_from_slice(&with[HEADER_BYTES + DARE_SETTINGS_BYTES..]);
        no_settings[3] = 0;
        assert!(decode_declaration(&no_settings).is_err());
        let mut flags = with.clone();
        flags[3] |= 0x80;
        assert!(decode_declaration(&flags).is_err());
        for cut in 0..with.len() {
            let _ = decode_declaration(&with[..cut]);
        }
    }

    #[test]
    fn a_writers_large_samples_are_declared_and_give_its_subgroup_rdmc() {
        assert_eq!(Interest::large_for(0, 4096), 0);
        assert_eq!(Interest::large_for(4096, 4096), 0);
        assert_eq!(Interest::large_for(5000, 4096), 1 << 16);
        assert_eq!(Interest::large_for(3 << 20, 4096), 4 << 20);
        assert_eq!(Interest::large_for(usize::MAX / 2, 4096), 256 << 20);
        let mut w = interest(false, true);
        w.sample_bytes_max = 4 << 20;
        let mut i = BTreeMap::new();
        i.insert(3, w);
        let bytes = encode_declaration(8, &DareSettings::default(), &i).unwrap();
        assert_eq!(decode_declaration(&bytes).unwrap().1, i);
        let mut view = View::new(1, vec![1, 2]);
        view.declared.insert(1, bytes);
        let mut r = BTreeMap::new();
        r.insert(3, interest(true, false));
        view.declared.insert(
            2,
            encode_declaration(8, &DareSettings::default(), &r).unwrap(),
        );
        let sgs = dds_subgroups(&view);
        let rdmc = sgs[0].spec.rdmc.clone().expect("RDMC for the large writer");
        assert_eq!(rdmc.message_bytes_max, 4 << 20);
        assert_eq!(rdmc.block_bytes, LARGE_BLOCK_BYTES);
        assert!(dds_layout()(&view).is_ok());
        // A log2 outside 16..=28 in the flags is refused.
        let mut bad = encode_declaration(8, &DareSettings::default(), &i).unwrap();
        bad[HEADER_BYTES + 4] = FLAG_WRITER | (29 << LARGE_SHIFT);
        assert!(decode_declaration(&bad).is_err());
        bad[HEADER_BYTES + 4] = FLAG_WRITER | (3 << LARGE_SHIFT);
        assert!(decode_declaration(&bad).is_err());
    }

    #[test]
    fn a_writers_large_window_is_declared_and_its_subgroup_takes_the_largest() {
        // Writers at nodes 1 (window 2) and 2 (window 1), a reader at 3 (its window is
        // not a writer's): the subgroup's RDMC window is 2; every window round-trips.
        let decl = |reader: bool, window: usize| {
            let mut w = interest(reader, !reader);
            w.sample_bytes_max = if reader { 0 } else { 1 << 20 };
            w.large_window = window;
            let mut i = BTreeMap::new();
            i.insert(3, w);
            let bytes = encode_declaration(8, &DareSettings::default(), &i).unwrap();
            assert_eq!(decode_declaration(&bytes).unwrap().1, i, "window {window}");
            bytes
        };
        for window in 1..=LARGE_WINDOW_MESSAGES_MAX {
            decl(false, window);
        }
        let mut view = View::new(1, vec![1, 2, 3]);
        view.declared.insert(1, decl(false, 2));
        view.declared.insert(2, decl(false, 1));
        view.declared.insert(3, decl(true, 1));
        let sgs = dds_subgroups(&view);
        let rdmc = sgs[0]
            .spec
            .rdmc
            .clone()
            .expect("RDMC for the large writers");
        assert_eq!(rdmc.window_messages, 2, "the largest declared window");
        assert!(dds_layout()(&view).is_ok());
        // A window above the most (its two bits at 3: a window of 4) is refused.
        let mut bad = decl(false, 1);
        bad[HEADER_BYTES + 6] |= 3 << LARGE_WINDOW_SHIFT;
        let e = decode_declaration(&bad).unwrap_err();
        assert!(e.contains("subgroup 3"), "{e}");
    }

    #[test]
    fn bad_declarations_are_errors_never_panics() {
        let mut i = BTreeMap::new();
        i.insert(1, interest(false, true));
        let good = encode_declaration(16, &DareSettings::default(), &i).unwrap();
        for cut in 0..good.len() {
            let _ = decode_declaration(&good[..cut]);
        }
        for (at, v) in [(0, 1u8), (1, 0), (2, 0xff), (HEADER_BYTES + 5, 99)] {
            let mut b = good.clone();
            b[at] = v;
            if at == 2 {
                b[1] = 0xff;
            }
            assert!(decode_declaration(&b).is_err(), "byte {at} = {v}: {b:?}");
        }
    }

    #[test]
    fn the_domain_count_is_the_first_declaring_members() {
        let mut view = View::new(4, vec![5, 2, 9]);
        let mut i = BTreeMap::new();
        i.insert(BUILTIN_SUBGROUP, interest(true, true));
        view.declared.insert(
            2,
            encode_declaration(4, &DareSettings::default(), &i).unwrap(),
        );
        view.declared.insert(
            9,
            encode_declaration(16, &DareSettings::default(), &i).unwrap(),
        );
        assert_eq!(domain_topic_subgroups(&view), Some((2, 4)));
        view.declared.insert(
            5,
            encode_declaration(16, &DareSettings::default(), &i).unwrap(),
        );
        assert_eq!(domain_topic_subgroups(&view), Some((5, 16)));
        assert_eq!(subgroup_of_id(17, 4), 1);
        assert_eq!(subgroup_of_id(17, 1), 0);
    }
}
