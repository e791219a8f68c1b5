//! Samples on the wire and in readers: the header DDS puts in front of each CDR payload,
//! [`SampleInfo`] and the sample, view and instance states.

use spindle_qos::DeliveryLevel;
use spindle_topics::KeyHash;
use spindle_transport_rdma::NodeId;

use crate::error::{Error, Result};

/// First byte of every DDS message in a subgroup.
const SAMPLE_MAGIC: u8 = 0xD5;
/// Bytes of the header in front of the CDR payload.
pub const SAMPLE_HEADER_BYTES: usize = 64;

/// What a message says about its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// A new value.
    Data,
    /// The instance is disposed (`DataWriter::dispose`).
    Dispose,
    /// The writer unregistered the instance (`DataWriter::unregister_instance`).
    Unregister,
    /// The writer asserts its LIVELINESS (`DataWriter::assert_liveliness`): no data, no
    /// instance; readers renew the writer's lease and keep nothing.
    Liveliness,
    /// The writer's coherent set ends (`Publisher::end_coherent_changes`): readers take
    /// the set's samples, held back until now, all at once. No data, no instance.
    CoherentEnd,
    /// A GROUP-scope publisher's coherent set ends (`Publisher::end_coherent_changes`
    /// under PRESENTATION GROUP access scope): the sets of every writer it lists (its
    /// payload, [`encode_group_end`]; all of the sender's participant, all in this one
    /// subgroup) end together, at this message's one position in the subgroup's total
    /// order, at every reader of every topic of the subgroup. No instance.
    GroupCoherentEnd,
}

impl SampleKind {
    fn to_u8(self) -> u8 {
        match self {
            SampleKind::Data => 0,
            SampleKind::Dispose => 1,
            SampleKind::Unregister => 2,
            SampleKind::Liveliness => 3,
            SampleKind::CoherentEnd => 4,
            SampleKind::GroupCoherentEnd => 5,
        }
    }
    fn from_u8(v: u8) -> Option<SampleKind> {
        Some(match v {
            0 => SampleKind::Data,
            1 => SampleKind::Dispose,
            2 => SampleKind::Unregister,
            3 => SampleKind::Liveliness,
            4 => SampleKind::CoherentEnd,
            5 => SampleKind::GroupCoherentEnd,
            _ => return None,
        })
    }
}

/// The header of one DDS message (little-endian on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleHeader {
    /// Data, dispose or unregister.
    pub kind: SampleKind,
    /// The writer's id within its participant.
    pub writer_id: u32,
    /// The topic ([`crate::topic_id`] of its name).
    pub topic_id: u64,
    /// The writer's own sequence number, from 1.
    pub writer_seq: u64,
    /// `write_w_timestamp`'s time, in nanoseconds since the Unix epoch.
    pub source_timestamp_ns: i64,
    /// The instance's key hash (zeros for a keyless topic).
    pub key_hash: KeyHash,
    /// The writer's LIFESPAN in nanoseconds (0: infinite): readers drop the sample once
    /// `source_timestamp_ns + lifespan_ns` has passed.
    pub lifespan_ns: u64,
    /// The writer's OWNERSHIP_STRENGTH (for EXCLUSIVE ownership at readers).
    pub ownership_strength: i32,
    /// The delivery level the writer offers: topics of several levels may share a
    /// subgroup, so a reader takes a sample only if this is at least what it requests
    /// (RxO), and a store keeps it only at a store level.
    pub level: DeliveryLevel,
    /// The writer's PARTITION when it wrote, as [`crate::discovery::partition_tag`] of
    /// its publisher's names (0: the default partition). A reader takes the sample only
    /// if the writer's announced names carry this tag and match its subscriber's.
    pub partition_tag: u32,
    /// Where the sample sits in its writer's coherent set (PRESENTATION
    /// `coherent_access`): outside any, opening one, or inside one.
    pub coherent: Coherent,
}

/// Most samples one writer may write in one coherent set: readers hold a set back until
/// it ends, so it is bounded.
pub const COHERENT_SET_SAMPLES_MAX: usize = 4096;

/// Most writers one GROUP-scope coherent set spans: its end lists them (4 bytes each), so
/// it is bounded, well inside the smallest slot.
pub const GROUP_SET_WRITERS_MAX: usize = 256;

