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
//! LIVELINESS kind and lease (µs, `u64::MAX` for infinite), and the other
//! requested-versus-offered policies ([`Rxo`]: DURABILITY, PRESENTATION, DEADLINE,
//! LATENCY_BUDGET, OWNERSHIP, RELIABILITY and DESTINATION_ORDER kinds and durations), the
//! topic type's id ([`crate::declare::type_id`] of its DDS type name) and the structural
//! hash of its definition (`TopicType::TYPE_HASH`, or the run-time type's; 0 when
//! unknown) — and, when its publisher or subscriber is not in the default partition, the PARTITION
//! names (a `u16` count, then each name as a `u16` length and its UTF-8 bytes; at most
//! [`PARTITION_BYTES_MAX`] in all). The announcing node is the message's sender, as the
//! engine reports it.
//!
//! A reader and a writer of one topic name match only when their types are the same
//! ([`same_type`]): the same type name, and, when both know the structural hash of their
//! definition, the same hash (two programs that define one type name differently do not
//! match; either side's INCONSISTENT_TOPIC counts the other).
//!
//! ```
//! use spindle_dds_core::discovery::{decode, encode, partition_tag, Endpoint};
//! use spindle_qos::{DeliveryLevel, LivelinessKind, Partition};
//! let partition = Partition { name: vec!["fleet/*".into(), "ground".into()] };
//! let e = Endpoint { entity: 7, topic_id: 42, reader: true, level: DeliveryLevel::Atomic,
//!     partition, liveliness: LivelinessKind::ManualByTopic, lease_us: Some(250_000),
//!     rxo: Default::default(), type_id: 9, type_hash: Some(0x5eed) };
//! let bytes = encode(3, &e, true);
//! assert_eq!(decode(&bytes), Ok(Some((7, Some(e.clone())))));
//! // An unknown structural hash travels as 0.
//! let raw = Endpoint { type_hash: None, ..e.clone() };
//! assert_eq!(decode(&encode(3, &raw, true)), Ok(Some((7, Some(raw)))));
//! assert_eq!(decode(&encode(3, &e, false)), Ok(Some((7, None))));
//! assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "truncated");
//! // The default partition is tag 0 whichever way it is written.
//! assert_eq!(partition_tag(&[]), 0);
//! assert_eq!(partition_tag(&["".to_string()]), 0);
//! assert_ne!(partition_tag(&e.partition.name), 0);
//! ```

use spindle_qos::{
    incompatible_policies, DataReaderQos, DataWriterQos, DeliveryLevel, DestinationOrderKind,
    DurabilityKind, Duration, Liveliness, LivelinessKind, OwnershipKind, Partition, Presentation,
    PresentationAccessScope, PublisherQos, QosPolicyId, ReliabilityKind, SubscriberQos,
};
use spindle_topics::KeyHash;
use spindle_transport_rdma::NodeId;

use crate::sample::{Coherent, SampleHeader, SampleKind, SAMPLE_HEADER_BYTES};

/// The topic id of the built-in topic (outside what [`crate::topic_id`] gives user names
/// in practice: a name would have to hash to exactly this).
pub const BUILTIN_TOPIC_ID: u64 = 0xD5D5_0000_0000_0001;
/// Bytes of an announcement after its header (before any partition names): topic id,
/// role, level, LIVELINESS kind and lease, then [`Rxo`], then the type id and the type's
/// structural hash.
pub const BODY_BYTES: usize = 8 + 1 + 1 + 1 + 8 + RXO_BYTES + 8 + 8;
/// Bytes of [`Rxo`] in an announcement.
const RXO_BYTES: usize = 4 + 8 + 8 + 3;

/// The requested-versus-offered policies an endpoint announces besides its level and
/// LIVELINESS (a writer's offered, a reader's requested), for the DDS matching rules
/// ([`incompatible`]). Durations in µs, `None` for infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rxo {
    /// DURABILITY kind.
    pub durability: DurabilityKind,
    /// PRESENTATION (of its publisher or subscriber).
    pub presentation: Presentation,
    /// DEADLINE period.
    pub deadline_us: Option<u64>,
    /// LATENCY_BUDGET duration.
    pub latency_budget_us: Option<u64>,
    /// OWNERSHIP kind.
    pub ownership: OwnershipKind,
    /// RELIABILITY kind.
    pub reliability: ReliabilityKind,
    /// DESTINATION_ORDER kind.
    pub destination_order: DestinationOrderKind,
}

