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
//! as the instance key) followed by [`BODY_BYTES`] — the topic id, the role, the level, the
//! LIVELINESS kind and lease (µs, `u64::MAX` for infinite) —
//! and, when its publisher or subscriber is not in the default partition, the PARTITION
//! names (a `u16` count, then each name as a `u16` length and its UTF-8 bytes; at most
//! [`PARTITION_BYTES_MAX`] in all). The announcing node is the message's sender, as the
//! engine reports it.
//!
//! ```
//! use spindle_dds_core::discovery::{decode, encode, partition_tag, Endpoint};
//! use spindle_qos::{DeliveryLevel, LivelinessKind, Partition};
//! let partition = Partition { name: vec!["fleet/*".into(), "ground".into()] };
//! let e = Endpoint { entity: 7, topic_id: 42, reader: true, level: DeliveryLevel::Atomic,
//!     partition, liveliness: LivelinessKind::ManualByTopic, lease_us: Some(250_000) };
//! let bytes = encode(3, &e, true);
//! assert_eq!(decode(&bytes), Ok(Some((7, Some(e.clone())))));
//! assert_eq!(decode(&encode(3, &e, false)), Ok(Some((7, None))));
//! assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "truncated");
//! // The default partition is tag 0 whichever way it is written.
//! assert_eq!(partition_tag(&[]), 0);
//! assert_eq!(partition_tag(&["".to_string()]), 0);
//! assert_ne!(partition_tag(&e.partition.name), 0);
//! ```

use spindle_qos::{DeliveryLevel, LivelinessKind, Partition};
use spindle_topics::KeyHash;
use spindle_transport_rdma::NodeId;

use crate::sample::{Coherent, SampleHeader, SampleKind, SAMPLE_HEADER_BYTES};

/// The topic id of the built-in topic (outside what [`crate::topic_id`] gives user names
/// in practice: a name would have to hash to exactly this).
pub const BUILTIN_TOPIC_ID: u64 = 0xD5D5_0000_0000_0001;
/// Bytes of an announcement after its header (before any partition names): topic id,
/// role, level, LIVELINESS kind and lease.
pub const BODY_BYTES: usize = 8 + 1 + 1 + 1 + 8;
/// Largest announcement: the built-in subgroup's slot payload.
pub const ANNOUNCEMENT_BYTES_MAX: usize = 1024;
/// Most bytes an endpoint's PARTITION names take in its announcement (count and lengths
/// included): what an announcement leaves after its header and body.
pub const PARTITION_BYTES_MAX: usize = ANNOUNCEMENT_BYTES_MAX - SAMPLE_HEADER_BYTES - BODY_BYTES;
const ROLE_WRITER: u8 = 0;
const ROLE_READER: u8 = 1;

/// An endpoint's key in the table: its participant (node) and its entity id there.
pub type EndpointKey = (NodeId, u32);

/// One reader or writer, as its participant announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The entity's id within its participant.
    pub entity: u32,
    /// Its topic.
    pub topic_id: u64,
    /// A reader (else a writer).
    pub reader: bool,
    /// The level it requests (reader) or offers (writer).
    pub level: DeliveryLevel,
    /// Its subscriber's or publisher's PARTITION (no names: the default partition).
    pub partition: Partition,
    /// Its LIVELINESS kind (a writer's offered, a reader's requested).
    pub liveliness: LivelinessKind,
    /// Its LIVELINESS lease in µs (`None`: infinite).
    pub lease_us: Option<u64>,
}