/// The payload of a [`SampleKind::GroupCoherentEnd`]: the writer ids whose sets end, as
/// little-endian `u32`s. `OutOfResources` beyond [`GROUP_SET_WRITERS_MAX`].
pub fn encode_group_end(writers: &[u32]) -> Result<Vec<u8>> {
    if writers.len() > GROUP_SET_WRITERS_MAX {
        return Err(Error::OutOfResources(format!(
            "a GROUP coherent set written by {} writers, more than GROUP_SET_WRITERS_MAX = \
             {GROUP_SET_WRITERS_MAX}",
            writers.len()
        )));
    }
    Ok(writers.iter().flat_map(|w| w.to_le_bytes()).collect())
}

/// The writer ids a [`SampleKind::GroupCoherentEnd`]'s payload lists (a peer's bytes: an
/// error names what is wrong — a length that is not a multiple of 4, or more than
/// [`GROUP_SET_WRITERS_MAX`] writers).
pub fn decode_group_end(payload: &[u8]) -> Result<Vec<u32>> {
    if payload.len() % 4 != 0 || payload.len() / 4 > GROUP_SET_WRITERS_MAX {
        return Err(Error::Error(format!(
            "a GROUP coherent set's end of {} payload bytes: not a list of at most \
             {GROUP_SET_WRITERS_MAX} 4-byte writer ids",
            payload.len()
        )));
    }
    Ok(payload
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A sample's place in a coherent set (`Publisher::begin_coherent_changes` …
/// `end_coherent_changes`). Readers hold a set's samples back until its
/// [`SampleKind::CoherentEnd`] and then take them all; a set whose writer leaves the view
/// before its end is dropped — by every reader alike, since they all see the writer's
/// messages up to the same point — and a reader that did not see a set's first sample
/// drops the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Coherent {
    /// Not in a coherent set.
    #[default]
    No,
    /// The first sample of a set.
    Begins,
    /// A later sample of the set.
    Continues,
}

impl Coherent {
    fn to_u8(self) -> u8 {
        match self {
            Coherent::No => 0,
            Coherent::Begins => 1,
            Coherent::Continues => 2,
        }
    }
    fn from_u8(v: u8) -> Option<Coherent> {
        Some(match v {
            0 => Coherent::No,
            1 => Coherent::Begins,
            2 => Coherent::Continues,
            _ => return None,
        })
    }
}

impl SampleHeader {
    /// The writer of this sample, sent by participant `node` (its `writer_id` there).
    pub fn writer(&self, node: NodeId) -> WriterHandle {
        WriterHandle {
            node,
            writer_id: self.writer_id,
        }
    }

    /// Writes the header into `out[..SAMPLE_HEADER_BYTES]`.
    pub fn encode(&self, out: &mut [u8; SAMPLE_HEADER_BYTES]) {
        out[0] = SAMPLE_MAGIC;
        out[1] = self.kind.to_u8();
        out[2] = self.level.to_u8();
        out[3] = self.coherent.to_u8();
        out[4..8].copy_from_slice(&self.writer_id.to_le_bytes());
        out[8..16].copy_from_slice(&self.topic_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.writer_seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.source_timestamp_ns.to_le_bytes());
        out[32..48].copy_from_slice(&self.key_hash.0);
        out[48..56].copy_from_slice(&self.lifespan_ns.to_le_bytes());
        out[56..60].copy_from_slice(&self.ownership_strength.to_le_bytes());
        out[60..64].copy_from_slice(&self.partition_tag.to_le_bytes());
    }

    /// Marks the message in `bytes` (header first) as outside any coherent set: its set
    /// ended, so the sample now stands alone (what a store keeps of a finished set).
    pub fn clear_coherent(bytes: &mut [u8]) {
        if let Some(b) = bytes.get_mut(3) {
            *b = Coherent::No.to_u8();
        }
    }

    /// Reads a header from a message a peer sent; the rest of `bytes` is the payload.
    pub fn decode(bytes: &[u8]) -> Result<(SampleHeader, &[u8])> {
        if bytes.len() < SAMPLE_HEADER_BYTES {
            return Err(Error::Error(format!(
                "a DDS message of {} bytes, shorter than its {SAMPLE_HEADER_BYTES}-byte header",
                bytes.len()
            )));
        }
        if bytes[0] != SAMPLE_MAGIC {
            return Err(Error::Error(format!(
                "a DDS message starting with {:#04x}, not {SAMPLE_MAGIC:#04x}",
                bytes[0]
            )));
        }
        let kind = SampleKind::from_u8(bytes[1])
            .ok_or_else(|| Error::Error(format!("unknown sample kind {}", bytes[1])))?;
        let level = DeliveryLevel::from_u8(bytes[2])
            .ok_or_else(|| Error::Error(format!("unknown delivery level {}", bytes[2])))?;
        let coherent = Coherent::from_u8(bytes[3])
            .ok_or_else(|| Error::Error(format!("unknown coherent-set mark {}", bytes[3])))?;
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut key = [0u8; 16];
        key.copy_from_slice(&bytes[32..48]);
        Ok((
            SampleHeader {
                kind,
                writer_id: u32_at(4),
                topic_id: u64_at(8),
                writer_seq: u64_at(16),
                source_timestamp_ns: u64_at(24) as i64,
                key_hash: KeyHash(key),
                lifespan_ns: u64_at(48),
                ownership_strength: u32_at(56) as i32,
                level,
                partition_tag: u32_at(60),
                coherent,
            },
            &bytes[SAMPLE_HEADER_BYTES..],
        ))
    }
}

/// An instance: the key hash of its key (DDS `InstanceHandle_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct InstanceHandle(pub KeyHash);

/// A writer in the domain: its participant's node id and its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WriterHandle {
    /// The participant (node id).
    pub node: NodeId,
    /// The writer's id within it.
    pub writer_id: u32,
}