impl Rxo {
    /// The policies of a writer's (with its publisher's) or a reader's QoS.
    pub fn of(
        durability: DurabilityKind,
        presentation: Presentation,
        deadline: Duration,
        latency_budget: Duration,
        ownership: OwnershipKind,
        reliability: ReliabilityKind,
        destination_order: DestinationOrderKind,
    ) -> Rxo {
        let us = crate::common::announced_us;
        Rxo {
            durability,
            presentation,
            deadline_us: us(deadline),
            latency_budget_us: us(latency_budget),
            ownership,
            reliability,
            destination_order,
        }
    }
}

/// Why a writer does not serve a reader of its topic name (though they share a
/// partition, unless ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Another DDS type, or another definition of the same type name
    /// ([`same_type`]; INCONSISTENT_TOPIC, counted on the topic).
    Type,
    /// The first policy that fails the request/offer rules (REQUESTED_INCOMPATIBLE_QOS).
    Qos(QosPolicyId),
    /// The reader's participant ignores the writer (DDS `ignore_participant`,
    /// `ignore_publication`): counted nowhere.
    Ignored,
}

/// The first policy on which writer `w` fails what reader `r` requests (DDS 1.4's
/// request/offer rules, [`spindle_qos::incompatible_policies`], from what each announced),
/// or `None` when they match.
pub fn incompatible(w: &Endpoint, r: &Endpoint) -> Option<QosPolicyId> {
    let duration = |us: Option<u64>| {
        us.map_or(Duration::INFINITE, |us| {
            Duration::from_micros(i64::try_from(us).unwrap_or(i64::MAX))
        })
    };
    let liveliness = |e: &Endpoint| Liveliness {
        kind: e.liveliness,
        lease_duration: duration(e.lease_us),
    };
    // The writer's and the reader's QoS share these fields' names and types.
    macro_rules! announced {
        ($qos:expr, $e:expr) => {{
            let mut q = $qos;
            q.durability.kind = $e.rxo.durability;
            q.deadline.period = duration($e.rxo.deadline_us);
            q.latency_budget.duration = duration($e.rxo.latency_budget_us);
            q.ownership.kind = $e.rxo.ownership;
            q.liveliness = liveliness($e);
            q.reliability.kind = $e.rxo.reliability;
            q.destination_order.kind = $e.rxo.destination_order;
            q
        }};
    }
    let offered = announced!(DataWriterQos::default(), w);
    let requested = announced!(DataReaderQos::default(), r);
    let publisher = PublisherQos {
        presentation: w.rxo.presentation,
        ..Default::default()
    };
    let subscriber = SubscriberQos {
        presentation: r.rxo.presentation,
        ..Default::default()
    };
    incompatible_policies(&offered, &publisher, &requested, &subscriber)
        .first()
        .copied()
}
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
    /// Its other requested-versus-offered policies.
    pub rxo: Rxo,
    /// Its topic's type ([`crate::declare::type_id`] of the DDS type name): a reader and a
    /// writer of one topic name match only with the same type (else INCONSISTENT_TOPIC).
    pub type_id: u64,
    /// The structural hash of its topic type's definition (`TopicType::TYPE_HASH`, or
    /// the run-time type's), `None` when unknown (a hand-written type, raw CDR without a
    /// run-time type): when both sides know theirs, they match only if equal
    /// ([`same_type`]). Announced as a `u64`, 0 for `None` (a real hash is never 0).
    pub type_hash: Option<u64>,
}