/// The tag a writer's samples carry for its PARTITION `names`: 0 for the default
/// partition (no names, or only `""`), else a 32-bit FNV-1a of the names in order
/// (never 0). Readers compare it with the tag of the names the writer announced.
pub fn partition_tag(names: &[String]) -> u32 {
    if names.iter().all(|n| n.is_empty()) {
        return 0;
    }
    let mut h: u32 = 0x811c_9dc5;
    for n in names {
        for b in n.bytes().chain([0xff]) {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h.max(1)
}

/// Bytes `names` take in an announcement; an error naming the bound when they exceed
/// [`PARTITION_BYTES_MAX`] (or a name exceeds `u16::MAX` bytes).
pub fn partition_bytes(names: &[String]) -> Result<usize, String> {
    if names.is_empty() {
        return Ok(0);
    }
    let n = 2 + names.iter().map(|n| 2 + n.len()).sum::<usize>();
    if n > PARTITION_BYTES_MAX || names.len() > usize::from(u16::MAX) {
        return Err(format!(
            "PARTITION names take {n} bytes in the built-in announcement (2 per name plus \
             the names, plus 2); at most {PARTITION_BYTES_MAX} (discovery::PARTITION_BYTES_MAX)"
        ));
    }
    Ok(n)
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
        partition_tag: 0,
        coherent: Coherent::No,
        level: DeliveryLevel::VolatileStore,
    };
    let mut head = [0u8; SAMPLE_HEADER_BYTES];
    h.encode(&mut head);
    let mut out = Vec::with_capacity(SAMPLE_HEADER_BYTES + BODY_BYTES);
    out.extend_from_slice(&head);
    out.extend_from_slice(&e.topic_id.to_le_bytes());
    out.push(if e.reader { ROLE_READER } else { ROLE_WRITER });
    out.push(e.level.to_u8());
    out.push(match e.liveliness {
        LivelinessKind::Automatic => 0,
        LivelinessKind::ManualByParticipant => 1,
        LivelinessKind::ManualByTopic => 2,
    });
    out.extend_from_slice(&e.lease_us.unwrap_or(u64::MAX).to_le_bytes());
    let names = &e.partition.name;
    if !names.is_empty() {
        out.extend_from_slice(&(names.len() as u16).to_le_bytes());
        for n in names {
            out.extend_from_slice(&(n.len() as u16).to_le_bytes());
            out.extend_from_slice(n.as_bytes());
        }
    }
    // Invariant: entity creation refused names over PARTITION_BYTES_MAX (partition_bytes).
    assert!(
        out.len() <= ANNOUNCEMENT_BYTES_MAX,
        "an announcement of {} bytes: its partitions were not checked",
        out.len()
    );
    out
}

/// The PARTITION names after an announcement's body (none: the default partition).
fn decode_partitions(rest: &[u8]) -> Result<Vec<String>, String> {
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let short = |what: &str| format!("a built-in announcement cut short in its partition {what}");
    let u16_at = |at: usize, what: &str| -> Result<usize, String> {
        rest.get(at..at + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
            .ok_or_else(|| short(what))
    };
    let count = u16_at(0, "count")?;
    let mut at = 2;
    let mut names = Vec::with_capacity(count.min(rest.len() / 2));
    for i in 0..count {
        let len = u16_at(at, "name length")?;
        let bytes = rest
            .get(at + 2..at + 2 + len)
            .ok_or_else(|| short(&format!("name {i}")))?;
        let name = std::str::from_utf8(bytes).map_err(|_| {
            format!("a built-in announcement whose partition name {i} is not UTF-8")
        })?;
        names.push(name.to_string());
        at += 2 + len;
    }
    if at != rest.len() {
        return Err(format!(
            "a built-in announcement with {} bytes after its partition names",
            rest.len() - at
        ));
    }
    Ok(names)
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
    if body.len() < BODY_BYTES || body.len() > ANNOUNCEMENT_BYTES_MAX - SAMPLE_HEADER_BYTES {
        return Err(format!(
            "a built-in announcement of {} bytes after its header: {BODY_BYTES} to {}",
            body.len(),
            ANNOUNCEMENT_BYTES_MAX - SAMPLE_HEADER_BYTES
        ));
    }
    let partition = Partition {
        name: decode_partitions(&body[BODY_BYTES..])?,
    };
    let liveliness = match body[10] {
        0 => LivelinessKind::Automatic,
        1 => LivelinessKind::ManualByParticipant,
        2 => LivelinessKind::ManualByTopic,
        k => return Err(format!("a built-in announcement with LIVELINESS kind {k}")),
    };
    let mut lease = [0u8; 8];
    lease.copy_from_slice(&body[11..19]);
    let lease_us = Some(u64::from_le_bytes(lease)).filter(|l| *l != u64::MAX);
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
            partition,
            liveliness,
            lease_us,
        }),
    )))
}