impl std::fmt::Display for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.node, self.writer_id)
    }
}

/// Whether the reader has read the sample before (DDS `SampleStateKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleState {
    /// Returned by an earlier `read`.
    Read,
    /// Not returned yet.
    NotRead,
}

/// Whether the instance is new to the reader (DDS `ViewStateKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewState {
    /// The reader has not accessed this instance (generation) yet.
    New,
    /// It has.
    NotNew,
}

/// The instance's life (DDS `InstanceStateKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// Some writer writes it.
    Alive,
    /// A writer disposed it.
    NotAliveDisposed,
    /// Every writer unregistered it (or left the domain).
    NotAliveNoWriters,
}

/// A set of states to select samples by (DDS state masks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateMask {
    /// Sample states accepted: `[read, not_read]`.
    pub sample: [bool; 2],
    /// View states accepted: `[new, not_new]`.
    pub view: [bool; 2],
    /// Instance states accepted: `[alive, disposed, no_writers]`.
    pub instance: [bool; 3],
}

impl StateMask {
    /// Every state (DDS `ANY_*_STATE`).
    pub const ANY: StateMask = StateMask {
        sample: [true, true],
        view: [true, true],
        instance: [true, true, true],
    };
    /// Only samples not read yet.
    pub const NOT_READ: StateMask = StateMask {
        sample: [false, true],
        view: [true, true],
        instance: [true, true, true],
    };

    /// True if the mask accepts these states.
    pub fn accepts(&self, s: SampleState, v: ViewState, i: InstanceState) -> bool {
        self.sample[usize::from(s == SampleState::NotRead)]
            && self.view[usize::from(v == ViewState::NotNew)]
            && self.instance[match i {
                InstanceState::Alive => 0,
                InstanceState::NotAliveDisposed => 1,
                InstanceState::NotAliveNoWriters => 2,
            }]
    }
}

/// The `order_index` of a notice a reader made itself, not delivered in any order
/// ([`SampleInfo::order_index`]).
pub const ORDER_INDEX_NONE: u64 = u64::MAX;

/// What comes with each sample (DDS `SampleInfo`), plus Spindle's total order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleInfo {
    /// Read before or not.
    pub sample_state: SampleState,
    /// New instance or not.
    pub view_state: ViewState,
    /// The instance's state.
    pub instance_state: InstanceState,
    /// The writer's timestamp, nanoseconds since the Unix epoch.
    pub source_timestamp_ns: i64,
    /// The instance.
    pub instance_handle: InstanceHandle,
    /// The writer (DDS `publication_handle`).
    pub publication_handle: WriterHandle,
    /// Times the instance went from disposed back to alive before this sample.
    pub disposed_generation_count: u32,
    /// Times the instance went from no-writers back to alive before this sample.
    pub no_writers_generation_count: u32,
    /// True for data; false for a dispose or unregister notice (no data).
    pub valid_data: bool,
    /// The view (epoch) the sample was delivered in.
    pub view_id: u32,
    /// Its index in the subgroup's total order within that view: every reader of the
    /// topic sees the same `(view_id, order_index)` for the same sample. A notice the
    /// reader made itself (a writer left or lost its liveliness) is in no order:
    /// [`ORDER_INDEX_NONE`], with the view of the last sample its reader kept before it
    /// ([`SampleInfo::in_total_order`]).
    pub order_index: u64,
    /// The writer's own sequence number.
    pub writer_seq: u64,
    /// On a PERSISTENT (LoggedStore) reader: the sample is durable everywhere, in the
    /// synced log of every member of its subgroup ([`crate::logged`]); as of the access
    /// that returned it. Always false on other levels.
    pub durable: bool,
}

