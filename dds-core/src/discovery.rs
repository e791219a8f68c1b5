//! The built-in topic: which reader and writer is on which topic, at which level.
//!
//! Topics share subgroups ([`crate::declare::subgroup_of`]), so a view's declarations say
//! who reads and writes each subgroup, not each topic. Each participant announces every
//! reader and writer it creates — and disposes of it when deleted — as a sample of the
//! built-in topic, in its own subgroup ([`crate::declare::BUILTIN_SUBGROUP`]) that every participant
//! reads and writes at the VolatileStore level. Every member therefore applies the same
//! announcements in the same total order, and a participant that joins later gets the
//! table by state transfer with the subgroup's store. Matched statuses, RxO
//! (REQUESTED_INCOMPATIBLE_QOS) and `wait_for_readers` count the endpoints of one topic.
//!
//! An announcement is a [`SampleHeader`] (topic [`BUILTIN_TOPIC_ID`], kind Data while the
//! entity lives and Dispose once deleted, the entity id as `writer_id`, `(node, entity)`
//! as the instance key) followed by [`BODY_BYTES`]: the topic id, the role and the level.
//! The announcing node is the message's sender, as the engine reports it.
//!
//! ```
//! use spindle_dds_core::discovery::{decode, encode, Endpoint};
//! use spindle_qos::DeliveryLevel;
//! let e = Endpoint { entity: 7, topic_id: 42, reader: true, level: DeliveryLevel::Atomic };
//! let bytes = encode(3, &e, true);
//! assert_eq!(decode(&bytes), Ok(Some((7, Some(e)))));
//! assert_eq!(decode(&encode(3, &e, false)), Ok(Some((7, None))));
//! assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "truncated");
//! ```

use spindle_qos::DeliveryLevel;
use spindle_topics::KeyHash;
use spindle_transport_rdma::NodeId;

use crate::sample::{SampleHeader, SampleKind, SAMPLE_HEADER_BYTES};

/// The topic id of the built-in topic (outside what [`crate::topic_id`] gives user names
/// in practice: a name would have to hash to exactly this).
pub const BUILTIN_TOPIC_ID: u64 = 0xD5D5_0000_0000_0001;
/// Bytes of an announcement after its header: topic id, role, level.
pub const BODY_BYTES: usize = 8 + 1 + 1;
/// Bytes of one announcement.
pub const ANNOUNCEMENT_BYTES: usize = SAMPLE_HEADER_BYTES + BODY_BYTES;
const ROLE_WRITER: u8 = 0;
const ROLE_READER: u8 = 1;

/// An endpoint's key in the table: its participant (node) and its entity id there.
pub type EndpointKey = (NodeId, u32);

/// One reader or writer, as its participant announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The entity's id within its participant.
    pub entity: u32,
    /// Its topic.
    pub topic_id: u64,
    /// A reader (else a writer).
    pub reader: bool,
    /// The level it requests (reader) or offers (writer).
    pub level: DeliveryLevel,
}

/// The instance key of entity `entity` of node `node`.
fn key(node: NodeId, entity: u32) -> KeyHash {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&node.to_le_bytes());
    k[4..8].copy_from_slice(&entity.to_le_bytes());
    KeyHash(k)
}

/// The announcement by node `node` that `e` lives (`alive`) or was deleted.
pub fn encode(node: NodeId, e: &Endpoint, alive: bool) -> Vec<u8> {
    let h = SampleHeader {
        kind: if alive {
            SampleKind::Data
        } else {
            SampleKind::Dispose
        },
        writer_id: e.entity,
        topic_id: BUILTIN_TOPIC_ID,
        writer_seq: 0,
        source_timestamp_ns: 0,
        key_hash: key(node, e.entity),
        lifespan_ns: 0,
        ownership_strength: 0,
        level: DeliveryLevel::VolatileStore,
    };
    let mut out = vec![0u8; ANNOUNCEMENT_BYTES];
    let mut head = [0u8; SAMPLE_HEADER_BYTES];
    h.encode(&mut head);
    out[..SAMPLE_HEADER_BYTES].copy_from_slice(&head);
    out[SAMPLE_HEADER_BYTES..SAMPLE_HEADER_BYTES + 8].copy_from_slice(&e.topic_id.to_le_bytes());
    out[SAMPLE_HEADER_BYTES + 8] = if e.reader { ROLE_READER } else { ROLE_WRITER };
    out[SAMPLE_HEADER_BYTES + 9] = e.level.to_u8();
    out
}

/// Reads an announcement a peer sent: `Ok(None)` if the message is not of the built-in
/// topic, else the entity id and the endpoint (`None` once deleted). `Err` names what is
/// wrong (a peer's bytes: never a panic).
pub fn decode(bytes: &[u8]) -> Result<Option<(u32, Option<Endpoint>)>, String> {
    let (h, body) = SampleHeader::decode(bytes).map_err(|e| e.to_string())?;
    if h.topic_id != BUILTIN_TOPIC_ID {
        return Ok(None);
    }
    if h.kind != SampleKind::Data {
        return Ok(Some((h.writer_id, None)));
    }
    if body.len() != BODY_BYTES {
        return Err(format!(
            "a built-in announcement of {} bytes after its header, not {BODY_BYTES}",
            body.len()
        ));
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&body[..8]);
    let reader = match body[8] {
        ROLE_READER => true,
        ROLE_WRITER => false,
        r => return Err(format!("a built-in announcement with role {r}")),
    };
    let level = DeliveryLevel::from_u8(body[9])
        .ok_or_else(|| format!("a built-in announcement with level {}", body[9]))?;
    Ok(Some((
        h.writer_id,
        Some(Endpoint {
            entity: h.writer_id,
            topic_id: u64::from_le_bytes(t),
            reader,
            level,
        }),
    )))
}