/// Whether two endpoints' topic types are one type, the rule every match uses: the same
/// DDS type name (`type_id`, [`crate::declare::type_id`]) and, when both know the
/// structural hash of their definition, the same hash. When either does not know it, the
/// name decides (a hand-written type or raw CDR matches any definition of its name).
///
/// ```
/// use spindle_dds_core::discovery::same_type;
/// assert!(same_type((7, Some(1)), (7, Some(1))));
/// assert!(!same_type((7, Some(1)), (7, Some(2))), "one name, two definitions");
/// assert!(same_type((7, None), (7, Some(2))), "one side does not know: the name decides");
/// assert!(!same_type((7, None), (8, None)), "two names");
/// ```
pub fn same_type(a: (u64, Option<u64>), b: (u64, Option<u64>)) -> bool {
    a.0 == b.0
        && match (a.1, b.1) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        }
}

impl Endpoint {
    /// Its type's identity for [`same_type`]: the type name's id and the structural hash.
    pub fn type_identity(&self) -> (u64, Option<u64>) {
        (self.type_id, self.type_hash)
    }
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
    let x = &e.rxo;
    out.extend_from_slice(&[
        x.durability as u8,
        x.presentation.access_scope as u8,
        u8::from(x.presentation.coherent_access),
        u8::from(x.presentation.ordered_access),
    ]);
    out.extend_from_slice(&x.deadline_us.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&x.latency_budget_us.unwrap_or(u64::MAX).to_le_bytes());
    out.extend_from_slice(&[
        x.ownership as u8,
        x.reliability as u8,
        x.destination_order as u8,
    ]);
    out.extend_from_slice(&e.type_id.to_le_bytes());
    // 0: unknown. A real hash is never 0 (spindle_idl's type_hash); a hand-written
    // Some(0) would read back as unknown, which only relaxes its matching to the name.
    out.extend_from_slice(&e.type_hash.unwrap_or(0).to_le_bytes());
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

/// The [`Rxo`] of an announcement (`b` is exactly [`RXO_BYTES`] long).
fn decode_rxo(b: &[u8]) -> Result<Rxo, String> {
    let bad = |what: &str, v: u8| format!("a built-in announcement with {what} {v}");
    let u64_at = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        Some(u64::from_le_bytes(w)).filter(|v| *v != u64::MAX)
    };
    let flag = |v: u8, what: &str| match v {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(bad(what, v)),
    };
    Ok(Rxo {
        durability: match b[0] {
            0 => DurabilityKind::Volatile,
            1 => DurabilityKind::TransientLocal,
            2 => DurabilityKind::Transient,
            3 => DurabilityKind::Persistent,
            v => return Err(bad("DURABILITY kind", v)),
        },
        presentation: Presentation {
            access_scope: match b[1] {
                0 => PresentationAccessScope::Instance,
                1 => PresentationAccessScope::Topic,
                2 => PresentationAccessScope::Group,
                v => return Err(bad("PRESENTATION scope", v)),
            },
            coherent_access: flag(b[2], "PRESENTATION coherent_access")?,
            ordered_access: flag(b[3], "PRESENTATION ordered_access")?,
        },
        deadline_us: u64_at(4),
        latency_budget_us: u64_at(12),
        ownership: match b[20] {
            0 => OwnershipKind::Shared,
            1 => OwnershipKind::Exclusive,
            v => return Err(bad("OWNERSHIP kind", v)),
        },
        reliability: match b[21] {
            0 => ReliabilityKind::BestEffort,
            1 => ReliabilityKind::Reliable,
            v => return Err(bad("RELIABILITY kind", v)),
        },
        destination_order: match b[22] {
            0 => DestinationOrderKind::ByReceptionTimestamp,
            1 => DestinationOrderKind::BySourceTimestamp,
            v => return Err(bad("DESTINATION_ORDER kind", v)),
        },
    })
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
    let rxo = decode_rxo(&body[19..19 + RXO_BYTES])?;
    let mut ty = [0u8; 8];
    ty.copy_from_slice(&body[19 + RXO_BYTES..27 + RXO_BYTES]);
    let mut hash = [0u8; 8];
    hash.copy_from_slice(&body[27 + RXO_BYTES..BODY_BYTES]);
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
            rxo,
            type_id: u64::from_le_bytes(ty),
            type_hash: Some(u64::from_le_bytes(hash)).filter(|h| *h != 0),
        }),
    )))
}