impl SampleInfo {
    /// True if the sample was delivered in its subgroup's total order (every sample and
    /// every writer's notice); false for a notice its reader made itself
    /// ([`ORDER_INDEX_NONE`]), which logs of the order leave out.
    pub fn in_total_order(&self) -> bool {
        self.order_index != ORDER_INDEX_NONE
    }
}

/// A sample taken or read: the data (if `info.valid_data`) and its info.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<T> {
    /// The value; `None` for dispose/unregister notices.
    pub data: Option<T>,
    /// Its info.
    pub info: SampleInfo,
}

/// Samples decoded by [`DataReader::take_into`](crate::DataReader::take_into) or
/// [`DataReader::read_into`](crate::DataReader::read_into) into values kept from earlier
/// accesses (as Cyclone's `dds_take` into the application's samples): each access decodes
/// over the values it holds ([`spindle_topics::TopicType::decode_in_place`]), so a reader
/// that takes with one buffer allocates nothing per sample once the buffer has grown. It
/// dereferences to the samples of the last access, in the topic's total order; it keeps
/// as many values as the most samples one access returned (bounded by that access's
/// `max`).
pub struct SampleBuffer<T> {
    /// The values; the first `len` are the last access's samples, the rest spare.
    items: Vec<Sample<T>>,
    len: usize,
}

impl<T> SampleBuffer<T> {
    /// An empty buffer (it grows on the first accesses).
    pub fn new() -> Self {
        SampleBuffer {
            items: Vec::new(),
            len: 0,
        }
    }

    /// Forgets the samples, keeping their values for the next access to decode into.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Values kept, in use or spare.
    pub fn capacity(&self) -> usize {
        self.items.len()
    }
}

impl<T: spindle_topics::TopicType> SampleBuffer<T> {
    /// Appends one sample, decoding `bytes` into a spare value if there is one. On an
    /// error nothing is appended.
    pub(crate) fn push_decoded(&mut self, info: &SampleInfo, bytes: &[u8]) -> Result<()> {
        let key_hash = &info.instance_handle.0;
        if let Some(spare) = self.items.get_mut(self.len) {
            match (&mut spare.data, info.valid_data) {
                (Some(value), true) => value.decode_in_place(bytes, key_hash)?,
                (slot, true) => *slot = Some(T::decode_with_key_hash(bytes, key_hash)?),
                (slot, false) => *slot = None,
            }
            spare.info = *info;
        } else {
            let data = if info.valid_data {
                Some(T::decode_with_key_hash(bytes, key_hash)?)
            } else {
                None
            };
            self.items.push(Sample { data, info: *info });
        }
        self.len += 1;
        Ok(())
    }
}

impl<T> Default for SampleBuffer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::ops::Deref for SampleBuffer<T> {
    type Target = [Sample<T>];
    fn deref(&self) -> &[Sample<T>] {
        &self.items[..self.len]
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SampleBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrips_and_bad_bytes_are_errors() {
        let h = SampleHeader {
            kind: SampleKind::Dispose,
            writer_id: 7,
            topic_id: 0x0102_0304_0506_0708,
            writer_seq: 99,
            source_timestamp_ns: -5,
            key_hash: KeyHash([3; 16]),
            lifespan_ns: 0,
            ownership_strength: 0,
            partition_tag: 0x0102_0304,
            coherent: Coherent::Continues,
            level: DeliveryLevel::VolatileStore,
        };
        let mut b = [0u8; SAMPLE_HEADER_BYTES];
        h.encode(&mut b);
        let mut msg = b.to_vec();
        msg.extend_from_slice(b"cdr");
        let (d, rest) = SampleHeader::decode(&msg).unwrap();
        assert_eq!(d, h);
        assert_eq!(rest, b"cdr");
        assert!(SampleHeader::decode(&msg[..10]).is_err());
        msg[0] = 0;
        assert!(SampleHeader::decode(&msg).is_err());
        msg[0] = SAMPLE_MAGIC;
        msg[1] = 9;
        assert!(SampleHeader::decode(&msg).is_err());
        msg[1] = 0;
        msg[2] = 9;
        assert!(SampleHeader::decode(&msg).is_err(), "unknown level");
    }
}
